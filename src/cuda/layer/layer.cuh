/* layer.cuh — what the CUDA layer operators share (conv1d.cu, rmsnorm.cu, angle_cumsum.cu):
 * the one-entry selection tables, the device-pointer check of every float argument, index
 * tensors uploaded as int64 arrays, device scratch on the context's stream, grid sizing for
 * grid-stride loops, and a fixed-order block sum.
 *
 * Every kernel of the family writes each output element from exactly one thread, with a fixed
 * summation order, and no atomics: the results are bitwise identical across runs. Arithmetic
 * is fp32 for every storage dtype (loads convert through the strides). */
#ifndef SSMI_CUDA_LAYER_CUH
#define SSMI_CUDA_LAYER_CUH

#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "../../core/ssmi.h"
}
#include "../common/cuda_common.cuh"
#include "../common/device_math.cuh"
#include "../common/variant_table.cuh"
#include "../ssmi_cuda.h"

namespace ssmi_layer {

/* One entry of a layer operator's selection table (common/variant_table.cuh). */
template <class P> struct entry {
    const char * name; /* by what it does */
    const char * why;  /* one line: why it exists */
    const char * rule; /* when it applies (the message of a forced entry that does not) */
    bool (*applies)(const P &);
    ssm_status (*launch)(const P &);
};

template <class P> bool always(const P &) { return true; }

/* Picks the table's entry for pb (a forced one, or the first that applies) and launches it. */
template <class P, int N> ssm_status run_table(ssm_context * ctx, ssmi_op op, const entry<P> (&table)[N], const P & pb) {
    const entry<P> * e = NULL;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_pick_variant(ctx, op, table, pb, &e));
    SSM_RETURN_IF(e == NULL, ctx, SSM_STATUS_UNSUPPORTED, "%s: no CUDA kernel applies to this problem",
                  ssmi_op_name(op));
    return e->launch(pb);
}

/* Every present float argument of op's args struct is device memory of the current device
 * (index tensors are host views here). */
ssm_status check_device_pointers(ssm_context * ctx, ssmi_op op, const void * args);

/* Device scratch on ctx's stream: up to 4 allocations, released in order by release(). */
struct scratch {
    void * p[4];
    int    n;
};
/* *out = n bytes of device memory (NULL for n = 0); OUT_OF_MEMORY when the device has none. */
ssm_status scratch_alloc(ssm_context * ctx, const char * op, const char * what, scratch * s, size_t n, void ** out);
/* Frees every allocation; returns st, or the first free error when st is OK. */
ssm_status scratch_release(ssm_context * ctx, const char * op, scratch * s, ssm_status st);
/* A host index tensor (1-D or 2-D, I32/I64, any strides) as a dense row-major int64 device
 * array in scratch; *out = NULL when t is absent. */
ssm_status upload_index(ssm_context * ctx, const char * op, const char * what, scratch * s, const ssm_tensor * t,
                        const long long ** out);
/* A decode step's slot indices in device memory (1-D, I32/I64, any stride) as a dense int64
 * device array in scratch, made on the device (no host copy): an index outside [0, slots) is
 * −1, a padding row. */
ssm_status device_slot_index(ssm_context * ctx, const char * op, scratch * s, const ssm_tensor * t, int64_t batch,
                             int64_t slots, const long long ** out);
/* n0·n1·n2·elem bytes, or OUT_OF_MEMORY when that overflows (a broadcast view's huge shape). */
ssm_status scratch_bytes(ssm_context * ctx, const char * op, const char * what, int64_t n0, int64_t n1, int64_t n2,
                         size_t elem, size_t * out);

/* Blocks of `threads` for a grid-stride loop over n items (at most 2^20 blocks). */
static inline unsigned grid_for(long long n, int threads) {
    const long long b = (n + threads - 1) / threads;
    return (unsigned)(b < (1LL << 20) ? b : (1LL << 20));
}


/* Element offsets of the 1-, 2-, 3- and 4-D views. */
__device__ __forceinline__ long long o1(const ssmi_cu_view & v, long long i) { return i * v.s[0]; }
__device__ __forceinline__ long long o2(const ssmi_cu_view & v, long long i, long long j) {
    return i * v.s[0] + j * v.s[1];
}
__device__ __forceinline__ long long o3(const ssmi_cu_view & v, long long i, long long j, long long k) {
    return i * v.s[0] + j * v.s[1] + k * v.s[2];
}
__device__ __forceinline__ long long o4(const ssmi_cu_view & v, long long i, long long j, long long k, long long l) {
    return i * v.s[0] + j * v.s[1] + k * v.s[2] + l * v.s[3];
}
__device__ __forceinline__ float ld(const ssmi_cu_view & v, long long off) { return ssmi_cu_ld(v.p, v.dtype, off); }
__device__ __forceinline__ void st(const ssmi_cu_view & v, long long off, float x) {
    ssmi_cu_st(const_cast<void *>(v.p), v.dtype, off, x);
}

/* The block's sum of v (blockDim.x a multiple of 32, at most 1024; every thread calls it): a
 * xor butterfly in each warp, then the warp sums added in warp order by every thread. sh:
 * 32 floats of shared memory. The order depends on blockDim only: the same bits every run. */
__device__ __forceinline__ float block_sum(float v, float * sh) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float tot = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) tot += sh[w];
    __syncthreads(); /* sh is reused by the next call */
    return tot;
}

} // namespace ssmi_layer

#endif /* SSMI_CUDA_LAYER_CUH */
