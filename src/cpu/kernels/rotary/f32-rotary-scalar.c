/* Scalar rotary kernels (see rotary.h): libm tanhf, sinf, cosf. */
#include <math.h>

#include "rotary.h"

void ssmi_f32_angle_rate__scalar(int64_t n, const float * raw, float * rate) {
    for (int64_t i = 0; i < n; ++i) rate[i] = SSMI_PI_F * tanhf(raw[i]);
}

void ssmi_f32_angle_advance__scalar(int64_t n, float * theta, const float * rate, float dt) {
    for (int64_t i = 0; i < n; ++i) theta[i] = ssmi_f32_wrap(theta[i] + rate[i] * dt);
}

void ssmi_f32_angle_step__scalar(int64_t n, float * theta, const float * raw, float dt) {
    for (int64_t i = 0; i < n; ++i) theta[i] = ssmi_f32_wrap(theta[i] + (SSMI_PI_F * tanhf(raw[i])) * dt);
}

void ssmi_f32_vtanh__scalar(int64_t n, const float * x, float * y) {
    for (int64_t i = 0; i < n; ++i) y[i] = tanhf(x[i]);
}

void ssmi_f32_sincos_pairs__scalar(int64_t n, const float * theta, float * cos2, float * sin2) {
    for (int64_t i = 0; i < n; ++i) {
        const float c = cosf(theta[i]), s = sinf(theta[i]);
        cos2[2 * i] = cos2[2 * i + 1] = c;
        sin2[2 * i]                   = -s;
        sin2[2 * i + 1]               = s;
    }
}

void ssmi_f32_rotate__scalar(int64_t K, int64_t r, const float * x, const float * cos2, const float * sin2,
                             float * y) {
    for (int64_t i = 0; i < r; i += 2) {
        y[i]     = x[i] * cos2[i] + x[i + 1] * sin2[i];
        y[i + 1] = x[i + 1] * cos2[i + 1] + x[i] * sin2[i + 1];
    }
    for (int64_t i = r; i < K; ++i) y[i] = x[i];
}

float ssmi_f32_bias_rotate_qk__scalar(int64_t K, int64_t r, const float * q, const float * k, const float * bq,
                                      const float * bk, const float * cos2, const float * sin2, float * qh,
                                      float * kh) {
    float dot = 0.0f;
    for (int64_t i = 0; i < K; ++i) {
        qh[i] = q[i] + bq[i];
        kh[i] = k[i] + bk[i];
        dot += qh[i] * kh[i];
    }
    for (int64_t i = 0; i < r; i += 2) {
        const float q0 = qh[i], q1 = qh[i + 1], k0 = kh[i], k1 = kh[i + 1];
        qh[i]     = q0 * cos2[i] + q1 * sin2[i];
        qh[i + 1] = q1 * cos2[i + 1] + q0 * sin2[i + 1];
        kh[i]     = k0 * cos2[i] + k1 * sin2[i];
        kh[i + 1] = k1 * cos2[i + 1] + k0 * sin2[i + 1];
    }
    return dot;
}
