/*
 * Mamba-3 MIMO decode step on the CPU (spec §3.9, ssmops convention): the tokens of each
 * row in order, the prefill conventions (pre-sigmoid trap, adt, raw angles), all math fp32.
 *
 * Tasks: one per (row b, block of heads). Per head h (g = h/(H/G)):
 *   θ_new = angle_state + π·tanh(raw)·dt (NOT wrapped, as upstream's decode);
 *   q̃_r = Rot(θ_new)(q_r + q_bias[h,r]), k̃_r likewise (split halves);
 *   α = e^{adt}, λ = σ(trap), γ = dt·λ, β = (1−λ)·dt·α;
 *   u_r = v ⊙ mimo_v[r], u'_r = v_state ⊙ mimo_v[r];
 *   h ← α·h + Σ_r (γ·u_r) ⊗ k̃_r + Σ_r (β·u'_r) ⊗ k_state_r     (h is P×N, one GEMM
 *        with k = 2R: A = the 2R coefficient rows read transposed, B = [k̃; k_state]);
 *   y_r = h·q̃_r + D·u_r  (one GEMM P×R over N with q̃ᵀ packed);
 *   the output stage of the forward (z gate or fused norm, mimo_o sum).
 * Final states: θ_new, k̃, v, h. Slots and tokens follow core/step_slots.h: row b runs its
 * tokens (one token b without cu_seqlens) from its read slot on the head's four states in
 * fp32 scratch (the whole input state read before anything is written, so an in-place
 * update, final views = input views, is safe; a row of tokens gives the bits of the tokens
 * one by one through fp32 pools). After each token the states go to intermediate_* and to
 * the token table's slot, else after the row to its write slot (nothing when negative). A
 * negative read slot is a padding row: out = 0 and intermediate_* = 0 for its tokens, no
 * state read or written. Write slots are distinct and in place no row reads a slot another
 * writes (checked by ops/), so tasks never share a state.
 */
#include <string.h>

#include "../core/step_slots.h"
#include "mimo_common.h"
#include "ssmi_cpu_mimo.h"

typedef struct st_scratch {
    ssmi_mimo_head hd;
    float *        h;                    /* [P][N] state                               */
    float *        qr, *kr, *qt, *kt;    /* [R][N]                                     */
    float *        kcat;                 /* [2R][N] k̃ then k_state                     */
    float *        coef;                 /* [2R][P] γ·u then β·u'                      */
    float *        qtT;                  /* [N][R]                                     */
    float *        yt;                   /* [P][R]                                     */
    float *        y, *u;                /* [R][P]                                     */
    float *        theta, *raw, *cosv, *sinv, *pairs;
    float *        v, *vprev, *z;        /* [P]                                        */
    float *        work, *out;           /* [3RP], [RP]                                */
} st_scratch;

static int64_t st_carve(st_scratch * sc, float * base, const ssmi_mimo_dims * d) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles;
    int64_t used = 0; /* floats, counted as offsets: base may be NULL */
#define TAKE(field, cnt) SSMI_CPU_TAKE(sc, base, used, field, cnt)
    if (sc) ssmi_mimo_head_carve(&sc->hd, base + used, R, N, P);
    used += ssmi_mimo_head_floats(R, N, P);
    TAKE(h, P * N);
    TAKE(qr, R * N);
    TAKE(kr, R * N);
    TAKE(qt, R * N);
    TAKE(kt, R * N);
    TAKE(kcat, 2 * R * N);
    TAKE(coef, 2 * R * P);
    TAKE(qtT, N * R);
    TAKE(yt, P * R);
    TAKE(y, R * P);
    TAKE(u, R * P);
    TAKE(theta, A + 8);
    TAKE(raw, A + 8);
    TAKE(cosv, A + 8);
    TAKE(sinv, A + 8);
    TAKE(pairs, 4 * A + 16);
    TAKE(v, P);
    TAKE(vprev, P);
    TAKE(z, P);
    TAKE(work, 3 * R * P);
    TAKE(out, R * P);
#undef TAKE
    return used;
}

typedef struct st_job {
    const ssmi_mimo_dims *            d;
    const ssmi_mimo_kernels *         k;
    const ssm_mamba3_mimo_step_args * a;
    const ssm_mamba3_mimo_params *    p;
    ssmi_step_slots                   slots;
    const ssm_tensor *                table; /* the token table, or NULL (core/step_slots.h) */
    int64_t                           head_block, blocks;
    float *                           scratch;
    int64_t                           thread_floats;
} st_job;

/* The carried states of head h (θ, h, k̃ = kcat's second half, v = vprev) to row `row` of
 * the pools angle, ssm, k, v (each may be absent). */
static void store_states(const st_job * job, const st_scratch * sc, const ssm_tensor * const four[4], int64_t row,
                         int64_t h) {
    const ssmi_mimo_kernels * k = job->k;
    const ssmi_cpu_kernels *  kb = k->base;
    const int64_t             R = job->d->rank, N = job->d->dstate, P = job->d->headdim, A = job->d->nangles;
    const ssm_tensor *        fs = four[1], *fk = four[2];
    if (ssmi_present(fs))
        for (int64_t p = 0; p < P; ++p)
            kb->store_row(fs->data, fs->dtype, ssmi_off4(fs, row, h, p, 0), fs->strides[3], sc->h + p * N, N);
    if (ssmi_present(fk))
        for (int64_t r = 0; r < R; ++r)
            kb->store_row(fk->data, fk->dtype, ssmi_off4(fk, row, r, h, 0), fk->strides[3], sc->kcat + (R + r) * N, N);
    ssmi_cpu_m3_store_row3(k, four[3], row, h, P, sc->vprev);
    if (A > 0) ssmi_cpu_m3_store_row3(k, four[0], row, h, A, sc->theta);
}

/* out[t, h] from sc->out (R·P floats, or P when reduced). */
static void store_out(const st_job * job, const st_scratch * sc, int64_t t, int64_t h) {
    const ssm_mamba3_mimo_step_args * a = job->a;
    const int64_t                     R = job->d->rank, P = job->d->headdim;
    if (job->d->reduce_o)
        ssmi_cpu_m3_store_row3(job->k, &a->out, t, h, P, sc->out);
    else
        for (int64_t r = 0; r < R; ++r)
            job->k->base->store_row(a->out.data, a->out.dtype, ssmi_off4(&a->out, t, r, h, 0), a->out.strides[3],
                                    sc->out + r * P, P);
}

/* Token t of head h on the carried states (sc->h, sc->theta, k_state in kcat's second half,
 * sc->vprev), which it advances; writes out[t, h]. */
static void step_token(const st_job * job, st_scratch * sc, int64_t t, int64_t h) {
    const ssm_mamba3_mimo_step_args * a  = job->a;
    const ssmi_mimo_kernels *         k  = job->k;
    const ssmi_cpu_kernels *          kb = k->base;
    const ssmi_mimo_dims *            d  = job->d;
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles;
    const int64_t g = h / (d->nheads / d->ngroups);

    for (int64_t r = 0; r < R; ++r) {
        kb->load_row(sc->qr + r * N, a->q.data, a->q.dtype, ssmi_off4(&a->q, t, r, g, 0), a->q.strides[3], N);
        kb->load_row(sc->kr + r * N, a->k.data, a->k.dtype, ssmi_off4(&a->k, t, r, g, 0), a->k.strides[3], N);
    }
    ssmi_cpu_m3_load_row3(k, &a->v, t, h, P, sc->v);
    const float adt = ssmi_get_f32(&a->adt, ssmi_off2(&a->adt, t, h));
    const float dt  = ssmi_get_f32(&a->dt, ssmi_off2(&a->dt, t, h));
    const float lam = ssmi_cpu_m3_sigmoid(ssmi_get_f32(&a->trap, ssmi_off2(&a->trap, t, h)));
    float       alpha = adt;
    kb->vexp(1, &alpha, &alpha);
    const float gamma = dt * lam, beta = (1.0f - lam) * dt * alpha;
    if (A > 0) {
        ssmi_cpu_m3_load_row3(k, &a->angles, t, h, A, sc->raw);
        k->angle_rate(A, sc->raw, sc->raw);
        for (int64_t i = 0; i < A; ++i) sc->theta[i] += sc->raw[i] * dt;
        ssmi_mimo_sincos(k, A, sc->theta, sc->cosv, sc->sinv, sc->pairs);
    }
    ssmi_mimo_prep_token(R, N, A, sc->qr, sc->kr, &sc->hd, sc->cosv, sc->sinv, 1.0f, sc->qt, sc->kt, NULL, N, NULL);
    memcpy(sc->kcat, sc->kt, (size_t) (R * N) * sizeof(float));
    ssmi_mimo_make_u(R, P, sc->v, sc->hd.mv, sc->u, P);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t p = 0; p < P; ++p) {
            sc->coef[r * P + p]       = gamma * sc->u[r * P + p];
            sc->coef[(R + r) * P + p] = beta * (sc->vprev[p] * sc->hd.mv[r * P + p]);
        }
    /* h = α·h + coefᵀ·kcat (A[p][j] = coef[j][p]) */
    kb->gemm(P, N, 2 * R, sc->coef, 1, P, sc->kcat, N, sc->h, N, NULL, alpha, 0);
    /* yᵀ = h·q̃ᵀ */
    for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < N; ++n) sc->qtT[n * R + r] = sc->qt[r * N + n];
    kb->gemm(P, R, N, sc->h, N, 1, sc->qtT, R, sc->yt, R, NULL, 0.0f, 0);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t p = 0; p < P; ++p) sc->y[r * P + p] = sc->yt[p * R + r] + sc->hd.d * sc->u[r * P + p];

    const int has_z = ssmi_present(&a->z);
    if (has_z) ssmi_cpu_m3_load_row3(k, &a->z, t, h, P, sc->z);
    ssmi_mimo_output_token(k, R, P, sc->y, has_z ? sc->z : NULL, &sc->hd, d->reduce_o, job->p->fuse_pregate_norm != 0,
                           (float) job->p->norm_eps, sc->work, sc->out);
    store_out(job, sc, t, h);
    /* the new k̃ and v become the carried k_state and v_state */
    memcpy(sc->kcat + R * N, sc->kt, (size_t) (R * N) * sizeof(float));
    memcpy(sc->vprev, sc->v, (size_t) P * sizeof(float));
}

/* Row b, head h over its tokens [t0, t1) from read slot `slot`. */
static void step_head(const st_job * job, st_scratch * sc, int64_t b, int64_t t0, int64_t t1, int64_t slot,
                      int64_t h) {
    const ssm_mamba3_mimo_step_args * a  = job->a;
    const ssmi_mimo_kernels *         k  = job->k;
    const ssmi_cpu_kernels *          kb = k->base;
    const int64_t R = job->d->rank, N = job->d->dstate, P = job->d->headdim, A = job->d->nangles;
    const ssm_tensor * const fin[4] = {&a->final_angle_state, &a->final_ssm_state, &a->final_k_state, &a->final_v_state};
    const ssm_tensor * const mid[4] = {&a->intermediate_angle_state, &a->intermediate_ssm_state,
                                       &a->intermediate_k_state, &a->intermediate_v_state};

    ssmi_mimo_head_load(k, &sc->hd, h, R, N, P, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o,
                        &a->outproj_norm_weight, &a->d);
    /* the old state of the slot, all of it before any write */
    for (int64_t r = 0; r < R; ++r)
        kb->load_row(sc->kcat + (R + r) * N, a->k_state.data, a->k_state.dtype, ssmi_off4(&a->k_state, slot, r, h, 0),
                     a->k_state.strides[3], N);
    ssmi_cpu_m3_load_row3(k, &a->v_state, slot, h, P, sc->vprev);
    const ssm_tensor * st = &a->ssm_state;
    for (int64_t p = 0; p < P; ++p)
        kb->load_row(sc->h + p * N, st->data, st->dtype, ssmi_off4(st, slot, h, p, 0), st->strides[3], N);
    if (A > 0) ssmi_cpu_m3_load_row3(k, &a->angle_state, slot, h, A, sc->theta);
    for (int64_t t = t0; t < t1; ++t) {
        step_token(job, sc, t, h);
        store_states(job, sc, mid, t, h);
        if (job->table == NULL) continue;
        const int64_t ws = ssmi_step_token_slot(job->table, b, t - t0);
        if (ws >= 0) store_states(job, sc, fin, ws, h);
    }
    if (job->table != NULL) return;
    const int64_t ws = ssmi_step_write_slot(&job->slots, b);
    if (ws >= 0) store_states(job, sc, fin, ws, h);
}

static void st_task(void * arg, int64_t task, int32_t thread) {
    const st_job *                    job = (const st_job *) arg;
    const ssm_mamba3_mimo_step_args * a   = job->a;
    const ssmi_mimo_dims *            d   = job->d;
    const int64_t                     H = d->nheads, R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles;
    const int64_t                     b  = task / job->blocks;
    const int64_t                     h0 = (task % job->blocks) * job->head_block;
    const int64_t                     h1 = h0 + job->head_block < H ? h0 + job->head_block : H;
    st_scratch                        sc;
    st_carve(&sc, job->scratch + (int64_t) thread * job->thread_floats, d);
    int64_t t0, t1;
    ssmi_step_tokens(&job->slots, b, &t0, &t1);
    const int64_t slot = ssmi_step_read_slot(&job->slots, b);
    if (slot < 0) { /* padding row: zero out and intermediate_* from zeroed carried states */
        const ssm_tensor * const mid[4] = {&a->intermediate_angle_state, &a->intermediate_ssm_state,
                                           &a->intermediate_k_state, &a->intermediate_v_state};
        memset(sc.out, 0, (size_t) (R * P) * sizeof(float));
        memset(sc.h, 0, (size_t) (P * N) * sizeof(float));
        memset(sc.kcat, 0, (size_t) (2 * R * N) * sizeof(float));
        memset(sc.vprev, 0, (size_t) P * sizeof(float));
        memset(sc.theta, 0, (size_t) A * sizeof(float));
        for (int64_t t = t0; t < t1; ++t)
            for (int64_t h = h0; h < h1; ++h) {
                store_out(job, &sc, t, h);
                store_states(job, &sc, mid, t, h);
            }
        return;
    }
    for (int64_t h = h0; h < h1; ++h) step_head(job, &sc, b, t0, t1, slot, h);
}

ssm_status ssmi_cpu_mamba3_mimo_step(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                    const ssm_mamba3_mimo_step_args * a) {
    if (d->batch == 0 || d->nheads == 0) return SSM_STATUS_OK;
    /* a few tasks per thread when the batch alone does not give them */
    const int64_t hb = ssmi_cpu_head_block(d->nheads, d->nheads, d->batch, 4 * ssmi_num_threads(ctx));
    st_job job;
    job.d             = d;
    job.k             = ssmi_mimo_kernels_for(ctx);
    job.a             = a;
    job.p             = p;
    job.slots         = (ssmi_step_slots){&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                                          &a->num_accepted_tokens};
    job.table         = ssmi_step_token_table(&job.slots);
    job.head_block    = hb;
    job.blocks        = (d->nheads + hb - 1) / hb;
    job.thread_floats = st_carve(NULL, NULL, d);
    job.scratch       = ssmi_cpu_thread_scratch(ctx, "mamba3_mimo_step", job.thread_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, d->batch * job.blocks, st_task, &job);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}
