/*
 * cli-gen.c — input generation and `run` binding helpers shared by the operator families
 * added after Mamba-2's forward (cli-mamba2-train.c, cli-layer.c, cli-mamba3-siso.c,
 * cli-mamba3-mimo.c): random fills of logical elements (so strided and stride-0 views work),
 * index tensors, argument allocation with readable errors, in-place (borrowed) outputs, and
 * tensor shapes read from the library's schema, which the Mamba-3 families build their
 * inputs, outputs and `run` bindings from.
 */
#define _XOPEN_SOURCE 700

#include <ctype.h>
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
    return cli_check_slots(pb, B, err, errlen);
}

int cli_check_slots(const cli_problem * pb, int64_t B, char * err, size_t errlen) {
    const int64_t slots = cli_param_or(pb, "slots", 0);
    if (slots != 0 && (slots < B || slots > 1000000)) {
        snprintf(err, errlen, "%s: slots=%lld must be 0 (no state_batch_indices) or in [B=%lld, 1000000]",
                 pb->op->name, (long long)slots, (long long)B);
        return -1;
    }
    return 0;
}

int64_t cli_state_rows(const cli_problem * pb, int64_t batch) {
    const int64_t slots = cli_param_or(pb, "slots", 0), nseq = cli_param_or(pb, "nseq", 0);
    return slots > 0 ? slots : nseq > 0 ? nseq : batch;
}

int64_t cli_chunk_rows(const cli_problem * pb, int64_t batch, int64_t seqlen, int64_t chunk) {
    if (!cli_has_arg(pb, "cu_seqlens") || !cli_present(pb, "cu_seqlens")) return batch * ((seqlen + chunk - 1) / chunk);
    const ssm_tensor cu = cli_view(pb, "cu_seqlens");
    int64_t          rows = 0;
    for (int64_t i = 0; i + 1 < cu.shape[0]; ++i) {
        const int64_t len = (int64_t)cli_get(&cu, cli_offset(&cu, i + 1)) - (int64_t)cli_get(&cu, cli_offset(&cu, i));
        rows += (len + chunk - 1) / chunk;
    }
    return rows;
}

/* ---- shapes from the schema ------------------------------------------------------------ */

/* The value of the symbol text[0..len) in syms; 0 and *ok = 0 when it is not there. */
static int64_t sym_value(const cli_sym * syms, const char * text, size_t len, int * ok) {
    for (int i = 0; syms[i].name; ++i)
        if (strlen(syms[i].name) == len && strncmp(syms[i].name, text, len) == 0) return syms[i].value;
    *ok = 0;
    return 0;
}

/* One size of a shape text, text[0..len): symbols and integers joined by +, -, − (sum) and
 * ·, * (product, which binds tighter): "NS + 1", "W−1", "H·P". */
static int64_t size_expr(const cli_sym * syms, const char * text, size_t len, int * ok) {
    int64_t sum = 0, prod = 1;
    int     sign = 1;
    size_t  i = 0;
    while (i < len && *ok) {
        while (i < len && text[i] == ' ') ++i;
        size_t j = i;
        while (j < len && (isalnum((unsigned char)text[j]) || text[j] == '_')) ++j;
        if (j == i) {
            *ok = 0;
            break;
        }
        prod *= isdigit((unsigned char)text[i]) ? (int64_t)strtoll(text + i, NULL, 10)
                                                : sym_value(syms, text + i, j - i, ok);
        while (j < len && text[j] == ' ') ++j;
        if (j >= len) break;
        if (text[j] == '*' || strncmp(text + j, "·", strlen("·")) == 0) {
            i = j + (text[j] == '*' ? 1 : strlen("·"));
            continue;
        }
        sum += sign * prod;
        prod = 1;
        if (text[j] == '+' || text[j] == '-') {
            sign = text[j] == '+' ? 1 : -1;
            i = j + 1;
        } else if (strncmp(text + j, "−", strlen("−")) == 0) {
            sign = -1;
            i = j + strlen("−");
        } else {
            *ok = 0;
        }
    }
    return sum + sign * prod;
}

/* The alt-th parenthesised list of a shape text ("(B, S, H, P) with `mimo_o`; else (B, S, R,
 * H, P)": 0 and 1): *start just after its '(', *len up to its ')'; 0 when there is none. */
static int shape_group(const char * text, int alt, const char ** start, size_t * len) {
    for (const char * p = strchr(text, '('); p != NULL; p = strchr(p + 1, '(')) {
        const char * close = strchr(p, ')');
        if (close == NULL) return 0;
        if (alt-- == 0) {
            *start = p + 1;
            *len = (size_t)(close - p - 1);
            return 1;
        }
        p = close;
    }
    return 0;
}

void cli_syms(const cli_problem * pb, const cli_sym * derived, cli_sym * syms, int max) {
    int n = 0;
    for (int i = 0; pb->op->shape_keys[i].name && n < max - 1; ++i)
        syms[n++] = (cli_sym){pb->op->shape_keys[i].name, pb->shape[i].i};
    for (int i = 0; derived[i].name && n < max - 1; ++i) syms[n++] = derived[i];
    syms[n] = (cli_sym){NULL, 0};
}

int32_t cli_schema_shape(const cli_problem * pb, const char * name, int alt, const cli_sym * syms, int64_t * shape) {
    const cli_arg * arg = &pb->info->args[cli_arg_index(pb->op, name)];
    const char *    g = NULL;
    size_t          len = 0;
    if (!shape_group(arg->shape, alt, &g, &len)) return -1;
    int32_t n = 0;
    int     ok = 1;
    for (size_t i = 0; i <= len && ok; ++n) {
        size_t j = i;
        while (j < len && g[j] != ',') ++j;
        if (n == SSM_MAX_DIMS) return -1;
        shape[n] = size_expr(syms, g + i, j - i, &ok);
        i = j + 1;
    }
    return ok ? n : -1;
}

/* ---- the Mamba-3 families (cli-mamba3-siso.c, cli-mamba3-mimo.c) ------------------------ */

int cli_fused(const cli_problem * pb) {
    return cli_param_or(pb, "fused", 0) != 0 || cli_param_or(pb, "fuse_pregate_headwise_rms_norm", 0) != 0;
}

int cli_m3_wanted(const cli_problem * pb, const cli_arg * arg) {
    if (!cli_arg_is_optional(arg)) return 1;
    const char * n = arg->name;
    if (strcmp(n, "d") == 0) return (int)cli_param_or(pb, "has_d", 0);
    if (strcmp(n, "z") == 0 || strcmp(n, "mimo_z") == 0) return (int)cli_param_or(pb, "has_z", 0);
    if (strcmp(n, "mimo_o") == 0) return (int)cli_param_or(pb, "reduce_o", 0);
    if (strcmp(n, "outproj_norm_weight") == 0) return cli_fused(pb) && cli_param_or(pb, "has_norm_weight", 0);
    if (strcmp(n, "cu_seqlens") == 0) return cli_param_or(pb, "nseq", 0) > 0;
    if (strcmp(n, "state_batch_indices") == 0) return cli_param_or(pb, "slots", 0) > 0;
    if (strncmp(n, "dfinal_", 7) == 0) return (int)cli_param_or(pb, "has_dfinal", 0);
    if (strstr(n, "_state_indices")) return 0; /* state pools: not drawn by the CLI */
    /* the Mamba-3 backwards' saved forward results: written by a forward (saved_y, saved_states) */
    if (strcmp(n, "chunk_states") == 0 || strcmp(n, "pregate_y") == 0) return 0;
    if (strstr(n, "_state")) return (int)cli_param_or(pb, "has_states", 0);
    return 0;
}

/* The schema alternative of an argument: out and dout without mimo_o are per rank (MIMO). */
static int m3_alt(const char * name, int per_rank) {
    return per_rank && (strcmp(name, "out") == 0 || strcmp(name, "dout") == 0);
}

/* name = −name·by element by element (adt = −U·dt once both are drawn). */
static void cli_scale_by_minus(cli_problem * pb, const char * name, const char * by) {
    const ssm_tensor * t = &cli_arg_buf(pb, name)->view;
    const ssm_tensor * u = &cli_arg_buf(pb, by)->view;
    const int64_t      n = cli_numel(t->ndim, t->shape);
    for (int64_t k = 0; k < n; ++k) {
        const int64_t o = cli_offset(t, k);
        cli_set(t, o, -cli_get(t, o) * cli_get(u, cli_offset(u, k)));
    }
}

int cli_m3_generate(cli_problem * pb, uint64_t seed, const cli_sym * syms, int per_rank, cli_fill_fn fill,
                    const void * dims, cli_rng * rng, char * err, size_t errlen) {
    cli_rng_seed(rng, seed);
    for (int i = 0; i < pb->info->nargs; ++i) {
        const cli_arg * arg = &pb->info->args[i];
        if (cli_arg_is_output(arg) || !cli_m3_wanted(pb, arg)) continue;
        int64_t       shp[SSM_MAX_DIMS];
        const int32_t ndim = cli_schema_shape(pb, arg->name, m3_alt(arg->name, per_rank), syms, shp);
        if (cli_gen_arg(pb, arg->name, ndim, shp, err, errlen)) return -1;
        fill(pb, dims, arg->name, &cli_arg_buf(pb, arg->name)->view, rng);
    }
    if (cli_has_arg(pb, "adt")) cli_scale_by_minus(pb, "adt", "dt");
    return 0;
}


int cli_m3_alloc(cli_problem * pb, int f64, const cli_sym * syms, int per_rank, char * err, size_t errlen) {
    for (int i = 0; i < pb->info->nargs; ++i) {
        const cli_arg * arg = &pb->info->args[i];
        if (!cli_arg_is_output(arg)) continue;
        if (arg->needs && !cli_present(pb, arg->needs)) continue; /* the gradient of an absent input */
        if (arg->in_place != NULL) { /* a decode step's final pool */
            if (cli_param_int(pb, "in_place")) {
                if (cli_in_place(pb, arg->name, arg->in_place, f64, err, errlen)) return -1;
                continue;
            }
        } else if (strncmp(arg->name, "final_", 6) == 0 && !cli_param_int(pb, "has_final")) {
            continue;
        }
        /* the Mamba-3 forwards' saved results (for the backward): only with save_y=1 / save_states=1 */
        if (strcmp(arg->name, "pregate_y") == 0 && !cli_param_or(pb, "save_y", 0)) continue;
        if (strcmp(arg->name, "chunk_states") == 0 && !cli_param_or(pb, "save_states", 0)) continue;
        /* angle_cumsum_bwd has no angle_state input: its dangle_state follows has_states */
        if (strcmp(arg->name, "dangle_state") == 0 && !arg->needs && !cli_param_int(pb, "has_states")) continue;
        int64_t shp[SSM_MAX_DIMS];
        int32_t ndim = cli_schema_shape(pb, arg->name, m3_alt(arg->name, per_rank), syms, shp);
        if (strcmp(arg->name, "doutproj_norm_weight") == 0) {
            if (!cli_fused(pb)) continue;
            const ssm_tensor w = cli_view(pb, "outproj_norm_weight"); /* (H,P) or (H·P): the weight's shape */
            if (w.data) {
                ndim = w.ndim;
                for (int32_t k = 0; k < ndim; ++k) shp[k] = w.shape[k];
            }
        }
        if (cli_out_arg(pb, arg->name, f64, ndim, shp, err, errlen)) return -1;
    }
    return 0;
}

/* Sets param key to value when the operator has it. */
static void set_param_if(cli_problem * pb, const char * key, int64_t value) {
    if (cli_has_param(pb, key)) cli_set_param_int(pb, key, value);
}

/* 1 when the operator takes argument name and it is present. */
static int given(const cli_problem * pb, const char * name) {
    return cli_has_arg(pb, name) && cli_present(pb, name);
}

/* The shape key a schema symbol names: itself, or its alias ("batch=B,Q=chunk"); NULL when
 * the operator has no such key. */
static const char * key_of(const cli_problem * pb, const char * sym, const char * aliases, char * buf, size_t len) {
    const size_t n = strlen(sym);
    for (const char * a = aliases; a != NULL && *a; a = strchr(a, ',') ? strchr(a, ',') + 1 : NULL) {
        const char * eq = strchr(a, '=');
        if (eq == NULL || (size_t)(eq - a) != n || strncmp(a, sym, n) != 0) continue;
        const char * end = strchr(eq + 1, ',');
        snprintf(buf, len, "%.*s", (int)(end ? (size_t)(end - eq - 1) : strlen(eq + 1)), eq + 1);
        sym = buf;
        break;
    }
    return cli_key_index(pb->op->shape_keys, sym) >= 0 ? sym : NULL;
}

int cli_bind_shapes(cli_problem * pb, const char * from, const char * aliases, char * err, size_t errlen) {
    for (int i = 0; i < pb->info->nargs; ++i) {
        const cli_arg * arg = &pb->info->args[i];
        const char *    g = NULL;
        size_t          len = 0;
        if (cli_arg_is_output(arg) || !pb->arg[i].mem || !shape_group(arg->shape, 0, &g, &len) ||
            strchr(g + len + 1, '(') != NULL)
            continue;
        if (from != NULL) { /* only the listed inputs ("x b state") */
            const char * hit = strstr(from, arg->name);
            const size_t n = strlen(arg->name);
            if (hit == NULL || (hit != from && hit[-1] != ' ') || (hit[n] != ' ' && hit[n] != '\0')) continue;
        }
        const ssm_tensor * t = &pb->arg[i].view;
        int32_t            n = 0;
        for (size_t k = 0; k <= len; ++n) {
            size_t j = k;
            while (j < len && g[j] != ',') ++j;
            while (g[k] == ' ') ++k;
            char         sym[16], buf[16];
            snprintf(sym, sizeof sym, "%.*s", (int)(j - k), g + k);
            const char * key = key_of(pb, sym, aliases, buf, sizeof buf);
            if (n < t->ndim && key != NULL && !pb->shape[cli_key_index(pb->op->shape_keys, key)].given)
                cli_set_shape(pb, key, t->shape[n]);
            k = j + 1;
        }
        if (t->ndim != n) {
            snprintf(err, errlen, "%s: %s.npy has %d dimensions, expected %d", pb->op->name, arg->name, (int)t->ndim,
                     (int)n);
            return -1;
        }
    }
    return 0;
}

void cli_bind_flags(cli_problem * pb) {
    static const char * const states[] = {"angle_state", "ssm_state", "k_state", "v_state", NULL};
    static const char * const dfinals[] = {"dfinal_states",   "dfinal_angle_state", "dfinal_ssm_state",
                                           "dfinal_k_state", "dfinal_v_state",     NULL};
    static const char * const inputs[][2] = {{"has_z", "z"},         {"has_dt_bias", "dt_bias"},
                                             {"has_init", "initial_states"}, {"has_bias", "bias"},
                                             {"reduce_o", "mimo_o"}, {"has_norm_weight", "outproj_norm_weight"},
                                             {"seq_idx", "seq_idx"}};
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; ++i)
        set_param_if(pb, inputs[i][0], given(pb, inputs[i][1]));
    set_param_if(pb, "has_d", given(pb, "d") ? cli_view(pb, "d").ndim : 0); /* Mamba-2: (H) 1, (H, P) 2 */
    /* angle_cumsum_bwd has no state input: its has_states (dangle_state) stays as given */
    if (cli_has_arg(pb, "angle_state")) set_param_if(pb, "has_states", cli_any_present(pb, states));
    set_param_if(pb, "has_final", 1);
    set_param_if(pb, "has_dfinal", cli_any_present(pb, dfinals));
    if (given(pb, "cu_seqlens")) {
        const ssm_tensor cu = cli_view(pb, "cu_seqlens");
        set_param_if(pb, "nseq", cli_numel(cu.ndim, cu.shape) - 1);
    } else {
        set_param_if(pb, "nseq", 0);
    }
    /* slots: rows of the pool (the input a final state is updated in place of) with indices */
    for (int i = 0; i < pb->info->nargs; ++i)
        if (pb->info->args[i].in_place != NULL) {
            const int64_t slots = given(pb, "state_batch_indices") ? cli_dim(pb, pb->info->args[i].in_place, 0) : 0;
            set_param_if(pb, "slots", slots);
            break;
        }
}

void cli_forward_inputs(const cli_problem * pb, const char * fwd, void * args, size_t size) {
    const ssm_op_info * info = ssm_op_get(ssm_op_find(fwd));
    memset(args, 0, size);
    for (int32_t i = 0; info != NULL && i < info->nargs; ++i) {
        const ssm_arg_info * arg = &info->args[i];
        if ((arg->role & SSM_ARG_ROLE_OUTPUT) || !cli_has_arg(pb, arg->name) || !cli_present(pb, arg->name)) continue;
        const ssm_tensor v = cli_view(pb, arg->name);
        memcpy((char *)args + arg->offset, &v, sizeof v);
    }
}

int cli_m3_saved_results(cli_problem * pb, const cli_m3_saved * s, char * err, size_t errlen) {
    const int want_y = (int)cli_param_int(pb, "saved_y"), want_s = (int)cli_param_int(pb, "saved_states");
    if (want_y && cli_gen_arg(pb, "pregate_y", s->yndim, s->yshp, err, errlen)) return -1;
    if (want_s && cli_gen_arg(pb, "chunk_states", 4, s->cshp, err, errlen)) return -1;
    cli_forward_inputs(pb, s->fwd, s->args, s->size);
    cli_buf out;
    memset(&out, 0, sizeof out);
    if (cli_buf_alloc(&out, SSM_DTYPE_F32, s->ondim, s->oshp) != 0) {
        snprintf(err, errlen, "%s: out of memory for the forward's output", pb->op->name);
        return -1;
    }
    *s->out = out.view;
    if (want_y) *s->y = cli_view(pb, "pregate_y");
    if (want_s) *s->cs = cli_view(pb, "chunk_states");
    ssm_context * ctx = NULL;
    ssm_status    st = cli_context_create(SSM_BACKEND_CPU, 0, &ctx);
    if (st == SSM_STATUS_OK) st = s->run(ctx, pb, s->args);
    if (st != SSM_STATUS_OK)
        snprintf(err, errlen, "%s: saved results: the CPU forward failed: %s", pb->op->name,
                 ssm_context_last_error(ctx));
    ssm_context_free(ctx);
    cli_buf_free(&out);
    return st == SSM_STATUS_OK ? 0 : -1;
}
