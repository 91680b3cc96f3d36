/*
 * bwd.cu — CUDA Mamba-3 SISO backward (spec §6), the host side: the chunk plan, the workspace, the
 * selection table and the entry point. The table's entries differ only in steps 2 to 4:
 * chained_planes (steps 2 and 3 as one walk per state slice, bwd_state_chain.cu, then
 * chunked_planes' gradient kernel) for 16-bit q, k, v with K % 32 == 0 where its walks about fill
 * the SMs, chunked_planes (bf16 planes, tensor cores; bwd_chunk_planes.cu) for 16-bit q, k, v where
 * its shared memory fits, chunked (fp32 FFMA; bwd_chunk.cu) for every problem. Every
 * gradient of ssm_mamba3_siso is computed from the forward's inputs, or, on the plane entries, from
 * what the forward saved (below), in stream order:
 *   1. bwd_prep_kernel: per (chunk, head) the per-token scalars and the chunk-local angle sums (and
 *      the chained entries' walk slots and sequences);
 *      bwd_theta_kernel: per (sequence, head, angle) θ entering every chunk;
 *   2. bwd_chunk_sums_kernel: per (chunk, head) the state contribution and the state-gradient
 *      contribution of the chunk, and c_last;
 *   3. bwd_pass_kernel, one launch for both walks: forward, the state entering every chunk (from
 *      H_in); reverse, the carry dS of every chunk (from dfinal_ssm_state) and dH_in;
 *      chained_planes: bwd_walks_kernel does 2 and 3 (the same P.st, P.dst, P.cl, P.dhin),
 *      after bwd_gate_kernel where z is given: dy = dout ⊙ silu(z) once as the walks' two planes (P.dyh,
 *      P.dyl), with dz from pregate_y where its rows allow (P.dz_fused), so dout and z are read once;
 *   4. bwd_chunk_grads_kernel: per (chunk, head) dv, dz, dadt and the per-token chain into the
 *      workspace (dq̃, dk̃ per V-head, dθ, dσ, dγ, chunk sums of dq̃, dk̃, dQK, dθ);
 *      given pregate_y, the plane entries' gradient kernel skips its dz tiles and bwd_dz_kernel
 *      forms dz from y element by element (unless bwd_gate_kernel did);
 *   5. bwd_seq_kernel: per (sequence, head) the initial-state gradients (and dc of the t = 0 fold),
 *      the angle carry over the chunks and dangle_state; empty sequences pass dfinal_* through;
 *      bwd_tok_kernel: per (chunk, head) the angle backward inside the chunk (dangles), ddt, dtrap;
 *   6. bwd_qk_sum_kernel (dq, dk over the GQA heads in head order), bwd_param_sum_kernel (dq_bias,
 *      dk_bias, dd over the chunks in order).
 * Chunks of C tokens restart at every sequence start; C and whether the gradient kernel stages the
 * state in shared memory come from the entry and the shape only (the plane entries: planes_chunk, 64
 * tokens where the gradient kernel's planes fit kPlanesSmemBudget, else 32; chunked: chunk_length),
 * so an entry's bytes are the same on every device and run.
 * Saved results: chained_planes reads the forward's chunk_states where params->chunk_size is its
 * chunk (the walks then run the reverse walk alone; P.st is chunk_states itself where it is F32
 * dense, else its copy); the plane entries read pregate_y for dz. Otherwise params->chunk_size is
 * not used (not semantic). No float atomics: every sum is a loop in a
 * fixed order. Any strides (0 too), any float dtype per tensor.
 * Limits: K ≤ 256, H ≤ 65535, sequences ≤ 65535 (UNSUPPORTED beyond).
 */
#include <stdlib.h>

#include "../common/variant_table.cuh"
#include "../ssmi_cuda.h"
#include "bwd.cuh"

using namespace ssmi_siso;
using namespace ssmi_siso_bwd;

namespace {

const char   kOp[] = "mamba3_siso_bwd";
const size_t kChunkSmemBudget = 200 * 1024; /* bytes of a chunk-gradient block's shared memory (1 block per SM) */

/* The fp32 entry's chunk length and whether its gradient kernel stages the state in shared memory:
 * staged at C = kFmaChunk or half of it where that fits the budget, else unstaged at kFmaChunk
 * halved while it exceeds the budget (the shape alone decides). */
int chunk_length(int K, int V, bool * staged) {
    for (int C = kFmaChunk; C >= kFmaChunk / 2; C /= 2)
        if (sizeof(float) * (size_t)chunk_smem_floats(C, K, V, true, true) <= kChunkSmemBudget) {
            *staged = true;
            return C;
        }
    *staged = false;
    int C = kFmaChunk;
    while (C > 1 && sizeof(float) * (size_t)chunk_smem_floats(C, K, V, true, false) > kChunkSmemBudget) C /= 2;
    return C;
}

struct bwd_problem {
    int       qkv16;  /* q, k and v are fp16 or bf16                                       */
    size_t    planes; /* shared memory of the bf16-plane gradient kernel (planes_chunk tokens) */
    size_t    optin;  /* the device's shared memory per block                               */
    long long NS, H;  /* sequences, heads                                                   */
    int       K, V, sms;
    int       A, has_z;
    int       rows16; /* q, k, v, dout (and z) of v's 16-bit dtype in 16-byte rows (the chain's copies) */
    int       saved;  /* chunk_states given at the chain's 64-token chunks: the reverse walks alone run */
};
bool any_applies(const bwd_problem &) { return true; }
bool planes_applies(const bwd_problem & pb) { return pb.qkv16 != 0 && pb.planes <= pb.optin; }
/* The state chain's blocks of one walk: (sequence, head, V tile, slice of KS K columns). */
long long chain_walks(const bwd_problem & pb, int KS) {
    return pb.NS * pb.H * ((pb.V + ssmi_siso::kTV - 1) / ssmi_siso::kTV) * (pb.K / KS);
}
/* the forward chain's operands: 64-token chunks (its kC), K % KS == 0 up to 128, 16-byte rows */
bool chain_applies(const bwd_problem & pb, int KS) {
    return planes_applies(pb) && pb.rows16 && pb.K % KS == 0 && pb.K <= 128 && planes_chunk(pb.K, pb.V) == ssmi_siso::kC &&
           2LL * ((pb.V + ssmi_siso::kTV - 1) / ssmi_siso::kTV) * (pb.K / KS) <= 65535 &&
           bwd_state_chain_smem(pb.A, KS, pb.has_z != 0) <= pb.optin;
}
bool chain64_applies(const bwd_problem & pb) { return chain_applies(pb, 64); }
bool chain32_applies(const bwd_problem & pb) { return chain_applies(pb, 32); }
/* A walk's time is its chunk count times a per-chunk latency, while the sums kernel and the passes
 * take time in proportion to all the work: the chain pays once the walks of its widest blocks (64
 * columns where K % 64 == 0) give >= kBwdChainPerSm per SM. Of the two widths, the 64-column walks
 * where the blocks that run (both walks, or the reverse alone given chunk_states) give >=
 * kChain64PerSm per SM, else the 32-column ones (the forward chain's rule, siso.cu). */
const double kBwdChainPerSm = 0.9;
bool chain_pays(const bwd_problem & pb) {
    return (double)chain_walks(pb, pb.K % 64 == 0 ? 64 : 32) >= kBwdChainPerSm * pb.sms;
}
bool chain64_pays(const bwd_problem & pb) {
    return chain_pays(pb) && (double)((pb.saved ? 1 : 2) * chain_walks(pb, 64)) >= ssmi_siso::kChain64PerSm * pb.sms;
}
bool chain32_pays(const bwd_problem & pb) { return chain_pays(pb) && !(chain64_applies(pb) && chain64_pays(pb)); }
struct bwd_variant {
    const char * name;
    const char * why;
    const char * rule;
    bool (*applies)(const bwd_problem &);
    bool (*pays)(const bwd_problem &); /* the default's measured rule on top of applies; NULL: none */
    bool planes;                       /* the chunk kernels of bwd_chunk_planes.cu */
    int  chain;                        /* K columns of the walk blocks (the slots + bwd_walks_kernel instead of
                                          the chunk sums and the passes); 0: none */
};
/* The tensor-core entry serves 16-bit q, k, v only: its products keep ~2^-16 relative error
 * (fp32 operands split into two bf16 parts), inside the 16-bit bars of DESIGN §5, not the fp32 bar. */
const bwd_variant kBwdTable[] = {
    {"chained_planes",
     "chunked_planes with its chunk sums and both state passes in one kernel: a block per (sequence, head, walk, "
     "64 V rows, 64 K columns) walks the chunks with the state in registers: the forward's chain_state_kernel "
     "(cp.async operand ring, slots of the chunk scalars and angles); given chunk_states, the reverse walks alone; "
     "by default where the walks give >= 0.9 per SM and those that run >= 1.5",
     "q, k, v, dout (and z) of one 16-bit dtype in 16-byte rows, 64-token chunks, K % 64 == 0 and K <= 128",
     chain64_applies, chain64_pays, true, 64},
    {"chained_planes32",
     "chained_planes with walk blocks of 32 K columns: twice the walks, each with half the K work; by default where "
     "the chain pays and chained_planes' walks that run give < 1.5 per SM (or K % 64 != 0)",
     "q, k, v, dout (and z) of one 16-bit dtype in 16-byte rows, 64-token chunks, K % 32 == 0 and K <= 128",
     chain32_applies, chain32_pays, true, 32},
    {"chunked_planes",
     "16-bit q, k, v: the chunk kernels' operands written once into shared memory as bf16 planes (fp32 values as a "
     "rounded plane and a remainder plane) and every product by ldmatrix + mma.sync m16n8k16 with fp32 accumulators, "
     "16 warps per block, 64-token chunks (32 where those do not fit)",
     "q, k and v in fp16 or bf16, and the chunk's planes fit shared memory", planes_applies, NULL, true, 0},
    {"chunked",
     "plain fp32 chunked backward: per-(chunk, head) blocks with register-tiled products from shared memory, "
     "state and state-gradient passes over the chunks, fixed-order sums; every dtype and layout, K <= 256",
     "any problem", any_applies, NULL, false, 0},
};

struct bwd_plan {
    bw_chunk * chunks;
    bw_seg *   segs;
    long long  W;
    int        chain; /* a chained entry's walk width (K columns; 0: none): the workspace has its slots and sequences */
    bool       saved; /* a chain entry reads the states entering the chunks from chunk_states */
    bool       st_in_place; /* ... and uses its memory as P.st (saved_states_in_place): no st workspace */
    bool       gate;        /* a chain entry with z: dy's planes by bwd_gate_kernel (P.dyh, P.dyl) */
    int        qslice, qparts; /* bw_args' parts of dq̃, dk̃ (grad_slices) */
};

/* The plane gradient kernel's slices: a block per (chunk, slice of a GQA group's heads) takes the
 * slice's heads in turn and sums their dq̃, dk̃ in its part's rows of the workspace, so only
 * qparts parts per group (not a row per head) are written and summed by bwd_qk_sum_kernel. The
 * rule: the fewest slices per group that give the grid kGradBlocks blocks (the kernel runs one
 * block per SM; about a wave on devices of 114–148 SMs), at most one per head. A function of the
 * problem only (never of the device): the order of the sums, so the bytes, are the same on every
 * device; with one slice per group the sum runs over the heads in order, as the per-head parts'
 * sum does. The fp32 kernel keeps a part per head. */
const long long kGradBlocks = 128;

void grad_slices(bwd_plan * pl, long long Hq, int G, bool planes) {
    long long n = G;
    if (planes && pl->W * Hq > 0) {
        n = (kGradBlocks + pl->W * Hq - 1) / (pl->W * Hq);
        if (n > G) n = G;
        if (n < 1) n = 1;
    }
    pl->qslice = G > 0 ? (int)((G + n - 1) / n) : 1;
    pl->qparts = G > 0 ? (G + pl->qslice - 1) / pl->qslice : 0;
}

void plan_free(bwd_plan * pl) {
    free(pl->chunks);
    free(pl->segs);
    memset(pl, 0, sizeof *pl);
}

ssm_status plan_bwd(ssm_context * ctx, const ssmi_mamba3_dims * d, const ssm_tensor * cu, int C, bwd_plan * pl) {
    memset(pl, 0, sizeof *pl);
    const int64_t NS = d->nseq, S = d->seqlen;
    const int64_t maxW = d->varlen ? (S + C - 1) / C + NS : d->batch * ((S + C - 1) / C);
    SSM_RETURN_IF(maxW > 2147483647LL || NS > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: %lld sequences / %lld chunks exceed the CUDA backend's limits (65535 sequences)", kOp,
                  (long long)NS, (long long)maxW);
    pl->chunks = (bw_chunk *)malloc(sizeof(bw_chunk) * (size_t)(maxW > 0 ? maxW : 1));
    pl->segs = (bw_seg *)malloc(sizeof(bw_seg) * (size_t)(NS > 0 ? NS : 1));
    if (pl->chunks == NULL || pl->segs == NULL) {
        plan_free(pl);
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the chunk plan", kOp);
    }
    for (int64_t s = 0; s < NS; ++s) {
        int64_t row = s, t0 = 0, len = S;
        if (d->varlen) {
            row = 0;
            t0 = idx_at(cu, s);
            len = idx_at(cu, s + 1) - t0;
        }
        bw_seg * sg = &pl->segs[s];
        sg->t0 = t0;
        sg->tok = row * S + t0;
        sg->row = (int)row;
        sg->len = (int)len;
        sg->first = (int)pl->W;
        sg->count = (int)((len + C - 1) / C);
        for (int64_t c = 0; c < sg->count; ++c) {
            bw_chunk * ch = &pl->chunks[pl->W++];
            ch->t0 = t0 + c * C;
            ch->tok = sg->tok + c * C;
            ch->row = (int)row;
            ch->len = (int)(len - c * C < C ? len - c * C : C);
            ch->seq = (int)s;
            ch->last = c == sg->count - 1;
        }
    }
    return SSM_STATUS_OK;
}

/* Workspace offsets (bytes, 128-aligned). */
struct bwd_ws {
    size_t chunks, segs, sc, th, thb, st, dst, cl, dhin, dqt, dkt, dth, dsg, dgm, qbp, kbp, ddp, thp, dcw, slot, msegs,
        dyh, dyl, total;
};
bwd_ws ws_layout(const ssmi_mamba3_dims * d, const bwd_plan * pl) {
    bwd_ws       l;
    size_t       o = 0;
    const size_t H = (size_t)d->nheads, T = (size_t)d->batch * (size_t)d->seqlen, W = (size_t)pl->W;
    const size_t K = (size_t)d->dk, VK = (size_t)d->dv * K, A = (size_t)d->nangles, NS = (size_t)d->nseq;
    size_t * const fields[] = {&l.chunks, &l.segs, &l.sc, &l.th, &l.thb, &l.st,  &l.dst, &l.cl,  &l.dhin,
                               &l.dqt,    &l.dkt,  &l.dth, &l.dsg, &l.dgm, &l.qbp, &l.kbp, &l.ddp,
                               &l.thp,    &l.dcw,  &l.slot, &l.msegs, &l.dyh, &l.dyl};
    const size_t   bytes[] = {sizeof(bw_chunk) * W,
                              sizeof(bw_seg) * NS,
                              sizeof(float) * T * H * kScalWs,
                              sizeof(float) * T * H * A,
                              sizeof(float) * W * H * A,
                              pl->st_in_place ? 0 : sizeof(float) * W * H * VK,
                              sizeof(float) * W * H * VK,
                              sizeof(float) * W * H,
                              sizeof(float) * NS * H * VK,
                              sizeof(float) * T * (size_t)d->nheads_qk * (size_t)pl->qparts * K,
                              sizeof(float) * T * (size_t)d->nheads_qk * (size_t)pl->qparts * K,
                              sizeof(float) * T * H * A,
                              sizeof(float) * T * H,
                              sizeof(float) * T * H,
                              sizeof(float) * W * H * K,
                              sizeof(float) * W * H * K,
                              sizeof(float) * W * H,
                              sizeof(float) * W * H * A,
                              sizeof(float) * NS * H,
                              pl->chain ? sizeof(float) * W * H * (size_t)ssmi_siso::kPrepScal : 0,
                              pl->chain ? sizeof(ssmi_siso::m3_seg) * NS : 0,
                              pl->gate ? 2 * T * H * (size_t)d->dv : 0,
                              pl->gate ? 2 * T * H * (size_t)d->dv : 0};
    static_assert(sizeof fields / sizeof fields[0] == sizeof bytes / sizeof bytes[0], "one size per field");
    for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; ++i) {
        *fields[i] = o;
        o += align128(bytes[i]);
    }
    l.total = o;
    return l;
}

ssm_status check_pointers(ssm_context * ctx, const ssm_mamba3_siso_bwd_args * a) {
    const ssm_tensor * ts[] = {&a->q,           &a->k,
                               &a->v,           &a->adt,
                               &a->dt,          &a->trap,
                               &a->q_bias,      &a->k_bias,
                               &a->angles,      &a->d,
                               &a->z,           &a->angle_state,
                               &a->ssm_state,   &a->k_state,
                               &a->v_state,     &a->dout,
                               &a->dfinal_angle_state, &a->dfinal_ssm_state,
                               &a->dfinal_k_state,     &a->dfinal_v_state,
                               &a->dq,          &a->dk,
                               &a->dv,          &a->dadt,
                               &a->ddt,         &a->dtrap,
                               &a->dq_bias,     &a->dk_bias,
                               &a->dangles,     &a->dd,
                               &a->dz,          &a->dangle_state,
                               &a->dssm_state,  &a->dk_state,
                               &a->dv_state,    &a->chunk_states, &a->pregate_y};
    static const char * const names[] = {"q",          "k",           "v",          "adt",
                                         "dt",         "trap",        "q_bias",     "k_bias",
                                         "angles",     "d",           "z",          "angle_state",
                                         "ssm_state",  "k_state",     "v_state",    "dout",
                                         "dfinal_angle_state", "dfinal_ssm_state", "dfinal_k_state", "dfinal_v_state",
                                         "dq",         "dk",          "dv",         "dadt",
                                         "ddt",        "dtrap",       "dq_bias",    "dk_bias",
                                         "dangles",    "dd",          "dz",         "dangle_state",
                                         "dssm_state", "dk_state",    "dv_state",   "chunk_states", "pregate_y"};
    static_assert(sizeof ts / sizeof ts[0] == sizeof names / sizeof names[0], "one name per tensor");
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i)
        if (ssmi_present(ts[i])) SSM_FORWARD_IF_ERROR(ssmi_cuda_check_pointer(ctx, kOp, names[i], ts[i]));
    return SSM_STATUS_OK;
}

/* q, k, v, dout (and z) of v's dtype, 16-bit, in 16-byte rows (chained_planes' cp.async pieces). */
int rows16(const ssm_mamba3_siso_bwd_args * a, const ssmi_mamba3_dims * d) {
    const int32_t T = a->v.dtype;
    if (T != SSM_DTYPE_F16 && T != SSM_DTYPE_BF16) return 0;
    return ssmi_cu_vec_rows(&a->q, T, d->dk) && ssmi_cu_vec_rows(&a->k, T, d->dk) && ssmi_cu_vec_rows(&a->v, T, d->dv) &&
           ssmi_cu_vec_rows(&a->dout, T, d->dv) && (!ssmi_present(&a->z) || ssmi_cu_vec_rows(&a->z, T, d->dv));
}

bw_args make_args(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_bwd_args * a, int C, bool staged, bool planes,
                  long long W) {
    bw_args P;
    memset(&P, 0, sizeof P);
    P.S = d->seqlen;
    P.H = (int)d->nheads, P.G = (int)(d->nheads / d->nheads_qk), P.K = (int)d->dk, P.V = (int)d->dv;
    P.A = (int)d->nangles, P.C = C, P.NS = (int)d->nseq, P.W = (int)W, P.staged = staged ? 1 : 0;
    P.planes = planes ? 1 : 0, P.v_bf16 = a->v.dtype == SSM_DTYPE_BF16;
    P.has_d = ssmi_present(&a->d), P.has_z = ssmi_present(&a->z), P.has_states = d->has_states != 0;
    P.has_dfa = ssmi_present(&a->dfinal_angle_state), P.has_dfs = ssmi_present(&a->dfinal_ssm_state);
    P.has_dfk = ssmi_present(&a->dfinal_k_state), P.has_dfv = ssmi_present(&a->dfinal_v_state);
    P.q = ssmi_cu_view_or_null(&a->q), P.k = ssmi_cu_view_or_null(&a->k), P.v = ssmi_cu_view_or_null(&a->v);
    P.adt = ssmi_cu_view_or_null(&a->adt), P.dt = ssmi_cu_view_or_null(&a->dt), P.trap = ssmi_cu_view_or_null(&a->trap);
    P.qb = ssmi_cu_view_or_null(&a->q_bias), P.kb = ssmi_cu_view_or_null(&a->k_bias), P.ang = ssmi_cu_view_or_null(&a->angles);
    P.d = ssmi_cu_view_or_null(&a->d), P.z = ssmi_cu_view_or_null(&a->z);
    P.ang_in = ssmi_cu_view_or_null(&a->angle_state), P.ssm_in = ssmi_cu_view_or_null(&a->ssm_state);
    P.k_in = ssmi_cu_view_or_null(&a->k_state), P.v_in = ssmi_cu_view_or_null(&a->v_state);
    P.dout = ssmi_cu_view_or_null(&a->dout), P.dfa = ssmi_cu_view_or_null(&a->dfinal_angle_state), P.dfs = ssmi_cu_view_or_null(&a->dfinal_ssm_state);
    P.dfk = ssmi_cu_view_or_null(&a->dfinal_k_state), P.dfv = ssmi_cu_view_or_null(&a->dfinal_v_state);
    if (planes && ssmi_present(&a->pregate_y)) { /* dz from y by bwd_dz_kernel (the plane entries) */
        P.ypre = ssmi_cu_view_of(&a->pregate_y);
        P.dz_vec = ssmi_cu_vec_rows(&a->pregate_y, SSM_DTYPE_F32, d->dv) && ssmi_cu_vec_rows(&a->dout, SSM_DTYPE_BF16, d->dv) &&
                   ssmi_cu_vec_rows(&a->z, SSM_DTYPE_BF16, d->dv) && ssmi_cu_vec_rows(&a->dz, SSM_DTYPE_BF16, d->dv);
    }
    P.dq = out_of(&a->dq), P.dk = out_of(&a->dk), P.dv = out_of(&a->dv);
    P.dadt = out_of(&a->dadt), P.ddt = out_of(&a->ddt), P.dtrap = out_of(&a->dtrap);
    P.dqb = out_of(&a->dq_bias), P.dkb = out_of(&a->dk_bias), P.dang = out_of(&a->dangles);
    P.dd = out_of(&a->dd), P.dz = out_of(&a->dz);
    P.dang_st = out_of(&a->dangle_state), P.dssm_st = out_of(&a->dssm_state);
    P.dk_st = out_of(&a->dk_state), P.dv_st = out_of(&a->dv_state);
    return P;
}

/* The kernels of the backward on the workspace ws (stream order). With pl->saved the chain's forward
 * walk is not run: P.st is chunk_states itself (pl->st_in_place) or its copy. */
ssm_status bwd_launch(ssm_context * ctx, const ssmi_mamba3_dims * d, const ssm_mamba3_siso_bwd_args * a,
                      const bwd_plan * pl, bw_args P, int chain, unsigned char * ws) {
    const bwd_ws       l = ws_layout(d, pl);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const long long    T = (long long)d->batch * d->seqlen;
    if (pl->W > 0)
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
            ctx, kOp, "cudaMemcpyAsync (chunk plan)",
            ssmi_cuda_memcpy_async(ws + l.chunks, pl->chunks, sizeof(bw_chunk) * pl->W, cudaMemcpyHostToDevice, s)));
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
        ctx, kOp, "cudaMemcpyAsync (sequence plan)",
        ssmi_cuda_memcpy_async(ws + l.segs, pl->segs, sizeof(bw_seg) * d->nseq, cudaMemcpyHostToDevice, s)));
    P.chunks = (const bw_chunk *)(ws + l.chunks);
    P.segs = (const bw_seg *)(ws + l.segs);
    P.sc = (float *)(ws + l.sc), P.th = (float *)(ws + l.th), P.thb = (float *)(ws + l.thb);
    P.st = pl->st_in_place ? (float *)a->chunk_states.data : (float *)(ws + l.st);
    P.dst = (float *)(ws + l.dst), P.cl = (float *)(ws + l.cl);
    P.dhin = (float *)(ws + l.dhin), P.dqt = (float *)(ws + l.dqt), P.dkt = (float *)(ws + l.dkt);
    P.dth = (float *)(ws + l.dth), P.dsg = (float *)(ws + l.dsg), P.dgm = (float *)(ws + l.dgm);
    P.qbp = (float *)(ws + l.qbp), P.kbp = (float *)(ws + l.kbp), P.ddp = (float *)(ws + l.ddp);
    P.thp = (float *)(ws + l.thp), P.dcw = (float *)(ws + l.dcw);
    P.slot = chain ? (float *)(ws + l.slot) : NULL;
    P.msegs = chain ? (ssmi_siso::m3_seg *)(ws + l.msegs) : NULL;
    P.dyh = pl->gate ? (void *)(ws + l.dyh) : NULL, P.dyl = pl->gate ? (void *)(ws + l.dyl) : NULL;
    P.dz_fused = pl->gate && P.ypre.p != nullptr && P.dz.present && P.dz_vec;
    /* Every token belongs to a sequence (cu_seqlens ends at S), so every (token, head) row of the
     * workspace is written before it is read. */
    if (P.H > 0 && P.NS > 0) {
        if (P.W > 0 || chain) SSM_FORWARD_IF_ERROR(launch_bwd_prep(ctx, kOp, P)); /* chain: the sequences too */
        if (chain) {
            if (pl->gate) SSM_FORWARD_IF_ERROR(launch_bwd_gate(ctx, kOp, P, T, P.v_bf16 ? M_BF16 : M_F16));
            if (pl->saved && !pl->st_in_place)
                SSM_FORWARD_IF_ERROR(ssmi_cuda_dense_copy(ctx, kOp, &a->chunk_states, P.st, 0, s));
            SSM_FORWARD_IF_ERROR(launch_bwd_state_chain(ctx, kOp, P, !pl->saved, chain));
        } else {
            if (P.W > 0) SSM_FORWARD_IF_ERROR(launch_bwd_chunk(ctx, kOp, P, false));
            SSM_FORWARD_IF_ERROR(launch_bwd_passes(ctx, kOp, P));
        }
        if (P.W > 0) SSM_FORWARD_IF_ERROR(launch_bwd_chunk(ctx, kOp, P, true));
        if (P.ypre.p != nullptr && P.dz.present && P.has_z && !P.dz_fused)
            SSM_FORWARD_IF_ERROR(launch_bwd_dz(ctx, kOp, P, T));
        SSM_FORWARD_IF_ERROR(launch_bwd_seq(ctx, kOp, P));
        if (P.W > 0) SSM_FORWARD_IF_ERROR(launch_bwd_tok(ctx, kOp, P));
    }
    if (P.H > 0) SSM_FORWARD_IF_ERROR(launch_bwd_sums(ctx, kOp, P, T, (int)d->nheads_qk));
    return SSM_STATUS_OK;
}

} /* namespace */

extern "C" ssm_status ssmi_cuda_mamba3_siso_bwd(ssm_context * ctx, const ssm_mamba3_params * p,
                                                const ssmi_mamba3_dims * d, const ssm_mamba3_siso_bwd_args * a) {
    /* the chunk size is not semantic; the backend picks its own (planes_chunk, chunk_length) and reads
     * chunk_states only where params->chunk_size is that chunk */
    SSM_RETURN_IF(d->dk > kMaxK, ctx, SSM_STATUS_UNSUPPORTED, "%s: K=%lld is larger than the CUDA backend's limit of %d",
                  kOp, (long long)d->dk, kMaxK);
    SSM_RETURN_IF(d->nheads > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: H=%lld is larger than the CUDA backend's limit of 65535", kOp, (long long)d->nheads);
    SSM_RETURN_IF(d->dv > INT32_MAX / 2 || d->dv * d->dk > INT32_MAX / 4 || d->nheads * d->dk > INT32_MAX / 2, ctx,
                  SSM_STATUS_UNSUPPORTED, "%s: V=%lld is too large for the CUDA backend", kOp, (long long)d->dv);
    SSM_FORWARD_IF_ERROR(check_pointers(ctx, a));
    ssmi_cuda_props dev;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_current_props(ctx, kOp, &dev));
    const bool is16[3] = {a->q.dtype == SSM_DTYPE_F16 || a->q.dtype == SSM_DTYPE_BF16,
                          a->k.dtype == SSM_DTYPE_F16 || a->k.dtype == SSM_DTYPE_BF16,
                          a->v.dtype == SSM_DTYPE_F16 || a->v.dtype == SSM_DTYPE_BF16};
    const bwd_problem pb = {is16[0] && is16[1] && is16[2],
                            planes_geom_of(planes_chunk((int)d->dk, (int)d->dv), (int)d->dk, (int)d->dv).total,
                            (size_t)dev.smem_optin,
                            (long long)d->nseq,
                            (long long)d->nheads,
                            (int)d->dk,
                            (int)d->dv,
                            dev.sms,
                            (int)d->nangles,
                            ssmi_present(&a->z),
                            rows16(a, d),
                            ssmi_present(&a->chunk_states) && p->chunk_size == ssmi_siso::kC};
    const bwd_variant * e = NULL;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_pick_variant(ctx, SSMI_OP_mamba3_siso_bwd, kBwdTable, pb, &e));
    SSM_RETURN_IF(e == NULL, ctx, SSM_STATUS_UNSUPPORTED, "%s: no CUDA kernel applies to this problem", kOp);
    /* the plane kernels: planes_chunk tokens (their rule checked the fit); else chunk_length */
    bool staged = false;
    const int C = e->planes ? planes_chunk((int)d->dk, (int)d->dv) : chunk_length((int)d->dk, (int)d->dv, &staged);
    const size_t smem = sizeof(float) * (size_t)chunk_smem_floats(C, (int)d->dk, (int)d->dv, true, staged);
    SSM_RETURN_IF(!e->planes && smem > (size_t)dev.smem_optin,
                  ctx, SSM_STATUS_UNSUPPORTED, "%s: K=%lld, V=%lld need more shared memory than the device has", kOp,
                  (long long)d->dk, (long long)d->dv);
    bwd_plan pl;
    SSM_FORWARD_IF_ERROR(plan_bwd(ctx, d, &a->cu_seqlens, C, &pl));
    pl.chain = e->chain;
    /* the forward's chunk_states are the chain's forward walk where their chunks are the entry's */
    pl.saved = e->chain != 0 && pb.saved; /* a chain entry's chunks are kC tokens (chain_applies) */
    pl.st_in_place = pl.saved && ssmi_cu_dense_f32(&a->chunk_states, 256);
    pl.gate = e->chain != 0 && pb.has_z; /* a chain entry's dout and z are v's dtype in 16-byte rows */
    grad_slices(&pl, d->nheads_qk, d->nheads_qk > 0 ? (int)(d->nheads / d->nheads_qk) : 0, e->planes);
    bw_args P = make_args(d, a, C, staged, e->planes, pl.W);
    P.qslice = pl.qslice, P.qparts = pl.qparts;
    const bwd_ws       l = ws_layout(d, &pl);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    void *             ws = NULL;
    const cudaError_t  me = ssmi_cuda_alloc_async(ctx, &ws, l.total, s);
    if (me != cudaSuccess) {
        (void)cudaGetLastError(); /* a failed allocation is not sticky: clear it for the next call */
        plan_free(&pl);
        if (me == cudaErrorMemoryAllocation)
            return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no device memory for the %zu-byte workspace", kOp,
                              l.total);
        return ssmi_cuda_status(ctx, kOp, "device allocation (workspace)", me);
    }
    ssm_status st = bwd_launch(ctx, d, a, &pl, P, e->chain, (unsigned char *)ws);
    const ssm_status fs = ssmi_cuda_status(ctx, kOp, "device release (workspace)", ssmi_cuda_free_async(ctx, ws, s));
    if (st == SSM_STATUS_OK) st = fs;
    plan_free(&pl);
    return st;
}

extern "C" int32_t ssmi_cuda_variants_mamba3_siso_bwd(int32_t i, ssmi_variant_info * out) {
    return ssmi_cuda_report_variants(kBwdTable, i, out);
}
