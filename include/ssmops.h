/*
 * ssmops.h — the one public header of ssmops.
 *
 * ssmops is a C library of the operators behind Mamba-2 and Mamba-3 state-space-model
 * layers (chunked prefill, backward, decode), with an optimised CPU backend and a float64
 * reference backend that ships inside the library as the golden oracle.
 *
 * Conventions shared by every operator
 * ------------------------------------
 * - Tensors are non-owning views (ssm_tensor): data pointer, dtype, device, ndim, shape and
 *   strides IN ELEMENTS (DLPack order: outermost first). Every operator honours arbitrary
 *   strides, including 0 (broadcast) on inputs. An optional tensor is absent when its data
 *   pointer is NULL: a zero-initialised argument struct means "every optional input absent".
 * - Float tensors may be F32, F16, BF16 or F64, inputs and outputs alike. The "compute dtype"
 *   of an operator is the dtype of its main activation input (x for Mamba-2); it chooses the
 *   accuracy bar. Accumulation is always fp32 (fp64 in the reference backend), and states
 *   carried between chunks stay fp32. Outputs are rounded to nearest-even into their dtype.
 * - Every function returns ssm_status. On failure a one-sentence message naming the
 *   operator, the argument, its value and the rule is available from
 *   ssm_context_last_error(ctx) (a thread-local buffer when ctx is NULL). Every argument
 *   check runs before the first write: a failed call leaves every output untouched.
 *   The library never prints, aborts or exits.
 * - ctx == NULL always works: one thread, automatic backend, malloc.
 * - Results do not depend on the thread count: every reduction has a fixed order.
 * - Argument order: context, params, args (inputs then outputs), workspace.
 */
#ifndef SSMOPS_H
#define SSMOPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SSMOPS_BUILDING) && defined(__GNUC__)
#define SSM_API __attribute__((visibility("default")))
#else
#define SSM_API
#endif

/* ---------------------------------------------------------------------------------------
 * Version
 * ------------------------------------------------------------------------------------- */
#define SSM_VERSION_MAJOR 0
#define SSM_VERSION_MINOR 1
#define SSM_VERSION_PATCH 0
#define SSM_VERSION_NUMBER (SSM_VERSION_MAJOR * 10000 + SSM_VERSION_MINOR * 100 + SSM_VERSION_PATCH)

/* "0.1.0" — the version of the library actually loaded. */
SSM_API const char * ssm_version(void);
/* SSM_VERSION_NUMBER of the library actually loaded (compare with the header's). */
SSM_API unsigned     ssm_version_number(void);

/* ---------------------------------------------------------------------------------------
 * Status codes (values are pinned; gaps leave room to grow)
 * ------------------------------------------------------------------------------------- */
typedef enum ssm_status {
    SSM_STATUS_OK                   = 0,
    SSM_STATUS_INVALID_ARGUMENT     = 10, /* a value or combination is not allowed          */
    SSM_STATUS_INVALID_SHAPE        = 11, /* ndim or a dimension does not match              */
    SSM_STATUS_INVALID_LAYOUT       = 12, /* dtype, device, strides, overlap                 */
    SSM_STATUS_UNSUPPORTED          = 20, /* valid, but this backend does not do it          */
    SSM_STATUS_UNSUPPORTED_HARDWARE = 21, /* the requested ISA / device is not present       */
    SSM_STATUS_OUT_OF_MEMORY        = 30,
    SSM_STATUS_WORKSPACE_TOO_SMALL  = 31,
    SSM_STATUS_DEVICE_ERROR         = 40,
    SSM_STATUS_INTERNAL             = 90
} ssm_status;

/* A static string naming the status ("SSM_STATUS_INVALID_SHAPE"); never NULL. */
SSM_API const char * ssm_status_string(ssm_status status);

/* ---------------------------------------------------------------------------------------
 * Tensors
 * ------------------------------------------------------------------------------------- */
typedef enum ssm_dtype {
    SSM_DTYPE_F32  = 0,
    SSM_DTYPE_F16  = 1,
    SSM_DTYPE_BF16 = 2,
    SSM_DTYPE_F64  = 3,
    SSM_DTYPE_I32  = 10,
    SSM_DTYPE_I64  = 11
} ssm_dtype;

typedef enum ssm_device_type {
    SSM_DEVICE_CPU  = 0,
    SSM_DEVICE_CUDA = 1
} ssm_device_type;

typedef struct ssm_device {
    int32_t type;  /* ssm_device_type */
    int32_t index; /* device ordinal; 0 for the CPU */
} ssm_device;

#define SSM_MAX_DIMS 6

typedef struct ssm_tensor {
    void *     data;                  /* first element; NULL = absent (optional inputs)   */
    int32_t    dtype;                 /* ssm_dtype                                        */
    ssm_device device;
    int32_t    ndim;                  /* 0..SSM_MAX_DIMS                                  */
    int64_t    shape[SSM_MAX_DIMS];   /* outermost first                                  */
    int64_t    strides[SSM_MAX_DIMS]; /* in ELEMENTS, may be 0 (broadcast) on inputs      */
} ssm_tensor;

/* sizeof(ssm_tensor), so bindings can assert their mirror of the struct. */
SSM_API size_t       ssm_tensor_struct_size(void);
/* A contiguous row-major CPU view of `data` with the given shape. ndim is clamped to
 * [0, SSM_MAX_DIMS]. */
SSM_API ssm_tensor   ssm_tensor_make(void * data, ssm_dtype dtype, int32_t ndim, const int64_t * shape);
/* DLPack's DLTensor as its ABI lays it out (the struct every DLPack producer hands over:
 * numpy's, PyTorch's, CuPy's, JAX's __dlpack__ capsules point to it, first in
 * DLManagedTensor or after the version, deleter and flags in DLManagedTensorVersioned). */
typedef struct ssm_dl_tensor {
    void *    data;
    struct {
        int32_t device_type; /* 1 CPU, 2 CUDA, 3 CUDA host, 13 CUDA managed */
        int32_t device_id;
    } device;
    int32_t   ndim;
    struct {
        uint8_t  code;  /* 0 int, 1 uint, 2 float, 4 bfloat */
        uint8_t  bits;
        uint16_t lanes;
    } dtype;
    int64_t * shape;
    int64_t * strides;     /* in elements; NULL = compact row-major */
    uint64_t  byte_offset; /* added to data */
} ssm_dl_tensor;
/* The ssm_tensor view of a DLTensor: data + byte_offset, its dtype (float 16/32/64, bfloat
 * 16, int 32/64), device (CPU and CUDA host memory as CPU, CUDA and managed memory as
 * CUDA) and strides. Anything else (lanes > 1, other dtypes or devices, more than
 * SSM_MAX_DIMS dims) is INVALID_LAYOUT or INVALID_SHAPE with a message; *out is written only
 * on success. An empty tensor with a NULL data pointer gets a non-NULL placeholder address
 * (NULL means an absent tensor). The view does not own the memory. */
struct ssm_context;
SSM_API ssm_status   ssm_tensor_from_dlpack(struct ssm_context * ctx, const ssm_dl_tensor * dl, ssm_tensor * out);
/* Bytes per element (0 for an unknown dtype). */
SSM_API size_t       ssm_dtype_size(ssm_dtype dtype);
/* "f32", "f16", "bf16", "f64", "i32", "i64", or "unknown". */
SSM_API const char * ssm_dtype_name(ssm_dtype dtype);

/* IEEE conversions with round-to-nearest-even; NaN stays NaN (quiet), Inf stays Inf,
 * overflow rounds to Inf, subnormals are exact both ways. */
SSM_API uint16_t ssm_f32_to_f16(float value);
SSM_API float    ssm_f16_to_f32(uint16_t bits);
SSM_API uint16_t ssm_f32_to_bf16(float value);
SSM_API float    ssm_bf16_to_f32(uint16_t bits);

/* ---------------------------------------------------------------------------------------
 * Context
 * ------------------------------------------------------------------------------------- */
typedef enum ssm_backend {
    SSM_BACKEND_AUTO = 0, /* the fastest backend that supports the call (CPU here)        */
    SSM_BACKEND_REF  = 1, /* float64 reference: plain loops straight from the spec        */
    SSM_BACKEND_CPU  = 2, /* optimised CPU: SIMD kernels + threads                        */
    SSM_BACKEND_CUDA = 3
} ssm_backend;

typedef enum ssm_isa {
    SSM_ISA_AUTO   = 0, /* best the host supports (honours the SSMOPS_ISA environment)    */
    SSM_ISA_SCALAR = 1,
    SSM_ISA_AVX2   = 2, /* AVX2 + FMA (+ F16C for half loads)                              */
    SSM_ISA_AVX512 = 3  /* AVX-512 F+BW+DQ+VL with the AVX2 set (kernels without an AVX-512
                           version run their AVX2 one)                                     */
} ssm_isa;

/* CPU feature bits reported by ssm_cpu_features(). */
#define SSM_CPU_AVX2    (1u << 0)
#define SSM_CPU_FMA     (1u << 1)
#define SSM_CPU_F16C    (1u << 2)
#define SSM_CPU_AVX512F  (1u << 3)
#define SSM_CPU_AVX512BW (1u << 4)
#define SSM_CPU_AVX512DQ (1u << 5)
#define SSM_CPU_AVX512VL (1u << 6)

/* Features of this CPU that the OS also enables (XGETBV-checked). */
SSM_API uint32_t     ssm_cpu_features(void);
/* "auto", "scalar", "avx2", "avx512". */
SSM_API const char * ssm_isa_name(ssm_isa isa);
/* "auto", "ref", "cpu", "cuda". */
SSM_API const char * ssm_backend_name(ssm_backend backend);

/* Memory for scratch space. alloc returns memory aligned to `alignment` (a power of two
 * ≥ 64) or NULL; free accepts NULL. Both NULL = the library's aligned malloc. */
typedef struct ssm_allocator {
    void * (*alloc)(void * opaque, size_t size, size_t alignment);
    void   (*free)(void * opaque, void * ptr);
    void *  opaque;
} ssm_allocator;

/* Device memory of the CUDA backend: every device allocation the library makes (operator
 * workspaces when the caller gives none, plans, slot lists, ssm_cuda_malloc) goes through
 * alloc, every release through free, with ctx's cuda_stream as `stream` (a cudaStream_t):
 * memory freed on that stream may be handed out again for later work on it, as with
 * cudaFreeAsync. alloc returns memory aligned to 256 bytes or NULL (the call then fails with
 * SSM_STATUS_OUT_OF_MEMORY and writes no output); free accepts NULL. A serving engine's
 * caching allocator can own the library's device memory this way, and an allocator that
 * hands out memory reserved beforehand makes a call safe to capture in a CUDA graph (see
 * docs/ops/limits.md, "CUDA graphs"). Both NULL = cudaMallocAsync/cudaFreeAsync on the
 * stream (cudaMalloc/cudaFree for ssm_cuda_malloc/ssm_cuda_free). */
typedef struct ssm_device_allocator {
    void * (*alloc)(void * opaque, size_t bytes, void * stream);
    void   (*free)(void * opaque, void * ptr, void * stream);
    void *  opaque;
} ssm_device_allocator;

/* Reference-backend rounding modes (only some operators have a second mode). */
typedef enum ssm_ref_mode {
    SSM_REF_EXACT          = 0, /* float64 from the inputs as given                       */
    SSM_REF_UPSTREAM_BF16  = 1  /* round to bf16 where upstream's GPU kernel does         */
} ssm_ref_mode;

typedef struct ssm_context_params {
    size_t        size;          /* sizeof(ssm_context_params), set by _init              */
    int32_t       num_threads;   /* ≥ 1; 0 = number of online CPUs                         */
    int32_t       backend;       /* ssm_backend                                            */
    int32_t       isa;           /* ssm_isa; AUTO honours SSMOPS_ISA=scalar|avx2|avx512    */
    int32_t       deterministic; /* 1 (default): fixed reduction order, always honoured    */
    int32_t       ref_mode;      /* ssm_ref_mode: the reference backend's rounding model;
                                    the CPU backend reads it only in
                                    ssm_mamba3_mimo_bwd_fwd (see there)                    */
    ssm_allocator allocator;
    void *        cuda_stream;   /* cudaStream_t for the CUDA backend; NULL = default      */
    ssm_device_allocator device_allocator; /* the CUDA backend's device memory             */
    int32_t       cuda_portable; /* 1: the CUDA backend chooses as on a GPU without wgmma (its
                                    selection tables pass over their sm_90a-only entries), to
                                    run and test those kernels on an H100/H200; 0 (default)  */
} ssm_context_params;

typedef struct ssm_context ssm_context;

/* Defaults: 1 thread, AUTO backend, AUTO isa, deterministic, exact reference, malloc, the
 * default CUDA stream and device allocator, not portable. The struct only grows at its end: a params.size
 * of an earlier layout (a program built against an older header; the first layout ends
 * after cuda_stream) is accepted, and the fields it lacks take their defaults. */
SSM_API void         ssm_context_params_init(ssm_context_params * params);
/* Creates a context (starts num_threads − 1 worker threads). Fails with
 * UNSUPPORTED_HARDWARE if params->isa (or SSMOPS_ISA) asks for an ISA the host lacks. */
SSM_API ssm_status   ssm_context_create(const ssm_context_params * params, ssm_context ** out);
/* Joins the workers and frees the context; NULL is a no-op. */
SSM_API void         ssm_context_free(ssm_context * ctx);
/* The message of the last failure on ctx ("" if none). With ctx == NULL: the calling
 * thread's message for calls made with ctx == NULL. Valid until the next call. */
SSM_API const char * ssm_context_last_error(const ssm_context * ctx);
SSM_API int32_t      ssm_context_num_threads(const ssm_context * ctx);
/* The ISA the CPU backend runs with under this context (never AUTO). */
SSM_API ssm_isa      ssm_context_isa(const ssm_context * ctx);
SSM_API ssm_backend  ssm_context_backend(const ssm_context * ctx);

/* ---------------------------------------------------------------------------------------
 * Operator schema: a read-only description of every operator's arguments, the one table
 * the library validates from and the CLI, the tests and the manuals are built from.
 * Bindings can build their wrappers from it: operator i's function is ssm_<name>, its
 * argument struct ssm_<name>_args (args_size bytes) holds one ssm_tensor per entry of
 * args[], at the entry's offset, and its params struct is named by `params`.
 * Operators are listed in the order of this header; the list only grows.
 * ------------------------------------------------------------------------------------- */
/* What an argument is: bit 0 = optional (may be absent: data NULL), bit 1 = output. */
typedef enum ssm_arg_role {
    SSM_ARG_INPUT           = 0, /* required input                                        */
    SSM_ARG_OPTIONAL_INPUT  = 1,
    SSM_ARG_OUTPUT          = 2, /* required output                                       */
    SSM_ARG_OPTIONAL_OUTPUT = 3  /* written only when given                               */
} ssm_arg_role;
#define SSM_ARG_ROLE_OPTIONAL 1
#define SSM_ARG_ROLE_OUTPUT   2

/* Which dtypes an argument accepts. */
typedef enum ssm_dtype_class {
    SSM_DTYPE_CLASS_FLOAT = 0, /* F32, F16, BF16, F64 (inputs and outputs alike)            */
    SSM_DTYPE_CLASS_INDEX = 1  /* I32, I64: seq_idx, cu_seqlens, state_batch_indices; in host
                                  or device memory under the CUDA backend                    */
} ssm_dtype_class;

/* ssm_arg_info.flags */
#define SSM_ARG_ACTIVATION (1u << 0) /* held in the activation (compute) dtype by upstream's
                                        models; other float tensors (parameters, states,
                                        decays) are fp32 there. A hint for callers and tools:
                                        every float dtype is accepted either way             */

typedef struct ssm_arg_info {
    const char * name;        /* the args struct's field ("x")                              */
    int32_t      role;        /* ssm_arg_role                                               */
    int32_t      dtype_class; /* ssm_dtype_class                                            */
    uint32_t     ranks;       /* bit n set: ndim n is accepted (one bit for most arguments)  */
    uint32_t     flags;       /* SSM_ARG_ACTIVATION                                         */
    size_t       offset;      /* offsetof(ssm_<op>_args, <name>)                            */
    const char * shape;       /* the shape in the manual's letters, "(batch, S, H, P)"      */
    const char * needs;       /* an optional output allowed only when this input is given
                                 (dd needs d); NULL: no such rule                           */
    const char * in_place;    /* an output that may be exactly this input's view (a decode
                                 step's state pool updated in place); NULL: none            */
} ssm_arg_info;

typedef struct ssm_op_info {
    const char *         name;      /* "mamba2_scan": the function ssm_mamba2_scan          */
    const char *         params;    /* its params struct, "ssm_mamba2_params" (initialised by
                                       <params>_init; its first field is its size)          */
    size_t               params_size; /* sizeof that struct                                 */
    size_t               args_size; /* sizeof(ssm_<name>_args)                              */
    int32_t              nargs;
    const ssm_arg_info * args;      /* nargs entries in the args struct's field order:
                                       every field of the struct, inputs before outputs     */
    uint32_t             backends;  /* bit b set: backend b (ssm_backend) has a path for the
                                       operator (when the build includes that backend)     */
    int32_t              workspace; /* 1: the call ends with (workspace, workspace_size), and
                                       ssm_<name>_workspace_size tells the bytes             */
} ssm_op_info;

/* Number of operators. */
SSM_API int32_t             ssm_op_count(void);
/* Operator i (0 ≤ i < ssm_op_count()), or NULL out of range. The data is static. */
SSM_API const ssm_op_info * ssm_op_get(int32_t i);
/* Index of the operator named name ("mamba2_scan" or "ssm_mamba2_scan"), or -1. */
SSM_API int32_t             ssm_op_find(const char * name);
/* sizeof(ssm_op_info) and sizeof(ssm_arg_info), so bindings can assert their mirrors. */
SSM_API size_t              ssm_op_info_struct_size(void);
SSM_API size_t              ssm_arg_info_struct_size(void);

/* ---------------------------------------------------------------------------------------
 * Kernel variants. Where a backend has more than one way to run an operator (the CUDA
 * backend: kernels for different shared-memory budgets, layouts, problem sizes), it keeps
 * them in a selection table: an ordered list of named entries, each with the rule that says
 * when it applies; a call runs the first entry that applies. `ssmops list --variants`
 * prints the tables. op is an operator's name without the prefix ("mamba2_scan").
 * ------------------------------------------------------------------------------------- */
/* Entries of op's table on backend (AUTO: the CUDA backend's); 0 when there is none. */
SSM_API int32_t      ssm_variant_count(ssm_backend backend, const char * op);
/* Entry i's name and its one-line reason; NULL when i or op is out of range. */
SSM_API const char * ssm_variant_name(ssm_backend backend, const char * op, int32_t i);
SSM_API const char * ssm_variant_why(ssm_backend backend, const char * op, int32_t i);
/* Forces ctx to run op with the named entry of its backend's table (NULL, "" or "auto": the
 * table's own choice again). An unknown op or name is INVALID_ARGUMENT with the valid
 * names in the message; a call whose problem the forced entry does not cover fails with
 * UNSUPPORTED. The library reads no environment for this; the CLI applies its
 * SSMOPS_VARIANT="op=name[,op=name…]" through this call. */
SSM_API ssm_status   ssm_context_set_variant(ssm_context * ctx, const char * op, const char * variant);
/* Name of the entry the last call on ctx ran ("" before any call, or for backends without
 * tables). */
SSM_API const char * ssm_context_last_variant(const ssm_context * ctx);

/* ---------------------------------------------------------------------------------------
 * CUDA helpers (the CUDA backend: SSM_BACKEND_CUDA, or AUTO with tensors on a CUDA device).
 * Operators with a CUDA path take float tensors with device.type = SSM_DEVICE_CUDA (device
 * pointers of the current device) and run on ctx's cuda_stream (NULL = the default
 * stream); index tensors (seq_idx, cu_seqlens) may be in host or device memory (device
 * ones are copied to the host and the stream synchronised, since validation reads them; while
 * the stream is being captured into a CUDA graph that is UNSUPPORTED instead), except
 * a decode step's state_batch_indices: in device memory it is read on the device (no copy, no
 * synchronisation), its values are not validated on the host, and a row whose index lies
 * outside [0, slots) is padding (out row zeroed, no slot read or written). A call is safe to
 * capture in a CUDA graph when its index tensors are host tensors or such device slot
 * indices and its device memory comes from a workspace or the device allocator
 * (docs/ops/limits.md, "CUDA graphs").
 * A CPU tensor under the CUDA backend, or mixed devices, is INVALID_LAYOUT; every CUDA
 * error is SSM_STATUS_DEVICE_ERROR with the CUDA error string in the message.
 * In a build without the CUDA backend: ssm_cuda_device_count() is 0 and the others return
 * SSM_STATUS_UNSUPPORTED.
 * ------------------------------------------------------------------------------------- */
/* Number of CUDA devices usable by this build (0 without the CUDA backend or a GPU). */
SSM_API int32_t    ssm_cuda_device_count(void);
/* Device memory and its release: the context's device allocator on its stream when it has
 * one, else cudaMalloc/cudaFree; bytes == 0 gives NULL. Release with the same context. */
SSM_API ssm_status ssm_cuda_malloc(ssm_context * ctx, void ** ptr, size_t bytes);
SSM_API ssm_status ssm_cuda_free(ssm_context * ctx, void * ptr);
/* Copies bytes between any host/device pointers on ctx's stream and waits for it. */
SSM_API ssm_status ssm_cuda_memcpy(ssm_context * ctx, void * dst, const void * src, size_t bytes);
/* Benchmark helper: calls fn(arg, rep) for rep = 0..reps−1 with a CUDA event recorded on
 * ctx's stream before and after each call; ms[rep] = the device time of call rep. */
SSM_API ssm_status ssm_cuda_time(ssm_context * ctx, ssm_status (*fn)(void * arg, int32_t rep), void * arg,
                                 int32_t reps, float * ms);
/* As ssm_cuda_time, with the device's L2 cache overwritten before every call (a buffer of twice
 * its size written on ctx's stream, outside the timed interval): each call starts cold. */
SSM_API ssm_status ssm_cuda_time_cold(ssm_context * ctx, ssm_status (*fn)(void * arg, int32_t rep), void * arg,
                                      int32_t reps, float * ms);

/* =======================================================================================
 * Mamba-2 (SSD). Math: docs/ops/mamba2.md and spec mamba2_ssd.md.
 * Dimensions: batch, S (seqlen), H (nheads), P (headdim), N (dstate), G (ngroups, H % G
 * == 0, head h uses group h / (H/G)), Q (chunk_size), NC = ceil(S/Q).
 * Recurrence per head h, token t (group g = h/(H/G)):
 *   dt_t = clamp(softplus?(dt[t,h] + dt_bias[h]), lo, hi)        softplus only if v <= 20
 *   h_t  = exp(dt_t·A[h])·h_{t−1} + dt_t·x_t ⊗ B_t[g]              state (P, N), fp32
 *   y_t  = h_t·C_t[g] + D_h·x_t ;  out_t = y_t·silu(z_t) if z given
 * No decay exponent is clamped (upstream clamps some at 0; see docs).
 * ======================================================================================= */
typedef struct ssm_mamba2_params {
    size_t  size;         /* sizeof(ssm_mamba2_params), set by _init                       */
    int64_t chunk_size;   /* Q, 1 ≤ Q ≤ 1024 (default 256)                                 */
    int32_t dt_softplus;  /* apply softplus to dt + dt_bias (default 0)                    */
    double  dt_limit_lo;  /* clamp of the processed dt, always applied (default 0)         */
    double  dt_limit_hi;  /* (default +inf)                                                */
} ssm_mamba2_params;

SSM_API void ssm_mamba2_params_init(ssm_mamba2_params * params);

/* dt processing and the inclusive in-chunk cumsum of dt·A (spec §2.1). */
typedef struct ssm_mamba2_chunk_cumsum_args {
    ssm_tensor dt;        /* in  (batch, S, H)          raw dt, any float                    */
    ssm_tensor a;         /* in  (H)                                                         */
    ssm_tensor dt_bias;   /* in  (H)                    optional                             */
    ssm_tensor dt_out;    /* out (batch, H, NC, Q)      processed dt, 0 on padded positions  */
    ssm_tensor da_cumsum; /* out (batch, H, NC, Q)      inclusive cumsum of dt_out·A         */
} ssm_mamba2_chunk_cumsum_args;
SSM_API ssm_status ssm_mamba2_chunk_cumsum(ssm_context * ctx, const ssm_mamba2_params * params,
                                           const ssm_mamba2_chunk_cumsum_args * args);

/* Chunk-local states (spec §2.2):
 *   states[b,c,h,p,n] = Σ_j exp(da_cumsum[b,h,c,Q−1] − da_cumsum[b,h,c,j])·dt[b,h,c,j]
 *                           · x[b,cQ+j,h,p]·b[b,cQ+j,g,n]        (j valid, same seq as last)
 * The CANN layout (dt, da_cumsum [B,NC,L,H]; states [B,NC,H,N,P]) is a strided view of
 * the same tensors; see docs/ops/mamba2.md. */
typedef struct ssm_mamba2_chunk_state_args {
    ssm_tensor b;         /* in  (batch, S, G, N)                                            */
    ssm_tensor x;         /* in  (batch, S, H, P)                                            */
    ssm_tensor dt;        /* in  (batch, H, NC, Q)      processed dt (dt_out)                */
    ssm_tensor da_cumsum; /* in  (batch, H, NC, Q)                                           */
    ssm_tensor seq_idx;   /* in  (batch, S) i32/i64     optional                             */
    ssm_tensor states;    /* out (batch, NC, H, P, N)                                        */
} ssm_mamba2_chunk_state_args;
SSM_API ssm_status ssm_mamba2_chunk_state(ssm_context * ctx, const ssm_mamba2_params * params,
                                          const ssm_mamba2_chunk_state_args * args);

/* Inter-chunk recurrence (spec §2.3): states_in[c] is the state entering chunk c,
 * states_in[0] = initial_states (or 0), S_{c+1} = exp(da_chunk_cumsum[c])·T_c·S_c + states[c],
 * final_states = S_NC. With seq_idx, T_c = 0 where chunk c's last token starts a new id. */
typedef struct ssm_mamba2_state_passing_args {
    ssm_tensor states;          /* in  (batch, NC, H, P, N)  chunk-local states            */
    ssm_tensor da_chunk_cumsum; /* in  (batch, H, NC)        = da_cumsum[..., Q−1]          */
    ssm_tensor initial_states;  /* in  (batch, H, P, N)      optional                       */
    ssm_tensor seq_idx;         /* in  (batch, S) i32/i64    optional; S ≤ NC·Q             */
    ssm_tensor states_in;       /* out (batch, NC, H, P, N)                                 */
    ssm_tensor final_states;    /* out (batch, H, P, N)      optional                       */
} ssm_mamba2_state_passing_args;
SSM_API ssm_status ssm_mamba2_state_passing(ssm_context * ctx, const ssm_mamba2_params * params,
                                            const ssm_mamba2_state_passing_args * args);

/* CB[b,c,g,i,j] = Σ_n c[b,cQ+i,g,n]·b[b,cQ+j,g,n] for valid i, j of the same sequence,
 * else 0 (spec §2.4). The full Q×Q block is written. */
typedef struct ssm_mamba2_bmm_args {
    ssm_tensor c;       /* in  (batch, S, G, N)                                            */
    ssm_tensor b;       /* in  (batch, S, G, N)                                            */
    ssm_tensor seq_idx; /* in  (batch, S) i32/i64       optional                           */
    ssm_tensor cb;      /* out (batch, NC, G, Q, Q)                                        */
} ssm_mamba2_bmm_args;
SSM_API ssm_status ssm_mamba2_bmm(ssm_context * ctx, const ssm_mamba2_params * params,
                                  const ssm_mamba2_bmm_args * args);

/* Outputs from CB, the passed states, D and z (spec §2.5):
 *   y[t] = Σ_{j≤i} cb[i,j]·exp(cm_i − cm_j)·dt_j·x_j + [M_prev(i)]·exp(cm_i)·states_in[c]·c_t
 *          + D·x_t;   out_x = y (if requested);   out = y·silu(z) if z else y.        */
typedef struct ssm_mamba2_chunk_scan_args {
    ssm_tensor cb;        /* in  (batch, NC, G, Q, Q)                                      */
    ssm_tensor x;         /* in  (batch, S, H, P)                                          */
    ssm_tensor dt;        /* in  (batch, H, NC, Q)      processed dt                       */
    ssm_tensor da_cumsum; /* in  (batch, H, NC, Q)                                         */
    ssm_tensor c;         /* in  (batch, S, G, N)                                          */
    ssm_tensor states_in; /* in  (batch, NC, H, P, N)   state entering each chunk          */
    ssm_tensor d;         /* in  (H) or (H, P)          optional                           */
    ssm_tensor z;         /* in  (batch, S, H, P)       optional                           */
    ssm_tensor seq_idx;   /* in  (batch, S) i32/i64     optional                           */
    ssm_tensor out;       /* out (batch, S, H, P)                                          */
    ssm_tensor out_x;     /* out (batch, S, H, P)       optional: pre-gate y (needs z)     */
} ssm_mamba2_chunk_scan_args;
SSM_API ssm_status ssm_mamba2_chunk_scan(ssm_context * ctx, const ssm_mamba2_params * params,
                                         const ssm_mamba2_chunk_scan_args * args);

/* The combined forward a model calls (spec §2.6, §2.8).
 * Varlen: with cu_seqlens (nseq+1, i32/i64, cu[0] = 0, non-decreasing, cu[nseq] = S),
 * batch must be 1, seq_idx must be absent, and initial_states / final_states are per
 * sequence, (nseq, H, P, N); an empty sequence returns its initial state (or 0).
 * Without cu_seqlens they are (batch, H, P, N). seq_idx (batch, S) must be ≥ 0 and
 * non-decreasing along S; initial_states[b] feeds row b only if seq_idx[b,0] == 0, and
 * final_states[b] is the state of the row's last sequence.
 * The result does not depend on chunk_size beyond rounding: backends may pick their own
 * internal tiling (the chunked decomposition is exact).
 * State pools (a serving engine's prefill; NS = nseq with cu_seqlens, else batch): with
 * initial_state_indices, initial_states is a pool (slots, H, P, N) and sequence i starts
 * from initial_states[initial_state_indices[i]], or from zeros where the index is < 0;
 * with final_state_indices, final_states is a pool and sequence i's final state goes to
 * final_states[final_state_indices[i]] (< 0: dropped); other slots are not touched, and
 * no slot may be written twice. final_states may be exactly the view initial_states (in
 * place); then a slot written by sequence i may be read by sequence i only.
 * chunk_states (prefix caching): the state after every token whose absolute position + 1
 * is a multiple of chunk_size, sequence after sequence; sequence i's first token has
 * absolute position num_computed_tokens[i] (absent: 0), so sequence i has
 * floor((c + L)/Q) − floor(c/Q) rows (c = num_computed_tokens[i], L its length, Q =
 * chunk_size), and a partial last chunk has none (its state is the final state). Not with
 * seq_idx. Every call writes nothing when it fails. */
typedef struct ssm_mamba2_scan_args {
    ssm_tensor x;              /* in  (batch, S, H, P)        f32/f16/bf16/f64            */
    ssm_tensor dt;             /* in  (batch, S, H)           raw dt                      */
    ssm_tensor a;              /* in  (H)                                                 */
    ssm_tensor b;              /* in  (batch, S, G, N)                                    */
    ssm_tensor c;              /* in  (batch, S, G, N)                                    */
    ssm_tensor d;              /* in  (H) or (H, P)           optional                    */
    ssm_tensor z;              /* in  (batch, S, H, P)        optional                    */
    ssm_tensor dt_bias;        /* in  (H)                     optional                    */
    ssm_tensor initial_states; /* in  (batch|nseq, H, P, N)   optional                    */
    ssm_tensor seq_idx;        /* in  (batch, S) i32/i64      optional                    */
    ssm_tensor cu_seqlens;     /* in  (nseq + 1) i32/i64      optional                    */
    /* State pools and prefix caching (see above; docs/ops/mamba2.md §8). */
    ssm_tensor initial_state_indices; /* in  (NS) i32/i64  optional: slot of initial_states  */
    ssm_tensor final_state_indices;   /* in  (NS) i32/i64  optional: slot of final_states    */
    ssm_tensor num_computed_tokens;   /* in  (NS) i32/i64  optional (needs chunk_states)     */
    ssm_tensor out;            /* out (batch, S, H, P)                                    */
    ssm_tensor final_states;   /* out (batch|nseq|slots, H, P, N) optional                */
    ssm_tensor chunk_states;   /* out (NCS, H, P, N)          optional                    */
} ssm_mamba2_scan_args;

/* Exact bytes of workspace ssm_mamba2_scan needs for these arguments under ctx. */
SSM_API ssm_status ssm_mamba2_scan_workspace_size(ssm_context * ctx, const ssm_mamba2_params * params,
                                                  const ssm_mamba2_scan_args * args, size_t * bytes);
/* workspace: NULL = allocate through the context allocator; otherwise at least
 * ssm_mamba2_scan_workspace_size bytes, 64-byte aligned (else WORKSPACE_TOO_SMALL /
 * INVALID_ARGUMENT). */
SSM_API ssm_status ssm_mamba2_scan(ssm_context * ctx, const ssm_mamba2_params * params,
                                   const ssm_mamba2_scan_args * args, void * workspace,
                                   size_t workspace_size);

/* =======================================================================================
 * Mamba-2 for training and serving: backward, decode, and the rest of the layer.
 * ======================================================================================= */

/* Every gradient of ssm_mamba2_scan (spec §2.7), recomputing the forward from its inputs
 * (nothing is saved between the calls). dout is required, dfinal_states optional (= 0).
 * Every gradient output is optional (absent = not written); dd needs d, dz needs z,
 * ddt_bias needs dt_bias, dinitial_states needs initial_states. da, dd and ddt_bias are
 * reductions over batch and time, db/dc over the heads of a group: all in a fixed order,
 * so results are identical for any thread count. Shapes and dtypes as the forward. */
typedef struct ssm_mamba2_scan_bwd_args {
    ssm_tensor x, dt, a, b, c, d, z, dt_bias, initial_states, seq_idx, cu_seqlens; /* forward */
    ssm_tensor dout;            /* in  (batch, S, H, P)                                     */
    ssm_tensor dfinal_states;   /* in  (batch|nseq, H, P, N)  optional                      */
    ssm_tensor dx;              /* out (batch, S, H, P)                                     */
    ssm_tensor ddt;             /* out (batch, S, H)          w.r.t. the raw dt             */
    ssm_tensor da;              /* out (H)                                                  */
    ssm_tensor db, dc;          /* out (batch, S, G, N)                                     */
    ssm_tensor dd;              /* out (H) or (H, P), as d                                  */
    ssm_tensor dz;              /* out (batch, S, H, P)                                     */
    ssm_tensor ddt_bias;        /* out (H)                                                  */
    ssm_tensor dinitial_states; /* out (batch|nseq, H, P, N)                                */
} ssm_mamba2_scan_bwd_args;
SSM_API ssm_status ssm_mamba2_scan_bwd(ssm_context * ctx, const ssm_mamba2_params * params,
                                       const ssm_mamba2_scan_bwd_args * args);

/* Decode (spec §2.9): one token per batch row (or a few, below), per head h, channel p:
 *   v = clamp(softplus?(dt[b,h,p] + dt_bias[h,p]), dt_limit_lo, dt_limit_hi)
 *   s[n] = state[slot,h,p,n]·exp(a[h,p,n]·v) + v·b[b,g,n]·x[b,h,p];  final_state = s
 *   y = Σ_n s[n]·c[b,g,n] (unrounded s) + d[h,p]·x[b,h,p];  out = y·silu(z) if z
 * The same dt_limit as the forward is applied (upstream's step ignores it; a step that
 * agrees with the forward needs it). The per-head form of a Mamba-2 layer (a (H), dt
 * (B,H), dt_bias (H), d (H)) is passed as stride-0 views over p and n; backends detect it
 * and compute one exp per head.
 * Slots (docs/ops/mamba2.md "Decode slots"): with state_batch_indices the state is a pool
 * of `slots` rows and row b reads slot idx[b]; idx[b] < 0 marks padding: out = 0 for its
 * tokens and no slot is read or written. Without it, slots == B. Row b writes slot
 * dst_state_batch_indices[b] of final_state when that is given (else its read slot); a
 * negative write slot writes nothing; a padding row's write slot must be negative. A write
 * slot is used once; when final_state is the state view (in place), a slot some row writes
 * is read by no other row; read slots may otherwise be shared.
 * Several tokens per row (speculative decoding): with cu_seqlens (B+1) the tensors x, dt,
 * b, c, z, out and intermediate_states hold T = cu[B] tokens in dim 0 and row b runs its
 * tokens cu[b]..cu[b+1]−1 in order (0 tokens and no token table: its state is carried to
 * its write slot unchanged); the state stays unrounded between them. intermediate_states
 * gets the state after each token. A 2-D state_batch_indices / dst_state_batch_indices
 * (B, L) is vLLM's slot table: the state after token j of row b goes to slot dst[b, j] of the pool (in
 * place only), and row b reads slot idx[b, max(num_accepted_tokens[b]−1, 0)] — the state
 * after the tokens the engine accepted in the previous step. final_state is optional and
 * may be exactly the same view as state (in-place update of the pool); any other overlap
 * is an error. */
typedef struct ssm_mamba2_step_args {
    ssm_tensor x;                   /* in  (B, H, P)        (T, H, P) with cu_seqlens        */
    ssm_tensor dt;                  /* in  (B, H, P)        raw dt (stride 0 over P: per head) */
    ssm_tensor a;                   /* in  (H, P, N)        (strides 0 over P, N: per head)  */
    ssm_tensor b, c;                /* in  (B, G, N)        (T, G, N) with cu_seqlens        */
    ssm_tensor d;                   /* in  (H, P)           optional                         */
    ssm_tensor z;                   /* in  (B, H, P)        optional                         */
    ssm_tensor dt_bias;             /* in  (H, P)           optional                         */
    ssm_tensor state;               /* in  (slots, H, P, N) f32/f16/bf16/f64                 */
    ssm_tensor state_batch_indices; /* in  (B) or (B, L) i32/i64  optional: read slots       */
    ssm_tensor dst_state_batch_indices; /* in (B) or (B, L) optional: write slots (needs the above) */
    ssm_tensor cu_seqlens;          /* in  (B+1) i32/i64    optional: tokens of each row     */
    ssm_tensor num_accepted_tokens; /* in  (B) i32/i64      optional: column of a 2-D read table */
    ssm_tensor out;                 /* out (B, H, P)        (T, H, P) with cu_seqlens        */
    ssm_tensor final_state;         /* out (slots, H, P, N) optional, may alias state        */
    ssm_tensor intermediate_states; /* out (T, H, P, N)     optional: the state after each token */
} ssm_mamba2_step_args;
SSM_API ssm_status ssm_mamba2_step(ssm_context * ctx, const ssm_mamba2_params * params,
                                   const ssm_mamba2_step_args * args);

/* Depthwise causal conv1d (spec §6.2), W = weight.shape[1] in 2..4 (any W ≥ 1 accepted):
 *   pre[b,d,t] = bias[d] + Σ_k weight[d,k]·xin[b,d,t−(W−1)+k],  out = silu(pre) or pre
 * xin[τ] = x[τ] for τ ≥ 0, else initial_states[b,d,W−1+τ] (or 0). With seq_idx a term
 * counts only if seq_idx[τ] == seq_idx[t] (and initial states are not allowed), and a
 * token with seq_idx < 0 gets out = 0. Mamba-2 keeps x channel-last in memory: pass the
 * (batch, D, S) view with strides (S·D, 1, D). final_states (batch, D, W−1) = the last
 * W−1 inputs (left-padded with initial_states/zeros when S < W−1).
 * With cu_seqlens (batch 1, not with seq_idx) the nseq packed sequences are convolved each
 * on its own, from initial_states[s] to final_states[s] (both (nseq, D, W−1)); an empty
 * sequence passes its initial state (or zeros) through. State pools: as ssm_mamba2_scan's
 * (initial_state_indices / final_state_indices, NS entries, in place allowed). */
typedef struct ssm_conv1d_params {
    size_t  size;       /* sizeof(ssm_conv1d_params), set by _init                          */
    int32_t activation; /* 0 = none, 1 = silu (default 1)                                   */
} ssm_conv1d_params;
SSM_API void ssm_conv1d_params_init(ssm_conv1d_params * params);

typedef struct ssm_causal_conv1d_args {
    ssm_tensor x;              /* in  (batch, D, S)                                          */
    ssm_tensor weight;         /* in  (D, W)                                                 */
    ssm_tensor bias;           /* in  (D)              optional                              */
    ssm_tensor seq_idx;        /* in  (batch, S) i32/i64 optional                            */
    ssm_tensor initial_states; /* in  (batch|nseq, D, W−1) optional                         */
    /* Packed sequences with their own conv states and state pools (see above;
     * docs/ops/layer.md). NS = nseq with cu_seqlens, else batch. */
    ssm_tensor cu_seqlens;            /* in (nseq + 1) i32/i64 optional                      */
    ssm_tensor initial_state_indices; /* in (NS) i32/i64 optional: slot of initial_states    */
    ssm_tensor final_state_indices;   /* in (NS) i32/i64 optional: slot of final_states      */
    ssm_tensor out;            /* out (batch, D, S)                                          */
    ssm_tensor final_states;   /* out (batch|nseq, D, W−1) optional (not with seq_idx)      */
} ssm_causal_conv1d_args;
SSM_API ssm_status ssm_causal_conv1d(ssm_context * ctx, const ssm_conv1d_params * params,
                                     const ssm_causal_conv1d_args * args);

/* Gradients of ssm_causal_conv1d given dout (and optionally dfinal_states); every output
 * optional. dweight and dbias are reductions over batch and time in a fixed order. */
typedef struct ssm_causal_conv1d_bwd_args {
    ssm_tensor x, weight, bias, seq_idx, initial_states; /* forward inputs                   */
    ssm_tensor dout;            /* in  (batch, D, S)                                          */
    ssm_tensor dfinal_states;   /* in  (batch, D, W−1) optional                               */
    ssm_tensor dx;              /* out (batch, D, S)                                          */
    ssm_tensor dweight;         /* out (D, W)                                                 */
    ssm_tensor dbias;           /* out (D)                                                    */
    ssm_tensor dinitial_states; /* out (batch, D, W−1)                                        */
} ssm_causal_conv1d_bwd_args;
SSM_API ssm_status ssm_causal_conv1d_bwd(ssm_context * ctx, const ssm_conv1d_params * params,
                                         const ssm_causal_conv1d_bwd_args * args);

/* Decode: one token per batch row through a rolling conv state of L ≥ W−1 columns:
 *   window = [conv_state[slot,d,L−W+1 .. L−1], x[b,d]];  out = act(bias + Σ_k weight[d,k]·window[k])
 *   final_conv_state[slot,d,:] = [conv_state[slot,d,1..L−1], x[b,d]]
 * state_batch_indices and the in-place rule as in ssm_mamba2_step. */
typedef struct ssm_causal_conv1d_update_args {
    ssm_tensor x;                   /* in  (B, D)                                            */
    ssm_tensor weight;              /* in  (D, W)                                            */
    ssm_tensor bias;                /* in  (D)              optional                         */
    ssm_tensor conv_state;          /* in  (slots, D, L)    L ≥ W−1                          */
    ssm_tensor state_batch_indices; /* in  (B) i32/i64      optional                         */
    ssm_tensor out;                 /* out (B, D)                                            */
    ssm_tensor final_conv_state;    /* out (slots, D, L)    optional, may alias conv_state   */
} ssm_causal_conv1d_update_args;
SSM_API ssm_status ssm_causal_conv1d_update(ssm_context * ctx, const ssm_conv1d_params * params,
                                            const ssm_causal_conv1d_update_args * args);

/* Gated RMSNorm (spec §6.3), per row and group of group_size columns (D % group_size == 0):
 *   v = norm_before_gate ? x : x·silu(z);  rstd = 1/sqrt(mean(v²) + eps)
 *   out = v·rstd·weight (·silu(z) if norm_before_gate). Without z there is no gate. */
typedef struct ssm_rmsnorm_params {
    size_t  size;             /* sizeof(ssm_rmsnorm_params), set by _init                   */
    double  eps;              /* default 1e-5 (the Mamba2 module's value)                   */
    int64_t group_size;       /* 0 = D (one group per row; default)                         */
    int32_t norm_before_gate; /* default 0 (as Mamba2 calls it)                             */
} ssm_rmsnorm_params;
SSM_API void ssm_rmsnorm_params_init(ssm_rmsnorm_params * params);

typedef struct ssm_rmsnorm_gated_args {
    ssm_tensor x;      /* in  (M, D)                                                         */
    ssm_tensor z;      /* in  (M, D)     optional                                            */
    ssm_tensor weight; /* in  (D)                                                            */
    ssm_tensor out;    /* out (M, D)                                                         */
} ssm_rmsnorm_gated_args;
SSM_API ssm_status ssm_rmsnorm_gated(ssm_context * ctx, const ssm_rmsnorm_params * params,
                                     const ssm_rmsnorm_gated_args * args);

/* Gradients of ssm_rmsnorm_gated given dout; every output optional; dweight is a
 * reduction over rows in a fixed order. */
typedef struct ssm_rmsnorm_gated_bwd_args {
    ssm_tensor x, z, weight; /* forward inputs                                               */
    ssm_tensor dout;         /* in  (M, D)                                                   */
    ssm_tensor dx;           /* out (M, D)                                                   */
    ssm_tensor dz;           /* out (M, D)    needs z                                        */
    ssm_tensor dweight;      /* out (D)                                                      */
} ssm_rmsnorm_gated_bwd_args;
SSM_API ssm_status ssm_rmsnorm_gated_bwd(ssm_context * ctx, const ssm_rmsnorm_params * params,
                                         const ssm_rmsnorm_gated_bwd_args * args);

/* =======================================================================================
 * Mamba-3 SISO. Math: docs/ops/mamba3_siso.md and spec mamba3_siso.md.
 * Dimensions: B (batch rows; 1 with cu_seqlens), S, H (V-heads), Hq (Q/K heads, H % Hq
 * == 0, head h reads q/k head h / (H/Hq)), K (q/k dim = state columns, even), V (value dim
 * = state rows), A (rotated pairs, A ≤ K/2), NS (sequences: B, or nseq with cu_seqlens).
 * Per V-head h and token t of one sequence (positions local to the sequence):
 *   λ_t = sigmoid(trap_t), γ_t = dt_t·λ_t, γ'_t = dt_{t+1}(1−λ_{t+1}) (0 at the last token),
 *   σ_t = γ_t + γ'_t, α_t = exp(adt_t), β_t = α_t·dt_t·(1−λ_t)
 *   θ_t = wrap(θ_in + Σ_{s≤t} π·tanh(angles_raw_s)·dt_s)  (wrap to [0, 2π), fp32)
 *   q̂_t = R(θ_t)(q_t + q_bias), k̂_t = R(θ_t)(k_t + k_bias)  (interleaved pairs, first A)
 *   h_t = α_t·h_{t−1} + β_t·v_{t−1}k̂_{t−1}ᵀ + γ_t·v_t k̂_tᵀ     state (V, K), fp32
 *   y_t = h_t q̂_t + d·v_t;  out_t = y_t·silu(z_t) if z given
 * States: angle_state (NS,H,A) = θ of the last token, ssm_state (NS,H,V,K) = h of the last
 * token, k_state (NS,H,K) = k̂ of the last token (not σ-scaled), v_state (NS,H,V) = v of
 * the last token. Feeding final states back as initial states continues the sequence
 * exactly. Varlen: each sequence has its own states; an empty sequence leaves them as
 * they are. No decay exponent is clamped; adt > 0 is computed as written.
 * ======================================================================================= */
typedef struct ssm_mamba3_params {
    size_t  size;       /* sizeof(ssm_mamba3_params), set by _init                           */
    int64_t chunk_size; /* C, 1 ≤ C ≤ 1024 (default 64); never changes the result beyond
                           rounding, backends may tile differently                           */
} ssm_mamba3_params;

SSM_API void ssm_mamba3_params_init(ssm_mamba3_params * params);

/* θ_t = wrap(angle_state + Σ_{s≤t} π·tanh(angles_s)·dt_s) per sequence (spec §2.1, §3.2).
 * Computed in fp32 (fp64 in the reference); outputs rounded to their dtype. */
typedef struct ssm_mamba3_angle_cumsum_args {
    ssm_tensor angles;            /* in  (B, S, H, A)    raw rates (pre-tanh); H stride may be 0 */
    ssm_tensor dt;                /* in  (B, H, S)                                                 */
    ssm_tensor angle_state;       /* in  (NS, H, A)      optional (zeros)                          */
    ssm_tensor cu_seqlens;        /* in  (NS + 1) i32/i64 optional                                 */
    ssm_tensor angles_cumsum;     /* out (B, S, H, A)    θ in [0, 2π)                              */
    ssm_tensor final_angle_state; /* out (NS, H, A)      optional                                  */
} ssm_mamba3_angle_cumsum_args;
SSM_API ssm_status ssm_mamba3_angle_cumsum(ssm_context * ctx, const ssm_mamba3_params * params,
                                           const ssm_mamba3_angle_cumsum_args * args);

/* Gradients of ssm_mamba3_angle_cumsum (spec §6.6), with G_t = Σ_{u≥t} dθ_u + dθ_final:
 * dangles = π·dt·(1 − tanh²(angles))·G, ddt = π·Σ_i tanh(angles_i)·G_i, dangle_state = G_0. */
typedef struct ssm_mamba3_angle_cumsum_bwd_args {
    ssm_tensor dangles_cumsum;     /* in  (B, S, H, A)                                  */
    ssm_tensor dfinal_angle_state; /* in  (NS, H, A)     optional                       */
    ssm_tensor angles;             /* in  (B, S, H, A)   raw rates, as in the forward   */
    ssm_tensor dt;                 /* in  (B, H, S)                                     */
    ssm_tensor cu_seqlens;         /* in  (NS + 1)       optional                       */
    ssm_tensor dangles;            /* out (B, S, H, A)                                  */
    ssm_tensor ddt;                /* out (B, H, S)      the angle path's part of ddt   */
    ssm_tensor dangle_state;       /* out (NS, H, A)     optional                       */
} ssm_mamba3_angle_cumsum_bwd_args;
SSM_API ssm_status ssm_mamba3_angle_cumsum_bwd(ssm_context * ctx, const ssm_mamba3_params * params,
                                               const ssm_mamba3_angle_cumsum_bwd_args * args);

/* The chunked core forward with cumulative angles in (spec §2.3, §3.6): the seed NPU
 * operator's interface plus initial/final states and varlen. The three initial states
 * are all present or all absent; each final state is optional; pregate_y and chunk_states
 * as in ssm_mamba3_siso. */
typedef struct ssm_mamba3_siso_fwd_args {
    ssm_tensor q;               /* in  (B, S, Hq, K)                                         */
    ssm_tensor k;               /* in  (B, S, Hq, K)                                         */
    ssm_tensor v;               /* in  (B, S, H, V)      compute dtype = v's dtype           */
    ssm_tensor adt;             /* in  (B, H, S)         log decay (expected ≤ 0)            */
    ssm_tensor dt;              /* in  (B, H, S)                                             */
    ssm_tensor trap;            /* in  (B, H, S)         logit                               */
    ssm_tensor q_bias;          /* in  (H, K)                                                */
    ssm_tensor k_bias;          /* in  (H, K)                                                */
    ssm_tensor angles;          /* in  (B, S, H, A)      cumulative angles θ                 */
    ssm_tensor d;               /* in  (H)               optional                            */
    ssm_tensor z;               /* in  (B, S, H, V)      optional                            */
    ssm_tensor ssm_state;       /* in  (NS, H, V, K)     optional                            */
    ssm_tensor k_state;         /* in  (NS, H, K)        optional                            */
    ssm_tensor v_state;         /* in  (NS, H, V)        optional                            */
    ssm_tensor cu_seqlens;      /* in  (NS + 1) i32/i64  optional                            */
    ssm_tensor out;             /* out (B, S, H, V)                                          */
    ssm_tensor final_ssm_state; /* out (NS, H, V, K)     optional                            */
    ssm_tensor final_k_state;   /* out (NS, H, K)        optional                            */
    ssm_tensor final_v_state;   /* out (NS, H, V)        optional                            */
    ssm_tensor pregate_y;       /* out (B, S, H, V) F32/F64 optional: y before the z gate    */
    ssm_tensor chunk_states;    /* out (NCS, H, V, K) F32/F64 optional: 𝐒 entering chunks   */
} ssm_mamba3_siso_fwd_args;
SSM_API ssm_status ssm_mamba3_siso_fwd(ssm_context * ctx, const ssm_mamba3_params * params,
                                       const ssm_mamba3_siso_fwd_args * args);

/* The combined forward a model calls (spec §2.4): raw angles in, angle cumsum fused,
 * four states in (all or none) and out (each optional), varlen. θ stays fp32 inside.
 * pregate_y (optional, F32 or F64): y_t of docs/ops/mamba3_siso.md §1.4 (d·v included,
 * before the z gate), for ssm_mamba3_siso_bwd to take back. chunk_states (optional, F32 or
 * F64): the V×K carry 𝐒 (spec §3.6) entering every chunk of params->chunk_size tokens, one row
 * per chunk of each sequence in order (NCS = Σ ceil(len/chunk_size); a sequence's first row is
 * H_in, 0 without initial states), for the backward likewise. A backend writes it where
 * chunk_size is a multiple of its own chunk (CPU 32, CUDA 64 tokens), else the call returns
 * SSM_STATUS_UNSUPPORTED. */
typedef struct ssm_mamba3_siso_args {
    ssm_tensor q, k;              /* in  (B, S, Hq, K)                                       */
    ssm_tensor v;                 /* in  (B, S, H, V)                                        */
    ssm_tensor adt, dt, trap;     /* in  (B, H, S)                                           */
    ssm_tensor q_bias, k_bias;    /* in  (H, K)                                              */
    ssm_tensor angles;            /* in  (B, S, H, A)      raw rates; H stride may be 0      */
    ssm_tensor d;                 /* in  (H)               optional                          */
    ssm_tensor z;                 /* in  (B, S, H, V)      optional                          */
    ssm_tensor angle_state;       /* in  (NS, H, A)        optional (with the three below)   */
    ssm_tensor ssm_state;         /* in  (NS, H, V, K)     optional                          */
    ssm_tensor k_state;           /* in  (NS, H, K)        optional                          */
    ssm_tensor v_state;           /* in  (NS, H, V)        optional                          */
    ssm_tensor cu_seqlens;        /* in  (NS + 1)          optional                          */
    /* State pools (as ssm_mamba2_scan's, for the four states). */
    ssm_tensor initial_state_indices; /* in (NS) i32/i64  optional: slot of the four states  */
    ssm_tensor final_state_indices;   /* in (NS) i32/i64  optional: slot of the four finals  */
    ssm_tensor out;               /* out (B, S, H, V)                                        */
    ssm_tensor final_angle_state; /* out (NS, H, A)        optional                          */
    ssm_tensor final_ssm_state;   /* out (NS, H, V, K)     optional                          */
    ssm_tensor final_k_state;     /* out (NS, H, K)        optional                          */
    ssm_tensor final_v_state;     /* out (NS, H, V)        optional                          */
    ssm_tensor pregate_y;         /* out (B, S, H, V) F32/F64 optional: y before the z gate  */
    ssm_tensor chunk_states;      /* out (NCS, H, V, K) F32/F64 optional: 𝐒 entering chunks */
} ssm_mamba3_siso_args;
SSM_API ssm_status ssm_mamba3_siso(ssm_context * ctx, const ssm_mamba3_params * params,
                                   const ssm_mamba3_siso_args * args);

/* Every gradient of ssm_mamba3_siso (spec §2.5, §6), recomputing the forward from its
 * inputs (only pregate_y and chunk_states, below, may be kept from the forward). Incoming gradients: dout (required) and
 * each dfinal_* (optional = 0). Every gradient output is optional (absent = not
 * written); dd needs d, dz needs z, the four state gradients need the input states.
 * Reductions (dq_bias, dk_bias, dd, dq/dk over GQA groups) have a fixed order.
 * pregate_y, chunk_states (optional): what ssm_mamba3_siso wrote into its tensors of these
 * names for these inputs and params (F32 or F64). A backend may read them instead of
 * recomputing y for dz and the states entering the chunks: the CPU backend reads pregate_y, and
 * chunk_states where chunk_size is a multiple of 32; the CUDA plane entries read pregate_y, and
 * chunk_states where chunk_size is their chunk and the entry chains the states (chained_planes). The
 * gradients are the same up to rounding whether or not they are given (docs/ops/mamba3_siso.md
 * §7, "Saved forward results"). */
typedef struct ssm_mamba3_siso_bwd_args {
    ssm_tensor q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z; /* forward inputs      */
    ssm_tensor angle_state, ssm_state, k_state, v_state, cu_seqlens; /* forward inputs      */
    ssm_tensor dout;               /* in  (B, S, H, V)                                       */
    ssm_tensor dfinal_angle_state; /* in  (NS, H, A)       optional                          */
    ssm_tensor dfinal_ssm_state;   /* in  (NS, H, V, K)    optional                          */
    ssm_tensor dfinal_k_state;     /* in  (NS, H, K)       optional                          */
    ssm_tensor dfinal_v_state;     /* in  (NS, H, V)       optional                          */
    ssm_tensor dq, dk;             /* out (B, S, Hq, K)                                      */
    ssm_tensor dv;                 /* out (B, S, H, V)                                       */
    ssm_tensor dadt, ddt, dtrap;   /* out (B, H, S)        dtrap w.r.t. the logit            */
    ssm_tensor dq_bias, dk_bias;   /* out (H, K)                                             */
    ssm_tensor dangles;            /* out (B, S, H, A)     w.r.t. the raw angles             */
    ssm_tensor dd;                 /* out (H)                                                */
    ssm_tensor dz;                 /* out (B, S, H, V)                                       */
    ssm_tensor dangle_state;       /* out (NS, H, A)                                         */
    ssm_tensor dssm_state;         /* out (NS, H, V, K)                                      */
    ssm_tensor dk_state;           /* out (NS, H, K)                                         */
    ssm_tensor dv_state;           /* out (NS, H, V)                                         */
    ssm_tensor pregate_y;          /* in  (B, S, H, V) F32/F64 optional: the forward's       */
    ssm_tensor chunk_states;       /* in  (NCS, H, V, K) F32/F64 optional: the forward's     */
} ssm_mamba3_siso_bwd_args;
SSM_API ssm_status ssm_mamba3_siso_bwd(ssm_context * ctx, const ssm_mamba3_params * params,
                                       const ssm_mamba3_siso_bwd_args * args);

/* Decode: one token per batch row (spec §2.6), one iteration of the recurrence with
 * θ = wrap(angle_state + π·tanh(angles)·dt). The four input states are required (zeros
 * for a fresh sequence). With state_batch_indices (B) the states are pools of `slots`
 * rows and row b reads slot idx[b]; idx[b] < 0 marks padding: out[b] = 0 and no state is
 * read or written. Without it, slots == B. Row b writes slot dst_state_batch_indices[b] of
 * the final_* pools when that is given (else its read slot), with the slot rules of
 * ssm_mamba2_step (in place: any final_* that is its input's view). Each final_* is
 * optional and may be exactly the same view as its input state (in-place update of a
 * caller's pool); any other overlap is an error.
 * Several tokens per row (speculative decoding), as ssm_mamba2_step: with cu_seqlens (B+1)
 * q, k, v, adt, dt, trap, angles, z, out and the intermediate_* states hold T = cu[B]
 * tokens in dim 0 and row b runs its tokens cu[b]..cu[b+1]−1 in order, the four states
 * unrounded between them; intermediate_* get the four states after each token (all four:
 * resuming after token j needs θ, h, k̂ and v of token j). 2-D state_batch_indices /
 * dst_state_batch_indices (B, L) and num_accepted_tokens are vLLM's slot tables with the
 * meaning of ssm_mamba2_step (docs/ops/mamba2.md "Decode slots"); with a token table every
 * final_* given is its input's view (in place). */
typedef struct ssm_mamba3_siso_step_args {
    ssm_tensor q, k;                /* in  (B, Hq, K)        (T, Hq, K) with cu_seqlens      */
    ssm_tensor v;                   /* in  (B, H, V)         (T, H, V) with cu_seqlens       */
    ssm_tensor adt, dt, trap;       /* in  (B, H)            (T, H) with cu_seqlens          */
    ssm_tensor q_bias, k_bias;      /* in  (H, K)                                            */
    ssm_tensor angles;              /* in  (B, H, A)        raw rates of this token          */
    ssm_tensor d;                   /* in  (H)              optional                         */
    ssm_tensor z;                   /* in  (B, H, V)        optional                         */
    ssm_tensor angle_state;         /* in  (slots, H, A)                                     */
    ssm_tensor ssm_state;           /* in  (slots, H, V, K)                                  */
    ssm_tensor k_state;             /* in  (slots, H, K)                                     */
    ssm_tensor v_state;             /* in  (slots, H, V)                                     */
    ssm_tensor state_batch_indices; /* in  (B) or (B, L) i32/i64  optional: read slots       */
    ssm_tensor dst_state_batch_indices; /* in (B) or (B, L) optional: write slots (needs the above) */
    ssm_tensor cu_seqlens;          /* in  (B+1) i32/i64    optional: tokens of each row     */
    ssm_tensor num_accepted_tokens; /* in  (B) i32/i64      optional: column of a 2-D read table */
    ssm_tensor out;                 /* out (B, H, V)        (T, H, V) with cu_seqlens        */
    ssm_tensor final_angle_state;   /* out (slots, H, A)    optional, may alias angle_state  */
    ssm_tensor final_ssm_state;     /* out (slots, H, V, K) optional, may alias ssm_state    */
    ssm_tensor final_k_state;       /* out (slots, H, K)    optional, may alias k_state      */
    ssm_tensor final_v_state;       /* out (slots, H, V)    optional, may alias v_state      */
    ssm_tensor intermediate_angle_state; /* out (T, H, A)    optional: the states after each token */
    ssm_tensor intermediate_ssm_state;   /* out (T, H, V, K) optional                        */
    ssm_tensor intermediate_k_state;     /* out (T, H, K)    optional                        */
    ssm_tensor intermediate_v_state;     /* out (T, H, V)    optional                        */
} ssm_mamba3_siso_step_args;
SSM_API ssm_status ssm_mamba3_siso_step(ssm_context * ctx, const ssm_mamba3_params * params,
                                        const ssm_mamba3_siso_step_args * args);

/* =======================================================================================
 * Mamba-3 MIMO. Math: docs/ops/mamba3_mimo.md and spec mamba3_mimo.md.
 * Dimensions: B, S, H (value heads), G (q/k heads, H % G == 0, g(h) = h / (H/G)), R (rank),
 * N (state size = q/k width, even, N % div == 0, ≤ 128), P (value width, ≤ 128), C (chunk, C·R ≤ 128),
 * div ∈ {2, 4} (rotary_dim_divisor), A = N/div rotated pairs (a, a + N/2) ("split
 * halves", not SISO's interleaved pairs), NS (sequences), nc = ceil(S/C).
 * Per value head h, token t, rank r (λ = σ(trap), γ_t = dt_t·λ_t,
 * σ̄_t = dt_{t+1}·σ(−trap_{t+1}) (0 at a sequence's last token), c_t = γ_t + σ̄_t):
 *   q̄ = q[t,r,g] + q_bias[h,r], k̄ likewise; q̃ = Rot(θ_t) q̄, k̃ = Rot(θ_t) k̄
 *   u[t,r] = v[t,h] ⊙ mimo_v[h,r]
 *   h_t = e^{adt_t} h_{t−1} + (1−λ_t)·dt_t·e^{adt_t}·Σ_r k̃[t−1,r]⊗u[t−1,r] + γ_t·Σ_r k̃[t,r]⊗u[t,r]
 *   y[t,r] = h_tᵀ q̃[t,r] + d_h·u[t,r]
 *   gate: y' = y ⊙ silu(z ⊙ mimo_z[h,r]) (z given); fused norm: y' = y·rstd_P(y) ⊙ w[h] ⊙ silu(..)
 *   out[t,h] = Σ_r y'[t,r] ⊙ mimo_o[h,r] (mimo_o given), else out[t,r,h] = y'[t,r]
 * States (as decode carries them): angle_state (NS,H,A) = θ of the last token,
 * ssm_state (NS,H,P,N) = h of the last token (P-major, as decode uses it), k_state
 * (NS,R,H,N) = k̃ of the last token (not scaled by c), v_state (NS,H,P) = v of the last
 * token. No exponent is clamped; inputs are computed as given.
 * ======================================================================================= */
typedef struct ssm_mamba3_mimo_params {
    size_t  size;                   /* sizeof(ssm_mamba3_mimo_params), set by _init           */
    int64_t chunk_size;             /* C (default 16 = 64/R for R = 4)                        */
    int32_t rotary_dim_divisor;     /* 2 or 4 (default 4)                                     */
    int32_t fuse_pregate_norm;      /* fused pre-gate headwise RMSNorm (needs z, mimo_z,
                                       mimo_o); default 0                                     */
    double  norm_eps;               /* default 1e-5                                           */
} ssm_mamba3_mimo_params;

SSM_API void ssm_mamba3_mimo_params_init(ssm_mamba3_mimo_params * params);

/* Backward phase 1 with the seed NPU operator's interface (spec §3.4): re-runs the chunked
 * forward from the given cumulative angles and the given da_cs / da_cs_rev / segsum
 * (independent inputs: used as given, never recomputed), and returns the gradients that
 * need only per-token forward values. No varlen, no initial states, no fused norm here.
 * ctx's ref_mode picks the rounding model, on the reference AND the CPU backend (the only
 * CPU operator that reads it; all others ignore it on the CPU):
 *   SSM_REF_EXACT (default): reference float64; CPU fp32 throughout (DESIGN §5 bars).
 *   SSM_REF_UPSTREAM_BF16: both round to the activation dtype (v's; bf16 in practice, a
 *   no-op for f32) exactly where upstream's kernel does (§5.1: DT, the head parameters,
 *   q̄/k̄, qk_dot, rotated pairs, k̂, u, Ŝ as an operand and as the states output, the
 *   masked scores, the sequential per-rank sums of the diagonal and of dz, ...) and
 *   accumulate in fp32; the CPU is then within rel_rms 1e-3 of the reference in that mode,
 *   and 3e-3..9e-3 from float64 with bf16 inputs (the cost of the roundings). */
typedef struct ssm_mamba3_mimo_bwd_fwd_args {
    ssm_tensor dout;      /* in  (B,S,H,P) with mimo_o, else (B,S,R,H,P)                      */
    ssm_tensor q, k;      /* in  (B,S,R,G,N)                                                  */
    ssm_tensor v;         /* in  (B,S,H,P)           compute dtype = v's dtype                */
    ssm_tensor q_bias;    /* in  (H,R,N)                                                      */
    ssm_tensor k_bias;    /* in  (H,R,N)                                                      */
    ssm_tensor mimo_v;    /* in  (H,R,P)                                                      */
    ssm_tensor mimo_o;    /* in  (H,R,P)             optional (selects the reduced dout)      */
    ssm_tensor z;         /* in  (B,S,H,P)           optional, with mimo_z                    */
    ssm_tensor mimo_z;    /* in  (H,R,P)             optional, with z                         */
    ssm_tensor angles;    /* in  (B,S,H,A)           cumulative θ                             */
    ssm_tensor da_cs;     /* in  (B,H,S)                                                      */
    ssm_tensor da_cs_rev; /* in  (B,H,S)                                                      */
    ssm_tensor dt;        /* in  (B,H,S)                                                      */
    ssm_tensor trap;      /* in  (B,H,S)             pre-sigmoid                              */
    ssm_tensor d;         /* in  (H)                 optional                                 */
    ssm_tensor segsum;    /* in  (B,H,nc,C,C)                                                 */
    ssm_tensor dmimo_o;   /* out (B,H,R,P)           optional; needs mimo_o                   */
    ssm_tensor states;    /* out (B,H,nc,N,P)        optional; Ŝ entering each chunk          */
    ssm_tensor dz;        /* out (B,S,H,P)           optional; needs z                        */
    ssm_tensor dmimo_z;   /* out (B,H,R,P)           optional; needs z                        */
    ssm_tensor qk_dot;    /* out (B,H,S,R,R)         optional; q̄[t,r]·k̄[t,r']                 */
} ssm_mamba3_mimo_bwd_fwd_args;
SSM_API ssm_status ssm_mamba3_mimo_bwd_fwd(ssm_context * ctx, const ssm_mamba3_mimo_params * params,
                                           const ssm_mamba3_mimo_bwd_fwd_args * args);

/* The MIMO forward a model calls (spec §3.3, §3.7): raw angles and adt in (the angle
 * cumsum and the chunk decays are formed inside, fp32), optional initial states (all four
 * or none), optional final states, varlen (each sequence's final_v_state is its own last
 * v — upstream returns the packed tensor's last token for every sequence).
 * pregate_y (optional, F32 or F64): y[t,r] of docs/ops/mamba3_mimo.md §1.3 per head and rank
 * (before the z gate, the fused norm and the mimo_o sum; d·u included), for
 * ssm_mamba3_mimo_bwd to take back. chunk_states (optional, F32 or F64): the pre-loaded state
 * Ŝ (N×P, §1.5) entering every chunk of params->chunk_size tokens, one row per chunk of each
 * sequence in order (NCS = Σ ceil(len/C)), for the backward likewise. */
typedef struct ssm_mamba3_mimo_args {
    ssm_tensor q, k;                /* in  (B,S,R,G,N)                                        */
    ssm_tensor v;                   /* in  (B,S,H,P)                                          */
    ssm_tensor adt, dt, trap;       /* in  (B,H,S)            trap pre-sigmoid                */
    ssm_tensor q_bias, k_bias;      /* in  (H,R,N)                                            */
    ssm_tensor mimo_v;              /* in  (H,R,P)                                            */
    ssm_tensor mimo_z;              /* in  (H,R,P)            optional, with z                */
    ssm_tensor mimo_o;              /* in  (H,R,P)            optional: reduced output        */
    ssm_tensor angles;              /* in  (B,S,H,A)          raw rates                       */
    ssm_tensor d;                   /* in  (H)                optional                        */
    ssm_tensor z;                   /* in  (B,S,H,P)          optional, with mimo_z           */
    ssm_tensor outproj_norm_weight; /* in  (H,P)              optional, fused norm (1s)       */
    ssm_tensor angle_state;         /* in  (NS,H,A)           optional (all four or none)     */
    ssm_tensor ssm_state;           /* in  (NS,H,P,N)                                         */
    ssm_tensor k_state;             /* in  (NS,R,H,N)                                         */
    ssm_tensor v_state;             /* in  (NS,H,P)                                           */
    ssm_tensor cu_seqlens;          /* in  (NS+1) i32/i64     optional                        */
    /* State pools (as ssm_mamba2_scan's, for the four states). */
    ssm_tensor initial_state_indices; /* in (NS) i32/i64    optional: slot of the four states */
    ssm_tensor final_state_indices;   /* in (NS) i32/i64    optional: slot of the four finals */
    ssm_tensor out;                 /* out (B,S,H,P) with mimo_o, else (B,S,R,H,P)            */
    ssm_tensor final_angle_state;   /* out (NS,H,A)           optional, in [0, 2π)            */
    ssm_tensor final_ssm_state;     /* out (NS,H,P,N)         optional                        */
    ssm_tensor final_k_state;       /* out (NS,R,H,N)         optional                        */
    ssm_tensor final_v_state;       /* out (NS,H,P)           optional                        */
    ssm_tensor pregate_y;           /* out (B,S,H,R,P) F32/F64 optional: y[t,r] per head     */
    ssm_tensor chunk_states;        /* out (NCS,H,N,P) F32/F64 optional: Ŝ entering chunks   */
} ssm_mamba3_mimo_args;
SSM_API ssm_status ssm_mamba3_mimo(ssm_context * ctx, const ssm_mamba3_mimo_params * params,
                                   const ssm_mamba3_mimo_args * args);

/* Every gradient of ssm_mamba3_mimo (spec §3.5-§3.6, §4), recomputing the forward from its
 * inputs. dout required, dfinal_* optional (= 0); every gradient output optional (absent =
 * not written) and allowed only where its input exists. Parameter gradients are summed
 * over batch (and sequences) in a fixed order.
 * pregate_y, chunk_states (optional): what the forward wrote into its tensors of these names for
 * these inputs and params (F32 or F64). A backend may read them instead of recomputing the
 * forward's per-rank pre-gate output and chunk states (the CUDA backend does both; the CPU backend
 * reads chunk_states where params->chunk_size is its own chunk, 64/R tokens); the gradients are
 * the same whether or not they are given (docs/ops/mamba3_mimo.md §5, "Saved forward results"). */
typedef struct ssm_mamba3_mimo_bwd_args {
    ssm_tensor q, k, v, adt, dt, trap, q_bias, k_bias, mimo_v, mimo_z, mimo_o, angles, d, z;
    ssm_tensor outproj_norm_weight, angle_state, ssm_state, k_state, v_state, cu_seqlens;
    ssm_tensor dout;                 /* in  as out                                            */
    ssm_tensor dfinal_angle_state;   /* in  (NS,H,A)        optional                          */
    ssm_tensor dfinal_ssm_state;     /* in  (NS,H,P,N)      optional                          */
    ssm_tensor dfinal_k_state;       /* in  (NS,R,H,N)      optional                          */
    ssm_tensor dfinal_v_state;       /* in  (NS,H,P)        optional                          */
    ssm_tensor dq, dk;               /* out (B,S,R,G,N)                                       */
    ssm_tensor dv, dz;               /* out (B,S,H,P)                                         */
    ssm_tensor dq_bias, dk_bias;     /* out (H,R,N)                                           */
    ssm_tensor dmimo_v, dmimo_z, dmimo_o; /* out (H,R,P)                                      */
    ssm_tensor dd;                   /* out (H)                                               */
    ssm_tensor dadt, ddt, dtrap;     /* out (B,H,S)          dtrap w.r.t. the pre-sigmoid     */
    ssm_tensor dangles;              /* out (B,S,H,A)        w.r.t. the raw angles            */
    ssm_tensor doutproj_norm_weight; /* out (H,P)            fused norm only                  */
    ssm_tensor dangle_state, dssm_state, dk_state, dv_state; /* out, with the input states    */
    ssm_tensor pregate_y;            /* in  (B,S,H,R,P) F32/F64 optional: the forward's       */
    ssm_tensor chunk_states;         /* in  (NCS,H,N,P) F32/F64 optional: the forward's       */
} ssm_mamba3_mimo_bwd_args;
SSM_API ssm_status ssm_mamba3_mimo_bwd(ssm_context * ctx, const ssm_mamba3_mimo_params * params,
                                       const ssm_mamba3_mimo_bwd_args * args);

/* Decode: one token per batch row (spec §3.9) in the prefill conventions (pre-sigmoid
 * trap, adt, raw angles, the same parameter layouts): θ_new = angle_state +
 * π·tanh(angles)·dt (not wrapped, as upstream's decode), then one step of the recurrence.
 * The z gate applies per rank in both output modes, as in the forward (upstream's decode
 * ignores z without mimo_o). State pool, state_batch_indices, padding rows and the
 * in-place rule, dst_state_batch_indices and the slot rules exactly as ssm_mamba3_siso_step.
 * Several tokens per row (speculative decoding) exactly as ssm_mamba3_siso_step: with
 * cu_seqlens (B+1) the token tensors (q … angles, z, out, intermediate_*) hold T = cu[B]
 * tokens in dim 0 and row b runs its tokens cu[b]..cu[b+1]−1 in order, the four states
 * unrounded between them; intermediate_* get the four states after each token; 2-D
 * state_batch_indices / dst_state_batch_indices (B, L) and num_accepted_tokens are vLLM's
 * slot tables (docs/ops/mamba2.md "Decode slots"); with a token table every final_* given
 * is its input's view (in place). */
typedef struct ssm_mamba3_mimo_step_args {
    ssm_tensor q, k;                /* in  (B,R,G,N)          (T,R,G,N) with cu_seqlens       */
    ssm_tensor v, z;                /* in  (B,H,P)            z optional (with mimo_z); T rows with cu_seqlens */
    ssm_tensor adt, dt, trap;       /* in  (B,H)              (T,H) with cu_seqlens           */
    ssm_tensor angles;              /* in  (B,H,A)            raw rates of the token; T rows with cu_seqlens */
    ssm_tensor q_bias, k_bias;      /* in  (H,R,N)                                            */
    ssm_tensor mimo_v, mimo_z, mimo_o; /* in (H,R,P)          mimo_z, mimo_o optional         */
    ssm_tensor d;                   /* in  (H)                optional                        */
    ssm_tensor outproj_norm_weight; /* in  (H,P)              optional, fused norm            */
    ssm_tensor angle_state;         /* in  (slots,H,A)                                        */
    ssm_tensor ssm_state;           /* in  (slots,H,P,N)                                      */
    ssm_tensor k_state;             /* in  (slots,R,H,N)                                      */
    ssm_tensor v_state;             /* in  (slots,H,P)                                        */
    ssm_tensor state_batch_indices; /* in  (B) or (B,L) i32/i64  optional: read slots         */
    ssm_tensor dst_state_batch_indices; /* in (B) or (B,L)    optional: write slots (needs the above) */
    ssm_tensor cu_seqlens;          /* in  (B+1) i32/i64      optional: tokens of each row    */
    ssm_tensor num_accepted_tokens; /* in  (B) i32/i64        optional: column of a 2-D read table */
    ssm_tensor out;                 /* out (B,H,P) with mimo_o, else (B,R,H,P); T rows with cu_seqlens */
    ssm_tensor final_angle_state;   /* out (slots,H,A)        optional, may alias             */
    ssm_tensor final_ssm_state;     /* out (slots,H,P,N)      optional, may alias             */
    ssm_tensor final_k_state;       /* out (slots,R,H,N)      optional, may alias             */
    ssm_tensor final_v_state;       /* out (slots,H,P)        optional, may alias             */
    ssm_tensor intermediate_angle_state; /* out (T,H,A)       optional: the states after each token */
    ssm_tensor intermediate_ssm_state;   /* out (T,H,P,N)     optional                        */
    ssm_tensor intermediate_k_state;     /* out (T,R,H,N)     optional                        */
    ssm_tensor intermediate_v_state;     /* out (T,H,P)       optional                        */
} ssm_mamba3_mimo_step_args;
SSM_API ssm_status ssm_mamba3_mimo_step(ssm_context * ctx, const ssm_mamba3_mimo_params * params,
                                        const ssm_mamba3_mimo_step_args * args);

#ifdef __cplusplus
}
#endif

#endif /* SSMOPS_H */
