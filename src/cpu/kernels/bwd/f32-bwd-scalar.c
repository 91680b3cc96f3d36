/* Plain C backward kernels (see bwd.h). */
#include <math.h>

#include "../rotary/rotary.h"
#include "bwd.h"

float ssmi_f32_dot__scalar(int64_t n, const float * a, const float * b) {
    float   acc[8] = {0};
    int64_t e      = 0;
    for (; e + 8 <= n; e += 8)
        for (int l = 0; l < 8; ++l) acc[l] += a[e + l] * b[e + l];
    for (int l = 0; e < n; ++e, ++l) acc[l] += a[e] * b[e];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

void ssmi_f32_exp_sub__scalar(int64_t n, float c, const float * x, float * y) {
    for (int64_t i = 0; i < n; ++i) y[i] = expf(c - x[i]);
}

void ssmi_f32_gate_grads__scalar(int64_t n, const float * z, const float * dout, float * dy, float * y,
                                 float * sig) {
    for (int64_t i = 0; i < n; ++i) {
        const float zv = z[i], g = dout[i], s = 1.0f / (1.0f + expf(-zv));
        if (y) y[i] = g * y[i] * s * (1.0f + zv * (1.0f - s));
        if (sig) sig[i] = s;
        dy[i] = g * (zv * s);
    }
}

void ssmi_f32_colsum_dot__scalar(int64_t rows, int64_t cols, const float * a, int64_t lda, const float * b,
                                 int64_t ldb, float * q, float * acc, int64_t ldacc) {
    for (int64_t r = 0; r < rows; ++r) {
        const float *ar = a + r * lda, *br = b + r * ldb;
        for (int64_t c = 0; c < cols; ++c) q[c] += ar[c] * br[c];
        if (acc)
            for (int64_t c = 0; c < cols; ++c) acc[r * ldacc + c] += ar[c];
    }
}

void ssmi_f32_transpose__scalar(int64_t rows, int64_t cols, const float * src, int64_t ld_src, const float * scale,
                                float * dst, int64_t ld_dst) {
    /* 8×8 tiles so both sides touch whole cache lines */
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {
        const int64_t r1 = r0 + 8 < rows ? r0 + 8 : rows;
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            const int64_t c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (int64_t r = r0; r < r1; ++r) {
                const float s = scale != 0 ? scale[r] : 1.0f;
                for (int64_t c = c0; c < c1; ++c) dst[c * ld_dst + r] = src[r * ld_src + c] * s;
            }
        }
    }
}

float ssmi_f32_siso_bwd_prep__scalar(int64_t K, int64_t r, const float * q, const float * k, const float * bq,
                                     const float * bk, const float * cos2, const float * sin2, float sig, float w,
                                     float * qt, float * kt, float * qh, float * kh, float * ks) {
    /* k̃ and q̃ go through the output rows: kt/qt on the rotated dims, kh/qh (or ks) beyond */
    float * ktv = kh ? kh : ks;
    for (int64_t j = 0; j < K; ++j) (j < r ? kt : ktv)[j] = k[j] + bk[j];
    float acc[8] = {0};
    if (q) {
        for (int64_t j = 0; j < K; ++j) (j < r ? qt : qh)[j] = q[j] + bq[j];
        for (int64_t j = 0; j < K; ++j) acc[j & 7] += (j < r ? qt : qh)[j] * (j < r ? kt : ktv)[j];
        for (int64_t i = 0; i < r; ++i) qh[i] = qt[i] * cos2[i] + qt[i ^ 1] * sin2[i];
    }
    for (int64_t i = 0; i < K; ++i) {
        const float v = i < r ? kt[i] * cos2[i] + kt[i ^ 1] * sin2[i] : ktv[i];
        if (kh) kh[i] = v;
        ks[i] = (sig * v) * w;
    }
    return q ? ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) : 0.0f;
}

float ssmi_f32_siso_bwd_token__scalar(int64_t K, int64_t r, float * dq, float * dk, const float * qh,
                                      const float * kh, const float * qt, const float * kt, const float * cos2,
                                      const float * sin2, float sig, const float * extra_dk, float cq,
                                      const float * th, float dt, float * g, float * dth, float * dda, float * qbacc,
                                      float * kbacc, float * wq, float * wk, int add) {
    float   acc[8] = {0};
    int64_t j      = 0;
    for (; j + 8 <= K; j += 8)
        for (int l = 0; l < 8; ++l) acc[l] += dk[j + l] * kh[j + l];
    for (int l = 0; j < K; ++j, ++l) acc[l] += dk[j] * kh[j];
    const float dsig = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (j = 0; j < K; ++j) dk[j] = sig * dk[j] + (extra_dk ? extra_dk[j] : 0.0f);
    for (int64_t i = 0; i < r / 2; ++i)
        dth[i] = (dq[2 * i + 1] * qh[2 * i] - dq[2 * i] * qh[2 * i + 1]) +
                 (dk[2 * i + 1] * kh[2 * i] - dk[2 * i] * kh[2 * i + 1]);
    /* pairwise in place: each pair (2i, 2i+1) depends only on itself */
    for (int64_t i = 0; i < K; i += 2) {
        if (i + 1 < r) {
            const float q0 = dq[i], q1 = dq[i + 1], k0 = dk[i], k1 = dk[i + 1];
            dq[i]     = q0 * cos2[i] - q1 * sin2[i];
            dq[i + 1] = q1 * cos2[i + 1] - q0 * sin2[i + 1];
            dk[i]     = k0 * cos2[i] - k1 * sin2[i];
            dk[i + 1] = k1 * cos2[i + 1] - k0 * sin2[i + 1];
        }
    }
    for (j = 0; j < K; ++j) {
        dq[j] += cq * (j < r ? kt : kh)[j];
        dk[j] += cq * (j < r ? qt : qh)[j];
        qbacc[j] += dq[j];
        kbacc[j] += dk[j];
        if (wq) wq[j] = add ? wq[j] + dq[j] : dq[j];
        if (wk) wk[j] = add ? wk[j] + dk[j] : dk[j];
    }
    /* the angle backward of the r/2 pairs */
    const float pdt     = SSMI_PI_F * dt;
    float       dacc[8] = {0};
    for (int64_t i = 0; i < r / 2; ++i) {
        g[i] += dth[i];
        dacc[i & 7] += th[i] * g[i];
        dth[i] = pdt * (1.0f - th[i] * th[i]) * g[i];
    }
    *dda = SSMI_PI_F * (((dacc[0] + dacc[1]) + (dacc[2] + dacc[3])) + ((dacc[4] + dacc[5]) + (dacc[6] + dacc[7])));
    return dsig;
}
