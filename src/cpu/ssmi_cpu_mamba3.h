/* Optimised CPU backend of the Mamba-3 SISO family. Arguments arrive validated; results
 * are bitwise identical for any thread count. Scratch comes from the context allocator. */
#ifndef SSMI_CPU_MAMBA3_H
#define SSMI_CPU_MAMBA3_H

#include "../core/ssmi.h"

ssm_status ssmi_cpu_mamba3_angle_cumsum(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                        const ssm_mamba3_angle_cumsum_args * a);
ssm_status ssmi_cpu_mamba3_angle_cumsum_bwd(ssm_context * ctx, const ssm_mamba3_params * p,
                                            const ssmi_mamba3_dims * d, const ssm_mamba3_angle_cumsum_bwd_args * a);
ssm_status ssmi_cpu_mamba3_siso_fwd(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                    const ssm_mamba3_siso_fwd_args * a);
ssm_status ssmi_cpu_mamba3_siso(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                const ssm_mamba3_siso_args * a);
ssm_status ssmi_cpu_mamba3_siso_bwd(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                    const ssm_mamba3_siso_bwd_args * a);
ssm_status ssmi_cpu_mamba3_siso_step(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                     const ssm_mamba3_siso_step_args * a);

#endif
