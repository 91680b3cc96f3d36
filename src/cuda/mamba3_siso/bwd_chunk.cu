/*
 * bwd_chunk.cu — the per-(chunk, head) kernels of the CUDA Mamba-3 SISO backward (spec §6.3), one
 * block of kBwdThreads per (chunk, head), plain fp32 through shared memory.
 *
 * Both kernels first load the chunk (load_chunk): the scalars that bwd_prep_kernel left in the
 * workspace, the biases, e^{c}, e^{c_last − c}, q̃ = q + q_bias and k̃ = k + k_bias, d = q̃·k̃, then
 * q̂ = R(θ)q̃ and k̂ = R(θ)k̃ in place (θ by theta_at), v, dy = dout ⊙ silu(z) and the dz factor.
 * Rows have odd leading dimensions (odd_ld), so a warp reading one column of consecutive rows
 * touches distinct banks.
 *
 * The products are register-tiled (tiles2): each thread computes TM×TN outputs at rows
 * tm + nTm·a and columns tn + nTn·b from shared-memory operands, every sum in the order of its inner
 * index, so the bytes do not depend on the grid. Row sums over K, V or the chunk go one warp per
 * row (warp_sum: lane-strided partials, then a fixed xor butterfly).
 *
 * bwd_chunk_sums_kernel: the chunk's state contribution Vcᵀ·diag(e^{c_last−c}·σ)·K̂ into st and
 * its state-gradient contribution dYᵀ·diag(e^c)·Q̂ into dst, and c_last; the passes of bwd_scan.cu
 * turn them into the state entering the chunk (S_c) and the carry dS of the chunk.
 *
 * bwd_chunk_grads_kernel, with S_c and dS (spec §6.3):
 *   Pm_ij = e^{c_i−c_j}·σ_j·(q̂_i·k̂_j), E_ij = e^{c_i−c_j}·(dy_i·v_j), W_ij = Pm_ij·(dy_i·v_j)  (i > j)
 *   dq̂ = diag(e^c)·dY·S_c + E·K̂s;   dK̂s = diag(e^{c_last−c})·Vc·dS + Eᵀ·Q̂
 *   dv = Pmᵀ·dY + diag(e^{c_last−c}·σ)·K̂·dSᵀ + diag(D + γ·d)·dY (+ dfinal_v_state at the end)
 *   y = diag(e^c)·Q̂·S_cᵀ + Pm·Vc + diag(D + γ·d)·Vc (for dz only)
 *   r_i = e^{c_i}·dy_i·(S_c q̂_i) + Σ_j W_ij − Σ_j W_ji,  m_j = e^{c_last−c_j}·σ_j·v_jᵀ·dS·k̂_j,
 *   μ = e^{c_last}·⟨S_c, dS⟩,  dadt_i = Σ_{i'≥i} r_i' + Σ_{j<i} m_j + μ
 *   (the readout and m reuse the inter-chunk parts of dq̂ and dK̂s, computed first)
 * then the preprocessing chain per token (spec §6.2): dσ = dK̂s·k̂, dk̂ = σ·dK̂s (+ dfinal_k_state at
 * the end), dθ from the rotated q̂, k̂ (dθ_p = −g_{2p}·x̂_{2p+1} + g_{2p+1}·x̂_{2p}), dq̃ = R(θ)ᵀdq̂ +
 * dQK·γ·k̃, dk̃ = R(θ)ᵀdk̂ + dQK·γ·q̃, dγ = dQK·d + dσ. Writes dv, dz, dadt, and into the workspace
 * dq̃, dk̃ (per V-head), dθ, dσ, dγ, and the chunk's sums of dq̃, dk̃, dQK (bias and dd partials)
 * and dθ (the angle carry of bwd_scan.cu).
 * STAGED: S_c and dS are copied into shared memory by cp.async, issued first and waited for only
 * where the products need them (behind the chunk's loads and the first products); otherwise (a
 * state too large for shared memory) the products read them from global memory.
 * The chunk's inputs are read by load_rows (typed loads, a batch per thread in flight); q̃, k̃ of
 * the chain are q̂, k̂ rotated back, so the chain reads no inputs again.
 */
#include "bwd.cuh"

using namespace ssmi_siso;

namespace ssmi_siso_bwd {

namespace {

static_assert(kFmaChunk <= kBwdMaxChunk, "the dadt scan covers the chunk");
static_assert(kBwdThreads % 32 == 0, "whole warps");

/* A chunk's shared memory (chunk_smem_floats). */
struct bw_smem {
    float *dt, *lam, *gam, *sig, *cm, *ec, *wl, *dqk, *dQK, *rr, *mm, *dsg; /* C each */
    float *red;                                                        /* kBwdThreads */
    float *bq, *bk;                                                    /* K each */
    float *qh, *kh, *v, *dy;                                           /* C rows of LK, LK, LV, LV */
    float *dqh, *dks, *pm, *ee, *ww, *gz, *sb, *sd; /* C×LK ×2, C×LC ×3, C×LV, V×LK ×2 */
    int    LK, LV, LC;
};

__device__ inline bw_smem carve(float * base, int C, int K, int V, bool grads, bool staged) {
    bw_smem s;
    float * o = base;
    s.LK = odd_ld(K), s.LV = odd_ld(V), s.LC = odd_ld(C);
    float ** rows[kScal] = {&s.dt, &s.lam, &s.gam, &s.sig, &s.cm, &s.ec, &s.wl, &s.dqk, &s.dQK, &s.rr, &s.mm, &s.dsg};
    for (int i = 0; i < kScal; ++i) *rows[i] = o, o += C;
    s.red = o, o += kBwdThreads;
    s.bq = o, o += K;
    s.bk = o, o += K;
    s.qh = o, o += C * s.LK;
    s.kh = o, o += C * s.LK;
    s.v = o, o += C * s.LV;
    s.dy = o, o += C * s.LV;
    s.dqh = s.dks = s.pm = s.ee = s.ww = s.gz = s.sb = s.sd = nullptr;
    if (grads) {
        s.dqh = o, o += C * s.LK;
        s.dks = o, o += C * s.LK;
        s.pm = o, o += C * s.LC;
        s.ee = o, o += C * s.LC;
        s.ww = o, o += C * s.LC;
        s.gz = o, o += C * s.LV;
        if (staged) {
            s.sb = o, o += V * s.LK;
            s.sd = o;
        }
    }
    return s;
}

/* out(m, n, a1, a2) for every m < M, n < N, with a1 = Σ_{k<K1} fa1(m, k)·fb1(n, k) and
 * a2 = Σ_{k<K2} fa2(m, k)·fb2(n, k), each sum in k order. A thread computes TM×TN outputs at rows
 * tm + nTm·a and columns tn + nTn·b; the lanes of a warp take consecutive tiles (consecutive tn),
 * so their operand rows are consecutive (distinct banks with an odd leading dimension) or shared
 * (a broadcast). Reads past M or N are clamped to the last row (their outputs are dropped).
 * LOWER: only the outputs with n < m are needed: a thread takes the block of rows tm·TM + a and
 * columns tn·TN + b, and a block with no n < m skips the sums (out gets zeros there). */
template <int TM, int TN, bool LOWER = false, class FA1, class FB1, class FA2, class FB2, class FO>
__device__ __forceinline__ void tiles2(int M, int N, int K1, FA1 fa1, FB1 fb1, int K2, FA2 fa2, FB2 fb2, FO out) {
    const int nTm = (M + TM - 1) / TM, nTn = (N + TN - 1) / TN;
    for (int t = threadIdx.x; t < nTm * nTn; t += blockDim.x) {
        const int tm = t / nTn, tn = t - tm * nTn;
        const int m0 = LOWER ? tm * TM : tm, dm = LOWER ? 1 : nTm; /* row a: m0 + dm·a */
        const int n0 = LOWER ? tn * TN : tn, dn = LOWER ? 1 : nTn; /* column b: n0 + dn·b */
        const bool any = !LOWER || n0 < m0 + TM - 1;
        const int  k1 = any ? K1 : 0, k2 = any ? K2 : 0;
        int        mi[TM], ni[TN];
#pragma unroll
        for (int a = 0; a < TM; ++a) mi[a] = min(m0 + dm * a, M - 1);
#pragma unroll
        for (int b = 0; b < TN; ++b) ni[b] = min(n0 + dn * b, N - 1);
        float a1[TM][TN], a2[TM][TN];
#pragma unroll
        for (int a = 0; a < TM; ++a)
#pragma unroll
            for (int b = 0; b < TN; ++b) a1[a][b] = 0.0f, a2[a][b] = 0.0f;
#pragma unroll 4
        for (int k = 0; k < k1; ++k) {
            float x[TM], y[TN];
#pragma unroll
            for (int a = 0; a < TM; ++a) x[a] = fa1(mi[a], k);
#pragma unroll
            for (int b = 0; b < TN; ++b) y[b] = fb1(ni[b], k);
#pragma unroll
            for (int a = 0; a < TM; ++a)
#pragma unroll
                for (int b = 0; b < TN; ++b) a1[a][b] = fmaf(x[a], y[b], a1[a][b]);
        }
#pragma unroll 4
        for (int k = 0; k < k2; ++k) {
            float x[TM], y[TN];
#pragma unroll
            for (int a = 0; a < TM; ++a) x[a] = fa2(mi[a], k);
#pragma unroll
            for (int b = 0; b < TN; ++b) y[b] = fb2(ni[b], k);
#pragma unroll
            for (int a = 0; a < TM; ++a)
#pragma unroll
                for (int b = 0; b < TN; ++b) a2[a][b] = fmaf(x[a], y[b], a2[a][b]);
        }
#pragma unroll
        for (int a = 0; a < TM; ++a)
#pragma unroll
            for (int b = 0; b < TN; ++b) {
                const int m = m0 + dm * a, n = n0 + dn * b;
                if (m < M && n < N) out(m, n, a1[a][b], a2[a][b]);
            }
    }
}

/* The chunk's scalars, q̂, k̂ (and d), v, dy and (gz not null) the dz factor
 * dout·sigmoid(z)·(1 + z·(1 − sigmoid(z))) into shared memory; returns c_last. */
__device__ float load_chunk(const bw_args & P, int w, const bw_chunk & ch, int h, const bw_smem & s) {
    const int L = ch.len, K = P.K, V = P.V, A = P.A, g = h / P.G, tid = threadIdx.x, nt = blockDim.x;
    const int LK = s.LK, LV = s.LV, lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
    for (int i = tid; i < L; i += nt) {
        const float * sc = P.sc + ((ch.tok + i) * P.H + h) * kScalWs;
        s.dt[i] = sc[0], s.lam[i] = sc[1], s.gam[i] = sc[2], s.sig[i] = sc[3], s.cm[i] = sc[4];
    }
    for (int c = tid; c < K; c += nt) s.bq[c] = ld2(P.qb, h, c), s.bk[c] = ld2(P.kb, h, c);
    float *qh = s.qh, *kh = s.kh, *v = s.v, *dy = s.dy, *gz = s.gz;
    load_rows(P.q, ch.row, ch.t0, g, L, K, [=](int i, int c, float x) { qh[i * LK + c] = x; });
    load_rows(P.k, ch.row, ch.t0, g, L, K, [=](int i, int c, float x) { kh[i * LK + c] = x; });
    load_rows(P.v, ch.row, ch.t0, h, L, V, [=](int i, int r, float x) { v[i * LV + r] = x; });
    load_rows(P.dout, ch.row, ch.t0, h, L, V, [=](int i, int r, float x) { dy[i * LV + r] = x; });
    if (P.has_z) /* the same thread mapping as dout's: each thread reads back its own dy */
        load_rows(P.z, ch.row, ch.t0, h, L, V, [=](int i, int r, float z) {
            const float dO = dy[i * LV + r], sg = ssmi_math::sigmoid(z);
            dy[i * LV + r] = dO * z * sg;
            if (gz != nullptr) gz[i * LV + r] = dO * sg * (1.0f + z * (1.0f - sg));
        });
    __syncthreads();
    const float cl = s.cm[L - 1];
    for (int i = tid; i < L; i += nt) {
        s.ec[i] = expf(s.cm[i]);
        s.wl[i] = expf(cl - s.cm[i]);
    }
    /* q̃ = q + q_bias, k̃ = k + k_bias in place and d = q̃·k̃, a warp per row */
    for (int i = warp; i < L; i += nw) {
        float a = 0.0f;
        for (int c = lane; c < K; c += 32) {
            const float q = qh[i * LK + c] + s.bq[c], k = kh[i * LK + c] + s.bk[c];
            qh[i * LK + c] = q, kh[i * LK + c] = k;
            a += q * k;
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
        if (lane == 0) s.dqk[i] = a;
    }
    __syncthreads();
    const int K2 = K / 2;
    for (int e = tid; e < L * K2; e += nt) {
        const int i = e / K2, p = e - i * K2;
        if (p >= A) continue;
        float sn, cs;
        sincosf(theta_at(P, w, h, ch.tok + i, p), &sn, &cs);
        float *     q = qh + i * LK + 2 * p, *k = kh + i * LK + 2 * p;
        const float q0 = q[0], q1 = q[1], k0 = k[0], k1 = k[1];
        q[0] = q0 * cs - q1 * sn, q[1] = q0 * sn + q1 * cs;
        k[0] = k0 * cs - k1 * sn, k[1] = k0 * sn + k1 * cs;
    }
    __syncthreads();
    return cl;
}

__global__ void __launch_bounds__(kBwdThreads) bwd_chunk_sums_kernel(const bw_args P) {
    extern __shared__ float smem[];
    const int      w = blockIdx.x, h = blockIdx.y;
    const bw_chunk ch = P.chunks[w];
    const bw_smem  s = carve(smem, P.C, P.K, P.V, false, false);
    const float    cl = load_chunk(P, w, ch, h, s);
    const int      L = ch.len, K = P.K, V = P.V, VK = V * K, LK = s.LK, LV = s.LV;
    /* k̂ ← e^{c_last−c}·σ·k̂ and q̂ ← e^c·q̂ per row (this kernel needs them only scaled) */
    for (int e = threadIdx.x; e < L * K; e += blockDim.x) {
        const int i = e / K, c = e - i * K;
        s.kh[i * LK + c] *= s.wl[i] * s.sig[i];
        s.qh[i * LK + c] *= s.ec[i];
    }
    __syncthreads();
    float * st = P.st + ((long long)w * P.H + h) * VK;
    float * dst = P.dst + ((long long)w * P.H + h) * VK;
    const float *v = s.v, *dy = s.dy, *kh = s.kh, *qh = s.qh;
    /* st[r][c] = Σ_i v[i][r]·k̂w[i][c], dst[r][c] = Σ_i dy[i][r]·q̂e[i][c] */
    tiles2<4, 4>(
        V, K, L, [=](int r, int i) { return v[i * LV + r]; }, [=](int c, int i) { return kh[i * LK + c]; }, L,
        [=](int r, int i) { return dy[i * LV + r]; }, [=](int c, int i) { return qh[i * LK + c]; },
        [=](int r, int c, float a, float b) {
            st[r * K + c] = a;
            dst[r * K + c] = b;
        });
    if (threadIdx.x == 0) P.cl[(long long)w * P.H + h] = cl;
}

template <bool STAGED>
__global__ void __launch_bounds__(kBwdThreads) bwd_chunk_grads_kernel(const bw_args P) {
    extern __shared__ float smem[];
    const int      w = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, nt = blockDim.x;
    const int      lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
    const bw_chunk ch = P.chunks[w];
    const bw_smem  s = carve(smem, P.C, P.K, P.V, true, STAGED);
    const float *  Sc = P.st + ((long long)w * P.H + h) * P.V * P.K;  /* state entering the chunk */
    const float *  dS = P.dst + ((long long)w * P.H + h) * P.V * P.K; /* the carry of the chunk   */
    if (STAGED) { /* S_c and dS into shared memory behind the chunk's loads and the first products */
        for (int e = tid; e < P.V * P.K; e += nt) {
            const int r = e / P.K, c = e - r * P.K;
            cp_async4(s.sb + r * s.LK + c, Sc + e);
        }
        cp_async_commit();
        for (int e = tid; e < P.V * P.K; e += nt) {
            const int r = e / P.K, c = e - r * P.K;
            cp_async4(s.sd + r * s.LK + c, dS + e);
        }
        cp_async_commit();
    }
    const float    cl = load_chunk(P, w, ch, h, s);
    const int      L = ch.len, K = P.K, V = P.V, VK = V * K;
    const int      LK = s.LK, LV = s.LV, LC = s.LC;
    const float    dskip = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, (long long)h * P.d.s[0]) : 0.0f;
    const bool     seq_end = ch.last != 0;
    const float *qh = s.qh, *kh = s.kh, *v = s.v, *dy = s.dy, *sig = s.sig, *cm = s.cm;
    float *      dqh = s.dqh, *dks = s.dks, *pm = s.pm, *ee = s.ee, *ww = s.ww;
    /* the state operand of the products: sb (staged) or global memory, rows of lsb */
    const float * sta = STAGED ? s.sb : Sc;
    const int     lsb = STAGED ? LK : K;

    /* Pm, E, W (strictly lower; rows and columns < L) */
    tiles2<2, 2, true>(
        L, L, K, [=](int i, int c) { return qh[i * LK + c]; }, [=](int j, int c) { return kh[j * LK + c]; }, V,
        [=](int i, int r) { return dy[i * LV + r]; }, [=](int j, int r) { return v[j * LV + r]; },
        [=](int i, int j, float qk, float dv) {
            float a = 0.0f, b = 0.0f, c = 0.0f;
            if (j < i) {
                const float dec = expf(cm[i] - cm[j]);
                a = dec * sig[j] * qk;
                b = dec * dv;
                c = a * dv;
            }
            pm[i * LC + j] = a, ee[i * LC + j] = b, ww[i * LC + j] = c;
        });
    /* dQK_i = dy_i·v_i */
    for (int i = warp; i < L; i += nw) {
        const float a = warp_sum(V, [=](int r) { return dy[i * LV + r] * v[i * LV + r]; });
        if (lane == 0) s.dQK[i] = a;
    }
    if (STAGED) cp_async_wait_group<1>(); /* this thread's copies of S_c */
    __syncthreads();

    /* the inter-chunk part of dq̂: e^{c_i}·Σ_r dy[i][r]·S_c[r][c]; dz */
    {
        const float * sa = sta;
        const float * ec = s.ec;
        tiles2<4, 4>(
            L, K, V, [=](int i, int r) { return dy[i * LV + r]; }, [=](int c, int r) { return sa[r * lsb + c]; }, 0,
            [=](int, int) { return 0.0f; }, [=](int, int) { return 0.0f; },
            [=](int i, int c, float a, float) { dqh[i * LK + c] = ec[i] * a; });
    }
    const bool want_dv = P.dv.present != 0, want_dz = P.dz.present != 0 && P.has_z;
    if (want_dz) {
        const float * sa = sta;
        const float * ec = s.ec;
        const float * gam = s.gam;
        const float * dqk = s.dqk;
        /* y[j][r] = e^{c_j}·Σ_c S_c[r][c]·q̂[j][c] + Σ_{i<j} Pm[j][i]·v[i][r] + (D + γ_j d_j)·v[j][r] */
        tiles2<2, 4>(
            L, V, K, [=](int j, int c) { return qh[j * LK + c]; }, [=](int r, int c) { return sa[r * lsb + c]; }, L,
            [=](int j, int i) { return pm[j * LC + i]; }, [=](int r, int i) { return v[i * LV + r]; },
            [&](int j, int r, float a, float b) {
                const float y = ec[j] * a + b + (dskip + gam[j] * dqk[j]) * v[j * LV + r];
                st4(P.dz, ch.row, ch.t0 + j, h, r, y * s.gz[j * LV + r]);
            });
    }
    __syncthreads();

    /* r_i without the intra part of dq̂ (readout + W rows − W columns); then μ partials */
    for (int i = warp; i < L; i += nw) {
        const float ro = warp_sum(K, [=](int c) { return qh[i * LK + c] * dqh[i * LK + c]; });
        const float rw = warp_sum(i, [=](int j) { return ww[i * LC + j]; });
        const float cw = warp_sum(L - 1 - i, [=](int u) { return ww[(i + 1 + u) * LC + i]; });
        if (lane == 0) s.rr[i] = ro + rw - cw;
    }
    if (STAGED) cp_async_wait_group<0>(); /* this thread's copies of dS */
    __syncthreads();
    {
        float a = 0.0f;
        for (int e = tid; e < VK; e += nt) {
            if (STAGED) {
                const int r = e / K, c = e - r * K;
                a += s.sb[r * LK + c] * s.sd[r * LK + c];
            } else {
                a += Sc[e] * dS[e];
            }
        }
        s.red[tid] = a;
    }

    /* the inter-chunk part of dK̂s: e^{c_last−c_i}·Σ_r v[i][r]·dS[r][c]; dv */
    {
        const float * sa = STAGED ? s.sd : dS;
        const float * wl = s.wl;
        tiles2<4, 4>(
            L, K, V, [=](int i, int r) { return v[i * LV + r]; }, [=](int c, int r) { return sa[r * lsb + c]; }, 0,
            [=](int, int) { return 0.0f; }, [=](int, int) { return 0.0f; },
            [=](int i, int c, float a, float) { dks[i * LK + c] = wl[i] * a; });
        if (want_dv) {
            const float * gam = s.gam;
            const float * dqk = s.dqk;
            /* dv[j][r] = e^{c_last−c_j}σ_j·Σ_c dS[r][c]·k̂[j][c] + Σ_{i>j} Pm[i][j]·dy[i][r]
             *            + (D + γ_j d_j)·dy[j][r] */
            tiles2<2, 4>(
                L, V, K, [=](int j, int c) { return kh[j * LK + c]; }, [=](int r, int c) { return sa[r * lsb + c]; },
                L, [=](int j, int i) { return pm[i * LC + j]; }, [=](int r, int i) { return dy[i * LV + r]; },
                [&](int j, int r, float b, float a) {
                    float dv = a + wl[j] * sig[j] * b + (dskip + gam[j] * dqk[j]) * dy[j * LV + r];
                    if (seq_end && j == L - 1 && P.has_dfv) dv += ld3(P.dfv, ch.seq, h, r);
                    st4(P.dv, ch.row, ch.t0 + j, h, r, dv);
                });
        }
    }
    __syncthreads();

    /* m_i = σ_i·k̂_i·(inter dK̂s)_i */
    for (int i = warp; i < L; i += nw) {
        const float mk = warp_sum(K, [=](int c) { return kh[i * LK + c] * dks[i * LK + c]; });
        if (lane == 0) s.mm[i] = sig[i] * mk;
    }
    __syncthreads();

    /* the intra-chunk parts: dq̂[i] += Σ_{j<i} E[i][j]·σ_j·k̂[j], dK̂s[j] += Σ_{i>j} E[i][j]·q̂[i]
     * (E is 0 on and above the diagonal) */
    tiles2<4, 4>(
        L, K, L, [=](int i, int j) { return ee[i * LC + j] * sig[j]; }, [=](int c, int j) { return kh[j * LK + c]; },
        0, [=](int, int) { return 0.0f; }, [=](int, int) { return 0.0f; },
        [=](int i, int c, float a, float) { dqh[i * LK + c] += a; });
    tiles2<4, 4>(
        L, K, L, [=](int j, int i) { return ee[i * LC + j]; }, [=](int c, int i) { return qh[i * LK + c]; }, 0,
        [=](int, int) { return 0.0f; }, [=](int, int) { return 0.0f; },
        [=](int j, int c, float a, float) { dks[j * LK + c] += a; });
    __syncthreads();

    /* dσ, dγ per token (a warp per token) */
    for (int i = warp; i < L; i += nw) {
        const float a = warp_sum(K, [=](int c) { return dks[i * LK + c] * kh[i * LK + c]; });
        if (lane == 0) {
            s.dsg[i] = a;
            const long long o = (ch.tok + i) * P.H + h;
            P.dsg[o] = a;
            P.dgm[o] = s.dQK[i] * s.dqk[i] + a;
        }
    }
    /* warp 0: μ, dadt, the dd partial */
    if (warp == 0) dadt_tail(P, ch, h, (long long)w * P.H + h, L, cl, s.red, kBwdThreads / 32, s.mm, s.rr, s.dQK);
    __syncthreads();

    /* the chain per (token, pair): dk̂, dθ, dq̃, dk̃; q̃, k̃ of the pair are q̂, k̂ rotated back
     * (unrotated pairs are q̃, k̃ themselves) */
    const int K2 = K / 2;
    for (int e = tid; e < L * K2; e += nt) {
        const int i = e / K2, p = e - i * K2, c0 = 2 * p;
        float2    f = make_float2(dqh[i * LK + c0], dqh[i * LK + c0 + 1]);
        float2    gk = make_float2(dks[i * LK + c0], dks[i * LK + c0 + 1]);
        chain_pair<false>(P, ch, h, i, p, seq_end && i == L - 1 && P.has_dfk, sig[i], s.dQK[i] * s.gam[i],
                          p < P.A ? theta_at(P, w, h, ch.tok + i, p) : 0.0f,
                          make_float2(qh[i * LK + c0], qh[i * LK + c0 + 1]),
                          make_float2(kh[i * LK + c0], kh[i * LK + c0 + 1]), f, gk, (ch.tok + i) * P.H + h,
                          make_float2(0.0f, 0.0f), make_float2(0.0f, 0.0f)); /* a part per head (qparts = G) */
        /* each thread owns its pair: the chunk sums below read them back */
        dqh[i * LK + c0] = f.x, dqh[i * LK + c0 + 1] = f.y;
        dks[i * LK + c0] = gk.x, dks[i * LK + c0 + 1] = gk.y;
    }
    __syncthreads();
    chain_sums(P, ch, h, (long long)w * P.H + h, L, dqh, dks, LK);
}

} /* namespace */

ssm_status launch_bwd_chunk(ssm_context * ctx, const char * op, const bw_args & P, bool grads) {
    if (P.planes) return launch_bwd_chunk_planes(ctx, op, P, grads);
    const size_t bytes = sizeof(float) * (size_t)chunk_smem_floats(P.C, P.K, P.V, grads, P.staged != 0);
    const dim3   grid((unsigned)P.W, (unsigned)P.H);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    if (grads) {
        void (*kern)(const bw_args) = P.staged ? bwd_chunk_grads_kernel<true> : bwd_chunk_grads_kernel<false>;
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
            ctx, op, "cudaFuncSetAttribute (bwd_chunk_grads_kernel)",
            cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)));
        kern<<<grid, kBwdThreads, bytes, s>>>(P);
        return ssmi_cuda_status(ctx, op, "bwd_chunk_grads_kernel launch", cudaGetLastError());
    }
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
        ctx, op, "cudaFuncSetAttribute (bwd_chunk_sums_kernel)",
        cudaFuncSetAttribute(bwd_chunk_sums_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)));
    bwd_chunk_sums_kernel<<<grid, kBwdThreads, bytes, s>>>(P);
    return ssmi_cuda_status(ctx, op, "bwd_chunk_sums_kernel launch", cudaGetLastError());
}

} /* namespace ssmi_siso_bwd */
