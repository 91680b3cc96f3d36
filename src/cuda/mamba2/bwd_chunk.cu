/*
 * bwd_chunk.cu — the per-(chunk, head) kernels of the Mamba-2 combined backward (bwd.cuh lists
 * the steps): the dt recompute, the chunk-local states, the state gradients through the outputs,
 * and the chunk's gradients (spec §2.7 steps 0 and 3–6, per head). One block of kThreads threads
 * per (chunk, head): blockIdx.x the chunk of the plan, blockIdx.y the head (the dt recompute:
 * every head; the others: the head of the current head batch, h0 + blockIdx.y). Row operands of the
 * chunk live in shared memory as fp32 (and, where they fit, the chunk's state and state gradient);
 * the products are register-tiled over all threads (block_tiles). Every sum runs in a fixed
 * order, independent of the thread count.
 */
#include "../../core/ssmi_scalar.h"
#include "../common/mma.cuh"
#include "bwd.cuh"

namespace ssmi_m2bwd {
namespace {

/* Processed dt of one token and the dt chain factor of §2.1 backward: softplus below the
 * threshold, then the clamp; the factor is σ(pre) under softplus (1 otherwise) and 0 where the
 * clamp is active, tested before clamping. */
__device__ __forceinline__ float process_dt(const bw_args & a, float pre, float * fac) {
    const bool  sp = a.softplus && pre <= (float)SSMI_SOFTPLUS_THRESHOLD;
    const float u = sp ? log1pf(expf(pre)) : pre;
    float       v = u;
    if (v < a.lo) v = a.lo;
    if (v > a.hi) v = a.hi;
    float f = sp ? 1.0f / (1.0f + expf(-pre)) : 1.0f;
    if (u < a.lo || u > a.hi) f = 0.0f;
    *fac = f;
    return v;
}

/* dt of a block of kDtHeads heads over one chunk, its inclusive fp32 cumsum times A, the chain
 * factor, the row weights of the state products (e^{cl−cm}·dt and e^{cm}, which the state-parts
 * kernel reads once per head instead of forming them) and the chunk's total decay e^{cl} (cl = the
 * cumsum at its last token) for the state passes. Block (chunk, head tile): the threads first
 * process every (token, head) element (a token's heads are adjacent in dt), then thread j sums head
 * j's tokens in order (the one serial part, from shared memory), then the block writes the tile's
 * [heads][Q] rows of dt, cm, the factor and the weights, which are contiguous in the workspace.
 * Every value depends on its (chunk, head) alone (process_dt, then the running sum in token order),
 * so the bytes depend on neither the grid nor the head tile. */
constexpr int kDtHeads = 32;
__global__ void __launch_bounds__(kThreads) bwd_dt_kernel(bw_args a) {
    /* dt, cm and the factor per (head, token); the + 1 keeps the per-head columns off one bank */
    __shared__ float sv[kDtHeads][kMaxQ + 1], sc[kDtHeads][kMaxQ + 1], sf[kDtHeads][kMaxQ + 1];
    const long long ci = blockIdx.x;
    const int       h0 = (int)blockIdx.y * kDtHeads, nh = min(kDtHeads, a.H - h0), Q = a.Q;
    const bw_chunk  ck = a.chunks[ci];
    for (int e = threadIdx.x; e < Q * nh; e += blockDim.x) { /* element (token i, head h0 + j) */
        const int i = e / nh, j = e % nh, h = h0 + j;
        float     v = 0.0f, f = 0.0f;
        if (i < ck.len) {
            const float bias = a.has_bias ? ssmi_cu_ld(a.bias.p, a.bias.dtype, (long long)h * a.bias.s[0]) : 0.0f;
            v = process_dt(a, ssmi_cu_ld(a.dt.p, a.dt.dtype, off3(a.dt.s, ck.row, ck.t0 + i, h)) + bias, &f);
        }
        sv[j][i] = v, sf[j][i] = f;
    }
    __syncthreads();
    if (threadIdx.x < nh) {
        const int   j = threadIdx.x;
        const float ah = ssmi_cu_ld(a.a.p, a.a.dtype, (long long)(h0 + j) * a.a.s[0]);
        float       run = 0.0f;
        for (int i = 0; i < Q; ++i) {
            if (i < ck.len) run += sv[j][i] * ah;
            sc[j][i] = run;
        }
        a.ecl[ci * a.H + h0 + j] = expf(run); /* run = cm at the last token: tokens ≥ len add nothing */
    }
    __syncthreads();
    const long long base = (ci * a.H + h0) * Q; /* rows h0 .. h0 + nh − 1 of the chunk, [Q] each */
    for (int e = threadIdx.x; e < nh * Q; e += blockDim.x) {
        const int  j = e / Q, i = e % Q;
        const bool in = i < ck.len;
        a.dtv[base + e] = sv[j][i], a.cmv[base + e] = sc[j][i], a.dfac[base + e] = sf[j][i];
        a.wdb[base + e] = in ? expf(sc[j][Q - 1] - sc[j][i]) * sv[j][i] : 0.0f; /* sc[j][Q − 1] = cl */
        a.wdc[base + e] = in ? expf(sc[j][i]) : 0.0f;
    }
}

/* Loads a thread keeps in flight while filling shared memory: all of a batch are issued before
 * any is stored (the kernels run few blocks per SM, so latency is hidden by batching). */
const int kLoadBatch = 16;

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(double v) { return (float)v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

/* load_rows of NV views of one element type and the same row length n: 16-bit rows with unit
 * stride, n % 8 = 0 and 16-byte aligned row starts as 16-byte loads (8 elements per thread and
 * piece; dst rows 16-byte aligned too), else thread t handles the elements e ≡ t (mod blockDim.x),
 * e < Q·n; a batch issues its loads of all NV views before storing any. */
template <class T, int NV>
__device__ __forceinline__ void load_rows_of(float * const (&dst)[NV], int ld, const ssmi_cu_view (&v)[NV],
                                             const bw_chunk & ck, int k, int n, int Q, const float * scale) {
    if constexpr (sizeof(T) == 2) { /* 16-bit rows in 16-byte pieces where every view allows */
        bool vec = n % 8 == 0 && ld % 4 == 0;
#pragma unroll
        for (int s = 0; s < NV; ++s)
            vec = vec && rows16(v[s]) && ((uintptr_t)dst[s] & 15) == 0;
        if (vec) {
            constexpr int kV = 4; /* pieces of each view in flight per thread */
            const int     n8 = n / 8, total8 = Q * n8;
            for (int e0 = threadIdx.x; e0 < total8; e0 += kV * blockDim.x) {
                uint4 val[NV][kV];
#pragma unroll
                for (int u = 0; u < kV; ++u) {
                    const int e = e0 + u * (int)blockDim.x, i = e / n8, j = (e % n8) * 8;
#pragma unroll
                    for (int s = 0; s < NV; ++s)
                        val[s][u] = (e < total8 && i < ck.len)
                                        ? *(const uint4 *)((const T *)v[s].p + off4(v[s].s, ck.row, ck.t0 + i, k, j))
                                        : make_uint4(0u, 0u, 0u, 0u);
                }
#pragma unroll
                for (int u = 0; u < kV; ++u) {
                    const int e = e0 + u * (int)blockDim.x, i = e / n8, j = (e % n8) * 8;
                    if (e >= total8) continue;
#pragma unroll
                    for (int s = 0; s < NV; ++s) {
                        const T * hv = reinterpret_cast<const T *>(&val[s][u]);
                        float     f[8];
#pragma unroll
                        for (int c = 0; c < 8; ++c) f[c] = scale != NULL ? to_f32(hv[c]) * scale[i] : to_f32(hv[c]);
                        *(float4 *)&dst[s][i * ld + j] = make_float4(f[0], f[1], f[2], f[3]);
                        *(float4 *)&dst[s][i * ld + j + 4] = make_float4(f[4], f[5], f[6], f[7]);
                    }
                }
            }
            return;
        }
    }
    constexpr int kB = kLoadBatch / NV;
    const int     total = Q * n;
    for (int e0 = threadIdx.x; e0 < total; e0 += kB * blockDim.x) {
        float val[NV][kB];
#pragma unroll
        for (int u = 0; u < kB; ++u) {
            const int e = e0 + u * (int)blockDim.x, i = e / n, j = e % n;
#pragma unroll
            for (int s = 0; s < NV; ++s)
                val[s][u] = (e < total && i < ck.len) ? to_f32(((const T *)v[s].p)[off4(v[s].s, ck.row, ck.t0 + i, k, j)])
                                                      : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kB; ++u) {
            const int e = e0 + u * (int)blockDim.x, i = e / n, j = e % n;
            if (e < total)
#pragma unroll
                for (int s = 0; s < NV; ++s) dst[s][i * ld + j] = scale != NULL ? val[s][u] * scale[i] : val[s][u];
        }
    }
}

/* Rows [0, len) of head/group k of NV (batch, S, K, n) views into dst[s][Q][ld] as fp32 (times
 * scale[i] when given), zeros for rows ≥ len (and for a dtype the views do not carry). Which
 * thread writes an element depends on the layout: a barrier orders the rows for other uses.
 * Views of one dtype load together. */
template <int NV>
__device__ __forceinline__ void load_rows_n(float * const (&dst)[NV], int ld, const ssmi_cu_view (&v)[NV],
                                            const bw_chunk & ck, int k, int n, int Q, const float * scale) {
    bool same = true;
#pragma unroll
    for (int s = 1; s < NV; ++s) same = same && v[s].dtype == v[0].dtype;
    if (same) switch (v[0].dtype) {
            case SSM_DTYPE_F32: load_rows_of<float, NV>(dst, ld, v, ck, k, n, Q, scale); return;
            case SSM_DTYPE_F16: load_rows_of<__half, NV>(dst, ld, v, ck, k, n, Q, scale); return;
            case SSM_DTYPE_BF16: load_rows_of<__nv_bfloat16, NV>(dst, ld, v, ck, k, n, Q, scale); return;
            case SSM_DTYPE_F64: load_rows_of<double, NV>(dst, ld, v, ck, k, n, Q, scale); return;
            default: break;
        }
#pragma unroll
    for (int s = 0; s < NV; ++s) {
        float * const d1[1] = {dst[s]};
        const ssmi_cu_view v1[1] = {v[s]};
        switch (v[s].dtype) {
            case SSM_DTYPE_F32: load_rows_of<float, 1>(d1, ld, v1, ck, k, n, Q, scale); break;
            case SSM_DTYPE_F16: load_rows_of<__half, 1>(d1, ld, v1, ck, k, n, Q, scale); break;
            case SSM_DTYPE_BF16: load_rows_of<__nv_bfloat16, 1>(d1, ld, v1, ck, k, n, Q, scale); break;
            case SSM_DTYPE_F64: load_rows_of<double, 1>(d1, ld, v1, ck, k, n, Q, scale); break;
            default:
                for (int e = threadIdx.x; e < Q * n; e += blockDim.x) dst[s][(e / n) * ld + e % n] = 0.0f;
        }
    }
}

/* load_rows_n of one view. */
__device__ __forceinline__ void load_rows(float * dst, int ld, const ssmi_cu_view & v, const bw_chunk & ck, int k,
                                          int n, int Q, const float * scale) {
    float * const      d1[1] = {dst};
    const ssmi_cu_view v1[1] = {v};
    load_rows_n<1>(d1, ld, v1, ck, k, n, Q, scale);
}

/* In place over the [Q][ld] rows of dout (dys) and z (zs, absent without z), after a barrier
 * that publishes them: dys becomes δx = dout·z·σ(z) (dout without z) and, where dzf is given,
 * dzf gets the dz factor dout·σ(z)(1 + z(1 − σ(z))) (0 without z). */
__device__ __forceinline__ void gate_rows(float * dys, const float * zs, float * dzf, int ld, int n, int Q) {
    for (int e = threadIdx.x; e < Q * n; e += blockDim.x) {
        const int   o = (e / n) * ld + e % n;
        const float dout = dys[o];
        float       f = 0.0f;
        if (zs != NULL) {
            const float z = zs[o], sg = 1.0f / (1.0f + expf(-z));
            f = dout * sg * (1.0f + z * (1.0f - sg));
            dys[o] = dout * z * sg;
        }
        if (dzf != NULL) dzf[o] = f;
    }
}

/* The products below accumulate acc[r][c] += Σ_{k<K} A(m[r], k)·B(k, n[c]) over k ascending, one
 * fmaf per term into one accumulator per output, whichever way the operands are read. */

/* Operands read through functors fa(m, k), fb(k, n). */
template <int TM, int TN, class FA, class FB>
__device__ __forceinline__ void tile_mac(float (&acc)[TM][TN], const int (&m)[TM], const int (&n)[TN], int K, FA fa,
                                         FB fb) {
#pragma unroll 2
    for (int k = 0; k < K; ++k) {
        float av[TM], bv[TN];
#pragma unroll
        for (int r = 0; r < TM; ++r) av[r] = fa(m[r], k);
#pragma unroll
        for (int c = 0; c < TN; ++c) bv[c] = fb(k, n[c]);
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
            for (int c = 0; c < TN; ++c) acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
    }
}

__device__ __forceinline__ float f4at(const float4 & v, int u) { return u == 0 ? v.x : u == 1 ? v.y : u == 2 ? v.z : v.w; }

/* A(m, k) = A[m·lda + k], contiguous in k (A and lda multiples of 4 floats: pad_ld rows in
 * shared memory), read 4 k at a time as one float4; B through fb(k, n). */
template <int TM, int TN, class FB>
__device__ __forceinline__ void tile_mac_a4(float (&acc)[TM][TN], const int (&m)[TM], const int (&n)[TN], int K,
                                            const float * A, int lda, FB fb) {
    const int K4 = K / 4 * 4;
    for (int k = 0; k < K4; k += 4) {
        float4 av[TM];
#pragma unroll
        for (int r = 0; r < TM; ++r) av[r] = *(const float4 *)(A + m[r] * lda + k);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            float bv[TN];
#pragma unroll
            for (int c = 0; c < TN; ++c) bv[c] = fb(k + u, n[c]);
#pragma unroll
            for (int r = 0; r < TM; ++r)
#pragma unroll
                for (int c = 0; c < TN; ++c) acc[r][c] = fmaf(f4at(av[r], u), bv[c], acc[r][c]);
        }
    }
    for (int k = K4; k < K; ++k)
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
            for (int c = 0; c < TN; ++c) acc[r][c] = fmaf(A[m[r] * lda + k], fb(k, n[c]), acc[r][c]);
}

/* A(m, k) = A[m·lda + k] and B(k, n) = B[n·ldb + k], both contiguous in k and read as float4. */
template <int TM, int TN>
__device__ __forceinline__ void tile_mac_k4(float (&acc)[TM][TN], const int (&m)[TM], const int (&n)[TN], int K,
                                            const float * A, int lda, const float * B, int ldb) {
    const int K4 = K / 4 * 4;
    for (int k = 0; k < K4; k += 4) {
        float4 av[TM], bv[TN];
#pragma unroll
        for (int r = 0; r < TM; ++r) av[r] = *(const float4 *)(A + m[r] * lda + k);
#pragma unroll
        for (int c = 0; c < TN; ++c) bv[c] = *(const float4 *)(B + n[c] * ldb + k);
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
            for (int c = 0; c < TN; ++c) {
                float v = fmaf(av[r].x, bv[c].x, acc[r][c]);
                v = fmaf(av[r].y, bv[c].y, v);
                v = fmaf(av[r].z, bv[c].z, v);
                acc[r][c] = fmaf(av[r].w, bv[c].w, v);
            }
    }
    for (int k = K4; k < K; ++k)
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
            for (int c = 0; c < TN; ++c) acc[r][c] = fmaf(A[m[r] * lda + k], B[n[c] * ldb + k], acc[r][c]);
}

/* Register-tiled block product over shared-memory operands: for every m < M, n < Nc,
 *   out(m, n, scale(m)·sum1(m, n) + sum2(m, n))   (kTwo = false: out(m, n, sum1(m, n))),
 * the sums accumulated by mac1(acc, m, n) and mac2(acc, m, n) (one of the tile_mac* above), so
 * the bytes do not depend on the thread count. A thread's tile is TM consecutive rows × TN
 * columns cg apart (cg = the number of column groups): consecutive threads read consecutive
 * columns of B, and rows of A that pad_ld strides put in distinct banks. Indices past M or Nc
 * are clamped for the reads and their outputs dropped. */
template <int TM, int TN, bool kTwo, class F1, class FS, class F2, class FO>
__device__ __forceinline__ void block_tiles(int M, int Nc, F1 mac1, FS scale, F2 mac2, FO out) {
    if (M <= 0 || Nc <= 0) return;
    const int cg = (Nc + TN - 1) / TN, tiles = cg * ((M + TM - 1) / TM);
    for (int t = threadIdx.x; t < tiles; t += blockDim.x) {
        const int m0 = (t / cg) * TM, n0 = t % cg;
        int       m[TM], n[TN];
#pragma unroll
        for (int r = 0; r < TM; ++r) m[r] = min(m0 + r, M - 1);
#pragma unroll
        for (int c = 0; c < TN; ++c) n[c] = min(n0 + c * cg, Nc - 1);
        float acc[TM][TN];
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
            for (int c = 0; c < TN; ++c) acc[r][c] = 0.0f;
        mac1(acc, m, n);
        if (kTwo) {
#pragma unroll
            for (int r = 0; r < TM; ++r) {
                const float sc = scale(m[r]);
#pragma unroll
                for (int c = 0; c < TN; ++c) acc[r][c] *= sc;
            }
            mac2(acc, m, n);
        }
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
            for (int c = 0; c < TN; ++c)
                if (m0 + r < M && n0 + c * cg < Nc) out(m0 + r, n0 + c * cg, acc[r][c]);
    }
}

/* out(m, n, Σ_{k<K} fa(m, k)·fb(k, n)). */
template <int TM, int TN, class FA, class FB, class FO>
__device__ __forceinline__ void block_mm(int M, int Nc, int K, FA fa, FB fb, FO out) {
    auto mac = [&](float (&acc)[TM][TN], const int (&m)[TM], const int (&n)[TN]) { tile_mac<TM, TN>(acc, m, n, K, fa, fb); };
    auto one = [](int) { return 1.0f; };
    block_tiles<TM, TN, false>(M, Nc, mac, one, mac, out);
}

/* out(m, n, Σ_{k<K} A[m·lda + k]·B[n·ldb + k]) over k-contiguous shared-memory operands. */
template <int TM, int TN, class FO>
__device__ __forceinline__ void block_mm_k4(int M, int Nc, int K, const float * A, int lda, const float * B, int ldb,
                                            FO out) {
    auto mac = [&](float (&acc)[TM][TN], const int (&m)[TM], const int (&n)[TN]) {
        tile_mac_k4<TM, TN>(acc, m, n, K, A, lda, B, ldb);
    };
    auto one = [](int) { return 1.0f; };
    block_tiles<TM, TN, false>(M, Nc, mac, one, mac, out);
}

/* Tensor-core products (the 16-bit entries): out(m, n, Σ_{k<K} A(m, k)·B(k, n)) by mma.sync
 * m16n8k16 on bf16 operands with fp32 accumulators. The operands are fp32 values read through
 * fa(m, k), fb(k, n); an operand flagged `split` goes in as its bf16 rounding plus the bf16
 * rounding of the remainder (three products hi·hi + hi·lo + lo·hi with both split, the lo·lo
 * term, ~2^-16 relative, dropped), one that is not goes in rounded, so only values exact in
 * bf16 (the bf16 inputs) may be unflagged. A warp computes a 16 × 8·TN tile, its TN n8 tiles
 * sharing the A fragment; the tiles go round-robin over the warps. Indices past M, Nc or K
 * read as zero (nothing outside is read), outputs past M, Nc are dropped. Each output's sum
 * runs k ascending in steps of 16, the terms of a step in the mma's fixed order: the bytes
 * depend on neither the thread count nor the run. Fragment layout of m16n8k16 (lane = 4g + t):
 * A regs (g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B regs (k 2t.., n g), (k 2t+8.., n g);
 * C (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1). KU: the k steps unrolled (more loads in
 * flight where an operand comes from global memory). */
template <int TN, int KU = 2, class FA, class FB>
__device__ __forceinline__ void warp_mma(float (&c)[TN][4], int m0, int n0, int M, int Nc, int K, bool sa, bool sb,
                                         FA fa, FB fb) {
    using namespace ssmi_mma;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll KU
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t ah[4], al[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int   m = m0 + g + (r & 1) * 8, k = k0 + 2 * t + (r >> 1) * 8;
            const float v0 = (m < M && k < K) ? fa(m, k) : 0.0f;
            const float v1 = (m < M && k + 1 < K) ? fa(m, k + 1) : 0.0f;
            split2<M_BF16>(v0, v1, ah[r], al[r]);
        }
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int n = n0 + 8 * j + g;
            uint32_t  bh[2], bl[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int   k = k0 + 2 * t + r * 8;
                const float v0 = (n < Nc && k < K) ? fb(k, n) : 0.0f;
                const float v1 = (n < Nc && k + 1 < K) ? fb(k + 1, n) : 0.0f;
                split2<M_BF16>(v0, v1, bh[r], bl[r]);
            }
            mma16816<M_BF16>(c[j], ah, bh[0], bh[1]);
            if (sb) mma16816<M_BF16>(c[j], ah, bl[0], bl[1]);
            if (sa) mma16816<M_BF16>(c[j], al, bh[0], bh[1]);
        }
    }
}

/* The warp tiles of an M × Nc output: for each, acc = mac1; with kTwo, acc = scale(m)·acc,
 * then acc += mac2 (mac: warp_mma over one tile); then out(m, n, acc). */
template <int TN, bool kTwo, class F1, class FS, class F2, class FO>
__device__ __forceinline__ void block_mma_tiles(int M, int Nc, F1 mac1, FS scale, F2 mac2, FO out) {
    if (M <= 0 || Nc <= 0) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tn = (Nc + 8 * TN - 1) / (8 * TN), tiles = tn * ((M + 15) / 16);
    for (int w = threadIdx.x / 32; w < tiles; w += blockDim.x / 32) {
        const int m0 = (w / tn) * 16, n0 = (w % tn) * 8 * TN;
        float     c[TN][4];
#pragma unroll
        for (int j = 0; j < TN; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
        mac1(c, m0, n0);
        if (kTwo) {
            const float s0 = m0 + g < M ? scale(m0 + g) : 0.0f, s1 = m0 + g + 8 < M ? scale(m0 + g + 8) : 0.0f;
#pragma unroll
            for (int j = 0; j < TN; ++j) c[j][0] *= s0, c[j][1] *= s0, c[j][2] *= s1, c[j][3] *= s1;
            mac2(c, m0, n0);
        }
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int m = m0 + g + (e >> 1) * 8, n = n0 + 8 * j + 2 * t + (e & 1);
                if (m < M && n < Nc) out(m, n, c[j][e]);
            }
    }
}

/* out(m, n, Σ_{k<K} fa(m, k)·fb(k, n)) on the tensor cores (sa, sb: the operands' split flags). */
template <int TN, int KU = 2, class FA, class FB, class FO>
__device__ __forceinline__ void block_mma(int M, int Nc, int K, bool sa, bool sb, FA fa, FB fb, FO out) {
    auto mac = [&](float (&c)[TN][4], int m0, int n0) { warp_mma<TN, KU>(c, m0, n0, M, Nc, K, sa, sb, fa, fb); };
    auto one = [](int) { return 1.0f; };
    block_mma_tiles<TN, false>(M, Nc, mac, one, mac, out);
}

/* s_c[p][n] = Σ_j (e^{cl−cm_j}·dt_j·x_j[p])·B_j[n] into the state slot of (chunk, head); with
 * kMma on the tensor cores (the weighted x split, B split unless exact in bf16). */
template <bool kMma>
__global__ void __launch_bounds__(kThreads, 2) bwd_states_kernel(bw_args a) {
    extern __shared__ float sm[];
    const long long ci = blockIdx.x;
    const int       h = a.h0 + blockIdx.y, Q = a.Q, P = a.P, N = a.N, lp = pad_ld(P), ln = pad_ld(N);
    const bw_chunk  ck = a.chunks[ci];
    const long long w = ci * a.H + h;
    float *         wv = sm;          /* [Q] */
    float *         xs = wv + Q;      /* [Q][lp] */
    float *         bs = xs + Q * lp; /* [Q][ln] */
    const float *   cm = a.cmv + w * Q;
    const float     cl = cm[ck.len - 1];
    for (int i = threadIdx.x; i < Q; i += blockDim.x) wv[i] = i < ck.len ? expf(cl - cm[i]) * a.dtv[w * Q + i] : 0.0f;
    __syncthreads();
    load_rows(xs, lp, a.x, ck, h, P, Q, wv);
    load_rows(bs, ln, a.b, ck, h / a.R, N, Q, NULL);
    __syncthreads();
    float * out = a.st + state_at(a, ci, h);
    auto    fx = [=](int p, int j) { return xs[j * lp + p]; };
    auto    fb = [=](int j, int n) { return bs[j * ln + n]; };
    auto    st = [=](int p, int n, float v) { out[(long long)p * N + n] = v; };
    if constexpr (kMma)
        block_mma<2>(P, N, ck.len, true, !a.exact16, fx, fb, st);
    else
        block_mm<4, 8>(P, N, ck.len, fx, fb, st);
}

/* dS_c[p][n] = Σ_i (δx_i[p]·e^{cm_i})·C_i[n] into the state-gradient slot of (chunk, head); with
 * kMma on the tensor cores (the weighted δx split, C split unless exact in bf16). */
template <bool kMma>
__global__ void __launch_bounds__(kThreads, 2) bwd_dstates_kernel(bw_args a) {
    extern __shared__ float sm[];
    const long long ci = blockIdx.x;
    const int       h = a.h0 + blockIdx.y, Q = a.Q, P = a.P, N = a.N, lp = pad_ld(P), ln = pad_ld(N);
    const bw_chunk  ck = a.chunks[ci];
    const long long w = ci * a.H + h;
    float *         ev = sm;           /* [Q] */
    float *         dys = ev + Q;      /* [Q][lp] */
    float *         zs = dys + Q * lp; /* [Q][lp] */
    float *         cs = zs + Q * lp;  /* [Q][ln] */
    const float *   cm = a.cmv + w * Q;
    for (int i = threadIdx.x; i < Q; i += blockDim.x) ev[i] = i < ck.len ? expf(cm[i]) : 0.0f;
    if (a.has_z) {
        float * const      d[2] = {dys, zs};
        const ssmi_cu_view v[2] = {a.dout, a.z};
        load_rows_n<2>(d, lp, v, ck, h, P, Q, NULL);
    } else {
        load_rows(dys, lp, a.dout, ck, h, P, Q, NULL);
    }
    load_rows(cs, ln, a.c, ck, h / a.R, N, Q, NULL);
    __syncthreads();
    gate_rows(dys, a.has_z ? zs : NULL, NULL, lp, P, Q);
    __syncthreads();
    float * out = a.gs + state_at(a, ci, h);
    auto    fd = [=](int p, int i) { return dys[i * lp + p] * ev[i]; };
    auto    fc = [=](int i, int n) { return cs[i * ln + n]; };
    auto    st = [=](int p, int n, float v) { out[(long long)p * N + n] = v; };
    if constexpr (kMma)
        block_mma<2>(P, N, ck.len, true, !a.exact16, fd, fc, st);
    else
        block_mm<4, 8>(P, N, ck.len, fd, fc, st);
}

/* The state S and the state gradient G at offset so of st and gs ([P][N] rows) into dst as
 * [2][P][ld] (S, then G), ld a multiple of 4 floats. With N % 4 = 0 as asynchronous 16-byte
 * copies (rows and slots 16-byte aligned; cp_async_wait_all before the barrier that publishes
 * them), else by plain loads, kLoadBatch elements of each in flight per thread. */
__device__ __forceinline__ void stage_state(float * dst, int ld, const bw_args & a, long long so) {
    const int       P = a.P, N = a.N;
    const long long PN = (long long)P * N;
    if (N % 4 == 0) {
        const int n4 = N / 4, per = P * n4;
        for (int e = threadIdx.x; e < 2 * per; e += blockDim.x) {
            const int which = e / per, p = (e % per) / n4, c = e % n4;
            ssmi_mma::cp_async16(dst + which * P * ld + p * ld + 4 * c,
                                 (which ? a.gs : a.st) + so + (long long)p * N + 4 * c);
        }
        return;
    }
    for (long long e0 = threadIdx.x; e0 < PN; e0 += kLoadBatch * (long long)blockDim.x) {
        float sv[kLoadBatch], gv[kLoadBatch];
#pragma unroll
        for (int u = 0; u < kLoadBatch; ++u) {
            const long long e = e0 + u * (long long)blockDim.x;
            sv[u] = e < PN ? a.st[so + e] : 0.0f;
            gv[u] = e < PN ? a.gs[so + e] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kLoadBatch; ++u) {
            const long long e = e0 + u * (long long)blockDim.x;
            if (e < PN) {
                const int p = (int)(e / N), n = (int)(e % N);
                dst[p * ld + n] = sv[u];
                dst[P * ld + p * ld + n] = gv[u];
            }
        }
    }
}

/* The chunk's gradients for one head (spec §2.7, per head; see bwd.cuh). With S = the entering
 * state and G = ∂L/∂S_{c+1} (both [P][N] in the workspace):
 *   y     = e^{cm_i}·C_i·S + Σ_{j≤i} CB_ij·e^{cm_i−cm_j}·dt_j·x_j + D·x_i   (only for dz)
 *   δx    = dout·silu(z) or dout;   dz = dout·y·σ(z)(1 + z(1 − σ(z)))
 *   acc_i = e^{cl−cm_i}·G·B_i + Σ_{k≥i} CB_ki·e^{cm_k−cm_i}·δx_k;  dx = acc·dt + D·δx
 *   ddt_loc_i = <acc_i, x_i>;  r_j = dt_j·<x_j, state part of acc_j>;  q_i = e^{cm_i}·<δx_i, S·C_i>
 *   dCB_ij = e^{cm_i−cm_j}·dt_j·<δx_i, x_j> (j ≤ i);  intra_k = Σ_{i≥k} Σ_{j<k} CB_ij·dCB_ij
 *   ddA_k = Σ_{i≥k} q_i + e^{cl}·<G, S> + Σ_{j<k} r_j + intra_k;  ddt = (ddA·A + ddt_loc)·fac
 *   dB_j  = e^{cl−cm_j}·dt_j·Gᵀx_j + Σ_{i≥j} dCB_ij·C_i;  dC_i = e^{cm_i}·Sᵀδx_i + Σ_{j≤i} dCB_ij·B_j
 * Every operand lives in shared memory (chunk_smem_floats lists the layout), rows pad_ld floats
 * apart; with kStaged S and G are staged there too (cp.async or coalesced loads, once), else
 * they are read from the workspace (with kMma, for phase C staged over the operands phase B
 * leaves dead, where they fit). The products run as register-tiled block_tiles calls over
 * all threads (k-contiguous operands read as float4), or with kMma on the tensor cores
 * (block_mma: bf16 operands, fp32 intermediates split, see warp_mma), the row sums as a warp per
 * row; the phases are separated by barriers:
 *   load  rows, δx, dz factor, S, G
 *   A     CB and CB∘E (E_ij = e^{cm_i−cm_j}, j ≤ i), C·Sᵀ, B·Gᵀ (into bg), dCB, dD partials, <G, S>
 *         (in C instead where S and G are staged for it)
 *   B1    q, r (from bg), intra
 *   B2    dz, acc (in place of bg: each element read and written by one thread) and dx
 *   C     ddt_loc, dB, dC;  then warp 0 runs the ddA recurrence (dda_tail: ddt, dA/ddt_bias partials). */
template <bool kStaged, bool kMma>
__global__ void __launch_bounds__(kThreads, 1) bwd_chunk_kernel(bw_args a) {
    static_assert(!(kStaged && kMma), "chunked_mma reads S and G from the workspace (staging them for phase C)");
    extern __shared__ float4 sm4[]; /* 16-byte aligned: the matrices' float4 reads */
    float * const sm = (float *)sm4;
    const long long ci = blockIdx.x;
    const int       h = a.h0 + blockIdx.y, Q = a.Q, P = a.P, N = a.N, g = h / a.R;
    const int       lp = pad_ld(P), ln = pad_ld(N), lq = pad_ld(Q);
    const bw_chunk  ck = a.chunks[ci];
    const int       L = ck.len;
    const long long w = ci * a.H + h, so = state_at(a, ci, h);
    const int       lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    float *xs = sm, *dys = xs + Q * lp, *bg = dys + Q * lp;              /* [Q][lp] each; acc = bg */
    float *bs = bg + Q * lp, *cs = bs + Q * ln;                          /* [Q][ln] each */
    float *yst = cs + Q * ln, *dzf = yst + Q * lp;                       /* [Q][lp] each */
    float *cb = dzf + Q * lp, *cbx = cb + Q * lq, *dcb = cbx + Q * lq;   /* [Q][lq] each */
    float *stg = dcb + Q * lq;                                           /* kStaged: S, G [P][ln] */
    float *dtv = stg + (kStaged ? 2 * P * ln : 0), *fac = dtv + Q, *ecm = fac + Q, *eclm = ecm + Q;
    float *cms = eclm + Q; /* [Q]: cm */
    float *q = cms + Q, *r = q + Q, *dtl = r + Q, *intra = dtl + Q;
    float *dvec = intra + Q, *red = dvec + P;
    const float * S = kStaged ? stg : a.st + so;
    const float * Gm = kStaged ? stg + P * ln : a.gs + so;
    const int     ls = kStaged ? ln : N; /* row stride of S and G */
    /* kMma without kStaged: where they fit there, S and G are staged for phase C over yst, dzf,
     * cb and cbx (contiguous, dead after phase B) */
    const bool    late = kMma && !kStaged && 2 * P * ln <= 2 * Q * (lp + lq);
    /* kMma: the split flags of the operands that are not bf16 inputs (δx: dout·silu(z) with z) */
    const bool    sx = !a.exact16, sd = !a.exact16 || a.has_z;

    /* load; S and G first (with N % 4 = 0 as asynchronous copies that land while the row
     * operands load) */
    if (kStaged) stage_state(stg, ln, a, so);
    const float * cmg = a.cmv + w * Q;
    const float   cl = cmg[L - 1];
    for (int i = threadIdx.x; i < Q; i += blockDim.x) {
        const float c = cmg[i];
        dtv[i] = a.dtv[w * Q + i], fac[i] = a.dfac[w * Q + i], cms[i] = c;
        ecm[i] = i < L ? expf(c) : 0.0f;
        eclm[i] = i < L ? expf(cl - c) : 0.0f;
    }
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        float dv = 0.0f;
        if (a.has_d)
            dv = a.d2 ? ssmi_cu_ld(a.d.p, a.d.dtype, off2(a.d.s, h, p))
                      : ssmi_cu_ld(a.d.p, a.d.dtype, (long long)h * a.d.s[0]);
        dvec[p] = dv;
    }
    /* x, dout (into dys) and z (into dzf); dys and dzf then become δx and the dz factor */
    if (a.has_z) {
        float * const      d[3] = {xs, dys, dzf};
        const ssmi_cu_view v[3] = {a.x, a.dout, a.z};
        load_rows_n<3>(d, lp, v, ck, h, P, Q, NULL);
    } else {
        float * const      d[2] = {xs, dys};
        const ssmi_cu_view v[2] = {a.x, a.dout};
        load_rows_n<2>(d, lp, v, ck, h, P, Q, NULL);
    }
    {
        float * const      d[2] = {bs, cs};
        const ssmi_cu_view v[2] = {a.b, a.c};
        load_rows_n<2>(d, ln, v, ck, g, N, Q, NULL);
    }
    __syncthreads();
    gate_rows(dys, a.has_z ? dzf : NULL, a.has_z ? dzf : NULL, lp, P, Q);
    ssmi_mma::cp_async_wait_all();
    __syncthreads();

    /* A: CB (causal) and CB∘E; C·Sᵀ; e^{cl−cm_i}·B·Gᵀ; dCB; dD partials; e^{cl}·<G, S> */
    auto to_cb = [=](int i, int j, float v) { /* i, j < L */
        const bool in = j <= i;
        cb[i * lq + j] = in ? v : 0.0f;
        cbx[i * lq + j] = in ? v * expf(cms[i] - cms[j]) : 0.0f;
    };
    auto to_yst = [=](int i, int p, float v) { yst[i * lp + p] = v; };
    auto to_bg = [=](int i, int p, float v) { bg[i * lp + p] = eclm[i] * v; };
    auto to_dcb = [=](int i, int j, float v) { dcb[i * lq + j] = j <= i ? v * (expf(cms[i] - cms[j]) * dtv[j]) : 0.0f; };
    if constexpr (kMma) {
        auto fc = [=](int i, int n) { return cs[i * ln + n]; };
        auto fb = [=](int i, int n) { return bs[i * ln + n]; };
        block_mma<1>(L, L, N, sx, sx, fc, [=](int n, int j) { return bs[j * ln + n]; }, to_cb);
        constexpr int ku = 8; /* S and G from global memory: more loads in flight */
        block_mma<2, ku>(L, P, N, sx, true, fc, [=](int n, int p) { return S[p * ls + n]; }, to_yst);
        block_mma<2, ku>(L, P, N, sx, true, fb, [=](int n, int p) { return Gm[p * ls + n]; }, to_bg);
        block_mma<1>(
            L, L, P, sd, sx, [=](int i, int p) { return dys[i * lp + p]; }, [=](int p, int j) { return xs[j * lp + p]; },
            to_dcb);
    } else if constexpr (kStaged) {
        block_mm_k4<2, 2>(L, L, N, cs, ln, bs, ln, to_cb);
        block_mm_k4<2, 4>(L, P, N, cs, ln, S, ls, to_yst);
        block_mm_k4<2, 4>(L, P, N, bs, ln, Gm, ls, to_bg);
        block_mm_k4<2, 2>(L, L, P, dys, lp, xs, lp, to_dcb);
    } else {
        block_mm_k4<2, 2>(L, L, N, cs, ln, bs, ln, to_cb);
        block_mm<2, 4>(
            L, P, N, [=](int i, int n) { return cs[i * ln + n]; }, [=](int n, int p) { return S[p * ls + n]; },
            to_yst);
        block_mm<2, 4>(
            L, P, N, [=](int i, int n) { return bs[i * ln + n]; }, [=](int n, int p) { return Gm[p * ls + n]; },
            to_bg);
        block_mm_k4<2, 2>(L, L, P, dys, lp, xs, lp, to_dcb);
    }
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        float s = 0.0f;
        for (int i = 0; i < L; ++i) s += dys[i * lp + p] * xs[i * lp + p];
        a.ddp[w * P + p] = s;
    }
    /* e^{cl}·<G, S>: here from S and G as phase A reads them (block_sum's barriers end phase A),
     * or, where they are staged for phase C, from the staged copies there */
    float total = 0.0f;
    if (late) {
        __syncthreads();
    } else {
        float part = 0.0f;
        for (int e = threadIdx.x; e < P * N; e += blockDim.x) {
            const int p = e / N, n = e % N;
            part += Gm[p * ls + n] * S[p * ls + n];
        }
        total = expf(cl) * block_sum(part, red);
    }

    /* B1: q, r (bg still the state part of acc); intra */
    for (int i = warp; i < Q; i += nwarps) {
        float sq = 0.0f, sr = 0.0f;
        if (i < L)
            for (int p = lane; p < P; p += 32) {
                sq += dys[i * lp + p] * yst[i * lp + p];
                sr += xs[i * lp + p] * bg[i * lp + p];
            }
        sq = warp_sum(sq), sr = warp_sum(sr);
        if (lane == 0) q[i] = ecm[i] * sq, r[i] = dtv[i] * sr;
        /* intra_i: the pairs (k, j), i ≤ k < L, j < i, flattened k-major (t = (k − i)·i + j), lane
         * t ≡ lane (mod 32); (k, j) steps with t by 32 = (32 / i)·i + 32 % i, no division inside */
        const int np = i < L ? (L - i) * i : 0;
        float     in = 0.0f;
        if (np > 0) {
            const int q32 = 32 / i, r32 = 32 % i;
            int       k = i + lane / i, j = lane % i;
            for (int t = lane; t < np; t += 32) {
                in += cb[k * lq + j] * dcb[k * lq + j];
                k += q32, j += r32;
                if (j >= i) j -= i, ++k;
            }
        }
        in = warp_sum(in);
        if (lane == 0) intra[i] = in;
    }
    __syncthreads();

    /* B2: dz; acc (state part + intra part, over bg) and dx */
    {
        auto fcbd = [=](int i, int j) { return cbx[i * lq + j] * dtv[j]; };
        auto fx = [=](int j, int p) { return xs[j * lp + p]; };
        auto to_dz = [&](int i, int p, float v) {
            const float y = ecm[i] * yst[i * lp + p] + dvec[p] * xs[i * lp + p] + v;
            ssmi_cu_st(a.dz.p, a.dz.dtype, off4(a.dz.s, ck.row, ck.t0 + i, h, p), dzf[i * lp + p] * y);
        };
        auto fcbx = [=](int i, int k) { return cbx[k * lq + i]; };
        auto fd = [=](int k, int p) { return dys[k * lp + p]; };
        auto to_acc = [&](int i, int p, float v) {
            const float s = bg[i * lp + p] + v;
            bg[i * lp + p] = s;
            if (a.dx.p != NULL)
                ssmi_cu_st(a.dx.p, a.dx.dtype, off4(a.dx.s, ck.row, ck.t0 + i, h, p),
                           s * dtv[i] + dvec[p] * dys[i * lp + p]);
        };
        if constexpr (kMma) {
            if (a.has_z && a.want_dz) block_mma<2>(L, P, L, true, sx, fcbd, fx, to_dz);
            block_mma<2>(L, P, L, true, sd, fcbx, fd, to_acc);
        } else {
            if (a.has_z && a.want_dz) block_mm<2, 4>(L, P, L, fcbd, fx, to_dz);
            block_mm<2, 4>(L, P, L, fcbx, fd, to_acc);
        }
    }
    __syncthreads();

    /* C: ddt_loc; dB and dC of this head (the output with one head per group, else the head buffer) */
    if (late) stage_state(yst, ln, a, so);
    for (int i = warp; i < Q; i += nwarps) {
        float s = 0.0f;
        if (i < L)
            for (int p = lane; p < P; p += 32) s += bg[i * lp + p] * xs[i * lp + p];
        s = warp_sum(s);
        if (lane == 0) dtl[i] = s;
    }
    if (late) {
        ssmi_mma::cp_async_wait_all();
        __syncthreads();
        float part = 0.0f; /* a warp per row p, lanes over n */
        for (int p = warp; p < P; p += nwarps)
            for (int n = lane; n < N; n += 32) part += yst[P * ln + p * ln + n] * yst[p * ln + n];
        total = expf(cl) * block_sum(part, red);
    }
    auto db_out = [&](int j, int n, float v) {
        if (a.parts != 1)
            a.dbh[((ck.row * a.S + ck.t0 + j) * a.H + h) * (long long)N + n] = v;
        else
            ssmi_cu_st(a.db.p, a.db.dtype, off4(a.db.s, ck.row, ck.t0 + j, g, n), v);
    };
    auto dc_out = [&](int i, int n, float v) {
        if (a.parts != 1)
            a.dch[((ck.row * a.S + ck.t0 + i) * a.H + h) * (long long)N + n] = v;
        else
            ssmi_cu_st(a.dc.p, a.dc.dtype, off4(a.dc.s, ck.row, ck.t0 + i, g, n), v);
    };
    if constexpr (kMma) {
        const float * Sc = late ? yst : S; /* S and G for phase C, and their row stride */
        const float * Gc = late ? yst + P * ln : Gm;
        const int     lc = late ? ln : ls;
        auto          fcs = [=](int i, int n) { return cs[i * ln + n]; };
        auto fbs = [=](int j, int n) { return bs[j * ln + n]; };
        auto fdcb_t = [=](int j, int i) { return dcb[i * lq + j]; };
        auto fdcb = [=](int i, int j) { return dcb[i * lq + j]; };
        if (a.want_db)
            block_mma_tiles<2, true>(
                L, N,
                [&](float (&t)[2][4], int m0, int n0) {
                    warp_mma<2>(
                        t, m0, n0, L, N, P, sx, true, [=](int j, int p) { return xs[j * lp + p]; },
                        [=](int p, int n) { return Gc[p * lc + n]; });
                },
                [&](int j) { return eclm[j] * dtv[j]; },
                [&](float (&t)[2][4], int m0, int n0) { warp_mma<2>(t, m0, n0, L, N, L, true, sx, fdcb_t, fcs); },
                db_out);
        if (a.want_dc)
            block_mma_tiles<2, true>(
                L, N,
                [&](float (&t)[2][4], int m0, int n0) {
                    warp_mma<2>(
                        t, m0, n0, L, N, P, sd, true, [=](int i, int p) { return dys[i * lp + p]; },
                        [=](int p, int n) { return Sc[p * lc + n]; });
                },
                [&](int i) { return ecm[i]; },
                [&](float (&t)[2][4], int m0, int n0) { warp_mma<2>(t, m0, n0, L, N, L, true, sx, fdcb, fbs); },
                dc_out);
    } else {
        /* dB_j = (e^{cl−cm_j}·dt_j)·Σ_p x_j[p]·G[p][n] + Σ_i dCB_ij·C_i[n] */
        if (a.want_db)
            block_tiles<4, 4, true>(
                L, N,
                [&](float (&t)[4][4], const int (&m)[4], const int (&n)[4]) {
                    tile_mac_a4<4, 4>(t, m, n, P, xs, lp, [&](int p, int c) { return Gm[p * ls + c]; });
                },
                [&](int j) { return eclm[j] * dtv[j]; },
                [&](float (&t)[4][4], const int (&m)[4], const int (&n)[4]) {
                    tile_mac<4, 4>(
                        t, m, n, L, [&](int j, int i) { return dcb[i * lq + j]; }, [&](int i, int c) { return cs[i * ln + c]; });
                },
                db_out);
        /* dC_i = e^{cm_i}·Σ_p δx_i[p]·S[p][n] + Σ_j dCB_ij·B_j[n] */
        if (a.want_dc)
            block_tiles<4, 4, true>(
                L, N,
                [&](float (&t)[4][4], const int (&m)[4], const int (&n)[4]) {
                    tile_mac_a4<4, 4>(t, m, n, P, dys, lp, [&](int p, int c) { return S[p * ls + c]; });
                },
                [&](int i) { return ecm[i]; },
                [&](float (&t)[4][4], const int (&m)[4], const int (&n)[4]) {
                    tile_mac_a4<4, 4>(t, m, n, L, dcb, lq, [&](int j, int c) { return bs[j * ln + c]; });
                },
                dc_out);
    }
    __syncthreads();

    /* the ddA recurrence, ddt, and the dA / ddt_bias partials on warp 0 */
    if (warp == 0) {
        const int   k0 = 2 * lane, k1 = k0 + 1;
        const float qv[2] = {k0 < L ? q[k0] : 0.0f, k1 < L ? q[k1] : 0.0f};
        const float rv[2] = {k0 < L ? r[k0] : 0.0f, k1 < L ? r[k1] : 0.0f};
        const float tv[2] = {k0 < L ? dtl[k0] : 0.0f, k1 < L ? dtl[k1] : 0.0f};
        dda_tail(a, ck, h, w, L, total, head_a(a, h), qv, rv, tv, intra, fac, dtv);
    }
}

/* A (chunk, head of the batch) grid launch of fn with `floats` of dynamic shared memory. */
ssm_status launch_chunk_grid(ssm_context * ctx, const char * op, const char * name, void (*fn)(bw_args),
                             const bw_args & a, size_t floats) {
    if (a.nchunks == 0 || a.hb == 0) return SSM_STATUS_OK;
    const size_t bytes = floats * sizeof(float);
    SSM_FORWARD_IF_ERROR(smem_optin(ctx, op, (const void *)fn, bytes));
    fn<<<dim3((unsigned)a.nchunks, (unsigned)a.hb), kThreads, bytes, ssmi_cuda_stream(ctx)>>>(a);
    SSMI_CU_CHECK_LAUNCH(ctx, op, name);
    return SSM_STATUS_OK;
}

} /* namespace */

/* The largest shared-memory carveout, so as many of a kernel's blocks share an SM as its bytes allow. */
ssm_status smem_optin(ssm_context * ctx, const char * op, const void * fn, size_t bytes) {
    if (bytes <= 48 * 1024) return SSM_STATUS_OK;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute (shared memory)",
                                          cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)));
    return ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute (carveout)",
                            cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                 (int)cudaSharedmemCarveoutMaxShared));
}

ssm_status launch_bwd_dt(ssm_context * ctx, const char * op, const bw_args & a) {
    const long long n = a.nchunks * a.H;
    if (n == 0) return SSM_STATUS_OK;
    const dim3 grid((unsigned)a.nchunks, (unsigned)((a.H + kDtHeads - 1) / kDtHeads));
    bwd_dt_kernel<<<grid, kThreads, 0, ssmi_cuda_stream(ctx)>>>(a);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "bwd_dt_kernel");
    return SSM_STATUS_OK;
}

ssm_status launch_bwd_states(ssm_context * ctx, const char * op, const bw_args & a) {
    return launch_chunk_grid(ctx, op, "bwd_states_kernel", a.mma ? bwd_states_kernel<true> : bwd_states_kernel<false>,
                             a, states_smem_floats(a.Q, a.P, a.N));
}

ssm_status launch_bwd_dstates(ssm_context * ctx, const char * op, const bw_args & a) {
    return launch_chunk_grid(ctx, op, "bwd_dstates_kernel", a.mma ? bwd_dstates_kernel<true> : bwd_dstates_kernel<false>,
                             a, states_smem_floats(a.Q, a.P, a.N));
}

ssm_status launch_bwd_chunk(ssm_context * ctx, const char * op, const bw_args & a) {
    const size_t floats = chunk_smem_floats(a.Q, a.P, a.N, a.staged != 0);
    if (a.mma) return launch_chunk_grid(ctx, op, "bwd_chunk_kernel", bwd_chunk_kernel<false, true>, a, floats);
    if (a.staged) return launch_chunk_grid(ctx, op, "bwd_chunk_kernel", bwd_chunk_kernel<true, false>, a, floats);
    return launch_chunk_grid(ctx, op, "bwd_chunk_kernel", bwd_chunk_kernel<false, false>, a, floats);
}

} /* namespace ssmi_m2bwd */
