/*
 * mamba3_siso.cu — CUDA Mamba-3 SISO: the chunked core forward (cumulative angles in,
 * spec §2.3, §3.6), the combined forward (raw angles in, the angle cumsum fused, spec §2.4)
 * and the decode step (spec §2.6, §3.4).
 *
 * Forward. The work is cut on the host into chunks of kC = 64 tokens that restart at every
 * sequence start (a batch row, or a varlen sequence); the chunked form is exact for any
 * cut (spec §3.6), so params->chunk_size is not used. Kernels, in stream order:
 *   0. angle_sum_kernel    (combined op) per (chunk, head): Σ_i π·tanh(raw_i)·dt_i per angle,
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
 * Arithmetic: fp16/bf16 (v's dtype) run the three matrix products on the tensor cores (WMMA
 * 16x16x16, HMMA in SASS) with fp32 accumulation. Operands computed in fp32 (q̂, k̂, the
 * weighted k̂, P, the passed state) are split into a rounded part and the rounded remainder,
 * and each product of two such operands takes three MMAs (hi·hi + lo·hi + hi·lo), so the
 * results stay close to fp32 accuracy; v is exact in its own dtype. fp32 (and f64) inputs
 * run plain fp32 FFMA. θ, scalars, decays and states are fp32 throughout; sin/cos/tanh/exp
 * are the accurate CUDA functions (not the __ intrinsics).
 *
 * Decode step: one block per (head, row); θ, q̂, k̂ and the scalars in shared memory, then
 * one pass over the V×K fp32 state (a warp per state row; float4 loads/stores when both
 * pools are fp32 with unit K stride and 16-byte aligned rows, the generic strided path
 * otherwise): h' = α·h + β·v_prev k_prevᵀ + γ·v k̂ᵀ, y = h'·q̂ (a fixed warp reduction),
 * out = (y + D·v)·silu(z). Old k/v/θ states are read before any final is written, so the
 * final pools may be the input pools (in place).
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
#include "../core/ssmi.h"
}
#include "cuda_common.cuh"
#include "ssmi_cuda.h"

namespace {

using namespace nvcuda;

enum { M_F32 = 0, M_F16 = 1, M_BF16 = 2 };
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

/* hi[i] = v rounded to T and, in the 16-bit modes, lo[i] = the rounded remainder (lo is
 * not touched, and may be NULL, in fp32 mode). */
template <int MODE>
__device__ __forceinline__ void store_split(float v, typename cfg<MODE>::T * hi, typename cfg<MODE>::T * lo, int i) {
    to_t(v, &hi[i]);
    if (cfg<MODE>::SPLIT) to_t(v - from_t(hi[i]), &lo[i]);
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
    int       pad;
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
    ssmi_cu_view     q, k, v, adt, dt, trap, qb, kb, ang, d, z; /* inputs                        */
    ssmi_cu_view     ssm_in, k_in, v_in, ang_in;                /* initial states                */
    float *          states;  /* (W, H, V, K): chunk contributions, then entering states          */
    float *          lastcum; /* (W, H) c_last of each chunk                                     */
    float *          theta0;  /* (W, H, A) combined op: chunk angle sums, then θ entering        */
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

__global__ void __launch_bounds__(128) angle_sum_kernel(const m3_fwd_args P) {
    const int      w = blockIdx.x, h = blockIdx.y;
    const m3_chunk ch = P.chunks[w];
    for (int m = threadIdx.x; m < P.A; m += blockDim.x) {
        float run = 0.0f;
        for (int i = 0; i < ch.len; ++i) {
            const float dt = ld3(P.dt, ch.row, h, ch.t0 + i);
            run += (kPi * tanhf(ld4(P.ang, ch.row, ch.t0 + i, h, m))) * dt;
        }
        P.theta0[((long long)w * P.H + h) * P.A + m] = run;
    }
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
    for (int c = 0; c < sg.count; ++c) {
        const long long w = sg.first + c;
        float *         slot = &P.states[w * hvk + e];
        const float     local = *slot;
        *slot = st;
        st = expf(P.lastcum[w * P.H + h]) * st + local;
    }
    if (P.fin_ssm.present) st4(P.fin_ssm, s, h, p, n, st);
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
        }
    }
    return SSM_STATUS_OK;
}

/* Workspace: chunks | segs | lastcum (W,H) | theta0 (W,H,A) | states (W,H,V,K). */
struct fwd_ws {
    size_t chunks, segs, lastcum, theta0, states, total;
};
fwd_ws fwd_ws_layout(const ssmi_mamba3_dims * d, const m3_plan * pl, int fused) {
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
    l.total = o;
    return l;
}

template <int MODE>
ssm_status launch_state_out(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W) {
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
        const long long hvk = (long long)P.H * P.V * P.K;
        pass_kernel<<<dim3((unsigned)((hvk + kThreads - 1) / kThreads), (unsigned)P.NS), kThreads, 0, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "pass_kernel launch");
    }
    output_kernel<MODE><<<grid, kThreads, Lo.total, s>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "output_kernel launch");
    return SSM_STATUS_OK;
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

ssm_status fwd_launch(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d, const fwd_io & io,
                      const m3_plan * pl, unsigned char * ws) {
    const fwd_ws       l = fwd_ws_layout(d, pl, io.fused);
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
    P.out = out_of(io.out);
    P.fin_ssm = out_of(io.fin_ssm), P.fin_k = out_of(io.fin_k), P.fin_v = out_of(io.fin_v);
    if (io.fused) P.fin_ang = out_of(io.fin_ang);

    if (io.fused && P.A > 0) {
        if (pl->W > 0) {
            angle_sum_kernel<<<dim3((unsigned)pl->W, (unsigned)P.H), 128, 0, s>>>(P);
            SSMI_CU_CHECK_LAUNCH(ctx, op, "angle_sum_kernel launch");
        }
        angle_pass_kernel<<<dim3((unsigned)((P.H * P.A + 127) / 128), (unsigned)P.NS), 128, 0, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "angle_pass_kernel launch");
    }
    if (pl->W > 0) {
        switch (compute_mode(io.v->dtype)) {
            case M_F16: SSM_FORWARD_IF_ERROR(launch_state_out<M_F16>(ctx, op, P, pl->W)); break;
            case M_BF16: SSM_FORWARD_IF_ERROR(launch_state_out<M_BF16>(ctx, op, P, pl->W)); break;
            default: SSM_FORWARD_IF_ERROR(launch_state_out<M_F32>(ctx, op, P, pl->W)); break;
        }
    } else {
        const long long hvk = (long long)P.H * P.V * P.K;
        pass_kernel<<<dim3((unsigned)((hvk + kThreads - 1) / kThreads), (unsigned)P.NS), kThreads, 0, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "pass_kernel launch");
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
    const fwd_ws       l = fwd_ws_layout(d, &pl, io.fused);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    void *             ws = NULL;
    ssm_status         st = ssmi_cuda_status(ctx, op, "cudaMallocAsync (workspace)", cudaMallocAsync(&ws, l.total, s));
    if (st == SSM_STATUS_OK) {
        st = fwd_launch(ctx, op, d, io, &pl, (unsigned char *)ws);
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
    void *             dslots = NULL;
    ssm_status         st = SSM_STATUS_OK;
    if (ssmi_present(&a->state_batch_indices)) {
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
    if (st == SSM_STATUS_OK) {
        step_kernel<<<dim3((unsigned)P.H, (unsigned)d->batch), kStepThreads, smem, s>>>(P);
        st = ssmi_cuda_status(ctx, op, "step_kernel launch", cudaGetLastError());
    }
    if (dslots != NULL) {
        const ssm_status fs = ssmi_cuda_status(ctx, op, "cudaFreeAsync (slot list)", cudaFreeAsync(dslots, s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    return st;
}
