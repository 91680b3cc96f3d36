/* ref_mamba3_common.h — float64 helpers shared by the Mamba-3 SISO reference files
 * (src/ref/mamba3_*.c): the per-token scalars (spec §3.1), the angle wrap (§3.2), the
 * interleaved-pair rotation (§3.3), the sequence walk (batched rows or cu_seqlens) and one
 * step of the recurrence (§3.4), and the float64 scratch blocks the files carve. Everything
 * is static inline, in the reference's plain loop style. */
#ifndef SSMI_REF_MAMBA3_COMMON_H
#define SSMI_REF_MAMBA3_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../core/ssmi.h"
#include "ref_common.h"

#define SSMI_REF_PI 3.14159265358979323846
#define SSMI_REF_TWO_PI 6.28318530717958647692

/* wrap(x) = x − 2π·floor(x/2π) in [0, 2π). A result that rounds up to 2π (x a tiny
 * negative number) is returned as 0, the same point of the circle. */
static inline double ssmi_ref_m3_wrap(double x) {
    double r = x - SSMI_REF_TWO_PI * floor(x / SSMI_REF_TWO_PI);
    if (r >= SSMI_REF_TWO_PI) r = 0.0;
    return r;
}

/* silu(z) = z·sigmoid(z): the gate factor. */
static inline double ssmi_ref_m3_silu(double z) { return z * ssmi_ref_sigmoid(z); }

/* ω = π·tanh(raw)·dt: the angle increment of one token (§3.2). */
static inline double ssmi_ref_m3_omega(double raw, double dt) { return SSMI_REF_PI * tanh(raw) * dt; }

/* y = R(θ) x on the first A interleaved pairs (2i, 2i+1), by +θ_i; the rest is copied.
 * sign = −1 applies R(θ)ᵀ (rotation by −θ). y may equal x. */
static inline void ssmi_ref_m3_rotate(double * y, const double * x, const double * theta, int64_t K, int64_t A,
                                      double sign) {
    for (int64_t i = 0; i < K / 2; ++i) {
        const double x0 = x[2 * i], x1 = x[2 * i + 1];
        if (i < A) {
            const double c = cos(theta[i]), s = sign * sin(theta[i]);
            y[2 * i] = x0 * c - x1 * s;
            y[2 * i + 1] = x0 * s + x1 * c;
        } else {
            y[2 * i] = x0;
            y[2 * i + 1] = x1;
        }
    }
}

static inline double ssmi_ref_m3_dot(const double * a, const double * b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

/* One sequence of a call (ref_common.h). */
typedef ssmi_ref_span ssmi_ref_m3_seq;

static inline ssmi_ref_m3_seq ssmi_ref_m3_sequence(const ssmi_mamba3_dims * d, const ssm_tensor * cu, int64_t i) {
    return ssmi_ref_span_of(d->varlen, d->seqlen, cu, i);
}

/* Per-token scalars of one head of one sequence (§3.1), arrays of `len`. The shifted term
 * γ'_t uses the next token of the SAME sequence and is 0 at its last token. */
typedef struct ssmi_ref_m3_scalars {
    double *adt, *dt, *lam, *gam, *gsh, *sig; /* ADT, DT, λ, γ, γ', σ */
} ssmi_ref_m3_scalars;

/* Loads adt/dt/trap (B, H, S) of head h for the sequence and derives λ, γ, γ', σ. */
static inline void ssmi_ref_m3_load_scalars(const ssmi_ref_m3_scalars * sc, const ssm_tensor * adt,
                                            const ssm_tensor * dt, const ssm_tensor * trap, const ssmi_ref_m3_seq * s,
                                            int64_t h) {
    for (int64_t t = 0; t < s->len; ++t) {
        const int64_t tt = s->t0 + t;
        sc->adt[t] = ssmi_get_f64(adt, ssmi_off3(adt, s->b, h, tt));
        sc->dt[t] = ssmi_get_f64(dt, ssmi_off3(dt, s->b, h, tt));
        sc->lam[t] = ssmi_ref_sigmoid(ssmi_get_f64(trap, ssmi_off3(trap, s->b, h, tt)));
        sc->gam[t] = sc->dt[t] * sc->lam[t];
    }
    for (int64_t t = 0; t < s->len; ++t) {
        sc->gsh[t] = t + 1 < s->len ? sc->dt[t + 1] * (1.0 - sc->lam[t + 1]) : 0.0;
        sc->sig[t] = sc->gam[t] + sc->gsh[t];
    }
}

/* Reads `n` elements of a tensor along its last dim, the other indices given by `off`. */
static inline void ssmi_ref_m3_read(double * dst, const ssm_tensor * t, int64_t off, int64_t n) {
    const int64_t st = t->strides[t->ndim - 1];
    for (int64_t i = 0; i < n; ++i) dst[i] = ssmi_get_f64(t, off + i * st);
}

/* Row [n, h, :] (len elements) of an optional (NS, H, len) state into dst; zeros when absent. */
static inline void ssmi_ref_m3_read_state3(double * dst, const ssm_tensor * t, int64_t n, int64_t h, int64_t len) {
    if (!ssmi_present(t)) {
        for (int64_t i = 0; i < len; ++i) dst[i] = 0.0;
        return;
    }
    ssmi_ref_m3_read(dst, t, ssmi_off3(t, n, h, 0), len);
}

/* Matrix [n, h] of an optional (NS, H, V, K) state into dst (V×K); zeros when absent. */
static inline void ssmi_ref_m3_read_state4(double * dst, const ssm_tensor * t, int64_t n, int64_t h, int64_t V,
                                           int64_t K) {
    for (int64_t r = 0; r < V; ++r) {
        if (ssmi_present(t))
            ssmi_ref_m3_read(dst + r * K, t, ssmi_off4(t, n, h, r, 0), K);
        else
            memset(dst + r * K, 0, (size_t)K * sizeof(double));
    }
}

/* Writes `n` elements along the last dim (rounded to the tensor's dtype). */
static inline void ssmi_ref_m3_write(const ssm_tensor * t, int64_t off, const double * src, int64_t n) {
    const int64_t st = t->strides[t->ndim - 1];
    for (int64_t i = 0; i < n; ++i) ssmi_set_f64(t, off + i * st, src[i]);
}

/* Writes `n` zeros along the last dim. */
static inline void ssmi_ref_m3_write_zero(const ssm_tensor * t, int64_t off, int64_t n) {
    const int64_t st = t->strides[t->ndim - 1];
    for (int64_t i = 0; i < n; ++i) ssmi_set_f64(t, off + i * st, 0.0);
}

/* Copies row n of a (NS, H, ...) state (any rank 3 or 4) to row n of an output of the same
 * shape; zeros when the input is absent. Used for empty sequences and absent tokens. */
static inline void ssmi_ref_m3_copy_state(const ssm_tensor * out, const ssm_tensor * in, int64_t n) {
    if (!ssmi_present(out)) return;
    const int64_t H = out->shape[1];
    const int64_t R = out->ndim == 4 ? out->shape[2] : 1, C = out->shape[out->ndim - 1];
    for (int64_t h = 0; h < H; ++h)
        for (int64_t r = 0; r < R; ++r)
            for (int64_t c = 0; c < C; ++c) {
                int64_t oo, oi = 0;
                if (out->ndim == 4) {
                    oo = ssmi_off4(out, n, h, r, c);
                    if (ssmi_present(in)) oi = ssmi_off4(in, n, h, r, c);
                } else {
                    oo = ssmi_off3(out, n, h, c);
                    if (ssmi_present(in)) oi = ssmi_off3(in, n, h, c);
                }
                ssmi_set_f64(out, oo, ssmi_present(in) ? ssmi_get_f64(in, oi) : 0.0);
            }
}

/* One step of the recurrence (§3.4) for one head, in place on the carried state:
 *   θ ← wrap(θ + π·tanh(raw)·dt)  (A values)
 *   q̂ = R(θ)(q̃), k̂ = R(θ)(k̃)      with q̃, k̃ the biased q and k (K values)
 *   h ← α·h + β·v_prev k_prevᵀ + γ·v k̂ᵀ   (V×K, row-major), α = e^{adt}, β = α·dt·(1−λ),
 *                                          γ = dt·λ, λ = sigmoid(trap)
 *   y = h q̂ + D·v, gated by silu(z) when z != NULL
 *   k_prev ← k̂, v_prev ← v
 * raw == NULL means θ is given directly (already cumulative) in `theta`. `qhat` is K
 * doubles of scratch. */
static inline void ssmi_ref_m3_step_head(double * theta, double * hs, double * kprev, double * vprev,
                                         const double * raw, const double * qt, const double * kt, const double * v,
                                         const double * z, double adt, double dt, double trap, double dskip, int64_t K,
                                         int64_t V, int64_t A, double * qhat, double * y) {
    if (raw != NULL)
        for (int64_t i = 0; i < A; ++i) theta[i] = ssmi_ref_m3_wrap(theta[i] + ssmi_ref_m3_omega(raw[i], dt));
    const double lam = ssmi_ref_sigmoid(trap);
    const double alpha = exp(adt), gam = dt * lam, beta = alpha * dt * (1.0 - lam);
    ssmi_ref_m3_rotate(qhat, qt, theta, K, A, 1.0);
    for (int64_t r = 0; r < V; ++r) {
        double *     row = hs + r * K;
        const double kpr = beta * vprev[r];
        for (int64_t c = 0; c < K; ++c) row[c] = alpha * row[c] + kpr * kprev[c];
    }
    ssmi_ref_m3_rotate(kprev, kt, theta, K, A, 1.0);
    for (int64_t r = 0; r < V; ++r) {
        double * row = hs + r * K;
        for (int64_t c = 0; c < K; ++c) row[c] += gam * v[r] * kprev[c];
        double yr = ssmi_ref_m3_dot(row, qhat, K) + dskip * v[r];
        if (z != NULL) yr *= ssmi_ref_m3_silu(z[r]);
        y[r] = yr;
        vprev[r] = v[r];
    }
}

/* q̃_t = q[b, t0+t, g] + q_bias[h] and k̃_t likewise (rows of K) for the `len` tokens of a
 * sequence, V-head h reading Q/K head g. */
static inline void ssmi_ref_m3_load_qk(double * qt, double * kt, const ssm_tensor * q, const ssm_tensor * k,
                                       const ssm_tensor * q_bias, const ssm_tensor * k_bias, const ssmi_ref_m3_seq * s,
                                       int64_t h, int64_t g, int64_t K) {
    for (int64_t t = 0; t < s->len; ++t)
        for (int64_t c = 0; c < K; ++c) {
            const int64_t tt = s->t0 + t;
            qt[t * K + c] =
                ssmi_get_f64(q, ssmi_off4(q, s->b, tt, g, c)) + ssmi_get_f64(q_bias, ssmi_off2(q_bias, h, c));
            kt[t * K + c] =
                ssmi_get_f64(k, ssmi_off4(k, s->b, tt, g, c)) + ssmi_get_f64(k_bias, ssmi_off2(k_bias, h, c));
        }
}

/* Rows of a (B, S, H, N) token tensor for head h of a sequence into dst (len × N). */
static inline void ssmi_ref_m3_load_rows(double * dst, const ssm_tensor * x, const ssmi_ref_m3_seq * s, int64_t h,
                                         int64_t N) {
    for (int64_t t = 0; t < s->len; ++t) ssmi_ref_m3_read(dst + t * N, x, ssmi_off4(x, s->b, s->t0 + t, h, 0), N);
}

/* a·b·..., 0 and *ok = 0 on size_t overflow. */
static inline size_t ssmi_ref_m3_mul(size_t a, size_t b, int * ok) {
    if (a != 0 && b > SIZE_MAX / a) {
        *ok = 0;
        return 0;
    }
    return a * b;
}

/* The longest sequence of a call. */
static inline int64_t ssmi_ref_m3_max_len(const ssmi_mamba3_dims * d, const ssm_tensor * cu) {
    int64_t m = 0;
    for (int64_t i = 0; i < d->nseq; ++i) {
        const ssmi_ref_m3_seq s = ssmi_ref_m3_sequence(d, cu, i);
        if (s.len > m) m = s.len;
    }
    return m;
}

/* One float64 scratch block carved into `n` arrays of sizes[i] doubles (each ≥ 1). Returns
 * OUT_OF_MEMORY (with a message naming op) when the total overflows or malloc fails. */
static inline ssm_status ssmi_ref_m3_scratch(ssm_context * ctx, const char * op, int n, const size_t * sizes,
                                             double ** ptrs[], double ** block) {
    size_t total = 0;
    int    ok = 1;
    for (int i = 0; i < n; ++i) {
        const size_t sz = sizes[i] > 0 ? sizes[i] : 1;
        if (sz > SIZE_MAX / sizeof(double) - total) ok = 0;
        total += sz;
    }
    if (!ok || total > SIZE_MAX / sizeof(double)) ok = 0;
    *block = NULL;
    SSM_RETURN_IF(!ok, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: reference scratch size overflows size_t", op);
    *block = ssmi_alloc(ctx, total * sizeof(double));
    SSM_RETURN_IF(*block == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "%s: could not allocate %zu bytes of reference scratch", op, total * sizeof(double));
    double * q = *block;
    for (int i = 0; i < n; ++i) {
        *ptrs[i] = q;
        q += sizes[i] > 0 ? sizes[i] : 1;
    }
    return SSM_STATUS_OK;
}

/* Float64 scratch of one head of the token-by-token recurrence (the recurrent forward and the
 * decode step): the states θ (A), h (V×K), k_prev (K), v_prev (V) and the per-token rows
 * q̃, k̃ (K), v, z (V), raw (A), q̂ (K), y (V). */
typedef struct ssmi_ref_m3_token_scratch {
    double *theta, *hs, *kprev, *vprev, *qt, *kt, *v, *z, *raw, *qhat, *y;
} ssmi_ref_m3_token_scratch;

/* Carves w from one new scratch block *block (the caller frees it); OUT_OF_MEMORY naming op
 * as ssmi_ref_m3_scratch. */
static inline ssm_status ssmi_ref_m3_token_scratch_alloc(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d,
                                                         ssmi_ref_m3_token_scratch * w, double ** block) {
    int          ok = 1;
    const size_t K = (size_t)d->dk, V = (size_t)d->dv, A = (size_t)d->nangles;
    const size_t sizes[11] = {A, ssmi_ref_m3_mul(V, K, &ok), K, V, K, K, V, V, A, K, V};
    double **    ptrs[11] = {&w->theta, &w->hs, &w->kprev, &w->vprev, &w->qt, &w->kt,
                             &w->v,     &w->z,  &w->raw,   &w->qhat,  &w->y};
    *block = NULL;
    SSM_RETURN_IF(!ok, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: reference scratch size overflows size_t", op);
    return ssmi_ref_m3_scratch(ctx, op, 11, sizes, ptrs, block);
}

#endif /* SSMI_REF_MAMBA3_COMMON_H */
