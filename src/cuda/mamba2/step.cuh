/*
 * step.cuh — what the Mamba-2 decode step's kernel files (step_registers.cu, step_streaming.cu,
 * step_rows.cu) and its host code (mamba2.cu) share.
 *
 * The step is a stream over the state pool: every state element is read once and (with
 * final_state) written once, with 5 FLOPs in between, so the kernels are built for memory
 * bandwidth. Per (b, h, p): v = clamp(softplus?(dt + dt_bias), lo, hi) (ssmi_dt_rule_f32);
 * s = state·exp(a·v) + v·x·b; y = Σ_n s·c (the unrounded s), then + d·x and the z gate. A per-head
 * a (stride 0 over n) costs one exp per row instead of one per element. Everything is fp32 (FFMA);
 * y is reduced over the lanes of a row with a fixed butterfly, so results are bitwise identical
 * run to run. A padding row (slot < 0) writes out = 0 and reads/writes no state.
 *
 * Slots: the indices are a host view; up to kInlineSlots rows travel as int32 in the kernel
 * arguments (no copy, no synchronisation), more are copied to a stream-ordered device buffer; a
 * device view is converted on the device. The general form (step_args.general: several tokens per
 * row, write slots, slot tables, intermediate_states) reads its rows from the plan instead and runs
 * on the rows kernel only: each lane group keeps its state row in shared memory (fp32) from token
 * to token.
 * The state may be updated in place (final_state == state): each element is read and then
 * written by the same thread, and only through plain (coherent) loads.
 */
#ifndef SSMI_CUDA_MAMBA2_STEP_CUH
#define SSMI_CUDA_MAMBA2_STEP_CUH

#include <stdint.h>

extern "C" {
#include "../../core/ssmi.h"
}
#include "../../core/ssmi_scalar.h"
#include "../common/cuda_common.cuh"
#include "../common/step_plan.cuh"

namespace ssmi_m2step {

const int kInlineSlots = 256; /* slot indices passed in the kernel arguments */

struct step_args {
    int          B, H, P, N, R;        /* R = H / G                                           */
    int          L, NG, rows_per_block; /* lanes per state row, rows per pass, rows per block  */
    int          nslices;              /* blocks per (row, head)                               */
    ssmi_cu_view x, dt, a, bm, cm, d, z, bias;
    int          has_d, has_z, has_bias, softplus, a_const_n, has_fin;
    int          bc_vec;               /* registers kernel: b and c as 4-element pieces         */
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
    /* The general form (several tokens per row, write slots, slot tables, intermediate_states):
     * the rows come from plan (common/step_plan.cuh) and only the rows kernel takes it. */
    int               general;
    ssmi_cu_step_plan plan;
    int               has_inter;
    void *            inter;
    int               inter_dtype;
    long long         is[4];
    int          idx_mode; /* 0: slot = row; 1: idx_inline; 2: idx_dev                         */
    const int *  idx_dev;
    int          idx_inline[kInlineSlots];
};

/* ---- 16-bit pairs ------------------------------------------------------------------------------ */

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

__device__ __forceinline__ int slot_of(const step_args & A, int b) {
    if (A.idx_mode == 1) return A.idx_inline[b];
    if (A.idx_mode == 2) return A.idx_dev[b];
    return b;
}

/* 16-byte state vectors of contiguous, 16-byte aligned pools (registers and streaming kernels):
 * VEC elements, unpacked to and packed from fp32. */
struct vec_f32 {
    static const int VEC = 4;
    __device__ static void unpack(const uint4 & q, float * v) {
        v[0] = __uint_as_float(q.x), v[1] = __uint_as_float(q.y), v[2] = __uint_as_float(q.z), v[3] = __uint_as_float(q.w);
    }
    __device__ static uint4 pack(const float * v) {
        return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
    }
};

struct vec_bf16 {
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

struct vec_f16 {
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

/* The plan of the registers and streaming kernels for ru rows per lane group: NG groups of L lanes
 * per block of at most max_threads (no more groups than P needs), a whole number of warps. Returns
 * the block count. */
inline long long plan_rows(step_args & A, int ru, int max_threads, int * threads) {
    const int need = (A.P + ru - 1) / ru;
    A.NG = max_threads / A.L < need ? max_threads / A.L : need;
    A.rows_per_block = A.NG * ru;
    A.nslices = (A.P + A.rows_per_block - 1) / A.rows_per_block;
    *threads = (A.NG * A.L + 31) / 32 * 32;
    return (long long)A.B * A.H * A.nslices;
}

/* ---- the launches each kernel file provides ---------------------------------------------------
 * "Vector pools" below: state (and final_state, of the same dtype) f32, f16 or bf16 with rows that
 * are contiguous and 16-byte aligned, N a multiple of the 16-byte vector (mamba2.cu checks it). */

/* step_registers.cu: vector pools with a constant over n and N / VEC a power of two ≤ 64, whose
 * rows span at least as many lanes as the small-batch plan puts rows in a lane group. */
int        step_registers_applies(const step_args & A);
ssm_status launch_step_registers(ssm_context * ctx, const char * op, const ssm_mamba2_step_args * a, step_args & A);

/* step_streaming.cu: vector pools with N / VEC a power of two ≤ 256. */
int        step_streaming_applies(const step_args & A);
ssm_status launch_step_streaming(ssm_context * ctx, const char * op, step_args & A);

/* step_rows.cu: vector pools (vec = 1: 16-byte loads and stores) or any pool (vec = 0: one element
 * per lane through the strides); the only kernel of the general form. */
ssm_status launch_step_rows(ssm_context * ctx, const char * op, step_args & A, int vec);

} /* namespace ssmi_m2step */

#endif /* SSMI_CUDA_MAMBA2_STEP_CUH */
