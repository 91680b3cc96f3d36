/*
 * mamba3_siso.c — public entry points of the Mamba-3 SISO operators (spec mamba3_siso.md).
 *
 * Each operator is its validator (shapes per include/ssmops.h and spec §5, from the tensors
 * that define each dimension; combination rules; index-tensor values) plus one line that
 * defines the entry point through ssmi_dispatch (dispatch.c), which adds the schema's rules
 * and picks the backend: REF, CPU, and CUDA for siso_fwd, siso, siso_bwd and siso_step
 * (explicitly, or AUTO with q on a CUDA device). Nothing is written before the backend runs.
 *
 * Which tensor defines which dimension:
 *   q (B, S, Hq, K) → B, S, Hq, K;  v (B, S, H, V) → H, V;  angles (B, S, H, A) → A;
 *   cu_seqlens → NS (else NS = B); the step: q (B, Hq, K), v (B, H, V), angles (B, H, A)
 *   (dim 0 is T tokens with cu_seqlens, which gives the rows), angle_state (slots, H, A) →
 *   slots.
 *   The angle cumsum: angles (B, S, H, A) → everything.
 */
#include <string.h>

#include "../core/ssmi.h"
#include "../cpu/ssmi_cpu_mamba3.h"
#include "../ref/ssmi_ref_mamba3.h"
#include "ops_common.h"

#ifdef SSMOPS_HAVE_CUDA
#include "../cuda/ssmi_cuda.h"
#endif

#define M3_MAX_CHUNK 1024

void ssm_mamba3_params_init(ssm_mamba3_params * params) {
    SSMI_PARAMS_INIT(params);
    params->chunk_size = 64;
}

/* ---- shared rules -------------------------------------------------------------------- */

static ssm_status check_params(ssm_context * ctx, const char * op, const void * params) {
    const ssm_mamba3_params * p = params;
    SSM_RETURN_IF(p->chunk_size < 1 || p->chunk_size > M3_MAX_CHUNK, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->chunk_size=%lld is outside [1, %d]", op, (long long)p->chunk_size, M3_MAX_CHUNK);
    return SSM_STATUS_OK;
}

/* q, k (B, S, Hq, K) [or (B, Hq, K) for the step: seq = 0] and v (B, S, H, V) define B, S,
 * Hq, K, H, V; K must be even and ≥ 2, V ≥ 1, Hq ≥ 1 and H a multiple of Hq. */
static ssm_status take_qkv_dims(ssm_context * ctx, const char * op, const ssm_tensor * q, const ssm_tensor * k,
                                const ssm_tensor * v, int seq, ssmi_mamba3_dims * d) {
    const int32_t nd = seq ? 4 : 3;
    d->batch = q->shape[0];
    d->seqlen = seq ? q->shape[1] : 0;
    d->nheads_qk = q->shape[nd - 2];
    d->dk = q->shape[nd - 1];
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "k", k, q->shape));
    const int64_t wv[4] = {d->batch, seq ? d->seqlen : -1, -1, -1};
    const int64_t wv3[3] = {d->batch, -1, -1};
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "v", v, seq ? wv : wv3));
    d->nheads = v->shape[nd - 2];
    d->dv = v->shape[nd - 1];
    SSM_RETURN_IF(d->dk < 2 || d->dk % 2 != 0, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: q.shape[%d]=%lld (K) must be even and at least 2", op, (int)nd - 1, (long long)d->dk);
    SSM_RETURN_IF(d->dv < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: v.shape[%d]=%lld (V) must be at least 1", op,
                  (int)nd - 1, (long long)d->dv);
    SSM_FORWARD_IF_ERROR(ssmi_check_head_state(ctx, op, seq ? "v.shape[3] (V)" : "v.shape[2] (V)", d->dv,
                                               seq ? "q.shape[3] (K)" : "q.shape[2] (K)", d->dk, "V·K"));
    return ssmi_mamba3_check_heads(ctx, op, d->nheads_qk, (int)nd - 2, "Hq", d->nheads, (int)nd - 2);
}

/* angles (B, S, H, A) [step: (B, H, A)] defines A ≤ K/2. */
static ssm_status take_angle_dims(ssm_context * ctx, const char * op, const ssm_tensor * angles, int seq,
                                  ssmi_mamba3_dims * d) {
    const int64_t w4[4] = {d->batch, d->seqlen, d->nheads, -1};
    const int64_t w3[3] = {d->batch, d->nheads, -1};
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "angles", angles, seq ? w4 : w3));
    d->nangles = angles->shape[seq ? 3 : 2];
    SSM_RETURN_IF(d->nangles > d->dk / 2, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: angles.shape[%d]=%lld (A) exceeds K/2=%lld", op, seq ? 3 : 2, (long long)d->nangles,
                  (long long)(d->dk / 2));
    return SSM_STATUS_OK;
}

/* adt, dt, trap (B, H, S) [step: (B, H)], q_bias, k_bias (H, K), d (H) opt, z like v opt. */
static ssm_status check_core_inputs(ssm_context * ctx, const char * op, const ssm_tensor * adt, const ssm_tensor * dt,
                                    const ssm_tensor * trap, const ssm_tensor * q_bias, const ssm_tensor * k_bias,
                                    const ssm_tensor * dd, const ssm_tensor * z, const ssm_tensor * v,
                                    const ssmi_mamba3_dims * d) {
    const int64_t ws[3] = {d->batch, d->nheads, d->seqlen}; /* the step's (B, H) reads the first two */
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "adt", adt, ws));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "dt", dt, ws));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "trap", trap, ws));
    const int64_t wb[2] = {d->nheads, d->dk};
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "q_bias", q_bias, wb));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "k_bias", k_bias, wb));
    const int64_t wh[1] = {d->nheads};
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "d", dd, wh));
    return ssmi_check_shape(ctx, op, "z", z, v->shape);
}

/* The state shapes with a leading dim `lead`: angle (lead,H,A), ssm (lead,H,V,K),
 * k (lead,H,K), v (lead,H,V). */
static ssmi_mamba3_state_shapes state_shapes(const ssmi_mamba3_dims * d, int64_t lead) {
    const ssmi_mamba3_state_shapes s = {{lead, d->nheads, d->nangles},
                                        {lead, d->nheads, d->dv, d->dk},
                                        {lead, d->nheads, d->dk},
                                        {lead, d->nheads, d->dv}};
    return s;
}

/* ---- angle_cumsum and its backward: angles (B, S, H, A) defines every dimension ---------- */
/* Both have a CUDA path too (AUTO: angles on a CUDA device). */

static ssm_status take_angle_op_dims(ssm_context * ctx, const char * op, const ssm_mamba3_params * p,
                                     const ssm_tensor * angles, const ssm_tensor * dt, const ssm_tensor * cu,
                                     ssmi_mamba3_dims * d) {
    d->batch = angles->shape[0];
    d->seqlen = angles->shape[1];
    d->nheads = angles->shape[2];
    d->nheads_qk = 1;
    d->nangles = angles->shape[3];
    /* K = 2A must fit in int64 (a broadcast angles view can claim any A). */
    SSM_RETURN_IF(d->nangles > INT64_MAX / 2, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: angles.shape[3]=%lld (A) is too large", op, (long long)d->nangles);
    d->dk = 2 * d->nangles;
    d->chunk = p->chunk_size;
    const int64_t wdt[3] = {d->batch, d->nheads, d->seqlen};
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "dt", dt, wdt));
    return ssmi_mamba3_take_nseq(ctx, op, cu, "angles", d->batch, d->seqlen, &d->nseq, &d->varlen);
}

static ssm_status validate_angle_cumsum(ssm_context * ctx, const char * op, const ssm_mamba3_params * p,
                                        const ssm_mamba3_angle_cumsum_args * a, ssmi_mamba3_dims * d) {
    SSM_FORWARD_IF_ERROR(take_angle_op_dims(ctx, op, p, &a->angles, &a->dt, &a->cu_seqlens, d));
    SSMI_SHAPE(angle_state, d->nseq, d->nheads, d->nangles);
    d->has_states = ssmi_present(&a->angle_state);
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "angles_cumsum", &a->angles_cumsum, a->angles.shape));
    SSMI_SHAPE(final_angle_state, d->nseq, d->nheads, d->nangles);
    return SSM_STATUS_OK;
}
SSMI_DEFINE_CUDA_OP(mamba3_angle_cumsum, ssm_mamba3_params, m3, check_params, validate_angle_cumsum, angles)

static ssm_status validate_angle_cumsum_bwd(ssm_context * ctx, const char * op, const ssm_mamba3_params * p,
                                            const ssm_mamba3_angle_cumsum_bwd_args * a, ssmi_mamba3_dims * d) {
    SSM_FORWARD_IF_ERROR(take_angle_op_dims(ctx, op, p, &a->angles, &a->dt, &a->cu_seqlens, d));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "dangles_cumsum", &a->dangles_cumsum, a->angles.shape));
    SSMI_SHAPE(dfinal_angle_state, d->nseq, d->nheads, d->nangles);
    SSMI_SHAPE(dangle_state, d->nseq, d->nheads, d->nangles); /* no angle_state input here */
    return ssmi_check_gradient_shapes(ctx, op, SSMI_OP_mamba3_angle_cumsum_bwd, a);
}
SSMI_DEFINE_CUDA_OP(mamba3_angle_cumsum_bwd, ssm_mamba3_params, m3, check_params, validate_angle_cumsum_bwd, angles)

/* ---- the sequence operators: siso_fwd, siso, siso_bwd ---------------------------------- */

/* What the three share, on the combined forward's view of their arguments (a): the per-token
 * tensors and parameters, cu_seqlens (NS), the initial states (angle_state only when
 * with_angle: siso_fwd has none), out and the final states. */
static ssm_status validate_seq(ssm_context * ctx, const char * op, const ssm_mamba3_params * p,
                               const ssm_mamba3_siso_args * a, int with_angle, ssmi_mamba3_dims * d) {
    SSM_FORWARD_IF_ERROR(take_qkv_dims(ctx, op, &a->q, &a->k, &a->v, 1, d));
    SSM_FORWARD_IF_ERROR(take_angle_dims(ctx, op, &a->angles, 1, d));
    SSM_FORWARD_IF_ERROR(
        check_core_inputs(ctx, op, &a->adt, &a->dt, &a->trap, &a->q_bias, &a->k_bias, &a->d, &a->z, &a->v, d));
    SSM_FORWARD_IF_ERROR(
        ssmi_mamba3_take_nseq(ctx, op, &a->cu_seqlens, "q", d->batch, d->seqlen, &d->nseq, &d->varlen));
    d->chunk = p->chunk_size;
    const ssmi_mamba3_state_shapes sh = state_shapes(d, d->nseq);
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_initial_states(ctx, op, with_angle ? &a->angle_state : NULL, &a->ssm_state,
                                                          &a->k_state, &a->v_state, &sh, &d->has_states));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "out", &a->out, a->v.shape));
    /* the forwards' saved pre-gate output and chunk states, the backward's inputs of the same names
     * (the projection keeps them): one row of chunk_states per chunk of each sequence */
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "pregate_y", &a->pregate_y, a->v.shape));
    SSM_FORWARD_IF_ERROR(ssmi_check_saved_dtype(ctx, op, "pregate_y", &a->pregate_y));
    if (ssmi_present(&a->chunk_states)) {
        const int64_t rows = ssmi_saved_chunk_rows(&a->cu_seqlens, d->varlen, d->nseq, d->batch, d->seqlen, d->chunk);
        SSMI_SHAPE(chunk_states, rows, d->nheads, d->dv, d->dk);
        SSM_FORWARD_IF_ERROR(ssmi_check_saved_dtype(ctx, op, "chunk_states", &a->chunk_states));
    }
    return ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_final_names, with_angle ? &a->final_angle_state : NULL,
                                    &a->final_ssm_state, &a->final_k_state, &a->final_v_state, &sh);
}

static ssm_status validate_siso_fwd(ssm_context * ctx, const char * op, const ssm_mamba3_params * p,
                                    const ssm_mamba3_siso_fwd_args * a, ssmi_mamba3_dims * d) {
    ssm_mamba3_siso_args f;
    ssmi_args_project(SSMI_OP_mamba3_siso, &f, SSMI_OP_mamba3_siso_fwd, a);
    return validate_seq(ctx, op, p, &f, 0, d);
}
SSMI_DEFINE_CUDA_OP(mamba3_siso_fwd, ssm_mamba3_params, m3, check_params, validate_siso_fwd, q)

static ssm_status validate_siso(ssm_context * ctx, const char * op, const ssm_mamba3_params * p,
                                const ssm_mamba3_siso_args * a, ssmi_mamba3_dims * d) {
    return validate_seq(ctx, op, p, a, 1, d);
}
SSMI_DEFINE_CUDA_OP(mamba3_siso, ssm_mamba3_params, m3, check_params, validate_siso, q)

static ssm_status validate_siso_bwd(ssm_context * ctx, const char * op, const ssm_mamba3_params * p,
                                    const ssm_mamba3_siso_bwd_args * a, ssmi_mamba3_dims * d) {
    ssm_mamba3_siso_args             f;
    ssmi_args_project(SSMI_OP_mamba3_siso, &f, SSMI_OP_mamba3_siso_bwd, a);
    SSM_FORWARD_IF_ERROR(validate_seq(ctx, op, p, &f, 1, d));
    const ssmi_mamba3_state_shapes sh = state_shapes(d, d->nseq);
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "dout", &a->dout, a->v.shape));
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_dfinal_names, &a->dfinal_angle_state,
                                                  &a->dfinal_ssm_state, &a->dfinal_k_state, &a->dfinal_v_state, &sh));
    /* Gradient outputs: the shapes of their forward inputs. */
    return ssmi_check_gradient_shapes(ctx, op, SSMI_OP_mamba3_siso_bwd, a);
}
SSMI_DEFINE_CUDA_OP(mamba3_siso_bwd, ssm_mamba3_params, m3, check_params, validate_siso_bwd, q)

/* ---- siso_step ----------------------------------------------------------------------- */

/* The slot tensors of a step's args (core/step_slots.h). */
static ssmi_step_slots siso_step_slots(const ssm_mamba3_siso_step_args * a) {
    return (ssmi_step_slots){&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                             &a->num_accepted_tokens};
}

/* The token tensors (q … out, intermediate_*) have T tokens in dim 0: B rows, or cu[B]
 * with cu_seqlens. d->batch: rows; d->seqlen: T with cu_seqlens, else 0 (one token a row);
 * d->nseq: slots. */
static ssm_status validate_siso_step(ssm_context * ctx, const char * op, const ssm_mamba3_params * p,
                                     const ssm_mamba3_siso_step_args * a, ssmi_mamba3_dims * d) {
    SSM_FORWARD_IF_ERROR(take_qkv_dims(ctx, op, &a->q, &a->k, &a->v, 0, d));
    SSM_FORWARD_IF_ERROR(take_angle_dims(ctx, op, &a->angles, 0, d));
    SSM_FORWARD_IF_ERROR(
        check_core_inputs(ctx, op, &a->adt, &a->dt, &a->trap, &a->q_bias, &a->k_bias, &a->d, &a->z, &a->v, d));
    d->chunk = p->chunk_size;
    const int64_t T = d->batch;
    int64_t       rows = 0;
    SSM_FORWARD_IF_ERROR(ssmi_check_cu_seqlens(ctx, op, &a->cu_seqlens, "q", 1, T, &rows));
    if (ssmi_present(&a->cu_seqlens)) d->batch = rows, d->seqlen = T;
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "out", &a->out, a->v.shape));
    /* The four states are required; angle_state gives the number of slots. */
    const ssmi_mamba3_state_shapes inter = state_shapes(d, T), sh = state_shapes(d, a->angle_state.shape[0]);
    const ssm_tensor * const       in[4] = {&a->angle_state, &a->ssm_state, &a->k_state, &a->v_state};
    const ssm_tensor * const fin[4] = {&a->final_angle_state, &a->final_ssm_state, &a->final_k_state, &a->final_v_state};
    const ssm_tensor * const       mid[4] = {&a->intermediate_angle_state, &a->intermediate_ssm_state,
                                             &a->intermediate_k_state, &a->intermediate_v_state};
    const ssmi_step_slots          slots = siso_step_slots(a);
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_step_states(ctx, op, in, fin, mid, &slots, d->batch, &sh, &inter));
    d->nseq = a->angle_state.shape[0];
    d->has_states = 1;
    return SSM_STATUS_OK;
}
SSMI_DEFINE_CUDA_OP(mamba3_siso_step, ssm_mamba3_params, m3, check_params, validate_siso_step, q)
