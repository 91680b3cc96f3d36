/* AVX2+FMA+F16C elementwise kernels (see vec.h). The exp (exp_ps, kernels/avx2-math.h): a
 * Cody–Waite reduction, a degree-7 polynomial, 2^n as two factors, NaN kept. */
#include <immintrin.h>
#include <string.h>

#include "../../../core/ssmi.h"
#include "vec.h"
#include "../avx2-math.h"

void ssmi_f32_vexp__avx2(int64_t n, const float * x, float * y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp_ps(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, m, exp_ps(_mm256_maskload_ps(x + i, m)));
    }
}

void ssmi_f32_decay_rows__avx2(int64_t rows, int64_t cols, const float * cb, int64_t cb_row_stride,
                               const float * cm, const float * dt, float * m, int64_t m_row_stride) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t i = 0; i < rows; ++i) {
        const float * cb_row = cb + i * cb_row_stride;
        float *       m_row  = m + i * m_row_stride;
        const __m256  cmi    = _mm256_set1_ps(cm[i]);
        for (int64_t j0 = 0; j0 < cols; j0 += 8) {
            const int     full     = j0 + 8 <= cols;
            const __m256i in_range = tail_mask(cols - j0);
            if (j0 > i) {
                if (full) _mm256_storeu_ps(m_row + j0, _mm256_setzero_ps());
                else _mm256_maskstore_ps(m_row + j0, in_range, _mm256_setzero_ps());
                continue;
            }
            /* lanes j0+l ≤ i carry the causal value; the others become 0 */
            const __m256i causal = _mm256_cmpgt_epi32(_mm256_set1_epi32((int) (i - j0 + 1)), lane);
            const __m256i ld     = _mm256_and_si256(causal, in_range);
            const __m256  e      = exp_ps(_mm256_sub_ps(cmi, _mm256_maskload_ps(cm + j0, ld)));
            __m256        v      = _mm256_mul_ps(_mm256_maskload_ps(cb_row + j0, ld), e);
            v                    = _mm256_mul_ps(v, _mm256_maskload_ps(dt + j0, ld));
            v                    = _mm256_and_ps(v, _mm256_castsi256_ps(causal));
            if (full) _mm256_storeu_ps(m_row + j0, v);
            else _mm256_maskstore_ps(m_row + j0, in_range, v);
        }
    }
}

static inline __m256 silu_gate_ps(__m256 y, __m256 z) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), z));
    return _mm256_mul_ps(y, _mm256_div_ps(z, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
}

void ssmi_f32_silu_gate__avx2(int64_t n, const float * y, const float * z, float * out) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, silu_gate_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(z + i)));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(out + i, m, silu_gate_ps(_mm256_maskload_ps(y + i, m), _mm256_maskload_ps(z + i, m)));
    }
}

void ssmi_load_row__avx2(float * dst, const void * base, int32_t dtype, int64_t off, int64_t stride, int64_t n) {
    if (stride == 1 && dtype == SSM_DTYPE_F32) {
        memcpy(dst, (const float *) base + off, (size_t) n * sizeof(float));
        return;
    }
    if (stride == 1 && dtype == SSM_DTYPE_BF16) {
        const uint16_t * src = (const uint16_t *) base + off;
        int64_t          i   = 0;
        for (; i + 8 <= n; i += 8) {
            const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *) (src + i)));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
        }
        for (; i < n; ++i) dst[i] = ssmi_bf16_to_f32(src[i]);
        return;
    }
    if (stride == 1 && dtype == SSM_DTYPE_F16) {
        const uint16_t * src = (const uint16_t *) base + off;
        int64_t          i   = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (src + i))));
        for (; i < n; ++i) dst[i] = ssmi_f16_to_f32(src[i]);
        return;
    }
    ssmi_load_f32(dst, base, dtype, off, stride, n);
}

/* fp32 → bf16 bits, round to nearest even; NaN stays a quiet NaN. */
static inline __m128i bf16_round_ps(__m256 v) {
    const __m256i bits  = _mm256_castps_si256(v);
    const __m256i odd   = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i round = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF)), odd), 16);
    const __m256i qnan  = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x0040));
    const __m256i isnan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i h     = _mm256_blendv_epi8(round, qnan, isnan);
    const __m256i pack  = _mm256_packus_epi32(h, h);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(pack, 0x08));
}

void ssmi_store_row__avx2(void * base, int32_t dtype, int64_t off, int64_t stride, const float * src, int64_t n) {
    if (stride == 1 && dtype == SSM_DTYPE_F32) {
        memcpy((float *) base + off, src, (size_t) n * sizeof(float));
        return;
    }
    if (stride == 1 && dtype == SSM_DTYPE_BF16) {
        uint16_t * dst = (uint16_t *) base + off;
        int64_t    i   = 0;
        for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i *) (dst + i), bf16_round_ps(_mm256_loadu_ps(src + i)));
        for (; i < n; ++i) dst[i] = ssmi_f32_to_bf16(src[i]);
        return;
    }
    if (stride == 1 && dtype == SSM_DTYPE_F16) {
        uint16_t * dst = (uint16_t *) base + off;
        int64_t    i   = 0;
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *) (dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
        for (; i < n; ++i) dst[i] = ssmi_f32_to_f16(src[i]);
        return;
    }
    ssmi_store_f32(base, dtype, off, stride, src, n);
}
