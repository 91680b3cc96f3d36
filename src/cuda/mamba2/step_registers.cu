/*
 * step_registers.cu — the decode step's registers kernel: every load of a warp in one batch, no
 * shared memory, no barrier. A warp issues, at its start and before it uses any of them, its state
 * loads, the b and c values of its lanes' columns and its rows' scalars, so one memory latency
 * covers the warp's whole life (staging b, c, x, dt, a through shared memory behind a barrier, as
 * the streaming kernel does, leaves blocks waiting on small dependent loads). Warps are independent:
 *   - a row of N elements is nv = N / VEC 16-byte vectors on L = min(nv, 32) lanes, CPL =
 *     nv / L vectors per lane (1 or 2: N ≤ 256 fp32, ≤ 512 16-bit); a lane's columns are the
 *     same in every row it holds, so b and c of those columns sit in its registers (16-byte
 *     loads when b and c are contiguous and aligned);
 *   - a lane group (L lanes) holds RU consecutive rows p0 .. p0 + RU − 1 (RU ≤ L): 32 state
 *     elements per thread (8 vectors = 128 bytes fp32, 4 = 64 bytes 16-bit) in the large-batch
 *     plan, a quarter of that for small batches (more blocks over the SMs);
 *   - lane k of a group owns row p0 + k: it loads x, dt, dt_bias, a, d, z of that row, computes
 *     the processed dt, dt·x, the decay and the gate while the state loads are in flight, and
 *     hands dt·x and the decay to the group's lanes by shuffles (no memory round trip);
 *   - per row: s' = s·decay + (dt·x)·b stored with st.global.cs, y summed per lane in column
 *     order, then over the L lanes by a fixed xor butterfly (bitwise reproducible; the streaming
 *     kernel's order); the owner lane adds d·x, applies the gate and writes out.
 * Typed loads (no dtype switch) for the usual input dtypes: all fp32, or x/dt/b/c/z bf16 with
 * fp32 a/d/dt_bias; other mixes go through ssmi_cu_ld (the loads are still all issued first).
 * Registers: ≤ 64 (128 threads, 8 blocks per SM), so an SM holds 1024 threads and, at the start of
 * its blocks, up to 8 × 128 × 128 B = 128 KiB of fp32 state reads in flight (64 KiB for 16-bit
 * pools). a must be constant over n (per head, or per (head, p)).
 */
#include "step.cuh"

namespace ssmi_m2step {
namespace {

const int       kRegsThreads = 128;
const int       kRegsMinBlocksPerSM = 8; /* ≤ 64 registers per thread (6 blocks, ≤ 80, for 2 vectors a lane) */
const int       kRegsElems = 32;         /* state elements per thread in the large-batch plan */
const long long kRegsMinBlocks = 264;    /* fewer blocks (2 per SM): the small-batch plan   */

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
 * of two ≤ 32, a_const_n, and a vector pool (contiguous rows, 16-byte aligned). */
template <class IO, class IN, int CPL, int RU>
__global__ void __launch_bounds__(kRegsThreads, CPL == 1 ? kRegsMinBlocksPerSM : 6) step_registers_kernel(const step_args A) {
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
        v = ssmi_dt_rule_f32(v, A.softplus, A.lo, A.hi); /* a NaN dt stays NaN */
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

template <class IO, class IN, int CPL, int RU>
cudaError_t launch_kernel(const step_args & A, unsigned blocks, int threads, cudaStream_t s) {
    step_registers_kernel<IO, IN, CPL, RU><<<blocks, threads, 0, s>>>(A);
    return cudaGetLastError();
}

/* The instance for CPL vectors per lane: RU_BIG rows per group (kRegsElems elements per thread)
 * or, small = 1, a quarter of them (at least 1). */
template <class IO, class IN, int CPL>
cudaError_t launch_cpl(const step_args & A, int small, unsigned blocks, int threads, cudaStream_t s) {
    const int RU_BIG = kRegsElems / (CPL * IO::VEC);
    const int RU_SMALL = RU_BIG / 4 > 1 ? RU_BIG / 4 : 1;
    return small ? launch_kernel<IO, IN, CPL, RU_SMALL>(A, blocks, threads, s)
                 : launch_kernel<IO, IN, CPL, RU_BIG>(A, blocks, threads, s);
}

template <class IO, class IN>
cudaError_t launch_in(const step_args & A, int cpl, int small, unsigned blocks, int threads, cudaStream_t s) {
    return cpl == 1 ? launch_cpl<IO, IN, 1>(A, small, blocks, threads, s)
                    : launch_cpl<IO, IN, 2>(A, small, blocks, threads, s);
}

/* The input class of the typed loads: 0 all fp32; 1 x, dt, b, c, z bf16 and a, d, dt_bias
 * fp32; 2 anything else (ssmi_cu_ld). */
int input_class(const ssm_mamba2_step_args * a) {
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
int bc_vec(const ssm_tensor * t) {
    const int64_t es = (int64_t)ssm_dtype_size((ssm_dtype)t->dtype);
    return t->strides[2] == 1 && t->strides[0] % 4 == 0 && t->strides[1] % 4 == 0 &&
           ((uintptr_t)t->data % (uintptr_t)(4 * es)) == 0;
}

/* The plan's parameters for a vector count nv (a power of two ≤ 64): lanes per row, vectors per
 * lane, rows per lane group in the large- and small-batch plans. */
struct regs_shape {
    int L, cpl, ru_big, ru_small;
};
regs_shape shape_of(int nv, int vec) {
    regs_shape r;
    r.L = nv < 32 ? nv : 32;
    r.cpl = nv / r.L; /* 1 or 2 */
    r.ru_big = kRegsElems / (r.cpl * vec);
    r.ru_small = r.ru_big / 4 > 1 ? r.ru_big / 4 : 1;
    return r;
}

template <class IO> int applies_io(const step_args & A) {
    const int nv = A.N / IO::VEC;
    if (!A.a_const_n || nv < 1 || nv > 64 || (nv & (nv - 1)) != 0) return 0;
    const regs_shape r = shape_of(nv, IO::VEC);
    return r.L >= r.ru_small; /* a row spans at least the small plan's rows per group */
}

template <class IO>
ssm_status launch_io(ssm_context * ctx, const char * op, const ssm_mamba2_step_args * a, step_args & A) {
    const regs_shape r = shape_of(A.N / IO::VEC, IO::VEC);
    const int        cpl = r.cpl, ru_big = r.ru_big, ru_small = r.ru_small;
    A.L = r.L;
    int       small = 0, threads = 0;
    long long blocks = 0;
    if (A.L >= ru_big) blocks = plan_rows(A, ru_big, kRegsThreads, &threads);
    if (A.L < ru_big || blocks < kRegsMinBlocks) { /* a small batch (or short rows): more, shorter blocks */
        small = 1;
        blocks = plan_rows(A, ru_small, kRegsThreads, &threads);
    }
    SSM_RETURN_IF(blocks > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: B·H·P=%lld needs more thread blocks than the CUDA backend launches", op,
                  (long long)A.B * A.H * A.P);
    const int cls = input_class(a);
    A.bc_vec = cls != 2 && bc_vec(&a->b) && bc_vec(&a->c);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const unsigned     nb = (unsigned)blocks;
    cudaError_t        e;
    if (cls == 0)
        e = launch_in<IO, in_f32>(A, cpl, small, nb, threads, s);
    else if (cls == 1)
        e = launch_in<IO, in_bf16>(A, cpl, small, nb, threads, s);
    else
        e = launch_in<IO, in_any>(A, cpl, small, nb, threads, s);
    return ssmi_cuda_status(ctx, op, "step_registers_kernel launch", e);
}

} /* namespace */

int step_registers_applies(const step_args & A) {
    switch (A.st_dtype) {
        case SSM_DTYPE_F32: return applies_io<vec_f32>(A);
        case SSM_DTYPE_BF16: return applies_io<vec_bf16>(A);
        default: return applies_io<vec_f16>(A);
    }
}

ssm_status launch_step_registers(ssm_context * ctx, const char * op, const ssm_mamba2_step_args * a, step_args & A) {
    switch (A.st_dtype) {
        case SSM_DTYPE_F32: return launch_io<vec_f32>(ctx, op, a, A);
        case SSM_DTYPE_BF16: return launch_io<vec_bf16>(ctx, op, a, A);
        default: return launch_io<vec_f16>(ctx, op, a, A);
    }
}

} /* namespace ssmi_m2step */
