/*
 * scan.cuh — what the Mamba-2 scan's kernel files and its host file (mamba2.cu) share: the
 * compute modes, the work plan (chunks and sequences), the kernels' argument records, the
 * shared-memory layouts the host sizes launches and selection rules with, and the launch
 * functions each kernel file provides.
 *
 * The scan runs, per work chunk of kScanQ tokens (the chunks of every batch row, varlen sequence
 * or run of equal seq_idx ids; the chunked algorithm is exact for any cut):
 *   1. chunk states     s_c = xᵀ·(B∘w), w_j = exp(cum_last − cum_j)·dt_j (fp32 accumulators);
 *   2. the state pass   S_{c+1} = exp(cum_last_c)·S_c + s_c along each sequence, in fp32: the
 *                       state entering each chunk, and the final state;
 *   3. outputs          y = exp(cum_i)·C_i·S_in + Σ_{j≤i} (C_i·B_j)·exp(cum_i − cum_j)·dt_j·x_j
 *                       + D·x_i, then the z gate;
 *   4. non-finite fix   the output kernels mark each (chunk, head) where they stored a non-finite
 *                       value; those pairs' outputs are recomputed token by token (nonfinite_fix.cu),
 *                       since the products over the whole chunk multiply the masked-out terms of later
 *                       tokens by 0, and 0 times a non-finite x is NaN in the earlier tokens' outputs.
 * Steps 1 and 2 are one kernel in the chained forms (state_chain.cu). Operands that are fp32
 * products (B∘w or w∘x, the entering states, the masked scores) meet 16-bit tensor cores split
 * into a rounded part and a rounded remainder (two products each), which keeps the results within
 * a few 1e-6 of float64 for exact fp16/bf16 inputs. No decay exponent is clamped.
 */
#ifndef SSMI_CUDA_MAMBA2_SCAN_CUH
#define SSMI_CUDA_MAMBA2_SCAN_CUH

#include <stdint.h>

extern "C" {
#include "../../core/ssmi.h"
}
#include "../common/cuda_common.cuh"
#include "../common/mma.cuh"
#include "../common/wgmma.cuh"

namespace ssmi_m2 {

using namespace ssmi_mma; /* M_F32/M_F16/M_BF16, mma16816, ldsm4, cp_async16, ... */

const int kThreads = 256; /* threads of the block-GEMM kernels, the state passes and chain_dt_kernel */
const int kMaxN = 256;
/* Internal chunk of the scan (tokens): the combined op is exact for any cut, so the chunk_size
 * parameter only shapes mamba2_chunk_state's output; 256 keeps the fp32 state traffic small. */
const int kScanQ = 256;
const int kChainW = kScanQ + 4; /* floats per (chunk, head) of the chain's weights table */

/* The tensor-core kernels (fp16/bf16 x). */
const int kFastThreads = 128;               /* 4 warps: the B-weighted state, the 64-row output */
const int kFT = 64;                         /* tile edge (rows, tokens, P, N)                   */
const int kFLd = kFT + 8;                   /* padded leading dimension of a 64-wide T tile     */
const int kWideRows = 128;                  /* rows of an output tile of the 8-warp kernels     */
const int kWideThreads = 256;               /* 8 warps of 16 rows                               */
const int kWideRowTiles = kScanQ / kWideRows; /* row tiles per work chunk                      */
const int kPassVec = 4;                     /* state elements per thread of the split pass      */
/* 3 blocks of 8 warps per SM for the x-weighted and wgmma state kernels (≤ 80 registers; 62 and
 * 69 KB of shared memory): they wait on copies and barriers, so more resident warps hide more. */
const int kStateMinBlocks = 3;

template <int MODE> struct cfg;
template <> struct cfg<M_F32> {
    typedef float T;
    static const int  TILE = 32;
    static const bool SPLIT = false;
};
template <> struct cfg<M_F16> {
    typedef __half T;
    static const int  TILE = 64;
    static const bool SPLIT = true;
};
template <> struct cfg<M_BF16> {
    typedef __nv_bfloat16 T;
    static const int  TILE = 64;
    static const bool SPLIT = true;
};

__device__ __forceinline__ void to_t(float v, float * o) { *o = v; }
__device__ __forceinline__ void to_t(float v, __half * o) { *o = __float2half_rn(v); }
__device__ __forceinline__ void to_t(float v, __nv_bfloat16 * o) { *o = __float2bfloat16_rn(v); }
__device__ __forceinline__ float from_t(float v) { return v; }
__device__ __forceinline__ float from_t(__half v) { return __half2float(v); }
__device__ __forceinline__ float from_t(__nv_bfloat16 v) { return __bfloat162float(v); }

/* v rounded to T (hi) and, when split, the rounded remainder (lo). */
template <int MODE> __device__ __forceinline__ void store_split(float v, typename cfg<MODE>::T * hi,
                                                                 typename cfg<MODE>::T * lo) {
    to_t(v, hi);
    if (cfg<MODE>::SPLIT) to_t(v - from_t(*hi), lo);
}

/* One work chunk: tokens [t0, t0 + len) of batch row b; chunk index c (the index into the
 * caller's chunked tensors, or the work-chunk index for the scan's workspace); cum index of
 * the chunk's "last" position; first position j0 that counts towards the chunk state (the
 * scan's chunks have ilast = len − 1 and j0 = 0); crow: the scan's chunk_states row that gets
 * the state after the chunk's last token (−1: none). */
struct m2_chunk {
    long long t0;
    int       b, c, len, ilast, j0, crow;
};
/* One sequence of work chunks [first, first + count) with its state rows (−1 = none). */
struct m2_seg {
    int first, count, init, fin;
};

__host__ __device__ inline size_t align128(size_t v) { return (v + 127) & ~(size_t)127; }
__host__ __device__ inline int round16(int v) { return (v + 15) & ~15; }

/* The scan's dt (spec §2.1) from the raw tensors. */
struct m2_dt_raw {
    ssmi_cu_view dt, a, bias; /* dt (b, t, h); a (h); bias (h) */
    int          has_bias, softplus;
    float        lo, hi;
};

/* ---- argument records ----------------------------------------------------------------------- */

/* chunk_state_kernel (block_gemm.cu): the chunk_state operator, and the fp32 scan's step 1. */
struct m2_state_args {
    const m2_chunk * chunks;
    int              H, G, P, N, Np, Q;
    ssmi_cu_view     x, b;     /* x (b, t, h, p); b (b, t, g, n)                          */
    int              raw;      /* 1: dt from m2_dt_raw; 0: dt / cum tensors (b, h, c, i)   */
    m2_dt_raw        r;
    ssmi_cu_view     dt, cum;
    void *           states;   /* (b, c, h, p, n) through ss                               */
    int              st_dtype;
    long long        ss[5];
    float *          lastcum;  /* raw mode: cum_last per (work chunk, head)                */
};

/* The state passes (state_pass.cu) and the chains (state_chain.cu): the sequences and their
 * initial and final states. */
struct m2_pass_args {
    const m2_seg *   segs;
    const float *    lastcum; /* (W, H) */
    float *          states;  /* (W, H, P, N): chunk states in, entering states out */
    int              H, P, N;
    ssmi_cu_view     init;    /* (row, h, p, n) */
    int              has_init;
    void *           fin;
    int              fin_dtype, has_fin;
    long long        fs[4];
    void *           split; /* (W, H, 2, P, N) of T, or NULL: the entering states split into hi/lo planes */
    const m2_chunk * chunks; /* the work chunks (their crow), read where cst is given */
    void *           cst;    /* chunk_states (rows, H, P, N) through cs, or NULL (state_pass.cu only) */
    int              cst_dtype;
    long long        cs[4];
};

/* output_ffma_kernel (block_gemm.cu): the fp32 scan's outputs. */
struct m2_out_args {
    const m2_chunk * chunks;
    int              H, G, P, N, Np, Q, n_ptiles;
    m2_dt_raw        r;
    ssmi_cu_view     x, b, c, d, z;
    int              has_d, d_2d, has_z;
    const float *    states; /* (W, H, P, N) entering states */
    int *            nonfinite; /* (W, H): set to 1 where a non-finite output is stored (zeroed before) */
    void *           out;
    int              out_dtype;
    long long        os[4];
};

/* The tensor-core kernels of the fp16/bf16 scan. */
struct m2_fast_args {
    const m2_chunk * chunks;
    int              H, G, P, N, Np, n_ptiles, n_ntiles, n_itiles;
    m2_dt_raw        r;
    ssmi_cu_view     x, b, c, d, z;
    int              vx, vb, vc, vz, vout; /* 16-byte paths (vz, vout: pairs of z's / out's dtype) */
    int              vz16;                 /* z rows in 16-byte pieces of T (z staged on chip)      */
    const void *     split;                /* entering states split (W, H, 2, P, N) of T, or NULL  */
    int              has_d, d_2d, has_z;
    float *          states;  /* (W, H, P, N) fp32: chunk states (step 1), entering states (step 3) */
    float *          lastcum; /* (W, H) */
    float *          dtc;     /* (W, H, 2, kScanQ): processed dt and its cumsum, from step 1 */
    float *          cw;      /* (W, H, kChainW): the chain's token weights and cum_last (chain_dt_kernel) */
    int *            nonfinite; /* (W, H): set to 1 where a non-finite output is stored (zeroed before) */
    void *           out;
    int              out_dtype;
    long long        os[4];
    /* The state kernels (state_mma.cu, state_wgmma.cu) as the mamba2_chunk_state operator: */
    int              plan_q, plan_nc; /* chunks NULL: work chunk w is the caller's chunk w % plan_nc of row */
    long long        plan_s;          /* w / plan_nc, plan_q tokens of plan_s (no seq_idx: j0 = 0)         */
    int              given_dt;       /* 1: dt and cumsum read from dt_in / cum_in (b, h, c, i), not from r */
    ssmi_cu_view     dt_in, cum_in;
    void *           st_out;         /* non-NULL: the states (b, c, h, p, n) through ss in st_dtype, not states */
    int              st_dtype;
    long long        ss[5];
};

/* nonfinite_fix_kernel (nonfinite_fix.cu): the outputs of the (chunk, head) pairs marked in
 * nonfinite, recomputed token by token from the chunk's entering state. */
struct m2_fix_args {
    const m2_chunk * chunks;
    const int *      nonfinite; /* (W, H) */
    int              H, G, P, N;
    m2_dt_raw        r;
    ssmi_cu_view     x, b, c, d, z;
    int              has_d, d_2d, has_z;
    const float *    states; /* (W, H, P, N) fp32 entering states, where split is NULL           */
    const void *     split;  /* (W, H, 2, P, N) hi/lo planes of the compute type, or NULL          */
    void *           out;
    int              out_dtype;
    long long        os[4];
};

/* The output kernels' mark for step 4: (work chunk, head) wh = w·H + h holds a non-finite output.
 * Called at the store of such a value, with wh from the block index and the arguments (no flag or
 * chunk index is kept alive through the epilogues, whose registers are tight); an integer OR, the
 * same bits whatever the order. */
__device__ __forceinline__ void mark_nonfinite(int * nonfinite, long long wh) {
    if (nonfinite != nullptr) atomicOr(nonfinite + wh, 1);
}

/* ---- shared-memory layouts the host needs --------------------------------------------------- */

/* The 128-row mma.sync output kernel (output_mma.cu): the C rows of the tile; B/x buffer 0; a
 * region that first holds the entering state (hi, lo) and then B/x buffer 1. */
template <int MODE> struct wide_out_smem {
    size_t cs, b0, x0, ss_hi, ss_lo, b1, x1, total;
    __host__ __device__ wide_out_smem(int Np) {
        typedef typename cfg<MODE>::T T;
        const size_t tn = align128(sizeof(T) * kFT * (Np + 8)), tc = align128(sizeof(T) * kWideRows * (Np + 8));
        const size_t tt = align128(sizeof(T) * kFT * kFLd);
        cs = 0;
        b0 = tc;
        x0 = b0 + tn;
        ss_hi = x0 + tt;
        ss_lo = ss_hi + tn;
        b1 = ss_hi;
        x1 = b1 + tn;
        const size_t e1 = ss_lo + tn, e2 = x1 + tt;
        total = e1 > e2 ? e1 : e2;
    }
};
/* Its static shared memory: dt, cumsum, D of the block's columns. */
const size_t kWideOutStatic = sizeof(float) * (2 * kScanQ + kFT);

#if SSMI_CUDA_WGMMA
/* The wgmma output kernel (output_wgmma.cu): byte offsets from the 1024-aligned base (total:
 * + room to align). C rows (two 64-row blocks), B buffers 0 and 1, a region that holds the
 * entering-state planes in the prologue and x buffer 1 afterwards, and x buffer 0 (its own, so
 * that token tile 0's x loads with the prologue's copies). */
struct wg_out_smem {
    int cs, b0, b1, r, ss_hi, ss_lo, x0, x1, total;
    __host__ __device__ wg_out_smem(int katoms) {
        const int at = ssmi_wg::kAtomBytes, tn = katoms * at; /* a 64-row K-major tile; an x tile is one atom */
        cs = 0;
        b0 = 2 * tn; /* 128 C rows: two 64-row blocks */
        b1 = b0 + tn;
        r = b1 + tn; /* the state planes (prologue), then x buffer 1 (at ≤ 2·tn) */
        ss_hi = r;
        ss_lo = r + tn;
        x1 = r;
        x0 = r + 2 * tn;
        total = x0 + at + 1024; /* + room to align the dynamic base */
    }
};
/* Its static shared memory: dt, cumsum, D, the column weights of both warpgroups, the row factors. */
const size_t kWgOutStatic = sizeof(float) * (4 * kScanQ + kFT + kWideRows);

/* The wgmma state kernel (state_wgmma.cu): (w∘x)ᵀ hi and lo (one K-major atom each), B tiles
 * (64 tokens × 64·katoms n, MN-major), raw x tiles (64 tokens × 64 p); + room to align. */
struct wg_state_smem {
    int ah, al, b0, b1, x0, x1, total;
    __host__ __device__ wg_state_smem(int katoms) {
        const int at = ssmi_wg::kAtomBytes;
        ah = 0;
        al = at;
        b0 = 2 * at;
        b1 = b0 + katoms * at;
        x0 = b1 + katoms * at;
        x1 = x0 + at;
        total = x1 + at + 1024;
    }
};
/* Its static shared memory: dt, cumsum, block-scan totals and token weights (rounded up). */
const size_t kWgStateStatic = sizeof(float) * 4 * kScanQ;

/* The chains (state_chain.cu): stage s holds x at x0 + s·8 KB and B at b0 + s·8 KB. */
const int kChainStages = 5;  /* one warpgroup: 5 x 16 KB, 2 blocks per SM */
const int kChain2Stages = 6; /* two warpgroups: 3 slots of a tile pair */
template <int STAGES> struct chain_smem_of {
    int x0, b0, total;
    __host__ __device__ chain_smem_of() {
        x0 = 0;
        b0 = STAGES * ssmi_wg::kAtomBytes;
        total = b0 + STAGES * ssmi_wg::kAtomBytes + 1024;
    }
};
typedef chain_smem_of<kChainStages>  chain_smem;
typedef chain_smem_of<kChain2Stages> chain2_smem;
/* Their static shared memory: two chunks' weights. */
const size_t kChainStatic = sizeof(float) * 2 * kChainW;
#endif

/* ---- the launches each kernel file provides --------------------------------------------------
 * Each checks its grid against the device limits (UNSUPPORTED beyond) and returns the launch's
 * status; W is the number of work chunks. */

/* block_gemm.cu: chunk states by block GEMM (WMMA for 16-bit modes, FFMA for fp32), and the fp32
 * scan's outputs. */
ssm_status launch_chunk_state(ssm_context * ctx, const char * op, int mode, const m2_state_args & A, long long W);
ssm_status launch_output_ffma(ssm_context * ctx, const char * op, const m2_out_args & A, long long W);

/* state_pass.cu: the pass over nseg sequences of H·P·N state elements; the entering states as
 * fp32 (A.split NULL) or as split planes of mode's type. */
ssm_status launch_state_pass(ssm_context * ctx, const char * op, int mode, const m2_pass_args & A, long long nseg);

/* state_mma.cu: chunk states by mma.sync, weighting x (B of x's dtype) or B (any other B). */
ssm_status launch_state_mma(ssm_context * ctx, const char * op, int mode, const m2_fast_args & A, long long W);

/* output_mma.cu: outputs by mma.sync on 128-row tiles (8 warps) or on 64-row tiles (4 warps, less
 * shared memory). */
ssm_status launch_output_mma(ssm_context * ctx, const char * op, int mode, const m2_fast_args & A, long long W);
ssm_status launch_output_mma64(ssm_context * ctx, const char * op, int mode, const m2_fast_args & A, long long W);

/* nonfinite_fix.cu: after the outputs; mode: the compute type of A.split (any mode where split is
 * NULL). A small grid walks the (work chunk, head) pairs and recomputes the marked ones. */
ssm_status launch_nonfinite_fix(ssm_context * ctx, const char * op, int mode, const m2_fix_args & A, long long W);

#if SSMI_CUDA_WGMMA
/* state_wgmma.cu / output_wgmma.cu (sm_90a): N = 64 or 128, x, B (and for the outputs C, out, z)
 * in the layouts the host checked. */
ssm_status launch_state_wgmma(ssm_context * ctx, const char * op, int mode, const m2_fast_args & A, long long W);
ssm_status launch_output_wgmma(ssm_context * ctx, const char * op, int mode, const m2_fast_args & A, long long W);

/* state_chain.cu (sm_90a): chain_dt_kernel, then the chain of one (two = 0) or two (two = 1)
 * warpgroups per (sequence, head, P tile, 64 N columns), in place of the state kernel and the
 * split pass. */
ssm_status launch_state_chain(ssm_context * ctx, const char * op, int mode, const m2_fast_args & A,
                              const m2_pass_args & S, long long W, long long nseg, int two);

/* One launch of a kernel of the output and state files: `blocks` blocks (checked against the grid
 * limit) of `threads` threads with smem bytes of dynamic shared memory (opted in), on the context's
 * stream. */
inline ssm_status launch_blocks(ssm_context * ctx, const char * op, void (*kernel)(const m2_fast_args),
                                const m2_fast_args & A, long long blocks, int threads, int smem, const char * what) {
    SSM_RETURN_IF(blocks > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: %lld blocks exceed the CUDA backend's grid limit", op, blocks);
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                         cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)));
    kernel<<<(unsigned)blocks, threads, (size_t)smem, ssmi_cuda_stream(ctx)>>>(A);
    SSMI_CU_CHECK_LAUNCH(ctx, op, what);
    return SSM_STATUS_OK;
}
#endif

} /* namespace ssmi_m2 */

#endif /* SSMI_CUDA_MAMBA2_SCAN_CUH */
