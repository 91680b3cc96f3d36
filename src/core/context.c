/*
 * context.c — the context (threads, backend, ISA, allocator, last error), the error
 * buffers and scratch memory.
 *
 * A context is not thread-safe: one context is used by one thread at a time (like zstd's
 * ZSTD_CCtx); threads that run operators concurrently each create their own, or pass
 * ctx == NULL. With ctx == NULL, error messages go to a thread-local buffer, so that path
 * is safe from any number of threads.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* posix_memalign, sysconf (the build defines _GNU_SOURCE) */
#endif

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssmi.h"

/* More threads than this is certainly a mistake (and each one costs a stack). */
#define SSMI_MAX_THREADS 1024

static _Thread_local char ssmi_thread_error[SSMI_ERROR_LEN];

/* ---- errors ----------------------------------------------------------------------------- */
ssm_status ssmi_error(ssm_context * ctx, ssm_status status, const char * fmt, ...) {
    char * const buf = ctx != NULL ? ctx->last_error : ssmi_thread_error;
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(buf, SSMI_ERROR_LEN, fmt, ap) < 0) buf[0] = '\0';
    va_end(ap);
    return status;
}

void ssmi_clear_error(ssm_context * ctx) {
    char * const buf = ctx != NULL ? ctx->last_error : ssmi_thread_error;
    buf[0] = '\0';
}

SSM_API const char * ssm_context_last_error(const ssm_context * ctx) {
    return ctx != NULL ? ctx->last_error : ssmi_thread_error;
}

/* ---- names --------------------------------------------------------------------------- */
SSM_API const char * ssm_isa_name(ssm_isa isa) {
    switch ((int)isa) {
        case SSM_ISA_AUTO: return "auto";
        case SSM_ISA_SCALAR: return "scalar";
        case SSM_ISA_AVX2: return "avx2";
        case SSM_ISA_AVX512: return "avx512";
        default: return "unknown";
    }
}

SSM_API const char * ssm_backend_name(ssm_backend backend) {
    switch ((int)backend) {
        case SSM_BACKEND_AUTO: return "auto";
        case SSM_BACKEND_REF: return "ref";
        case SSM_BACKEND_CPU: return "cpu";
        case SSM_BACKEND_CUDA: return "cuda";
        default: return "unknown";
    }
}

/* ---- ISA choice ------------------------------------------------------------------------ */
/* The ISAs form a chain (scalar < avx2 < avx512): a host runs every ISA up to its best. */
static int ssmi_isa_supported(ssm_isa isa, uint32_t features) {
    return isa >= SSM_ISA_SCALAR && isa <= SSM_ISA_AVX512 && isa <= ssmi_best_isa(features);
}

/* Parses SSMOPS_ISA. Returns 1 and sets *isa (AUTO for unset/empty/"auto"), or 0 for a
 * value that names no ISA. */
static int ssmi_env_isa(ssm_isa * isa, const char ** value) {
    const char * const env = getenv("SSMOPS_ISA");
    *value = env;
    if (env == NULL || env[0] == '\0' || strcmp(env, "auto") == 0) {
        *isa = SSM_ISA_AUTO;
        return 1;
    }
    if (strcmp(env, "scalar") == 0) {
        *isa = SSM_ISA_SCALAR;
        return 1;
    }
    if (strcmp(env, "avx2") == 0) {
        *isa = SSM_ISA_AVX2;
        return 1;
    }
    if (strcmp(env, "avx512") == 0) {
        *isa = SSM_ISA_AVX512;
        return 1;
    }
    return 0;
}

/* ISA for ctx == NULL, computed once: SSMOPS_ISA if it is valid and the host has it,
 * otherwise the best the host has (this path has no way to report a bad override;
 * ssm_context_create reports it). */
static ssm_isa         ssmi_default_isa_value = SSM_ISA_SCALAR;
static pthread_once_t  ssmi_default_isa_once = PTHREAD_ONCE_INIT;
static void            ssmi_default_isa_init(void) {
    const uint32_t features = ssmi_cpu_features();
    ssm_isa isa = SSM_ISA_AUTO;
    const char * value = NULL;
    if (!ssmi_env_isa(&isa, &value) || isa == SSM_ISA_AUTO || !ssmi_isa_supported(isa, features)) {
        isa = ssmi_best_isa(features);
    }
    ssmi_default_isa_value = isa;
}

ssm_isa ssmi_context_isa(const ssm_context * ctx) {
    if (ctx != NULL) return ctx->isa;
    pthread_once(&ssmi_default_isa_once, ssmi_default_isa_init);
    return ssmi_default_isa_value;
}

/* Resolves params->isa (and SSMOPS_ISA for AUTO) into a concrete ISA, or fails with a
 * message in the thread-local buffer. */
static ssm_status ssmi_resolve_isa(int32_t requested, ssm_isa * out) {
    const uint32_t features = ssmi_cpu_features();
    ssm_isa isa = (ssm_isa)requested;
    const char * source = "params.isa";
    if (isa == SSM_ISA_AUTO) {
        const char * value = NULL;
        SSM_RETURN_IF(!ssmi_env_isa(&isa, &value), NULL, SSM_STATUS_INVALID_ARGUMENT,
                      "context_create: SSMOPS_ISA=%s is not an ISA name (use scalar, avx2, avx512 or auto)", value);
        source = "SSMOPS_ISA";
    }
    if (isa == SSM_ISA_AUTO) {
        *out = ssmi_best_isa(features);
        return SSM_STATUS_OK;
    }
    SSM_RETURN_IF(!ssmi_isa_supported(isa, features), NULL, SSM_STATUS_UNSUPPORTED_HARDWARE,
                  "context_create: %s=%s needs CPU features this host lacks (avx2 needs AVX2, FMA and F16C; "
                  "avx512 also AVX-512 F, BW, DQ and VL with the OS saving the ZMM state)", source,
                  ssm_isa_name(isa));
    *out = isa;
    return SSM_STATUS_OK;
}

int32_t ssmi_cuda_portable(const ssm_context * ctx) { return ctx != NULL ? ctx->cuda_portable : 0; }

/* ---- memory ---------------------------------------------------------------------------- */
static void * ssmi_aligned_malloc(size_t bytes) {
    void * p = NULL;
    if (posix_memalign(&p, SSMI_ALIGN, bytes) != 0) return NULL;
    return p;
}

void * ssmi_alloc(ssm_context * ctx, size_t bytes) {
    if (bytes == 0) return NULL;
    if (ctx != NULL && ctx->allocator.alloc != NULL) {
        return ctx->allocator.alloc(ctx->allocator.opaque, bytes, SSMI_ALIGN);
    }
    return ssmi_aligned_malloc(bytes);
}

void ssmi_free(ssm_context * ctx, void * ptr) {
    if (ptr == NULL) return;
    if (ctx != NULL && ctx->allocator.free != NULL) {
        ctx->allocator.free(ctx->allocator.opaque, ptr);
        return;
    }
    free(ptr);
}

int32_t ssmi_num_threads(const ssm_context * ctx) { return ctx != NULL ? ctx->num_threads : 1; }

/* ---- the context ----------------------------------------------------------------------- */
SSM_API void ssm_context_params_init(ssm_context_params * params) {
    if (params == NULL) return;
    memset(params, 0, sizeof *params);
    params->size = sizeof *params;
    params->num_threads = 1;
    params->backend = SSM_BACKEND_AUTO;
    params->isa = SSM_ISA_AUTO;
    params->deterministic = 1;
    params->ref_mode = SSM_REF_EXACT;
}

/* params.size of the first layout, which ends after cuda_stream (the struct grows at its end). */
#define SSMI_CONTEXT_PARAMS_SIZE_FIRST offsetof(ssm_context_params, device_allocator)

/* *out = *params with the fields past params->size at their defaults, or INVALID_ARGUMENT for
 * a size that is no layout's. */
static ssm_status ssmi_read_params(const ssm_context_params * params, ssm_context_params * out) {
    const size_t size = params->size;
    SSM_RETURN_IF(size != sizeof(ssm_context_params) && size != SSMI_CONTEXT_PARAMS_SIZE_FIRST, NULL,
                  SSM_STATUS_INVALID_ARGUMENT,
                  "context_create: params.size=%zu must be %zu (call ssm_context_params_init first)", size,
                  sizeof(ssm_context_params));
    ssm_context_params_init(out);
    memcpy(out, params, size);
    out->size = sizeof *out;
    return SSM_STATUS_OK;
}

static ssm_status ssmi_check_params(const ssm_context_params * p) {
    SSM_RETURN_IF(p->num_threads < 0 || p->num_threads > SSMI_MAX_THREADS, NULL, SSM_STATUS_INVALID_ARGUMENT,
                  "context_create: params.num_threads=%d must be in [0, %d] (0 = one per online CPU)",
                  (int)p->num_threads, SSMI_MAX_THREADS);
    SSM_RETURN_IF(p->backend < SSM_BACKEND_AUTO || p->backend > SSM_BACKEND_CUDA, NULL, SSM_STATUS_INVALID_ARGUMENT,
                  "context_create: params.backend=%d is not an ssm_backend", (int)p->backend);
    SSM_RETURN_IF(p->isa < SSM_ISA_AUTO || p->isa > SSM_ISA_AVX512, NULL, SSM_STATUS_INVALID_ARGUMENT,
                  "context_create: params.isa=%d is not an ssm_isa", (int)p->isa);
    SSM_RETURN_IF(p->ref_mode < SSM_REF_EXACT || p->ref_mode > SSM_REF_UPSTREAM_BF16, NULL,
                  SSM_STATUS_INVALID_ARGUMENT, "context_create: params.ref_mode=%d is not an ssm_ref_mode",
                  (int)p->ref_mode);
    SSM_RETURN_IF((p->allocator.alloc == NULL) != (p->allocator.free == NULL), NULL, SSM_STATUS_INVALID_ARGUMENT,
                  "context_create: params.allocator must set both alloc and free, or neither");
    SSM_RETURN_IF((p->device_allocator.alloc == NULL) != (p->device_allocator.free == NULL), NULL,
                  SSM_STATUS_INVALID_ARGUMENT,
                  "context_create: params.device_allocator must set both alloc and free, or neither");
    SSM_RETURN_IF(p->cuda_portable != 0 && p->cuda_portable != 1, NULL, SSM_STATUS_INVALID_ARGUMENT,
                  "context_create: params.cuda_portable=%d must be 0 or 1", (int)p->cuda_portable);
    return SSM_STATUS_OK;
}

static int32_t ssmi_online_cpus(void) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) return 1;
    return n > SSMI_MAX_THREADS ? SSMI_MAX_THREADS : (int32_t)n;
}

/* Failures are reported in the thread-local buffer (ssm_context_last_error(NULL)): there
 * is no context to hold them. *out is written only on success. */
SSM_API ssm_status ssm_context_create(const ssm_context_params * params, ssm_context ** out) {
    ssmi_clear_error(NULL);
    SSM_RETURN_IF(out == NULL, NULL, SSM_STATUS_INVALID_ARGUMENT, "context_create: out is NULL");
    ssm_context_params given;
    if (params == NULL) /* NULL params = the defaults, like ctx == NULL */
        ssm_context_params_init(&given);
    else
        SSM_FORWARD_IF_ERROR(ssmi_read_params(params, &given));
    params = &given;
    SSM_FORWARD_IF_ERROR(ssmi_check_params(params));
    ssm_isa isa = SSM_ISA_SCALAR;
    SSM_FORWARD_IF_ERROR(ssmi_resolve_isa(params->isa, &isa));
    const int32_t num_threads = params->num_threads == 0 ? ssmi_online_cpus() : params->num_threads;

    /* The context itself comes from the user's allocator too (zstd's customMem does the
     * same), so a user allocator sees every byte the library holds. */
    ssm_context * ctx = params->allocator.alloc != NULL
                            ? params->allocator.alloc(params->allocator.opaque, sizeof *ctx, SSMI_ALIGN)
                            : ssmi_aligned_malloc(sizeof *ctx);
    SSM_RETURN_IF(ctx == NULL, NULL, SSM_STATUS_OUT_OF_MEMORY, "context_create: could not allocate %zu bytes",
                  sizeof *ctx);
    memset(ctx, 0, sizeof *ctx);
    ctx->num_threads = num_threads;
    ctx->backend = (ssm_backend)params->backend;
    ctx->isa = isa;
    ctx->deterministic = params->deterministic != 0;
    ctx->ref_mode = params->ref_mode;
    ctx->allocator = params->allocator;
    ctx->cuda_stream = params->cuda_stream;
    ctx->device_allocator = params->device_allocator;
    ctx->cuda_portable = params->cuda_portable;
    ctx->pool = NULL;
    ctx->last_error[0] = '\0';
    ssmi_variant_init(ctx);
    if (num_threads > 1) {
        ctx->pool = ssmi_threadpool_create(ctx, num_threads);
        if (ctx->pool == NULL) {
            ssmi_free(ctx, ctx); /* the same allocator that made it */
            return ssmi_error(NULL, SSM_STATUS_OUT_OF_MEMORY, "context_create: could not start %d worker threads",
                              (int)(num_threads - 1));
        }
    }
    *out = ctx;
    return SSM_STATUS_OK;
}

SSM_API void ssm_context_free(ssm_context * ctx) {
    if (ctx == NULL) return;
    ssmi_threadpool_free(ctx->pool);
    ctx->pool = NULL;
    ssmi_free(ctx, ctx);
}

SSM_API int32_t ssm_context_num_threads(const ssm_context * ctx) { return ssmi_num_threads(ctx); }

SSM_API ssm_isa ssm_context_isa(const ssm_context * ctx) { return ssmi_context_isa(ctx); }

SSM_API ssm_backend ssm_context_backend(const ssm_context * ctx) {
    return ctx != NULL ? ctx->backend : SSM_BACKEND_AUTO;
}
