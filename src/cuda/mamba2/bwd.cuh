/*
 * bwd.cuh — what the Mamba-2 combined backward's kernel files (bwd_chunk.cu, bwd_pass.cu) and its
 * host file (bwd.cu) share: the work plan records, the kernels' argument record, the workspace
 * pointers and the launch functions.
 *
 * Work plan (built on the host, spec §2.7): every batch row (varlen sequence) is cut into
 * segments inside which the recurrence never resets (runs of equal seq_idx ids, or the sequence),
 * and every segment into chunks of Q tokens aligned to its start, so no seq_idx mask is needed.
 * The kernels, in order, fp32 CUDA code whose products (steps 2, 4 and 6) run as fp32 FFMA or,
 * for 16-bit inputs, on the tensor cores (bf16 mma.sync with fp32 intermediates split in two);
 * steps 2–6 run once per head batch (bw_args.h0, hb: the host's batch rule in bwd.cu), on the
 * states and state gradients of that batch's heads only:
 *   1. bwd_dt          per (chunk, head): processed dt, its cumsum cm and the dt chain factor;
 *   2. bwd_states      per (chunk, head): the chunk-local state s_c = Σ_j e^{cl−cm_j}dt_j x_j B_jᵀ;
 *   3. state pass      per (segment, head, state elements): s_c replaced by the entering state S_c;
 *   4. bwd_dstates     per (chunk, head): dS_c = Σ_i e^{cm_i} δx_i C_iᵀ (the chunk's gradient
 *                      w.r.t. its entering state through its outputs);
 *   5. reverse pass    per (segment, head, state elements): dS_c replaced by G_c = ∂L/∂S_{c+1}
 *                      (dfinal_states or 0 after the last chunk), and dinitial_states;
 *   6. bwd_chunk       per (chunk, head): dz, δx, dx, ddt and the per-head dB/dC contributions,
 *                      and per-(chunk, head) partials of dD, dA, ddt_bias; the bf16-plane kernel
 *                      per (chunk, group, slice of heads) instead, its slice's heads in turn,
 *                      their dB/dC contributions summed in head order as it goes;
 *   7. reductions      dB/dC: the fp32 parts of a group (per head, or per slice of heads) summed
 *                      in order where there are several, and dA/ddt_bias/dD summed over chunks
 *                      in chunk order in float64.
 * For the bf16-plane entry with operand rows of 16-byte runs, where the kernel fits (chain_ok), steps 2–5 are one
 * kernel (bwd_state_chain.cu) that walks the chunks with the running state in registers and
 * writes only the entering states and the state gradients, with the bytes of steps 2–5.
 * Every output element is written by one thread; no atomics, so results are identical run to run.
 */
#ifndef SSMI_CUDA_MAMBA2_BWD_CUH
#define SSMI_CUDA_MAMBA2_BWD_CUH

#include <stdint.h>

extern "C" {
#include "../../core/ssmi.h"
}
#include "../common/cuda_common.cuh"
#include "../common/device_math.cuh"

namespace ssmi_m2bwd {

const int kThreads = 256; /* threads of every backward kernel */
const int kMinStagedQ = 8; /* the smallest chunk for which bwd_chunk stages S and G */
const int kMaxQ = 64;      /* the largest chunk: bwd_chunk's ddA recurrence takes 2 tokens per lane of a warp */

/* One chunk of the plan: tokens [t0, t0 + len) of batch row `row` (row 0 with cu_seqlens). */
struct bw_chunk {
    long long t0;
    int       row, len;
};

/* One segment: chunks [c0, c0 + nc) of the plan; the lead index (row or sequence) of the initial
 * state feeding it, of the dinitial_states slot it writes and of the dfinal_states slot reaching
 * it (−1: none). */
struct bw_seg {
    long long c0, nc;
    long long init, dinit, fin;
};

/* An output view (ssmi_cu_view for writes). */
struct bw_out {
    void *    p;
    int       dtype;
    long long s[4];
};

/* Everything the kernels read: dimensions, tensors, flags, the plan and the workspace. */
struct bw_args {
    int       H, P, N, G, R, Q;
    int       planes;       /* bwd_chunk is the bf16-plane kernel (bwd_chunk_planes.cu) */
    int       staged;       /* bwd_chunk stages S and G in shared memory       */
    int       mma;          /* the chunk kernels' products on the tensor cores  */
    int       exact16;      /* x, B, C and dout are bf16: exact bf16 operands   */
    long long S;            /* tokens per row: the dB/dC parts' row pitch      */
    long long nchunks, nsegs;
    float     lo, hi;       /* dt_limit                                         */
    int       softplus;
    int       has_z, has_d, d2, has_bias, want_dz, want_db, want_dc;
    /* dB and dC of a (token, group) are the sum of `parts` fp32 parts in dbh/dch (the group's
     * heads, R of them, in the per-head chunk kernels; its slices of heads, nslices, in the plane
     * kernel), added up in part order by bwd_sums_kernel (parts = 0, no heads: zeros); with
     * parts = 1 the chunk kernel writes db/dc itself */
    int       parts;
    int       slice, nslices; /* the plane kernel: heads per block, blocks per (chunk, group) */
    /* the head batch that steps 2–6 run on: heads [h0, h0 + hb), which are the chunk kernel's
     * slices [s0, s0 + sb) (slices numbered across groups, g·nslices + slice; the per-head chunk
     * kernels' slices are single heads); st and gs hold this batch's slots only (state_at) */
    int       h0, hb, s0, sb;
    /* sparts (state_parts_ok): the state parts of dB and dC come from bwd_state_parts.cu, one
     * product over a slice's heads added into the slice's part after the chunk kernel; the chunk
     * kernel keeps Σ_h dCB_h of the slice's heads in registers (one A1 tile per warp) and
     * writes only its terms (Σ dCBᵀ·C, Σ dCB·B) into the part, at the slice's last head */
    int       sparts;
    ssmi_cu_view x, dt, a, b, c, d, z, bias, init, dout, dfin;
    bw_out       dx, ddt, dz, db, dc, da, dd, dbias, dinit;
    const bw_chunk * chunks;
    const bw_seg *   segs;
    /* workspace (fp32): [nchunks][H][Q] dt, cm, dfac, and the row weights of the state products,
     * wdb = e^{cl−cm}·dt (x rows) and wdc = e^{cm} (δx rows), zero past the chunk's length;
     * [nchunks][H] e^{cl} (the chunk's total decay); [nchunks][hb][P][N] states and state
     * gradients of the head batch (the largest batch's size, reused by every batch); [nchunks][H][P] dD partials;
     * [nchunks][H] dA and ddt_bias partials; with R > 1, [batch·S][G][parts][N] parts of dB and
     * dC (the plane kernel's running sums of a slice's heads, the per-head kernels' heads) */
    float *dtv, *cmv, *dfac, *wdb, *wdc, *ecl, *st, *gs, *ddp, *dap, *dbp, *dbh, *dch;
    long long tokens; /* batch·S */
};

/* Offset in st / gs of the [P][N] slot (PN = P·N floats) of chunk ci and head h (h in the
 * current head batch). */
__host__ __device__ inline long long state_at(const bw_args & a, long long ci, int h, long long PN) {
    return (ci * a.hb + (h - a.h0)) * PN;
}
__host__ __device__ inline long long state_at(const bw_args & a, long long ci, int h) {
    return state_at(a, ci, h, (long long)a.P * a.N);
}

/* A view of 16-bit elements whose rows are 16-byte aligned runs: unit element stride, the other
 * strides multiples of 8 elements, a 16-byte aligned base (the 16-byte copy paths). */
__host__ __device__ __forceinline__ bool rows16(const ssmi_cu_view & v) {
    return v.s[3] == 1 && v.s[0] % 8 == 0 && v.s[1] % 8 == 0 && v.s[2] % 8 == 0 && ((uintptr_t)v.p & 15) == 0;
}

/* Row stride of a shared-memory matrix with rows of d floats: a multiple of 4 floats (rows are
 * read as float4) holding an odd number of float4s, so 8 consecutive rows start in distinct
 * 16-byte bank groups (a float4 walk down a column is conflict-free) and rows a few apart start
 * in distinct banks. */
__host__ __device__ inline int pad_ld(int d) {
    const int l = (d + 3) / 4 * 4;
    return (l / 4) % 2 == 1 ? l : l + 4;
}

/* Floats of bwd_states' / bwd_dstates' dynamic shared memory for chunk Q: a [Q] vector, two
 * [Q][P] row operands (x; dout and z) and one [Q][N] (B; C). */
inline size_t states_smem_floats(int Q, int P, int N) {
    return (size_t)Q * (1 + 2 * (size_t)pad_ld(P) + (size_t)pad_ld(N));
}

/* Floats of bwd_chunk's dynamic shared memory for chunk Q: 5 [Q][P] and 2 [Q][N] row operands,
 * 3 [Q][Q] tables, with `staged` S and G (all rows pad_ld floats), then 9 [Q] vectors, [P] D and
 * the block-sum scratch. */
inline size_t chunk_smem_floats(int Q, int P, int N, bool staged) {
    const size_t q = (size_t)Q, lp = (size_t)pad_ld(P), ln = (size_t)pad_ld(N), lq = (size_t)pad_ld(Q);
    return 9 * q + (size_t)P + kThreads + q * (5 * lp + 2 * ln + 3 * lq) + (staged ? 2 * (size_t)P * ln : 0);
}

/* Threads of the bf16-plane chunk kernel: 16 warps share its one block per SM. */
const int kPlanesThreads = 512;

/* Shared-memory layout of the bf16-plane chunk kernel for chunk Q (a multiple of 16), P, N:
 * every product operand is a bf16 plane (rows of the padded width qp/pp/np = the dimension
 * rounded up to 16, zeros past the data, row strides lq/lp/ln = width + 8 elements so the 8
 * rows of an ldmatrix fall in distinct bank groups); fp32 values that bf16 does not hold
 * exactly are two planes, the rounded value (h) and the rounded remainder (l). Byte offsets:
 * x (exact), δx (h, l), B, C (exact), S (h, l), G (h, l), the [Q][Q] tables W1 = CB∘E·dt,
 * W2 = CB∘E and dCB (h, l each), then fp32: CB·dCB [qp][qp + 4], the dz factor [qp][pp + 4], the
 * per-16-column partial row sums of q, r and ddt_loc [pp/16][qp] each, 6 [qp] vectors, [pp] D,
 * the block-sum scratch and the head's A (loaded at the head's start, read by warp 0's tail). */
struct planes_geom {
    int    qp, pp, np, lq, lp, ln, lf, lz;
    size_t x, dxh, dxl, b, c, sh, sl, gh, gl, w1h, w1l, w2h, w2l, dch, dcl, prod, dzf, qpart, rpart, tpart, vec, dvec,
        red, ah, total;
};

__host__ __device__ inline planes_geom planes_geom_of(int Q, int P, int N) {
    planes_geom g;
    g.qp = (Q + 15) / 16 * 16, g.pp = (P + 15) / 16 * 16, g.np = (N + 15) / 16 * 16;
    g.lq = g.qp + 8, g.lp = g.pp + 8, g.ln = g.np + 8, g.lf = g.qp + 4, g.lz = g.pp + 4;
    const size_t qp = (size_t)g.qp, pp = (size_t)g.pp;
    const size_t xq = qp * (size_t)g.lp * 2, bq = qp * (size_t)g.ln * 2, sq = pp * (size_t)g.ln * 2,
                 tq = qp * (size_t)g.lq * 2;
    size_t at = 0;
    g.x = at, at += xq;
    g.dxh = at, at += xq;
    g.dxl = at, at += xq;
    g.b = at, at += bq;
    g.c = at, at += bq;
    g.sh = at, at += sq;
    g.sl = at, at += sq;
    g.gh = at, at += sq;
    g.gl = at, at += sq;
    g.w1h = at, at += tq;
    g.w1l = at, at += tq;
    g.w2h = at, at += tq;
    g.w2l = at, at += tq;
    g.dch = at, at += tq;
    g.dcl = at, at += tq;
    g.prod = at, at += qp * (size_t)g.lf * 4;
    g.dzf = at, at += qp * (size_t)g.lz * 4;
    g.qpart = at, at += pp / 16 * qp * 4;
    g.rpart = at, at += pp / 16 * qp * 4;
    g.tpart = at, at += pp / 16 * qp * 4;
    g.vec = at, at += 6 * qp * 4;
    g.dvec = at, at += pp * 4;
    g.red = at, at += (size_t)kPlanesThreads * 4;
    g.ah = at, at += 16;
    g.total = at;
    return g;
}

/* Opts kernel fn into `bytes` of dynamic shared memory where that exceeds the default 48 KB,
 * with the largest carveout. */
ssm_status smem_optin(ssm_context * ctx, const char * op, const void * fn, size_t bytes);

/* Launches (each checks its launch; nothing runs for an empty grid). */
ssm_status launch_bwd_dt(ssm_context * ctx, const char * op, const bw_args & a);
ssm_status launch_bwd_states(ssm_context * ctx, const char * op, const bw_args & a);
ssm_status launch_bwd_dstates(ssm_context * ctx, const char * op, const bw_args & a);
ssm_status launch_bwd_chunk(ssm_context * ctx, const char * op, const bw_args & a);
/* bwd_state_parts.cu (mamba2-bwd-design §10): where state_parts_ok (bw_args.sparts), the state parts
 * of dB and dC as one product over each slice's heads, added into the slice's part. */
bool       state_parts_ok(const bw_args & a, size_t optin);
ssm_status launch_bwd_state_parts(ssm_context * ctx, const char * op, const bw_args & a);
ssm_status launch_bwd_chunk_planes(ssm_context * ctx, const char * op, const bw_args & a);
ssm_status launch_bwd_states_planes(ssm_context * ctx, const char * op, const bw_args & a, bool dstates);
ssm_status launch_state_pass(ssm_context * ctx, const char * op, const bw_args & a);
/* Steps 2–5 in one kernel (bwd_state_chain.cu) for the plane entry where chain_ok holds (operand
 * rows of 16-byte runs, and the kernel's shared memory, which does not depend on P and N, within the
 * device's optin): the same bytes in st, gs and dinitial_states as bwd_states_planes + the two passes. */
bool       chain_ok(const bw_args & a, size_t optin);
ssm_status launch_bwd_state_chain(ssm_context * ctx, const char * op, const bw_args & a);
ssm_status launch_state_grad_pass(ssm_context * ctx, const char * op, const bw_args & a);
ssm_status launch_bwd_reduce(ssm_context * ctx, const char * op, const bw_args & a);

/* Element offsets through a view's strides. */
__device__ __forceinline__ long long off2(const long long * s, long long i, long long j) { return i * s[0] + j * s[1]; }
__device__ __forceinline__ long long off3(const long long * s, long long i, long long j, long long k) {
    return i * s[0] + j * s[1] + k * s[2];
}
__device__ __forceinline__ long long off4(const long long * s, long long i, long long j, long long k, long long l) {
    return i * s[0] + j * s[1] + k * s[2] + l * s[3];
}

/* δx = dout·silu(z) = dout·z·σ(z), σ by the fast form (the results go into split bf16 planes), and
 * where f is given the dz factor dout·σ(z)·(1 + z·(1 − σ(z))) into *f. */
__device__ __forceinline__ float silu_gate(float dv, float zv, float * f = nullptr) {
    const float sg = ssmi_math::sigmoid_fast(zv);
    if (f != nullptr) *f = dv * sg * (1.0f + zv * (1.0f - sg));
    return dv * zv * sg;
}

/* Sum of v over the block (a power-of-two thread count of at least 32; red holds one float per
 * thread), a fixed tree: at level s = n/2, n/4, .., 1 element t < s adds element t + s, the same
 * bytes every run. Warp 0 runs the tree: lane t owns the elements t + 32k of the levels s ≥ 32
 * (no other lane touches them), shuffles take the levels below. Its first barrier also publishes
 * every shared-memory write made before it. */
__device__ __forceinline__ float block_sum(float v, float * red) {
    const int t = (int)threadIdx.x;
    red[t] = v;
    __syncthreads();
    if (t < 32) {
        for (int s = (int)blockDim.x / 2; s >= 32; s >>= 1)
            for (int k = t; k < s; k += 32) red[k] += red[k + s];
        float x = red[t];
#pragma unroll
        for (int s = 16; s > 0; s >>= 1) {
            const float y = __shfl_down_sync(0xffffffffu, x, s);
            if (t < s) x += y;
        }
        if (t == 0) red[0] = x;
    }
    __syncthreads();
    const float r = red[0];
    __syncthreads();
    return r;
}

/* Sum over the 32 lanes of a warp, a fixed xor tree: every lane gets the same bytes. */
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* A of head h (the per-head decay rate of every chunk kernel's ddA recurrence). */
__device__ __forceinline__ float head_a(const bw_args & a, int h) {
    return ssmi_cu_ld(a.a.p, a.a.dtype, (long long)h * a.a.s[0]);
}

/* The end of a chunk kernel (spec §2.7 step 6), on one warp with tokens k = 2·lane and
 * 2·lane + 1 (L ≤ kMaxQ = 64): given this lane's q_k, r_k and ddt_loc_k (zeros for k ≥ L), the
 * chunk's total = e^{cl}·<G, S>, A of the head, intra, the chain factors and dt, the stable
 *   ddA_k = suf_k + (pre_k + intra_k),  suf_k = total + Σ_{m≥k} q_m,  pre_k = Σ_{m<k} r_m
 * (fixed shuffle scans over the lanes' pair sums), ddt = (ddA·A + ddt_loc)·fac into the output,
 * and the chunk's dA and ddt_bias partials into the workspace slot w. */
__device__ __forceinline__ void dda_tail(const bw_args & a, const bw_chunk & ck, int h, long long w, int L, float total,
                                         float ah, const float (&qv)[2], const float (&rv)[2], const float (&tv)[2],
                                         const float * intra, const float * fac, const float * dtv) {
    const int lane = threadIdx.x & 31, k0 = 2 * lane;
    float     qs = qv[0] + qv[1], rs = rv[0] + rv[1]; /* inclusive suffix (q) and prefix (r) scans */
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float vq = __shfl_down_sync(0xffffffffu, qs, o), vr = __shfl_up_sync(0xffffffffu, rs, o);
        if (lane + o < 32) qs += vq;
        if (lane >= o) rs += vr;
    }
    const float qx = __shfl_down_sync(0xffffffffu, qs, 1), rx = __shfl_up_sync(0xffffffffu, rs, 1);
    const float qe = lane < 31 ? qx : 0.0f, re = lane > 0 ? rx : 0.0f; /* the lanes after / before */
    float       da = 0.0f, db = 0.0f;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        const int k = k0 + u;
        if (k >= L) break;
        const float suf = u == 0 ? ((total + qe) + qv[1]) + qv[0] : (total + qe) + qv[1];
        const float pre = u == 0 ? re : re + rv[0];
        const float dda = suf + (pre + intra[k]);
        const float gv = (dda * ah + tv[u]) * fac[k];
        if (a.ddt.p != NULL) ssmi_cu_st(a.ddt.p, a.ddt.dtype, off3(a.ddt.s, ck.row, ck.t0 + k, h), gv);
        da += dda * dtv[k];
        db += gv;
    }
    da = warp_sum(da), db = warp_sum(db);
    if (lane == 0) a.dap[w] = da, a.dbp[w] = db;
}

} /* namespace ssmi_m2bwd */

#endif /* SSMI_CUDA_MAMBA2_BWD_CUH */
