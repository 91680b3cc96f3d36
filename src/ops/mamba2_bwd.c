/*
 * mamba2_bwd.c — public entry point of the Mamba-2 combined backward (spec §2.7).
 *
 * The schema gives the presence rules (every gradient output optional; dd needs d, dz needs
 * z, ddt_bias needs dt_bias, dinitial_states needs initial_states), and the overlap rules.
 * The validator below checks the forward arguments exactly as ssm_mamba2_scan does (shared
 * helper in ops_common.c), then dout and dfinal_states; each gradient has the shape of the
 * tensor it is the gradient of (ssmi_check_gradient_shapes). REF, CPU or CUDA (x's device picks
 * CUDA under AUTO; seq_idx and cu_seqlens reach the CUDA backend as host views).
 */
#include <string.h>

#include "../core/ssmi.h"
#include "../cpu/ssmi_cpu.h"
#include "../ref/ssmi_ref.h"
#include "ops_common.h"

#ifdef SSMOPS_HAVE_CUDA
#include "../cuda/ssmi_cuda.h"
#endif

static ssm_status validate_bwd(ssm_context * ctx, const char * op, const ssm_mamba2_params * p,
                               const ssm_mamba2_scan_bwd_args * a, ssmi_mamba2_dims * d) {
    ssm_mamba2_scan_args             fwd;
    ssmi_args_project(SSMI_OP_mamba2_scan, &fwd, SSMI_OP_mamba2_scan_bwd, a);
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_scan_inputs(ctx, op, p, &fwd, d));
    const int64_t lead = d->nseq > 0 ? d->nseq : d->batch;
    SSMI_SHAPE(dout, d->batch, d->seqlen, d->nheads, d->headdim);
    SSMI_SHAPE(dfinal_states, lead, d->nheads, d->headdim, d->dstate);
    return ssmi_check_gradient_shapes(ctx, op, SSMI_OP_mamba2_scan_bwd, a); /* dd: (H) or (H, P), as d */
}
SSMI_DEFINE_CUDA_OP(mamba2_scan_bwd, ssm_mamba2_params, m2, ssmi_mamba2_check_params, validate_bwd, x)
