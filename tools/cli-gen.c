/*
 * cli-gen.c — input generation and `run` binding helpers shared by the operator families
 * added after Mamba-2's forward (cli-mamba2-train.c, cli-layer.c, cli-mamba3-siso.c):
 * random fills of logical elements (so strided and stride-0 views work), index tensors,
 * argument allocation with readable errors, and in-place (borrowed) outputs.
 */
#define _XOPEN_SOURCE 700

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int64_t view_numel(const ssm_tensor * t) {
    return cli_numel(t->ndim, t->shape);
}

void cli_gen_normal(const ssm_tensor * t, cli_rng * rng) {
    const int64_t n = view_numel(t);
    for (int64_t k = 0; k < n; ++k) cli_set(t, cli_offset(t, k), cli_rng_normal(rng));
}

void cli_gen_uniform(const ssm_tensor * t, cli_rng * rng, double lo, double hi) {
    const int64_t n = view_numel(t);
    for (int64_t k = 0; k < n; ++k) cli_set(t, cli_offset(t, k), lo + (hi - lo) * cli_rng_uniform(rng));
}

double cli_log_uniform(cli_rng * rng, double lo, double hi) {
    return exp(log(lo) + (log(hi) - log(lo)) * cli_rng_uniform(rng));
}

void cli_gen_seq_idx(const ssm_tensor * t, int64_t count, cli_rng * rng) {
    const int64_t B = t->shape[0], S = t->shape[1];
    int32_t *     ids = (int32_t *)t->data;
    if (count > S) count = S;
    for (int64_t b = 0; b < B; ++b) {
        int32_t * row = ids + b * S;
        memset(row, 0, (size_t)S * sizeof *row);
        for (int64_t placed = 0; placed < count - 1;) { /* count−1 distinct starts in [1, S) */
            const int64_t s = 1 + (int64_t)(cli_rng_uniform(rng) * (double)(S - 1));
            if (s < S && !row[s]) {
                row[s] = 1;
                ++placed;
            }
        }
        int32_t id = 0;
        for (int64_t s = 0; s < S; ++s) {
            id += row[s];
            row[s] = id;
        }
    }
}

void cli_gen_cu_seqlens(const ssm_tensor * t, int64_t S, int64_t nseq, cli_rng * rng) {
    int32_t * cu = (int32_t *)t->data;
    cu[0]        = 0;
    cu[nseq]     = (int32_t)S;
    for (int64_t s = 1; s < nseq; ++s) cu[s] = (int32_t)(cli_rng_uniform(rng) * (double)(S + 1));
    for (int64_t i = 2; i < nseq; ++i) /* insertion sort of the inner cuts cu[1..nseq−1] */
        for (int64_t j = i; j > 1 && cu[j - 1] > cu[j]; --j) {
            const int32_t v = cu[j];
            cu[j]           = cu[j - 1];
            cu[j - 1]       = v;
        }
}

void cli_gen_slot_indices(const ssm_tensor * t, int64_t slots, cli_rng * rng) {
    const int64_t B    = t->shape[0];
    int32_t *     perm = malloc((size_t)(slots > 0 ? slots : 1) * sizeof *perm);
    if (!perm) { /* identity rather than nothing: still a valid index tensor */
        for (int64_t b = 0; b < B; ++b) cli_set(t, b, (double)b);
        return;
    }
    for (int64_t s = 0; s < slots; ++s) perm[s] = (int32_t)s;
    for (int64_t s = slots - 1; s > 0; --s) { /* Fisher–Yates */
        int64_t j = (int64_t)(cli_rng_uniform(rng) * (double)(s + 1));
        if (j > s) j = s;
        const int32_t v = perm[s];
        perm[s]         = perm[j];
        perm[j]         = v;
    }
    for (int64_t b = 0; b < B; ++b) cli_set(t, b, (B > 1 && b == 1) || b >= slots ? -1.0 : (double)perm[b]);
    free(perm);
}

int cli_gen_arg(cli_problem * pb, const char * name, int32_t ndim, const int64_t * shape, char * err,
                size_t errlen) {
    if (cli_alloc_arg(pb, name, 0, ndim, shape) == 0) return 0;
    snprintf(err, errlen, "%s: out of memory for input %s", pb->op->name, name);
    return -1;
}

int cli_out_arg(cli_problem * pb, const char * name, int f64, int32_t ndim, const int64_t * shape, char * err,
                size_t errlen) {
    if (cli_alloc_arg(pb, name, f64, ndim, shape) == 0) return 0;
    snprintf(err, errlen, "%s: out of memory for output %s", pb->op->name, name);
    return -1;
}

int cli_in_place(cli_problem * pb, const char * out, const char * in, int f64, char * err, size_t errlen) {
    cli_buf * src = cli_arg_buf(pb, in);
    cli_buf * dst = cli_arg_buf(pb, out);
    if (!src->mem) {
        snprintf(err, errlen, "%s: %s needs input %s", pb->op->name, out, in);
        return -1;
    }
    if (f64 && cli_buf_convert(src, SSM_DTYPE_F64) != 0) {
        snprintf(err, errlen, "%s: out of memory converting %s to f64", pb->op->name, in);
        return -1;
    }
    cli_buf_free(dst);
    *dst          = *src;
    dst->borrowed = 1;
    return 0;
}

int cli_present(const cli_problem * pb, const char * name) {
    return cli_view(pb, name).data != NULL;
}

int64_t cli_dim(const cli_problem * pb, const char * name, int i) {
    return cli_view(pb, name).shape[i];
}

int cli_need_ndim(const cli_problem * pb, const char * name, int32_t ndim, char * err, size_t errlen) {
    const ssm_tensor t = cli_view(pb, name);
    if (!t.data) {
        snprintf(err, errlen, "%s: input %s.npy is required", pb->op->name, name);
        return -1;
    }
    if (t.ndim != ndim) {
        snprintf(err, errlen, "%s: %s.npy has %d dimensions, expected %d", pb->op->name, name, (int)t.ndim, (int)ndim);
        return -1;
    }
    return 0;
}

int64_t cli_shape_or(const cli_problem * pb, const char * key, int64_t def) {
    return cli_key_index(pb->op->shape_keys, key) >= 0 ? cli_shape(pb, key) : def;
}

int64_t cli_param_or(const cli_problem * pb, const char * key, int64_t def) {
    return cli_has_param(pb, key) ? cli_param_int(pb, key) : def;
}

int cli_check_shape_positive(const cli_problem * pb, char * err, size_t errlen) {
    const cli_key * keys = pb->op->shape_keys;
    for (int i = 0; keys[i].name; ++i)
        if (pb->shape[i].i < 1) {
            snprintf(err, errlen, "%s: shape %s=%lld must be >= 1", pb->op->name, keys[i].name,
                     (long long)pb->shape[i].i);
            return -1;
        }
    return 0;
}

int cli_check_bools(const cli_problem * pb, const char * const * names, char * err, size_t errlen) {
    for (int i = 0; names[i]; ++i) {
        if (!cli_has_param(pb, names[i])) continue;
        const int64_t v = cli_param_int(pb, names[i]);
        if (v != 0 && v != 1) {
            snprintf(err, errlen, "%s: %s=%lld must be 0 or 1", pb->op->name, names[i], (long long)v);
            return -1;
        }
    }
    return 0;
}

/* ---- helpers of the Mamba-3 commands --------------------------------------------------- */

int cli_has_arg(const cli_problem * pb, const char * name) {
    return cli_arg_index(pb->op, name) >= 0;
}

int cli_any_present(const cli_problem * pb, const char * const * names) {
    for (int i = 0; names[i]; ++i)
        if (cli_has_arg(pb, names[i]) && cli_present(pb, names[i])) return 1;
    return 0;
}

int cli_check_nseq_slots(const cli_problem * pb, int64_t B, char * err, size_t errlen) {
    const int64_t nseq = cli_param_or(pb, "nseq", 0);
    if (nseq < 0 || nseq > 1000000) {
        snprintf(err, errlen, "%s: nseq=%lld must be in [0, 1000000]", pb->op->name, (long long)nseq);
        return -1;
    }
    if (nseq > 0 && B != 1) {
        snprintf(err, errlen, "%s: nseq=%lld (cu_seqlens) needs B=1", pb->op->name, (long long)nseq);
        return -1;
    }
    const int64_t slots = cli_param_or(pb, "slots", 0);
    if (slots != 0 && (slots < B || slots > 1000000)) {
        snprintf(err, errlen, "%s: slots=%lld must be 0 (no state_batch_indices) or in [B=%lld, 1000000]",
                 pb->op->name, (long long)slots, (long long)B);
        return -1;
    }
    return 0;
}

void cli_bind_pool_params(cli_problem * pb, const char * pool) {
    if (cli_has_param(pb, "slots"))
        cli_set_param_int(pb, "slots", cli_present(pb, "state_batch_indices") ? cli_dim(pb, pool, 0) : 0);
    if (cli_has_param(pb, "nseq")) {
        const ssm_tensor cu = cli_view(pb, "cu_seqlens");
        cli_set_param_int(pb, "nseq", cu.data ? cli_numel(cu.ndim, cu.shape) - 1 : 0);
    }
}

const char * cli_source_of(const cli_problem * pb, const char * out, const char * const (*table)[2], size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (strcmp(out, table[i][0]) == 0 && cli_has_arg(pb, table[i][1])) return table[i][1];
    return NULL;
}
