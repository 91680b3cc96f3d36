/*
 * bwd_chunk.cu — the chunk-parallel kernels of the CUDA Mamba-3 MIMO backward, one block per
 * (work chunk w, head h), operands in the global fp32 chunk tiles (bwd.cuh). Every matrix product
 * is a block_gemm (bwd.cuh; each sum in ascending k order): with PLANES false the fp32 FFMA form
 * (shared-memory staged slices, 4×4 register micro-tiles; entry chunk_parallel), with PLANES true
 * the tensor-core form (slices staged as split bf16 planes, mma.sync m16n8k16; entry
 * chunk_parallel_planes, 16-bit inputs). Both forms give every output element to one thread of a
 * fixed mapping that depends only on the product's shape, so an epilogue may read what the same
 * thread's epilogue of an earlier product of the same shape wrote (grads_kernel's M). The row
 * sums go a warp per row with a fixed-order shuffle sum:
 *   tiles_kernel  q̃ = Rot(θ)(q + q_bias), k̃ = Rot(θ)(k + k_bias), k̂ = c·k̃, u = v ⊙ mimo_v,
 *                 qkdot = q̄·k̄ (same token; computed as q̃·k̃), and X_w = Q̃ᵀ·diag(e^{cs})·dY, the chunk's
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
 *                 fp32 workspace), dv = Σ_r dU ⊙ mimo_v (+ dfinal_v_state), dgamma_diag, the
 *                 chunk's partial sums of dq_bias, dk_bias, dmimo_v and dD, and its sum of raw
 *                 dθ per angle (the angle pass's chunk level).
 */
#include "bwd.cuh"

namespace ssmi_mimo {
namespace {

const int kWarps = kBwdThreads / 32;
const int kMaxN = 128; /* the validation's limit of N (and P): at most four n per lane of a warp */

/* Five blocks per SM (48 registers): the qkdot loop unrolled over four k̃ rows would
 * otherwise take 61 registers and four blocks. */
template <bool PLANES>
__global__ void __launch_bounds__(kBwdThreads, 5) tiles_kernel(const mb_args A) {
    __shared__ __align__(16) typename gemm_smem_of<PLANES>::type sm;
    __shared__ float                   ecs[128], cfs[128];
    const int       w = blockIdx.x, h = blockIdx.y;
    const mc_chunk  ck = A.chunks[w];
    const int       R = A.R, N = A.N, P = A.P, NA = A.A, n = ck.len, L = n * R, g = h / (A.H / A.G), half = N / 2;
    const long long T = tile_row(A, w, h);
    float *Q = A.tq + T * N, *KH = A.tkh + T * N, *KT = A.tkt + T * N, *U = A.u + T * P;
    float *QKD = A.qkd + ((long long)w * A.H + h) * A.C * R * R;
    const float * cm = A.cm + ((long long)ck.b * A.H + h) * A.S;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float lam, dtv, gam;
        ecs[i] = expf(cm[ck.t0 + i]);
        token_scalars(A, ck, h, ck.t0 + i, lam, dtv, gam, cfs[i]);
    }
    __syncthreads();
    /* q̃, k̃, k̂ = c·k̃: one rotation pair (a, a + N/2) per element, one sincos for the four values */
    for (int e = threadIdx.x; e < L * half; e += blockDim.x) {
        const int       x = e / half, a = e - x * half, i = x / R, r = x - i * R, a2 = a + half;
        const long long t = ck.t0 + i;
        const float     q0 = ldv(A.q, o5(A.q, ck.b, t, r, g, a)) + ldv(A.q_bias, o3(A.q_bias, h, r, a));
        const float     q1 = ldv(A.q, o5(A.q, ck.b, t, r, g, a2)) + ldv(A.q_bias, o3(A.q_bias, h, r, a2));
        const float     k0 = ldv(A.k, o5(A.k, ck.b, t, r, g, a)) + ldv(A.k_bias, o3(A.k_bias, h, r, a));
        const float     k1 = ldv(A.k, o5(A.k, ck.b, t, r, g, a2)) + ldv(A.k_bias, o3(A.k_bias, h, r, a2));
        float           qa = q0, qb = q1, ka = k0, kb = k1;
        if (a < NA) {
            float sn, cs;
            sincosf(A.theta[(((long long)ck.b * A.S + t) * A.H + h) * NA + a], &sn, &cs);
            qa = cs * q0 - sn * q1, ka = cs * k0 - sn * k1;
            qb = sn * q0 + cs * q1, kb = sn * k0 + cs * k1;
        }
        const float     cf = cfs[i];
        const long long o = (long long)x * N;
        Q[o + a] = qa, Q[o + a2] = qb;
        KT[o + a] = ka, KT[o + a2] = kb;
        KH[o + a] = cf * ka, KH[o + a2] = cf * kb;
    }
    /* u = v ⊙ mimo_v (unrolled: the loads of two elements in flight together) */
#pragma unroll 2
    for (int e = threadIdx.x; e < L * P; e += blockDim.x) {
        const int x = e / P, p = e - x * P, i = x / R, r = x - i * R;
        U[e] = ldv(A.v, o4(A.v, ck.b, ck.t0 + i, h, p)) * ldv(A.mimo_v, o3(A.mimo_v, h, r, p));
    }
    __syncthreads();
    /* qkdot[x][r2] = q̄[x]·k̄[i, r2] (the same token's rows, biased) as q̃[x]·k̃[i, r2]: one angle
     * rotates a column pair of both, an orthogonal map, so the dot products are the same. Read
     * from the block's fp32 tiles just written: a warp per row x, lane l over n = l + 32j (N ≤ 128:
     * j < 4), the loads of four k̃ rows issued together. */
    static_assert(kMaxN == 128, "qkdot: four n per lane");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int x = warp; x < L; x += kWarps) {
        const int    i = x / R;
        const float *qr = Q + (long long)x * N, *kr = KT + (long long)i * R * N;
        float        qv[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) qv[j] = lane + 32 * j < N ? qr[lane + 32 * j] : 0.0f;
#pragma unroll 4
        for (int r2 = 0; r2 < R; ++r2) {
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (lane + 32 * j < N) s = fmaf(qv[j], kr[(long long)r2 * N + lane + 32 * j], s);
            s = warp_sum(s);
            if (lane == 0) QKD[x * R + r2] = s;
        }
    }
    /* X_w[n][p] = Σ_x q̃[x][n]·e^{cs_i}·dY[x][p] */
    const float * DY = A.dy + T * P;
    float *       X = A.dstate + ((long long)w * A.H + h) * N * P;
    block_gemm<false, false>(
        sm, N, P, L, [&](int nn, int x) { return Q[(long long)x * N + nn] * ecs[x / R]; },
        [&](int x, int p) { return DY[(long long)x * P + p]; },
        [&](int nn, int p, float s) { X[(long long)nn * P + p] = s; });
}

/* The tensor-core form fits four blocks per SM (64 registers, 16 bytes spilled; 41 KB of static
 * shared memory each, with the largest carveout): the kernel waits on loads, and the fourth
 * block hides more of that than the spill costs. The fp32 form keeps two (128 registers). */
template <bool PLANES>
__global__ void __launch_bounds__(kBwdThreads, PLANES ? 4 : 2) grads_kernel(const mb_args A) {
    __shared__ __align__(16) typename gemm_smem_of<PLANES>::type sm;
    __shared__ float gam[128], cfs[128], cmv[128], ecs[128], wrev[128], dcs[128], rowq[128], rowk[128], red[kWarps];
    const int       w = blockIdx.x, h = blockIdx.y;
    const mc_chunk  ck = A.chunks[w];
    const int       R = A.R, N = A.N, P = A.P, NA = A.A, CR = A.C * A.R, n = ck.len, L = n * R, half = N / 2;
    const int       warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long T = tile_row(A, w, h);
    const float *Q = A.tq + T * N, *KH = A.tkh + T * N, *KT = A.tkt + T * N, *U = A.u + T * P, *DY = A.dy + T * P;
    float *DQ = A.tdq + T * N, *DK = A.tdk + T * N, *DU = A.du + T * P;
    float *M = A.m + T * CR, *D2 = A.d2 + T * CR, *WP = A.wp + T * CR;
    const long long wh = (long long)w * A.H + h;
    const float *   QKD = A.qkd + wh * A.C * R * R;
    float *         DQK = A.dqk + wh * A.C * R * R;
    const float *   Sc = A.state + wh * N * P, *dS = A.dstate + wh * N * P;
    const float *   cm = A.cm + ((long long)ck.b * A.H + h) * A.S + ck.t0;
    const long long tok = ((long long)ck.b * A.H + h) * A.S + ck.t0; /* (b, h, t0) in [B][H][S] */
    const float     dsk = A.has_d ? ldv(A.d, o1(A.d, h)) : 0.0f;
    const float     cml = cm[n - 1], ecl = expf(cml);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float lam, dtv;
        token_scalars(A, ck, h, ck.t0 + i, lam, dtv, gam[i], cfs[i]);
        cmv[i] = cm[i];
        ecs[i] = expf(cm[i]);
        wrev[i] = expf(cml - cm[i]);
    }
    __syncthreads();
    /* M = strict (Q̃K̂ᵀ ⊙ E) + the same-token blocks γ·qkdot + D·I (0 above) */
    block_gemm<true, true>(
        sm, L, L, N, [&](int x, int nn) { return Q[(long long)x * N + nn]; },
        [&](int nn, int x2) { return KH[(long long)x2 * N + nn]; },
        [&](int x, int x2, float s) {
            const int i = x / R, j = x2 / R;
            float     mv = 0.0f;
            if (j < i) mv = s * expf(cmv[i] - cmv[j]);
            else if (j == i) {
                const int r = x - i * R, r2 = x2 - j * R;
                mv = gam[i] * QKD[(i * R + r) * R + r2] + (r == r2 ? dsk : 0.0f);
            }
            M[(long long)x * CR + x2] = mv;
        });
    /* dY·Uᵀ: D2 = strict (· ⊙ E), the pair terms M ⊙ dY·Uᵀ (strict), the same-token dqk; each
     * element's M was written by this same thread (same tiling) */
    block_gemm<true, true>(
        sm, L, L, P, [&](int x, int p) { return DY[(long long)x * P + p]; },
        [&](int p, int x2) { return U[(long long)x2 * P + p]; },
        [&](int x, int x2, float du) {
            const int i = x / R, j = x2 / R;
            float     d2 = 0.0f, wp = 0.0f;
            if (j < i) {
                d2 = du * expf(cmv[i] - cmv[j]);
                wp = M[(long long)x * CR + x2] * du;
            } else if (j == i) {
                DQK[(i * R + x - i * R) * R + x2 - j * R] = du;
            }
            D2[(long long)x * CR + x2] = d2;
            WP[(long long)x * CR + x2] = wp;
        });
    /* the inter and state parts: dq̃ = e^{cs}·dY·Ŝᵀ, dk̂ = e^{cs_last−cs}·U·dŜᵀ, dU = e^{cs_last−cs}·K̂·dŜ */
    block_gemm<true, true>(
        sm, L, N, P, [&](int x, int p) { return DY[(long long)x * P + p]; },
        [&](int p, int nn) { return Sc[(long long)nn * P + p]; },
        [&](int x, int nn, float s) { DQ[(long long)x * N + nn] = ecs[x / R] * s; });
    block_gemm<true, true>(
        sm, L, N, P, [&](int x, int p) { return U[(long long)x * P + p]; },
        [&](int p, int nn) { return dS[(long long)nn * P + p]; },
        [&](int x, int nn, float s) { DK[(long long)x * N + nn] = wrev[x / R] * s; });
    block_gemm<true, false>(
        sm, L, P, N, [&](int x, int nn) { return KH[(long long)x * N + nn]; },
        [&](int nn, int p) { return dS[(long long)nn * P + p]; },
        [&](int x, int p, float s) { DU[(long long)x * P + p] = wrev[x / R] * s; });
    __syncthreads();
    /* rowq = q̃·dq̃_inter, rowk = k̂·dk̂_state per row: a warp per row, lane l over n = l + 32j (the
     * row's loads issued together) */
    for (int x = warp; x < L; x += kWarps) {
        float sq = 0.0f, sk = 0.0f;
#pragma unroll
        for (int j = 0; j < kMaxN / 32; ++j) {
            const int nn = lane + 32 * j;
            if (nn >= N) continue;
            const long long o = (long long)x * N + nn;
            sq = fmaf(Q[o], DQ[o], sq);
            sk = fmaf(KH[o], DK[o], sk);
        }
        sq = warp_sum(sq);
        sk = warp_sum(sk);
        if (lane == 0) rowq[x] = sq, rowk[x] = sk;
    }
    /* e^{cs_last}·<Ŝ, dŜ> (ddA) and Σ dY ⊙ U (dD), fixed-order block sums */
    float part = 0.0f;
#pragma unroll 4
    for (int e = threadIdx.x; e < N * P; e += blockDim.x) part = fmaf(Sc[e], dS[e], part);
    const float sds = block_sum(part, red);
    part = 0.0f;
#pragma unroll 4
    for (int e = threadIdx.x; e < L * P; e += blockDim.x) part = fmaf(DY[e], U[e], part);
    const float ddsum = block_sum(part, red);
    if (threadIdx.x == 0) A.p_dd[wh] = ddsum;
    /* dcs per token (a warp per token): the rank rows' q and k terms, the pair terms of the token's
     * rows (earlier columns) minus those of its columns (later rows); the last token adds Σ rowk and
     * e^{cs_last}·<Ŝ, dŜ>. dgamma_diag = Σ qkdot ⊙ dqk. */
    for (int i = warp; i < n; i += kWarps) {
        const int iR = i * R, ncol = (L - iR - R) * R;
        float     p2 = 0.0f;
#pragma unroll 4
        for (int e = lane; e < R * iR; e += 32) {
            const int r = e / iR, x2 = e - r * iR;
            p2 += WP[(long long)(iR + r) * CR + x2];
        }
#pragma unroll 4
        for (int e = lane; e < ncol; e += 32) {
            const int x = iR + R + e / R, r2 = e - (e / R) * R;
            p2 -= WP[(long long)x * CR + iR + r2];
        }
        if (i == n - 1)
            for (int x = lane; x < L; x += 32) p2 += rowk[x];
        p2 = warp_sum(p2);
        float s = 0.0f;
        for (int r = 0; r < R; ++r) s += rowq[iR + r] - rowk[iR + r];
        s += p2;
        if (i == n - 1) s += ecl * sds;
        float dgd = 0.0f;
        for (int j = 0; j < R * R; ++j) dgd = fmaf(QKD[i * R * R + j], DQK[i * R * R + j], dgd);
        if (lane == 0) {
            dcs[i] = s;
            A.dgd[tok + i] = dgd;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0 && A.dadt.p != NULL) {
        float run = 0.0f;
        for (int i = n - 1; i >= 0; --i) {
            run += dcs[i];
            stv(A.dadt, o3(A.dadt, ck.b, h, ck.t0 + i), run);
        }
    }
    /* the strict and same-token parts: dq̃ += D2·K̂ + γ·dqk·K̃, dk̂ += D2ᵀ·Q̃, dU += Mᵀ·dY (D2 and M are
     * 0 where the sums skip) */
    block_gemm<true, false>(
        sm, L, N, L, [&](int x, int x2) { return D2[(long long)x * CR + x2]; },
        [&](int x2, int nn) { return KH[(long long)x2 * N + nn]; },
        [&](int x, int nn, float s) {
            const int i = x / R, r = x - i * R;
#pragma unroll 4
            for (int r2 = 0; r2 < R; ++r2)
                s = fmaf(gam[i] * DQK[(i * R + r) * R + r2], KT[(long long)(i * R + r2) * N + nn], s);
            DQ[(long long)x * N + nn] += s;
        });
    block_gemm<false, false>(
        sm, L, N, L, [&](int x, int x2) { return D2[(long long)x2 * CR + x]; },
        [&](int x2, int nn) { return Q[(long long)x2 * N + nn]; },
        [&](int x, int nn, float s) { DK[(long long)x * N + nn] += s; });
    block_gemm<false, false>(
        sm, L, P, L, [&](int x, int x2) { return M[(long long)x2 * CR + x]; },
        [&](int x2, int p) { return DY[(long long)x2 * P + p]; },
        [&](int x, int p, float s) { DU[(long long)x * P + p] += s; });
    __syncthreads();
    /* dfactor = Σ k̃ ⊙ dk̂ per token: a warp per token */
    for (int i = warp; i < n; i += kWarps) {
        float s = 0.0f;
#pragma unroll 4
        for (int j = lane; j < R * N; j += 32) s = fmaf(KT[(long long)i * R * N + j], DK[(long long)i * R * N + j], s);
        s = warp_sum(s);
        if (lane == 0) A.dfac[tok + i] = s;
    }
    __syncthreads();
    /* dk̃ = c·dk̂ + γ·dqkᵀ·Q̃ (+ dfinal_k_state) */
    for (int e = threadIdx.x; e < L * N; e += blockDim.x) {
        const int x = e / N, nn = e - x * N, i = x / R, r2 = x - i * R;
        float     s = cfs[i] * DK[e];
#pragma unroll 4
        for (int r = 0; r < R; ++r) s = fmaf(gam[i] * DQK[(i * R + r) * R + r2], Q[(long long)(i * R + r) * N + nn], s);
        if (ck.last && i == n - 1 && A.dfinal_k.p != NULL) s += ldv(A.dfinal_k, o4(A.dfinal_k, ck.seq, r2, h, nn));
        DK[e] = s;
    }
    __syncthreads();
    /* raw dθ, dq̄ and dk̄ (per value head, Rotᵀ of a column pair with one sincos), dv, the partial sums */
    for (int e = threadIdx.x; e < n * NA; e += blockDim.x) {
        const int i = e / NA, a = e - i * NA;
        float     s = 0.0f;
#pragma unroll 2
        for (int r = 0; r < R; ++r) {
            const long long o = (long long)(i * R + r) * N;
            s += (DQ[o + a + half] * Q[o + a] - DQ[o + a] * Q[o + a + half]) +
                 (DK[o + a + half] * KT[o + a] - DK[o + a] * KT[o + a + half]);
        }
        A.dth[(tok + i) * NA + a] = s;
    }
    for (int e = threadIdx.x; e < L * half; e += blockDim.x) {
        const int       x = e / half, a = e - x * half, i = x / R, r = x - i * R, a2 = a + half;
        const long long t = ck.t0 + i;
        const long long o = ((((long long)ck.b * A.S + t) * R + r) * A.H + h) * N;
        const float *   dq = DQ + (long long)x * N, *dk = DK + (long long)x * N;
        if (a < NA) {
            float sn, cs;
            sincosf(A.theta[(((long long)ck.b * A.S + t) * A.H + h) * NA + a], &sn, &cs);
            A.dqh[o + a] = cs * dq[a] + sn * dq[a2];
            A.dqh[o + a2] = -sn * dq[a] + cs * dq[a2];
            A.dkh[o + a] = cs * dk[a] + sn * dk[a2];
            A.dkh[o + a2] = -sn * dk[a] + cs * dk[a2];
        } else {
            A.dqh[o + a] = dq[a], A.dqh[o + a2] = dq[a2];
            A.dkh[o + a] = dk[a], A.dkh[o + a2] = dk[a2];
        }
    }
    for (int e = threadIdx.x; e < n * P; e += blockDim.x) {
        const int       i = e / P, p = e - i * P;
        const long long t = ck.t0 + i;
        float           s = ck.last && i == n - 1 && A.dfinal_v.p != NULL
                                ? ldv(A.dfinal_v, o3(A.dfinal_v, ck.seq, h, p))
                                : 0.0f;
#pragma unroll 4
        for (int r = 0; r < R; ++r) s = fmaf(DU[(long long)(i * R + r) * P + p], ldv(A.mimo_v, o3(A.mimo_v, h, r, p)), s);
        if (A.dv.p != NULL) stv(A.dv, o4(A.dv, ck.b, t, h, p), s);
    }
    for (int e = threadIdx.x; e < R * P; e += blockDim.x) {
        const int r = e / P, p = e - r * P;
        float     s = 0.0f;
#pragma unroll 4
        for (int i = 0; i < n; ++i)
            s = fmaf(DU[(long long)(i * R + r) * P + p], ldv(A.v, o4(A.v, ck.b, ck.t0 + i, h, p)), s);
        A.p_mv[wh * R * P + e] = s;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < R * N; e += blockDim.x) {
        const int r = e / N, nn = e - r * N;
        float     sq = 0.0f, sk = 0.0f;
#pragma unroll 4
        for (int i = 0; i < n; ++i) {
            const long long o = ((((long long)ck.b * A.S + ck.t0 + i) * R + r) * A.H + h) * N + nn;
            sq += A.dqh[o];
            sk += A.dkh[o];
        }
        A.p_qb[wh * R * N + e] = sq;
        A.p_kb[wh * R * N + e] = sk;
    }
    /* the chunk's sum of raw dθ per angle, tokens in reverse (the angle pass, bwd_seq.cu) */
    for (int a = threadIdx.x; a < NA; a += blockDim.x) {
        float s = 0.0f;
#pragma unroll 4
        for (int i = n - 1; i >= 0; --i) s += A.dth[(tok + i) * NA + a];
        A.thc[wh * NA + a] = s;
    }
}

/* The largest shared-memory carveout, so that as many blocks share an SM as their registers and
 * static shared memory allow. */
ssm_status max_carveout(ssm_context * ctx, const char * op, const void * fn) {
    return ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute (carveout)",
                            cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                 (int)cudaSharedmemCarveoutMaxShared));
}

} // namespace

ssm_status launch_bwd_tiles(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s) {
    if (A.W == 0 || A.H == 0) return SSM_STATUS_OK;
    if (A.planes) {
        SSM_FORWARD_IF_ERROR(max_carveout(ctx, op, (const void *)tiles_kernel<true>));
        tiles_kernel<true><<<dim3((unsigned)A.W, (unsigned)A.H), kBwdThreads, 0, s>>>(A);
    } else {
        tiles_kernel<false><<<dim3((unsigned)A.W, (unsigned)A.H), kBwdThreads, 0, s>>>(A);
    }
    SSMI_CU_CHECK_LAUNCH(ctx, op, "tiles_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_bwd_chunk_grads(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s) {
    if (A.W == 0 || A.H == 0) return SSM_STATUS_OK;
    if (A.planes) {
        SSM_FORWARD_IF_ERROR(max_carveout(ctx, op, (const void *)grads_kernel<true>));
        grads_kernel<true><<<dim3((unsigned)A.W, (unsigned)A.H), kBwdThreads, 0, s>>>(A);
    } else {
        grads_kernel<false><<<dim3((unsigned)A.W, (unsigned)A.H), kBwdThreads, 0, s>>>(A);
    }
    SSMI_CU_CHECK_LAUNCH(ctx, op, "grads_kernel");
    return SSM_STATUS_OK;
}

} // namespace ssmi_mimo
