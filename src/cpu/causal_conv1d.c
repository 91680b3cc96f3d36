/* causal_conv1d on the CPU (spec §6.2), fp32 math in the row kernels of kernels/layer,
 * vectorised over channels (Mamba-2 keeps x channel-last, so a block of channels at one
 * time step is contiguous; other layouts go through load_row/store_row).
 *   The (D, W) weight is transposed once per call to wT[k][c] (and the bias loaded).
 *   forward:  tasks (batch row, time tile, channel block); rows of f32 channel-last inputs
 *             and outputs are used in place, others are converted through scratch rows.
 *   backward: the same tasks. Each writes its tile's dweight/dbias partial sums; a second
 *             pass adds the partials per channel block in (batch, tile) order. The tiles
 *             depend only on (B, S), so every thread count gives the same bits. Each tile
 *             recomputes the W−1 pre-activation gradients past its end.
 *   update:   tasks (batch row, channel block); each state block is read whole before it
 *             is written, so the pool can be updated in place. It uses the forward's row
 *             kernel, so S updates give the forward's bits. */
#include <math.h>
#include <string.h>

#include "cpu_common.h"
#include "ssmi_cpu_layer.h"

#define CONV_CB_MAX 4096  /* channels per block at most: whole rows stream best */
#define CONV_TILE 64      /* time steps per tile (at least) */
#define CONV_MAX_TILES 128 /* tiles of the backward over all batch rows (bounds the partial sums) */

static inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

/* Rows of an f32 tensor whose channels (dim 1) are contiguous are used in place. */
static inline int direct_rows(const ssm_tensor * t) {
    return ssmi_present(t) && t->dtype == SSM_DTYPE_F32 && t->strides[1] == 1;
}

typedef struct conv_job {
    const ssm_conv1d_params * p;
    const ssmi_conv1d_dims *  d;
    const ssmi_cpu_kernels *  k;
    const ssmi_cpu_layer_kernels * lk;
    const ssm_tensor *        x, *seq, *init; /* forward-family inputs */
    const void *              args;
    int                       silu;
    int64_t                   nblocks, cbs;         /* channel blocks, channels per block (whole lines) */
    int64_t                   tile, tiles;          /* time tile length, tiles per batch row */
    int64_t                   ld;                   /* row stride of wT and of the partial sums */
    float *                   wT, *bias;            /* prepared weights: wT[k·ld + c], bias (NULL = none) */
    float *                   partial;              /* backward: (B·tiles, W+1, ld) dweight/dbias partials */
    float *                   scratch;
    int64_t                   scratch_floats;
} conv_job;

static float * thread_buf(const conv_job * job, int32_t thread) { return job->scratch + thread * job->scratch_floats; }

/* wT and bias for all D channels (one block of (W+1)·ld floats). */
static ssm_status prepare_weights(ssm_context * ctx, conv_job * job, const ssm_tensor * w, const ssm_tensor * bias,
                                  const char * op) {
    const int64_t W = job->d->width, D = job->d->dim;
    job->ld         = ssmi_cpu_lines(D);
    const size_t bytes = (size_t) ((W + 1) * job->ld) * sizeof(float);
    job->wT            = (float *) ssmi_alloc(ctx, bytes);
    SSM_RETURN_IF(job->wT == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: could not allocate %zu bytes of scratch", op,
                  bytes);
    if (w->dtype == SSM_DTYPE_F32)
        job->lk->conv_weights(D, W, (const float *) w->data, w->strides[0], w->strides[1], job->wT, job->ld);
    else
        for (int64_t k = 0; k < W; ++k)
            job->k->load_row(job->wT + k * job->ld, w->data, w->dtype, ssmi_off2(w, 0, k), w->strides[0], D);
    job->bias = NULL;
    if (ssmi_present(bias)) {
        job->bias = job->wT + W * job->ld;
        job->k->load_row(job->bias, bias->data, bias->dtype, ssmi_off1(bias, 0), bias->strides[0], D);
    }
    return SSM_STATUS_OK;
}

/* xin[b, c0.., tau] for tau ≥ −(W−1): x in place or converted into buf, the initial
 * states below 0, zeros without them. */
static const float * xin_row(const conv_job * job, int64_t b, int64_t c0, int64_t cb, int64_t tau, float * buf) {
    const ssm_tensor * x = job->x;
    if (tau >= 0) {
        if (direct_rows(x)) return (const float *) x->data + ssmi_off3(x, b, c0, tau);
        job->k->load_row(buf, x->data, x->dtype, ssmi_off3(x, b, c0, tau), x->strides[1], cb);
    } else if (ssmi_present(job->init)) {
        job->k->load_row(buf, job->init->data, job->init->dtype, ssmi_off3(job->init, b, c0, job->d->width - 1 + tau),
                         job->init->strides[1], cb);
    } else {
        memset(buf, 0, (size_t) cb * sizeof(float));
    }
    return buf;
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

/* The taps of token t from a ring of W rows (input tau at ring[tau mod W]), NULL for the
 * inputs that do not feed it. */
static inline int64_t ring_slot(int64_t tau, int64_t W) { return ((tau % W) + W) % W; }
static void token_taps(const conv_job * job, int64_t b, int64_t t, const float * const * ring, int64_t W,
                       const float ** taps) {
    for (int64_t k = 0; k < W; ++k) {
        const int64_t tau = t - (W - 1) + k;
        taps[k]           = feeds(job, b, tau, t) ? ring[ring_slot(tau, W)] : NULL;
    }
}

/* Task index → (batch row, tile, channel block). */
static void task_coords(const conv_job * job, int64_t task, int64_t * b, int64_t * tile, int64_t * c0, int64_t * cb) {
    const int64_t blk = task % job->nblocks, bt = task / job->nblocks;
    *b    = bt / job->tiles;
    *tile = bt % job->tiles;
    *c0   = blk * job->cbs;
    *cb   = imin(job->cbs, job->d->dim - *c0);
}

/* Tiles of at least CONV_TILE steps, at most about CONV_MAX_TILES over all batch rows
 * (a function of B and S only); one empty tile when S = 0 (it writes the final states). */
static void set_tiles(conv_job * job) {
    const int64_t B = job->d->batch, S = job->d->seqlen;
    const int64_t per = B > 0 ? (B * S + CONV_MAX_TILES - 1) / CONV_MAX_TILES : 0;
    job->tile         = imax(CONV_TILE, per);
    job->tiles        = imax(1, (S + job->tile - 1) / job->tile);
}

/* Scratch layout per thread: `rows` pointers + W tap pointers (in whole cache lines),
 * then the float rows. Pointers live in the allocator's untyped memory. */
static int64_t ptr_floats(int64_t nptr) { return ssmi_cpu_lines(nptr * (int64_t) (sizeof(void *) / sizeof(float))); }

/* ---- forward ---------------------------------------------------------------------------- */
static void fwd_task(void * arg, int64_t task, int32_t thread) {
    const conv_job *               job = (const conv_job *) arg;
    const ssm_causal_conv1d_args * a   = (const ssm_causal_conv1d_args *) job->args;
    const int64_t                  W = job->d->width, S = job->d->seqlen, CB = job->cbs;
    int64_t                        b, tile, c0, cb;
    task_coords(job, task, &b, &tile, &c0, &cb);
    const int64_t  t0 = tile * job->tile, t1 = imin(t0 + job->tile, S);
    float *        s    = thread_buf(job, thread);
    const float ** ring = (const float **) (void *) s; /* input tau at ring[tau mod W] */
    const float ** taps = ring + W;
    float *        xb   = s + ptr_floats(2 * W);       /* W converted rows */
    float *        ob   = xb + W * CB;
    for (int64_t tau = t0 - (W - 1); tau < t0; ++tau)
        ring[ring_slot(tau, W)] = xin_row(job, b, c0, cb, tau, xb + ring_slot(tau, W) * CB);
    const int out_direct = direct_rows(&a->out);
    for (int64_t t = t0; t < t1; ++t) {
        ring[ring_slot(t, W)] = xin_row(job, b, c0, cb, t, xb + ring_slot(t, W) * CB);
        float * o = out_direct ? (float *) a->out.data + ssmi_off3(&a->out, b, c0, t) : ob;
        if (padding(job, b, t)) memset(o, 0, (size_t) cb * sizeof(float));
        else {
            token_taps(job, b, t, ring, W, taps);
            job->lk->conv_row(cb, W, taps, job->wT + c0, job->ld, job->bias ? job->bias + c0 : NULL, job->silu, o);
        }
        if (!out_direct)
            job->k->store_row(a->out.data, a->out.dtype, ssmi_off3(&a->out, b, c0, t), a->out.strides[1], o, cb);
    }
    if (ssmi_present(&a->final_states) && t1 == S) /* the ring holds inputs [S−(W−1), S) */
        for (int64_t j = 0; j < W - 1; ++j)
            job->k->store_row(a->final_states.data, a->final_states.dtype, ssmi_off3(&a->final_states, b, c0, j),
                              a->final_states.strides[1], ring[ring_slot(S - (W - 1) + j, W)], cb);
}

static void init_job(conv_job * job, ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * d) {
    memset(job, 0, sizeof *job);
    job->p       = p;
    job->d       = d;
    job->k       = ssmi_cpu_kernels_for(ctx);
    job->lk      = ssmi_cpu_layer_kernels_for(ctx);
    job->silu    = p->activation == 1;
    job->nblocks = (d->dim + CONV_CB_MAX - 1) / CONV_CB_MAX;
    job->cbs     = job->nblocks > 0 ? ssmi_cpu_lines((d->dim + job->nblocks - 1) / job->nblocks) : 0;
    set_tiles(job);
}

static void free_job(ssm_context * ctx, conv_job * job) {
    ssmi_free(ctx, job->scratch);
    ssmi_free(ctx, job->partial);
    ssmi_free(ctx, job->wT);
}

ssm_status ssmi_cpu_causal_conv1d(ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * d,
                                  const ssm_causal_conv1d_args * a) {
    conv_job job;
    init_job(&job, ctx, p, d);
    if (d->batch == 0 || job.nblocks == 0) return SSM_STATUS_OK;
    job.x = &a->x, job.seq = &a->seq_idx, job.init = &a->initial_states;
    job.args = a;
    SSM_FORWARD_IF_ERROR(prepare_weights(ctx, &job, &a->weight, &a->bias, "causal_conv1d"));
    const int64_t W    = d->width;
    job.scratch_floats = ptr_floats(2 * W) + (W + 1) * job.cbs;
    job.scratch        = ssmi_cpu_thread_scratch(ctx, "causal_conv1d", job.scratch_floats);
    if (job.scratch == NULL) {
        free_job(ctx, &job);
        return SSM_STATUS_OUT_OF_MEMORY;
    }
    ssmi_parallel_for(ctx, d->batch * job.tiles * job.nblocks, fwd_task, &job);
    free_job(ctx, &job);
    return SSM_STATUS_OK;
}

/* ---- backward --------------------------------------------------------------------------- */

/* Row tau of dxin: dx (tau ≥ 0) or dinitial_states (tau < 0); `row` is already in place
 * when dx is written directly. */
static void store_dxin(const conv_job * job, const ssm_causal_conv1d_bwd_args * a, int64_t b, int64_t c0, int64_t cb,
                       int64_t tau, const float * row) {
    if (tau >= 0) {
        if (ssmi_present(&a->dx) && !direct_rows(&a->dx))
            job->k->store_row(a->dx.data, a->dx.dtype, ssmi_off3(&a->dx, b, c0, tau), a->dx.strides[1], row, cb);
    } else if (ssmi_present(&a->dinitial_states)) {
        job->k->store_row(a->dinitial_states.data, a->dinitial_states.dtype,
                          ssmi_off3(&a->dinitial_states, b, c0, job->d->width - 1 + tau), a->dinitial_states.strides[1],
                          row, cb);
    }
}

/* One tile [u0, u1) of one batch row and channel block, streaming over time with rings of
 * W input rows and W gradient rows. At step t: gpre[t] (t < S), the dweight/dbias partial
 * of token t (t < u1), then dxin[t − (W−1)], whose gradients gpre[t−(W−1) .. t] are known.
 * Tile 0 also produces dxin[−(W−1) .. −1] (dinitial_states). */
static void bwd_task(void * arg, int64_t task, int32_t thread) {
    const conv_job *                   job = (const conv_job *) arg;
    const ssm_causal_conv1d_bwd_args * a   = (const ssm_causal_conv1d_bwd_args *) job->args;
    const int64_t                      W = job->d->width, S = job->d->seqlen, CB = job->cbs;
    int64_t                            b, tile, c0, cb;
    task_coords(job, task, &b, &tile, &c0, &cb);
    const int64_t  u0 = tile * job->tile, u1 = imin(u0 + job->tile, S);
    const int64_t  lo = tile == 0 ? -(W - 1) : u0; /* dxin rows [lo, u1) */
    float *        s     = thread_buf(job, thread);
    const float ** ring  = (const float **) (void *) s; /* input tau at ring[tau mod W]        */
    const float ** grow  = ring + W;                    /* gpre[t] at grow[t mod W] (or NULL)  */
    const float ** taps  = grow + W;
    float *        xb    = s + ptr_floats(3 * W);       /* W converted input rows */
    float *        gb    = xb + W * CB;                 /* W gradient rows        */
    float *        row   = gb + W * CB;                 /* dout / dxin conversion */
    float *        ext   = row + CB;                    /* dfinal_states row      */
    float *        dw    = job->partial + (b * job->tiles + tile) * (W + 1) * job->ld + c0;
    const int      dout_direct = direct_rows(&a->dout);
    const int      need_dx = ssmi_present(&a->dx), need_dinit = ssmi_present(&a->dinitial_states);
    for (int64_t k = 0; k <= W; ++k) memset(dw + k * job->ld, 0, (size_t) cb * sizeof(float));
    for (int64_t tau = u0 - (W - 1); tau < u0; ++tau)
        ring[ring_slot(tau, W)] = xin_row(job, b, c0, cb, tau, xb + ring_slot(tau, W) * CB);
    for (int64_t t = u0; t < u1 + W - 1; ++t) {
        const int64_t slot = ring_slot(t, W);
        grow[slot]         = NULL;
        if (t < S) {
            ring[slot] = xin_row(job, b, c0, cb, t, xb + slot * CB);
            float * g  = gb + slot * CB;
            grow[slot] = g;
            if (padding(job, b, t)) memset(g, 0, (size_t) cb * sizeof(float));
            else {
                const float * dy = (const float *) a->dout.data + ssmi_off3(&a->dout, b, c0, t);
                if (!dout_direct) {
                    job->k->load_row(row, a->dout.data, a->dout.dtype, ssmi_off3(&a->dout, b, c0, t),
                                     a->dout.strides[1], cb);
                    dy = row;
                }
                token_taps(job, b, t, ring, W, taps);
                job->lk->conv_grad_row(cb, W, taps, job->wT + c0, job->ld, job->bias ? job->bias + c0 : NULL, job->silu,
                                       dy, g);
            }
            if (t < u1) { /* this tile's own token, in time order */
                token_taps(job, b, t, ring, W, taps);
                job->lk->conv_wgrad_row(cb, W, taps, g, dw, job->ld, dw + W * job->ld);
            }
        }
        /* dxin[tau] = Σ_k w[k]·gpre[tau+W−1−k] (+ dfinal_states) */
        const int64_t tau = t - (W - 1);
        if (tau < lo || (tau >= 0 ? !need_dx : !need_dinit)) continue;
        for (int64_t k = 0; k < W; ++k) {
            const int64_t tg = tau + (W - 1) - k;
            taps[k]          = tg >= 0 && tg < S && feeds(job, b, tau, tg) ? grow[ring_slot(tg, W)] : NULL;
        }
        const int64_t j     = tau - (S - (W - 1));
        const float * extra = NULL;
        if (ssmi_present(&a->dfinal_states) && j >= 0 && j < W - 1) {
            job->k->load_row(ext, a->dfinal_states.data, a->dfinal_states.dtype, ssmi_off3(&a->dfinal_states, b, c0, j),
                             a->dfinal_states.strides[1], cb);
            extra = ext;
        }
        float * out = tau >= 0 && direct_rows(&a->dx) ? (float *) a->dx.data + ssmi_off3(&a->dx, b, c0, tau) : row;
        job->lk->conv_dx_row(cb, W, taps, job->wT + c0, job->ld, extra, out);
        store_dxin(job, a, b, c0, cb, tau, out);
    }
}

/* dweight, dbias of one channel block: the tiles' partials added in (batch, tile) order. */
static void reduce_task(void * arg, int64_t blk, int32_t thread) {
    const conv_job *                   job = (const conv_job *) arg;
    const ssm_causal_conv1d_bwd_args * a   = (const ssm_causal_conv1d_bwd_args *) job->args;
    const int64_t                      W = job->d->width, c0 = blk * job->cbs, cb = imin(job->cbs, job->d->dim - c0);
    const int64_t                      ntot = job->d->batch * job->tiles, pstride = (W + 1) * job->ld;
    float *                            sum  = thread_buf(job, thread);
    for (int64_t k = 0; k <= W; ++k) {
        const ssm_tensor * dst = k < W ? &a->dweight : &a->dbias;
        if (!ssmi_present(dst)) continue;
        const float * p = job->partial + k * job->ld + c0;
        memcpy(sum, p, (size_t) cb * sizeof(float));
        for (int64_t i = 1; i < ntot; ++i) job->lk->add_row(cb, p + i * pstride, sum);
        if (k < W) job->k->store_row(dst->data, dst->dtype, ssmi_off2(dst, c0, k), dst->strides[0], sum, cb);
        else job->k->store_row(dst->data, dst->dtype, ssmi_off1(dst, c0), dst->strides[0], sum, cb);
    }
}

ssm_status ssmi_cpu_causal_conv1d_bwd(ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * d,
                                      const ssm_causal_conv1d_bwd_args * a) {
    conv_job job;
    init_job(&job, ctx, p, d);
    if (job.nblocks == 0) return SSM_STATUS_OK;
    job.x = &a->x, job.seq = &a->seq_idx, job.init = &a->initial_states;
    job.args = a;
    SSM_FORWARD_IF_ERROR(prepare_weights(ctx, &job, &a->weight, &a->bias, "causal_conv1d_bwd"));
    const int64_t W    = d->width;
    const int64_t ntot = d->batch * job.tiles;
    job.scratch_floats = ptr_floats(3 * W) + (2 * W + 2) * job.cbs;
    job.scratch        = ssmi_cpu_thread_scratch(ctx, "causal_conv1d_bwd", job.scratch_floats);
    const size_t pbytes = (size_t) (imax(1, ntot) * (W + 1) * job.ld) * sizeof(float);
    if (job.scratch != NULL) {
        job.partial = (float *) ssmi_alloc(ctx, pbytes);
        if (job.partial == NULL)
            ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "causal_conv1d_bwd: could not allocate %zu bytes of scratch",
                       pbytes);
    }
    if (job.scratch == NULL || job.partial == NULL) {
        free_job(ctx, &job);
        return SSM_STATUS_OUT_OF_MEMORY;
    }
    if (ntot > 0) ssmi_parallel_for(ctx, ntot * job.nblocks, bwd_task, &job);
    else memset(job.partial, 0, pbytes); /* B = 0: dweight = dbias = 0 */
    ssmi_parallel_for(ctx, job.nblocks, reduce_task, &job);
    free_job(ctx, &job);
    return SSM_STATUS_OK;
}

/* ---- decode update ------------------------------------------------------------------------ */
typedef struct update_ctx {
    const ssm_causal_conv1d_update_args * a;
    const ssmi_conv1d_dims *              d;
    const conv_job *                      job; /* prepared weights */
    int                                   has_fin;
    float *                               scratch;
    int64_t                               scratch_floats;
} update_ctx;

static int64_t slot_of(const ssm_tensor * idx, int64_t b) {
    return ssmi_present(idx) ? ssmi_get_i64(idx, ssmi_off1(idx, b)) : b;
}

static void update_task(void * arg, int64_t task, int32_t thread) {
    const update_ctx *                    u   = (const update_ctx *) arg;
    const conv_job *                      job = u->job;
    const ssm_causal_conv1d_update_args * a   = u->a;
    const int64_t                         W = u->d->width, L = u->d->state_len;
    const int64_t                         CB = job->cbs, b = task / job->nblocks, c0 = (task % job->nblocks) * CB;
    const int64_t                         cb   = imin(CB, u->d->dim - c0);
    const int64_t                         slot = slot_of(&a->state_batch_indices, b);
    float *                               s    = u->scratch + thread * u->scratch_floats;
    const float **                        taps = (const float **) (void *) s;
    float *                               o    = s + ptr_floats(W);
    float *                               win  = o + CB; /* rows 0..L−1: the state, row L: x */
    if (slot < 0) {
        memset(o, 0, (size_t) cb * sizeof(float));
        job->k->store_row(a->out.data, a->out.dtype, ssmi_off2(&a->out, b, c0), a->out.strides[1], o, cb);
        return;
    }
    const ssm_tensor * st  = &a->conv_state;
    const ssm_tensor * fin = &a->final_conv_state;
    for (int64_t j = 0; j < L; ++j)
        job->k->load_row(win + j * CB, st->data, st->dtype, ssmi_off3(st, slot, c0, j), st->strides[1], cb);
    job->k->load_row(win + L * CB, a->x.data, a->x.dtype, ssmi_off2(&a->x, b, c0), a->x.strides[1], cb);
    for (int64_t k = 0; k < W; ++k) taps[k] = win + (L + 1 - W + k) * CB;
    job->lk->conv_row(cb, W, taps, job->wT + c0, job->ld, job->bias ? job->bias + c0 : NULL, job->silu, o);
    job->k->store_row(a->out.data, a->out.dtype, ssmi_off2(&a->out, b, c0), a->out.strides[1], o, cb);
    if (u->has_fin)
        for (int64_t j = 0; j < L; ++j)
            job->k->store_row(fin->data, fin->dtype, ssmi_off3(fin, slot, c0, j), fin->strides[1],
                              win + (j + 1) * CB, cb);
}

ssm_status ssmi_cpu_causal_conv1d_update(ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * d,
                                         const ssm_causal_conv1d_update_args * a) {
    conv_job job;
    init_job(&job, ctx, p, d);
    if (d->batch == 0 || job.nblocks == 0) return SSM_STATUS_OK;
    SSM_FORWARD_IF_ERROR(prepare_weights(ctx, &job, &a->weight, &a->bias, "causal_conv1d_update"));
    update_ctx u;
    memset(&u, 0, sizeof u);
    u.a = a, u.d = d, u.job = &job, u.has_fin = ssmi_present(&a->final_conv_state);
    u.scratch_floats = ptr_floats(d->width) + (d->state_len + 2) * job.cbs;
    u.scratch        = ssmi_cpu_thread_scratch(ctx, "causal_conv1d_update", u.scratch_floats);
    if (u.scratch == NULL) {
        free_job(ctx, &job);
        return SSM_STATUS_OUT_OF_MEMORY;
    }
    ssmi_parallel_for(ctx, d->batch * job.nblocks, update_task, &u);
    ssmi_free(ctx, u.scratch);
    free_job(ctx, &job);
    return SSM_STATUS_OK;
}
