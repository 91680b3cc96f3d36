/*
 * chunk_gemm.cu — the chunk-parallel kernels of the CUDA Mamba-3 MIMO chunked operators
 * (mamba3_mimo_bwd_fwd, mamba3_mimo), one block per (work chunk w, head h[, P tile]):
 *   chunk_state_kernel  the chunk tile (k̂ = c·Rot(θ)(k + k_bias), u = v ⊙ mimo_v) and the
 *                       chunk's own state contribution ΔS_w = (diag(e^{da_cs_rev})·K̂)ᵀ·U
 *                       (N×P fp32) into the workspace;
 *   output_kernel       the tile again (q̃ too), M = Q̃K̂ᵀ masked strictly in time and decayed by
 *                       e^{segsum}, the same-token block γ_i·qkd + D·I, then
 *                       Y = diag(e^{da_cs})·Q̃·Ŝ_w + M·U (spec §2.4) with Ŝ_w the state entering
 *                       the chunk (state_pass.cu); then
 *                         bwd_fwd: dz per token, dmimo_o / dmimo_z partial sums per chunk,
 *                         qk_dot;
 *                         forward: Y (fp32) into a workspace, the last token's k̃ as final_k_state.
 * Arithmetic: fp32 FFMA block GEMMs in shared memory (256 threads, 4×4 register tiles), for
 * every input dtype. No tensor cores: the GEMM operands are fp32 values (biased, rotated,
 * scaled), so bf16 mma would round them (the upstream model) and fp32 keeps the exact-mode bars.
 * Every output element is written by one thread with a fixed summation order; no float atomics
 * (the non-finite marks below are integer ORs).
 *
 * The output kernel comes in two forms, a template on kFused (the selection table in
 * mamba3_mimo.cu picks one): Y by two block GEMMs into a separate shared buffer (any tile that
 * fits), or, when the tile is one 64×64 GEMM tile, both Y products in one register tile with Y
 * stored over Q (less shared memory, more blocks per SM).
 *
 * The non-finite fix (forward with A.nonfinite): M·U multiplies the masked-out terms of later
 * tokens (M = 0) by their U rows, and 0 times a non-finite U (a non-finite v) is NaN in an earlier
 * token's Y. The output kernel marks each (chunk, head) where it stores a non-finite Y; then
 * output_fix_kernel runs the same tile code (kFix) for the marked pairs only: U's non-finite
 * elements are set to 0, which leaves every term of j ≤ i of a U column that is finite up to token
 * i as it was and makes the masked terms exactly 0, and Y is stored only for the tokens before the
 * column's first non-finite U (the later ones hold that value through their own j ≤ i term, and
 * keep the first pass's non-finite Y). The final k state is left to the first pass.
 */
#include "mimo.cuh"

namespace ssmi_mimo {
namespace {

/* c[u][v] += Σ_k A[ri[u]·ai + k·ak]·B[k·bk + cj[v]·bj] for k = 0 … K−1 in order: one thread's
 * 4×4 register tile of a block GEMM. */
__device__ __forceinline__ void tile_fma(float (&c)[4][4], int K, const float * A, const int (&ri)[4], int ai, int ak,
                                         const float * B, const int (&cj)[4], int bk, int bj) {
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
}

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
            tile_fma(c, K, A, ri, ai, ak, B, cj, bk, bj);
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

/* Y = diag(rs)·Q·S + M·U for one 64×64 output tile (L ≤ 64 rows, pu ≤ 64 columns), both
 * GEMMs in the same registers, in bgemm's operation order (Q·S from 0, scaled, then M·U from
 * 0 and added, as the two bgemm calls of the two-GEMM output kernel). Y may alias Q: it is
 * stored after a barrier that follows the last read of Q. Every thread of the block must call it. */
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
    tile_fma(c, N, Q, ri, ldq, 1, S, cj, lds, 1);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const float sc = rs[ri[u] / rdiv];
#pragma unroll
        for (int v = 0; v < 4; ++v) y[u][v] = sc * c[u][v], c[u][v] = 0.0f;
    }
    tile_fma(c, L, M, ri, ldm, 1, U, cj, ldu, 1);
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


/* Per-token scalars and decays of the chunk (threads over tokens): γ = dt·λ, c = γ + σ̄ with
 * σ̄ = dt_{t+1}·(1 − λ_{t+1}) (0 at the sequence's last token), e^{da_cs}, e^{da_cs_rev}. */
__device__ void tile_scalars(const mc_args & A, const mc_chunk & ck, int h, float * sm, const mc_layout & l) {
    for (int i = threadIdx.x; i < ck.len; i += blockDim.x) {
        const long long t = ck.t0 + i;
        const float     dtv = ldv(A.dt, o3(A.dt, ck.b, h, t));
        const float     lam = ssmi_math::sigmoid(ldv(A.trap, o3(A.trap, ck.b, h, t)));
        const float     g = dtv * lam;
        float           sig = g;
        if (t + 1 < ck.t_end) {
            const float dn = ldv(A.dt, o3(A.dt, ck.b, h, t + 1));
            const float ln = ssmi_math::sigmoid(ldv(A.trap, o3(A.trap, ck.b, h, t + 1)));
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
    /* the element loops unrolled: the loads of several elements in flight together */
#pragma unroll 4
    for (int e = threadIdx.x; e < L * N; e += blockDim.x) {
        const int       x = e / N, nn = e - x * N, i = x / R, r = x - i * R;
        const long long t = ck.t0 + i;
        K[x * l.ldn + nn] = ldv(A.k, o5(A.k, ck.b, t, r, g, nn)) + ldv(A.k_bias, o3(A.k_bias, h, r, nn));
        if (with_q) Q[x * l.ldn + nn] = ldv(A.q, o5(A.q, ck.b, t, r, g, nn)) + ldv(A.q_bias, o3(A.q_bias, h, r, nn));
    }
#pragma unroll 4
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

/* ---- chunk states --------------------------------------------------------------------------- */
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

/* ---- output tiles ---------------------------------------------------------------------------- */

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
                    const float zz = z * mz, sg = ssmi_math::sigmoid(zz);
                    const float yd = y * dout;
                    dmo += zz * sg * yd;
                    dzz = yd * mo * sg * (1.0f + zz * (1.0f - sg));
                } else {
                    dmo += y * dout;
                }
            } else {
                const float dout = ldv(A.dout, o5(A.dout, ck.b, t, r, h, p));
                const float zz = z * mz, sg = ssmi_math::sigmoid(zz);
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

/* The output tile of work chunk w and grid row hy (= head · npt + P tile) in the block's shared
 * memory sm; kFix: the non-finite fix's form. */
template <bool kFused, bool kFix>
__device__ __forceinline__ void output_tile(const mc_args & A, float * sm, int w, int hy) {
    const int       h = hy / A.npt, ptile = hy - h * A.npt;
    const mc_chunk  ck = A.chunks[w];
    const int       p0 = ptile * A.pt, pu = min(A.pt, A.P - p0);
    const mc_layout l = make_layout(A.R, A.N, A.P, A.C, A.pt, true, kFused);
    const int       R = A.R, N = A.N, n = ck.len, L = n * R;
    load_tile(A, ck, h, sm, l, true, p0, pu, !A.fwd && A.qk_dot.p != NULL && ptile == 0,
              !kFix && A.fwd && A.final_k.p != NULL && ptile == 0);
    float *Q = sm + l.q, *K = sm + l.k, *M = sm + l.m, *Y = sm + l.y;
    if (kFix) /* U's non-finite elements to 0 (U is read after the barrier below the mask) */
        for (int e = threadIdx.x; e < L * pu; e += blockDim.x) {
            float * up = sm + l.u + (e / pu) * l.ldp + (e - (e / pu) * pu);
            if (!isfinite(*up)) *up = 0.0f;
        }
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
    if (kFix) {
        /* per column: the tokens before its first non-finite U (recomputed from the global
         * operands as load_tile forms them) */
        for (int pp = threadIdx.x; pp < pu; pp += blockDim.x) {
            const int p = p0 + pp;
            for (int i = 0; i < n; ++i) {
                const float vi = ldv(A.v, o4(A.v, ck.b, ck.t0 + i, h, p));
                bool        bad = false;
                for (int r = 0; r < R; ++r) bad |= !isfinite(vi * ldv(A.mimo_v, o3(A.mimo_v, h, r, p)));
                if (bad) break;
                for (int r = 0; r < R; ++r)
                    A.ws_y[((((long long)ck.b * A.S + ck.t0 + i) * A.H + h) * R + r) * A.P + p] =
                        Y[(i * R + r) * l.ldp + pp];
            }
        }
    } else if (A.fwd) {
        for (int e = threadIdx.x; e < L * pu; e += blockDim.x) {
            const int   x = e / pu, pp = e - x * pu, i = x / R, r = x - i * R;
            const float y = Y[x * l.ldp + pp];
            /* a non-finite Y marks (chunk, head) for the fix (an integer OR, at the store) */
            if (!isfinite(y) && A.nonfinite != NULL) atomicOr(A.nonfinite + (long long)w * A.H + h, 1);
            A.ws_y[((((long long)ck.b * A.S + ck.t0 + i) * A.H + h) * R + r) * A.P + p0 + pp] = y;
        }
    } else {
        bwd_fwd_epilogue(A, ck, w, h, sm, l, p0, pu);
    }
}

/* kFused (only when C·R ≤ 64 and the P tile ≤ 64): fused_y with Y over Q, so the block
 * needs 16.6 KB less shared memory (3 blocks per SM at N = P = 64, C·R = 64, instead of 2). */
template <bool kFused>
__global__ void __launch_bounds__(kThreads, kFused ? 3 : 1) output_kernel(const mc_args A) {
    extern __shared__ float sm[];
    output_tile<kFused, false>(A, sm, blockIdx.x, blockIdx.y);
}

/* The non-finite fix: kFixBlocks blocks walk the (chunk, head, P tile) triples
 * (ssmi_cu_marked_walk); a marked pair's tiles are recomputed (output_tile<kFix>). A small grid,
 * because every block holds the tile's shared memory. */
const int kFixBlocks = 256;
template <bool kFused> __global__ void __launch_bounds__(kThreads, 1) output_fix_kernel(const mc_args A) {
    extern __shared__ float sm[];
    ssmi_cu_marked_walk(
        (long long)A.W * A.H * A.npt, [&](long long o) { return A.nonfinite[o / A.npt] != 0; },
        [&](long long o) {
            const long long wh = o / A.npt; /* w·H + h */
            const int       w = (int)(wh / A.H), h = (int)(wh - (long long)w * A.H);
            output_tile<kFused, true>(A, sm, w, h * A.npt + (int)(o - wh * A.npt));
            __syncthreads(); /* the next triple rewrites the shared memory */
        });
}

/* One output kernel form over the grid (work chunk, head × P tile); in the forward with marks,
 * then its non-finite fix over the same grid. */
template <bool kFused>
ssm_status launch_output(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s, int smem_id,
                         int fix_smem_id) {
    if (A.W == 0) return SSM_STATUS_OK;
    const size_t bytes = (size_t)make_layout(A.R, A.N, A.P, A.C, A.pt, true, kFused).total * sizeof(float);
    SSM_FORWARD_IF_ERROR(set_smem(ctx, op, smem_id, (const void *)output_kernel<kFused>, bytes));
    output_kernel<kFused><<<dim3((unsigned)A.W, (unsigned)(A.H * A.npt)), kThreads, bytes, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "output_kernel");
    if (!A.fwd || A.nonfinite == NULL) return SSM_STATUS_OK;
    const long long total = (long long)A.W * A.H * A.npt;
    if (total <= 0) return SSM_STATUS_OK;
    SSM_FORWARD_IF_ERROR(set_smem(ctx, op, fix_smem_id, (const void *)output_fix_kernel<kFused>, bytes));
    output_fix_kernel<kFused><<<(unsigned)(total < kFixBlocks ? total : kFixBlocks), kThreads, bytes, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "output_fix_kernel");
    return SSM_STATUS_OK;
}

} // namespace

ssm_status launch_chunk_state(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s) {
    if (A.W == 0) return SSM_STATUS_OK;
    const size_t bytes = (size_t)make_layout(A.R, A.N, A.P, A.C, A.P, false).total * sizeof(float);
    SSM_FORWARD_IF_ERROR(set_smem(ctx, op, SM_CHUNK_STATE, (const void *)chunk_state_kernel, bytes));
    chunk_state_kernel<<<dim3((unsigned)A.W, (unsigned)A.H), kThreads, bytes, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "chunk_state_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_output_two_gemm(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s) {
    return launch_output<false>(ctx, op, A, s, SM_OUTPUT_TWO_GEMM, SM_FIX_TWO_GEMM);
}

ssm_status launch_output_fused(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s) {
    return launch_output<true>(ctx, op, A, s, SM_OUTPUT_FUSED, SM_FIX_FUSED);
}

} // namespace ssmi_mimo
