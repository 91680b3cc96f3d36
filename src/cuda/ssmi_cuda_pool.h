/*
 * ssmi_cuda_pool.h — decode state pools on the CUDA backend (the CUDA form of
 * ssmi_copy_unused_slots in core/pool.c). Callable from C; the lead folds it into ssmi_cuda.h.
 */
#ifndef SSMI_CUDA_POOL_H
#define SSMI_CUDA_POOL_H

#include <stdint.h>

#include "ssmops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* After a decode step with a separate final pool: every slot of `out` that no row of `indices` (host view, I32/I64,
 * may be absent: then slots == batch and every slot is used) used gets the same slot of `in`, converted to out's dtype,
 * on ctx's stream. in/out are device tensors (re-typed as CPU views, data pointers on the device) of the same shape
 * (slots, ...), any strides, any float dtypes. Nothing to do when in and out are the same view. */
ssm_status ssmi_cuda_copy_unused_slots(ssm_context * ctx, const char * op, const ssm_tensor * in,
                                       const ssm_tensor * out, const ssm_tensor * indices, int64_t batch);

#ifdef __cplusplus
}
#endif

#endif /* SSMI_CUDA_POOL_H */
