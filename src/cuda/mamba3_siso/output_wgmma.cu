/*
 * output_wgmma.cu — the outputs of the SISO forward on Hopper wgmma (sm_90a; fp16/bf16 q, k, v and
 * outputs of v's dtype in 16-byte rows, K = 64 or 128), after chunk_prep_kernel.
 *
 * The 8-warp mma.sync output kernel is issue-bound (IMAD/ISETP/LDSM/F2FP; HMMA ~5% of its
 * instructions) and ~60% of its instructions are the per-chunk prep. output_wgmma_kernel keeps that
 * kernel's grid (chunk, head, 64-wide V tile), its 256 threads, its loads, sin/cos table, split and
 * fast math, its y exchange and its shared-memory epilogue, takes the chunk scalars and θ from
 * chunk_prep_kernel's slot, and runs the products as wgmma.mma_async m64n64k16 (f32 accumulators;
 * wgmma.cuh) reading 128-byte swizzled tiles:
 *   scores = Q̂·K̂ᵀ        warpgroup 0: A = Q̂ hi / lo (64 tokens x Kp, K-major), B = K̂ hi / lo
 *                        (K-major): hi·hi + lo·hi + hi·lo, three chains of Kp/16 k-steps
 *   y      = split(P)·V  warpgroup 0: A = the masked scores from registers (hi, then lo: the
 *                        mma.sync A fragment of the warp's 16 rows), B = the v tile, MN-major
 *   u      = Q̂·S_enterᵀ  warpgroup 1: A = Q̂ hi / lo, B = S_enter hi / lo (64 V rows x Kp,
 *                        K-major, split over K̂ once the scores are done): three chains
 * The accumulator fragment of warp wq of a warpgroup is the mma.sync kernel's float [8][4] of row
 * block wq, so warp w of warpgroup 0 and warp w + 4 of warpgroup 1 are exactly its warp pair (w, w +
 * 4): the mask (over all 64 tokens), the exchange (warpgroup 0 finishes columns 0..31, 1 columns
 * 32..63) and the epilogue carry over; v and the q/k rows are read through swz_off instead of a
 * padded stride. The q/k prep (prep_qk_swz) is fast_prep_qk's arithmetic for K = 64 or 128 (no
 * column tails), reading the raw rows that cp.async put at the swizzled places of the lo tiles and
 * writing Q̂ / K̂ hi and lo to the same places (each thread rewrites only its own 16-byte pieces).
 * Why one block = 2 warpgroups of one (chunk, head, V tile): the prep, not the tensor work, is the
 * time (56 wgmma of 64x64x16 per block ≈ 1 µs of one SM's tensor pipe): 256 threads halve each
 * thread's share of the prep, and the products split into two balanced halves (3·Kp/16 + 8 and
 * 3·Kp/16 wgmma). Two V tiles per block would share the prep only where V > 64, two heads never (θ,
 * biases and the rotation are per head).
 * Budget, K = 128, A = 32: shared memory Q̂ hi/lo + K̂ hi/lo 4 x 16 KB (the split state lies over
 * K̂), v 8 KB (one atom), z/out 9 KB, scalars 2.3 KB, θ-walk sums 0.5 KB, θ + sin 16 KB (≥ the 16 KB y
 * exchange), + 1 KB alignment: ~100 KB, 2 blocks per SM (228 KB); K = 64: ~68 KB. Registers ≤ 128
 * (launch bounds (256, 2); no spills): warpgroup 0 holds scores (32) and the 8 prefetched state
 * float4 (32) during the scores, then y (32) + P hi/lo fragments (32); warpgroup 1 its y (32).
 * Applies (the table's wgmma rule): where the 8-warp mma.sync output kernel applies (16-bit outputs
 * of v's dtype in 16-byte rows, z of that kind or none), q, k, v of v's dtype in 16-byte rows (the
 * cp.async loads), K = 64 or 128 (whole atoms), an sm_90 device of a build with sm_90a code and the
 * shared memory within the opt-in limit; a partial last V tile is zero-filled (v columns, state
 * rows) and clipped at the store. Results differ from the mma.sync kernel's within fp32 rounding
 * (the three split products are three chains, not interleaved per k-step; y's partial sums
 * associate differently).
 */
#include "tiles.cuh"

namespace ssmi_siso {
namespace {

static_assert(kOutWgmmaThreads == kOutMmaThreads,
              "the per-thread shares (state pieces, exchange) of the 8-warp kernel");

#if SSMI_WG_HAVE /* device helpers of the kernel, only in the passes that compile its body */
/* fast_prep_qk<MODE, 256> for K = Kp = 64·KA (no column tails, q/k rows of v's dtype already in the
 * lo tiles at their swizzled places): Q̂ and K̂ split into the swizzled hi/lo tiles, d_i into dd, the
 * last token's fp32 k̂ to the final k state when fin_k. A thread takes 8 features of one token; the
 * IPT = K/8 threads of a token are adjacent lanes (d_i: fast_prep_qk's shuffle order). */
template <int MODE, int KA>
__device__ __forceinline__ void prep_qk_swz(const m3_fwd_args & P, const m3_chunk & ch, int h, const float * th,
                                            const float * snt, unsigned char * qh, unsigned char * ql,
                                            unsigned char * kh, unsigned char * kl, float * dd, bool fin_k) {
    constexpr int IPT = 8 * KA, PER = kOutWgmmaThreads / IPT; /* PER divides kC: every lane runs 2·KA passes */
    const int     L = ch.len, c8 = threadIdx.x % IPT, n0 = c8 * 8, m0 = n0 / 2;
    float         qbias[8], kbias[8];
    load_row8(qbias, P.qb, h, n0, P.K);
    load_row8(kbias, P.kb, h, n0, P.K);
    const bool rot4 = snt != nullptr && (P.A & 3) == 0 && m0 + 4 <= P.A, rot0 = m0 >= P.A;
#pragma unroll 1
    for (int i = threadIdx.x / IPT; i < kC; i += PER) {
        const bool live = i < L;
        const int  so = ssmi_wg::swz_off(i, n0);
        float      q[8], k[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) q[e] = k[e] = 0.0f;
        if (live) {
            unpack8<MODE>(q, *reinterpret_cast<const uint4 *>(ql + so));
            unpack8<MODE>(k, *reinterpret_cast<const uint4 *>(kl + so));
#pragma unroll
            for (int e = 0; e < 8; ++e) q[e] += qbias[e], k[e] += kbias[e];
        }
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot = fmaf(q[e], k[e], dot);
        rotate_qk8<true>(q, k, P, th, snt, i, m0, live, rot4, rot0);
        if (fin_k && live && i == L - 1)
#pragma unroll
            for (int e = 0; e < 8; ++e) st3(P.fin_k, ch.seq, h, n0 + e, k[e]);
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) split2<MODE>(q[2 * e], q[2 * e + 1], hi[e], lo[e]);
        *reinterpret_cast<uint4 *>(qh + so) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4 *>(ql + so) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
#pragma unroll
        for (int e = 0; e < 4; ++e) split2<MODE>(k[2 * e], k[2 * e + 1], hi[e], lo[e]);
        *reinterpret_cast<uint4 *>(kh + so) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4 *>(kl + so) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
#pragma unroll
        for (int off = 8; off > 0; off /= 2) /* fast_prep_qk's offsets in its order (IPT ≤ 16) */
            if (off < IPT) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (c8 == 0) dd[i] = dot;
    }
}

/* cp.async of the chunk's rows (tokens < L) of a (B, S, Hx, X) tensor, columns [c0, c0 + 8·C8),
 * into a swizzled 64-row tile (row = token, 8·C8 columns over C8/8 atoms: ssmi_wg::copy_rows). ZERO:
 * rows ≥ L and columns ≥ X are zero-filled (the v tile, read by wgmma); otherwise they are not
 * written (the q/k rows: prep_qk_swz writes every place of its tiles). */
template <int MODE, int C8, bool ZERO>
__device__ __forceinline__ void cp_tile_swz(unsigned char * dst, const ssmi_cu_view & t, const m3_chunk & ch, int hx,
                                            int c0, int X) {
    typedef typename cfg<MODE>::T T;
    const T * src = (const T *)t.p + ch.row * t.s[0] + ch.t0 * t.s[1] + hx * t.s[2] + c0;
    ssmi_wg::copy_rows<T, C8, kC, kOutWgmmaThreads, false, ZERO>(dst, src, t.s[1], ch.len, X - c0);
}

/* d = A·Bᵀ of two split operands (hi·hi + lo·hi + hi·lo: three chains of 4·KA k-steps, both
 * K-major tiles at shared addresses ahi/alo, bhi/blo), issued and waited for by the warpgroup. */
template <bool BF, int KA>
__device__ __forceinline__ void split_chains_k(float (&d)[8][4], unsigned ahi, unsigned alo, unsigned bhi,
                                               unsigned blo) {
    ssmi_wg::fence();
    ssmi_wg::chain_k<BF, KA>(d, ahi, bhi);
    ssmi_wg::chain_k<BF, KA>(d, alo, bhi);
    ssmi_wg::chain_k<BF, KA>(d, ahi, blo);
    ssmi_wg::commit();
    ssmi_wg::wait<0>();
    ssmi_wg::keep(d);
}
#endif

/* KA: the K atoms (K = 64·KA), a template parameter so that the k-loops unroll. */
template <int MODE, int KA>
__global__ void __launch_bounds__(kOutWgmmaThreads, 2) output_wgmma_kernel(const m3_fwd_args P) {
#if SSMI_WG_HAVE
    typedef typename cfg<MODE>::T T;
    constexpr bool                BF = MODE == M_BF16;
    extern __shared__ __align__(1024) unsigned char smem7[];
    /* the swizzle pattern is a function of address bits 4-9: align the base at run time */
    const unsigned   raw = smem_addr(smem7);
    unsigned char *  sm = smem7 + (((raw + 1023u) & ~1023u) - raw);
    const unsigned   sb = smem_addr(sm);
    const wgmma_smem Ly(KA, P.A, P.sct != 0);
    const m3_scal    sc = carve_scal((float *)(sm + Ly.scal));
    float *          ecm = sc.sig + (kC + 1);
    float *          dd = ecm + (kC + 1);
    float *          th = (float *)(sm + Ly.th); /* θ, then the y exchange */
    T *              zs = (T *)(sm + Ly.zs);     /* z, then the output */
    const int        lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wq = warp & 3, upper = warp >> 2;

    const int      w = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * kTV;
    const m3_chunk ch = P.chunks[w];
    const int      L = ch.len;
    /* S_enter = 0 in a sequence's first chunk without initial states (block-uniform) */
    const bool with_state = !ch.first || P.has_states;
    /* the global inputs requested at the start: the v tile (swizzled, MN-major: token rows), q/k
     * rows into the lo tiles, the z tile, the slot of chunk_prep_kernel (the chunk scalars and θ);
     * the state tile comes after the q/k prep */
    cp_tile_swz<MODE, kTV / 8, true>(sm + Ly.vs, P.v, ch, h, p0, P.V);
    cp_tile_swz<MODE, 8 * KA, false>(sm + Ly.ql, P.q, ch, h / P.G, 0, P.K);
    cp_tile_swz<MODE, 8 * KA, false>(sm + Ly.kl, P.k, ch, h / P.G, 0, P.K);
    if (P.vz16) cp_rows<MODE, kOutWgmmaThreads>(zs, kFLd, P.z, ch, h, p0, kTV, P.V);
    const float dh = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, h * P.d.s[0]) : 0.0f;
    cp_prep<kOutWgmmaThreads>(P, w, h, sc.dtv, th);
    cp_async_wait_all(); /* the scalars, θ, q, k, v, z rows, before the barrier that publishes them */
    __syncthreads();
    /* read after the barrier behind the q/k prep */
    for (int i = threadIdx.x; i < kC; i += blockDim.x) ecm[i] = i < L ? expf(sc.cm[i]) : 0.0f;
    float * snt = nullptr;
    if (P.sct) { /* block-uniform: sin/cos once per (token, angle) */
        snt = (float *)(sm + Ly.sn);
        sincos_table(P.fused, th, snt, L * P.A);
        __syncthreads();
    }
    prep_qk_swz<MODE, KA>(P, ch, h, th, snt, sm + Ly.qh, sm + Ly.ql, sm + Ly.kh, sm + Ly.kl, dd,
                          ch.last && blockIdx.z == 0 && P.fin_k.present);
    /* the entering state tile into registers, in flight during the scores (requested here, not
     * at the start: held through the q/k prep, its 32 registers make ptxas spill) */
    float4 pre[8];
    if (with_state) load_state_regs8(P, w, h, p0, pre);
    ssmi_wg::fence_proxy_async(); /* this thread's tile writes (and its finished copies), seen by wgmma */
    __syncthreads();              /* Q̂, K̂, d, v; from here θ and the sin/cos table are dead (the y exchange) */

    const int   ri0 = wq * 16 + (lane >> 2), ri1 = ri0 + 8; /* this thread's rows (fragment layout) */
    const float ci0 = ri0 < L ? sc.cm[ri0] : 0.0f, ci1 = ri1 < L ? sc.cm[ri1] : 0.0f;
    /* warpgroup 0: scores (64 rows x 64 tokens) = Q̂·K̂ᵀ, split: hi·hi, lo·hi, hi·lo */
    float s[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
    if (!upper) { /* warpgroup-uniform */
        split_chains_k<BF, KA>(s, sb + Ly.qh, sb + Ly.ql, sb + Ly.kh, sb + Ly.kl);
    }
    /* the entering state, split over K̂ once the scores are done (the prefetch registers are free
     * before y's accumulators and P's fragments are live) */
    if (with_state) {    /* block-uniform */
        __syncthreads(); /* warpgroup 0 is done with K̂ */
        state_piece sp(P.Kp / 4, kOutWgmmaThreads);
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int r = sp.r, c = 4 * sp.c;
            if (r >= kTV) break;
            sp.next();
            uint32_t hi[2], lo[2];
            split2<MODE>(pre[u].x, pre[u].y, hi[0], lo[0]);
            split2<MODE>(pre[u].z, pre[u].w, hi[1], lo[1]);
            const int so = ssmi_wg::swz_off(r, c); /* c % 4 == 0: 8 bytes inside one 16-byte piece */
            *reinterpret_cast<uint2 *>(sm + Ly.kh + so) = make_uint2(hi[0], hi[1]);
            *reinterpret_cast<uint2 *>(sm + Ly.kl + so) = make_uint2(lo[0], lo[1]);
        }
        ssmi_wg::fence_proxy_async();
        __syncthreads(); /* the split state */
    }
    float y[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) y[t][0] = y[t][1] = y[t][2] = y[t][3] = 0.0f;
    if (!upper) {
        /* P_ij = score · e^{c_i − c_j} · σ_j for j < i < L (ex2.approx decay), all 64 tokens */
        mask_scores<8>(s, 2 * (lane & 3), ri0, ri1, ci0, ci1, L, sc);
        /* y = P·V: P as split A fragments from registers (k-step ks = tokens 16ks..16ks+15), the v
         * tile MN-major (a k-step of 16 token rows is +2048 bytes) */
        uint32_t ah[4][4], al[4][4];
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            split2<MODE>(s[2 * ks][0], s[2 * ks][1], ah[ks][0], al[ks][0]);
            split2<MODE>(s[2 * ks][2], s[2 * ks][3], ah[ks][1], al[ks][1]);
            split2<MODE>(s[2 * ks + 1][0], s[2 * ks + 1][1], ah[ks][2], al[ks][2]);
            split2<MODE>(s[2 * ks + 1][2], s[2 * ks + 1][3], ah[ks][3], al[ks][3]);
        }
        const unsigned vsa = sb + Ly.vs;
        ssmi_wg::fence(); /* y (zeroed) and the A fragments were written by ordinary instructions */
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(y, ah[ks], ssmi_wg::desc_mn(vsa + ks * 2048));
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(y, al[ks], ssmi_wg::desc_mn(vsa + ks * 2048));
        ssmi_wg::commit();
        ssmi_wg::wait<0>();
        ssmi_wg::keep(y);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) ssmi_wg::keep(ah[ks]), ssmi_wg::keep(al[ks]);
    } else if (with_state) {
        /* warpgroup 1: y = diag(e^c)·Q̂·S_enterᵀ (64 rows x 64 state rows), split: hi·hi, lo·hi, hi·lo */
        split_chains_k<BF, KA>(y, sb + Ly.qh, sb + Ly.ql, sb + Ly.kh, sb + Ly.kl);
        const float e0 = ecm[ri0], e1 = ecm[ri1];
#pragma unroll
        for (int t = 0; t < 8; ++t) y[t][0] *= e0, y[t][1] *= e0, y[t][2] *= e1, y[t][3] *= e1;
    }

    out_exchange_epilogue<MODE, true>(P, ch, h, p0, L, y, reinterpret_cast<float4 *>(sm + Ly.th), sm + Ly.vs, zs, dh,
                                      sc, dd, ri0, ri1);
#else
    (void)P; /* no sm_90a code in this pass: never launched (the table's wgmma rule) */
#endif
}

template <int MODE>
ssm_status launch_mode(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W) {
#if SSMI_CUDA_WGMMA
    const dim3       grid((unsigned)W, (unsigned)P.H, (unsigned)((P.V + kTV - 1) / kTV));
    const wgmma_smem L(P.K / 64, P.A, P.sct != 0);
    void (*kernel)(const m3_fwd_args) = P.K == 128 ? output_wgmma_kernel<MODE, 2> : output_wgmma_kernel<MODE, 1>;
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                         cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L.total)));
    kernel<<<grid, kOutWgmmaThreads, (size_t)L.total, ssmi_cuda_stream(ctx)>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "output_wgmma_kernel launch");
    return SSM_STATUS_OK;
#else
    (void)P, (void)W;
    return ssmi_error(ctx, SSM_STATUS_INTERNAL, "%s: output_wgmma_kernel without sm_90a code", op);
#endif
}

} /* namespace */

ssm_status launch_output_wgmma(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode) {
    return mode == M_F16 ? launch_mode<M_F16>(ctx, op, P, W) : launch_mode<M_BF16>(ctx, op, P, W);
}

} /* namespace ssmi_siso */
