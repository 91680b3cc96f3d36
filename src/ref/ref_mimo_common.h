/* ref_mimo_common.h — float64 helpers shared by the Mamba-3 MIMO reference files
 * (src/ref/mamba3_mimo*.c): the sequence walk, the per-head parameters, the per-token
 * scalars (spec §2.1), the split-halves rotation (§2.1, trap 1) and the output stage (gate,
 * fused norm, rank reduction, §2.2). Everything is static inline, plain loops; nothing here
 * allocates. Scratch blocks come from ssmi_ref_m3_scratch (ref_mamba3_common.h). */
#ifndef SSMI_REF_MIMO_COMMON_H
#define SSMI_REF_MIMO_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../core/ssmi.h"
#include "ref_mamba3_common.h"

/* One sequence of a call (ref_common.h). */
typedef ssmi_ref_span ssmi_ref_mimo_seq;

static inline ssmi_ref_mimo_seq ssmi_ref_mimo_sequence(const ssmi_mimo_dims * d, const ssm_tensor * cu, int64_t i) {
    return ssmi_ref_span_of(d->varlen, d->seqlen, cu, i);
}

/* Q/K group of value head h: contiguous blocks of H/G heads (not h mod G). */
static inline int64_t ssmi_ref_mimo_group(const ssmi_mimo_dims * d, int64_t h) {
    return h / (d->nheads / d->ngroups);
}

/* x' = Rot(±θ) x on the split-halves pairs (a, a + N/2), a < A; other columns copied.
 * sign = −1 applies Rotᵀ. y may equal x. */
static inline void ssmi_ref_mimo_rotate(double * y, const double * x, const double * theta, int64_t N, int64_t A,
                                        double sign) {
    const int64_t half = N / 2;
    for (int64_t a = 0; a < half; ++a) {
        const double x1 = x[a], x2 = x[a + half];
        if (a < A) {
            const double c = cos(theta[a]), s = sign * sin(theta[a]);
            y[a] = c * x1 - s * x2;
            y[a + half] = s * x1 + c * x2;
        } else {
            y[a] = x1;
            y[a + half] = x2;
        }
    }
}

/* Per-head parameters, row-major [R][N] / [R][P] / [P]; absent optional ones are left
 * untouched and flagged by the has_* fields. */
typedef struct ssmi_ref_mimo_head {
    double *qb, *kb, *mv, *mz, *mo, *w; /* q_bias, k_bias (R·N), mimo_v/z/o (R·P), w (P)     */
    double  dskip;                      /* d[h] or 0                                        */
    int     has_z, has_o, has_w;
} ssmi_ref_mimo_head;

/* Loads a (H, R, X) parameter's head h into dst (R·X). */
static inline void ssmi_ref_mimo_load_hrx(double * dst, const ssm_tensor * t, int64_t h, int64_t R, int64_t X) {
    for (int64_t r = 0; r < R; ++r) ssmi_ref_m3_read(dst + r * X, t, ssmi_off3(t, h, r, 0), X);
}

/* Fills hp for head h from the given tensors (mimo_z, mimo_o, w, d may be absent; w is
 * (H, P) or (H·P)). */
static inline void ssmi_ref_mimo_load_head(ssmi_ref_mimo_head * hp, const ssmi_mimo_dims * d, int64_t h,
                                           const ssm_tensor * q_bias, const ssm_tensor * k_bias,
                                           const ssm_tensor * mimo_v, const ssm_tensor * mimo_z,
                                           const ssm_tensor * mimo_o, const ssm_tensor * w, const ssm_tensor * dd) {
    const int64_t R = d->rank, N = d->dstate, P = d->headdim;
    ssmi_ref_mimo_load_hrx(hp->qb, q_bias, h, R, N);
    ssmi_ref_mimo_load_hrx(hp->kb, k_bias, h, R, N);
    ssmi_ref_mimo_load_hrx(hp->mv, mimo_v, h, R, P);
    hp->has_z = ssmi_present(mimo_z);
    hp->has_o = ssmi_present(mimo_o);
    hp->has_w = w != NULL && ssmi_present(w);
    if (hp->has_z) ssmi_ref_mimo_load_hrx(hp->mz, mimo_z, h, R, P);
    if (hp->has_o) ssmi_ref_mimo_load_hrx(hp->mo, mimo_o, h, R, P);
    if (hp->has_w) {
        for (int64_t p = 0; p < P; ++p)
            hp->w[p] = w->ndim == 2 ? ssmi_get_f64(w, ssmi_off2(w, h, p)) : ssmi_get_f64(w, ssmi_off1(w, h * P + p));
    }
    hp->dskip = ssmi_present(dd) ? ssmi_get_f64(dd, ssmi_off1(dd, h)) : 0.0;
}

/* Per-token scalars of one head over `len` tokens starting at t0 of row b (spec §2.1):
 * a = adt (NULL tensor: left alone), Δ, λ = σ(trap), γ = Δλ, σ̄_t = Δ_{t+1}·σ(−trap_{t+1})
 * (0 at the last token), c = γ + σ̄. */
typedef struct ssmi_ref_mimo_scalars {
    double *a, *dt, *lam, *gam, *sbar, *cf;
} ssmi_ref_mimo_scalars;

static inline void ssmi_ref_mimo_load_scalars(const ssmi_ref_mimo_scalars * sc, const ssm_tensor * adt,
                                              const ssm_tensor * dt, const ssm_tensor * trap, int64_t b, int64_t h,
                                              int64_t t0, int64_t len) {
    for (int64_t t = 0; t < len; ++t) {
        const int64_t tt = t0 + t;
        if (adt != NULL && ssmi_present(adt)) sc->a[t] = ssmi_get_f64(adt, ssmi_off3(adt, b, h, tt));
        sc->dt[t] = ssmi_get_f64(dt, ssmi_off3(dt, b, h, tt));
        sc->lam[t] = ssmi_ref_sigmoid(ssmi_get_f64(trap, ssmi_off3(trap, b, h, tt)));
        sc->gam[t] = sc->dt[t] * sc->lam[t];
    }
    for (int64_t t = 0; t < len; ++t) {
        sc->sbar[t] = t + 1 < len ? sc->dt[t + 1] * (1.0 - sc->lam[t + 1]) : 0.0;
        sc->cf[t] = sc->gam[t] + sc->sbar[t];
    }
}

/* q̄ = q[b,t,r,g] + q_bias[h,r] and k̄ likewise for one token: rows of N per rank. */
static inline void ssmi_ref_mimo_load_qk_token(double * qbar, double * kbar, const ssm_tensor * q,
                                               const ssm_tensor * k, const ssmi_ref_mimo_head * hp, int64_t b,
                                               int64_t t, int64_t g, int64_t R, int64_t N) {
    for (int64_t r = 0; r < R; ++r) {
        const int64_t oq = ssmi_off5(q, b, t, r, g, 0), ok = ssmi_off5(k, b, t, r, g, 0);
        const int64_t sq = q->strides[4], sk = k->strides[4];
        for (int64_t n = 0; n < N; ++n) {
            qbar[r * N + n] = ssmi_get_f64(q, oq + n * sq) + hp->qb[r * N + n];
            kbar[r * N + n] = ssmi_get_f64(k, ok + n * sk) + hp->kb[r * N + n];
        }
    }
}

/* u[r] = v ⊙ mimo_v[h,r] (R rows of P). */
static inline void ssmi_ref_mimo_lift_v(double * u, const double * v, const ssmi_ref_mimo_head * hp, int64_t R,
                                        int64_t P) {
    for (int64_t r = 0; r < R; ++r)
        for (int64_t p = 0; p < P; ++p) u[r * P + p] = v[p] * hp->mv[r * P + p];
}

/* Output stage of one token (spec §2.2) from the pre-gate per-rank y (R·P):
 *   gate_r = silu(z ⊙ mimo_z[r]) when z != NULL (else 1);
 *   fused: y'_r = y_r·rstd(y_r) ⊙ w ⊙ gate_r, rstd = 1/sqrt(mean_P(y_r²) + eps)
 *          (w = 1 when hp->has_w is 0);
 *   reduced (mimo_o): out (P) = Σ_r y'_r ⊙ mimo_o[r]; else out (R·P) = y'.  */
static inline void ssmi_ref_mimo_output(double * out, const double * y, const double * z,
                                        const ssmi_ref_mimo_head * hp, int fused, double eps, int64_t R, int64_t P) {
    if (hp->has_o)
        for (int64_t p = 0; p < P; ++p) out[p] = 0.0;
    for (int64_t r = 0; r < R; ++r) {
        const double * yr = y + r * P;
        double         rstd = 1.0;
        if (fused) {
            double ss = 0.0;
            for (int64_t p = 0; p < P; ++p) ss += yr[p] * yr[p];
            rstd = 1.0 / sqrt(ss / (double)P + eps);
        }
        for (int64_t p = 0; p < P; ++p) {
            double v = yr[p];
            if (fused) v *= rstd * (hp->has_w ? hp->w[p] : 1.0);
            if (z != NULL) v *= ssmi_ref_m3_silu(z[p] * hp->mz[r * P + p]);
            if (hp->has_o)
                out[p] += v * hp->mo[r * P + p];
            else
                out[r * P + p] = v;
        }
    }
}

/* Writes the output row of token t: out (B,S,H,P) when reduced, else (B,S,R,H,P) [the
 * step passes t < 0 for (B,H,P) / (B,R,H,P)]. */
static inline void ssmi_ref_mimo_write_out(const ssm_tensor * out, const double * o, int reduced, int64_t b, int64_t t,
                                           int64_t h, int64_t R, int64_t P) {
    if (reduced) {
        const int64_t off = t >= 0 ? ssmi_off4(out, b, t, h, 0) : ssmi_off3(out, b, h, 0);
        ssmi_ref_m3_write(out, off, o, P);
        return;
    }
    for (int64_t r = 0; r < R; ++r) {
        const int64_t off = t >= 0 ? ssmi_off5(out, b, t, r, h, 0) : ssmi_off4(out, b, r, h, 0);
        ssmi_ref_m3_write(out, off, o + r * P, P);
    }
}

/* y[t,r] of token t, head h (R rows of P) into pregate_y (B, S, H, R, P) when it is given. */
static inline void ssmi_ref_mimo_write_y(const ssm_tensor * y, const double * v, int64_t b, int64_t t, int64_t h,
                                         int64_t R, int64_t P) {
    if (!ssmi_present(y)) return;
    for (int64_t r = 0; r < R; ++r) ssmi_ref_m3_write(y, ssmi_off5(y, b, t, h, r, 0), v + r * P, P);
}

/* Zeros for the output row of token t (padding rows of the step). */
static inline void ssmi_ref_mimo_write_out_zero(const ssm_tensor * out, int reduced, int64_t b, int64_t h, int64_t R,
                                                int64_t P) {
    if (reduced) {
        ssmi_ref_m3_write_zero(out, ssmi_off3(out, b, h, 0), P);
        return;
    }
    for (int64_t r = 0; r < R; ++r) ssmi_ref_m3_write_zero(out, ssmi_off4(out, b, r, h, 0), P);
}

/* The four carried states of one head (spec §2.3): θ (A), h as N×P (n-major, the kernel
 * layout), k̃_prev (R·N), v_prev (P). */
typedef struct ssmi_ref_mimo_state {
    double *theta, *hs, *kprev, *vprev;
} ssmi_ref_mimo_state;

/* Reads row n, head h of the four states (zeros for absent ones): ssm_state is (.,H,P,N)
 * and is transposed into hs[n·P + p]. */
static inline void ssmi_ref_mimo_read_states(const ssmi_ref_mimo_state * st, const ssm_tensor * angle,
                                             const ssm_tensor * ssm, const ssm_tensor * kst, const ssm_tensor * vst,
                                             int64_t n, int64_t h, int64_t R, int64_t N, int64_t P, int64_t A) {
    for (int64_t a = 0; a < A; ++a) st->theta[a] = ssmi_present(angle) ? ssmi_get_f64(angle, ssmi_off3(angle, n, h, a)) : 0.0;
    for (int64_t p = 0; p < P; ++p)
        for (int64_t i = 0; i < N; ++i)
            st->hs[i * P + p] = ssmi_present(ssm) ? ssmi_get_f64(ssm, ssmi_off4(ssm, n, h, p, i)) : 0.0;
    for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < N; ++i)
            st->kprev[r * N + i] = ssmi_present(kst) ? ssmi_get_f64(kst, ssmi_off4(kst, n, r, h, i)) : 0.0;
    for (int64_t p = 0; p < P; ++p) st->vprev[p] = ssmi_present(vst) ? ssmi_get_f64(vst, ssmi_off3(vst, n, h, p)) : 0.0;
}

/* Writes the four states of row n, head h to the present outputs; wrap_angle reduces θ to
 * [0, 2π) (the forward) or stores it as is (the step). */
static inline void ssmi_ref_mimo_write_states(const ssmi_ref_mimo_state * st, const ssm_tensor * angle,
                                              const ssm_tensor * ssm, const ssm_tensor * kst, const ssm_tensor * vst,
                                              int64_t n, int64_t h, int64_t R, int64_t N, int64_t P, int64_t A,
                                              int wrap_angle) {
    if (ssmi_present(angle))
        for (int64_t a = 0; a < A; ++a)
            ssmi_set_f64(angle, ssmi_off3(angle, n, h, a), wrap_angle ? ssmi_ref_m3_wrap(st->theta[a]) : st->theta[a]);
    if (ssmi_present(ssm))
        for (int64_t p = 0; p < P; ++p)
            for (int64_t i = 0; i < N; ++i) ssmi_set_f64(ssm, ssmi_off4(ssm, n, h, p, i), st->hs[i * P + p]);
    if (ssmi_present(kst))
        for (int64_t r = 0; r < R; ++r)
            for (int64_t i = 0; i < N; ++i) ssmi_set_f64(kst, ssmi_off4(kst, n, r, h, i), st->kprev[r * N + i]);
    if (ssmi_present(vst))
        for (int64_t p = 0; p < P; ++p) ssmi_set_f64(vst, ssmi_off3(vst, n, h, p), st->vprev[p]);
}

#endif /* SSMI_REF_MIMO_COMMON_H */
