/* Reference of mamba3_mimo_step (spec §3.9 in the ssmops conventions), float64: per batch
 * row and head, from the pool row idx[b] (or b):
 *   θ_new = angle_state + π·tanh(angles)·Δ (NOT wrapped), q̃ = Rot(θ_new)(q + q_bias),
 *   k̃ likewise; α = e^{adt}, λ = σ(trap), γ = λΔ, β = (1−λ)·Δ·α;
 *   h ← α·h + β·Σ_r k_state[r] ⊗ (v_state ⊙ mimo_v[r]) + γ·Σ_r k̃[r] ⊗ (v ⊙ mimo_v[r]);
 *   y_r = hᵀ q̃_r + D·u_r, then the forward's output stage (gate per rank in both output
 *   modes, fused norm when asked, reduction with mimo_o).
 * The new states go to row dst[b] of the final_* pools (idx[b] without dst; nothing when
 * negative). Padding rows (idx[b] < 0) get out = 0 and touch no state; only the write slots
 * of non-padding rows are written. Every value of a slot is read before any is written, so final_* that
 * are the same views as their input states (in place) give the same result. */
#include "ref_mimo_common.h"
#include "ssmi_ref_mimo.h"

typedef struct step_scratch {
    double *theta, *hs, *kprev, *vprev, *uprev, *qbar, *kbar, *qt, *kt, *u, *v, *z, *raw, *y, *o;
    double *qb, *kb, *mv, *mz, *mo, *w;
} step_scratch;

static void step_head(const ssm_mamba3_mimo_params * prm, const ssmi_mimo_dims * d,
                      const ssm_mamba3_mimo_step_args * a, int64_t b, int64_t slot, int64_t ws, int64_t h,
                      const step_scratch * w) {
    const int64_t      R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles, g = ssmi_ref_mimo_group(d, h);
    ssmi_ref_mimo_head hp = {w->qb, w->kb, w->mv, w->mz, w->mo, w->w, 0.0, 0, 0, 0};
    ssmi_ref_mimo_load_head(&hp, d, h, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o,
                            &a->outproj_norm_weight, &a->d);
    const ssmi_ref_mimo_state st = {w->theta, w->hs, w->kprev, w->vprev};
    ssmi_ref_mimo_read_states(&st, &a->angle_state, &a->ssm_state, &a->k_state, &a->v_state, slot, h, R, N, P, A);
    const double dt = ssmi_get_f64(&a->dt, ssmi_off2(&a->dt, b, h));
    const double adt = ssmi_get_f64(&a->adt, ssmi_off2(&a->adt, b, h));
    const double lam = ssmi_ref_sigmoid(ssmi_get_f64(&a->trap, ssmi_off2(&a->trap, b, h)));
    if (A > 0) ssmi_ref_m3_read(w->raw, &a->angles, ssmi_off3(&a->angles, b, h, 0), A);
    for (int64_t i = 0; i < A; ++i) w->theta[i] += ssmi_ref_m3_omega(w->raw[i], dt);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < N; ++n) {
            w->qbar[r * N + n] = ssmi_get_f64(&a->q, ssmi_off4(&a->q, b, r, g, n)) + hp.qb[r * N + n];
            w->kbar[r * N + n] = ssmi_get_f64(&a->k, ssmi_off4(&a->k, b, r, g, n)) + hp.kb[r * N + n];
        }
    for (int64_t r = 0; r < R; ++r) {
        ssmi_ref_mimo_rotate(w->qt + r * N, w->qbar + r * N, w->theta, N, A, 1.0);
        ssmi_ref_mimo_rotate(w->kt + r * N, w->kbar + r * N, w->theta, N, A, 1.0);
    }
    ssmi_ref_m3_read(w->v, &a->v, ssmi_off3(&a->v, b, h, 0), P);
    ssmi_ref_mimo_lift_v(w->u, w->v, &hp, R, P);
    ssmi_ref_mimo_lift_v(w->uprev, w->vprev, &hp, R, P);
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
            w->y[r * P + p] = sp + hp.dskip * w->u[r * P + p];
        }
    const int has_z = ssmi_present(&a->z);
    if (has_z) ssmi_ref_m3_read(w->z, &a->z, ssmi_off3(&a->z, b, h, 0), P);
    ssmi_ref_mimo_output(w->o, w->y, has_z ? w->z : NULL, &hp, prm->fuse_pregate_norm, prm->norm_eps, R, P);
    ssmi_ref_mimo_write_out(&a->out, w->o, hp.has_o, b, -1, h, R, P);
    memcpy(w->kprev, w->kt, (size_t)(R * N) * sizeof(double));
    memcpy(w->vprev, w->v, (size_t)P * sizeof(double));
    if (ws >= 0)
        ssmi_ref_mimo_write_states(&st, &a->final_angle_state, &a->final_ssm_state, &a->final_k_state,
                                   &a->final_v_state, ws, h, R, N, P, A, 0);
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
    const ssm_tensor * idx = &a->state_batch_indices, *dst = &a->dst_state_batch_indices;
    for (int64_t b = 0; b < d->batch; ++b) {
        const int64_t slot = ssmi_present(idx) ? ssmi_get_i64(idx, ssmi_off1(idx, b)) : b;
        const int64_t ws   = ssmi_present(dst) ? ssmi_get_i64(dst, ssmi_off1(dst, b)) : slot;
        for (int64_t h = 0; h < d->nheads; ++h) {
            if (slot < 0) /* padding row */
                ssmi_ref_mimo_write_out_zero(&a->out, d->reduce_o, b, h, d->rank, d->headdim);
            else
                step_head(p, d, a, b, slot, ws, h, &w);
        }
    }
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}
