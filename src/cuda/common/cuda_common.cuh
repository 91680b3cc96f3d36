/* cuda_common.cuh — shared pieces of the CUDA backend's .cu files: error conversion, the
 * context's stream, and element loads/stores of any float dtype through strides. */
#ifndef SSMI_CUDA_COMMON_CUH
#define SSMI_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* DEVICE_ERROR with cudaGetErrorString when err != cudaSuccess ("op: what failed: ..."), except
 * cudaErrorMemoryAllocation: OUT_OF_MEMORY ("op: what failed: out of device memory"). */
ssm_status   ssmi_cuda_status(ssm_context * ctx, const char * op, const char * what, cudaError_t err);
cudaStream_t ssmi_cuda_stream(const ssm_context * ctx);

/* Every device allocation of the backend goes through these two (the drop-in forms of
 * cudaMallocAsync/cudaFreeAsync): ctx's device allocator (ssm_context_params.device_allocator)
 * with stream s when it has one, else cudaMallocAsync/cudaFreeAsync on s. bytes == 0 gives NULL;
 * freeing NULL does nothing. A failure is cudaErrorMemoryAllocation (the allocator returned
 * NULL, or the device is out of memory) or cudaMallocAsync's error, which is cleared from the
 * runtime's last error so that a later launch check does not report it again. */
cudaError_t ssmi_cuda_alloc_async(ssm_context * ctx, void ** ptr, size_t bytes, cudaStream_t s);
cudaError_t ssmi_cuda_free_async(ssm_context * ctx, void * ptr, cudaStream_t s);
template <typename T> static inline cudaError_t ssmi_cuda_alloc_async(ssm_context * ctx, T ** ptr, size_t bytes,
                                                                      cudaStream_t s) {
    void *            p = NULL;
    const cudaError_t e = ssmi_cuda_alloc_async(ctx, &p, bytes, s);
    *ptr = (T *)p;
    return e;
}

/* The drop-in form of cudaMemcpyAsync for the host-to-device upload of a host array the call
 * made (a plan, a slot list): cudaMemcpyAsync, except while s is being captured into a CUDA
 * graph, where a copy from pageable memory is not capturable and the graph would read the
 * array after it is freed: the bytes then travel inside the arguments of small copy kernels
 * (about 4 KB each), which the graph keeps. Other kinds are cudaMemcpyAsync as given. */
cudaError_t ssmi_cuda_memcpy_async(void * dst, const void * src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s);

/* A decode step's slot indices given in device memory (a 1-D I32/I64 view, any stride), as the
 * kernels' slot list on the device, read there (no host copy, no synchronisation: the call can
 * be captured in a CUDA graph): out[b] = idx[b] when it lies in [0, slots), else −1, a padding
 * row (out row zeroed, no slot read or written). One kernel on s. */
cudaError_t ssmi_cuda_device_slots(const ssm_tensor * idx, long long batch, long long slots, int * out, cudaStream_t s);
cudaError_t ssmi_cuda_device_slots(const ssm_tensor * idx, long long batch, long long slots, long long * out,
                                   cudaStream_t s);
/* 1 when t is present and in device memory (a slot index tensor the kernels read there). */
static inline int ssmi_cuda_on_device(const ssm_tensor * t) {
    return ssmi_present(t) && t->device.type == SSM_DEVICE_CUDA;
}

/* What the kernel choices ask of the current device: compute capability, the per-block opt-in
 * shared memory, the SM count, and whether the wgmma kernels may run: a build with sm_90a code
 * (SSMI_CUDA_WGMMA), a compute capability 9.0 device (which loads that image) and the context not
 * in portable mode (ssmi_cuda_portable: the context's params.cuda_portable). Every entry of a selection table
 * that launches a wgmma kernel requires `wgmma`. */
struct ssmi_cuda_props {
    int  major, minor, smem_optin, sms;
    bool wgmma;
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

/* Host-side layout tests of the fast paths. 1: rows of t (dtype `dt` of 2 or 4 bytes, innermost
 * dimension `inner` long) can be read in 16-byte pieces, 8 elements at a time: 16-byte aligned
 * base, unit inner stride, inner and every outer stride multiples of 8 elements. */
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

/* 1: t is F32, row-major contiguous (a dim of extent 1 may have any stride) and its base aligned to
 * `align` bytes: it has a dense fp32 workspace's layout, so kernels may use its memory as that
 * workspace (a saved forward result the backward reads, say). */
static inline int ssmi_cu_dense_f32(const ssm_tensor * t, uintptr_t align) {
    if (t->data == NULL || t->dtype != SSM_DTYPE_F32 || ((uintptr_t)t->data % align) != 0) return 0;
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
        if (t->shape[i] != 1 && t->strides[i] != want) return 0;
        want *= t->shape[i];
    }
    return 1;
}

/* A view of up to 5 dims (any float dtype, any strides) ↔ the dense fp32 workspace of its shape
 * (row-major: the same element order): to_view 1 writes t from ws, 0 reads t into ws. One kernel
 * on s (a saved forward result when it does not have its workspace's layout: ssmi_cu_dense_f32). */
ssm_status ssmi_cuda_dense_copy(ssm_context * ctx, const char * op, const ssm_tensor * t, float * ws, int to_view,
                                cudaStream_t s);

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

/* The item walk of a non-finite fix kernel (a small grid whose blocks hold an output kernel's
 * shared memory): block b takes the items b, b + gridDim.x, … < total and calls fix(o) for those
 * whose mark is set (marked(o): a load of the mark; fix is uniform over the block and ends with
 * the barrier its shared memory needs). The marks of a block's next blockDim.x items are loaded
 * at once, a thread each, so a batch without a mark (the usual case) costs one load and one
 * barrier, not one dependent load per item. */
template <class M, class F> __device__ __forceinline__ void ssmi_cu_marked_walk(long long total, M marked, F fix) {
    const long long step = gridDim.x, span = step * blockDim.x;
    for (long long first = blockIdx.x; first < total; first += span) {
        const long long mine = first + (long long)threadIdx.x * step;
        if (!__syncthreads_or(mine < total && marked(mine))) continue;
        for (long long o = first; o < total && o < first + span; o += step)
            if (marked(o)) fix(o);
    }
}

#endif /* SSMI_CUDA_COMMON_CUH */
