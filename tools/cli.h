/*
 * cli.h — internals of the ssmops command-line tool (tools/ssmops-cli.c, tools/cli-*.c).
 *
 * The CLI uses only the public header (ssmops.h) and the .npy module (npy.h). Its pieces:
 *   ssmops-cli.c     main: command dispatch, option parsing, help, `list`
 *   cli-util.c       owned buffers and strided views, dtype conversion, RNG, comparisons,
 *                    k=v parsing, messages
 *   cli-ops.c        the operator table and what every command shares (problem setup)
 *   cli-mamba2.c     the Mamba-2 entries of the table
 *   cli-mamba2-train.c  mamba2_scan_bwd and the decode step mamba2_step
 *   cli-layer.c      causal_conv1d (+ _bwd, _update), rmsnorm_gated (+ _bwd)
 *   cli-mamba3-siso.c   the Mamba-3 SISO entries
 *   cli-mamba3-mimo.c   the Mamba-3 MIMO entries
 *   cli-gen.c        input generation, `run` binding and in-place helpers they share
 *   cli-check.c      `check`: backend vs float64 reference on seeded inputs
 *   cli-run.c        `run`: .npy in, operator, .npy out; the developer tool `compare`
 *   cli-bench.c      `bench OP`: timing, GFLOP/s, GB/s against the ceilings
 *   cli-ceilings.c   `bench --ceilings`: FMA peak and copy bandwidth with pthreads
 *
 * An operator's tensor arguments come from the library's schema (ssm_op_get: names, roles,
 * ranks, dtype classes, shapes, the field offsets of its args struct), so adding an operator
 * = one cli_op entry (shape keys, param keys) plus its generate / bind / alloc_outputs / call
 * / flops / bytes functions; every command then works for it.
 */
#ifndef SSMOPS_CLI_H
#define SSMOPS_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "ssmops.h"

#if defined(__GNUC__)
#define CLI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CLI_PRINTF(f, a)
#endif

#define CLI_MAX_KEYS 16 /* shape keys or param keys of one operator */
#define CLI_MAX_ARGS 48 /* tensor arguments of one operator (mamba3_mimo_bwd: 44; a test checks) */
#define CLI_ERR_LEN  512

/* Exit statuses of every command. */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

/* ---- buffers ------------------------------------------------------------------------- */
/* Memory the CLI owns (always contiguous, in the .npy order mem_shape) and the view of it
 * that the operator sees. The view differs from the memory only for alternative layouts
 * (the CANN layout of mamba2_chunk_state: a strided view of the same bytes). */
typedef struct cli_buf {
    void *     mem; /* NULL = absent */
    int32_t    mem_ndim;
    int64_t    mem_shape[SSM_MAX_DIMS];
    ssm_tensor view;
    int        borrowed; /* the memory belongs to another argument (an in-place output) */
} cli_buf;

int64_t cli_numel(int32_t ndim, const int64_t * shape);
/* A contiguous buffer of the given dtype and shape, zero-filled; its view is the memory. */
int     cli_buf_alloc(cli_buf * buf, ssm_dtype dtype, int32_t ndim, const int64_t * shape);
/* Re-views the buffer: the operator sees shape/strides (elements) instead of mem_shape. */
void    cli_buf_set_view(cli_buf * buf, int32_t ndim, const int64_t * shape, const int64_t * strides);
void    cli_buf_free(cli_buf * buf);
/* A contiguous copy of a view's logical content in another dtype. */
int     cli_buf_clone(cli_buf * dst, const ssm_tensor * src, ssm_dtype dtype);
/* Converts the memory to another dtype in place of the old one, keeping the view's shape
 * and strides (a strided layout stays that layout). */
int     cli_buf_convert(cli_buf * buf, ssm_dtype dtype);

/* Element access by element offset from t->data, any dtype, as double. */
double cli_get(const ssm_tensor * t, int64_t offset);
void   cli_set(const ssm_tensor * t, int64_t offset, double value);
/* Logical element k (row-major over t->shape) → element offset through t->strides. */
int64_t cli_offset(const ssm_tensor * t, int64_t k);
/* Rounds a value to what the dtype can hold (identity for f64 and integers). */
double cli_round(ssm_dtype dtype, double value);
/* Copies src into dst element by element (same logical shape), converting dtypes. */
void   cli_copy(const ssm_tensor * dst, const ssm_tensor * src);
void   cli_fill(const ssm_tensor * t, double value);
int    cli_is_float(ssm_dtype dtype);

/* ---- comparison against a reference (DESIGN §5) --------------------------------------- */
typedef struct cli_diff {
    double  rel_rms;  /* ||y − r||2 / ||r||2                                     */
    double  max_rel;  /* max |y − r| / rms(r)                                    */
    int64_t worst;    /* logical index of the largest |y − r|                    */
    int64_t nonfinite; /* elements where y is NaN/Inf and r is not (or differs)  */
    int64_t count;
} cli_diff;
typedef struct cli_bar {
    double rel_rms, max_rel;
} cli_bar;

void    cli_compare(const ssm_tensor * y, const ssm_tensor * r, cli_diff * diff);
cli_bar cli_bar_for(ssm_dtype compute_dtype);
int     cli_diff_passes(const cli_diff * diff, cli_bar bar);
int     cli_same_shape(const ssm_tensor * a, const ssm_tensor * b);

/* ---- random numbers (splitmix64: seeded, reproducible everywhere) ---------------------- */
typedef struct cli_rng {
    uint64_t state;
} cli_rng;
void     cli_rng_seed(cli_rng * rng, uint64_t seed);
uint64_t cli_rng_next(cli_rng * rng);
double   cli_rng_uniform(cli_rng * rng); /* [0, 1) */
double   cli_rng_normal(cli_rng * rng);  /* N(0, 1) */

/* ---- names ---------------------------------------------------------------------------- */
int cli_parse_dtype(const char * text, ssm_dtype * out);   /* f32 fp32 f16 fp16 bf16 (f64) */
int cli_parse_backend(const char * text, ssm_backend * out);
int cli_parse_int64(const char * text, int64_t * out);
int cli_parse_double(const char * text, double * out);

/* ---- keys: shape and param names of an operator ----------------------------------------- */
typedef enum cli_key_type {
    CLI_KEY_INT,   /* 64-bit integer                                         */
    CLI_KEY_FLOAT, /* double                                                 */
    CLI_KEY_RANGE, /* lo:hi (either may be inf / -inf)                        */
    CLI_KEY_WORD   /* one of the words in `choices` ("std|cann")             */
} cli_key_type;

typedef struct cli_key {
    const char * name;
    cli_key_type type;
    const char * def;     /* default value as text                   */
    const char * help;
    const char * choices; /* CLI_KEY_WORD: "a|b|c"                    */
} cli_key;

/* Key table entries: an integer key, the end of a table, and the keys several families share. */
#define CLI_KEY_INT(name, def, help) {name, CLI_KEY_INT, def, help, NULL}
#define CLI_KEY_END                  {NULL, CLI_KEY_INT, NULL, NULL, NULL}
#define CLI_KEY_NSEQ \
    CLI_KEY_INT("nseq", "0", "varlen: cu_seqlens with this many sequences, batch 1 (0 = off)")
#define CLI_KEY_SLOTS \
    CLI_KEY_INT("slots", "0", "state pool rows with state_batch_indices (>= B; row 1 is padding); 0 = no indices")
#define CLI_KEY_IN_PLACE_POOLS \
    CLI_KEY_INT("in_place", "1", "final_* states are the input state pools (updated in place)")
#define CLI_KEY_HAS_FINAL  CLI_KEY_INT("has_final", "1", "final states out")
#define CLI_KEY_HAS_DFINAL CLI_KEY_INT("has_dfinal", "1", "incoming gradients of the final states")
/* The Mamba-2 family's (cli-mamba2.c, cli-mamba2-train.c). */
#define CLI_M2_KEY_HAS_D       CLI_KEY_INT("has_d", "1", "D skip term: 0 none, 1 D of shape (H), 2 D of shape (H,P)")
#define CLI_M2_KEY_HAS_Z       CLI_KEY_INT("has_z", "1", "gate z: out = y*silu(z)")
#define CLI_M2_KEY_HAS_DT_BIAS CLI_KEY_INT("has_dt_bias", "1", "dt_bias input")
#define CLI_M2_KEY_SOFTPLUS    CLI_KEY_INT("dt_softplus", "1", "softplus(dt + dt_bias)")
#define CLI_M2_KEY_DT_LIMIT    {"dt_limit", CLI_KEY_RANGE, "0:inf", "clamp of the processed dt, lo:hi", NULL}

typedef struct cli_value {
    int     given; /* set on the command line (not the default)  */
    char    text[64];
    int64_t i;
    double  f, lo, hi;
} cli_value;

int cli_key_count(const cli_key * keys);
int cli_key_index(const cli_key * keys, const char * name);
/* Parses one value of a key; 0 ok, -1 with a message. */
int cli_parse_value(const cli_key * key, const char * text, cli_value * value, char * err, size_t errlen);
/* Parses "k=v,k=v" into values (indexed like keys); what = "shape" or "param". A key that
 * is not in keys but in alt_keys (may be NULL) goes to alt_values. */
int cli_parse_kv(const char * list, const cli_key * keys, cli_value * values, const cli_key * alt_keys,
                 cli_value * alt_values, const char * what, const char * op_name, char * err, size_t errlen);

/* ---- operators -------------------------------------------------------------------------- */
/* An argument of an operator: the schema's entry. Its name is the .npy file name and the
 * field of the args struct. */
typedef ssm_arg_info cli_arg;

typedef enum cli_arg_kind {
    CLI_ARG_ACT,  /* activation: held in the compute dtype (--dtype)              */
    CLI_ARG_F32,  /* parameter, state or intermediate: fp32 (as upstream)          */
    CLI_ARG_INDEX /* int32 / int64 index tensor                                    */
} cli_arg_kind;

/* The kind of an argument: index tensors by dtype class, activations by the schema's
 * SSM_ARG_ACTIVATION hint, every other float tensor fp32. */
cli_arg_kind cli_arg_kind_of(const cli_arg * arg);
static inline int cli_arg_is_output(const cli_arg * arg) { return (arg->role & SSM_ARG_ROLE_OUTPUT) != 0; }
static inline int cli_arg_is_optional(const cli_arg * arg) { return (arg->role & SSM_ARG_ROLE_OPTIONAL) != 0; }

struct cli_op;

/* One operator call being prepared: the operator, its shape and params, its tensors. */
typedef struct cli_problem {
    const struct cli_op * op;
    const ssm_op_info *   info;      /* the operator's schema: pb->arg[i] is info->args[i] */
    ssm_dtype             dtype;     /* compute dtype                                   */
    int32_t               out_dtype; /* dtype of activation outputs; -1 = the compute dtype */
    cli_value             shape[CLI_MAX_KEYS];
    cli_value             param[CLI_MAX_KEYS];
    cli_buf               arg[CLI_MAX_ARGS];
} cli_problem;

typedef struct cli_op {
    const char *    name;
    const char *    summary;
    const cli_key * shape_keys; /* terminated by a {NULL} entry */
    const cli_key * param_keys;
    /* bench defaults where they differ from check's: "k=v,..." overrides, dtype name */
    const char *         bench_shape;
    const char *         bench_params;
    const char *         bench_dtype;
    const char * const * cases; /* --all-shapes: "shape k=v,...;param k=v,..." NULL-ended */
    /* Cross-key checks after parsing (usage errors). May be NULL. */
    int (*validate)(const cli_problem * pb, char * err, size_t errlen);
    /* Seeded random inputs in pb->arg (realistic ranges, rounded to pb->dtype). */
    int (*generate)(cli_problem * pb, uint64_t seed, char * err, size_t errlen);
    /* `run`: inputs are loaded into pb->arg; derive the shape keys (and views). */
    int (*bind)(cli_problem * pb, char * err, size_t errlen);
    /* Allocates the outputs; activation outputs in pb->dtype, or everything in f64. */
    int (*alloc_outputs)(cli_problem * pb, int f64, char * err, size_t errlen);
    ssm_status (*call)(ssm_context * ctx, const cli_problem * pb, void * workspace, size_t workspace_size);
    /* Exact workspace bytes (NULL: the operator takes none). */
    ssm_status (*workspace_size)(ssm_context * ctx, const cli_problem * pb, size_t * bytes);
    double (*flops)(const cli_problem * pb); /* spec §5 cost model */
    double (*bytes)(const cli_problem * pb);
} cli_op;

/* Defines the table entry cli_op_<op>: its summary, keys, bench defaults (CLI_BENCH(shape,
 * params, dtype)), cases, its family's functions (CLI_FNS(validate, generate, bind,
 * alloc_outputs)), the call <op>_call (CLI_DEFINE_CALL), workspace_size, flops and bytes. */
#define CLI_BENCH(shape, params, dtype)         shape, params, dtype
#define CLI_FNS(validate, generate, bind, alloc) validate, generate, bind, alloc
#define CLI_OP(op, summary, shape_keys, param_keys, bench, cases, fns, workspace, flops, bytes)                \
    const cli_op cli_op_##op = {#op,  summary, shape_keys, param_keys, bench, cases, fns, op##_call, workspace, \
                                flops, bytes}

extern const cli_op * const cli_ops[]; /* NULL-terminated */

const cli_op * cli_find_op(const char * name);
/* The operator's schema (a test checks that every table entry has one). */
const ssm_op_info * cli_op_info(const cli_op * op);
/* 1 if the operator has the reference's second rounding model (ctx ref_mode
 * SSM_REF_UPSTREAM_BF16; check compares it, run --ref-mode bf16 selects it). */
int            cli_op_has_ref_modes(const cli_op * op);
int            cli_arg_index(const cli_op * op, const char * name);
/* Shape / param accessors by key name (the name must exist for the op). */
int64_t cli_shape(const cli_problem * pb, const char * key);
/* Sets a shape key / an integer param (bind derives them from the loaded inputs). */
void    cli_set_shape(cli_problem * pb, const char * key, int64_t value);
void    cli_set_param_int(cli_problem * pb, const char * key, int64_t value);
int64_t cli_param_int(const cli_problem * pb, const char * key);
double  cli_param_float(const cli_problem * pb, const char * key);
void    cli_param_range(const cli_problem * pb, const char * key, double * lo, double * hi);
const char * cli_param_word(const cli_problem * pb, const char * key);
int     cli_has_param(const cli_problem * pb, const char * key);
/* A present tensor argument's view, or NULL-data tensor if absent. */
ssm_tensor cli_view(const cli_problem * pb, const char * name);
cli_buf *  cli_arg_buf(cli_problem * pb, const char * name);
/* The operator's args struct (args_size bytes, as ssm_op_info.args_size) with the view of
 * every present argument at its field and every other field absent. */
void       cli_args_struct(const cli_problem * pb, void * args);

/* The `call` of an operator that takes no workspace: ssm_<op>(ctx, &params, &args) with
 * params = params_fn(pb) (of type P) and args = cli_args_struct(pb). */
#define CLI_DEFINE_CALL(op, P, params_fn)                                                            \
    static ssm_status op##_call(ssm_context * ctx, const cli_problem * pb, void * ws, size_t wsz) { \
        const P          p = params_fn(pb);                                                         \
        ssm_##op##_args a;                                                                          \
        (void)ws, (void)wsz;                                                                        \
        cli_args_struct(pb, &a);                                                                    \
        return ssm_##op(ctx, &p, &a);                                                               \
    }

/* Problem setup: defaults, then bench overrides (bench != 0), then the user's lists. */
int  cli_problem_init(cli_problem * pb, const cli_op * op, ssm_dtype dtype, int bench, const char * shape_list,
                      const char * param_list, char * err, size_t errlen);
void cli_problem_free(cli_problem * pb);
/* "B=2,S=300,..." and "has_d=1,..." of the problem. */
void cli_format_shape(const cli_problem * pb, char * out, size_t len);
void cli_format_params(const cli_problem * pb, char * out, size_t len);
/* Allocates a contiguous buffer for an argument (dtype by kind, or f64). */
int  cli_alloc_arg(cli_problem * pb, const char * name, int f64, int32_t ndim, const int64_t * shape);
/* dtype a new argument gets: ACT → pb->dtype (outputs: pb->out_dtype if set), F32 → f32,
 * f64 → f64. */
ssm_dtype cli_arg_dtype(const cli_problem * pb, const cli_arg * arg, int f64);

/* ---- commands --------------------------------------------------------------------------- */
typedef struct cli_options {
    const char * op;
    ssm_backend  backend;
    ssm_dtype    dtype;
    int          dtype_given;
    int32_t      out_dtype; /* check: -1 = compute dtype (default f32, see cli-check.c) */
    int          out_dtype_given;
    const char * shape;
    const char * params;
    uint64_t     seed;
    int          all_shapes;
    int          threads; /* 0 = default */
    const char * in_dir;
    const char * out_dir;
    const char * json;
    int          reps;    /* 0 = until ≥ 1 s and ≥ 5 reps */
    int          ceilings;
    int          buffer_mib; /* ceilings copy buffer */
    double       tol;        /* compare */
    double       max_rel;    /* compare */
    const char * files[2];   /* compare */
    const char * variant;    /* bench --variant: the forced entry of the op's selection table */
    int32_t      ref_mode;   /* --ref-mode: −1 not given (check: both models where the op
                                has two, the bf16 one for bf16 inputs; run: exact), else an
                                ssm_ref_mode */
} cli_options;

int cli_cmd_check(const cli_options * opt);
int cli_cmd_run(const cli_options * opt);
int cli_cmd_bench(const cli_options * opt);
int cli_cmd_ceilings(const cli_options * opt);
int cli_cmd_compare(const cli_options * opt);

/* Ceilings of this machine for a thread count (measured once per process and count). */
typedef struct cli_ceilings {
    double fma_gflops;
    double copy_gbps;
    int    threads;
    int    avx2;
} cli_ceilings;
int cli_measure_ceilings(int threads, int quick, int buffer_mib, cli_ceilings * out);

/* ---- CUDA backend (cli-cuda.c) ----------------------------------------------------------- */
/* 1 for the operators with a CUDA path (mamba2_scan, mamba2_chunk_state). */
int cli_cuda_supported(const cli_op * op);
/* op->call on device copies of pb's buffers (outputs copied back); an exit status, with a
 * message (UNSUPPORTED for other operators, UNSUPPORTED_HARDWARE without a GPU). */
int cli_cuda_run(ssm_context * ctx, const cli_problem * pb, const char * what);
/* `bench --backend cuda`: CUDA events, warm-up, median, rotated inputs; prints and --json. */
int cli_cuda_bench(const cli_options * opt, const cli_problem * pb, ssm_context * ctx, double tokens);
/* `bench --ceilings --backend cuda`: device copy bandwidth. */
int cli_cuda_ceilings(const cli_options * opt);

/* ---- input generation and `run` binding shared by the operator families (cli-gen.c) ---- */
void   cli_gen_normal(const ssm_tensor * t, cli_rng * rng);                     /* N(0,1)      */
void   cli_gen_uniform(const ssm_tensor * t, cli_rng * rng, double lo, double hi); /* U(lo,hi) */
double cli_log_uniform(cli_rng * rng, double lo, double hi);
/* seq_idx (B,S) int32: `count` ids per row 0..count−1, boundaries at random tokens. */
void   cli_gen_seq_idx(const ssm_tensor * t, int64_t count, cli_rng * rng);
/* cu_seqlens (nseq+1) int32: random cuts of [0, S], empty sequences allowed. */
void   cli_gen_cu_seqlens(const ssm_tensor * t, int64_t S, int64_t nseq, cli_rng * rng);
/* state_batch_indices (B) int32 into a pool of `slots` ≥ B rows: distinct random slots,
 * row 1 (when B > 1) is padding (−1). */
void   cli_gen_slot_indices(const ssm_tensor * t, int64_t slots, cli_rng * rng);
/* Allocates an input argument in its generation dtype (kind + compute dtype); −1 + message. */
int    cli_gen_arg(cli_problem * pb, const char * name, int32_t ndim, const int64_t * shape, char * err,
                   size_t errlen);
/* Allocates an output argument (f64 or its dtype); −1 + message. */
int    cli_out_arg(cli_problem * pb, const char * name, int f64, int32_t ndim, const int64_t * shape, char * err,
                   size_t errlen);
/* Output `out` updates input `in` in place: it becomes a borrowed view of in's memory
 * (converted to f64 first when f64 is set, so the reference writes exact values). */
int    cli_in_place(cli_problem * pb, const char * out, const char * in, int f64, char * err, size_t errlen);
int    cli_present(const cli_problem * pb, const char * name);
/* *args (the args struct of forward operator fwd, size bytes) zeroed, then every input of fwd that
 * the problem has, by name, as a view of the problem's tensor (a backward's saved forward results
 * are written by its forward on these inputs). */
void   cli_forward_inputs(const cli_problem * pb, const char * fwd, void * args, size_t size);
int64_t cli_dim(const cli_problem * pb, const char * name, int i);
/* `run`: input `name` is present with `ndim` dims (else −1 + message). */
int    cli_need_ndim(const cli_problem * pb, const char * name, int32_t ndim, char * err, size_t errlen);
/* Shape key / param by name with a default when the operator lacks it. */
int64_t cli_shape_or(const cli_problem * pb, const char * key, int64_t def);
int64_t cli_param_or(const cli_problem * pb, const char * key, int64_t def);
/* Rows of the recurrent states: slots (a decode step's pool with indices), else nseq
 * (varlen), else batch. */
int64_t cli_state_rows(const cli_problem * pb, int64_t batch);
/* Rows of a saved chunk_states: Σ ceil(len/chunk) over the drawn cu_seqlens sequences, else
 * batch · ceil(seqlen/chunk). */
int64_t cli_chunk_rows(const cli_problem * pb, int64_t batch, int64_t seqlen, int64_t chunk);
/* Every shape key >= 1 and every listed 0/1 param in range (usage errors). */
int    cli_check_shape_positive(const cli_problem * pb, char * err, size_t errlen);
int    cli_check_bools(const cli_problem * pb, const char * const * names, char * err, size_t errlen);

/* ---- helpers of the Mamba-3 commands (cli-mamba3-siso.c, cli-mamba3-mimo.c; cli-gen.c) ---- */
/* Whether the operator takes argument `name`. */
int    cli_has_arg(const cli_problem * pb, const char * name);
/* Whether any of the NULL-terminated `names` is an argument of the operator and present. */
int    cli_any_present(const cli_problem * pb, const char * const * names);
/* The optional params nseq (cu_seqlens; in [0, 1000000], > 0 needs B=1) and slots
 * (state_batch_indices; 0 or in [B, 1000000]); −1 + usage message. */
int    cli_check_nseq_slots(const cli_problem * pb, int64_t B, char * err, size_t errlen);
/* The slots param alone: 0 (no state_batch_indices) or in [B, 1000000] (a usage error). */
int    cli_check_slots(const cli_problem * pb, int64_t B, char * err, size_t errlen);

/* ---- shapes from the schema, and what the Mamba-3 families build from them ---------------- */
/* A dimension symbol of the schema's shape texts ("B", "NS", "nc") and its size. */
typedef struct cli_sym {
    const char * name; /* NULL ends a list */
    int64_t      value;
} cli_sym;
/* The symbols of an operator: its shape keys ("B", "chunk") and the derived sizes its family
 * names (NULL-name ended), into syms (max entries with the end). */
#define CLI_MAX_SYMS 24
void cli_syms(const cli_problem * pb, const cli_sym * derived, cli_sym * syms, int max);
/* The shape of argument `name` from the schema's shape text: its alt-th parenthesised list
 * (0: the first; "(B, S, H, P) with `mimo_o`; else (B, S, R, H, P)" has two), each size a
 * symbol of syms or an integer, or a sum or product of them ("NS + 1", "W−1", "H·P").
 * Returns ndim, or −1 when the text has no such list or names a symbol not in syms. */
int32_t cli_schema_shape(const cli_problem * pb, const char * name, int alt, const cli_sym * syms, int64_t * shape);
/* Draws the values of one input the Mamba-3 generators allocated (dims: the family's). */
typedef void (*cli_fill_fn)(cli_problem * pb, const void * dims, const char * name, const ssm_tensor * t,
                            cli_rng * rng);
/* The fused pre-gate norm (params fused or fuse_pregate_headwise_rms_norm). */
int cli_fused(const cli_problem * pb);
/* Whether a Mamba-3 generator draws input arg: required ones always; optional ones by the
 * params that switch them on (has_d, has_z: z and mimo_z, reduce_o: mimo_o, fused and
 * has_norm_weight, nseq: cu_seqlens, slots: state_batch_indices, has_dfinal, has_states). */
int cli_m3_wanted(const cli_problem * pb, const cli_arg * arg);
/* Seeds rng, allocates every input cli_m3_wanted draws, in the schema's order, with its
 * schema shape (per_rank: out and dout take their per-rank shape, MIMO without mimo_o), fills
 * it, then scales adt (drawn as a positive factor) by −dt. rng goes on for the caller. */
int cli_m3_generate(cli_problem * pb, uint64_t seed, const cli_sym * syms, int per_rank, cli_fill_fn fill,
                    const void * dims, cli_rng * rng, char * err, size_t errlen);
/* A Mamba-3 backward's saved forward results (saved_y, saved_states): pregate_y (yndim dims, yshp)
 * and chunk_states (4 dims, cshp), each drawn where its param is 1, then written by the forward
 * `fwd` on the CPU (run, on a CPU context) over the generated inputs: args (size bytes, its args
 * struct) filled by cli_forward_inputs, its out (ondim dims, oshp) a scratch F32 buffer; out, y
 * and cs point to its out, pregate_y and chunk_states fields. */
typedef struct cli_m3_saved {
    const char *    fwd;
    void *          args;
    size_t          size;
    ssm_tensor *    out, *y, *cs;
    int32_t         yndim, ondim;
    const int64_t * yshp, *cshp, *oshp;
    ssm_status (*run)(ssm_context * ctx, const cli_problem * pb, void * args);
} cli_m3_saved;
int cli_m3_saved_results(cli_problem * pb, const cli_m3_saved * s, char * err, size_t errlen);
/* Allocates the outputs with their schema shapes: not a gradient whose input (the schema's
 * needs) is absent; a decode step's final pools in place of their inputs with in_place=1;
 * other final states with has_final; dangle_state without an angle_state input with
 * has_states; doutproj_norm_weight with the fused norm, shaped like the weight. */
int cli_m3_alloc(cli_problem * pb, int f64, const cli_sym * syms, int per_rank, char * err, size_t errlen);
/* `run`: each shape key from the first loaded input whose schema shape names it, in the
 * schema's order (inputs with one shape only; from: the inputs to use, "x b", or NULL for
 * all; aliases: symbols named differently from their key, "batch=B,Q=chunk"); a key given on
 * the command line stays. Each input used must have its schema rank (else −1 + message). */
int  cli_bind_shapes(cli_problem * pb, const char * from, const char * aliases, char * err, size_t errlen);
/* `run`: the params that say which inputs there are, where the operator has them: has_d
 * (d's rank), has_z, has_dt_bias, has_init, has_bias, reduce_o, has_norm_weight, seq_idx,
 * has_states, has_dfinal, nseq (from cu_seqlens), slots (the pool's rows with
 * state_batch_indices); has_final = 1. */
void cli_bind_flags(cli_problem * pb);

/* Shared with cli-mamba2.c: the forward's validation, inputs and params (mamba2_scan_bwd
 * has mamba2_scan's keys and inputs). */
int               cli_mamba2_validate(const cli_problem * pb, char * err, size_t errlen);
/* `run`: shape keys and presence params from the inputs; the chunk: given, else the Q of a
 * (…, NC, Q) input, else 256. */
int               cli_mamba2_bind(cli_problem * pb, char * err, size_t errlen);
int               cli_mamba2_scan_inputs(cli_problem * pb, uint64_t seed, char * err, size_t errlen);
ssm_mamba2_params cli_mamba2_params(const cli_problem * pb);

/* ---- messages and helpers --------------------------------------------------------------- */
int    cli_usage_error(const char * fmt, ...) CLI_PRINTF(1, 2); /* prints, returns 2 */
int    cli_fail(const char * fmt, ...) CLI_PRINTF(1, 2);        /* prints, returns 1 */
/* Reports a library failure: status name and the context's last error; returns 1. */
int    cli_lib_error(const ssm_context * ctx, ssm_status status, const char * what);
void   cli_progress(const char * fmt, ...) CLI_PRINTF(1, 2); /* stderr, only on a terminal */
double cli_now(void);                                       /* monotonic seconds */
int    cli_default_threads(void);
ssm_status cli_context_create(ssm_backend backend, int threads, ssm_context ** ctx);
/* The same with a reference rounding model (ctx ref_mode, an ssm_ref_mode). */
ssm_status cli_context_create_mode(ssm_backend backend, int threads, int32_t ref_mode, ssm_context ** ctx);
/* A 64-byte aligned zeroed allocation (free with free()). */
void * cli_alloc(size_t bytes);

#endif /* SSMOPS_CLI_H */
