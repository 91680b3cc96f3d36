/* Optimised CPU backend: drivers that cut the work into tiles for the context threadpool
 * and call ISA kernels (kernels/). Arguments arrive validated by ops/. Results are
 * bitwise identical for any thread count. */
#ifndef SSMI_CPU_H
#define SSMI_CPU_H

#include "../core/ssmi.h"

ssm_status ssmi_cpu_mamba2_chunk_cumsum(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                        const ssm_mamba2_chunk_cumsum_args * a);
ssm_status ssmi_cpu_mamba2_chunk_state(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                       const ssm_mamba2_chunk_state_args * a);
ssm_status ssmi_cpu_mamba2_state_passing(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                         const ssm_mamba2_state_passing_args * a);
ssm_status ssmi_cpu_mamba2_bmm(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                               const ssm_mamba2_bmm_args * a);
ssm_status ssmi_cpu_mamba2_chunk_scan(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                      const ssm_mamba2_chunk_scan_args * a);
/* Exact workspace bytes of ssmi_cpu_mamba2_scan under ctx (thread count matters). */
size_t     ssmi_cpu_mamba2_scan_workspace_size(const ssm_context * ctx, const ssm_mamba2_params * p,
                                               const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a);
ssm_status ssmi_cpu_mamba2_scan(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                const ssm_mamba2_scan_args * a, void * workspace);

/* Every gradient of the combined scan (spec §2.7). */
ssm_status ssmi_cpu_mamba2_scan_bwd(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                   const ssm_mamba2_scan_bwd_args * a);
/* Decode step (spec §2.9); d->slots = rows of the pool. */
ssm_status ssmi_cpu_mamba2_step(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                               const ssm_mamba2_step_args * a);

#endif
