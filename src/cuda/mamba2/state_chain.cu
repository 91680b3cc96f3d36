/*
 * state_chain.cu — steps 1 and 2 of the 16-bit scan in one kernel (sm_90a builds; sm_90
 * devices): the chained state. One block per (sequence, head, P tile, 64 N columns) walks the
 * sequence's chunks in order and keeps the running state in its wgmma accumulator: at each chunk
 * it writes the entering state's hi/lo planes (what state_pass_split_kernel writes), multiplies the
 * accumulator by the chunk's decay exp(cum_last), and adds the chunk's products (w∘x)ᵀ·B token
 * tile by token tile. The chunks' local states are never stored, which saves the state kernel's
 * fp32 write and the pass's read of them. A chain never waits on another block, so its speed is
 * the block's own throughput: it pays only where the grid's last wave of chains is nearly full or
 * the chains are short (the rule is in mamba2.cu).
 *   chain_dt_kernel      per (work chunk, head): the dt tables (load_dt, then the token weights
 *                        w_j = exp(cum_last − cum_j)·dt_j as state_wgmma_kernel computes them), the
 *                        output kernel's dt/cumsum tables and cum_last; the chains copy chunk k+1's
 *                        weights during chunk k, so nothing in a chain waits on a dt load.
 *   state_chain_kernel   one warpgroup per chain. Per token tile: x (64 tokens x 64 p) and B (64
 *                        tokens x 64 n) land by cp.async in a ring of kChainStages stages,
 *                        kChainStages − 2 tiles ahead (a stage is refilled once the wgmma that read
 *                        it is done); the A operand, (w∘x)ᵀ of the warp's 16 p rows, is built in
 *                        registers (ldmatrix.trans of the swizzled x tile, times the weights, split
 *                        into rounded part and remainder), then 8 wgmma (hi, lo) with B from shared
 *                        memory (MN-major). The fragments of two tiles alternate so that tile t+1's
 *                        are built while tile t's products run; one barrier per tile.
 *   state_chain2_kernel  two warpgroups per chain, for grids of several chains per SM: they take
 *                        alternate token tiles of a pair (tile 2s to warpgroup 0, 2s + 1 to
 *                        warpgroup 1) into two accumulators whose sum is the running state. The
 *                        decay is linear, so each warpgroup scales its own accumulator at a chunk's
 *                        start; only the planes (and the final state) need the sum: warpgroup 1
 *                        hands its accumulator over through shared memory (the x area of the pair
 *                        slot being refilled, 16 KB, in the fragment layout: thread i of warpgroup 1
 *                        writes what thread i of warpgroup 0 reads) and warpgroup 0 stores the
 *                        planes of acc0 + acc1. Per pair step s: wait for pair s's copies, one
 *                        barrier, at a chunk's first pair the hand-over (two more barriers), the
 *                        copies of pair s + 2 into the slot of pair s − 1 (each warpgroup one tile),
 *                        then each warpgroup its fragments and 8 wgmma, waited for at the step's end
 *                        (the copies run two pairs ahead in 6 tile stages, 96 KB: 2 blocks per SM).
 * The products are state_wgmma_kernel's (the same weights, split and k-steps); the results differ
 * from that kernel + the pass only in the order of the sums (the decay applied to the accumulator
 * and the products added to it, where the pass adds the rounded local state), and the two chains
 * differ from each other in order only (two partial accumulators, summed at each chunk start).
 */
#include "scan_dt.cuh"

#if SSMI_CUDA_WGMMA
namespace ssmi_m2 {
namespace {

const int kChainThreads = 128;
const int kChain2Threads = 256;

#if SSMI_WG_HAVE /* device helpers of the chain, only in the passes that compile its body */
/* A 64 x 64 tile of T into the swizzled layout by 128 threads (a warpgroup): element (r, c) from
 * src + r·srow + c; rows ≥ nr or columns ≥ nc zero-filled. Thread tid takes rows tid/8 + 16u
 * (u < 4) at column 8·(tid % 8): the same swizzled column chunk in every row (row & 7 is the same),
 * so the u-th piece is 2 KB after the first in shared memory and 16 rows after it in global memory. */
template <typename T>
__device__ __forceinline__ void chain_tile(unsigned char * dst, const T * src, long long srow, int nr, int nc) {
    const int       tw = (int)(threadIdx.x & 127); /* the thread in its warpgroup (chain2: one tile each) */
    const int       r0 = tw >> 3, c = (tw & 7) * 8;
    unsigned char * d = dst + ssmi_wg::swz_off(r0, c);
    const T *       g = src + r0 * srow + c;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        if (r0 + 16 * u < nr && c < nc)
            cp_async16(d + 2048 * u, g + 16 * u * srow);
        else
            *reinterpret_cast<uint4 *>(d + 2048 * u) = make_uint4(0u, 0u, 0u, 0u);
    }
}

/* The 4 k-steps' A fragments (hi, lo) of a token tile: (w∘x)ᵀ of the warp's 16 p rows from the
 * swizzled x tile at xs; w: the tile's 64 token weights. */
template <int MODE>
__device__ __forceinline__ void chain_frags(uint32_t (&hi)[4][4], uint32_t (&lo)[4][4], const unsigned char * xs,
                                            const float * w) {
    const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3, c = lane & 3;
    const int trow = (lane & 7) + (lane >> 4) * 8, pcol = 16 * wq + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        uint32_t r[4];
        ldsm4_t(r, xs + ssmi_wg::swz_off(16 * ks + trow, pcol));
        const float2 wa = *reinterpret_cast<const float2 *>(w + 16 * ks + 2 * c);
        const float2 wb = *reinterpret_cast<const float2 *>(w + 16 * ks + 8 + 2 * c);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = t2<MODE>::unpack(r[e]);
            const float2 ww = e < 2 ? wa : wb;
            split2<MODE>(f.x * ww.x, f.y * ww.y, hi[ks][e], lo[ks][e]);
        }
    }
}

/* The 8 products of a token tile into d: hi k-steps, then lo (state_wgmma_kernel's order), B MN-major at bs. */
template <bool BF>
__device__ __forceinline__ void chain_mma(float (&d)[8][4], const uint32_t (&hi)[4][4], const uint32_t (&lo)[4][4],
                                          unsigned bs) {
    ssmi_wg::fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(d, hi[ks], ssmi_wg::desc_mn(bs + ks * 2048));
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(d, lo[ks], ssmi_wg::desc_mn(bs + ks * 2048));
    ssmi_wg::commit();
}
__device__ __forceinline__ void chain_keep(uint32_t (&hi)[4][4], uint32_t (&lo)[4][4]) {
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) ssmi_wg::keep(hi[ks]), ssmi_wg::keep(lo[ks]);
}

/* The entering state of work chunk wk (this thread's part of the accumulator) as the hi/lo planes
 * that state_pass_split_kernel writes (W, H, 2, P, N). */
template <int MODE>
__device__ __forceinline__ void chain_store_planes(const m2_fast_args & A, long long wk, int h, int p0, int n0,
                                                   const float (&d)[8][4]) {
    typedef typename cfg<MODE>::T T;
    const int       lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3;
    const long long pn = (long long)A.P * A.N;
    T *             hi = (T *)A.split + (wk * A.H + h) * 2 * pn;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int p = p0 + 16 * wq + (lane >> 2) + half * 8;
        if (p >= A.P) continue;
        T * row = hi + (long long)p * A.N + n0 + 2 * (lane & 3);
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            uint32_t h2, l2;
            split2<MODE>(d[t][2 * half], d[t][2 * half + 1], h2, l2);
            *reinterpret_cast<uint32_t *>(row + t * 8) = h2;
            *reinterpret_cast<uint32_t *>(row + pn + t * 8) = l2;
        }
    }
}

/* This thread's part of a (P, N) state through a view (init) or strides (fin); rows p ≥ P skipped. */
__device__ __forceinline__ void chain_load_state(const m2_pass_args & S, int row, int h, int p0, int n0,
                                                 float (&d)[8][4]) {
    const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int p = p0 + 16 * wq + (lane >> 2) + half * 8;
#pragma unroll
        for (int t = 0; t < 8; ++t)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int n = n0 + t * 8 + 2 * (lane & 3) + e;
                d[t][2 * half + e] =
                    p < S.P ? ssmi_cu_ld(S.init.p, S.init.dtype,
                                         row * S.init.s[0] + h * S.init.s[1] + p * S.init.s[2] + n * S.init.s[3])
                            : 0.0f;
            }
    }
}
__device__ __forceinline__ void chain_store_fin(const m2_pass_args & S, int row, int h, int p0, int n0,
                                                const float (&d)[8][4]) {
    const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int p = p0 + 16 * wq + (lane >> 2) + half * 8;
        if (p >= S.P) continue;
#pragma unroll
        for (int t = 0; t < 8; ++t)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int n = n0 + t * 8 + 2 * (lane & 3) + e;
                ssmi_cu_st(S.fin, S.fin_dtype, row * S.fs[0] + h * S.fs[1] + p * S.fs[2] + n * S.fs[3],
                           d[t][2 * half + e]);
            }
    }
}
#endif

/* The dt tables of every (work chunk, head) for the chain, state_wgmma_kernel's arithmetic (load_dt,
 * then the token weights as that kernel computes them): dtc and lastcum for the output kernel, and
 * A.cw: the kScanQ weights, cum_last and 3 zeros (kChainW floats, 16-byte pieces). */
__global__ void __launch_bounds__(kThreads) chain_dt_kernel(const m2_fast_args A) {
    __shared__ float dts[kScanQ], cums[kScanQ], tot[32];
    const unsigned whu = blockIdx.x;
    const int      w = (int)(whu / (unsigned)A.H), h = (int)(whu - (unsigned)w * (unsigned)A.H);
    const m2_chunk ch = A.chunks[w];
    load_dt(A.r, ch, h, ch.len, dts, cums, tot); /* ends with a barrier */
    const float cl = cums[ch.len - 1];
    float *     o = A.cw + (long long)whu * kChainW;
    float *     dd = A.dtc + (long long)whu * 2 * kScanQ;
    for (int i = threadIdx.x; i < kScanQ; i += kThreads) {
        o[i] = i < ch.len ? expf(cl - cums[i]) * dts[i] : 0.0f;
        if (i < ch.len) dd[i] = dts[i], dd[kScanQ + i] = cums[i];
    }
    if (threadIdx.x < 4) o[kScanQ + threadIdx.x] = threadIdx.x == 0 ? cl : 0.0f;
    if (threadIdx.x == 0) A.lastcum[whu] = cl;
}

#if SSMI_WG_HAVE /* device helpers of the chains, only in the passes that compile their bodies */
/* A chain block's place, from blockIdx.x: (sequence, head, P tile, N atom), the N atom fastest. */
struct chain_block {
    m2_seg sg;
    int    h, p0, n0;
};
__device__ __forceinline__ chain_block chain_block_of(const m2_fast_args & A, const m2_pass_args & S) {
    const unsigned ka = (unsigned)A.N >> 6, np = (unsigned)A.n_ptiles;
    unsigned       blk = blockIdx.x;
    chain_block    cb;
    cb.n0 = (int)(blk % ka) * 64;
    blk /= ka;
    cb.p0 = (int)(blk % np) * kFT;
    blk /= np;
    cb.h = (int)(blk % (unsigned)A.H);
    cb.sg = S.segs[blk / (unsigned)A.H];
    return cb;
}
/* The token stream of a chain block's sequence (sg.count > 0): its chunks are whole (kScanQ tokens)
 * but the last (plan_add), token tiles of kFT; x and B from the first token, and chunk 0's weights. */
template <typename T> struct chain_seq {
    int           last_len, seglen, tiles;
    const T *     xsrc;
    const T *     bsrc;
    const float * cwh;
};
template <typename T>
__device__ __forceinline__ chain_seq<T> chain_seq_of(const m2_fast_args & A, const chain_block & cb) {
    const m2_chunk c0 = A.chunks[cb.sg.first];
    const int      g = cb.h / (A.H / A.G);
    chain_seq<T>   q;
    q.last_len = A.chunks[cb.sg.first + cb.sg.count - 1].len;
    q.seglen = (cb.sg.count - 1) * kScanQ + q.last_len;
    q.tiles = (cb.sg.count - 1) * (kScanQ / kFT) + (q.last_len + kFT - 1) / kFT;
    q.xsrc = (const T *)A.x.p + c0.b * A.x.s[0] + cb.h * A.x.s[2] + cb.p0 * A.x.s[3] + c0.t0 * A.x.s[1];
    q.bsrc = (const T *)A.b.p + c0.b * A.b.s[0] + g * A.b.s[2] + cb.n0 + c0.t0 * A.b.s[1];
    q.cwh = A.cw + ((long long)cb.sg.first * A.H + cb.h) * kChainW;
    return q;
}
#endif

/* One block of 128 threads per (sequence, head, P tile, 64 N columns), blocks in that order with
 * the N atom fastest (the two atoms of a (head, P tile) read the same x tiles). S carries the
 * sequences, the initial and final states (the pass's arguments); A.split receives the planes;
 * A.cw holds chain_dt_kernel's weights. */
template <int MODE>
__global__ void __launch_bounds__(kChainThreads) state_chain_kernel(const m2_fast_args A, const m2_pass_args S) {
#if SSMI_WG_HAVE
    typedef typename cfg<MODE>::T T;
    constexpr bool BF = MODE == M_BF16;
    constexpr int  NS = kChainStages;
    __shared__ __align__(16) float wts[2][kChainW]; /* chunk k's weights and cum_last (parity k & 1) */
    extern __shared__ __align__(1024) unsigned char smem_chain[];
    /* the swizzle pattern is a function of address bits 4-9: align the base at run time */
    const unsigned  raw = smem_addr(smem_chain);
    unsigned char * sm = smem_chain + (((raw + 1023u) & ~1023u) - raw);
    const unsigned  sb = smem_addr(sm);
    const chain_smem L;

    const chain_block cb = chain_block_of(A, S);
    const m2_seg      sg = cb.sg;
    const int         h = cb.h, p0 = cb.p0, n0 = cb.n0, tid = threadIdx.x;
    float        acc[8][4];
    if (S.has_init && sg.init >= 0)
        chain_load_state(S, sg.init, h, p0, n0, acc);
    else
#pragma unroll
        for (int t = 0; t < 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    if (sg.count > 0) {
        const chain_seq<T> q = chain_seq_of<T>(A, cb);
        const int          last_len = q.last_len, seglen = q.seglen, T_ = q.tiles;
        const long long    xs1 = A.x.s[1], bs1 = A.b.s[1], cw_step = (long long)A.H * kChainW;
        const T *          xsrc = q.xsrc;
        const T *          bsrc = q.bsrc;
        const float *      cwh = q.cwh; /* chunk k's weights: + k·cw_step */
        int             st_next = 0; /* the stage of the next tile to copy */
        auto copy_w = [&](int k) { /* chunk k's weights into wts[k & 1], with the next copy group */
            if (tid < kChainW / 4) cp_async16(&wts[k & 1][4 * tid], cwh + k * cw_step + 4 * tid);
        };
        auto issue = [&](int u) { /* the copies of token tile u (one group, maybe empty) */
            if (u < T_) {
                const int rows = seglen - u * kFT;
                chain_tile<T>(sm + L.x0 + st_next * ssmi_wg::kAtomBytes, xsrc + (long long)u * kFT * xs1, xs1, rows,
                              A.P - p0);
                chain_tile<T>(sm + L.b0 + st_next * ssmi_wg::kAtomBytes, bsrc + (long long)u * kFT * bs1, bs1, rows,
                              A.N - n0);
            }
            st_next = st_next + 1 == NS ? 0 : st_next + 1;
            cp_async_commit();
        };

        /* chunk k begins: the accumulator holds its entering state (once the last products are in):
         * the planes, then the decay; chunk k + 1's weights are requested (their buffer's last
         * reader was chunk k − 1) */
        auto enter_chunk = [&](int k) {
            const float cl = wts[k & 1][kScanQ];
            ssmi_wg::wait<0>();
            ssmi_wg::keep(acc);
            chain_store_planes<MODE>(A, (long long)sg.first + k, h, p0, n0, acc);
            const float decay = expf(cl); /* the pass's factor */
#pragma unroll
            for (int q = 0; q < 8; ++q)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[q][e] *= decay;
            if (k + 1 < sg.count) copy_w(k + 1);
        };

        copy_w(0); /* with tile 0's copies */
        for (int u = 0; u < NS - 2; ++u) issue(u);
        cp_async_wait_group<NS - 3>(); /* chunk 0's weights */
        __syncthreads();
        enter_chunk(0);
        uint32_t fh0[4][4] = {}, fl0[4][4] = {}, fh1[4][4] = {}, fl1[4][4] = {};
        int      st = 0; /* the stage of tile t */
        for (int t = 0; t < T_; ++t) {
            const int k = t >> 2, j = t & 3;
            cp_async_wait_group<NS - 3>(); /* this thread's copies of tile t (and all before) */
            ssmi_wg::fence_proxy_async();
            __syncthreads(); /* everybody's; and everybody's wgmma of tile t − 2 is done */
            if (j == 0 && k > 0) enter_chunk(k); /* its weights came with tile 4k − 1's copies */
            issue(t + NS - 2); /* into the stage of tile t − 2, whose products are done */
            const unsigned char * xs = sm + L.x0 + st * ssmi_wg::kAtomBytes;
            const unsigned        bs = sb + (unsigned)(L.b0 + st * ssmi_wg::kAtomBytes);
            const float *         w = &wts[k & 1][j * kFT];
            st = st + 1 == NS ? 0 : st + 1;
            if ((t & 1) == 0) {
                chain_frags<MODE>(fh0, fl0, xs, w);
                chain_mma<BF>(acc, fh0, fl0, bs);
                ssmi_wg::wait<1>();
                chain_keep(fh1, fl1);
            } else {
                chain_frags<MODE>(fh1, fl1, xs, w);
                chain_mma<BF>(acc, fh1, fl1, bs);
                ssmi_wg::wait<1>();
                chain_keep(fh0, fl0);
            }
        }
        cp_async_wait_group<0>(); /* nothing is pending (the last groups are empty); for the record */
        ssmi_wg::wait<0>();
        ssmi_wg::keep(acc);
        chain_keep(fh0, fl0); /* the last tile's fragments were live up to here */
        chain_keep(fh1, fl1);
    }
    if (S.has_fin && sg.fin >= 0) chain_store_fin(S, sg.fin, h, p0, n0, acc);
#else
    (void)A, (void)S; /* no sm_90a code in this pass: never launched (describe_scan: chain_can) */
    __trap();
#endif
}

template <int MODE>
__global__ void __launch_bounds__(kChain2Threads, 2) state_chain2_kernel(const m2_fast_args A, const m2_pass_args S) {
#if SSMI_WG_HAVE
    constexpr int AHEAD = 2; /* pairs copied ahead */
    typedef typename cfg<MODE>::T T;
    constexpr bool BF = MODE == M_BF16;
    __shared__ __align__(16) float wts[2][kChainW]; /* chunk k's weights and cum_last (parity k & 1) */
    extern __shared__ __align__(1024) unsigned char smem_chain2[];
    const unsigned  raw = smem_addr(smem_chain2);
    unsigned char * sm = smem_chain2 + (((raw + 1023u) & ~1023u) - raw);
    const unsigned  sb = smem_addr(sm);
    const chain2_smem L;

    const chain_block cb = chain_block_of(A, S);
    const m2_seg      sg = cb.sg;
    const int         h = cb.h, p0 = cb.p0, n0 = cb.n0, tid = threadIdx.x, wg = tid >> 7, tw = tid & 127;
    float        acc[8][4]; /* warpgroup 0: the initial state's part; warpgroup 1: zero */
    if (wg == 0 && S.has_init && sg.init >= 0)
        chain_load_state(S, sg.init, h, p0, n0, acc);
    else
#pragma unroll
        for (int t = 0; t < 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    /* the state into warpgroup 0's accumulator: acc1 through the 16 KB at xc (fragment layout,
     * conflict-free: consecutive threads, consecutive words), added to acc0; acc1 then starts over
     * from zero (the decay is linear, so the sum may be formed at any chunk start) */
    auto hand_over = [&](float * xc) {
        if (wg == 1)
#pragma unroll
            for (int t = 0; t < 8; ++t)
#pragma unroll
                for (int e = 0; e < 4; ++e) xc[(t * 4 + e) * 128 + tw] = acc[t][e];
        __syncthreads();
        /* every thread redefines its accumulator (a select, not a branch: ptxas serialized a form of
         * this kernel's wgmma when only one warpgroup's accumulator was written here, C7515) */
#pragma unroll
        for (int t = 0; t < 8; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float other = xc[(t * 4 + e) * 128 + tw];
                acc[t][e] = wg == 0 ? acc[t][e] + other : 0.0f;
            }
    };
    if (sg.count > 0) {
        const chain_seq<T> q = chain_seq_of<T>(A, cb);
        const int          last_len = q.last_len, seglen = q.seglen, T_ = q.tiles, npairs = (T_ + 1) / 2;
        const long long    xs1 = A.x.s[1], bs1 = A.b.s[1], cw_step = (long long)A.H * kChainW;
        const T *          xsrc = q.xsrc;
        const T *          bsrc = q.bsrc;
        const float *      cwh = q.cwh; /* chunk k's weights: + k·cw_step */
        auto copy_w = [&](int k) { /* chunk k's weights into wts[k & 1], with the next copy group */
            if (tid < kChainW / 4) cp_async16(&wts[k & 1][4 * tid], cwh + k * cw_step + 4 * tid);
        };
        auto issue = [&](int q) { /* pair q's copies (tile 2q + wg by warpgroup wg; one group, maybe empty) */
            const int u = 2 * q + wg;
            if (u < T_) {
                const int st = (q % 3) * 2 + wg, rows = seglen - u * kFT;
                chain_tile<T>(sm + L.x0 + st * ssmi_wg::kAtomBytes, xsrc + (long long)u * kFT * xs1, xs1, rows,
                              A.P - p0);
                chain_tile<T>(sm + L.b0 + st * ssmi_wg::kAtomBytes, bsrc + (long long)u * kFT * bs1, bs1, rows,
                              A.N - n0);
            }
            cp_async_commit();
        };
        /* chunk k begins (its weights landed): the state into acc0 (xc: a free 16 KB), its planes,
         * acc0 times the decay (acc1 is zero), chunk k + 1's weights requested (their buffer's last
         * reader was chunk k − 1). Ends with a barrier: xc and the weights' buffer free again. */
        auto enter_chunk = [&](int k, float * xc) {
            hand_over(xc);
            if (wg == 0) chain_store_planes<MODE>(A, (long long)sg.first + k, h, p0, n0, acc);
            const float decay = expf(wts[k & 1][kScanQ]); /* the pass's factor */
#pragma unroll
            for (int q = 0; q < 8; ++q)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[q][e] *= decay;
            if (k + 1 < sg.count) copy_w(k + 1);
            __syncthreads();
        };

        copy_w(0); /* with pair 0's copies */
        for (int q = 0; q < AHEAD; ++q) issue(q);
        cp_async_wait_group<AHEAD - 1>(); /* pair 0 and chunk 0's weights */
        __syncthreads();
        enter_chunk(0, (float *)(sm + L.x0 + 2 * 2 * ssmi_wg::kAtomBytes)); /* slot 2: nothing copied there yet */
        uint32_t fh0[4][4] = {}, fl0[4][4] = {};
        for (int s2 = 0; s2 < npairs; ++s2) {
            cp_async_wait_group<AHEAD - 1>(); /* pair s2 (pair s2 + 1 may still fly) */
            ssmi_wg::fence_proxy_async();
            /* everybody's copies; every wgmma of pair s2 − 1 is done */
            __syncthreads();
            const int k = s2 >> 1; /* two pairs per whole chunk */
            /* pair s2 + AHEAD goes to the slot of pair s2 + AHEAD − 3, free now (its products are
             * done). A chunk's hand-over first uses the x area of slot (s2 + 2) % 3, the slot
             * refilled next */
            float * xc = (float *)(sm + L.x0 + ((s2 + 2) % 3) * 2 * ssmi_wg::kAtomBytes);
            if ((s2 & 1) == 0 && k > 0) enter_chunk(k, xc);
            issue(s2 + AHEAD);
            const int u = 2 * s2 + wg; /* this warpgroup's tile */
            if (u < T_) {
                const int             st = (s2 % 3) * 2 + wg;
                const unsigned char * xs = sm + L.x0 + st * ssmi_wg::kAtomBytes;
                const unsigned        bs = sb + (unsigned)(L.b0 + st * ssmi_wg::kAtomBytes);
                const float *         w = &wts[k & 1][(u & 3) * kFT];
                chain_frags<MODE>(fh0, fl0, xs, w);
                chain_mma<BF>(acc, fh0, fl0, bs);
                ssmi_wg::wait<0>();
                ssmi_wg::keep(acc);
                chain_keep(fh0, fl0);
            }
        }
        ssmi_wg::wait<0>();
        ssmi_wg::keep(acc);
        chain_keep(fh0, fl0); /* the last pair's fragments were live up to here */
        cp_async_wait_group<0>(); /* only empty groups are pending; the x area is rewritten below */
    }
    if (S.has_fin && sg.fin >= 0) { /* every thread reaches this (no early return above) */
        __syncthreads();
        hand_over((float *)(sm + L.x0));
        if (wg == 0) chain_store_fin(S, sg.fin, h, p0, n0, acc);
    }
#else
    (void)A, (void)S; /* no sm_90a code in this pass: never launched (describe_scan: chain_can) */
    __trap();
#endif
}

} /* namespace */

/* chain_dt_kernel (one block per (work chunk, head)), then state_chain_kernel or
 * state_chain2_kernel (two): one block per (sequence, head, P tile, N atom). */
ssm_status launch_state_chain(ssm_context * ctx, const char * op, int mode, const m2_fast_args & A,
                              const m2_pass_args & S, long long W, long long nseg, int two) {
    void (*kernel)(const m2_fast_args, const m2_pass_args) =
        mode == M_F16 ? (two ? state_chain2_kernel<M_F16> : state_chain_kernel<M_F16>)
                      : (two ? state_chain2_kernel<M_BF16> : state_chain_kernel<M_BF16>);
    const int smem = two ? chain2_smem().total : chain_smem().total;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                                          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)));
    const long long wh = W * A.H, blocks = nseg * A.H * A.n_ptiles * (A.N >> 6);
    SSM_RETURN_IF(wh > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED, "%s: %lld blocks exceed the CUDA backend's grid limit",
                  op, wh);
    chain_dt_kernel<<<(unsigned)wh, kThreads, 0, ssmi_cuda_stream(ctx)>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "chain_dt_kernel launch");
    kernel<<<(unsigned)blocks, two ? kChain2Threads : kChainThreads, (size_t)smem, ssmi_cuda_stream(ctx)>>>(A, S);
    SSMI_CU_CHECK_LAUNCH(ctx, op, two ? "state_chain2_kernel launch" : "state_chain_kernel launch");
    return SSM_STATUS_OK;
}

} /* namespace ssmi_m2 */
#endif /* SSMI_CUDA_WGMMA */
