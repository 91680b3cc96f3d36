/*
 * fuzz_ops: one libFuzzer harness for every operator, built from the public schema
 * (ssm_op_count/ssm_op_get). docs/RELIABILITY.md ("Fuzzing") describes the input layout.
 *
 * The bytes choose the operator, the context (NULL, reference, CPU with 1 or 2 threads, CPU
 * scalar ISA), the sizes of the schema's shape letters (B, S, H, ...: small, or huge as 2^40,
 * 2^61-1, INT64_MAX with stride 0), the params fields, and per argument: presence, dtype
 * (valid and invalid), ndim (the schema's or any other, invalid included), one dimension
 * overridden, the strides (contiguous, 0, negative, permuted, padded), aliasing of an output
 * with an input buffer, and the values (index tensors get arbitrary values too).
 *
 * Every present tensor gets a buffer of exactly the bytes its view spans, so AddressSanitizer
 * reports any read or write outside the view. Calls whose views span more than MAX_SPAN bytes
 * are skipped (a smaller buffer would be a caller bug, not a library bug), and so are calls
 * with a broadcast view of more than MAX_WORK elements or a product of letters above 2^26
 * (real work, see huge_work). After the call:
 *   - a failed call leaves every buffer byte-identical and leaves a message on the context;
 *   - a successful call leaves the buffers of inputs that no output shares byte-identical.
 * A violation aborts, so the fuzzer reports it with the input.
 */
#include "ssmops.h"

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);
int LLVMFuzzerInitialize(int * argc, char *** argv);

#define MAX_SPAN    (1u << 20) /* bytes per tensor */
#define MAX_ARGS    64
#define NLETTERS    16
#define HEADER      (3 + NLETTERS + 8)
#define PER_ARG     8
#define NCONTEXTS   5

/* Huge scratch requests fail as malloc would (NULL), so the library's OUT_OF_MEMORY path runs
 * instead of ASan stopping the process. */
const char * __asan_default_options(void);
const char * __asan_default_options(void) { return "allocator_may_return_null=1"; }

/* ---- calling every operator through one signature ------------------------------------ */
typedef ssm_status (*op_fn)(ssm_context * ctx, const void * params, const void * args, void * ws, size_t wss);
typedef void (*params_init_fn)(void * params);

#define OP(name, ptype)                                                                         \
    static ssm_status call_##name(ssm_context * ctx, const void * p, const void * a, void * ws, \
                                  size_t wss) {                                                 \
        (void)ws;                                                                               \
        (void)wss;                                                                              \
        return ssm_##name(ctx, (const ptype *)p, (const ssm_##name##_args *)a);                 \
    }
#define OPS(X)                                     \
    X(mamba2_chunk_cumsum, ssm_mamba2_params)       \
    X(mamba2_chunk_state, ssm_mamba2_params)        \
    X(mamba2_state_passing, ssm_mamba2_params)      \
    X(mamba2_bmm, ssm_mamba2_params)                \
    X(mamba2_chunk_scan, ssm_mamba2_params)         \
    X(mamba2_scan_bwd, ssm_mamba2_params)           \
    X(mamba2_step, ssm_mamba2_params)               \
    X(causal_conv1d, ssm_conv1d_params)             \
    X(causal_conv1d_bwd, ssm_conv1d_params)         \
    X(causal_conv1d_update, ssm_conv1d_params)      \
    X(rmsnorm_gated, ssm_rmsnorm_params)            \
    X(rmsnorm_gated_bwd, ssm_rmsnorm_params)        \
    X(mamba3_angle_cumsum, ssm_mamba3_params)       \
    X(mamba3_angle_cumsum_bwd, ssm_mamba3_params)   \
    X(mamba3_siso_fwd, ssm_mamba3_params)           \
    X(mamba3_siso, ssm_mamba3_params)               \
    X(mamba3_siso_bwd, ssm_mamba3_params)           \
    X(mamba3_siso_step, ssm_mamba3_params)          \
    X(mamba3_mimo_bwd_fwd, ssm_mamba3_mimo_params)  \
    X(mamba3_mimo, ssm_mamba3_mimo_params)          \
    X(mamba3_mimo_bwd, ssm_mamba3_mimo_params)      \
    X(mamba3_mimo_step, ssm_mamba3_mimo_params)
OPS(OP)

static ssm_status call_mamba2_scan(ssm_context * ctx, const void * p, const void * a, void * ws, size_t wss) {
    return ssm_mamba2_scan(ctx, (const ssm_mamba2_params *)p, (const ssm_mamba2_scan_args *)a, ws, wss);
}

typedef struct op_entry {
    const char * name;
    op_fn        fn;
    size_t       args_size;
} op_entry;
#define ENTRY(name, ptype) {#name, call_##name, sizeof(ssm_##name##_args)},
static const op_entry k_ops[] = {OPS(ENTRY){"mamba2_scan", call_mamba2_scan, sizeof(ssm_mamba2_scan_args)}};

#define PARAMS(X)                                                    \
    X(ssm_mamba2_params) X(ssm_conv1d_params) X(ssm_rmsnorm_params) \
    X(ssm_mamba3_params) X(ssm_mamba3_mimo_params)
#define PINIT(t) \
    static void init_##t(void * p) { t##_init((t *)p); }
PARAMS(PINIT)

typedef struct params_entry {
    const char *   name;
    params_init_fn init;
    size_t         size;
} params_entry;
#define PENTRY(t) {#t, init_##t, sizeof(t)},
static const params_entry k_params[] = {PARAMS(PENTRY)};

/* Schema index -> wrapper and params, checked against the schema once: a new operator without
 * a wrapper here stops the harness at its first input. */
static op_fn                 g_fn[MAX_ARGS];
static const params_entry *  g_pe[MAX_ARGS];
static ssm_context *         g_ctx[NCONTEXTS];

static void setup(void) {
    static int done = 0;
    if (done) return;
    done = 1;
    const int32_t n = ssm_op_count();
    if (n <= 0 || n > MAX_ARGS) abort();
    for (int32_t i = 0; i < n; ++i) {
        const ssm_op_info * info = ssm_op_get(i);
        g_fn[i] = NULL;
        for (size_t j = 0; j < sizeof k_ops / sizeof k_ops[0]; ++j)
            if (strcmp(k_ops[j].name, info->name) == 0 && k_ops[j].args_size == info->args_size) g_fn[i] = k_ops[j].fn;
        for (size_t j = 0; j < sizeof k_params / sizeof k_params[0]; ++j)
            if (strcmp(k_params[j].name, info->params) == 0 && k_params[j].size == info->params_size)
                g_pe[i] = &k_params[j];
        if (g_fn[i] == NULL || g_pe[i] == NULL || info->nargs > MAX_ARGS) abort();
    }
    /* Contexts: [0] NULL, [1] reference, [2] CPU 1 thread, [3] CPU 2 threads, [4] CPU scalar. */
    const int32_t backend[NCONTEXTS] = {0, SSM_BACKEND_REF, SSM_BACKEND_CPU, SSM_BACKEND_CPU, SSM_BACKEND_CPU};
    const int32_t threads[NCONTEXTS] = {0, 1, 1, 2, 1};
    const int32_t isa[NCONTEXTS] = {0, SSM_ISA_AUTO, SSM_ISA_AUTO, SSM_ISA_AUTO, SSM_ISA_SCALAR};
    for (int i = 1; i < NCONTEXTS; ++i) {
        ssm_context_params cp;
        ssm_context_params_init(&cp);
        cp.backend = backend[i];
        cp.num_threads = threads[i];
        cp.isa = isa[i];
        if (ssm_context_create(&cp, &g_ctx[i]) != SSM_STATUS_OK) abort();
    }
}

/* ---- reading the input ---------------------------------------------------------------- */
typedef struct reader {
    const uint8_t * p;
    size_t          n;
} reader;

static uint8_t byte_at(const reader * r, size_t i) { return i < r->n ? r->p[i] : 0; }

/* A size from one byte: mostly 0..9, sometimes a boundary or a huge value. */
static int64_t size_from(uint8_t b) {
    static const int64_t special[16] = {(int64_t)1 << 40, INT64_MAX, (int64_t)1 << 31, ((int64_t)1 << 32) + 1,
                                        ((int64_t)1 << 61) - 1, 16, 64, 128, 129, 1024, 1025, -1,
                                        (int64_t)1 << 62, INT64_MIN, 33, 256};
    return b < 0xF0 ? (int64_t)(b % 10) : special[b & 15];
}

static double double_from(uint8_t b, double dflt) {
    static const double special[8] = {0.0, -1.0, 1e-30, 1e30, NAN, INFINITY, -INFINITY, 0.5};
    return b < 0xC0 ? dflt : special[b & 7];
}

/* ---- shape letters ---------------------------------------------------------------------- */
typedef struct letters {
    char    name[NLETTERS][8];
    int64_t value[NLETTERS];
    int     n;
    const reader * r;
} letters;

static int64_t letter(letters * L, const char * s, size_t len) {
    if (len == 0 || len >= 8) return 1;
    for (int i = 0; i < L->n; ++i)
        if (strlen(L->name[i]) == len && memcmp(L->name[i], s, len) == 0) return L->value[i];
    if (L->n == NLETTERS) return 1;
    memcpy(L->name[L->n], s, len);
    L->name[L->n][len] = '\0';
    L->value[L->n] = size_from(byte_at(L->r, 3 + (size_t)L->n));
    return L->value[L->n++];
}

static int is_ident(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* One dimension of the schema's shape text: "S", "NS + 1", "W−1", "H·P". Wrapping arithmetic:
 * huge letters give huge (or wrapped) sizes, which is what the library must reject. */
static int64_t eval_dim(letters * L, const char * s, const char * end) {
    while (s < end && *s == ' ') ++s;
    const char * b = s;
    while (s < end && is_ident(*s)) ++s;
    uint64_t v = (uint64_t)letter(L, b, (size_t)(s - b));
    while (s < end && *s == ' ') ++s;
    if (s < end && *s == '+') v += 1;
    else if (end - s >= 3 && memcmp(s, "\xe2\x88\x92", 3) == 0) v -= 1; /* U+2212 minus */
    else if (s < end && *s == '-') v -= 1;
    else if (end - s >= 2 && memcmp(s, "\xc2\xb7", 2) == 0) { /* U+00B7 product */
        s += 2;
        const char * c = s;
        while (s < end && is_ident(*s)) ++s;
        v *= (uint64_t)letter(L, c, (size_t)(s - c));
    }
    return (int64_t)v;
}

/* Parses alternative `alt` (0 or 1) of a shape text "(B, S, H, P) with `x`; else (B, S, R, H, P)"
 * into shape[]; returns ndim (the first alternative when there is no second). */
static int parse_shape(letters * L, const char * text, int alt, int64_t * shape) {
    const char * open = strchr(text, '(');
    if (alt) {
        const char * second = open ? strchr(open + 1, '(') : NULL;
        if (second) open = second;
    }
    if (!open) return 0;
    const char * close = strchr(open, ')');
    if (!close) return 0;
    int          nd = 0;
    const char * s = open + 1;
    while (s < close && nd < SSM_MAX_DIMS) {
        const char * e = s;
        while (e < close && *e != ',') ++e;
        shape[nd++] = eval_dim(L, s, e);
        s = e + 1;
    }
    return nd;
}

/* ---- tensors -------------------------------------------------------------------------------- */
typedef struct buf {
    unsigned char * mem;   /* the allocation, exactly `bytes` long */
    unsigned char * saved; /* its bytes before the call */
    size_t          bytes;
    int             shared_with_output;
} buf;

/* The element offsets a view reaches: [lo, hi]. Returns 0 when the span overflows or is
 * larger than MAX_SPAN bytes; *empty is set for a view with a zero dimension. */
static int view_span(const ssm_tensor * t, size_t item, int64_t * lo, int64_t * hi, int * empty) {
    int nd = t->ndim < 0 ? 0 : t->ndim > SSM_MAX_DIMS ? SSM_MAX_DIMS : t->ndim;
    *lo = *hi = 0;
    *empty = 0;
    for (int i = 0; i < nd; ++i)
        if (t->shape[i] <= 0) *empty = 1;
    if (*empty) return 1;
    for (int i = 0; i < nd; ++i) {
        int64_t ext;
        if (__builtin_mul_overflow(t->shape[i] - 1, t->strides[i], &ext)) return 0;
        if (ext < 0 ? __builtin_add_overflow(*lo, ext, lo) : __builtin_add_overflow(*hi, ext, hi)) return 0;
    }
    int64_t n;
    if (__builtin_sub_overflow(*hi, *lo, &n) || n >= (int64_t)(MAX_SPAN / item)) return 0;
    return 1;
}

/* A non-empty view of more than MAX_WORK elements whose count still fits in int64 (broadcast
 * over a huge dimension): a valid call of that size is real work for minutes, not a bug, so
 * the input makes no call. Counts beyond int64 stay: the library must reject them. */
#define MAX_WORK ((int64_t)1 << 24)
static int huge_work(const ssm_tensor * t) {
    int     nd = t->ndim < 0 ? 0 : t->ndim > SSM_MAX_DIMS ? SSM_MAX_DIMS : t->ndim;
    int64_t n = 1;
    for (int i = 0; i < nd; ++i)
        if (t->shape[i] <= 0) return 0;
    for (int i = 0; i < nd; ++i)
        if (__builtin_mul_overflow(n, t->shape[i], &n)) return 0;
    return n > MAX_WORK;
}

static const int32_t k_dtypes[16] = {SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16, SSM_DTYPE_F64, SSM_DTYPE_I32,
                                     SSM_DTYPE_I64, 4, 5, 9, 12, -1, 100, INT32_MIN, INT32_MAX, SSM_DTYPE_F32,
                                     SSM_DTYPE_F16};

static void fill(const ssm_tensor * t, unsigned char * base, size_t item, int64_t lo, int64_t hi, uint8_t mode,
                 int index) {
    const int64_t n = hi - lo + 1;
    for (int64_t i = 0; i < n; ++i) {
        double v;
        switch (mode & 3) {
        case 0: v = index ? (double)i : (double)((i * 37) % 17 - 8) / 8.0; break;
        case 1: v = 0.0; break;
        case 2: v = index ? (double)((i * 7 + mode) % 13) - 2.0 : (i % 5 == 3 ? NAN : (double)(i % 3)); break;
        default: v = index ? (i % 2 ? (double)INT32_MAX : -1e18) : (i % 2 ? INFINITY : -1e30); break;
        }
        unsigned char * e = base + (size_t)i * item;
        switch (t->dtype) {
        case SSM_DTYPE_F32: { float f = (float)v; memcpy(e, &f, 4); break; }
        case SSM_DTYPE_F64: memcpy(e, &v, 8); break;
        case SSM_DTYPE_F16: { uint16_t h = ssm_f32_to_f16((float)v); memcpy(e, &h, 2); break; }
        case SSM_DTYPE_BF16: { uint16_t h = ssm_f32_to_bf16((float)v); memcpy(e, &h, 2); break; }
        case SSM_DTYPE_I32: { int32_t k = isfinite(v) && fabs(v) < 2e9 ? (int32_t)v : -7; memcpy(e, &k, 4); break; }
        case SSM_DTYPE_I64: { int64_t k = isfinite(v) && fabs(v) < 9e18 ? (int64_t)v : INT64_MIN; memcpy(e, &k, 8); break; }
        default: memset(e, (int)(i & 0xFF), item); break;
        }
    }
}

static void contiguous(ssm_tensor * t) {
    uint64_t s = 1;
    int      nd = t->ndim < 0 ? 0 : t->ndim > SSM_MAX_DIMS ? SSM_MAX_DIMS : t->ndim;
    for (int i = nd - 1; i >= 0; --i) {
        /* Huge dimensions are broadcast (stride 0): the shape stays huge, the buffer small. */
        if (t->shape[i] > (1 << 20) || t->shape[i] < 0) {
            t->strides[i] = 0;
            continue;
        }
        t->strides[i] = (int64_t)s;
        s *= (uint64_t)(t->shape[i] > 0 ? t->shape[i] : 1);
    }
}

static void set_strides(ssm_tensor * t, uint8_t mode, uint8_t dim) {
    contiguous(t);
    int nd = t->ndim < 0 ? 0 : t->ndim > SSM_MAX_DIMS ? SSM_MAX_DIMS : t->ndim;
    if (nd == 0 || mode < 0xA0) return;
    int k = dim % nd, j = (dim / 8) % nd;
    switch (mode & 7) {
    case 0: t->strides[k] = 0; break;                       /* broadcast */
    case 1: t->strides[k] = -t->strides[k]; break;          /* negative */
    case 2: { int64_t s = t->strides[k]; t->strides[k] = t->strides[j]; t->strides[j] = s; break; } /* permuted */
    case 3: for (int i = 0; i < nd; ++i) t->strides[i] *= 2; break; /* padded */
    case 4: for (int i = 0; i < nd; ++i) t->strides[i] = 0; break;  /* all broadcast */
    case 5: for (int i = 0; i < nd; ++i) t->strides[i] = -t->strides[i]; break;
    /* A stride far beyond any buffer: a non-empty view is skipped (its span is too large), an
     * empty one is valid (and its offsets must not overflow in any backend). */
    case 6: t->strides[k] = (int64_t)1 << 62; break;
    default: t->strides[k] = t->strides[k] > 1 ? t->strides[k] - 1 : 1; break; /* overlapping */
    }
}

/* ---- params ------------------------------------------------------------------------------- */
static void set_params(const params_entry * pe, void * p, const reader * r, const letters * L,
                       int64_t chunk_letter) {
    (void)L;
    const size_t o = 3 + NLETTERS;
    pe->init(p);
    const uint8_t b0 = byte_at(r, o), b1 = byte_at(r, o + 1), b2 = byte_at(r, o + 2), b3 = byte_at(r, o + 3);
    const int64_t chunk = b0 < 0x80 ? chunk_letter : b0 < 0xF0 ? (int64_t)(b0 % 17) : size_from(b0);
    if (strcmp(pe->name, "ssm_mamba2_params") == 0) {
        ssm_mamba2_params * q = p;
        q->chunk_size = chunk;
        if (b1 >= 0x80) q->dt_softplus = b1 < 0xF0 ? (b1 & 1) : (int32_t)(int8_t)b1;
        q->dt_limit_lo = double_from(b2, q->dt_limit_lo);
        q->dt_limit_hi = double_from(b3, q->dt_limit_hi);
    } else if (strcmp(pe->name, "ssm_conv1d_params") == 0) {
        ssm_conv1d_params * q = p;
        if (b1 >= 0x80) q->activation = b1 < 0xF0 ? (b1 & 1) : (int32_t)(int8_t)b1;
    } else if (strcmp(pe->name, "ssm_rmsnorm_params") == 0) {
        ssm_rmsnorm_params * q = p;
        q->eps = double_from(b2, q->eps);
        if (b0 >= 0x80) q->group_size = b0 < 0xF0 ? (int64_t)(b0 % 10) : size_from(b0);
        if (b1 >= 0x80) q->norm_before_gate = b1 < 0xF0 ? (b1 & 1) : (int32_t)(int8_t)b1;
    } else if (strcmp(pe->name, "ssm_mamba3_params") == 0) {
        ssm_mamba3_params * q = p;
        q->chunk_size = chunk;
    } else if (strcmp(pe->name, "ssm_mamba3_mimo_params") == 0) {
        ssm_mamba3_mimo_params * q = p;
        q->chunk_size = chunk;
        if (b1 >= 0x80) q->fuse_pregate_norm = b1 < 0xF0 ? (b1 & 1) : (int32_t)(int8_t)b1;
        q->norm_eps = double_from(b2, q->norm_eps);
        if (b3 >= 0x80) q->rotary_dim_divisor = b3 < 0xF0 ? ((b3 & 1) ? 2 : 4) : (int32_t)(int8_t)b3;
    }
    /* The size field: right, too small, or larger than the struct (never read beyond it). */
    const uint8_t b4 = byte_at(r, o + 4);
    if (b4 >= 0xF8) *(size_t *)p = b4 == 0xF8 ? 0 : b4 == 0xF9 ? pe->size - 1 : pe->size + 64;
}

/* Reports a broken promise of include/ssmops.h and aborts, so libFuzzer saves the input. */
static void violation(const ssm_op_info * info, int32_t arg, ssm_status st, const char * what) {
    fprintf(stderr, "fuzz_ops: %s (%s) returned %s: %s\n", info->name, arg >= 0 ? info->args[arg].name : "-",
            ssm_status_string(st), what);
    abort();
}

/* ---- the harness ---------------------------------------------------------------------------- */
/* Runs one input; returns the call's status, or -1 when the input made no call. */
static int run_one(const uint8_t * data, size_t size) {
    setup();
    reader r = {data, size};
    int    result = -1;
    if (size < HEADER) return -1;
    const int32_t       opi = data[0] % ssm_op_count();
    const ssm_op_info * info = ssm_op_get(opi);
    ssm_context *       ctx = g_ctx[data[1] % NCONTEXTS];
    const int           alt = data[2] & 1;

    letters L;
    memset(&L, 0, sizeof L);
    L.r = &r;

    /* The args struct, one ssm_tensor per schema entry at its offset. */
    unsigned char args[MAX_ARGS * sizeof(ssm_tensor)] __attribute__((aligned(64)));
    if (info->args_size > sizeof args) abort();
    memset(args, 0, sizeof args);
    buf     bufs[MAX_ARGS];
    int64_t los[MAX_ARGS];
    memset(bufs, 0, sizeof bufs);
    int skip = 0;

    /* Shapes first, so every letter has its value before "derive" ties chunk counts to it. */
    ssm_tensor t[MAX_ARGS];
    for (int32_t a = 0; a < info->nargs; ++a) {
        memset(&t[a], 0, sizeof t[a]);
        t[a].ndim = parse_shape(&L, info->args[a].shape, alt, t[a].shape);
    }
    /* The problem's size: the product of its letters. Between 2^26 and an int64 overflow it is
     * valid work of seconds to minutes under the sanitizers (a 256^3 state), not a hang: no
     * call. A zero letter (an empty problem) or an overflowing product is called. */
    int64_t work = 1;
    int     overflow = 0, zero = 0;
    for (int i = 0; i < L.n; ++i) {
        if (L.value[i] == 0) zero = 1;
        if (L.value[i] > 1 && __builtin_mul_overflow(work, L.value[i], &work)) overflow = 1;
    }
    if (!zero && !overflow && work > ((int64_t)1 << 26)) return -1;
    int64_t chunk = 1;
    for (int i = 0; i < L.n; ++i)
        if (strcmp(L.name[i], "Q") == 0 || strcmp(L.name[i], "C") == 0) chunk = L.value[i];
    unsigned char params[256] __attribute__((aligned(64)));
    if (g_pe[opi]->size + 64 > sizeof params) abort();
    memset(params, 0, sizeof params);
    set_params(g_pe[opi], params, &r, &L, chunk);

    for (int32_t a = 0; a < info->nargs; ++a) {
        const ssm_arg_info * ai = &info->args[a];
        const size_t         o = HEADER + (size_t)a * PER_ARG;
        const uint8_t b0 = byte_at(&r, o), b1 = byte_at(&r, o + 1), b2 = byte_at(&r, o + 2), b3 = byte_at(&r, o + 3),
                      b4 = byte_at(&r, o + 4), b5 = byte_at(&r, o + 5), b6 = byte_at(&r, o + 6), b7 = byte_at(&r, o + 7);
        const int optional = (ai->role & SSM_ARG_ROLE_OPTIONAL) != 0;
        const int present = optional ? (b0 & 1) : b0 != 0xFF;
        ssm_tensor * v = &t[a];
        const int index = ai->dtype_class == SSM_DTYPE_CLASS_INDEX;
        v->dtype = b1 < 0xE0 ? (index ? (b1 & 1 ? SSM_DTYPE_I64 : SSM_DTYPE_I32) : (int32_t)(b1 & 3))
                             : k_dtypes[b1 & 15];
        if (b2 >= 0xE0) v->ndim = b2 < 0xF8 ? (b2 & 7) : b2 == 0xF8 ? -1 : b2 == 0xF9 ? INT32_MAX : 7;
        if (b3 >= 0xE0) v->shape[(b3 & 7) % SSM_MAX_DIMS] = size_from(b4);
        set_strides(v, b5, b6);
        if (!present) {
            memcpy(args + ai->offset, v, sizeof *v);
            continue;
        }
        /* An output sharing an input's buffer and view (the in-place rule, or overlap). */
        if ((ai->role & SSM_ARG_ROLE_OUTPUT) && (b0 & 0x80) && a > 0) {
            int32_t src = (b7 >> 2) % a;
            if (ai->in_place)
                for (int32_t k = 0; k < a; ++k)
                    if (strcmp(info->args[k].name, ai->in_place) == 0) src = k;
            const ssm_tensor * s = (const ssm_tensor *)(args + info->args[src].offset);
            int shared = 0;
            if (s->data != NULL && (b0 & 0x40)) { /* the very same view */
                *v = *s;
                shared = 1;
            } else if (s->data != NULL && bufs[src].mem != NULL) {
                /* Its own view over the input's buffer, where that view fits in the buffer. */
                size_t  item = ssm_dtype_size((ssm_dtype)v->dtype);
                int64_t lo, hi;
                int     empty;
                if (item == 0) item = 8;
                if (view_span(v, item, &lo, &hi, &empty) && !huge_work(v) &&
                    (empty || (size_t)(hi - lo + 1) * item <= bufs[src].bytes)) {
                    v->data = empty ? bufs[src].mem : bufs[src].mem + (size_t)(-lo) * item;
                    shared = 1;
                }
            }
            if (shared) {
                bufs[src].shared_with_output = 1;
                memcpy(args + ai->offset, v, sizeof *v);
                continue;
            }
        }
        if (huge_work(v)) {
            skip = 1;
            break;
        }
        size_t  item = ssm_dtype_size((ssm_dtype)v->dtype);
        if (item == 0) item = 8; /* unknown dtype: must be rejected before any access */
        int64_t lo, hi;
        int     empty;
        if (!view_span(v, item, &lo, &hi, &empty)) {
            skip = 1;
            break;
        }
        const size_t bytes = empty ? 0 : (size_t)(hi - lo + 1) * item;
        bufs[a].bytes = bytes;
        /* Under ASan malloc(0) is a unique pointer to zero accessible bytes: an empty view
         * points there, so any access is reported. */
        bufs[a].mem = malloc(bytes);
        bufs[a].saved = malloc(bytes);
        if (!bufs[a].mem || !bufs[a].saved) abort();
        if (bytes == 0) {
            v->data = bufs[a].mem;
        } else {
            fill(v, bufs[a].mem, item, lo, hi, b7, index);
            v->data = bufs[a].mem + (size_t)(-lo) * item;
        }
        los[a] = lo;
        if (b6 == 0xFF && b7 == 0xFF) v->data = NULL; /* a required tensor given as NULL */
        memcpy(args + ai->offset, v, sizeof *v);
    }

    if (!skip) {
        for (int32_t a = 0; a < info->nargs; ++a)
            if (bufs[a].mem) memcpy(bufs[a].saved, bufs[a].mem, bufs[a].bytes);
        /* mamba2_scan's workspace: none, the exact size, one byte short, or misaligned. */
        void * ws = NULL;
        void * ws_mem = NULL;
        size_t wss = 0;
        const uint8_t wb = byte_at(&r, 3 + NLETTERS + 5);
        if (info->workspace && (wb & 3) != 0) {
            size_t need = 0;
            if (ssm_mamba2_scan_workspace_size(ctx, (const ssm_mamba2_params *)params,
                                               (const ssm_mamba2_scan_args *)args, &need) == SSM_STATUS_OK &&
                need <= ((size_t)64 << 20)) {
                wss = (wb & 3) == 2 && need > 0 ? need - 1 : need;
                if (posix_memalign(&ws_mem, 64, wss + 64) != 0) abort();
                ws = (wb & 3) == 3 ? (unsigned char *)ws_mem + 1 : ws_mem;
            }
        }
        const void * pp = byte_at(&r, 3 + NLETTERS + 6) == 0xFF ? NULL : params;
        const void * ap = byte_at(&r, 3 + NLETTERS + 7) == 0xFF ? NULL : args;
        const ssm_status st = g_fn[opi](ctx, pp, ap, ws, wss);
        result = (int)st;
        for (int32_t a = 0; a < info->nargs; ++a) {
            if (!bufs[a].mem) continue;
            const int is_out = (info->args[a].role & SSM_ARG_ROLE_OUTPUT) != 0;
            const int must_keep = st != SSM_STATUS_OK || (!is_out && !bufs[a].shared_with_output);
            if (must_keep && memcmp(bufs[a].saved, bufs[a].mem, bufs[a].bytes) != 0)
                violation(info, a, st, st != SSM_STATUS_OK ? "a failed call wrote this argument's buffer"
                                                           : "a successful call wrote this input's buffer");
        }
        if (st != SSM_STATUS_OK && ssm_context_last_error(ctx)[0] == '\0')
            violation(info, -1, st, "a failed call left no message");
        free(ws_mem);
    }
    (void)los;
    for (int32_t a = 0; a < info->nargs; ++a) {
        free(bufs[a].mem);
        free(bufs[a].saved);
    }
    return result;
}

/* SSMOPS_FUZZ_SHOW=1 prints each input's operator, context and outcome (to read a reproducer). */
int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const int st = run_one(data, size);
    if (getenv("SSMOPS_FUZZ_SHOW") && size >= HEADER) {
        ssm_context * ctx = g_ctx[data[1] % NCONTEXTS];
        fprintf(stderr, "fuzz_ops: %s on context %d: %s %s\n", ssm_op_get(data[0] % ssm_op_count())->name,
                data[1] % NCONTEXTS, st < 0 ? "no call (a view spans more than MAX_SPAN, or the work is too large)" : ssm_status_string((ssm_status)st),
                st > 0 ? ssm_context_last_error(ctx) : "");
    }
    return 0;
}

/* SSMOPS_FUZZ_SEEDGEN=<dir>: write seeds (valid calls of every operator on the CPU context,
 * small random letter sizes, f32, contiguous, optional tensors present or absent) into dir
 * and exit; this is how tests/fuzz/corpus/ops was made. */
int LLVMFuzzerInitialize(int * argc, char *** argv) {
    (void)argc;
    (void)argv;
    const char * dir = getenv("SSMOPS_FUZZ_SEEDGEN");
    if (!dir) return 0;
    setup();
    uint32_t rng = 12345;
    for (int32_t op = 0; op < ssm_op_count(); ++op) {
        const ssm_op_info * info = ssm_op_get(op);
        int found = 0;
        for (int attempt = 0; attempt < 200000 && found < 2; ++attempt) {
            uint8_t in[HEADER + MAX_ARGS * PER_ARG];
            memset(in, 0, sizeof in);
            in[0] = (uint8_t)op;
            in[1] = (uint8_t)(1 + found); /* reference, then CPU */
            for (size_t i = 2; i < sizeof in; ++i) {
                rng ^= rng << 13; /* xorshift32 */
                rng ^= rng >> 17;
                rng ^= rng << 5;
                const uint32_t x = rng;
                if (i == 2) in[i] = (uint8_t)((attempt & 1) ? 0 : (x & 1)); /* odd attempts: optional args absent */
                else if (i < 3 + NLETTERS) in[i] = (uint8_t)("\1\2\2\4\3"[x % 5]);
                else if (i >= HEADER && (i - HEADER) % PER_ARG == 0) in[i] = (uint8_t)((attempt & 1) ? 0 : (x & 1)); /* odd attempts: optional args absent */
            }
            const size_t n = HEADER + (size_t)info->nargs * PER_ARG;
            if (run_one(in, n) != SSM_STATUS_OK) continue;
            char path[512];
            snprintf(path, sizeof path, "%s/%s-%d", dir, info->name, found);
            FILE * f = fopen(path, "wb");
            if (!f || fwrite(in, 1, n, f) != n || fclose(f) != 0) abort();
            ++found;
        }
        fprintf(stderr, "%s: %d seeds%s%s\n", info->name, found, found < 2 ? "; last refusal: " : "",
                found < 2 ? ssm_context_last_error(g_ctx[1 + found]) : "");
    }
    exit(0);
}
