/*
 * state_wgmma.cu — step 1 of the 16-bit scan on Hopper's wgmma (sm_90a builds; sm_90 devices):
 * state_mma_kernel's work per block — (chunk, head, 64-row P tile, N ≤ 128 columns): dt processing
 * and block scan, then token tiles of 64 — with the products s(P x N) += (w∘x)ᵀ·B on wgmma
 * m64n64k16 (f32 accumulators) from shared memory instead of ldmatrix + mma.sync. Per token tile:
 *   1. cp.async of x (64 tokens x 64 p, plain rows of 128 bytes) and of B (64 tokens x 64·KA n,
 *      128B swizzled: one atom per 64 n, token rows, n contiguous = the MN-major B operand),
 *      double-buffered (tile j+1 flies during tile j);
 *   2. the split pass: w_j·x_j rounded to hi and lo (split2) and written TRANSPOSED into two
 *      swizzled tiles of 64 p rows x 64 tokens (tokens contiguous = the K-major A operand, the
 *      layout of the output kernel's C rows); warp k takes tokens 8k..8k+7, lane l the p pair
 *      2l, 2l+1, so it reads 128 contiguous bytes per token row and stores 16 bytes per p row;
 *   3. warpgroup g (warps 4g..4g+3) takes N columns 64g..64g+63 of the block: 4 k-steps of the hi
 *      tile, then 4 of the lo tile, into one fp32 accumulator (SS form, A K-major, B MN-major with
 *      imm-trans-b 1: tools/wgmma_probe.cu case ss_mn_<t>).
 * The accumulator fragment of warp 4g + q is state_mma_kernel's acc[8][4] of warp q's 16 P rows and
 * group g's 64 N columns, so the stores are the same. Differences in the arithmetic from
 * state_mma_kernel: the same products (w∘x split, B exact) summed in another order (per tile all hi
 * products, then all lo), and all four k-steps of a partial last tile run (the rows past the chunk
 * are zero in both operands).
 * Applies (mamba2.cu) to x and B of the compute type in contiguous 16-byte rows and N = 64 or 128.
 * It is also the mamba2_chunk_state operator's kernel on such layouts (A.given_dt, A.st_out; chunks of
 * at most kScanQ tokens): the dt side read from the caller's tensors (chunk_dt), the summed tokens
 * from the chunk's j0 on (summed_chunk), the states stored through the caller's strides and dtype
 * (store_state_frag) instead of the dense fp32 workspace.
 */
#include "scan_dt.cuh"
#include "scan_tile.cuh"

#if SSMI_CUDA_WGMMA
namespace ssmi_m2 {
namespace {

/* KA: the N atoms of the block's B tile (N = 64·KA), so the wgmma chains unroll with constant
 * offsets. kStateMinBlocks blocks of 8 warps per SM (≤ 80 registers, ~69 KB of shared memory). */
template <int MODE, int KA>
__global__ void __launch_bounds__(kWideThreads, kStateMinBlocks) state_wgmma_kernel(const m2_fast_args A) {
#if SSMI_WG_HAVE
    typedef typename cfg<MODE>::T T;
    constexpr bool BF = MODE == M_BF16;
    __shared__ float dts[kScanQ], cums[kScanQ], tot[32];
    __shared__ __align__(16) float wts[kScanQ];
    extern __shared__ __align__(1024) unsigned char smem_wg_state[];
    /* the swizzle pattern is a function of address bits 4-9: align the base at run time */
    const unsigned  raw = smem_addr(smem_wg_state);
    unsigned char * sm = smem_wg_state + (((raw + 1023u) & ~1023u) - raw);
    const unsigned  sb = smem_addr(sm);
    const wg_state_smem   L(KA);

    const unsigned  blk = blockIdx.x; /* 32-bit index arithmetic */
    const unsigned  nz = (unsigned)A.n_ptiles; /* one 128-column group: N ≤ 128 */
    const unsigned  whu = blk / nz;
    const int       z = (int)(blk - whu * nz);
    const int       w = (int)(whu / (unsigned)A.H), h = (int)(whu - (unsigned)w * (unsigned)A.H);
    const long long wh = whu;
    const int       p0 = z * kFT;
    const int       tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int       wg = warp >> 2;       /* warpgroup: N columns 64·wg ..                 */
    const int       wq = warp & 3;        /* the warp's 16 P rows within the tile           */
    const bool      active = wg < KA;     /* warpgroup-uniform (wgmma needs all 128 threads) */
    const m2_chunk  ch = summed_chunk(plan_chunk(A, w));
    const int       g = h / (A.H / A.G);
    const long long xb = ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3];
    const long long bb = ch.b * A.b.s[0] + g * A.b.s[2];
    const T *       xsrc = (const T *)A.x.p + xb + ch.t0 * A.x.s[1];
    const T *       bsrc = (const T *)A.b.p + bb + ch.t0 * A.b.s[1];
    const int       ntiles = (ch.len + kFT - 1) / kFT;

    /* token tile 0's copies fly during the dt processing */
    tile_rows<T, kFT / 8, kFT>((T *)(sm + L.x0), xsrc, A.x.s[1], ch.len, A.P - p0);
    wg_tile_rows<T, KA * 8, kFT, true>(sm + L.b0, bsrc, A.b.s[1], ch.len, 0); /* N = 64·KA: whole rows */
    cp_async_commit();
    chunk_dt(A, ch, h, dts, cums, tot); /* ends with a barrier */
    chunk_tables(A, ch, wh, z == 0, dts, cums, wts);

    /* this thread's part of the split pass: tokens 8·warp .. +7, p rows 2·lane and 2·lane + 1; the
     * two rows' stores are issued in the order that puts the 8 lanes of a quarter warp on 8
     * different 16-byte bank groups (row & 7 all different under the swizzle) */
    const int sw = (lane >> 2) & 1;
    const int rfirst = 2 * lane + sw, rsecond = 2 * lane + 1 - sw;
    const int off_first = ssmi_wg::swz_off(rfirst, 8 * warp), off_second = ssmi_wg::swz_off(rsecond, 8 * warp);

    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    for (int jt = 0; jt < ntiles; ++jt) {
        const int j0 = jt * kFT;
        if (jt + 1 < ntiles) {
            /* buffers (jt+1)&1 were last read by tile jt-1's split and products, both behind the
             * barrier that closed step jt-1 */
            const int k = (jt + 1) & 1;
            tile_rows<T, kFT / 8, kFT>((T *)(sm + (k ? L.x1 : L.x0)), xsrc + (long long)(j0 + kFT) * A.x.s[1],
                                       A.x.s[1], ch.len - j0 - kFT, A.P - p0);
            wg_tile_rows<T, KA * 8, kFT, true>(sm + (k ? L.b1 : L.b0), bsrc + (long long)(j0 + kFT) * A.b.s[1],
                                               A.b.s[1], ch.len - j0 - kFT, 0);
        }
        cp_async_commit();            /* possibly empty: one group per step */
        cp_async_wait_group<1>();     /* tile jt of this thread is done */
        ssmi_wg::fence_proxy_async(); /* this thread's B copies and zero stores, seen by the async proxy */
        __syncthreads();              /* ... and everybody's (and wts, on the first step) */
        {
            /* the split pass: rows past the chunk are zero (zero-filled x, w = 0) */
            const T *    xr = (const T *)(sm + ((jt & 1) ? L.x1 : L.x0));
            const float4 wa = *reinterpret_cast<const float4 *>(wts + j0 + 8 * warp);
            const float4 wb = *reinterpret_cast<const float4 *>(wts + j0 + 8 * warp + 4);
            const float  wr[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
            float        v0[8], v1[8]; /* rows 2·lane, 2·lane + 1 over the 8 tokens */
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float2 f =
                    t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(xr + (8 * warp + e) * kFT + 2 * lane));
                v0[e] = f.x * wr[e], v1[e] = f.y * wr[e];
            }
            uint32_t h0[4], l0[4], h1[4], l1[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                split2<MODE>(v0[2 * e], v0[2 * e + 1], h0[e], l0[e]);
                split2<MODE>(v1[2 * e], v1[2 * e + 1], h1[e], l1[e]);
            }
            const uint4 h0v = make_uint4(h0[0], h0[1], h0[2], h0[3]), h1v = make_uint4(h1[0], h1[1], h1[2], h1[3]);
            const uint4 l0v = make_uint4(l0[0], l0[1], l0[2], l0[3]), l1v = make_uint4(l1[0], l1[1], l1[2], l1[3]);
            *reinterpret_cast<uint4 *>(sm + L.ah + off_first) = sw ? h1v : h0v;
            *reinterpret_cast<uint4 *>(sm + L.ah + off_second) = sw ? h0v : h1v;
            *reinterpret_cast<uint4 *>(sm + L.al + off_first) = sw ? l1v : l0v;
            *reinterpret_cast<uint4 *>(sm + L.al + off_second) = sw ? l0v : l1v;
        }
        ssmi_wg::fence_proxy_async(); /* the split tiles, seen by the async proxy */
        __syncthreads();
        if (active) {
            const unsigned bs = sb + (unsigned)((jt & 1) ? L.b1 : L.b0) + (unsigned)(wg * ssmi_wg::kAtomBytes);
            ssmi_wg::fence();
#pragma unroll
            for (int ks = 0; ks < 4; ++ks)
                ssmi_wg::mma_ss<BF, 1>(acc, ssmi_wg::desc_k(sb + L.ah + ks * 32), ssmi_wg::desc_mn(bs + ks * 2048));
#pragma unroll
            for (int ks = 0; ks < 4; ++ks)
                ssmi_wg::mma_ss<BF, 1>(acc, ssmi_wg::desc_k(sb + L.al + ks * 32),
                                       ssmi_wg::desc_mn(bs + ks * 2048));
            ssmi_wg::commit();
            ssmi_wg::wait<0>();
            ssmi_wg::keep(acc);
        }
        __syncthreads(); /* the next step rewrites the split tiles and, one step later, these buffers */
    }
    cp_async_wait_group<0>(); /* nothing is pending here (the last group is empty); for the record */
    if (!active) return;
    if (A.st_out != nullptr) { /* mamba2_chunk_state: the caller's states */
        /* the tiles are free: the last products completed before the loop's final barrier */
        store_state_frag(A, wh, acc, p0 + wq * 16, wg * 64, (float *)sm + warp * kFragFloats);
        return;
    }
    float * st = A.states + wh * A.P * A.N;
    const int wn = wg * 64, wp = wq * 16;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int p = p0 + wp + (lane >> 2) + half * 8;
        if (p >= A.P) continue;
        float * row = st + (long long)p * A.N;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int n = wn + t * 8 + 2 * (lane & 3); /* < N: N = 64·KA, even */
            *reinterpret_cast<float2 *>(row + n) = make_float2(acc[t][2 * half], acc[t][2 * half + 1]);
        }
    }
#else
    (void)A; /* no sm_90a code in this pass: never launched (describe_scan: wg_state) */
    __trap(); /* a wrong image choice fails loudly instead of leaving the outputs unwritten */
#endif
}

} /* namespace */

/* One block per (work chunk, head, P tile). */
ssm_status launch_state_wgmma(ssm_context * ctx, const char * op, int mode, const m2_fast_args & A, long long W) {
    if (W == 0 || A.H == 0 || A.P == 0) return SSM_STATUS_OK;
    const wg_state_smem L(A.N >> 6);
    void (*kernel)(const m2_fast_args) =
        mode == M_F16 ? (A.N == 128 ? state_wgmma_kernel<M_F16, 2> : state_wgmma_kernel<M_F16, 1>)
                      : (A.N == 128 ? state_wgmma_kernel<M_BF16, 2> : state_wgmma_kernel<M_BF16, 1>);
    return launch_blocks(ctx, op, kernel, A, W * A.H * (long long)A.n_ptiles, kWideThreads, (int)L.total,
                         "state_wgmma_kernel launch");
}

} /* namespace ssmi_m2 */
#endif /* SSMI_CUDA_WGMMA */
