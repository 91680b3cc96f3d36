/* conv1d.cu — causal_conv1d, its backward and the decode update on CUDA (spec §6.2;
 * docs/ops/layer.md §3-§5), for any width W ≥ 1, any strides (channel-last or not, stride 0
 * on inputs), any float dtypes, seq_idx with padding ids, initial and final states.
 *
 * Threads walk (batch, time, channel) with the channel fastest, so Mamba-2's channel-last
 * activations are read and written in coalesced rows.
 *   forward:  one thread per output: pre = bias + Σ_k w[k]·xin[t−(W−1)+k] (k ascending, fma),
 *             then silu; a second kernel copies the last W−1 raw inputs into final_states.
 *             With cu_seqlens (batch 1) each token finds its sequence by binary search, its
 *             window before the sequence's start reads the sequence's initial_states row (or
 *             0), and final_states has a row per sequence (an empty one: its initial row).
 *   backward: (1) gpre = dout·act'(pre) per token into an fp32 workspace (batch, S, D);
 *             (2) one thread per dxin element (dx, and dinitial_states for τ < 0) sums
 *                 w[k]·gpre over the outputs it fed, k ascending, plus dfinal_states;
 *             (3) the tokens of all batch rows are cut into NT tiles of TT tokens (a function
 *                 of B·S only); one thread per (tile, tap k ≤ W, channel) sums its tile in
 *                 token order into a partial (k = W: the bias);
 *             (4) one thread per (k, channel) adds the NT partials in tile order into dweight
 *                 or dbias. No atomics: the same bits for every run.
 *   update:   one thread per (row, channel): the window, the output, then the state shifted
 *             left by one in increasing column order (each column read before it is
 *             overwritten, so the pool may be updated in place; slots are distinct). */
#include <string.h>

#include "layer.cuh"

namespace ssmi_layer {
namespace {

constexpr int kThreads = 256;
constexpr int kWgradThreads = 128;
constexpr long long kMaxTiles = 1024; /* token tiles of the weight gradient */

struct conv_k {
    ssmi_cu_view x, w, bias, init, out, fin;     /* forward (and the backward's forward inputs) */
    ssmi_cu_view dout, dfin, dx, dinit, dw, db;  /* backward                                    */
    const long long * seq;                       /* (B, S) ids, or NULL                         */
    const long long * cu;                        /* cu_seqlens (nseq + 1), or NULL              */
    long long         nseq;
    float *           g;                         /* backward: gpre (B, S, D)                    */
    float *           partial;                   /* backward: (NT, W+1, D)                      */
    long long         B, D, S, W, TT, NT;
    int               silu;
};

/* Does input tau feed token t of row b? */
__device__ __forceinline__ bool feeds(const conv_k & P, long long b, long long tau, long long t) {
    if (P.seq == NULL) return true;
    return tau >= 0 && P.seq[b * P.S + tau] == P.seq[b * P.S + t];
}
__device__ __forceinline__ bool padding(const conv_k & P, long long b, long long t) {
    return P.seq != NULL && P.seq[b * P.S + t] < 0;
}
/* xin of a sequence that starts at token `start` of row b and whose state row is `row`: x for
 * tau ≥ start, the initial states (or 0) below. */
__device__ __forceinline__ float xin_seq(const conv_k & P, long long b, long long row, long long start, long long d,
                                         long long tau) {
    if (tau >= start) return ld(P.x, o3(P.x, b, d, tau));
    if (P.init.p != NULL) return ld(P.init, o3(P.init, row, d, P.W - 1 + tau - start));
    return 0.0f;
}
/* xin[b, d, tau] of a batch row: x for tau ≥ 0, the initial states (or 0) below. */
__device__ __forceinline__ float xin(const conv_k & P, long long b, long long d, long long tau) {
    return xin_seq(P, b, b, 0, d, tau);
}
/* With cu_seqlens: the sequence of token t, the last s < nseq with cu[s] ≤ t (cu[0] = 0 ≤ t). */
__device__ __forceinline__ long long seq_of(const conv_k & P, long long t) {
    long long lo = 0, hi = P.nseq - 1;
    while (lo < hi) {
        const long long mid = hi - (hi - lo) / 2;
        if (P.cu[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
__device__ __forceinline__ float conv_pre(const conv_k & P, long long b, long long d, long long t) {
    float acc = P.bias.p != NULL ? ld(P.bias, o1(P.bias, d)) : 0.0f;
    if (P.cu != NULL) { /* batch 1, no seq_idx: the window stops at the sequence's start */
        const long long s = seq_of(P, t), start = P.cu[s];
        for (long long k = 0; k < P.W; ++k)
            acc = fmaf(ld(P.w, o2(P.w, d, k)), xin_seq(P, b, s, start, d, t - (P.W - 1) + k), acc);
        return acc;
    }
    for (long long k = 0; k < P.W; ++k) {
        const long long tau = t - (P.W - 1) + k;
        if (feeds(P, b, tau, t)) acc = fmaf(ld(P.w, o2(P.w, d, k)), xin(P, b, d, tau), acc);
    }
    return acc;
}

__global__ void conv_fwd_kernel(conv_k P) {
    const long long n = P.B * P.S * P.D;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long d = i % P.D, r = i / P.D, t = r % P.S, b = r / P.S;
        float           y = 0.0f;
        if (!padding(P, b, t)) {
            y = conv_pre(P, b, d, t);
            if (P.silu) y = ssmi_math::silu(y);
        }
        st(P.out, o3(P.out, b, d, t), y);
    }
}

/* final_states[b, d, j] = xin[b, d, S − (W−1) + j]; with cu_seqlens, row s of sequence s's
 * tokens [start, end): xin_seq at end − (W−1) + j. */
__global__ void conv_final_kernel(conv_k P) {
    const long long rows = P.cu != NULL ? P.nseq : P.B;
    const long long n = rows * (P.W - 1) * P.D;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long d = i % P.D, r = i / P.D, j = r % (P.W - 1), row = r / (P.W - 1);
        const float     v = P.cu != NULL ? xin_seq(P, 0, row, P.cu[row], d, P.cu[row + 1] - (P.W - 1) + j)
                                         : xin(P, row, d, P.S - (P.W - 1) + j);
        st(P.fin, o3(P.fin, row, d, j), v);
    }
}

/* gpre[b, t, d] = dout · act'(pre), 0 for a padding token. */
__global__ void conv_gpre_kernel(conv_k P) {
    const long long n = P.B * P.S * P.D;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long d = i % P.D, r = i / P.D, t = r % P.S, b = r / P.S;
        float           g = 0.0f;
        if (!padding(P, b, t)) {
            g = ld(P.dout, o3(P.dout, b, d, t));
            if (P.silu) {
                const float pre = conv_pre(P, b, d, t), s = ssmi_math::sigmoid(pre);
                g *= s * (1.0f + pre * (1.0f - s));
            }
        }
        P.g[i] = g;
    }
}

/* dxin[b, d, tau] for tau in [−(W−1), S): dx (tau ≥ 0) and dinitial_states (tau < 0). */
__global__ void conv_dx_kernel(conv_k P) {
    const long long span = P.S + P.W - 1, n = P.B * span * P.D;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long d = i % P.D, r = i / P.D, tau = r % span - (P.W - 1), b = r / span;
        if (tau >= 0 ? P.dx.p == NULL : P.dinit.p == NULL) continue;
        float acc = 0.0f;
        for (long long k = 0; k < P.W; ++k) {
            const long long tg = tau + (P.W - 1) - k;
            if (tg >= 0 && tg < P.S && feeds(P, b, tau, tg))
                acc = fmaf(ld(P.w, o2(P.w, d, k)), P.g[(b * P.S + tg) * P.D + d], acc);
        }
        const long long j = tau - (P.S - (P.W - 1));
        if (P.dfin.p != NULL && j >= 0 && j < P.W - 1) acc += ld(P.dfin, o3(P.dfin, b, d, j));
        if (tau >= 0) st(P.dx, o3(P.dx, b, d, tau), acc);
        else st(P.dinit, o3(P.dinit, b, d, P.W - 1 + tau), acc);
    }
}

/* partial[tile, k, d]: Σ over the tile's tokens u (in order) of gpre·xin[t−(W−1)+k] (k < W) or
 * of gpre (k = W). Grid: x over channels, y over tiles, z over taps (grid-stride in y and z). */
__global__ void conv_wgrad_kernel(conv_k P) {
    const long long d = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (d >= P.D) return;
    const long long ntok = P.B * P.S;
    for (long long tile = blockIdx.y; tile < P.NT; tile += gridDim.y)
        for (long long k = blockIdx.z; k <= P.W; k += gridDim.z) {
            const long long u0 = tile * P.TT, u1 = u0 + P.TT < ntok ? u0 + P.TT : ntok;
            float           acc = 0.0f;
            for (long long u = u0; u < u1; ++u) {
                const float g = P.g[u * P.D + d];
                if (k == P.W) {
                    acc += g;
                    continue;
                }
                const long long b = u / P.S, t = u % P.S, tau = t - (P.W - 1) + k;
                if (feeds(P, b, tau, t)) acc = fmaf(g, xin(P, b, d, tau), acc);
            }
            P.partial[(tile * (P.W + 1) + k) * P.D + d] = acc;
        }
}

/* dweight[d, k] (k < W) and dbias[d] (k = W): the NT partials in tile order. */
__global__ void conv_wsum_kernel(conv_k P) {
    const long long n = (P.W + 1) * P.D;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long d = i % P.D, k = i / P.D;
        if (k < P.W ? P.dw.p == NULL : P.db.p == NULL) continue;
        float s = 0.0f;
        for (long long tile = 0; tile < P.NT; ++tile) s += P.partial[(tile * (P.W + 1) + k) * P.D + d];
        if (k < P.W) st(P.dw, o2(P.dw, d, k), s);
        else st(P.db, o1(P.db, d), s);
    }
}

/* ---- the decode update ----------------------------------------------------------------------- */
struct update_k {
    ssmi_cu_view      x, w, bias, state, out, fin;
    const long long * slots; /* (B) slot per row, or NULL (row b uses slot b) */
    long long         B, D, W, L;
    int               silu;
};

/* Plain loads of the state (no read-only cache path): the kernel may write the same pool. */
__device__ __forceinline__ float ld_state(const ssmi_cu_view & v, long long off) {
    switch (v.dtype) {
        case SSM_DTYPE_F32: return ((const float *)v.p)[off];
        case SSM_DTYPE_F16: return __half2float(((const __half *)v.p)[off]);
        case SSM_DTYPE_BF16: return __bfloat162float(((const __nv_bfloat16 *)v.p)[off]);
        case SSM_DTYPE_F64: return (float)((const double *)v.p)[off];
        default: return 0.0f;
    }
}

__global__ void conv_update_kernel(update_k P) {
    const long long n = P.B * P.D;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long d = i % P.D, b = i / P.D;
        const long long slot = P.slots != NULL ? P.slots[b] : b;
        if (slot < 0) {
            st(P.out, o2(P.out, b, d), 0.0f);
            continue;
        }
        const float xv = ld(P.x, o2(P.x, b, d));
        float       acc = P.bias.p != NULL ? ld(P.bias, o1(P.bias, d)) : 0.0f;
        for (long long k = 0; k < P.W; ++k) { /* window[k] = state[L−W+1+k], window[W−1] = x */
            const long long j = P.L - P.W + 1 + k;
            const float     v = k == P.W - 1 ? xv : ld_state(P.state, o3(P.state, slot, d, j));
            acc = fmaf(ld(P.w, o2(P.w, d, k)), v, acc);
        }
        st(P.out, o2(P.out, b, d), P.silu ? ssmi_math::silu(acc) : acc);
        if (P.fin.p == NULL) continue;
        for (long long j = 0; j < P.L; ++j) {
            const float v = j + 1 < P.L ? ld_state(P.state, o3(P.state, slot, d, j + 1)) : xv;
            st(P.fin, o3(P.fin, slot, d, j), v);
        }
    }
}

/* ---- problems, launches and tables ------------------------------------------------------------- */
struct conv_problem {
    ssm_context * ctx;
    const char *  op;
    conv_k        k;
    int           has_final;
};

ssm_status launch_fwd(const conv_problem & pb) {
    const long long rows = pb.k.cu != NULL ? pb.k.nseq : pb.k.B;
    const long long n = pb.k.B * pb.k.S * pb.k.D, nf = rows * (pb.k.W - 1) * pb.k.D;
    const cudaStream_t s = ssmi_cuda_stream(pb.ctx);
    if (n > 0) {
        conv_fwd_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(pb.k);
        SSMI_CU_CHECK_LAUNCH(pb.ctx, pb.op, "conv_fwd_kernel");
    }
    if (pb.has_final && nf > 0) {
        conv_final_kernel<<<grid_for(nf, kThreads), kThreads, 0, s>>>(pb.k);
        SSMI_CU_CHECK_LAUNCH(pb.ctx, pb.op, "conv_final_kernel");
    }
    return SSM_STATUS_OK;
}

/* The backward's launches; pb.k.g and pb.k.partial are set. */
ssm_status launch_bwd(const conv_problem & pb) {
    const conv_k &     k = pb.k;
    const cudaStream_t s = ssmi_cuda_stream(pb.ctx);
    const long long    n = k.B * k.S * k.D, ndx = k.B * (k.S + k.W - 1) * k.D;
    if (n > 0) {
        conv_gpre_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(k);
        SSMI_CU_CHECK_LAUNCH(pb.ctx, pb.op, "conv_gpre_kernel");
    }
    if ((k.dx.p != NULL || k.dinit.p != NULL) && ndx > 0) {
        conv_dx_kernel<<<grid_for(ndx, kThreads), kThreads, 0, s>>>(k);
        SSMI_CU_CHECK_LAUNCH(pb.ctx, pb.op, "conv_dx_kernel");
    }
    if (k.dw.p == NULL && k.db.p == NULL) return SSM_STATUS_OK;
    if (k.NT > 0) {
        const long long gx = (k.D + kWgradThreads - 1) / kWgradThreads;
        const dim3      grid((unsigned)gx, (unsigned)(k.NT < 65535 ? k.NT : 65535),
                             (unsigned)(k.W + 1 < 65535 ? k.W + 1 : 65535));
        conv_wgrad_kernel<<<grid, kWgradThreads, 0, s>>>(k);
        SSMI_CU_CHECK_LAUNCH(pb.ctx, pb.op, "conv_wgrad_kernel");
    }
    const long long nw = (k.W + 1) * k.D;
    if (nw == 0) return SSM_STATUS_OK;
    conv_wsum_kernel<<<grid_for(nw, kThreads), kThreads, 0, s>>>(k);
    SSMI_CU_CHECK_LAUNCH(pb.ctx, pb.op, "conv_wsum_kernel");
    return SSM_STATUS_OK;
}

struct update_problem {
    ssm_context * ctx;
    const char *  op;
    update_k      k;
};

ssm_status launch_update(const update_problem & pb) {
    const long long n = pb.k.B * pb.k.D;
    if (n == 0) return SSM_STATUS_OK;
    conv_update_kernel<<<grid_for(n, kThreads), kThreads, 0, ssmi_cuda_stream(pb.ctx)>>>(pb.k);
    SSMI_CU_CHECK_LAUNCH(pb.ctx, pb.op, "conv_update_kernel");
    return SSM_STATUS_OK;
}

const entry<conv_problem> kFwdTable[] = {
    {"per_output",
     "one thread per output, the W taps read through the strides (channel-last rows coalesced): any width, layout, "
     "dtype, seq_idx or cu_seqlens, and states",
     "always", always<conv_problem>, launch_fwd},
};
const entry<conv_problem> kBwdTable[] = {
    {"gradient_buffer",
     "gpre once per token into an fp32 workspace; dx from it per element; dweight/dbias as per-tile partials summed "
     "in tile order (deterministic, no atomics)",
     "always", always<conv_problem>, launch_bwd},
};
const entry<update_problem> kUpdateTable[] = {
    {"per_channel",
     "one thread per (row, channel): window, output and the state shifted in place or into a separate pool; any L, "
     "width, layout and dtype",
     "always", always<update_problem>, launch_update},
};

conv_k conv_args_of(const ssmi_conv1d_dims * d, const ssm_conv1d_params * p, const ssm_tensor * x,
                    const ssm_tensor * w, const ssm_tensor * bias, const ssm_tensor * init) {
    conv_k k;
    memset(&k, 0, sizeof k);
    k.x = ssmi_cu_view_or_null(x), k.w = ssmi_cu_view_or_null(w), k.bias = ssmi_cu_view_or_null(bias), k.init = ssmi_cu_view_or_null(init);
    k.out = k.fin = k.dout = k.dfin = k.dx = k.dinit = k.dw = k.db = ssmi_cu_null_view();
    k.B = d->batch, k.D = d->dim, k.S = d->seqlen, k.W = d->width;
    k.silu = p->activation == 1;
    return k;
}

} // namespace
} // namespace ssmi_layer

using namespace ssmi_layer;

extern "C" ssm_status ssmi_cuda_causal_conv1d(ssm_context * ctx, const ssm_conv1d_params * p,
                                              const ssmi_conv1d_dims * d, const ssm_causal_conv1d_args * a) {
    static const char op[] = "causal_conv1d";
    SSM_FORWARD_IF_ERROR(check_device_pointers(ctx, SSMI_OP_causal_conv1d, a));
    conv_problem pb;
    memset(&pb, 0, sizeof pb);
    pb.ctx = ctx, pb.op = op;
    pb.k = conv_args_of(d, p, &a->x, &a->weight, &a->bias, &a->initial_states);
    pb.k.out = ssmi_cu_view_or_null(&a->out), pb.k.fin = ssmi_cu_view_or_null(&a->final_states);
    pb.has_final = ssmi_present(&a->final_states);
    scratch    sc = {{NULL, NULL, NULL, NULL}, 0};
    ssm_status st = upload_index(ctx, op, "seq_idx", &sc, &a->seq_idx, &pb.k.seq);
    pb.k.nseq = d->nseq;
    if (st == SSM_STATUS_OK && d->nseq > 0) st = upload_index(ctx, op, "cu_seqlens", &sc, &a->cu_seqlens, &pb.k.cu);
    if (st == SSM_STATUS_OK) st = run_table(ctx, SSMI_OP_causal_conv1d, kFwdTable, pb);
    return scratch_release(ctx, op, &sc, st);
}

extern "C" ssm_status ssmi_cuda_causal_conv1d_bwd(ssm_context * ctx, const ssm_conv1d_params * p,
                                                  const ssmi_conv1d_dims * d, const ssm_causal_conv1d_bwd_args * a) {
    static const char op[] = "causal_conv1d_bwd";
    SSM_FORWARD_IF_ERROR(check_device_pointers(ctx, SSMI_OP_causal_conv1d_bwd, a));
    conv_problem pb;
    memset(&pb, 0, sizeof pb);
    pb.ctx = ctx, pb.op = op;
    pb.k = conv_args_of(d, p, &a->x, &a->weight, &a->bias, &a->initial_states);
    pb.k.dout = ssmi_cu_view_or_null(&a->dout), pb.k.dfin = ssmi_cu_view_or_null(&a->dfinal_states);
    pb.k.dx = ssmi_cu_view_or_null(&a->dx), pb.k.dinit = ssmi_cu_view_or_null(&a->dinitial_states);
    pb.k.dw = ssmi_cu_view_or_null(&a->dweight), pb.k.db = ssmi_cu_view_or_null(&a->dbias);
    /* Token tiles of the weight gradient: at least 64 tokens, at most kMaxTiles tiles. */
    const long long ntok = d->batch * d->seqlen;
    const long long per = (ntok + kMaxTiles - 1) / kMaxTiles;
    pb.k.TT = per > 64 ? per : 64;
    pb.k.NT = (ntok + pb.k.TT - 1) / pb.k.TT;
    size_t     gbytes = 0, pbytes = 0;
    const int  need_partial = ssmi_present(&a->dweight) || ssmi_present(&a->dbias);
    ssm_status st = scratch_bytes(ctx, op, "the pre-activation gradient", ntok, d->dim, 1, sizeof(float), &gbytes);
    if (st == SSM_STATUS_OK && need_partial)
        st = scratch_bytes(ctx, op, "the weight-gradient partials", pb.k.NT, d->width + 1, d->dim, sizeof(float),
                           &pbytes);
    if (st != SSM_STATUS_OK) return st;
    scratch sc = {{NULL, NULL, NULL, NULL}, 0};
    void *  g = NULL, *part = NULL;
    st = upload_index(ctx, op, "seq_idx", &sc, &a->seq_idx, &pb.k.seq);
    if (st == SSM_STATUS_OK) st = scratch_alloc(ctx, op, "the pre-activation gradient", &sc, gbytes, &g);
    if (st == SSM_STATUS_OK) st = scratch_alloc(ctx, op, "the weight-gradient partials", &sc, pbytes, &part);
    pb.k.g = (float *)g, pb.k.partial = (float *)part;
    if (st == SSM_STATUS_OK) st = run_table(ctx, SSMI_OP_causal_conv1d_bwd, kBwdTable, pb);
    return scratch_release(ctx, op, &sc, st);
}

extern "C" ssm_status ssmi_cuda_causal_conv1d_update(ssm_context * ctx, const ssm_conv1d_params * p,
                                                     const ssmi_conv1d_dims * d,
                                                     const ssm_causal_conv1d_update_args * a) {
    static const char op[] = "causal_conv1d_update";
    SSM_FORWARD_IF_ERROR(check_device_pointers(ctx, SSMI_OP_causal_conv1d_update, a));
    update_problem pb;
    memset(&pb, 0, sizeof pb);
    pb.ctx = ctx, pb.op = op;
    pb.k.x = ssmi_cu_view_or_null(&a->x), pb.k.w = ssmi_cu_view_or_null(&a->weight), pb.k.bias = ssmi_cu_view_or_null(&a->bias);
    pb.k.state = ssmi_cu_view_or_null(&a->conv_state), pb.k.out = ssmi_cu_view_or_null(&a->out);
    pb.k.fin = ssmi_cu_view_or_null(&a->final_conv_state);
    pb.k.B = d->batch, pb.k.D = d->dim, pb.k.W = d->width, pb.k.L = d->state_len;
    pb.k.silu = p->activation == 1;
    scratch    sc = {{NULL, NULL, NULL, NULL}, 0};
    /* device indices are read on the device (no host copy: capturable in a CUDA graph) */
    ssm_status st = ssmi_cuda_on_device(&a->state_batch_indices)
                        ? device_slot_index(ctx, op, &sc, &a->state_batch_indices, d->batch, d->slots, &pb.k.slots)
                        : upload_index(ctx, op, "state_batch_indices", &sc, &a->state_batch_indices, &pb.k.slots);
    if (st == SSM_STATUS_OK) st = run_table(ctx, SSMI_OP_causal_conv1d_update, kUpdateTable, pb);
    return scratch_release(ctx, op, &sc, st);
}

/* The selection tables, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_causal_conv1d(int32_t i, ssmi_variant_info * out) {
    return ssmi_cuda_report_variants(kFwdTable, i, out);
}
extern "C" int32_t ssmi_cuda_variants_causal_conv1d_bwd(int32_t i, ssmi_variant_info * out) {
    return ssmi_cuda_report_variants(kBwdTable, i, out);
}
extern "C" int32_t ssmi_cuda_variants_causal_conv1d_update(int32_t i, ssmi_variant_info * out) {
    return ssmi_cuda_report_variants(kUpdateTable, i, out);
}
