/*
 * step_rows.cu — the decode step's row kernel, for every pool the other two cannot take: one
 * thread block (128 threads) per (batch row, head, slice of P); inside it a row of N state
 * elements belongs to L lanes (L a power of two ≤ 32, so one warp holds 32/L rows) and each thread
 * keeps U rows in flight at once (U = 4 when that still gives enough blocks). Vector pools load and
 * store 16 bytes per lane (4 fp32 or 8 fp16/bf16 elements; N any multiple of the vector); every
 * other pool (strided, f64, misaligned, a final pool of another dtype) one element per lane through
 * the strides. b and c of the row's group are staged in shared memory as fp32.
 * It is also the kernel of the general form (step.cuh: several tokens per row, write slots, slot
 * tables, intermediate_states): a row per lane group, its state kept in shared memory between
 * tokens (step_rows_general).
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

/* b and c of token t, group g into shared memory (bs, cs: N each) as fp32. */
__device__ __forceinline__ void stage_bc(const step_args & A, int t, int g, float * bs, float * cs) {
    for (int n = threadIdx.x; n < A.N; n += blockDim.x) {
        bs[n] = ssmi_cu_ld(A.bm.p, A.bm.dtype, (long long)t * A.bm.s[0] + g * A.bm.s[1] + n * A.bm.s[2]);
        cs[n] = ssmi_cu_ld(A.cm.p, A.cm.dtype, (long long)t * A.cm.s[0] + g * A.cm.s[1] + n * A.cm.s[2]);
    }
}

/* Row p of token t, head h: x, the processed dt v, and (ROW_DECAY) the decay exp(a·v). */
template <bool ROW_DECAY>
__device__ __forceinline__ void row_scalars(const step_args & A, int t, int h, int p, float & xv, float & vv,
                                            float & dec) {
    xv = ssmi_cu_ld(A.x.p, A.x.dtype, (long long)t * A.x.s[0] + h * A.x.s[1] + p * A.x.s[2]);
    float v = ssmi_cu_ld(A.dt.p, A.dt.dtype, (long long)t * A.dt.s[0] + h * A.dt.s[1] + p * A.dt.s[2]);
    if (A.has_bias) v += ssmi_cu_ld(A.bias.p, A.bias.dtype, h * A.bias.s[0] + p * A.bias.s[1]);
    vv = ssmi_dt_rule_f32(v, A.softplus, A.lo, A.hi); /* a NaN dt stays NaN */
    dec = ROW_DECAY ? expf(ssmi_cu_ld(A.a.p, A.a.dtype, h * A.a.s[0] + p * A.a.s[1]) * vv) : 0.0f;
}

/* y of row p, token t (the sum over the row's lanes) + d·x, the gate; stored to out. */
__device__ __forceinline__ void row_out(const step_args & A, int t, int h, int p, float y, float xv) {
    if (A.has_d) y = fmaf(ssmi_cu_ld(A.d.p, A.d.dtype, h * A.d.s[0] + p * A.d.s[1]), xv, y);
    if (A.has_z) {
        const float zz = ssmi_cu_ld(A.z.p, A.z.dtype, (long long)t * A.z.s[0] + h * A.z.s[1] + p * A.z.s[2]);
        y *= zz / (1.0f + expf(-zz));
    }
    ssmi_cu_st(A.out, A.out_dtype, (long long)t * A.os[0] + h * A.os[1] + p * A.os[2], y);
}

/* The general form, block (row b, head h, slice): lane group grp holds row p = slice·NG + grp
 * (rows_per_block = NG), its N fp32 state elements in shared memory (st) from the read slot
 * through the row's tokens tok[b] .. tok[b+1] − 1 (from the plan); each lane keeps the elements
 * n = lane·VEC + i·L·VEC (+ 0 .. VEC − 1), the same ones every token, so no barrier guards st.
 * After token j: intermediate_states[t], and with a token table the slot table[b, j]; after
 * the last token (or the read state, for a row of none) the write slot. Every slot is read
 * before this thread writes its own elements anywhere, so a row may write its read slot. */
template <class IO, bool ROW_DECAY>
__device__ __forceinline__ void step_rows_general(const step_args & A, float * sbc, int b, int h, int slice) {
    const int  VEC = IO::VEC;
    const int  L = A.L, lane = (int)threadIdx.x & (L - 1), grp = (int)threadIdx.x / L;
    const int  p = slice * A.rows_per_block + grp;
    const bool ok = grp < A.NG && p < A.P;
    const int  t0 = A.plan.tok[b], t1 = A.plan.tok[b + 1], rs = A.plan.read[b];
    float *    bs = sbc;
    float *    cs = sbc + A.N;
    float *    st = sbc + (2 + grp) * A.N;
    if (rs < 0) { /* padding row: out and intermediate_states 0, no slot touched */
        for (int t = t0; t < t1 && ok; ++t) {
            if (lane == 0) ssmi_cu_st(A.out, A.out_dtype, (long long)t * A.os[0] + h * A.os[1] + p * A.os[2], 0.0f);
            if (A.has_inter)
                for (int n = lane; n < A.N; n += L)
                    ssmi_cu_st(A.inter, A.inter_dtype, (long long)t * A.is[0] + h * A.is[1] + p * A.is[2] + n * A.is[3],
                               0.0f);
        }
        return;
    }
    const long long so = (long long)rs * A.ss[0] + h * A.ss[1] + (long long)p * A.ss[2];
    for (int n0 = lane * VEC; n0 < A.N && ok; n0 += L * VEC) {
        float v[VEC];
        IO::load(A, so, n0, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) st[n0 + j] = v[j];
    }
    const int g = h / A.R;
    for (int t = t0; t < t1; ++t) {
        __syncthreads(); /* the previous token's b and c are read */
        stage_bc(A, t, g, bs, cs);
        float xv = 0.0f, vv = 0.0f, dec = 0.0f, y = 0.0f;
        if (ok) row_scalars<ROW_DECAY>(A, t, h, p, xv, vv, dec);
        const float     coef = vv * xv;
        const int       ws = A.plan.table != NULL ? A.plan.table[(long long)b * A.plan.LC + (t - t0)] : -1;
        const long long io = (long long)t * A.is[0] + h * A.is[1] + (long long)p * A.is[2];
        const long long fo = (long long)ws * A.fs[0] + h * A.fs[1] + (long long)p * A.fs[2];
        __syncthreads(); /* b and c staged */
        for (int n0 = lane * VEC; n0 < A.N && ok; n0 += L * VEC) {
            float v[VEC];
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const int   n = n0 + j;
                const float dk =
                    ROW_DECAY ? dec
                              : expf(ssmi_cu_ld(A.a.p, A.a.dtype, h * A.a.s[0] + p * A.a.s[1] + n * A.a.s[2]) * vv);
                const float s = fmaf(st[n], dk, coef * bs[n]);
                y = fmaf(s, cs[n], y);
                st[n] = v[j] = s;
                if (A.has_inter) ssmi_cu_st(A.inter, A.inter_dtype, io + n * A.is[3], s);
            }
            if (ws >= 0 && A.has_fin) IO::store(A, fo, n0, v);
        }
        /* y over the L lanes (the fixed butterfly of the single-token form) */
        for (int off = L >> 1; off > 0; off >>= 1) y += __shfl_xor_sync(0xffffffffu, y, off);
        if (ok && lane == 0) row_out(A, t, h, p, y, xv);
    }
    const int       ws = A.plan.table == NULL && A.has_fin ? A.plan.write[b] : -1;
    const long long fo = (long long)ws * A.fs[0] + h * A.fs[1] + (long long)p * A.fs[2];
    for (int n0 = lane * VEC; n0 < A.N && ok && ws >= 0; n0 += L * VEC) {
        float v[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = st[n0 + j];
        IO::store(A, fo, n0, v);
    }
}

/* Block (row b, head h, slice): rows p = p0 + grp + k·NG (k < U) of the head. ROW_DECAY: a is
 * constant over n (one exp per row); else one exp per element. GENERAL: the general form
 * (step_rows_general; U = 1); b is then a row of the plan, else a token. */
template <class IO, int U, bool ROW_DECAY, bool GENERAL>
__global__ void __launch_bounds__(kStepThreads, (U == 4 && !ROW_DECAY && IO::VEC == 8) ? 4 : kMinBlocksPerSM)
    step_rows_kernel(const step_args A) {
    const int VEC = IO::VEC;
    extern __shared__ float sbc[]; /* b (N) then c (N) of the row's group, fp32 (GENERAL: then NG state rows) */
    const long long blk = blockIdx.x;
    const int       slice = (int)(blk % A.nslices);
    const long long bh = blk / A.nslices;
    const int       h = (int)(bh % A.H), b = (int)(bh / A.H);
    if (GENERAL) {
        step_rows_general<IO, ROW_DECAY>(A, sbc, b, h, slice);
        return;
    }
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
    stage_bc(A, b, g, bs, cs);

    /* Per-row values: processed dt, v·x, the decay of a per-row a. */
    float xv[U], vv[U], coef[U], dec[U], y[U];
#pragma unroll
    for (int k = 0; k < U; ++k) {
        xv[k] = vv[k] = coef[k] = dec[k] = y[k] = 0.0f;
        if (!ok[k]) continue;
        row_scalars<ROW_DECAY>(A, b, h, pr[k], xv[k], vv[k], dec[k]);
        coef[k] = vv[k] * xv[k];
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
    for (int k = 0; k < U; ++k)
        if (ok[k]) row_out(A, b, h, pr[k], y[k], xv[k]);
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
        step_rows_kernel<IO, 4, true, false><<<(unsigned)blocks, kStepThreads, smem, s>>>(A);
    else if (u == 4)
        step_rows_kernel<IO, 4, false, false><<<(unsigned)blocks, kStepThreads, smem, s>>>(A);
    else if (A.a_const_n)
        step_rows_kernel<IO, 1, true, false><<<(unsigned)blocks, kStepThreads, smem, s>>>(A);
    else
        step_rows_kernel<IO, 1, false, false><<<(unsigned)blocks, kStepThreads, smem, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "step_rows_kernel launch");
    return SSM_STATUS_OK;
}

/* The general form: one row per lane group (NG groups of L lanes), b and c and the groups'
 * state rows in shared memory (2 + NG rows of N fp32: at most 96 KiB at N = 4096, over the
 * default 48 KiB, so the kernel is given the room it needs). */
template <class IO, bool ROW_DECAY>
ssm_status launch_general_decay(ssm_context * ctx, const char * op, const step_args & A, unsigned blocks, size_t smem,
                                cudaStream_t s) {
    const void * fn = (const void *)step_rows_kernel<IO, 1, ROW_DECAY, true>;
    if (smem > 48 * 1024)
        SSM_FORWARD_IF_ERROR(
            ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute (step_rows_kernel shared memory)",
                             cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)));
    step_rows_kernel<IO, 1, ROW_DECAY, true><<<blocks, kStepThreads, smem, s>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "step_rows_kernel launch");
    return SSM_STATUS_OK;
}

template <class IO>
ssm_status launch_general(ssm_context * ctx, const char * op, step_args & A) {
    const int nv = (A.N + IO::VEC - 1) / IO::VEC;
    A.L = pow2_at_least(nv < 1 ? 1 : nv);
    if (A.L > 32) A.L = 32;
    A.NG = kStepThreads / A.L;
    A.rows_per_block = A.NG;
    A.nslices = (A.P + A.rows_per_block - 1) / A.rows_per_block;
    const long long blocks = (long long)A.B * A.H * A.nslices;
    SSM_RETURN_IF(blocks > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: rows·H·P=%lld needs more thread blocks than the CUDA backend launches", op,
                  (long long)A.B * A.H * A.P);
    const size_t       smem = sizeof(float) * (size_t)(2 + A.NG) * (size_t)A.N;
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    return A.a_const_n ? launch_general_decay<IO, true>(ctx, op, A, (unsigned)blocks, smem, s)
                       : launch_general_decay<IO, false>(ctx, op, A, (unsigned)blocks, smem, s);
}

template <class IO>
ssm_status launch_form(ssm_context * ctx, const char * op, step_args & A) {
    return A.general ? launch_general<IO>(ctx, op, A) : launch_io<IO>(ctx, op, A);
}

} /* namespace */

ssm_status launch_step_rows(ssm_context * ctx, const char * op, step_args & A, int vec) {
    if (!vec) return launch_form<io_generic>(ctx, op, A);
    switch (A.st_dtype) {
        case SSM_DTYPE_F32: return launch_form<io_f32>(ctx, op, A);
        case SSM_DTYPE_BF16: return launch_form<io_bf16>(ctx, op, A);
        default: return launch_form<io_f16>(ctx, op, A);
    }
}

} /* namespace ssmi_m2step */
