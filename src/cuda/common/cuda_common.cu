/* cuda_common.cu — device queries, pointer checks, copies and event timing of the CUDA
 * backend (see ssmi_cuda.h). Every CUDA error becomes SSM_STATUS_DEVICE_ERROR with
 * cudaGetErrorString in the message. */
#include <cuda_runtime.h>
#include <string.h>

extern "C" {
#include "../../core/ssmi.h"
}
#include "cuda_common.cuh"
#include "../ssmi_cuda.h"

ssm_status ssmi_cuda_status(ssm_context * ctx, const char * op, const char * what, cudaError_t err) {
    if (err == cudaSuccess) return SSM_STATUS_OK;
    if (err == cudaErrorMemoryAllocation)
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: %s failed: out of device memory", op, what);
    return ssmi_error(ctx, SSM_STATUS_DEVICE_ERROR, "%s: %s failed: %s (%s)", op, what, cudaGetErrorString(err),
                      cudaGetErrorName(err));
}

cudaStream_t ssmi_cuda_stream(const ssm_context * ctx) {
    return ctx == NULL ? (cudaStream_t)0 : (cudaStream_t)ctx->cuda_stream;
}

ssm_status ssmi_cuda_current_props(ssm_context * ctx, const char * op, ssmi_cuda_props * pr) {
    int dev = 0;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaGetDevice", cudaGetDevice(&dev)));
    const struct {
        int *                 v;
        enum cudaDeviceAttr a;
    } q[] = {{&pr->major, cudaDevAttrComputeCapabilityMajor},
             {&pr->minor, cudaDevAttrComputeCapabilityMinor},
             {&pr->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin},
             {&pr->sms, cudaDevAttrMultiProcessorCount}};
    for (const auto & e : q)
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaDeviceGetAttribute", cudaDeviceGetAttribute(e.v, e.a, dev)));
#if SSMI_CUDA_WGMMA
    pr->wgmma = pr->major == 9 && pr->minor == 0 && !ssmi_cuda_portable(ctx);
#else
    pr->wgmma = false;
#endif
    return SSM_STATUS_OK;
}

extern "C" int32_t ssmi_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver / no device: not sticky, clear it */
        return 0;
    }
    return (int32_t)n;
}

extern "C" ssm_status ssmi_cuda_check_pointer(ssm_context * ctx, const char * op, const char * name,
                                              const ssm_tensor * t) {
    if (t == NULL || t->data == NULL) return SSM_STATUS_OK;
    cudaPointerAttributes attr;
    const cudaError_t     err = cudaPointerGetAttributes(&attr, t->data);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return ssmi_cuda_status(ctx, op, "cudaPointerGetAttributes", err);
    }
    SSM_RETURN_IF(attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged, ctx,
                  SSM_STATUS_INVALID_LAYOUT, "%s: %s.data=%p is not CUDA device memory although %s.device.type is cuda",
                  op, name, t->data, name);
    int dev = 0;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaGetDevice", cudaGetDevice(&dev)));
    SSM_RETURN_IF(t->device.index != dev || attr.device != dev, ctx, SSM_STATUS_INVALID_LAYOUT,
                  "%s: %s is on CUDA device %d (device.index=%d) but the current device is %d", op, name,
                  (int)attr.device, (int)t->device.index, dev);
    return SSM_STATUS_OK;
}

extern "C" ssm_status ssmi_cuda_copy_to_host(ssm_context * ctx, const char * op, const char * name, void * dst,
                                             const void * src, size_t bytes) {
    if (bytes == 0) return SSM_STATUS_OK;
    const cudaStream_t      s = ssmi_cuda_stream(ctx);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaStreamIsCapturing", cudaStreamIsCapturing(s, &capture)));
    /* the synchronisation below would invalidate the capture: refuse before it */
    SSM_RETURN_IF(capture != cudaStreamCaptureStatusNone, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: %s is in device memory, which the host must read before the call, so it cannot be read while "
                  "the stream is being captured into a CUDA graph (pass it in host memory)",
                  op, name);
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (index tensor to host)", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s)));
    return ssmi_cuda_status(ctx, op, "cudaStreamSynchronize", cudaStreamSynchronize(s));
}

static int has_device_allocator(const ssm_context * ctx) {
    return ctx != NULL && ctx->device_allocator.alloc != NULL;
}

cudaError_t ssmi_cuda_alloc_async(ssm_context * ctx, void ** ptr, size_t bytes, cudaStream_t s) {
    *ptr = NULL;
    if (bytes == 0) return cudaSuccess;
    if (has_device_allocator(ctx)) {
        *ptr = ctx->device_allocator.alloc(ctx->device_allocator.opaque, bytes, (void *)s);
        return *ptr != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
    }
    const cudaError_t e = cudaMallocAsync(ptr, bytes, s);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it for the next launch check */
        *ptr = NULL;
    }
    return e;
}

cudaError_t ssmi_cuda_free_async(ssm_context * ctx, void * ptr, cudaStream_t s) {
    if (ptr == NULL) return cudaSuccess;
    if (has_device_allocator(ctx)) {
        ctx->device_allocator.free(ctx->device_allocator.opaque, ptr, (void *)s);
        return cudaSuccess;
    }
    return cudaFreeAsync(ptr, s);
}

/* Bytes of a host array carried by one upload kernel's arguments (the classic 4 KB parameter
 * limit, less the pointer and the count). */
static const int kUploadBytes = 4000;
struct upload_piece {
    unsigned char * dst;
    int             n;
    unsigned char   bytes[kUploadBytes];
};

__global__ void upload_kernel(const upload_piece piece) {
    for (int i = (int)threadIdx.x; i < piece.n; i += (int)blockDim.x) piece.dst[i] = piece.bytes[i];
}

cudaError_t ssmi_cuda_memcpy_async(void * dst, const void * src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    if (bytes == 0) return cudaSuccess;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (kind == cudaMemcpyHostToDevice) {
        const cudaError_t e = cudaStreamIsCapturing(s, &capture);
        if (e != cudaSuccess) return e;
    }
    if (capture != cudaStreamCaptureStatusActive) return cudaMemcpyAsync(dst, src, bytes, kind, s);
    const unsigned char * from = (const unsigned char *)src;
    unsigned char *       to = (unsigned char *)dst;
    for (size_t done = 0; done < bytes;) {
        upload_piece  piece;
        const size_t  n = bytes - done < (size_t)kUploadBytes ? bytes - done : (size_t)kUploadBytes;
        piece.dst = to + done;
        piece.n = (int)n;
        memcpy(piece.bytes, from + done, n);
        upload_kernel<<<1, 256, 0, s>>>(piece);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        done += n;
    }
    return cudaSuccess;
}

template <typename T>
__global__ void device_slots_kernel(const void * idx, int i64, long long stride, long long batch, long long slots,
                                    T * out) {
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < batch; b += step) {
        const long long v = i64 ? ((const long long *)idx)[b * stride] : (long long)((const int *)idx)[b * stride];
        out[b] = v >= 0 && v < slots ? (T)v : (T)-1;
    }
}

template <typename T>
static cudaError_t device_slots(const ssm_tensor * idx, long long batch, long long slots, T * out, cudaStream_t s) {
    if (batch <= 0) return cudaSuccess;
    const long long blocks = (batch + 255) / 256;
    device_slots_kernel<T><<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, s>>>(
        idx->data, idx->dtype == SSM_DTYPE_I64, (long long)idx->strides[0], batch, slots, out);
    return cudaGetLastError();
}

cudaError_t ssmi_cuda_device_slots(const ssm_tensor * idx, long long batch, long long slots, int * out, cudaStream_t s) {
    return device_slots(idx, batch, slots, out, s);
}
cudaError_t ssmi_cuda_device_slots(const ssm_tensor * idx, long long batch, long long slots, long long * out,
                                   cudaStream_t s) {
    return device_slots(idx, batch, slots, out, s);
}

namespace {
/* The extents of a view of up to 5 dims. */
struct dense_shape {
    long long n[5];
    int       nd;
};

/* One thread per element, in the workspace's order. */
__global__ void dense_copy_kernel(ssmi_cu_view v, dense_shape d, float * ws, long long total, int to_view) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        long long q = e, off = 0;
#pragma unroll
        for (int k = 4; k >= 0; --k) /* constant indices: the extents and strides stay in registers */
            if (k < d.nd) {
                off += (q % d.n[k]) * v.s[k];
                q /= d.n[k];
            }
        if (to_view) ssmi_cu_st(const_cast<void *>(v.p), v.dtype, off, ws[e]);
        else ws[e] = ssmi_cu_ld(v.p, v.dtype, off);
    }
}
} /* namespace */

ssm_status ssmi_cuda_dense_copy(ssm_context * ctx, const char * op, const ssm_tensor * t, float * ws, int to_view,
                                cudaStream_t s) {
    dense_shape d;
    long long   total = 1;
    d.nd = t->ndim < 5 ? (int)t->ndim : 5;
    for (int k = 0; k < 5; ++k) d.n[k] = k < d.nd ? (long long)t->shape[k] : 1;
    for (int k = 0; k < d.nd; ++k) total *= d.n[k];
    if (total == 0) return SSM_STATUS_OK;
    const long long blocks = (total + 255) / 256;
    dense_copy_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, s>>>(ssmi_cu_view_of(t), d, ws, total,
                                                                                   to_view);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "dense_copy_kernel");
    return SSM_STATUS_OK;
}

extern "C" ssm_status ssmi_cuda_malloc(ssm_context * ctx, void ** ptr, size_t bytes) {
    *ptr = NULL;
    if (bytes == 0) return SSM_STATUS_OK;
    if (has_device_allocator(ctx))
        return ssmi_cuda_status(ctx, "cuda_malloc", "the device allocator",
                                ssmi_cuda_alloc_async(ctx, ptr, bytes, ssmi_cuda_stream(ctx)));
    return ssmi_cuda_status(ctx, "cuda_malloc", "cudaMalloc", cudaMalloc(ptr, bytes));
}

extern "C" ssm_status ssmi_cuda_free(ssm_context * ctx, void * ptr) {
    if (ptr == NULL) return SSM_STATUS_OK;
    if (has_device_allocator(ctx)) return ssmi_cuda_status(ctx, "cuda_free", "the device allocator",
                                                           ssmi_cuda_free_async(ctx, ptr, ssmi_cuda_stream(ctx)));
    return ssmi_cuda_status(ctx, "cuda_free", "cudaFree", cudaFree(ptr));
}

extern "C" ssm_status ssmi_cuda_memcpy(ssm_context * ctx, void * dst, const void * src, size_t bytes) {
    if (bytes == 0) return SSM_STATUS_OK;
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, "cuda_memcpy", "cudaMemcpyAsync",
                                          cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s)));
    return ssmi_cuda_status(ctx, "cuda_memcpy", "cudaStreamSynchronize", cudaStreamSynchronize(s));
}

/* Events around each call of fn on ctx's stream; ms[rep] = elapsed time of call rep. With
 * cold_l2, a buffer of twice the device's L2 size is overwritten on the stream before every
 * call, outside the timed interval, so each call starts with none of its operands in the L2. */
extern "C" ssm_status ssmi_cuda_time(ssm_context * ctx, ssm_status (*fn)(void * arg, int32_t rep), void * arg,
                                     int32_t reps, int cold_l2, float * ms) {
    static const char  op[] = "cuda_time";
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    void *             flush = NULL;
    size_t             flush_bytes = 0;
    if (cold_l2 && reps > 0) {
        int dev = 0, l2 = 0;
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaGetDevice", cudaGetDevice(&dev)));
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaDeviceGetAttribute (L2 size)",
                                              cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev)));
        flush_bytes = 2 * (size_t)(l2 > 0 ? l2 : 64 << 20);
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "device allocation (L2 flush buffer)",
                                              ssmi_cuda_alloc_async(ctx, &flush, flush_bytes, s)));
    }
    cudaEvent_t *      ev = (cudaEvent_t *)ssmi_alloc(ctx, sizeof(cudaEvent_t) * (size_t)(2 * reps));
    if (ev == NULL && reps > 0) {
        (void)ssmi_cuda_free_async(ctx, flush, s);
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no memory for %d events", op, (int)reps);
    }
    ssm_status st = SSM_STATUS_OK;
    int32_t    made = 0;
    for (; made < 2 * reps && st == SSM_STATUS_OK; ++made)
        st = ssmi_cuda_status(ctx, op, "cudaEventCreate", cudaEventCreate(&ev[made]));
    if (st != SSM_STATUS_OK) --made;
    for (int32_t r = 0; r < reps && st == SSM_STATUS_OK; ++r) {
        if (flush != NULL)
            st = ssmi_cuda_status(ctx, op, "cudaMemsetAsync (L2 flush)", cudaMemsetAsync(flush, r & 0xff, flush_bytes, s));
        if (st == SSM_STATUS_OK) st = ssmi_cuda_status(ctx, op, "cudaEventRecord", cudaEventRecord(ev[2 * r], s));
        if (st == SSM_STATUS_OK) st = fn(arg, r);
        if (st == SSM_STATUS_OK) st = ssmi_cuda_status(ctx, op, "cudaEventRecord", cudaEventRecord(ev[2 * r + 1], s));
    }
    if (st == SSM_STATUS_OK) st = ssmi_cuda_status(ctx, op, "cudaStreamSynchronize", cudaStreamSynchronize(s));
    for (int32_t r = 0; r < reps && st == SSM_STATUS_OK; ++r)
        st = ssmi_cuda_status(ctx, op, "cudaEventElapsedTime", cudaEventElapsedTime(&ms[r], ev[2 * r], ev[2 * r + 1]));
    for (int32_t i = 0; i < made; ++i) (void)cudaEventDestroy(ev[i]);
    ssmi_free(ctx, ev);
    if (flush != NULL) (void)ssmi_cuda_free_async(ctx, flush, s);
    return st;
}
