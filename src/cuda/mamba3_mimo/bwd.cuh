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

#include "../common/mma.cuh"
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
    float *thc;              /* [W][H][A] Σ raw dθ over chunk w, then the angle carry
                                leaving w (dfinal_angle + the later chunks' sums)      */
    float *dfac, *dgd;       /* [B][H][S] dfactor, dgamma_diag                       */
    float *dc;               /* [NS][H] gradient of the initial-state fold's dt·(1−λ) */
    /* partial sums */
    float *p_o, *p_z, *p_w, *p_mv; /* [W][H][R][P]                                    */
    float *p_mv0;                  /* [NS][H][R][P] the initial-state fold's dmimo_v  */
    float *p_qb, *p_kb;            /* [W][H][R][N]                                    */
    float *p_dd;                   /* [W][H]                                          */
    int    B, S, H, G, R, N, P, A, C, W, nseq;
    int    has_z, has_d, reduce, fused, has_states, nw_1d;
    int    planes; /* the chunk kernels' products on the tensor cores (entry chunk_parallel_planes) */
    float  eps;
};

/* ---- block GEMM on the chunk tiles ---------------------------------------------------------- */

const int kGemmTile = 64;             /* output tile edge: 16×16 threads, 4×4 outputs each          */
const int kGemmK = 32;                /* inner-index slice staged per step                          */
const int kGemmLd = kGemmTile + 4;    /* shared row stride: float4-aligned, conflict-free stores    */
static_assert(kBwdThreads == 256, "block_gemm maps 256 threads to 16×16 micro-tiles");

/* The staged operand slices: a[k][i], b[k][j] of one kGemmK step. */
struct gemm_smem {
    float a[kGemmK * kGemmLd];
    float b[kGemmK * kGemmLd];
};

/* C[i][j] = Σ_k fa(i, k)·fb(k, j) for i < M, j < NC, k < K, the sum in ascending k from 0 in one
 * fp32 accumulator (the same bytes for any grid), then epi(i, j, C[i][j]) once per element by one
 * thread. The output goes in 64×64 tiles, each thread a 4×4 micro-tile (rows ty·4.., columns
 * tx·4..) from float4 shared reads. The operands are staged in 32-deep slices; A_K / B_K say which
 * index of fa / fb is contiguous in memory (true: k) so the staging loads coalesce: k-contiguous
 * operands are read 8 k by 4 rows per warp (32-byte sectors, conflict-free shared stores), the
 * others 32 consecutive rows/columns per warp. Every thread of the block calls it (it syncs);
 * fa / fb are only called in range; the shared slices are free again when it returns. */
template <bool A_K, bool B_K, class FA, class FB, class FE>
__device__ __forceinline__ void block_gemm(gemm_smem & sm, int M, int NC, int K, FA fa, FB fb, FE epi) {
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    for (int i0 = 0; i0 < M; i0 += kGemmTile)
        for (int j0 = 0; j0 < NC; j0 += kGemmTile) {
            float acc[4][4];
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b) acc[a][b] = 0.0f;
            for (int k0 = 0; k0 < K; k0 += kGemmK) {
#pragma unroll 2
                for (int e = tid; e < kGemmK * kGemmTile; e += kBwdThreads) {
                    const int lane = e & 31, slot = e >> 5;
                    int       ii, kk;
                    if (A_K) kk = (lane & 7) + 8 * (slot & 3), ii = (lane >> 3) + 4 * (slot >> 2);
                    else ii = e % kGemmTile, kk = e / kGemmTile;
                    const int i = i0 + ii, k = k0 + kk;
                    sm.a[kk * kGemmLd + ii] = i < M && k < K ? fa(i, k) : 0.0f;
                    int jj;
                    if (B_K) kk = (lane & 7) + 8 * (slot & 3), jj = (lane >> 3) + 4 * (slot >> 2);
                    else jj = e % kGemmTile, kk = e / kGemmTile;
                    const int j = j0 + jj, k2 = k0 + kk;
                    sm.b[kk * kGemmLd + jj] = j < NC && k2 < K ? fb(k2, j) : 0.0f;
                }
                __syncthreads();
                const int kn = K - k0 < kGemmK ? K - k0 : kGemmK;
#pragma unroll 4
                for (int kk = 0; kk < kn; ++kk) {
                    const float4 av = *reinterpret_cast<const float4 *>(&sm.a[kk * kGemmLd + ty * 4]);
                    const float4 bv = *reinterpret_cast<const float4 *>(&sm.b[kk * kGemmLd + tx * 4]);
                    const float  ar[4] = {av.x, av.y, av.z, av.w}, br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
                    for (int a = 0; a < 4; ++a)
#pragma unroll
                        for (int b = 0; b < 4; ++b) acc[a][b] = fmaf(ar[a], br[b], acc[a][b]);
                }
                __syncthreads();
            }
#pragma unroll
            for (int a = 0; a < 4; ++a) {
                const int i = i0 + ty * 4 + a;
#pragma unroll
                for (int b = 0; b < 4; ++b) {
                    const int j = j0 + tx * 4 + b;
                    if (i < M && j < NC) epi(i, j, acc[a][b]);
                }
            }
        }
}

/* ---- the same block product on the tensor cores (entry chunk_parallel_planes) ------------------- */

const int kPlaneK = 64;               /* inner-index slice staged per step (four m16n8k16 k steps):
                                         a chunk product of K ≤ 64 (the common N, P, C·R) is one
                                         staging round of global loads and one barrier pair      */
const int kPlaneLd = kPlaneK + 8;     /* bf16 row stride: 144 bytes (an odd multiple of 16), so the
                                         8 row addresses of an ldmatrix fall in distinct 16-byte
                                         bank groups                                              */
static_assert(kBwdThreads / 32 == 8, "the tensor-core block_gemm gives each of 8 warps 16×32 outputs");

/* The staged slices as bf16 planes: a[i][k], b[j][k] (k contiguous, as ldmatrix reads them for
 * mma.sync row.col), each fp32 value as its bf16 rounding (h) and the bf16 rounding of the
 * remainder (l). */
struct gemm_planes_smem {
    ssmi_mma::bf16 ah[kGemmTile * kPlaneLd], al[kGemmTile * kPlaneLd];
    ssmi_mma::bf16 bh[kGemmTile * kPlaneLd], bl[kGemmTile * kPlaneLd];
};

/* Stages rows [r0, r0 + 64) × k in [k0, k0 + kPlaneK) of f (f(row, k) when !SWAP, f(k, row) when
 * SWAP: an operand whose first index is k) into the planes h, l, zeros out of range. K_FAST: k is
 * the contiguous index of f in memory, so a warp reads 64 consecutive k of one row; else 32
 * consecutive rows of one k pair. Each thread splits a pair of adjacent k (split2). */
template <bool K_FAST, bool SWAP, class F>
__device__ __forceinline__ void stage_planes(ssmi_mma::bf16 * h, ssmi_mma::bf16 * l, int r0, int rows, int k0,
                                             int K, F f) {
    static_assert(kGemmTile * kPlaneK / 2 % kBwdThreads == 0, "whole pair sweeps per thread");
#pragma unroll 2
    for (int it = 0; it < kGemmTile * kPlaneK / 2 / kBwdThreads; ++it) {
        const int e = threadIdx.x + it * kBwdThreads;
        int       rr, kp;
        if (K_FAST) kp = e & (kPlaneK / 2 - 1), rr = e / (kPlaneK / 2);
        else rr = e & (kGemmTile - 1), kp = e / kGemmTile;
        const int r = r0 + rr, k = k0 + 2 * kp;
        float     v0 = 0.0f, v1 = 0.0f;
        if (r < rows && k < K) v0 = SWAP ? f(k, r) : f(r, k);
        if (r < rows && k + 1 < K) v1 = SWAP ? f(k + 1, r) : f(r, k + 1);
        uint32_t hi, lo;
        ssmi_mma::split2<ssmi_mma::M_BF16>(v0, v1, hi, lo);
        const int o = rr * kPlaneLd + 2 * kp;
        *reinterpret_cast<uint32_t *>(h + o) = hi;
        *reinterpret_cast<uint32_t *>(l + o) = lo;
    }
}

/* block_gemm's contract (the same arguments, the epilogue once per element by one thread of a
 * fixed mapping, only in-range calls of fa / fb, every thread calls it, the shared slices free on
 * return) with the products on the tensor cores, for the 16-bit-input entry: each kPlaneK-deep
 * slice of both operands is staged as split bf16 planes (stage_planes) and warp w computes the
 * 16×32 outputs at rows 16·(w/2), columns 32·(w%2) of the 64×64 tile as two tile_mma 16×16 tiles
 * (3 bf16 products per k16 step: hi·hi, hi·lo, lo·hi; lo·lo, ~2^-16 relative, dropped), fp32
 * accumulators, k ascending in steps of 16 (the same bytes for any grid). The epilogue reads the
 * accumulator fragments in place: lane l holds rows l/4 and l/4 + 8, columns 2(l%4) + {0, 1} of
 * each n8 block. */
template <bool A_K, bool B_K, class FA, class FB, class FE>
__device__ __forceinline__ void block_gemm(gemm_planes_smem & sm, int M, int NC, int K, FA fa, FB fb, FE epi) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = (warp >> 1) * 16, wn = (warp & 1) * 32;
    for (int i0 = 0; i0 < M; i0 += kGemmTile)
        for (int j0 = 0; j0 < NC; j0 += kGemmTile) {
            const bool live = i0 + wm < M && j0 + wn < NC; /* warp-uniform: the warp has outputs here */
            float      c[2][2][4];
            ssmi_mma::zero_acc(c[0]);
            ssmi_mma::zero_acc(c[1]);
            for (int k0 = 0; k0 < K; k0 += kPlaneK) {
                stage_planes<A_K, false>(sm.ah, sm.al, i0, M, k0, K, fa);
                stage_planes<B_K, true>(sm.bh, sm.bl, j0, NC, k0, K, fb);
                __syncthreads();
                const int k1 = K - k0 < kPlaneK ? (K - k0 + 15) / 16 * 16 : kPlaneK;
                if (live)
#pragma unroll
                    for (int t = 0; t < 2; ++t)
                        ssmi_mma::tile_mma<false, false, true, true>(c[t], sm.ah, sm.al, kPlaneLd, sm.bh, sm.bl,
                                                                      kPlaneLd, wm, wn + 16 * t, 0, k1);
                __syncthreads();
            }
            if (!live) continue;
#pragma unroll
            for (int t = 0; t < 2; ++t)
#pragma unroll
                for (int jn = 0; jn < 2; ++jn)
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        const int i = i0 + wm + (lane >> 2) + 8 * (q >> 1);
                        const int j = j0 + wn + 16 * t + 8 * jn + 2 * (lane & 3) + (q & 1);
                        if (i < M && j < NC) epi(i, j, c[t][jn][q]);
                    }
        }
}

/* The shared slices of block_gemm: fp32 (FFMA micro-tiles) or bf16 planes (tensor cores). */
template <bool PLANES>
struct gemm_smem_of {
    typedef gemm_smem type;
};
template <>
struct gemm_smem_of<true> {
    typedef gemm_planes_smem type;
};

/* Fixed-order warp sum (butterfly; every lane gets the same bytes, fp addition commutes). */
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Fixed-order block sum of one value per thread: warp sums, then the warps' in order. Every
 * thread calls it and gets the sum; red holds kBwdThreads / 32 floats. */
__device__ __forceinline__ float block_sum(float v, float * red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
    for (int j = 0; j < kBwdThreads / 32; ++j) s += red[j];
    __syncthreads();
    return s;
}

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
