/*
 * state_pass.cu — the state pass of the CUDA Mamba-3 MIMO chunked operators, the only step
 * that walks a sequence's chunks in order: one thread per (sequence, head, state element).
 * Ŝ_0 = 0 or the folded initial state (spec §2.3); for each chunk w in order: states[c] = Ŝ
 * (bwd_fwd), ws_state[w] = Ŝ (the state ENTERING the chunk, over the chunk's ΔS_w from
 * chunk_gemm.cu), Ŝ ← e^{da_cs[last]}·Ŝ + ΔS_w; at the end the final ssm state (forward, P×N).
 * The ΔS_w and decays of 16 chunks are loaded ahead of the dependent chain.
 */
#include "mimo.cuh"

namespace ssmi_mimo {
namespace {

/* e^{cumsum of adt} at the chunk's last token: the decay of the state over the chunk. */
__device__ __forceinline__ float chunk_decay(const mc_args & A, const mc_chunk & ck, int h) {
    const long long tl = ck.t0 + ck.len - 1;
    const float     x = A.fwd ? A.ws_cm[((long long)ck.b * A.H + h) * A.S + tl] : ldv(A.da_cs, o3(A.da_cs, ck.b, h, tl));
    return expf(x);
}

__global__ void __launch_bounds__(kThreads) state_pass_kernel(const mc_args A, int need_final) {
    const int e = blockIdx.z * blockDim.x + threadIdx.x;
    if (e >= A.N * A.P) return;
    const int    s = blockIdx.x, h = blockIdx.y, nn = e / A.P, pp = e - nn * A.P;
    const mc_seq sq = A.seqs[s];
    float        S = 0.0f;
    if (A.has_states) {
        S = ldv(A.ssm_state, o4(A.ssm_state, s, h, pp, nn));
        if (sq.len > 0) {
            const float dt0 = ldv(A.dt, o3(A.dt, sq.row, h, sq.t0));
            const float c0 = dt0 * (1.0f - ssmi_math::sigmoid(ldv(A.trap, o3(A.trap, sq.row, h, sq.t0))));
            const float vs = ldv(A.v_state, o3(A.v_state, s, h, pp));
            for (int r = 0; r < A.R; ++r) {
                const float u = vs * ldv(A.mimo_v, o3(A.mimo_v, h, r, pp));
                S += c0 * ldv(A.k_state, o4(A.k_state, s, r, h, nn)) * u;
            }
        }
    }
    const long long hs = (long long)A.N * A.P;
    const int       end = sq.first + sq.count;
    enum { U = 16 };
    for (int w0 = sq.first; w0 < end; w0 += U) {
        float ds[U], dec[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            ds[u] = 0.0f, dec[u] = 0.0f;
            if (w0 + u < end) {
                ds[u] = A.ws_state[((long long)(w0 + u) * A.H + h) * hs + e];
                dec[u] = chunk_decay(A, A.chunks[w0 + u], h);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int w = w0 + u;
            if (w < end) {
                if (A.states.p != NULL) {
                    const mc_chunk ck = A.chunks[w];
                    stv(A.states, o5(A.states, ck.b, h, ck.c, nn, pp), S);
                }
                A.ws_state[((long long)w * A.H + h) * hs + e] = S;
                S = fmaf(dec[u], S, ds[u]);
            }
        }
    }
    if (need_final && A.final_ssm.p != NULL) stv(A.final_ssm, o4(A.final_ssm, s, h, pp, nn), S);
}

} // namespace

ssm_status launch_state_pass(ssm_context * ctx, const char * op, const mc_args & A, int need_final, cudaStream_t s) {
    if (A.nseq == 0) return SSM_STATUS_OK;
    const unsigned zt = (unsigned)((A.N * A.P + kThreads - 1) / kThreads);
    state_pass_kernel<<<dim3((unsigned)A.nseq, (unsigned)A.H, zt), kThreads, 0, s>>>(A, need_final);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "state_pass_kernel");
    return SSM_STATUS_OK;
}

} // namespace ssmi_mimo
