/* Scalar fp32 GEMM (see gemm.h for the contract). Row tiles of 4 keep the causal cut-off
 * at the same granularity as a small register tile; the k loop is innermost per element
 * so the summation order is plain k = 0, 1, 2, ... */
#include "gemm.h"

#define SCALAR_MR 4

void ssmi_f32_gemm_ukernel__scalar(int64_t m, int64_t n, int64_t k, const float * a, int64_t a_row_stride,
                                   int64_t a_k_stride, const float * b, int64_t b_row_stride, float * c,
                                   int64_t c_row_stride, const float * row_scale, float beta, int causal) {
    for (int64_t i0 = 0; i0 < m; i0 += SCALAR_MR) {
        const int64_t mr    = (m - i0) < SCALAR_MR ? (m - i0) : SCALAR_MR;
        const int64_t k_eff = causal && (i0 + mr) < k ? (i0 + mr) : k;
        for (int64_t i = i0; i < i0 + mr; ++i) {
            const float * a_row = a + i * a_row_stride;
            float *       c_row = c + i * c_row_stride;
            const float   scale = row_scale ? row_scale[i] : 1.0f;
            for (int64_t j = 0; j < n; ++j) {
                float acc = 0.0f;
                for (int64_t kk = 0; kk < k_eff; ++kk) acc += a_row[kk * a_k_stride] * b[kk * b_row_stride + j];
                acc *= scale;
                c_row[j] = beta == 0.0f ? acc : beta * c_row[j] + acc;
            }
        }
    }
}
