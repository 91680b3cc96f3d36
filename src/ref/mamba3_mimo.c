/* Reference of mamba3_mimo (spec §2.2-§2.5, §3.7, §3.8), in float64, two independent ways:
 *  - ssmi_ref_mamba3_mimo: the chunked form of §2.4 per sequence and head. θ is the running
 *    sum of π·tanh(angles)·Δ from angle_state (never wrapped inside: the rotation is
 *    periodic), da_cs / da_cs_rev / segsum are formed from adt inside each chunk, the
 *    carried state is the pre-loaded ĥ of §2.3 with the initial states folded into Ŝ_0;
 *    pregate_y and chunk_states (Ŝ entering each chunk) are written when given;
 *  - ssmi_ref_mamba3_mimo_recurrent: the recurrence of §2.2 token by token (h, k̃_prev,
 *    u_prev), the same step the decode operator runs (pregate_y, no chunk_states: it has no
 *    chunks).
 * Final states: ssm = h of the last token (P, N), k = k̃ of the last token (not c-scaled),
 * v = raw v of the last token, angle = θ of the last token wrapped to [0, 2π). Varlen:
 * each sequence runs alone from its own states (chunks restart at its first token); an
 * empty one passes its states through (zeros when none are given). */
#include "ref_mimo_common.h"
#include "ssmi_ref_mimo.h"

/* Scratch of one (sequence, head) walk; Lm = the longest sequence. */
typedef struct fwd_scratch {
    double *theta;                  /* Lm·A   θ per token                                */
    double *qbar, *kbar, *qt, *kt;  /* Lm·R·N  q̄, k̄ and their rotations                   */
    double *u;                      /* Lm·R·P  u = v ⊙ mimo_v                             */
    double *a, *dt, *lam, *gam, *sbar, *cf; /* Lm each                                   */
    double *dacs, *dacs_rev, *seg;  /* C, C, C·C (one chunk)                              */
    double *theta_run, *hs, *kprev, *vprev; /* A, N·P, R·N, P: the carried state          */
    double *y, *o, *z, *v, *raw;    /* R·P, R·P, P, P, A                                  */
    double *qb, *kb, *mv, *mz, *mo, *w; /* head parameters                                */
} fwd_scratch;

static ssm_status alloc_scratch(ssm_context * ctx, const ssmi_mimo_dims * d, int64_t Lm, fwd_scratch * w,
                                double ** block) {
    int          ok = 1;
    const size_t L = (size_t)Lm, R = (size_t)d->rank, N = (size_t)d->dstate, P = (size_t)d->headdim;
    const size_t A = (size_t)d->nangles, C = (size_t)d->chunk;
    const size_t LRN = ssmi_ref_m3_mul(ssmi_ref_m3_mul(L, R, &ok), N, &ok);
    const size_t LRP = ssmi_ref_m3_mul(ssmi_ref_m3_mul(L, R, &ok), P, &ok);
    const size_t sizes[30] = {ssmi_ref_m3_mul(L, A, &ok), LRN, LRN, LRN, LRN, LRP, L, L, L, L, L, L, C,
                              C, ssmi_ref_m3_mul(C, C, &ok), A, N * P, R * N, P, R * P, R * P, P, P, A,
                              R * N, R * N, R * P, R * P, R * P, P};
    double ** ptrs[30] = {&w->theta, &w->qbar, &w->kbar, &w->qt,   &w->kt,        &w->u,   &w->a,     &w->dt,
                          &w->lam,   &w->gam,  &w->sbar, &w->cf,   &w->dacs,      &w->dacs_rev, &w->seg, &w->theta_run,
                          &w->hs,    &w->kprev, &w->vprev, &w->y,  &w->o,         &w->z,   &w->v,     &w->raw,
                          &w->qb,    &w->kb,   &w->mv,   &w->mz,   &w->mo,        &w->w};
    SSM_RETURN_IF(!ok, ctx, SSM_STATUS_OUT_OF_MEMORY, "mamba3_mimo: reference scratch size overflows size_t");
    return ssmi_ref_m3_scratch(ctx, "mamba3_mimo", 30, sizes, ptrs, block);
}

static int64_t max_len(const ssmi_mimo_dims * d, const ssm_tensor * cu) {
    int64_t m = 0;
    for (int64_t i = 0; i < d->nseq; ++i) {
        const ssmi_ref_mimo_seq s = ssmi_ref_mimo_sequence(d, cu, i);
        if (s.len > m) m = s.len;
    }
    return m;
}

static ssmi_ref_mimo_head head_of(const fwd_scratch * w) {
    ssmi_ref_mimo_head hp;
    memset(&hp, 0, sizeof hp);
    hp.qb = w->qb;
    hp.kb = w->kb;
    hp.mv = w->mv;
    hp.mz = w->mz;
    hp.mo = w->mo;
    hp.w = w->w;
    return hp;
}

/* θ_t, q̄, k̄, q̃, k̃, u and the scalars of every token of the sequence (head h). θ starts
 * from st->theta (the initial angle state) and st->theta ends at θ of the last token. */
static void load_tokens(const ssmi_mimo_dims * d, const ssm_mamba3_mimo_args * a, const ssmi_ref_mimo_seq * s,
                        int64_t h, const ssmi_ref_mimo_head * hp, const fwd_scratch * w) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles, g = ssmi_ref_mimo_group(d, h);
    const ssmi_ref_mimo_scalars sc = {w->a, w->dt, w->lam, w->gam, w->sbar, w->cf};
    ssmi_ref_mimo_load_scalars(&sc, &a->adt, &a->dt, &a->trap, s->b, h, s->t0, s->len);
    for (int64_t t = 0; t < s->len; ++t) {
        const int64_t tt = s->t0 + t;
        if (A > 0) ssmi_ref_m3_read(w->raw, &a->angles, ssmi_off4(&a->angles, s->b, tt, h, 0), A);
        for (int64_t i = 0; i < A; ++i) {
            w->theta_run[i] += ssmi_ref_m3_omega(w->raw[i], w->dt[t]);
            w->theta[t * A + i] = w->theta_run[i];
        }
        double * qb = w->qbar + t * R * N;
        double * kb = w->kbar + t * R * N;
        ssmi_ref_mimo_load_qk_token(qb, kb, &a->q, &a->k, hp, s->b, tt, g, R, N);
        for (int64_t r = 0; r < R; ++r) {
            ssmi_ref_mimo_rotate(w->qt + (t * R + r) * N, qb + r * N, w->theta + t * A, N, A, 1.0);
            ssmi_ref_mimo_rotate(w->kt + (t * R + r) * N, kb + r * N, w->theta + t * A, N, A, 1.0);
        }
        ssmi_ref_m3_read(w->v, &a->v, ssmi_off4(&a->v, s->b, tt, h, 0), P);
        ssmi_ref_mimo_lift_v(w->u + t * R * P, w->v, hp, R, P);
    }
}

/* Ŝ_0 = ssm_stateᵀ + Δ_0·σ(−trap_0)·Σ_r k_state[r] ⊗ (v_state ⊙ mimo_v[r]) (spec §2.3);
 * st->hs holds ssm_stateᵀ (or 0) on entry. */
static void fold_initial(const ssmi_mimo_dims * d, const ssmi_ref_mimo_head * hp, const fwd_scratch * w) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim;
    const double  beta0 = w->dt[0] * (1.0 - w->lam[0]);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < N; ++n) {
            const double kn = beta0 * w->kprev[r * N + n];
            for (int64_t p = 0; p < P; ++p) w->hs[n * P + p] += kn * w->vprev[p] * hp->mv[r * P + p];
        }
}

/* One chunk [cs, cs + Lc) of the sequence: outputs (spec §2.4) then Ŝ ← Ŝ_{c+1}. */
static void run_chunk(const ssm_mamba3_mimo_params * prm, const ssmi_mimo_dims * d, const ssm_mamba3_mimo_args * a,
                      const ssmi_ref_mimo_seq * s, int64_t h, const ssmi_ref_mimo_head * hp, const fwd_scratch * w,
                      int64_t cs, int64_t Lc) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, C = d->chunk;
    /* chunk-local decays from adt: the inclusive prefix da_cs, and da_cs_rev[j] =
     * da_cs[last] − da_cs[j], segsum[i][j] = da_cs[i] − da_cs[j] as differences of it (spec
     * §2.4), as every backend forms them: a −∞ adt is then NaN for every later token of the
     * chunk (−∞ − (−∞)) on all of them alike (docs/ops/nonfinite.md) */
    double acc = 0.0;
    for (int64_t i = 0; i < Lc; ++i) w->dacs[i] = (acc += w->a[cs + i]);
    for (int64_t i = 0; i < Lc; ++i) w->dacs_rev[i] = w->dacs[Lc - 1] - w->dacs[i];
    for (int64_t i = 0; i < Lc; ++i)
        for (int64_t j = 0; j < i; ++j) w->seg[i * C + j] = w->dacs[i] - w->dacs[j];
    const int has_z = ssmi_present(&a->z);
    for (int64_t i = 0; i < Lc; ++i) {
        const int64_t t = cs + i;
        for (int64_t r = 0; r < R; ++r) {
            const double * qt = w->qt + (t * R + r) * N;
            const double * qb = w->qbar + (t * R + r) * N;
            double *       y = w->y + r * P;
            const double   einter = exp(w->dacs[i]);
            for (int64_t p = 0; p < P; ++p) {
                double sp = 0.0;
                for (int64_t n = 0; n < N; ++n) sp += w->hs[n * P + p] * qt[n];
                y[p] = einter * sp + hp->dskip * w->u[(t * R + r) * P + p];
            }
            for (int64_t j = 0; j < i; ++j) /* intra, strict in time, every rank pair */
                for (int64_t r2 = 0; r2 < R; ++r2) {
                    const int64_t sj = cs + j;
                    const double  sc = exp(w->seg[i * C + j]) * w->cf[sj] *
                                      ssmi_ref_m3_dot(qt, w->kt + (sj * R + r2) * N, N);
                    for (int64_t p = 0; p < P; ++p) y[p] += sc * w->u[(sj * R + r2) * P + p];
                }
            for (int64_t r2 = 0; r2 < R; ++r2) { /* diagonal: unrotated q̄·k̄, weight γ */
                const double sc = w->gam[t] * ssmi_ref_m3_dot(qb, w->kbar + (t * R + r2) * N, N);
                for (int64_t p = 0; p < P; ++p) y[p] += sc * w->u[(t * R + r2) * P + p];
            }
        }
        ssmi_ref_mimo_write_y(&a->pregate_y, w->y, s->b, s->t0 + t, h, R, P);
        if (has_z) ssmi_ref_m3_read(w->z, &a->z, ssmi_off4(&a->z, s->b, s->t0 + t, h, 0), P);
        ssmi_ref_mimo_output(w->o, w->y, has_z ? w->z : NULL, hp, prm->fuse_pregate_norm, prm->norm_eps, R, P);
        ssmi_ref_mimo_write_out(&a->out, w->o, hp->has_o, s->b, s->t0 + t, h, R, P);
    }
    /* Ŝ_{c+1} = e^{da_cs[last]}·Ŝ + Σ_j Σ_r e^{da_cs_rev[j]}·c_j·k̃[j,r] ⊗ u[j,r] */
    const double edecay = exp(w->dacs[Lc - 1]);
    for (int64_t x = 0; x < N * P; ++x) w->hs[x] *= edecay;
    for (int64_t j = 0; j < Lc; ++j) {
        const int64_t sj = cs + j;
        const double  wj = exp(w->dacs_rev[j]) * w->cf[sj];
        for (int64_t r = 0; r < R; ++r)
            for (int64_t n = 0; n < N; ++n) {
                const double kn = wj * w->kt[(sj * R + r) * N + n];
                for (int64_t p = 0; p < P; ++p) w->hs[n * P + p] += kn * w->u[(sj * R + r) * P + p];
            }
    }
}

/* Ŝ (N×P) into row `row` of chunk_states (NCS, H, N, P) when it is given. */
static void write_chunk_state(const ssm_tensor * cs, const double * hs, int64_t row, int64_t h, int64_t N, int64_t P) {
    if (!ssmi_present(cs)) return;
    for (int64_t n = 0; n < N; ++n) ssmi_ref_m3_write(cs, ssmi_off4(cs, row, h, n, 0), hs + n * P, P);
}

/* row0: the first chunk_states row of the sequence. */
static void chunked_head(const ssm_mamba3_mimo_params * prm, const ssmi_mimo_dims * d, const ssm_mamba3_mimo_args * a,
                         const ssmi_ref_mimo_seq * s, int64_t h, const fwd_scratch * w, int64_t row0) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles;
    ssmi_ref_mimo_head hp = head_of(w);
    ssmi_ref_mimo_load_head(&hp, d, h, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o,
                            &a->outproj_norm_weight, &a->d);
    const ssmi_ref_mimo_state st = {w->theta_run, w->hs, w->kprev, w->vprev};
    ssmi_ref_mimo_read_states(&st, &a->angle_state, &a->ssm_state, &a->k_state, &a->v_state, s->n, h, R, N, P, A);
    if (s->len > 0) {
        load_tokens(d, a, s, h, &hp, w);
        fold_initial(d, &hp, w);
        for (int64_t cs = 0; cs < s->len; cs += d->chunk) {
            const int64_t Lc = s->len - cs < d->chunk ? s->len - cs : d->chunk;
            write_chunk_state(&a->chunk_states, w->hs, row0 + cs / d->chunk, h, N, P);
            run_chunk(prm, d, a, s, h, &hp, w, cs, Lc);
        }
        const int64_t last = s->len - 1;
        memcpy(w->kprev, w->kt + last * R * N, (size_t)(R * N) * sizeof(double));
        ssmi_ref_m3_read(w->vprev, &a->v, ssmi_off4(&a->v, s->b, s->t0 + last, h, 0), P);
    }
    ssmi_ref_mimo_write_states(&st, &a->final_angle_state, &a->final_ssm_state, &a->final_k_state,
                               &a->final_v_state, s->n, h, R, N, P, A, s->len > 0);
}

ssm_status ssmi_ref_mamba3_mimo(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                const ssm_mamba3_mimo_args * a) {
    fwd_scratch w;
    double *    block = NULL;
    SSM_FORWARD_IF_ERROR(alloc_scratch(ctx, d, max_len(d, &a->cu_seqlens), &w, &block));
    int64_t row0 = 0; /* chunk_states: one row per chunk, sequence after sequence */
    for (int64_t i = 0; i < d->nseq; ++i) {
        const ssmi_ref_mimo_seq s = ssmi_ref_mimo_sequence(d, &a->cu_seqlens, i);
        for (int64_t h = 0; h < d->nheads; ++h) chunked_head(p, d, a, &s, h, &w, row0);
        row0 += (s.len + d->chunk - 1) / d->chunk;
    }
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}

/* ---- token recurrence (§2.2) ------------------------------------------------------------ */

static void recurrent_head(const ssm_mamba3_mimo_params * prm, const ssmi_mimo_dims * d,
                           const ssm_mamba3_mimo_args * a, const ssmi_ref_mimo_seq * s, int64_t h,
                           const fwd_scratch * w) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim, A = d->nangles, g = ssmi_ref_mimo_group(d, h);
    ssmi_ref_mimo_head hp = head_of(w);
    ssmi_ref_mimo_load_head(&hp, d, h, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o,
                            &a->outproj_norm_weight, &a->d);
    const ssmi_ref_mimo_state st = {w->theta_run, w->hs, w->kprev, w->vprev};
    ssmi_ref_mimo_read_states(&st, &a->angle_state, &a->ssm_state, &a->k_state, &a->v_state, s->n, h, R, N, P, A);
    /* u_prev = v_state ⊙ mimo_v[r], kept in w->u (R·P); q̄/k̄/q̃/k̃ of the token in row 0 */
    double * uprev = w->u + R * P;
    ssmi_ref_mimo_lift_v(uprev, w->vprev, &hp, R, P);
    const int has_z = ssmi_present(&a->z);
    for (int64_t t = 0; t < s->len; ++t) {
        const int64_t tt = s->t0 + t;
        const double  dt = ssmi_get_f64(&a->dt, ssmi_off3(&a->dt, s->b, h, tt));
        const double  adt = ssmi_get_f64(&a->adt, ssmi_off3(&a->adt, s->b, h, tt));
        const double  lam = ssmi_ref_sigmoid(ssmi_get_f64(&a->trap, ssmi_off3(&a->trap, s->b, h, tt)));
        if (A > 0) ssmi_ref_m3_read(w->raw, &a->angles, ssmi_off4(&a->angles, s->b, tt, h, 0), A);
        for (int64_t i = 0; i < A; ++i) w->theta_run[i] += ssmi_ref_m3_omega(w->raw[i], dt);
        ssmi_ref_mimo_load_qk_token(w->qbar, w->kbar, &a->q, &a->k, &hp, s->b, tt, g, R, N);
        for (int64_t r = 0; r < R; ++r) {
            ssmi_ref_mimo_rotate(w->qt + r * N, w->qbar + r * N, w->theta_run, N, A, 1.0);
            ssmi_ref_mimo_rotate(w->kt + r * N, w->kbar + r * N, w->theta_run, N, A, 1.0);
        }
        ssmi_ref_m3_read(w->v, &a->v, ssmi_off4(&a->v, s->b, tt, h, 0), P);
        ssmi_ref_mimo_lift_v(w->u, w->v, &hp, R, P);
        const double alpha = exp(adt), beta = (1.0 - lam) * dt * alpha, gam = lam * dt;
        for (int64_t x = 0; x < N * P; ++x) w->hs[x] *= alpha;
        for (int64_t r = 0; r < R; ++r)
            for (int64_t n = 0; n < N; ++n) {
                const double kb = beta * w->kprev[r * N + n], kg = gam * w->kt[r * N + n];
                for (int64_t p = 0; p < P; ++p)
                    w->hs[n * P + p] += kb * uprev[r * P + p] + kg * w->u[r * P + p];
            }
        for (int64_t r = 0; r < R; ++r)
            for (int64_t p = 0; p < P; ++p) {
                double sp = 0.0;
                for (int64_t n = 0; n < N; ++n) sp += w->hs[n * P + p] * w->qt[r * N + n];
                w->y[r * P + p] = sp + hp.dskip * w->u[r * P + p];
            }
        ssmi_ref_mimo_write_y(&a->pregate_y, w->y, s->b, tt, h, R, P);
        if (has_z) ssmi_ref_m3_read(w->z, &a->z, ssmi_off4(&a->z, s->b, tt, h, 0), P);
        ssmi_ref_mimo_output(w->o, w->y, has_z ? w->z : NULL, &hp, prm->fuse_pregate_norm, prm->norm_eps, R, P);
        ssmi_ref_mimo_write_out(&a->out, w->o, hp.has_o, s->b, tt, h, R, P);
        memcpy(w->kprev, w->kt, (size_t)(R * N) * sizeof(double));
        memcpy(uprev, w->u, (size_t)(R * P) * sizeof(double));
        memcpy(w->vprev, w->v, (size_t)P * sizeof(double));
    }
    ssmi_ref_mimo_write_states(&st, &a->final_angle_state, &a->final_ssm_state, &a->final_k_state,
                               &a->final_v_state, s->n, h, R, N, P, A, s->len > 0);
}

ssm_status ssmi_ref_mamba3_mimo_recurrent(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                          const ssmi_mimo_dims * d, const ssm_mamba3_mimo_args * a) {
    fwd_scratch w;
    double *    block = NULL;
    /* one token of rows, plus a second R·P row in u for u_prev */
    SSM_FORWARD_IF_ERROR(alloc_scratch(ctx, d, 2, &w, &block));
    for (int64_t i = 0; i < d->nseq; ++i) {
        const ssmi_ref_mimo_seq s = ssmi_ref_mimo_sequence(d, &a->cu_seqlens, i);
        for (int64_t h = 0; h < d->nheads; ++h) recurrent_head(p, d, a, &s, h, &w);
    }
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}
