/*
 * mamba2_bwd.c — public entry point of the Mamba-2 combined backward (spec §2.7).
 *
 * Same three steps as every entry point: validate, fill ssmi_mamba2_dims, dispatch.
 *   1. The forward arguments exactly as ssm_mamba2_scan validates them (shared helper in
 *      ops_common.c), then dout and dfinal_states, then every gradient output: its
 *      presence rule (dd needs d, dz needs z, ddt_bias needs dt_bias, dinitial_states needs
 *      initial_states), its shape (that of the tensor it is the gradient of) and a layout
 *      without aliasing; finally no output may overlap an input or another output.
 *   2./3. REF or CPU; CUDA is not built (UNSUPPORTED).
 * Nothing is written before dispatch, so a failed call leaves every output untouched.
 */
#include <string.h>

#include "../core/ssmi.h"
#include "../cpu/ssmi_cpu.h"
#include "../ref/ssmi_ref.h"
#include "ops_common.h"

static const char bwd_op[] = "mamba2_scan_bwd";

/* The forward arguments of a backward call as a forward argument struct (no outputs). */
static ssm_mamba2_scan_args forward_view(const ssm_mamba2_scan_bwd_args * a) {
    ssm_mamba2_scan_args f;
    memset(&f, 0, sizeof f);
    f.x = a->x;
    f.dt = a->dt;
    f.a = a->a;
    f.b = a->b;
    f.c = a->c;
    f.d = a->d;
    f.z = a->z;
    f.dt_bias = a->dt_bias;
    f.initial_states = a->initial_states;
    f.seq_idx = a->seq_idx;
    f.cu_seqlens = a->cu_seqlens;
    return f;
}

/* An optional gradient output whose forward input `of` must be present. */
static ssm_status check_grad(ssm_context * ctx, const char * name, const ssm_tensor * t, const char * of_name,
                             const ssm_tensor * of, int32_t ndim, const int64_t * want) {
    SSM_RETURN_IF(ssmi_present(t) && of != NULL && !ssmi_present(of), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: %s was requested without %s; it is the gradient of %s and needs it", bwd_op, name, of_name,
                  of_name);
    return ssmi_check_output(ctx, bwd_op, name, t, 1, ndim, want, SSMI_FLOAT_DTYPES);
}

static ssm_status validate_bwd(ssm_context * ctx, const ssm_mamba2_params * p, const ssm_mamba2_scan_bwd_args * a,
                               ssmi_mamba2_dims * d) {
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_params(ctx, bwd_op, p, a));
    const ssm_mamba2_scan_args fwd = forward_view(a);
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_scan_inputs(ctx, bwd_op, p, &fwd, d));
    const int64_t lead = d->nseq > 0 ? d->nseq : d->batch;
    const int64_t wx[4] = {d->batch, d->seqlen, d->nheads, d->headdim};
    const int64_t wst[4] = {lead, d->nheads, d->headdim, d->dstate};
    const int64_t wdt[3] = {d->batch, d->seqlen, d->nheads};
    const int64_t wbc[4] = {d->batch, d->seqlen, d->ngroups, d->dstate};
    const int64_t wh[1] = {d->nheads};
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, bwd_op, "dout", &a->dout, 0, 4, wx, SSMI_FLOAT_DTYPES));
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, bwd_op, "dfinal_states", &a->dfinal_states, 1, 4, wst,
                                           SSMI_FLOAT_DTYPES));

    SSM_FORWARD_IF_ERROR(check_grad(ctx, "dx", &a->dx, NULL, NULL, 4, wx));
    SSM_FORWARD_IF_ERROR(check_grad(ctx, "ddt", &a->ddt, NULL, NULL, 3, wdt));
    SSM_FORWARD_IF_ERROR(check_grad(ctx, "da", &a->da, NULL, NULL, 1, wh));
    SSM_FORWARD_IF_ERROR(check_grad(ctx, "db", &a->db, NULL, NULL, 4, wbc));
    SSM_FORWARD_IF_ERROR(check_grad(ctx, "dc", &a->dc, NULL, NULL, 4, wbc));
    /* dd has d's shape: (H) or (H, P), whichever d is. */
    const int64_t wd[2] = {d->nheads, d->headdim};
    const int32_t dnd = ssmi_present(&a->d) ? a->d.ndim : 1;
    if (ssmi_present(&a->dd) && ssmi_present(&a->d))
        SSM_RETURN_IF(a->dd.ndim != dnd, ctx, SSM_STATUS_INVALID_SHAPE,
                      "%s: dd has %d dims but d has %d; dd must have d's shape", bwd_op, (int)a->dd.ndim, (int)dnd);
    SSM_FORWARD_IF_ERROR(check_grad(ctx, "dd", &a->dd, "d", &a->d, dnd, wd));
    SSM_FORWARD_IF_ERROR(check_grad(ctx, "dz", &a->dz, "z", &a->z, 4, wx));
    SSM_FORWARD_IF_ERROR(check_grad(ctx, "ddt_bias", &a->ddt_bias, "dt_bias", &a->dt_bias, 1, wh));
    SSM_FORWARD_IF_ERROR(
        check_grad(ctx, "dinitial_states", &a->dinitial_states, "initial_states", &a->initial_states, 4, wst));

    const ssmi_named ins[] = {{"x", &a->x},
                              {"dt", &a->dt},
                              {"a", &a->a},
                              {"b", &a->b},
                              {"c", &a->c},
                              {"d", &a->d},
                              {"z", &a->z},
                              {"dt_bias", &a->dt_bias},
                              {"initial_states", &a->initial_states},
                              {"seq_idx", &a->seq_idx},
                              {"cu_seqlens", &a->cu_seqlens},
                              {"dout", &a->dout},
                              {"dfinal_states", &a->dfinal_states}};
    const ssmi_named outs[] = {{"dx", &a->dx},
                               {"ddt", &a->ddt},
                               {"da", &a->da},
                               {"db", &a->db},
                               {"dc", &a->dc},
                               {"dd", &a->dd},
                               {"dz", &a->dz},
                               {"ddt_bias", &a->ddt_bias},
                               {"dinitial_states", &a->dinitial_states}};
    return ssmi_check_disjoint(ctx, bwd_op, outs, (int)(sizeof outs / sizeof outs[0]), ins,
                               (int)(sizeof ins / sizeof ins[0]));
}

ssm_status ssm_mamba2_scan_bwd(ssm_context * ctx, const ssm_mamba2_params * params,
                               const ssm_mamba2_scan_bwd_args * args) {
    ssmi_clear_error(ctx);
    ssmi_mamba2_dims  d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(validate_bwd(ctx, params, args, &d));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, bwd_op, &be));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba2_scan_bwd(ctx, params, &d, args)
                                  : ssmi_cpu_mamba2_scan_bwd(ctx, params, &d, args);
}
