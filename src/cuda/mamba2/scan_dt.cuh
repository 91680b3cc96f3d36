/* scan_dt.cuh — the scan's processed dt and its in-chunk cumsum, computed by a block into shared
 * memory: the first thing every kernel that processes dt from the raw tensors does (block_gemm.cu,
 * state_mma.cu, state_wgmma.cu, state_chain.cu); and what the state kernels (state_mma.cu,
 * state_wgmma.cu) need to run as the mamba2_chunk_state operator: the dt side read from the
 * caller's dt and cumsum tensors, and the states stored through the caller's strides and dtype.
 * Include it only where it is used (the functions are static). */
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

/* Work chunk w of a state kernel: the plan's (A.chunks), or, where the host sent none
 * (mamba2_chunk_state without seq_idx), the caller's chunk c = w % plan_nc of row w / plan_nc:
 * tokens c·plan_q .. of plan_s, cum_last at position plan_q − 1. */
static __device__ __forceinline__ m2_chunk plan_chunk(const m2_fast_args & A, int w) {
    if (A.chunks != nullptr) return A.chunks[w];
    m2_chunk  c;
    const int b = w / A.plan_nc;
    c.b = b;
    c.c = w - b * A.plan_nc;
    c.t0 = (long long)c.c * A.plan_q;
    c.len = (int)min((long long)A.plan_q, A.plan_s - c.t0);
    c.ilast = A.plan_q - 1;
    c.j0 = 0;
    c.crow = -1;
    return c;
}

/* The tokens a state kernel sums, as a chunk of its own: positions j0 .. len − 1 of the plan's
 * chunk (t0 and len moved by j0, ilast counted from the new start; j0 kept as the position of its
 * first token in the caller's dt and cumsum rows). The tokens before j0 belong to an earlier
 * sequence (mamba2_chunk_state with seq_idx): skipped rather than weighted by 0, so a non-finite
 * value there stays out of the state. The scan's chunks (j0 = 0) come out unchanged. */
static __device__ __forceinline__ m2_chunk summed_chunk(const m2_chunk & c) {
    m2_chunk s = c;
    s.t0 += c.j0;
    s.len -= c.j0;
    s.ilast -= c.j0;
    return s;
}

/* A state kernel's dt side for a summed_chunk, into shared memory: dts[i] (processed dt) and cums[i]
 * (its in-chunk cumsum) for i < max(len, ilast + 1) ≤ kScanQ, from the raw tensors (the scan:
 * load_dt) or, where A.given_dt, read from the caller's rows (b, h, c, j0 + i) of A.dt_in and
 * A.cum_in (mamba2_chunk_state: positions past len too, for cum_last at ilast). Ends with a barrier. */
static __device__ void chunk_dt(const m2_fast_args & A, const m2_chunk & ch, int h, float * dts, float * cums,
                                float * warp_tot) {
    if (!A.given_dt) {
        load_dt(A.r, ch, h, ch.len, dts, cums, warp_tot);
        return;
    }
    const int       n = max(ch.len, ch.ilast + 1);
    const long long bd = ch.b * A.dt_in.s[0] + h * A.dt_in.s[1] + ch.c * A.dt_in.s[2] + ch.j0 * A.dt_in.s[3];
    const long long bc = ch.b * A.cum_in.s[0] + h * A.cum_in.s[1] + ch.c * A.cum_in.s[2] + ch.j0 * A.cum_in.s[3];
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        dts[i] = ssmi_cu_ld(A.dt_in.p, A.dt_in.dtype, bd + i * A.dt_in.s[3]);
        cums[i] = ssmi_cu_ld(A.cum_in.p, A.cum_in.dtype, bc + i * A.cum_in.s[3]);
    }
    __syncthreads();
}

/* Token j's weight w_j = exp(cum_last − cum_j)·dt_j (cl = cum_last), 0 past the chunk. */
static __device__ __forceinline__ float token_weight(const m2_chunk & ch, float cl, const float * dts,
                                                     const float * cums, int j) {
    return j < ch.len ? expf(cl - cums[j]) * dts[j] : 0.0f;
}

/* After chunk_dt, in a block of kWideThreads: the chunk's token weights into wts[0, kScanQ) and, in
 * the one block per (chunk, head) that writes them (first; the scan only: A.lastcum set), cum_last
 * and the processed dt and cumsum for the output kernels (row wh of A.lastcum and A.dtc). */
static __device__ __forceinline__ void chunk_tables(const m2_fast_args & A, const m2_chunk & ch, long long wh, bool first,
                                                    const float * dts, const float * cums, float * wts) {
    const int   tid = threadIdx.x;
    const float cl = cums[ch.ilast];
    for (int i = tid; i < kScanQ; i += kWideThreads) wts[i] = token_weight(ch, cl, dts, cums, i);
    if (first && A.lastcum != nullptr) {
        if (tid == 0) A.lastcum[wh] = cl;
        float * dd = A.dtc + wh * 2 * kScanQ;
        for (int i = tid; i < ch.len; i += kWideThreads) dd[i] = dts[i], dd[kScanQ + i] = cums[i];
    }
}

/* Floats per row of a warp's staging area in store_state_frag (16 rows of 64 state columns, padded:
 * the fragment's 8-byte stores and the row-wise reads meet few bank conflicts). */
const int kFragLd = 68;
const int kFragFloats = 16 * kFragLd; /* per warp */

/* A state kernel's epilogue as the mamba2_chunk_state operator (A.st_out set): a warp's fragment of
 * 16 P rows × 64 N columns, acc[t][2·half + e] = state (p, n) with p = pw + lane/4 + 8·half and
 * n = nw + 8t + 2·(lane % 4) + e (the m16n8 accumulator layout of mma.sync, and of each warp of a
 * wgmma m64 accumulator) of (work chunk, head) wh = w·H + h, stored to states (b, c, h, p, n) of
 * work chunk w (plan_chunk) through A.ss in A.st_dtype; p ≥ P and n ≥ N are skipped. The fragment
 * goes through the warp's own staging area (kFragFloats floats of shared memory the block no
 * longer reads), so the stores run along the smaller of the p and n strides (n in the upstream
 * layout, p in the CANN one: whole 32-byte sectors either way). */
static __device__ __forceinline__ void store_state_frag(const m2_fast_args & A, long long wh, const float (&acc)[8][4],
                                                        int pw, int nw, float * stage) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int t = 0; t < 8; ++t)
            *reinterpret_cast<float2 *>(stage + ((lane >> 2) + 8 * half) * kFragLd + t * 8 + 2 * (lane & 3)) =
                make_float2(acc[t][2 * half], acc[t][2 * half + 1]);
    __syncwarp();
    const int       w = (int)(wh / A.H), h = (int)(wh - (long long)w * A.H);
    const m2_chunk  ch = plan_chunk(A, w);
    const long long base = ch.b * A.ss[0] + ch.c * A.ss[1] + h * A.ss[2];
    const bool      p_fast = llabs(A.ss[3]) < llabs(A.ss[4]);
#pragma unroll 1
    for (int o = lane; o < 16 * 64; o += 32) {
        const int r = p_fast ? (o & 15) : (o >> 6), c = p_fast ? (o >> 4) : (o & 63);
        const int p = pw + r, n = nw + c;
        if (p < A.P && n < A.N)
            ssmi_cu_st(A.st_out, A.st_dtype, base + p * A.ss[3] + n * A.ss[4], stage[r * kFragLd + c]);
    }
}

} /* namespace ssmi_m2 */

#endif /* SSMI_CUDA_MAMBA2_SCAN_DT_CUH */
