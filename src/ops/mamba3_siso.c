/*
 * mamba3_siso.c — public entry points of the Mamba-3 SISO operators (spec mamba3_siso.md).
 *
 * Every entry point does the same three things, in this order:
 *   1. validate params and every tensor (shapes per include/ssmops.h and spec §5, from the
 *      tensors that define each dimension), index-tensor values and output aliasing;
 *   2. fill ssmi_mamba3_dims;
 *   3. dispatch to the backend chosen by the context (REF, CPU, and CUDA for siso_fwd, siso
 *      and siso_step: explicitly, or AUTO with q on a CUDA device).
 * Nothing is written before step 3, so a failed call leaves every output untouched.
 * CUDA calls check the devices first (every float tensor on the CUDA device, index tensors
 * on either side; device index tensors are copied to the host), then run the same
 * validation on CPU-typed copies of the views (the rules do not depend on the device).
 *
 * Which tensor defines which dimension:
 *   q (B, S, Hq, K) → B, S, Hq, K;  v (B, S, H, V) → H, V;  angles (B, S, H, A) → A;
 *   cu_seqlens → NS (else NS = B); the step: q (B, Hq, K), v (B, H, V), angles (B, H, A),
 *   angle_state (slots, H, A) → slots.
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
    if (params == NULL) return;
    memset(params, 0, sizeof *params);
    params->size = sizeof *params;
    params->chunk_size = 64;
}

/* ---- small helpers ------------------------------------------------------------------ */

static ssm_status check_params(ssm_context * ctx, const char * op, const ssm_mamba3_params * p, const void * args) {
    SSM_RETURN_IF(p == NULL, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: params is NULL", op);
    SSM_RETURN_IF(p->size < sizeof(ssm_mamba3_params), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->size=%zu is smaller than sizeof(ssm_mamba3_params)=%zu (call ssm_mamba3_params_init)",
                  op, p->size, sizeof(ssm_mamba3_params));
    SSM_RETURN_IF(p->chunk_size < 1 || p->chunk_size > M3_MAX_CHUNK, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->chunk_size=%lld is outside [1, %d]", op, (long long)p->chunk_size, M3_MAX_CHUNK);
    SSM_RETURN_IF(args == NULL, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: args is NULL", op);
    return SSM_STATUS_OK;
}

static ssm_status check_in(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t, int optional,
                           int32_t ndim, const int64_t * want) {
    return ssmi_check_tensor(ctx, op, name, t, optional, ndim, want, SSMI_FLOAT_DTYPES);
}

static ssm_status check_out(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t, int optional,
                            int32_t ndim, const int64_t * want) {
    return ssmi_check_output(ctx, op, name, t, optional, ndim, want, SSMI_FLOAT_DTYPES);
}

/* q, k (B, S, Hq, K) [or (B, Hq, K) for the step: seq = 0] and v (B, S, H, V) define B, S,
 * Hq, K, H, V; K must be even and ≥ 2, V ≥ 1, Hq ≥ 1 and H a multiple of Hq. */
static ssm_status take_qkv_dims(ssm_context * ctx, const char * op, const ssm_tensor * q, const ssm_tensor * k,
                                const ssm_tensor * v, int seq, ssmi_mamba3_dims * d) {
    static const int64_t any[4] = {-1, -1, -1, -1};
    const int32_t        nd = seq ? 4 : 3;
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "q", q, 0, nd, any));
    d->batch = q->shape[0];
    d->seqlen = seq ? q->shape[1] : 0;
    d->nheads_qk = q->shape[nd - 2];
    d->dk = q->shape[nd - 1];
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "k", k, 0, nd, q->shape));
    const int64_t wv[4] = {d->batch, seq ? d->seqlen : -1, -1, -1};
    const int64_t wv3[3] = {d->batch, -1, -1};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "v", v, 0, nd, seq ? wv : wv3));
    d->nheads = v->shape[nd - 2];
    d->dv = v->shape[nd - 1];
    SSM_RETURN_IF(d->dk < 2 || d->dk % 2 != 0, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: q.shape[%d]=%lld (K) must be even and at least 2", op, (int)nd - 1, (long long)d->dk);
    SSM_RETURN_IF(d->dv < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: v.shape[%d]=%lld (V) must be at least 1", op,
                  (int)nd - 1, (long long)d->dv);
    SSM_RETURN_IF(d->nheads_qk < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: q.shape[%d]=%lld (Hq) must be at least 1", op,
                  (int)nd - 2, (long long)d->nheads_qk);
    SSM_RETURN_IF(d->nheads < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: v.shape[%d]=%lld (H) must be at least 1", op,
                  (int)nd - 2, (long long)d->nheads);
    SSM_RETURN_IF(d->nheads % d->nheads_qk != 0, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: v.shape[%d]=%lld (H) is not a multiple of q.shape[%d]=%lld (Hq)", op, (int)nd - 2,
                  (long long)d->nheads, (int)nd - 2, (long long)d->nheads_qk);
    return SSM_STATUS_OK;
}

/* angles (B, S, H, A) [step: (B, H, A)] defines A ≤ K/2. */
static ssm_status take_angle_dims(ssm_context * ctx, const char * op, const ssm_tensor * angles, int seq,
                                  ssmi_mamba3_dims * d) {
    const int64_t w4[4] = {d->batch, d->seqlen, d->nheads, -1};
    const int64_t w3[3] = {d->batch, d->nheads, -1};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "angles", angles, 0, seq ? 4 : 3, seq ? w4 : w3));
    d->nangles = angles->shape[seq ? 3 : 2];
    SSM_RETURN_IF(d->nangles > d->dk / 2, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: angles.shape[%d]=%lld (A) exceeds K/2=%lld", op, seq ? 3 : 2, (long long)d->nangles,
                  (long long)(d->dk / 2));
    return SSM_STATUS_OK;
}

/* adt, dt, trap (B, H, S) [step: (B, H)], q_bias, k_bias (H, K), d (H) opt, z like v opt. */
static ssm_status check_core_inputs(ssm_context * ctx, const char * op, const ssm_tensor * adt, const ssm_tensor * dt,
                                    const ssm_tensor * trap, const ssm_tensor * q_bias, const ssm_tensor * k_bias,
                                    const ssm_tensor * dd, const ssm_tensor * z, const ssm_tensor * v, int seq,
                                    const ssmi_mamba3_dims * d) {
    const int64_t ws[3] = {d->batch, d->nheads, d->seqlen};
    const int32_t nd = seq ? 3 : 2;
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "adt", adt, 0, nd, ws));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "dt", dt, 0, nd, ws));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "trap", trap, 0, nd, ws));
    const int64_t wb[2] = {d->nheads, d->dk};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "q_bias", q_bias, 0, 2, wb));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "k_bias", k_bias, 0, 2, wb));
    const int64_t wh[1] = {d->nheads};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "d", dd, 1, 1, wh));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "z", z, 1, v->ndim, v->shape));
    return SSM_STATUS_OK;
}

/* The state shapes with a leading dim `lead`: angle (lead,H,A), ssm (lead,H,V,K),
 * k (lead,H,K), v (lead,H,V). */
static ssmi_mamba3_state_shapes state_shapes(const ssmi_mamba3_dims * d, int64_t lead) {
    const ssmi_mamba3_state_shapes s = {{lead, d->nheads, d->nangles},
                                        {lead, d->nheads, d->dv, d->dk},
                                        {lead, d->nheads, d->dk},
                                        {lead, d->nheads, d->dv},
                                        3};
    return s;
}

/* ---- angle_cumsum -------------------------------------------------------------------- */

/* angles (B, S, H, A) defines all dims of the angle ops; dt (B, H, S). */
static ssm_status take_angle_op_dims(ssm_context * ctx, const char * op, const ssm_mamba3_params * p,
                                     const ssm_tensor * angles, const ssm_tensor * dt, const ssm_tensor * cu,
                                     ssmi_mamba3_dims * d) {
    static const int64_t any4[4] = {-1, -1, -1, -1};
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "angles", angles, 0, 4, any4));
    d->batch = angles->shape[0];
    d->seqlen = angles->shape[1];
    d->nheads = angles->shape[2];
    d->nheads_qk = 1;
    d->nangles = angles->shape[3];
    d->dk = 2 * d->nangles;
    d->chunk = p->chunk_size;
    const int64_t wdt[3] = {d->batch, d->nheads, d->seqlen};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "dt", dt, 0, 3, wdt));
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_take_nseq(ctx, op, cu, "angles", d->batch, d->seqlen, &d->nseq, &d->varlen));
    return SSM_STATUS_OK;
}

static ssm_status validate_angle_cumsum(ssm_context * ctx, const ssm_mamba3_params * p,
                                        const ssm_mamba3_angle_cumsum_args * a, ssmi_mamba3_dims * d) {
    static const char op[] = "mamba3_angle_cumsum";
    SSM_FORWARD_IF_ERROR(check_params(ctx, op, p, a));
    SSM_FORWARD_IF_ERROR(take_angle_op_dims(ctx, op, p, &a->angles, &a->dt, &a->cu_seqlens, d));
    const int64_t wst[3] = {d->nseq, d->nheads, d->nangles};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "angle_state", &a->angle_state, 1, 3, wst));
    d->has_states = ssmi_present(&a->angle_state);
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "angles_cumsum", &a->angles_cumsum, 0, 4, a->angles.shape));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "final_angle_state", &a->final_angle_state, 1, 3, wst));
    const ssmi_named ins[] = {
        {"angles", &a->angles}, {"dt", &a->dt}, {"angle_state", &a->angle_state}, {"cu_seqlens", &a->cu_seqlens}};
    const ssmi_named outs[] = {{"angles_cumsum", &a->angles_cumsum}, {"final_angle_state", &a->final_angle_state}};
    return ssmi_check_disjoint(ctx, op, outs, 2, ins, 4);
}

ssm_status ssm_mamba3_angle_cumsum(ssm_context * ctx, const ssm_mamba3_params * params,
                                   const ssm_mamba3_angle_cumsum_args * args) {
    static const char op[] = "mamba3_angle_cumsum";
    ssmi_clear_error(ctx);
    ssmi_mamba3_dims  d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(validate_angle_cumsum(ctx, params, args, &d));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, op, &be));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba3_angle_cumsum(ctx, params, &d, args)
                                  : ssmi_cpu_mamba3_angle_cumsum(ctx, params, &d, args);
}

/* ---- angle_cumsum_bwd ---------------------------------------------------------------- */

static ssm_status validate_angle_cumsum_bwd(ssm_context * ctx, const ssm_mamba3_params * p,
                                            const ssm_mamba3_angle_cumsum_bwd_args * a, ssmi_mamba3_dims * d) {
    static const char op[] = "mamba3_angle_cumsum_bwd";
    SSM_FORWARD_IF_ERROR(check_params(ctx, op, p, a));
    SSM_FORWARD_IF_ERROR(take_angle_op_dims(ctx, op, p, &a->angles, &a->dt, &a->cu_seqlens, d));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "dangles_cumsum", &a->dangles_cumsum, 0, 4, a->angles.shape));
    const int64_t wst[3] = {d->nseq, d->nheads, d->nangles};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "dfinal_angle_state", &a->dfinal_angle_state, 1, 3, wst));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dangles", &a->dangles, 0, 4, a->angles.shape));
    const int64_t wdt[3] = {d->batch, d->nheads, d->seqlen};
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "ddt", &a->ddt, 0, 3, wdt));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dangle_state", &a->dangle_state, 1, 3, wst));
    const ssmi_named ins[] = {{"dangles_cumsum", &a->dangles_cumsum},
                              {"dfinal_angle_state", &a->dfinal_angle_state},
                              {"angles", &a->angles},
                              {"dt", &a->dt},
                              {"cu_seqlens", &a->cu_seqlens}};
    const ssmi_named outs[] = {{"dangles", &a->dangles}, {"ddt", &a->ddt}, {"dangle_state", &a->dangle_state}};
    return ssmi_check_disjoint(ctx, op, outs, 3, ins, 5);
}

ssm_status ssm_mamba3_angle_cumsum_bwd(ssm_context * ctx, const ssm_mamba3_params * params,
                                       const ssm_mamba3_angle_cumsum_bwd_args * args) {
    static const char op[] = "mamba3_angle_cumsum_bwd";
    ssmi_clear_error(ctx);
    ssmi_mamba3_dims  d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(validate_angle_cumsum_bwd(ctx, params, args, &d));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, op, &be));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba3_angle_cumsum_bwd(ctx, params, &d, args)
                                  : ssmi_cpu_mamba3_angle_cumsum_bwd(ctx, params, &d, args);
}

/* ---- siso_fwd ------------------------------------------------------------------------ */

/* Everything the sequence-mode operators share: q/k/v/angles dims, the core inputs and
 * cu_seqlens (NS). */
static ssm_status take_seq_dims(ssm_context * ctx, const char * op, const ssm_mamba3_params * p, const ssm_tensor * q,
                                const ssm_tensor * k, const ssm_tensor * v, const ssm_tensor * adt,
                                const ssm_tensor * dt, const ssm_tensor * trap, const ssm_tensor * q_bias,
                                const ssm_tensor * k_bias, const ssm_tensor * angles, const ssm_tensor * dd,
                                const ssm_tensor * z, const ssm_tensor * cu, ssmi_mamba3_dims * d) {
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(take_qkv_dims(ctx, op, q, k, v, 1, d));
    SSM_FORWARD_IF_ERROR(take_angle_dims(ctx, op, angles, 1, d));
    SSM_FORWARD_IF_ERROR(check_core_inputs(ctx, op, adt, dt, trap, q_bias, k_bias, dd, z, v, 1, d));
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_take_nseq(ctx, op, cu, "q", d->batch, d->seqlen, &d->nseq, &d->varlen));
    d->chunk = p->chunk_size;
    return SSM_STATUS_OK;
}

/* The inputs every SISO sequence operator (forward, combined, backward, step) reads, in the
 * order their overlap checks name them: the per-token tensors and parameters, then the four
 * states. A macro: the argument structs differ, the field names do not. */
#define SISO_TOKEN_INS(a)                                                                                        \
    {"q", &(a)->q}, {"k", &(a)->k}, {"v", &(a)->v}, {"adt", &(a)->adt}, {"dt", &(a)->dt}, {"trap", &(a)->trap},  \
        {"q_bias", &(a)->q_bias}, {"k_bias", &(a)->k_bias}, {"angles", &(a)->angles}, {"d", &(a)->d}, {"z", &(a)->z}
#define SISO_STATE_INS(a)                                                                             \
    {"angle_state", &(a)->angle_state}, {"ssm_state", &(a)->ssm_state}, {"k_state", &(a)->k_state}, \
        {"v_state", &(a)->v_state}

static ssm_status validate_siso_fwd(ssm_context * ctx, const ssm_mamba3_params * p, const ssm_mamba3_siso_fwd_args * a,
                                    ssmi_mamba3_dims * d) {
    static const char op[] = "mamba3_siso_fwd";
    SSM_FORWARD_IF_ERROR(check_params(ctx, op, p, a));
    SSM_FORWARD_IF_ERROR(take_seq_dims(ctx, op, p, &a->q, &a->k, &a->v, &a->adt, &a->dt, &a->trap, &a->q_bias,
                                       &a->k_bias, &a->angles, &a->d, &a->z, &a->cu_seqlens, d));
    const ssmi_mamba3_state_shapes sh = state_shapes(d, d->nseq);
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_initial_states(ctx, op, NULL, &a->ssm_state, &a->k_state, &a->v_state, &sh,
                                                          &d->has_states));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "out", &a->out, 0, 4, a->v.shape));
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_final_names, NULL, &a->final_ssm_state,
                                                  &a->final_k_state, &a->final_v_state, 1, 1, &sh));
    const ssmi_named ins[] = {SISO_TOKEN_INS(a),
                              {"ssm_state", &a->ssm_state},
                              {"k_state", &a->k_state},
                              {"v_state", &a->v_state},
                              {"cu_seqlens", &a->cu_seqlens}};
    const ssmi_named outs[] = {{"out", &a->out},
                               {"final_ssm_state", &a->final_ssm_state},
                               {"final_k_state", &a->final_k_state},
                               {"final_v_state", &a->final_v_state}};
    return ssmi_check_disjoint(ctx, op, outs, 4, ins, 15);
}

#ifdef SSMOPS_HAVE_CUDA
static ssm_status siso_fwd_cuda(ssm_context * ctx, const ssm_mamba3_params * params,
                                const ssm_mamba3_siso_fwd_args * args) {
    static const char op[] = "mamba3_siso_fwd";
    ssmi_mamba3_dims  d;
    if (params == NULL || args == NULL) return validate_siso_fwd(ctx, params, args, &d);
    ssm_mamba3_siso_fwd_args h = *args;
    ssm_tensor * const       fl[] = {&h.q,         &h.k,         &h.v,         &h.adt,
                                     &h.dt,        &h.trap,      &h.q_bias,    &h.k_bias,
                                     &h.angles,    &h.d,         &h.z,         &h.ssm_state,
                                     &h.k_state,   &h.v_state,   &h.out,       &h.final_ssm_state,
                                     &h.final_k_state, &h.final_v_state};
    const char * const       names[] = {"q",         "k",         "v",         "adt",
                                        "dt",        "trap",      "q_bias",    "k_bias",
                                        "angles",    "d",         "z",         "ssm_state",
                                        "k_state",   "v_state",   "out",       "final_ssm_state",
                                        "final_k_state", "final_v_state"};
    SSM_FORWARD_IF_ERROR(ssmi_cuda_retype(ctx, op, fl, names, 18));
    void * buf = NULL;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_host_index(ctx, op, &args->cu_seqlens, &h.cu_seqlens, &buf));
    ssm_status st = validate_siso_fwd(ctx, params, &h, &d);
    if (st == SSM_STATUS_OK) st = ssmi_cuda_mamba3_siso_fwd(ctx, params, &d, &h);
    ssmi_free(ctx, buf);
    return st;
}
#endif

ssm_status ssm_mamba3_siso_fwd(ssm_context * ctx, const ssm_mamba3_params * params,
                               const ssm_mamba3_siso_fwd_args * args) {
    static const char op[] = "mamba3_siso_fwd";
    ssmi_clear_error(ctx);
    ssmi_mamba3_dims  d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend_cuda(ctx, op, args != NULL ? &args->q : NULL, &be));
#ifdef SSMOPS_HAVE_CUDA
    if (be == SSMI_BACKEND_CUDA) return siso_fwd_cuda(ctx, params, args);
#endif
    SSM_FORWARD_IF_ERROR(validate_siso_fwd(ctx, params, args, &d));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba3_siso_fwd(ctx, params, &d, args)
                                  : ssmi_cpu_mamba3_siso_fwd(ctx, params, &d, args);
}

/* ---- siso (combined forward) --------------------------------------------------------- */

static ssm_status validate_siso(ssm_context * ctx, const ssm_mamba3_params * p, const ssm_mamba3_siso_args * a,
                                ssmi_mamba3_dims * d) {
    static const char op[] = "mamba3_siso";
    SSM_FORWARD_IF_ERROR(check_params(ctx, op, p, a));
    SSM_FORWARD_IF_ERROR(take_seq_dims(ctx, op, p, &a->q, &a->k, &a->v, &a->adt, &a->dt, &a->trap, &a->q_bias,
                                       &a->k_bias, &a->angles, &a->d, &a->z, &a->cu_seqlens, d));
    const ssmi_mamba3_state_shapes sh = state_shapes(d, d->nseq);
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_initial_states(ctx, op, &a->angle_state, &a->ssm_state, &a->k_state,
                                                          &a->v_state, &sh, &d->has_states));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "out", &a->out, 0, 4, a->v.shape));
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_final_names, &a->final_angle_state,
                                                  &a->final_ssm_state, &a->final_k_state, &a->final_v_state, 1, 1,
                                                  &sh));
    const ssmi_named ins[] = {SISO_TOKEN_INS(a),
                              SISO_STATE_INS(a),
                              {"cu_seqlens", &a->cu_seqlens}};
    const ssmi_named outs[] = {{"out", &a->out},
                               {"final_angle_state", &a->final_angle_state},
                               {"final_ssm_state", &a->final_ssm_state},
                               {"final_k_state", &a->final_k_state},
                               {"final_v_state", &a->final_v_state}};
    return ssmi_check_disjoint(ctx, op, outs, 5, ins, 16);
}

#ifdef SSMOPS_HAVE_CUDA
static ssm_status siso_cuda(ssm_context * ctx, const ssm_mamba3_params * params, const ssm_mamba3_siso_args * args) {
    static const char op[] = "mamba3_siso";
    ssmi_mamba3_dims  d;
    if (params == NULL || args == NULL) return validate_siso(ctx, params, args, &d);
    ssm_mamba3_siso_args h = *args;
    ssm_tensor * const   fl[] = {&h.q,           &h.k,           &h.v,
                                 &h.adt,         &h.dt,          &h.trap,
                                 &h.q_bias,      &h.k_bias,      &h.angles,
                                 &h.d,           &h.z,           &h.angle_state,
                                 &h.ssm_state,   &h.k_state,     &h.v_state,
                                 &h.out,         &h.final_angle_state, &h.final_ssm_state,
                                 &h.final_k_state, &h.final_v_state};
    const char * const   names[] = {"q",           "k",           "v",
                                    "adt",         "dt",          "trap",
                                    "q_bias",      "k_bias",      "angles",
                                    "d",           "z",           "angle_state",
                                    "ssm_state",   "k_state",     "v_state",
                                    "out",         "final_angle_state", "final_ssm_state",
                                    "final_k_state", "final_v_state"};
    SSM_FORWARD_IF_ERROR(ssmi_cuda_retype(ctx, op, fl, names, 20));
    void * buf = NULL;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_host_index(ctx, op, &args->cu_seqlens, &h.cu_seqlens, &buf));
    ssm_status st = validate_siso(ctx, params, &h, &d);
    if (st == SSM_STATUS_OK) st = ssmi_cuda_mamba3_siso(ctx, params, &d, &h);
    ssmi_free(ctx, buf);
    return st;
}
#endif

ssm_status ssm_mamba3_siso(ssm_context * ctx, const ssm_mamba3_params * params, const ssm_mamba3_siso_args * args) {
    static const char op[] = "mamba3_siso";
    ssmi_clear_error(ctx);
    ssmi_mamba3_dims  d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend_cuda(ctx, op, args != NULL ? &args->q : NULL, &be));
#ifdef SSMOPS_HAVE_CUDA
    if (be == SSMI_BACKEND_CUDA) return siso_cuda(ctx, params, args);
#endif
    SSM_FORWARD_IF_ERROR(validate_siso(ctx, params, args, &d));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba3_siso(ctx, params, &d, args)
                                  : ssmi_cpu_mamba3_siso(ctx, params, &d, args);
}

/* ---- siso_bwd ------------------------------------------------------------------------ */

/* A gradient output that needs a forward input: INVALID_ARGUMENT if the output is given
 * without it. */
static ssm_status check_needs(ssm_context * ctx, const char * op, const char * out_name, const ssm_tensor * out,
                              const char * in_name, int have) {
    SSM_RETURN_IF(ssmi_present(out) && !have, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: %s was requested but %s was not given (the gradient exists only with its input)", op, out_name,
                  in_name);
    return SSM_STATUS_OK;
}

static ssm_status validate_siso_bwd(ssm_context * ctx, const ssm_mamba3_params * p, const ssm_mamba3_siso_bwd_args * a,
                                    ssmi_mamba3_dims * d) {
    static const char op[] = "mamba3_siso_bwd";
    SSM_FORWARD_IF_ERROR(check_params(ctx, op, p, a));
    SSM_FORWARD_IF_ERROR(take_seq_dims(ctx, op, p, &a->q, &a->k, &a->v, &a->adt, &a->dt, &a->trap, &a->q_bias,
                                       &a->k_bias, &a->angles, &a->d, &a->z, &a->cu_seqlens, d));
    const ssmi_mamba3_state_shapes sh = state_shapes(d, d->nseq);
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_initial_states(ctx, op, &a->angle_state, &a->ssm_state, &a->k_state,
                                                          &a->v_state, &sh, &d->has_states));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "dout", &a->dout, 0, 4, a->v.shape));
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_dfinal_names, &a->dfinal_angle_state,
                                                  &a->dfinal_ssm_state, &a->dfinal_k_state, &a->dfinal_v_state, 1, 0,
                                                  &sh));
    /* Gradient outputs: all optional, with the shapes of their forward inputs. */
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dq", &a->dq, 1, 4, a->q.shape));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dk", &a->dk, 1, 4, a->q.shape));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dv", &a->dv, 1, 4, a->v.shape));
    const int64_t ws[3] = {d->batch, d->nheads, d->seqlen};
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dadt", &a->dadt, 1, 3, ws));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "ddt", &a->ddt, 1, 3, ws));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dtrap", &a->dtrap, 1, 3, ws));
    const int64_t wb[2] = {d->nheads, d->dk};
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dq_bias", &a->dq_bias, 1, 2, wb));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dk_bias", &a->dk_bias, 1, 2, wb));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dangles", &a->dangles, 1, 4, a->angles.shape));
    const int64_t wh[1] = {d->nheads};
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dd", &a->dd, 1, 1, wh));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dz", &a->dz, 1, 4, a->v.shape));
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_dstate_names, &a->dangle_state, &a->dssm_state,
                                                  &a->dk_state, &a->dv_state, 1, 1, &sh));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dd", &a->dd, "d", ssmi_present(&a->d)));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dz", &a->dz, "z", ssmi_present(&a->z)));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dangle_state", &a->dangle_state, "angle_state", d->has_states));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dssm_state", &a->dssm_state, "ssm_state", d->has_states));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dk_state", &a->dk_state, "k_state", d->has_states));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dv_state", &a->dv_state, "v_state", d->has_states));
    const ssmi_named ins[] = {SISO_TOKEN_INS(a),
                              SISO_STATE_INS(a),
                              {"cu_seqlens", &a->cu_seqlens},
                              {"dout", &a->dout},
                              {"dfinal_angle_state", &a->dfinal_angle_state},
                              {"dfinal_ssm_state", &a->dfinal_ssm_state},
                              {"dfinal_k_state", &a->dfinal_k_state},
                              {"dfinal_v_state", &a->dfinal_v_state}};
    const ssmi_named outs[] = {{"dq", &a->dq},
                               {"dk", &a->dk},
                               {"dv", &a->dv},
                               {"dadt", &a->dadt},
                               {"ddt", &a->ddt},
                               {"dtrap", &a->dtrap},
                               {"dq_bias", &a->dq_bias},
                               {"dk_bias", &a->dk_bias},
                               {"dangles", &a->dangles},
                               {"dd", &a->dd},
                               {"dz", &a->dz},
                               {"dangle_state", &a->dangle_state},
                               {"dssm_state", &a->dssm_state},
                               {"dk_state", &a->dk_state},
                               {"dv_state", &a->dv_state}};
    return ssmi_check_disjoint(ctx, op, outs, 15, ins, 21);
}

ssm_status ssm_mamba3_siso_bwd(ssm_context * ctx, const ssm_mamba3_params * params,
                               const ssm_mamba3_siso_bwd_args * args) {
    static const char op[] = "mamba3_siso_bwd";
    ssmi_clear_error(ctx);
    ssmi_mamba3_dims  d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(validate_siso_bwd(ctx, params, args, &d));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, op, &be));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba3_siso_bwd(ctx, params, &d, args)
                                  : ssmi_cpu_mamba3_siso_bwd(ctx, params, &d, args);
}

/* ---- siso_step ----------------------------------------------------------------------- */

/* Outputs vs inputs and outputs vs outputs, except final_X exactly the same view as its
 * input state X (the in-place pool update). */
static ssm_status check_step_overlaps(ssm_context * ctx, const char * op, const ssm_mamba3_siso_step_args * a) {
    const ssmi_named ins[] = {SISO_TOKEN_INS(a),
                              SISO_STATE_INS(a),
                              {"state_batch_indices", &a->state_batch_indices}};
    const ssmi_named outs[] = {{"out", &a->out},
                               {"final_angle_state", &a->final_angle_state},
                               {"final_ssm_state", &a->final_ssm_state},
                               {"final_k_state", &a->final_k_state},
                               {"final_v_state", &a->final_v_state}};
    enum { NIN = 16, NOUT = 5, FIRST_STATE_IN = 11 };
    /* final state o (1..4) may be exactly its own input state (FIRST_STATE_IN + o - 1) */
    const int in_place[NOUT] = {-1, FIRST_STATE_IN, FIRST_STATE_IN + 1, FIRST_STATE_IN + 2, FIRST_STATE_IN + 3};
    return ssmi_check_disjoint_in_place(ctx, op, outs, NOUT, ins, NIN, in_place);
}

static ssm_status validate_siso_step(ssm_context * ctx, const ssm_mamba3_params * p,
                                     const ssm_mamba3_siso_step_args * a, ssmi_mamba3_dims * d) {
    static const char    op[] = "mamba3_siso_step";
    static const int64_t any3[3] = {-1, -1, -1};
    SSM_FORWARD_IF_ERROR(check_params(ctx, op, p, a));
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(take_qkv_dims(ctx, op, &a->q, &a->k, &a->v, 0, d));
    SSM_FORWARD_IF_ERROR(take_angle_dims(ctx, op, &a->angles, 0, d));
    SSM_FORWARD_IF_ERROR(
        check_core_inputs(ctx, op, &a->adt, &a->dt, &a->trap, &a->q_bias, &a->k_bias, &a->d, &a->z, &a->v, 0, d));
    d->chunk = p->chunk_size;
    /* The four states are required; angle_state gives the number of slots. */
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "angle_state", &a->angle_state, 0, 3, any3));
    d->nseq = a->angle_state.shape[0];
    const ssmi_mamba3_state_shapes sh = state_shapes(d, d->nseq);
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_state_names, &a->angle_state, &a->ssm_state,
                                                  &a->k_state, &a->v_state, 0, 0, &sh));
    d->has_states = 1;
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_state_indices(ctx, op, &a->state_batch_indices, d->batch, d->nseq));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "out", &a->out, 0, 3, a->v.shape));
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_final_names, &a->final_angle_state,
                                                  &a->final_ssm_state, &a->final_k_state, &a->final_v_state, 1, 1,
                                                  &sh));
    return check_step_overlaps(ctx, op, a);
}

#ifdef SSMOPS_HAVE_CUDA
/* state_batch_indices may be in host memory (no copy) or device memory (copied to the host
 * for validation: a synchronisation; pass it in host memory for the fastest decode). */
static ssm_status siso_step_cuda(ssm_context * ctx, const ssm_mamba3_params * params,
                                 const ssm_mamba3_siso_step_args * args) {
    static const char op[] = "mamba3_siso_step";
    ssmi_mamba3_dims  d;
    if (params == NULL || args == NULL) return validate_siso_step(ctx, params, args, &d);
    ssm_mamba3_siso_step_args h = *args;
    ssm_tensor * const        fl[] = {&h.q,           &h.k,           &h.v,
                                      &h.adt,         &h.dt,          &h.trap,
                                      &h.q_bias,      &h.k_bias,      &h.angles,
                                      &h.d,           &h.z,           &h.angle_state,
                                      &h.ssm_state,   &h.k_state,     &h.v_state,
                                      &h.out,         &h.final_angle_state, &h.final_ssm_state,
                                      &h.final_k_state, &h.final_v_state};
    const char * const        names[] = {"q",           "k",           "v",
                                         "adt",         "dt",          "trap",
                                         "q_bias",      "k_bias",      "angles",
                                         "d",           "z",           "angle_state",
                                         "ssm_state",   "k_state",     "v_state",
                                         "out",         "final_angle_state", "final_ssm_state",
                                         "final_k_state", "final_v_state"};
    SSM_FORWARD_IF_ERROR(ssmi_cuda_retype(ctx, op, fl, names, 20));
    void * buf = NULL;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_host_index(ctx, op, &args->state_batch_indices, &h.state_batch_indices, &buf));
    ssm_status st = validate_siso_step(ctx, params, &h, &d);
    if (st == SSM_STATUS_OK) st = ssmi_cuda_mamba3_siso_step(ctx, params, &d, &h);
    /* Separate final_* pools hold the whole pool after the step (see core/pool.c). */
    const ssm_tensor * const ins[4] = {&h.angle_state, &h.ssm_state, &h.k_state, &h.v_state};
    const ssm_tensor * const outs[4] = {&h.final_angle_state, &h.final_ssm_state, &h.final_k_state,
                                        &h.final_v_state};
    if (st == SSM_STATUS_OK)
        st = ssmi_mamba3_copy_unused_pools(ctx, op, SSMI_BACKEND_CUDA, ins, outs, &h.state_batch_indices, d.batch);
    ssmi_free(ctx, buf);
    return st;
}
#endif

ssm_status ssm_mamba3_siso_step(ssm_context * ctx, const ssm_mamba3_params * params,
                                const ssm_mamba3_siso_step_args * args) {
    static const char op[] = "mamba3_siso_step";
    ssmi_clear_error(ctx);
    ssmi_mamba3_dims  d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend_cuda(ctx, op, args != NULL ? &args->q : NULL, &be));
#ifdef SSMOPS_HAVE_CUDA
    if (be == SSMI_BACKEND_CUDA) return siso_step_cuda(ctx, params, args);
#endif
    SSM_FORWARD_IF_ERROR(validate_siso_step(ctx, params, args, &d));
    SSM_FORWARD_IF_ERROR(be == SSMI_BACKEND_REF ? ssmi_ref_mamba3_siso_step(ctx, params, &d, args)
                                                : ssmi_cpu_mamba3_siso_step(ctx, params, &d, args));
    /* Separate final_* pools hold the whole pool after the step (see core/pool.c). */
    const ssm_tensor * const ins[4] = {&args->angle_state, &args->ssm_state, &args->k_state, &args->v_state};
    const ssm_tensor * const outs[4] = {&args->final_angle_state, &args->final_ssm_state, &args->final_k_state,
                                        &args->final_v_state};
    return ssmi_mamba3_copy_unused_pools(ctx, op, be, ins, outs, &args->state_batch_indices, d.batch);
}
