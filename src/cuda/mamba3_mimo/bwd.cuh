/* bwd.cuh — what the backward kernels of the CUDA Mamba-3 MIMO (mamba3_mimo_bwd, spec §4) share:
 * their argument block, the chunk-tile workspace addressing and the launch functions.
 *
 * The forward is recomputed by the forward's own kernels (angle_prep.cu, chunk_gemm.cu,
 * state_pass.cu: θ, the chunk-local cumsum of adt, the state entering every work chunk and the
 * per-rank pre-gate output Y), then the backward kernels, each one translation unit:
 *   bwd_dy.cu      the output stage backward: dY from dout (mimo_o, z gate, fused norm), dz, the
 *                  dmimo_o / dmimo_z / norm-weight partial sums per work chunk;
 *   bwd_chunk.cu   the chunk tiles (q̃, k̂, k̃, u, qkdot) and each chunk's term of the reverse
 *                  state recurrence; then, after the reverse pass, every per-chunk gradient
 *                  (spec §4.2): dq̄, dk̄ per value head, dv, raw dθ, dfactor, dgamma_diag, dADT
 *                  and the parameter partial sums;
 *   bwd_seq.cu     the passes along a sequence: dŜ over the chunks in reverse, the angle cumsum
 *                  backward, the initial-state gradients;
 *   bwd_reduce.cu  per token ddt / dtrap, the Q/K group sums, the parameter sums.
 * Chunk tiles live in global fp32 workspace: tile (w, h) holds C·R rows (x = i·R + r); a tail
 * chunk uses its first len·R rows. No atomics; every sum runs in a fixed order.
 */
#ifndef SSMI_CUDA_MIMO_BWD_CUH
#define SSMI_CUDA_MIMO_BWD_CUH

#include "mimo.cuh"

namespace ssmi_mimo {

const int kBwdThreads = 256; /* threads of every backward block */

struct mb_args {
    ssmi_cu_view q, k, v, z, dout, q_bias, k_bias, mimo_v, mimo_z, mimo_o, d, norm_w, angles, dt, trap;
    ssmi_cu_view k_state, v_state;
    ssmi_cu_view dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v;
    ssmi_cu_view dq, dk, dv, dz, dadt, ddt, dtrap, dangles;
    ssmi_cu_view dangle_state, dssm_state, dk_state, dv_state;
    const mc_chunk * chunks;
    const mc_seq *   seqs;
    /* the forward recompute (mc_args' workspaces) */
    const float *theta; /* [B·S][H][A] θ                                            */
    const float *cm;    /* [B][H][S] chunk-local inclusive cumsum of adt              */
    const float *state; /* [W][H][N][P] Ŝ entering each work chunk                    */
    const float *y;     /* [B·S][H][R][P] pre-gate Y                                  */
    /* chunk tiles: [W][H][C·R][·] */
    float *dy, *u, *du;      /* ·P: dY, U, dU                                       */
    float *tq, *tkh, *tkt;   /* ·N: q̃, k̂, k̃                                        */
    float *tdq, *tdk;        /* ·N: dq̃, dk̂ then dk̃                                  */
    float *m, *d2, *wp;      /* ·C·R: M, D2, the pair terms of dcs                  */
    float *qkd, *dqk;        /* [W][H][C][R][R]: q̄·k̄, dY·u of the same token         */
    /* per chunk / sequence / token */
    float *dstate;           /* [W][H][N][P] X_w, then dŜ leaving chunk w            */
    float *ds0;              /* [NS][H][N][P] dŜ entering the sequence               */
    float *dqh, *dkh;        /* [B·S][R][H][N] dq̄, dk̄ per value head                 */
    float *dth;              /* [B][H][S][A] raw dθ, then π·tanh·Σ dθ (the dt part)  */
    float *dgth;             /* [NS][H][A] angle carry at the sequence start         */
    float *dfac, *dgd;       /* [B][H][S] dfactor, dgamma_diag                       */
    float *dc;               /* [NS][H] gradient of the initial-state fold's dt·(1−λ) */
    /* partial sums */
    float *p_o, *p_z, *p_w, *p_mv; /* [W][H][R][P]                                    */
    float *p_mv0;                  /* [NS][H][R][P] the initial-state fold's dmimo_v  */
    float *p_qb, *p_kb;            /* [W][H][R][N]                                    */
    float *p_dd;                   /* [W][H]                                          */
    int    B, S, H, G, R, N, P, A, C, W, nseq;
    int    has_z, has_d, reduce, fused, has_states, nw_1d;
    float  eps;
};

/* First row of tile (w, h) (times the row width gives the element offset). */
__device__ __forceinline__ long long tile_row(const mb_args & A, int w, int h) {
    return ((long long)w * A.H + h) * A.C * A.R;
}

/* Per-token scalars of token t of chunk ck: λ, dt, γ = dt·λ, c = γ + σ̄ (σ̄ = dt_{t+1}·(1 − λ_{t+1}),
 * 0 at the sequence's last token). */
__device__ __forceinline__ void token_scalars(const mb_args & A, const mc_chunk & ck, int h, long long t, float & lam,
                                              float & dtv, float & gam, float & cf) {
    dtv = ldv(A.dt, o3(A.dt, ck.b, h, t));
    lam = ssmi_math::sigmoid(ldv(A.trap, o3(A.trap, ck.b, h, t)));
    gam = dtv * lam;
    cf = gam;
    if (t + 1 < ck.t_end) {
        const float dn = ldv(A.dt, o3(A.dt, ck.b, h, t + 1));
        const float ln = ssmi_math::sigmoid(ldv(A.trap, o3(A.trap, ck.b, h, t + 1)));
        cf = gam + dn * (1.0f - ln);
    }
}

/* The launches; each checks its launches and returns DEVICE_ERROR with op in the message. */
ssm_status launch_bwd_dy(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s);
ssm_status launch_bwd_tiles(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s);
ssm_status launch_bwd_chunk_grads(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s);
ssm_status launch_bwd_state_reverse(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s);
ssm_status launch_bwd_angles(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s);
ssm_status launch_bwd_initial_states(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s);
ssm_status launch_bwd_trapezoid(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s);
ssm_status launch_bwd_group_sums(ssm_context * ctx, const char * op, const mb_args & A, cudaStream_t s);
/* out[h][r][e] (kind 0: (H, R, X)), out[h] (kind 1: X = R = 1) = Σ_w part[w][h][r][e] over rows
 * w < nrows in order, + Σ_s extra[s][h][r][e] over s < nextra (extra may be NULL); out[h][p]
 * (kind 2: (H, P); kind 3: 1-D (H·P)) = Σ_w Σ_r part[w][h][r][p]. */
ssm_status launch_bwd_param_sum(ssm_context * ctx, const char * op, const mb_args & A, ssmi_cu_view out, int kind,
                                const float * part, int nrows, const float * extra, int nextra, int R, int X,
                                cudaStream_t s);

} // namespace ssmi_mimo

#endif /* SSMI_CUDA_MIMO_BWD_CUH */
