/*
 * output_wgmma.cu — step 3 of the 16-bit scan on Hopper's wgmma (sm_90a builds; sm_90 devices):
 * output_mma_kernel's grid, block (256 threads = 2 warpgroups, rows i0..i0+63 and i0+64..i0+127),
 * math (the same split products, fp32 accumulators), mask and epilogue, with the three products
 * as wgmma.mma_async m64n64k16 reading shared memory through matrix descriptors (wgmma.cuh):
 *   y  = C · S_inᵀ        A = the warpgroup's C rows (K-major, K = N), B = S_hi then S_lo (K-major)
 *   sc = C · B_tileᵀ      A = C rows, B = the token tile's B rows (K-major)
 *   y += split(sc) · x    A = the masked scores from registers (hi then lo: the mma.sync A fragment
 *                         of the warp's rows), B = the x tile, MN-major (imm-trans-b 1)
 * The accumulator fragment of warp wq of the warpgroup is the mma.sync kernel's float [8][4] of its
 * 16 rows (wgmma.cuh: "register fragments"). Every operand tile is stored in the 128-byte swizzled
 * layout (ssmi_wg::swz_off), 1024-byte aligned; the epilogue's reads of x (D·x) and of the staged z
 * rows use the same addressing. Beyond the change of instruction:
 *  - Overlap. The scores of token tile j+1 (C·B_{j+1}ᵀ) are issued at the end of step j and
 *    waited for at the start of step j+1, so they run through the step's barrier and copy waits;
 *    C·S_in and the scores of tile 0 run as one group. B is double-buffered two tiles ahead (B1 is
 *    a buffer of its own; the entering-state planes share their region with x buffer 1, dead
 *    after C·S_in; x buffer 0 is a region of its own, so x of tile 0 loads with the prologue).
 *    A second score accumulator, to run scores(j+1) under the mask of tile j, would not fit in
 *    128 registers.
 *  - The mask off the diagonal. For a warpgroup's rows i ≥ iw and a token j < iw,
 *    exp(cum_i − cum_j) = exp(cum_i − cum_iw) · exp(cum_iw − cum_j), both exponents ≤ 0 (cum is
 *    non-increasing), so no overflow and no new underflow: per row r_i and per column
 *    w_j = exp(cum_iw − cum_j)·dt_j (shared tables, made once per block) replace the per-element
 *    subtract, exp and two multiplies by two multiplies. The diagonal tile keeps the full mask.
 *  - Address arithmetic. Copies with compile-time trip counts and per-thread swizzled offsets
 *    computed once per call (the rows a thread copies are 16 or 32 apart, so their swizzle phase is
 *    the same); descriptors built once per chain and advanced by constants; accumulators started
 *    by the first wgmma of a chain (scale-d 0) instead of zeroed by moves.
 * Differences in the arithmetic from output_mma_kernel: the diagonal tile's scores · x product runs
 * all four k-steps for every warp (a warpgroup instruction cannot skip per warp; the scores above
 * the diagonal are 0), the hi and lo products of C · S_inᵀ are two chains instead of interleaved,
 * and the factored off-diagonal weights round slightly differently (a few ulp).
 * Step j (all 256 threads take every step and its one __syncthreads; a warpgroup does the wgmma
 * work of the steps j ≤ its diagonal tile):
 *   (a) wait for scores(j) (executed by both warpgroups: an idle one has nothing pending);
 *   (b) wait for this thread's copies (B of j+1, x of j), proxy fence, __syncthreads;
 *   (c) mask and split scores(j); the x chain of j (hi, then lo) into y, waited for at once;
 *   (d) copies, with only y live: B of j+2 into B buffer j&1 (it held B of j: scores(j) are done
 *       in every warpgroup, (a) precedes the barrier), x of j+1 into x buffer (j+1)&1 (it held x
 *       of j−1, whose chain every warpgroup waited for in step j−1), and at the diagonal step the
 *       warp's z rows into its own C rows (no scores read them any more); commit;
 *   (e) issue scores(j+1) (if j+1 ≤ the diagonal tile) into the score accumulator.
 * ptxas notes: a wgmma issued under a condition nested inside the block of another wgmma chain
 * makes ptxas serialize every wgmma of the kernel (C7520); the issue in (e) is a block of its own.
 * The diagonal x tiles stay for the epilogue's D·x: x of tile j is overwritten only by x of j+2,
 * and the two diagonal tiles are the last two.
 * Applies (mamba2.cu) to C, B, x of the compute type in contiguous 16-byte rows, N = 64 or 128,
 * the split entering states, out in pairs and z (if any) in 16-byte rows.
 */
#include "scan_output.cuh"
#include "scan_tile.cuh"

#if SSMI_CUDA_WGMMA
namespace ssmi_m2 {
namespace {

#if SSMI_WG_HAVE /* device helpers, only in the passes that compile the kernel's body */
/* The off-diagonal mask of a 16 × 64 score tile (fragment layout): sc(i, j) · r_i · w_j with
 * r_i = exp(cum_i − cum_iw) (r0, r1: this thread's two rows) and w_j = exp(cum_iw − cum_j)·dt_j
 * from the warpgroup's table (wc + 8t: this thread's column pair of column block t). */
__device__ __forceinline__ void mask_scores_off(float (&sc)[8][4], const float * wc, float r0, float r1) {
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        const float2 w = *reinterpret_cast<const float2 *>(wc + t * 8);
        sc[t][0] *= r0 * w.x, sc[t][1] *= r0 * w.y, sc[t][2] *= r1 * w.x, sc[t][3] *= r1 * w.y;
    }
}
#endif

template <int MODE, int KA>
__global__ void __launch_bounds__(kWideThreads, 2) output_wgmma_kernel(const m2_fast_args A) {
#if SSMI_WG_HAVE
    typedef typename cfg<MODE>::T T;
    constexpr bool BF = MODE == M_BF16;
    constexpr int  C8 = KA * 8; /* 16-byte chunks of a C, B or state row */
    constexpr int  AT = ssmi_wg::kAtomBytes;
    __shared__ __align__(16) float dts[kScanQ];
    __shared__ __align__(16) float cums[kScanQ];
    __shared__ __align__(16) float ds[kFT];
    __shared__ __align__(16) float wcol[2][kScanQ]; /* per warpgroup: exp(cum_iw − cum_j)·dt_j, j < iw */
    __shared__ __align__(16) float rrow[kWideRows];   /* per row i0 + r: exp(cum_i − cum_iw) (0 past the chunk) */
    extern __shared__ __align__(1024) unsigned char smem_wg_out[];
    /* the swizzle pattern is a function of address bits 4-9: align the base at run time */
    const unsigned  raw = smem_addr(smem_wg_out);
    unsigned char * sm = smem_wg_out + (((raw + 1023u) & ~1023u) - raw);
    const unsigned  sb = smem_addr(sm);
    const wg_out_smem L(KA);

    const out_block  bk = out_block_of(A);
    const int       h = bk.h, i0 = bk.i0, p0 = bk.p0;
    const long long wh = bk.wh;
    const m2_chunk  ch = A.chunks[bk.w];
    if (i0 >= ch.len) return; /* uniform over the block */
    const int  tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int  wg = warp >> 2;       /* warpgroup: rows i0 + 64·wg ..                  */
    const int  wq = warp & 3;        /* the warp's 16-row slice within its warpgroup   */
    const int  iw = i0 + wg * kFT;   /* start of this warpgroup's 64-row tile          */
    const bool active = iw < ch.len; /* warpgroup-uniform (wgmma needs all 128 threads) */
    const int  mydg = iw / kFT;      /* this warpgroup's diagonal token tile           */
    const int  g = h / (A.H / A.G);
    const int  nlen = min(ch.len, i0 + kWideRows);
    const int  ntiles = (i0 + kFT < ch.len ? i0 + kFT : i0) / kFT + 1;
    const bool zstage = A.has_z != 0; /* the host asks for z in 16-byte rows (vz16) */
    const T *  bsrc = (const T *)A.b.p + ch.b * A.b.s[0] + g * A.b.s[2] + ch.t0 * A.b.s[1];
    const T *  xsrc = (const T *)A.x.p + ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3] + ch.t0 * A.x.s[1];
    const unsigned c_wg = sb + (unsigned)(L.cs + wg * KA * AT); /* this warpgroup's C rows */
    block_tables(A, wh, h, p0, nlen, dts, cums, ds);

    /* group 0: the C rows, the split entering state (hi and lo planes) and B of token tile 0;
     * group 1: B of token tile 1 and x of token tile 0 (waited for at step 0's barrier) */
    wg_tile_rows<T, C8, kWideRows, true>(sm + L.cs,
                                  (const T *)A.c.p + ch.b * A.c.s[0] + (ch.t0 + i0) * A.c.s[1] + g * A.c.s[2],
                                  A.c.s[1], ch.len - i0, 0);
    {
        const T * sp = (const T *)A.split + wh * 2 * A.P * A.N + (long long)p0 * A.N;
        wg_tile_rows<T, C8, kFT, true>(sm + L.ss_hi, sp, A.N, A.P - p0, 0);
        wg_tile_rows<T, C8, kFT, true>(sm + L.ss_lo, sp + (long long)A.P * A.N, A.N, A.P - p0, 0);
    }
    wg_tile_rows<T, C8, kFT, true>(sm + L.b0, bsrc, A.b.s[1], ch.len, 0);
    cp_async_commit();
    if (ntiles > 1) wg_tile_rows<T, C8, kFT, true>(sm + L.b1, bsrc + kFT * A.b.s[1], A.b.s[1], ch.len - kFT, 0);
    wg_tile_rows<T, 8, kFT, false>(sm + L.x0, xsrc, A.x.s[1], ch.len, A.P - p0);
    cp_async_commit();
    cp_async_wait_group<1>();
    ssmi_wg::fence_proxy_async(); /* this thread's copies and zero stores, seen by the async proxy */
    __syncthreads();

    /* y (64 rows x 64 p per warpgroup) = C · S_inᵀ (hi, then lo); scores(0) follow at once */
    float    y[8][4], sc[8][4];
    uint32_t ah[4][4], al[4][4];
    if (active) {
        /* the column and row factors of the off-diagonal tiles (read after step 0's barrier; not
         * while the products fly: this loop diverges), both ≤ 1: exp(cum_iw − cum_j)·dt_j for
         * j < iw and exp(cum_i − cum_iw) for the warpgroup's rows */
        const float cw = cums[iw];
        for (int j = tid & 127; j < iw; j += 128) wcol[wg][j] = fast_exp2((cw - cums[j]) * kLog2e) * dts[j];
        if ((tid & 127) < kFT) {
            const int i = iw + (tid & 127);
            rrow[i - i0] = i < nlen ? fast_exp2((cums[i] - cw) * kLog2e) : 0.0f;
        }
        ssmi_wg::fence();
        ssmi_wg::chain_k<BF, KA, false>(y, c_wg, sb + L.ss_hi);
        ssmi_wg::chain_k<BF, KA, true>(y, c_wg, sb + L.ss_lo);
        ssmi_wg::chain_k<BF, KA, false>(sc, c_wg, sb + L.b0);
        ssmi_wg::commit();
    }
    ssmi_wg::wait<0>(); /* C · S_inᵀ and scores(0) (nothing pending in an idle warpgroup) */
    ssmi_wg::keep(y);
    ssmi_wg::keep(sc);
    /* this thread's first row, relative to i0 (the second is 8 further); cums is 0 past the
     * chunk, as the diagonal mask expects of rows there */
    const int rl0 = wg * kFT + wq * 16 + (lane >> 2);
    {
        const int   ri0 = i0 + rl0, ri1 = ri0 + 8;
        const float e0 = ri0 < nlen ? expf(cums[ri0]) : 0.0f, e1 = ri1 < nlen ? expf(cums[ri1]) : 0.0f;
#pragma unroll
        for (int t = 0; t < 8; ++t) y[t][0] *= e0, y[t][1] *= e0, y[t][2] *= e1, y[t][3] *= e1;
    }

#pragma unroll 1
    for (int jt = 0; jt < ntiles; ++jt) {
        /* (a) */
        ssmi_wg::wait<0>();
        ssmi_wg::keep(sc);
        /* (b) (at step 0 also: every C · S_inᵀ is done, so the state region may take x of tile 1) */
        cp_async_wait_group<0>(); /* B of jt+1 and x of jt, of this thread */
        ssmi_wg::fence_proxy_async();
        __syncthreads();
        const bool mine = active && jt <= mydg;
        /* (c) mask, split, y += split(scores) · x (tokens x p: A from registers, x MN-major) */
        if (mine) {
            const int jb = jt * kFT + 2 * (lane & 3);
            if (jt == mydg)
                mask_scores<true>(sc, cums, dts, jb, i0 + rl0, i0 + rl0 + 8, cums[i0 + rl0], cums[i0 + rl0 + 8]);
            else
                mask_scores_off(sc, &wcol[wg][jb], rrow[rl0], rrow[rl0 + 8]);
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) {
                split2<MODE>(sc[2 * ks][0], sc[2 * ks][1], ah[ks][0], al[ks][0]);
                split2<MODE>(sc[2 * ks][2], sc[2 * ks][3], ah[ks][1], al[ks][1]);
                split2<MODE>(sc[2 * ks + 1][0], sc[2 * ks + 1][1], ah[ks][2], al[ks][2]);
                split2<MODE>(sc[2 * ks + 1][2], sc[2 * ks + 1][3], ah[ks][3], al[ks][3]);
            }
            ssmi_wg::fence(); /* ah/al and y (scaled) were written by ordinary instructions */
            const uint64_t dx = ssmi_wg::desc_mn(sb + (unsigned)((jt & 1) ? L.x1 : L.x0));
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(y, ah[ks], dx + (uint64_t)(ks * 2048 >> 4));
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(y, al[ks], dx + (uint64_t)(ks * 2048 >> 4));
            ssmi_wg::commit();
            ssmi_wg::wait<0>();
            ssmi_wg::keep(y);
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) ssmi_wg::keep(ah[ks]), ssmi_wg::keep(al[ks]);
        }
        /* (d) copies, with only y live (after the x chain, before the next scores) */
        if (jt + 2 < ntiles)
            wg_tile_rows<T, C8, kFT, true>(sm + ((jt & 1) ? L.b1 : L.b0), bsrc + (long long)(jt + 2) * kFT * A.b.s[1],
                                      A.b.s[1], ch.len - (jt + 2) * kFT, 0);
        if (jt + 1 < ntiles)
            wg_tile_rows<T, 8, kFT, false>(sm + (((jt + 1) & 1) ? L.x1 : L.x0), xsrc + (long long)(jt + 1) * kFT * A.x.s[1],
                                      A.x.s[1], ch.len - (jt + 1) * kFT, A.P - p0);
        if (mine && jt == mydg && zstage) {
            /* the warpgroup's C rows are no longer read (scores(mydg) are done in all its warps:
             * (a) precedes the barrier, and no later scores are issued): each warp's 16 z rows
             * (64 p) go into its own C rows */
            const T * zsrc = (const T *)A.z.p + ch.b * A.z.s[0] + h * A.z.s[2] + p0;
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int       v = lane + 32 * u, r = v >> 3, c = (v & 7) * 8, row = iw + wq * 16 + r;
                unsigned char * d = sm + L.cs + wg * KA * AT + ssmi_wg::swz_off(wq * 16 + r, c);
                if (row < ch.len && p0 + c < A.P)
                    cp_async16(d, zsrc + (ch.t0 + row) * A.z.s[1] + c);
                else
                    *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
            }
        }
        cp_async_commit(); /* possibly empty: one group per step */
        /* (e) scores(jt+1) = C · B_{jt+1}ᵀ, in flight through the next step's barrier */
        if (active && jt < mydg) {
            ssmi_wg::fence(); /* sc was read by the split */
            ssmi_wg::chain_k<BF, KA, false>(sc, c_wg, sb + (((jt + 1) & 1) ? L.b1 : L.b0));
            ssmi_wg::commit();
        }
    }
    ssmi_wg::wait<0>(); /* the last x chain (nothing pending in an idle warpgroup) */
    ssmi_wg::keep(y);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) ssmi_wg::keep(ah[ks]), ssmi_wg::keep(al[ks]);
    if (!active) return; /* no barrier follows */

    /* epilogue: + D·x (the warpgroup's diagonal x tile), the z gate, stores of pairs */
    const unsigned char * xd = sm + ((mydg & 1) ? L.x1 : L.x0);
    const unsigned char * zb = sm + L.cs + wg * KA * AT;
    epilogue_pairs<MODE>(
        A, ch, y, ds, iw, wq, h, p0, [&](int ii, int pl) { return (const T *)(xd + ssmi_wg::swz_off(ii, pl)); },
        [&](int r16, int pl) { return (const T *)(zb + ssmi_wg::swz_off(wq * 16 + r16, pl)); });
#else
    (void)A; /* no sm_90a code in this pass: never launched (describe_scan: wg_out) */
    __trap(); /* a wrong image choice fails loudly instead of leaving the outputs unwritten */
#endif
}

} /* namespace */

ssm_status launch_output_wgmma(ssm_context * ctx, const char * op, int mode, const m2_fast_args & A, long long W) {
    if (W == 0 || A.H == 0 || A.P == 0) return SSM_STATUS_OK;
    const wg_out_smem L(A.N >> 6);
    void (*kernel)(const m2_fast_args) =
        mode == M_F16 ? (A.N == 128 ? output_wgmma_kernel<M_F16, 2> : output_wgmma_kernel<M_F16, 1>)
                      : (A.N == 128 ? output_wgmma_kernel<M_BF16, 2> : output_wgmma_kernel<M_BF16, 1>);
    return launch_blocks(ctx, op, kernel, A, W * A.H * (long long)kWideRowTiles * A.n_ptiles, kWideThreads,
                         (int)L.total, "output_wgmma_kernel launch");
}

} /* namespace ssmi_m2 */
#endif /* SSMI_CUDA_WGMMA */
