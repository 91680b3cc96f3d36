/*
 * dispatch.c — the one path every operator call takes (ssmi_dispatch, see ops_common.h), and
 * the part of the validation that the operator schema (core/schema.c) gives: per tensor
 * presence, device, rank, dtype class and sizes; the `needs` rules; output layouts; and no
 * output overlapping an input or another output, except a decode step's final state that is
 * exactly its input pool. A sequence operator's state pools (state_pools.c) are replaced by
 * dense rows before the operator's own validation and written back after its run.
 */
#include <stdint.h>
#include <string.h>

#include "ops_common.h"

#ifdef SSMOPS_HAVE_CUDA
#include "../cuda/ssmi_cuda.h"
#endif

/* Room for any operator's args struct: the copy the CUDA path makes with host index views. */
typedef union ssmi_any_args {
#define SSMI_ANY_ARGS_(name) ssm_##name##_args name;
    SSMI_OP_LIST(SSMI_ANY_ARGS_)
#undef SSMI_ANY_ARGS_
} ssmi_any_args;

enum { SSMI_MAX_INDEX_ARGS = 6 }; /* index tensors of one operator (mamba2_scan: 5) */

/* Argument names differ mostly in their first letter: compare it inline before strcmp (a
 * decode step resolves a few names per call). */
static int same_name(const char * a, const char * b) { return a[0] == b[0] && strcmp(a, b) == 0; }

static const ssm_arg_info * find_arg(const ssm_op_info * info, const char * name) {
    for (int32_t i = 0; i < info->nargs; ++i)
        if (same_name(info->args[i].name, name)) return &info->args[i];
    return NULL;
}

static int is_output(const ssm_arg_info * arg) { return (arg->role & SSM_ARG_ROLE_OUTPUT) != 0; }

/* A decode step's read slots (state_batch_indices): the CUDA backend reads a device tensor of
 * them on the device (no host copy, no synchronisation, so the call can be captured in a CUDA
 * graph), and host validation of their values is skipped: an index outside [0, slots) makes
 * its row padding there. Every other index tensor is read on the host. */
static int device_readable_index(const ssm_arg_info * arg) {
    return arg->dtype_class == SSM_DTYPE_CLASS_INDEX && same_name(arg->name, "state_batch_indices");
}

/* ---- backend ---------------------------------------------------------------------------- */

static ssm_status pick_backend(ssm_context * ctx, const char * op, const ssm_op_info * info, const ssmi_op_impl * impl,
                               const void * args, ssmi_backend_kind * out) {
    const ssm_backend b = ctx == NULL ? SSM_BACKEND_AUTO : ctx->backend;
    const int         has_cuda = (info->backends >> SSM_BACKEND_CUDA) & 1u;
    const ssm_tensor * lead =
        has_cuda && args != NULL ? (const ssm_tensor *)(const void *)((const char *)args + impl->lead) : NULL;
    const int on_cuda = ssmi_present(lead) && lead->device.type == SSM_DEVICE_CUDA;
    switch (b) {
        case SSM_BACKEND_REF: *out = SSMI_BACKEND_REF; return SSM_STATUS_OK;
        case SSM_BACKEND_CPU: *out = SSMI_BACKEND_CPU; return SSM_STATUS_OK;
        case SSM_BACKEND_AUTO:
#ifdef SSMOPS_HAVE_CUDA
            *out = on_cuda ? SSMI_BACKEND_CUDA : SSMI_BACKEND_CPU;
#else
            /* Without the backend in the build, device tensors go to the CPU path, whose
             * validation rejects them (INVALID_LAYOUT: not in CPU memory). */
            (void)on_cuda;
            *out = SSMI_BACKEND_CPU;
#endif
            return SSM_STATUS_OK;
        case SSM_BACKEND_CUDA:
#ifdef SSMOPS_HAVE_CUDA
            SSM_RETURN_IF(!has_cuda, ctx, SSM_STATUS_UNSUPPORTED, "%s: the CUDA backend has no path for this operator",
                          op);
            *out = SSMI_BACKEND_CUDA;
            return SSM_STATUS_OK;
#else
            return ssmi_error(ctx, SSM_STATUS_UNSUPPORTED, "%s: the CUDA backend is not built", op);
#endif
        default: return ssmi_error(ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: context backend %d is unknown", op, (int)b);
    }
}

#ifdef SSMOPS_HAVE_CUDA
/* An index tensor as a host view: a well-formed (1-D/2-D, I32/I64) tensor on a CUDA device is
 * copied to host memory (*buf, released with ssmi_free; the stream is synchronised);
 * anything else is left as it is for validation to report. */
static ssm_status host_index(ssm_context * ctx, const char * op, const char * name, ssm_tensor * t, void ** buf) {
    *buf = NULL;
    if (!ssmi_present(t) || t->device.type != SSM_DEVICE_CUDA) return SSM_STATUS_OK;
    if (t->ndim < 1 || t->ndim > 2 || !ssmi_is_int(t->dtype)) return SSM_STATUS_OK;
    int64_t lo = 0, hi = 0;
    for (int32_t i = 0; i < t->ndim; ++i) {
        if (t->shape[i] < 0 || t->shape[i] > (INT64_C(1) << 40) || t->strides[i] > (INT64_C(1) << 40) ||
            t->strides[i] < -(INT64_C(1) << 40))
            return SSM_STATUS_OK; /* malformed: validation rejects it */
        if (t->shape[i] == 0) return SSM_STATUS_OK; /* empty: nothing to read */
        const int64_t ext = (t->shape[i] - 1) * t->strides[i];
        if (ext < 0) lo += ext; else hi += ext;
    }
    const size_t elem = ssm_dtype_size((ssm_dtype)t->dtype);
    const size_t bytes = (size_t)(hi - lo + 1) * elem;
    unsigned char * host = ssmi_alloc(ctx, bytes);
    SSM_RETURN_IF(host == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "%s: could not allocate %zu bytes for a host copy of an index tensor", op, bytes);
    const unsigned char * src = (const unsigned char *)t->data - (size_t)(-lo) * elem;
    const ssm_status      st = ssmi_cuda_copy_to_host(ctx, op, name, host, src, bytes);
    if (st != SSM_STATUS_OK) {
        ssmi_free(ctx, host);
        return st;
    }
    t->data = host + (size_t)(-lo) * elem;
    t->device.type = SSM_DEVICE_CPU;
    *buf = host;
    return SSM_STATUS_OK;
}
#endif

/* ---- the schema's rules ----------------------------------------------------------------- */

/* Presence, device, rank, dtype class and sizes of every argument. */
static ssm_status check_args(ssm_context * ctx, const char * op, const ssm_op_info * info, const void * args,
                             int32_t device) {
    for (int32_t i = 0; i < info->nargs; ++i) {
        const ssm_arg_info * arg = &info->args[i];
        const int            index = arg->dtype_class == SSM_DTYPE_CLASS_INDEX;
        const ssm_tensor *   t = ssmi_arg_tensor(args, arg);
        /* index tensors on the host, but for a device-readable one on the CUDA backend */
        const int32_t where = !index ? device
                              : device == SSM_DEVICE_CUDA && device_readable_index(arg) && ssmi_present(t) &&
                                        t->device.type == SSM_DEVICE_CUDA
                                  ? SSM_DEVICE_CUDA
                                  : SSM_DEVICE_CPU;
        SSM_FORWARD_IF_ERROR(ssmi_check_view(ctx, op, arg->name, t, arg->role & SSM_ARG_ROLE_OPTIONAL, arg->ranks,
                                             index ? SSMI_INDEX_DTYPES : SSMI_FLOAT_DTYPES, where));
    }
    return SSM_STATUS_OK;
}

/* The `needs` rules, a decode step's final pool shaped like its input pool, output layouts,
 * then every present output against every present input (except its in-place pool when it
 * is exactly that view) and every other output. */
static ssm_status check_outputs(ssm_context * ctx, const char * op, const ssm_op_info * info, const void * args) {
    for (int32_t i = 0; i < info->nargs; ++i) {
        const ssm_arg_info * arg = &info->args[i];
        if (arg->needs == NULL || !ssmi_present(ssmi_arg_tensor(args, arg))) continue;
        const ssm_arg_info * of = find_arg(info, arg->needs);
        if (of != NULL && ssmi_present(ssmi_arg_tensor(args, of))) continue;
        /* "dz" is the gradient of "z" */
        if (arg->name[0] == 'd' && strcmp(arg->name + 1, arg->needs) == 0)
            return ssmi_error(ctx, SSM_STATUS_INVALID_ARGUMENT,
                              "%s: %s was requested without %s; it is the gradient of %s and needs it", op, arg->name,
                              arg->needs, arg->needs);
        return ssmi_error(ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: %s was requested without %s, which it needs", op,
                          arg->name, arg->needs);
    }
    for (int32_t i = 0; i < info->nargs; ++i) {
        const ssm_arg_info * fin = &info->args[i];
        if (fin->in_place == NULL) continue;
        const ssm_tensor * pool = ssmi_arg_tensor(args, find_arg(info, fin->in_place));
        SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, fin->name, ssmi_arg_tensor(args, fin), pool->shape));
    }
    for (int32_t o = 0; o < info->nargs; ++o)
        if (is_output(&info->args[o]))
            SSM_FORWARD_IF_ERROR(
                ssmi_check_output_layout(ctx, op, info->args[o].name, ssmi_arg_tensor(args, &info->args[o])));
    for (int32_t o = 0; o < info->nargs; ++o) {
        const ssm_arg_info * out = &info->args[o];
        const ssm_tensor *   t = ssmi_arg_tensor(args, out);
        if (!is_output(out) || !ssmi_present(t)) continue;
        for (int32_t i = 0; i < info->nargs; ++i) {
            const ssm_arg_info * other = &info->args[i];
            const ssm_tensor *   u = ssmi_arg_tensor(args, other);
            if (i == o || (is_output(other) && i < o)) continue; /* each pair of outputs once */
            if (out->in_place != NULL && ssmi_present(u) && ssmi_same_addresses(t, u) &&
                same_name(out->in_place, other->name))
                continue;
            SSM_FORWARD_IF_ERROR(ssmi_check_no_overlap(ctx, op, out->name, t, other->name, u));
        }
    }
    return SSM_STATUS_OK;
}

/* After a decode step: a separate final pool (an output with an in-place input) holds the
 * whole pool, so it gets every slot no row used (core/pool.c; on the device for CUDA). */
static ssm_status copy_unused_pools(ssm_context * ctx, const char * op, const ssm_op_info * info,
                                    ssmi_backend_kind be, const void * args) {
    const ssm_tensor * idx = NULL;
    for (int32_t i = 0; i < info->nargs; ++i) {
        const ssm_arg_info * out = &info->args[i];
        const ssm_tensor *   fin = ssmi_arg_tensor(args, out);
        if (out->in_place == NULL || !ssmi_present(fin)) continue;
        if (idx == NULL) { /* the written slots: dst_state_batch_indices, else state_batch_indices */
            const ssm_arg_info * dst_arg = find_arg(info, "dst_state_batch_indices");
            const ssm_arg_info * idx_arg = find_arg(info, "state_batch_indices");
            const ssm_tensor *   dst = dst_arg != NULL ? ssmi_arg_tensor(args, dst_arg) : NULL;
            idx = dst != NULL && ssmi_present(dst) ? dst : idx_arg != NULL ? ssmi_arg_tensor(args, idx_arg) : NULL;
            if (!ssmi_present(idx)) return SSM_STATUS_OK; /* slots == batch: every slot was updated */
        }
        const ssm_tensor * in = ssmi_arg_tensor(args, find_arg(info, out->in_place));
#ifdef SSMOPS_HAVE_CUDA
        if (be == SSMI_BACKEND_CUDA) {
            SSM_FORWARD_IF_ERROR(ssmi_cuda_copy_unused_slots(ctx, op, in, fin, idx, idx->shape[0]));
            continue;
        }
#endif
        SSM_FORWARD_IF_ERROR(ssmi_copy_unused_slots(ctx, op, in, fin, idx, idx->shape[0]));
    }
    (void)be;
    return SSM_STATUS_OK;
}

/* ---- the path ----------------------------------------------------------------------------- */

/* 1 when the call has nothing to write: every output given is empty (a zero dimension), or
 * none is given. */
static int nothing_to_write(const ssm_op_info * info, const void * args) {
    for (int32_t i = 0; i < info->nargs; ++i) {
        if (!(info->args[i].role & SSM_ARG_ROLE_OUTPUT)) continue;
        const ssm_tensor * t = (const ssm_tensor *)((const char *)args + info->args[i].offset);
        if (!ssmi_present(t)) continue;
        int empty = 0;
        for (int32_t d = 0; d < t->ndim; ++d) empty |= t->shape[d] == 0;
        if (!empty) return 0;
    }
    return 1;
}

/* 1 when a present tensor of args is empty (a zero dimension) and has a nonzero stride. */
static int has_strided_empty_view(const ssm_op_info * info, const void * args) {
    for (int32_t i = 0; i < info->nargs; ++i) {
        const ssm_tensor * t = ssmi_arg_tensor(args, &info->args[i]);
        if (!ssmi_present(t)) continue;
        int empty = 0, strided = 0;
        for (int32_t d = 0; d < t->ndim; ++d) {
            empty |= t->shape[d] == 0;
            strided |= t->strides[d] != 0;
        }
        if (empty && strided) return 1;
    }
    return 0;
}

/* args with the strides of every empty view zeroed, into *copy: an empty view addresses no
 * element, but a kernel looping over its other dimensions may still form offsets from its
 * strides, which overflow for huge ones. */
static const void * zero_empty_strides(const ssm_op_info * info, const void * args, ssmi_any_args * copy) {
    memcpy(copy, args, info->args_size);
    for (int32_t i = 0; i < info->nargs; ++i) {
        ssm_tensor * t = (ssm_tensor *)(void *)((char *)copy + info->args[i].offset);
        if (!ssmi_present(t)) continue;
        int empty = 0;
        for (int32_t d = 0; d < t->ndim; ++d) empty |= t->shape[d] == 0;
        if (empty)
            for (int32_t d = 0; d < t->ndim; ++d) t->strides[d] = 0;
    }
    return copy;
}

/* validate_and_run after the schema's per-tensor checks. */
static ssm_status check_and_run(ssm_context * ctx, const ssmi_op_impl * impl, const char * op,
                                const ssm_op_info * info, ssmi_backend_kind be, const void * params, const void * args,
                                void * workspace, size_t workspace_size, size_t * bytes) {
    ssmi_dims dims;
    memset(&dims, 0, sizeof dims);
    SSM_FORWARD_IF_ERROR(impl->validate(ctx, op, params, args, &dims));
    SSM_FORWARD_IF_ERROR(check_outputs(ctx, op, info, args));

    /* A valid call with nothing to write needs no workspace, and its plan is not made: the
     * planner would multiply the other dimensions, which may be huge (2^40 rows of 2^40
     * heads of an empty sequence). */
    const int empty = nothing_to_write(info, args);
    size_t    need = 0;
    if (impl->workspace != NULL && !empty) SSM_FORWARD_IF_ERROR(impl->workspace(ctx, be, params, &dims, args, &need));
    if (bytes != NULL) {
        *bytes = need;
        return SSM_STATUS_OK;
    }
    if (workspace != NULL) {
        SSM_RETURN_IF(((uintptr_t)workspace % SSMI_ALIGN) != 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: workspace %p is not %d-byte aligned", op, workspace, SSMI_ALIGN);
        SSM_RETURN_IF(workspace_size < need, ctx, SSM_STATUS_WORKSPACE_TOO_SMALL,
                      "%s: workspace_size=%zu is smaller than the %zu bytes needed (see ssm_%s_workspace_size)", op,
                      workspace_size, need, info->name);
    }
    /* A valid call with nothing to write ends here: the kernels would still loop over the
     * other dimensions, which may be huge (2^62 rows of an empty sequence). */
    if (empty) return SSM_STATUS_OK;
    /* Without a workspace the CPU backend gets one from the context's allocator; the
     * reference and the CUDA backend allocate their own. */
    ssmi_any_args zeroed;
    if (has_strided_empty_view(info, args)) args = zero_empty_strides(info, args, &zeroed);
    void * owned = NULL;
    if (workspace == NULL && need > 0 && be == SSMI_BACKEND_CPU) {
        owned = workspace = ssmi_alloc(ctx, need);
        SSM_RETURN_IF(owned == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: could not allocate %zu bytes of workspace",
                      op, need);
    }
    ssm_status st = impl->run(ctx, be, params, &dims, args, workspace);
    ssmi_free(ctx, owned);
    /* After success only: a failed call writes nothing, and the step never touches these slots. */
    if (st == SSM_STATUS_OK) st = copy_unused_pools(ctx, op, info, be, args);
    return st;
}

/* Steps 3-5 of ssmi_dispatch on args whose index tensors are host views (but a device-readable
 * one on the CUDA backend, device_readable_index): with state pools,
 * on args whose pools are dense rows gathered from them (state_pools.c), the final rows
 * scattered to their slots after success. */
static ssm_status validate_and_run(ssm_context * ctx, const ssmi_op_impl * impl, const char * op,
                                   const ssm_op_info * info, ssmi_backend_kind be, const void * params,
                                   const void * args, void * workspace, size_t workspace_size, size_t * bytes) {
    const int32_t device = be == SSMI_BACKEND_CUDA ? SSM_DEVICE_CUDA : SSM_DEVICE_CPU;
    SSM_FORWARD_IF_ERROR(check_args(ctx, op, info, args, device));
    ssmi_any_args  pooled;
    ssmi_pool_call pc;
    ssm_status     st = ssmi_pools_prepare(ctx, op, impl->op, be == SSMI_BACKEND_CUDA, args, &pooled, &pc);
    if (st == SSM_STATUS_OK && !pc.active)
        return check_and_run(ctx, impl, op, info, be, params, args, workspace, workspace_size, bytes);
    if (st == SSM_STATUS_OK)
        st = check_and_run(ctx, impl, op, info, be, params, &pooled, workspace, workspace_size, bytes);
    if (st == SSM_STATUS_OK && bytes == NULL) st = ssmi_pools_scatter(ctx, op, &pc);
    const ssm_status rs = ssmi_pools_release(ctx, op, &pc);
    return st != SSM_STATUS_OK ? st : rs;
}

ssm_status ssmi_dispatch(ssm_context * ctx, const ssmi_op_impl * impl, const char * op, const void * params,
                         const void * args, void * workspace, size_t workspace_size, size_t * bytes) {
    const ssm_op_info * info = ssmi_op_info(impl->op);
    ssmi_backend_kind   be = SSMI_BACKEND_CPU;
    ssmi_clear_error(ctx);
    SSM_FORWARD_IF_ERROR(pick_backend(ctx, op, info, impl, args, &be));
    /* Every params struct starts with its size, set by its _init function. */
    SSM_RETURN_IF(params == NULL, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: params is NULL", op);
    const size_t size = *(const size_t *)params;
    SSM_RETURN_IF(size < info->params_size, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->size=%zu is smaller than sizeof(%s)=%zu (call %s_init)", op, size, info->params,
                  info->params_size, info->params);
    SSM_FORWARD_IF_ERROR(impl->check_params(ctx, op, params));
    SSM_RETURN_IF(args == NULL, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: args is NULL", op);
    if (be != SSMI_BACKEND_CUDA)
        return validate_and_run(ctx, impl, op, info, be, params, args, workspace, workspace_size, bytes);
#ifdef SSMOPS_HAVE_CUDA
    /* The call on a copy of the args whose device index tensors are host copies. */
    ssmi_any_args host;
    void *        bufs[SSMI_MAX_INDEX_ARGS] = {NULL};
    int           nbufs = 0;
    ssm_status    st = SSM_STATUS_OK;
    memcpy(&host, args, info->args_size);
    for (int32_t i = 0; i < info->nargs && st == SSM_STATUS_OK; ++i) {
        if (info->args[i].dtype_class != SSM_DTYPE_CLASS_INDEX || device_readable_index(&info->args[i])) continue;
        if (nbufs == SSMI_MAX_INDEX_ARGS)
            st = ssmi_error(ctx, SSM_STATUS_INTERNAL, "%s: more index tensors than %d", op, SSMI_MAX_INDEX_ARGS);
        else
            st = host_index(ctx, op, info->args[i].name, (ssm_tensor *)(void *)((char *)&host + info->args[i].offset),
                            &bufs[nbufs++]);
    }
    if (st == SSM_STATUS_OK)
        st = validate_and_run(ctx, impl, op, info, be, params, &host, workspace, workspace_size, bytes);
    for (int i = 0; i < nbufs; ++i) ssmi_free(ctx, bufs[i]);
    return st;
#else
    return ssmi_error(ctx, SSM_STATUS_INTERNAL, "%s: the CUDA backend is not built", op);
#endif
}

void ssmi_args_project(ssmi_op dst_op, void * dst, ssmi_op src_op, const void * src) {
    const ssm_op_info * to = ssmi_op_info(dst_op);
    const ssm_op_info * from = ssmi_op_info(src_op);
    memset(dst, 0, to->args_size);
    for (int32_t i = 0; i < to->nargs; ++i) {
        const ssm_arg_info * s = find_arg(from, to->args[i].name);
        if (s != NULL) memcpy((char *)dst + to->args[i].offset, ssmi_arg_tensor(src, s), sizeof(ssm_tensor));
    }
}
