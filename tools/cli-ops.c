/*
 * cli-ops.c — the operator table and the problem setup every command shares.
 *
 * A cli_op (cli.h) describes one operator: its shape keys and param keys (with defaults)
 * and the functions that make random inputs, bind loaded inputs, allocate outputs, call the
 * library and count the work; its tensor arguments (names = .npy files = C struct fields)
 * are the library's schema of the operator.
 * The families live in their own files (cli-mamba2.c, cli-mamba2-train.c, cli-layer.c,
 * cli-mamba3-siso.c, cli-mamba3-mimo.c); this file lists them.
 */
#define _XOPEN_SOURCE 700

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

extern const cli_op cli_op_mamba2_chunk_cumsum;
extern const cli_op cli_op_mamba2_chunk_state;
extern const cli_op cli_op_mamba2_state_passing;
extern const cli_op cli_op_mamba2_bmm;
extern const cli_op cli_op_mamba2_chunk_scan;
extern const cli_op cli_op_mamba2_scan;
extern const cli_op cli_op_mamba2_scan_bwd;
extern const cli_op cli_op_mamba2_step;
extern const cli_op cli_op_causal_conv1d;
extern const cli_op cli_op_causal_conv1d_bwd;
extern const cli_op cli_op_causal_conv1d_update;
extern const cli_op cli_op_rmsnorm_gated;
extern const cli_op cli_op_rmsnorm_gated_bwd;
extern const cli_op cli_op_mamba3_angle_cumsum;
extern const cli_op cli_op_mamba3_angle_cumsum_bwd;
extern const cli_op cli_op_mamba3_siso_fwd;
extern const cli_op cli_op_mamba3_siso;
extern const cli_op cli_op_mamba3_siso_bwd;
extern const cli_op cli_op_mamba3_siso_step;
extern const cli_op cli_op_mamba3_mimo_bwd_fwd;
extern const cli_op cli_op_mamba3_mimo;
extern const cli_op cli_op_mamba3_mimo_bwd;
extern const cli_op cli_op_mamba3_mimo_step;

const cli_op * const cli_ops[] = {
    &cli_op_mamba2_chunk_cumsum, &cli_op_mamba2_chunk_state, &cli_op_mamba2_state_passing,
    &cli_op_mamba2_bmm,          &cli_op_mamba2_chunk_scan,  &cli_op_mamba2_scan,
    &cli_op_mamba2_scan_bwd,     &cli_op_mamba2_step,        &cli_op_causal_conv1d,
    &cli_op_causal_conv1d_bwd,   &cli_op_causal_conv1d_update, &cli_op_rmsnorm_gated,
    &cli_op_rmsnorm_gated_bwd,   &cli_op_mamba3_angle_cumsum, &cli_op_mamba3_angle_cumsum_bwd,
    &cli_op_mamba3_siso_fwd,     &cli_op_mamba3_siso,        &cli_op_mamba3_siso_bwd,
    &cli_op_mamba3_siso_step,    &cli_op_mamba3_mimo_bwd_fwd, &cli_op_mamba3_mimo,
    &cli_op_mamba3_mimo_bwd,     &cli_op_mamba3_mimo_step,   NULL,
};

/* Operators whose reference (and CPU backend) have the second rounding model of ctx
 * ref_mode, SSM_REF_UPSTREAM_BF16 (include/ssmops.h): only mamba3_mimo_bwd_fwd. */
int cli_op_has_ref_modes(const cli_op * op) {
    return op == &cli_op_mamba3_mimo_bwd_fwd;
}

const cli_op * cli_find_op(const char * name) {
    for (int i = 0; cli_ops[i]; ++i)
        if (strcmp(cli_ops[i]->name, name) == 0) return cli_ops[i];
    /* The C name works too: ssm_mamba2_scan. */
    if (strncmp(name, "ssm_", 4) == 0) return cli_find_op(name + 4);
    return NULL;
}

const ssm_op_info * cli_op_info(const cli_op * op) {
    return ssm_op_get(ssm_op_find(op->name));
}

int cli_arg_index(const cli_op * op, const char * name) {
    const ssm_op_info * info = cli_op_info(op);
    for (int i = 0; info != NULL && i < info->nargs; ++i)
        if (strcmp(info->args[i].name, name) == 0) return i;
    return -1;
}

cli_arg_kind cli_arg_kind_of(const cli_arg * arg) {
    if (arg->dtype_class == SSM_DTYPE_CLASS_INDEX) return CLI_ARG_INDEX;
    return (arg->flags & SSM_ARG_ACTIVATION) ? CLI_ARG_ACT : CLI_ARG_F32;
}

/* The index of `key` in keys (the operator's shape or param table, what = "shape" or
 * "param"). A key the operator code asks for but the table lacks is a bug in the table. */
static int key_index_checked(const cli_problem * pb, const cli_key * keys, const char * what, const char * key) {
    const int i = cli_key_index(keys, key);
    if (i >= 0) return i;
    fprintf(stderr, "ssmops: internal error: %s has no %s key '%s'\n", pb->op->name, what, key);
    abort();
}

/* Sets an integer value: the number, as double and as text. */
static void set_int_value(cli_value * v, int64_t value) {
    v->i = value;
    v->f = (double)value;
    snprintf(v->text, sizeof v->text, "%lld", (long long)value);
}

int64_t cli_shape(const cli_problem * pb, const char * key) {
    return pb->shape[key_index_checked(pb, pb->op->shape_keys, "shape", key)].i;
}

void cli_set_shape(cli_problem * pb, const char * key, int64_t value) {
    set_int_value(&pb->shape[key_index_checked(pb, pb->op->shape_keys, "shape", key)], value);
}

void cli_set_param_int(cli_problem * pb, const char * key, int64_t value) {
    set_int_value(&pb->param[key_index_checked(pb, pb->op->param_keys, "param", key)], value);
}

int cli_has_param(const cli_problem * pb, const char * key) {
    return cli_key_index(pb->op->param_keys, key) >= 0;
}

static const cli_value * param_value(const cli_problem * pb, const char * key) {
    return &pb->param[key_index_checked(pb, pb->op->param_keys, "param", key)];
}

int64_t cli_param_int(const cli_problem * pb, const char * key) {
    return param_value(pb, key)->i;
}

double cli_param_float(const cli_problem * pb, const char * key) {
    return param_value(pb, key)->f;
}

void cli_param_range(const cli_problem * pb, const char * key, double * lo, double * hi) {
    const cli_value * v = param_value(pb, key);
    *lo                 = v->lo;
    *hi                 = v->hi;
}

const char * cli_param_word(const cli_problem * pb, const char * key) {
    return param_value(pb, key)->text;
}

ssm_tensor cli_view(const cli_problem * pb, const char * name) {
    const int i = cli_arg_index(pb->op, name);
    if (i < 0) {
        fprintf(stderr, "ssmops: internal error: %s has no argument '%s'\n", pb->op->name, name);
        abort();
    }
    if (!pb->arg[i].mem) {
        ssm_tensor absent;
        memset(&absent, 0, sizeof absent);
        return absent;
    }
    return pb->arg[i].view;
}

void cli_args_struct(const cli_problem * pb, void * args) {
    memset(args, 0, pb->info->args_size);
    for (int i = 0; i < pb->info->nargs; ++i)
        if (pb->arg[i].mem) memcpy((char *)args + pb->info->args[i].offset, &pb->arg[i].view, sizeof(ssm_tensor));
}

cli_buf * cli_arg_buf(cli_problem * pb, const char * name) {
    const int i = cli_arg_index(pb->op, name);
    if (i < 0) {
        fprintf(stderr, "ssmops: internal error: %s has no argument '%s'\n", pb->op->name, name);
        abort();
    }
    return &pb->arg[i];
}

ssm_dtype cli_arg_dtype(const cli_problem * pb, const cli_arg * arg, int f64) {
    const cli_arg_kind kind = cli_arg_kind_of(arg);
    if (kind == CLI_ARG_INDEX) return SSM_DTYPE_I32;
    if (f64) return SSM_DTYPE_F64;
    if (kind != CLI_ARG_ACT) return SSM_DTYPE_F32;
    return cli_arg_is_output(arg) && pb->out_dtype >= 0 ? (ssm_dtype)pb->out_dtype : pb->dtype;
}

int cli_alloc_arg(cli_problem * pb, const char * name, int f64, int32_t ndim, const int64_t * shape) {
    const int i = cli_arg_index(pb->op, name);
    if (i < 0) return -1;
    return cli_buf_alloc(&pb->arg[i], cli_arg_dtype(pb, &pb->info->args[i], f64), ndim, shape);
}

static int set_defaults(const cli_key * keys, cli_value * values, char * err, size_t errlen) {
    for (int i = 0; keys && keys[i].name; ++i)
        if (cli_parse_value(&keys[i], keys[i].def, &values[i], err, errlen) != 0) return -1;
    return 0;
}

int cli_problem_init(cli_problem * pb, const cli_op * op, ssm_dtype dtype, int bench, const char * shape_list,
                     const char * param_list, char * err, size_t errlen) {
    memset(pb, 0, sizeof *pb);
    pb->op        = op;
    pb->info      = cli_op_info(op);
    pb->dtype     = dtype;
    pb->out_dtype = -1;
    if (set_defaults(op->shape_keys, pb->shape, err, errlen) != 0) return -1;
    if (set_defaults(op->param_keys, pb->param, err, errlen) != 0) return -1;
    if (bench) {
        if (cli_parse_kv(op->bench_shape, op->shape_keys, pb->shape, NULL, NULL, "shape", op->name, err, errlen) != 0) return -1;
        if (cli_parse_kv(op->bench_params, op->param_keys, pb->param, NULL, NULL, "param", op->name, err, errlen) != 0) return -1;
        for (int i = 0; i < CLI_MAX_KEYS; ++i) pb->shape[i].given = pb->param[i].given = 0;
    }
    if (cli_parse_kv(shape_list, op->shape_keys, pb->shape, NULL, NULL, "shape", op->name, err, errlen) != 0) return -1;
    if (cli_parse_kv(param_list, op->param_keys, pb->param, op->shape_keys, pb->shape, "param", op->name, err, errlen) != 0) return -1;
    return 0;
}

void cli_problem_free(cli_problem * pb) {
    for (int i = 0; i < CLI_MAX_ARGS; ++i) cli_buf_free(&pb->arg[i]);
}

static void format_values(const cli_key * keys, const cli_value * values, char * out, size_t len) {
    size_t used = 0;
    out[0]      = '\0';
    for (int i = 0; keys && keys[i].name && used < len; ++i) {
        const int n = snprintf(out + used, len - used, "%s%s=%s", i ? "," : "", keys[i].name, values[i].text);
        if (n < 0) break;
        used += (size_t)n;
    }
}

void cli_format_shape(const cli_problem * pb, char * out, size_t len) {
    format_values(pb->op->shape_keys, pb->shape, out, len);
}

void cli_format_params(const cli_problem * pb, char * out, size_t len) {
    format_values(pb->op->param_keys, pb->param, out, len);
}
