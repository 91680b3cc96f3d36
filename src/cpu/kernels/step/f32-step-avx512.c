/* AVX-512 decode-step kernels (see step.h): 32 columns per iteration in two 16-lane
 * accumulators per row, up to four rows sharing each load of b and c, a masked 16-lane
 * tail, and a horizontal sum in a fixed order.
 *
 * Summation order of y[r] (fixed by cols alone): lane l of accumulator 0 sums the columns
 * 32i + l, and the masked tail column n0 + l; lane l of accumulator 1 sums 32i + 16 + l;
 * then acc0 + acc1 lane by lane, then the 16 lanes by halving (8 + 8, 4 + 4, 2 + 2, 1 + 1). */
#include <immintrin.h>

#include "step.h"

static inline float hsum16(__m512 v) {
    const __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128       s  = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
    s               = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s               = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The lanes 0 .. count − 1 of a 16-lane vector (count in 1..16). */
static inline __mmask16 tail_mask16(int64_t count) { return (__mmask16) ((1u << count) - 1u); }

/* One row with the decay vector dv (broadcast scalar) or dp (per column, dp != NULL). */
static inline float row_kernel(int64_t cols, const float * in, float * out, __m512 dv, const float * dp, float coef,
                               const float * b, const float * c) {
    const __m512 k    = _mm512_set1_ps(coef);
    __m512       acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t      n    = 0;
    for (; n + 32 <= cols; n += 32) {
        const __m512 d0 = dp ? _mm512_loadu_ps(dp + n) : dv;
        const __m512 d1 = dp ? _mm512_loadu_ps(dp + n + 16) : dv;
        const __m512 s0 = _mm512_fmadd_ps(_mm512_loadu_ps(in + n), d0, _mm512_mul_ps(k, _mm512_loadu_ps(b + n)));
        const __m512 s1 =
            _mm512_fmadd_ps(_mm512_loadu_ps(in + n + 16), d1, _mm512_mul_ps(k, _mm512_loadu_ps(b + n + 16)));
        if (out) {
            _mm512_storeu_ps(out + n, s0);
            _mm512_storeu_ps(out + n + 16, s1);
        }
        acc0 = _mm512_fmadd_ps(s0, _mm512_loadu_ps(c + n), acc0);
        acc1 = _mm512_fmadd_ps(s1, _mm512_loadu_ps(c + n + 16), acc1);
    }
    for (; n < cols; n += 16) {
        const __mmask16 m  = tail_mask16(cols - n < 16 ? cols - n : 16);
        const __m512    d0 = dp ? _mm512_maskz_loadu_ps(m, dp + n) : dv;
        /* masked lanes are forced to 0: 0·decay may be NaN when the decay is Inf */
        const __m512 s0 = _mm512_maskz_fmadd_ps(m, _mm512_maskz_loadu_ps(m, in + n), d0,
                                                _mm512_mul_ps(k, _mm512_maskz_loadu_ps(m, b + n)));
        if (out) _mm512_mask_storeu_ps(out + n, m, s0);
        acc0 = _mm512_fmadd_ps(s0, _mm512_maskz_loadu_ps(m, c + n), acc0);
    }
    return hsum16(_mm512_add_ps(acc0, acc1));
}

/* R rows at once (R = 1, 2 or 4, a compile-time constant of each inlined instance): b and c
 * are loaded once for all R rows, and 2R accumulator chains keep the FMA latency hidden.
 * Each row's sum has the order of row_kernel, so the grouping of rows changes no bit. */
static inline __attribute__((always_inline)) void rows_kernel(const int R, int64_t cols, const float * in,
                                                              int64_t in_stride, float * out, int64_t out_stride,
                                                              __m512 dv, const float * coef, const float * b,
                                                              const float * c, float * y) {
    __m512        k[4], a0[4], a1[4];
    const float * src[4];
    float *       dst[4];
    for (int r = 0; r < R; ++r) {
        k[r]   = _mm512_set1_ps(coef[r]);
        a0[r]  = _mm512_setzero_ps();
        a1[r]  = _mm512_setzero_ps();
        src[r] = in + r * in_stride;
        dst[r] = out ? out + r * out_stride : 0;
    }
    int64_t n = 0;
    for (; n + 32 <= cols; n += 32) {
        const __m512 b0 = _mm512_loadu_ps(b + n), b1 = _mm512_loadu_ps(b + n + 16);
        const __m512 c0 = _mm512_loadu_ps(c + n), c1 = _mm512_loadu_ps(c + n + 16);
        for (int r = 0; r < R; ++r) {
            const __m512 s0 = _mm512_fmadd_ps(_mm512_loadu_ps(src[r] + n), dv, _mm512_mul_ps(k[r], b0));
            const __m512 s1 = _mm512_fmadd_ps(_mm512_loadu_ps(src[r] + n + 16), dv, _mm512_mul_ps(k[r], b1));
            if (out) {
                _mm512_storeu_ps(dst[r] + n, s0);
                _mm512_storeu_ps(dst[r] + n + 16, s1);
            }
            a0[r] = _mm512_fmadd_ps(s0, c0, a0[r]);
            a1[r] = _mm512_fmadd_ps(s1, c1, a1[r]);
        }
    }
    for (; n < cols; n += 16) {
        const __mmask16 m  = tail_mask16(cols - n < 16 ? cols - n : 16);
        const __m512    b0 = _mm512_maskz_loadu_ps(m, b + n), c0 = _mm512_maskz_loadu_ps(m, c + n);
        for (int r = 0; r < R; ++r) {
            const __m512 s0 = _mm512_maskz_fmadd_ps(m, _mm512_maskz_loadu_ps(m, src[r] + n), dv, _mm512_mul_ps(k[r], b0));
            if (out) _mm512_mask_storeu_ps(dst[r] + n, m, s0);
            a0[r] = _mm512_fmadd_ps(s0, c0, a0[r]);
        }
    }
    for (int r = 0; r < R; ++r) y[r] = hsum16(_mm512_add_ps(a0[r], a1[r]));
}

void ssmi_f32_step_block__avx512(int64_t rows, int64_t cols, const float * in, int64_t in_stride, float * out,
                                 int64_t out_stride, float decay, const float * coef, const float * b, const float * c,
                                 float * y) {
    const __m512 dv = _mm512_set1_ps(decay);
    int64_t      r  = 0;
    if (out) {
        for (; r + 4 <= rows; r += 4)
            rows_kernel(4, cols, in + r * in_stride, in_stride, out + r * out_stride, out_stride, dv, coef + r, b, c,
                        y + r);
        for (; r + 2 <= rows; r += 2)
            rows_kernel(2, cols, in + r * in_stride, in_stride, out + r * out_stride, out_stride, dv, coef + r, b, c,
                        y + r);
        for (; r < rows; ++r)
            rows_kernel(1, cols, in + r * in_stride, in_stride, out + r * out_stride, out_stride, dv, coef + r, b, c,
                        y + r);
    } else {
        for (; r + 4 <= rows; r += 4) rows_kernel(4, cols, in + r * in_stride, in_stride, 0, 0, dv, coef + r, b, c, y + r);
        for (; r < rows; ++r) rows_kernel(1, cols, in + r * in_stride, in_stride, 0, 0, dv, coef + r, b, c, y + r);
    }
}

float ssmi_f32_step_row__avx512(int64_t cols, const float * in, float * out, const float * decay, float coef,
                                const float * b, const float * c) {
    return row_kernel(cols, in, out, _mm512_setzero_ps(), decay, coef, b, c);
}
