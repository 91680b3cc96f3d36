/*
 * state_pass.cu — the state pass of the SISO forward and the final k / v states of empty sequences.
 *
 * The pass, per (sequence, state element): S ← H_in = S_in + dt_0(1−λ_0)·v_in k_inᵀ (spec §3.5; only
 * for a non-empty sequence), then per chunk S_enter = S stored over the chunk's contribution, S ←
 * e^{c_last}·S + s; the final ssm state. Both forms below compute this recurrence in the same
 * expressions; they differ in how many elements a thread takes and how their loads are issued.
 */
#include "siso.cuh"

namespace ssmi_siso {
namespace {

/* 4 adjacent elements of a state row per thread (K % 4 == 0: 16-byte loads and stores; the
 * workspace is 128-byte aligned and H·V·K, p·K and n are then multiples of 4), with a rolling
 * prefetch of kPassAhead chunks (the load of chunk c + kPassAhead is issued as chunk c is
 * consumed, so loads stay in flight; the decay's expf is taken when it is used) and 64 registers
 * (4 blocks of 256 threads per SM), so that H·V·K/4 threads of one sequence fit one wave on 132
 * SMs up to H·V·K = 540k. */
const int       kPassAhead = 4;
__global__ void __launch_bounds__(kThreads, 4) pass_kernel(const m3_fwd_args P) {
    const long long vk = (long long)P.V * P.K, hvk = P.H * vk;
    const long long e = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (e >= hvk) return;
    const int    s = blockIdx.y;
    const m3_seg sg = P.segs[s];
    const int    h = (int)(e / vk), p = (int)((e % vk) / P.K), n = (int)(e % P.K);
    float        st[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (P.has_states) {
        const bool  add = sg.len > 0; /* H_in = S_in + dt_0(1−λ_0)·v_in k_inᵀ (spec §3.5) */
        const float c0 = add ? ld3(P.dt, sg.row, h, sg.t0) * (1.0f - ssmi_math::sigmoid(ld3(P.trap, sg.row, h, sg.t0))) : 0.0f;
        const float vin = add ? ld3(P.v_in, s, h, p) : 0.0f;
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            st[v] = ld4(P.ssm_in, s, h, p, n + v);
            if (add) st[v] += (c0 * ld3(P.k_in, s, h, n + v)) * vin;
        }
    }
    float *       base = P.states + (long long)sg.first * hvk + e;
    const float * lc = P.lastcum + (long long)sg.first * P.H + h;
    float4        loc[kPassAhead];
    float         cum[kPassAhead];
#pragma unroll
    for (int u = 0; u < kPassAhead; ++u) {
        const bool ok = u < sg.count;
        loc[u] = ok ? *reinterpret_cast<const float4 *>(base + u * hvk) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        cum[u] = ok ? lc[(long long)u * P.H] : 0.0f;
    }
    for (int c0 = 0; c0 < sg.count; c0 += kPassAhead) {
#pragma unroll
        for (int u = 0; u < kPassAhead; ++u) {
            const int c = c0 + u;
            if (c >= sg.count) break;
            const float4 l = loc[u];
            const float  decay = expf(cum[u]);
            if (c + kPassAhead < sg.count) { /* refill this slot kPassAhead chunks ahead */
                loc[u] = *reinterpret_cast<const float4 *>(base + (long long)(c + kPassAhead) * hvk);
                cum[u] = lc[(long long)(c + kPassAhead) * P.H];
            }
            *reinterpret_cast<float4 *>(base + (long long)c * hvk) = make_float4(st[0], st[1], st[2], st[3]);
            st[0] = decay * st[0] + l.x;
            st[1] = decay * st[1] + l.y;
            st[2] = decay * st[2] + l.z;
            st[3] = decay * st[3] + l.w;
        }
    }
    if (P.fin_ssm.present)
#pragma unroll
        for (int v = 0; v < 4; ++v) st4(P.fin_ssm, s, h, p, n + v, st[v]);
}

/* One element per thread (K % 4 != 0): the contributions and decays of kPassBatch chunks are
 * loaded before any of them is used. */
const int       kPassBatch = 8;
__global__ void __launch_bounds__(kThreads) pass_odd_kernel(const m3_fwd_args P) {
    const long long vk = (long long)P.V * P.K, hvk = P.H * vk;
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= hvk) return;
    const int    s = blockIdx.y;
    const m3_seg sg = P.segs[s];
    const int    h = (int)(e / vk), p = (int)((e % vk) / P.K), n = (int)(e % P.K);
    float        st = 0.0f;
    if (P.has_states) {
        const bool  add = sg.len > 0; /* H_in = S_in + dt_0(1−λ_0)·v_in k_inᵀ (spec §3.5) */
        const float c0 = add ? ld3(P.dt, sg.row, h, sg.t0) * (1.0f - ssmi_math::sigmoid(ld3(P.trap, sg.row, h, sg.t0))) : 0.0f;
        const float vin = add ? ld3(P.v_in, s, h, p) : 0.0f;
        st = ld4(P.ssm_in, s, h, p, n);
        if (add) st += (c0 * ld3(P.k_in, s, h, n)) * vin;
    }
    for (int k0 = 0; k0 < sg.count; k0 += kPassBatch) {
        float loc[kPassBatch], dec[kPassBatch];
#pragma unroll
        for (int u = 0; u < kPassBatch; ++u) {
            const long long w = (long long)sg.first + k0 + u;
            const bool      ok = k0 + u < sg.count;
            dec[u] = ok ? expf(P.lastcum[w * P.H + h]) : 0.0f;
            loc[u] = ok ? P.states[w * hvk + e] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kPassBatch; ++u) {
            if (k0 + u >= sg.count) break;
            float * dst = P.states + ((long long)sg.first + k0 + u) * hvk + e;
            dst[0] = st;
            st = dec[u] * st + loc[u];
        }
    }
    if (P.fin_ssm.present) st4(P.fin_ssm, s, h, p, n, st);
}

/* The final k / v states of sequences without tokens: the initial ones, or zeros. */
__global__ void __launch_bounds__(kThreads) empty_kernel(const m3_fwd_args P) {
    const int    s = blockIdx.x;
    const m3_seg sg = P.segs[s];
    if (sg.len != 0) return;
    if (P.fin_k.present)
        for (int o = threadIdx.x; o < P.H * P.K; o += blockDim.x) {
            const int h = o / P.K, n = o - (o / P.K) * P.K;
            st3(P.fin_k, s, h, n, P.has_states ? ld3(P.k_in, s, h, n) : 0.0f);
        }
    if (P.fin_v.present)
        for (int o = threadIdx.x; o < P.H * P.V; o += blockDim.x) {
            const int h = o / P.V, p = o - (o / P.V) * P.V;
            st3(P.fin_v, s, h, p, P.has_states ? ld3(P.v_in, s, h, p) : 0.0f);
        }
}

/* A block per (chunk, head): a chunk whose index in its sequence is a multiple of P.chm copies its
 * entering state to chunk_states row srow + index / chm. */
__global__ void __launch_bounds__(kThreads) chunk_states_kernel(const m3_fwd_args P) {
    const long long w = blockIdx.x;
    const int       h = blockIdx.y;
    const m3_chunk  ch = P.chunks[w];
    const m3_seg    sg = P.segs[ch.seq];
    const int       j = (int)w - sg.first;
    if (j % P.chm != 0) return;
    const long long row = sg.srow + j / P.chm, vk = (long long)P.V * P.K;
    const float *   src = P.states + (w * P.H + h) * vk;
    for (long long e = threadIdx.x; e < vk; e += kThreads) st4(P.chst, row, h, e / P.K, e % P.K, src[e]);
}

} /* namespace */

/* The pass over every sequence: 4 elements per thread when K % 4 == 0, one otherwise. */
ssm_status launch_pass(ssm_context * ctx, const char * op, const m3_fwd_args & P) {
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const long long    hvk = (long long)P.H * P.V * P.K;
    if ((P.K & 3) == 0) {
        const long long n4 = hvk / 4;
        pass_kernel<<<dim3((unsigned)((n4 + kThreads - 1) / kThreads), (unsigned)P.NS), kThreads, 0, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "pass_kernel launch");
    } else {
        pass_odd_kernel<<<dim3((unsigned)((hvk + kThreads - 1) / kThreads), (unsigned)P.NS), kThreads, 0, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "pass_odd_kernel launch");
    }
    return SSM_STATUS_OK;
}

ssm_status launch_chunk_states(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W) {
    chunk_states_kernel<<<dim3((unsigned)W, (unsigned)P.H), kThreads, 0, ssmi_cuda_stream(ctx)>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "chunk_states_kernel launch");
    return SSM_STATUS_OK;
}

ssm_status launch_empty(ssm_context * ctx, const char * op, const m3_fwd_args & P) {
    empty_kernel<<<(unsigned)P.NS, kThreads, 0, ssmi_cuda_stream(ctx)>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "empty_kernel launch");
    return SSM_STATUS_OK;
}

} /* namespace ssmi_siso */
