/*
 * bwd_state_parts.cu — the state parts of dB and dC of one head batch as one product over the
 * batch's heads (mamba2-bwd-design §10–§11): per chunk c of Q = 64 tokens,
 *   dB_st[j][n] = Σ_h s_h[j] · Σ_p x_h[j][p] · G_c,h[p][n],   s_h[j] = e^{cl_h − cm_h[j]}·dt_h[j]
 *   dC_st[i][n] = Σ_h s_h[i] · Σ_p δx_h[i][p] · S_c,h[p][n],  s_h[i] = e^{cm_h[i]}
 * (δx = dout ⊙ silu(z), or dout). The row scale is applied to each head's product, so where the
 * A rows are bf16 inputs (x; dout without z) they enter the product exactly, as one plane (two mma
 * per product: A·G_hi + A·G_lo); δx is fp32 and takes two planes (three mma). A block per (chunk,
 * slice of heads) and kind, all N = 128 columns (the A rows loaded once), 8 warps of 32 × 32
 * outputs. The raw operands of a head (the fp32 slot of the chain, the bf16 rows, the row scales s_h
 * that bwd_dt_kernel forms once as wdb and wdc) come by cp.async into a ring of kStages slots,
 * kStages − 1 heads ahead of the products; each thread splits the slot pieces (and gates the δx
 * pieces) it copied itself into bf16 hi/lo planes (two buffers), so one barrier per head orders
 * everything. Each thread loads its elements of the part before the first head, so the part's
 * read-modify-write at the end waits on no load.
 *
 * Where state_parts_ok (Q = 64, P = 64, N = 128, bf16 x, dout and z, more than one head per group):
 * launched after each head batch's chunk kernel, which has written the slice's dCB terms into the
 * slice's part (bw_args.sparts); this kernel adds its sums there, and the group sum adds the parts
 * up in part order. Every element has one owner thread; the order of every sum is fixed.
 */
#include "../common/mma.cuh"
#include "bwd.cuh"

namespace ssmi_m2bwd {
namespace {

using namespace ssmi_mma;

constexpr int kSpQ = 64, kSpP = 64, kSpN = 128; /* chunk, head dimension, state columns */
constexpr int kSpLdA = 72;  /* A row pitch (bf16): 144 bytes, ldmatrix rows on distinct banks */
constexpr int kSpLdB = 136; /* B plane row pitch (bf16): 272 bytes, likewise */
constexpr int kSpA = kSpQ * kSpLdA * 2;           /* bytes of one A plane (raw rows or hi/lo) */
constexpr int kSpBRaw = kSpP * kSpN * 4;          /* bytes of a head's fp32 slot */
constexpr int kSpBPlane = kSpP * kSpLdB * 2;      /* bytes of one B plane */
constexpr int kSpScales = kSpQ * 4;               /* a head's row weights (wdb or wdc) */

/* The shared-memory layout of a kind: GATED (dC with z) has a z row plane in each ring slot and
 * its δx hi/lo planes, and a shallower ring to fit. */
template <bool GATED> struct sp_layout {
    static constexpr int    kStages = GATED ? 2 : 3;
    static constexpr int    kSlot = kSpBRaw + (GATED ? 2 : 1) * kSpA + kSpScales; /* ring slot */
    static constexpr int    kBPlanes = kStages * kSlot;                           /* B hi/lo ×2 */
    static constexpr int    kAPlanes = kBPlanes + 4 * kSpBPlane;                  /* δx hi/lo ×2 */
    static constexpr size_t kBytes = (size_t)kAPlanes + (GATED ? 4 * kSpA : 0);
};

/* 8 consecutive bf16 elements of row (row, tok, h) from column c8, element by element (views whose
 * rows are not 16-byte runs; the same values as the 16-byte copy: the view is bf16). */
__device__ __forceinline__ uint4 sp_piece(const ssmi_cu_view & v, long long row, long long tok, int h, int c8) {
    const long long o = off4(v.s, row, tok, h, c8);
    uint32_t        u[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
        u[q] = t2<M_BF16>::pack(ssmi_cu_ld(v.p, v.dtype, o + 2 * q * v.s[3]),
                                ssmi_cu_ld(v.p, v.dtype, o + (2 * q + 1) * v.s[3]));
    return make_uint4(u[0], u[1], u[2], u[3]);
}

/* One row piece of a thread into the ring slot: by cp.async where the view's rows are 16-byte
 * runs, else loaded and stored; rows past the chunk are zeros (their outputs are never stored). */
__device__ __forceinline__ void sp_row_piece(bf16 * dst, const ssmi_cu_view & v, bool vec, const bw_chunk & ck, int t,
                                             int L, int h, int c8) {
    if (t >= L)
        *(uint4 *)dst = make_uint4(0u, 0u, 0u, 0u);
    else if (vec)
        cp_async16(dst, (const bf16 *)v.p + off4(v.s, ck.row, ck.t0 + t, h, c8));
    else
        *(uint4 *)dst = sp_piece(v, ck.row, ck.t0 + t, h, c8);
}

/* Head h's raw operands into a ring slot (this thread's pieces; the caller commits the group). */
template <bool DB, bool GATED>
__device__ __forceinline__ void sp_issue(char * slot, const bw_args & a, const bw_chunk & ck, long long ci, int h,
                                         int L, bool vec) {
    const int     tid = threadIdx.x;
    const float * g = (DB ? a.gs : a.st) + state_at(a, ci, h, (long long)kSpP * kSpN);
    float *       braw = (float *)slot;
#pragma unroll
    for (int u = 0; u < kSpBRaw / 16 / kThreads; ++u) {
        const int e = tid + u * kThreads;
        cp_async16(braw + 4 * e, g + 4 * e);
    }
    bf16 * araw = (bf16 *)(slot + kSpBRaw);
#pragma unroll
    for (int u = 0; u < kSpQ * kSpP / 8 / kThreads; ++u) {
        const int e = tid + u * kThreads, t = e >> 3, c8 = (e & 7) * 8;
        sp_row_piece(araw + t * kSpLdA + c8, DB ? a.x : a.dout, vec, ck, t, L, h, c8);
        if (GATED) sp_row_piece(araw + kSpA / 2 + t * kSpLdA + c8, a.z, vec, ck, t, L, h, c8);
    }
    float *         sc = (float *)(slot + kSpBRaw + (GATED ? 2 : 1) * kSpA);
    const long long w = ci * a.H + h;
    if (tid < kSpQ / 4) cp_async16(sc + 4 * tid, (DB ? a.wdb : a.wdc) + w * kSpQ + 4 * tid);
}

/* This thread's pieces of a ring slot split into the head's planes: the fp32 slot into B hi/lo and,
 * gated, δx = dout ⊙ silu(z) into A hi/lo (the chunk kernel's δx). */
template <bool GATED>
__device__ __forceinline__ void sp_split(const char * slot, bf16 * bp, bf16 * ap) {
    const int     tid = threadIdx.x;
    const float * braw = (const float *)slot;
#pragma unroll
    for (int u = 0; u < kSpBRaw / 16 / kThreads; ++u) {
        const int    e = tid + u * kThreads, p = e >> 5, n4 = (e & 31) * 4;
        const float4 v = *(const float4 *)(braw + 4 * e);
        uint32_t     hi[2], lo[2];
        split2<M_BF16>(v.x, v.y, hi[0], lo[0]);
        split2<M_BF16>(v.z, v.w, hi[1], lo[1]);
        *(uint2 *)(bp + p * kSpLdB + n4) = make_uint2(hi[0], hi[1]);
        *(uint2 *)(bp + kSpBPlane / 2 + p * kSpLdB + n4) = make_uint2(lo[0], lo[1]);
    }
    if (!GATED) return;
    const bf16 * araw = (const bf16 *)(slot + kSpBRaw);
#pragma unroll
    for (int u = 0; u < kSpQ * kSpP / 8 / kThreads; ++u) {
        const int        e = tid + u * kThreads, t = e >> 3, c8 = (e & 7) * 8;
        const uint4      dv = *(const uint4 *)(araw + t * kSpLdA + c8);
        const uint4      zv = *(const uint4 *)(araw + kSpA / 2 + t * kSpLdA + c8);
        const uint32_t * d = (const uint32_t *)&dv;
        const uint32_t * z = (const uint32_t *)&zv;
        uint32_t         hi[4], lo[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float2 dd = t2<M_BF16>::unpack(d[q]), zz = t2<M_BF16>::unpack(z[q]);
            split2<M_BF16>(silu_gate(dd.x, zz.x), silu_gate(dd.y, zz.y), hi[q], lo[q]);
        }
        *(uint4 *)(ap + t * kSpLdA + c8) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *(uint4 *)(ap + kSpA / 2 + t * kSpLdA + c8) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
}

template <bool DB, bool GATED>
__global__ void __launch_bounds__(kThreads, 1) bwd_state_parts_kernel(bw_args a) {
    using lay = sp_layout<GATED>;
    constexpr int kStages = lay::kStages;
    extern __shared__ float4 sm4[];
    char * const    sm = (char *)sm4;
    const long long ci = blockIdx.x;
    const int       sk = a.s0 + (int)blockIdx.y; /* the slice, numbered across groups */
    const int       grp = sk / a.nslices, slc = sk % a.nslices;
    const int       h0 = grp * a.R + slc * a.slice, h1 = min(h0 + a.slice, (grp + 1) * a.R); /* the slice's heads */
    const int       nh = h1 - h0;
    const bw_chunk  ck = a.chunks[ci];
    const int       L = ck.len;
    const int       lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g4 = lane >> 2, t4 = lane & 3;
    const int       m0 = (warp & 1) * 32, nw = (warp >> 1) * 32;
    const bool      vec = rows16(DB ? a.x : a.dout) && (!GATED || rows16(a.z));
    float           acc[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int t = 0; t < 4; ++t) acc[mt][t][0] = acc[mt][t][1] = acc[mt][t][2] = acc[mt][t][3] = 0.0f;

#pragma unroll
    for (int k = 0; k < kStages - 1; ++k) {
        if (k < nh) sp_issue<DB, GATED>(sm + k * lay::kSlot, a, ck, ci, h0 + k, L, vec);
        cp_async_commit();
    }
    /* this thread's elements of the slice's part of the dB (dC) parts, [batch·S][G][parts][N], where
     * the chunk kernel has written the slice's intra-chunk terms: loaded now, so their latency hides
     * behind the heads' products instead of following them */
    float * const   part = DB ? a.dbh : a.dch;
    const long long pitch = (long long)a.G * a.parts * a.N;
    auto            part_row = [&](int i) {
        return part + (ck.row * a.S + ck.t0 + i) * pitch + ((long long)grp * a.parts + slc) * a.N + nw + 2 * t4;
    };
    float2 prev[2][2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int i = m0 + mt * 16 + g4 + 8 * hh;
#pragma unroll
            for (int t = 0; t < 4; ++t)
                prev[mt][hh][t] = i < L ? *(const float2 *)(part_row(i) + 8 * t) : make_float2(0.0f, 0.0f);
        }
    for (int k = 0; k < nh; ++k) {
        const char * slot = sm + (k % kStages) * lay::kSlot;
        bf16 * const bp = (bf16 *)(sm + lay::kBPlanes + (k & 1) * 2 * kSpBPlane);
        bf16 * const ap = GATED ? (bf16 *)(sm + lay::kAPlanes + (k & 1) * 2 * kSpA) : (bf16 *)(slot + kSpBRaw);
        cp_async_wait_group<kStages - 2>(); /* this thread's pieces of head k are in */
        sp_split<GATED>(slot, bp, ap);
        /* every thread's pieces of head k, copied and split, are visible; and every warp is done
         * with head k − 1's products, whose ring slot the next copy reuses */
        __syncthreads();
        if (k + kStages - 1 < nh)
            sp_issue<DB, GATED>(sm + ((k + kStages - 1) % kStages) * lay::kSlot, a, ck, ci, h0 + k + kStages - 1, L,
                                vec);
        cp_async_commit();

        const float * wr = (const float *)(slot + kSpBRaw + (GATED ? 2 : 1) * kSpA); /* zero past L */
        float         sc[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) sc[mt][hh] = wr[m0 + mt * 16 + g4 + 8 * hh];
        float tmp[2][4][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int t = 0; t < 4; ++t) tmp[mt][t][0] = tmp[mt][t][1] = tmp[mt][t][2] = tmp[mt][t][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < kSpP / 16; ++ks) {
            uint32_t ah[2][4], al[2][4], bh[2][4], bl[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                ldsm4(ah[mt], ap + (m0 + mt * 16) * kSpLdA + ks * 16 + a_row_off(lane, kSpLdA));
                if (GATED) ldsm4(al[mt], ap + kSpA / 2 + (m0 + mt * 16) * kSpLdA + ks * 16 + a_row_off(lane, kSpLdA));
            }
#pragma unroll
            for (int nb = 0; nb < 2; ++nb) {
                ldsm4_t(bh[nb], bp + ks * 16 * kSpLdB + nw + nb * 16 + b_kn_off(lane, kSpLdB));
                ldsm4_t(bl[nb], bp + kSpBPlane / 2 + ks * 16 * kSpLdB + nw + nb * 16 + b_kn_off(lane, kSpLdB));
            }
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int nb = 0; nb < 2; ++nb) {
                    mma16816<M_BF16>(tmp[mt][2 * nb], ah[mt], bh[nb][0], bh[nb][1]);
                    mma16816<M_BF16>(tmp[mt][2 * nb + 1], ah[mt], bh[nb][2], bh[nb][3]);
                    mma16816<M_BF16>(tmp[mt][2 * nb], ah[mt], bl[nb][0], bl[nb][1]);
                    mma16816<M_BF16>(tmp[mt][2 * nb + 1], ah[mt], bl[nb][2], bl[nb][3]);
                    if (GATED) {
                        mma16816<M_BF16>(tmp[mt][2 * nb], al[mt], bh[nb][0], bh[nb][1]);
                        mma16816<M_BF16>(tmp[mt][2 * nb + 1], al[mt], bh[nb][2], bh[nb][3]);
                    }
                }
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int t = 0; t < 4; ++t)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][t][e] = fmaf(sc[mt][e >> 1], tmp[mt][t][e], acc[mt][t][e]);
    }
    cp_async_wait_all();
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int i = m0 + mt * 16 + g4 + 8 * hh;
            if (i >= L) continue;
            float * const row = part_row(i);
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                const float2 v = prev[mt][hh][t];
                *(float2 *)(row + 8 * t) = make_float2(v.x + acc[mt][t][2 * hh], v.y + acc[mt][t][2 * hh + 1]);
            }
        }
}

template <bool DB, bool GATED>
ssm_status launch_kind(ssm_context * ctx, const char * op, const bw_args & a, dim3 grid, const char * name) {
    const size_t bytes = sp_layout<GATED>::kBytes;
    SSM_FORWARD_IF_ERROR(smem_optin(ctx, op, (const void *)bwd_state_parts_kernel<DB, GATED>, bytes));
    bwd_state_parts_kernel<DB, GATED><<<grid, kThreads, bytes, ssmi_cuda_stream(ctx)>>>(a);
    SSMI_CU_CHECK_LAUNCH(ctx, op, name);
    return SSM_STATUS_OK;
}

} /* namespace */

bool state_parts_ok(const bw_args & a, size_t optin) {
    /* dtypes, sizes and the device's shared memory only, never the layout: aligned and padded rows
     * give the same bytes */
    const size_t bytes = a.has_z && a.want_dc ? sp_layout<true>::kBytes : sp_layout<false>::kBytes;
    return a.Q == kSpQ && a.P == kSpP && a.N == kSpN && a.exact16 && (!a.has_z || a.z.dtype == SSM_DTYPE_BF16) &&
           a.R > 1 && (a.want_db || a.want_dc) && bytes <= optin;
}

ssm_status launch_bwd_state_parts(ssm_context * ctx, const char * op, const bw_args & a) {
    if (!a.sparts || a.nchunks == 0 || a.sb == 0) return SSM_STATUS_OK;
    const dim3 grid((unsigned)a.nchunks, (unsigned)a.sb);
    if (a.want_db) SSM_FORWARD_IF_ERROR((launch_kind<true, false>(ctx, op, a, grid, "bwd_state_parts_kernel<dB>")));
    if (a.want_dc && a.has_z)
        SSM_FORWARD_IF_ERROR((launch_kind<false, true>(ctx, op, a, grid, "bwd_state_parts_kernel<dC, gated>")));
    if (a.want_dc && !a.has_z)
        SSM_FORWARD_IF_ERROR((launch_kind<false, false>(ctx, op, a, grid, "bwd_state_parts_kernel<dC>")));
    return SSM_STATUS_OK;
}

} /* namespace ssmi_m2bwd */
