/*
 * cli-run.c — `ssmops run OP --in DIR --out DIR`: read DIR/<arg>.npy for every input the
 * operator has, run it, write DIR/<output>.npy. Also the developer tool `ssmops compare`.
 *
 * numpy has no bf16, so float inputs arrive as float32 files holding representable values;
 * activations are converted to --dtype (what the operator computes in), parameters, states
 * and intermediates to fp32, index tensors stay int32/int64. Outputs are written as float32,
 * or float64 for the reference backend (which then computes straight into f64 tensors, so
 * `run --backend ref` reproduces float64 golden outputs). A state pool the operator updates
 * in place (decode steps) is written as final_<name>.npy. --ref-mode bf16 runs
 * mamba3_mimo_bwd_fwd (either backend) in the upstream bf16 rounding model (ctx ref_mode).
 */
#define _XOPEN_SOURCE 700

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "cli.h"
#include "npy.h"

static int npy_dtype(const char * code, ssm_dtype * out) {
    static const struct {
        const char * code;
        ssm_dtype    dtype;
    } map[] = {{"f2", SSM_DTYPE_F16}, {"f4", SSM_DTYPE_F32}, {"f8", SSM_DTYPE_F64}, {"i4", SSM_DTYPE_I32},
               {"i8", SSM_DTYPE_I64}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; ++i)
        if (strcmp(code, map[i].code) == 0) {
            *out = map[i].dtype;
            return 0;
        }
    return -1;
}

/* Reads a .npy file into a contiguous buffer of `want` dtype (0 = keep the file's). */
static int load_npy(const char * path, int keep_dtype, ssm_dtype want, cli_buf * buf, char * err, size_t errlen) {
    ssmnpy_array arr;
    memset(&arr, 0, sizeof arr);
    if (ssmnpy_read(path, &arr, err, errlen) != 0) return -1;
    ssm_dtype file_dtype;
    int       rc = -1;
    if (npy_dtype(arr.dtype, &file_dtype) != 0) {
        snprintf(err, errlen, "%s: unsupported dtype '%s'", path, arr.dtype);
    } else if (arr.ndim < 0 || arr.ndim > SSM_MAX_DIMS) {
        snprintf(err, errlen, "%s: %d dimensions (at most %d)", path, (int)arr.ndim, SSM_MAX_DIMS);
    } else if (keep_dtype && cli_is_float(file_dtype)) {
        snprintf(err, errlen, "%s: an index tensor must be int32 or int64, found '%s'", path, arr.dtype);
    } else if (!keep_dtype && !cli_is_float(file_dtype)) {
        snprintf(err, errlen, "%s: a float tensor was expected, found '%s'", path, arr.dtype);
    } else {
        const ssm_dtype  dtype = keep_dtype ? file_dtype : want;
        const ssm_tensor src   = ssm_tensor_make(arr.data, file_dtype, arr.ndim, arr.shape);
        if (cli_buf_alloc(buf, dtype, arr.ndim, arr.shape) != 0) {
            snprintf(err, errlen, "%s: out of memory", path);
        } else {
            cli_copy(&buf->view, &src);
            rc = 0;
        }
    }
    ssmnpy_free(&arr);
    return rc;
}

/* Writes a buffer's memory (its .npy order) as float32, or float64 for f64 buffers. */
static int write_npy(const char * path, const cli_buf * buf, char * err, size_t errlen) {
    const int64_t    n       = cli_numel(buf->mem_ndim, buf->mem_shape);
    const int        f64     = buf->view.dtype == SSM_DTYPE_F64;
    const ssm_tensor mem     = ssm_tensor_make(buf->mem, (ssm_dtype)buf->view.dtype, buf->mem_ndim, buf->mem_shape);
    void *           data    = cli_alloc((size_t)n * (f64 ? 8 : 4));
    if (!data) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    const ssm_tensor out = ssm_tensor_make(data, f64 ? SSM_DTYPE_F64 : SSM_DTYPE_F32, buf->mem_ndim, buf->mem_shape);
    cli_copy(&out, &mem);
    const int rc = ssmnpy_write(path, f64 ? "f8" : "f4", buf->mem_ndim, buf->mem_shape, data, err, errlen);
    free(data);
    return rc;
}

/* mkdir -p */
static int make_dirs(const char * path) {
    char   tmp[4096];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof tmp) return -1;
    memcpy(tmp, path, len + 1);
    for (char * p = tmp + 1; *p; ++p) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -1;
    struct stat st;
    return stat(tmp, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

static void shape_text(const cli_buf * buf, char * out, size_t len) {
    size_t used = (size_t)snprintf(out, len, "(");
    for (int32_t i = 0; i < buf->mem_ndim && used < len; ++i)
        used += (size_t)snprintf(out + used, len - used, "%s%lld", i ? "," : "", (long long)buf->mem_shape[i]);
    if (used < len) snprintf(out + used, len - used, ")");
}

int cli_cmd_run(const cli_options * opt) {
    const cli_op * op = cli_find_op(opt->op);
    if (!op) return cli_usage_error("unknown operator '%s' (ssmops list shows them)", opt->op);
    if (!opt->in_dir || !opt->out_dir) return cli_usage_error("run needs --in DIR and --out DIR");
    if (opt->shape) return cli_usage_error("run takes its shapes from the input files; drop --shape");
    if (opt->ref_mode >= 0 && !cli_op_has_ref_modes(op))
        return cli_usage_error("--ref-mode: %s has one rounding model (only mamba3_mimo_bwd_fwd has two)", op->name);

    char        err[CLI_ERR_LEN + 4096], path[4096];
    cli_problem pb;
    if (cli_problem_init(&pb, op, opt->dtype, 0, NULL, opt->params, err, sizeof err) != 0) {
        cli_problem_free(&pb);
        return cli_usage_error("%s", err);
    }
    int           rc  = CLI_EXIT_FAIL;
    ssm_context * ctx = NULL;
    void *        ws  = NULL;
    for (int i = 0; i < pb.info->nargs; ++i) {
        const cli_arg * arg = &pb.info->args[i];
        if (cli_arg_is_output(arg)) continue;
        snprintf(path, sizeof path, "%s/%s.npy", opt->in_dir, arg->name);
        if (access(path, F_OK) != 0) {
            if (cli_arg_is_optional(arg)) continue;
            rc = cli_fail("%s: required input %s is missing", op->name, path);
            goto done;
        }
        if (load_npy(path, cli_arg_kind_of(arg) == CLI_ARG_INDEX, cli_arg_dtype(&pb, arg, 0), &pb.arg[i], err,
                     sizeof err) != 0) {
            rc = cli_fail("%s", err);
            goto done;
        }
    }
    const int ref = opt->backend == SSM_BACKEND_REF;
    if (op->bind(&pb, err, sizeof err) != 0 || op->alloc_outputs(&pb, ref, err, sizeof err) != 0) {
        rc = cli_fail("%s", err);
        goto done;
    }
    for (int i = 0; i < pb.info->nargs; ++i)
        if (cli_arg_is_output(&pb.info->args[i]) && pb.arg[i].mem && !pb.arg[i].borrowed)
            cli_fill(&pb.arg[i].view, NAN);

    ssm_status st =
        cli_context_create_mode(opt->backend, opt->threads, opt->ref_mode >= 0 ? opt->ref_mode : SSM_REF_EXACT, &ctx);
    if (st != SSM_STATUS_OK) {
        rc = cli_lib_error(NULL, st, "creating the context");
        goto done;
    }
    size_t wsz = 0;
    if (opt->backend == SSM_BACKEND_CUDA) { /* device copies of the buffers (cli-cuda.c) */
        cli_progress("running %s", op->name);
        rc = cli_cuda_run(ctx, &pb, op->name);
        cli_progress("%s", "");
        if (rc != CLI_EXIT_OK) goto done;
    } else if (op->workspace_size) {
        st = op->workspace_size(ctx, &pb, &wsz);
        if (st != SSM_STATUS_OK) {
            rc = cli_lib_error(ctx, st, op->name);
            goto done;
        }
        if (wsz > 0 && !(ws = cli_alloc(wsz))) {
            rc = cli_fail("%s: cannot allocate %zu bytes of workspace", op->name, wsz);
            goto done;
        }
    }
    if (opt->backend != SSM_BACKEND_CUDA) {
        cli_progress("running %s", op->name);
        st = op->call(ctx, &pb, ws, wsz);
        cli_progress("%s", "");
        if (st != SSM_STATUS_OK) {
            rc = cli_lib_error(ctx, st, op->name);
            goto done;
        }
    }
    if (make_dirs(opt->out_dir) != 0) {
        rc = cli_fail("cannot create the output directory %s: %s", opt->out_dir, strerror(errno));
        goto done;
    }
    for (int i = 0; i < pb.info->nargs; ++i) {
        if (!cli_arg_is_output(&pb.info->args[i]) || !pb.arg[i].mem) continue;
        snprintf(path, sizeof path, "%s/%s.npy", opt->out_dir, pb.info->args[i].name);
        if (write_npy(path, &pb.arg[i], err, sizeof err) != 0) {
            rc = cli_fail("%s", err);
            goto done;
        }
        char dims[128];
        shape_text(&pb.arg[i], dims, sizeof dims);
        printf("wrote %s %s %s\n", path, dims, pb.arg[i].view.dtype == SSM_DTYPE_F64 ? "float64" : "float32");
    }
    rc = CLI_EXIT_OK;
done:
    free(ws);
    ssm_context_free(ctx);
    cli_problem_free(&pb);
    return rc;
}

/* ---- ssmops compare A.npy B.npy: developer tool used by the CLI tests --------------------- */

int cli_cmd_compare(const cli_options * opt) {
    if (!opt->files[0] || !opt->files[1]) return cli_usage_error("compare needs two .npy files");
    if (!opt->dtype_given && opt->tol <= 0 && opt->max_rel <= 0)
        return cli_usage_error("compare needs --tol X (rel_rms bar), --max-rel Y and/or --dtype T (the bars of docs/ACCURACY.md)");
    cli_bar bar = {INFINITY, INFINITY};
    if (opt->dtype_given) bar = cli_bar_for(opt->dtype);
    if (opt->tol > 0) bar.rel_rms = opt->tol;
    if (opt->max_rel > 0) bar.max_rel = opt->max_rel;

    char    err[CLI_ERR_LEN];
    cli_buf a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    int rc = CLI_EXIT_FAIL;
    if (load_npy(opt->files[0], 0, SSM_DTYPE_F64, &a, err, sizeof err) != 0 ||
        load_npy(opt->files[1], 0, SSM_DTYPE_F64, &b, err, sizeof err) != 0) {
        rc = cli_fail("%s", err);
    } else if (!cli_same_shape(&a.view, &b.view)) {
        char sa[128], sb[128];
        shape_text(&a, sa, sizeof sa);
        shape_text(&b, sb, sizeof sb);
        rc = cli_fail("compare: shapes differ: %s %s vs %s %s", opt->files[0], sa, opt->files[1], sb);
    } else {
        cli_diff diff;
        cli_compare(&a.view, &b.view, &diff);
        const int pass = cli_diff_passes(&diff, bar);
        printf("%s vs %s: rel_rms %.3e max_rel %.3e bar %.1e/%.1e %s", opt->files[0], opt->files[1], diff.rel_rms,
               diff.max_rel, bar.rel_rms, bar.max_rel, pass ? "PASS" : "FAIL");
        if (diff.nonfinite) printf(" (%lld non-finite)", (long long)diff.nonfinite);
        printf("\n");
        rc = pass ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    }
    cli_buf_free(&a);
    cli_buf_free(&b);
    return rc;
}
