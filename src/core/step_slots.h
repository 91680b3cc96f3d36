/*
 * step_slots.h — where a decode step's rows read and write their states (docs/ops/mamba2.md
 * "Decode slots"), shared by the validators (ops/) and the backends (ref/, cpu/).
 *
 * Row b has the tokens [cu[b], cu[b+1]) with cu_seqlens, else the one token b. It reads
 * slot read[b] (1-D state_batch_indices), read[b, max(k_b−1, 0)] (2-D, k_b =
 * num_accepted_tokens[b], 0 without it), or b (no indices); a negative read slot makes the
 * row padding. It writes either through a token table (dst_state_batch_indices when 2-D,
 * else state_batch_indices when 2-D and no dst is given): the state after its token j to
 * slot table[b, j]; or once: the state after all its tokens (its initial state for a row of
 * no token) to dst[b], else read[b], else b. A negative write slot writes nothing. Every
 * value here was checked by ssmi_check_step_slots before a backend runs.
 */
#ifndef SSMI_STEP_SLOTS_H
#define SSMI_STEP_SLOTS_H

#include "ssmi.h"

/* The index tensors of a decode step (any may be absent). */
typedef struct ssmi_step_slots {
    const ssm_tensor * read;     /* state_batch_indices (B) or (B, L)                     */
    const ssm_tensor * write;    /* dst_state_batch_indices (B) or (B, L)                 */
    const ssm_tensor * cu;       /* cu_seqlens (B+1)                                      */
    const ssm_tensor * accepted; /* num_accepted_tokens (B)                               */
} ssmi_step_slots;

/* The tokens of row b: [*t0, *t1). */
static inline void ssmi_step_tokens(const ssmi_step_slots * s, int64_t b, int64_t * t0, int64_t * t1) {
    if (s->cu != NULL && ssmi_present(s->cu)) {
        *t0 = ssmi_get_i64(s->cu, ssmi_off1(s->cu, b));
        *t1 = ssmi_get_i64(s->cu, ssmi_off1(s->cu, b + 1));
    } else {
        *t0 = b;
        *t1 = b + 1;
    }
}

/* The column of a 2-D read table that row b reads: max(k_b − 1, 0). */
static inline int64_t ssmi_step_read_column(const ssmi_step_slots * s, int64_t b) {
    if (s->accepted == NULL || !ssmi_present(s->accepted)) return 0;
    const int64_t k = ssmi_get_i64(s->accepted, ssmi_off1(s->accepted, b));
    return k > 0 ? k - 1 : 0;
}

/* The slot row b reads (negative: a padding row). */
static inline int64_t ssmi_step_read_slot(const ssmi_step_slots * s, int64_t b) {
    const ssm_tensor * r = s->read;
    if (r == NULL || !ssmi_present(r)) return b;
    if (r->ndim == 1) return ssmi_get_i64(r, ssmi_off1(r, b));
    return ssmi_get_i64(r, ssmi_off2(r, b, ssmi_step_read_column(s, b)));
}

/* The token table (a 2-D tensor), or NULL: each row writes once. */
static inline const ssm_tensor * ssmi_step_token_table(const ssmi_step_slots * s) {
    if (s->write != NULL && ssmi_present(s->write)) return s->write->ndim == 2 ? s->write : NULL;
    return s->read != NULL && ssmi_present(s->read) && s->read->ndim == 2 ? s->read : NULL;
}

/* Without a token table: the slot row b writes once (negative: none). */
static inline int64_t ssmi_step_write_slot(const ssmi_step_slots * s, int64_t b) {
    if (s->write != NULL && ssmi_present(s->write)) return ssmi_get_i64(s->write, ssmi_off1(s->write, b));
    if (s->read != NULL && ssmi_present(s->read)) return ssmi_get_i64(s->read, ssmi_off1(s->read, b));
    return b;
}

/* With a token table: the slot the state after token j of row b goes to (negative: none). */
static inline int64_t ssmi_step_token_slot(const ssm_tensor * table, int64_t b, int64_t j) {
    return ssmi_get_i64(table, ssmi_off2(table, b, j));
}

/* 1 when a step uses more than one token per row read and written at one slot:
 * dst_state_batch_indices, cu_seqlens, num_accepted_tokens, a 2-D read table, or a present
 * inter[i] (i < n, its intermediate states). The CUDA steps run these through the rows' plan
 * (cuda/common/step_plan.cuh) and their general kernels. */
static inline int ssmi_step_general(const ssmi_step_slots * s, const ssm_tensor * const * inter, int n) {
    if (ssmi_present(s->write) || ssmi_present(s->cu) || ssmi_present(s->accepted)) return 1;
    if (ssmi_present(s->read) && s->read->ndim != 1) return 1;
    for (int i = 0; i < n; ++i)
        if (ssmi_present(inter[i])) return 1;
    return 0;
}

#endif /* SSMI_STEP_SLOTS_H */
