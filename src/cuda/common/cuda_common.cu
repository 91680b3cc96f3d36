/* cuda_common.cu — device queries, pointer checks, copies and event timing of the CUDA
 * backend (see ssmi_cuda.h). Every CUDA error becomes SSM_STATUS_DEVICE_ERROR with
 * cudaGetErrorString in the message. */
#include <cuda_runtime.h>

extern "C" {
#include "../../core/ssmi.h"
}
#include "cuda_common.cuh"
#include "../ssmi_cuda.h"

ssm_status ssmi_cuda_status(ssm_context * ctx, const char * op, const char * what, cudaError_t err) {
    if (err == cudaSuccess) return SSM_STATUS_OK;
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

extern "C" ssm_status ssmi_cuda_copy_to_host(ssm_context * ctx, const char * op, void * dst, const void * src,
                                             size_t bytes) {
    if (bytes == 0) return SSM_STATUS_OK;
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (index tensor to host)", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s)));
    return ssmi_cuda_status(ctx, op, "cudaStreamSynchronize", cudaStreamSynchronize(s));
}

extern "C" ssm_status ssmi_cuda_malloc(ssm_context * ctx, void ** ptr, size_t bytes) {
    *ptr = NULL;
    if (bytes == 0) return SSM_STATUS_OK;
    return ssmi_cuda_status(ctx, "cuda_malloc", "cudaMalloc", cudaMalloc(ptr, bytes));
}

extern "C" ssm_status ssmi_cuda_free(ssm_context * ctx, void * ptr) {
    if (ptr == NULL) return SSM_STATUS_OK;
    return ssmi_cuda_status(ctx, "cuda_free", "cudaFree", cudaFree(ptr));
}

extern "C" ssm_status ssmi_cuda_memcpy(ssm_context * ctx, void * dst, const void * src, size_t bytes) {
    if (bytes == 0) return SSM_STATUS_OK;
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, "cuda_memcpy", "cudaMemcpyAsync",
                                          cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s)));
    return ssmi_cuda_status(ctx, "cuda_memcpy", "cudaStreamSynchronize", cudaStreamSynchronize(s));
}

/* Events around each call of fn on ctx's stream; ms[rep] = elapsed time of call rep. */
/* With cold_l2, a buffer of twice the device's L2 size is overwritten on the stream before every
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
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaMalloc (L2 flush buffer)", cudaMalloc(&flush, flush_bytes)));
    }
    cudaEvent_t *      ev = (cudaEvent_t *)ssmi_alloc(ctx, sizeof(cudaEvent_t) * (size_t)(2 * reps));
    if (ev == NULL && reps > 0) {
        (void)cudaFree(flush);
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
    if (flush != NULL) (void)cudaFree(flush);
    return st;
}
