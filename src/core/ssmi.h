/*
 * ssmi.h — internal core of ssmops, shared by ops/ and the backends (ref/, cpu/).
 * Depends on nothing but the public header and libc. Nothing here leaves the library:
 * internal symbols are ssmi_* with hidden visibility.
 */
#ifndef SSMI_H
#define SSMI_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "ssmops.h"
#include "ssmi_ops.h"

#if defined(__GNUC__)
#define SSMI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SSMI_PRINTF(f, a)
#endif

#define SSMI_ALIGN 64 /* alignment of every scratch allocation (one cache line) */
#define SSMI_ERROR_LEN 512

typedef struct ssmi_threadpool ssmi_threadpool;

struct ssm_context {
    int32_t           num_threads;
    ssm_backend       backend;
    ssm_isa           isa; /* resolved, never AUTO */
    int32_t           deterministic;
    int32_t           ref_mode;
    ssm_allocator     allocator;
    void *            cuda_stream;
    ssm_device_allocator device_allocator; /* both NULL: cudaMallocAsync/cudaFreeAsync */
    int32_t           cuda_portable; /* params.cuda_portable: no sm_90a-only entries */
    ssmi_threadpool * pool; /* NULL when num_threads == 1 */
    int16_t           variant[SSMI_OP_COUNT]; /* forced entry of each op's selection table, -1 = auto */
    const char *      last_variant;           /* name of the entry the last call ran, "" if none */
    char              last_error[SSMI_ERROR_LEN];
};

/* ---- kernel variants (variant.c) ------------------------------------------------------ */
/* One entry of a backend's selection table for an operator, as the registry reports it. */
typedef struct ssmi_variant_info {
    const char * name; /* by what it does: "chain", "wgmma", "portable", ... */
    const char * why;  /* one line: why the entry exists and when it applies */
} ssmi_variant_info;

/* Name of op ("mamba2_scan"), and the op of a name (-1 if none). */
const char * ssmi_op_name(ssmi_op op);
int32_t      ssmi_op_find(const char * name);
/* The entry of op's table that ctx forces, or -1 for the table's own choice (ctx NULL: -1). */
int32_t      ssmi_variant_forced(const ssm_context * ctx, ssmi_op op);
/* A new context's variant state: no entry forced, no call run. */
void         ssmi_variant_init(ssm_context * ctx);
/* Records the entry a call ran (a string with static storage), for ssm_context_last_variant. */
void         ssmi_variant_ran(ssm_context * ctx, const char * name);
/* The UNSUPPORTED failure of a forced entry that does not apply to the call's problem. */
ssm_status   ssmi_variant_not_applicable(ssm_context * ctx, ssmi_op op, const char * name, const char * rule);
/* The CUDA backend's selection table of op (src/cuda/select.cu): the number of entries (0 when
 * op has no CUDA path or the build has no CUDA backend) and entry i (name NULL out of range). */
int32_t           ssmi_cuda_variant_count(ssmi_op op);
ssmi_variant_info ssmi_cuda_variant(ssmi_op op, int32_t i);

/* ---- operator schema (schema.c) ------------------------------------------------------ */
/* The schema of op (NULL out of range), and its argument called name (NULL if none). */
const ssm_op_info *  ssmi_op_info(ssmi_op op);
const ssm_arg_info * ssmi_op_arg(ssmi_op op, const char * name);
/* The tensor of args that argument `arg` describes. */
static inline const ssm_tensor * ssmi_arg_tensor(const void * args, const ssm_arg_info * arg) {
    return (const ssm_tensor *)(const void *)((const char *)args + arg->offset);
}

/* ---- errors ------------------------------------------------------------------------ */
/* Formats the message into ctx->last_error (or the thread-local buffer for ctx == NULL)
 * and returns status. The message is one sentence: "op: argument value breaks rule". */
ssm_status ssmi_error(ssm_context * ctx, ssm_status status, const char * fmt, ...) SSMI_PRINTF(3, 4);
/* Clears the last error (called at the start of every public operator). */
void       ssmi_clear_error(ssm_context * ctx);

#define SSM_RETURN_IF(cond, ctx, status, ...)                      \
    do {                                                           \
        if (cond) return ssmi_error((ctx), (status), __VA_ARGS__); \
    } while (0)

#define SSM_FORWARD_IF_ERROR(expr)                 \
    do {                                           \
        const ssm_status ssmi_s_ = (expr);         \
        if (ssmi_s_ != SSM_STATUS_OK) return ssmi_s_; \
    } while (0)

/* ---- memory -------------------------------------------------------------------------- */
/* SSMI_ALIGN-aligned scratch through the context allocator (malloc when ctx is NULL).
 * Returns NULL on failure or bytes == 0... callers treat NULL with bytes > 0 as OOM. */
void * ssmi_alloc(ssm_context * ctx, size_t bytes);
void   ssmi_free(ssm_context * ctx, void * ptr);

/* ---- threads ------------------------------------------------------------------------- */
/* fn(arg, task, thread) is called exactly once for every task in [0, ntasks), on the
 * calling thread and the pool's workers; thread is in [0, ssmi_num_threads(ctx)) and no
 * two concurrent calls share it (use it to index per-thread scratch). Returns when all
 * tasks are done. Results must not depend on which thread runs which task. */
typedef void (*ssmi_task_fn)(void * arg, int64_t task, int32_t thread);
void    ssmi_parallel_for(ssm_context * ctx, int64_t ntasks, ssmi_task_fn fn, void * arg);
int32_t ssmi_num_threads(const ssm_context * ctx);

ssmi_threadpool * ssmi_threadpool_create(ssm_context * owner, int32_t num_threads);
void              ssmi_threadpool_free(ssmi_threadpool * pool);

/* ---- CPU features -------------------------------------------------------------------- */
uint32_t ssmi_cpu_features(void); /* cached, thread-safe */
ssm_isa  ssmi_best_isa(uint32_t features);
ssm_isa  ssmi_context_isa(const ssm_context * ctx); /* ctx NULL: env override or best */
/* 1 when the context runs AVX2 kernels: the AVX2 ISA, and the AVX-512 ISA for every kernel
 * that has no AVX-512 version (its hosts have the whole AVX2 set). */
static inline int ssmi_context_avx2(const ssm_context * ctx) { return ssmi_context_isa(ctx) >= SSM_ISA_AVX2; }

/* ---- CUDA portable mode --------------------------------------------------------------- */
/* 1 when the CUDA selection tables must pass over the entries that need sm_90a code (wgmma), so
 * that a Hopper device runs what a GPU without wgmma runs: ctx's params.cuda_portable (0 for
 * ctx NULL). */
int32_t ssmi_cuda_portable(const ssm_context * ctx);

/* ---- tensors ------------------------------------------------------------------------- */
static inline int ssmi_present(const ssm_tensor * t) { return t != NULL && t->data != NULL; }
static inline int ssmi_is_float(int32_t dtype) {
    return dtype == SSM_DTYPE_F32 || dtype == SSM_DTYPE_F16 || dtype == SSM_DTYPE_BF16 || dtype == SSM_DTYPE_F64;
}
static inline int ssmi_is_int(int32_t dtype) { return dtype == SSM_DTYPE_I32 || dtype == SSM_DTYPE_I64; }

#define SSMI_FLOAT_DTYPES ((1u << SSM_DTYPE_F32) | (1u << SSM_DTYPE_F16) | (1u << SSM_DTYPE_BF16) | (1u << SSM_DTYPE_F64))
#define SSMI_INDEX_DTYPES ((1u << SSM_DTYPE_I32) | (1u << SSM_DTYPE_I64))

/* Element offset of index idx[0..ndim). */
static inline int64_t ssmi_offset(const ssm_tensor * t, const int64_t * idx) {
    int64_t off = 0;
    for (int32_t i = 0; i < t->ndim; ++i) off += idx[i] * t->strides[i];
    return off;
}
/* Offsets for the common ranks, index by index. */
static inline int64_t ssmi_off1(const ssm_tensor * t, int64_t i0) { return i0 * t->strides[0]; }
static inline int64_t ssmi_off2(const ssm_tensor * t, int64_t i0, int64_t i1) {
    return i0 * t->strides[0] + i1 * t->strides[1];
}
static inline int64_t ssmi_off3(const ssm_tensor * t, int64_t i0, int64_t i1, int64_t i2) {
    return i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2];
}
static inline int64_t ssmi_off4(const ssm_tensor * t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2] + i3 * t->strides[3];
}
static inline int64_t ssmi_off5(const ssm_tensor * t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, int64_t i4) {
    return i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2] + i3 * t->strides[3] + i4 * t->strides[4];
}

/* Scalar conversions (bit exact, round to nearest even). */
float    ssmi_f16_to_f32(uint16_t h);
uint16_t ssmi_f32_to_f16(float f);
float    ssmi_bf16_to_f32(uint16_t h);
uint16_t ssmi_f32_to_bf16(float f);

/* Element `off` (in elements from t->data) of any float or int dtype, as double. */
double ssmi_get_f64(const ssm_tensor * t, int64_t off);
/* Element `off` of any dtype as float (f64 is rounded to f32). */
float  ssmi_get_f32(const ssm_tensor * t, int64_t off);
/* Integer element (i32/i64 only). */
int64_t ssmi_get_i64(const ssm_tensor * t, int64_t off);
/* Stores v rounded to t's dtype (f64 → f32 → f16/bf16 is double rounding; use
 * ssmi_set_f64 from the reference, which rounds f64 directly to f16/bf16). */
void   ssmi_set_f32(const ssm_tensor * t, int64_t off, float v);
void   ssmi_set_f64(const ssm_tensor * t, int64_t off, double v);

/* n elements starting at element `off`, `stride` apart, converted to fp32 / from fp32. */
void ssmi_load_f32(float * dst, const void * base, int32_t dtype, int64_t off, int64_t stride, int64_t n);
void ssmi_store_f32(void * base, int32_t dtype, int64_t off, int64_t stride, const float * src, int64_t n);

/* ---- argument checks (used by ops/, before any write) -------------------------------- */
/* The rules of one tensor that the other arguments do not matter for: present (unless
 * optional, then OK when absent), on the device `device` (ssm_device_type), ndim one of the
 * bits of `ranks` (bit n: ndim n), dtype in dtype_mask (bit per ssm_dtype), non-negative
 * sizes, and an element count, byte count and strided span that fit in int64 and size_t.
 * `op` and `name` go into the message. */
ssm_status ssmi_check_view(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t, int optional,
                           uint32_t ranks, uint32_t dtype_mask, int32_t device);
/* Each t->shape[i] equals want[i] (want[i] < 0 = any value); OK for an absent tensor.
 * Assumes ssmi_check_view passed (t->ndim entries of want are read). */
ssm_status ssmi_check_shape(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t,
                            const int64_t * want);
/* An output's layout: no stride may be 0 or let two indices alias (checked as: strides
 * sorted by size each exceed the extent of the smaller ones). OK for an absent tensor.
 * Assumes ssmi_check_view passed. */
ssm_status ssmi_check_output_layout(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t);
/* ssmi_check_view on the CPU with one rank, then ssmi_check_shape (want may be NULL). */
ssm_status ssmi_check_tensor(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t,
                             int optional, int32_t ndim, const int64_t * want, uint32_t dtype_mask);
/* ssmi_check_tensor, then ssmi_check_output_layout. */
ssm_status ssmi_check_output(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t,
                             int optional, int32_t ndim, const int64_t * want, uint32_t dtype_mask);
/* INVALID_LAYOUT if the byte ranges [min, max] of out and in intersect. */
ssm_status ssmi_check_no_overlap(ssm_context * ctx, const char * op, const char * out_name, const ssm_tensor * out,
                                 const char * in_name, const ssm_tensor * in);
/* Number of elements (product of shape); 0 if any dim is 0, INT64_MAX where the product
 * overflows (a view broadcast over huge dims). Assumes checked. */
int64_t    ssmi_numel(const ssm_tensor * t);

/* ---- state pools (core/pool.c) ------------------------------------------------------- */
/* Copies the sub-tensor [in_row, ...] of in into [out_row, ...] of out (same shape below the
 * first dim), element by element in row-major order: raw bytes for equal dtypes, else one
 * rounding from double. */
void ssmi_copy_row(const ssm_tensor * in, int64_t in_row, const ssm_tensor * out, int64_t out_row);
/* A separate output pool must hold the whole pool after a decode step: copies every slot
 * of `in` that no batch row updates (slot of row b = indices[b]; negative = padding) into
 * `out`, exactly. A no-op when out is absent, out is in (in place) or there are no indices
 * (then slots == batch and every slot is updated). Allocates nothing and always returns OK:
 * it runs after the kernel has written the outputs, where a failure would be too late. */
ssm_status ssmi_copy_unused_slots(ssm_context * ctx, const char * op, const ssm_tensor * in, const ssm_tensor * out,
                                  const ssm_tensor * indices, int64_t batch);

/* ---- Mamba-2 problem description (filled by ops/mamba2.c after validation) ---------- */
typedef struct ssmi_mamba2_dims {
    int64_t batch;   /* batch rows                                            */
    int64_t seqlen;  /* S                                                     */
    int64_t nheads;  /* H                                                     */
    int64_t headdim; /* P                                                     */
    int64_t dstate;  /* N                                                     */
    int64_t ngroups; /* G                                                     */
    int64_t chunk;   /* Q                                                     */
    int64_t nchunks; /* NC = ceil(S / Q) (or the tensors' NC where given)     */
    int64_t nseq;    /* number of sequences with cu_seqlens, else 0           */
    int64_t slots;   /* mamba2_step: rows of the state pool                   */
} ssmi_mamba2_dims;

/* mamba2_scan's chunk_states: rows of a sequence of len tokens whose first token has
 * absolute position start, for chunk size q: the positions t with (t + 1) % q == 0. */
static inline int64_t ssmi_chunk_state_rows(int64_t start, int64_t len, int64_t q) {
    return (start + len) / q - start / q;
}
/* num_computed_tokens[i] of mamba2_scan (0 when absent). */
static inline int64_t ssmi_computed_tokens(const ssm_tensor * t, int64_t i) {
    return ssmi_present(t) ? ssmi_get_i64(t, i * t->strides[0]) : 0;
}

/* ---- layer operators (filled by ops/layer.c) ----------------------------------------- */
typedef struct ssmi_conv1d_dims {
    int64_t batch;     /* batch rows (B for the update)                         */
    int64_t dim;       /* D channels                                            */
    int64_t seqlen;    /* S (0 for the update)                                  */
    int64_t width;     /* W                                                     */
    int64_t state_len; /* L of the update's conv state; W−1 for the forward     */
    int64_t slots;     /* update: rows of the conv-state pool                   */
    int64_t nseq;      /* forward: sequences with cu_seqlens, else 0            */
} ssmi_conv1d_dims;

typedef struct ssmi_rmsnorm_dims {
    int64_t rows;       /* M                                                    */
    int64_t dim;        /* D                                                    */
    int64_t group_size; /* resolved (never 0)                                   */
} ssmi_rmsnorm_dims;

/* ---- Mamba-3 SISO problem description (filled by ops/mamba3_siso.c) ------------------ */
typedef struct ssmi_mamba3_dims {
    int64_t batch;   /* B                                                       */
    int64_t seqlen;  /* S (0 for the step)                                      */
    int64_t nheads;  /* H                                                       */
    int64_t nheads_qk; /* Hq                                                    */
    int64_t dk;      /* K                                                       */
    int64_t dv;      /* V                                                       */
    int64_t nangles; /* A                                                       */
    int64_t chunk;   /* C                                                       */
    int64_t nseq;    /* NS: B, or nseq with cu_seqlens; slots for the step      */
    int32_t varlen;  /* cu_seqlens given                                        */
    int32_t has_states; /* initial states given                                */
} ssmi_mamba3_dims;

/* ---- Mamba-3 MIMO problem description (filled by ops/mamba3_mimo.c) ------------------ */
typedef struct ssmi_mimo_dims {
    int64_t batch;     /* B                                                     */
    int64_t seqlen;    /* S (0 for the step)                                    */
    int64_t nheads;    /* H                                                     */
    int64_t ngroups;   /* G                                                     */
    int64_t rank;      /* R                                                     */
    int64_t dstate;    /* N                                                     */
    int64_t headdim;   /* P                                                     */
    int64_t nangles;   /* A = N / div                                           */
    int64_t chunk;     /* C                                                     */
    int64_t nchunks;   /* nc = ceil(S / C) (dense)                              */
    int64_t nseq;      /* NS: B, or nseq with cu_seqlens; slots for the step    */
    int32_t varlen;    /* cu_seqlens given                                      */
    int32_t has_states; /* initial states given                                */
    int32_t reduce_o;  /* mimo_o given                                          */
} ssmi_mimo_dims;

#endif /* SSMI_H */
