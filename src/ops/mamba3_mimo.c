/*
 * mamba3_mimo.c — public entry points of the Mamba-3 MIMO operators (spec mamba3_mimo.md).
 *
 * Each operator is its validator (shapes per include/ssmops.h and spec §3, §6, from the
 * tensors that define each dimension; combination rules; index-tensor values) plus one line
 * that defines the entry point through ssmi_dispatch (dispatch.c), which adds the schema's
 * rules and picks the backend: REF, CPU, and CUDA for bwd_fwd, the forward, the backward and
 * the step (explicitly, or AUTO with v on a CUDA device). Nothing is written before the
 * backend runs.
 *
 * Which tensor defines which dimension:
 *   q (B, S, R, G, N) → B, S, R, G, N  [step: q (B, R, G, N)];  v (B, S, H, P) → H, P
 *   [step: v (B, H, P)];  A = N / div (angles must have it);  cu_seqlens → NS (else NS = B);
 *   the step: angle_state (slots, H, A) → slots; with cu_seqlens dim 0 of the token tensors
 *   is T tokens and cu_seqlens gives the rows.
 *
 * Limits (spec §6, brief): H % G == 0; div ∈ {2, 4}; N even, N % div == 0, N ≤ 128;
 * P ≤ 128; 1 ≤ C·R ≤ 128 for the chunked operators (the step has no chunk). Every float
 * tensor may be F32/F16/BF16/F64 (project convention); index tensors I32/I64.
 */
#include <math.h>
#include <string.h>

#include "../core/ssmi.h"
#include "../cpu/ssmi_cpu_mimo.h"
#include "../ref/ssmi_ref_mimo.h"
#include "ops_common.h"

#ifdef SSMOPS_HAVE_CUDA
#include "../cuda/ssmi_cuda.h"
#endif

#define MIMO_MAX_CR 128 /* C·R: rows of a chunk tile (spec §6)          */
#define MIMO_MAX_N 128  /* N: state size (seed and spec §6 limit)        */
#define MIMO_MAX_P 128  /* P: value width (seed and spec §6 limit)       */

void ssm_mamba3_mimo_params_init(ssm_mamba3_mimo_params * params) {
    SSMI_PARAMS_INIT(params);
    params->chunk_size = 16;
    params->rotary_dim_divisor = 4;
    params->fuse_pregate_norm = 0;
    params->norm_eps = 1e-5;
}

/* ---- small helpers ------------------------------------------------------------------ */

static ssm_status check_params(ssm_context * ctx, const char * op, const void * params) {
    const ssm_mamba3_mimo_params * p = params;
    SSM_RETURN_IF(p->chunk_size < 1 || p->chunk_size > MIMO_MAX_CR, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->chunk_size=%lld is outside [1, %d]", op, (long long)p->chunk_size, MIMO_MAX_CR);
    SSM_RETURN_IF(p->rotary_dim_divisor != 2 && p->rotary_dim_divisor != 4, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->rotary_dim_divisor=%d must be 2 or 4", op, (int)p->rotary_dim_divisor);
    SSM_RETURN_IF(p->fuse_pregate_norm != 0 && p->fuse_pregate_norm != 1, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->fuse_pregate_norm=%d must be 0 or 1", op, (int)p->fuse_pregate_norm);
    SSM_RETURN_IF(!(p->norm_eps >= 0.0) || isinf(p->norm_eps), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->norm_eps=%g must be finite and non-negative", op, p->norm_eps);
    return SSM_STATUS_OK;
}

/* q, k (B, S, R, G, N) [step: (B, R, G, N), seq = 0] and v (B, S, H, P) [step: (B, H, P)]
 * define B, S, R, G, N, H, P; then the rules on them (H % G, N even and a multiple of div,
 * the N and P limits). */
static ssm_status take_qkv_dims(ssm_context * ctx, const char * op, const ssm_mamba3_mimo_params * p,
                                const ssm_tensor * q, const ssm_tensor * k, const ssm_tensor * v, int seq,
                                ssmi_mimo_dims * d) {
    const int32_t nd = seq ? 5 : 4;
    d->batch = q->shape[0];
    d->seqlen = seq ? q->shape[1] : 0;
    d->rank = q->shape[nd - 3];
    d->ngroups = q->shape[nd - 2];
    d->dstate = q->shape[nd - 1];
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "k", k, q->shape));
    const int64_t wv[4] = {d->batch, d->seqlen, -1, -1};
    const int64_t wv3[3] = {d->batch, -1, -1};
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "v", v, seq ? wv : wv3));
    d->nheads = v->shape[nd - 3];
    d->headdim = v->shape[nd - 2];
    const int qd = (int)nd - 1, vd = (int)nd - 2;
    SSM_RETURN_IF(d->batch < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: q.shape[0]=%lld (B) must be at least 1", op,
                  (long long)d->batch);
    SSM_RETURN_IF(seq && d->seqlen < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: q.shape[1]=%lld (S) must be at least 1",
                  op, (long long)d->seqlen);
    SSM_RETURN_IF(d->rank < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: q.shape[%d]=%lld (R) must be at least 1", op,
                  (int)nd - 3, (long long)d->rank);
    /* C·R ≤ 128 with C ≥ 1 bounds R for every operator, the step included (its state comes
     * from the forward); checked alone so that no product with R can overflow. */
    SSM_RETURN_IF(d->rank > MIMO_MAX_CR, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: q.shape[%d]=%lld (R) exceeds %d", op, (int)nd - 3, (long long)d->rank, MIMO_MAX_CR);
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_heads(ctx, op, d->ngroups, (int)nd - 2, "G", d->nheads, (int)nd - 3));
    SSM_RETURN_IF(d->headdim < 1 || d->headdim > MIMO_MAX_P, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: v.shape[%d]=%lld (P) is outside [1, %d]", op, vd, (long long)d->headdim, MIMO_MAX_P);
    SSM_RETURN_IF(d->dstate < 2 || d->dstate % 2 != 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: q.shape[%d]=%lld (N) must be even and at least 2 (rotary pairs (a, a+N/2))", op, qd,
                  (long long)d->dstate);
    SSM_RETURN_IF(d->dstate % p->rotary_dim_divisor != 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: q.shape[%d]=%lld (N) is not a multiple of rotary_dim_divisor=%d", op, qd, (long long)d->dstate,
                  (int)p->rotary_dim_divisor);
    SSM_RETURN_IF(d->dstate > MIMO_MAX_N, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: q.shape[%d]=%lld (N) exceeds %d",
                  op, qd, (long long)d->dstate, MIMO_MAX_N);
    d->nangles = d->dstate / p->rotary_dim_divisor;
    d->chunk = p->chunk_size;
    return SSM_STATUS_OK;
}

/* The chunked operators: C·R ≤ 128 rows per chunk tile; nc = ceil(S/C). */
static ssm_status check_chunk_rank(ssm_context * ctx, const char * op, ssmi_mimo_dims * d) {
    SSM_RETURN_IF(d->chunk * d->rank > MIMO_MAX_CR, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: chunk_size=%lld times R=%lld is %lld; C·R must be at most %d", op, (long long)d->chunk,
                  (long long)d->rank, (long long)(d->chunk * d->rank), MIMO_MAX_CR);
    d->nchunks = d->seqlen / d->chunk + (d->seqlen % d->chunk != 0); /* ceil; S may be INT64_MAX */
    return SSM_STATUS_OK;
}

/* The per-head parameters: q_bias, k_bias (H, R, N), mimo_v (H, R, P), optional mimo_z,
 * mimo_o (H, R, P) and d (H). Sets d->reduce_o. */
static ssm_status check_head_params(ssm_context * ctx, const char * op, const ssm_tensor * q_bias,
                                    const ssm_tensor * k_bias, const ssm_tensor * mimo_v, const ssm_tensor * mimo_z,
                                    const ssm_tensor * mimo_o, const ssm_tensor * dd, ssmi_mimo_dims * d) {
    const int64_t wn[3] = {d->nheads, d->rank, d->dstate};
    const int64_t wp[3] = {d->nheads, d->rank, d->headdim};
    const int64_t wh[1] = {d->nheads};
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "q_bias", q_bias, wn));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "k_bias", k_bias, wn));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "mimo_v", mimo_v, wp));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "mimo_z", mimo_z, wp));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "mimo_o", mimo_o, wp));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "d", dd, wh));
    d->reduce_o = ssmi_present(mimo_o);
    return SSM_STATUS_OK;
}

/* z and mimo_z both or neither (the seed's rule; upstream silently ignores a lone mimo_z). */
static ssm_status check_z_pair(ssm_context * ctx, const char * op, const ssm_tensor * z, const ssm_tensor * mimo_z) {
    SSM_RETURN_IF(ssmi_present(z) && !ssmi_present(mimo_z), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: z was given without mimo_z; pass both or neither", op);
    SSM_RETURN_IF(!ssmi_present(z) && ssmi_present(mimo_z), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: mimo_z was given without z; pass both or neither", op);
    return SSM_STATUS_OK;
}

/* Fused pre-gate norm needs z, mimo_z and mimo_o; outproj_norm_weight ((H, P) or (H·P))
 * is allowed only with it. */
static ssm_status check_fused(ssm_context * ctx, const char * op, const ssm_mamba3_mimo_params * p,
                              const ssm_tensor * z, const ssm_tensor * mimo_o, const ssm_tensor * w,
                              const ssmi_mimo_dims * d) {
    if (ssmi_present(w)) { /* (H, P) or (H·P): the schema allows both ranks */
        const int64_t w2[2] = {d->nheads, d->headdim};
        const int64_t w1[1] = {d->nheads * d->headdim};
        SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "outproj_norm_weight", w, w->ndim == 2 ? w2 : w1));
        SSM_RETURN_IF(!p->fuse_pregate_norm, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: outproj_norm_weight was given but params->fuse_pregate_norm is 0 (the weight belongs to "
                      "the fused norm)",
                      op);
    }
    if (!p->fuse_pregate_norm) return SSM_STATUS_OK;
    SSM_RETURN_IF(!ssmi_present(mimo_o), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->fuse_pregate_norm=1 needs mimo_o (the fused norm reduces the ranks)", op);
    SSM_RETURN_IF(!ssmi_present(z), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->fuse_pregate_norm=1 needs z and mimo_z (the fused norm gates)", op);
    return SSM_STATUS_OK;
}

/* The state shapes with a leading dim `lead`: angle (lead,H,A), ssm (lead,H,P,N),
 * k (lead,R,H,N), v (lead,H,P). */
static ssmi_mamba3_state_shapes state_shapes(const ssmi_mimo_dims * d, int64_t lead) {
    const ssmi_mamba3_state_shapes s = {{lead, d->nheads, d->nangles},
                                        {lead, d->nheads, d->headdim, d->dstate},
                                        {lead, d->rank, d->nheads, d->dstate},
                                        {lead, d->nheads, d->headdim}};
    return s;
}

/* out / dout: (B, S, H, P) with mimo_o, else (B, S, R, H, P) [step: drop S]. */
static ssm_status check_out_like(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t, int seq,
                                 const ssmi_mimo_dims * d) {
    const int64_t red[4] = {d->batch, d->seqlen, d->nheads, d->headdim};
    const int64_t raw[5] = {d->batch, d->seqlen, d->rank, d->nheads, d->headdim};
    const int64_t red_step[3] = {d->batch, d->nheads, d->headdim};
    const int64_t raw_step[4] = {d->batch, d->rank, d->nheads, d->headdim};
    const int32_t nd = (d->reduce_o ? 4 : 5) - (seq ? 0 : 1);
    const int64_t * want = seq ? (d->reduce_o ? red : raw) : (d->reduce_o ? red_step : raw_step);
    if (t->data != NULL && t->ndim != nd)
        return ssmi_error(ctx, SSM_STATUS_INVALID_SHAPE,
                          "%s: %s has %d dims; it must have %d (%s) because mimo_o is %s", op, name, (int)t->ndim,
                          (int)nd, d->reduce_o ? (seq ? "B,S,H,P" : "B,H,P") : (seq ? "B,S,R,H,P" : "B,R,H,P"),
                          d->reduce_o ? "given (reduced output)" : "absent (per-rank output)");
    return ssmi_check_shape(ctx, op, name, t, want);
}

/* ---- bwd_fwd ------------------------------------------------------------------------- */

static ssm_status check_bwd_fwd_params(ssm_context * ctx, const char * op, const void * params) {
    const ssm_mamba3_mimo_params * p = params;
    SSM_FORWARD_IF_ERROR(check_params(ctx, op, params));
    SSM_RETURN_IF(p->fuse_pregate_norm, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->fuse_pregate_norm=1 is not part of this operator's interface (spec §3.4)", op);
    return SSM_STATUS_OK;
}

static ssm_status validate_bwd_fwd(ssm_context * ctx, const char * op, const ssm_mamba3_mimo_params * p,
                                   const ssm_mamba3_mimo_bwd_fwd_args * a, ssmi_mimo_dims * d) {
    SSM_FORWARD_IF_ERROR(take_qkv_dims(ctx, op, p, &a->q, &a->k, &a->v, 1, d));
    SSM_FORWARD_IF_ERROR(check_chunk_rank(ctx, op, d));
    d->nseq = d->batch;
    SSM_FORWARD_IF_ERROR(
        check_head_params(ctx, op, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o, &a->d, d));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "z", &a->z, a->v.shape));
    SSM_FORWARD_IF_ERROR(check_z_pair(ctx, op, &a->z, &a->mimo_z));
    SSMI_SHAPE(angles, d->batch, d->seqlen, d->nheads, d->nangles);
    SSMI_SHAPE(da_cs, d->batch, d->nheads, d->seqlen);
    SSMI_SHAPE(da_cs_rev, d->batch, d->nheads, d->seqlen);
    SSMI_SHAPE(dt, d->batch, d->nheads, d->seqlen);
    SSMI_SHAPE(trap, d->batch, d->nheads, d->seqlen);
    SSMI_SHAPE(segsum, d->batch, d->nheads, d->nchunks, d->chunk, d->chunk);
    SSM_FORWARD_IF_ERROR(check_out_like(ctx, op, "dout", &a->dout, 1, d));
    SSMI_SHAPE(dmimo_o, d->batch, d->nheads, d->rank, d->headdim);
    SSMI_SHAPE(states, d->batch, d->nheads, d->nchunks, d->dstate, d->headdim);
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "dz", &a->dz, a->v.shape));
    SSMI_SHAPE(dmimo_z, d->batch, d->nheads, d->rank, d->headdim);
    SSMI_SHAPE(qk_dot, d->batch, d->nheads, d->seqlen, d->rank, d->rank);
    return SSM_STATUS_OK;
}
SSMI_DEFINE_CUDA_OP(mamba3_mimo_bwd_fwd, ssm_mamba3_mimo_params, mimo, check_bwd_fwd_params, validate_bwd_fwd, v)

/* ---- forward and backward -------------------------------------------------------------- */

/* The forward's inputs (q … v_state, cu_seqlens), which the backward takes too, in one
 * order; then out and the final states (absent in the backward's view). Fills *d. */
static ssm_status validate_forward(ssm_context * ctx, const char * op, const ssm_mamba3_mimo_params * p,
                                        const ssm_mamba3_mimo_args * a, ssmi_mimo_dims * d) {
    SSM_FORWARD_IF_ERROR(take_qkv_dims(ctx, op, p, &a->q, &a->k, &a->v, 1, d));
    SSM_FORWARD_IF_ERROR(check_chunk_rank(ctx, op, d));
    SSMI_SHAPE(adt, d->batch, d->nheads, d->seqlen);
    SSMI_SHAPE(dt, d->batch, d->nheads, d->seqlen);
    SSMI_SHAPE(trap, d->batch, d->nheads, d->seqlen);
    SSM_FORWARD_IF_ERROR(
        check_head_params(ctx, op, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o, &a->d, d));
    SSMI_SHAPE(angles, d->batch, d->seqlen, d->nheads, d->nangles);
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "z", &a->z, a->v.shape));
    SSM_FORWARD_IF_ERROR(check_z_pair(ctx, op, &a->z, &a->mimo_z));
    SSM_FORWARD_IF_ERROR(check_fused(ctx, op, p, &a->z, &a->mimo_o, &a->outproj_norm_weight, d));
    SSM_FORWARD_IF_ERROR(
        ssmi_mamba3_take_nseq(ctx, op, &a->cu_seqlens, "q", d->batch, d->seqlen, &d->nseq, &d->varlen));
    const ssmi_mamba3_state_shapes sh = state_shapes(d, d->nseq);
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_initial_states(ctx, op, &a->angle_state, &a->ssm_state, &a->k_state,
                                                          &a->v_state, &sh, &d->has_states));
    SSM_FORWARD_IF_ERROR(check_out_like(ctx, op, "out", &a->out, 1, d)); /* absent in the backward's view */
    /* the forward's saved results, the backward's inputs of the same names (the projection keeps
     * them): one row of chunk_states per chunk of each sequence */
    SSMI_SHAPE(pregate_y, d->batch, d->seqlen, d->nheads, d->rank, d->headdim);
    SSM_FORWARD_IF_ERROR(ssmi_check_saved_dtype(ctx, op, "pregate_y", &a->pregate_y));
    if (ssmi_present(&a->chunk_states)) {
        const int64_t rows = ssmi_saved_chunk_rows(&a->cu_seqlens, d->varlen, d->nseq, d->batch, d->seqlen, d->chunk);
        SSMI_SHAPE(chunk_states, rows, d->nheads, d->dstate, d->headdim);
        SSM_FORWARD_IF_ERROR(ssmi_check_saved_dtype(ctx, op, "chunk_states", &a->chunk_states));
    }
    return ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_final_names, &a->final_angle_state, &a->final_ssm_state,
                                    &a->final_k_state, &a->final_v_state, &sh);
}

SSMI_DEFINE_CUDA_OP(mamba3_mimo, ssm_mamba3_mimo_params, mimo, check_params, validate_forward, v)

static ssm_status validate_bwd(ssm_context * ctx, const char * op, const ssm_mamba3_mimo_params * p,
                               const ssm_mamba3_mimo_bwd_args * a, ssmi_mimo_dims * d) {
    ssm_mamba3_mimo_args             f;
    ssmi_args_project(SSMI_OP_mamba3_mimo, &f, SSMI_OP_mamba3_mimo_bwd, a);
    SSM_FORWARD_IF_ERROR(validate_forward(ctx, op, p, &f, d));
    SSM_FORWARD_IF_ERROR(check_out_like(ctx, op, "dout", &a->dout, 1, d));
    const ssmi_mamba3_state_shapes sh = state_shapes(d, d->nseq);
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_dfinal_names, &a->dfinal_angle_state,
                                                  &a->dfinal_ssm_state, &a->dfinal_k_state, &a->dfinal_v_state, &sh));
    /* gradient outputs: the shapes of their forward inputs; doutproj_norm_weight without the
     * weight (all ones): (H, P) */
    SSM_FORWARD_IF_ERROR(ssmi_check_gradient_shapes(ctx, op, SSMI_OP_mamba3_mimo_bwd, a));
    if (!ssmi_present(&a->outproj_norm_weight)) {
        SSM_RETURN_IF(ssmi_present(&a->doutproj_norm_weight) && a->doutproj_norm_weight.ndim != 2, ctx,
                      SSM_STATUS_INVALID_SHAPE, "%s: doutproj_norm_weight.ndim=%d must be 2 (H, P) without the weight",
                      op, (int)a->doutproj_norm_weight.ndim);
        SSMI_SHAPE(doutproj_norm_weight, d->nheads, d->headdim);
    }
    SSM_RETURN_IF(ssmi_present(&a->doutproj_norm_weight) && !p->fuse_pregate_norm, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: doutproj_norm_weight was given but p->fuse_pregate_norm is 0 (it exists only with the "
                  "fused norm)",
                  op);
    return SSM_STATUS_OK;
}
SSMI_DEFINE_CUDA_OP(mamba3_mimo_bwd, ssm_mamba3_mimo_params, mimo, check_params, validate_bwd, v)

/* ---- step ---------------------------------------------------------------------------- */

/* The slot tensors of a step's args (core/step_slots.h). */
static ssmi_step_slots mimo_step_slots(const ssm_mamba3_mimo_step_args * a) {
    return (ssmi_step_slots){&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                             &a->num_accepted_tokens};
}

/* The token tensors (q … angles, z, out, intermediate_*) have T tokens in dim 0: B rows, or
 * cu[B] with cu_seqlens. d->batch: rows; d->seqlen: T with cu_seqlens, else 0 (one token a
 * row); d->nseq: slots. */
static ssm_status validate_step(ssm_context * ctx, const char * op, const ssm_mamba3_mimo_params * p,
                                const ssm_mamba3_mimo_step_args * a, ssmi_mimo_dims * d) {
    SSM_FORWARD_IF_ERROR(take_qkv_dims(ctx, op, p, &a->q, &a->k, &a->v, 0, d));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "z", &a->z, a->v.shape));
    SSMI_SHAPE(adt, d->batch, d->nheads);
    SSMI_SHAPE(dt, d->batch, d->nheads);
    SSMI_SHAPE(trap, d->batch, d->nheads);
    SSMI_SHAPE(angles, d->batch, d->nheads, d->nangles);
    SSM_FORWARD_IF_ERROR(
        check_head_params(ctx, op, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o, &a->d, d));
    SSM_FORWARD_IF_ERROR(check_z_pair(ctx, op, &a->z, &a->mimo_z));
    SSM_FORWARD_IF_ERROR(check_fused(ctx, op, p, &a->z, &a->mimo_o, &a->outproj_norm_weight, d));
    const int64_t T = d->batch;
    int64_t       rows = 0;
    SSM_FORWARD_IF_ERROR(ssmi_check_cu_seqlens(ctx, op, &a->cu_seqlens, "q", 1, T, &rows));
    SSM_FORWARD_IF_ERROR(check_out_like(ctx, op, "out", &a->out, 0, d)); /* d->batch is T here */
    if (ssmi_present(&a->cu_seqlens)) d->batch = rows, d->seqlen = T;
    /* The four states are required; angle_state gives the number of slots. */
    const ssmi_mamba3_state_shapes inter = state_shapes(d, T), sh = state_shapes(d, a->angle_state.shape[0]);
    const ssm_tensor * const       in[4] = {&a->angle_state, &a->ssm_state, &a->k_state, &a->v_state};
    const ssm_tensor * const fin[4] = {&a->final_angle_state, &a->final_ssm_state, &a->final_k_state, &a->final_v_state};
    const ssm_tensor * const       mid[4] = {&a->intermediate_angle_state, &a->intermediate_ssm_state,
                                             &a->intermediate_k_state, &a->intermediate_v_state};
    const ssmi_step_slots          slots = mimo_step_slots(a);
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_step_states(ctx, op, in, fin, mid, &slots, d->batch, &sh, &inter));
    d->nseq = a->angle_state.shape[0];
    d->has_states = 1;
    return SSM_STATUS_OK;
}
SSMI_DEFINE_CUDA_OP(mamba3_mimo_step, ssm_mamba3_mimo_params, mimo, check_params, validate_step, v)
