/*
 * bwd_state_chain.cu — the state walks of the CUDA Mamba-3 SISO backward with the chunk sums folded
 * in (entry chained_planes): what bwd_chunk_planes_sums_kernel and bwd_pass_kernel compute, in one
 * kernel that never stores a chunk's own contribution.
 *
 * bwd_state_chain_kernel: one block of kChainThreadsB threads per (sequence, head, walk × V tile
 * of kChainV rows × kChainK of the K columns). Each block walks its sequence's chunks with its
 * state slice in the mma accumulators (8 warps, one 16 × 16 tile each):
 *   forward (first chunk to last): at each chunk's start the entering state into P.st (the pass's
 *     store; from H_in = S_in + dt_0(1 − λ_0)·v_in k_inᵀ, or 0), then the chunk's product
 *     Vᵀ·K̂w (k̂ after the bias and the rotation, times e^{c_last − c}·σ) and S ← e^{c_last}·S +
 *     local; c_last into P.cl;
 *   reverse (last chunk to first): the carry into P.dst (from dfinal_ssm_state, or 0), then the
 *     product dYᵀ·Q̂e (dy = dout ⊙ silu(z), q̂ times e^{c}) and dS ← e^{c_last}·dS + local; dH_in
 *     at the end, also for a sequence without tokens.
 * The products are the sums kernel's: bf16 planes (fp32 operands as a rounded plane and a remainder
 * plane, bf16 v as one exact plane), tile_mma (mma.sync m16n8k16, fp32 accumulators, the chunk's
 * tokens as the inner dimension in order). Operands of chunk c + 1 are loaded into registers while
 * chunk c's product runs; the planes are double-buffered, so one block barrier per chunk. A walk's
 * time is its chunk count times a per-chunk latency, so the entry pays where the walks about fill
 * the SMs (the selection table's rule). The planes (load_qk's and load_planes' expressions), the
 * tile products (the sums kernel's tile_mma call on a zeroed accumulator) and the fold (the pass's
 * expression) are those of the sums kernel + pass pipeline; the test checks the result against the
 * float64 reference.
 */
#include "bwd.cuh"

using namespace ssmi_siso;

namespace ssmi_siso_bwd {

namespace {

const int kChainThreadsB = 256;          /* 8 warps: one 16 × 16 state tile each               */
const int kChainLa = kChainV + 8;        /* row stride of the V-side planes (v or dy), elements */
const int kChainLb = kChainK + 8;        /* row stride of the K-side planes (k̂w or q̂e)         */
const int kChainRowsA = kBwdMaxChunk * kChainV / kChainThreadsB;       /* V-side rows per thread */
const int kChainRowsB = kBwdMaxChunk * (kChainK / 2) / kChainThreadsB; /* K-side pairs per thread */
static_assert(kChainV == 64 && kChainK == 32 && kChainThreadsB == 256, "the thread maps below");
static_assert(kChainRowsA == 16 && kChainRowsB == 4, "rows of a thread");

/* One stage of planes: V side h, l [kBwdMaxChunk][kChainLa], K side h, l [kBwdMaxChunk][kChainLb]. */
const size_t kChainPlaneA = sizeof(bf16) * kBwdMaxChunk * kChainLa;
const size_t kChainPlaneB = sizeof(bf16) * kBwdMaxChunk * kChainLb;
const size_t kChainStage = 2 * kChainPlaneA + 2 * kChainPlaneB;
static_assert(kChainPlaneA % 16 == 0 && kChainPlaneB % 16 == 0, "ldmatrix rows are 16-byte aligned");

/* n elements x[base + u·step] (u < n; 0 for u ≥ nin) of a view of any float dtype, as fp32: one
 * dtype switch for the batch, the loads issued before their first use. */
template <int N>
__device__ __forceinline__ void fetch_run(float (&out)[N], const ssmi_cu_view & x, long long base, long long step,
                                          int nin) {
    switch (x.dtype) {
        case SSM_DTYPE_BF16:
#pragma unroll
            for (int u = 0; u < N; ++u)
                out[u] = u < nin ? __bfloat162float(((const __nv_bfloat16 *)x.p)[base + u * step]) : 0.0f;
            break;
        case SSM_DTYPE_F16:
#pragma unroll
            for (int u = 0; u < N; ++u) out[u] = u < nin ? __half2float(((const __half *)x.p)[base + u * step]) : 0.0f;
            break;
        default:
#pragma unroll
            for (int u = 0; u < N; ++u) out[u] = u < nin ? ssmi_cu_ld(x.p, x.dtype, base + u * step) : 0.0f;
            break;
    }
}

/* The registers one chunk's operands are fetched into (this thread's part). V side: the column
 * tr & 63 of rows tr/64 + 4u (v forward; dout and z reverse). K side: the pair tr & 15 of the slice
 * in rows tr/16 + 16u (k forward, q reverse), its raw angle sum, and the rows' c (cumsum) and σ.
 * cl: c_last of the chunk. */
struct chain_regs {
    float a[kChainRowsA], z[kChainRowsA];
    float x0[kChainRowsB], x1[kChainRowsB], th[kChainRowsB], cm[kChainRowsB], sg[kChainRowsB];
    float cl;
};

/* What a block needs to fetch any chunk of its sequence: this thread's element offsets at the
 * sequence's first token (a chunk later is C rows further). */
struct chain_src {
    long long va, za, xb;   /* V-side (v or dout), z, K-side (k or q) element offsets at token 0 */
    long long vs, zs, xs;   /* their row strides                                                  */
    long long xc;           /* the K side's column stride (the pair's second element)             */
    int       ia, ib;       /* the first V-side row and the first K-side row of this thread       */
    bool      ain;          /* this thread's V-side column lies inside V                          */
    int       pg;           /* this thread's pair index in K/2 (rotated when < A)                 */
};

template <bool FWD>
__device__ __forceinline__ chain_src chain_src_of(const bw_args & P, const bw_seg & sg, int h, int p0, int kc0) {
    const int            tr = (int)threadIdx.x, ra = tr & (kChainV - 1), pb = tr & (kChainK / 2 - 1);
    const ssmi_cu_view & va = FWD ? P.v : P.dout;
    const ssmi_cu_view & xb = FWD ? P.k : P.q;
    chain_src            c;
    c.ia = tr / kChainV, c.ib = tr / (kChainK / 2);
    c.ain = p0 + ra < P.V;
    c.pg = kc0 / 2 + pb;
    c.va = sg.row * va.s[0] + sg.t0 * va.s[1] + h * va.s[2] + (long long)(p0 + ra) * va.s[3];
    c.vs = va.s[1];
    c.za = FWD || !P.has_z ? 0 : sg.row * P.z.s[0] + sg.t0 * P.z.s[1] + h * P.z.s[2] + (long long)(p0 + ra) * P.z.s[3];
    c.zs = FWD || !P.has_z ? 0 : P.z.s[1];
    c.xb = sg.row * xb.s[0] + sg.t0 * xb.s[1] + (h / P.G) * xb.s[2] + (long long)(2 * c.pg) * xb.s[3];
    c.xs = xb.s[1], c.xc = xb.s[3];
    return c;
}

/* Chunk c (L tokens, chunk index w of the plan, first flat token tok) of the sequence into r. */
template <bool FWD>
__device__ __forceinline__ void chain_fetch(chain_regs & r, const bw_args & P, const chain_src & c, int h, int ci,
                                            int L, long long w, long long tok) {
    const long long row0 = (long long)ci * P.C;
    const int       na = c.ain && c.ia < L ? (L - c.ia + 3) / 4 : 0;            /* rows ia + 4u < L  */
    const int       nb = c.ib < L ? (L - c.ib + 15) / 16 : 0;                    /* rows ib + 16u < L */
    fetch_run<kChainRowsA>(r.a, FWD ? P.v : P.dout, c.va + (row0 + c.ia) * c.vs, 4 * c.vs, na);
    if (!FWD && P.has_z) fetch_run<kChainRowsA>(r.z, P.z, c.za + (row0 + c.ia) * c.zs, 4 * c.zs, na);
    const ssmi_cu_view & xv = FWD ? P.k : P.q;
    const long long      xo = c.xb + (row0 + c.ib) * c.xs;
    fetch_run<kChainRowsB>(r.x0, xv, xo, 16 * c.xs, nb);
    fetch_run<kChainRowsB>(r.x1, xv, xo + c.xc, 16 * c.xs, nb);
    const float * sc = P.sc + ((tok + c.ib) * P.H + h) * kScalWs;
    const long long sstep = 16LL * P.H * kScalWs;
    const bool      rot = c.pg < P.A;
    const float     tb = rot ? P.thb[(w * P.H + h) * P.A + c.pg] : 0.0f;
    const float *   th = P.th + ((tok + c.ib) * P.H + h) * P.A + c.pg;
    const long long tstep = 16LL * P.H * P.A;
#pragma unroll
    for (int u = 0; u < kChainRowsB; ++u) {
        const bool in = u < nb;
        r.cm[u] = in ? sc[u * sstep + 4] : 0.0f;
        r.sg[u] = FWD && in ? sc[u * sstep + 3] : 0.0f;
        r.th[u] = rot && in ? tb + th[u * tstep] : 0.0f;
    }
    r.cl = P.sc[((tok + L - 1) * P.H + h) * kScalWs + 4];
}

/* The fetched chunk into the planes of one stage (every row of the stage is written: zeros past L).
 * Forward: v (one exact plane where VX, else split) and k̂w = rot(k + k_bias)·e^{c_last − c}·σ (split);
 * reverse: dy (split) and q̂e = rot(q + q_bias)·e^{c} (split): load_qk's and load_planes'
 * expressions. */
template <bool FWD, bool VX>
__device__ __forceinline__ void chain_planes(const chain_regs & r, const chain_src & c, bool has_z, bool rot, float b0,
                                             float b1, int L, unsigned char * stage) {
    bf16 *    ah = (bf16 *)stage, *al = (bf16 *)(stage + kChainPlaneA);
    bf16 *    bh = (bf16 *)(stage + 2 * kChainPlaneA), *bl = (bf16 *)(stage + 2 * kChainPlaneA + kChainPlaneB);
    const int ra = (int)threadIdx.x & (kChainV - 1), pb = (int)threadIdx.x & (kChainK / 2 - 1);
#pragma unroll
    for (int u = 0; u < kChainRowsA; ++u) {
        const int o = (c.ia + 4 * u) * kChainLa + ra;
        if (FWD && VX)
            ah[o] = __float2bfloat16_rn(r.a[u]); /* exact: a bf16 value (0 past L and V) */
        else
            split_one(FWD || !has_z ? r.a[u] : gated_dy(r.a[u], r.z[u]), ah, al, o);
    }
#pragma unroll
    for (int u = 0; u < kChainRowsB; ++u) {
        const int i = c.ib + 16 * u;
        float     x0 = 0.0f, x1 = 0.0f;
        if (i < L) {
            x0 = r.x0[u] + b0, x1 = r.x1[u] + b1;
            if (rot) {
                float sn, cs;
                theta_sincos(r.th[u], &sn, &cs);
                const float2 y = rotate_pair(x0, x1, sn, cs);
                x0 = y.x, x1 = y.y;
            }
            const float f = FWD ? expf(r.cl - r.cm[u]) * r.sg[u] : expf(r.cm[u]);
            x0 *= f, x1 *= f;
        }
        split_pair(x0, x1, bh, bl, i * kChainLb + 2 * pb);
    }
}

/* The block's state tile into the workspace slice d (V·K floats of one (chunk, head) or sequence,
 * rows p0 + m0 + l/4 (+8), columns kc0 + n0 + 8j + 2(l % 4)): 8-byte stores, rows inside V. */
__device__ __forceinline__ void chain_store(const float (&S)[2][4], float * d, int K, int row, bool in0, bool in1) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        if (in0) *reinterpret_cast<float2 *>(d + (long long)row * K + 8 * j) = make_float2(S[j][0], S[j][1]);
        if (in1) *reinterpret_cast<float2 *>(d + (long long)(row + 8) * K + 8 * j) = make_float2(S[j][2], S[j][3]);
    }
}

/* One walk (FWD: forward) of sequence s, head h over the state slice of rows p0.., columns kc0..;
 * the walk's chunks ci = c forward, count − 1 − c reverse. */
template <bool FWD, bool VX>
__device__ __forceinline__ void chain_walk(const bw_args & P, unsigned char * sm, int s, int h, int p0, int kc0,
                                           bool wcl) {
    const bw_seg    sg = P.segs[s];
    const int       lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g4 = lane >> 2, t4 = lane & 3;
    const int       m0 = (warp >> 1) * 16, n0 = (warp & 1) * 16, K = P.K;
    const long long VK = (long long)P.V * K;
    /* this lane's state elements: rows pr, pr + 8 (inside V: in0, in1), columns pc + 8j (+1) */
    const int       pr = p0 + m0 + g4, pc = kc0 + n0 + 2 * t4;
    const bool      in0 = pr < P.V, in1 = pr + 8 < P.V;
    const long long off = (long long)pr * K + pc; /* of row pr, column pc in a V·K slice */
    float           S[2][4];
    zero_acc(S);
    if (FWD) {
        if (sg.count == 0) return; /* no chunk: nothing to store (bwd_pass_kernel's forward walk) */
        if (P.has_states) {       /* H_in = S_in + dt_0(1 − λ_0)·v_in k_inᵀ */
            const float * sc = P.sc + (sg.tok * P.H + h) * kScalWs;
            const float   c0 = sc[0] * (1.0f - sc[1]);
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                if (!(hh ? in1 : in0)) continue;
                const int   r = pr + 8 * hh;
                const float cv = c0 * ld3(P.v_in, s, h, r);
#pragma unroll
                for (int j = 0; j < 2; ++j)
#pragma unroll
                    for (int u = 0; u < 2; ++u) {
                        const int n = pc + 8 * j + u;
                        S[j][2 * hh + u] = ld4(P.ssm_in, s, h, r, n) + cv * ld3(P.k_in, s, h, n);
                    }
            }
        }
    } else if (P.has_dfs) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            if (!(hh ? in1 : in0)) continue;
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int u = 0; u < 2; ++u) S[j][2 * hh + u] = ld4(P.dfs, s, h, pr + 8 * hh, pc + 8 * j + u);
        }
    }
    const long long hvk = (long long)P.H * VK;
    if (sg.count > 0) {
        const int            pb = (int)threadIdx.x & (kChainK / 2 - 1);
        const bool           rot = kc0 / 2 + pb < P.A;
        const ssmi_cu_view & bv = FWD ? P.kb : P.qb;
        const float          b0 = ld2(bv, h, kc0 + 2 * pb), b1 = ld2(bv, h, kc0 + 2 * pb + 1); /* the pair's biases */
        const chain_src      src = chain_src_of<FWD>(P, sg, h, p0, kc0);
        float * const        dst = (FWD ? P.st : P.dst) + h * VK + off;
        chain_regs           rg;
        int                  ci = FWD ? 0 : sg.count - 1;
        chain_fetch<FWD>(rg, P, src, h, ci, min(P.C, sg.len - ci * P.C), sg.first + ci, sg.tok + (long long)ci * P.C);
        for (int c = 0; c < sg.count; ++c, ci += FWD ? 1 : -1) {
            const int       L = min(P.C, sg.len - ci * P.C);
            const long long w = sg.first + ci;
            unsigned char * stage = sm + (c & 1) * kChainStage;
            /* stage c & 1 was last read by the product of the walk's chunk c − 2, before the last barrier */
            chain_planes<FWD, VX>(rg, src, P.has_z, rot, b0, b1, L, stage);
            const float cl = rg.cl;
            if (wcl) P.cl[w * P.H + h] = cl;
            if (c + 1 < sg.count) { /* the next chunk's loads, in flight across this chunk's product */
                const int cn = FWD ? ci + 1 : ci - 1;
                chain_fetch<FWD>(rg, P, src, h, cn, min(P.C, sg.len - cn * P.C), sg.first + cn,
                                 sg.tok + (long long)cn * P.C);
            }
            /* the state entering the chunk (forward) or the carry of the chunk (reverse) */
            chain_store(S, dst + w * hvk, K, 0, in0, in1);
            __syncthreads(); /* the stage's planes */
            float loc[2][4];
            zero_acc(loc);
            const bf16 * ah = (const bf16 *)stage, *al = (const bf16 *)(stage + kChainPlaneA);
            const bf16 * bh = (const bf16 *)(stage + 2 * kChainPlaneA);
            const bf16 * bl = (const bf16 *)(stage + 2 * kChainPlaneA + kChainPlaneB);
            const int    Kq = (L + 15) / 16 * 16;
            tile_mma<true, true, !(FWD && VX), true>(loc, ah, al, kChainLa, bh, bl, kChainLb, m0, n0, 0, Kq);
            const float decay = expf(cl);
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) S[j][e] = decay * S[j][e] + loc[j][e];
        }
    }
    if (!FWD) chain_store(S, P.dhin + ((long long)s * P.H + h) * VK + off, K, 0, in0, in1);
}

/* blockIdx.z = (V tile · K/kChainK + K slice)·2 + walk (0 forward, 1 reverse). */
template <bool VX>
__global__ void __launch_bounds__(kChainThreadsB, 2) bwd_state_chain_kernel(const bw_args P) {
    extern __shared__ float4 sm4[];
    unsigned char * const sm = (unsigned char *)sm4;
    const int             nks = P.K / kChainK, z = (int)blockIdx.z;
    const int             p0 = (z >> 1) / nks * kChainV, kc0 = (z >> 1) % nks * kChainK;
    if ((z & 1) == 0) /* c_last of each chunk: the first forward block of the (sequence, head), one thread */
        chain_walk<true, VX>(P, sm, blockIdx.x, blockIdx.y, p0, kc0, z == 0 && threadIdx.x == 0);
    else
        chain_walk<false, VX>(P, sm, blockIdx.x, blockIdx.y, p0, kc0, false);
}

} /* namespace */

size_t bwd_state_chain_smem() { return 2 * kChainStage; }

ssm_status launch_bwd_state_chain(ssm_context * ctx, const char * op, const bw_args & P) {
    const size_t bytes = bwd_state_chain_smem();
    const int    vt = (P.V + kChainV - 1) / kChainV;
    const dim3   grid((unsigned)P.NS, (unsigned)P.H, (unsigned)(2 * vt * (P.K / kChainK)));
    void (*kern)(const bw_args) = P.v_bf16 ? bwd_state_chain_kernel<true> : bwd_state_chain_kernel<false>;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute (bwd_state_chain_kernel)",
                                          cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                               (int)bytes)));
    kern<<<grid, kChainThreadsB, bytes, ssmi_cuda_stream(ctx)>>>(P);
    return ssmi_cuda_status(ctx, op, "bwd_state_chain_kernel launch", cudaGetLastError());
}

} /* namespace ssmi_siso_bwd */
