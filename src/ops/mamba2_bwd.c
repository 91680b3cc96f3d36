/*
 * mamba2_bwd.c — public entry point of the Mamba-2 combined backward (spec §2.7).
 *
 * The schema gives the presence rules (every gradient output optional; dd needs d, dz needs
 * z, ddt_bias needs dt_bias, dinitial_states needs initial_states), and the overlap rules.
 * The validator below checks the forward arguments exactly as ssm_mamba2_scan does (shared
 * helper in ops_common.c), then dout and dfinal_states, then each gradient's shape (that of
 * the tensor it is the gradient of). REF or CPU; the CUDA backend has no path for it.
 */
#include <string.h>

#include "../core/ssmi.h"
#include "../cpu/ssmi_cpu.h"
#include "../ref/ssmi_ref.h"
#include "ops_common.h"

static ssm_status validate_bwd(ssm_context * ctx, const char * op, const void * params, const void * args,
                               ssmi_dims * dims) {
    const ssm_mamba2_scan_bwd_args * a = args;
    ssmi_mamba2_dims *               d = &dims->m2;
    ssm_mamba2_scan_args             fwd;
    ssmi_args_project(SSMI_OP_mamba2_scan, &fwd, SSMI_OP_mamba2_scan_bwd, a);
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_scan_inputs(ctx, op, params, &fwd, d));
    const int64_t lead = d->nseq > 0 ? d->nseq : d->batch;
    SSMI_SHAPE(dout, d->batch, d->seqlen, d->nheads, d->headdim);
    SSMI_SHAPE(dfinal_states, lead, d->nheads, d->headdim, d->dstate);
    SSMI_SHAPE(dx, d->batch, d->seqlen, d->nheads, d->headdim);
    SSMI_SHAPE(ddt, d->batch, d->seqlen, d->nheads);
    SSMI_SHAPE(da, d->nheads);
    SSMI_SHAPE(db, d->batch, d->seqlen, d->ngroups, d->dstate);
    SSMI_SHAPE(dc, d->batch, d->seqlen, d->ngroups, d->dstate);
    /* dd has d's shape: (H) or (H, P), whichever d is. */
    if (ssmi_present(&a->dd) && ssmi_present(&a->d))
        SSM_RETURN_IF(a->dd.ndim != a->d.ndim, ctx, SSM_STATUS_INVALID_SHAPE,
                      "%s: dd has %d dims but d has %d; dd must have d's shape", op, (int)a->dd.ndim, (int)a->d.ndim);
    SSMI_SHAPE(dd, d->nheads, d->headdim);
    SSMI_SHAPE(dz, d->batch, d->seqlen, d->nheads, d->headdim);
    SSMI_SHAPE(ddt_bias, d->nheads);
    SSMI_SHAPE(dinitial_states, lead, d->nheads, d->headdim, d->dstate);
    return SSM_STATUS_OK;
}
SSMI_DEFINE_OP(mamba2_scan_bwd, ssm_mamba2_params, ssmi_mamba2_check_params, validate_bwd)
