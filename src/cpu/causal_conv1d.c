/* causal_conv1d on the CPU (spec §6.2), fp32 math, vectorised over channels (Mamba-2 keeps
 * x channel-last, so a block of channels at one time step is contiguous).
 *   forward:  tasks (batch row, channel block); a ring of the last W input columns.
 *   backward: tasks are channel blocks over every batch row, so dweight and dbias are
 *             summed in one fixed order (batch, time) whatever the thread count. Time is
 *             cut into tiles; each tile recomputes the W−1 gradients past its end.
 *   update:   tasks (batch row, channel block); each channel's state row is read whole
 *             before it is written, so the pool can be updated in place. */
#include <math.h>
#include <string.h>

#include "cpu_common.h"
#include "ssmi_cpu_layer.h"

#define CONV_CB 64   /* channels per block */
#define CONV_TILE 64 /* time steps per backward tile */

static inline float sigm(float v) { return 1.0f / (1.0f + expf(-v)); }
static inline float act_f(int silu, float v) { return silu ? v * sigm(v) : v; }
static inline float act_grad_f(int silu, float v) {
    if (!silu) return 1.0f;
    const float s = sigm(v);
    return s * (1.0f + v * (1.0f - s));
}
static inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

typedef struct conv_job {
    const ssm_conv1d_params * p;
    const ssmi_conv1d_dims *  d;
    const ssmi_cpu_kernels *  k;
    const ssm_tensor *        x, *w, *bias, *seq, *init; /* forward-family inputs */
    const void *              args;
    int64_t                   nblocks;
    float *                   scratch;
    int64_t                   scratch_floats;
} conv_job;

static float * thread_buf(const conv_job * job, int32_t thread) { return job->scratch + thread * job->scratch_floats; }

/* weight transposed to wT[k][c] and the bias of channels [c0, c0+cb). */
static void load_weights(const conv_job * job, int64_t c0, int64_t cb, float * wT, float * bias) {
    for (int64_t k = 0; k < job->d->width; ++k)
        job->k->load_row(wT + k * CONV_CB, job->w->data, job->w->dtype, ssmi_off2(job->w, c0, k), job->w->strides[0], cb);
    if (ssmi_present(job->bias)) job->k->load_row(bias, job->bias->data, job->bias->dtype, ssmi_off1(job->bias, c0),
                                                  job->bias->strides[0], cb);
    else memset(bias, 0, (size_t) cb * sizeof(float));
}

/* xin[b, c0.., tau] for tau ≥ −(W−1) (initial states or 0 below 0). */
static void load_xin(const conv_job * job, int64_t b, int64_t c0, int64_t cb, int64_t tau, float * dst) {
    if (tau >= 0) job->k->load_row(dst, job->x->data, job->x->dtype, ssmi_off3(job->x, b, c0, tau), job->x->strides[1], cb);
    else if (ssmi_present(job->init) && tau >= -(job->d->width - 1))
        job->k->load_row(dst, job->init->data, job->init->dtype, ssmi_off3(job->init, b, c0, job->d->width - 1 + tau),
                         job->init->strides[1], cb);
    else memset(dst, 0, (size_t) cb * sizeof(float));
}

static inline int64_t seq_at(const conv_job * job, int64_t b, int64_t t) { return ssmi_cpu_seq_at(job->seq, b, t); }

/* Does input tau feed token t? */
static inline int feeds(const conv_job * job, int64_t b, int64_t tau, int64_t t) {
    if (!ssmi_present(job->seq)) return 1;
    return tau >= 0 && seq_at(job, b, tau) == seq_at(job, b, t);
}
static inline int padding(const conv_job * job, int64_t b, int64_t t) {
    return ssmi_present(job->seq) && seq_at(job, b, t) < 0;
}
static inline int64_t ring_at(int64_t tau, int64_t W) { return ((tau % W) + W) % W; }

/* ---- forward ---------------------------------------------------------------------------- */
static void fwd_task(void * arg, int64_t task, int32_t thread) {
    const conv_job *               job = (const conv_job *) arg;
    const ssm_causal_conv1d_args * a   = (const ssm_causal_conv1d_args *) job->args;
    const int64_t                  W = job->d->width, S = job->d->seqlen;
    const int64_t                  b = task / job->nblocks, c0 = (task % job->nblocks) * CONV_CB;
    const int64_t                  cb = imin(CONV_CB, job->d->dim - c0);
    float *                        s  = thread_buf(job, thread);
    float *wT = s, *bias = wT + W * CONV_CB, *pre = bias + CONV_CB, *ring = pre + CONV_CB;
    load_weights(job, c0, cb, wT, bias);
    for (int64_t tau = -(W - 1); tau < 0; ++tau) load_xin(job, b, c0, cb, tau, ring + ring_at(tau, W) * CONV_CB);
    for (int64_t t = 0; t < S; ++t) {
        load_xin(job, b, c0, cb, t, ring + ring_at(t, W) * CONV_CB);
        if (padding(job, b, t)) memset(pre, 0, (size_t) cb * sizeof(float));
        else {
            memcpy(pre, bias, (size_t) cb * sizeof(float));
            for (int64_t k = 0; k < W; ++k) {
                const int64_t tau = t - (W - 1) + k;
                if (!feeds(job, b, tau, t)) continue;
                const float * xr = ring + ring_at(tau, W) * CONV_CB;
                const float * wk = wT + k * CONV_CB;
                for (int64_t c = 0; c < cb; ++c) pre[c] += wk[c] * xr[c];
            }
            for (int64_t c = 0; c < cb; ++c) pre[c] = act_f(job->p->activation, pre[c]);
        }
        job->k->store_row(a->out.data, a->out.dtype, ssmi_off3(&a->out, b, c0, t), a->out.strides[1], pre, cb);
    }
    if (ssmi_present(&a->final_states))
        for (int64_t j = 0; j < W - 1; ++j)
            job->k->store_row(a->final_states.data, a->final_states.dtype, ssmi_off3(&a->final_states, b, c0, j),
                              a->final_states.strides[1], ring + ring_at(S - (W - 1) + j, W) * CONV_CB, cb);
}

static void init_job(conv_job * job, ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * d) {
    memset(job, 0, sizeof *job);
    job->p       = p;
    job->d       = d;
    job->k       = ssmi_cpu_kernels_for(ctx);
    job->nblocks = (d->dim + CONV_CB - 1) / CONV_CB;
}

ssm_status ssmi_cpu_causal_conv1d(ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * d,
                                  const ssm_causal_conv1d_args * a) {
    conv_job job;
    init_job(&job, ctx, p, d);
    if (d->batch == 0 || job.nblocks == 0) return SSM_STATUS_OK;
    job.x = &a->x, job.w = &a->weight, job.bias = &a->bias, job.seq = &a->seq_idx, job.init = &a->initial_states;
    job.args           = a;
    job.scratch_floats = (2 * d->width + 2) * CONV_CB;
    job.scratch        = ssmi_cpu_thread_scratch(ctx, "causal_conv1d", job.scratch_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, d->batch * job.nblocks, fwd_task, &job);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}

/* ---- backward --------------------------------------------------------------------------- */

/* Row tau of the dxin tile: dx (tau ≥ 0) or dinitial_states (tau < 0). */
static void store_dxin(const conv_job * job, const ssm_causal_conv1d_bwd_args * a, int64_t b, int64_t c0, int64_t cb,
                       int64_t tau, const float * row) {
    if (tau >= 0) {
        if (ssmi_present(&a->dx))
            job->k->store_row(a->dx.data, a->dx.dtype, ssmi_off3(&a->dx, b, c0, tau), a->dx.strides[1], row, cb);
    } else if (ssmi_present(&a->dinitial_states)) {
        job->k->store_row(a->dinitial_states.data, a->dinitial_states.dtype,
                          ssmi_off3(&a->dinitial_states, b, c0, job->d->width - 1 + tau), a->dinitial_states.strides[1],
                          row, cb);
    }
}

static void bwd_task(void * arg, int64_t task, int32_t thread) {
    const conv_job *                   job = (const conv_job *) arg;
    const ssm_causal_conv1d_bwd_args * a   = (const ssm_causal_conv1d_bwd_args *) job->args;
    const int64_t                      W = job->d->width, S = job->d->seqlen, U = CONV_TILE;
    const int64_t                      c0 = task * CONV_CB, cb = imin(CONV_CB, job->d->dim - c0);
    float *                            s  = thread_buf(job, thread);
    float *wT = s, *bias = wT + W * CONV_CB, *dw = bias + CONV_CB, *db = dw + W * CONV_CB, *row = db + CONV_CB;
    float *xb = row + CONV_CB;                  /* xin[tau'] for tau' in [u0−(W−1), u1+W−1): U+2W−2 rows */
    float *gb = xb + (U + 2 * W - 2) * CONV_CB; /* gpre[t] for t in [u0, u1+W−1): U+W−1 rows           */
    load_weights(job, c0, cb, wT, bias);
    memset(dw, 0, (size_t) (W * CONV_CB) * sizeof(float));
    memset(db, 0, CONV_CB * sizeof(float));
    for (int64_t b = 0; b < job->d->batch; ++b) {
        /* dxin is defined on [−(W−1), S): tiles of U rows */
        for (int64_t u0 = -(W - 1); u0 < S; u0 += U) {
            const int64_t u1 = imin(u0 + U, S);
            const int64_t x0 = u0 - (W - 1), x1 = u1 + W - 1;
            for (int64_t tau = x0; tau < x1; ++tau) {
                float * dst = xb + (tau - x0) * CONV_CB;
                if (tau < S) load_xin(job, b, c0, cb, tau, dst);
                else memset(dst, 0, (size_t) cb * sizeof(float));
            }
            /* gpre on [max(0,u0), min(S, u1+W−1)) */
            const int64_t g0 = imax(0, u0), g1 = imin(S, x1);
            for (int64_t t = g0; t < g1; ++t) {
                float * g = gb + (t - u0) * CONV_CB;
                if (padding(job, b, t)) {
                    memset(g, 0, (size_t) cb * sizeof(float));
                    continue;
                }
                memcpy(g, bias, (size_t) cb * sizeof(float));
                for (int64_t k = 0; k < W; ++k) {
                    const int64_t tau = t - (W - 1) + k;
                    if (!feeds(job, b, tau, t)) continue;
                    const float * xr = xb + (tau - x0) * CONV_CB;
                    for (int64_t c = 0; c < cb; ++c) g[c] += wT[k * CONV_CB + c] * xr[c];
                }
                job->k->load_row(row, a->dout.data, a->dout.dtype, ssmi_off3(&a->dout, b, c0, t), a->dout.strides[1],
                                 cb);
                for (int64_t c = 0; c < cb; ++c) g[c] = row[c] * act_grad_f(job->p->activation, g[c]);
            }
            /* dweight, dbias from this tile's own tokens, in time order */
            for (int64_t t = g0; t < u1; ++t) {
                const float * g = gb + (t - u0) * CONV_CB;
                for (int64_t c = 0; c < cb; ++c) db[c] += g[c];
                for (int64_t k = 0; k < W; ++k) {
                    const int64_t tau = t - (W - 1) + k;
                    if (!feeds(job, b, tau, t)) continue;
                    const float * xr = xb + (tau - x0) * CONV_CB;
                    for (int64_t c = 0; c < cb; ++c) dw[k * CONV_CB + c] += g[c] * xr[c];
                }
            }
            /* dxin[tau] = Σ_k w[k]·gpre[tau+W−1−k] (+ dfinal_states) */
            for (int64_t tau = u0; tau < u1; ++tau) {
                memset(row, 0, (size_t) cb * sizeof(float));
                for (int64_t k = 0; k < W; ++k) {
                    const int64_t t = tau + (W - 1) - k;
                    if (t < 0 || t >= S || !feeds(job, b, tau, t)) continue;
                    const float * g = gb + (t - u0) * CONV_CB;
                    for (int64_t c = 0; c < cb; ++c) row[c] += wT[k * CONV_CB + c] * g[c];
                }
                const int64_t j = tau - (S - (W - 1));
                if (ssmi_present(&a->dfinal_states) && j >= 0 && j < W - 1) {
                    for (int64_t c = 0; c < cb; ++c)
                        row[c] += ssmi_get_f32(&a->dfinal_states, ssmi_off3(&a->dfinal_states, b, c0 + c, j));
                }
                store_dxin(job, a, b, c0, cb, tau, row);
            }
        }
    }
    if (ssmi_present(&a->dweight))
        for (int64_t k = 0; k < W; ++k)
            job->k->store_row(a->dweight.data, a->dweight.dtype, ssmi_off2(&a->dweight, c0, k), a->dweight.strides[0],
                              dw + k * CONV_CB, cb);
    if (ssmi_present(&a->dbias))
        job->k->store_row(a->dbias.data, a->dbias.dtype, ssmi_off1(&a->dbias, c0), a->dbias.strides[0], db, cb);
}

ssm_status ssmi_cpu_causal_conv1d_bwd(ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * d,
                                      const ssm_causal_conv1d_bwd_args * a) {
    conv_job job;
    init_job(&job, ctx, p, d);
    if (job.nblocks == 0) return SSM_STATUS_OK;
    job.x = &a->x, job.w = &a->weight, job.bias = &a->bias, job.seq = &a->seq_idx, job.init = &a->initial_states;
    job.args           = a;
    const int64_t W    = d->width;
    job.scratch_floats = (2 * W + 3 + (CONV_TILE + 2 * W - 2) + (CONV_TILE + W - 1)) * CONV_CB;
    job.scratch        = ssmi_cpu_thread_scratch(ctx, "causal_conv1d_bwd", job.scratch_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, job.nblocks, bwd_task, &job);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}

/* ---- decode update ------------------------------------------------------------------------ */
typedef struct update_ctx {
    const ssm_causal_conv1d_update_args * a;
    const ssmi_conv1d_dims *              d;
    const ssmi_cpu_kernels *              k;
    int                                   silu, has_fin;
    int64_t                               nblocks;
    float *                               scratch;
    int64_t                               scratch_floats;
} update_ctx;

static int64_t slot_of(const ssm_tensor * idx, int64_t b) {
    return ssmi_present(idx) ? ssmi_get_i64(idx, ssmi_off1(idx, b)) : b;
}

static void update_task(void * arg, int64_t task, int32_t thread) {
    const update_ctx *                    u = (const update_ctx *) arg;
    const ssm_causal_conv1d_update_args * a = u->a;
    const int64_t                         W = u->d->width, L = u->d->state_len;
    const int64_t                         b = task / u->nblocks, c0 = (task % u->nblocks) * CONV_CB;
    const int64_t                         cb   = imin(CONV_CB, u->d->dim - c0);
    const int64_t                         slot = slot_of(&a->state_batch_indices, b);
    float *                               s    = u->scratch + thread * u->scratch_floats;
    float *o = s, *xr = s + CONV_CB, *win = s + 2 * CONV_CB; /* win: L+1 values of one channel */
    if (slot < 0) {
        memset(o, 0, (size_t) cb * sizeof(float));
        u->k->store_row(a->out.data, a->out.dtype, ssmi_off2(&a->out, b, c0), a->out.strides[1], o, cb);
        return;
    }
    u->k->load_row(xr, a->x.data, a->x.dtype, ssmi_off2(&a->x, b, c0), a->x.strides[1], cb);
    const ssm_tensor * st  = &a->conv_state;
    const ssm_tensor * fin = &a->final_conv_state;
    for (int64_t c = 0; c < cb; ++c) {
        const int64_t d = c0 + c;
        u->k->load_row(win, st->data, st->dtype, ssmi_off3(st, slot, d, 0), st->strides[2], L);
        win[L]    = xr[c];
        float pre = ssmi_present(&a->bias) ? ssmi_get_f32(&a->bias, ssmi_off1(&a->bias, d)) : 0.0f;
        for (int64_t k = 0; k < W; ++k) pre += ssmi_get_f32(&a->weight, ssmi_off2(&a->weight, d, k)) * win[L + 1 - W + k];
        o[c] = act_f(u->silu, pre);
        if (u->has_fin) u->k->store_row(fin->data, fin->dtype, ssmi_off3(fin, slot, d, 0), fin->strides[2], win + 1, L);
    }
    u->k->store_row(a->out.data, a->out.dtype, ssmi_off2(&a->out, b, c0), a->out.strides[1], o, cb);
}

typedef struct copy_ctx {
    const ssm_causal_conv1d_update_args * a;
    const int64_t *                       slots;
    int64_t                               dim, len;
} copy_ctx;

static void copy_task(void * arg, int64_t task, int32_t thread) {
    (void) thread;
    const copy_ctx *   c   = (const copy_ctx *) arg;
    const ssm_tensor * st  = &c->a->conv_state;
    const ssm_tensor * fin = &c->a->final_conv_state;
    const int64_t      slot = c->slots[task];
    /* values are copied exactly: one rounding from float64 at most */
    for (int64_t d = 0; d < c->dim; ++d)
        for (int64_t j = 0; j < c->len; ++j)
            ssmi_set_f64(fin, ssmi_off3(fin, slot, d, j), ssmi_get_f64(st, ssmi_off3(st, slot, d, j)));
}

/* A separate final_conv_state is the whole pool after the update: copy the unused slots. */
static ssm_status copy_unused(ssm_context * ctx, const ssmi_conv1d_dims * d, const ssm_causal_conv1d_update_args * a) {
    if (d->slots == 0 || d->state_len == 0 || d->dim == 0) return SSM_STATUS_OK;
    const size_t bytes = (size_t) d->slots * (sizeof(int64_t) + 1);
    int64_t *    list  = (int64_t *) ssmi_alloc(ctx, bytes);
    SSM_RETURN_IF(list == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "causal_conv1d_update: could not allocate %zu bytes of scratch", bytes);
    unsigned char * used = (unsigned char *) (list + d->slots);
    memset(used, 0, (size_t) d->slots);
    for (int64_t b = 0; b < d->batch; ++b) {
        const int64_t slot = slot_of(&a->state_batch_indices, b);
        if (slot >= 0) used[slot] = 1;
    }
    int64_t n = 0;
    for (int64_t s = 0; s < d->slots; ++s)
        if (!used[s]) list[n++] = s;
    if (n > 0) {
        copy_ctx c = { a, list, d->dim, d->state_len };
        ssmi_parallel_for(ctx, n, copy_task, &c);
    }
    ssmi_free(ctx, list);
    return SSM_STATUS_OK;
}

ssm_status ssmi_cpu_causal_conv1d_update(ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * d,
                                         const ssm_causal_conv1d_update_args * a) {
    const ssmi_cpu_kernels * k       = ssmi_cpu_kernels_for(ctx);
    const int                has_fin = ssmi_present(&a->final_conv_state);
    if (has_fin && a->final_conv_state.data != a->conv_state.data) SSM_FORWARD_IF_ERROR(copy_unused(ctx, d, a));
    update_ctx u;
    memset(&u, 0, sizeof u);
    u.a = a, u.d = d, u.k = k, u.silu = p->activation == 1, u.has_fin = has_fin;
    u.nblocks = (d->dim + CONV_CB - 1) / CONV_CB;
    if (d->batch == 0 || u.nblocks == 0) return SSM_STATUS_OK;
    u.scratch_floats = 2 * CONV_CB + ssmi_cpu_lines(d->state_len + 1);
    u.scratch        = ssmi_cpu_thread_scratch(ctx, "causal_conv1d_update", u.scratch_floats);
    if (u.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, d->batch * u.nblocks, update_task, &u);
    ssmi_free(ctx, u.scratch);
    return SSM_STATUS_OK;
}
