/* Scalar elementwise kernels (see vec.h). */
#include <math.h>
#include <string.h>

#include "../../../core/ssmi.h"
#include "vec.h"

void ssmi_f32_vexp__scalar(int64_t n, const float * x, float * y) {
    for (int64_t i = 0; i < n; ++i) y[i] = expf(x[i]);
}

void ssmi_f32_decay_rows__scalar(int64_t rows, int64_t cols, const float * cb, int64_t cb_row_stride,
                                 const float * cm, const float * dt, float * m, int64_t m_row_stride) {
    for (int64_t i = 0; i < rows; ++i) {
        const float * cb_row = cb + i * cb_row_stride;
        float *       m_row  = m + i * m_row_stride;
        for (int64_t j = 0; j <= i; ++j) m_row[j] = cb_row[j] * expf(cm[i] - cm[j]) * dt[j];
        for (int64_t j = i + 1; j < cols; ++j) m_row[j] = 0.0f;
    }
}

void ssmi_f32_silu_gate__scalar(int64_t n, const float * y, const float * z, float * out) {
    for (int64_t i = 0; i < n; ++i) out[i] = y[i] * (z[i] / (1.0f + expf(-z[i])));
}

void ssmi_load_row__scalar(float * dst, const void * base, int32_t dtype, int64_t off, int64_t stride, int64_t n) {
    if (dtype == SSM_DTYPE_F32 && stride == 1) {
        memcpy(dst, (const float *) base + off, (size_t) n * sizeof(float));
        return;
    }
    ssmi_load_f32(dst, base, dtype, off, stride, n);
}

void ssmi_store_row__scalar(void * base, int32_t dtype, int64_t off, int64_t stride, const float * src, int64_t n) {
    if (dtype == SSM_DTYPE_F32 && stride == 1) {
        memcpy((float *) base + off, src, (size_t) n * sizeof(float));
        return;
    }
    ssmi_store_f32(base, dtype, off, stride, src, n);
}
