/*
 * ssmi_cuda_mimo.h — CUDA entry points of the Mamba-3 MIMO operators (src/cuda/mamba3_mimo.cu),
 * callable from C. The lead folds these into ssmi_cuda.h.
 *
 * ops/mamba3_mimo.c validates first (the same validation as the CPU path, on CPU-typed views
 * of the device tensors); float tensors are device pointers, index tensors (cu_seqlens,
 * state_batch_indices) are HOST views. Every function runs on ctx's stream, never
 * synchronises the device (a host index list is staged with a pageable cudaMemcpyAsync, like
 * the Mamba-2 plans), and turns every CUDA error into SSM_STATUS_DEVICE_ERROR.
 */
#ifndef SSMI_CUDA_MIMO_H
#define SSMI_CUDA_MIMO_H

#include "ssmops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ssmi_mimo_dims;

/* Backward phase 1 (spec §3.4). ref_mode SSM_REF_EXACT only: SSM_REF_UPSTREAM_BF16 returns
 * SSM_STATUS_UNSUPPORTED (the upstream rounding model is on the CPU and the reference). */
ssm_status ssmi_cuda_mamba3_mimo_bwd_fwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                         const struct ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_fwd_args * a);
/* The forward (spec §3.3, §3.7): states, varlen, fused norm. */
ssm_status ssmi_cuda_mamba3_mimo(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const struct ssmi_mimo_dims * d,
                                 const ssm_mamba3_mimo_args * a);
/* The decode step (spec §3.9). Writes the rows' slots only; ops/ copies the unused slots of
 * separate final pools afterwards (ssmi_cuda_copy_unused_slots). */
ssm_status ssmi_cuda_mamba3_mimo_step(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                      const struct ssmi_mimo_dims * d, const ssm_mamba3_mimo_step_args * a);

#ifdef __cplusplus
}
#endif

#endif /* SSMI_CUDA_MIMO_H */
