/* Optimised CPU backend of the layer operators around the scan: causal_conv1d
 * (forward, backward, update) and gated RMSNorm (forward, backward). Arguments arrive
 * validated by ops/layer.c. */
#ifndef SSMI_CPU_LAYER_H
#define SSMI_CPU_LAYER_H

#include "../core/ssmi.h"

ssm_status ssmi_cpu_causal_conv1d(ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * d,
                                 const ssm_causal_conv1d_args * a);
ssm_status ssmi_cpu_causal_conv1d_bwd(ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * d,
                                     const ssm_causal_conv1d_bwd_args * a);
ssm_status ssmi_cpu_causal_conv1d_update(ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * d,
                                        const ssm_causal_conv1d_update_args * a);
ssm_status ssmi_cpu_rmsnorm_gated(ssm_context * ctx, const ssm_rmsnorm_params * p, const ssmi_rmsnorm_dims * d,
                                 const ssm_rmsnorm_gated_args * a);
ssm_status ssmi_cpu_rmsnorm_gated_bwd(ssm_context * ctx, const ssm_rmsnorm_params * p, const ssmi_rmsnorm_dims * d,
                                     const ssm_rmsnorm_gated_bwd_args * a);

#endif
