/* ops_common.h — validation and dispatch helpers shared by the operator families in src/ops/
 * (mamba2.c, mamba3_siso.c). Everything here runs before the first write of an operator. */
#ifndef SSMI_OPS_COMMON_H
#define SSMI_OPS_COMMON_H

#include "../core/ssmi.h"

/* A name and a tensor, for the pairwise overlap checks. */
typedef struct ssmi_named {
    const char *       name;
    const ssm_tensor * t;
} ssmi_named;

/* Every present output must be disjoint from every present input and from every other
 * output: the backends read inputs while writing outputs. INVALID_LAYOUT otherwise. */
ssm_status ssmi_check_disjoint(ssm_context * ctx, const char * op, const ssmi_named * outs, int nout,
                               const ssmi_named * ins, int nin);

/* cu_seqlens (nseq+1), optional, I32/I64: length ≥ 2, batch == 1 (batch_name names the
 * tensor the batch comes from, for the message), cu[0] = 0, non-decreasing, cu[nseq] =
 * seqlen. Sets *nseq (0 when absent). */
ssm_status ssmi_check_cu_seqlens(ssm_context * ctx, const char * op, const ssm_tensor * cu, const char * batch_name,
                                 int64_t batch, int64_t seqlen, int64_t * nseq);

/* The backend a context asks for, for operators without a CUDA path: CUDA is UNSUPPORTED
 * (never SSMI_BACKEND_CUDA). */
typedef enum ssmi_backend_kind { SSMI_BACKEND_REF, SSMI_BACKEND_CPU, SSMI_BACKEND_CUDA } ssmi_backend_kind;
ssm_status ssmi_pick_backend(ssm_context * ctx, const char * op, ssmi_backend_kind * out);
/* For operators with a CUDA path: CUDA when the context asks for it, or when it asks for
 * AUTO and `lead` (the operator's main input; may be NULL) is on a CUDA device. Without the
 * CUDA backend in the build: UNSUPPORTED when the context asks for CUDA; AUTO picks the CPU
 * (whose validation rejects device tensors with INVALID_LAYOUT). */
ssm_status ssmi_pick_backend_cuda(ssm_context * ctx, const char * op, const ssm_tensor * lead, ssmi_backend_kind * out);

/* For the CUDA backend: an index tensor (seq_idx, cu_seqlens) as a host view. A well-formed
 * (1-D/2-D, I32/I64) tensor on a CUDA device is copied to host memory (*buf, release with
 * ssmi_free; the stream is synchronised: validation reads the values); anything else is
 * passed on as it is (validation then reports it). */
ssm_status ssmi_cuda_host_index(ssm_context * ctx, const char * op, const ssm_tensor * in, ssm_tensor * out,
                                void ** buf);

/* ---- Mamba-2 ---------------------------------------------------------------------------- */
/* params (non-NULL, size, chunk_size in [1, 1024], dt_limit without NaN and lo ≤ hi) and a
 * non-NULL args pointer. */
ssm_status ssmi_mamba2_check_params(ssm_context * ctx, const char * op, const ssm_mamba2_params * p, const void * args);
/* The inputs of ssm_mamba2_scan (x, dt, a, b, c, d, z, dt_bias, seq_idx, cu_seqlens,
 * initial_states), in the order and with the messages of ssm_mamba2_scan's own validation;
 * out and final_states are not looked at. Fills every field of *d (nseq 0 without varlen).
 * Shared by the forward and mamba2_scan_bwd, whose forward arguments are the same. */
ssm_status ssmi_mamba2_check_scan_inputs(ssm_context * ctx, const char * op, const ssm_mamba2_params * p,
                                         const ssm_mamba2_scan_args * a, ssmi_mamba2_dims * d);

#endif /* SSMI_OPS_COMMON_H */
