/* Reference of mamba3_siso_bwd (spec §6.2, §6.5, §6.6) in float64: the global
 * per-sequence formulas, O(L²) per sequence and head, recomputing the forward from the
 * inputs. Per sequence and V-head h, with cs_t the sequence-global inclusive cumsum of ADT:
 *   dy_t = dO_t ⊙ silu(z_t);  dZ_t = dO_t ⊙ y_t ⊙ sig(z_t)(1 + z_t(1 − sig(z_t)))
 *   dcs_t (the gradient w.r.t. cs_t taken as free) collects the readout, the pair and the
 *   final-state terms; dADT_r = Σ_{t≥r} dcs_t (this equals the four-term formula of §6.2).
 *   dq̂, dKs (= d(σ·k̂)), dv, dQK, dH_in as in §6.2; then the preprocessing chain (bias,
 *   rotation, GQA sums), the trapezoid scalars (γ, γ', the t=0 fold) and the angle cumsum
 *   backward (§6.6). An empty sequence passes every dfinal_* through to its d*_state. */
#include "ref_mamba3_common.h"
#include "ssmi_ref_mamba3.h"

static const char k_op[] = "mamba3_siso_bwd";

/* Scratch of one (sequence, head) of up to L tokens. */
typedef struct bwd_scratch {
    ssmi_ref_m3_scalars sc;
    double *            cs, *dcs, *dqk, *dQK, *dsig, *dgam;      /* L each                           */
    double *            qt, *kt, *qh, *kh, *dqh, *dks, *gq, *gk; /* L×K: q̃ k̃ q̂ k̂ dq̂ dKs dq̃ dk̃      */
    double *            v, *z, *dO, *dy, *y, *dvv;               /* L×V                              */
    double *            theta, *raw, *dth;                       /* L×A                              */
    double *            hin, *dhin, *dsout;                      /* V×K                              */
    double *            tk, *tv, *dkout, *dvout, *dthout;        /* K, V, K, V, A                    */
} bwd_scratch;

/* Accumulators over sequences and heads: dq, dk (B, S, Hq, K), dq_bias, dk_bias (H, K), dd (H). */
typedef struct bwd_acc {
    double *dq, *dk, *dqb, *dkb, *dd;
} bwd_acc;

static ssm_status bwd_alloc(ssm_context * ctx, const ssmi_mamba3_dims * d, int64_t L, bwd_scratch * w, bwd_acc * acc,
                            double ** block) {
    int          ok = 1;
    const size_t l = (size_t)L, K = (size_t)d->dk, V = (size_t)d->dv, A = (size_t)d->nangles;
    const size_t lk = ssmi_ref_m3_mul(l, K, &ok), lv = ssmi_ref_m3_mul(l, V, &ok), la = ssmi_ref_m3_mul(l, A, &ok);
    const size_t vk = ssmi_ref_m3_mul(V, K, &ok);
    const size_t tok = ssmi_ref_m3_mul(ssmi_ref_m3_mul((size_t)d->batch, (size_t)d->seqlen, &ok),
                                       ssmi_ref_m3_mul((size_t)d->nheads_qk, K, &ok), &ok);
    const size_t hk = ssmi_ref_m3_mul((size_t)d->nheads, K, &ok);
    enum { N = 42 };
    const size_t sizes[N] = {l,  l,  l,  l,  l,  l,  l,  l,  l,  l,   l,   l,  lk, lk,
                             lk, lk, lk, lk, lk, lk, lv, lv, lv, lv,  lv,  lv, la, la,
                             la, vk, vk, vk, K,  V,  K,  V,  A,  tok, tok, hk, hk, (size_t)d->nheads};
    double **    ptrs[N] = {&w->sc.adt, &w->sc.dt,  &w->sc.lam, &w->sc.gam, &w->sc.gsh, &w->sc.sig, &w->cs,
                            &w->dcs,    &w->dqk,    &w->dQK,    &w->dsig,   &w->dgam,   &w->qt,     &w->kt,
                            &w->qh,     &w->kh,     &w->dqh,    &w->dks,    &w->gq,     &w->gk,     &w->v,
                            &w->z,      &w->dO,     &w->dy,     &w->y,      &w->dvv,    &w->theta,  &w->raw,
                            &w->dth,    &w->hin,    &w->dhin,   &w->dsout,  &w->tk,     &w->tv,     &w->dkout,
                            &w->dvout,  &w->dthout, &acc->dq,   &acc->dk,   &acc->dqb,  &acc->dkb,  &acc->dd};
    SSM_RETURN_IF(!ok, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: reference scratch size overflows size_t", k_op);
    SSM_FORWARD_IF_ERROR(ssmi_ref_m3_scratch(ctx, k_op, N, sizes, ptrs, block));
    memset(acc->dq, 0, tok * sizeof(double));
    memset(acc->dk, 0, tok * sizeof(double));
    memset(acc->dqb, 0, hk * sizeof(double));
    memset(acc->dkb, 0, hk * sizeof(double));
    memset(acc->dd, 0, (size_t)d->nheads * sizeof(double));
    return SSM_STATUS_OK;
}

static void write_opt3(const ssm_tensor * t, int64_t n, int64_t h, const double * src, int64_t len) {
    if (ssmi_present(t) && len > 0) ssmi_ref_m3_write(t, ssmi_off3(t, n, h, 0), src, len);
}

static void write_opt4(const ssm_tensor * t, int64_t n, int64_t h, const double * src, int64_t V, int64_t K) {
    if (!ssmi_present(t)) return;
    for (int64_t r = 0; r < V; ++r) ssmi_ref_m3_write(t, ssmi_off4(t, n, h, r, 0), src + r * K, K);
}

/* The forward of one (sequence, head): scalars, cs, θ, q̃ k̃ q̂ k̂ d_t, v, z, H_in, pre-gate y. */
static void recompute_forward(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_bwd_args * a, const ssmi_ref_m3_seq * s,
                              int64_t h, bwd_scratch * w) {
    const int64_t L = s->len, K = d->dk, V = d->dv, A = d->nangles, g = h / (d->nheads / d->nheads_qk);
    const double  dskip = ssmi_present(&a->d) ? ssmi_get_f64(&a->d, ssmi_off1(&a->d, h)) : 0.0;
    ssmi_ref_m3_load_scalars(&w->sc, &a->adt, &a->dt, &a->trap, s, h);
    double run = 0.0;
    for (int64_t t = 0; t < L; ++t) w->cs[t] = run += w->sc.adt[t];
    /* θ_t = wrap(θ_{t−1} + π·tanh(raw)·dt), as the angle cumsum reference */
    ssmi_ref_m3_read_state3(w->tk, &a->angle_state, s->n, h, A); /* tk holds the running θ (A ≤ K/2) */
    for (int64_t t = 0; t < L; ++t)
        for (int64_t i = 0; i < A; ++i) {
            const double raw = ssmi_get_f64(&a->angles, ssmi_off4(&a->angles, s->b, s->t0 + t, h, i));
            w->raw[t * A + i] = raw;
            w->tk[i] = ssmi_ref_m3_wrap(w->tk[i] + ssmi_ref_m3_omega(raw, w->sc.dt[t]));
            w->theta[t * A + i] = w->tk[i];
        }
    ssmi_ref_m3_load_qk(w->qt, w->kt, &a->q, &a->k, &a->q_bias, &a->k_bias, s, h, g, K);
    for (int64_t t = 0; t < L; ++t) {
        w->dqk[t] = ssmi_ref_m3_dot(w->qt + t * K, w->kt + t * K, K);
        ssmi_ref_m3_rotate(w->qh + t * K, w->qt + t * K, w->theta + t * A, K, A, 1.0);
        ssmi_ref_m3_rotate(w->kh + t * K, w->kt + t * K, w->theta + t * A, K, A, 1.0);
    }
    ssmi_ref_m3_load_rows(w->v, &a->v, s, h, V);
    if (ssmi_present(&a->z)) ssmi_ref_m3_load_rows(w->z, &a->z, s, h, V);
    ssmi_ref_m3_load_rows(w->dO, &a->dout, s, h, V);
    /* H_in = S_in + DT_0(1−λ_0)·V_in K_inᵀ */
    if (d->has_states) {
        const double c0 = w->sc.dt[0] * (1.0 - w->sc.lam[0]);
        ssmi_ref_m3_read_state4(w->hin, &a->ssm_state, s->n, h, V, K);
        ssmi_ref_m3_read_state3(w->tk, &a->k_state, s->n, h, K);
        ssmi_ref_m3_read_state3(w->tv, &a->v_state, s->n, h, V);
        for (int64_t r = 0; r < V; ++r)
            for (int64_t c = 0; c < K; ++c) w->hin[r * K + c] += c0 * w->tv[r] * w->tk[c];
    } else {
        memset(w->hin, 0, (size_t)(V * K) * sizeof(double));
    }
    /* y_t = e^{cs_t}·H_in q̂_t + Σ_{s<t} e^{cs_t−cs_s}·σ_s·(q̂_t·k̂_s)·v_s + (D + γ_t·d_t)·v_t */
    for (int64_t t = 0; t < L; ++t) {
        double *      yt = w->y + t * V;
        const double *qt = w->qh + t * K, et = exp(w->cs[t]);
        for (int64_t r = 0; r < V; ++r) yt[r] = et * ssmi_ref_m3_dot(w->hin + r * K, qt, K);
        for (int64_t u = 0; u < t; ++u) {
            const double c = exp(w->cs[t] - w->cs[u]) * w->sc.sig[u] * ssmi_ref_m3_dot(qt, w->kh + u * K, K);
            for (int64_t r = 0; r < V; ++r) yt[r] += c * w->v[u * V + r];
        }
        const double diag = dskip + w->sc.gam[t] * w->dqk[t];
        for (int64_t r = 0; r < V; ++r) yt[r] += diag * w->v[t * V + r];
    }
}

/* dy, dZ, then dq̂, dKs, dv, dQK, dcs, dH_in (§6.2). Writes dz. */
static void core_backward(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_bwd_args * a, const ssmi_ref_m3_seq * s,
                          int64_t h, bwd_scratch * w, bwd_acc * acc) {
    const int64_t L = s->len, K = d->dk, V = d->dv, last = L - 1;
    const double  dskip = ssmi_present(&a->d) ? ssmi_get_f64(&a->d, ssmi_off1(&a->d, h)) : 0.0;
    for (int64_t t = 0; t < L; ++t)
        for (int64_t r = 0; r < V; ++r) {
            const double dO = w->dO[t * V + r];
            if (!ssmi_present(&a->z)) {
                w->dy[t * V + r] = dO;
                continue;
            }
            const double z = w->z[t * V + r], sg = ssmi_ref_sigmoid(z);
            w->dy[t * V + r] = dO * z * sg;
            if (ssmi_present(&a->dz))
                ssmi_set_f64(&a->dz, ssmi_off4(&a->dz, s->b, s->t0 + t, h, r),
                             dO * w->y[t * V + r] * sg * (1.0 + z * (1.0 - sg)));
        }
    memset(w->dqh, 0, (size_t)(L * K) * sizeof(double));
    memset(w->dks, 0, (size_t)(L * K) * sizeof(double));
    memset(w->dvv, 0, (size_t)(L * V) * sizeof(double));
    memset(w->dcs, 0, (size_t)L * sizeof(double));
    memset(w->dhin, 0, (size_t)(V * K) * sizeof(double));
    /* initial-state readout e^{cs_t}·H_in q̂_t */
    for (int64_t t = 0; t < L; ++t) {
        const double *dyt = w->dy + t * V, *qt = w->qh + t * K, et = exp(w->cs[t]);
        double        ro = 0.0;
        for (int64_t r = 0; r < V; ++r) {
            ro += dyt[r] * ssmi_ref_m3_dot(w->hin + r * K, qt, K);
            for (int64_t c = 0; c < K; ++c) {
                w->dqh[t * K + c] += et * w->hin[r * K + c] * dyt[r];
                w->dhin[r * K + c] += et * dyt[r] * qt[c];
            }
        }
        w->dcs[t] += et * ro;
    }
    /* pairs s < t: e^{cs_t−cs_s}·σ_s·(q̂_t·k̂_s)·v_s */
    for (int64_t t = 0; t < L; ++t)
        for (int64_t u = 0; u < t; ++u) {
            const double wt = exp(w->cs[t] - w->cs[u]), sg = w->sc.sig[u];
            const double dyv = ssmi_ref_m3_dot(w->dy + t * V, w->v + u * V, V);
            const double qk = ssmi_ref_m3_dot(w->qh + t * K, w->kh + u * K, K);
            for (int64_t c = 0; c < K; ++c) {
                w->dqh[t * K + c] += wt * sg * dyv * w->kh[u * K + c];
                w->dks[u * K + c] += wt * dyv * w->qh[t * K + c];
            }
            for (int64_t r = 0; r < V; ++r) w->dvv[u * V + r] += wt * sg * qk * w->dy[t * V + r];
            const double pr = wt * sg * qk * dyv;
            w->dcs[t] += pr;
            w->dcs[u] -= pr;
        }
    /* diagonal (D + γ_t·d_t)·v_t */
    for (int64_t t = 0; t < L; ++t) {
        const double diag = dskip + w->sc.gam[t] * w->dqk[t];
        for (int64_t r = 0; r < V; ++r) w->dvv[t * V + r] += diag * w->dy[t * V + r];
        w->dQK[t] = ssmi_ref_m3_dot(w->dy + t * V, w->v + t * V, V);
        acc->dd[h] += w->dQK[t];
    }
    /* final SSM state S_out = e^{cs_last}·H_in + Σ_s e^{cs_last−cs_s}·σ_s·v_s k̂_sᵀ */
    if (ssmi_present(&a->dfinal_ssm_state)) {
        ssmi_ref_m3_read_state4(w->dsout, &a->dfinal_ssm_state, s->n, h, V, K);
        const double el = exp(w->cs[last]);
        double       dot = 0.0;
        for (int64_t i = 0; i < V * K; ++i) {
            dot += w->dsout[i] * w->hin[i];
            w->dhin[i] += el * w->dsout[i];
        }
        w->dcs[last] += el * dot;
        for (int64_t u = 0; u < L; ++u) {
            const double we = exp(w->cs[last] - w->cs[u]), sg = w->sc.sig[u];
            double       f = 0.0;
            for (int64_t r = 0; r < V; ++r) {
                const double ur = ssmi_ref_m3_dot(w->dsout + r * K, w->kh + u * K, K); /* (dS_out k̂_u)_r */
                w->dvv[u * V + r] += we * sg * ur;
                f += w->v[u * V + r] * ur;
                for (int64_t c = 0; c < K; ++c) w->dks[u * K + c] += we * w->dsout[r * K + c] * w->v[u * V + r];
            }
            w->dcs[last] += we * sg * f;
            w->dcs[u] -= we * sg * f;
        }
    }
    /* final V state = v_last */
    ssmi_ref_m3_read_state3(w->dvout, &a->dfinal_v_state, s->n, h, d->dv);
    for (int64_t r = 0; r < V; ++r) w->dvv[last * V + r] += w->dvout[r];
}

/* dσ, dk̂, dq̃, dk̃, dθ, dγ; GQA and bias sums. */
static void preprocess_backward(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_bwd_args * a,
                                const ssmi_ref_m3_seq * s, int64_t h, bwd_scratch * w, bwd_acc * acc) {
    const int64_t L = s->len, K = d->dk, A = d->nangles, Hq = d->nheads_qk, g = h / (d->nheads / Hq), last = L - 1;
    ssmi_ref_m3_read_state3(w->dkout, &a->dfinal_k_state, s->n, h, K);
    for (int64_t t = 0; t < L; ++t) {
        double *dks = w->dks + t * K, *dkh = w->dks + t * K; /* dk̂ overwrites dKs in place */
        w->dsig[t] = ssmi_ref_m3_dot(dks, w->kh + t * K, K);
        for (int64_t c = 0; c < K; ++c) dkh[c] = w->sc.sig[t] * dks[c] + (t == last ? w->dkout[c] : 0.0);
        const double * th = w->theta + t * A;
        double *       gq = w->gq + t * K, *gk = w->gk + t * K;
        ssmi_ref_m3_rotate(gq, w->dqh + t * K, th, K, A, -1.0);
        ssmi_ref_m3_rotate(gk, dkh, th, K, A, -1.0);
        const double *qt = w->qt + t * K, *kt = w->kt + t * K, *dqh = w->dqh + t * K;
        for (int64_t i = 0; i < A; ++i) {
            const double sn = sin(th[i]), cs = cos(th[i]);
            double       v = 0.0;
            v += dqh[2 * i] * (-qt[2 * i] * sn - qt[2 * i + 1] * cs) +
                 dqh[2 * i + 1] * (qt[2 * i] * cs - qt[2 * i + 1] * sn);
            v += dkh[2 * i] * (-kt[2 * i] * sn - kt[2 * i + 1] * cs) +
                 dkh[2 * i + 1] * (kt[2 * i] * cs - kt[2 * i + 1] * sn);
            w->dth[t * A + i] = v;
        }
        const double cqk = w->dQK[t] * w->sc.gam[t];
        for (int64_t c = 0; c < K; ++c) {
            gq[c] += cqk * kt[c];
            gk[c] += cqk * qt[c];
        }
        w->dgam[t] = w->dQK[t] * w->dqk[t] + w->dsig[t];
        const int64_t tok = ((s->b * d->seqlen + s->t0 + t) * Hq + g) * K;
        for (int64_t c = 0; c < K; ++c) {
            acc->dq[tok + c] += gq[c];
            acc->dk[tok + c] += gk[c];
            acc->dqb[h * K + c] += gq[c];
            acc->dkb[h * K + c] += gk[c];
        }
    }
}

/* dADT, the trapezoid scalars, the t=0 fold and the angle cumsum backward; writes dadt,
 * ddt, dtrap, dangles, dv and the state gradients. */
static void scalar_backward(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_bwd_args * a, const ssmi_ref_m3_seq * s,
                            int64_t h, bwd_scratch * w) {
    const int64_t L = s->len, K = d->dk, V = d->dv, A = d->nangles;
    const int64_t b = s->b, t0 = s->t0;
    /* dADT_r = Σ_{t≥r} dcs_t */
    double run = 0.0;
    for (int64_t t = L - 1; t >= 0; --t) {
        run += w->dcs[t];
        if (ssmi_present(&a->dadt)) ssmi_set_f64(&a->dadt, ssmi_off3(&a->dadt, b, h, t0 + t), run);
    }
    /* the t = 0 fold c0·V_in K_inᵀ of H_in (only with initial states) */
    double dc = 0.0;
    if (d->has_states) {
        const double c0 = w->sc.dt[0] * (1.0 - w->sc.lam[0]);
        ssmi_ref_m3_read_state3(w->tk, &a->k_state, s->n, h, K);
        ssmi_ref_m3_read_state3(w->tv, &a->v_state, s->n, h, V);
        for (int64_t r = 0; r < V; ++r)
            for (int64_t c = 0; c < K; ++c) dc += w->dhin[r * K + c] * w->tv[r] * w->tk[c];
        write_opt4(&a->dssm_state, s->n, h, w->dhin, V, K);
        if (ssmi_present(&a->dv_state))
            for (int64_t r = 0; r < V; ++r)
                ssmi_set_f64(&a->dv_state, ssmi_off3(&a->dv_state, s->n, h, r),
                             c0 * ssmi_ref_m3_dot(w->dhin + r * K, w->tk, K));
        if (ssmi_present(&a->dk_state))
            for (int64_t c = 0; c < K; ++c) {
                double acc = 0.0;
                for (int64_t r = 0; r < V; ++r) acc += w->dhin[r * K + c] * w->tv[r];
                ssmi_set_f64(&a->dk_state, ssmi_off3(&a->dk_state, s->n, h, c), c0 * acc);
            }
    }
    /* angle cumsum backward: G_t = Σ_{u≥t} dθ_u + dθ_final */
    ssmi_ref_m3_read_state3(w->dthout, &a->dfinal_angle_state, s->n, h, A);
    for (int64_t t = L - 1; t >= 0; --t) {
        double ddt_angle = 0.0;
        for (int64_t i = 0; i < A; ++i) {
            w->dthout[i] += w->dth[t * A + i];
            const double th = tanh(w->raw[t * A + i]);
            if (ssmi_present(&a->dangles))
                ssmi_set_f64(&a->dangles, ssmi_off4(&a->dangles, b, t0 + t, h, i),
                             SSMI_REF_PI * w->sc.dt[t] * (1.0 - th * th) * w->dthout[i]);
            ddt_angle += SSMI_REF_PI * th * w->dthout[i];
        }
        /* dDT and dλ: γ_t = DT_t·λ_t, γ'_{t−1} = DT_t·(1−λ_t), fold c0 = DT_0·(1−λ_0) */
        const double lam = w->sc.lam[t], dtv = w->sc.dt[t];
        double       ddt = w->dgam[t] * lam + ddt_angle, dlam = w->dgam[t] * dtv;
        if (t >= 1) {
            ddt += w->dsig[t - 1] * (1.0 - lam);
            dlam -= w->dsig[t - 1] * dtv;
        } else if (d->has_states) {
            ddt += dc * (1.0 - lam);
            dlam -= dc * dtv;
        }
        if (ssmi_present(&a->ddt)) ssmi_set_f64(&a->ddt, ssmi_off3(&a->ddt, b, h, t0 + t), ddt);
        if (ssmi_present(&a->dtrap))
            ssmi_set_f64(&a->dtrap, ssmi_off3(&a->dtrap, b, h, t0 + t), dlam * lam * (1.0 - lam));
    }
    if (d->has_states) write_opt3(&a->dangle_state, s->n, h, w->dthout, A);
    if (ssmi_present(&a->dv))
        for (int64_t t = 0; t < L; ++t)
            ssmi_ref_m3_write(&a->dv, ssmi_off4(&a->dv, b, t0 + t, h, 0), w->dvv + t * V, V);
}

/* An empty sequence: every initial-state gradient is its final-state gradient (or 0). */
static void empty_sequence(const ssm_mamba3_siso_bwd_args * a, int64_t n) {
    ssmi_ref_m3_copy_state(&a->dangle_state, &a->dfinal_angle_state, n);
    ssmi_ref_m3_copy_state(&a->dssm_state, &a->dfinal_ssm_state, n);
    ssmi_ref_m3_copy_state(&a->dk_state, &a->dfinal_k_state, n);
    ssmi_ref_m3_copy_state(&a->dv_state, &a->dfinal_v_state, n);
}

/* The accumulated dq, dk (every token) and dq_bias, dk_bias, dd. */
static void write_sums(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_bwd_args * a, const bwd_acc * acc) {
    const int64_t K = d->dk, Hq = d->nheads_qk;
    for (int64_t b = 0; b < d->batch; ++b)
        for (int64_t t = 0; t < d->seqlen; ++t)
            for (int64_t g = 0; g < Hq; ++g) {
                const int64_t tok = ((b * d->seqlen + t) * Hq + g) * K;
                if (ssmi_present(&a->dq)) ssmi_ref_m3_write(&a->dq, ssmi_off4(&a->dq, b, t, g, 0), acc->dq + tok, K);
                if (ssmi_present(&a->dk)) ssmi_ref_m3_write(&a->dk, ssmi_off4(&a->dk, b, t, g, 0), acc->dk + tok, K);
            }
    for (int64_t h = 0; h < d->nheads; ++h) {
        if (ssmi_present(&a->dq_bias))
            ssmi_ref_m3_write(&a->dq_bias, ssmi_off2(&a->dq_bias, h, 0), acc->dqb + h * K, K);
        if (ssmi_present(&a->dk_bias))
            ssmi_ref_m3_write(&a->dk_bias, ssmi_off2(&a->dk_bias, h, 0), acc->dkb + h * K, K);
        if (ssmi_present(&a->dd)) ssmi_set_f64(&a->dd, ssmi_off1(&a->dd, h), acc->dd[h]);
    }
}

ssm_status ssmi_ref_mamba3_siso_bwd(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                    const ssm_mamba3_siso_bwd_args * a) {
    (void)p;
    bwd_scratch w;
    bwd_acc     acc;
    double *    block = NULL;
    SSM_FORWARD_IF_ERROR(bwd_alloc(ctx, d, ssmi_ref_m3_max_len(d, &a->cu_seqlens), &w, &acc, &block));
    for (int64_t q = 0; q < d->nseq; ++q) {
        const ssmi_ref_m3_seq s = ssmi_ref_m3_sequence(d, &a->cu_seqlens, q);
        if (s.len == 0) {
            empty_sequence(a, q);
            continue;
        }
        for (int64_t h = 0; h < d->nheads; ++h) {
            recompute_forward(d, a, &s, h, &w);
            core_backward(d, a, &s, h, &w, &acc);
            preprocess_backward(d, a, &s, h, &w, &acc);
            scalar_backward(d, a, &s, h, &w);
        }
    }
    write_sums(d, a, &acc);
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}
