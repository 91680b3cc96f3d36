/* Shared helpers of the Mamba-3 MIMO CPU drivers (see mimo_common.h). */
#include <string.h>

#include "mimo_common.h"

int64_t ssmi_mimo_head_floats(int64_t R, int64_t N, int64_t P) {
    return 2 * ssmi_cpu_lines(R * N) + 3 * ssmi_cpu_lines(R * P) + ssmi_cpu_lines(P);
}

void ssmi_mimo_head_carve(ssmi_mimo_head * hd, float * base, int64_t R, int64_t N, int64_t P) {
    hd->qb = base;
    hd->kb = hd->qb + ssmi_cpu_lines(R * N);
    hd->mv = hd->kb + ssmi_cpu_lines(R * N);
    hd->mz = hd->mv + ssmi_cpu_lines(R * P);
    hd->mo = hd->mz + ssmi_cpu_lines(R * P);
    hd->nw = hd->mo + ssmi_cpu_lines(R * P);
    hd->d  = 0.0f;
}

/* Rows [h, r, :] of an (H, R, X) tensor, r < R, into dst[r·X ..]. */
static void load_hr(const ssmi_mimo_kernels * k, const ssm_tensor * t, int64_t h, int64_t R, int64_t X, float * dst) {
    if (!ssmi_present(t)) return;
    for (int64_t r = 0; r < R; ++r)
        k->base->load_row(dst + r * X, t->data, t->dtype, ssmi_off3(t, h, r, 0), t->strides[2], X);
}

void ssmi_mimo_head_load(const ssmi_mimo_kernels * k, ssmi_mimo_head * hd, int64_t h, int64_t R, int64_t N,
                         int64_t P, const ssm_tensor * q_bias, const ssm_tensor * k_bias, const ssm_tensor * mimo_v,
                         const ssm_tensor * mimo_z, const ssm_tensor * mimo_o, const ssm_tensor * norm_w,
                         const ssm_tensor * d) {
    load_hr(k, q_bias, h, R, N, hd->qb);
    load_hr(k, k_bias, h, R, N, hd->kb);
    load_hr(k, mimo_v, h, R, P, hd->mv);
    load_hr(k, mimo_z, h, R, P, hd->mz);
    load_hr(k, mimo_o, h, R, P, hd->mo);
    if (ssmi_present(norm_w)) {
        const int64_t off = norm_w->ndim == 1 ? h * P * norm_w->strides[0] : ssmi_off2(norm_w, h, 0);
        const int64_t st  = norm_w->strides[norm_w->ndim - 1];
        k->base->load_row(hd->nw, norm_w->data, norm_w->dtype, off, st, P);
    } else {
        for (int64_t p = 0; p < P; ++p) hd->nw[p] = 1.0f;
    }
    hd->d = ssmi_present(d) ? ssmi_get_f32(d, ssmi_off1(d, h)) : 0.0f;
}

void ssmi_mimo_sincos(const ssmi_mimo_kernels * k, int64_t A, const float * theta, float * cosv, float * sinv,
                      float * pairs) {
    if (A == 0) return;
    float * c2 = pairs, *s2 = pairs + 2 * A + 8;
    k->sincos_pairs(A, theta, c2, s2);
    for (int64_t a = 0; a < A; ++a) {
        cosv[a] = c2[2 * a];
        sinv[a] = s2[2 * a + 1];
    }
}

float ssmi_mimo_dot(int64_t n, const float * a, const float * b) {
    float   acc[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
    int64_t i      = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

void ssmi_mimo_prep_token(int64_t R, int64_t N, int64_t A, const float * qr, const float * kr, const ssmi_mimo_head * hd,
                          const float * cosv, const float * sinv, float c, float * qt, float * kh, float * kt,
                          int64_t ld, float * qkd) {
    for (int64_t r = 0; r < R; ++r) {
        float *       q = qt + r * ld, *kk = kh + r * ld;
        const float * qb = hd->qb + r * N, *kb = hd->kb + r * N;
        for (int64_t n = 0; n < N; ++n) q[n] = qr[r * N + n] + qb[n];
        for (int64_t n = 0; n < N; ++n) kk[n] = kr[r * N + n] + kb[n];
    }
    if (qkd)
        for (int64_t r = 0; r < R; ++r)
            for (int64_t r2 = 0; r2 < R; ++r2) qkd[r * R + r2] = ssmi_mimo_dot(N, qt + r * ld, kh + r2 * ld);
    for (int64_t r = 0; r < R; ++r) {
        float * q = qt + r * ld, *kk = kh + r * ld;
        ssmi_mimo_rotate(N, A, cosv, sinv, q);
        ssmi_mimo_rotate(N, A, cosv, sinv, kk);
        if (kt) memcpy(kt + r * ld, kk, (size_t) N * sizeof(float));
        for (int64_t n = 0; n < N; ++n) kk[n] *= c;
    }
}

int64_t ssmi_mimo_tile_floats(int64_t R, int64_t N, int64_t P, int64_t C) {
    const int64_t L = C * R;
    return 2 * ssmi_cpu_lines(L * N) + ssmi_cpu_lines(N * L) + 3 * ssmi_cpu_lines(L * P) + ssmi_cpu_lines(L * L) +
           ssmi_cpu_lines(C * R * R) + ssmi_cpu_lines(L) + 2 * ssmi_cpu_lines(C) + ssmi_cpu_lines(C * C);
}

void ssmi_mimo_tile_carve(ssmi_mimo_tile * tl, float * base, int64_t R, int64_t N, int64_t P, int64_t C) {
    const int64_t L = C * R;
    float *       p = base;
    tl->R = R, tl->N = N, tl->P = P, tl->C = C, tl->ld = L;
    tl->qt    = p, p += ssmi_cpu_lines(L * N);
    tl->kh    = p, p += ssmi_cpu_lines(L * N);
    tl->khT   = p, p += ssmi_cpu_lines(N * L);
    tl->u     = p, p += ssmi_cpu_lines(L * P);
    tl->w     = p, p += ssmi_cpu_lines(L * P);
    tl->y     = p, p += ssmi_cpu_lines(L * P);
    tl->m     = p, p += ssmi_cpu_lines(L * L);
    tl->qkd   = p, p += ssmi_cpu_lines(C * R * R);
    tl->ecs   = p, p += ssmi_cpu_lines(L);
    tl->gamma = p, p += ssmi_cpu_lines(C);
    tl->wrev  = p, p += ssmi_cpu_lines(C);
    tl->e     = p;
}

/* 1 when none of the n floats is NaN or ±Inf (exponent bits not all ones). The block GEMM
 * of ssmi_mimo_chunk_y multiplies the rows of each token by the u of the later tokens of its
 * block through M's zeros: exact for finite u, but 0·Inf = NaN would reach outputs before the
 * token that holds it, so a block with a non-finite u there goes token by token instead
 * (the same sums in the same order, without the zero terms). */
static int all_finite(const float * x, int64_t n) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
        uint32_t bits;
        memcpy(&bits, x + i, sizeof bits);
        bad |= (~bits & 0x7f800000u) == 0;
    }
    return bad == 0;
}

/* Token rows per block of the lower-triangular work: about two 6-row GEMM tiles. */
static int64_t block_tokens(int64_t R) { return R >= 12 ? 1 : 12 / R; }

void ssmi_mimo_chunk_y(const ssmi_mimo_kernels * k, ssmi_mimo_tile * tl, int64_t n, const float * s_np, float d) {
    const ssmi_cpu_kernels * b = k->base;
    const int64_t R = tl->R, N = tl->N, P = tl->P, C = tl->C, ld = tl->ld, L = n * R;
    /* inter: Y = diag(e^{da_cs})·Q̃·Ŝ */
    b->gemm(L, P, N, tl->qt, N, 1, s_np, P, tl->y, P, tl->ecs, 0.0f, 0);
    /* k̂ᵀ for the score GEMM: only rows of tokens that have a later token are needed */
    const int64_t kc = (n - 1) * R;
    for (int64_t x = 0; x < kc; ++x) {
        const float * kr = tl->kh + x * N;
        for (int64_t j = 0; j < N; ++j) tl->khT[j * ld + x] = kr[j];
    }
    const int64_t tb = block_tokens(R);
    for (int64_t i0 = 0; i0 < n; i0 += tb) {
        const int64_t i1 = i0 + tb < n ? i0 + tb : n, x0 = i0 * R, rows = (i1 - i0) * R, cols = i1 * R;
        float *       m0 = tl->m + x0 * ld;
        if (i1 > 1) b->gemm(rows, (i1 - 1) * R, N, tl->qt + x0 * N, N, 1, tl->khT, ld, m0, ld, NULL, 0.0f, 0);
        for (int64_t i = i0; i < i1; ++i) {
            const float * e = tl->e + i * C;
            const float   g = tl->gamma[i];
            for (int64_t r = 0; r < R; ++r) {
                float *       mr  = tl->m + (i * R + r) * ld;
                const float * qkd = tl->qkd + (i * R + r) * R;
                for (int64_t j = 0; j < i; ++j)
                    for (int64_t r2 = 0; r2 < R; ++r2) mr[j * R + r2] *= e[j];
                for (int64_t r2 = 0; r2 < R; ++r2) mr[i * R + r2] = g * qkd[r2];
                mr[i * R + r] += d;
                for (int64_t x = (i + 1) * R; x < cols; ++x) mr[x] = 0.0f;
            }
        }
        if (all_finite(tl->u + (x0 + R) * P, (cols - x0 - R) * P)) {
            b->gemm(rows, P, cols, m0, ld, 1, tl->u, P, tl->y + x0 * P, P, NULL, 1.0f, 0);
        } else { /* token by token, each up to its own columns: see all_finite */
            for (int64_t i = i0; i < i1; ++i)
                b->gemm(R, P, (i + 1) * R, tl->m + i * R * ld, ld, 1, tl->u, P, tl->y + i * R * P, P, NULL, 1.0f, 0);
        }
    }
}

void ssmi_mimo_state_update(const ssmi_mimo_kernels * k, ssmi_mimo_tile * tl, int64_t n, float ecl, float * s_np) {
    const int64_t R = tl->R, N = tl->N, P = tl->P, L = n * R;
    for (int64_t i = 0; i < n; ++i) {
        const float wi = tl->wrev[i];
        for (int64_t x = i * R; x < (i + 1) * R; ++x) {
            const float * ur = tl->u + x * P;
            float *       wr = tl->w + x * P;
            for (int64_t p = 0; p < P; ++p) wr[p] = ur[p] * wi;
        }
    }
    /* A = K̂ᵀ read through its strides (A[n][x] = kh[x·N + n]) */
    k->base->gemm(N, P, L, tl->kh, 1, N, tl->w, P, s_np, P, NULL, ecl, 0);
}

void ssmi_mimo_output_token(const ssmi_mimo_kernels * k, int64_t R, int64_t P, const float * y, const float * z,
                            const ssmi_mimo_head * hd, int reduce, int fused, float eps, float * work, float * out) {
    const int64_t RP = R * P;
    float *       zz = work, *ex = work + RP, *yp = work + 2 * RP;
    if (z) {
        for (int64_t r = 0; r < R; ++r)
            for (int64_t p = 0; p < P; ++p) zz[r * P + p] = z[p] * hd->mz[r * P + p];
        for (int64_t i = 0; i < RP; ++i) ex[i] = -zz[i];
        k->base->vexp(RP, ex, ex);
        for (int64_t i = 0; i < RP; ++i) zz[i] = zz[i] / (1.0f + ex[i]); /* silu(zz) */
    }
    for (int64_t r = 0; r < R; ++r) {
        const float * yr  = y + r * P;
        float *       ypr = yp + r * P;
        if (fused) {
            const float ms   = ssmi_mimo_dot(P, yr, yr) / (float) P;
            const float rstd = 1.0f / sqrtf(ms + eps);
            for (int64_t p = 0; p < P; ++p) ypr[p] = yr[p] * rstd * hd->nw[p] * zz[r * P + p];
        } else if (z) {
            for (int64_t p = 0; p < P; ++p) ypr[p] = yr[p] * zz[r * P + p];
        } else {
            memcpy(ypr, yr, (size_t) P * sizeof(float));
        }
    }
    if (reduce) {
        for (int64_t p = 0; p < P; ++p) out[p] = yp[p] * hd->mo[p];
        for (int64_t r = 1; r < R; ++r)
            for (int64_t p = 0; p < P; ++p) out[p] += yp[r * P + p] * hd->mo[r * P + p];
    } else {
        memcpy(out, yp, (size_t) RP * sizeof(float));
    }
}

void ssmi_mimo_load_state_np(const ssmi_mimo_kernels * k, const ssm_tensor * st, int64_t s, int64_t h, int64_t N,
                             int64_t P, float * s_np) {
    ssmi_cpu_m3_load_state_kv(k, st, s, h, N, P, s_np);
}

void ssmi_mimo_store_state_np(const ssmi_mimo_kernels * k, const ssm_tensor * st, int64_t s, int64_t h, int64_t N,
                              int64_t P, const float * s_np) {
    ssmi_cpu_m3_store_state_kv(k, st, s, h, N, P, s_np);
}

void ssmi_mimo_round_act(int32_t act, float * x, int64_t n) {
    if (act == SSM_DTYPE_BF16) {
        for (int64_t i = 0; i < n; ++i) x[i] = ssmi_mimo_round_bf16(x[i]);
    } else if (act == SSM_DTYPE_F16) {
        for (int64_t i = 0; i < n; ++i) x[i] = ssmi_f16_to_f32(ssmi_f32_to_f16(x[i]));
    }
}
