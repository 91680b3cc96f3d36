/*
 * cli-bench.c — `ssmops bench OP` (DESIGN §6): warm up, repeat (until ≥ 1 s and ≥ 5 reps,
 * or exactly --reps), report median / min / max seconds, tokens/s, GFLOP/s and GB/s from the
 * spec's cost model, each against the machine's ceilings measured for the same thread count,
 * plus the workspace bytes and the peak resident memory.
 *
 * The peak RSS is read before the ceilings run, whose copy buffers would otherwise dominate.
 */
#define _XOPEN_SOURCE 700

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"

#define BENCH_MIN_SECONDS 1.0
#define BENCH_MIN_REPS    5
#define BENCH_MAX_REPS    100000
#define BENCH_WARMUP_CALLS   3
#define BENCH_WARMUP_SECONDS 0.2

static int cmp_double(const void * a, const void * b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bench_result {
    double  median_s, min_s, max_s;
    int     reps;
    size_t  workspace_bytes;
    int64_t max_rss_bytes;
} bench_result;

/* Times the call; returns an exit status. */
static int time_op(const cli_problem * pb, ssm_context * ctx, int fixed_reps, bench_result * res) {
    const cli_op * op  = pb->op;
    void *         ws  = NULL;
    size_t         wsz = 0;
    ssm_status     st  = SSM_STATUS_OK;
    if (op->workspace_size) {
        st = op->workspace_size(ctx, pb, &wsz);
        if (st != SSM_STATUS_OK) return cli_lib_error(ctx, st, op->name);
        if (wsz > 0 && !(ws = cli_alloc(wsz)))
            return cli_fail("%s: cannot allocate %zu bytes of workspace", op->name, wsz);
    }
    res->workspace_bytes = wsz;
    /* Warm-up: first touch of the outputs and workspace, thread wake-up, caches, clocks:
     * one call with --reps, else up to BENCH_WARMUP_CALLS calls or BENCH_WARMUP_SECONDS. */
    const double warm_start = cli_now();
    for (int i = 0; i < (fixed_reps > 0 ? 1 : BENCH_WARMUP_CALLS) && st == SSM_STATUS_OK; ++i) {
        st = op->call(ctx, pb, ws, wsz);
        if (cli_now() - warm_start >= BENCH_WARMUP_SECONDS) break;
    }
    if (st != SSM_STATUS_OK) {
        free(ws);
        return cli_lib_error(ctx, st, op->name);
    }
    size_t   cap   = 64;
    double * times = malloc(cap * sizeof *times);
    int      n     = 0;
    double   total = 0.0;
    while (times) {
        if (fixed_reps > 0 ? n >= fixed_reps
                           : (n >= BENCH_MIN_REPS && total >= BENCH_MIN_SECONDS) || n >= BENCH_MAX_REPS)
            break;
        if ((size_t)n == cap) {
            double * grown = realloc(times, 2 * cap * sizeof *times);
            if (!grown) break;
            times = grown;
            cap *= 2;
        }
        const double t0 = cli_now();
        st              = op->call(ctx, pb, ws, wsz);
        const double t  = cli_now() - t0;
        if (st != SSM_STATUS_OK) break;
        times[n++] = t;
        total += t;
        cli_progress("%s: %d reps, %.2f s", op->name, n, total);
    }
    cli_progress("%s", "");
    free(ws);
    if (st != SSM_STATUS_OK) {
        free(times);
        return cli_lib_error(ctx, st, op->name);
    }
    if (!times || n == 0) {
        free(times);
        return cli_fail("out of memory");
    }
    qsort(times, (size_t)n, sizeof *times, cmp_double);
    res->reps     = n;
    res->min_s    = times[0];
    res->max_s    = times[n - 1];
    res->median_s = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
    free(times);
    struct rusage ru;
    res->max_rss_bytes = getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : -1;
    return CLI_EXIT_OK;
}

static int has_shape(const cli_problem * pb, const char * key) {
    return cli_key_index(pb->op->shape_keys, key) >= 0;
}

/* Tokens one call processes: B·S for sequence operators, M rows for row-wise ones
 * (rmsnorm), B for decode steps (one token per batch row). */
static double tokens_per_call(const cli_problem * pb) {
    if (has_shape(pb, "S")) return (double)(cli_shape(pb, "B") * cli_shape(pb, "S"));
    if (has_shape(pb, "M")) return (double)cli_shape(pb, "M");
    return has_shape(pb, "B") ? (double)cli_shape(pb, "B") : 1.0;
}

static void json_object_of(FILE * f, const cli_key * keys, const cli_value * values, int numeric_ints) {
    fputc('{', f);
    for (int i = 0; keys[i].name; ++i) {
        fprintf(f, "%s\"%s\": ", i ? ", " : "", keys[i].name);
        if (numeric_ints && keys[i].type == CLI_KEY_INT)
            fprintf(f, "%lld", (long long)values[i].i);
        else
            fprintf(f, "\"%s\"", values[i].text); /* values are validated words/numbers: no escaping needed */
    }
    fputc('}', f);
}

static int write_json(const char * path, const cli_problem * pb, const char * backend, int threads,
                      const bench_result * r, double tokens_s, double gflops, double gbps, const cli_ceilings * c) {
    FILE * f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "[\n  {\"op\": \"%s\", \"backend\": \"%s\", \"dtype\": \"%s\", \"shape\": ", pb->op->name, backend,
            ssm_dtype_name(pb->dtype));
    json_object_of(f, pb->op->shape_keys, pb->shape, 1);
    fprintf(f, ", \"params\": ");
    json_object_of(f, pb->op->param_keys, pb->param, 1);
    fprintf(f,
            ", \"threads\": %d, \"reps\": %d, \"median_s\": %.9g, \"min_s\": %.9g, \"max_s\": %.9g, "
            "\"tokens_per_s\": %.6g, \"gflop\": %.6g, \"gflops\": %.6g, \"gbytes\": %.6g, \"gbps\": %.6g, "
            "\"fma_peak_gflops\": %.6g, \"copy_bw_gbps\": %.6g, \"peak_fraction\": %.6g, \"bw_fraction\": %.6g, "
            "\"workspace_bytes\": %zu, \"max_rss_bytes\": %lld, \"version\": \"%s\"}\n]\n",
            threads, r->reps, r->median_s, r->min_s, r->max_s, tokens_s, pb->op->flops(pb) * 1e-9, gflops,
            pb->op->bytes(pb) * 1e-9, gbps, c->fma_gflops, c->copy_gbps, c->fma_gflops > 0 ? gflops / c->fma_gflops : 0.0,
            c->copy_gbps > 0 ? gbps / c->copy_gbps : 0.0, r->workspace_bytes, (long long)r->max_rss_bytes,
            ssm_version());
    return fclose(f);
}

int cli_cmd_bench(const cli_options * opt) {
    if (opt->ceilings) {
        if (opt->op) return cli_usage_error("bench --ceilings takes no operator");
        return opt->backend == SSM_BACKEND_CUDA ? cli_cuda_ceilings(opt) : cli_cmd_ceilings(opt);
    }
    if (!opt->op) return cli_usage_error("bench needs an operator or --ceilings");
    const cli_op * op = cli_find_op(opt->op);
    if (!op) return cli_usage_error("unknown operator '%s' (ssmops list shows them)", opt->op);
    ssm_dtype dtype = opt->dtype;
    if (!opt->dtype_given && op->bench_dtype) cli_parse_dtype(op->bench_dtype, &dtype);

    char        err[CLI_ERR_LEN];
    cli_problem pb;
    if (cli_problem_init(&pb, op, dtype, 1, opt->shape, opt->params, err, sizeof err) != 0 ||
        (op->validate && op->validate(&pb, err, sizeof err) != 0)) {
        cli_problem_free(&pb);
        return cli_usage_error("%s", err);
    }
    const int     threads = opt->threads > 0 ? opt->threads : cli_default_threads();
    ssm_context * ctx     = NULL;
    int           rc      = CLI_EXIT_FAIL;
    cli_progress("%s: making inputs", op->name);
    if (op->generate(&pb, opt->seed, err, sizeof err) != 0 || op->alloc_outputs(&pb, 0, err, sizeof err) != 0) {
        rc = cli_fail("%s: %s", op->name, err);
        goto done;
    }
    const ssm_status st = cli_context_create(opt->backend, threads, &ctx);
    if (st != SSM_STATUS_OK) {
        rc = cli_lib_error(NULL, st, "creating the context");
        goto done;
    }
    if (opt->variant != NULL) {
        const ssm_status vs = ssm_context_set_variant(ctx, op->name, opt->variant);
        if (vs != SSM_STATUS_OK) {
            rc = cli_lib_error(ctx, vs, "--variant");
            goto done;
        }
    }
    if (opt->backend == SSM_BACKEND_CUDA) { /* CUDA events on device copies (cli-cuda.c) */
        rc = cli_cuda_bench(opt, &pb, ctx, tokens_per_call(&pb));
        if (rc == CLI_EXIT_OK && ssm_context_last_variant(ctx)[0] != '\0')
            printf("  variant     %s (the selection-table entry that ran)\n", ssm_context_last_variant(ctx));
        goto done;
    }
    bench_result res;
    memset(&res, 0, sizeof res);
    rc = time_op(&pb, ctx, opt->reps, &res);
    if (rc != CLI_EXIT_OK) goto done;

    cli_ceilings ceil;
    memset(&ceil, 0, sizeof ceil);
    if (cli_measure_ceilings(threads, 1, opt->buffer_mib > 0 ? opt->buffer_mib : 256, &ceil) != 0)
        fprintf(stderr, "ssmops: warning: could not measure the ceilings; fractions are 0\n");

    const double tokens   = tokens_per_call(&pb);
    const double tokens_s = tokens / res.median_s;
    const double gflops   = op->flops(&pb) / res.median_s * 1e-9;
    const double gbps     = op->bytes(&pb) / res.median_s * 1e-9;
    char         shape_text[256], param_text[512];
    cli_format_shape(&pb, shape_text, sizeof shape_text);
    cli_format_params(&pb, param_text, sizeof param_text);
    const char * backend = ssm_backend_name(opt->backend);
    printf("%s  backend=%s isa=%s dtype=%s threads=%d\n", op->name, backend, ssm_isa_name(ssm_context_isa(ctx)),
           ssm_dtype_name(pb.dtype), threads);
    printf("  shape       %s\n", shape_text);
    printf("  params      %s\n", param_text[0] ? param_text : "-");
    printf("  time        median %.4f ms  min %.4f ms  max %.4f ms  (%d reps)\n", res.median_s * 1e3,
           res.min_s * 1e3, res.max_s * 1e3, res.reps);
    printf("  tokens/s    %.1f\n", tokens_s);
    /* Decode steps: latency per token is what a serving stack budgets. */
    if (!has_shape(&pb, "S") && !has_shape(&pb, "M"))
        printf("  per token   %.3f us  (%.3f us per call of %.0f token(s))\n", res.median_s * 1e6 / tokens,
               res.median_s * 1e6, tokens);
    printf("  GFLOP/s     %.2f  (%.1f%% of FMA peak %.1f GFLOP/s; %.4g GFLOP per call)\n", gflops,
           ceil.fma_gflops > 0 ? 100.0 * gflops / ceil.fma_gflops : 0.0, ceil.fma_gflops, op->flops(&pb) * 1e-9);
    printf("  GB/s        %.2f  (%.1f%% of copy bandwidth %.2f GB/s; %.4g MB per call)\n", gbps,
           ceil.copy_gbps > 0 ? 100.0 * gbps / ceil.copy_gbps : 0.0, ceil.copy_gbps, op->bytes(&pb) * 1e-6);
    printf("  workspace   %zu bytes\n", res.workspace_bytes);
    printf("  peak RSS    %.1f MiB\n", (double)res.max_rss_bytes / (1024.0 * 1024.0));
    if (opt->json &&
        write_json(opt->json, &pb, backend, threads, &res, tokens_s, gflops, gbps, &ceil) != 0) {
        rc = cli_fail("cannot write %s", opt->json);
        goto done;
    }
    rc = CLI_EXIT_OK;
done:
    ssm_context_free(ctx);
    cli_problem_free(&pb);
    return rc;
}
