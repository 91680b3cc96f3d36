/* Optimised CPU backend of the Mamba-3 MIMO family (docs/ops/mamba3_mimo.md). Arguments arrive validated
 * by ops/mamba3_mimo.c. */
#ifndef SSMI_CPU_MIMO_H
#define SSMI_CPU_MIMO_H

#include "../core/ssmi.h"

ssm_status ssmi_cpu_mamba3_mimo_bwd_fwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                       const ssm_mamba3_mimo_bwd_fwd_args * a);
ssm_status ssmi_cpu_mamba3_mimo(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                               const ssm_mamba3_mimo_args * a);
ssm_status ssmi_cpu_mamba3_mimo_bwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                   const ssm_mamba3_mimo_bwd_args * a);
ssm_status ssmi_cpu_mamba3_mimo_step(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssmi_mimo_dims * d,
                                    const ssm_mamba3_mimo_step_args * a);

#endif
