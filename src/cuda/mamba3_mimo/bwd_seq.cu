/*
 * bwd_seq.cu — the passes of the CUDA Mamba-3 MIMO backward that walk a sequence:
 *   state_reverse_kernel  one thread per (sequence, head, state element): dŜ from
 *                         dfinal_ssm_state (P×N, or 0) over the work chunks in reverse (the loads
 *                         of kRevBatch chunks issued ahead of the dependent chain),
 *                         dstate[w] = dŜ leaving w (read by bwd_chunk.cu), then
 *                         dŜ ← e^{cs_last}·dŜ + X_w; ds0 = dŜ entering the sequence;
 *   angle_carry_kernel    the angle cumsum backward (spec §3.1, mod 2π as the identity) in two
 *   angle_apply_kernel    levels: per (sequence, head, angle) the chunk sums of raw dθ (written by
 *                         grads_kernel) in reverse from dfinal_angle_state give each chunk's
 *                         carry and dgth = G at the start; then per (chunk, head, angle) the
 *                         chunk's tokens in reverse from its carry: G += raw dθ, dangles =
 *                         π·dt·(1 − tanh²)·G, and the dt part π·tanh·G replaces the raw dθ;
 *   initial_kernel        one block per (sequence, head), with initial states: the gradients of
 *                         Ŝ_0 = ssm_stateᵀ + c0·Σ_r k_state[r] ⊗ (v_state ⊙ mimo_v[r]),
 *                         c0 = dt_0·(1 − λ_0): dssm_state, dk_state, dv_state, dangle_state, the
 *                         fold's dmimo_v part and dc = <dŜ_0, Σ_r k_state[r] ⊗ u_state[r]>; an
 *                         empty sequence passes every dfinal_* through.
 */
#include "bwd.cuh"

namespace ssmi_mimo {
namespace {

const int kRevBatch = 16; /* chunks whose loads the sequential passes issue before their chain */

__global__ void __launch_bounds__(kBwdThreads) state_reverse_kernel(const mb_args A) {
    const int e = blockIdx.z * blockDim.x + threadIdx.x;
    if (e >= A.N * A.P) return;
    const int       s = blockIdx.x, h = blockIdx.y, nn = e / A.P, pp = e - nn * A.P;
    const mc_seq    sq = A.seqs[s];
    const long long hs = (long long)A.N * A.P;
    float           dS = A.dfinal_ssm.p != NULL ? ldv(A.dfinal_ssm, o4(A.dfinal_ssm, s, h, pp, nn)) : 0.0f;
    for (int w0 = sq.first + sq.count - 1; w0 >= sq.first; w0 -= kRevBatch) {
        float x[kRevBatch], dec[kRevBatch];
#pragma unroll
        for (int j = 0; j < kRevBatch; ++j) {
            const int w = w0 - j;
            x[j] = 0.0f, dec[j] = 0.0f;
            if (w >= sq.first) {
                const mc_chunk ck = A.chunks[w];
                dec[j] = expf(A.cm[((long long)ck.b * A.H + h) * A.S + ck.t0 + ck.len - 1]);
                x[j] = A.dstate[((long long)w * A.H + h) * hs + e];
            }
        }
#pragma unroll
        for (int j = 0; j < kRevBatch; ++j) {
            const int w = w0 - j;
            if (w >= sq.first) {
                A.dstate[((long long)w * A.H + h) * hs + e] = dS;
                dS = fmaf(dec[j], dS, x[j]);
            }
        }
    }
    A.ds0[((long long)s * A.H + h) * hs + e] = dS;
}

/* One thread per (sequence, head, angle): the chunk sums of raw dθ in reverse from
 * dfinal_angle_state; thc[w] becomes the carry G leaving chunk w, dgth = G at the start. */
__global__ void angle_carry_kernel(const mb_args A) {
    const long long gidx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (gidx >= (long long)A.nseq * A.H * A.A) return;
    const int    s = (int)(gidx / ((long long)A.H * A.A)), rem = (int)(gidx - (long long)s * A.H * A.A);
    const int    h = rem / A.A, a = rem - h * A.A;
    const mc_seq sq = A.seqs[s];
    float        G = A.dfinal_angle.p != NULL ? ldv(A.dfinal_angle, o3(A.dfinal_angle, s, h, a)) : 0.0f;
    for (int w0 = sq.first + sq.count - 1; w0 >= sq.first; w0 -= kRevBatch) {
        float c[kRevBatch];
#pragma unroll
        for (int j = 0; j < kRevBatch; ++j)
            c[j] = w0 - j >= sq.first ? A.thc[((long long)(w0 - j) * A.H + h) * A.A + a] : 0.0f;
#pragma unroll
        for (int j = 0; j < kRevBatch; ++j)
            if (w0 - j >= sq.first) {
                A.thc[((long long)(w0 - j) * A.H + h) * A.A + a] = G;
                G += c[j];
            }
    }
    A.dgth[((long long)s * A.H + h) * A.A + a] = G;
}

/* One thread per (work chunk, head, angle): the chunk's tokens in reverse from its carry:
 * G += raw dθ, dangles = π·dt·(1 − tanh²)·G, and the dt part π·tanh·G replaces the raw dθ. */
__global__ void angle_apply_kernel(const mb_args A) {
    const long long gidx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (gidx >= (long long)A.W * A.H * A.A) return;
    const int      w = (int)(gidx / ((long long)A.H * A.A)), rem = (int)(gidx - (long long)w * A.H * A.A);
    const int      h = rem / A.A, a = rem - h * A.A;
    const mc_chunk ck = A.chunks[w];
    float          G = A.thc[gidx];
    for (int i = ck.len - 1; i >= 0; --i) {
        const long long t = ck.t0 + i;
        float *         slot = A.dth + (((long long)ck.b * A.H + h) * A.S + t) * A.A + a;
        G += *slot;
        const float th = tanhf(ldv(A.angles, o4(A.angles, ck.b, t, h, a)));
        const float dtv = ldv(A.dt, o3(A.dt, ck.b, h, t));
        if (A.dangles.p != NULL) stv(A.dangles, o4(A.dangles, ck.b, t, h, a), ssmi_math::kPi * dtv * (1.0f - th * th) * G);
        *slot = ssmi_math::kPi * th * G;
    }
}

__global__ void __launch_bounds__(kBwdThreads) initial_kernel(const mb_args A) {
    __shared__ float red[kBwdThreads];
    const int       s = blockIdx.x, h = blockIdx.y, R = A.R, N = A.N, P = A.P;
    const mc_seq    sq = A.seqs[s];
    const long long hs = (long long)N * P;
    const float *   dS = A.ds0 + ((long long)s * A.H + h) * hs;
    float *         pmv = A.p_mv0 + ((long long)s * A.H + h) * R * P;
    const bool      empty = sq.len == 0;
    float           c0 = 0.0f;
    if (!empty) {
        const float dt0 = ldv(A.dt, o3(A.dt, sq.row, h, sq.t0));
        c0 = dt0 * (1.0f - ssmi_math::sigmoid(ldv(A.trap, o3(A.trap, sq.row, h, sq.t0))));
    }
    if (A.dssm_state.p != NULL)
        for (int e = threadIdx.x; e < N * P; e += blockDim.x) {
            const int nn = e / P, pp = e - nn * P;
            stv(A.dssm_state, o4(A.dssm_state, s, h, pp, nn), dS[e]);
        }
    if (A.dangle_state.p != NULL)
        for (int a = threadIdx.x; a < A.A; a += blockDim.x)
            stv(A.dangle_state, o3(A.dangle_state, s, h, a), A.dgth[((long long)s * A.H + h) * A.A + a]);
    /* gn[r][n] = Σ_p dŜ_0[n][p]·u_state[r][p]: dk_state = c0·gn, dc = Σ gn·k_state */
    float part = 0.0f;
    for (int e = threadIdx.x; e < R * N; e += blockDim.x) {
        const int r = e / N, nn = e - r * N;
        float     gn = 0.0f;
        for (int pp = 0; pp < P; ++pp) {
            const float u = ldv(A.v_state, o3(A.v_state, s, h, pp)) * ldv(A.mimo_v, o3(A.mimo_v, h, r, pp));
            gn = fmaf(dS[(long long)nn * P + pp], u, gn);
        }
        part = fmaf(gn, ldv(A.k_state, o4(A.k_state, s, r, h, nn)), part);
        if (A.dk_state.p != NULL) {
            const float g = empty ? (A.dfinal_k.p != NULL ? ldv(A.dfinal_k, o4(A.dfinal_k, s, r, h, nn)) : 0.0f)
                                  : c0 * gn;
            stv(A.dk_state, o4(A.dk_state, s, r, h, nn), g);
        }
    }
    /* du_state[r][p] = c0·Σ_n k_state[r][n]·dŜ_0[n][p]: dv_state = Σ_r du ⊙ mimo_v, dmimo_v += du ⊙ v_state */
    for (int pp = threadIdx.x; pp < P; pp += blockDim.x) {
        const float vs = ldv(A.v_state, o3(A.v_state, s, h, pp));
        float       dv = 0.0f;
        for (int r = 0; r < R; ++r) {
            float du = 0.0f;
            for (int nn = 0; nn < N; ++nn) du = fmaf(ldv(A.k_state, o4(A.k_state, s, r, h, nn)), dS[(long long)nn * P + pp], du);
            du *= c0;
            dv = fmaf(du, ldv(A.mimo_v, o3(A.mimo_v, h, r, pp)), dv);
            pmv[(long long)r * P + pp] = du * vs;
        }
        if (empty) dv = A.dfinal_v.p != NULL ? ldv(A.dfinal_v, o3(A.dfinal_v, s, h, pp)) : 0.0f;
        if (A.dv_state.p != NULL) stv(A.dv_state, o3(A.dv_state, s, h, pp), dv);
    }
    red[threadIdx.x] = part;
    __syncthreads();
    if (threadIdx.x == 0) {
        float dc = 0.0f;
        for (int j = 0; j < (int)blockDim.x; ++j) dc += red[j];
        A.dc[(long long)s * A.H + h] = dc;
    }
}

} // namespace

ssm_status launch_bwd_state_reverse(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s) {
    if (A.nseq == 0 || A.H == 0) return SSM_STATUS_OK;
    const unsigned zt = (unsigned)((A.N * A.P + kBwdThreads - 1) / kBwdThreads);
    state_reverse_kernel<<<dim3((unsigned)A.nseq, (unsigned)A.H, zt), kBwdThreads, 0, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "state_reverse_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_bwd_angles(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s) {
    const long long threads = (long long)A.nseq * A.H * A.A;
    if (threads == 0) return SSM_STATUS_OK;
    angle_carry_kernel<<<(unsigned)((threads + 127) / 128), 128, 0, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "angle_carry_kernel");
    const long long chunk_threads = (long long)A.W * A.H * A.A;
    if (chunk_threads == 0) return SSM_STATUS_OK;
    angle_apply_kernel<<<(unsigned)((chunk_threads + 127) / 128), 128, 0, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "angle_apply_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_bwd_initial_states(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s) {
    if (A.nseq == 0 || A.H == 0 || !A.has_states) return SSM_STATUS_OK;
    initial_kernel<<<dim3((unsigned)A.nseq, (unsigned)A.H), kBwdThreads, 0, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "initial_kernel");
    return SSM_STATUS_OK;
}

} // namespace ssmi_mimo
