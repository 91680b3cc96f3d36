/* AVX-512 fp32 GEMM, 8×32 register tile (see gemm.h for the contract).
 *
 * Loop order: column panels of 32 outside, row tiles of 8 inside, so the k×32 panel of B
 * stays in L1/L2 while the rows of A stream past it. Per k step the tile does 2 loads of
 * B, 8 broadcasts of A and 16 FMAs into 16 zmm accumulators (16 independent chains, more
 * than the FMA latency × throughput of any AVX-512 core). A column tail of at most 16
 * runs a one-vector tile, so a narrow tail does not pay for a second, empty vector; the
 * last vector of a tail is masked. The row count (1..8), the vector count and the mask
 * are compile-time constants of each inlined instance, so the accumulators live in
 * registers.
 *
 * Every element is the FMA chain k = 0, 1, 2, … from +0 in k order, then the row scale,
 * then beta·C: the same operations in the same order as the AVX2 and scalar-FMA paths,
 * independent of the tile shape.
 *
 * Causal calls stop the k loop of a row tile at its last row, as the AVX2 kernel does (the
 * extra terms are 0·b = ±0, which never change a sum that starts at +0); when B holds a NaN
 * or ±Inf the call goes row by row, each row stopped at its own diagonal. */
#include <immintrin.h>

#include "gemm.h"

#define MR SSMI_GEMM_AVX512_MR
#define NR SSMI_GEMM_AVX512_NR

static inline __attribute__((always_inline)) void tile_8x32(const int mr, const int nv, const int masked, int64_t k,
                                                            const float * a, int64_t a_rs, int64_t a_ks,
                                                            const float * b, int64_t b_rs, float * c, int64_t c_rs,
                                                            const float * row_scale, float beta, __mmask16 tail) {
    __m512        acc0[MR], acc1[MR];
    const float * ap[MR];
    for (int r = 0; r < MR; ++r) {
        acc0[r] = _mm512_setzero_ps();
        acc1[r] = _mm512_setzero_ps();
        ap[r]   = a + (r < mr ? r : 0) * a_rs;
    }
    /* the mask of vector v: all lanes, or the tail's lanes for the last vector of a tail */
    const __mmask16 m0 = (masked && nv == 1) ? tail : (__mmask16) 0xFFFF;
    const __mmask16 m1 = masked ? tail : (__mmask16) 0xFFFF;
    int64_t         a_off = 0;
    for (int64_t kk = 0; kk < k; ++kk) {
        const __m512 b0 = (masked && nv == 1) ? _mm512_maskz_loadu_ps(m0, b) : _mm512_loadu_ps(b);
        __m512       b1 = _mm512_setzero_ps();
        if (nv == 2) b1 = masked ? _mm512_maskz_loadu_ps(m1, b + 16) : _mm512_loadu_ps(b + 16);
        b += b_rs;
        for (int r = 0; r < mr; ++r) {
            const __m512 av = _mm512_set1_ps(ap[r][a_off]);
            acc0[r]         = _mm512_fmadd_ps(av, b0, acc0[r]);
            if (nv == 2) acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
        }
        a_off += a_ks;
    }
    const __m512 vbeta = _mm512_set1_ps(beta);
    for (int r = 0; r < mr; ++r) {
        __m512 v0 = acc0[r], v1 = acc1[r];
        if (row_scale) {
            const __m512 s = _mm512_set1_ps(row_scale[r]);
            v0             = _mm512_mul_ps(v0, s);
            if (nv == 2) v1 = _mm512_mul_ps(v1, s);
        }
        float * cr = c + r * c_rs;
        if (beta != 0.0f) {
            v0 = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(m0, cr), v0);
            if (nv == 2) v1 = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(m1, cr + 16), v1);
        }
        if (masked && nv == 1) {
            _mm512_mask_storeu_ps(cr, m0, v0);
        } else {
            _mm512_storeu_ps(cr, v0);
        }
        if (nv == 2) {
            if (masked) {
                _mm512_mask_storeu_ps(cr + 16, m1, v1);
            } else {
                _mm512_storeu_ps(cr + 16, v1);
            }
        }
    }
}

#define TILE_CASES(NV, MASKED)                                                                                   \
    switch (mr) {                                                                                                \
    case 8: tile_8x32(8, NV, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, tail); break;          \
    case 7: tile_8x32(7, NV, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, tail); break;          \
    case 6: tile_8x32(6, NV, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, tail); break;          \
    case 5: tile_8x32(5, NV, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, tail); break;          \
    case 4: tile_8x32(4, NV, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, tail); break;          \
    case 3: tile_8x32(3, NV, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, tail); break;          \
    case 2: tile_8x32(2, NV, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, tail); break;          \
    default: tile_8x32(1, NV, MASKED, k_eff, ai, a_rs, a_ks, bj, b_rs, cij, c_rs, rs, beta, tail); break;         \
    }

/* 1 when the k×n block of B (rows b_rs apart) holds no NaN or ±Inf: x − x is +0 (no bit
 * set) for every finite x and a NaN otherwise, and the bits are OR-ed together. */
static int rows_finite(int64_t k, int64_t n, const float * b, int64_t b_rs) {
    __m512i         acc  = _mm512_setzero_si512();
    const __mmask16 tail = (__mmask16) ((1u << (n & 15)) - 1u);
    for (int64_t kk = 0; kk < k; ++kk, b += b_rs) {
        int64_t j = 0;
        for (; j + 16 <= n; j += 16) {
            const __m512 v = _mm512_loadu_ps(b + j);
            acc            = _mm512_or_si512(acc, _mm512_castps_si512(_mm512_sub_ps(v, v)));
        }
        if (j < n) {
            const __m512 v = _mm512_maskz_loadu_ps(tail, b + j);
            acc            = _mm512_or_si512(acc, _mm512_castps_si512(_mm512_sub_ps(v, v)));
        }
    }
    const __m512 f = _mm512_castsi512_ps(acc);
    return _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q) == 0;
}

void ssmi_f32_gemm_ukernel__avx512_8x32(int64_t m, int64_t n, int64_t k, const float * a, int64_t a_rs,
                                        int64_t a_ks, const float * b, int64_t b_rs, float * c, int64_t c_rs,
                                        const float * row_scale, float beta, int causal) {
    if (causal && m > 1 && k > 1 && !rows_finite(k, n, b, b_rs)) {
        for (int64_t i = 0; i < m; ++i) /* one row per call: its k loop ends at its diagonal */
            ssmi_f32_gemm_ukernel__avx512_8x32(1, n, k < i + 1 ? k : i + 1, a + i * a_rs, a_rs, a_ks, b, b_rs,
                                               c + i * c_rs, c_rs, row_scale ? row_scale + i : NULL, beta, 0);
        return;
    }
    for (int64_t j0 = 0; j0 < n; j0 += NR) {
        const int64_t   nr   = (n - j0) < NR ? (n - j0) : NR;
        const int       nv   = nr > 16 ? 2 : 1;
        const int       masked = nr != 16 * nv;
        const __mmask16 tail = (__mmask16) ((1u << (nr - 16 * (nv - 1))) - 1u);
        const float *   bj   = b + j0;
        for (int64_t i0 = 0; i0 < m; i0 += MR) {
            const int64_t mr    = (m - i0) < MR ? (m - i0) : MR;
            const int64_t k_eff = causal && (i0 + mr) < k ? (i0 + mr) : k;
            const float * ai    = a + i0 * a_rs;
            float *       cij   = c + i0 * c_rs + j0;
            const float * rs    = row_scale ? row_scale + i0 : NULL;
            if (nv == 2) {
                if (masked) {
                    TILE_CASES(2, 1)
                } else {
                    TILE_CASES(2, 0)
                }
            } else {
                if (masked) {
                    TILE_CASES(1, 1)
                } else {
                    TILE_CASES(1, 0)
                }
            }
        }
    }
}
