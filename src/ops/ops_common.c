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

/* A write of one row: (slot, row), sorted by slot then row. */
typedef struct slot_row {
    int64_t slot, row;
} slot_row;

static int cmp_slot_row(const void * a, const void * b) {
    const slot_row * x = (const slot_row *)a, *y = (const slot_row *)b;
    if (x->slot != y->slot) return (x->slot > y->slot) - (x->slot < y->slot);
    return (x->row > y->row) - (x->row < y->row);
}

/* The row of `writes` (n sorted entries) that writes slot s, or -1. */
static int64_t writer_of(const slot_row * writes, int64_t n, int64_t s) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (writes[mid].slot < s) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && writes[lo].slot == s ? writes[lo].row : -1;
}

/* Records that row b writes slot w (w >= 0), after the range rule; a padding row may write
 * nothing. */
static ssm_status note_write(ssm_context * ctx, const char * op, const char * wname, int64_t b, int64_t j, int64_t r,
                             int64_t w, int64_t slots, const char * pool, slot_row * writes, int64_t * nw) {
    SSM_RETURN_IF(w >= slots, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: %s[%lld]%s=%lld is not below %s.shape[0]=%lld (slots)", op, wname, (long long)b,
                  j >= 0 ? " (a token's column)" : "", (long long)w, pool, (long long)slots);
    SSM_RETURN_IF(r < 0 && w >= 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: row %lld is padding (its read slot is %lld < 0) but %s gives it write slot %lld; a padding "
                  "row writes no slot",
                  op, (long long)b, (long long)r, wname, (long long)w);
    if (w >= 0) writes[(*nw)++] = (slot_row){w, b};
    return SSM_STATUS_OK;
}

/* The rules of ssmi_check_step_slots on host index views, with writes[] room for every
 * write (batch, or the tokens with a token table). read_known = 0: state_batch_indices is in
 * device memory and its values are not read here (a row's read slot, and the slots a row
 * writes through it, are the device's: out of range is padding there, and a repeat races);
 * every rule on the host tensors (num_accepted_tokens, dst_state_batch_indices, the token
 * counts of a table) still holds. */
static ssm_status step_slot_rules(ssm_context * ctx, const char * op, const ssmi_step_slots * s, int64_t batch,
                                  int64_t slots, const char * pool, int in_place, int read_known, slot_row * writes) {
    const ssm_tensor * table = ssmi_step_token_table(s);
    const char * wname = ssmi_present(s->write) ? "dst_state_batch_indices" : "state_batch_indices";
    const int    writes_known = read_known || ssmi_present(s->write); /* the written slots are host values */
    int64_t      nw = 0;
    for (int64_t b = 0; b < batch; ++b) {
        if (ssmi_present(s->accepted)) {
            const int64_t k = ssmi_get_i64(s->accepted, ssmi_off1(s->accepted, b));
            SSM_RETURN_IF(k < 0 || k > s->read->shape[1], ctx, SSM_STATUS_INVALID_ARGUMENT,
                          "%s: num_accepted_tokens[%lld]=%lld must be in [0, state_batch_indices.shape[1]=%lld]", op,
                          (long long)b, (long long)k, (long long)s->read->shape[1]);
        }
        /* an unknown read slot counts as a valid one: the host rules on the writes still apply */
        const int64_t r = read_known ? ssmi_step_read_slot(s, b) : 0;
        SSM_RETURN_IF(r >= slots, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: state_batch_indices[%lld]=%lld (row %lld's read slot) is not below %s.shape[0]=%lld (slots)",
                      op, (long long)b, (long long)r, (long long)b, pool, (long long)slots);
        if (table == NULL) {
            if (writes_known)
                SSM_FORWARD_IF_ERROR(
                    note_write(ctx, op, wname, b, -1, r, ssmi_step_write_slot(s, b), slots, pool, writes, &nw));
            continue;
        }
        int64_t t0, t1;
        ssmi_step_tokens(s, b, &t0, &t1);
        SSM_RETURN_IF(t1 - t0 > table->shape[1], ctx, SSM_STATUS_INVALID_SHAPE,
                      "%s: row %lld has %lld tokens but %s.shape[1]=%lld; the token table needs a column per token", op,
                      (long long)b, (long long)(t1 - t0), wname, (long long)table->shape[1]);
        for (int64_t j = 0; j < t1 - t0 && writes_known; ++j)
            SSM_FORWARD_IF_ERROR(
                note_write(ctx, op, wname, b, j, r, ssmi_step_token_slot(table, b, j), slots, pool, writes, &nw));
    }
    qsort(writes, (size_t)nw, sizeof *writes, cmp_slot_row);
    for (int64_t i = 1; i < nw; ++i)
        SSM_RETURN_IF(writes[i].slot == writes[i - 1].slot, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: %s writes slot %lld twice (rows %lld and %lld); two writes may not share a slot (they would "
                      "race)",
                      op, wname, (long long)writes[i].slot, (long long)writes[i - 1].row, (long long)writes[i].row);
    if (!in_place || !read_known) return SSM_STATUS_OK;
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t r = ssmi_step_read_slot(s, b);
        const int64_t c = r < 0 ? -1 : writer_of(writes, nw, r);
        SSM_RETURN_IF(c >= 0 && c != b, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: row %lld reads slot %lld, which row %lld writes in place; in an in-place pool a slot one row "
                      "writes may not be read by another (the result would depend on the order)",
                      op, (long long)b, (long long)r, (long long)c);
    }
    return SSM_STATUS_OK;
}

ssm_status ssmi_check_step_slots(ssm_context * ctx, const char * op, const ssmi_step_slots * s, int64_t batch,
                                 int64_t slots, const char * pool, int in_place, int has_final) {
    const ssm_tensor *read = s->read, *write = s->write;
    const int         varlen = s->cu != NULL && ssmi_present(s->cu);
    SSM_RETURN_IF(ssmi_present(write) && !ssmi_present(read), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: dst_state_batch_indices was given without state_batch_indices, which it needs", op);
    SSM_RETURN_IF(!varlen && ((ssmi_present(read) && read->ndim == 2) || (ssmi_present(write) && write->ndim == 2)),
                  ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: a 2-D state_batch_indices or dst_state_batch_indices (a slot per token) needs cu_seqlens", op);
    SSM_RETURN_IF(s->accepted != NULL && ssmi_present(s->accepted) && !(ssmi_present(read) && read->ndim == 2), ctx,
                  SSM_STATUS_INVALID_ARGUMENT,
                  "%s: num_accepted_tokens needs a 2-D state_batch_indices (B, L): it picks the column to read", op);
    SSM_RETURN_IF(ssmi_present(read) && read->ndim == 2 && read->shape[1] < 1, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: state_batch_indices.shape[1]=0; a 2-D table needs a column to read", op);
    SSM_RETURN_IF(ssmi_step_token_table(s) != NULL && has_final && !in_place, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: with a token table (2-D %s) the states after each token go to the pool itself; final_state "
                  "must be the state view (in place)",
                  op, ssmi_present(write) ? "dst_state_batch_indices" : "state_batch_indices");
    const int64_t wb[2] = {batch, -1};
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "state_batch_indices", read, wb));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "dst_state_batch_indices", write, wb));
    if (s->accepted != NULL) SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "num_accepted_tokens", s->accepted, wb));
    if (!ssmi_present(read) || batch == 0) return SSM_STATUS_OK;
    /* Read slots in device memory (the CUDA backend reads them there): their values are not
     * read on the host; an index outside [0, slots) makes its row padding, and two rows naming
     * one slot race (docs/ops/limits.md, "CUDA graphs"). The other index tensors are host
     * views, checked below. */
    const int read_known = read->device.type != SSM_DEVICE_CUDA;
    if (!read_known && !ssmi_present(write) && (s->accepted == NULL || !ssmi_present(s->accepted)) &&
        ssmi_step_token_table(s) == NULL)
        return SSM_STATUS_OK;
    if (read_known && read->ndim == 1 && read->strides[0] == 0 && batch > 1 && !ssmi_present(write) &&
        ssmi_step_token_table(s) == NULL) {
        /* Broadcast without write slots: every row reads and writes read[0], so a slot would
         * serve all rows; all padding is valid. Checked in constant time, whatever the batch. */
        const int64_t v = ssmi_get_i64(read, 0);
        SSM_RETURN_IF(v >= slots, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: state_batch_indices[0]=%lld is not below %s.shape[0]=%lld (slots)", op, (long long)v, pool,
                      (long long)slots);
        SSM_RETURN_IF(v >= 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: state_batch_indices (stride 0) uses slot %lld for all %lld rows; each slot may be updated "
                      "by one row only",
                      op, (long long)v, (long long)batch);
        return SSM_STATUS_OK;
    }
    const ssm_tensor * table = ssmi_step_token_table(s);
    int64_t            room = batch;
    if (table != NULL) room = batch * table->shape[1];
    slot_row * writes = (slot_row *)ssmi_alloc(ctx, (size_t)(room > 0 ? room : 1) * sizeof(slot_row));
    SSM_RETURN_IF(writes == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "%s: could not allocate %zu bytes to check state_batch_indices", op, (size_t)room * sizeof(slot_row));
    const ssm_status st = step_slot_rules(ctx, op, s, batch, slots, pool, in_place, read_known, writes);
    ssmi_free(ctx, writes);
    return st;
}

ssm_status ssmi_check_slot_indices(ssm_context * ctx, const char * op, const ssm_tensor * idx, int64_t batch,
                                   int64_t slots, const char * pool) {
    const ssmi_step_slots s = {idx, NULL, NULL, NULL};
    return ssmi_check_step_slots(ctx, op, &s, batch, slots, pool, 0, 0);
}

int ssmi_any_in_place(const ssm_tensor * const * in, const ssm_tensor * const * fin, int n) {
    for (int i = 0; i < n; ++i)
        if (ssmi_present(fin[i]) && ssmi_same_addresses(fin[i], in[i])) return 1;
    return 0;
}

int ssmi_all_in_place(const ssm_tensor * const * in, const ssm_tensor * const * fin, int n) {
    int any = 0;
    for (int i = 0; i < n; ++i) {
        if (!ssmi_present(fin[i])) continue;
        if (!ssmi_same_addresses(fin[i], in[i])) return 0;
        any = 1;
    }
    return any;
}

ssm_status ssmi_mamba3_check_state_indices(ssm_context * ctx, const char * op, const ssmi_step_slots * s, int64_t batch,
                                           int64_t nslots, int in_place, int has_final) {
    if (!ssmi_present(s->read) && !ssmi_present(s->write)) {
        SSM_RETURN_IF(nslots != batch, ctx, SSM_STATUS_INVALID_SHAPE,
                      "%s: angle_state.shape[0]=%lld (slots) must equal the %lld rows without "
                      "state_batch_indices",
                      op, (long long)nslots, (long long)batch);
    }
    return ssmi_check_step_slots(ctx, op, s, batch, nslots, "angle_state", in_place, has_final);
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
const char * const ssmi_mamba3_intermediate_names[4] = {"intermediate_angle_state", "intermediate_ssm_state",
                                                       "intermediate_k_state", "intermediate_v_state"};
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
                                   const ssm_tensor * k, const ssm_tensor * v, const ssmi_step_slots * slots,
                                   int64_t batch, const ssmi_mamba3_state_shapes * sh, int in_place, int has_final) {
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_state_names, angle, ssm, k, v, sh));
    return ssmi_mamba3_check_state_indices(ctx, op, slots, batch, angle->shape[0], in_place, has_final);
}

ssm_status ssmi_mamba3_check_step_states(ssm_context * ctx, const char * op, const ssm_tensor * const in[4],
                                         const ssm_tensor * const fin[4], const ssm_tensor * const inter[4],
                                         const ssmi_step_slots * slots, int64_t rows,
                                         const ssmi_mamba3_state_shapes * sh, const ssmi_mamba3_state_shapes * inter_sh) {
    SSM_FORWARD_IF_ERROR(ssmi_mamba3_check_states(ctx, op, ssmi_mamba3_intermediate_names, inter[0], inter[1], inter[2],
                                                  inter[3], inter_sh));
    const int in_place =
        ssmi_step_token_table(slots) != NULL ? ssmi_all_in_place(in, fin, 4) : ssmi_any_in_place(in, fin, 4);
    const int has_final = ssmi_present(fin[0]) || ssmi_present(fin[1]) || ssmi_present(fin[2]) || ssmi_present(fin[3]);
    return ssmi_mamba3_check_pools(ctx, op, in[0], in[1], in[2], in[3], slots, rows, sh, in_place, has_final);
}

ssm_status ssmi_mamba3_take_nseq(ssm_context * ctx, const char * op, const ssm_tensor * cu, const char * batch_name,
                                 int64_t batch, int64_t seqlen, int64_t * nseq, int32_t * varlen) {
    SSM_FORWARD_IF_ERROR(ssmi_check_cu_seqlens(ctx, op, cu, batch_name, batch, seqlen, nseq));
    *varlen = ssmi_present(cu);
    if (!*varlen) *nseq = batch;
    return SSM_STATUS_OK;
}

ssm_status ssmi_check_saved_dtype(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t) {
    SSM_RETURN_IF(ssmi_present(t) && t->dtype != SSM_DTYPE_F32 && t->dtype != SSM_DTYPE_F64, ctx,
                  SSM_STATUS_INVALID_LAYOUT,
                  "%s: %s has dtype %s; it must be F32 or F64 (the unrounded values the backward reads)", op, name,
                  ssm_dtype_name((ssm_dtype)t->dtype));
    return SSM_STATUS_OK;
}

int64_t ssmi_saved_chunk_rows(const ssm_tensor * cu, int32_t varlen, int64_t nseq, int64_t batch, int64_t seqlen,
                              int64_t chunk) {
    if (!varlen) return batch * (seqlen / chunk + (seqlen % chunk != 0));
    int64_t rows = 0;
    for (int64_t i = 0; i < nseq; ++i) {
        const int64_t len = ssmi_get_i64(cu, ssmi_off1(cu, i + 1)) - ssmi_get_i64(cu, ssmi_off1(cu, i));
        rows += len / chunk + (len % chunk != 0);
    }
    return rows;
}
