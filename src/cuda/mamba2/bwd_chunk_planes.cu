/*
 * bwd_chunk_planes.cu — the chunk kernel of the Mamba-2 combined backward for bf16 x, B, C and
 * dout (entry chunked_planes; bwd.cuh lists the steps, bwd_chunk.cu's bwd_chunk_kernel the
 * formulas, which this kernel computes the same way). One block of kPlanesThreads threads per
 * (chunk, group, slice of the group's heads: bw_args.slice heads, the last slice of a group
 * possibly fewer; slice s0 + blockIdx.y of the current head batch, counted across groups), which loads
 * the chunk's B and C once and runs the steps below for each head of its slice in head order,
 * adding the heads' dB and dC up as it goes (step C). Every product
 * operand is written once into shared memory as bf16 planes (planes_geom): x, B and C as they
 * are (exact), the fp32 operands (δx, S, G and the [Q][Q] tables) as a rounded plane and a
 * remainder plane, so a product of two split operands is three
 * bf16 products (the lo·lo term, ~2^-16 relative, dropped). Warps compute 16 × 16 output tiles by
 * ldmatrix + mma.sync m16n8k16 with fp32 accumulators; the epilogues (the scale of a row, the
 * per-tile row sums of q, r and ddt_loc, the stores) run on the accumulators in registers.
 * Every sum has a fixed order (k ascending in steps of 16, fixed shuffle trees, partials summed
 * in column-tile order), so the bytes depend on neither the run nor the grid. The entry's
 * chunk-local states and state gradients (steps 2 and 4) run on the same planes
 * (bwd_states_planes_kernel).
 *   load  (once per block) the B and C planes; (per head) the [Q] vectors, the x plane, the δx
 *         planes and the dz factor, S and G planes and e^{cl}·<G, S>; dD partials
 *   A1    per (i, j) tile below the diagonal: CB = C·Bᵀ and δx·xᵀ → W1, W2, dCB, CB·dCB (CB is the
 *         group's, the same for every head: the fixed instance forms it at the slice's first head only)
 *   A2    per (i, p) tile: C·Sᵀ → q partials, then (dz) e^{cm}·C·Sᵀ + W1·x + D·x → dz;
 *         e^{cl−cm}·B·Gᵀ → r partials, + W2ᵀ·δx = acc → dx, ddt_loc partials
 *   C     per (j, n) tile: e^{cl−cm_j}·dt_j·x·G + dCBᵀ·C → dB;  per (i, n): e^{cm_i}·δx·S + dCB·B → dC;
 *         each added to the slice's running sum of the earlier heads; intra sums from CB·dCB. With
 *         bw_args.sparts, A1 sums dCB over the slice's heads instead (in registers) and C runs at the
 *         slice's last head only, with Σ dCB's two products: bwd_state_parts.cu adds the state parts
 *   end   warp 0: the ddA recurrence, ddt, dA and ddt_bias partials.
 */
#include "../../core/ssmi_scalar.h"
#include "../common/device_math.cuh"
#include "../common/mma.cuh"
#include "bwd.cuh"

#include <type_traits>

namespace ssmi_m2bwd {
namespace {

using namespace ssmi_mma;

__device__ __forceinline__ float2 unpack_bf2(uint32_t u) { return t2<M_BF16>::unpack(u); }

/* v0 at element offset off of output o and, with two, v1 at the next element of the row (off +
 * the last stride): one 4-byte bf16 pair or one 8-byte fp32 pair where the row has unit stride
 * and the address is aligned, else element by element. */
__device__ __forceinline__ void store_pair(const bw_out & o, long long off, float v0, float v1, bool two) {
    if (two && o.s[3] == 1) {
        if (o.dtype == SSM_DTYPE_BF16 && (((uintptr_t)((bf16 *)o.p + off)) & 3) == 0) {
            *(uint32_t *)((bf16 *)o.p + off) = t2<M_BF16>::pack(v0, v1);
            return;
        }
        if (o.dtype == SSM_DTYPE_F32 && (((uintptr_t)((float *)o.p + off)) & 7) == 0) {
            *(float2 *)((float *)o.p + off) = make_float2(v0, v1);
            return;
        }
    }
    ssmi_cu_st(o.p, o.dtype, off, v0);
    if (two) ssmi_cu_st(o.p, o.dtype, off + o.s[3], v1);
}
/* How pairs go into output o where every pair is aligned: 1 as bf16 pairs, 2 as fp32 pairs; 0 where
 * that is not known for all of them (store_pair's own checks then, pair by pair). All are aligned
 * where the row has unit stride, the other strides are even (an even column keeps an even offset)
 * and the base is aligned to a pair. */
__device__ __forceinline__ int pair_mode(const bw_out & o) {
    if (o.s[3] != 1 || ((o.s[0] | o.s[1] | o.s[2]) & 1) != 0) return 0;
    if (o.dtype == SSM_DTYPE_BF16 && ((uintptr_t)o.p & 3) == 0) return 1;
    if (o.dtype == SSM_DTYPE_F32 && ((uintptr_t)o.p & 7) == 0) return 2;
    return 0;
}
/* store_pair at an even column offset with the output's pair_mode: the same values, one store. */
__device__ __forceinline__ void store_pair(const bw_out & o, int mode, long long off, float v0, float v1, bool two) {
    if (two && mode == 1) {
        *(uint32_t *)((bf16 *)o.p + off) = t2<M_BF16>::pack(v0, v1);
        return;
    }
    if (two && mode == 2) {
        *(float2 *)((float *)o.p + off) = make_float2(v0, v1);
        return;
    }
    store_pair(o, off, v0, v1, two);
}
/* The same into a unit-stride fp32 row. */
__device__ __forceinline__ void store_pair(float * p, float v0, float v1, bool two) {
    if (two && ((uintptr_t)p & 7) == 0) {
        *(float2 *)p = make_float2(v0, v1);
        return;
    }
    p[0] = v0;
    if (two) p[1] = v1;
}
/* Its reverse: v0 = p[0] and, with two, v1 = p[1] (else 0). */
__device__ __forceinline__ void load_pair(const float * p, float & v0, float & v1, bool two) {
    if (two && ((uintptr_t)p & 7) == 0) {
        const float2 v = *(const float2 *)p;
        v0 = v.x, v1 = v.y;
        return;
    }
    v0 = p[0], v1 = two ? p[1] : 0.0f;
}

/* A prefetch of the 128-byte line holding p into L2 (a hint: nothing comes back, nothing waits). */
__device__ __forceinline__ void prefetch_l2(const void * p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

/* L2 prefetches of what the load step of head h (workspace slot w, S and G at offset so; the
 * chunk, head and state sizes Q, P, N) reads
 * from global memory: its dt, cm and dt-factor rows, S and G, and rows [0, L) of x, dout and z
 * (where present) where those rows have unit stride. The block issues them for its next head
 * before working on the current one, so the next load step finds its data in L2. Every address
 * lies inside its tensor. */
__device__ __forceinline__ void prefetch_head(const bw_args & a, int Q, int P, int N, const bw_chunk & ck, int h,
                                              long long w, long long so, int L) {
    const long long PN = (long long)P * N, sn = (PN * 4 + 127) / 128, qn = ((long long)Q * 4 + 127) / 128;
    for (long long e = threadIdx.x; e < 2 * sn; e += blockDim.x) /* line e of S, then line e − sn of G */
        prefetch_l2((const char *)((e < sn ? a.st : a.gs) + so) + (e < sn ? e : e - sn) * 128);
    for (long long e = threadIdx.x; e < 3 * qn; e += blockDim.x) /* lines of the dt, cm and dt-factor rows */
        prefetch_l2((const char *)((e < qn ? a.dtv : e < 2 * qn ? a.cmv : a.dfac) + w * Q) +
                    (e < qn ? e : e < 2 * qn ? e - qn : e - 2 * qn) * 128);
#pragma unroll
    for (int r = 0; r < 3; ++r) {
        if (r == 2 && !a.has_z) break;
        const ssmi_cu_view & v = r == 0 ? a.x : r == 1 ? a.dout : a.z;
        if (v.s[3] != 1) continue;
        const int       es = v.dtype == SSM_DTYPE_F64 ? 8 : v.dtype == SSM_DTYPE_F32 ? 4 : 2, per = 128 / es;
        const int       lines = (P + per - 1) / per;
        const long long base = off4(v.s, ck.row, ck.t0, h, 0); /* row i, element k at base + i·s[1] + k */
        for (int e = threadIdx.x; e < L * lines; e += blockDim.x) {
            const int i = lines == 1 ? e : e / lines, k = lines == 1 ? 0 : (e % lines) * per;
            prefetch_l2((const char *)v.p + (base + i * v.s[1] + k) * es);
        }
    }
}

/* load_exact takes 16-byte pieces of v (n columns). */
__device__ __forceinline__ bool exact_vec_ok(const ssmi_cu_view & v, int n) { return n % 8 == 0 && rows16(v); }
/* load_split takes 16-byte pieces of d (and z, gated). */
__device__ __forceinline__ bool split_vec_ok(const ssmi_cu_view & d, bool gated, const ssmi_cu_view & z, int n) {
    return n % 8 == 0 && rows16(d) && (!gated || (z.dtype == SSM_DTYPE_BF16 && rows16(z)));
}
/* One element of load_split: the gated value d·silu(z) (d without z) and its dz factor into *f (0
 * without z). */
__device__ __forceinline__ float gate_one(float dv, float zv, bool gated, float * f) {
    if (!gated) {
        *f = 0.0f;
        return dv;
    }
    return silu_gate(dv, zv, f);
}
/* One 16-byte piece of load_split (8 bf16 of d and of z at row i, column j), gated, times sc and
 * split into hi/lo; with dzf, the dz factors into dzf. */
__device__ __forceinline__ void put_split8(uint4 dv, uint4 zv, float sc, bool gated, bf16 * hi, bf16 * lo, float * dzf,
                                           int ld, int lz, int i, int j) {
    const uint32_t * dw = (const uint32_t *)&dv;
    const uint32_t * zw = (const uint32_t *)&zv;
    uint32_t         hv[4], lv[4];
    float            f[8];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const float2 a2 = unpack_bf2(dw[c]), z2 = unpack_bf2(zw[c]);
        const float  g0 = gate_one(a2.x, z2.x, gated, &f[2 * c]) * sc, g1 = gate_one(a2.y, z2.y, gated, &f[2 * c + 1]) * sc;
        split2<M_BF16>(g0, g1, hv[c], lv[c]);
    }
    *(uint4 *)(hi + i * ld + j) = make_uint4(hv[0], hv[1], hv[2], hv[3]);
    *(uint4 *)(lo + i * ld + j) = make_uint4(lv[0], lv[1], lv[2], lv[3]);
    if (dzf != nullptr) {
        *(float4 *)(dzf + i * lz + j) = make_float4(f[0], f[1], f[2], f[3]);
        *(float4 *)(dzf + i * lz + j + 4) = make_float4(f[4], f[5], f[6], f[7]);
    }
}
/* Four S and four G elements (a 16-byte piece of each, row p, columns 4c..) of load_states into
 * their split planes at o; returns their part of <G, S>. */
__device__ __forceinline__ float put_state4(float4 sv, float4 gv, bf16 * sh, bf16 * sl, bf16 * gh, bf16 * gl, int o) {
    uint32_t h0, l0, h1, l1;
    split2<M_BF16>(sv.x, sv.y, h0, l0);
    split2<M_BF16>(sv.z, sv.w, h1, l1);
    *(uint2 *)(sh + o) = make_uint2(h0, h1), *(uint2 *)(sl + o) = make_uint2(l0, l1);
    split2<M_BF16>(gv.x, gv.y, h0, l0);
    split2<M_BF16>(gv.z, gv.w, h1, l1);
    *(uint2 *)(gh + o) = make_uint2(h0, h1), *(uint2 *)(gl + o) = make_uint2(l0, l1);
    return gv.x * sv.x + gv.y * sv.y + gv.z * sv.z + gv.w * sv.w;
}

/* Rows [0, L) of a bf16 (batch, S, K, n) view (head/group k) into an exact plane [qp][ld] of
 * width w (zeros for rows ≥ L and columns ≥ n): with unit stride, n % 8 = 0 and 16-byte aligned
 * rows as 16-byte copies, else element by element. */
__device__ __forceinline__ void load_exact(bf16 * dst, int ld, int w, int qp, const ssmi_cu_view & v, const bw_chunk & ck,
                                           int k, int n, int L) {
    const bf16 * src = (const bf16 *)v.p;
    const bool   vec = exact_vec_ok(v, n);
    const long long base = off4(v.s, ck.row, ck.t0, k, 0); /* element (i, j) at base + i·s[1] + j·s[3] */
    if (vec) {
        const int w8 = w / 8, total = qp * w8;
        for (int e0 = threadIdx.x; e0 < total; e0 += 2 * blockDim.x) {
            uint4 val[2];
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int e = e0 + u * (int)blockDim.x, i = e / w8, j = (e % w8) * 8;
                val[u] = (e < total && i < L && j < n) ? *(const uint4 *)(src + (base + i * v.s[1] + j))
                                                       : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int e = e0 + u * (int)blockDim.x, i = e / w8, j = (e % w8) * 8;
                if (e < total) *(uint4 *)(dst + i * ld + j) = val[u];
            }
        }
        return;
    }
    const int total = qp * w;
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
        const int i = e / w, j = e % w;
        dst[i * ld + j] = (i < L && j < n) ? src[base + i * v.s[1] + j * v.s[3]] : __float2bfloat16_rn(0.0f);
    }
}

/* Rows [0, L) of head h of the bf16 view d, gated by z where given (d·silu(z)) and times
 * scale[i] where given, into the split planes hi/lo [qp][ld] of width w (zeros past L and n);
 * with dzf, the dz factor d·σ(z)(1 + z(1 − σ(z))) (0 without z) into dzf [qp][lz]. With unit
 * stride, n % 8 = 0 and 16-byte aligned rows (z too, in bf16) 8 elements per load, else one.
 * gated: z is present. */
__device__ __forceinline__ void load_split(bf16 * hi, bf16 * lo, float * dzf, int ld, int lz, int w, int qp,
                                           const ssmi_cu_view & d, bool gated, const ssmi_cu_view & z,
                                           const float * scale, const bw_chunk & ck, int h, int n, int L) {
    auto gate = [&](float dv, float zv, float * f) { return gate_one(dv, zv, gated, f); };
    /* element (i, j) of d at dbase + i·d.s[1] + j·d.s[3], of z at zbase + i·z.s[1] + j·z.s[3] */
    const long long dbase = off4(d.s, ck.row, ck.t0, h, 0), zbase = gated ? off4(z.s, ck.row, ck.t0, h, 0) : 0;
    if (split_vec_ok(d, gated, z, n)) {
        const int w8 = w / 8, total = qp * w8;
        for (int e0 = threadIdx.x; e0 < total; e0 += 2 * blockDim.x) {
            uint4 dv[2], zv[2];
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int  e = e0 + u * (int)blockDim.x, i = e / w8, j = (e % w8) * 8;
                const bool in = e < total && i < L && j < n;
                dv[u] = in ? *(const uint4 *)((const bf16 *)d.p + (dbase + i * d.s[1] + j)) : make_uint4(0u, 0u, 0u, 0u);
                zv[u] = in && gated ? *(const uint4 *)((const bf16 *)z.p + (zbase + i * z.s[1] + j))
                                    : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int e = e0 + u * (int)blockDim.x, i = e / w8, j = (e % w8) * 8;
                if (e >= total) continue;
                put_split8(dv[u], zv[u], scale != nullptr ? scale[i] : 1.0f, gated, hi, lo, dzf, ld, lz, i, j);
            }
        }
        return;
    }
    const int w2 = w / 2, total = qp * w2;
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
        const int i = e / w2, j = (e % w2) * 2;
        float     g[2], f[2];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            g[u] = 0.0f, f[u] = 0.0f;
            if (i >= L || j + u >= n) continue;
            const float dv = __bfloat162float(((const bf16 *)d.p)[dbase + i * d.s[1] + (j + u) * d.s[3]]);
            const float zv = gated ? ssmi_cu_ld(z.p, z.dtype, zbase + i * z.s[1] + (j + u) * z.s[3]) : 0.0f;
            g[u] = gate(dv, zv, &f[u]) * (scale != nullptr ? scale[i] : 1.0f);
        }
        split_pair(g[0], g[1], hi, lo, i * ld + j);
        if (dzf != nullptr) dzf[i * lz + j] = f[0], dzf[i * lz + j + 1] = f[1];
    }
}

/* The workspace's P × N S and G (at offset so of st and gs) into their split planes [pp][ln] (zeros
 * past P, N), as 16-byte pieces where N % 4 = 0 (the slots are 16-byte aligned then); returns
 * this thread's part of <G, S>. */
__device__ __forceinline__ float load_states(bf16 * sh, bf16 * sl, bf16 * gh, bf16 * gl, const planes_geom & gm,
                                             const bw_args & a, int P, int N, long long so) {
    const int     w2 = gm.np / 2, total = gm.pp * w2;
    const float * S = a.st + so, *G = a.gs + so;
    float         part = 0.0f;
    if (N % 4 == 0) { /* 16-byte pieces: a warp per row, kR rows of each in flight */
        constexpr int kR = 4;
        const int     n4 = gm.np / 4, nw = blockDim.x >> 5, lane = threadIdx.x & 31;
        for (int p0 = threadIdx.x >> 5; p0 < gm.pp; p0 += kR * nw)
            for (int c = lane; c < n4; c += 32) {
                float4 sv[kR], gv[kR];
#pragma unroll
                for (int r = 0; r < kR; ++r) {
                    const int  p = p0 + r * nw;
                    const bool in = p < P && 4 * c < N;
                    sv[r] = in ? *(const float4 *)(S + (long long)p * N + 4 * c) : make_float4(0.f, 0.f, 0.f, 0.f);
                    gv[r] = in ? *(const float4 *)(G + (long long)p * N + 4 * c) : make_float4(0.f, 0.f, 0.f, 0.f);
                }
#pragma unroll
                for (int r = 0; r < kR; ++r) {
                    const int p = p0 + r * nw;
                    if (p >= gm.pp) continue;
                    part += put_state4(sv[r], gv[r], sh, sl, gh, gl, p * gm.ln + 4 * c);
                }
            }
        return part;
    }
    constexpr int kU = 4;
    for (int e0 = threadIdx.x; e0 < total; e0 += kU * blockDim.x) {
        float sv[kU][2], gv[kU][2];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int e = e0 + u * (int)blockDim.x, p = e / w2, n = (e % w2) * 2;
#pragma unroll
            for (int v = 0; v < 2; ++v) {
                const bool in = e < total && p < P && n + v < N;
                sv[u][v] = in ? S[(long long)p * N + n + v] : 0.0f;
                gv[u][v] = in ? G[(long long)p * N + n + v] : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int e = e0 + u * (int)blockDim.x, p = e / w2, n = (e % w2) * 2;
            if (e >= total) continue;
            part += gv[u][0] * sv[u][0];
            part += gv[u][1] * sv[u][1];
            split_pair(sv[u][0], sv[u][1], sh, sl, p * gm.ln + n);
            split_pair(gv[u][0], gv[u][1], gh, gl, p * gm.ln + n);
        }
    }
    return part;
}

/* Shared memory of bwd_states_planes_kernel: the weighted rows (split planes [qp][lp]), B or C
 * (an exact plane [qp][ln]) and the [qp] weights. */
__host__ __device__ inline size_t states_planes_bytes(const planes_geom & gm) {
    return 2 * (size_t)gm.qp * gm.lp * 2 + (size_t)gm.qp * gm.ln * 2 + (size_t)gm.qp * 4;
}

/* Steps 2 and 4 of bwd.cuh for one (chunk, head), into its workspace slot [P][N]: the chunk-local
 * state s_c = Σ_j (e^{cl−cm_j}·dt_j·x_j)ᵀ·B_j (kDst false) or the state gradient through the
 * outputs dS_c = Σ_i (e^{cm_i}·δx_i)ᵀ·C_i (kDst true). The weighted rows go in as split planes,
 * B or C exact; warps take 16 × 16 tiles of the [P][N] output, tokens ascending. */
template <bool kDst, int kQ, int kP, int kN> /* kQ, kP, kN as in bwd_chunk_planes_kernel */
__global__ void __launch_bounds__(kThreads) bwd_states_planes_kernel(bw_args a) {
    extern __shared__ float4 sm4[];
    __builtin_assume(blockDim.x == kThreads);
    const int         Q = kQ > 0 ? kQ : a.Q, P = kP > 0 ? kP : a.P, N = kN > 0 ? kN : a.N;
    const planes_geom gm = planes_geom_of(Q, P, N);
    bf16 *            ah = (bf16 *)sm4, *al = ah + gm.qp * gm.lp, *bp = al + gm.qp * gm.lp;
    float *           wv = (float *)(bp + gm.qp * gm.ln);
    const long long   ci = blockIdx.x;
    const int         h = a.h0 + blockIdx.y;
    const bw_chunk    ck = a.chunks[ci];
    const int         L = ck.len, Kq = (L + 15) / 16 * 16;
    const long long   w = ci * a.H + h;
    const float *     cm = a.cmv + w * Q;
    const float       cl = cm[L - 1];
    for (int i = threadIdx.x; i < gm.qp; i += blockDim.x)
        wv[i] = i >= L ? 0.0f : kDst ? expf(cm[i]) : expf(cl - cm[i]) * a.dtv[w * Q + i];
    __syncthreads();
    if (kDst) {
        load_split(ah, al, nullptr, gm.lp, 0, gm.pp, gm.qp, a.dout, a.has_z != 0, a.z, wv, ck, h, P, L);
        load_exact(bp, gm.ln, gm.np, gm.qp, a.c, ck, h / a.R, N, L);
    } else {
        load_split(ah, al, nullptr, gm.lp, 0, gm.pp, gm.qp, a.x, false, a.x, wv, ck, h, P, L);
        load_exact(bp, gm.ln, gm.np, gm.qp, a.b, ck, h / a.R, N, L);
    }
    __syncthreads();
    float * const out = (kDst ? a.gs : a.st) + state_at(a, ci, h, (long long)P * N);
    const int     lane = threadIdx.x & 31, g4 = lane >> 2, t4 = lane & 3, nN = gm.np / 16;
    for (int t = threadIdx.x >> 5; t < (gm.pp / 16) * nN; t += blockDim.x >> 5) {
        const int p0 = (t / nN) * 16, n0 = (t % nN) * 16;
        float     c[2][4];
        zero_acc(c);
        tile_mma<true, true, true, false>(c, ah, al, gm.lp, bp, nullptr, gm.ln, p0, n0, 0, Kq);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int p = p0 + g4 + 8 * hh;
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    const int n = n0 + 8 * j + 2 * t4 + u;
                    if (p < P && n < N) out[(long long)p * N + n] = c[j][2 * hh + u];
                }
        }
    }
}

/* One block per (chunk, slice). kQ, kP, kN: the chunk, head and state sizes fixed at compile
 * time (0: a.Q, a.P, a.N at run time). Fixed, the plane pitches, tile counts and loader widths
 * are constants, which removes most of the kernel's integer work per tile (divisions by tile
 * counts, runtime pitches). The products, their order and so the bytes are those of the runtime
 * instance. */
template <int kQ, int kP, int kN>
__global__ void __launch_bounds__(kPlanesThreads, 1) bwd_chunk_planes_kernel(bw_args a) {
    extern __shared__ float4 sm4[];
    unsigned char * const sm = (unsigned char *)sm4;
    __builtin_assume(blockDim.x == kPlanesThreads);
    const int         Q = kQ > 0 ? kQ : a.Q, P = kP > 0 ? kP : a.P, N = kN > 0 ? kN : a.N;
    const long long   PN = (long long)P * N;
    const planes_geom gm = planes_geom_of(Q, P, N);
    bf16 *xh = (bf16 *)(sm + gm.x), *dxh = (bf16 *)(sm + gm.dxh), *dxl = (bf16 *)(sm + gm.dxl);
    bf16 *bh = (bf16 *)(sm + gm.b), *ch = (bf16 *)(sm + gm.c);
    bf16 *sh = (bf16 *)(sm + gm.sh), *sl = (bf16 *)(sm + gm.sl), *gh = (bf16 *)(sm + gm.gh), *gl = (bf16 *)(sm + gm.gl);
    bf16 *w1h = (bf16 *)(sm + gm.w1h), *w1l = (bf16 *)(sm + gm.w1l), *w2h = (bf16 *)(sm + gm.w2h);
    bf16 *w2l = (bf16 *)(sm + gm.w2l), *dch = (bf16 *)(sm + gm.dch), *dcl = (bf16 *)(sm + gm.dcl);
    float *prod = (float *)(sm + gm.prod), *dzf = (float *)(sm + gm.dzf);
    float *qpart = (float *)(sm + gm.qpart), *rpart = (float *)(sm + gm.rpart), *tpart = (float *)(sm + gm.tpart);
    float *dtv = (float *)(sm + gm.vec), *fac = dtv + gm.qp, *cms = fac + gm.qp, *ecm = cms + gm.qp;
    float *eclm = ecm + gm.qp, *intra = eclm + gm.qp;
    float *dvec = (float *)(sm + gm.dvec), *red = (float *)(sm + gm.red), *ahs = (float *)(sm + gm.ah);

    const long long ci = blockIdx.x;
    const int       sk = a.s0 + blockIdx.y; /* the slice, numbered across groups */
    const int       grp = sk / a.nslices, slc = sk % a.nslices;
    const int       h0 = grp * a.R + slc * a.slice, h1 = min(h0 + a.slice, (grp + 1) * a.R); /* the slice's heads */
    const bw_chunk  ck = a.chunks[ci];
    const int       L = ck.len, Kq = (L + 15) / 16 * 16;
    const int       lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int       g4 = lane >> 2, t4 = lane & 3;
    const int       nT = gm.qp / 16, nP = gm.pp / 16, nN = gm.np / 16;
    /* P (N) fixed at a multiple of 16: every column of a tile lies inside P (N) */
    constexpr bool kWholeP = kP > 0 && kP % 16 == 0, kWholeN = kN > 0 && kN % 16 == 0;
    /* the products over all of P (N) padded to 16: trip counts known at compile time where P (N) is */
    constexpr int kPp = kP > 0 ? (kP + 15) / 16 * 16 : 0, kNp = kN > 0 ? (kN + 15) / 16 * 16 : 0;

    /* The fixed instance loads a head in one pass where every loader would take its 16-byte path
     * with one piece per thread: x, dout and z rows of P/8 pieces for Q rows over 512 threads, S and
     * G rows of 32 pieces, four rows per warp. */
    constexpr bool kOnePass = kQ > 0 && kP > 0 && kN > 0 && kQ * (kP / 8) == kPlanesThreads && kP % 16 == 0 &&
                              kP == 4 * (kPlanesThreads / 32) && kN == 4 * 32 && kQ <= kMaxQ;
    const bool     gated = a.has_z != 0;
    const bool     one_pass = kOnePass && exact_vec_ok(a.x, P) && split_vec_ok(a.dout, gated, a.z, P);
    /* the group's B and C, kept for every head of the slice (the first head's block_sum publishes them) */
    load_exact(bh, gm.ln, gm.np, gm.qp, a.b, ck, grp, N, L);
    load_exact(ch, gm.ln, gm.np, gm.qp, a.c, ck, grp, N, L);
    /* with sparts, Σ_h dCB_h of the slice's heads so far: warp w owns A1 tile w in every head (Q = 64:
     * 16 tiles, 16 warps), this lane its pairs (j, hh) of it */
    static_assert(kPlanesThreads / 32 == (64 / 16) * (64 / 16), "sparts: one A1 tile per warp at Q = 64");
    float dcb_run[2][2][2] = {};
    /* C·Bᵀ does not depend on the head (B and C are the group's): where warp w owns A1 tile w (Q = 64),
     * the first head's product is kept in registers for the slice's other heads */
    constexpr bool kKeepCB = kQ == 64;
    float          cb_keep[2][4]; /* zeros where the tile is not live */
    zero_acc(cb_keep);
    /* The fixed instance loads a head's x, dout, z, [Q] vectors and D into registers before the barrier
     * that opens the head (issued at the end of the head before, after this thread's last work in
     * it): the warps that wait there for warp 0's tail have those loads in flight meanwhile; S and G
     * (32 more registers) load after the barrier. Thread t's pieces are those the loaders' loops give
     * it (one of each at this size): the vectors and D at t < Q, x, dout and z at row t / (P/8),
     * columns 8·(t % (P/8)); S and G at rows warp + 16r (r < 4), columns 4·lane. */
    constexpr int kX8 = kP > 0 ? kP / 8 : 1; /* 16-byte pieces per x row */
    const int     xt = threadIdx.x, xi = xt / kX8, xj = (xt % kX8) * 8;
    const bool    xin = xi < L;
    struct head_pieces {
        float c, dt, f, dd;
        uint4 xv, dv, zv;
    };
    auto d_of = [&](int h, int p) {
        if (!a.has_d || p >= P) return 0.0f;
        return a.d2 ? ssmi_cu_ld(a.d.p, a.d.dtype, off2(a.d.s, h, p)) : ssmi_cu_ld(a.d.p, a.d.dtype, (long long)h * a.d.s[0]);
    };
    auto issue = [&](int h) {
        head_pieces     nx;
        const long long w = ci * a.H + h;
        const long long xo = off4(a.x.s, ck.row, ck.t0, h, 0) + xi * a.x.s[1] + xj;
        const long long dof = off4(a.dout.s, ck.row, ck.t0, h, 0) + xi * a.dout.s[1] + xj;
        const long long zo = gated ? off4(a.z.s, ck.row, ck.t0, h, 0) + xi * a.z.s[1] + xj : 0;
        const uint4     zero = make_uint4(0u, 0u, 0u, 0u);
        nx.c = nx.dt = nx.f = nx.dd = 0.0f;
        if (xt < kQ) nx.c = a.cmv[w * Q + xt], nx.dt = a.dtv[w * Q + xt], nx.f = a.dfac[w * Q + xt];
        if (xt < kP) nx.dd = d_of(h, xt);
        nx.xv = xin ? *(const uint4 *)((const bf16 *)a.x.p + xo) : zero;
        nx.dv = xin ? *(const uint4 *)((const bf16 *)a.dout.p + dof) : zero;
        nx.zv = xin && gated ? *(const uint4 *)((const bf16 *)a.z.p + zo) : zero;
        return nx;
    };
    head_pieces nx{};
    if (kOnePass && one_pass) nx = issue(h0);
    for (int h = h0; h < h1; ++h) {
        if (h > h0) __syncthreads(); /* the previous head's last reads of shared memory are done */
        const long long w = ci * a.H + h;
        const bool      first = h == h0, last = h == h1 - 1;
        /* load */
        const float * cmg = a.cmv + w * Q;
        const float   cl = cmg[L - 1];
        /* the [Q] vectors at i from cm, dt and the dt factor; D of channel p */
        auto put_vec = [&](int i, float c, float dt, float f) {
            dtv[i] = dt, fac[i] = f, cms[i] = c;
            ecm[i] = i < L ? expf(c) : 0.0f;
            eclm[i] = i < L ? expf(cl - c) : 0.0f;
        };
        /* A of the head for warp 0's tail, requested by thread 0 with the head's loads (the tail, after
         * the products, then reads it from shared memory instead of waiting on a global load) */
        float ahv = 0.0f;
        if (threadIdx.x == 0) ahv = head_a(a, h);
        float part; /* this thread's part of <G, S> */
        if (kOnePass && one_pass) {
            /* the head's pieces: S and G loaded now, the others by issue(h); into shared memory */
            const float * S = a.st + state_at(a, ci, h, PN), *G = a.gs + state_at(a, ci, h, PN);
            float4        sv[4], gv[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const long long o = (long long)(warp + 16 * r) * kN + 4 * lane;
                sv[r] = *(const float4 *)(S + o), gv[r] = *(const float4 *)(G + o);
            }
            if (xt < kQ) put_vec(xt, nx.c, nx.dt, nx.f);
            if (xt < kP) dvec[xt] = nx.dd;
            *(uint4 *)(xh + xi * gm.lp + xj) = nx.xv;
            put_split8(nx.dv, nx.zv, 1.0f, gated, dxh, dxl, dzf, gm.lp, gm.lz, xi, xj);
            part = 0.0f;
#pragma unroll
            for (int r = 0; r < 4; ++r)
                part += put_state4(sv[r], gv[r], sh, sl, gh, gl, (warp + 16 * r) * gm.ln + 4 * lane);
        } else {
            for (int i = threadIdx.x; i < gm.qp; i += blockDim.x)
                put_vec(i, i < Q ? cmg[i] : cl, i < Q ? a.dtv[w * Q + i] : 0.0f, i < Q ? a.dfac[w * Q + i] : 0.0f);
            for (int p = threadIdx.x; p < gm.pp; p += blockDim.x) dvec[p] = d_of(h, p);
            load_exact(xh, gm.lp, gm.pp, gm.qp, a.x, ck, h, P, L);
            load_split(dxh, dxl, dzf, gm.lp, gm.lz, gm.pp, gm.qp, a.dout, gated, a.z, nullptr, ck, h, P, L);
            part = load_states(sh, sl, gh, gl, gm, a, P, N, state_at(a, ci, h, PN));
        }
        if (threadIdx.x == 0) *ahs = ahv; /* published by the block sum's barriers */
        /* the block sum publishes the planes */
        const float total = expf(cl) * block_sum(part, red);
        if (!last) prefetch_head(a, Q, P, N, ck, h + 1, w + 1, state_at(a, ci, h + 1, PN), L);

        /* dD partials, part 1: segment sg of the rows of column p (nseg segments of consecutive rows)
         * into red[sg·pp + p], columns p and p + 1 by one thread (32-bit plane reads); summed in
         * segment order after A1's barrier */
        const int nseg = max(1, (int)blockDim.x / gm.pp), rows = (L + nseg - 1) / nseg, pp2 = gm.pp / 2;
        for (int e = threadIdx.x; e < nseg * pp2; e += blockDim.x) {
            const int p = 2 * (e % pp2), sg = e / pp2;
            float     s0 = 0.0f, s1 = 0.0f;
            for (int i = sg * rows; i < min(L, (sg + 1) * rows); ++i) {
                const int    o = i * gm.lp + p;
                const float2 dh = exact_at(dxh, o), dl = exact_at(dxl, o), xv = exact_at(xh, o);
                s0 += (dh.x + dl.x) * xv.x;
                s1 += (dh.y + dl.y) * xv.y;
            }
            *(float2 *)(red + sg * gm.pp + p) = make_float2(s0, s1);
        }

        /* A1: the [Q][Q] tables, tile (it, jt); tiles above the diagonal or past L are zeros */
        for (int t = warp; t < nT * nT; t += nwarps) {
            const int  m0 = (t / nT) * 16, n0 = (t % nT) * 16;
            const bool live = n0 <= m0 && m0 < L;
            float      cb_own[2][4], dc[2][4];
            float(&cb)[2][4] = kKeepCB ? cb_keep : cb_own;
            if (!kKeepCB) zero_acc(cb_own);
            zero_acc(dc);
            if (live) {
                if (!kKeepCB || first)
                    tile_mma<false, false, false, false, kNp>(cb, ch, nullptr, gm.ln, bh, nullptr, gm.ln, m0, n0, 0, gm.np);
                tile_mma<false, false, true, false, kPp>(dc, dxh, dxl, gm.lp, xh, nullptr, gm.lp, m0, n0, 0, gm.pp);
            }
            /* cm of the lane's rows m0 + g4 + 8hh, cm and dt of its columns n0 + 8j + 2t4 (+1), as pairs */
            float  cmi[2] = {0.0f, 0.0f};
            float2 cmj[2] = {}, dtj[2] = {};
            if (live) {
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) cmi[hh] = cms[m0 + g4 + 8 * hh];
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    cmj[j] = *(const float2 *)(cms + n0 + 8 * j + 2 * t4);
                    dtj[j] = *(const float2 *)(dtv + n0 + 8 * j + 2 * t4);
                }
            }
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int i = m0 + g4 + 8 * hh, j0 = n0 + 8 * j + 2 * t4;
                    float     w1[2], w2[2], d[2], pr[2];
#pragma unroll
                    for (int u = 0; u < 2; ++u) {
                        const int   jj = j0 + u;
                        const float cmjj = u == 0 ? cmj[j].x : cmj[j].y, dtjj = u == 0 ? dtj[j].x : dtj[j].y;
                        w1[u] = w2[u] = d[u] = pr[u] = 0.0f;
                        if (live && jj <= i && i < L) {
                            const float ex = expf(cmi[hh] - cmjj), cbx = cb[j][2 * hh + u] * ex;
                            w2[u] = cbx;
                            w1[u] = cbx * dtjj;
                            d[u] = dc[j][2 * hh + u] * (ex * dtjj);
                            pr[u] = cb[j][2 * hh + u] * d[u];
                        }
                    }
                    const int o = i * gm.lq + j0;
                    split_pair(w1[0], w1[1], w1h, w1l, o);
                    split_pair(w2[0], w2[1], w2h, w2l, o);
                    if (a.sparts) { /* Σ_h dCB_h, in head order; its planes at the slice's last head */
                        d[0] += dcb_run[j][hh][0], d[1] += dcb_run[j][hh][1];
                        dcb_run[j][hh][0] = d[0], dcb_run[j][hh][1] = d[1];
                        if (last) split_pair(d[0], d[1], dch, dcl, o);
                    } else {
                        split_pair(d[0], d[1], dch, dcl, o);
                    }
                    *(float2 *)(prod + i * gm.lf + j0) = make_float2(pr[0], pr[1]);
                }
        }
        __syncthreads();

        for (int p = threadIdx.x; p < P; p += blockDim.x) { /* dD partials, part 2 */
            float s = 0.0f;
            for (int sg = 0; sg < nseg; ++sg) s += red[sg * gm.pp + p];
            a.ddp[w * P + p] = s;
        }

        /* A2, per kind (a compile-time pass each): the C·Sᵀ tiles (i, p) (q, dz), then the B·Gᵀ tiles
         * (r, acc, dx, ddt_loc); warp w takes tiles w, w + nwarps, .. of each */
        const bool want_dz = a.has_z && a.want_dz;
        auto       a2_pass = [&](auto kind) {
            constexpr bool ys = decltype(kind)::value;
            const bw_out & out = ys ? a.dz : a.dx;
            const int      mode = pair_mode(out);
            /* element (m0 + g4 + 8hh, p0 + 2t4 + 8j) of dz (dx) at o0 + (m0 + 8hh)·s[1] + (p0 + 8j)·s[3] */
            const long long o0 = off4(out.s, ck.row, ck.t0 + g4, h, 2 * t4);
            for (int tt = warp; tt < nT * nP; tt += nwarps) {
                const int pt = tt % nP, m0 = (tt / nP) * 16, p0 = pt * 16;
                if (m0 >= L) continue;
                float c[2][4];
                zero_acc(c);
                if constexpr (ys) tile_mma<false, false, false, true, kNp>(c, ch, nullptr, gm.ln, sh, sl, gm.ln, m0, p0, 0, gm.np);
                else tile_mma<false, false, false, true, kNp>(c, bh, nullptr, gm.ln, gh, gl, gm.ln, m0, p0, 0, gm.np);
                float s[2] = {0.0f, 0.0f}; /* rows m0 + g4 and m0 + g4 + 8 */
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int i = m0 + g4 + 8 * hh;
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int o = i * gm.lp + p0 + 8 * j + 2 * t4;
                        if constexpr (ys) { /* q: <δx_i, (C·Sᵀ)_i> */
                            const float2 dx = split_at(dxh, dxl, o);
                            s[hh] += dx.x * c[j][2 * hh] + dx.y * c[j][2 * hh + 1];
                        } else { /* r: <x_i, e^{cl−cm_i}·(B·Gᵀ)_i> */
                            const float2 xv = exact_at(xh, o);
                            const float  ei = eclm[i];
                            c[j][2 * hh] *= ei, c[j][2 * hh + 1] *= ei;
                            s[hh] += xv.x * c[j][2 * hh] + xv.y * c[j][2 * hh + 1];
                        }
                    }
                    s[hh] = quad_sum(s[hh]);
                }
                float * part = ys ? qpart : rpart;
                if (t4 == 0) part[pt * gm.qp + m0 + g4] = s[0], part[pt * gm.qp + m0 + g4 + 8] = s[1];
                const long long o00 = o0 + (long long)m0 * out.s[1] + (long long)p0 * out.s[3];
                float2          dvj[2];
                if constexpr (ys) {
                    if (!want_dz) continue;
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const float e = ecm[m0 + g4 + 8 * hh];
#pragma unroll
                        for (int j = 0; j < 2; ++j) c[j][2 * hh] *= e, c[j][2 * hh + 1] *= e;
                    }
                    tile_mma<false, true, true, false>(c, w1h, w1l, gm.lq, xh, nullptr, gm.lp, m0, p0, 0, min(m0 + 16, Kq));
#pragma unroll
                    for (int j = 0; j < 2; ++j) dvj[j] = *(const float2 *)(dvec + p0 + 8 * j + 2 * t4);
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const int i = m0 + g4 + 8 * hh;
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            const int    p = p0 + 8 * j + 2 * t4;
                            const float2 xv = exact_at(xh, i * gm.lp + p);
                            if (i >= L || (!kWholeP && p >= P)) continue;
                            const float2 f = *(const float2 *)(dzf + i * gm.lz + p);
                            const float  y0 = c[j][2 * hh] + dvj[j].x * xv.x, y1 = c[j][2 * hh + 1] + dvj[j].y * xv.y;
                            store_pair(out, mode, o00 + 8 * hh * out.s[1] + 8 * j * out.s[3], f.x * y0, f.y * y1,
                                       kWholeP || p + 1 < P);
                        }
                    }
                } else {
                    tile_mma<true, true, true, true>(c, w2h, w2l, gm.lq, dxh, dxl, gm.lp, m0, p0, m0, Kq);
                    const bool want_dx = a.dx.p != NULL;
#pragma unroll
                    for (int j = 0; j < 2; ++j) dvj[j] = *(const float2 *)(dvec + p0 + 8 * j + 2 * t4);
                    float d[2] = {0.0f, 0.0f};
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const int   i = m0 + g4 + 8 * hh;
                        const float dti = dtv[i];
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            const int    p = p0 + 8 * j + 2 * t4, o = i * gm.lp + p;
                            const float2 xv = exact_at(xh, o), dx = split_at(dxh, dxl, o);
                            d[hh] += c[j][2 * hh] * xv.x + c[j][2 * hh + 1] * xv.y;
                            if (want_dx && i < L && (kWholeP || p < P))
                                store_pair(out, mode, o00 + 8 * hh * out.s[1] + 8 * j * out.s[3],
                                           c[j][2 * hh] * dti + dvj[j].x * dx.x, c[j][2 * hh + 1] * dti + dvj[j].y * dx.y,
                                           kWholeP || p + 1 < P);
                        }
                        d[hh] = quad_sum(d[hh]);
                    }
                    if (t4 == 0) tpart[pt * gm.qp + m0 + g4] = d[0], tpart[pt * gm.qp + m0 + g4 + 8] = d[1];
                }
            }
        };

        /* C, per kind (a compile-time pass each): the dB tiles (j, n), then the dC tiles (i, n); warp w
         * takes tiles w, w + nwarps, .. of each. dB: e^{cl−cm_j}·dt_j·x·G + dCBᵀ·C; dC: e^{cm_i}·δx·S +
         * dCB·B. Summed over the slice's heads in head order: a tile's elements belong to one lane of one
         * warp for every head, which keeps the running sum in the slice's part of the workspace (read
         * back before this head's products, written after them); the last head writes the sum to db/dc
         * where the slice is the whole group (parts = 1), else to the workspace part that the group sum
         * adds up. Then the intra sums. */
        const bool direct = last && a.parts == 1 && !a.sparts;
        auto       c_pass = [&](auto kind) {
            constexpr bool db = decltype(kind)::value;
            if (!(db ? a.want_db : a.want_dc)) return;
            if (a.sparts && !last) return; /* Σ dCB's terms once, at the slice's last head */
            /* the running sums, [batch·S][G][parts][N]: element (m0 + g4 + 8hh, n0 + 2t4 + 8j) at
             * pl0 + (m0 + 8hh)·pitch + n0 + 8j; with direct, in db (dc) at o0 + (m0 + 8hh)·s[1] + (n0 + 8j)·s[3] */
            float * const   part = db ? a.dbh : a.dch;
            const long long pitch = (long long)a.G * a.parts * N;
            float * const   pl0 = part + ((((ck.row * a.S + ck.t0 + g4) * a.G + grp) * a.parts + slc) * (long long)N + 2 * t4);
            const bw_out &  out = db ? a.db : a.dc;
            const long long o0 = direct ? off4(out.s, ck.row, ck.t0 + g4, grp, 2 * t4) : 0;
            const int       mode = direct ? pair_mode(out) : 0;
            /* N a multiple of 16: every pair of a tile lies inside N at an even offset, aligned with the part */
            const bool pairs = kWholeN && ((uintptr_t)part & 7) == 0;
            for (int tt = warp; tt < nT * nN; tt += nwarps) {
                const int m0 = (tt / nN) * 16, n0 = (tt % nN) * 16;
                if (m0 >= L) continue;
                float * const pt = pl0 + ((long long)m0 * pitch + n0);
                float         prev[2][4];
                zero_acc(prev);
                if (!first && !a.sparts)
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            const int     i = m0 + g4 + 8 * hh, n = n0 + 8 * j + 2 * t4;
                            const float * e = pt + (8 * hh * pitch + 8 * j);
                            if (i >= L) continue;
                            if (pairs) {
                                const float2 v = *(const float2 *)e;
                                prev[j][2 * hh] = v.x, prev[j][2 * hh + 1] = v.y;
                            } else if (n < N)
                                load_pair(e, prev[j][2 * hh], prev[j][2 * hh + 1], n + 1 < N);
                        }
                float c[2][4];
                zero_acc(c);
                if (!a.sparts) { /* the head's state part (with sparts: bwd_state_parts.cu's, after this kernel) */
                    if constexpr (db) tile_mma<false, true, false, true, kPp>(c, xh, nullptr, gm.lp, gh, gl, gm.ln, m0, n0, 0, gm.pp);
                    else tile_mma<false, true, true, true, kPp>(c, dxh, dxl, gm.lp, sh, sl, gm.ln, m0, n0, 0, gm.pp);
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const int   i = m0 + g4 + 8 * hh;
                        const float sc = db ? eclm[i] * dtv[i] : ecm[i];
#pragma unroll
                        for (int j = 0; j < 2; ++j) c[j][2 * hh] *= sc, c[j][2 * hh + 1] *= sc;
                    }
                }
                if constexpr (db) tile_mma<true, true, true, false>(c, dch, dcl, gm.lq, ch, nullptr, gm.ln, m0, n0, m0, Kq);
                else tile_mma<false, true, true, false>(c, dch, dcl, gm.lq, bh, nullptr, gm.ln, m0, n0, 0, min(m0 + 16, Kq));
                const long long oo = o0 + (long long)m0 * out.s[1] + (long long)n0 * out.s[3];
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int i = m0 + g4 + 8 * hh;
                    if (i >= L) continue;
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int n = n0 + 8 * j + 2 * t4;
                        if (!kWholeN && n >= N) continue;
                        float v0 = c[j][2 * hh], v1 = c[j][2 * hh + 1];
                        if (!first && !a.sparts) v0 = prev[j][2 * hh] + v0, v1 = prev[j][2 * hh + 1] + v1;
                        const bool two = kWholeN || n + 1 < N;
                        if (direct)
                            store_pair(out, mode, oo + 8 * hh * out.s[1] + 8 * j * out.s[3], v0, v1, two);
                        else if (pairs)
                            *(float2 *)(pt + (8 * hh * pitch + 8 * j)) = make_float2(v0, v1);
                        else
                            store_pair(pt + (8 * hh * pitch + 8 * j), v0, v1, two);
                    }
                }
            }
        };
        /* A2 and C share no output (A2: dz, dx and the q, r, ddt_loc partials; C: the running sums and
         * dB, dC), so their order is free: warps 0–7 run A2 first, warps 8–15 C first, and each SM
         * sub-partition (warp ids mod 4) holds warps of both phases — C's running-sum loads wait
         * beside A2's products instead of all warps waiting at once. One copy of each pass's code. */
#pragma unroll 1
        for (int ph = 0; ph < 2; ++ph) {
            if ((ph == 0) == ((warp & 8) == 0)) {
                a2_pass(std::true_type{});
                a2_pass(std::false_type{});
            } else {
                c_pass(std::true_type{});
                c_pass(std::false_type{});
            }
        }
        /* intra_k = Σ_{i≥k} Σ_{j<k} (CB·dCB)_ij: each row i < L becomes its exclusive prefix sums over j
         * (a warp per row, two columns per lane, a fixed shuffle scan), then thread k sums column k
         * over rows k..L−1 in order */
        for (int i = warp; i < L; i += nwarps) {
            float *     row = prod + i * gm.lf;
            const int   j0 = 2 * lane;
            const float v0 = j0 < gm.qp ? row[j0] : 0.0f, v1 = j0 + 1 < gm.qp ? row[j0 + 1] : 0.0f;
            float       inc = v0 + v1;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float u = __shfl_up_sync(0xffffffffu, inc, o);
                if (lane >= o) inc += u;
            }
            const float up = __shfl_up_sync(0xffffffffu, inc, 1), ex = lane > 0 ? up : 0.0f;
            if (j0 < gm.qp) row[j0] = ex;
            if (j0 + 1 < gm.qp) row[j0 + 1] = ex + v0;
        }
        __syncthreads();
        for (int k = threadIdx.x; k < L; k += blockDim.x) {
            float in = 0.0f;
            for (int i = k; i < L; ++i) in += prod[i * gm.lf + k];
            intra[k] = in;
        }
        __syncthreads();

        /* the ddA recurrence, ddt, and the dA / ddt_bias partials on warp 0: q, r and ddt_loc of its
         * two tokens from the column-tile partials, summed in tile order */
        if (warp == 0) {
            float qv[2] = {0.0f, 0.0f}, rv[2] = {0.0f, 0.0f}, tv[2] = {0.0f, 0.0f};
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int k = 2 * lane + u;
                if (k >= L) continue;
                float sq = 0.0f, sr = 0.0f, st = 0.0f;
                for (int pt = 0; pt < nP; ++pt)
                    sq += qpart[pt * gm.qp + k], sr += rpart[pt * gm.qp + k], st += tpart[pt * gm.qp + k];
                qv[u] = ecm[k] * sq, rv[u] = dtv[k] * sr, tv[u] = st;
            }
            dda_tail(a, ck, h, w, L, total, *ahs, qv, rv, tv, intra, fac, dtv);
        }
        if (kOnePass && one_pass && h + 1 < h1) nx = issue(h + 1);
    }
}

/* The compile-time instance's dimensions: 64-token chunks (the entry's), P = 64 and N = 128, the
 * heads of the Mamba-2 models of record (issue 18's shape); other sizes run the runtime instance. */
constexpr int kFixedQ = 64, kFixedP = 64, kFixedN = 128;
bool          fixed_dims(const bw_args & a) { return a.Q == kFixedQ && a.P == kFixedP && a.N == kFixedN; }

} /* namespace */

ssm_status launch_bwd_states_planes(ssm_context * ctx, const char * op, const bw_args & a, bool dstates) {
    if (a.nchunks == 0 || a.hb == 0) return SSM_STATUS_OK;
    const size_t bytes = states_planes_bytes(planes_geom_of(a.Q, a.P, a.N));
    void (*fn)(bw_args) = fixed_dims(a) ? (dstates ? bwd_states_planes_kernel<true, kFixedQ, kFixedP, kFixedN>
                                                   : bwd_states_planes_kernel<false, kFixedQ, kFixedP, kFixedN>)
                                        : (dstates ? bwd_states_planes_kernel<true, 0, 0, 0>
                                                   : bwd_states_planes_kernel<false, 0, 0, 0>);
    SSM_FORWARD_IF_ERROR(smem_optin(ctx, op, (const void *)fn, bytes));
    fn<<<dim3((unsigned)a.nchunks, (unsigned)a.hb), kThreads, bytes, ssmi_cuda_stream(ctx)>>>(a);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "bwd_states_planes_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_bwd_chunk_planes(ssm_context * ctx, const char * op, const bw_args & a) {
    if (a.nchunks == 0 || a.sb == 0) return SSM_STATUS_OK;
    const size_t bytes = planes_geom_of(a.Q, a.P, a.N).total;
    void (*fn)(bw_args) = fixed_dims(a) ? bwd_chunk_planes_kernel<kFixedQ, kFixedP, kFixedN>
                                        : bwd_chunk_planes_kernel<0, 0, 0>;
    SSM_FORWARD_IF_ERROR(smem_optin(ctx, op, (const void *)fn, bytes));
    const dim3 grid((unsigned)a.nchunks, (unsigned)a.sb);
    fn<<<grid, kPlanesThreads, bytes, ssmi_cuda_stream(ctx)>>>(a);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "bwd_chunk_planes_kernel");
    return SSM_STATUS_OK;
}

} /* namespace ssmi_m2bwd */
