/* Float64 reference (and the upstream-bf16 rounding mode of bwd_fwd) of the Mamba-3 MIMO family (docs/ops/mamba3_mimo.md). Arguments arrive validated
 * by ops/mamba3_mimo.c. */
#ifndef SSMI_REF_MIMO_H
#define SSMI_REF_MIMO_H

#include "../core/ssmi.h"

ssm_status ssmi_ref_mamba3_mimo_bwd_fwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                       const ssm_mamba3_mimo_bwd_fwd_args * a);
ssm_status ssmi_ref_mamba3_mimo(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                               const ssm_mamba3_mimo_args * a);
ssm_status ssmi_ref_mamba3_mimo_bwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                   const ssm_mamba3_mimo_bwd_args * a);
ssm_status ssmi_ref_mamba3_mimo_step(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                    const ssm_mamba3_mimo_step_args * a);
/* Token-by-token recurrence of spec §2.2 (float64) with the forward's arguments: an
 * independent check of the chunked reference. */
ssm_status ssmi_ref_mamba3_mimo_recurrent(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                          const ssm_mamba3_mimo_args * a);

#endif
