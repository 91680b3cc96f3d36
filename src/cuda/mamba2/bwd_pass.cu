/*
 * bwd_pass.cu — the sequential parts of the Mamba-2 combined backward (bwd.cuh lists the steps):
 * the state pass along each segment, its reverse (the state gradients and dinitial_states), and
 * the fixed-order reductions (dB/dC over the parts of a group, dA/ddt_bias/dD over chunks).
 * The passes run on the current head batch (bw_args.h0, hb; its slots in st and gs: state_at),
 * one thread per (segment, head, state element), or per 4 of them where P·N % 4 = 0
 * (then the slots stream through shared memory by cp.async, double-buffered, so the loads in
 * flight are not bounded by registers), the chunks of the segment in order (forward) or in
 * reverse; every sum is a loop in a fixed order.
 */
#include "../common/mma.cuh"
#include "bwd.cuh"

namespace ssmi_m2bwd {
namespace {

/* Stores a float64 sum into a float output of any dtype (f64 kept, others rounded once). */
__device__ __forceinline__ void store_sum(const bw_out & o, long long off, double v) {
    if (o.dtype == SSM_DTYPE_F64)
        ((double *)o.p)[off] = v;
    else
        ssmi_cu_st(o.p, o.dtype, off, (float)v);
}

/* Chunks per batch of a pass: the batch's slots and decays are all loaded before any slot is
 * written, so a thread keeps that many independent loads in flight. */
const int kPassBatch = 8;

/* Forward: the slot of chunk c (s_c on entry) becomes the entering state S_c, from
 * initial_states (or 0) at the segment start; S_{c+1} = e^{cl_c}·S_c + s_c. Consecutive threads
 * take consecutive state elements: every slot access is coalesced. */
__global__ void state_pass_kernel(bw_args a) {
    const long long PN = (long long)a.P * a.N;
    const long long e = (long long)blockIdx.z * blockDim.x + threadIdx.x;
    if (e >= PN) return;
    const bw_seg sg = a.segs[blockIdx.x];
    const int    h = a.h0 + blockIdx.y, p = (int)(e / a.N), n = (int)(e % a.N);
    float        run = 0.0f;
    if (sg.init >= 0) run = ssmi_cu_ld(a.init.p, a.init.dtype, off4(a.init.s, sg.init, h, p, n));
    const long long cend = sg.c0 + sg.nc;
    for (long long c0 = sg.c0; c0 < cend; c0 += kPassBatch) {
        const int nb = cend - c0 < kPassBatch ? (int)(cend - c0) : kPassBatch;
        float     s[kPassBatch], f[kPassBatch];
#pragma unroll
        for (int u = 0; u < kPassBatch; ++u)
            if (u < nb) {
                s[u] = a.st[state_at(a, c0 + u, h) + e], f[u] = a.ecl[(c0 + u) * a.H + h];
            }
#pragma unroll
        for (int u = 0; u < kPassBatch; ++u)
            if (u < nb) {
                a.st[state_at(a, c0 + u, h) + e] = run;
                run = f[u] * run + s[u];
            }
    }
}

/* Reverse: the slot of chunk c (dS_c on entry) becomes G_c = ∂L/∂S_{c+1}, from dfinal_states
 * (or 0) after the segment's last chunk; ∂L/∂S_c = e^{cl_c}·G_c + dS_c. The segment's
 * dinitial_states slot gets ∂L/∂S_0, or 0 where the segment does not start from it. */
__global__ void state_grad_kernel(bw_args a) {
    const long long PN = (long long)a.P * a.N;
    const long long e = (long long)blockIdx.z * blockDim.x + threadIdx.x;
    if (e >= PN) return;
    const bw_seg sg = a.segs[blockIdx.x];
    const int    h = a.h0 + blockIdx.y, p = (int)(e / a.N), n = (int)(e % a.N);
    float        gr = 0.0f;
    if (sg.fin >= 0) gr = ssmi_cu_ld(a.dfin.p, a.dfin.dtype, off4(a.dfin.s, sg.fin, h, p, n));
    /* batches from the segment's end: chunk c1 − u for u < nb */
    for (long long c1 = sg.c0 + sg.nc - 1; c1 >= sg.c0; c1 -= kPassBatch) {
        const int nb = c1 - sg.c0 + 1 < kPassBatch ? (int)(c1 - sg.c0 + 1) : kPassBatch;
        float     d[kPassBatch], f[kPassBatch];
#pragma unroll
        for (int u = 0; u < kPassBatch; ++u)
            if (u < nb) {
                d[u] = a.gs[state_at(a, c1 - u, h) + e], f[u] = a.ecl[(c1 - u) * a.H + h];
            }
#pragma unroll
        for (int u = 0; u < kPassBatch; ++u)
            if (u < nb) {
                a.gs[state_at(a, c1 - u, h) + e] = gr;
                gr = f[u] * gr + d[u];
            }
    }
    if (sg.dinit >= 0 && a.dinit.p != NULL)
        ssmi_cu_st(a.dinit.p, a.dinit.dtype, off4(a.dinit.s, sg.dinit, h, p, n), sg.init >= 0 ? gr : 0.0f);
}

/* Threads per block of the 4-element passes, and chunks per batch of them; two batches are in
 * flight (one landing while the other is consumed): 2·kVecBatch·kPass4Threads float4 = 32 KB of
 * shared memory per block. A thread keeps kVecBatch 16-byte loads in flight while it waits: a
 * head batch gives a pass few threads (10 heads × 2048 at B=1 S=8192 H=80 P=64 N=128), so the
 * loads in flight per thread bound it; blocks of 128 threads spread them over the SMs (160
 * blocks there). */
const int kPass4Threads = 128;
const int kVecBatch = 8;

/* state_pass_kernel / state_grad_kernel with 4 consecutive state elements per thread (P·N % 4 = 0:
 * 16-byte aligned slots): kRev = false the forward pass, true the reverse. Each thread copies its
 * own elements of the batch's slots into shared memory and reads only those (no barrier); the
 * chunk order and the arithmetic per element are those of the scalar kernels. */
template <bool kRev>
__global__ void __launch_bounds__(kPass4Threads) state_pass4_kernel(bw_args a) {
    __shared__ float4 buf[2][kVecBatch][kPass4Threads];
    const long long   PN = (long long)a.P * a.N;
    const long long   e = ((long long)blockIdx.z * blockDim.x + threadIdx.x) * 4;
    if (e >= PN) return;
    const bw_seg sg = a.segs[blockIdx.x];
    const int    h = a.h0 + blockIdx.y;
    float *      slots = kRev ? a.gs : a.st;
    float        run[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int p = (int)((e + i) / a.N), n = (int)((e + i) % a.N);
        run[i] = 0.0f;
        if (!kRev && sg.init >= 0) run[i] = ssmi_cu_ld(a.init.p, a.init.dtype, off4(a.init.s, sg.init, h, p, n));
        if (kRev && sg.fin >= 0) run[i] = ssmi_cu_ld(a.dfin.p, a.dfin.dtype, off4(a.dfin.s, sg.fin, h, p, n));
    }
    /* the k-th chunk of the pass (k < nc): forward c0 + k, reverse c0 + nc − 1 − k; its slot
     * elements at first + k·step, its decay at a.ecl[chunk(k)·H + h] */
    auto            chunk = [&](long long k) { return kRev ? sg.c0 + sg.nc - 1 - k : sg.c0 + k; };
    float * const   first = slots + (sg.nc > 0 ? state_at(a, chunk(0), h) + e : 0);
    const long long step = (kRev ? -1 : 1) * (long long)a.hb * PN;
    auto            issue = [&](long long k0, int b) {
        asm volatile("" ::: "memory"); /* the reads of buffer b (the batch before) stay before its refill */
#pragma unroll
        for (int u = 0; u < kVecBatch; ++u)
            if (k0 + u < sg.nc) ssmi_mma::cp_async16(&buf[b][u][threadIdx.x], first + (k0 + u) * step);
        ssmi_mma::cp_async_commit();
    };
    issue(0, 0);
    int b = 0;
    for (long long k0 = 0; k0 < sg.nc; k0 += kVecBatch, b ^= 1) {
        issue(k0 + kVecBatch, b ^ 1);
        ssmi_mma::cp_async_wait_group<1>(); /* batch k0 has landed */
#pragma unroll
        for (int u = 0; u < kVecBatch; ++u)
            if (k0 + u < sg.nc) {
                const float4 v = buf[b][u][threadIdx.x];
                const float  f = a.ecl[chunk(k0 + u) * a.H + h];
                *(float4 *)(first + (k0 + u) * step) = make_float4(run[0], run[1], run[2], run[3]);
                run[0] = f * run[0] + v.x, run[1] = f * run[1] + v.y;
                run[2] = f * run[2] + v.z, run[3] = f * run[3] + v.w;
            }
    }
    ssmi_mma::cp_async_wait_all();
    if (kRev && sg.dinit >= 0 && a.dinit.p != NULL)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int p = (int)((e + i) / a.N), n = (int)((e + i) % a.N);
            ssmi_cu_st(a.dinit.p, a.dinit.dtype, off4(a.dinit.s, sg.dinit, h, p, n), sg.init >= 0 ? run[i] : 0.0f);
        }
}

/* dB and dC of (token, group, n) element e: the group's parts (bw_args.parts) summed in part order. */
__device__ __forceinline__ void group_sum(const bw_args & a, long long e) {
    const long long GN = (long long)a.G * a.N;
    if (e >= a.tokens * GN) return;
    const long long t = e / GN;
    const int       g = (int)((e % GN) / a.N), n = (int)(e % a.N);
    const long long row = t / a.S, tok = t % a.S, at = ((t * a.G + g) * a.parts) * a.N + n;
    if (a.want_db) {
        float s = 0.0f;
        for (int r = 0; r < a.parts; ++r) s += a.dbh[at + (long long)r * a.N];
        ssmi_cu_st(a.db.p, a.db.dtype, off4(a.db.s, row, tok, g, n), s);
    }
    if (a.want_dc) {
        float s = 0.0f;
        for (int r = 0; r < a.parts; ++r) s += a.dch[at + (long long)r * a.N];
        ssmi_cu_st(a.dc.p, a.dc.dtype, off4(a.dc.s, row, tok, g, n), s);
    }
}

/* Head h's dA, ddt_bias and dD from the (chunk, head) partials (a whole block), chunks in order, in
 * float64: a thread per channel sums its dD partials (kReduceBatch chunks' loads in flight, then
 * their adds in order); a 1-D dD then sums the P channel sums in channel order (thread 0, from
 * shared memory). dA and ddt_bias: the block loads a batch of chunks' partials into shared memory
 * (a thread each), thread 0 adds them in chunk order. */
constexpr int kReduceBatch = 16;
__device__ __forceinline__ void reduce_head(const bw_args & a, int h) {
    __shared__ double chan[kThreads];
    __shared__ float  pa[kThreads], pb[kThreads];
    const int tid = threadIdx.x;
    double    all = 0.0; /* thread 0: the channel sums, in channel order */
    for (int p0 = 0; p0 < a.P && a.dd.p != NULL; p0 += blockDim.x) {
        const int p = p0 + tid;
        double    s = 0.0;
        if (p < a.P)
            for (long long c0 = 0; c0 < a.nchunks; c0 += kReduceBatch) {
                float v[kReduceBatch];
#pragma unroll
                for (int u = 0; u < kReduceBatch; ++u)
                    v[u] = c0 + u < a.nchunks ? a.ddp[((c0 + u) * a.H + h) * a.P + p] : 0.0f;
#pragma unroll
                for (int u = 0; u < kReduceBatch; ++u)
                    if (c0 + u < a.nchunks) s += (double)v[u];
            }
        if (a.d2) {
            if (p < a.P) store_sum(a.dd, off2(a.dd.s, h, p), s);
            continue;
        }
        chan[tid] = s;
        __syncthreads();
        if (tid == 0)
            for (int k = 0; k < (int)blockDim.x && p0 + k < a.P; ++k) all += chan[k];
        __syncthreads();
    }
    double da = 0.0, db = 0.0; /* thread 0 */
    for (long long c0 = 0; c0 < a.nchunks; c0 += blockDim.x) {
        const long long c = c0 + tid;
        if (c < a.nchunks) pa[tid] = a.dap[c * a.H + h], pb[tid] = a.dbp[c * a.H + h];
        __syncthreads();
        if (tid == 0)
            for (int k = 0; k < (int)blockDim.x && c0 + k < a.nchunks; ++k) da += (double)pa[k], db += (double)pb[k];
        __syncthreads(); /* the batch is read before the next one is stored */
    }
    if (tid != 0) return;
    if (a.da.p != NULL) store_sum(a.da, (long long)h * a.da.s[0], da);
    if (a.dbias.p != NULL) store_sum(a.dbias, (long long)h * a.dbias.s[0], db);
    if (a.dd.p != NULL && !a.d2) store_sum(a.dd, (long long)h * a.dd.s[0], all);
}

/* Step 7 in one launch: blocks [0, nred) reduce head blockIdx.x (nred = H where dA, ddt_bias or
 * dD is wanted, else 0), the rest sum the dB/dC parts (where there are parts to sum), kThreads
 * elements each. The heads' blocks come first so they are dispatched first: their chains of
 * dependent loads and float64 adds then run beside the bandwidth-bound part sums instead of after
 * them. */
__global__ void __launch_bounds__(kThreads) bwd_sums_kernel(bw_args a, int nred) {
    if ((int)blockIdx.x < nred) reduce_head(a, (int)blockIdx.x);
    else group_sum(a, ((long long)blockIdx.x - nred) * kThreads + threadIdx.x);
}

/* A (segment, head of the batch, element group) grid launch: fn4 (4 elements per thread) where
 * P·N % 4 = 0, else fn1 (one). */
ssm_status launch_segment_grid(ssm_context * ctx, const char * op, const char * name, void (*fn4)(bw_args),
                               void (*fn1)(bw_args), const bw_args & a) {
    const long long PN = (long long)a.P * a.N;
    if (a.nsegs == 0 || a.hb == 0 || PN == 0) return SSM_STATUS_OK;
    const int       v = PN % 4 == 0 ? 4 : 1, threads = v == 4 ? kPass4Threads : kThreads;
    const long long per = (long long)threads * v;
    const dim3      grid((unsigned)a.nsegs, (unsigned)a.hb, (unsigned)((PN + per - 1) / per));
    (v == 4 ? fn4 : fn1)<<<grid, threads, 0, ssmi_cuda_stream(ctx)>>>(a);
    SSMI_CU_CHECK_LAUNCH(ctx, op, name);
    return SSM_STATUS_OK;
}

} /* namespace */

ssm_status launch_state_pass(ssm_context * ctx, const char * op, const bw_args & a) {
    return launch_segment_grid(ctx, op, "state_pass_kernel", state_pass4_kernel<false>, state_pass_kernel, a);
}

ssm_status launch_state_grad_pass(ssm_context * ctx, const char * op, const bw_args & a) {
    return launch_segment_grid(ctx, op, "state_grad_kernel", state_pass4_kernel<true>, state_grad_kernel, a);
}

ssm_status launch_bwd_reduce(ssm_context * ctx, const char * op, const bw_args & a) {
    const long long n = a.tokens * a.G * a.N;
    const bool      any = (a.parts != 1 || a.sparts) && (a.want_db || a.want_dc) && n > 0;
    const long long sums = any ? (n + kThreads - 1) / kThreads : 0;
    const int       nred = a.H > 0 && (a.da.p != NULL || a.dbias.p != NULL || a.dd.p != NULL) ? a.H : 0;
    if (sums + nred == 0) return SSM_STATUS_OK;
    bwd_sums_kernel<<<(unsigned)(sums + nred), kThreads, 0, ssmi_cuda_stream(ctx)>>>(a, nred);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "bwd_sums_kernel");
    return SSM_STATUS_OK;
}

} /* namespace ssmi_m2bwd */
