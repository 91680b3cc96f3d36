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

/* ssmi_check_disjoint, except that output o may address exactly the same elements as input
 * in_place[o] (ssmi_same_addresses; -1: none): the in-place pool update of a decode step.
 * in_place may be NULL (no exception). */
ssm_status ssmi_check_disjoint_in_place(ssm_context * ctx, const char * op, const ssmi_named * outs, int nout,
                                        const ssmi_named * ins, int nin, const int * in_place);

/* 1 when every index of a reaches the same element of b as of a: same data, dtype, ndim and
 * shape, and the same stride on every dim of extent > 1 (a unit dim's stride never moves). */
int ssmi_same_addresses(const ssm_tensor * a, const ssm_tensor * b);
/* ssmi_same_addresses, and the same device and the same stride on every dim, unit ones too:
 * exactly the same view. */
int ssmi_same_view(const ssm_tensor * a, const ssm_tensor * b);

/* state_batch_indices of a Mamba-2 / conv decode step (idx optional; batch of them): every
 * index below `slots` (pool names the tensor whose shape[0] gives slots, for the message;
 * negative = padding row), and no slot used by two rows: two rows updating one slot in
 * place would race and the result would depend on the order. */
ssm_status ssmi_check_slot_indices(ssm_context * ctx, const char * op, const ssm_tensor * idx, int64_t batch,
                                   int64_t slots, const char * pool);
/* state_batch_indices of a Mamba-3 decode step: optional (B) I32/I64, every value below
 * nslots, no two rows with the same non-negative slot (negative = padding row); without it
 * nslots must equal B. */
ssm_status ssmi_mamba3_check_state_indices(ssm_context * ctx, const char * op, const ssm_tensor * idx, int64_t batch,
                                           int64_t nslots);

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
/* For the CUDA backend: each present tensor of `ts` must be on the CUDA device (INVALID_LAYOUT
 * otherwise); then it is re-typed as CPU so that the device-independent validation accepts
 * it (the data pointer stays the device one). Call on a copy of the caller's args. */
ssm_status ssmi_cuda_retype(ssm_context * ctx, const char * op, ssm_tensor * const * ts, const char * const * names,
                            int n);

/* ---- Mamba-2 ---------------------------------------------------------------------------- */
/* params (non-NULL, size, chunk_size in [1, 1024], dt_limit without NaN and lo ≤ hi) and a
 * non-NULL args pointer. */
ssm_status ssmi_mamba2_check_params(ssm_context * ctx, const char * op, const ssm_mamba2_params * p, const void * args);
/* The same for the decode step, which has no chunks: chunk_size is not looked at. */
ssm_status ssmi_mamba2_check_step_params(ssm_context * ctx, const char * op, const ssm_mamba2_params * p,
                                         const void * args);
/* The x/b/c/z family: x (batch, S, H, P) defines batch/S/H/P; b (batch, S, G, N) defines G
 * and N with H % G == 0 (c does when b is NULL); c matches b; the optional z matches x.
 * Pass NULL for a tensor the op does not take. */
ssm_status ssmi_mamba2_check_xbcz(ssm_context * ctx, const char * op, const ssm_tensor * x, const ssm_tensor * b,
                                  const ssm_tensor * c, const ssm_tensor * z, ssmi_mamba2_dims * d);
/* The optional D: (H) or (H, P). */
ssm_status ssmi_mamba2_check_d(ssm_context * ctx, const char * op, const ssm_tensor * dten,
                               const ssmi_mamba2_dims * d);
/* The optional seq_idx (batch, S), integer, values >= 0 and non-decreasing along S. */
ssm_status ssmi_mamba2_check_seq_idx(ssm_context * ctx, const char * op, const ssm_tensor * s,
                                     const ssmi_mamba2_dims * d);
/* The inputs of ssm_mamba2_scan (x, dt, a, b, c, d, z, dt_bias, seq_idx, cu_seqlens,
 * initial_states), in the order and with the messages of ssm_mamba2_scan's own validation;
 * out and final_states are not looked at. Fills every field of *d (nseq 0 without varlen).
 * Shared by the forward and mamba2_scan_bwd, whose forward arguments are the same. */
ssm_status ssmi_mamba2_check_scan_inputs(ssm_context * ctx, const char * op, const ssm_mamba2_params * p,
                                         const ssm_mamba2_scan_args * a, ssmi_mamba2_dims * d);

/* ---- Mamba-3 (SISO and MIMO) ------------------------------------------------------------ */
/* The shapes of the four recurrent states with a leading dim (NS or slots): angle (3 dims),
 * ssm (4), k (k_ndim: 3 for SISO (lead,H,K), 4 for MIMO (lead,R,H,N)), v (3). */
typedef struct ssmi_mamba3_state_shapes {
    int64_t angle[3], ssm[4], k[4], v[3];
    int32_t k_ndim;
} ssmi_mamba3_state_shapes;
/* The state group names the operators use, in the order angle, ssm, k, v. */
extern const char * const ssmi_mamba3_state_names[4];
extern const char * const ssmi_mamba3_final_names[4];
extern const char * const ssmi_mamba3_dfinal_names[4];
extern const char * const ssmi_mamba3_dstate_names[4];
/* Four state tensors (angle may be NULL: the op has none) checked in the order angle, ssm,
 * k, v against *sh, float dtypes; as outputs (ssmi_check_output) when is_output. */
ssm_status ssmi_mamba3_check_states(ssm_context * ctx, const char * op, const char * const names[4],
                                    const ssm_tensor * angle, const ssm_tensor * ssm, const ssm_tensor * k,
                                    const ssm_tensor * v, int optional, int is_output,
                                    const ssmi_mamba3_state_shapes * sh);
/* Initial states: each present one with its shape; the group (angle_state when angle is
 * non-NULL, ssm_state, k_state, v_state) all present or all absent. Sets *has_states. */
ssm_status ssmi_mamba3_check_initial_states(ssm_context * ctx, const char * op, const ssm_tensor * angle,
                                            const ssm_tensor * ssm, const ssm_tensor * k, const ssm_tensor * v,
                                            const ssmi_mamba3_state_shapes * sh, int32_t * has_states);
/* ssmi_check_cu_seqlens, then *varlen (cu given) and *nseq (nseq with cu, else batch). */
ssm_status ssmi_mamba3_take_nseq(ssm_context * ctx, const char * op, const ssm_tensor * cu, const char * batch_name,
                                 int64_t batch, int64_t seqlen, int64_t * nseq, int32_t * varlen);
/* After a decode step: separate final_* pools (finals[i] vs pools[i], angle/ssm/k/v) get the
 * slots no row used, so they hold the whole pool: on the host (ssmi_copy_unused_slots), or
 * on the device for the CUDA backend (ssmi_cuda_copy_unused_slots; idx a host view). */
ssm_status ssmi_mamba3_copy_unused_pools(ssm_context * ctx, const char * op, ssmi_backend_kind be,
                                         const ssm_tensor * const pools[4], const ssm_tensor * const finals[4],
                                         const ssm_tensor * idx, int64_t batch);

#endif /* SSMI_OPS_COMMON_H */
