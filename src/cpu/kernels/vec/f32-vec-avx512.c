/* AVX-512 row conversions between packed fp32 and fp32/f16/bf16 rows (see vec.h): 16
 * lanes per step and one masked step for the tail. f16 through the hardware conversion
 * (round to nearest even, as F16C), bf16 by shifts with the same rounding and NaN rule as
 * the AVX2 and scalar conversions, so every ISA stores the same bits. Strided rows and
 * other dtypes go through the scalar conversion. */
#include <immintrin.h>
#include <string.h>

#include "../../../core/ssmi.h"
#include "vec.h"

/* The lanes 0 .. count − 1 of a 16-lane vector (count in 1..16). */
static inline __mmask16 lanes(int64_t count) { return (__mmask16) ((1u << (count < 16 ? count : 16)) - 1u); }

void ssmi_load_row__avx512(float * dst, const void * base, int32_t dtype, int64_t off, int64_t stride, int64_t n) {
    if (stride == 1 && dtype == SSM_DTYPE_F32) {
        memcpy(dst, (const float *) base + off, (size_t) n * sizeof(float));
        return;
    }
    if (stride == 1 && (dtype == SSM_DTYPE_BF16 || dtype == SSM_DTYPE_F16)) {
        const uint16_t * src = (const uint16_t *) base + off;
        const int        f16 = dtype == SSM_DTYPE_F16;
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 m = lanes(n - i);
            const __m256i   h = _mm256_maskz_loadu_epi16(m, src + i);
            const __m512    v = f16 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            _mm512_mask_storeu_ps(dst + i, m, v);
        }
        return;
    }
    ssmi_load_f32(dst, base, dtype, off, stride, n);
}

/* fp32 → bf16 bits in the low half of each lane, round to nearest even; NaN stays a quiet NaN. */
static inline __m256i bf16_round(__m512 v) {
    const __m512i bits  = _mm512_castps_si512(v);
    const __m512i odd   = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i round = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7FFF)), odd), 16);
    const __m512i qnan  = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x0040));
    const __m512i h     = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), round, qnan);
    return _mm512_cvtepi32_epi16(h); /* every lane is ≤ 0xFFFF: the narrowing keeps it */
}

void ssmi_store_row__avx512(void * base, int32_t dtype, int64_t off, int64_t stride, const float * src, int64_t n) {
    if (stride == 1 && dtype == SSM_DTYPE_F32) {
        memcpy((float *) base + off, src, (size_t) n * sizeof(float));
        return;
    }
    if (stride == 1 && (dtype == SSM_DTYPE_BF16 || dtype == SSM_DTYPE_F16)) {
        uint16_t * dst = (uint16_t *) base + off;
        const int  f16 = dtype == SSM_DTYPE_F16;
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 m = lanes(n - i);
            const __m512    v = _mm512_maskz_loadu_ps(m, src + i);
            const __m256i   h = f16 ? _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) : bf16_round(v);
            _mm256_mask_storeu_epi16(dst + i, m, h);
        }
        return;
    }
    ssmi_store_f32(base, dtype, off, stride, src, n);
}
