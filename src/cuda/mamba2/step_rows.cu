/*
 * step_rows.cu — the decode step's row kernel, for every pool the other two cannot take: one
 * thread block (128 threads) per (batch row, head, slice of P); inside it a row of N state
 * elements belongs to L lanes (L a power of two ≤ 32, so one warp holds 32/L rows) and each thread
 * keeps U rows in flight at once (U = 4 when that still gives enough blocks). Vector pools load and
 * store 16 bytes per lane (4 fp32 or 8 fp16/bf16 elements; N any multiple of the vector); every
 * other pool (strided, f64, misaligned, a final pool of another dtype) one element per lane through
 * the strides. b and c of the row's group are staged in shared memory as fp32.
 * Limits: N ≤ 4096 (b and c in shared memory), B·H·slices < 2^31 blocks.
 */
#include "step.cuh"

namespace ssmi_m2step {
namespace {

const int       kStepThreads = 128;
const long long kMinBlocks = 1024; /* below this, one row per thread (more, smaller blocks) */
const int       kMinBlocksPerSM = 5; /* ≤ 96 registers: 20 warps per SM, 40 KiB of loads in flight */

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

/* Block (row b, head h, slice): rows p = p0 + grp + k·NG (k < U) of the head. ROW_DECAY: a is
 * constant over n (one exp per row); else one exp per element. */
template <class IO, int U, bool ROW_DECAY>
__global__ void __launch_bounds__(kStepThreads, (U == 4 && !ROW_DECAY && IO::VEC == 8) ? 4 : kMinBlocksPerSM)
    step_rows_kernel(const step_args A) {
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
        v = ssmi_dt_rule_f32(v, A.softplus, A.lo, A.hi); /* a NaN dt stays NaN */
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

int pow2_at_least(int v) {
    int l = 1;
    while (l < v) l *= 2;
    return l;
}

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
        step_rows_kernel<IO, 4, true><<<(unsigned)blocks, kStepThreads, smem, s>>>(A);
    else if (u == 4)
        step_rows_kernel<IO, 4, false><<<(unsigned)blocks, kStepThreads, smem, s>>>(A);
    else if (A.a_const_n)
        step_rows_kernel<IO, 1, true><<<(unsigned)blocks, kStepThreads, smem, s>>>(A);
    else
        step_rows_kernel<IO, 1, false><<<(unsigned)blocks, kStepThreads, smem, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "step_rows_kernel launch");
    return SSM_STATUS_OK;
}

} /* namespace */

ssm_status launch_step_rows(ssm_context * ctx, const char * op, step_args & A, int vec) {
    if (!vec) return launch_io<io_generic>(ctx, op, A);
    switch (A.st_dtype) {
        case SSM_DTYPE_F32: return launch_io<io_f32>(ctx, op, A);
        case SSM_DTYPE_BF16: return launch_io<io_bf16>(ctx, op, A);
        default: return launch_io<io_f16>(ctx, op, A);
    }
}

} /* namespace ssmi_m2step */
