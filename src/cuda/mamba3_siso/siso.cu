/*
 * siso.cu — CUDA Mamba-3 SISO, the host side: the chunked core forward (cumulative angles in,
 * spec §2.3, §3.6), the combined forward (raw angles in, the angle cumsum fused, spec §2.4) and the
 * decode step (spec §2.6, §3.4): the chunk plan, the workspace, the selection tables and the entry
 * points. The kernels are in the files named by technique (siso.cuh lists them).
 *
 * Forward. The work is cut on the host into chunks of kC = 64 tokens that restart at every
 * sequence start (a batch row, or a varlen sequence); the chunked form is exact for any cut (spec
 * §3.6), so params->chunk_size is not used. In stream order:
 *   1. (combined op) the angle sums per (chunk, head, angle) and the angle scan per (sequence, head,
 *      angle): θ entering each chunk and the final angle state (prep.cu);
 *   2. the entry of the selection table below: the chunk state contributions (V×K, fp32, and the
 *      chunk's c_last) into the workspace, the state pass (S_enter of every chunk, the final ssm
 *      state; or both at once, the chained state), the outputs (and the final k / v states from a
 *      sequence's last chunk), every output kernel marking the (chunk, head) pairs where it stores a
 *      non-finite value;
 *   3. the non-finite fix: the marked pairs' outputs recomputed without the products' masked-out
 *      terms (0·v of a later token is NaN), so that a non-finite input reaches only the outputs the
 *      formula gives it (portable.cu); unmarked blocks exit at once;
 *   4. the final k / v states of empty sequences.
 * chunk_states (kept for the backward): the S_enter of every (chunk_size / kC)-th chunk of each
 * sequence, so chunk_size must be a multiple of kC (UNSUPPORTED otherwise); at chunk_size = kC an
 * F32 dense chunk_states is the states workspace itself (states_in_place), else chunk_states_kernel
 * copies them after step 3.
 * No decay exponent is clamped: e^{c_i−c_j} is evaluated as written. Any strides (stride 0 too,
 * e.g. angles broadcast over heads) and any float dtype per tensor: every load goes through the
 * strides and converts, with faster loads where a layout allows them. Limits: K ≤ 256
 * (UNSUPPORTED beyond), H ≤ 65535, sequences ≤ 65535. Results are bitwise identical across runs
 * (no float atomics, fixed summation orders; the marks are integer ORs).
 *
 * Selection. Each operator has one table: an ordered list of entries {name, why, applies, pays,
 * launch}. applies says whether the entry can run the problem on the current device (dtype,
 * layout, K, the build's code, shared memory); pays, where present, is the measured rule that the
 * default adds. The default is the first entry that applies and pays; a context may force an entry
 * by name (ssm_context_set_variant), which then runs if it applies and fails with UNSUPPORTED
 * otherwise. The entry that ran is recorded for ssm_context_last_variant.
 */
#include <stdlib.h>

#include "../ssmi_cuda.h"
#include "siso.cuh"
#include "step.cuh"

using namespace ssmi_siso;

namespace {

/* ---- shared by the forward and the step ------------------------------------------------------------ */

int compute_mode(int32_t dtype) { return dtype == SSM_DTYPE_F16 ? M_F16 : dtype == SSM_DTYPE_BF16 ? M_BF16 : M_F32; }

/* The tensors of every SISO operator in the order of the forward's and the step's argument lists
 * (the core forward has no angle states, the step no pregate_y or chunk_states: those are NULL). */
const int          kTensors = 22;
const char * const kTensorNames[kTensors] = {"q",
                                             "k",
                                             "v",
                                             "adt",
                                             "dt",
                                             "trap",
                                             "q_bias",
                                             "k_bias",
                                             "angles",
                                             "d",
                                             "z",
                                             "angle_state",
                                             "ssm_state",
                                             "k_state",
                                             "v_state",
                                             "out",
                                             "final_angle_state",
                                             "final_ssm_state",
                                             "final_k_state",
                                             "final_v_state",
                                             "pregate_y",
                                             "chunk_states"};

ssm_status check_pointers(ssm_context * ctx, const char * op, const ssm_tensor * const * ts) {
    for (int i = 0; i < kTensors; ++i)
        if (ts[i] != NULL) SSM_FORWARD_IF_ERROR(ssmi_cuda_check_pointer(ctx, op, kTensorNames[i], ts[i]));
    return SSM_STATUS_OK;
}

/* One selection table's entries as the registry reports them (common/select.cu). */
template <class E, int N>
int32_t report(const E (&table)[N], int32_t i, ssmi_variant_info * out) {
    if (out != NULL && i >= 0 && i < N) {
        out->name = table[i].name;
        out->why = table[i].why;
    }
    return N;
}

/* The entry to run: the forced one (UNSUPPORTED where it does not apply) or the first that applies
 * and pays. PB: the problem type of the table. */
template <class E, int N, class PB>
ssm_status choose(ssm_context * ctx, ssmi_op op, const E (&table)[N], const PB & pb, const E ** chosen) {
    const int32_t forced = ssmi_variant_forced(ctx, op);
    if (forced >= 0 && forced < N) {
        if (!table[forced].applies(pb))
            return ssmi_variant_not_applicable(ctx, op, table[forced].name, table[forced].rule);
        *chosen = &table[forced];
        return SSM_STATUS_OK;
    }
    for (int i = 0; i < N; ++i)
        if (table[i].applies(pb) && (table[i].pays == NULL || table[i].pays(pb))) {
            *chosen = &table[i];
            return SSM_STATUS_OK;
        }
    return ssmi_error(ctx, SSM_STATUS_INTERNAL, "%s: no entry of the CUDA selection table applies", ssmi_op_name(op));
}

/* ---- the forward: the chunk plan -------------------------------------------------------------------- */

struct m3_plan {
    m3_chunk * chunks;
    m3_seg *   segs;
    long long  W, NS;
};

void plan_free(m3_plan * pl) {
    free(pl->chunks);
    free(pl->segs);
    memset(pl, 0, sizeof *pl);
}

/* Chunks of kC tokens restarting at every sequence start (batch rows, or cu_seqlens). */
ssm_status plan_fwd(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d, const ssm_tensor * cu,
                    m3_plan * pl) {
    memset(pl, 0, sizeof *pl);
    const int64_t NS = d->nseq, S = d->seqlen;
    const int64_t maxW = (d->varlen ? (S + kC - 1) / kC + NS : d->batch * ((S + kC - 1) / kC));
    SSM_RETURN_IF(maxW > INT32_MAX / 2 || NS > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: %lld sequences / %lld chunks exceed the CUDA backend's limits (65535 sequences)", op,
                  (long long)NS, (long long)maxW);
    pl->chunks = (m3_chunk *)malloc(sizeof(m3_chunk) * (size_t)(maxW > 0 ? maxW : 1));
    pl->segs = (m3_seg *)malloc(sizeof(m3_seg) * (size_t)(NS > 0 ? NS : 1));
    if (pl->chunks == NULL || pl->segs == NULL) {
        plan_free(pl);
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the chunk plan", op);
    }
    pl->NS = NS;
    int64_t srow = 0; /* chunk_states rows: chunks of params->chunk_size tokens */
    for (int64_t s = 0; s < NS; ++s) {
        int64_t row = s, t0 = 0, len = S;
        if (d->varlen) {
            row = 0;
            t0 = idx_at(cu, s);
            len = idx_at(cu, s + 1) - t0;
        }
        m3_seg * sg = &pl->segs[s];
        sg->t0 = t0;
        sg->row = (int)row;
        sg->len = (int)len;
        sg->first = (int)pl->W;
        sg->count = (int)((len + kC - 1) / kC);
        sg->srow = (int)srow;
        srow += (len + d->chunk - 1) / d->chunk;
        for (int64_t c = 0; c < sg->count; ++c) {
            m3_chunk * ch = &pl->chunks[pl->W++];
            memset(ch, 0, sizeof *ch);
            ch->t0 = t0 + c * kC;
            ch->row = (int)row;
            ch->len = (int)(len - c * kC < kC ? len - c * kC : kC);
            ch->seq = (int)s;
            ch->has_next = c * kC + ch->len < len;
            ch->last = c == sg->count - 1;
            ch->first = c == 0;
        }
    }
    return SSM_STATUS_OK;
}

/* Workspace: chunks | segs | lastcum (W,H) | theta0 (W,H,A) | states (W,H,V,K; not there when they go
 * straight into chunk_states: states_in_place) | prep (W,H, prep_floats(A), the entries that run
 * chunk_prep_kernel) | the non-finite marks (W,H ints). */
struct fwd_ws {
    size_t chunks, segs, lastcum, theta0, states, prep, prep_bytes, marks, total;
};
fwd_ws fwd_ws_layout(const ssmi_mamba3_dims * d, const m3_plan * pl, int fused, bool prep, bool own_states) {
    fwd_ws       l;
    size_t       o = 0;
    const size_t WH = (size_t)pl->W * (size_t)d->nheads;
    l.chunks = o;
    o += align128(sizeof(m3_chunk) * (size_t)pl->W);
    l.segs = o;
    o += align128(sizeof(m3_seg) * (size_t)pl->NS);
    l.lastcum = o;
    o += align128(sizeof(float) * WH);
    l.theta0 = o;
    o += fused ? align128(sizeof(float) * WH * (size_t)d->nangles) : 0;
    l.states = o;
    o += own_states ? align128(sizeof(float) * WH * (size_t)d->dv * (size_t)d->dk) : 0;
    l.prep = o;
    l.prep_bytes = prep ? align128(sizeof(float) * WH * (size_t)prep_floats((int)d->nangles)) : 0;
    o += l.prep_bytes;
    l.marks = o;
    o += align128(sizeof(int) * WH);
    l.total = o;
    return l;
}

/* chunk_states with the states workspace's layout (chunks of kC tokens, F32, dense, 256-byte aligned as
 * the kernels' 16-byte state rows need): the entry writes the states there, with no copy. */
bool states_in_place(const ssmi_mamba3_dims * d, const ssm_tensor * t) {
    return t != NULL && ssmi_present(t) && d->chunk == kC && ssmi_cu_dense_f32(t, 256);
}

/* Everything the two forward entry points share, from tensor views. */
struct fwd_io {
    const ssm_tensor *q, *k, *v, *adt, *dt, *trap, *qb, *kb, *ang, *d, *z;
    const ssm_tensor *ang_in, *ssm_in, *k_in, *v_in, *cu;
    const ssm_tensor *out, *fin_ang, *fin_ssm, *fin_k, *fin_v, *ypre, *chst;
    int               fused;
};

ssm_status check_limits(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d) {
    SSM_RETURN_IF(d->dk > kMaxK, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: K=%lld is larger than the CUDA backend's limit of %d", op, (long long)d->dk, kMaxK);
    SSM_RETURN_IF(d->nheads > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: H=%lld is larger than the CUDA backend's limit of 65535", op, (long long)d->nheads);
    SSM_RETURN_IF(d->dv > INT32_MAX / 2 || d->dv * d->dk > INT32_MAX / 4 || (d->dv + kTV - 1) / kTV > 65535, ctx,
                  SSM_STATUS_UNSUPPORTED, "%s: V=%lld is too large for the CUDA backend", op, (long long)d->dv);
    SSM_RETURN_IF(d->nheads * d->dv * d->dk > INT32_MAX, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: H·V·K=%lld is too large for the CUDA backend", op, (long long)(d->nheads * d->dv * d->dk));
    return SSM_STATUS_OK;
}

/* ---- the forward: the selection table ----------------------------------------------------------------- */

/* What the forward entries are judged on: the kernel arguments (dims, layout flags), the compute
 * mode (v's dtype) and the device. */
struct fwd_problem {
    const m3_fwd_args * P;
    int                 mode;
    ssmi_cuda_props     dev;
};

/* The chained state pays once its chains about fill the SMs: a chain's time is its chunk count
 * times a per-chunk latency, which grows little from one to two chains on an SM, while the
 * mma.sync state kernel and the pass take time in proportion to all the work (kChain64PerSm in
 * siso.cuh: where 32-column chains are faster). Fastest form at each of the nine shapes measured
 * in docs/notes/cuda-siso-kernels.md (H200). */
const double kChainPerSm = 0.9;

/* fp16/bf16 v and K ≤ 128: the tensor-core kernels (state by mma.sync and the output kernels of
 * output_mma.cu / output_wgmma.cu) serve every layout and feature. */
bool tc_applies(const fwd_problem & pb) { return pb.mode != M_F32 && pb.P->K <= kFastMaxK; }

/* The wgmma output kernel: where the 8-warp mma.sync one applies, with q, k, v of v's dtype in
 * 16-byte rows (its cp.async tiles), K = 64 or 128 (whole swizzle atoms), a build with sm_90a code,
 * an sm_90 device, no portable mode (ssmi_cuda_props::wgmma) and its shared memory within the
 * opt-in limit. */
bool wgmma_applies(const fwd_problem & pb) {
#if SSMI_CUDA_WGMMA
    const m3_fwd_args & P = *pb.P;
    return tc_applies(pb) && out_mma_applies(P) && P.vq && P.vk && P.vv && (P.K == 64 || P.K == 128) &&
           pb.dev.wgmma && wgmma_smem(P.K / 64, P.A, P.sct != 0).total <= pb.dev.smem_optin;
#else
    (void)pb;
    return false;
#endif
}

/* The chains of KS columns: one block per (sequence, head, V tile, KS of the K columns). */
long long chain_count(const m3_fwd_args & P, int KS) {
    return (long long)P.NS * P.H * ((P.V + kTV - 1) / kTV) * (P.K / KS);
}
bool chain_applies(const fwd_problem & pb, int KS) {
    const m3_fwd_args & P = *pb.P;
    const long long     vt = (P.V + kTV - 1) / kTV;
    return wgmma_applies(pb) && P.NS > 0 && P.K % KS == 0 && pb.dev.sms > 0 && vt * (P.K / KS) <= 65535 &&
           chain_smem(P.A, KS).total <= pb.dev.smem_optin;
}
bool chain64_applies(const fwd_problem & pb) { return chain_applies(pb, 64); }
bool chain32_applies(const fwd_problem & pb) { return chain_applies(pb, 32); }
bool chain64_pays(const fwd_problem & pb) {
    return pb.P->K % 64 == 0 && (double)chain_count(*pb.P, 64) >= kChain64PerSm * pb.dev.sms;
}
bool chain32_pays(const fwd_problem & pb) {
    return !chain64_pays(pb) && (double)chain_count(*pb.P, 32) >= kChainPerSm * pb.dev.sms;
}
bool mma_applies(const fwd_problem & pb) { return tc_applies(pb) && out_mma_applies(*pb.P); }
bool any_applies(const fwd_problem &) { return true; }

/* The launches of the entries (W > 0 chunks). */
ssm_status launch_chained(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode, int KS) {
    SSM_FORWARD_IF_ERROR(launch_chunk_prep(ctx, op, P, W, mode));
    SSM_FORWARD_IF_ERROR(launch_state_chain(ctx, op, P, mode, KS));
    return launch_output_wgmma(ctx, op, P, W, mode);
}
ssm_status launch_chain64(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode) {
    return launch_chained(ctx, op, P, W, mode, 64);
}
ssm_status launch_chain32(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode) {
    return launch_chained(ctx, op, P, W, mode, 32);
}
ssm_status launch_wgmma(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode) {
    SSM_FORWARD_IF_ERROR(launch_chunk_prep(ctx, op, P, W, mode));
    SSM_FORWARD_IF_ERROR(launch_state_mma(ctx, op, P, W, mode, true));
    if (P.NS > 0) SSM_FORWARD_IF_ERROR(launch_pass(ctx, op, P));
    return launch_output_wgmma(ctx, op, P, W, mode);
}
ssm_status launch_mma(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode) {
    SSM_FORWARD_IF_ERROR(launch_state_mma(ctx, op, P, W, mode, false));
    if (P.NS > 0) SSM_FORWARD_IF_ERROR(launch_pass(ctx, op, P));
    return launch_output_mma(ctx, op, P, W, mode);
}
ssm_status launch_mma_any(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode) {
    SSM_FORWARD_IF_ERROR(launch_state_mma(ctx, op, P, W, mode, false));
    if (P.NS > 0) SSM_FORWARD_IF_ERROR(launch_pass(ctx, op, P));
    return launch_output_mma_any(ctx, op, P, W, mode);
}

struct fwd_variant {
    const char * name;
    const char * why;
    bool (*applies)(const fwd_problem &);
    bool (*pays)(const fwd_problem &); /* the default's measured rule on top of applies; NULL: none */
    const char * rule;                 /* what applies asks: the message of a forced entry that does not apply */
    bool         prep;                 /* runs chunk_prep_kernel: the workspace holds its slots */
    ssm_status (*launch)(ssm_context * ctx, const char * op, const m3_fwd_args & P, long long W, int mode);
};

#define SISO_WGMMA_RULE                                                                                       \
    "fp16/bf16 q, k, v and outputs of v's dtype in 16-byte rows (z of that kind or none), K = 64 or 128, an " \
    "sm_90 device, a build with sm_90a code, not a portable context, shared memory within the device's limit"

/* The forward's table (mamba3_siso_fwd and mamba3_siso). */
const fwd_variant kFwdTable[] = {
    {"chain64",
     "chunk prep, the state chained over the chunks in blocks of 64 K columns (no pass), output by wgmma; by "
     "default where those blocks give >= 1.5 per SM",
     chain64_applies, chain64_pays, SISO_WGMMA_RULE ", K % 64 == 0, at least one sequence", true, launch_chain64},
    {"chain32",
     "chunk prep, the state chained over the chunks in blocks of 32 K columns (twice the chains of chain64, each "
     "with half its K work), output by wgmma; by default where they give >= 0.9 per SM and chain64 does not pay",
     chain32_applies, chain32_pays, SISO_WGMMA_RULE ", at least one sequence", true, launch_chain32},
    {"wgmma",
     "chunk prep, state by mma.sync and the state pass, output by wgmma (Hopper): where the chained state has too "
     "few chains to fill the SMs",
     wgmma_applies, NULL, SISO_WGMMA_RULE, true, launch_wgmma},
    {"mma",
     "state by mma.sync and the state pass, output by mma.sync in 8 warps with the shared-memory epilogue: fp16/bf16 "
     "v, K <= 128, outputs of v's dtype in 16-byte rows (no wgmma: another GPU or build, K not 64 or 128, q/k/v "
     "rows that cp.async cannot read)",
     mma_applies, NULL, "fp16/bf16 v, K <= 128, outputs of v's dtype in 16-byte rows, z of that kind or none", false,
     launch_mma},
    {"mma_any_layout",
     "state by mma.sync and the state pass, output by mma.sync in 4 warps with a per-element epilogue: fp16/bf16 v, "
     "K <= 128, outputs of any dtype or layout (f32 outputs, strided z)",
     tc_applies, NULL, "fp16/bf16 v, K <= 128", false, launch_mma_any},
    {"portable",
     "block products through shared memory (WMMA for fp16/bf16, FFMA for fp32): every dtype, K <= 256 (f32 v, "
     "K > 128)",
     any_applies, NULL, "", false, launch_portable},
};

/* ---- the forward: the run ----------------------------------------------------------------------------- */

/* The kernel arguments that do not point into the workspace, and the layout flags the table reads. */
m3_fwd_args fwd_args(const ssmi_mamba3_dims * d, const fwd_io & io, const m3_plan * pl, int mode) {
    m3_fwd_args P;
    memset(&P, 0, sizeof P);
    P.H = (int)d->nheads, P.G = (int)(d->nheads / d->nheads_qk), P.K = (int)d->dk, P.Kp = round16((int)d->dk);
    P.V = (int)d->dv, P.A = (int)d->nangles, P.NS = (int)pl->NS;
    P.fused = io.fused;
    P.has_d = ssmi_present(io.d);
    P.has_z = ssmi_present(io.z);
    P.has_states = ssmi_present(io.ssm_in);
    P.q = ssmi_cu_view_of(io.q), P.k = ssmi_cu_view_of(io.k), P.v = ssmi_cu_view_of(io.v);
    P.adt = ssmi_cu_view_of(io.adt), P.dt = ssmi_cu_view_of(io.dt), P.trap = ssmi_cu_view_of(io.trap);
    P.qb = ssmi_cu_view_of(io.qb), P.kb = ssmi_cu_view_of(io.kb), P.ang = ssmi_cu_view_of(io.ang);
    if (P.has_d) P.d = ssmi_cu_view_of(io.d);
    if (P.has_z) P.z = ssmi_cu_view_of(io.z);
    if (P.has_states) {
        P.ssm_in = ssmi_cu_view_of(io.ssm_in), P.k_in = ssmi_cu_view_of(io.k_in), P.v_in = ssmi_cu_view_of(io.v_in);
        if (io.fused) P.ang_in = ssmi_cu_view_of(io.ang_in);
    }
    P.out = out_of(io.out);
    P.fin_ssm = out_of(io.fin_ssm), P.fin_k = out_of(io.fin_k), P.fin_v = out_of(io.fin_v);
    if (io.fused) P.fin_ang = out_of(io.fin_ang);
    P.ypre = out_of(io.ypre);
    P.vy = P.ypre.present && io.ypre->dtype == SSM_DTYPE_F32 && ssmi_cu_vec_pairs(io.ypre, d->dv);
    if (io.chst != NULL) P.chst = out_of(io.chst);
    P.chm = (int)(d->chunk / kC);
    /* 16-byte angle rows (angle sums, θ of the tensor-core kernels): 16-bit v, angles of its dtype;
     * A ≤ 64 keeps a chunk's pieces within load_angle_rows' registers */
    P.vang = mode != M_F32 && P.A > 0 && P.A <= 64 && ssmi_cu_vec_rows(io.ang, io.v->dtype, d->nangles);
    /* the angle sums of the 16-bit paths read fp32 angles in 16-byte pieces too */
    P.fang = !P.vang && mode != M_F32 && P.A > 0 && ssmi_cu_vec_rows(io.ang, SSM_DTYPE_F32, d->nangles);
    if (mode != M_F32 && d->dk <= kFastMaxK) { /* the layouts the tensor-core kernels read faster */
        const int32_t T = io.v->dtype;
        P.vq = ssmi_cu_vec_rows(io.q, T, d->dk);
        P.vk = ssmi_cu_vec_rows(io.k, T, d->dk);
        P.vv = ssmi_cu_vec_rows(io.v, T, d->dv);
        P.vz = P.has_z && io.z->dtype == T && ssmi_cu_vec_pairs(io.z, d->dv);
        P.vout = (io.out->dtype == T || io.out->dtype == SSM_DTYPE_F32) && ssmi_cu_vec_pairs(io.out, d->dv);
        P.vz16 = P.has_z && ssmi_cu_vec_rows(io.z, T, d->dv);
        P.vo16 = ssmi_cu_vec_rows(io.out, T, d->dv);
        /* the sin/cos table only while two 4-warp output blocks still fit on an SM (228 KB of shared
         * memory on sm_90, 1 KB of it reserved per block): A ≤ 32 at K = 128 */
        P.sct = P.A > 0 && 2 * (fast_smem<M_BF16>(P.Kp, P.A, true, false, true).total + 1024) <= (size_t)228 * 1024;
    }
    return P;
}

/* The plan and the workspace pointers into P, then the kernels of the entry e. */
ssm_status fwd_launch(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d, const fwd_io & io,
                      const m3_plan * pl, unsigned char * ws, m3_fwd_args P, int mode, const fwd_variant * e) {
    const bool         direct = states_in_place(d, io.chst);
    const fwd_ws       l = fwd_ws_layout(d, pl, io.fused, e->prep, !direct);
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    /* Pageable sources: cudaMemcpyAsync returns once they are staged, so the plan may be freed. */
    if (pl->W > 0)
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
            ctx, op, "cudaMemcpyAsync (chunk plan)",
            ssmi_cuda_memcpy_async(ws + l.chunks, pl->chunks, sizeof(m3_chunk) * pl->W, cudaMemcpyHostToDevice, s)));
    SSM_FORWARD_IF_ERROR(
        ssmi_cuda_status(ctx, op, "cudaMemcpyAsync (sequence plan)",
                         ssmi_cuda_memcpy_async(ws + l.segs, pl->segs, sizeof(m3_seg) * pl->NS, cudaMemcpyHostToDevice, s)));
    P.chunks = (const m3_chunk *)(ws + l.chunks);
    P.segs = (const m3_seg *)(ws + l.segs);
    P.states = direct ? (float *)io.chst->data : (float *)(ws + l.states);
    P.lastcum = (float *)(ws + l.lastcum);
    P.theta0 = io.fused ? (float *)(ws + l.theta0) : nullptr;
    P.prep = l.prep_bytes > 0 ? (float *)(ws + l.prep) : nullptr;
    P.nonfinite = (int *)(ws + l.marks);
    if (io.fused && P.A > 0) SSM_FORWARD_IF_ERROR(launch_angles(ctx, op, P, pl->W, mode));
    if (pl->W > 0) {
        /* the entry's output kernels mark the (chunk, head) pairs with a non-finite output; the fix
         * recomputes those without the products' 0·v of later tokens */
        SSM_FORWARD_IF_ERROR(ssmi_cuda_status(
            ctx, op, "cudaMemsetAsync (non-finite marks)",
            cudaMemsetAsync(P.nonfinite, 0, sizeof(int) * (size_t)pl->W * (size_t)d->nheads, s)));
        SSM_FORWARD_IF_ERROR(e->launch(ctx, op, P, pl->W, mode));
        SSM_FORWARD_IF_ERROR(launch_nonfinite_fix(ctx, op, P, pl->W, mode));
        if (P.chst.present && !direct) SSM_FORWARD_IF_ERROR(launch_chunk_states(ctx, op, P, pl->W));
    } else /* no tokens: the pass carries the initial states to the finals */
        SSM_FORWARD_IF_ERROR(launch_pass(ctx, op, P));
    if (P.fin_k.present || P.fin_v.present) SSM_FORWARD_IF_ERROR(launch_empty(ctx, op, P));
    return SSM_STATUS_OK;
}

ssm_status run_fwd(ssm_context * ctx, ssmi_op opid, const ssmi_mamba3_dims * d, const fwd_io & io) {
    const char * op = ssmi_op_name(opid);
    SSM_FORWARD_IF_ERROR(check_limits(ctx, op, d));
    SSM_RETURN_IF(io.chst != NULL && ssmi_present(io.chst) && d->chunk % kC != 0, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: chunk_states needs params->chunk_size a multiple of %d on the CUDA backend (it is %lld)", op,
                  kC, (long long)d->chunk);
    {
        const ssm_tensor * ts[kTensors] = {io.q,    io.k,   io.v,       io.adt,     io.dt,     io.trap,   io.qb,
                                           io.kb,   io.ang, io.d,       io.z,       io.ang_in, io.ssm_in, io.k_in,
                                           io.v_in, io.out, io.fin_ang, io.fin_ssm, io.fin_k,  io.fin_v,
                                           io.ypre, io.chst};
        SSM_FORWARD_IF_ERROR(check_pointers(ctx, op, ts));
    }
    ssmi_variant_ran(ctx, "");
    if (d->nseq == 0 || d->nheads == 0) return SSM_STATUS_OK;
    const int   mode = compute_mode(io.v->dtype);
    fwd_problem pb;
    pb.mode = mode;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_current_props(ctx, op, &pb.dev));
    m3_plan pl;
    SSM_FORWARD_IF_ERROR(plan_fwd(ctx, op, d, io.cu, &pl));
    const m3_fwd_args   P = fwd_args(d, io, &pl, mode);
    const fwd_variant * e = NULL;
    pb.P = &P;
    ssm_status st = choose(ctx, opid, kFwdTable, pb, &e);
    void *     ws = NULL;
    if (st == SSM_STATUS_OK) {
        const fwd_ws       l = fwd_ws_layout(d, &pl, io.fused, e->prep, !states_in_place(d, io.chst));
        const cudaStream_t s = ssmi_cuda_stream(ctx);
        st = ssmi_cuda_status(ctx, op, "device allocation (workspace)", ssmi_cuda_alloc_async(ctx, &ws, l.total, s));
        if (st == SSM_STATUS_OK) {
            st = fwd_launch(ctx, op, d, io, &pl, (unsigned char *)ws, P, mode, e);
            const ssm_status fs = ssmi_cuda_status(ctx, op, "device release (workspace)", ssmi_cuda_free_async(ctx, ws, s));
            if (st == SSM_STATUS_OK) st = fs;
        }
    }
    plan_free(&pl);
    if (st == SSM_STATUS_OK) ssmi_variant_ran(ctx, e->name);
    return st;
}

/* ---- the step: the selection table ----------------------------------------------------------------- */

/* fp32, unit K stride, 16-byte aligned base and every other stride a multiple of 4. */
int vec_ok(const ssm_tensor * t) {
    if (!ssmi_present(t)) return 1;
    if (t->dtype != SSM_DTYPE_F32 || t->strides[3] != 1 || ((uintptr_t)t->data & 15) != 0) return 0;
    for (int i = 0; i < 3; ++i)
        if (t->strides[i] % 4 != 0) return 0;
    return 1;
}

/* What the step entries are judged on. */
struct step_problem {
    long long K, V, blocks; /* blocks: B·H, one per (row, head) */
    int       vec;          /* fp32 state pools in 16-byte rows (vec_ok) and K % 4 == 0 */
    int       general;      /* the general form (m3_step_args.general): step_warp_kernel only */
};

/* step_prefetch_kernel's float4s per thread for a V×K state: the smallest instantiated count that
 * covers it, or 0 when it does not apply (more than kPrefetchMaxPer per thread). */
int prefetch_per_thread(long long K, long long V) {
    const long long need = (V * (K / 4) + kPrefetchThreads - 1) / kPrefetchThreads;
    for (int n = 1; n <= kPrefetchMaxPer; n *= 2)
        if (need <= n) return n;
    return 0;
}

/* step_lanes_kernel's plan of a K×V state (vectorised pools): 1 and *threads, or 0 when it does not
 * apply (K / 4 not a power of two in [kLanesVectors, 32], or V > kLanesVectors·256 / (K / 4)). */
int lanes_plan(long long K, long long V, int * threads) {
    const long long L = K / 4, ru = kLanesVectors;
    if (K % 4 != 0 || L < ru || L > 32 || (L & (L - 1)) != 0 || V < 1) return 0;
    const long long t = ((V + ru - 1) / ru * L + 31) / 32 * 32;
    if (t > kLanesMaxThreads) return 0;
    *threads = (int)t;
    return 1;
}

/* step_lanes_kernel's input class: 0 activations fp32, 1 activations bf16 (the rest fp32 in both),
 * 2 anything else. */
int lanes_input_class(const ssm_mamba3_siso_step_args * a) {
    const ssm_tensor * act[] = {&a->q, &a->k, &a->v, &a->trap, &a->angles, &a->z};
    const ssm_tensor * par[] = {&a->adt, &a->dt,          &a->q_bias,  &a->k_bias,
                                &a->d,   &a->angle_state, &a->k_state, &a->v_state};
    const int32_t      adt = a->q.dtype;
    if (adt != SSM_DTYPE_F32 && adt != SSM_DTYPE_BF16) return 2;
    for (int i = 0; i < 6; ++i)
        if (ssmi_present(act[i]) && act[i]->dtype != adt) return 2;
    for (int i = 0; i < 8; ++i)
        if (ssmi_present(par[i]) && par[i]->dtype != SSM_DTYPE_F32) return 2;
    return adt == SSM_DTYPE_F32 ? 0 : 1;
}

bool lanes_applies(const step_problem & pb) {
    int threads = 0;
    return pb.vec && !pb.general && lanes_plan(pb.K, pb.V, &threads);
}
bool prefetch_applies(const step_problem & pb) { return pb.vec && !pb.general && prefetch_per_thread(pb.K, pb.V) > 0; }
/* step_prefetch_kernel is faster than step_warp_kernel for few (row, head) blocks and slower for many
 * (fp32 pools, H=64 K=128 V=64 on the H200: B=1 20.4 µs against 14.3, B=128 0.227 ms against
 * 0.380). */
const long kPrefetchMaxBlocks = 256;
bool       prefetch_pays(const step_problem & pb) { return pb.blocks <= kPrefetchMaxBlocks; }
bool       step_any(const step_problem &) { return true; }

enum step_kind { STEP_LANES, STEP_PREFETCH, STEP_WARP };

/* The kernel of `kind` with its slots: in the kernel parameters for the vectorised-pool kernels up to
 * kStepInlineSlots rows, else a list uploaded for the call. */
ssm_status step_launch(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d,
                       const ssm_mamba3_siso_step_args * a, m3_step_args P, step_kind kind) {
    const cudaStream_t s = ssmi_cuda_stream(ctx);
    const int          has_idx = ssmi_present(&a->state_batch_indices);
    int                threads3 = 0;
    if (kind == STEP_LANES) lanes_plan(d->dk, d->dv, &threads3);
    const int per = kind == STEP_PREFETCH ? prefetch_per_thread(d->dk, d->dv) : 0;
    const int cls3 = kind == STEP_LANES ? lanes_input_class(a) : 2;
    /* step_warp_kernel's shared memory: q̂, k̂, old k, v, old v, θ (the caller checked ≤ 48 KB) */
    const size_t smem = sizeof(float) * (size_t)(3 * d->dk + 2 * d->dv + d->nangles + 4);
    /* step_prefetch_kernel's: the same and one dot partial per float4 (≤ 18 KB) */
    const size_t smem2 = sizeof(float) * (size_t)(3 * d->dk + 2 * d->dv + d->nangles + d->dv * (d->dk / 4));
    const int          dev_idx = ssmi_cuda_on_device(&a->state_batch_indices);
    if (kind != STEP_WARP && !P.general && (!has_idx || (d->batch <= kStepInlineSlots && !dev_idx))) {
        /* the slots travel in the kernel parameters: no allocation, no copy */
        m3_step_slots_args A2; /* ~2.4 KB; the launch copies it into the parameter space */
        memset(&A2, 0, sizeof A2);
        A2.base = P;
        A2.inline_slots = has_idx;
        for (int64_t b = 0; has_idx && b < d->batch; ++b) {
            const int64_t v = idx_at(&a->state_batch_indices, b);
            A2.islots[b] = v < 0 ? -1 : (int)v;
        }
        if (kind == STEP_LANES)
            return ssmi_cuda_status(ctx, op, "step_lanes_kernel launch",
                                    launch_step_lanes(A2, cls3, (int)d->batch, threads3, s));
        return ssmi_cuda_status(ctx, op, "step_prefetch_kernel launch",
                                launch_step_prefetch(A2, per, (int)d->batch, smem2, s));
    }
    void *     dslots = NULL;
    ssm_status st = SSM_STATUS_OK;
    size_t     smem_warp = smem;
    if (P.general) {
        /* the rows' plan (common/step_plan.cuh), released below like a slot list; a row of
         * several tokens keeps the V×K state in shared memory */
        const ssmi_step_slots slots = {&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                                       &a->num_accepted_tokens};
        int                   max_tokens = 0;
        const int64_t         T = ssmi_present(&a->cu_seqlens) ? d->seqlen : d->batch;
        ssmi_cuda_props       pr;
        st = ssmi_cuda_current_props(ctx, op, &pr);
        if (st == SSM_STATUS_OK)
            st = ssmi_cuda_step_plan(ctx, op, &slots, d->batch, T, d->nseq, s, &P.plan, &dslots, &max_tokens);
        P.keep = max_tokens > 1;
        if (P.keep) smem_warp += sizeof(float) * (size_t)(d->dv * d->dk);
        if (st == SSM_STATUS_OK && smem_warp > (size_t)pr.smem_optin)
            st = ssmi_error(ctx, SSM_STATUS_UNSUPPORTED,
                            "%s: a row of several tokens keeps its V×K state in shared memory; K=%lld, V=%lld need "
                            "%zu bytes, more than the device's %d",
                            op, (long long)d->dk, (long long)d->dv, smem_warp, pr.smem_optin);
    } else if (dev_idx) {
        /* device indices, read on the device (no host copy: capturable in a CUDA graph); an
         * index outside [0, slots) makes its row padding */
        st = ssmi_cuda_check_pointer(ctx, op, "state_batch_indices", &a->state_batch_indices);
        if (st == SSM_STATUS_OK)
            st = ssmi_cuda_status(ctx, op, "device allocation (slot list)",
                                  ssmi_cuda_alloc_async(ctx, &dslots, sizeof(int) * (size_t)d->batch, s));
        if (st == SSM_STATUS_OK)
            st = ssmi_cuda_status(
                ctx, op, "device_slots_kernel launch",
                ssmi_cuda_device_slots(&a->state_batch_indices, d->batch, d->nseq, (int *)dslots, s));
        P.slots = (const int *)dslots;
    } else if (has_idx) {
        /* the host view's slots as int32 on the device (validation bounded them by the pool) */
        int * hs = (int *)malloc(sizeof(int) * (size_t)d->batch);
        SSM_RETURN_IF(hs == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the slot list", op);
        for (int64_t b = 0; b < d->batch; ++b) {
            const int64_t v = idx_at(&a->state_batch_indices, b);
            hs[b] = v < 0 ? -1 : (int)v;
        }
        st = ssmi_cuda_status(ctx, op, "device allocation (slot list)",
                              ssmi_cuda_alloc_async(ctx, &dslots, sizeof(int) * (size_t)d->batch, s));
        /* Pageable source: cudaMemcpyAsync returns once it is staged, so the list may be freed. */
        if (st == SSM_STATUS_OK)
            st = ssmi_cuda_status(
                ctx, op, "cudaMemcpyAsync (slot list)",
                ssmi_cuda_memcpy_async(dslots, hs, sizeof(int) * (size_t)d->batch, cudaMemcpyHostToDevice, s));
        free(hs);
        P.slots = (const int *)dslots;
    }
    if (st == SSM_STATUS_OK && kind != STEP_WARP) { /* with an uploaded slot list (large B) */
        m3_step_slots_args A2;
        memset(&A2, 0, sizeof A2);
        A2.base = P;
        A2.inline_slots = 0;
        if (kind == STEP_LANES)
            st = ssmi_cuda_status(ctx, op, "step_lanes_kernel launch",
                                  launch_step_lanes(A2, cls3, (int)d->batch, threads3, s));
        else
            st = ssmi_cuda_status(ctx, op, "step_prefetch_kernel launch",
                                  launch_step_prefetch(A2, per, (int)d->batch, smem2, s));
    } else if (st == SSM_STATUS_OK) {
        st = ssmi_cuda_status(ctx, op, "step_warp_kernel launch", launch_step_warp(P, (int)d->batch, smem_warp, s));
    }
    if (dslots != NULL) {
        const ssm_status fs = ssmi_cuda_status(ctx, op, "device release (slot list)", ssmi_cuda_free_async(ctx, dslots, s));
        if (st == SSM_STATUS_OK) st = fs;
    }
    return st;
}

ssm_status launch_lanes(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d,
                        const ssm_mamba3_siso_step_args * a, const m3_step_args & P) {
    return step_launch(ctx, op, d, a, P, STEP_LANES);
}
ssm_status launch_prefetch(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d,
                           const ssm_mamba3_siso_step_args * a, const m3_step_args & P) {
    return step_launch(ctx, op, d, a, P, STEP_PREFETCH);
}
ssm_status launch_warp(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d,
                       const ssm_mamba3_siso_step_args * a, const m3_step_args & P) {
    return step_launch(ctx, op, d, a, P, STEP_WARP);
}

struct step_variant {
    const char * name;
    const char * why;
    bool (*applies)(const step_problem &);
    bool (*pays)(const step_problem &); /* the default's measured rule on top of applies; NULL: none */
    const char * rule;                  /* what applies asks: the message of a forced entry that does not apply */
    ssm_status (*launch)(ssm_context * ctx, const char * op, const ssmi_mamba3_dims * d,
                         const ssm_mamba3_siso_step_args * a, const m3_step_args & P);
};

/* The step's table. */
const step_variant kStepTable[] = {
    {"lanes",
     "the state on lane groups (8 rows per group), every global load issued at the start, one barrier: fp32 state "
     "pools in 16-byte rows, K/4 a power of two in [8, 32], the head's V rows in one block",
     lanes_applies, NULL,
     "fp32 state pools in 16-byte rows, K/4 a power of two in [8, 32], V <= 2048 / (K/4); one token per row read "
     "and written at one slot (no dst_state_batch_indices, cu_seqlens, slot table or intermediate_*)",
     launch_lanes},
    {"prefetch",
     "every state load of a thread in flight before the small work, row sums through shared memory: fp32 state pools "
     "in 16-byte rows, V*K <= 16384; by default for <= 256 (row, head) blocks",
     prefetch_applies, prefetch_pays,
     "fp32 state pools in 16-byte rows, K % 4 == 0, V*K <= 16384; one token per row read and written at one slot",
     launch_prefetch},
    {"warp_rows",
     "a warp per state row through shared-memory q, k and v: any dtype and layout of the pools (float4 rows where "
     "they allow it); every form of the step (several tokens per row: the V×K state in shared memory)",
     step_any, NULL, "", launch_warp},
};

} /* namespace */

/* ---- entry points ------------------------------------------------------------------------------------ */

extern "C" ssm_status ssmi_cuda_mamba3_siso_fwd(ssm_context * ctx, const ssm_mamba3_params * p,
                                                const ssmi_mamba3_dims * d, const ssm_mamba3_siso_fwd_args * a) {
    (void)p; /* the chunk size is not semantic (d->chunk only sets the chunk_states rows); the backend uses kC */
    fwd_io io;
    memset(&io, 0, sizeof io);
    io.q = &a->q, io.k = &a->k, io.v = &a->v, io.adt = &a->adt, io.dt = &a->dt, io.trap = &a->trap;
    io.qb = &a->q_bias, io.kb = &a->k_bias, io.ang = &a->angles, io.d = &a->d, io.z = &a->z;
    io.ssm_in = &a->ssm_state, io.k_in = &a->k_state, io.v_in = &a->v_state, io.cu = &a->cu_seqlens;
    io.out = &a->out, io.fin_ssm = &a->final_ssm_state, io.fin_k = &a->final_k_state, io.fin_v = &a->final_v_state;
    io.ypre = &a->pregate_y, io.chst = &a->chunk_states;
    io.fused = 0;
    return run_fwd(ctx, SSMI_OP_mamba3_siso_fwd, d, io);
}

extern "C" ssm_status ssmi_cuda_mamba3_siso(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                            const ssm_mamba3_siso_args * a) {
    (void)p;
    fwd_io io;
    memset(&io, 0, sizeof io);
    io.q = &a->q, io.k = &a->k, io.v = &a->v, io.adt = &a->adt, io.dt = &a->dt, io.trap = &a->trap;
    io.qb = &a->q_bias, io.kb = &a->k_bias, io.ang = &a->angles, io.d = &a->d, io.z = &a->z;
    io.ang_in = &a->angle_state, io.ssm_in = &a->ssm_state, io.k_in = &a->k_state, io.v_in = &a->v_state;
    io.cu = &a->cu_seqlens, io.out = &a->out, io.fin_ang = &a->final_angle_state;
    io.fin_ssm = &a->final_ssm_state, io.fin_k = &a->final_k_state, io.fin_v = &a->final_v_state;
    io.ypre = &a->pregate_y, io.chst = &a->chunk_states;
    io.fused = 1;
    return run_fwd(ctx, SSMI_OP_mamba3_siso, d, io);
}

extern "C" ssm_status ssmi_cuda_mamba3_siso_step(ssm_context * ctx, const ssm_mamba3_params * p,
                                                 const ssmi_mamba3_dims * d, const ssm_mamba3_siso_step_args * a) {
    const ssmi_op opid = SSMI_OP_mamba3_siso_step;
    const char *  op = ssmi_op_name(opid);
    (void)p;
    {
        const ssm_tensor * ts[kTensors] = {&a->q,
                                           &a->k,
                                           &a->v,
                                           &a->adt,
                                           &a->dt,
                                           &a->trap,
                                           &a->q_bias,
                                           &a->k_bias,
                                           &a->angles,
                                           &a->d,
                                           &a->z,
                                           &a->angle_state,
                                           &a->ssm_state,
                                           &a->k_state,
                                           &a->v_state,
                                           &a->out,
                                           &a->final_angle_state,
                                           &a->final_ssm_state,
                                           &a->final_k_state,
                                           &a->final_v_state};
        SSM_FORWARD_IF_ERROR(check_pointers(ctx, op, ts));
    }
    SSM_RETURN_IF(d->nheads > 65535 || d->batch > 65535, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: H=%lld or B=%lld is larger than the CUDA backend's limit of 65535", op, (long long)d->nheads,
                  (long long)d->batch);
    const size_t smem = sizeof(float) * (size_t)(3 * d->dk + 2 * d->dv + d->nangles + 4);
    SSM_RETURN_IF(smem > 48 * 1024, ctx, SSM_STATUS_UNSUPPORTED,
                  "%s: K=%lld, V=%lld need more shared memory than the CUDA step kernel has", op, (long long)d->dk,
                  (long long)d->dv);
    ssmi_variant_ran(ctx, "");
    if (d->batch == 0 || d->nheads == 0) return SSM_STATUS_OK;

    m3_step_args P;
    memset(&P, 0, sizeof P);
    P.H = (int)d->nheads, P.G = (int)(d->nheads / d->nheads_qk), P.K = (int)d->dk, P.V = (int)d->dv;
    P.A = (int)d->nangles;
    P.has_d = ssmi_present(&a->d);
    P.has_z = ssmi_present(&a->z);
    P.q = ssmi_cu_view_of(&a->q), P.k = ssmi_cu_view_of(&a->k), P.v = ssmi_cu_view_of(&a->v);
    P.adt = ssmi_cu_view_of(&a->adt), P.dt = ssmi_cu_view_of(&a->dt), P.trap = ssmi_cu_view_of(&a->trap);
    P.qb = ssmi_cu_view_of(&a->q_bias), P.kb = ssmi_cu_view_of(&a->k_bias), P.ang = ssmi_cu_view_of(&a->angles);
    if (P.has_d) P.d = ssmi_cu_view_of(&a->d);
    if (P.has_z) P.z = ssmi_cu_view_of(&a->z);
    P.ang_in = ssmi_cu_view_of(&a->angle_state), P.ssm_in = ssmi_cu_view_of(&a->ssm_state);
    P.k_in = ssmi_cu_view_of(&a->k_state), P.v_in = ssmi_cu_view_of(&a->v_state);
    P.out = out_of(&a->out);
    P.fin_ang = out_of(&a->final_angle_state), P.fin_ssm = out_of(&a->final_ssm_state);
    P.fin_k = out_of(&a->final_k_state), P.fin_v = out_of(&a->final_v_state);
    P.vec = d->dk % 4 == 0 && vec_ok(&a->ssm_state) && vec_ok(&a->final_ssm_state);
    {
        const ssmi_step_slots     slots = {&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                                           &a->num_accepted_tokens};
        const ssm_tensor * const  inter[4] = {&a->intermediate_angle_state, &a->intermediate_ssm_state,
                                              &a->intermediate_k_state, &a->intermediate_v_state};
        static const char * const names[4] = {"intermediate_angle_state", "intermediate_ssm_state",
                                              "intermediate_k_state", "intermediate_v_state"};
        for (int i = 0; i < 4; ++i) SSM_FORWARD_IF_ERROR(ssmi_cuda_check_pointer(ctx, op, names[i], inter[i]));
        P.general = ssmi_step_general(&slots, inter, 4);
        P.inter_ang = out_of(inter[0]), P.inter_ssm = out_of(inter[1]);
        P.inter_k = out_of(inter[2]), P.inter_v = out_of(inter[3]);
    }

    step_problem pb;
    pb.K = d->dk, pb.V = d->dv, pb.blocks = d->batch * d->nheads, pb.vec = P.vec, pb.general = P.general;
    const step_variant * e = NULL;
    SSM_FORWARD_IF_ERROR(choose(ctx, opid, kStepTable, pb, &e));
    SSM_FORWARD_IF_ERROR(e->launch(ctx, op, d, a, P));
    ssmi_variant_ran(ctx, e->name);
    return SSM_STATUS_OK;
}

extern "C" int32_t ssmi_cuda_variants_mamba3_siso_fwd(int32_t i, ssmi_variant_info * out) {
    return report(kFwdTable, i, out);
}

extern "C" int32_t ssmi_cuda_variants_mamba3_siso(int32_t i, ssmi_variant_info * out) {
    return report(kFwdTable, i, out);
}

extern "C" int32_t ssmi_cuda_variants_mamba3_siso_step(int32_t i, ssmi_variant_info * out) {
    return report(kStepTable, i, out);
}
