/*
 * mamba2.cu — host side of the CUDA Mamba-2 family: mamba2_chunk_state (spec §2.2, upstream and
 * CANN layouts through strides), the combined scan (spec §2.6, §2.8, DESIGN §3-§4) and the decode
 * step (spec §2.9). Here are each operator's selection table (the kernels live in the files named
 * by technique; scan.cuh and step.cuh describe them), the scan's work plan and workspace, and the
 * entry points.
 *
 * A selection table is an ordered array of entries {name, why, rule, applies, prefer, launch}.
 * The default runs the first entry that applies (and, where an entry has a `prefer` rule, whose
 * rule holds: a problem-size choice between entries that can all run). A context may force an
 * entry by name (ssm_context_set_variant); a forced entry that does not apply fails with
 * UNSUPPORTED and its rule. The entry that ran is recorded for ssm_context_last_variant.
 *
 * Limits: the scan and chunk_state N ≤ 256 and H ≤ 65535; the step N ≤ 4096 (UNSUPPORTED beyond).
 */
#include <stdlib.h>
#include <string.h>

#include "scan.cuh"
#include "step.cuh"
#include "../ssmi_cuda.h"

using namespace ssmi_m2;

namespace {

/* ---- selection tables ------------------------------------------------------------------------ */

template <class P> struct table_entry {
    const char * name; /* by what it does */
    const char * why;  /* one line: why the entry exists */
    const char * rule; /* when it can run (the message of a forced entry that cannot) */
    bool (*applies)(const P &);
    bool (*prefer)(const P &); /* the default takes the entry only where this holds too; NULL: always */
    ssm_status (*launch)(P &);
};

/* The entry to run: the one ctx forces for op (UNSUPPORTED where it does not apply), else the first
 * that applies and is preferred. */
template <class P, int N>
ssm_status choose(ssm_context * ctx, ssmi_op op, const table_entry<P> (&table)[N], const P & pr,
                  const table_entry<P> ** chosen) {
    const int32_t forced = ssmi_variant_forced(ctx, op);
    if (forced >= 0 && forced < N) {
        const table_entry<P> & e = table[forced];
        if (!e.applies(pr)) return ssmi_variant_not_applicable(ctx, op, e.name, e.rule);
        *chosen = &e;
        return SSM_STATUS_OK;
    }
    for (int i = 0; i < N; ++i)
        if (table[i].applies(pr) && (table[i].prefer == NULL || table[i].prefer(pr))) {
            *chosen = &table[i];
            return SSM_STATUS_OK;
        }
    return ssmi_error(ctx, SSM_STATUS_UNSUPPORTED, "%s: no CUDA kernel applies to this problem", ssmi_op_name(op));
}

/* Runs the chosen entry and records it. */
template <class P, int N>
ssm_status choose_and_launch(ssm_context * ctx, ssmi_op op, const table_entry<P> (&table)[N], P & pr) {
    const table_entry<P> * e = NULL;
    SSM_FORWARD_IF_ERROR(choose(ctx, op, table, pr, &e));
    SSM_FORWARD_IF_ERROR(e->launch(pr));
    ssmi_variant_ran(ctx, e->name);
    return SSM_STATUS_OK;
}

/* The registry's view of a table (ssmi_cuda_variants_<op>). */
template <class P, int N> int32_t report(const table_entry<P> (&table)[N], int32_t i, ssmi_variant_info * out) {
    if (out != NULL && i >= 0 && i < N) out->name = table[i].name, out->why = table[i].why;
    return N;
}

/* ---- the scan's work plan and workspace -------------------------------------------------------- */

int compute_mode(int32_t dtype) {
    return dtype == SSM_DTYPE_F16 ? M_F16 : dtype == SSM_DTYPE_BF16 ? M_BF16 : M_F32;
}

/* The host plan: work chunks and sequences. */
struct m2_plan {
    m2_chunk * chunks;
    m2_seg *   segs;
    long long  nchunks, nseg;
};

void plan_free(m2_plan * pl) {
    free(pl->chunks);
    free(pl->segs);
    memset(pl, 0, sizeof *pl);
}

int64_t idx_at(const ssm_tensor * t, int64_t i0, int64_t i1) {
    const int64_t off = t->ndim == 1 ? i0 * t->strides[0] : i0 * t->strides[0] + i1 * t->strides[1];
    return t->dtype == SSM_DTYPE_I64 ? ((const int64_t *)t->data)[off] : (int64_t)((const int32_t *)t->data)[off];
}

/* Appends a sequence of tokens [t0, t0 + len) of row b, cut into work chunks of at most Q tokens.
 * With chunk states (cq > 0; the sequence's first token has absolute position c0) a chunk also ends
 * after every token whose absolute position + 1 is a multiple of cq, and the state after it is
 * chunk_states row (*crow)++: the chunked algorithm is exact for any cut. */
void plan_add(m2_plan * pl, int64_t Q, int64_t b, int64_t t0, int64_t len, int init, int fin, int64_t c0 = 0,
              int64_t cq = 0, int64_t * crow = NULL) {
    m2_seg * sg = &pl->segs[pl->nseg++];
    sg->first = (int)pl->nchunks;
    sg->init = init;
    sg->fin = fin;
    for (int64_t pos = 0; pos < len;) {
        int64_t end = len - pos < Q ? len : pos + Q;
        int     row = -1;
        if (cq > 0) {
            const int64_t boundary = pos + (cq - (c0 + pos) % cq); /* first l > pos with (c0 + l) % cq == 0 */
            if (boundary <= end) {
                end = boundary;
                row = (int)(*crow)++;
            }
        }
        m2_chunk * c = &pl->chunks[pl->nchunks];
        memset(c, 0, sizeof *c);
        c->t0 = t0 + pos;
        c->b = (int)b;
        c->c = (int)pl->nchunks;
        c->len = (int)(end - pos);
        c->ilast = c->len - 1;
        c->j0 = 0;
        c->crow = row;
        ++pl->nchunks;
        pos = end;
    }
    sg->count = (int)(pl->nchunks - sg->first);
}

ssm_status plan_scan(ssm_context * ctx, const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a, m2_plan * pl) {
    static const char op[] = "mamba2_scan";
    const int64_t     Q = kScanQ, S = d->seqlen, B = d->batch;
    const int         has_init = ssmi_present(&a->initial_states);
    memset(pl, 0, sizeof *pl);
    /* Upper bounds: every sequence adds at most one partial chunk. */
    int64_t max_seg = d->nseq > 0 ? d->nseq : B;
    if (ssmi_present(&a->seq_idx)) max_seg = B * (S > 0 ? S : 1);
    /* and chunk_states adds at most one cut per row */
    const int64_t cq = ssmi_present(&a->chunk_states) ? d->chunk : 0;
    const int64_t max_chunks = B * ((S + Q - 1) / Q) + max_seg + (cq > 0 ? a->chunk_states.shape[0] : 0);
    SSM_RETURN_IF(max_chunks > INT32_MAX / 2 || max_seg > INT32_MAX / 2, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: %lld work chunks exceed the CUDA backend's int32 chunk index", op, (long long)max_chunks);
    pl->chunks = (m2_chunk *)malloc(sizeof(m2_chunk) * (size_t)(max_chunks > 0 ? max_chunks : 1));
    pl->segs = (m2_seg *)malloc(sizeof(m2_seg) * (size_t)(max_seg > 0 ? max_seg : 1));
    if (pl->chunks == NULL || pl->segs == NULL) {
        plan_free(pl);
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the chunk plan", op);
    }
    int64_t crow = 0; /* chunk_states rows so far (no seq_idx with chunk_states) */
    if (d->nseq > 0) {
        for (int64_t s = 0; s < d->nseq; ++s) {
            const int64_t st = idx_at(&a->cu_seqlens, s, 0), en = idx_at(&a->cu_seqlens, s + 1, 0);
            plan_add(pl, Q, 0, st, en - st, has_init ? (int)s : -1, (int)s,
                     ssmi_computed_tokens(&a->num_computed_tokens, s), cq, &crow);
        }
    } else if (ssmi_present(&a->seq_idx)) {
        for (int64_t b = 0; b < B; ++b) {
            if (S == 0) {
                plan_add(pl, Q, b, 0, 0, has_init ? (int)b : -1, (int)b);
                continue;
            }
            int64_t t = 0;
            while (t < S) {
                const int64_t id = idx_at(&a->seq_idx, b, t);
                int64_t       e = t + 1;
                while (e < S && idx_at(&a->seq_idx, b, e) == id) ++e;
                const int init = (t == 0 && id == 0 && has_init) ? (int)b : -1;
                plan_add(pl, Q, b, t, e - t, init, e == S ? (int)b : -1);
                t = e;
            }
        }
    } else {
        for (int64_t b = 0; b < B; ++b)
            plan_add(pl, Q, b, 0, S, has_init ? (int)b : -1, (int)b, ssmi_computed_tokens(&a->num_computed_tokens, b),
                     cq, &crow);
    }
    return SSM_STATUS_OK;
}

/* Workspace layout of the scan: chunks | segs | lastcum (W,H) | dt and cumsum (W,H,2,kScanQ; the
 * fp16/bf16 path) | states (W,H,P,N) | split entering states (W,H,2,P,N of T; 16-bit) | the chain's
 * weights (W,H,kChainW; 16-bit) | the non-finite marks (W,H ints, step 4). */
struct scan_ws {
    size_t chunks, segs, lastcum, dtc, states, split, cw, marks, total;
};
/* 1: the 16-bit scan keeps the 8-warp output kernels' split entering states (state_pass_split_kernel),
 * which needs 16-byte rows of N elements. */
int scan_splits_states(const ssm_mamba2_scan_args * a, const ssmi_mamba2_dims * d) {
    return compute_mode(a->x.dtype) != M_F32 && d->dstate % 8 == 0;
}
scan_ws scan_ws_layout(const ssmi_mamba2_dims * d, const m2_plan * pl, const ssm_mamba2_scan_args * a) {
    scan_ws l;
    size_t  o = 0;
    l.chunks = o; o += align128(sizeof(m2_chunk) * (size_t)pl->nchunks);
    l.segs = o; o += align128(sizeof(m2_seg) * (size_t)pl->nseg);
    l.lastcum = o; o += align128(sizeof(float) * (size_t)pl->nchunks * (size_t)d->nheads);
    l.dtc = o; o += align128(sizeof(float) * 2 * kScanQ * (size_t)pl->nchunks * (size_t)d->nheads);
    const size_t hpn = (size_t)d->nheads * (size_t)d->headdim * (size_t)d->dstate;
    l.states = o;
    o += align128(sizeof(float) * (size_t)pl->nchunks * hpn);
    l.split = o; /* two 16-bit planes: the bytes of the fp32 states again */
    if (scan_splits_states(a, d)) o += align128(sizeof(float) * (size_t)pl->nchunks * hpn);
    l.cw = o; /* the chain's weights (state_chain_kernel, which needs the split states) */
    if (scan_splits_states(a, d)) o += align128(sizeof(float) * kChainW * (size_t)pl->nchunks * (size_t)d->nheads);
    l.marks = o;
    o += align128(sizeof(int) * (size_t)pl->nchunks * (size_t)d->nheads);
    l.total = o;
    return l;
}

ssm_status check_limits(ssm_context * ctx, const char * op, const ssmi_mamba2_dims * d) {
    SSM_RETURN_IF(d->dstate > kMaxN, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: N=%lld is larger than the CUDA backend's limit of %d", op, (long long)d->dstate, kMaxN);
    SSM_RETURN_IF(d->nheads > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: H=%lld is larger than the CUDA backend's limit of 65535", op, (long long)d->nheads);
    SSM_RETURN_IF(d->headdim > INT32_MAX / 2 || d->headdim * d->dstate > INT32_MAX / 2, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: P·N=%lld is too large for the CUDA backend", op, (long long)(d->headdim * d->dstate));
    return SSM_STATUS_OK;
}

ssm_status check_pointers(ssm_context * ctx, const char * op, const ssm_tensor * const * ts, const char * const * names,
                          int n) {
    for (int i = 0; i < n; ++i) SSM_FORWARD_IF_ERROR(ssmi_cuda_check_pointer(ctx, op, names[i], ts[i]));
    return SSM_STATUS_OK;
}

m2_dt_raw dt_raw_of(const ssm_mamba2_params * p, const ssm_mamba2_scan_args * a) {
    m2_dt_raw r;
    memset(&r, 0, sizeof r);
    r.dt = ssmi_cu_view_of(&a->dt);
    r.a = ssmi_cu_view_of(&a->a);
    r.has_bias = ssmi_present(&a->dt_bias);
    if (r.has_bias) r.bias = ssmi_cu_view_of(&a->dt_bias);
    r.softplus = p->dt_softplus != 0;
    r.lo = (float)p->dt_limit_lo;
    r.hi = (float)p->dt_limit_hi;
    return r;
}


/* The 16-bit kernels' arguments the state kernels read: dimensions, tiles, x and B. */
m2_fast_args state_args_of(const ssmi_mamba2_dims * d, const ssm_tensor * x, const ssm_tensor * b) {
    m2_fast_args f;
    memset(&f, 0, sizeof f);
    f.H = (int)d->nheads, f.G = (int)d->ngroups, f.P = (int)d->headdim, f.N = (int)d->dstate;
    f.Np = round16(f.N);
    f.n_ptiles = (f.P + kFT - 1) / kFT;
    f.n_ntiles = (f.N + kFT - 1) / kFT;
    f.n_itiles = kScanQ / kFT;
    f.x = ssmi_cu_view_of(x);
    f.b = ssmi_cu_view_of(b);
    f.vx = ssmi_cu_vec_rows(x, x->dtype, d->headdim);
    f.vb = ssmi_cu_vec_rows(b, x->dtype, d->dstate);
    return f;
}

m2_fast_args fast_args_of(const ssm_mamba2_params * p, const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a,
                          const m2_chunk * dchunks, float * states, float * lastcum) {
    m2_fast_args  f = state_args_of(d, &a->x, &a->b);
    const int32_t T = a->x.dtype;
    f.chunks = dchunks;
    f.r = dt_raw_of(p, a);
    f.c = ssmi_cu_view_of(&a->c);
    f.vc = ssmi_cu_vec_rows(&a->c, T, d->dstate);
    f.has_d = ssmi_present(&a->d);
    if (f.has_d) {
        f.d = ssmi_cu_view_of(&a->d);
        f.d_2d = a->d.ndim == 2;
    }
    f.has_z = ssmi_present(&a->z);
    if (f.has_z) {
        f.z = ssmi_cu_view_of(&a->z);
        f.vz = a->z.dtype == T && ssmi_cu_vec_pairs(&a->z, d->headdim);
        f.vz16 = ssmi_cu_vec_rows(&a->z, T, d->headdim);
    }
    f.states = states;
    f.lastcum = lastcum;
    f.out = a->out.data;
    f.out_dtype = a->out.dtype;
    f.vout = (a->out.dtype == T || a->out.dtype == SSM_DTYPE_F32) && ssmi_cu_vec_pairs(&a->out, d->headdim);
    for (int i = 0; i < 4; ++i) f.os[i] = a->out.strides[i];
    return f;
}

ssm_status scan_pointers(ssm_context * ctx, const char * op, const ssm_mamba2_scan_args * a) {
    const ssm_tensor * ts[] = {&a->x, &a->dt, &a->a, &a->b, &a->c, &a->d, &a->z, &a->dt_bias,
                               &a->initial_states, &a->out, &a->final_states, &a->chunk_states};
    const char *       names[] = {"x",       "dt", "a",   "b",           "c",           "d",
                                  "z",       "dt_bias", "initial_states", "out", "final_states", "chunk_states"};
    return check_pointers(ctx, op, ts, names, 12);
}

/* ---- mamba2_scan: what the rules read ------------------------------------------------------------ */

struct scan_problem {
    ssm_context *                ctx;
    const ssm_mamba2_params *    p;
    const ssmi_mamba2_dims *     d;
    const ssm_mamba2_scan_args * a;
    const m2_plan *              pl;
    unsigned char *              ws; /* the workspace, set before the launch */
    int                          mode, Np;
    int                          splits; /* 16-bit x, N % 8 == 0: the 8-warp outputs read split entering states */
    m2_fast_args                 fa;     /* the 16-bit kernels' arguments (workspace pointers set at launch) */
    /* the rules, evaluated once per call */
    bool wide_fits;  /* the 128-row output tile's shared memory fits the device */
    bool wg_state;   /* the wgmma state kernel can run */
    bool wg_out;     /* the wgmma output kernel can run */
    bool chain_can;  /* the chains can run */
    int  chain_pays; /* 0, or the chain the grid favours: 1 (one warpgroup) or 2 (two) */
};

#if SSMI_CUDA_WGMMA
/* state_wgmma_kernel can run on device dp: an sm_90 device, x and B of x's type in contiguous
 * 16-byte rows, N = 64 or 128 (whole swizzle atoms, one block per P tile), its shared memory fits. */
bool wg_state_fits(const ssmi_cuda_props & dp, const m2_fast_args & A) {
    return dp.wgmma && A.vx && A.vb && (A.N == 64 || A.N == 128) && A.Np == A.N &&
           (size_t)wg_state_smem(A.N >> 6).total + kWgStateStatic <= (size_t)dp.smem_optin;
}

/* Where chains pay (k = chain blocks per SM): a chain is one block of indivisible serial work, and a
 * second chain on an SM costs about 1.56× one, so chains pay where the grid's last wave is nearly
 * full (k ≥ 1.5 and k / ⌈k⌉ ≥ kChainBalance), or where they are short (≤ kChainAutoChunks chunks) on
 * a grid of a block per SM or more; the two-warpgroup chain from kChain2PerSm chains per SM (the
 * smaller worst case of the two forms there). The rule picks the fastest form at the nine shapes
 * measured in docs/notes/cuda-mamba2-kernels.md. */
const int    kChainAutoChunks = 8;
const double kChainBalance = 0.85;
const double kChain2PerSm = 3.0;
#endif

ssm_status describe_scan(scan_problem & pr) {
    static const char            op[] = "mamba2_scan";
    const ssmi_mamba2_dims *     d = pr.d;
    const ssm_mamba2_scan_args * a = pr.a;
    pr.mode = compute_mode(a->x.dtype);
    pr.Np = round16((int)d->dstate);
    pr.splits = scan_splits_states(a, d);
    pr.wide_fits = pr.wg_state = pr.wg_out = pr.chain_can = false;
    pr.chain_pays = 0;
    memset(&pr.fa, 0, sizeof pr.fa);
    if (pr.mode == M_F32) return SSM_STATUS_OK;
    pr.fa = fast_args_of(pr.p, d, a, NULL, NULL, NULL);
    ssmi_cuda_props dp;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_current_props(pr.ctx, op, &dp));
    const size_t wide = pr.mode == M_F16 ? wide_out_smem<M_F16>(pr.Np).total : wide_out_smem<M_BF16>(pr.Np).total;
    pr.wide_fits = wide + kWideOutStatic <= (size_t)dp.smem_optin;
#if SSMI_CUDA_WGMMA
    const m2_fast_args & A = pr.fa;
    const int            katoms = A.N >> 6;
    pr.wg_state = wg_state_fits(dp, A);
    /* and C of x's type in contiguous rows, the split entering states, out in pairs, z (if any) in
     * 16-byte rows */
    pr.wg_out = pr.wg_state && A.vc && pr.splits && A.vout && (!A.has_z || A.vz16) &&
                (size_t)wg_out_smem(katoms).total + kWgOutStatic <= (size_t)dp.smem_optin;
    const m2_plan * pl = pr.pl;
    const long long nseg = pl->nseg, blocks = nseg * A.H * A.n_ptiles * katoms;
    /* a chain cuts sequences at kScanQ only: not with chunk_states */
    pr.chain_can = !ssmi_present(&a->chunk_states) && pr.wg_state && pr.splits && pr.wide_fits && nseg > 0 &&
                   A.H > 0 && A.P > 0 &&
                   (size_t)chain2_smem().total + kChainStatic <= (size_t)dp.smem_optin && blocks <= INT32_MAX &&
                   dp.sms > 0;
    if (pr.chain_can) {
        int longest = 0;
        for (long long i = 0; i < nseg; ++i) longest = pl->segs[i].count > longest ? pl->segs[i].count : longest;
        const double k = (double)blocks / dp.sms, waves = (double)((blocks + dp.sms - 1) / dp.sms);
        const bool   balanced = k >= 1.5 && k / waves >= kChainBalance;
        const bool   short_chains = longest <= kChainAutoChunks && blocks >= dp.sms;
        if (balanced || short_chains) pr.chain_pays = k >= kChain2PerSm ? 2 : 1;
    }
#endif
    return SSM_STATUS_OK;
}

/* ---- mamba2_scan: the pipelines ---------------------------------------------------------------- */

enum scan_state { STATE_FFMA, STATE_MMA, STATE_WGMMA, STATE_CHAIN, STATE_CHAIN2 };
enum scan_out { OUT_FFMA, OUT_MMA64, OUT_MMA, OUT_WGMMA_OR_MMA /* wgmma where its layouts hold */ };

/* Step 3: the outputs by the pipeline's output kernel (fa: the 16-bit kernels' arguments). */
ssm_status scan_outputs(scan_problem & pr, scan_out out, const m2_fast_args & fa, const m2_state_args & sa,
                        int * marks) {
    static const char            op[] = "mamba2_scan";
    ssm_context *                ctx = pr.ctx;
    const ssmi_mamba2_dims *     d = pr.d;
    const ssm_mamba2_scan_args * a = pr.a;
    const long long              W = pr.pl->nchunks;
    const int                    mode = pr.mode;
    if (out == OUT_MMA64) return launch_output_mma64(ctx, op, mode, fa, W);
    if (out == OUT_MMA) return launch_output_mma(ctx, op, mode, fa, W);
    if (out == OUT_WGMMA_OR_MMA) {
#if SSMI_CUDA_WGMMA
        if (pr.wg_out) return launch_output_wgmma(ctx, op, mode, fa, W);
#endif
        return launch_output_mma(ctx, op, mode, fa, W);
    }
    m2_out_args oa;
    memset(&oa, 0, sizeof oa);
    oa.chunks = sa.chunks;
    oa.H = sa.H, oa.G = sa.G, oa.P = sa.P, oa.N = sa.N, oa.Np = pr.Np, oa.Q = sa.Q;
    oa.n_ptiles = (int)((d->headdim + cfg<M_F32>::TILE - 1) / cfg<M_F32>::TILE);
    oa.r = sa.r;
    oa.x = sa.x;
    oa.b = sa.b;
    oa.c = ssmi_cu_view_of(&a->c);
    oa.has_d = ssmi_present(&a->d);
    if (oa.has_d) {
        oa.d = ssmi_cu_view_of(&a->d);
        oa.d_2d = a->d.ndim == 2;
    }
    oa.has_z = ssmi_present(&a->z);
    if (oa.has_z) oa.z = ssmi_cu_view_of(&a->z);
    oa.states = (const float *)sa.states;
    oa.nonfinite = marks;
    oa.out = a->out.data;
    oa.out_dtype = a->out.dtype;
    for (int i = 0; i < 4; ++i) oa.os[i] = a->out.strides[i];
    return launch_output_ffma(ctx, op, oa, W);
}

/* Step 4: the outputs of the (chunk, head) pairs step 3 marked, recomputed token by token. */
ssm_status scan_fix(scan_problem & pr, const m2_fast_args & fa, const m2_state_args & sa, const int * marks) {
    const ssm_mamba2_scan_args * a = pr.a;
    m2_fix_args                  fx;
    memset(&fx, 0, sizeof fx);
    fx.chunks = sa.chunks;
    fx.nonfinite = marks;
    fx.H = sa.H, fx.G = sa.G, fx.P = sa.P, fx.N = sa.N;
    fx.r = sa.r;
    fx.x = sa.x;
    fx.b = sa.b;
    fx.c = ssmi_cu_view_of(&a->c);
    fx.has_d = ssmi_present(&a->d);
    if (fx.has_d) {
        fx.d = ssmi_cu_view_of(&a->d);
        fx.d_2d = a->d.ndim == 2;
    }
    fx.has_z = ssmi_present(&a->z);
    if (fx.has_z) fx.z = ssmi_cu_view_of(&a->z);
    fx.states = (const float *)sa.states;
    fx.split = fa.split; /* the planes where the pass or the chain wrote them; else the fp32 states */
    fx.out = a->out.data;
    fx.out_dtype = a->out.dtype;
    for (int i = 0; i < 4; ++i) fx.os[i] = a->out.strides[i];
    return launch_nonfinite_fix(pr.ctx, "mamba2_scan", pr.mode, fx, pr.pl->nchunks);
}

/* Chunk states, the pass (or a chain in place of both), the outputs and their non-finite fix on the
 * workspace. */
ssm_status scan_run(scan_problem & pr, scan_state state, scan_out out) {
    static const char            op[] = "mamba2_scan";
    ssm_context *                ctx = pr.ctx;
    const ssmi_mamba2_dims *     d = pr.d;
    const ssm_mamba2_scan_args * a = pr.a;
    const m2_plan *              pl = pr.pl;
    unsigned char *              ws = pr.ws;
    const scan_ws                l = scan_ws_layout(d, pl, a);
    const cudaStream_t           s = ssmi_cuda_stream(ctx);
    m2_chunk *                   dchunks = (m2_chunk *)(ws + l.chunks);
    m2_seg *                     dsegs = (m2_seg *)(ws + l.segs);
    float *                      lastcum = (float *)(ws + l.lastcum);
    float *                      states = (float *)(ws + l.states);
    const long long              W = pl->nchunks;
    const int                    mode = pr.mode;
    /* Pageable sources: cudaMemcpyAsync returns once they are staged, so the plan may be freed. */
    if (pl->nchunks > 0)
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (chunk plan)",
                                              ssmi_cuda_memcpy_async(dchunks, pl->chunks, sizeof(m2_chunk) * pl->nchunks,
                                                              cudaMemcpyHostToDevice, s)));
    if (pl->nseg > 0)
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
            ctx, op, "cudaMemcpyAsync (sequence plan)",
            ssmi_cuda_memcpy_async(dsegs, pl->segs, sizeof(m2_seg) * pl->nseg, cudaMemcpyHostToDevice, s)));

    /* 1. chunk states */
    m2_state_args sa;
    memset(&sa, 0, sizeof sa);
    sa.chunks = dchunks;
    sa.H = (int)d->nheads, sa.G = (int)d->ngroups, sa.P = (int)d->headdim, sa.N = (int)d->dstate, sa.Np = pr.Np;
    sa.Q = kScanQ;
    sa.x = ssmi_cu_view_of(&a->x);
    sa.b = ssmi_cu_view_of(&a->b);
    sa.raw = 1;
    sa.r = dt_raw_of(pr.p, a);
    sa.states = states;
    sa.st_dtype = SSM_DTYPE_F32;
    sa.ss[0] = 0;
    sa.ss[1] = (long long)d->nheads * d->headdim * d->dstate;
    sa.ss[2] = (long long)d->headdim * d->dstate;
    sa.ss[3] = d->dstate;
    sa.ss[4] = 1;
    sa.lastcum = lastcum;
    m2_fast_args fa;
    memset(&fa, 0, sizeof fa);
    if (mode != M_F32) {
        fa = pr.fa;
        fa.chunks = dchunks;
        fa.states = states;
        fa.lastcum = lastcum;
        fa.dtc = (float *)(ws + l.dtc);
        if (pr.splits) fa.cw = (float *)(ws + l.cw);
        if (out != OUT_MMA64 && pr.splits) fa.split = ws + l.split;
    }
    if (state == STATE_FFMA) SSM_FORWARD_IF_ERROR(launch_chunk_state(ctx, op, mode, sa, W));
    if (state == STATE_MMA) SSM_FORWARD_IF_ERROR(launch_state_mma(ctx, op, mode, fa, W));
#if SSMI_CUDA_WGMMA
    if (state == STATE_WGMMA) SSM_FORWARD_IF_ERROR(launch_state_wgmma(ctx, op, mode, fa, W));
#endif

    /* 2. the state pass (the chains: states and pass) */
    m2_pass_args pa;
    memset(&pa, 0, sizeof pa);
    pa.segs = dsegs;
    pa.lastcum = lastcum;
    pa.states = states;
    pa.H = (int)d->nheads, pa.P = (int)d->headdim, pa.N = (int)d->dstate;
    pa.has_init = ssmi_present(&a->initial_states);
    if (pa.has_init) pa.init = ssmi_cu_view_of(&a->initial_states);
    pa.has_fin = ssmi_present(&a->final_states);
    if (pa.has_fin) {
        pa.fin = a->final_states.data;
        pa.fin_dtype = a->final_states.dtype;
        for (int i = 0; i < 4; ++i) pa.fs[i] = a->final_states.strides[i];
    }
    pa.chunks = dchunks;
    if (ssmi_present(&a->chunk_states)) {
        pa.cst = a->chunk_states.data;
        pa.cst_dtype = a->chunk_states.dtype;
        for (int i = 0; i < 4; ++i) pa.cs[i] = a->chunk_states.strides[i];
    }
    const long long hpn = (long long)d->nheads * d->headdim * d->dstate;
    if (pl->nseg > 0 && hpn > 0) {
        SSM_RETURN_IF(pl->nseg > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                      "%s: %lld sequences exceed the CUDA backend's limit of 65535", op, pl->nseg);
        pa.split = (void *)fa.split;
#if SSMI_CUDA_WGMMA
        if (state == STATE_CHAIN || state == STATE_CHAIN2)
            SSM_FORWARD_IF_ERROR(launch_state_chain(ctx, op, mode, fa, pa, W, pl->nseg, state == STATE_CHAIN2));
        else
#endif
            SSM_FORWARD_IF_ERROR(launch_state_pass(ctx, op, mode, pa, pl->nseg));
    }

    /* 3. outputs, marking the (chunk, head) pairs that hold a non-finite value; 4. their fix */
    int * marks = (int *)(ws + l.marks);
    if (W > 0 && d->nheads > 0)
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaMemsetAsync (non-finite marks)",
                                              cudaMemsetAsync(marks, 0, sizeof(int) * (size_t)W * (size_t)d->nheads, s)));
    fa.nonfinite = marks;
    SSM_FORWARD_IF_ERROR(scan_outputs(pr, out, fa, sa, marks));
    return scan_fix(pr, fa, sa, marks);
}

/* ---- mamba2_scan: the table -------------------------------------------------------------------- */

bool scan_16bit(const scan_problem & pr) { return pr.mode != M_F32; }
bool scan_fp32(const scan_problem & pr) { return pr.mode == M_F32; }
bool scan_wide(const scan_problem & pr) { return pr.mode != M_F32 && pr.wide_fits; }
bool scan_wgmma(const scan_problem & pr) { return pr.mode != M_F32 && pr.wide_fits && pr.wg_state; }
bool scan_chain(const scan_problem & pr) { return pr.mode != M_F32 && pr.chain_can; }
bool scan_chain_pays(const scan_problem & pr) { return pr.chain_pays == 1; }
bool scan_chain2_pays(const scan_problem & pr) { return pr.chain_pays == 2; }

ssm_status run_chain2(scan_problem & pr) { return scan_run(pr, STATE_CHAIN2, OUT_WGMMA_OR_MMA); }
ssm_status run_chain(scan_problem & pr) { return scan_run(pr, STATE_CHAIN, OUT_WGMMA_OR_MMA); }
ssm_status run_wgmma(scan_problem & pr) { return scan_run(pr, STATE_WGMMA, OUT_WGMMA_OR_MMA); }
ssm_status run_mma(scan_problem & pr) { return scan_run(pr, STATE_MMA, OUT_MMA); }
ssm_status run_mma64(scan_problem & pr) { return scan_run(pr, STATE_MMA, OUT_MMA64); }
ssm_status run_ffma(scan_problem & pr) { return scan_run(pr, STATE_FFMA, OUT_FFMA); }

#define SCAN_WGMMA_RULE                                                                                           \
    "fp16/bf16 x; a build with sm_90a code on an sm_90 device, not a portable context; x and B of x's dtype " \
    "in contiguous 16-byte rows; N = 64 or 128"
#define SCAN_CHAIN_RULE SCAN_WGMMA_RULE "; no chunk_states (a chain cuts a sequence every 256 tokens only)"
const table_entry<scan_problem> scan_table[] = {
    {"chain2",
     "chained state with two warpgroups per chain (no state pass), outputs by wgmma where C, out and z allow, else "
     "mma.sync: the default where chains pay and there are at least 3 per SM",
     SCAN_CHAIN_RULE, scan_chain, scan_chain2_pays, run_chain2},
    {"chain",
     "chained state with one warpgroup per chain (no state pass), outputs as chain2: the default where the grid's "
     "last wave of chains is nearly full, or the chains are short on a full grid, and fewer than 3 per SM",
     SCAN_CHAIN_RULE, scan_chain, scan_chain_pays, run_chain},
    {"wgmma",
     "chunk states by wgmma, the split state pass, outputs by wgmma where C, out and z allow, else mma.sync: the "
     "default of sm_90 devices where no chain pays",
     SCAN_WGMMA_RULE, scan_wgmma, NULL, run_wgmma},
    {"mma",
     "chunk states, state pass and 128-row outputs by mma.sync: fp16/bf16 scans without wgmma (other GPUs, builds "
     "without sm_90a code, N other than 64 and 128, other layouts)",
     "fp16/bf16 x; the 128-row output tile's shared memory fits the device", scan_wide, NULL, run_mma},
    {"mma_64row",
     "chunk states and state pass by mma.sync, outputs on 64-row tiles: devices whose per-block shared memory "
     "does not hold the 128-row output tile",
     "fp16/bf16 x", scan_16bit, NULL, run_mma64},
    {"ffma", "fp32 FFMA block GEMMs: fp32 and f64 x, where 16-bit tensor-core products (or TF32) miss the fp32 bar",
     "fp32 or f64 x", scan_fp32, NULL, run_ffma},
};
#undef SCAN_CHAIN_RULE
#undef SCAN_WGMMA_RULE

/* ---- mamba2_chunk_state ------------------------------------------------------------------------ */

struct chunk_state_problem {
    ssm_context *                       ctx;
    const ssmi_mamba2_dims *            d;
    const ssm_mamba2_chunk_state_args * a;
    int                                 mode;
    /* the rules, evaluated once per call (describe_chunk_state) */
    bool         short_chunks; /* chunk_size ≤ kScanQ: a caller's chunk is one work chunk of the scan's state kernels */
    bool         wg;           /* ... and state_wgmma_kernel can run */
    m2_fast_args fa;           /* the scan's state kernels' arguments as the operator (the plan set at launch) */
};

/* The kernels of the table's entries. */
enum chunk_state_kernel { CS_BLOCK_GEMM, CS_MMA, CS_WGMMA };

ssm_status describe_chunk_state(chunk_state_problem & pr) {
    const ssmi_mamba2_dims *            d = pr.d;
    const ssm_mamba2_chunk_state_args * a = pr.a;
    pr.short_chunks = pr.wg = false;
    memset(&pr.fa, 0, sizeof pr.fa);
    if (pr.mode == M_F32 || d->chunk > kScanQ) return SSM_STATUS_OK;
    pr.short_chunks = true;
    m2_fast_args & f = pr.fa;
    f = state_args_of(d, &a->x, &a->b);
    f.plan_q = (int)d->chunk;
    f.plan_nc = (int)d->nchunks;
    f.plan_s = d->seqlen;
    f.given_dt = 1;
    f.dt_in = ssmi_cu_view_of(&a->dt);
    f.cum_in = ssmi_cu_view_of(&a->da_cumsum);
    f.st_out = a->states.data;
    f.st_dtype = a->states.dtype;
    for (int i = 0; i < 5; ++i) f.ss[i] = a->states.strides[i];
#if SSMI_CUDA_WGMMA
    ssmi_cuda_props dp;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_current_props(pr.ctx, "mamba2_chunk_state", &dp));
    pr.wg = wg_state_fits(dp, f);
#endif
    return SSM_STATUS_OK;
}

/* The work plan (one work chunk per caller chunk: spec §2.2's cum_last at position Q − 1, and with
 * seq_idx the first position j0 of the last token's sequence) and the chosen kernel. The scan's
 * state kernels without seq_idx derive their chunks from the block index: no plan is sent. */
ssm_status chunk_state_run(chunk_state_problem & pr, chunk_state_kernel kernel) {
    static const char                   op[] = "mamba2_chunk_state";
    ssm_context *                       ctx = pr.ctx;
    const ssmi_mamba2_dims *            d = pr.d;
    const ssm_mamba2_chunk_state_args * a = pr.a;
    const long long                     W = (long long)d->batch * d->nchunks;
    if (W == 0 || d->nheads == 0 || d->headdim == 0 || d->dstate == 0) return SSM_STATUS_OK;
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    void *             dchunks = NULL;
    ssm_status         st = SSM_STATUS_OK;
    if (kernel == CS_BLOCK_GEMM || ssmi_present(&a->seq_idx)) {
        m2_chunk * chunks = (m2_chunk *)malloc(sizeof(m2_chunk) * (size_t)W);
        SSM_RETURN_IF(chunks == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the chunk plan", op);
        const int64_t Q = d->chunk;
        for (long long w = 0; w < W; ++w) {
            m2_chunk *    c = &chunks[w];
            const int64_t b = w / d->nchunks, ci = w % d->nchunks;
            memset(c, 0, sizeof *c);
            c->b = (int)b;
            c->c = (int)ci;
            c->t0 = ci * Q;
            c->len = (int)(d->seqlen - ci * Q < Q ? d->seqlen - ci * Q : Q);
            c->ilast = (int)(Q - 1); /* spec §2.2: the chunk's total is dA_cumsum[..., Q−1] */
            c->crow = -1;
            /* M_state: ids are non-decreasing, so the positions with the last token's id are a suffix. */
            c->j0 = 0;
            if (ssmi_present(&a->seq_idx) && c->len > 0) {
                const int64_t last = idx_at(&a->seq_idx, b, c->t0 + c->len - 1);
                int           j = c->len - 1;
                while (j > 0 && idx_at(&a->seq_idx, b, c->t0 + j - 1) == last) --j;
                c->j0 = j;
            }
        }
        st = ssmi_cuda_status(ctx, op, "device allocation (chunk plan)",
                              ssmi_cuda_alloc_async(ctx, &dchunks, sizeof(m2_chunk) * (size_t)W, s));
        if (st == SSM_STATUS_OK)
            st = ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (chunk plan)",
                                  ssmi_cuda_memcpy_async(dchunks, chunks, sizeof(m2_chunk) * (size_t)W,
                                                         cudaMemcpyHostToDevice, s));
        free(chunks);
    }
    if (st == SSM_STATUS_OK && kernel == CS_BLOCK_GEMM) {
        m2_state_args sa;
        memset(&sa, 0, sizeof sa);
        sa.chunks = (const m2_chunk *)dchunks;
        sa.H = (int)d->nheads, sa.G = (int)d->ngroups, sa.P = (int)d->headdim, sa.N = (int)d->dstate;
        sa.Np = round16((int)d->dstate);
        sa.Q = (int)d->chunk;
        sa.x = ssmi_cu_view_of(&a->x);
        sa.b = ssmi_cu_view_of(&a->b);
        sa.raw = 0;
        sa.dt = ssmi_cu_view_of(&a->dt);
        sa.cum = ssmi_cu_view_of(&a->da_cumsum);
        sa.states = a->states.data;
        sa.st_dtype = a->states.dtype;
        for (int i = 0; i < 5; ++i) sa.ss[i] = a->states.strides[i];
        st = launch_chunk_state(ctx, op, pr.mode, sa, W);
    } else if (st == SSM_STATUS_OK) {
        m2_fast_args fa = pr.fa;
        fa.chunks = (const m2_chunk *)dchunks;
#if SSMI_CUDA_WGMMA
        if (kernel == CS_WGMMA)
            st = launch_state_wgmma(ctx, op, pr.mode, fa, W);
        else
#endif
            st = launch_state_mma(ctx, op, pr.mode, fa, W);
    }
    if (dchunks != NULL) {
        const ssm_status fs = ssmi_cuda_status(ctx, op, "device release (chunk plan)", ssmi_cuda_free_async(ctx, dchunks, s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    return st;
}

bool chunk_state_16bit(const chunk_state_problem & pr) { return pr.mode != M_F32; }
bool chunk_state_fp32(const chunk_state_problem & pr) { return pr.mode == M_F32; }
bool chunk_state_short(const chunk_state_problem & pr) { return pr.short_chunks; }
bool chunk_state_wg(const chunk_state_problem & pr) { return pr.wg; }

ssm_status run_cs_wgmma(chunk_state_problem & pr) { return chunk_state_run(pr, CS_WGMMA); }
ssm_status run_cs_mma(chunk_state_problem & pr) { return chunk_state_run(pr, CS_MMA); }
ssm_status run_cs_block_gemm(chunk_state_problem & pr) { return chunk_state_run(pr, CS_BLOCK_GEMM); }

const table_entry<chunk_state_problem> chunk_state_table[] = {
    {"wgmma",
     "the scan's wgmma state kernel (w∘x split into rounded part and remainder, B exact, fp32 accumulators in "
     "registers) on the caller's dt, cumsum and states: the default of sm_90 devices",
     "fp16/bf16 x; chunk_size ≤ 256; a build with sm_90a code on an sm_90 device, not a portable context; x and B of x's dtype in "
     "contiguous 16-byte rows; N = 64 or 128",
     chunk_state_wg, NULL, run_cs_wgmma},
    {"mma",
     "the scan's mma.sync state kernel (w∘x split, or B∘w split for a B of another dtype) on the caller's dt, "
     "cumsum and states: other GPUs, layouts and N",
     "fp16/bf16 x; chunk_size ≤ 256", chunk_state_short, NULL, run_cs_mma},
    {"wmma",
     "fp16/bf16 x with chunks longer than the scan's 256-token work chunk: WMMA 16x16x16 block GEMMs (fp32 "
     "accumulators, B∘w split into rounded part and remainder)",
     "fp16/bf16 x", chunk_state_16bit, NULL, run_cs_block_gemm},
    {"ffma", "fp32 and f64 x: fp32 FFMA products (no TF32: the fp32 bar)", "fp32 or f64 x", chunk_state_fp32, NULL,
     run_cs_block_gemm},
};

/* ---- mamba2_step --------------------------------------------------------------------------------- */

using ssmi_m2step::step_args;
using ssmi_m2step::kInlineSlots;

const int kStepMaxN = 4096; /* b and c (fp32) of one group fit in 32 KiB of shared memory */

/* 16-byte vectors fit: unit stride over n, N a multiple of the vector, every row start
 * (data + slot·s0 + h·s1 + p·s2 elements) 16-byte aligned. */
int vec_ok(const ssm_tensor * t, int64_t N) {
    const int64_t vec = 16 / (int64_t)ssm_dtype_size((ssm_dtype)t->dtype);
    if (t->dtype != SSM_DTYPE_F32 && t->dtype != SSM_DTYPE_F16 && t->dtype != SSM_DTYPE_BF16) return 0;
    if (N % vec != 0 || t->strides[3] != 1 || ((uintptr_t)t->data % 16) != 0) return 0;
    for (int i = 0; i < 3; ++i)
        if (t->strides[i] % vec != 0) return 0;
    return 1;
}

int const_dim(const ssm_tensor * t, int i) { return t->strides[i] == 0 || t->shape[i] <= 1; }

ssm_status step_pointers(ssm_context * ctx, const char * op, const ssm_mamba2_step_args * a) {
    const ssm_tensor * ts[] = {&a->x, &a->dt,      &a->a,     &a->b,   &a->c,           &a->d,
                               &a->z, &a->dt_bias, &a->state, &a->out, &a->final_state, &a->intermediate_states};
    const char *       names[] = {"x", "dt",      "a",     "b",   "c",           "d",
                                  "z", "dt_bias", "state", "out", "final_state", "intermediate_states"};
    for (int i = 0; i < 12; ++i) SSM_FORWARD_IF_ERROR(ssmi_cuda_check_pointer(ctx, op, names[i], ts[i]));
    return SSM_STATUS_OK;
}

ssmi_step_slots step_slots_of(const ssm_mamba2_step_args * a) {
    const ssmi_step_slots s = {&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                               &a->num_accepted_tokens};
    return s;
}

void fill_args(const ssm_mamba2_params * p, const ssmi_mamba2_dims * d, const ssm_mamba2_step_args * a, step_args & A) {
    A.B = (int)d->batch, A.H = (int)d->nheads, A.P = (int)d->headdim, A.N = (int)d->dstate;
    A.R = (int)(d->nheads / d->ngroups);
    A.x = ssmi_cu_view_of(&a->x);
    A.dt = ssmi_cu_view_of(&a->dt);
    A.a = ssmi_cu_view_of(&a->a);
    A.bm = ssmi_cu_view_of(&a->b);
    A.cm = ssmi_cu_view_of(&a->c);
    A.has_d = ssmi_present(&a->d);
    if (A.has_d) A.d = ssmi_cu_view_of(&a->d);
    A.has_z = ssmi_present(&a->z);
    if (A.has_z) A.z = ssmi_cu_view_of(&a->z);
    A.has_bias = ssmi_present(&a->dt_bias);
    if (A.has_bias) A.bias = ssmi_cu_view_of(&a->dt_bias);
    A.softplus = p->dt_softplus != 0;
    A.lo = (float)p->dt_limit_lo;
    A.hi = (float)p->dt_limit_hi;
    A.a_const_n = const_dim(&a->a, 2);
    A.state = a->state.data;
    A.st_dtype = a->state.dtype;
    for (int i = 0; i < 4; ++i) A.ss[i] = a->state.strides[i];
    A.has_fin = ssmi_present(&a->final_state);
    if (A.has_fin) {
        A.fin = a->final_state.data;
        A.fin_dtype = a->final_state.dtype;
        for (int i = 0; i < 4; ++i) A.fs[i] = a->final_state.strides[i];
    }
    A.out = a->out.data;
    A.out_dtype = a->out.dtype;
    for (int i = 0; i < 3; ++i) A.os[i] = a->out.strides[i];
    const ssmi_step_slots    slots = step_slots_of(a);
    const ssm_tensor * const inter[1] = {&a->intermediate_states};
    A.general = ssmi_step_general(&slots, inter, 1);
    A.has_inter = ssmi_present(&a->intermediate_states);
    if (A.has_inter) {
        A.inter = a->intermediate_states.data;
        A.inter_dtype = a->intermediate_states.dtype;
        for (int i = 0; i < 4; ++i) A.is[i] = a->intermediate_states.strides[i];
    }
}

int64_t index_at(const ssm_tensor * t, int64_t b) {
    const int64_t off = b * t->strides[0];
    return t->dtype == SSM_DTYPE_I64 ? ((const int64_t *)t->data)[off] : (int64_t)((const int32_t *)t->data)[off];
}

struct step_problem {
    ssm_context *                ctx;
    const ssm_mamba2_step_args * a;
    step_args *                  A;
    int                          vec; /* a vector pool: state (and final_state, same dtype) in 16-byte vectors */
};

/* The registers and streaming kernels take the single-token form only (step.cuh). */
bool step_registers(const step_problem & pr) {
    return pr.vec && !pr.A->general && ssmi_m2step::step_registers_applies(*pr.A);
}
bool step_streaming(const step_problem & pr) {
    return pr.vec && !pr.A->general && ssmi_m2step::step_streaming_applies(*pr.A);
}
bool step_vector(const step_problem & pr) { return pr.vec != 0; }
bool step_any(const step_problem & pr) { return (void)pr, true; }

ssm_status run_step_registers(step_problem & pr) {
    return ssmi_m2step::launch_step_registers(pr.ctx, "mamba2_step", pr.a, *pr.A);
}
ssm_status run_step_streaming(step_problem & pr) {
    return ssmi_m2step::launch_step_streaming(pr.ctx, "mamba2_step", *pr.A);
}
ssm_status run_step_vector(step_problem & pr) { return ssmi_m2step::launch_step_rows(pr.ctx, "mamba2_step", *pr.A, 1); }
ssm_status run_step_generic(step_problem & pr) { return ssmi_m2step::launch_step_rows(pr.ctx, "mamba2_step", *pr.A, 0); }

#define STEP_VECTOR_POOL \
    "state (and final_state, of the same dtype) f32, f16 or bf16 in contiguous 16-byte aligned rows, N a multiple of 16 bytes"
#define STEP_ONE_TOKEN                                                                                         \
    "; one token per row read and written at one slot (no dst_state_batch_indices, cu_seqlens, slot table or " \
    "intermediate_states)"
const table_entry<step_problem> step_table[] = {
    {"registers",
     "every load of a warp issued at once, b/c and row scalars in registers, no shared memory or barrier: the fastest "
     "where a is constant over n and a row is at most 64 vectors",
     STEP_VECTOR_POOL "; a constant over n; N / vector a power of two ≤ 64, wide enough for the plan's rows per lane "
                      "group" STEP_ONE_TOKEN,
     step_registers, NULL, run_step_registers},
    {"streaming",
     "all of a thread's state loads in flight before use, b/c and row scalars staged in shared memory: a that varies "
     "over n, rows of up to 256 vectors",
     STEP_VECTOR_POOL "; N / vector a power of two ≤ 256" STEP_ONE_TOKEN, step_streaming, NULL, run_step_streaming},
    {"vector",
     "16-byte state loads and stores, up to 4 rows in flight per thread: any N a multiple of the vector; with several "
     "tokens per row, write slots, slot tables or intermediate_states a row per lane group, its state in shared "
     "memory between tokens",
     STEP_VECTOR_POOL, step_vector, NULL, run_step_vector},
    {"generic",
     "one state element per lane through the strides: any pool (strided, f64, misaligned, a final pool of another "
     "dtype), every form of the step",
     "any pool", step_any, NULL, run_step_generic},
};
#undef STEP_VECTOR_POOL
#undef STEP_ONE_TOKEN

} /* namespace */

/* ---- entry points ------------------------------------------------------------------------------ */

extern "C" ssm_status ssmi_cuda_mamba2_scan_workspace_size(ssm_context * ctx, const ssm_mamba2_params * p,
                                                           const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a,
                                                           size_t * bytes) {
    (void)p;
    m2_plan pl;
    SSM_FORWARD_IF_ERROR(check_limits(ctx, "mamba2_scan", d));
    SSM_FORWARD_IF_ERROR(plan_scan(ctx, d, a, &pl));
    *bytes = scan_ws_layout(d, &pl, a).total;
    plan_free(&pl);
    return SSM_STATUS_OK;
}

extern "C" ssm_status ssmi_cuda_mamba2_scan(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                            const ssm_mamba2_scan_args * a, void * workspace) {
    static const char op[] = "mamba2_scan";
    SSM_FORWARD_IF_ERROR(check_limits(ctx, op, d));
    SSM_FORWARD_IF_ERROR(scan_pointers(ctx, op, a));
    m2_plan pl;
    SSM_FORWARD_IF_ERROR(plan_scan(ctx, d, a, &pl));
    scan_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.ctx = ctx, pr.p = p, pr.d = d, pr.a = a, pr.pl = &pl;
    const table_entry<scan_problem> * e = NULL;
    ssm_status                        st = describe_scan(pr);
    if (st == SSM_STATUS_OK) st = choose(ctx, SSMI_OP_mamba2_scan, scan_table, pr, &e);
    if (st != SSM_STATUS_OK) {
        plan_free(&pl);
        return st;
    }
    const scan_ws      l = scan_ws_layout(d, &pl, a);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    unsigned char *    ws = (unsigned char *)workspace;
    int                owned = 0;
    if (ws == NULL && l.total > 0) {
        void * mem = NULL;
        st = ssmi_cuda_status(ctx, op, "device allocation (workspace)", ssmi_cuda_alloc_async(ctx, &mem, l.total, s));
        ws = (unsigned char *)mem;
        owned = st == SSM_STATUS_OK;
    }
    if (st == SSM_STATUS_OK) {
        pr.ws = ws;
        st = e->launch(pr);
    }
    plan_free(&pl);
    if (owned) {
        const ssm_status fs = ssmi_cuda_status(ctx, op, "device release (workspace)", ssmi_cuda_free_async(ctx, ws, s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    if (st == SSM_STATUS_OK) ssmi_variant_ran(ctx, e->name);
    return st;
}

extern "C" ssm_status ssmi_cuda_mamba2_chunk_state(ssm_context * ctx, const ssm_mamba2_params * p,
                                                   const ssmi_mamba2_dims * d, const ssm_mamba2_chunk_state_args * a) {
    static const char op[] = "mamba2_chunk_state";
    (void)p;
    SSM_FORWARD_IF_ERROR(check_limits(ctx, op, d));
    {
        const ssm_tensor * ts[] = {&a->b, &a->x, &a->dt, &a->da_cumsum, &a->states};
        const char *       names[] = {"b", "x", "dt", "da_cumsum", "states"};
        SSM_FORWARD_IF_ERROR(check_pointers(ctx, op, ts, names, 5));
    }
    const long long W = (long long)d->batch * d->nchunks;
    SSM_RETURN_IF(W > INT32_MAX / 2, ctx, SSM_STATUS_UNSUPPORTED, "%s: batch·NC=%lld is too large for the CUDA backend",
                  op, W);
    chunk_state_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.ctx = ctx, pr.d = d, pr.a = a, pr.mode = compute_mode(a->x.dtype);
    SSM_FORWARD_IF_ERROR(describe_chunk_state(pr));
    return choose_and_launch(ctx, SSMI_OP_mamba2_chunk_state, chunk_state_table, pr);
}

extern "C" ssm_status ssmi_cuda_mamba2_step(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                            const ssm_mamba2_step_args * a) {
    static const char op[] = "mamba2_step";
    SSM_RETURN_IF(d->dstate > kStepMaxN, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: N=%lld is larger than the CUDA backend's limit of %d", op, (long long)d->dstate, kStepMaxN);
    SSM_RETURN_IF(d->batch > INT32_MAX || d->nheads > INT32_MAX || d->headdim > INT32_MAX || d->slots > INT32_MAX, ctx,
                  SSM_STATUS_UNSUPPORTED, "%s: B=%lld, H=%lld, P=%lld or slots=%lld exceeds the CUDA backend's int32 "
                  "indices", op, (long long)d->batch, (long long)d->nheads, (long long)d->headdim, (long long)d->slots);
    SSM_FORWARD_IF_ERROR(step_pointers(ctx, op, a));
    if (d->batch == 0 || d->nheads == 0 || d->headdim == 0) return SSM_STATUS_OK;

    step_args * A = (step_args *)calloc(1, sizeof(step_args));
    SSM_RETURN_IF(A == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the kernel arguments", op);
    fill_args(p, d, a, *A);
    const int has_fin = ssmi_present(&a->final_state);
    step_problem pr = {ctx, a, A,
                       vec_ok(&a->state, A->N) &&
                           (!has_fin || (a->final_state.dtype == a->state.dtype && vec_ok(&a->final_state, A->N)))};
    const table_entry<step_problem> * e = NULL;
    ssm_status                        st = choose(ctx, SSMI_OP_mamba2_step, step_table, pr, &e);
    if (st != SSM_STATUS_OK) {
        free(A);
        return st;
    }
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const ssm_tensor * idx = &a->state_batch_indices;
    void *             dslots = NULL;
    if (A->general) {
        /* the rows' plan (common/step_plan.cuh); its buffer is released below like a slot list */
        const ssmi_step_slots slots = step_slots_of(a);
        int                   max_tokens = 0;
        st = ssmi_cuda_step_plan(ctx, op, &slots, d->batch, d->seqlen, d->slots, s, &A->plan, &dslots, &max_tokens);
    } else if (ssmi_cuda_on_device(idx)) {
        /* Device indices are read on the device: no host copy (capturable in a CUDA graph);
         * an index outside [0, slots) makes its row padding. */
        st = ssmi_cuda_check_pointer(ctx, op, "state_batch_indices", idx);
        if (st == SSM_STATUS_OK)
            st = ssmi_cuda_status(ctx, op, "device allocation (slot indices)",
                                  ssmi_cuda_alloc_async(ctx, &dslots, sizeof(int) * (size_t)d->batch, s));
        if (st == SSM_STATUS_OK)
            st = ssmi_cuda_status(ctx, op, "device_slots_kernel launch",
                                  ssmi_cuda_device_slots(idx, d->batch, d->slots, (int *)dslots, s));
        A->idx_mode = 2;
        A->idx_dev = (const int *)dslots;
    } else if (ssmi_present(idx) && d->batch <= kInlineSlots) {
        A->idx_mode = 1;
        for (int64_t b = 0; b < d->batch; ++b) {
            const int64_t v = index_at(idx, b);
            A->idx_inline[b] = v < 0 ? -1 : (int)v; /* any negative int64 is a padding row */
        }
    } else if (ssmi_present(idx)) {
        /* Values were validated (< slots ≤ INT32_MAX, or negative for padding): int32 holds them. */
        const size_t bytes = sizeof(int) * (size_t)d->batch;
        int *        host = (int *)malloc(bytes);
        if (host == NULL) {
            free(A);
            return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for %lld slot indices", op,
                              (long long)d->batch);
        }
        for (int64_t b = 0; b < d->batch; ++b) {
            const int64_t v = index_at(idx, b);
            host[b] = v < 0 ? -1 : (int)v;
        }
        st = ssmi_cuda_status(ctx, op, "device allocation (slot indices)", ssmi_cuda_alloc_async(ctx, &dslots, bytes, s));
        /* Pageable source: cudaMemcpyAsync returns once it is staged, so host may be freed. */
        if (st == SSM_STATUS_OK)
            st = ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (slot indices)",
                                  ssmi_cuda_memcpy_async(dslots, host, bytes, cudaMemcpyHostToDevice, s));
        free(host);
        A->idx_mode = 2;
        A->idx_dev = (const int *)dslots;
    }
    if (st == SSM_STATUS_OK) st = e->launch(pr);
    if (dslots != NULL) {
        const ssm_status fs = ssmi_cuda_status(ctx, op, "device release (slot indices)", ssmi_cuda_free_async(ctx, dslots, s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    free(A);
    if (st == SSM_STATUS_OK) ssmi_variant_ran(ctx, e->name);
    return st;
}

/* The selection tables, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_mamba2_chunk_state(int32_t i, ssmi_variant_info * out) {
    return report(chunk_state_table, i, out);
}
extern "C" int32_t ssmi_cuda_variants_mamba2_scan(int32_t i, ssmi_variant_info * out) {
    return report(scan_table, i, out);
}
extern "C" int32_t ssmi_cuda_variants_mamba2_step(int32_t i, ssmi_variant_info * out) {
    return report(step_table, i, out);
}
