/*
 * bwd_chunk.cu — the chunk-parallel kernels of the CUDA Mamba-3 MIMO backward, one block per
 * (work chunk w, head h), operands in the global fp32 chunk tiles (bwd.cuh), every product a
 * per-element loop in a fixed order:
 *   tiles_kernel  q̃ = Rot(θ)(q + q_bias), k̃ = Rot(θ)(k + k_bias), k̂ = c·k̃, u = v ⊙ mimo_v,
 *                 qkdot = q̄·k̄ (same token, unrotated), and X_w = Q̃ᵀ·diag(e^{cs})·dY, the chunk's
 *                 term of the reverse state recurrence (bwd_seq.cu);
 *   grads_kernel  with Ŝ (entering) and dŜ (leaving) of the chunk, spec §4.2, with cs the
 *                 chunk-local cumsum of adt, E[i][j] = e^{cs_i − cs_j}:
 *                   M  = strict (Q̃K̂ᵀ ⊙ E) + the same-token blocks γ·qkdot + D·I;
 *                   D2 = strict (dY·Uᵀ ⊙ E);  dqk = the same-token blocks of dY·Uᵀ;
 *                   dq̃ = diag(e^{cs})·dY·Ŝᵀ + D2·K̂ + γ·dqk·K̃;
 *                   dk̂ = diag(e^{cs_last − cs})·U·dŜᵀ + D2ᵀ·Q̃;  dfactor = Σ k̃ ⊙ dk̂;
 *                   dk̃ = c·dk̂ + γ·dqkᵀ·Q̃ (+ dfinal_k_state at the sequence's last token);
 *                   dU = diag(e^{cs_last − cs})·K̂·dŜ + Mᵀ·dY;
 *                   dcs (the gradient w.r.t. cs) from the pair terms Σ M ⊙ dY·Uᵀ, the inter
 *                   term q̃·dq̃_inter, the state-update term k̂·dk̂_state and e^{cs_last}·<Ŝ, dŜ>;
 *                   dADT = the reverse cumsum of dcs in the chunk;
 *                 then per token the raw dθ, dq̄ = Rotᵀ dq̃ and dk̄ = Rotᵀ dk̃ (per value head,
 *                 fp32 workspace), dv = Σ_r dU ⊙ mimo_v (+ dfinal_v_state), dgamma_diag, and the
 *                 chunk's partial sums of dq_bias, dk_bias, dmimo_v and dD.
 */
#include "bwd.cuh"

namespace ssmi_mimo {
namespace {

/* The inverse rotation (Rotᵀ) of column nn of a gradient row. */
__device__ __forceinline__ float rot_t_col(const float * x, const float * th, int N, int NA, int nn) {
    const int half = N / 2;
    float     sn, cs;
    if (nn < NA) {
        sincosf(th[nn], &sn, &cs);
        return cs * x[nn] + sn * x[nn + half];
    }
    if (nn >= half && nn < half + NA) {
        sincosf(th[nn - half], &sn, &cs);
        return -sn * x[nn - half] + cs * x[nn];
    }
    return x[nn];
}

__global__ void __launch_bounds__(kBwdThreads) tiles_kernel(const mb_args A) {
    __shared__ float ecs[128];
    const int       w = blockIdx.x, h = blockIdx.y;
    const mc_chunk  ck = A.chunks[w];
    const int       R = A.R, N = A.N, P = A.P, NA = A.A, n = ck.len, L = n * R, g = h / (A.H / A.G);
    const long long T = tile_row(A, w, h);
    float *Q = A.tq + T * N, *KH = A.tkh + T * N, *KT = A.tkt + T * N, *U = A.u + T * P;
    float *QKD = A.qkd + ((long long)w * A.H + h) * A.C * R * R;
    const float * cm = A.cm + ((long long)ck.b * A.H + h) * A.S;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ecs[i] = expf(cm[ck.t0 + i]);
    for (int e = threadIdx.x; e < L * N; e += blockDim.x) {
        const int       x = e / N, nn = e - x * N, i = x / R, r = x - i * R;
        const long long t = ck.t0 + i;
        const float *   th = A.theta + (((long long)ck.b * A.S + t) * A.H + h) * NA;
        /* the column and its rotation partner, biased */
        const int nb = nn < NA ? nn + N / 2 : (nn >= N / 2 && nn < N / 2 + NA ? nn - N / 2 : nn);
        float     qr[2], kr[2];
        const int cols[2] = {nn, nb};
        for (int j = 0; j < 2; ++j) {
            const int c = cols[j];
            qr[j] = ldv(A.q, o5(A.q, ck.b, t, r, g, c)) + ldv(A.q_bias, o3(A.q_bias, h, r, c));
            kr[j] = ldv(A.k, o5(A.k, ck.b, t, r, g, c)) + ldv(A.k_bias, o3(A.k_bias, h, r, c));
        }
        float qv = qr[0], kv = kr[0];
        if (nb != nn) {
            const int a = nn < NA ? nn : nn - N / 2;
            float     sn, cs;
            sincosf(th[a], &sn, &cs);
            if (nn < NA) qv = cs * qr[0] - sn * qr[1], kv = cs * kr[0] - sn * kr[1];
            else qv = sn * qr[1] + cs * qr[0], kv = sn * kr[1] + cs * kr[0];
        }
        float lam, dtv, gam, cf;
        token_scalars(A, ck, h, t, lam, dtv, gam, cf);
        Q[e] = qv;
        KT[e] = kv;
        KH[e] = cf * kv;
    }
    for (int e = threadIdx.x; e < L * P; e += blockDim.x) {
        const int x = e / P, p = e - x * P, i = x / R, r = x - i * R;
        U[e] = ldv(A.v, o4(A.v, ck.b, ck.t0 + i, h, p)) * ldv(A.mimo_v, o3(A.mimo_v, h, r, p));
    }
    for (int e = threadIdx.x; e < L * R; e += blockDim.x) {
        const int       x = e / R, r2 = e - x * R, i = x / R, r = x - i * R;
        const long long t = ck.t0 + i;
        float           s = 0.0f;
        for (int nn = 0; nn < N; ++nn) {
            const float qb = ldv(A.q, o5(A.q, ck.b, t, r, g, nn)) + ldv(A.q_bias, o3(A.q_bias, h, r, nn));
            const float kb = ldv(A.k, o5(A.k, ck.b, t, r2, g, nn)) + ldv(A.k_bias, o3(A.k_bias, h, r2, nn));
            s = fmaf(qb, kb, s);
        }
        QKD[e] = s;
    }
    __syncthreads();
    /* X_w[n][p] = Σ_x q̃[x][n]·e^{cs_i}·dY[x][p] */
    const float * DY = A.dy + T * P;
    float *       X = A.dstate + ((long long)w * A.H + h) * N * P;
    for (int e = threadIdx.x; e < N * P; e += blockDim.x) {
        const int nn = e / P, p = e - nn * P;
        float     s = 0.0f;
        for (int x = 0; x < L; ++x) s = fmaf(Q[(long long)x * N + nn] * ecs[x / R], DY[(long long)x * P + p], s);
        X[e] = s;
    }
}

/* Fixed-order block sum of one value per thread (every thread calls it; red has blockDim floats). */
__device__ float block_sum(float v, float * red) {
    red[threadIdx.x] = v;
    __syncthreads();
    float s = 0.0f;
    if (threadIdx.x == 0)
        for (int j = 0; j < (int)blockDim.x; ++j) s += red[j];
    __syncthreads();
    if (threadIdx.x == 0) red[0] = s;
    __syncthreads();
    s = red[0];
    __syncthreads();
    return s;
}

__global__ void __launch_bounds__(kBwdThreads) grads_kernel(const mb_args A) {
    __shared__ float gam[128], cfs[128], ecs[128], wrev[128], dcs[128], rowq[128], rowk[128], red[kBwdThreads];
    const int       w = blockIdx.x, h = blockIdx.y;
    const mc_chunk  ck = A.chunks[w];
    const int       R = A.R, N = A.N, P = A.P, NA = A.A, CR = A.C * A.R, n = ck.len, L = n * R;
    const long long T = tile_row(A, w, h);
    const float *Q = A.tq + T * N, *KH = A.tkh + T * N, *KT = A.tkt + T * N, *U = A.u + T * P, *DY = A.dy + T * P;
    float *DQ = A.tdq + T * N, *DK = A.tdk + T * N, *DU = A.du + T * P;
    float *M = A.m + T * CR, *D2 = A.d2 + T * CR, *WP = A.wp + T * CR;
    const long long wh = (long long)w * A.H + h;
    const float *   QKD = A.qkd + wh * A.C * R * R;
    float *         DQK = A.dqk + wh * A.C * R * R;
    const float *   Sc = A.state + wh * N * P, *dS = A.dstate + wh * N * P;
    const float *   cm = A.cm + ((long long)ck.b * A.H + h) * A.S + ck.t0;
    const float     dsk = A.has_d ? ldv(A.d, o1(A.d, h)) : 0.0f;
    const float     cml = cm[n - 1], ecl = expf(cml);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float lam, dtv;
        token_scalars(A, ck, h, ck.t0 + i, lam, dtv, gam[i], cfs[i]);
        ecs[i] = expf(cm[i]);
        wrev[i] = expf(cml - cm[i]);
    }
    __syncthreads();
    /* M, D2, the pair terms, the same-token dqk */
    for (int e = threadIdx.x; e < L * L; e += blockDim.x) {
        const int x = e / L, x2 = e - x * L, i = x / R, j = x2 / R;
        float     mv = 0.0f, d2 = 0.0f, wp = 0.0f;
        if (j <= i) {
            float du = 0.0f;
            for (int p = 0; p < P; ++p) du = fmaf(DY[(long long)x * P + p], U[(long long)x2 * P + p], du);
            const int r = x - i * R, r2 = x2 - j * R;
            if (j < i) {
                float s = 0.0f;
                for (int nn = 0; nn < N; ++nn) s = fmaf(Q[(long long)x * N + nn], KH[(long long)x2 * N + nn], s);
                const float E = expf(cm[i] - cm[j]);
                mv = s * E;
                d2 = du * E;
                wp = mv * du;
            } else {
                mv = gam[i] * QKD[(i * R + r) * R + r2] + (r == r2 ? dsk : 0.0f);
                DQK[(i * R + r) * R + r2] = du;
            }
        }
        M[(long long)x * CR + x2] = mv;
        D2[(long long)x * CR + x2] = d2;
        WP[(long long)x * CR + x2] = wp;
    }
    /* the inter and state parts of dq̃, dk̂, dU */
    for (int e = threadIdx.x; e < L * N; e += blockDim.x) {
        const int x = e / N, nn = e - x * N, i = x / R;
        float     sq = 0.0f, sk = 0.0f;
        for (int p = 0; p < P; ++p) {
            sq = fmaf(DY[(long long)x * P + p], Sc[(long long)nn * P + p], sq);
            sk = fmaf(U[(long long)x * P + p], dS[(long long)nn * P + p], sk);
        }
        DQ[e] = ecs[i] * sq;
        DK[e] = wrev[i] * sk;
    }
    for (int e = threadIdx.x; e < L * P; e += blockDim.x) {
        const int x = e / P, p = e - x * P, i = x / R;
        float     s = 0.0f;
        for (int nn = 0; nn < N; ++nn) s = fmaf(KH[(long long)x * N + nn], dS[(long long)nn * P + p], s);
        DU[e] = wrev[i] * s;
    }
    __syncthreads();
    for (int x = threadIdx.x; x < L; x += blockDim.x) {
        float sq = 0.0f, sk = 0.0f;
        for (int nn = 0; nn < N; ++nn) {
            sq = fmaf(Q[(long long)x * N + nn], DQ[(long long)x * N + nn], sq);
            sk = fmaf(KH[(long long)x * N + nn], DK[(long long)x * N + nn], sk);
        }
        rowq[x] = sq;
        rowk[x] = sk;
    }
    /* e^{cs_last}·<Ŝ, dŜ> (ddA) and Σ dY ⊙ U (dD), fixed-order block sums */
    float part = 0.0f;
    for (int e = threadIdx.x; e < N * P; e += blockDim.x) part = fmaf(Sc[e], dS[e], part);
    const float sds = block_sum(part, red);
    part = 0.0f;
    for (int e = threadIdx.x; e < L * P; e += blockDim.x) part = fmaf(DY[e], U[e], part);
    const float ddsum = block_sum(part, red);
    if (threadIdx.x == 0) A.p_dd[wh] = ddsum;
    /* dcs per token */
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float s = 0.0f;
        for (int r = 0; r < R; ++r) s += rowq[i * R + r] - rowk[i * R + r];
        for (int r = 0; r < R; ++r) {
            const float * wr = WP + (long long)(i * R + r) * CR;
            for (int x2 = 0; x2 < i * R; ++x2) s += wr[x2];
        }
        for (int x = (i + 1) * R; x < L; ++x) {
            const float * wr = WP + (long long)x * CR + i * R;
            for (int r2 = 0; r2 < R; ++r2) s -= wr[r2];
        }
        if (i == n - 1) {
            float xs = 0.0f;
            for (int x = 0; x < L; ++x) xs += rowk[x];
            s += xs + ecl * sds;
        }
        dcs[i] = s;
        float dgd = 0.0f;
        for (int j = 0; j < R * R; ++j) dgd = fmaf(QKD[i * R * R + j], DQK[i * R * R + j], dgd);
        A.dgd[((long long)ck.b * A.H + h) * A.S + ck.t0 + i] = dgd;
    }
    __syncthreads();
    if (threadIdx.x == 0 && A.dadt.p != NULL) {
        float run = 0.0f;
        for (int i = n - 1; i >= 0; --i) {
            run += dcs[i];
            stv(A.dadt, o3(A.dadt, ck.b, h, ck.t0 + i), run);
        }
    }
    /* the strict and same-token parts of dq̃ and dk̂, and of dU */
    for (int e = threadIdx.x; e < L * N; e += blockDim.x) {
        const int x = e / N, nn = e - x * N, i = x / R, r = x - i * R;
        float     sq = 0.0f, sk = 0.0f;
        for (int x2 = 0; x2 < i * R; ++x2) sq = fmaf(D2[(long long)x * CR + x2], KH[(long long)x2 * N + nn], sq);
        for (int r2 = 0; r2 < R; ++r2)
            sq = fmaf(gam[i] * DQK[(i * R + r) * R + r2], KT[(long long)(i * R + r2) * N + nn], sq);
        for (int x2 = (i + 1) * R; x2 < L; ++x2) sk = fmaf(D2[(long long)x2 * CR + x], Q[(long long)x2 * N + nn], sk);
        DQ[e] += sq;
        DK[e] += sk;
    }
    for (int e = threadIdx.x; e < L * P; e += blockDim.x) {
        const int x = e / P, p = e - x * P, i = x / R;
        float     s = 0.0f;
        for (int x2 = i * R; x2 < L; ++x2) s = fmaf(M[(long long)x2 * CR + x], DY[(long long)x2 * P + p], s);
        DU[e] += s;
    }
    __syncthreads();
    /* dfactor = Σ k̃ ⊙ dk̂ */
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float s = 0.0f;
        for (int j = 0; j < R * N; ++j) s = fmaf(KT[(long long)i * R * N + j], DK[(long long)i * R * N + j], s);
        A.dfac[((long long)ck.b * A.H + h) * A.S + ck.t0 + i] = s;
    }
    __syncthreads();
    /* dk̃ = c·dk̂ + γ·dqkᵀ·Q̃ (+ dfinal_k_state) */
    for (int e = threadIdx.x; e < L * N; e += blockDim.x) {
        const int x = e / N, nn = e - x * N, i = x / R, r2 = x - i * R;
        float     s = cfs[i] * DK[e];
        for (int r = 0; r < R; ++r) s = fmaf(gam[i] * DQK[(i * R + r) * R + r2], Q[(long long)(i * R + r) * N + nn], s);
        if (ck.last && i == n - 1 && A.dfinal_k.p != NULL) s += ldv(A.dfinal_k, o4(A.dfinal_k, ck.seq, r2, h, nn));
        DK[e] = s;
    }
    __syncthreads();
    /* raw dθ, dq̄ and dk̄ (per value head), dv, the partial sums */
    const int half = N / 2;
    for (int e = threadIdx.x; e < n * NA; e += blockDim.x) {
        const int i = e / NA, a = e - i * NA;
        float     s = 0.0f;
        for (int r = 0; r < R; ++r) {
            const long long o = (long long)(i * R + r) * N;
            s += (DQ[o + a + half] * Q[o + a] - DQ[o + a] * Q[o + a + half]) +
                 (DK[o + a + half] * KT[o + a] - DK[o + a] * KT[o + a + half]);
        }
        A.dth[(((long long)ck.b * A.H + h) * A.S + ck.t0 + i) * NA + a] = s;
    }
    for (int e = threadIdx.x; e < L * N; e += blockDim.x) {
        const int       x = e / N, nn = e - x * N, i = x / R, r = x - i * R;
        const long long t = ck.t0 + i;
        const float *   th = A.theta + (((long long)ck.b * A.S + t) * A.H + h) * NA;
        const long long o = ((((long long)ck.b * A.S + t) * R + r) * A.H + h) * N + nn;
        A.dqh[o] = rot_t_col(DQ + (long long)x * N, th, N, NA, nn);
        A.dkh[o] = rot_t_col(DK + (long long)x * N, th, N, NA, nn);
    }
    for (int e = threadIdx.x; e < n * P; e += blockDim.x) {
        const int       i = e / P, p = e - i * P;
        const long long t = ck.t0 + i;
        float           s = ck.last && i == n - 1 && A.dfinal_v.p != NULL
                                ? ldv(A.dfinal_v, o3(A.dfinal_v, ck.seq, h, p))
                                : 0.0f;
        for (int r = 0; r < R; ++r) s = fmaf(DU[(long long)(i * R + r) * P + p], ldv(A.mimo_v, o3(A.mimo_v, h, r, p)), s);
        if (A.dv.p != NULL) stv(A.dv, o4(A.dv, ck.b, t, h, p), s);
    }
    for (int e = threadIdx.x; e < R * P; e += blockDim.x) {
        const int r = e / P, p = e - r * P;
        float     s = 0.0f;
        for (int i = 0; i < n; ++i)
            s = fmaf(DU[(long long)(i * R + r) * P + p], ldv(A.v, o4(A.v, ck.b, ck.t0 + i, h, p)), s);
        A.p_mv[wh * R * P + e] = s;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < R * N; e += blockDim.x) {
        const int r = e / N, nn = e - r * N;
        float     sq = 0.0f, sk = 0.0f;
        for (int i = 0; i < n; ++i) {
            const long long o = ((((long long)ck.b * A.S + ck.t0 + i) * R + r) * A.H + h) * N + nn;
            sq += A.dqh[o];
            sk += A.dkh[o];
        }
        A.p_qb[wh * R * N + e] = sq;
        A.p_kb[wh * R * N + e] = sk;
    }
}

} // namespace

ssm_status launch_bwd_tiles(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s) {
    if (A.W == 0 || A.H == 0) return SSM_STATUS_OK;
    tiles_kernel<<<dim3((unsigned)A.W, (unsigned)A.H), kBwdThreads, 0, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "tiles_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_bwd_chunk_grads(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s) {
    if (A.W == 0 || A.H == 0) return SSM_STATUS_OK;
    grads_kernel<<<dim3((unsigned)A.W, (unsigned)A.H), kBwdThreads, 0, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "grads_kernel");
    return SSM_STATUS_OK;
}

} // namespace ssmi_mimo
