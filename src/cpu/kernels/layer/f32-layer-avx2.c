/* AVX2+FMA layer kernels (see layer.h). Channels in chunks of 8, the last chunk masked.
 * The exp is exp_ps of kernels/avx2-math.h, the one of vec.h's AVX2 kernels. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "layer.h"
#include "../avx2-math.h"

/* sigmoid(v) = 1/(1 + exp(−v)) */
static inline __m256 sigmoid_ps(__m256 v) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), v));
    return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline __m256 ld(const float * p, int full, __m256i m) {
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}
static inline void st(float * p, int full, __m256i m, __m256 v) {
    if (full) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, m, v);
}

static inline __m256 hsum_bcast(__m256 v) { /* fixed order: halves, then pairs, then lanes */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s        = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s        = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm256_set1_ps(_mm_cvtss_f32(s));
}

void ssmi_f32_conv_weights__avx2(int64_t n, int64_t W, const float * w, int64_t sc, int64_t sk, float * wT,
                                 int64_t ld_) {
    int64_t c = 0;
    if (W == 4 && sk == 1 && sc == 4) {
        /* 8 channels × 4 taps = 4 vectors; transpose in registers. After the two unpack
         * rounds lane j of tap k holds channel (0,4,2,6,1,5,3,7)[j]. */
        const __m256i perm = _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7);
        for (; c + 8 <= n; c += 8) {
            const float * p  = w + c * 4;
            const __m256  r0 = _mm256_loadu_ps(p), r1 = _mm256_loadu_ps(p + 8);
            const __m256  r2 = _mm256_loadu_ps(p + 16), r3 = _mm256_loadu_ps(p + 24);
            const __m256  t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            const __m256  t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            _mm256_storeu_ps(wT + 0 * ld_ + c, _mm256_permutevar8x32_ps(_mm256_unpacklo_ps(t0, t2), perm));
            _mm256_storeu_ps(wT + 1 * ld_ + c, _mm256_permutevar8x32_ps(_mm256_unpackhi_ps(t0, t2), perm));
            _mm256_storeu_ps(wT + 2 * ld_ + c, _mm256_permutevar8x32_ps(_mm256_unpacklo_ps(t1, t3), perm));
            _mm256_storeu_ps(wT + 3 * ld_ + c, _mm256_permutevar8x32_ps(_mm256_unpackhi_ps(t1, t3), perm));
        }
    }
    for (int64_t k = 0; k < W; ++k)
        for (int64_t cc = c; cc < n; ++cc) wT[k * ld_ + cc] = w[cc * sc + k * sk];
}

static inline __m256 conv_pre_ps(int64_t c, int full, __m256i m, int64_t W, const float * const * taps,
                                 const float * wT, int64_t ld_, const float * bias) {
    __m256 acc = bias ? ld(bias + c, full, m) : _mm256_setzero_ps();
    for (int64_t k = 0; k < W; ++k)
        if (taps[k]) acc = _mm256_fmadd_ps(ld(wT + k * ld_ + c, full, m), ld(taps[k] + c, full, m), acc);
    return acc;
}

void ssmi_f32_conv_row__avx2(int64_t n, int64_t W, const float * const * taps, const float * wT, int64_t ld_,
                             const float * bias, int silu, float * out) {
    for (int64_t c = 0; c < n; c += 8) {
        const int     full = c + 8 <= n;
        const __m256i m    = tail_mask(n - c);
        __m256        v    = conv_pre_ps(c, full, m, W, taps, wT, ld_, bias);
        if (silu) v = _mm256_mul_ps(v, sigmoid_ps(v));
        st(out + c, full, m, v);
    }
}

void ssmi_f32_conv_grad_row__avx2(int64_t n, int64_t W, const float * const * taps, const float * wT, int64_t ld_,
                                  const float * bias, int silu, const float * dout, float * g) {
    if (!silu) {
        memcpy(g, dout, (size_t) n * sizeof(float));
        return;
    }
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t c = 0; c < n; c += 8) {
        const int     full = c + 8 <= n;
        const __m256i m    = tail_mask(n - c);
        const __m256  v    = conv_pre_ps(c, full, m, W, taps, wT, ld_, bias);
        const __m256  s    = sigmoid_ps(v);
        const __m256  d    = _mm256_mul_ps(s, _mm256_add_ps(one, _mm256_mul_ps(v, _mm256_sub_ps(one, s))));
        st(g + c, full, m, _mm256_mul_ps(ld(dout + c, full, m), d));
    }
}

void ssmi_f32_conv_wgrad_row__avx2(int64_t n, int64_t W, const float * const * taps, const float * g, float * dw,
                                   int64_t ld_, float * db) {
    for (int64_t c = 0; c < n; c += 8) {
        const int     full = c + 8 <= n;
        const __m256i m    = tail_mask(n - c);
        const __m256  gv   = ld(g + c, full, m);
        st(db + c, full, m, _mm256_add_ps(ld(db + c, full, m), gv));
        for (int64_t k = 0; k < W; ++k) {
            if (!taps[k]) continue;
            float * d = dw + k * ld_ + c;
            st(d, full, m, _mm256_fmadd_ps(gv, ld(taps[k] + c, full, m), ld(d, full, m)));
        }
    }
}

void ssmi_f32_conv_dx_row__avx2(int64_t n, int64_t W, const float * const * gtaps, const float * wT, int64_t ld_,
                                const float * extra, float * out) {
    for (int64_t c = 0; c < n; c += 8) {
        const int     full = c + 8 <= n;
        const __m256i m    = tail_mask(n - c);
        __m256        acc  = _mm256_setzero_ps();
        for (int64_t k = 0; k < W; ++k)
            if (gtaps[k]) acc = _mm256_fmadd_ps(ld(wT + k * ld_ + c, full, m), ld(gtaps[k] + c, full, m), acc);
        if (extra) acc = _mm256_add_ps(acc, ld(extra + c, full, m));
        st(out + c, full, m, acc);
    }
}

void ssmi_f32_add_row__avx2(int64_t n, const float * x, float * y) {
    for (int64_t i = 0; i < n; i += 8) {
        const int     full = i + 8 <= n;
        const __m256i m    = tail_mask(n - i);
        st(y + i, full, m, _mm256_add_ps(ld(y + i, full, m), ld(x + i, full, m)));
    }
}

void ssmi_f32_rmsnorm_row__avx2(int64_t D, int64_t gs, float eps, int nbg, const float * x, const float * z,
                                const float * w, float * out, float * tmp) {
    const int gate_after = z && nbg;
    for (int64_t c0 = 0; c0 < D; c0 += gs) {
        __m256 sum = _mm256_setzero_ps();
        for (int64_t i = 0; i < gs; i += 8) {
            const int     full = i + 8 <= gs;
            const __m256i m    = tail_mask(gs - i);
            __m256        v    = ld(x + c0 + i, full, m);
            if (z) {
                const __m256 zv = ld(z + c0 + i, full, m);
                const __m256 sg = _mm256_mul_ps(zv, sigmoid_ps(zv));
                if (nbg) st(tmp + i, full, m, sg);
                else v = _mm256_mul_ps(v, sg);
            }
            if (!gate_after) st(tmp + i, full, m, v);
            sum = _mm256_fmadd_ps(v, v, sum); /* masked lanes load 0 */
        }
        const float  s = _mm_cvtss_f32(_mm256_castps256_ps128(hsum_bcast(sum)));
        const __m256 r = _mm256_set1_ps(1.0f / sqrtf(s / (float) gs + eps));
        for (int64_t i = 0; i < gs; i += 8) {
            const int     full = i + 8 <= gs;
            const __m256i m    = tail_mask(gs - i);
            const __m256  wv   = ld(w + c0 + i, full, m);
            __m256        o;
            if (gate_after)
                o = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(ld(x + c0 + i, full, m), r), wv), ld(tmp + i, full, m));
            else o = _mm256_mul_ps(_mm256_mul_ps(ld(tmp + i, full, m), r), wv);
            st(out + c0 + i, full, m, o);
        }
    }
}

void ssmi_f32_rmsnorm_bwd_row__avx2(int64_t D, int64_t gs, float eps, int nbg, const float * x, const float * z,
                                    const float * w, const float * dy, float * dx, float * dz, float * dw,
                                    float * tmp) {
    float *      sig = tmp, *sgb = tmp + gs;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t c0 = 0; c0 < D; c0 += gs) {
        __m256 sum = _mm256_setzero_ps();
        for (int64_t i = 0; i < gs; i += 8) {
            const int     full = i + 8 <= gs;
            const __m256i m    = tail_mask(gs - i);
            __m256        v    = ld(x + c0 + i, full, m);
            if (z) {
                const __m256 zv = ld(z + c0 + i, full, m);
                const __m256 s  = sigmoid_ps(zv);
                const __m256 sg = _mm256_mul_ps(zv, s);
                st(sig + i, full, m, s);
                st(sgb + i, full, m, sg);
                if (!nbg) v = _mm256_mul_ps(v, sg);
            }
            sum = _mm256_fmadd_ps(v, v, sum);
        }
        const float  s  = _mm_cvtss_f32(_mm256_castps256_ps128(hsum_bcast(sum)));
        const float  rs = 1.0f / sqrtf(s / (float) gs + eps);
        const __m256 r  = _mm256_set1_ps(rs);
        __m256       c1 = _mm256_setzero_ps();
        for (int64_t i = 0; i < gs; i += 8) {
            const int     full = i + 8 <= gs;
            const __m256i m    = tail_mask(gs - i);
            const int64_t c    = c0 + i;
            __m256        v    = ld(x + c, full, m);
            if (z && !nbg) v = _mm256_mul_ps(v, ld(sgb + i, full, m));
            const __m256 xh = _mm256_mul_ps(v, r);
            const __m256 wv = ld(w + c, full, m);
            __m256       g  = ld(dy + c, full, m);
            if (z && nbg) {
                const __m256 sv = ld(sig + i, full, m), zv = ld(z + c, full, m);
                const __m256 dg = _mm256_mul_ps(sv, _mm256_add_ps(one, _mm256_mul_ps(zv, _mm256_sub_ps(one, sv))));
                st(dz + c, full, m, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(g, xh), wv), dg));
                g = _mm256_mul_ps(g, ld(sgb + i, full, m));
            }
            c1 = _mm256_fmadd_ps(_mm256_mul_ps(xh, wv), g, c1);
            st(dw + c, full, m, _mm256_fmadd_ps(g, xh, ld(dw + c, full, m)));
        }
        const __m256 c1m = _mm256_div_ps(hsum_bcast(c1), _mm256_set1_ps((float) gs));
        for (int64_t i = 0; i < gs; i += 8) {
            const int     full = i + 8 <= gs;
            const __m256i m    = tail_mask(gs - i);
            const int64_t c    = c0 + i;
            const __m256  xv   = ld(x + c, full, m);
            __m256        v    = xv;
            if (z && !nbg) v = _mm256_mul_ps(v, ld(sgb + i, full, m));
            const __m256 xh = _mm256_mul_ps(v, r);
            __m256       g  = ld(dy + c, full, m);
            if (z && nbg) g = _mm256_mul_ps(g, ld(sgb + i, full, m));
            const __m256 dv = _mm256_mul_ps(_mm256_fmsub_ps(ld(w + c, full, m), g, _mm256_mul_ps(xh, c1m)), r);
            if (z && !nbg) {
                const __m256 sv = ld(sig + i, full, m), zv = ld(z + c, full, m);
                const __m256 dg = _mm256_mul_ps(sv, _mm256_add_ps(one, _mm256_mul_ps(zv, _mm256_sub_ps(one, sv))));
                st(dz + c, full, m, _mm256_mul_ps(_mm256_mul_ps(dv, xv), dg));
                st(dx + c, full, m, _mm256_mul_ps(dv, ld(sgb + i, full, m)));
            } else {
                st(dx + c, full, m, dv);
            }
        }
    }
}
