/* ops_common.c — the validation helpers the operator families of src/ops/ share (see
 * ops_common.h). They run after the schema's rules (dispatch.c): every tensor they look at
 * is present where required, on the right device, of an allowed rank and dtype class. */
#include "ops_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ssmi_same_addresses(const ssm_tensor * a, const ssm_tensor * b) {
    if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int32_t i = 0; i < a->ndim; ++i)
        if (a->shape[i] != b->shape[i] || (a->shape[i] > 1 && a->strides[i] != b->strides[i])) return 0;
    return 1;
}

void ssmi_take_dims(const ssm_tensor * t, int64_t * const * dims, int n) {
    for (int i = 0; i < n && i < t->ndim; ++i)
        if (dims[i] != NULL) *dims[i] = t->shape[i];
}

ssm_status ssmi_check_gradient_shapes(ssm_context * ctx, const char * op, ssmi_op id, const void * args) {
    const ssm_op_info * info = ssmi_op_info(id);
    for (int32_t i = 0; i < info->nargs; ++i) {
        const ssm_arg_info * g = &info->args[i];
        const ssm_arg_info * x = g->name[0] == 'd' ? ssmi_op_arg(id, g->name + 1) : NULL;
        if (!(g->role & SSM_ARG_ROLE_OUTPUT) || x == NULL || (x->role & SSM_ARG_ROLE_OUTPUT)) continue;
        const ssm_tensor * gt = ssmi_arg_tensor(args, g);
        const ssm_tensor * xt = ssmi_arg_tensor(args, x);
        if (!ssmi_present(gt) || !ssmi_present(xt)) continue;
        SSM_RETURN_IF(gt->ndim != xt->ndim, ctx, SSM_STATUS_INVALID_SHAPE,
                      "%s: %s has %d dims but %s has %d; a gradient has the shape of its tensor", op, g->name,
                      (int)gt->ndim, x->name, (int)xt->ndim);
        SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, g->name, gt, xt->shape));
    }
    return SSM_STATUS_OK;
}

static int cmp_i64(const void * a, const void * b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The non-negative values of idx (batch of them) into used[], sorted; the first value not
 * below `slots` is an error naming `pool` (the tensor whose shape[0] is the slot count). */
static ssm_status collect_slots(ssm_context * ctx, const char * op, const ssm_tensor * idx, int64_t batch,
                                int64_t slots, const char * pool, int64_t * used, int64_t * nused) {
    *nused = 0;
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t v = ssmi_get_i64(idx, ssmi_off1(idx, b));
        SSM_RETURN_IF(v >= slots, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: state_batch_indices[%lld]=%lld is not below %s.shape[0]=%lld (slots)", op, (long long)b,
                      (long long)v, pool, (long long)slots);
        if (v >= 0) used[(*nused)++] = v;
    }
    qsort(used, (size_t)*nused, sizeof(int64_t), cmp_i64);
    for (int64_t i = 1; i < *nused; ++i)
        SSM_RETURN_IF(used[i] == used[i - 1], ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: state_batch_indices uses slot %lld for two rows; each slot may be updated by one row only",
                      op, (long long)used[i]);
    return SSM_STATUS_OK;
}

ssm_status ssmi_check_slot_indices(ssm_context * ctx, const char * op, const ssm_tensor * idx, int64_t batch,
                                   int64_t slots, const char * pool) {
    if (!ssmi_present(idx) || batch == 0) return SSM_STATUS_OK;
    if (idx->strides[0] == 0 && batch > 1) {
        /* Broadcast: every row holds idx[0], so a slot would serve all rows; all padding is
         * valid. Checked in constant time, whatever the batch. */
        const int64_t v = ssmi_get_i64(idx, 0);
        SSM_RETURN_IF(v >= slots, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: state_batch_indices[0]=%lld is not below %s.shape[0]=%lld (slots)", op, (long long)v, pool,
                      (long long)slots);
        SSM_RETURN_IF(v >= 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: state_batch_indices (stride 0) uses slot %lld for all %lld rows; each slot may be updated "
                      "by one row only",
                      op, (long long)v, (long long)batch);
        return SSM_STATUS_OK;
    }
    int64_t * used = (int64_t *)ssmi_alloc(ctx, (size_t)batch * sizeof(int64_t));
    SSM_RETURN_IF(used == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "%s: could not allocate %zu bytes to check state_batch_indices", op, (size_t)batch * sizeof(int64_t));
    int64_t          nused = 0;
    const ssm_status st = collect_slots(ctx, op, idx, batch, slots, pool, used, &nused);
    ssmi_free(ctx, used);
    return st;
}

ssm_status ssmi_mamba3_check_state_indices(ssm_context * ctx, const char * op, const ssm_tensor * idx, int64_t batch,
                                           int64_t nslots) {
    const int64_t wb[1] = {batch};
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "state_batch_indices", idx, wb));
    if (!ssmi_present(idx)) {
        SSM_RETURN_IF(nslots != batch, ctx, SSM_STATUS_INVALID_SHAPE,
                      "%s: angle_state.shape[0]=%lld (slots) must equal q.shape[0]=%lld (B) without "
                      "state_batch_indices",
                      op, (long long)nslots, (long long)batch);
        return SSM_STATUS_OK;
    }
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t s = ssmi_get_i64(idx, ssmi_off1(idx, b));
        SSM_RETURN_IF(s >= nslots, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: state_batch_indices[%lld]=%lld is not below the %lld state slots", op, (long long)b,
                      (long long)s, (long long)nslots);
        if (s < 0) continue;
        for (int64_t c = 0; c < b; ++c) {
            const int64_t o = ssmi_get_i64(idx, ssmi_off1(idx, c));
            SSM_RETURN_IF(o == s, ctx, SSM_STATUS_INVALID_ARGUMENT,
                          "%s: state_batch_indices[%lld] and [%lld] are both %lld; two rows may not share a state slot",
                          op, (long long)c, (long long)b, (long long)s);
        }
    }
    return SSM_STATUS_OK;
}

ssm_status ssmi_check_cu_seqlens(ssm_context * ctx, const char * op, const ssm_tensor * cu, const char * batch_name,
                                 int64_t batch, int64_t seqlen, int64_t * nseq) {
    *nseq = 0;
    if (!ssmi_present(cu)) return SSM_STATUS_OK;
    const int64_t len = cu->shape[0];
    SSM_RETURN_IF(len < 2, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: cu_seqlens.shape[0]=%lld must be at least 2 (nseq + 1 with nseq >= 1)", op, (long long)len);
    SSM_RETURN_IF(batch != 1, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: %s.shape[0]=%lld must be 1 when cu_seqlens is given",
                  op, batch_name, (long long)batch);
    const int64_t first = ssmi_get_i64(cu, 0);
    SSM_RETURN_IF(first != 0, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: cu_seqlens[0]=%lld must be 0", op,
                  (long long)first);
    int64_t prev = first;
    /* Broadcast (stride 0): every entry is cu[0] = 0, so all sequences are empty; checked in
     * constant time, whatever the length. */
    for (int64_t s = 1; s < (cu->strides[0] == 0 ? 1 : len); ++s) {
        const int64_t v = ssmi_get_i64(cu, ssmi_off1(cu, s));
        SSM_RETURN_IF(v < prev, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: cu_seqlens[%lld]=%lld is smaller than cu_seqlens[%lld]=%lld; it must be non-decreasing", op,
                      (long long)s, (long long)v, (long long)(s - 1), (long long)prev);
        prev = v;
    }
    SSM_RETURN_IF(prev != seqlen, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: cu_seqlens[%lld]=%lld must equal S=%lld", op,
                  (long long)(len - 1), (long long)prev, (long long)seqlen);
    *nseq = len - 1;
    return SSM_STATUS_OK;
}

ssm_status ssmi_check_inner_dim(ssm_context * ctx, const char * op, const char * what, int64_t dim) {
    SSM_RETURN_IF(dim > SSMI_MAX_INNER_DIM, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: %s=%lld exceeds the limit of 2^24 (docs/ops/limits.md)", op, what, (long long)dim);
    return SSM_STATUS_OK;
}

ssm_status ssmi_check_head_state(ssm_context * ctx, const char * op, const char * rows_what, int64_t rows,
                                 const char * cols_what, int64_t cols, const char * product) {
    SSM_FORWARD_IF_ERROR(ssmi_check_inner_dim(ctx, op, rows_what, rows));
    SSM_FORWARD_IF_ERROR(ssmi_check_inner_dim(ctx, op, cols_what, cols));
    SSM_RETURN_IF(rows * cols > SSMI_MAX_HEAD_STATE, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: %s=%lld (a head's state) exceeds the limit of 2^31 elements (docs/ops/limits.md)", op, product,
                  (long long)(rows * cols));
    return SSM_STATUS_OK;
}

/* ---- Mamba-2 ---------------------------------------------------------------------------- */

#define SSMI_M2_MAX_CHUNK 1024

/* The params rules of every Mamba-2 operator; chunk_size only where there are chunks. */
static ssm_status m2_check_params(ssm_context * ctx, const char * op, const ssm_mamba2_params * p, int chunked) {
    SSM_RETURN_IF(chunked && (p->chunk_size < 1 || p->chunk_size > SSMI_M2_MAX_CHUNK), ctx,
                  SSM_STATUS_INVALID_ARGUMENT, "%s: params->chunk_size=%lld is outside [1, %d]", op,
                  (long long)p->chunk_size, SSMI_M2_MAX_CHUNK);
    SSM_RETURN_IF(isnan(p->dt_limit_lo) || isnan(p->dt_limit_hi), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->dt_limit (%g, %g) contains NaN", op, (double)p->dt_limit_lo, (double)p->dt_limit_hi);
    SSM_RETURN_IF(p->dt_limit_lo > p->dt_limit_hi, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: params->dt_limit_lo=%g is greater than dt_limit_hi=%g", op, (double)p->dt_limit_lo,
                  (double)p->dt_limit_hi);
    return SSM_STATUS_OK;
}

ssm_status ssmi_mamba2_check_params(ssm_context * ctx, const char * op, const void * params) {
    return m2_check_params(ctx, op, params, 1);
}

ssm_status ssmi_mamba2_check_step_params(ssm_context * ctx, const char * op, const void * params) {
    return m2_check_params(ctx, op, params, 0);
}


/* A (batch, S, G, N) tensor named `name` that defines G and N; H % G must be 0. */
static ssm_status m2_take_group_dims(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t,
                                     ssmi_mamba2_dims * d) {
    const int64_t want[4] = {d->batch, d->seqlen, -1, -1};
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, name, t, want));
    d->ngroups = t->shape[2];
    d->dstate = t->shape[3];
    SSM_RETURN_IF(d->ngroups < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: %s.shape[2]=%lld (ngroups) must be at least 1",
                  op, name, (long long)d->ngroups);
    SSM_RETURN_IF(d->nheads % d->ngroups != 0, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: x.shape[2]=%lld is not a multiple of %s.shape[2]=%lld", op, (long long)d->nheads, name,
                  (long long)d->ngroups);
    return SSM_STATUS_OK;
}

ssm_status ssmi_mamba2_check_xbcz(ssm_context * ctx, const char * op, const ssm_tensor * x, const ssm_tensor * b,
                                  const ssm_tensor * c, const ssm_tensor * z, ssmi_mamba2_dims * d) {
    SSMI_TAKE_DIMS(x, &d->batch, &d->seqlen, &d->nheads, &d->headdim); /* x (batch, S, H, P) */
    if (b != NULL) {
        SSM_FORWARD_IF_ERROR(m2_take_group_dims(ctx, op, "b", b, d));
        if (c != NULL) {
            const int64_t wc[4] = {d->batch, d->seqlen, d->ngroups, d->dstate};
            SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "c", c, wc));
        }
    } else if (c != NULL) {
        SSM_FORWARD_IF_ERROR(m2_take_group_dims(ctx, op, "c", c, d));
    }
    if (z != NULL) {
        const int64_t wz[4] = {d->batch, d->seqlen, d->nheads, d->headdim};
        SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "z", z, wz));
    }
    return ssmi_check_head_state(ctx, op, "x.shape[3] (P)", d->headdim, b != NULL ? "b.shape[3] (N)" : "c.shape[3] (N)",
                                 d->dstate, "P·N");
}

ssm_status ssmi_mamba2_check_d(ssm_context * ctx, const char * op, const ssm_tensor * dten,
                               const ssmi_mamba2_dims * d) {
    const int64_t want[2] = {d->nheads, d->headdim}; /* (H) or (H, P): the schema allows both ranks */
    return ssmi_check_shape(ctx, op, "d", dten, want);
}

ssm_status ssmi_mamba2_check_seq_idx(ssm_context * ctx, const char * op, const ssm_tensor * s,
                                     const ssmi_mamba2_dims * d) {
    const int64_t want[2] = {d->batch, d->seqlen};
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "seq_idx", s, want));
    if (!ssmi_present(s)) return SSM_STATUS_OK;
    /* A stride-0 dim repeats its first entry: one row (or one token) stands for all of them,
     * so a broadcast view of a huge batch or sequence is checked in constant time. */
    const int64_t rows = s->strides[0] == 0 ? (d->batch > 0 ? 1 : 0) : d->batch;
    const int64_t toks = s->strides[1] == 0 ? (d->seqlen > 0 ? 1 : 0) : d->seqlen;
    for (int64_t b = 0; b < rows; ++b) {
        int64_t prev = 0;
        for (int64_t t = 0; t < toks; ++t) {
            const int64_t v = ssmi_get_i64(s, ssmi_off2(s, b, t));
            SSM_RETURN_IF(v < 0, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: seq_idx[%lld,%lld]=%lld is negative", op,
                          (long long)b, (long long)t, (long long)v);
            SSM_RETURN_IF(t > 0 && v < prev, ctx, SSM_STATUS_INVALID_ARGUMENT,
                          "%s: seq_idx[%lld,%lld]=%lld is smaller than seq_idx[%lld,%lld]=%lld; ids must be "
                          "non-decreasing along S",
                          op, (long long)b, (long long)t, (long long)v, (long long)b, (long long)(t - 1),
                          (long long)prev);
            prev = v;
        }
    }
    return SSM_STATUS_OK;
}

ssm_status ssmi_mamba2_check_scan_inputs(ssm_context * ctx, const char * op, const ssm_mamba2_params * p,
                                         const ssm_mamba2_scan_args * a, ssmi_mamba2_dims * d) {
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_xbcz(ctx, op, &a->x, &a->b, &a->c, &a->z, d));
    d->chunk = p->chunk_size;
    d->nchunks = d->seqlen / d->chunk + (d->seqlen % d->chunk != 0); /* ceil; S may be INT64_MAX */
    SSMI_SHAPE(dt, d->batch, d->seqlen, d->nheads);
    SSMI_SHAPE(a, d->nheads);
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_d(ctx, op, &a->d, d));
    SSMI_SHAPE(dt_bias, d->nheads);
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_seq_idx(ctx, op, &a->seq_idx, d));
    /* cu_seqlens: "not with seq_idx" first (whatever cu_seqlens looks like), then its own rules. */
    SSM_RETURN_IF(ssmi_present(&a->cu_seqlens) && ssmi_present(&a->seq_idx), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: cu_seqlens and seq_idx were both given; pass only one of them", op);
    SSM_FORWARD_IF_ERROR(ssmi_check_cu_seqlens(ctx, op, &a->cu_seqlens, "x", d->batch, d->seqlen, &d->nseq));
    /* States are per sequence with cu_seqlens, per batch row otherwise. */
    SSMI_SHAPE(initial_states, d->nseq > 0 ? d->nseq : d->batch, d->nheads, d->headdim, d->dstate);
    return SSM_STATUS_OK;
}

/* ---- Mamba-3 (SISO and MIMO) ------------------------------------------------------------ */

const char * const ssmi_mamba3_state_names[4] = {"angle_state", "ssm_state", "k_state", "v_state"};
const char * const ssmi_mamba3_final_names[4] = {"final_angle_state", "final_ssm_state", "final_k_state",
                                                 "final_v_state"};
const char * const ssmi_mamba3_dfinal_names[4] = {"dfinal_angle_state", "dfinal_ssm_state", "dfinal_k_state",
                                                  "dfinal_v_state"};

ssm_status ssmi_mamba3_check_states(ssm_context * ctx, const char * op, const char * const names[4],
                                    const ssm_tensor * angle, const ssm_tensor * ssm, const ssm_tensor * k,
                                    const ssm_tensor * v, const ssmi_mamba3_state_shapes * sh) {
    if (angle != NULL) SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, names[0], angle, sh->angle));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, names[1], ssm, sh->ssm));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, names[2], k, sh->k));
    return ssmi_check_shape(ctx, op, names[3], v, sh->v);
}

ssm_status ssmi_mamba3_check_initial_states(ssm_context * ctx, const char * op, const ssm_tensor * angle,
                                            const ssm_tensor * ssm, const ssm_tensor * k, const ssm_tensor * v,
                                            const ssmi_mamba3_state_shapes * sh, int32_t * has_states) {
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_state_names, angle, ssm, k, v, sh));
    const int n = (angle != NULL ? ssmi_present(angle) : 0) + ssmi_present(ssm) + ssmi_present(k) + ssmi_present(v);
    const int total = angle != NULL ? 4 : 3;
    SSM_RETURN_IF(n != 0 && n != total, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: %d of the %d initial states were given (%s); pass all of them or none", op, n, total,
                  angle != NULL ? "angle_state, ssm_state, k_state, v_state" : "ssm_state, k_state, v_state");
    *has_states = n == total;
    return SSM_STATUS_OK;
}

ssm_status ssmi_mamba3_check_heads(ssm_context * ctx, const char * op, int64_t groups, int gdim, const char * gsym,
                                   int64_t heads, int hdim) {
    SSM_RETURN_IF(groups < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: q.shape[%d]=%lld (%s) must be at least 1", op, gdim,
                  (long long)groups, gsym);
    SSM_RETURN_IF(heads < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: v.shape[%d]=%lld (H) must be at least 1", op, hdim,
                  (long long)heads);
    SSM_RETURN_IF(heads % groups != 0, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: v.shape[%d]=%lld (H) is not a multiple of q.shape[%d]=%lld (%s)", op, hdim, (long long)heads,
                  gdim, (long long)groups, gsym);
    return SSM_STATUS_OK;
}

ssm_status ssmi_mamba3_check_pools(ssm_context * ctx, const char * op, const ssm_tensor * angle, const ssm_tensor * ssm,
                                   const ssm_tensor * k, const ssm_tensor * v, const ssm_tensor * idx, int64_t batch,
                                   const ssmi_mamba3_state_shapes * sh) {
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_state_names, angle, ssm, k, v, sh));
    return ssmi_mamba3_check_state_indices(ctx, op, idx, batch, angle->shape[0]);
}

ssm_status ssmi_mamba3_take_nseq(ssm_context * ctx, const char * op, const ssm_tensor * cu, const char * batch_name,
                                 int64_t batch, int64_t seqlen, int64_t * nseq, int32_t * varlen) {
    SSM_FORWARD_IF_ERROR(ssmi_check_cu_seqlens(ctx, op, cu, batch_name, batch, seqlen, nseq));
    *varlen = ssmi_present(cu);
    if (!*varlen) *nseq = batch;
    return SSM_STATUS_OK;
}

