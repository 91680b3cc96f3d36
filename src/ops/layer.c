/*
 * layer.c — public entry points of the layer operators around the scan (spec §6):
 * causal_conv1d (forward, backward, decode update) and gated RMSNorm (forward, backward).
 *
 * Each operator is its validator (params, the dimensions and shapes, the combination rules)
 * plus one line that defines the entry point through ssmi_dispatch (dispatch.c), which adds
 * the schema's rules. REF, CPU or CUDA (explicitly, or AUTO with x on a CUDA device); nothing
 * is written before the backend runs.
 */
#include <math.h>
#include <string.h>

#include "../core/ssmi.h"
#include "../cpu/ssmi_cpu_layer.h"
#include "../ref/ssmi_ref_layer.h"
#include "ops_common.h"

#ifdef SSMOPS_HAVE_CUDA
#include "../cuda/ssmi_cuda.h"
#endif

void ssm_conv1d_params_init(ssm_conv1d_params * params) {
    SSMI_PARAMS_INIT(params);
    params->activation = 1;
}

void ssm_rmsnorm_params_init(ssm_rmsnorm_params * params) {
    SSMI_PARAMS_INIT(params);
    params->eps = 1e-5;
    params->group_size = 0;
    params->norm_before_gate = 0;
}

/* ---- causal conv1d ------------------------------------------------------------------- */

static ssm_status check_conv_params(ssm_context * ctx, const char * op, const void * params) {
    const ssm_conv1d_params * p = params;
    SSM_RETURN_IF(p->activation != 0 && p->activation != 1, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->activation=%d must be 0 (none) or 1 (silu)", op, (int)p->activation);
    return SSM_STATUS_OK;
}

/* weight (D, W) with W ≥ 1 and the optional bias (D). Sets d->width. */
static ssm_status check_weight_bias(ssm_context * ctx, const char * op, const ssm_tensor * w, const ssm_tensor * bias,
                                    ssmi_conv1d_dims * d) {
    const int64_t ww[2] = {d->dim, -1};
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "weight", w, ww));
    d->width = w->shape[1];
    SSM_RETURN_IF(d->width < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: weight.shape[1]=%lld (width W) must be at least 1",
                  op, (long long)d->width);
    SSM_FORWARD_IF_ERROR(ssmi_check_inner_dim(ctx, op, "weight.shape[1] (W)", d->width));
    const int64_t wd[1] = {d->dim};
    return ssmi_check_shape(ctx, op, "bias", bias, wd);
}

/* The forward's inputs, which the backward takes too: x (batch, D, S) defines the
 * dimensions; weight, bias, seq_idx (batch, S) (negative ids mark padding; any values are
 * allowed), initial_states (batch, D, W−1), not with seq_idx. */
static ssm_status check_conv_inputs(ssm_context * ctx, const char * op, const ssm_causal_conv1d_args * a,
                                    ssmi_conv1d_dims * d) {
    d->batch = a->x.shape[0];
    d->dim = a->x.shape[1];
    d->seqlen = a->x.shape[2];
    SSM_FORWARD_IF_ERROR(check_weight_bias(ctx, op, &a->weight, &a->bias, d));
    d->state_len = d->width - 1;
    d->slots = d->batch;
    SSMI_SHAPE(seq_idx, d->batch, d->seqlen);
    SSM_RETURN_IF(ssmi_present(&a->cu_seqlens) && ssmi_present(&a->seq_idx), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: cu_seqlens and seq_idx were both given; pass only one of them", op);
    SSM_FORWARD_IF_ERROR(ssmi_check_cu_seqlens(ctx, op, &a->cu_seqlens, "x", d->batch, d->seqlen, &d->nseq));
    SSMI_SHAPE(initial_states, d->nseq > 0 ? d->nseq : d->batch, d->dim, d->width - 1);
    SSM_RETURN_IF(ssmi_present(&a->seq_idx) && ssmi_present(&a->initial_states), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: initial_states cannot be combined with seq_idx (a packed row has no single initial state)", op);
    return SSM_STATUS_OK;
}

static ssm_status validate_conv(ssm_context * ctx, const char * op, const ssm_conv1d_params * p,
                                const ssm_causal_conv1d_args * a, ssmi_conv1d_dims * d) {
    (void)p;
    SSM_FORWARD_IF_ERROR(check_conv_inputs(ctx, op, a, d));
    SSMI_SHAPE(out, d->batch, d->dim, d->seqlen);
    SSMI_SHAPE(final_states, d->nseq > 0 ? d->nseq : d->batch, d->dim, d->width - 1);
    SSM_RETURN_IF(ssmi_present(&a->seq_idx) && ssmi_present(&a->final_states), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: final_states cannot be combined with seq_idx (a packed row has no single final state)", op);
    return SSM_STATUS_OK;
}

static ssm_status conv_backend(ssm_context * ctx, ssmi_backend_kind be, const ssm_conv1d_params * p,
                               const ssmi_conv1d_dims * d, const ssm_causal_conv1d_args * a) {
#ifdef SSMOPS_HAVE_CUDA
    if (be == SSMI_BACKEND_CUDA) return ssmi_cuda_causal_conv1d(ctx, p, d, a);
#endif
    return be == SSMI_BACKEND_REF ? ssmi_ref_causal_conv1d(ctx, p, d, a) : ssmi_cpu_causal_conv1d(ctx, p, d, a);
}

/* t with dim `dim` cut to [start, start + len). */
static ssm_tensor conv_slice(const ssm_tensor * t, int32_t dim, int64_t start, int64_t len) {
    ssm_tensor v = *t;
    if (!ssmi_present(t)) return v;
    v.data = (char *)t->data + start * t->strides[dim] * (int64_t)ssm_dtype_size((ssm_dtype)t->dtype);
    v.shape[dim] = len;
    return v;
}

/* With cu_seqlens on REF and CPU every sequence is a batch-1 call of the backend on its tokens
 * and its state rows (those backends know no cu_seqlens); an empty one copies its initial
 * state (or zeros) to its final state. The CUDA backend takes cu_seqlens itself (one launch
 * for all sequences). */
static ssm_status run_causal_conv1d(ssm_context * ctx, ssmi_backend_kind be, const void * params,
                                    const ssmi_dims * dims, const void * args, void * ws) {
    const ssm_conv1d_params *      p = params;
    const ssm_causal_conv1d_args * a = args;
    const ssmi_conv1d_dims *       d = &dims->conv;
    (void)ws;
    if (d->nseq == 0 || be == SSMI_BACKEND_CUDA) return conv_backend(ctx, be, p, d, a);
    for (int64_t s = 0; s < d->nseq; ++s) {
        const int64_t st = ssmi_get_i64(&a->cu_seqlens, ssmi_off1(&a->cu_seqlens, s));
        const int64_t len = ssmi_get_i64(&a->cu_seqlens, ssmi_off1(&a->cu_seqlens, s + 1)) - st;
        ssm_causal_conv1d_args one = *a;
        ssmi_conv1d_dims       od = *d;
        one.initial_states = conv_slice(&a->initial_states, 0, s, 1);
        one.final_states = conv_slice(&a->final_states, 0, s, 1);
        memset(&one.cu_seqlens, 0, sizeof one.cu_seqlens);
        if (len == 0) {
            if (!ssmi_present(&one.final_states)) continue;
            for (int64_t c = 0; c < d->dim; ++c)
                for (int64_t k = 0; k < d->width - 1; ++k)
                    ssmi_set_f64(&one.final_states, ssmi_off3(&one.final_states, 0, c, k),
                                 ssmi_present(&one.initial_states)
                                     ? ssmi_get_f64(&one.initial_states, ssmi_off3(&one.initial_states, 0, c, k))
                                     : 0.0);
            continue;
        }
        one.x = conv_slice(&a->x, 2, st, len);
        one.out = conv_slice(&a->out, 2, st, len);
        od.seqlen = len;
        od.nseq = 0;
        SSM_FORWARD_IF_ERROR(conv_backend(ctx, be, p, &od, &one));
    }
    return SSM_STATUS_OK;
}

static ssm_status validate_causal_conv1d_(ssm_context * ctx, const char * op, const void * p, const void * a,
                                          ssmi_dims * d) {
    return validate_conv(ctx, op, p, a, &d->conv);
}

static const ssmi_op_impl causal_conv1d_impl = {SSMI_OP_causal_conv1d, check_conv_params, validate_causal_conv1d_,
                                                NULL, run_causal_conv1d, offsetof(ssm_causal_conv1d_args, x)};

ssm_status ssm_causal_conv1d(ssm_context * ctx, const ssm_conv1d_params * params, const ssm_causal_conv1d_args * args) {
    return ssmi_dispatch(ctx, &causal_conv1d_impl, "causal_conv1d", params, args, NULL, 0, NULL);
}

static ssm_status validate_conv_bwd(ssm_context * ctx, const char * op, const ssm_conv1d_params * p,
                                    const ssm_causal_conv1d_bwd_args * a, ssmi_conv1d_dims * d) {
    (void)p;
    ssm_causal_conv1d_args             fwd;
    ssmi_args_project(SSMI_OP_causal_conv1d, &fwd, SSMI_OP_causal_conv1d_bwd, a);
    SSM_FORWARD_IF_ERROR(check_conv_inputs(ctx, op, &fwd, d));
    SSMI_SHAPE(dout, d->batch, d->dim, d->seqlen);
    SSMI_SHAPE(dfinal_states, d->batch, d->dim, d->width - 1);
    SSM_RETURN_IF(ssmi_present(&a->seq_idx) && ssmi_present(&a->dfinal_states), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: dfinal_states cannot be combined with seq_idx (the forward has no final_states then)", op);
    return ssmi_check_gradient_shapes(ctx, op, SSMI_OP_causal_conv1d_bwd, a);
}
SSMI_DEFINE_CUDA_OP(causal_conv1d_bwd, ssm_conv1d_params, conv, check_conv_params, validate_conv_bwd, x)

static ssm_status validate_update(ssm_context * ctx, const char * op, const ssm_conv1d_params * p,
                                  const ssm_causal_conv1d_update_args * a, ssmi_conv1d_dims * d) {
    (void)p;
    d->batch = a->x.shape[0];
    d->dim = a->x.shape[1];
    SSM_FORWARD_IF_ERROR(check_weight_bias(ctx, op, &a->weight, &a->bias, d));
    SSMI_SHAPE(conv_state, -1, d->dim, -1);
    d->slots = a->conv_state.shape[0];
    d->state_len = a->conv_state.shape[2];
    SSM_RETURN_IF(d->state_len < d->width - 1, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: conv_state.shape[2]=%lld must be at least weight.shape[1]-1=%lld", op, (long long)d->state_len,
                  (long long)(d->width - 1));
    SSM_FORWARD_IF_ERROR(ssmi_check_inner_dim(ctx, op, "conv_state.shape[2] (L)", d->state_len));
    SSMI_SHAPE(state_batch_indices, d->batch);
    SSM_RETURN_IF(!ssmi_present(&a->state_batch_indices) && d->slots != d->batch, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: conv_state.shape[0]=%lld differs from x.shape[0]=%lld; without state_batch_indices row b uses "
                  "slot b",
                  op, (long long)d->slots, (long long)d->batch);
    SSMI_SHAPE(out, d->batch, d->dim);
    return ssmi_check_slot_indices(ctx, op, &a->state_batch_indices, d->batch, d->slots, "conv_state");
}
SSMI_DEFINE_CUDA_OP(causal_conv1d_update, ssm_conv1d_params, conv, check_conv_params, validate_update, x)

/* ---- gated RMSNorm ------------------------------------------------------------------- */

static ssm_status check_norm_params(ssm_context * ctx, const char * op, const void * params) {
    const ssm_rmsnorm_params * p = params;
    SSM_RETURN_IF(!(p->eps > 0.0) || isinf(p->eps), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->eps=%g must be positive and finite", op, p->eps);
    SSM_RETURN_IF(p->group_size < 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->group_size=%lld is negative (0 means one group per row)", op,
                  (long long)p->group_size);
    SSM_RETURN_IF(p->norm_before_gate != 0 && p->norm_before_gate != 1, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->norm_before_gate=%d must be 0 or 1", op, (int)p->norm_before_gate);
    return SSM_STATUS_OK;
}

/* x (M, D) defines the dimensions; z (M, D) optional, weight (D); the group size resolved.
 * a: the forward's arguments (the backward's projected onto them). */
static ssm_status check_norm_inputs(ssm_context * ctx, const char * op, const ssm_rmsnorm_params * p,
                                    const ssm_rmsnorm_gated_args * a, ssmi_rmsnorm_dims * d) {
    d->rows = a->x.shape[0];
    d->dim = a->x.shape[1];
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "z", &a->z, a->x.shape));
    SSMI_SHAPE(weight, d->dim);
    d->group_size = p->group_size > 0 ? p->group_size : (d->dim > 0 ? d->dim : 1);
    SSM_RETURN_IF(d->dim % d->group_size != 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: x.shape[1]=%lld is not a multiple of params->group_size=%lld", op, (long long)d->dim,
                  (long long)d->group_size);
    return SSM_STATUS_OK;
}

static ssm_status validate_norm(ssm_context * ctx, const char * op, const ssm_rmsnorm_params * p,
                                const ssm_rmsnorm_gated_args * a, ssmi_rmsnorm_dims * d) {
    SSM_FORWARD_IF_ERROR(check_norm_inputs(ctx, op, p, a, d));
    return ssmi_check_shape(ctx, op, "out", &a->out, a->x.shape);
}
SSMI_DEFINE_CUDA_OP(rmsnorm_gated, ssm_rmsnorm_params, norm, check_norm_params, validate_norm, x)

static ssm_status validate_norm_bwd(ssm_context * ctx, const char * op, const ssm_rmsnorm_params * p,
                                    const ssm_rmsnorm_gated_bwd_args * a, ssmi_rmsnorm_dims * d) {
    ssm_rmsnorm_gated_args             fwd;
    ssmi_args_project(SSMI_OP_rmsnorm_gated, &fwd, SSMI_OP_rmsnorm_gated_bwd, a);
    SSM_FORWARD_IF_ERROR(check_norm_inputs(ctx, op, p, &fwd, d));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "dout", &a->dout, a->x.shape));
    return ssmi_check_gradient_shapes(ctx, op, SSMI_OP_rmsnorm_gated_bwd, a);
}
SSMI_DEFINE_CUDA_OP(rmsnorm_gated_bwd, ssm_rmsnorm_params, norm, check_norm_params, validate_norm_bwd, x)
