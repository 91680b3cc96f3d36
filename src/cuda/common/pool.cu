/*
 * pool.cu — rows of state pools copied on the device: the slots of a decode state pool that no
 * batch row updated, copied into a separate output pool (the CUDA form of core/pool.c's
 * ssmi_copy_unused_slots), and the gather and scatter of a sequence operator's pooled states
 * (ops/state_pools.c: slot rows into dense rows and back, ssmi_cuda_copy_rows).
 *
 * With host indices the list of unused slots is built on the host and copied to the device;
 * one grid-stride kernel then copies every element of those slots through
 * both tensors' strides. Equal dtypes copy the element's bytes exactly; different dtypes
 * convert through double with one rounding (as core/pool.c does). Off the hot path: an
 * in-place pool never copies, and a decode step without indices uses every slot. Device
 * indices are read on the device by copy_unused_device_kernel (below).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "../../core/ssmi.h"
}
#include "cuda_common.cuh"
#include "../ssmi_cuda.h"

namespace {

const int kPoolThreads = 256;

/* A pool as the copy kernel sees it: dims below the slot axis (outermost first). */
struct pool_view {
    void *    p;
    int       dtype;
    long long slot_stride;
    long long s[SSM_MAX_DIMS];
};

struct pool_copy_args {
    const long long * slots;     /* the rows read (unused slot numbers), nslots of them */
    const long long * out_slots; /* the rows written, nslots of them; NULL: the rows read */
    long long         nslots;
    long long         per_slot; /* elements of one slot */
    int               nd;       /* dims below the slot axis */
    long long         shape[SSM_MAX_DIMS];
    pool_view         in, out;
};

__device__ __forceinline__ double load_f64(const void * p, int dtype, long long off) {
    switch (dtype) {
        case SSM_DTYPE_F32: return (double)((const float *)p)[off];
        case SSM_DTYPE_F16: return (double)__half2float(((const __half *)p)[off]);
        case SSM_DTYPE_BF16: return (double)__bfloat162float(((const __nv_bfloat16 *)p)[off]);
        default: return ((const double *)p)[off];
    }
}

/* v rounded once (to nearest even) into the dtype. */
__device__ __forceinline__ void store_f64(void * p, int dtype, long long off, double v) {
    switch (dtype) {
        case SSM_DTYPE_F32: ((float *)p)[off] = (float)v; break;
        case SSM_DTYPE_F16: ((__half *)p)[off] = __double2half(v); break;
        case SSM_DTYPE_BF16: ((__nv_bfloat16 *)p)[off] = __double2bfloat16(v); break;
        default: ((double *)p)[off] = v; break;
    }
}

/* Bytes of one element copied as they are (equal dtypes: exact, NaN payloads included). */
__device__ __forceinline__ void copy_raw(const void * src, long long so, void * dst, long long dof, int dtype) {
    switch (dtype) {
        case SSM_DTYPE_F64: ((unsigned long long *)dst)[dof] = ((const unsigned long long *)src)[so]; break;
        case SSM_DTYPE_F32: ((unsigned int *)dst)[dof] = ((const unsigned int *)src)[so]; break;
        default: ((unsigned short *)dst)[dof] = ((const unsigned short *)src)[so]; break;
    }
}

/* Element rem (row-major over the slot's dims) of slot `slot` of the in pool to slot `oslot` of the
 * out pool. */
__device__ __forceinline__ void copy_slot_element(const pool_copy_args & A, long long slot, long long oslot,
                                                  long long rem, bool same) {
    long long io = slot * A.in.slot_stride, oo = oslot * A.out.slot_stride;
    for (int d = A.nd - 1; d >= 0; --d) { /* innermost dim fastest */
        const long long i = rem % A.shape[d];
        rem /= A.shape[d];
        io += i * A.in.s[d];
        oo += i * A.out.s[d];
    }
    if (same)
        copy_raw(A.in.p, io, A.out.p, oo, A.in.dtype);
    else
        store_f64(A.out.p, A.out.dtype, oo, load_f64(A.in.p, A.in.dtype, io));
}

__global__ void __launch_bounds__(kPoolThreads) copy_slots_kernel(const pool_copy_args A) {
    const long long total = A.nslots * A.per_slot;
    const long long step = (long long)gridDim.x * blockDim.x;
    const bool      same = A.in.dtype == A.out.dtype;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {
        const long long k = e / A.per_slot;
        copy_slot_element(A, A.slots[k], A.out_slots != NULL ? A.out_slots[k] : A.slots[k], e - k * A.per_slot, same);
    }
}

/* The copy with indices in device memory, read there (no host copy, no allocation: capturable
 * in a CUDA graph, and nothing to fail after the step wrote its outputs): one block per slot
 * (grid-stride over slots) first looks for the slot among the batch's indices, then copies it
 * when no row named it. O(slots · batch) compares: decode batches and pools are small. */
struct pool_device_args {
    const void * idx;
    int          i64;
    long long    stride, batch, slots;
};

__global__ void __launch_bounds__(kPoolThreads) copy_unused_device_kernel(const pool_copy_args A,
                                                                          const pool_device_args D) {
    const bool same = A.in.dtype == A.out.dtype;
    for (long long slot = blockIdx.x; slot < D.slots; slot += gridDim.x) {
        int named = 0;
        for (long long b = threadIdx.x; b < D.batch && !named; b += blockDim.x) {
            const long long v =
                D.i64 ? ((const long long *)D.idx)[b * D.stride] : (long long)((const int *)D.idx)[b * D.stride];
            named = v == slot;
        }
        if (__syncthreads_or(named)) continue; /* uniform over the block */
        for (long long e = threadIdx.x; e < A.per_slot; e += blockDim.x) copy_slot_element(A, slot, slot, e, same);
    }
}

ssm_status copy_unused_device(ssm_context * ctx, const char * op, const pool_copy_args & A, const ssm_tensor * indices,
                              int64_t batch, int64_t slots) {
    SSM_FORWARD_IF_ERROR(ssmi_cuda_check_pointer(ctx, op, "state_batch_indices", indices));
    pool_device_args D;
    D.idx = indices->data;
    D.i64 = indices->dtype == SSM_DTYPE_I64;
    D.stride = (long long)indices->strides[0];
    D.batch = batch;
    D.slots = slots;
    const long long blocks = slots < 65536LL * 16 ? slots : 65536LL * 16; /* grid-stride over the rest */
    copy_unused_device_kernel<<<(unsigned)blocks, kPoolThreads, 0, ssmi_cuda_stream(ctx)>>>(A, D);
    return ssmi_cuda_status(ctx, op, "copy_unused_device_kernel launch", cudaGetLastError());
}

int64_t index_at(const ssm_tensor * t, int64_t b) {
    const int64_t off = b * t->strides[0];
    return t->dtype == SSM_DTYPE_I64 ? ((const int64_t *)t->data)[off] : (int64_t)((const int32_t *)t->data)[off];
}

pool_view pool_view_of(const ssm_tensor * t) {
    pool_view v;
    v.p = t->data;
    v.dtype = t->dtype;
    v.slot_stride = t->ndim > 0 ? (long long)t->strides[0] : 0;
    for (int i = 0; i < SSM_MAX_DIMS; ++i) v.s[i] = i + 1 < t->ndim ? (long long)t->strides[i + 1] : 0;
    return v;
}

/* The copy of the rows of in (every element below dim 0, of in's shape) into rows of out; no row
 * listed yet. per_slot 0: rows without elements. */
pool_copy_args rows_args(const ssm_tensor * in, const ssm_tensor * out) {
    pool_copy_args A;
    memset(&A, 0, sizeof A);
    A.per_slot = 1;
    A.nd = in->ndim - 1;
    for (int d = 1; d < in->ndim; ++d) {
        A.shape[d - 1] = in->shape[d];
        A.per_slot *= in->shape[d];
    }
    A.in = pool_view_of(in);
    A.out = pool_view_of(out);
    return A;
}

/* The unused slot numbers (host, malloc'd into *list; *count of them). */
ssm_status unused_slots(ssm_context * ctx, const char * op, const ssm_tensor * indices, int64_t batch, int64_t slots,
                        long long ** list, long long * count) {
    *list = NULL;
    *count = 0;
    unsigned char * used = (unsigned char *)calloc((size_t)slots, 1);
    long long *     out = (long long *)malloc(sizeof(long long) * (size_t)slots);
    if (used == NULL || out == NULL) {
        free(used);
        free(out);
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the list of %lld pool slots", op,
                          (long long)slots);
    }
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t s = index_at(indices, b);
        if (s >= 0 && s < slots) used[s] = 1;
    }
    long long n = 0;
    for (int64_t s = 0; s < slots; ++s)
        if (!used[s]) out[n++] = (long long)s;
    free(used);
    *list = out;
    *count = n;
    return SSM_STATUS_OK;
}

/* copy_slots_kernel over the host list of lists·A.nslots row numbers (lists = 1: the rows read,
 * which are also written; 2: the rows read, then the rows written), uploaded to the device. */
ssm_status copy_listed(ssm_context * ctx, const char * op, pool_copy_args A, const long long * list, int lists) {
    if (A.nslots == 0) return SSM_STATUS_OK;
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const size_t       bytes = sizeof(long long) * (size_t)A.nslots * (size_t)lists;
    void *             dlist = NULL;
    ssm_status st = ssmi_cuda_status(ctx, op, "device allocation (pool slot list)", ssmi_cuda_alloc_async(ctx, &dlist, bytes, s));
    /* Pageable source: cudaMemcpyAsync returns once it is staged, so the list may be freed. */
    if (st == SSM_STATUS_OK)
        st = ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (pool slot list)",
                              ssmi_cuda_memcpy_async(dlist, list, bytes, cudaMemcpyHostToDevice, s));
    if (st == SSM_STATUS_OK) {
        A.slots = (const long long *)dlist;
        A.out_slots = lists == 2 ? A.slots + A.nslots : NULL;
        const long long total = A.nslots * A.per_slot;
        long long       blocks = (total + kPoolThreads - 1) / kPoolThreads;
        if (blocks > 65536LL * 16) blocks = 65536LL * 16; /* grid-stride loop covers the rest */
        copy_slots_kernel<<<(unsigned)blocks, kPoolThreads, 0, s>>>(A);
        st = ssmi_cuda_status(ctx, op, "copy_slots_kernel launch", cudaGetLastError());
    }
    if (dlist != NULL) {
        const ssm_status fs = ssmi_cuda_status(ctx, op, "device release (pool slot list)", ssmi_cuda_free_async(ctx, dlist, s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    return st;
}

} /* namespace */

extern "C" ssm_status ssmi_cuda_copy_unused_slots(ssm_context * ctx, const char * op, const ssm_tensor * in,
                                                  const ssm_tensor * out, const ssm_tensor * indices, int64_t batch) {
    if (!ssmi_present(out) || !ssmi_present(in) || out->data == in->data || !ssmi_present(indices)) return SSM_STATUS_OK;
    if (in->ndim < 1 || in->shape[0] <= 0) return SSM_STATUS_OK;
    pool_copy_args A = rows_args(in, out);
    if (A.per_slot == 0) return SSM_STATUS_OK;
    if (ssmi_cuda_on_device(indices)) return copy_unused_device(ctx, op, A, indices, batch, in->shape[0]);

    long long * list = NULL;
    SSM_FORWARD_IF_ERROR(unused_slots(ctx, op, indices, batch, in->shape[0], &list, &A.nslots));
    const ssm_status st = copy_listed(ctx, op, A, list, 1);
    free(list);
    return st;
}

extern "C" ssm_status ssmi_cuda_copy_rows(ssm_context * ctx, const char * op, const ssm_tensor * src,
                                          const ssm_tensor * dst, const int64_t * rows, int64_t n) {
    if (n <= 0 || src->ndim < 1) return SSM_STATUS_OK;
    pool_copy_args A = rows_args(src, dst);
    if (A.per_slot == 0) return SSM_STATUS_OK;
    A.nslots = (long long)n;
    return copy_listed(ctx, op, A, (const long long *)rows, 2);
}

extern "C" ssm_status ssmi_cuda_alloc_zeroed(ssm_context * ctx, const char * op, size_t bytes, void ** ptr) {
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    *ptr = NULL;
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "device allocation (pooled state rows)", ssmi_cuda_alloc_async(ctx, ptr, bytes, s)));
    if (bytes == 0) return SSM_STATUS_OK;
    const ssm_status st =
        ssmi_cuda_status(ctx, op, "cudaMemsetAsync (pooled state rows)", cudaMemsetAsync(*ptr, 0, bytes, s));
    if (st != SSM_STATUS_OK) {
        ssmi_cuda_free_async(ctx, *ptr, s);
        *ptr = NULL;
    }
    return st;
}

extern "C" ssm_status ssmi_cuda_release(ssm_context * ctx, const char * op, void * ptr) {
    return ssmi_cuda_status(ctx, op, "device release (pooled state rows)",
                            ssmi_cuda_free_async(ctx, ptr, ssmi_cuda_stream(ctx)));
}
