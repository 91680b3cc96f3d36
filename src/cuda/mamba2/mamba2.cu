/*
 * mamba2.cu — CUDA Mamba-2 (SSD) forward: chunk_state (spec §2.2, upstream and CANN layouts
 * through strides) and the combined scan (spec §2.6, §2.8, DESIGN §3-§4).
 *
 * The scan runs as three kernels, parallel over chunks; only kernel 2 walks the chunks of a
 * sequence in order:
 *   1. chunk_state_kernel  per (chunk, head, P tile): processed dt and its in-chunk cumsum
 *      (block scan, fp32), then s_c = xᵀ·(B∘w) with w_j = exp(cum_last − cum_j)·dt_j, fp32
 *      accumulators, into an fp32 workspace; also cum_last per (chunk, head).
 *   2. state_pass_kernel   per (sequence, state element): S_{c+1} = exp(cum_last_c)·S_c + s_c
 *      in fp32, in place (the workspace then holds the state ENTERING each chunk), and the
 *      final state.
 *   3. output_kernel       per (chunk, head, row tile, P tile): y = exp(cum_i)·C_i·S_in
 *      + Σ_{j≤i} (C_i·B_j)·exp(cum_i − cum_j)·dt_j·x_j + D·x_i, then the z gate.
 * The work is cut into "work chunks" on the host: the chunks of every batch row, or of every
 * varlen sequence (chunks restart at each sequence start), or of every run of equal seq_idx
 * ids (a state reset is a new sequence; the chunked algorithm is exact for any cut, so only
 * rounding differs from a cut at multiples of Q). No decay exponent is clamped.
 *
 * fp16/bf16 scans replace kernels 1 and 3 by fast_state_kernel / fast_output_kernel (mma.sync
 * m16n8k16 from ldmatrix, results in registers, cp.async tiles; see "tensor-core path" below)
 * on 256-token work chunks (kScanQ) whatever chunk_size says. Versions (SSMOPS_CUDA_SCAN_KERNEL,
 * scan_kernel_version): v7 (default) = fast_output_kernel_v7 (Hopper wgmma, sm_90a builds only;
 * v6 pipelined, see "v7 of the output kernel") with the v6 state kernel (wgmma, see
 * fast_state_kernel_v6; SSMOPS_CUDA_SCAN_STATE=v5 keeps v5's) and v5's pass, where its layouts
 * hold, else v6's rule; v6 = the same with fast_output_kernel_v6, else v5; v5 (the state kernel
 * weights x instead of B, the state pass hands the output kernel its entering states already
 * split, and the output kernel stages z and D on chip; see "v5 of the state kernel" and "v5 of the
 * output kernel"); v3 (the baseline, also the output kernel wherever v5's 128-row tile does not fit
 * the device's shared memory).
 * Arithmetic: fp16/bf16 inputs run the matrix products on the tensor cores (WMMA 16x16x16 in
 * the portable kernels, HMMA in SASS) with fp32 accumulation; fp32 (and f64) inputs run plain fp32 FFMA (no TF32,
 * which could not meet the fp32 bar). Operands that are products of fp32 values
 * (B∘w, the masked decayed scores, the passed states) are split into a rounded part and a
 * rounded remainder (two products each), so they cost no accuracy: the results are within
 * a few 1e-6 of float64 for exact fp16/bf16 inputs (upstream rounds them once instead). Any strides and any float dtype per tensor: every load
 * goes through the strides and converts, so no layout is copied and none is refused.
 * Limits: N ≤ 256 (UNSUPPORTED beyond), H ≤ 65535.
 */
#include <mma.h>
#include <type_traits>
#include <stdlib.h>
#include <string.h>

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
const int kThreads = 256; /* every kernel: 8 warps (the block scan assumes it) */
const int kMaxN = 256;
/* Internal chunk of the scan (tokens): the combined op is exact for any cut, so the chunk_size
 * parameter only shapes mamba2_chunk_state's output; 256 keeps the fp32 state traffic small. */
const int kScanQ = 256;
const int kChainW = kScanQ + 4; /* floats per (chunk, head) of the chain's weights table */

template <int MODE> struct cfg;
template <> struct cfg<M_F32> {
    typedef float T;
    static const int  TILE = 32;
    static const bool SPLIT = false;
};
template <> struct cfg<M_F16> {
    typedef __half T;
    static const int  TILE = 64;
    static const bool SPLIT = true;
};
template <> struct cfg<M_BF16> {
    typedef __nv_bfloat16 T;
    static const int  TILE = 64;
    static const bool SPLIT = true;
};

__device__ __forceinline__ void to_t(float v, float * o) { *o = v; }
__device__ __forceinline__ void to_t(float v, __half * o) { *o = __float2half_rn(v); }
__device__ __forceinline__ void to_t(float v, __nv_bfloat16 * o) { *o = __float2bfloat16_rn(v); }
__device__ __forceinline__ float from_t(float v) { return v; }
__device__ __forceinline__ float from_t(__half v) { return __half2float(v); }
__device__ __forceinline__ float from_t(__nv_bfloat16 v) { return __bfloat162float(v); }

/* v rounded to T (hi) and, when split, the rounded remainder (lo). */
template <int MODE> __device__ __forceinline__ void store_split(float v, typename cfg<MODE>::T * hi,
                                                                 typename cfg<MODE>::T * lo) {
    to_t(v, hi);
    if (cfg<MODE>::SPLIT) to_t(v - from_t(*hi), lo);
}

/* One work chunk: tokens [t0, t0 + len) of batch row b; chunk index c (the index into the
 * caller's chunked tensors, or the work-chunk index for the scan's workspace); cum index of
 * the chunk's "last" position; first position j0 that counts towards the chunk state. */
struct m2_chunk {
    long long t0;
    int       b, c, len, ilast, j0, pad;
};
/* One sequence of work chunks [first, first + count) with its state rows (−1 = none). */
struct m2_seg {
    int first, count, init, fin;
};

__host__ __device__ inline size_t align128(size_t v) { return (v + 127) & ~(size_t)127; }
__host__ __device__ inline int round16(int v) { return (v + 15) & ~15; }

/* ---- block-wide helpers ------------------------------------------------------------------- */

/* Inclusive prefix sum of arr[0, n), n ≤ 4·kThreads, in place. */
__device__ void block_inclusive_scan(float * arr, int n, float * warp_tot) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float     v[4];
    float     s = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int i = tid * 4 + k;
        s += i < n ? arr[i] : 0.0f;
        v[k] = s;
    }
    float x = s;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
        const float y = __shfl_up_sync(0xffffffffu, x, off);
        if (lane >= off) x += y;
    }
    if (lane == 31) warp_tot[warp] = x;
    __syncthreads();
    float base = x - s;
    for (int w = 0; w < warp; ++w) base += warp_tot[w];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int i = tid * 4 + k;
        if (i < n) arr[i] = v[k] + base;
    }
    __syncthreads();
}

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

/* ---- processed dt and its in-chunk cumsum, into shared memory ------------------------------ */

/* The scan's dt (spec §2.1) from the raw tensors. */
struct m2_dt_raw {
    ssmi_cu_view dt, a, bias; /* dt (b, t, h); a (h); bias (h) */
    int          has_bias, softplus;
    float        lo, hi;
};

/* dts[i] = processed dt, cums[i] = inclusive cumsum of dt·A over i < n ≤ len (fp32). */
__device__ void load_dt_first(const m2_dt_raw & r, const m2_chunk & ch, int h, int n, float * dts, float * cums,
                              float * warp_tot) {
    const float ah = ssmi_cu_ld(r.a.p, r.a.dtype, h * r.a.s[0]);
    const float bias = r.has_bias ? ssmi_cu_ld(r.bias.p, r.bias.dtype, h * r.bias.s[0]) : 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = ssmi_cu_ld(r.dt.p, r.dt.dtype, ch.b * r.dt.s[0] + (ch.t0 + i) * r.dt.s[1] + h * r.dt.s[2]) + bias;
        if (r.softplus && v <= 20.0f) v = log1pf(expf(v));
        v = fminf(fmaxf(v, r.lo), r.hi);
        dts[i] = v;
        cums[i] = v * ah;
    }
    __syncthreads();
    block_inclusive_scan(cums, n, warp_tot);
}

/* The same over the whole chunk. */
__device__ void load_dt_raw(const m2_dt_raw & r, const m2_chunk & ch, int h, float * dts, float * cums,
                            float * warp_tot) {
    load_dt_first(r, ch, h, ch.len, dts, cums, warp_tot);
}

/* ---- shared-memory layouts and tile loads -------------------------------------------------- */

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

/* ---- kernel 1: chunk states ----------------------------------------------------------------- */

struct m2_state_args {
    const m2_chunk * chunks;
    int              H, G, P, N, Np, Q;
    ssmi_cu_view     x, b;     /* x (b, t, h, p); b (b, t, g, n)                          */
    int              raw;      /* 1: dt from m2_dt_raw; 0: dt / cum tensors (b, h, c, i)   */
    m2_dt_raw        r;
    ssmi_cu_view     dt, cum;
    void *           states;   /* (b, c, h, p, n) through ss                               */
    int              st_dtype;
    long long        ss[5];
    float *          lastcum;  /* raw mode: cum_last per (work chunk, head)                */
};

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
        load_dt_raw(A.r, ch, h, dts, cums, tot);
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

/* ---- kernel 2: state passing ------------------------------------------------------------------ */

struct m2_pass_args {
    const m2_seg *   segs;
    const float *    lastcum; /* (W, H) */
    float *          states;  /* (W, H, P, N): chunk states in, entering states out */
    int              H, P, N;
    ssmi_cu_view     init;    /* (row, h, p, n) */
    int              has_init;
    void *           fin;
    int              fin_dtype, has_fin;
    long long        fs[4];
    void *           split; /* (W, H, 2, P, N) of T, or NULL: v5's entering states (state_pass_kernel_v5) */
};

__global__ void __launch_bounds__(kThreads) state_pass_kernel(const m2_pass_args A) {
    const long long hpn = (long long)A.H * A.P * A.N;
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= hpn) return;
    const m2_seg sg = A.segs[blockIdx.y];
    const int    pn = A.P * A.N;
    const int    h = (int)(e / pn), p = (int)((e % pn) / A.N), n = (int)(e % A.N);
    float        s = 0.0f;
    if (A.has_init && sg.init >= 0)
        s = ssmi_cu_ld(A.init.p, A.init.dtype, sg.init * A.init.s[0] + h * A.init.s[1] + p * A.init.s[2] + n * A.init.s[3]);
    /* the next chunk's local state and decay are loaded before this chunk's store (the
     * compiler may not move a load above a store to the same array) */
    float local = 0.0f, decay = 0.0f;
    if (sg.count > 0) {
        local = A.states[(long long)sg.first * hpn + e];
        decay = expf(A.lastcum[(long long)sg.first * A.H + h]);
    }
    for (int k = 0; k < sg.count; ++k) {
        const long long w = sg.first + k;
        float           nlocal = 0.0f, ndecay = 0.0f;
        if (k + 1 < sg.count) {
            nlocal = A.states[(w + 1) * hpn + e];
            ndecay = expf(A.lastcum[(w + 1) * A.H + h]);
        }
        A.states[w * hpn + e] = s;
        s = decay * s + local;
        local = nlocal, decay = ndecay;
    }
    if (A.has_fin && sg.fin >= 0)
        ssmi_cu_st(A.fin, A.fin_dtype, sg.fin * A.fs[0] + h * A.fs[1] + p * A.fs[2] + n * A.fs[3], s);
}

/* ---- kernel 3: outputs ------------------------------------------------------------------------ */

struct m2_out_args {
    const m2_chunk * chunks;
    int              H, G, P, N, Np, Q, n_ptiles;
    m2_dt_raw        r;
    ssmi_cu_view     x, b, c, d, z;
    int              has_d, d_2d, has_z;
    const float *    states; /* (W, H, P, N) entering states */
    void *           out;
    int              out_dtype;
    long long        os[4];
};

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

template <int MODE> __global__ void __launch_bounds__(kThreads) output_kernel(const m2_out_args A) {
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
    load_dt_raw(A.r, ch, h, dts, cums, tot);

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

    /* epilogue: D skip, z gate, store */
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
        ssmi_cu_st(A.out, A.out_dtype, ch.b * A.os[0] + t * A.os[1] + h * A.os[2] + p * A.os[3], y);
    }
}

/* ---- tensor-core path of the scan (fp16/bf16 inputs) ------------------------------------------
 * Two kernels replace kernels 1 and 3 when x is fp16 or bf16. Every block has 4 warps; the
 * matrix products run on mma.sync m16n8k16 (fp32 accumulators) with operands read from shared
 * memory by ldmatrix, and the results stay in registers:
 *   fast_state_kernel   per (work chunk, head, 64-wide P tile, 64-wide N tile): s_c = xᵀ·(B∘w),
 *                       warp k owns rows p of 16k..16k+15, the chunk's tokens in steps of 64.
 *   fast_output_kernel  per (work chunk, head, 64-row tile, 64-wide P tile): warp k owns rows
 *                       16k..16k+15 of the tile; C·S_inᵀ, then for every 64-token column tile
 *                       up to the diagonal the masked scores C·Bᵀ (registers) times x.
 * Operands that are fp32 products (B∘w, the entering state, the masked scores) are split into a
 * rounded part and a rounded remainder, two products each, as in the portable kernels.
 * Contiguous tiles of the compute dtype (innermost stride 1, other strides multiples of 8
 * elements, 16-byte aligned base) load with cp.async in 16-byte pieces; any other layout or
 * dtype takes the element-wise path through the strides. */

#ifndef SSMI_M2_FAST_SPLIT
#define SSMI_M2_FAST_SPLIT 1 /* 0: fp32 products rounded once (upstream's accuracy), fewer products */
#endif
const bool kFastSplit = SSMI_M2_FAST_SPLIT != 0;
const int  kFastThreads = 128;
const int kFT = 64;         /* tile edge of the fast kernels (rows, tokens, P, N) */
const int kFLd = kFT + 8;   /* padded leading dimension of a 64-wide T tile        */


/* dst[r·ld + c] (T) = element base + r·srow + c·scol for r < rows, c < cols (a multiple of 8);
 * 0 where r ≥ nr or c ≥ nc. vec: the tensor is of type T with contiguous 16-byte aligned rows
 * and nc a multiple of 8 (cp.async; the caller waits). */
template <int MODE>
__device__ void tile_to_smem(typename cfg<MODE>::T * dst, int ld, const ssmi_cu_view & v, int vec, long long base,
                             long long srow, long long scol, int rows, int cols, int nr, int nc) {
    typedef typename cfg<MODE>::T T;
    if (vec) {
        const int c8 = cols >> 3;
        for (int o = threadIdx.x; o < rows * c8; o += blockDim.x) {
            const int r = o / c8, c = (o - r * c8) * 8;
            T *       d = dst + r * ld + c;
            if (r < nr && c < nc)
                cp_async16(d, (const T *)v.p + base + r * srow + c);
            else
                *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
        }
    } else {
        for (int o = threadIdx.x; o < rows * cols; o += blockDim.x) {
            const int r = o / cols, c = o - r * cols;
            to_t(r < nr && c < nc ? ssmi_cu_ld(v.p, v.dtype, base + r * srow + c * scol) : 0.0f, dst + r * ld + c);
        }
    }
}

struct m2_fast_args {
    const m2_chunk * chunks;
    int              H, G, P, N, Np, n_ptiles, n_ntiles, n_itiles;
    m2_dt_raw        r;
    ssmi_cu_view     x, b, c, d, z;
    int              vx, vb, vc, vz, vout; /* 16-byte paths (vz, vout: pairs of z's / out's dtype) */
    int              vz16;                 /* z rows in 16-byte pieces of T (v5's staged z)          */
    const void *     split;                /* v5: entering states split (W, H, 2, P, N) of T, or NULL */
    int              has_d, d_2d, has_z;
    float *          states;  /* (W, H, P, N) fp32: chunk states (kernel 1), entering states (kernel 3) */
    float *          lastcum; /* (W, H) */
    float *          dtc;     /* (W, H, 2, kScanQ): processed dt and its cumsum, from kernel 1 */
    float *          cw;      /* (W, H, kChainW): the chain's token weights and cum_last (chain_dt_kernel) */
    void *           out;
    int              out_dtype;
    long long        os[4];
};

/* The generic epilogue of the v3 and v5 output kernels (layouts without v5's fast paths): z of this
 * thread's pairs loaded first (every load in flight together), then + D·x (x rows of the tile at
 * xs, kFLd apart), the z gate and the stores through the output's strides (pairs where vout).
 * Rows: rb·16 + lane/4 (+8) of the tile, token tb + row, valid below ch.len − i_tile. D per pair:
 * DS, from the block's table ds; else loaded from global memory. */
template <int MODE, bool DS>
__device__ __forceinline__ void generic_epilogue(const m2_fast_args & A, const m2_chunk & ch, int h, int p0,
                                                 long long tb, int i_tile, int rb, const float (&y)[8][4],
                                                 const typename cfg<MODE>::T * xs, const float * ds) {
    typedef typename cfg<MODE>::T T;
    const int lane = threadIdx.x & 31;
    float2    zv[8][2];
#pragma unroll
    for (int t = 0; t < 8; ++t) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int       p = p0 + t * 8 + 2 * (lane & 3), ii = rb * 16 + (lane >> 2) + half * 8;
            const long long zo = ch.b * A.z.s[0] + (tb + ii) * A.z.s[1] + h * A.z.s[2] + p * A.z.s[3];
            zv[t][half] = make_float2(0.0f, 0.0f);
            if (!A.has_z || p >= A.P || i_tile + ii >= ch.len) continue;
            if (A.vz && p + 1 < A.P)
                zv[t][half] = t2<MODE>::unpack(__ldg(reinterpret_cast<const unsigned int *>((const T *)A.z.p + zo)));
            else
                zv[t][half] = make_float2(ssmi_cu_ld(A.z.p, A.z.dtype, zo),
                                          p + 1 < A.P ? ssmi_cu_ld(A.z.p, A.z.dtype, zo + A.z.s[3]) : 0.0f);
        }
    }
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        const int pl = t * 8 + 2 * (lane & 3), p = p0 + pl;
        if (p >= A.P) continue;
        const bool two = p + 1 < A.P;
        float      d0, d1;
        if constexpr (DS) {
            d0 = ds[pl], d1 = two ? ds[pl + 1] : 0.0f;
        } else {
            d0 = A.has_d ? ssmi_cu_ld(A.d.p, A.d.dtype, h * A.d.s[0] + (A.d_2d ? p * A.d.s[1] : 0)) : 0.0f;
            d1 = A.has_d && two ? ssmi_cu_ld(A.d.p, A.d.dtype, h * A.d.s[0] + (A.d_2d ? (p + 1) * A.d.s[1] : 0)) : 0.0f;
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int ii = rb * 16 + (lane >> 2) + half * 8; /* row in the tile */
            if (i_tile + ii >= ch.len) continue;
            const long long t_ = tb + ii;
            const float2    xv = t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(&xs[ii * kFLd + pl]));
            float           v0 = y[t][2 * half] + d0 * xv.x, v1 = y[t][2 * half + 1] + d1 * xv.y;
            if (A.has_z) {
                const float z0 = zv[t][half].x, z1 = zv[t][half].y;
                v0 *= z0 / (1.0f + expf(-z0));
                v1 *= z1 / (1.0f + expf(-z1));
            }
            const long long oo = ch.b * A.os[0] + t_ * A.os[1] + h * A.os[2] + p * A.os[3];
            if (A.vout && two) {
                if (A.out_dtype == SSM_DTYPE_F32)
                    *reinterpret_cast<float2 *>((float *)A.out + oo) = make_float2(v0, v1);
                else
                    *reinterpret_cast<uint32_t *>((T *)A.out + oo) = t2<MODE>::pack(v0, v1);
            } else {
                ssmi_cu_st(A.out, A.out_dtype, oo, v0);
                if (two) ssmi_cu_st(A.out, A.out_dtype, oo + A.os[3], v1);
            }
        }
    }
}

template <int MODE> __global__ void __launch_bounds__(kFastThreads) fast_state_kernel(const m2_fast_args A) {
    typedef typename cfg<MODE>::T T;
    __shared__ float dts[kScanQ], cums[kScanQ], tot[32], wj[kFT];
    __shared__ __align__(16) T xs[kFT * kFLd];
    __shared__ __align__(16) T bh[kFT * kFLd];
    __shared__ __align__(16) T bl[kFT * kFLd];

    const long long blk = blockIdx.x;
    const int       nz = A.n_ptiles * A.n_ntiles;
    const long long wh = blk / nz;
    const int       z = (int)(blk - wh * nz);
    const int       w = (int)(wh / A.H), h = (int)(wh - (long long)w * A.H);
    const int       p0 = (z % A.n_ptiles) * kFT, n0 = (z / A.n_ptiles) * kFT;
    const int       tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const m2_chunk  ch = A.chunks[w];
    const int       g = h / (A.H / A.G);
    load_dt_first(A.r, ch, h, ch.len, dts, cums, tot);
    const float cl = cums[ch.len - 1];
    if (z == 0) {
        if (tid == 0) A.lastcum[wh] = cl;
        float * dd = A.dtc + wh * 2 * kScanQ;
        for (int i = tid; i < ch.len; i += blockDim.x) dd[i] = dts[i], dd[kScanQ + i] = cums[i];
    }

    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    const long long xb = ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3];
    const long long bb = ch.b * A.b.s[0] + g * A.b.s[2] + n0 * A.b.s[3];
    for (int j0 = 0; j0 < ch.len; j0 += kFT) {
        const int nr = ch.len - j0;
        if (tid < kFT) wj[tid] = tid < nr ? expf(cl - cums[j0 + tid]) * dts[j0 + tid] : 0.0f;
        tile_to_smem<MODE>(xs, kFLd, A.x, A.vx, xb + (ch.t0 + j0) * A.x.s[1], A.x.s[1], A.x.s[3], kFT, kFT, nr,
                           A.P - p0);
        __syncthreads(); /* wj */
        /* B rows weighted by w_j, split: 8 columns per piece, all pieces of a thread loaded first */
        const int PER = kFT * (kFT / 8) / kFastThreads;
        float     v[PER][8];
#pragma unroll
        for (int u = 0; u < PER; ++u) {
            const int o = tid + u * kFastThreads, r = o >> 3, c = (o & 7) * 8;
            if (A.vb && r < nr && n0 + c < A.N) {
                const uint4 q = __ldg(reinterpret_cast<const uint4 *>((const T *)A.b.p + bb + (ch.t0 + j0 + r) * A.b.s[1] + c));
                const uint32_t qq[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 f = t2<MODE>::unpack(qq[e]);
                    v[u][2 * e] = f.x, v[u][2 * e + 1] = f.y;
                }
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    v[u][e] = (r < nr && n0 + c + e < A.N)
                                  ? ssmi_cu_ld(A.b.p, A.b.dtype, bb + (ch.t0 + j0 + r) * A.b.s[1] + (c + e) * A.b.s[3])
                                  : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < PER; ++u) {
            const int   o = tid + u * kFastThreads, r = o >> 3, c = (o & 7) * 8;
            const float wr = wj[r];
            uint32_t    hi[4], lo[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) split2<MODE>(v[u][2 * e] * wr, v[u][2 * e + 1] * wr, hi[e], lo[e]);
            *reinterpret_cast<uint4 *>(&bh[r * kFLd + c]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            *reinterpret_cast<uint4 *>(&bl[r * kFLd + c]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
        cp_async_wait_all();
        __syncthreads();
        const int ksteps = min(kFT / 16, (nr + 15) / 16);
        for (int ks = 0; ks < ksteps; ++ks) {
            /* fragments first, then 8 independent accumulators per pass (no back-to-back dependence) */
            uint32_t a[4], b[4][4];
            ldsm4_t(a, &xs[ks * 16 * kFLd + warp * 16 + a_trans_off(lane, kFLd)]);
#pragma unroll
            for (int np = 0; np < 4; ++np) ldsm4_t(b[np], &bh[ks * 16 * kFLd + np * 16 + b_kn_off(lane, kFLd)]);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                mma16816<MODE>(acc[2 * np], a, b[np][0], b[np][1]);
                mma16816<MODE>(acc[2 * np + 1], a, b[np][2], b[np][3]);
            }
            if (kFastSplit) {
#pragma unroll
                for (int np = 0; np < 4; ++np) ldsm4_t(b[np], &bl[ks * 16 * kFLd + np * 16 + b_kn_off(lane, kFLd)]);
#pragma unroll
                for (int np = 0; np < 4; ++np) {
                    mma16816<MODE>(acc[2 * np], a, b[np][0], b[np][1]);
                    mma16816<MODE>(acc[2 * np + 1], a, b[np][2], b[np][3]);
                }
            }
        }
        __syncthreads(); /* before the next step overwrites the tiles */
    }
    /* rows p = p0 + 16·warp + lane/4 (+8), columns n = n0 + 8·t + 2·(lane%4) (+1) */
    float * st = A.states + wh * A.P * A.N;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int p = p0 + warp * 16 + (lane >> 2) + (e >> 1) * 8;
            const int n = n0 + t * 8 + 2 * (lane & 3) + (e & 1);
            if (p < A.P && n < A.N) st[(long long)p * A.N + n] = acc[t][e];
        }
    }
}

template <int MODE> struct fast_out_smem {
    size_t cs, ss_hi, ss_lo, bs, xs, total;
    __host__ __device__ fast_out_smem(int Np) {
        typedef typename cfg<MODE>::T T;
        const size_t tn = sizeof(T) * kFT * (Np + 8), tt = sizeof(T) * kFT * kFLd;
        cs = 0;
        /* phase 1 (entering state) and phase 2 (B and x tiles) share one region */
        ss_hi = align128(tn);
        ss_lo = ss_hi + align128(tn);
        bs = ss_hi;
        xs = bs + align128(tn);
        const size_t p1 = ss_lo + align128(tn), p2 = xs + align128(tt);
        total = p1 > p2 ? p1 : p2;
    }
};

template <int MODE> __global__ void __launch_bounds__(kFastThreads, 4) fast_output_kernel(const m2_fast_args A) {
    typedef typename cfg<MODE>::T T;
    __shared__ float dts[kScanQ], cums[kScanQ];
    extern __shared__ __align__(128) unsigned char smem[];
    const fast_out_smem<MODE> L(A.Np);
    T *                       cs = (T *)(smem + L.cs);
    T *                       ss_hi = (T *)(smem + L.ss_hi);
    T *                       ss_lo = (T *)(smem + L.ss_lo);
    T *                       bs = (T *)(smem + L.bs);
    T *                       xs = (T *)(smem + L.xs);

    const long long blk = blockIdx.x;
    const int       nz = A.n_itiles * A.n_ptiles;
    const long long wh = blk / nz;
    const int       z = (int)(blk - wh * nz);
    const int       w = (int)(wh / A.H), h = (int)(wh - (long long)w * A.H);
    const int       i0 = (z / A.n_ptiles) * kFT, p0 = (z % A.n_ptiles) * kFT;
    const m2_chunk  ch = A.chunks[w];
    if (i0 >= ch.len) return; /* uniform over the block */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = h / (A.H / A.G);
    const int LN = A.Np + 8, KS = A.Np / 16;
    const int nlen = min(ch.len, i0 + kFT);
    {
        const float * dd = A.dtc + wh * 2 * kScanQ;
        for (int i = tid; i < nlen; i += blockDim.x) dts[i] = dd[i], cums[i] = dd[kScanQ + i];
    }

    /* C rows of the tile; the entering state (P tile x N), fp32 -> split */
    tile_to_smem<MODE>(cs, LN, A.c, A.vc, ch.b * A.c.s[0] + (ch.t0 + i0) * A.c.s[1] + g * A.c.s[2], A.c.s[1],
                       A.c.s[3], kFT, A.Np, ch.len - i0, A.N);
    {
        const float * st = A.states + wh * A.P * A.N;
        const int     c4 = A.Np / 4, total = kFT * c4;
        const int     U = 4; /* loads in flight per thread */
        for (int o0 = tid; o0 < total; o0 += U * kFastThreads) {
            float v[U][4];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int o = o0 + u * kFastThreads, r = o / c4, c = (o - r * c4) * 4, p = p0 + r;
                if (o < total && (A.N & 3) == 0 && p < A.P && c < A.N) {
                    const float4 f = __ldg(reinterpret_cast<const float4 *>(st + (long long)p * A.N + c));
                    v[u][0] = f.x, v[u][1] = f.y, v[u][2] = f.z, v[u][3] = f.w;
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        v[u][e] = (o < total && p < A.P && c + e < A.N) ? st[(long long)p * A.N + c + e] : 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int o = o0 + u * kFastThreads, r = o / c4, c = (o - r * c4) * 4;
                if (o >= total) break;
                uint32_t hi[2], lo[2];
                split2<MODE>(v[u][0], v[u][1], hi[0], lo[0]);
                split2<MODE>(v[u][2], v[u][3], hi[1], lo[1]);
                *reinterpret_cast<uint2 *>(&ss_hi[r * LN + c]) = make_uint2(hi[0], hi[1]);
                *reinterpret_cast<uint2 *>(&ss_lo[r * LN + c]) = make_uint2(lo[0], lo[1]);
            }
        }
    }
    cp_async_wait_all();
    __syncthreads();

    /* y (16 rows x 64 p) = C · S_inᵀ, rows scaled by exp(cum_i) */
    float y[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i][0] = y[i][1] = y[i][2] = y[i][3] = 0.0f;
    const T * crow = cs + warp * 16 * LN + a_row_off(lane, LN);
    for (int ks = 0; ks < KS; ++ks) {
        uint32_t a[4], b[4][4];
        ldsm4(a, crow + ks * 16);
#pragma unroll
        for (int np = 0; np < 4; ++np) ldsm4(b[np], &ss_hi[np * 16 * LN + ks * 16 + b_nk_off(lane, LN)]);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
            mma16816<MODE>(y[2 * np], a, b[np][0], b[np][1]);
            mma16816<MODE>(y[2 * np + 1], a, b[np][2], b[np][3]);
        }
        if (kFastSplit) {
#pragma unroll
            for (int np = 0; np < 4; ++np) ldsm4(b[np], &ss_lo[np * 16 * LN + ks * 16 + b_nk_off(lane, LN)]);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                mma16816<MODE>(y[2 * np], a, b[np][0], b[np][1]);
                mma16816<MODE>(y[2 * np + 1], a, b[np][2], b[np][3]);
            }
        }
    }
    const int   ri0 = i0 + warp * 16 + (lane >> 2), ri1 = ri0 + 8; /* this thread's rows (chunk index) */
    const float ci0 = ri0 < nlen ? cums[ri0] : 0.0f, ci1 = ri1 < nlen ? cums[ri1] : 0.0f;
    {
        const float e0 = ri0 < nlen ? expf(ci0) : 0.0f, e1 = ri1 < nlen ? expf(ci1) : 0.0f;
#pragma unroll
        for (int t = 0; t < 8; ++t) y[t][0] *= e0, y[t][1] *= e0, y[t][2] *= e1, y[t][3] *= e1;
    }
    __syncthreads(); /* the state region becomes the B and x tiles */

    const long long bb = ch.b * A.b.s[0] + g * A.b.s[2];
    const long long xb = ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3];
    for (int j0 = 0; j0 <= i0; j0 += kFT) {
        const int nr = ch.len - j0;
        tile_to_smem<MODE>(bs, LN, A.b, A.vb, bb + (ch.t0 + j0) * A.b.s[1], A.b.s[1], A.b.s[3], kFT, A.Np, nr, A.N);
        tile_to_smem<MODE>(xs, kFLd, A.x, A.vx, xb + (ch.t0 + j0) * A.x.s[1], A.x.s[1], A.x.s[3], kFT, kFT, nr,
                           A.P - p0);
        cp_async_wait_all();
        __syncthreads();
        const bool diag = j0 == i0;
        /* scores (16 rows x 64 tokens) = C · Bᵀ; on the diagonal tile, token pairs above row 16·warp+15 are 0 */
        float sc[8][4];
#pragma unroll
        for (int i = 0; i < 8; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
        for (int ks = 0; ks < KS; ++ks) {
            uint32_t a[4], b[4][4];
            ldsm4(a, crow + ks * 16);
#pragma unroll
            for (int np = 0; np < 4; ++np)
                if (!diag || np <= warp) ldsm4(b[np], &bs[np * 16 * LN + ks * 16 + b_nk_off(lane, LN)]);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                if (diag && np > warp) continue;
                mma16816<MODE>(sc[2 * np], a, b[np][0], b[np][1]);
                mma16816<MODE>(sc[2 * np + 1], a, b[np][2], b[np][3]);
            }
        }
        /* causal mask, decay and dt: sc(i, j) · exp(cum_i − cum_j) · dt_j for j ≤ i < len */
#pragma unroll
        for (int t = 0; t < 8; ++t) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int   i = (e >> 1) ? ri1 : ri0;
                const float ci = (e >> 1) ? ci1 : ci0;
                const int   j = j0 + t * 8 + 2 * (lane & 3) + (e & 1);
                sc[t][e] = (i < nlen && j <= i) ? sc[t][e] * expf(ci - cums[j]) * dts[j] : 0.0f;
            }
        }
        /* y += scores · x (tokens x p) */
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            if (diag && ks > warp) continue;
            uint32_t ah[4], al[4];
            split2<MODE>(sc[2 * ks][0], sc[2 * ks][1], ah[0], al[0]);
            split2<MODE>(sc[2 * ks][2], sc[2 * ks][3], ah[1], al[1]);
            split2<MODE>(sc[2 * ks + 1][0], sc[2 * ks + 1][1], ah[2], al[2]);
            split2<MODE>(sc[2 * ks + 1][2], sc[2 * ks + 1][3], ah[3], al[3]);
            uint32_t b[4][4];
#pragma unroll
            for (int np = 0; np < 4; ++np) ldsm4_t(b[np], &xs[ks * 16 * kFLd + np * 16 + b_kn_off(lane, kFLd)]);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                mma16816<MODE>(y[2 * np], ah, b[np][0], b[np][1]);
                mma16816<MODE>(y[2 * np + 1], ah, b[np][2], b[np][3]);
            }
            if (kFastSplit) {
#pragma unroll
                for (int np = 0; np < 4; ++np) {
                    mma16816<MODE>(y[2 * np], al, b[np][0], b[np][1]);
                    mma16816<MODE>(y[2 * np + 1], al, b[np][2], b[np][3]);
                }
            }
        }
        if (!diag) __syncthreads(); /* the next step overwrites the tiles; the last x tile stays for D */
    }

    /* epilogue: D·x (x rows of this tile are the last x tile), z gate, store pairs; z first,
     * every load in flight together */
    generic_epilogue<MODE, false>(A, ch, h, p0, ch.t0 + i0, i0, warp, y, xs, nullptr);
}

/* ---- v4 of the tensor-core path -----------------------------------------------------------------
 * The same arithmetic as fast_state_kernel / fast_output_kernel / state_pass_kernel: every
 * accumulator receives the same products, rounded and split the same way, in the same order, so
 * v4's results are bitwise those of v3. What changes is when the operands arrive:
 *   fast_state_kernel_v4   x tiles double-buffered with cp.async; the raw B rows of token tile
 *                          j+1 are loaded into registers while tile j's products run.
 *   (fast_output_kernel_v4, 8 warps and 128-row tiles with double-buffered B/x copies, gave v3's
 *   bytes; it was removed once v5-v7 had been the defaults through several H200 runs. Its tile
 *   geometry and buffers, v4_out_smem, are v5's.)
 *   state_pass_kernel_v4   the states and decays of 8 chunks are loaded before any of them is
 *                          used (v3: one chunk ahead).
 * The v4 state kernel and pass remain as v5's fallbacks (a B of another dtype; N % 8 != 0). */

const int kV4Rows = 128;                 /* rows of an output tile                    */
const int kV4Threads = 256;              /* 8 warps of 16 rows                        */
const int kV4ITiles = kScanQ / kV4Rows;  /* row tiles per work chunk                  */
const int kPassBatch = 8;                /* chunks of loads in flight in the pass      */


/* Piece u of a token tile's B rows for this thread: row r = (tid + u·threads)/8, columns
 * n0 + c .. n0 + c + 7 with c = 8·((tid + u·threads) % 8), as fp32; 0 outside the chunk (r ≥ nr)
 * or beyond N. The loads of fast_state_kernel. */
template <int MODE>
__device__ __forceinline__ void v4_b_piece(float (&v)[8], const m2_fast_args & A, long long rowbase, int u, int nr,
                                           int n0) {
    typedef typename cfg<MODE>::T T;
    const int o = threadIdx.x + u * kFastThreads, r = o >> 3, c = (o & 7) * 8;
    if (A.vb && r < nr && n0 + c < A.N) {
        const uint4    q = __ldg(reinterpret_cast<const uint4 *>((const T *)A.b.p + rowbase + r * A.b.s[1] + c));
        const uint32_t qq[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = t2<MODE>::unpack(qq[e]);
            v[2 * e] = f.x, v[2 * e + 1] = f.y;
        }
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
            v[e] = (r < nr && n0 + c + e < A.N)
                       ? ssmi_cu_ld(A.b.p, A.b.dtype, rowbase + r * A.b.s[1] + (c + e) * A.b.s[3])
                       : 0.0f;
    }
}

/* The same piece as 4 pairs of T: exact when B is of type T (then the values are T already);
 * half the registers of fp32, so a whole tile can be held in flight. */
template <int MODE>
__device__ __forceinline__ void v4_b_piece_raw(uint32_t (&q)[4], const m2_fast_args & A, long long rowbase, int u,
                                               int nr, int n0) {
    typedef typename cfg<MODE>::T T;
    const int o = threadIdx.x + u * kFastThreads, r = o >> 3, c = (o & 7) * 8;
    if (A.vb && r < nr && n0 + c < A.N) {
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>((const T *)A.b.p + rowbase + r * A.b.s[1] + c));
        q[0] = v.x, q[1] = v.y, q[2] = v.z, q[3] = v.w;
    } else {
        float f[8];
        v4_b_piece<MODE>(f, A, rowbase, u, nr, n0);
#pragma unroll
        for (int e = 0; e < 4; ++e) q[e] = t2<MODE>::pack(f[2 * e], f[2 * e + 1]);
    }
}

template <int MODE> __global__ void __launch_bounds__(kFastThreads) fast_state_kernel_v4(const m2_fast_args A) {
    typedef typename cfg<MODE>::T T;
    __shared__ float dts[kScanQ], cums[kScanQ], tot[32];
    __shared__ __align__(16) T xs[2][kFT * kFLd]; /* double-buffered x tiles */
    __shared__ __align__(16) T bh[kFT * kFLd];
    __shared__ __align__(16) T bl[kFT * kFLd];

    const long long blk = blockIdx.x;
    const int       nz = A.n_ptiles * A.n_ntiles;
    const long long wh = blk / nz;
    const int       z = (int)(blk - wh * nz);
    const int       w = (int)(wh / A.H), h = (int)(wh - (long long)w * A.H);
    const int       p0 = (z % A.n_ptiles) * kFT, n0 = (z / A.n_ptiles) * kFT;
    const int       tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const m2_chunk  ch = A.chunks[w];
    const int       g = h / (A.H / A.G);
    load_dt_first(A.r, ch, h, ch.len, dts, cums, tot); /* ends with a barrier */
    const float cl = cums[ch.len - 1];
    if (z == 0) {
        if (tid == 0) A.lastcum[wh] = cl;
        float * dd = A.dtc + wh * 2 * kScanQ;
        for (int i = tid; i < ch.len; i += blockDim.x) dd[i] = dts[i], dd[kScanQ + i] = cums[i];
    }

    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    const long long xb = ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3];
    const long long bb = ch.b * A.b.s[0] + g * A.b.s[2] + n0 * A.b.s[3];
    const int       ntiles = (ch.len + kFT - 1) / kFT;
    const int       PER = kFT * (kFT / 8) / kFastThreads;
    /* B of type T (the usual case): the next tile's B rows wait in registers as T pairs; any
     * other dtype is loaded when its weights are applied (as in v3) */
    const bool b_is_t = A.b.dtype == (MODE == M_BF16 ? SSM_DTYPE_BF16 : SSM_DTYPE_F16);
    uint32_t   q[PER][4];

    /* prologue: token tile 0 (x by cp.async, B into registers) */
    tile_to_smem<MODE>(xs[0], kFLd, A.x, A.vx, xb + ch.t0 * A.x.s[1], A.x.s[1], A.x.s[3], kFT, kFT, ch.len, A.P - p0);
    cp_async_commit();
    if (b_is_t) {
#pragma unroll
        for (int u = 0; u < PER; ++u) v4_b_piece_raw<MODE>(q[u], A, bb + ch.t0 * A.b.s[1], u, ch.len, n0);
    }

    for (int jt = 0; jt < ntiles; ++jt) {
        const int  j0 = jt * kFT, nr = ch.len - j0;
        const bool more = jt + 1 < ntiles;
        /* x of tile jt+1 into the other buffer (its last reader, tile jt−1, ended with a barrier) */
        if (more)
            tile_to_smem<MODE>(xs[(jt + 1) & 1], kFLd, A.x, A.vx, xb + (ch.t0 + j0 + kFT) * A.x.s[1], A.x.s[1],
                               A.x.s[3], kFT, kFT, nr - kFT, A.P - p0);
        cp_async_commit(); /* possibly empty: keeps one group per step */
        /* B rows of tile jt weighted by w_j = exp(cum_last − cum_j)·dt_j, split (as v3's wj) */
#pragma unroll
        for (int u = 0; u < PER; ++u) {
            const int o = tid + u * kFastThreads, r = o >> 3, c = (o & 7) * 8;
            float     v[8];
            if (b_is_t) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 f = t2<MODE>::unpack(q[u][e]);
                    v[2 * e] = f.x, v[2 * e + 1] = f.y;
                }
            } else {
                v4_b_piece<MODE>(v, A, bb + (ch.t0 + j0) * A.b.s[1], u, nr, n0);
            }
            const float wr = r < nr ? expf(cl - cums[j0 + r]) * dts[j0 + r] : 0.0f;
            uint32_t    hi[4], lo[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) split2<MODE>(v[2 * e] * wr, v[2 * e + 1] * wr, hi[e], lo[e]);
            *reinterpret_cast<uint4 *>(&bh[r * kFLd + c]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            *reinterpret_cast<uint4 *>(&bl[r * kFLd + c]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
        /* B rows of tile jt+1 into registers: in flight during this tile's products */
        if (more && b_is_t) {
#pragma unroll
            for (int u = 0; u < PER; ++u)
                v4_b_piece_raw<MODE>(q[u], A, bb + (ch.t0 + j0 + kFT) * A.b.s[1], u, nr - kFT, n0);
        }
        cp_async_wait_group<1>(); /* this thread's copies of tile jt are done (tile jt+1 may pend) */
        __syncthreads();          /* ... and everybody's: x tile jt, bh, bl */
        const T * xcur = xs[jt & 1];
        const int ksteps = min(kFT / 16, (nr + 15) / 16);
        for (int ks = 0; ks < ksteps; ++ks) {
            uint32_t a[4], b[4][4];
            ldsm4_t(a, &xcur[ks * 16 * kFLd + warp * 16 + a_trans_off(lane, kFLd)]);
#pragma unroll
            for (int np = 0; np < 4; ++np) ldsm4_t(b[np], &bh[ks * 16 * kFLd + np * 16 + b_kn_off(lane, kFLd)]);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                mma16816<MODE>(acc[2 * np], a, b[np][0], b[np][1]);
                mma16816<MODE>(acc[2 * np + 1], a, b[np][2], b[np][3]);
            }
            if (kFastSplit) {
#pragma unroll
                for (int np = 0; np < 4; ++np) ldsm4_t(b[np], &bl[ks * 16 * kFLd + np * 16 + b_kn_off(lane, kFLd)]);
#pragma unroll
                for (int np = 0; np < 4; ++np) {
                    mma16816<MODE>(acc[2 * np], a, b[np][0], b[np][1]);
                    mma16816<MODE>(acc[2 * np + 1], a, b[np][2], b[np][3]);
                }
            }
        }
        __syncthreads(); /* bh, bl and this x buffer are rewritten in the next step */
    }
    cp_async_wait_group<0>(); /* nothing is pending here (the last group is empty); for the record */
    float * st = A.states + wh * A.P * A.N;
    /* pairs (n, n+1) as one 8-byte store when N is even (then p·N + n is even and the state
     * block 8-byte aligned) */
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int p = p0 + warp * 16 + (lane >> 2) + half * 8;
        if (p >= A.P) continue;
        float * row = st + (long long)p * A.N;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int n = n0 + t * 8 + 2 * (lane & 3);
            if ((A.N & 1) == 0 && n + 1 < A.N) {
                *reinterpret_cast<float2 *>(row + n) = make_float2(acc[t][2 * half], acc[t][2 * half + 1]);
            } else {
                if (n < A.N) row[n] = acc[t][2 * half];
                if (n + 1 < A.N) row[n + 1] = acc[t][2 * half + 1];
            }
        }
    }
}

/* Shared memory of the 128-row output kernel (v5): the C rows of the tile; B/x buffer 0; a region
 * that first holds the entering state (hi, lo) and then B/x buffer 1. */
template <int MODE> struct v4_out_smem {
    size_t cs, b0, x0, ss_hi, ss_lo, b1, x1, total;
    __host__ __device__ v4_out_smem(int Np) {
        typedef typename cfg<MODE>::T T;
        const size_t tn = align128(sizeof(T) * kFT * (Np + 8)), tc = align128(sizeof(T) * kV4Rows * (Np + 8));
        const size_t tt = align128(sizeof(T) * kFT * kFLd);
        cs = 0;
        b0 = tc;
        x0 = b0 + tn;
        ss_hi = x0 + tt;
        ss_lo = ss_hi + tn;
        b1 = ss_hi;
        x1 = b1 + tn;
        const size_t e1 = ss_lo + tn, e2 = x1 + tt;
        total = e1 > e2 ? e1 : e2;
    }
};

template <typename T> __device__ __forceinline__ T * v4_buf(unsigned char * smem, int o0, int od, int k) {
    return (T *)(smem + o0 + k * od);
}

/* state_pass_kernel with the loads of kPassBatch chunks issued before their updates. */
__global__ void __launch_bounds__(kThreads) state_pass_kernel_v4(const m2_pass_args A) {
    const long long hpn = (long long)A.H * A.P * A.N;
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= hpn) return;
    const m2_seg sg = A.segs[blockIdx.y];
    const int    pn = A.P * A.N;
    const int    h = (int)(e / pn), p = (int)((e % pn) / A.N), n = (int)(e % A.N);
    float        s = 0.0f;
    if (A.has_init && sg.init >= 0)
        s = ssmi_cu_ld(A.init.p, A.init.dtype, sg.init * A.init.s[0] + h * A.init.s[1] + p * A.init.s[2] + n * A.init.s[3]);
    for (int k0 = 0; k0 < sg.count; k0 += kPassBatch) {
        float local[kPassBatch], decay[kPassBatch];
#pragma unroll
        for (int u = 0; u < kPassBatch; ++u) {
            const long long wk = (long long)sg.first + k0 + u;
            local[u] = k0 + u < sg.count ? A.states[wk * hpn + e] : 0.0f;
            decay[u] = k0 + u < sg.count ? expf(A.lastcum[wk * A.H + h]) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kPassBatch; ++u) {
            if (k0 + u >= sg.count) break;
            A.states[((long long)sg.first + k0 + u) * hpn + e] = s;
            s = decay[u] * s + local[u];
        }
    }
    if (A.has_fin && sg.fin >= 0)
        ssmi_cu_st(A.fin, A.fin_dtype, sg.fin * A.fs[0] + h * A.fs[1] + p * A.fs[2] + n * A.fs[3], s);
}

/* state_pass_kernel_v4 that writes each entering state already split for the v5 output kernel:
 * hi = s rounded to T and lo = the rounded remainder, in planes (W, H, {hi, lo}, P, N) of T — the
 * same split the output kernel did on its fp32 tile (so the same bytes), but done once per state
 * element instead of once per output block, and loaded by the output kernel with cp.async. The
 * fp32 chunk states are only read. N is a multiple of 8 (16-byte rows), so each thread carries
 * kPassVec = 4 consecutive elements of one state row: 16-byte loads, 8-byte stores per plane, and
 * the chunk's decay factor computed once for the four. */
const int kPassVec = 4;
const int kPassBatch5 = 4; /* chunks in flight: 4 x 16 bytes per thread; with ≤ 48 registers (5
                              blocks per SM) the whole grid of the shape of record (640 blocks) is
                              resident at once (8 in flight took 64 registers: 4 blocks per SM,
                              1.2 waves, measured 65 µs against the scalar kernel's 61) */
template <typename T> struct __align__(8) t4 { T v[4]; };
template <int MODE> __global__ void __launch_bounds__(kThreads, 5) state_pass_kernel_v5(const m2_pass_args A) {
    typedef typename cfg<MODE>::T T;
    const long long hpn = (long long)A.H * A.P * A.N;
    const long long e = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * kPassVec;
    if (e >= hpn) return;
    const m2_seg sg = A.segs[blockIdx.y];
    const int    pn = A.P * A.N;
    int          h, p, n;
    if (hpn <= 0x7fffffffLL) { /* 32-bit divisions (the 64-bit ones are long subroutines) */
        const unsigned eu = (unsigned)e, wi = eu % (unsigned)pn;
        h = (int)(eu / (unsigned)pn), p = (int)(wi / (unsigned)A.N), n = (int)(wi % (unsigned)A.N);
    } else {
        h = (int)(e / pn), p = (int)((e % pn) / A.N), n = (int)(e % A.N);
    }
    const long long within = (long long)p * A.N + n; /* e − h·P·N */
    T *          split = (T *)A.split;
    float        s[kPassVec] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (A.has_init && sg.init >= 0) {
        const long long io = sg.init * A.init.s[0] + h * A.init.s[1] + p * A.init.s[2];
#pragma unroll
        for (int i = 0; i < kPassVec; ++i) s[i] = ssmi_cu_ld(A.init.p, A.init.dtype, io + (n + i) * A.init.s[3]);
    }
    for (int k0 = 0; k0 < sg.count; k0 += kPassBatch5) {
        float4 local[kPassBatch5];
        float  decay[kPassBatch5];
#pragma unroll
        for (int u = 0; u < kPassBatch5; ++u) {
            const long long wk = (long long)sg.first + k0 + u;
            local[u] = k0 + u < sg.count ? __ldg(reinterpret_cast<const float4 *>(A.states + wk * hpn + e))
                                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            decay[u] = k0 + u < sg.count ? expf(A.lastcum[wk * A.H + h]) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kPassBatch5; ++u) {
            if (k0 + u >= sg.count) break;
            const long long base = (((long long)sg.first + k0 + u) * A.H + h) * 2 * pn + within;
            t4<T>           hi, lo;
#pragma unroll
            for (int i = 0; i < kPassVec; ++i) store_split<MODE>(s[i], &hi.v[i], &lo.v[i]);
            *reinterpret_cast<t4<T> *>(split + base) = hi;
            *reinterpret_cast<t4<T> *>(split + base + pn) = lo;
            const float l4[kPassVec] = {local[u].x, local[u].y, local[u].z, local[u].w};
#pragma unroll
            for (int i = 0; i < kPassVec; ++i) s[i] = decay[u] * s[i] + l4[i];
        }
    }
    if (A.has_fin && sg.fin >= 0) {
        const long long fo = sg.fin * A.fs[0] + h * A.fs[1] + p * A.fs[2];
#pragma unroll
        for (int i = 0; i < kPassVec; ++i) ssmi_cu_st(A.fin, A.fin_dtype, fo + (n + i) * A.fs[3], s[i]);
    }
}

/* ---- v5 of the output kernel --------------------------------------------------------------------
 * The H200 profile of fast_output_kernel_v4 (ncu, 2026-11-30; docs/cuda-notes-mamba2.md) showed an
 * instruction- and latency-bound kernel: HMMA 5% of the executed instructions, 7.8k SASS
 * instructions (instruction-fetch stalls were the first stall reason), ~40% of the stall samples in
 * the epilogue (z loaded per element from global memory right before use, D through the generic
 * loader, store branches unrolled 16 times) and ~16% in the mask (an accurate expf per score).
 * v5 keeps v4's tiles, buffers and products, and changes:
 *  - z: each warp copies its own 16 z rows (cp.async, 16-byte pieces) into its own C rows, which it
 *    no longer reads once its diagonal tile's scores are computed, so the copy flies during that
 *    tile's mask and scores·x products; the epilogue reads z from shared memory;
 *  - D: staged once per block in shared memory;
 *  - mask: exp2f((cum_i − cum_j)·log2 e) (one MUFU op) instead of expf, cum/dt pairs read as float2,
 *    no causal compare off the diagonal, the diagonal tile's scores computed whole (no divergent
 *    skipping of column blocks, which made the compiler fence every mma) and then masked;
 *  - tile copies: per-thread piece indices advanced by constants instead of divided per piece.
 * Layouts the fast paths do not cover keep v4's code (generic loads, unrolled so y stays in
 * registers). Results differ from v4 only by the rounding of the decay factors (exp2f). */

const float kLog2e = 1.4426950408889634f;

/* 2^x by the special-function unit alone (ex2.approx.ftz: ~2 ulp, results below 2^-126 flush to 0,
 * which a decay factor can afford); exp2f adds a denormal range fix-up of 4 instructions. */
__device__ __forceinline__ float v5_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
/* z·sigmoid(z) with the fast exp and division (a few ulp; the accurate pair costs ~25
 * instructions per element). For z → −∞, 1 + e^{−z} overflows and the quotient is 0. */
__device__ __forceinline__ float v5_silu(float z) { return __fdividef(z, 1.0f + __expf(-z)); }

/* The 16-byte copies of a rows × 8·c8 tile of T: element (r, c) from src + r·srow + c into
 * dst[r·ld + c]; rows ≥ nr or columns ≥ nc are zero-filled. The caller commits and waits. */
template <typename T>
__device__ __forceinline__ void v5_tile_vec(T * dst, int ld, const T * src, long long srow, int rows, int c8, int nr,
                                            int nc) {
    const int total = rows * c8, step_r = kV4Threads / c8, step_c = kV4Threads - step_r * c8;
    int       r = (int)threadIdx.x / c8, c = (int)threadIdx.x - r * c8;
    for (int o = threadIdx.x; o < total; o += kV4Threads) {
        T * d = dst + r * ld + c * 8;
        if (r < nr && c * 8 < nc)
            cp_async16(d, src + r * srow + c * 8);
        else
            *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
        r += step_r, c += step_c;
        if (c >= c8) c -= c8, ++r;
    }
}

/* tile_to_smem with the vector path of v5_tile_vec. */
template <int MODE>
__device__ __forceinline__ void v5_tile(typename cfg<MODE>::T * dst, int ld, const ssmi_cu_view & v, int vec,
                                        long long base, long long srow, long long scol, int rows, int cols, int nr,
                                        int nc) {
    typedef typename cfg<MODE>::T T;
    if (vec)
        v5_tile_vec<T>(dst, ld, (const T *)v.p + base, srow, rows, cols >> 3, nr, nc);
    else
        tile_to_smem<MODE>(dst, ld, v, 0, base, srow, scol, rows, cols, nr, nc);
}

/* The mask, decay and dt of a 16 × 64 score tile (fragment layout): sc(i, j) · exp(cum_i − cum_j) ·
 * dt_j, 0 above the diagonal when DIAG. Rows at or beyond the chunk's length are never stored. */
template <bool DIAG>
__device__ __forceinline__ void v5_mask(float (&sc)[8][4], const float * cums, const float * dts, int jb, int ri0,
                                        int ri1, float ci0, float ci1) {
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        const int    j = jb + t * 8;
        const float2 cj = *reinterpret_cast<const float2 *>(cums + j);
        const float2 dj = *reinterpret_cast<const float2 *>(dts + j);
        const float  w00 = v5_exp2((ci0 - cj.x) * kLog2e) * dj.x, w01 = v5_exp2((ci0 - cj.y) * kLog2e) * dj.y;
        const float  w10 = v5_exp2((ci1 - cj.x) * kLog2e) * dj.x, w11 = v5_exp2((ci1 - cj.y) * kLog2e) * dj.y;
        if (DIAG) {
            sc[t][0] = j <= ri0 ? sc[t][0] * w00 : 0.0f;
            sc[t][1] = j + 1 <= ri0 ? sc[t][1] * w01 : 0.0f;
            sc[t][2] = j <= ri1 ? sc[t][2] * w10 : 0.0f;
            sc[t][3] = j + 1 <= ri1 ? sc[t][3] * w11 : 0.0f;
        } else {
            sc[t][0] *= w00, sc[t][1] *= w01, sc[t][2] *= w10, sc[t][3] *= w11;
        }
    }
}

/* ---- v5 of the state kernel ----------------------------------------------------------------------
 * fast_state_kernel_v4 weighted and split the B rows (w_j·B_j into hi/lo) in each (chunk, head,
 * P tile, N tile) block: per token tile and thread ~280 instructions of unpacking, scaling and
 * splitting against ~100 for the products (profile of 2026-11-30), and every N tile redid the dt
 * processing and cumsum. v5 weights x instead, s = Σ_j (w_j·x_j)ᵀ·B_j: the same number of products
 * (x∘w split into hi/lo, B exact in T), in one block per (chunk, head, P tile, 128 N columns) whose
 * 8 warps each own 16 P rows × 64 N columns. At N = 128 that halves the scaling and splitting
 * (64 × 64 x elements per token tile instead of 64 × 128 B elements), B goes from global to shared
 * memory by cp.async and is never converted, and dt is processed once per (chunk, head). Used
 * when B is of the compute type T (any other B dtype keeps v4, which converts it exactly). */
const int kS5Cols = 128; /* N columns per block: two 64-column warp groups */
const int kS5Ld = kS5Cols + 8;

struct s5_smem {
    size_t x0, xd, xl, b0, bd, total; /* raw-then-hi x tiles (2), lo x tile, B tiles (2) */
    __host__ __device__ s5_smem(size_t tsize) {
        xd = align128(tsize * kFT * kFLd);
        x0 = 0;
        xl = 2 * xd;
        b0 = 3 * xd;
        bd = align128(tsize * kFT * kS5Ld);
        total = b0 + 2 * bd;
    }
};

/* The block of the v5-v7 output kernels' grid (blockIdx.x = (chunk·H + head)·tiles + tile, tile =
 * row tile·n_ptiles + p tile; 32-bit index arithmetic): chunk w, head h, rows i0.., p columns p0.. */
struct v5_block {
    int       w, h, i0, p0;
    long long wh; /* w·H + h */
};
__device__ __forceinline__ v5_block v5_block_of(const m2_fast_args & A) {
    const unsigned blk = blockIdx.x;
    const unsigned nz = (unsigned)(kV4ITiles * A.n_ptiles);
    const unsigned whu = blk / nz;
    const int      z = (int)(blk - whu * nz);
    v5_block       b;
    b.w = (int)(whu / (unsigned)A.H), b.h = (int)(whu - (unsigned)b.w * (unsigned)A.H);
    b.wh = whu;
    b.i0 = (z / A.n_ptiles) * kV4Rows, b.p0 = (z % A.n_ptiles) * kFT;
    return b;
}

/* The v5-v7 output blocks' tables: processed dt and its cumsum of the chunk (from the state kernel,
 * 0 past the block's rows: nlen) and D of the block's p columns. */
__device__ __forceinline__ void block_tables(const m2_fast_args & A, long long wh, int h, int p0, int nlen, float * dts,
                                             float * cums, float * ds) {
    const int     tid = threadIdx.x;
    const float * dd = A.dtc + wh * 2 * kScanQ;
    for (int i = tid; i < kScanQ; i += kV4Threads) {
        dts[i] = i < nlen ? dd[i] : 0.0f;
        cums[i] = i < nlen ? dd[kScanQ + i] : 0.0f;
    }
    for (int k = tid; k < kFT; k += kV4Threads) {
        const int p = p0 + k;
        ds[k] = A.has_d && p < A.P ? ssmi_cu_ld(A.d.p, A.d.dtype, h * A.d.s[0] + (A.d_2d ? p * A.d.s[1] : 0)) : 0.0f;
    }
}

/* 3 blocks of 8 warps per SM (≤ 80 registers; 62 KB of shared memory each): the kernel waits on
 * copies and barriers, so more resident warps hide more of it. */
#ifndef SSMI_M2_STATE_MINB
#define SSMI_M2_STATE_MINB 3
#endif
template <int MODE> __global__ void __launch_bounds__(kV4Threads, SSMI_M2_STATE_MINB) fast_state_kernel_v5(const m2_fast_args A) {
    typedef typename cfg<MODE>::T T;
    __shared__ float dts[kScanQ], cums[kScanQ], tot[32];
    __shared__ float wts[kScanQ];
    extern __shared__ __align__(128) unsigned char smem[];
    const s5_smem L(sizeof(T));
    T *           xl = (T *)(smem + L.xl);

    /* 32-bit index arithmetic (the host keeps the grid below 2^31 blocks): a 64-bit division
     * is a long subroutine, and these ran in every block */
    const unsigned  blk = blockIdx.x;
    const int       ngrp = (A.N + kS5Cols - 1) / kS5Cols;
    const unsigned  nz = (unsigned)(A.n_ptiles * ngrp);
    const unsigned  whu = blk / nz;
    const int       z = (int)(blk - whu * nz);
    const int       w = (int)(whu / (unsigned)A.H), h = (int)(whu - (unsigned)w * (unsigned)A.H);
    const long long wh = whu;
    const int       p0 = (z % A.n_ptiles) * kFT, n0 = (z / A.n_ptiles) * kS5Cols;
    const int       tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int       wp = (warp & 3) * 16;  /* this warp's P rows within the tile      */
    const int       wn = (warp >> 2) * 64; /* its 64 N columns within the block's 128 */
    const bool      wactive = n0 + wn < A.N;
    const m2_chunk  ch = A.chunks[w];
    const int       g = h / (A.H / A.G);
    const int       nbc = min(kS5Cols, A.Np - n0); /* B columns copied (a multiple of 16) */
    const long long xb = ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3];
    const long long bb = ch.b * A.b.s[0] + g * A.b.s[2] + n0 * A.b.s[3];
    const int       ntiles = (ch.len + kFT - 1) / kFT;

    /* token tile 0's copies fly during the dt processing */
    v5_tile<MODE>((T *)(smem + L.x0), kFLd, A.x, A.vx, xb + ch.t0 * A.x.s[1], A.x.s[1], A.x.s[3], kFT, kFT, ch.len,
                  A.P - p0);
    v5_tile<MODE>((T *)(smem + L.b0), kS5Ld, A.b, A.vb, bb + ch.t0 * A.b.s[1], A.b.s[1], A.b.s[3], kFT, nbc, ch.len,
                  A.N - n0);
    cp_async_commit();
    load_dt_first(A.r, ch, h, ch.len, dts, cums, tot); /* ends with a barrier */
    const float cl = cums[ch.len - 1];
    for (int i = tid; i < kScanQ; i += kV4Threads) wts[i] = i < ch.len ? expf(cl - cums[i]) * dts[i] : 0.0f;
    if (z == 0) {
        if (tid == 0) A.lastcum[wh] = cl;
        float * dd = A.dtc + wh * 2 * kScanQ;
        for (int i = tid; i < ch.len; i += kV4Threads) dd[i] = dts[i], dd[kScanQ + i] = cums[i];
    }

    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    for (int jt = 0; jt < ntiles; ++jt) {
        const int j0 = jt * kFT, nr = ch.len - j0;
        if (jt + 1 < ntiles) {
            const int k = (jt + 1) & 1;
            v5_tile<MODE>((T *)(smem + L.x0 + k * L.xd), kFLd, A.x, A.vx, xb + (ch.t0 + j0 + kFT) * A.x.s[1],
                          A.x.s[1], A.x.s[3], kFT, kFT, nr - kFT, A.P - p0);
            v5_tile<MODE>((T *)(smem + L.b0 + k * L.bd), kS5Ld, A.b, A.vb, bb + (ch.t0 + j0 + kFT) * A.b.s[1],
                          A.b.s[1], A.b.s[3], kFT, nbc, nr - kFT, A.N - n0);
        }
        cp_async_commit();        /* possibly empty: one group per step */
        cp_async_wait_group<1>(); /* tile jt of this thread is done */
        __syncthreads();          /* ... and everybody's (and wts, on the first step) */
        T *       xh = (T *)(smem + L.x0 + (jt & 1) * L.xd);
        const T * bs = (const T *)(smem + L.b0 + (jt & 1) * L.bd);
        /* x rows scaled by w_j and split: hi over the raw tile (each thread rewrites the 16 bytes it
         * read), lo into xl; rows past the chunk are 0 (zero-filled, w = 0) */
        for (int o = tid; o < kFT * (kFT / 8); o += kV4Threads) {
            const int      r = o >> 3, c = (o & 7) * 8;
            const uint4    q = *reinterpret_cast<const uint4 *>(&xh[r * kFLd + c]);
            const uint32_t qq[4] = {q.x, q.y, q.z, q.w};
            const float    wr = wts[j0 + r];
            uint32_t       hi[4], lo[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float2 f = t2<MODE>::unpack(qq[e]);
                split2<MODE>(f.x * wr, f.y * wr, hi[e], lo[e]);
            }
            *reinterpret_cast<uint4 *>(&xh[r * kFLd + c]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            *reinterpret_cast<uint4 *>(&xl[r * kFLd + c]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
        __syncthreads();
        if (wactive) {
            const int ksteps = min(kFT / 16, (nr + 15) / 16);
            for (int ks = 0; ks < ksteps; ++ks) {
                uint32_t ah[4], al[4], b[4][4];
                ldsm4_t(ah, &xh[ks * 16 * kFLd + wp + a_trans_off(lane, kFLd)]);
                if (kFastSplit) ldsm4_t(al, &xl[ks * 16 * kFLd + wp + a_trans_off(lane, kFLd)]);
#pragma unroll
                for (int np = 0; np < 4; ++np) ldsm4_t(b[np], &bs[ks * 16 * kS5Ld + wn + np * 16 + b_kn_off(lane, kS5Ld)]);
#pragma unroll
                for (int np = 0; np < 4; ++np) {
                    mma16816<MODE>(acc[2 * np], ah, b[np][0], b[np][1]);
                    mma16816<MODE>(acc[2 * np + 1], ah, b[np][2], b[np][3]);
                }
                if (kFastSplit) {
#pragma unroll
                    for (int np = 0; np < 4; ++np) {
                        mma16816<MODE>(acc[2 * np], al, b[np][0], b[np][1]);
                        mma16816<MODE>(acc[2 * np + 1], al, b[np][2], b[np][3]);
                    }
                }
            }
        }
        __syncthreads(); /* the next step rewrites xl and, one step later, these buffers */
    }
    cp_async_wait_group<0>(); /* nothing is pending here (the last group is empty); for the record */
    if (!wactive) return;
    float * st = A.states + wh * A.P * A.N;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int p = p0 + wp + (lane >> 2) + half * 8;
        if (p >= A.P) continue;
        float * row = st + (long long)p * A.N;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int n = n0 + wn + t * 8 + 2 * (lane & 3);
            if ((A.N & 1) == 0 && n + 1 < A.N) {
                *reinterpret_cast<float2 *>(row + n) = make_float2(acc[t][2 * half], acc[t][2 * half + 1]);
            } else {
                if (n < A.N) row[n] = acc[t][2 * half];
                if (n + 1 < A.N) row[n + 1] = acc[t][2 * half + 1];
            }
        }
    }
}

template <int MODE> __global__ void __launch_bounds__(kV4Threads, 2) fast_output_kernel_v5(const m2_fast_args A) {
    typedef typename cfg<MODE>::T T;
    __shared__ __align__(16) float dts[kScanQ];
    __shared__ __align__(16) float cums[kScanQ];
    __shared__ __align__(16) float ds[kFT];
    extern __shared__ __align__(128) unsigned char smem[];
    const v4_out_smem<MODE> L(A.Np);
    T *                     cs = (T *)(smem + L.cs);
    T *                     ss_hi = (T *)(smem + L.ss_hi);
    T *                     ss_lo = (T *)(smem + L.ss_lo);
    const int ob0 = (int)L.b0, ox0 = (int)L.x0, obd = (int)(L.b1 - L.b0), oxd = (int)(L.x1 - L.x0);

    const v5_block  bk = v5_block_of(A);
    const int       h = bk.h, i0 = bk.i0, p0 = bk.p0;
    const long long wh = bk.wh;
    const m2_chunk  ch = A.chunks[bk.w];
    if (i0 >= ch.len) return; /* uniform over the block */
    const int  tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int  wq = warp & 3;               /* the warp's 16-row slice within its 64-row tile */
    const int  iw = i0 + (warp >> 2) * kFT; /* start of this warp's 64-row tile               */
    const bool active = iw < ch.len;        /* warp-uniform                                    */
    const int  g = h / (A.H / A.G);
    const int  LN = A.Np + 8, KS = A.Np / 16;
    const int  nlen = min(ch.len, i0 + kV4Rows);
    const int  ntiles = (i0 + kFT < ch.len ? i0 + kFT : i0) / kFT + 1;
    /* z rows go through this warp's own C rows (row pitch LN ≥ 64 + 8 needs Np ≥ 64) */
    const bool      zstage = A.has_z && A.vz16 && A.Np >= kFT;
    const long long bb = ch.b * A.b.s[0] + g * A.b.s[2];
    const long long xb = ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3];
    block_tables(A, wh, h, p0, nlen, dts, cums, ds);

    /* group 0: the C rows of the tile (and the entering state when state_pass_kernel_v5 split it:
     * its hi and lo planes, 16-byte rows); group 1: B/x of token tile 0 */
    v5_tile<MODE>(cs, LN, A.c, A.vc, ch.b * A.c.s[0] + (ch.t0 + i0) * A.c.s[1] + g * A.c.s[2], A.c.s[1], A.c.s[3],
                  kV4Rows, A.Np, ch.len - i0, A.N);
    if (A.split != NULL) {
        const T * sp = (const T *)A.split + wh * 2 * A.P * A.N + (long long)p0 * A.N;
        v5_tile_vec<T>(ss_hi, LN, sp, A.N, kFT, A.Np >> 3, A.P - p0, A.N);
        v5_tile_vec<T>(ss_lo, LN, sp + (long long)A.P * A.N, A.N, kFT, A.Np >> 3, A.P - p0, A.N);
    }
    cp_async_commit();
    v5_tile<MODE>(v4_buf<T>(smem, ob0, obd, 0), LN, A.b, A.vb, bb + ch.t0 * A.b.s[1], A.b.s[1], A.b.s[3], kFT, A.Np,
                  ch.len, A.N);
    v5_tile<MODE>(v4_buf<T>(smem, ox0, oxd, 0), kFLd, A.x, A.vx, xb + ch.t0 * A.x.s[1], A.x.s[1], A.x.s[3], kFT, kFT,
                  ch.len, A.P - p0);
    cp_async_commit();
    /* the entering state (P tile x N), fp32 -> split, while the copies fly (unless group 0 brought
     * it already split) */
    if (A.split == NULL) {
        const float * st = A.states + wh * A.P * A.N;
        const int     c4 = A.Np / 4, total = kFT * c4;
        const int     U = 4;
        for (int o0 = tid; o0 < total; o0 += U * kV4Threads) {
            float v[U][4];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int o = o0 + u * kV4Threads, r = o / c4, c = (o - r * c4) * 4, p = p0 + r;
                if (o < total && (A.N & 3) == 0 && p < A.P && c < A.N) {
                    const float4 f = __ldg(reinterpret_cast<const float4 *>(st + (long long)p * A.N + c));
                    v[u][0] = f.x, v[u][1] = f.y, v[u][2] = f.z, v[u][3] = f.w;
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        v[u][e] = (o < total && p < A.P && c + e < A.N) ? st[(long long)p * A.N + c + e] : 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int o = o0 + u * kV4Threads, r = o / c4, c = (o - r * c4) * 4;
                if (o >= total) break;
                uint32_t hi[2], lo[2];
                split2<MODE>(v[u][0], v[u][1], hi[0], lo[0]);
                split2<MODE>(v[u][2], v[u][3], hi[1], lo[1]);
                *reinterpret_cast<uint2 *>(&ss_hi[r * LN + c]) = make_uint2(hi[0], hi[1]);
                *reinterpret_cast<uint2 *>(&ss_lo[r * LN + c]) = make_uint2(lo[0], lo[1]);
            }
        }
    }
    cp_async_wait_group<1>();
    __syncthreads();

    /* y (16 rows x 64 p) = C · S_inᵀ, rows scaled by exp(cum_i) */
    float y[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i][0] = y[i][1] = y[i][2] = y[i][3] = 0.0f;
    const T * crow = cs + warp * 16 * LN + a_row_off(lane, LN);
    if (active) {
#pragma unroll 2
        for (int ks = 0; ks < KS; ++ks) {
            uint32_t a[4], b[4][4];
            ldsm4(a, crow + ks * 16);
#pragma unroll
            for (int np = 0; np < 4; ++np) ldsm4(b[np], &ss_hi[np * 16 * LN + ks * 16 + b_nk_off(lane, LN)]);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                mma16816<MODE>(y[2 * np], a, b[np][0], b[np][1]);
                mma16816<MODE>(y[2 * np + 1], a, b[np][2], b[np][3]);
            }
            if (kFastSplit) {
#pragma unroll
                for (int np = 0; np < 4; ++np) ldsm4(b[np], &ss_lo[np * 16 * LN + ks * 16 + b_nk_off(lane, LN)]);
#pragma unroll
                for (int np = 0; np < 4; ++np) {
                    mma16816<MODE>(y[2 * np], a, b[np][0], b[np][1]);
                    mma16816<MODE>(y[2 * np + 1], a, b[np][2], b[np][3]);
                }
            }
        }
    }
    const int   ri0 = iw + wq * 16 + (lane >> 2), ri1 = ri0 + 8; /* this thread's rows (chunk index) */
    const float ci0 = ri0 < nlen ? cums[ri0] : 0.0f, ci1 = ri1 < nlen ? cums[ri1] : 0.0f;
    {
        const float e0 = ri0 < nlen ? expf(ci0) : 0.0f, e1 = ri1 < nlen ? expf(ci1) : 0.0f;
#pragma unroll
        for (int t = 0; t < 8; ++t) y[t][0] *= e0, y[t][1] *= e0, y[t][2] *= e1, y[t][3] *= e1;
    }
    __syncthreads(); /* the state region becomes B/x buffer 1 */

    for (int jt = 0; jt < ntiles; ++jt) {
        const int j0 = jt * kFT;
        if (jt + 1 < ntiles) {
            const int jn = j0 + kFT;
            const int k = (jt + 1) & 1;
            v5_tile<MODE>(v4_buf<T>(smem, ob0, obd, k), LN, A.b, A.vb, bb + (ch.t0 + jn) * A.b.s[1], A.b.s[1],
                          A.b.s[3], kFT, A.Np, ch.len - jn, A.N);
            v5_tile<MODE>(v4_buf<T>(smem, ox0, oxd, k), kFLd, A.x, A.vx, xb + (ch.t0 + jn) * A.x.s[1], A.x.s[1],
                          A.x.s[3], kFT, kFT, ch.len - jn, A.P - p0);
        }
        cp_async_commit();        /* possibly empty: one group per step */
        cp_async_wait_group<1>(); /* tile jt of this thread is done; tile jt+1 (and a z copy) may fly */
        __syncthreads();
        const T *  bs = v4_buf<T>(smem, ob0, obd, jt & 1);
        const T *  xs = v4_buf<T>(smem, ox0, oxd, jt & 1);
        const bool diag = j0 == iw;
        if (active && j0 <= iw) {
            /* scores (16 rows x 64 tokens) = C · Bᵀ, whole tiles (the diagonal one is masked below) */
            float sc[8][4];
#pragma unroll
            for (int i = 0; i < 8; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
#pragma unroll 2
            for (int ks = 0; ks < KS; ++ks) {
                uint32_t a[4], b[4][4];
                ldsm4(a, crow + ks * 16);
#pragma unroll
                for (int np = 0; np < 4; ++np) ldsm4(b[np], &bs[np * 16 * LN + ks * 16 + b_nk_off(lane, LN)]);
#pragma unroll
                for (int np = 0; np < 4; ++np) {
                    mma16816<MODE>(sc[2 * np], a, b[np][0], b[np][1]);
                    mma16816<MODE>(sc[2 * np + 1], a, b[np][2], b[np][3]);
                }
            }
            if (diag && zstage) {
                /* this warp's C rows are no longer read: its 16 z rows (64 p) go there, in flight
                 * during the products below (a group of its own; waited for in the epilogue or by
                 * the next step's wait) */
                __syncwarp();
                const T * zsrc = (const T *)A.z.p + ch.b * A.z.s[0] + h * A.z.s[2] + p0;
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int v = lane + 32 * u, r = v >> 3, c = (v & 7) * 8, row = iw + wq * 16 + r;
                    T *       d = cs + (warp * 16 + r) * LN + c;
                    if (row < ch.len && p0 + c < A.P)
                        cp_async16(d, zsrc + (ch.t0 + row) * A.z.s[1] + c);
                    else
                        *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
                }
                cp_async_commit();
            }
            const int jb = j0 + 2 * (lane & 3);
            if (diag)
                v5_mask<true>(sc, cums, dts, jb, ri0, ri1, ci0, ci1);
            else
                v5_mask<false>(sc, cums, dts, jb, ri0, ri1, ci0, ci1);
            /* y += scores · x (tokens x p); on the diagonal, token blocks after the warp's rows are 0 */
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) {
                if (diag && ks > wq) continue;
                uint32_t ah[4], al[4];
                split2<MODE>(sc[2 * ks][0], sc[2 * ks][1], ah[0], al[0]);
                split2<MODE>(sc[2 * ks][2], sc[2 * ks][3], ah[1], al[1]);
                split2<MODE>(sc[2 * ks + 1][0], sc[2 * ks + 1][1], ah[2], al[2]);
                split2<MODE>(sc[2 * ks + 1][2], sc[2 * ks + 1][3], ah[3], al[3]);
                uint32_t b[4][4];
#pragma unroll
                for (int np = 0; np < 4; ++np) ldsm4_t(b[np], &xs[ks * 16 * kFLd + np * 16 + b_kn_off(lane, kFLd)]);
#pragma unroll
                for (int np = 0; np < 4; ++np) {
                    mma16816<MODE>(y[2 * np], ah, b[np][0], b[np][1]);
                    mma16816<MODE>(y[2 * np + 1], ah, b[np][2], b[np][3]);
                }
                if (kFastSplit) {
#pragma unroll
                    for (int np = 0; np < 4; ++np) {
                        mma16816<MODE>(y[2 * np], al, b[np][0], b[np][1]);
                        mma16816<MODE>(y[2 * np + 1], al, b[np][2], b[np][3]);
                    }
                }
            }
        }
        /* the next step prefetches tile jt+2 into this buffer: everybody must be done with it.
         * The last two tiles are never overwritten: they hold the diagonal x rows used for D. */
        if (jt + 2 < ntiles) __syncthreads();
    }
    if (!active) return; /* no barrier follows */

    /* epilogue: + D·x (the warp's diagonal x tile), the z gate, stores of pairs */
    const T *       xd = v4_buf<T>(smem, ox0, oxd, (iw / kFT) & 1);
    const long long tb = ch.t0 + iw;
    if (A.vout && (!A.has_z || zstage)) {
        cp_async_wait_group<0>();
        __syncwarp(); /* the warp's z rows, copied by its lanes, are visible to all of them */
        const int  osz = A.out_dtype == SSM_DTYPE_F32 ? 4 : 2;
        const bool has_z = A.has_z;
        /* one row at a time: its output row's address once, then 8 pairs (P is even here) */
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r16 = (lane >> 2) + half * 8, ii = wq * 16 + r16;
            if (iw + ii >= ch.len) continue;
            char *     orow = (char *)A.out + (ch.b * A.os[0] + (tb + ii) * A.os[1] + h * A.os[2] + p0) * osz;
            const T *  xr = xd + ii * kFLd;
            const T *  zr = cs + (warp * 16 + r16) * LN;
#pragma unroll
            for (int t = 0; t < 8; ++t) {
                const int pl = t * 8 + 2 * (lane & 3);
                if (p0 + pl >= A.P) break;
                const float2 xv = t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(xr + pl));
                const float2 dv = *reinterpret_cast<const float2 *>(ds + pl);
                float        v0 = y[t][2 * half] + dv.x * xv.x, v1 = y[t][2 * half + 1] + dv.y * xv.y;
                if (has_z) {
                    const float2 zz = t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(zr + pl));
                    v0 *= v5_silu(zz.x);
                    v1 *= v5_silu(zz.y);
                }
                if (osz == 4)
                    *reinterpret_cast<float2 *>(orow + pl * 4) = make_float2(v0, v1);
                else
                    *reinterpret_cast<uint32_t *>(orow + pl * 2) = t2<MODE>::pack(v0, v1);
            }
        }
        return;
    }
    /* any other layout: v4's epilogue (z from global memory, generic loads and stores) */
    generic_epilogue<MODE, true>(A, ch, h, p0, tb, iw, wq, y, xd, ds);
}

/* ---- v6 of the output kernel (Hopper wgmma, sm_90a) ---------------------------------------------
 * ncu on fast_output_kernel_v5 (0.416 of 0.619 ms at the shape of record) found it issue-bound:
 * mma.sync + ldmatrix + address arithmetic, the tensor pipe ~17% busy. v6 keeps v5's math, grid,
 * block (256 threads = 2 warpgroups: warps 0-3 rows i0..i0+63, warps 4-7 rows i0+64..i0+127, v5's
 * iw/wq split), buffers and their roles, mask, hi/lo split and epilogue, and does the three
 * products with wgmma.mma_async m64n64k16 (f32 accumulators) reading shared memory through matrix
 * descriptors (wgmma.cuh):
 *   y  = C · S_inᵀ        A = the warpgroup's C rows (K-major, K = N), B = S_hi then S_lo (K-major)
 *   sc = C · B_tileᵀ      A = C rows, B = the token tile's B rows (K-major)
 *   y += split(sc) · x    A = the masked scores from registers (hi then lo: the mma.sync A fragment
 *                         of the warp's rows, v5's split2), B = the x tile, MN-major (imm-trans-b 1)
 * The accumulator fragment of warp wq of the warpgroup is v5's float [8][4] of its 16 rows
 * (wgmma.cuh: "register fragments"), so the mask and the epilogue are v5's. Every operand tile is
 * stored in the 128-byte swizzled layout (ssmi_wg::swz_off), 1024-byte aligned; the epilogue's
 * reads of x (D·x) and of the staged z rows use the same addressing.
 * Differences from v5 in the work done: the diagonal tile's scores · x product runs all four
 * k-steps for every warp (a warpgroup instruction cannot skip per warp; the scores above the
 * diagonal are 0), and the hi and lo products of C · S_inᵀ are two chains instead of interleaved
 * (another fp32 summation order).
 * Applies (scan_v6_applies) only to 16-bit scans with C, B, x of type T in contiguous 16-byte rows,
 * N a multiple of 64 and at most 128, the split entering states present, out in pairs and z (if
 * any) in 16-byte rows, on an sm_90 device of a build with sm_90a code (SSMI_CUDA_WGMMA); anything
 * else asked for v6 runs v5. */
#if SSMI_CUDA_WGMMA
struct v6_out_smem {
    int cs, b0, x0, ss_hi, ss_lo, b1, x1, total; /* byte offsets from the 1024-aligned base; total + pad */
    __host__ __device__ v6_out_smem(int katoms) {
        const int at = ssmi_wg::kAtomBytes, tn = katoms * at; /* a 64-row K-major tile */
        cs = 0;
        b0 = 2 * tn; /* 128 C rows: two 64-row blocks */
        x0 = b0 + tn;
        ss_hi = x0 + at;
        ss_lo = ss_hi + tn;
        b1 = ss_hi; /* the state planes become buffer 1 after C·S_inᵀ, as in v4/v5 */
        x1 = ss_lo;
        total = ss_lo + tn + 1024; /* + room to align the dynamic base to 1024 */
    }
};

#if SSMI_WG_HAVE /* device helpers of v6, only in the passes that compile its body */
/* The epilogue of the wgmma output kernels (v5's fast path on the swizzled tiles): y (the warp's
 * 16 rows × 64 p, wgmma fragment layout) + D·x (xd: the warpgroup's diagonal x tile), times
 * silu(z) (zb: the warp's z rows staged over its C rows), stored in pairs to out. */
template <int MODE>
__device__ __forceinline__ void v6_epilogue(const m2_fast_args & A, const m2_chunk & ch, const float (&y)[8][4],
                                            const unsigned char * xd, const unsigned char * zb, const float * ds,
                                            int iw, int wq, int h, int p0) {
    const int       lane = threadIdx.x & 31;
    const long long tb = ch.t0 + iw;
    cp_async_wait_group<0>();
    __syncwarp(); /* the warp's z rows, copied by its lanes, are visible to all of them */
    const int  osz = A.out_dtype == SSM_DTYPE_F32 ? 4 : 2;
    const bool has_z = A.has_z;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r16 = (lane >> 2) + half * 8, ii = wq * 16 + r16;
        if (iw + ii >= ch.len) continue;
        char * orow = (char *)A.out + (ch.b * A.os[0] + (tb + ii) * A.os[1] + h * A.os[2] + p0) * osz;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int pl = t * 8 + 2 * (lane & 3);
            if (p0 + pl >= A.P) break;
            const float2 xv = t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(xd + ssmi_wg::swz_off(ii, pl)));
            const float2 dv = *reinterpret_cast<const float2 *>(ds + pl);
            float        v0 = y[t][2 * half] + dv.x * xv.x, v1 = y[t][2 * half + 1] + dv.y * xv.y;
            if (has_z) {
                const float2 zz = t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(zb + ssmi_wg::swz_off(ii, pl)));
                v0 *= v5_silu(zz.x);
                v1 *= v5_silu(zz.y);
            }
            if (osz == 4)
                *reinterpret_cast<float2 *>(orow + pl * 4) = make_float2(v0, v1);
            else
                *reinterpret_cast<uint32_t *>(orow + pl * 2) = t2<MODE>::pack(v0, v1);
        }
    }
}

/* v5_tile_vec into the swizzled layout: element (r, c) of a rows × 8·c8 tile from src + r·srow + c
 * to byte dst + swz_off_rows(r, c, katoms); rows ≥ nr or columns ≥ nc are zero-filled. */
template <typename T>
__device__ __forceinline__ void v6_tile(unsigned char * dst, int katoms, const T * src, long long srow, int rows,
                                        int c8, int nr, int nc) {
    const int total = rows * c8, step_r = kV4Threads / c8, step_c = kV4Threads - step_r * c8;
    int       r = (int)threadIdx.x / c8, c = (int)threadIdx.x - r * c8;
    for (int o = threadIdx.x; o < total; o += kV4Threads) {
        unsigned char * d = dst + ssmi_wg::swz_off_rows(r, c * 8, katoms);
        if (r < nr && c * 8 < nc)
            cp_async16(d, src + r * srow + c * 8);
        else
            *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
        r += step_r, c += step_c;
        if (c >= c8) c -= c8, ++r;
    }
}

/* bar.sync on a named barrier of the warpgroup's 128 threads (id 1 + warpgroup; immediate ids). */
__device__ __forceinline__ void v6_wg_bar(int wg) {
    if (wg == 0)
        asm volatile("bar.sync 1, 128;\n" ::: "memory");
    else
        asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

#endif
/* KA: the K atoms of the C, B and state tiles (N = 64·KA), a template parameter so that the
 * k-loops unroll (a loop-carried accumulator of a wgmma chain makes ptxas serialize it). */
template <int MODE, int KA>
__global__ void __launch_bounds__(kV4Threads, 2) fast_output_kernel_v6(const m2_fast_args A) {
#if SSMI_WG_HAVE
    typedef typename cfg<MODE>::T T;
    constexpr bool BF = MODE == M_BF16;
    __shared__ __align__(16) float dts[kScanQ];
    __shared__ __align__(16) float cums[kScanQ];
    __shared__ __align__(16) float ds[kFT];
    extern __shared__ __align__(1024) unsigned char smem6[];
    /* the swizzle pattern is a function of address bits 4-9: align the base at run time */
    const unsigned  raw = smem_addr(smem6);
    unsigned char * sm = smem6 + (((raw + 1023u) & ~1023u) - raw);
    const unsigned   sb = smem_addr(sm);
    const v6_out_smem L(KA);

    const v5_block  bk = v5_block_of(A);
    const int       h = bk.h, i0 = bk.i0, p0 = bk.p0;
    const long long wh = bk.wh;
    const m2_chunk  ch = A.chunks[bk.w];
    if (i0 >= ch.len) return; /* uniform over the block */
    const int  tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int  wg = warp >> 2;         /* warpgroup: rows i0 + 64·wg ..                  */
    const int  wq = warp & 3;          /* the warp's 16-row slice within its warpgroup   */
    const int  iw = i0 + wg * kFT;     /* start of this warpgroup's 64-row tile          */
    const bool active = iw < ch.len;   /* warpgroup-uniform (wgmma needs all 128 threads) */
    const int  g = h / (A.H / A.G);
    const int  nlen = min(ch.len, i0 + kV4Rows);
    const int  ntiles = (i0 + kFT < ch.len ? i0 + kFT : i0) / kFT + 1;
    constexpr int KS = KA * 4; /* k-steps of 16 along N */
    const bool zstage = A.has_z != 0; /* the host asks for z in 16-byte rows (vz16) */
    const long long bb = ch.b * A.b.s[0] + g * A.b.s[2];
    const long long xb = ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3];
    const unsigned  c_wg = sb + (unsigned)(L.cs + wg * KA * ssmi_wg::kAtomBytes); /* this warpgroup's C rows */
    block_tables(A, wh, h, p0, nlen, dts, cums, ds);

    /* group 0: the C rows of the tile and the split entering state (hi and lo planes);
     * group 1: B/x of token tile 0 */
    v6_tile<T>(sm + L.cs, KA, (const T *)A.c.p + ch.b * A.c.s[0] + (ch.t0 + i0) * A.c.s[1] + g * A.c.s[2], A.c.s[1],
               kV4Rows, A.N >> 3, ch.len - i0, A.N);
    {
        const T * sp = (const T *)A.split + wh * 2 * A.P * A.N + (long long)p0 * A.N;
        v6_tile<T>(sm + L.ss_hi, KA, sp, A.N, kFT, A.N >> 3, A.P - p0, A.N);
        v6_tile<T>(sm + L.ss_lo, KA, sp + (long long)A.P * A.N, A.N, kFT, A.N >> 3, A.P - p0, A.N);
    }
    cp_async_commit();
    v6_tile<T>(sm + L.b0, KA, (const T *)A.b.p + bb + ch.t0 * A.b.s[1], A.b.s[1], kFT, A.N >> 3, ch.len, A.N);
    v6_tile<T>(sm + L.x0, 1, (const T *)A.x.p + xb + ch.t0 * A.x.s[1], A.x.s[1], kFT, kFT >> 3, ch.len, A.P - p0);
    cp_async_commit();
    cp_async_wait_group<1>();
    ssmi_wg::fence_proxy_async(); /* this thread's copies and zero stores, seen by the async proxy */
    __syncthreads();

    /* y (64 rows x 64 p per warpgroup) = C · S_inᵀ (hi, then lo), rows scaled by exp(cum_i) */
    float y[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i][0] = y[i][1] = y[i][2] = y[i][3] = 0.0f;
    if (active) {
        ssmi_wg::fence();
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            const unsigned ko = (unsigned)((ks >> 2) * ssmi_wg::kAtomBytes + (ks & 3) * 32);
            ssmi_wg::mma_ss<BF, 0>(y, ssmi_wg::desc_k(c_wg + ko), ssmi_wg::desc_k(sb + L.ss_hi + ko));
        }
        if (kFastSplit)
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                const unsigned ko = (unsigned)((ks >> 2) * ssmi_wg::kAtomBytes + (ks & 3) * 32);
                ssmi_wg::mma_ss<BF, 0>(y, ssmi_wg::desc_k(c_wg + ko), ssmi_wg::desc_k(sb + L.ss_lo + ko));
            }
        ssmi_wg::commit();
        ssmi_wg::wait<0>();
        ssmi_wg::keep(y);
    }
    const int   ri0 = iw + wq * 16 + (lane >> 2), ri1 = ri0 + 8; /* this thread's rows (chunk index) */
    const float ci0 = ri0 < nlen ? cums[ri0] : 0.0f, ci1 = ri1 < nlen ? cums[ri1] : 0.0f;
    {
        const float e0 = ri0 < nlen ? expf(ci0) : 0.0f, e1 = ri1 < nlen ? expf(ci1) : 0.0f;
#pragma unroll
        for (int t = 0; t < 8; ++t) y[t][0] *= e0, y[t][1] *= e0, y[t][2] *= e1, y[t][3] *= e1;
    }
    __syncthreads(); /* the state region becomes B/x buffer 1 */

    for (int jt = 0; jt < ntiles; ++jt) {
        const int j0 = jt * kFT;
        if (jt + 1 < ntiles) {
            const int jn = j0 + kFT;
            const int k = (jt + 1) & 1;
            v6_tile<T>(sm + (k ? L.b1 : L.b0), KA, (const T *)A.b.p + bb + (ch.t0 + jn) * A.b.s[1], A.b.s[1], kFT,
                       A.N >> 3, ch.len - jn, A.N);
            v6_tile<T>(sm + (k ? L.x1 : L.x0), 1, (const T *)A.x.p + xb + (ch.t0 + jn) * A.x.s[1], A.x.s[1], kFT,
                       kFT >> 3, ch.len - jn, A.P - p0);
        }
        cp_async_commit();        /* possibly empty: one group per step */
        cp_async_wait_group<1>(); /* tile jt of this thread is done; tile jt+1 (and a z copy) may fly */
        ssmi_wg::fence_proxy_async();
        __syncthreads();
        const unsigned bs = sb + (unsigned)((jt & 1) ? L.b1 : L.b0);
        const unsigned xs = sb + (unsigned)((jt & 1) ? L.x1 : L.x0);
        const bool     diag = j0 == iw;
        if (active && j0 <= iw) {
            /* scores (64 rows x 64 tokens per warpgroup) = C · Bᵀ */
            float sc[8][4];
#pragma unroll
            for (int i = 0; i < 8; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
            unsigned ca = c_wg;
            asm volatile("" : "+r"(ca)); /* the C descriptors are rebuilt per tile, not held (registers) */
            ssmi_wg::fence();
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                const unsigned ko = (unsigned)((ks >> 2) * ssmi_wg::kAtomBytes + (ks & 3) * 32);
                ssmi_wg::mma_ss<BF, 0>(sc, ssmi_wg::desc_k(ca + ko), ssmi_wg::desc_k(bs + ko));
            }
            ssmi_wg::commit();
            ssmi_wg::wait<0>();
            ssmi_wg::keep(sc);
            if (diag && zstage) {
                /* the warpgroup's C rows are no longer read: each warp's 16 z rows (64 p) go into its
                 * own C rows, in flight during the products below. The named barrier makes sure no
                 * warp of the warpgroup is still inside the scores product. */
                v6_wg_bar(wg);
                const T * zsrc = (const T *)A.z.p + ch.b * A.z.s[0] + h * A.z.s[2] + p0;
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int       v = lane + 32 * u, r = v >> 3, c = (v & 7) * 8, row = iw + wq * 16 + r;
                    unsigned char * d = sm + L.cs + wg * KA * ssmi_wg::kAtomBytes + ssmi_wg::swz_off(wq * 16 + r, c);
                    if (row < ch.len && p0 + c < A.P)
                        cp_async16(d, zsrc + (ch.t0 + row) * A.z.s[1] + c);
                    else
                        *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
                }
                cp_async_commit();
            }
            const int jb = j0 + 2 * (lane & 3);
            if (diag)
                v5_mask<true>(sc, cums, dts, jb, ri0, ri1, ci0, ci1);
            else
                v5_mask<false>(sc, cums, dts, jb, ri0, ri1, ci0, ci1);
            /* y += scores · x (tokens x p): A from registers (hi, then lo), x tile MN-major */
            uint32_t ah[4][4], al[4][4];
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) {
                split2<MODE>(sc[2 * ks][0], sc[2 * ks][1], ah[ks][0], al[ks][0]);
                split2<MODE>(sc[2 * ks][2], sc[2 * ks][3], ah[ks][1], al[ks][1]);
                split2<MODE>(sc[2 * ks + 1][0], sc[2 * ks + 1][1], ah[ks][2], al[ks][2]);
                split2<MODE>(sc[2 * ks + 1][2], sc[2 * ks + 1][3], ah[ks][3], al[ks][3]);
            }
            ssmi_wg::fence();
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(y, ah[ks], ssmi_wg::desc_mn(xs + ks * 2048));
            if (kFastSplit) {
#pragma unroll
                for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(y, al[ks], ssmi_wg::desc_mn(xs + ks * 2048));
            }
            ssmi_wg::commit();
            ssmi_wg::wait<0>();
            ssmi_wg::keep(y);
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) ssmi_wg::keep(ah[ks]), ssmi_wg::keep(al[ks]);
        }
        /* the next step prefetches tile jt+2 into this buffer: everybody must be done with it.
         * The last two tiles are never overwritten: they hold the diagonal x rows used for D. */
        if (jt + 2 < ntiles) __syncthreads();
    }
    if (!active) return; /* no barrier follows */

    /* epilogue (v5's fast path): + D·x (the warpgroup's diagonal x tile), the z gate, stores of pairs */
    const unsigned char * xd = sm + (((iw / kFT) & 1) ? L.x1 : L.x0);
    const unsigned char * zb = sm + L.cs + wg * KA * ssmi_wg::kAtomBytes;
    v6_epilogue<MODE>(A, ch, y, xd, zb, ds, iw, wq, h, p0);
#else
    (void)A; /* no sm_90a code in this pass: never launched (scan_v6_applies) */
    __trap(); /* a wrong image choice fails loudly instead of leaving the outputs unwritten */
#endif
}
/* ---- v7 of the output kernel (Hopper wgmma, sm_90a) ---------------------------------------------
 * ncu on fast_output_kernel_v6 (352 of 543 µs at the shape of record): 190 M warp instructions of
 * which HGMMA 1.2% (IMAD 19%, FMUL 9%, ...), the top stalls the wgmma waits right after each chain
 * and the barriers. v7 keeps v6's grid, block, math (the same split products, fp32 accumulators),
 * operand layouts and epilogue, and changes three things:
 *  - Overlap. The scores of token tile j+1 (C·B_{j+1}ᵀ) are issued at the end of step j and
 *    waited for at the start of step j+1, so they run through the step's barrier and copy waits
 *    (v6 issued them after the barrier and waited at once); C·S_in and the scores of tile 0 run
 *    as one group. That needs B of tile j+1 on chip at the end of step j: B is double-buffered two
 *    tiles ahead (B1 is a buffer of its own; the entering-state planes share their region with the
 *    two x buffers, dead after C·S_in). (A second score accumulator, to run scores(j+1) under the
 *    mask of tile j, does not fit in 128 registers: tried, ~100 bytes of spill.)
 *  - The mask off the diagonal. For a warpgroup's rows i ≥ iw and a token j < iw,
 *    exp(cum_i − cum_j) = exp(cum_i − cum_iw) · exp(cum_iw − cum_j), both exponents ≤ 0 (cum is
 *    non-increasing), so no overflow and no new underflow: per row r_i and per column
 *    w_j = exp(cum_iw − cum_j)·dt_j (shared tables, made once per block) replace the
 *    per-element subtract, exp and two multiplies by two multiplies. The diagonal tile keeps v6's
 *    mask. (Rounding differs slightly from v6: a few ulp in the weights.)
 *  - Address arithmetic. Copies with compile-time trip counts and per-thread swizzled offsets
 *    computed once per call (the rows a thread copies are 16 or 32 apart, so their swizzle phase
 *    is the same); descriptors built once per chain and advanced by constants; accumulators
 *    started by the first wgmma of a chain (scale-d 0) instead of zeroed by moves.
 * Step j (all 256 threads take every step and its one __syncthreads; a warpgroup does the wgmma
 * work of the steps j ≤ its diagonal tile):
 *   (a) wait for scores(j) (executed by both warpgroups: an idle one has nothing pending);
 *   (b) wait for this thread's copies (B of j+1, x of j), proxy fence, __syncthreads;
 *   (c) mask and split scores(j); the x chain of j (hi, then lo) into y, waited for at once;
 *   (d) copies, with only y live: B of j+2 into B buffer j&1 (it held B of j: scores(j) are done
 *       in every warpgroup, (a) precedes the barrier), x of j+1 into x buffer (j+1)&1 (it held x
 *       of j−1, whose chain every warpgroup waited for in step j−1), and at the diagonal step the
 *       warp's z rows into its own C rows (no scores read them any more); commit;
 *   (e) issue scores(j+1) (if j+1 ≤ the diagonal tile) into the score accumulator.
 * ptxas notes: a wgmma issued under a condition nested inside the block of another wgmma chain
 * made ptxas serialize every wgmma of the kernel (C7520); the issue in (e) is a block of its own.
 * The diagonal x tiles stay for the epilogue's D·x: x of tile j is overwritten only by x of j+2,
 * and the two diagonal tiles are the last two.
 * Applies where v6 does (scan_v7_applies: the same layouts, v7's shared memory). */
struct v7_out_smem {
    int cs, b0, b1, r, ss_hi, ss_lo, x0, x1, total; /* byte offsets from the 1024-aligned base; total + pad */
    __host__ __device__ v7_out_smem(int katoms) {
        const int at = ssmi_wg::kAtomBytes, tn = katoms * at; /* a 64-row K-major tile; an x tile is one atom */
        cs = 0;
        b0 = 2 * tn; /* 128 C rows: two 64-row blocks */
        b1 = b0 + tn;
        r = b1 + tn; /* the state planes (prologue), then x buffers 0 and 1 (2·at ≤ 2·tn) */
        ss_hi = r;
        ss_lo = r + tn;
        x0 = r;
        x1 = r + at;
        total = r + 2 * tn + 1024; /* + room to align the dynamic base */
    }
};

#if SSMI_WG_HAVE /* device helpers of v7, only in the passes that compile its body */
/* The 16-byte copies of a ROWS × 8·C8 tile of T into the swizzled layout (katoms = C8/8): element
 * (r, c) from src + r·srow + c; rows ≥ nr (or, unless FULLC, columns ≥ nc) are zero-filled. Thread
 * t copies chunk t % C8 of rows t / C8 + u·STEP: STEP is a multiple of 8 that divides 64, so the
 * swizzle phase (r & 7) and the chunk are the same for all its pieces and the destination of piece
 * u is the first one's plus a constant. The caller commits and waits. */
template <typename T, int C8, int ROWS, bool FULLC>
__device__ __forceinline__ void v7_tile(unsigned char * dst, const T * src, long long srow, int nr, int nc) {
    constexpr int STEP = kV4Threads / C8, U = ROWS * C8 / kV4Threads, KAT = C8 / 8;
    static_assert(STEP % 8 == 0 && 64 % STEP == 0 && U * kV4Threads == ROWS * C8, "v7_tile: piece layout");
    const int c = (int)threadIdx.x % C8, r0 = (int)threadIdx.x / C8;
    dst += ssmi_wg::swz_off(r0, c * 8);
    src += r0 * srow + c * 8;
    const bool colok = FULLC || c * 8 < nc;
#pragma unroll
    for (int u = 0; u < U; ++u) {
        unsigned char * d = dst + ((u * STEP) >> 6) * KAT * ssmi_wg::kAtomBytes + ((u * STEP) & 63) * 128;
        if (colok && r0 + u * STEP < nr)
            cp_async16(d, src + (long long)(u * STEP) * srow);
        else
            *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
    }
}

/* The off-diagonal mask of a 16 × 64 score tile (fragment layout): sc(i, j) · r_i · w_j with
 * r_i = exp(cum_i − cum_iw) (r0, r1: this thread's two rows) and w_j = exp(cum_iw − cum_j)·dt_j
 * from the warpgroup's table (wc + 8t: this thread's column pair of column block t). */
__device__ __forceinline__ void v7_mask_off(float (&sc)[8][4], const float * wc, float r0, float r1) {
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        const float2 w = *reinterpret_cast<const float2 *>(wc + t * 8);
        sc[t][0] *= r0 * w.x, sc[t][1] *= r0 * w.y, sc[t][2] *= r1 * w.x, sc[t][3] *= r1 * w.y;
    }
}
#endif

template <int MODE, int KA>
__global__ void __launch_bounds__(kV4Threads, 2) fast_output_kernel_v7(const m2_fast_args A) {
#if SSMI_WG_HAVE
    typedef typename cfg<MODE>::T T;
    constexpr bool BF = MODE == M_BF16;
    constexpr int  C8 = KA * 8; /* 16-byte chunks of a C, B or state row */
    constexpr int  AT = ssmi_wg::kAtomBytes;
    __shared__ __align__(16) float dts[kScanQ];
    __shared__ __align__(16) float cums[kScanQ];
    __shared__ __align__(16) float ds[kFT];
    __shared__ __align__(16) float wcol[2][kScanQ]; /* per warpgroup: exp(cum_iw − cum_j)·dt_j, j < iw */
    __shared__ __align__(16) float rrow[kV4Rows];   /* per row i0 + r: exp(cum_i − cum_iw) (0 past the chunk) */
    extern __shared__ __align__(1024) unsigned char smem7[];
    /* the swizzle pattern is a function of address bits 4-9: align the base at run time */
    const unsigned  raw = smem_addr(smem7);
    unsigned char * sm = smem7 + (((raw + 1023u) & ~1023u) - raw);
    const unsigned  sb = smem_addr(sm);
    const v7_out_smem L(KA);

    const v5_block  bk = v5_block_of(A);
    const int       h = bk.h, i0 = bk.i0, p0 = bk.p0;
    const long long wh = bk.wh;
    const m2_chunk  ch = A.chunks[bk.w];
    if (i0 >= ch.len) return; /* uniform over the block */
    const int  tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int  wg = warp >> 2;       /* warpgroup: rows i0 + 64·wg ..                  */
    const int  wq = warp & 3;        /* the warp's 16-row slice within its warpgroup   */
    const int  iw = i0 + wg * kFT;   /* start of this warpgroup's 64-row tile          */
    const bool active = iw < ch.len; /* warpgroup-uniform (wgmma needs all 128 threads) */
    const int  mydg = iw / kFT;      /* this warpgroup's diagonal token tile           */
    const int  g = h / (A.H / A.G);
    const int  nlen = min(ch.len, i0 + kV4Rows);
    const int  ntiles = (i0 + kFT < ch.len ? i0 + kFT : i0) / kFT + 1;
    const bool zstage = A.has_z != 0; /* the host asks for z in 16-byte rows (vz16) */
    const T *  bsrc = (const T *)A.b.p + ch.b * A.b.s[0] + g * A.b.s[2] + ch.t0 * A.b.s[1];
    const T *  xsrc = (const T *)A.x.p + ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3] + ch.t0 * A.x.s[1];
    const unsigned c_wg = sb + (unsigned)(L.cs + wg * KA * AT); /* this warpgroup's C rows */
    block_tables(A, wh, h, p0, nlen, dts, cums, ds);

    /* group 0: the C rows, the split entering state (hi and lo planes) and B of token tile 0;
     * group 1: B of token tile 1 */
    v7_tile<T, C8, kV4Rows, true>(sm + L.cs,
                                  (const T *)A.c.p + ch.b * A.c.s[0] + (ch.t0 + i0) * A.c.s[1] + g * A.c.s[2],
                                  A.c.s[1], ch.len - i0, 0);
    {
        const T * sp = (const T *)A.split + wh * 2 * A.P * A.N + (long long)p0 * A.N;
        v7_tile<T, C8, kFT, true>(sm + L.ss_hi, sp, A.N, A.P - p0, 0);
        v7_tile<T, C8, kFT, true>(sm + L.ss_lo, sp + (long long)A.P * A.N, A.N, A.P - p0, 0);
    }
    v7_tile<T, C8, kFT, true>(sm + L.b0, bsrc, A.b.s[1], ch.len, 0);
    cp_async_commit();
    if (ntiles > 1) v7_tile<T, C8, kFT, true>(sm + L.b1, bsrc + kFT * A.b.s[1], A.b.s[1], ch.len - kFT, 0);
    cp_async_commit();
    cp_async_wait_group<1>();
    ssmi_wg::fence_proxy_async(); /* this thread's copies and zero stores, seen by the async proxy */
    __syncthreads();

    /* y (64 rows x 64 p per warpgroup) = C · S_inᵀ (hi, then lo); scores(0) follow at once */
    float    y[8][4], sc[8][4];
    uint32_t ah[4][4], al[4][4];
    if (active) {
        /* the column and row factors of the off-diagonal tiles (read after the barrier below; not
         * while the products fly: this loop diverges), both ≤ 1: exp(cum_iw − cum_j)·dt_j for
         * j < iw and exp(cum_i − cum_iw) for the warpgroup's rows */
        const float cw = cums[iw];
        for (int j = tid & 127; j < iw; j += 128) wcol[wg][j] = v5_exp2((cw - cums[j]) * kLog2e) * dts[j];
        if ((tid & 127) < kFT) {
            const int i = iw + (tid & 127);
            rrow[i - i0] = i < nlen ? v5_exp2((cums[i] - cw) * kLog2e) : 0.0f;
        }
        ssmi_wg::fence();
        ssmi_wg::chain_k<BF, KA, false>(y, c_wg, sb + L.ss_hi);
        if (kFastSplit) ssmi_wg::chain_k<BF, KA, true>(y, c_wg, sb + L.ss_lo);
        ssmi_wg::chain_k<BF, KA, false>(sc, c_wg, sb + L.b0);
        ssmi_wg::commit();
    }
    ssmi_wg::wait<0>(); /* C · S_inᵀ and scores(0) (nothing pending in an idle warpgroup) */
    ssmi_wg::keep(y);
    ssmi_wg::keep(sc);
    /* this thread's first row, relative to i0 (the second is 8 further); cums is 0 past the
     * chunk, as v6's mask expects of rows there */
    const int rl0 = wg * kFT + wq * 16 + (lane >> 2);
    {
        const int   ri0 = i0 + rl0, ri1 = ri0 + 8;
        const float e0 = ri0 < nlen ? expf(cums[ri0]) : 0.0f, e1 = ri1 < nlen ? expf(cums[ri1]) : 0.0f;
#pragma unroll
        for (int t = 0; t < 8; ++t) y[t][0] *= e0, y[t][1] *= e0, y[t][2] *= e1, y[t][3] *= e1;
    }
    __syncthreads(); /* every C · S_inᵀ is done: the state region becomes the x buffers */
    v7_tile<T, 8, kFT, false>(sm + L.x0, xsrc, A.x.s[1], ch.len, A.P - p0);
    cp_async_commit();

#pragma unroll 1
    for (int jt = 0; jt < ntiles; ++jt) {
        /* (a) */
        ssmi_wg::wait<0>();
        ssmi_wg::keep(sc);
        /* (b) */
        cp_async_wait_group<0>(); /* B of jt+1 and x of jt, of this thread */
        ssmi_wg::fence_proxy_async();
        __syncthreads();
        const bool mine = active && jt <= mydg;
        /* (c) mask, split, y += split(scores) · x (tokens x p: A from registers, x MN-major) */
        if (mine) {
            const int jb = jt * kFT + 2 * (lane & 3);
            if (jt == mydg)
                v5_mask<true>(sc, cums, dts, jb, i0 + rl0, i0 + rl0 + 8, cums[i0 + rl0], cums[i0 + rl0 + 8]);
            else
                v7_mask_off(sc, &wcol[wg][jb], rrow[rl0], rrow[rl0 + 8]);
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) {
                split2<MODE>(sc[2 * ks][0], sc[2 * ks][1], ah[ks][0], al[ks][0]);
                split2<MODE>(sc[2 * ks][2], sc[2 * ks][3], ah[ks][1], al[ks][1]);
                split2<MODE>(sc[2 * ks + 1][0], sc[2 * ks + 1][1], ah[ks][2], al[ks][2]);
                split2<MODE>(sc[2 * ks + 1][2], sc[2 * ks + 1][3], ah[ks][3], al[ks][3]);
            }
            ssmi_wg::fence(); /* ah/al and y (scaled) were written by ordinary instructions */
            const uint64_t dx = ssmi_wg::desc_mn(sb + (unsigned)((jt & 1) ? L.x1 : L.x0));
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(y, ah[ks], dx + (uint64_t)(ks * 2048 >> 4));
            if (kFastSplit) {
#pragma unroll
                for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(y, al[ks], dx + (uint64_t)(ks * 2048 >> 4));
            }
            ssmi_wg::commit();
            ssmi_wg::wait<0>();
            ssmi_wg::keep(y);
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) ssmi_wg::keep(ah[ks]), ssmi_wg::keep(al[ks]);
        }
        /* (d) copies, with only y live (after the x chain, before the next scores) */
        if (jt + 2 < ntiles)
            v7_tile<T, C8, kFT, true>(sm + ((jt & 1) ? L.b1 : L.b0), bsrc + (long long)(jt + 2) * kFT * A.b.s[1],
                                      A.b.s[1], ch.len - (jt + 2) * kFT, 0);
        if (jt + 1 < ntiles)
            v7_tile<T, 8, kFT, false>(sm + (((jt + 1) & 1) ? L.x1 : L.x0), xsrc + (long long)(jt + 1) * kFT * A.x.s[1],
                                      A.x.s[1], ch.len - (jt + 1) * kFT, A.P - p0);
        if (mine && jt == mydg && zstage) {
            /* the warpgroup's C rows are no longer read (scores(mydg) are done in all its warps:
             * (a) precedes the barrier, and no later scores are issued): each warp's 16 z rows
             * (64 p) go into its own C rows */
            const T * zsrc = (const T *)A.z.p + ch.b * A.z.s[0] + h * A.z.s[2] + p0;
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int       v = lane + 32 * u, r = v >> 3, c = (v & 7) * 8, row = iw + wq * 16 + r;
                unsigned char * d = sm + L.cs + wg * KA * AT + ssmi_wg::swz_off(wq * 16 + r, c);
                if (row < ch.len && p0 + c < A.P)
                    cp_async16(d, zsrc + (ch.t0 + row) * A.z.s[1] + c);
                else
                    *reinterpret_cast<uint4 *>(d) = make_uint4(0u, 0u, 0u, 0u);
            }
        }
        cp_async_commit(); /* possibly empty: one group per step */
        /* (e) scores(jt+1) = C · B_{jt+1}ᵀ, in flight through the next step's barrier */
        if (active && jt < mydg) {
            ssmi_wg::fence(); /* sc was read by the split */
            ssmi_wg::chain_k<BF, KA, false>(sc, c_wg, sb + (((jt + 1) & 1) ? L.b1 : L.b0));
            ssmi_wg::commit();
        }
    }
    ssmi_wg::wait<0>(); /* the last x chain (nothing pending in an idle warpgroup) */
    ssmi_wg::keep(y);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) ssmi_wg::keep(ah[ks]), ssmi_wg::keep(al[ks]);
    if (!active) return; /* no barrier follows */

    /* epilogue (v6's): + D·x (the warpgroup's diagonal x tile), the z gate, stores of pairs */
    const unsigned char * xd = sm + ((mydg & 1) ? L.x1 : L.x0);
    const unsigned char * zb = sm + L.cs + wg * KA * AT;
    v6_epilogue<MODE>(A, ch, y, xd, zb, ds, iw, wq, h, p0);
#else
    (void)A; /* no sm_90a code in this pass: never launched (scan_v7_applies) */
    __trap(); /* a wrong image choice fails loudly instead of leaving the outputs unwritten */
#endif
}
#endif /* SSMI_CUDA_WGMMA */

/* ---- v6 of the state kernel (Hopper wgmma, sm_90a) -----------------------------------------------
 * fast_state_kernel_v5's work per block — (chunk, head, 64-row P tile, 128 N columns): dt processing
 * and block scan, then token tiles of 64 — with the products s(P x N) += (w∘x)ᵀ·B on wgmma
 * m64n64k16 (f32 accumulators) from shared memory instead of ldmatrix + mma.sync. Per token tile:
 *   1. cp.async of x (64 tokens x 64 p, plain rows of 128 bytes) and of B (64 tokens x 128 n, 128B
 *      swizzled: one atom per 64 n, token rows, n contiguous = the MN-major B operand), double-
 *      buffered as in v5 (tile j+1 flies during tile j);
 *   2. the split pass: w_j·x_j rounded to hi and lo (v5's split2) and written TRANSPOSED into two
 *      swizzled tiles of 64 p rows x 64 tokens (tokens contiguous = the K-major A operand, the
 *      proven layout of the output kernel's C rows); warp k takes tokens 8k..8k+7, lane l the p pair
 *      2l, 2l+1, so it reads 128 contiguous bytes per token row and stores 16 bytes per p row;
 *   3. warpgroup g (warps 4g..4g+3) takes N columns 64g..64g+63 of the block: 4 k-steps of the hi
 *      tile, then 4 of the lo tile, into one fp32 accumulator (SS form, A K-major, B MN-major with
 *      imm-trans-b 1: tools/wgmma_probe.cu case ss_mn_<t>).
 * The accumulator fragment of warp 4g + q is v5's acc[8][4] of warp q's 16 P rows and group g's 64 N
 * columns, so the stores are v5's. Differences from v5 in the arithmetic: the same products (w∘x
 * split, B exact) summed in another order (per tile all hi products, then all lo), and all four
 * k-steps of a partial last tile run (the rows past the chunk are zero in both operands).
 * Applies (state_v6_applies) to 16-bit scans with x and B of type T in contiguous 16-byte rows and
 * N = 64 or 128, on an sm_90 device of a build with sm_90a code; SSMOPS_CUDA_SCAN_STATE=v6 selects
 * it where v5's state kernel would run, anything else keeps v5. */
#if SSMI_CUDA_WGMMA
struct s6_smem {
    int ah, al, b0, b1, x0, x1, total; /* byte offsets from the 1024-aligned base; total + pad */
    __host__ __device__ s6_smem(int katoms) {
        const int at = ssmi_wg::kAtomBytes;
        ah = 0;              /* (w∘x)ᵀ hi: 64 p x 64 tokens, one K-major atom */
        al = at;             /* ... lo                                        */
        b0 = 2 * at;         /* B tiles: 64 tokens x 64·katoms n, MN-major     */
        b1 = b0 + katoms * at;
        x0 = b1 + katoms * at; /* raw x tiles: 64 tokens x 64 p, rows of 128 bytes */
        x1 = x0 + at;
        total = x1 + at + 1024; /* + room to align the dynamic base to 1024 */
    }
};

/* KA: the N atoms of the block's B tile (N = 64·KA), so the wgmma chains unroll with constant
 * offsets. 3 blocks of 8 warps per SM, as v5 (≤ 80 registers, ~69 KB of shared memory). */
template <int MODE, int KA>
__global__ void __launch_bounds__(kV4Threads, SSMI_M2_STATE_MINB) fast_state_kernel_v6(const m2_fast_args A) {
#if SSMI_WG_HAVE
    typedef typename cfg<MODE>::T T;
    constexpr bool BF = MODE == M_BF16;
    __shared__ float dts[kScanQ], cums[kScanQ], tot[32];
    __shared__ __align__(16) float wts[kScanQ];
    extern __shared__ __align__(1024) unsigned char smem_s6[];
    /* the swizzle pattern is a function of address bits 4-9: align the base at run time */
    const unsigned  raw = smem_addr(smem_s6);
    unsigned char * sm = smem_s6 + (((raw + 1023u) & ~1023u) - raw);
    const unsigned  sb = smem_addr(sm);
    const s6_smem   L(KA);

    const unsigned  blk = blockIdx.x; /* 32-bit index arithmetic, as in v5 */
    const unsigned  nz = (unsigned)A.n_ptiles; /* one 128-column group: N ≤ 128 */
    const unsigned  whu = blk / nz;
    const int       z = (int)(blk - whu * nz);
    const int       w = (int)(whu / (unsigned)A.H), h = (int)(whu - (unsigned)w * (unsigned)A.H);
    const long long wh = whu;
    const int       p0 = z * kFT;
    const int       tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int       wg = warp >> 2;       /* warpgroup: N columns 64·wg ..                 */
    const int       wq = warp & 3;        /* the warp's 16 P rows within the tile           */
    const bool      active = wg < KA;     /* warpgroup-uniform (wgmma needs all 128 threads) */
    const m2_chunk  ch = A.chunks[w];
    const int       g = h / (A.H / A.G);
    const long long xb = ch.b * A.x.s[0] + h * A.x.s[2] + p0 * A.x.s[3];
    const long long bb = ch.b * A.b.s[0] + g * A.b.s[2];
    const T *       xsrc = (const T *)A.x.p + xb + ch.t0 * A.x.s[1];
    const T *       bsrc = (const T *)A.b.p + bb + ch.t0 * A.b.s[1];
    const int       ntiles = (ch.len + kFT - 1) / kFT;

    /* token tile 0's copies fly during the dt processing */
    v5_tile_vec<T>((T *)(sm + L.x0), kFT, xsrc, A.x.s[1], kFT, kFT >> 3, ch.len, A.P - p0);
    v6_tile<T>(sm + L.b0, KA, bsrc, A.b.s[1], kFT, KA * 8, ch.len, A.N);
    cp_async_commit();
    load_dt_first(A.r, ch, h, ch.len, dts, cums, tot); /* ends with a barrier */
    const float cl = cums[ch.len - 1];
    for (int i = tid; i < kScanQ; i += kV4Threads) wts[i] = i < ch.len ? expf(cl - cums[i]) * dts[i] : 0.0f;
    if (z == 0) {
        if (tid == 0) A.lastcum[wh] = cl;
        float * dd = A.dtc + wh * 2 * kScanQ;
        for (int i = tid; i < ch.len; i += kV4Threads) dd[i] = dts[i], dd[kScanQ + i] = cums[i];
    }

    /* this thread's part of the split pass: tokens 8·warp .. +7, p rows 2·lane and 2·lane + 1; the
     * two rows' stores are issued in the order that puts the 8 lanes of a quarter warp on 8
     * different 16-byte bank groups (row & 7 all different under the swizzle) */
    const int sw = (lane >> 2) & 1;
    const int rfirst = 2 * lane + sw, rsecond = 2 * lane + 1 - sw;
    const int off_first = ssmi_wg::swz_off(rfirst, 8 * warp), off_second = ssmi_wg::swz_off(rsecond, 8 * warp);

    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    for (int jt = 0; jt < ntiles; ++jt) {
        const int j0 = jt * kFT;
        if (jt + 1 < ntiles) {
            /* buffers (jt+1)&1 were last read by tile jt-1's split and products, both behind the
             * barrier that closed step jt-1 */
            const int k = (jt + 1) & 1;
            v5_tile_vec<T>((T *)(sm + (k ? L.x1 : L.x0)), kFT, xsrc + (long long)(j0 + kFT) * A.x.s[1], A.x.s[1],
                           kFT, kFT >> 3, ch.len - j0 - kFT, A.P - p0);
            v6_tile<T>(sm + (k ? L.b1 : L.b0), KA, bsrc + (long long)(j0 + kFT) * A.b.s[1], A.b.s[1], kFT, KA * 8,
                       ch.len - j0 - kFT, A.N);
        }
        cp_async_commit();            /* possibly empty: one group per step */
        cp_async_wait_group<1>();     /* tile jt of this thread is done */
        ssmi_wg::fence_proxy_async(); /* this thread's B copies and zero stores, seen by the async proxy */
        __syncthreads();              /* ... and everybody's (and wts, on the first step) */
        {
            /* the split pass: rows past the chunk are zero (zero-filled x, w = 0) */
            const T *    xr = (const T *)(sm + ((jt & 1) ? L.x1 : L.x0));
            const float4 wa = *reinterpret_cast<const float4 *>(wts + j0 + 8 * warp);
            const float4 wb = *reinterpret_cast<const float4 *>(wts + j0 + 8 * warp + 4);
            const float  wr[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
            float        v0[8], v1[8]; /* rows 2·lane, 2·lane + 1 over the 8 tokens */
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float2 f =
                    t2<MODE>::unpack(*reinterpret_cast<const uint32_t *>(xr + (8 * warp + e) * kFT + 2 * lane));
                v0[e] = f.x * wr[e], v1[e] = f.y * wr[e];
            }
            uint32_t h0[4], l0[4], h1[4], l1[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                split2<MODE>(v0[2 * e], v0[2 * e + 1], h0[e], l0[e]);
                split2<MODE>(v1[2 * e], v1[2 * e + 1], h1[e], l1[e]);
            }
            const uint4 h0v = make_uint4(h0[0], h0[1], h0[2], h0[3]), h1v = make_uint4(h1[0], h1[1], h1[2], h1[3]);
            const uint4 l0v = make_uint4(l0[0], l0[1], l0[2], l0[3]), l1v = make_uint4(l1[0], l1[1], l1[2], l1[3]);
            *reinterpret_cast<uint4 *>(sm + L.ah + off_first) = sw ? h1v : h0v;
            *reinterpret_cast<uint4 *>(sm + L.ah + off_second) = sw ? h0v : h1v;
            *reinterpret_cast<uint4 *>(sm + L.al + off_first) = sw ? l1v : l0v;
            *reinterpret_cast<uint4 *>(sm + L.al + off_second) = sw ? l0v : l1v;
        }
        ssmi_wg::fence_proxy_async(); /* the split tiles, seen by the async proxy */
        __syncthreads();
        if (active) {
            const unsigned bs = sb + (unsigned)((jt & 1) ? L.b1 : L.b0) + (unsigned)(wg * ssmi_wg::kAtomBytes);
            ssmi_wg::fence();
#pragma unroll
            for (int ks = 0; ks < 4; ++ks)
                ssmi_wg::mma_ss<BF, 1>(acc, ssmi_wg::desc_k(sb + L.ah + ks * 32), ssmi_wg::desc_mn(bs + ks * 2048));
            if (kFastSplit)
#pragma unroll
                for (int ks = 0; ks < 4; ++ks)
                    ssmi_wg::mma_ss<BF, 1>(acc, ssmi_wg::desc_k(sb + L.al + ks * 32),
                                           ssmi_wg::desc_mn(bs + ks * 2048));
            ssmi_wg::commit();
            ssmi_wg::wait<0>();
            ssmi_wg::keep(acc);
        }
        __syncthreads(); /* the next step rewrites the split tiles and, one step later, these buffers */
    }
    cp_async_wait_group<0>(); /* nothing is pending here (the last group is empty); for the record */
    if (!active) return;
    float * st = A.states + wh * A.P * A.N;
    const int wn = wg * 64, wp = wq * 16;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int p = p0 + wp + (lane >> 2) + half * 8;
        if (p >= A.P) continue;
        float * row = st + (long long)p * A.N;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const int n = wn + t * 8 + 2 * (lane & 3); /* < N: N = 64·KA, even */
            *reinterpret_cast<float2 *>(row + n) = make_float2(acc[t][2 * half], acc[t][2 * half + 1]);
        }
    }
#else
    (void)A; /* no sm_90a code in this pass: never launched (state_v6_applies) */
    __trap(); /* a wrong image choice fails loudly instead of leaving the outputs unwritten */
#endif
}
/* ---- the chained state kernel (state "chain": the state kernel and the pass in one) -------------
 * The scan's states in the default pipeline take two kernels and a round trip through memory:
 * fast_state_kernel_v6 writes each chunk's local state (fp32, W·H·P·N), state_pass_kernel_v5 reads
 * them back and writes the entering states as hi/lo planes: 113 + 57 µs at the shape of record, of
 * which the pass alone is 168 MB of traffic. state_chain_kernel runs one block per (sequence, head,
 * P tile, 64 N columns) that walks the sequence's chunks in order and keeps the running state in its
 * wgmma accumulator: at each chunk it writes the entering state's planes (what the pass wrote),
 * multiplies the accumulator by the chunk's decay exp(cum_last), and adds the chunk's products
 * (w∘x)ᵀ·B token tile by token tile. The local states are never stored.
 * Unlike the look-back of the fifth session (measured 266 µs against 113 + 58: one hop per chunk
 * through L2 and flags), a chain never waits on another block; its speed is the block's own
 * throughput, so it pays only for short chains on a full grid (scan_state_chain_applies).
 * Per token tile (64 tokens, one warpgroup of 128 threads):
 *   - x (64 tokens x 64 p) and B (64 tokens x 64 n) land by cp.async in a ring of kChainStages
 *     stages, kChainStages - 2 tiles ahead (a stage is refilled once the wgmma that read it is done);
 *   - the A operand, (w∘x)ᵀ of the warp's 16 p rows, is built in registers: ldmatrix.trans of the x
 *     tile (swizzled, conflict-free), times the token weights w_j = exp(cum_last − cum_j)·dt_j, split
 *     into rounded part and rounded remainder (the same products as v6), then 8 wgmma (hi, lo) with
 *     B from shared memory (MN-major). The fragments of two tiles alternate so that tile t+1's are
 *     built while tile t's products run; one barrier per tile.
 *   - the token weights and cum_last of every (chunk, head) come from chain_dt_kernel (v6's dt
 *     arithmetic: load_dt_first, expf(cum_last − cum_j)·dt_j), which also writes the output kernel's
 *     dt/cumsum tables; the block copies chunk k+1's weights (cp.async, with a tile's copies) during
 *     chunk k, so nothing in the chain waits on a dt load (the first version loaded and scanned dt
 *     inside the chain: 27% of its stall samples waited on those loads).
 * The products are v6's (the same weights, split and k-steps); results differ from v6 + pass only in
 * the order of the sums (the decay applied to the accumulator and the products added to it, where
 * the pass added the rounded local state). */
const int kChainThreads = 128;
const int kChainStages = 5; /* 5 x 16 KB: x and B of a tile; 2 blocks per SM */
struct chain_smem {
    int x0, b0, total; /* stage s: x at x0 + s·8 KB, B at b0 + s·8 KB; total + room to align */
    __host__ __device__ chain_smem() {
        x0 = 0;
        b0 = kChainStages * ssmi_wg::kAtomBytes;
        total = b0 + kChainStages * ssmi_wg::kAtomBytes + 1024;
    }
};

#if SSMI_WG_HAVE /* device helpers of the chain, only in the passes that compile its body */
/* A 64 x 64 tile of T into the swizzled layout by 128 threads (a warpgroup): element (r, c) from
 * src + r·srow + c; rows ≥ nr or columns ≥ nc zero-filled. Thread tid takes rows tid/8 + 16u
 * (u < 4) at column 8·(tid % 8): the same swizzled column chunk in every row (row & 7 is the same),
 * so the u-th piece is 2 KB after the first in shared memory and 16 rows after it in global memory. */
template <typename T>
__device__ __forceinline__ void chain_tile(unsigned char * dst, const T * src, long long srow, int nr, int nc) {
    const int       tw = (int)(threadIdx.x & 127); /* the thread in its warpgroup (chain2: one tile each) */
    const int       r0 = tw >> 3, c = (tw & 7) * 8;
    unsigned char * d = dst + ssmi_wg::swz_off(r0, c);
    const T *       g = src + r0 * srow + c;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        if (r0 + 16 * u < nr && c < nc)
            cp_async16(d + 2048 * u, g + 16 * u * srow);
        else
            *reinterpret_cast<uint4 *>(d + 2048 * u) = make_uint4(0u, 0u, 0u, 0u);
    }
}

/* The 4 k-steps' A fragments (hi, lo) of a token tile: (w∘x)ᵀ of the warp's 16 p rows from the
 * swizzled x tile at xs; w: the tile's 64 token weights. */
template <int MODE>
__device__ __forceinline__ void chain_frags(uint32_t (&hi)[4][4], uint32_t (&lo)[4][4], const unsigned char * xs,
                                            const float * w) {
    const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3, c = lane & 3;
    const int trow = (lane & 7) + (lane >> 4) * 8, pcol = 16 * wq + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        uint32_t r[4];
        ldsm4_t(r, xs + ssmi_wg::swz_off(16 * ks + trow, pcol));
        const float2 wa = *reinterpret_cast<const float2 *>(w + 16 * ks + 2 * c);
        const float2 wb = *reinterpret_cast<const float2 *>(w + 16 * ks + 8 + 2 * c);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = t2<MODE>::unpack(r[e]);
            const float2 ww = e < 2 ? wa : wb;
            split2<MODE>(f.x * ww.x, f.y * ww.y, hi[ks][e], lo[ks][e]);
        }
    }
}

/* The 8 products of a token tile into d: hi k-steps, then lo (v6's order), B MN-major at bs. */
template <bool BF>
__device__ __forceinline__ void chain_mma(float (&d)[8][4], const uint32_t (&hi)[4][4], const uint32_t (&lo)[4][4],
                                          unsigned bs) {
    ssmi_wg::fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(d, hi[ks], ssmi_wg::desc_mn(bs + ks * 2048));
    if (kFastSplit)
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) ssmi_wg::mma_rs<BF, 1>(d, lo[ks], ssmi_wg::desc_mn(bs + ks * 2048));
    ssmi_wg::commit();
}
__device__ __forceinline__ void chain_keep(uint32_t (&hi)[4][4], uint32_t (&lo)[4][4]) {
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) ssmi_wg::keep(hi[ks]), ssmi_wg::keep(lo[ks]);
}

/* The entering state of work chunk wk (this thread's part of the accumulator) as the hi/lo planes
 * that state_pass_kernel_v5 writes (W, H, 2, P, N). */
template <int MODE>
__device__ __forceinline__ void chain_store_planes(const m2_fast_args & A, long long wk, int h, int p0, int n0,
                                                   const float (&d)[8][4]) {
    typedef typename cfg<MODE>::T T;
    const int       lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3;
    const long long pn = (long long)A.P * A.N;
    T *             hi = (T *)A.split + (wk * A.H + h) * 2 * pn;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int p = p0 + 16 * wq + (lane >> 2) + half * 8;
        if (p >= A.P) continue;
        T * row = hi + (long long)p * A.N + n0 + 2 * (lane & 3);
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            uint32_t h2, l2;
            split2<MODE>(d[t][2 * half], d[t][2 * half + 1], h2, l2);
            *reinterpret_cast<uint32_t *>(row + t * 8) = h2;
            *reinterpret_cast<uint32_t *>(row + pn + t * 8) = l2;
        }
    }
}

/* This thread's part of a (P, N) state through a view (init) or strides (fin); rows p ≥ P skipped. */
__device__ __forceinline__ void chain_load_state(const m2_pass_args & S, int row, int h, int p0, int n0,
                                                 float (&d)[8][4]) {
    const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int p = p0 + 16 * wq + (lane >> 2) + half * 8;
#pragma unroll
        for (int t = 0; t < 8; ++t)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int n = n0 + t * 8 + 2 * (lane & 3) + e;
                d[t][2 * half + e] =
                    p < S.P ? ssmi_cu_ld(S.init.p, S.init.dtype,
                                         row * S.init.s[0] + h * S.init.s[1] + p * S.init.s[2] + n * S.init.s[3])
                            : 0.0f;
            }
    }
}
__device__ __forceinline__ void chain_store_fin(const m2_pass_args & S, int row, int h, int p0, int n0,
                                                const float (&d)[8][4]) {
    const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int p = p0 + 16 * wq + (lane >> 2) + half * 8;
        if (p >= S.P) continue;
#pragma unroll
        for (int t = 0; t < 8; ++t)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int n = n0 + t * 8 + 2 * (lane & 3) + e;
                ssmi_cu_st(S.fin, S.fin_dtype, row * S.fs[0] + h * S.fs[1] + p * S.fs[2] + n * S.fs[3],
                           d[t][2 * half + e]);
            }
    }
}
#endif

/* The dt tables of every (work chunk, head) for the chain, v6's arithmetic (load_dt_first, then the
 * token weights as v6's state kernel computes them): dtc and lastcum for the output kernel, and
 * A.cw: the kScanQ weights, cum_last and 3 zeros (kChainW floats, 16-byte pieces). */
__global__ void __launch_bounds__(kThreads) chain_dt_kernel(const m2_fast_args A) {
    __shared__ float dts[kScanQ], cums[kScanQ], tot[32];
    const unsigned whu = blockIdx.x;
    const int      w = (int)(whu / (unsigned)A.H), h = (int)(whu - (unsigned)w * (unsigned)A.H);
    const m2_chunk ch = A.chunks[w];
    load_dt_first(A.r, ch, h, ch.len, dts, cums, tot); /* ends with a barrier */
    const float cl = cums[ch.len - 1];
    float *     o = A.cw + (long long)whu * kChainW;
    float *     dd = A.dtc + (long long)whu * 2 * kScanQ;
    for (int i = threadIdx.x; i < kScanQ; i += kThreads) {
        o[i] = i < ch.len ? expf(cl - cums[i]) * dts[i] : 0.0f;
        if (i < ch.len) dd[i] = dts[i], dd[kScanQ + i] = cums[i];
    }
    if (threadIdx.x < 4) o[kScanQ + threadIdx.x] = threadIdx.x == 0 ? cl : 0.0f;
    if (threadIdx.x == 0) A.lastcum[whu] = cl;
}

#if SSMI_WG_HAVE /* device helpers of the chains, only in the passes that compile their bodies */
/* A chain block's place, from blockIdx.x: (sequence, head, P tile, N atom), the N atom fastest. */
struct chain_block {
    m2_seg sg;
    int    h, p0, n0;
};
__device__ __forceinline__ chain_block chain_block_of(const m2_fast_args & A, const m2_pass_args & S) {
    const unsigned ka = (unsigned)A.N >> 6, np = (unsigned)A.n_ptiles;
    unsigned       blk = blockIdx.x;
    chain_block    cb;
    cb.n0 = (int)(blk % ka) * 64;
    blk /= ka;
    cb.p0 = (int)(blk % np) * kFT;
    blk /= np;
    cb.h = (int)(blk % (unsigned)A.H);
    cb.sg = S.segs[blk / (unsigned)A.H];
    return cb;
}
/* The token stream of a chain block's sequence (sg.count > 0): its chunks are whole (kScanQ tokens)
 * but the last (plan_add), token tiles of kFT; x and B from the first token, and chunk 0's weights. */
template <typename T> struct chain_seq {
    int           last_len, seglen, tiles;
    const T *     xsrc;
    const T *     bsrc;
    const float * cwh;
};
template <typename T>
__device__ __forceinline__ chain_seq<T> chain_seq_of(const m2_fast_args & A, const chain_block & cb) {
    const m2_chunk c0 = A.chunks[cb.sg.first];
    const int      g = cb.h / (A.H / A.G);
    chain_seq<T>   q;
    q.last_len = A.chunks[cb.sg.first + cb.sg.count - 1].len;
    q.seglen = (cb.sg.count - 1) * kScanQ + q.last_len;
    q.tiles = (cb.sg.count - 1) * (kScanQ / kFT) + (q.last_len + kFT - 1) / kFT;
    q.xsrc = (const T *)A.x.p + c0.b * A.x.s[0] + cb.h * A.x.s[2] + cb.p0 * A.x.s[3] + c0.t0 * A.x.s[1];
    q.bsrc = (const T *)A.b.p + c0.b * A.b.s[0] + g * A.b.s[2] + cb.n0 + c0.t0 * A.b.s[1];
    q.cwh = A.cw + ((long long)cb.sg.first * A.H + cb.h) * kChainW;
    return q;
}
#endif

/* One block of 128 threads per (sequence, head, P tile, 64 N columns), blocks in that order with
 * the N atom fastest (the two atoms of a (head, P tile) read the same x tiles). S carries the
 * sequences, the initial and final states (the pass's arguments); A.split receives the planes;
 * A.cw holds chain_dt_kernel's weights. */
template <int MODE>
__global__ void __launch_bounds__(kChainThreads) state_chain_kernel(const m2_fast_args A, const m2_pass_args S) {
#if SSMI_WG_HAVE
    typedef typename cfg<MODE>::T T;
    constexpr bool BF = MODE == M_BF16;
    constexpr int  NS = kChainStages;
    __shared__ __align__(16) float wts[2][kChainW]; /* chunk k's weights and cum_last (parity k & 1) */
    extern __shared__ __align__(1024) unsigned char smem_chain[];
    /* the swizzle pattern is a function of address bits 4-9: align the base at run time */
    const unsigned  raw = smem_addr(smem_chain);
    unsigned char * sm = smem_chain + (((raw + 1023u) & ~1023u) - raw);
    const unsigned  sb = smem_addr(sm);
    const chain_smem L;

    const chain_block cb = chain_block_of(A, S);
    const m2_seg      sg = cb.sg;
    const int         h = cb.h, p0 = cb.p0, n0 = cb.n0, tid = threadIdx.x;
    float        acc[8][4];
    if (S.has_init && sg.init >= 0)
        chain_load_state(S, sg.init, h, p0, n0, acc);
    else
#pragma unroll
        for (int t = 0; t < 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    if (sg.count > 0) {
        const chain_seq<T> q = chain_seq_of<T>(A, cb);
        const int          last_len = q.last_len, seglen = q.seglen, T_ = q.tiles;
        const long long    xs1 = A.x.s[1], bs1 = A.b.s[1], cw_step = (long long)A.H * kChainW;
        const T *          xsrc = q.xsrc;
        const T *          bsrc = q.bsrc;
        const float *      cwh = q.cwh; /* chunk k's weights: + k·cw_step */
        int             st_next = 0; /* the stage of the next tile to copy */
        auto copy_w = [&](int k) { /* chunk k's weights into wts[k & 1], with the next copy group */
            if (tid < kChainW / 4) cp_async16(&wts[k & 1][4 * tid], cwh + k * cw_step + 4 * tid);
        };
        auto issue = [&](int u) { /* the copies of token tile u (one group, maybe empty) */
            if (u < T_) {
                const int rows = seglen - u * kFT;
                chain_tile<T>(sm + L.x0 + st_next * ssmi_wg::kAtomBytes, xsrc + (long long)u * kFT * xs1, xs1, rows,
                              A.P - p0);
                chain_tile<T>(sm + L.b0 + st_next * ssmi_wg::kAtomBytes, bsrc + (long long)u * kFT * bs1, bs1, rows,
                              A.N - n0);
            }
            st_next = st_next + 1 == NS ? 0 : st_next + 1;
            cp_async_commit();
        };

        /* chunk k begins: the accumulator holds its entering state (once the last products are in):
         * the planes, then the decay; chunk k + 1's weights are requested (their buffer's last
         * reader was chunk k − 1) */
        auto enter_chunk = [&](int k) {
            const float cl = wts[k & 1][kScanQ];
            ssmi_wg::wait<0>();
            ssmi_wg::keep(acc);
            chain_store_planes<MODE>(A, (long long)sg.first + k, h, p0, n0, acc);
            const float decay = expf(cl); /* the pass's factor */
#pragma unroll
            for (int q = 0; q < 8; ++q)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[q][e] *= decay;
            if (k + 1 < sg.count) copy_w(k + 1);
        };

        copy_w(0); /* with tile 0's copies */
        for (int u = 0; u < NS - 2; ++u) issue(u);
        cp_async_wait_group<NS - 3>(); /* chunk 0's weights */
        __syncthreads();
        enter_chunk(0);
        uint32_t fh0[4][4] = {}, fl0[4][4] = {}, fh1[4][4] = {}, fl1[4][4] = {};
        int      st = 0; /* the stage of tile t */
        for (int t = 0; t < T_; ++t) {
            const int k = t >> 2, j = t & 3;
            cp_async_wait_group<NS - 3>(); /* this thread's copies of tile t (and all before) */
            ssmi_wg::fence_proxy_async();
            __syncthreads(); /* everybody's; and everybody's wgmma of tile t − 2 is done */
            if (j == 0 && k > 0) enter_chunk(k); /* its weights came with tile 4k − 1's copies */
            issue(t + NS - 2); /* into the stage of tile t − 2, whose products are done */
            const unsigned char * xs = sm + L.x0 + st * ssmi_wg::kAtomBytes;
            const unsigned        bs = sb + (unsigned)(L.b0 + st * ssmi_wg::kAtomBytes);
            const float *         w = &wts[k & 1][j * kFT];
            st = st + 1 == NS ? 0 : st + 1;
            if ((t & 1) == 0) {
                chain_frags<MODE>(fh0, fl0, xs, w);
                chain_mma<BF>(acc, fh0, fl0, bs);
                ssmi_wg::wait<1>();
                chain_keep(fh1, fl1);
            } else {
                chain_frags<MODE>(fh1, fl1, xs, w);
                chain_mma<BF>(acc, fh1, fl1, bs);
                ssmi_wg::wait<1>();
                chain_keep(fh0, fl0);
            }
        }
        cp_async_wait_group<0>(); /* nothing is pending (the last groups are empty); for the record */
        ssmi_wg::wait<0>();
        ssmi_wg::keep(acc);
        chain_keep(fh0, fl0); /* the last tile's fragments were live up to here */
        chain_keep(fh1, fl1);
    }
    if (S.has_fin && sg.fin >= 0) chain_store_fin(S, sg.fin, h, p0, n0, acc);
#else
    (void)A, (void)S; /* no sm_90a code in this pass: never launched (scan_state_chain_applies) */
    __trap();
#endif
}

/* ---- chain2: two warpgroups per chain ------------------------------------------------------------
 * The chain (above) is latency-bound: one warpgroup per block, 1.2 blocks per SM at the shape of
 * record, so each scheduler runs one warp of it and every dependent instruction of the fragment build
 * waits (ncu: 7.8% occupancy, "selected" 24%, fixed-latency waits 22%). state_chain2_kernel gives each
 * chain two warpgroups that take alternate token tiles of a pair (tile 2s to warpgroup 0, 2s + 1 to
 * warpgroup 1) into two accumulators: the running state is their sum. The decay is linear, so each
 * warpgroup scales its own accumulator at a chunk's start; only the planes (and the final state) need
 * the sum: warpgroup 1 hands its accumulator over through shared memory (the x area of the pair slot
 * being refilled, 16 KB, in the fragment layout: thread i of warpgroup 1 writes what thread i of
 * warpgroup 0 reads) and warpgroup 0 stores the planes of acc0 + acc1.
 * Pipeline per pair step s: wait for pair s's copies, one barrier, at a chunk's first pair the
 * hand-over (two more barriers), the copies of pair s + 2 into the slot of pair s − 1 (each warpgroup
 * one tile), then each warpgroup its fragments and 8 wgmma, waited for at the step's end (wait<0>:
 * the slot of pair s − 1 is free at step s + 1, so the copies run two pairs ahead in 6 tile stages,
 * 96 KB: 2 blocks per SM). The products are v6's; the sums differ from the one-warpgroup chain only in
 * order (two partial accumulators). */
const int kChain2Threads = 256;
const int kChain2Stages = 6; /* 3 pair slots */
struct chain2_smem {
    int x0, b0, total; /* tile stage s: x at x0 + s·8 KB, B at b0 + s·8 KB */
    __host__ __device__ chain2_smem() {
        x0 = 0;
        b0 = kChain2Stages * ssmi_wg::kAtomBytes;
        total = b0 + kChain2Stages * ssmi_wg::kAtomBytes + 1024;
    }
};

/* (A form that waited for each warpgroup's products one pair later, its fragment build overlapping
 * its own wgmma and the copies one pair ahead, was measured in the seventh session: 299 µs against
 * 212 at the shape of record, slower at every shape; removed.) */
template <int MODE>
__global__ void __launch_bounds__(kChain2Threads, 2) state_chain2_kernel(const m2_fast_args A, const m2_pass_args S) {
#if SSMI_WG_HAVE
    constexpr int AHEAD = 2; /* pairs copied ahead */
    typedef typename cfg<MODE>::T T;
    constexpr bool BF = MODE == M_BF16;
    __shared__ __align__(16) float wts[2][kChainW]; /* chunk k's weights and cum_last (parity k & 1) */
    extern __shared__ __align__(1024) unsigned char smem_chain2[];
    const unsigned  raw = smem_addr(smem_chain2);
    unsigned char * sm = smem_chain2 + (((raw + 1023u) & ~1023u) - raw);
    const unsigned  sb = smem_addr(sm);
    const chain2_smem L;

    const chain_block cb = chain_block_of(A, S);
    const m2_seg      sg = cb.sg;
    const int         h = cb.h, p0 = cb.p0, n0 = cb.n0, tid = threadIdx.x, wg = tid >> 7, tw = tid & 127;
    float        acc[8][4]; /* warpgroup 0: the initial state's part; warpgroup 1: zero */
    if (wg == 0 && S.has_init && sg.init >= 0)
        chain_load_state(S, sg.init, h, p0, n0, acc);
    else
#pragma unroll
        for (int t = 0; t < 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    /* the state into warpgroup 0's accumulator: acc1 through the 16 KB at xc (fragment layout,
     * conflict-free: consecutive threads, consecutive words), added to acc0; acc1 then starts over
     * from zero (the decay is linear, so the sum may be formed at any chunk start) */
    auto hand_over = [&](float * xc) {
        if (wg == 1)
#pragma unroll
            for (int t = 0; t < 8; ++t)
#pragma unroll
                for (int e = 0; e < 4; ++e) xc[(t * 4 + e) * 128 + tw] = acc[t][e];
        __syncthreads();
        /* every thread redefines its accumulator (a select, not a branch: ptxas serialized a form of
         * this kernel's wgmma when only one warpgroup's accumulator was written here, C7515) */
#pragma unroll
        for (int t = 0; t < 8; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float other = xc[(t * 4 + e) * 128 + tw];
                acc[t][e] = wg == 0 ? acc[t][e] + other : 0.0f;
            }
    };
    if (sg.count > 0) {
        const chain_seq<T> q = chain_seq_of<T>(A, cb);
        const int          last_len = q.last_len, seglen = q.seglen, T_ = q.tiles, npairs = (T_ + 1) / 2;
        const long long    xs1 = A.x.s[1], bs1 = A.b.s[1], cw_step = (long long)A.H * kChainW;
        const T *          xsrc = q.xsrc;
        const T *          bsrc = q.bsrc;
        const float *      cwh = q.cwh; /* chunk k's weights: + k·cw_step */
        auto copy_w = [&](int k) { /* chunk k's weights into wts[k & 1], with the next copy group */
            if (tid < kChainW / 4) cp_async16(&wts[k & 1][4 * tid], cwh + k * cw_step + 4 * tid);
        };
        auto issue = [&](int q) { /* pair q's copies (tile 2q + wg by warpgroup wg; one group, maybe empty) */
            const int u = 2 * q + wg;
            if (u < T_) {
                const int st = (q % 3) * 2 + wg, rows = seglen - u * kFT;
                chain_tile<T>(sm + L.x0 + st * ssmi_wg::kAtomBytes, xsrc + (long long)u * kFT * xs1, xs1, rows,
                              A.P - p0);
                chain_tile<T>(sm + L.b0 + st * ssmi_wg::kAtomBytes, bsrc + (long long)u * kFT * bs1, bs1, rows,
                              A.N - n0);
            }
            cp_async_commit();
        };
        /* chunk k begins (its weights landed): the state into acc0 (xc: a free 16 KB), its planes,
         * acc0 times the decay (acc1 is zero), chunk k + 1's weights requested (their buffer's last
         * reader was chunk k − 1). Ends with a barrier: xc and the weights' buffer free again. */
        auto enter_chunk = [&](int k, float * xc) {
            hand_over(xc);
            if (wg == 0) chain_store_planes<MODE>(A, (long long)sg.first + k, h, p0, n0, acc);
            const float decay = expf(wts[k & 1][kScanQ]); /* the pass's factor */
#pragma unroll
            for (int q = 0; q < 8; ++q)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[q][e] *= decay;
            if (k + 1 < sg.count) copy_w(k + 1);
            __syncthreads();
        };

        copy_w(0); /* with pair 0's copies */
        for (int q = 0; q < AHEAD; ++q) issue(q);
        cp_async_wait_group<AHEAD - 1>(); /* pair 0 and chunk 0's weights */
        __syncthreads();
        enter_chunk(0, (float *)(sm + L.x0 + 2 * 2 * ssmi_wg::kAtomBytes)); /* slot 2: nothing copied there yet */
        uint32_t fh0[4][4] = {}, fl0[4][4] = {};
        for (int s2 = 0; s2 < npairs; ++s2) {
            cp_async_wait_group<AHEAD - 1>(); /* pair s2 (pair s2 + 1 may still fly) */
            ssmi_wg::fence_proxy_async();
            /* everybody's copies; every wgmma of pair s2 − 1 is done */
            __syncthreads();
            const int k = s2 >> 1; /* two pairs per whole chunk */
            /* pair s2 + AHEAD goes to the slot of pair s2 + AHEAD − 3, free now (its products are
             * done). A chunk's hand-over first uses the x area of slot (s2 + 2) % 3, the slot
             * refilled next */
            float * xc = (float *)(sm + L.x0 + ((s2 + 2) % 3) * 2 * ssmi_wg::kAtomBytes);
            if ((s2 & 1) == 0 && k > 0) enter_chunk(k, xc);
            issue(s2 + AHEAD);
            const int u = 2 * s2 + wg; /* this warpgroup's tile */
            if (u < T_) {
                const int             st = (s2 % 3) * 2 + wg;
                const unsigned char * xs = sm + L.x0 + st * ssmi_wg::kAtomBytes;
                const unsigned        bs = sb + (unsigned)(L.b0 + st * ssmi_wg::kAtomBytes);
                const float *         w = &wts[k & 1][(u & 3) * kFT];
                chain_frags<MODE>(fh0, fl0, xs, w);
                chain_mma<BF>(acc, fh0, fl0, bs);
                ssmi_wg::wait<0>();
                ssmi_wg::keep(acc);
                chain_keep(fh0, fl0);
            }
        }
        ssmi_wg::wait<0>();
        ssmi_wg::keep(acc);
        chain_keep(fh0, fl0); /* the last pair's fragments were live up to here */
        cp_async_wait_group<0>(); /* only empty groups are pending; the x area is rewritten below */
    }
    if (S.has_fin && sg.fin >= 0) { /* every thread reaches this (no early return above) */
        __syncthreads();
        hand_over((float *)(sm + L.x0));
        if (wg == 0) chain_store_fin(S, sg.fin, h, p0, n0, acc);
    }
#else
    (void)A, (void)S; /* no sm_90a code in this pass: never launched (scan_state_chain_applies) */
    __trap();
#endif
}
#endif /* SSMI_CUDA_WGMMA */

/* ---- host side ------------------------------------------------------------------------------ */

int compute_mode(int32_t dtype) {
    return dtype == SSM_DTYPE_F16 ? M_F16 : dtype == SSM_DTYPE_BF16 ? M_BF16 : M_F32;
}
int mode_tile(int mode) { return mode == M_F32 ? cfg<M_F32>::TILE : cfg<M_F16>::TILE; }

/* The host plan: work chunks and sequences. */
struct m2_plan {
    m2_chunk * chunks;
    m2_seg *   segs;
    long long  nchunks, nseg;
};

void plan_free(m2_plan * pl) {
    free(pl->chunks);
    free(pl->segs);
    memset(pl, 0, sizeof *pl);
}

int64_t idx_at(const ssm_tensor * t, int64_t i0, int64_t i1) {
    const int64_t off = t->ndim == 1 ? i0 * t->strides[0] : i0 * t->strides[0] + i1 * t->strides[1];
    return t->dtype == SSM_DTYPE_I64 ? ((const int64_t *)t->data)[off] : (int64_t)((const int32_t *)t->data)[off];
}

/* Appends a sequence of tokens [t0, t0 + len) of row b. */
void plan_add(m2_plan * pl, int64_t Q, int64_t b, int64_t t0, int64_t len, int init, int fin) {
    m2_seg * sg = &pl->segs[pl->nseg++];
    sg->first = (int)pl->nchunks;
    sg->count = (int)((len + Q - 1) / Q);
    sg->init = init;
    sg->fin = fin;
    for (int64_t k = 0; k < sg->count; ++k) {
        m2_chunk * c = &pl->chunks[pl->nchunks];
        memset(c, 0, sizeof *c);
        c->t0 = t0 + k * Q;
        c->b = (int)b;
        c->c = (int)pl->nchunks;
        c->len = (int)(len - k * Q < Q ? len - k * Q : Q);
        c->ilast = c->len - 1;
        c->j0 = 0;
        ++pl->nchunks;
    }
}

ssm_status plan_scan(ssm_context * ctx, const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a, m2_plan * pl) {
    static const char op[] = "mamba2_scan";
    const int64_t     Q = kScanQ, S = d->seqlen, B = d->batch;
    const int         has_init = ssmi_present(&a->initial_states);
    memset(pl, 0, sizeof *pl);
    /* Upper bounds: every sequence adds at most one partial chunk. */
    int64_t max_seg = d->nseq > 0 ? d->nseq : B;
    if (ssmi_present(&a->seq_idx)) max_seg = B * (S > 0 ? S : 1);
    const int64_t max_chunks = B * ((S + Q - 1) / Q) + max_seg;
    SSM_RETURN_IF(max_chunks > INT32_MAX / 2 || max_seg > INT32_MAX / 2, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: %lld work chunks exceed the CUDA backend's int32 chunk index", op, (long long)max_chunks);
    pl->chunks = (m2_chunk *)malloc(sizeof(m2_chunk) * (size_t)(max_chunks > 0 ? max_chunks : 1));
    pl->segs = (m2_seg *)malloc(sizeof(m2_seg) * (size_t)(max_seg > 0 ? max_seg : 1));
    if (pl->chunks == NULL || pl->segs == NULL) {
        plan_free(pl);
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the chunk plan", op);
    }
    if (d->nseq > 0) {
        for (int64_t s = 0; s < d->nseq; ++s) {
            const int64_t st = idx_at(&a->cu_seqlens, s, 0), en = idx_at(&a->cu_seqlens, s + 1, 0);
            plan_add(pl, Q, 0, st, en - st, has_init ? (int)s : -1, (int)s);
        }
    } else if (ssmi_present(&a->seq_idx)) {
        for (int64_t b = 0; b < B; ++b) {
            if (S == 0) {
                plan_add(pl, Q, b, 0, 0, has_init ? (int)b : -1, (int)b);
                continue;
            }
            int64_t t = 0;
            while (t < S) {
                const int64_t id = idx_at(&a->seq_idx, b, t);
                int64_t       e = t + 1;
                while (e < S && idx_at(&a->seq_idx, b, e) == id) ++e;
                const int init = (t == 0 && id == 0 && has_init) ? (int)b : -1;
                plan_add(pl, Q, b, t, e - t, init, e == S ? (int)b : -1);
                t = e;
            }
        }
    } else {
        for (int64_t b = 0; b < B; ++b) plan_add(pl, Q, b, 0, S, has_init ? (int)b : -1, (int)b);
    }
    return SSM_STATUS_OK;
}

/* Workspace layout of the scan: chunks | segs | lastcum (W,H) | dt and cumsum (W,H,2,kScanQ; the
 * fp16/bf16 path) | states (W,H,P,N) | split entering states (W,H,2,P,N of T; 16-bit) | the chain's
 * weights (W,H,kChainW; 16-bit). */
struct scan_ws {
    size_t chunks, segs, lastcum, dtc, states, split, cw, total;
};
/* 1: the 16-bit scan keeps the v5 output kernel's split entering states (state_pass_kernel_v5),
 * which needs 16-byte rows of N elements. */
int scan_splits_states(const ssm_mamba2_scan_args * a, const ssmi_mamba2_dims * d) {
    return compute_mode(a->x.dtype) != M_F32 && d->dstate % 8 == 0;
}
scan_ws scan_ws_layout(const ssmi_mamba2_dims * d, const m2_plan * pl, const ssm_mamba2_scan_args * a) {
    scan_ws l;
    size_t  o = 0;
    l.chunks = o; o += align128(sizeof(m2_chunk) * (size_t)pl->nchunks);
    l.segs = o; o += align128(sizeof(m2_seg) * (size_t)pl->nseg);
    l.lastcum = o; o += align128(sizeof(float) * (size_t)pl->nchunks * (size_t)d->nheads);
    l.dtc = o; o += align128(sizeof(float) * 2 * kScanQ * (size_t)pl->nchunks * (size_t)d->nheads);
    const size_t hpn = (size_t)d->nheads * (size_t)d->headdim * (size_t)d->dstate;
    l.states = o;
    o += align128(sizeof(float) * (size_t)pl->nchunks * hpn);
    l.split = o; /* two 16-bit planes: the bytes of the fp32 states again */
    if (scan_splits_states(a, d)) o += align128(sizeof(float) * (size_t)pl->nchunks * hpn);
    l.cw = o; /* the chain's weights (state_chain_kernel, which needs the split states) */
    if (scan_splits_states(a, d)) o += align128(sizeof(float) * kChainW * (size_t)pl->nchunks * (size_t)d->nheads);
    l.total = o;
    return l;
}

ssm_status check_limits(ssm_context * ctx, const char * op, const ssmi_mamba2_dims * d) {
    SSM_RETURN_IF(d->dstate > kMaxN, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: N=%lld is larger than the CUDA backend's limit of %d", op, (long long)d->dstate, kMaxN);
    SSM_RETURN_IF(d->nheads > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: H=%lld is larger than the CUDA backend's limit of 65535", op, (long long)d->nheads);
    SSM_RETURN_IF(d->headdim > INT32_MAX / 2 || d->headdim * d->dstate > INT32_MAX / 2, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: P·N=%lld is too large for the CUDA backend", op, (long long)(d->headdim * d->dstate));
    return SSM_STATUS_OK;
}

ssm_status check_pointers(ssm_context * ctx, const char * op, const ssm_tensor * const * ts, const char * const * names,
                          int n) {
    for (int i = 0; i < n; ++i) SSM_FORWARD_IF_ERROR(ssmi_cuda_check_pointer(ctx, op, names[i], ts[i]));
    return SSM_STATUS_OK;
}

template <int MODE> ssm_status launch_chunk_state(ssm_context * ctx, const char * op, const m2_state_args & A, long long W) {
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

ssm_status run_chunk_state(ssm_context * ctx, const char * op, int mode, const m2_state_args & A, long long W) {
    if (W == 0 || A.H == 0 || A.P == 0 || A.N == 0) return SSM_STATUS_OK;
    SSM_RETURN_IF((A.P + mode_tile(mode) - 1) / mode_tile(mode) > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: P=%d is too large for the CUDA backend", op, A.P);
    switch (mode) {
        case M_F16: return launch_chunk_state<M_F16>(ctx, op, A, W);
        case M_BF16: return launch_chunk_state<M_BF16>(ctx, op, A, W);
        default: return launch_chunk_state<M_F32>(ctx, op, A, W);
    }
}

template <int MODE> ssm_status launch_output(ssm_context * ctx, const char * op, const m2_out_args & A, long long W) {
    const out_smem<MODE> L(A.Np, A.Q);
    const int            TL = cfg<MODE>::TILE;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
        ctx, op, "cudaFuncSetAttribute",
        cudaFuncSetAttribute(output_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L.total)));
    const long long itiles = (A.Q + TL - 1) / TL;
    SSM_RETURN_IF(itiles * A.n_ptiles > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: Q=%d and P=%d need too many tiles for the CUDA backend", op, A.Q, A.P);
    const dim3 grid((unsigned)W, (unsigned)A.H, (unsigned)(itiles * A.n_ptiles));
    output_kernel<MODE><<<grid, kThreads, L.total, ssmi_cuda_stream(ctx)>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "output_kernel launch");
    return SSM_STATUS_OK;
}

ssm_status run_output(ssm_context * ctx, const char * op, int mode, const m2_out_args & A, long long W) {
    if (W == 0 || A.H == 0 || A.P == 0) return SSM_STATUS_OK;
    (void)mode; /* fp16/bf16 take fast_output_kernel */
    return launch_output<M_F32>(ctx, op, A, W);
}

m2_dt_raw dt_raw_of(const ssm_mamba2_params * p, const ssm_mamba2_scan_args * a) {
    m2_dt_raw r;
    memset(&r, 0, sizeof r);
    r.dt = ssmi_cu_view_of(&a->dt);
    r.a = ssmi_cu_view_of(&a->a);
    r.has_bias = ssmi_present(&a->dt_bias);
    if (r.has_bias) r.bias = ssmi_cu_view_of(&a->dt_bias);
    r.softplus = p->dt_softplus != 0;
    r.lo = (float)p->dt_limit_lo;
    r.hi = (float)p->dt_limit_hi;
    return r;
}


m2_fast_args fast_args_of(const ssm_mamba2_params * p, const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a,
                          const m2_chunk * dchunks, float * states, float * lastcum) {
    m2_fast_args f;
    memset(&f, 0, sizeof f);
    const int32_t T = a->x.dtype;
    f.chunks = dchunks;
    f.H = (int)d->nheads, f.G = (int)d->ngroups, f.P = (int)d->headdim, f.N = (int)d->dstate;
    f.Np = round16(f.N);
    f.n_ptiles = (f.P + kFT - 1) / kFT;
    f.n_ntiles = (f.N + kFT - 1) / kFT;
    f.n_itiles = kScanQ / kFT;
    f.r = dt_raw_of(p, a);
    f.x = ssmi_cu_view_of(&a->x);
    f.b = ssmi_cu_view_of(&a->b);
    f.c = ssmi_cu_view_of(&a->c);
    f.vx = ssmi_cu_vec_rows(&a->x, T, d->headdim);
    f.vb = ssmi_cu_vec_rows(&a->b, T, d->dstate);
    f.vc = ssmi_cu_vec_rows(&a->c, T, d->dstate);
    f.has_d = ssmi_present(&a->d);
    if (f.has_d) {
        f.d = ssmi_cu_view_of(&a->d);
        f.d_2d = a->d.ndim == 2;
    }
    f.has_z = ssmi_present(&a->z);
    if (f.has_z) {
        f.z = ssmi_cu_view_of(&a->z);
        f.vz = a->z.dtype == T && ssmi_cu_vec_pairs(&a->z, d->headdim);
        f.vz16 = ssmi_cu_vec_rows(&a->z, T, d->headdim);
    }
    f.states = states;
    f.lastcum = lastcum;
    f.out = a->out.data;
    f.out_dtype = a->out.dtype;
    f.vout = (a->out.dtype == T || a->out.dtype == SSM_DTYPE_F32) && ssmi_cu_vec_pairs(&a->out, d->headdim);
    for (int i = 0; i < 4; ++i) f.os[i] = a->out.strides[i];
    return f;
}

template <int MODE> ssm_status launch_fast(ssm_context * ctx, const char * op, const m2_fast_args & A, long long W,
                                           bool output) {
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const long long    nz = output ? (long long)A.n_itiles * A.n_ptiles : (long long)A.n_ptiles * A.n_ntiles;
    const long long    blocks = W * A.H * nz;
    SSM_RETURN_IF(blocks > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED, "%s: %lld blocks exceed the CUDA backend's grid limit",
                  op, blocks);
    if (!output) {
        fast_state_kernel<MODE><<<(unsigned)blocks, kFastThreads, 0, s>>>(A);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "fast_state_kernel launch");
        return SSM_STATUS_OK;
    }
    const fast_out_smem<MODE> L(A.Np);
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
        ctx, op, "cudaFuncSetAttribute",
        cudaFuncSetAttribute(fast_output_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L.total)));
    fast_output_kernel<MODE><<<(unsigned)blocks, kFastThreads, L.total, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "fast_output_kernel launch");
    return SSM_STATUS_OK;
}

/* v5: fast_state_kernel_v5 where B is of type T (else fast_state_kernel_v4), or
 * fast_output_kernel_v5. */
template <int MODE> ssm_status launch_fast_v5(ssm_context * ctx, const char * op, const m2_fast_args & A, long long W,
                                              bool output) {
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const long long    nz = output ? (long long)kV4ITiles * A.n_ptiles : (long long)A.n_ptiles * A.n_ntiles;
    const long long    blocks = W * A.H * nz;
    SSM_RETURN_IF(blocks > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED, "%s: %lld blocks exceed the CUDA backend's grid limit",
                  op, blocks);
    const bool b_is_t = A.b.dtype == (MODE == M_BF16 ? SSM_DTYPE_BF16 : SSM_DTYPE_F16);
    if (!output && b_is_t) {
        typedef typename cfg<MODE>::T T;
        const long long ngrp = (A.N + kS5Cols - 1) / kS5Cols;
        const long long blocks5 = W * A.H * A.n_ptiles * ngrp;
        SSM_RETURN_IF(blocks5 > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED,
                      "%s: %lld blocks exceed the CUDA backend's grid limit", op, blocks5);
        const s5_smem L5(sizeof(T));
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                                              cudaFuncSetAttribute(fast_state_kernel_v5<MODE>,
                                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                                   (int)L5.total)));
        fast_state_kernel_v5<MODE><<<(unsigned)blocks5, kV4Threads, L5.total, s>>>(A);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "fast_state_kernel_v5 launch");
        return SSM_STATUS_OK;
    }
    if (!output) {
        fast_state_kernel_v4<MODE><<<(unsigned)blocks, kFastThreads, 0, s>>>(A);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "fast_state_kernel_v4 launch");
        return SSM_STATUS_OK;
    }
    const v4_out_smem<MODE> L(A.Np);
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                                          cudaFuncSetAttribute(fast_output_kernel_v5<MODE>,
                                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                               (int)L.total)));
    fast_output_kernel_v5<MODE><<<(unsigned)blocks, kV4Threads, L.total, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "fast_output_kernel_v5 launch");
    return SSM_STATUS_OK;
}

#if SSMI_CUDA_WGMMA
/* One launch of a wgmma kernel of the scan: `blocks` blocks of kV4Threads (checked against the grid
 * limit) with smem bytes of dynamic shared memory (opted in), on the context's stream. */
ssm_status launch_wg(ssm_context * ctx, const char * op, void (*kernel)(const m2_fast_args), const m2_fast_args & A,
                     long long blocks, int smem, const char * what) {
    SSM_RETURN_IF(blocks > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: %lld blocks exceed the CUDA backend's grid limit", op, blocks);
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                         cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)));
    kernel<<<(unsigned)blocks, kV4Threads, (size_t)smem, ssmi_cuda_stream(ctx)>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, what);
    return SSM_STATUS_OK;
}

/* fast_output_kernel_v6 on v5's grid (the caller checked scan_v6_applies). */
template <int MODE>
ssm_status launch_fast_v6(ssm_context * ctx, const char * op, const m2_fast_args & A, long long W) {
    const v6_out_smem L(A.N >> 6);
    return launch_wg(ctx, op, A.N == 128 ? fast_output_kernel_v6<MODE, 2> : fast_output_kernel_v6<MODE, 1>, A,
                     W * A.H * (long long)kV4ITiles * A.n_ptiles, (int)L.total, "fast_output_kernel_v6 launch");
}

/* fast_state_kernel_v6: one block per (work chunk, head, P tile) (the caller checked
 * state_v6_applies). */
template <int MODE>
ssm_status launch_state_v6(ssm_context * ctx, const char * op, const m2_fast_args & A, long long W) {
    const s6_smem L(A.N >> 6);
    return launch_wg(ctx, op, A.N == 128 ? fast_state_kernel_v6<MODE, 2> : fast_state_kernel_v6<MODE, 1>, A,
                     W * A.H * (long long)A.n_ptiles, (int)L.total, "fast_state_kernel_v6 launch");
}

/* fast_output_kernel_v7 on v5's grid (the caller checked scan_v7_applies). */
template <int MODE>
ssm_status launch_fast_v7(ssm_context * ctx, const char * op, const m2_fast_args & A, long long W) {
    const v7_out_smem L(A.N >> 6);
    return launch_wg(ctx, op, A.N == 128 ? fast_output_kernel_v7<MODE, 2> : fast_output_kernel_v7<MODE, 1>, A,
                     W * A.H * (long long)kV4ITiles * A.n_ptiles, (int)L.total, "fast_output_kernel_v7 launch");
}
#endif

/* ---- state kernel version of the scan (v5 / v6 / chain) -------------------------------------------
 * fast_state_kernel_v6 (default since its first H200 run, 2026-11-30: every test case, sanitizers
 * clean, 130 -> 113 us at the shape of record) runs where v5's state kernel would run
 * (SSMOPS_CUDA_SCAN_KERNEL v5 or v6, the default) and state_v6_applies; SSMOPS_CUDA_SCAN_STATE=v5
 * (or 5) keeps v5's. The chains (state_chain_kernel or state_chain2_kernel in place of the state
 * kernel and the pass) run where scan_state_chain_applies chooses them, always under
 * SSMOPS_CUDA_SCAN_STATE=chain / chain2 (where they can run), never under =v6. Independent of the
 * output kernel; read on every call. Returns 5, 6 (v6, no chain), 8 (the one-warpgroup chain
 * forced), 9 (the two-warpgroup chain forced) or 0 (the default). */
int scan_state_version() {
    const char * e = getenv("SSMOPS_CUDA_SCAN_STATE");
    if (e != NULL && (strcmp(e, "v5") == 0 || strcmp(e, "5") == 0)) return 5;
    if (e != NULL && (strcmp(e, "v6") == 0 || strcmp(e, "6") == 0)) return 6;
    if (e != NULL && strcmp(e, "chain") == 0) return 8; /* state_chain_kernel where it applies */
    if (e != NULL && strcmp(e, "chain2") == 0) return 9; /* state_chain2_kernel where it applies */
    return 0;
}


/* *ok = 1 when fast_state_kernel_v6 can run this scan: a build with sm_90a code, an sm_90 device,
 * x and B of the scan's 16-bit type in contiguous 16-byte rows, N = 64 or 128 (whole swizzle atoms,
 * one block per P tile), its shared memory within the opt-in limit. */
ssm_status state_v6_applies(ssm_context * ctx, const char * op, const m2_fast_args & A, int * ok) {
    *ok = 0;
#if SSMI_CUDA_WGMMA
    if (!(A.vx && A.vb && (A.N == 64 || A.N == 128) && A.Np == A.N)) return SSM_STATUS_OK;
    ssmi_cuda_props dp;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_current_props(ctx, op, &dp));
    const size_t need = (size_t)s6_smem(A.N >> 6).total + sizeof(float) * 4 * kScanQ; /* + static (rounded up) */
    *ok = dp.major == 9 && dp.minor == 0 && need <= (size_t)dp.smem_optin;
#else
    (void)ctx, (void)op, (void)A;
#endif
    return SSM_STATUS_OK;
}

#if SSMI_CUDA_WGMMA
/* *form = 1 (state_chain_kernel) or 2 (state_chain2_kernel) when a chain replaces the state kernel
 * and the pass, else 0. A chain can run where v6's state kernel can (state_v6_applies) and the
 * output kernel reads the split entering states (A.split); forced (SSMOPS_CUDA_SCAN_STATE=chain or
 * chain2: want = 1 or 2) it runs wherever it can. By default (want = 0) the rule follows what the
 * H200 measured (bf16, seventh session, ms):
 *   - a chain is one block of indivisible serial work, and a second chain on an SM costs 1.56× one
 *     (S = 8192: 131 µs at 128 blocks, 201 at 160, 208 at 264), so a chain pays where the grid's
 *     last wave of chains is nearly full: k = blocks / SMs ≥ 1.5 and k / ⌈k⌉ ≥ kChainBalance;
 *   - or where the chains are short (≤ kChainAutoChunks chunks) on a grid of a block per SM or more
 *     (the sixth session's rule);
 *   - the two-warpgroup form from kChain2PerSm chains per SM: it is 3% faster at B=4 S=4096 and 1-2%
 *     slower at the other shapes with k ≥ 3, the smaller worst case of the two choices.
 *   shape (H=80 N=128 unless given)   k     v6 + pass  chain   chain2  chosen
 *   B=1 S=8192                        1.21  0.495      0.533   0.546   v6 + pass
 *   B=2 S=8192                        2.42  0.955      1.040   –       v6 + pass (balance 0.81)
 *   B=1 S=8192 H=64                   0.97  0.397      0.400   –       v6 + pass
 *   B=2 S=4096 H=64                   1.94  0.402      0.375   0.382   chain
 *   B=8 S=2048 H=32 N=64              1.94  0.316      0.282   0.287   chain
 *   B=3 S=8192                        3.64  1.415      1.341   1.359   chain2
 *   B=4 S=4096                        4.85  0.957      0.935   0.910   chain2
 *   B=16 S=1024 H=64 N=64             7.76  0.611      0.550   0.561   chain2
 *   B=8 S=4096                        9.70  1.881      1.758   1.779   chain2 */
const int    kChainAutoChunks = 8;
const double kChainBalance = 0.85;
const double kChain2PerSm = 3.0;
ssm_status scan_state_chain_applies(ssm_context * ctx, const char * op, const m2_fast_args & A, const m2_plan * pl,
                                    int want, int * form) {
    *form = 0;
    const long long nseg = pl->nseg;
    if (A.split == NULL || A.cw == NULL || nseg <= 0) return SSM_STATUS_OK;
    int longest = 0;
    for (long long i = 0; i < nseg; ++i) longest = pl->segs[i].count > longest ? pl->segs[i].count : longest;
    int v6 = 0;
    SSM_FORWARD_IF_ERROR(state_v6_applies(ctx, op, A, &v6));
    if (!v6) return SSM_STATUS_OK;
    ssmi_cuda_props dp;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_current_props(ctx, op, &dp));
    const long long blocks = nseg * A.H * A.n_ptiles * (A.N >> 6);
    const size_t    need = (size_t)chain2_smem().total + sizeof(float) * 2 * kChainW; /* ≥ the chain's */
    if (need > (size_t)dp.smem_optin || blocks > INT32_MAX || dp.sms <= 0) return SSM_STATUS_OK;
    if (want != 0) {
        *form = want;
        return SSM_STATUS_OK;
    }
    const double k = (double)blocks / dp.sms, waves = (double)((blocks + dp.sms - 1) / dp.sms);
    const bool   balanced = k >= 1.5 && k / waves >= kChainBalance;
    const bool   short_chains = longest <= kChainAutoChunks && blocks >= dp.sms;
    if (balanced || short_chains) *form = k >= kChain2PerSm ? 2 : 1;
    return SSM_STATUS_OK;
}

/* chain_dt_kernel (one block per (work chunk, head)), then state_chain_kernel (form 1) or
 * state_chain2_kernel (form 2): one block per (sequence, head, P tile, N atom). */
template <int MODE>
ssm_status launch_state_chain(ssm_context * ctx, const char * op, const m2_fast_args & A, const m2_pass_args & S,
                              long long W, long long nseg, int form) {
    const bool two = form == 2;
    void (*kernel)(const m2_fast_args, const m2_pass_args) = two ? state_chain2_kernel<MODE> : state_chain_kernel<MODE>;
    const int smem = two ? chain2_smem().total : chain_smem().total;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                                          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)));
    const long long wh = W * A.H, blocks = nseg * A.H * A.n_ptiles * (A.N >> 6);
    SSM_RETURN_IF(wh > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED, "%s: %lld blocks exceed the CUDA backend's grid limit",
                  op, wh);
    chain_dt_kernel<<<(unsigned)wh, kThreads, 0, ssmi_cuda_stream(ctx)>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "chain_dt_kernel launch");
    kernel<<<(unsigned)blocks, two ? kChain2Threads : kChainThreads, (size_t)smem, ssmi_cuda_stream(ctx)>>>(A, S);
    SSMI_CU_CHECK_LAUNCH(ctx, op, two ? "state_chain2_kernel launch" : "state_chain_kernel launch");
    return SSM_STATUS_OK;
}
#endif

/* version: 3, 5, 6 or 7 (the tensor-core kernels of that version; v6 and v7 = v5's state kernel and
 * pass with the v6 / v7 output kernel, only where scan_v6_applies / scan_v7_applies said so). */
ssm_status run_fast(ssm_context * ctx, const char * op, int mode, const m2_fast_args & A, long long W, bool output,
                    int version) {
    if (W == 0 || A.H == 0 || A.P == 0 || (!output && A.N == 0)) return SSM_STATUS_OK;
#if SSMI_CUDA_WGMMA
    if (version == 6 && output)
        return mode == M_F16 ? launch_fast_v6<M_F16>(ctx, op, A, W) : launch_fast_v6<M_BF16>(ctx, op, A, W);
    if (version == 7 && output) /* v7: v5's state kernel and pass with the v7 output kernel */
        return mode == M_F16 ? launch_fast_v7<M_F16>(ctx, op, A, W) : launch_fast_v7<M_BF16>(ctx, op, A, W);
#endif
    if (version >= 5)
        return mode == M_F16 ? launch_fast_v5<M_F16>(ctx, op, A, W, output)
                             : launch_fast_v5<M_BF16>(ctx, op, A, W, output);
    return mode == M_F16 ? launch_fast<M_F16>(ctx, op, A, W, output) : launch_fast<M_BF16>(ctx, op, A, W, output);
}

/* ---- kernel version of the scan (v3 / v5 / v6 / v7) -----------------------------------------------
 * A diagnostic knob, like the other CUDA families': SSMOPS_CUDA_SCAN_KERNEL=v3, v5 or v6 selects
 * those kernels, anything else (or unset) v7; read on every call (getenv is cheap next to a scan).
 * v6 (the wgmma output kernel) and v7 (v6 with the next tile's scores in flight, the factored
 * off-diagonal decay and constant-stride copies) run only where scan_v6_applies / scan_v7_applies;
 * elsewhere v7 means v6's rule, and v6 means v5. Defaults after their H200 runs of 2026-11-30
 * (every test case, memcheck/racecheck clean): v6 0.609 -> 0.543 ms, v7 0.524 -> 0.494 ms at the
 * shape of record. (v4, v3's arithmetic with overlapped loads, was removed the same day.) */
int scan_kernel_version() {
    const char * e = getenv("SSMOPS_CUDA_SCAN_KERNEL");
    if (e != NULL && (strcmp(e, "v3") == 0 || strcmp(e, "3") == 0)) return 3;
    if (e != NULL && (strcmp(e, "v5") == 0 || strcmp(e, "5") == 0)) return 5;
    if (e != NULL && (strcmp(e, "v6") == 0 || strcmp(e, "6") == 0)) return 6;
    return 7;
}

/* *ok = 1 when fast_output_kernel_v6 can run this scan: a build with sm_90a code, an sm_90 device,
 * and the layouts it assumes (16-bit C, B, x of the scan's type in contiguous 16-byte rows; N = 64
 * or 128, so Np = N and whole swizzle atoms; the split entering states; out in pairs; z, if any,
 * in 16-byte rows) with its shared memory within the opt-in limit. */
ssm_status scan_v6_applies(ssm_context * ctx, const char * op, const m2_fast_args & A, int * ok) {
    *ok = 0;
#if SSMI_CUDA_WGMMA
    if (!(A.vc && A.vb && A.vx && A.N % 64 == 0 && A.N <= 128 && A.Np == A.N && A.split != NULL && A.vout &&
          (!A.has_z || A.vz16)))
        return SSM_STATUS_OK;
    ssmi_cuda_props dp;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_current_props(ctx, op, &dp));
    const size_t need = (size_t)v6_out_smem(A.N >> 6).total + sizeof(float) * (2 * kScanQ + kFT);
    *ok = dp.major == 9 && dp.minor == 0 && need <= (size_t)dp.smem_optin;
#else
    (void)ctx, (void)op, (void)A;
#endif
    return SSM_STATUS_OK;
}

/* *ok = 1 when fast_output_kernel_v7 can run this scan: where v6 can (the same layouts) and its
 * shared memory (three x buffers and the column-weight tables more than v6) fits. */
ssm_status scan_v7_applies(ssm_context * ctx, const char * op, const m2_fast_args & A, int * ok) {
    SSM_FORWARD_IF_ERROR(scan_v6_applies(ctx, op, A, ok));
#if SSMI_CUDA_WGMMA
    if (!*ok) return SSM_STATUS_OK;
    ssmi_cuda_props dp;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_current_props(ctx, op, &dp));
    const size_t need = (size_t)v7_out_smem(A.N >> 6).total + sizeof(float) * (4 * kScanQ + kFT + kV4Rows);
    *ok = need <= (size_t)dp.smem_optin;
#endif
    return SSM_STATUS_OK;
}

/* *fits = 1 when fast_output_kernel_v5's shared memory (dynamic + static) fits the current
 * device's per-block opt-in limit; otherwise the scan keeps the v3 output kernel. */
ssm_status v5_output_fits(ssm_context * ctx, const char * op, int mode, int Np, int * fits) {
    ssmi_cuda_props dp;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_current_props(ctx, op, &dp));
    const size_t dyn = mode == M_F16 ? v4_out_smem<M_F16>(Np).total : v4_out_smem<M_BF16>(Np).total;
    *fits = dyn + sizeof(float) * (2 * kScanQ + kFT) <= (size_t)dp.smem_optin; /* + v5's D row */
    return SSM_STATUS_OK;
}

/* The three kernels on a prepared workspace. */
ssm_status scan_launch(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                       const ssm_mamba2_scan_args * a, const m2_plan * pl, unsigned char * ws) {
    static const char  op[] = "mamba2_scan";
    const scan_ws      l = scan_ws_layout(d, pl, a);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    m2_chunk *         dchunks = (m2_chunk *)(ws + l.chunks);
    m2_seg *           dsegs = (m2_seg *)(ws + l.segs);
    float *            lastcum = (float *)(ws + l.lastcum);
    float *            states = (float *)(ws + l.states);
    /* Pageable sources: cudaMemcpyAsync returns once they are staged, so the plan may be freed. */
    if (pl->nchunks > 0)
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (chunk plan)",
                                              cudaMemcpyAsync(dchunks, pl->chunks, sizeof(m2_chunk) * pl->nchunks,
                                                              cudaMemcpyHostToDevice, s)));
    if (pl->nseg > 0)
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
            ctx, op, "cudaMemcpyAsync (sequence plan)",
            cudaMemcpyAsync(dsegs, pl->segs, sizeof(m2_seg) * pl->nseg, cudaMemcpyHostToDevice, s)));
    const int mode = compute_mode(a->x.dtype);
    const int Np = round16((int)d->dstate);

    m2_state_args sa;
    memset(&sa, 0, sizeof sa);
    sa.chunks = dchunks;
    sa.H = (int)d->nheads, sa.G = (int)d->ngroups, sa.P = (int)d->headdim, sa.N = (int)d->dstate, sa.Np = Np;
    sa.Q = kScanQ;
    sa.x = ssmi_cu_view_of(&a->x);
    sa.b = ssmi_cu_view_of(&a->b);
    sa.raw = 1;
    sa.r = dt_raw_of(p, a);
    sa.states = states;
    sa.st_dtype = SSM_DTYPE_F32;
    sa.ss[0] = 0;
    sa.ss[1] = (long long)d->nheads * d->headdim * d->dstate;
    sa.ss[2] = (long long)d->headdim * d->dstate;
    sa.ss[3] = d->dstate;
    sa.ss[4] = 1;
    sa.lastcum = lastcum;
    /* v4 (default) or v3 kernels; v4's output kernel only where its shared memory fits (else v3's,
     * which gives the same bytes) */
    const int version = scan_kernel_version();
    int       out_version = version;
    m2_fast_args fa;
    memset(&fa, 0, sizeof fa);
    int chain = 0; /* instead of the state kernel and the pass: 1 state_chain_kernel, 2 state_chain2_kernel */
    if (mode != M_F32) {
        if (version >= 5) {
            int fits = 0;
            SSM_FORWARD_IF_ERROR(v5_output_fits(ctx, op, mode, Np, &fits));
            if (!fits) out_version = 3;
        }
        fa = fast_args_of(p, d, a, dchunks, states, lastcum);
        fa.dtc = (float *)(ws + l.dtc);
        if (scan_splits_states(a, d)) fa.cw = (float *)(ws + l.cw);
        /* v5's and v6's output kernels read the entering states split by state_pass_kernel_v5 */
        if (out_version >= 5 && scan_splits_states(a, d)) fa.split = ws + l.split;
        if (out_version == 7) {
            int ok7 = 0;
            SSM_FORWARD_IF_ERROR(scan_v7_applies(ctx, op, fa, &ok7));
            if (!ok7) out_version = 6; /* v6's rule, then v5 */
        }
        if (out_version == 6) {
            int ok6 = 0;
            SSM_FORWARD_IF_ERROR(scan_v6_applies(ctx, op, fa, &ok6));
            if (!ok6) out_version = 5;
        }
        const int state_version = scan_state_version();
        int       state6 = 0; /* v6's state kernel replaces v5's (unless SSMOPS_CUDA_SCAN_STATE=v5) */
        if (version >= 5 && state_version != 5) SSM_FORWARD_IF_ERROR(state_v6_applies(ctx, op, fa, &state6));
#if SSMI_CUDA_WGMMA
        /* the chain replaces the state kernel and the pass (launched in the pass's place) */
        if (version >= 5 && (state_version == 0 || state_version >= 8) && fa.H > 0 && fa.P > 0)
            SSM_FORWARD_IF_ERROR(scan_state_chain_applies(ctx, op, fa, pl, state_version >= 8 ? state_version - 7 : 0,
                                                          &chain));
        if (state6 && !chain && pl->nchunks > 0 && fa.H > 0 && fa.P > 0)
            SSM_FORWARD_IF_ERROR(mode == M_F16 ? launch_state_v6<M_F16>(ctx, op, fa, pl->nchunks)
                                               : launch_state_v6<M_BF16>(ctx, op, fa, pl->nchunks));
        else
#endif
            if (!chain)
            SSM_FORWARD_IF_ERROR(run_fast(ctx, op, mode, fa, pl->nchunks, false, version));
    } else {
        SSM_FORWARD_IF_ERROR(run_chunk_state(ctx, op, mode, sa, pl->nchunks));
    }

    m2_pass_args pa;
    memset(&pa, 0, sizeof pa);
    pa.segs = dsegs;
    pa.lastcum = lastcum;
    pa.states = states;
    pa.H = (int)d->nheads, pa.P = (int)d->headdim, pa.N = (int)d->dstate;
    pa.has_init = ssmi_present(&a->initial_states);
    if (pa.has_init) pa.init = ssmi_cu_view_of(&a->initial_states);
    pa.has_fin = ssmi_present(&a->final_states);
    if (pa.has_fin) {
        pa.fin = a->final_states.data;
        pa.fin_dtype = a->final_states.dtype;
        for (int i = 0; i < 4; ++i) pa.fs[i] = a->final_states.strides[i];
    }
    const long long hpn = (long long)d->nheads * d->headdim * d->dstate;
    if (pl->nseg > 0 && hpn > 0) {
        SSM_RETURN_IF(pl->nseg > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                      "%s: %lld sequences exceed the CUDA backend's limit of 65535", op, pl->nseg);
        const dim3 grid((unsigned)((hpn + kThreads - 1) / kThreads), (unsigned)pl->nseg);
        const dim3 grid5((unsigned)((hpn / kPassVec + kThreads - 1) / kThreads), (unsigned)pl->nseg);
        pa.split = (void *)fa.split;
#if SSMI_CUDA_WGMMA
        if (chain)
            SSM_FORWARD_IF_ERROR(mode == M_F16 ? launch_state_chain<M_F16>(ctx, op, fa, pa, pl->nchunks, pl->nseg, chain)
                                               : launch_state_chain<M_BF16>(ctx, op, fa, pa, pl->nchunks, pl->nseg, chain));
        else
#endif
        if (pa.split != NULL && mode == M_F16)
            state_pass_kernel_v5<M_F16><<<grid5, kThreads, 0, s>>>(pa);
        else if (pa.split != NULL)
            state_pass_kernel_v5<M_BF16><<<grid5, kThreads, 0, s>>>(pa);
        else if (version >= 5)
            state_pass_kernel_v4<<<grid, kThreads, 0, s>>>(pa);
        else
            state_pass_kernel<<<grid, kThreads, 0, s>>>(pa);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "state_pass_kernel launch");
    }

    m2_out_args oa;
    memset(&oa, 0, sizeof oa);
    oa.chunks = dchunks;
    oa.H = sa.H, oa.G = sa.G, oa.P = sa.P, oa.N = sa.N, oa.Np = Np, oa.Q = sa.Q;
    oa.n_ptiles = (int)((d->headdim + mode_tile(mode) - 1) / mode_tile(mode));
    oa.r = sa.r;
    oa.x = sa.x;
    oa.b = sa.b;
    oa.c = ssmi_cu_view_of(&a->c);
    oa.has_d = ssmi_present(&a->d);
    if (oa.has_d) {
        oa.d = ssmi_cu_view_of(&a->d);
        oa.d_2d = a->d.ndim == 2;
    }
    oa.has_z = ssmi_present(&a->z);
    if (oa.has_z) oa.z = ssmi_cu_view_of(&a->z);
    oa.states = states;
    oa.out = a->out.data;
    oa.out_dtype = a->out.dtype;
    for (int i = 0; i < 4; ++i) oa.os[i] = a->out.strides[i];
    if (mode != M_F32) return run_fast(ctx, op, mode, fa, pl->nchunks, true, out_version);
    return run_output(ctx, op, mode, oa, pl->nchunks);
}

ssm_status scan_pointers(ssm_context * ctx, const char * op, const ssm_mamba2_scan_args * a) {
    const ssm_tensor * ts[] = {&a->x, &a->dt, &a->a, &a->b, &a->c, &a->d, &a->z, &a->dt_bias,
                               &a->initial_states, &a->out, &a->final_states};
    const char *       names[] = {"x", "dt", "a", "b", "c", "d", "z", "dt_bias", "initial_states", "out", "final_states"};
    return check_pointers(ctx, op, ts, names, 11);
}

} /* namespace */

/* ---- entry points ----------------------------------------------------------------------------- */

extern "C" ssm_status ssmi_cuda_mamba2_scan_workspace_size(ssm_context * ctx, const ssm_mamba2_params * p,
                                                           const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a,
                                                           size_t * bytes) {
    (void)p;
    m2_plan pl;
    SSM_FORWARD_IF_ERROR(check_limits(ctx, "mamba2_scan", d));
    SSM_FORWARD_IF_ERROR(plan_scan(ctx, d, a, &pl));
    *bytes = scan_ws_layout(d, &pl, a).total;
    plan_free(&pl);
    return SSM_STATUS_OK;
}

extern "C" ssm_status ssmi_cuda_mamba2_scan(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                            const ssm_mamba2_scan_args * a, void * workspace) {
    static const char op[] = "mamba2_scan";
    SSM_FORWARD_IF_ERROR(check_limits(ctx, op, d));
    SSM_FORWARD_IF_ERROR(scan_pointers(ctx, op, a));
    m2_plan pl;
    SSM_FORWARD_IF_ERROR(plan_scan(ctx, d, a, &pl));
    const scan_ws      l = scan_ws_layout(d, &pl, a);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    unsigned char *    ws = (unsigned char *)workspace;
    int                owned = 0;
    ssm_status         st = SSM_STATUS_OK;
    if (ws == NULL && l.total > 0) {
        void * mem = NULL;
        st = ssmi_cuda_status(ctx, op, "cudaMallocAsync (workspace)", cudaMallocAsync(&mem, l.total, s));
        ws = (unsigned char *)mem;
        owned = st == SSM_STATUS_OK;
    }
    if (st == SSM_STATUS_OK) st = scan_launch(ctx, p, d, a, &pl, ws);
    plan_free(&pl);
    if (owned) {
        const ssm_status fs = ssmi_cuda_status(ctx, op, "cudaFreeAsync (workspace)", cudaFreeAsync(ws, s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    return st;
}

extern "C" ssm_status ssmi_cuda_mamba2_chunk_state(ssm_context * ctx, const ssm_mamba2_params * p,
                                                   const ssmi_mamba2_dims * d, const ssm_mamba2_chunk_state_args * a) {
    static const char op[] = "mamba2_chunk_state";
    (void)p;
    SSM_FORWARD_IF_ERROR(check_limits(ctx, op, d));
    {
        const ssm_tensor * ts[] = {&a->b, &a->x, &a->dt, &a->da_cumsum, &a->states};
        const char *       names[] = {"b", "x", "dt", "da_cumsum", "states"};
        SSM_FORWARD_IF_ERROR(check_pointers(ctx, op, ts, names, 5));
    }
    const long long W = (long long)d->batch * d->nchunks;
    SSM_RETURN_IF(W > INT32_MAX / 2, ctx, SSM_STATUS_UNSUPPORTED, "%s: batch·NC=%lld is too large for the CUDA backend",
                  op, W);
    if (W == 0 || d->nheads == 0 || d->headdim == 0 || d->dstate == 0) return SSM_STATUS_OK;
    m2_chunk * chunks = (m2_chunk *)malloc(sizeof(m2_chunk) * (size_t)W);
    SSM_RETURN_IF(chunks == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the chunk plan", op);
    const int64_t Q = d->chunk;
    for (long long w = 0; w < W; ++w) {
        m2_chunk *    c = &chunks[w];
        const int64_t b = w / d->nchunks, ci = w % d->nchunks;
        memset(c, 0, sizeof *c);
        c->b = (int)b;
        c->c = (int)ci;
        c->t0 = ci * Q;
        c->len = (int)(d->seqlen - ci * Q < Q ? d->seqlen - ci * Q : Q);
        c->ilast = (int)(Q - 1); /* spec §2.2: the chunk's total is dA_cumsum[..., Q−1] */
        /* M_state: ids are non-decreasing, so the positions with the last token's id are a suffix. */
        c->j0 = 0;
        if (ssmi_present(&a->seq_idx) && c->len > 0) {
            const int64_t last = idx_at(&a->seq_idx, b, c->t0 + c->len - 1);
            int           j = c->len - 1;
            while (j > 0 && idx_at(&a->seq_idx, b, c->t0 + j - 1) == last) --j;
            c->j0 = j;
        }
    }
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    void *             dchunks = NULL;
    ssm_status         st = ssmi_cuda_status(ctx, op, "cudaMallocAsync (chunk plan)",
                                             cudaMallocAsync(&dchunks, sizeof(m2_chunk) * (size_t)W, s));
    if (st == SSM_STATUS_OK)
        st = ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (chunk plan)",
                              cudaMemcpyAsync(dchunks, chunks, sizeof(m2_chunk) * (size_t)W, cudaMemcpyHostToDevice, s));
    free(chunks);
    if (st == SSM_STATUS_OK) {
        m2_state_args sa;
        memset(&sa, 0, sizeof sa);
        sa.chunks = (const m2_chunk *)dchunks;
        sa.H = (int)d->nheads, sa.G = (int)d->ngroups, sa.P = (int)d->headdim, sa.N = (int)d->dstate;
        sa.Np = round16((int)d->dstate);
        sa.Q = (int)d->chunk;
        sa.x = ssmi_cu_view_of(&a->x);
        sa.b = ssmi_cu_view_of(&a->b);
        sa.raw = 0;
        sa.dt = ssmi_cu_view_of(&a->dt);
        sa.cum = ssmi_cu_view_of(&a->da_cumsum);
        sa.states = a->states.data;
        sa.st_dtype = a->states.dtype;
        for (int i = 0; i < 5; ++i) sa.ss[i] = a->states.strides[i];
        st = run_chunk_state(ctx, op, compute_mode(a->x.dtype), sa, W);
    }
    if (dchunks != NULL) {
        const ssm_status fs = ssmi_cuda_status(ctx, op, "cudaFreeAsync (chunk plan)", cudaFreeAsync(dchunks, s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    return st;
}

/* Selection table of mamba2_chunk_state, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_mamba2_chunk_state(int32_t i, ssmi_variant_info * out) {
    (void)i, (void)out;
    return 0;
}

/* Selection table of mamba2_scan, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_mamba2_scan(int32_t i, ssmi_variant_info * out) {
    (void)i, (void)out;
    return 0;
}
