/*
 * step.cu — the SISO decode step kernels (spec §2.6, §3.4): h' = α·h + β·v_prev k_prevᵀ + γ·v k̂ᵀ,
 * y = h'·q̂, out = (y + D·v)·silu(z), with the new angle, k and v states. Old k/v/θ states are read
 * before any final is written, so the final pools may be the input pools (in place). Results are
 * bitwise identical across runs (fixed reduction orders). Three kernels, chosen by the selection
 * table of siso.cu:
 *   step_warp_kernel      any layout: one block per (head, row); θ, q̂, k̂ and the scalars in shared
 *                         memory, then one pass over the V×K fp32 state, a warp per state row
 *                         (float4 loads/stores when both pools are fp32 with unit K stride and
 *                         16-byte aligned rows, the generic strided path otherwise), a fixed warp
 *                         reduction per row. Also the general form (several tokens per row, write
 *                         slots, slot tables, intermediate_*): the row's tokens in turn, its
 *                         states carried in shared memory.
 *   step_prefetch_kernel  fp32 pools in 16-byte rows, V·K ≤ 16384: every state load of a thread in
 *                         flight before the small work; for few (row, head) blocks.
 *   step_lanes_kernel     fp32 pools in 16-byte rows, K/4 a power of two in [8, 32], the head in
 *                         one block: the state on lane groups, every load issued at the start.
 */
#include "step.cuh"

namespace ssmi_siso {
namespace {

/* The token's decay and input coefficients of a decode step. */
struct step_coefs {
    float alpha, beta, gamma;
};

/* The part step_warp_kernel and step_prefetch_kernel share, for token t of a row: the token's
 * coefficients, then in shared memory the new angles th (A), the old k state kp (K), v and the old
 * v state (vv, vp: V each), and after a barrier the rotated q̂, k̂ (qh, kh: K each). The old states
 * are the slot's (first: the row's first token) or the previous token's, which th, kh and vv hold
 * on entry (each element moved by the thread that wrote it). Every read of the old small states
 * happens before the first barrier, so the finals may be the same views (in place). Ends with a
 * barrier. */
__device__ __forceinline__ step_coefs step_stage(const m3_step_args & P, int t, int h, int g, int slot, bool first,
                                                 float * qh, float * kh, float * kp, float * vv, float * vp,
                                                 float * th) {
    const int   K = P.K, V = P.V, A = P.A;
    const float dt = ld2(P.dt, t, h);
    const float lam = ssmi_math::sigmoid(ld2(P.trap, t, h));
    const float alpha = expf(ld2(P.adt, t, h));
    const float beta = alpha * dt * (1.0f - lam);
    const float gamma = dt * lam;
    /* every read of the old small states happens before the first barrier, every write of a
     * final after it: the finals may be the same views (in place) */
    for (int m = threadIdx.x; m < A; m += blockDim.x)
        th[m] = wrap2pi((first ? ld3(P.ang_in, slot, h, m) : th[m]) + (kPi * tanhf(ld3(P.ang, t, h, m))) * dt);
    for (int n = threadIdx.x; n < K; n += blockDim.x) kp[n] = first ? ld3(P.k_in, slot, h, n) : kh[n];
    for (int p = threadIdx.x; p < V; p += blockDim.x) {
        vp[p] = first ? ld3(P.v_in, slot, h, p) : vv[p];
        vv[p] = ld3(P.v, t, h, p);
    }
    __syncthreads();
    for (int m = threadIdx.x; m < K / 2; m += blockDim.x) {
        const int n = 2 * m;
        float     q0 = ld3(P.q, t, g, n) + ld2(P.qb, h, n), q1 = ld3(P.q, t, g, n + 1) + ld2(P.qb, h, n + 1);
        float     k0 = ld3(P.k, t, g, n) + ld2(P.kb, h, n), k1 = ld3(P.k, t, g, n + 1) + ld2(P.kb, h, n + 1);
        if (m < A) {
            float sn, cs;
            sincosf(th[m], &sn, &cs);
            const float a0 = q0 * cs - q1 * sn, a1 = q0 * sn + q1 * cs;
            const float b0 = k0 * cs - k1 * sn, b1 = k0 * sn + k1 * cs;
            q0 = a0, q1 = a1, k0 = b0, k1 = b1;
        }
        qh[n] = q0, qh[n + 1] = q1, kh[n] = k0, kh[n + 1] = k1;
    }
    __syncthreads();
    return step_coefs{alpha, beta, gamma};
}

/* The four states of head h after a token (θ, the V×K state `st` in rows of K, k̂, v) to row `row`
 * of the outputs o[4] (angle, ssm, k, v; absent ones skipped); st NULL: zeros (a padding row's
 * intermediate states). */
__device__ __forceinline__ void store_small(const m3_step_args & P, const m3_out & ang, const m3_out & k,
                                            const m3_out & v, int row, int h, const float * th, const float * kh,
                                            const float * vv) {
    if (ang.present)
        for (int m = threadIdx.x; m < P.A; m += blockDim.x) st3(ang, row, h, m, th != nullptr ? th[m] : 0.0f);
    if (k.present)
        for (int n = threadIdx.x; n < P.K; n += blockDim.x) st3(k, row, h, n, kh != nullptr ? kh[n] : 0.0f);
    if (v.present)
        for (int p = threadIdx.x; p < P.V; p += blockDim.x) st3(v, row, h, p, vv != nullptr ? vv[p] : 0.0f);
}

/* step_warp_kernel's block (head h, row b). The single-token form: token b from slot P.slots[b] (or b) to the same
 * slot of the finals. GENERAL: row b's tokens tok[b] .. tok[b+1] − 1 of the plan from its read
 * slot, a token at a time: θ, k̂ and v carried in shared memory, the V×K state too when P.keep
 * (each element by the thread that owns it every token), else read from the pool for the row's
 * only token; after token j the intermediate_* rows and, with a token table, slot table[b, j];
 * after the last token (the read slot's states for a row of none) the write slot. */
/* out[row, h, p] from the row's state dot product: + D·v, then the z gate. */
__device__ __forceinline__ void store_out(const m3_step_args & P, int row, int h, int p, float dot, float dh, float v) {
    float y = dot + dh * v;
    if (P.has_z) {
        const float zv = ld3(P.z, row, h, p);
        y *= zv * ssmi_math::sigmoid(zv);
    }
    st3(P.out, row, h, p, y);
}

template <bool GENERAL>
__device__ __forceinline__ void step_warp_body(const m3_step_args & P, float * sm) {
    const int h = blockIdx.x, b = blockIdx.y, g = h / P.G;
    const int t0 = GENERAL ? P.plan.tok[b] : b, t1 = GENERAL ? P.plan.tok[b + 1] : b + 1;
    const int slot = GENERAL ? P.plan.read[b] : P.slots != nullptr ? P.slots[b] : b;
    if (slot < 0) { /* padding row: out (and intermediate_*) 0, no state touched */
        for (int t = t0; t < t1; ++t) {
            for (int p = threadIdx.x; p < P.V; p += blockDim.x) st3(P.out, t, h, p, 0.0f);
            if (!GENERAL) continue;
            store_small(P, P.inter_ang, P.inter_k, P.inter_v, t, h, nullptr, nullptr, nullptr);
            if (P.inter_ssm.present)
                for (int e = threadIdx.x; e < P.V * P.K; e += blockDim.x)
                    st4(P.inter_ssm, t, h, e / P.K, e % P.K, 0.0f);
        }
        return;
    }
    const int   K = P.K, V = P.V, A = P.A;
    float *     qh = sm;     /* K */
    float *     kh = qh + K; /* K */
    float *     kp = kh + K; /* K: k state (old) */
    float *     vv = kp + K; /* V: v of this token */
    float *     vp = vv + V; /* V: v state (old) */
    float *     th = vp + V; /* A */
    float *     hs = th + A; /* V×K: the state between tokens (GENERAL with P.keep) */
    const bool  keep = GENERAL && P.keep;
    const float dh = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, h * P.d.s[0]) : 0.0f;
    const int   warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    /* the slot written after the last token: the read slot (single-token form), the plan's write
     * slot, or none (a token table writes per token) */
    const int wlast = !GENERAL ? slot : P.plan.table == nullptr ? P.plan.write[b] : -1;
    if (GENERAL && t0 == t1) { /* a row of no token: its states from the read slot to the write slot */
        if (wlast < 0) return;
        if (P.fin_ang.present)
            for (int m = threadIdx.x; m < A; m += blockDim.x) st3(P.fin_ang, wlast, h, m, ld3(P.ang_in, slot, h, m));
        if (P.fin_k.present)
            for (int n = threadIdx.x; n < K; n += blockDim.x) st3(P.fin_k, wlast, h, n, ld3(P.k_in, slot, h, n));
        if (P.fin_v.present)
            for (int p = threadIdx.x; p < V; p += blockDim.x) st3(P.fin_v, wlast, h, p, ld3(P.v_in, slot, h, p));
        if (P.fin_ssm.present)
            for (int e = threadIdx.x; e < V * K; e += blockDim.x)
                st4(P.fin_ssm, wlast, h, e / K, e % K, ld4(P.ssm_in, slot, h, e / K, e % K));
        return;
    }
    for (int t = t0; t < t1; ++t) {
        const bool first = t == t0;
        if (!first) __syncthreads(); /* every read of the previous token's shared values is done */
        const step_coefs cf = step_stage(P, t, h, g, slot, first, qh, kh, kp, vv, vp, th);
        const float      alpha = cf.alpha, beta = cf.beta, gamma = cf.gamma;
        const int        ws = GENERAL && P.plan.table != nullptr ? P.plan.table[(long long)b * P.plan.LC + (t - t0)]
                              : t == t1 - 1                      ? wlast
                                                                 : -1;
        for (int p = warp; p < V; p += nw) {
            const float a = beta * vp[p], c = gamma * vv[p];
            float       dot = 0.0f;
            if (!GENERAL && P.vec) {
                const float4 * src = (const float4 *)((const float *)P.ssm_in.p + slot * P.ssm_in.s[0] +
                                                      h * P.ssm_in.s[1] + p * P.ssm_in.s[2]);
                float4 *       dst = P.fin_ssm.present ? (float4 *)((float *)P.fin_ssm.p + slot * P.fin_ssm.s[0] +
                                                              h * P.fin_ssm.s[1] + p * P.fin_ssm.s[2])
                                                       : nullptr;
                for (int n4 = lane; n4 < K / 4; n4 += 32) {
                    const float4 hv = src[n4];
                    const int    n = 4 * n4;
                    float4       nv;
                    nv.x = alpha * hv.x + a * kp[n] + c * kh[n];
                    nv.y = alpha * hv.y + a * kp[n + 1] + c * kh[n + 1];
                    nv.z = alpha * hv.z + a * kp[n + 2] + c * kh[n + 2];
                    nv.w = alpha * hv.w + a * kp[n + 3] + c * kh[n + 3];
                    dot += nv.x * qh[n] + nv.y * qh[n + 1] + nv.z * qh[n + 2] + nv.w * qh[n + 3];
                    if (dst != nullptr) dst[n4] = nv;
                }
            } else {
                for (int n = lane; n < K; n += 32) {
                    const float old = keep && !first ? hs[p * K + n] : ld4(P.ssm_in, slot, h, p, n);
                    const float nv = alpha * old + a * kp[n] + c * kh[n];
                    dot += nv * qh[n];
                    if (keep) hs[p * K + n] = nv;
                    if (GENERAL && P.inter_ssm.present) st4(P.inter_ssm, t, h, p, n, nv);
                    if (P.fin_ssm.present && ws >= 0) st4(P.fin_ssm, ws, h, p, n, nv);
                }
            }
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
            if (lane == 0) store_out(P, t, h, p, dot, dh, vv[p]);
        }
        if (ws >= 0) store_small(P, P.fin_ang, P.fin_k, P.fin_v, ws, h, th, kh, vv);
        if (GENERAL) store_small(P, P.inter_ang, P.inter_k, P.inter_v, t, h, th, kh, vv);
    }
}

__global__ void __launch_bounds__(kStepThreads) step_warp_kernel(const m3_step_args P) {
    extern __shared__ __align__(16) float sm[];
    step_warp_body<false>(P, sm);
}

/* The general form: one block per SM is enough to hold its registers without a spill (the token
 * loop keeps more values live than the single-token form). */
__global__ void __launch_bounds__(kStepThreads, 1) step_warp_general_kernel(const m3_step_args P) {
    extern __shared__ __align__(16) float sm[];
    step_warp_body<true>(P, sm);
}

/* ---- step_prefetch_kernel --------------------------------------------------------------------------
 * One block of 256 threads per (head, row). The V×K/4 float4s of the state are dealt out
 * round-robin (float4 f = i·256 + thread, i < NPER); every thread issues ALL its state loads
 * (__ldcs, evict-first: the state is touched once) before the scalars, θ, q̂ and k̂ are
 * computed, so up to NPER 16-byte loads per thread (32 KB per block at NPER = 8) are in flight
 * while the block does its small work. Each float4's 4-term dot with q̂ goes to shared memory;
 * after a barrier a warp per state row sums the row's partials in a fixed order (lane-strided,
 * then a shuffle tree), so results are bitwise identical across runs. New states are stored
 * with __stcs. */
template <int NPER>
__global__ void __launch_bounds__(kPrefetchThreads, 2)
    step_prefetch_kernel(const __grid_constant__ m3_step_slots_args A2) {
    extern __shared__ __align__(16) float sm[];
    const m3_step_args &                  P = A2.base;
    const int                             h = blockIdx.x, b = blockIdx.y, g = h / P.G;
    const int                             slot = A2.inline_slots ? A2.islots[b] : (P.slots != nullptr ? P.slots[b] : b);
    if (slot < 0) { /* padding row: out = 0, no state touched */
        for (int p = threadIdx.x; p < P.V; p += blockDim.x) st3(P.out, b, h, p, 0.0f);
        return;
    }
    const int K = P.K, V = P.V, A = P.A, K4 = K >> 2, total = V * K4;

    /* 1. every state load first (they depend on nothing but the slot) */
    const float4 * src =
        (const float4 *)((const float *)P.ssm_in.p + (long long)slot * P.ssm_in.s[0] + (long long)h * P.ssm_in.s[1]);
    const long long srow = P.ssm_in.s[2] >> 2; /* row stride in float4s (a multiple of 4 floats: vec_ok) */
    float4          hv[NPER];
#pragma unroll
    for (int i = 0; i < NPER; ++i) {
        const int f = i * kPrefetchThreads + (int)threadIdx.x;
        if (f < total) {
            const int p = f / K4, n4 = f - p * K4;
            hv[i] = __ldcs(src + p * srow + n4);
        } else {
            hv[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }

    /* 2. the small work while the loads fly (step_warp_kernel's math) */
    float *          qh = sm;       /* K: offsets 0, K, 2K are multiples of 4 floats (K % 4 == 0) */
    float *          kh = qh + K;   /* K */
    float *          kp = kh + K;   /* K: k state (old) */
    float *          vv = kp + K;   /* V */
    float *          vp = vv + V;   /* V: v state (old) */
    float *          th = vp + V;   /* A */
    float *          part = th + A; /* total: per-float4 dot partials */
    const step_coefs cf = step_stage(P, b, h, g, slot, true, qh, kh, kp, vv, vp, th);
    const float      alpha = cf.alpha, beta = cf.beta, gamma = cf.gamma;

    /* 3. h' = α·h + β·v_prev k_prevᵀ + γ·v k̂ᵀ, stored; its dot with q̂ per float4 */
    float4 * dst =
        P.fin_ssm.present
            ? (float4 *)((float *)P.fin_ssm.p + (long long)slot * P.fin_ssm.s[0] + (long long)h * P.fin_ssm.s[1])
            : nullptr;
    const long long drow = P.fin_ssm.s[2] >> 2;
    const float4 *  q4 = (const float4 *)qh;
    const float4 *  kh4 = (const float4 *)kh;
    const float4 *  kp4 = (const float4 *)kp;
#pragma unroll
    for (int i = 0; i < NPER; ++i) {
        const int f = i * kPrefetchThreads + (int)threadIdx.x;
        if (f < total) {
            const int    p = f / K4, n4 = f - p * K4;
            const float  a = beta * vp[p], c = gamma * vv[p];
            const float4 ko = kp4[n4], kn = kh4[n4], qq = q4[n4];
            float4       nv;
            nv.x = alpha * hv[i].x + a * ko.x + c * kn.x;
            nv.y = alpha * hv[i].y + a * ko.y + c * kn.y;
            nv.z = alpha * hv[i].z + a * ko.z + c * kn.z;
            nv.w = alpha * hv[i].w + a * ko.w + c * kn.w;
            part[f] = nv.x * qq.x + nv.y * qq.y + nv.z * qq.z + nv.w * qq.w;
            if (dst != nullptr) __stcs(dst + p * drow + n4, nv);
        }
    }
    __syncthreads();

    /* 4. y[p] = Σ partials of row p in a fixed order; out = (y + D·v)·silu(z) */
    const float dh = P.has_d ? ssmi_cu_ld(P.d.p, P.d.dtype, h * P.d.s[0]) : 0.0f;
    const int   warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int p = warp; p < V; p += nw) {
        float dot = 0.0f;
        for (int j = lane; j < K4; j += 32) dot += part[p * K4 + j];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (lane == 0) store_out(P, b, h, p, dot, dh, vv[p]);
    }
    if (P.fin_ang.present)
        for (int m = threadIdx.x; m < A; m += blockDim.x) st3(P.fin_ang, slot, h, m, th[m]);
    if (P.fin_k.present)
        for (int n = threadIdx.x; n < K; n += blockDim.x) st3(P.fin_k, slot, h, n, kh[n]);
    if (P.fin_v.present)
        for (int p = threadIdx.x; p < V; p += blockDim.x) st3(P.fin_v, slot, h, p, vv[p]);
}

/* ---- step_lanes_kernel ------------------------------------------------------------------------------
 * Where step_warp_kernel's time goes (B=128 H=64 K=128 V=64 fp32, H200): DRAM 49%, long-scoreboard
 * stalls on the state loads of a warp-per-row loop (one row's loads in flight per warp), barrier
 * stalls after the staging of θ, q̂, k̂, and epilogue z loads waited on right before use. This kernel
 * issues every global load a warp needs at its start, in one batch, and has a single barrier
 * (before the small finals are written, for in-place pools):
 *
 *   - one block per (head, row) covers the V×K state: a state row of K/4 float4s on L = K/4
 *     lanes (one float4 per lane and row; K/4 a power of two, 8 ≤ K/4 ≤ 32), RU = 8
 *     consecutive rows per lane group (8 float4 = 128 bytes of state per thread), ceil(V / 8)
 *     groups (≤ 256 threads: V ≤ 64 at K = 128, V ≤ 128 at K = 64);
 *   - each lane computes θ, q̂, k̂ and loads the old k state of ITS columns itself (the same
 *     columns in all its rows; groups repeat this small work instead of sharing it through
 *     shared memory behind barriers);
 *   - lane k < RU of a group owns row p0 + k: it loads the old v state, v and z of that row and
 *     hands β·v_prev and γ·v to the group by shuffles; it writes out and the new v state;
 *   - per row: h' = α·h + (β·v_prev)·k_prev + (γ·v)·k̂ stored with st.global.cs, dot(h', q̂)
 *     summed per lane (step_warp_kernel's 4-term sum), then over the L lanes by a fixed xor
 *     butterfly (bitwise reproducible);
 *   - after one __syncthreads (every read of the old angle / k / v states is done), group 0
 *     writes the new angle and k states, owners the new v state: the finals may be the very
 *     views of the inputs (in place).
 * Registers ≤ 85 (launch bounds 256 × 3; ptxas: 80, no spill; a bound of 64 spills), so an SM
 * holds 3 blocks of the bench shape (V=64, K=128: 256 threads, 32 KB of state each): 96 KB of
 * state reads in flight per SM at the blocks' start (the measured in-place ceiling needs ~32
 * KB). Typed loads (no dtype switch) when the activations (q, k, v, trap, angles, z) are all
 * fp32 or all bf16 and the rest fp32; other mixes through ssmi_cu_ld. Other shapes (K < 32,
 * K > 128, K / 4 not a power of two, V too large for 256 threads) take the other kernels. */

/* Input loads by dtype class. act: q, k, v, trap, angles, z; par: the rest (and the old small
 * states, read before any final is written). */
struct step_in_f32 {
    __device__ static float act(const ssmi_cu_view & t, long long off) { return __ldg((const float *)t.p + off); }
    __device__ static float par(const ssmi_cu_view & t, long long off) { return __ldg((const float *)t.p + off); }
};
struct step_in_bf16 {
    __device__ static float act(const ssmi_cu_view & t, long long off) {
        return __uint_as_float((unsigned int)__ldg((const unsigned short *)t.p + off) << 16);
    }
    __device__ static float par(const ssmi_cu_view & t, long long off) { return __ldg((const float *)t.p + off); }
};
struct step_in_any {
    __device__ static float act(const ssmi_cu_view & t, long long off) { return ssmi_cu_ld(t.p, t.dtype, off); }
    __device__ static float par(const ssmi_cu_view & t, long long off) { return ssmi_cu_ld(t.p, t.dtype, off); }
};

template <class IN, int CPL, int RU>
__global__ void __launch_bounds__(kLanesMaxThreads, 3)
    step_lanes_kernel(const __grid_constant__ m3_step_slots_args A2) {
    const m3_step_args & P = A2.base;
    const unsigned       full = 0xffffffffu;
    const int            h = blockIdx.x, b = blockIdx.y, g = h / P.G;
    const int            slot = A2.inline_slots ? A2.islots[b] : (P.slots != nullptr ? P.slots[b] : b);
    if (slot < 0) { /* padding row: out = 0, no state touched (uniform over the block) */
        for (int p = threadIdx.x; p < P.V; p += blockDim.x) st3(P.out, b, h, p, 0.0f);
        return;
    }
    const int K = P.K, V = P.V, A = P.A, K4 = K >> 2;
    const int L = K4 < 32 ? K4 : 32; /* a power of two (host-checked) */
    const int lane = (int)threadIdx.x & (L - 1), grp = (int)threadIdx.x / L;
    const int p0 = grp * RU;
    const int nrows = V - p0; /* rows k < nrows (and k < RU) of this group exist */

    /* 1. the state: RU × CPL float4s (evict-first, coherent: in place, this thread writes the
     * same bytes afterwards) */
    const long long srow =
        (long long)slot * P.ssm_in.s[0] + (long long)h * P.ssm_in.s[1] + (long long)p0 * P.ssm_in.s[2];
    float4 hv[RU][CPL];
#pragma unroll
    for (int k = 0; k < RU; ++k)
#pragma unroll
        for (int c = 0; c < CPL; ++c)
            hv[k][c] = k < nrows ? __ldcs((const float4 *)((const float *)P.ssm_in.p + srow + k * P.ssm_in.s[2] +
                                                           (long long)(lane + c * L) * 4))
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);

    /* 2. the head's scalars (every thread: one broadcast load each per warp) */
    const float dt = IN::par(P.dt, (long long)b * P.dt.s[0] + (long long)h * P.dt.s[1]);
    const float trap = IN::act(P.trap, (long long)b * P.trap.s[0] + (long long)h * P.trap.s[1]);
    const float adt = IN::par(P.adt, (long long)b * P.adt.s[0] + (long long)h * P.adt.s[1]);
    const float dh = P.has_d ? IN::par(P.d, (long long)h * P.d.s[0]) : 0.0f;

    /* 3. the lane's columns n = 4·(lane + c·L) + j: q, k (+ biases), old k state, and the
     * angles of their pairs m = n / 2 (rotated where m < A) */
    float           qh[CPL][4], kh[CPL][4], kp[CPL][4], ang[CPL][2], angin[CPL][2];
    const long long qo = (long long)b * P.q.s[0] + (long long)g * P.q.s[1];
    const long long ko = (long long)b * P.k.s[0] + (long long)g * P.k.s[1];
    const long long kso = (long long)slot * P.k_in.s[0] + (long long)h * P.k_in.s[1];
#pragma unroll
    for (int c = 0; c < CPL; ++c) {
        const int n0 = 4 * (lane + c * L);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const long long n = n0 + j;
            qh[c][j] = IN::act(P.q, qo + n * P.q.s[2]) + IN::par(P.qb, (long long)h * P.qb.s[0] + n * P.qb.s[1]);
            kh[c][j] = IN::act(P.k, ko + n * P.k.s[2]) + IN::par(P.kb, (long long)h * P.kb.s[0] + n * P.kb.s[1]);
            kp[c][j] = IN::par(P.k_in, kso + n * P.k_in.s[2]);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const long long m = n0 / 2 + i;
            ang[c][i] = angin[c][i] = 0.0f;
            if (m < A) {
                ang[c][i] = IN::act(P.ang, (long long)b * P.ang.s[0] + (long long)h * P.ang.s[1] + m * P.ang.s[2]);
                angin[c][i] = IN::par(
                    P.ang_in, (long long)slot * P.ang_in.s[0] + (long long)h * P.ang_in.s[1] + m * P.ang_in.s[2]);
            }
        }
    }

    /* 4. lane k < RU owns row p0 + k: old v state, v, z */
    const bool owner = lane < RU && lane < nrows;
    float      o_vp = 0.0f, o_vv = 0.0f, o_z = 0.0f;
    if (owner) {
        const long long p = p0 + lane;
        o_vp = IN::par(P.v_in, (long long)slot * P.v_in.s[0] + (long long)h * P.v_in.s[1] + p * P.v_in.s[2]);
        o_vv = IN::act(P.v, (long long)b * P.v.s[0] + (long long)h * P.v.s[1] + p * P.v.s[2]);
        if (P.has_z) o_z = IN::act(P.z, (long long)b * P.z.s[0] + (long long)h * P.z.s[1] + p * P.z.s[2]);
    }

    /* 5. the small math (step_warp_kernel's formulas) while the state loads are in flight */
    const float lam = ssmi_math::sigmoid(trap);
    const float alpha = expf(adt);
    const float beta = alpha * dt * (1.0f - lam);
    const float gamma = dt * lam;
#pragma unroll
    for (int c = 0; c < CPL; ++c)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int m = 2 * (lane + c * L) + i;
            if (m < A) {
                const float th = wrap2pi(angin[c][i] + (kPi * tanhf(ang[c][i])) * dt);
                ang[c][i] = th; /* the new angle state */
                float sn, cs;
                sincosf(th, &sn, &cs);
                const float q0 = qh[c][2 * i], q1 = qh[c][2 * i + 1];
                const float k0 = kh[c][2 * i], k1 = kh[c][2 * i + 1];
                qh[c][2 * i] = q0 * cs - q1 * sn, qh[c][2 * i + 1] = q0 * sn + q1 * cs;
                kh[c][2 * i] = k0 * cs - k1 * sn, kh[c][2 * i + 1] = k0 * sn + k1 * cs;
            }
        }
    const float o_a = beta * o_vp, o_c = gamma * o_vv;

    /* 6. the rows: h', stored; dot(h', q̂); lane k keeps row k's sum */
    float4 *        dst = P.fin_ssm.present ? (float4 *)P.fin_ssm.p : nullptr;
    const long long drow = P.fin_ssm.present ? (long long)slot * P.fin_ssm.s[0] + (long long)h * P.fin_ssm.s[1] +
                                                   (long long)p0 * P.fin_ssm.s[2]
                                             : 0;
    float           dot[RU];
#pragma unroll
    for (int k = 0; k < RU; ++k) {
        const float a = __shfl_sync(full, o_a, k, L);
        const float cg = __shfl_sync(full, o_c, k, L);
        dot[k] = 0.0f;
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
            float4 nv;
            nv.x = alpha * hv[k][c].x + a * kp[c][0] + cg * kh[c][0];
            nv.y = alpha * hv[k][c].y + a * kp[c][1] + cg * kh[c][1];
            nv.z = alpha * hv[k][c].z + a * kp[c][2] + cg * kh[c][2];
            nv.w = alpha * hv[k][c].w + a * kp[c][3] + cg * kh[c][3];
            dot[k] += nv.x * qh[c][0] + nv.y * qh[c][1] + nv.z * qh[c][2] + nv.w * qh[c][3];
            if (dst != nullptr && k < nrows)
                __stcs((float4 *)((float *)dst + drow + k * P.fin_ssm.s[2] + (long long)(lane + c * L) * 4), nv);
        }
    }
    /* over the L lanes of each row; lane k keeps row k's sum */
    const float dot_own = ssmi_rows_sum<RU>(dot, L, lane, full);

    /* 7. out = (y + D·v)·silu(z) by the owners */
    if (owner) {
        float y = dot_own + dh * o_vv;
        if (P.has_z) y *= o_z * ssmi_math::sigmoid(o_z);
        st3(P.out, b, h, p0 + lane, y);
    }

    /* 8. the small finals, after every read of the old ones in this block */
    __syncthreads();
    if (grp == 0) {
#pragma unroll
        for (int c = 0; c < CPL; ++c) {
            const int n0 = 4 * (lane + c * L);
            if (P.fin_k.present)
#pragma unroll
                for (int j = 0; j < 4; ++j) st3(P.fin_k, slot, h, n0 + j, kh[c][j]);
            if (P.fin_ang.present)
#pragma unroll
                for (int i = 0; i < 2; ++i)
                    if (n0 / 2 + i < A) st3(P.fin_ang, slot, h, n0 / 2 + i, ang[c][i]);
        }
    }
    if (owner && P.fin_v.present) st3(P.fin_v, slot, h, p0 + lane, o_vv);
}

template <int NPER>
cudaError_t launch_prefetch_n(const m3_step_slots_args & A2, int B, size_t smem, cudaStream_t s) {
    step_prefetch_kernel<NPER><<<dim3((unsigned)A2.base.H, (unsigned)B), kPrefetchThreads, smem, s>>>(A2);
    return cudaGetLastError();
}

template <class IN>
cudaError_t launch_lanes_in(const m3_step_slots_args & A2, int B, int threads, cudaStream_t s) {
    step_lanes_kernel<IN, 1, kLanesVectors><<<dim3((unsigned)A2.base.H, (unsigned)B), threads, 0, s>>>(A2);
    return cudaGetLastError();
}

} /* namespace */

cudaError_t launch_step_warp(const m3_step_args & P, int B, size_t smem, cudaStream_t s) {
    if (!P.general) {
        step_warp_kernel<<<dim3((unsigned)P.H, (unsigned)B), kStepThreads, smem, s>>>(P);
        return cudaGetLastError();
    }
    if (smem > 48 * 1024) {
        const cudaError_t e =
            cudaFuncSetAttribute(step_warp_general_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    step_warp_general_kernel<<<dim3((unsigned)P.H, (unsigned)B), kStepThreads, smem, s>>>(P);
    return cudaGetLastError();
}

cudaError_t launch_step_prefetch(const m3_step_slots_args & A2, int per, int B, size_t smem, cudaStream_t s) {
    switch (per) {
        case 1: return launch_prefetch_n<1>(A2, B, smem, s);
        case 2: return launch_prefetch_n<2>(A2, B, smem, s);
        case 4: return launch_prefetch_n<4>(A2, B, smem, s);
        case 8: return launch_prefetch_n<8>(A2, B, smem, s);
        default: return launch_prefetch_n<16>(A2, B, smem, s);
    }
}

cudaError_t launch_step_lanes(const m3_step_slots_args & A2, int cls, int B, int threads, cudaStream_t s) {
    if (cls == 0) return launch_lanes_in<step_in_f32>(A2, B, threads, s);
    if (cls == 1) return launch_lanes_in<step_in_bf16>(A2, B, threads, s);
    return launch_lanes_in<step_in_any>(A2, B, threads, s);
}

} /* namespace ssmi_siso */
