/* Mamba-2 decode step on the CPU (spec §2.9).
 *
 * The cost is the state traffic: every state element is read once and written once by a
 * streaming kernel (kernels/step) that fuses the decay, the rank-1 update and the output
 * dot product. Tasks are contiguous ranges of (batch row, head) pairs. Only a tiny step
 * (state traffic up to STEP_SERIAL_BYTES) runs on the calling thread alone: the pool's
 * workers poll between back-to-back calls (core/threadpool.c), so handing a decode step to
 * them costs well under a microsecond, but a few KiB of state is still faster alone.
 *
 * Decay: a (H, P, N) with zero strides over p and n (the per-head form of a Mamba-2 layer)
 * gives one exp per head (or per row if dt varies over p); a general a needs exp per
 * element. One token of a row with fp32 pools of unit column stride is streamed from the
 * read slot to the write slot where they lie; anything else (another dtype or layout,
 * several tokens per row, intermediate_states, a token table) loads the head of the read
 * slot into an fp32 buffer, runs the row's tokens on it (the state unrounded between
 * them, as the reference) and stores it where core/step_slots.h says. The validated slot
 * rules keep rows independent (no row reads a slot another writes in place) and a head
 * is read before anything of it is written, so each (b, h) is independent; every sum has
 * a fixed order, so the result does not depend on the thread count. */
#include <string.h>

#include "../core/step_slots.h"
#include "cpu_common.h"
#include "kernels/step/step.h"
#include "ssmi_cpu.h"

#define STEP_SERIAL_BYTES (64ll << 10) /* state read + write bytes below which one thread is faster */

typedef struct step_job {
    const ssm_mamba2_params *    params;
    const ssmi_mamba2_dims *     dims;
    const ssm_mamba2_step_args * args;
    const ssmi_cpu_kernels *     k;
    ssmi_f32_step_block_fn       block;
    ssmi_f32_step_row_fn         row;
    ssmi_step_slots              slots;
    const ssm_tensor *           table;      /* the token table, or NULL (core/step_slots.h)   */
    int                          has_final;
    int                          direct;     /* fp32 state (and final_state) with unit column stride */
    int                          a_const_n;  /* a constant over n: one decay per row               */
    int                          dt_const_p; /* dt and dt_bias constant over p                      */
    int                          head_const; /* a constant over p and n, dt_const_p: one per head   */
    int64_t                      ntasks;
    float *                      scratch;
    int64_t                      scratch_floats; /* per thread */
} step_job;

/* Per-thread scratch carved into rows. */
typedef struct step_bufs {
    float *b, *c, *decay;          /* N each */
    float *x, *v, *coef, *y, *tmp; /* P each */
    float *head;                   /* P rows of N (row stride ssmi_cpu_lines(N)): a head's state */
} step_bufs;

static int64_t scratch_floats(const ssmi_mamba2_dims * d) {
    const int64_t N = ssmi_cpu_lines(d->dstate);
    return 3 * N + 5 * ssmi_cpu_lines(d->headdim) + ssmi_cpu_lines(d->headdim * N);
}

static step_bufs carve(const step_job * job, int32_t thread) {
    const int64_t N = ssmi_cpu_lines(job->dims->dstate), P = ssmi_cpu_lines(job->dims->headdim);
    float *       q = job->scratch + (int64_t) thread * job->scratch_floats;
    step_bufs     s;
    s.b = q, s.c = q + N, s.decay = q + 2 * N;
    q += 3 * N;
    s.x = q, s.v = q + P, s.coef = q + 2 * P, s.y = q + 3 * P, s.tmp = q + 4 * P;
    s.head = q + 5 * P;
    return s;
}

/* True when dimension i of t does not move through memory (stride 0 or a single index). */
static int const_dim(const ssm_tensor * t, int i) { return t->strides[i] == 0 || t->shape[i] <= 1; }

/* Processed dt of every p of (token t, h) into s->v, and coef = v·x. A per-head dt (constant
 * over p) is processed once: softplus costs more than the rest of a row's setup. */
static void load_dt_x(const step_job * job, const step_bufs * s, int64_t t, int64_t h) {
    const ssm_mamba2_step_args * a  = job->args;
    const ssm_mamba2_params *    p  = job->params;
    const int64_t                P  = job->dims->headdim;
    const float                  lo = (float) p->dt_limit_lo, hi = (float) p->dt_limit_hi;
    job->k->load_row(s->x, a->x.data, a->x.dtype, ssmi_off3(&a->x, t, h, 0), a->x.strides[2], P);
    if (job->dt_const_p) {
        float v = ssmi_get_f32(&a->dt, ssmi_off3(&a->dt, t, h, 0));
        if (ssmi_present(&a->dt_bias)) v += ssmi_get_f32(&a->dt_bias, ssmi_off2(&a->dt_bias, h, 0));
        v = ssmi_cpu_process_dt(v, p->dt_softplus, lo, hi);
        for (int64_t i = 0; i < P; ++i) {
            s->v[i]    = v;
            s->coef[i] = v * s->x[i];
        }
        return;
    }
    job->k->load_row(s->v, a->dt.data, a->dt.dtype, ssmi_off3(&a->dt, t, h, 0), a->dt.strides[2], P);
    if (ssmi_present(&a->dt_bias)) {
        job->k->load_row(s->tmp, a->dt_bias.data, a->dt_bias.dtype, ssmi_off2(&a->dt_bias, h, 0),
                         a->dt_bias.strides[1], P);
        for (int64_t i = 0; i < P; ++i) s->v[i] += s->tmp[i];
    }
    for (int64_t i = 0; i < P; ++i) {
        s->v[i]    = ssmi_cpu_process_dt(s->v[i], p->dt_softplus, lo, hi);
        s->coef[i] = s->v[i] * s->x[i];
    }
}

/* One token through the P×N block of head h: fp32 state rows in (row stride ins), the new
 * rows to out (stride outs; NULL: not stored; may equal in), y[0..P). */
static void update_head(const step_job * job, const step_bufs * s, const float * in, int64_t ins, float * out,
                        int64_t outs, int64_t h) {
    const ssm_mamba2_step_args * a = job->args;
    const int64_t                P = job->dims->headdim, N = job->dims->dstate;
    if (N == 0) { /* no state: a is empty and must not be read; y is D·x (and the gate) alone */
        for (int64_t p = 0; p < P; ++p) s->y[p] = 0.0f;
        return;
    }
    if (job->head_const) { /* one kernel call streams the whole head */
        const float decay = expf(ssmi_get_f32(&a->a, ssmi_off3(&a->a, h, 0, 0)) * s->v[0]);
        job->block(P, N, in, ins, out, out != NULL ? outs : 0, decay, s->coef, s->b, s->c, s->y);
        return;
    }
    for (int64_t p = 0; p < P; ++p) {
        float * orow = out != NULL ? out + p * outs : NULL;
        if (job->a_const_n) {
            const float decay = expf(ssmi_get_f32(&a->a, ssmi_off3(&a->a, h, p, 0)) * s->v[p]);
            job->block(1, N, in + p * ins, 0, orow, 0, decay, &s->coef[p], s->b, s->c, &s->y[p]);
        } else {
            job->k->load_row(s->decay, a->a.data, a->a.dtype, ssmi_off3(&a->a, h, p, 0), a->a.strides[2], N);
            for (int64_t n = 0; n < N; ++n) s->decay[n] *= s->v[p];
            job->k->vexp(N, s->decay, s->decay);
            s->y[p] = job->row(N, in + p * ins, orow, s->decay, s->coef[p], s->b, s->c);
        }
    }
}

/* y += d·x, the gate, and the store of out[t, h, :]. */
static void finish_output(const step_job * job, const step_bufs * s, int64_t t, int64_t h) {
    const ssm_mamba2_step_args * a = job->args;
    const int64_t                P = job->dims->headdim;
    if (ssmi_present(&a->d)) {
        job->k->load_row(s->tmp, a->d.data, a->d.dtype, ssmi_off2(&a->d, h, 0), a->d.strides[1], P);
        for (int64_t p = 0; p < P; ++p) s->y[p] += s->tmp[p] * s->x[p];
    }
    if (ssmi_present(&a->z)) {
        job->k->load_row(s->tmp, a->z.data, a->z.dtype, ssmi_off3(&a->z, t, h, 0), a->z.strides[2], P);
        job->k->silu_gate(P, s->y, s->tmp, s->y);
    }
    job->k->store_row(a->out.data, a->out.dtype, ssmi_off3(&a->out, t, h, 0), a->out.strides[2], s->y, P);
}

/* b and c of (token t, group g) into s, unless they are there already. */
static void load_bc(const step_job * job, const step_bufs * s, int64_t t, int64_t g, int64_t * loaded_t,
                    int64_t * loaded_g) {
    const ssm_mamba2_step_args * a = job->args;
    if (t == *loaded_t && g == *loaded_g) return;
    job->k->load_row(s->b, a->b.data, a->b.dtype, ssmi_off3(&a->b, t, g, 0), a->b.strides[2], job->dims->dstate);
    job->k->load_row(s->c, a->c.data, a->c.dtype, ssmi_off3(&a->c, t, g, 0), a->c.strides[2], job->dims->dstate);
    *loaded_t = t, *loaded_g = g;
}

/* The head's state rows (s->head) to slot `slot` of pool t (4-D) or token `slot` of t. */
static void store_head(const step_job * job, const step_bufs * s, const ssm_tensor * t, int64_t slot, int64_t h) {
    const int64_t P = job->dims->headdim, N = job->dims->dstate, ld = ssmi_cpu_lines(N);
    for (int64_t p = 0; p < P; ++p)
        job->k->store_row(t->data, t->dtype, ssmi_off4(t, slot, h, p, 0), t->strides[3], s->head + p * ld, N);
}

/* Row b, head h of a padding row: out (and intermediate_states) = 0 for its tokens. */
static void pad_head(const step_job * job, const step_bufs * s, int64_t t0, int64_t t1, int64_t h) {
    const ssm_mamba2_step_args * a = job->args;
    const int64_t                P = job->dims->headdim, N = job->dims->dstate;
    memset(s->y, 0, (size_t) P * sizeof(float));
    memset(s->decay, 0, (size_t) N * sizeof(float));
    for (int64_t t = t0; t < t1; ++t) {
        job->k->store_row(a->out.data, a->out.dtype, ssmi_off3(&a->out, t, h, 0), a->out.strides[2], s->y, P);
        if (!ssmi_present(&a->intermediate_states)) continue;
        const ssm_tensor * it = &a->intermediate_states;
        for (int64_t p = 0; p < P; ++p)
            job->k->store_row(it->data, it->dtype, ssmi_off4(it, t, h, p, 0), it->strides[3], s->decay, N);
    }
}

/* Row b, head h over its tokens [t0, t1) from read slot rs, the state held in s->head (fp32)
 * between them: any pool dtype or layout, several tokens, intermediate states, token tables.
 * The whole head of the read slot is loaded before anything is stored. */
static void run_head(const step_job * job, const step_bufs * s, int64_t b, int64_t t0, int64_t t1, int64_t rs,
                     int64_t h, int64_t * loaded_t, int64_t * loaded_g) {
    const ssm_mamba2_step_args * a = job->args;
    const int64_t                P = job->dims->headdim, N = job->dims->dstate, ld = ssmi_cpu_lines(N);
    const int64_t                g = h / (job->dims->nheads / job->dims->ngroups);
    for (int64_t p = 0; p < P; ++p)
        job->k->load_row(s->head + p * ld, a->state.data, a->state.dtype, ssmi_off4(&a->state, rs, h, p, 0),
                         a->state.strides[3], N);
    for (int64_t t = t0; t < t1; ++t) {
        load_bc(job, s, t, g, loaded_t, loaded_g);
        load_dt_x(job, s, t, h);
        update_head(job, s, s->head, ld, s->head, ld, h);
        finish_output(job, s, t, h);
        if (ssmi_present(&a->intermediate_states)) store_head(job, s, &a->intermediate_states, t, h);
        if (job->table != NULL && job->has_final) {
            const int64_t ws = ssmi_step_token_slot(job->table, b, t - t0);
            if (ws >= 0) store_head(job, s, &a->final_state, ws, h);
        }
    }
    if (job->table == NULL && job->has_final) {
        const int64_t ws = ssmi_step_write_slot(&job->slots, b);
        if (ws >= 0) store_head(job, s, &a->final_state, ws, h);
    }
}

static void step_task(void * arg, int64_t task, int32_t thread) {
    const step_job *             job = (const step_job *) arg;
    const ssmi_mamba2_dims *     d   = job->dims;
    const ssm_mamba2_step_args * a   = job->args;
    const step_bufs              s   = carve(job, thread);
    const int64_t                pairs = d->batch * d->nheads, R = d->nheads / d->ngroups;
    const int64_t                first = pairs * task / job->ntasks, last = pairs * (task + 1) / job->ntasks;
    int64_t                      loaded_t = -1, loaded_g = -1;
    for (int64_t i = first; i < last; ++i) {
        const int64_t b = i / d->nheads, h = i % d->nheads;
        int64_t       t0, t1;
        ssmi_step_tokens(&job->slots, b, &t0, &t1);
        const int64_t rs = ssmi_step_read_slot(&job->slots, b);
        if (rs < 0) { /* padding row: out = 0, no slot touched */
            pad_head(job, &s, t0, t1, h);
            continue;
        }
        if (!job->direct || t1 - t0 != 1 || job->table != NULL || ssmi_present(&a->intermediate_states)) {
            run_head(job, &s, b, t0, t1, rs, h, &loaded_t, &loaded_g);
            continue;
        }
        /* one token, fp32 pools: the state is streamed from the read slot to the write slot */
        const int64_t      ws  = job->has_final ? ssmi_step_write_slot(&job->slots, b) : -1;
        const ssm_tensor * st  = &a->state;
        const ssm_tensor * fin = &a->final_state;
        load_bc(job, &s, t0, h / R, &loaded_t, &loaded_g);
        load_dt_x(job, &s, t0, h);
        update_head(job, &s, (const float *) st->data + ssmi_off4(st, rs, h, 0, 0), st->strides[2],
                    ws >= 0 ? (float *) fin->data + ssmi_off4(fin, ws, h, 0, 0) : NULL, ws >= 0 ? fin->strides[2] : 0, h);
        finish_output(job, &s, t0, h);
    }
}

ssm_status ssmi_cpu_mamba2_step(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                const ssm_mamba2_step_args * a) {
    const ssmi_cpu_kernels * k         = ssmi_cpu_kernels_for(ctx);
    const ssm_isa            isa       = ssmi_context_isa(ctx);
    const int                has_final = ssmi_present(&a->final_state);
    const int64_t pairs = d->batch * d->nheads;
    if (pairs == 0 || d->headdim == 0) return SSM_STATUS_OK;

    step_job job;
    memset(&job, 0, sizeof job);
    job.params    = p;
    job.dims      = d;
    job.args      = a;
    job.k         = k;
    job.block     = isa == SSM_ISA_AVX512 ? ssmi_f32_step_block__avx512
                    : isa == SSM_ISA_AVX2 ? ssmi_f32_step_block__avx2
                                          : ssmi_f32_step_block__scalar;
    job.row       = isa == SSM_ISA_AVX512 ? ssmi_f32_step_row__avx512
                    : isa == SSM_ISA_AVX2 ? ssmi_f32_step_row__avx2
                                          : ssmi_f32_step_row__scalar;
    job.has_final = has_final;
    job.slots     = (ssmi_step_slots){&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                                      &a->num_accepted_tokens};
    job.table     = ssmi_step_token_table(&job.slots);
    job.direct    = a->state.dtype == SSM_DTYPE_F32 && (a->state.strides[3] == 1 || d->dstate <= 1) &&
                 (!has_final || (a->final_state.dtype == SSM_DTYPE_F32 &&
                                 (a->final_state.strides[3] == 1 || d->dstate <= 1)));
    job.a_const_n  = const_dim(&a->a, 2);
    job.dt_const_p = const_dim(&a->dt, 2) && (!ssmi_present(&a->dt_bias) || const_dim(&a->dt_bias, 1));
    job.head_const = job.a_const_n && const_dim(&a->a, 1) && job.dt_const_p;
    const int32_t threads = ssmi_num_threads(ctx);
    const int64_t pool_bytes = (d->seqlen > d->batch ? d->seqlen : d->batch) * d->nheads * d->headdim * d->dstate *
                               (int64_t) ssm_dtype_size((ssm_dtype) a->state.dtype);
    job.ntasks = 2 * pool_bytes <= STEP_SERIAL_BYTES ? 1 : 8 * (int64_t) threads;
    if (job.ntasks > pairs) job.ntasks = pairs;
    job.scratch_floats = scratch_floats(d);
    job.scratch        = ssmi_cpu_thread_scratch(ctx, "mamba2_step", job.scratch_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, job.ntasks, step_task, &job);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}
