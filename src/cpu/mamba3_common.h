/*
 * mamba3_common.h — what the Mamba-3 SISO CPU drivers (forward, combined, step, angle
 * cumsum, backward) share. All math is fp32 from inputs of any float dtype and strides.
 *
 *   ssmi_cpu_m3_kernels_for     kernel table for the context ISA: the Mamba-2 table (gemm,
 *                               exp, decay rows, silu gate, row load/store) + rotary kernels
 *                               (kernels/rotary) + the decode update (kernels/sisostep)
 *   ssmi_cpu_m3_token_scalars   λ, γ, σ (and adt, dt) of a run of tokens of one head
 *   ssmi_cpu_m3_prep_token      sin/cos of θ + bias + pre-rotation dot + rotation of q, k
 *   ssmi_cpu_m3_angle_run       the running wrapped angle of one (sequence, head)
 *   ssmi_cpu_m3_load_state_kv / store_state_kv   a (V, K) state slice ↔ K×V fp32 scratch
 *   ssmi_cpu_m3_fold_initial    H_in = S_in + dt_0(1−λ_0)·V_in K_inᵀ (spec §3.5)
 *   ssmi_cpu_m3_copy_row        a row of floats between two tensors (or zeros)
 *   ssmi_cpu_m3_gemm_lower_t    C += Eᵀ·B for a strictly lower E (the backwards' intra-chunk sums)
 *   ssmi_cpu_m3_head_blocks     the backwards' head blocks per q/k head (shape-only)
 *   ssmi_cpu_m3_reduce_tasks / reduce_span / sum_slots   the backwards' dq/dk reduction over the
 *                               head-block slots of their workspace
 *
 * Symbols: λ_t = sigmoid(trap_t), γ_t = dt_t·λ_t, γ'_t = dt_{t+1}(1 − λ_{t+1}) inside the
 * sequence and 0 at its last token, σ_t = γ_t + γ'_t (spec §3.1).
 */
#ifndef SSMI_CPU_MAMBA3_COMMON_H
#define SSMI_CPU_MAMBA3_COMMON_H

#include <math.h>
#include <string.h>

#include "../core/ssmi.h"
#include "cpu_common.h"
#include "kernels/rotary/rotary.h"
#include "kernels/sisostep/sisostep.h"

typedef struct ssmi_cpu_m3_kernels {
    const ssmi_cpu_kernels *   base; /* gemm, vexp, decay_rows, silu_gate, load_row, store_row */
    ssmi_f32_angle_rate_fn     angle_rate;
    ssmi_f32_angle_advance_fn  angle_advance;
    ssmi_f32_angle_step_fn     angle_step; /* rate + advance in one call, same bits */
    ssmi_f32_vtanh_fn          vtanh;
    ssmi_f32_sincos_pairs_fn   sincos_pairs;
    ssmi_f32_bias_rotate_qk_fn bias_rotate_qk;
    ssmi_f32_rotate_fn         rotate;
    ssmi_f32_siso_state_step_fn state_step; /* decode update of one (row, head) */
} ssmi_cpu_m3_kernels;

const ssmi_cpu_m3_kernels * ssmi_cpu_m3_kernels_for(const ssm_context * ctx);

static inline float ssmi_cpu_m3_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Per-token scalars of tokens [t0, t0+n) of (row, head h) of a sequence whose last token is
 * t_end − 1, from adt, dt, trap (B, H, S). Buffers (caller's, any may be NULL):
 *   adt_o[n], gamma_o[n], sigma_o[n];  dt_o[n+1], lam_o[n+1] whose entry n is the next
 *   token's dt and λ (both 0 when t0 + n == t_end, i.e. no next token in the sequence).
 * tmp must hold 2·(n+1) floats. */
void ssmi_cpu_m3_token_scalars(const ssmi_cpu_m3_kernels * k, const ssm_tensor * adt, const ssm_tensor * dt,
                               const ssm_tensor * trap, int64_t row, int64_t h, int64_t t0, int64_t n,
                               int64_t t_end, float * tmp, float * adt_o, float * dt_o, float * lam_o,
                               float * gamma_o, float * sigma_o);

/* One token of one head: cos2/sin2 (2A floats each) from theta[A], then q̂ = R(θ)(q + bq),
 * k̂ = R(θ)(k + bk) (K floats each); returns d = (q + bq)·(k + bk) (spec §3.3). */
static inline float ssmi_cpu_m3_prep_token(const ssmi_cpu_m3_kernels * k, int64_t K, int64_t A, const float * q,
                                           const float * kk, const float * bq, const float * bk,
                                           const float * theta, float * cos2, float * sin2, float * qh,
                                           float * kh) {
    k->sincos_pairs(A, theta, cos2, sin2);
    return k->bias_rotate_qk(K, 2 * A, q, kk, bq, bk, cos2, sin2, qh, kh);
}

/* The angle cumsum of tokens [t0, t0+n) of (row, head h) (spec §3.2): theta[A] holds the
 * running angle (initial state or the end of the previous run) and is advanced token by
 * token, rate = π·tanh(raw), θ = wrap(θ + rate·dt); dt[n] are the tokens' dt. If out
 * (B, S, H, A) is present each token's θ is stored there. raw needs A floats of scratch.
 * The fused forward and the step perform exactly these steps (angle_rate, angle_advance),
 * so their θ equals this op's fp32 output bitwise. */
void ssmi_cpu_m3_angle_run(const ssmi_cpu_m3_kernels * k, const ssm_tensor * angles, int64_t row, int64_t h,
                           int64_t t0, int64_t n, int64_t A, const float * dt, float * theta, float * raw,
                           const ssm_tensor * out);

/* (NS, H, V, K) state slice [s, h] ↔ fp32 K×V scratch (V contiguous: s_kv[n·V + p] = S[p][n]),
 * the layout every SISO CPU GEMM uses. */
void ssmi_cpu_m3_load_state_kv(const ssmi_cpu_m3_kernels * k, const ssm_tensor * state, int64_t s, int64_t h,
                               int64_t K, int64_t V, float * s_kv);
void ssmi_cpu_m3_store_state_kv(const ssmi_cpu_m3_kernels * k, const ssm_tensor * state, int64_t s, int64_t h,
                                int64_t K, int64_t V, const float * s_kv);

/* s_kv += c0·k_in ⊗ v_in (s_kv[n·V + p] += c0·k_in[n]·v_in[p]): the t = 0 fold of the
 * pending β-term, c0 = dt_0·(1 − λ_0) of the current call (spec §3.5, trap 4). */
void ssmi_cpu_m3_fold_initial(int64_t K, int64_t V, float c0, const float * k_in, const float * v_in, float * s_kv);

/* Row [i0, i1, :] (n floats, last-dim stride) of a rank-3 tensor to fp32; zeros if absent. */
void ssmi_cpu_m3_load_row3(const ssmi_cpu_m3_kernels * k, const ssm_tensor * t, int64_t i0, int64_t i1, int64_t n,
                           float * dst);
/* Stores n floats into row [i0, i1, :] of a rank-3 tensor (nothing if absent). */
void ssmi_cpu_m3_store_row3(const ssmi_cpu_m3_kernels * k, const ssm_tensor * t, int64_t i0, int64_t i1,
                            int64_t n, const float * src);

/* C[j][:] += Σ_{i>j} E[i][j]·B[i][:] for an L×L E that is zero on and above its diagonal:
 * on the reversed view (i' = L−1−i) Eᵀ is strictly lower, so the causal kernel skips the
 * zero half. */
static inline void ssmi_cpu_m3_gemm_lower_t(const ssmi_cpu_kernels * k, int64_t L, int64_t n, const float * e,
                                            int64_t lde, const float * b, int64_t ldb, float * c, int64_t ldc) {
    if (L <= 1) return;
    k->gemm(L, n, L, e + (L - 1) * lde + (L - 1), -1, -lde, b + (L - 1) * ldb, -ldb, c + (L - 1) * ldc, -ldc, NULL,
            1.0f, 1);
}

/* The backwards' head blocking: the smallest block count nb, a divisor of the G heads that share q/k, giving at
 * least min_tasks tasks (units · nb), else G. It depends on the shape only, so every sum over the blocks keeps its
 * order whatever the thread count. */
static inline int64_t ssmi_cpu_m3_head_blocks(int64_t G, int64_t units, int64_t min_tasks) {
    for (int64_t nb = 1; nb < G; ++nb)
        if (G % nb == 0 && units * nb >= min_tasks) return nb;
    return G;
}

/* The backwards' dq/dk reduction (the sum over the head-block slots of their workspace) runs one task per (batch
 * row, block of SSMI_CPU_M3_REDUCE_BLOCK tokens). */
#define SSMI_CPU_M3_REDUCE_BLOCK 64

/* The reduction's task count for B rows of S tokens. */
static inline int64_t ssmi_cpu_m3_reduce_tasks(int64_t B, int64_t S) {
    return B * ((S + SSMI_CPU_M3_REDUCE_BLOCK - 1) / SSMI_CPU_M3_REDUCE_BLOCK);
}

/* Tokens [*t0, *t1) of reduction task `task` (rows of S tokens); returns its batch row. */
static inline int64_t ssmi_cpu_m3_reduce_span(int64_t task, int64_t S, int64_t * t0, int64_t * t1) {
    const int64_t blocks = (S + SSMI_CPU_M3_REDUCE_BLOCK - 1) / SSMI_CPU_M3_REDUCE_BLOCK;
    *t0 = (task % blocks) * SSMI_CPU_M3_REDUCE_BLOCK;
    *t1 = *t0 + SSMI_CPU_M3_REDUCE_BLOCK < S ? *t0 + SSMI_CPU_M3_REDUCE_BLOCK : S;
    return task / blocks;
}

/* acc[i] = Σ_{j<nb} src[j·slot + i] for i < n, summed in slot order: one row of dq or dk from the nb head-block
 * slots (slot floats apart) of the workspace. */
static inline void ssmi_cpu_m3_sum_slots(float * acc, const float * src, int64_t nb, int64_t slot, int64_t n) {
    memcpy(acc, src, (size_t) n * sizeof(float));
    for (int64_t j = 1; j < nb; ++j)
        for (int64_t i = 0; i < n; ++i) acc[i] += src[j * slot + i];
}

#endif
