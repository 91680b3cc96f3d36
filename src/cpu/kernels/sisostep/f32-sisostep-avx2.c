/* AVX2+FMA SISO decode state update (see sisostep.h): 16 floats per iteration into two
 * dot accumulators, masked tail; the lane sums are added in a fixed order. */
#include <immintrin.h>

#include "sisostep.h"
#include "../avx2-math.h"

static inline __m256 update8(__m256 hv, __m256 va, __m256 vb, __m256 vc, __m256 kp, __m256 kh) {
    return _mm256_fmadd_ps(vc, kh, _mm256_fmadd_ps(vb, kp, _mm256_mul_ps(va, hv)));
}

void ssmi_f32_siso_state_step__avx2(int64_t V, int64_t K, const float * h, int64_t h_rs, float * out, int64_t o_rs,
                                    float alpha, float beta, float gamma, const float * v_prev, const float * v,
                                    const float * k_prev, const float * k_hat, const float * q_hat, float * y) {
    const __m256 va = _mm256_set1_ps(alpha);
    for (int64_t p = 0; p < V; ++p) {
        const __m256  vb  = _mm256_set1_ps(beta * v_prev[p]);
        const __m256  vc  = _mm256_set1_ps(gamma * v[p]);
        const float * hr  = h + p * h_rs;
        float *       orw = out ? out + p * o_rs : NULL;
        __m256        acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        int64_t       n    = 0;
        for (; n + 16 <= K; n += 16) {
            const __m256 n0 = update8(_mm256_loadu_ps(hr + n), va, vb, vc, _mm256_loadu_ps(k_prev + n), _mm256_loadu_ps(k_hat + n));
            const __m256 n1 = update8(_mm256_loadu_ps(hr + n + 8), va, vb, vc, _mm256_loadu_ps(k_prev + n + 8),
                                      _mm256_loadu_ps(k_hat + n + 8));
            acc0 = _mm256_fmadd_ps(n0, _mm256_loadu_ps(q_hat + n), acc0);
            acc1 = _mm256_fmadd_ps(n1, _mm256_loadu_ps(q_hat + n + 8), acc1);
            if (orw) {
                _mm256_storeu_ps(orw + n, n0);
                _mm256_storeu_ps(orw + n + 8, n1);
            }
        }
        for (; n < K; n += 8) {
            const __m256i m  = tail_mask(K - n);
            const __m256  nv = update8(_mm256_maskload_ps(hr + n, m), va, vb, vc, _mm256_maskload_ps(k_prev + n, m),
                                       _mm256_maskload_ps(k_hat + n, m));
            acc0 = _mm256_fmadd_ps(nv, _mm256_maskload_ps(q_hat + n, m), acc0);
            if (orw) _mm256_maskstore_ps(orw + n, m, nv);
        }
        float l[8];
        _mm256_storeu_ps(l, _mm256_add_ps(acc0, acc1));
        y[p] = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    }
}
