/* AVX2+FMA decode-step kernels (see step.h): 16 columns per iteration with two
 * accumulators, a masked tail, and a horizontal sum in a fixed order. */
#include <immintrin.h>

#include "step.h"
#include "../avx2-math.h"

static inline float hsum(__m256 v) {
    const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128       s  = _mm_add_ps(lo, hi);
    s               = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s               = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One row with the decay vector dv (broadcast scalar) or dp (per column, dp != NULL). */
static inline float row_kernel(int64_t cols, const float * in, float * out, __m256 dv, const float * dp, float coef,
                               const float * b, const float * c) {
    const __m256 k    = _mm256_set1_ps(coef);
    __m256       acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t      n    = 0;
    for (; n + 16 <= cols; n += 16) {
        const __m256 d0 = dp ? _mm256_loadu_ps(dp + n) : dv;
        const __m256 d1 = dp ? _mm256_loadu_ps(dp + n + 8) : dv;
        const __m256 s0 = _mm256_fmadd_ps(_mm256_loadu_ps(in + n), d0, _mm256_mul_ps(k, _mm256_loadu_ps(b + n)));
        const __m256 s1 =
            _mm256_fmadd_ps(_mm256_loadu_ps(in + n + 8), d1, _mm256_mul_ps(k, _mm256_loadu_ps(b + n + 8)));
        if (out) {
            _mm256_storeu_ps(out + n, s0);
            _mm256_storeu_ps(out + n + 8, s1);
        }
        acc0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(c + n), acc0);
        acc1 = _mm256_fmadd_ps(s1, _mm256_loadu_ps(c + n + 8), acc1);
    }
    for (; n < cols; n += 8) {
        const __m256i m  = tail_mask(cols - n);
        const __m256  d0 = dp ? _mm256_maskload_ps(dp + n, m) : dv;
        /* masked lanes are forced to 0: 0·decay may be NaN when the decay is Inf */
        const __m256 s0 = _mm256_and_ps(
            _mm256_fmadd_ps(_mm256_maskload_ps(in + n, m), d0, _mm256_mul_ps(k, _mm256_maskload_ps(b + n, m))),
            _mm256_castsi256_ps(m));
        if (out) _mm256_maskstore_ps(out + n, m, s0);
        acc0 = _mm256_fmadd_ps(s0, _mm256_maskload_ps(c + n, m), acc0);
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

/* Two rows at once: b and c are loaded once for both, and four accumulator chains keep
 * the FMA latency hidden. */
static inline void two_rows(int64_t cols, const float * in0, const float * in1, float * out0, float * out1,
                            __m256 dv, float coef0, float coef1, const float * b, const float * c, float * y) {
    const __m256 k0 = _mm256_set1_ps(coef0), k1 = _mm256_set1_ps(coef1);
    __m256       a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps();
    __m256       a10 = _mm256_setzero_ps(), a11 = _mm256_setzero_ps();
    int64_t      n = 0;
    for (; n + 16 <= cols; n += 16) {
        const __m256 b0 = _mm256_loadu_ps(b + n), b1 = _mm256_loadu_ps(b + n + 8);
        const __m256 c0 = _mm256_loadu_ps(c + n), c1 = _mm256_loadu_ps(c + n + 8);
        const __m256 s00 = _mm256_fmadd_ps(_mm256_loadu_ps(in0 + n), dv, _mm256_mul_ps(k0, b0));
        const __m256 s01 = _mm256_fmadd_ps(_mm256_loadu_ps(in0 + n + 8), dv, _mm256_mul_ps(k0, b1));
        const __m256 s10 = _mm256_fmadd_ps(_mm256_loadu_ps(in1 + n), dv, _mm256_mul_ps(k1, b0));
        const __m256 s11 = _mm256_fmadd_ps(_mm256_loadu_ps(in1 + n + 8), dv, _mm256_mul_ps(k1, b1));
        if (out0) {
            _mm256_storeu_ps(out0 + n, s00);
            _mm256_storeu_ps(out0 + n + 8, s01);
            _mm256_storeu_ps(out1 + n, s10);
            _mm256_storeu_ps(out1 + n + 8, s11);
        }
        a00 = _mm256_fmadd_ps(s00, c0, a00);
        a01 = _mm256_fmadd_ps(s01, c1, a01);
        a10 = _mm256_fmadd_ps(s10, c0, a10);
        a11 = _mm256_fmadd_ps(s11, c1, a11);
    }
    for (; n < cols; n += 8) {
        const __m256i m  = tail_mask(cols - n);
        const __m256  mf = _mm256_castsi256_ps(m);
        const __m256  b0 = _mm256_maskload_ps(b + n, m), c0 = _mm256_maskload_ps(c + n, m);
        const __m256  s0 = _mm256_and_ps(_mm256_fmadd_ps(_mm256_maskload_ps(in0 + n, m), dv, _mm256_mul_ps(k0, b0)), mf);
        const __m256  s1 = _mm256_and_ps(_mm256_fmadd_ps(_mm256_maskload_ps(in1 + n, m), dv, _mm256_mul_ps(k1, b0)), mf);
        if (out0) {
            _mm256_maskstore_ps(out0 + n, m, s0);
            _mm256_maskstore_ps(out1 + n, m, s1);
        }
        a00 = _mm256_fmadd_ps(s0, c0, a00);
        a10 = _mm256_fmadd_ps(s1, c0, a10);
    }
    y[0] = hsum(_mm256_add_ps(a00, a01));
    y[1] = hsum(_mm256_add_ps(a10, a11));
}

void ssmi_f32_step_block__avx2(int64_t rows, int64_t cols, const float * in, int64_t in_stride, float * out,
                               int64_t out_stride, float decay, const float * coef, const float * b, const float * c,
                               float * y) {
    const __m256 dv = _mm256_set1_ps(decay);
    int64_t      r  = 0;
    for (; r + 2 <= rows; r += 2) {
        float * o0 = out ? out + r * out_stride : 0;
        float * o1 = out ? out + (r + 1) * out_stride : 0;
        two_rows(cols, in + r * in_stride, in + (r + 1) * in_stride, o0, o1, dv, coef[r], coef[r + 1], b, c, y + r);
    }
    for (; r < rows; ++r)
        y[r] = row_kernel(cols, in + r * in_stride, out ? out + r * out_stride : 0, dv, 0, coef[r], b, c);
}

float ssmi_f32_step_row__avx2(int64_t cols, const float * in, float * out, const float * decay, float coef,
                              const float * b, const float * c) {
    return row_kernel(cols, in, out, _mm256_setzero_ps(), decay, coef, b, c);
}
