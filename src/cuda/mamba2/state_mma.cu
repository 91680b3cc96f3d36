/*
 * state_mma.cu — step 1 of the 16-bit scan on mma.sync m16n8k16 (fp32 accumulators, operands
 * from shared memory by ldmatrix, results in registers): the chunk states s_c = xᵀ·(B∘w) with
 * w_j = exp(cum_last − cum_j)·dt_j, also the dt/cumsum tables and cum_last the output kernels and
 * the pass read. Two forms of the same products:
 *   state_mma_kernel     B of the compute type T: x weighted instead of B,
 *                        s = Σ_j (w_j·x_j)ᵀ·B_j, w∘x split into hi/lo and B exact in T, one block
 *                        of 8 warps per (chunk, head, P tile, 128 N columns), each warp 16 P rows
 *                        × 64 N columns. At N = 128 that halves the scaling and splitting (64 × 64
 *                        x elements per token tile instead of 64 × 128 B elements), B goes from
 *                        global to shared memory by cp.async unconverted, and dt is processed once
 *                        per (chunk, head).
 *   state_mma_bw_kernel  any other B dtype: B rows weighted by w and split (B∘w into hi/lo, B
 *                        converted exactly), one block of 4 warps per (chunk, head, 64-wide P tile,
 *                        64-wide N tile); x tiles double-buffered by cp.async, the raw B rows of
 *                        token tile j+1 in registers while tile j's products run.
 * Contiguous tiles of T (innermost stride 1, other strides multiples of 8 elements, 16-byte
 * aligned base) load with cp.async in 16-byte pieces; any other layout takes the element-wise path
 * through the strides. Both kernels are also the mamba2_chunk_state operator's (A.given_dt,
 * A.st_out; chunks of at most kScanQ tokens): the dt side read from the caller's tensors
 * (chunk_dt), the summed tokens from the chunk's j0 on (summed_chunk), the states stored through
 * the caller's strides and dtype (store_state_frag) instead of the dense fp32 workspace.
 */
#include "scan_dt.cuh"
#include "scan_tile.cuh"

namespace ssmi_m2 {
namespace {

/* ---- B weighted ------------------------------------------------------------------------------ */

/* Piece u of a token tile's B rows for this thread: row r = (tid + u·threads)/8, columns
 * n0 + c .. n0 + c + 7 with c = 8·((tid + u·threads) % 8), as fp32; 0 outside the chunk (r ≥ nr)
 * or beyond N. */
template <int MODE>
__device__ __forceinline__ void b_piece(float (&v)[8], const m2_fast_args & A, long long rowbase, int u, int nr,
                                           int n0) {
    typedef typename cfg<MODE>::T T;
    const int o = threadIdx.x + u * kFastThreads, r = o >> 3, c = (o & 7) * 8;
    if (A.vb && r < nr && n0 + c < A.N) {
        const uint4    q = __ldg(reinterpret_cast<const uint4 *>((const T *)A.b.p + rowbase + r * A.b.s[1] + c));
        const uint32_t qq[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = t2<MODE>::unpack(qq[e]);
            v[2 * e] = f.x, v[2 * e + 1] = f.y;
        }
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
            v[e] = (r < nr && n0 + c + e < A.N)
                       ? ssmi_cu_ld(A.b.p, A.b.dtype, rowbase + r * A.b.s[1] + (c + e) * A.b.s[3])
                       : 0.0f;
    }
}

/* The same piece as 4 pairs of T: exact when B is of type T (then the values are T already);
 * half the registers of fp32, so a whole tile can be held in flight. */
template <int MODE>
__device__ __forceinline__ void b_piece_raw(uint32_t (&q)[4], const m2_fast_args & A, long long rowbase, int u,
                                               int nr, int n0) {
    typedef typename cfg<MODE>::T T;
    const int o = threadIdx.x + u * kFastThreads, r = o >> 3, c = (o & 7) * 8;
    if (A.vb && r < nr && n0 + c < A.N) {
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>((const T *)A.b.p + rowbase + r * A.b.s[1] + c));
        q[0] = v.x, q[1] = v.y, q[2] = v.z, q[3] = v.w;
    } else {
        float f[8];
        b_piece<MODE>(f, A, rowbase, u, nr, n0);
#pragma unroll
        for (int e = 0; e < 4; ++e) q[e] = t2<MODE>::pack(f[2 * e], f[2 * e + 1]);
    }
}

template <int MODE> __global__ void __launch_bounds__(kFastThreads) state_mma_bw_kernel(const m2_fast_args A) {
    typedef typename cfg<MODE>::T T;
    __shared__ float dts[kScanQ], cums[kScanQ], tot[32];
    __shared__ __align__(16) T xs[2][kFT * kFLd]; /* double-buffered x tiles */
    __shared__ __align__(16) T bh[kFT * kFLd];
    __shared__ __align__(16) T bl[kFT * kFLd];

    const long long blk = blockIdx.x;
    const int       nz = A.n_ptiles * A.n_ntiles;
    const long long wh = blk / nz;
    const int       z = (int)(blk - wh * nz);
    const int       w = (int)(wh / A.H), h = (int)(wh - (long long)w * A.H);
    const int       p0 = (z % A.n_ptiles) * kFT, n0 = (z / A.n_ptiles) * kFT;
    const int       tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const m2_chunk  ch = summed_chunk(plan_chunk(A, w));
    const int       g = h / (A.H / A.G);
    chunk_dt(A, ch, h, dts, cums, tot); /* ends with a barrier */
    const float cl = cums[ch.ilast];
    if (z == 0 && A.lastcum != nullptr) {
        if (tid == 0) A.lastcum[wh] = cl;
        float * dd = A.dtc + wh * 2 * kScanQ;
        for (int i = tid; i < ch.len; i += blockDim.x) dd[i] = dts[i], dd[kScanQ + i] = cums[i];
    }

    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    const long long xb = ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3];
    const long long bb = ch.b * A.b.s[0] + g * A.b.s[2] + n0 * A.b.s[3];
    const int       ntiles = (ch.len + kFT - 1) / kFT;
    const int       PER = kFT * (kFT / 8) / kFastThreads;
    /* B of type T (the usual case): the next tile's B rows wait in registers as T pairs; any
     * other dtype is loaded when its weights are applied */
    const bool b_is_t = A.b.dtype == (MODE == M_BF16 ? SSM_DTYPE_BF16 : SSM_DTYPE_F16);
    uint32_t   q[PER][4];

    /* prologue: token tile 0 (x by cp.async, B into registers) */
    tile_to_smem<MODE>(xs[0], kFLd, A.x, A.vx, xb + ch.t0 * A.x.s[1], A.x.s[1], A.x.s[3], kFT, kFT, ch.len, A.P - p0);
    cp_async_commit();
    if (b_is_t) {
#pragma unroll
        for (int u = 0; u < PER; ++u) b_piece_raw<MODE>(q[u], A, bb + ch.t0 * A.b.s[1], u, ch.len, n0);
    }

    for (int jt = 0; jt < ntiles; ++jt) {
        const int  j0 = jt * kFT, nr = ch.len - j0;
        const bool more = jt + 1 < ntiles;
        /* x of tile jt+1 into the other buffer (its last reader, tile jt−1, ended with a barrier) */
        if (more)
            tile_to_smem<MODE>(xs[(jt + 1) & 1], kFLd, A.x, A.vx, xb + (ch.t0 + j0 + kFT) * A.x.s[1], A.x.s[1],
                               A.x.s[3], kFT, kFT, nr - kFT, A.P - p0);
        cp_async_commit(); /* possibly empty: keeps one group per step */
        /* B rows of tile jt weighted by w_j = exp(cum_last − cum_j)·dt_j, split */
#pragma unroll
        for (int u = 0; u < PER; ++u) {
            const int o = tid + u * kFastThreads, r = o >> 3, c = (o & 7) * 8;
            float     v[8];
            if (b_is_t) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 f = t2<MODE>::unpack(q[u][e]);
                    v[2 * e] = f.x, v[2 * e + 1] = f.y;
                }
            } else {
                b_piece<MODE>(v, A, bb + (ch.t0 + j0) * A.b.s[1], u, nr, n0);
            }
            const float wr = token_weight(ch, cl, dts, cums, j0 + r);
            uint32_t    hi[4], lo[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) split2<MODE>(v[2 * e] * wr, v[2 * e + 1] * wr, hi[e], lo[e]);
            *reinterpret_cast<uint4 *>(&bh[r * kFLd + c]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            *reinterpret_cast<uint4 *>(&bl[r * kFLd + c]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
        /* B rows of tile jt+1 into registers: in flight during this tile's products */
        if (more && b_is_t) {
#pragma unroll
            for (int u = 0; u < PER; ++u)
                b_piece_raw<MODE>(q[u], A, bb + (ch.t0 + j0 + kFT) * A.b.s[1], u, nr - kFT, n0);
        }
        cp_async_wait_group<1>(); /* this thread's copies of tile jt are done (tile jt+1 may pend) */
        __syncthreads();          /* ... and everybody's: x tile jt, bh, bl */
        const T * xcur = xs[jt & 1];
        const int ksteps = min(kFT / 16, (nr + 15) / 16);
        for (int ks = 0; ks < ksteps; ++ks) {
            uint32_t a[4], b[4][4];
            ldsm4_t(a, &xcur[ks * 16 * kFLd + warp * 16 + a_trans_off(lane, kFLd)]);
#pragma unroll
            for (int np = 0; np < 4; ++np) ldsm4_t(b[np], &bh[ks * 16 * kFLd + np * 16 + b_kn_off(lane, kFLd)]);
            mma_row4<MODE>(acc, a, b);
#pragma unroll
            for (int np = 0; np < 4; ++np) ldsm4_t(b[np], &bl[ks * 16 * kFLd + np * 16 + b_kn_off(lane, kFLd)]);
            mma_row4<MODE>(acc, a, b);
        }
        __syncthreads(); /* bh, bl and this x buffer are rewritten in the next step */
    }
    cp_async_wait_group<0>(); /* nothing is pending here (the last group is empty); for the record */
    if (A.st_out != nullptr) { /* mamba2_chunk_state: the caller's states */
        /* the x tiles are free: the loop's final barrier */
        static_assert(sizeof(xs) >= sizeof(float) * kFragFloats * (kFastThreads / 32), "staging fits the x tiles");
        store_state_frag(A, wh, acc, p0 + warp * 16, n0, (float *)&xs[0][0] + warp * kFragFloats);
        return;
    }
    float * st = A.states + wh * A.P * A.N;
    /* pairs (n, n+1) as one 8-byte store when N is even (then p·N + n is even and the state
     * block 8-byte aligned) */
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int p = p0 + warp * 16 + (lane >> 2) + half * 8;
        if (p >= A.P) continue;
        float * row = st + (long long)p * A.N;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int n = n0 + t * 8 + 2 * (lane & 3);
            if ((A.N & 1) == 0 && n + 1 < A.N) {
                *reinterpret_cast<float2 *>(row + n) = make_float2(acc[t][2 * half], acc[t][2 * half + 1]);
            } else {
                if (n < A.N) row[n] = acc[t][2 * half];
                if (n + 1 < A.N) row[n + 1] = acc[t][2 * half + 1];
            }
        }
    }
}

/* ---- x weighted ------------------------------------------------------------------------------ */

const int kXwCols = 128; /* N columns per block: two 64-column warp groups */
const int kXwLd = kXwCols + 8;

/* Raw-then-hi x tiles (2), the lo x tile, B tiles (2). */
struct xw_state_smem {
    size_t x0, xd, xl, b0, bd, total;
    __host__ __device__ xw_state_smem(size_t tsize) {
        xd = align128(tsize * kFT * kFLd);
        x0 = 0;
        xl = 2 * xd;
        b0 = 3 * xd;
        bd = align128(tsize * kFT * kXwLd);
        total = b0 + 2 * bd;
    }
};

template <int MODE> __global__ void __launch_bounds__(kWideThreads, kStateMinBlocks) state_mma_kernel(const m2_fast_args A) {
    typedef typename cfg<MODE>::T T;
    __shared__ float dts[kScanQ], cums[kScanQ], tot[32];
    __shared__ float wts[kScanQ];
    extern __shared__ __align__(128) unsigned char smem[];
    const xw_state_smem L(sizeof(T));
    T *           xl = (T *)(smem + L.xl);

    /* 32-bit index arithmetic (the host keeps the grid below 2^31 blocks): a 64-bit division
     * is a long subroutine, and these ran in every block */
    const unsigned  blk = blockIdx.x;
    const int       ngrp = (A.N + kXwCols - 1) / kXwCols;
    const unsigned  nz = (unsigned)(A.n_ptiles * ngrp);
    const unsigned  whu = blk / nz;
    const int       z = (int)(blk - whu * nz);
    const int       w = (int)(whu / (unsigned)A.H), h = (int)(whu - (unsigned)w * (unsigned)A.H);
    const long long wh = whu;
    const int       p0 = (z % A.n_ptiles) * kFT, n0 = (z / A.n_ptiles) * kXwCols;
    const int       tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int       wp = (warp & 3) * 16;  /* this warp's P rows within the tile      */
    const int       wn = (warp >> 2) * 64; /* its 64 N columns within the block's 128 */
    const bool      wactive = n0 + wn < A.N;
    const m2_chunk  ch = summed_chunk(plan_chunk(A, w));
    const int       g = h / (A.H / A.G);
    const int       nbc = min(kXwCols, A.Np - n0); /* B columns copied (a multiple of 16) */
    const long long xb = ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3];
    const long long bb = ch.b * A.b.s[0] + g * A.b.s[2] + n0 * A.b.s[3];
    const int       ntiles = (ch.len + kFT - 1) / kFT;

    /* token tile 0's copies fly during the dt processing */
    tile_any<MODE>((T *)(smem + L.x0), kFLd, A.x, A.vx, xb + ch.t0 * A.x.s[1], A.x.s[1], A.x.s[3], kFT, kFT, ch.len,
                  A.P - p0);
    tile_any<MODE>((T *)(smem + L.b0), kXwLd, A.b, A.vb, bb + ch.t0 * A.b.s[1], A.b.s[1], A.b.s[3], kFT, nbc, ch.len,
                  A.N - n0);
    cp_async_commit();
    chunk_dt(A, ch, h, dts, cums, tot); /* ends with a barrier */
    chunk_tables(A, ch, wh, z == 0, dts, cums, wts);

    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    for (int jt = 0; jt < ntiles; ++jt) {
        const int j0 = jt * kFT, nr = ch.len - j0;
        if (jt + 1 < ntiles) {
            const int k = (jt + 1) & 1;
            tile_any<MODE>((T *)(smem + L.x0 + k * L.xd), kFLd, A.x, A.vx, xb + (ch.t0 + j0 + kFT) * A.x.s[1],
                          A.x.s[1], A.x.s[3], kFT, kFT, nr - kFT, A.P - p0);
            tile_any<MODE>((T *)(smem + L.b0 + k * L.bd), kXwLd, A.b, A.vb, bb + (ch.t0 + j0 + kFT) * A.b.s[1],
                          A.b.s[1], A.b.s[3], kFT, nbc, nr - kFT, A.N - n0);
        }
        cp_async_commit();        /* possibly empty: one group per step */
        cp_async_wait_group<1>(); /* tile jt of this thread is done */
        __syncthreads();          /* ... and everybody's (and wts, on the first step) */
        T *       xh = (T *)(smem + L.x0 + (jt & 1) * L.xd);
        const T * bs = (const T *)(smem + L.b0 + (jt & 1) * L.bd);
        /* x rows scaled by w_j and split: hi over the raw tile (each thread rewrites the 16 bytes it
         * read), lo into xl; rows past the chunk are 0 (zero-filled, w = 0) */
        for (int o = tid; o < kFT * (kFT / 8); o += kWideThreads) {
            const int      r = o >> 3, c = (o & 7) * 8;
            const uint4    q = *reinterpret_cast<const uint4 *>(&xh[r * kFLd + c]);
            const uint32_t qq[4] = {q.x, q.y, q.z, q.w};
            const float    wr = wts[j0 + r];
            uint32_t       hi[4], lo[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float2 f = t2<MODE>::unpack(qq[e]);
                split2<MODE>(f.x * wr, f.y * wr, hi[e], lo[e]);
            }
            *reinterpret_cast<uint4 *>(&xh[r * kFLd + c]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            *reinterpret_cast<uint4 *>(&xl[r * kFLd + c]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
        __syncthreads();
        if (wactive) {
            const int ksteps = min(kFT / 16, (nr + 15) / 16);
            for (int ks = 0; ks < ksteps; ++ks) {
                uint32_t ah[4], al[4], b[4][4];
                ldsm4_t(ah, &xh[ks * 16 * kFLd + wp + a_trans_off(lane, kFLd)]);
                ldsm4_t(al, &xl[ks * 16 * kFLd + wp + a_trans_off(lane, kFLd)]);
#pragma unroll
                for (int np = 0; np < 4; ++np) ldsm4_t(b[np], &bs[ks * 16 * kXwLd + wn + np * 16 + b_kn_off(lane, kXwLd)]);
                mma_row4<MODE>(acc, ah, b);
                mma_row4<MODE>(acc, al, b);
            }
        }
        __syncthreads(); /* the next step rewrites xl and, one step later, these buffers */
    }
    cp_async_wait_group<0>(); /* nothing is pending here (the last group is empty); for the record */
    if (!wactive) return;
    if (A.st_out != nullptr) { /* mamba2_chunk_state: the caller's states */
        /* the tiles are free: the loop's final barrier */
        store_state_frag(A, wh, acc, p0 + wp, n0 + wn, (float *)smem + warp * kFragFloats);
        return;
    }
    float * st = A.states + wh * A.P * A.N;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int p = p0 + wp + (lane >> 2) + half * 8;
        if (p >= A.P) continue;
        float * row = st + (long long)p * A.N;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int n = n0 + wn + t * 8 + 2 * (lane & 3);
            if ((A.N & 1) == 0 && n + 1 < A.N) {
                *reinterpret_cast<float2 *>(row + n) = make_float2(acc[t][2 * half], acc[t][2 * half + 1]);
            } else {
                if (n < A.N) row[n] = acc[t][2 * half];
                if (n + 1 < A.N) row[n + 1] = acc[t][2 * half + 1];
            }
        }
    }
}

template <int MODE> ssm_status launch_state_mma_mode(ssm_context * ctx, const char * op, const m2_fast_args & A,
                                                     long long W) {
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const long long    blocks = W * A.H * A.n_ptiles * A.n_ntiles;
    SSM_RETURN_IF(blocks > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED, "%s: %lld blocks exceed the CUDA backend's grid limit",
                  op, blocks);
    const bool b_is_t = A.b.dtype == (MODE == M_BF16 ? SSM_DTYPE_BF16 : SSM_DTYPE_F16);
    if (b_is_t) {
        typedef typename cfg<MODE>::T T;
        const long long ngrp = (A.N + kXwCols - 1) / kXwCols;
        const long long blocks_xw = W * A.H * A.n_ptiles * ngrp;
        SSM_RETURN_IF(blocks_xw > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED,
                      "%s: %lld blocks exceed the CUDA backend's grid limit", op, blocks_xw);
        const xw_state_smem L(sizeof(T));
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                                              cudaFuncSetAttribute(state_mma_kernel<MODE>,
                                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                                   (int)L.total)));
        state_mma_kernel<MODE><<<(unsigned)blocks_xw, kWideThreads, L.total, s>>>(A);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "state_mma_kernel launch");
        return SSM_STATUS_OK;
    }
    state_mma_bw_kernel<MODE><<<(unsigned)blocks, kFastThreads, 0, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "state_mma_bw_kernel launch");
    return SSM_STATUS_OK;
}

} /* namespace */

ssm_status launch_state_mma(ssm_context * ctx, const char * op, int mode, const m2_fast_args & A, long long W) {
    if (W == 0 || A.H == 0 || A.P == 0 || A.N == 0) return SSM_STATUS_OK;
    return mode == M_F16 ? launch_state_mma_mode<M_F16>(ctx, op, A, W) : launch_state_mma_mode<M_BF16>(ctx, op, A, W);
}

} /* namespace ssmi_m2 */
