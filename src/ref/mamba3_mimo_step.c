/* Reference of mamba3_mimo_step (spec §3.9 in the ssmops conventions), float64: per row and
 * head, for each of the row's tokens (one token b without cu_seqlens), from the pool row the
 * row reads (core/step_slots.h):
 *   θ_new = angle_state + π·tanh(angles)·Δ (NOT wrapped), q̃ = Rot(θ_new)(q + q_bias),
 *   k̃ likewise; α = e^{adt}, λ = σ(trap), γ = λΔ, β = (1−λ)·Δ·α;
 *   h ← α·h + β·Σ_r k_state[r] ⊗ (v_state ⊙ mimo_v[r]) + γ·Σ_r k̃[r] ⊗ (v ⊙ mimo_v[r]);
 *   y_r = hᵀ q̃_r + D·u_r, then the forward's output stage (gate per rank in both output
 *   modes, fused norm when asked, reduction with mimo_o).
 * The four states (θ, h, k̃, v) stay unrounded between the tokens; intermediate_* get them
 * after each token. A token table stores them after each token into the pools, else they go
 * after the row's tokens to its write slot (nothing when negative; a row of no token carries
 * its read slot there). Padding rows (read slot < 0) get out = 0 and intermediate_* = 0 for
 * their tokens and touch no state. Every value of a slot is read before any is written, and
 * the validated slot rules keep rows independent, so final_* that are the same views as
 * their input states (in place) give the same result. */
#include "../core/step_slots.h"
#include "ref_mimo_common.h"
#include "ssmi_ref_mimo.h"

typedef struct step_scratch {
    double *theta, *hs, *kprev, *vprev, *uprev, *qbar, *kbar, *qt, *kt, *u, *v, *z, *raw, *y, *o;
    double *qb, *kb, *mv, *mz, *mo, *w;
} step_scratch;

/* Token t of head h on the carried states st (parameters hp); writes out[t, h]. */
static void step_token(const ssm_mamba3_mimo_params * prm, const ssmi_mimo_dims * d,
                       const ssm_mamba3_mimo_step_args * a, const ssmi_ref_mimo_head * hp, int64_t t, int64_t h,
                       const step_scratch * w) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles, g = ssmi_ref_mimo_group(d, h);
    const double  dt = ssmi_get_f64(&a->dt, ssmi_off2(&a->dt, t, h));
    const double  adt = ssmi_get_f64(&a->adt, ssmi_off2(&a->adt, t, h));
    const double  lam = ssmi_ref_sigmoid(ssmi_get_f64(&a->trap, ssmi_off2(&a->trap, t, h)));
    if (A > 0) ssmi_ref_m3_read(w->raw, &a->angles, ssmi_off3(&a->angles, t, h, 0), A);
    for (int64_t i = 0; i < A; ++i) w->theta[i] += ssmi_ref_m3_omega(w->raw[i], dt);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < N; ++n) {
            w->qbar[r * N + n] = ssmi_get_f64(&a->q, ssmi_off4(&a->q, t, r, g, n)) + hp->qb[r * N + n];
            w->kbar[r * N + n] = ssmi_get_f64(&a->k, ssmi_off4(&a->k, t, r, g, n)) + hp->kb[r * N + n];
        }
    for (int64_t r = 0; r < R; ++r) {
        ssmi_ref_mimo_rotate(w->qt + r * N, w->qbar + r * N, w->theta, N, A, 1.0);
        ssmi_ref_mimo_rotate(w->kt + r * N, w->kbar + r * N, w->theta, N, A, 1.0);
    }
    ssmi_ref_m3_read(w->v, &a->v, ssmi_off3(&a->v, t, h, 0), P);
    ssmi_ref_mimo_lift_v(w->u, w->v, hp, R, P);
    ssmi_ref_mimo_lift_v(w->uprev, w->vprev, hp, R, P);
    const double alpha = exp(adt), gam = lam * dt, beta = (1.0 - lam) * dt * alpha;
    for (int64_t x = 0; x < N * P; ++x) w->hs[x] *= alpha;
    for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < N; ++n) {
            const double kb = beta * w->kprev[r * N + n], kg = gam * w->kt[r * N + n];
            for (int64_t p = 0; p < P; ++p) w->hs[n * P + p] += kb * w->uprev[r * P + p] + kg * w->u[r * P + p];
        }
    for (int64_t r = 0; r < R; ++r)
        for (int64_t p = 0; p < P; ++p) {
            double sp = 0.0;
            for (int64_t n = 0; n < N; ++n) sp += w->hs[n * P + p] * w->qt[r * N + n];
            w->y[r * P + p] = sp + hp->dskip * w->u[r * P + p];
        }
    const int has_z = ssmi_present(&a->z);
    if (has_z) ssmi_ref_m3_read(w->z, &a->z, ssmi_off3(&a->z, t, h, 0), P);
    ssmi_ref_mimo_output(w->o, w->y, has_z ? w->z : NULL, hp, prm->fuse_pregate_norm, prm->norm_eps, R, P);
    ssmi_ref_mimo_write_out(&a->out, w->o, hp->has_o, t, -1, h, R, P);
    memcpy(w->kprev, w->kt, (size_t)(R * N) * sizeof(double));
    memcpy(w->vprev, w->v, (size_t)P * sizeof(double));
}

/* The states st of head h to row `row` of the final_* pools (fin) or intermediate_* (mid). */
static void store_states(const ssmi_mimo_dims * d, const ssm_tensor * const four[4], const ssmi_ref_mimo_state * st,
                         int64_t row, int64_t h) {
    ssmi_ref_mimo_write_states(st, four[0], four[1], four[2], four[3], row, h, d->rank, d->dstate, d->headdim,
                               d->nangles, 0);
}

/* Row b, head h over its tokens [t0, t1) from read slot n. */
static void step_head(const ssm_mamba3_mimo_params * prm, const ssmi_mimo_dims * d,
                      const ssm_mamba3_mimo_step_args * a, const ssmi_step_slots * sl, int64_t b, int64_t t0,
                      int64_t t1, int64_t n, int64_t h, const step_scratch * w) {
    const ssm_tensor * const fin[4] = {&a->final_angle_state, &a->final_ssm_state, &a->final_k_state, &a->final_v_state};
    const ssm_tensor * const mid[4] = {&a->intermediate_angle_state, &a->intermediate_ssm_state,
                                       &a->intermediate_k_state, &a->intermediate_v_state};
    const ssm_tensor *       table = ssmi_step_token_table(sl);
    ssmi_ref_mimo_head       hp = {w->qb, w->kb, w->mv, w->mz, w->mo, w->w, 0.0, 0, 0, 0};
    ssmi_ref_mimo_load_head(&hp, d, h, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o,
                            &a->outproj_norm_weight, &a->d);
    const ssmi_ref_mimo_state st = {w->theta, w->hs, w->kprev, w->vprev};
    ssmi_ref_mimo_read_states(&st, &a->angle_state, &a->ssm_state, &a->k_state, &a->v_state, n, h, d->rank, d->dstate,
                              d->headdim, d->nangles);
    for (int64_t t = t0; t < t1; ++t) {
        step_token(prm, d, a, &hp, t, h, w);
        store_states(d, mid, &st, t, h);
        if (table == NULL) continue;
        const int64_t ws = ssmi_step_token_slot(table, b, t - t0);
        if (ws >= 0) store_states(d, fin, &st, ws, h);
    }
    if (table != NULL) return;
    const int64_t ws = ssmi_step_write_slot(sl, b);
    if (ws >= 0) store_states(d, fin, &st, ws, h);
}

ssm_status ssmi_ref_mamba3_mimo_step(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                     const ssm_mamba3_mimo_step_args * a) {
    int          ok = 1;
    const size_t R = (size_t)d->rank, N = (size_t)d->dstate, P = (size_t)d->headdim, A = (size_t)d->nangles;
    const size_t sizes[21] = {A,     ssmi_ref_m3_mul(N, P, &ok), R * N, P, R * P, R * N, R * N, R * N, R * N, R * P,
                              P,     P, A, R * P, R * P, R * N, R * N, R * P, R * P, R * P, P};
    step_scratch w;
    double **    ptrs[21] = {&w.theta, &w.hs, &w.kprev, &w.vprev, &w.uprev, &w.qbar, &w.kbar, &w.qt, &w.kt,
                             &w.u,     &w.v,  &w.z,     &w.raw,   &w.y,     &w.o,    &w.qb,   &w.kb, &w.mv,
                             &w.mz,    &w.mo, &w.w};
    double *     block = NULL;
    SSM_RETURN_IF(!ok, ctx, SSM_STATUS_OUT_OF_MEMORY, "mamba3_mimo_step: reference scratch size overflows size_t");
    SSM_FORWARD_IF_ERROR(ssmi_ref_m3_scratch(ctx, "mamba3_mimo_step", 21, sizes, ptrs, &block));
    const ssmi_step_slots sl = {&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                                &a->num_accepted_tokens};
    const ssm_tensor * const mid[4] = {&a->intermediate_angle_state, &a->intermediate_ssm_state,
                                       &a->intermediate_k_state, &a->intermediate_v_state};
    /* padding rows: zeros from the carried-state scratch, which step_head reloads per head */
    const ssmi_ref_mimo_state zero = {w.theta, w.hs, w.kprev, w.vprev};
    for (int64_t b = 0; b < d->batch; ++b) {
        int64_t t0, t1;
        ssmi_step_tokens(&sl, b, &t0, &t1);
        const int64_t n = ssmi_step_read_slot(&sl, b);
        for (int64_t h = 0; h < d->nheads; ++h) {
            if (n >= 0) {
                step_head(p, d, a, &sl, b, t0, t1, n, h, &w);
                continue;
            }
            memset(w.theta, 0, A * sizeof(double));
            memset(w.hs, 0, N * P * sizeof(double));
            memset(w.kprev, 0, R * N * sizeof(double));
            memset(w.vprev, 0, P * sizeof(double));
            for (int64_t t = t0; t < t1; ++t) { /* padding row: zero out and intermediate_* */
                ssmi_ref_mimo_write_out_zero(&a->out, d->reduce_o, t, h, d->rank, d->headdim);
                store_states(d, mid, &zero, t, h);
            }
        }
    }
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}
