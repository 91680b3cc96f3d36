/* Scalar fp32 GEMM (see gemm.h for the contract). The k loop is innermost per element, so
 * the summation order is plain k = 0, 1, 2, ...; a causal row stops at its own limit. */
#include "gemm.h"

void ssmi_f32_gemm_ukernel__scalar(int64_t m, int64_t n, int64_t k, const float * a, int64_t a_row_stride,
                                   int64_t a_k_stride, const float * b, int64_t b_row_stride, float * c,
                                   int64_t c_row_stride, const float * row_scale, float beta, int causal) {
    for (int64_t i = 0; i < m; ++i) {
        const int64_t k_eff = ssmi_gemm_row_k(k, i, causal);
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
