/*
 * mamba2_step.cu — CUDA Mamba-2 decode step (spec §2.9, include/ssmops.h ssm_mamba2_step_args).
 *
 * The step is a stream over the state pool: every state element is read once and (with
 * final_state) written once, with 5 FLOPs in between, so the kernel is built for memory
 * bandwidth. One thread block (128 threads) per (batch row, head, slice of P); inside it
 * a row of N state elements belongs to L lanes (L a power of two ≤ 32, so one warp holds
 * 32/L rows) and each thread keeps U rows in flight at once. The fast path loads and stores
 * 16 bytes per lane (4 fp32 or 8 fp16/bf16 elements) for pools of those dtypes whose state
 * rows are contiguous and 16-byte aligned; every other pool (strided, f64, mixed dtypes
 * of state and final_state) takes the generic path: one element per lane through strides.
 *
 * That is v1. v2 is the streaming kernel of contiguous aligned f32/f16/bf16 pools with N / VEC
 * a power of two ≤ 256: every thread issues 8 evict-first 16-byte state loads before using
 * any. v3 (the default where it applies: those pools with N / VEC ≤ 64 and a constant over n)
 * issues every load a warp needs — state, b, c, the rows' scalars — in one batch and has no
 * shared memory or barrier. SSMOPS_CUDA_STEP_KERNEL=v1 / v2 forces v1 / v2 (v2 where it
 * applies, else v1); unset: v3, else v2, else v1.
 *
 * Per (b, h, p): v = clamp(softplus?(dt + dt_bias), lo, hi); s = state·exp(a·v) + v·x·b;
 * y = Σ_n s·c (the unrounded s), then + d·x and the z gate. A per-head a (stride 0 over n)
 * costs one exp per row instead of one per element. b and c of the row's group are staged
 * in shared memory as fp32. Everything is fp32 (FFMA); y is reduced over the L lanes of a
 * row with a fixed butterfly, so results are bitwise identical run to run. A padding row
 * (slot < 0) writes out = 0 and reads/writes no state.
 *
 * Slots: the indices are a host view; up to kInlineSlots rows travel as int32 in the kernel
 * arguments (no copy, no synchronisation), more are copied to a stream-ordered device buffer.
 * The state may be updated in place (final_state == state): each element is read and then
 * written by the same thread, and only through plain (coherent) loads.
 * Limits: N ≤ 4096 (b and c in shared memory), B·H·slices < 2^31 blocks.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "../../core/ssmi.h"
}
#include "../common/cuda_common.cuh"
#include "../ssmi_cuda.h"

namespace {

const int kStepThreads = 128;
const int kInlineSlots = 256;  /* slot indices passed in the kernel arguments             */
const int kMaxN = 4096;        /* b and c (fp32) of one group fit in 32 KiB of shared memory */
const long long kMinBlocks = 1024; /* below this, one row per thread (more, smaller blocks) */
const int kMinBlocksPerSM = 5;     /* ≤ 96 registers: 20 warps per SM, 40 KiB of loads in flight */

struct step_args {
    int          B, H, P, N, R;        /* R = H / G                                           */
    int          L, NG, rows_per_block; /* lanes per state row, rows per pass, rows per block  */
    int          nslices;              /* blocks per (row, head)                               */
    ssmi_cu_view x, dt, a, bm, cm, d, z, bias;
    int          has_d, has_z, has_bias, softplus, a_const_n, has_fin;
    int          bc_vec;               /* v3: b and c read as 4-element pieces (typed inputs)   */
    float        lo, hi;
    void *       state;
    int          st_dtype;
    long long    ss[4];
    void *       fin;
    int          fin_dtype;
    long long    fs[4];
    void *       out;
    int          out_dtype;
    long long    os[3];
    int          idx_mode; /* 0: slot = row; 1: idx_inline; 2: idx_dev                         */
    const int *  idx_dev;
    int          idx_inline[kInlineSlots];
};

/* Plain (coherent) element load of the state: it may be written by this kernel (in place). */
__device__ __forceinline__ float state_ld(const void * p, int dtype, long long off) {
    switch (dtype) {
        case SSM_DTYPE_F32: return ((const float *)p)[off];
        case SSM_DTYPE_F16: return __half2float(((const __half *)p)[off]);
        case SSM_DTYPE_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[off]);
        case SSM_DTYPE_F64: return (float)((const double *)p)[off];
        default: return 0.0f;
    }
}

/* ---- state accessors: element n0.. of the state row at row_off (final row at frow_off) ---- */

__device__ __forceinline__ float bf16_lo(unsigned int w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned int w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float f16_lo(unsigned int w) { return __half2float(__ushort_as_half((unsigned short)(w & 0xffffu))); }
__device__ __forceinline__ float f16_hi(unsigned int w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }
__device__ __forceinline__ unsigned int pack_bf16(float lo, float hi) {
    return (unsigned int)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           ((unsigned int)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}
__device__ __forceinline__ unsigned int pack_f16(float lo, float hi) {
    return (unsigned int)__half_as_ushort(__float2half_rn(lo)) | ((unsigned int)__half_as_ushort(__float2half_rn(hi)) << 16);
}

/* 16-byte vectors of contiguous, 16-byte aligned rows (the host checked both). */
struct io_f32 {
    static const int VEC = 4;
    __device__ static void load(const step_args & A, long long row_off, int n0, float * v) {
        const float4 q = *reinterpret_cast<const float4 *>((const float *)A.state + row_off + n0);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    }
    __device__ static void store(const step_args & A, long long frow_off, int n0, const float * v) {
        *reinterpret_cast<float4 *>((float *)A.fin + frow_off + n0) = make_float4(v[0], v[1], v[2], v[3]);
    }
};

struct io_bf16 {
    static const int VEC = 8;
    __device__ static void load(const step_args & A, long long row_off, int n0, float * v) {
        const uint4 q = *reinterpret_cast<const uint4 *>((const unsigned short *)A.state + row_off + n0);
        const unsigned int w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) v[2 * i] = bf16_lo(w[i]), v[2 * i + 1] = bf16_hi(w[i]);
    }
    __device__ static void store(const step_args & A, long long frow_off, int n0, const float * v) {
        *reinterpret_cast<uint4 *>((unsigned short *)A.fin + frow_off + n0) =
            make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
    }
};

struct io_f16 {
    static const int VEC = 8;
    __device__ static void load(const step_args & A, long long row_off, int n0, float * v) {
        const uint4 q = *reinterpret_cast<const uint4 *>((const unsigned short *)A.state + row_off + n0);
        const unsigned int w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) v[2 * i] = f16_lo(w[i]), v[2 * i + 1] = f16_hi(w[i]);
    }
    __device__ static void store(const step_args & A, long long frow_off, int n0, const float * v) {
        *reinterpret_cast<uint4 *>((unsigned short *)A.fin + frow_off + n0) =
            make_uint4(pack_f16(v[0], v[1]), pack_f16(v[2], v[3]), pack_f16(v[4], v[5]), pack_f16(v[6], v[7]));
    }
};

/* Any dtype, any strides (state and final_state each their own). */
struct io_generic {
    static const int VEC = 1;
    __device__ static void load(const step_args & A, long long row_off, int n0, float * v) {
        v[0] = state_ld(A.state, A.st_dtype, row_off + n0 * A.ss[3]);
    }
    __device__ static void store(const step_args & A, long long frow_off, int n0, const float * v) {
        ssmi_cu_st(A.fin, A.fin_dtype, frow_off + n0 * A.fs[3], v[0]);
    }
};

__device__ __forceinline__ int slot_of(const step_args & A, int b) {
    if (A.idx_mode == 1) return A.idx_inline[b];
    if (A.idx_mode == 2) return A.idx_dev[b];
    return b;
}

/* Block (row b, head h, slice): rows p = p0 + grp + k·NG (k < U) of the head. ROW_DECAY: a is
 * constant over n (one exp per row); else one exp per element. */
template <class IO, int U, bool ROW_DECAY>
__global__ void __launch_bounds__(kStepThreads, (U == 4 && !ROW_DECAY && IO::VEC == 8) ? 4 : kMinBlocksPerSM)
    step_kernel(const step_args A) {
    const int VEC = IO::VEC;
    extern __shared__ float sbc[]; /* b (N) then c (N) of the row's group, fp32 */
    const long long blk = blockIdx.x;
    const int       slice = (int)(blk % A.nslices);
    const long long bh = blk / A.nslices;
    const int       h = (int)(bh % A.H), b = (int)(bh / A.H);
    const int       lane = (int)threadIdx.x & (A.L - 1), grp = (int)threadIdx.x / A.L;
    const int       p0 = slice * A.rows_per_block;
    const int       slot = slot_of(A, b);
    const long long obase = b * A.os[0] + h * A.os[1];
    if (slot < 0) { /* padding row: out = 0, no slot touched */
        for (int i = threadIdx.x; i < A.rows_per_block; i += blockDim.x)
            if (p0 + i < A.P) ssmi_cu_st(A.out, A.out_dtype, obase + (p0 + i) * A.os[2], 0.0f);
        return;
    }
    /* The rows' offsets, and the first chunk of every row loaded before anything else: the
     * state is the DRAM traffic, the rest below is L2-resident setup that overlaps with it. */
    int       pr[U];
    bool      ok[U];
    long long so[U], fo[U];
    float     s[U][VEC];
    int       n0 = lane * VEC;
#pragma unroll
    for (int k = 0; k < U; ++k) {
        const int p = p0 + grp + k * A.NG;
        pr[k] = p;
        ok[k] = p < A.P;
        so[k] = slot * A.ss[0] + h * A.ss[1] + p * A.ss[2];
        fo[k] = slot * A.fs[0] + h * A.fs[1] + p * A.fs[2];
        if (ok[k] && n0 < A.N)
            IO::load(A, so[k], n0, s[k]);
        else
#pragma unroll
            for (int j = 0; j < VEC; ++j) s[k][j] = 0.0f;
    }

    const int g = h / A.R;
    float *   bs = sbc;
    float *   cs = sbc + A.N;
    for (int n = threadIdx.x; n < A.N; n += blockDim.x) {
        bs[n] = ssmi_cu_ld(A.bm.p, A.bm.dtype, b * A.bm.s[0] + g * A.bm.s[1] + n * A.bm.s[2]);
        cs[n] = ssmi_cu_ld(A.cm.p, A.cm.dtype, b * A.cm.s[0] + g * A.cm.s[1] + n * A.cm.s[2]);
    }

    /* Per-row values: processed dt, v·x, the decay of a per-row a. */
    float xv[U], vv[U], coef[U], dec[U], y[U];
#pragma unroll
    for (int k = 0; k < U; ++k) {
        const int p = pr[k];
        xv[k] = vv[k] = coef[k] = dec[k] = y[k] = 0.0f;
        if (!ok[k]) continue;
        xv[k] = ssmi_cu_ld(A.x.p, A.x.dtype, b * A.x.s[0] + h * A.x.s[1] + p * A.x.s[2]);
        float v = ssmi_cu_ld(A.dt.p, A.dt.dtype, b * A.dt.s[0] + h * A.dt.s[1] + p * A.dt.s[2]);
        if (A.has_bias) v += ssmi_cu_ld(A.bias.p, A.bias.dtype, h * A.bias.s[0] + p * A.bias.s[1]);
        if (A.softplus && v <= 20.0f) v = log1pf(expf(v));
        if (v < A.lo) v = A.lo; /* comparisons, not fminf/fmaxf: a NaN dt stays NaN, as on the CPU */
        if (v > A.hi) v = A.hi;
        vv[k] = v;
        coef[k] = v * xv[k];
        if (ROW_DECAY) dec[k] = expf(ssmi_cu_ld(A.a.p, A.a.dtype, h * A.a.s[0] + p * A.a.s[1]) * v);
    }
    __syncthreads(); /* b and c staged */

    /* Stream the rows: update, store and y of the chunk in registers, then the next chunk's
     * U loads (each lane's chunks are L·VEC elements apart). */
    for (; n0 < A.N; n0 += A.L * VEC) {
#pragma unroll
        for (int k = 0; k < U; ++k) {
            if (!ok[k]) continue;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const int   n = n0 + j;
                const float dk = ROW_DECAY
                                     ? dec[k]
                                     : expf(ssmi_cu_ld(A.a.p, A.a.dtype, h * A.a.s[0] + pr[k] * A.a.s[1] + n * A.a.s[2]) *
                                            vv[k]);
                const float t = fmaf(s[k][j], dk, coef[k] * bs[n]);
                y[k] = fmaf(t, cs[n], y[k]);
                s[k][j] = t;
            }
            if (A.has_fin) IO::store(A, fo[k], n0, s[k]);
        }
        const int next = n0 + A.L * VEC;
        if (next < A.N) {
#pragma unroll
            for (int k = 0; k < U; ++k)
                if (ok[k]) IO::load(A, so[k], next, s[k]);
        }
    }

    /* y over the L lanes of each row (fixed butterfly: deterministic), then d·x, the gate. */
#pragma unroll
    for (int k = 0; k < U; ++k)
        for (int off = A.L >> 1; off > 0; off >>= 1) y[k] += __shfl_xor_sync(0xffffffffu, y[k], off);
    if (lane != 0) return;
#pragma unroll
    for (int k = 0; k < U; ++k) {
        if (!ok[k]) continue;
        const int p = pr[k];
        float     yy = y[k];
        if (A.has_d) yy = fmaf(ssmi_cu_ld(A.d.p, A.d.dtype, h * A.d.s[0] + p * A.d.s[1]), xv[k], yy);
        if (A.has_z) {
            const float zz = ssmi_cu_ld(A.z.p, A.z.dtype, b * A.z.s[0] + h * A.z.s[1] + p * A.z.s[2]);
            yy *= zz / (1.0f + expf(-zz));
        }
        ssmi_cu_st(A.out, A.out_dtype, obase + p * A.os[2], yy);
    }
}

/* ---- v2: the streaming kernel of contiguous 16-byte aligned pools -------------------------------
 *
 * v1 keeps at most four 16-byte loads in flight per thread in short blocks, which leaves the
 * step latency-bound (about a third of the copy bandwidth on an H200). v2 issues all of a
 * thread's state loads (RU rows × CPL vectors, 8 vectors = 128 bytes) before it uses any of
 * them, with evict-first hints (the pool is touched once per step), in 256-thread blocks of up
 * to 3 per SM (≤ 80 registers; 2 for 4+ vectors per lane): about 96 KiB of reads in flight
 * per SM. A row of N elements has nv = N / VEC
 * vectors (a power of two ≤ 256) spread over L = min(nv, 32) lanes, CPL = nv / L vectors per
 * lane. The block's b, c and per-row scalars (dt processed, v·x, the decay) are computed once
 * into shared memory while the loads are in flight. y is summed per lane in vector order, then
 * over the L lanes by a fixed butterfly: bitwise reproducible. */

struct v2_f32 {
    static const int VEC = 4;
    __device__ static void unpack(const uint4 & q, float * v) {
        v[0] = __uint_as_float(q.x), v[1] = __uint_as_float(q.y), v[2] = __uint_as_float(q.z), v[3] = __uint_as_float(q.w);
    }
    __device__ static uint4 pack(const float * v) {
        return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
    }
};

struct v2_bf16 {
    static const int VEC = 8;
    __device__ static void unpack(const uint4 & q, float * v) {
        const unsigned int w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) v[2 * i] = bf16_lo(w[i]), v[2 * i + 1] = bf16_hi(w[i]);
    }
    __device__ static uint4 pack(const float * v) {
        return make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
    }
};

struct v2_f16 {
    static const int VEC = 8;
    __device__ static void unpack(const uint4 & q, float * v) {
        const unsigned int w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) v[2 * i] = f16_lo(w[i]), v[2 * i + 1] = f16_hi(w[i]);
    }
    __device__ static uint4 pack(const float * v) {
        return make_uint4(pack_f16(v[0], v[1]), pack_f16(v[2], v[3]), pack_f16(v[4], v[5]), pack_f16(v[6], v[7]));
    }
};

const int       kV2Threads = 256;
const int       kV2Vectors = 8;   /* 16-byte state vectors per thread, all loaded before use      */
const int       kV2MaxVectorsPerRow = 256;
const long long kV2MinBlocks = 264; /* fewer blocks (2 per SM of an H200): 2 rows per lane group */

/* Block (row b, head h, slice): rows p = p0 + grp + k·NG (grp < NG, k < RU), each the CPL
 * vectors lane, lane + L, ... of its row. Shared memory: b[N], c[N], then per row of the block
 * v, v·x, decay, x. */
template <class IO, int CPL, int RU>
__global__ void __launch_bounds__(kV2Threads, CPL >= 4 ? 2 : 3) step_v2_kernel(const step_args A) {
    const int VEC = IO::VEC, ES = 16 / IO::VEC; /* elements per vector, bytes per element */
    extern __shared__ __align__(16) float sm[]; /* b, c read as float4 */
    const int       rpb = A.rows_per_block;
    float *         bs = sm;
    float *         cs = bs + A.N;
    float *         rv = cs + A.N;
    float *         rcoef = rv + rpb;
    float *         rdec = rcoef + rpb;
    float *         rx = rdec + rpb;
    const long long blk = blockIdx.x;
    const int       slice = (int)(blk % A.nslices);
    const long long bh = blk / A.nslices;
    const int       h = (int)(bh % A.H), b = (int)(bh / A.H);
    const int       L = A.L, NG = A.NG;
    const int       lane = (int)threadIdx.x & (L - 1), grp = (int)threadIdx.x / L;
    const int       p0 = slice * rpb;
    const int       slot = slot_of(A, b);
    const long long obase = b * A.os[0] + h * A.os[1];
    if (slot < 0) { /* padding row: out = 0, no slot touched (uniform over the block) */
        for (int i = threadIdx.x; i < rpb; i += blockDim.x)
            if (p0 + i < A.P) ssmi_cu_st(A.out, A.out_dtype, obase + (p0 + i) * A.os[2], 0.0f);
        return;
    }

    /* Every state load of this thread first: they are the DRAM traffic. Plain coherent
     * (ld.global.cs) loads: in place, the same thread writes these bytes afterwards. */
    const char * sbase = (const char *)A.state + (slot * A.ss[0] + h * A.ss[1]) * ES;
    uint4        raw[RU][CPL];
    bool         ok[RU];
    int          pr[RU];
#pragma unroll
    for (int k = 0; k < RU; ++k) {
        pr[k] = p0 + grp + k * NG;
        ok[k] = grp < NG && pr[k] < A.P;
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
            if (ok[k])
                raw[k][c] = __ldcs((const uint4 *)(sbase + (pr[k] * A.ss[2] + (long long)(lane + c * L) * VEC) * ES));
            else
                raw[k][c] = make_uint4(0u, 0u, 0u, 0u);
        }
    }

    /* Block-wide staging while the loads are in flight. */
    const int g = h / A.R;
    for (int n = threadIdx.x; n < A.N; n += blockDim.x) {
        bs[n] = ssmi_cu_ld(A.bm.p, A.bm.dtype, b * A.bm.s[0] + g * A.bm.s[1] + n * A.bm.s[2]);
        cs[n] = ssmi_cu_ld(A.cm.p, A.cm.dtype, b * A.cm.s[0] + g * A.cm.s[1] + n * A.cm.s[2]);
    }
    for (int i = threadIdx.x; i < rpb; i += blockDim.x) {
        const int p = p0 + i;
        if (p >= A.P) break;
        const float xv = ssmi_cu_ld(A.x.p, A.x.dtype, b * A.x.s[0] + h * A.x.s[1] + p * A.x.s[2]);
        float       v = ssmi_cu_ld(A.dt.p, A.dt.dtype, b * A.dt.s[0] + h * A.dt.s[1] + p * A.dt.s[2]);
        if (A.has_bias) v += ssmi_cu_ld(A.bias.p, A.bias.dtype, h * A.bias.s[0] + p * A.bias.s[1]);
        if (A.softplus && v <= 20.0f) v = log1pf(expf(v));
        if (v < A.lo) v = A.lo; /* comparisons, not fminf/fmaxf: a NaN dt stays NaN, as on the CPU */
        if (v > A.hi) v = A.hi;
        rv[i] = v;
        rcoef[i] = v * xv;
        rdec[i] = A.a_const_n ? expf(ssmi_cu_ld(A.a.p, A.a.dtype, h * A.a.s[0] + p * A.a.s[1]) * v) : 0.0f;
        rx[i] = xv;
    }
    __syncthreads();

    char * fbase = A.has_fin ? (char *)A.fin + (slot * A.fs[0] + h * A.fs[1]) * ES : NULL;
    float  y[RU];
#pragma unroll
    for (int k = 0; k < RU; ++k) {
        y[k] = 0.0f;
        if (!ok[k]) continue;
        const int   i = pr[k] - p0;
        const float v = rv[i], coef = rcoef[i], dec = rdec[i];
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
            const int n0 = (lane + c * L) * VEC;
            float     s[IO::VEC], bb[IO::VEC], cc[IO::VEC];
            IO::unpack(raw[k][c], s);
            /* b and c as 16-byte shared loads: consecutive lanes read consecutive 16 bytes (no
             * bank conflicts; n0 is a multiple of 4 and N of the vector, so 16-byte aligned). */
#pragma unroll
            for (int q = 0; q < IO::VEC / 4; ++q) {
                const float4 b4 = *reinterpret_cast<const float4 *>(bs + n0 + 4 * q);
                const float4 c4 = *reinterpret_cast<const float4 *>(cs + n0 + 4 * q);
                bb[4 * q] = b4.x, bb[4 * q + 1] = b4.y, bb[4 * q + 2] = b4.z, bb[4 * q + 3] = b4.w;
                cc[4 * q] = c4.x, cc[4 * q + 1] = c4.y, cc[4 * q + 2] = c4.z, cc[4 * q + 3] = c4.w;
            }
#pragma unroll
            for (int j = 0; j < IO::VEC; ++j) {
                const int   n = n0 + j;
                const float dk =
                    A.a_const_n ? dec
                                : expf(ssmi_cu_ld(A.a.p, A.a.dtype, h * A.a.s[0] + pr[k] * A.a.s[1] + n * A.a.s[2]) * v);
                const float t = fmaf(s[j], dk, coef * bb[j]);
                y[k] = fmaf(t, cc[j], y[k]);
                s[j] = t;
            }
            if (A.has_fin) __stcs((uint4 *)(fbase + (pr[k] * A.fs[2] + (long long)n0) * ES), IO::pack(s));
        }
    }

    /* y over the L lanes of each row (fixed butterfly), then d·x and the gate. */
#pragma unroll
    for (int k = 0; k < RU; ++k)
        for (int off = L >> 1; off > 0; off >>= 1) y[k] += __shfl_xor_sync(0xffffffffu, y[k], off);
    if (lane != 0) return;
#pragma unroll
    for (int k = 0; k < RU; ++k) {
        if (!ok[k]) continue;
        const int p = pr[k];
        float     yy = y[k];
        if (A.has_d) yy = fmaf(ssmi_cu_ld(A.d.p, A.d.dtype, h * A.d.s[0] + p * A.d.s[1]), rx[p - p0], yy);
        if (A.has_z) {
            const float zz = ssmi_cu_ld(A.z.p, A.z.dtype, b * A.z.s[0] + h * A.z.s[1] + p * A.z.s[2]);
            yy *= zz / (1.0f + expf(-zz));
        }
        ssmi_cu_st(A.out, A.out_dtype, obase + p * A.os[2], yy);
    }
}

/* ---- v3: every load of a warp in one batch, no shared memory, no barrier --------------------
 *
 * The profile of v2 on the H200 (ncu, B=128 H=80 P=64 N=128 fp32): DRAM 38%, blocks waiting
 * on small dependent loads — b, c, x, dt, a staged through shared memory behind a barrier
 * after the state loads, d and z loaded per row in the epilogue — while an in-place
 * read-modify-write of the same bytes reaches ~4 TB/s. v3 removes every dependent round
 * trip: a warp issues, at its start and before it uses any of them, its state loads, the b
 * and c values of its lanes' columns and its rows' scalars, so one memory latency covers
 * the warp's whole life. Warps are independent (no shared memory, no __syncthreads):
 *
 *   - a row of N elements is nv = N / VEC 16-byte vectors on L = min(nv, 32) lanes, CPL =
 *     nv / L vectors per lane (1 or 2: N ≤ 256 fp32, ≤ 512 16-bit); a lane's columns are the
 *     same in every row it holds, so b and c of those columns sit in its registers (16-byte
 *     loads when b and c are contiguous and aligned);
 *   - a lane group (L lanes) holds RU consecutive rows p0 .. p0 + RU − 1 (RU ≤ L): 32 state
 *     elements per thread (8 vectors = 128 bytes fp32, 4 = 64 bytes 16-bit) in the large-batch
 *     plan, a quarter of that for small batches (more blocks over the 132 SMs);
 *   - lane k of a group owns row p0 + k: it loads x, dt, dt_bias, a, d, z of that row, computes
 *     the processed dt, dt·x, the decay and the gate while the state loads are in flight, and
 *     hands dt·x and the decay to the group's lanes by shuffles (no memory round trip);
 *   - per row: s' = s·decay + (dt·x)·b stored with st.global.cs, y summed per lane in column
 *     order, then over the L lanes by a fixed xor butterfly (bitwise reproducible; the same
 *     order as v2); the owner lane adds d·x, applies the gate and writes out.
 *
 * Typed loads (no dtype switch) for the usual input dtypes: all fp32, or x/dt/b/c/z bf16 with
 * fp32 a/d/dt_bias; other mixes go through ssmi_cu_ld (the loads are still all issued
 * first). Registers: ≤ 64 (128 threads, 8 blocks per SM), so an SM holds 1024 threads and,
 * at the start of its blocks, up to 8 × 128 × 128 B = 128 KiB of fp32 state reads in flight
 * (64 KiB for 16-bit pools); the measured in-place ceiling needs ~32 KiB per SM. a must be
 * constant over n (per head, or per (head, p)): other a take v2. */

const int       kV3Threads = 128;
const int       kV3MinBlocksPerSM = 8; /* ≤ 64 registers per thread (6 blocks, ≤ 80, for 2 vectors a lane) */
const int       kV3Elems = 32;         /* state elements per thread in the large-batch plan */
const long long kV3MinBlocks = 264;    /* fewer blocks (2 per SM): the small-batch plan   */

/* Input loads by dtype class. act: x, dt, b, c, z; par: a, d, dt_bias. */
struct in_f32 {
    __device__ static float act(const ssmi_cu_view & v, long long off) { return __ldg((const float *)v.p + off); }
    __device__ static float par(const ssmi_cu_view & v, long long off) { return __ldg((const float *)v.p + off); }
    /* 4 consecutive activations at off (a multiple of 4, 16-byte aligned) */
    __device__ static void act4(const ssmi_cu_view & v, long long off, float * o) {
        const float4 q = __ldg((const float4 *)((const float *)v.p + off));
        o[0] = q.x, o[1] = q.y, o[2] = q.z, o[3] = q.w;
    }
};

struct in_bf16 {
    __device__ static float act(const ssmi_cu_view & v, long long off) {
        return __uint_as_float((unsigned int)__ldg((const unsigned short *)v.p + off) << 16);
    }
    __device__ static float par(const ssmi_cu_view & v, long long off) { return __ldg((const float *)v.p + off); }
    /* 4 consecutive activations at off (a multiple of 4, 8-byte aligned) */
    __device__ static void act4(const ssmi_cu_view & v, long long off, float * o) {
        const uint2 q = __ldg((const uint2 *)((const unsigned short *)v.p + off));
        o[0] = bf16_lo(q.x), o[1] = bf16_hi(q.x), o[2] = bf16_lo(q.y), o[3] = bf16_hi(q.y);
    }
};

struct in_any {
    __device__ static float act(const ssmi_cu_view & v, long long off) { return ssmi_cu_ld(v.p, v.dtype, off); }
    __device__ static float par(const ssmi_cu_view & v, long long off) { return ssmi_cu_ld(v.p, v.dtype, off); }
    __device__ static void  act4(const ssmi_cu_view & v, long long off, float * o) { /* never used: bc_vec is 0 */
        for (int j = 0; j < 4; ++j) o[j] = ssmi_cu_ld(v.p, v.dtype, off + j);
    }
};

/* Block (row b, head h, slice): lane group grp holds rows p0 = slice·rows_per_block + grp·RU
 * .. + RU − 1, each the CPL vectors lane, lane + L, ... of its row. Requires RU ≤ L, L a power
 * of two ≤ 32, a_const_n, and the v2 pool layout (contiguous rows, 16-byte aligned). */
template <class IO, class IN, int CPL, int RU>
__global__ void __launch_bounds__(kV3Threads, CPL == 1 ? kV3MinBlocksPerSM : 6) step_v3_kernel(const step_args A) {
    const int       VEC = IO::VEC, ES = 16 / IO::VEC; /* elements per vector, bytes per element */
    const unsigned  full = 0xffffffffu;
    const unsigned  blk = blockIdx.x; /* < 2^31 (checked on the host): 32-bit divisions */
    const int       slice = (int)(blk % (unsigned)A.nslices);
    const unsigned  bh = blk / (unsigned)A.nslices;
    const int       h = (int)(bh % (unsigned)A.H), b = (int)(bh / (unsigned)A.H);
    const int       L = A.L;
    const int       lane = (int)threadIdx.x & (L - 1), grp = (int)threadIdx.x / L;
    const int       slot = slot_of(A, b);
    const long long obase = (long long)b * A.os[0] + (long long)h * A.os[1];
    if (slot < 0) { /* padding row: out = 0, no slot touched (uniform over the block) */
        const int r0 = slice * A.rows_per_block;
        for (int i = threadIdx.x; i < A.rows_per_block; i += blockDim.x)
            if (r0 + i < A.P) ssmi_cu_st(A.out, A.out_dtype, obase + (long long)(r0 + i) * A.os[2], 0.0f);
        return;
    }
    const int p0 = slice * A.rows_per_block + grp * RU;
    const int nrows = grp < A.NG ? A.P - p0 : 0; /* rows k < nrows (and k < RU) exist */

    /* 1. the state: RU × CPL 16-byte loads (evict-first, coherent: in place, this thread
     * writes the same bytes afterwards) */
    const long long srow = (long long)slot * A.ss[0] + (long long)h * A.ss[1] + (long long)p0 * A.ss[2];
    uint4           raw[RU][CPL];
#pragma unroll
    for (int k = 0; k < RU; ++k)
#pragma unroll
        for (int c = 0; c < CPL; ++c)
            raw[k][c] = k < nrows ? __ldcs((const uint4 *)((const char *)A.state +
                                                           (srow + k * A.ss[2] + (long long)(lane + c * L) * VEC) * ES))
                                  : make_uint4(0u, 0u, 0u, 0u);

    /* 2. b and c of the lane's columns (the group's, g = h / R) */
    const int       g = h / A.R;
    const long long boff = (long long)b * A.bm.s[0] + (long long)g * A.bm.s[1];
    const long long coff = (long long)b * A.cm.s[0] + (long long)g * A.cm.s[1];
    float           bb[CPL][VEC], cc[CPL][VEC];
    if (A.bc_vec) { /* unit stride over n, 4-element pieces aligned (host-checked) */
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
            for (int q = 0; q < VEC / 4; ++q) {
                const long long n = (long long)(lane + c * L) * VEC + 4 * q;
                IN::act4(A.bm, boff + n, &bb[c][4 * q]);
                IN::act4(A.cm, coff + n, &cc[c][4 * q]);
            }
    } else {
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const long long n = (long long)(lane + c * L) * VEC + j;
                bb[c][j] = IN::act(A.bm, boff + n * A.bm.s[2]);
                cc[c][j] = IN::act(A.cm, coff + n * A.cm.s[2]);
            }
    }

    /* 3. lane k < RU owns row p0 + k: its scalars (loads issued with the ones above) */
    const bool owner = lane < RU && lane < nrows;
    float      o_x = 0.0f, o_d = 0.0f, o_coef = 0.0f, o_dec = 0.0f, o_gate = 1.0f;
    if (owner) {
        const long long p = p0 + lane;
        o_x = IN::act(A.x, (long long)b * A.x.s[0] + (long long)h * A.x.s[1] + p * A.x.s[2]);
        float       v = IN::act(A.dt, (long long)b * A.dt.s[0] + (long long)h * A.dt.s[1] + p * A.dt.s[2]);
        const float bias = A.has_bias ? IN::par(A.bias, (long long)h * A.bias.s[0] + p * A.bias.s[1]) : 0.0f;
        const float av = IN::par(A.a, (long long)h * A.a.s[0] + p * A.a.s[1]);
        if (A.has_d) o_d = IN::par(A.d, (long long)h * A.d.s[0] + p * A.d.s[1]);
        const float zz = A.has_z ? IN::act(A.z, (long long)b * A.z.s[0] + (long long)h * A.z.s[1] + p * A.z.s[2])
                                 : 0.0f;
        if (A.has_bias) v += bias;
        if (A.softplus && v <= 20.0f) v = log1pf(expf(v));
        if (v < A.lo) v = A.lo; /* comparisons, not fminf/fmaxf: a NaN dt stays NaN, as on the CPU */
        if (v > A.hi) v = A.hi;
        o_coef = v * o_x;
        o_dec = expf(av * v);
        if (A.has_z) o_gate = zz / (1.0f + expf(-zz));
    }

    /* 4. the rows: update, store, the lane's part of y */
    const long long frow = A.has_fin ? (long long)slot * A.fs[0] + (long long)h * A.fs[1] + (long long)p0 * A.fs[2] : 0;
    float           y[RU];
#pragma unroll
    for (int k = 0; k < RU; ++k) {
        const float coef = __shfl_sync(full, o_coef, k, L);
        const float dec = __shfl_sync(full, o_dec, k, L);
        y[k] = 0.0f;
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
            float s[IO::VEC];
            IO::unpack(raw[k][c], s);
#pragma unroll
            for (int j = 0; j < IO::VEC; ++j) {
                const float t = fmaf(s[j], dec, coef * bb[c][j]);
                y[k] = fmaf(t, cc[c][j], y[k]);
                s[j] = t;
            }
            if (A.has_fin && k < nrows)
                __stcs((uint4 *)((char *)A.fin + (frow + k * A.fs[2] + (long long)(lane + c * L) * VEC) * ES),
                       IO::pack(s));
        }
    }
    /* y over the L lanes of each row; lane k keeps row k's sum */
    const float y_own = ssmi_rows_sum<RU>(y, L, lane, full);

    /* 5. d·x, the gate, out (the owner of each row) */
    if (owner) {
        float yy = y_own;
        if (A.has_d) yy = fmaf(o_d, o_x, yy);
        if (A.has_z) yy *= o_gate;
        ssmi_cu_st(A.out, A.out_dtype, obase + (long long)(p0 + lane) * A.os[2], yy);
    }
}

/* ---- host side ------------------------------------------------------------------------------ */

int pow2_at_least(int v) {
    int l = 1;
    while (l < v) l *= 2;
    return l;
}

/* 16-byte vectors fit: unit stride over n, N a multiple of the vector, every row start
 * (data + slot·s0 + h·s1 + p·s2 elements) 16-byte aligned. */
int vec_ok(const ssm_tensor * t, int64_t N) {
    const int64_t vec = 16 / (int64_t)ssm_dtype_size((ssm_dtype)t->dtype);
    if (t->dtype != SSM_DTYPE_F32 && t->dtype != SSM_DTYPE_F16 && t->dtype != SSM_DTYPE_BF16) return 0;
    if (N % vec != 0 || t->strides[3] != 1 || ((uintptr_t)t->data % 16) != 0) return 0;
    for (int i = 0; i < 3; ++i)
        if (t->strides[i] % vec != 0) return 0;
    return 1;
}

int const_dim(const ssm_tensor * t, int i) { return t->strides[i] == 0 || t->shape[i] <= 1; }

template <class IO> ssm_status launch_io(ssm_context * ctx, const char * op, step_args & A) {
    const int nv = (A.N + IO::VEC - 1) / IO::VEC;
    A.L = pow2_at_least(nv < 1 ? 1 : nv);
    if (A.L > 32) A.L = 32;
    A.NG = kStepThreads / A.L;
    const long long pairs = (long long)A.B * A.H;
    /* Four rows per thread when that still gives enough blocks and no mostly idle ones. */
    const int       u = ((long long)A.NG * 4 <= A.P && pairs * ((A.P + A.NG * 4 - 1) / (A.NG * 4)) >= kMinBlocks) ? 4 : 1;
    A.rows_per_block = A.NG * u;
    A.nslices = (A.P + A.rows_per_block - 1) / A.rows_per_block;
    const long long blocks = pairs * A.nslices;
    SSM_RETURN_IF(blocks > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: B·H·P=%lld needs more thread blocks than the CUDA backend launches", op,
                  (long long)(pairs * A.P));
    const size_t smem = sizeof(float) * 2 * (size_t)A.N;
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    if (u == 4 && A.a_const_n)
        step_kernel<IO, 4, true><<<(unsigned)blocks, kStepThreads, smem, s>>>(A);
    else if (u == 4)
        step_kernel<IO, 4, false><<<(unsigned)blocks, kStepThreads, smem, s>>>(A);
    else if (A.a_const_n)
        step_kernel<IO, 1, true><<<(unsigned)blocks, kStepThreads, smem, s>>>(A);
    else
        step_kernel<IO, 1, false><<<(unsigned)blocks, kStepThreads, smem, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "step_kernel launch");
    return SSM_STATUS_OK;
}

/* The v2/v3 plan for ru rows per lane group: NG groups of L lanes per block of at most
 * max_threads (no more groups than P needs), a whole number of warps. Returns the block count. */
long long plan_rows(step_args & A, int ru, int max_threads, int * threads) {
    const int need = (A.P + ru - 1) / ru;
    A.NG = max_threads / A.L < need ? max_threads / A.L : need;
    A.rows_per_block = A.NG * ru;
    A.nslices = (A.P + A.rows_per_block - 1) / A.rows_per_block;
    *threads = (A.NG * A.L + 31) / 32 * 32;
    return (long long)A.B * A.H * A.nslices;
}

/* v2 for a pool that passed vec_ok (N a multiple of the vector). *handled = 0 (and nothing
 * launched) when the row's vector count is not a power of two ≤ kV2MaxVectorsPerRow. */
template <class IO> ssm_status launch_v2_io(ssm_context * ctx, const char * op, step_args & A, int * handled) {
    const int nv = A.N / IO::VEC;
    *handled = 0;
    if (nv < 1 || nv > kV2MaxVectorsPerRow || (nv & (nv - 1)) != 0) return SSM_STATUS_OK;
    A.L = nv < 32 ? nv : 32;
    const int cpl = nv / A.L; /* 1, 2, 4 or 8 */
    int       ru = kV2Vectors / cpl, threads = 0;
    long long blocks = plan_rows(A, ru, kV2Threads, &threads);
    if (blocks < kV2MinBlocks && ru > 2) { /* a small batch: more, shorter blocks over more SMs */
        ru = 2;
        blocks = plan_rows(A, ru, kV2Threads, &threads);
    }
    SSM_RETURN_IF(blocks > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: B·H·P=%lld needs more thread blocks than the CUDA backend launches", op,
                  (long long)A.B * A.H * A.P);
    const size_t       smem = sizeof(float) * (2 * (size_t)A.N + 4 * (size_t)A.rows_per_block);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const unsigned     nb = (unsigned)blocks;
    *handled = 1;
    if (cpl == 1 && ru == 8)
        step_v2_kernel<IO, 1, 8><<<nb, threads, smem, s>>>(A);
    else if (cpl == 1)
        step_v2_kernel<IO, 1, 2><<<nb, threads, smem, s>>>(A);
    else if (cpl == 2 && ru == 4)
        step_v2_kernel<IO, 2, 4><<<nb, threads, smem, s>>>(A);
    else if (cpl == 2)
        step_v2_kernel<IO, 2, 2><<<nb, threads, smem, s>>>(A);
    else if (cpl == 4)
        step_v2_kernel<IO, 4, 2><<<nb, threads, smem, s>>>(A);
    else
        step_v2_kernel<IO, 8, 1><<<nb, threads, smem, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "step_v2_kernel launch");
    return SSM_STATUS_OK;
}


template <class IO, class IN, int CPL, int RU>
cudaError_t launch_v3_kernel(const step_args & A, unsigned blocks, int threads, cudaStream_t s) {
    step_v3_kernel<IO, IN, CPL, RU><<<blocks, threads, 0, s>>>(A);
    return cudaGetLastError();
}

/* The instance for CPL vectors per lane: RU_BIG rows per group (kV3Elems elements per thread)
 * or, small = 1, a quarter of them (at least 1). */
template <class IO, class IN, int CPL>
cudaError_t launch_v3_cpl(const step_args & A, int small, unsigned blocks, int threads, cudaStream_t s) {
    const int RU_BIG = kV3Elems / (CPL * IO::VEC);
    const int RU_SMALL = RU_BIG / 4 > 1 ? RU_BIG / 4 : 1;
    return small ? launch_v3_kernel<IO, IN, CPL, RU_SMALL>(A, blocks, threads, s)
                 : launch_v3_kernel<IO, IN, CPL, RU_BIG>(A, blocks, threads, s);
}

template <class IO, class IN>
cudaError_t launch_v3_in(const step_args & A, int cpl, int small, unsigned blocks, int threads, cudaStream_t s) {
    return cpl == 1 ? launch_v3_cpl<IO, IN, 1>(A, small, blocks, threads, s)
                    : launch_v3_cpl<IO, IN, 2>(A, small, blocks, threads, s);
}

/* The input class of v3's typed loads: 0 all fp32; 1 x, dt, b, c, z bf16 and a, d, dt_bias
 * fp32; 2 anything else (ssmi_cu_ld). */
int v3_input_class(const ssm_mamba2_step_args * a) {
    const ssm_tensor * act[] = {&a->x, &a->dt, &a->b, &a->c, &a->z};
    const ssm_tensor * par[] = {&a->a, &a->d, &a->dt_bias};
    const int32_t      adt = a->x.dtype;
    if (adt != SSM_DTYPE_F32 && adt != SSM_DTYPE_BF16) return 2;
    for (int i = 0; i < 5; ++i)
        if (ssmi_present(act[i]) && act[i]->dtype != adt) return 2;
    for (int i = 0; i < 3; ++i)
        if (ssmi_present(par[i]) && par[i]->dtype != SSM_DTYPE_F32) return 2;
    return adt == SSM_DTYPE_F32 ? 0 : 1;
}

/* b or c readable as aligned 4-element pieces: unit stride over n, batch and group strides
 * multiples of 4, base aligned to 4 elements (16 bytes fp32, 8 bytes bf16). */
int v3_bc_vec(const ssm_tensor * t) {
    const int64_t es = (int64_t)ssm_dtype_size((ssm_dtype)t->dtype);
    return t->strides[2] == 1 && t->strides[0] % 4 == 0 && t->strides[1] % 4 == 0 &&
           ((uintptr_t)t->data % (uintptr_t)(4 * es)) == 0;
}

/* v3 for a pool that passed vec_ok (N a multiple of the vector). *handled = 0 (and nothing
 * launched) where v3 does not apply: a varying over n, N / VEC not a power of two ≤ 64, or a
 * row on fewer lanes than the plan's rows per group. */
template <class IO>
ssm_status launch_v3_io(ssm_context * ctx, const char * op, const ssm_mamba2_step_args * a, step_args & A,
                        int * handled) {
    const int nv = A.N / IO::VEC;
    *handled = 0;
    if (!A.a_const_n || nv < 1 || nv > 64 || (nv & (nv - 1)) != 0) return SSM_STATUS_OK;
    A.L = nv < 32 ? nv : 32;
    const int cpl = nv / A.L; /* 1 or 2 */
    const int ru_big = kV3Elems / (cpl * IO::VEC), ru_small = ru_big / 4 > 1 ? ru_big / 4 : 1;
    int       small = 0, threads = 0;
    long long blocks = 0;
    if (A.L >= ru_big) blocks = plan_rows(A, ru_big, kV3Threads, &threads);
    if (A.L < ru_big || blocks < kV3MinBlocks) { /* a small batch (or short rows): more, shorter blocks */
        if (A.L < ru_small) return SSM_STATUS_OK;
        small = 1;
        blocks = plan_rows(A, ru_small, kV3Threads, &threads);
    }
    SSM_RETURN_IF(blocks > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: B·H·P=%lld needs more thread blocks than the CUDA backend launches", op,
                  (long long)A.B * A.H * A.P);
    const int cls = v3_input_class(a);
    A.bc_vec = cls != 2 && v3_bc_vec(&a->b) && v3_bc_vec(&a->c);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const unsigned     nb = (unsigned)blocks;
    *handled = 1;
    cudaError_t e;
    if (cls == 0)
        e = launch_v3_in<IO, in_f32>(A, cpl, small, nb, threads, s);
    else if (cls == 1)
        e = launch_v3_in<IO, in_bf16>(A, cpl, small, nb, threads, s);
    else
        e = launch_v3_in<IO, in_any>(A, cpl, small, nb, threads, s);
    return ssmi_cuda_status(ctx, op, "step_v3_kernel launch", e);
}

/* SSMOPS_CUDA_STEP_KERNEL (read on every call, for A/B runs): "v1" forces v1, "v2" v2 where it
 * applies (else v1); unset or anything else: v3 where it applies, else v2, else v1. */
int step_version_requested(void) {
    const char * e = getenv("SSMOPS_CUDA_STEP_KERNEL");
    if (e != NULL && strcmp(e, "v1") == 0) return 1;
    if (e != NULL && strcmp(e, "v2") == 0) return 2;
    return 3;
}

ssm_status launch(ssm_context * ctx, const char * op, const ssm_mamba2_step_args * a, step_args & A) {
    const int has_fin = ssmi_present(&a->final_state);
    const int fast = vec_ok(&a->state, A.N) &&
                     (!has_fin || (a->final_state.dtype == a->state.dtype && vec_ok(&a->final_state, A.N)));
    if (!fast) return launch_io<io_generic>(ctx, op, A);
    const int version = step_version_requested();
    if (version == 3) {
        int        handled = 0;
        ssm_status st = SSM_STATUS_OK;
        switch (a->state.dtype) {
            case SSM_DTYPE_F32: st = launch_v3_io<v2_f32>(ctx, op, a, A, &handled); break;
            case SSM_DTYPE_BF16: st = launch_v3_io<v2_bf16>(ctx, op, a, A, &handled); break;
            default: st = launch_v3_io<v2_f16>(ctx, op, a, A, &handled); break;
        }
        if (st != SSM_STATUS_OK || handled) return st;
    }
    if (version >= 2) {
        int        handled = 0;
        ssm_status st = SSM_STATUS_OK;
        switch (a->state.dtype) {
            case SSM_DTYPE_F32: st = launch_v2_io<v2_f32>(ctx, op, A, &handled); break;
            case SSM_DTYPE_BF16: st = launch_v2_io<v2_bf16>(ctx, op, A, &handled); break;
            default: st = launch_v2_io<v2_f16>(ctx, op, A, &handled); break;
        }
        if (st != SSM_STATUS_OK || handled) return st;
    }
    switch (a->state.dtype) {
        case SSM_DTYPE_F32: return launch_io<io_f32>(ctx, op, A);
        case SSM_DTYPE_BF16: return launch_io<io_bf16>(ctx, op, A);
        default: return launch_io<io_f16>(ctx, op, A);
    }
}

ssm_status check_pointers(ssm_context * ctx, const char * op, const ssm_mamba2_step_args * a) {
    const ssm_tensor * ts[] = {&a->x, &a->dt, &a->a, &a->b, &a->c, &a->d, &a->z, &a->dt_bias, &a->state, &a->out,
                               &a->final_state};
    const char *       names[] = {"x", "dt", "a", "b", "c", "d", "z", "dt_bias", "state", "out", "final_state"};
    for (int i = 0; i < 11; ++i) SSM_FORWARD_IF_ERROR(ssmi_cuda_check_pointer(ctx, op, names[i], ts[i]));
    return SSM_STATUS_OK;
}

void fill_args(const ssm_mamba2_params * p, const ssmi_mamba2_dims * d, const ssm_mamba2_step_args * a, step_args & A) {
    A.B = (int)d->batch, A.H = (int)d->nheads, A.P = (int)d->headdim, A.N = (int)d->dstate;
    A.R = (int)(d->nheads / d->ngroups);
    A.x = ssmi_cu_view_of(&a->x);
    A.dt = ssmi_cu_view_of(&a->dt);
    A.a = ssmi_cu_view_of(&a->a);
    A.bm = ssmi_cu_view_of(&a->b);
    A.cm = ssmi_cu_view_of(&a->c);
    A.has_d = ssmi_present(&a->d);
    if (A.has_d) A.d = ssmi_cu_view_of(&a->d);
    A.has_z = ssmi_present(&a->z);
    if (A.has_z) A.z = ssmi_cu_view_of(&a->z);
    A.has_bias = ssmi_present(&a->dt_bias);
    if (A.has_bias) A.bias = ssmi_cu_view_of(&a->dt_bias);
    A.softplus = p->dt_softplus != 0;
    A.lo = (float)p->dt_limit_lo;
    A.hi = (float)p->dt_limit_hi;
    A.a_const_n = const_dim(&a->a, 2);
    A.state = a->state.data;
    A.st_dtype = a->state.dtype;
    for (int i = 0; i < 4; ++i) A.ss[i] = a->state.strides[i];
    A.has_fin = ssmi_present(&a->final_state);
    if (A.has_fin) {
        A.fin = a->final_state.data;
        A.fin_dtype = a->final_state.dtype;
        for (int i = 0; i < 4; ++i) A.fs[i] = a->final_state.strides[i];
    }
    A.out = a->out.data;
    A.out_dtype = a->out.dtype;
    for (int i = 0; i < 3; ++i) A.os[i] = a->out.strides[i];
}

int64_t index_at(const ssm_tensor * t, int64_t b) {
    const int64_t off = b * t->strides[0];
    return t->dtype == SSM_DTYPE_I64 ? ((const int64_t *)t->data)[off] : (int64_t)((const int32_t *)t->data)[off];
}

} /* namespace */

extern "C" ssm_status ssmi_cuda_mamba2_step(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                            const ssm_mamba2_step_args * a) {
    static const char op[] = "mamba2_step";
    SSM_RETURN_IF(d->dstate > kMaxN, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: N=%lld is larger than the CUDA backend's limit of %d", op, (long long)d->dstate, kMaxN);
    SSM_RETURN_IF(d->batch > INT32_MAX || d->nheads > INT32_MAX || d->headdim > INT32_MAX || d->slots > INT32_MAX, ctx,
                  SSM_STATUS_UNSUPPORTED, "%s: B=%lld, H=%lld, P=%lld or slots=%lld exceeds the CUDA backend's int32 "
                  "indices", op, (long long)d->batch, (long long)d->nheads, (long long)d->headdim, (long long)d->slots);
    SSM_FORWARD_IF_ERROR(check_pointers(ctx, op, a));
    if (d->batch == 0 || d->nheads == 0 || d->headdim == 0) return SSM_STATUS_OK;

    step_args * A = (step_args *)calloc(1, sizeof(step_args));
    SSM_RETURN_IF(A == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the kernel arguments", op);
    fill_args(p, d, a, *A);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const ssm_tensor * idx = &a->state_batch_indices;
    void *             dslots = NULL;
    ssm_status         st = SSM_STATUS_OK;
    if (ssmi_present(idx) && d->batch <= kInlineSlots) {
        A->idx_mode = 1;
        for (int64_t b = 0; b < d->batch; ++b) {
            const int64_t v = index_at(idx, b);
            A->idx_inline[b] = v < 0 ? -1 : (int)v; /* any negative int64 is a padding row */
        }
    } else if (ssmi_present(idx)) {
        /* Values were validated (< slots ≤ INT32_MAX, or negative for padding): int32 holds them. */
        const size_t bytes = sizeof(int) * (size_t)d->batch;
        int *        host = (int *)malloc(bytes);
        if (host == NULL) {
            free(A);
            return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for %lld slot indices", op,
                              (long long)d->batch);
        }
        for (int64_t b = 0; b < d->batch; ++b) {
            const int64_t v = index_at(idx, b);
            host[b] = v < 0 ? -1 : (int)v;
        }
        st = ssmi_cuda_status(ctx, op, "cudaMallocAsync (slot indices)", cudaMallocAsync(&dslots, bytes, s));
        /* Pageable source: cudaMemcpyAsync returns once it is staged, so host may be freed. */
        if (st == SSM_STATUS_OK)
            st = ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (slot indices)",
                                  cudaMemcpyAsync(dslots, host, bytes, cudaMemcpyHostToDevice, s));
        free(host);
        A->idx_mode = 2;
        A->idx_dev = (const int *)dslots;
    }
    if (st == SSM_STATUS_OK) st = launch(ctx, op, a, *A);
    if (dslots != NULL) {
        const ssm_status fs = ssmi_cuda_status(ctx, op, "cudaFreeAsync (slot indices)", cudaFreeAsync(dslots, s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    free(A);
    return st;
}

/* Selection table of mamba2_step, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_mamba2_step(int32_t i, ssmi_variant_info * out) {
    (void)i, (void)out;
    return 0;
}
