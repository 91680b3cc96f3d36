/*
 * bwd.h — fp32 kernels of the backward drivers (mamba2_scan_bwd.c, mamba3_siso_bwd.c):
 * a tiled transpose with an optional per-row scale, and the per-token chains of the
 * Mamba-3 SISO backward (the q/k preparation of a chunk and the preprocessing gradients
 * of spec §6.2).
 *
 * Each kernel has a scalar version (plain C) and an AVX2+FMA version. Within one ISA every
 * result depends only on the inputs (fixed summation orders), never on threads; the two
 * ISAs may differ in the last bits of the dots (FMA, lane order), nowhere else. The pair
 * tables cos2/sin2 are those of kernels/rotary (rotary.h): rotating by +θ is
 * y = x·cos2 + swap_pairs(x)·sin2 on the first r dims, R(θ)ᵀ uses −sin2.
 */
#ifndef SSMI_CPU_BWD_H
#define SSMI_CPU_BWD_H

#include <stdint.h>

/* dst[c·ld_dst + r] = src[r·ld_src + c]·scale[r] for r < rows, c < cols (scale NULL = 1,
 * an exact copy). src and dst must not overlap. */
typedef void (*ssmi_f32_transpose_fn)(int64_t rows, int64_t cols, const float * src, int64_t ld_src,
                                      const float * scale, float * dst, int64_t ld_dst);

/* One token of the SISO backward q/k preparation (K dims, the first r = 2A rotated):
 *   kt = k + bk,  kh = R(θ)·kt,  ks = (sig·kh)·w;
 *   with q != NULL also qt = q + bq, qh = R(θ)·qt, and the return value is d = qt·kt
 *   (8 lane partial sums, combined in a fixed order); 0 without q.
 * qt and kt are written on the first r dims only (beyond them q̃ = q̂ and k̃ = k̂ exactly).
 * kh may be NULL (not stored). No output may alias an input. */
typedef float (*ssmi_f32_siso_bwd_prep_fn)(int64_t K, int64_t r, const float * q, const float * k,
                                           const float * bq, const float * bk, const float * cos2,
                                           const float * sin2, float sig, float w, float * qt, float * kt,
                                           float * qh, float * kh, float * ks);

/* One token of the SISO backward preprocessing chain (spec §6.2) and of the angle backward
 * (spec §6.6), in place on dq, dk:
 *   dsig = dk·kh (returned; the incoming dk),      dk ← sig·dk (+ extra_dk if not NULL),
 *   dθ_i = (dq[2i+1]·qh[2i] − dq[2i]·qh[2i+1]) + (dk[2i+1]·kh[2i] − dk[2i]·kh[2i+1]), i < r/2,
 *   dq ← R(θ)ᵀ·dq + cq·kt,   dk ← R(θ)ᵀ·dk + cq·qt,   qbacc += dq,   kbacc += dk,
 *   (kt, qt read on the first r dims only: beyond them kh, qh stand for them)
 *   g_i += dθ_i (the reverse cumsum G),  *dda = π·Σ th_i·g_i (lane partial sums as in dot),
 *   dth_i = ((π·dt)·(1 − th_i²))·g_i (the raw-angle gradient), th = tanh of the raw rates,
 * and, for a GQA workspace row: wq = dq, wk = dk (add == 0) or wq += dq, wk += dk (add != 0);
 * wq / wk NULL = not written. With wq (wk) given the result goes there and dq (dk) is left
 * unspecified afterwards (the AVX2 version does not store a row nobody reads). */
typedef float (*ssmi_f32_siso_bwd_token_fn)(int64_t K, int64_t r, float * dq, float * dk, const float * qh,
                                            const float * kh, const float * qt, const float * kt,
                                            const float * cos2, const float * sin2, float sig,
                                            const float * extra_dk, float cq, const float * th, float dt,
                                            float * g, float * dth, float * dda, float * qbacc, float * kbacc,
                                            float * wq, float * wk, int add);

/* Σ_e a[e]·b[e] in fp32 with lane partial sums combined in a fixed order (scalar: 8 lanes,
 * e mod 8, then ((0+1)+(2+3)) + ((4+5)+(6+7)); AVX2: 4×8 lanes, e mod 32, summed to 8
 * lanes first). */
typedef float (*ssmi_f32_dot_fn)(int64_t n, const float * a, const float * b);

/* For r < rows, in order of r: q[c] += a[r·lda + c]·b[r·ldb + c] and, if acc is not NULL,
 * acc[r·ldacc + c] += a[r·lda + c], for c < cols (column sums of a product, elementwise
 * order fixed by r, so the result does not depend on the vector width). */
typedef void (*ssmi_f32_colsum_dot_fn)(int64_t rows, int64_t cols, const float * a, int64_t lda, const float * b,
                                       int64_t ldb, float * q, float * acc, int64_t ldacc);

/* y[i] = exp(c − x[i]) for i < n (in place allowed). One pass: a separate subtraction pass
 * followed by a vector exp made every exp load wait on a failed store forwarding. */
typedef void (*ssmi_f32_exp_sub_fn)(int64_t n, float c, const float * x, float * y);

/* The gate z of one row (n elements): s = σ(z) = 1/(1 + e^{−z}),
 *   dy[i] = dout[i]·(z[i]·s[i])                              (δ of the pre-gate output)
 *   y[i]  = dout[i]·y[i]·s[i]·(1 + z[i]·(1 − s[i]))          (dz, in place on the pre-gate
 *                                                             y; only if y is not NULL)
 *   sig[i] = s[i]                                            (only if sig is not NULL)
 * dy may alias dout. */
typedef void (*ssmi_f32_gate_grads_fn)(int64_t n, const float * z, const float * dout, float * dy, float * y,
                                       float * sig);

typedef struct ssmi_cpu_bwd_kernels {
    ssmi_f32_transpose_fn      transpose;
    ssmi_f32_dot_fn            dot;
    ssmi_f32_colsum_dot_fn     colsum_dot;
    ssmi_f32_exp_sub_fn        exp_sub;
    ssmi_f32_gate_grads_fn     gate_grads;
    ssmi_f32_siso_bwd_prep_fn  siso_prep;
    ssmi_f32_siso_bwd_token_fn siso_token;
} ssmi_cpu_bwd_kernels;

float ssmi_f32_dot__scalar(int64_t n, const float * a, const float * b);
void  ssmi_f32_exp_sub__scalar(int64_t n, float c, const float * x, float * y);
void  ssmi_f32_gate_grads__scalar(int64_t n, const float * z, const float * dout, float * dy, float * y, float * sig);
void  ssmi_f32_colsum_dot__scalar(int64_t rows, int64_t cols, const float * a, int64_t lda, const float * b,
                                  int64_t ldb, float * q, float * acc, int64_t ldacc);
void  ssmi_f32_transpose__scalar(int64_t rows, int64_t cols, const float * src, int64_t ld_src, const float * scale,
                                 float * dst, int64_t ld_dst);
float ssmi_f32_siso_bwd_prep__scalar(int64_t K, int64_t r, const float * q, const float * k, const float * bq,
                                     const float * bk, const float * cos2, const float * sin2, float sig, float w,
                                     float * qt, float * kt, float * qh, float * kh, float * ks);
float ssmi_f32_siso_bwd_token__scalar(int64_t K, int64_t r, float * dq, float * dk, const float * qh,
                                      const float * kh, const float * qt, const float * kt, const float * cos2,
                                      const float * sin2, float sig, const float * extra_dk, float cq,
                                      const float * th, float dt, float * g, float * dth, float * dda, float * qbacc,
                                      float * kbacc, float * wq, float * wk, int add);

float ssmi_f32_dot__avx2(int64_t n, const float * a, const float * b);
void  ssmi_f32_exp_sub__avx2(int64_t n, float c, const float * x, float * y);
void  ssmi_f32_gate_grads__avx2(int64_t n, const float * z, const float * dout, float * dy, float * y, float * sig);
void  ssmi_f32_colsum_dot__avx2(int64_t rows, int64_t cols, const float * a, int64_t lda, const float * b,
                                int64_t ldb, float * q, float * acc, int64_t ldacc);
void  ssmi_f32_transpose__avx2(int64_t rows, int64_t cols, const float * src, int64_t ld_src, const float * scale,
                               float * dst, int64_t ld_dst);
float ssmi_f32_siso_bwd_prep__avx2(int64_t K, int64_t r, const float * q, const float * k, const float * bq,
                                   const float * bk, const float * cos2, const float * sin2, float sig, float w,
                                   float * qt, float * kt, float * qh, float * kh, float * ks);
float ssmi_f32_siso_bwd_token__avx2(int64_t K, int64_t r, float * dq, float * dk, const float * qh,
                                    const float * kh, const float * qt, const float * kt, const float * cos2,
                                    const float * sin2, float sig, const float * extra_dk, float cq,
                                    const float * th, float dt, float * g, float * dth, float * dda, float * qbacc,
                                    float * kbacc, float * wq, float * wk, int add);

#endif
