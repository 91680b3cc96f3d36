/*
 * state_pools.c — the state pools of the sequence operators (mamba2_scan, causal_conv1d,
 * mamba3_siso, mamba3_mimo): a serving engine keeps every request's state in one pool of
 * slots and names, per sequence of a prefill, the slot it starts from
 * (initial_state_indices; negative: zeros) and the slot its final state goes to
 * (final_state_indices; negative: dropped).
 *
 * The backends never see a pool. Before the operator's own validation the used rows are
 * gathered into dense (NS, ...) tensors of the pool's dtype (zeros for a negative index),
 * which replace the pools in a copy of the args; the final states are computed into dense
 * tensors too and scattered into their slots after the backend succeeded. Both copies are
 * exact (same dtype), so a pooled call gives the bytes of the dense call, and a failed call
 * writes nothing. On the CUDA backend the dense rows are device memory and the gather and
 * scatter are device copies (ssmi_cuda_copy_rows) on the context's stream; the indices are
 * read on the host (dispatch.c copies device index tensors there), because the rules below
 * read their values. Rules checked here: the indices in range, no final slot twice, a final
 * pool that overlaps nothing but — in place — exactly its own initial pool, and then no
 * slot written by one sequence and read by another.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops_common.h"

#ifdef SSMOPS_HAVE_CUDA
#include "../cuda/ssmi_cuda.h"
#endif

#define MAX_PAIRS 4

/* The pools of one operator: the initial pool and the final pool of each state. */
typedef struct pool_table {
    ssmi_op      op;
    const char * initial[MAX_PAIRS];
    const char * final[MAX_PAIRS];
} pool_table;

static const pool_table tables[] = {
    {SSMI_OP_mamba2_scan, {"initial_states"}, {"final_states"}},
    {SSMI_OP_causal_conv1d, {"initial_states"}, {"final_states"}},
    {SSMI_OP_mamba3_siso,
     {"angle_state", "ssm_state", "k_state", "v_state"},
     {"final_angle_state", "final_ssm_state", "final_k_state", "final_v_state"}},
    {SSMI_OP_mamba3_mimo,
     {"angle_state", "ssm_state", "k_state", "v_state"},
     {"final_angle_state", "final_ssm_state", "final_k_state", "final_v_state"}},
};

static const pool_table * find_table(ssmi_op op) {
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; ++i)
        if (tables[i].op == op) return &tables[i];
    return NULL;
}

static const ssm_tensor * named(ssmi_op op, const void * args, const char * name) {
    const ssm_arg_info * arg = name != NULL ? ssmi_op_arg(op, name) : NULL;
    return arg != NULL ? ssmi_arg_tensor(args, arg) : NULL;
}

static ssm_tensor * named_mut(ssmi_op op, void * args, const char * name) {
    const ssm_arg_info * arg = ssmi_op_arg(op, name);
    return (ssm_tensor *)(void *)((char *)args + arg->offset);
}

typedef struct slot_of {
    int64_t slot, seq;
} slot_of;

static int cmp_slot(const void * a, const void * b) {
    const slot_of * x = a;
    const slot_of * y = b;
    if (x->slot != y->slot) return (x->slot > y->slot) - (x->slot < y->slot);
    return (x->seq > y->seq) - (x->seq < y->seq);
}

static int64_t idx_at(const ssm_tensor * idx, int64_t i) { return ssmi_get_i64(idx, ssmi_off1(idx, i)); }

/* Every idx[i] below pool.shape[0] (negative allowed). */
static ssm_status check_range(ssm_context * ctx, const char * op, const char * idx_name, const ssm_tensor * idx,
                              const char * pool_name, const ssm_tensor * pool) {
    const int64_t slots = pool->shape[0];
    for (int64_t i = 0; i < idx->shape[0]; ++i) {
        const int64_t v = idx_at(idx, i);
        SSM_RETURN_IF(v >= slots, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: %s[%lld]=%lld is not below %s.shape[0]=%lld (slots)", op, idx_name, (long long)i,
                      (long long)v, pool_name, (long long)slots);
    }
    return SSM_STATUS_OK;
}

/* The non-negative entries of idx as sorted (slot, sequence) pairs into out; their count. */
static int64_t sorted_slots(const ssm_tensor * idx, slot_of * out) {
    int64_t n = 0;
    for (int64_t i = 0; i < idx->shape[0]; ++i) {
        const int64_t v = idx_at(idx, i);
        if (v >= 0) out[n++] = (slot_of){v, i};
    }
    qsort(out, (size_t)n, sizeof *out, cmp_slot);
    return n;
}

/* No final slot twice; with an in-place pool, no slot written by one sequence and read by
 * another (reads of a slot nobody writes may repeat: sequences sharing a cached prefix). */
static ssm_status check_slots(ssm_context * ctx, const char * op, const ssm_tensor * init_idx,
                              const ssm_tensor * fin_idx, int in_place) {
    const int64_t ns = fin_idx->shape[0] + (init_idx != NULL ? init_idx->shape[0] : 0);
    if (ns == 0) return SSM_STATUS_OK;
    slot_of * buf = ssmi_alloc(ctx, (size_t)ns * sizeof *buf);
    SSM_RETURN_IF(buf == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: could not allocate %zu bytes to check the slots",
                  op, (size_t)ns * sizeof *buf);
    slot_of *     fin = buf;
    const int64_t nf = sorted_slots(fin_idx, fin);
    ssm_status    st = SSM_STATUS_OK;
    for (int64_t i = 1; i < nf && st == SSM_STATUS_OK; ++i)
        if (fin[i].slot == fin[i - 1].slot)
            st = ssmi_error(ctx, SSM_STATUS_INVALID_ARGUMENT,
                            "%s: final_state_indices[%lld] and [%lld] are both %lld; a slot may be written by one "
                            "sequence only",
                            op, (long long)fin[i - 1].seq, (long long)fin[i].seq, (long long)fin[i].slot);
    if (st == SSM_STATUS_OK && in_place && init_idx != NULL) {
        slot_of *     ini = buf + nf;
        const int64_t ni = sorted_slots(init_idx, ini);
        for (int64_t i = 0, f = 0; i < ni && st == SSM_STATUS_OK; ++i) {
            while (f < nf && fin[f].slot < ini[i].slot) ++f;
            if (f < nf && fin[f].slot == ini[i].slot && fin[f].seq != ini[i].seq)
                st = ssmi_error(ctx, SSM_STATUS_INVALID_ARGUMENT,
                                "%s: slot %lld is read by sequence %lld (initial_state_indices) and written by "
                                "sequence %lld (final_state_indices) of an in-place pool; only a sequence's own "
                                "slot may be both",
                                op, (long long)ini[i].slot, (long long)ini[i].seq, (long long)fin[f].seq);
        }
    }
    ssmi_free(ctx, buf);
    return st;
}

/* 1 when arg names one of the pools the call replaces. */
static int is_replaced(const pool_table * t, const char * name, int has_init, int has_fin) {
    for (int k = 0; k < MAX_PAIRS && t->initial[k] != NULL; ++k)
        if ((has_init && strcmp(name, t->initial[k]) == 0) || (has_fin && strcmp(name, t->final[k]) == 0)) return 1;
    return 0;
}

/* 1 when out is final pool k and in its initial pool k, the same view, with both indices. */
static int in_place_pair(const pool_table * t, const char * out, const char * in, const ssm_tensor * o,
                         const ssm_tensor * i, int has_init, int has_fin) {
    if (!has_init || !has_fin) return 0;
    for (int k = 0; k < MAX_PAIRS && t->initial[k] != NULL; ++k)
        if (strcmp(out, t->final[k]) == 0 && strcmp(in, t->initial[k]) == 0) return ssmi_same_addresses(o, i);
    return 0;
}

/* The overlap rules of dispatch.c for every pair with a replaced pool in it (the others are
 * checked on the substituted args): an output overlaps no input and no other output, except
 * a final pool that is exactly its initial pool. */
static ssm_status check_pool_overlaps(ssm_context * ctx, const char * op, const ssm_op_info * info,
                                      const pool_table * t, const void * args, int has_init, int has_fin) {
    for (int32_t o = 0; o < info->nargs; ++o) {
        const ssm_arg_info * out = &info->args[o];
        if (!(out->role & SSM_ARG_ROLE_OUTPUT)) continue;
        const ssm_tensor * ot = ssmi_arg_tensor(args, out);
        const int          o_pool = is_replaced(t, out->name, has_init, has_fin);
        for (int32_t i = 0; i < info->nargs; ++i) {
            const ssm_arg_info * other = &info->args[i];
            const ssm_tensor *   it = ssmi_arg_tensor(args, other);
            if (i == o || ((other->role & SSM_ARG_ROLE_OUTPUT) && i < o)) continue;
            if (!o_pool && !is_replaced(t, other->name, has_init, has_fin)) continue;
            if (!ssmi_present(ot) || !ssmi_present(it)) continue;
            if (in_place_pair(t, out->name, other->name, ot, it, has_init, has_fin)) continue;
            SSM_FORWARD_IF_ERROR(ssmi_check_no_overlap(ctx, op, out->name, ot, other->name, it));
        }
    }
    return SSM_STATUS_OK;
}

/* A dense contiguous (rows, pool.shape[1:]) view of pool's dtype and device at data. */
static ssm_tensor dense_like(const ssm_tensor * pool, int64_t rows, void * data) {
    ssm_tensor t = *pool;
    t.data = data;
    t.shape[0] = rows;
    int64_t stride = 1;
    for (int32_t d = t.ndim - 1; d >= 0; --d) {
        t.strides[d] = stride;
        stride *= t.shape[d];
    }
    return t;
}

static size_t row_bytes(const ssm_tensor * pool) {
    size_t n = ssm_dtype_size((ssm_dtype)pool->dtype);
    for (int32_t d = 1; d < pool->ndim; ++d) n *= (size_t)pool->shape[d];
    return n;
}

static size_t round_up(size_t n) { return (n + SSMI_ALIGN - 1) & ~(size_t)(SSMI_ALIGN - 1); }

/* For every i with idx[i] ≥ 0: gather (1) row idx[i] of `from` into row i of `to`, or scatter
 * (0) row i of `from` into row idx[i] of `to`; exact copies of equal dtypes. On the device
 * one copy kernel over the list of row pairs; on the host row by row. */
static ssm_status move_rows(ssm_context * ctx, const char * op, int device, const ssm_tensor * idx,
                            const ssm_tensor * from, const ssm_tensor * to, int gather) {
    const int64_t n = idx->shape[0];
    if (!device) {
        for (int64_t i = 0; i < n; ++i) {
            const int64_t slot = idx_at(idx, i);
            if (slot >= 0) ssmi_copy_row(from, gather ? slot : i, to, gather ? i : slot);
        }
        return SSM_STATUS_OK;
    }
#ifdef SSMOPS_HAVE_CUDA
    if (n == 0) return SSM_STATUS_OK;
    int64_t * rows = ssmi_alloc(ctx, 2 * (size_t)n * sizeof *rows);
    SSM_RETURN_IF(rows == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: could not allocate the list of %lld pool rows",
                  op, (long long)n);
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t slot = idx_at(idx, i);
        if (slot < 0) continue;
        rows[m] = gather ? slot : i;     /* the rows read */
        rows[n + m++] = gather ? i : slot; /* the rows written */
    }
    memmove(rows + m, rows + n, (size_t)m * sizeof *rows);
    const ssm_status st = ssmi_cuda_copy_rows(ctx, op, from, to, rows, m);
    ssmi_free(ctx, rows);
    return st;
#else
    (void)ctx, (void)op, (void)from, (void)to, (void)gather;
    return SSM_STATUS_INTERNAL;
#endif
}

/* The block of the dense rows: `total` zeroed bytes of host or device memory. */
static ssm_status alloc_block(ssm_context * ctx, const char * op, int device, size_t total, void ** block) {
#ifdef SSMOPS_HAVE_CUDA
    if (device) return ssmi_cuda_alloc_zeroed(ctx, op, total, block);
#endif
    (void)device;
    *block = ssmi_alloc(ctx, total);
    SSM_RETURN_IF(*block == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "%s: could not allocate %zu bytes for the rows of the state pools", op, total);
    memset(*block, 0, total);
    return SSM_STATUS_OK;
}

ssm_status ssmi_pools_prepare(ssm_context * ctx, const char * op, ssmi_op id, int device, const void * args,
                              void * copy, ssmi_pool_call * pc) {
    memset(pc, 0, sizeof *pc);
    const pool_table * t = find_table(id);
    if (t == NULL) return SSM_STATUS_OK;
    const ssm_op_info * info = ssmi_op_info(id);
    const ssm_tensor *  init_idx = named(id, args, "initial_state_indices");
    const ssm_tensor *  fin_idx = named(id, args, "final_state_indices");
    const int           has_init = ssmi_present(init_idx), has_fin = ssmi_present(fin_idx);
    if (!has_init && !has_fin) return SSM_STATUS_OK;

    /* The rules of the indices and the pools. */
    SSM_RETURN_IF(has_init && has_fin && init_idx->shape[0] != fin_idx->shape[0], ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: initial_state_indices.shape[0]=%lld differs from final_state_indices.shape[0]=%lld", op,
                  (long long)init_idx->shape[0], (long long)fin_idx->shape[0]);
    const int64_t ns = has_init ? init_idx->shape[0] : fin_idx->shape[0];
    int           any_init = 0, any_fin = 0, in_place = 0;
    for (int k = 0; k < MAX_PAIRS && t->initial[k] != NULL; ++k) {
        const ssm_tensor * ip = named(id, args, t->initial[k]);
        const ssm_tensor * fp = named(id, args, t->final[k]);
        if (has_init && ssmi_present(ip)) {
            any_init = 1;
            SSM_FORWARD_IF_ERROR(check_range(ctx, op, "initial_state_indices", init_idx, t->initial[k], ip));
        }
        if (has_fin && ssmi_present(fp)) {
            any_fin = 1;
            SSM_FORWARD_IF_ERROR(check_range(ctx, op, "final_state_indices", fin_idx, t->final[k], fp));
            in_place |= has_init && ssmi_present(ip) && ssmi_same_addresses(fp, ip);
        }
    }
    SSM_RETURN_IF(has_init && !any_init, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: initial_state_indices was given without %s, the pool it indexes", op, t->initial[0]);
    SSM_RETURN_IF(has_fin && !any_fin, ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: final_state_indices was given without %s, the pool it indexes", op, t->final[0]);
    if (has_fin) SSM_FORWARD_IF_ERROR(check_slots(ctx, op, has_init ? init_idx : NULL, fin_idx, in_place));
    SSM_FORWARD_IF_ERROR(check_pool_overlaps(ctx, op, info, t, args, has_init, has_fin));

    /* One block for the dense tensors (never empty, so an empty one is still present). */
    size_t total = SSMI_ALIGN;
    for (int k = 0; k < MAX_PAIRS && t->initial[k] != NULL; ++k) {
        const ssm_tensor * pools[2] = {has_init ? named(id, args, t->initial[k]) : NULL,
                                       has_fin ? named(id, args, t->final[k]) : NULL};
        for (int j = 0; j < 2; ++j) {
            if (!ssmi_present(pools[j])) continue;
            const size_t row = row_bytes(pools[j]);
            SSM_RETURN_IF(row != 0 && (size_t)ns > (SIZE_MAX / 2 - total) / row, ctx, SSM_STATUS_OUT_OF_MEMORY,
                          "%s: the %lld rows of the state pools do not fit in memory", op, (long long)ns);
            total += round_up((size_t)ns * row);
        }
    }
    SSM_FORWARD_IF_ERROR(alloc_block(ctx, op, device, total, &pc->block));
    pc->device = device;
    pc->active = 1; /* from here on ssmi_pools_release frees the block */
    char * p = (char *)pc->block;
    memcpy(copy, args, info->args_size);
    for (int k = 0; k < MAX_PAIRS && t->initial[k] != NULL; ++k) {
        const ssm_tensor * ip = named(id, args, t->initial[k]);
        const ssm_tensor * fp = named(id, args, t->final[k]);
        if (has_init && ssmi_present(ip)) {
            const ssm_tensor dense = dense_like(ip, ns, p);
            p += round_up((size_t)ns * row_bytes(ip));
            /* a negative index keeps the zeros of the block */
            SSM_FORWARD_IF_ERROR(move_rows(ctx, op, device, init_idx, ip, &dense, 1));
            *named_mut(id, copy, t->initial[k]) = dense;
        }
        if (has_fin && ssmi_present(fp)) {
            pc->dense[pc->nfinal] = dense_like(fp, ns, p);
            p += round_up((size_t)ns * row_bytes(fp));
            pc->pool[pc->nfinal] = fp;
            *named_mut(id, copy, t->final[k]) = pc->dense[pc->nfinal++];
        }
    }
    memset(named_mut(id, copy, "initial_state_indices"), 0, sizeof(ssm_tensor));
    memset(named_mut(id, copy, "final_state_indices"), 0, sizeof(ssm_tensor));
    pc->final_idx = has_fin ? fin_idx : NULL;
    return SSM_STATUS_OK;
}

ssm_status ssmi_pools_scatter(ssm_context * ctx, const char * op, const ssmi_pool_call * pc) {
    if (!pc->active || pc->final_idx == NULL) return SSM_STATUS_OK;
    for (int k = 0; k < pc->nfinal; ++k)
        SSM_FORWARD_IF_ERROR(move_rows(ctx, op, pc->device, pc->final_idx, &pc->dense[k], pc->pool[k], 0));
    return SSM_STATUS_OK;
}

ssm_status ssmi_pools_release(ssm_context * ctx, const char * op, ssmi_pool_call * pc) {
    ssm_status st = SSM_STATUS_OK;
#ifdef SSMOPS_HAVE_CUDA
    if (pc->device && pc->block != NULL) st = ssmi_cuda_release(ctx, op, pc->block);
#endif
    if (!pc->device) ssmi_free(ctx, pc->block);
    (void)op;
    pc->block = NULL;
    pc->active = 0;
    return st;
}
