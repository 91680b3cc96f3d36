/*
 * bwd.cuh — what the CUDA Mamba-3 SISO backward files share: the chunk plan, the kernel
 * arguments (tensor views, gradient outputs, workspace pointers), the shared-memory layout of a
 * chunk, and the launchers of the kernel files.
 *
 * The files:
 *   bwd_scan.cu   per (chunk, head) the per-token scalars and the chunk-local angle sums; the
 *                 walks over a sequence: θ entering each chunk, the state
 *                 pass and the state-gradient pass over the chunks, the initial-state gradients
 *                 and the angle carry over the chunks; per (chunk, head) the angle backward,
 *                 ddt and dtrap; the fixed-order sums (dq/dk over GQA heads; dq_bias, dk_bias,
 *                 dd over chunks);
 *   bwd_chunk.cu  the per-(chunk, head) kernels: the chunk sums (state contribution and the
 *                 state-gradient contribution) and the chunk gradients, fp32 FFMA;
 *   bwd_chunk_planes.cu  the same two kernels with their products on the tensor cores from bf16
 *                 planes in shared memory (16-bit q, k, v);
 *   bwd.cu        the host side: plan, workspace, the selection table, the entry point.
 * All arithmetic is fp32 (the plane kernels' products: bf16 mma with fp32 accumulators, fp32
 * operands split in two); every reduction is a loop in a fixed order, so the bytes depend only
 * on the inputs, the entry and the chunk length (chosen from the shape and the entry).
 */
#ifndef SSMI_CUDA_SISO_BWD_CUH
#define SSMI_CUDA_SISO_BWD_CUH

#include <type_traits>

#include "siso.cuh"

namespace ssmi_siso_bwd {

using ssmi_siso::m3_out;

const int kBwdThreads = 256;  /* the chunk kernels (their block reduction buffer has this size) */
const int kSeqThreads = 128;  /* the walk kernels and the per-(chunk, head) prep and token kernels */
const int kBwdMaxChunk = 64;  /* longest chunk of any entry (the scans over a chunk: two tokens per lane) */
const int kFmaChunk = 32;     /* longest chunk of the fp32 entry; shorter where its shared memory is too big */
const int kScal = 12;         /* per-token scalar rows of a chunk's shared memory               */
const int kScalWs = 5;        /* per-(token, head) scalars in the workspace: dt, λ, γ, σ, cm    */

/* One chunk: tokens [t0, t0 + len) of batch row `row` (tok = row·S + t0 is its first flat token),
 * sequence `seq`; last: the sequence ends with this chunk. */
struct bw_chunk {
    long long t0, tok;
    int       row, len, seq, last;
};
/* One sequence: len tokens from t0 of row `row` (flat token tok), chunks [first, first + count). */
struct bw_seg {
    long long t0, tok;
    int       row, len, first, count;
};

struct bw_args {
    const bw_chunk * chunks;
    const bw_seg *   segs;
    long long        S;                /* tokens per batch row of the layout      */
    int              H, G, K, V, A, C; /* C: the chunk length                       */
    int              NS, W;            /* sequences, chunks                       */
    int              staged;           /* the gradient kernel holds S_c / dS in shared memory */
    int              planes;           /* the chunk kernels are the bf16-plane ones (bwd_chunk_planes.cu) */
    int              v_bf16;           /* v is bf16: exact in one plane                       */
    int              has_d, has_z, has_states, has_dfa, has_dfs, has_dfk, has_dfv;
    /* dq̃ and dk̃ leave the gradient kernel as qparts parts per GQA group (rows of dqt/dkt): part j
     * of group g is the sum, in head order from 0, of the group's heads [j·qslice, (j+1)·qslice)
     * (the plane kernel takes a slice's heads in turn in one block; the fp32 kernel: qslice 1,
     * qparts G, a part per head); bwd_qk_sum_kernel adds the parts in order */
    int              qslice, qparts;
    ssmi_cu_view     q, k, v, adt, dt, trap, qb, kb, ang, d, z;   /* forward inputs            */
    ssmi_cu_view     ang_in, ssm_in, k_in, v_in;                  /* initial states            */
    ssmi_cu_view     dout, dfa, dfs, dfk, dfv;                    /* incoming gradients        */
    /* the forward's pregate_y (plane entries; p == NULL otherwise): dz by bwd_dz_kernel, not by the
     * gradient kernel's dz tiles; dz_vec: y f32, dout, z, dz bf16, each in 16-byte rows of 8 */
    ssmi_cu_view     ypre;
    int              dz_vec;
    m3_out           dq, dk, dv, dadt, ddt, dtrap, dqb, dkb, dang, dd, dz;
    m3_out           dang_st, dssm_st, dk_st, dv_st;
    /* workspace (fp32); T = B·S flat tokens */
    float * sc;   /* (T, H, kScalWs) dt, λ, γ, σ, chunk-local inclusive cumsum of adt        */
    float * th;   /* (T, H, A) Σ of π·tanh(raw)·dt over the chunk's tokens up to this one  */
    float * thb;  /* (W, H, A) the chunk's sum of those terms, then θ entering the chunk       */
    float * st;   /* (W, H, V·K) chunk state contributions, then the state entering each chunk */
    float * dst;  /* (W, H, V·K) chunk state-gradient contributions, then the carry dS of each chunk */
    float * cl;   /* (W, H) c_last of each chunk                                             */
    float * dhin; /* (NS, H, V·K) dH_in                                                      */
    float * dqt;  /* (T, Hq·qparts, K) parts of dq̃ (row part_row: g·qparts + j)             */
    float * dkt;  /* (T, Hq·qparts, K) parts of dk̃                                          */
    float * dth;  /* (T, H, A) dθ                                                            */
    float * dsg;  /* (T, H) dσ                                                               */
    float * dgm;  /* (T, H) dγ                                                               */
    float * qbp;  /* (W, H, K) per-chunk sums of dq̃                                          */
    float * kbp;  /* (W, H, K) per-chunk sums of dk̃                                          */
    float * ddp;  /* (W, H) per-chunk sums of dQK                                            */
    float * thp;  /* (W, H, A) per-chunk sums of dθ, then the angle carry G entering each chunk from its end */
    float * dcw;  /* (NS, H) dc = ⟨dH_in, V_in K_inᵀ⟩ of each sequence (the t = 0 fold)               */
    /* chained_planes only (else NULL) */
    float *              slot;  /* (W, H, kPrepScal) chunk_prep_kernel's scalar slots from sc            */
    ssmi_siso::m3_seg *  msegs; /* (NS) the sequences as the chain reads them                      */
    /* chained_planes with z (else NULL): (T, H, V) each, dy = dout ⊙ silu(z) split in v's 16-bit
     * dtype (the rounded part, the remainder), by bwd_gate_kernel for the reverse walks */
    void *               dyh;
    void *               dyl;
    int                  dz_fused; /* bwd_gate_kernel also writes dz (from P.ypre): no bwd_dz_kernel */
};

/* Leading dimensions of the chunk's shared-memory rows: odd, so that the rows a warp reads at one
 * column (consecutive rows, or rows strided by an odd count) fall in distinct banks. */
__host__ __device__ inline int odd_ld(int n) { return n | 1; }

/* Floats of a chunk's shared memory: kScal scalar rows of C, the block reduction buffer, the q and
 * k biases (K each), q̂, k̂ (C rows of odd_ld(K)), v, dy (C rows of odd_ld(V)); with grads also dq̂,
 * dK̂s (C rows of odd_ld(K)), Pm, E, W (C rows of odd_ld(C)), the dz factor (C rows of odd_ld(V))
 * and, staged, S_c and dS (V rows of odd_ld(K) each). */
__host__ __device__ inline long long chunk_smem_floats(int C, int K, int V, bool grads, bool staged) {
    const long long LK = odd_ld(K), LV = odd_ld(V), LC = odd_ld(C);
    long long       n = (long long)kScal * C + kBwdThreads + 2LL * K + 2LL * C * LK + 2LL * C * LV;
    if (grads) n += 2LL * C * LK + 3LL * C * LC + (long long)C * LV + (staged ? 2LL * V * LK : 0);
    return n;
}

/* Threads of the bf16-plane chunk kernels: 16 warps share their one block per SM. */
const int kPlanesThreads = 512;
/* Shared memory the plane entry's chunk length is chosen against (the opt-in limit of the devices it
 * targets): 64-token chunks where their gradient kernel fits, else 32 (the shape alone decides). */
const size_t kPlanesSmemBudget = 227 * 1024;

/* Shared-memory layout of the bf16-plane chunk kernels for chunk C (a multiple of 16), K, V:
 * every product operand is a bf16 plane (rows of the padded width cp/kp/vp = the dimension
 * rounded up to 16, zeros past the data, row strides lc/lk/lv = width + 8 elements so the 8 rows
 * of an ldmatrix fall in distinct bank groups); fp32 values are two planes, the rounded value (h)
 * and the rounded remainder (l); v is one plane where it is bf16 (the l plane is then unused).
 * Byte offsets, both kernels: q̂, k̂ (h, l each, [cp][lk]), v, dy (h, l each, [cp][lv]) — the
 * region zeroed first —, then fp32: kVec [cp] vectors, the q and k biases [kp] each, the
 * block-sum scratch [kPlanesThreads]; sums_total ends there. The gradient kernel also has S_c and
 * dS (h, l each, [vp][lk]), the [C][C] tables Pm and E·diag(σ) (h, l each, [cp][lc]) and fp32
 * partial sums: per 16-column tile of K the readout and m of each token (rpart, mpart [kp/16][cp]);
 * per 16-token tile of the chunk the rows of W (wrow [cp/16][cp], by column tile) and the columns
 * of e^{c_i−c_j}·(dy_i·v_j)·(q̂_i·k̂_j) (zcol [cp/16][cp], by row tile); per 16-token tile the column
 * sums of dq̃, dk̃ (qpart, kpart [cp/16][kp]) and of dθ (tpart [cp/16][kp/2]). */
struct planes_geom {
    static const int kVec = 9; /* σ, γ, cm, e^{c}, e^{c_last−c}, d = q̂·k̂, dQK, r, m */
    int    cp, kp, vp, lk, lv, lc;
    size_t qh, ql, kh, kl, vh, vl, dyh, dyl, zero_end, vec, bias, red, sums_total;
    size_t sh, sl, dh, dl, pmh, pml, esh, esl, rpart, mpart, wrow, zcol, qpart, kpart, tpart, total;
};

__host__ __device__ inline planes_geom planes_geom_of(int C, int K, int V) {
    planes_geom g;
    g.cp = (C + 15) / 16 * 16, g.kp = (K + 15) / 16 * 16, g.vp = (V + 15) / 16 * 16;
    g.lk = g.kp + 8, g.lv = g.vp + 8, g.lc = g.cp + 8;
    const size_t cp = (size_t)g.cp, kp = (size_t)g.kp, kq = cp * (size_t)g.lk * 2, vq = cp * (size_t)g.lv * 2;
    const size_t sq = (size_t)g.vp * (size_t)g.lk * 2, tq = cp * (size_t)g.lc * 2;
    size_t       at = 0;
    size_t * const planes[] = {&g.qh, &g.ql, &g.kh, &g.kl};
    for (size_t * f : planes) *f = at, at += kq;
    size_t * const vplanes[] = {&g.vh, &g.vl, &g.dyh, &g.dyl};
    for (size_t * f : vplanes) *f = at, at += vq;
    g.zero_end = at;
    g.vec = at, at += (size_t)planes_geom::kVec * cp * 4;
    g.bias = at, at += 2 * kp * 4;
    g.red = at, at += (size_t)kPlanesThreads * 4;
    g.sums_total = at;
    size_t * const states[] = {&g.sh, &g.sl, &g.dh, &g.dl};
    for (size_t * f : states) *f = at, at += sq;
    size_t * const tables[] = {&g.pmh, &g.pml, &g.esh, &g.esl};
    for (size_t * f : tables) *f = at, at += tq;
    g.rpart = at, at += kp / 16 * cp * 4;
    g.mpart = at, at += kp / 16 * cp * 4;
    g.wrow = at, at += cp / 16 * cp * 4;
    g.zcol = at, at += cp / 16 * cp * 4;
    g.qpart = at, at += cp / 16 * kp * 4;
    g.kpart = at, at += cp / 16 * kp * 4;
    g.tpart = at, at += cp / 16 * (kp / 2) * 4;
    g.total = at;
    return g;
}

/* The plane entry's chunk length for K, V (kPlanesSmemBudget). */
__host__ __device__ inline int planes_chunk(int K, int V) {
    return planes_geom_of(kBwdMaxChunk, K, V).total <= kPlanesSmemBudget ? kBwdMaxChunk : kBwdMaxChunk / 2;
}

/* The (row, column) = (e / cols, e mod cols) of a thread's elements e = e0, e0 + step, e0 + 2·step, …
 * of a [rows][cols] grid, by additions: one division at the start, none per element (step and
 * cols are runtime values). cols > 0, e0 ≥ 0, step ≥ 0. */
struct grid_walk {
    int i, c, di, dc, cols;
    __device__ __forceinline__ grid_walk(int e0, int step, int cols_) : cols(cols_) {
        i = e0 / cols, c = e0 - i * cols;
        di = step / cols, dc = step - di * cols;
    }
    __device__ __forceinline__ void next() {
        i += di, c += dc;
        if (c >= cols) c -= cols, ++i;
    }
};
/* grid_walk with the element's offset i·s1 + c·s3 carried along by additions (no 64-bit product per
 * element). */
struct grid_walk_off : grid_walk {
    long long o, step, wrap;
    __device__ __forceinline__ grid_walk_off(int e0, int step_, int cols_, long long s1, long long s3)
        : grid_walk(e0, step_, cols_) {
        o = i * s1 + c * s3, step = di * s1 + dc * s3, wrap = s1 - cols_ * s3;
    }
    __device__ __forceinline__ void next() {
        i += di, c += dc, o += step;
        if (c >= cols) c -= cols, ++i, o += wrap;
    }
};

/* f(i, c, base[i·s1 + c·s3]) for i < rows, c < cols; thread `me` of the nt taking part takes
 * the elements e = i·cols + c with e mod nt = me. A thread issues NB loads before it uses their
 * values (a block waits on memory once per batch, not once per element). */
const int kLoadBatch = 8;
template <int NB, typename T, class F>
__device__ __forceinline__ void rows_at_by(int me, int nt, const T * base, long long s1, long long s3, int rows,
                                           int cols, F f) {
    const int n = rows * cols;
    if (me >= n) return; /* also keeps cols > 0 for the walk */
    grid_walk at(me, nt, cols);
    /* fp64 elements are held as the fp32 values they give (half the registers of a batch) */
    typedef typename std::conditional<sizeof(T) == 8, float, T>::type H;
    for (int e0 = me; e0 < n; e0 += NB * nt) {
        H         v[NB];
        grid_walk ld = at;
#pragma unroll
        for (int u = 0; u < NB; ++u, ld.next()) v[u] = (H)base[e0 + u * nt < n ? ld.i * s1 + ld.c * s3 : 0];
#pragma unroll
        for (int u = 0; u < NB; ++u, at.next())
            if (e0 + u * nt < n) f(at.i, at.c, ssmi_siso::from_t(v[u]));
    }
}
/* rows_at_by by the whole block, kLoadBatch loads at a time. */
template <typename T, class F>
__device__ __forceinline__ void rows_at(const T * base, long long s1, long long s3, int rows, int cols, F f) {
    rows_at_by<kLoadBatch>((int)threadIdx.x, (int)blockDim.x, base, s1, s3, rows, cols, f);
}
/* g(T()) for the element type T of a tensor dtype (nothing for an unknown one). */
template <class G>
__device__ __forceinline__ void by_dtype(int dtype, G g) {
    switch (dtype) {
        case SSM_DTYPE_F32: g(float()); break;
        case SSM_DTYPE_F16: g(__half()); break;
        case SSM_DTYPE_BF16: g(__nv_bfloat16()); break;
        case SSM_DTYPE_F64: g(double()); break;
        default: break;
    }
}
/* f(i, c, x[row, t0 + i, hh, c]) for i < rows, c < cols (x of any dtype), by threads me < nt as
 * in rows_at_by, NB loads at a time. */
template <int NB, class F>
__device__ __forceinline__ void load_rows_by(int me, int nt, const ssmi_cu_view & x, long long row, long long t0,
                                             long long hh, int rows, int cols, F f) {
    by_dtype(x.dtype, [&](auto t) {
        typedef decltype(t) T;
        rows_at_by<NB>(me, nt, (const T *)x.p + row * x.s[0] + t0 * x.s[1] + hh * x.s[2], x.s[1], x.s[3], rows, cols,
                       f);
    });
}
/* load_rows_by by the whole block, kLoadBatch loads at a time. */
template <class F>
__device__ __forceinline__ void load_rows(const ssmi_cu_view & x, long long row, long long t0, long long hh, int rows,
                                          int cols, F f) {
    load_rows_by<kLoadBatch>((int)threadIdx.x, (int)blockDim.x, x, row, t0, hh, rows, cols, f);
}

/* The loads of one batch of load_rows2: a[u], b[u] = x, y at element e0 + u·blockDim.x (element 0
 * past n), walking from `at`. T: both views of that element type; void: any dtypes, ssmi_cu_ld
 * each (the same values). */
template <typename T>
__device__ __forceinline__ void rows2_fetch(float (&a)[kLoadBatch], float (&b)[kLoadBatch], const ssmi_cu_view & x,
                                            const ssmi_cu_view & y, long long xb, long long yb, int e0, int n,
                                            grid_walk at) {
    const int nt = blockDim.x;
#pragma unroll
    for (int u = 0; u < kLoadBatch; ++u, at.next()) {
        const bool      in = e0 + u * nt < n;
        const long long xo = in ? xb + at.i * x.s[1] + at.c * x.s[3] : xb;
        const long long yo = in ? yb + at.i * y.s[1] + at.c * y.s[3] : yb;
        if constexpr (std::is_void<T>::value) {
            a[u] = ssmi_cu_ld(x.p, x.dtype, xo);
            b[u] = ssmi_cu_ld(y.p, y.dtype, yo);
        } else {
            a[u] = ssmi_siso::from_t(((const T *)x.p)[xo]);
            b[u] = ssmi_siso::from_t(((const T *)y.p)[yo]);
        }
    }
}

/* f(i, c, x[row, t0 + i, hh, c], y[row, t0 + i, hh, c]) for two views of the same rows (any dtype
 * each); thread e mod blockDim.x takes element e = i·cols + c, kLoadBatch elements' loads first
 * (typed loads where both views have one dtype, the choice uniform over the block). */
template <class F>
__device__ __forceinline__ void load_rows2(const ssmi_cu_view & x, const ssmi_cu_view & y, long long row, long long t0,
                                           long long hh, int rows, int cols, F f) {
    const long long xb = row * x.s[0] + t0 * x.s[1] + hh * x.s[2], yb = row * y.s[0] + t0 * y.s[1] + hh * y.s[2];
    const int       n = rows * cols, nt = blockDim.x;
    const int       dt = x.dtype == y.dtype ? x.dtype : -1;
    if ((int)threadIdx.x >= n) return; /* also keeps cols > 0 for the walk */
    grid_walk at(threadIdx.x, nt, cols);
    for (int e0 = threadIdx.x; e0 < n; e0 += kLoadBatch * nt) {
        float a[kLoadBatch], b[kLoadBatch];
        switch (dt) {
            case SSM_DTYPE_F32: rows2_fetch<float>(a, b, x, y, xb, yb, e0, n, at); break;
            case SSM_DTYPE_F16: rows2_fetch<__half>(a, b, x, y, xb, yb, e0, n, at); break;
            case SSM_DTYPE_BF16: rows2_fetch<__nv_bfloat16>(a, b, x, y, xb, yb, e0, n, at); break;
            default: rows2_fetch<void>(a, b, x, y, xb, yb, e0, n, at); break;
        }
#pragma unroll
        for (int u = 0; u < kLoadBatch; ++u, at.next())
            if (e0 + u * nt < n) f(at.i, at.c, a[u], b[u]);
    }
}

/* θ of angle p at flat token tok of chunk w: wrap(θ entering the chunk + the chunk-local sum). */
__device__ __forceinline__ float theta_at(const bw_args & P, long long w, int h, long long tok, int p) {
    return ssmi_siso::wrap2pi(P.thb[(w * P.H + h) * P.A + p] + P.th[(tok * P.H + h) * P.A + p]);
}

/* The operand helpers of the bf16-plane kernels (bwd_chunk_planes.cu, bwd_state_chain.cu). */

/* x into the split planes h, l at element o (one value: bf16 and its rounded remainder). */
__device__ __forceinline__ void split_one(float x, ssmi_mma::bf16 * h, ssmi_mma::bf16 * l, int o) {
    const ssmi_mma::bf16 r = __float2bfloat16_rn(x);
    h[o] = r;
    l[o] = __float2bfloat16_rn(x - __bfloat162float(r));
}

using ssmi_siso::gated_dy; /* dy = dout ⊙ silu(z) of one element */

/* sin and cos of a token's raw angle sum tv (θ entering the chunk + the chunk-local sum, theta_at
 * unwrapped) by the hardware approximations (the 16-bit kernels; ~1e-6 absolute), and the pair
 * (x0, x1) rotated by them. */
__device__ __forceinline__ void theta_sincos(float tv, float * sn, float * cs) {
    ssmi_siso::sincos_wrapped_fast(ssmi_siso::wrap2pi(tv), sn, cs);
}
__device__ __forceinline__ float2 rotate_pair(float x0, float x1, float sn, float cs) {
    return make_float2(x0 * cs - x1 * sn, x0 * sn + x1 * cs);
}

/* Σ_{c<n} f(c) over the 32 lanes of a warp (all lanes active): lane-strided partials in c order,
 * then an xor butterfly (every lane ends with the same bytes). */
template <class F>
__device__ __forceinline__ float warp_sum(int n, F f) {
    const int lane = threadIdx.x & 31;
    float     a = 0.0f;
    for (int c = lane; c < n; c += 32) a += f(c);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
    return a;
}

/* The end of the chunk-gradient kernels, shared by bwd_chunk.cu and bwd_chunk_planes.cu. */

/* On warp 0: μ = e^{cl}·Σ_u red[lane + 32u] (u < nred, a fixed tree), dadt_i = Σ_{i'≥i} r_i' +
 * Σ_{j<i} m_j + μ (L ≤ kBwdMaxChunk: lane l holds tokens 2l and 2l + 1; fixed shuffle scans over
 * the lanes' pair sums) into dadt, and the chunk's dd partial Σ dQK into the workspace slot wh. */
__device__ __forceinline__ void dadt_tail(const bw_args & P, const bw_chunk & ch, int h, long long wh, int L, float cl,
                                          const float * red, int nred, const float * mm, const float * rr,
                                          const float * dQK) {
    static_assert(kBwdMaxChunk <= 64, "two tokens per lane");
    const int lane = threadIdx.x & 31, k0 = 2 * lane;
    float     mu = 0.0f;
    for (int u = 0; u < nred; ++u) mu += red[lane + 32 * u];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mu += __shfl_xor_sync(0xffffffffu, mu, off);
    mu *= expf(cl);
    float m[2], r[2], dd = 0.0f;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        const bool in = k0 + u < L;
        m[u] = in ? mm[k0 + u] : 0.0f, r[u] = in ? rr[k0 + u] : 0.0f;
        dd += in ? dQK[k0 + u] : 0.0f;
    }
    float ms = m[0] + m[1], rs = r[1] + r[0]; /* inclusive prefix (m) and suffix (r) scans of the pair sums */
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const float up = __shfl_up_sync(0xffffffffu, ms, off);
        const float dn = __shfl_down_sync(0xffffffffu, rs, off);
        if (lane >= off) ms += up;
        if (lane + off < 32) rs += dn;
    }
    const float mx = __shfl_up_sync(0xffffffffu, ms, 1), rx = __shfl_down_sync(0xffffffffu, rs, 1);
    const float me = lane > 0 ? mx : 0.0f, re = lane < 31 ? rx : 0.0f; /* the lanes before / after */
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) dd += __shfl_xor_sync(0xffffffffu, dd, off);
    if (P.dadt.present) {
        if (k0 < L) ssmi_siso::st3(P.dadt, ch.row, h, ch.t0 + k0, ((re + r[1]) + r[0]) + me + mu);
        if (k0 + 1 < L) ssmi_siso::st3(P.dadt, ch.row, h, ch.t0 + k0 + 1, (re + r[1]) + (me + m[0]) + mu);
    }
    if (lane == 0) P.ddp[wh] = dd;
}

/* The chain of token i, pair p (columns 2p, 2p + 1) of chunk w (spec §6.2): from dq̂ (f), dK̂s (g),
 * q̂ (qv) and k̂ (kv) of the pair, σ_i, cqk = dQK_i·γ_i and, for a rotated pair (p < A), θ of the
 * pair (theta_at): dk̂ = σ·dK̂s (+ dfinal_k_state with fk), for a rotated pair the raw dθ into the
 * workspace and q̃, k̃, dq̂, dk̂ rotated back, then dq̃ = dq̂ + cqk·k̃ and dk̃ = dk̂ + cqk·q̃ back into
 * f, g and, added to pq, pk (the part's sums of the slice's earlier heads; zeros for its first
 * head), into the part's row qo of dqt, dkt. Returns the raw dθ (0 for an unrotated pair). FAST:
 * sin and cos of θ by the hardware approximations (the 16-bit kernels, as their forward
 * rotation), else sincosf. */
template <bool FAST>
__device__ __forceinline__ float chain_pair(const bw_args & P, const bw_chunk & ch, int h, int i, int p, bool fk,
                                            float sg, float cqk, float theta, float2 qv, float2 kv, float2 & f,
                                            float2 & g, long long qo, float2 pq, float2 pk) {
    const long long o = (ch.tok + i) * P.H + h;
    const int       c0 = 2 * p, K = P.K, A = P.A;
    float           g0 = sg * g.x, g1 = sg * g.y, f0 = f.x, f1 = f.y, dth = 0.0f;
    if (fk) g0 += ssmi_siso::ld3(P.dfk, ch.seq, h, c0), g1 += ssmi_siso::ld3(P.dfk, ch.seq, h, c0 + 1);
    float qt0 = qv.x, qt1 = qv.y, kt0 = kv.x, kt1 = kv.y;
    if (p < A) {
        dth = -f0 * qt1 + f1 * qt0 - g0 * kt1 + g1 * kt0;
        P.dth[o * A + p] = dth;
        float sn, cs;
        if (FAST)
            ssmi_siso::sincos_wrapped_fast(theta, &sn, &cs);
        else
            sincosf(theta, &sn, &cs);
        const float a0 = cs * f0 + sn * f1, a1 = -sn * f0 + cs * f1;
        const float b0 = cs * g0 + sn * g1, b1 = -sn * g0 + cs * g1;
        const float x0 = cs * qt0 + sn * qt1, x1 = -sn * qt0 + cs * qt1;
        const float y0 = cs * kt0 + sn * kt1, y1 = -sn * kt0 + cs * kt1;
        f0 = a0, f1 = a1, g0 = b0, g1 = b1;
        qt0 = x0, qt1 = x1, kt0 = y0, kt1 = y1;
    }
    f0 += cqk * kt0, f1 += cqk * kt1;
    g0 += cqk * qt0, g1 += cqk * qt1;
    /* one 8-byte store per pair (K even, 128-byte aligned workspace) */
    *reinterpret_cast<float2 *>(P.dqt + qo * K + c0) = make_float2(pq.x + f0, pq.y + f1);
    *reinterpret_cast<float2 *>(P.dkt + qo * K + c0) = make_float2(pk.x + g0, pk.y + g1);
    f = make_float2(f0, f1), g = make_float2(g0, g1);
    return dth;
}

/* bwd_chunk.cu, after a barrier that publishes them: the chunk sums of dq̃ and dk̃ (rows dq, dk of stride ld,
 * per column, tokens in order) and of the raw dθ (per angle, from the workspace) into the
 * workspace slot wh. */
__device__ __forceinline__ void chain_sums(const bw_args & P, const bw_chunk & ch, int h, long long wh, int L,
                                           const float * dq, const float * dk, int ld) {
    const int K = P.K, A = P.A;
    for (int c = threadIdx.x; c < K + A; c += blockDim.x) {
        float a = 0.0f, b = 0.0f;
        if (c < K) {
            for (int i = 0; i < L; ++i) a += dq[i * ld + c], b += dk[i * ld + c];
            P.qbp[wh * K + c] = a;
            P.kbp[wh * K + c] = b;
        } else {
            const int p = c - K;
            for (int i = 0; i < L; ++i) a += P.dth[((ch.tok + i) * P.H + h) * A + p];
            P.thp[wh * A + p] = a;
        }
    }
}

/* bwd_scan.cu */
ssm_status launch_bwd_prep(ssm_context * ctx, const char * op, const bw_args & P); /* prep and θ walk */
ssm_status launch_bwd_passes(ssm_context * ctx, const char * op, const bw_args & P); /* both walks */
ssm_status launch_bwd_seq(ssm_context * ctx, const char * op, const bw_args & P);
ssm_status launch_bwd_tok(ssm_context * ctx, const char * op, const bw_args & P);
/* bwd_scan.cu: dz from the forward's pregate_y (P.ypre), T = B·S tokens. */
ssm_status launch_bwd_dz(ssm_context * ctx, const char * op, const bw_args & P, long long T);
/* bwd_scan.cu: P.dyh, P.dyl (and dz where P.dz_fused) of the T tokens; dout and z in v's 16-bit
 * dtype in 16-byte rows (the chain's rule), v bf16 (mode M_BF16) or f16 (M_F16). */
ssm_status launch_bwd_gate(ssm_context * ctx, const char * op, const bw_args & P, long long T, int mode);
ssm_status launch_bwd_sums(ssm_context * ctx, const char * op, const bw_args & P, long long T, int Hq);
/* bwd_chunk.cu: the chunk sums (grads false) or the chunk gradients (grads true); with P.planes
 * the kernels of bwd_chunk_planes.cu (launch_bwd_chunk_planes) */
ssm_status launch_bwd_chunk(ssm_context * ctx, const char * op, const bw_args & P, bool grads);
ssm_status launch_bwd_chunk_planes(ssm_context * ctx, const char * op, const bw_args & P, bool grads);
/* bwd_state_chain.cu: both walks with the chunk sums of the plane entry folded in (entries
 * chained_planes*; replace launch_bwd_chunk(false) and launch_bwd_passes): P.st, P.dst, P.cl,
 * P.dhin as those two write them, by the forward's chain (state_chain.cu) on the slots P.slot and
 * the sequences P.msegs; KS (64 or 32) state columns per block; its shared memory. forward false:
 * the reverse walk alone (P.st holds the forward's chunk_states already). */
ssm_status launch_bwd_state_chain(ssm_context * ctx, const char * op, const bw_args & P, bool forward, int KS);
size_t     bwd_state_chain_smem(int A, int KS, bool z);

} /* namespace ssmi_siso_bwd */

#endif /* SSMI_CUDA_SISO_BWD_CUH */
