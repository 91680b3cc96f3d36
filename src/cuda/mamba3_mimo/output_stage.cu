/*
 * output_stage.cu — the per-token kernels after the chunk kernels of the CUDA Mamba-3 MIMO:
 *   partial_reduce_kernel  (bwd_fwd) dmimo_o / dmimo_z: the per-chunk partial sums of the
 *                          output kernel added in chunk order;
 *   output_stage_kernel    (forward) out from Y per (row, token, head): z gate or fused RMS
 *                          norm, the mimo_o sum over ranks (or the per-rank out);
 *   finals_kernel          (forward) v and θ of each sequence's last token, and every final of
 *                          an empty sequence;
 */
#include "mimo.cuh"

namespace ssmi_mimo {
namespace {

/* dmimo_o[b,h,r,p] = Σ_c part_o[b·nc + c] in chunk order (same for dmimo_z). */
__global__ void partial_reduce_kernel(const mc_args A, int nc, ssmi_cu_view dmo, ssmi_cu_view dmz) {
    const int e = blockIdx.y * blockDim.x + threadIdx.x;
    if (e >= A.R * A.P) return;
    const int b = blockIdx.x / A.H, h = blockIdx.x - b * A.H, r = e / A.P, p = e - r * A.P;
    float     so = 0.0f, sz = 0.0f;
    for (int c = 0; c < nc; ++c) {
        const long long po = ((((long long)b * nc + c) * A.H + h) * A.R + r) * A.P + p;
        if (dmo.p != NULL) so += A.part_o[po];
        if (dmz.p != NULL) sz += A.part_z[po];
    }
    if (dmo.p != NULL) stv(dmo, o4(dmo, b, h, r, p), so);
    if (dmz.p != NULL) stv(dmz, o4(dmz, b, h, r, p), sz);
}



/* Forward output stage: one warp per (row, token, head) (CPU ssmi_mimo_output_token). */
__global__ void output_stage_kernel(const mc_args A) {
    const int       lane = threadIdx.x & 31;
    const long long gw = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (gw >= (long long)A.B * A.S * A.H) return;
    const int       h = (int)(gw % A.H);
    const long long bt = gw / A.H;
    const int       b = (int)(bt / A.S);
    const long long t = bt - (long long)b * A.S;
    const float *   Y = A.ws_y + gw * A.R * A.P;
    /* rstd per rank (fused): Σ_p y² by lane partials and a fixed butterfly */
    float acc_out[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* lanes own p = lane + 32·k, P ≤ 128 */
    for (int r = 0; r < A.R; ++r) {
        const float * yr = Y + r * A.P;
        float         rstd = 1.0f;
        if (A.fused) {
            float ss = 0.0f;
            for (int p = lane; p < A.P; p += 32) ss += yr[p] * yr[p];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
            rstd = 1.0f / sqrtf(ss / (float)A.P + A.eps);
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int p = lane + 32 * k;
            if (p >= A.P) continue;
            float y = yr[p];
            if (A.has_z) {
                const float zz = ldv(A.z, o4(A.z, b, t, h, p)) * ldv(A.mimo_z, o3(A.mimo_z, h, r, p));
                const float sz = ssmi_math::silu(zz);
                if (A.fused) {
                    const float nw = A.norm_w.p == NULL ? 1.0f
                                     : A.nw_1d          ? ldv(A.norm_w, o1(A.norm_w, (long long)h * A.P + p))
                                                        : ldv(A.norm_w, o2(A.norm_w, h, p));
                    y = y * rstd * nw * sz;
                } else {
                    y = y * sz;
                }
            }
            if (A.reduce) {
                const float t2 = y * ldv(A.mimo_o, o3(A.mimo_o, h, r, p));
                acc_out[k] = r == 0 ? t2 : acc_out[k] + t2;
            } else {
                stv(A.out, o5(A.out, b, t, r, h, p), y);
            }
        }
    }
    if (A.reduce)
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int p = lane + 32 * k;
            if (p < A.P) stv(A.out, o4(A.out, b, t, h, p), acc_out[k]);
        }
}

/* Forward finals per (sequence, head): v and θ of the last token; for an empty sequence every
 * final is its initial state (zeros without); the ssm state comes from the pass, k from
 * the output kernel. */
__global__ void finals_kernel(const mc_args A) {
    const int    s = blockIdx.x, h = blockIdx.y;
    const mc_seq sq = A.seqs[s];
    const bool   empty = sq.len == 0;
    const int    NA = A.A;
    for (int p = threadIdx.x; p < A.P && A.final_v.p != NULL; p += blockDim.x) {
        float x = 0.0f;
        if (!empty) x = ldv(A.v, o4(A.v, sq.row, sq.t0 + sq.len - 1, h, p));
        else if (A.has_states) x = ldv(A.v_state, o3(A.v_state, s, h, p));
        stv(A.final_v, o3(A.final_v, s, h, p), x);
    }
    for (int a = threadIdx.x; a < NA && A.final_angle.p != NULL; a += blockDim.x) {
        float x = 0.0f;
        if (!empty) x = A.ws_theta[(((long long)sq.row * A.S + sq.t0 + sq.len - 1) * A.H + h) * NA + a];
        else if (A.has_states) x = ldv(A.angle_state, o3(A.angle_state, s, h, a));
        stv(A.final_angle, o3(A.final_angle, s, h, a), x);
    }
    if (!empty || A.final_k.p == NULL) return;
    for (int e = threadIdx.x; e < A.R * A.N; e += blockDim.x) {
        const int r = e / A.N, nn = e - r * A.N;
        const float x = A.has_states ? ldv(A.k_state, o4(A.k_state, s, r, h, nn)) : 0.0f;
        stv(A.final_k, o4(A.final_k, s, r, h, nn), x);
    }
}

} // namespace

ssm_status launch_partial_reduce(ssm_context * ctx, const char * op, const mc_args & A, int nc, ssmi_cu_view dmo,
                                 ssmi_cu_view dmz, cudaStream_t s) {
    const dim3 grid((unsigned)((long long)A.B * A.H), (unsigned)((A.R * A.P + kThreads - 1) / kThreads));
    partial_reduce_kernel<<<grid, kThreads, 0, s>>>(A, nc, dmo, dmz);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "partial_reduce_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_output_stage(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s) {
    const long long warps = (long long)A.B * A.S * A.H;
    if (warps == 0) return SSM_STATUS_OK;
    output_stage_kernel<<<(unsigned)((warps + 7) / 8), 256, 0, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "output_stage_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_finals(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s) {
    finals_kernel<<<dim3((unsigned)A.nseq, (unsigned)A.H), 128, 0, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "finals_kernel");
    return SSM_STATUS_OK;
}

} // namespace ssmi_mimo
