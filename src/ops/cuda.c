/* cuda.c — the public CUDA helpers of ssmops.h ("CUDA helpers"). Without the CUDA backend
 * in the build they report no device and UNSUPPORTED. */
#include "../core/ssmi.h"

#ifdef SSMOPS_HAVE_CUDA
#include "../cuda/ssmi_cuda.h"
#endif

int32_t ssm_cuda_device_count(void) {
#ifdef SSMOPS_HAVE_CUDA
    return ssmi_cuda_device_count();
#else
    return 0;
#endif
}

#ifdef SSMOPS_HAVE_CUDA

ssm_status ssm_cuda_malloc(ssm_context * ctx, void ** ptr, size_t bytes) {
    ssmi_clear_error(ctx);
    SSM_RETURN_IF(ptr == NULL, ctx, SSM_STATUS_INVALID_ARGUMENT, "cuda_malloc: ptr is NULL");
    return ssmi_cuda_malloc(ctx, ptr, bytes);
}

ssm_status ssm_cuda_free(ssm_context * ctx, void * ptr) {
    ssmi_clear_error(ctx);
    return ssmi_cuda_free(ctx, ptr);
}

ssm_status ssm_cuda_memcpy(ssm_context * ctx, void * dst, const void * src, size_t bytes) {
    ssmi_clear_error(ctx);
    SSM_RETURN_IF(bytes > 0 && (dst == NULL || src == NULL), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "cuda_memcpy: dst or src is NULL for %zu bytes", bytes);
    return ssmi_cuda_memcpy(ctx, dst, src, bytes);
}

static ssm_status cuda_time(ssm_context * ctx, const char * op, ssm_status (*fn)(void * arg, int32_t rep),
                            void * arg, int32_t reps, int cold_l2, float * ms) {
    ssmi_clear_error(ctx);
    SSM_RETURN_IF(fn == NULL || (reps > 0 && ms == NULL) || reps < 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: fn or ms is NULL, or reps=%d is negative", op, (int)reps);
    return ssmi_cuda_time(ctx, fn, arg, reps, cold_l2, ms);
}

ssm_status ssm_cuda_time(ssm_context * ctx, ssm_status (*fn)(void * arg, int32_t rep), void * arg, int32_t reps,
                         float * ms) {
    return cuda_time(ctx, "cuda_time", fn, arg, reps, 0, ms);
}

ssm_status ssm_cuda_time_cold(ssm_context * ctx, ssm_status (*fn)(void * arg, int32_t rep), void * arg, int32_t reps,
                              float * ms) {
    return cuda_time(ctx, "cuda_time_cold", fn, arg, reps, 1, ms);
}

#else /* no CUDA backend */

static ssm_status not_built(ssm_context * ctx, const char * op) {
    ssmi_clear_error(ctx);
    return ssmi_error(ctx, SSM_STATUS_UNSUPPORTED, "%s: the CUDA backend is not built", op);
}

ssm_status ssm_cuda_malloc(ssm_context * ctx, void ** ptr, size_t bytes) {
    (void)bytes;
    if (ptr != NULL) *ptr = NULL;
    return not_built(ctx, "cuda_malloc");
}

ssm_status ssm_cuda_free(ssm_context * ctx, void * ptr) {
    (void)ptr;
    return not_built(ctx, "cuda_free");
}

ssm_status ssm_cuda_memcpy(ssm_context * ctx, void * dst, const void * src, size_t bytes) {
    (void)dst;
    (void)src;
    (void)bytes;
    return not_built(ctx, "cuda_memcpy");
}

ssm_status ssm_cuda_time(ssm_context * ctx, ssm_status (*fn)(void * arg, int32_t rep), void * arg, int32_t reps,
                         float * ms) {
    (void)fn, (void)arg, (void)reps, (void)ms;
    return not_built(ctx, "cuda_time");
}

ssm_status ssm_cuda_time_cold(ssm_context * ctx, ssm_status (*fn)(void * arg, int32_t rep), void * arg, int32_t reps,
                              float * ms) {
    (void)fn, (void)arg, (void)reps, (void)ms;
    return not_built(ctx, "cuda_time_cold");
}

#endif

#ifndef SSMOPS_HAVE_CUDA
/* Without the CUDA backend no operator has a selection table. */
int32_t ssmi_cuda_variant_count(ssmi_op op) {
    (void)op;
    return 0;
}

ssmi_variant_info ssmi_cuda_variant(ssmi_op op, int32_t i) {
    (void)op, (void)i;
    const ssmi_variant_info none = {NULL, NULL};
    return none;
}
#endif
