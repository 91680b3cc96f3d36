/* layer.cu — the host helpers of the CUDA layer operators (layer.cuh): device-pointer checks
 * from the operator schema, device scratch on the context's stream, index uploads. */
#include <string.h>

#include "layer.cuh"

namespace ssmi_layer {

ssm_status check_device_pointers(ssm_context * ctx, ssmi_op op, const void * args) {
    const ssm_op_info * info = ssmi_op_info(op);
    for (int32_t i = 0; info != NULL && i < info->nargs; ++i) {
        const ssm_arg_info * arg = &info->args[i];
        if (arg->dtype_class == SSM_DTYPE_CLASS_INDEX) continue;
        SSM_FORWARD_IF_ERROR(ssmi_cuda_check_pointer(ctx, info->name, arg->name, ssmi_arg_tensor(args, arg)));
    }
    return SSM_STATUS_OK;
}

ssm_status scratch_bytes(ssm_context * ctx, const char * op, const char * what, int64_t n0, int64_t n1, int64_t n2,
                         size_t elem, size_t * out) {
    size_t n = 0;
    const bool over = n0 < 0 || n1 < 0 || n2 < 0 || __builtin_mul_overflow((size_t)n0, (size_t)n1, &n) ||
                      __builtin_mul_overflow(n, (size_t)n2, &n) || __builtin_mul_overflow(n, elem, &n);
    SSM_RETURN_IF(over, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: %s (%lld x %lld x %lld elements) does not fit in memory",
                  op, what, (long long)n0, (long long)n1, (long long)n2);
    *out = n;
    return SSM_STATUS_OK;
}

ssm_status scratch_alloc(ssm_context * ctx, const char * op, const char * what, scratch * s, size_t n, void ** out) {
    *out = NULL;
    if (n == 0) return SSM_STATUS_OK;
    SSM_RETURN_IF(s->n >= 4, ctx, SSM_STATUS_INTERNAL, "%s: more than 4 scratch allocations", op);
    void *            p = NULL;
    const cudaError_t e = ssmi_cuda_alloc_async(ctx, &p, n, ssmi_cuda_stream(ctx));
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* not sticky: clear it for the next launch check */
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: could not allocate %zu bytes of device memory for %s",
                          op, n, what);
    }
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "device allocation", e));
    s->p[s->n++] = p;
    *out = p;
    return SSM_STATUS_OK;
}

ssm_status scratch_release(ssm_context * ctx, const char * op, scratch * s, ssm_status st) {
    for (int i = 0; i < s->n; ++i) {
        const ssm_status fs =
            ssmi_cuda_status(ctx, op, "device release", ssmi_cuda_free_async(ctx, s->p[i], ssmi_cuda_stream(ctx)));
        if (st == SSM_STATUS_OK) st = fs;
    }
    s->n = 0;
    return st;
}

ssm_status upload_index(ssm_context * ctx, const char * op, const char * what, scratch * s, const ssm_tensor * t,
                        const long long ** out) {
    *out = NULL;
    if (!ssmi_present(t)) return SSM_STATUS_OK;
    const int64_t rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->shape[t->ndim - 1];
    size_t        bytes = 0;
    SSM_FORWARD_IF_ERROR(scratch_bytes(ctx, op, what, rows, cols, 1, sizeof(long long), &bytes));
    if (bytes == 0) return SSM_STATUS_OK;
    long long * host = (long long *)ssmi_alloc(ctx, bytes);
    SSM_RETURN_IF(host == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: could not allocate %zu bytes of host memory for %s",
                  op, bytes, what);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t off = t->ndim == 2 ? ssmi_off2(t, r, c) : ssmi_off1(t, c);
            host[r * cols + c] = (long long)ssmi_get_i64(t, off);
        }
    void *     dev = NULL;
    ssm_status st = scratch_alloc(ctx, op, what, s, bytes, &dev);
    /* Pageable source: cudaMemcpyAsync returns once the bytes are staged, so host may be freed. */
    if (st == SSM_STATUS_OK)
        st = ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (index tensor)",
                              ssmi_cuda_memcpy_async(dev, host, bytes, cudaMemcpyHostToDevice, ssmi_cuda_stream(ctx)));
    ssmi_free(ctx, host);
    if (st == SSM_STATUS_OK) *out = (const long long *)dev;
    return st;
}

ssm_status device_slot_index(ssm_context * ctx, const char * op, scratch * s, const ssm_tensor * t, int64_t batch,
                             int64_t slots, const long long ** out) {
    *out = NULL;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_check_pointer(ctx, op, "state_batch_indices", t));
    size_t bytes = 0;
    SSM_FORWARD_IF_ERROR(scratch_bytes(ctx, op, "state_batch_indices", batch, 1, 1, sizeof(long long), &bytes));
    if (bytes == 0) return SSM_STATUS_OK;
    void * dev = NULL;
    SSM_FORWARD_IF_ERROR(scratch_alloc(ctx, op, "state_batch_indices", s, bytes, &dev));
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
        ctx, op, "device_slots_kernel launch",
        ssmi_cuda_device_slots(t, batch, slots, (long long *)dev, ssmi_cuda_stream(ctx))));
    *out = (const long long *)dev;
    return SSM_STATUS_OK;
}

} // namespace ssmi_layer
