/*
 * bwd_state_chain.cu — steps 2–5 of the Mamba-2 combined backward (bwd.cuh) in one kernel for the
 * bf16-plane entry where every operand row is a 16-byte aligned run (chain_ok): the
 * chunk-local states and their forward pass, and the state gradients through the outputs and
 * their reverse pass. One block per (segment, head of the batch, direction, 32 × 128 tile of the
 * P × N state) walks the segment's chunks in order (forward: S) or in reverse (G), keeping the
 * running state of its tile in the warps' mma accumulators: per chunk it stores the entering
 * state S_c (the state gradient G_c) into the workspace slot the chunk kernel reads, forms the
 * chunk's product s_c = Σ_j (e^{cl−cm_j}·dt_j·x_j)ᵀ·B_j (dS_c = Σ_i (e^{cm_i}·δx_i)ᵀ·C_i) on
 * the tensor cores, and updates run = e^{cl_c}·run + s_c; beside them, warps of their own load
 * the ring and split the next step's rows into a second set of planes. A step is kChainStep
 * chunks between two barriers: their products do not depend on each other (only the updates
 * chain), so one barrier serves several chunks and a warp has several products in flight.
 * The chunk operands stream through a cp.async ring of three steps, so a step waits on shared
 * memory and the tensor cores, not on global memory. The products (tile_mma, tokens ascending)
 * and the update are those of bwd_states_planes_kernel and the state passes (bwd_pass.cu), so the
 * bytes of S, G and dinitial_states are theirs; the local states never go through global memory.
 */
#include "../common/mma.cuh"
#include "bwd.cuh"

namespace ssmi_m2bwd {
namespace {

using namespace ssmi_mma;

constexpr int kMmaWarps = 8; /* the products, the running state and the stores: a 16 × 32 slab of the tile each */
/* the loads of the ring and the split of the next chunk: as many as the mma warps, so each SM
 * sub-partition holds two warps of each kind; the split is the longer of the two kinds' work per
 * chunk, and with fewer warps it would set the pace alone */
constexpr int kSplitWarps = 8;
constexpr int kMmaThreads = 32 * kMmaWarps, kSplitThreads = 32 * kSplitWarps;
constexpr int kChainThreads = kMmaThreads + kSplitThreads;
constexpr int kChainTP = 32;    /* state rows (p) per block */
constexpr int kChainTN = 128;   /* state columns (n) per block */
constexpr int kChainQ = kMaxQ;  /* the plane entry's chunk */
constexpr int kChainStep = 2;   /* chunks per barrier step */
/* ring stages: step m's products, step m + 1's split, step m + 2's copies in flight */
constexpr int kChainStages = 3 * kChainStep;
constexpr int kRowLd = kChainTP + 8; /* bf16 pitch of the planes' rows */
constexpr int kXGroups = kChainTP / 8, kBGroups = kChainTN / 8; /* 16-byte pieces per row */
constexpr int kXPer = kChainQ * kXGroups / kSplitThreads;       /* x pieces per split thread and chunk */
constexpr int kBPer = kChainQ * kBGroups / kSplitThreads;       /* B pieces per split thread and chunk */
static_assert(kChainQ * kXGroups % kSplitThreads == 0 && kXPer >= 1, "whole x pieces per split thread");
static_assert(kChainQ * kBGroups % kSplitThreads == 0, "whole B pieces per split thread");
static_assert(kMmaWarps == 8 && kChainTP == 32 && kChainTN == 128, "the slabs: 2 × 4 warps of 16 × 32");
static_assert(kXGroups == 4, "a warp's x pieces: 8 rows × 4 columns (x_off: 64-byte rows)");
static_assert(kChainQ == 64, "B of a chunk: one 64-row block of swizzled atoms");

/* Byte offset of (row i, column j, a multiple of 8) in a stage's x or z rows: 64-byte rows whose
 * 16-byte units are permuted by i / 2, so a quarter warp's eight rows at one column fall on
 * distinct banks. */
__device__ __forceinline__ int x_off(int i, int j) { return i * 64 + ((((j >> 3) ^ (i >> 1)) & 3) << 4); }

/* One ring stage: the chunk's rows of x (or dout) and z over the tile's p columns (x_off), of B
 * (or C) over its n columns in the swizzled atoms (swz_off: ldmatrix's eight rows at one column on
 * distinct banks), and its cm and dt rows. Permuted units instead of padded rows: no bytes between
 * rows, and the chain walks faster with them (mamba2-bwd-design §21). */
struct chain_stage {
    bf16  x[kChainQ * kChainTP];
    bf16  z[kChainQ * kChainTP];
    alignas(128) bf16 b[kChainQ * kChainTN];
    float cm[kChainQ], dt[kChainQ];
};
struct chain_smem {
    chain_stage st[kChainStages];
    /* the weighted rows as split planes, two steps: chunk q of a step in set·kChainStep + q */
    bf16 ah[2 * kChainStep][kChainQ * kRowLd], al[2 * kChainStep][kChainQ * kRowLd];
};

/* kRev false: the forward walk (S from x, B, the slots of st); true: the reverse walk (G from dout
 * gated by z, C, the slots of gs, and dinitial_states). Two kinds of warps, joined by one barrier
 * per step of kChainStep chunks: the split warps load the ring (split thread u: the x and z pieces
 * of rows (u mod 8) + 8·(u / 32) + (kSplitThreads / kXGroups)·r, columns 8·((u / 8) mod 4).., and
 * kBPer B pieces) and convert their x pieces of the next step's chunks into planes while the mma
 * warps (warp w: rows 16·(w / 4).., columns 32·(w % 4).. of the tile) run this step's products
 * and updates, so neither kind's latency waits behind the other's. */
template <bool kRev>
__device__ __forceinline__ void chain_walk(const bw_args & a, chain_smem & sm, const bw_seg & sg, int h, int pt0,
                                           int nt0) {
    const int       tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g4 = lane >> 2, t4 = lane & 3;
    const bool      mma = warp < kMmaWarps;
    const int       u = mma ? 0 : tid - kMmaThreads; /* the split thread's number */
    const int       P = a.P, N = a.N;
    const long long PN = (long long)P * N;
    const bool      gated = kRev && a.has_z;
    const ssmi_cu_view & xv = kRev ? a.dout : a.x;
    const ssmi_cu_view & bv = kRev ? a.c : a.b;
    const long long nc = sg.nc, clast = sg.c0 + nc - 1; /* the segment's last chunk, the only short one */
    /* the segment's chunks: consecutive, of kChainQ tokens from its first, the last possibly shorter */
    bw_chunk ck0 = {}, ckl = {};
    if (nc > 0) ck0 = a.chunks[sg.c0], ckl = a.chunks[clast];
    const long long c1 = kRev ? clast : sg.c0, dir = kRev ? -1 : 1; /* the walk's first chunk, its step */

    /* a split thread's pieces: x (and z) rows xi + xrs·r, columns xj..; B rows bi + brs·r, columns
     * bj..; their sources, and those of the cm and dt rows, at the next chunk to issue, advanced by
     * one chunk of the walk per issue */
    constexpr int   xrs = kSplitThreads / kXGroups, brs = kSplitThreads / kBGroups; /* rows between pieces */
    /* x (z) pieces: the eight lanes of a quarter warp take eight rows at one column, so their 16-byte
     * shared accesses fall on distinct banks, in the stage (x_off) and in the planes (the kRowLd
     * pitch, the rows of ldmatrix's pattern); a warp still covers rows 8·(u / 32).. whole */
    const int       xi = (u & 7) + 8 * (u >> 5), xj = ((u >> 3) & 3) * 8, bi = u / kBGroups, bj = (u % kBGroups) * 8;
    const bool      xin = pt0 + xj < P, bin = nt0 + bj < N; /* P, N multiples of 8: whole pieces */
    const long long t1 = ck0.t0 + (c1 - sg.c0) * kChainQ;   /* the first issued chunk's first token */
    const bf16 *    xp = (const bf16 *)xv.p + off4(xv.s, ck0.row, t1 + xi, h, pt0 + xj);
    const bf16 *    zp = gated ? (const bf16 *)a.z.p + off4(a.z.s, ck0.row, t1 + xi, h, pt0 + xj) : xp;
    const bf16 *    bp = (const bf16 *)bv.p + off4(bv.s, ck0.row, t1 + bi, h / a.R, nt0 + bj);
    const long long xd = dir * kChainQ * xv.s[1], zd = gated ? dir * kChainQ * a.z.s[1] : 0;
    const long long xu = xrs * xv.s[1], zu = gated ? xrs * a.z.s[1] : 0;
    const long long bd = dir * kChainQ * bv.s[1], bu = brs * bv.s[1];
    constexpr int   q4 = kChainQ / 4; /* the workspace rows are 16-byte aligned (kChainQ floats) */
    const int       qv = u < q4 ? u : u < 2 * q4 ? u - q4 : 0; /* split threads [0, q4) load cm, [q4, 2·q4) dt */
    const float *   vp = (u < q4 ? a.cmv : a.dtv) + (c1 * a.H + h) * kChainQ + 4 * qv;
    const long long vd = dir * (long long)a.H * kChainQ;
    long long       ic = c1; /* the next chunk to issue */
    int             is = 0;  /* its stage */

    /* zeros everywhere once: columns past the tile's live ones are never loaded */
    for (int e = tid; e < (int)(sizeof(chain_smem) / 16); e += kChainThreads) ((uint4 *)&sm)[e] = make_uint4(0u, 0u, 0u, 0u);
    __syncthreads();

    /* (split warps) the next chunk of the walk into its stage (one commit group, empty past the walk) */
    auto issue = [&]() {
        if (kRev ? ic >= sg.c0 : ic <= clast) {
            chain_stage & s = sm.st[is];
            const int     L = ic == clast ? ckl.len : kChainQ;
#pragma unroll
            for (int r = 0; r < kXPer; ++r) {
                const int i = xi + xrs * r;
                if (!xin || i >= L) continue;
                cp_async16((unsigned char *)s.x + x_off(i, xj), xp + r * xu);
                if (gated) cp_async16((unsigned char *)s.z + x_off(i, xj), zp + r * zu);
            }
#pragma unroll
            for (int r = 0; r < kBPer; ++r) {
                const int i = bi + brs * r;
                if (!bin) break;
                unsigned char * d = (unsigned char *)s.b + swz_off(i, bj);
                if (i < L) cp_async16(d, bp + r * bu);
                else *(uint4 *)d = make_uint4(0u, 0u, 0u, 0u); /* rows past L take no part */
            }
            if (u < q4) cp_async16(&s.cm[4 * qv], vp);
            else if (!kRev && u < 2 * q4) cp_async16(&s.dt[4 * qv], vp);
            xp += xd, zp += zd, bp += bd, vp += vd, ic += dir;
        }
        cp_async_commit();
        is = is == kChainStages - 1 ? 0 : is + 1;
    };

    /* (mma warps) the running state of this lane's accumulator elements: element
     * (p0 + g4 + 8hh, n0 + 16nt + 8j + 2t4 + u) of the tile in run[nt][j][2hh + u] */
    const int  p0 = 16 * (warp / 4), n0 = 32 * (warp % 4);
    const bool live = mma && pt0 + p0 < P && nt0 + n0 < N; /* the warp's slab holds state elements */
    float      run[2][2][4];
    /* fn(run element, p, n) for each of this lane's running-state elements */
    auto each_run = [&](auto fn) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    fn(run[nt][j][r], pt0 + p0 + g4 + 8 * (r >> 1), nt0 + n0 + 16 * nt + 8 * j + 2 * t4 + (r & 1));
    };
    each_run([&](float & rv, int p, int n) {
        const bool in = mma && p < P && n < N;
        float      v = 0.0f;
        if (!kRev && in && sg.init >= 0) v = ssmi_cu_ld(a.init.p, a.init.dtype, off4(a.init.s, sg.init, h, p, n));
        if (kRev && in && sg.fin >= 0) v = ssmi_cu_ld(a.dfin.p, a.dfin.dtype, off4(a.dfin.s, sg.fin, h, p, n));
        rv = v;
    });
    /* this lane's first state element (row p0 + g4, column n0 + 2t4) in the current chunk's slot;
     * the warp's piece lies inside P × N (full) or is cut by it */
    float *         slot = (kRev ? a.gs : a.st) + (nc > 0 ? state_at(a, c1, h, PN) : 0) +
                   ((long long)(pt0 + p0 + g4) * N + nt0 + n0 + 2 * t4);
    const long long sd = dir * (long long)a.hb * PN;
    const int       n8 = 8 * N;
    const bool      full = pt0 + p0 + 16 <= P && nt0 + n0 + 32 <= N;

    /* (split warps) the weighted rows of the chunk in stage s (length L) into the split planes pl:
     * row i times e^{cl−cm_i}·dt_i (forward) or, gated, e^{cm_i} (reverse); zeros past L (the live
     * columns are zero past the tile) */
    auto split_rows = [&](const chain_stage & s, int L, int pl) {
#pragma unroll
        for (int r = 0; r < kXPer; ++r) {
            const int i = xi + xrs * r, o = i * kRowLd + xj;
            uint4     hv = make_uint4(0u, 0u, 0u, 0u), lv = hv;
            if (xin && i < L) {
                const float      sc = kRev ? expf(s.cm[i]) : expf(s.cm[L - 1] - s.cm[i]) * s.dt[i];
                const int        so = x_off(i, xj);
                const uint4      dv4 = *(const uint4 *)((const unsigned char *)s.x + so);
                const uint4      zv4 = *(const uint4 *)((const unsigned char *)s.z + so);
                const uint32_t * dw = (const uint32_t *)&dv4;
                const uint32_t * zw = (const uint32_t *)&zv4;
                uint32_t *       hw = (uint32_t *)&hv;
                uint32_t *       lw = (uint32_t *)&lv;
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const float2 d2 = t2<M_BF16>::unpack(dw[q]), z2 = t2<M_BF16>::unpack(zw[q]);
                    const float  g0 = (gated ? silu_gate(d2.x, z2.x) : d2.x) * sc;
                    const float  g1 = (gated ? silu_gate(d2.y, z2.y) : d2.y) * sc;
                    split2<M_BF16>(g0, g1, hw[q], lw[q]);
                }
            }
            *(uint4 *)&sm.ah[pl][o] = hv, *(uint4 *)&sm.al[pl][o] = lv;
        }
    };
    auto len_of = [&](long long c) { return c == clast ? ckl.len : kChainQ; };

    /* Per step (chunks k .. k + kChainStep − 1), after one barrier: the split warps issue the step
     * after next and split the next step's chunks into the other plane set, the mma warps run the
     * step's products, then its stores and updates in chunk order. */
    if (!mma) {
#pragma unroll
        for (int q = 0; q < 2 * kChainStep; ++q) issue(); /* steps 0 and 1 */
    }
    if (nc > 0) {
        if (!mma) cp_async_wait_group<kChainStep>(); /* step 0 */
        __syncthreads();
        if (!mma) {
#pragma unroll
            for (int q = 0; q < kChainStep; ++q)
                if (q < nc) split_rows(sm.st[q], len_of(c1 + q * dir), q);
        }
    }
    long long c = c1;
    int       cs = 0; /* the stage of the step's first chunk */
    for (long long k = 0; k < nc; k += kChainStep, c += kChainStep * dir, slot += kChainStep * sd) {
        const int ps = (int)((k / kChainStep) & 1) * kChainStep; /* the step's plane set */
        const int ns = cs + kChainStep == kChainStages ? 0 : cs + kChainStep; /* the next step's stages */
        if (!mma) cp_async_wait_group<0>(); /* this thread's part of the next step has landed */
        __syncthreads(); /* everyone's; this step's planes are split; the previous step's products are done */
        const int ccs = cs; /* this step's stages */
        cs = ns;
        if (!mma) {
#pragma unroll
            for (int q = 0; q < kChainStep; ++q) issue(); /* the step after next, into the previous step's stages */
#pragma unroll
            for (int q = 0; q < kChainStep; ++q)
                if (k + kChainStep + q < nc)
                    split_rows(sm.st[ns + q], len_of(c + (kChainStep + q) * dir), (kChainStep - ps) + q);
            continue;
        }
        if (!live) continue;
        /* the step's products first (they do not depend on the running state) */
        float acc[kChainStep][2][2][4];
#pragma unroll
        for (int q = 0; q < kChainStep; ++q) {
            if (k + q >= nc) break;
            const chain_stage & s = sm.st[ccs + q];
            const int           L = len_of(c + q * dir);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                zero_acc(acc[q][nt]);
                if (L == kChainQ)
                    tile_mma<true, true, true, false, kChainQ, true>(acc[q][nt], sm.ah[ps + q], sm.al[ps + q], kRowLd,
                                                                     s.b, nullptr, 0, p0, n0 + 16 * nt, 0, kChainQ);
                else tile_mma<true, true, true, false, 0, true>(acc[q][nt], sm.ah[ps + q], sm.al[ps + q], kRowLd, s.b,
                                                                nullptr, 0, p0, n0 + 16 * nt, 0, (L + 15) / 16 * 16);
            }
        }
        /* then per chunk, in walk order: store the entering state, run = e^{cl}·run + product; the
         * decay e^{cl} from the chunk's cm row in its stage: the bits of the workspace's ecl
         * (bwd_dt_kernel's expf of the same cm), without a global load after every barrier */
#pragma unroll
        for (int q = 0; q < kChainStep; ++q) {
            if (k + q >= nc) break;
            const chain_stage & s = sm.st[ccs + q];
            const float         f = expf(s.cm[len_of(c + q * dir) - 1]);
            float * const       sl = slot + q * sd;
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int j = 0; j < 2; ++j)
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const int p = pt0 + p0 + g4 + 8 * hh, n = nt0 + n0 + 16 * nt + 8 * j + 2 * t4;
                        float &   r0 = run[nt][j][2 * hh], &r1 = run[nt][j][2 * hh + 1];
                        float *   e = sl + (hh * n8 + 16 * nt + 8 * j);
                        if (full || (p < P && n + 1 < N)) *(float2 *)e = make_float2(r0, r1);
                        else if (p < P && n < N) *e = r0;
                        r0 = f * r0 + acc[q][nt][j][2 * hh];
                        r1 = f * r1 + acc[q][nt][j][2 * hh + 1];
                    }
        }
    }
    cp_async_wait_all();
    if (mma && kRev && sg.dinit >= 0 && a.dinit.p != NULL)
        each_run([&](float & rv, int p, int n) {
            if (p < P && n < N)
                ssmi_cu_st(a.dinit.p, a.dinit.dtype, off4(a.dinit.s, sg.dinit, h, p, n), sg.init >= 0 ? rv : 0.0f);
        });
}

/* Grid (segment, head of the batch, tile + direction): blockIdx.z = dir·tiles + tile, the tile
 * (p tile) · n tiles + (n tile). */
__global__ void __launch_bounds__(kChainThreads) bwd_state_chain_kernel(bw_args a) {
    extern __shared__ float4 sm4[];
    chain_smem &    sm = *(chain_smem *)sm4;
    const bw_seg    sg = a.segs[blockIdx.x];
    const int       h = a.h0 + blockIdx.y;
    const int       ntn = (a.N + kChainTN - 1) / kChainTN, tiles = ((a.P + kChainTP - 1) / kChainTP) * ntn;
    const int       z = blockIdx.z, tile = z % tiles;
    const int       pt0 = (tile / ntn) * kChainTP, nt0 = (tile % ntn) * kChainTN;
    if (z < tiles) chain_walk<false>(a, sm, sg, h, pt0, nt0);
    else chain_walk<true>(a, sm, sg, h, pt0, nt0);
}

/* A bf16 view in 16-byte runs (rows16). */
bool bf16_rows16(const ssmi_cu_view & v) { return v.dtype == SSM_DTYPE_BF16 && rows16(v); }

} /* namespace */

bool chain_ok(const bw_args & a, size_t optin) {
    return sizeof(chain_smem) <= optin && a.Q == kChainQ && a.P % 8 == 0 && a.N % 8 == 0 && bf16_rows16(a.x) &&
           bf16_rows16(a.dout) && bf16_rows16(a.b) && bf16_rows16(a.c) && (!a.has_z || bf16_rows16(a.z));
}

ssm_status launch_bwd_state_chain(ssm_context * ctx, const char * op, const bw_args & a) {
    if (a.nsegs == 0 || a.hb == 0 || a.P == 0 || a.N == 0) return SSM_STATUS_OK;
    const size_t bytes = sizeof(chain_smem);
    SSM_FORWARD_IF_ERROR(smem_optin(ctx, op, (const void *)bwd_state_chain_kernel, bytes));
    const int  tiles = ((a.P + kChainTP - 1) / kChainTP) * ((a.N + kChainTN - 1) / kChainTN);
    const dim3 grid((unsigned)a.nsegs, (unsigned)a.hb, (unsigned)(2 * tiles));
    bwd_state_chain_kernel<<<grid, kChainThreads, bytes, ssmi_cuda_stream(ctx)>>>(a);
    SSMI_CU_CHECK_LAUNCH(ctx, op, "bwd_state_chain_kernel");
    return SSM_STATUS_OK;
}

} /* namespace ssmi_m2bwd */
