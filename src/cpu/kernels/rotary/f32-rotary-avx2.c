/* AVX2+FMA rotary kernels (see rotary.h for the contract and the methods).
 *
 * exp (for tanh): exp_ps of kernels/avx2-math.h. sin/cos: θ = j·π/2 + r with j the nearest
 * integer of θ·2/π, π/2 in three parts applied with FMAs (r exact to a few ulp while
 * |j| < 2^16), then the quadrant j mod 4 picks ±sin r / ±cos r. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "rotary.h"
#include "../avx2-math.h"

/* tanh: odd polynomial x + x³·P(x²) for |x| < 0.625 (no cancellation near 0), else
 * sign(x)·(1 − e)/(1 + e) with e = exp(−2|x|). NaN takes the second path and stays NaN. */
static inline __m256 tanh_ps(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 ax   = _mm256_andnot_ps(sign, x);
    const __m256 z    = _mm256_mul_ps(x, x);
    __m256       p    = _mm256_set1_ps(-5.70498872745e-3f);
    p                 = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
    p                 = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
    p                 = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
    p                 = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    const __m256 e     = exp_ps(_mm256_mul_ps(ax, _mm256_set1_ps(-2.0f)));
    const __m256 one   = _mm256_set1_ps(1.0f);
    const __m256 big   = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
    const __m256 large = _mm256_or_ps(big, _mm256_and_ps(sign, x));
    return _mm256_blendv_ps(large, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
}

/* The same wrap as ssmi_f32_wrap, lane by lane. */
static inline __m256 wrap_ps(__m256 x) {
    const __m256 turns = _mm256_floor_ps(_mm256_mul_ps(x, _mm256_set1_ps(SSMI_INV_TWO_PI)));
    __m256       r     = _mm256_fnmadd_ps(turns, _mm256_set1_ps(SSMI_TWO_PI_HI), x);
    r                  = _mm256_fnmadd_ps(turns, _mm256_set1_ps(SSMI_TWO_PI_LO), r);
    const __m256 neg   = _mm256_cmp_ps(r, _mm256_setzero_ps(), _CMP_LT_OQ);
    return _mm256_add_ps(r, _mm256_and_ps(neg, _mm256_set1_ps(SSMI_TWO_PI_HI)));
}

void ssmi_f32_angle_rate__avx2(int64_t n, const float * raw, float * rate) {
    const __m256 pi = _mm256_set1_ps(SSMI_PI_F);
    int64_t      i  = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(rate + i, _mm256_mul_ps(pi, tanh_ps(_mm256_loadu_ps(raw + i))));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(rate + i, m, _mm256_mul_ps(pi, tanh_ps(_mm256_maskload_ps(raw + i, m))));
    }
}

void ssmi_f32_angle_advance__avx2(int64_t n, float * theta, const float * rate, float dt) {
    const __m256 vdt = _mm256_set1_ps(dt);
    int64_t      i   = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(theta + i,
                         wrap_ps(_mm256_add_ps(_mm256_loadu_ps(theta + i), _mm256_mul_ps(_mm256_loadu_ps(rate + i), vdt))));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(
            theta + i, m,
            wrap_ps(_mm256_add_ps(_mm256_maskload_ps(theta + i, m), _mm256_mul_ps(_mm256_maskload_ps(rate + i, m), vdt))));
    }
}

static inline __m256 angle_step_ps(__m256 theta, __m256 raw, __m256 dt) {
    const __m256 rate = _mm256_mul_ps(_mm256_set1_ps(SSMI_PI_F), tanh_ps(raw));
    return wrap_ps(_mm256_add_ps(theta, _mm256_mul_ps(rate, dt)));
}

void ssmi_f32_angle_step__avx2(int64_t n, float * theta, const float * raw, float dt) {
    const __m256 vdt = _mm256_set1_ps(dt);
    int64_t      i   = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(theta + i, angle_step_ps(_mm256_loadu_ps(theta + i), _mm256_loadu_ps(raw + i), vdt));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(theta + i, m,
                            angle_step_ps(_mm256_maskload_ps(theta + i, m), _mm256_maskload_ps(raw + i, m), vdt));
    }
}

void ssmi_f32_vtanh__avx2(int64_t n, const float * x, float * y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, tanh_ps(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, m, tanh_ps(_mm256_maskload_ps(x + i, m)));
    }
}

/* sin and cos of 8 angles. */
static inline void sincos_ps(__m256 x, __m256 * s_out, __m256 * c_out) {
    const __m256 j = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.636619772367581343f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(j, _mm256_set1_ps(1.5703125f), x);
    r        = _mm256_fnmadd_ps(j, _mm256_set1_ps(4.837512969970703125e-4f), r);
    r        = _mm256_fnmadd_ps(j, _mm256_set1_ps(7.54978995489188216e-8f), r);
    const __m256 z  = _mm256_mul_ps(r, r);
    __m256       ps = _mm256_set1_ps(-1.9515295891e-4f);
    ps              = _mm256_fmadd_ps(ps, z, _mm256_set1_ps(8.3321608736e-3f));
    ps              = _mm256_fmadd_ps(ps, z, _mm256_set1_ps(-1.6666654611e-1f));
    const __m256 sr = _mm256_fmadd_ps(_mm256_mul_ps(ps, z), r, r);
    __m256       pc = _mm256_set1_ps(2.443315711809948e-5f);
    pc              = _mm256_fmadd_ps(pc, z, _mm256_set1_ps(-1.388731625493765e-3f));
    pc              = _mm256_fmadd_ps(pc, z, _mm256_set1_ps(4.166664568298827e-2f));
    const __m256 cr = _mm256_fmadd_ps(_mm256_mul_ps(pc, z), z, _mm256_fnmadd_ps(_mm256_set1_ps(0.5f), z, _mm256_set1_ps(1.0f)));
    /* quadrant q = j mod 4: sin θ = (s, c, −s, −c)[q], cos θ = (c, −s, −c, s)[q] */
    const __m256i q    = _mm256_cvtps_epi32(j);
    const __m256  swap = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(q, _mm256_set1_epi32(1)), _mm256_set1_epi32(1)));
    const __m256  sv   = _mm256_blendv_ps(sr, cr, swap);
    const __m256  cv   = _mm256_blendv_ps(cr, sr, swap);
    const __m256  sneg = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(q, _mm256_set1_epi32(2)), 30));
    const __m256  cneg = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_and_si256(_mm256_add_epi32(q, _mm256_set1_epi32(1)), _mm256_set1_epi32(2)), 30));
    *s_out = _mm256_xor_ps(sv, sneg);
    *c_out = _mm256_xor_ps(cv, cneg);
}

/* 8 angles to 16 entries of each pair table. */
static inline void pairs_from_8(const float * theta, float * cos2, float * sin2) {
    const __m256 x = _mm256_loadu_ps(theta);
    __m256       s, c;
    sincos_ps(x, &s, &c);
    const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm256_set1_ps(65536.0f), _CMP_GT_OQ);
    if (_mm256_movemask_ps(big)) { /* the reduction above would lose bits: libm for those lanes */
        float sa[8], ca[8];
        _mm256_storeu_ps(sa, s);
        _mm256_storeu_ps(ca, c);
        for (int l = 0; l < 8; ++l)
            if (fabsf(theta[l]) > 65536.0f) sa[l] = sinf(theta[l]), ca[l] = cosf(theta[l]);
        s = _mm256_loadu_ps(sa);
        c = _mm256_loadu_ps(ca);
    }
    const __m256 ns  = _mm256_xor_ps(s, _mm256_set1_ps(-0.0f));
    const __m256 clo = _mm256_unpacklo_ps(c, c), chi = _mm256_unpackhi_ps(c, c);
    const __m256 slo = _mm256_unpacklo_ps(ns, s), shi = _mm256_unpackhi_ps(ns, s);
    _mm256_storeu_ps(cos2, _mm256_permute2f128_ps(clo, chi, 0x20));
    _mm256_storeu_ps(cos2 + 8, _mm256_permute2f128_ps(clo, chi, 0x31));
    _mm256_storeu_ps(sin2, _mm256_permute2f128_ps(slo, shi, 0x20));
    _mm256_storeu_ps(sin2 + 8, _mm256_permute2f128_ps(slo, shi, 0x31));
}

void ssmi_f32_sincos_pairs__avx2(int64_t n, const float * theta, float * cos2, float * sin2) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) pairs_from_8(theta + i, cos2 + 2 * i, sin2 + 2 * i);
    if (i < n) {
        float t[8] = { 0 }, c[16], s[16];
        memcpy(t, theta + i, (size_t) (n - i) * sizeof(float));
        pairs_from_8(t, c, s);
        memcpy(cos2 + 2 * i, c, (size_t) (2 * (n - i)) * sizeof(float));
        memcpy(sin2 + 2 * i, s, (size_t) (2 * (n - i)) * sizeof(float));
    }
}

static inline __m256 rot_ps(__m256 x, __m256 c, __m256 s) {
    return _mm256_fmadd_ps(_mm256_permute_ps(x, 0xB1), s, _mm256_mul_ps(x, c));
}

/* Dims [i, i+8) of x rotated by the tables, for i < r. The lanes at or past r are not
 * rotated: they keep x itself (not x·1 + partner·0, which a NaN or ±Inf partner would turn
 * into NaN). */
static inline __m256 rot_at(__m256 x, int64_t i, int64_t r, const float * cos2, const float * sin2) {
    if (i + 8 <= r) return rot_ps(x, _mm256_loadu_ps(cos2 + i), _mm256_loadu_ps(sin2 + i));
    const __m256i m = tail_mask(r - i);
    const __m256  y = rot_ps(x, _mm256_maskload_ps(cos2 + i, m), _mm256_maskload_ps(sin2 + i, m));
    return _mm256_blendv_ps(x, y, _mm256_castsi256_ps(m));
}

static inline float hsum_ps(__m256 v) {
    float l[8];
    _mm256_storeu_ps(l, v);
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

float ssmi_f32_bias_rotate_qk__avx2(int64_t K, int64_t r, const float * q, const float * k, const float * bq,
                                    const float * bk, const float * cos2, const float * sin2, float * qh,
                                    float * kh) {
    __m256  dot = _mm256_setzero_ps();
    int64_t i   = 0;
    for (; i < K; i += 8) {
        const int     full = i + 8 <= K;
        const __m256i m    = tail_mask(K - i);
        __m256        qv, kv;
        if (full) {
            qv = _mm256_add_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(bq + i));
            kv = _mm256_add_ps(_mm256_loadu_ps(k + i), _mm256_loadu_ps(bk + i));
        } else {
            qv = _mm256_add_ps(_mm256_maskload_ps(q + i, m), _mm256_maskload_ps(bq + i, m));
            kv = _mm256_add_ps(_mm256_maskload_ps(k + i, m), _mm256_maskload_ps(bk + i, m));
        }
        dot = _mm256_fmadd_ps(qv, kv, dot);
        if (i < r) {
            qv = rot_at(qv, i, r, cos2, sin2);
            kv = rot_at(kv, i, r, cos2, sin2);
        }
        if (full) {
            _mm256_storeu_ps(qh + i, qv);
            _mm256_storeu_ps(kh + i, kv);
        } else {
            _mm256_maskstore_ps(qh + i, m, qv);
            _mm256_maskstore_ps(kh + i, m, kv);
        }
    }
    return hsum_ps(dot);
}

void ssmi_f32_rotate__avx2(int64_t K, int64_t r, const float * x, const float * cos2, const float * sin2,
                           float * y) {
    for (int64_t i = 0; i < K; i += 8) {
        const int     full = i + 8 <= K;
        const __m256i m    = tail_mask(K - i);
        __m256        v    = full ? _mm256_loadu_ps(x + i) : _mm256_maskload_ps(x + i, m);
        if (i < r) v = rot_at(v, i, r, cos2, sin2);
        if (full) _mm256_storeu_ps(y + i, v);
        else _mm256_maskstore_ps(y + i, m, v);
    }
}
