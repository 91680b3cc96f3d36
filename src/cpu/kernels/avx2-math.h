/* Vector helpers shared by the AVX2+FMA kernel files (include only from *-avx2.c files: they are
 * the only ones compiled with -mavx2 -mfma). Static inline, so each kernel file gets its own copy
 * and the results are those of the one definition here.
 *
 * exp_ps: x = n·ln2 + r with n = round(x·log2 e) and ln2 split in a short high part (exact
 * products n·ln2_hi for |n| < 2^15) and a low correction, |r| ≤ ln2/2; exp(r) by a degree-7 Taylor
 * polynomial (truncation < 0.1 ulp); 2^n applied as two factors 2^(n/2) so results between the
 * overflow and the subnormal range get one rounding. The input is clamped to [-110, 100] (far
 * outside the finite range of the result) and NaN is put back at the end. */
#ifndef SSMOPS_CPU_KERNELS_AVX2_MATH_H
#define SSMOPS_CPU_KERNELS_AVX2_MATH_H

#include <immintrin.h>
#include <stdint.h>

static inline __m256 exp_ps(__m256 x) {
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-110.0f)), _mm256_set1_ps(100.0f));
    const __m256 n  = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r        = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p        = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p        = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p        = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p        = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p        = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p        = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p        = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i ni  = _mm256_cvtps_epi32(n);
    const __m256i n1  = _mm256_srai_epi32(ni, 1);
    const __m256i n2  = _mm256_sub_epi32(ni, n1);
    const __m256i bia = _mm256_set1_epi32(127);
    const __m256  s1  = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bia), 23));
    const __m256  s2  = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bia), 23));
    const __m256  y   = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* The lanes 0 .. count − 1 (all 8 for count ≥ 8, none for count ≤ 0) as a maskload/maskstore mask. */
static inline __m256i tail_mask(int64_t count) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int) (count < 8 ? count : 8)), lane);
}

#endif
