/*
 * bwd.cu — host side of the CUDA Mamba-2 combined backward (spec §2.7): the work plan (segments
 * and chunks, bwd.cuh), the device workspace (ssmi_cuda_alloc_async on ctx's stream: the
 * operator takes no caller workspace), the selection table and the entry point.
 *
 * The internal chunk is the entry's maxq tokens; for the entries that stage, halved until
 * bwd_chunk's shared memory fits the device with the chunk's P×N state and state gradient staged
 * there (down to kMinStagedQ), else (and for the other entries) halved until it fits without them
 * (the chunked algorithm is exact for any cut; params->chunk_size only has to be valid).
 * Limits: H ≤ 65535 and P·N ≤ 2^24 (UNSUPPORTED beyond), and a P, N pair whose one-token chunk
 * still fits the shared memory.
 */
#include <stdlib.h>
#include <string.h>

#include "bwd.cuh"
#include "../common/variant_table.cuh"
#include "../ssmi_cuda.h"

using namespace ssmi_m2bwd;

namespace {

const char kOp[] = "mamba2_scan_bwd";

struct bwd_problem {
    int    x16;     /* x is fp16 or bf16                                           */
    int    bf16_in; /* x, B, C and dout are bf16 (exact in the bf16 planes)        */
    size_t planes;  /* shared memory of the bf16-plane chunk kernel at 64 tokens   */
    size_t optin;   /* the device's shared memory per block                        */
};

struct bwd_entry {
    const char * name;
    const char * why;
    const char * rule;
    bool (*applies)(const bwd_problem & pb);
    bool planes; /* bwd_chunk_planes_kernel (bf16 planes, 16 warps) */
    bool mma;   /* products on the tensor cores */
    bool stage; /* bwd_chunk stages S and G in shared memory where they fit */
    int  maxq;  /* the largest internal chunk, ≤ kMaxQ (smaller where shared memory is short) */
};

bool bwd_any(const bwd_problem &) { return true; }
bool bwd_x16(const bwd_problem & pb) { return pb.x16 != 0; }
bool bwd_planes(const bwd_problem & pb) { return pb.bf16_in != 0 && pb.planes <= pb.optin; }

/* The tensor-core entries serve 16-bit inputs only: their products keep ~2^-16 relative error
 * (operands split into bf16 parts), inside the 16-bit bars of DESIGN §5, not the fp32 bar. */
const bwd_entry bwd_table[] = {
    {"chunked_planes",
     "bf16 x, B, C and dout: the chunk kernel's operands written once into shared memory as bf16 planes (x, B, C "
     "exact; fp32 operands as a rounded plane and a remainder plane), products by ldmatrix + mma.sync m16n8k16 with "
     "fp32 accumulators and their epilogues in registers, 16 warps per block, 64-token chunks, a block per (chunk, "
     "group, slice of heads) loading the chunk's B and C once and summing its heads' dB/dC in head order (no "
     "per-head dB/dC buffers); the chunk-local states and state gradients on the same planes, with the state "
     "passes in the same kernel (the running state in registers) where the rows are 16-byte runs",
     "x, B, C and dout in bf16, and the chunk's planes fit shared memory", bwd_planes, true, true, false, 64},
    {"chunked_mma",
     "fp16/bf16 x: the chunk kernels' products on the tensor cores (mma.sync m16n8k16 bf16, fp32 accumulators, fp32 "
     "operands split into rounded part and remainder), internal chunks of 64 tokens (half the per-chunk state "
     "traffic of 32), bwd_chunk reading S and G from the workspace for its first products and staging them over "
     "operands it no longer needs for dB and dC",
     "x in fp16 or bf16", bwd_x16, false, true, false, 64},
    {"chunked_fp32",
     "per (chunk, head) blocks of fp32 FFMA code, internal chunks of 32 tokens, sequential state passes per segment, "
     "fixed-order reductions",
     "any problem", bwd_any, false, false, true, 32},
};

/* The plane kernel's slice: the heads of a group one block takes in turn (loading the chunk's B
 * and C once and summing the heads' dB/dC as it goes). Fewer, larger slices load B and C less
 * often and keep fewer dB/dC parts in the workspace; more slices give the grid more blocks. The
 * rule: the fewest slices per group that give the grid kSliceBlocks blocks, at most one per
 * kMinSlice heads (with R ≤ kMinSlice one slice). kSliceBlocks (about 8 waves on devices of
 * 114–148 SMs, the kernel running one block per SM) keeps the last, partial wave a small part of
 * the kernel's time; kMinSlice keeps a block's B and C load a small part of its work. A
 * function of the problem only (never of the device): the order of the sums, so the bytes, are
 * the same on every device. Returns the heads per slice (0 for no heads). */
const long long kSliceBlocks = 1024;
const int       kMinSlice = 8;
int plane_slice(long long nchunks, int G, int R) {
    if (R <= 0) return 0;
    const long long blocks = nchunks * G;
    long long       ns = (R + kMinSlice - 1) / kMinSlice;
    if (blocks > 0 && (kSliceBlocks + blocks - 1) / blocks < ns) ns = (kSliceBlocks + blocks - 1) / blocks;
    return (int)((R + ns - 1) / ns);
}

/* Head batches: steps 2–6 of bwd.cuh (chunk-local states, state pass, state gradients, their
 * reverse pass, chunk kernel) run once per batch of heads, so the fp32 states and state
 * gradients in the workspace (8·nchunks·P·N bytes per head) are held for one batch at a time.
 * A batch is a run of consecutive slices of the chunk kernel (numbered across groups: slice k
 * is slice k % nslices of group k / nslices; the per-head entries' slices are single heads), so
 * the plane kernel's dB/dC running sums, and every other sum, are those of one unbatched run:
 * the batching changes no byte of the results. The rule: as many whole slices per batch as keep
 * the batch's states and state gradients within kStateBudget, at least one slice (the last
 * batch takes what is left). At B=1 S=8192 H=80 P=64 N=128 G=1 (128 chunks, 8 MiB per head,
 * slices of 10 heads) that is batches of 3 + 3 + 2 slices: 240 MiB instead of 640 MiB, which
 * keeps the peak of one forward + backward there below that of upstream's Triton path (saved
 * activations and its own workspace; docs/PERF.md §5). The price is smaller launches: per batch
 * the states kernels launch 3840 blocks, the chunk kernel 384 and the passes 480 blocks of 128
 * threads (bwd_pass.cu); fewer, fuller launches are faster (docs/PERF.md §5 has the time at
 * budgets from 128 to 640 MiB), so the budget trades that time for memory. */
const size_t kStateBudget = (size_t)240 << 20;

/* Slices per head batch (at least 1; all of them where the states take no memory). */
long long batch_slices(const bw_args & a) {
    const long long total = (long long)a.G * a.nslices;
    const size_t    per_head = 2 * (size_t)a.nchunks * (size_t)a.P * (size_t)a.N * sizeof(float);
    if (per_head == 0 || a.slice <= 0) return total > 0 ? total : 1;
    const long long k = (long long)(kStateBudget / per_head / (size_t)a.slice); /* ⌊budget / (per_head·slice)⌋ */
    return k < 1 ? 1 : k > total ? total : k;
}

/* The first head of slice k (k = G·nslices: H, the end of the last slice). */
int slice_head(const bw_args & a, long long k) {
    return a.nslices > 0 ? (int)((k / a.nslices) * a.R + (k % a.nslices) * a.slice) : 0;
}

/* The head batch of slices [k0, min(k0 + per, G·nslices)) into a's batch fields. */
void set_batch(bw_args & a, long long k0, long long per) {
    const long long total = (long long)a.G * a.nslices, k1 = k0 + per < total ? k0 + per : total;
    a.s0 = (int)k0, a.sb = (int)(k1 - k0);
    a.h0 = slice_head(a, k0), a.hb = slice_head(a, k1) - a.h0;
}

/* Host plan: segments (as the CPU backend cuts them) and their chunks. */
struct bwd_plan {
    bw_seg *   segs;
    bw_chunk * chunks;
    long long  nsegs, nchunks;
};

ssm_status build_plan(const ssmi_mamba2_dims * d, const ssm_mamba2_scan_bwd_args * a, int Q, bwd_plan * pl) {
    memset(pl, 0, sizeof *pl);
    const int has_init = ssmi_present(&a->initial_states), has_dfin = ssmi_present(&a->dfinal_states);
    const int varlen = ssmi_present(&a->cu_seqlens), seq = ssmi_present(&a->seq_idx);
    long long maxseg = varlen ? d->nseq : seq ? d->batch * (d->seqlen > 0 ? d->seqlen : 1) : d->batch;
    /* every chunk holds ≥ 1 token, and every segment starts a new chunk */
    const long long maxchunks = d->batch * ((d->seqlen + Q - 1) / Q) + maxseg;
    pl->segs = (bw_seg *)malloc(sizeof(bw_seg) * (size_t)(maxseg > 0 ? maxseg : 1));
    pl->chunks = (bw_chunk *)malloc(sizeof(bw_chunk) * (size_t)(maxchunks > 0 ? maxchunks : 1));
    if (pl->segs == NULL || pl->chunks == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    /* one segment of tokens [t0, t0 + len) of row `row` */
    auto add = [&](long long row, long long t0, long long len, long long init, long long dinit, long long fin) {
        bw_seg & s = pl->segs[pl->nsegs++];
        s.c0 = pl->nchunks, s.init = init, s.dinit = dinit, s.fin = fin;
        for (long long t = 0; t < len; t += Q) {
            bw_chunk & c = pl->chunks[pl->nchunks++];
            c.row = (int)row, c.t0 = t0 + t, c.len = (int)(len - t < Q ? len - t : Q);
        }
        s.nc = pl->nchunks - s.c0;
    };
    if (varlen) {
        const ssm_tensor * cu = &a->cu_seqlens;
        for (long long s = 0; s < d->nseq; ++s) {
            const long long st = ssmi_get_i64(cu, ssmi_off1(cu, s)), en = ssmi_get_i64(cu, ssmi_off1(cu, s + 1));
            add(0, st, en - st, has_init ? s : -1, has_init ? s : -1, has_dfin ? s : -1);
        }
        return SSM_STATUS_OK;
    }
    for (long long b = 0; b < d->batch; ++b) {
        if (!seq || d->seqlen == 0) {
            add(b, 0, d->seqlen, has_init ? b : -1, has_init ? b : -1, has_dfin ? b : -1);
            continue;
        }
        const ssm_tensor * si = &a->seq_idx;
        long long          t0 = 0, id = ssmi_get_i64(si, ssmi_off2(si, b, 0));
        int                first = 1;
        for (long long t = 1; t <= d->seqlen; ++t) {
            const long long next = t < d->seqlen ? ssmi_get_i64(si, ssmi_off2(si, b, t)) : id;
            if (t < d->seqlen && next == id) continue;
            const int last = t == d->seqlen;
            /* the recurrence starts with seq_{−1} := 0: the initial state feeds id 0 only */
            add(b, t0, t - t0, (first && has_init && id == 0) ? b : -1, (first && has_init) ? b : -1,
                (last && has_dfin) ? b : -1);
            first = 0;
            t0 = t;
            id = next;
        }
    }
    return SSM_STATUS_OK;
}

void plan_free(bwd_plan * pl) {
    free(pl->segs);
    free(pl->chunks);
}

bw_out out_of(const ssm_tensor * t) {
    bw_out o;
    memset(&o, 0, sizeof o);
    if (!ssmi_present(t)) return o;
    o.p = t->data;
    o.dtype = t->dtype;
    for (int i = 0; i < 4 && i < t->ndim; ++i) o.s[i] = (long long)t->strides[i];
    return o;
}

/* Byte offsets of the workspace pieces, each 256-byte aligned; st and gs for a.hb heads (the
 * largest head batch). */
struct bwd_ws {
    size_t chunks, segs, dtv, cmv, dfac, wdb, wdc, ecl, st, gs, ddp, dap, dbp, dbh, dch, total;
};

size_t take(size_t * at, size_t bytes) {
    const size_t o = *at;
    *at += (bytes + 255) / 256 * 256;
    return o;
}

bwd_ws ws_layout(const bw_args & a) {
    bwd_ws    l;
    size_t    at = 0;
    const size_t w = (size_t)a.nchunks * (size_t)a.H, f = sizeof(float);
    l.chunks = take(&at, sizeof(bw_chunk) * (size_t)a.nchunks);
    l.segs = take(&at, sizeof(bw_seg) * (size_t)a.nsegs);
    l.dtv = take(&at, w * (size_t)a.Q * f);
    l.cmv = take(&at, w * (size_t)a.Q * f);
    l.dfac = take(&at, w * (size_t)a.Q * f);
    l.wdb = take(&at, w * (size_t)a.Q * f);
    l.wdc = take(&at, w * (size_t)a.Q * f);
    l.ecl = take(&at, w * f);
    const size_t wb = (size_t)a.nchunks * (size_t)a.hb;
    l.st = take(&at, wb * (size_t)a.P * (size_t)a.N * f);
    l.gs = take(&at, wb * (size_t)a.P * (size_t)a.N * f);
    l.ddp = take(&at, w * (size_t)a.P * f);
    l.dap = take(&at, w * f);
    l.dbp = take(&at, w * f);
    const size_t hb = a.R > 1 ? (size_t)a.tokens * (size_t)a.G * (size_t)a.parts * (size_t)a.N * f : 0;
    l.dbh = take(&at, a.want_db ? hb : 0);
    l.dch = take(&at, a.want_dc ? hb : 0);
    l.total = at;
    return l;
}

/* The kernels of bwd.cuh: dt for every head, steps 2–6 per head batch (steps 2–5 as the state chain
 * where `chain`), then the reductions. */
ssm_status run_kernels(ssm_context * ctx, bw_args a, bool chain) {
    SSM_FORWARD_IF_ERROR(launch_bwd_dt(ctx, kOp, a));
    const long long total = (long long)a.G * a.nslices, per = batch_slices(a);
    for (long long k0 = 0; k0 < total; k0 += per) {
        set_batch(a, k0, per);
        if (chain) {
            SSM_FORWARD_IF_ERROR(launch_bwd_state_chain(ctx, kOp, a));
        } else {
            SSM_FORWARD_IF_ERROR(a.planes ? launch_bwd_states_planes(ctx, kOp, a, false) : launch_bwd_states(ctx, kOp, a));
            SSM_FORWARD_IF_ERROR(launch_state_pass(ctx, kOp, a));
            SSM_FORWARD_IF_ERROR(a.planes ? launch_bwd_states_planes(ctx, kOp, a, true) : launch_bwd_dstates(ctx, kOp, a));
            SSM_FORWARD_IF_ERROR(launch_state_grad_pass(ctx, kOp, a));
        }
        SSM_FORWARD_IF_ERROR(a.planes ? launch_bwd_chunk_planes(ctx, kOp, a) : launch_bwd_chunk(ctx, kOp, a));
        if (a.sparts) SSM_FORWARD_IF_ERROR(launch_bwd_state_parts(ctx, kOp, a));
    }
    return launch_bwd_reduce(ctx, kOp, a);
}

} /* namespace */

extern "C" ssm_status ssmi_cuda_mamba2_scan_bwd(ssm_context * ctx, const ssm_mamba2_params * p,
                                                const ssmi_mamba2_dims * d, const ssm_mamba2_scan_bwd_args * a) {
    const ssm_tensor * ts[] = {&a->x,  &a->dt, &a->a,  &a->b,  &a->c,  &a->d,  &a->z,        &a->dt_bias,
                               &a->initial_states, &a->dout, &a->dfinal_states, &a->dx, &a->ddt, &a->da,
                               &a->db, &a->dc, &a->dd, &a->dz, &a->ddt_bias, &a->dinitial_states};
    const char * names[] = {"x",  "dt", "a",  "b",  "c",  "d",  "z",  "dt_bias", "initial_states", "dout", "dfinal_states",
                            "dx", "ddt", "da", "db", "dc", "dd", "dz", "ddt_bias", "dinitial_states"};
    for (int i = 0; i < (int)(sizeof ts / sizeof ts[0]); ++i)
        SSM_FORWARD_IF_ERROR(ssmi_cuda_check_pointer(ctx, kOp, names[i], ts[i]));
    SSM_RETURN_IF(d->nheads > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: H=%lld is larger than the CUDA backend's limit of 65535", kOp, (long long)d->nheads);
    SSM_RETURN_IF(d->headdim * d->dstate > (1LL << 24), ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: P·N=%lld is larger than the CUDA backend's limit of 2^24", kOp,
                  (long long)(d->headdim * d->dstate));
    ssmi_cuda_props pr;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_current_props(ctx, kOp, &pr));
    const int    P = (int)d->headdim, N = (int)d->dstate;
    const size_t optin = (size_t)pr.smem_optin;
    const int    bf16_in = a->x.dtype == SSM_DTYPE_BF16 && a->b.dtype == SSM_DTYPE_BF16 &&
                        a->c.dtype == SSM_DTYPE_BF16 && a->dout.dtype == SSM_DTYPE_BF16;
    bwd_problem pb = {a->x.dtype == SSM_DTYPE_F16 || a->x.dtype == SSM_DTYPE_BF16, bf16_in,
                      planes_geom_of(kMaxQ, P, N).total, optin};
    const bwd_entry * e = NULL;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_pick_variant(ctx, SSMI_OP_mamba2_scan_bwd, bwd_table, pb, &e));
    SSM_RETURN_IF(e == NULL, ctx, SSM_STATUS_UNSUPPORTED, "%s: no CUDA kernel applies to this problem", kOp);

    /* the plane kernel: 64-token chunks (its rule checked the fit); staging entries: the largest
     * chunk (≥ kMinStagedQ) with S and G staged, else (and for the others) the largest without */
    const int    maxq = e->maxq < kMaxQ ? e->maxq : kMaxQ;
    int          Q = maxq;
    bool         staged = e->stage;
    if (e->planes) {
        staged = false;
    } else {
        while (staged && Q > kMinStagedQ && chunk_smem_floats(Q, P, N, true) * sizeof(float) > optin) Q /= 2;
        if (!staged || chunk_smem_floats(Q, P, N, true) * sizeof(float) > optin) {
            staged = false, Q = maxq;
            while (Q > 1 && chunk_smem_floats(Q, P, N, false) * sizeof(float) > optin) Q /= 2;
        }
    }
    SSM_RETURN_IF(!e->planes && chunk_smem_floats(Q, P, N, staged) * sizeof(float) > optin, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: P=%lld, N=%lld need more shared memory than the device has", kOp, (long long)d->headdim,
                  (long long)d->dstate);

    bwd_plan pl;
    if (build_plan(d, a, Q, &pl) != SSM_STATUS_OK) {
        plan_free(&pl);
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the work plan", kOp);
    }
    bw_args ar;
    memset(&ar, 0, sizeof ar);
    ar.H = (int)d->nheads, ar.P = (int)d->headdim, ar.N = (int)d->dstate, ar.G = (int)d->ngroups;
    ar.R = d->ngroups > 0 ? (int)(d->nheads / d->ngroups) : 0;
    ar.Q = Q;
    ar.planes = e->planes;
    ar.staged = staged;
    ar.mma = e->mma;
    ar.exact16 = a->x.dtype == SSM_DTYPE_BF16 && a->b.dtype == SSM_DTYPE_BF16 && a->c.dtype == SSM_DTYPE_BF16 &&
                 a->dout.dtype == SSM_DTYPE_BF16;
    ar.S = d->seqlen;
    ar.tokens = d->batch * d->seqlen;
    ar.nchunks = d->nheads > 0 ? pl.nchunks : 0;
    ar.nsegs = d->nheads > 0 ? pl.nsegs : 0;
    ar.lo = (float)p->dt_limit_lo, ar.hi = (float)p->dt_limit_hi;
    ar.softplus = p->dt_softplus != 0;
    ar.has_z = ssmi_present(&a->z), ar.has_d = ssmi_present(&a->d), ar.d2 = ar.has_d && a->d.ndim == 2;
    ar.has_bias = ssmi_present(&a->dt_bias);
    ar.want_dz = ssmi_present(&a->dz), ar.want_db = ssmi_present(&a->db), ar.want_dc = ssmi_present(&a->dc);
    ar.slice = e->planes ? plane_slice(pl.nchunks, ar.G, ar.R) : 1;
    ar.nslices = ar.slice > 0 ? (ar.R + ar.slice - 1) / ar.slice : 0;
    ar.parts = e->planes ? ar.nslices : ar.R; /* R = 0 (no heads): the group sums write zeros */
    ar.x = ssmi_cu_view_of(&a->x), ar.dt = ssmi_cu_view_of(&a->dt), ar.a = ssmi_cu_view_of(&a->a);
    ar.b = ssmi_cu_view_of(&a->b), ar.c = ssmi_cu_view_of(&a->c), ar.d = ssmi_cu_view_of(&a->d);
    ar.z = ssmi_cu_view_of(&a->z), ar.bias = ssmi_cu_view_of(&a->dt_bias);
    ar.init = ssmi_cu_view_of(&a->initial_states), ar.dout = ssmi_cu_view_of(&a->dout);
    ar.dfin = ssmi_cu_view_of(&a->dfinal_states);
    ar.dx = out_of(&a->dx), ar.ddt = out_of(&a->ddt), ar.dz = out_of(&a->dz), ar.db = out_of(&a->db);
    ar.dc = out_of(&a->dc), ar.da = out_of(&a->da), ar.dd = out_of(&a->dd), ar.dbias = out_of(&a->ddt_bias);
    ar.dinit = out_of(&a->dinitial_states);
    /* the workspace holds the states of the largest head batch */
    const long long nsl = (long long)ar.G * ar.nslices, per = batch_slices(ar);
    for (long long k0 = 0; k0 < nsl; k0 += per) {
        bw_args b = ar;
        set_batch(b, k0, per);
        if (b.hb > ar.hb) ar.hb = b.hb;
    }
    ar.sparts = ar.planes && state_parts_ok(ar, optin);

    const bwd_ws       l = ws_layout(ar);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    unsigned char *    ws = NULL;
    ssm_status         st = SSM_STATUS_OK;
    if (l.total > 0) {
        void *            mem = NULL;
        const cudaError_t err = ssmi_cuda_alloc_async(ctx, &mem, l.total, s);
        if (err == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            plan_free(&pl);
            return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: could not allocate %zu bytes of device workspace",
                              kOp, l.total);
        }
        st = ssmi_cuda_status(ctx, kOp, "device allocation (workspace)", err);
        ws = (unsigned char *)mem;
    }
    if (st == SSM_STATUS_OK && ar.nchunks > 0)
        st = ssmi_cuda_status(ctx, kOp, "cudaMemcpyAsync (chunk plan)",
                              ssmi_cuda_memcpy_async(ws + l.chunks, pl.chunks, sizeof(bw_chunk) * (size_t)ar.nchunks,
                                              cudaMemcpyHostToDevice, s));
    if (st == SSM_STATUS_OK && ar.nsegs > 0)
        st = ssmi_cuda_status(ctx, kOp, "cudaMemcpyAsync (segment plan)",
                              ssmi_cuda_memcpy_async(ws + l.segs, pl.segs, sizeof(bw_seg) * (size_t)ar.nsegs,
                                              cudaMemcpyHostToDevice, s));
    plan_free(&pl); /* pageable sources: staged before cudaMemcpyAsync returns */
    if (st == SSM_STATUS_OK) {
        ar.chunks = (const bw_chunk *)(ws + l.chunks), ar.segs = (const bw_seg *)(ws + l.segs);
        ar.dtv = (float *)(ws + l.dtv), ar.cmv = (float *)(ws + l.cmv), ar.dfac = (float *)(ws + l.dfac);
        ar.wdb = (float *)(ws + l.wdb), ar.wdc = (float *)(ws + l.wdc), ar.ecl = (float *)(ws + l.ecl);
        ar.st = (float *)(ws + l.st), ar.gs = (float *)(ws + l.gs), ar.ddp = (float *)(ws + l.ddp);
        ar.dap = (float *)(ws + l.dap), ar.dbp = (float *)(ws + l.dbp);
        ar.dbh = (float *)(ws + l.dbh), ar.dch = (float *)(ws + l.dch);
        st = run_kernels(ctx, ar, ar.planes && chain_ok(ar, optin));
    }
    if (ws != NULL) {
        const ssm_status fs = ssmi_cuda_status(ctx, kOp, "device release (workspace)", ssmi_cuda_free_async(ctx, ws, s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    return st;
}

/* The selection table, reported to the variant registry (common/select.cu). */
extern "C" int32_t ssmi_cuda_variants_mamba2_scan_bwd(int32_t i, ssmi_variant_info * out) {
    return ssmi_cuda_report_variants(bwd_table, i, out);
}
