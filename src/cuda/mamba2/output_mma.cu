/*
 * output_mma.cu — step 3 of the 16-bit scan on mma.sync m16n8k16 (fp32 accumulators, operands
 * from shared memory by ldmatrix, results in registers): per (chunk, head, row tile, 64-wide P
 * tile), y = exp(cum_i)·C_i·S_inᵀ, then for every 64-token column tile up to the diagonal the
 * masked scores C·Bᵀ (registers) times x, then + D·x and the z gate. The entering state and the
 * masked scores are split into hi/lo, two products each.
 *   output_mma_kernel    128-row tiles, 8 warps of 16 rows; B/x tiles double-buffered by cp.async;
 *                        the entering state read as split planes (state_pass_split_kernel) where
 *                        N % 8 == 0, else split from the fp32 states; z rows staged on chip (each
 *                        warp copies its 16 z rows into its own C rows once its diagonal scores
 *                        are done), D staged per block; the mask's decay by exp2 on the
 *                        special-function unit, cum/dt read in pairs, no causal compare off the
 *                        diagonal, the diagonal tile's scores computed whole and then masked.
 *                        Layouts without those fast paths take the generic epilogue.
 *   output_mma64_kernel  64-row tiles, 4 warps, single-buffered tiles and the mask by expf: the
 *                        form for devices whose per-block shared memory does not hold the 128-row
 *                        tile (at N up to 256 that takes about 180 KB).
 */
#include "scan_output.cuh"
#include "scan_tile.cuh"

namespace ssmi_m2 {
namespace {

/* The generic epilogue of the output kernels (layouts without the staged-z fast path): z of this
 * thread's pairs loaded first (every load in flight together), then + D·x (x rows of the tile at
 * xs, kFLd apart), the z gate and the stores through the output's strides (pairs where vout).
 * Rows: rb·16 + lane/4 (+8) of the tile, token tb + row, valid below ch.len − i_tile. D per pair:
 * DS, from the block's table ds; else loaded from global memory. A non-finite value stored marks
 * (chunk, head) for the fix (mark_nonfinite; pair_tiles: the grid's consecutive blocks per pair). */
template <int MODE, bool DS>
__device__ __forceinline__ void generic_epilogue(const m2_fast_args & A, const m2_chunk & ch, int h, int p0,
                                                 long long tb, int i_tile, int rb, const float (&y)[8][4],
                                                 const typename cfg<MODE>::T * xs, const float * ds,
                                                 unsigned pair_tiles) {
    typedef typename cfg<MODE>::T T;
    const int lane = threadIdx.x & 31;
    float2    zv[8][2];
#pragma unroll
    for (int t = 0; t < 8; ++t) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int       p = p0 + t * 8 + 2 * (lane & 3), ii = rb * 16 + (lane >> 2) + half * 8;
            const long long zo = ch.b * A.z.s[0] + (tb + ii) * A.z.s[1] + h * A.z.s[2] + p * A.z.s[3];
            zv[t][half] = make_float2(0.0f, 0.0f);
            if (!A.has_z || p >= A.P || i_tile + ii >= ch.len) continue;
            if (A.vz && p + 1 < A.P)
                zv[t][half] = t2<MODE>::unpack(__ldg(reinterpret_cast<const unsigned int *>((const T *)A.z.p + zo)));
            else
                zv[t][half] = make_float2(ssmi_cu_ld(A.z.p, A.z.dtype, zo),
                                          p + 1 < A.P ? ssmi_cu_ld(A.z.p, A.z.dtype, zo + A.z.s[3]) : 0.0f);
        }
    }
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        const int pl = t * 8 + 2 * (lane & 3), p = p0 + pl;
        if (p >= A.P) continue;
        const bool two = p + 1 < A.P;
        float      d0, d1;
        if constexpr (DS) {
            d0 = ds[pl], d1 = two ? ds[pl + 1] : 0.0f;
        } else {
            d0 = A.has_d ? ssmi_cu_ld(A.d.p, A.d.dtype, h * A.d.s[0] + (A.d_2d ? p * A.d.s[1] : 0)) : 0.0f;
            d1 = A.has_d && two ? ssmi_cu_ld(A.d.p, A.d.dtype, h * A.d.s[0] + (A.d_2d ? (p + 1) * A.d.s[1] : 0)) : 0.0f;
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int ii = rb * 16 + (lane >> 2) + half * 8; /* row in the tile */
            if (i_tile + ii >= ch.len) continue;
            const long long t_ = tb + ii;
            const float2    xv = t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(&xs[ii * kFLd + pl]));
            float           v0 = y[t][2 * half] + d0 * xv.x, v1 = y[t][2 * half + 1] + d1 * xv.y;
            if (A.has_z) {
                const float z0 = zv[t][half].x, z1 = zv[t][half].y;
                v0 *= z0 / (1.0f + expf(-z0));
                v1 *= z1 / (1.0f + expf(-z1));
            }
            if (!isfinite(v0) || (two && !isfinite(v1))) mark_nonfinite(A.nonfinite, blockIdx.x / pair_tiles);
            const long long oo = ch.b * A.os[0] + t_ * A.os[1] + h * A.os[2] + p * A.os[3];
            if (A.vout && two) {
                if (A.out_dtype == SSM_DTYPE_F32)
                    *reinterpret_cast<float2 *>((float *)A.out + oo) = make_float2(v0, v1);
                else
                    *reinterpret_cast<uint32_t *>((T *)A.out + oo) = t2<MODE>::pack(v0, v1);
            } else {
                ssmi_cu_st(A.out, A.out_dtype, oo, v0);
                if (two) ssmi_cu_st(A.out, A.out_dtype, oo + A.os[3], v1);
            }
        }
    }
}

/* A warp's 16 × 64 product step acc += a·Bᵀ for one 16-deep k slice ks: a the warp's A fragment of
 * that slice (ldsm4), B as 64 rows of k, LN apart, in four 16-row n blocks. */
template <int MODE>
__device__ __forceinline__ void mma_nk_step(float (&acc)[8][4], const uint32_t (&a)[4],
                                            const typename cfg<MODE>::T * bm, int LN, int ks, int lane) {
    uint32_t b[4][4];
#pragma unroll
    for (int np = 0; np < 4; ++np) ldsm4(b[np], &bm[np * 16 * LN + ks * 16 + b_nk_off(lane, LN)]);
    mma_row4<MODE>(acc, a, b);
}

/* y (16 rows × 64 p) += scores (16 rows × 64 tokens, fp32, split hi/lo: two products) · x (64 tokens
 * × 64 p, rows kFLd apart); where diag, the token blocks after `last` are left out. */
template <int MODE>
__device__ __forceinline__ void scores_times_x(float (&y)[8][4], const float (&sc)[8][4],
                                               const typename cfg<MODE>::T * xs, int lane, bool diag, int last) {
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        if (diag && ks > last) continue;
        uint32_t ah[4], al[4];
        split2<MODE>(sc[2 * ks][0], sc[2 * ks][1], ah[0], al[0]);
        split2<MODE>(sc[2 * ks][2], sc[2 * ks][3], ah[1], al[1]);
        split2<MODE>(sc[2 * ks + 1][0], sc[2 * ks + 1][1], ah[2], al[2]);
        split2<MODE>(sc[2 * ks + 1][2], sc[2 * ks + 1][3], ah[3], al[3]);
        uint32_t b[4][4];
#pragma unroll
        for (int np = 0; np < 4; ++np) ldsm4_t(b[np], &xs[ks * 16 * kFLd + np * 16 + b_kn_off(lane, kFLd)]);
        mma_row4<MODE>(y, ah, b);
        mma_row4<MODE>(y, al, b);
    }
}

/* The entering state of a block's 64-wide P tile (P tile x N, fp32, from A.states at row wh) into
 * shared memory as hi/lo planes of T (rows LN apart), by THREADS threads with 4 loads in flight
 * each: for the layouts without the split planes of state_pass_split_kernel. */
template <int MODE, int THREADS>
__device__ __forceinline__ void split_state_tile(const m2_fast_args & A, long long wh, int p0, int LN,
                                                 typename cfg<MODE>::T * ss_hi, typename cfg<MODE>::T * ss_lo) {
    const int     tid = threadIdx.x;
    const float * st = A.states + wh * A.P * A.N;
    const int     c4 = A.Np / 4, total = kFT * c4;
    const int     U = 4; /* loads in flight per thread */
    for (int o0 = tid; o0 < total; o0 += U * THREADS) {
        float v[U][4];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int o = o0 + u * THREADS, r = o / c4, c = (o - r * c4) * 4, p = p0 + r;
            if (o < total && (A.N & 3) == 0 && p < A.P && c < A.N) {
                const float4 f = __ldg(reinterpret_cast<const float4 *>(st + (long long)p * A.N + c));
                v[u][0] = f.x, v[u][1] = f.y, v[u][2] = f.z, v[u][3] = f.w;
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    v[u][e] = (o < total && p < A.P && c + e < A.N) ? st[(long long)p * A.N + c + e] : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int o = o0 + u * THREADS, r = o / c4, c = (o - r * c4) * 4;
            if (o >= total) break;
            uint32_t hi[2], lo[2];
            split2<MODE>(v[u][0], v[u][1], hi[0], lo[0]);
            split2<MODE>(v[u][2], v[u][3], hi[1], lo[1]);
            *reinterpret_cast<uint2 *>(&ss_hi[r * LN + c]) = make_uint2(hi[0], hi[1]);
            *reinterpret_cast<uint2 *>(&ss_lo[r * LN + c]) = make_uint2(lo[0], lo[1]);
        }
    }
}

/* ---- 64-row tiles ----------------------------------------------------------------------------- */

template <int MODE> struct out64_smem {
    size_t cs, ss_hi, ss_lo, bs, xs, total;
    __host__ __device__ out64_smem(int Np) {
        typedef typename cfg<MODE>::T T;
        const size_t tn = sizeof(T) * kFT * (Np + 8), tt = sizeof(T) * kFT * kFLd;
        cs = 0;
        /* phase 1 (entering state) and phase 2 (B and x tiles) share one region */
        ss_hi = align128(tn);
        ss_lo = ss_hi + align128(tn);
        bs = ss_hi;
        xs = bs + align128(tn);
        const size_t p1 = ss_lo + align128(tn), p2 = xs + align128(tt);
        total = p1 > p2 ? p1 : p2;
    }
};

template <int MODE> __global__ void __launch_bounds__(kFastThreads, 4) output_mma64_kernel(const m2_fast_args A) {
    typedef typename cfg<MODE>::T T;
    __shared__ float dts[kScanQ], cums[kScanQ];
    extern __shared__ __align__(128) unsigned char smem[];
    const out64_smem<MODE> L(A.Np);
    T *                       cs = (T *)(smem + L.cs);
    T *                       ss_hi = (T *)(smem + L.ss_hi);
    T *                       ss_lo = (T *)(smem + L.ss_lo);
    T *                       bs = (T *)(smem + L.bs);
    T *                       xs = (T *)(smem + L.xs);

    const long long blk = blockIdx.x;
    const int       nz = A.n_itiles * A.n_ptiles;
    const long long wh = blk / nz;
    const int       z = (int)(blk - wh * nz);
    const int       w = (int)(wh / A.H), h = (int)(wh - (long long)w * A.H);
    const int       i0 = (z / A.n_ptiles) * kFT, p0 = (z % A.n_ptiles) * kFT;
    const m2_chunk  ch = A.chunks[w];
    if (i0 >= ch.len) return; /* uniform over the block */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = h / (A.H / A.G);
    const int LN = A.Np + 8, KS = A.Np / 16;
    const int nlen = min(ch.len, i0 + kFT);
    {
        const float * dd = A.dtc + wh * 2 * kScanQ;
        for (int i = tid; i < nlen; i += blockDim.x) dts[i] = dd[i], cums[i] = dd[kScanQ + i];
    }

    /* C rows of the tile; the entering state (P tile x N), fp32 -> split */
    tile_to_smem<MODE>(cs, LN, A.c, A.vc, ch.b * A.c.s[0] + (ch.t0 + i0) * A.c.s[1] + g * A.c.s[2], A.c.s[1],
                       A.c.s[3], kFT, A.Np, ch.len - i0, A.N);
    split_state_tile<MODE, kFastThreads>(A, wh, p0, LN, ss_hi, ss_lo);
    cp_async_wait_all();
    __syncthreads();

    /* y (16 rows x 64 p) = C · S_inᵀ, rows scaled by exp(cum_i) */
    float y[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i][0] = y[i][1] = y[i][2] = y[i][3] = 0.0f;
    const T * crow = cs + warp * 16 * LN + a_row_off(lane, LN);
    for (int ks = 0; ks < KS; ++ks) {
        uint32_t a[4];
        ldsm4(a, crow + ks * 16);
        mma_nk_step<MODE>(y, a, ss_hi, LN, ks, lane);
        mma_nk_step<MODE>(y, a, ss_lo, LN, ks, lane);
    }
    const int   ri0 = i0 + warp * 16 + (lane >> 2), ri1 = ri0 + 8; /* this thread's rows (chunk index) */
    const float ci0 = ri0 < nlen ? cums[ri0] : 0.0f, ci1 = ri1 < nlen ? cums[ri1] : 0.0f;
    {
        const float e0 = ri0 < nlen ? expf(ci0) : 0.0f, e1 = ri1 < nlen ? expf(ci1) : 0.0f;
#pragma unroll
        for (int t = 0; t < 8; ++t) y[t][0] *= e0, y[t][1] *= e0, y[t][2] *= e1, y[t][3] *= e1;
    }
    __syncthreads(); /* the state region becomes the B and x tiles */

    const long long bb = ch.b * A.b.s[0] + g * A.b.s[2];
    const long long xb = ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3];
    for (int j0 = 0; j0 <= i0; j0 += kFT) {
        const int nr = ch.len - j0;
        tile_to_smem<MODE>(bs, LN, A.b, A.vb, bb + (ch.t0 + j0) * A.b.s[1], A.b.s[1], A.b.s[3], kFT, A.Np, nr, A.N);
        tile_to_smem<MODE>(xs, kFLd, A.x, A.vx, xb + (ch.t0 + j0) * A.x.s[1], A.x.s[1], A.x.s[3], kFT, kFT, nr,
                           A.P - p0);
        cp_async_wait_all();
        __syncthreads();
        const bool diag = j0 == i0;
        /* scores (16 rows x 64 tokens) = C · Bᵀ; on the diagonal tile, token pairs above row 16·warp+15 are 0 */
        float sc[8][4];
#pragma unroll
        for (int i = 0; i < 8; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
        for (int ks = 0; ks < KS; ++ks) {
            uint32_t a[4];
            ldsm4(a, crow + ks * 16);
            uint32_t b[4][4];
#pragma unroll
            for (int np = 0; np < 4; ++np)
                if (!diag || np <= warp) ldsm4(b[np], &bs[np * 16 * LN + ks * 16 + b_nk_off(lane, LN)]);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                if (diag && np > warp) continue;
                mma16816<MODE>(sc[2 * np], a, b[np][0], b[np][1]);
                mma16816<MODE>(sc[2 * np + 1], a, b[np][2], b[np][3]);
            }
        }
        /* causal mask, decay and dt: sc(i, j) · exp(cum_i − cum_j) · dt_j for j ≤ i < len */
#pragma unroll
        for (int t = 0; t < 8; ++t) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int   i = (e >> 1) ? ri1 : ri0;
                const float ci = (e >> 1) ? ci1 : ci0;
                const int   j = j0 + t * 8 + 2 * (lane & 3) + (e & 1);
                sc[t][e] = (i < nlen && j <= i) ? sc[t][e] * expf(ci - cums[j]) * dts[j] : 0.0f;
            }
        }
        /* y += scores · x (tokens x p) */
        scores_times_x<MODE>(y, sc, xs, lane, diag, warp);
        if (!diag) __syncthreads(); /* the next step overwrites the tiles; the last x tile stays for D */
    }

    /* epilogue: D·x (x rows of this tile are the last x tile), z gate, store pairs; z first,
     * every load in flight together */
    generic_epilogue<MODE, false>(A, ch, h, p0, ch.t0 + i0, i0, warp, y, xs, nullptr, (unsigned)nz);
}

/* ---- 128-row tiles ---------------------------------------------------------------------------- */

template <typename T> __device__ __forceinline__ T * wide_buf(unsigned char * smem, int o0, int od, int k) {
    return (T *)(smem + o0 + k * od);
}

template <int MODE> __global__ void __launch_bounds__(kWideThreads, 2) output_mma_kernel(const m2_fast_args A) {
    typedef typename cfg<MODE>::T T;
    __shared__ __align__(16) float dts[kScanQ];
    __shared__ __align__(16) float cums[kScanQ];
    __shared__ __align__(16) float ds[kFT];
    extern __shared__ __align__(128) unsigned char smem[];
    const wide_out_smem<MODE> L(A.Np);
    T *                     cs = (T *)(smem + L.cs);
    T *                     ss_hi = (T *)(smem + L.ss_hi);
    T *                     ss_lo = (T *)(smem + L.ss_lo);
    const int ob0 = (int)L.b0, ox0 = (int)L.x0, obd = (int)(L.b1 - L.b0), oxd = (int)(L.x1 - L.x0);

    const out_block  bk = out_block_of(A);
    const int       h = bk.h, i0 = bk.i0, p0 = bk.p0;
    const long long wh = bk.wh;
    const m2_chunk  ch = A.chunks[bk.w];
    if (i0 >= ch.len) return; /* uniform over the block */
    const int  tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int  wq = warp & 3;               /* the warp's 16-row slice within its 64-row tile */
    const int  iw = i0 + (warp >> 2) * kFT; /* start of this warp's 64-row tile               */
    const bool active = iw < ch.len;        /* warp-uniform                                    */
    const int  g = h / (A.H / A.G);
    const int  LN = A.Np + 8, KS = A.Np / 16;
    const int  nlen = min(ch.len, i0 + kWideRows);
    const int  ntiles = (i0 + kFT < ch.len ? i0 + kFT : i0) / kFT + 1;
    /* z rows go through this warp's own C rows (row pitch LN ≥ 64 + 8 needs Np ≥ 64) */
    const bool      zstage = A.has_z && A.vz16 && A.Np >= kFT;
    const long long bb = ch.b * A.b.s[0] + g * A.b.s[2];
    const long long xb = ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3];
    block_tables(A, wh, h, p0, nlen, dts, cums, ds);

    /* group 0: the C rows of the tile (and the entering state when state_pass_split_kernel split it:
     * its hi and lo planes, 16-byte rows); group 1: B/x of token tile 0 */
    tile_any<MODE>(cs, LN, A.c, A.vc, ch.b * A.c.s[0] + (ch.t0 + i0) * A.c.s[1] + g * A.c.s[2], A.c.s[1], A.c.s[3],
                  kWideRows, A.Np, ch.len - i0, A.N);
    if (A.split != NULL) {
        const T * sp = (const T *)A.split + wh * 2 * A.P * A.N + (long long)p0 * A.N;
        tile_vec<T>(ss_hi, LN, sp, A.N, kFT, A.Np >> 3, A.P - p0, A.N);
        tile_vec<T>(ss_lo, LN, sp + (long long)A.P * A.N, A.N, kFT, A.Np >> 3, A.P - p0, A.N);
    }
    cp_async_commit();
    tile_any<MODE>(wide_buf<T>(smem, ob0, obd, 0), LN, A.b, A.vb, bb + ch.t0 * A.b.s[1], A.b.s[1], A.b.s[3], kFT, A.Np,
                  ch.len, A.N);
    tile_any<MODE>(wide_buf<T>(smem, ox0, oxd, 0), kFLd, A.x, A.vx, xb + ch.t0 * A.x.s[1], A.x.s[1], A.x.s[3], kFT, kFT,
                  ch.len, A.P - p0);
    cp_async_commit();
    /* the entering state (P tile x N), fp32 -> split, while the copies fly (unless group 0 brought
     * it already split) */
    if (A.split == NULL) split_state_tile<MODE, kWideThreads>(A, wh, p0, LN, ss_hi, ss_lo);
    cp_async_wait_group<1>();
    __syncthreads();

    /* y (16 rows x 64 p) = C · S_inᵀ, rows scaled by exp(cum_i) */
    float y[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i][0] = y[i][1] = y[i][2] = y[i][3] = 0.0f;
    const T * crow = cs + warp * 16 * LN + a_row_off(lane, LN);
    if (active) {
#pragma unroll 2
        for (int ks = 0; ks < KS; ++ks) {
            uint32_t a[4];
            ldsm4(a, crow + ks * 16);
            mma_nk_step<MODE>(y, a, ss_hi, LN, ks, lane);
            mma_nk_step<MODE>(y, a, ss_lo, LN, ks, lane);
        }
    }
    const int   ri0 = iw + wq * 16 + (lane >> 2), ri1 = ri0 + 8; /* this thread's rows (chunk index) */
    const float ci0 = ri0 < nlen ? cums[ri0] : 0.0f, ci1 = ri1 < nlen ? cums[ri1] : 0.0f;
    {
        const float e0 = ri0 < nlen ? expf(ci0) : 0.0f, e1 = ri1 < nlen ? expf(ci1) : 0.0f;
#pragma unroll
        for (int t = 0; t < 8; ++t) y[t][0] *= e0, y[t][1] *= e0, y[t][2] *= e1, y[t][3] *= e1;
    }
    __syncthreads(); /* the state region becomes B/x buffer 1 */

    for (int jt = 0; jt < ntiles; ++jt) {
        const int j0 = jt * kFT;
        if (jt + 1 < ntiles) {
            const int jn = j0 + kFT;
            const int k = (jt + 1) & 1;
            tile_any<MODE>(wide_buf<T>(smem, ob0, obd, k), LN, A.b, A.vb, bb + (ch.t0 + jn) * A.b.s[1], A.b.s[1],
                          A.b.s[3], kFT, A.Np, ch.len - jn, A.N);
            tile_any<MODE>(wide_buf<T>(smem, ox0, oxd, k), kFLd, A.x, A.vx, xb + (ch.t0 + jn) * A.x.s[1], A.x.s[1],
                          A.x.s[3], kFT, kFT, ch.len - jn, A.P - p0);
        }
        cp_async_commit();        /* possibly empty: one group per step */
        cp_async_wait_group<1>(); /* tile jt of this thread is done; tile jt+1 (and a z copy) may fly */
        __syncthreads();
        const T *  bs = wide_buf<T>(smem, ob0, obd, jt & 1);
        const T *  xs = wide_buf<T>(smem, ox0, oxd, jt & 1);
        const bool diag = j0 == iw;
        if (active && j0 <= iw) {
            /* scores (16 rows x 64 tokens) = C · Bᵀ, whole tiles (the diagonal one is masked below) */
            float sc[8][4];
#pragma unroll
            for (int i = 0; i < 8; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
#pragma unroll 2
            for (int ks = 0; ks < KS; ++ks) {
                uint32_t a[4];
                ldsm4(a, crow + ks * 16);
                mma_nk_step<MODE>(sc, a, bs, LN, ks, lane);
            }
            if (diag && zstage) {
                /* this warp's C rows are no longer read: its 16 z rows (64 p) go there, in flight
                 * during the products below (a group of its own; waited for in the epilogue or by
                 * the next step's wait) */
                __syncwarp();
                const T * zsrc = (const T *)A.z.p + ch.b * A.z.s[0] + h * A.z.s[2] + p0;
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int v = lane + 32 * u, r = v >> 3, c = (v & 7) * 8, row = iw + wq * 16 + r;
                    T *       d = cs + (warp * 16 + r) * LN + c;
                    if (row < ch.len && p0 + c < A.P)
                        cp_async16(d, zsrc + (ch.t0 + row) * A.z.s[1] + c);
                    else
                        *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
                }
                cp_async_commit();
            }
            const int jb = j0 + 2 * (lane & 3);
            if (diag)
                mask_scores<true>(sc, cums, dts, jb, ri0, ri1, ci0, ci1);
            else
                mask_scores<false>(sc, cums, dts, jb, ri0, ri1, ci0, ci1);
            /* y += scores · x (tokens x p); on the diagonal, token blocks after the warp's rows are 0 */
            scores_times_x<MODE>(y, sc, xs, lane, diag, wq);
        }
        /* the next step prefetches tile jt+2 into this buffer: everybody must be done with it.
         * The last two tiles are never overwritten: they hold the diagonal x rows used for D. */
        if (jt + 2 < ntiles) __syncthreads();
    }
    if (!active) return; /* no barrier follows */

    /* epilogue: + D·x (the warp's diagonal x tile), the z gate, stores of pairs */
    const T *       xd = wide_buf<T>(smem, ox0, oxd, (iw / kFT) & 1);
    const long long tb = ch.t0 + iw;
    if (A.vout && (!A.has_z || zstage)) {
        /* x: the warp's diagonal x tile; z: the warp's rows staged over its C rows */
        epilogue_pairs<MODE>(A, ch, y, ds, iw, wq, h, p0, [&](int ii, int pl) { return xd + ii * kFLd + pl; },
                             [&](int r16, int pl) { return cs + (warp * 16 + r16) * LN + pl; });
        return;
    }
    /* any other layout: the generic epilogue (z from global memory, generic loads and stores) */
    generic_epilogue<MODE, true>(A, ch, h, p0, tb, iw, wq, y, xd, ds, (unsigned)(kWideRowTiles * A.n_ptiles));
}

} /* namespace */

ssm_status launch_output_mma(ssm_context * ctx, const char * op, int mode, const m2_fast_args & A, long long W) {
    if (W == 0 || A.H == 0 || A.P == 0) return SSM_STATUS_OK;
    void (*kernel)(const m2_fast_args) = mode == M_F16 ? output_mma_kernel<M_F16> : output_mma_kernel<M_BF16>;
    const size_t smem = mode == M_F16 ? wide_out_smem<M_F16>(A.Np).total : wide_out_smem<M_BF16>(A.Np).total;
    return launch_blocks(ctx, op, kernel, A, W * A.H * (long long)kWideRowTiles * A.n_ptiles, kWideThreads, (int)smem,
                         "output_mma_kernel launch");
}

ssm_status launch_output_mma64(ssm_context * ctx, const char * op, int mode, const m2_fast_args & A, long long W) {
    if (W == 0 || A.H == 0 || A.P == 0) return SSM_STATUS_OK;
    void (*kernel)(const m2_fast_args) = mode == M_F16 ? output_mma64_kernel<M_F16> : output_mma64_kernel<M_BF16>;
    const size_t smem = mode == M_F16 ? out64_smem<M_F16>(A.Np).total : out64_smem<M_BF16>(A.Np).total;
    return launch_blocks(ctx, op, kernel, A, W * A.H * (long long)A.n_itiles * A.n_ptiles, kFastThreads, (int)smem,
                         "output_mma64_kernel launch");
}

} /* namespace ssmi_m2 */
