/*
 * ssmops-cli.c — the `ssmops` command-line tool (DESIGN §7): command dispatch, option
 * parsing, help and `list`. The commands themselves live in tools/cli-*.c (see cli.h).
 * Uses only the public header and the .npy module.
 */
#define _XOPEN_SOURCE 700

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage_text[] =
    "usage:\n"
    "  ssmops list                 operators, backends, dtypes available here\n"
    "  ssmops list --schema OP|all an operator's arguments as the manual's markdown table\n"
    "  ssmops list --variants [OP] the CUDA backend's selection tables (kernel variants)\n"
    "  ssmops check OP|all [--backend B] [--dtype T] [--shape k=v,...] [--param k=v,...]\n"
    "                      [--seed N] [--all-shapes] [--threads N] [--out-dtype T] [--ref-mode M]\n"
    "  ssmops run OP --in DIR --out DIR [--backend B] [--dtype T] [--param k=v,...] [--threads N]\n"
    "                  [--ref-mode M]\n"
    "  ssmops bench OP [--backend B] [--dtype T] [--shape k=v,...] [--param k=v,...]\n"
    "                  [--threads N] [--reps N] [--json FILE] [--seed N] [--buffer-mib N]\n"
    "                  [--variant NAME]\n"
    "  ssmops bench --ceilings [--threads N] [--json FILE] [--buffer-mib N]\n"
    "  ssmops help [OP]  |  ssmops --help  |  ssmops --version\n"
    "\n"
    "options:\n"
    "  --backend B     auto (default), ref (float64 reference), cpu, cuda\n"
    "  --dtype T       compute dtype: f32 (default), f16, bf16 (fp32, fp16 accepted)\n"
    "  --shape k=v,..  dimensions (case-sensitive): B,S,H,P,N,G,chunk for Mamba-2;\n"
    "                  B,S,H,Hq,K,V,A,chunk for Mamba-3 SISO; B,S,H,G,R,N,P,chunk for Mamba-3\n"
    "                  MIMO; B,S,D,W (L) conv1d; M,D rmsnorm\n"
    "  --param k=v,..  options: has_d=0|1|2, has_z, has_dt_bias, dt_softplus, dt_limit=lo:hi,\n"
    "                  has_init, has_final, has_states, has_dfinal, seq_idx=K, nseq=K,\n"
    "                  layout=cann, slots=K, in_place, per_head, channel_last, chunk=Q,\n"
    "                  div=2|4, reduce_o, fused (fuse_pregate_headwise_rms_norm), ...\n"
    "                  (`ssmops help OP` lists an operator's keys and defaults)\n"
    "  --out-dtype T   check: dtype of activation outputs (out, states_in): f32 (default) keeps\n"
    "                  the fp32 result so the bars measure the computation; same|f16|bf16 also\n"
    "                  includes the final rounding (heavy-tailed outputs can exceed max_rel)\n"
    "  --ref-mode M    mamba3_mimo_bwd_fwd's rounding model (ctx ref_mode): exact (float64\n"
    "                  reference, fp32 CPU) or bf16 (both round where upstream's bf16 kernel\n"
    "                  does). check: default both (bf16 for bf16 inputs), the bf16 one against\n"
    "                  rel_rms < 1e-3; run: default exact (--ref-mode bf16 gives *__bf16ref)\n"
    "  --seed N        seed of the random inputs (default 1)\n"
    "  --all-shapes    check: run the operator's built-in list of shapes and options\n"
    "  --threads N     threads (default: the number of online CPUs)\n"
    "  --reps N        bench: timed repetitions (default: until >= 1 s and >= 5)\n"
    "  --json FILE     bench: write the measurements as a JSON array\n"
    "  --buffer-mib N  bench: copy-bandwidth buffer size in MiB (default 256)\n"
    "  --variant NAME  bench: force an entry of the operator's selection table (ssmops list\n"
    "                  --variants); check and run take SSMOPS_VARIANT=op=name instead\n"
    "\n"
    "check prints one line per output: name rel_rms max_rel bar PASS|FAIL (exit 1 on FAIL).\n"
    "run reads DIR/<arg>.npy and writes DIR/<output>.npy (float32; float64 with --backend ref);\n"
    "a state pool updated in place (decode steps) is written as final_<name>.npy.\n"
    "\n"
    "developer tool:\n"
    "  ssmops compare A.npy B.npy [--tol X] [--max-rel Y] [--dtype T]\n"
    "                  rel_rms / max_rel of A against the reference B; exit 1 above the bar\n"
    "                  (--dtype T: the bars of T, docs/ACCURACY.md; --tol, --max-rel override them)\n"
    "\n"
    "exit status: 0 ok, 1 failed check or operation, 2 usage error.\n";

static void print_usage(FILE * f) {
    fprintf(f, "ssmops %s — Mamba-2/Mamba-3 state-space-model operators\n\n%s", ssm_version(), usage_text);
}

static void print_keys(const char * title, const cli_key * keys) {
    printf("%s:\n", title);
    if (!keys || !keys[0].name) printf("  (none)\n");
    for (int i = 0; keys && keys[i].name; ++i)
        printf("  %-12s default %-8s %s\n", keys[i].name, keys[i].def, keys[i].help ? keys[i].help : "");
}

static int help_op(const char * name) {
    const cli_op * op = cli_find_op(name);
    if (!op) return cli_usage_error("unknown operator '%s' (ssmops list shows them)", name);
    printf("%s: %s\n\n", op->name, op->summary);
    print_keys("shape keys (--shape)", op->shape_keys);
    print_keys("param keys (--param)", op->param_keys);
    printf("tensors (run: DIR/<name>.npy):\n");
    const ssm_op_info * info = cli_op_info(op);
    for (int i = 0; i < info->nargs; ++i) {
        const cli_arg *    a    = &info->args[i];
        const cli_arg_kind k    = cli_arg_kind_of(a);
        const char *       kind = k == CLI_ARG_ACT ? "compute dtype" : k == CLI_ARG_F32 ? "fp32" : "int32/int64";
        printf("  %-4s %-16s %s%s\n", cli_arg_is_output(a) ? "out" : "in", a->name, kind,
               cli_arg_is_optional(a) ? " (optional)" : "");
    }
    printf("bench defaults: shape %s; params %s; dtype %s\n", op->bench_shape ? op->bench_shape : "as check",
           op->bench_params ? op->bench_params : "as check", op->bench_dtype ? op->bench_dtype : "f32");
    return CLI_EXIT_OK;
}

static int cmd_list(void) {
    printf("ssmops %s (header %d.%d.%d)\n", ssm_version(), SSM_VERSION_MAJOR, SSM_VERSION_MINOR, SSM_VERSION_PATCH);
    const uint32_t f = ssm_cpu_features();
    static const struct {
        uint32_t     bit;
        const char * name;
    } features[] = {{SSM_CPU_AVX2, "avx2"}, {SSM_CPU_FMA, "fma"}, {SSM_CPU_F16C, "f16c"}, {SSM_CPU_AVX512F, "avx512f"},
                   {SSM_CPU_AVX512BW, "avx512bw"}, {SSM_CPU_AVX512DQ, "avx512dq"}, {SSM_CPU_AVX512VL, "avx512vl"}};
    printf("cpu features:");
    for (size_t i = 0; i < sizeof features / sizeof features[0]; ++i)
        if (f & features[i].bit) printf(" %s", features[i].name);
    printf("%s\n", f ? "" : " (none detected)");
    ssm_context * ctx = NULL;
    const ssm_status st = cli_context_create(SSM_BACKEND_CPU, 1, &ctx);
    if (st == SSM_STATUS_OK)
        printf("isa: %s (SSMOPS_ISA=scalar|avx2|avx512 overrides)\n", ssm_isa_name(ssm_context_isa(ctx)));
    else
        printf("isa: unavailable (%s: %s)\n", ssm_status_string(st), ssm_context_last_error(NULL));
    ssm_context_free(ctx);
    printf("online cpus: %d\n", cli_default_threads());
    printf("backends:\n");
    printf("  auto   available (the optimised CPU backend here)\n");
    printf("  ref    available (float64 reference, the golden oracle)\n");
    printf("  cpu    available (SIMD kernels + threads)\n");
    const int32_t ngpu = ssm_cuda_device_count();
    if (ngpu > 0) {
        printf("  cuda   available (%d device(s);", (int)ngpu);
        const char * sep = " ";
        for (int i = 0; cli_ops[i]; ++i)
            if (cli_cuda_supported(cli_ops[i])) {
                printf("%s%s", sep, cli_ops[i]->name);
                sep = ", ";
            }
        printf(")\n");
    } else
        printf("  cuda   unavailable (no CUDA device, or no CUDA backend in this build)\n");
    printf("dtypes: f32 f16 bf16 (f64 tensors through the C API)\n");
    printf("operators:\n");
    for (int i = 0; cli_ops[i]; ++i) printf("  %-22s %s\n", cli_ops[i]->name, cli_ops[i]->summary);
    return CLI_EXIT_OK;
}

/* One operator's arguments from the library's schema as the manuals' table: field, dir
 * (in/out, optional, the input an output needs), shape, dtype class, and an empty notes
 * column for the manual's own words. tests/cli/schema_docs.sh checks docs/ops/ against it. */
static void print_schema(const ssm_op_info * info) {
    printf("| field | dir | shape | dtype | notes |\n|---|---|---|---|---|\n");
    for (int32_t i = 0; i < info->nargs; ++i) {
        const ssm_arg_info * a = &info->args[i];
        printf("| `%s` | %s%s", a->name, (a->role & SSM_ARG_ROLE_OUTPUT) ? "out" : "in",
               (a->role & SSM_ARG_ROLE_OPTIONAL) ? ", optional" : "");
        if (a->needs) printf(", needs `%s`", a->needs);
        printf(" | %s | %s | |\n", a->shape, a->dtype_class == SSM_DTYPE_CLASS_INDEX ? "i32/i64" : "float");
    }
}

static int cmd_list_schema(const char * op) {
    const int all = strcmp(op, "all") == 0;
    const int32_t found = all ? 0 : ssm_op_find(op);
    if (found < 0) return cli_usage_error("unknown operator '%s' (ssmops list shows them)", op);
    for (int32_t i = all ? 0 : found; i < (all ? ssm_op_count() : found + 1); ++i) {
        const ssm_op_info * info = ssm_op_get(i);
        if (all) printf("%s### `ssm_%s`\n\n", i ? "\n" : "", info->name);
        print_schema(info);
    }
    return CLI_EXIT_OK;
}

/* Every operator's selection table on the CUDA backend (the only backend with tables), one
 * line per entry in the order the backend tries them: operator, entry, why it exists. */
static int cmd_list_variants(const char * op) {
    if (op != NULL && ssm_op_find(op) < 0) return cli_usage_error("unknown operator '%s' (ssmops list shows them)", op);
    printf("# operator             variant          why (the first entry that applies runs; force one with\n"
           "#                                       SSMOPS_VARIANT=op=name or `bench --variant NAME`;\n"
           "#                                       SSMOPS_CUDA_PORTABLE=1 passes over the wgmma entries,\n"
           "#                                       choosing as on a GPU without wgmma)\n");
    int any = 0;
    for (int32_t i = 0; i < ssm_op_count(); ++i) {
        const char * name = ssm_op_get(i)->name;
        if (op != NULL && strcmp(op, name) != 0 && strcmp(op + (strncmp(op, "ssm_", 4) == 0 ? 4 : 0), name) != 0)
            continue;
        const int32_t n = ssm_variant_count(SSM_BACKEND_CUDA, name);
        for (int32_t v = 0; v < n; ++v, any = 1)
            printf("%-22s %-16s %s\n", name, ssm_variant_name(SSM_BACKEND_CUDA, name, v),
                   ssm_variant_why(SSM_BACKEND_CUDA, name, v));
    }
    if (!any)
        printf("# none: %s\n", op != NULL ? "no table for this operator in this build" : "this build has no CUDA backend");
    return CLI_EXIT_OK;
}

/* ---- option parsing -------------------------------------------------------------------------- */

typedef struct arg_cursor {
    int    argc;
    char **argv;
    int    i;
} arg_cursor;

/* The value of an option given as "--name value" or "--name=value". */
static const char * option_value(arg_cursor * c, const char * name, const char * arg) {
    const size_t n = strlen(name);
    if (arg[n] == '=') return arg + n + 1;
    if (c->i + 1 >= c->argc) return NULL;
    return c->argv[++c->i];
}

static int matches(const char * arg, const char * name) {
    const size_t n = strlen(name);
    return strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

/* The value of a text option (--shape, --in, ...) into *out; a usage error saying what the
 * option needs when it has no value. */
static int text_option(arg_cursor * c, const char * name, const char * arg, const char ** out, const char * needs) {
    if ((*out = option_value(c, name, arg)) != NULL) return 0;
    return cli_usage_error("%s needs %s", name, needs);
}

static int parse_positive(const char * name, const char * text, int64_t max, int64_t * out) {
    if (!text || cli_parse_int64(text, out) != 0 || *out < 1 || *out > max) {
        cli_usage_error("%s expects an integer in [1, %lld], got '%s'", name, (long long)max, text ? text : "");
        return -1;
    }
    return 0;
}

/* Which options each command accepts. */
enum {
    O_BACKEND = 1 << 0,
    O_DTYPE   = 1 << 1,
    O_SHAPE   = 1 << 2,
    O_PARAM   = 1 << 3,
    O_SEED    = 1 << 4,
    O_ALL     = 1 << 5,
    O_THREADS = 1 << 6,
    O_IN      = 1 << 7,
    O_OUT     = 1 << 8,
    O_JSON    = 1 << 9,
    O_REPS    = 1 << 10,
    O_CEIL    = 1 << 11,
    O_TOL     = 1 << 12,
    O_BUFFER  = 1 << 13,
    O_OUTDT   = 1 << 14,
    O_REFMODE = 1 << 15,
    O_VARIANT = 1 << 16
};

/* 1 if arg is option `name` and the command takes it, −1 (after a message) if it does not
 * take it, 0 if arg is another option. */
static int option_is(const char * command, unsigned allowed, unsigned flag, const char * arg, const char * name) {
    if (!matches(arg, name)) return 0;
    if (allowed & flag) return 1;
    cli_usage_error("%s does not take %s", command, name);
    return -1;
}

static int parse_options(const char * command, unsigned allowed, int argc, char ** argv, cli_options * opt) {
    arg_cursor c          = {argc, argv, 0};
    int        positional = 0;
    for (c.i = 0; c.i < argc; ++c.i) {
        const char * a = argv[c.i];
        const char * v = NULL;
        int64_t      n = 0;
        int          k;
        if ((k = option_is(command, allowed, O_BACKEND, a, "--backend"))) {
            if (k < 0) return -1;
            v = option_value(&c, "--backend", a);
            if (!v || cli_parse_backend(v, &opt->backend) != 0)
                return cli_usage_error("--backend expects auto, ref, cpu or cuda, got '%s'", v ? v : "");
        } else if ((k = option_is(command, allowed, O_DTYPE, a, "--dtype"))) {
            if (k < 0) return -1;
            v = option_value(&c, "--dtype", a);
            if (!v || cli_parse_dtype(v, &opt->dtype) != 0 || opt->dtype == SSM_DTYPE_F64)
                return cli_usage_error("--dtype expects f32, f16 or bf16, got '%s'", v ? v : "");
            opt->dtype_given = 1;
        } else if ((k = option_is(command, allowed, O_OUTDT, a, "--out-dtype"))) {
            if (k < 0) return -1;
            v = option_value(&c, "--out-dtype", a);
            ssm_dtype t = SSM_DTYPE_F32;
            if (v && strcmp(v, "same") == 0)
                opt->out_dtype = -1;
            else if (v && cli_parse_dtype(v, &t) == 0 && t != SSM_DTYPE_F64)
                opt->out_dtype = (int32_t)t;
            else
                return cli_usage_error("--out-dtype expects same, f32, f16 or bf16, got '%s'", v ? v : "");
            opt->out_dtype_given = 1;
        } else if ((k = option_is(command, allowed, O_SHAPE, a, "--shape"))) {
            if (k < 0 || text_option(&c, "--shape", a, &opt->shape, "k=v,...")) return -1;
        } else if ((k = option_is(command, allowed, O_PARAM, a, "--param"))) {
            if (k < 0 || text_option(&c, "--param", a, &opt->params, "k=v,...")) return -1;
        } else if ((k = option_is(command, allowed, O_SEED, a, "--seed"))) {
            if (k < 0) return -1;
            v = option_value(&c, "--seed", a);
            if (!v || cli_parse_int64(v, &n) != 0 || n < 0)
                return cli_usage_error("--seed expects a non-negative integer, got '%s'", v ? v : "");
            opt->seed = (uint64_t)n;
        } else if ((k = option_is(command, allowed, O_ALL, a, "--all-shapes"))) {
            if (k < 0) return -1;
            opt->all_shapes = 1;
        } else if ((k = option_is(command, allowed, O_THREADS, a, "--threads"))) {
            if (k < 0 || parse_positive("--threads", option_value(&c, "--threads", a), 1024, &n) != 0) return -1;
            opt->threads = (int)n;
        } else if ((k = option_is(command, allowed, O_IN, a, "--in"))) {
            if (k < 0 || text_option(&c, "--in", a, &opt->in_dir, "a directory")) return -1;
        } else if ((k = option_is(command, allowed, O_OUT, a, "--out"))) {
            if (k < 0 || text_option(&c, "--out", a, &opt->out_dir, "a directory")) return -1;
        } else if ((k = option_is(command, allowed, O_JSON, a, "--json"))) {
            if (k < 0 || text_option(&c, "--json", a, &opt->json, "a file name")) return -1;
        } else if ((k = option_is(command, allowed, O_REPS, a, "--reps"))) {
            if (k < 0 || parse_positive("--reps", option_value(&c, "--reps", a), 100000, &n) != 0) return -1;
            opt->reps = (int)n;
        } else if ((k = option_is(command, allowed, O_BUFFER, a, "--buffer-mib"))) {
            if (k < 0 || parse_positive("--buffer-mib", option_value(&c, "--buffer-mib", a), 1 << 16, &n) != 0)
                return -1;
            opt->buffer_mib = (int)n;
        } else if ((k = option_is(command, allowed, O_CEIL, a, "--ceilings"))) {
            if (k < 0) return -1;
            opt->ceilings = 1;
        } else if ((k = option_is(command, allowed, O_TOL, a, "--tol"))) {
            if (k < 0) return -1;
            v = option_value(&c, "--tol", a);
            if (!v || cli_parse_double(v, &opt->tol) != 0 || !(opt->tol > 0))
                return cli_usage_error("--tol expects a positive number, got '%s'", v ? v : "");
        } else if ((k = option_is(command, allowed, O_TOL, a, "--max-rel"))) {
            if (k < 0) return -1;
            v = option_value(&c, "--max-rel", a);
            if (!v || cli_parse_double(v, &opt->max_rel) != 0 || !(opt->max_rel > 0))
                return cli_usage_error("--max-rel expects a positive number, got '%s'", v ? v : "");
        } else if ((k = option_is(command, allowed, O_VARIANT, a, "--variant"))) {
            if (k < 0 || text_option(&c, "--variant", a, &opt->variant, "a name (ssmops list --variants shows them)"))
                return -1;
        } else if ((k = option_is(command, allowed, O_REFMODE, a, "--ref-mode"))) {
            if (k < 0) return -1;
            v = option_value(&c, "--ref-mode", a);
            if (v && strcmp(v, "exact") == 0)
                opt->ref_mode = SSM_REF_EXACT;
            else if (v && strcmp(v, "bf16") == 0)
                opt->ref_mode = SSM_REF_UPSTREAM_BF16;
            else
                return cli_usage_error("--ref-mode expects exact or bf16, got '%s'", v ? v : "");
        } else if (a[0] == '-' && a[1] != '\0') {
            return cli_usage_error("%s: unknown option '%s'", command, a);
        } else if (strcmp(command, "compare") == 0 && positional < 2) {
            opt->files[positional++] = a;
        } else if (strcmp(command, "compare") != 0 && positional == 0) {
            opt->op = a;
            positional++;
        } else {
            return cli_usage_error("%s: unexpected argument '%s'", command, a);
        }
    }
    return 0;
}

int main(int argc, char ** argv) {
    if (argc < 2) {
        print_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char * cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || (strcmp(cmd, "help") == 0 && argc == 2)) {
        print_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(cmd, "help") == 0) {
        if (argc > 3) return cli_usage_error("help takes at most one operator");
        return help_op(argv[2]);
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("ssmops %s\n", ssm_version());
        return CLI_EXIT_OK;
    }

    cli_options opt;
    memset(&opt, 0, sizeof opt);
    opt.backend = SSM_BACKEND_AUTO;
    opt.dtype   = SSM_DTYPE_F32;
    opt.seed    = 1;
    opt.ref_mode = -1;
    int argn    = argc - 2;
    char ** rest = argv + 2;

    if (strcmp(cmd, "list") == 0) {
        if (argn == 2 && strcmp(rest[0], "--schema") == 0) return cmd_list_schema(rest[1]);
        if (argn <= 2 && argn >= 1 && strcmp(rest[0], "--variants") == 0)
            return cmd_list_variants(argn == 2 ? rest[1] : NULL);
        if (argn > 0) return cli_usage_error("list takes no arguments, --schema OP|all or --variants [OP]");
        return cmd_list();
    }
    if (strcmp(cmd, "check") == 0) {
        if (parse_options(cmd,
                          O_BACKEND | O_DTYPE | O_OUTDT | O_SHAPE | O_PARAM | O_SEED | O_ALL | O_THREADS | O_REFMODE,
                          argn, rest, &opt))
            return CLI_EXIT_USAGE;
        if (!opt.op) return cli_usage_error("check needs an operator (or all)");
        return cli_cmd_check(&opt);
    }
    if (strcmp(cmd, "run") == 0) {
        if (parse_options(cmd, O_BACKEND | O_DTYPE | O_PARAM | O_THREADS | O_IN | O_OUT | O_REFMODE, argn, rest,
                          &opt))
            return CLI_EXIT_USAGE;
        if (!opt.op) return cli_usage_error("run needs an operator");
        return cli_cmd_run(&opt);
    }
    if (strcmp(cmd, "bench") == 0) {
        if (parse_options(cmd,
                          O_BACKEND | O_DTYPE | O_SHAPE | O_PARAM | O_SEED | O_THREADS | O_JSON | O_REPS | O_CEIL |
                              O_BUFFER | O_VARIANT,
                          argn, rest, &opt))
            return CLI_EXIT_USAGE;
        return cli_cmd_bench(&opt);
    }
    if (strcmp(cmd, "compare") == 0) {
        if (parse_options(cmd, O_TOL | O_DTYPE, argn, rest, &opt)) return CLI_EXIT_USAGE;
        return cli_cmd_compare(&opt);
    }
    return cli_usage_error("unknown command '%s'", cmd);
}
