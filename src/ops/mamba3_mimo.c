/*
 * mamba3_mimo.c — public entry points of the Mamba-3 MIMO operators (spec mamba3_mimo.md).
 *
 * Every entry point does the same three things, in this order:
 *   1. validate params and every tensor (shapes per include/ssmops.h and spec §3, §6, from
 *      the tensors that define each dimension), combination rules, index-tensor values and
 *      output aliasing;
 *   2. fill ssmi_mimo_dims;
 *   3. dispatch to the backend chosen by the context (REF, CPU, and CUDA for bwd_fwd, the
 *      forward and the step: explicitly, or AUTO with v on a CUDA device).
 * Nothing is written before step 3, so a failed call leaves every output untouched.
 * CUDA calls check the devices first (every float tensor on the CUDA device, index tensors
 * on either side; device index tensors are copied to the host), then run the same
 * validation on CPU-typed copies of the views (the rules do not depend on the device).
 *
 * Which tensor defines which dimension:
 *   q (B, S, R, G, N) → B, S, R, G, N  [step: q (B, R, G, N)];  v (B, S, H, P) → H, P
 *   [step: v (B, H, P)];  A = N / div (angles must have it);  cu_seqlens → NS (else NS = B);
 *   the step: angle_state (slots, H, A) → slots.
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
    if (params == NULL) return;
    memset(params, 0, sizeof *params);
    params->size = sizeof *params;
    params->chunk_size = 16;
    params->rotary_dim_divisor = 4;
    params->fuse_pregate_norm = 0;
    params->norm_eps = 1e-5;
}

/* ---- small helpers ------------------------------------------------------------------ */

static ssm_status check_params(ssm_context * ctx, const char * op, const ssm_mamba3_mimo_params * p,
                               const void * args) {
    SSM_RETURN_IF(p == NULL, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: params is NULL", op);
    SSM_RETURN_IF(p->size < sizeof(ssm_mamba3_mimo_params), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->size=%zu is smaller than sizeof(ssm_mamba3_mimo_params)=%zu (call "
                  "ssm_mamba3_mimo_params_init)",
                  op, p->size, sizeof(ssm_mamba3_mimo_params));
    SSM_RETURN_IF(p->chunk_size < 1 || p->chunk_size > MIMO_MAX_CR, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->chunk_size=%lld is outside [1, %d]", op, (long long)p->chunk_size, MIMO_MAX_CR);
    SSM_RETURN_IF(p->rotary_dim_divisor != 2 && p->rotary_dim_divisor != 4, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->rotary_dim_divisor=%d must be 2 or 4", op, (int)p->rotary_dim_divisor);
    SSM_RETURN_IF(p->fuse_pregate_norm != 0 && p->fuse_pregate_norm != 1, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->fuse_pregate_norm=%d must be 0 or 1", op, (int)p->fuse_pregate_norm);
    SSM_RETURN_IF(!(p->norm_eps >= 0.0) || isinf(p->norm_eps), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->norm_eps=%g must be finite and non-negative", op, p->norm_eps);
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

/* A tensor (an output, or an input like mimo_z) that is allowed only with another input:
 * INVALID_ARGUMENT when it is given without it. */
static ssm_status check_needs(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t,
                              const char * needed, int have) {
    SSM_RETURN_IF(ssmi_present(t) && !have, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: %s was given but %s was not (it exists only with %s)", op, name, needed, needed);
    return SSM_STATUS_OK;
}

/* q, k (B, S, R, G, N) [step: (B, R, G, N), seq = 0] and v (B, S, H, P) [step: (B, H, P)]
 * define B, S, R, G, N, H, P; then the rules on them (H % G, N even and a multiple of div,
 * the N and P limits). */
static ssm_status take_qkv_dims(ssm_context * ctx, const char * op, const ssm_mamba3_mimo_params * p,
                                const ssm_tensor * q, const ssm_tensor * k, const ssm_tensor * v, int seq,
                                ssmi_mimo_dims * d) {
    static const int64_t any[5] = {-1, -1, -1, -1, -1};
    const int32_t        nd = seq ? 5 : 4;
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "q", q, 0, nd, any));
    d->batch = q->shape[0];
    d->seqlen = seq ? q->shape[1] : 0;
    d->rank = q->shape[nd - 3];
    d->ngroups = q->shape[nd - 2];
    d->dstate = q->shape[nd - 1];
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "k", k, 0, nd, q->shape));
    const int64_t wv[4] = {d->batch, d->seqlen, -1, -1};
    const int64_t wv3[3] = {d->batch, -1, -1};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "v", v, 0, nd - 1, seq ? wv : wv3));
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
    SSM_RETURN_IF(d->ngroups < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: q.shape[%d]=%lld (G) must be at least 1", op,
                  (int)nd - 2, (long long)d->ngroups);
    SSM_RETURN_IF(d->nheads < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: v.shape[%d]=%lld (H) must be at least 1", op,
                  (int)nd - 3, (long long)d->nheads);
    SSM_RETURN_IF(d->nheads % d->ngroups != 0, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: v.shape[%d]=%lld (H) is not a multiple of q.shape[%d]=%lld (G)", op, (int)nd - 3,
                  (long long)d->nheads, (int)nd - 2, (long long)d->ngroups);
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
    d->nchunks = (d->seqlen + d->chunk - 1) / d->chunk;
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
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "q_bias", q_bias, 0, 3, wn));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "k_bias", k_bias, 0, 3, wn));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "mimo_v", mimo_v, 0, 3, wp));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "mimo_z", mimo_z, 1, 3, wp));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "mimo_o", mimo_o, 1, 3, wp));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "d", dd, 1, 1, wh));
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
    if (ssmi_present(w)) {
        SSM_RETURN_IF(w->ndim != 1 && w->ndim != 2, ctx, SSM_STATUS_INVALID_SHAPE,
                      "%s: outproj_norm_weight has %d dims; it must be (H, P) or (H·P)", op, (int)w->ndim);
        const int64_t w2[2] = {d->nheads, d->headdim};
        const int64_t w1[1] = {d->nheads * d->headdim};
        SSM_FORWARD_IF_ERROR(check_in(ctx, op, "outproj_norm_weight", w, 1, w->ndim, w->ndim == 2 ? w2 : w1));
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
                                        {lead, d->nheads, d->headdim},
                                        4};
    return s;
}

/* out / dout: (B, S, H, P) with mimo_o, else (B, S, R, H, P) [step: drop S]. */
static ssm_status check_out_like(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t,
                                 int is_output, int seq, const ssmi_mimo_dims * d) {
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
    return is_output ? check_out(ctx, op, name, t, 0, nd, want) : check_in(ctx, op, name, t, 0, nd, want);
}

/* ---- bwd_fwd ------------------------------------------------------------------------- */

static ssm_status validate_bwd_fwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                   const ssm_mamba3_mimo_bwd_fwd_args * a, ssmi_mimo_dims * d) {
    static const char op[] = "mamba3_mimo_bwd_fwd";
    SSM_FORWARD_IF_ERROR(check_params(ctx, op, p, a));
    SSM_RETURN_IF(p->fuse_pregate_norm, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->fuse_pregate_norm=1 is not part of this operator's interface (spec §3.4)", op);
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(take_qkv_dims(ctx, op, p, &a->q, &a->k, &a->v, 1, d));
    SSM_FORWARD_IF_ERROR(check_chunk_rank(ctx, op, d));
    d->nseq = d->batch;
    SSM_FORWARD_IF_ERROR(
        check_head_params(ctx, op, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o, &a->d, d));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "z", &a->z, 1, 4, a->v.shape));
    SSM_FORWARD_IF_ERROR(check_z_pair(ctx, op, &a->z, &a->mimo_z));
    const int64_t wang[4] = {d->batch, d->seqlen, d->nheads, d->nangles};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "angles", &a->angles, 0, 4, wang));
    const int64_t ws[3] = {d->batch, d->nheads, d->seqlen};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "da_cs", &a->da_cs, 0, 3, ws));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "da_cs_rev", &a->da_cs_rev, 0, 3, ws));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "dt", &a->dt, 0, 3, ws));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "trap", &a->trap, 0, 3, ws));
    const int64_t wseg[5] = {d->batch, d->nheads, d->nchunks, d->chunk, d->chunk};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "segsum", &a->segsum, 0, 5, wseg));
    SSM_FORWARD_IF_ERROR(check_out_like(ctx, op, "dout", &a->dout, 0, 1, d));
    /* outputs */
    const int64_t wrp[4] = {d->batch, d->nheads, d->rank, d->headdim};
    const int64_t wst[5] = {d->batch, d->nheads, d->nchunks, d->dstate, d->headdim};
    const int64_t wqk[5] = {d->batch, d->nheads, d->seqlen, d->rank, d->rank};
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dmimo_o", &a->dmimo_o, 1, 4, wrp));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "states", &a->states, 1, 5, wst));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dz", &a->dz, 1, 4, a->v.shape));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dmimo_z", &a->dmimo_z, 1, 4, wrp));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "qk_dot", &a->qk_dot, 1, 5, wqk));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dmimo_o", &a->dmimo_o, "mimo_o", d->reduce_o));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dz", &a->dz, "z", ssmi_present(&a->z)));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dmimo_z", &a->dmimo_z, "z", ssmi_present(&a->z)));
    const ssmi_named ins[] = {{"dout", &a->dout},     {"q", &a->q},           {"k", &a->k},
                              {"v", &a->v},           {"q_bias", &a->q_bias}, {"k_bias", &a->k_bias},
                              {"mimo_v", &a->mimo_v}, {"mimo_o", &a->mimo_o}, {"z", &a->z},
                              {"mimo_z", &a->mimo_z}, {"angles", &a->angles}, {"da_cs", &a->da_cs},
                              {"da_cs_rev", &a->da_cs_rev}, {"dt", &a->dt},   {"trap", &a->trap},
                              {"d", &a->d},           {"segsum", &a->segsum}};
    const ssmi_named outs[] = {{"dmimo_o", &a->dmimo_o},
                               {"states", &a->states},
                               {"dz", &a->dz},
                               {"dmimo_z", &a->dmimo_z},
                               {"qk_dot", &a->qk_dot}};
    return ssmi_check_disjoint(ctx, op, outs, 5, ins, 17);
}

#ifdef SSMOPS_HAVE_CUDA
static ssm_status bwd_fwd_cuda(ssm_context * ctx, const ssm_mamba3_mimo_params * params,
                               const ssm_mamba3_mimo_bwd_fwd_args * args) {
    static const char op[] = "mamba3_mimo_bwd_fwd";
    ssmi_mimo_dims    d;
    if (params == NULL || args == NULL) return validate_bwd_fwd(ctx, params, args, &d);
    ssm_mamba3_mimo_bwd_fwd_args h = *args;
    ssm_tensor * const fl[] = {&h.dout,   &h.q,      &h.k,     &h.v,         &h.q_bias,  &h.k_bias, &h.mimo_v,
                               &h.mimo_o, &h.z,      &h.mimo_z, &h.angles,   &h.da_cs,   &h.da_cs_rev, &h.dt,
                               &h.trap,   &h.d,      &h.segsum, &h.dmimo_o,  &h.states,  &h.dz,     &h.dmimo_z,
                               &h.qk_dot};
    const char * const names[] = {"dout",   "q",      "k",      "v",       "q_bias", "k_bias", "mimo_v", "mimo_o",
                                  "z",      "mimo_z", "angles", "da_cs",   "da_cs_rev", "dt",  "trap",   "d",
                                  "segsum", "dmimo_o", "states", "dz",     "dmimo_z", "qk_dot"};
    SSM_FORWARD_IF_ERROR(ssmi_cuda_retype(ctx, op, fl, names, 22));
    SSM_FORWARD_IF_ERROR(validate_bwd_fwd(ctx, params, &h, &d));
    return ssmi_cuda_mamba3_mimo_bwd_fwd(ctx, params, &d, &h);
}
#endif

ssm_status ssm_mamba3_mimo_bwd_fwd(ssm_context * ctx, const ssm_mamba3_mimo_params * params,
                                   const ssm_mamba3_mimo_bwd_fwd_args * args) {
    static const char op[] = "mamba3_mimo_bwd_fwd";
    ssmi_clear_error(ctx);
    ssmi_mimo_dims    d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend_cuda(ctx, op, args != NULL ? &args->v : NULL, &be));
#ifdef SSMOPS_HAVE_CUDA
    if (be == SSMI_BACKEND_CUDA) return bwd_fwd_cuda(ctx, params, args);
#endif
    SSM_FORWARD_IF_ERROR(validate_bwd_fwd(ctx, params, args, &d));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba3_mimo_bwd_fwd(ctx, params, &d, args)
                                  : ssmi_cpu_mamba3_mimo_bwd_fwd(ctx, params, &d, args);
}

/* ---- forward ------------------------------------------------------------------------- */

/* Everything the forward and the backward share: the forward's inputs (q … v_state,
 * cu_seqlens), validated in one order. Fills *d. */
static ssm_status take_forward_inputs(ssm_context * ctx, const char * op, const ssm_mamba3_mimo_params * p,
                                      const ssm_mamba3_mimo_args * a, ssmi_mimo_dims * d) {
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(take_qkv_dims(ctx, op, p, &a->q, &a->k, &a->v, 1, d));
    SSM_FORWARD_IF_ERROR(check_chunk_rank(ctx, op, d));
    const int64_t ws[3] = {d->batch, d->nheads, d->seqlen};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "adt", &a->adt, 0, 3, ws));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "dt", &a->dt, 0, 3, ws));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "trap", &a->trap, 0, 3, ws));
    SSM_FORWARD_IF_ERROR(
        check_head_params(ctx, op, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o, &a->d, d));
    const int64_t wang[4] = {d->batch, d->seqlen, d->nheads, d->nangles};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "angles", &a->angles, 0, 4, wang));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "z", &a->z, 1, 4, a->v.shape));
    SSM_FORWARD_IF_ERROR(check_z_pair(ctx, op, &a->z, &a->mimo_z));
    SSM_FORWARD_IF_ERROR(check_fused(ctx, op, p, &a->z, &a->mimo_o, &a->outproj_norm_weight, d));
    SSM_FORWARD_IF_ERROR(
        ssmi_mamba3_take_nseq(ctx, op, &a->cu_seqlens, "q", d->batch, d->seqlen, &d->nseq, &d->varlen));
    const ssmi_mamba3_state_shapes sh = state_shapes(d, d->nseq);
    return ssmi_mamba3_check_initial_states(ctx, op, &a->angle_state, &a->ssm_state, &a->k_state, &a->v_state, &sh,
                                            &d->has_states);
}

/* The inputs of the combined forward, which the backward reads too, in the order their overlap
 * checks name them. A macro: the argument structs differ, the field names do not. */
#define MIMO_FORWARD_INS(a)                                                                                      \
    {"q", &(a)->q}, {"k", &(a)->k}, {"v", &(a)->v}, {"adt", &(a)->adt}, {"dt", &(a)->dt}, {"trap", &(a)->trap},  \
        {"q_bias", &(a)->q_bias}, {"k_bias", &(a)->k_bias}, {"mimo_v", &(a)->mimo_v}, {"mimo_z", &(a)->mimo_z},  \
        {"mimo_o", &(a)->mimo_o}, {"angles", &(a)->angles}, {"d", &(a)->d}, {"z", &(a)->z},                      \
        {"outproj_norm_weight", &(a)->outproj_norm_weight}, {"angle_state", &(a)->angle_state},                   \
        {"ssm_state", &(a)->ssm_state}, {"k_state", &(a)->k_state}, {"v_state", &(a)->v_state},                   \
        {"cu_seqlens", &(a)->cu_seqlens}

static ssm_status validate_forward(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssm_mamba3_mimo_args * a,
                                   ssmi_mimo_dims * d) {
    static const char op[] = "mamba3_mimo";
    SSM_FORWARD_IF_ERROR(check_params(ctx, op, p, a));
    SSM_FORWARD_IF_ERROR(take_forward_inputs(ctx, op, p, a, d));
    SSM_FORWARD_IF_ERROR(check_out_like(ctx, op, "out", &a->out, 1, 1, d));
    const ssmi_mamba3_state_shapes sh = state_shapes(d, d->nseq);
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_final_names, &a->final_angle_state,
                                                  &a->final_ssm_state, &a->final_k_state, &a->final_v_state, 1, 1,
                                                  &sh));
    const ssmi_named ins[] = {MIMO_FORWARD_INS(a)};
    const ssmi_named outs[] = {{"out", &a->out},
                               {"final_angle_state", &a->final_angle_state},
                               {"final_ssm_state", &a->final_ssm_state},
                               {"final_k_state", &a->final_k_state},
                               {"final_v_state", &a->final_v_state}};
    return ssmi_check_disjoint(ctx, op, outs, 5, ins, 20);
}

#ifdef SSMOPS_HAVE_CUDA
static ssm_status forward_cuda(ssm_context * ctx, const ssm_mamba3_mimo_params * params,
                               const ssm_mamba3_mimo_args * args) {
    static const char op[] = "mamba3_mimo";
    ssmi_mimo_dims    d;
    if (params == NULL || args == NULL) return validate_forward(ctx, params, args, &d);
    ssm_mamba3_mimo_args h = *args;
    ssm_tensor * const   fl[] = {&h.q,           &h.k,           &h.v,
                                 &h.adt,         &h.dt,          &h.trap,
                                 &h.q_bias,      &h.k_bias,      &h.mimo_v,
                                 &h.mimo_z,      &h.mimo_o,      &h.angles,
                                 &h.d,           &h.z,           &h.outproj_norm_weight,
                                 &h.angle_state, &h.ssm_state,   &h.k_state,
                                 &h.v_state,     &h.out,         &h.final_angle_state,
                                 &h.final_ssm_state, &h.final_k_state, &h.final_v_state};
    const char * const names[] = {"q",           "k",         "v",       "adt",    "dt",     "trap",
                                  "q_bias",      "k_bias",    "mimo_v",  "mimo_z", "mimo_o", "angles",
                                  "d",           "z",         "outproj_norm_weight", "angle_state", "ssm_state",
                                  "k_state",     "v_state",   "out",     "final_angle_state", "final_ssm_state",
                                  "final_k_state", "final_v_state"};
    SSM_FORWARD_IF_ERROR(ssmi_cuda_retype(ctx, op, fl, names, 24));
    void * buf = NULL;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_host_index(ctx, op, &args->cu_seqlens, &h.cu_seqlens, &buf));
    ssm_status st = validate_forward(ctx, params, &h, &d);
    if (st == SSM_STATUS_OK) st = ssmi_cuda_mamba3_mimo(ctx, params, &d, &h);
    ssmi_free(ctx, buf);
    return st;
}
#endif

ssm_status ssm_mamba3_mimo(ssm_context * ctx, const ssm_mamba3_mimo_params * params, const ssm_mamba3_mimo_args * args) {
    static const char op[] = "mamba3_mimo";
    ssmi_clear_error(ctx);
    ssmi_mimo_dims    d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend_cuda(ctx, op, args != NULL ? &args->v : NULL, &be));
#ifdef SSMOPS_HAVE_CUDA
    if (be == SSMI_BACKEND_CUDA) return forward_cuda(ctx, params, args);
#endif
    SSM_FORWARD_IF_ERROR(validate_forward(ctx, params, args, &d));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba3_mimo(ctx, params, &d, args)
                                  : ssmi_cpu_mamba3_mimo(ctx, params, &d, args);
}

/* ---- backward ------------------------------------------------------------------------ */

/* The forward arguments inside a backward argument struct (same names, same rules). */
static ssm_mamba3_mimo_args forward_view(const ssm_mamba3_mimo_bwd_args * a) {
    ssm_mamba3_mimo_args f;
    memset(&f, 0, sizeof f);
    f.q = a->q;
    f.k = a->k;
    f.v = a->v;
    f.adt = a->adt;
    f.dt = a->dt;
    f.trap = a->trap;
    f.q_bias = a->q_bias;
    f.k_bias = a->k_bias;
    f.mimo_v = a->mimo_v;
    f.mimo_z = a->mimo_z;
    f.mimo_o = a->mimo_o;
    f.angles = a->angles;
    f.d = a->d;
    f.z = a->z;
    f.outproj_norm_weight = a->outproj_norm_weight;
    f.angle_state = a->angle_state;
    f.ssm_state = a->ssm_state;
    f.k_state = a->k_state;
    f.v_state = a->v_state;
    f.cu_seqlens = a->cu_seqlens;
    return f;
}

static ssm_status validate_bwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p, const ssm_mamba3_mimo_bwd_args * a,
                               ssmi_mimo_dims * d) {
    static const char op[] = "mamba3_mimo_bwd";
    SSM_FORWARD_IF_ERROR(check_params(ctx, op, p, a));
    const ssm_mamba3_mimo_args f = forward_view(a);
    SSM_FORWARD_IF_ERROR(take_forward_inputs(ctx, op, p, &f, d));
    SSM_FORWARD_IF_ERROR(check_out_like(ctx, op, "dout", &a->dout, 0, 1, d));
    const ssmi_mamba3_state_shapes sh = state_shapes(d, d->nseq);
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_dfinal_names, &a->dfinal_angle_state,
                                                  &a->dfinal_ssm_state, &a->dfinal_k_state, &a->dfinal_v_state, 1, 0,
                                                  &sh));
    /* gradient outputs: optional, with the shapes of their forward inputs */
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dq", &a->dq, 1, 5, a->q.shape));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dk", &a->dk, 1, 5, a->q.shape));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dv", &a->dv, 1, 4, a->v.shape));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dz", &a->dz, 1, 4, a->v.shape));
    const int64_t wn[3] = {d->nheads, d->rank, d->dstate};
    const int64_t wp[3] = {d->nheads, d->rank, d->headdim};
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dq_bias", &a->dq_bias, 1, 3, wn));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dk_bias", &a->dk_bias, 1, 3, wn));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dmimo_v", &a->dmimo_v, 1, 3, wp));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dmimo_z", &a->dmimo_z, 1, 3, wp));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dmimo_o", &a->dmimo_o, 1, 3, wp));
    const int64_t wh[1] = {d->nheads};
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dd", &a->dd, 1, 1, wh));
    const int64_t ws[3] = {d->batch, d->nheads, d->seqlen};
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dadt", &a->dadt, 1, 3, ws));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "ddt", &a->ddt, 1, 3, ws));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dtrap", &a->dtrap, 1, 3, ws));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dangles", &a->dangles, 1, 4, a->angles.shape));
    /* doutproj_norm_weight: the weight's own shape when given, else (H, P) */
    const int64_t whp[2] = {d->nheads, d->headdim};
    const ssm_tensor * w = &a->outproj_norm_weight;
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "doutproj_norm_weight", &a->doutproj_norm_weight, 1,
                                   ssmi_present(w) ? w->ndim : 2, ssmi_present(w) ? w->shape : whp));
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_dstate_names, &a->dangle_state, &a->dssm_state,
                                                  &a->dk_state, &a->dv_state, 1, 1, &sh));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dz", &a->dz, "z", ssmi_present(&a->z)));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dmimo_z", &a->dmimo_z, "z", ssmi_present(&a->z)));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dmimo_o", &a->dmimo_o, "mimo_o", d->reduce_o));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dd", &a->dd, "d", ssmi_present(&a->d)));
    SSM_RETURN_IF(ssmi_present(&a->doutproj_norm_weight) && !p->fuse_pregate_norm, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: doutproj_norm_weight was given but params->fuse_pregate_norm is 0 (it exists only with the "
                  "fused norm)",
                  op);
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dangle_state", &a->dangle_state, "angle_state", d->has_states));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dssm_state", &a->dssm_state, "ssm_state", d->has_states));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dk_state", &a->dk_state, "k_state", d->has_states));
    SSM_FORWARD_IF_ERROR(check_needs(ctx, op, "dv_state", &a->dv_state, "v_state", d->has_states));
    const ssmi_named ins[] = {MIMO_FORWARD_INS(a),
                              {"dout", &a->dout},
                              {"dfinal_angle_state", &a->dfinal_angle_state},
                              {"dfinal_ssm_state", &a->dfinal_ssm_state},
                              {"dfinal_k_state", &a->dfinal_k_state},
                              {"dfinal_v_state", &a->dfinal_v_state}};
    const ssmi_named outs[] = {{"dq", &a->dq},
                               {"dk", &a->dk},
                               {"dv", &a->dv},
                               {"dz", &a->dz},
                               {"dq_bias", &a->dq_bias},
                               {"dk_bias", &a->dk_bias},
                               {"dmimo_v", &a->dmimo_v},
                               {"dmimo_z", &a->dmimo_z},
                               {"dmimo_o", &a->dmimo_o},
                               {"dd", &a->dd},
                               {"dadt", &a->dadt},
                               {"ddt", &a->ddt},
                               {"dtrap", &a->dtrap},
                               {"dangles", &a->dangles},
                               {"doutproj_norm_weight", &a->doutproj_norm_weight},
                               {"dangle_state", &a->dangle_state},
                               {"dssm_state", &a->dssm_state},
                               {"dk_state", &a->dk_state},
                               {"dv_state", &a->dv_state}};
    return ssmi_check_disjoint(ctx, op, outs, 19, ins, 25);
}

ssm_status ssm_mamba3_mimo_bwd(ssm_context * ctx, const ssm_mamba3_mimo_params * params,
                               const ssm_mamba3_mimo_bwd_args * args) {
    static const char op[] = "mamba3_mimo_bwd";
    ssmi_clear_error(ctx);
    ssmi_mimo_dims    d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(validate_bwd(ctx, params, args, &d));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, op, &be));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba3_mimo_bwd(ctx, params, &d, args)
                                  : ssmi_cpu_mamba3_mimo_bwd(ctx, params, &d, args);
}

/* ---- step ---------------------------------------------------------------------------- */

/* Outputs vs inputs and outputs vs outputs, except final_X exactly the same view as its
 * input state X (the in-place pool update). */
static ssm_status check_step_overlaps(ssm_context * ctx, const char * op, const ssm_mamba3_mimo_step_args * a) {
    const ssmi_named ins[] = {{"q", &a->q},
                              {"k", &a->k},
                              {"v", &a->v},
                              {"z", &a->z},
                              {"adt", &a->adt},
                              {"dt", &a->dt},
                              {"trap", &a->trap},
                              {"angles", &a->angles},
                              {"q_bias", &a->q_bias},
                              {"k_bias", &a->k_bias},
                              {"mimo_v", &a->mimo_v},
                              {"mimo_z", &a->mimo_z},
                              {"mimo_o", &a->mimo_o},
                              {"d", &a->d},
                              {"outproj_norm_weight", &a->outproj_norm_weight},
                              {"state_batch_indices", &a->state_batch_indices},
                              {"angle_state", &a->angle_state},
                              {"ssm_state", &a->ssm_state},
                              {"k_state", &a->k_state},
                              {"v_state", &a->v_state}};
    const ssmi_named outs[] = {{"out", &a->out},
                               {"final_angle_state", &a->final_angle_state},
                               {"final_ssm_state", &a->final_ssm_state},
                               {"final_k_state", &a->final_k_state},
                               {"final_v_state", &a->final_v_state}};
    enum { NIN = 20, NOUT = 5, FIRST_STATE_IN = 16 };
    /* final state o (1..4) may be exactly its own input state (FIRST_STATE_IN + o - 1) */
    const int in_place[NOUT] = {-1, FIRST_STATE_IN, FIRST_STATE_IN + 1, FIRST_STATE_IN + 2, FIRST_STATE_IN + 3};
    return ssmi_check_disjoint_in_place(ctx, op, outs, NOUT, ins, NIN, in_place);
}

static ssm_status validate_step(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                const ssm_mamba3_mimo_step_args * a, ssmi_mimo_dims * d) {
    static const char    op[] = "mamba3_mimo_step";
    static const int64_t any3[3] = {-1, -1, -1};
    SSM_FORWARD_IF_ERROR(check_params(ctx, op, p, a));
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(take_qkv_dims(ctx, op, p, &a->q, &a->k, &a->v, 0, d));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "z", &a->z, 1, 3, a->v.shape));
    const int64_t wbh[2] = {d->batch, d->nheads};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "adt", &a->adt, 0, 2, wbh));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "dt", &a->dt, 0, 2, wbh));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "trap", &a->trap, 0, 2, wbh));
    const int64_t wang[3] = {d->batch, d->nheads, d->nangles};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "angles", &a->angles, 0, 3, wang));
    SSM_FORWARD_IF_ERROR(
        check_head_params(ctx, op, &a->q_bias, &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o, &a->d, d));
    SSM_FORWARD_IF_ERROR(check_z_pair(ctx, op, &a->z, &a->mimo_z));
    SSM_FORWARD_IF_ERROR(check_fused(ctx, op, p, &a->z, &a->mimo_o, &a->outproj_norm_weight, d));
    /* The four states are required; angle_state gives the number of slots. */
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "angle_state", &a->angle_state, 0, 3, any3));
    d->nseq = a->angle_state.shape[0];
    const ssmi_mamba3_state_shapes sh = state_shapes(d, d->nseq);
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_state_names, &a->angle_state, &a->ssm_state,
                                                  &a->k_state, &a->v_state, 0, 0, &sh));
    d->has_states = 1;
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_state_indices(ctx, op, &a->state_batch_indices, d->batch, d->nseq));
    SSM_FORWARD_IF_ERROR(check_out_like(ctx, op, "out", &a->out, 1, 0, d));
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_final_names, &a->final_angle_state,
                                                  &a->final_ssm_state, &a->final_k_state, &a->final_v_state, 1, 1,
                                                  &sh));
    return check_step_overlaps(ctx, op, a);
}

#ifdef SSMOPS_HAVE_CUDA
/* The step on CUDA; state_batch_indices may live on either side (a device one is copied to
 * the host for validation: a synchronisation, so pass it in host memory for the fastest
 * decode). Separate final pools get their unused slots copied on the device afterwards. */
static ssm_status step_cuda(ssm_context * ctx, const ssm_mamba3_mimo_params * params,
                            const ssm_mamba3_mimo_step_args * args) {
    static const char op[] = "mamba3_mimo_step";
    ssmi_mimo_dims    d;
    if (params == NULL || args == NULL) return validate_step(ctx, params, args, &d);
    ssm_mamba3_mimo_step_args h = *args;
    ssm_tensor * const fl[] = {&h.q,         &h.k,           &h.v,           &h.z,           &h.adt,
                               &h.dt,        &h.trap,        &h.angles,      &h.q_bias,      &h.k_bias,
                               &h.mimo_v,    &h.mimo_z,      &h.mimo_o,      &h.d,           &h.outproj_norm_weight,
                               &h.angle_state, &h.ssm_state, &h.k_state,     &h.v_state,     &h.out,
                               &h.final_angle_state, &h.final_ssm_state, &h.final_k_state, &h.final_v_state};
    const char * const names[] = {"q",          "k",           "v",           "z",          "adt",
                                  "dt",         "trap",        "angles",      "q_bias",     "k_bias",
                                  "mimo_v",     "mimo_z",      "mimo_o",      "d",          "outproj_norm_weight",
                                  "angle_state", "ssm_state",  "k_state",     "v_state",    "out",
                                  "final_angle_state", "final_ssm_state", "final_k_state", "final_v_state"};
    SSM_FORWARD_IF_ERROR(ssmi_cuda_retype(ctx, op, fl, names, 24));
    void * buf = NULL;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_host_index(ctx, op, &args->state_batch_indices, &h.state_batch_indices, &buf));
    ssm_status st = validate_step(ctx, params, &h, &d);
    if (st == SSM_STATUS_OK) st = ssmi_cuda_mamba3_mimo_step(ctx, params, &d, &h);
    const ssm_tensor * const ins[4] = {&h.angle_state, &h.ssm_state, &h.k_state, &h.v_state};
    const ssm_tensor * const outs[4] = {&h.final_angle_state, &h.final_ssm_state, &h.final_k_state,
                                        &h.final_v_state};
    if (st == SSM_STATUS_OK)
        st = ssmi_mamba3_copy_unused_pools(ctx, op, SSMI_BACKEND_CUDA, ins, outs, &h.state_batch_indices, d.batch);
    ssmi_free(ctx, buf);
    return st;
}
#endif

ssm_status ssm_mamba3_mimo_step(ssm_context * ctx, const ssm_mamba3_mimo_params * params,
                                const ssm_mamba3_mimo_step_args * args) {
    static const char op[] = "mamba3_mimo_step";
    ssmi_clear_error(ctx);
    ssmi_mimo_dims    d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend_cuda(ctx, op, args != NULL ? &args->v : NULL, &be));
#ifdef SSMOPS_HAVE_CUDA
    if (be == SSMI_BACKEND_CUDA) return step_cuda(ctx, params, args);
#endif
    SSM_FORWARD_IF_ERROR(validate_step(ctx, params, args, &d));
    SSM_FORWARD_IF_ERROR(be == SSMI_BACKEND_REF ? ssmi_ref_mamba3_mimo_step(ctx, params, &d, args)
                                                : ssmi_cpu_mamba3_mimo_step(ctx, params, &d, args));
    /* Separate final_* pools hold the whole pool after the step (see core/pool.c). */
    const ssm_tensor * const ins[4] = {&args->angle_state, &args->ssm_state, &args->k_state, &args->v_state};
    const ssm_tensor * const outs[4] = {&args->final_angle_state, &args->final_ssm_state, &args->final_k_state,
                                        &args->final_v_state};
    return ssmi_mamba3_copy_unused_pools(ctx, op, be, ins, outs, &args->state_batch_indices, d.batch);
}
