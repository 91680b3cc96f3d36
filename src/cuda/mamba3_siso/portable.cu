/*
 * portable.cu — the portable kernels of the SISO forward: any dtype (fp32 v, and fp16/bf16 v with
 * K > 128), K ≤ 256. Block-wide matrix products through shared memory: fp16/bf16 on the tensor
 * cores (WMMA 16x16x16) with fp32 accumulation, operands computed in fp32 (q̂, k̂, the weighted k̂,
 * P, the passed state) split into a rounded part and the rounded remainder, each product of two
 * such operands three MMAs (hi·hi + lo·hi + hi·lo), v exact in its own dtype; fp32 (and f64)
 * inputs plain fp32 FFMA. θ, scalars, decays and states are fp32 throughout; sin/cos/tanh/exp are
 * the accurate CUDA functions.
 *   portable_state_kernel   per (chunk, head, V tile): scalars (λ, γ, σ, the chunk-local inclusive
 *                           cumsum c of adt), θ of every token, k̂, then the chunk's contribution
 *                           s = Vᵀ·diag(σ_j·e^{c_last−c_j})·K̂ (V×K, fp32) and c_last.
 *   portable_output_kernel  per (chunk, head, V tile): q̂, k̂, d_i = q̃_i·k̃_i, scores Q̂K̂ᵀ,
 *                           P_ij = score·e^{c_i−c_j}·σ_j (j < i), P_ii = D + γ_i·d_i (the diagonal
 *                           never uses σ), Y = diag(e^{c})·Q̂·S_enterᵀ + P·V, out = Y·silu(z); the
 *                           last chunk of a sequence writes k̂ and v of its last token as the final
 *                           k / v states; a non-finite output marks (chunk, head).
 *   portable_fix_kernel     the non-finite fix, after any entry's outputs, for the marked (chunk,
 *                           head) pairs only: the output kernel's arithmetic, but P·V as the causal sum
 *                           Σ_{j≤i} P_ij·v_j (fp32 FFMA over the split P, hi + lo) in place of the
 *                           product over the whole chunk, whose masked-out terms are 0·v_j (NaN for
 *                           a non-finite v_j of a later token); no final k / v states.
 * Between them the state pass (state_pass.cu) turns the contributions into entering states.
 */
#include <mma.h>

#include <type_traits>

#include "siso.cuh"

namespace ssmi_siso {
namespace {

using namespace nvcuda;

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

/* ---- the chunk's θ, q̂ / k̂ and v tiles ----------------------------------------------------------- */

/* θ of every token of the chunk, th[i·A + m]: the given cumulative angles, or (combined op)
 * wrap(θ_enter + Σ_{s≤i} π·tanh(raw_s)·dt_s) with the running sum in the order of
 * angle_sum_kernel. */
__device__ inline void chunk_theta(const m3_fwd_args & P, const m3_chunk & ch, int w, int h, const float * dtv,
                                   float * th) {
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

/* ---- the state contributions ------------------------------------------------------------------- */

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

template <int MODE>
__global__ void __launch_bounds__(kThreads) portable_state_kernel(const m3_fwd_args P) {
    typedef typename cfg<MODE>::T T;
    extern __shared__ __align__(128) unsigned char smem[];
    const state_smem<MODE>                         Ly(P.Kp, P.A);
    const m3_scal                                  sc = carve_scal((float *)(smem + Ly.scal));
    float *                                        wj = sc.sig + (kC + 1); /* scalar row 5 (counted from 0) */
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

/* ---- the outputs ----------------------------------------------------------------------------------- */

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

/* The outputs of (chunk w, head h, V tile vt) in the block's shared memory smem; FIX: the
 * non-finite fix's form (the causal sum for P·V, no finals, no mark). */
template <int MODE, bool FIX>
__device__ __forceinline__ void output_block(const m3_fwd_args & P, unsigned char * smem, int w, int h, int vt) {
    typedef typename cfg<MODE>::T T;
    const bool                    SP = cfg<MODE>::SPLIT;
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

    const int      p0 = vt * kTV;
    const m3_chunk ch = P.chunks[w];
    const int      L = ch.len, g = h / P.G;
    const bool     finals = !FIX && ch.last; /* the final k / v states (the fix leaves them as they are) */
    chunk_scalars(P, ch, h, sc);
    for (int i = threadIdx.x; i < kC; i += blockDim.x) ecm[i] = i < L ? expf(sc.cm[i]) : 0.0f;
    chunk_theta(P, ch, w, h, sc.dtv, th);
    prep_qk<MODE>(P, ch, h, th, qh, ql, ks, ks_lo, LK, nullptr, finals && vt == 0 && P.fin_k.present);
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
    if constexpr (FIX) {
        /* Y += Σ_{j≤i} P_ij·v_j: the terms of later tokens are never formed */
        for (int o = threadIdx.x; o < L * kTV; o += blockDim.x) {
            const int i = o / kTV, pp = o - (o / kTV) * kTV;
            float     y = scr[i * LF + pp];
            for (int j = 0; j <= i; ++j) {
                const float pij = SP ? from_t(ph[i * LP + j]) + from_t(pl[i * LP + j]) : from_t(ph[i * LP + j]);
                y = fmaf(pij, from_t(vs[j * LV + pp]), y);
            }
            scr[i * LF + pp] = y;
        }
        __syncthreads();
    } else {
        /* Y += P (i × j) · V (j × p) */
        block_gemm<MODE, true, true>(scr, LF, ph, pl, LP, vs, nullptr, LV, kC, kTV, kC, true);
    }
    /* pregate_y: Y before the gate, in a loop of its own (as the mark below) so that the epilogue
     * keeps its registers */
    if (P.ypre.present)
        for (int o = threadIdx.x; o < L * kTV; o += blockDim.x) {
            const int i = o / kTV, pp = o - (o / kTV) * kTV;
            if (p0 + pp < P.V) store_ypre(P, ch.row, ch.t0 + i, h, p0 + pp, scr[i * LF + pp], 0.0f, false);
        }
    /* epilogue: gate, store; the final v state from the last token */
    for (int o = threadIdx.x; o < L * kTV; o += blockDim.x) {
        const int i = o / kTV, pp = o - (o / kTV) * kTV, p = p0 + pp;
        if (p >= P.V) continue;
        const long long t = ch.t0 + i;
        float           y = scr[i * LF + pp];
        if (P.has_z) {
            const float zv = ld4(P.z, ch.row, t, h, p);
            y *= zv * ssmi_math::sigmoid(zv);
        }
        st4(P.out, ch.row, t, h, p, y);
        if (finals && i == L - 1 && P.fin_v.present) st3(P.fin_v, ch.seq, h, p, ld4(P.v, ch.row, t, h, p));
    }
    /* the mark for the fix: a non-finite Y (the gate adds none that the fix would change), in a loop
     * of its own so that the epilogue keeps its registers */
    if (!FIX)
        for (int o = threadIdx.x; o < L * kTV; o += blockDim.x) {
            const int i = o / kTV, pp = o - (o / kTV) * kTV;
            if (p0 + pp < P.V && !isfinite(scr[i * LF + pp])) {
                mark_nonfinite(P);
                break;
            }
        }
}

template <int MODE>
__global__ void __launch_bounds__(kThreads) portable_output_kernel(const m3_fwd_args P) {
    extern __shared__ __align__(128) unsigned char smem[];
    output_block<MODE, false>(P, smem, blockIdx.x, blockIdx.y, blockIdx.z);
}

/* The non-finite fix: kFixBlocks blocks walk the (chunk, head, V tile) triples
 * (ssmi_cu_marked_walk); a marked pair's tiles are recomputed (output_block<FIX>). A small grid,
 * because every block holds the output kernel's shared memory. */
const int kFixBlocks = 256;
template <int MODE>
__global__ void __launch_bounds__(kThreads) portable_fix_kernel(const m3_fwd_args P, long long W, int VT) {
    extern __shared__ __align__(128) unsigned char smem[];
    ssmi_cu_marked_walk(
        W * P.H * VT, [&](long long o) { return P.nonfinite[o / VT] != 0; },
        [&](long long o) {
            const long long wh = o / VT;
            output_block<MODE, true>(P, smem, (int)(wh / P.H), (int)(wh % P.H), (int)(o - wh * VT));
            __syncthreads(); /* the next triple rewrites the shared memory */
        });
}

template <int MODE>
ssm_status launch_mode(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W) {
    const cudaStream_t     s = ssmi_cuda_stream(ctx);
    const state_smem<MODE> Ls(P.Kp, P.A);
    const out_smem<MODE>   Lo(P.Kp, P.A);
    const dim3             grid((unsigned)W, (unsigned)P.H, (unsigned)((P.V + kTV - 1) / kTV));
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
        ctx, op, "cudaFuncSetAttribute",
        cudaFuncSetAttribute(portable_state_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Ls.total)));
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                         cudaFuncSetAttribute(portable_output_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)Lo.total)));
    portable_state_kernel<MODE><<<grid, kThreads, Ls.total, s>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "portable_state_kernel launch");
    if (P.NS > 0) {
        SSM_FORWARD_IF_ERROR(launch_pass(ctx, op, P));
    }
    portable_output_kernel<MODE><<<grid, kThreads, Lo.total, s>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "portable_output_kernel launch");
    return SSM_STATUS_OK;
}

template <int MODE>
ssm_status launch_fix_mode(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W) {
    const out_smem<MODE> Lo(P.Kp, P.A);
    const int            VT = (P.V + kTV - 1) / kTV;
    const long long      total = W * P.H * VT;
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                         cudaFuncSetAttribute(portable_fix_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)Lo.total)));
    const unsigned blocks = (unsigned)(total < kFixBlocks ? total : kFixBlocks);
    portable_fix_kernel<MODE><<<blocks, kThreads, Lo.total, ssmi_cuda_stream(ctx)>>>(P, W, VT);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "portable_fix_kernel launch");
    return SSM_STATUS_OK;
}

} /* namespace */

ssm_status launch_portable(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode) {
    switch (mode) {
        case M_F16: return launch_mode<M_F16>(ctx, op, P, W);
        case M_BF16: return launch_mode<M_BF16>(ctx, op, P, W);
        default: return launch_mode<M_F32>(ctx, op, P, W);
    }
}

ssm_status launch_nonfinite_fix(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode) {
    if (W <= 0 || P.H <= 0 || P.V <= 0 || P.nonfinite == nullptr) return SSM_STATUS_OK;
    switch (mode) {
        case M_F16: return launch_fix_mode<M_F16>(ctx, op, P, W);
        case M_BF16: return launch_fix_mode<M_BF16>(ctx, op, P, W);
        default: return launch_fix_mode<M_F32>(ctx, op, P, W);
    }
}

} /* namespace ssmi_siso */
