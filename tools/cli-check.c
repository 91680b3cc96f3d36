/*
 * cli-check.c — `ssmops check OP`: run a backend on seeded inputs and compare every output
 * with the float64 reference run on float64 copies of the same inputs (DESIGN §5 bars).
 *
 * Outputs of the backend under test are poisoned with NaN first, so an element it never
 * writes fails; a NaN/Inf the reference does not have fails too.
 */
#define _XOPEN_SOURCE 700

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* An output borrowed from an input (a state pool updated in place) keeps the input's
 * values: the operator reads them. */
static void poison_outputs(cli_problem * pb) {
    for (int i = 0; pb->op->args[i].name; ++i)
        if (pb->op->args[i].output && pb->arg[i].mem && !pb->arg[i].borrowed) cli_fill(&pb->arg[i].view, NAN);
}

/* Runs the operator on pb with a fresh context; allocates the workspace it asks for. */
static int run_op(const cli_problem * pb, ssm_backend backend, int threads, const char * label) {
    ssm_context * ctx = NULL;
    ssm_status    st  = cli_context_create(backend, threads, &ctx);
    if (st != SSM_STATUS_OK) return cli_lib_error(NULL, st, "creating the context");
    void * ws  = NULL;
    size_t wsz = 0;
    if (pb->op->workspace_size) {
        st = pb->op->workspace_size(ctx, pb, &wsz);
        if (st == SSM_STATUS_OK && wsz > 0 && !(ws = cli_alloc(wsz))) {
            ssm_context_free(ctx);
            return cli_fail("%s: cannot allocate %zu bytes of workspace", pb->op->name, wsz);
        }
    }
    if (st == SSM_STATUS_OK) st = pb->op->call(ctx, pb, ws, wsz);
    int rc = CLI_EXIT_OK;
    if (st != SSM_STATUS_OK) {
        char what[128];
        snprintf(what, sizeof what, "%s (%s backend)", pb->op->name, label);
        rc = cli_lib_error(ctx, st, what);
    }
    free(ws);
    ssm_context_free(ctx);
    return rc;
}

/* The same problem with every float input copied to f64 (same values) and f64 outputs. */
static int make_f64_twin(const cli_problem * pb, cli_problem * twin, char * err, size_t errlen) {
    memset(twin, 0, sizeof *twin);
    twin->op    = pb->op;
    twin->dtype     = pb->dtype;
    twin->out_dtype = pb->out_dtype;
    memcpy(twin->shape, pb->shape, sizeof pb->shape);
    memcpy(twin->param, pb->param, sizeof pb->param);
    for (int i = 0; pb->op->args[i].name; ++i) {
        if (pb->op->args[i].output || !pb->arg[i].mem) continue;
        const ssm_tensor * src   = &pb->arg[i].view;
        const ssm_dtype    dtype = cli_is_float((ssm_dtype)src->dtype) ? SSM_DTYPE_F64 : (ssm_dtype)src->dtype;
        if (cli_buf_clone(&twin->arg[i], src, dtype) != 0) {
            snprintf(err, errlen, "out of memory for the reference inputs");
            return -1;
        }
    }
    return pb->op->alloc_outputs(twin, 1, err, errlen);
}

/* One check: prints a header and one line per output; returns an exit status. */
static int check_case(const cli_options * opt, const cli_op * op, const char * shape, const char * params) {
    char        err[CLI_ERR_LEN];
    cli_problem pb, ref;
    memset(&ref, 0, sizeof ref);
    if (cli_problem_init(&pb, op, opt->dtype, 0, shape, params, err, sizeof err) != 0 ||
        (op->validate && op->validate(&pb, err, sizeof err) != 0)) {
        cli_problem_free(&pb);
        return cli_usage_error("%s", err);
    }
    /* Activation outputs default to f32: the bars measure the computation in the compute
     * dtype; the final rounding of a heavy-tailed output (y·silu(z)) to f16/bf16 alone can
     * exceed max_rel. --out-dtype same|f16|bf16 checks the stored outputs instead. */
    pb.out_dtype      = opt->out_dtype_given ? opt->out_dtype : (int32_t)SSM_DTYPE_F32;
    const int threads = opt->threads > 0 ? opt->threads : cli_default_threads();
    int       rc      = CLI_EXIT_OK;
    if (op->generate(&pb, opt->seed, err, sizeof err) != 0 || op->alloc_outputs(&pb, 0, err, sizeof err) != 0) {
        rc = cli_fail("%s: %s", op->name, err);
        goto done;
    }
    char shape_text[256], param_text[512];
    cli_format_shape(&pb, shape_text, sizeof shape_text);
    cli_format_params(&pb, param_text, sizeof param_text);
    printf("# %s backend=%s dtype=%s out_dtype=%s threads=%d seed=%llu shape=%s params=%s\n", op->name,
           ssm_backend_name(opt->backend), ssm_dtype_name(pb.dtype),
           ssm_dtype_name(pb.out_dtype >= 0 ? (ssm_dtype)pb.out_dtype : pb.dtype), threads,
           (unsigned long long)opt->seed, shape_text, param_text[0] ? param_text : "-");
    fflush(stdout);

    /* The twin copies the inputs before the backend runs: an operator that updates a state
     * pool in place changes its input. */
    if (make_f64_twin(&pb, &ref, err, sizeof err) != 0) {
        rc = cli_fail("%s: %s", op->name, err);
        goto done;
    }
    poison_outputs(&pb);
    rc = run_op(&pb, opt->backend, threads, ssm_backend_name(opt->backend));
    if (rc != CLI_EXIT_OK) goto done;
    poison_outputs(&ref);
    rc = run_op(&ref, SSM_BACKEND_REF, 1, "ref");
    if (rc != CLI_EXIT_OK) goto done;

    const cli_bar bar = cli_bar_for(pb.dtype);
    for (int i = 0; op->args[i].name; ++i) {
        if (!op->args[i].output || !pb.arg[i].mem) continue;
        cli_diff diff;
        cli_compare(&pb.arg[i].view, &ref.arg[i].view, &diff);
        const int pass = cli_diff_passes(&diff, bar);
        printf("%-16s %.3e %.3e %.0e/%.0e %s", op->args[i].name, diff.rel_rms, diff.max_rel, bar.rel_rms,
               bar.max_rel, pass ? "PASS" : "FAIL");
        if (diff.nonfinite) printf("  (%lld non-finite or unwritten elements)", (long long)diff.nonfinite);
        if (!pass && diff.count > 0) {
            const ssm_tensor * y = &pb.arg[i].view, *r = &ref.arg[i].view;
            printf("  worst at flat index %lld: got %.9g, reference %.17g", (long long)diff.worst,
                   cli_get(y, cli_offset(y, diff.worst)), cli_get(r, cli_offset(r, diff.worst)));
        }
        printf("\n");
        if (!pass) rc = CLI_EXIT_FAIL;
    }
    fflush(stdout);
done:
    cli_problem_free(&pb);
    cli_problem_free(&ref);
    return rc;
}

/* "shape;params" of a built-in case. */
static int run_builtin_case(const cli_options * opt, const cli_op * op, const char * text) {
    char         shape[256];
    const char * semi = strchr(text, ';');
    const size_t n    = semi ? (size_t)(semi - text) : strlen(text);
    if (n >= sizeof shape) return cli_fail("internal error: case too long: %s", text);
    memcpy(shape, text, n);
    shape[n] = '\0';
    return check_case(opt, op, shape, semi ? semi + 1 : "");
}

static int check_op(const cli_options * opt, const cli_op * op, int * cases, int * failed) {
    int worst = CLI_EXIT_OK;
    if (!opt->all_shapes) {
        ++*cases;
        const int rc = check_case(opt, op, opt->shape, opt->params);
        if (rc != CLI_EXIT_OK) ++*failed;
        return rc;
    }
    int count = 0;
    while (op->cases && op->cases[count]) ++count;
    for (int i = 0; i < count; ++i) {
        cli_progress("%s case %d/%d", op->name, i + 1, count);
        const int rc = run_builtin_case(opt, op, op->cases[i]);
        ++*cases;
        if (rc != CLI_EXIT_OK) ++*failed;
        if (rc > worst) worst = rc;
    }
    cli_progress("%s", "");
    return worst;
}

int cli_cmd_check(const cli_options * opt) {
    if (opt->all_shapes && (opt->shape || opt->params))
        return cli_usage_error("check --all-shapes runs built-in shapes; drop --shape/--param");
    int cases = 0, failed = 0, worst = CLI_EXIT_OK;
    if (strcmp(opt->op, "all") == 0) {
        if (opt->shape || opt->params) return cli_usage_error("check all takes no --shape/--param");
        for (int i = 0; cli_ops[i]; ++i) {
            const int rc = check_op(opt, cli_ops[i], &cases, &failed);
            if (rc > worst) worst = rc;
        }
    } else {
        const cli_op * op = cli_find_op(opt->op);
        if (!op) return cli_usage_error("unknown operator '%s' (ssmops list shows them)", opt->op);
        worst = check_op(opt, op, &cases, &failed);
    }
    if (cases > 1) printf("# %d case(s), %d failed\n", cases, failed);
    return failed ? (worst == CLI_EXIT_USAGE ? CLI_EXIT_USAGE : CLI_EXIT_FAIL) : CLI_EXIT_OK;
}
