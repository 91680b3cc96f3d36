/*
 * ssmi_cuda_step.h — the CUDA Mamba-2 decode step (spec §2.9), callable from C. The lead
 * folds it into ssmi_cuda.h.
 */
#ifndef SSMI_CUDA_STEP_H
#define SSMI_CUDA_STEP_H

#include "ssmops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ssmi_mamba2_dims;

/* One decode step on ctx's stream. The arguments are validated (ops/mamba2_step.c): float
 * tensors are device views re-typed as CPU, state_batch_indices is a HOST view (a device
 * one was copied by ops/). Writes out and, when present, final_state's used slots only (the
 * caller copies the unused ones of a separate pool: ssmi_cuda_copy_unused_slots).
 * Limits: N ≤ 4096 (UNSUPPORTED beyond). */
ssm_status ssmi_cuda_mamba2_step(ssm_context * ctx, const ssm_mamba2_params * p, const struct ssmi_mamba2_dims * d,
                                 const ssm_mamba2_step_args * a);

#ifdef __cplusplus
}
#endif

#endif /* SSMI_CUDA_STEP_H */
