/* ops_common.h — the one dispatch path of every operator (dispatch.c) and the validation
 * helpers the operator families share (ops_common.c). Everything here runs before the first
 * write of an operator, except the backend call itself and the pool copies after it. */
#ifndef SSMI_OPS_COMMON_H
#define SSMI_OPS_COMMON_H

#include <stdint.h>
#include <string.h>

#include "../core/ssmi.h"
#include "../core/step_slots.h"

/* ---- the dispatch path (dispatch.c) --------------------------------------------------- */
typedef enum ssmi_backend_kind { SSMI_BACKEND_REF, SSMI_BACKEND_CPU, SSMI_BACKEND_CUDA } ssmi_backend_kind;

/* The problem description of any family, filled by an operator's validator. */
typedef union ssmi_dims {
    ssmi_mamba2_dims  m2;
    ssmi_conv1d_dims  conv;
    ssmi_rmsnorm_dims norm;
    ssmi_mamba3_dims  m3;
    ssmi_mimo_dims    mimo;
} ssmi_dims;

/* What an operator adds to the schema: its family's params rules, its own rules, and its
 * backends. The void pointers are the operator's params and args structs. */
typedef struct ssmi_op_impl {
    ssmi_op op;
    /* The params fields in range (params is non-NULL and initialised). */
    ssm_status (*check_params)(ssm_context * ctx, const char * op, const void * params);
    /* The rules the schema does not give (run after its per-tensor rules): the dimensions from
     * the tensors that define them, every shape, combinations and index values; fills *dims. */
    ssm_status (*validate)(ssm_context * ctx, const char * op, const void * params, const void * args,
                           ssmi_dims * dims);
    /* Workspace bytes backend be needs; NULL: the operator takes no workspace. */
    ssm_status (*workspace)(ssm_context * ctx, ssmi_backend_kind be, const void * params, const ssmi_dims * dims,
                            const void * args, size_t * bytes);
    /* Runs backend be (workspace: NULL, or at least the bytes above). */
    ssm_status (*run)(ssm_context * ctx, ssmi_backend_kind be, const void * params, const ssmi_dims * dims,
                      const void * args, void * workspace);
    /* Offset of the args field whose device picks the CUDA backend under AUTO (operators with
     * a CUDA path in the schema). */
    size_t lead;
} ssmi_op_impl;

/* The one path of every operator call:
 *   1. pick the backend (the context's; AUTO: CUDA when the lead tensor is on a CUDA device
 *      and the operator has a CUDA path, else CPU);
 *   2. CUDA: host copies of the index tensors that are in device memory (validation reads
 *      their values; the stream is synchronised);
 *   3. validate: params (non-NULL, initialised: its size; impl->check_params), args non-NULL,
 *      the schema's rules per tensor (presence, device: float
 *      tensors on the backend's device and index tensors on the host, rank, dtype class,
 *      sizes); a sequence operator's state pools (state_pools.c: their indices and
 *      overlaps; the used rows gathered into dense tensors that replace the pools from
 *      here on); `needs`, impl->validate, then the output layouts and overlaps with the
 *      schema's in-place exceptions;
 *   4. workspace: the bytes the backend needs (bytes != NULL: report them and stop), the
 *      caller's workspace checked (64-byte aligned, large enough) or allocated for the CPU;
 *   5. run the backend; a decode step's separate output pools then get the slots no row used,
 *      and a sequence operator's final rows go to their pool slots.
 * `op` names the call in messages. Nothing is written before step 5. */
ssm_status ssmi_dispatch(ssm_context * ctx, const ssmi_op_impl * impl, const char * op, const void * params,
                         const void * args, void * workspace, size_t workspace_size, size_t * bytes);

/* ---- state pools of the sequence operators (state_pools.c) ----------------------------- */
/* One call's pools: the dense final-state tensors the backend writes and the pools their
 * rows go to. */
typedef struct ssmi_pool_call {
    int                active;
    int                device;      /* 1: the dense rows are CUDA device memory   */
    int                nfinal;
    const ssm_tensor * final_idx;   /* final_state_indices, NULL: none            */
    const ssm_tensor * pool[4];     /* the caller's final pools                   */
    ssm_tensor         dense[4];    /* (NS, ...) dense rows the backend writes    */
    void *             block;       /* their memory (and the gathered initial rows) */
} ssmi_pool_call;
/* For an operator with state pools whose args have initial_state_indices or
 * final_state_indices: checks the indices (host views) and the pools' overlaps, gathers the
 * initial rows (zeros for a negative index) into dense tensors — device memory and a device
 * copy when `device` (the CUDA backend), else host memory — and fills *copy (room for the
 * op's args struct) with args whose pools are those dense tensors and whose indices are
 * absent. Else leaves pc inactive. Run after the schema's per-tensor checks; writes no caller
 * memory. After a failure ssmi_pools_release still frees what it made. */
ssm_status ssmi_pools_prepare(ssm_context * ctx, const char * op, ssmi_op id, int device, const void * args,
                              void * copy, ssmi_pool_call * pc);
/* After a successful run: every final row with a non-negative slot into its pool. */
ssm_status ssmi_pools_scatter(ssm_context * ctx, const char * op, const ssmi_pool_call * pc);
/* Frees the dense rows (on the device: stream-ordered, after the scatter). */
ssm_status ssmi_pools_release(ssm_context * ctx, const char * op, ssmi_pool_call * pc);

/* dst (an args struct of dst_op) gets every field of src (an args struct of src_op) that has
 * the same name in both schemas; the others are absent. A backward's forward inputs as the
 * forward's args struct. */
void ssmi_args_project(ssmi_op dst_op, void * dst, ssmi_op src_op, const void * src);

/* Public entry points ssm_<op>(ctx, params, args): validated by check_params and
 * validate(ctx, op, const P * p, const ssm_<op>_args * a, <family dims> * d), d being member
 * `member` of ssmi_dims, and run by ssmi_ref_<op>, ssmi_cpu_<op> and, for
 * SSMI_DEFINE_CUDA_OP, ssmi_cuda_<op> (each (ctx, params, dims, args)). lead: the args field
 * whose device picks the CUDA backend under AUTO. */
#ifdef SSMOPS_HAVE_CUDA
#define SSMI_CUDA_BRANCH_(op) be == SSMI_BACKEND_CUDA ? ssmi_cuda_##op(ctx, p, d, a):
#else
#define SSMI_CUDA_BRANCH_(op)
#endif
#define SSMI_DEFINE_OP_(op, P, member, check_params, validate, lead, cuda_branch)                                  \
    static ssm_status validate_##op##_(ssm_context * ctx, const char * name, const void * p, const void * a,     \
                                       ssmi_dims * d) {                                                          \
        return validate(ctx, name, p, a, &d->member);                                                            \
    }                                                                                                             \
    static ssm_status run_##op(ssm_context * ctx, ssmi_backend_kind be, const void * p, const ssmi_dims * dims,   \
                               const void * a, void * ws) {                                                       \
        const void * d = dims;                                                                                    \
        (void)ws;                                                                                                 \
        return cuda_branch be == SSMI_BACKEND_REF ? ssmi_ref_##op(ctx, p, d, a) : ssmi_cpu_##op(ctx, p, d, a);    \
    }                                                                                                             \
    static const ssmi_op_impl op##_impl = {SSMI_OP_##op, check_params, validate_##op##_, NULL, run_##op, lead};   \
    ssm_status ssm_##op(ssm_context * ctx, const P * params, const ssm_##op##_args * args) {                      \
        return ssmi_dispatch(ctx, &op##_impl, #op, params, args, NULL, 0, NULL);                                  \
    }
#define SSMI_DEFINE_OP(op, P, member, check_params, validate) \
    SSMI_DEFINE_OP_(op, P, member, check_params, validate, 0, )
#define SSMI_DEFINE_CUDA_OP(op, P, member, check_params, validate, lead)        \
    SSMI_DEFINE_OP_(op, P, member, check_params, validate, offsetof(ssm_##op##_args, lead), \
                    SSMI_CUDA_BRANCH_(op))

/* In a params struct's _init: nothing for NULL; else zeroes and sets the size field. */
#define SSMI_PARAMS_INIT(p)                \
    do {                                   \
        if ((p) == NULL) return;           \
        memset((p), 0, sizeof *(p));       \
        (p)->size = sizeof *(p);           \
    } while (0)

/* In a validator with locals ctx, op and a (the args struct): the shape of the tensor a->field
 * must be the listed sizes (−1: any). */
#define SSMI_SHAPE(field, ...) \
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, #field, &a->field, (const int64_t[]){__VA_ARGS__}))

/* ---- shared rules ---------------------------------------------------------------------- */
/* The dimensions a tensor defines: *dims[i] = t->shape[i] for each non-NULL dims[i], i < n. */
void ssmi_take_dims(const ssm_tensor * t, int64_t * const * dims, int n);
#define SSMI_TAKE_DIMS(t, ...)                                 \
    ssmi_take_dims((t), (int64_t * const[]){__VA_ARGS__},      \
                   (int)(sizeof((int64_t * const[]){__VA_ARGS__}) / sizeof(int64_t *)))

/* A backward's rule: every present output d<x> whose input x (of the same operator) is present
 * has x's rank and shape — a gradient is shaped like its tensor. */
ssm_status ssmi_check_gradient_shapes(ssm_context * ctx, const char * op, ssmi_op id, const void * args);

/* 1 when every index of a reaches the same element of b as of a: same data, dtype, ndim and
 * shape, and the same stride on every dim of extent > 1 (a unit dim's stride never moves). */
int ssmi_same_addresses(const ssm_tensor * a, const ssm_tensor * b);

/* The slots of a decode step (core/step_slots.h; docs/ops/mamba2.md "Decode slots"), batch
 * rows, after cu_seqlens was checked: read (state_batch_indices) and write
 * (dst_state_batch_indices, needs read) each (batch) or, with cu_seqlens, (batch, L);
 * num_accepted_tokens (batch) needs a 2-D read and lies in [0, L]. Every slot below `slots`
 * (pool names the tensor whose shape[0] gives it, for the message); a padding row (read
 * slot < 0) writes nothing; a token table has a column per token of each row and needs the
 * final pool in place (has_final: a final pool is given); no slot is written twice (race);
 * with in_place (a final pool that is its input's view) no row reads a slot another row
 * writes (the result would depend on the order). Read slots may otherwise be shared. */
ssm_status ssmi_check_step_slots(ssm_context * ctx, const char * op, const ssmi_step_slots * s, int64_t batch,
                                 int64_t slots, const char * pool, int in_place, int has_final);
/* ssmi_check_step_slots of an operator with one slot tensor (idx: read and written). */
ssm_status ssmi_check_slot_indices(ssm_context * ctx, const char * op, const ssm_tensor * idx, int64_t batch,
                                   int64_t slots, const char * pool);
/* The same rules for a Mamba-3 decode step (the four pools have nslots rows): without read
 * and write slots, nslots must equal the batch rows. */
ssm_status ssmi_mamba3_check_state_indices(ssm_context * ctx, const char * op, const ssmi_step_slots * s, int64_t batch,
                                           int64_t nslots, int in_place, int has_final);

/* cu_seqlens (nseq+1), optional: length ≥ 2, batch == 1 (batch_name names the tensor the
 * batch comes from, for the message), cu[0] = 0, non-decreasing, cu[nseq] = seqlen. Sets
 * *nseq (0 when absent). */
ssm_status ssmi_check_cu_seqlens(ssm_context * ctx, const char * op, const ssm_tensor * cu, const char * batch_name,
                                 int64_t batch, int64_t seqlen, int64_t * nseq);

/* The inner dimensions of a head or channel (Mamba-2 P and N, Mamba-3 SISO V and K, conv W
 * and L) size the backends' per-task scratch and index arithmetic, and a broadcast input can
 * claim any of them: each is at most SSMI_MAX_INNER_DIM, and a head's state (the product of
 * two of them) at most SSMI_MAX_HEAD_STATE elements, so that every size derived from them
 * fits in 64 bits. docs/ops/limits.md lists them. */
#define SSMI_MAX_INNER_DIM  (INT64_C(1) << 24)
#define SSMI_MAX_HEAD_STATE (INT64_C(1) << 31)
/* dim (named `what`, e.g. "b.shape[3] (N)") ≤ SSMI_MAX_INNER_DIM: INVALID_SHAPE beyond. */
ssm_status ssmi_check_inner_dim(ssm_context * ctx, const char * op, const char * what, int64_t dim);
/* The same for a head's state rows × cols (named e.g. "P·N"), and rows·cols ≤ SSMI_MAX_HEAD_STATE. */
ssm_status ssmi_check_head_state(ssm_context * ctx, const char * op, const char * rows_what, int64_t rows,
                                 const char * cols_what, int64_t cols, const char * product);

/* ---- Mamba-2 ---------------------------------------------------------------------------- */
/* params: chunk_size in [1, 1024], dt_limit without NaN and lo ≤ hi; the decode step's
 * variant does not look at chunk_size. */
ssm_status ssmi_mamba2_check_params(ssm_context * ctx, const char * op, const void * params);
ssm_status ssmi_mamba2_check_step_params(ssm_context * ctx, const char * op, const void * params);
/* The x/b/c/z family: x (batch, S, H, P) defines batch/S/H/P; b (batch, S, G, N) defines G
 * and N with H % G == 0 (c does when b is NULL); c matches b; the optional z matches x.
 * Pass NULL for a tensor the op does not take. */
ssm_status ssmi_mamba2_check_xbcz(ssm_context * ctx, const char * op, const ssm_tensor * x, const ssm_tensor * b,
                                  const ssm_tensor * c, const ssm_tensor * z, ssmi_mamba2_dims * d);
/* The optional D: (H) or (H, P). */
ssm_status ssmi_mamba2_check_d(ssm_context * ctx, const char * op, const ssm_tensor * dten,
                               const ssmi_mamba2_dims * d);
/* The optional seq_idx (batch, S): values >= 0 and non-decreasing along S. */
ssm_status ssmi_mamba2_check_seq_idx(ssm_context * ctx, const char * op, const ssm_tensor * s,
                                     const ssmi_mamba2_dims * d);
/* The rules of ssm_mamba2_scan's inputs (x … cu_seqlens) after the schema's, in the order of
 * ssm_mamba2_scan's own validation; out and final_states are not looked at. Fills every field
 * of *d (nseq 0 without varlen). Shared by the forward and mamba2_scan_bwd. */
ssm_status ssmi_mamba2_check_scan_inputs(ssm_context * ctx, const char * op, const ssm_mamba2_params * p,
                                         const ssm_mamba2_scan_args * a, ssmi_mamba2_dims * d);

/* ---- Mamba-3 (SISO and MIMO) ------------------------------------------------------------ */
/* The shapes of the four recurrent states with a leading dim (NS or slots): angle (3 dims),
 * ssm (4), k (3 for SISO (lead,H,K), 4 for MIMO (lead,R,H,N)), v (3). */
typedef struct ssmi_mamba3_state_shapes {
    int64_t angle[3], ssm[4], k[4], v[3];
} ssmi_mamba3_state_shapes;
/* The state group names the operators use, in the order angle, ssm, k, v. */
extern const char * const ssmi_mamba3_state_names[4];
extern const char * const ssmi_mamba3_final_names[4];
extern const char * const ssmi_mamba3_dfinal_names[4];
extern const char * const ssmi_mamba3_intermediate_names[4];
/* The shapes of four state tensors (angle may be NULL: the op has none), in the order angle,
 * ssm, k, v, against *sh. */
ssm_status ssmi_mamba3_check_states(ssm_context * ctx, const char * op, const char * const names[4],
                                    const ssm_tensor * angle, const ssm_tensor * ssm, const ssm_tensor * k,
                                    const ssm_tensor * v, const ssmi_mamba3_state_shapes * sh);
/* Initial states: each present one with its shape; the group (angle_state when angle is
 * non-NULL, ssm_state, k_state, v_state) all present or all absent. Sets *has_states. */
ssm_status ssmi_mamba3_check_initial_states(ssm_context * ctx, const char * op, const ssm_tensor * angle,
                                            const ssm_tensor * ssm, const ssm_tensor * k, const ssm_tensor * v,
                                            const ssmi_mamba3_state_shapes * sh, int32_t * has_states);
/* The head counts of Mamba-3: q/k heads (groups, gsym "Hq" or "G", at q.shape[gdim]) and value
 * heads (heads at v.shape[hdim]) both at least 1, and heads a multiple of groups. */
ssm_status ssmi_mamba3_check_heads(ssm_context * ctx, const char * op, int64_t groups, int gdim, const char * gsym,
                                   int64_t heads, int hdim);
/* A Mamba-3 decode step's pools: the four required input states (shapes sh; their rows are
 * the slots) and the slot rules of ssmi_check_step_slots (batch rows; in_place: the final
 * pools count as in place; has_final: some final pool is given). The final pools have
 * their input's shape (a schema rule, dispatch.c). */
ssm_status ssmi_mamba3_check_pools(ssm_context * ctx, const char * op, const ssm_tensor * angle, const ssm_tensor * ssm,
                                   const ssm_tensor * k, const ssm_tensor * v, const ssmi_step_slots * slots,
                                   int64_t batch, const ssmi_mamba3_state_shapes * sh, int in_place, int has_final);
/* 1 when some present fin[i] is exactly the view in[i] (i < n): a decode step updating a
 * pool in place. */
int ssmi_any_in_place(const ssm_tensor * const * in, const ssm_tensor * const * fin, int n);
/* 1 when some fin[i] is present and every present fin[i] is exactly the view in[i]. */
int ssmi_all_in_place(const ssm_tensor * const * in, const ssm_tensor * const * fin, int n);
/* The states of a Mamba-3 decode step (SISO and MIMO), each group in the order angle, ssm,
 * k, v: the intermediate_* (shapes inter, T tokens in dim 0; each optional), then the four
 * required pools (shapes sh) with the slot rules over `rows` rows (ssmi_mamba3_check_pools).
 * The final_* count as in place when one is its input's view, and with a token table only
 * when every one given is (the states then go to the pools themselves). */
ssm_status ssmi_mamba3_check_step_states(ssm_context * ctx, const char * op, const ssm_tensor * const in[4],
                                         const ssm_tensor * const fin[4], const ssm_tensor * const inter[4],
                                         const ssmi_step_slots * slots, int64_t rows,
                                         const ssmi_mamba3_state_shapes * sh, const ssmi_mamba3_state_shapes * inter_sh);
/* ssmi_check_cu_seqlens, then *varlen (cu given) and *nseq (nseq with cu, else batch). */
ssm_status ssmi_mamba3_take_nseq(ssm_context * ctx, const char * op, const ssm_tensor * cu, const char * batch_name,
                                 int64_t batch, int64_t seqlen, int64_t * nseq, int32_t * varlen);
/* A forward result saved for the backward (pregate_y, chunk_states): absent, or F32 or F64, the
 * unrounded fp32 values the backward would recompute. */
ssm_status ssmi_check_saved_dtype(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t);
/* Rows of a saved chunk_states: one per chunk of `chunk` tokens of each sequence, Σ ceil(len/chunk)
 * over the cu_seqlens sequences (varlen), else batch · ceil(seqlen/chunk). */
int64_t ssmi_saved_chunk_rows(const ssm_tensor * cu, int32_t varlen, int64_t nseq, int64_t batch, int64_t seqlen,
                              int64_t chunk);

#endif /* SSMI_OPS_COMMON_H */
