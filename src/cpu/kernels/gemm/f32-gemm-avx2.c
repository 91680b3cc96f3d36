/* AVX2+FMA fp32 GEMM, 6×16 register tile (see gemm.h for the contract).
 *
 * Loop order: column panels of 16 outside, row tiles of 6 inside, so the k×16 panel of
 * B stays in L1 while the rows of A stream past it. Per k step the tile does 2 loads of B,
 * 6 broadcasts of A and 12 FMAs into 12 accumulators. The row count (1..6) and whether
 * the column tail is masked are compile-time constants of each inlined instance, so the
 * accumulators live in registers.
 *
 * Causal calls stop the k loop of a row tile at its last row, so the rows above it multiply
 * the zeros of A past their diagonal by up to 5 B rows they do not need: exact for finite B
 * (0·b is ±0, and a sum that starts at +0 never changes by adding ±0), but 0·Inf = NaN.
 * When B holds a NaN or ±Inf, the call goes row by row instead (one-row tiles, each stopped
 * at its own diagonal), which gives the same bits for every row whose own terms are finite.
 * The check costs one pass over k×n of B, against the m·n·k/2 FMAs of the call. */
#include <immintrin.h>

#include "gemm.h"

static inline __attribute__((always_inline)) void tile_6x16(const int mr, const int masked, int64_t k,
                                                            const float * a, int64_t a_rs, int64_t a_ks,
                                                            const float * b, int64_t b_rs, float * c,
                                                            int64_t c_rs, const float * row_scale, float beta,
                                                            __m256i mask0, __m256i mask1) {
    __m256 acc0[6], acc1[6];
    const float * ap[6];
    for (int r = 0; r < 6; ++r) {
        acc0[r] = _mm256_setzero_ps();
        acc1[r] = _mm256_setzero_ps();
        ap[r]   = a + (r < mr ? r : 0) * a_rs;
    }
    int64_t a_off = 0;
    for (int64_t kk = 0; kk < k; ++kk) {
        __m256 b0, b1;
        if (masked) {
            b0 = _mm256_maskload_ps(b, mask0);
            b1 = _mm256_maskload_ps(b + 8, mask1);
        } else {
            b0 = _mm256_loadu_ps(b);
            b1 = _mm256_loadu_ps(b + 8);
        }
        b += b_rs;
        for (int r = 0; r < mr; ++r) {
            const __m256 av = _mm256_broadcast_ss(ap[r] + a_off);
            acc0[r]         = _mm256_fmadd_ps(av, b0, acc0[r]);
            acc1[r]         = _mm256_fmadd_ps(av, b1, acc1[r]);
        }
        a_off += a_ks;
    }
    const __m256 vbeta = _mm256_set1_ps(beta);
    for (int r = 0; r < mr; ++r) {
        __m256 v0 = acc0[r], v1 = acc1[r];
        if (row_scale) {
            const __m256 s = _mm256_broadcast_ss(row_scale + r);
            v0             = _mm256_mul_ps(v0, s);
            v1             = _mm256_mul_ps(v1, s);
        }
        float * cr = c + r * c_rs;
        if (masked) {
            if (beta != 0.0f) {
                v0 = _mm256_fmadd_ps(vbeta, _mm256_maskload_ps(cr, mask0), v0);
                v1 = _mm256_fmadd_ps(vbeta, _mm256_maskload_ps(cr + 8, mask1), v1);
            }
            _mm256_maskstore_ps(cr, mask0, v0);
            _mm256_maskstore_ps(cr + 8, mask1, v1);
        } else {
            if (beta != 0.0f) {
                v0 = _mm256_fmadd_ps(vbeta, _mm256_loadu_ps(cr), v0);
                v1 = _mm256_fmadd_ps(vbeta, _mm256_loadu_ps(cr + 8), v1);
            }
            _mm256_storeu_ps(cr, v0);
            _mm256_storeu_ps(cr + 8, v1);
        }
    }
}

#define TILE_CASES(MASKED)                                                                        \
    switch (mr) {                                                                                 \
    case 6: tile_6x16(6, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, m0, m1); break; \
    case 5: tile_6x16(5, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, m0, m1); break; \
    case 4: tile_6x16(4, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, m0, m1); break; \
    case 3: tile_6x16(3, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, m0, m1); break; \
    case 2: tile_6x16(2, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, m0, m1); break; \
    default: tile_6x16(1, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, m0, m1); break; \
    }

/* 1 when the k×n block of B (rows b_rs apart) holds no NaN or ±Inf: x − x is +0 (no bit
 * set) for every finite x and a NaN otherwise, and the bits are OR-ed together. */
static int rows_finite(int64_t k, int64_t n, const float * b, int64_t b_rs) {
    __m256        acc  = _mm256_setzero_ps();
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int) (n & 7)), lane);
    for (int64_t kk = 0; kk < k; ++kk, b += b_rs) {
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            const __m256 v = _mm256_loadu_ps(b + j);
            acc            = _mm256_or_ps(acc, _mm256_sub_ps(v, v));
        }
        if (j < n) {
            const __m256 v = _mm256_maskload_ps(b + j, tail);
            acc            = _mm256_or_ps(acc, _mm256_sub_ps(v, v));
        }
    }
    return _mm256_movemask_ps(_mm256_cmp_ps(acc, acc, _CMP_UNORD_Q)) == 0;
}

void ssmi_f32_gemm_ukernel__avx2_6x16(int64_t m, int64_t n, int64_t k, const float * a, int64_t a_rs,
                                      int64_t a_ks, const float * b, int64_t b_rs, float * c, int64_t c_rs,
                                      const float * row_scale, float beta, int causal) {
    if (causal && m > 1 && k > 1 && !rows_finite(k, n, b, b_rs)) {
        for (int64_t i = 0; i < m; ++i) /* one row per call: its k loop ends at its diagonal */
            ssmi_f32_gemm_ukernel__avx2_6x16(1, n, k < i + 1 ? k : i + 1, a + i * a_rs, a_rs, a_ks, b, b_rs,
                                             c + i * c_rs, c_rs, row_scale ? row_scale + i : NULL, beta, 0);
        return;
    }
    for (int64_t j0 = 0; j0 < n; j0 += SSMI_GEMM_AVX2_NR) {
        const int64_t nr     = (n - j0) < SSMI_GEMM_AVX2_NR ? (n - j0) : SSMI_GEMM_AVX2_NR;
        const int     masked = nr < SSMI_GEMM_AVX2_NR;
        __m256i       m0 = _mm256_set1_epi32(-1), m1 = _mm256_set1_epi32(-1);
        if (masked) {
            const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            m0                 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int) nr), lane);
            m1                 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int) nr - 8), lane);
        }
        const float * bj = b + j0;
        for (int64_t i0 = 0; i0 < m; i0 += SSMI_GEMM_AVX2_MR) {
            const int64_t mr    = (m - i0) < SSMI_GEMM_AVX2_MR ? (m - i0) : SSMI_GEMM_AVX2_MR;
            const int64_t k_eff = causal && (i0 + mr) < k ? (i0 + mr) : k;
            const float * ai    = a + i0 * a_rs;
            float *       cij   = c + i0 * c_rs + j0;
            const float * rs    = row_scale ? row_scale + i0 : NULL;
            if (masked) {
                TILE_CASES(1)
            } else {
                TILE_CASES(0)
            }
        }
    }
}
