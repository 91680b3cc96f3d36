/* mimo.cuh — what the files of the CUDA Mamba-3 MIMO family share: strided element access, the
 * work plan's chunks and sequences, the argument blocks of the chunked kernels and of the decode
 * step, the chunk tile's shared-memory layout, and the launch functions that each kernel file
 * gives the host side (mamba3_mimo.cu: plans, workspace, selection tables, entry points).
 *
 * Kernel files, each one translation unit:
 *   angle_prep.cu    θ and the chunk-local cumsum of adt by segments (forward)
 *   chunk_gemm.cu    the chunk tile; chunk states and output tiles by FFMA block GEMM
 *   state_pass.cu    the states entering each chunk, a sequence's chunks in order
 *   output_stage.cu  z gate / fused norm / mimo_o sum and the finals (forward), the
 *                    bwd_fwd partial sums
 *   step_kernel.cu   the decode step
 *   bwd_*.cu         the backward (mamba3_mimo_bwd) after the forward recompute: bwd.cuh
 */
#ifndef SSMI_CUDA_MIMO_CUH
#define SSMI_CUDA_MIMO_CUH

#include <stddef.h>

extern "C" {
#include "../../core/ssmi.h"
}
#include "../common/cuda_common.cuh"
#include "../common/device_math.cuh"
#include "../common/step_plan.cuh"

namespace ssmi_mimo {

const int kThreads = 256;          /* chunk kernels: 16×16 threads, 64×64 output tiles     */
const int kSmemLimit = 227 * 1024; /* opt-in shared memory per block (sm_90)               */
const int kSegTokens = 64;         /* θ prep: target segment length (tokens)               */
const int kSegU = 8;               /* θ prep: tokens loaded ahead of the dependent chain    */
const int kStepThreads = 128;      /* decode step: threads per (row, head)                 */
const int kInlineSlots = 64;       /* decode step: slot lists up to this batch go by value */

/* ---- strided element access -------------------------------------------------------------- */

__device__ __forceinline__ long long o1(const ssmi_cu_view & v, long long a) { return a * v.s[0]; }
__device__ __forceinline__ long long o2(const ssmi_cu_view & v, long long a, long long b) {
    return a * v.s[0] + b * v.s[1];
}
__device__ __forceinline__ long long o3(const ssmi_cu_view & v, long long a, long long b, long long c) {
    return a * v.s[0] + b * v.s[1] + c * v.s[2];
}
__device__ __forceinline__ long long o4(const ssmi_cu_view & v, long long a, long long b, long long c, long long d) {
    return a * v.s[0] + b * v.s[1] + c * v.s[2] + d * v.s[3];
}
__device__ __forceinline__ long long o5(const ssmi_cu_view & v, long long a, long long b, long long c, long long d,
                                        long long e) {
    return a * v.s[0] + b * v.s[1] + c * v.s[2] + d * v.s[3] + e * v.s[4];
}
__device__ __forceinline__ float ldv(const ssmi_cu_view & v, long long off) { return ssmi_cu_ld(v.p, v.dtype, off); }
__device__ __forceinline__ void  stv(const ssmi_cu_view & v, long long off, float x) {
    ssmi_cu_st(const_cast<void *>(v.p), v.dtype, off, x);
}

/* ---- the chunked operators' plan and arguments ------------------------------------------- */

/* One work chunk: tokens [t0, t0 + len) of batch row b, chunk index c of the caller's
 * chunked tensors (segsum, states; bwd_fwd), sequence seq ending at t_end (σ̄ is 0 at its
 * last token), last = 1 for the sequence's last chunk. */
struct mc_chunk {
    long long t0, t_end;
    int       b, c, len, seq, last, pad;
};
/* One sequence: work chunks [first, first + count), batch row, tokens [t0, t0 + len). */
struct mc_seq {
    long long t0, len;
    int       first, count, row, pad;
};

/* Everything the chunk kernels read. Absent tensors have p == NULL. */
struct mc_args {
    ssmi_cu_view q, k, v, z, dout, q_bias, k_bias, mimo_v, mimo_z, mimo_o, d, norm_w;
    ssmi_cu_view angles, da_cs, da_cs_rev, dt, trap, adt, segsum;
    ssmi_cu_view states, qk_dot, dz;
    ssmi_cu_view angle_state, ssm_state, k_state, v_state;
    ssmi_cu_view out, final_angle, final_ssm, final_k, final_v;
    const mc_chunk * chunks;
    const mc_seq *   seqs;
    float *          ws_state;  /* [W][H][N][P] ΔS_w, then Ŝ entering w              */
    float *          ws_y;      /* forward: [B·S][H][R][P] Y                        */
    float *          ws_theta;  /* forward: [B·S][H][A] θ                           */
    float *          ws_cm;     /* forward: [B][H][S] chunk-local cumsum of adt     */
    float *          ws_seg;    /* forward: [W][H][A] segment sums, then starts     */
    int *            nonfinite; /* forward: [W][H] marks of a non-finite Y, or NULL  */
    float *          part_o;    /* bwd_fwd: [W][H][R][P]                             */
    float *          part_z;
    int              B, S, H, G, R, N, P, A, C, W, nseq;
    int              fwd;       /* 1: forward (ws_theta / ws_cm), 0: bwd_fwd        */
    int              has_z, has_d, reduce, fused, has_states, nw_1d;
    int              pt, npt;   /* P tile of the output kernel, number of P tiles    */
    float            eps;
};

/* Shared-memory layout of a chunk kernel (floats; row strides odd: conflict-free columns). */
struct mc_layout {
    int ldn, ldp, ldm;                        /* N + 1, pt + 1, Lmax + 1                     */
    int q, k, u, m, y, gam, cf, ecs, wrev, qkd; /* offsets                                     */
    int total;                                /* floats                                      */
};

/* alias_y (the output kernel with Y in registers): Y is stored over Q once both Y GEMMs have
 * read it, so the Q region holds max(N, pt) + 1 columns and there is no separate Y buffer. */
__host__ __device__ inline mc_layout make_layout(int R, int N, int P, int C, int pt, bool output,
                                                 bool alias_y = false) {
    mc_layout l;
    const int L = C * R;
    l.ldn = N + 1;
    l.ldp = (output ? pt : P) + 1;
    l.ldm = L + 1;
    int off = 0;
    l.q = off, off += output ? L * (alias_y && l.ldp > l.ldn ? l.ldp : l.ldn) : 0;
    const int kbuf = L * l.ldn, sbuf = output ? N * l.ldp : 0;
    l.k = off, off += kbuf > sbuf ? kbuf : sbuf;
    l.u = off, off += L * l.ldp;
    l.m = off, off += output ? L * l.ldm : 0;
    if (alias_y) l.y = l.q;
    else l.y = off, off += output ? L * l.ldp : 0;
    l.gam = off, off += C;
    l.cf = off, off += C;
    l.ecs = off, off += C;
    l.wrev = off, off += C;
    l.qkd = off, off += output ? C * R * R : 0;
    l.total = off;
    return l;
}

/* Chunks per θ segment: whole chunks of about kSegTokens tokens (one chunk when C ≥ kSegTokens). */
__host__ __device__ inline int seg_chunks(int C) { return C >= kSegTokens ? 1 : kSegTokens / C; }

/* ---- the decode step's arguments ---------------------------------------------------------- */

struct st_args {
    ssmi_cu_view q, k, v, z, adt, dt, trap, angles, q_bias, k_bias, mimo_v, mimo_z, mimo_o, d, norm_w;
    ssmi_cu_view angle_state, ssm_state, k_state, v_state;
    ssmi_cu_view out, final_angle, final_ssm, final_k, final_v;
    const long long * slots; /* device, B entries; NULL: islot or slot = row */
    int               H, G, R, N, P, A, reduce, has_z, has_d, fused, nw_1d, vec;
    float             eps;
    int               n_islot;                /* > 0: B ≤ kInlineSlots slots passed by value */
    int               islot[kInlineSlots];
    /* The general form (several tokens per row, write slots, slot tables, intermediate_*): the
     * rows from plan (common/step_plan.cuh); keep: some row has more than one token, so the
     * block keeps the P×N state in shared memory between tokens. */
    int               general, keep;
    ssmi_cu_step_plan plan;
    ssmi_cu_view      inter_angle, inter_ssm, inter_k, inter_v;
};

/* Shared floats of the step: qt, kt, kp [R][N]; cg, cb, u, y [R][P]; hrow [warps][N];
 * theta [A]; rstd [R]. */
__host__ __device__ inline int step_smem_floats(int R, int N, int P, int A) {
    return 3 * R * N + 4 * R * P + (kStepThreads / 32) * N + A + R;
}

/* ---- host side ----------------------------------------------------------------------------- */

/* Kernels whose dynamic shared memory may exceed the default 48 KB (set_smem's cache index). */
enum {
    SM_CHUNK_STATE = 0,
    SM_OUTPUT_TWO_GEMM,
    SM_OUTPUT_FUSED,
    SM_FIX_TWO_GEMM,
    SM_FIX_FUSED,
    SM_STEP,
    SM_STEP_GENERAL,
    SM_KERNELS
};

/* Raises kernel fn's dynamic shared-memory limit to `bytes` when needed (mamba3_mimo.cu). */
ssm_status set_smem(ssm_context * ctx, const char * op, int id, const void * fn, size_t bytes);

/* The launches. Each checks the launch and returns DEVICE_ERROR with op in the message. */
/* angle_prep.cu: θ (ws_theta) and the chunk-local cumsum (ws_cm) of the forward. */
ssm_status launch_angle_prep(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s);
/* chunk_gemm.cu: ΔS_w of every work chunk (ws_state). */
ssm_status launch_chunk_state(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s);
/* chunk_gemm.cu: the output tiles, Y by two block GEMMs into a shared buffer / in registers; in
 * the forward with A.nonfinite (zeroed before), then the non-finite fix of the marked (chunk, head)
 * pairs (chunk_gemm.cu says how). */
ssm_status launch_output_two_gemm(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s);
ssm_status launch_output_fused(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s);
/* state_pass.cu: the states entering each chunk (and the final ssm state when need_final). */
ssm_status launch_state_pass(ssm_context * ctx, const char * op, const mc_args & A, int need_final, cudaStream_t s);
/* output_stage.cu: the bwd_fwd partial sums over nc chunks per batch row into dmo / dmz. */
ssm_status launch_partial_reduce(ssm_context * ctx, const char * op, const mc_args & A, int nc, ssmi_cu_view dmo,
                                 ssmi_cu_view dmz, cudaStream_t s);
/* output_stage.cu: out from Y (forward), then the finals of v, θ and empty sequences. */
ssm_status launch_output_stage(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s);
ssm_status launch_finals(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s);
/* step_kernel.cu: one block per (row, head), smem bytes of dynamic shared memory (with A.keep:
 * step_smem_floats and the P×N state); A.general: the general form over the plan's rows. */
ssm_status launch_step(ssm_context * ctx, const char * op, const st_args & A, long long batch, long long nheads,
                       size_t smem, cudaStream_t s);

} // namespace ssmi_mimo

#endif /* SSMI_CUDA_MIMO_CUH */
