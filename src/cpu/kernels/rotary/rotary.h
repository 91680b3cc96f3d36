/*
 * rotary.h — elementwise fp32 kernels of the Mamba-3 CPU drivers: the angle step of the
 * cumulative rotary angle, tanh, sin/cos of the angles expanded to interleaved pairs, and
 * the fused bias + pre-rotation dot + rotation of one token's q and k rows.
 *
 * Pair layout (spec §3.3): dims (2i, 2i+1), i < A, rotate by +θ_i; dims 2A..K−1 do not.
 * The sin/cos kernel writes, for i < A,
 *   cos2[2i] = cos2[2i+1] = cos θ_i,   sin2[2i] = −sin θ_i,   sin2[2i+1] = +sin θ_i
 * so a rotation is y = x·cos2 + swap_pairs(x)·sin2 with no shuffles of the tables.
 *
 * Each kernel has a scalar version (libm tanhf/sinf/cosf/floorf) and an AVX2+FMA version:
 * tanh by a degree-9 odd polynomial below |x| < 0.625 and (1 − e)/(1 + e), e = exp(−2|x|)
 * above; sin/cos by a three-part Cody–Waite reduction modulo π/2 and minimax polynomials on
 * [−π/4, π/4] (lanes with |θ| > 65536, where the reduction loses bits, fall back to libm);
 * both within a few ulp. NaN propagates; results never depend on the thread count.
 */
#ifndef SSMI_CPU_ROTARY_H
#define SSMI_CPU_ROTARY_H

#include <math.h>
#include <stdint.h>

/* 2π split in a float part and the float remainder, for an accurate wrap. */
#define SSMI_TWO_PI_HI 6.28318548202514648438f
#define SSMI_TWO_PI_LO (-1.74845553146951715e-07f)
#define SSMI_INV_TWO_PI 0.159154943091895335769f
#define SSMI_PI_F 3.14159265358979323846f

/* One token of the running angle sum (spec §3.2), in two steps so a rate shared by several
 * heads (angles broadcast over H) is computed once:
 *   angle_rate:    rate[i] = π·tanh(raw[i])
 *   angle_advance: θ[i] = wrap(θ[i] + rate[i]·dt), wrap(x) = x − 2π·floor(x/2π)
 * for i < n. θ is wrapped at every token so it stays in [0, 2π] (2π itself only by
 * rounding) and the fp32 sum keeps its absolute accuracy. */
typedef void (*ssmi_f32_angle_rate_fn)(int64_t n, const float * raw, float * rate);
typedef void (*ssmi_f32_angle_advance_fn)(int64_t n, float * theta, const float * rate, float dt);
/* Both at once, θ[i] = wrap(θ[i] + (π·tanh(raw[i]))·dt), with the same arithmetic (so the
 * same bits) as angle_rate followed by angle_advance. */
typedef void (*ssmi_f32_angle_step_fn)(int64_t n, float * theta, const float * raw, float dt);

/* y[i] = tanh(x[i]) for i < n (in place allowed). */
typedef void (*ssmi_f32_vtanh_fn)(int64_t n, const float * x, float * y);

/* The expanded pair tables above for θ[0..n) (writes 2n floats to each table). */
typedef void (*ssmi_f32_sincos_pairs_fn)(int64_t n, const float * theta, float * cos2, float * sin2);

/* One token of one V-head (spec §3.3):
 *   q̃ = q + bq, k̃ = k + bk (K floats each), returns d = q̃·k̃ (the pre-rotation dot),
 *   qh = R(θ) q̃, kh = R(θ) k̃ with the tables of sincos_pairs over the first r = 2A dims.
 * The dot is summed in a fixed order (lane partials, then lanes 0..7), so it is the same
 * for every call with the same inputs. */
typedef float (*ssmi_f32_bias_rotate_qk_fn)(int64_t K, int64_t r, const float * q, const float * k,
                                            const float * bq, const float * bk, const float * cos2,
                                            const float * sin2, float * qh, float * kh);

/* y[i] = x[i]·cos2[i] + x[i^1]·sin2[i] for i < r, y[i] = x[i] for r ≤ i < K (r even): a
 * rotation by +θ; with every entry of sin2 negated it is R(θ)ᵀ (rotation by −θ). In
 * place is not allowed. */
typedef void (*ssmi_f32_rotate_fn)(int64_t K, int64_t r, const float * x, const float * cos2, const float * sin2,
                                   float * y);

void  ssmi_f32_angle_rate__scalar(int64_t n, const float * raw, float * rate);
void  ssmi_f32_angle_advance__scalar(int64_t n, float * theta, const float * rate, float dt);
void  ssmi_f32_angle_step__scalar(int64_t n, float * theta, const float * raw, float dt);
void  ssmi_f32_vtanh__scalar(int64_t n, const float * x, float * y);
void  ssmi_f32_sincos_pairs__scalar(int64_t n, const float * theta, float * cos2, float * sin2);
float ssmi_f32_bias_rotate_qk__scalar(int64_t K, int64_t r, const float * q, const float * k, const float * bq,
                                      const float * bk, const float * cos2, const float * sin2, float * qh,
                                      float * kh);
void  ssmi_f32_rotate__scalar(int64_t K, int64_t r, const float * x, const float * cos2, const float * sin2,
                              float * y);

void  ssmi_f32_angle_rate__avx2(int64_t n, const float * raw, float * rate);
void  ssmi_f32_angle_advance__avx2(int64_t n, float * theta, const float * rate, float dt);
void  ssmi_f32_angle_step__avx2(int64_t n, float * theta, const float * raw, float dt);
void  ssmi_f32_vtanh__avx2(int64_t n, const float * x, float * y);
void  ssmi_f32_sincos_pairs__avx2(int64_t n, const float * theta, float * cos2, float * sin2);
float ssmi_f32_bias_rotate_qk__avx2(int64_t K, int64_t r, const float * q, const float * k, const float * bq,
                                    const float * bk, const float * cos2, const float * sin2, float * qh,
                                    float * kh);
void  ssmi_f32_rotate__avx2(int64_t K, int64_t r, const float * x, const float * cos2, const float * sin2,
                            float * y);

/* wrap(x) = x − 2π·floor(x/2π) in fp32 for one value; the scalar and AVX2 kernels and
 * the drivers all use this arithmetic: 2π applied in two parts (so a value just above a
 * multiple of 2π keeps its low bits), and a result that rounds below 0 moved up by 2π. */
static inline float ssmi_f32_wrap(float x) {
    const float turns = floorf(x * SSMI_INV_TWO_PI);
    float       r     = fmaf(-turns, SSMI_TWO_PI_HI, x);
    r                 = fmaf(-turns, SSMI_TWO_PI_LO, r);
    return r < 0.0f ? r + SSMI_TWO_PI_HI : r;
}

#endif
