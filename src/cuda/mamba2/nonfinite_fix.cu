/*
 * nonfinite_fix.cu — step 4 of the scan: the outputs of the (work chunk, head) pairs that the output
 * kernels marked (a non-finite value stored), recomputed token by token.
 *
 * The output kernels form a chunk's outputs by products over the whole chunk: the causal mask
 * selects 0 for the scores of later tokens, but the product then multiplies that 0 by x of the later
 * token, and 0·Inf or 0·NaN is NaN in an earlier token's output. The recomputation sums only the
 * terms j ≤ i, so a non-finite input reaches exactly the outputs the formula gives it:
 *   y_i[p] = exp(cum_i)·Σ_n C_i[n]·S_in[p][n] + Σ_{j≤i} (Σ_n C_i[n]·B_j[n])·exp(cum_i − cum_j)·dt_j·x_j[p]
 *            + D·x_i[p],   then y_i[p]·silu(z_i[p]),
 * in fp32 with sums in a fixed order (the block's dt and cumsum are load_dt's, as in the kernels
 * that computed the states; S_in is the pass's entering state, fp32 or its hi/lo planes). A marked
 * pair whose outputs are non-finite by the formula itself (z, C, D, an initial state, ...) gets the
 * same values again. A small grid walks the pairs; an unmarked pair costs one load of its mark.
 */
#include "scan_dt.cuh"

namespace ssmi_m2 {
namespace {

const int kFixThreads = kThreads; /* load_dt's block scan: n ≤ 4·blockDim, a warp total per warp */

/* Element e (= p·N + n) of the entering state of (work chunk, head) wh: fp32, or hi + lo of T. */
template <int MODE> __device__ __forceinline__ float entering(const m2_fix_args & A, long long wh, long long e) {
    const long long pn = (long long)A.P * A.N;
    if (A.split == nullptr) return A.states[wh * pn + e];
    typedef typename cfg<MODE>::T T;
    const T * base = (const T *)A.split + wh * 2 * pn;
    return from_t(base[e]) + from_t(base[pn + e]);
}

/* The outputs of (work chunk, head) wh, recomputed; the block's tables in shared memory. */
template <int MODE>
__device__ __forceinline__ void fix_pair(const m2_fix_args & A, long long wh, float * dts, float * cums, float * wts,
                                         float * crow, float * warp_tot) {
    const int      w = (int)(wh / A.H), h = (int)(wh - (long long)w * A.H);
    const m2_chunk ch = A.chunks[w];
    if (ch.len <= 0) return; /* uniform over the block */
    const int tid = threadIdx.x, g = h / (A.H / A.G);
    load_dt(A.r, ch, h, ch.len, dts, cums, warp_tot); /* ends with a barrier */
    const long long bo = ch.b * A.b.s[0] + ch.t0 * A.b.s[1] + g * A.b.s[2];
    const long long co = ch.b * A.c.s[0] + ch.t0 * A.c.s[1] + g * A.c.s[2];
    const long long xo = ch.b * A.x.s[0] + ch.t0 * A.x.s[1] + h * A.x.s[2];
    for (int i = 0; i < ch.len; ++i) {
        for (int n = tid; n < A.N; n += kFixThreads) crow[n] = ssmi_cu_ld(A.c.p, A.c.dtype, co + i * A.c.s[1] + n * A.c.s[3]);
        __syncthreads();
        /* the weights of the terms j ≤ i: (C_i·B_j)·exp(cum_i − cum_j)·dt_j */
        const float ci = cums[i];
        for (int j = tid; j <= i; j += kFixThreads) {
            float sc = 0.0f;
            for (int n = 0; n < A.N; ++n) sc += crow[n] * ssmi_cu_ld(A.b.p, A.b.dtype, bo + j * A.b.s[1] + n * A.b.s[3]);
            wts[j] = sc * expf(ci - cums[j]) * dts[j];
        }
        __syncthreads();
        const float     ei = expf(ci);
        const long long t = ch.t0 + i;
        for (int p = tid; p < A.P; p += kFixThreads) {
            float cs = 0.0f;
            for (int n = 0; n < A.N; ++n) cs += crow[n] * entering<MODE>(A, wh, (long long)p * A.N + n);
            float y = ei * cs;
            for (int j = 0; j <= i; ++j) y += wts[j] * ssmi_cu_ld(A.x.p, A.x.dtype, xo + j * A.x.s[1] + p * A.x.s[3]);
            if (A.has_d) {
                const float dv = ssmi_cu_ld(A.d.p, A.d.dtype, h * A.d.s[0] + (A.d_2d ? p * A.d.s[1] : 0));
                y += dv * ssmi_cu_ld(A.x.p, A.x.dtype, xo + i * A.x.s[1] + p * A.x.s[3]);
            }
            if (A.has_z) {
                const float zv = ssmi_cu_ld(A.z.p, A.z.dtype, ch.b * A.z.s[0] + t * A.z.s[1] + h * A.z.s[2] + p * A.z.s[3]);
                y *= zv / (1.0f + expf(-zv));
            }
            ssmi_cu_st(A.out, A.out_dtype, ch.b * A.os[0] + t * A.os[1] + h * A.os[2] + p * A.os[3], y);
        }
        __syncthreads(); /* crow and wts are rewritten for the next token (or pair) */
    }
}

/* kFixBlocks blocks walk the (work chunk, head) pairs (ssmi_cu_marked_walk; a block per pair would
 * take many waves of blocks that only read their mark). */
const int kFixBlocks = 1024;
template <int MODE> __global__ void __launch_bounds__(kFixThreads) nonfinite_fix_kernel(const m2_fix_args A, long long pairs) {
    __shared__ float dts[kScanQ], cums[kScanQ], wts[kScanQ], crow[kMaxN], warp_tot[kFixThreads / 32];
    ssmi_cu_marked_walk(
        pairs, [&](long long wh) { return A.nonfinite[wh] != 0; },
        [&](long long wh) { fix_pair<MODE>(A, wh, dts, cums, wts, crow, warp_tot); });
}

} /* namespace */

ssm_status launch_nonfinite_fix(ssm_context * ctx, const char * op, int mode, const m2_fix_args & A, long long W) {
    const long long pairs = W * A.H;
    if (pairs <= 0) return SSM_STATUS_OK;
    const unsigned     blocks = (unsigned)(pairs < kFixBlocks ? pairs : kFixBlocks);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    if (mode == M_F16)
        nonfinite_fix_kernel<M_F16><<<blocks, kFixThreads, 0, s>>>(A, pairs);
    else if (mode == M_BF16)
        nonfinite_fix_kernel<M_BF16><<<blocks, kFixThreads, 0, s>>>(A, pairs);
    else
        nonfinite_fix_kernel<M_F32><<<blocks, kFixThreads, 0, s>>>(A, pairs);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "nonfinite_fix_kernel launch");
    return SSM_STATUS_OK;
}

} /* namespace ssmi_m2 */
