/*
 * mamba3_mimo.cu — host side of the CUDA Mamba-3 MIMO: backward phase 1 (mamba3_mimo_bwd_fwd,
 * spec §3.4), the forward (mamba3_mimo, spec §2.2-§2.5, §3.3, §3.7: initial/final states,
 * varlen, fused norm), the backward (mamba3_mimo_bwd, spec §4) and the decode step
 * (mamba3_mimo_step, spec §3.9): the work plan, the device workspace, the selection tables and
 * the entry points. The kernels live in the files that mimo.cuh lists.
 *
 * The chunked operators run chunk-parallel; only the state pass walks a sequence's chunks in
 * order. The host cuts the work into "work chunks" w (the C-token chunks of every batch row,
 * or of every varlen sequence, whose chunks restart at the sequence start):
 *   0. (forward) angle_prep.cu    θ and the chunk-local cumsum of adt, by segments;
 *   1. chunk_gemm.cu              ΔS_w per (w, h);
 *   2. state_pass.cu              the state entering each chunk, per (sequence, h, element);
 *   3. chunk_gemm.cu              the output tiles per (w, h, P tile): the table's entry; in the
 *                                 forward it marks the (w, h) holding a non-finite Y and its
 *                                 non-finite fix recomputes those (chunk_gemm.cu says why);
 *   4. output_stage.cu            bwd_fwd: the partial sums in chunk order; forward: out and
 *                                 the finals.
 * Every output element is written by exactly one thread with a fixed summation order, and no
 * float atomics are used (the marks are integer ORs): the results are bitwise identical across
 * runs.
 *
 * Arithmetic: fp32 everywhere, for every input dtype (loads convert through strides); the
 * backward's chunk_parallel_planes takes its chunk products from split bf16 planes on the tensor
 * cores (fp32 accumulators; bwd.cuh).
 * ref_mode SSM_REF_UPSTREAM_BF16 is UNSUPPORTED on CUDA (the CPU and the reference have it).
 * Limits: those of the validation (N, P ≤ 128, C·R ≤ 128), H·(P tiles) ≤ 65535 blocks, the
 * chunk tile and the step within the 227 KB of shared memory of a block.
 *
 * The backward (mamba3_mimo_bwd, spec §4) runs kernels 0-3 of the forward for Ŝ and Y, then the
 * kernels of bwd.cuh (its own workspace layout: bwd_layout); given the forward's chunk_states it
 * skips kernels 1-2 (Ŝ is read from them), given its pregate_y kernel 3 (Y is read from it). The
 * forward writes Ŝ and Y straight into a chunk_states / pregate_y that is F32 in its workspace's
 * layout ([W][H][N][P], [B·S][H][R][P]: contiguous), else copies them there.
 *
 * Selection tables (mamba3_mimo_bwd_fwd and mamba3_mimo share the output-kernel table; the
 * backward's forward recompute takes the first output entry that applies; the other kernels
 * have one form each):
 *   output tiles  fused_y      C·R ≤ 64 and P tile ≤ 64
 *                 two_gemm_y   the tile fits with a P tile of 8 or more columns
 *   backward      chunk_parallel_planes  q, k and v in fp16 or bf16 (tensor-core chunk products)
 *                 chunk_parallel         always (fp32 FFMA chunk products)
 *   decode step   slots_in_params  no slot list, or ≤ 64 slots within int
 *                 slots_uploaded   always
 * The P tile is P when the two-GEMM tile fits in shared memory at full width, else the largest
 * of 64, 32, 16, 8 below P that fits; the same for both output entries.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <mutex>

#include "bwd.cuh"
#include "../common/variant_table.cuh"
#include "../ssmi_cuda.h"

namespace ssmi_mimo {

/* The dynamic shared memory limit of a kernel, raised at most once per (kernel, device, size)
 * and never lowered: the attribute only grows (under a mutex), so a launch that saw a large
 * enough cached value is never undercut by a concurrent call. Sizes within the default 48 KB
 * need no attribute at all (the step at every supported shape up to R·(N + P) ≈ 2.8 K). */
namespace {
const int        kSmemDevices = 64;
std::atomic<int> g_smem_set[SM_KERNELS][kSmemDevices];
std::mutex       g_smem_mutex;
} // namespace

ssm_status set_smem(ssm_context * ctx, const char * op, int id, const void * fn, size_t bytes) {
    if (bytes <= 48u * 1024u) return SSM_STATUS_OK;
    int dev = 0;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_status(ctx, op, "cudaGetDevice", cudaGetDevice(&dev)));
    const bool cached = dev >= 0 && dev < kSmemDevices;
    if (cached && (size_t)g_smem_set[id][dev].load(std::memory_order_acquire) >= bytes) return SSM_STATUS_OK;
    std::lock_guard<std::mutex> lock(g_smem_mutex);
    if (cached && (size_t)g_smem_set[id][dev].load(std::memory_order_relaxed) >= bytes) return SSM_STATUS_OK;
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaFuncSetAttribute (shared memory)",
                         cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)));
    if (cached) g_smem_set[id][dev].store((int)bytes, std::memory_order_release);
    return SSM_STATUS_OK;
}

namespace {

/* The P tile of the output kernel: the largest of P, 64, 32, 16, 8 whose shared memory fits. */
int pick_ptile(int R, int N, int P, int C) {
    static const int cand[] = {64, 32, 16, 8};
    if ((size_t)make_layout(R, N, P, C, P, true).total * sizeof(float) <= (size_t)kSmemLimit) return P;
    for (int i = 0; i < 4; ++i)
        if (cand[i] < P && (size_t)make_layout(R, N, P, C, cand[i], true).total * sizeof(float) <= (size_t)kSmemLimit)
            return cand[i];
    return 0;
}

/* Device scratch allocations of one call, released together on the stream. */
struct mc_mem {
    void * p[8];
    int    n;
};

ssm_status mem_alloc(ssm_context * ctx, const char * op, mc_mem * m, void ** out, size_t bytes, cudaStream_t s) {
    *out = NULL;
    if (bytes == 0) return SSM_STATUS_OK;
    const ssm_status st = ssmi_cuda_status(ctx, op, "device allocation (workspace)", ssmi_cuda_alloc_async(ctx, out, bytes, s));
    if (st == SSM_STATUS_OK) m->p[m->n++] = *out;
    return st;
}

ssm_status mem_free(ssm_context * ctx, const char * op, mc_mem * m, cudaStream_t s, ssm_status st) {
    for (int i = 0; i < m->n; ++i) {
        const ssm_status fs = ssmi_cuda_status(ctx, op, "device release (workspace)", ssmi_cuda_free_async(ctx, m->p[i], s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    m->n = 0;
    return st;
}

/* Copies a host array to a new device allocation (pageable source: returns once staged). */
ssm_status mem_upload(ssm_context * ctx, const char * op, mc_mem * m, void ** out, const void * src, size_t bytes,
                      cudaStream_t s) {
    SSM_FORWARD_IF_ERROR(mem_alloc(ctx, op, m, out, bytes, s));
    if (bytes == 0) return SSM_STATUS_OK;
    return ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (plan)",
                            ssmi_cuda_memcpy_async(*out, src, bytes, cudaMemcpyHostToDevice, s));
}

/* The host plan: sequences and their work chunks. cu == NULL: one sequence per batch row. */
struct mc_plan {
    mc_chunk * chunks;
    mc_seq *   seqs;
    int        W, nseq;
};

ssm_status make_plan(ssm_context * ctx, const char * op, const ssmi_mimo_dims * d, const ssm_tensor * cu, mc_plan * pl) {
    const long long C = d->chunk, S = d->seqlen;
    const int       nseq = (int)d->nseq;
    pl->chunks = NULL;
    pl->seqs = NULL;
    pl->nseq = nseq;
    pl->W = 0;
    long long W = 0;
    pl->seqs = (mc_seq *)calloc((size_t)(nseq > 0 ? nseq : 1), sizeof(mc_seq));
    if (pl->seqs == NULL) return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no memory for the chunk plan", op);
    for (int s = 0; s < nseq; ++s) {
        mc_seq & q = pl->seqs[s];
        if (cu != NULL && cu->data != NULL) {
            const long long a = ssmi_get_i64(cu, ssmi_off1(cu, s)), b = ssmi_get_i64(cu, ssmi_off1(cu, s + 1));
            q.row = 0, q.t0 = a, q.len = b - a;
        } else {
            q.row = s, q.t0 = 0, q.len = S;
        }
        q.first = (int)W;
        q.count = (int)((q.len + C - 1) / C);
        W += q.count;
    }
    SSM_RETURN_IF(W > (1LL << 31) - 1, ctx, SSM_STATUS_UNSUPPORTED, "%s: %lld chunks exceed the CUDA grid", op, W);
    pl->W = (int)W;
    pl->chunks = (mc_chunk *)calloc((size_t)(W > 0 ? W : 1), sizeof(mc_chunk));
    if (pl->chunks == NULL) return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no memory for the chunk plan", op);
    for (int s = 0; s < nseq; ++s) {
        const mc_seq & q = pl->seqs[s];
        for (int c = 0; c < q.count; ++c) {
            mc_chunk & k = pl->chunks[q.first + c];
            k.b = q.row;
            k.seq = s;
            k.c = c;
            k.t0 = q.t0 + (long long)c * C;
            k.len = (int)((q.t0 + q.len - k.t0) < C ? (q.t0 + q.len - k.t0) : C);
            k.t_end = q.t0 + q.len;
            k.last = c == q.count - 1;
        }
    }
    return SSM_STATUS_OK;
}

void free_plan(mc_plan * pl) {
    free(pl->chunks);
    free(pl->seqs);
    pl->chunks = NULL;
    pl->seqs = NULL;
}

void fill_dims(mc_args * A, const ssmi_mimo_dims * d) {
    A->B = (int)d->batch, A->S = (int)d->seqlen, A->H = (int)d->nheads, A->G = (int)d->ngroups;
    A->R = (int)d->rank, A->N = (int)d->dstate, A->P = (int)d->headdim, A->A = (int)d->nangles;
    A->C = (int)d->chunk, A->reduce = d->reduce_o != 0;
}

ssm_status check_grid(ssm_context * ctx, const char * op, const ssmi_mimo_dims * d, int npt) {
    SSM_RETURN_IF(d->nheads * npt > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: H=%lld times %d P tiles exceeds the CUDA grid limit 65535", op, (long long)d->nheads, npt);
    return SSM_STATUS_OK;
}

/* fp32 view whose (slot, h, p) rows are 16-byte aligned float4 runs of N contiguous floats. */
bool vec_ok(const ssm_tensor * t, int64_t N) {
    if (t == NULL || t->data == NULL) return true;
    if (t->dtype != SSM_DTYPE_F32 || t->strides[3] != 1 || N % 4 != 0) return false;
    if (((uintptr_t)t->data & 15u) != 0) return false;
    for (int i = 0; i < 3; ++i)
        if (t->strides[i] % 4 != 0) return false;
    return true;
}


/* ---- selection table of the output tiles (mamba3_mimo_bwd_fwd, mamba3_mimo) ------------------ */

/* One way to compute the output tiles; the problem is the call's mc_args with the P tile set. */
struct output_variant {
    const char * name;
    const char * why;
    const char * rule;
    bool (*applies)(const mc_args & A);
    ssm_status (*launch)(ssm_context * ctx, const char * op, const mc_args & A, cudaStream_t s);
};

bool one_gemm_tile(const mc_args & A) { return A.pt > 0 && A.C * A.R <= 64 && A.pt <= 64; }
bool tile_fits(const mc_args & A) { return A.pt > 0; }

const output_variant kOutputTable[] = {
    {"fused_y",
     "C·R ≤ 64 and a P tile ≤ 64: the tile is one 64×64 GEMM tile, both Y products share its registers and Y is "
     "stored over Q (less shared memory, 3 blocks per SM at N = P = C·R = 64)",
     "C·R ≤ 64 and a P tile of at most 64 columns", one_gemm_tile, launch_output_fused},
    {"two_gemm_y",
     "every tile that fits in shared memory (C·R up to 128, P tiled down to 8 columns): Y by two block GEMMs into "
     "its own shared buffer",
     "the chunk tile fits in shared memory with a P tile of 8 or more columns", tile_fits, launch_output_two_gemm},
};

/* The P tile and the output entry of a chunked call (A: dims filled). */
ssm_status pick_output(ssm_context * ctx, ssmi_op opid, const char * op, mc_args & A, const output_variant ** v) {
    A.pt = pick_ptile(A.R, A.N, A.P, A.C);
    A.npt = A.pt > 0 ? (A.P + A.pt - 1) / A.pt : 0;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_pick_variant(ctx, opid, kOutputTable, A, v));
    SSM_RETURN_IF(*v == NULL, ctx, SSM_STATUS_UNSUPPORTED, "%s: the chunk tile does not fit in shared memory", op);
    return SSM_STATUS_OK;
}

/* Kernels 1-3 of the chunked operators on a filled mc_args (chunks and seqs on the device). */
ssm_status run_chunks(ssm_context * ctx, const char * op, const mc_args & A, int need_final, cudaStream_t s,
                      const output_variant * v) {
    if (A.W == 0 && A.nseq == 0) return SSM_STATUS_OK;
    SSM_FORWARD_IF_ERROR(launch_chunk_state(ctx, op, A, s));
    SSM_FORWARD_IF_ERROR(launch_state_pass(ctx, op, A, need_final, s));
    return v->launch(ctx, op, A, s);
}

/* A saved forward result (pregate_y, chunk_states) that is F32 and row-major contiguous (4-byte
 * aligned) has its workspace's layout: the kernels then use its memory as that workspace, with no
 * copy. */
bool in_place_f32(const ssm_tensor * t) { return ssmi_present(t) && ssmi_cu_dense_f32(t, 4); }

/* ---- selection table of the decode step --------------------------------------------------------- */

/* The step's call: its arguments (index tensors on the host) and dims. */
struct step_problem {
    const ssm_mamba3_mimo_step_args * a;
    const ssmi_mimo_dims *            d;
};

/* One way to give the step kernel its slot list, then launch it (A filled but for the slots). */
struct step_variant {
    const char * name;
    const char * why;
    const char * rule;
    bool (*applies)(const step_problem & pb);
    ssm_status (*launch)(ssm_context * ctx, const char * op, const step_problem & pb, st_args & A, size_t smem,
                         cudaStream_t s);
};

long long slot_of(const step_problem & pb, int64_t b) {
    const ssm_tensor * idx = &pb.a->state_batch_indices;
    return ssmi_get_i64(idx, ssmi_off1(idx, b));
}

/* The general form (st_args.general): several tokens per row, write slots, slot tables or
 * intermediate_*. */
bool general_form(const step_problem & pb) {
    const ssm_mamba3_mimo_step_args * a = pb.a;
    const ssmi_step_slots             slots = {&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                                               &a->num_accepted_tokens};
    const ssm_tensor * const          inter[4] = {&a->intermediate_angle_state, &a->intermediate_ssm_state,
                                                  &a->intermediate_k_state, &a->intermediate_v_state};
    return ssmi_step_general(&slots, inter, 4) != 0;
}

bool slots_fit_params(const step_problem & pb) {
    if (general_form(pb)) return false;
    if (!ssmi_present(&pb.a->state_batch_indices)) return true;
    if (pb.d->batch > kInlineSlots || ssmi_cuda_on_device(&pb.a->state_batch_indices)) return false;
    for (int64_t b = 0; b < pb.d->batch; ++b) {
        const long long v = slot_of(pb, b);
        if (v < INT_MIN || v > INT_MAX) return false;
    }
    return true;
}

bool always(const step_problem & pb) {
    (void)pb;
    return true;
}

ssm_status step_slots_in_params(ssm_context * ctx, const char * op, const step_problem & pb, st_args & A, size_t smem,
                                cudaStream_t s) {
    if (ssmi_present(&pb.a->state_batch_indices)) {
        for (int64_t b = 0; b < pb.d->batch; ++b) A.islot[b] = (int)slot_of(pb, b);
        A.n_islot = (int)pb.d->batch;
    }
    return launch_step(ctx, op, A, pb.d->batch, pb.d->nheads, smem, s);
}

ssm_status step_slots_uploaded(ssm_context * ctx, const char * op, const step_problem & pb, st_args & A, size_t smem,
                               cudaStream_t s) {
    mc_mem     m;
    ssm_status st = SSM_STATUS_OK;
    m.n = 0;
    if (A.general) {
        /* the rows' plan (common/step_plan.cuh); a row of several tokens keeps the P×N state in
         * shared memory */
        const ssm_mamba3_mimo_step_args * a = pb.a;
        const ssmi_step_slots             slots = {&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                                                   &a->num_accepted_tokens};
        const int64_t                     T = ssmi_present(&a->cu_seqlens) ? pb.d->seqlen : pb.d->batch;
        void *                            plan = NULL;
        int                               max_tokens = 0;
        st = ssmi_cuda_step_plan(ctx, op, &slots, pb.d->batch, T, pb.d->nseq, s, &A.plan, &plan, &max_tokens);
        if (plan != NULL) m.p[m.n++] = plan;
        A.keep = max_tokens > 1;
        if (A.keep) smem += sizeof(float) * (size_t)(pb.d->headdim * pb.d->dstate);
        if (st == SSM_STATUS_OK && smem > (size_t)kSmemLimit)
            st = ssmi_error(ctx, SSM_STATUS_UNSUPPORTED,
                            "%s: a row of several tokens keeps its P×N state in shared memory; R=%d with N=%d, P=%d "
                            "needs %zu bytes (limit %d)",
                            op, A.R, A.N, A.P, smem, kSmemLimit);
    } else if (ssmi_cuda_on_device(&pb.a->state_batch_indices)) {
        /* device indices, read on the device (no host copy: capturable in a CUDA graph); an
         * index outside [0, slots) makes its row padding */
        void * dslots = NULL;
        st = ssmi_cuda_check_pointer(ctx, op, "state_batch_indices", &pb.a->state_batch_indices);
        if (st == SSM_STATUS_OK) st = mem_alloc(ctx, op, &m, &dslots, sizeof(long long) * (size_t)pb.d->batch, s);
        if (st == SSM_STATUS_OK)
            st = ssmi_cuda_status(ctx, op, "device_slots_kernel launch",
                                  ssmi_cuda_device_slots(&pb.a->state_batch_indices, pb.d->batch, pb.d->nseq,
                                                         (long long *)dslots, s));
        A.slots = (const long long *)dslots;
    } else if (ssmi_present(&pb.a->state_batch_indices)) {
        long long * host = (long long *)malloc(sizeof(long long) * (size_t)pb.d->batch);
        if (host == NULL) return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no memory for the slot list", op);
        for (int64_t b = 0; b < pb.d->batch; ++b) host[b] = slot_of(pb, b);
        void * dslots = NULL;
        st = mem_upload(ctx, op, &m, &dslots, host, sizeof(long long) * (size_t)pb.d->batch, s);
        free(host);
        A.slots = (const long long *)dslots;
    }
    if (st == SSM_STATUS_OK) st = launch_step(ctx, op, A, pb.d->batch, pb.d->nheads, smem, s);
    return mem_free(ctx, op, &m, s, st);
}

const step_variant kStepTable[] = {
    {"slots_in_params",
     "no slot list, or one of at most 64 slots within int: the list travels in the kernel's parameters (no "
     "allocation, no copy)",
     "no state_batch_indices, or batch ≤ 64 with every index within int; one token per row read and written at one "
     "slot (no dst_state_batch_indices, cu_seqlens, slot table or intermediate_*)",
     slots_fit_params, step_slots_in_params},
    {"slots_uploaded",
     "any slot list (longer lists, indices beyond int): copied to a device buffer first; every form of the step "
     "(several tokens per row, write slots, slot tables, intermediate_*: the rows' plan, a row's states in shared "
     "memory between its tokens)",
     "always", always, step_slots_uploaded},
};

/* ---- the backward (mamba3_mimo_bwd) ---------------------------------------------------------- */

/* The backward's entries differ only in the products of the chunk kernels (bwd_chunk.cu); both
 * take every shape the validation admits (C·R ≤ 128, N, P ≤ 128). */
struct bwd_problem {
    int qkv16; /* q, k and v are fp16 or bf16 */
};

struct bwd_variant {
    const char * name;
    const char * why;
    const char * rule;
    bool (*applies)(const bwd_problem & pb);
    int planes; /* mb_args.planes: the chunk kernels' tensor-core products */
};

bool bwd_always(const bwd_problem & pb) {
    (void)pb;
    return true;
}
bool bwd_qkv16(const bwd_problem & pb) { return pb.qkv16 != 0; }

bool is16(int32_t dtype) { return dtype == SSM_DTYPE_F16 || dtype == SSM_DTYPE_BF16; }

/* The tensor-core entry serves 16-bit q, k, v only: its products keep ~2^-16 relative error (fp32
 * operands split into two bf16 parts), inside the 16-bit bars of DESIGN §5, not the fp32 bar. */
const bwd_variant kBwdTable[] = {
    {"chunk_parallel_planes",
     "16-bit q, k, v: chunk_parallel with every product of the chunk-gradient kernels on the tensor cores: each "
     "64-deep slice of both operands staged as bf16 planes (the rounded value and the rounded remainder), 16×16 "
     "warp tiles by ldmatrix + mma.sync m16n8k16 with fp32 accumulators (about 2^-16 relative)",
     "q, k and v in fp16 or bf16", bwd_qkv16, 1},
    {"chunk_parallel",
     "the forward recomputed by the forward's kernels, then fp32 chunk-parallel gradient kernels over (work chunk, "
     "head): shared-memory staged FFMA block GEMMs on global chunk tiles; only the state pass and the angle "
     "pass's chunk carries walk a sequence",
     "always", bwd_always, 0},
};

/* The forward's output entry for the recompute: the first of kOutputTable that applies. */
const output_variant * first_output(const mc_args & A) {
    for (size_t i = 0; i < sizeof kOutputTable / sizeof kOutputTable[0]; ++i)
        if (kOutputTable[i].applies(A)) return &kOutputTable[i];
    return NULL;
}

/* Carves consecutive float arrays out of one workspace, each 64-float aligned. */
struct ws_carver {
    float * base;
    size_t  used;
    float * take(size_t n) {
        float * p = base != NULL ? base + used : NULL;
        used += (n + 63) / 64 * 64;
        return p;
    }
};

/* Points the backward's arrays (and the forward recompute's) into one workspace; returns its floats.
 * ws_state, ws_y: the chunk states, Y have a workspace (not given, or given not in its layout). */
size_t bwd_layout(float * base, const mc_args & F, mc_args * Fo, mb_args * B, bool ws_state, bool ws_y) {
    ws_carver     c = {base, 0};
    const size_t  W = (size_t)F.W, H = (size_t)F.H, R = (size_t)F.R, N = (size_t)F.N, P = (size_t)F.P;
    const size_t  NA = (size_t)F.A, BS = (size_t)F.B * (size_t)F.S, NS = (size_t)F.nseq;
    const size_t  TR = W * H * (size_t)F.C * R;
    Fo->ws_state = ws_state ? c.take(W * H * N * P) : NULL;
    Fo->ws_y = ws_y ? c.take(BS * H * R * P) : NULL;
    Fo->ws_theta = c.take(BS * H * NA);
    Fo->ws_cm = c.take(BS * H);
    Fo->ws_seg = c.take(W * H * NA);
    B->dy = c.take(TR * P), B->u = c.take(TR * P), B->du = c.take(TR * P);
    B->tq = c.take(TR * N), B->tkh = c.take(TR * N), B->tkt = c.take(TR * N);
    B->tdq = c.take(TR * N), B->tdk = c.take(TR * N);
    B->m = c.take(TR * F.C * R), B->d2 = c.take(TR * F.C * R), B->wp = c.take(TR * F.C * R);
    B->qkd = c.take(TR * R), B->dqk = c.take(TR * R);
    B->dstate = c.take(W * H * N * P), B->ds0 = c.take(NS * H * N * P);
    B->dqh = c.take(BS * R * H * N), B->dkh = c.take(BS * R * H * N);
    B->dth = c.take(BS * H * NA), B->dgth = c.take(NS * H * NA), B->thc = c.take(W * H * NA);
    B->dfac = c.take(BS * H), B->dgd = c.take(BS * H), B->dc = c.take(NS * H);
    B->p_o = c.take(W * H * R * P), B->p_z = c.take(W * H * R * P), B->p_w = c.take(W * H * R * P);
    B->p_mv = c.take(W * H * R * P), B->p_mv0 = c.take(NS * H * R * P);
    B->p_qb = c.take(W * H * R * N), B->p_kb = c.take(W * H * R * N), B->p_dd = c.take(W * H);
    return c.used;
}

/* The backward's kernels in order (the plan and workspace in place). The forward recompute skips
 * what the forward's saved results give: the chunk states (chunk_states) and the output tiles
 * (pregate_y); each is read in place (F.ws_state / F.ws_y are it) or copied into its workspace. */
ssm_status run_bwd(ssm_context * ctx, const char * op, const mc_args & F, const output_variant * ov,
                   const mb_args & B, const ssm_mamba3_mimo_bwd_args * a, cudaStream_t s) {
    if (F.W > 0) {
        SSM_FORWARD_IF_ERROR(launch_angle_prep(ctx, op, F, s));
        if (!ssmi_present(&a->chunk_states)) {
            SSM_FORWARD_IF_ERROR(launch_chunk_state(ctx, op, F, s));
            SSM_FORWARD_IF_ERROR(launch_state_pass(ctx, op, F, 0, s));
        } else if (F.ws_state != a->chunk_states.data) {
            SSM_FORWARD_IF_ERROR(ssmi_cuda_dense_copy(ctx, op, &a->chunk_states, F.ws_state, 0, s));
        }
        if (!ssmi_present(&a->pregate_y)) SSM_FORWARD_IF_ERROR(ov->launch(ctx, op, F, s));
        else if (F.ws_y != a->pregate_y.data) SSM_FORWARD_IF_ERROR(ssmi_cuda_dense_copy(ctx, op, &a->pregate_y, F.ws_y, 0, s));
    }
    SSM_FORWARD_IF_ERROR(launch_bwd_dy(ctx, op, B, s));
    SSM_FORWARD_IF_ERROR(launch_bwd_tiles(ctx, op, B, s));
    SSM_FORWARD_IF_ERROR(launch_bwd_state_reverse(ctx, op, B, s));
    SSM_FORWARD_IF_ERROR(launch_bwd_chunk_grads(ctx, op, B, s));
    SSM_FORWARD_IF_ERROR(launch_bwd_angles(ctx, op, B, s));
    SSM_FORWARD_IF_ERROR(launch_bwd_initial_states(ctx, op, B, s));
    SSM_FORWARD_IF_ERROR(launch_bwd_trapezoid(ctx, op, B, s));
    SSM_FORWARD_IF_ERROR(launch_bwd_group_sums(ctx, op, B, s));
    const int R = B.R, N = B.N, P = B.P, W = B.W, NS0 = B.has_states ? B.nseq : 0;
    SSM_FORWARD_IF_ERROR(launch_bwd_param_sum(ctx, op, B, ssmi_cu_view_or_null(&a->dq_bias), 0, B.p_qb, W, NULL, 0, R, N, s));
    SSM_FORWARD_IF_ERROR(launch_bwd_param_sum(ctx, op, B, ssmi_cu_view_or_null(&a->dk_bias), 0, B.p_kb, W, NULL, 0, R, N, s));
    SSM_FORWARD_IF_ERROR(
        launch_bwd_param_sum(ctx, op, B, ssmi_cu_view_or_null(&a->dmimo_v), 0, B.p_mv, W, B.p_mv0, NS0, R, P, s));
    if (B.has_z)
        SSM_FORWARD_IF_ERROR(
            launch_bwd_param_sum(ctx, op, B, ssmi_cu_view_or_null(&a->dmimo_z), 0, B.p_z, W, NULL, 0, R, P, s));
    if (B.reduce)
        SSM_FORWARD_IF_ERROR(
            launch_bwd_param_sum(ctx, op, B, ssmi_cu_view_or_null(&a->dmimo_o), 0, B.p_o, W, NULL, 0, R, P, s));
    if (B.has_d) SSM_FORWARD_IF_ERROR(launch_bwd_param_sum(ctx, op, B, ssmi_cu_view_or_null(&a->dd), 1, B.p_dd, W, NULL, 0, 1, 1, s));
    if (B.fused) {
        const int kind = ssmi_present(&a->doutproj_norm_weight) && a->doutproj_norm_weight.ndim == 1 ? 3 : 2;
        SSM_FORWARD_IF_ERROR(launch_bwd_param_sum(ctx, op, B, ssmi_cu_view_or_null(&a->doutproj_norm_weight), kind, B.p_w, W,
                                                  NULL, 0, R, P, s));
    }
    return SSM_STATUS_OK;
}

} // namespace
} // namespace ssmi_mimo

using namespace ssmi_mimo;

/* ---- entry points -------------------------------------------------------------------------- */

extern "C" ssm_status ssmi_cuda_mamba3_mimo_bwd_fwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                                   const ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_fwd_args * a) {
    static const char op[] = "mamba3_mimo_bwd_fwd";
    (void)p;
    ssmi_variant_ran(ctx, "");
    SSM_RETURN_IF(ctx != NULL && ctx->ref_mode == SSM_REF_UPSTREAM_BF16, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: ref_mode SSM_REF_UPSTREAM_BF16 is not implemented on CUDA (use the CPU or REF backend)", op);
    if (d->batch == 0 || d->nheads == 0 || d->seqlen == 0) return SSM_STATUS_OK;
    mc_args A;
    memset(&A, 0, sizeof A);
    fill_dims(&A, d);
    const output_variant * var = NULL;
    SSM_FORWARD_IF_ERROR(pick_output(ctx, SSMI_OP_mamba3_mimo_bwd_fwd, op, A, &var));
    SSM_FORWARD_IF_ERROR(check_grid(ctx, op, d, A.npt));
    A.q = ssmi_cu_view_or_null(&a->q), A.k = ssmi_cu_view_or_null(&a->k), A.v = ssmi_cu_view_or_null(&a->v), A.z = ssmi_cu_view_or_null(&a->z);
    A.dout = ssmi_cu_view_or_null(&a->dout), A.q_bias = ssmi_cu_view_or_null(&a->q_bias), A.k_bias = ssmi_cu_view_or_null(&a->k_bias);
    A.mimo_v = ssmi_cu_view_or_null(&a->mimo_v), A.mimo_z = ssmi_cu_view_or_null(&a->mimo_z), A.mimo_o = ssmi_cu_view_or_null(&a->mimo_o);
    A.d = ssmi_cu_view_or_null(&a->d), A.angles = ssmi_cu_view_or_null(&a->angles), A.da_cs = ssmi_cu_view_or_null(&a->da_cs);
    A.da_cs_rev = ssmi_cu_view_or_null(&a->da_cs_rev), A.dt = ssmi_cu_view_or_null(&a->dt), A.trap = ssmi_cu_view_or_null(&a->trap);
    A.segsum = ssmi_cu_view_or_null(&a->segsum), A.states = ssmi_cu_view_or_null(&a->states), A.qk_dot = ssmi_cu_view_or_null(&a->qk_dot);
    A.dz = ssmi_cu_view_or_null(&a->dz);
    A.has_z = ssmi_present(&a->z), A.has_d = ssmi_present(&a->d), A.fwd = 0;
    A.nseq = (int)d->batch;

    ssmi_mimo_dims dd = *d;
    dd.nseq = d->batch;
    mc_plan pl;
    ssm_status st = make_plan(ctx, op, &dd, NULL, &pl);
    cudaStream_t s = ssmi_cuda_stream(ctx);
    mc_mem       m;
    m.n = 0;
    void *dch = NULL, *dsq = NULL, *wst = NULL, *po = NULL, *pz = NULL;
    const size_t W = (size_t)pl.W, H = (size_t)A.H;
    A.W = pl.W;
    if (st == SSM_STATUS_OK) st = mem_upload(ctx, op, &m, &dch, pl.chunks, sizeof(mc_chunk) * W, s);
    if (st == SSM_STATUS_OK) st = mem_upload(ctx, op, &m, &dsq, pl.seqs, sizeof(mc_seq) * (size_t)pl.nseq, s);
    if (st == SSM_STATUS_OK) st = mem_alloc(ctx, op, &m, &wst, W * H * A.N * A.P * sizeof(float), s);
    const bool want_o = ssmi_present(&a->dmimo_o), want_z = ssmi_present(&a->dmimo_z);
    if (st == SSM_STATUS_OK && A.reduce) st = mem_alloc(ctx, op, &m, &po, W * H * A.R * A.P * sizeof(float), s);
    if (st == SSM_STATUS_OK && A.has_z) st = mem_alloc(ctx, op, &m, &pz, W * H * A.R * A.P * sizeof(float), s);
    free_plan(&pl);
    if (st == SSM_STATUS_OK) {
        A.chunks = (const mc_chunk *)dch, A.seqs = (const mc_seq *)dsq, A.ws_state = (float *)wst;
        A.part_o = (float *)po, A.part_z = (float *)pz;
        st = run_chunks(ctx, op, A, 0, s, var);
    }
    if (st == SSM_STATUS_OK && (want_o || want_z))
        st = launch_partial_reduce(ctx, op, A, (int)d->nchunks, ssmi_cu_view_or_null(&a->dmimo_o), ssmi_cu_view_or_null(&a->dmimo_z),
                                   s);
    return mem_free(ctx, op, &m, s, st);
}

extern "C" ssm_status ssmi_cuda_mamba3_mimo(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                           const ssmi_mimo_dims * d, const ssm_mamba3_mimo_args * a) {
    static const char op[] = "mamba3_mimo";
    ssmi_variant_ran(ctx, "");
    if (d->nseq == 0 || d->nheads == 0) return SSM_STATUS_OK;
    mc_args A;
    memset(&A, 0, sizeof A);
    fill_dims(&A, d);
    const output_variant * var = NULL;
    SSM_FORWARD_IF_ERROR(pick_output(ctx, SSMI_OP_mamba3_mimo, op, A, &var));
    SSM_FORWARD_IF_ERROR(check_grid(ctx, op, d, A.npt));
    A.q = ssmi_cu_view_or_null(&a->q), A.k = ssmi_cu_view_or_null(&a->k), A.v = ssmi_cu_view_or_null(&a->v), A.z = ssmi_cu_view_or_null(&a->z);
    A.q_bias = ssmi_cu_view_or_null(&a->q_bias), A.k_bias = ssmi_cu_view_or_null(&a->k_bias), A.mimo_v = ssmi_cu_view_or_null(&a->mimo_v);
    A.mimo_z = ssmi_cu_view_or_null(&a->mimo_z), A.mimo_o = ssmi_cu_view_or_null(&a->mimo_o), A.d = ssmi_cu_view_or_null(&a->d);
    A.norm_w = ssmi_cu_view_or_null(&a->outproj_norm_weight), A.angles = ssmi_cu_view_or_null(&a->angles);
    A.dt = ssmi_cu_view_or_null(&a->dt), A.trap = ssmi_cu_view_or_null(&a->trap), A.adt = ssmi_cu_view_or_null(&a->adt);
    A.angle_state = ssmi_cu_view_or_null(&a->angle_state), A.ssm_state = ssmi_cu_view_or_null(&a->ssm_state);
    A.k_state = ssmi_cu_view_or_null(&a->k_state), A.v_state = ssmi_cu_view_or_null(&a->v_state);
    A.out = ssmi_cu_view_or_null(&a->out), A.final_angle = ssmi_cu_view_or_null(&a->final_angle_state);
    A.final_ssm = ssmi_cu_view_or_null(&a->final_ssm_state), A.final_k = ssmi_cu_view_or_null(&a->final_k_state);
    A.final_v = ssmi_cu_view_or_null(&a->final_v_state);
    A.has_z = ssmi_present(&a->z), A.has_d = ssmi_present(&a->d), A.fwd = 1;
    A.fused = p->fuse_pregate_norm != 0, A.has_states = d->has_states != 0, A.eps = (float)p->norm_eps;
    A.nw_1d = ssmi_present(&a->outproj_norm_weight) && a->outproj_norm_weight.ndim == 1;
    A.nseq = (int)d->nseq;

    mc_plan      pl;
    ssm_status   st = make_plan(ctx, op, d, &a->cu_seqlens, &pl);
    cudaStream_t s = ssmi_cuda_stream(ctx);
    mc_mem       m;
    m.n = 0;
    void *       dch = NULL, *dsq = NULL, *wst = NULL, *wy = NULL, *wth = NULL, *wcm = NULL, *wsg = NULL, *wmk = NULL;
    const size_t W = (size_t)pl.W, H = (size_t)A.H, BS = (size_t)A.B * (size_t)A.S;
    A.W = pl.W;
    if (st == SSM_STATUS_OK) st = mem_upload(ctx, op, &m, &dch, pl.chunks, sizeof(mc_chunk) * W, s);
    if (st == SSM_STATUS_OK) st = mem_upload(ctx, op, &m, &dsq, pl.seqs, sizeof(mc_seq) * (size_t)pl.nseq, s);
    /* Ŝ and Y: in chunk_states / pregate_y themselves when they have the workspaces' layout, else
     * workspaces (copied out) */
    const bool s_direct = in_place_f32(&a->chunk_states), y_direct = in_place_f32(&a->pregate_y);
    if (st == SSM_STATUS_OK && !s_direct) st = mem_alloc(ctx, op, &m, &wst, W * H * A.N * A.P * sizeof(float), s);
    if (st == SSM_STATUS_OK && !y_direct) st = mem_alloc(ctx, op, &m, &wy, BS * H * A.R * A.P * sizeof(float), s);
    if (st == SSM_STATUS_OK) st = mem_alloc(ctx, op, &m, &wth, BS * H * A.A * sizeof(float), s);
    if (st == SSM_STATUS_OK) st = mem_alloc(ctx, op, &m, &wcm, BS * H * sizeof(float), s);
    if (st == SSM_STATUS_OK) st = mem_alloc(ctx, op, &m, &wsg, W * H * A.A * sizeof(float), s);
    /* the output kernel's marks of a non-finite Y per (chunk, head), for its fix (chunk_gemm.cu) */
    if (st == SSM_STATUS_OK) st = mem_alloc(ctx, op, &m, &wmk, W * H * sizeof(int), s);
    if (st == SSM_STATUS_OK && wmk != NULL)
        st = ssmi_cuda_status(ctx, op, "cudaMemsetAsync (non-finite marks)", cudaMemsetAsync(wmk, 0, W * H * sizeof(int), s));
    free_plan(&pl);
    if (st == SSM_STATUS_OK) {
        A.chunks = (const mc_chunk *)dch, A.seqs = (const mc_seq *)dsq;
        A.ws_state = s_direct ? (float *)a->chunk_states.data : (float *)wst;
        A.ws_y = y_direct ? (float *)a->pregate_y.data : (float *)wy;
        A.ws_theta = (float *)wth, A.ws_cm = (float *)wcm, A.ws_seg = (float *)wsg;
        A.nonfinite = (int *)wmk;
        st = launch_angle_prep(ctx, op, A, s);
    }
    if (st == SSM_STATUS_OK) st = run_chunks(ctx, op, A, 1, s, var);
    if (st == SSM_STATUS_OK) st = launch_output_stage(ctx, op, A, s);
    if (st == SSM_STATUS_OK && ssmi_present(&a->pregate_y) && !y_direct)
        st = ssmi_cuda_dense_copy(ctx, op, &a->pregate_y, A.ws_y, 1, s);
    if (st == SSM_STATUS_OK && ssmi_present(&a->chunk_states) && !s_direct)
        st = ssmi_cuda_dense_copy(ctx, op, &a->chunk_states, A.ws_state, 1, s);
    if (st == SSM_STATUS_OK && (A.final_v.p || A.final_angle.p || A.final_k.p)) st = launch_finals(ctx, op, A, s);
    return mem_free(ctx, op, &m, s, st);
}

extern "C" ssm_status ssmi_cuda_mamba3_mimo_bwd(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                               const ssmi_mimo_dims * d, const ssm_mamba3_mimo_bwd_args * a) {
    static const char op[] = "mamba3_mimo_bwd";
    ssmi_variant_ran(ctx, "");
    if (d->nheads == 0) return SSM_STATUS_OK;
    const bwd_problem   pb = {is16(a->q.dtype) && is16(a->k.dtype) && is16(a->v.dtype)};
    const bwd_variant * var = NULL;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_pick_variant(ctx, SSMI_OP_mamba3_mimo_bwd, kBwdTable, pb, &var));
    SSM_RETURN_IF(var == NULL, ctx, SSM_STATUS_UNSUPPORTED, "%s: no CUDA entry applies", op);
    SSM_RETURN_IF(d->nheads > 65535, ctx, SSM_STATUS_UNSUPPORTED, "%s: H=%lld exceeds the CUDA grid limit 65535", op,
                  (long long)d->nheads);
    mc_args F;
    memset(&F, 0, sizeof F);
    fill_dims(&F, d);
    F.pt = pick_ptile(F.R, F.N, F.P, F.C);
    F.npt = F.pt > 0 ? (F.P + F.pt - 1) / F.pt : 0;
    const output_variant * ov = first_output(F);
    SSM_RETURN_IF(ov == NULL, ctx, SSM_STATUS_UNSUPPORTED, "%s: the chunk tile does not fit in shared memory", op);
    SSM_FORWARD_IF_ERROR(check_grid(ctx, op, d, F.npt));
    F.q = ssmi_cu_view_or_null(&a->q), F.k = ssmi_cu_view_or_null(&a->k), F.v = ssmi_cu_view_or_null(&a->v), F.z = ssmi_cu_view_or_null(&a->z);
    F.q_bias = ssmi_cu_view_or_null(&a->q_bias), F.k_bias = ssmi_cu_view_or_null(&a->k_bias), F.mimo_v = ssmi_cu_view_or_null(&a->mimo_v);
    F.mimo_z = ssmi_cu_view_or_null(&a->mimo_z), F.mimo_o = ssmi_cu_view_or_null(&a->mimo_o), F.d = ssmi_cu_view_or_null(&a->d);
    F.norm_w = ssmi_cu_view_or_null(&a->outproj_norm_weight), F.angles = ssmi_cu_view_or_null(&a->angles);
    F.dt = ssmi_cu_view_or_null(&a->dt), F.trap = ssmi_cu_view_or_null(&a->trap), F.adt = ssmi_cu_view_or_null(&a->adt);
    F.angle_state = ssmi_cu_view_or_null(&a->angle_state), F.ssm_state = ssmi_cu_view_or_null(&a->ssm_state);
    F.k_state = ssmi_cu_view_or_null(&a->k_state), F.v_state = ssmi_cu_view_or_null(&a->v_state);
    F.has_z = ssmi_present(&a->z), F.has_d = ssmi_present(&a->d), F.fwd = 1;
    F.fused = p->fuse_pregate_norm != 0, F.has_states = d->has_states != 0, F.eps = (float)p->norm_eps;
    F.nw_1d = ssmi_present(&a->outproj_norm_weight) && a->outproj_norm_weight.ndim == 1;
    F.nseq = (int)d->nseq;

    mb_args B;
    memset(&B, 0, sizeof B);
    B.q = F.q, B.k = F.k, B.v = F.v, B.z = F.z, B.dout = ssmi_cu_view_or_null(&a->dout), B.q_bias = F.q_bias;
    B.k_bias = F.k_bias, B.mimo_v = F.mimo_v, B.mimo_z = F.mimo_z, B.mimo_o = F.mimo_o, B.d = F.d;
    B.norm_w = F.norm_w, B.angles = F.angles, B.dt = F.dt, B.trap = F.trap, B.k_state = F.k_state;
    B.v_state = F.v_state, B.dfinal_angle = ssmi_cu_view_or_null(&a->dfinal_angle_state);
    B.dfinal_ssm = ssmi_cu_view_or_null(&a->dfinal_ssm_state), B.dfinal_k = ssmi_cu_view_or_null(&a->dfinal_k_state);
    B.dfinal_v = ssmi_cu_view_or_null(&a->dfinal_v_state), B.dq = ssmi_cu_view_or_null(&a->dq), B.dk = ssmi_cu_view_or_null(&a->dk);
    B.dv = ssmi_cu_view_or_null(&a->dv), B.dz = ssmi_cu_view_or_null(&a->dz), B.dadt = ssmi_cu_view_or_null(&a->dadt);
    B.ddt = ssmi_cu_view_or_null(&a->ddt), B.dtrap = ssmi_cu_view_or_null(&a->dtrap), B.dangles = ssmi_cu_view_or_null(&a->dangles);
    B.dangle_state = ssmi_cu_view_or_null(&a->dangle_state), B.dssm_state = ssmi_cu_view_or_null(&a->dssm_state);
    B.dk_state = ssmi_cu_view_or_null(&a->dk_state), B.dv_state = ssmi_cu_view_or_null(&a->dv_state);
    B.B = F.B, B.S = F.S, B.H = F.H, B.G = F.G, B.R = F.R, B.N = F.N, B.P = F.P, B.A = F.A, B.C = F.C;
    B.nseq = F.nseq, B.has_z = F.has_z, B.has_d = F.has_d, B.reduce = F.reduce, B.fused = F.fused;
    B.has_states = F.has_states, B.nw_1d = F.nw_1d, B.eps = F.eps, B.planes = var->planes;

    mc_plan      pl;
    ssm_status   st = make_plan(ctx, op, d, &a->cu_seqlens, &pl);
    cudaStream_t s = ssmi_cuda_stream(ctx);
    mc_mem       m;
    m.n = 0;
    void * dch = NULL, *dsq = NULL, *ws = NULL;
    F.W = B.W = pl.W;
    if (st == SSM_STATUS_OK) st = mem_upload(ctx, op, &m, &dch, pl.chunks, sizeof(mc_chunk) * (size_t)pl.W, s);
    if (st == SSM_STATUS_OK) st = mem_upload(ctx, op, &m, &dsq, pl.seqs, sizeof(mc_seq) * (size_t)pl.nseq, s);
    free_plan(&pl);
    const bool   s_direct = in_place_f32(&a->chunk_states), y_direct = in_place_f32(&a->pregate_y);
    const size_t floats = bwd_layout(NULL, F, &F, &B, !s_direct, !y_direct);
    if (st == SSM_STATUS_OK) st = mem_alloc(ctx, op, &m, &ws, floats * sizeof(float), s);
    if (st == SSM_STATUS_OK) {
        bwd_layout((float *)ws, F, &F, &B, !s_direct, !y_direct);
        if (s_direct) F.ws_state = (float *)a->chunk_states.data; /* read only: its kernels are skipped */
        if (y_direct) F.ws_y = (float *)a->pregate_y.data;
        F.chunks = B.chunks = (const mc_chunk *)dch;
        F.seqs = B.seqs = (const mc_seq *)dsq;
        B.theta = F.ws_theta, B.cm = F.ws_cm, B.state = F.ws_state, B.y = F.ws_y;
        st = run_bwd(ctx, op, F, ov, B, a, s);
    }
    return mem_free(ctx, op, &m, s, st);
}

extern "C" ssm_status ssmi_cuda_mamba3_mimo_step(ssm_context * ctx, const ssm_mamba3_mimo_params * p,
                                                const ssmi_mimo_dims * d, const ssm_mamba3_mimo_step_args * a) {
    static const char op[] = "mamba3_mimo_step";
    ssmi_variant_ran(ctx, "");
    if (d->batch == 0 || d->nheads == 0) return SSM_STATUS_OK;
    SSM_RETURN_IF(d->nheads > 65535, ctx, SSM_STATUS_UNSUPPORTED, "%s: H=%lld exceeds the CUDA grid limit 65535", op,
                  (long long)d->nheads);
    st_args A;
    memset(&A, 0, sizeof A);
    A.q = ssmi_cu_view_or_null(&a->q), A.k = ssmi_cu_view_or_null(&a->k), A.v = ssmi_cu_view_or_null(&a->v), A.z = ssmi_cu_view_or_null(&a->z);
    A.adt = ssmi_cu_view_or_null(&a->adt), A.dt = ssmi_cu_view_or_null(&a->dt), A.trap = ssmi_cu_view_or_null(&a->trap);
    A.angles = ssmi_cu_view_or_null(&a->angles), A.q_bias = ssmi_cu_view_or_null(&a->q_bias), A.k_bias = ssmi_cu_view_or_null(&a->k_bias);
    A.mimo_v = ssmi_cu_view_or_null(&a->mimo_v), A.mimo_z = ssmi_cu_view_or_null(&a->mimo_z), A.mimo_o = ssmi_cu_view_or_null(&a->mimo_o);
    A.d = ssmi_cu_view_or_null(&a->d), A.norm_w = ssmi_cu_view_or_null(&a->outproj_norm_weight);
    A.angle_state = ssmi_cu_view_or_null(&a->angle_state), A.ssm_state = ssmi_cu_view_or_null(&a->ssm_state);
    A.k_state = ssmi_cu_view_or_null(&a->k_state), A.v_state = ssmi_cu_view_or_null(&a->v_state), A.out = ssmi_cu_view_or_null(&a->out);
    A.final_angle = ssmi_cu_view_or_null(&a->final_angle_state), A.final_ssm = ssmi_cu_view_or_null(&a->final_ssm_state);
    A.final_k = ssmi_cu_view_or_null(&a->final_k_state), A.final_v = ssmi_cu_view_or_null(&a->final_v_state);
    A.H = (int)d->nheads, A.G = (int)d->ngroups, A.R = (int)d->rank, A.N = (int)d->dstate, A.P = (int)d->headdim;
    A.A = (int)d->nangles, A.reduce = d->reduce_o != 0, A.has_z = ssmi_present(&a->z), A.has_d = ssmi_present(&a->d);
    A.fused = p->fuse_pregate_norm != 0, A.eps = (float)p->norm_eps;
    A.nw_1d = ssmi_present(&a->outproj_norm_weight) && a->outproj_norm_weight.ndim == 1;
    A.vec = vec_ok(&a->ssm_state, d->dstate) && vec_ok(&a->final_ssm_state, d->dstate);
    A.inter_angle = ssmi_cu_view_or_null(&a->intermediate_angle_state);
    A.inter_ssm = ssmi_cu_view_or_null(&a->intermediate_ssm_state);
    A.inter_k = ssmi_cu_view_or_null(&a->intermediate_k_state);
    A.inter_v = ssmi_cu_view_or_null(&a->intermediate_v_state);
    const size_t smem = (size_t)step_smem_floats(A.R, A.N, A.P, A.A) * sizeof(float);
    SSM_RETURN_IF(smem > (size_t)kSmemLimit, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: R=%d with N=%d, P=%d needs %zu bytes of shared memory (limit %d)", op, A.R, A.N, A.P, smem,
                  kSmemLimit);
    const step_problem   pb = {a, d};
    A.general = general_form(pb);
    const step_variant * var = NULL;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_pick_variant(ctx, SSMI_OP_mamba3_mimo_step, kStepTable, pb, &var));
    return var->launch(ctx, op, pb, A, smem, ssmi_cuda_stream(ctx));
}

/* The selection tables, reported to the variant registry (common/select.cu). The two chunked
 * operators share the output-tile table. */
extern "C" int32_t ssmi_cuda_variants_mamba3_mimo_bwd_fwd(int32_t i, ssmi_variant_info * out) {
    return ssmi_cuda_report_variants(kOutputTable, i, out);
}

extern "C" int32_t ssmi_cuda_variants_mamba3_mimo(int32_t i, ssmi_variant_info * out) {
    return ssmi_cuda_report_variants(kOutputTable, i, out);
}

extern "C" int32_t ssmi_cuda_variants_mamba3_mimo_step(int32_t i, ssmi_variant_info * out) {
    return ssmi_cuda_report_variants(kStepTable, i, out);
}

extern "C" int32_t ssmi_cuda_variants_mamba3_mimo_bwd(int32_t i, ssmi_variant_info * out) {
    return ssmi_cuda_report_variants(kBwdTable, i, out);
}
