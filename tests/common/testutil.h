/*
 * testutil.h — shared support for the ssmops tests (tests/common/testutil.c).
 *
 * What is here, and how to use it:
 *
 *  Checks      TEST_CHECK(cond, fmt, ...) counts a failure and prints file:line and the
 *              message when cond is false; TEST_CHECK_STATUS(expr, want) compares statuses;
 *              TEST_EXIT() ends main with 0 if nothing failed, 1 otherwise.
 *  RNG         ssmt_rng (xoshiro256** seeded through splitmix64): ssmt_rng_seed, ssmt_u64,
 *              ssmt_uniform(lo, hi), ssmt_normal() (Box-Muller). Same seed, same numbers.
 *  Tensors     ssmt_host owns a 64-byte aligned buffer and carries an ssm_tensor view `t`.
 *              ssmt_alloc (contiguous) / ssmt_alloc_layout (permuted and/or padded strides)
 *              poison the whole buffer with NaN (float dtypes) or 0x5A bytes (int dtypes)
 *              so a read of an unwritten element shows up. Fill helpers round every value
 *              to the tensor's dtype (ssmt_fill_normal / _uniform / _value / ssmt_fill_fn).
 *              ssmt_get / ssmt_set read and write the element at a row-major linear index,
 *              honouring strides. ssmt_to_f64 makes a contiguous F64 copy; ssmt_copy
 *              converts element-wise between any two views of the same shape.
 *              ssmt_snapshot / ssmt_unchanged compare the raw bytes of a buffer.
 *  Compare     ssmt_compare(y, r): rel_rms = ||y−r||₂/||r||₂, max_rel = max|y−r|/rms(r),
 *              and the count of positions where y is NaN/Inf but r is finite.
 *              ssmt_check_bar(name, y, r, dtype) applies the DESIGN §5 bar of a compute dtype;
 *              ssmt_check_close(name, y, r, tol) a rel_rms tolerance (max_rel must be ≤ 100·tol).
 *              Both print one line "name rel_rms max_rel bar PASS|FAIL" and return 1 on pass.
 *  Cases       ssmt_case_load reads tests/data/<op>/<case>/case.json (dtype, params.chunk,
 *              params.dt_softplus, params.dt_limit "lo:hi", params.layout); ssmt_case_tensor
 *              loads <name>.npy converted to a dtype; ssmt_case_list lists the cases of an op;
 *              ssmt_bag_load loads the listed tensors of a case, ssmt_bag_get finds one by name.
 *  Mamba-2     ssmt_mamba2_random_args builds realistic mamba2_scan inputs (spec ranges) for a
 *              configuration, with poisoned outputs and ready-to-use ssm_mamba2_scan_args.
 *  Mamba-3     ssmt_mamba3_random_args builds realistic Mamba-3 SISO inputs (spec §4.3, or the
 *              seed regime of §4.4) for a configuration: ready-to-use args for ssm_mamba3_siso
 *              (raw angles), ssm_mamba3_siso_fwd (cumulative angles `theta`) and the angle
 *              cumsum; ssmt_mamba3_bwd_alloc adds dout / dfinal_* and every gradient output;
 *              ssmt_mamba3_random_step builds a decode problem with a state pool.
 *  MIMO        ssmt_mimo_random_args builds Mamba-3 MIMO forward inputs (ssm_mamba3_mimo_args +
 *              params) for a configuration (B,S,H,G,R,N,P,C,div, dtype, reduce_o, z, d, fused,
 *              states, varlen, strided); ssmt_mimo_bwd_alloc adds dout / dfinal_* and every
 *              allowed gradient output (ssm_mamba3_mimo_bwd_args); ssmt_mimo_random_bwd_fwd builds
 *              the seed's bwd_fwd problem (§5.5 distributions, independent random da_cs /
 *              da_cs_rev / segsum, or ones consistent with a random adt); ssmt_mimo_random_step
 *              builds a decode problem with a state pool and state_batch_indices.
 */
#ifndef SSMOPS_TESTUTIL_H
#define SSMOPS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ssmops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- checks -------------------------------------------------------------------------- */
extern int ssmt_failures; /* number of failed checks so far */
extern int ssmt_checks;   /* number of checks run */
/* Set while a test forces a kernel variant: its checked outputs stay out of the hash log. */
extern int ssmt_variant_forced;
/* With SSMOPS_TEST_HASH_LOG=FILE (and no variant forced), appends "name hash" of y's values to
 * FILE; the ssmt_check_* functions call it for every output they check. */
void ssmt_hash_log(const char * name, const ssm_tensor * y);

#define TEST_CHECK(cond, ...)                                                         \
    do {                                                                              \
        ++ssmt_checks;                                                                \
        if (!(cond)) {                                                                \
            ++ssmt_failures;                                                          \
            fprintf(stderr, "%s:%d: CHECK FAILED (%s): ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
        }                                                                             \
    } while (0)

#define TEST_CHECK_STATUS(expr, want)                                                                       \
    do {                                                                                                    \
        const ssm_status ssmt_got_ = (expr);                                                                \
        TEST_CHECK(ssmt_got_ == (want), "%s returned %s, expected %s", #expr, ssm_status_string(ssmt_got_), \
                   ssm_status_string(want));                                                                \
    } while (0)

/* Use as the last statement of main. */
#define TEST_EXIT()                                                     \
    do {                                                                \
        printf("%d checks, %d failures\n", ssmt_checks, ssmt_failures); \
        return ssmt_failures == 0 ? 0 : 1;                              \
    } while (0)

/* ---- random numbers ------------------------------------------------------------------ */
typedef struct ssmt_rng {
    uint64_t s[4];
} ssmt_rng;

void     ssmt_rng_seed(ssmt_rng * rng, uint64_t seed);
uint64_t ssmt_u64(ssmt_rng * rng);
double   ssmt_uniform(ssmt_rng * rng, double lo, double hi);   /* [lo, hi) */
double   ssmt_normal(ssmt_rng * rng);                          /* N(0, 1) */
int64_t  ssmt_randint(ssmt_rng * rng, int64_t lo, int64_t hi); /* [lo, hi] */
/* Seeds rng from SSMOPS_TEST_SEED, or default_seed when it is not set, and prints the seed
 * ("seed N") so that a failing run can be repeated. Returns the seed. */
uint64_t ssmt_rng_from_env(ssmt_rng * rng, uint64_t default_seed);

/* ---- contexts ------------------------------------------------------------------------ */
/* A context with the given backend, thread count, ISA and reference mode; NULL on failure.
 * An AUTO ISA that SSMOPS_ISA resolves to an ISA the host lacks exits the test with 77
 * (skipped). */
ssm_context * ssmt_make_ctx_mode(ssm_backend backend, int threads, ssm_isa isa, ssm_ref_mode mode);
/* The same in the default reference mode (SSM_REF_EXACT). */
ssm_context * ssmt_make_ctx(ssm_backend backend, int threads, ssm_isa isa);
/* The contexts of the CPU-vs-reference tests: *ref (REF, 1 thread), cpu[1], cpu[2], cpu[3]
 * (CPU with that many threads, AUTO ISA; cpu[0] is left alone) and *scalar (CPU, 2 threads,
 * scalar ISA), created in that order. Counts a failure "context creation failed" unless all
 * five exist; returns 1 when they do. ssmt_free_cpu_ctxs frees them. */
int  ssmt_make_cpu_ctxs(ssm_context ** ref, ssm_context * cpu[4], ssm_context ** scalar);
void ssmt_free_cpu_ctxs(ssm_context * ref, ssm_context * const cpu[4], ssm_context * scalar);
/* A REF-backend context in ref mode `mode`, its other params the defaults; when it cannot be
 * created the test ends (exit 1) after saying so on stderr. */
ssm_context * ssmt_ref_ctx_or_exit(ssm_ref_mode mode);
/* A CUDA-backend context with the default params, or NULL (after printing `note`, unless NULL)
 * where none can be created. */
ssm_context * ssmt_cuda_ctx_or_null(const char * note);
/* What a CUDA-backend context must answer for an operator called with host tensors: with the
 * CUDA backend built, an operator with a CUDA path rejects them (INVALID_LAYOUT: mixed
 * devices); every other operator, and every operator without the backend built, is
 * UNSUPPORTED. Checks `got` and that the message names CUDA. */
void ssmt_expect_cuda_refusal(const char * op, ssm_context * cuda_ctx, ssm_status got);
/* How the last error of a refused call must name its operator (ssmt_check_refusal). */
typedef enum ssmt_name_rule {
    SSMT_NAME_PREFIX,  /* the message starts with "<name>:"                 */
    SSMT_NAME_ANYWHERE /* the message is not empty and contains <name>      */
} ssmt_name_rule;
/* The checks on one call that validation must refuse: status `got` is `want`; the last error
 * `msg` names the operator `name` by `rule` and mentions `must_mention` (unless NULL). `op`,
 * `what` and `ctx` ("NULL", "REF") label the failure messages. */
void ssmt_check_refusal(const char * op, const char * what, const char * ctx, ssm_status got, ssm_status want,
                        const char * msg, const char * name, ssmt_name_rule rule, const char * must_mention);

/* ---- host tensors -------------------------------------------------------------------- */
typedef struct ssmt_host {
    ssm_tensor t;     /* the view; t.data == NULL for an absent tensor */
    void *     buf;   /* owned allocation (t.data points inside it)  */
    size_t     bytes; /* size of buf                                   */
} ssmt_host;

/* Contiguous row-major tensor, poisoned. Returns an absent tensor (t.data NULL) on failure. */
ssmt_host ssmt_alloc(ssm_dtype dtype, int32_t ndim, const int64_t * shape);
/* Tensor with a chosen memory layout, poisoned (padding included). order[k] is the logical
 * dim stored k-th from outermost to innermost (NULL = 0..ndim-1); pad extra elements are
 * added to every dim's extent in memory, so no stride equals the dense one when pad > 0. */
ssmt_host ssmt_alloc_layout(ssm_dtype dtype, int32_t ndim, const int64_t * shape, const int32_t * order, int64_t pad);
/* Same dtype/shape as src (any layout) with a contiguous layout, values copied. */
ssmt_host ssmt_clone(const ssm_tensor * src, ssm_dtype dtype);
void      ssmt_free(ssmt_host * h);

int64_t ssmt_numel(const ssm_tensor * t);
/* Element offset (in elements, from t->data) of the row-major linear index lin. */
int64_t ssmt_offset(const ssm_tensor * t, int64_t lin);
double  ssmt_get(const ssm_tensor * t, int64_t lin);
void    ssmt_set(const ssm_tensor * t, int64_t lin, double v); /* rounded to t's dtype */
/* Elements whose NaN-ness differs between got and ref (one shape, any dtypes and layouts); ref's
 * NaNs are added to *nans. */
int64_t ssmt_nan_mismatch(const ssm_tensor * got, const ssm_tensor * ref, int64_t * nans);
/* Value rounded to a float dtype, as double (f64 unchanged). */
double ssmt_round_to(ssm_dtype dtype, double v);

void ssmt_fill_value(const ssm_tensor * t, double v);
void ssmt_fill_normal(ssmt_rng * rng, const ssm_tensor * t, double mean, double std);
void ssmt_fill_uniform(ssmt_rng * rng, const ssm_tensor * t, double lo, double hi);
/* t[lin] = fn(arg, lin). */
void ssmt_fill_fn(const ssm_tensor * t, double (*fn)(void * arg, int64_t lin), void * arg);
/* NaN in every element of the view (floats) or 0x5A5A... (ints). */
void ssmt_poison(const ssm_tensor * t);
/* dst[i] = src[i] for every element (shapes must match), converted and rounded. */
void ssmt_copy(const ssm_tensor * dst, const ssm_tensor * src);
/* Contiguous F64 copy of any view. */
ssmt_host ssmt_to_f64(const ssm_tensor * src);

/* ---- views (no copy; an absent tensor stays absent) ---------------------------------- */
/* An absent (all-zero) tensor. */
ssm_tensor ssmt_absent(void);
/* Indices [start, start+len) of dimension dim. */
ssm_tensor ssmt_slice(const ssm_tensor * t, int32_t dim, int64_t start, int64_t len);
/* Index `at` of dimension dim fixed (that dim removed). */
ssm_tensor ssmt_pick(const ssm_tensor * t, int32_t dim, int64_t at);
/* The same buffer with one shape entry changed, or another dtype (for validation tests:
 * never read, validation fails first). */
ssm_tensor ssmt_reshaped(const ssm_tensor * t, int32_t dim, int64_t n);
ssm_tensor ssmt_retyped(const ssm_tensor * t, int32_t dtype);
/* h seen as `ndim` dims of `shape`: dims with keep[i] != 0 take h's dims in order, the others
 * get stride 0 (a broadcast view). */
ssm_tensor ssmt_broadcast(const ssm_tensor * h, int32_t ndim, const int64_t * shape, const int * keep);

/* Byte snapshot of a whole buffer (padding included); free with free(). */
void * ssmt_snapshot(const ssmt_host * h);
int    ssmt_unchanged(const ssmt_host * h, const void * snapshot);

/* The buffers a call could touch (the validation tests' fixtures), for byte snapshots. */
#define SSMT_BUFSET_MAX 160
typedef struct ssmt_bufset {
    ssmt_host * h[SSMT_BUFSET_MAX];
    int         n;
} ssmt_bufset;
/* Adds h unless it has no buffer (absent) or the set is full. */
void ssmt_bufset_add(ssmt_bufset * s, ssmt_host * h);
/* Adds the members first .. last of one struct in order, all of them ssmt_host (a run of members). */
void ssmt_bufset_add_members(ssmt_bufset * s, ssmt_host * first, ssmt_host * last);
/* Snapshots of every buffer of s into snaps[0 .. s->n). */
void ssmt_bufset_snapshot(const ssmt_bufset * s, void ** snaps);
/* Checks every buffer of s against its snapshot ("<op> / <what>: buffer i was modified") and
 * frees the snapshots. */
void ssmt_bufset_check_unchanged(const ssmt_bufset * s, void ** snaps, const char * op, const char * what);

/* ---- comparisons --------------------------------------------------------------------- */
typedef struct ssmt_cmp {
    double  rel_rms;   /* ||y - r||_2 / ||r||_2 (absolute when ||r|| == 0)       */
    double  max_rel;   /* max |y - r| / rms(r) (absolute when rms(r) == 0)       */
    int64_t nonfinite; /* positions where y is NaN/Inf but r is finite            */
    int64_t n;
} ssmt_cmp;

typedef struct ssmt_bar {
    double rel_rms;
    double max_rel;
} ssmt_bar;

ssmt_cmp ssmt_compare(const ssm_tensor * y, const ssm_tensor * r);
ssmt_bar ssmt_bar_for(ssm_dtype compute_dtype); /* DESIGN §5 (f64: the f32 bar) */
int      ssmt_check_bar(const char * name, const ssm_tensor * y, const ssm_tensor * r, ssm_dtype compute_dtype);
/* y (an output in its own dtype) against r with the bar of the compute dtype, counting for an
 * f16/bf16 y only each element's error beyond half an ulp of that dtype at r: rounding the output
 * alone costs up to half an ulp, 2^-11·|r| in f16, so against unrounded r max_rel reaches
 * 2^-11·max|r|/rms(r), past the f16 bar 2^-7 whenever an element is 16x the rms; and against r
 * rounded to the dtype, an fp32 result within 1e-7 of a rounding boundary may round the other
 * way (one ulp off). Both are the dtype's error, not the kernel's. */
int      ssmt_check_bar_rounded(const char * name, const ssm_tensor * y, const ssm_tensor * r, ssm_dtype compute_dtype);
ssmt_cmp ssmt_compare_rounded(const ssm_tensor * y, const ssm_tensor * r); /* the measure above */
int      ssmt_check_close(const char * name, const ssm_tensor * y, const ssm_tensor * r, double tol_rel_rms);
/* Explicit bar (both rel_rms and max_rel). */
int ssmt_check_within(const char * name, const ssm_tensor * y, const ssm_tensor * r, ssmt_bar bar);
/* Same shapes? Prints a FAIL line and counts a failure if not. */
/* y within bar of r, NaN/Inf not in r failing; a counted failure "name/slot/variant: rel_rms
 * ... (bar ...)" otherwise. Returns the rel_rms (for the worst-case tables of the tests). */
double ssmt_check_variant(const char * name, const char * slot, const char * variant, const ssm_tensor * y,
                          const ssm_tensor * r, ssmt_bar bar);
/* ssmt_check_within with the bar {tol, 100·tol}. */
void ssmt_check_tol(const char * label, const ssm_tensor * y, const ssm_tensor * r, double tol);
/* ssmt_check_close, plus a counted failure naming tol when it fails. */
void ssmt_expect_close(const char * name, const ssm_tensor * y, const ssm_tensor * r, double tol);
int ssmt_same_shape(const char * name, const ssm_tensor * a, const ssm_tensor * b);

/* ---- the CPU-vs-reference harness of the operator tests ----------------------------- *
 * An op case: an args struct (inputs filled), the output slots inside it, a runner. For each
 * output slot: REF into F64, CPU (threads 1/2/3 and scalar ISA) into out_dtype; the bars of
 * the compute dtype on 1 thread and scalar (angle outputs compared modulo 2π); 2 and 3
 * threads bitwise equal to 1. */
typedef ssm_status (*ssmt_run_fn)(ssm_context * ctx, void * args);
#define SSMT_MAX_OUTS 9
typedef struct ssmt_op_case {
    const char * name;
    void *       args;
    size_t       args_size;
    ssm_tensor * outs[SSMT_MAX_OUTS]; /* pointers into args */
    int          nouts;
    unsigned     angle_outs; /* bit o: output o is an angle, compared modulo 2π           */
    ssm_dtype    compute;
    ssm_dtype    out_dtype;
    ssmt_run_fn  run;
} ssmt_op_case;

/* Adds t to the output slots when it is present. */
void ssmt_op_add_out(ssmt_op_case * oc, ssm_tensor * t);
/* Adds every present output of oc->args, operator op's args struct, in the schema's order. */
void ssmt_op_add_outs(ssmt_op_case * oc, const char * op);
/* A case `name` running `run` on args (args_size bytes) with the compute and output dtypes; with
 * op (not NULL) its output slots are op's present outputs (ssmt_op_add_outs), without none. */
ssmt_op_case ssmt_op_case_make(const char * name, const char * op, void * args, size_t args_size, ssm_dtype compute,
                               ssm_dtype out_dtype, ssmt_run_fn run);
/* Runs the case on ref, cpu[1..3] and scalar (cpu[0] is not used). */
void ssmt_op_run(const ssmt_op_case * oc, ssm_context * ref, ssm_context * const cpu[4], ssm_context * scalar);
/* An F64 copy of an angle output with each element moved by ±2π to the side of the
 * reference: θ is only defined modulo 2π, and a value a rounding away from a multiple of
 * 2π may wrap to either end of [0, 2π] (spec §4.3 compares angle states circularly). */
ssmt_host ssmt_unwrap_angles(const ssm_tensor * got, const ssm_tensor * ref);

/* ---- test cases (tests/data/<op>/<case>/) ------------------------------------------- */
typedef struct ssmt_case {
    char      dir[1024];
    char      op[64];
    char      name[128];
    ssm_dtype dtype;       /* case.json "dtype" */
    int64_t   chunk;       /* params.chunk (0 if absent) */
    int32_t   dt_softplus; /* params.dt_softplus (0 if absent) */
    int32_t   has_dt_limit;
    double    dt_lo, dt_hi; /* params.dt_limit "lo:hi" (defaults 0, +inf) */
    char      layout[32];   /* params.layout ("" if absent) */
} ssmt_case;

/* Names of the case folders of op, sorted; returns the count (≤ max). */
int ssmt_case_list(const char * op, char (*names)[128], int max);
/* 0 on success; prints the reason and returns -1 otherwise. */
int ssmt_case_load(ssmt_case * c, const char * op, const char * name);
int ssmt_case_has(const ssmt_case * c, const char * tensor);
/* Loads <tensor>.npy converted to dtype (float npy → float dtype, int npy → int dtype) into a
 * contiguous host tensor. Returns an absent tensor (and prints why) on failure. */
ssmt_host ssmt_case_tensor(const ssmt_case * c, const char * tensor, ssm_dtype dtype);
/* ssm_mamba2_params from the case (chunk, dt_softplus, dt_limit). */
void ssmt_case_mamba2_params(const ssmt_case * c, ssm_mamba2_params * p);

/* A case's tensors by name. ssmt_bag_load loads case `name` of op and every listed tensor the
 * case has: a name "want:x" is x.npy as an F64 reference output, any other name x.npy in the
 * dtype that dtype_of(case, "x", arg) gives. A counted failure "cannot load op/name" and −1
 * when the case cannot be loaded (nothing to free then). */
#define SSMT_BAG_MAX 48
typedef struct ssmt_bag {
    ssmt_case c;
    int       n;
    char      names[SSMT_BAG_MAX][40];
    ssmt_host h[SSMT_BAG_MAX];
} ssmt_bag;
typedef ssm_dtype (*ssmt_bag_dtype_fn)(const ssmt_case * c, const char * file, void * arg);
int ssmt_bag_load(ssmt_bag * g, const char * op, const char * name, const char * const * list,
                  ssmt_bag_dtype_fn dtype_of, void * arg);
/* The tensor loaded under name (absent if the case lacks it). */
ssm_tensor ssmt_bag_get(const ssmt_bag * g, const char * name);
/* An F64 output shaped like the stored reference "want:name" (absent if the case lacks it). */
ssmt_host ssmt_bag_out_like(const ssmt_bag * g, const char * name);
void      ssmt_bag_free(ssmt_bag * g);

/* ---- Mamba-2 random problems --------------------------------------------------------- */
typedef struct ssmt_mamba2_config {
    int64_t   batch, seqlen, nheads, headdim, dstate, ngroups;
    ssm_dtype dtype;       /* x, b, c, z, dt (the compute dtype)                        */
    ssm_dtype param_dtype; /* a, d, dt_bias, initial_states (use F32 for realism)      */
    ssm_dtype out_dtype;   /* out, final_states                                       */
    int32_t   d_mode;      /* 0 no D, 1 D (H), 2 D (H, P)                               */
    int32_t   has_z, has_dt_bias, has_initial, has_final, dt_softplus;
    int32_t   seq_segments; /* > 0: seq_idx with up to this many id changes per row;
                               row b starts at id (b % 2) so odd rows skip initial_states */
    int32_t nseq;           /* > 0: varlen with these sequence lengths (batch becomes 1,
                               seqlen the sum)                                           */
    const int64_t * seqlens;
    int32_t         strided;   /* 1: x, b, c, z, dt, out use padded/permuted layouts        */
    int32_t         index_i64; /* seq_idx / cu_seqlens as I64 instead of I32                */
} ssmt_mamba2_config;

/* Fills a config with small defaults: batch 2, S 40, H 4, P 8, N 8, G 2, F32 everything,
 * no optional inputs. */
void ssmt_mamba2_config_init(ssmt_mamba2_config * cfg);

/* The three sequence layouts of the Mamba-2 test matrices: variant 0 dense batch rows, 1 seq_idx
 * with `segments` segments (0: none), 2 varlen over the n lengths in lens (kept alive by the caller
 * until the problem is built). Returns the layout's name for a case tag. */
const char * ssmt_mamba2_layout(ssmt_mamba2_config * cfg, int variant, int32_t segments, const int64_t * lens,
                                int32_t n);

/* The Mamba-2 backward sweep (test_mamba2_bwd.c on CPU, test_cuda_mamba2_bwd.c on CUDA): case
 * k at the si-th of SSMT_MAMBA2_BWD_NSEQLENS sequence lengths in layout `variant` (0..2), sizes
 * (R = H/G of 1, 6, 20, 9, 1, 8), dtypes and options rotating with k at periods coprime with the
 * dtype's, so every dtype meets each option; lens (kept alive by the caller) holds the varlen
 * lengths. Returns the case's chunk size. */
enum { SSMT_MAMBA2_BWD_NSEQLENS = 7 };
int64_t ssmt_mamba2_bwd_case(ssmt_mamba2_config * cfg, int k, int si, int variant, int64_t lens[4]);

typedef struct ssmt_mamba2_problem {
    ssmt_host            x, dt, a, b, c, d, z, dt_bias, initial_states, seq_idx, cu_seqlens, out, final_states;
    ssm_mamba2_scan_args args; /* views of the tensors above; absent ones are zeroed      */
    int64_t              nseq;
} ssmt_mamba2_problem;

/* Random inputs with the spec's ranges: A = −exp(U(ln 1, ln 16)); dt such that the processed
 * dt lies in about [1e-3, 0.1]; x, b, c, z, D, initial states ~ N(0, 1); values rounded to
 * their dtypes. out / final_states are poisoned with NaN. Returns 0 (−1 on allocation
 * failure, with the problem freed). */
int  ssmt_mamba2_random_args(ssmt_rng * rng, const ssmt_mamba2_config * cfg, ssmt_mamba2_problem * prob);
void ssmt_mamba2_problem_free(ssmt_mamba2_problem * prob);

/* mamba2_chunk_state on the CANN layout at the CANN shape (B 1, 4 chunks of L 256, H 128, G 8, N 128,
 * P 64; f16 x and b, N(0, 0.2) inputs drawn x, b, dt, da_cumsum): dt and da_cumsum [B,NC,L,H] seen as
 * (B,H,NC,Q) in dtv/dav, the states [B,NC,H,N,P] seen as (B,NC,H,P,N) in outv (F32 out) and refv (F64
 * ref); args over x, b, dtv, dav with states = refv; params with chunk_size L. */
typedef struct ssmt_cann_chunk_state {
    ssmt_host                   x, b, dt, dacs, out, ref;
    ssm_tensor                  dtv, dav, outv, refv;
    ssm_mamba2_params           params;
    ssm_mamba2_chunk_state_args args;
} ssmt_cann_chunk_state;
void ssmt_cann_chunk_state_make(ssmt_rng * rng, ssmt_cann_chunk_state * c);
void ssmt_cann_chunk_state_free(ssmt_cann_chunk_state * c);

/* ---- Mamba-3 SISO random problems ---------------------------------------------------- */
typedef struct ssmt_mamba3_config {
    int64_t   batch, seqlen, nheads, nheads_qk, dk, dv, nangles; /* B, S, H, Hq, K, V, A     */
    int64_t   chunk;        /* params.chunk_size to use (ssmt_mamba3_params)               */
    ssm_dtype dtype;        /* q, k, v, z, trap, angles, theta (v's dtype = compute dtype)  */
    ssm_dtype param_dtype;  /* adt, dt, q_bias, k_bias, d, initial states (F32 = realistic) */
    ssm_dtype out_dtype;    /* out and final states (and gradients in ssmt_mamba3_bwd_alloc) */
    int32_t   has_d, has_z;
    int32_t   has_states;   /* the four initial states (angle, ssm, k, v)                   */
    int32_t   has_final;    /* the four final-state outputs                                */
    int32_t   nseq;         /* > 0: varlen with these lengths (batch becomes 1, S the sum;
                               zeros allowed = empty sequences)                              */
    const int64_t * seqlens;
    int32_t seed_regime;      /* spec §4.4 ranges instead of §4.3 (see below)               */
    int32_t trap_randn;       /* trap ~ N(0, 1) instead of U(0, 1) (normal regime)           */
    int32_t angles_broadcast; /* angles and theta: one (B,S,1,A) buffer, stride 0 over H    */
    int32_t strided;          /* q, k, v, z, out, adt, dt, trap in padded/permuted layouts   */
    int32_t index_i64;        /* cu_seqlens as I64 instead of I32                            */
    int32_t angles_f32;       /* angles and theta in F32 whatever dtype is (upstream's use)  */
} ssmt_mamba3_config;

/* Small defaults: B 2, S 40, H 4, Hq 2, K 16, V 8, A 4, chunk 16, F32 everywhere, d and z
 * on, no states, no finals, normal regime. */
void ssmt_mamba3_config_init(ssmt_mamba3_config * cfg);
/* ssm_mamba3_params with the config's chunk size. */
void ssmt_mamba3_params(const ssmt_mamba3_config * cfg, ssm_mamba3_params * p);

typedef struct ssmt_mamba3_problem {
    ssmt_host q, k, v, adt, dt, trap, q_bias, k_bias, angles, theta, d, z;
    ssmt_host angle_state, ssm_state, k_state, v_state, cu_seqlens;
    ssmt_host out, final_angle_state, final_ssm_state, final_k_state, final_v_state;
    ssm_mamba3_siso_args         args;     /* combined forward, raw `angles`             */
    ssm_mamba3_siso_fwd_args     fwd_args; /* core forward: `theta` as the cumulative angles,
                                              ssm/k/v states, the same out / finals       */
    ssm_mamba3_angle_cumsum_args angle_args; /* angles, dt, angle_state, cu_seqlens → theta
                                                (overwrites theta) and final_angle_state;
                                                angles_cumsum is absent with angles_broadcast
                                                (a stride-0 output is invalid): set it      */
    int64_t nseq; /* NS */
} ssmt_mamba3_problem;

/* Random inputs, values rounded to their dtypes; outputs poisoned with NaN.
 * Normal regime (spec §4.3): q, k = randn rows scaled to unit rms; v, z = randn;
 *   dt = exp(U(ln 1e-3, ln 0.1)); adt = −U(1, 16)·dt; trap = U(0, 1) logits (randn with
 *   trap_randn); q_bias, k_bias = randn; raw angles = randn; theta = U(0, 2π); d = randn;
 *   initial states = randn.
 * Seed regime (§4.4): theta = U(0, 0.25), raw angles = 0.1·randn, adt = −U(0, 0.08),
 *   dt = N(0, 0.05²) (negative dt occurs), trap = N(0, 1), biases = N(0, 0.05²),
 *   d = U(0, 0.2); q, k, v, z and states as above.
 * Returns 0, or −1 on allocation failure (the problem is freed). */
int  ssmt_mamba3_random_args(ssmt_rng * rng, const ssmt_mamba3_config * cfg, ssmt_mamba3_problem * prob);
void ssmt_mamba3_problem_free(ssmt_mamba3_problem * prob);
/* Rows of a chunk_states for cfg's sequences (cu_seqlens, or the batch rows) at chunks of `chunk`
 * tokens: Σ ceil(len/chunk), none for an empty sequence. */
int64_t ssmt_mamba3_chunk_rows(const ssmt_mamba3_config * cfg, int64_t chunk);
/* A chunk_states (NCS, H, V, K) for cfg at chunks of `chunk` tokens, NaN-poisoned: dense, or
 * strided (K outside V in memory, every dim padded); data NULL when out of memory. */
ssmt_host ssmt_mamba3_chunk_states(const ssmt_mamba3_config * cfg, int64_t chunk, ssm_dtype dtype, int strided);

typedef struct ssmt_mamba3_bwd_problem {
    ssmt_host dout, dfinal_angle_state, dfinal_ssm_state, dfinal_k_state, dfinal_v_state;
    ssmt_host dq, dk, dv, dadt, ddt, dtrap, dq_bias, dk_bias, dangles, dd, dz;
    ssmt_host dangle_state, dssm_state, dk_state, dv_state;
    ssm_mamba3_siso_bwd_args args; /* forward inputs from the problem + the tensors above */
} ssmt_mamba3_bwd_problem;

/* Backward tensors for a problem: dout = randn (cfg->dtype); with has_dfinal the four
 * dfinal_* = randn (F32); every gradient output allowed by the presence rules (dd with d,
 * dz with z, state gradients with initial states) in out_dtype, poisoned, with the
 * forward's layout when the config is strided. Returns 0 or −1 (freed). */
int  ssmt_mamba3_bwd_alloc(ssmt_rng * rng, const ssmt_mamba3_config * cfg, const ssmt_mamba3_problem * prob,
                           int has_dfinal, ssmt_mamba3_bwd_problem * bwd);
void ssmt_mamba3_bwd_free(ssmt_mamba3_bwd_problem * bwd);

typedef struct ssmt_mamba3_step_problem {
    ssmt_host q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z;
    ssmt_host angle_state, ssm_state, k_state, v_state, state_batch_indices;
    ssmt_host out, final_angle_state, final_ssm_state, final_k_state, final_v_state;
    ssm_mamba3_siso_step_args args; /* separate final_* buffers (not in place)              */
    int64_t                   slots;
} ssmt_mamba3_step_problem;

/* One decode token per row (cfg->seqlen, nseq, strided, angles_broadcast are ignored): the
 * cfg ranges for q…z (B = cfg->batch), a pool of `slots` states (angle_state U(0, 2π),
 * others randn, param_dtype). with_indices: state_batch_indices (I32, I64 if index_i64) =
 * a random injective map of rows to slots, with every third row (b % 3 == 2) padding
 * (−1); needs slots ≥ batch. Without it slots must equal batch. Outputs poisoned. */
int  ssmt_mamba3_random_step(ssmt_rng * rng, const ssmt_mamba3_config * cfg, int64_t slots, int with_indices,
                             ssmt_mamba3_step_problem * prob);
void ssmt_mamba3_step_free(ssmt_mamba3_step_problem * prob);

/* ---- Mamba-3 MIMO random problems ----------------------------------------------------- */
typedef struct ssmt_mimo_config {
    int64_t   batch, seqlen, nheads, ngroups, rank, dstate, headdim; /* B, S, H, G, R, N, P  */
    int64_t   chunk;       /* params.chunk_size                                             */
    int32_t   div;         /* params.rotary_dim_divisor (2 or 4); A = N / div               */
    ssm_dtype dtype;       /* act: q, k, v, z, trap, dout (v's dtype = the compute dtype)    */
    ssm_dtype param_dtype; /* adt, dt, angles, q/k_bias, mimo_*, d, norm weight, states,
                              da_cs, da_cs_rev, segsum, dfinal_* (F32 = realistic)           */
    ssm_dtype out_dtype;   /* every output (out, finals, gradients, bwd_fwd outputs)          */
    int32_t   reduce_o;    /* mimo_o given: reduced out / dout (B,S,H,P), else (B,S,R,H,P)   */
    int32_t   has_z;       /* z and mimo_z                                                  */
    int32_t   has_d;
    int32_t   fused;       /* params.fuse_pregate_norm = 1 (needs reduce_o and has_z)        */
    int32_t   has_norm_weight; /* outproj_norm_weight (H, P) (with fused)                   */
    int32_t   has_states;  /* the four initial states (angle, ssm, k, v)                     */
    int32_t   has_final;   /* the four final-state outputs                                   */
    int32_t   nseq;        /* > 0: varlen with these lengths (batch becomes 1, S the sum;
                              zeros allowed = empty sequences)                              */
    const int64_t * seqlens;
    int32_t   strided;     /* q, k, v, z, out, adt, dt, trap, angles, dout (and the bwd_fwd
                              per-token tensors) in padded / permuted layouts                */
    int32_t   index_i64;   /* cu_seqlens / state_batch_indices as I64 instead of I32         */
    int32_t   consistent;  /* bwd_fwd only: da_cs, da_cs_rev, segsum built (float64, then
                              rounded to param_dtype) from a random adt (kept in the problem)
                              instead of independent N(0,1)/8 values                         */
} ssmt_mimo_config;

/* Small defaults: B 2, S 20, H 4, G 2, R 2, N 16, P 8, C 8, div 4, F32 everywhere, reduce_o,
 * z and d on, no fused norm, no states, no finals. */
void ssmt_mimo_config_init(ssmt_mimo_config * cfg);
/* ssm_mamba3_mimo_params from the config (chunk, div, fused; eps 1e-5). */
void ssmt_mimo_params(const ssmt_mimo_config * cfg, ssm_mamba3_mimo_params * p);

typedef struct ssmt_mimo_problem {
    ssmt_host q, k, v, z, adt, dt, trap, q_bias, k_bias, mimo_v, mimo_z, mimo_o, angles, d, norm_weight;
    ssmt_host angle_state, ssm_state, k_state, v_state, cu_seqlens;
    ssmt_host out, final_angle_state, final_ssm_state, final_k_state, final_v_state;
    ssm_mamba3_mimo_args   args;   /* views of the tensors above; absent ones are zeroed       */
    ssm_mamba3_mimo_params params; /* from the config                                         */
    int64_t                nseq;   /* NS (B without varlen)                                   */
} ssmt_mimo_problem;

/* Forward inputs with upstream's test distributions (spec §5.5): q, k, v, z ~ N(0,1);
 * q_bias, k_bias ~ N(0,1); mimo_v, mimo_o ~ N(0,1)/R; mimo_z ~ N(0,1); raw angles ~ U(0,1);
 * dt = softplus(−3 + N(0,1)); adt = −dt·U(0,1); trap ~ U(0,1) (pre-sigmoid); d ~ N(0,1);
 * norm weight ~ 1 + 0.1·N(0,1); initial states: angle U(0, 2π), ssm/k/v ~ N(0,1).
 * Values rounded to their dtypes; outputs poisoned with NaN. Returns 0, or −1 on
 * allocation failure (the problem is freed). */
int  ssmt_mimo_random_args(ssmt_rng * rng, const ssmt_mimo_config * cfg, ssmt_mimo_problem * prob);
void ssmt_mimo_problem_free(ssmt_mimo_problem * prob);

typedef struct ssmt_mimo_bwd_problem {
    ssmt_host dout, dfinal_angle_state, dfinal_ssm_state, dfinal_k_state, dfinal_v_state;
    ssmt_host dq, dk, dv, dz, dq_bias, dk_bias, dmimo_v, dmimo_z, dmimo_o, dd, dadt, ddt, dtrap, dangles;
    ssmt_host doutproj_norm_weight, dangle_state, dssm_state, dk_state, dv_state;
    ssm_mamba3_mimo_bwd_args args; /* forward inputs from the problem + the tensors above   */
} ssmt_mimo_bwd_problem;

/* Backward tensors for a forward problem: dout ~ N(0,1) (cfg->dtype, the out layout); with
 * has_dfinal the four dfinal_* ~ N(0,1) (param_dtype; needs has_states or has_final shapes:
 * (NS, …)); every gradient output allowed by the presence rules (dz/dmimo_z with z,
 * dmimo_o with mimo_o, dd with d, doutproj_norm_weight with fused, state gradients with
 * initial states) in out_dtype, poisoned. Returns 0 or −1 (freed). */
int  ssmt_mimo_bwd_alloc(ssmt_rng * rng, const ssmt_mimo_config * cfg, const ssmt_mimo_problem * prob,
                         int has_dfinal, ssmt_mimo_bwd_problem * bwd);
void ssmt_mimo_bwd_free(ssmt_mimo_bwd_problem * bwd);

typedef struct ssmt_mimo_bwd_fwd_problem {
    ssmt_host dout, q, k, v, q_bias, k_bias, mimo_v, mimo_o, z, mimo_z, angles, da_cs, da_cs_rev, dt, trap, d;
    ssmt_host segsum;
    ssmt_host adt; /* with cfg->consistent: the adt (B,H,S) the decays were built from    */
    ssmt_host dmimo_o, states, dz, dmimo_z, qk_dot;
    ssm_mamba3_mimo_bwd_fwd_args args;
    ssm_mamba3_mimo_params       params;
    int64_t                      nchunks;
} ssmt_mimo_bwd_fwd_problem;

/* The seed's bwd_fwd problem (spec §5.5; cfg->nseq, has_states, fused are ignored): q, k,
 * v, dout, z, trap ~ N(0,1) (act); q_bias, k_bias, d ~ N(0,1)/8; mimo_v, mimo_o, mimo_z ~
 * N(0,1)/4; cumulative angles ~ U(0,1); dt ~ U(0,0.1) + 0.05; da_cs, da_cs_rev, segsum ~
 * N(0,1)/8 independently (or consistent with adt = −dt·U(0,1) when cfg->consistent: tails
 * computed with a = 0 past S). Every output allowed (dmimo_o with mimo_o, dz/dmimo_z with
 * z, states, qk_dot) in out_dtype, poisoned. Returns 0 or −1 (freed). */
int  ssmt_mimo_random_bwd_fwd(ssmt_rng * rng, const ssmt_mimo_config * cfg, ssmt_mimo_bwd_fwd_problem * prob);
void ssmt_mimo_bwd_fwd_free(ssmt_mimo_bwd_fwd_problem * prob);

typedef struct ssmt_mimo_step_problem {
    ssmt_host q, k, v, z, adt, dt, trap, angles, q_bias, k_bias, mimo_v, mimo_z, mimo_o, d, norm_weight;
    ssmt_host angle_state, ssm_state, k_state, v_state, state_batch_indices;
    ssmt_host out, final_angle_state, final_ssm_state, final_k_state, final_v_state;
    ssm_mamba3_mimo_step_args args;   /* separate final_* buffers (not in place)           */
    ssm_mamba3_mimo_params    params;
    int64_t                   slots;
} ssmt_mimo_step_problem;

/* One decode token per row (cfg->seqlen, nseq, strided are ignored) with the forward's
 * distributions; a pool of `slots` states (angle U(0, 2π), others N(0,1), param_dtype).
 * with_indices: state_batch_indices (I32, I64 if index_i64) = a random injective map of
 * rows to slots with every third row (b % 3 == 2) padding (−1); needs slots ≥ batch.
 * Without it slots must equal batch. Outputs poisoned. Returns 0 or −1 (freed). */
int  ssmt_mimo_random_step(ssmt_rng * rng, const ssmt_mimo_config * cfg, int64_t slots, int with_indices,
                           ssmt_mimo_step_problem * prob);
void ssmt_mimo_step_free(ssmt_mimo_step_problem * prob);

#ifdef __cplusplus
}
#endif

#endif /* SSMOPS_TESTUTIL_H */
