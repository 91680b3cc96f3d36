/*
 * bwd_chunk_planes.cu — the per-(chunk, head) kernels of the CUDA Mamba-3 SISO backward for 16-bit
 * q, k and v (entry chunked_planes): the same math as bwd_chunk.cu's bwd_chunk_sums_kernel and
 * bwd_chunk_grads_kernel (its head comment has the formulas, spec §6.3), with every product on the
 * tensor cores. One block of kPlanesThreads threads per (chunk, head); chunks of planes_chunk
 * tokens (64, or 32 where the gradient kernel's planes do not fit).
 *
 * Every product operand is written once into shared memory as bf16 planes (planes_geom): q̂, k̂
 * (after the biases and the rotation), dy = dout ⊙ silu(z), S_c, dS and the [C][C] tables Pm and
 * Es = E·diag(σ) as a rounded plane and a remainder plane (split2), v as one exact plane where it
 * is bf16 (else split too), so a product of two split operands is three bf16 products (lo·lo,
 * ~2^-16 relative, dropped). Warps compute 16 × 16 output tiles by ldmatrix + mma.sync m16n8k16
 * with fp32 accumulators (tile_mma); the epilogues (row scales, the i > j masks, the per-tile row
 * and column sums, the chain, the stores) run on the accumulators in registers. Every sum has a
 * fixed order (k ascending in steps of 16, fixed shuffle trees, per-tile partials summed in tile
 * order), so the bytes depend on neither the run nor the grid.
 *
 * bwd_chunk_planes_sums_kernel: load (q̂ scaled by e^c, k̂ by e^{c_last−c}·σ), then per (r, c) tile
 *   st = Vᵀ·K̂w and dst = dYᵀ·Q̂e (the chunk's tokens as the inner dimension), and c_last.
 * bwd_chunk_planes_grads_kernel:
 *   load  scalars, q̂, k̂, v, dy (the first loads of S_c and dS issued before them)
 *   A1    per (i, j) tile on or below the diagonal: Q̂·K̂ᵀ and dY·Vᵀ → Pm, Es planes; d = q̂·k̂ and
 *         dQK = dy·v (the diagonals); the row sums of W = Pm ⊙ (dY·Vᵀ) and the column sums of
 *         Z = e^{c_i−c_j}·(dy_i·v_j)·(q̂_i·k̂_j) (i > j) as per-tile partials; then the S_c and dS
 *         planes and the μ partials
 *   A2    per (i, c) tile pair: e^{c}·dY·S_c → readout partials, + Es·K̂ → dq̂; e^{c_last−c}·V·dS →
 *         m partials, ·σ + Esᵀ·Q̂ → dk̂ = σ·dK̂s; then the chain per (token, pair) on the
 *         accumulators (dθ, dq̃, dk̃ into the workspace) and their per-tile column sums;
 *         per (j, r): e^{c_last−c}·σ·K̂·dSᵀ + Pmᵀ·dY + (D + γd)·dy → dv;
 *         per (j, r) (dz): e^{c}·Q̂·S_cᵀ + Pm·V + (D + γd)·v → y, dz = y·dout·σ(z)(1 + z(1 − σ(z)))
 *   B     per token r = readout + Σ_j W_ij − σ_i·Σ_u Z_ui, m = σ·(m partials), dσ = (m partials) +
 *         Σ_u Z_ui (the intra part of dK̂s·k̂), dγ; the chunk sums of dq̃, dk̃, dθ; warp 0: μ and
 *         the dadt scan.
 */
#include "bwd.cuh"

using namespace ssmi_siso;

namespace ssmi_siso_bwd {

namespace {

static_assert(kBwdMaxChunk <= 64, "the dadt scan: two tokens per lane");
static_assert(kBwdMaxChunk % 32 == 0, "both chunk lengths are whole 16-token tiles");

/* The planes and fp32 areas of a block's shared memory. */
struct pl_smem {
    bf16 * qh, *ql, *kh, *kl, *vh, *vl, *dyh, *dyl;
    bf16 * sh, *sl, *dh, *dl, *pmh, *pml, *esh, *esl;
    float *rpart, *mpart, *wrow, *zcol, *qpart, *kpart, *tpart, *red, *bq, *bk;
    float *sig, *gam, *cm, *ec, *wl, *dqk, *dQK, *rr, *mm; /* planes_geom::kVec rows of cp */
};

__device__ inline pl_smem carve_planes(unsigned char * sm, const planes_geom & g, bool grads) {
    pl_smem s;
    s.qh = (bf16 *)(sm + g.qh), s.ql = (bf16 *)(sm + g.ql), s.kh = (bf16 *)(sm + g.kh), s.kl = (bf16 *)(sm + g.kl);
    s.vh = (bf16 *)(sm + g.vh), s.vl = (bf16 *)(sm + g.vl), s.dyh = (bf16 *)(sm + g.dyh), s.dyl = (bf16 *)(sm + g.dyl);
    float *  v = (float *)(sm + g.vec);
    float ** rows[planes_geom::kVec] = {&s.sig, &s.gam, &s.cm, &s.ec, &s.wl, &s.dqk, &s.dQK, &s.rr, &s.mm};
    for (int i = 0; i < planes_geom::kVec; ++i) *rows[i] = v + i * g.cp;
    s.bq = (float *)(sm + g.bias), s.bk = s.bq + g.kp;
    s.red = (float *)(sm + g.red);
    s.sh = s.sl = s.dh = s.dl = s.pmh = s.pml = s.esh = s.esl = nullptr;
    s.rpart = s.mpart = s.wrow = s.zcol = s.qpart = s.kpart = s.tpart = nullptr;
    if (grads) {
        s.sh = (bf16 *)(sm + g.sh), s.sl = (bf16 *)(sm + g.sl), s.dh = (bf16 *)(sm + g.dh), s.dl = (bf16 *)(sm + g.dl);
        s.pmh = (bf16 *)(sm + g.pmh), s.pml = (bf16 *)(sm + g.pml);
        s.esh = (bf16 *)(sm + g.esh), s.esl = (bf16 *)(sm + g.esl);
        s.rpart = (float *)(sm + g.rpart), s.mpart = (float *)(sm + g.mpart);
        s.wrow = (float *)(sm + g.wrow), s.zcol = (float *)(sm + g.zcol);
        s.qpart = (float *)(sm + g.qpart), s.kpart = (float *)(sm + g.kpart), s.tpart = (float *)(sm + g.tpart);
    }
    return s;
}

/* Sum over the 8 lanes of a warp that share l % 4 (the lanes holding one accumulator column), a
 * fixed xor tree; every lane of the group ends with the same bytes. */
__device__ __forceinline__ float col_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    return v + __shfl_xor_sync(0xffffffffu, v, 16);
}

/* A bf16 view or output (X: ssmi_cu_view, m3_out) whose pairs of columns (2p, 2p + 1) are aligned
 * 4-byte words: unit inner stride, even outer strides, a 4-byte aligned base (uniform over the grid). */
template <class X>
__device__ __forceinline__ bool bf16_pairs(const X & x) {
    return x.dtype == SSM_DTYPE_BF16 && x.s[3] == 1 && ((x.s[0] | x.s[1] | x.s[2]) & 1) == 0 &&
           ((uintptr_t)x.p & 3) == 0;
}

/* The loads of one batch of load_qk: the q and k pairs (columns 2p, 2p + 1 of token i) and the θ
 * terms of jobs e0 + u·blockDim.x (job 0 past n), (i, p) walked from `at`. T = __nv_bfloat162: q
 * and k bf16, each pair one aligned 4-byte load (bf16_pairs); void: any dtypes and strides,
 * ssmi_cu_ld each (the same values). */
template <typename T, int B>
__device__ __forceinline__ void qk_fetch(float2 (&qv)[B], float2 (&kv)[B], float (&tv)[B], const ssmi_cu_view & q,
                                         const ssmi_cu_view & k, long long qb, long long kb, const float * thb,
                                         const float * th, long long HA, int A, int e0, int n, grid_walk at) {
    const int nt = blockDim.x;
#pragma unroll
    for (int u = 0; u < B; ++u, at.next()) {
        const bool      in = e0 + u * nt < n;
        const int       i = in ? at.i : 0, p = in ? at.c : 0, c = 2 * p;
        const long long qo = qb + i * q.s[1] + c * q.s[3], ko = kb + i * k.s[1] + c * k.s[3];
        if constexpr (std::is_void<T>::value) {
            qv[u] = make_float2(ssmi_cu_ld(q.p, q.dtype, qo), ssmi_cu_ld(q.p, q.dtype, qo + q.s[3]));
            kv[u] = make_float2(ssmi_cu_ld(k.p, k.dtype, ko), ssmi_cu_ld(k.p, k.dtype, ko + k.s[3]));
        } else {
            static_assert(std::is_same<T, __nv_bfloat162>::value, "pairs of bf16");
            qv[u] = __bfloat1622float2(*reinterpret_cast<const T *>((const __nv_bfloat16 *)q.p + qo));
            kv[u] = __bfloat1622float2(*reinterpret_cast<const T *>((const __nv_bfloat16 *)k.p + ko));
        }
        tv[u] = p < A ? thb[p] + th[i * HA + p] : 0.0f;
    }
}

/* q̂ and k̂ of the chunk into their split planes, a job per (token, pair): q̃ = q + q_bias and
 * k̃ = k + k_bias, rotated by θ (theta_at) for pairs p < A and (SCALED) times e^c and
 * e^{c_last−c}·σ; a thread issues the loads of kPairBatch jobs before it uses them (a larger
 * batch spills: the sums kernel has 64 registers, the gradient kernel's products use all of its
 * 128), one 4-byte load per pair where q and k allow it (bf16_pairs, uniform over the grid). The
 * thread's (token, pair) of job e = i·K/2 + p is walked (grid_walk), not divided out per job.
 * Needs the biases and the scalars in shared memory. */
template <bool SCALED>
__device__ __forceinline__ void load_qk(const bw_args & P, int K, int w, const bw_chunk & ch, int h,
                                        const planes_geom & g, const pl_smem & s) {
    constexpr int        kPairBatch = 4;
    const int            K2 = K / 2, A = P.A, n = ch.len * K2, nt = blockDim.x, grp = h / P.G, lk = g.lk;
    const ssmi_cu_view & q = P.q, &k = P.k;
    const long long      qb = ch.row * q.s[0] + ch.t0 * q.s[1] + grp * q.s[2];
    const long long      kb = ch.row * k.s[0] + ch.t0 * k.s[1] + grp * k.s[2];
    const long long      HA = (long long)P.H * A;
    const float *        thb = P.thb + ((long long)w * P.H + h) * A, *th = P.th + (ch.tok * P.H + h) * A;
    const bool           pairs = bf16_pairs(q) && bf16_pairs(k);
    if ((int)threadIdx.x >= n) return; /* also keeps K2 > 0 for the walk */
    grid_walk at(threadIdx.x, nt, K2);
    for (int e0 = threadIdx.x; e0 < n; e0 += kPairBatch * nt) {
        float2 qv[kPairBatch], kv[kPairBatch];
        float  tv[kPairBatch];
        if (pairs)
            qk_fetch<__nv_bfloat162>(qv, kv, tv, q, k, qb, kb, thb, th, HA, A, e0, n, at);
        else
            qk_fetch<void>(qv, kv, tv, q, k, qb, kb, thb, th, HA, A, e0, n, at);
#pragma unroll
        for (int u = 0; u < kPairBatch; ++u, at.next()) {
            const int i = at.i, p = at.c, c = 2 * p;
            if (e0 + u * nt >= n) continue;
            float q0 = qv[u].x + s.bq[c], q1 = qv[u].y + s.bq[c + 1];
            float k0 = kv[u].x + s.bk[c], k1 = kv[u].y + s.bk[c + 1];
            if (p < A) {
                float sn, cs;
                theta_sincos(tv[u], &sn, &cs); /* theta_at */
                const float2 x = rotate_pair(q0, q1, sn, cs), y = rotate_pair(k0, k1, sn, cs);
                q0 = x.x, q1 = x.y, k0 = y.x, k1 = y.y;
            }
            if (SCALED) {
                const float fq = s.ec[i], fk = s.wl[i] * s.sig[i];
                q0 *= fq, q1 *= fq, k0 *= fk, k1 *= fk;
            }
            split_pair(q0, q1, s.qh, s.ql, i * lk + c);
            split_pair(k0, k1, s.kh, s.kl, i * lk + c);
        }
    }
}

/* f(i, c, a) for the column pairs c = 0, 2, … < cols of rows i < rows of NV bf16 views x[v]
 * (bf16_pairs each, cols even) at (row, t0 + i, hh): a[v] = x[v][…, c] and x[v][…, c + 1], one
 * 4-byte load each (the values of ssmi_cu_ld); thread e mod blockDim.x takes pair e, a batch of
 * kLoadBatch / 2 pairs' loads first. */
template <int NV, class F>
__device__ __forceinline__ void rows_pairs(const ssmi_cu_view * const (&x)[NV], long long row, long long t0,
                                           long long hh, int rows, int cols, F f) {
    constexpr int         kBatch = kLoadBatch / 2;
    const int             w2 = cols / 2, n = rows * w2, nt = blockDim.x;
    const __nv_bfloat16 * base[NV];
    long long             s1[NV];
#pragma unroll
    for (int v = 0; v < NV; ++v)
        base[v] = (const __nv_bfloat16 *)x[v]->p + row * x[v]->s[0] + t0 * x[v]->s[1] + hh * x[v]->s[2],
        s1[v] = x[v]->s[1];
    if ((int)threadIdx.x >= n) return; /* also keeps w2 > 0 for the walk */
    grid_walk at(threadIdx.x, nt, w2);
    for (int e0 = threadIdx.x; e0 < n; e0 += kBatch * nt) {
        __nv_bfloat162 b[kBatch][NV];
        grid_walk      ld = at;
#pragma unroll
        for (int u = 0; u < kBatch; ++u, ld.next())
#pragma unroll
            for (int v = 0; v < NV; ++v)
                b[u][v] = *reinterpret_cast<const __nv_bfloat162 *>(
                    base[v] + (e0 + u * nt < n ? ld.i * s1[v] + 2 * ld.c : 0));
#pragma unroll
        for (int u = 0; u < kBatch; ++u, at.next()) {
            if (e0 + u * nt >= n) continue;
            float2 a[NV];
#pragma unroll
            for (int v = 0; v < NV; ++v) a[v] = __bfloat1622float2(b[u][v]);
            f(at.i, 2 * at.c, a);
        }
    }
}

/* The chunk into shared memory: the planes' zeros (where a tail needs them), the scalars (zeros
 * past L), the biases, the q̂ and k̂ planes (load_qk; SCALED: q̂·e^c and k̂·e^{c_last−c}·σ, as the
 * sums kernel needs them), the v plane(s) and the dy planes (dout ⊙ silu(z) with z). K, V: P.K,
 * P.V (compile-time constants in a fixed-dims instance). Ends with a barrier; returns c_last. */
template <bool VX, bool SCALED>
__device__ __forceinline__ float load_planes(const bw_args & P, int K, int V, int w, const bw_chunk & ch, int h,
                                             const planes_geom & g, unsigned char * sm, const pl_smem & s) {
    const int L = ch.len, tid = threadIdx.x, nt = blockDim.x, lv = g.lv;
    /* The loaders write every (token < L, column < K or V) place of the planes the products read (vl
     * is not read where VX); the products read rows < cp and columns < kp or vp. So only a chunk
     * shorter than cp, or K or V short of its padded width, leaves places that must read as 0. */
    if (L != g.cp || K != g.kp || V != g.vp)
        for (size_t e = tid; e < g.zero_end / 16; e += nt) ((uint4 *)sm)[e] = make_uint4(0u, 0u, 0u, 0u);
    const float cl = P.sc[((ch.tok + L - 1) * P.H + h) * kScalWs + 4];
    for (int i = tid; i < g.cp; i += nt) {
        float gam = 0.0f, sig = 0.0f, cm = 0.0f, ec = 0.0f, wl = 0.0f;
        if (i < L) {
            const float * sc = P.sc + ((ch.tok + i) * P.H + h) * kScalWs;
            gam = sc[2], sig = sc[3], cm = sc[4];
            ec = expf(cm), wl = expf(cl - cm);
        }
        s.gam[i] = gam, s.sig[i] = sig, s.cm[i] = cm, s.ec[i] = ec, s.wl[i] = wl;
        s.dqk[i] = 0.0f, s.dQK[i] = 0.0f, s.rr[i] = 0.0f, s.mm[i] = 0.0f;
    }
    for (int c = tid; c < g.kp; c += nt) {
        s.bq[c] = c < K ? ld2(P.qb, h, c) : 0.0f;
        s.bk[c] = c < K ? ld2(P.kb, h, c) : 0.0f;
    }
    __syncthreads(); /* the zeros, the scalars and the biases */
    load_qk<SCALED>(P, K, w, ch, h, g, s);
    bf16 *vh = s.vh, *vl = s.vl, *dyh = s.dyh, *dyl = s.dyl;
    /* v, dout and z by 4-byte pairs where their layouts allow (bf16_pairs, V even), else by elements */
    const bool pv = V % 2 == 0 && bf16_pairs(P.v);
    const bool pd = V % 2 == 0 && bf16_pairs(P.dout) && (!P.has_z || bf16_pairs(P.z));
    if (VX && pv) {
        const ssmi_cu_view * const x[1] = {&P.v};
        rows_pairs<1>(x, ch.row, ch.t0, h, L, V, [=](int i, int r, const float2 (&a)[1]) {
            vh[i * lv + r] = __float2bfloat16_rn(a[0].x); /* exact: bf16 values */
            vh[i * lv + r + 1] = __float2bfloat16_rn(a[0].y);
        });
    } else {
        load_rows(P.v, ch.row, ch.t0, h, L, V, [=](int i, int r, float x) {
            if (VX)
                vh[i * lv + r] = __float2bfloat16_rn(x); /* exact: x is a bf16 value */
            else
                split_one(x, vh, vl, i * lv + r);
        });
    }
    if (P.has_z && pd) {
        const ssmi_cu_view * const x[2] = {&P.dout, &P.z};
        rows_pairs<2>(x, ch.row, ch.t0, h, L, V, [=](int i, int r, const float2 (&a)[2]) {
            split_one(gated_dy(a[0].x, a[1].x), dyh, dyl, i * lv + r);
            split_one(gated_dy(a[0].y, a[1].y), dyh, dyl, i * lv + r + 1);
        });
    } else if (P.has_z) {
        load_rows2(P.dout, P.z, ch.row, ch.t0, h, L, V, [=](int i, int r, float dO, float z) {
            split_one(gated_dy(dO, z), dyh, dyl, i * lv + r);
        });
    } else if (pd) {
        const ssmi_cu_view * const x[1] = {&P.dout};
        rows_pairs<1>(x, ch.row, ch.t0, h, L, V, [=](int i, int r, const float2 (&a)[1]) {
            split_one(a[0].x, dyh, dyl, i * lv + r);
            split_one(a[0].y, dyh, dyl, i * lv + r + 1);
        });
    } else {
        load_rows(P.dout, ch.row, ch.t0, h, L, V, [=](int i, int r, float x) { split_one(x, dyh, dyl, i * lv + r); });
    }
    __syncthreads();
    return cl;
}

/* Two blocks per SM where shared memory allows (K = 128, V = 64, 64 tokens: ~109 KB each): 64 registers. */
template <bool VX>
__global__ void __launch_bounds__(kPlanesThreads, 2) bwd_chunk_planes_sums_kernel(const bw_args P) {
    extern __shared__ float4 sm4[];
    unsigned char * const    sm = (unsigned char *)sm4;
    const planes_geom        g = planes_geom_of(P.C, P.K, P.V);
    const pl_smem            s = carve_planes(sm, g, false);
    const int                w = blockIdx.x, h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int                nw = blockDim.x >> 5, g4 = lane >> 2, t4 = lane & 3;
    const bw_chunk           ch = P.chunks[w];
    const float              cl = load_planes<VX, true>(P, P.K, P.V, w, ch, h, g, sm, s);
    const int                K = P.K, V = P.V, Kq = (ch.len + 15) / 16 * 16, nK = g.kp / 16, nV = g.vp / 16;
    const long long          base = ((long long)w * P.H + h) * V * K;
    /* jobs [0, nV·nK): st tiles (r, c) = Σ_i v[i][r]·k̂w[i][c]; [nV·nK, 2·nV·nK): dst = Σ_i dy[i][r]·q̂e[i][c] */
    for (int t = warp; t < 2 * nV * nK; t += nw) {
        const bool st = t < nV * nK;
        const int  tt = st ? t : t - nV * nK, r0 = (tt / nK) * 16, c0 = (tt % nK) * 16;
        float      c[2][4];
        zero_acc(c);
        if (st)
            tile_mma<true, true, !VX, true>(c, s.vh, s.vl, g.lv, s.kh, s.kl, g.lk, r0, c0, 0, Kq);
        else
            tile_mma<true, true, true, true>(c, s.dyh, s.dyl, g.lv, s.qh, s.ql, g.lk, r0, c0, 0, Kq);
        float * out = (st ? P.st : P.dst) + base;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int r = r0 + g4 + 8 * hh;
            if (r >= V) continue;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int col = c0 + 8 * j + 2 * t4; /* even; K is even */
                if (col < K)
                    *reinterpret_cast<float2 *>(out + (long long)r * K + col) =
                        make_float2(c[j][2 * hh], c[j][2 * hh + 1]);
            }
        }
    }
    if (threadIdx.x == 0) P.cl[(long long)w * P.H + h] = cl;
}

/* A batch of kStateBatch pairs of S_c and dS (fp32 [V][K] in the workspace): a thread's pairs
 * e0 + u·blockDim.x of the [vp][kp/2] pairs of the planes (zeros past V, K), (row, pair) walked
 * from `at` (grid_walk over kp/2 pairs a row). */
constexpr int kStateBatch = 4;
struct state_batch {
    float2 s[kStateBatch], d[kStateBatch];
};
__device__ __forceinline__ void fetch_states(state_batch & b, int e0, grid_walk at, const planes_geom & g,
                                             const float * Sc, const float * dS, int V, int K) {
    const int total = g.vp * (g.kp / 2);
#pragma unroll
    for (int u = 0; u < kStateBatch; ++u, at.next()) {
        const int  e = e0 + u * (int)blockDim.x, r = at.i, c = at.c * 2;
        const bool in = e < total && r < V && c < K; /* K even: the pair is whole */
        b.s[u] = in ? *reinterpret_cast<const float2 *>(Sc + (long long)r * K + c) : make_float2(0.0f, 0.0f);
        b.d[u] = in ? *reinterpret_cast<const float2 *>(dS + (long long)r * K + c) : make_float2(0.0f, 0.0f);
    }
}
/* A fetched batch into the split planes; adds its part of ⟨S_c, dS⟩ to part. */
__device__ __forceinline__ void put_states(const state_batch & b, int e0, grid_walk at, const pl_smem & s,
                                           const planes_geom & g, float & part) {
    const int total = g.vp * (g.kp / 2);
#pragma unroll
    for (int u = 0; u < kStateBatch; ++u, at.next()) {
        const int e = e0 + u * (int)blockDim.x, r = at.i, c = at.c * 2;
        if (e >= total) continue;
        part += b.s[u].x * b.d[u].x;
        part += b.s[u].y * b.d[u].y;
        split_pair(b.s[u].x, b.s[u].y, s.sh, s.sl, r * g.lk + c);
        split_pair(b.d[u].x, b.d[u].y, s.dh, s.dl, r * g.lk + c);
    }
}
/* The walk of a thread's state pairs: from pair threadIdx.x in steps of blockDim.x. */
__device__ __forceinline__ grid_walk state_walk(const planes_geom & g) {
    return grid_walk(threadIdx.x, blockDim.x, g.kp / 2);
}
/* S_c and dS of the chunk into their split planes [vp][lk], the thread's first batch (first,
 * fetched earlier) then the rest; returns this thread's part of ⟨S_c, dS⟩ (pairs in order). */
__device__ __forceinline__ float load_states(const state_batch & first, const pl_smem & s, const planes_geom & g,
                                             const float * Sc, const float * dS, int V, int K) {
    const int total = g.vp * (g.kp / 2), step = kStateBatch * (int)blockDim.x;
    float     part = 0.0f;
    grid_walk at = state_walk(g);
    put_states(first, threadIdx.x, at, s, g, part);
    for (int e0 = threadIdx.x + step; e0 < total; e0 += step) {
#pragma unroll
        for (int u = 0; u < kStateBatch; ++u) at.next();
        state_batch b;
        fetch_states(b, e0, at, g, Sc, dS, V, K);
        put_states(b, e0, at, s, g, part);
    }
    return part;
}

/* One block per (chunk, slice of a GQA group's heads: bw_args.qslice), the slice's heads in turn,
 * each as below, its dq̃ and dk̃ added to the part's rows of the earlier heads. kC, kK, kV: the
 * chunk length and the state sizes fixed at compile time (0: P.C, P.K, P.V at run time). Fixed,
 * the plane pitches, the tile counts and the loaders' widths are constants, which removes most of
 * the integer work per tile (divisions by tile counts, runtime pitches); the products, their
 * order and so the bytes are the runtime instance's. */
template <bool VX, int kC, int kK, int kV>
__global__ void __launch_bounds__(kPlanesThreads, 1) bwd_chunk_planes_grads_kernel(const bw_args P) {
    extern __shared__ float4 sm4[];
    unsigned char * const    sm = (unsigned char *)sm4;
    __builtin_assume(blockDim.x == kPlanesThreads);
    const int                K = kK > 0 ? kK : P.K, V = kV > 0 ? kV : P.V;
    const planes_geom        g = planes_geom_of(kC > 0 ? kC : P.C, K, V);
    const pl_smem            s = carve_planes(sm, g, true);
    const int                w = blockIdx.x, part = blockIdx.y, tid = threadIdx.x, nt = blockDim.x;
    const int                lane = tid & 31, warp = tid >> 5, nw = nt >> 5, g4 = lane >> 2, t4 = lane & 3;
    const bw_chunk           ch = P.chunks[w];
    const int                A = P.A, VK = V * K;
    const int   L = ch.len, Kq = (L + 15) / 16 * 16, nT = g.cp / 16, nK = g.kp / 16, nV = g.vp / 16, nTL = Kq / 16;
    const int   cp = g.cp, kp = g.kp, lk = g.lk, lv = g.lv, lc = g.lc;
    const bool  seq_end = ch.last != 0;
    /* the slice of heads: part j of GQA group gq, dq̃ and dk̃ summed over its heads in head order
     * into the part's rows (bw_args.qslice) */
    const int       gq = part / P.qparts, hfirst = gq * P.G + (part % P.qparts) * P.qslice;
    const int       hend = min(hfirst + P.qslice, (gq + 1) * P.G);
    const long long qrows = (long long)(P.H / P.G) * P.qparts;
    for (int h = hfirst; h < hend; ++h) {
        const bool acc = h > hfirst; /* the part's rows hold the slice's earlier heads */
        if (acc) __syncthreads(); /* the previous head's tail has read the block's scalars */
        const long long wh = (long long)w * P.H + h;
        /* S_c, dS: the first batch's loads in flight across the chunk's loads and A1, which do not
         * need them; their planes lie outside the zeroed region and the regions A1 writes */
        const float * const Sc = P.st + wh * VK, *const dS = P.dst + wh * VK;
        state_batch         sfirst;
        fetch_states(sfirst, tid, state_walk(g), g, Sc, dS, V, K);
        const float cl = load_planes<VX, false>(P, K, V, w, ch, h, g, sm, s);
        const float dskip = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, (long long)h * P.d.s[0]) : 0.0f;

        /* A1: tile (i, j) of Q̂·K̂ᵀ and dY·Vᵀ → Pm, Es (strictly lower; zeros elsewhere), d and dQK on
         * the diagonal, the tile's row sums of W into wrow[j-tile] and column sums of Z into zcol[i-tile]
         * (every tile writes its slots, zeros where it has no entries) */
        for (int t = warp; t < nT * nT; t += nw) {
            const int  m0 = (t / nT) * 16, n0 = (t % nT) * 16;
            const bool live = n0 <= m0 && m0 < L;
            float      qk[2][4], dv[2][4];
            zero_acc(qk), zero_acc(dv);
            if (live) {
                tile_mma<false, false, true, true>(qk, s.qh, s.ql, lk, s.kh, s.kl, lk, m0, n0, 0, kp);
                tile_mma<false, false, true, !VX>(dv, s.dyh, s.dyl, lv, s.vh, s.vl, lv, m0, n0, 0, g.vp);
            }
            float wsum[2] = {0.0f, 0.0f}, zsum[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
            /* FULL: a tile strictly below the diagonal with every row a token (warp-uniform), where each
             * entry is a j < i entry: the same arithmetic without the per-entry tests (bf16 v only: with
             * a split v plane the second copy costs the kernel a spill) */
            const auto tables = [&](auto full) {
                constexpr bool FULL = decltype(full)::value;
#pragma unroll
                for (int j = 0; j < 2; ++j)
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const int i = m0 + g4 + 8 * hh, j0 = n0 + 8 * j + 2 * t4;
                        float     pm[2], es[2];
#pragma unroll
                        for (int u = 0; u < 2; ++u) {
                            const int jj = j0 + u;
                            pm[u] = es[u] = 0.0f;
                            if (FULL || (live && i < L)) {
                                const float x = dv[j][2 * hh + u], y = qk[j][2 * hh + u];
                                if (FULL || jj < i) {
                                    const float dec = expf(s.cm[i] - s.cm[jj]), sj = s.sig[jj], z = dec * x * y;
                                    pm[u] = dec * sj * y;
                                    es[u] = dec * x * sj;
                                    wsum[hh] += z * sj;
                                    zsum[j][u] += z;
                                } else if (jj == i) {
                                    s.dQK[i] = x; /* dy_i·v_i */
                                    s.dqk[i] = y; /* d_i = q̂_i·k̂_i */
                                }
                            }
                        }
                        const int o = i * lc + j0;
                        split_pair(pm[0], pm[1], s.pmh, s.pml, o);
                        split_pair(es[0], es[1], s.esh, s.esl, o);
                    }
            };
            if (VX && live && n0 < m0 && m0 + 16 <= L)
                tables(std::true_type());
            else
                tables(std::false_type());
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) wsum[hh] = quad_sum(wsum[hh]);
            if (t4 == 0) s.wrow[(n0 / 16) * cp + m0 + g4] = wsum[0], s.wrow[(n0 / 16) * cp + m0 + g4 + 8] = wsum[1];
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    const float z = col_sum(zsum[j][u]);
                    if (g4 == 0) s.zcol[(m0 / 16) * cp + n0 + 8 * j + 2 * t4 + u] = z;
                }
        }
        s.red[tid] = load_states(sfirst, s, g, Sc, dS, V, K);
        __syncthreads(); /* the tables, the partials, the S_c and dS planes */

        /* A2: jobs [0, JQ) the (i, c) tile pairs of dq̂ and dk̂ with the chain (JQ = nT·nK), then
         * [JQ, JQ + J) dv tiles (j, r) and [JQ + J, JQ + 2J) y/dz tiles (j, r) (J = nT·nV) */
        /* dz: by bwd_dz_kernel instead where the forward's pregate_y is given */
        const bool want_dv = P.dv.present != 0, want_dz = P.dz.present != 0 && P.has_z && P.ypre.p == nullptr;
        const int  JQ = nT * nK, J = nT * nV;
        for (int t = warp; t < JQ + 2 * J; t += nw) {
            float c[2][4];
            zero_acc(c);
            if (t < JQ) {
                const int mt = t / nK, kt = t % nK, m0 = mt * 16, c0 = kt * 16;
                if (m0 >= L) continue;
                /* θ of this lane's (token, pair) slots, loaded ahead of the products */
                float th[2][2];
#pragma unroll
                for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                    for (int jn = 0; jn < 2; ++jn) {
                        const int i = m0 + g4 + 8 * hh, cc = c0 + 8 * jn + 2 * t4, p = cc >> 1;
                        th[hh][jn] = i < L && cc < K && p < A ? theta_at(P, w, h, ch.tok + i, p) : 0.0f;
                    }
                /* the part's sums of the slice's earlier heads at this lane's pairs (this thread
                 * wrote them for the previous head), loaded ahead of the products too */
                float2 pq[2][2], pk[2][2];
#pragma unroll
                for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                    for (int jn = 0; jn < 2; ++jn) {
                        const int       i = m0 + g4 + 8 * hh, cc = c0 + 8 * jn + 2 * t4;
                        const bool      in = acc && i < L && cc < K;
                        const long long qo = ((ch.tok + i) * qrows + part) * K + cc;
                        pq[hh][jn] = in ? *reinterpret_cast<const float2 *>(P.dqt + qo) : make_float2(0.0f, 0.0f);
                        pk[hh][jn] = in ? *reinterpret_cast<const float2 *>(P.dkt + qo) : make_float2(0.0f, 0.0f);
                    }
                /* the inter-chunk parts: e^{c}·dY·S_c (c) and e^{c_last−c}·V·dS (ck); their row sums
                 * with q̂ (readout) and k̂ (m) */
                float ck[2][4];
                zero_acc(ck);
                tile_mma<false, true, true, true>(c, s.dyh, s.dyl, lv, s.sh, s.sl, lk, m0, c0, 0, g.vp);
                tile_mma<false, true, !VX, true>(ck, s.vh, s.vl, lv, s.dh, s.dl, lk, m0, c0, 0, g.vp);
                float sq[2] = {0.0f, 0.0f}, sk[2] = {0.0f, 0.0f};
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int   i = m0 + g4 + 8 * hh;
                    const float fq = s.ec[i], fk = s.wl[i], sg = s.sig[i];
#pragma unroll
                    for (int jn = 0; jn < 2; ++jn) {
                        const int    o = i * lk + c0 + 8 * jn + 2 * t4;
                        const float2 xq = split_at(s.qh, s.ql, o), xk = split_at(s.kh, s.kl, o);
                        c[jn][2 * hh] *= fq, c[jn][2 * hh + 1] *= fq;
                        ck[jn][2 * hh] *= fk, ck[jn][2 * hh + 1] *= fk;
                        sq[hh] += xq.x * c[jn][2 * hh] + xq.y * c[jn][2 * hh + 1];
                        sk[hh] += xk.x * ck[jn][2 * hh] + xk.y * ck[jn][2 * hh + 1];
                        ck[jn][2 * hh] *= sg, ck[jn][2 * hh + 1] *= sg; /* dk̂ = σ·dK̂s */
                    }
                    sq[hh] = quad_sum(sq[hh]), sk[hh] = quad_sum(sk[hh]);
                }
                if (t4 == 0) {
                    s.rpart[kt * cp + m0 + g4] = sq[0], s.rpart[kt * cp + m0 + g4 + 8] = sq[1];
                    s.mpart[kt * cp + m0 + g4] = sk[0], s.mpart[kt * cp + m0 + g4 + 8] = sk[1];
                }
                /* the intra-chunk parts: dq̂[i] += Σ_{j<i} Es[i][j]·k̂[j]; dk̂[j] += Σ_{i>j} Es[i][j]·q̂[i] */
                tile_mma<false, true, true, true>(c, s.esh, s.esl, lc, s.kh, s.kl, lk, m0, c0, 0, min(m0 + 16, Kq));
                tile_mma<true, true, true, true>(ck, s.esh, s.esl, lc, s.qh, s.ql, lk, m0, c0, m0, Kq);
                /* the chain per (token, pair) of the tile, and the tile's column sums of dq̃, dk̃, dθ */
                float qs[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}}, ks[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}},
                      ts[2] = {0.0f, 0.0f};
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int i = m0 + g4 + 8 * hh;
                    if (i >= L) continue;
                    const float cqk = s.dQK[i] * s.gam[i];
                    const bool  fk = seq_end && i == L - 1 && P.has_dfk;
#pragma unroll
                    for (int jn = 0; jn < 2; ++jn) {
                        const int cc = c0 + 8 * jn + 2 * t4, o = i * lk + cc;
                        if (cc >= K) continue; /* K even: the pair is whole */
                        float2 f = make_float2(c[jn][2 * hh], c[jn][2 * hh + 1]);
                        float2 gk = make_float2(ck[jn][2 * hh], ck[jn][2 * hh + 1]);
                        ts[jn] += chain_pair<true>(P, ch, h, i, cc >> 1, fk, 1.0f, cqk, th[hh][jn],
                                                   split_at(s.qh, s.ql, o), split_at(s.kh, s.kl, o), f, gk,
                                                   (ch.tok + i) * qrows + part, pq[hh][jn], pk[hh][jn]);
                        qs[jn][0] += f.x, qs[jn][1] += f.y;
                        ks[jn][0] += gk.x, ks[jn][1] += gk.y;
                    }
                }
#pragma unroll
                for (int jn = 0; jn < 2; ++jn) {
                    const int   cc = c0 + 8 * jn + 2 * t4;
                    const float q0 = col_sum(qs[jn][0]), q1 = col_sum(qs[jn][1]);
                    const float k0 = col_sum(ks[jn][0]), k1 = col_sum(ks[jn][1]), d = col_sum(ts[jn]);
                    if (g4 == 0) {
                        s.qpart[mt * kp + cc] = q0, s.qpart[mt * kp + cc + 1] = q1;
                        s.kpart[mt * kp + cc] = k0, s.kpart[mt * kp + cc + 1] = k1;
                        s.tpart[mt * (kp / 2) + (cc >> 1)] = d;
                    }
                }
                continue;
            }
            const bool dvj = t < JQ + J;
            const int  tt = t - JQ - (dvj ? 0 : J), m0 = (tt / nV) * 16, r0 = (tt % nV) * 16;
            if (m0 >= L || (dvj ? !want_dv : !want_dz)) continue;
            /* the bf16 inputs and outputs of the tile by column pairs where every layout allows it
             * (uniform over the grid; derived here, not held across the loop's other tiles) */
            const bool io_pairs = !dvj && V % 2 == 0 && bf16_pairs(P.dout) && bf16_pairs(P.z) && bf16_pairs(P.dz);
            const bool dv_pairs = dvj && V % 2 == 0 && bf16_pairs(P.dv);
            const m3_out &  out = dvj ? P.dv : P.dz;
            const long long ob = ch.row * out.s[0] + ch.t0 * out.s[1] + h * out.s[2];
            /* dz: dout and z of this lane's outputs, loaded ahead of the products (a lane's two columns
             * r, r + 1 of a row as one 4-byte word each where io_pairs) */
            float dO[2][2][2], zv[2][2][2];
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                for (int jn = 0; jn < 2; ++jn) {
                    const int i = m0 + g4 + 8 * hh, r = r0 + 8 * jn + 2 * t4;
                    if (io_pairs) {
                        const long long dob = ch.row * P.dout.s[0] + ch.t0 * P.dout.s[1] + h * P.dout.s[2];
                        const long long zb = ch.row * P.z.s[0] + ch.t0 * P.z.s[1] + h * P.z.s[2];
                        const bool      in = i < L && r < V; /* V even: r + 1 < V too */
                        const float2 a = in ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(
                                                  (const __nv_bfloat16 *)P.dout.p + (dob + i * P.dout.s[1] + r)))
                                            : make_float2(0.0f, 0.0f);
                        const float2 b = in ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(
                                                  (const __nv_bfloat16 *)P.z.p + (zb + i * P.z.s[1] + r)))
                                            : make_float2(0.0f, 0.0f);
                        dO[hh][jn][0] = a.x, dO[hh][jn][1] = a.y, zv[hh][jn][0] = b.x, zv[hh][jn][1] = b.y;
                    } else {
#pragma unroll
                        for (int u = 0; u < 2; ++u) {
                            const bool in = !dvj && i < L && r + u < V;
                            dO[hh][jn][u] = in ? ld4(P.dout, ch.row, ch.t0 + i, h, r + u) : 0.0f;
                            zv[hh][jn][u] = in ? ld4(P.z, ch.row, ch.t0 + i, h, r + u) : 0.0f;
                        }
                    }
                }
            if (dvj) { /* e^{c_last−c_j}σ_j·K̂·dSᵀ + Pmᵀ·dY */
                tile_mma<false, false, true, true>(c, s.kh, s.kl, lk, s.dh, s.dl, lk, m0, r0, 0, kp);
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int   i = m0 + g4 + 8 * hh;
                    const float f = s.wl[i] * s.sig[i];
#pragma unroll
                    for (int jn = 0; jn < 2; ++jn) c[jn][2 * hh] *= f, c[jn][2 * hh + 1] *= f;
                }
                tile_mma<true, true, true, true>(c, s.pmh, s.pml, lc, s.dyh, s.dyl, lv, m0, r0, m0, Kq);
            } else { /* e^{c_j}·Q̂·S_cᵀ + Pm·V */
                tile_mma<false, false, true, true>(c, s.qh, s.ql, lk, s.sh, s.sl, lk, m0, r0, 0, kp);
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const float f = s.ec[m0 + g4 + 8 * hh];
#pragma unroll
                    for (int jn = 0; jn < 2; ++jn) c[jn][2 * hh] *= f, c[jn][2 * hh + 1] *= f;
                }
                tile_mma<false, true, true, !VX>(c, s.pmh, s.pml, lc, s.vh, s.vl, lv, m0, r0, 0, min(m0 + 16, Kq));
            }
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int i = m0 + g4 + 8 * hh;
                if (i >= L) continue;
                const float dg = dskip + s.gam[i] * s.dqk[i];
#pragma unroll
                for (int jn = 0; jn < 2; ++jn) {
                    const int    r = r0 + 8 * jn + 2 * t4, o = i * lv + r;
                    const float2 x = dvj ? split_at(s.dyh, s.dyl, o) : VX ? exact_at(s.vh, o) : split_at(s.vh, s.vl, o);
                    const bool   pr = dvj ? dv_pairs : io_pairs;
                    float        yo[2];
#pragma unroll
                    for (int u = 0; u < 2; ++u) {
                        if (r + u >= V) continue;
                        float y = c[jn][2 * hh + u] + dg * (u ? x.y : x.x);
                        if (dvj) {
                            if (seq_end && i == L - 1 && P.has_dfv) y += ld3(P.dfv, ch.seq, h, r + u);
                        } else {
                            const float z = zv[hh][jn][u], sg = ssmi_math::sigmoid_fast(z);
                            y = y * (dO[hh][jn][u] * sg * (1.0f + z * (1.0f - sg)));
                        }
                        yo[u] = y;
                        if (!pr) st4(out, ch.row, ch.t0 + i, h, r + u, y);
                    }
                    if (pr && r < V) /* V even: the pair is whole */
                        *reinterpret_cast<__nv_bfloat162 *>((__nv_bfloat16 *)out.p + (ob + i * out.s[1] + r)) =
                            __floats2bfloat162_rn(yo[0], yo[1]);
                }
            }
        }
        __syncthreads();

        /* B: per token (a thread each) r_i, m_i, dσ, dγ from the partials in tile order */
        for (int i = tid; i < L; i += nt) {
            float ro = 0.0f, mk = 0.0f, rw = 0.0f, zc = 0.0f;
            for (int kt = 0; kt < nK; ++kt) ro += s.rpart[kt * cp + i], mk += s.mpart[kt * cp + i];
            for (int u = 0; u < nT; ++u) rw += s.wrow[u * cp + i], zc += s.zcol[u * cp + i];
            const float     sg = s.sig[i], dsg = mk + zc;
            const long long o = (ch.tok + i) * P.H + h;
            s.rr[i] = ro + rw - sg * zc;
            s.mm[i] = sg * mk;
            P.dsg[o] = dsg;
            P.dgm[o] = s.dQK[i] * s.dqk[i] + dsg;
        }
        /* the chunk sums of dq̃, dk̃ (per column) and of the raw dθ (per angle), tiles in order */
        for (int c = tid; c < K + A; c += nt) {
            float a = 0.0f, b = 0.0f;
            if (c < K) {
                for (int mt = 0; mt < nTL; ++mt) a += s.qpart[mt * kp + c], b += s.kpart[mt * kp + c];
                P.qbp[wh * K + c] = a;
                P.kbp[wh * K + c] = b;
            } else {
                const int p = c - K;
                for (int mt = 0; mt < nTL; ++mt) a += s.tpart[mt * (kp / 2) + p];
                P.thp[wh * A + p] = a;
            }
        }
        __syncthreads();
        /* warp 0: μ, dadt, the dd partial */
        if (warp == 0) dadt_tail(P, ch, h, wh, L, cl, s.red, nw, s.mm, s.rr, s.dQK);
    }
}

/* The gradient kernel's compile-time instance: 64-token chunks (the entry's), K = 128 and V = 64,
 * the heads of the Mamba-3 models of record (issue 18's shape); other sizes run the runtime one. */
constexpr int kFixedC = 64, kFixedK = 128, kFixedV = 64;
bool          fixed_dims(const bw_args & P) { return P.C == kFixedC && P.K == kFixedK && P.V == kFixedV; }

} /* namespace */

ssm_status launch_bwd_chunk_planes(ssm_context * ctx, const char * op, const bw_args & P, bool grads) {
    const planes_geom  g = planes_geom_of(P.C, P.K, P.V);
    const size_t       bytes = grads ? g.total : g.sums_total;
    /* the gradient kernel: a block per (chunk, slice of a group's heads); the sums: per (chunk, head) */
    const dim3         grid((unsigned)P.W, grads ? (unsigned)((P.H / P.G) * P.qparts) : (unsigned)P.H);
    const cudaStream_t st = ssmi_cuda_stream(ctx);
    const bool         fixed = fixed_dims(P);
    void (*kern)(const bw_args) =
        grads ? (P.v_bf16 ? (fixed ? bwd_chunk_planes_grads_kernel<true, kFixedC, kFixedK, kFixedV>
                                   : bwd_chunk_planes_grads_kernel<true, 0, 0, 0>)
                          : (fixed ? bwd_chunk_planes_grads_kernel<false, kFixedC, kFixedK, kFixedV>
                                   : bwd_chunk_planes_grads_kernel<false, 0, 0, 0>))
              : (P.v_bf16 ? bwd_chunk_planes_sums_kernel<true> : bwd_chunk_planes_sums_kernel<false>);
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op,
                         grads ? "cudaFuncSetAttribute (bwd_chunk_planes_grads_kernel)"
                               : "cudaFuncSetAttribute (bwd_chunk_planes_sums_kernel)",
                         cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)));
    /* the largest carveout: two sums blocks share an SM where their bytes allow */
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute (carveout)",
                                          cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                               (int)cudaSharedmemCarveoutMaxShared)));
    kern<<<grid, kPlanesThreads, bytes, st>>>(P);
    return ssmi_cuda_status(ctx, op,
                            grads ? "bwd_chunk_planes_grads_kernel launch" : "bwd_chunk_planes_sums_kernel launch",
                            cudaGetLastError());
}

} /* namespace ssmi_siso_bwd */
