/* cuda_common.cuh — shared pieces of the CUDA backend's .cu files: error conversion, the
 * context's stream, and element loads/stores of any float dtype through strides. */
#ifndef SSMI_CUDA_COMMON_CUH
#define SSMI_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* DEVICE_ERROR with cudaGetErrorString when err != cudaSuccess ("op: what failed: ..."). */
ssm_status   ssmi_cuda_status(ssm_context * ctx, const char * op, const char * what, cudaError_t err);
cudaStream_t ssmi_cuda_stream(const ssm_context * ctx);

/* What the kernel choices ask of the current device: compute capability, the per-block opt-in
 * shared memory and the SM count. */
struct ssmi_cuda_props {
    int major, minor, smem_optin, sms;
};
ssm_status ssmi_cuda_current_props(ssm_context * ctx, const char * op, ssmi_cuda_props * pr);

/* A float tensor as the kernels see it: base pointer, dtype, strides in elements. */
struct ssmi_cu_view {
    const void * p;
    int          dtype;
    long long    s[SSM_MAX_DIMS];
};

static inline ssmi_cu_view ssmi_cu_view_of(const ssm_tensor * t) {
    ssmi_cu_view v;
    v.p = t->data;
    v.dtype = t->dtype;
    for (int i = 0; i < SSM_MAX_DIMS; ++i) v.s[i] = i < t->ndim ? (long long)t->strides[i] : 0;
    return v;
}

/* The view of an absent tensor: all zero (p == NULL marks it absent). */
static inline ssmi_cu_view ssmi_cu_null_view() {
    ssmi_cu_view v;
    v.p = NULL;
    v.dtype = 0;
    for (int i = 0; i < SSM_MAX_DIMS; ++i) v.s[i] = 0;
    return v;
}

/* A tensor's view, or the null view when it is absent (t NULL or t->data NULL). */
static inline ssmi_cu_view ssmi_cu_view_or_null(const ssm_tensor * t) {
    return t != NULL && t->data != NULL ? ssmi_cu_view_of(t) : ssmi_cu_null_view();
}

/* Element `off` of a float tensor of any dtype, as float (f64 is rounded). */
__device__ __forceinline__ float ssmi_cu_ld(const void * p, int dtype, long long off) {
    switch (dtype) {
        case SSM_DTYPE_F32: return __ldg((const float *)p + off);
        case SSM_DTYPE_F16: return __half2float(((const __half *)p)[off]);
        case SSM_DTYPE_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[off]);
        case SSM_DTYPE_F64: return (float)__ldg((const double *)p + off);
        default: return 0.0f;
    }
}

/* Stores v rounded to nearest even into the tensor's dtype. */
__device__ __forceinline__ void ssmi_cu_st(void * p, int dtype, long long off, float v) {
    switch (dtype) {
        case SSM_DTYPE_F32: ((float *)p)[off] = v; break;
        case SSM_DTYPE_F16: ((__half *)p)[off] = __float2half_rn(v); break;
        case SSM_DTYPE_BF16: ((__nv_bfloat16 *)p)[off] = __float2bfloat16_rn(v); break;
        case SSM_DTYPE_F64: ((double *)p)[off] = (double)v; break;
        default: break;
    }
}

/* Host-side layout tests of the fast paths. 1: rows of t (a 16-bit dtype `dt`, innermost
 * dimension `inner` long) can be read in 16-byte pieces: 16-byte aligned base, unit inner
 * stride, inner and every outer stride multiples of 8 elements. */
static inline int ssmi_cu_vec_rows(const ssm_tensor * t, int32_t dt, int64_t inner) {
    if (t->data == NULL || t->dtype != dt || inner % 8 != 0 || ((uintptr_t)t->data & 15) != 0) return 0;
    if (t->strides[t->ndim - 1] != 1) return 0;
    for (int i = 0; i < t->ndim - 1; ++i)
        if (t->strides[i] % 8 != 0) return 0;
    return 1;
}
/* 1: t (innermost dimension even) can be read or written in aligned pairs of elements. */
static inline int ssmi_cu_vec_pairs(const ssm_tensor * t, int64_t inner) {
    const size_t es = t->dtype == SSM_DTYPE_F32 ? 4 : t->dtype == SSM_DTYPE_F64 ? 8 : 2;
    if (t->data == NULL || inner % 2 != 0 || ((uintptr_t)t->data % (2 * es)) != 0) return 0;
    if (t->strides[t->ndim - 1] != 1) return 0;
    for (int i = 0; i < t->ndim - 1; ++i)
        if (t->strides[i] % 2 != 0) return 0;
    return 1;
}

#define SSMI_CU_CHECK_LAUNCH(ctx, op, name)                                                   \
    do {                                                                                    \
        const cudaError_t ssmi_e_ = cudaGetLastError();                                     \
        if (ssmi_e_ != cudaSuccess) return ssmi_cuda_status((ctx), (op), (name), ssmi_e_); \
    } while (0)

/* The decode steps' row sums: v[k] (k < RU) is one lane's part of row k's sum, each row spread over
 * the L lanes (a power of two) of the lane's group. A fixed xor butterfly with the RU rows'
 * shuffles side by side (one shuffle latency per step, not per row and step); returns row
 * `lane`'s sum to lane k = lane < RU, 0 to the others. v is left holding the full sums. */
template <int RU> __device__ __forceinline__ float ssmi_rows_sum(float (&v)[RU], int L, int lane, unsigned mask) {
    for (int off = L >> 1; off > 0; off >>= 1)
#pragma unroll
        for (int k = 0; k < RU; ++k) v[k] += __shfl_xor_sync(mask, v[k], off);
    float own = 0.0f;
#pragma unroll
    for (int k = 0; k < RU; ++k)
        if (lane == k) own = v[k];
    return own;
}

#endif /* SSMI_CUDA_COMMON_CUH */
