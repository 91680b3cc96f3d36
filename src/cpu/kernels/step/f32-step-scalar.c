/* Scalar decode-step kernels (see step.h). */
#include "step.h"

void ssmi_f32_step_block__scalar(int64_t rows, int64_t cols, const float * in, int64_t in_stride, float * out,
                                 int64_t out_stride, float decay, const float * coef, const float * b, const float * c,
                                 float * y) {
    for (int64_t r = 0; r < rows; ++r) {
        const float * src = in + r * in_stride;
        float *       dst = out != 0 ? out + r * out_stride : 0;
        const float   k   = coef[r];
        float         acc = 0.0f;
        for (int64_t n = 0; n < cols; ++n) {
            const float s = src[n] * decay + k * b[n];
            if (dst) dst[n] = s;
            acc += s * c[n];
        }
        y[r] = acc;
    }
}

float ssmi_f32_step_row__scalar(int64_t cols, const float * in, float * out, const float * decay, float coef,
                                const float * b, const float * c) {
    float acc = 0.0f;
    for (int64_t n = 0; n < cols; ++n) {
        const float s = in[n] * decay[n] + coef * b[n];
        if (out) out[n] = s;
        acc += s * c[n];
    }
    return acc;
}
