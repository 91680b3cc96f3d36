/*
 * mamba3_siso.cu — CUDA Mamba-3 SISO: the chunked core forward (cumulative angles in,
 * spec §2.3, §3.6), the combined forward (raw angles in, the angle cumsum fused, spec §2.4)
 * and the decode step (spec §2.6, §3.4).
 *
 * Forward. The work is cut on the host into chunks of kC = 64 tokens that restart at every
 * sequence start (a batch row, or a varlen sequence); the chunked form is exact for any
 * cut (spec §3.6), so params->chunk_size is not used. Kernels, in stream order:
 *   0. angle_sum_kernel    (combined op) per (chunk, head, angle): Σ_i π·tanh(raw_i)·dt_i,
 *                          summed token by token in fp32 into a workspace.
 *   1. angle_pass_kernel   (combined op) per (sequence, head, angle): θ entering each chunk,
 *                          θ ← wrap(θ + chunk sum), in place over the sums; final angle state.
 *   2. state_kernel        per (chunk, head, V tile): scalars (λ, γ, σ, the chunk-local
 *                          inclusive cumsum c of adt), θ of every token (wrap(θ_enter + local
 *                          running sum), or the given cumulative angles), k̂, then the chunk's
 *                          contribution s = Vᵀ·diag(σ_j·e^{c_last−c_j})·K̂ (V×K, fp32) and
 *                          c_last, into the workspace.
 *   3. pass_kernel         per (sequence, state element): S ← H_in = S_in + dt_0(1−λ_0)·v_in
 *                          k_inᵀ (spec §3.5; only for a non-empty sequence), then per chunk
 *                          S_enter = S, S ← e^{c_last}·S + s, in place; the final ssm state.
 *   4. output_kernel       per (chunk, head, V tile): q̂, k̂, d_i = q̃_i·k̃_i again, scores
 *                          Q̂K̂ᵀ, P_ij = score·e^{c_i−c_j}·σ_j (j < i), P_ii = D + γ_i·d_i (the
 *                          diagonal never uses σ: trap 3), Y = diag(e^{c})·Q̂·S_enterᵀ + P·V,
 *                          out = Y·silu(z); the last chunk of a sequence writes k̂ and v of its
 *                          last token as the final k / v states.
 *   5. empty_kernel        final k / v states of empty sequences (= initial, or zeros).
 * No decay exponent is clamped: e^{c_i−c_j} is evaluated as written.
 *
 * fp16/bf16 with K ≤ 128 replace kernels 2 and 4 by fast_state_kernel / fast_output_kernel
 * (mma.sync from ldmatrix, results in registers; see "the tensor-core path" below); the one
 * predicate use_fast_path() chooses.
 *
 * Versions (siso_version(), env SSMOPS_CUDA_SISO_FAST read on every call): 0 = the portable
 * kernels; 2 (=1) = the v2 tensor-core kernels with angle_pass_kernel; 3 (=2) =
 * angle_scan_kernel (kernel 1 with the chunks scanned in parallel) and, where the fast path
 * applies, the VER = 3 instances of the fast kernels: θ by token groups (chunk_theta_v3),
 * biases loaded once per thread, the entering state prefetched into registers
 * (load_state_regs); 4 (=3) = v3 plus pass_kernel_v4 (8 chunks of loads
 * in flight, 16-byte pieces), angle_sum_kernel_v4 (16-byte angle rows) and the VER = 4
 * instances: every global input of a block requested at its start (q/k/z rows by cp.async,
 * raw angles in 16-byte loads), sin/cos once per (token, angle) in the output block, 16-bit
 * outputs staged in shared memory and stored in 16-byte row pieces; 5 (=4) = v4 with the VER = 5 instances of the fast kernels: the same work in fewer instructions per
 * element (cp_rows_v5, load_state_regs_v5, load_row8, float4 reads of the sin/cos table, whole
 * score tiles, the shared-memory epilogue) and fast hardware math where the fp16/bf16 bars
 * leave room (ex2_approx decays in the mask, silu_fast, and in the combined op tanh_fast and
 * sincos_wrapped_fast of the wrapped θ: absolute errors ~1e-6); 6 (=5) = v5 with
 * fast_output_kernel_v6 (8 warps per block; see there) where v5's shared-memory epilogue
 * applies; 7 (=6) = v6 with fast_output_kernel_v7 (the three products on Hopper wgmma; see
 * there) where siso_v7_applies, v6's kernels elsewhere; 8 (unset, =7: the default) = v7 with the
 * chunk scalars and θ computed once by chunk_prep_kernel where the v6 state and v7 output kernels
 * both run (v7's bytes).
 * v2 and v3 agree within fp32 rounding (θ's sums associate differently); v4 does v3's
 * arithmetic operation for operation; v5 agrees with v4 within those approximations, v6 with
 * v5 within fp32 rounding; each is bitwise deterministic.
 *
 * Arithmetic: fp16/bf16 (v's dtype) run the three matrix products on the tensor cores (WMMA
 * 16x16x16, HMMA in SASS) with fp32 accumulation. Operands computed in fp32 (q̂, k̂, the
 * weighted k̂, P, the passed state) are split into a rounded part and the rounded remainder,
 * and each product of two such operands takes three MMAs (hi·hi + lo·hi + hi·lo), so the
 * results stay close to fp32 accuracy; v is exact in its own dtype. fp32 (and f64) inputs
 * run plain fp32 FFMA. θ, scalars, decays and states are fp32 throughout; sin/cos/tanh/exp
 * are the accurate CUDA functions (not the __ intrinsics), except v5's listed above.
 *
 * Decode step: one block per (head, row); θ, q̂, k̂ and the scalars in shared memory, then
 * one pass over the V×K fp32 state (a warp per state row; float4 loads/stores when both
 * pools are fp32 with unit K stride and 16-byte aligned rows, the generic strided path
 * otherwise): h' = α·h + β·v_prev k_prevᵀ + γ·v k̂ᵀ, y = h'·q̂ (a fixed warp reduction),
 * out = (y + D·v)·silu(z). Old k/v/θ states are read before any final is written, so the
 * final pools may be the input pools (in place). That is step v1; step v2 (step2_kernel, for
 * fp32 vectorised pools when there are few (row, head) blocks: see step_wants_v1) is
 * described there.
 *
 * Any strides (stride 0 too, e.g. angles broadcast over heads) and any float dtype per
 * tensor: every load goes through the strides and converts. Limits: K ≤ 256 (UNSUPPORTED
 * beyond), H ≤ 65535, sequences ≤ 65535. Results are bitwise identical across runs (no
 * atomics, fixed summation orders).
 */
#include <mma.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

extern "C" {
#include "../../core/ssmi.h"
}
#include "../common/cuda_common.cuh"
#include "../common/mma.cuh"
#include "../ssmi_cuda.h"
#include "../common/wgmma.cuh"

namespace {

using namespace nvcuda;

using namespace ssmi_mma; /* M_F32/M_F16/M_BF16, mma16816, ldsm4, cp_async16, ... */
const int kThreads = 256; /* forward kernels: 8 warps */
const int kC = 64;        /* internal chunk (tokens)  */
const int kTV = 64;       /* V tile (state rows)      */
const int kMaxK = 256;

const float kPi = 3.14159265358979323846f;
const float kTwoPiHi = 6.28318548202514648438f;
const float kTwoPiLo = -1.74845553146951715e-07f;
const float kInvTwoPi = 0.159154943091895335769f;

template <int MODE>
struct cfg;
template <>
struct cfg<M_F32> {
    typedef float     T;
    static const bool SPLIT = false;
    static const int  PAD = 4; /* leading-dimension padding in elements (16 bytes) */
};
template <>
struct cfg<M_F16> {
    typedef __half    T;
    static const bool SPLIT = true;
    static const int  PAD = 8;
};
template <>
struct cfg<M_BF16> {
    typedef __nv_bfloat16 T;
    static const bool     SPLIT = true;
    static const int      PAD = 8;
};

__device__ __forceinline__ void  to_t(float v, float * o) { *o = v; }
__device__ __forceinline__ void  to_t(float v, __half * o) { *o = __float2half_rn(v); }
__device__ __forceinline__ void  to_t(float v, __nv_bfloat16 * o) { *o = __float2bfloat16_rn(v); }
__device__ __forceinline__ float from_t(float v) { return v; }
__device__ __forceinline__ float from_t(__half v) { return __half2float(v); }
__device__ __forceinline__ float from_t(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float from_t(double v) { return (float)v; }

/* hi[i] = v rounded to T and, in the 16-bit modes, lo[i] = the rounded remainder (lo is
 * not touched, and may be NULL, in fp32 mode). */
template <int MODE>
__device__ __forceinline__ void store_split(float v, typename cfg<MODE>::T * hi, typename cfg<MODE>::T * lo, int i) {
    to_t(v, &hi[i]);
    if (cfg<MODE>::SPLIT) to_t(v - from_t(hi[i]), &lo[i]);
}

/* 8 values of type T (16 bytes) as fp32, exactly. */
template <int MODE>
__device__ __forceinline__ void unpack8(float (&x)[8], const uint4 u) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float2 f = t2<MODE>::unpack(w[e]);
        x[2 * e] = f.x, x[2 * e + 1] = f.y;
    }
}

__host__ __device__ inline size_t align128(size_t v) { return (v + 127) & ~(size_t)127; }
__host__ __device__ inline int    round16(int v) { return (v + 15) & ~15; }

/* wrap(x) = x − 2π·floor(x/2π) with 2π in two parts; a result that rounds below 0 moves up
 * by 2π (the CPU backend's arithmetic). */
__device__ __forceinline__ float wrap2pi(float x) {
    const float turns = floorf(x * kInvTwoPi);
    float       r = fmaf(-turns, kTwoPiHi, x);
    r = fmaf(-turns, kTwoPiLo, r);
    return r < 0.0f ? r + kTwoPiHi : r;
}

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* ---- the host plan -------------------------------------------------------------------------- */

/* One chunk: tokens [t0, t0 + len) of batch row `row`, sequence `seq`. */
struct m3_chunk {
    long long t0;
    int       row, len, seq;
    int       has_next; /* token t0 + len belongs to the same sequence (σ of the last token) */
    int       last;     /* last chunk of its sequence                                       */
    int       first;    /* first chunk of its sequence                                      */
};
/* One sequence: its chunks [first, first + count), first token t0 of row `row`, len tokens. */
struct m3_seg {
    long long t0;
    int       row, len, first, count;
};

/* ---- kernel arguments ------------------------------------------------------------------------ */

struct m3_out {
    void *    p;
    int       dtype, present;
    long long s[4];
};

m3_out out_of(const ssm_tensor * t) {
    m3_out o;
    memset(&o, 0, sizeof o);
    o.present = ssmi_present(t);
    if (!o.present) return o;
    o.p = t->data;
    o.dtype = t->dtype;
    for (int i = 0; i < t->ndim && i < 4; ++i) o.s[i] = t->strides[i];
    return o;
}

struct m3_fwd_args {
    const m3_chunk * chunks;
    const m3_seg *   segs;
    int              H, G, K, Kp, V, A, NS;
    int              fused, has_d, has_z, has_states;
    int              vq, vk, vv, vz, vout; /* fast path: 16-byte q/k/v rows, z/out pairs       */
    int              vang, vz16, vo16;     /* v4: 16-byte rows of type T: angles, z, out          */
    int              sct;                  /* v4 output kernel: sin/cos table (fast_smem::sn)     */
    ssmi_cu_view     q, k, v, adt, dt, trap, qb, kb, ang, d, z; /* inputs                        */
    ssmi_cu_view     ssm_in, k_in, v_in, ang_in;                /* initial states                */
    float *          states;  /* (W, H, V, K): chunk contributions, then entering states          */
    float *          lastcum; /* (W, H) c_last of each chunk                                     */
    float *          theta0;  /* (W, H, A) combined op: chunk angle sums, then θ entering        */
    float *          prep;    /* version 8: (W, H, prep_floats(A)) chunk scalars and θ, or NULL      */
    m3_out           out, fin_ssm, fin_k, fin_v, fin_ang;
};

__device__ __forceinline__ float ld2(const ssmi_cu_view & t, long long i0, long long i1) {
    return ssmi_cu_ld(t.p, t.dtype, i0 * t.s[0] + i1 * t.s[1]);
}
__device__ __forceinline__ float ld3(const ssmi_cu_view & t, long long i0, long long i1, long long i2) {
    return ssmi_cu_ld(t.p, t.dtype, i0 * t.s[0] + i1 * t.s[1] + i2 * t.s[2]);
}
__device__ __forceinline__ float ld4(const ssmi_cu_view & t, long long i0, long long i1, long long i2, long long i3) {
    return ssmi_cu_ld(t.p, t.dtype, i0 * t.s[0] + i1 * t.s[1] + i2 * t.s[2] + i3 * t.s[3]);
}
__device__ __forceinline__ void st3(const m3_out & o, long long i0, long long i1, long long i2, float v) {
    ssmi_cu_st(o.p, o.dtype, i0 * o.s[0] + i1 * o.s[1] + i2 * o.s[2], v);
}
__device__ __forceinline__ void st4(const m3_out & o, long long i0, long long i1, long long i2, long long i3, float v) {
    ssmi_cu_st(o.p, o.dtype, i0 * o.s[0] + i1 * o.s[1] + i2 * o.s[2] + i3 * o.s[3], v);
}

/* ---- block-wide matrix product ----------------------------------------------------------------- */

/* C (M×N fp32, ldc) = [C +] A·B with A (M×K), B (K×N) in shared memory of type T, plus
 * Alo·B and A·Blo when the remainders are given (16-bit modes). AROW: A(i,k) = A[i·lda + k],
 * else A[k·lda + i]; BROW: B(k,j) = B[k·ldb + j], else B[j·ldb + k]. M, N, K multiples of
 * 16. Ends with a barrier. */
template <int MODE, bool AROW, bool BROW>
__device__ void block_gemm(float * C, int ldc, const typename cfg<MODE>::T * A, const typename cfg<MODE>::T * Alo,
                           int lda, const typename cfg<MODE>::T * B, const typename cfg<MODE>::T * Blo, int ldb, int M,
                           int N, int K, bool accumulate) {
    typedef typename cfg<MODE>::T T;
    if constexpr (MODE == M_F32) {
        (void)Alo;
        (void)Blo;
        for (int o = threadIdx.x; o < M * N; o += blockDim.x) {
            const int i = o / N, j = o - (o / N) * N;
            float     s = accumulate ? C[i * ldc + j] : 0.0f;
            for (int k = 0; k < K; ++k) {
                const float a = AROW ? A[i * lda + k] : A[k * lda + i];
                const float b = BROW ? B[k * ldb + j] : B[j * ldb + k];
                s = fmaf(a, b, s);
            }
            C[i * ldc + j] = s;
        }
    } else {
        typedef typename std::conditional<AROW, wmma::row_major, wmma::col_major>::type LA;
        typedef typename std::conditional<BROW, wmma::row_major, wmma::col_major>::type LB;
        const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
        const int tn = N / 16, tiles = (M / 16) * tn;
        for (int t = warp; t < tiles; t += nwarps) {
            const int                                            ti = t / tn, tj = t - (t / tn) * tn;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            float *                                              cp = C + ti * 16 * ldc + tj * 16;
            if (accumulate)
                wmma::load_matrix_sync(acc, cp, ldc, wmma::mem_row_major);
            else
                wmma::fill_fragment(acc, 0.0f);
            for (int k = 0; k < K; k += 16) {
                const long long aoff = AROW ? (long long)ti * 16 * lda + k : (long long)k * lda + ti * 16;
                const long long boff = BROW ? (long long)k * ldb + tj * 16 : (long long)tj * 16 * ldb + k;
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb;
                wmma::load_matrix_sync(fa, A + aoff, lda);
                wmma::load_matrix_sync(fb, B + boff, ldb);
                wmma::mma_sync(acc, fa, fb, acc);
                if (Alo != nullptr) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> fl;
                    wmma::load_matrix_sync(fl, Alo + aoff, lda);
                    wmma::mma_sync(acc, fl, fb, acc);
                }
                if (Blo != nullptr) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fl;
                    wmma::load_matrix_sync(fl, Blo + boff, ldb);
                    wmma::mma_sync(acc, fa, fl, acc);
                }
            }
            wmma::store_matrix_sync(cp, acc, ldc, wmma::mem_row_major);
        }
    }
    __syncthreads();
}

/* ---- per-chunk preprocessing (shared by the state and output kernels) -------------------------- */

/* Scalars of a chunk in shared memory: dtv/lam [kC+1] (entry L = the next token's, or 0 at
 * the sequence end), cm = inclusive cumsum of adt, gam = dt·λ, sig = γ + γ'. */
struct m3_scal {
    float *dtv, *lam, *cm, *gam, *sig;
};

__device__ void chunk_scalars(const m3_fwd_args & P, const m3_chunk & ch, int h, const m3_scal & s) {
    const int L = ch.len, nload = ch.has_next ? L + 1 : L;
    for (int i = threadIdx.x; i <= L; i += blockDim.x) {
        if (i < nload) {
            s.dtv[i] = ld3(P.dt, ch.row, h, ch.t0 + i);
            s.lam[i] = sigmoidf(ld3(P.trap, ch.row, h, ch.t0 + i));
        } else {
            s.dtv[i] = 0.0f;
            s.lam[i] = 0.0f;
        }
    }
    if (threadIdx.x < 32) { /* warp 0: inclusive scan of adt over L ≤ 64 tokens, fixed order */
        const int lane = threadIdx.x;
        float     a = lane < L ? ld3(P.adt, ch.row, h, ch.t0 + lane) : 0.0f;
        float     b = lane + 32 < L ? ld3(P.adt, ch.row, h, ch.t0 + lane + 32) : 0.0f;
#pragma unroll
        for (int off = 1; off < 32; off *= 2) {
            const float ya = __shfl_up_sync(0xffffffffu, a, off);
            const float yb = __shfl_up_sync(0xffffffffu, b, off);
            if (lane >= off) a += ya, b += yb;
        }
        b += __shfl_sync(0xffffffffu, a, 31);
        s.cm[lane] = a;
        s.cm[lane + 32] = b;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < L; i += blockDim.x) {
        const float g = s.dtv[i] * s.lam[i];
        s.gam[i] = g;
        s.sig[i] = g + s.dtv[i + 1] * (1.0f - s.lam[i + 1]);
    }
    __syncthreads();
}

/* θ of every token of the chunk, th[i·A + m]: the given cumulative angles, or (combined op)
 * wrap(θ_enter + Σ_{s≤i} π·tanh(raw_s)·dt_s) with the running sum in the order of
 * angle_sum_kernel. */
__device__ void chunk_theta(const m3_fwd_args & P, const m3_chunk & ch, int w, int h, const float * dtv, float * th) {
    const int L = ch.len, A = P.A;
    if (A == 0) return;
    for (int o = threadIdx.x; o < L * A; o += blockDim.x) {
        const int   i = o / A, m = o - (o / A) * A;
        const float raw = ld4(P.ang, ch.row, ch.t0 + i, h, m);
        th[o] = P.fused ? (kPi * tanhf(raw)) * dtv[i] : raw;
    }
    __syncthreads();
    if (P.fused) {
        for (int m = threadIdx.x; m < A; m += blockDim.x) {
            const float base = P.theta0[((long long)w * P.H + h) * A + m];
            float       run = 0.0f;
            for (int i = 0; i < L; ++i) {
                run += th[i * A + m];
                th[i * A + m] = wrap2pi(base + run);
            }
        }
        __syncthreads();
    }
}

/* v3 of chunk_theta for the fast kernels: the same θ, with the walk over the chunk's tokens
 * cut into NG groups per angle (NG·A ≤ blockDim, NG ≤ 16): thread (g, m) sums its group's
 * terms, then adds the sums of the groups before it (in group order) and walks its group
 * again writing wrap(θ_enter + running sum). Same values as chunk_theta within fp32
 * rounding (the running sum is associated by groups). part: NG·A ≤ kPartMax floats. */
const int kPartMax = 128;
__device__ void theta_walk(const m3_fwd_args & P, const m3_chunk & ch, int w, int h, float * th, float * part);
__device__ void chunk_theta_v3(const m3_fwd_args & P, const m3_chunk & ch, int w, int h, const float * dtv, float * th,
                               float * part) {
    const int L = ch.len, A = P.A;
    if (A == 0) return;
    /* the terms, 8 independent loads in flight per thread per round */
    const int LA = L * A, nt = blockDim.x;
    for (int o0 = threadIdx.x; o0 < LA; o0 += 8 * nt) {
        float raw[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int o = o0 + u * nt, i = o / A, m = o - (o / A) * A;
            raw[u] = o < LA ? ld4(P.ang, ch.row, ch.t0 + i, h, m) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int o = o0 + u * nt, i = o / A;
            if (o < LA) th[o] = P.fused ? (kPi * tanhf(raw[u])) * dtv[i] : raw[u];
        }
    }
    __syncthreads();
    if (P.fused) theta_walk(P, ch, w, h, th, part);
}

/* The walk of chunk_theta_v3 (fused θ only): th holds the terms; NG token groups per angle. */
__device__ void theta_walk(const m3_fwd_args & P, const m3_chunk & ch, int w, int h, float * th, float * part) {
    const int L = ch.len, A = P.A;
    int NG = 1;
    while (NG < 16 && 2 * NG * A <= (int)blockDim.x && 2 * NG * A <= kPartMax) NG *= 2;
    const int span = kC / NG; /* kC = 64 and NG ≤ 16: span ≥ 4 */
    if (NG > 1) {
        for (int o = threadIdx.x; o < NG * A; o += blockDim.x) {
            const int g = o / A, m = o - g * A, i1 = min(L, (g + 1) * span);
            float     run = 0.0f;
            for (int i = g * span; i < i1; ++i) run += th[i * A + m];
            part[o] = run;
        }
        __syncthreads();
    }
    for (int o = threadIdx.x; o < NG * A; o += blockDim.x) {
        const int   g = o / A, m = o - g * A, i1 = min(L, (g + 1) * span);
        const float base = P.theta0[((long long)w * P.H + h) * A + m];
        float       run = 0.0f;
        for (int gg = 0; gg < g; ++gg) run += part[gg * A + m];
        for (int i = g * span; i < i1; ++i) {
            run += th[i * A + m];
            th[i * A + m] = wrap2pi(base + run);
        }
    }
    __syncthreads();
}

/* q̂ (when qh) and k̂ rows of the chunk into shared memory (rows ≥ L and columns ≥ K zero),
 * split hi/lo; k̂ row j times kscale[j] when kscale is given. One thread per (token, pair).
 * With fin_k (the sequence's last chunk), the fp32 k̂ of the last token is the final k state. */
template <int MODE>
__device__ void prep_qk(const m3_fwd_args & P, const m3_chunk & ch, int h, const float * th, typename cfg<MODE>::T * qh,
                        typename cfg<MODE>::T * ql, typename cfg<MODE>::T * kh, typename cfg<MODE>::T * kl, int ld,
                        const float * kscale, bool fin_k) {
    const int L = ch.len, half = P.Kp / 2, g = h / P.G;
    for (int o = threadIdx.x; o < kC * half; o += blockDim.x) {
        const int i = o / half, m = o - (o / half) * half, n = 2 * m;
        float     q0 = 0.0f, q1 = 0.0f, k0 = 0.0f, k1 = 0.0f;
        if (i < L && n < P.K) {
            const long long t = ch.t0 + i;
            q0 = ld4(P.q, ch.row, t, g, n) + ld2(P.qb, h, n);
            q1 = ld4(P.q, ch.row, t, g, n + 1) + ld2(P.qb, h, n + 1);
            k0 = ld4(P.k, ch.row, t, g, n) + ld2(P.kb, h, n);
            k1 = ld4(P.k, ch.row, t, g, n + 1) + ld2(P.kb, h, n + 1);
            if (m < P.A) {
                float sn, cs;
                sincosf(th[i * P.A + m], &sn, &cs);
                const float a0 = q0 * cs - q1 * sn, a1 = q0 * sn + q1 * cs;
                const float b0 = k0 * cs - k1 * sn, b1 = k0 * sn + k1 * cs;
                q0 = a0, q1 = a1, k0 = b0, k1 = b1;
            }
            if (fin_k && i == L - 1) {
                st3(P.fin_k, ch.seq, h, n, k0);
                st3(P.fin_k, ch.seq, h, n + 1, k1);
            }
        }
        if (qh != nullptr) {
            store_split<MODE>(q0, qh, ql, i * ld + n);
            store_split<MODE>(q1, qh, ql, i * ld + n + 1);
        }
        const float sc = kscale != nullptr ? kscale[i] : 1.0f;
        store_split<MODE>(k0 * sc, kh, kl, i * ld + n);
        store_split<MODE>(k1 * sc, kh, kl, i * ld + n + 1);
    }
}

/* v rows [0, kC) × columns [p0, p0 + kTV) of the chunk into vs (zeros outside). */
template <int MODE>
__device__ void load_v(const m3_fwd_args & P, const m3_chunk & ch, int h, int p0, typename cfg<MODE>::T * vs, int ld) {
    for (int o = threadIdx.x; o < kC * kTV; o += blockDim.x) {
        const int   i = o / kTV, pp = o - (o / kTV) * kTV, p = p0 + pp;
        const float v = (i < ch.len && p < P.V) ? ld4(P.v, ch.row, ch.t0 + i, h, p) : 0.0f;
        to_t(v, &vs[i * ld + pp]);
    }
}

/* ---- kernels 0, 1: the angle cumsum of the combined op ----------------------------------------- */

/* One thread per (chunk, head, angle) — blockIdx.y covers 128 (head, angle) pairs, adjacent
 * in memory; the loads of 8 tokens are issued before their (in-order) sum. */
__global__ void __launch_bounds__(128) angle_sum_kernel(const m3_fwd_args P) {
    const int      w = blockIdx.x, e = blockIdx.y * blockDim.x + threadIdx.x;
    if (e >= P.H * P.A) return;
    const int      h = e / P.A, m = e - (e / P.A) * P.A;
    const m3_chunk ch = P.chunks[w];
    float          run = 0.0f;
    for (int i0 = 0; i0 < ch.len; i0 += 8) {
        float x[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = i0 + u;
            x[u] = i < ch.len ? (kPi * tanhf(ld4(P.ang, ch.row, ch.t0 + i, h, m))) * ld3(P.dt, ch.row, h, ch.t0 + i)
                              : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u)
            if (i0 + u < ch.len) run += x[u];
    }
    P.theta0[((long long)w * P.H + h) * P.A + m] = run;
}

/* v4 of angle_sum_kernel, when P.vang (angles of v's dtype in 16-byte rows, A % 8 == 0): a
 * thread per (chunk, head, 8 adjacent angles), one 16-byte angle load and one dt load per
 * token, 8 tokens in flight; each angle's sum takes the same terms in the same token order, so
 * the sums are those of angle_sum_kernel bit for bit. */
template <int MODE>
__global__ void __launch_bounds__(128) angle_sum_kernel_v4(const m3_fwd_args P) {
    typedef typename cfg<MODE>::T T;
    const int A8 = P.A / 8, w = blockIdx.x, e = blockIdx.y * blockDim.x + threadIdx.x;
    if (e >= P.H * A8) return;
    const int      h = e / A8, m0 = (e - h * A8) * 8;
    const m3_chunk ch = P.chunks[w];
    const T *      ap = (const T *)P.ang.p + ch.row * P.ang.s[0] + ch.t0 * P.ang.s[1] + h * P.ang.s[2] + m0;
    float          run[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) run[c] = 0.0f;
    for (int i0 = 0; i0 < ch.len; i0 += 8) {
        uint4 raw[8];
        float dtv[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = i0 + u;
            raw[u] = i < ch.len ? __ldg(reinterpret_cast<const uint4 *>(ap + i * P.ang.s[1])) : make_uint4(0u, 0u, 0u, 0u);
            dtv[u] = i < ch.len ? ld3(P.dt, ch.row, h, ch.t0 + i) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            if (i0 + u >= ch.len) break;
            float x[8];
            unpack8<MODE>(x, raw[u]);
#pragma unroll
            for (int c = 0; c < 8; ++c) run[c] += (kPi * tanhf(x[c])) * dtv[u];
        }
    }
    /* (w·H + h)·A + m0 is a multiple of 8 and theta0 is 128-byte aligned */
    float4 * dst = reinterpret_cast<float4 *>(P.theta0 + ((long long)w * P.H + h) * P.A + m0);
    dst[0] = make_float4(run[0], run[1], run[2], run[3]);
    dst[1] = make_float4(run[4], run[5], run[6], run[7]);
}

/* v5 of the angle sums (version 7 on, same condition as v4): v4 had one thread per (chunk, head,
 * 8 angles) walking the chunk's kC tokens, 4 warps per SM at the shape of record (latency-bound on
 * its tanhf chain). Here 8 adjacent lanes share one (chunk, head, 8 angles): lane g sums tokens
 * g·8 … g·8 + 7 in order, then a 3-step xor butterfly adds the 8 partial sums (each step adds two
 * values whose order does not change a float sum, so all 8 lanes hold the same bits and the result
 * is deterministic); lane 0 stores. The sums differ from v4's by fp32 rounding (another
 * association), and are wrapped by the angle scan as before. */
template <int MODE>
__global__ void __launch_bounds__(128) angle_sum_kernel_v5(const m3_fwd_args P) {
    static_assert(kC == 64, "8 lanes of 8 tokens cover one chunk");
    typedef typename cfg<MODE>::T T;
    const int  A8 = P.A / 8, w = blockIdx.x, g = threadIdx.x & 7;
    const int  e = blockIdx.y * (blockDim.x / 8) + (threadIdx.x >> 3);
    const bool live = e < P.H * A8; /* whole 8-lane groups: the butterfly below stays within live lanes */
    const int  h = live ? e / A8 : 0, m0 = live ? (e - h * A8) * 8 : 0;
    const m3_chunk ch = P.chunks[w];
    const T *      ap = (const T *)P.ang.p + ch.row * P.ang.s[0] + ch.t0 * P.ang.s[1] + h * P.ang.s[2] + m0;
    float          run[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) run[c] = 0.0f;
    uint4 raw[8];
    float dtv[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
        const int i = g * 8 + u;
        const bool ok = live && i < ch.len;
        raw[u] = ok ? __ldg(reinterpret_cast<const uint4 *>(ap + i * P.ang.s[1])) : make_uint4(0u, 0u, 0u, 0u);
        dtv[u] = ok ? ld3(P.dt, ch.row, h, ch.t0 + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
        if (g * 8 + u >= ch.len) break;
        float x[8];
        unpack8<MODE>(x, raw[u]);
#pragma unroll
        for (int c = 0; c < 8; ++c) run[c] += (kPi * tanhf(x[c])) * dtv[u];
    }
#pragma unroll
    for (int d = 1; d < 8; d <<= 1)
#pragma unroll
        for (int c = 0; c < 8; ++c) run[c] += __shfl_xor_sync(0xffffffffu, run[c], d);
    if (!live || g != 0) return;
    float4 * dst = reinterpret_cast<float4 *>(P.theta0 + ((long long)w * P.H + h) * P.A + m0);
    dst[0] = make_float4(run[0], run[1], run[2], run[3]);
    dst[1] = make_float4(run[4], run[5], run[6], run[7]);
}

__global__ void __launch_bounds__(128) angle_pass_kernel(const m3_fwd_args P) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= P.H * P.A) return;
    const int    s = blockIdx.y, h = e / P.A, m = e - (e / P.A) * P.A;
    const m3_seg sg = P.segs[s];
    float        th = P.has_states ? ld3(P.ang_in, s, h, m) : 0.0f;
    for (int c = 0; c < sg.count; ++c) {
        float *     slot = &P.theta0[((long long)(sg.first + c) * P.H + h) * P.A + m];
        const float sum = *slot;
        *slot = th;
        th = wrap2pi(th + sum);
    }
    if (P.fin_ang.present) st3(P.fin_ang, s, h, m, th);
}

/* v3: the same θ entering each chunk, with the chunks of a sequence scanned in parallel. One
 * warp per (sequence, head, angle); lane l takes chunk c0 + l of a batch of 32: its sum is
 * wrapped, a Kogge-Stone scan combines them with wrap(a + b) (both in [0, 2π), so every
 * partial stays within fp32 rounding of the sequential walk's), and the batch's total
 * carries to the next batch. θ entering the first chunk is the initial angle state as given
 * (as in angle_pass_kernel); the final angle state is the wrapped carry, or the initial state
 * for an empty sequence. The warp index is uniform per warp, so whole warps exit together. */
__global__ void __launch_bounds__(128) angle_scan_kernel(const m3_fwd_args P) {
    const int lane = threadIdx.x & 31, e = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (e >= P.H * P.A) return;
    const int    s = blockIdx.y, h = e / P.A, m = e - (e / P.A) * P.A;
    const m3_seg sg = P.segs[s];
    float        carry = P.has_states ? ld3(P.ang_in, s, h, m) : 0.0f;
    float *      base = P.theta0 + ((long long)sg.first * P.H + h) * P.A + m; /* read only when count > 0 */
    const long long cs = (long long)P.H * P.A; /* stride between chunks */
    float        next = lane < sg.count ? base[lane * cs] : 0.0f;
    for (int c0 = 0; c0 < sg.count; c0 += 32) {
        const int   c = c0 + lane;
        const float raw = next;
        next = c + 32 < sg.count ? base[(c + 32) * cs] : 0.0f; /* the next batch's load in flight */
        float x = c < sg.count ? wrap2pi(raw) : 0.0f;
#pragma unroll
        for (int off = 1; off < 32; off *= 2) {
            const float y = __shfl_up_sync(0xffffffffu, x, off);
            if (lane >= off) x = wrap2pi(y + x);
        }
        const float excl = __shfl_up_sync(0xffffffffu, x, 1);
        if (c < sg.count) base[c * cs] = lane == 0 ? carry : wrap2pi(carry + excl);
        carry = wrap2pi(carry + __shfl_sync(0xffffffffu, x, 31));
    }
    if (P.fin_ang.present && lane == 0) st3(P.fin_ang, s, h, m, carry);
}

/* ---- kernel 2: chunk state contributions -------------------------------------------------------- */

template <int MODE>
struct state_smem {
    size_t              scal, th, kw, kw_lo, vs, acc, total;
    __host__ __device__ state_smem(int Kp, int A) {
        typedef typename cfg<MODE>::T T;
        const int                     LK = Kp + cfg<MODE>::PAD;
        size_t                        o = 0;
        scal = o;
        o += align128(sizeof(float) * 6 * (kC + 1));
        th = o;
        o += align128(sizeof(float) * kC * (A > 0 ? A : 1));
        kw = o;
        o += align128(sizeof(T) * kC * LK);
        kw_lo = o;
        o += cfg<MODE>::SPLIT ? align128(sizeof(T) * kC * LK) : 0;
        vs = o;
        o += align128(sizeof(T) * kC * (kTV + cfg<MODE>::PAD));
        acc = o;
        o += align128(sizeof(float) * kTV * (Kp + 4));
        total = o;
    }
};

/* Version 8: chunk_prep_kernel computes a chunk's scalars (chunk_scalars: dtv, lam, cm, gam, sig,
 * kC + 1 each) and θ (chunk_theta_v4: kC × A) once per (chunk, head) into P.prep, and the state and
 * output kernels copy them into their shared-memory regions instead of computing them twice. The
 * slot of (w, h): kPrepScal floats of scalars (the five arrays of kC + 1 floats but the last, unused
 * sig[kC]: the copy ends exactly where the kernels' own arrays (wj, ecm) begin), then kC·A of θ (rows
 * ≥ the chunk length zero). Every slot and every piece is 16-byte aligned. */
const int kPrepScal = 5 * (kC + 1) - 1; /* sig[kC] is never written or read: 81 whole 16-byte pieces */
static_assert(kPrepScal % 4 == 0, "the scalars are copied in 16-byte pieces");
__host__ __device__ __forceinline__ long long prep_floats(int A) { return kPrepScal + (long long)kC * A; }

/* The cp.async copy of slot (w, h) into scal (the carve_scal base) and th, NT threads. */
template <int NT>
__device__ __forceinline__ void cp_prep(const m3_fwd_args & P, int w, int h, float * scal, float * th) {
    const float * src = P.prep + ((long long)w * P.H + h) * prep_floats(P.A);
    const int     ns = kPrepScal / 4, n = ns + kC * P.A / 4;
    for (int o = threadIdx.x; o < n; o += NT) {
        if (o < ns)
            cp_async16(scal + 4 * o, src + 4 * o);
        else
            cp_async16(th + 4 * (o - ns), src + kPrepScal + 4 * (o - ns));
    }
}

__device__ m3_scal carve_scal(float * base) {
    m3_scal s;
    s.dtv = base;
    s.lam = base + (kC + 1);
    s.cm = base + 2 * (kC + 1);
    s.gam = base + 3 * (kC + 1);
    s.sig = base + 4 * (kC + 1);
    return s;
}

template <int MODE>
__global__ void __launch_bounds__(kThreads) state_kernel(const m3_fwd_args P) {
    typedef typename cfg<MODE>::T T;
    extern __shared__ __align__(128) unsigned char smem[];
    const state_smem<MODE>                         Ly(P.Kp, P.A);
    const m3_scal                                  sc = carve_scal((float *)(smem + Ly.scal));
    float *                                        wj = sc.sig + (kC + 1); /* sixth scalar row */
    float *                                        th = (float *)(smem + Ly.th);
    T *                                            kw = (T *)(smem + Ly.kw);
    T *                                            kw_lo = cfg<MODE>::SPLIT ? (T *)(smem + Ly.kw_lo) : nullptr;
    T *                                            vs = (T *)(smem + Ly.vs);
    float *                                        acc = (float *)(smem + Ly.acc);
    const int                                      LK = P.Kp + cfg<MODE>::PAD, LV = kTV + cfg<MODE>::PAD, LA = P.Kp + 4;

    const int      w = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * kTV;
    const m3_chunk ch = P.chunks[w];
    chunk_scalars(P, ch, h, sc);
    const float cl = sc.cm[ch.len - 1];
    for (int j = threadIdx.x; j < kC; j += blockDim.x) wj[j] = j < ch.len ? expf(cl - sc.cm[j]) * sc.sig[j] : 0.0f;
    if (blockIdx.z == 0 && threadIdx.x == 0) P.lastcum[(long long)w * P.H + h] = cl;
    chunk_theta(P, ch, w, h, sc.dtv, th);
    __syncthreads(); /* wj */
    prep_qk<MODE>(P, ch, h, th, nullptr, nullptr, kw, kw_lo, LK, wj, false);
    load_v<MODE>(P, ch, h, p0, vs, LV);
    __syncthreads();
    /* acc (p × n) = Vᵀ (p × j) · (diag(w)·K̂) (j × n) */
    block_gemm<MODE, false, true>(acc, LA, vs, nullptr, LV, kw, kw_lo, LK, kTV, P.Kp, kC, false);
    float *   dst = P.states + ((long long)w * P.H + h) * P.V * P.K;
    const int np = min(kTV, P.V - p0);
    for (int o = threadIdx.x; o < np * P.K; o += blockDim.x) {
        const int pp = o / P.K, n = o - (o / P.K) * P.K;
        dst[(long long)(p0 + pp) * P.K + n] = acc[pp * LA + n];
    }
}

/* ---- kernel 3: state passing --------------------------------------------------------------------- */

__global__ void __launch_bounds__(kThreads) pass_kernel(const m3_fwd_args P) {
    const long long vk = (long long)P.V * P.K, hvk = P.H * vk;
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= hvk) return;
    const int    s = blockIdx.y;
    const m3_seg sg = P.segs[s];
    const int    h = (int)(e / vk), p = (int)((e % vk) / P.K), n = (int)(e % P.K);
    float        st = 0.0f;
    if (P.has_states) {
        st = ld4(P.ssm_in, s, h, p, n);
        if (sg.len > 0) { /* H_in = S_in + dt_0(1−λ_0)·v_in k_inᵀ (spec §3.5) */
            const float c0 = ld3(P.dt, sg.row, h, sg.t0) * (1.0f - sigmoidf(ld3(P.trap, sg.row, h, sg.t0)));
            st += (c0 * ld3(P.k_in, s, h, n)) * ld3(P.v_in, s, h, p);
        }
    }
    /* the next chunk's contribution is loaded before this chunk's entering state is stored */
    float local = sg.count > 0 ? P.states[(long long)sg.first * hvk + e] : 0.0f;
    for (int c = 0; c < sg.count; ++c) {
        const long long w = sg.first + c;
        const float     next = c + 1 < sg.count ? P.states[(w + 1) * hvk + e] : 0.0f;
        const float     decay = expf(P.lastcum[w * P.H + h]);
        P.states[w * hvk + e] = st;
        st = decay * st + local;
        local = next;
    }
    if (P.fin_ssm.present) st4(P.fin_ssm, s, h, p, n, st);
}

/* v4 of pass_kernel: per element the same recurrence in the same expressions (S_enter stored,
 * then S ← e^{c_last}·S + s), so the results are bitwise those of pass_kernel; what changes is
 * when the operands arrive: the contributions and decays of kPassBatch chunks are loaded
 * before any of them is used (pass_kernel: one chunk ahead, a DRAM round trip per chunk in a
 * chain of up to 128), and NV = 4 adjacent elements of a state row per thread when K % 4 == 0
 * (16-byte loads and stores: the workspace is 128-byte aligned and H·V·K, p·K and n are then
 * multiples of 4), NV = 1 otherwise. */
const int kPassBatch = 8;
template <int NV>
__global__ void __launch_bounds__(kThreads) pass_kernel_v4(const m3_fwd_args P) {
    const long long vk = (long long)P.V * P.K, hvk = P.H * vk;
    const long long e = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * NV;
    if (e >= hvk) return;
    const int    s = blockIdx.y;
    const m3_seg sg = P.segs[s];
    const int    h = (int)(e / vk), p = (int)((e % vk) / P.K), n = (int)(e % P.K);
    float        st[NV];
#pragma unroll
    for (int v = 0; v < NV; ++v) st[v] = 0.0f;
    if (P.has_states) {
        const bool add = sg.len > 0; /* H_in = S_in + dt_0(1−λ_0)·v_in k_inᵀ (spec §3.5) */
        const float c0 = add ? ld3(P.dt, sg.row, h, sg.t0) * (1.0f - sigmoidf(ld3(P.trap, sg.row, h, sg.t0))) : 0.0f;
        const float vin = add ? ld3(P.v_in, s, h, p) : 0.0f;
#pragma unroll
        for (int v = 0; v < NV; ++v) {
            st[v] = ld4(P.ssm_in, s, h, p, n + v);
            if (add) st[v] += (c0 * ld3(P.k_in, s, h, n + v)) * vin;
        }
    }
    for (int k0 = 0; k0 < sg.count; k0 += kPassBatch) {
        float loc[kPassBatch][NV], dec[kPassBatch];
#pragma unroll
        for (int u = 0; u < kPassBatch; ++u) {
            const long long w = (long long)sg.first + k0 + u;
            const bool      ok = k0 + u < sg.count;
            dec[u] = ok ? expf(P.lastcum[w * P.H + h]) : 0.0f;
            if constexpr (NV == 4) {
                const float4 f = ok ? *reinterpret_cast<const float4 *>(P.states + w * hvk + e)
                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                loc[u][0] = f.x, loc[u][1] = f.y, loc[u][2] = f.z, loc[u][3] = f.w;
            } else {
                loc[u][0] = ok ? P.states[w * hvk + e] : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < kPassBatch; ++u) {
            if (k0 + u >= sg.count) break;
            float * dst = P.states + ((long long)sg.first + k0 + u) * hvk + e;
            if constexpr (NV == 4)
                *reinterpret_cast<float4 *>(dst) = make_float4(st[0], st[1], st[2], st[3]);
            else
                dst[0] = st[0];
#pragma unroll
            for (int v = 0; v < NV; ++v) st[v] = dec[u] * st[v] + loc[u][v];
        }
    }
    if (P.fin_ssm.present)
#pragma unroll
        for (int v = 0; v < NV; ++v) st4(P.fin_ssm, s, h, p, n + v, st[v]);
}

/* v5 of the pass (version 7 on, K % 4 == 0): pass_kernel_v4<4>'s recurrence in the same
 * expressions (bitwise the same results), with two changes measured on the H200 at the shape of
 * record, where v4 took 2 waves of 16 serial batch round trips each: (1) a rolling prefetch of
 * kPassAhead chunks (the load of chunk c + kPassAhead is issued as chunk c is consumed, so loads
 * stay in flight across batch boundaries; the decay's expf is taken when it is used, not when
 * its load is issued), (2) 64 registers (4 blocks of 256 threads per SM), so that H·V·K/4 threads
 * of one sequence fit one wave on 132 SMs up to H·V·K = 540k. */
const int kPassAhead = 4;
__global__ void __launch_bounds__(kThreads, 4) pass_kernel_v5(const m3_fwd_args P) {
    const long long vk = (long long)P.V * P.K, hvk = P.H * vk;
    const long long e = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (e >= hvk) return;
    const int    s = blockIdx.y;
    const m3_seg sg = P.segs[s];
    const int    h = (int)(e / vk), p = (int)((e % vk) / P.K), n = (int)(e % P.K);
    float        st[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (P.has_states) {
        const bool add = sg.len > 0; /* H_in = S_in + dt_0(1−λ_0)·v_in k_inᵀ (spec §3.5) */
        const float c0 = add ? ld3(P.dt, sg.row, h, sg.t0) * (1.0f - sigmoidf(ld3(P.trap, sg.row, h, sg.t0))) : 0.0f;
        const float vin = add ? ld3(P.v_in, s, h, p) : 0.0f;
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            st[v] = ld4(P.ssm_in, s, h, p, n + v);
            if (add) st[v] += (c0 * ld3(P.k_in, s, h, n + v)) * vin;
        }
    }
    float *       base = P.states + (long long)sg.first * hvk + e;
    const float * lc = P.lastcum + (long long)sg.first * P.H + h;
    float4        loc[kPassAhead];
    float         cum[kPassAhead];
#pragma unroll
    for (int u = 0; u < kPassAhead; ++u) {
        const bool ok = u < sg.count;
        loc[u] = ok ? *reinterpret_cast<const float4 *>(base + u * hvk) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        cum[u] = ok ? lc[(long long)u * P.H] : 0.0f;
    }
    for (int c0 = 0; c0 < sg.count; c0 += kPassAhead) {
#pragma unroll
        for (int u = 0; u < kPassAhead; ++u) {
            const int c = c0 + u;
            if (c >= sg.count) break;
            const float4 l = loc[u];
            const float  decay = expf(cum[u]);
            if (c + kPassAhead < sg.count) { /* refill this slot kPassAhead chunks ahead */
                loc[u] = *reinterpret_cast<const float4 *>(base + (long long)(c + kPassAhead) * hvk);
                cum[u] = lc[(long long)(c + kPassAhead) * P.H];
            }
            *reinterpret_cast<float4 *>(base + (long long)c * hvk) = make_float4(st[0], st[1], st[2], st[3]);
            st[0] = decay * st[0] + l.x;
            st[1] = decay * st[1] + l.y;
            st[2] = decay * st[2] + l.z;
            st[3] = decay * st[3] + l.w;
        }
    }
    if (P.fin_ssm.present)
#pragma unroll
        for (int v = 0; v < 4; ++v) st4(P.fin_ssm, s, h, p, n + v, st[v]);
}

/* ---- kernel 4: outputs ----------------------------------------------------------------------------- */

template <int MODE>
struct out_smem {
    size_t              scal, th, qh, ql, ks, ks_lo, sc, ph, pl, vs, total;
    __host__ __device__ out_smem(int Kp, int A) {
        typedef typename cfg<MODE>::T T;
        const bool                    sp = cfg<MODE>::SPLIT;
        const int                     LK = Kp + cfg<MODE>::PAD;
        const size_t                  rows = kC > kTV ? kC : kTV;
        size_t                        o = 0;
        scal = o;
        o += align128(sizeof(float) * 8 * (kC + 1));
        th = o;
        o += align128(sizeof(float) * kC * (A > 0 ? A : 1));
        qh = o;
        o += align128(sizeof(T) * kC * LK);
        ql = o;
        o += sp ? align128(sizeof(T) * kC * LK) : 0;
        ks = o;
        o += align128(sizeof(T) * rows * LK); /* K̂, then the entering state tile */
        ks_lo = o;
        o += sp ? align128(sizeof(T) * rows * LK) : 0;
        sc = o;
        o += align128(sizeof(float) * kC * (kC + 4)); /* scores, then the output tile (kTV == kC) */
        ph = o;
        o += align128(sizeof(T) * kC * (kC + cfg<MODE>::PAD));
        pl = o;
        o += sp ? align128(sizeof(T) * kC * (kC + cfg<MODE>::PAD)) : 0;
        vs = o;
        o += align128(sizeof(T) * kC * (kTV + cfg<MODE>::PAD));
        total = o;
    }
};

template <int MODE>
__global__ void __launch_bounds__(kThreads) output_kernel(const m3_fwd_args P) {
    typedef typename cfg<MODE>::T T;
    const bool                    SP = cfg<MODE>::SPLIT;
    extern __shared__ __align__(128) unsigned char smem[];
    const out_smem<MODE>                           Ly(P.Kp, P.A);
    const m3_scal                                  sc = carve_scal((float *)(smem + Ly.scal));
    float *                                        ecm = sc.sig + (kC + 1);
    float *                                        dd = ecm + (kC + 1);
    float *                                        th = (float *)(smem + Ly.th);
    T *                                            qh = (T *)(smem + Ly.qh);
    T *                                            ql = SP ? (T *)(smem + Ly.ql) : nullptr;
    T *                                            ks = (T *)(smem + Ly.ks);
    T *                                            ks_lo = SP ? (T *)(smem + Ly.ks_lo) : nullptr;
    float *                                        scr = (float *)(smem + Ly.sc);
    T *                                            ph = (T *)(smem + Ly.ph);
    T *                                            pl = SP ? (T *)(smem + Ly.pl) : nullptr;
    T *                                            vs = (T *)(smem + Ly.vs);
    const int LK = P.Kp + cfg<MODE>::PAD, LP = kC + cfg<MODE>::PAD, LV = kTV + cfg<MODE>::PAD;
    const int LF = kC + 4;

    const int      w = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * kTV;
    const m3_chunk ch = P.chunks[w];
    const int      L = ch.len, g = h / P.G;
    chunk_scalars(P, ch, h, sc);
    for (int i = threadIdx.x; i < kC; i += blockDim.x) ecm[i] = i < L ? expf(sc.cm[i]) : 0.0f;
    chunk_theta(P, ch, w, h, sc.dtv, th);
    prep_qk<MODE>(P, ch, h, th, qh, ql, ks, ks_lo, LK, nullptr, ch.last && blockIdx.z == 0 && P.fin_k.present);
    /* d_i = q̃_i·k̃_i (unrotated, biased), one warp per token, a fixed reduction order */
    {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        for (int i = warp; i < L; i += blockDim.x >> 5) {
            const long long t = ch.t0 + i;
            float           s = 0.0f;
            for (int n = lane; n < P.K; n += 32)
                s += (ld4(P.q, ch.row, t, g, n) + ld2(P.qb, h, n)) * (ld4(P.k, ch.row, t, g, n) + ld2(P.kb, h, n));
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            if (lane == 0) dd[i] = s;
        }
    }
    __syncthreads();
    /* scores (i × j) = Q̂ (i × n) · K̂ᵀ (n × j) */
    block_gemm<MODE, true, false>(scr, LF, qh, ql, LK, ks, ks_lo, LK, kC, kC, P.Kp, false);
    const float dh = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, h * P.d.s[0]) : 0.0f;
    for (int o = threadIdx.x; o < kC * kC; o += blockDim.x) {
        const int i = o / kC, j = o - (o / kC) * kC;
        float     v = 0.0f;
        if (i < L && j < L) {
            if (j < i)
                v = scr[i * LF + j] * expf(sc.cm[i] - sc.cm[j]) * sc.sig[j];
            else if (j == i)
                v = dh + sc.gam[i] * dd[i];
        }
        store_split<MODE>(v, ph, pl, i * LP + j);
    }
    /* the entering state tile (p × n), split, over K̂ (no longer needed) */
    const float * sst = P.states + ((long long)w * P.H + h) * P.V * P.K;
    for (int o = threadIdx.x; o < kTV * P.Kp; o += blockDim.x) {
        const int   pp = o / P.Kp, n = o - (o / P.Kp) * P.Kp, p = p0 + pp;
        const float v = (p < P.V && n < P.K) ? sst[(long long)p * P.K + n] : 0.0f;
        store_split<MODE>(v, ks, ks_lo, pp * LK + n);
    }
    load_v<MODE>(P, ch, h, p0, vs, LV);
    __syncthreads();
    /* Y (i × p) = Q̂ (i × n) · S_enterᵀ (n × p), rows times e^{c_i} */
    block_gemm<MODE, true, false>(scr, LF, qh, ql, LK, ks, ks_lo, LK, kC, kTV, P.Kp, false);
    for (int o = threadIdx.x; o < kC * kTV; o += blockDim.x) {
        const int i = o / kTV, pp = o - (o / kTV) * kTV;
        scr[i * LF + pp] *= ecm[i];
    }
    __syncthreads();
    /* Y += P (i × j) · V (j × p) */
    block_gemm<MODE, true, true>(scr, LF, ph, pl, LP, vs, nullptr, LV, kC, kTV, kC, true);
    /* epilogue: gate, store; the final v state from the last token */
    for (int o = threadIdx.x; o < L * kTV; o += blockDim.x) {
        const int i = o / kTV, pp = o - (o / kTV) * kTV, p = p0 + pp;
        if (p >= P.V) continue;
        const long long t = ch.t0 + i;
        float           y = scr[i * LF + pp];
        if (P.has_z) {
            const float zv = ld4(P.z, ch.row, t, h, p);
            y *= zv * sigmoidf(zv);
        }
        st4(P.out, ch.row, t, h, p, y);
        if (ch.last && i == L - 1 && P.fin_v.present) st3(P.fin_v, ch.seq, h, p, ld4(P.v, ch.row, t, h, p));
    }
}

/* ---- kernel 5: final k / v states of empty sequences --------------------------------------------- */

__global__ void __launch_bounds__(kThreads) empty_kernel(const m3_fwd_args P) {
    const int    s = blockIdx.x;
    const m3_seg sg = P.segs[s];
    if (sg.len != 0) return;
    if (P.fin_k.present)
        for (int o = threadIdx.x; o < P.H * P.K; o += blockDim.x) {
            const int h = o / P.K, n = o - (o / P.K) * P.K;
            st3(P.fin_k, s, h, n, P.has_states ? ld3(P.k_in, s, h, n) : 0.0f);
        }
    if (P.fin_v.present)
        for (int o = threadIdx.x; o < P.H * P.V; o += blockDim.x) {
            const int h = o / P.V, p = o - (o / P.V) * P.V;
            st3(P.fin_v, s, h, p, P.has_states ? ld3(P.v_in, s, h, p) : 0.0f);
        }
}

/* ---- the tensor-core path (fp16/bf16 v, K ≤ 128) ------------------------------------------------
 * fast_state_kernel and fast_output_kernel replace state_kernel and output_kernel when
 * use_fast_path() holds (the host side). Blocks of 4 warps; the products run on mma.sync
 * m16n8k16 with fp32 accumulators, operands read from shared memory by ldmatrix (or, for the
 * masked scores, taken straight from the accumulators), results in registers:
 *   fast_state_kernel   per (chunk, head, 64-wide V tile): warp k owns state rows p of
 *                       16k..16k+15, s = Vᵀ·(w∘K̂) over the chunk's tokens, all K columns.
 *   fast_output_kernel  per (chunk, head, 64-wide V tile): warp k owns tokens 16k..16k+15;
 *                       scores Q̂·K̂ᵀ (only the 16-token column blocks up to the diagonal),
 *                       masked and decayed in registers, Y = P·V, then the entering state
 *                       Y += diag(e^c)·Q̂·S_enterᵀ (skipped where it is zero: the first chunk
 *                       of a sequence without initial states).
 * q̂, k̂, w∘k̂, the entering state and P are fp32 values: each is split into its rounded part and
 * the rounded remainder; products of two split operands take three MMAs (hi·hi + lo·hi +
 * hi·lo), of a split operand and v two — v is exact in its own dtype. q and k are read 8
 * features at a time (16-byte loads when they are of v's dtype with unit inner stride), the
 * v tile by cp.async in 16-byte pieces when its rows allow it; any other layout or dtype is
 * read element by element through the strides, with the same arithmetic. */

const int kFastThreads = 128;
const int kFastMaxK = 128;
const int kFLd = kTV + 8; /* padded leading dimension of the v tile */


/* ---- v5 helpers (output kernel): fewer instructions per element ---------------------------------- */

/* cp_rows_v4's pieces, with (row, piece) advanced by a constant per step instead of a division
 * by the runtime row width per piece (state_piece's scheme; blockDim.x = NT). */
template <int MODE, int NT = kFastThreads>
__device__ __forceinline__ void cp_rows_v5(typename cfg<MODE>::T * dst, int ld, const ssmi_cu_view & t,
                                           const m3_chunk & ch, int hx, int c0, int ncols, int X) {
    typedef typename cfg<MODE>::T T;
    const int                     nc = min(ncols, X - c0), pr = ncols / 8, n = ch.len * pr;
    const T *                     src = (const T *)t.p + ch.row * t.s[0] + ch.t0 * t.s[1] + hx * t.s[2] + c0;
    const long long               rs = t.s[1];
    const int                     dq = NT / pr, dr = NT - dq * pr;
    int                           r = (int)threadIdx.x / pr, c = (int)threadIdx.x - r * pr;
#pragma unroll 1
    for (int o = threadIdx.x; o < n; o += NT) {
        if (8 * c < nc) cp_async16(dst + r * ld + 8 * c, src + r * rs + 8 * c);
        r += dq, c += dr;
        if (c >= pr) c -= pr, ++r;
    }
}

/* 8 entries n0..n0+7 of row h of a (H, K) tensor (0 at n ≥ K): the values of ssmi_cu_ld, with
 * the dtype switch taken once for the 8 instead of once per entry. */
__device__ __forceinline__ void load_row8(float (&x)[8], const ssmi_cu_view & v, int h, int n0, int K) {
    const long long base = h * v.s[0] + n0 * v.s[1], st = v.s[1];
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = 0.0f;
    switch (v.dtype) {
        case SSM_DTYPE_F32: {
            const float * p = (const float *)v.p + base;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (n0 + e < K) x[e] = __ldg(p + e * st);
            break;
        }
        case SSM_DTYPE_F16: {
            const __half * p = (const __half *)v.p + base;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (n0 + e < K) x[e] = __half2float(p[e * st]);
            break;
        }
        case SSM_DTYPE_BF16: {
            const __nv_bfloat16 * p = (const __nv_bfloat16 *)v.p + base;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (n0 + e < K) x[e] = __bfloat162float(p[e * st]);
            break;
        }
        case SSM_DTYPE_F64: {
            const double * p = (const double *)v.p + base;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (n0 + e < K) x[e] = (float)__ldg(p + e * st);
            break;
        }
        default: break;
    }
}

/* 2^x, the hardware approximation (a few ulp; flushes subnormals): the decay factors of v5's
 * mask, e^{c_i − c_j} = 2^{(c_i − c_j)·log2 e}. */
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
const float kLog2e = 1.4426950408889634f;

/* tanh(x) = 1 − 2/(1 + e^{2x}) with the fast exponential and division: absolute error ~1e-7,
 * exact limits ±1 (v5's θ terms inside a chunk). */
__device__ __forceinline__ float tanh_fast(float x) { return 1.0f - __fdividef(2.0f, 1.0f + __expf(2.0f * x)); }

/* sin and cos of a wrapped angle x ∈ [0, 2π] (the combined op's θ) by the hardware
 * approximations, after moving x to [−π, π] where their absolute error is ~1e-6 (v5). */
__device__ __forceinline__ void sincos_wrapped_fast(float x, float * sn, float * cs) {
    __sincosf(x >= kPi ? x - kTwoPiHi : x, sn, cs);
}

/* The sin/cos table of a block's θ (n = L·A values): th[o] becomes cos θ, snt[o] sin θ, all threads
 * of the block busy; fast (the fused op, θ wrapped to [0, 2π]): sincos_wrapped_fast, else sincosf.
 * fast is block-uniform. */
__device__ __forceinline__ void sincos_table(bool fast, float * th, float * snt, int n) {
    if (fast) {
        for (int o = threadIdx.x; o < n; o += blockDim.x) {
            float sn_, cs_;
            sincos_wrapped_fast(th[o], &sn_, &cs_);
            th[o] = cs_, snt[o] = sn_;
        }
    } else {
        for (int o = threadIdx.x; o < n; o += blockDim.x) {
            float sn_, cs_;
            sincosf(th[o], &sn_, &cs_);
            th[o] = cs_, snt[o] = sn_;
        }
    }
}

/* z·σ(z) with the fast exponential and division (v5's gate; z → −∞ gives −0, z → +∞ gives z). */
__device__ __forceinline__ float silu_fast(float z) { return __fdividef(z, 1.0f + __expf(-z)); }

/* 8 consecutive features n0..n0+7 of row (b, t, hh) of a (B, S, H, K) tensor; 0 at n ≥ K.
 * vec: of type T, unit inner stride, 16-byte aligned rows, K % 8 == 0. */
template <int MODE>
__device__ __forceinline__ void load8(float (&x)[8], const ssmi_cu_view & v, int vec, int b, long long t, int hh,
                                      int n0, int K) {
    const long long base = b * v.s[0] + t * v.s[1] + hh * v.s[2];
    if (vec) {
        const uint4    u = __ldg(reinterpret_cast<const uint4 *>((const typename cfg<MODE>::T *)v.p + base + n0));
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = t2<MODE>::unpack(w[e]);
            x[2 * e] = f.x, x[2 * e + 1] = f.y;
        }
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] = n0 + e < K ? ssmi_cu_ld(v.p, v.dtype, base + (n0 + e) * v.s[3]) : 0.0f;
    }
}

/* The rotation of a thread's 8 q and k features n0 .. n0 + 7 of token i by the angles m0 = n0/2 ..
 * m0 + 3 (pairs (2m, 2m + 1)), shared by fast_prep_qk (v5 on) and prep_qk_v7: rot4, 4 angles at
 * once from the sin/cos table (th holds cos θ, snt sin θ); rot0, no angle in this thread's range;
 * else angle by angle from the table, from the wrapped θ with the fast sincos (FAST_WRAP and the
 * fused op), or with sincosf. */
template <bool FAST_WRAP>
__device__ __forceinline__ void rotate_qk8(float (&q)[8], float (&k)[8], const m3_fwd_args & P, const float * th,
                                           const float * snt, int i, int m0, bool live, bool rot4, bool rot0) {
    if (live && rot4) {
        const float4 cs4 = *reinterpret_cast<const float4 *>(&th[i * P.A + m0]);
        const float4 sn4 = *reinterpret_cast<const float4 *>(&snt[i * P.A + m0]);
        const float  csv[4] = {cs4.x, cs4.y, cs4.z, cs4.w}, snv[4] = {sn4.x, sn4.y, sn4.z, sn4.w};
#pragma unroll
        for (int e2 = 0; e2 < 4; ++e2) {
            const float cs = csv[e2], sn = snv[e2];
            const float q0 = q[2 * e2], q1 = q[2 * e2 + 1], k0 = k[2 * e2], k1 = k[2 * e2 + 1];
            q[2 * e2] = q0 * cs - q1 * sn, q[2 * e2 + 1] = q0 * sn + q1 * cs;
            k[2 * e2] = k0 * cs - k1 * sn, k[2 * e2 + 1] = k0 * sn + k1 * cs;
        }
    } else if (live && !rot0) {
#pragma unroll
        for (int e2 = 0; e2 < 4; ++e2) {
            const int m = m0 + e2;
            if (m < P.A) {
                float sn, cs;
                if (snt != nullptr) /* the table of sincosf(θ) (th holds cos θ) */
                    sn = snt[i * P.A + m], cs = th[i * P.A + m];
                else if (FAST_WRAP && P.fused) /* θ is wrapped */
                    sincos_wrapped_fast(th[i * P.A + m], &sn, &cs);
                else
                    sincosf(th[i * P.A + m], &sn, &cs);
                const float q0 = q[2 * e2], q1 = q[2 * e2 + 1], k0 = k[2 * e2], k1 = k[2 * e2 + 1];
                q[2 * e2] = q0 * cs - q1 * sn, q[2 * e2 + 1] = q0 * sn + q1 * cs;
                k[2 * e2] = k0 * cs - k1 * sn, k[2 * e2 + 1] = k0 * sn + k1 * cs;
            }
        }
    }
}

/* Rows of the chunk into [kC][ld] split tiles (rows ≥ L and columns ≥ K zero): Q̂ into qh/ql
 * when qh is given, K̂ (times kscale[i] when given) into kh/kl. d_i = q̃_i·k̃_i (biased, not
 * rotated) into dd when given; the last token's fp32 k̂ to the final k state when fin_k.
 * A thread takes 8 features of one token; the ipt (a power of two ≥ Kp/8) threads of a token
 * are adjacent lanes, so d_i is a fixed shuffle reduction. */
template <int MODE, int VER, int NT = kFastThreads>
__device__ void fast_prep_qk(const m3_fwd_args & P, const m3_chunk & ch, int h, const float * th,
                             typename cfg<MODE>::T * qh, typename cfg<MODE>::T * ql, typename cfg<MODE>::T * kh,
                             typename cfg<MODE>::T * kl, int ld, const float * kscale, float * dd, bool fin_k,
                             const typename cfg<MODE>::T * qraw = nullptr, const typename cfg<MODE>::T * kraw = nullptr,
                             const float * snt = nullptr) {
    const int K8 = P.Kp / 8, g = h / P.G, L = ch.len;
    int       ipt = 2;
    while (ipt < K8) ipt *= 2;
    const int per = NT / ipt; /* tokens per pass (blockDim.x = NT): divides kC, or (NT = 256, ipt = 2)
                               * 128, when the second half of the block has no token */
    const int c8 = threadIdx.x % ipt, n0 = c8 * 8;
    /* v3: this thread's 8 features are the same in every pass: their biases are loaded once */
    float qbias[8], kbias[8];
    if constexpr (VER >= 5) { /* v5: one dtype switch per 8 entries (the same values) */
        load_row8(qbias, P.qb, h, n0, P.K);
        load_row8(kbias, P.kb, h, n0, P.K);
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            qbias[e] = kbias[e] = 0.0f;
            if (VER >= 3 && n0 + e < P.K) {
                qbias[e] = ld2(P.qb, h, n0 + e);
                kbias[e] = ld2(P.kb, h, n0 + e);
            }
        }
    }
    /* v5: this thread's 4 pairs m0..m0+3 are all rotated (their sin/cos as one float4 each from
     * the table: A % 4 == 0 keeps i·A + m0 a multiple of 4 floats, the table 16-byte aligned),
     * or none of them is */
    const int  m0 = n0 / 2;
    const bool rot4 = VER >= 5 && snt != nullptr && (P.A & 3) == 0 && m0 + 4 <= P.A, rot0 = VER >= 5 && m0 >= P.A;
    for (int i = threadIdx.x / ipt; i < kC; i += per) {
        const bool live = i < L && n0 < P.K;
        float      q[8], k[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) q[e] = k[e] = 0.0f;
        if (live) {
            const long long t = ch.t0 + i;
            /* v4: raw rows already in shared memory (cp.async; the same values as load8's) */
            if (qraw != nullptr && (qh != nullptr || dd != nullptr))
                unpack8<MODE>(q, *reinterpret_cast<const uint4 *>(&qraw[i * ld + n0]));
            else if (qh != nullptr || dd != nullptr)
                load8<MODE>(q, P.q, P.vq, ch.row, t, g, n0, P.K);
            if (kraw != nullptr)
                unpack8<MODE>(k, *reinterpret_cast<const uint4 *>(&kraw[i * ld + n0]));
            else
                load8<MODE>(k, P.k, P.vk, ch.row, t, g, n0, P.K);
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (n0 + e < P.K) {
                    q[e] += VER >= 3 ? qbias[e] : ld2(P.qb, h, n0 + e);
                    k[e] += VER >= 3 ? kbias[e] : ld2(P.kb, h, n0 + e);
                }
        }
        float dot = 0.0f;
        if (dd != nullptr) {
#pragma unroll
            for (int e = 0; e < 8; ++e) dot = fmaf(q[e], k[e], dot);
        }
        rotate_qk8<VER >= 5>(q, k, P, th, snt, i, n0 / 2, live, rot4, rot0);
        if (live) {
            if (fin_k && i == L - 1)
                for (int e = 0; e < 8; ++e)
                    if (n0 + e < P.K) st3(P.fin_k, ch.seq, h, n0 + e, k[e]);
        }
        if (c8 < K8) {
            uint32_t hi[4], lo[4];
            if (qh != nullptr) {
#pragma unroll
                for (int e = 0; e < 4; ++e) split2<MODE>(q[2 * e], q[2 * e + 1], hi[e], lo[e]);
                *reinterpret_cast<uint4 *>(&qh[i * ld + n0]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
                *reinterpret_cast<uint4 *>(&ql[i * ld + n0]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
            }
            const float sc = kscale != nullptr ? kscale[i] : 1.0f;
#pragma unroll
            for (int e = 0; e < 4; ++e) split2<MODE>(k[2 * e] * sc, k[2 * e + 1] * sc, hi[e], lo[e]);
            *reinterpret_cast<uint4 *>(&kh[i * ld + n0]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            *reinterpret_cast<uint4 *>(&kl[i * ld + n0]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
        if (dd != nullptr) {
            if constexpr (VER >= 5) { /* ipt ≤ 16: the same offsets in the same order, unrolled */
#pragma unroll
                for (int off = 8; off > 0; off /= 2)
                    if (off < ipt) dot += __shfl_xor_sync(0xffffffffu, dot, off);
            } else {
                for (int off = ipt / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
            }
            if (c8 == 0) dd[i] = dot;
        }
    }
}

/* The v tile (kC tokens × kTV columns from p0) into vs[kC][kFLd]; zeros outside. cp.async
 * when P.vv (the caller waits), element-wise through the strides otherwise. */
template <int MODE>
__device__ void fast_load_v(const m3_fwd_args & P, const m3_chunk & ch, int h, int p0, typename cfg<MODE>::T * vs) {
    typedef typename cfg<MODE>::T T;
    const long long               base = ch.row * P.v.s[0] + ch.t0 * P.v.s[1] + h * P.v.s[2] + p0 * P.v.s[3];
    const int                     nc = P.V - p0;
    if (P.vv) {
        for (int o = threadIdx.x; o < kC * (kTV / 8); o += blockDim.x) {
            const int r = o / (kTV / 8), c = (o - r * (kTV / 8)) * 8;
            T *       d = vs + r * kFLd + c;
            if (r < ch.len && c < nc)
                cp_async16(d, (const T *)P.v.p + base + r * P.v.s[1] + c);
            else
                *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
        }
    } else {
        for (int o = threadIdx.x; o < kC * kTV; o += blockDim.x) {
            const int r = o / kTV, c = o - r * kTV;
            to_t(r < ch.len && c < nc ? ssmi_cu_ld(P.v.p, P.v.dtype, base + r * P.v.s[1] + c * P.v.s[3]) : 0.0f,
                 vs + r * kFLd + c);
        }
    }
}

/* v6 output kernel: 8 warps, the pair (w, w + 4) shares the 16 rows of row block w; each warp
 * hands its partner the 4 of its 8 column tiles of partial y (16 × 8 fp32 each) that the partner
 * finishes: 8 warps × 4 tiles × 32 lanes × one float4. */
const int kOutThreads6 = 256;
const int kRed6Bytes = (kOutThreads6 / 32) * 4 * 32 * 16;

/* Shared memory of the fast kernels: scalars (8 rows of kC + 1), θ (kC × A), two split
 * [kC][Kp + 8] tiles (state kernel: w∘K̂; output kernel: Q̂ and K̂, then the entering state
 * over K̂), the v tile; from v4 on the output kernel adds a z tile (z, then the output). The v6
 * output kernel's partial-y exchange lies over θ and the sin/cos table (dead after the q/k
 * prep): that region is at least kRed6Bytes there. */
template <int MODE>
struct fast_smem {
    size_t              scal, part, th, sn, t0h, t0l, t1h, t1l, vs, zs, total;
    __host__ __device__ fast_smem(int Kp, int A, bool output, int ver, bool sct = false) {
        const bool v3 = ver >= 3;
        typedef typename cfg<MODE>::T T;
        const size_t                  tile = align128(sizeof(T) * kC * (Kp + 8));
        size_t                        o = 0;
        scal = o;
        o += align128(sizeof(float) * 8 * (kC + 1));
        part = o; /* v3 only: chunk_theta_v3's group sums */
        o += v3 ? align128(sizeof(float) * kPartMax) : 0;
        th = o;
        o += align128(sizeof(float) * kC * (A > 0 ? A : 1));
        sn = o; /* v4 with the sin/cos table: sin θ (th then holds cos θ) */
        o += sct ? align128(sizeof(float) * kC * (A > 0 ? A : 1)) : 0;
        if (output && ver >= 6 && o - th < (size_t)kRed6Bytes) o = th + kRed6Bytes;
        t0h = o;
        o += tile;
        t0l = o;
        o += tile;
        t1h = o;
        o += output ? tile : 0;
        t1l = o;
        o += output ? tile : 0;
        vs = o;
        o += align128(sizeof(T) * kC * kFLd);
        zs = o;
        o += output && ver >= 4 ? align128(sizeof(T) * kC * kFLd) : 0;
        total = o;
    }
};

/* v3: this thread's share of the entering state tile of (chunk w, head h, V tile p0), kTV rows
 * × Kp/4 float4 columns: piece o = threadIdx.x + u·kFastThreads (u < 16 covers kTV·Kp/4 ≤
 * 2048 for Kp ≤ 128); zeros outside the V × K state. 16-byte loads when K % 4 == 0 (the state
 * rows then start 16-byte aligned: the workspace is 128-byte aligned and V·K, p·K, c are
 * multiples of 4), element loads otherwise. */
__device__ __forceinline__ void load_state_regs(const m3_fwd_args & P, int w, int h, int p0, float4 (&f)[16]) {
    const float * st = P.states + ((long long)w * P.H + h) * P.V * P.K;
    const int     c4 = P.Kp / 4, total = kTV * c4;
#pragma unroll
    for (int u = 0; u < 16; ++u) {
        const int o = threadIdx.x + u * kFastThreads, r = o / c4, c = (o - r * c4) * 4, p = p0 + r;
        f[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (o < total && p < P.V && c < P.K) {
            const float * src = st + (long long)p * P.K + c;
            if ((P.K & 3) == 0)
                f[u] = __ldg(reinterpret_cast<const float4 *>(src));
            else /* K is even: c + 1 < K whenever c < K */
                f[u] = make_float4(src[0], src[1], c + 2 < P.K ? src[2] : 0.0f, c + 3 < P.K ? src[3] : 0.0f);
        }
    }
}

/* ---- v4 helpers: every global load of a block issued at its start, 16 bytes at a time ---------- */

/* Row r and float4 column c of this thread's state piece o = threadIdx.x + u·kFastThreads in a
 * tile of c4 float4 columns (o = r·c4 + c), advanced from piece u to u + 1 by
 * kFastThreads = dq·c4 + dr: the indices of load_state_regs without a division per piece. */
struct state_piece {
    int c4, r, c, dq, dr;
    __device__ __forceinline__ explicit state_piece(int c4_, int nt = kFastThreads) : c4(c4_) {
        r = (int)threadIdx.x / c4, c = (int)threadIdx.x - r * c4;
        dq = nt / c4, dr = nt - dq * c4;
    }
    __device__ __forceinline__ void next() {
        r += dq, c += dr;
        if (c >= c4) c -= c4, ++r;
    }
};

/* load_state_regs with state_piece's indices: the same pieces, the same values. */
__device__ __forceinline__ void load_state_regs_v4(const m3_fwd_args & P, int w, int h, int p0, float4 (&f)[16]) {
    const float * st = P.states + ((long long)w * P.H + h) * P.V * P.K;
    state_piece   sp(P.Kp / 4);
#pragma unroll
    for (int u = 0; u < 16; ++u) {
        const int r = sp.r, c = 4 * sp.c, p = p0 + r;
        sp.next();
        f[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < kTV && p < P.V && c < P.K) {
            const float * src = st + (long long)p * P.K + c;
            if ((P.K & 3) == 0)
                f[u] = __ldg(reinterpret_cast<const float4 *>(src));
            else /* K is even: c + 1 < K whenever c < K */
                f[u] = make_float4(src[0], src[1], c + 2 < P.K ? src[2] : 0.0f, c + 3 < P.K ? src[3] : 0.0f);
        }
    }
}

/* v5: load_state_regs_v4's pieces with the K % 4 test taken once (v4 compiles both paths into
 * every piece) and a 32-bit offset from the tile's first row. */
__device__ __forceinline__ void load_state_regs_v5(const m3_fwd_args & P, int w, int h, int p0, float4 (&f)[16]) {
    if ((P.K & 3) != 0) { /* block-uniform */
        load_state_regs_v4(P, w, h, p0, f);
        return;
    }
    const float * st = P.states + ((long long)w * P.H + h) * P.V * P.K + (long long)p0 * P.K;
    const int     nr = min(kTV, P.V - p0);
    state_piece   sp(P.Kp / 4);
#pragma unroll
    for (int u = 0; u < 16; ++u) {
        const int r = sp.r, c = 4 * sp.c;
        sp.next();
        f[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < nr && c < P.K) f[u] = __ldg(reinterpret_cast<const float4 *>(st + (r * P.K + c)));
    }
}

/* This thread's pieces of the chunk's raw angles when P.vang (angles of v's dtype, unit inner
 * stride, 16-byte rows, A % 8 == 0): piece o = threadIdx.x + u·kFastThreads is token o/(A/8),
 * angles 8·(o % (A/8)) .. +7. A ≤ K/2 ≤ 64 on the fast path, so L·A/8 ≤ 512 = 4 pieces per
 * thread. Zeros (unused) otherwise. */
const int kAngPieces = 4;
template <int MODE, int NP = kAngPieces, int NT = kFastThreads> /* NP·NT = 512 pieces */
__device__ __forceinline__ void load_angles_v4(const m3_fwd_args & P, const m3_chunk & ch, int h, uint4 (&r)[NP]) {
    typedef typename cfg<MODE>::T T;
    const int                     A8 = P.A / 8, total = P.vang ? ch.len * A8 : 0;
#pragma unroll
    for (int u = 0; u < NP; ++u) {
        const int o = threadIdx.x + u * NT;
        r[u] = make_uint4(0u, 0u, 0u, 0u);
        if (o < total) {
            const int i = o / A8, m0 = (o - i * A8) * 8;
            r[u] = __ldg(reinterpret_cast<const uint4 *>((const T *)P.ang.p + ch.row * P.ang.s[0] +
                                                         (ch.t0 + i) * P.ang.s[1] + h * P.ang.s[2] + m0));
        }
    }
}

/* v4 of chunk_theta_v3: the same terms (from load_angles_v4's pieces when P.vang, else v3's
 * element loads) and the same walk, so the same θ bit for bit. FAST (v5 output kernel, vector
 * angle rows only): tanh from the fast exponential and division (absolute error ~1e-7). */
template <int MODE, bool FAST = false, int NP = kAngPieces, int NT = kFastThreads>
__device__ void chunk_theta_v4(const m3_fwd_args & P, const m3_chunk & ch, int w, int h, const float * dtv, float * th,
                               float * part, const uint4 (&r)[NP]) {
    if (P.A == 0) return;
    if (!P.vang) {
        chunk_theta_v3(P, ch, w, h, dtv, th, part);
        return;
    }
    const int A = P.A, A8 = A / 8, total = ch.len * A8;
#pragma unroll
    for (int u = 0; u < NP; ++u) {
        const int o = threadIdx.x + u * NT;
        if (o < total) {
            const int i = o / A8, m0 = (o - i * A8) * 8;
            float     x[8];
            unpack8<MODE>(x, r[u]);
#pragma unroll
            for (int e = 0; e < 8; ++e)
                th[i * A + m0 + e] = P.fused ? (kPi * (FAST ? tanh_fast(x[e]) : tanhf(x[e]))) * dtv[i] : x[e];
        }
    }
    __syncthreads();
    if (P.fused) theta_walk(P, ch, w, h, th, part);
}

/* cp.async of a (B, S, Hx, X) tensor's rows of the chunk (tokens < L, columns [c0, c0 + ncols)
 * clipped to X) into dst[kC][ld] in 16-byte pieces; vec (ssmi_cu_vec_rows) must hold. Pieces
 * outside are not written (their readers skip them). The caller waits (cp_async_wait_all)
 * and synchronises. */
template <int MODE>
__device__ __forceinline__ void cp_rows_v4(typename cfg<MODE>::T * dst, int ld, const ssmi_cu_view & t,
                                           const m3_chunk & ch, int hx, int c0, int ncols, int X) {
    typedef typename cfg<MODE>::T T;
    const int                     nc = min(ncols, X - c0), pr = ncols / 8;
    const long long               base = ch.row * t.s[0] + ch.t0 * t.s[1] + hx * t.s[2] + c0;
#pragma unroll 1
    for (int o = threadIdx.x; o < ch.len * pr; o += blockDim.x) {
        const int r = o / pr, c = (o - r * pr) * 8;
        if (c < nc) cp_async16(dst + r * ld + c, (const T *)t.p + base + r * t.s[1] + c);
    }
}

/* v at (row i, column cbase + c) of a block's v tile: rows of kFLd elements, or (VSWZ) v7's 128-byte
 * swizzled tile */
template <int MODE, bool VSWZ>
__device__ __forceinline__ const typename cfg<MODE>::T * v_tile_at(const unsigned char * vt, int i, int cbase, int c) {
    typedef typename cfg<MODE>::T T;
    if constexpr (VSWZ) {
        return reinterpret_cast<const T *>(vt + ssmi_wg::swz_off(i, cbase + c));
    } else {
        const T * vrow = reinterpret_cast<const T *>(vt) + i * kFLd + cbase;
        return &vrow[c];
    }
}

/* The shared-memory epilogue of v5, v6 and v7's output blocks on NT column tiles of 8 from column
 * cbase of this warp's rows ri0, ri1: + (D + γ_i·d_i)·v_i, the gate, the output staged over z in
 * zs (each thread reads and writes only its own pairs); then the final v state (block-uniform; v
 * is exact in T). v is read from vt as v_tile_at (VSWZ: v7's swizzled tile). */
template <int MODE, bool VSWZ, int NT>
__device__ __forceinline__ void staged_epilogue(const m3_fwd_args & P, const m3_chunk & ch, int h, int p0, int L,
                                                const float (&y)[8][4], const unsigned char * vt,
                                                typename cfg<MODE>::T * zs, float dh, const m3_scal & sc,
                                                const float * dd, int ri0, int ri1, int cbase) {
    typedef typename cfg<MODE>::T T;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int i = hf ? ri1 : ri0;
        if (i >= L) continue;
        const float diag = dh + sc.gam[i] * dd[i];
        T *         zrow = zs + i * kFLd + cbase;
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const int pc = t * 8 + 2 * (lane & 3);
            if (p0 + cbase + pc >= P.V) continue; /* V % 8 == 0: both of the pair are inside otherwise */
            const float2 xv = t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(v_tile_at<MODE, VSWZ>(vt, i, cbase, pc)));
            float        v0 = fmaf(diag, xv.x, y[t][2 * hf]), v1 = fmaf(diag, xv.y, y[t][2 * hf + 1]);
            if (P.has_z) {
                const float2 zz = t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(&zrow[pc]));
                v0 *= silu_fast(zz.x);
                v1 *= silu_fast(zz.y);
            }
            *reinterpret_cast<uint32_t *>(&zrow[pc]) = t2<MODE>::pack(v0, v1);
        }
    }
    if (ch.last && P.fin_v.present && L > 0) {
        const int nc = min(kTV, P.V - p0);
        for (int pp = threadIdx.x; pp < nc; pp += blockDim.x)
            st3(P.fin_v, ch.seq, h, p0 + pp, from_t(*v_tile_at<MODE, VSWZ>(vt, L - 1, 0, pp)));
    }
}

/* The state kernels' prep of one (chunk, head, V tile): the v tile and (v4 on) the raw k rows
 * (cp.async into the lo tile, overwritten in place by fast_prep_qk) and raw angles (registers)
 * requested before the scalars; the weights w_j = e^{c_L − c_j}·σ_j and the chunk's last cum;
 * θ; then K̂ rotated, weighted by w and split into kh/kl. Ends with a barrier: w∘K̂ and v are
 * visible. NT threads per block (fast_state_kernel 128, fast_state_kernel_v6 256), NA angle
 * pieces per thread (NA·NT = 512). */
template <int MODE, int VER, int NT, int NA, bool PRE = false>
__device__ __forceinline__ void state_prep(const m3_fwd_args & P, const m3_chunk & ch, int w, int h, int p0,
                                           const m3_scal & sc, float * wj, float * th, float * part,
                                           typename cfg<MODE>::T * kh, typename cfg<MODE>::T * kl,
                                           typename cfg<MODE>::T * vs, int LK) {
    fast_load_v<MODE>(P, ch, h, p0, vs);
    if constexpr (PRE) { /* version 8: the scalars and θ of chunk_prep_kernel */
        if (P.vk) cp_rows_v5<MODE, NT>(kl, LK, P.k, ch, h / P.G, 0, P.Kp, P.K);
        cp_prep<NT>(P, w, h, sc.dtv, th);
        cp_async_wait_all();
        __syncthreads(); /* the scalars, θ, the raw k rows */
        const float cl = sc.cm[ch.len - 1];
        for (int j = threadIdx.x; j < kC; j += blockDim.x) wj[j] = j < ch.len ? expf(cl - sc.cm[j]) * sc.sig[j] : 0.0f;
        if (blockIdx.z == 0 && threadIdx.x == 0) P.lastcum[(long long)w * P.H + h] = cl;
        __syncthreads(); /* wj */
        fast_prep_qk<MODE, VER, NT>(P, ch, h, th, nullptr, nullptr, kh, kl, LK, wj, nullptr, false, nullptr,
                                    P.vk ? kl : nullptr);
        cp_async_wait_all(); /* the v tile */
        __syncthreads();     /* w∘K̂, v */
        return;
    }
    uint4 araw[NA];
    if constexpr (VER >= 5) {
        if (P.vk) cp_rows_v5<MODE, NT>(kl, LK, P.k, ch, h / P.G, 0, P.Kp, P.K);
        load_angles_v4<MODE, NA, NT>(P, ch, h, araw);
    } else if constexpr (VER >= 4) {
        if (P.vk) cp_rows_v4<MODE>(kl, LK, P.k, ch, h / P.G, 0, P.Kp, P.K);
        load_angles_v4<MODE, NA, NT>(P, ch, h, araw);
    }
    chunk_scalars(P, ch, h, sc);
    const float cl = sc.cm[ch.len - 1];
    for (int j = threadIdx.x; j < kC; j += blockDim.x) wj[j] = j < ch.len ? expf(cl - sc.cm[j]) * sc.sig[j] : 0.0f;
    if (blockIdx.z == 0 && threadIdx.x == 0) P.lastcum[(long long)w * P.H + h] = cl;
    if constexpr (VER >= 4)
        chunk_theta_v4<MODE, (VER >= 5), NA, NT>(P, ch, w, h, sc.dtv, th, part, araw);
    else if constexpr (VER == 3)
        chunk_theta_v3(P, ch, w, h, sc.dtv, th, part);
    else
        chunk_theta(P, ch, w, h, sc.dtv, th);
    if constexpr (VER >= 4) cp_async_wait_all(); /* the raw k rows, before the barrier that publishes them */
    __syncthreads();                             /* wj, θ */
    fast_prep_qk<MODE, VER, NT>(P, ch, h, th, nullptr, nullptr, kh, kl, LK, wj, nullptr, false, nullptr,
                                VER >= 4 && P.vk ? kl : nullptr);
    cp_async_wait_all(); /* the v tile */
    __syncthreads();     /* w∘K̂, v */
}

template <int MODE, int VER>
__global__ void __launch_bounds__(kFastThreads) fast_state_kernel(const m3_fwd_args P) {
    typedef typename cfg<MODE>::T T;
    extern __shared__ __align__(128) unsigned char smem[];
    const fast_smem<MODE>                          Ly(P.Kp, P.A, false, VER);
    const m3_scal                                  sc = carve_scal((float *)(smem + Ly.scal));
    float *                                        wj = sc.sig + (kC + 1);
    float *                                        th = (float *)(smem + Ly.th);
    T *                                            kh = (T *)(smem + Ly.t0h);
    T *                                            kl = (T *)(smem + Ly.t0l);
    T *                                            vs = (T *)(smem + Ly.vs);
    const int                                      LK = P.Kp + 8;
    const int                                      lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    const int      w = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * kTV;
    const m3_chunk ch = P.chunks[w];
    state_prep<MODE, VER, kFastThreads, kAngPieces>(P, ch, w, h, p0, sc, wj, th, (float *)(smem + Ly.part), kh, kl,
                                                    vs, LK);

    /* acc (16 state rows p × Kp columns n) = Vᵀ (p × j) · (w∘K̂) (j × n) */
    const int NP = P.Kp / 16;
    float     acc[16][4];
#pragma unroll
    for (int t = 0; t < 16; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    const int ksteps = (ch.len + 15) / 16;
    for (int ks = 0; ks < ksteps; ++ks) {
        uint32_t a[4];
        ldsm4_t(a, &vs[ks * 16 * kFLd + warp * 16 + a_trans_off(lane, kFLd)]);
#pragma unroll
        for (int np = 0; np < 8; ++np) {
            if (np >= NP) break;
            uint32_t bh[4], bl[4];
            ldsm4_t(bh, &kh[ks * 16 * LK + np * 16 + b_kn_off(lane, LK)]);
            ldsm4_t(bl, &kl[ks * 16 * LK + np * 16 + b_kn_off(lane, LK)]);
            mma16816<MODE>(acc[2 * np], a, bh[0], bh[1]);
            mma16816<MODE>(acc[2 * np + 1], a, bh[2], bh[3]);
            mma16816<MODE>(acc[2 * np], a, bl[0], bl[1]);
            mma16816<MODE>(acc[2 * np + 1], a, bl[2], bl[3]);
        }
    }
    /* rows p = p0 + 16·warp + lane/4 (+8), columns n = 8·t + 2·(lane%4) (+1); K is even */
    float * dst = P.states + ((long long)w * P.H + h) * P.V * P.K;
#pragma unroll
    for (int t = 0; t < 16; ++t) {
        const int n = t * 8 + 2 * (lane & 3);
        if (t >= 2 * NP || n >= P.K) continue;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int p = p0 + warp * 16 + (lane >> 2) + half * 8;
            if (p < P.V)
                *reinterpret_cast<float2 *>(&dst[(long long)p * P.K + n]) =
                    make_float2(acc[t][2 * half], acc[t][2 * half + 1]);
        }
    }
}

template <int MODE, int VER>
__global__ void __launch_bounds__(kFastThreads, 2) fast_output_kernel(const m3_fwd_args P) {
    typedef typename cfg<MODE>::T T;
    extern __shared__ __align__(128) unsigned char smem[];
    const fast_smem<MODE>                          Ly(P.Kp, P.A, true, VER, VER >= 4 && P.sct);
    const m3_scal                                  sc = carve_scal((float *)(smem + Ly.scal));
    float *                                        ecm = sc.sig + (kC + 1);
    float *                                        dd = ecm + (kC + 1);
    float *                                        th = (float *)(smem + Ly.th);
    T *                                            qh = (T *)(smem + Ly.t0h);
    T *                                            ql = (T *)(smem + Ly.t0l);
    T *                                            bh = (T *)(smem + Ly.t1h); /* K̂, then the entering state */
    T *                                            bl = (T *)(smem + Ly.t1l);
    T *                                            vs = (T *)(smem + Ly.vs);
    T *                                            zs = (T *)(smem + Ly.zs); /* v4: z, then the output */
    const int                                      LK = P.Kp + 8, KS = P.Kp / 16;
    const int                                      lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    const int      w = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * kTV;
    const m3_chunk ch = P.chunks[w];
    const int      L = ch.len;
    /* S_enter = 0 in a sequence's first chunk without initial states (block-uniform) */
    const bool with_state = !ch.first || P.has_states;
    /* v3: the entering state tile goes to registers first; its loads are in flight during the
     * scalars, θ, the q/k prep, the scores and P·V, and it is split into shared memory after */
    float4 pre[VER >= 3 ? 16 : 1];
    if constexpr (VER >= 5) {
        if (with_state) load_state_regs_v5(P, w, h, p0, pre);
    } else if constexpr (VER >= 4) {
        if (with_state) load_state_regs_v4(P, w, h, p0, pre);
    } else if constexpr (VER == 3) {
        if (with_state) load_state_regs(P, w, h, p0, pre);
    } else {
        pre[0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    fast_load_v<MODE>(P, ch, h, p0, vs);
    /* v4: every other global input of the block is requested now: the raw q and k rows by
     * cp.async into the lo tiles (fast_prep_qk overwrites them in place), the z tile, the raw
     * angles into registers; all of it lands during the scalars and θ */
    uint4 araw[kAngPieces];
    if constexpr (VER >= 5) {
        if (P.vq) cp_rows_v5<MODE>(ql, LK, P.q, ch, h / P.G, 0, P.Kp, P.K);
        if (P.vk) cp_rows_v5<MODE>(bl, LK, P.k, ch, h / P.G, 0, P.Kp, P.K);
        if (P.vz16) cp_rows_v5<MODE>(zs, kFLd, P.z, ch, h, p0, kTV, P.V);
        load_angles_v4<MODE>(P, ch, h, araw);
    } else if constexpr (VER >= 4) {
        if (P.vq) cp_rows_v4<MODE>(ql, LK, P.q, ch, h / P.G, 0, P.Kp, P.K);
        if (P.vk) cp_rows_v4<MODE>(bl, LK, P.k, ch, h / P.G, 0, P.Kp, P.K);
        if (P.vz16) cp_rows_v4<MODE>(zs, kFLd, P.z, ch, h, p0, kTV, P.V);
        load_angles_v4<MODE>(P, ch, h, araw);
    }
    /* v5: D requested at the start too (v4 loads it in the epilogue, where the block waits for it) */
    const float dh5 = VER >= 5 && P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, h * P.d.s[0]) : 0.0f;
    chunk_scalars(P, ch, h, sc);
    for (int i = threadIdx.x; i < kC; i += blockDim.x) ecm[i] = i < L ? expf(sc.cm[i]) : 0.0f;
    if constexpr (VER >= 4)
        chunk_theta_v4<MODE, (VER >= 5)>(P, ch, w, h, sc.dtv, th, (float *)(smem + Ly.part), araw);
    else if constexpr (VER == 3)
        chunk_theta_v3(P, ch, w, h, sc.dtv, th, (float *)(smem + Ly.part));
    else
        chunk_theta(P, ch, w, h, sc.dtv, th);
    if constexpr (VER >= 4) cp_async_wait_all(); /* q, k, z (and v) rows, before the barrier that publishes them */
    __syncthreads(); /* θ */
    /* v4: sincosf of every (token, angle) once, all threads busy (fast_prep_qk runs them only
     * on the lanes whose features are rotated, once per token pass); the same calls, so the
     * same values */
    float * snt = nullptr;
    if (VER >= 4 && P.sct) { /* block-uniform */
        snt = (float *)(smem + Ly.sn);
        sincos_table(VER >= 5 && P.fused, th, snt, L * P.A);
        __syncthreads();
    }
    fast_prep_qk<MODE, VER>(P, ch, h, th, qh, ql, bh, bl, LK, nullptr, dd,
                            ch.last && blockIdx.z == 0 && P.fin_k.present, VER >= 4 && P.vq ? ql : nullptr,
                            VER >= 4 && P.vk ? bl : nullptr, snt);
    cp_async_wait_all();
    __syncthreads();

    /* this thread's rows (chunk index) and their cumsums */
    const int   ri0 = warp * 16 + (lane >> 2), ri1 = ri0 + 8;
    const float ci0 = ri0 < L ? sc.cm[ri0] : 0.0f, ci1 = ri1 < L ? sc.cm[ri1] : 0.0f;
    const T *   qrh = qh + warp * 16 * LK + a_row_off(lane, LK);
    const T *   qrl = ql + warp * 16 * LK + a_row_off(lane, LK);

    /* scores (16 rows × 64 tokens) = Q̂ · K̂ᵀ; column blocks past the warp's rows are not needed */
    float s[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
    if constexpr (VER >= 5) {
        /* v5: whole tiles (the mask zeroes j ≥ i) instead of a per-warp skip that the compiler
         * guards with a warp synchronisation before every mma; two k-steps per iteration so
         * that step k+1's fragment loads overlap step k's products */
#pragma unroll 2
        for (int ks = 0; ks < KS; ++ks) {
            uint32_t ah[4], al[4];
            ldsm4(ah, qrh + ks * 16);
            ldsm4(al, qrl + ks * 16);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                uint32_t kb[4], kbl[4];
                ldsm4(kb, &bh[np * 16 * LK + ks * 16 + b_nk_off(lane, LK)]);
                ldsm4(kbl, &bl[np * 16 * LK + ks * 16 + b_nk_off(lane, LK)]);
                mma16816<MODE>(s[2 * np], ah, kb[0], kb[1]);
                mma16816<MODE>(s[2 * np + 1], ah, kb[2], kb[3]);
                mma16816<MODE>(s[2 * np], al, kb[0], kb[1]);
                mma16816<MODE>(s[2 * np + 1], al, kb[2], kb[3]);
                mma16816<MODE>(s[2 * np], ah, kbl[0], kbl[1]);
                mma16816<MODE>(s[2 * np + 1], ah, kbl[2], kbl[3]);
            }
        }
    } else {
        for (int ks = 0; ks < KS; ++ks) {
            uint32_t ah[4], al[4];
            ldsm4(ah, qrh + ks * 16);
            ldsm4(al, qrl + ks * 16);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                if (np > warp) break;
                uint32_t kb[4], kbl[4];
                ldsm4(kb, &bh[np * 16 * LK + ks * 16 + b_nk_off(lane, LK)]);
                ldsm4(kbl, &bl[np * 16 * LK + ks * 16 + b_nk_off(lane, LK)]);
                mma16816<MODE>(s[2 * np], ah, kb[0], kb[1]);
                mma16816<MODE>(s[2 * np + 1], ah, kb[2], kb[3]);
                mma16816<MODE>(s[2 * np], al, kb[0], kb[1]);
                mma16816<MODE>(s[2 * np + 1], al, kb[2], kb[3]);
                mma16816<MODE>(s[2 * np], ah, kbl[0], kbl[1]);
                mma16816<MODE>(s[2 * np + 1], ah, kbl[2], kbl[3]);
            }
        }
    }
    /* P_ij = score · e^{c_i − c_j} · σ_j for j < i < L (strictly lower: the diagonal is D + γ_i·d_i) */
#pragma unroll
    for (int t = 0; t < 8; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int   i = (e >> 1) ? ri1 : ri0;
            const float ci = (e >> 1) ? ci1 : ci0;
            const int   j = t * 8 + 2 * (lane & 3) + (e & 1);
            if constexpr (VER >= 5) /* v5: e^{c_i − c_j} as ex2.approx of the scaled difference */
                s[t][e] = (i < L && j < i) ? s[t][e] * ex2_approx((ci - sc.cm[j]) * kLog2e) * sc.sig[j] : 0.0f;
            else
                s[t][e] = (i < L && j < i) ? s[t][e] * expf(ci - sc.cm[j]) * sc.sig[j] : 0.0f;
        }
    }
    /* Y (16 rows × 64 v columns) = P · V */
    float y[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) y[t][0] = y[t][1] = y[t][2] = y[t][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        if (VER < 5 && ks > warp) break; /* v5: whole tiles (P is 0 there) */
        uint32_t ah[4], al[4];
        split2<MODE>(s[2 * ks][0], s[2 * ks][1], ah[0], al[0]);
        split2<MODE>(s[2 * ks][2], s[2 * ks][3], ah[1], al[1]);
        split2<MODE>(s[2 * ks + 1][0], s[2 * ks + 1][1], ah[2], al[2]);
        split2<MODE>(s[2 * ks + 1][2], s[2 * ks + 1][3], ah[3], al[3]);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
            uint32_t b[4];
            ldsm4_t(b, &vs[ks * 16 * kFLd + np * 16 + b_kn_off(lane, kFLd)]);
            mma16816<MODE>(y[2 * np], ah, b[0], b[1]);
            mma16816<MODE>(y[2 * np + 1], ah, b[2], b[3]);
            mma16816<MODE>(y[2 * np], al, b[0], b[1]);
            mma16816<MODE>(y[2 * np + 1], al, b[2], b[3]);
        }
    }

    /* Y += diag(e^c)·Q̂·S_enterᵀ; S_enter = 0 in a sequence's first chunk without initial states */
    if (with_state) {
        __syncthreads(); /* every warp is done with K̂ */
        const float * st = P.states + ((long long)w * P.H + h) * P.V * P.K;
        const int     c4 = P.Kp / 4, total = kTV * c4;
        if constexpr (VER >= 3) {
            /* the prefetched tile (load_state_regs' pieces), split into the B tiles */
            state_piece sp(c4); /* v4: (row, column) of piece u without a division per piece */
#pragma unroll
            for (int u = 0; u < 16; ++u) {
                const int o = threadIdx.x + u * kFastThreads;
                const int r = VER >= 4 ? sp.r : o / c4, c = VER >= 4 ? 4 * sp.c : (o - r * c4) * 4;
                if (VER >= 4 ? r >= kTV : o >= total) break;
                if constexpr (VER >= 4) sp.next();
                uint32_t hi[2], lo[2];
                split2<MODE>(pre[u].x, pre[u].y, hi[0], lo[0]);
                split2<MODE>(pre[u].z, pre[u].w, hi[1], lo[1]);
                *reinterpret_cast<uint2 *>(&bh[r * LK + c]) = make_uint2(hi[0], hi[1]);
                *reinterpret_cast<uint2 *>(&bl[r * LK + c]) = make_uint2(lo[0], lo[1]);
            }
        } else /* v2: one load per thread per round */
            for (int o = threadIdx.x; o < total; o += blockDim.x) {
            const int r = o / c4, c = (o - r * c4) * 4, p = p0 + r;
            float     v[4];
            if ((P.K & 3) == 0 && p < P.V && c < P.K) {
                const float4 f = __ldg(reinterpret_cast<const float4 *>(st + (long long)p * P.K + c));
                v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) v[e] = (p < P.V && c + e < P.K) ? st[(long long)p * P.K + c + e] : 0.0f;
            }
            uint32_t hi[2], lo[2];
            split2<MODE>(v[0], v[1], hi[0], lo[0]);
            split2<MODE>(v[2], v[3], hi[1], lo[1]);
            *reinterpret_cast<uint2 *>(&bh[r * LK + c]) = make_uint2(hi[0], hi[1]);
            *reinterpret_cast<uint2 *>(&bl[r * LK + c]) = make_uint2(lo[0], lo[1]);
        }
        __syncthreads();
        float u[8][4];
#pragma unroll
        for (int t = 0; t < 8; ++t) u[t][0] = u[t][1] = u[t][2] = u[t][3] = 0.0f;
        /* one k-step of Q̂·S_enterᵀ (v5 unrolls two per iteration) */
        auto qs_step = [&](int ks) {
            uint32_t ah[4], al[4];
            ldsm4(ah, qrh + ks * 16);
            ldsm4(al, qrl + ks * 16);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                uint32_t sb[4], sbl[4];
                ldsm4(sb, &bh[np * 16 * LK + ks * 16 + b_nk_off(lane, LK)]);
                ldsm4(sbl, &bl[np * 16 * LK + ks * 16 + b_nk_off(lane, LK)]);
                mma16816<MODE>(u[2 * np], ah, sb[0], sb[1]);
                mma16816<MODE>(u[2 * np + 1], ah, sb[2], sb[3]);
                mma16816<MODE>(u[2 * np], al, sb[0], sb[1]);
                mma16816<MODE>(u[2 * np + 1], al, sb[2], sb[3]);
                mma16816<MODE>(u[2 * np], ah, sbl[0], sbl[1]);
                mma16816<MODE>(u[2 * np + 1], ah, sbl[2], sbl[3]);
            }
        };
        if constexpr (VER >= 5) {
#pragma unroll 2
            for (int ks = 0; ks < KS; ++ks) qs_step(ks);
        } else {
            for (int ks = 0; ks < KS; ++ks) qs_step(ks);
        }
        const float e0 = ecm[ri0], e1 = ecm[ri1];
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            y[t][0] = fmaf(e0, u[t][0], y[t][0]), y[t][1] = fmaf(e0, u[t][1], y[t][1]);
            y[t][2] = fmaf(e1, u[t][2], y[t][2]), y[t][3] = fmaf(e1, u[t][3], y[t][3]);
        }
    }

    /* epilogue: + (D + γ_i·d_i)·v_i, gate, store pairs; the final v state from the last token */
    const float dh = VER >= 5 ? dh5 : P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, h * P.d.s[0]) : 0.0f;
    /* v4: z from the z tile (P.vz16), the output staged in place over it (P.vo16: each thread
     * reads and writes only its own pairs) and stored in 16-byte row pieces after a barrier */
    const bool zsm = VER >= 4 && P.vz16, stage = VER >= 4 && P.vo16;
    if (VER >= 5 && stage && (zsm || !P.has_z)) { /* block-uniform */
        /* v5: v and z from shared memory, the output staged over z, nothing generic per element;
         * the final v state after (a loop of its own) */
        staged_epilogue<MODE, false, 8>(P, ch, h, p0, L, y, reinterpret_cast<const unsigned char *>(vs), zs, dh, sc,
                                        dd, ri0, ri1, 0);
    } else {
        float2     zv[8][2];
#pragma unroll
        for (int t = 0; t < 8; ++t) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int p = p0 + t * 8 + 2 * (lane & 3), i = half ? ri1 : ri0;
                zv[t][half] = make_float2(0.0f, 0.0f);
                if (!P.has_z || zsm || p >= P.V || i >= L) continue;
                const long long zo = ch.row * P.z.s[0] + (ch.t0 + i) * P.z.s[1] + h * P.z.s[2] + p * P.z.s[3];
                if (P.vz && p + 1 < P.V)
                    zv[t][half] =
                        t2<MODE>::unpack(__ldg(reinterpret_cast<const unsigned int *>((const T *)P.z.p + zo)));
                else
                    zv[t][half] = make_float2(ssmi_cu_ld(P.z.p, P.z.dtype, zo),
                                              p + 1 < P.V ? ssmi_cu_ld(P.z.p, P.z.dtype, zo + P.z.s[3]) : 0.0f);
            }
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int i = half ? ri1 : ri0;
            if (i >= L) continue;
            const float     diag = dh + sc.gam[i] * dd[i];
            const long long t_ = ch.t0 + i;
#pragma unroll
            for (int t = 0; t < 8; ++t) {
                const int pl = t * 8 + 2 * (lane & 3), p = p0 + pl;
                if (p >= P.V) continue;
                const bool   two = p + 1 < P.V;
                const float2 xv = t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(&vs[i * kFLd + pl]));
                float        v0 = fmaf(diag, xv.x, y[t][2 * half]), v1 = fmaf(diag, xv.y, y[t][2 * half + 1]);
                if (P.has_z) {
                    const float2 zz = zsm ? t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(&zs[i * kFLd + pl]))
                                          : zv[t][half];
                    const float  z0 = zz.x, z1 = zz.y;
                    v0 *= z0 * sigmoidf(z0);
                    v1 *= z1 * sigmoidf(z1);
                }
                const long long oo = ch.row * P.out.s[0] + t_ * P.out.s[1] + h * P.out.s[2] + p * P.out.s[3];
                if (stage) /* V % 8 == 0: both of the pair are inside */
                    *reinterpret_cast<uint32_t *>(&zs[i * kFLd + pl]) = t2<MODE>::pack(v0, v1);
                else if (P.vout && two) {
                    if (P.out.dtype == SSM_DTYPE_F32)
                        *reinterpret_cast<float2 *>((float *)P.out.p + oo) = make_float2(v0, v1);
                    else
                        *reinterpret_cast<uint32_t *>((T *)P.out.p + oo) = t2<MODE>::pack(v0, v1);
                } else {
                    ssmi_cu_st(P.out.p, P.out.dtype, oo, v0);
                    if (two) ssmi_cu_st(P.out.p, P.out.dtype, oo + P.out.s[3], v1);
                }
                if (ch.last && i == L - 1 && P.fin_v.present) {
                    st3(P.fin_v, ch.seq, h, p, xv.x);
                    if (two) st3(P.fin_v, ch.seq, h, p + 1, xv.y);
                }
            }
        }
    }
    if (stage) { /* block-uniform */
        __syncthreads();
        const int       nc = min(kTV, P.V - p0);
        const long long ob = ch.row * P.out.s[0] + ch.t0 * P.out.s[1] + h * P.out.s[2] + p0;
#pragma unroll 1
        for (int o = threadIdx.x; o < L * (kTV / 8); o += blockDim.x) {
            const int r = o / (kTV / 8), c = (o - r * (kTV / 8)) * 8;
            if (c < nc)
                *reinterpret_cast<uint4 *>((T *)P.out.p + ob + r * P.out.s[1] + c) =
                    *reinterpret_cast<const uint4 *>(&zs[r * kFLd + c]);
        }
    }
}

/* ---- v6 output kernel: 8 warps per block ------------------------------------------------------
 * fast_output_kernel<MODE, 5> runs 4 warps and 196 registers: 2 blocks, 8 warps per SM, and the
 * profile shows it latency-bound (2 warps per scheduler). fast_output_kernel_v6 does the same
 * math with 8 warps in ≤ 128 registers, so 2 blocks give 16 warps per SM. Warps w and w + 4
 * (w < 4) share row block w (chunk rows 16w..16w+15) and split every product of those rows:
 *   scores and P·V   the causally needed column blocks 0..w (16 tokens each; only those with
 *                    tokens < L) are dealt out: the lower warp takes the first ⌈n/2⌉, the upper
 *                    warp the rest (at most 2 each: per-warp work 0-2 blocks instead of v5's 4
 *                    whole tiles, 10 block products per block instead of 16);
 *   Q̂·S_enterᵀ       the lower warp takes k-steps [0, KS/2), the upper [KS/2, KS);
 * each product keeps v5's split operands (three MMAs per pair of split fp32 operands, two with v)
 * and v5's fast math. The two partial 16 × 64 y tiles are summed through shared memory: each
 * warp hands its partner the 4 column tiles that the partner finishes (the lower warp finishes
 * columns 0..31, the upper 32..63), and both run v5's shared-memory epilogue on their half.
 * Every cooperative loop (the v tile, q/k/z rows, θ, sin/cos, q/k prep, the state split, the
 * staged store) runs on all 256 threads; fast_state_kernel keeps 128.
 * Assumes (out_v6_applies): 16-bit outputs of v's dtype in 16-byte rows (P.vo16) and z of that
 * kind or none, i.e. v5's shared-memory epilogue; other layouts run fast_output_kernel<., 5>.
 * Results differ from v5's within fp32 rounding (y's partial sums associate differently). */

/* v6: this thread's pieces of the entering state tile, piece o = threadIdx.x + u·kOutThreads6
 * (u < 8 covers kTV·Kp/4 ≤ 2048), zeros outside the V × K state; one K % 4 test per tile and
 * 32-bit offsets from the tile's first row (load_state_regs_v5's scheme). */
__device__ __forceinline__ void load_state_regs_v6(const m3_fwd_args & P, int w, int h, int p0, float4 (&f)[8]) {
    const float * st = P.states + ((long long)w * P.H + h) * P.V * P.K + (long long)p0 * P.K;
    const int     nr = min(kTV, P.V - p0);
    state_piece   sp(P.Kp / 4, kOutThreads6);
    if ((P.K & 3) == 0) { /* block-uniform: 16-byte rows */
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int r = sp.r, c = 4 * sp.c;
            sp.next();
            f[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r < nr && c < P.K) f[u] = __ldg(reinterpret_cast<const float4 *>(st + (r * P.K + c)));
        }
    } else {
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int r = sp.r, c = 4 * sp.c;
            sp.next();
            f[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r < nr && c < P.K) { /* K is even: c + 1 < K whenever c < K */
                const float * src = st + (r * P.K + c);
                f[u] = make_float4(src[0], src[1], c + 2 < P.K ? src[2] : 0.0f, c + 3 < P.K ? src[3] : 0.0f);
            }
        }
    }
}

/* v6: s (16 rows × NB·16 tokens) = Q̂·K̂ᵀ over all KS k-steps; qrh/qrl: this lane's A fragment
 * rows, kbh/kbl: the first column block's K̂ rows at this lane's ldmatrix offset. NB is a
 * template argument so that the caller's warp-uniform choice is one branch outside the loop
 * (no per-mma convergence guard). */
template <int MODE, int NB>
__device__ __forceinline__ void scores_v6(float (&s)[4][4], const typename cfg<MODE>::T * qrh,
                                          const typename cfg<MODE>::T * qrl, const typename cfg<MODE>::T * kbh,
                                          const typename cfg<MODE>::T * kbl, int KS, int LK) {
#pragma unroll 2
    for (int ks = 0; ks < KS; ++ks) {
        uint32_t ah[4], al[4];
        ldsm4(ah, qrh + ks * 16);
        ldsm4(al, qrl + ks * 16);
#pragma unroll
        for (int np = 0; np < NB; ++np) {
            uint32_t kb[4], kl[4];
            ldsm4(kb, kbh + np * 16 * LK + ks * 16);
            ldsm4(kl, kbl + np * 16 * LK + ks * 16);
            mma16816<MODE>(s[2 * np], ah, kb[0], kb[1]);
            mma16816<MODE>(s[2 * np + 1], ah, kb[2], kb[3]);
            mma16816<MODE>(s[2 * np], al, kb[0], kb[1]);
            mma16816<MODE>(s[2 * np + 1], al, kb[2], kb[3]);
            mma16816<MODE>(s[2 * np], ah, kl[0], kl[1]);
            mma16816<MODE>(s[2 * np + 1], ah, kl[2], kl[3]);
        }
    }
}

/* v6: y (16 rows × 64 v columns) += P·V over NB column blocks of 16 tokens: P split into
 * ph/pl (A fragments, one per block), vb: the first block's v rows at this lane's offset. */
template <int MODE, int NB>
__device__ __forceinline__ void pv_v6(float (&y)[8][4], const uint32_t (&ph)[2][4], const uint32_t (&pl)[2][4],
                                      const typename cfg<MODE>::T * vb) {
#pragma unroll
    for (int np = 0; np < NB; ++np) {
#pragma unroll
        for (int n = 0; n < 4; ++n) {
            uint32_t b[4];
            ldsm4_t(b, vb + np * 16 * kFLd + n * 16);
            mma16816<MODE>(y[2 * n], ph[np], b[0], b[1]);
            mma16816<MODE>(y[2 * n + 1], ph[np], b[2], b[3]);
            mma16816<MODE>(y[2 * n], pl[np], b[0], b[1]);
            mma16816<MODE>(y[2 * n + 1], pl[np], b[2], b[3]);
        }
    }
}

/* The causal decay mask of v6's and v7's score fragments (NT column tiles of 8 from token jb of
 * this lane's pairs; rows ri0, ri1 with cumulative decays ci0, ci1): P_ij = score · e^{c_i − c_j} ·
 * σ_j for j < i < L (ex2.approx decay), 0 elsewhere. */
template <int NT>
__device__ __forceinline__ void mask_scores(float (&s)[NT][4], int jb, int ri0, int ri1, float ci0, float ci1, int L,
                                            const m3_scal & sc) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int   i = (e >> 1) ? ri1 : ri0;
            const float ci = (e >> 1) ? ci1 : ci0;
            const int   j = jb + t * 8 + (e & 1);
            s[t][e] = (i < L && j < i) ? s[t][e] * ex2_approx((ci - sc.cm[j]) * kLog2e) * sc.sig[j] : 0.0f;
        }
    }
}

/* The end of v6's and v7's output blocks. The exchange: the lower warp (warpgroup) finishes column
 * tiles 0..3, the upper 4..7; each warp hands the other tiles to its partner (warp ^ 4, the same 16
 * rows) through red (the dead θ region), in fragment order (lane l's float4 at l: no bank
 * conflicts, no index arithmetic), and keeps its own in y[0..3]. Then the shared-memory epilogue on
 * the warp's 32 columns (v5's): + (D + γ_i·d_i)·v_i, the gate, the output staged over z (each
 * thread reads and writes only its own pairs), the final v state, and the staged output stored in
 * 16-byte row pieces. v is read from vt: rows of kFLd elements (v6) or, VSWZ, the 128-byte
 * swizzled tile of v7 (ssmi_wg::swz_off). */
template <int MODE, bool VSWZ>
__device__ __forceinline__ void out_exchange_epilogue(const m3_fwd_args & P, const m3_chunk & ch, int h, int p0,
                                                      int L, float (&y)[8][4], float4 * red, const unsigned char * vt,
                                                      typename cfg<MODE>::T * zs, float dh, const m3_scal & sc,
                                                      const float * dd, int ri0, int ri1) {
    typedef typename cfg<MODE>::T T;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, upper = warp >> 2;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        const float4 give = upper ? make_float4(y[t][0], y[t][1], y[t][2], y[t][3])
                                  : make_float4(y[t + 4][0], y[t + 4][1], y[t + 4][2], y[t + 4][3]);
        red[(warp * 4 + t) * 32 + lane] = give;
#pragma unroll
        for (int e = 0; e < 4; ++e) y[t][e] = upper ? y[t + 4][e] : y[t][e];
    }
    __syncthreads(); /* the partners' tiles */
    {
        const float4 * got = red + (warp ^ 4) * 4 * 32 + lane;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const float4 g = got[t * 32];
            y[t][0] += g.x, y[t][1] += g.y, y[t][2] += g.z, y[t][3] += g.w;
        }
    }
    staged_epilogue<MODE, VSWZ, 4>(P, ch, h, p0, L, y, vt, zs, dh, sc, dd, ri0, ri1, upper * 32);
    __syncthreads(); /* the staged output */
    {
        const int       nc = min(kTV, P.V - p0);
        const long long ob = ch.row * P.out.s[0] + ch.t0 * P.out.s[1] + h * P.out.s[2] + p0;
#pragma unroll 1
        for (int o = threadIdx.x; o < L * (kTV / 8); o += blockDim.x) {
            const int r = o >> 3, c = (o & 7) * 8;
            if (c < nc)
                *reinterpret_cast<uint4 *>((T *)P.out.p + ob + r * P.out.s[1] + c) =
                    *reinterpret_cast<const uint4 *>(&zs[r * kFLd + c]);
        }
    }
}

/* v6: u (16 rows × 64 state rows) += Q̂·S_enterᵀ over k-steps [ks0, ks1); sbh/sbl: the split
 * state at this lane's ldmatrix offset. */
template <int MODE>
__device__ __forceinline__ void qs_v6(float (&u)[8][4], const typename cfg<MODE>::T * qrh,
                                      const typename cfg<MODE>::T * qrl, const typename cfg<MODE>::T * sbh,
                                      const typename cfg<MODE>::T * sbl, int ks0, int ks1, int LK) {
#pragma unroll 2
    for (int ks = ks0; ks < ks1; ++ks) {
        uint32_t ah[4], al[4];
        ldsm4(ah, qrh + ks * 16);
        ldsm4(al, qrl + ks * 16);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
            uint32_t sb[4], sl[4];
            ldsm4(sb, sbh + np * 16 * LK + ks * 16);
            ldsm4(sl, sbl + np * 16 * LK + ks * 16);
            mma16816<MODE>(u[2 * np], ah, sb[0], sb[1]);
            mma16816<MODE>(u[2 * np + 1], ah, sb[2], sb[3]);
            mma16816<MODE>(u[2 * np], al, sb[0], sb[1]);
            mma16816<MODE>(u[2 * np + 1], al, sb[2], sb[3]);
            mma16816<MODE>(u[2 * np], ah, sl[0], sl[1]);
            mma16816<MODE>(u[2 * np + 1], ah, sl[2], sl[3]);
        }
    }
}

template <int MODE>
__global__ void __launch_bounds__(kOutThreads6, 2) fast_output_kernel_v6(const m3_fwd_args P) {
    typedef typename cfg<MODE>::T T;
    extern __shared__ __align__(128) unsigned char smem[];
    const fast_smem<MODE>                          Ly(P.Kp, P.A, true, 6, P.sct);
    const m3_scal                                  sc = carve_scal((float *)(smem + Ly.scal));
    float *                                        ecm = sc.sig + (kC + 1);
    float *                                        dd = ecm + (kC + 1);
    float *                                        th = (float *)(smem + Ly.th); /* θ, then the y exchange */
    T *                                            qh = (T *)(smem + Ly.t0h);
    T *                                            ql = (T *)(smem + Ly.t0l);
    T *                                            bh = (T *)(smem + Ly.t1h); /* K̂, then the entering state */
    T *                                            bl = (T *)(smem + Ly.t1l);
    T *                                            vs = (T *)(smem + Ly.vs);
    T *                                            zs = (T *)(smem + Ly.zs); /* z, then the output */
    const int                                      LK = P.Kp + 8, KS = P.Kp / 16;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, rb = warp & 3, upper = warp >> 2;

    const int      w = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * kTV;
    const m3_chunk ch = P.chunks[w];
    const int      L = ch.len;
    /* S_enter = 0 in a sequence's first chunk without initial states (block-uniform) */
    const bool with_state = !ch.first || P.has_states;
    /* every global input requested at the start (v5's order): the state tile into registers
     * (8 float4 per thread, v5 16), the v tile, q/k rows into the lo tiles, the z tile, angles */
    float4 pre[8];
    if (with_state) load_state_regs_v6(P, w, h, p0, pre);
    fast_load_v<MODE>(P, ch, h, p0, vs);
    uint4 araw[kAngPieces * kFastThreads / kOutThreads6];
    if (P.vq) cp_rows_v5<MODE, kOutThreads6>(ql, LK, P.q, ch, h / P.G, 0, P.Kp, P.K);
    if (P.vk) cp_rows_v5<MODE, kOutThreads6>(bl, LK, P.k, ch, h / P.G, 0, P.Kp, P.K);
    if (P.vz16) cp_rows_v5<MODE, kOutThreads6>(zs, kFLd, P.z, ch, h, p0, kTV, P.V);
    load_angles_v4<MODE, kAngPieces * kFastThreads / kOutThreads6, kOutThreads6>(P, ch, h, araw);
    const float dh = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, h * P.d.s[0]) : 0.0f;
    chunk_scalars(P, ch, h, sc);
    for (int i = threadIdx.x; i < kC; i += blockDim.x) ecm[i] = i < L ? expf(sc.cm[i]) : 0.0f;
    /* θ: theta_walk's group count is capped by kPartMax (not by the 256 threads), so θ is the
     * state kernel's bit for bit, as in v5 */
    chunk_theta_v4<MODE, true, kAngPieces * kFastThreads / kOutThreads6, kOutThreads6>(
        P, ch, w, h, sc.dtv, th, (float *)(smem + Ly.part), araw);
    cp_async_wait_all(); /* q, k, z (and v) rows, before the barrier that publishes them */
    __syncthreads();     /* θ */
    float * snt = nullptr;
    if (P.sct) { /* block-uniform: sin/cos once per (token, angle), v5's calls */
        snt = (float *)(smem + Ly.sn);
        sincos_table(P.fused, th, snt, L * P.A);
        __syncthreads();
    }
    fast_prep_qk<MODE, 5, kOutThreads6>(P, ch, h, th, qh, ql, bh, bl, LK, nullptr, dd,
                                        ch.last && blockIdx.z == 0 && P.fin_k.present, P.vq ? ql : nullptr,
                                        P.vk ? bl : nullptr, snt);
    cp_async_wait_all();
    __syncthreads(); /* Q̂, K̂, d; from here θ and the sin/cos table are dead (the y exchange) */

    /* this warp's share (all warp-uniform): column blocks [cb0, cb0 + nb) of its row block */
    const int  nL = (L + 15) >> 4;     /* column blocks holding tokens < L */
    const bool live = rb * 16 < L;     /* the row block holds a token */
    const int  ncb = min(rb + 1, nL);  /* causal: blocks 0..rb */
    const int  nlo = (ncb + 1) >> 1;   /* the lower warp's count, ≤ 2 */
    const int  cb0 = upper ? nlo : 0, nb = !live ? 0 : upper ? ncb - nlo : nlo;
    const int  ri0 = rb * 16 + (lane >> 2), ri1 = ri0 + 8;
    const float ci0 = ri0 < L ? sc.cm[ri0] : 0.0f, ci1 = ri1 < L ? sc.cm[ri1] : 0.0f;
    const T *  qrh = qh + rb * 16 * LK + a_row_off(lane, LK);
    const T *  qrl = ql + rb * 16 * LK + a_row_off(lane, LK);

    /* scores (16 rows × the warp's ≤ 32 tokens) = Q̂·K̂ᵀ */
    float s[4][4];
#pragma unroll
    for (int t = 0; t < 4; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
    {
        const T * kbh = bh + cb0 * 16 * LK + b_nk_off(lane, LK);
        const T * kbl = bl + cb0 * 16 * LK + b_nk_off(lane, LK);
        if (nb == 2)
            scores_v6<MODE, 2>(s, qrh, qrl, kbh, kbl, KS, LK);
        else if (nb == 1)
            scores_v6<MODE, 1>(s, qrh, qrl, kbh, kbl, KS, LK);
    }
    /* P_ij = score · e^{c_i − c_j} · σ_j for j < i < L (v5's ex2.approx decay); j < 64 since cb0 ≤ 2 */
    mask_scores<4>(s, cb0 * 16 + 2 * (lane & 3), ri0, ri1, ci0, ci1, L, sc);
    uint32_t ph[2][4], pl[2][4]; /* P as split A fragments, one per column block */
#pragma unroll
    for (int c = 0; c < 2; ++c) {
        split2<MODE>(s[2 * c][0], s[2 * c][1], ph[c][0], pl[c][0]);
        split2<MODE>(s[2 * c][2], s[2 * c][3], ph[c][1], pl[c][1]);
        split2<MODE>(s[2 * c + 1][0], s[2 * c + 1][1], ph[c][2], pl[c][2]);
        split2<MODE>(s[2 * c + 1][2], s[2 * c + 1][3], ph[c][3], pl[c][3]);
    }

    /* the entering state, split over K̂ before P·V (v5 splits it after), so that its 32 prefetch
     * registers are free before y's 32 accumulators are live */
    if (with_state) { /* block-uniform */
        __syncthreads(); /* every warp is done with K̂ */
        state_piece sp(P.Kp / 4, kOutThreads6);
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int r = sp.r, c = 4 * sp.c;
            if (r >= kTV) break;
            sp.next();
            uint32_t hi[2], lo[2];
            split2<MODE>(pre[u].x, pre[u].y, hi[0], lo[0]);
            split2<MODE>(pre[u].z, pre[u].w, hi[1], lo[1]);
            *reinterpret_cast<uint2 *>(&bh[r * LK + c]) = make_uint2(hi[0], hi[1]);
            *reinterpret_cast<uint2 *>(&bl[r * LK + c]) = make_uint2(lo[0], lo[1]);
        }
        __syncthreads(); /* the split state */
    }

    /* Y (16 rows × 64 v columns, this warp's part) = P·V */
    float y[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) y[t][0] = y[t][1] = y[t][2] = y[t][3] = 0.0f;
    {
        const T * vb = vs + cb0 * 16 * kFLd + b_kn_off(lane, kFLd);
        if (nb == 2)
            pv_v6<MODE, 2>(y, ph, pl, vb);
        else if (nb == 1)
            pv_v6<MODE, 1>(y, ph, pl, vb);
    }
    /* Y += diag(e^c)·Q̂·S_enterᵀ over this warp's half of the k-steps */
    if (with_state && live) {
        float u[8][4];
#pragma unroll
        for (int t = 0; t < 8; ++t) u[t][0] = u[t][1] = u[t][2] = u[t][3] = 0.0f;
        const int half = KS / 2;
        qs_v6<MODE>(u, qrh, qrl, bh + b_nk_off(lane, LK), bl + b_nk_off(lane, LK), upper ? half : 0,
                    upper ? KS : half, LK);
        const float e0 = ecm[ri0], e1 = ecm[ri1];
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            y[t][0] = fmaf(e0, u[t][0], y[t][0]), y[t][1] = fmaf(e0, u[t][1], y[t][1]);
            y[t][2] = fmaf(e1, u[t][2], y[t][2]), y[t][3] = fmaf(e1, u[t][3], y[t][3]);
        }
    }

    out_exchange_epilogue<MODE, false>(P, ch, h, p0, L, y, reinterpret_cast<float4 *>(smem + Ly.th),
                                       reinterpret_cast<const unsigned char *>(vs), zs, dh, sc, dd, ri0, ri1);
}

/* ---- version 8: the chunk scalars and θ once per (chunk, head) -----------------------------------
 * The state kernel (v6) and the output kernel (v7) each computed them (chunk_scalars, then
 * chunk_theta_v4 with FAST tanh at 256 threads) from the same inputs: at the shape of record that
 * prologue and its barriers were ~20% of the state kernel's and ~25% of the output kernel's stall
 * samples (warp 0's scan and the θ walk, with the other warps waiting). chunk_prep_kernel computes
 * the same values bit for bit (below), so the outputs of both kernels are those of version 7; both
 * kernels then take them by cp.async with their other inputs (cp_prep). theta_walk's grouping (its
 * NG) depends on the thread count: kPrepThreads, the block size of version 7's state and output
 * kernels, which chunk_prep_kernel reproduces. */
const int kPrepThreads = 256;

/* chunk_prep_kernel: one warp per (chunk, head), kPrep2Warps heads of one chunk per block, no block
 * barrier. Its first form (sixth session: one 256-thread block per (chunk, head) running
 * chunk_scalars and chunk_theta_v4 at kPrepThreads threads) took 80 µs at the shape of record in
 * block-wide phases with barriers between them (the loads, warp 0's scan of adt with the other
 * warps waiting, the θ terms, the walk's group sums, the walk); this form took 72 µs (H200, ncu,
 * seventh session). A warp does all of it for its (chunk, head): the scalars with chunk_scalars'
 * expressions and warp 0's scan verbatim; the θ of angle m in lane m (m + 32 for A > 32), the terms
 * in registers, walked in theta_walk's grouping at kPrepThreads threads (NG groups of kC/NG tokens:
 * group sums from 0, then the sums of the groups before, in order, then the group's terms), so
 * every value is the first form's bit for bit (the test checks it: version 8 must reproduce
 * version 7's bytes, where the state and output kernels compute these values themselves). θ goes
 * straight to the slot (lane m: angle m of every token, 128-byte rows at A = 32), the scalars
 * through 1.3 KB of the warp's shared memory. (A low-register form that computes the terms twice,
 * 64 registers and 4 blocks per SM, was no faster, 82 µs, and lost the bit equality: the terms
 * no longer pass through memory, so the compiler fused a product into the walk's sum.) */
const int kPrep2Warps = 8;
const int kPrep2Scal = 5 * (kC + 1) + 3; /* the five arrays, padded to 16 bytes per warp */

/* The terms of angle column m (rows < L; FAST: tanh_fast, chunk_theta_v4's choice for P.vang). */
template <typename TT, bool FAST>
__device__ __forceinline__ void prep2_terms(const m3_fwd_args & P, const m3_chunk & ch, int h, int m, const float * dtv,
                                            float (&t)[kC]) {
    const TT * src = (const TT *)P.ang.p + ch.row * P.ang.s[0] + ch.t0 * P.ang.s[1] + h * P.ang.s[2] + m * P.ang.s[3];
    const long long s1 = P.ang.s[1];
#pragma unroll
    for (int i = 0; i < kC; ++i) t[i] = i < ch.len ? from_t(src[i * s1]) : 0.0f;
    if (P.fused)
#pragma unroll
        for (int i = 0; i < kC; ++i) t[i] = (kPi * (FAST ? tanh_fast(t[i]) : tanhf(t[i]))) * dtv[i];
}

/* theta_walk's walk of one angle column with NG groups (terms in t, θ back into t). */
template <int NG>
__device__ __forceinline__ void prep2_walk(float (&t)[kC], int L, float base) {
    constexpr int span = kC / NG;
    float         part[NG];
#pragma unroll
    for (int g = 0; g < NG; ++g) {
        float run = 0.0f;
#pragma unroll
        for (int i = g * span; i < (g + 1) * span; ++i)
            if (i < L) run += t[i];
        part[g] = run;
    }
#pragma unroll
    for (int g = 0; g < NG; ++g) {
        float run = 0.0f;
#pragma unroll
        for (int gg = 0; gg < g; ++gg) run += part[gg];
#pragma unroll
        for (int i = g * span; i < (g + 1) * span; ++i)
            if (i < L) {
                run += t[i];
                t[i] = wrap2pi(base + run);
            }
    }
}

template <int MODE>
__global__ void __launch_bounds__(32 * kPrep2Warps, 2) chunk_prep_kernel(const m3_fwd_args P) {
    typedef typename cfg<MODE>::T T;
    __shared__ __align__(16) float scal_all[kPrep2Warps][kPrep2Scal];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    const int w = blockIdx.x, h = blockIdx.y * kPrep2Warps + wi;
    if (h >= P.H) return; /* warp-uniform; nothing below synchronises the block */
    const m3_chunk ch = P.chunks[w];
    float *        scal = scal_all[wi];
    const m3_scal  sc = carve_scal(scal);
    const int      L = ch.len, nload = ch.has_next ? L + 1 : L;
    for (int o = lane; o < kPrep2Scal; o += 32) scal[o] = 0.0f; /* entries no one writes */
    __syncwarp();
    /* chunk_scalars, one warp */
    for (int i = lane; i <= L; i += 32) {
        if (i < nload) {
            sc.dtv[i] = ld3(P.dt, ch.row, h, ch.t0 + i);
            sc.lam[i] = sigmoidf(ld3(P.trap, ch.row, h, ch.t0 + i));
        } else {
            sc.dtv[i] = 0.0f;
            sc.lam[i] = 0.0f;
        }
    }
    {
        float a = lane < L ? ld3(P.adt, ch.row, h, ch.t0 + lane) : 0.0f;
        float b = lane + 32 < L ? ld3(P.adt, ch.row, h, ch.t0 + lane + 32) : 0.0f;
#pragma unroll
        for (int off = 1; off < 32; off *= 2) {
            const float ya = __shfl_up_sync(0xffffffffu, a, off);
            const float yb = __shfl_up_sync(0xffffffffu, b, off);
            if (lane >= off) a += ya, b += yb;
        }
        b += __shfl_sync(0xffffffffu, a, 31);
        sc.cm[lane] = a;
        sc.cm[lane + 32] = b;
    }
    __syncwarp();
    for (int i = lane; i < L; i += 32) {
        const float g = sc.dtv[i] * sc.lam[i];
        sc.gam[i] = g;
        sc.sig[i] = g + sc.dtv[i + 1] * (1.0f - sc.lam[i + 1]);
    }
    __syncwarp();
    float * dst = P.prep + ((long long)w * P.H + h) * prep_floats(P.A);
    for (int o = lane; o < kPrepScal / 4; o += 32)
        reinterpret_cast<float4 *>(dst)[o] = reinterpret_cast<const float4 *>(scal)[o];

    /* θ: lane m owns angle m (and m + 32) */
    const int A = P.A;
    int       NG = 1; /* theta_walk's group count at kPrepThreads threads */
    while (NG < 16 && 2 * NG * A <= kPrepThreads && 2 * NG * A <= kPartMax) NG *= 2;
    for (int m = lane; m < A; m += 32) {
        float     t[kC];
        const int dt_ = P.ang.dtype;
        if (P.vang)
            prep2_terms<T, true>(P, ch, h, m, sc.dtv, t);
        else if (dt_ == SSM_DTYPE_BF16)
            prep2_terms<__nv_bfloat16, false>(P, ch, h, m, sc.dtv, t);
        else if (dt_ == SSM_DTYPE_F16)
            prep2_terms<__half, false>(P, ch, h, m, sc.dtv, t);
        else if (dt_ == SSM_DTYPE_F32)
            prep2_terms<float, false>(P, ch, h, m, sc.dtv, t);
        else
            prep2_terms<double, false>(P, ch, h, m, sc.dtv, t);
        if (P.fused) {
            const float base = P.theta0[((long long)w * P.H + h) * A + m];
            switch (NG) {
                case 1: prep2_walk<1>(t, L, base); break;
                case 2: prep2_walk<2>(t, L, base); break;
                case 4: prep2_walk<4>(t, L, base); break;
                case 8: prep2_walk<8>(t, L, base); break;
                default: prep2_walk<16>(t, L, base); break;
            }
        }
        float * th = dst + kPrepScal + m;
#pragma unroll
        for (int i = 0; i < kC; ++i) th[(long long)i * A] = i < L ? t[i] : 0.0f;
    }
}

/* ---- v7 output kernel: the three products on Hopper wgmma (sm_90a) ----------------------------
 * fast_output_kernel_v6 is issue-bound (IMAD/ISETP/LDSM/F2FP; HMMA ~5% of its instructions) and
 * ~60% of its instructions are the per-chunk prep. v7 keeps v6's grid (chunk, head, 64-wide V
 * tile), its 256 threads, its loads, scalars, θ, sin/cos table, split and fast math, its y
 * exchange and its shared-memory epilogue, and replaces the ldmatrix + mma.sync products by
 * wgmma.mma_async m64n64k16 (f32 accumulators; wgmma.cuh) reading 128-byte swizzled tiles:
 *   scores = Q̂·K̂ᵀ        warpgroup 0: A = Q̂ hi / lo (64 tokens x Kp, K-major), B = K̂ hi / lo
 *                        (K-major): hi·hi + lo·hi + hi·lo, three chains of Kp/16 k-steps
 *   y      = split(P)·V  warpgroup 0: A = the masked scores from registers (hi, then lo: the
 *                        mma.sync A fragment of the warp's 16 rows), B = the v tile, MN-major
 *   u      = Q̂·S_enterᵀ  warpgroup 1: A = Q̂ hi / lo, B = S_enter hi / lo (64 V rows x Kp,
 *                        K-major, split over K̂ once the scores are done): three chains
 * The accumulator fragment of warp wq of a warpgroup is v6's float [8][4] of row block wq, so warp
 * w of warpgroup 0 and warp w + 4 of warpgroup 1 are exactly v6's warp pair (w, w + 4): v6's mask
 * (over all 64 tokens), exchange (warpgroup 0 finishes columns 0..31, 1 columns 32..63) and
 * epilogue carry over; v and the q/k rows are read through swz_off instead of a padded stride.
 * The q/k prep (prep_qk_v7) is fast_prep_qk's v5 arithmetic for K = 64 or 128 (no column tails),
 * reading the raw rows that cp.async put at the swizzled places of the lo tiles and writing
 * Q̂ / K̂ hi and lo to the same places (each thread rewrites only its own 16-byte pieces).
 * Why one block = 2 warpgroups of one (chunk, head, V tile): the prep, not the tensor work, is
 * the time (~60% of v6's instructions; 56 wgmma of 64x64x16 per block ≈ 1 µs of one SM's tensor
 * pipe, ~60 µs over the grid at the shape of record): 256 threads halve each thread's share of
 * the prep, and the products split into two balanced halves (3·Kp/16 + 8 and 3·Kp/16 wgmma).
 * Two V tiles per block would share the prep only where V > 64 (not at the shape of record), two
 * heads never (θ, biases and the rotation are per head).
 * Budget, K = 128, A = 32 (the shape of record): shared memory Q̂ hi/lo + K̂ hi/lo 4 x 16 KB (the
 * split state lies over K̂), v 8 KB (one atom), z/out 9 KB, scalars 2.3 KB, θ-walk sums 0.5 KB,
 * θ + sin 16 KB (≥ the 16 KB y exchange), + 1 KB alignment: ~100 KB, 2 blocks per SM (228 KB);
 * K = 64: ~68 KB. Registers ≤ 128 (launch bounds (256, 2); ptxas: 124-127, no spills): warpgroup
 * 0 holds scores (32) and the 8 prefetched state float4 (32) during the scores, then y (32) + P
 * hi/lo fragments (32); warpgroup 1 its y (32): the 2 x 8 warps per SM of v6. The state tile is
 * requested after the prep, not at the start as in v6 (held through prep_qk_v7 it spilled).
 * Applies (siso_v7_applies): where v6's output kernel applies (16-bit outputs of v's dtype in
 * 16-byte rows, z of that kind or none), q, k, v of v's dtype in 16-byte rows (the cp.async
 * loads), K = 64 or 128 (whole atoms), an sm_90 device of a build with sm_90a code and the shared
 * memory within the opt-in limit; a partial last V tile is zero-filled (v columns, state rows)
 * and clipped at the store. Elsewhere version 7 runs version 6's kernels. Results differ from
 * v6's within fp32 rounding (the three split products are three chains, not interleaved per
 * k-step; y's partial sums associate differently). */
const int kOutThreads7 = 256;
static_assert(kOutThreads7 == kOutThreads6, "v7 reuses v6's per-thread shares (state pieces, exchange)");

/* Byte offsets of v7's shared memory from the 1024-aligned base: the wgmma tiles first (every
 * one a whole number of 8 KB atoms, so 1024-aligned), then v6's non-wgmma regions. */
struct v7_smem {
    int qh, ql, kh, kl, vs, scal, part, th, sn, zs, total; /* total: + 1024 to align the base */
    __host__ __device__ v7_smem(int katoms, int A, bool sct) {
        const int tile = katoms * ssmi_wg::kAtomBytes, th_bytes = (int)align128(sizeof(float) * kC * (A > 0 ? A : 1));
        int       o = 0;
        qh = o, o += tile;
        ql = o, o += tile;
        kh = o, o += tile; /* K̂ hi, then the entering state hi */
        kl = o, o += tile; /* K̂ lo, then the entering state lo */
        vs = o, o += ssmi_wg::kAtomBytes;
        scal = o, o += (int)align128(sizeof(float) * 8 * (kC + 1));
        part = o, o += (int)align128(sizeof(float) * kPartMax);
        th = o, o += th_bytes;
        sn = o, o += sct ? th_bytes : 0;
        if (o - th < kRed6Bytes) o = th + kRed6Bytes; /* the y exchange lies over θ and sin */
        zs = o, o += (int)align128(2 * kC * kFLd);    /* z, then the output (16-bit) */
        total = o + 1024;
    }
};

#if SSMI_WG_HAVE /* device helpers of v7, only in the passes that compile its body */
/* fast_prep_qk<MODE, 5, 256> for K = Kp = 64·KA (no column tails, q/k rows of v's dtype already
 * in the lo tiles at their swizzled places): Q̂ and K̂ split into the swizzled hi/lo tiles, d_i into
 * dd, the last token's fp32 k̂ to the final k state when fin_k. A thread takes 8 features of one
 * token; the IPT = K/8 threads of a token are adjacent lanes (d_i: v5's shuffle order). */
template <int MODE, int KA>
__device__ __forceinline__ void prep_qk_v7(const m3_fwd_args & P, const m3_chunk & ch, int h, const float * th,
                                           const float * snt, unsigned char * qh, unsigned char * ql,
                                           unsigned char * kh, unsigned char * kl, float * dd, bool fin_k) {
    constexpr int IPT = 8 * KA, PER = kOutThreads7 / IPT; /* PER divides kC: every lane runs 2·KA passes */
    const int     L = ch.len, c8 = threadIdx.x % IPT, n0 = c8 * 8, m0 = n0 / 2;
    float         qbias[8], kbias[8];
    load_row8(qbias, P.qb, h, n0, P.K);
    load_row8(kbias, P.kb, h, n0, P.K);
    const bool rot4 = snt != nullptr && (P.A & 3) == 0 && m0 + 4 <= P.A, rot0 = m0 >= P.A;
#pragma unroll 1
    for (int i = threadIdx.x / IPT; i < kC; i += PER) {
        const bool live = i < L;
        const int  so = ssmi_wg::swz_off(i, n0);
        float      q[8], k[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) q[e] = k[e] = 0.0f;
        if (live) {
            unpack8<MODE>(q, *reinterpret_cast<const uint4 *>(ql + so));
            unpack8<MODE>(k, *reinterpret_cast<const uint4 *>(kl + so));
#pragma unroll
            for (int e = 0; e < 8; ++e) q[e] += qbias[e], k[e] += kbias[e];
        }
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot = fmaf(q[e], k[e], dot);
        rotate_qk8<true>(q, k, P, th, snt, i, m0, live, rot4, rot0);
        if (fin_k && live && i == L - 1)
#pragma unroll
            for (int e = 0; e < 8; ++e) st3(P.fin_k, ch.seq, h, n0 + e, k[e]);
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) split2<MODE>(q[2 * e], q[2 * e + 1], hi[e], lo[e]);
        *reinterpret_cast<uint4 *>(qh + so) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4 *>(ql + so) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
#pragma unroll
        for (int e = 0; e < 4; ++e) split2<MODE>(k[2 * e], k[2 * e + 1], hi[e], lo[e]);
        *reinterpret_cast<uint4 *>(kh + so) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4 *>(kl + so) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
#pragma unroll
        for (int off = 8; off > 0; off /= 2) /* v5's offsets in v5's order (IPT ≤ 16) */
            if (off < IPT) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (c8 == 0) dd[i] = dot;
    }
}

/* cp.async of the chunk's rows (tokens < L) of a (B, S, Hx, X) tensor, columns [c0, c0 + 8·c8),
 * into a swizzled 64-row tile (row = token, 8·c8 columns over c8/8 atoms: swz_off). zero: rows ≥ L
 * and columns ≥ X are zero-filled (the v tile, read by wgmma); otherwise they are not written
 * (the q/k rows: prep_qk_v7 writes every place of its tiles). */
template <int MODE>
__device__ __forceinline__ void cp_tile_v7(unsigned char * dst, const ssmi_cu_view & t, const m3_chunk & ch, int hx,
                                           int c0, int c8, int X, bool zero) {
    typedef typename cfg<MODE>::T T;
    const T *                     src = (const T *)t.p + ch.row * t.s[0] + ch.t0 * t.s[1] + hx * t.s[2] + c0;
    const long long               rs = t.s[1];
    const int                     dq = kOutThreads7 / c8, dr = kOutThreads7 - dq * c8, nc = X - c0;
    int                           r = (int)threadIdx.x / c8, c = (int)threadIdx.x - r * c8;
#pragma unroll 1
    for (int o = threadIdx.x; o < kC * c8; o += kOutThreads7) {
        unsigned char * d = dst + ssmi_wg::swz_off(r, 8 * c);
        if (r < ch.len && 8 * c < nc)
            cp_async16(d, src + r * rs + 8 * c);
        else if (zero)
            *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
        r += dq, c += dr;
        if (c >= c8) c -= c8, ++r;
    }
}

/* d = A·Bᵀ of two split operands (hi·hi + lo·hi + hi·lo: three chains of 4·KA k-steps, both
 * K-major tiles at shared addresses ahi/alo, bhi/blo), issued and waited for by the warpgroup. */
template <bool BF, int KA>
__device__ __forceinline__ void split_chains_k(float (&d)[8][4], unsigned ahi, unsigned alo, unsigned bhi,
                                               unsigned blo) {
    ssmi_wg::fence();
    ssmi_wg::chain_k<BF, KA>(d, ahi, bhi);
    ssmi_wg::chain_k<BF, KA>(d, alo, bhi);
    ssmi_wg::chain_k<BF, KA>(d, ahi, blo);
    ssmi_wg::commit();
    ssmi_wg::wait<0>();
    ssmi_wg::keep(d);
}
#endif

/* KA: the K atoms (K = 64·KA), a template parameter so that the k-loops unroll. PRE (version 8):
 * the chunk scalars and θ come from chunk_prep_kernel (cp_prep) instead of being computed here. */
template <int MODE, int KA, bool PRE = false>
__global__ void __launch_bounds__(kOutThreads7, 2) fast_output_kernel_v7(const m3_fwd_args P) {
    static_assert(kOutThreads7 == kPrepThreads, "chunk_prep_kernel's θ is this kernel's only at its thread count");
#if SSMI_WG_HAVE
    typedef typename cfg<MODE>::T T;
    constexpr bool BF = MODE == M_BF16;
    extern __shared__ __align__(1024) unsigned char smem7[];
    /* the swizzle pattern is a function of address bits 4-9: align the base at run time */
    const unsigned  raw = smem_addr(smem7);
    unsigned char * sm = smem7 + (((raw + 1023u) & ~1023u) - raw);
    const unsigned  sb = smem_addr(sm);
    const v7_smem   Ly(KA, P.A, P.sct != 0);
    const m3_scal   sc = carve_scal((float *)(sm + Ly.scal));
    float *         ecm = sc.sig + (kC + 1);
    float *         dd = ecm + (kC + 1);
    float *         th = (float *)(sm + Ly.th); /* θ, then the y exchange */
    T *             zs = (T *)(sm + Ly.zs);     /* z, then the output */
    const int       lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wq = warp & 3, upper = warp >> 2;

    const int      w = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * kTV;
    const m3_chunk ch = P.chunks[w];
    const int      L = ch.len;
    /* S_enter = 0 in a sequence's first chunk without initial states (block-uniform) */
    const bool with_state = !ch.first || P.has_states;
    /* the global inputs requested at the start (v6's order): the v tile (swizzled, MN-major: token
     * rows), q/k rows into the lo tiles, the z tile, angles; the state tile comes after the prep */
    cp_tile_v7<MODE>(sm + Ly.vs, P.v, ch, h, p0, kTV / 8, P.V, true);
    cp_tile_v7<MODE>(sm + Ly.ql, P.q, ch, h / P.G, 0, 8 * KA, P.K, false);
    cp_tile_v7<MODE>(sm + Ly.kl, P.k, ch, h / P.G, 0, 8 * KA, P.K, false);
    if (P.vz16) cp_rows_v5<MODE, kOutThreads7>(zs, kFLd, P.z, ch, h, p0, kTV, P.V);
    const float dh = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, h * P.d.s[0]) : 0.0f;
    if constexpr (PRE) {
        cp_prep<kOutThreads7>(P, w, h, sc.dtv, th);
        cp_async_wait_all(); /* the scalars, θ, q, k, v, z rows, before the barrier that publishes them */
        __syncthreads();
        /* read after the barrier behind the q/k prep */
        for (int i = threadIdx.x; i < kC; i += blockDim.x) ecm[i] = i < L ? expf(sc.cm[i]) : 0.0f;
    } else {
        uint4 araw[kAngPieces * kFastThreads / kOutThreads7];
        load_angles_v4<MODE, kAngPieces * kFastThreads / kOutThreads7, kOutThreads7>(P, ch, h, araw);
        chunk_scalars(P, ch, h, sc);
        for (int i = threadIdx.x; i < kC; i += blockDim.x) ecm[i] = i < L ? expf(sc.cm[i]) : 0.0f;
        chunk_theta_v4<MODE, true, kAngPieces * kFastThreads / kOutThreads7, kOutThreads7>(
            P, ch, w, h, sc.dtv, th, (float *)(sm + Ly.part), araw);
        cp_async_wait_all(); /* q, k, v, z rows, before the barrier that publishes them */
        __syncthreads();     /* θ */
    }
    float * snt = nullptr;
    if (P.sct) { /* block-uniform: sin/cos once per (token, angle), v6's calls */
        snt = (float *)(sm + Ly.sn);
        sincos_table(P.fused, th, snt, L * P.A);
        __syncthreads();
    }
    prep_qk_v7<MODE, KA>(P, ch, h, th, snt, sm + Ly.qh, sm + Ly.ql, sm + Ly.kh, sm + Ly.kl, dd,
                         ch.last && blockIdx.z == 0 && P.fin_k.present);
    /* the entering state tile into registers (v6 requests it at the start: held through this
     * prep, its 32 registers made ptxas spill here); in flight during the scores */
    float4 pre[8];
    if (with_state) load_state_regs_v6(P, w, h, p0, pre);
    ssmi_wg::fence_proxy_async(); /* this thread's tile writes (and its finished copies), seen by wgmma */
    __syncthreads();              /* Q̂, K̂, d, v; from here θ and the sin/cos table are dead (the y exchange) */

    const int   ri0 = wq * 16 + (lane >> 2), ri1 = ri0 + 8; /* this thread's rows (fragment layout) */
    const float ci0 = ri0 < L ? sc.cm[ri0] : 0.0f, ci1 = ri1 < L ? sc.cm[ri1] : 0.0f;
    /* warpgroup 0: scores (64 rows x 64 tokens) = Q̂·K̂ᵀ, split: hi·hi, lo·hi, hi·lo */
    float s[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
    if (!upper) { /* warpgroup-uniform */
        split_chains_k<BF, KA>(s, sb + Ly.qh, sb + Ly.ql, sb + Ly.kh, sb + Ly.kl);
    }
    /* the entering state, split over K̂ once the scores are done (the prefetch registers are free
     * before y's accumulators and P's fragments are live) */
    if (with_state) { /* block-uniform */
        __syncthreads(); /* warpgroup 0 is done with K̂ */
        state_piece sp(P.Kp / 4, kOutThreads7);
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int r = sp.r, c = 4 * sp.c;
            if (r >= kTV) break;
            sp.next();
            uint32_t hi[2], lo[2];
            split2<MODE>(pre[u].x, pre[u].y, hi[0], lo[0]);
            split2<MODE>(pre[u].z, pre[u].w, hi[1], lo[1]);
            const int so = ssmi_wg::swz_off(r, c); /* c % 4 == 0: 8 bytes inside one 16-byte piece */
            *reinterpret_cast<uint2 *>(sm + Ly.kh + so) = make_uint2(hi[0], hi[1]);
            *reinterpret_cast<uint2 *>(sm + Ly.kl + so) = make_uint2(lo[0], lo[1]);
        }
        ssmi_wg::fence_proxy_async();
        __syncthreads(); /* the split state */
    }
    float y[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) y[t][0] = y[t][1] = y[t][2] = y[t][3] = 0.0f;
    if (!upper) {
        /* P_ij = score · e^{c_i − c_j} · σ_j for j < i < L (v6's ex2.approx decay), all 64 tokens */
        mask_scores<8>(s, 2 * (lane & 3), ri0, ri1, ci0, ci1, L, sc);
        /* y = P·V: P as split A fragments from registers (k-step ks = tokens 16ks..16ks+15), the v
         * tile MN-major (a k-step of 16 token rows is +2048 bytes) */
        uint32_t ah[4][4], al[4][4];
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            split2<MODE>(s[2 * ks][0], s[2 * ks][1], ah[ks][0], al[ks][0]);
            split2<MODE>(s[2 * ks][2], s[2 * ks][3], ah[ks][1], al[ks][1]);
            split2<MODE>(s[2 * ks + 1][0], s[2 * ks + 1][1], ah[ks][2], al[ks][2]);
            split2<MODE>(s[2 * ks + 1][2], s[2 * ks + 1][3], ah[ks][3], al[ks][3]);
        }
        const unsigned vsa = sb + Ly.vs;
        ssmi_wg::fence(); /* y (zeroed) and the A fragments were written by ordinary instructions */
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(y, ah[ks], ssmi_wg::desc_mn(vsa + ks * 2048));
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(y, al[ks], ssmi_wg::desc_mn(vsa + ks * 2048));
        ssmi_wg::commit();
        ssmi_wg::wait<0>();
        ssmi_wg::keep(y);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) ssmi_wg::keep(ah[ks]), ssmi_wg::keep(al[ks]);
    } else if (with_state) {
        /* warpgroup 1: y = diag(e^c)·Q̂·S_enterᵀ (64 rows x 64 state rows), split: hi·hi, lo·hi, hi·lo */
        split_chains_k<BF, KA>(y, sb + Ly.qh, sb + Ly.ql, sb + Ly.kh, sb + Ly.kl);
        const float e0 = ecm[ri0], e1 = ecm[ri1];
#pragma unroll
        for (int t = 0; t < 8; ++t) y[t][0] *= e0, y[t][1] *= e0, y[t][2] *= e1, y[t][3] *= e1;
    }

    out_exchange_epilogue<MODE, true>(P, ch, h, p0, L, y, reinterpret_cast<float4 *>(sm + Ly.th), sm + Ly.vs, zs, dh,
                                      sc, dd, ri0, ri1);
#else
    (void)P; /* no sm_90a code in this pass: never launched (siso_v7_applies) */
#endif
}

/* ---- v6 state kernel: 8 warps per block -----------------------------------------------------------
 * fast_state_kernel<MODE, 5> runs 4 warps of 91 registers at 4 blocks (55 KB each) per SM: 16
 * warps per SM, issue slots 46% busy, the time in the per-chunk preparation (scalars, θ, the
 * rotation and weighting of K̂, the copies) and its barriers, HMMA 3% of the instructions.
 * fast_state_kernel_v6 does the same work with 8 warps in ≤ 64 registers, so the same 4 blocks
 * give 32 warps per SM and every cooperative loop (v tile, k rows, angles, θ terms, the q/k
 * prep) runs on 256 threads: half the iterations per thread, twice the loads in flight.
 * The product s = Vᵀ·(w∘K̂) is split over the 8 warps: warp w owns state rows 16·(w % 4) ..
 * +15 of the V tile and, of the Kp/16 column blocks, the lower warps (w < 4) the first
 * ⌈Kp/32⌉, the upper ones the rest, so the accumulators are 8 × 4 instead of 16 × 4. Every state
 * element is the sum of the same MMAs in the same order as in v5 (hi then lo, k-steps in
 * order), θ is v5's bit for bit (theta_walk's group count is capped by kPartMax, not by the
 * thread count) and the scalars and weights are v5's: the states equal v5's bit for bit.
 * The tile is stored from the accumulators through one per-lane row pointer and constant
 * offsets (v5 recomputes a 64-bit address per store).
 * Selected by SSMOPS_CUDA_SISO_STATE=v6 under version 6 (state_v6_selected()); v5's state
 * kernel otherwise. It applies wherever v5's does (the same helpers, the same layout). */
const int kStateThreads6 = 256;

/* v6: acc (16 state rows × NB·16 columns) += Vᵀ·(w∘K̂) over ksteps k-steps of 16 tokens; ab:
 * this warp's transposed v fragment at k-step 0, kbh/kbl: its first column block's split w∘K̂
 * at k-step 0, both at this lane's ldmatrix offset. NB is a template argument so that the
 * warp-uniform count is one branch outside the loop. */
template <int MODE, int NB>
__device__ __forceinline__ void vk_v6(float (&acc)[8][4], const typename cfg<MODE>::T * ab,
                                      const typename cfg<MODE>::T * kbh, const typename cfg<MODE>::T * kbl, int ksteps,
                                      int LK) {
#pragma unroll 1 /* 64 registers: no second k-step's fragments in flight */
    for (int ks = 0; ks < ksteps; ++ks) {
        uint32_t a[4];
        ldsm4_t(a, ab + ks * 16 * kFLd);
#pragma unroll
        for (int np = 0; np < NB; ++np) {
            uint32_t bh[4], bl[4];
            ldsm4_t(bh, kbh + ks * 16 * LK + np * 16);
            ldsm4_t(bl, kbl + ks * 16 * LK + np * 16);
            mma16816<MODE>(acc[2 * np], a, bh[0], bh[1]);
            mma16816<MODE>(acc[2 * np + 1], a, bh[2], bh[3]);
            mma16816<MODE>(acc[2 * np], a, bl[0], bl[1]);
            mma16816<MODE>(acc[2 * np + 1], a, bl[2], bl[3]);
        }
    }
}

template <int MODE, bool PRE = false>
__global__ void __launch_bounds__(kStateThreads6, 4) fast_state_kernel_v6(const m3_fwd_args P) {
    static_assert(kStateThreads6 == kPrepThreads, "chunk_prep_kernel's θ is this kernel's only at its thread count");
    typedef typename cfg<MODE>::T T;
    /* the angle pieces per thread at 256 threads (load_angles_v4 covers 512) */
    constexpr int NA = kAngPieces * kFastThreads / kStateThreads6;
    extern __shared__ __align__(128) unsigned char smem[];
    const fast_smem<MODE>                          Ly(P.Kp, P.A, false, 5);
    const m3_scal                                  sc = carve_scal((float *)(smem + Ly.scal));
    float *                                        wj = sc.sig + (kC + 1);
    float *                                        th = (float *)(smem + Ly.th);
    T *                                            kh = (T *)(smem + Ly.t0h);
    T *                                            kl = (T *)(smem + Ly.t0l); /* raw k rows, then K̂ lo */
    T *                                            vs = (T *)(smem + Ly.vs);
    const int                                      LK = P.Kp + 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, rb = warp & 3, upper = warp >> 2;

    const int      w = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * kTV;
    const m3_chunk ch = P.chunks[w];
    state_prep<MODE, 5, kStateThreads6, NA, PRE>(P, ch, w, h, p0, sc, wj, th, (float *)(smem + Ly.part), kh, kl, vs,
                                                 LK);

    /* this warp's column blocks [np0, np0 + nb) of the Kp/16 (warp-uniform) */
    const int NP = P.Kp / 16, nlo = (NP + 1) >> 1;
    const int np0 = upper ? nlo : 0, nb = upper ? NP - nlo : nlo;
    float     acc[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    {
        const int ksteps = (ch.len + 15) / 16;
        const T * ab = vs + rb * 16 + a_trans_off(lane, kFLd);
        const T * kbh = kh + np0 * 16 + b_kn_off(lane, LK);
        const T * kbl = kl + np0 * 16 + b_kn_off(lane, LK);
        if (nb == 4)
            vk_v6<MODE, 4>(acc, ab, kbh, kbl, ksteps, LK);
        else if (nb == 3)
            vk_v6<MODE, 3>(acc, ab, kbh, kbl, ksteps, LK);
        else if (nb == 2)
            vk_v6<MODE, 2>(acc, ab, kbh, kbl, ksteps, LK);
        else if (nb == 1)
            vk_v6<MODE, 1>(acc, ab, kbh, kbl, ksteps, LK);
    }
    /* rows r0 = 16·rb + lane/4 (+8) of the tile, columns n = c0 + 8·t (+1); K is even, so a
     * pair is inside whenever its first column is (8-byte aligned: K, n even) */
    const int nr = min(kTV, P.V - p0), r0 = rb * 16 + (lane >> 2), c0 = np0 * 16 + 2 * (lane & 3);
    float *   d0 = P.states + ((long long)w * P.H + h) * P.V * P.K + (long long)p0 * P.K + (r0 * P.K + c0);
    float *   d1 = d0 + 8 * P.K;
    const bool in0 = r0 < nr, in1 = r0 + 8 < nr;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        if (t < 2 * nb && c0 + 8 * t < P.K) {
            if (in0) *reinterpret_cast<float2 *>(d0 + 8 * t) = make_float2(acc[t][0], acc[t][1]);
            if (in1) *reinterpret_cast<float2 *>(d1 + 8 * t) = make_float2(acc[t][2], acc[t][3]);
        }
    }
}

/* ---- the chained state kernel (version 8; SSMOPS_CUDA_SISO_STATE=chain, or the rule) ----------------
 * fast_state_kernel_v6 writes every chunk's own contribution (fp32 V × K) and pass_kernel_v5 reads
 * it back and rewrites it as the entering state: at the shape of record 268 MB written, then 536 MB
 * read and written again, 204 + 156 µs. siso_chain_kernel does both in one pass: one block per
 * (sequence, head, V tile, KS = 32 or 64 K columns) walks its sequence's chunks in order with the
 * running state in registers; at a chunk's start it stores the entering state (what the pass
 * stored), then adds the chunk's products to a zeroed local accumulator — v6's products of v6's
 * operands — and folds them in with the pass's expression, S ← e^{c_last}·S + local. The chunk
 * contributions are never stored. The operands of chunk c + 2 (the scalars and θ of chunk_prep_kernel's slot, the raw k
 * columns, the v tile) land by cp.async in a ring of three stages while chunk c computes; two block
 * barriers per chunk. Per chunk and block the K̂ work and the products are KS/K of a v6 block's, so
 * a chain is short in time; it pays where there are about as many chains as SMs or more (the rule,
 * siso_chain_applies; 260 µs instead of 360 at the shape of record with KS = 32).
 * Every value is the v6 + pass pipeline's: K̂ by fast_prep_qk's expressions (bias, rotation by
 * the per-angle sincos, w_i, split), the products in v6's order per element, the recurrence in the
 * pass's expression; the test checks the bytes against that pipeline. */
const int kChainStages = 3;         /* operand stages: chunk c + 2 copies while chunk c computes      */
const int kChainThreads = kStateThreads6;

/* Shared memory: kChainStages stages of {chunk_prep_kernel's slot as it lies in P.prep (the scalars,
 * carve_scal's 5 rows less the unused sig[kC], then θ (kC × A): one run of 16-byte pieces), raw k
 * columns (kC × (KS + 8)), v tile (kC × kFLd)}, then the split K̂ slice (two kC × (KS + 8) tiles); KS:
 * the block's K columns (rows of KS + 8 elements: 16-byte aligned, no ldmatrix bank conflicts). */
struct siso_chain_smem {
    int th, kraw, vs, stage, kh, kl, total; /* the scalars at 0 of a stage */
    __host__ __device__ siso_chain_smem(int A, int KS) {
        const int LK = KS + 8;
        th = (int)sizeof(float) * kPrepScal; /* 16-byte aligned (kPrepScal % 4 == 0) */
        int o = (int)align128(sizeof(float) * (size_t)prep_floats(A));
        kraw = o;
        o += (int)align128(2 * kC * LK);
        vs = o;
        o += (int)align128(2 * kC * kFLd);
        stage = o;
        kh = kChainStages * stage;
        kl = kh + (int)align128(2 * kC * LK);
        total = kl + (int)align128(2 * kC * LK);
    }
};

/* Chunk c of a sequence as plan_fwd made it (t0, row, len, seq, flags), from the sequence alone: no
 * load of the chunk table in front of the copies that need its addresses. */
__device__ __forceinline__ m3_chunk chain_chunk(const m3_seg & sg, int s, int c) {
    m3_chunk ch;
    ch.t0 = sg.t0 + (long long)c * kC;
    ch.row = sg.row;
    ch.len = min(kC, sg.len - c * kC);
    ch.seq = s;
    ch.has_next = c * kC + ch.len < sg.len;
    ch.last = c == sg.count - 1;
    ch.first = c == 0;
    return ch;
}

/* This thread's cp.async pieces of a chain block's per-chunk operands, set up once per block: the
 * source of each piece at the sequence's chunk 0 (a chunk later is one constant step further) and
 * its place in a stage, so that a chunk's copies cost a pointer add and a predicate per piece (the
 * generic copy loops of the other kernels spent ~300 instructions per warp and chunk here on
 * 64-bit index arithmetic). Pieces: the slot (prep_floats(A)/4 of them, threads in turn), NK of the
 * raw k columns (rows kr[u], KS/8 pieces per row) and NV of the v tile (rows vr[u], 8 pieces per
 * row; vin: this thread's v columns lie inside V, which is a multiple of 8 on this path). */
template <int MODE, int KS>
struct chain_copies {
    typedef typename cfg<MODE>::T T;
    static constexpr int          KP = KS / 8, NK = kC * KP / kChainThreads, NV = kC * (kTV / 8) / kChainThreads;
    const float *                 prep;
    long long                     prep_step, kstep, vstep;
    const T *                     k[NK];
    const T *                     v[NV];
    int                           npieces, kr[NK], vr[NV], kdst[NK], vdst[NV];
    bool                          vin;
    __device__ __forceinline__ chain_copies(const m3_fwd_args & P, const siso_chain_smem & L, const m3_seg & sg, int h,
                                            int p0, int kc0) {
        const int tid = (int)threadIdx.x;
        npieces = (int)(prep_floats(P.A) / 4);
        prep_step = (long long)P.H * prep_floats(P.A);
        prep = P.prep + ((long long)sg.first * P.H + h) * prep_floats(P.A);
        kstep = (long long)kC * P.k.s[1];
        vstep = (long long)kC * P.v.s[1];
        const T * kb = (const T *)P.k.p + sg.row * P.k.s[0] + sg.t0 * P.k.s[1] + (h / P.G) * P.k.s[2] + kc0;
        const T * vb = (const T *)P.v.p + sg.row * P.v.s[0] + sg.t0 * P.v.s[1] + h * P.v.s[2] + p0;
#pragma unroll
        for (int u = 0; u < NK; ++u) {
            const int o = tid + u * kChainThreads, r = o / KP, c = (o % KP) * 8;
            kr[u] = r;
            k[u] = kb + r * P.k.s[1] + c;
            kdst[u] = L.kraw + 2 * (r * (KS + 8) + c);
        }
#pragma unroll
        for (int u = 0; u < NV; ++u) {
            const int o = tid + u * kChainThreads, r = o / (kTV / 8), c = (o % (kTV / 8)) * 8;
            vr[u] = r;
            v[u] = vb + r * P.v.s[1] + c;
            vdst[u] = L.vs + 2 * (r * kFLd + c);
        }
        vin = p0 + (tid % (kTV / 8)) * 8 < P.V;
    }
    /* chunk c (L tokens) into stage st; the caller commits the group */
    __device__ __forceinline__ void issue(unsigned char * st, int c, int L) const {
        const float * ps = prep + c * prep_step;
        for (int o = (int)threadIdx.x; o < npieces; o += kChainThreads) cp_async16(st + 16 * o, ps + 4 * o);
        const long long kt = c * kstep, vt = c * vstep;
#pragma unroll
        for (int u = 0; u < NK; ++u)
            if (kr[u] < L) cp_async16(st + kdst[u], k[u] + kt); /* rows ≥ L are never read */
#pragma unroll
        for (int u = 0; u < NV; ++u) {
            if (vin && vr[u] < L)
                cp_async16(st + vdst[u], v[u] + vt);
            else /* zeros: the products read whole k-steps of 16 rows */
                *reinterpret_cast<uint4 *>(st + vdst[u]) = make_uint4(0u, 0u, 0u, 0u);
        }
    }
};

/* K̂ columns [kc0, kc0 + KS) of one chunk, weighted and split into kh/kl (rows ≥ L zero):
 * fast_prep_qk<MODE, 5, 256>'s expressions for k with kscale = w_i = e^{c_L − c_i}·σ_i (state_prep's
 * wj), so the same values bit for bit; 8 threads per token, two passes of 32 tokens. */
template <int MODE, int KS>
__device__ __forceinline__ void chain_prep_k(const m3_fwd_args & P, const m3_chunk & ch, int kc0,
                                             const m3_scal & sc, const float * th,
                                             const typename cfg<MODE>::T * kraw, typename cfg<MODE>::T * kh,
                                             typename cfg<MODE>::T * kl, const float (&kbias)[8]) {
    constexpr int ipt = KS / 8, per = kChainThreads / ipt, LK = KS + 8;
    const int     c8 = (int)threadIdx.x % ipt, n0 = kc0 + 8 * c8, L = ch.len;
    const float   cl = sc.cm[L - 1];
    const bool  rot0 = n0 / 2 >= P.A;
#pragma unroll
    for (int i = (int)threadIdx.x / ipt; i < kC; i += per) {
        const bool live = i < L;
        float      q[8], k[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) q[e] = k[e] = 0.0f;
        if (live) {
            unpack8<MODE>(k, *reinterpret_cast<const uint4 *>(&kraw[i * LK + 8 * c8]));
#pragma unroll
            for (int e = 0; e < 8; ++e) k[e] += kbias[e]; /* K % 64 == 0: every column exists */
        }
        rotate_qk8<true>(q, k, P, th, nullptr, i, n0 / 2, live, false, rot0);
        const float s = live ? expf(cl - sc.cm[i]) * sc.sig[i] : 0.0f;
        uint32_t    hi[4], lo[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) split2<MODE>(k[2 * e] * s, k[2 * e + 1] * s, hi[e], lo[e]);
        *reinterpret_cast<uint4 *>(&kh[i * LK + 8 * c8]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4 *>(&kl[i * LK + 8 * c8]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
}

/* The entering state of a chunk (pass_kernel_v5's store) from the running state's fragments, 16 bytes
 * per store: lanes 2j and 2j + 1 swap halves, so the even one holds 4 columns of row r0 (at d4) and
 * the odd one 4 of row r0 + 8 (its d4 points there). */
template <int TN>
__device__ __forceinline__ void chain_store_state(const float (&S)[TN][4], float * d4, bool odd, bool in0, bool in1) {
#pragma unroll
    for (int t = 0; t < TN; ++t) {
        const float2 give = odd ? make_float2(S[t][0], S[t][1]) : make_float2(S[t][2], S[t][3]);
        const float  g0 = __shfl_xor_sync(0xffffffffu, give.x, 1), g1 = __shfl_xor_sync(0xffffffffu, give.y, 1);
        const float4 q4 = odd ? make_float4(g0, g1, S[t][2], S[t][3]) : make_float4(S[t][0], S[t][1], g0, g1);
        if (odd ? in1 : in0) *reinterpret_cast<float4 *>(d4 + 8 * t) = q4;
    }
}

template <int MODE, int KS>
__global__ void __launch_bounds__(kChainThreads, 2) siso_chain_kernel(const m3_fwd_args P) {
    typedef typename cfg<MODE>::T T;
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int                                  TN = KS / 16, LK = KS + 8; /* 8-column tiles per warp */
    const siso_chain_smem                          L(P.A, KS);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, rb = warp & 3, upper = warp >> 2;
    const int nks = P.K / KS;
    const int s = blockIdx.x, h = blockIdx.y, p0 = (int)(blockIdx.z / nks) * kTV, kc0 = (int)(blockIdx.z % nks) * KS;
    const m3_seg sg = P.segs[s];

    /* this thread's state elements: rows p0 + r0 (+8), columns c0 + 8t (+1), t < TN (warp: 16 rows × KS/2
     * columns; the upper warps the second 32 of the slice); K is a multiple of 64 here */
    const int  r0 = rb * 16 + (lane >> 2), c0 = kc0 + upper * (KS / 2) + 2 * (lane & 3);
    const int  nr = min(kTV, P.V - p0);
    const bool in0 = r0 < nr, in1 = r0 + 8 < nr;
    float      S[TN][4];
#pragma unroll
    for (int t = 0; t < TN; ++t) S[t][0] = S[t][1] = S[t][2] = S[t][3] = 0.0f;
    if (P.has_states) { /* pass_kernel_v5's H_in = S_in + dt_0(1−λ_0)·v_in k_inᵀ (spec §3.5) */
        const bool  add = sg.len > 0;
        const float cz = add ? ld3(P.dt, sg.row, h, sg.t0) * (1.0f - sigmoidf(ld3(P.trap, sg.row, h, sg.t0))) : 0.0f;
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int p = p0 + r0 + 8 * hf;
            if (!(hf ? in1 : in0)) continue;
            const float vin = add ? ld3(P.v_in, s, h, p) : 0.0f;
#pragma unroll
            for (int t = 0; t < TN; ++t)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int n = c0 + 8 * t + e;
                    float     v = ld4(P.ssm_in, s, h, p, n);
                    if (add) v += (cz * ld3(P.k_in, s, h, n)) * vin;
                    S[t][2 * hf + e] = v;
                }
        }
    }

    const chain_copies<MODE, KS> cp(P, L, sg, h, p0, kc0);
#pragma unroll
    for (int u = 0; u < kChainStages - 1; ++u) {
        if (u < sg.count) cp.issue(smem + u * L.stage, u, min(kC, sg.len - u * kC));
        cp_async_commit();
    }
    float kbias[8]; /* this thread's 8 k-bias entries of chain_prep_k, the same in every chunk */
    load_row8(kbias, P.kb, h, kc0 + 8 * ((int)threadIdx.x % (KS / 8)), P.K);
    T * kh = (T *)(smem + L.kh);
    T * kl = (T *)(smem + L.kl);
    const long long hvk = (long long)P.H * P.V * P.K;
    const bool      odd = lane & 1;
    float *         d4 = P.states + (long long)sg.first * hvk + ((long long)h * P.V + p0) * P.K +
                 (odd ? (r0 + 8) * P.K + c0 - 2 : r0 * P.K + c0); /* 16-byte aligned: c0 − 2 or c0 is 4j */
    for (int c = 0; c < sg.count; ++c, d4 += hvk) {
        unsigned char * st = smem + (c % kChainStages) * L.stage;
        cp_async_wait_group<kChainStages - 2>(); /* this thread's copies of chunk c */
        __syncthreads(); /* chunk c's operands visible; chunk c − 1's products done (its stage and kh/kl free) */
        if (c + kChainStages - 1 < sg.count) {
            const int cn = c + kChainStages - 1;
            cp.issue(smem + (cn % kChainStages) * L.stage, cn, min(kC, sg.len - cn * kC));
        }
        cp_async_commit(); /* possibly empty: one group per chunk */
        chain_store_state<TN>(S, d4, odd, in0, in1);
        const m3_chunk ch = chain_chunk(sg, s, c);
        const m3_scal  sc = carve_scal((float *)st);
        chain_prep_k<MODE, KS>(P, ch, kc0, sc, (const float *)(st + L.th), (const T *)(st + L.kraw), kh, kl, kbias);
        __syncthreads(); /* w∘K̂ */
        float loc[8][4]; /* vk_v6's accumulator; NB = 2 uses the first 4 */
#pragma unroll
        for (int t = 0; t < 8; ++t) loc[t][0] = loc[t][1] = loc[t][2] = loc[t][3] = 0.0f;
        {
            const T * vs = (const T *)(st + L.vs);
            vk_v6<MODE, KS / 32>(loc, vs + rb * 16 + a_trans_off(lane, kFLd), kh + upper * (KS / 2) + b_kn_off(lane, LK),
                                 kl + upper * (KS / 2) + b_kn_off(lane, LK), (ch.len + 15) / 16, LK);
        }
        const float decay = expf(sc.cm[ch.len - 1]);
#pragma unroll
        for (int t = 0; t < TN; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) S[t][e] = decay * S[t][e] + loc[t][e];
    }
    cp_async_wait_all(); /* nothing is pending (the last groups are empty); for the record */
    if (P.fin_ssm.present) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            if (!(hf ? in1 : in0)) continue;
#pragma unroll
            for (int t = 0; t < TN; ++t)
#pragma unroll
                for (int e = 0; e < 2; ++e) st4(P.fin_ssm, s, h, p0 + r0 + 8 * hf, c0 + 8 * t + e, S[t][2 * hf + e]);
        }
    }
}

/* ---- host side: the forward ---------------------------------------------------------------------- */

int compute_mode(int32_t dtype) { return dtype == SSM_DTYPE_F16 ? M_F16 : dtype == SSM_DTYPE_BF16 ? M_BF16 : M_F32; }

int64_t idx_at(const ssm_tensor * t, int64_t i) {
    const int64_t off = i * t->strides[0];
    return t->dtype == SSM_DTYPE_I64 ? ((const int64_t *)t->data)[off] : (int64_t)((const int32_t *)t->data)[off];
}

struct m3_plan {
    m3_chunk * chunks;
    m3_seg *   segs;
    long long  W, NS;
};

void plan_free(m3_plan * pl) {
    free(pl->chunks);
    free(pl->segs);
    memset(pl, 0, sizeof *pl);
}

/* Chunks of kC tokens restarting at every sequence start (batch rows, or cu_seqlens). */
ssm_status plan_fwd(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d, const ssm_tensor * cu,
                    m3_plan * pl) {
    memset(pl, 0, sizeof *pl);
    const int64_t NS = d->nseq, S = d->seqlen;
    const int64_t maxW = (d->varlen ? (S + kC - 1) / kC + NS : d->batch * ((S + kC - 1) / kC));
    SSM_RETURN_IF(maxW > INT32_MAX / 2 || NS > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: %lld sequences / %lld chunks exceed the CUDA backend's limits (65535 sequences)", op,
                  (long long)NS, (long long)maxW);
    pl->chunks = (m3_chunk *)malloc(sizeof(m3_chunk) * (size_t)(maxW > 0 ? maxW : 1));
    pl->segs = (m3_seg *)malloc(sizeof(m3_seg) * (size_t)(NS > 0 ? NS : 1));
    if (pl->chunks == NULL || pl->segs == NULL) {
        plan_free(pl);
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the chunk plan", op);
    }
    pl->NS = NS;
    for (int64_t s = 0; s < NS; ++s) {
        int64_t row = s, t0 = 0, len = S;
        if (d->varlen) {
            row = 0;
            t0 = idx_at(cu, s);
            len = idx_at(cu, s + 1) - t0;
        }
        m3_seg * sg = &pl->segs[s];
        sg->t0 = t0;
        sg->row = (int)row;
        sg->len = (int)len;
        sg->first = (int)pl->W;
        sg->count = (int)((len + kC - 1) / kC);
        for (int64_t c = 0; c < sg->count; ++c) {
            m3_chunk * ch = &pl->chunks[pl->W++];
            memset(ch, 0, sizeof *ch);
            ch->t0 = t0 + c * kC;
            ch->row = (int)row;
            ch->len = (int)(len - c * kC < kC ? len - c * kC : kC);
            ch->seq = (int)s;
            ch->has_next = c * kC + ch->len < len;
            ch->last = c == sg->count - 1;
            ch->first = c == 0;
        }
    }
    return SSM_STATUS_OK;
}

/* Workspace: chunks | segs | lastcum (W,H) | theta0 (W,H,A) | states (W,H,V,K) | prep (W,H,
 * prep_floats(A), version 8 only). */
struct fwd_ws {
    size_t chunks, segs, lastcum, theta0, states, prep, prep_bytes, total;
};
fwd_ws fwd_ws_layout(const ssmi_mamba3_dims * d, const m3_plan * pl, int fused, bool prep) {
    fwd_ws       l;
    size_t       o = 0;
    const size_t WH = (size_t)pl->W * (size_t)d->nheads;
    l.chunks = o;
    o += align128(sizeof(m3_chunk) * (size_t)pl->W);
    l.segs = o;
    o += align128(sizeof(m3_seg) * (size_t)pl->NS);
    l.lastcum = o;
    o += align128(sizeof(float) * WH);
    l.theta0 = o;
    o += fused ? align128(sizeof(float) * WH * (size_t)d->nangles) : 0;
    l.states = o;
    o += align128(sizeof(float) * WH * (size_t)d->dv * (size_t)d->dk);
    l.prep = o;
    l.prep_bytes = prep ? align128(sizeof(float) * WH * (size_t)prep_floats((int)d->nangles)) : 0;
    o += l.prep_bytes;
    l.total = o;
    return l;
}


/* The state pass over every sequence: pass_kernel_v5 from version 7 on and pass_kernel_v4 from
 * version 4 on (16-byte pieces when K % 4 == 0; v4's scalar instance otherwise), pass_kernel
 * before. */
ssm_status launch_pass(ssm_context * ctx, const char * op, const m3_fwd_args & P, int version) {
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const long long    hvk = (long long)P.H * P.V * P.K;
    if (version >= 7 && (P.K & 3) == 0) {
        const long long n4 = hvk / 4;
        pass_kernel_v5<<<dim3((unsigned)((n4 + kThreads - 1) / kThreads), (unsigned)P.NS), kThreads, 0, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "pass_kernel_v5 launch");
    } else if (version >= 4 && (P.K & 3) == 0) {
        const long long n4 = hvk / 4;
        pass_kernel_v4<4><<<dim3((unsigned)((n4 + kThreads - 1) / kThreads), (unsigned)P.NS), kThreads, 0, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "pass_kernel_v4 launch");
    } else if (version >= 4) {
        pass_kernel_v4<1><<<dim3((unsigned)((hvk + kThreads - 1) / kThreads), (unsigned)P.NS), kThreads, 0, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "pass_kernel_v4 launch");
    } else {
        pass_kernel<<<dim3((unsigned)((hvk + kThreads - 1) / kThreads), (unsigned)P.NS), kThreads, 0, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "pass_kernel launch");
    }
    return SSM_STATUS_OK;
}

template <int MODE>
ssm_status launch_state_out(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int version) {
    const cudaStream_t     s = ssmi_cuda_stream(ctx);
    const state_smem<MODE> Ls(P.Kp, P.A);
    const out_smem<MODE>   Lo(P.Kp, P.A);
    const dim3             grid((unsigned)W, (unsigned)P.H, (unsigned)((P.V + kTV - 1) / kTV));
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
        ctx, op, "cudaFuncSetAttribute",
        cudaFuncSetAttribute(state_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Ls.total)));
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
        ctx, op, "cudaFuncSetAttribute",
        cudaFuncSetAttribute(output_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Lo.total)));
    state_kernel<MODE><<<grid, kThreads, Ls.total, s>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "state_kernel launch");
    if (P.NS > 0) {
        SSM_FORWARD_IF_ERROR(launch_pass(ctx, op, P, version));
    }
    output_kernel<MODE><<<grid, kThreads, Lo.total, s>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "output_kernel launch");
    return SSM_STATUS_OK;
}

/* The v6 output kernel's domain: v5's shared-memory epilogue (16-bit outputs of v's dtype in
 * 16-byte rows; z of that kind, or none). */
bool out_v6_applies(const m3_fwd_args & P) { return P.vo16 && (P.vz16 || !P.has_z); }

/* Version 6 runs fast_state_kernel_v6 instead of the VER = 5 state kernel (default since its
 * first H200 run, 2026-11-30: every test case, sanitizers clean, 324 -> 270 us at the shape of
 * record) unless SSMOPS_CUDA_SISO_STATE=v5 (read on every call, like siso_version()). */
bool state_v6_selected() {
    const char * env = getenv("SSMOPS_CUDA_SISO_STATE");
    return env == NULL || strcmp(env, "v5") != 0;
}

/* SSMOPS_CUDA_SISO_CHAIN_KS=32 / 64: the chain's K columns per block; unset or anything else: the
 * rule (siso_chain_applies). Read on every call. */
int siso_chain_ks_want() {
    const char * env = getenv("SSMOPS_CUDA_SISO_CHAIN_KS");
    if (env != NULL && strcmp(env, "32") == 0) return 32;
    if (env != NULL && strcmp(env, "64") == 0) return 64;
    return 0;
}

/* SSMOPS_CUDA_SISO_STATE=chain: siso_chain_kernel wherever version 8's path can run it; =v6: never
 * (the v6 state kernel and the pass); unset or anything else: the rule of siso_chain_applies. Read
 * on every call, like siso_version(). Returns 1, -1 or 0. */
int siso_chain_want() {
    const char * env = getenv("SSMOPS_CUDA_SISO_STATE");
    if (env != NULL && strcmp(env, "chain") == 0) return 1;
    if (env != NULL && strcmp(env, "v6") == 0) return -1;
    return 0;
}

/* *ks = the chain's K columns per block (32 or 64) when siso_chain_kernel replaces
 * fast_state_kernel_v6 and the pass, else 0: on version 8's path (the caller's `pre`: 16-bit q/k/v in
 * 16-byte rows, K = 64 or 128, chunk_prep_kernel's slots), with its shared memory within the device's
 * limit, by the rule or the knobs. The rule, from H200 measurements at nine shapes (runs S8-3, S8-4;
 * docs/cuda-notes-siso.md): a chain's time is its chunk count times a per-chunk latency, which grows
 * little from one to two chains on an SM, while the v6 state kernel and the pass take time in
 * proportion to all the work; so the chain pays once its chains about fill the SMs
 * (kSisoChainMin chains per SM), and the 32-column blocks (twice the chains, each with half the K̂
 * work but the same copies) do better until the 64-column ones alone give kSisoChain64 per SM. */
const double kSisoChainMin = 0.9, kSisoChain64 = 1.5;
ssm_status siso_chain_applies(ssm_context * ctx, const char * op, const m3_fwd_args & P, int * ks) {
    *ks = 0;
    const int want = siso_chain_want(), kw = siso_chain_ks_want();
    if (want < 0 || P.NS <= 0 || P.K % 32 != 0) return SSM_STATUS_OK;
    ssmi_cuda_props dp;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_current_props(ctx, op, &dp));
    if (dp.sms <= 0) return SSM_STATUS_OK;
    const long long vt = (P.V + kTV - 1) / kTV, c64 = (long long)P.NS * P.H * vt * (P.K / 64);
    int             k = kw;
    if (k == 0) k = P.K % 64 == 0 && (double)c64 >= kSisoChain64 * dp.sms ? 64 : 32;
    if (P.K % k != 0 || vt * (P.K / k) > 65535 || siso_chain_smem(P.A, k).total > dp.smem_optin) return SSM_STATUS_OK;
    const long long chains = (long long)P.NS * P.H * vt * (P.K / k);
    if (want > 0 || (double)chains >= kSisoChainMin * dp.sms) *ks = k;
    return SSM_STATUS_OK;
}

/* *ok = 1 when fast_output_kernel_v7 can run this forward: where v6's output kernel applies,
 * with q, k, v of v's dtype in 16-byte rows (its cp.async tiles), K = 64 or 128 (whole swizzle
 * atoms), a build with sm_90a code, an sm_90 device and v7's shared memory within the opt-in
 * limit. */
ssm_status siso_v7_applies(ssm_context * ctx, const char * op, const m3_fwd_args & P, int * ok) {
    *ok = 0;
#if SSMI_CUDA_WGMMA
    if (!(out_v6_applies(P) && P.vq && P.vk && P.vv && (P.K == 64 || P.K == 128))) return SSM_STATUS_OK;
    ssmi_cuda_props dp;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_current_props(ctx, op, &dp));
    *ok = dp.major == 9 && dp.minor == 0 && v7_smem(P.K / 64, P.A, P.sct != 0).total <= dp.smem_optin;
#else
    (void)ctx, (void)op, (void)P;
#endif
    return SSM_STATUS_OK;
}

/* fast_output_kernel_v7 on v6's grid (the caller checked siso_v7_applies); PRE: version 8's. */
template <int MODE, bool PRE = false>
ssm_status launch_out_v7(ssm_context * ctx, const char * op, const m3_fwd_args & P, const dim3 grid) {
#if SSMI_CUDA_WGMMA
    const v7_smem L7(P.K / 64, P.A, P.sct != 0);
    void (*kernel)(const m3_fwd_args) =
        P.K == 128 ? fast_output_kernel_v7<MODE, 2, PRE> : fast_output_kernel_v7<MODE, 1, PRE>;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
        ctx, op, "cudaFuncSetAttribute",
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L7.total)));
    kernel<<<grid, kOutThreads7, (size_t)L7.total, ssmi_cuda_stream(ctx)>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "fast_output_kernel_v7 launch");
    return SSM_STATUS_OK;
#else
    (void)P, (void)grid;
    return ssmi_error(ctx, SSM_STATUS_INTERNAL, "%s: fast_output_kernel_v7 without sm_90a code", op);
#endif
}

/* VER = 6: the VER = 5 state kernel (fast_state_kernel_v6 when state_v6_selected()), then
 * fast_output_kernel_v6 where out_v6_applies, the VER = 5 output kernel elsewhere. VER = 7: VER =
 * 6 with fast_output_kernel_v7 where siso_v7_applies. */
template <int MODE, int VER>
ssm_status launch_fast(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int version) {
    constexpr int         SV = VER >= 6 ? 5 : VER;
    const cudaStream_t    s = ssmi_cuda_stream(ctx);
    const fast_smem<MODE> Ls(P.Kp, P.A, false, SV), Lo(P.Kp, P.A, true, SV, SV >= 4 && P.sct);
    const dim3            grid((unsigned)W, (unsigned)P.H, (unsigned)((P.V + kTV - 1) / kTV));
    const bool            v6 = VER >= 6 && out_v6_applies(P), st6 = VER >= 6 && state_v6_selected();
    int                   v7 = 0;
    if (VER >= 7) SSM_FORWARD_IF_ERROR(siso_v7_applies(ctx, op, P, &v7));
    /* version 8: the chunk scalars and θ once, where both consumers are the v6 state and v7 output kernels */
    const bool pre = VER >= 8 && v7 && st6 && P.prep != nullptr;
    if (pre) {
        chunk_prep_kernel<MODE>
            <<<dim3((unsigned)W, (unsigned)((P.H + kPrep2Warps - 1) / kPrep2Warps)), 32 * kPrep2Warps, 0, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "chunk_prep_kernel launch");
    }
    int chain = 0;
    if (pre) SSM_FORWARD_IF_ERROR(siso_chain_applies(ctx, op, P, &chain));
    if (chain) { /* the chain's K columns per block */
        const int             ks = chain;
        const siso_chain_smem Lc(P.A, ks);
        void (*kernel)(const m3_fwd_args) = ks == 64 ? siso_chain_kernel<MODE, 64> : siso_chain_kernel<MODE, 32>;
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
            ctx, op, "cudaFuncSetAttribute",
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Lc.total)));
        kernel<<<dim3((unsigned)P.NS, (unsigned)P.H, (unsigned)(((P.V + kTV - 1) / kTV) * (P.K / ks))), kChainThreads,
                 (size_t)Lc.total, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "siso_chain_kernel launch");
    } else if (st6) {
        void (*state6)(const m3_fwd_args) = pre ? fast_state_kernel_v6<MODE, true> : fast_state_kernel_v6<MODE, false>;
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
            ctx, op, "cudaFuncSetAttribute",
            cudaFuncSetAttribute(state6, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Ls.total)));
        state6<<<grid, kStateThreads6, Ls.total, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "fast_state_kernel_v6 launch");
    } else {
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                                              cudaFuncSetAttribute(fast_state_kernel<MODE, SV>,
                                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                                   (int)Ls.total)));
        fast_state_kernel<MODE, SV><<<grid, kFastThreads, Ls.total, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "fast_state_kernel launch");
    }
    if (!v6)
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                                              cudaFuncSetAttribute(fast_output_kernel<MODE, SV>,
                                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                                   (int)Lo.total)));
    if (P.NS > 0 && !chain) {
        SSM_FORWARD_IF_ERROR(launch_pass(ctx, op, P, version));
    }
    if (v7) return pre ? launch_out_v7<MODE, true>(ctx, op, P, grid) : launch_out_v7<MODE, false>(ctx, op, P, grid);
    if (v6) {
        const fast_smem<MODE> L6(P.Kp, P.A, true, 6, P.sct);
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
            ctx, op, "cudaFuncSetAttribute",
            cudaFuncSetAttribute(fast_output_kernel_v6<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)L6.total)));
        fast_output_kernel_v6<MODE><<<grid, kOutThreads6, L6.total, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "fast_output_kernel_v6 launch");
        return SSM_STATUS_OK;
    }
    fast_output_kernel<MODE, SV><<<grid, kFastThreads, Lo.total, s>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "fast_output_kernel launch");
    return SSM_STATUS_OK;
}

/* The kernel version, read on every call (an internal hook for tests and measurements, so a
 * failing version can be bypassed without a rebuild): SSMOPS_CUDA_SISO_FAST=0 → 0 (the
 * portable kernels and the sequential angle pass), =1 → 2 (the v2 tensor-core kernels and
 * the sequential angle pass), =2 → 3 (v3: the parallel angle scan, and the v3 tensor-core
 * kernels where the fast path applies), =3 → 4 (v4: v3's angle scan, pass_kernel_v4, and the
 * v4 tensor-core kernels where the fast path applies; the portable kernels otherwise), =4 → 5
 * (v5: v4 with the v5 output kernel), =5 → 6 (v6: v5 with fast_output_kernel_v6 where it
 * applies; 1.334 -> 1.188 ms at the shape of record), =6 → 7 (v6 with fast_output_kernel_v7, the
 * wgmma output kernel, where siso_v7_applies; 1.141 -> 1.061 ms at the shape of record), unset or
 * anything else (=7) → 8 (v7 with chunk_prep_kernel's scalars and θ where both the v6 state and
 * the v7 output kernels run; default since its first H200 run of 2026-11-30 (sixth session): every
 * test case and v7's bytes, memcheck/racecheck clean, 1.034 -> 0.921 ms at the shape of record,
 * 2.024 -> 1.795 ms at B=4 S=4096). getenv only reads. */
int siso_version() {
    const char * env = getenv("SSMOPS_CUDA_SISO_FAST");
    if (env != NULL && strcmp(env, "0") == 0) return 0;
    if (env != NULL && strcmp(env, "1") == 0) return 2;
    if (env != NULL && strcmp(env, "2") == 0) return 3;
    if (env != NULL && strcmp(env, "3") == 0) return 4;
    if (env != NULL && strcmp(env, "4") == 0) return 5;
    if (env != NULL && strcmp(env, "5") == 0) return 6;
    if (env != NULL && strcmp(env, "6") == 0) return 7;
    return 8;
}

/* THE switch of the tensor-core path: fp16/bf16 v (the compute dtype) and K ≤ 128 take
 * fast_state_kernel / fast_output_kernel, everything else the portable kernels. Both paths
 * serve every layout and feature. */
bool use_fast_path(const ssmi_mamba3_dims * d, int mode, int version) {
    return version != 0 && mode != M_F32 && d->dk <= kFastMaxK;
}


/* Everything the two forward entry points share, from tensor views. */
struct fwd_io {
    const ssm_tensor *q, *k, *v, *adt, *dt, *trap, *qb, *kb, *ang, *d, *z;
    const ssm_tensor *ang_in, *ssm_in, *k_in, *v_in, *cu;
    const ssm_tensor *out, *fin_ang, *fin_ssm, *fin_k, *fin_v;
    int               fused;
};

ssm_status check_pointers(ssm_context * ctx, const char * op, const ssm_tensor * const * ts, const char * const * names,
                          int n) {
    for (int i = 0; i < n; ++i)
        if (ts[i] != NULL) SSM_FORWARD_IF_ERROR(ssmi_cuda_check_pointer(ctx, op, names[i], ts[i]));
    return SSM_STATUS_OK;
}

ssm_status check_limits(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d) {
    SSM_RETURN_IF(d->dk > kMaxK, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: K=%lld is larger than the CUDA backend's limit of %d", op, (long long)d->dk, kMaxK);
    SSM_RETURN_IF(d->nheads > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: H=%lld is larger than the CUDA backend's limit of 65535", op, (long long)d->nheads);
    SSM_RETURN_IF(d->dv > INT32_MAX / 2 || d->dv * d->dk > INT32_MAX / 4 || (d->dv + kTV - 1) / kTV > 65535, ctx,
                  SSM_STATUS_UNSUPPORTED, "%s: V=%lld is too large for the CUDA backend", op, (long long)d->dv);
    SSM_RETURN_IF(d->nheads * d->dv * d->dk > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: H·V·K=%lld is too large for the CUDA backend", op, (long long)(d->nheads * d->dv * d->dk));
    return SSM_STATUS_OK;
}

/* Version 8's workspace region, where chunk_prep_kernel can run: where the v7 output kernel can
 * (16-bit v, K = 64 or 128, outputs of v's dtype, a build with wgmma) and the v6 state kernel is
 * selected; the launch (launch_fast: `pre`) decides finally with the device's limits, so the
 * region can still go unused. version: the one value of siso_version() of this call. */
bool wants_prep(const ssmi_mamba3_dims * d, const fwd_io & io, int version) {
#if SSMI_CUDA_WGMMA
    const bool wgmma = true;
#else
    const bool wgmma = false;
#endif
    return wgmma && version >= 8 && compute_mode(io.v->dtype) != M_F32 && (d->dk == 64 || d->dk == 128) &&
           io.out->dtype == io.v->dtype && state_v6_selected();
}

/* version, prep: read once by the caller, who sized ws with fwd_ws_layout(…, prep). */
ssm_status fwd_launch(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d, const fwd_io & io,
                      const m3_plan * pl, unsigned char * ws, int version, bool prep) {
    const fwd_ws       l = fwd_ws_layout(d, pl, io.fused, prep);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    /* Pageable sources: cudaMemcpyAsync returns once they are staged, so the plan may be freed. */
    if (pl->W > 0)
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
            ctx, op, "cudaMemcpyAsync (chunk plan)",
            cudaMemcpyAsync(ws + l.chunks, pl->chunks, sizeof(m3_chunk) * pl->W, cudaMemcpyHostToDevice, s)));
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (sequence plan)",
                         cudaMemcpyAsync(ws + l.segs, pl->segs, sizeof(m3_seg) * pl->NS, cudaMemcpyHostToDevice, s)));

    m3_fwd_args P;
    memset(&P, 0, sizeof P);
    P.chunks = (const m3_chunk *)(ws + l.chunks);
    P.segs = (const m3_seg *)(ws + l.segs);
    P.H = (int)d->nheads, P.G = (int)(d->nheads / d->nheads_qk), P.K = (int)d->dk, P.Kp = round16((int)d->dk);
    P.V = (int)d->dv, P.A = (int)d->nangles, P.NS = (int)pl->NS;
    P.fused = io.fused;
    P.has_d = ssmi_present(io.d);
    P.has_z = ssmi_present(io.z);
    P.has_states = ssmi_present(io.ssm_in);
    P.q = ssmi_cu_view_of(io.q), P.k = ssmi_cu_view_of(io.k), P.v = ssmi_cu_view_of(io.v);
    P.adt = ssmi_cu_view_of(io.adt), P.dt = ssmi_cu_view_of(io.dt), P.trap = ssmi_cu_view_of(io.trap);
    P.qb = ssmi_cu_view_of(io.qb), P.kb = ssmi_cu_view_of(io.kb), P.ang = ssmi_cu_view_of(io.ang);
    if (P.has_d) P.d = ssmi_cu_view_of(io.d);
    if (P.has_z) P.z = ssmi_cu_view_of(io.z);
    if (P.has_states) {
        P.ssm_in = ssmi_cu_view_of(io.ssm_in), P.k_in = ssmi_cu_view_of(io.k_in), P.v_in = ssmi_cu_view_of(io.v_in);
        if (io.fused) P.ang_in = ssmi_cu_view_of(io.ang_in);
    }
    P.states = (float *)(ws + l.states);
    P.lastcum = (float *)(ws + l.lastcum);
    P.theta0 = io.fused ? (float *)(ws + l.theta0) : nullptr;
    P.prep = l.prep_bytes > 0 ? (float *)(ws + l.prep) : nullptr;
    P.out = out_of(io.out);
    P.fin_ssm = out_of(io.fin_ssm), P.fin_k = out_of(io.fin_k), P.fin_v = out_of(io.fin_v);
    if (io.fused) P.fin_ang = out_of(io.fin_ang);

    const int mode = compute_mode(io.v->dtype);
    /* v4's 16-byte angle rows (fused angle sums and the fast kernels' θ): 16-bit v, angles of
     * its dtype; A ≤ 64 keeps a chunk's pieces within load_angles_v4's registers */
    P.vang = mode != M_F32 && P.A > 0 && P.A <= 64 && ssmi_cu_vec_rows(io.ang, io.v->dtype, d->nangles);
    if (io.fused && P.A > 0) {
        if (pl->W > 0 && version >= 7 && P.vang) {
            const dim3 grid((unsigned)pl->W, (unsigned)((P.H * (P.A / 8) + 15) / 16));
            if (mode == M_F16)
                angle_sum_kernel_v5<M_F16><<<grid, 128, 0, s>>>(P);
            else
                angle_sum_kernel_v5<M_BF16><<<grid, 128, 0, s>>>(P);
            SSMI_CU_CHECK_LAUNCH(ctx, op, "angle_sum_kernel_v5 launch");
        } else if (pl->W > 0 && version >= 4 && P.vang) {
            const dim3 grid((unsigned)pl->W, (unsigned)((P.H * (P.A / 8) + 127) / 128));
            if (mode == M_F16)
                angle_sum_kernel_v4<M_F16><<<grid, 128, 0, s>>>(P);
            else
                angle_sum_kernel_v4<M_BF16><<<grid, 128, 0, s>>>(P);
            SSMI_CU_CHECK_LAUNCH(ctx, op, "angle_sum_kernel_v4 launch");
        } else if (pl->W > 0) {
            angle_sum_kernel<<<dim3((unsigned)pl->W, (unsigned)((P.H * P.A + 127) / 128)), 128, 0, s>>>(P);
            SSMI_CU_CHECK_LAUNCH(ctx, op, "angle_sum_kernel launch");
        }
        if (version >= 3) {
            angle_scan_kernel<<<dim3((unsigned)((P.H * P.A + 3) / 4), (unsigned)P.NS), 128, 0, s>>>(P);
            SSMI_CU_CHECK_LAUNCH(ctx, op, "angle_scan_kernel launch");
        } else {
            angle_pass_kernel<<<dim3((unsigned)((P.H * P.A + 127) / 128), (unsigned)P.NS), 128, 0, s>>>(P);
            SSMI_CU_CHECK_LAUNCH(ctx, op, "angle_pass_kernel launch");
        }
    }
    if (pl->W > 0 && use_fast_path(d, mode, version)) {
        const int32_t T = io.v->dtype;
        P.vq = ssmi_cu_vec_rows(io.q, T, d->dk);
        P.vk = ssmi_cu_vec_rows(io.k, T, d->dk);
        P.vv = ssmi_cu_vec_rows(io.v, T, d->dv);
        P.vz = P.has_z && io.z->dtype == T && ssmi_cu_vec_pairs(io.z, d->dv);
        P.vout = (io.out->dtype == T || io.out->dtype == SSM_DTYPE_F32) && ssmi_cu_vec_pairs(io.out, d->dv);
        P.vz16 = P.has_z && ssmi_cu_vec_rows(io.z, T, d->dv);
        P.vo16 = ssmi_cu_vec_rows(io.out, T, d->dv);
        /* v4's sin/cos table only while two output blocks still fit on an SM (228 KB of shared
         * memory on sm_90, 1 KB of it reserved per block): A ≤ 32 at K = 128 */
        P.sct = version >= 4 && P.A > 0 &&
                2 * (fast_smem<M_BF16>(P.Kp, P.A, true, 4, true).total + 1024) <= (size_t)228 * 1024;
        if (mode == M_F16 && version >= 8)
            SSM_FORWARD_IF_ERROR((launch_fast<M_F16, 8>(ctx, op, P, pl->W, version)));
        else if (mode == M_F16 && version == 7)
            SSM_FORWARD_IF_ERROR((launch_fast<M_F16, 7>(ctx, op, P, pl->W, version)));
        else if (mode == M_F16 && version == 6)
            SSM_FORWARD_IF_ERROR((launch_fast<M_F16, 6>(ctx, op, P, pl->W, version)));
        else if (mode == M_F16 && version == 5)
            SSM_FORWARD_IF_ERROR((launch_fast<M_F16, 5>(ctx, op, P, pl->W, version)));
        else if (mode == M_F16 && version == 4)
            SSM_FORWARD_IF_ERROR((launch_fast<M_F16, 4>(ctx, op, P, pl->W, version)));
        else if (mode == M_F16 && version == 3)
            SSM_FORWARD_IF_ERROR((launch_fast<M_F16, 3>(ctx, op, P, pl->W, version)));
        else if (mode == M_F16)
            SSM_FORWARD_IF_ERROR((launch_fast<M_F16, 2>(ctx, op, P, pl->W, version)));
        else if (version >= 8)
            SSM_FORWARD_IF_ERROR((launch_fast<M_BF16, 8>(ctx, op, P, pl->W, version)));
        else if (version == 7)
            SSM_FORWARD_IF_ERROR((launch_fast<M_BF16, 7>(ctx, op, P, pl->W, version)));
        else if (version == 6)
            SSM_FORWARD_IF_ERROR((launch_fast<M_BF16, 6>(ctx, op, P, pl->W, version)));
        else if (version == 5)
            SSM_FORWARD_IF_ERROR((launch_fast<M_BF16, 5>(ctx, op, P, pl->W, version)));
        else if (version == 4)
            SSM_FORWARD_IF_ERROR((launch_fast<M_BF16, 4>(ctx, op, P, pl->W, version)));
        else if (version == 3)
            SSM_FORWARD_IF_ERROR((launch_fast<M_BF16, 3>(ctx, op, P, pl->W, version)));
        else
            SSM_FORWARD_IF_ERROR((launch_fast<M_BF16, 2>(ctx, op, P, pl->W, version)));
    } else if (pl->W > 0) {
        switch (mode) {
            case M_F16: SSM_FORWARD_IF_ERROR(launch_state_out<M_F16>(ctx, op, P, pl->W, version)); break;
            case M_BF16: SSM_FORWARD_IF_ERROR(launch_state_out<M_BF16>(ctx, op, P, pl->W, version)); break;
            default: SSM_FORWARD_IF_ERROR(launch_state_out<M_F32>(ctx, op, P, pl->W, version)); break;
        }
    } else {
        SSM_FORWARD_IF_ERROR(launch_pass(ctx, op, P, version));
    }
    if (P.fin_k.present || P.fin_v.present) {
        empty_kernel<<<(unsigned)P.NS, kThreads, 0, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "empty_kernel launch");
    }
    return SSM_STATUS_OK;
}

ssm_status run_fwd(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d, const fwd_io & io) {
    SSM_FORWARD_IF_ERROR(check_limits(ctx, op, d));
    {
        const ssm_tensor * ts[] = {io.q,    io.k,   io.v,       io.adt,     io.dt,     io.trap,   io.qb,
                                   io.kb,   io.ang, io.d,       io.z,       io.ang_in, io.ssm_in, io.k_in,
                                   io.v_in, io.out, io.fin_ang, io.fin_ssm, io.fin_k,  io.fin_v};
        const char *       names[] = {"q",
                                      "k",
                                      "v",
                                      "adt",
                                      "dt",
                                      "trap",
                                      "q_bias",
                                      "k_bias",
                                      "angles",
                                      "d",
                                      "z",
                                      "angle_state",
                                      "ssm_state",
                                      "k_state",
                                      "v_state",
                                      "out",
                                      "final_angle_state",
                                      "final_ssm_state",
                                      "final_k_state",
                                      "final_v_state"};
        SSM_FORWARD_IF_ERROR(check_pointers(ctx, op, ts, names, 20));
    }
    if (d->nseq == 0 || d->nheads == 0) return SSM_STATUS_OK;
    m3_plan pl;
    SSM_FORWARD_IF_ERROR(plan_fwd(ctx, op, d, io.cu, &pl));
    /* the knobs read once: the workspace layout depends on them */
    const int          version = siso_version();
    const bool         prep = wants_prep(d, io, version);
    const fwd_ws       l = fwd_ws_layout(d, &pl, io.fused, prep);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    void *             ws = NULL;
    ssm_status         st = ssmi_cuda_status(ctx, op, "cudaMallocAsync (workspace)", cudaMallocAsync(&ws, l.total, s));
    if (st == SSM_STATUS_OK) {
        st = fwd_launch(ctx, op, d, io, &pl, (unsigned char *)ws, version, prep);
        const ssm_status fs = ssmi_cuda_status(ctx, op, "cudaFreeAsync (workspace)", cudaFreeAsync(ws, s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    plan_free(&pl);
    return st;
}

/* ---- the decode step ------------------------------------------------------------------------------ */

const int kStepThreads = 128;

struct m3_step_args {
    int          H, G, K, V, A, has_d, has_z, vec;
    const int *  slots; /* (B) slot of each row, or NULL: slot = row */
    ssmi_cu_view q, k, v, adt, dt, trap, qb, kb, ang, d, z;
    ssmi_cu_view ang_in, ssm_in, k_in, v_in;
    m3_out       out, fin_ang, fin_ssm, fin_k, fin_v;
};

/* The token's decay and input coefficients of a decode step. */
struct step_coefs {
    float alpha, beta, gamma;
};

/* The part v1 and v2 of the step share: the token's coefficients, then in shared memory the new
 * angles th (A), the old k state kp (K), v and the old v state (vv, vp: V each), and after a
 * barrier the rotated q̂, k̂ (qh, kh: K each). Every read of the old small states happens before
 * the first barrier, so the finals may be the same views (in place). Ends with a barrier. */
__device__ __forceinline__ step_coefs step_stage(const m3_step_args & P, int b, int h, int g, int slot, float * qh,
                                                 float * kh, float * kp, float * vv, float * vp, float * th) {
    const int K = P.K, V = P.V, A = P.A;
    const float dt = ld2(P.dt, b, h);
    const float lam = sigmoidf(ld2(P.trap, b, h));
    const float alpha = expf(ld2(P.adt, b, h));
    const float beta = alpha * dt * (1.0f - lam);
    const float gamma = dt * lam;
    /* every read of the old small states happens before the first barrier, every write of a
     * final after it: the finals may be the same views (in place) */
    for (int m = threadIdx.x; m < A; m += blockDim.x)
        th[m] = wrap2pi(ld3(P.ang_in, slot, h, m) + (kPi * tanhf(ld3(P.ang, b, h, m))) * dt);
    for (int n = threadIdx.x; n < K; n += blockDim.x) kp[n] = ld3(P.k_in, slot, h, n);
    for (int p = threadIdx.x; p < V; p += blockDim.x) {
        vp[p] = ld3(P.v_in, slot, h, p);
        vv[p] = ld3(P.v, b, h, p);
    }
    __syncthreads();
    for (int m = threadIdx.x; m < K / 2; m += blockDim.x) {
        const int n = 2 * m;
        float     q0 = ld3(P.q, b, g, n) + ld2(P.qb, h, n), q1 = ld3(P.q, b, g, n + 1) + ld2(P.qb, h, n + 1);
        float     k0 = ld3(P.k, b, g, n) + ld2(P.kb, h, n), k1 = ld3(P.k, b, g, n + 1) + ld2(P.kb, h, n + 1);
        if (m < A) {
            float sn, cs;
            sincosf(th[m], &sn, &cs);
            const float a0 = q0 * cs - q1 * sn, a1 = q0 * sn + q1 * cs;
            const float b0 = k0 * cs - k1 * sn, b1 = k0 * sn + k1 * cs;
            q0 = a0, q1 = a1, k0 = b0, k1 = b1;
        }
        qh[n] = q0, qh[n + 1] = q1, kh[n] = k0, kh[n + 1] = k1;
    }
    __syncthreads();
    return step_coefs{alpha, beta, gamma};
}

__global__ void __launch_bounds__(kStepThreads) step_kernel(const m3_step_args P) {
    extern __shared__ __align__(16) float sm[];
    const int                             h = blockIdx.x, b = blockIdx.y, g = h / P.G;
    const int                             slot = P.slots != nullptr ? P.slots[b] : b;
    if (slot < 0) { /* padding row */
        for (int p = threadIdx.x; p < P.V; p += blockDim.x) st3(P.out, b, h, p, 0.0f);
        return;
    }
    const int   K = P.K, V = P.V, A = P.A;
    float *     qh = sm;     /* K */
    float *     kh = qh + K; /* K */
    float *     kp = kh + K; /* K: k state (old) */
    float *     vv = kp + K; /* V: v of this token */
    float *     vp = vv + V; /* V: v state (old) */
    float *     th = vp + V; /* A */
    const step_coefs cf = step_stage(P, b, h, g, slot, qh, kh, kp, vv, vp, th);
    const float      alpha = cf.alpha, beta = cf.beta, gamma = cf.gamma;
    const float dh = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, h * P.d.s[0]) : 0.0f;
    const int   warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int p = warp; p < V; p += nw) {
        const float a = beta * vp[p], c = gamma * vv[p];
        float       dot = 0.0f;
        if (P.vec) {
            const float4 * src = (const float4 *)((const float *)P.ssm_in.p + slot * P.ssm_in.s[0] + h * P.ssm_in.s[1] +
                                                  p * P.ssm_in.s[2]);
            float4 *       dst =
                P.fin_ssm.present
                          ? (float4 *)((float *)P.fin_ssm.p + slot * P.fin_ssm.s[0] + h * P.fin_ssm.s[1] + p * P.fin_ssm.s[2])
                          : nullptr;
            for (int n4 = lane; n4 < K / 4; n4 += 32) {
                const float4 hv = src[n4];
                const int    n = 4 * n4;
                float4       nv;
                nv.x = alpha * hv.x + a * kp[n] + c * kh[n];
                nv.y = alpha * hv.y + a * kp[n + 1] + c * kh[n + 1];
                nv.z = alpha * hv.z + a * kp[n + 2] + c * kh[n + 2];
                nv.w = alpha * hv.w + a * kp[n + 3] + c * kh[n + 3];
                dot += nv.x * qh[n] + nv.y * qh[n + 1] + nv.z * qh[n + 2] + nv.w * qh[n + 3];
                if (dst != nullptr) dst[n4] = nv;
            }
        } else {
            for (int n = lane; n < K; n += 32) {
                const float nv = alpha * ld4(P.ssm_in, slot, h, p, n) + a * kp[n] + c * kh[n];
                dot += nv * qh[n];
                if (P.fin_ssm.present) st4(P.fin_ssm, slot, h, p, n, nv);
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (lane == 0) {
            float y = dot + dh * vv[p];
            if (P.has_z) {
                const float zv = ld3(P.z, b, h, p);
                y *= zv * sigmoidf(zv);
            }
            st3(P.out, b, h, p, y);
        }
    }
    if (P.fin_ang.present)
        for (int m = threadIdx.x; m < A; m += blockDim.x) st3(P.fin_ang, slot, h, m, th[m]);
    if (P.fin_k.present)
        for (int n = threadIdx.x; n < K; n += blockDim.x) st3(P.fin_k, slot, h, n, kh[n]);
    if (P.fin_v.present)
        for (int p = threadIdx.x; p < V; p += blockDim.x) st3(P.fin_v, slot, h, p, vv[p]);
}

/* fp32, unit K stride, 16-byte aligned base and every other stride a multiple of 4. */
int vec_ok(const ssm_tensor * t) {
    if (!ssmi_present(t)) return 1;
    if (t->dtype != SSM_DTYPE_F32 || t->strides[3] != 1 || ((uintptr_t)t->data & 15) != 0) return 0;
    for (int i = 0; i < 3; ++i)
        if (t->strides[i] % 4 != 0) return 0;
    return 1;
}

/* ---- the decode step, v2 (fp32 vectorised pools) ------------------------------------------------- *
 * One block of 256 threads per (head, row). The V×K/4 float4s of the state are dealt out
 * round-robin (float4 f = i·256 + thread, i < NPER); every thread issues ALL its state loads
 * (__ldcs, evict-first: the state is touched once) before the scalars, θ, q̂ and k̂ are
 * computed, so up to NPER 16-byte loads per thread (32 KB per block at NPER = 8) are in flight
 * while the block does its small work. Each float4's 4-term dot with q̂ goes to shared memory;
 * after a barrier a warp per state row sums the row's partials in a fixed order (lane-strided,
 * then a shuffle tree), so results are bitwise identical across runs. New states are stored
 * with __stcs. Slots come in the kernel parameters when B ≤ kStep2InlineSlots (no allocation,
 * no copy); larger batches use the uploaded list of v1. */
const int kStep2Threads = 256;
const int kStep2MaxPer = 16; /* float4s per thread: V·K ≤ 4·256·16 = 16384 */
const int kStep2InlineSlots = 256;

struct m3_step2_args {
    m3_step_args base;         /* vec is implied; base.slots used when inline_slots == 0 */
    int          inline_slots; /* 1: row b uses islots[b]                               */
    int          islots[kStep2InlineSlots];
};
static_assert(sizeof(m3_step2_args) <= 4000, "step v2 parameters must fit the 4 KB kernel parameter space");

template <int NPER>
__global__ void __launch_bounds__(kStep2Threads, 2) step2_kernel(const __grid_constant__ m3_step2_args A2) {
    extern __shared__ __align__(16) float sm[];
    const m3_step_args & P = A2.base;
    const int            h = blockIdx.x, b = blockIdx.y, g = h / P.G;
    const int            slot = A2.inline_slots ? A2.islots[b] : (P.slots != nullptr ? P.slots[b] : b);
    if (slot < 0) { /* padding row: out = 0, no state touched */
        for (int p = threadIdx.x; p < P.V; p += blockDim.x) st3(P.out, b, h, p, 0.0f);
        return;
    }
    const int K = P.K, V = P.V, A = P.A, K4 = K >> 2, total = V * K4;

    /* 1. every state load first (they depend on nothing but the slot) */
    const float4 * src =
        (const float4 *)((const float *)P.ssm_in.p + (long long)slot * P.ssm_in.s[0] + (long long)h * P.ssm_in.s[1]);
    const long long srow = P.ssm_in.s[2] >> 2; /* row stride in float4s (a multiple of 4 floats: vec_ok) */
    float4          hv[NPER];
#pragma unroll
    for (int i = 0; i < NPER; ++i) {
        const int f = i * kStep2Threads + (int)threadIdx.x;
        if (f < total) {
            const int p = f / K4, n4 = f - p * K4;
            hv[i] = __ldcs(src + p * srow + n4);
        } else {
            hv[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }

    /* 2. the small work while the loads fly (same math as v1) */
    float *     qh = sm;     /* K: offsets 0, K, 2K are multiples of 4 floats (K % 4 == 0) */
    float *     kh = qh + K; /* K */
    float *     kp = kh + K; /* K: k state (old) */
    float *     vv = kp + K; /* V */
    float *     vp = vv + V; /* V: v state (old) */
    float *     th = vp + V; /* A */
    float *     part = th + A; /* total: per-float4 dot partials */
    const step_coefs cf = step_stage(P, b, h, g, slot, qh, kh, kp, vv, vp, th);
    const float      alpha = cf.alpha, beta = cf.beta, gamma = cf.gamma;

    /* 3. h' = α·h + β·v_prev k_prevᵀ + γ·v k̂ᵀ, stored; its dot with q̂ per float4 */
    float4 *        dst = P.fin_ssm.present ? (float4 *)((float *)P.fin_ssm.p + (long long)slot * P.fin_ssm.s[0] +
                                                         (long long)h * P.fin_ssm.s[1])
                                            : nullptr;
    const long long drow = P.fin_ssm.s[2] >> 2;
    const float4 *  q4 = (const float4 *)qh;
    const float4 *  kh4 = (const float4 *)kh;
    const float4 *  kp4 = (const float4 *)kp;
#pragma unroll
    for (int i = 0; i < NPER; ++i) {
        const int f = i * kStep2Threads + (int)threadIdx.x;
        if (f < total) {
            const int    p = f / K4, n4 = f - p * K4;
            const float  a = beta * vp[p], c = gamma * vv[p];
            const float4 ko = kp4[n4], kn = kh4[n4], qq = q4[n4];
            float4       nv;
            nv.x = alpha * hv[i].x + a * ko.x + c * kn.x;
            nv.y = alpha * hv[i].y + a * ko.y + c * kn.y;
            nv.z = alpha * hv[i].z + a * ko.z + c * kn.z;
            nv.w = alpha * hv[i].w + a * ko.w + c * kn.w;
            part[f] = nv.x * qq.x + nv.y * qq.y + nv.z * qq.z + nv.w * qq.w;
            if (dst != nullptr) __stcs(dst + p * drow + n4, nv);
        }
    }
    __syncthreads();

    /* 4. y[p] = Σ partials of row p in a fixed order; out = (y + D·v)·silu(z) */
    const float dh = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, h * P.d.s[0]) : 0.0f;
    const int   warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int p = warp; p < V; p += nw) {
        float dot = 0.0f;
        for (int j = lane; j < K4; j += 32) dot += part[p * K4 + j];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (lane == 0) {
            float y = dot + dh * vv[p];
            if (P.has_z) {
                const float zv = ld3(P.z, b, h, p);
                y *= zv * sigmoidf(zv);
            }
            st3(P.out, b, h, p, y);
        }
    }
    if (P.fin_ang.present)
        for (int m = threadIdx.x; m < A; m += blockDim.x) st3(P.fin_ang, slot, h, m, th[m]);
    if (P.fin_k.present)
        for (int n = threadIdx.x; n < K; n += blockDim.x) st3(P.fin_k, slot, h, n, kh[n]);
    if (P.fin_v.present)
        for (int p = threadIdx.x; p < V; p += blockDim.x) st3(P.fin_v, slot, h, p, vv[p]);
}

/* float4s per thread of v2 for a V×K state: the smallest instantiated count that covers it, or 0
 * when v2 does not apply (more than kStep2MaxPer per thread). */
int step2_per_thread(long long K, long long V) {
    const long long need = (V * (K / 4) + kStep2Threads - 1) / kStep2Threads;
    for (int n = 1; n <= kStep2MaxPer; n *= 2)
        if (need <= n) return n;
    return 0;
}

/* Which step kernel: SSMOPS_CUDA_STEP_KERNEL (read on every call) "v1" or "v2" forces one (v2
 * where it applies, else v1); otherwise v3 where it applies, else v2 for few (row, head)
 * blocks and v1 for many. Measured on the H200 (2026-11-30, fp32 pools, H=64 K=128 V=64): B=1
 * v1 20.4 µs, v2 14.3 µs; B=128 v1 0.227 ms (58% of the copy bandwidth), v2 0.380 ms. */
const long kStep2MaxBlocks = 256;
int step_version_requested(void) {
    const char * e = getenv("SSMOPS_CUDA_STEP_KERNEL");
    if (e != NULL && strcmp(e, "v1") == 0) return 1;
    if (e != NULL && strcmp(e, "v2") == 0) return 2;
    return 3;
}

template <int NPER>
cudaError_t launch_step2_n(const m3_step2_args & A2, int B, size_t smem, cudaStream_t s) {
    step2_kernel<NPER><<<dim3((unsigned)A2.base.H, (unsigned)B), kStep2Threads, smem, s>>>(A2);
    return cudaGetLastError();
}

/* The v2 instance for `per` float4s per thread (a power of two ≤ kStep2MaxPer). */
cudaError_t launch_step2(const m3_step2_args & A2, int per, int B, size_t smem, cudaStream_t s) {
    switch (per) {
        case 1: return launch_step2_n<1>(A2, B, smem, s);
        case 2: return launch_step2_n<2>(A2, B, smem, s);
        case 4: return launch_step2_n<4>(A2, B, smem, s);
        case 8: return launch_step2_n<8>(A2, B, smem, s);
        default: return launch_step2_n<16>(A2, B, smem, s);
    }
}

/* ---- the decode step, v3 (fp32 vectorised pools; the default where it applies) ------------------- *
 * The profile of v1 on the H200 (B=128 H=64 K=128 V=64 fp32): DRAM 49%, long-scoreboard stalls
 * on the state loads of a warp-per-row loop (one row's loads in flight per warp), barrier stalls
 * after the staging of θ, q̂, k̂, and epilogue z loads waited on right before use. v3 issues
 * every global load a warp needs at its start, in one batch, and has a single barrier (before
 * the small finals are written, for in-place pools):
 *
 *   - one block per (head, row) covers the V×K state: a state row of K/4 float4s on L = K/4
 *     lanes (one float4 per lane and row; K/4 a power of two, 8 ≤ K/4 ≤ 32), RU = 8
 *     consecutive rows per lane group (8 float4 = 128 bytes of state per thread), ceil(V / 8)
 *     groups (≤ 256 threads: V ≤ 64 at K = 128, V ≤ 128 at K = 64);
 *   - each lane computes θ, q̂, k̂ and loads the old k state of ITS columns itself (the same
 *     columns in all its rows; groups repeat this small work instead of sharing it through
 *     shared memory behind barriers);
 *   - lane k < RU of a group owns row p0 + k: it loads the old v state, v and z of that row and
 *     hands β·v_prev and γ·v to the group by shuffles; it writes out and the new v state;
 *   - per row: h' = α·h + (β·v_prev)·k_prev + (γ·v)·k̂ stored with st.global.cs, dot(h', q̂)
 *     summed per lane (the 4-term sum of v1), then over the L lanes by a fixed xor butterfly
 *     (bitwise reproducible);
 *   - after one __syncthreads (every read of the old angle / k / v states is done), group 0
 *     writes the new angle and k states, owners the new v state: the finals may be the very
 *     views of the inputs (in place).
 * Registers ≤ 85 (launch bounds 256 × 3; ptxas: 80, no spill; at ≤ 64 it spilled), so an SM
 * holds 3 blocks of the bench shape (V=64, K=128: 256 threads, 32 KB of state each): 96 KB of
 * state reads in flight per SM at the blocks' start (the measured in-place ceiling needs ~32
 * KB). Typed loads (no dtype switch) when the activations (q, k, v, trap, angles, z) are all
 * fp32 or all bf16 and the rest fp32; other mixes through ssmi_cu_ld. Other shapes (K < 32,
 * K > 128, K / 4 not a power of two, V too large for 256 threads) take v2 / v1. */
const int kStep3MaxThreads = 256;
const int kStep3Vectors = 8; /* float4s of state per thread */

/* Input loads by dtype class. act: q, k, v, trap, angles, z; par: the rest (and the old small
 * states, read before any final is written). */
struct s3_in_f32 {
    __device__ static float act(const ssmi_cu_view & t, long long off) { return __ldg((const float *)t.p + off); }
    __device__ static float par(const ssmi_cu_view & t, long long off) { return __ldg((const float *)t.p + off); }
};
struct s3_in_bf16 {
    __device__ static float act(const ssmi_cu_view & t, long long off) {
        return __uint_as_float((unsigned int)__ldg((const unsigned short *)t.p + off) << 16);
    }
    __device__ static float par(const ssmi_cu_view & t, long long off) { return __ldg((const float *)t.p + off); }
};
struct s3_in_any {
    __device__ static float act(const ssmi_cu_view & t, long long off) { return ssmi_cu_ld(t.p, t.dtype, off); }
    __device__ static float par(const ssmi_cu_view & t, long long off) { return ssmi_cu_ld(t.p, t.dtype, off); }
};

template <class IN, int CPL, int RU>
__global__ void __launch_bounds__(kStep3MaxThreads, 3) step3_kernel(const __grid_constant__ m3_step2_args A2) {
    const m3_step_args & P = A2.base;
    const unsigned       full = 0xffffffffu;
    const int            h = blockIdx.x, b = blockIdx.y, g = h / P.G;
    const int            slot = A2.inline_slots ? A2.islots[b] : (P.slots != nullptr ? P.slots[b] : b);
    if (slot < 0) { /* padding row: out = 0, no state touched (uniform over the block) */
        for (int p = threadIdx.x; p < P.V; p += blockDim.x) st3(P.out, b, h, p, 0.0f);
        return;
    }
    const int K = P.K, V = P.V, A = P.A, K4 = K >> 2;
    const int L = K4 < 32 ? K4 : 32; /* a power of two (host-checked) */
    const int lane = (int)threadIdx.x & (L - 1), grp = (int)threadIdx.x / L;
    const int p0 = grp * RU;
    const int nrows = V - p0; /* rows k < nrows (and k < RU) of this group exist */

    /* 1. the state: RU × CPL float4s (evict-first, coherent: in place, this thread writes the
     * same bytes afterwards) */
    const long long srow =
        (long long)slot * P.ssm_in.s[0] + (long long)h * P.ssm_in.s[1] + (long long)p0 * P.ssm_in.s[2];
    float4 hv[RU][CPL];
#pragma unroll
    for (int k = 0; k < RU; ++k)
#pragma unroll
        for (int c = 0; c < CPL; ++c)
            hv[k][c] = k < nrows ? __ldcs((const float4 *)((const float *)P.ssm_in.p + srow + k * P.ssm_in.s[2] +
                                                           (long long)(lane + c * L) * 4))
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);

    /* 2. the head's scalars (every thread: one broadcast load each per warp) */
    const float dt = IN::par(P.dt, (long long)b * P.dt.s[0] + (long long)h * P.dt.s[1]);
    const float trap = IN::act(P.trap, (long long)b * P.trap.s[0] + (long long)h * P.trap.s[1]);
    const float adt = IN::par(P.adt, (long long)b * P.adt.s[0] + (long long)h * P.adt.s[1]);
    const float dh = P.has_d ? IN::par(P.d, (long long)h * P.d.s[0]) : 0.0f;

    /* 3. the lane's columns n = 4·(lane + c·L) + j: q, k (+ biases), old k state, and the
     * angles of their pairs m = n / 2 (rotated where m < A) */
    float qh[CPL][4], kh[CPL][4], kp[CPL][4], ang[CPL][2], angin[CPL][2];
    const long long qo = (long long)b * P.q.s[0] + (long long)g * P.q.s[1];
    const long long ko = (long long)b * P.k.s[0] + (long long)g * P.k.s[1];
    const long long kso = (long long)slot * P.k_in.s[0] + (long long)h * P.k_in.s[1];
#pragma unroll
    for (int c = 0; c < CPL; ++c) {
        const int n0 = 4 * (lane + c * L);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const long long n = n0 + j;
            qh[c][j] = IN::act(P.q, qo + n * P.q.s[2]) + IN::par(P.qb, (long long)h * P.qb.s[0] + n * P.qb.s[1]);
            kh[c][j] = IN::act(P.k, ko + n * P.k.s[2]) + IN::par(P.kb, (long long)h * P.kb.s[0] + n * P.kb.s[1]);
            kp[c][j] = IN::par(P.k_in, kso + n * P.k_in.s[2]);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const long long m = n0 / 2 + i;
            ang[c][i] = angin[c][i] = 0.0f;
            if (m < A) {
                ang[c][i] = IN::act(P.ang, (long long)b * P.ang.s[0] + (long long)h * P.ang.s[1] + m * P.ang.s[2]);
                angin[c][i] =
                    IN::par(P.ang_in, (long long)slot * P.ang_in.s[0] + (long long)h * P.ang_in.s[1] + m * P.ang_in.s[2]);
            }
        }
    }

    /* 4. lane k < RU owns row p0 + k: old v state, v, z */
    const bool owner = lane < RU && lane < nrows;
    float      o_vp = 0.0f, o_vv = 0.0f, o_z = 0.0f;
    if (owner) {
        const long long p = p0 + lane;
        o_vp = IN::par(P.v_in, (long long)slot * P.v_in.s[0] + (long long)h * P.v_in.s[1] + p * P.v_in.s[2]);
        o_vv = IN::act(P.v, (long long)b * P.v.s[0] + (long long)h * P.v.s[1] + p * P.v.s[2]);
        if (P.has_z) o_z = IN::act(P.z, (long long)b * P.z.s[0] + (long long)h * P.z.s[1] + p * P.z.s[2]);
    }

    /* 5. the small math (same formulas as v1) while the state loads are in flight */
    const float lam = sigmoidf(trap);
    const float alpha = expf(adt);
    const float beta = alpha * dt * (1.0f - lam);
    const float gamma = dt * lam;
#pragma unroll
    for (int c = 0; c < CPL; ++c)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int m = 2 * (lane + c * L) + i;
            if (m < A) {
                const float th = wrap2pi(angin[c][i] + (kPi * tanhf(ang[c][i])) * dt);
                ang[c][i] = th; /* the new angle state */
                float sn, cs;
                sincosf(th, &sn, &cs);
                const float q0 = qh[c][2 * i], q1 = qh[c][2 * i + 1];
                const float k0 = kh[c][2 * i], k1 = kh[c][2 * i + 1];
                qh[c][2 * i] = q0 * cs - q1 * sn, qh[c][2 * i + 1] = q0 * sn + q1 * cs;
                kh[c][2 * i] = k0 * cs - k1 * sn, kh[c][2 * i + 1] = k0 * sn + k1 * cs;
            }
        }
    const float o_a = beta * o_vp, o_c = gamma * o_vv;

    /* 6. the rows: h', stored; dot(h', q̂); lane k keeps row k's sum */
    float4 *        dst = P.fin_ssm.present ? (float4 *)P.fin_ssm.p : nullptr;
    const long long drow = P.fin_ssm.present ? (long long)slot * P.fin_ssm.s[0] + (long long)h * P.fin_ssm.s[1] +
                                                  (long long)p0 * P.fin_ssm.s[2]
                                            : 0;
    float           dot[RU];
#pragma unroll
    for (int k = 0; k < RU; ++k) {
        const float a = __shfl_sync(full, o_a, k, L);
        const float cg = __shfl_sync(full, o_c, k, L);
        dot[k] = 0.0f;
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
            float4 nv;
            nv.x = alpha * hv[k][c].x + a * kp[c][0] + cg * kh[c][0];
            nv.y = alpha * hv[k][c].y + a * kp[c][1] + cg * kh[c][1];
            nv.z = alpha * hv[k][c].z + a * kp[c][2] + cg * kh[c][2];
            nv.w = alpha * hv[k][c].w + a * kp[c][3] + cg * kh[c][3];
            dot[k] += nv.x * qh[c][0] + nv.y * qh[c][1] + nv.z * qh[c][2] + nv.w * qh[c][3];
            if (dst != nullptr && k < nrows)
                __stcs((float4 *)((float *)dst + drow + k * P.fin_ssm.s[2] + (long long)(lane + c * L) * 4), nv);
        }
    }
    /* over the L lanes of each row; lane k keeps row k's sum */
    const float dot_own = ssmi_rows_sum<RU>(dot, L, lane, full);

    /* 7. out = (y + D·v)·silu(z) by the owners */
    if (owner) {
        float y = dot_own + dh * o_vv;
        if (P.has_z) y *= o_z * sigmoidf(o_z);
        st3(P.out, b, h, p0 + lane, y);
    }

    /* 8. the small finals, after every read of the old ones in this block */
    __syncthreads();
    if (grp == 0) {
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
            const int n0 = 4 * (lane + c * L);
            if (P.fin_k.present)
#pragma unroll
                for (int j = 0; j < 4; ++j) st3(P.fin_k, slot, h, n0 + j, kh[c][j]);
            if (P.fin_ang.present)
#pragma unroll
                for (int i = 0; i < 2; ++i)
                    if (n0 / 2 + i < A) st3(P.fin_ang, slot, h, n0 / 2 + i, ang[c][i]);
        }
    }
    if (owner && P.fin_v.present) st3(P.fin_v, slot, h, p0 + lane, o_vv);
}

/* The v3 plan of a K×V state (vectorised pools): 1 and *threads, or 0 when v3 does not apply
 * (K / 4 not a power of two in [RU, 32], or V > RU·256 / (K / 4)). */
int step3_plan(long long K, long long V, int * threads) {
    const long long L = K / 4, ru = kStep3Vectors;
    if (K % 4 != 0 || L < ru || L > 32 || (L & (L - 1)) != 0 || V < 1) return 0;
    const long long t = ((V + ru - 1) / ru * L + 31) / 32 * 32;
    if (t > kStep3MaxThreads) return 0;
    *threads = (int)t;
    return 1;
}

/* The input class of v3's typed loads: 0 activations fp32, 1 activations bf16 (the rest fp32
 * in both), 2 anything else. */
int step3_input_class(const ssm_mamba3_siso_step_args * a) {
    const ssm_tensor * act[] = {&a->q, &a->k, &a->v, &a->trap, &a->angles, &a->z};
    const ssm_tensor * par[] = {&a->adt, &a->dt, &a->q_bias, &a->k_bias, &a->d, &a->angle_state, &a->k_state, &a->v_state};
    const int32_t      adt = a->q.dtype;
    if (adt != SSM_DTYPE_F32 && adt != SSM_DTYPE_BF16) return 2;
    for (int i = 0; i < 6; ++i)
        if (ssmi_present(act[i]) && act[i]->dtype != adt) return 2;
    for (int i = 0; i < 8; ++i)
        if (ssmi_present(par[i]) && par[i]->dtype != SSM_DTYPE_F32) return 2;
    return adt == SSM_DTYPE_F32 ? 0 : 1;
}

template <class IN>
cudaError_t launch_step3_in(const m3_step2_args & A2, int B, int threads, cudaStream_t s) {
    step3_kernel<IN, 1, kStep3Vectors><<<dim3((unsigned)A2.base.H, (unsigned)B), threads, 0, s>>>(A2);
    return cudaGetLastError();
}

cudaError_t launch_step3(const m3_step2_args & A2, int cls, int B, int threads, cudaStream_t s) {
    if (cls == 0) return launch_step3_in<s3_in_f32>(A2, B, threads, s);
    if (cls == 1) return launch_step3_in<s3_in_bf16>(A2, B, threads, s);
    return launch_step3_in<s3_in_any>(A2, B, threads, s);
}

} /* namespace */

/* ---- entry points ------------------------------------------------------------------------------------ */

extern "C" ssm_status ssmi_cuda_mamba3_siso_fwd(ssm_context * ctx, const ssm_mamba3_params * p,
                                                const ssmi_mamba3_dims * d, const ssm_mamba3_siso_fwd_args * a) {
    (void)p; /* the chunk size is not semantic; the backend uses kC */
    fwd_io io;
    memset(&io, 0, sizeof io);
    io.q = &a->q, io.k = &a->k, io.v = &a->v, io.adt = &a->adt, io.dt = &a->dt, io.trap = &a->trap;
    io.qb = &a->q_bias, io.kb = &a->k_bias, io.ang = &a->angles, io.d = &a->d, io.z = &a->z;
    io.ssm_in = &a->ssm_state, io.k_in = &a->k_state, io.v_in = &a->v_state, io.cu = &a->cu_seqlens;
    io.out = &a->out, io.fin_ssm = &a->final_ssm_state, io.fin_k = &a->final_k_state, io.fin_v = &a->final_v_state;
    io.fused = 0;
    return run_fwd(ctx, "mamba3_siso_fwd", d, io);
}

extern "C" ssm_status ssmi_cuda_mamba3_siso(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                            const ssm_mamba3_siso_args * a) {
    (void)p;
    fwd_io io;
    memset(&io, 0, sizeof io);
    io.q = &a->q, io.k = &a->k, io.v = &a->v, io.adt = &a->adt, io.dt = &a->dt, io.trap = &a->trap;
    io.qb = &a->q_bias, io.kb = &a->k_bias, io.ang = &a->angles, io.d = &a->d, io.z = &a->z;
    io.ang_in = &a->angle_state, io.ssm_in = &a->ssm_state, io.k_in = &a->k_state, io.v_in = &a->v_state;
    io.cu = &a->cu_seqlens, io.out = &a->out, io.fin_ang = &a->final_angle_state;
    io.fin_ssm = &a->final_ssm_state, io.fin_k = &a->final_k_state, io.fin_v = &a->final_v_state;
    io.fused = 1;
    return run_fwd(ctx, "mamba3_siso", d, io);
}

extern "C" ssm_status ssmi_cuda_mamba3_siso_step(ssm_context * ctx, const ssm_mamba3_params * p,
                                                 const ssmi_mamba3_dims * d, const ssm_mamba3_siso_step_args * a) {
    static const char op[] = "mamba3_siso_step";
    (void)p;
    {
        const ssm_tensor * ts[] = {&a->q,
                                   &a->k,
                                   &a->v,
                                   &a->adt,
                                   &a->dt,
                                   &a->trap,
                                   &a->q_bias,
                                   &a->k_bias,
                                   &a->angles,
                                   &a->d,
                                   &a->z,
                                   &a->angle_state,
                                   &a->ssm_state,
                                   &a->k_state,
                                   &a->v_state,
                                   &a->out,
                                   &a->final_angle_state,
                                   &a->final_ssm_state,
                                   &a->final_k_state,
                                   &a->final_v_state};
        const char *       names[] = {"q",
                                      "k",
                                      "v",
                                      "adt",
                                      "dt",
                                      "trap",
                                      "q_bias",
                                      "k_bias",
                                      "angles",
                                      "d",
                                      "z",
                                      "angle_state",
                                      "ssm_state",
                                      "k_state",
                                      "v_state",
                                      "out",
                                      "final_angle_state",
                                      "final_ssm_state",
                                      "final_k_state",
                                      "final_v_state"};
        SSM_FORWARD_IF_ERROR(check_pointers(ctx, op, ts, names, 20));
    }
    SSM_RETURN_IF(d->nheads > 65535 || d->batch > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: H=%lld or B=%lld is larger than the CUDA backend's limit of 65535", op, (long long)d->nheads,
                  (long long)d->batch);
    const size_t smem = sizeof(float) * (size_t)(3 * d->dk + 2 * d->dv + d->nangles + 4);
    SSM_RETURN_IF(smem > 48 * 1024, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: K=%lld, V=%lld need more shared memory than the CUDA step kernel has", op, (long long)d->dk,
                  (long long)d->dv);
    if (d->batch == 0 || d->nheads == 0) return SSM_STATUS_OK;

    m3_step_args P;
    memset(&P, 0, sizeof P);
    P.H = (int)d->nheads, P.G = (int)(d->nheads / d->nheads_qk), P.K = (int)d->dk, P.V = (int)d->dv;
    P.A = (int)d->nangles;
    P.has_d = ssmi_present(&a->d);
    P.has_z = ssmi_present(&a->z);
    P.q = ssmi_cu_view_of(&a->q), P.k = ssmi_cu_view_of(&a->k), P.v = ssmi_cu_view_of(&a->v);
    P.adt = ssmi_cu_view_of(&a->adt), P.dt = ssmi_cu_view_of(&a->dt), P.trap = ssmi_cu_view_of(&a->trap);
    P.qb = ssmi_cu_view_of(&a->q_bias), P.kb = ssmi_cu_view_of(&a->k_bias), P.ang = ssmi_cu_view_of(&a->angles);
    if (P.has_d) P.d = ssmi_cu_view_of(&a->d);
    if (P.has_z) P.z = ssmi_cu_view_of(&a->z);
    P.ang_in = ssmi_cu_view_of(&a->angle_state), P.ssm_in = ssmi_cu_view_of(&a->ssm_state);
    P.k_in = ssmi_cu_view_of(&a->k_state), P.v_in = ssmi_cu_view_of(&a->v_state);
    P.out = out_of(&a->out);
    P.fin_ang = out_of(&a->final_angle_state), P.fin_ssm = out_of(&a->final_ssm_state);
    P.fin_k = out_of(&a->final_k_state), P.fin_v = out_of(&a->final_v_state);
    P.vec = d->dk % 4 == 0 && vec_ok(&a->ssm_state) && vec_ok(&a->final_ssm_state);

    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const int          has_idx = ssmi_present(&a->state_batch_indices);
    /* v3 where it applies (fp32 vectorised pools, K / 4 a power of two, the head in one block);
     * else v2 (fp32 vectorised pools, V·K small enough) when asked for or for few blocks; else v1 */
    const int version = step_version_requested();
    int       threads3 = 0;
    const int use3 = version == 3 && P.vec && step3_plan(d->dk, d->dv, &threads3);
    const int want2 = version == 2 || (version == 3 && (long)(d->batch * d->nheads) <= kStep2MaxBlocks);
    const int per = !use3 && P.vec && want2 ? step2_per_thread(d->dk, d->dv) : 0;
    const int cls3 = use3 ? step3_input_class(a) : 2;
    /* v2's shared memory: q̂, k̂, old k, v, old v, θ and one dot partial per float4 (≤ 18 KB) */
    const size_t smem2 = sizeof(float) * (size_t)(3 * d->dk + 2 * d->dv + d->nangles + d->dv * (d->dk / 4));
    if ((use3 || per > 0) && (!has_idx || d->batch <= kStep2InlineSlots)) {
        /* the slots travel in the kernel parameters: no allocation, no copy */
        m3_step2_args A2; /* ~2.4 KB; the launch copies it into the parameter space */
        memset(&A2, 0, sizeof A2);
        A2.base = P;
        A2.inline_slots = has_idx;
        for (int64_t b = 0; has_idx && b < d->batch; ++b) {
            const int64_t v = idx_at(&a->state_batch_indices, b);
            A2.islots[b] = v < 0 ? -1 : (int)v;
        }
        if (use3)
            return ssmi_cuda_status(ctx, op, "step3_kernel launch",
                                    launch_step3(A2, cls3, (int)d->batch, threads3, s));
        const cudaError_t e = launch_step2(A2, per, (int)d->batch, smem2, s);
        return ssmi_cuda_status(ctx, op, "step2_kernel launch", e);
    }
    void *     dslots = NULL;
    ssm_status st = SSM_STATUS_OK;
    if (has_idx) {
        /* the host view's slots as int32 on the device (validation bounded them by the pool) */
        int * hs = (int *)malloc(sizeof(int) * (size_t)d->batch);
        SSM_RETURN_IF(hs == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the slot list", op);
        for (int64_t b = 0; b < d->batch; ++b) {
            const int64_t v = idx_at(&a->state_batch_indices, b);
            hs[b] = v < 0 ? -1 : (int)v;
        }
        st = ssmi_cuda_status(ctx, op, "cudaMallocAsync (slot list)",
                              cudaMallocAsync(&dslots, sizeof(int) * (size_t)d->batch, s));
        /* Pageable source: cudaMemcpyAsync returns once it is staged, so the list may be freed. */
        if (st == SSM_STATUS_OK)
            st = ssmi_cuda_status(
                ctx, op, "cudaMemcpyAsync (slot list)",
                cudaMemcpyAsync(dslots, hs, sizeof(int) * (size_t)d->batch, cudaMemcpyHostToDevice, s));
        free(hs);
        P.slots = (const int *)dslots;
    }
    if (st == SSM_STATUS_OK && use3) { /* v3 with an uploaded slot list (large B) */
        m3_step2_args A2;
        memset(&A2, 0, sizeof A2);
        A2.base = P;
        A2.inline_slots = 0;
        st = ssmi_cuda_status(ctx, op, "step3_kernel launch", launch_step3(A2, cls3, (int)d->batch, threads3, s));
    } else if (st == SSM_STATUS_OK && per > 0) { /* v2 with an uploaded slot list (large B) */
        m3_step2_args A2;
        memset(&A2, 0, sizeof A2);
        A2.base = P;
        A2.inline_slots = 0;
        const cudaError_t e = launch_step2(A2, per, (int)d->batch, smem2, s);
        st = ssmi_cuda_status(ctx, op, "step2_kernel launch", e);
    } else if (st == SSM_STATUS_OK) {
        step_kernel<<<dim3((unsigned)P.H, (unsigned)d->batch), kStepThreads, smem, s>>>(P);
        st = ssmi_cuda_status(ctx, op, "step_kernel launch", cudaGetLastError());
    }
    if (dslots != NULL) {
        const ssm_status fs = ssmi_cuda_status(ctx, op, "cudaFreeAsync (slot list)", cudaFreeAsync(dslots, s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    return st;
}

/* Selection table of mamba3_siso_fwd, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_mamba3_siso_fwd(int32_t i, ssmi_variant_info * out) {
    (void)i, (void)out;
    return 0;
}

/* Selection table of mamba3_siso, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_mamba3_siso(int32_t i, ssmi_variant_info * out) {
    (void)i, (void)out;
    return 0;
}

/* Selection table of mamba3_siso_step, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_mamba3_siso_step(int32_t i, ssmi_variant_info * out) {
    (void)i, (void)out;
    return 0;
}
