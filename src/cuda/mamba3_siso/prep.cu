/*
 * prep.cu — the SISO forward's work before the chunk kernels: the angle cumsum of the combined op
 * (raw angles in, spec §2.4) and chunk_prep_kernel.
 *
 * The angle cumsum, in two kernels: the sums Σ_i π·tanh(raw_i)·dt_i of every (chunk, head, angle),
 * token by token in fp32 into the workspace (theta0), then the angle scan per (sequence, head,
 * angle): θ entering each chunk, θ ← wrap(θ + chunk sum), in place over the sums, and the final
 * angle state. The chunk kernels then compute θ of every token as wrap(θ_enter + local running sum).
 *
 * chunk_prep_kernel computes the chunk scalars and θ of every token once per (chunk, head) into the
 * workspace slots (siso.cuh: cp_prep), for the chained state, the mma.sync state kernel (PRE) and
 * the wgmma output kernel to copy.
 */
#include "tiles.cuh"

namespace ssmi_siso {
namespace {

/* ---- the angle sums ------------------------------------------------------------------------------ */

/* One thread per (chunk, head, angle) — blockIdx.y covers 128 (head, angle) pairs, adjacent in
 * memory; the loads of 8 tokens are issued before their (in-order) sum. Any dtype and layout. */
__global__ void __launch_bounds__(128) angle_sum_kernel(const m3_fwd_args P) {
    const int w = blockIdx.x, e = blockIdx.y * blockDim.x + threadIdx.x;
    if (e >= P.H * P.A) return;
    const int      h = e / P.A, m = e - (e / P.A) * P.A;
    const m3_chunk ch = P.chunks[w];
    float          run = 0.0f;
    for (int i0 = 0; i0 < ch.len; i0 += 8) {
        float x[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = i0 + u;
            x[u] = i < ch.len ? (kPi * tanhf(ld4(P.ang, ch.row, ch.t0 + i, h, m))) * ld3(P.dt, ch.row, h, ch.t0 + i)
                              : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u)
            if (i0 + u < ch.len) run += x[u];
    }
    P.theta0[((long long)w * P.H + h) * P.A + m] = run;
}

/* Angles in 16-byte rows, A % 8 == 0, AMODE their dtype: v's (P.vang) or fp32 (P.fang: two
 * 16-byte pieces per 8 angles). 8 adjacent lanes share one (chunk, head, 8 angles): lane
 * g sums tokens g·8 … g·8 + 7 in order (the token's 8 angles in one or two 16-byte loads, one dt
 * load), then a 3-step xor butterfly adds the 8 partial sums (each step adds two values whose
 * order does not change a float sum, so all 8 lanes hold the same bits and the result is
 * deterministic); lane 0 stores. The sums differ from angle_sum_kernel's by fp32 rounding (another
 * association), and are wrapped by the angle scan. */
template <int AMODE>
__global__ void __launch_bounds__(128) angle_sum_rows_kernel(const m3_fwd_args P) {
    static_assert(kC == 64, "8 lanes of 8 tokens cover one chunk");
    typedef typename cfg<AMODE>::T T;
    constexpr int                 NP = (int)sizeof(T) / 2; /* 16-byte pieces per 8 angles */
    const int                     A8 = P.A / 8, w = blockIdx.x, g = threadIdx.x & 7;
    const int                     e = blockIdx.y * (blockDim.x / 8) + (threadIdx.x >> 3);
    const bool     live = e < P.H * A8; /* whole 8-lane groups: the butterfly below stays within live lanes */
    const int      h = live ? e / A8 : 0, m0 = live ? (e - h * A8) * 8 : 0;
    const m3_chunk ch = P.chunks[w];
    const T *      ap = (const T *)P.ang.p + ch.row * P.ang.s[0] + ch.t0 * P.ang.s[1] + h * P.ang.s[2] + m0;
    float          run[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) run[c] = 0.0f;
    uint4 raw[8][NP];
    float dtv[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
        const int  i = g * 8 + u;
        const bool ok = live && i < ch.len;
#pragma unroll
        for (int q = 0; q < NP; ++q)
            raw[u][q] = ok ? __ldg(reinterpret_cast<const uint4 *>(ap + i * P.ang.s[1]) + q)
                           : make_uint4(0u, 0u, 0u, 0u);
        dtv[u] = ok ? ld3(P.dt, ch.row, h, ch.t0 + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
        if (g * 8 + u >= ch.len) break;
        float x[8];
        if constexpr (AMODE == M_F32) {
#pragma unroll
            for (int q = 0; q < NP; ++q) {
                x[4 * q] = __uint_as_float(raw[u][q].x), x[4 * q + 1] = __uint_as_float(raw[u][q].y);
                x[4 * q + 2] = __uint_as_float(raw[u][q].z), x[4 * q + 3] = __uint_as_float(raw[u][q].w);
            }
        } else {
            unpack8<AMODE>(x, raw[u][0]);
        }
#pragma unroll
        for (int c = 0; c < 8; ++c) run[c] += (kPi * tanhf(x[c])) * dtv[u];
    }
#pragma unroll
    for (int d = 1; d < 8; d <<= 1)
#pragma unroll
        for (int c = 0; c < 8; ++c) run[c] += __shfl_xor_sync(0xffffffffu, run[c], d);
    if (!live || g != 0) return;
    float4 * dst = reinterpret_cast<float4 *>(P.theta0 + ((long long)w * P.H + h) * P.A + m0);
    dst[0] = make_float4(run[0], run[1], run[2], run[3]);
    dst[1] = make_float4(run[4], run[5], run[6], run[7]);
}

/* ---- the angle scan -------------------------------------------------------------------------------- */

/* θ entering each chunk, with the chunks of a sequence scanned in parallel. One warp per (sequence,
 * head, angle); lane l takes chunk c0 + l of a batch of 32: its sum is wrapped, a Kogge-Stone scan
 * combines them with wrap(a + b) (both in [0, 2π), so every partial stays within fp32 rounding of
 * a sequential walk's), and the batch's total carries to the next batch. θ entering the first
 * chunk is the initial angle state as given; the final angle state is the wrapped carry, or the
 * initial state for an empty sequence. The warp index is uniform per warp, so whole warps exit
 * together. */
__global__ void __launch_bounds__(128) angle_scan_kernel(const m3_fwd_args P) {
    const int lane = threadIdx.x & 31, e = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (e >= P.H * P.A) return;
    const int       s = blockIdx.y, h = e / P.A, m = e - (e / P.A) * P.A;
    const m3_seg    sg = P.segs[s];
    float           carry = P.has_states ? ld3(P.ang_in, s, h, m) : 0.0f;
    float *         base = P.theta0 + ((long long)sg.first * P.H + h) * P.A + m; /* read only when count > 0 */
    const long long cs = (long long)P.H * P.A;                                   /* stride between chunks */
    float           next = lane < sg.count ? base[lane * cs] : 0.0f;
    for (int c0 = 0; c0 < sg.count; c0 += 32) {
        const int   c = c0 + lane;
        const float raw = next;
        next = c + 32 < sg.count ? base[(c + 32) * cs] : 0.0f; /* the next batch's load in flight */
        float x = c < sg.count ? wrap2pi(raw) : 0.0f;
#pragma unroll
        for (int off = 1; off < 32; off *= 2) {
            const float y = __shfl_up_sync(0xffffffffu, x, off);
            if (lane >= off) x = wrap2pi(y + x);
        }
        const float excl = __shfl_up_sync(0xffffffffu, x, 1);
        if (c < sg.count) base[c * cs] = lane == 0 ? carry : wrap2pi(carry + excl);
        carry = wrap2pi(carry + __shfl_sync(0xffffffffu, x, 31));
    }
    if (P.fin_ang.present && lane == 0) st3(P.fin_ang, s, h, m, carry);
}

/* ---- chunk_prep_kernel ------------------------------------------------------------------------------
 * One warp per (chunk, head), kPrepWarps heads of one chunk per block, no block barrier. A warp does
 * all of it for its (chunk, head): the scalars with chunk_scalars' expressions and its warp-0 scan
 * verbatim; the θ of angle m in lane m (m + 32 for A > 32), the terms in registers, walked in
 * theta_walk's grouping at kPrepThreads threads (NG groups of kC/NG tokens: group sums from 0, then
 * the sums of the groups before, in order, then the group's terms), so every value is the one the
 * 256-thread kernels compute themselves (chunk_scalars, chunk_theta_rows) bit for bit. θ goes
 * straight to the slot (lane m: angle m of every token, 128-byte rows at A = 32), the scalars
 * through 1.3 KB of the warp's shared memory. The terms pass through memory on purpose: computed
 * twice in registers, the compiler fuses a product into the walk's sum and the bit equality is
 * lost. */
const int kPrepWarps = 8;
const int kPrepWarpScal = 5 * (kC + 1) + 3; /* the five arrays, padded to 16 bytes per warp */

/* The terms of angle column m (rows < L; FAST: tanh_fast, chunk_theta_rows' choice for P.vang). */
template <typename TT, bool FAST>
__device__ __forceinline__ void prep_terms(const m3_fwd_args & P, const m3_chunk & ch, int h, int m, const float * dtv,
                                           float (&t)[kC]) {
    const TT * src = (const TT *)P.ang.p + ch.row * P.ang.s[0] + ch.t0 * P.ang.s[1] + h * P.ang.s[2] + m * P.ang.s[3];
    const long long s1 = P.ang.s[1];
#pragma unroll
    for (int i = 0; i < kC; ++i) t[i] = i < ch.len ? from_t(src[i * s1]) : 0.0f;
    if (P.fused)
#pragma unroll
        for (int i = 0; i < kC; ++i) t[i] = (kPi * (FAST ? tanh_fast(t[i]) : tanhf(t[i]))) * dtv[i];
}

/* theta_walk's walk of one angle column with NG groups (terms in t, θ back into t). */
template <int NG>
__device__ __forceinline__ void prep_walk(float (&t)[kC], int L, float base) {
    constexpr int span = kC / NG;
    float         part[NG];
#pragma unroll
    for (int g = 0; g < NG; ++g) {
        float run = 0.0f;
#pragma unroll
        for (int i = g * span; i < (g + 1) * span; ++i)
            if (i < L) run += t[i];
        part[g] = run;
    }
#pragma unroll
    for (int g = 0; g < NG; ++g) {
        float run = 0.0f;
#pragma unroll
        for (int gg = 0; gg < g; ++gg) run += part[gg];
#pragma unroll
        for (int i = g * span; i < (g + 1) * span; ++i)
            if (i < L) {
                run += t[i];
                t[i] = wrap2pi(base + run);
            }
    }
}

template <int MODE>
__global__ void __launch_bounds__(32 * kPrepWarps, 2) chunk_prep_kernel(const m3_fwd_args P) {
    typedef typename cfg<MODE>::T T;
    __shared__ __align__(16) float scal_all[kPrepWarps][kPrepWarpScal];
    const int                      lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    const int                      w = blockIdx.x, h = blockIdx.y * kPrepWarps + wi;
    if (h >= P.H) return; /* warp-uniform; nothing below synchronises the block */
    const m3_chunk ch = P.chunks[w];
    float *        scal = scal_all[wi];
    const m3_scal  sc = carve_scal(scal);
    const int      L = ch.len, nload = ch.has_next ? L + 1 : L;
    for (int o = lane; o < kPrepWarpScal; o += 32) scal[o] = 0.0f; /* entries no one writes */
    __syncwarp();
    /* chunk_scalars, one warp */
    for (int i = lane; i <= L; i += 32) {
        if (i < nload) {
            sc.dtv[i] = ld3(P.dt, ch.row, h, ch.t0 + i);
            sc.lam[i] = ssmi_math::sigmoid(ld3(P.trap, ch.row, h, ch.t0 + i));
        } else {
            sc.dtv[i] = 0.0f;
            sc.lam[i] = 0.0f;
        }
    }
    {
        float a = lane < L ? ld3(P.adt, ch.row, h, ch.t0 + lane) : 0.0f;
        float b = lane + 32 < L ? ld3(P.adt, ch.row, h, ch.t0 + lane + 32) : 0.0f;
#pragma unroll
        for (int off = 1; off < 32; off *= 2) {
            const float ya = __shfl_up_sync(0xffffffffu, a, off);
            const float yb = __shfl_up_sync(0xffffffffu, b, off);
            if (lane >= off) a += ya, b += yb;
        }
        b += __shfl_sync(0xffffffffu, a, 31);
        sc.cm[lane] = a;
        sc.cm[lane + 32] = b;
    }
    __syncwarp();
    for (int i = lane; i < L; i += 32) {
        const float g = sc.dtv[i] * sc.lam[i];
        sc.gam[i] = g;
        sc.sig[i] = g + sc.dtv[i + 1] * (1.0f - sc.lam[i + 1]);
    }
    __syncwarp();
    float * dst = P.prep + ((long long)w * P.H + h) * prep_floats(P.A);
    for (int o = lane; o < kPrepScal / 4; o += 32)
        reinterpret_cast<float4 *>(dst)[o] = reinterpret_cast<const float4 *>(scal)[o];

    /* θ: lane m owns angle m (and m + 32) */
    const int A = P.A;
    int       NG = 1; /* theta_walk's group count at kPrepThreads threads */
    while (NG < 16 && 2 * NG * A <= kPrepThreads && 2 * NG * A <= kPartMax) NG *= 2;
    for (int m = lane; m < A; m += 32) {
        float     t[kC];
        const int dt_ = P.ang.dtype;
        if (P.vang)
            prep_terms<T, true>(P, ch, h, m, sc.dtv, t);
        else if (dt_ == SSM_DTYPE_BF16)
            prep_terms<__nv_bfloat16, false>(P, ch, h, m, sc.dtv, t);
        else if (dt_ == SSM_DTYPE_F16)
            prep_terms<__half, false>(P, ch, h, m, sc.dtv, t);
        else if (dt_ == SSM_DTYPE_F32)
            prep_terms<float, false>(P, ch, h, m, sc.dtv, t);
        else
            prep_terms<double, false>(P, ch, h, m, sc.dtv, t);
        if (P.fused) {
            const float base = P.theta0[((long long)w * P.H + h) * A + m];
            switch (NG) {
                case 1: prep_walk<1>(t, L, base); break;
                case 2: prep_walk<2>(t, L, base); break;
                case 4: prep_walk<4>(t, L, base); break;
                case 8: prep_walk<8>(t, L, base); break;
                default: prep_walk<16>(t, L, base); break;
            }
        }
        float * th = dst + kPrepScal + m;
#pragma unroll
        for (int i = 0; i < kC; ++i) th[(long long)i * A] = i < L ? t[i] : 0.0f;
    }
}

} /* namespace */

ssm_status launch_angles(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode) {
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    if (W > 0 && (P.vang || P.fang)) {
        const dim3 grid((unsigned)W, (unsigned)((P.H * (P.A / 8) + 15) / 16));
        if (P.fang)
            angle_sum_rows_kernel<M_F32><<<grid, 128, 0, s>>>(P);
        else if (mode == M_F16)
            angle_sum_rows_kernel<M_F16><<<grid, 128, 0, s>>>(P);
        else
            angle_sum_rows_kernel<M_BF16><<<grid, 128, 0, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "angle_sum_rows_kernel launch");
    } else if (W > 0) {
        angle_sum_kernel<<<dim3((unsigned)W, (unsigned)((P.H * P.A + 127) / 128)), 128, 0, s>>>(P);
        SSMI_CU_CHECK_LAUNCH(ctx, op, "angle_sum_kernel launch");
    }
    angle_scan_kernel<<<dim3((unsigned)((P.H * P.A + 3) / 4), (unsigned)P.NS), 128, 0, s>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "angle_scan_kernel launch");
    return SSM_STATUS_OK;
}

ssm_status launch_chunk_prep(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode) {
    const dim3 grid((unsigned)W, (unsigned)((P.H + kPrepWarps - 1) / kPrepWarps));
    if (mode == M_F16)
        chunk_prep_kernel<M_F16><<<grid, 32 * kPrepWarps, 0, ssmi_cuda_stream(ctx)>>>(P);
    else
        chunk_prep_kernel<M_BF16><<<grid, 32 * kPrepWarps, 0, ssmi_cuda_stream(ctx)>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "chunk_prep_kernel launch");
    return SSM_STATUS_OK;
}

} /* namespace ssmi_siso */
