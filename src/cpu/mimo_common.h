/*
 * mimo_common.h — what the Mamba-3 MIMO CPU drivers (bwd_fwd, forward, step, backward)
 * share. All math is fp32 from inputs of any float dtype and strides (spec mamba3_mimo.md).
 *
 * Row convention of every chunk tile: fused row x = i·R + r (token i of the chunk, rank r),
 * time-major and rank-minor as spec §0; a tile of n tokens has n·R rows. Only the valid
 * tokens of a chunk are ever placed in a tile (tails and varlen ends just give a smaller
 * n), so padded rows never exist and need no masking.
 *
 *   ssmi_mimo_kernels_for     the SISO kernel table (gemm, exp, row load/store, angle rate,
 *                             sin/cos) — MIMO needs no other vector kernel
 *   ssmi_mimo_token_scalars   γ_t, c_t = γ_t + σ̄_t (σ̄ from the NEXT token, 0 at the sequence
 *                             end), dt, λ of a run of tokens (spec §2.1)
 *   ssmi_mimo_head_load       the per-head parameters q_bias, k_bias, mimo_v/z/o, norm
 *                             weight, D as fp32 (ssmi_mimo_head)
 *   ssmi_mimo_sincos          cos θ_a, sin θ_a (A each) of one token
 *   ssmi_mimo_rotate          split-halves rotation (a, a+N/2), a < A, of one N-row, and its
 *                             transpose (the inverse) for the backward
 *   ssmi_mimo_dot             fixed-order fp32 dot product (8 lane partials)
 *   ssmi_mimo_prep_token      bias + unrotated R×R qkdot + rotation (+ c scaling) of one
 *                             token's R q rows and R k rows
 *   ssmi_mimo_load_u          u[r] = v ⊙ mimo_v[r] for one token (R×P)
 *   ssmi_mimo_chunk_y         Y (L×P) of one chunk: inter + strict intra + diagonal + skip
 *   ssmi_mimo_state_update    Ŝ ← e^{da_cs[last]}·Ŝ + (diag(e^{da_cs_rev})·K̂)ᵀ·U
 *   ssmi_mimo_output_token    gate / fused RMS norm / mimo_o reduction of one token
 *   ssmi_mimo_rho,            ρ of spec §5.1: round to the activation dtype (bf16 / f16,
 *   ssmi_mimo_round_act       nearest even) and back, one value or a row in place — the
 *                             rounding points of bwd_fwd's upstream-bf16 mode
 */
#ifndef SSMI_CPU_MIMO_COMMON_H
#define SSMI_CPU_MIMO_COMMON_H

#include <math.h>
#include <string.h>

#include "../core/ssmi.h"
#include "mamba3_common.h"

typedef ssmi_cpu_m3_kernels ssmi_mimo_kernels;

static inline const ssmi_mimo_kernels * ssmi_mimo_kernels_for(const ssm_context * ctx) {
    return ssmi_cpu_m3_kernels_for(ctx);
}

/* Tokens [t0, t0+n) of (row, head h) of a sequence whose last token is t_end − 1, from dt
 * and pre-sigmoid trap (B, H, S). Outputs (any may be NULL): gamma[n] = dt·λ,
 * cf[n] = γ + σ̄ (the key scale c), dtv[n+1], lam[n+1] (entry n = the next token's dt and
 * λ, both 0 at the sequence end). tmp: 2·(n+1) floats. Exactly ssmi_cpu_m3_token_scalars
 * (its "σ" is MIMO's c). */
static inline void ssmi_mimo_token_scalars(const ssmi_mimo_kernels * k, const ssm_tensor * dt, const ssm_tensor * trap,
                                           int64_t row, int64_t h, int64_t t0, int64_t n, int64_t t_end, float * tmp,
                                           float * dtv, float * lam, float * gamma, float * cf) {
    ssmi_cpu_m3_token_scalars(k, NULL, dt, trap, row, h, t0, n, t_end, tmp, NULL, dtv, lam, gamma, cf);
}

/* Per-head parameters as fp32 (carved by the caller, see ssmi_mimo_head_floats). */
typedef struct ssmi_mimo_head {
    float * qb;  /* [R][N] q_bias[h]                                   */
    float * kb;  /* [R][N] k_bias[h]                                   */
    float * mv;  /* [R][P] mimo_v[h]                                   */
    float * mz;  /* [R][P] mimo_z[h] (only read when z is given)       */
    float * mo;  /* [R][P] mimo_o[h] (only read when reduce_o)         */
    float * nw;  /* [P] fused-norm weight w[h] (ones when absent)      */
    float   d;   /* D_h, 0 without d                                   */
} ssmi_mimo_head;

/* Floats one ssmi_mimo_head needs; ssmi_mimo_head_carve points the fields into base. */
int64_t ssmi_mimo_head_floats(int64_t R, int64_t N, int64_t P);
void    ssmi_mimo_head_carve(ssmi_mimo_head * hd, float * base, int64_t R, int64_t N, int64_t P);
/* Loads head h's parameters; any tensor may be absent (its rows are left untouched, except
 * nw = 1 and d = 0). The weight may be (H, P) or (H·P) (1-D). */
void ssmi_mimo_head_load(const ssmi_mimo_kernels * k, ssmi_mimo_head * hd, int64_t h, int64_t R, int64_t N,
                         int64_t P, const ssm_tensor * q_bias, const ssm_tensor * k_bias, const ssm_tensor * mimo_v,
                         const ssm_tensor * mimo_z, const ssm_tensor * mimo_o, const ssm_tensor * norm_w,
                         const ssm_tensor * d);

/* cosv[a] = cos θ_a, sinv[a] = sin θ_a for a < A, through the rotary sin/cos kernel (pairs
 * table scratch: 4A + 16 floats). */
void ssmi_mimo_sincos(const ssmi_mimo_kernels * k, int64_t A, const float * theta, float * cosv, float * sinv,
                      float * pairs);

/* Split-halves rotation of one N-row in place (spec §2.1): for a < A,
 *   x[a] ← c·x[a] − s·x[a+N/2],  x[a+N/2] ← s·x[a] + c·x[a+N/2];  other columns unchanged.
 * ssmi_mimo_rotate_t applies the transpose (rotation by −θ), the chain rule of the backward. */
static inline void ssmi_mimo_rotate(int64_t N, int64_t A, const float * cosv, const float * sinv, float * x) {
    float * hi = x + N / 2;
    for (int64_t a = 0; a < A; ++a) {
        const float x0 = x[a], x1 = hi[a];
        x[a]           = cosv[a] * x0 - sinv[a] * x1;
        hi[a]          = sinv[a] * x0 + cosv[a] * x1;
    }
}
static inline void ssmi_mimo_rotate_t(int64_t N, int64_t A, const float * cosv, const float * sinv, float * x) {
    float * hi = x + N / 2;
    for (int64_t a = 0; a < A; ++a) {
        const float x0 = x[a], x1 = hi[a];
        x[a]           = cosv[a] * x0 + sinv[a] * x1;
        hi[a]          = cosv[a] * x1 - sinv[a] * x0;
    }
}

/* Σ_i a[i]·b[i] in a fixed order: 8 lane partials over i (lane i % 8), then the lanes
 * summed pairwise — the same bits for every call with the same inputs. */
float ssmi_mimo_dot(int64_t n, const float * a, const float * b);

/* One token (spec §2.1): from raw q, k rows qr, kr ([R][N], rows N apart) and the head's
 * biases: qkd[r·R + r'] = q̄_r·k̄_r' (unrotated, biased), qt[r] = Rot(θ) q̄_r,
 * kh[r] = c·Rot(θ) k̄_r, and k̃ = Rot(θ) k̄_r into kt when kt != NULL. Output rows are
 * `ld` floats apart (qt, kh, kt); qkd may be NULL. */
void ssmi_mimo_prep_token(int64_t R, int64_t N, int64_t A, const float * qr, const float * kr, const ssmi_mimo_head * hd,
                          const float * cosv, const float * sinv, float c, float * qt, float * kh, float * kt,
                          int64_t ld, float * qkd);

/* u[r][:] = v ⊙ mimo_v[r] (R rows, P floats, rows `ld` apart). */
static inline void ssmi_mimo_make_u(int64_t R, int64_t P, const float * v, const float * mv, float * u, int64_t ld) {
    for (int64_t r = 0; r < R; ++r)
        for (int64_t p = 0; p < P; ++p) u[r * ld + p] = v[p] * mv[r * P + p];
}

/* The chunk tile of one (sequence, head): n ≤ C tokens, L = n·R fused rows. Everything
 * fp32 in the caller's scratch (see ssmi_mimo_tile_floats / _carve for the sizes). */
typedef struct ssmi_mimo_tile {
    int64_t R, N, P, C, ld; /* ld = C·R: row length of the L×L matrices and of khT        */
    float * qt;             /* [C·R][N]  q̃ (rotated, biased)                              */
    float * kh;             /* [C·R][N]  k̂ = c·k̃                                         */
    float * khT;            /* [N][ld]   k̂ transposed (B operand of the score GEMM)       */
    float * u;              /* [C·R][P]  u = v ⊙ mimo_v                                    */
    float * w;              /* [C·R][P]  diag(e^{da_cs_rev})·U (state-update operand)      */
    float * y;              /* [C·R][P]  pre-gate output                                   */
    float * m;              /* [C·R][ld] masked, decayed scores + diagonal block + D       */
    float * qkd;            /* [C][R][R] unrotated q̄·k̄                                    */
    float * ecs;            /* [C·R]     e^{da_cs} per row (row scale of the inter GEMM)   */
    float * gamma;          /* [C]       γ                                                  */
    float * wrev;           /* [C]       e^{da_cs_rev}                                       */
    float * e;              /* [C][C]    e^{segsum[i][j]} for j < i (lower part only)       */
} ssmi_mimo_tile;

int64_t ssmi_mimo_tile_floats(int64_t R, int64_t N, int64_t P, int64_t C);
void    ssmi_mimo_tile_carve(ssmi_mimo_tile * tl, float * base, int64_t R, int64_t N, int64_t P, int64_t C);

/* Y = diag(ecs)·Q̃·Ŝ + (strict-in-time (e ⊙ Q̃K̂ᵀ) + blockdiag(γ_i·qkd[i] + d·I))·U for the n
 * tokens of the tile (spec §2.4). Inputs: tl->qt, kh, u, qkd, ecs (per row), gamma, e.
 * s_np is Ŝ (N×P, P contiguous). Writes tl->khT, tl->m and tl->y. The lower-triangular
 * work is done in blocks of tokens (each block's rows only see the columns of earlier
 * tokens and its own diagonal block). */
void ssmi_mimo_chunk_y(const ssmi_mimo_kernels * k, ssmi_mimo_tile * tl, int64_t n, const float * s_np, float d);

/* Ŝ ← ecl·Ŝ + Σ_rows (wrev[i]·k̂[x]) ⊗ u[x] for the n tokens of the tile (writes tl->w). */
void ssmi_mimo_state_update(const ssmi_mimo_kernels * k, ssmi_mimo_tile * tl, int64_t n, float ecl, float * s_np);

/* Output stage of one token (spec §2.2), y = R rows of P (rows P apart):
 *   z given:  zz = z ⊙ mimo_z[r];  fused: y' = y·rstd(y)·w ⊙ silu(zz), else y' = y ⊙ silu(zz)
 *   no z:     y' = y
 *   reduce:   out[:] = Σ_r y'[r] ⊙ mimo_o[r] (r in order) (P floats), else out = y' (R×P).
 * work: 3·R·P floats. z may be NULL; fused needs z (checked by ops/). */
void ssmi_mimo_output_token(const ssmi_mimo_kernels * k, int64_t R, int64_t P, const float * y, const float * z,
                            const ssmi_mimo_head * hd, int reduce, int fused, float eps, float * work, float * out);

/* (NS, H, P, N) state slice [s, h] ↔ Ŝ as N×P fp32 (P contiguous). */
void ssmi_mimo_load_state_np(const ssmi_mimo_kernels * k, const ssm_tensor * st, int64_t s, int64_t h, int64_t N,
                             int64_t P, float * s_np);
void ssmi_mimo_store_state_np(const ssmi_mimo_kernels * k, const ssm_tensor * st, int64_t s, int64_t h, int64_t N,
                              int64_t P, const float * s_np);

/* ---- ρ (spec §0, §5.1): round to the activation dtype and back ------------------------- */

/* bf16 round-to-nearest-even on fp32 bits (a NaN stays a quiet NaN, as ssmi_f32_to_bf16),
 * branch-free so that row loops vectorise. */
static inline float ssmi_mimo_round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t rne = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const uint32_t nan = (u | 0x00400000u) & 0xffff0000u;
    u                  = (u & 0x7fffffffu) > 0x7f800000u ? nan : rne;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ρ(x) for act ∈ {BF16, F16}; the identity for F32 and F64 (nothing to round to). */
static inline float ssmi_mimo_rho(int32_t act, float x) {
    if (act == SSM_DTYPE_BF16) return ssmi_mimo_round_bf16(x);
    if (act == SSM_DTYPE_F16) return ssmi_f16_to_f32(ssmi_f32_to_f16(x));
    return x;
}

/* x[i] ← ρ(x[i]) for i < n. */
void ssmi_mimo_round_act(int32_t act, float * x, int64_t n);

#endif
