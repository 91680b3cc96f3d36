/* Float64 reference of the Mamba-3 SISO family (docs/ops/mamba3_siso.md). Arguments arrive
 * validated by ops/mamba3_siso.c; these may only fail with OUT_OF_MEMORY. */
#ifndef SSMI_REF_MAMBA3_H
#define SSMI_REF_MAMBA3_H

#include "../core/ssmi.h"

ssm_status ssmi_ref_mamba3_angle_cumsum(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                        const ssm_mamba3_angle_cumsum_args * a);
ssm_status ssmi_ref_mamba3_angle_cumsum_bwd(ssm_context * ctx, const ssm_mamba3_params * p,
                                            const ssmi_mamba3_dims * d, const ssm_mamba3_angle_cumsum_bwd_args * a);
/* Chunked (spec §3.6) in float64. */
ssm_status ssmi_ref_mamba3_siso_fwd(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                    const ssm_mamba3_siso_fwd_args * a);
/* angle_cumsum then siso_fwd, both in float64 (θ never rounded). */
ssm_status ssmi_ref_mamba3_siso(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                const ssm_mamba3_siso_args * a);
/* Token-by-token recurrence of spec §3.4 in float64 with the same arguments: an
 * independent check of the chunked reference. */
ssm_status ssmi_ref_mamba3_siso_recurrent(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                          const ssm_mamba3_siso_args * a);
ssm_status ssmi_ref_mamba3_siso_bwd(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                    const ssm_mamba3_siso_bwd_args * a);
ssm_status ssmi_ref_mamba3_siso_step(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                     const ssm_mamba3_siso_step_args * a);

#endif
