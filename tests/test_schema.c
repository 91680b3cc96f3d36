/*
 * test_schema.c — the operator schema (ssm_op_count / ssm_op_get / ssm_op_find) against the
 * public header, and the validation the library builds from it.
 *
 *  - every operator of the internal list (SSMI_OP_LIST) is there, in that order, found by
 *    name (with or without "ssm_"); the struct sizes are right;
 *  - each operator's args_size and params_size are those of its structs; its arguments are
 *    every field of the args struct in field order (offset i·sizeof(ssm_tensor)), spot
 *    checked against offsetof; names unique; inputs before outputs (but the inputs appended
 *    to a struct after its outputs, listed in appended_input);
 *  - roles, dtype classes, ranks and flags are in range; index tensors are inputs of rank 1
 *    or 2; each shape text's parenthesised lists have a rank the argument accepts; `needs`
 *    names an input of the same operator and belongs to an optional output; `in_place` names
 *    an input with the output's ranks; only mamba2_scan takes a workspace; REF and CPU run
 *    everything;
 *  - the validation built from the schema: every operator called with an empty args struct
 *    reports its first required input as missing (INVALID_ARGUMENT naming it), and a wrong
 *    rank on it as INVALID_SHAPE; the backend a context picks is checked before the schema.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ssmi.h"
#include "testutil.h"

/* sizeof each operator's args struct, in the internal list's order. */
static const size_t args_sizes[] = {
#define ARGS_SIZE_(name) sizeof(ssm_##name##_args),
    SSMI_OP_LIST(ARGS_SIZE_)
#undef ARGS_SIZE_
};

enum { CLI_MAX_ARGS = 48 }; /* tools/cli.h: the CLI holds at most this many arguments */

static int count_groups_ok(const ssm_arg_info * a) {
    /* every "(…)" list of the shape text has a rank the argument accepts */
    int groups = 0;
    for (const char * p = strchr(a->shape, '('); p != NULL; p = strchr(p + 1, '(')) {
        const char * close = strchr(p, ')');
        if (close == NULL) return 0;
        int items = 1;
        for (const char * q = p + 1; q < close; ++q) items += *q == ',';
        if (!((a->ranks >> items) & 1u)) return 0;
        ++groups;
        p = close;
    }
    return groups > 0;
}

static void test_list(void) {
    TEST_CHECK(ssm_op_count() == SSMI_OP_COUNT, "ssm_op_count() = %d, want %d", (int)ssm_op_count(),
               (int)SSMI_OP_COUNT);
    TEST_CHECK(ssm_op_get(-1) == NULL && ssm_op_get(ssm_op_count()) == NULL, "out-of-range ssm_op_get is NULL");
    TEST_CHECK(ssm_op_find("bogus") == -1 && ssm_op_find(NULL) == -1 && ssm_op_find("ssm_") == -1,
               "unknown names are -1");
    TEST_CHECK(ssm_op_info_struct_size() == sizeof(ssm_op_info), "ssm_op_info_struct_size");
    TEST_CHECK(ssm_arg_info_struct_size() == sizeof(ssm_arg_info), "ssm_arg_info_struct_size");
    for (int32_t i = 0; i < ssm_op_count(); ++i) {
        const ssm_op_info * op = ssm_op_get(i);
        TEST_CHECK(op != NULL && strcmp(op->name, ssmi_op_name((ssmi_op)i)) == 0, "op %d is %s", (int)i,
                   ssmi_op_name((ssmi_op)i));
        if (op == NULL) continue;
        char prefixed[64];
        snprintf(prefixed, sizeof prefixed, "ssm_%s", op->name);
        TEST_CHECK(ssm_op_find(op->name) == i && ssm_op_find(prefixed) == i, "%s: found by name", op->name);
    }
}

/* Inputs added to an args struct after its outputs: a struct only grows at its end. */
static int appended_input(const char * op, const char * arg) {
    static const char * const appended[][2] = {
        {"mamba3_mimo_bwd", "pregate_y"}, {"mamba3_mimo_bwd", "chunk_states"}, {"mamba3_siso_bwd", "pregate_y"},
        {"mamba3_siso_bwd", "chunk_states"}};
    for (size_t i = 0; i < sizeof appended / sizeof appended[0]; ++i)
        if (strcmp(op, appended[i][0]) == 0 && strcmp(arg, appended[i][1]) == 0) return 1;
    return 0;
}

static void test_op(int32_t i) {
    const ssm_op_info * op = ssm_op_get(i);
    const char *        n = op->name;
    TEST_CHECK(op->args_size == args_sizes[i], "%s: args_size %zu, sizeof %zu", n, op->args_size, args_sizes[i]);
    TEST_CHECK((size_t)op->nargs * sizeof(ssm_tensor) == op->args_size,
               "%s: %d arguments cover the whole args struct (%zu bytes)", n, (int)op->nargs, op->args_size);
    TEST_CHECK(op->nargs <= CLI_MAX_ARGS, "%s: %d arguments, more than the CLI holds", n, (int)op->nargs);
    TEST_CHECK(strncmp(op->params, "ssm_", 4) == 0 && strstr(op->params, "_params") != NULL, "%s: params %s", n,
               op->params);
    TEST_CHECK(op->workspace == (strcmp(n, "mamba2_scan") == 0), "%s: workspace %d", n, (int)op->workspace);
    const uint32_t host = (1u << SSM_BACKEND_REF) | (1u << SSM_BACKEND_CPU);
    TEST_CHECK((op->backends & host) == host && (op->backends & ~(host | (1u << SSM_BACKEND_CUDA))) == 0,
               "%s: backends %#x", n, (unsigned)op->backends);
    int outputs = 0;
    for (int32_t k = 0; k < op->nargs; ++k) {
        const ssm_arg_info * a = &op->args[k];
        const int            out = (a->role & SSM_ARG_ROLE_OUTPUT) != 0;
        TEST_CHECK(a->offset == (size_t)k * sizeof(ssm_tensor), "%s.%s: offset %zu is field %d's", n, a->name,
                   a->offset, (int)k);
        TEST_CHECK(a->role >= SSM_ARG_INPUT && a->role <= SSM_ARG_OPTIONAL_OUTPUT, "%s.%s: role %d", n, a->name,
                   (int)a->role);
        TEST_CHECK(a->dtype_class == SSM_DTYPE_CLASS_FLOAT || a->dtype_class == SSM_DTYPE_CLASS_INDEX,
                   "%s.%s: dtype class %d", n, a->name, (int)a->dtype_class);
        TEST_CHECK(a->ranks != 0 && (a->ranks >> (SSM_MAX_DIMS + 1)) == 0, "%s.%s: ranks %#x", n, a->name,
                   (unsigned)a->ranks);
        TEST_CHECK((a->flags & ~SSM_ARG_ACTIVATION) == 0, "%s.%s: flags %#x", n, a->name, (unsigned)a->flags);
        TEST_CHECK(a->shape != NULL && count_groups_ok(a), "%s.%s: shape '%s' fits its ranks", n, a->name,
                   a->shape ? a->shape : "(null)");
        if (a->dtype_class == SSM_DTYPE_CLASS_INDEX)
            TEST_CHECK(!out && (a->ranks & ~((1u << 1) | (1u << 2))) == 0 && !(a->flags & SSM_ARG_ACTIVATION),
                       "%s.%s: an index tensor is an input of rank 1 or 2", n, a->name);
        TEST_CHECK(!out || k + 1 == op->nargs || (op->args[k + 1].role & SSM_ARG_ROLE_OUTPUT) ||
                       appended_input(n, op->args[k + 1].name),
                   "%s.%s: inputs come before outputs", n, a->name);
        outputs += out;
        for (int32_t j = 0; j < k; ++j)
            TEST_CHECK(strcmp(op->args[j].name, a->name) != 0, "%s.%s: named twice", n, a->name);
        const int32_t      needs = a->needs ? (int32_t)(ssmi_op_arg((ssmi_op)i, a->needs) - op->args) : -1;
        const int32_t      pool = a->in_place ? (int32_t)(ssmi_op_arg((ssmi_op)i, a->in_place) - op->args) : -1;
        if (a->needs)
            TEST_CHECK(a->role == SSM_ARG_OPTIONAL_OUTPUT && ssmi_op_arg((ssmi_op)i, a->needs) != NULL &&
                           !(op->args[needs].role & SSM_ARG_ROLE_OUTPUT),
                       "%s.%s: needs %s, an input", n, a->name, a->needs);
        if (a->in_place)
            TEST_CHECK(a->role == SSM_ARG_OPTIONAL_OUTPUT && ssmi_op_arg((ssmi_op)i, a->in_place) != NULL &&
                           !(op->args[pool].role & SSM_ARG_ROLE_OUTPUT) && op->args[pool].ranks == a->ranks,
                       "%s.%s: in place of %s, an input of its ranks", n, a->name, a->in_place);
    }
    TEST_CHECK(outputs > 0, "%s: has outputs", n);
}

/* A few fields checked against offsetof, and the params sizes. */
static void test_spot_offsets(void) {
    static const struct {
        const char * op;
        const char * arg;
        size_t       offset;
    } spots[] = {
        {"mamba2_scan", "x", offsetof(ssm_mamba2_scan_args, x)},
        {"mamba2_scan", "final_states", offsetof(ssm_mamba2_scan_args, final_states)},
        {"mamba2_scan_bwd", "dinitial_states", offsetof(ssm_mamba2_scan_bwd_args, dinitial_states)},
        {"mamba3_mimo", "pregate_y", offsetof(ssm_mamba3_mimo_args, pregate_y)},
        {"mamba3_mimo_bwd", "pregate_y", offsetof(ssm_mamba3_mimo_bwd_args, pregate_y)},
        {"mamba3_mimo", "chunk_states", offsetof(ssm_mamba3_mimo_args, chunk_states)},
        {"mamba3_mimo_bwd", "chunk_states", offsetof(ssm_mamba3_mimo_bwd_args, chunk_states)},
        {"mamba3_siso", "chunk_states", offsetof(ssm_mamba3_siso_args, chunk_states)},
        {"mamba3_siso_bwd", "chunk_states", offsetof(ssm_mamba3_siso_bwd_args, chunk_states)},
        {"mamba2_step", "state_batch_indices", offsetof(ssm_mamba2_step_args, state_batch_indices)},
        {"causal_conv1d_update", "final_conv_state", offsetof(ssm_causal_conv1d_update_args, final_conv_state)},
        {"rmsnorm_gated_bwd", "dweight", offsetof(ssm_rmsnorm_gated_bwd_args, dweight)},
        {"mamba3_siso_step", "v_state", offsetof(ssm_mamba3_siso_step_args, v_state)},
        {"mamba3_mimo_bwd_fwd", "qk_dot", offsetof(ssm_mamba3_mimo_bwd_fwd_args, qk_dot)},
        {"mamba3_mimo_bwd", "doutproj_norm_weight", offsetof(ssm_mamba3_mimo_bwd_args, doutproj_norm_weight)},
    };
    for (size_t s = 0; s < sizeof spots / sizeof spots[0]; ++s) {
        const int32_t        i = ssm_op_find(spots[s].op);
        const ssm_arg_info * a = i >= 0 ? ssmi_op_arg((ssmi_op)i, spots[s].arg) : NULL;
        TEST_CHECK(a != NULL && a->offset == spots[s].offset, "%s.%s at offset %zu", spots[s].op, spots[s].arg,
                   spots[s].offset);
    }
    static const struct {
        const char * params;
        size_t       size;
    } params[] = {{"ssm_mamba2_params", sizeof(ssm_mamba2_params)},
                  {"ssm_conv1d_params", sizeof(ssm_conv1d_params)},
                  {"ssm_rmsnorm_params", sizeof(ssm_rmsnorm_params)},
                  {"ssm_mamba3_params", sizeof(ssm_mamba3_params)},
                  {"ssm_mamba3_mimo_params", sizeof(ssm_mamba3_mimo_params)}};
    for (int32_t i = 0; i < ssm_op_count(); ++i) {
        const ssm_op_info * op = ssm_op_get(i);
        int                 known = 0;
        for (size_t p = 0; p < sizeof params / sizeof params[0]; ++p)
            if (strcmp(op->params, params[p].params) == 0) {
                known = 1;
                TEST_CHECK(op->params_size == params[p].size, "%s: params_size %zu, sizeof(%s) %zu", op->name,
                           op->params_size, op->params, params[p].size);
            }
        TEST_CHECK(known, "%s: params %s", op->name, op->params);
    }
}

/* ---- the validation the schema gives ------------------------------------------------------- */

/* Initialised params of the operator's params struct, in a buffer big enough for any. */
typedef union any_params {
    ssm_mamba2_params      m2;
    ssm_conv1d_params      conv;
    ssm_rmsnorm_params     norm;
    ssm_mamba3_params      m3;
    ssm_mamba3_mimo_params mimo;
} any_params;

static void init_params(const ssm_op_info * op, any_params * p) {
    if (strcmp(op->params, "ssm_mamba2_params") == 0) ssm_mamba2_params_init(&p->m2);
    if (strcmp(op->params, "ssm_conv1d_params") == 0) ssm_conv1d_params_init(&p->conv);
    if (strcmp(op->params, "ssm_rmsnorm_params") == 0) ssm_rmsnorm_params_init(&p->norm);
    if (strcmp(op->params, "ssm_mamba3_params") == 0) ssm_mamba3_params_init(&p->m3);
    if (strcmp(op->params, "ssm_mamba3_mimo_params") == 0) ssm_mamba3_mimo_params_init(&p->mimo);
}

/* mamba2_scan's call takes a workspace: wrap it to the common shape. */
static ssm_status scan_no_ws(ssm_context * ctx, const ssm_mamba2_params * p, const ssm_mamba2_scan_args * a) {
    return ssm_mamba2_scan(ctx, p, a, NULL, 0);
}
#define ssm_mamba2_scan scan_no_ws

/* Calls operator i through its public function (params, args as void pointers). */
static ssm_status call(int32_t i, ssm_context * ctx, const void * p, const void * a) {
    switch ((ssmi_op)i) {
#define CALL_(name) \
    case SSMI_OP_##name: return ssm_##name(ctx, p, a);
        SSMI_OP_LIST(CALL_)
#undef CALL_
        default: return SSM_STATUS_INTERNAL;
    }
}
#undef ssm_mamba2_scan

static void test_validation(ssm_context * ref) {
    static float buf[64];
    for (int32_t i = 0; i < ssm_op_count(); ++i) {
        const ssm_op_info * op = ssm_op_get(i);
        any_params          p;
        unsigned char       args[CLI_MAX_ARGS * sizeof(ssm_tensor)];
        init_params(op, &p);
        memset(args, 0, sizeof args);
        const ssm_arg_info * first = NULL;
        for (int32_t k = 0; k < op->nargs && first == NULL; ++k)
            if (op->args[k].role == SSM_ARG_INPUT) first = &op->args[k];
        if (first == NULL) continue;
        ssm_status st = call(i, ref, &p, args);
        TEST_CHECK(st == SSM_STATUS_INVALID_ARGUMENT && strstr(ssm_context_last_error(ref), first->name) != NULL,
                   "%s with no tensors: %s (%s), want INVALID_ARGUMENT naming %s", op->name, ssm_status_string(st),
                   ssm_context_last_error(ref), first->name);
        /* the first required input present with a rank it does not accept */
        int32_t bad = 0;
        while (bad <= SSM_MAX_DIMS && ((first->ranks >> bad) & 1u)) ++bad;
        const int64_t shape[SSM_MAX_DIMS + 1] = {1, 1, 1, 1, 1, 1, 1};
        ssm_tensor    t = ssm_tensor_make(buf, first->dtype_class == SSM_DTYPE_CLASS_INDEX ? SSM_DTYPE_I32
                                                                                           : SSM_DTYPE_F32,
                                          bad, shape);
        memcpy(args + first->offset, &t, sizeof t);
        st = call(i, ref, &p, args);
        TEST_CHECK(st == SSM_STATUS_INVALID_SHAPE && strstr(ssm_context_last_error(ref), first->name) != NULL,
                   "%s with %s of rank %d: %s (%s)", op->name, first->name, (int)bad, ssm_status_string(st),
                   ssm_context_last_error(ref));
        /* params NULL and args NULL come first, for every operator */
        TEST_CHECK(call(i, ref, NULL, args) == SSM_STATUS_INVALID_ARGUMENT &&
                       strstr(ssm_context_last_error(ref), "params") != NULL,
                   "%s: params NULL", op->name);
        TEST_CHECK(call(i, ref, &p, NULL) == SSM_STATUS_INVALID_ARGUMENT &&
                       strstr(ssm_context_last_error(ref), "args") != NULL,
                   "%s: args NULL", op->name);
    }
}

int main(void) {
    test_list();
    for (int32_t i = 0; i < ssm_op_count(); ++i) test_op(i);
    test_spot_offsets();
    ssm_context * ref = ssmt_make_ctx(SSM_BACKEND_REF, 1, SSM_ISA_AUTO);
    TEST_CHECK(ref != NULL, "a REF context");
    if (ref != NULL) test_validation(ref);
    ssm_context_free(ref);
    TEST_EXIT();
}
