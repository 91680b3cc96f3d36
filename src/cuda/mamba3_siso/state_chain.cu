/*
 * state_chain.cu — the chained state of the SISO forward: the chunk state contributions and the
 * state pass in one walk per sequence (fp16/bf16 q/k/v in 16-byte rows, K = 64 or 128, after
 * chunk_prep_kernel).
 *
 * The mma.sync state kernel writes every chunk's own contribution (fp32 V × K) and the pass reads it
 * back and rewrites it as the entering state: the workspace is written, then read and written
 * again. chain_state_kernel does both in one pass: one block per (sequence, head, V tile, KS = 32 or
 * 64 K columns) walks its sequence's chunks in order with the running state in registers; at a
 * chunk's start it stores the entering state (what the pass stores), then adds the chunk's products
 * to a zeroed local accumulator — the mma.sync state kernel's products of its operands — and folds
 * them in with the pass's expression, S ← e^{c_last}·S + local. The chunk contributions are never
 * stored. The operands of chunk c + 2 (the scalars and θ of chunk_prep_kernel's slot, the raw k
 * columns, the v tile) land by cp.async in a ring of three stages while chunk c computes; two block
 * barriers per chunk. Per chunk and block the K̂ work and the products are KS/K of an mma.sync state
 * block's, so a chain is short in time; its time is its chunk count times a per-chunk latency, so
 * it pays where there are about as many chains as SMs or more (the selection table's rule).
 * Every value is the mma.sync state kernel + pass pipeline's: K̂ by fast_prep_qk's expressions
 * (bias, rotation by the per-angle sincos, w_i, split), the products in that kernel's order per
 * element, the recurrence in the pass's expression; the test checks the bytes against that
 * pipeline.
 */
#include "tiles.cuh"

namespace ssmi_siso {
namespace {

/* Chunk c of a sequence as plan_fwd made it (t0, row, len, seq, flags), from the sequence alone: no
 * load of the chunk table in front of the copies that need its addresses. */
__device__ __forceinline__ m3_chunk chain_chunk(const m3_seg & sg, int s, int c) {
    m3_chunk ch;
    ch.t0 = sg.t0 + (long long)c * kC;
    ch.row = sg.row;
    ch.len = min(kC, sg.len - c * kC);
    ch.seq = s;
    ch.has_next = c * kC + ch.len < sg.len;
    ch.last = c == sg.count - 1;
    ch.first = c == 0;
    return ch;
}

/* This thread's cp.async pieces of a chain block's per-chunk operands, set up once per block: the
 * source of each piece at the sequence's chunk 0 (a chunk later is one constant step further) and
 * its place in a stage, so that a chunk's copies cost a pointer add and a predicate per piece
 * (generic copy loops spend ~300 instructions per warp and chunk here on 64-bit index
 * arithmetic). Pieces: the slot (prep_floats(A)/4 of them, threads in turn), NK of the raw k
 * columns (rows kr[u], KS/8 pieces per row) and NV of the v tile (rows vr[u], 8 pieces per row;
 * vin: this thread's v columns lie inside V, which is a multiple of 8 on this path). */
/* The z pieces of chain_copies (ZT): v's rows and columns in the stage's z tile, zoff bytes after
 * the v tile; none without ZT. */
template <typename T, int NV, bool ZT>
struct chain_zpieces {
    const T * z[NV];
    long long zstep;
    int       zoff;
    bool      zon;
};
template <typename T, int NV>
struct chain_zpieces<T, NV, false> {};

template <int MODE, int KS, bool ZT = false> /* ZT: the z tile too (the backward's reverse walk) */
struct chain_copies : chain_zpieces<typename cfg<MODE>::T, kC *(kTV / 8) / kChainThreads, ZT> {
    typedef typename cfg<MODE>::T T;
    static constexpr int          KP = KS / 8, NK = kC * KP / kChainThreads, NV = kC * (kTV / 8) / kChainThreads;
    const float *                 prep;
    long long                     prep_step, kstep, vstep;
    /* P.thl given: θ's chunk-local sums, a token's A floats in pieces of thw floats (4 where A % 4 == 0,
     * else 1), nth pieces a token; this thread copies piece tid % nth of tokens tid / nth + j·rstep
     * (thl: the first at the sequence's chunk 0; thdst: its place in a stage), and thread tid < nth
     * piece tid of θ entering (thb at the sequence's chunk 0, tbdst); nth == 0: no θ */
    const float *                 thl;
    const float *                 thb;
    long long                     thl_tok, thb_step;
    int                           nth, thw, r0, rstep, thdst, tbdst;
    const T *                     k[NK];
    const T *                     v[NV];
    int                           npieces, kr[NK], vr[NV], kdst[NK], vdst[NV];
    bool                          vin;
    __device__ __forceinline__    chain_copies(const m3_fwd_args & P, const chain_smem & L, const m3_seg & sg, int h,
                                               int p0, int kc0) {
           const int tid = (int)threadIdx.x;
           /* a K slice without a rotated pair (kc0/2 ≥ A) never reads θ: the scalars only */
           const bool rot = kc0 / 2 < P.A;
           const int  slot = P.thl != nullptr ? kPrepScal : (int)prep_floats(P.A);
           npieces = (P.thl != nullptr || !rot ? kPrepScal : slot) / 4;
           prep_step = (long long)P.H * slot;
           prep = P.prep + ((long long)sg.first * P.H + h) * slot;
           thw = P.A % 4 == 0 ? 4 : 1;
           nth = P.thl != nullptr && rot ? P.A / thw : 0;
           thl_tok = (long long)P.H * P.A;
           thb_step = (long long)P.H * P.A;
           const int e = nth > 0 ? tid % nth * thw : 0;
           r0 = nth > 0 ? tid / nth : kC;
           rstep = nth > 0 ? kChainThreads / nth : 1; /* nth ≤ K/2 ≤ kChainThreads/2 */
           if (r0 >= rstep) r0 = kC;                    /* the threads past the last whole row of pieces */
           thl = nth > 0 && r0 < kC ? P.thl + (sg.row * P.thl_row + (sg.t0 + r0) * thl_tok + (long long)h * P.A + e)
                                     : nullptr;
           thb = nth > 0 ? P.theta0 + ((long long)sg.first * P.H + h) * P.A + e : nullptr;
           thdst = L.th + 4 * (r0 * P.A + e), tbdst = L.tb + 4 * e;
           kstep = (long long)kC * P.k.s[1];
           vstep = (long long)kC * P.v.s[1];
           const T * kb = (const T *)P.k.p + sg.row * P.k.s[0] + sg.t0 * P.k.s[1] + (h / P.G) * P.k.s[2] + kc0;
           const T * vb = (const T *)P.v.p + sg.row * P.v.s[0] + sg.t0 * P.v.s[1] + h * P.v.s[2] + p0;
#pragma unroll
        for (int u = 0; u < NK; ++u) {
            const int o = tid + u * kChainThreads, r = o / KP, c = (o % KP) * 8;
            kr[u] = r;
            k[u] = kb + r * P.k.s[1] + c;
            kdst[u] = L.kraw + 2 * (r * (KS + 8) + c);
        }
#pragma unroll
        for (int u = 0; u < NV; ++u) {
            const int o = tid + u * kChainThreads, r = o / (kTV / 8), c = (o % (kTV / 8)) * 8;
            vr[u] = r;
            v[u] = vb + r * P.v.s[1] + c;
            vdst[u] = L.vs + 2 * (r * kFLd + c);
        }
        vin = p0 + (tid % (kTV / 8)) * 8 < P.V;
        if constexpr (ZT) { /* z: v's rows and columns in its own tile of the stage */
            this->zon = P.has_z != 0;
            this->zoff = L.zs - L.vs;
            this->zstep = this->zon ? (long long)kC * P.z.s[1] : 0;
            const T * zb =
                this->zon ? (const T *)P.z.p + sg.row * P.z.s[0] + sg.t0 * P.z.s[1] + h * P.z.s[2] + p0 : nullptr;
#pragma unroll
            for (int u = 0; u < NV; ++u) {
                const int o = tid + u * kChainThreads, r = o / (kTV / 8), c = (o % (kTV / 8)) * 8;
                this->z[u] = this->zon ? zb + r * P.z.s[1] + c : nullptr;
            }
        }
    }
    /* chunk c (L tokens) into stage st; the caller commits the group */
    __device__ __forceinline__ void issue(unsigned char * st, int c, int L) const {
        const float * ps = prep + c * prep_step;
        for (int o = (int)threadIdx.x; o < npieces; o += kChainThreads) cp_async16(st + 16 * o, ps + 4 * o);
        if (nth > 0) { /* θ's sums of the chunk's L tokens (rows ≥ L are never read), then θ entering */
            const float * ts = thl + (long long)c * kC * thl_tok;
            const long long tstep = rstep * thl_tok;
            const int       dstep = 4 * rstep * nth * thw;
            int             d = thdst;
            for (int r = r0; r < L; r += rstep, ts += tstep, d += dstep)
                if (thw == 4)
                    cp_async16(st + d, ts);
                else
                    cp_async4(st + d, ts);
            if ((int)threadIdx.x < nth) {
                if (thw == 4)
                    cp_async16(st + tbdst, thb + c * thb_step);
                else
                    cp_async4(st + tbdst, thb + c * thb_step);
            }
        }
        const long long kt = c * kstep, vt = c * vstep;
#pragma unroll
        for (int u = 0; u < NK; ++u)
            if (kr[u] < L) cp_async16(st + kdst[u], k[u] + kt); /* rows ≥ L are never read */
#pragma unroll
        for (int u = 0; u < NV; ++u) {
            if (vin && vr[u] < L)
                cp_async16(st + vdst[u], v[u] + vt);
            else /* zeros: the products read whole k-steps of 16 rows */
                *reinterpret_cast<uint4 *>(st + vdst[u]) = make_uint4(0u, 0u, 0u, 0u);
        }
        if constexpr (ZT) {
            if (!this->zon) return;
            const long long zt = c * this->zstep;
#pragma unroll
            for (int u = 0; u < NV; ++u) {
                if (vin && vr[u] < L)
                    cp_async16(st + vdst[u] + this->zoff, this->z[u] + zt);
                else /* zeros: dy = 0 there */
                    *reinterpret_cast<uint4 *>(st + vdst[u] + this->zoff) = make_uint4(0u, 0u, 0u, 0u);
            }
        }
    }
};

/* K̂ columns [kc0, kc0 + KS) of one chunk, weighted and split into kh/kl (rows ≥ L zero):
 * fast_prep_qk<MODE, 256>'s expressions for k with kscale = w_i = e^{c_L − c_i}·σ_i (state_prep's
 * wj), so the same values bit for bit; 8 threads per token, two passes of 32 tokens. */
template <int MODE, int KS, bool REV = false> /* REV: q̂e = rot(q + q_bias)·e^{c_i} (the backward's) */
__device__ __forceinline__ void chain_prep_k(const m3_fwd_args & P, const m3_chunk & ch, int kc0, const m3_scal & sc,
                                             const float * th, const float * tb, const typename cfg<MODE>::T * kraw,
                                             typename cfg<MODE>::T * kh, typename cfg<MODE>::T * kl,
                                             const float (&kbias)[8]) {
    constexpr int ipt = KS / 8, per = kChainThreads / ipt, LK = KS + 8;
    const int     c8 = (int)threadIdx.x % ipt, n0 = kc0 + 8 * c8, L = ch.len;
    const float   cl = sc.cm[L - 1];
    const bool    rot0 = n0 / 2 >= P.A;
#pragma unroll
    for (int i = (int)threadIdx.x / ipt; i < kC; i += per) {
        const bool live = i < L;
        float      q[8], k[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) q[e] = k[e] = 0.0f;
        if (live) {
            unpack8<MODE>(k, *reinterpret_cast<const uint4 *>(&kraw[i * LK + 8 * c8]));
#pragma unroll
            for (int e = 0; e < 8; ++e) k[e] += kbias[e]; /* K % 64 == 0: every column exists */
        }
        rotate_qk8<true>(q, k, P, th, nullptr, i, n0 / 2, live, false, rot0, tb);
        const float s = live ? (REV ? expf(sc.cm[i]) : expf(cl - sc.cm[i]) * sc.sig[i]) : 0.0f;
        uint32_t    hi[4], lo[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) split2<MODE>(k[2 * e] * s, k[2 * e + 1] * s, hi[e], lo[e]);
        *reinterpret_cast<uint4 *>(&kh[i * LK + 8 * c8]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4 *>(&kl[i * LK + 8 * c8]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
}

/* The entering state of a chunk (the pass's store) from the running state's fragments, 16 bytes
 * per store: lanes 2j and 2j + 1 swap halves, so the even one holds 4 columns of row r0 (at d4) and
 * the odd one 4 of row r0 + 8 (its d4 points there). */
template <int TN>
__device__ __forceinline__ void chain_store_state(const float (&S)[TN][4], float * d4, bool odd, bool in0, bool in1) {
#pragma unroll
    for (int t = 0; t < TN; ++t) {
        const float2 give = odd ? make_float2(S[t][0], S[t][1]) : make_float2(S[t][2], S[t][3]);
        const float  g0 = __shfl_xor_sync(0xffffffffu, give.x, 1), g1 = __shfl_xor_sync(0xffffffffu, give.y, 1);
        const float4 q4 = odd ? make_float4(g0, g1, S[t][2], S[t][3]) : make_float4(S[t][0], S[t][1], g0, g1);
        if (odd ? in1 : in0) *reinterpret_cast<float4 *>(d4 + 8 * t) = q4;
    }
}

/* One walk of block (blockIdx.x, blockIdx.y, z) (z: the V tile and the K slice). REV (the
 * backward's reverse walk, on the arguments launch_bwd_walks builds): the chunks last to first,
 * no k_in / v_in term in the start (ssm_in holds dfinal_ssm_state), q̂e for w∘K̂, the dout tile for
 * v (where z is given, dy's rounded and remainder planes in the v and z tiles); the store before
 * the fold is then the carry and the final store dH_in. NSTG: the stages of the ring. */
template <int MODE, int KS, bool REV, int NSTG>
__device__ __forceinline__ void chain_walk(const m3_fwd_args & P, unsigned z) {
    typedef typename cfg<MODE>::T T;
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int                                  TN = KS / 16, LK = KS + 8; /* 8-column tiles per warp */
    const chain_smem                               L(P.A, KS, REV && P.has_z, NSTG, P.thl != nullptr);
    const int    lane = threadIdx.x & 31, warp = threadIdx.x >> 5, rb = warp & 3, upper = warp >> 2;
    const int    nks = P.K / KS;
    const int    s = blockIdx.x, h = blockIdx.y, p0 = (int)(z / nks) * kTV, kc0 = (int)(z % nks) * KS;
    const m3_seg sg = P.segs[s];

    /* this thread's state elements: rows p0 + r0 (+8), columns c0 + 8t (+1), t < TN (warp: 16 rows × KS/2
     * columns; the upper warps the second 32 of the slice); K is a multiple of 64 here */
    const int  r0 = rb * 16 + (lane >> 2), c0 = kc0 + upper * (KS / 2) + 2 * (lane & 3);
    const int  nr = min(kTV, P.V - p0);
    const bool in0 = r0 < nr, in1 = r0 + 8 < nr;
    float      S[TN][4];
#pragma unroll
    for (int t = 0; t < TN; ++t) S[t][0] = S[t][1] = S[t][2] = S[t][3] = 0.0f;
    if (P.has_states) { /* pass_kernel's H_in = S_in + dt_0(1−λ_0)·v_in k_inᵀ (spec §3.5) */
        const bool  add = !REV && sg.len > 0;
        const float cz = add ? ld3(P.dt, sg.row, h, sg.t0) * (1.0f - ssmi_math::sigmoid(ld3(P.trap, sg.row, h, sg.t0))) : 0.0f;
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int p = p0 + r0 + 8 * hf;
            if (!(hf ? in1 : in0)) continue;
            const float vin = add ? ld3(P.v_in, s, h, p) : 0.0f;
#pragma unroll
            for (int t = 0; t < TN; ++t)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int n = c0 + 8 * t + e;
                    float     v = ld4(P.ssm_in, s, h, p, n);
                    if (add) v += (cz * ld3(P.k_in, s, h, n)) * vin;
                    S[t][2 * hf + e] = v;
                }
        }
    }

    const chain_copies<MODE, KS, REV> cp(P, L, sg, h, p0, kc0);
#pragma unroll
    for (int u = 0; u < NSTG - 1; ++u) {
        const int ci = REV ? sg.count - 1 - u : u; /* the walk's u-th chunk */
        if (u < sg.count) cp.issue(smem + u * L.stage, ci, min(kC, sg.len - ci * kC));
        cp_async_commit();
    }
    float kbias[8]; /* this thread's 8 k-bias entries of chain_prep_k, the same in every chunk */
    load_row8(kbias, P.kb, h, kc0 + 8 * ((int)threadIdx.x % (KS / 8)), P.K);
    T *             kh = (T *)(smem + L.kh);
    T *             kl = (T *)(smem + L.kl);
    const long long hvk = (long long)P.H * P.V * P.K;
    const bool      odd = lane & 1;
    const long long dstep = REV ? -hvk : hvk; /* the walk's next chunk */
    float *         d4 = P.states + (long long)(sg.first + (REV ? sg.count - 1 : 0)) * hvk +
                 ((long long)h * P.V + p0) * P.K +
                 (odd ? (r0 + 8) * P.K + c0 - 2 : r0 * P.K + c0); /* 16-byte aligned: c0 − 2 or c0 is 4j */
    for (int c = 0; c < sg.count; ++c, d4 += dstep) {
        unsigned char * st = smem + (c % NSTG) * L.stage;
        cp_async_wait_group<NSTG - 2>(); /* this thread's copies of chunk c */
        __syncthreads(); /* chunk c's operands visible; chunk c − 1's products done (its stage and kh/kl free) */
        if (c + NSTG - 1 < sg.count) {
            const int cn = c + NSTG - 1, ci = REV ? sg.count - 1 - cn : cn;
            cp.issue(smem + (cn % NSTG) * L.stage, ci, min(kC, sg.len - ci * kC));
        }
        cp_async_commit(); /* possibly empty: one group per chunk */
        chain_store_state<TN>(S, d4, odd, in0, in1);
        const m3_chunk ch = chain_chunk(sg, s, REV ? sg.count - 1 - c : c);
        const m3_scal  sc = carve_scal((float *)st);
        chain_prep_k<MODE, KS, REV>(P, ch, kc0, sc, (const float *)(st + L.th),
                                    P.thl != nullptr ? (const float *)(st + L.tb) : nullptr, (const T *)(st + L.kraw),
                                    kh, kl, kbias);
        __syncthreads(); /* w∘K̂ (q̂e) */
        float loc[8][4]; /* vk_product's accumulator; NB = 2 uses the first 4 */
#pragma unroll
        for (int t = 0; t < 8; ++t) loc[t][0] = loc[t][1] = loc[t][2] = loc[t][3] = 0.0f;
        {
            const T * vs = (const T *)(st + L.vs);
            vk_product<MODE, KS / 32>(loc, vs + rb * 16 + a_trans_off(lane, kFLd),
                                      kh + upper * (KS / 2) + b_kn_off(lane, LK),
                                      kl + upper * (KS / 2) + b_kn_off(lane, LK), (ch.len + 15) / 16, LK);
            if constexpr (REV) /* the dy remainder times the rounded q̂e: hi·hi + hi·lo + lo·hi */
                if (P.has_z)
                    vk_product<MODE, KS / 32, false>(loc, (const T *)(st + L.zs) + rb * 16 + a_trans_off(lane, kFLd),
                                                     kh + upper * (KS / 2) + b_kn_off(lane, LK), nullptr,
                                                     (ch.len + 15) / 16, LK);
        }
        const float decay = expf(sc.cm[ch.len - 1]);
#pragma unroll
        for (int t = 0; t < TN; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) S[t][e] = decay * S[t][e] + loc[t][e];
    }
    cp_async_wait_all(); /* nothing is pending (the last groups are empty) */
    if (P.fin_ssm.present) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            if (!(hf ? in1 : in0)) continue;
#pragma unroll
            for (int t = 0; t < TN; ++t)
#pragma unroll
                for (int e = 0; e < 2; ++e) st4(P.fin_ssm, s, h, p0 + r0 + 8 * hf, c0 + 8 * t + e, S[t][2 * hf + e]);
        }
    }
}

template <int MODE, int KS>
__global__ void __launch_bounds__(kChainThreads, 2) chain_state_kernel(const m3_fwd_args P) {
    chain_walk<MODE, KS, false, kChainStages>(P, blockIdx.z);
}

/* The backward's two walks, two stages (with the reverse walk's z tiles, two blocks per SM: ~91 KB
 * at A = 32, KS = 64). blockIdx.z < gridDim.z / 2: the reverse walk of slice blockIdx.z (V tile ·
 * K/KS + K slice), else the forward walk of slice blockIdx.z − gridDim.z / 2. The reverse walks
 * (dy's remainder plane: a third product per chunk) take longer, so they come first in launch
 * order and start first. F.states == NULL (the forward's states given): the reverse walks alone, one per
 * blockIdx.z. */
template <int MODE, int KS>
__global__ void __launch_bounds__(kChainThreads, 2) bwd_walks_kernel(const m3_fwd_args F, const m3_fwd_args R) {
    const unsigned half = F.states != nullptr ? gridDim.z >> 1 : gridDim.z;
    if (blockIdx.z < half)
        chain_walk<MODE, KS, true, 2>(R, blockIdx.z);
    else
        chain_walk<MODE, KS, false, 2>(F, blockIdx.z - half);
}

template <int MODE, int KS>
ssm_status launch_ks(ssm_context * ctx, const char * op, const m3_fwd_args & P) {
    const chain_smem Lc(P.A, KS);
    void (*kernel)(const m3_fwd_args) = chain_state_kernel<MODE, KS>;
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute",
                         cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Lc.total)));
    kernel<<<dim3((unsigned)P.NS, (unsigned)P.H, (unsigned)(((P.V + kTV - 1) / kTV) * (P.K / KS))), kChainThreads,
             (size_t)Lc.total, ssmi_cuda_stream(ctx)>>>(P);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "chain_state_kernel launch");
    return SSM_STATUS_OK;
}

template <int MODE, int KS>
ssm_status launch_walks(ssm_context * ctx, const char * op, const m3_fwd_args & F, const m3_fwd_args & R) {
    const int bytes = bwd_walks_smem(F.A, KS, R.has_z != 0);
    void (*kernel)(const m3_fwd_args, const m3_fwd_args) = bwd_walks_kernel<MODE, KS>;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute (bwd_walks_kernel)",
                                          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)));
    const int walks = F.states != nullptr ? 2 : 1;
    kernel<<<dim3((unsigned)F.NS, (unsigned)F.H, (unsigned)(walks * ((F.V + kTV - 1) / kTV) * (F.K / KS))),
             kChainThreads, (size_t)bytes, ssmi_cuda_stream(ctx)>>>(F, R);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "bwd_walks_kernel launch");
    return SSM_STATUS_OK;
}

} /* namespace */

ssm_status launch_bwd_walks(ssm_context * ctx, const char * op, const m3_fwd_args & F, const m3_fwd_args & R, int mode,
                            int KS) {
    if (mode == M_F16) return KS == 64 ? launch_walks<M_F16, 64>(ctx, op, F, R) : launch_walks<M_F16, 32>(ctx, op, F, R);
    return KS == 64 ? launch_walks<M_BF16, 64>(ctx, op, F, R) : launch_walks<M_BF16, 32>(ctx, op, F, R);
}

ssm_status launch_state_chain(ssm_context * ctx, const char * op, const m3_fwd_args & P, int mode, int KS) {
    if (mode == M_F16) return KS == 64 ? launch_ks<M_F16, 64>(ctx, op, P) : launch_ks<M_F16, 32>(ctx, op, P);
    return KS == 64 ? launch_ks<M_BF16, 64>(ctx, op, P) : launch_ks<M_BF16, 32>(ctx, op, P);
}

} /* namespace ssmi_siso */
