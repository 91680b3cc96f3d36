/*
 * bwd_scan.cu — the per-sequence kernels of the CUDA Mamba-3 SISO backward and its fixed-order sums
 * (plain fp32; bwd.cuh lists the workspace arrays).
 *
 * The sequential walks load a batch of kWalkBatch steps' operands first and then take the steps in
 * order, so a walk waits on memory once per batch instead of once per step.
 * bwd_prep_kernel, one block per (chunk, head): per token dt, λ = sigmoid(trap), γ = dt·λ, σ = γ +
 *   dt_{t+1}(1 − λ_{t+1}) (0 after the last token) and the chunk-local inclusive cumsum of adt;
 *   per angle the chunk-local running sums of π·tanh(raw)·dt (th) and their total (thb); for the
 *   chained entries the walks' scalar slots, c_last and sequences (bwd_state_chain.cu).
 * bwd_theta_kernel, one thread per (sequence, head, angle): θ entering each chunk (thb), from
 *   angle_state (or 0), θ ← wrap(θ + the chunk's total); θ of a token is then wrap(θ entering +
 *   its running sum) (theta_at), the same θ mod 2π as the token-by-token walk.
 * bwd_pass_kernel, one thread per (sequence, head, state element, walk; the two walks are
 *   independent and share a launch): forward, st[c] ← the state
 *   entering chunk c (from H_in = S_in + dt_0(1 − λ_0)·V_in K_inᵀ, or 0) with S ← e^{c_last}·S +
 *   st[c]; reverse, dst[c] ← the carry dS of chunk c (from dfinal_ssm_state, or 0) with dS ←
 *   e^{c_last}·dS + dst[c], and dH_in after the first chunk. Each element reads its own
 *   contribution before overwriting it.
 * bwd_seq_kernel, one block per (sequence, head): the initial-state gradients (dssm_state = dH_in,
 *   dv_state = c0·dH_in·K_in, dk_state = c0·dH_inᵀ·V_in, and dc = ⟨dH_in, V_in K_inᵀ⟩ for the
 *   t = 0 fold, into dcw), then the angle carry (spec §6.6: G reverse-cumulated per angle from
 *   dfinal_angle_state over the chunks' dθ sums; each chunk's entering carry into thp,
 *   dangle_state). An empty sequence passes each dfinal_* to its d*_state (or 0).
 * bwd_tok_kernel, one block per (chunk, head): G inside the chunk from its carry (in shared
 *   memory), dangles, then per token ddt and dtrap (spec §6.2).
 * bwd_dz_kernel (the plane entries given pregate_y): dz = y·dout·σ(z)(1 + z(1 − σ(z))) element by
 *   element from the forward's y, the gradient kernel's expression; a block per token.
 * bwd_gate_kernel (the chained entries with z, before the walks): dy = dout ⊙ silu(z) as the two
 *   planes of v's dtype that the reverse walks multiply (split2: the rounded value, the rounded
 *   remainder), and with it dz where pregate_y is given and bf16 rows allow (P.dz_fused), so dout
 *   and z are read once.
 * bwd_qk_sum_kernel: dq, dk = Σ of a group's qparts parts of dq̃, dk̃ (bw_args), in part order.
 * bwd_param_sum_kernel: dq_bias, dk_bias, dd = Σ over the chunks (sequence order, then chunk
 *   order) of the per-chunk sums.
 */
#include "bwd.cuh"

using namespace ssmi_siso;

namespace ssmi_siso_bwd {

namespace {

const int kWalkBatch = 32; /* chunks whose loads a sequential walk issues together */
const int kPrepBatch = 11; /* the prep's angle loads per thread and batch (3 warps: L·A = 64·32 in two batches) */
static_assert(kMaxK / 2 <= kSeqThreads, "bwd_tok_kernel: a thread per angle at least (A <= K/2)");
static_assert(kBwdMaxChunk <= 64, "the prep's cumsum: two tokens per lane of one warp");
static_assert(kC == 64, "the chain's slots: warp 0's two tokens per lane are the slot's kC entries");
static_assert(kSeqThreads > 32, "the prep: warp 0 forms the scalars while the others load the angles");

/* One (chunk, head) per block: per token dt, λ = sigmoid(trap), γ = dt·λ, σ = γ + dt_{t+1}(1 −
 * λ_{t+1}) (0 after the sequence's last token) and the chunk-local inclusive cumsum of adt (warp 0:
 * lane l takes tokens 2l and 2l + 1, a shuffle scan over the pair sums; L ≤ kBwdMaxChunk) while the
 * other warps load the angles and form π·tanh(raw) (the two waits on memory overlap); then per
 * angle (a thread each, tokens in order) the chunk-local running sums of π·tanh(raw)·dt into th
 * and their total into thb. For the chained entries (P.slot) also the chain's scalar slot of
 * (chunk, head) and c_last into P.cl, and block (0, 0) the sequences as m3_seg (P.msegs); the grid
 * then has one block per head even without chunks. */
__global__ void __launch_bounds__(kSeqThreads) bwd_prep_kernel(const bw_args P) {
    __shared__ float s_dt[kBwdMaxChunk];
    __shared__ float s_rate[kBwdMaxChunk * (kMaxK / 2)]; /* π·tanh(raw), token-major */
    const int        w = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, nt = blockDim.x, H = P.H, A = P.A;
    if (P.msegs != nullptr && w == 0 && h == 0) /* the chain's sequences (also without chunks) */
        for (int s = tid; s < P.NS; s += nt) {
            const bw_seg b = P.segs[s];
            m3_seg       m;
            m.t0 = b.t0, m.row = b.row, m.len = b.len, m.first = b.first, m.count = b.count, m.srow = 0;
            P.msegs[s] = m;
        }
    if (w >= P.W) return; /* the sequences' block of a plan without chunks */
    const bw_chunk   ch = P.chunks[w];
    const int        L = ch.len;
    if (tid < 32) {
        float a[2], gam[2], sig[2], dtv[2], lam[2];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int       i = 2 * tid + u;
            const long long t = ch.t0 + i;
            const bool      in = i < L, next = i + 1 < L || (i + 1 == L && !ch.last);
            dtv[u] = in ? ld3(P.dt, ch.row, h, t) : 0.0f;
            lam[u] = in ? ssmi_math::sigmoid(ld3(P.trap, ch.row, h, t)) : 0.0f;
            const float dtn = next ? ld3(P.dt, ch.row, h, t + 1) : 0.0f;
            const float lamn = next ? ssmi_math::sigmoid(ld3(P.trap, ch.row, h, t + 1)) : 0.0f;
            a[u] = in ? ld3(P.adt, ch.row, h, t) : 0.0f;
            gam[u] = dtv[u] * lam[u];
            sig[u] = gam[u] + dtn * (1.0f - lamn);
        }
        float cs = a[0] + a[1];
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const float up = __shfl_up_sync(0xffffffffu, cs, off);
            if (tid >= off) cs += up;
        }
        const float up = __shfl_up_sync(0xffffffffu, cs, 1), before = tid > 0 ? up : 0.0f;
        const float cm[2] = {before + a[0], (before + a[0]) + a[1]};
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int i = 2 * tid + u;
            if (i >= L) continue;
            float * o = P.sc + ((ch.tok + i) * H + h) * kScalWs;
            o[0] = dtv[u], o[1] = lam[u], o[2] = gam[u], o[3] = sig[u], o[4] = cm[u];
            s_dt[i] = dtv[u];
        }
        if (P.slot != nullptr) { /* the chain's slot: the same values, zeros past the chunk */
            const m3_scal sl = carve_scal(P.slot + ((long long)w * H + h) * kPrepScal);
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int i = 2 * tid + u;
                /* past L, dt, λ, γ and σ are 0 already; cm holds the running sum */
                sl.dtv[i] = dtv[u], sl.lam[i] = lam[u], sl.gam[i] = gam[u], sl.sig[i] = sig[u];
                sl.cm[i] = i < L ? cm[u] : 0.0f;
                if (i == L - 1) P.cl[(long long)w * H + h] = cm[u];
            }
            if (tid == 0) sl.dtv[kC] = sl.lam[kC] = sl.gam[kC] = sl.cm[kC] = 0.0f; /* never read */
        }
    } else { /* the other warps meanwhile: π·tanh of every angle */
        load_rows_by<kPrepBatch>(tid - 32, nt - 32, P.ang, ch.row, ch.t0, h, L, A,
                                 [&](int i, int p, float x) { s_rate[i * A + p] = kPi * tanhf(x); });
    }
    __syncthreads();
    for (int p = tid; p < A; p += nt) {
        float run = 0.0f;
        for (int i = 0; i < L; ++i) {
            run += s_rate[i * A + p] * s_dt[i];
            P.th[((ch.tok + i) * H + h) * A + p] = run;
        }
        P.thb[((long long)w * H + h) * A + p] = run;
    }
}

/* One thread per (sequence, head, angle): θ entering each chunk, from angle_state (or 0), θ ←
 * wrap(θ + the chunk's sum); the chunks in batches of kWalkBatch (the loads of a batch first). */
__global__ void __launch_bounds__(kSeqThreads) bwd_theta_kernel(const bw_args P) {
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long long)P.NS * P.H * P.A) return;
    const int    p = (int)(e % P.A), h = (int)((e / P.A) % P.H), n = (int)(e / ((long long)P.A * P.H));
    const bw_seg sg = P.segs[n];
    float        th = P.has_states ? ld3(P.ang_in, n, h, p) : 0.0f;
    for (int j0 = 0; j0 < sg.count; j0 += kWalkBatch) {
        float add[kWalkBatch];
#pragma unroll
        for (int k = 0; k < kWalkBatch; ++k) {
            const long long w = sg.first + j0 + k;
            add[k] = j0 + k < sg.count ? P.thb[(w * P.H + h) * P.A + p] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < kWalkBatch; ++k)
            if (j0 + k < sg.count) {
                const long long w = sg.first + j0 + k;
                P.thb[(w * P.H + h) * P.A + p] = th;
                th = wrap2pi(th + add[k]);
            }
    }
}

/* One thread per (sequence, head, state element) and walk (blockIdx.z: 0 forward, 1 reverse); the
 * chunks in batches of kWalkBatch (the loads of a batch first, then the steps in order). */
__global__ void __launch_bounds__(kSeqThreads) bwd_pass_kernel(const bw_args P) {
    const bool   forward = blockIdx.z == 0;
    const int    n = blockIdx.x / P.H, h = blockIdx.x % P.H, VK = P.V * P.K;
    const int    e = blockIdx.y * blockDim.x + threadIdx.x;
    const bw_seg sg = P.segs[n];
    if (e >= VK) return;
    const int r = e / P.K, c = e % P.K;
    float *   buf = forward ? P.st : P.dst;
    float     S = 0.0f;
    if (forward) {
        if (sg.count == 0) return;
        if (P.has_states) {
            const float * sc = P.sc + (sg.tok * P.H + h) * kScalWs;
            const float   c0 = sc[0] * (1.0f - sc[1]);
            S = ld4(P.ssm_in, n, h, r, c) + c0 * ld3(P.v_in, n, h, r) * ld3(P.k_in, n, h, c);
        }
    } else {
        S = P.has_dfs ? ld4(P.dfs, n, h, r, c) : 0.0f;
    }
    for (int j0 = 0; j0 < sg.count; j0 += kWalkBatch) {
        float add[kWalkBatch], dec[kWalkBatch];
#pragma unroll
        for (int k = 0; k < kWalkBatch; ++k) {
            const int       j = forward ? j0 + k : sg.count - 1 - j0 - k;
            const long long w = sg.first + j;
            add[k] = j0 + k < sg.count ? buf[(w * P.H + h) * VK + e] : 0.0f;
            dec[k] = j0 + k < sg.count ? P.cl[w * P.H + h] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < kWalkBatch; ++k)
            if (j0 + k < sg.count) {
                const int       j = forward ? j0 + k : sg.count - 1 - j0 - k;
                const long long w = sg.first + j;
                buf[(w * P.H + h) * VK + e] = S;
                S = expf(dec[k]) * S + add[k];
            }
    }
    if (!forward) P.dhin[((long long)n * P.H + h) * VK + e] = S;
}

/* An empty sequence: d*_state = dfinal_* (or 0). */
__device__ void empty_sequence(const bw_args & P, int n, int h) {
    const int tid = threadIdx.x, nt = blockDim.x, K = P.K, V = P.V;
    if (P.dang_st.present)
        for (int i = tid; i < P.A; i += nt) st3(P.dang_st, n, h, i, P.has_dfa ? ld3(P.dfa, n, h, i) : 0.0f);
    if (P.dssm_st.present)
        for (int e = tid; e < V * K; e += nt)
            st4(P.dssm_st, n, h, e / K, e % K, P.has_dfs ? ld4(P.dfs, n, h, e / K, e % K) : 0.0f);
    if (P.dk_st.present)
        for (int c = tid; c < K; c += nt) st3(P.dk_st, n, h, c, P.has_dfk ? ld3(P.dfk, n, h, c) : 0.0f);
    if (P.dv_st.present)
        for (int r = tid; r < V; r += nt) st3(P.dv_st, n, h, r, P.has_dfv ? ld3(P.dfv, n, h, r) : 0.0f);
}

/* One block per (sequence, head): the initial-state gradients and dc into dcw, then the angle
 * carry over the chunks (thread per angle, last chunk first, in batches of kWalkBatch chunks):
 * thp[c] ← dfinal_angle_state + Σ of the dθ sums of the chunks after c, dangle_state = the total. */
__global__ void __launch_bounds__(kSeqThreads) bwd_seq_kernel(const bw_args P) {
    __shared__ float red[kSeqThreads / 32];
    const int        n = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, nt = blockDim.x;
    const int        lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
    const int        H = P.H, K = P.K, V = P.V, A = P.A;
    const bw_seg     sg = P.segs[n];
    if (sg.len == 0) {
        empty_sequence(P, n, h);
        return;
    }
    if (P.has_states) {
        const float * sc0 = P.sc + (sg.tok * H + h) * kScalWs;
        const float * dh = P.dhin + ((long long)n * H + h) * V * K;
        const float   c0 = sc0[0] * (1.0f - sc0[1]);
        float         part = 0.0f; /* Σ_r v_in[r]·(dH_in K_in)[r] over this warp's rows, in row order */
        for (int r = warp; r < V; r += nw) {
            const float u = warp_sum(K, [&](int c) { return dh[r * K + c] * ld3(P.k_in, n, h, c); });
            part += ld3(P.v_in, n, h, r) * u;
            if (lane == 0 && P.dv_st.present) st3(P.dv_st, n, h, r, c0 * u);
        }
        if (lane == 0) red[warp] = part;
        if (P.dk_st.present)
            for (int c = tid; c < K; c += nt) {
                float u = 0.0f;
                for (int r = 0; r < V; ++r) u += dh[r * K + c] * ld3(P.v_in, n, h, r);
                st3(P.dk_st, n, h, c, c0 * u);
            }
        if (P.dssm_st.present)
            for (int e = tid; e < V * K; e += nt) st4(P.dssm_st, n, h, e / K, e % K, dh[e]);
        __syncthreads();
        if (tid == 0) {
            float dc = 0.0f;
            for (int i = 0; i < nw; ++i) dc += red[i];
            P.dcw[(long long)n * H + h] = dc;
        }
    }
    for (int i = tid; i < A; i += nt) {
        float G = P.has_dfa ? ld3(P.dfa, n, h, i) : 0.0f;
        for (int j0 = 0; j0 < sg.count; j0 += kWalkBatch) {
            float add[kWalkBatch];
#pragma unroll
            for (int k = 0; k < kWalkBatch; ++k) {
                const long long w = sg.first + sg.count - 1 - j0 - k;
                add[k] = j0 + k < sg.count ? P.thp[(w * H + h) * A + i] : 0.0f;
            }
#pragma unroll
            for (int k = 0; k < kWalkBatch; ++k)
                if (j0 + k < sg.count) {
                    const long long w = sg.first + sg.count - 1 - j0 - k;
                    P.thp[(w * H + h) * A + i] = G;
                    G += add[k];
                }
        }
        if (P.dang_st.present) st3(P.dang_st, n, h, i, G);
    }
}

/* x[row, t0 + i, hh, c] = src[i·cols + c] for i < rows, c < cols (an output view of any dtype): thread e
 * mod blockDim.x takes element e, walked (grid_walk) with its offset advanced by additions. */
template <typename T>
__device__ __forceinline__ void rows_store_typed(const m3_out & x, long long row, long long t0, long long hh, int rows,
                                                 int cols, const float * src) {
    const int n = rows * cols, nt = blockDim.x;
    if ((int)threadIdx.x >= n) return; /* also keeps cols > 0 for the walk */
    T * const     base = (T *)x.p + row * x.s[0] + t0 * x.s[1] + hh * x.s[2];
    grid_walk_off at(threadIdx.x, nt, cols, x.s[1], x.s[3]);
    for (int e = threadIdx.x; e < n; e += nt, at.next()) ssmi_siso::to_t(src[e], base + at.o);
}
/* Two elements of T as one store. */
__device__ __forceinline__ float2         pack2(float a, float b, float) { return make_float2(a, b); }
__device__ __forceinline__ __half2        pack2(float a, float b, __half) { return __floats2half2_rn(a, b); }
__device__ __forceinline__ __nv_bfloat162 pack2(float a, float b, __nv_bfloat16) { return __floats2bfloat162_rn(a, b); }
/* rows_store_typed by pairs of columns (2c, 2c + 1), one store each (the same values): cols even and
 * the output's pairs aligned (rows_store checks); thread e mod blockDim.x takes pair e. src 8-byte
 * aligned. */
template <typename T>
__device__ __forceinline__ void rows_store_pairs(const m3_out & x, long long row, long long t0, long long hh, int rows,
                                                 int cols, const float * src) {
    typedef decltype(pack2(0.0f, 0.0f, T())) T2;
    const int w2 = cols / 2, n = rows * w2, nt = blockDim.x;
    if ((int)threadIdx.x >= n) return; /* also keeps w2 > 0 for the walk */
    T * const     base = (T *)x.p + row * x.s[0] + t0 * x.s[1] + hh * x.s[2];
    grid_walk_off at(threadIdx.x, nt, w2, x.s[1], 2);
    for (int e = threadIdx.x; e < n; e += nt, at.next()) {
        const float2 v = *reinterpret_cast<const float2 *>(src + 2 * e); /* (i, 2c): src[i·cols + 2c] = src[2e] */
        *reinterpret_cast<T2 *>(base + at.o) = pack2(v.x, v.y, T());
    }
}
/* x[row, t0 + i, hh, c] = src[i·cols + c] (rows_store_typed), by pairs where the layout allows it
 * (uniform over the grid). */
__device__ __forceinline__ void rows_store(const m3_out & x, long long row, long long t0, long long hh, int rows, int cols,
                                           const float * src) {
    by_dtype(x.dtype, [&](auto t) {
        typedef decltype(t) T;
        if constexpr (!std::is_same<T, double>::value) {
            const bool pairs = cols % 2 == 0 && x.s[3] == 1 && ((x.s[0] | x.s[1] | x.s[2]) & 1) == 0 &&
                               (uintptr_t)x.p % (2 * sizeof(T)) == 0;
            if (pairs) return rows_store_pairs<T>(x, row, t0, hh, rows, cols, src);
        }
        rows_store_typed<T>(x, row, t0, hh, rows, cols, src);
    });
}

/* warp_sum(n, f(c) = x[c]) of bwd.cuh computed by one thread, the same additions in the same order
 * (so the same bits): the lane partials 0.0f + x[l] + x[l + 32] + …, then the xor butterfly's tree,
 * whose lanes all hold the same sum. */
__device__ __forceinline__ float lanes_sum(int n, const float * x) {
    float b[32];
#pragma unroll
    for (int l = 0; l < 32; ++l) b[l] = 0.0f;
    for (int c0 = 0; c0 < n; c0 += 32)
#pragma unroll
        for (int l = 0; l < 32; ++l)
            if (c0 + l < n) b[l] += x[c0 + l];
    /* the levels written out: loops whose bound depends on the level keep b in local memory */
#pragma unroll
    for (int l = 0; l < 16; ++l) b[l] += b[l + 16];
#pragma unroll
    for (int l = 0; l < 8; ++l) b[l] += b[l + 8];
#pragma unroll
    for (int l = 0; l < 4; ++l) b[l] += b[l + 4];
    b[0] += b[2], b[1] += b[3];
    return b[0] + b[1];
}

/* One block per (chunk, head): the angle backward inside the chunk (spec §6.6: G_t = the chunk's
 * carry + Σ_{u≥t in the chunk} dθ_u, in shared memory only: dangles into s_tn, π·tanh(raw)·G into
 * s_g); then the dangles stored by all threads (coalesced along the angles), the per-token sums of
 * π·tanh(raw)·G (a warp each, into s_dt once dt is read) and per token (a thread each) ddt and dtrap
 * (spec §6.2). The suffix sums: the chunk's tokens in nseg = blockDim.x / A segments, a thread per
 * (segment, angle); each sums its segment (last token first), then walks it last token first from
 * the carry plus the later segments' totals (last segment first), so every thread takes part and a
 * walk is L / nseg steps long; the order is fixed, so the bytes depend on nothing but the inputs. */
__global__ void __launch_bounds__(kSeqThreads) bwd_tok_kernel(const bw_args P) {
    extern __shared__ float tok_sm[]; /* launch_bwd_tok: C·(A + 1) dθ, then π·tanh(raw)·G (rows of A + 1:
                                         a thread per row reads them without bank conflicts), rounded
                                         up to even; C·A tanh(raw), then the dangles (8-byte aligned:
                                         rows_store_pairs); C dt, then the angle sums; blockDim.x
                                         segment totals */
    const int    ga = P.A + 1;
    float *const s_g = tok_sm, *const s_tn = s_g + ((P.C * ga + 1) & ~1), *const s_dt = s_tn + P.C * P.A;
    float *const s_seg = s_dt + P.C;
    const int      w = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, nt = blockDim.x;
    const int      H = P.H, A = P.A;
    const bw_chunk ch = P.chunks[w];
    const int      L = ch.len;
    load_rows(P.ang, ch.row, ch.t0, h, L, A, [&](int i, int p, float x) { s_tn[i * A + p] = tanhf(x); });
    rows_at(P.dth + (ch.tok * H + h) * A, (long long)H * A, 1, L, A, [&](int i, int p, float x) { s_g[i * ga + p] = x; });
    for (int i = tid; i < L; i += nt) s_dt[i] = P.sc[((ch.tok + i) * H + h) * kScalWs];
    __syncthreads();
    if (A > 0) { /* A ≤ K/2 ≤ kMaxK/2 ≤ blockDim.x: at least one segment */
        const int  nseg = nt / A, sl = (L + nseg - 1) / nseg, p = tid % A, sg = tid / A;
        const int  lo = min(L, sg * sl), hi = min(L, lo + sl);
        const bool on = sg < nseg;
        float      tot = 0.0f;
        if (on)
            for (int i = hi - 1; i >= lo; --i) tot += s_g[i * ga + p];
        s_seg[tid] = tot;
        __syncthreads();
        if (on) {
            float G = P.thp[((long long)w * H + h) * A + p];
            for (int u = nseg - 1; u > sg; --u) G += s_seg[u * A + p];
            for (int i = hi - 1; i >= lo; --i) {
                G += s_g[i * ga + p];
                const float tn = s_tn[i * A + p];
                s_tn[i * A + p] = kPi * s_dt[i] * (1.0f - tn * tn) * G;
                s_g[i * ga + p] = kPi * tn * G;
            }
        }
    }
    __syncthreads();
    if (P.dang.present) rows_store(P.dang, ch.row, ch.t0, h, L, A, s_tn);
    if (!P.ddt.present && !P.dtrap.present) return;
    /* a thread per token: the angle sum as a warp's warp_sum forms it (lanes_sum); dt is read again
     * from the scalars below */
    for (int i = tid; i < L; i += nt) s_dt[i] = lanes_sum(A, s_g + i * ga);
    __syncthreads();
    const bw_seg sg = P.segs[ch.seq];
    const float  dc = P.has_states ? P.dcw[(long long)ch.seq * H + h] : 0.0f;
    for (int i = tid; i < L; i += nt) {
        const long long t = ch.t0 + i, o = (ch.tok + i) * H + h;
        const float *   sc = P.sc + o * kScalWs;
        const float     dtv = sc[0], lam = sc[1], dg = P.dgm[o];
        float           ddt = dg * lam + s_dt[i], dlam = dg * dtv;
        if (t > sg.t0) {
            const float ds = P.dsg[o - H]; /* dσ of the previous token (same row, same head) */
            ddt += ds * (1.0f - lam);
            dlam -= ds * dtv;
        } else if (P.has_states) {
            ddt += dc * (1.0f - lam);
            dlam -= dc * dtv;
        }
        if (P.ddt.present) st3(P.ddt, ch.row, h, t, ddt);
        if (P.dtrap.present) st3(P.dtrap, ch.row, h, t, dlam * lam * (1.0f - lam));
    }
}

__device__ __forceinline__ float dz_of(float y, float dout, float z) {
    const float sg = ssmi_math::sigmoid_fast(z);
    return y * (dout * sg * (1.0f + z * (1.0f - sg)));
}

/* Token (b, t) in 16-byte rows, the block's threads over its H·V/8 pieces of 8 elements: dout and
 * z of MODE's dtype; DY: dy = dout ⊙ silu(z) split into P.dyh, P.dyl (split2); DZ:
 * dz (bf16, MODE M_BF16) from y (f32). V % 8 == 0. */
template <int MODE, bool DY, bool DZ>
__device__ __forceinline__ void gate_token_rows(const bw_args & P, long long b, long long t) {
    typedef typename cfg<MODE>::T T;
    static_assert(!DZ || MODE == M_BF16, "dz in 16-byte rows is bf16");
    const int per = P.V / 8, n = P.H * per;
    for (int e = threadIdx.x; e < n; e += blockDim.x) {
        const int h = e / per, r = (e - h * per) * 8;
        float     d[8], z[8];
        unpack8<MODE>(d, *reinterpret_cast<const uint4 *>((const T *)P.dout.p +
                                                           (b * P.dout.s[0] + t * P.dout.s[1] + h * P.dout.s[2] + r)));
        unpack8<MODE>(z, *reinterpret_cast<const uint4 *>((const T *)P.z.p +
                                                           (b * P.z.s[0] + t * P.z.s[1] + h * P.z.s[2] + r)));
        if constexpr (DY) {
            uint32_t hi[4], lo[4];
#pragma unroll
            for (int k = 0; k < 4; ++k)
                split2<MODE>(gated_dy(d[2 * k], z[2 * k]), gated_dy(d[2 * k + 1], z[2 * k + 1]), hi[k], lo[k]);
            const long long o = ((b * P.S + t) * P.H + h) * P.V + r;
            *reinterpret_cast<uint4 *>((T *)P.dyh + o) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            *reinterpret_cast<uint4 *>((T *)P.dyl + o) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
        if constexpr (DZ) {
            const float * yp = (const float *)P.ypre.p + (b * P.ypre.s[0] + t * P.ypre.s[1] + h * P.ypre.s[2] + r);
            const float4  y0 = *reinterpret_cast<const float4 *>(yp), y1 = *reinterpret_cast<const float4 *>(yp + 4);
            const float   y[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
            unsigned      o[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const __nv_bfloat162 v =
                    __floats2bfloat162_rn(dz_of(y[2 * k], d[2 * k], z[2 * k]), dz_of(y[2 * k + 1], d[2 * k + 1], z[2 * k + 1]));
                o[k] = *reinterpret_cast<const unsigned *>(&v);
            }
            __nv_bfloat16 * dp = (__nv_bfloat16 *)P.dz.p + (b * P.dz.s[0] + t * P.dz.s[1] + h * P.dz.s[2] + r);
            *reinterpret_cast<uint4 *>(dp) = make_uint4(o[0], o[1], o[2], o[3]);
        }
    }
}

/* dz of token (b, t): the block's threads over its H·V elements, 8 at a time (16-byte loads and
 * stores) where P.dz_vec allows it, else one at a time through the strides. */
__device__ void dz_token(const bw_args & P, long long b, long long t) {
    if (P.dz_vec) { /* V % 8 == 0 */
        gate_token_rows<M_BF16, false, true>(P, b, t);
        return;
    }
    const int n = P.H * P.V;
    for (int e = threadIdx.x; e < n; e += blockDim.x) {
        const int h = e / P.V, r = e - h * P.V;
        st4(P.dz, b, t, h, r, dz_of(ld4(P.ypre, b, t, h, r), ld4(P.dout, b, t, h, r), ld4(P.z, b, t, h, r)));
    }
}

/* A block per token, grid-stride over the T tokens. */
__global__ void __launch_bounds__(256) bwd_dz_kernel(const bw_args P, long long T) {
    for (long long tok = blockIdx.x; tok < T; tok += gridDim.x) dz_token(P, tok / P.S, tok % P.S);
}

template <int MODE, bool DZ>
__global__ void __launch_bounds__(256) bwd_gate_kernel(const bw_args P, long long T) {
    for (long long tok = blockIdx.x; tok < T; tok += gridDim.x) gate_token_rows<MODE, true, DZ>(P, tok / P.S, tok % P.S);
}

__global__ void bwd_qk_sum_kernel(const bw_args P, long long T, int Hq) {
    const long long n = T * Hq * P.K;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
        const int       c = (int)(e % P.K), g = (int)((e / P.K) % Hq);
        const long long tok = e / ((long long)P.K * Hq), b = tok / P.S, t = tok % P.S;
        float           a = 0.0f, d = 0.0f;
        for (int j = 0; j < P.qparts; ++j) {
            const long long o = ((tok * Hq + g) * P.qparts + j) * P.K + c;
            a += P.dqt[o];
            d += P.dkt[o];
        }
        if (P.dq.present) st4(P.dq, b, t, g, c, a);
        if (P.dk.present) st4(P.dk, b, t, g, c, d);
    }
}

/* Σ_{w<n} p[w·step] in order, kParamBatch loads issued before their adds (the param sums: a few
 * thousand threads walk every chunk, so the loads' latency, not their bytes, sets the time). */
constexpr int kParamBatch = 8;
__device__ __forceinline__ float sum_in_order(const float * p, long long step, long long n) {
    float     a = 0.0f;
    long long w = 0;
    for (; w + kParamBatch <= n; w += kParamBatch) {
        float x[kParamBatch];
#pragma unroll
        for (int u = 0; u < kParamBatch; ++u) x[u] = p[(w + u) * step];
#pragma unroll
        for (int u = 0; u < kParamBatch; ++u) a += x[u];
    }
    for (; w < n; ++w) a += p[w * step];
    return a;
}

__global__ void bwd_param_sum_kernel(const bw_args P) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x, HK = P.H * P.K;
    if (e < HK) {
        const int       h = e / P.K, c = e % P.K;
        const long long step = (long long)P.H * P.K, o = (long long)h * P.K + c;
        const float     a = sum_in_order(P.qbp + o, step, P.W), b = sum_in_order(P.kbp + o, step, P.W);
        if (P.dqb.present) ssmi_cu_st(P.dqb.p, P.dqb.dtype, h * P.dqb.s[0] + c * P.dqb.s[1], a);
        if (P.dkb.present) ssmi_cu_st(P.dkb.p, P.dkb.dtype, h * P.dkb.s[0] + c * P.dkb.s[1], b);
    } else if (e < HK + P.H) {
        const int   h = e - HK;
        const float a = sum_in_order(P.ddp + h, P.H, P.W);
        if (P.dd.present) ssmi_cu_st(P.dd.p, P.dd.dtype, h * P.dd.s[0], a);
    }
}

} /* namespace */

ssm_status launch_bwd_prep(ssm_context * ctx, const char * op, const bw_args & P) {
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    bwd_prep_kernel<<<dim3((unsigned)(P.W > 0 ? P.W : 1), (unsigned)P.H), kSeqThreads, 0, s>>>(P);
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "bwd_prep_kernel launch", cudaGetLastError()));
    const long long n = (long long)P.NS * P.H * P.A;
    if (n == 0 || P.W == 0) return SSM_STATUS_OK;
    bwd_theta_kernel<<<(unsigned)((n + kSeqThreads - 1) / kSeqThreads), kSeqThreads, 0, s>>>(P);
    return ssmi_cuda_status(ctx, op, "bwd_theta_kernel launch", cudaGetLastError());
}

ssm_status launch_bwd_passes(ssm_context * ctx, const char * op, const bw_args & P) {
    const int  VK = P.V * P.K;
    const dim3 grid((unsigned)(P.NS * P.H), (unsigned)((VK + kSeqThreads - 1) / kSeqThreads), 2);
    bwd_pass_kernel<<<grid, kSeqThreads, 0, ssmi_cuda_stream(ctx)>>>(P);
    return ssmi_cuda_status(ctx, op, "bwd_pass_kernel launch", cudaGetLastError());
}

ssm_status launch_bwd_seq(ssm_context * ctx, const char * op, const bw_args & P) {
    bwd_seq_kernel<<<dim3((unsigned)P.NS, (unsigned)P.H), kSeqThreads, 0, ssmi_cuda_stream(ctx)>>>(P);
    return ssmi_cuda_status(ctx, op, "bwd_seq_kernel launch", cudaGetLastError());
}

ssm_status launch_bwd_tok(ssm_context * ctx, const char * op, const bw_args & P) {
    /* shared memory of bwd_tok_kernel: (2·A + 2)·C floats (+ 1 to keep the dangles' rows 8-byte
     * aligned) and kSeqThreads segment totals (past the default 48 KB for long chunks with many angles:
     * opted in) */
    const size_t bytes = sizeof(float) * ((2 * (size_t)P.A + 2) * (size_t)P.C + 1 + kSeqThreads);
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
        ctx, op, "cudaFuncSetAttribute (bwd_tok_kernel)",
        cudaFuncSetAttribute(bwd_tok_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)));
    bwd_tok_kernel<<<dim3((unsigned)P.W, (unsigned)P.H), kSeqThreads, bytes, ssmi_cuda_stream(ctx)>>>(P);
    return ssmi_cuda_status(ctx, op, "bwd_tok_kernel launch", cudaGetLastError());
}

ssm_status launch_bwd_dz(ssm_context * ctx, const char * op, const bw_args & P, long long T) {
    if (T == 0 || P.H == 0) return SSM_STATUS_OK;
    bwd_dz_kernel<<<(unsigned)(T < (1 << 20) ? T : (1 << 20)), 256, 0, ssmi_cuda_stream(ctx)>>>(P, T);
    return ssmi_cuda_status(ctx, op, "bwd_dz_kernel launch", cudaGetLastError());
}

ssm_status launch_bwd_gate(ssm_context * ctx, const char * op, const bw_args & P, long long T, int mode) {
    if (T == 0 || P.H == 0) return SSM_STATUS_OK;
    void (*kernel)(const bw_args, long long) = mode == M_F16 ? bwd_gate_kernel<M_F16, false>
                                               : P.dz_fused  ? bwd_gate_kernel<M_BF16, true>
                                                             : bwd_gate_kernel<M_BF16, false>;
    kernel<<<(unsigned)(T < (1 << 20) ? T : (1 << 20)), 256, 0, ssmi_cuda_stream(ctx)>>>(P, T);
    return ssmi_cuda_status(ctx, op, "bwd_gate_kernel launch", cudaGetLastError());
}

ssm_status launch_bwd_sums(ssm_context * ctx, const char * op, const bw_args & P, long long T, int Hq) {
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const long long    n = T * Hq * P.K;
    if (n > 0 && (P.dq.present || P.dk.present)) {
        const long long blocks = (n + 255) / 256;
        bwd_qk_sum_kernel<<<(unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, s>>>(P, T, Hq);
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "bwd_qk_sum_kernel launch", cudaGetLastError()));
    }
    if (P.dqb.present || P.dkb.present || P.dd.present) {
        const int m = P.H * P.K + P.H;
        bwd_param_sum_kernel<<<(unsigned)((m + 255) / 256), 256, 0, s>>>(P);
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "bwd_param_sum_kernel launch", cudaGetLastError()));
    }
    return SSM_STATUS_OK;
}

} /* namespace ssmi_siso_bwd */
