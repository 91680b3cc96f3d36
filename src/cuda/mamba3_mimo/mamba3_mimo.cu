/*
 * mamba3_mimo.cu — CUDA Mamba-3 MIMO: backward phase 1 (mamba3_mimo_bwd_fwd, spec §3.4), the
 * forward (mamba3_mimo, spec §2.2-§2.5, §3.3, §3.7: initial/final states, varlen, fused norm)
 * and the decode step (mamba3_mimo_step, spec §3.9).
 *
 * The chunked operators run chunk-parallel; only the state pass walks a sequence's chunks
 * in order. The host cuts the work into "work chunks" w (the C-token chunks of every batch
 * row, or of every varlen sequence, whose chunks restart at the sequence start):
 *   0. (forward) prep_kernel         per (sequence, head): θ = wrap(θ + π·tanh(raw)·dt) token
 *      by token from angle_state (as the CPU), and the chunk-local inclusive cumsum cm of adt
 *      (da_cs = cm, da_cs_rev = cm_last − cm, segsum = cm_i − cm_j, formed where used).
 *   1. chunk_state_kernel  per (w, h): the chunk tile (k̂ = c·Rot(θ)(k + k_bias), u = v ⊙ mimo_v),
 *      the chunk's own state contribution ΔS_w = (diag(e^{da_cs_rev})·K̂)ᵀ·U (N×P fp32) into the
 *      workspace, and qk_dot (bwd_fwd).
 *   2. state_pass_kernel   per (sequence, h, state element): Ŝ_0 = 0 or the folded initial
 *      state (spec §2.3); for each chunk in order: states[c] = Ŝ (bwd_fwd), ws[w] = Ŝ (the state
 *      ENTERING the chunk), Ŝ ← e^{da_cs[last]}·Ŝ + ΔS_w; the final ssm state (forward, P×N).
 *   3. output_kernel       per (w, h, P tile): the tile again (q̃ too), M = Q̃K̂ᵀ masked strictly
 *      in time and decayed by e^{segsum}, the same-token block γ_i·qkd + D·I, then
 *      Y = diag(e^{da_cs})·Q̃·Ŝ_w + M·U (spec §2.4); then
 *        bwd_fwd: dz per token, dmimo_o / dmimo_z partial sums per chunk (workspace);
 *        forward: Y (fp32) into a workspace, the last token's k̃ as final_k_state.
 *   4. bwd_fwd: partial_reduce_kernel sums the per-chunk partials in chunk order;
 *      forward: out_kernel (per token and head: z gate or fused RMS norm, mimo_o sum) and
 *      finals_kernel (final v and angle; every final of an empty sequence).
 * SSMOPS_CUDA_MIMO_KERNEL=v1 keeps the first versions; v2 (default) replaces step 0 by a
 * segmented θ prep (seg_*_kernel), step 3 by output_kernel<true> when the tile is one 64×64
 * GEMM tile (Y in registers, stored over Q: 3 blocks per SM), and passes short slot lists of
 * the decode step by value.
 * Every output element is written by exactly one thread with a fixed summation order, and
 * no atomics are used: the results are bitwise identical across runs.
 *
 * Arithmetic: fp32 everywhere, for every input dtype (loads convert through strides), with
 * plain FFMA: block GEMMs in shared memory (256 threads, 4×4 register tiles). No tensor cores
 * yet: fp16/bf16 operands of the chunk GEMMs are fp32 values (biased, rotated, scaled), so
 * bf16 mma would round them (the upstream model) and fp32 keeps the exact-mode bars.
 * ref_mode SSM_REF_UPSTREAM_BF16 is UNSUPPORTED on CUDA (the CPU and the reference have it).
 * Limits: those of the validation (N, P ≤ 128, C·R ≤ 128), H·(P tiles) ≤ 65535 blocks.
 *
 * The decode step: one block per (row, head); the old state of the slot (k, v, angle) is read
 * into shared memory before anything is written (in-place pools are safe); the ssm state is
 * streamed once (read, update, write) with 16-byte accesses when the pool is contiguous fp32
 * and aligned, through strides otherwise; y_r = h·q̃_r by fixed-order warp reductions.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <mutex>

extern "C" {
#include "../../core/ssmi.h"
}
#include "../common/cuda_common.cuh"
#include "../ssmi_cuda.h"

namespace {

const int   kThreads = 256; /* chunk kernels: 16×16 threads, 64×64 output tiles */
const float kPi = 3.14159265358979323846f;
const float kTwoPiHi = 6.28318548202514648438f;
const float kTwoPiLo = -1.74845553146951715e-07f;
const float kInvTwoPi = 0.159154943091895335769f;
const int   kSmemLimit = 227 * 1024;

/* x − 2π·floor(x/2π) with the CPU's two-constant reduction (cpu/kernels/rotary). */
__device__ __forceinline__ float wrap_angle(float x) {
    const float turns = floorf(x * kInvTwoPi);
    float       r = fmaf(-turns, kTwoPiHi, x);
    r = fmaf(-turns, kTwoPiLo, r);
    return r < 0.0f ? r + kTwoPiHi : r;
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

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
    float *          ws_seg;    /* forward v2: [W][H][A] segment sums, then starts  */
    float *          part_o;    /* bwd_fwd: [W][H][R][P]                             */
    float *          part_z;
    int              B, S, H, G, R, N, P, A, C, W, nseq;
    int              fwd;       /* 1: forward (ws_theta / ws_cm), 0: bwd_fwd        */
    int              has_z, has_d, reduce, fused, has_states, nw_1d;
    int              pt, npt;   /* P tile of the output kernel, number of P tiles    */
    float            eps;
};

/* ---- block GEMM in shared memory (fp32 FFMA) -------------------------------------------- *
 * C[i·ldc + j] = (acc ? C : 0) + rs(i) · Σ_k A[i·ai + k·ak]·B[k·bk + j·bj] for i < M, j < Nn,
 * with rs(i) = rs[i / rdiv] when rs != NULL. k runs in order (fixed rounding). 256 threads:
 * 64×64 output tiles, each thread a 4×4 register tile (rows ty + 16u, columns tx + 16v).
 * Out-of-range rows/columns read a clamped (valid) element and are not stored. */
__device__ void bgemm(int M, int Nn, int K, const float * A, int ai, int ak, const float * B, int bk, int bj,
                      float * C, int ldc, const float * rs, int rdiv, bool acc) {
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    for (int i0 = 0; i0 < M; i0 += 64)
        for (int j0 = 0; j0 < Nn; j0 += 64) {
            int ri[4], cj[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                ri[u] = min(i0 + ty + 16 * u, M - 1);
                cj[u] = min(j0 + tx + 16 * u, Nn - 1);
            }
            float c[4][4];
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int v = 0; v < 4; ++v) c[u][v] = 0.0f;
            for (int k = 0; k < K; ++k) {
                float a[4], b[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) a[u] = A[ri[u] * ai + k * ak];
#pragma unroll
                for (int v = 0; v < 4; ++v) b[v] = B[k * bk + cj[v] * bj];
#pragma unroll
                for (int u = 0; u < 4; ++u)
#pragma unroll
                    for (int v = 0; v < 4; ++v) c[u][v] = fmaf(a[u], b[v], c[u][v]);
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int i = i0 + ty + 16 * u;
                if (i >= M) continue;
                const float s = rs != NULL ? rs[i / rdiv] : 1.0f;
#pragma unroll
                for (int v = 0; v < 4; ++v) {
                    const int j = j0 + tx + 16 * v;
                    if (j >= Nn) continue;
                    float * cp = C + i * ldc + j;
                    *cp = acc ? *cp + s * c[u][v] : s * c[u][v];
                }
            }
        }
}

/* v2: Y = diag(rs)·Q·S + M·U for one 64×64 output tile (L ≤ 64 rows, pu ≤ 64 columns), both
 * GEMMs in the same registers, with bgemm's operation order (Q·S from 0, scaled, then M·U from
 * 0 and added: the same bits as the two bgemm calls of v1). Y may alias Q: it is stored after
 * a barrier that follows the last read of Q. Every thread of the block must call it. */
__device__ void fused_y(int L, int pu, int N, const float * Q, int ldq, const float * S, int lds, const float * rs,
                        int rdiv, const float * M, int ldm, const float * U, int ldu, float * Y, int ldy) {
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    int       ri[4], cj[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        ri[u] = min(ty + 16 * u, L - 1);
        cj[u] = min(tx + 16 * u, pu - 1);
    }
    float c[4][4], y[4][4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int v = 0; v < 4; ++v) c[u][v] = 0.0f;
    for (int k = 0; k < N; ++k) {
        float a[4], b[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) a[u] = Q[ri[u] * ldq + k];
#pragma unroll
        for (int v = 0; v < 4; ++v) b[v] = S[k * lds + cj[v]];
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int v = 0; v < 4; ++v) c[u][v] = fmaf(a[u], b[v], c[u][v]);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const float sc = rs[ri[u] / rdiv];
#pragma unroll
        for (int v = 0; v < 4; ++v) y[u][v] = sc * c[u][v], c[u][v] = 0.0f;
    }
    for (int k = 0; k < L; ++k) {
        float a[4], b[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) a[u] = M[ri[u] * ldm + k];
#pragma unroll
        for (int v = 0; v < 4; ++v) b[v] = U[k * ldu + cj[v]];
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int v = 0; v < 4; ++v) c[u][v] = fmaf(a[u], b[v], c[u][v]);
    }
    __syncthreads(); /* every read of Q (and of Y's other aliases) is done */
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const int i = ty + 16 * u;
        if (i >= L) continue;
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            const int j = tx + 16 * v;
            if (j < pu) Y[i * ldy + j] = y[u][v] + c[u][v];
        }
    }
}

/* ---- the chunk tile ----------------------------------------------------------------------- */

/* Shared-memory layout of a chunk kernel (floats; row strides odd: conflict-free columns). */
struct mc_layout {
    int ldn, ldp, ldm;                        /* N + 1, pt + 1, Lmax + 1                     */
    int q, k, u, m, y, gam, cf, ecs, wrev, qkd; /* offsets                                     */
    int total;                                /* floats                                      */
};

/* alias_y (v2 fused output kernel): Y is stored over Q once both Y GEMMs have read it, so
 * the Q region holds max(N, pt) + 1 columns and there is no separate Y buffer. */
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

/* Per-token scalars and decays of the chunk (threads over tokens): γ = dt·λ, c = γ + σ̄ with
 * σ̄ = dt_{t+1}·(1 − λ_{t+1}) (0 at the sequence's last token), e^{da_cs}, e^{da_cs_rev}. */
__device__ void tile_scalars(const mc_args & A, const mc_chunk & ck, int h, float * sm, const mc_layout & l) {
    for (int i = threadIdx.x; i < ck.len; i += blockDim.x) {
        const long long t = ck.t0 + i;
        const float     dtv = ldv(A.dt, o3(A.dt, ck.b, h, t));
        const float     lam = sigmoidf_(ldv(A.trap, o3(A.trap, ck.b, h, t)));
        const float     g = dtv * lam;
        float           sig = g;
        if (t + 1 < ck.t_end) {
            const float dn = ldv(A.dt, o3(A.dt, ck.b, h, t + 1));
            const float ln = sigmoidf_(ldv(A.trap, o3(A.trap, ck.b, h, t + 1)));
            sig = g + dn * (1.0f - ln);
        }
        sm[l.gam + i] = g;
        sm[l.cf + i] = sig;
        if (A.fwd) {
            const float * cm = A.ws_cm + ((long long)ck.b * A.H + h) * A.S;
            const float   cmi = cm[t], cml = cm[ck.t0 + ck.len - 1];
            sm[l.ecs + i] = expf(cmi);
            sm[l.wrev + i] = expf(cml - cmi);
        } else {
            sm[l.ecs + i] = expf(ldv(A.da_cs, o3(A.da_cs, ck.b, h, t)));
            sm[l.wrev + i] = expf(ldv(A.da_cs_rev, o3(A.da_cs_rev, ck.b, h, t)));
        }
    }
}

/* The tile rows of chunk ck, head h (L = len·R rows x = i·R + r):
 *   K[x] = c_i·Rot(θ_i)(k + k_bias), Q[x] = Rot(θ_i)(q + q_bias) (with_q), U[x] = (v ⊙ mimo_v)[p0, p0+pu),
 *   qkd[x·R + r'] = q̄[x]·k̄[i·R + r'] (with_q; written to qk_dot when asked), the scalars.
 * final_k: the unscaled k̃ of the sequence's last token goes to final_k_state (forward). */
__device__ void load_tile(const mc_args & A, const mc_chunk & ck, int h, float * sm, const mc_layout & l, bool with_q,
                          int p0, int pu, bool write_qkdot, bool write_final_k) {
    const int R = A.R, N = A.N, NA = A.A, n = ck.len, L = n * R;
    const int g = h / (A.H / A.G);
    float *   Q = sm + l.q, *K = sm + l.k, *U = sm + l.u, *qkd = sm + l.qkd;
    tile_scalars(A, ck, h, sm, l);
    for (int e = threadIdx.x; e < L * N; e += blockDim.x) {
        const int       x = e / N, nn = e - x * N, i = x / R, r = x - i * R;
        const long long t = ck.t0 + i;
        K[x * l.ldn + nn] = ldv(A.k, o5(A.k, ck.b, t, r, g, nn)) + ldv(A.k_bias, o3(A.k_bias, h, r, nn));
        if (with_q) Q[x * l.ldn + nn] = ldv(A.q, o5(A.q, ck.b, t, r, g, nn)) + ldv(A.q_bias, o3(A.q_bias, h, r, nn));
    }
    for (int e = threadIdx.x; e < L * pu; e += blockDim.x) {
        const int x = e / pu, pp = e - x * pu, i = x / R, r = x - i * R;
        U[x * l.ldp + pp] = ldv(A.v, o4(A.v, ck.b, ck.t0 + i, h, p0 + pp)) * ldv(A.mimo_v, o3(A.mimo_v, h, r, p0 + pp));
    }
    __syncthreads();
    if (with_q) {
        for (int e = threadIdx.x; e < L * R; e += blockDim.x) {
            const int     x = e / R, r2 = e - x * R, i = x / R;
            const float * qa = Q + x * l.ldn, *kb = K + (i * R + r2) * l.ldn;
            float         s = 0.0f;
            for (int nn = 0; nn < N; ++nn) s = fmaf(qa[nn], kb[nn], s);
            qkd[e] = s;
            if (write_qkdot) stv(A.qk_dot, o5(A.qk_dot, ck.b, h, ck.t0 + i, x - i * R, r2), s);
        }
        __syncthreads(); /* qkd reads the unrotated rows */
    }
    for (int e = threadIdx.x; e < L * NA; e += blockDim.x) {
        const int       x = e / NA, a = e - x * NA, i = x / R;
        const long long t = ck.t0 + i;
        const float     th = A.fwd ? A.ws_theta[(((long long)ck.b * A.S + t) * A.H + h) * NA + a]
                                   : ldv(A.angles, o4(A.angles, ck.b, t, h, a));
        float           sn, cs;
        sincosf(th, &sn, &cs);
        float *     kr = K + x * l.ldn;
        const float k0 = kr[a], k1 = kr[a + N / 2];
        kr[a] = cs * k0 - sn * k1;
        kr[a + N / 2] = sn * k0 + cs * k1;
        if (with_q) {
            float *     qr = Q + x * l.ldn;
            const float q0 = qr[a], q1 = qr[a + N / 2];
            qr[a] = cs * q0 - sn * q1;
            qr[a + N / 2] = sn * q0 + cs * q1;
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < L * N; e += blockDim.x) {
        const int x = e / N, nn = e - x * N, i = x / R;
        float *   kp = K + x * l.ldn + nn;
        if (write_final_k && ck.last && i == n - 1)
            stv(A.final_k, o4(A.final_k, ck.seq, x - i * R, h, nn), *kp);
        *kp *= sm[l.cf + i];
    }
    __syncthreads();
}

/* ---- 1. chunk states ----------------------------------------------------------------------- */
__global__ void __launch_bounds__(kThreads) chunk_state_kernel(const mc_args A) {
    extern __shared__ float sm[];
    const mc_chunk  ck = A.chunks[blockIdx.x];
    const int       h = blockIdx.y;
    const mc_layout l = make_layout(A.R, A.N, A.P, A.C, A.P, false);
    const int       L = ck.len * A.R;
    load_tile(A, ck, h, sm, l, false, 0, A.P, false, false);
    float * K = sm + l.k;
    for (int e = threadIdx.x; e < L * A.N; e += blockDim.x) {
        const int x = e / A.N;
        K[x * l.ldn + (e - x * A.N)] *= sm[l.wrev + x / A.R];
    }
    __syncthreads();
    float * dst = A.ws_state + ((long long)blockIdx.x * A.H + h) * A.N * A.P;
    /* ΔS[n][p] = Σ_x Kw[x][n]·U[x][p] */
    bgemm(A.N, A.P, L, K, 1, l.ldn, sm + l.u, l.ldp, 1, dst, A.P, NULL, 1, false);
}

/* ---- 2. state pass ------------------------------------------------------------------------- */
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
            const float c0 = dt0 * (1.0f - sigmoidf_(ldv(A.trap, o3(A.trap, sq.row, h, sq.t0))));
            const float vs = ldv(A.v_state, o3(A.v_state, s, h, pp));
            for (int r = 0; r < A.R; ++r) {
                const float u = vs * ldv(A.mimo_v, o3(A.mimo_v, h, r, pp));
                S += c0 * ldv(A.k_state, o4(A.k_state, s, r, h, nn)) * u;
            }
        }
    }
    const long long hs = (long long)A.N * A.P;
    const int       end = sq.first + sq.count;
    enum { U = 8 };
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

/* ---- 3. output tiles ------------------------------------------------------------------------ */

/* bwd_fwd epilogue of one chunk and P tile: gradients per (token, rank, p) from Y (CPU
 * chunk_grads, spec §3.4); dz per token; dmimo_o / dmimo_z sums over the chunk's tokens. */
__device__ void bwd_fwd_epilogue(const mc_args & A, const mc_chunk & ck, int w, int h, float * sm, const mc_layout & l,
                                 int p0, int pu) {
    const int R = A.R, n = ck.len;
    float *   Y = sm + l.y;
    if (!A.has_z && !A.reduce) return;
    for (int e = threadIdx.x; e < R * pu; e += blockDim.x) {
        const int   r = e / pu, pp = e - r * pu, p = p0 + pp;
        const float mz = A.has_z ? ldv(A.mimo_z, o3(A.mimo_z, h, r, p)) : 0.0f;
        const float mo = A.reduce ? ldv(A.mimo_o, o3(A.mimo_o, h, r, p)) : 0.0f;
        float       dmo = 0.0f, dmz = 0.0f;
        for (int i = 0; i < n; ++i) {
            const long long t = ck.t0 + i;
            float *         yp = Y + (i * R + r) * l.ldp + pp;
            const float     y = *yp;
            const float     z = A.has_z ? ldv(A.z, o4(A.z, ck.b, t, h, p)) : 0.0f;
            float           dzz = 0.0f;
            if (A.reduce) {
                const float dout = ldv(A.dout, o4(A.dout, ck.b, t, h, p));
                if (A.has_z) {
                    const float zz = z * mz, sg = 1.0f / (1.0f + expf(-zz));
                    const float yd = y * dout;
                    dmo += zz * sg * yd;
                    dzz = yd * mo * sg * (1.0f + zz * (1.0f - sg));
                } else {
                    dmo += y * dout;
                }
            } else {
                const float dout = ldv(A.dout, o5(A.dout, ck.b, t, r, h, p));
                const float zz = z * mz, sg = 1.0f / (1.0f + expf(-zz));
                dzz = dout * y * sg * (1.0f + zz * (1.0f - sg));
            }
            if (A.has_z) {
                dmz += dzz * z;
                *yp = dzz; /* Y becomes dzz (this thread owns the element) */
            }
        }
        const long long po = (((long long)w * A.H + h) * R + r) * A.P + p;
        if (A.reduce) A.part_o[po] = dmo;
        if (A.has_z) A.part_z[po] = dmz;
    }
    if (!A.has_z || A.dz.p == NULL) return;
    __syncthreads();
    for (int e = threadIdx.x; e < n * pu; e += blockDim.x) {
        const int i = e / pu, pp = e - i * pu, p = p0 + pp;
        float     s = 0.0f;
        for (int r = 0; r < R; ++r) s += Y[(i * R + r) * l.ldp + pp] * ldv(A.mimo_z, o3(A.mimo_z, h, r, p));
        stv(A.dz, o4(A.dz, ck.b, ck.t0 + i, h, p), s);
    }
}

/* kFused (v2, only when C·R ≤ 64 and the P tile ≤ 64): fused_y with Y over Q, so the block
 * needs 16.6 KB less shared memory (3 blocks per SM at N = P = 64, C·R = 64, instead of 2). */
template <bool kFused>
__global__ void __launch_bounds__(kThreads, kFused ? 3 : 1) output_kernel(const mc_args A) {
    extern __shared__ float sm[];
    const int       w = blockIdx.x, h = blockIdx.y / A.npt, ptile = blockIdx.y - h * A.npt;
    const mc_chunk  ck = A.chunks[w];
    const int       p0 = ptile * A.pt, pu = min(A.pt, A.P - p0);
    const mc_layout l = make_layout(A.R, A.N, A.P, A.C, A.pt, true, kFused);
    const int       R = A.R, N = A.N, n = ck.len, L = n * R;
    load_tile(A, ck, h, sm, l, true, p0, pu, !A.fwd && A.qk_dot.p != NULL && ptile == 0,
              A.fwd && A.final_k.p != NULL && ptile == 0);
    float *Q = sm + l.q, *K = sm + l.k, *M = sm + l.m, *Y = sm + l.y;
    /* M = Q̃·K̂ᵀ */
    bgemm(L, L, N, Q, l.ldn, 1, K, 1, l.ldn, M, l.ldm, NULL, 1, false);
    __syncthreads();
    /* strict-in-time decay mask, the same-token block γ·qkd + D·I; Ŝ_w's P tile into K */
    const float dsk = A.has_d ? ldv(A.d, o1(A.d, h)) : 0.0f;
    const float * cm = A.fwd ? A.ws_cm + ((long long)ck.b * A.H + h) * A.S + ck.t0 : NULL;
    for (int e = threadIdx.x; e < L * L; e += blockDim.x) {
        const int x = e / L, x2 = e - x * L, i = x / R, j = x2 / R;
        float *   mp = M + x * l.ldm + x2;
        if (j < i) {
            const float sg = A.fwd ? cm[i] - cm[j] : ldv(A.segsum, o5(A.segsum, ck.b, h, ck.c, i, j));
            *mp *= expf(sg);
        } else if (j == i) {
            const int r = x - i * R, r2 = x2 - j * R;
            *mp = sm[l.gam + i] * sm[l.qkd + x * R + r2] + (r == r2 ? dsk : 0.0f);
        } else {
            *mp = 0.0f;
        }
    }
    const float * src = A.ws_state + ((long long)w * A.H + h) * N * A.P;
    for (int e = threadIdx.x; e < N * pu; e += blockDim.x) {
        const int nn = e / pu, pp = e - nn * pu;
        K[nn * l.ldp + pp] = src[nn * A.P + p0 + pp];
    }
    __syncthreads();
    /* Y = diag(e^{da_cs})·Q̃·Ŝ + M·U */
    if (kFused) {
        fused_y(L, pu, N, Q, l.ldn, K, l.ldp, sm + l.ecs, R, M, l.ldm, sm + l.u, l.ldp, Y, l.ldp);
    } else {
        bgemm(L, pu, N, Q, l.ldn, 1, K, l.ldp, 1, Y, l.ldp, sm + l.ecs, R, false);
        __syncthreads();
        bgemm(L, pu, L, M, l.ldm, 1, sm + l.u, l.ldp, 1, Y, l.ldp, NULL, 1, true);
    }
    __syncthreads();
    if (A.fwd) {
        for (int e = threadIdx.x; e < L * pu; e += blockDim.x) {
            const int x = e / pu, pp = e - x * pu, i = x / R, r = x - i * R;
            A.ws_y[((((long long)ck.b * A.S + ck.t0 + i) * A.H + h) * R + r) * A.P + p0 + pp] = Y[x * l.ldp + pp];
        }
    } else {
        bwd_fwd_epilogue(A, ck, w, h, sm, l, p0, pu);
    }
}

/* ---- 4. bwd_fwd partial sums, forward output stage and finals ------------------------------ */

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

/* v1 forward prep: θ token by token and the chunk-local cumsum of adt, per (sequence, head);
 * thread a of A + 1 (a == A: the cumsum). One dependent global round trip per token. */
__global__ void prep_kernel(const mc_args A) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    const int per = A.A + 1;
    if (g >= A.nseq * A.H * per) return;
    const int    s = g / (A.H * per), rem = g - s * A.H * per, h = rem / per, a = rem - h * per;
    const mc_seq sq = A.seqs[s];
    if (a == A.A) {
        float * cm = A.ws_cm + ((long long)sq.row * A.H + h) * A.S;
        float   acc = 0.0f;
        for (long long i = 0; i < sq.len; ++i) {
            const long long t = sq.t0 + i;
            const float     x = ldv(A.adt, o3(A.adt, sq.row, h, t));
            acc = (i % A.C == 0) ? x : acc + x;
            cm[t] = acc;
        }
        return;
    }
    float th = A.has_states ? ldv(A.angle_state, o3(A.angle_state, s, h, a)) : 0.0f;
    for (long long i = 0; i < sq.len; ++i) {
        const long long t = sq.t0 + i;
        const float     rate = kPi * tanhf(ldv(A.angles, o4(A.angles, sq.row, t, h, a)));
        th = wrap_angle(th + rate * ldv(A.dt, o3(A.dt, sq.row, h, t)));
        A.ws_theta[(((long long)sq.row * A.S + t) * A.H + h) * A.A + a] = th;
    }
}

/* ---- v2 forward prep: θ by segments ------------------------------------------------------- *
 * A segment is cps whole chunks of one sequence (T = cps·C tokens; it starts at a chunk with
 * c % cps == 0, so the chunk-local cumsum never crosses one). Three passes:
 *   seg_sum_kernel    per (segment, head, angle): L = the wrapped sum of the segment's
 *                     increments from 0 (wrap after every token, as the token pass);
 *   seg_scan_kernel   per (sequence, head, angle): the segments in order, start_0 = angle_state
 *                     (or 0), start_{j+1} = wrap(start_j + L_j); start_j replaces L_j;
 *   seg_theta_kernel  per (segment, head, angle): θ = wrap(θ + inc) from start_j, token by
 *                     token; per (segment, head): the chunk-local cumsum of adt.
 * Every θ stays in [0, 2π) after each add, as in the token pass, so the rounding is of the
 * same size (the results differ from v1 in the last bits: the sums are associated per
 * segment). Loads come in batches of kSegU tokens ahead of the dependent chain. */
const int kSegTokens = 64; /* target segment length (tokens)   */
const int kSegU = 8;       /* tokens loaded ahead of the chain  */

__host__ __device__ inline int seg_chunks(int C) { return C >= kSegTokens ? 1 : kSegTokens / C; }

__device__ __forceinline__ float theta_inc(const mc_args & A, int row, long long t, int h, int a) {
    return kPi * tanhf(ldv(A.angles, o4(A.angles, row, t, h, a))) * ldv(A.dt, o3(A.dt, row, h, t));
}

/* inc[u] for tokens t0 + u < t1 (0 beyond) */
__device__ __forceinline__ void theta_batch(const mc_args & A, int row, long long t0, long long t1, int h, int a,
                                            float (&inc)[kSegU]) {
#pragma unroll
    for (int u = 0; u < kSegU; ++u) inc[u] = t0 + u < t1 ? theta_inc(A, row, t0 + u, h, a) : 0.0f;
}

__global__ void seg_sum_kernel(const mc_args A, int cps) {
    const mc_chunk ck = A.chunks[blockIdx.x];
    const int      e = blockIdx.y * blockDim.x + threadIdx.x;
    if (ck.c % cps != 0 || e >= A.H * A.A) return;
    const int       h = e / A.A, a = e - h * A.A;
    const long long t1 = min(ck.t0 + (long long)cps * A.C, ck.t_end);
    float           acc = 0.0f;
    for (long long t0 = ck.t0; t0 < t1; t0 += kSegU) {
        float inc[kSegU];
        theta_batch(A, ck.b, t0, t1, h, a, inc);
#pragma unroll
        for (int u = 0; u < kSegU; ++u)
            if (t0 + u < t1) acc = wrap_angle(acc + inc[u]);
    }
    A.ws_seg[((long long)blockIdx.x * A.H + h) * A.A + a] = acc;
}

__global__ void seg_scan_kernel(const mc_args A, int cps) {
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= (long long)A.nseq * A.H * A.A) return;
    const int    s = (int)(g / ((long long)A.H * A.A)), rem = (int)(g - (long long)s * A.H * A.A);
    const int    h = rem / A.A, a = rem - h * A.A;
    const mc_seq sq = A.seqs[s];
    const int    nseg = (sq.count + cps - 1) / cps;
    float        th = A.has_states ? ldv(A.angle_state, o3(A.angle_state, s, h, a)) : 0.0f;
    for (int j0 = 0; j0 < nseg; j0 += kSegU) {
        float L[kSegU];
#pragma unroll
        for (int u = 0; u < kSegU; ++u) {
            const long long w = sq.first + (long long)(j0 + u) * cps;
            L[u] = j0 + u < nseg ? A.ws_seg[(w * A.H + h) * A.A + a] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kSegU; ++u) {
            if (j0 + u >= nseg) break;
            const long long w = sq.first + (long long)(j0 + u) * cps;
            A.ws_seg[(w * A.H + h) * A.A + a] = th;
            th = wrap_angle(th + L[u]);
        }
    }
}

/* threads e < H·A: θ of (head, angle); H·A ≤ e < H·(A + 1): the cumsum of head e − H·A */
__global__ void seg_theta_kernel(const mc_args A, int cps) {
    const mc_chunk ck = A.chunks[blockIdx.x];
    const int      e = blockIdx.y * blockDim.x + threadIdx.x;
    if (ck.c % cps != 0 || e >= A.H * (A.A + 1)) return;
    const long long t1 = min(ck.t0 + (long long)cps * A.C, ck.t_end);
    if (e >= A.H * A.A) {
        const int h = e - A.H * A.A;
        float *   cm = A.ws_cm + ((long long)ck.b * A.H + h) * A.S;
        float     acc = 0.0f;
        for (long long t0 = ck.t0; t0 < t1; t0 += kSegU) {
            float x[kSegU];
#pragma unroll
            for (int u = 0; u < kSegU; ++u) x[u] = t0 + u < t1 ? ldv(A.adt, o3(A.adt, ck.b, h, t0 + u)) : 0.0f;
#pragma unroll
            for (int u = 0; u < kSegU; ++u) {
                const long long t = t0 + u;
                if (t >= t1) break;
                acc = ((t - ck.t0) % A.C == 0) ? x[u] : acc + x[u]; /* the segment starts a chunk */
                cm[t] = acc;
            }
        }
        return;
    }
    const int h = e / A.A, a = e - h * A.A;
    float     th = A.ws_seg[((long long)blockIdx.x * A.H + h) * A.A + a];
    for (long long t0 = ck.t0; t0 < t1; t0 += kSegU) {
        float inc[kSegU];
        theta_batch(A, ck.b, t0, t1, h, a, inc);
#pragma unroll
        for (int u = 0; u < kSegU; ++u) {
            const long long t = t0 + u;
            if (t >= t1) break;
            th = wrap_angle(th + inc[u]);
            A.ws_theta[(((long long)ck.b * A.S + t) * A.H + h) * A.A + a] = th;
        }
    }
}

/* Forward output stage: one warp per (row, token, head) (CPU ssmi_mimo_output_token). */
__global__ void out_kernel(const mc_args A) {
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
                const float sz = zz / (1.0f + expf(-zz));
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

/* ---- host side ------------------------------------------------------------------------------ */

ssmi_cu_view view_or_null(const ssm_tensor * t) {
    if (t == NULL || t->data == NULL) {
        ssmi_cu_view v;
        memset(&v, 0, sizeof v);
        return v;
    }
    return ssmi_cu_view_of(t);
}

/* The P tile of the output kernel: the largest of P, 64, 32, 16, 8 whose shared memory fits. */
int pick_ptile(int R, int N, int P, int C) {
    static const int cand[] = {64, 32, 16, 8};
    if ((size_t)make_layout(R, N, P, C, P, true).total * sizeof(float) <= (size_t)kSmemLimit) return P;
    for (int i = 0; i < 4; ++i)
        if (cand[i] < P && (size_t)make_layout(R, N, P, C, cand[i], true).total * sizeof(float) <= (size_t)kSmemLimit)
            return cand[i];
    return 0;
}

/* Device scratch allocations of one call, released together on the stream. */
struct mc_mem {
    void * p[8];
    int    n;
};

ssm_status mem_alloc(ssm_context * ctx, const char * op, mc_mem * m, void ** out, size_t bytes, cudaStream_t s) {
    *out = NULL;
    if (bytes == 0) return SSM_STATUS_OK;
    const ssm_status st = ssmi_cuda_status(ctx, op, "cudaMallocAsync (workspace)", cudaMallocAsync(out, bytes, s));
    if (st == SSM_STATUS_OK) m->p[m->n++] = *out;
    return st;
}

ssm_status mem_free(ssm_context * ctx, const char * op, mc_mem * m, cudaStream_t s, ssm_status st) {
    for (int i = 0; i < m->n; ++i) {
        const ssm_status fs = ssmi_cuda_status(ctx, op, "cudaFreeAsync (workspace)", cudaFreeAsync(m->p[i], s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    m->n = 0;
    return st;
}

/* Copies a host array to a new device allocation (pageable source: returns once staged). */
ssm_status mem_upload(ssm_context * ctx, const char * op, mc_mem * m, void ** out, const void * src, size_t bytes,
                      cudaStream_t s) {
    SSM_FORWARD_IF_ERROR(mem_alloc(ctx, op, m, out, bytes, s));
    if (bytes == 0) return SSM_STATUS_OK;
    return ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (plan)",
                            cudaMemcpyAsync(*out, src, bytes, cudaMemcpyHostToDevice, s));
}

/* The host plan: sequences and their work chunks. cu == NULL: one sequence per batch row. */
struct mc_plan {
    mc_chunk * chunks;
    mc_seq *   seqs;
    int        W, nseq;
};

ssm_status make_plan(ssm_context * ctx, const char * op, const ssmi_mimo_dims * d, const ssm_tensor * cu, mc_plan * pl) {
    const long long C = d->chunk, S = d->seqlen;
    const int       nseq = (int)d->nseq;
    pl->chunks = NULL;
    pl->seqs = NULL;
    pl->nseq = nseq;
    pl->W = 0;
    long long W = 0;
    pl->seqs = (mc_seq *)calloc((size_t)(nseq > 0 ? nseq : 1), sizeof(mc_seq));
    if (pl->seqs == NULL) return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no memory for the chunk plan", op);
    for (int s = 0; s < nseq; ++s) {
        mc_seq & q = pl->seqs[s];
        if (cu != NULL && cu->data != NULL) {
            const long long a = ssmi_get_i64(cu, ssmi_off1(cu, s)), b = ssmi_get_i64(cu, ssmi_off1(cu, s + 1));
            q.row = 0, q.t0 = a, q.len = b - a;
        } else {
            q.row = s, q.t0 = 0, q.len = S;
        }
        q.first = (int)W;
        q.count = (int)((q.len + C - 1) / C);
        W += q.count;
    }
    SSM_RETURN_IF(W > (1LL << 31) - 1, ctx, SSM_STATUS_UNSUPPORTED, "%s: %lld chunks exceed the CUDA grid", op, W);
    pl->W = (int)W;
    pl->chunks = (mc_chunk *)calloc((size_t)(W > 0 ? W : 1), sizeof(mc_chunk));
    if (pl->chunks == NULL) return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no memory for the chunk plan", op);
    for (int s = 0; s < nseq; ++s) {
        const mc_seq & q = pl->seqs[s];
        for (int c = 0; c < q.count; ++c) {
            mc_chunk & k = pl->chunks[q.first + c];
            k.b = q.row;
            k.seq = s;
            k.c = c;
            k.t0 = q.t0 + (long long)c * C;
            k.len = (int)((q.t0 + q.len - k.t0) < C ? (q.t0 + q.len - k.t0) : C);
            k.t_end = q.t0 + q.len;
            k.last = c == q.count - 1;
        }
    }
    return SSM_STATUS_OK;
}

void free_plan(mc_plan * pl) {
    free(pl->chunks);
    free(pl->seqs);
    pl->chunks = NULL;
    pl->seqs = NULL;
}

void fill_dims(mc_args * A, const ssmi_mimo_dims * d) {
    A->B = (int)d->batch, A->S = (int)d->seqlen, A->H = (int)d->nheads, A->G = (int)d->ngroups;
    A->R = (int)d->rank, A->N = (int)d->dstate, A->P = (int)d->headdim, A->A = (int)d->nangles;
    A->C = (int)d->chunk, A->reduce = d->reduce_o != 0;
}

/* SSMOPS_CUDA_MIMO_KERNEL=v1 selects the first kernels (token-by-token θ prep, two-pass Y,
 * slot list uploaded by the step); unset or any other value: v2. Read at every call (getenv
 * only reads; a program that changes its environment while other threads call us has the usual
 * setenv race, not ours). */
bool kernels_v1() {
    const char * e = getenv("SSMOPS_CUDA_MIMO_KERNEL");
    return e != NULL && strcmp(e, "v1") == 0;
}

/* The dynamic shared memory limit of a kernel, raised at most once per (kernel, device, size)
 * and never lowered: the attribute only grows (under a mutex), so a launch that saw a large
 * enough cached value is never undercut by a concurrent call. Sizes within the default 48 KB
 * need no attribute at all (the step at every supported shape up to R·(N + P) ≈ 2.8 K). */
enum { SM_CHUNK_STATE = 0, SM_OUTPUT_V1, SM_OUTPUT_V2, SM_STEP, SM_KERNELS };
const int        kSmemDevices = 64;
std::atomic<int> g_smem_set[SM_KERNELS][kSmemDevices];
std::mutex       g_smem_mutex;

ssm_status set_smem(ssm_context * ctx, const char * op, int id, const void * fn, size_t bytes) {
    if (bytes <= 48u * 1024u) return SSM_STATUS_OK;
    int dev = 0;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaGetDevice", cudaGetDevice(&dev)));
    const bool cached = dev >= 0 && dev < kSmemDevices;
    if (cached && (size_t)g_smem_set[id][dev].load(std::memory_order_acquire) >= bytes) return SSM_STATUS_OK;
    std::lock_guard<std::mutex> lock(g_smem_mutex);
    if (cached && (size_t)g_smem_set[id][dev].load(std::memory_order_relaxed) >= bytes) return SSM_STATUS_OK;
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute (shared memory)",
                         cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)));
    if (cached) g_smem_set[id][dev].store((int)bytes, std::memory_order_release);
    return SSM_STATUS_OK;
}

/* Kernels 1-3 of the chunked operators on a filled mc_args (chunks and seqs on the device).
 * v2: the fused output kernel when the tile is one 64×64 GEMM tile (C·R ≤ 64, P tile ≤ 64). */
ssm_status run_chunks(ssm_context * ctx, const char * op, mc_args & A, int need_final, cudaStream_t s, bool v2) {
    if (A.W == 0 && A.nseq == 0) return SSM_STATUS_OK;
    const bool      fused = v2 && A.C * A.R <= 64 && A.pt <= 64;
    const mc_layout ls = make_layout(A.R, A.N, A.P, A.C, A.P, false);
    const mc_layout lo = make_layout(A.R, A.N, A.P, A.C, A.pt, true, fused);
    const size_t    bs = (size_t)ls.total * sizeof(float), bo = (size_t)lo.total * sizeof(float);
    SSM_FORWARD_IF_ERROR(set_smem(ctx, op, SM_CHUNK_STATE, (const void *)chunk_state_kernel, bs));
    if (fused) SSM_FORWARD_IF_ERROR(set_smem(ctx, op, SM_OUTPUT_V2, (const void *)output_kernel<true>, bo));
    else SSM_FORWARD_IF_ERROR(set_smem(ctx, op, SM_OUTPUT_V1, (const void *)output_kernel<false>, bo));
    if (A.W > 0) {
        chunk_state_kernel<<<dim3((unsigned)A.W, (unsigned)A.H), kThreads, bs, s>>>(A);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "chunk_state_kernel");
    }
    if (A.nseq > 0) {
        const unsigned zt = (unsigned)((A.N * A.P + kThreads - 1) / kThreads);
        state_pass_kernel<<<dim3((unsigned)A.nseq, (unsigned)A.H, zt), kThreads, 0, s>>>(A, need_final);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "state_pass_kernel");
    }
    if (A.W > 0) {
        const dim3 grid((unsigned)A.W, (unsigned)(A.H * A.npt));
        if (fused) output_kernel<true><<<grid, kThreads, bo, s>>>(A);
        else output_kernel<false><<<grid, kThreads, bo, s>>>(A);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "output_kernel");
    }
    return SSM_STATUS_OK;
}

/* v1 forward prep: one thread per (sequence, head, angle or cumsum). */
ssm_status run_prep_v1(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s) {
    const long long threads = (long long)A.nseq * A.H * (A.A + 1);
    if (threads == 0) return SSM_STATUS_OK;
    prep_kernel<<<(unsigned)((threads + 127) / 128), 128, 0, s>>>(A);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? SSM_STATUS_OK : ssmi_cuda_status(ctx, op, "prep_kernel", e);
}

/* v2 forward prep: segment sums, the scan over segments, θ and the cumsum per segment. */
ssm_status run_prep_v2(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s) {
    if (A.W == 0 || A.H == 0) return SSM_STATUS_OK; /* only empty sequences: no token to prepare */
    const int cps = seg_chunks(A.C);
    if (A.A > 0) {
        seg_sum_kernel<<<dim3((unsigned)A.W, (unsigned)((A.H * A.A + 127) / 128)), 128, 0, s>>>(A, cps);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "seg_sum_kernel");
        const long long threads = (long long)A.nseq * A.H * A.A;
        seg_scan_kernel<<<(unsigned)((threads + 127) / 128), 128, 0, s>>>(A, cps);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "seg_scan_kernel");
    }
    seg_theta_kernel<<<dim3((unsigned)A.W, (unsigned)((A.H * (A.A + 1) + 127) / 128)), 128, 0, s>>>(A, cps);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "seg_theta_kernel");
    return SSM_STATUS_OK;
}

ssm_status check_grid(ssm_context * ctx, const char * op, const ssmi_mimo_dims * d, int npt) {
    SSM_RETURN_IF(d->nheads * npt > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: H=%lld times %d P tiles exceeds the CUDA grid limit 65535", op, (long long)d->nheads, npt);
    return SSM_STATUS_OK;
}

/* ---- decode step ---------------------------------------------------------------------------- */

const int kInlineSlots = 64; /* step: slot lists up to this batch go in the kernel parameters */

struct st_args {
    ssmi_cu_view q, k, v, z, adt, dt, trap, angles, q_bias, k_bias, mimo_v, mimo_z, mimo_o, d, norm_w;
    ssmi_cu_view angle_state, ssm_state, k_state, v_state;
    ssmi_cu_view out, final_angle, final_ssm, final_k, final_v;
    const long long * slots; /* device, B entries; NULL: islot or slot = row */
    int               H, G, R, N, P, A, reduce, has_z, has_d, fused, nw_1d, vec;
    float             eps;
    int               n_islot;                /* v2: B ≤ kInlineSlots slots passed by value */
    int               islot[kInlineSlots];
};

const int kStepThreads = 128;

/* Shared floats of the step: qt, kt, kp [R][N]; cg, cb, u, y [R][P]; hrow [warps][N];
 * theta [A]; rstd [R]. */
__host__ __device__ inline int step_smem_floats(int R, int N, int P, int A) {
    return 3 * R * N + 4 * R * P + (kStepThreads / 32) * N + A + R;
}

__global__ void __launch_bounds__(kStepThreads) step_kernel(const st_args A) {
    extern __shared__ float sm[];
    const int b = blockIdx.x, h = blockIdx.y, R = A.R, N = A.N, P = A.P, NA = A.A;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    const long long slot = A.slots != NULL ? A.slots[b] : A.n_islot > 0 ? (long long)A.islot[b] : (long long)b;
    if (slot < 0) { /* padding row: out = 0, no state touched */
        for (int e = tid; e < (A.reduce ? P : R * P); e += blockDim.x) {
            if (A.reduce) stv(A.out, o3(A.out, b, h, e), 0.0f);
            else stv(A.out, o4(A.out, b, e / P, h, e % P), 0.0f);
        }
        return;
    }
    const int g = h / (A.H / A.G);
    float *qt = sm, *kt = qt + R * N, *kp = kt + R * N, *cg = kp + R * N, *cb = cg + R * P, *u = cb + R * P;
    float *y = u + R * P, *hrow = y + R * P, *theta = hrow + nwarps * N, *rstd = theta + NA;
    const float adt = ldv(A.adt, o2(A.adt, b, h)), dt = ldv(A.dt, o2(A.dt, b, h));
    const float lam = sigmoidf_(ldv(A.trap, o2(A.trap, b, h)));
    const float alpha = expf(adt), gamma = dt * lam, beta = (1.0f - lam) * dt * alpha;
    const float dsk = A.has_d ? ldv(A.d, o1(A.d, h)) : 0.0f;
    /* the slot's old k, v, θ before any write; the new θ, q̄, k̄, u, the coefficients */
    for (int a = tid; a < NA; a += blockDim.x)
        theta[a] = ldv(A.angle_state, o3(A.angle_state, slot, h, a)) +
                   kPi * tanhf(ldv(A.angles, o3(A.angles, b, h, a))) * dt;
    for (int e = tid; e < R * N; e += blockDim.x) {
        const int r = e / N, nn = e - r * N;
        qt[e] = ldv(A.q, o4(A.q, b, r, g, nn)) + ldv(A.q_bias, o3(A.q_bias, h, r, nn));
        kt[e] = ldv(A.k, o4(A.k, b, r, g, nn)) + ldv(A.k_bias, o3(A.k_bias, h, r, nn));
        kp[e] = ldv(A.k_state, o4(A.k_state, slot, r, h, nn));
    }
    for (int e = tid; e < R * P; e += blockDim.x) {
        const int   r = e / P, p = e - r * P;
        const float mv = ldv(A.mimo_v, o3(A.mimo_v, h, r, p));
        u[e] = ldv(A.v, o3(A.v, b, h, p)) * mv;
        cg[e] = gamma * u[e];
        cb[e] = beta * (ldv(A.v_state, o3(A.v_state, slot, h, p)) * mv);
    }
    __syncthreads();
    for (int e = tid; e < R * NA; e += blockDim.x) {
        const int r = e / NA, a = e - r * NA;
        float     sn, cs;
        sincosf(theta[a], &sn, &cs);
        float *q0 = qt + r * N, *k0 = kt + r * N;
        const float qa = q0[a], qb = q0[a + N / 2], ka = k0[a], kb = k0[a + N / 2];
        q0[a] = cs * qa - sn * qb, q0[a + N / 2] = sn * qa + cs * qb;
        k0[a] = cs * ka - sn * kb, k0[a + N / 2] = sn * ka + cs * kb;
    }
    __syncthreads();
    /* h ← α·h + Σ_r γu_r ⊗ k̃_r + Σ_r βu'_r ⊗ k_state_r, row p per warp; y_r[p] = h_p·q̃_r + D·u_r */
    float * hr = hrow + warp * N;
    for (int p = warp; p < P; p += nwarps) {
        if (A.vec) {
            const float4 * src = (const float4 *)((const float *)A.ssm_state.p + o4(A.ssm_state, slot, h, p, 0));
            float4 *       dst = A.final_ssm.p != NULL
                                     ? (float4 *)((float *)const_cast<void *>(A.final_ssm.p) + o4(A.final_ssm, slot, h, p, 0))
                                     : NULL;
            for (int n4 = lane; n4 < N / 4; n4 += 32) {
                float4 hv = src[n4];
                float  o[4] = {hv.x, hv.y, hv.z, hv.w};
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int nn = 4 * n4 + c;
                    float     acc = 0.0f;
                    for (int r = 0; r < R; ++r) acc = fmaf(cg[r * P + p], kt[r * N + nn], acc);
                    for (int r = 0; r < R; ++r) acc = fmaf(cb[r * P + p], kp[r * N + nn], acc);
                    o[c] = fmaf(alpha, o[c], acc);
                    hr[nn] = o[c];
                }
                if (dst != NULL) dst[n4] = make_float4(o[0], o[1], o[2], o[3]);
            }
        } else {
            for (int nn = lane; nn < N; nn += 32) {
                float acc = 0.0f;
                for (int r = 0; r < R; ++r) acc = fmaf(cg[r * P + p], kt[r * N + nn], acc);
                for (int r = 0; r < R; ++r) acc = fmaf(cb[r * P + p], kp[r * N + nn], acc);
                const float hn = fmaf(alpha, ldv(A.ssm_state, o4(A.ssm_state, slot, h, p, nn)), acc);
                hr[nn] = hn;
                if (A.final_ssm.p != NULL) stv(A.final_ssm, o4(A.final_ssm, slot, h, p, nn), hn);
            }
        }
        __syncwarp();
        for (int r = 0; r < R; ++r) {
            float s = 0.0f;
            for (int nn = lane; nn < N; nn += 32) s = fmaf(hr[nn], qt[r * N + nn], s);
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            if (lane == 0) y[r * P + p] = s + dsk * u[r * P + p];
        }
        __syncwarp();
    }
    __syncthreads();
    /* output stage (z gate / fused norm / mimo_o sum), as the forward */
    if (A.fused)
        for (int r = warp; r < R; r += nwarps) {
            float ss = 0.0f;
            for (int p = lane; p < P; p += 32) ss += y[r * P + p] * y[r * P + p];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
            if (lane == 0) rstd[r] = 1.0f / sqrtf(ss / (float)P + A.eps);
        }
    __syncthreads();
    for (int p = tid; p < P; p += blockDim.x) {
        const float zv = A.has_z ? ldv(A.z, o3(A.z, b, h, p)) : 0.0f;
        const float nw = !A.fused || A.norm_w.p == NULL ? 1.0f
                         : A.nw_1d ? ldv(A.norm_w, o1(A.norm_w, (long long)h * P + p))
                                   : ldv(A.norm_w, o2(A.norm_w, h, p));
        float acc = 0.0f;
        for (int r = 0; r < R; ++r) {
            float yv = y[r * P + p];
            if (A.has_z) {
                const float zz = zv * ldv(A.mimo_z, o3(A.mimo_z, h, r, p));
                const float sz = zz / (1.0f + expf(-zz));
                yv = A.fused ? yv * rstd[r] * nw * sz : yv * sz;
            }
            if (A.reduce) {
                const float t2 = yv * ldv(A.mimo_o, o3(A.mimo_o, h, r, p));
                acc = r == 0 ? t2 : acc + t2;
            } else {
                stv(A.out, o4(A.out, b, r, h, p), yv);
            }
        }
        if (A.reduce) stv(A.out, o3(A.out, b, h, p), acc);
        if (A.final_v.p != NULL) stv(A.final_v, o3(A.final_v, slot, h, p), ldv(A.v, o3(A.v, b, h, p)));
    }
    for (int a = tid; a < NA && A.final_angle.p != NULL; a += blockDim.x)
        stv(A.final_angle, o3(A.final_angle, slot, h, a), theta[a]);
    for (int e = tid; e < R * N && A.final_k.p != NULL; e += blockDim.x)
        stv(A.final_k, o4(A.final_k, slot, e / N, h, e % N), kt[e]);
}

/* fp32 view whose (slot, h, p) rows are 16-byte aligned float4 runs of N contiguous floats. */
bool vec_ok(const ssm_tensor * t, int64_t N) {
    if (t == NULL || t->data == NULL) return true;
    if (t->dtype != SSM_DTYPE_F32 || t->strides[3] != 1 || N % 4 != 0) return false;
    if (((uintptr_t)t->data & 15u) != 0) return false;
    for (int i = 0; i < 3; ++i)
        if (t->strides[i] % 4 != 0) return false;
    return true;
}

} // namespace

/* ---- entry points -------------------------------------------------------------------------- */

extern "C" ssm_status ssmi_cuda_mamba3_mimo_bwd_fwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                                   const ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_fwd_args * a) {
    static const char op[] = "mamba3_mimo_bwd_fwd";
    (void)p;
    SSM_RETURN_IF(ctx != NULL && ctx->ref_mode == SSM_REF_UPSTREAM_BF16, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: ref_mode SSM_REF_UPSTREAM_BF16 is not implemented on CUDA (use the CPU or REF backend)", op);
    if (d->batch == 0 || d->nheads == 0 || d->seqlen == 0) return SSM_STATUS_OK;
    mc_args A;
    memset(&A, 0, sizeof A);
    fill_dims(&A, d);
    A.pt = pick_ptile(A.R, A.N, A.P, A.C);
    SSM_RETURN_IF(A.pt == 0, ctx, SSM_STATUS_UNSUPPORTED, "%s: the chunk tile does not fit in shared memory", op);
    A.npt = (A.P + A.pt - 1) / A.pt;
    SSM_FORWARD_IF_ERROR(check_grid(ctx, op, d, A.npt));
    A.q = view_or_null(&a->q), A.k = view_or_null(&a->k), A.v = view_or_null(&a->v), A.z = view_or_null(&a->z);
    A.dout = view_or_null(&a->dout), A.q_bias = view_or_null(&a->q_bias), A.k_bias = view_or_null(&a->k_bias);
    A.mimo_v = view_or_null(&a->mimo_v), A.mimo_z = view_or_null(&a->mimo_z), A.mimo_o = view_or_null(&a->mimo_o);
    A.d = view_or_null(&a->d), A.angles = view_or_null(&a->angles), A.da_cs = view_or_null(&a->da_cs);
    A.da_cs_rev = view_or_null(&a->da_cs_rev), A.dt = view_or_null(&a->dt), A.trap = view_or_null(&a->trap);
    A.segsum = view_or_null(&a->segsum), A.states = view_or_null(&a->states), A.qk_dot = view_or_null(&a->qk_dot);
    A.dz = view_or_null(&a->dz);
    A.has_z = ssmi_present(&a->z), A.has_d = ssmi_present(&a->d), A.fwd = 0;
    A.nseq = (int)d->batch;

    ssmi_mimo_dims dd = *d;
    dd.nseq = d->batch;
    mc_plan pl;
    ssm_status st = make_plan(ctx, op, &dd, NULL, &pl);
    cudaStream_t s = ssmi_cuda_stream(ctx);
    mc_mem       m;
    m.n = 0;
    void *dch = NULL, *dsq = NULL, *wst = NULL, *po = NULL, *pz = NULL;
    const size_t W = (size_t)pl.W, H = (size_t)A.H;
    A.W = pl.W;
    if (st == SSM_STATUS_OK) st = mem_upload(ctx, op, &m, &dch, pl.chunks, sizeof(mc_chunk) * W, s);
    if (st == SSM_STATUS_OK) st = mem_upload(ctx, op, &m, &dsq, pl.seqs, sizeof(mc_seq) * (size_t)pl.nseq, s);
    if (st == SSM_STATUS_OK) st = mem_alloc(ctx, op, &m, &wst, W * H * A.N * A.P * sizeof(float), s);
    const bool want_o = ssmi_present(&a->dmimo_o), want_z = ssmi_present(&a->dmimo_z);
    if (st == SSM_STATUS_OK && A.reduce) st = mem_alloc(ctx, op, &m, &po, W * H * A.R * A.P * sizeof(float), s);
    if (st == SSM_STATUS_OK && A.has_z) st = mem_alloc(ctx, op, &m, &pz, W * H * A.R * A.P * sizeof(float), s);
    free_plan(&pl);
    if (st == SSM_STATUS_OK) {
        A.chunks = (const mc_chunk *)dch, A.seqs = (const mc_seq *)dsq, A.ws_state = (float *)wst;
        A.part_o = (float *)po, A.part_z = (float *)pz;
        st = run_chunks(ctx, op, A, 0, s, !kernels_v1());
    }
    if (st == SSM_STATUS_OK && (want_o || want_z)) {
        const int  nc = (int)d->nchunks;
        const dim3 grid((unsigned)(d->batch * d->nheads), (unsigned)((A.R * A.P + kThreads - 1) / kThreads));
        partial_reduce_kernel<<<grid, kThreads, 0, s>>>(A, nc, view_or_null(&a->dmimo_o), view_or_null(&a->dmimo_z));
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) st = ssmi_cuda_status(ctx, op, "partial_reduce_kernel", e);
    }
    return mem_free(ctx, op, &m, s, st);
}

extern "C" ssm_status ssmi_cuda_mamba3_mimo(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                           const ssmi_mimo_dims * d, const ssm_mamba3_mimo_args * a) {
    static const char op[] = "mamba3_mimo";
    if (d->nseq == 0 || d->nheads == 0) return SSM_STATUS_OK;
    mc_args A;
    memset(&A, 0, sizeof A);
    fill_dims(&A, d);
    A.pt = pick_ptile(A.R, A.N, A.P, A.C);
    SSM_RETURN_IF(A.pt == 0, ctx, SSM_STATUS_UNSUPPORTED, "%s: the chunk tile does not fit in shared memory", op);
    A.npt = (A.P + A.pt - 1) / A.pt;
    SSM_FORWARD_IF_ERROR(check_grid(ctx, op, d, A.npt));
    A.q = view_or_null(&a->q), A.k = view_or_null(&a->k), A.v = view_or_null(&a->v), A.z = view_or_null(&a->z);
    A.q_bias = view_or_null(&a->q_bias), A.k_bias = view_or_null(&a->k_bias), A.mimo_v = view_or_null(&a->mimo_v);
    A.mimo_z = view_or_null(&a->mimo_z), A.mimo_o = view_or_null(&a->mimo_o), A.d = view_or_null(&a->d);
    A.norm_w = view_or_null(&a->outproj_norm_weight), A.angles = view_or_null(&a->angles);
    A.dt = view_or_null(&a->dt), A.trap = view_or_null(&a->trap), A.adt = view_or_null(&a->adt);
    A.angle_state = view_or_null(&a->angle_state), A.ssm_state = view_or_null(&a->ssm_state);
    A.k_state = view_or_null(&a->k_state), A.v_state = view_or_null(&a->v_state);
    A.out = view_or_null(&a->out), A.final_angle = view_or_null(&a->final_angle_state);
    A.final_ssm = view_or_null(&a->final_ssm_state), A.final_k = view_or_null(&a->final_k_state);
    A.final_v = view_or_null(&a->final_v_state);
    A.has_z = ssmi_present(&a->z), A.has_d = ssmi_present(&a->d), A.fwd = 1;
    A.fused = p->fuse_pregate_norm != 0, A.has_states = d->has_states != 0, A.eps = (float)p->norm_eps;
    A.nw_1d = ssmi_present(&a->outproj_norm_weight) && a->outproj_norm_weight.ndim == 1;
    A.nseq = (int)d->nseq;

    mc_plan      pl;
    ssm_status   st = make_plan(ctx, op, d, &a->cu_seqlens, &pl);
    cudaStream_t s = ssmi_cuda_stream(ctx);
    mc_mem       m;
    m.n = 0;
    void *       dch = NULL, *dsq = NULL, *wst = NULL, *wy = NULL, *wth = NULL, *wcm = NULL, *wsg = NULL;
    const size_t W = (size_t)pl.W, H = (size_t)A.H, BS = (size_t)A.B * (size_t)A.S;
    const bool   v2 = !kernels_v1();
    A.W = pl.W;
    if (st == SSM_STATUS_OK) st = mem_upload(ctx, op, &m, &dch, pl.chunks, sizeof(mc_chunk) * W, s);
    if (st == SSM_STATUS_OK) st = mem_upload(ctx, op, &m, &dsq, pl.seqs, sizeof(mc_seq) * (size_t)pl.nseq, s);
    if (st == SSM_STATUS_OK) st = mem_alloc(ctx, op, &m, &wst, W * H * A.N * A.P * sizeof(float), s);
    if (st == SSM_STATUS_OK) st = mem_alloc(ctx, op, &m, &wy, BS * H * A.R * A.P * sizeof(float), s);
    if (st == SSM_STATUS_OK) st = mem_alloc(ctx, op, &m, &wth, BS * H * A.A * sizeof(float), s);
    if (st == SSM_STATUS_OK) st = mem_alloc(ctx, op, &m, &wcm, BS * H * sizeof(float), s);
    if (st == SSM_STATUS_OK && v2) st = mem_alloc(ctx, op, &m, &wsg, W * H * A.A * sizeof(float), s);
    free_plan(&pl);
    if (st == SSM_STATUS_OK) {
        A.chunks = (const mc_chunk *)dch, A.seqs = (const mc_seq *)dsq, A.ws_state = (float *)wst;
        A.ws_y = (float *)wy, A.ws_theta = (float *)wth, A.ws_cm = (float *)wcm, A.ws_seg = (float *)wsg;
        st = v2 ? run_prep_v2(ctx, op, A, s) : run_prep_v1(ctx, op, A, s);
    }
    if (st == SSM_STATUS_OK) st = run_chunks(ctx, op, A, 1, s, v2);
    if (st == SSM_STATUS_OK && BS > 0) {
        const long long warps = (long long)BS * A.H;
        out_kernel<<<(unsigned)((warps + 7) / 8), 256, 0, s>>>(A);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) st = ssmi_cuda_status(ctx, op, "out_kernel", e);
    }
    if (st == SSM_STATUS_OK && (A.final_v.p || A.final_angle.p || A.final_k.p)) {
        finals_kernel<<<dim3((unsigned)A.nseq, (unsigned)A.H), 128, 0, s>>>(A);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) st = ssmi_cuda_status(ctx, op, "finals_kernel", e);
    }
    return mem_free(ctx, op, &m, s, st);
}

extern "C" ssm_status ssmi_cuda_mamba3_mimo_step(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                                const ssmi_mimo_dims * d, const ssm_mamba3_mimo_step_args * a) {
    static const char op[] = "mamba3_mimo_step";
    if (d->batch == 0 || d->nheads == 0) return SSM_STATUS_OK;
    SSM_RETURN_IF(d->nheads > 65535, ctx, SSM_STATUS_UNSUPPORTED, "%s: H=%lld exceeds the CUDA grid limit 65535", op,
                  (long long)d->nheads);
    st_args A;
    memset(&A, 0, sizeof A);
    A.q = view_or_null(&a->q), A.k = view_or_null(&a->k), A.v = view_or_null(&a->v), A.z = view_or_null(&a->z);
    A.adt = view_or_null(&a->adt), A.dt = view_or_null(&a->dt), A.trap = view_or_null(&a->trap);
    A.angles = view_or_null(&a->angles), A.q_bias = view_or_null(&a->q_bias), A.k_bias = view_or_null(&a->k_bias);
    A.mimo_v = view_or_null(&a->mimo_v), A.mimo_z = view_or_null(&a->mimo_z), A.mimo_o = view_or_null(&a->mimo_o);
    A.d = view_or_null(&a->d), A.norm_w = view_or_null(&a->outproj_norm_weight);
    A.angle_state = view_or_null(&a->angle_state), A.ssm_state = view_or_null(&a->ssm_state);
    A.k_state = view_or_null(&a->k_state), A.v_state = view_or_null(&a->v_state), A.out = view_or_null(&a->out);
    A.final_angle = view_or_null(&a->final_angle_state), A.final_ssm = view_or_null(&a->final_ssm_state);
    A.final_k = view_or_null(&a->final_k_state), A.final_v = view_or_null(&a->final_v_state);
    A.H = (int)d->nheads, A.G = (int)d->ngroups, A.R = (int)d->rank, A.N = (int)d->dstate, A.P = (int)d->headdim;
    A.A = (int)d->nangles, A.reduce = d->reduce_o != 0, A.has_z = ssmi_present(&a->z), A.has_d = ssmi_present(&a->d);
    A.fused = p->fuse_pregate_norm != 0, A.eps = (float)p->norm_eps;
    A.nw_1d = ssmi_present(&a->outproj_norm_weight) && a->outproj_norm_weight.ndim == 1;
    A.vec = vec_ok(&a->ssm_state, d->dstate) && vec_ok(&a->final_ssm_state, d->dstate);
    const size_t smem = (size_t)step_smem_floats(A.R, A.N, A.P, A.A) * sizeof(float);
    SSM_RETURN_IF(smem > (size_t)kSmemLimit, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: R=%d with N=%d, P=%d needs %zu bytes of shared memory (limit %d)", op, A.R, A.N, A.P, smem,
                  kSmemLimit);
    cudaStream_t s = ssmi_cuda_stream(ctx);
    mc_mem       m;
    m.n = 0;
    ssm_status st = SSM_STATUS_OK;
    /* v2: a short slot list (values within int) travels in the kernel's parameters: no
     * allocation, no pageable copy, no free */
    bool inline_ok = !kernels_v1() && ssmi_present(&a->state_batch_indices) && d->batch <= kInlineSlots;
    for (int64_t b = 0; inline_ok && b < d->batch; ++b) {
        const long long v = ssmi_get_i64(&a->state_batch_indices, ssmi_off1(&a->state_batch_indices, b));
        if (v < INT_MIN || v > INT_MAX) inline_ok = false;
        else A.islot[b] = (int)v;
    }
    if (inline_ok) {
        A.n_islot = (int)d->batch;
    } else if (ssmi_present(&a->state_batch_indices)) {
        long long * host = (long long *)malloc(sizeof(long long) * (size_t)d->batch);
        if (host == NULL) return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no memory for the slot list", op);
        const ssm_tensor * idx = &a->state_batch_indices;
        for (int64_t b = 0; b < d->batch; ++b) host[b] = ssmi_get_i64(idx, ssmi_off1(idx, b));
        void * dslots = NULL;
        st = mem_upload(ctx, op, &m, &dslots, host, sizeof(long long) * (size_t)d->batch, s);
        free(host);
        A.slots = (const long long *)dslots;
    }
    if (st == SSM_STATUS_OK) st = set_smem(ctx, op, SM_STEP, (const void *)step_kernel, smem);
    if (st == SSM_STATUS_OK) {
        step_kernel<<<dim3((unsigned)d->batch, (unsigned)d->nheads), kStepThreads, smem, s>>>(A);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) st = ssmi_cuda_status(ctx, op, "step_kernel", e);
    }
    return mem_free(ctx, op, &m, s, st);
}

/* Selection table of mamba3_mimo_bwd_fwd, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_mamba3_mimo_bwd_fwd(int32_t i, ssmi_variant_info * out) {
    (void)i, (void)out;
    return 0;
}

/* Selection table of mamba3_mimo, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_mamba3_mimo(int32_t i, ssmi_variant_info * out) {
    (void)i, (void)out;
    return 0;
}

/* Selection table of mamba3_mimo_step, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_mamba3_mimo_step(int32_t i, ssmi_variant_info * out) {
    (void)i, (void)out;
    return 0;
}
