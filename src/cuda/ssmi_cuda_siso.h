/*
 * ssmi_cuda_siso.h — CUDA entry points of the Mamba-3 SISO forward operators and the decode
 * step (src/cuda/mamba3_siso.cu), callable from C; the lead folds them into ssmi_cuda.h.
 *
 * Called by ops/mamba3_siso.c after the shared validation: float tensors are device
 * pointers (views re-typed as CPU), cu_seqlens and state_batch_indices are HOST views.
 * Every function runs on ctx's stream, never synchronises the device, and turns every CUDA
 * error into SSM_STATUS_DEVICE_ERROR.
 */
#ifndef SSMI_CUDA_SISO_H
#define SSMI_CUDA_SISO_H

#include <stdint.h>

#include "ssmops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ssmi_mamba3_dims;

/* The chunked core forward, cumulative angles in (spec §2.3). */
ssm_status ssmi_cuda_mamba3_siso_fwd(ssm_context * ctx, const ssm_mamba3_params * p, const struct ssmi_mamba3_dims * d,
                                     const ssm_mamba3_siso_fwd_args * a);
/* The combined forward, raw angles in, the angle cumsum fused (spec §2.4). */
ssm_status ssmi_cuda_mamba3_siso(ssm_context * ctx, const ssm_mamba3_params * p, const struct ssmi_mamba3_dims * d,
                                 const ssm_mamba3_siso_args * a);
/* The decode step (spec §2.6). The caller copies the unused slots of separate final pools
 * afterwards (ssmi_cuda_copy_unused_slots). */
ssm_status ssmi_cuda_mamba3_siso_step(ssm_context * ctx, const ssm_mamba3_params * p, const struct ssmi_mamba3_dims * d,
                                      const ssm_mamba3_siso_step_args * a);

#ifdef __cplusplus
}
#endif

#endif /* SSMI_CUDA_SISO_H */
