/*
 * Mamba-3 SISO decode step on the CPU (spec §2.6, §3.4): one iteration of the recurrence
 * per batch row, all math fp32.
 *
 * Tasks: one per (row b, block of heads). Per head: θ = wrap(θ_state + π·tanh(raw)·dt),
 * q̂, k̂ by the shared rotary helpers, α = e^{adt}, β = α·dt·(1−λ), γ = dt·λ, then one pass
 * over the V×K state (kernels/sisostep): h' = α·h + β·v_prev k_prevᵀ + γ·v k̂ᵀ and
 * y = h' q̂, written straight back into the pool row when the state and the final state are
 * fp32 with unit K stride (in place when the caller passes the same view), else through
 * fp32 scratch. Then out = (y + D·v)·silu(z), and the final θ, k̂, v rows.
 *
 * Slots and tokens follow core/step_slots.h: row b runs its tokens (one token b without
 * cu_seqlens) from its read slot; a negative read slot is a padding row: out = 0 and
 * intermediate_* = 0 for its tokens, no state read or written. One token with no token
 * table and no intermediate_* takes the path above (small input rows read into scratch
 * before anything is written, so an in-place update sees only old values). Anything else
 * loads the head's four states into fp32 scratch, runs the row's tokens on them (the same
 * kernels, so a row of tokens gives the bits of the tokens one by one through fp32 pools),
 * stores them after each token to intermediate_* and the token table's slots, else after
 * the row to its write slot. Write slots are distinct and in place no row reads a slot
 * another writes (checked by ops/), so tasks never share a state.
 */
#include <string.h>

#include "../core/step_slots.h"
#include "mamba3_common.h"
#include "ssmi_cpu_mamba3.h"

typedef struct step_job {
    const ssmi_mamba3_dims *          d;
    const ssmi_cpu_m3_kernels *       k;
    const ssm_mamba3_siso_step_args * a;
    ssmi_step_slots                   slots;
    const ssm_tensor *                table; /* the token table, or NULL (core/step_slots.h) */
    int                               carried; /* the fp32 scratch path for every row (intermediate_*, a table, …) */
    int64_t                           head_block, blocks;
    float *                           scratch;
    int64_t                           thread_floats;
} step_job;

typedef struct step_scratch {
    float *qraw, *kraw, *bq, *bk, *qh, *kh, *kprev;
    float *theta, *raw, *cos2, *sin2;
    float *v, *vprev, *y, *z;
    float *state; /* V×K: the carried state (states not fp32 with unit K stride, several tokens) */
} step_scratch;

static int64_t step_carve(step_scratch * sc, float * base, int64_t K, int64_t V, int64_t A) {
    int64_t used = 0; /* floats, counted as offsets: base may be NULL */
#define TAKE(field, n) SSMI_CPU_TAKE(sc, base, used, field, n)
    TAKE(qraw, K);
    TAKE(kraw, K);
    TAKE(bq, K);
    TAKE(bk, K);
    TAKE(qh, K);
    TAKE(kh, K);
    TAKE(kprev, K);
    TAKE(theta, A + 8);
    TAKE(raw, A + 8);
    TAKE(cos2, 2 * A + 8);
    TAKE(sin2, 2 * A + 8);
    TAKE(v, V);
    TAKE(vprev, V);
    TAKE(y, V);
    TAKE(z, V);
    TAKE(state, V * K);
#undef TAKE
    return used;
}

static int direct_state(const ssm_tensor * t) {
    return !ssmi_present(t) || (t->dtype == SSM_DTYPE_F32 && t->strides[3] == 1);
}

/* The decay factors of one token. */
typedef struct token_coef {
    float alpha, beta, gamma, dh;
} token_coef;

/* Inputs of token t for head h: sc->v, and q̂, k̂ (sc->qh, sc->kh) rotated by θ advanced in
 * place in sc->theta (which holds the θ state on entry). */
static token_coef prep_token(const step_job * job, step_scratch * sc, int64_t t, int64_t h) {
    const ssm_mamba3_siso_step_args * a = job->a;
    const ssmi_cpu_m3_kernels *       k = job->k;
    const ssmi_cpu_kernels *          kb = k->base;
    const int64_t K = job->d->dk, V = job->d->dv, A = job->d->nangles, G = job->d->nheads / job->d->nheads_qk;
    const int64_t g = h / G;
    ssmi_cpu_m3_load_row3(k, &a->q, t, g, K, sc->qraw);
    ssmi_cpu_m3_load_row3(k, &a->k, t, g, K, sc->kraw);
    kb->load_row(sc->bq, a->q_bias.data, a->q_bias.dtype, ssmi_off2(&a->q_bias, h, 0), a->q_bias.strides[1], K);
    kb->load_row(sc->bk, a->k_bias.data, a->k_bias.dtype, ssmi_off2(&a->k_bias, h, 0), a->k_bias.strides[1], K);
    ssmi_cpu_m3_load_row3(k, &a->v, t, h, V, sc->v);
    const float adt = ssmi_get_f32(&a->adt, ssmi_off2(&a->adt, t, h));
    const float dt  = ssmi_get_f32(&a->dt, ssmi_off2(&a->dt, t, h));
    const float lam = ssmi_cpu_m3_sigmoid(ssmi_get_f32(&a->trap, ssmi_off2(&a->trap, t, h)));
    token_coef  c;
    c.dh    = ssmi_present(&a->d) ? ssmi_get_f32(&a->d, ssmi_off1(&a->d, h)) : 0.0f;
    c.alpha = expf(adt);
    c.beta  = c.alpha * dt * (1.0f - lam);
    c.gamma = dt * lam;
    if (A > 0) {
        ssmi_cpu_m3_load_row3(k, &a->angles, t, h, A, sc->raw);
        k->angle_rate(A, sc->raw, sc->raw);
        k->angle_advance(A, sc->theta, sc->raw, dt);
    }
    (void) ssmi_cpu_m3_prep_token(k, K, A, sc->qraw, sc->kraw, sc->bq, sc->bk, sc->theta, sc->cos2, sc->sin2, sc->qh,
                                  sc->kh);
    return c;
}

/* out[t, h] = (y + D·v)·silu(z). */
static void finish_token(const step_job * job, step_scratch * sc, const token_coef * c, int64_t t, int64_t h) {
    const ssm_mamba3_siso_step_args * a = job->a;
    const int64_t                     V = job->d->dv;
    for (int64_t p = 0; p < V; ++p) sc->y[p] += c->dh * sc->v[p];
    if (ssmi_present(&a->z)) {
        ssmi_cpu_m3_load_row3(job->k, &a->z, t, h, V, sc->z);
        job->k->base->silu_gate(V, sc->y, sc->z, sc->y);
    }
    ssmi_cpu_m3_store_row3(job->k, &a->out, t, h, V, sc->y);
}

/* θ, the V×K state (rows of K floats), k̂ and v of head h to row `row` of the pools angle,
 * ssm, k, v (each may be absent). */
static void store_states(const step_job * job, const ssm_tensor * angle, const ssm_tensor * ssm, const ssm_tensor * k,
                         const ssm_tensor * v, int64_t row, int64_t h, const float * theta, const float * state,
                         const float * kvec, const float * vvec) {
    const int64_t K = job->d->dk, V = job->d->dv, A = job->d->nangles;
    if (A > 0) ssmi_cpu_m3_store_row3(job->k, angle, row, h, A, theta);
    if (ssmi_present(ssm))
        for (int64_t p = 0; p < V; ++p)
            job->k->base->store_row(ssm->data, ssm->dtype, ssmi_off4(ssm, row, h, p, 0), ssm->strides[3], state + p * K,
                                    K);
    ssmi_cpu_m3_store_row3(job->k, k, row, h, K, kvec);
    ssmi_cpu_m3_store_row3(job->k, v, row, h, V, vvec);
}

/* The carried states (sc->theta, sc->state, sc->kprev, sc->vprev) to the final pools' slot ws. */
static void store_final(const step_job * job, const step_scratch * sc, int64_t ws, int64_t h) {
    const ssm_mamba3_siso_step_args * a = job->a;
    store_states(job, &a->final_angle_state, &a->final_ssm_state, &a->final_k_state, &a->final_v_state, ws, h,
                 sc->theta, sc->state, sc->kprev, sc->vprev);
}

/* Row b, head h, one token t from slot `slot` to slot ws of the final_* pools (none when
 * ws < 0): the state streamed from pool to pool when both are fp32 with unit K stride. */
static void step_head(const step_job * job, step_scratch * sc, int64_t t, int64_t slot, int64_t ws, int64_t h) {
    const ssm_mamba3_siso_step_args * a = job->a;
    const ssmi_cpu_m3_kernels *       k = job->k;
    const ssmi_cpu_kernels *          kb = k->base;
    const int64_t                     K = job->d->dk, V = job->d->dv, A = job->d->nangles;

    /* old small states (read before any write: the finals may be the same views) */
    ssmi_cpu_m3_load_row3(k, &a->k_state, slot, h, K, sc->kprev);
    ssmi_cpu_m3_load_row3(k, &a->v_state, slot, h, V, sc->vprev);
    if (A > 0) ssmi_cpu_m3_load_row3(k, &a->angle_state, slot, h, A, sc->theta);
    const token_coef c = prep_token(job, sc, t, h);

    /* the state pass */
    const ssm_tensor * st = &a->ssm_state, *fs = &a->final_ssm_state;
    const int          write_ssm = ssmi_present(fs) && ws >= 0;
    if (direct_state(st) && direct_state(fs)) {
        const float * hp = (const float *) st->data + ssmi_off4(st, slot, h, 0, 0);
        float *       op = write_ssm ? (float *) fs->data + ssmi_off4(fs, ws, h, 0, 0) : NULL;
        k->state_step(V, K, hp, st->strides[2], op, op ? fs->strides[2] : 0, c.alpha, c.beta, c.gamma, sc->vprev,
                      sc->v, sc->kprev, sc->kh, sc->qh, sc->y);
    } else {
        for (int64_t p = 0; p < V; ++p)
            kb->load_row(sc->state + p * K, st->data, st->dtype, ssmi_off4(st, slot, h, p, 0), st->strides[3], K);
        k->state_step(V, K, sc->state, K, sc->state, K, c.alpha, c.beta, c.gamma, sc->vprev, sc->v, sc->kprev,
                      sc->kh, sc->qh, sc->y);
        if (write_ssm)
            for (int64_t p = 0; p < V; ++p)
                kb->store_row(fs->data, fs->dtype, ssmi_off4(fs, ws, h, p, 0), fs->strides[3], sc->state + p * K, K);
    }
    finish_token(job, sc, &c, t, h);
    if (ws < 0) return;
    if (A > 0) ssmi_cpu_m3_store_row3(k, &a->final_angle_state, ws, h, A, sc->theta);
    ssmi_cpu_m3_store_row3(k, &a->final_k_state, ws, h, K, sc->kh);
    ssmi_cpu_m3_store_row3(k, &a->final_v_state, ws, h, V, sc->v);
}

/* Row b, head h over its tokens [t0, t1) from read slot `slot`, the four states carried in
 * fp32 scratch (loaded whole before anything is stored). */
static void run_head(const step_job * job, step_scratch * sc, int64_t b, int64_t t0, int64_t t1, int64_t slot,
                     int64_t h) {
    const ssm_mamba3_siso_step_args * a = job->a;
    const ssmi_cpu_m3_kernels *       k = job->k;
    const int64_t                     K = job->d->dk, V = job->d->dv, A = job->d->nangles;
    const ssm_tensor *                st = &a->ssm_state;
    ssmi_cpu_m3_load_row3(k, &a->k_state, slot, h, K, sc->kprev);
    ssmi_cpu_m3_load_row3(k, &a->v_state, slot, h, V, sc->vprev);
    if (A > 0) ssmi_cpu_m3_load_row3(k, &a->angle_state, slot, h, A, sc->theta);
    for (int64_t p = 0; p < V; ++p)
        k->base->load_row(sc->state + p * K, st->data, st->dtype, ssmi_off4(st, slot, h, p, 0), st->strides[3], K);
    for (int64_t t = t0; t < t1; ++t) {
        const token_coef c = prep_token(job, sc, t, h);
        k->state_step(V, K, sc->state, K, sc->state, K, c.alpha, c.beta, c.gamma, sc->vprev, sc->v, sc->kprev,
                      sc->kh, sc->qh, sc->y);
        finish_token(job, sc, &c, t, h);
        memcpy(sc->kprev, sc->kh, (size_t) K * sizeof(float));
        memcpy(sc->vprev, sc->v, (size_t) V * sizeof(float));
        store_states(job, &a->intermediate_angle_state, &a->intermediate_ssm_state, &a->intermediate_k_state,
                     &a->intermediate_v_state, t, h, sc->theta, sc->state, sc->kprev, sc->vprev);
        if (job->table == NULL) continue;
        const int64_t ws = ssmi_step_token_slot(job->table, b, t - t0);
        if (ws >= 0) store_final(job, sc, ws, h);
    }
    if (job->table != NULL) return;
    const int64_t ws = ssmi_step_write_slot(&job->slots, b);
    if (ws >= 0) store_final(job, sc, ws, h);
}

static void step_task(void * arg, int64_t task, int32_t thread) {
    const step_job *                  job = (const step_job *) arg;
    const ssm_mamba3_siso_step_args * a   = job->a;
    const int64_t                     H = job->d->nheads, K = job->d->dk, V = job->d->dv;
    const int64_t                     b  = task / job->blocks;
    const int64_t                     h0 = (task % job->blocks) * job->head_block;
    const int64_t                     h1 = h0 + job->head_block < H ? h0 + job->head_block : H;
    step_scratch                      sc;
    step_carve(&sc, job->scratch + (int64_t) thread * job->thread_floats, K, V, job->d->nangles);
    int64_t t0, t1;
    ssmi_step_tokens(&job->slots, b, &t0, &t1);
    const int64_t slot = ssmi_step_read_slot(&job->slots, b);
    if (slot < 0) { /* padding row: zeros, from sc.state (V·K floats: at least K, V and A) */
        memset(sc.state, 0, (size_t) (V * K) * sizeof(float));
        for (int64_t t = t0; t < t1; ++t)
            for (int64_t h = h0; h < h1; ++h) {
                ssmi_cpu_m3_store_row3(job->k, &a->out, t, h, V, sc.state);
                store_states(job, &a->intermediate_angle_state, &a->intermediate_ssm_state, &a->intermediate_k_state,
                             &a->intermediate_v_state, t, h, sc.state, sc.state, sc.state, sc.state);
            }
        return;
    }
    if (job->carried || t1 - t0 != 1) {
        for (int64_t h = h0; h < h1; ++h) run_head(job, &sc, b, t0, t1, slot, h);
        return;
    }
    const int64_t ws = ssmi_step_write_slot(&job->slots, b);
    for (int64_t h = h0; h < h1; ++h) step_head(job, &sc, t0, slot, ws, h);
}

ssm_status ssmi_cpu_mamba3_siso_step(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                     const ssm_mamba3_siso_step_args * a) {
    (void) p;
    if (d->batch == 0 || d->nheads == 0 || d->dv == 0) return SSM_STATUS_OK;
    /* a few tasks per thread when the batch alone does not give them */
    const int64_t hb = ssmi_cpu_head_block(d->nheads, d->nheads, d->batch, 4 * ssmi_num_threads(ctx));
    step_job job;
    job.d             = d;
    job.k             = ssmi_cpu_m3_kernels_for(ctx);
    job.a             = a;
    job.slots         = (ssmi_step_slots){&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                                          &a->num_accepted_tokens};
    job.table         = ssmi_step_token_table(&job.slots);
    job.carried       = job.table != NULL || ssmi_present(&a->intermediate_angle_state) ||
                  ssmi_present(&a->intermediate_ssm_state) || ssmi_present(&a->intermediate_k_state) ||
                  ssmi_present(&a->intermediate_v_state);
    job.head_block    = hb;
    job.blocks        = (d->nheads + hb - 1) / hb;
    job.thread_floats = step_carve(NULL, NULL, d->dk, d->dv, d->nangles);
    job.scratch       = ssmi_cpu_thread_scratch(ctx, "mamba3_siso_step", job.thread_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, d->batch * job.blocks, step_task, &job);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}
