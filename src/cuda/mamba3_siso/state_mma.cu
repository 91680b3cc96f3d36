/*
 * state_mma.cu — the chunk state contributions of the SISO forward by mma.sync (fp16/bf16 v,
 * K ≤ 128): per (chunk, head, 64-wide V tile) s = Vᵀ·diag(σ_j·e^{c_last−c_j})·K̂ (V×K, fp32) and
 * c_last, into the workspace; the state pass (state_pass.cu) then turns them into entering states.
 *
 * One block of 8 warps (≤ 64 registers, 4 blocks per SM: 32 warps per SM), every cooperative loop
 * (v tile, k rows, angles, θ terms, the k prep) on 256 threads. The product is split over the 8
 * warps: warp w owns state rows 16·(w % 4) .. +15 of the V tile and, of the Kp/16 column blocks,
 * the lower warps (w < 4) the first ⌈Kp/32⌉, the upper ones the rest (accumulators 8 × 4 per
 * thread). Every state element is the sum of its MMAs in a fixed order (hi then lo, k-steps in
 * order). The tile is stored from the accumulators through one per-lane row pointer and constant
 * offsets. PRE: the chunk scalars and θ come from chunk_prep_kernel's slots (the same values bit
 * for bit) instead of being computed here.
 */
#include "tiles.cuh"

namespace ssmi_siso {
namespace {

/* The prep of one (chunk, head, V tile): the v tile and the raw k rows (cp.async into the lo tile,
 * overwritten in place by fast_prep_qk) and raw angles (registers) requested before the scalars;
 * the weights w_j = e^{c_L − c_j}·σ_j and the chunk's last cum; θ; then K̂ rotated, weighted by w
 * and split into kh/kl. Ends with a barrier: w∘K̂ and v are visible. NT threads per block, NA
 * angle pieces per thread (NA·NT = 512). PRE: the scalars and θ by cp.async from P.prep. */
template <int MODE, int NT, int NA, bool PRE = false>
__device__ __forceinline__ void state_prep(const m3_fwd_args & P, const m3_chunk & ch, int w, int h, int p0,
                                           const m3_scal & sc, float * wj, float * th, float * part,
                                           typename cfg<MODE>::T * kh, typename cfg<MODE>::T * kl,
                                           typename cfg<MODE>::T * vs, int LK) {
    fast_load_v<MODE>(P, ch, h, p0, vs);
    if constexpr (PRE) { /* the scalars and θ of chunk_prep_kernel */
        if (P.vk) cp_rows<MODE, NT>(kl, LK, P.k, ch, h / P.G, 0, P.Kp, P.K);
        cp_prep<NT>(P, w, h, sc.dtv, th);
        cp_async_wait_all();
        __syncthreads(); /* the scalars, θ, the raw k rows */
        const float cl = sc.cm[ch.len - 1];
        for (int j = threadIdx.x; j < kC; j += blockDim.x) wj[j] = j < ch.len ? expf(cl - sc.cm[j]) * sc.sig[j] : 0.0f;
        if (blockIdx.z == 0 && threadIdx.x == 0) P.lastcum[(long long)w * P.H + h] = cl;
        __syncthreads(); /* wj */
        fast_prep_qk<MODE, NT>(P, ch, h, th, nullptr, nullptr, kh, kl, LK, wj, nullptr, false, nullptr,
                               P.vk ? kl : nullptr);
        cp_async_wait_all(); /* the v tile */
        __syncthreads();     /* w∘K̂, v */
        return;
    }
    uint4 araw[NA];
    if (P.vk) cp_rows<MODE, NT>(kl, LK, P.k, ch, h / P.G, 0, P.Kp, P.K);
    load_angle_rows<MODE, NA, NT>(P, ch, h, araw);
    chunk_scalars(P, ch, h, sc);
    const float cl = sc.cm[ch.len - 1];
    for (int j = threadIdx.x; j < kC; j += blockDim.x) wj[j] = j < ch.len ? expf(cl - sc.cm[j]) * sc.sig[j] : 0.0f;
    if (blockIdx.z == 0 && threadIdx.x == 0) P.lastcum[(long long)w * P.H + h] = cl;
    chunk_theta_rows<MODE, NA, NT>(P, ch, w, h, sc.dtv, th, part, araw);
    cp_async_wait_all(); /* the raw k rows, before the barrier that publishes them */
    __syncthreads();     /* wj, θ */
    fast_prep_qk<MODE, NT>(P, ch, h, th, nullptr, nullptr, kh, kl, LK, wj, nullptr, false, nullptr,
                           P.vk ? kl : nullptr);
    cp_async_wait_all(); /* the v tile */
    __syncthreads();     /* w∘K̂, v */
}

template <int MODE, bool PRE = false>
__global__ void __launch_bounds__(kStateThreads, 4) state_mma_kernel(const m3_fwd_args P) {
    static_assert(kStateThreads == kPrepThreads, "chunk_prep_kernel's θ is this kernel's only at its thread count");
    typedef typename cfg<MODE>::T T;
    /* the angle pieces per thread at 256 threads (load_angle_rows covers 512) */
    constexpr int     NA = kAngPieces * kFastThreads / kStateThreads;
    extern __shared__ __align__(128) unsigned char smem[];
    const fast_smem<MODE>                          Ly(P.Kp, P.A, false, false);
    const m3_scal                                  sc = carve_scal((float *)(smem + Ly.scal));
    float *                                        wj = sc.sig + (kC + 1);
    float *                                        th = (float *)(smem + Ly.th);
    T *                                            kh = (T *)(smem + Ly.t0h);
    T *                                            kl = (T *)(smem + Ly.t0l); /* raw k rows, then K̂ lo */
    T *                                            vs = (T *)(smem + Ly.vs);
    const int                                      LK = P.Kp + 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, rb = warp & 3, upper = warp >> 2;

    const int      w = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * kTV;
    const m3_chunk ch = P.chunks[w];
    state_prep<MODE, kStateThreads, NA, PRE>(P, ch, w, h, p0, sc, wj, th, (float *)(smem + Ly.part), kh, kl, vs, LK);

    /* this warp's column blocks [np0, np0 + nb) of the Kp/16 (warp-uniform) */
    const int NP = P.Kp / 16, nlo = (NP + 1) >> 1;
    const int np0 = upper ? nlo : 0, nb = upper ? NP - nlo : nlo;
    float     acc[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    {
        const int ksteps = (ch.len + 15) / 16;
        const T * ab = vs + rb * 16 + a_trans_off(lane, kFLd);
        const T * kbh = kh + np0 * 16 + b_kn_off(lane, LK);
        const T * kbl = kl + np0 * 16 + b_kn_off(lane, LK);
        if (nb == 4)
            vk_product<MODE, 4>(acc, ab, kbh, kbl, ksteps, LK);
        else if (nb == 3)
            vk_product<MODE, 3>(acc, ab, kbh, kbl, ksteps, LK);
        else if (nb == 2)
            vk_product<MODE, 2>(acc, ab, kbh, kbl, ksteps, LK);
        else if (nb == 1)
            vk_product<MODE, 1>(acc, ab, kbh, kbl, ksteps, LK);
    }
    /* rows r0 = 16·rb + lane/4 (+8) of the tile, columns n = c0 + 8·t (+1); K is even, so a
     * pair is inside whenever its first column is (8-byte aligned: K, n even) */
    const int  nr = min(kTV, P.V - p0), r0 = rb * 16 + (lane >> 2), c0 = np0 * 16 + 2 * (lane & 3);
    float *    d0 = P.states + ((long long)w * P.H + h) * P.V * P.K + (long long)p0 * P.K + (r0 * P.K + c0);
    float *    d1 = d0 + 8 * P.K;
    const bool in0 = r0 < nr, in1 = r0 + 8 < nr;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        if (t < 2 * nb && c0 + 8 * t < P.K) {
            if (in0) *reinterpret_cast<float2 *>(d0 + 8 * t) = make_float2(acc[t][0], acc[t][1]);
            if (in1) *reinterpret_cast<float2 *>(d1 + 8 * t) = make_float2(acc[t][2], acc[t][3]);
        }
    }
}

template <int MODE, bool PRE>
ssm_status launch_mode(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W) {
    const fast_smem<MODE> Ls(P.Kp, P.A, false, false);
    const dim3            grid((unsigned)W, (unsigned)P.H, (unsigned)((P.V + kTV - 1) / kTV));
    void (*kernel)(const m3_fwd_args) = state_mma_kernel<MODE, PRE>;
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                         cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Ls.total)));
    kernel<<<grid, kStateThreads, Ls.total, ssmi_cuda_stream(ctx)>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "state_mma_kernel launch");
    return SSM_STATUS_OK;
}

} /* namespace */

ssm_status launch_state_mma(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode,
                            bool prep) {
    if (mode == M_F16) return prep ? launch_mode<M_F16, true>(ctx, op, P, W) : launch_mode<M_F16, false>(ctx, op, P, W);
    return prep ? launch_mode<M_BF16, true>(ctx, op, P, W) : launch_mode<M_BF16, false>(ctx, op, P, W);
}

} /* namespace ssmi_siso */
