/*
 * step_streaming.cu — the decode step's streaming kernel for vector pools whose rows are a power
 * of two ≤ 256 vectors: every thread issues all of its state loads (RU rows × CPL vectors, 8
 * vectors = 128 bytes) before it uses any of them, with evict-first hints (the pool is touched once
 * per step), in 256-thread blocks of up to 3 per SM (≤ 80 registers; 2 for 4+ vectors per lane):
 * about 96 KiB of reads in flight per SM. A row of N elements has nv = N / VEC vectors spread over
 * L = min(nv, 32) lanes, CPL = nv / L vectors per lane. The block's b, c and per-row scalars (dt
 * processed, v·x, the decay) are computed once into shared memory while the loads are in flight. y
 * is summed per lane in vector order, then over the L lanes by a fixed butterfly: bitwise
 * reproducible. Unlike the registers kernel it takes an a that varies over n, rows of up to 256
 * vectors and plans of rows narrower than a lane group.
 */
#include "step.cuh"

namespace ssmi_m2step {
namespace {

const int       kStreamThreads = 256;
const int       kStreamVectors = 8;   /* 16-byte state vectors per thread, all loaded before use */
const int       kStreamMaxVectorsPerRow = 256;
const long long kStreamMinBlocks = 264; /* fewer blocks (2 per SM of an H200): 2 rows per lane group */

/* Block (row b, head h, slice): rows p = p0 + grp + k·NG (grp < NG, k < RU), each the CPL
 * vectors lane, lane + L, ... of its row. Shared memory: b[N], c[N], then per row of the block
 * v, v·x, decay, x. */
template <class IO, int CPL, int RU>
__global__ void __launch_bounds__(kStreamThreads, CPL >= 4 ? 2 : 3) step_streaming_kernel(const step_args A) {
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
        v = ssmi_dt_rule_f32(v, A.softplus, A.lo, A.hi); /* a NaN dt stays NaN */
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

template <class IO> ssm_status launch_io(ssm_context * ctx, const char * op, step_args & A) {
    const int nv = A.N / IO::VEC;
    A.L = nv < 32 ? nv : 32;
    const int cpl = nv / A.L; /* 1, 2, 4 or 8 */
    int       ru = kStreamVectors / cpl, threads = 0;
    long long blocks = plan_rows(A, ru, kStreamThreads, &threads);
    if (blocks < kStreamMinBlocks && ru > 2) { /* a small batch: more, shorter blocks over more SMs */
        ru = 2;
        blocks = plan_rows(A, ru, kStreamThreads, &threads);
    }
    SSM_RETURN_IF(blocks > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: B·H·P=%lld needs more thread blocks than the CUDA backend launches", op,
                  (long long)A.B * A.H * A.P);
    const size_t       smem = sizeof(float) * (2 * (size_t)A.N + 4 * (size_t)A.rows_per_block);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const unsigned     nb = (unsigned)blocks;
    if (cpl == 1 && ru == 8)
        step_streaming_kernel<IO, 1, 8><<<nb, threads, smem, s>>>(A);
    else if (cpl == 1)
        step_streaming_kernel<IO, 1, 2><<<nb, threads, smem, s>>>(A);
    else if (cpl == 2 && ru == 4)
        step_streaming_kernel<IO, 2, 4><<<nb, threads, smem, s>>>(A);
    else if (cpl == 2)
        step_streaming_kernel<IO, 2, 2><<<nb, threads, smem, s>>>(A);
    else if (cpl == 4)
        step_streaming_kernel<IO, 4, 2><<<nb, threads, smem, s>>>(A);
    else
        step_streaming_kernel<IO, 8, 1><<<nb, threads, smem, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "step_streaming_kernel launch");
    return SSM_STATUS_OK;
}

template <class IO> int applies_io(const step_args & A) {
    const int nv = A.N / IO::VEC;
    return nv >= 1 && nv <= kStreamMaxVectorsPerRow && (nv & (nv - 1)) == 0;
}

} /* namespace */

int step_streaming_applies(const step_args & A) {
    switch (A.st_dtype) {
        case SSM_DTYPE_F32: return applies_io<vec_f32>(A);
        case SSM_DTYPE_BF16: return applies_io<vec_bf16>(A);
        default: return applies_io<vec_f16>(A);
    }
}

ssm_status launch_step_streaming(ssm_context * ctx, const char * op, step_args & A) {
    switch (A.st_dtype) {
        case SSM_DTYPE_F32: return launch_io<vec_f32>(ctx, op, A);
        case SSM_DTYPE_BF16: return launch_io<vec_bf16>(ctx, op, A);
        default: return launch_io<vec_f16>(ctx, op, A);
    }
}

} /* namespace ssmi_m2step */
