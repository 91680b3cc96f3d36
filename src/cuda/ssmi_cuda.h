/*
 * ssmi_cuda.h — entry points of the CUDA backend (the .cu files in src/cuda), callable from C.
 *
 * Built only when CMake finds a CUDA compiler (SSMOPS_HAVE_CUDA). The ops/ layer validates
 * the arguments before calling: float tensors are device pointers (ssm_tensor views whose
 * device.type has been checked to be CUDA), index tensors (seq_idx, cu_seqlens) are HOST
 * views (ops/ copies device index tensors to the host first, because validation reads
 * their values), except a decode step's state_batch_indices, which may be a device view
 * (unvalidated values, read on the device: ssmi_cuda_device_slots). Every function runs on ctx's stream (ssm_context.cuda_stream; NULL = the
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
 * synchronisation an operator does: index tensors must be read on the host). While the stream
 * is being captured into a CUDA graph: UNSUPPORTED naming the index tensor `name`, nothing
 * issued (the synchronisation would invalidate the capture). */
ssm_status ssmi_cuda_copy_to_host(ssm_context * ctx, const char * op, const char * name, void * dst, const void * src,
                                  size_t bytes);

/* Mamba-2 chunk_state (spec §2.2) and the combined forward (spec §2.6, §2.8). */
ssm_status ssmi_cuda_mamba2_chunk_state(ssm_context * ctx, const ssm_mamba2_params * p,
                                        const struct ssmi_mamba2_dims * d, const ssm_mamba2_chunk_state_args * a);
/* Exact device workspace bytes of ssmi_cuda_mamba2_scan (index tensors on the host). */
ssm_status ssmi_cuda_mamba2_scan_workspace_size(ssm_context * ctx, const ssm_mamba2_params * p,
                                                const struct ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a,
                                                size_t * bytes);
/* workspace: device memory of at least the size above, or NULL (then the backend uses
 * ssmi_cuda_alloc_async on ctx's stream). */
ssm_status ssmi_cuda_mamba2_scan(ssm_context * ctx, const ssm_mamba2_params * p, const struct ssmi_mamba2_dims * d,
                                 const ssm_mamba2_scan_args * a, void * workspace);

/* Mamba-2 combined backward (spec §2.7): every gradient; device workspace through
 * ssmi_cuda_alloc_async on ctx's stream (the operator takes no caller workspace). */
ssm_status ssmi_cuda_mamba2_scan_bwd(ssm_context * ctx, const ssm_mamba2_params * p, const struct ssmi_mamba2_dims * d,
                                     const ssm_mamba2_scan_bwd_args * a);

/* Mamba-2 decode step (spec §2.9). Writes out and, when present, final_state's used slots
 * only (ops/ copies the unused ones of a separate pool: ssmi_cuda_copy_unused_slots).
 * state_batch_indices is a host or device view. Limits: N ≤ 4096 (UNSUPPORTED beyond). */
ssm_status ssmi_cuda_mamba2_step(ssm_context * ctx, const ssm_mamba2_params * p, const struct ssmi_mamba2_dims * d,
                                 const ssm_mamba2_step_args * a);

/* After a decode step with a separate final pool: every slot of `out` that no row of
 * `indices` used (host or device view, I32/I64; absent: slots == batch, every slot used) gets the same
 * slot of `in`, converted to out's dtype, on ctx's stream. in/out: device tensors of the same
 * shape (slots, ...), any strides, any float dtypes. Nothing to do when in and out are the
 * same view (the CUDA form of ssmi_copy_unused_slots in core/pool.c). */
ssm_status ssmi_cuda_copy_unused_slots(ssm_context * ctx, const char * op, const ssm_tensor * in,
                                       const ssm_tensor * out, const ssm_tensor * indices, int64_t batch);

/* The gather and scatter of a sequence operator's state pools (ops/state_pools.c): row
 * rows[k] of src into row rows[n + k] of dst for k < n (rows: a host array of 2n row numbers,
 * each within its tensor), on ctx's stream. src/dst: device tensors of the same shape below
 * dim 0 and the same dtype (the bytes are copied), any strides. */
ssm_status ssmi_cuda_copy_rows(ssm_context * ctx, const char * op, const ssm_tensor * src, const ssm_tensor * dst,
                               const int64_t * rows, int64_t n);
/* `bytes` of zeroed device memory on ctx's stream (stream-ordered; NULL for 0 bytes), and its
 * release (after the work queued on the stream that uses it). */
ssm_status ssmi_cuda_alloc_zeroed(ssm_context * ctx, const char * op, size_t bytes, void ** ptr);
ssm_status ssmi_cuda_release(ssm_context * ctx, const char * op, void * ptr);

/* Mamba-3 SISO: the chunked core forward, cumulative angles in (spec §2.3); the combined
 * forward, raw angles in, the angle cumsum fused (spec §2.4); the decode step (spec §2.6;
 * ops/ copies the unused slots of separate final pools afterwards). */
struct ssmi_mamba3_dims;
ssm_status ssmi_cuda_mamba3_siso_fwd(ssm_context * ctx, const ssm_mamba3_params * p, const struct ssmi_mamba3_dims * d,
                                     const ssm_mamba3_siso_fwd_args * a);
ssm_status ssmi_cuda_mamba3_siso(ssm_context * ctx, const ssm_mamba3_params * p, const struct ssmi_mamba3_dims * d,
                                 const ssm_mamba3_siso_args * a);
ssm_status ssmi_cuda_mamba3_siso_step(ssm_context * ctx, const ssm_mamba3_params * p, const struct ssmi_mamba3_dims * d,
                                      const ssm_mamba3_siso_step_args * a);
/* Mamba-3 SISO backward (spec §6): every gradient of ssm_mamba3_siso, the forward recomputed;
 * the device workspace comes from ssmi_cuda_alloc_async on ctx's stream. */
ssm_status ssmi_cuda_mamba3_siso_bwd(ssm_context * ctx, const ssm_mamba3_params * p, const struct ssmi_mamba3_dims * d,
                                     const ssm_mamba3_siso_bwd_args * a);

/* Mamba-3 MIMO: backward phase 1 (spec §3.4; ref_mode SSM_REF_EXACT only, UPSTREAM_BF16 is
 * UNSUPPORTED on CUDA), the forward (spec §3.3, §3.7: states, varlen, fused norm), the decode
 * step (spec §3.9; writes the rows' slots only). */
struct ssmi_mimo_dims;
ssm_status ssmi_cuda_mamba3_mimo_bwd_fwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                         const struct ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_fwd_args * a);
ssm_status ssmi_cuda_mamba3_mimo(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const struct ssmi_mimo_dims * d,
                                 const ssm_mamba3_mimo_args * a);
ssm_status ssmi_cuda_mamba3_mimo_step(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                      const struct ssmi_mimo_dims * d, const ssm_mamba3_mimo_step_args * a);
/* Mamba-3 MIMO backward: every gradient of ssm_mamba3_mimo (spec §4; varlen, initial states,
 * dfinal_*, fused norm), fp32. */
ssm_status ssmi_cuda_mamba3_mimo_bwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                     const struct ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_args * a);

/* Public helpers (ssmops.h, "CUDA helpers"). */
ssm_status ssmi_cuda_malloc(ssm_context * ctx, void ** ptr, size_t bytes);
ssm_status ssmi_cuda_free(ssm_context * ctx, void * ptr);
ssm_status ssmi_cuda_memcpy(ssm_context * ctx, void * dst, const void * src, size_t bytes);
ssm_status ssmi_cuda_time(ssm_context * ctx, ssm_status (*fn)(void * arg, int32_t rep), void * arg, int32_t reps, int cold_l2,
                          float * ms);

/* Layer operators (spec §6.2, §6.3; Mamba-3 angle cumsum §3.2, §6.6): conv1d forward, backward
 * and decode update (seq_idx a HOST view, state_batch_indices host or device; the update writes the rows'
 * slots only), gated RMSNorm forward and backward, the angle cumsum forward and backward
 * (cu_seqlens a HOST view). Backward reductions are deterministic (per-block partials in a
 * device workspace, summed in a fixed order; no atomics). */
struct ssmi_conv1d_dims;
struct ssmi_rmsnorm_dims;
ssm_status ssmi_cuda_causal_conv1d(ssm_context * ctx, const ssm_conv1d_params * p, const struct ssmi_conv1d_dims * d,
                                   const ssm_causal_conv1d_args * a);
ssm_status ssmi_cuda_causal_conv1d_bwd(ssm_context * ctx, const ssm_conv1d_params * p,
                                       const struct ssmi_conv1d_dims * d, const ssm_causal_conv1d_bwd_args * a);
ssm_status ssmi_cuda_causal_conv1d_update(ssm_context * ctx, const ssm_conv1d_params * p,
                                          const struct ssmi_conv1d_dims * d, const ssm_causal_conv1d_update_args * a);
ssm_status ssmi_cuda_rmsnorm_gated(ssm_context * ctx, const ssm_rmsnorm_params * p, const struct ssmi_rmsnorm_dims * d,
                                   const ssm_rmsnorm_gated_args * a);
ssm_status ssmi_cuda_rmsnorm_gated_bwd(ssm_context * ctx, const ssm_rmsnorm_params * p,
                                       const struct ssmi_rmsnorm_dims * d, const ssm_rmsnorm_gated_bwd_args * a);
ssm_status ssmi_cuda_mamba3_angle_cumsum(ssm_context * ctx, const ssm_mamba3_params * p,
                                         const struct ssmi_mamba3_dims * d, const ssm_mamba3_angle_cumsum_args * a);
ssm_status ssmi_cuda_mamba3_angle_cumsum_bwd(ssm_context * ctx, const ssm_mamba3_params * p,
                                             const struct ssmi_mamba3_dims * d,
                                             const ssm_mamba3_angle_cumsum_bwd_args * a);

#ifdef __cplusplus
}
#endif

#endif /* SSMI_CUDA_H */
