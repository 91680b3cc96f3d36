/* variant.c — the registry of kernel variants: operator names, the entry a context forces
 * per operator (ssm_context_set_variant) and the entry a call ran. The
 * tables themselves live with their kernels (src/cuda/select.cu lists them). */
#include <string.h>

#include "ssmi.h"

static const char * const op_names[SSMI_OP_COUNT] = {
#define SSMI_OP_NAME_(name) #name,
    SSMI_OP_LIST(SSMI_OP_NAME_)
#undef SSMI_OP_NAME_
};

const char * ssmi_op_name(ssmi_op op) { return (op >= 0 && op < SSMI_OP_COUNT) ? op_names[op] : "unknown"; }

int32_t ssmi_op_find(const char * name) {
    if (name == NULL) return -1;
    for (int32_t i = 0; i < SSMI_OP_COUNT; ++i)
        if (strcmp(op_names[i], name) == 0) return i;
    return -1;
}

/* Only the CUDA backend has selection tables today; a context of any other backend has none. */
static int32_t table_count(ssm_backend backend, ssmi_op op) {
    return (backend == SSM_BACKEND_CUDA || backend == SSM_BACKEND_AUTO) ? ssmi_cuda_variant_count(op) : 0;
}

SSM_API int32_t ssm_variant_count(ssm_backend backend, const char * op) {
    const int32_t o = ssmi_op_find(op);
    return o < 0 ? 0 : table_count(backend, (ssmi_op)o);
}

SSM_API const char * ssm_variant_name(ssm_backend backend, const char * op, int32_t i) {
    const int32_t o = ssmi_op_find(op);
    if (o < 0 || i < 0 || i >= table_count(backend, (ssmi_op)o)) return NULL;
    return ssmi_cuda_variant((ssmi_op)o, i).name;
}

SSM_API const char * ssm_variant_why(ssm_backend backend, const char * op, int32_t i) {
    const int32_t o = ssmi_op_find(op);
    if (o < 0 || i < 0 || i >= table_count(backend, (ssmi_op)o)) return NULL;
    return ssmi_cuda_variant((ssmi_op)o, i).why;
}

/* "a, b, c" of op's entries into buf. */
static void list_names(ssm_backend backend, ssmi_op op, char * buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    const int32_t n = table_count(backend, op);
    for (int32_t i = 0; i < n && used + 1 < len; ++i) {
        const char * name = ssmi_cuda_variant(op, i).name;
        const size_t k = strlen(name) + (i ? 2 : 0);
        if (used + k + 1 >= len) break;
        if (i) memcpy(buf + used, ", ", 2);
        memcpy(buf + used + (i ? 2 : 0), name, strlen(name) + 1);
        used += k;
    }
}

/* Sets ctx->variant[op] from a name; "" / "auto" / NULL clears it. */
static ssm_status set_variant(ssm_context * ctx, const char * op, const char * variant) {
    const int32_t o = ssmi_op_find(op);
    SSM_RETURN_IF(o < 0, ctx, SSM_STATUS_INVALID_ARGUMENT, "set_variant: no operator is named '%s'",
                  op != NULL ? op : "(null)");
    if (variant == NULL || variant[0] == '\0' || strcmp(variant, "auto") == 0) {
        ctx->variant[o] = -1;
        return SSM_STATUS_OK;
    }
    const int32_t n = table_count(ctx->backend, (ssmi_op)o);
    for (int32_t i = 0; i < n; ++i)
        if (strcmp(ssmi_cuda_variant((ssmi_op)o, i).name, variant) == 0) {
            ctx->variant[o] = (int16_t)i;
            return SSM_STATUS_OK;
        }
    char names[256];
    list_names(ctx->backend, (ssmi_op)o, names, sizeof names);
    SSM_RETURN_IF(n == 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "set_variant: variant '%s' of %s: it has no variants on the %s backend of this build", variant,
                  op, ssm_backend_name(ctx->backend));
    return ssmi_error(ctx, SSM_STATUS_INVALID_ARGUMENT, "set_variant: variant '%s' of %s; its variants are: auto, %s",
                      variant, op, names);
}

SSM_API ssm_status ssm_context_set_variant(ssm_context * ctx, const char * op, const char * variant) {
    ssmi_clear_error(ctx);
    SSM_RETURN_IF(ctx == NULL, NULL, SSM_STATUS_INVALID_ARGUMENT, "set_variant: ctx is NULL");
    return set_variant(ctx, op, variant);
}

SSM_API const char * ssm_context_last_variant(const ssm_context * ctx) {
    return (ctx != NULL && ctx->last_variant != NULL) ? ctx->last_variant : "";
}

void ssmi_variant_init(ssm_context * ctx) {
    for (int32_t i = 0; i < SSMI_OP_COUNT; ++i) ctx->variant[i] = -1;
    ctx->last_variant = "";
}

int32_t ssmi_variant_forced(const ssm_context * ctx, ssmi_op op) {
    return (ctx != NULL && op >= 0 && op < SSMI_OP_COUNT) ? ctx->variant[op] : -1;
}

void ssmi_variant_ran(ssm_context * ctx, const char * name) {
    if (ctx != NULL) ctx->last_variant = name;
}

ssm_status ssmi_variant_not_applicable(ssm_context * ctx, ssmi_op op, const char * name, const char * rule) {
    return ssmi_error(ctx, SSM_STATUS_UNSUPPORTED, "%s: the forced variant '%s' does not apply to this problem (%s)",
                      ssmi_op_name(op), name, rule);
}
