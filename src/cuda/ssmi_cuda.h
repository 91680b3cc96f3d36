/*
 * ssmi_cuda.h — entry points of the CUDA backend (the .cu files in src/cuda), callable from C.
 *
 * Built only when CMake finds a CUDA compiler (SSMOPS_HAVE_CUDA). The ops/ layer validates
 * the arguments before calling: float tensors are device pointers (ssm_tensor views whose
 * device.type has been checked to be CUDA), index tensors (seq_idx, cu_seqlens) are HOST
 * views (ops/ copies device index tensors to the host first, because validation reads
 * their values). Every function runs on ctx's stream (ssm_context.cuda_stream; NULL = the
 * default stream), never synchronises the device, and turns every CUDA error into
 * SSM_STATUS_DEVICE_ERROR with cudaGetErrorString in the message.
 */
#ifndef SSMI_CUDA_H
#define SSMI_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "ssmops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ssmi_mamba2_dims;

/* Number of CUDA devices (0 when the driver or a device is missing). */
int32_t ssmi_cuda_device_count(void);

/* OK when t's memory is device (or managed) memory of the current device; INVALID_LAYOUT
 * otherwise. */
ssm_status ssmi_cuda_check_pointer(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t);

/* Synchronous copy of `bytes` from device memory to host memory on ctx's stream (the only
 * synchronisation an operator does: index tensors must be read on the host). */
ssm_status ssmi_cuda_copy_to_host(ssm_context * ctx, const char * op, void * dst, const void * src, size_t bytes);

/* Mamba-2 chunk_state (spec §2.2) and the combined forward (spec §2.6, §2.8). */
ssm_status ssmi_cuda_mamba2_chunk_state(ssm_context * ctx, const ssm_mamba2_params * p,
                                        const struct ssmi_mamba2_dims * d, const ssm_mamba2_chunk_state_args * a);
/* Exact device workspace bytes of ssmi_cuda_mamba2_scan (index tensors on the host). */
ssm_status ssmi_cuda_mamba2_scan_workspace_size(ssm_context * ctx, const ssm_mamba2_params * p,
                                                const struct ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a,
                                                size_t * bytes);
/* workspace: device memory of at least the size above, or NULL (then the backend uses
 * cudaMallocAsync/cudaFreeAsync on ctx's stream). */
ssm_status ssmi_cuda_mamba2_scan(ssm_context * ctx, const ssm_mamba2_params * p, const struct ssmi_mamba2_dims * d,
                                 const ssm_mamba2_scan_args * a, void * workspace);

/* Public helpers (ssmops.h, "CUDA helpers"). */
ssm_status ssmi_cuda_malloc(ssm_context * ctx, void ** ptr, size_t bytes);
ssm_status ssmi_cuda_free(ssm_context * ctx, void * ptr);
ssm_status ssmi_cuda_memcpy(ssm_context * ctx, void * dst, const void * src, size_t bytes);
ssm_status ssmi_cuda_time(ssm_context * ctx, ssm_status (*fn)(void * arg, int32_t rep), void * arg, int32_t reps,
                          float * ms);

#ifdef __cplusplus
}
#endif

#endif /* SSMI_CUDA_H */
