/* Scalar layer kernels (see layer.h). */
#include <math.h>
#include <string.h>

#include "layer.h"

static inline float sigmoid_(float v) { return 1.0f / (1.0f + expf(-v)); }

void ssmi_f32_conv_weights__scalar(int64_t n, int64_t W, const float * w, int64_t sc, int64_t sk, float * wT,
                                   int64_t ld) {
    for (int64_t k = 0; k < W; ++k)
        for (int64_t c = 0; c < n; ++c) wT[k * ld + c] = w[c * sc + k * sk];
}

static void conv_pre(int64_t n, int64_t W, const float * const * taps, const float * wT, int64_t ld,
                     const float * bias, float * pre) {
    if (bias) memcpy(pre, bias, (size_t) n * sizeof(float));
    else memset(pre, 0, (size_t) n * sizeof(float));
    for (int64_t k = 0; k < W; ++k) {
        if (!taps[k]) continue;
        const float * x = taps[k];
        const float * wk = wT + k * ld;
        for (int64_t c = 0; c < n; ++c) pre[c] += wk[c] * x[c];
    }
}

void ssmi_f32_conv_row__scalar(int64_t n, int64_t W, const float * const * taps, const float * wT, int64_t ld,
                               const float * bias, int silu, float * out) {
    conv_pre(n, W, taps, wT, ld, bias, out);
    if (silu)
        for (int64_t c = 0; c < n; ++c) out[c] = out[c] * sigmoid_(out[c]);
}

void ssmi_f32_conv_grad_row__scalar(int64_t n, int64_t W, const float * const * taps, const float * wT, int64_t ld,
                                    const float * bias, int silu, const float * dout, float * g) {
    if (!silu) {
        memcpy(g, dout, (size_t) n * sizeof(float));
        return;
    }
    conv_pre(n, W, taps, wT, ld, bias, g);
    for (int64_t c = 0; c < n; ++c) {
        const float s = sigmoid_(g[c]);
        g[c]          = dout[c] * (s * (1.0f + g[c] * (1.0f - s)));
    }
}

void ssmi_f32_conv_wgrad_row__scalar(int64_t n, int64_t W, const float * const * taps, const float * g, float * dw,
                                     int64_t ld, float * db) {
    for (int64_t c = 0; c < n; ++c) db[c] += g[c];
    for (int64_t k = 0; k < W; ++k) {
        if (!taps[k]) continue;
        const float * x  = taps[k];
        float *       dk = dw + k * ld;
        for (int64_t c = 0; c < n; ++c) dk[c] += g[c] * x[c];
    }
}

void ssmi_f32_conv_dx_row__scalar(int64_t n, int64_t W, const float * const * gtaps, const float * wT, int64_t ld,
                                  const float * extra, float * out) {
    memset(out, 0, (size_t) n * sizeof(float));
    for (int64_t k = 0; k < W; ++k) {
        if (!gtaps[k]) continue;
        const float * g  = gtaps[k];
        const float * wk = wT + k * ld;
        for (int64_t c = 0; c < n; ++c) out[c] += wk[c] * g[c];
    }
    if (extra)
        for (int64_t c = 0; c < n; ++c) out[c] += extra[c];
}

void ssmi_f32_add_row__scalar(int64_t n, const float * x, float * y) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void ssmi_f32_rmsnorm_row__scalar(int64_t D, int64_t gs, float eps, int nbg, const float * x, const float * z,
                                  const float * w, float * out, float * tmp) {
    for (int64_t c0 = 0; c0 < D; c0 += gs) {
        float sum = 0.0f;
        for (int64_t i = 0; i < gs; ++i) {
            const int64_t c = c0 + i;
            float         v = x[c];
            if (z) {
                const float sg = z[c] * sigmoid_(z[c]);
                if (nbg) tmp[i] = sg;
                else v *= sg;
            }
            if (!z || !nbg) tmp[i] = v;
            sum += v * v;
        }
        const float r = 1.0f / sqrtf(sum / (float) gs + eps);
        for (int64_t i = 0; i < gs; ++i) {
            const int64_t c = c0 + i;
            out[c]          = z && nbg ? x[c] * r * w[c] * tmp[i] : tmp[i] * r * w[c];
        }
    }
}

void ssmi_f32_rmsnorm_bwd_row__scalar(int64_t D, int64_t gs, float eps, int nbg, const float * x, const float * z,
                                      const float * w, const float * dy, float * dx, float * dz, float * dw,
                                      float * tmp) {
    float *sig = tmp, *sg = tmp + gs; /* sigmoid(z), silu(z) of the group */
    for (int64_t c0 = 0; c0 < D; c0 += gs) {
        float sum = 0.0f;
        for (int64_t i = 0; i < gs; ++i) {
            const int64_t c = c0 + i;
            float         v = x[c];
            if (z) {
                sig[i] = sigmoid_(z[c]);
                sg[i]  = z[c] * sig[i];
                if (!nbg) v *= sg[i];
            }
            sum += v * v;
        }
        const float r  = 1.0f / sqrtf(sum / (float) gs + eps);
        float       c1 = 0.0f;
        for (int64_t i = 0; i < gs; ++i) {
            const int64_t c  = c0 + i;
            const float   v  = z && !nbg ? x[c] * sg[i] : x[c];
            const float   xh = v * r;
            float         g  = dy[c];
            if (z && nbg) {
                dz[c] = g * xh * w[c] * (sig[i] * (1.0f + z[c] * (1.0f - sig[i])));
                g *= sg[i];
            }
            c1 += xh * w[c] * g;
            dw[c] += g * xh;
        }
        c1 /= (float) gs;
        for (int64_t i = 0; i < gs; ++i) {
            const int64_t c  = c0 + i;
            const float   v  = z && !nbg ? x[c] * sg[i] : x[c];
            const float   xh = v * r;
            const float   g  = z && nbg ? dy[c] * sg[i] : dy[c];
            const float   dv = (w[c] * g - xh * c1) * r;
            if (z && !nbg) {
                dz[c] = dv * x[c] * (sig[i] * (1.0f + z[c] * (1.0f - sig[i])));
                dx[c] = dv * sg[i];
            } else {
                dx[c] = dv;
            }
        }
    }
}
