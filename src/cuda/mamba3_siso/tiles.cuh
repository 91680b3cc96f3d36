/*
 * tiles.cuh — device helpers of the SISO tensor-core kernels (fp16/bf16 v, K ≤ 128): the copies
 * of a chunk's rows into shared memory, the loads of θ's terms and of the entering state tile, θ
 * by token groups, the rotation and split of q̂ / k̂, the fast hardware math those kernels use,
 * the causal decay mask, the epilogues of the output kernels and the V·K̂ product of the state
 * kernels.
 *
 * q̂, k̂, w∘k̂, the entering state and P are fp32 values: each is split into its rounded part and
 * the rounded remainder; products of two split operands take three MMAs (hi·hi + lo·hi + hi·lo),
 * of a split operand and v two — v is exact in its own dtype. q and k are read 8 features at a
 * time (16-byte loads when they are of v's dtype with unit inner stride), the v tile by cp.async
 * in 16-byte pieces when its rows allow it; any other layout or dtype is read element by element
 * through the strides, with the same arithmetic.
 *
 * The fast hardware math (ex2.approx decays in the mask, silu_fast, and in the combined op
 * tanh_fast and the sincos of the wrapped θ) has absolute errors ~1e-6, within the fp16/bf16 bars.
 */
#ifndef SSMI_CUDA_SISO_TILES_CUH
#define SSMI_CUDA_SISO_TILES_CUH

#include "siso.cuh"

namespace ssmi_siso {

/* cp.async of a (B, S, Hx, X) tensor's rows of the chunk (tokens < L, columns [c0, c0 + ncols)
 * clipped to X) into dst[kC][ld] in 16-byte pieces; the rows must allow 16-byte loads
 * (ssmi_cu_vec_rows). Pieces outside are not written (their readers skip them). (row, piece)
 * advance by a constant per step (blockDim.x = NT). The caller waits (cp_async_wait_all) and
 * synchronises. */
template <int MODE, int NT = kFastThreads>
__device__ __forceinline__ void cp_rows(typename cfg<MODE>::T * dst, int ld, const ssmi_cu_view & t,
                                        const m3_chunk & ch, int hx, int c0, int ncols, int X) {
    typedef typename cfg<MODE>::T T;
    const int                     nc = min(ncols, X - c0), pr = ncols / 8, n = ch.len * pr;
    const T *                     src = (const T *)t.p + ch.row * t.s[0] + ch.t0 * t.s[1] + hx * t.s[2] + c0;
    const long long               rs = t.s[1];
    const int                     dq = NT / pr, dr = NT - dq * pr;
    int                           r = (int)threadIdx.x / pr, c = (int)threadIdx.x - r * pr;
#pragma unroll 1
    for (int o = threadIdx.x; o < n; o += NT) {
        if (8 * c < nc) cp_async16(dst + r * ld + 8 * c, src + r * rs + 8 * c);
        r += dq, c += dr;
        if (c >= pr) c -= pr, ++r;
    }
}

/* 8 entries n0..n0+7 of row h of a (H, K) tensor (0 at n ≥ K): the values of ssmi_cu_ld, with
 * the dtype switch taken once for the 8 instead of once per entry. */
__device__ __forceinline__ void load_row8(float (&x)[8], const ssmi_cu_view & v, int h, int n0, int K) {
    const long long base = h * v.s[0] + n0 * v.s[1], st = v.s[1];
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = 0.0f;
    switch (v.dtype) {
        case SSM_DTYPE_F32: {
            const float * p = (const float *)v.p + base;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (n0 + e < K) x[e] = __ldg(p + e * st);
            break;
        }
        case SSM_DTYPE_F16: {
            const __half * p = (const __half *)v.p + base;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (n0 + e < K) x[e] = __half2float(p[e * st]);
            break;
        }
        case SSM_DTYPE_BF16: {
            const __nv_bfloat16 * p = (const __nv_bfloat16 *)v.p + base;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (n0 + e < K) x[e] = __bfloat162float(p[e * st]);
            break;
        }
        case SSM_DTYPE_F64: {
            const double * p = (const double *)v.p + base;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (n0 + e < K) x[e] = (float)__ldg(p + e * st);
            break;
        }
        default: break;
    }
}

/* 2^x, the hardware approximation (a few ulp; flushes subnormals): the decay factors of the
 * mask, e^{c_i − c_j} = 2^{(c_i − c_j)·log2 e}. */
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
const float kLog2e = 1.4426950408889634f;

/* tanh(x) = 1 − 2/(1 + e^{2x}) with the fast exponential and division: absolute error ~1e-7,
 * exact limits ±1 (the θ terms inside a chunk). */
__device__ __forceinline__ float tanh_fast(float x) { return 1.0f - __fdividef(2.0f, 1.0f + __expf(2.0f * x)); }

/* The sin/cos table of a block's θ (n = L·A values): th[o] becomes cos θ, snt[o] sin θ, all threads
 * of the block busy; fast (the fused op, θ wrapped to [0, 2π]): sincos_wrapped_fast, else sincosf.
 * fast is block-uniform. */
__device__ __forceinline__ void sincos_table(bool fast, float * th, float * snt, int n) {
    if (fast) {
        for (int o = threadIdx.x; o < n; o += blockDim.x) {
            float sn_, cs_;
            sincos_wrapped_fast(th[o], &sn_, &cs_);
            th[o] = cs_, snt[o] = sn_;
        }
    } else {
        for (int o = threadIdx.x; o < n; o += blockDim.x) {
            float sn_, cs_;
            sincosf(th[o], &sn_, &cs_);
            th[o] = cs_, snt[o] = sn_;
        }
    }
}

/* z·σ(z) with the fast exponential and division (the output gate; z → −∞ gives −0, z → +∞ gives z). */
__device__ __forceinline__ float silu_fast(float z) { return __fdividef(z, 1.0f + __expf(-z)); }

/* 8 consecutive features n0..n0+7 of row (b, t, hh) of a (B, S, H, K) tensor; 0 at n ≥ K.
 * vec: of type T, unit inner stride, 16-byte aligned rows, K % 8 == 0. */
template <int MODE>
__device__ __forceinline__ void load8(float (&x)[8], const ssmi_cu_view & v, int vec, int b, long long t, int hh,
                                      int n0, int K) {
    const long long base = b * v.s[0] + t * v.s[1] + hh * v.s[2];
    if (vec) {
        const uint4    u = __ldg(reinterpret_cast<const uint4 *>((const typename cfg<MODE>::T *)v.p + base + n0));
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = t2<MODE>::unpack(w[e]);
            x[2 * e] = f.x, x[2 * e + 1] = f.y;
        }
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] = n0 + e < K ? ssmi_cu_ld(v.p, v.dtype, base + (n0 + e) * v.s[3]) : 0.0f;
    }
}

/* The rotation of a thread's 8 q and k features n0 .. n0 + 7 of token i by the angles m0 = n0/2 ..
 * m0 + 3 (pairs (2m, 2m + 1)), shared by fast_prep_qk, prep_qk_swz and chain_prep_k: rot4, 4
 * angles at once from the sin/cos table (th holds cos θ, snt sin θ); rot0, no angle in this
 * thread's range; else angle by angle from the table, from the wrapped θ with the fast sincos
 * (FAST_WRAP and the fused op; with tb, θ = wrap(tb[m] + th[i][m]), the backward's walks), or with
 * sincosf. */
template <bool FAST_WRAP>
__device__ __forceinline__ void rotate_qk8(float (&q)[8], float (&k)[8], const m3_fwd_args & P, const float * th,
                                           const float * snt, int i, int m0, bool live, bool rot4, bool rot0,
                                           const float * tb = nullptr) {
    if (live && rot4) {
        const float4 cs4 = *reinterpret_cast<const float4 *>(&th[i * P.A + m0]);
        const float4 sn4 = *reinterpret_cast<const float4 *>(&snt[i * P.A + m0]);
        const float  csv[4] = {cs4.x, cs4.y, cs4.z, cs4.w}, snv[4] = {sn4.x, sn4.y, sn4.z, sn4.w};
#pragma unroll
        for (int e2 = 0; e2 < 4; ++e2) {
            const float cs = csv[e2], sn = snv[e2];
            const float q0 = q[2 * e2], q1 = q[2 * e2 + 1], k0 = k[2 * e2], k1 = k[2 * e2 + 1];
            q[2 * e2] = q0 * cs - q1 * sn, q[2 * e2 + 1] = q0 * sn + q1 * cs;
            k[2 * e2] = k0 * cs - k1 * sn, k[2 * e2 + 1] = k0 * sn + k1 * cs;
        }
    } else if (live && !rot0) {
#pragma unroll
        for (int e2 = 0; e2 < 4; ++e2) {
            const int m = m0 + e2;
            if (m < P.A) {
                float sn, cs;
                if (snt != nullptr) /* the table of sincosf(θ) (th holds cos θ) */
                    sn = snt[i * P.A + m], cs = th[i * P.A + m];
                else if (FAST_WRAP && P.fused) /* θ is wrapped */
                    sincos_wrapped_fast(tb != nullptr ? wrap2pi(tb[m] + th[i * P.A + m]) : th[i * P.A + m], &sn, &cs);
                else
                    sincosf(th[i * P.A + m], &sn, &cs);
                const float q0 = q[2 * e2], q1 = q[2 * e2 + 1], k0 = k[2 * e2], k1 = k[2 * e2 + 1];
                q[2 * e2] = q0 * cs - q1 * sn, q[2 * e2 + 1] = q0 * sn + q1 * cs;
                k[2 * e2] = k0 * cs - k1 * sn, k[2 * e2 + 1] = k0 * sn + k1 * cs;
            }
        }
    }
}

/* Rows of the chunk into [kC][ld] split tiles (rows ≥ L and columns ≥ K zero): Q̂ into qh/ql
 * when qh is given, K̂ (times kscale[i] when given) into kh/kl. d_i = q̃_i·k̃_i (biased, not
 * rotated) into dd when given; the last token's fp32 k̂ to the final k state when fin_k.
 * A thread takes 8 features of one token; the ipt (a power of two ≥ Kp/8) threads of a token
 * are adjacent lanes, so d_i is a fixed shuffle reduction. qraw / kraw: the raw q / k rows
 * already in shared memory (cp.async; the same values as load8's), or NULL. */
template <int MODE, int NT = kFastThreads>
__device__ inline void fast_prep_qk(const m3_fwd_args & P, const m3_chunk & ch, int h, const float * th,
                                    typename cfg<MODE>::T * qh, typename cfg<MODE>::T * ql, typename cfg<MODE>::T * kh,
                                    typename cfg<MODE>::T * kl, int ld, const float * kscale, float * dd, bool fin_k,
                                    const typename cfg<MODE>::T * qraw = nullptr,
                                    const typename cfg<MODE>::T * kraw = nullptr, const float * snt = nullptr) {
    const int K8 = P.Kp / 8, g = h / P.G, L = ch.len;
    int       ipt = 2;
    while (ipt < K8) ipt *= 2;
    const int per = NT / ipt; /* tokens per pass (blockDim.x = NT): divides kC, or (NT = 256, ipt = 2)
                               * 128, when the second half of the block has no token */
    const int c8 = threadIdx.x % ipt, n0 = c8 * 8;
    /* this thread's 8 features are the same in every pass: their biases are loaded once */
    float qbias[8], kbias[8];
    load_row8(qbias, P.qb, h, n0, P.K);
    load_row8(kbias, P.kb, h, n0, P.K);
    /* this thread's 4 pairs m0..m0+3 are all rotated (their sin/cos as one float4 each from the
     * table: A % 4 == 0 keeps i·A + m0 a multiple of 4 floats, the table 16-byte aligned), or none
     * of them is */
    const int  m0 = n0 / 2;
    const bool rot4 = snt != nullptr && (P.A & 3) == 0 && m0 + 4 <= P.A, rot0 = m0 >= P.A;
    for (int i = threadIdx.x / ipt; i < kC; i += per) {
        const bool live = i < L && n0 < P.K;
        float      q[8], k[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) q[e] = k[e] = 0.0f;
        if (live) {
            const long long t = ch.t0 + i;
            if (qraw != nullptr && (qh != nullptr || dd != nullptr))
                unpack8<MODE>(q, *reinterpret_cast<const uint4 *>(&qraw[i * ld + n0]));
            else if (qh != nullptr || dd != nullptr)
                load8<MODE>(q, P.q, P.vq, ch.row, t, g, n0, P.K);
            if (kraw != nullptr)
                unpack8<MODE>(k, *reinterpret_cast<const uint4 *>(&kraw[i * ld + n0]));
            else
                load8<MODE>(k, P.k, P.vk, ch.row, t, g, n0, P.K);
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (n0 + e < P.K) {
                    q[e] += qbias[e];
                    k[e] += kbias[e];
                }
        }
        float dot = 0.0f;
        if (dd != nullptr) {
#pragma unroll
            for (int e = 0; e < 8; ++e) dot = fmaf(q[e], k[e], dot);
        }
        rotate_qk8<true>(q, k, P, th, snt, i, n0 / 2, live, rot4, rot0);
        if (live) {
            if (fin_k && i == L - 1)
                for (int e = 0; e < 8; ++e)
                    if (n0 + e < P.K) st3(P.fin_k, ch.seq, h, n0 + e, k[e]);
        }
        if (c8 < K8) {
            uint32_t hi[4], lo[4];
            if (qh != nullptr) {
#pragma unroll
                for (int e = 0; e < 4; ++e) split2<MODE>(q[2 * e], q[2 * e + 1], hi[e], lo[e]);
                *reinterpret_cast<uint4 *>(&qh[i * ld + n0]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
                *reinterpret_cast<uint4 *>(&ql[i * ld + n0]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
            }
            const float sc = kscale != nullptr ? kscale[i] : 1.0f;
#pragma unroll
            for (int e = 0; e < 4; ++e) split2<MODE>(k[2 * e] * sc, k[2 * e + 1] * sc, hi[e], lo[e]);
            *reinterpret_cast<uint4 *>(&kh[i * ld + n0]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            *reinterpret_cast<uint4 *>(&kl[i * ld + n0]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
        if (dd != nullptr) { /* ipt ≤ 16: the offsets 8, 4, 2, 1 below ipt, in that order */
#pragma unroll
            for (int off = 8; off > 0; off /= 2)
                if (off < ipt) dot += __shfl_xor_sync(0xffffffffu, dot, off);
            if (c8 == 0) dd[i] = dot;
        }
    }
}

/* The v tile (kC tokens × kTV columns from p0) into vs[kC][kFLd]; zeros outside. cp.async
 * when P.vv (the caller waits), element-wise through the strides otherwise. */
template <int MODE>
__device__ void fast_load_v(const m3_fwd_args & P, const m3_chunk & ch, int h, int p0, typename cfg<MODE>::T * vs) {
    typedef typename cfg<MODE>::T T;
    const long long               base = ch.row * P.v.s[0] + ch.t0 * P.v.s[1] + h * P.v.s[2] + p0 * P.v.s[3];
    const int                     nc = P.V - p0;
    if (P.vv) {
        for (int o = threadIdx.x; o < kC * (kTV / 8); o += blockDim.x) {
            const int r = o / (kTV / 8), c = (o - r * (kTV / 8)) * 8;
            T *       d = vs + r * kFLd + c;
            if (r < ch.len && c < nc)
                cp_async16(d, (const T *)P.v.p + base + r * P.v.s[1] + c);
            else
                *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
        }
    } else {
        for (int o = threadIdx.x; o < kC * kTV; o += blockDim.x) {
            const int r = o / kTV, c = o - r * kTV;
            to_t(r < ch.len && c < nc ? ssmi_cu_ld(P.v.p, P.v.dtype, base + r * P.v.s[1] + c * P.v.s[3]) : 0.0f,
                 vs + r * kFLd + c);
        }
    }
}

/* Row r and float4 column c of this thread's state piece o = threadIdx.x + u·nt in a tile of c4
 * float4 columns (o = r·c4 + c), advanced from piece u to u + 1 by nt = dq·c4 + dr: the indices
 * of o without a division per piece. */
struct state_piece {
    int        c4, r, c, dq, dr;
    __device__ __forceinline__ explicit state_piece(int c4_, int nt = kFastThreads) : c4(c4_) {
        r = (int)threadIdx.x / c4, c = (int)threadIdx.x - r * c4;
        dq = nt / c4, dr = nt - dq * c4;
    }
    __device__ __forceinline__ void next() {
        r += dq, c += dr;
        if (c >= c4) c -= c4, ++r;
    }
};

/* This thread's pieces of the entering state tile of the 8-warp output kernels, piece o =
 * threadIdx.x + u·kOutMmaThreads (u < 8 covers kTV·Kp/4 ≤ 2048), zeros outside the V × K state;
 * one K % 4 test per tile and 32-bit offsets from the tile's first row. */
__device__ __forceinline__ void load_state_regs8(const m3_fwd_args & P, int w, int h, int p0, float4 (&f)[8]) {
    const float * st = P.states + ((long long)w * P.H + h) * P.V * P.K + (long long)p0 * P.K;
    const int     nr = min(kTV, P.V - p0);
    state_piece   sp(P.Kp / 4, kOutMmaThreads);
    if ((P.K & 3) == 0) { /* block-uniform: 16-byte rows */
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int r = sp.r, c = 4 * sp.c;
            sp.next();
            f[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r < nr && c < P.K) f[u] = __ldg(reinterpret_cast<const float4 *>(st + (r * P.K + c)));
        }
    } else {
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int r = sp.r, c = 4 * sp.c;
            sp.next();
            f[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r < nr && c < P.K) { /* K is even: c + 1 < K whenever c < K */
                const float * src = st + (r * P.K + c);
                f[u] = make_float4(src[0], src[1], c + 2 < P.K ? src[2] : 0.0f, c + 3 < P.K ? src[3] : 0.0f);
            }
        }
    }
}

/* This thread's pieces of the chunk's raw angles when P.vang (angles of v's dtype, unit inner
 * stride, 16-byte rows, A % 8 == 0): piece o = threadIdx.x + u·NT is token o/(A/8), angles
 * 8·(o % (A/8)) .. +7. A ≤ K/2 ≤ 64 on the tensor-core path, so L·A/8 ≤ 512 = NP·NT pieces.
 * Zeros (unused) otherwise. */
const int kAngPieces = 4;
template <int MODE, int NP = kAngPieces, int NT = kFastThreads> /* NP·NT = 512 pieces */
__device__ __forceinline__ void load_angle_rows(const m3_fwd_args & P, const m3_chunk & ch, int h, uint4 (&r)[NP]) {
    typedef typename cfg<MODE>::T T;
    const int                     A8 = P.A / 8, total = P.vang ? ch.len * A8 : 0;
#pragma unroll
    for (int u = 0; u < NP; ++u) {
        const int o = threadIdx.x + u * NT;
        r[u] = make_uint4(0u, 0u, 0u, 0u);
        if (o < total) {
            const int i = o / A8, m0 = (o - i * A8) * 8;
            r[u] = __ldg(reinterpret_cast<const uint4 *>((const T *)P.ang.p + ch.row * P.ang.s[0] +
                                                         (ch.t0 + i) * P.ang.s[1] + h * P.ang.s[2] + m0));
        }
    }
}

/* θ of every token of the chunk for the fused op, walked in token groups: th holds the terms
 * π·tanh(raw_i)·dt_i; NG groups per angle (NG·A ≤ blockDim, NG·A ≤ kPartMax, NG ≤ 16): thread (g,
 * m) sums its group's terms, then adds the sums of the groups before it (in group order) and
 * walks its group again writing wrap(θ_enter + running sum). NG depends on blockDim only up to
 * kPartMax, so blocks of 128 and 256 threads (and chunk_prep_kernel, which reproduces the walk at
 * kPrepThreads) give the same θ bit for bit. part: NG·A ≤ kPartMax floats. */
__device__ inline void theta_walk(const m3_fwd_args & P, const m3_chunk & ch, int w, int h, float * th, float * part) {
    const int L = ch.len, A = P.A;
    int       NG = 1;
    while (NG < 16 && 2 * NG * A <= (int)blockDim.x && 2 * NG * A <= kPartMax) NG *= 2;
    const int span = kC / NG; /* kC = 64 and NG ≤ 16: span ≥ 4 */
    if (NG > 1) {
        for (int o = threadIdx.x; o < NG * A; o += blockDim.x) {
            const int g = o / A, m = o - g * A, i1 = min(L, (g + 1) * span);
            float     run = 0.0f;
            for (int i = g * span; i < i1; ++i) run += th[i * A + m];
            part[o] = run;
        }
        __syncthreads();
    }
    for (int o = threadIdx.x; o < NG * A; o += blockDim.x) {
        const int   g = o / A, m = o - g * A, i1 = min(L, (g + 1) * span);
        const float base = P.theta0[((long long)w * P.H + h) * A + m];
        float       run = 0.0f;
        for (int gg = 0; gg < g; ++gg) run += part[gg * A + m];
        for (int i = g * span; i < i1; ++i) {
            run += th[i * A + m];
            th[i * A + m] = wrap2pi(base + run);
        }
    }
    __syncthreads();
}

/* θ of every token of the chunk into th[i·A + m] from element loads: the given cumulative
 * angles, or (fused op) the terms walked by theta_walk; 8 independent loads in flight per
 * thread per round. */
__device__ inline void chunk_theta_grouped(const m3_fwd_args & P, const m3_chunk & ch, int w, int h, const float * dtv,
                                           float * th, float * part) {
    const int L = ch.len, A = P.A;
    if (A == 0) return;
    /* the terms, 8 independent loads in flight per thread per round */
    const int LA = L * A, nt = blockDim.x;
    for (int o0 = threadIdx.x; o0 < LA; o0 += 8 * nt) {
        float raw[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int o = o0 + u * nt, i = o / A, m = o - (o / A) * A;
            raw[u] = o < LA ? ld4(P.ang, ch.row, ch.t0 + i, h, m) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int o = o0 + u * nt, i = o / A;
            if (o < LA) th[o] = P.fused ? (kPi * tanhf(raw[u])) * dtv[i] : raw[u];
        }
    }
    __syncthreads();
    if (P.fused) theta_walk(P, ch, w, h, th, part);
}

/* θ of the chunk from load_angle_rows' pieces when P.vang (else chunk_theta_grouped's element
 * loads), with the same walk; the fused op's terms take tanh_fast on the vector rows. */
template <int MODE, int NP = kAngPieces, int NT = kFastThreads>
__device__ inline void chunk_theta_rows(const m3_fwd_args & P, const m3_chunk & ch, int w, int h, const float * dtv,
                                        float * th, float * part, const uint4 (&r)[NP]) {
    if (P.A == 0) return;
    if (!P.vang) {
        chunk_theta_grouped(P, ch, w, h, dtv, th, part);
        return;
    }
    const int A = P.A, A8 = A / 8, total = ch.len * A8;
#pragma unroll
    for (int u = 0; u < NP; ++u) {
        const int o = threadIdx.x + u * NT;
        if (o < total) {
            const int i = o / A8, m0 = (o - i * A8) * 8;
            float     x[8];
            unpack8<MODE>(x, r[u]);
#pragma unroll
            for (int e = 0; e < 8; ++e) th[i * A + m0 + e] = P.fused ? (kPi * tanh_fast(x[e])) * dtv[i] : x[e];
        }
    }
    __syncthreads();
    if (P.fused) theta_walk(P, ch, w, h, th, part);
}

/* v at (row i, column cbase + c) of a block's v tile: rows of kFLd elements, or (VSWZ) the wgmma
 * kernel's 128-byte swizzled tile */
template <int MODE, bool VSWZ>
__device__ __forceinline__ const typename cfg<MODE>::T * v_tile_at(const unsigned char * vt, int i, int cbase, int c) {
    typedef typename cfg<MODE>::T T;
    if constexpr (VSWZ) {
        return reinterpret_cast<const T *>(vt + ssmi_wg::swz_off(i, cbase + c));
    } else {
        const T * vrow = reinterpret_cast<const T *>(vt) + i * kFLd + cbase;
        return &vrow[c];
    }
}

/* The shared-memory epilogue of the output kernels on NT column tiles of 8 from column cbase of
 * this warp's rows ri0, ri1: + (D + γ_i·d_i)·v_i, the gate, the output staged over z in zs (each
 * thread reads and writes only its own pairs), marking a non-finite one (mark_nonfinite); then the
 * final v state (block-uniform; v is exact in T). v is read from vt as v_tile_at (VSWZ: the wgmma kernel's swizzled tile). */
template <int MODE, bool VSWZ, int NT>
__device__ __forceinline__ void staged_epilogue(const m3_fwd_args & P, const m3_chunk & ch, int h, int p0, int L,
                                                const float (&y)[8][4], const unsigned char * vt,
                                                typename cfg<MODE>::T * zs, float dh, const m3_scal & sc,
                                                const float * dd, int ri0, int ri1, int cbase) {
    typedef typename cfg<MODE>::T T;
    const int                     lane = threadIdx.x & 31;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int i = hf ? ri1 : ri0;
        if (i >= L) continue;
        const float diag = dh + sc.gam[i] * dd[i];
        T *         zrow = zs + i * kFLd + cbase;
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const int pc = t * 8 + 2 * (lane & 3);
            if (p0 + cbase + pc >= P.V) continue; /* V % 8 == 0: both of the pair are inside otherwise */
            const float2 xv =
                t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(v_tile_at<MODE, VSWZ>(vt, i, cbase, pc)));
            float v0 = fmaf(diag, xv.x, y[t][2 * hf]), v1 = fmaf(diag, xv.y, y[t][2 * hf + 1]);
            store_ypre(P, ch.row, ch.t0 + i, h, p0 + cbase + pc, v0, v1, true);
            if (P.has_z) {
                const float2 zz = t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(&zrow[pc]));
                v0 *= silu_fast(zz.x);
                v1 *= silu_fast(zz.y);
            }
            if (!isfinite(v0) || !isfinite(v1)) mark_nonfinite(P);
            *reinterpret_cast<uint32_t *>(&zrow[pc]) = t2<MODE>::pack(v0, v1);
        }
    }
    if (ch.last && P.fin_v.present && L > 0) {
        const int nc = min(kTV, P.V - p0);
        for (int pp = threadIdx.x; pp < nc; pp += blockDim.x)
            st3(P.fin_v, ch.seq, h, p0 + pp, from_t(*v_tile_at<MODE, VSWZ>(vt, L - 1, 0, pp)));
    }
}

/* The causal decay mask of score fragments (NT column tiles of 8 from token jb of this lane's
 * pairs; rows ri0, ri1 with cumulative decays ci0, ci1): P_ij = score · e^{c_i − c_j} · σ_j for
 * j < i < L (ex2.approx decay), 0 elsewhere. */
template <int NT>
__device__ __forceinline__ void mask_scores(float (&s)[NT][4], int jb, int ri0, int ri1, float ci0, float ci1, int L,
                                            const m3_scal & sc) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int   i = (e >> 1) ? ri1 : ri0;
            const float ci = (e >> 1) ? ci1 : ci0;
            const int   j = jb + t * 8 + (e & 1);
            s[t][e] = (i < L && j < i) ? s[t][e] * ex2_approx((ci - sc.cm[j]) * kLog2e) * sc.sig[j] : 0.0f;
        }
    }
}

/* The end of the 8-warp output blocks (mma.sync or wgmma). The exchange: the lower warp
 * (warpgroup) finishes column tiles 0..3, the upper 4..7; each warp hands the other tiles to its
 * partner (warp ^ 4, the same 16 rows) through red (the dead θ region), in fragment order (lane l's
 * float4 at l: no bank conflicts, no index arithmetic), and keeps its own in y[0..3]. Then the
 * shared-memory epilogue on the warp's 32 columns: + (D + γ_i·d_i)·v_i, the gate, the output staged
 * over z (each thread reads and writes only its own pairs), the final v state, and the staged
 * output stored in 16-byte row pieces. v is read from vt: rows of kFLd elements or, VSWZ, the
 * 128-byte swizzled tile of the wgmma kernel (ssmi_wg::swz_off). */
template <int MODE, bool VSWZ>
__device__ __forceinline__ void out_exchange_epilogue(const m3_fwd_args & P, const m3_chunk & ch, int h, int p0, int L,
                                                      float (&y)[8][4], float4 * red, const unsigned char * vt,
                                                      typename cfg<MODE>::T * zs, float dh, const m3_scal & sc,
                                                      const float * dd, int ri0, int ri1) {
    typedef typename cfg<MODE>::T T;
    const int                     lane = threadIdx.x & 31, warp = threadIdx.x >> 5, upper = warp >> 2;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        const float4 give = upper ? make_float4(y[t][0], y[t][1], y[t][2], y[t][3])
                                  : make_float4(y[t + 4][0], y[t + 4][1], y[t + 4][2], y[t + 4][3]);
        red[(warp * 4 + t) * 32 + lane] = give;
#pragma unroll
        for (int e = 0; e < 4; ++e) y[t][e] = upper ? y[t + 4][e] : y[t][e];
    }
    __syncthreads(); /* the partners' tiles */
    {
        const float4 * got = red + (warp ^ 4) * 4 * 32 + lane;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const float4 g = got[t * 32];
            y[t][0] += g.x, y[t][1] += g.y, y[t][2] += g.z, y[t][3] += g.w;
        }
    }
    staged_epilogue<MODE, VSWZ, 4>(P, ch, h, p0, L, y, vt, zs, dh, sc, dd, ri0, ri1, upper * 32);
    __syncthreads(); /* the staged output */
    {
        const int       nc = min(kTV, P.V - p0);
        const long long ob = ch.row * P.out.s[0] + ch.t0 * P.out.s[1] + h * P.out.s[2] + p0;
#pragma unroll 1
        for (int o = threadIdx.x; o < L * (kTV / 8); o += blockDim.x) {
            const int r = o >> 3, c = (o & 7) * 8;
            if (c < nc)
                *reinterpret_cast<uint4 *>((T *)P.out.p + ob + r * P.out.s[1] + c) =
                    *reinterpret_cast<const uint4 *>(&zs[r * kFLd + c]);
        }
    }
}

/* acc (16 state rows × NB·16 columns) += Vᵀ·(w∘K̂) over ksteps k-steps of 16 tokens, per warp
 * of the 8-warp state kernels; ab: this warp's transposed v fragment at k-step 0, kbh/kbl: its
 * first column block's split w∘K̂ at k-step 0, both at this lane's ldmatrix offset. NB is a
 * template argument so that the warp-uniform count is one branch outside the loop. */
template <int MODE, int NB, bool LO = true> /* LO false: the kbh products only (kbl unused) */
__device__ __forceinline__ void vk_product(float (&acc)[8][4], const typename cfg<MODE>::T * ab,
                                           const typename cfg<MODE>::T * kbh, const typename cfg<MODE>::T * kbl,
                                           int ksteps, int LK) {
#pragma unroll 1 /* 64 registers: no second k-step's fragments in flight */
    for (int ks = 0; ks < ksteps; ++ks) {
        uint32_t a[4];
        ldsm4_t(a, ab + ks * 16 * kFLd);
#pragma unroll
        for (int np = 0; np < NB; ++np) {
            uint32_t bh[4], bl[4];
            ldsm4_t(bh, kbh + ks * 16 * LK + np * 16);
            if (LO) ldsm4_t(bl, kbl + ks * 16 * LK + np * 16);
            mma16816<MODE>(acc[2 * np], a, bh[0], bh[1]);
            mma16816<MODE>(acc[2 * np + 1], a, bh[2], bh[3]);
            if (LO) {
                mma16816<MODE>(acc[2 * np], a, bl[0], bl[1]);
                mma16816<MODE>(acc[2 * np + 1], a, bl[2], bl[3]);
            }
        }
    }
}

} /* namespace ssmi_siso */

#endif /* SSMI_CUDA_SISO_TILES_CUH */
