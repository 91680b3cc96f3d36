/*
 * siso.cuh — what the CUDA Mamba-3 SISO files share: the constants of the chunked forward, the
 * chunk plan and the kernel arguments, scalar helpers, the chunk scalars and the workspace slot
 * that chunk_prep_kernel fills, the shared-memory layouts that the selection tables check against
 * the device's limits, and the launchers each kernel file exports to the host file (siso.cu).
 *
 * The files, by technique:
 *   prep.cu          the angle cumsum of the combined op (angle sums, angle scan) and
 *                    chunk_prep_kernel (the chunk scalars and θ once per (chunk, head));
 *   portable.cu      the portable state and output kernels (block products through shared
 *                    memory: WMMA for fp16/bf16, FFMA for fp32), any dtype, K ≤ 256;
 *   state_mma.cu     the chunk state contributions by mma.sync (fp16/bf16, K ≤ 128);
 *   state_chain.cu   the chained state: contributions and pass in one walk per sequence;
 *   state_pass.cu    the state pass over the chunks, and the final k / v of empty sequences;
 *   output_mma.cu    the outputs by mma.sync (8 warps with the shared-memory epilogue, or 4
 *                    warps with an epilogue for any output layout);
 *   output_wgmma.cu  the outputs by Hopper wgmma (sm_90a);
 *   step.cu          the decode step kernels;
 *   siso.cu          the host side: plan, workspace, the selection tables, the entry points.
 * Device helpers of the tensor-core kernels are in tiles.cuh.
 */
#ifndef SSMI_CUDA_SISO_CUH
#define SSMI_CUDA_SISO_CUH

#include <stdint.h>
#include <string.h>

extern "C" {
#include "../../core/ssmi.h"
}
#include "../common/cuda_common.cuh"
#include "../common/device_math.cuh"
#include "../common/mma.cuh"
#include "../common/wgmma.cuh"

namespace ssmi_siso {

using namespace ssmi_mma; /* M_F32/M_F16/M_BF16, mma16816, ldsm4, cp_async16, ... */

const int kThreads = 256; /* the portable kernels, the pass: 8 warps */
const int kC = 64;        /* internal chunk (tokens)  */
const int kTV = 64;       /* V tile (state rows)      */
const int kMaxK = 256;

const float kPi = 3.14159265358979323846f;
const float kTwoPiHi = 6.28318548202514648438f;
const float kTwoPiLo = -1.74845553146951715e-07f;
const float kInvTwoPi = 0.159154943091895335769f;

const int kFastThreads = 128;     /* the 4-warp tensor-core output kernel                        */
const int kFastMaxK = 128;        /* the tensor-core kernels: K ≤ 128                             */
const int kFLd = kTV + 8;         /* padded leading dimension of a v (or z) tile                  */
const int kPartMax = 128;         /* θ's group sums (theta_walk): NG·A ≤ kPartMax floats          */
const int kPrepThreads = 256;     /* the block size whose θ grouping chunk_prep_kernel reproduces */
const int kStateThreads = 256;    /* the mma.sync state kernel and the chained state: 8 warps */
const int kOutMmaThreads = 256;   /* the 8-warp mma.sync output kernel                         */
const int kOutWgmmaThreads = 256; /* the wgmma output kernel: two warpgroups                   */
const int kChainThreads = kStateThreads;
const int kChainStages = 3; /* the chain's operand stages: chunk c + 2 copies while chunk c computes */
/* The chains of 32 K columns (twice the chains of 64, each with half the K̂ work but the same
 * copies) are faster until the 64-column ones alone give this many per SM (the forward's chain
 * and the backward's walks). */
const double kChain64PerSm = 1.5;
/* The y exchange of the 8-warp output kernels (warp pairs sharing 16 rows): 8 warps × 4 tiles ×
 * 32 lanes × one float4. */
const int kExchangeBytes = (kOutMmaThreads / 32) * 4 * 32 * 16;

template <int MODE>
struct cfg;
template <>
struct cfg<M_F32> {
    typedef float     T;
    static const bool SPLIT = false;
    static const int  PAD = 4; /* leading-dimension padding in elements (16 bytes) */
};
template <>
struct cfg<M_F16> {
    typedef __half    T;
    static const bool SPLIT = true;
    static const int  PAD = 8;
};
template <>
struct cfg<M_BF16> {
    typedef __nv_bfloat16 T;
    static const bool     SPLIT = true;
    static const int      PAD = 8;
};

__device__ __forceinline__ void  to_t(float v, float * o) { *o = v; }
__device__ __forceinline__ void  to_t(float v, __half * o) { *o = __float2half_rn(v); }
__device__ __forceinline__ void  to_t(float v, __nv_bfloat16 * o) { *o = __float2bfloat16_rn(v); }
__device__ __forceinline__ void  to_t(float v, double * o) { *o = (double)v; }
__device__ __forceinline__ float from_t(float v) { return v; }
__device__ __forceinline__ float from_t(__half v) { return __half2float(v); }
__device__ __forceinline__ float from_t(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float from_t(double v) { return (float)v; }

/* hi[i] = v rounded to T and, in the 16-bit modes, lo[i] = the rounded remainder (lo is
 * not touched, and may be NULL, in fp32 mode). */
template <int MODE>
__device__ __forceinline__ void store_split(float v, typename cfg<MODE>::T * hi, typename cfg<MODE>::T * lo, int i) {
    to_t(v, &hi[i]);
    if (cfg<MODE>::SPLIT) to_t(v - from_t(hi[i]), &lo[i]);
}

/* 8 values of type T (16 bytes) as fp32, exactly. */
template <int MODE>
__device__ __forceinline__ void unpack8(float (&x)[8], const uint4 u) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float2 f = t2<MODE>::unpack(w[e]);
        x[2 * e] = f.x, x[2 * e + 1] = f.y;
    }
}

__host__ __device__ inline size_t align128(size_t v) { return (v + 127) & ~(size_t)127; }
__host__ __device__ inline int    round16(int v) { return (v + 15) & ~15; }

/* wrap(x) = x − 2π·floor(x/2π) with 2π in two parts; a result that rounds below 0 moves up
 * by 2π (the CPU backend's arithmetic). */
__device__ __forceinline__ float wrap2pi(float x) {
    const float turns = floorf(x * kInvTwoPi);
    float       r = fmaf(-turns, kTwoPiHi, x);
    r = fmaf(-turns, kTwoPiLo, r);
    return r < 0.0f ? r + kTwoPiHi : r;
}

/* sin and cos of a wrapped angle x ∈ [0, 2π] (the combined op's θ, the backward's θ) by the
 * hardware approximations, after moving x to [−π, π] where their absolute error is ~1e-6. */
__device__ __forceinline__ void sincos_wrapped_fast(float x, float * sn, float * cs) {
    __sincosf(x >= kPi ? x - kTwoPiHi : x, sn, cs);
}

/* The gated output gradient dy = dout ⊙ silu(z) of one element (the 16-bit backward's). */
__device__ __forceinline__ float gated_dy(float dO, float z) { return dO * z * ssmi_math::sigmoid_fast(z); }

/* ---- the chunk plan and the kernel arguments ---------------------------------------------------- */

/* One chunk: tokens [t0, t0 + len) of batch row `row`, sequence `seq`. */
struct m3_chunk {
    long long t0;
    int       row, len, seq;
    int       has_next; /* token t0 + len belongs to the same sequence (σ of the last token) */
    int       last;     /* last chunk of its sequence                                       */
    int       first;    /* first chunk of its sequence                                      */
};
/* One sequence: its chunks [first, first + count), first token t0 of row `row`, len tokens. */
struct m3_seg {
    long long t0;
    int       row, len, first, count;
    int       srow; /* the forward's chunk_states row of the sequence's first chunk */
};

struct m3_out {
    void *    p;
    int       dtype, present;
    long long s[4];
};

/* An output tensor as the kernels write it (absent: present = 0). */
static inline m3_out out_of(const ssm_tensor * t) {
    m3_out o;
    memset(&o, 0, sizeof o);
    o.present = ssmi_present(t);
    if (!o.present) return o;
    o.p = t->data;
    o.dtype = t->dtype;
    for (int i = 0; i < t->ndim && i < 4; ++i) o.s[i] = t->strides[i];
    return o;
}

/* Entry i of a host index tensor (I32 or I64, 1-D). */
static inline int64_t idx_at(const ssm_tensor * t, int64_t i) {
    const int64_t off = i * t->strides[0];
    return t->dtype == SSM_DTYPE_I64 ? ((const int64_t *)t->data)[off] : (int64_t)((const int32_t *)t->data)[off];
}

struct m3_fwd_args {
    const m3_chunk * chunks;
    const m3_seg *   segs;
    int              H, G, K, Kp, V, A, NS;
    int              fused, has_d, has_z, has_states;
    int              vq, vk, vv, vz, vout; /* 16-byte q/k/v rows of v's dtype, z/out in pairs     */
    int              vang, vz16, vo16;     /* 16-byte rows of v's dtype: angles, z, out          */
    int              fang;                 /* fp32 angles in 16-byte rows, A % 8 == 0 (angle sums)  */
    int              sct;                  /* the output kernels' sin/cos table (fast_smem::sn) */
    ssmi_cu_view     q, k, v, adt, dt, trap, qb, kb, ang, d, z; /* inputs                        */
    ssmi_cu_view     ssm_in, k_in, v_in, ang_in;                /* initial states                */
    float *          states;  /* (W, H, V, K): chunk contributions, then entering states          */
    float *          lastcum; /* (W, H) c_last of each chunk                                     */
    float *          theta0;  /* (W, H, A) combined op: chunk angle sums, then θ entering        */
    float *          prep;    /* (W, H, prep_floats(A)) chunk_prep_kernel's slots, or NULL      */
    /* The backward's walks: θ of a token = wrap(θ entering its chunk + its chunk-local sum), from
     * thl (chunk-local sums, A floats per (token, head), thl_row floats per batch row) and theta0 (θ
     * entering, (W, H, A)); the slots then hold the scalars alone (kPrepScal floats). NULL: the slots
     * hold θ. */
    const float *    thl;
    long long        thl_row;
    int *            nonfinite; /* (W, H): set to 1 where an output kernel stores a non-finite value */
    m3_out           out, fin_ssm, fin_k, fin_v, fin_ang;
    m3_out           ypre; /* pregate_y (B, S, H, V) f32/f64: y before the gate, or absent     */
    int              vy;   /* pregate_y f32 in pairs (ssmi_cu_vec_pairs): 8-byte stores        */
    m3_out           chst; /* chunk_states (NCS, H, V, K) f32/f64 from states, or absent         */
    int              chm;  /* chunk_states rows every chm chunks (params->chunk_size / kC)       */
};

/* The output kernels' mark (grid: blockIdx.x = chunk, blockIdx.y = head): the (chunk, head) holds a
 * non-finite output, so launch_nonfinite_fix recomputes it. Called at the store of such a value (no
 * flag is carried through the epilogues' loops, whose registers are tight); an integer OR, the same
 * bits whatever the order. */
__device__ __forceinline__ void mark_nonfinite(const m3_fwd_args & P) {
    if (P.nonfinite != nullptr) atomicOr(P.nonfinite + (long long)blockIdx.x * P.H + blockIdx.y, 1);
}

__device__ __forceinline__ float ld2(const ssmi_cu_view & t, long long i0, long long i1) {
    return ssmi_cu_ld(t.p, t.dtype, i0 * t.s[0] + i1 * t.s[1]);
}
__device__ __forceinline__ float ld3(const ssmi_cu_view & t, long long i0, long long i1, long long i2) {
    return ssmi_cu_ld(t.p, t.dtype, i0 * t.s[0] + i1 * t.s[1] + i2 * t.s[2]);
}
__device__ __forceinline__ float ld4(const ssmi_cu_view & t, long long i0, long long i1, long long i2, long long i3) {
    return ssmi_cu_ld(t.p, t.dtype, i0 * t.s[0] + i1 * t.s[1] + i2 * t.s[2] + i3 * t.s[3]);
}
__device__ __forceinline__ void st3(const m3_out & o, long long i0, long long i1, long long i2, float v) {
    ssmi_cu_st(o.p, o.dtype, i0 * o.s[0] + i1 * o.s[1] + i2 * o.s[2], v);
}
__device__ __forceinline__ void st4(const m3_out & o, long long i0, long long i1, long long i2, long long i3, float v) {
    ssmi_cu_st(o.p, o.dtype, i0 * o.s[0] + i1 * o.s[1] + i2 * o.s[2] + i3 * o.s[3], v);
}

/* y (before the gate) of outputs p and, with two, p + 1 of token t into pregate_y, where given. */
__device__ __forceinline__ void store_ypre(const m3_fwd_args & P, long long row, long long t, int h, int p, float y0,
                                           float y1, bool two) {
    if (!P.ypre.present) return;
    if (P.vy && two && p % 2 == 0) {
        const m3_out & o = P.ypre;
        *reinterpret_cast<float2 *>((float *)o.p + (row * o.s[0] + t * o.s[1] + h * o.s[2] + p)) = make_float2(y0, y1);
        return;
    }
    st4(P.ypre, row, t, h, p, y0);
    if (two) st4(P.ypre, row, t, h, p + 1, y1);
}

/* ---- the chunk scalars (shared by the state and output kernels) -------------------------------- */

/* Scalars of a chunk in shared memory: dtv/lam [kC+1] (entry L = the next token's, or 0 at
 * the sequence end), cm = inclusive cumsum of adt, gam = dt·λ, sig = γ + γ'. */
struct m3_scal {
    float *dtv, *lam, *cm, *gam, *sig;
};

__device__ inline void chunk_scalars(const m3_fwd_args & P, const m3_chunk & ch, int h, const m3_scal & s) {
    const int L = ch.len, nload = ch.has_next ? L + 1 : L;
    for (int i = threadIdx.x; i <= L; i += blockDim.x) {
        if (i < nload) {
            s.dtv[i] = ld3(P.dt, ch.row, h, ch.t0 + i);
            s.lam[i] = ssmi_math::sigmoid(ld3(P.trap, ch.row, h, ch.t0 + i));
        } else {
            s.dtv[i] = 0.0f;
            s.lam[i] = 0.0f;
        }
    }
    if (threadIdx.x < 32) { /* warp 0: inclusive scan of adt over L ≤ 64 tokens, fixed order */
        const int lane = threadIdx.x;
        float     a = lane < L ? ld3(P.adt, ch.row, h, ch.t0 + lane) : 0.0f;
        float     b = lane + 32 < L ? ld3(P.adt, ch.row, h, ch.t0 + lane + 32) : 0.0f;
#pragma unroll
        for (int off = 1; off < 32; off *= 2) {
            const float ya = __shfl_up_sync(0xffffffffu, a, off);
            const float yb = __shfl_up_sync(0xffffffffu, b, off);
            if (lane >= off) a += ya, b += yb;
        }
        b += __shfl_sync(0xffffffffu, a, 31);
        s.cm[lane] = a;
        s.cm[lane + 32] = b;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < L; i += blockDim.x) {
        const float g = s.dtv[i] * s.lam[i];
        s.gam[i] = g;
        s.sig[i] = g + s.dtv[i + 1] * (1.0f - s.lam[i + 1]);
    }
    __syncthreads();
}

__device__ inline m3_scal carve_scal(float * base) {
    m3_scal s;
    s.dtv = base;
    s.lam = base + (kC + 1);
    s.cm = base + 2 * (kC + 1);
    s.gam = base + 3 * (kC + 1);
    s.sig = base + 4 * (kC + 1);
    return s;
}

/* chunk_prep_kernel computes a chunk's scalars (chunk_scalars: dtv, lam, cm, gam, sig, kC + 1 each)
 * and θ (kC × A) once per (chunk, head) into P.prep, and the kernels after it copy them into their
 * shared-memory regions instead of computing them again. The slot of (w, h): kPrepScal floats of
 * scalars (the five arrays of kC + 1 floats but the last, unused sig[kC]: the copy ends exactly
 * where the kernels' own arrays (wj, ecm) begin), then kC·A of θ (rows ≥ the chunk length zero).
 * Every slot and every piece is 16-byte aligned. */
const int kPrepScal = 5 * (kC + 1) - 1; /* sig[kC] is never written or read: 81 whole 16-byte pieces */
static_assert(kPrepScal % 4 == 0, "the scalars are copied in 16-byte pieces");
__host__ __device__ __forceinline__ long long prep_floats(int A) { return kPrepScal + (long long)kC * A; }

/* The cp.async copy of slot (w, h) into scal (the carve_scal base) and th, NT threads. */
template <int NT>
__device__ __forceinline__ void cp_prep(const m3_fwd_args & P, int w, int h, float * scal, float * th) {
    const float * src = P.prep + ((long long)w * P.H + h) * prep_floats(P.A);
    const int     ns = kPrepScal / 4, n = ns + kC * P.A / 4;
    for (int o = threadIdx.x; o < n; o += NT) {
        if (o < ns)
            cp_async16(scal + 4 * o, src + 4 * o);
        else
            cp_async16(th + 4 * (o - ns), src + kPrepScal + 4 * (o - ns));
    }
}

/* ---- shared-memory layouts (the host checks them against the device's opt-in limit) ------------- */

/* The tensor-core kernels of mma.sync: scalars (8 rows of kC + 1), θ's group sums, θ (kC × A), the
 * sin/cos table (sct: sin θ, th then holds cos θ), two split [kC][Kp + 8] tiles (state kernel: w∘K̂;
 * output kernels: Q̂ and K̂, then the entering state over K̂), the v tile; the output kernels add a z
 * tile (z, then the output). exchange: the 8-warp output kernel's partial-y exchange lies over θ
 * and the sin/cos table (dead after the q/k prep), which then span at least kExchangeBytes. */
template <int MODE>
struct fast_smem {
    size_t              scal, part, th, sn, t0h, t0l, t1h, t1l, vs, zs, total;
    __host__ __device__ fast_smem(int Kp, int A, bool output, bool exchange, bool sct = false) {
        typedef typename cfg<MODE>::T T;
        const size_t                  tile = align128(sizeof(T) * kC * (Kp + 8));
        size_t                        o = 0;
        scal = o;
        o += align128(sizeof(float) * 8 * (kC + 1));
        part = o; /* theta_walk's group sums */
        o += align128(sizeof(float) * kPartMax);
        th = o;
        o += align128(sizeof(float) * kC * (A > 0 ? A : 1));
        sn = o; /* the sin/cos table: sin θ (th then holds cos θ) */
        o += sct ? align128(sizeof(float) * kC * (A > 0 ? A : 1)) : 0;
        if (output && exchange && o - th < (size_t)kExchangeBytes) o = th + kExchangeBytes;
        t0h = o;
        o += tile;
        t0l = o;
        o += tile;
        t1h = o;
        o += output ? tile : 0;
        t1l = o;
        o += output ? tile : 0;
        vs = o;
        o += align128(sizeof(T) * kC * kFLd);
        zs = o;
        o += output ? align128(sizeof(T) * kC * kFLd) : 0;
        total = o;
    }
};

/* The wgmma output kernel, byte offsets from the 1024-aligned base: the wgmma tiles first (every one
 * a whole number of 8 KB atoms, so 1024-aligned), then the regions of the mma.sync kernels. */
struct wgmma_smem {
    int                 qh, ql, kh, kl, vs, scal, part, th, sn, zs, total; /* total: + 1024 to align the base */
    __host__ __device__ wgmma_smem(int katoms, int A, bool sct) {
        const int tile = katoms * ssmi_wg::kAtomBytes, th_bytes = (int)align128(sizeof(float) * kC * (A > 0 ? A : 1));
        int       o = 0;
        qh = o, o += tile;
        ql = o, o += tile;
        kh = o, o += tile; /* K̂ hi, then the entering state hi */
        kl = o, o += tile; /* K̂ lo, then the entering state lo */
        vs = o, o += ssmi_wg::kAtomBytes;
        scal = o, o += (int)align128(sizeof(float) * 8 * (kC + 1));
        part = o, o += (int)align128(sizeof(float) * kPartMax);
        th = o, o += th_bytes;
        sn = o, o += sct ? th_bytes : 0;
        if (o - th < kExchangeBytes) o = th + kExchangeBytes; /* the y exchange lies over θ and sin */
        zs = o, o += (int)align128(2 * kC * kFLd);            /* z, then the output (16-bit) */
        total = o + 1024;
    }
};

/* The chained state kernel: kChainStages stages of {chunk_prep_kernel's slot as it lies in P.prep
 * (the scalars, carve_scal's 5 rows less the unused sig[kC], then θ (kC × A): one run of 16-byte
 * pieces), raw k columns (kC × (KS + 8)), v tile (kC × kFLd)}, then the split K̂ slice (two kC × (KS +
 * 8) tiles); KS: the block's K columns (rows of KS + 8 elements: 16-byte aligned, no ldmatrix bank
 * conflicts). */
struct chain_smem {
    int                 th, tb, kraw, vs, zs, stage, kh, kl, total; /* the scalars at 0 of a stage */
    /* zt (the backward's reverse walk with z): a z tile in every stage after the v tile (they hold
     * dy's rounded and remainder planes); stages: the ring's length; thl (m3_fwd_args::thl
     * given): θ entering the chunk (A floats at tb) after θ's chunk-local sums */
    __host__ __device__ chain_smem(int A, int KS, bool zt = false, int stages = kChainStages, bool thl = false) {
        const int LK = KS + 8;
        th = (int)sizeof(float) * kPrepScal; /* 16-byte aligned (kPrepScal % 4 == 0) */
        tb = (int)sizeof(float) * (int)prep_floats(A);
        int o = (int)align128(sizeof(float) * (size_t)(prep_floats(A) + (thl ? A : 0)));
        kraw = o;
        o += (int)align128(2 * kC * LK);
        vs = o;
        o += (int)align128(2 * kC * kFLd);
        zs = o;
        o += zt ? (int)align128(2 * kC * kFLd) : 0;
        stage = o;
        kh = stages * stage;
        kl = kh + (int)align128(2 * kC * LK);
        total = kl + (int)align128(2 * kC * LK);
    }
};

/* ---- the launchers of the kernel files (W chunks; mode: M_F32 / M_F16 / M_BF16 of v) ------------ */

/* prep.cu: the angle sums and the angle scan of the combined op (fused, A > 0); chunk_prep_kernel. */
ssm_status launch_angles(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode);
ssm_status launch_chunk_prep(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode);
/* portable.cu: state contributions, the pass, outputs. */
ssm_status launch_portable(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode);
/* portable.cu, after any entry's outputs: the outputs of the (chunk, head) pairs marked in
 * P.nonfinite, recomputed with the causal sum Σ_{j≤i} P_ij·v_j formed term by term (the products
 * over the whole chunk multiply the masked-out terms by 0, and 0 times a non-finite v of a later
 * token is NaN in an earlier token's output). Unmarked blocks exit at once. */
ssm_status launch_nonfinite_fix(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode);
/* state_mma.cu: the state contributions by mma.sync; prep: the scalars and θ from P.prep. */
ssm_status launch_state_mma(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode,
                            bool prep);
/* state_chain.cu: the chained state over KS = 32 or 64 K columns per block (entering and final
 * states; no pass). */
ssm_status launch_state_chain(ssm_context * ctx, const char * op, const m3_fwd_args & P, int mode, int KS);
/* state_chain.cu, for the backward (bwd_state_chain.cu): both state walks of the backward in one
 * launch of the chain's template, a block per (sequence, head, V tile, KS columns, walk): F the
 * forward walk (entering states into F.states), R the reverse walk (R.k = q, R.kb = q_bias, R.v =
 * dout, R.z = z, R.ssm_in = dfinal_ssm_state, R.states = the carries, R.fin_ssm = dH_in); both
 * read the scalar slots in F.prep (= R.prep) and θ from F.thl and F.theta0, two stages; F.states == NULL: the reverse walk alone. The
 * shared memory it needs: */
ssm_status launch_bwd_walks(ssm_context * ctx, const char * op, const m3_fwd_args & F, const m3_fwd_args & R, int mode,
                            int KS);
inline int bwd_walks_smem(int A, int KS, bool z) {
    const int f = chain_smem(A, KS, false, 2, true).total, r = chain_smem(A, KS, z, 2, true).total;
    return f > r ? f : r;
}
/* state_pass.cu: the pass over every sequence's chunks; the final k / v states of empty sequences. */
ssm_status launch_pass(ssm_context * ctx, const char * op, const m3_fwd_args & P);
ssm_status launch_empty(ssm_context * ctx, const char * op, const m3_fwd_args & P);
/* The entering states of every chm-th chunk of each sequence (P.states) into P.chst. */
ssm_status launch_chunk_states(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W);
/* output_mma.cu: 8 warps with the shared-memory epilogue (out_mma_applies), or 4 warps for any
 * output layout. */
ssm_status launch_output_mma(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode);
ssm_status launch_output_mma_any(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode);
/* output_wgmma.cu: the outputs by wgmma from chunk_prep_kernel's slots (a build with sm_90a code). */
ssm_status launch_output_wgmma(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode);

/* The 8-warp output kernels' domain: the shared-memory epilogue's 16-bit outputs of v's dtype in
 * 16-byte rows, and z of that kind or none. */
inline bool out_mma_applies(const m3_fwd_args & P) { return P.vo16 && (P.vz16 || !P.has_z); }

} /* namespace ssmi_siso */

#endif /* SSMI_CUDA_SISO_CUH */
