/*
 * block_gemm.cu — the Mamba-2 kernels built on a block-wide GEMM through shared memory:
 *   chunk_state_kernel   the chunk states s_c = xᵀ·(B∘w) per (chunk, head, P tile): the
 *                        mamba2_chunk_state operator (upstream and CANN layouts, through strides)
 *                        in every dtype, and step 1 of the fp32 scan;
 *   output_ffma_kernel   the fp32 scan's outputs per (chunk, head, row tile, P tile):
 *                        y = exp(cum_i)·C_i·S_in + Σ_{j≤i} (C_i·B_j)·exp(cum_i − cum_j)·dt_j·x_j
 *                        + D·x_i, then the z gate.
 * Products: fp16/bf16 x on the tensor cores (WMMA 16x16x16, fp32 accumulators; B∘w split into a
 * rounded part and a rounded remainder, two products each), fp32 and f64 x by fp32 FFMA (no TF32,
 * which could not meet the fp32 bar). Every load goes through the strides and converts, so any
 * float dtype per tensor and any layout is accepted.
 */
#include <mma.h>
#include <type_traits>

#include "scan_dt.cuh"

namespace ssmi_m2 {
namespace {

using namespace nvcuda;

/* C (M×N fp32, ldc) = [C +] A·B with A (M×K) and B (K×N) in shared memory of type T.
 * AROW: A(i,k) = A[i·lda + k], else A[k·lda + i]; BROW: B(k,j) = B[k·ldb + j], else
 * B[j·ldb + k]. M, N, K are multiples of 16. MMA modes: WMMA tiles of 16×16×16 (fp32
 * accumulators); fp32 mode: FFMA. Ends with a barrier. */
template <int MODE, bool AROW, bool BROW>
__device__ void block_gemm(float * C, int ldc, const typename cfg<MODE>::T * A, int lda,
                           const typename cfg<MODE>::T * B, int ldb, int M, int N, int K, bool accumulate) {
    typedef typename cfg<MODE>::T T;
    if constexpr (MODE == M_F32) {
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
            const int ti = t / tn, tj = t - (t / tn) * tn;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            float * cp = C + ti * 16 * ldc + tj * 16;
            if (accumulate)
                wmma::load_matrix_sync(acc, cp, ldc, wmma::mem_row_major);
            else
                wmma::fill_fragment(acc, 0.0f);
            for (int k = 0; k < K; k += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb;
                wmma::load_matrix_sync(fa, AROW ? A + ti * 16 * lda + k : A + k * lda + ti * 16, lda);
                wmma::load_matrix_sync(fb, BROW ? B + k * ldb + tj * 16 : B + tj * 16 * ldb + k, ldb);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(cp, acc, ldc, wmma::mem_row_major);
        }
    }
    __syncthreads();
}

/* ---- shared-memory layouts and tile loads ---------------------------------------------------- */

/* Leading dimensions padded by 16 bytes: rows of a tile then start in different banks, so
 * the 16x16 fragment loads and stores are free of bank conflicts. Multiples of 8 elements
 * (16-bit types) and 4 (fp32), and every 16-row step stays 32-byte aligned, as WMMA needs. */
template <int MODE> struct lds {
    static __host__ __device__ int t_n(int Np) { return Np + 8; }          /* T rows of Np   */
    static __host__ __device__ int t_tile() { return cfg<MODE>::TILE + 8; } /* T rows of TILE */
    static __host__ __device__ int f_n(int Np) { return Np + 4; }          /* fp32, Np cols  */
    static __host__ __device__ int f_tile() { return cfg<MODE>::TILE + 4; } /* fp32, TILE    */
};

__device__ __forceinline__ float src_f(float v) { return v; }
__device__ __forceinline__ float src_f(double v) { return (float)v; }
__device__ __forceinline__ float src_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float src_f(__nv_bfloat16 v) { return __bfloat162float(v); }

/* dst[r·ld + c] (split into dst + dst_lo when dst_lo is given) = src[base + r·srow + c·scol] (· rowscale[r]) for
 * r < rows, c < cols; 0 where r ≥ nr or c ≥ nc. Eight loads in flight per thread. */
template <int MODE, typename S>
__device__ void load_tile_src(typename cfg<MODE>::T * dst, typename cfg<MODE>::T * dst_lo, int ld, const S * src,
                              long long base, long long srow, long long scol, int rows, int cols, int nr, int nc,
                              const float * rowscale) {
    const int total = rows * cols;
    for (int o0 = threadIdx.x; o0 < total; o0 += 8 * blockDim.x) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int o = o0 + u * blockDim.x;
            const int r = o / cols, c = o - (o / cols) * cols;
            v[u] = (o < total && r < nr && c < nc) ? src_f(src[base + r * srow + c * scol]) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int o = o0 + u * blockDim.x;
            if (o >= total) break;
            const int r = o / cols, c = o - (o / cols) * cols;
            const float w = rowscale != nullptr ? v[u] * rowscale[r] : v[u];
            if (dst_lo != nullptr)
                store_split<MODE>(w, &dst[r * ld + c], &dst_lo[r * ld + c]);
            else
                to_t(w, &dst[r * ld + c]);
        }
    }
}

template <int MODE>
__device__ void load_tile(typename cfg<MODE>::T * dst, typename cfg<MODE>::T * dst_lo, int ld, const void * p,
                          int dtype, long long base, long long srow, long long scol, int rows, int cols, int nr,
                          int nc, const float * rowscale) {
    switch (dtype) {
        case SSM_DTYPE_F32:
            load_tile_src<MODE>(dst, dst_lo, ld, (const float *)p, base, srow, scol, rows, cols, nr, nc, rowscale);
            break;
        case SSM_DTYPE_F16:
            load_tile_src<MODE>(dst, dst_lo, ld, (const __half *)p, base, srow, scol, rows, cols, nr, nc, rowscale);
            break;
        case SSM_DTYPE_BF16:
            load_tile_src<MODE>(dst, dst_lo, ld, (const __nv_bfloat16 *)p, base, srow, scol, rows, cols, nr, nc,
                                rowscale);
            break;
        default:
            load_tile_src<MODE>(dst, dst_lo, ld, (const double *)p, base, srow, scol, rows, cols, nr, nc, rowscale);
            break;
    }
}

/* ---- chunk states --------------------------------------------------------------------------- */

template <int MODE> struct state_smem {
    size_t dts, cums, tot, wj, xs, bs, bs_lo, acc, total;
    __host__ __device__ state_smem(int Np, int Q) {
        typedef typename cfg<MODE>::T T;
        const int TL = cfg<MODE>::TILE;
        size_t    o = 0;
        dts = o; o += align128(sizeof(float) * Q);
        cums = o; o += align128(sizeof(float) * Q);
        tot = o; o += align128(sizeof(float) * 32);
        wj = o; o += align128(sizeof(float) * TL);
        xs = o; o += align128(sizeof(T) * TL * lds<MODE>::t_tile());
        bs = o; o += align128(sizeof(T) * TL * lds<MODE>::t_n(Np));
        bs_lo = o; o += cfg<MODE>::SPLIT ? align128(sizeof(T) * TL * lds<MODE>::t_n(Np)) : 0;
        acc = o; o += align128(sizeof(float) * TL * lds<MODE>::f_n(Np));
        total = o;
    }
};

template <int MODE> __global__ void __launch_bounds__(kThreads) chunk_state_kernel(const m2_state_args A) {
    typedef typename cfg<MODE>::T T;
    const int        TL = cfg<MODE>::TILE;
    extern __shared__ __align__(128) unsigned char smem[];
    const state_smem<MODE> L(A.Np, A.Q);
    float * dts = (float *)(smem + L.dts);
    float * cums = (float *)(smem + L.cums);
    float * tot = (float *)(smem + L.tot);
    float * wj = (float *)(smem + L.wj);
    T *     xs = (T *)(smem + L.xs);
    T *     bs = (T *)(smem + L.bs);
    T *     bs_lo = (T *)(smem + L.bs_lo);
    float * acc = (float *)(smem + L.acc);

    const int      w = blockIdx.x, h = blockIdx.y, p0 = blockIdx.z * TL;
    const int      LX = lds<MODE>::t_tile(), LN = lds<MODE>::t_n(A.Np), LA = lds<MODE>::f_n(A.Np);
    const m2_chunk ch = A.chunks[w];
    const int      g = h / (A.H / A.G);
    if (A.raw) {
        load_dt(A.r, ch, h, ch.len, dts, cums, tot);
    } else {
        const int nload = max(ch.len, ch.ilast + 1);
        for (int i = threadIdx.x; i < nload; i += blockDim.x) {
            dts[i] = ssmi_cu_ld(A.dt.p, A.dt.dtype, ch.b * A.dt.s[0] + h * A.dt.s[1] + ch.c * A.dt.s[2] + i * A.dt.s[3]);
            cums[i] =
                ssmi_cu_ld(A.cum.p, A.cum.dtype, ch.b * A.cum.s[0] + h * A.cum.s[1] + ch.c * A.cum.s[2] + i * A.cum.s[3]);
        }
        __syncthreads();
    }
    const float cl = ch.ilast >= 0 ? cums[ch.ilast] : 0.0f;
    if (A.raw && blockIdx.z == 0 && threadIdx.x == 0) A.lastcum[(long long)w * A.H + h] = cl;

    bool first = true;
    for (int j0 = 0; j0 < ch.len; j0 += TL) {
        for (int jj = threadIdx.x; jj < TL; jj += blockDim.x) {
            const int j = j0 + jj;
            wj[jj] = (j < ch.len && j >= ch.j0) ? expf(cl - cums[j]) * dts[j] : 0.0f;
        }
        __syncthreads();
        /* x rows j, columns p of this P tile; B rows j weighted by w_j (rounded, split) */
        load_tile<MODE>(xs, nullptr, LX, A.x.p, A.x.dtype, ch.b * A.x.s[0] + (ch.t0 + j0) * A.x.s[1] + h * A.x.s[2] +
                                                          p0 * A.x.s[3],
                        A.x.s[1], A.x.s[3], TL, TL, ch.len - j0, A.P - p0, nullptr);
        load_tile<MODE>(bs, bs_lo, LN, A.b.p, A.b.dtype, ch.b * A.b.s[0] + (ch.t0 + j0) * A.b.s[1] + g * A.b.s[2],
                        A.b.s[1], A.b.s[3], TL, A.Np, ch.len - j0, A.N, wj);
        __syncthreads();
        /* acc (P tile × N) += xᵀ (P × j) · (B∘w) (j × N) */
        block_gemm<MODE, false, true>(acc, LA, xs, LX, bs, LN, TL, A.Np, TL, !first);
        if (cfg<MODE>::SPLIT) block_gemm<MODE, false, true>(acc, LA, xs, LX, bs_lo, LN, TL, A.Np, TL, true);
        first = false;
    }
    if (first) {
        for (int o = threadIdx.x; o < TL * LA; o += blockDim.x) acc[o] = 0.0f;
        __syncthreads();
    }
    /* Store with the smaller-stride index fastest (the CANN layout has p innermost). */
    const bool p_fast = llabs(A.ss[3]) < llabs(A.ss[4]);
    const long long base = ch.b * A.ss[0] + ch.c * A.ss[1] + h * A.ss[2];
    for (int o = threadIdx.x; o < TL * A.Np; o += blockDim.x) {
        const int pp = p_fast ? o % TL : o / A.Np;
        const int n = p_fast ? o / TL : o % A.Np;
        const int p = p0 + pp;
        if (p < A.P && n < A.N) ssmi_cu_st(A.states, A.st_dtype, base + p * A.ss[3] + n * A.ss[4], acc[pp * LA + n]);
    }
}

/* ---- outputs of the fp32 scan (instantiated for M_F32 only: 16-bit scans take output_mma.cu) -- */

template <int MODE> struct out_smem {
    size_t dts, cums, tot, cs, ss, ss_lo, bs, xs, sc, st, st_lo, acc, total;
    __host__ __device__ out_smem(int Np, int Q) {
        typedef typename cfg<MODE>::T T;
        const int  TL = cfg<MODE>::TILE;
        const bool sp = cfg<MODE>::SPLIT;
        size_t     o = 0;
        dts = o; o += align128(sizeof(float) * Q);
        cums = o; o += align128(sizeof(float) * Q);
        tot = o; o += align128(sizeof(float) * 32);
        const size_t tn = sizeof(T) * TL * lds<MODE>::t_n(Np), tt = sizeof(T) * TL * lds<MODE>::t_tile();
        const size_t ft = sizeof(float) * TL * lds<MODE>::f_tile();
        cs = o; o += align128(tn);
        ss = o; o += align128(tn);
        ss_lo = o; o += sp ? align128(tn) : 0;
        bs = o; o += align128(tn);
        xs = o; o += align128(tt);
        sc = o; o += align128(ft);
        st = o; o += align128(tt);
        st_lo = o; o += sp ? align128(tt) : 0;
        acc = o; o += align128(ft);
        total = o;
    }
};

template <int MODE> __global__ void __launch_bounds__(kThreads) output_ffma_kernel(const m2_out_args A) {
    typedef typename cfg<MODE>::T T;
    const int        TL = cfg<MODE>::TILE;
    const bool       SP = cfg<MODE>::SPLIT;
    extern __shared__ __align__(128) unsigned char smem[];
    const out_smem<MODE> L(A.Np, A.Q);
    float * dts = (float *)(smem + L.dts);
    float * cums = (float *)(smem + L.cums);
    float * tot = (float *)(smem + L.tot);
    T *     cs = (T *)(smem + L.cs);
    T *     ss = (T *)(smem + L.ss);
    T *     ss_lo = (T *)(smem + L.ss_lo);
    T *     bs = (T *)(smem + L.bs);
    T *     xs = (T *)(smem + L.xs);
    float * sc = (float *)(smem + L.sc);
    T *     st = (T *)(smem + L.st);
    T *     st_lo = (T *)(smem + L.st_lo);
    float * acc = (float *)(smem + L.acc);

    const int      w = blockIdx.x, h = blockIdx.y;
    const int      it = blockIdx.z / A.n_ptiles, pt = blockIdx.z - it * A.n_ptiles;
    const int      i0 = it * TL, p0 = pt * TL;
    const m2_chunk ch = A.chunks[w];
    if (i0 >= ch.len) return; /* uniform over the block */
    const int g = h / (A.H / A.G);
    const int LX = lds<MODE>::t_tile(), LN = lds<MODE>::t_n(A.Np), LF = lds<MODE>::f_tile();
    load_dt(A.r, ch, h, ch.len, dts, cums, tot);

    /* C rows of this tile and the entering state (P tile × N, fp32 → rounded, split). */
    load_tile<MODE>(cs, nullptr, LN, A.c.p, A.c.dtype, ch.b * A.c.s[0] + (ch.t0 + i0) * A.c.s[1] + g * A.c.s[2], A.c.s[1],
                    A.c.s[3], TL, A.Np, ch.len - i0, A.N, nullptr);
    const long long sbase = ((long long)w * A.H + h) * A.P * A.N + (long long)p0 * A.N;
    load_tile<MODE>(ss, ss_lo, LN, A.states, SSM_DTYPE_F32, sbase, A.N, 1, TL, A.Np, A.P - p0, A.N, nullptr);
    __syncthreads();
    /* off-diagonal: acc (i × p) = C (i × n) · S_inᵀ (n × p), then row i times exp(cum_i) */
    block_gemm<MODE, true, false>(acc, LF, cs, LN, ss, LN, TL, TL, A.Np, false);
    if (SP) block_gemm<MODE, true, false>(acc, LF, cs, LN, ss_lo, LN, TL, TL, A.Np, true);
    for (int o = threadIdx.x; o < TL * TL; o += blockDim.x) {
        const int ii = o / TL, i = i0 + ii;
        acc[ii * LF + (o - ii * TL)] *= i < ch.len ? expf(cums[i]) : 0.0f;
    }
    __syncthreads();

    /* diagonal blocks: j tiles up to and including this row tile */
    for (int j0 = 0; j0 <= i0; j0 += TL) {
        load_tile<MODE>(bs, nullptr, LN, A.b.p, A.b.dtype, ch.b * A.b.s[0] + (ch.t0 + j0) * A.b.s[1] + g * A.b.s[2],
                        A.b.s[1], A.b.s[3], TL, A.Np, ch.len - j0, A.N, nullptr);
        load_tile<MODE>(xs, nullptr, LX, A.x.p, A.x.dtype,
                        ch.b * A.x.s[0] + (ch.t0 + j0) * A.x.s[1] + h * A.x.s[2] + p0 * A.x.s[3], A.x.s[1], A.x.s[3],
                        TL, TL, ch.len - j0, A.P - p0, nullptr);
        __syncthreads();
        /* scores (i × j) = C (i × n) · Bᵀ (n × j) */
        block_gemm<MODE, true, false>(sc, LF, cs, LN, bs, LN, TL, TL, A.Np, false);
        for (int o = threadIdx.x; o < TL * TL; o += blockDim.x) {
            const int ii = o / TL, jj = o - ii * TL, i = i0 + ii, j = j0 + jj;
            const float v = (i < ch.len && j <= i) ? sc[ii * LF + jj] * expf(cums[i] - cums[j]) * dts[j] : 0.0f;
            store_split<MODE>(v, &st[ii * LX + jj], &st_lo[ii * LX + jj]);
        }
        __syncthreads();
        /* acc (i × p) += masked scores (i × j) · x (j × p) */
        block_gemm<MODE, true, true>(acc, LF, st, LX, xs, LX, TL, TL, TL, true);
        if (SP) block_gemm<MODE, true, true>(acc, LF, st_lo, LX, xs, LX, TL, TL, TL, true);
    }

    /* epilogue: D skip, z gate, store; a non-finite value stored marks (chunk, head) */
    for (int o = threadIdx.x; o < TL * TL; o += blockDim.x) {
        const int ii = o / TL, pp = o - ii * TL, i = i0 + ii, p = p0 + pp;
        if (i >= ch.len || p >= A.P) continue;
        const long long t = ch.t0 + i;
        float           y = acc[ii * LF + pp];
        if (A.has_d) {
            const float dv = ssmi_cu_ld(A.d.p, A.d.dtype, h * A.d.s[0] + (A.d_2d ? p * A.d.s[1] : 0));
            y += dv * ssmi_cu_ld(A.x.p, A.x.dtype, ch.b * A.x.s[0] + t * A.x.s[1] + h * A.x.s[2] + p * A.x.s[3]);
        }
        if (A.has_z) {
            const float zv = ssmi_cu_ld(A.z.p, A.z.dtype, ch.b * A.z.s[0] + t * A.z.s[1] + h * A.z.s[2] + p * A.z.s[3]);
            y *= zv / (1.0f + expf(-zv));
        }
        if (!isfinite(y)) mark_nonfinite(A.nonfinite, (long long)w * A.H + h);
        ssmi_cu_st(A.out, A.out_dtype, ch.b * A.os[0] + t * A.os[1] + h * A.os[2] + p * A.os[3], y);
    }
}

/* ---- launches -------------------------------------------------------------------------------- */

int mode_tile(int mode) { return mode == M_F32 ? cfg<M_F32>::TILE : cfg<M_F16>::TILE; }

template <int MODE> ssm_status launch_chunk_state_mode(ssm_context * ctx, const char * op, const m2_state_args & A, long long W) {
    const state_smem<MODE> L(A.Np, A.Q);
    const int              TL = cfg<MODE>::TILE;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
        ctx, op, "cudaFuncSetAttribute",
        cudaFuncSetAttribute(chunk_state_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L.total)));
    const dim3 grid((unsigned)W, (unsigned)A.H, (unsigned)((A.P + TL - 1) / TL));
    chunk_state_kernel<MODE><<<grid, kThreads, L.total, ssmi_cuda_stream(ctx)>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "chunk_state_kernel launch");
    return SSM_STATUS_OK;
}

template <int MODE> ssm_status launch_output_mode(ssm_context * ctx, const char * op, const m2_out_args & A, long long W) {
    const out_smem<MODE> L(A.Np, A.Q);
    const int            TL = cfg<MODE>::TILE;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
        ctx, op, "cudaFuncSetAttribute",
        cudaFuncSetAttribute(output_ffma_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L.total)));
    const long long itiles = (A.Q + TL - 1) / TL;
    SSM_RETURN_IF(itiles * A.n_ptiles > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: Q=%d and P=%d need too many tiles for the CUDA backend", op, A.Q, A.P);
    const dim3 grid((unsigned)W, (unsigned)A.H, (unsigned)(itiles * A.n_ptiles));
    output_ffma_kernel<MODE><<<grid, kThreads, L.total, ssmi_cuda_stream(ctx)>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "output_ffma_kernel launch");
    return SSM_STATUS_OK;
}

} /* namespace */

ssm_status launch_chunk_state(ssm_context * ctx, const char * op, int mode, const m2_state_args & A, long long W) {
    if (W == 0 || A.H == 0 || A.P == 0 || A.N == 0) return SSM_STATUS_OK;
    SSM_RETURN_IF((A.P + mode_tile(mode) - 1) / mode_tile(mode) > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: P=%d is too large for the CUDA backend", op, A.P);
    switch (mode) {
        case M_F16: return launch_chunk_state_mode<M_F16>(ctx, op, A, W);
        case M_BF16: return launch_chunk_state_mode<M_BF16>(ctx, op, A, W);
        default: return launch_chunk_state_mode<M_F32>(ctx, op, A, W);
    }
}

ssm_status launch_output_ffma(ssm_context * ctx, const char * op, const m2_out_args & A, long long W) {
    if (W == 0 || A.H == 0 || A.P == 0) return SSM_STATUS_OK;
    return launch_output_mode<M_F32>(ctx, op, A, W);
}

} /* namespace ssmi_m2 */
