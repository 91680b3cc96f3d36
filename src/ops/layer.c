/*
 * layer.c — public entry points of the layer operators around the scan (spec §6):
 * causal_conv1d (forward, backward, decode update) and gated RMSNorm (forward, backward).
 *
 * Same three steps as every entry point: validate every argument (nothing is written
 * before the backend runs), fill the dims, dispatch to REF or CPU.
 */
#include <math.h>
#include <string.h>

#include "../core/ssmi.h"
#include "../cpu/ssmi_cpu_layer.h"
#include "../ref/ssmi_ref_layer.h"
#include "ops_common.h"

#define F SSMI_FLOAT_DTYPES

void ssm_conv1d_params_init(ssm_conv1d_params * params) {
    if (params == NULL) return;
    memset(params, 0, sizeof *params);
    params->size = sizeof *params;
    params->activation = 1;
}

void ssm_rmsnorm_params_init(ssm_rmsnorm_params * params) {
    if (params == NULL) return;
    memset(params, 0, sizeof *params);
    params->size = sizeof *params;
    params->eps = 1e-5;
    params->group_size = 0;
    params->norm_before_gate = 0;
}

/* ---- shared checks ------------------------------------------------------------------- */

static ssm_status check_conv_params(ssm_context * ctx, const char * op, const ssm_conv1d_params * p,
                                    const void * args) {
    SSM_RETURN_IF(p == NULL, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: params is NULL", op);
    SSM_RETURN_IF(p->size < sizeof(ssm_conv1d_params), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->size=%zu is smaller than sizeof(ssm_conv1d_params)=%zu (call ssm_conv1d_params_init)",
                  op, p->size, sizeof(ssm_conv1d_params));
    SSM_RETURN_IF(p->activation != 0 && p->activation != 1, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->activation=%d must be 0 (none) or 1 (silu)", op, (int)p->activation);
    SSM_RETURN_IF(args == NULL, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: args is NULL", op);
    return SSM_STATUS_OK;
}

/* weight (D, W) with W ≥ 1 and the optional bias (D). Sets d->width. */
static ssm_status check_weight_bias(ssm_context * ctx, const char * op, const ssm_tensor * w, const ssm_tensor * bias,
                                    ssmi_conv1d_dims * d) {
    const int64_t ww[2] = {d->dim, -1};
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, "weight", w, 0, 2, ww, F));
    d->width = w->shape[1];
    SSM_RETURN_IF(d->width < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: weight.shape[1]=%lld (width W) must be at least 1",
                  op, (long long)d->width);
    const int64_t wd[1] = {d->dim};
    return ssmi_check_tensor(ctx, op, "bias", bias, 1, 1, wd, F);
}

/* Forward-family inputs: x (batch, D, S), weight, bias, seq_idx (batch, S) (negative ids
 * mark padding; any values are allowed), initial_states (batch, D, W−1), not with seq_idx. */
static ssm_status check_conv_inputs(ssm_context * ctx, const char * op, const ssm_tensor * x, const ssm_tensor * w,
                                    const ssm_tensor * bias, const ssm_tensor * seq_idx, const ssm_tensor * init,
                                    ssmi_conv1d_dims * d) {
    static const int64_t any3[3] = {-1, -1, -1};
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, "x", x, 0, 3, any3, F));
    d->batch = x->shape[0];
    d->dim = x->shape[1];
    d->seqlen = x->shape[2];
    SSM_FORWARD_IF_ERROR(check_weight_bias(ctx, op, w, bias, d));
    d->state_len = d->width - 1;
    d->slots = d->batch;
    const int64_t ws[2] = {d->batch, d->seqlen};
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, "seq_idx", seq_idx, 1, 2, ws, SSMI_INDEX_DTYPES));
    const int64_t wi[3] = {d->batch, d->dim, d->width - 1};
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, "initial_states", init, 1, 3, wi, F));
    SSM_RETURN_IF(ssmi_present(seq_idx) && ssmi_present(init), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: initial_states cannot be combined with seq_idx (a packed row has no single initial state)", op);
    return SSM_STATUS_OK;
}

/* ---- causal_conv1d -------------------------------------------------------------------- */

static ssm_status validate_conv(ssm_context * ctx, const char * op, const ssm_conv1d_params * p,
                                const ssm_causal_conv1d_args * a, ssmi_conv1d_dims * d) {
    SSM_FORWARD_IF_ERROR(check_conv_params(ctx, op, p, a));
    SSM_FORWARD_IF_ERROR(check_conv_inputs(ctx, op, &a->x, &a->weight, &a->bias, &a->seq_idx, &a->initial_states, d));
    const int64_t wx[3] = {d->batch, d->dim, d->seqlen};
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, op, "out", &a->out, 0, 3, wx, F));
    const int64_t wf[3] = {d->batch, d->dim, d->width - 1};
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, op, "final_states", &a->final_states, 1, 3, wf, F));
    SSM_RETURN_IF(ssmi_present(&a->seq_idx) && ssmi_present(&a->final_states), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: final_states cannot be combined with seq_idx (a packed row has no single final state)", op);
    const ssmi_named ins[] = {{"x", &a->x},
                              {"weight", &a->weight},
                              {"bias", &a->bias},
                              {"seq_idx", &a->seq_idx},
                              {"initial_states", &a->initial_states}};
    const ssmi_named outs[] = {{"out", &a->out}, {"final_states", &a->final_states}};
    return ssmi_check_disjoint(ctx, op, outs, 2, ins, 5);
}

ssm_status ssm_causal_conv1d(ssm_context * ctx, const ssm_conv1d_params * params, const ssm_causal_conv1d_args * args) {
    static const char op[] = "causal_conv1d";
    ssmi_clear_error(ctx);
    ssmi_conv1d_dims  d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(validate_conv(ctx, op, params, args, &d));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, op, &be));
    return be == SSMI_BACKEND_REF ? ssmi_ref_causal_conv1d(ctx, params, &d, args)
                                  : ssmi_cpu_causal_conv1d(ctx, params, &d, args);
}

/* ---- causal_conv1d_bwd ---------------------------------------------------------------- */

static ssm_status validate_conv_bwd(ssm_context * ctx, const char * op, const ssm_conv1d_params * p,
                                    const ssm_causal_conv1d_bwd_args * a, ssmi_conv1d_dims * d) {
    SSM_FORWARD_IF_ERROR(check_conv_params(ctx, op, p, a));
    SSM_FORWARD_IF_ERROR(check_conv_inputs(ctx, op, &a->x, &a->weight, &a->bias, &a->seq_idx, &a->initial_states, d));
    const int64_t wx[3] = {d->batch, d->dim, d->seqlen};
    const int64_t wf[3] = {d->batch, d->dim, d->width - 1};
    const int64_t ww[2] = {d->dim, d->width};
    const int64_t wd[1] = {d->dim};
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, "dout", &a->dout, 0, 3, wx, F));
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, "dfinal_states", &a->dfinal_states, 1, 3, wf, F));
    SSM_RETURN_IF(ssmi_present(&a->seq_idx) && ssmi_present(&a->dfinal_states), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: dfinal_states cannot be combined with seq_idx (the forward has no final_states then)", op);
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, op, "dx", &a->dx, 1, 3, wx, F));
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, op, "dweight", &a->dweight, 1, 2, ww, F));
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, op, "dbias", &a->dbias, 1, 1, wd, F));
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, op, "dinitial_states", &a->dinitial_states, 1, 3, wf, F));
    SSM_RETURN_IF(ssmi_present(&a->dbias) && !ssmi_present(&a->bias), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: dbias was requested without bias", op);
    SSM_RETURN_IF(ssmi_present(&a->dinitial_states) && !ssmi_present(&a->initial_states), ctx,
                  SSM_STATUS_INVALID_ARGUMENT, "%s: dinitial_states was requested without initial_states", op);
    const ssmi_named ins[] = {{"x", &a->x},
                              {"weight", &a->weight},
                              {"bias", &a->bias},
                              {"seq_idx", &a->seq_idx},
                              {"initial_states", &a->initial_states},
                              {"dout", &a->dout},
                              {"dfinal_states", &a->dfinal_states}};
    const ssmi_named outs[] = {
        {"dx", &a->dx}, {"dweight", &a->dweight}, {"dbias", &a->dbias}, {"dinitial_states", &a->dinitial_states}};
    return ssmi_check_disjoint(ctx, op, outs, 4, ins, 7);
}

ssm_status ssm_causal_conv1d_bwd(ssm_context * ctx, const ssm_conv1d_params * params,
                                 const ssm_causal_conv1d_bwd_args * args) {
    static const char op[] = "causal_conv1d_bwd";
    ssmi_clear_error(ctx);
    ssmi_conv1d_dims  d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(validate_conv_bwd(ctx, op, params, args, &d));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, op, &be));
    return be == SSMI_BACKEND_REF ? ssmi_ref_causal_conv1d_bwd(ctx, params, &d, args)
                                  : ssmi_cpu_causal_conv1d_bwd(ctx, params, &d, args);
}

/* ---- causal_conv1d_update ------------------------------------------------------------- */

static ssm_status validate_update(ssm_context * ctx, const char * op, const ssm_conv1d_params * p,
                                  const ssm_causal_conv1d_update_args * a, ssmi_conv1d_dims * d) {
    static const int64_t any2[2] = {-1, -1};
    SSM_FORWARD_IF_ERROR(check_conv_params(ctx, op, p, a));
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, "x", &a->x, 0, 2, any2, F));
    d->batch = a->x.shape[0];
    d->dim = a->x.shape[1];
    SSM_FORWARD_IF_ERROR(check_weight_bias(ctx, op, &a->weight, &a->bias, d));
    const int64_t wst[3] = {-1, d->dim, -1};
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, "conv_state", &a->conv_state, 0, 3, wst, F));
    d->slots = a->conv_state.shape[0];
    d->state_len = a->conv_state.shape[2];
    SSM_RETURN_IF(d->state_len < d->width - 1, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: conv_state.shape[2]=%lld must be at least weight.shape[1]-1=%lld", op, (long long)d->state_len,
                  (long long)(d->width - 1));
    const int64_t wi[1] = {d->batch};
    SSM_FORWARD_IF_ERROR(
        ssmi_check_tensor(ctx, op, "state_batch_indices", &a->state_batch_indices, 1, 1, wi, SSMI_INDEX_DTYPES));
    SSM_RETURN_IF(!ssmi_present(&a->state_batch_indices) && d->slots != d->batch, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: conv_state.shape[0]=%lld differs from x.shape[0]=%lld; without state_batch_indices row b uses "
                  "slot b",
                  op, (long long)d->slots, (long long)d->batch);
    const int64_t wo[2] = {d->batch, d->dim};
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, op, "out", &a->out, 0, 2, wo, F));
    const int64_t wf[3] = {d->slots, d->dim, d->state_len};
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, op, "final_conv_state", &a->final_conv_state, 1, 3, wf, F));
    const int in_place = ssmi_present(&a->final_conv_state) && ssmi_same_view(&a->final_conv_state, &a->conv_state);
    const ssmi_named ins[] = {{"x", &a->x},
                              {"weight", &a->weight},
                              {"bias", &a->bias},
                              {"state_batch_indices", &a->state_batch_indices},
                              {"conv_state", &a->conv_state}};
    const ssmi_named outs[] = {{"out", &a->out}, {"final_conv_state", &a->final_conv_state}};
    /* The in-place pool is checked against everything but itself. */
    SSM_FORWARD_IF_ERROR(ssmi_check_disjoint(ctx, op, outs, 2, ins, 4));
    if (!in_place) SSM_FORWARD_IF_ERROR(ssmi_check_disjoint(ctx, op, outs + 1, 1, ins + 4, 1));
    SSM_FORWARD_IF_ERROR(ssmi_check_disjoint(ctx, op, outs, 1, ins + 4, 1));
    return ssmi_check_slot_indices(ctx, op, &a->state_batch_indices, d->batch, d->slots, "conv_state");
}

ssm_status ssm_causal_conv1d_update(ssm_context * ctx, const ssm_conv1d_params * params,
                                    const ssm_causal_conv1d_update_args * args) {
    static const char op[] = "causal_conv1d_update";
    ssmi_clear_error(ctx);
    ssmi_conv1d_dims  d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(validate_update(ctx, op, params, args, &d));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, op, &be));
    SSM_FORWARD_IF_ERROR(be == SSMI_BACKEND_REF ? ssmi_ref_causal_conv1d_update(ctx, params, &d, args)
                                                : ssmi_cpu_causal_conv1d_update(ctx, params, &d, args));
    /* A separate final_conv_state is the whole pool after the update (core/pool.c). */
    return ssmi_copy_unused_slots(ctx, "causal_conv1d_update", &args->conv_state, &args->final_conv_state,
                                  &args->state_batch_indices, d.batch);
}

/* ---- rmsnorm_gated -------------------------------------------------------------------- */

/* Params and x (M, D), z (M, D) optional, weight (D). Resolves the group size. */
static ssm_status check_norm_inputs(ssm_context * ctx, const char * op, const ssm_rmsnorm_params * p, const void * args,
                                    const ssm_tensor * x, const ssm_tensor * z, const ssm_tensor * w,
                                    ssmi_rmsnorm_dims * d) {
    static const int64_t any2[2] = {-1, -1};
    SSM_RETURN_IF(p == NULL, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: params is NULL", op);
    SSM_RETURN_IF(p->size < sizeof(ssm_rmsnorm_params), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->size=%zu is smaller than sizeof(ssm_rmsnorm_params)=%zu (call ssm_rmsnorm_params_init)",
                  op, p->size, sizeof(ssm_rmsnorm_params));
    SSM_RETURN_IF(!(p->eps > 0.0) || isinf(p->eps), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->eps=%g must be positive and finite", op, p->eps);
    SSM_RETURN_IF(p->group_size < 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->group_size=%lld is negative (0 means one group per row)", op,
                  (long long)p->group_size);
    SSM_RETURN_IF(p->norm_before_gate != 0 && p->norm_before_gate != 1, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->norm_before_gate=%d must be 0 or 1", op, (int)p->norm_before_gate);
    SSM_RETURN_IF(args == NULL, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: args is NULL", op);
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, "x", x, 0, 2, any2, F));
    d->rows = x->shape[0];
    d->dim = x->shape[1];
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, "z", z, 1, 2, x->shape, F));
    const int64_t wd[1] = {d->dim};
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, "weight", w, 0, 1, wd, F));
    d->group_size = p->group_size > 0 ? p->group_size : (d->dim > 0 ? d->dim : 1);
    SSM_RETURN_IF(d->dim % d->group_size != 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: x.shape[1]=%lld is not a multiple of params->group_size=%lld", op, (long long)d->dim,
                  (long long)d->group_size);
    return SSM_STATUS_OK;
}

ssm_status ssm_rmsnorm_gated(ssm_context * ctx, const ssm_rmsnorm_params * params, const ssm_rmsnorm_gated_args * args) {
    static const char op[] = "rmsnorm_gated";
    ssmi_clear_error(ctx);
    ssmi_rmsnorm_dims d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    const ssm_tensor  none = {0};
    const ssm_rmsnorm_gated_args * a = args;
    SSM_FORWARD_IF_ERROR(check_norm_inputs(ctx, op, params, a, a ? &a->x : &none, a ? &a->z : &none,
                                           a ? &a->weight : &none, &d));
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, op, "out", &a->out, 0, 2, a->x.shape, F));
    const ssmi_named ins[] = {{"x", &a->x}, {"z", &a->z}, {"weight", &a->weight}};
    const ssmi_named outs[] = {{"out", &a->out}};
    SSM_FORWARD_IF_ERROR(ssmi_check_disjoint(ctx, op, outs, 1, ins, 3));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, op, &be));
    return be == SSMI_BACKEND_REF ? ssmi_ref_rmsnorm_gated(ctx, params, &d, a) : ssmi_cpu_rmsnorm_gated(ctx, params, &d, a);
}

ssm_status ssm_rmsnorm_gated_bwd(ssm_context * ctx, const ssm_rmsnorm_params * params,
                                 const ssm_rmsnorm_gated_bwd_args * args) {
    static const char op[] = "rmsnorm_gated_bwd";
    ssmi_clear_error(ctx);
    ssmi_rmsnorm_dims d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    const ssm_tensor  none = {0};
    const ssm_rmsnorm_gated_bwd_args * a = args;
    SSM_FORWARD_IF_ERROR(check_norm_inputs(ctx, op, params, a, a ? &a->x : &none, a ? &a->z : &none,
                                           a ? &a->weight : &none, &d));
    const int64_t wd[1] = {d.dim};
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, "dout", &a->dout, 0, 2, a->x.shape, F));
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, op, "dx", &a->dx, 1, 2, a->x.shape, F));
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, op, "dz", &a->dz, 1, 2, a->x.shape, F));
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, op, "dweight", &a->dweight, 1, 1, wd, F));
    SSM_RETURN_IF(ssmi_present(&a->dz) && !ssmi_present(&a->z), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: dz was requested without z", op);
    const ssmi_named ins[] = {{"x", &a->x}, {"z", &a->z}, {"weight", &a->weight}, {"dout", &a->dout}};
    const ssmi_named outs[] = {{"dx", &a->dx}, {"dz", &a->dz}, {"dweight", &a->dweight}};
    SSM_FORWARD_IF_ERROR(ssmi_check_disjoint(ctx, op, outs, 3, ins, 4));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, op, &be));
    return be == SSMI_BACKEND_REF ? ssmi_ref_rmsnorm_gated_bwd(ctx, params, &d, a)
                                  : ssmi_cpu_rmsnorm_gated_bwd(ctx, params, &d, a);
}
