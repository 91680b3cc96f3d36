/* AVX2+FMA backward kernels (see bwd.h). */
#include <immintrin.h>

#include "../rotary/rotary.h"
#include "bwd.h"
#include "../avx2-math.h"

/* The 8 lanes of v summed in a fixed order: ((0+1)+(2+3)) + ((4+5)+(6+7)). */
static inline float hsum8(__m256 v) {
    float l[8];
    _mm256_storeu_ps(l, v);
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* 8×8 block: d[c][r] = s[r][c]·scale[r] via unpack / shuffle / lane permute. */
static inline void block8x8(const float * s, int64_t ls, const float * scale, float * d, int64_t ld) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) {
        r[i] = _mm256_loadu_ps(s + i * ls);
        if (scale) r[i] = _mm256_mul_ps(r[i], _mm256_set1_ps(scale[i]));
    }
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(d + 0 * ld, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + 1 * ld, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}

void ssmi_f32_transpose__avx2(int64_t rows, int64_t cols, const float * src, int64_t ld_src, const float * scale,
                              float * dst, int64_t ld_dst) {
    const int64_t r8 = rows & ~(int64_t) 7, c8 = cols & ~(int64_t) 7;
    for (int64_t r0 = 0; r0 < r8; r0 += 8)
        for (int64_t c0 = 0; c0 < c8; c0 += 8)
            block8x8(src + r0 * ld_src + c0, ld_src, scale ? scale + r0 : 0, dst + c0 * ld_dst + r0, ld_dst);
    /* the ragged edges: columns c8.. of the full row blocks, then the last rows */
    for (int64_t r = 0; r < rows; ++r) {
        const float   s  = scale ? scale[r] : 1.0f;
        const int64_t cs = r < r8 ? c8 : 0;
        for (int64_t c = cs; c < cols; ++c) dst[c * ld_dst + r] = src[r * ld_src + c] * s;
    }
}

float ssmi_f32_dot__avx2(int64_t n, const float * a, const float * b) {
    /* four accumulators (elements e mod 32 by lane and block) hide the FMA latency, then
     * (0 + 1) + (2 + 3) and the 8 lanes in the fixed order */
    __m256  acc = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t e   = 0;
    for (; e + 32 <= n; e += 32) {
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + e), _mm256_loadu_ps(b + e), acc);
        a1  = _mm256_fmadd_ps(_mm256_loadu_ps(a + e + 8), _mm256_loadu_ps(b + e + 8), a1);
        a2  = _mm256_fmadd_ps(_mm256_loadu_ps(a + e + 16), _mm256_loadu_ps(b + e + 16), a2);
        a3  = _mm256_fmadd_ps(_mm256_loadu_ps(a + e + 24), _mm256_loadu_ps(b + e + 24), a3);
    }
    acc = _mm256_add_ps(_mm256_add_ps(acc, a1), _mm256_add_ps(a2, a3));
    for (; e + 8 <= n; e += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + e), _mm256_loadu_ps(b + e), acc);
    if (e < n) {
        const __m256i m = tail_mask(n - e);
        acc             = _mm256_fmadd_ps(_mm256_maskload_ps(a + e, m), _mm256_maskload_ps(b + e, m), acc);
    }
    return hsum8(acc);
}

void ssmi_f32_exp_sub__avx2(int64_t n, float c, const float * x, float * y) {
    const __m256 vc = _mm256_set1_ps(c);
    int64_t      i  = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp_ps(_mm256_sub_ps(vc, _mm256_loadu_ps(x + i))));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, m, exp_ps(_mm256_sub_ps(vc, _mm256_maskload_ps(x + i, m))));
    }
}

void ssmi_f32_gate_grads__avx2(int64_t n, const float * z, const float * dout, float * dy, float * y, float * sig) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 8) {
        const int     full = i + 8 <= n;
        const __m256i m    = tail_mask(n - i);
        const __m256  zv = full ? _mm256_loadu_ps(z + i) : _mm256_maskload_ps(z + i, m);
        const __m256  g  = full ? _mm256_loadu_ps(dout + i) : _mm256_maskload_ps(dout + i, m);
        const __m256  s  = _mm256_div_ps(one, _mm256_add_ps(one, exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), zv))));
        const __m256  d  = _mm256_mul_ps(g, _mm256_mul_ps(zv, s));
        if (y) {
            const __m256 yv = full ? _mm256_loadu_ps(y + i) : _mm256_maskload_ps(y + i, m);
            const __m256 w  = _mm256_add_ps(one, _mm256_mul_ps(zv, _mm256_sub_ps(one, s)));
            const __m256 r  = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(g, yv), s), w);
            if (full) _mm256_storeu_ps(y + i, r);
            else _mm256_maskstore_ps(y + i, m, r);
        }
        if (sig) {
            if (full) _mm256_storeu_ps(sig + i, s);
            else _mm256_maskstore_ps(sig + i, m, s);
        }
        if (full) _mm256_storeu_ps(dy + i, d);
        else _mm256_maskstore_ps(dy + i, m, d);
    }
}

void ssmi_f32_colsum_dot__avx2(int64_t rows, int64_t cols, const float * a, int64_t lda, const float * b,
                               int64_t ldb, float * q, float * acc, int64_t ldacc) {
    /* mul then add (no FMA): each element's sum is the scalar version's, bit for bit */
    for (int64_t r = 0; r < rows; ++r) {
        const float *ar = a + r * lda, *br = b + r * ldb;
        float *      cr = acc ? acc + r * ldacc : 0;
        int64_t      c  = 0;
        for (; c + 8 <= cols; c += 8) {
            const __m256 av = _mm256_loadu_ps(ar + c);
            _mm256_storeu_ps(q + c, _mm256_add_ps(_mm256_loadu_ps(q + c), _mm256_mul_ps(av, _mm256_loadu_ps(br + c))));
            if (cr) _mm256_storeu_ps(cr + c, _mm256_add_ps(_mm256_loadu_ps(cr + c), av));
        }
        for (; c < cols; ++c) {
            q[c] += ar[c] * br[c];
            if (cr) cr[c] += ar[c];
        }
    }
}

static inline __m256 load_n(const float * p, int full, __m256i m) {
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}
static inline void store_n(float * p, int full, __m256i m, __m256 v) {
    if (full) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, m, v);
}

/* x·cos2 + swap_pairs(x)·sin2 over the 8 lanes at i where i < r (the lanes at or past r are
 * passed through). r is even and i is a multiple of 8, so pairs never straddle blocks. */
static inline __m256 rot8(__m256 x, int64_t i, int64_t r, const float * cos2, const float * sin2, int neg) {
    if (i >= r) return x;
    const int     full = i + 8 <= r;
    const __m256i m    = tail_mask(r - i);
    const __m256  c    = load_n(cos2 + i, full, m);
    __m256        s    = load_n(sin2 + i, full, m);
    if (neg) s = _mm256_sub_ps(_mm256_setzero_ps(), s);
    const __m256 y = _mm256_fmadd_ps(_mm256_permute_ps(x, 0xB1), s, _mm256_mul_ps(x, c));
    return full ? y : _mm256_blendv_ps(x, y, _mm256_castsi256_ps(m));
}

float ssmi_f32_siso_bwd_prep__avx2(int64_t K, int64_t r, const float * q, const float * k, const float * bq,
                                   const float * bk, const float * cos2, const float * sin2, float sig, float w,
                                   float * qt, float * kt, float * qh, float * kh, float * ks) {
    const __m256 vs = _mm256_set1_ps(sig), vw = _mm256_set1_ps(w);
    __m256       acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < K; i += 8) {
        const int     full = i + 8 <= K;
        const __m256i m    = tail_mask(K - i);
        const __m256  kv   = _mm256_add_ps(load_n(k + i, full, m), load_n(bk + i, full, m));
        const __m256  khv  = rot8(kv, i, r, cos2, sin2, 0);
        if (i < r) store_n(kt + i, full, m, kv); /* beyond r, k̃ = k̂ */
        if (kh) store_n(kh + i, full, m, khv);
        store_n(ks + i, full, m, _mm256_mul_ps(_mm256_mul_ps(vs, khv), vw));
        if (q) {
            const __m256 qv = _mm256_add_ps(load_n(q + i, full, m), load_n(bq + i, full, m));
            if (i < r) store_n(qt + i, full, m, qv);
            store_n(qh + i, full, m, rot8(qv, i, r, cos2, sin2, 0));
            acc = _mm256_fmadd_ps(qv, kv, acc); /* masked lanes are 0·0 */
        }
    }
    return q ? hsum8(acc) : 0.0f;
}

/* dθ of the pairs of one block: lane 2j holds (pq[2j] + pq[2j+1]) + (pk[2j] + pk[2j+1]) with
 * pq = dq·swap(q̂)·(−1, +1), pk the same for k (odd lanes are not used). */
static inline __m256 pair_dtheta(__m256 dqv, __m256 qhv, __m256 dkv, __m256 khv) {
    const __m256 alt = _mm256_setr_ps(-1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f);
    const __m256 pq  = _mm256_mul_ps(_mm256_mul_ps(dqv, _mm256_permute_ps(qhv, 0xB1)), alt);
    const __m256 pk  = _mm256_mul_ps(_mm256_mul_ps(dkv, _mm256_permute_ps(khv, 0xB1)), alt);
    const __m256 sq  = _mm256_add_ps(pq, _mm256_permute_ps(pq, 0xB1));
    const __m256 sk  = _mm256_add_ps(pk, _mm256_permute_ps(pk, 0xB1));
    return _mm256_add_ps(sq, sk);
}

/* The token chain's operands, shared by its blocks. */
typedef struct token_args {
    float *dq, *dk, *qbacc, *kbacc, *wq, *wk;
    const float *qh, *kh, *qt, *kt, *cos2, *sin2, *extra_dk;
    int64_t      K, r;
    __m256       vs, vc;
    int          add;
} token_args;

/* Dims [i, i+8) of the token chain (bwd.h); returns the block's pair dθ (pair_dtheta) for
 * i < r, and adds the block's dk·k̂ to *acc. */
static inline __m256 token_block(const token_args * t, int64_t i, __m256 * acc) {
    const int     full = i + 8 <= t->K;
    const __m256i m    = tail_mask(t->K - i);
    __m256        dkv  = load_n(t->dk + i, full, m);
    const __m256  khv  = load_n(t->kh + i, full, m);
    *acc               = _mm256_fmadd_ps(dkv, khv, *acc);
    dkv                = _mm256_mul_ps(t->vs, dkv);
    if (t->extra_dk) dkv = _mm256_add_ps(dkv, load_n(t->extra_dk + i, full, m));
    __m256       dqv = load_n(t->dq + i, full, m);
    const __m256 qhv = load_n(t->qh + i, full, m);
    __m256       dth = _mm256_setzero_ps(), ktv = khv, qtv = qhv; /* beyond r: k̃ = k̂, q̃ = q̂ */
    if (i < t->r) {
        dth = pair_dtheta(dqv, qhv, dkv, khv);
        dqv = rot8(dqv, i, t->r, t->cos2, t->sin2, 1);
        dkv = rot8(dkv, i, t->r, t->cos2, t->sin2, 1);
        ktv = load_n(t->kt + i, full, m);
        qtv = load_n(t->qt + i, full, m);
        if (i + 8 > t->r) { /* a block across r: kt, qt hold nothing past it */
            const __m256 in = _mm256_castsi256_ps(tail_mask(t->r - i));
            ktv             = _mm256_blendv_ps(khv, ktv, in);
            qtv             = _mm256_blendv_ps(qhv, qtv, in);
        }
    }
    dqv = _mm256_fmadd_ps(t->vc, ktv, dqv);
    dkv = _mm256_fmadd_ps(t->vc, qtv, dkv);
    if (!t->wq) store_n(t->dq + i, full, m, dqv);
    if (!t->wk) store_n(t->dk + i, full, m, dkv);
    store_n(t->qbacc + i, full, m, _mm256_add_ps(load_n(t->qbacc + i, full, m), dqv));
    store_n(t->kbacc + i, full, m, _mm256_add_ps(load_n(t->kbacc + i, full, m), dkv));
    if (t->wq) store_n(t->wq + i, full, m, t->add ? _mm256_add_ps(load_n(t->wq + i, full, m), dqv) : dqv);
    if (t->wk) store_n(t->wk + i, full, m, t->add ? _mm256_add_ps(load_n(t->wk + i, full, m), dkv) : dkv);
    return dth;
}

/* Angles [a, a+n) (n ≤ 8) of the angle backward from their dθ in the lanes of d. */
static inline void angle_lanes(int64_t a, int64_t n, __m256 d, const float * th, __m256 pdt, float * g, float * dth,
                               __m256 * dacc) {
    const int     full = n == 8;
    const __m256i m    = tail_mask(n);
    if (!full) d = _mm256_and_ps(d, _mm256_castsi256_ps(m));
    const __m256 t  = load_n(th + a, full, m);
    const __m256 gv = _mm256_add_ps(load_n(g + a, full, m), d);
    store_n(g + a, full, m, gv);
    *dacc = _mm256_fmadd_ps(t, gv, *dacc); /* masked lanes are 0·0 */
    store_n(dth + a, full, m,
            _mm256_mul_ps(_mm256_mul_ps(pdt, _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_mul_ps(t, t))), gv));
}

/* The even lanes of d0 then those of d1, in order: [d0₀ d0₂ d0₄ d0₆ d1₀ d1₂ d1₄ d1₆]. */
static inline __m256 even_lanes(__m256 d0, __m256 d1) {
    const __m256 v = _mm256_shuffle_ps(d0, d1, 0x88); /* d0₀ d0₂ d1₀ d1₂ | d0₄ d0₆ d1₄ d1₆ */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xD8));
}

float ssmi_f32_siso_bwd_token__avx2(int64_t K, int64_t r, float * dq, float * dk, const float * qh,
                                    const float * kh, const float * qt, const float * kt, const float * cos2,
                                    const float * sin2, float sig, const float * extra_dk, float cq,
                                    const float * th, float dt, float * g, float * dth, float * dda, float * qbacc,
                                    float * kbacc, float * wq, float * wk, int add) {
    token_args t;
    t.dq = dq, t.dk = dk, t.qbacc = qbacc, t.kbacc = kbacc, t.wq = wq, t.wk = wk;
    t.qh = qh, t.kh = kh, t.qt = qt, t.kt = kt, t.cos2 = cos2, t.sin2 = sin2, t.extra_dk = extra_dk;
    t.K = K, t.r = r, t.vs = _mm256_set1_ps(sig), t.vc = _mm256_set1_ps(cq), t.add = add;
    const __m256 pdt  = _mm256_set1_ps(SSMI_PI_F * dt);
    __m256       acc  = _mm256_setzero_ps(), dacc = _mm256_setzero_ps();
    int64_t      i    = 0;
    /* two blocks at a time over the rotated dims: their 8 pair dθ make one vector of angles,
     * so the angle backward runs on whole vectors with no store-to-load round trip */
    for (; i + 16 <= r; i += 16) {
        const __m256 d0 = token_block(&t, i, &acc);
        const __m256 d1 = token_block(&t, i + 8, &acc);
        angle_lanes(i / 2, 8, even_lanes(d0, d1), th, pdt, g, dth, &dacc);
    }
    for (; i < r; i += 8) {
        const __m256  d0 = token_block(&t, i, &acc);
        const int64_t np = (r - i < 8 ? r - i : 8) / 2;
        angle_lanes(i / 2, np, even_lanes(d0, d0), th, pdt, g, dth, &dacc);
    }
    for (; i < K; i += 8) token_block(&t, i, &acc);
    *dda = SSMI_PI_F * hsum8(dacc);
    return hsum8(acc);
}
