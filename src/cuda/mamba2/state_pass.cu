/*
 * state_pass.cu — step 2 of the scan where it is a kernel of its own: per (sequence, state
 * element) S_{c+1} = exp(cum_last_c)·S_c + s_c over the sequence's chunks in fp32, starting from
 * the initial state (or 0); the state entering each chunk is written for the output kernel, and
 * the last one is the final state. Where chunk_states is given (A.cst), the state after every
 * work chunk with a chunk_states row (m2_chunk.crow ≥ 0) goes there too, from the same fp32 value.
 *   state_pass_kernel        entering states as fp32, in place over the chunk states (the fp32
 *                            scan, and 16-bit scans with N % 8 != 0 or the 64-row output);
 *   state_pass_split_kernel  entering states split into hi/lo planes of the compute type for the
 *                            8-warp output kernels (16-bit scans, N % 8 == 0).
 */
#include "scan.cuh"

namespace ssmi_m2 {
namespace {

const int kPassBatch = 8;      /* chunks of loads in flight in the fp32 pass */
/* Chunks in flight in the split pass: 4 x 16 bytes per thread; with ≤ 48 registers (5 blocks per
 * SM) a grid of 640 blocks is resident at once. */
const int kSplitPassBatch = 4;

/* The loads of kPassBatch chunks (states and decays) are issued before their updates. */
__global__ void __launch_bounds__(kThreads) state_pass_kernel(const m2_pass_args A) {
    const long long hpn = (long long)A.H * A.P * A.N;
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= hpn) return;
    const m2_seg sg = A.segs[blockIdx.y];
    const int    pn = A.P * A.N;
    const int    h = (int)(e / pn), p = (int)((e % pn) / A.N), n = (int)(e % A.N);
    float        s = 0.0f;
    if (A.has_init && sg.init >= 0)
        s = ssmi_cu_ld(A.init.p, A.init.dtype, sg.init * A.init.s[0] + h * A.init.s[1] + p * A.init.s[2] + n * A.init.s[3]);
    for (int k0 = 0; k0 < sg.count; k0 += kPassBatch) {
        float local[kPassBatch], decay[kPassBatch];
#pragma unroll
        for (int u = 0; u < kPassBatch; ++u) {
            const long long wk = (long long)sg.first + k0 + u;
            local[u] = k0 + u < sg.count ? A.states[wk * hpn + e] : 0.0f;
            decay[u] = k0 + u < sg.count ? expf(A.lastcum[wk * A.H + h]) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kPassBatch; ++u) {
            if (k0 + u >= sg.count) break;
            const long long wk = (long long)sg.first + k0 + u;
            A.states[wk * hpn + e] = s;
            s = decay[u] * s + local[u];
            if (A.cst != NULL && A.chunks[wk].crow >= 0)
                ssmi_cu_st(A.cst, A.cst_dtype, A.chunks[wk].crow * A.cs[0] + h * A.cs[1] + p * A.cs[2] + n * A.cs[3], s);
        }
    }
    if (A.has_fin && sg.fin >= 0)
        ssmi_cu_st(A.fin, A.fin_dtype, sg.fin * A.fs[0] + h * A.fs[1] + p * A.fs[2] + n * A.fs[3], s);
}

/* The entering states written already split for the 8-warp output kernels: hi = s rounded to T and
 * lo = the rounded remainder, in planes (W, H, {hi, lo}, P, N) of T, the split the output kernel
 * would do on its fp32 tile (the same bytes), done once per state element instead of once per
 * output block, and loaded by the output kernel with cp.async. The fp32 chunk states are only read.
 * N is a multiple of 8 (16-byte rows), so each thread carries kPassVec = 4 consecutive elements of
 * one state row: 16-byte loads, 8-byte stores per plane, and the chunk's decay factor computed once
 * for the four. */
template <typename T> struct __align__(8) t4 { T v[4]; };
template <int MODE> __global__ void __launch_bounds__(kThreads, 5) state_pass_split_kernel(const m2_pass_args A) {
    typedef typename cfg<MODE>::T T;
    const long long hpn = (long long)A.H * A.P * A.N;
    const long long e = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * kPassVec;
    if (e >= hpn) return;
    const m2_seg sg = A.segs[blockIdx.y];
    const int    pn = A.P * A.N;
    int          h, p, n;
    if (hpn <= 0x7fffffffLL) { /* 32-bit divisions (the 64-bit ones are long subroutines) */
        const unsigned eu = (unsigned)e, wi = eu % (unsigned)pn;
        h = (int)(eu / (unsigned)pn), p = (int)(wi / (unsigned)A.N), n = (int)(wi % (unsigned)A.N);
    } else {
        h = (int)(e / pn), p = (int)((e % pn) / A.N), n = (int)(e % A.N);
    }
    const long long within = (long long)p * A.N + n; /* e − h·P·N */
    T *          split = (T *)A.split;
    float        s[kPassVec] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (A.has_init && sg.init >= 0) {
        const long long io = sg.init * A.init.s[0] + h * A.init.s[1] + p * A.init.s[2];
#pragma unroll
        for (int i = 0; i < kPassVec; ++i) s[i] = ssmi_cu_ld(A.init.p, A.init.dtype, io + (n + i) * A.init.s[3]);
    }
    for (int k0 = 0; k0 < sg.count; k0 += kSplitPassBatch) {
        float4 local[kSplitPassBatch];
        float  decay[kSplitPassBatch];
#pragma unroll
        for (int u = 0; u < kSplitPassBatch; ++u) {
            const long long wk = (long long)sg.first + k0 + u;
            local[u] = k0 + u < sg.count ? __ldg(reinterpret_cast<const float4 *>(A.states + wk * hpn + e))
                                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            decay[u] = k0 + u < sg.count ? expf(A.lastcum[wk * A.H + h]) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kSplitPassBatch; ++u) {
            if (k0 + u >= sg.count) break;
            const long long base = (((long long)sg.first + k0 + u) * A.H + h) * 2 * pn + within;
            t4<T>           hi, lo;
#pragma unroll
            for (int i = 0; i < kPassVec; ++i) store_split<MODE>(s[i], &hi.v[i], &lo.v[i]);
            *reinterpret_cast<t4<T> *>(split + base) = hi;
            *reinterpret_cast<t4<T> *>(split + base + pn) = lo;
            const float l4[kPassVec] = {local[u].x, local[u].y, local[u].z, local[u].w};
#pragma unroll
            for (int i = 0; i < kPassVec; ++i) s[i] = decay[u] * s[i] + l4[i];
            if (A.cst != NULL) {
                const int row = A.chunks[(long long)sg.first + k0 + u].crow;
                if (row >= 0) {
                    const long long co = row * A.cs[0] + h * A.cs[1] + p * A.cs[2];
#pragma unroll
                    for (int i = 0; i < kPassVec; ++i) ssmi_cu_st(A.cst, A.cst_dtype, co + (n + i) * A.cs[3], s[i]);
                }
            }
        }
    }
    if (A.has_fin && sg.fin >= 0) {
        const long long fo = sg.fin * A.fs[0] + h * A.fs[1] + p * A.fs[2];
#pragma unroll
        for (int i = 0; i < kPassVec; ++i) ssmi_cu_st(A.fin, A.fin_dtype, fo + (n + i) * A.fs[3], s[i]);
    }
}

} /* namespace */

ssm_status launch_state_pass(ssm_context * ctx, const char * op, int mode, const m2_pass_args & A, long long nseg) {
    const long long    hpn = (long long)A.H * A.P * A.N;
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    if (A.split == NULL) {
        const dim3 grid((unsigned)((hpn + kThreads - 1) / kThreads), (unsigned)nseg);
        state_pass_kernel<<<grid, kThreads, 0, s>>>(A);
    } else {
        const dim3 grid((unsigned)((hpn / kPassVec + kThreads - 1) / kThreads), (unsigned)nseg);
        if (mode == M_F16)
            state_pass_split_kernel<M_F16><<<grid, kThreads, 0, s>>>(A);
        else
            state_pass_split_kernel<M_BF16><<<grid, kThreads, 0, s>>>(A);
    }
    SSMI_CU_CHECK_LAUNCH(ctx, op, "state_pass_kernel launch");
    return SSM_STATUS_OK;
}

} /* namespace ssmi_m2 */
