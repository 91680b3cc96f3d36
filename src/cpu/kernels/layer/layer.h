/*
 * layer.h — fp32 row kernels of the layer ops on the CPU: the depthwise causal conv1d
 * (forward, gradients, decode update) and the gated RMSNorm (forward, backward).
 *
 * Conv rows work on n channels of one time step. A tap array holds W row pointers (tap k
 * is the input at time t − (W−1) + k); a NULL tap does not feed the token (seq_idx
 * boundaries, padding before the sequence). Weights are transposed: wT[k·ld + c].
 * Every sum runs in a fixed order (bias, then taps k = 0..W−1), so the same inputs give
 * the same bits whatever thread runs them; the scalar and AVX2 versions differ only by
 * rounding (FMA, the vector exp).
 *
 * Each kernel has a scalar version (plain C, libm expf) and an AVX2+FMA version (the exp
 * of vec.h's kernels: Cody–Waite reduction + degree-7 polynomial, ~1 ulp).
 */
#ifndef SSMI_CPU_LAYER_KERNELS_H
#define SSMI_CPU_LAYER_KERNELS_H

#include <stdint.h>

/* wT[k·ld + c] = w[c·sc + k·sk] for c < n, k < W (the (D, W) conv weight, transposed). */
typedef void (*ssmi_f32_conv_weights_fn)(int64_t n, int64_t W, const float * w, int64_t sc, int64_t sk, float * wT,
                                         int64_t ld);

/* out[c] = act(bias[c] + Σ_k wT[k][c]·taps[k][c]); act = silu when silu, else identity;
 * bias NULL = 0. */
typedef void (*ssmi_f32_conv_row_fn)(int64_t n, int64_t W, const float * const * taps, const float * wT, int64_t ld,
                                     const float * bias, int silu, float * out);

/* g[c] = dout[c]·act'(pre[c]), pre as in conv_row (not computed without silu). */
typedef void (*ssmi_f32_conv_grad_row_fn)(int64_t n, int64_t W, const float * const * taps, const float * wT,
                                          int64_t ld, const float * bias, int silu, const float * dout, float * g);

/* db[c] += g[c]; dw[k·ld + c] += g[c]·taps[k][c] for the non-NULL taps. */
typedef void (*ssmi_f32_conv_wgrad_row_fn)(int64_t n, int64_t W, const float * const * taps, const float * g, float * dw,
                                           int64_t ld, float * db);

/* out[c] = Σ_k wT[k][c]·gtaps[k][c] (+ extra[c] when extra is not NULL), NULL gtaps
 * skipped. For the input gradient: gtaps[k] is the pre-activation gradient at τ+W−1−k. */
typedef void (*ssmi_f32_conv_dx_row_fn)(int64_t n, int64_t W, const float * const * gtaps, const float * wT, int64_t ld,
                                        const float * extra, float * out);

/* y[i] += x[i]. */
typedef void (*ssmi_f32_add_row_fn)(int64_t n, const float * x, float * y);

/* Gated RMSNorm of one row of D values in groups of gs (D % gs == 0), spec §6.3:
 *   z NULL:               out = x·r·w
 *   norm_before_gate 0:   v = x·silu(z), out = v·r·w
 *   norm_before_gate 1:   out = x·r·w·silu(z)
 * r = 1/sqrt(mean_group(v²) + eps); the sums of squares run in a fixed order. */
typedef void (*ssmi_f32_rmsnorm_row_fn)(int64_t D, int64_t gs, float eps, int nbg, const float * x, const float * z,
                                        const float * w, float * out, float * tmp);

/* Its backward for one row: dx (always), dz (when z is given), dw[c] += dy'·x̂ (x̂ = v·r,
 * dy' = dy·silu(z) when the gate comes after the norm, else dy).
 * tmp: scratch of gs (forward) or 2·gs (backward) floats. */
typedef void (*ssmi_f32_rmsnorm_bwd_row_fn)(int64_t D, int64_t gs, float eps, int nbg, const float * x, const float * z,
                                            const float * w, const float * dy, float * dx, float * dz, float * dw,
                                            float * tmp);

#define SSMI_LAYER_KERNELS(isa)                                                                                      \
    void ssmi_f32_conv_weights__##isa(int64_t n, int64_t W, const float * w, int64_t sc, int64_t sk, float * wT,      \
                                      int64_t ld);                                                                   \
    void ssmi_f32_conv_row__##isa(int64_t n, int64_t W, const float * const * taps, const float * wT, int64_t ld,     \
                                  const float * bias, int silu, float * out);                                        \
    void ssmi_f32_conv_grad_row__##isa(int64_t n, int64_t W, const float * const * taps, const float * wT,           \
                                       int64_t ld, const float * bias, int silu, const float * dout, float * g);      \
    void ssmi_f32_conv_wgrad_row__##isa(int64_t n, int64_t W, const float * const * taps, const float * g,           \
                                        float * dw, int64_t ld, float * db);                                         \
    void ssmi_f32_conv_dx_row__##isa(int64_t n, int64_t W, const float * const * gtaps, const float * wT,            \
                                     int64_t ld, const float * extra, float * out);                                  \
    void ssmi_f32_add_row__##isa(int64_t n, const float * x, float * y);                                             \
    void ssmi_f32_rmsnorm_row__##isa(int64_t D, int64_t gs, float eps, int nbg, const float * x, const float * z,     \
                                     const float * w, float * out, float * tmp);                                     \
    void ssmi_f32_rmsnorm_bwd_row__##isa(int64_t D, int64_t gs, float eps, int nbg, const float * x,                 \
                                         const float * z, const float * w, const float * dy, float * dx, float * dz, \
                                         float * dw, float * tmp);

SSMI_LAYER_KERNELS(scalar)
SSMI_LAYER_KERNELS(avx2)

#endif
