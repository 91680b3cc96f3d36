/* scan_dt.cuh — the scan's processed dt and its in-chunk cumsum, computed by a block into shared
 * memory: the first thing every kernel that processes dt from the raw tensors does (block_gemm.cu,
 * state_mma.cu, state_wgmma.cu, state_chain.cu). Include it only where it is used (the functions
 * are static). */
#ifndef SSMI_CUDA_MAMBA2_SCAN_DT_CUH
#define SSMI_CUDA_MAMBA2_SCAN_DT_CUH

#include "../../core/ssmi_scalar.h"
#include "scan.cuh"

namespace ssmi_m2 {

/* Inclusive prefix sum of arr[0, n), n ≤ 4·kThreads, in place. */
static __device__ void block_inclusive_scan(float * arr, int n, float * warp_tot) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float     v[4];
    float     s = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int i = tid * 4 + k;
        s += i < n ? arr[i] : 0.0f;
        v[k] = s;
    }
    float x = s;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
        const float y = __shfl_up_sync(0xffffffffu, x, off);
        if (lane >= off) x += y;
    }
    if (lane == 31) warp_tot[warp] = x;
    /* The exclusive prefix comes from the previous lane, not from x − s: a NaN in this thread's
     * four tokens must not reach the tokens before it (NaN − NaN). */
    float base = __shfl_up_sync(0xffffffffu, x, 1);
    if (lane == 0) base = 0.0f;
    __syncthreads();
    for (int w = 0; w < warp; ++w) base += warp_tot[w];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int i = tid * 4 + k;
        if (i < n) arr[i] = v[k] + base;
    }
    __syncthreads();
}

/* dts[i] = processed dt, cums[i] = inclusive cumsum of dt·A over i < n ≤ len (fp32). */
static __device__ void load_dt(const m2_dt_raw & r, const m2_chunk & ch, int h, int n, float * dts, float * cums,
                                     float * warp_tot) {
    const float ah = ssmi_cu_ld(r.a.p, r.a.dtype, h * r.a.s[0]);
    const float bias = r.has_bias ? ssmi_cu_ld(r.bias.p, r.bias.dtype, h * r.bias.s[0]) : 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = ssmi_cu_ld(r.dt.p, r.dt.dtype, ch.b * r.dt.s[0] + (ch.t0 + i) * r.dt.s[1] + h * r.dt.s[2]) + bias;
        v = ssmi_dt_rule_f32(v, r.softplus, r.lo, r.hi); /* a NaN dt stays NaN */
        dts[i] = v;
        cums[i] = v * ah;
    }
    __syncthreads();
    block_inclusive_scan(cums, n, warp_tot);
}

/* After load_dt, in a block of kWideThreads: the chunk's token weights w_j = exp(cum_last − cum_j)·dt_j
 * into wts[0, kScanQ) (0 past the chunk) and, in the one block per (chunk, head) that writes them
 * (first), cum_last and the processed dt and cumsum for the output kernels (row wh of A.lastcum and
 * A.dtc). */
static __device__ __forceinline__ void chunk_tables(const m2_fast_args & A, const m2_chunk & ch, long long wh, bool first,
                                                    const float * dts, const float * cums, float * wts) {
    const int   tid = threadIdx.x;
    const float cl = cums[ch.len - 1];
    for (int i = tid; i < kScanQ; i += kWideThreads) wts[i] = i < ch.len ? expf(cl - cums[i]) * dts[i] : 0.0f;
    if (first) {
        if (tid == 0) A.lastcum[wh] = cl;
        float * dd = A.dtc + wh * 2 * kScanQ;
        for (int i = tid; i < ch.len; i += kWideThreads) dd[i] = dts[i], dd[kScanQ + i] = cums[i];
    }
}

} /* namespace ssmi_m2 */

#endif /* SSMI_CUDA_MAMBA2_SCAN_DT_CUH */
