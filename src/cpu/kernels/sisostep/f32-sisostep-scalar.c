/* Scalar SISO decode state update (see sisostep.h). */
#include "sisostep.h"

void ssmi_f32_siso_state_step__scalar(int64_t V, int64_t K, const float * h, int64_t h_rs, float * out, int64_t o_rs,
                                      float alpha, float beta, float gamma, const float * v_prev, const float * v,
                                      const float * k_prev, const float * k_hat, const float * q_hat, float * y) {
    for (int64_t p = 0; p < V; ++p) {
        const float   a = beta * v_prev[p], c = gamma * v[p];
        const float * hr  = h + p * h_rs;
        float *       orw = out ? out + p * o_rs : NULL;
        float         dot = 0.0f;
        for (int64_t n = 0; n < K; ++n) {
            const float nv = alpha * hr[n] + a * k_prev[n] + c * k_hat[n];
            dot += nv * q_hat[n];
            if (orw) orw[n] = nv;
        }
        y[p] = dot;
    }
}
