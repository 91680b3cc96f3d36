/*
 * test_cuda_mamba2_bwd.c — the CUDA backend of ssm_mamba2_scan_bwd: every gradient (dx, ddt,
 * da, db, dc, dd, dz, ddt_bias, dinitial_states) against the float64 reference (REF on the host
 * copies, F64 outputs) within the DESIGN §5 bar of the compute dtype, and against the CPU
 * backend within the same bar, at the shape matrix of test_mamba2_bwd.c's CPU sweep: S below /
 * at / above the chunk and odd, G = 1 / 1 < G < H / G = H (GQA sums over 6, 8, 9 and 20 heads),
 * dense rows, seq_idx and varlen with an empty sequence, initial states with and without
 * dfinal_states, z, D (H) / (H, P) / none, dt_bias, softplus, dt_limit with clamped positions,
 * f32 / f16 / bf16 inputs with f32 or input-dtype gradients, padded and permuted layouts,
 * stride-0 A and dt_bias, index tensors in host and device memory, wide states (N = 256, P·N
 * up to 32768), the plane kernel's slices of heads (one slice, several, a tail slice, R = 1), and
 * head batches (several, with a tail, in every entry; a group run alone, in one batch, gives the
 * bytes of its part of the batched whole).
 * Every entry of the selection table that applies runs (the default, then each
 * forced: the tensor-core entries with 16-bit x, which fp32 x refuses without writing anything).
 * Outputs are NaN-poisoned before each run; two runs give identical bytes. Plus: no heads to sum
 * over (H = 0 is not valid, so a case with every output absent), and host tensors refused.
 * Label cuda; exits 77 ("no CUDA device: skipped", a CTest skip) without a GPU.
 * Seed: SSMOPS_TEST_SEED (default 20261202).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cudautil.h"
#include "grads.h"

static ssm_context *ctx_ref, *ctx_cpu, *ctx_cuda;

/* The tensor-core entries of the selection table in its order: chunked_planes (bf16 x, B, C and
 * dout, where its shared memory fits: the default there), chunked_mma (the default for other
 * 16-bit x); the other entry, chunked_fp32, is the default for fp32 x and applies to every
 * problem. */
static const char * const kMmaEntries[] = {"chunked_planes", "chunked_mma"};
enum { NMMA = 2 };
static int g_planes_runs; /* bf16 cases the plane kernel ran */

/* One CUDA run into fresh poisoned outputs `got` (host copies of the device results): the table's
 * default (variant NULL; it must be `expect`) or the entry `variant` forced. With may_refuse, a
 * forced entry may answer UNSUPPORTED (its rule does not cover the problem): returns 0 then. */
static int cuda_run(const ssm_mamba2_params * p, const ssm_mamba2_scan_bwd_args * dev_in,
                    ssm_mamba2_scan_bwd_args * host_a, ssm_dtype od, int strided, const char * variant,
                    const char * expect, int may_refuse, ssmt_host got[NGRAD], const char * tag) {
    ssm_mamba2_scan_bwd_args a = *dev_in;
    ssmt_dev                 dg[NGRAD];
    ssmt_m2_alloc_grads(host_a, od, got, strided);
    for (int k = 0; k < NGRAD; ++k) {
        dg[k] = ssmt_to_device(&got[k]);
        *ssmt_m2_grad_slot(&a, k) = got[k].t.data != NULL ? dg[k].view : (ssm_tensor){0};
    }
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba2_scan_bwd", variant), SSM_STATUS_OK);
    const ssm_status st = ssm_mamba2_scan_bwd(ctx_cuda, p, &a);
    TEST_CHECK(st == SSM_STATUS_OK || (may_refuse && st == SSM_STATUS_UNSUPPORTED), "%s: cuda: %s", tag,
               ssm_context_last_error(ctx_cuda));
    const char * ran = ssm_context_last_variant(ctx_cuda);
    if (variant != NULL) expect = variant;
    TEST_CHECK(st != SSM_STATUS_OK || (ran != NULL && strcmp(ran, expect) == 0), "%s: variant %s, expected %s", tag,
               ran ? ran : "(none)", expect);
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba2_scan_bwd", NULL), SSM_STATUS_OK);
    for (int k = 0; k < NGRAD; ++k) {
        ssmt_to_host(&got[k], &dg[k]);
        ssmt_dev_free(&dg[k]);
    }
    return st == SSM_STATUS_OK;
}

static void check_bar(const char * label, const ssm_tensor * y, const ssm_tensor * r, ssm_dtype compute) {
    const ssmt_cmp cmp = ssmt_compare(y, r);
    const ssmt_bar bar = ssmt_bar_for(compute);
    const int      ok = cmp.nonfinite == 0 && cmp.rel_rms <= bar.rel_rms && cmp.max_rel <= bar.max_rel;
    TEST_CHECK(ok, "%s rel_rms %.3g max_rel %.3g nonfinite %lld (bar %.3g %.3g)", label, cmp.rel_rms, cmp.max_rel,
               (long long)cmp.nonfinite, bar.rel_rms, bar.max_rel);
    if (getenv("SSMOPS_TEST_VERBOSE") != NULL) printf("%-80s rel_rms %.3g max_rel %.3g\n", label, cmp.rel_rms, cmp.max_rel);
}

/* The dimension of each gradient (and its input) that indexes heads, or groups for db and dc. */
static const int32_t kHeadDim[NGRAD] = {2, 2, 0, 2, 2, 0, 2, 0, 1};

/* Group g of a problem with R heads per group, alone: every input and gradient cut to the
 * group's heads (b, c, db and dc to the group), views into the same buffers. */
static ssm_mamba2_scan_bwd_args group_alone(const ssm_mamba2_scan_bwd_args * a, int64_t g, int64_t R) {
    ssm_mamba2_scan_bwd_args s = *a;
    for (int k = 0; k < NGRAD; ++k) {
        const int64_t at = (k == GB || k == GC) ? g : g * R, n = (k == GB || k == GC) ? 1 : R;
        *ssmt_m2_grad_input(&s, k) = ssmt_slice(ssmt_m2_grad_input(&s, k), kHeadDim[k], at, n);
        *ssmt_m2_grad_slot(&s, k) = ssmt_slice(ssmt_m2_grad_slot(&s, k), kHeadDim[k], at, n);
    }
    s.dout = ssmt_slice(&a->dout, 2, g * R, R);
    s.dfinal_states = ssmt_slice(&a->dfinal_states, 1, g * R, R);
    return s;
}

/* Every gradient of group g alone (`alone`, host copies) holds the bytes of the group's part of
 * the whole problem's (`whole`, the views of a): same values, compared as float64 (exact for
 * every output dtype). */
static void check_alone_bytes(const char * tag, const ssm_mamba2_scan_bwd_args * a, const ssmt_host whole[NGRAD],
                              const ssmt_host alone[NGRAD], int64_t g, int64_t R) {
    ssm_mamba2_scan_bwd_args w = *a;
    for (int k = 0; k < NGRAD; ++k) *ssmt_m2_grad_slot(&w, k) = whole[k].t;
    ssm_mamba2_scan_bwd_args cut = group_alone(&w, g, R);
    for (int k = 0; k < NGRAD; ++k) {
        const ssm_tensor * x = ssmt_m2_grad_slot(&cut, k);
        if (x->data == NULL || alone[k].t.data == NULL) continue;
        int64_t       differ = 0;
        const int64_t n = ssmt_numel(&alone[k].t);
        for (int64_t i = 0; i < n; ++i) {
            const double u = ssmt_get(x, i), v = ssmt_get(&alone[k].t, i);
            differ += memcmp(&u, &v, sizeof u) != 0;
        }
        TEST_CHECK(differ == 0, "%s %s: group %lld alone differs from the whole problem in %lld of %lld elements", tag,
                   ssmt_m2_grad_names[k], (long long)g, (long long)differ, (long long)n);
    }
}

/* One problem: every entry that applies (twice: equal bytes) against the float64 reference and
 * the CPU backend; with alone ≥ 0, each entry also runs group `alone` by itself, whose gradients
 * must be the bytes of the group's part of the whole problem's. */
static void cuda_case(ssmt_rng * rng, ssmt_mamba2_config * cfg, int64_t chunk, int limit, int with_dfinal,
                      int stride0, int index_device, int64_t alone, const char * tag) {
    ssmt_mamba2_problem prob;
    if (ssmt_mamba2_random_args(rng, cfg, &prob) != 0) {
        TEST_CHECK(0, "%s: could not build the problem", tag);
        return;
    }
    if (stride0) { /* every head reads the first head's A and dt_bias */
        prob.a.t.strides[0] = 0;
        if (prob.dt_bias.t.data != NULL) prob.dt_bias.t.strides[0] = 0;
    }
    ssm_mamba2_params        p;
    ssmt_host                dout, dfinal;
    ssm_mamba2_scan_bwd_args a;
    ssmt_m2_bwd_args(rng, cfg, &prob, chunk, limit, with_dfinal, &p, &dout, &dfinal, &a);

    ssmt_host ref[NGRAD], cpu[NGRAD], got[2][NGRAD];
    ssmt_m2_alloc_grads(&a, SSM_DTYPE_F64, ref, 0);
    TEST_CHECK_STATUS(ssm_mamba2_scan_bwd(ctx_ref, &p, &a), SSM_STATUS_OK);
    const ssm_dtype od = cfg->out_dtype;
    ssmt_m2_alloc_grads(&a, od, cpu, 0);
    TEST_CHECK_STATUS(ssm_mamba2_scan_bwd(ctx_cpu, &p, &a), SSM_STATUS_OK);

    /* device copies of the inputs; index tensors on the device or left on the host */
    ssmt_host * hin[13] = {&prob.x, &prob.dt, &prob.a, &prob.b, &prob.c, &prob.d, &prob.z, &prob.dt_bias,
                           &prob.initial_states, &dout, &dfinal, &prob.seq_idx, &prob.cu_seqlens};
    ssmt_dev    dv[13];
    for (int i = 0; i < 13; ++i) dv[i] = (i < 11 || index_device) ? ssmt_to_device(hin[i]) : (ssmt_dev){0};
    ssm_mamba2_scan_bwd_args da = a;
    ssm_tensor * din[13] = {&da.x, &da.dt, &da.a, &da.b, &da.c, &da.d, &da.z, &da.dt_bias, &da.initial_states,
                            &da.dout, &da.dfinal_states, &da.seq_idx, &da.cu_seqlens};
    for (int i = 0; i < 13; ++i)
        if (dv[i].mem != NULL) *din[i] = dv[i].view;
    const int64_t                  R = cfg->nheads / cfg->ngroups;
    const ssm_mamba2_scan_bwd_args sub_dev = alone >= 0 ? group_alone(&da, alone, R) : da;
    ssm_mamba2_scan_bwd_args       sub_host = alone >= 0 ? group_alone(&a, alone, R) : a;

    /* (16-bit x) every entry forced, then the default; fp32 x refuses the tensor-core entries and
     * fp16 x the plane kernel. With bf16 inputs the plane kernel runs where its shared memory
     * fits, and is then the default. */
    const int    x16 = cfg->dtype == SSM_DTYPE_F16 || cfg->dtype == SSM_DTYPE_BF16;
    const int    bf16 = cfg->dtype == SSM_DTYPE_BF16;
    const char * runs[2 + NMMA];
    int          nruns = 0, planes_ran = 0;
    if (x16) runs[nruns++] = "chunked_fp32";
    for (int m = bf16 ? 0 : 1; x16 && m < NMMA; ++m) runs[nruns++] = kMmaEntries[m];
    runs[nruns++] = NULL;
    for (int v = 0; v < nruns; ++v) {
        char vtag[260];
        snprintf(vtag, sizeof vtag, "%s %s", tag, runs[v] != NULL ? runs[v] : "default");
        const int    probe = runs[v] != NULL && strcmp(runs[v], kMmaEntries[0]) == 0;
        const char * expect = planes_ran ? kMmaEntries[0] : x16 ? kMmaEntries[1] : "chunked_fp32";
        int          ran = 1;
        for (int run = 0; run < 2; ++run)
            ran &= cuda_run(&p, &da, &a, od, cfg->strided, runs[v], expect, probe, got[run], vtag);
        if (probe) planes_ran = ran, g_planes_runs += ran;
        for (int k = 0; ran && k < NGRAD; ++k) {
            if (got[0][k].t.data == NULL) continue;
            char label[400];
            snprintf(label, sizeof label, "cuda[%s] %s vs ref", vtag, ssmt_m2_grad_names[k]);
            check_bar(label, &got[0][k].t, &ref[k].t, cfg->dtype);
            ssmt_hash_log(label, &got[0][k].t);
            snprintf(label, sizeof label, "cuda[%s] %s vs cpu", vtag, ssmt_m2_grad_names[k]);
            check_bar(label, &got[0][k].t, &cpu[k].t, cfg->dtype);
            TEST_CHECK(memcmp(got[0][k].buf, got[1][k].buf, got[0][k].bytes) == 0, "cuda[%s] %s: two runs differ", vtag,
                       ssmt_m2_grad_names[k]);
        }
        if (ran && alone >= 0) { /* the entry that ran, forced for the group alone */
            char used[64], atag[300];
            snprintf(used, sizeof used, "%s", runs[v] != NULL ? runs[v] : expect);
            snprintf(atag, sizeof atag, "cuda[%s] group %lld alone", vtag, (long long)alone);
            ssmt_free_all(got[1], NGRAD);
            if (cuda_run(&p, &sub_dev, &sub_host, od, 0, used, used, 0, got[1], atag))
                check_alone_bytes(atag, &a, got[0], got[1], alone, R);
        }
        ssmt_free_all(got[0], NGRAD), ssmt_free_all(got[1], NGRAD);
    }
    for (int m = 0; m < NMMA; ++m) { /* forced where the rule refuses: UNSUPPORTED, nothing written */
        if (x16 && (bf16 || m > 0)) continue;
        ssm_mamba2_scan_bwd_args fa = da;
        ssmt_m2_alloc_grads(&a, od, got[0], 0);
        ssmt_dev dg[NGRAD];
        for (int k = 0; k < NGRAD; ++k) {
            dg[k] = ssmt_to_device(&got[0][k]);
            *ssmt_m2_grad_slot(&fa, k) = got[0][k].t.data != NULL ? dg[k].view : (ssm_tensor){0};
        }
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba2_scan_bwd", kMmaEntries[m]), SSM_STATUS_OK);
        TEST_CHECK_STATUS(ssm_mamba2_scan_bwd(ctx_cuda, &p, &fa), SSM_STATUS_UNSUPPORTED);
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba2_scan_bwd", NULL), SSM_STATUS_OK);
        for (int k = 0; k < NGRAD; ++k) {
            void * before = ssmt_snapshot(&got[0][k]);
            ssmt_to_host(&got[0][k], &dg[k]);
            ssmt_dev_free(&dg[k]);
            TEST_CHECK(got[0][k].t.data == NULL || ssmt_unchanged(&got[0][k], before), "%s: forced %s wrote %s", tag,
                       kMmaEntries[m], ssmt_m2_grad_names[k]);
            free(before);
        }
        ssmt_free_all(got[0], NGRAD);
    }
    for (int i = 0; i < 13; ++i) ssmt_dev_free(&dv[i]);
    ssmt_free_all(cpu, NGRAD), ssmt_free_all(ref, NGRAD);
    ssmt_free(&dout), ssmt_free(&dfinal);
    ssmt_mamba2_problem_free(&prob);
}

/* A bf16 problem of B × S tokens, H heads in G groups, P × N states, d_mode (0 none, 1 per head, 2
 * per channel), with z, dt_bias, softplus and initial states; F32 outputs. */
static void plane_config(ssmt_mamba2_config * cfg, int64_t B, int64_t S, int64_t H, int64_t G, int64_t P, int64_t N,
                         int d_mode) {
    ssmt_mamba2_config_init(cfg);
    cfg->batch = B, cfg->seqlen = S, cfg->nheads = H, cfg->ngroups = G, cfg->headdim = P, cfg->dstate = N;
    cfg->dtype = SSM_DTYPE_BF16, cfg->out_dtype = SSM_DTYPE_F32, cfg->d_mode = d_mode, cfg->has_z = 1;
    cfg->has_dt_bias = 1, cfg->has_initial = 1, cfg->dt_softplus = 1;
}

/* The matrix of test_mamba2_bwd.c's CPU sweep, plus stride-0 inputs and device index tensors. */
static void test_matrix(ssmt_rng * rng) {
    int k = 0;
    for (int si = 0; si < SSMT_MAMBA2_BWD_NSEQLENS; ++si) {
        for (int variant = 0; variant < 3; ++variant, ++k) {
            ssmt_mamba2_config cfg;
            int64_t            lens[4];
            const int64_t      chunk = ssmt_mamba2_bwd_case(&cfg, k, si, variant, lens);
            const int with_dfinal = (k % 4) != 2, stride0 = (k % 7) == 3, index_device = (k % 2) == 1;
            char      tag[200];
            snprintf(tag, sizeof tag, "S%lld H%lld P%lld N%lld G%lld %s v%d%s%s%s%s%s", (long long)cfg.seqlen,
                     (long long)cfg.nheads, (long long)cfg.headdim, (long long)cfg.dstate, (long long)cfg.ngroups,
                     ssm_dtype_name(cfg.dtype), variant, cfg.has_z ? " z" : "", cfg.has_initial ? " init" : "",
                     with_dfinal ? " dfinal" : "", (k % 5) == 2 ? " limit" : "", stride0 ? " stride0" : "");
            cuda_case(rng, &cfg, chunk, (k % 5) == 2, with_dfinal, stride0, index_device, -1, tag);
        }
    }
    /* a long row: many chunks per segment in both state passes */
    ssmt_mamba2_config cfg;
    ssmt_mamba2_config_init(&cfg);
    cfg.batch = 2, cfg.seqlen = 1000, cfg.nheads = 8, cfg.headdim = 64, cfg.dstate = 64, cfg.ngroups = 2;
    cfg.dtype = SSM_DTYPE_BF16, cfg.out_dtype = SSM_DTYPE_F32, cfg.d_mode = 1, cfg.has_z = 1, cfg.has_dt_bias = 1;
    cfg.has_initial = 1, cfg.dt_softplus = 1;
    cuda_case(rng, &cfg, 256, 0, 1, 0, 0, -1, "S1000 H8 P64 N64 G2 bf16 long");
    cfg.dtype = SSM_DTYPE_F32, cfg.seqlen = 300, cfg.ngroups = 8, cfg.has_z = 0;
    cuda_case(rng, &cfg, 256, 0, 1, 0, 0, -1, "S300 H8 P64 N64 G8 f32 long");
    /* wide states: N = 256 halves the internal chunk; P·N = 32768 no longer fits shared memory
     * next to the chunk's operands, so the chunk kernel reads S and G from the workspace */
    cfg.seqlen = 75, cfg.nheads = 4, cfg.ngroups = 2, cfg.has_z = 1, cfg.headdim = 64, cfg.dstate = 256;
    cuda_case(rng, &cfg, 64, 0, 1, 0, 0, -1, "S75 H4 P64 N256 G2 f32 wide");
    cfg.headdim = 128;
    cuda_case(rng, &cfg, 64, 0, 1, 0, 0, -1, "S75 H4 P128 N256 G2 f32 wide");
    /* the tensor-core entries at these widths; fp32 gradients, so the bar measures the computation
     * (a bf16 gradient adds its own rounding, which exceeds max_rel on heavy-tailed elements) */
    cfg.dtype = SSM_DTYPE_BF16, cfg.out_dtype = SSM_DTYPE_F32;
    cuda_case(rng, &cfg, 64, 0, 1, 0, 0, -1, "S75 H4 P128 N256 G2 bf16 wide");
    cfg.dtype = SSM_DTYPE_F16, cfg.out_dtype = SSM_DTYPE_F32, cfg.headdim = 64, cfg.seqlen = 131;
    cuda_case(rng, &cfg, 64, 0, 1, 0, 0, -1, "S131 H4 P64 N256 G2 f16 wide");
    /* 16-bit x with P, N off every tile size (N % 4 ≠ 0: S and G staged by plain loads) */
    cfg.dtype = SSM_DTYPE_BF16, cfg.seqlen = 150, cfg.nheads = 6, cfg.ngroups = 3, cfg.headdim = 12, cfg.dstate = 9;
    cuda_case(rng, &cfg, 64, 0, 1, 0, 0, -1, "S150 H6 P12 N9 G3 bf16 odd");

    /* chunked_planes' slices of heads (bwd.cu plane_slice: blocks of a group take slices of its
     * heads, at least 8 a slice, and as many slices as bring the grid to 1024 blocks): R = 1 (the
     * chunk kernel writes dB/dC itself), R = 11 (two slices of 6 and 5 heads: a tail slice and
     * the group sum over slices), R = 17 (three slices, 6 + 6 + 5), and 1024 (chunk, group) pairs
     * with R = 10 (one slice of all 10 heads: its last head writes the group's dB/dC). */
    static const int64_t vl[3] = {70, 0, 75};
    const int            planes_before = g_planes_runs;
    plane_config(&cfg, 2, 100, 4, 4, 16, 32, 2);
    cuda_case(rng, &cfg, 64, 0, 1, 0, 1, -1, "S100 H4 P16 N32 G4 bf16 R1");
    cfg.batch = 1, cfg.nheads = 11, cfg.ngroups = 1, cfg.nseq = 3, cfg.seqlens = vl;
    cuda_case(rng, &cfg, 64, 0, 1, 0, 1, -1, "varlen 70+0+75 H11 P16 N32 G1 bf16 R11 two slices");
    cfg.nseq = 0, cfg.seqlens = NULL, cfg.batch = 2, cfg.seqlen = 130, cfg.seq_segments = 3;
    cfg.nheads = 34, cfg.ngroups = 2, cfg.headdim = 8, cfg.dstate = 16, cfg.d_mode = 1;
    cuda_case(rng, &cfg, 64, 1, 0, 0, 0, -1, "S130 H34 P8 N16 G2 bf16 seq_idx R17 three slices");
    cfg.batch = 2, cfg.seqlen = 8192, cfg.seq_segments = 0, cfg.nheads = 40, cfg.ngroups = 4;
    cfg.has_initial = 0;
    cuda_case(rng, &cfg, 256, 0, 1, 0, 0, -1, "S8192 B2 H40 P8 N16 G4 bf16 R10 one slice of 10");
    TEST_CHECK(g_planes_runs == planes_before + 4, "chunked_planes ran on %d of the 4 slice cases",
               g_planes_runs - planes_before);

    /* the plane kernels' compile-time instance (bwd_chunk_planes.cu kFixedQ/P/N: 64-token chunks,
     * P = 64, N = 128): a tail chunk of 8 tokens and two slices of 6 heads; varlen with an empty
     * sequence, R = 2 */
    const int fixed_before = g_planes_runs;
    plane_config(&cfg, 1, 200, 12, 1, 64, 128, 1);
    cuda_case(rng, &cfg, 256, 0, 1, 0, 0, -1, "S200 H12 P64 N128 G1 bf16 fixed dims");
    cfg.nheads = 4, cfg.ngroups = 2, cfg.nseq = 3, cfg.seqlens = vl, cfg.d_mode = 2;
    cuda_case(rng, &cfg, 64, 0, 1, 0, 1, -1, "varlen 70+0+75 H4 P64 N128 G2 bf16 fixed dims");
    /* the state-parts kernel (bwd_state_parts.cu) over more (chunk, slice) items than a device has
     * SMs, most chunks short (1–100 tokens: rows past a chunk's length) and slices of unequal heads
     * (R = 9: 5 + 4), with z (the gated dC) and without */
    static int64_t many[150], few[150];
    for (int s = 0; s < 150; ++s) many[s] = 1 + (s * 37) % 100, few[s] = 1 + s % 17;
    plane_config(&cfg, 1, 0, 9, 1, 64, 128, 1);
    cfg.nseq = 150, cfg.seqlens = many;
    cuda_case(rng, &cfg, 64, 0, 1, 0, 1, -1, "varlen 150 (1-100) H9 P64 N128 G1 bf16 state-parts items");
    cfg.seqlens = few, cfg.has_z = 0, cfg.d_mode = 0;
    cuda_case(rng, &cfg, 64, 0, 1, 0, 0, -1, "varlen 150 (1-17) H9 P64 N128 G1 bf16 no z state-parts items");
    TEST_CHECK(g_planes_runs == fixed_before + 4, "chunked_planes ran on %d of the 4 fixed-dims cases",
               g_planes_runs - fixed_before);
}

/* Head batches (bwd.cu batch_slices): the states kernels, both passes and the chunk kernel run
 * per batch of whole chunk-kernel slices (single heads for chunked_mma and chunked_fp32) whose
 * fp32 states and state gradients, 8·chunks·P·N bytes per head, fit 240 MiB (at least one
 * slice). Many short varlen sequences (one internal chunk each) make those states large at a
 * small cost for the reference. Each case runs every entry against the bars, twice for equal
 * bytes, and one group alone (whose states fit one batch) for the bytes of its part of the whole:
 *   400 sequences (1–4 tokens, five of 600: more chunks per segment than a pass loads at once,
 *   one empty), H20 G2 R10 P64 N64: 444 chunks of 64 (489 of 32), 13.9 MiB per head (15.3 MiB).
 *   chunked_planes: slices 5 + 5 per group (888 chunk-group blocks, under plane_slice's block
 *   target, so the whole and one group alone get the same slices), batches of 3 slices, heads
 *   0–14 (across the group boundary) and the tail 15–19; chunked_mma 17 + 3 heads; chunked_fp32
 *   15 + 5. Group 1 alone: one batch, the same slices (5 + 5), so its dB/dC sums are the same.
 *   3668 sequences of 3 tokens, H10 G5 R2 P31 N33 (P·N odd: the one-element passes; N % 4 ≠ 0:
 *   plain state loads): 28.6 MiB per head. Every entry: batches of 8 + 2 heads (the plane
 *   kernel's slices are its groups of 2, whose last head writes dB/dC). Group 4 alone is the
 *   tail batch of the whole. */
static void test_head_batches(ssmt_rng * rng) {
    static int64_t lens1[400], lens2[3668];
    for (int s = 0; s < 400; ++s) lens1[s] = s == 200 ? 0 : s % 97 == 5 ? 600 : 1 + s % 4;
    for (int s = 0; s < 3668; ++s) lens2[s] = 3;
    const int          planes_before = g_planes_runs;
    ssmt_mamba2_config cfg;
    ssmt_mamba2_config_init(&cfg);
    cfg.batch = 1, cfg.nseq = 400, cfg.seqlens = lens1, cfg.nheads = 20, cfg.ngroups = 2, cfg.headdim = 64;
    cfg.dstate = 64, cfg.dtype = SSM_DTYPE_BF16, cfg.out_dtype = SSM_DTYPE_F32, cfg.d_mode = 2, cfg.has_z = 1;
    cfg.has_dt_bias = 1, cfg.has_initial = 1, cfg.dt_softplus = 1;
    cuda_case(rng, &cfg, 64, 0, 1, 0, 1, 1, "varlen 400 H20 P64 N64 G2 bf16 head batches");
    cfg.nseq = 3668, cfg.seqlens = lens2, cfg.nheads = 10, cfg.ngroups = 5, cfg.headdim = 31, cfg.dstate = 33;
    cfg.d_mode = 1, cfg.has_initial = 0;
    cuda_case(rng, &cfg, 64, 0, 0, 0, 0, 4, "varlen 3668 H10 P31 N33 G5 bf16 head batches");
    TEST_CHECK(g_planes_runs == planes_before + 2, "chunked_planes ran on %d of the 2 head-batch cases",
               g_planes_runs - planes_before);
}

/* chunked_planes on bf16 rows of 16-byte runs (its state chain walks steps 2–5) and on the same
 * values in padded rows (odd strides: the states kernels and the passes): the same bytes in every
 * gradient. At the chunk kernel's compile-time dimensions (P = 64, N = 128) and at runtime ones
 * (P = 24, N = 40), with varlen segments, G < H, D per channel, z, initial states and
 * dfinal_states. */
static void test_layout_bytes(ssmt_rng * rng) {
    static const int64_t dims[2][2] = {{64, 128}, {24, 40}};
    static const int64_t vl[3] = {150, 0, 77};
    for (int c = 0; c < 2; ++c) {
        ssmt_mamba2_config cfg;
        plane_config(&cfg, 1, 0, 4, 2, dims[c][0], dims[c][1], 2);
        cfg.nseq = 3, cfg.seqlens = vl;
        char tag[120];
        snprintf(tag, sizeof tag, "layouts P%lld N%lld", (long long)dims[c][0], (long long)dims[c][1]);
        ssmt_mamba2_problem prob;
        if (ssmt_mamba2_random_args(rng, &cfg, &prob) != 0) {
            TEST_CHECK(0, "%s: could not build the problem", tag);
            continue;
        }
        ssm_mamba2_params        p; /* chunk 64, softplus (plane_config), no limit; dfinal_states */
        ssmt_host                dout, dfinal;
        ssm_mamba2_scan_bwd_args a;
        ssmt_m2_bwd_args(rng, &cfg, &prob, 64, 0, 1, &p, &dout, &dfinal, &a);
        /* the row operands (x, z, B, C, dout), then the rest, on the device: aligned and padded */
        ssmt_host * hin[11] = {&prob.x, &prob.z, &prob.b, &prob.c, &dout, &prob.dt, &prob.a, &prob.d,
                               &prob.dt_bias, &prob.initial_states, &dfinal};
        ssmt_host   pad[5];
        ssmt_dev    dv[11], dp[5];
        for (int i = 0; i < 11; ++i) dv[i] = ssmt_to_device(hin[i]);
        for (int i = 0; i < 5; ++i) {
            pad[i] = ssmt_alloc_layout(hin[i]->t.dtype, hin[i]->t.ndim, hin[i]->t.shape, NULL, 1);
            ssmt_copy(&pad[i].t, &hin[i]->t);
            dp[i] = ssmt_to_device(&pad[i]);
        }
        ssm_mamba2_scan_bwd_args da = a, dpa;
        ssm_tensor * din[11] = {&da.x, &da.z, &da.b, &da.c, &da.dout, &da.dt, &da.a, &da.d, &da.dt_bias,
                                &da.initial_states, &da.dfinal_states};
        for (int i = 0; i < 11; ++i) *din[i] = dv[i].view;
        dpa = da;
        dpa.x = dp[0].view, dpa.z = dp[1].view, dpa.b = dp[2].view, dpa.c = dp[3].view, dpa.dout = dp[4].view;
        ssmt_host got[2][NGRAD];
        const int ran = cuda_run(&p, &da, &a, SSM_DTYPE_F32, 0, kMmaEntries[0], kMmaEntries[0], 0, got[0], tag) &&
                        cuda_run(&p, &dpa, &a, SSM_DTYPE_F32, 0, kMmaEntries[0], kMmaEntries[0], 0, got[1], tag);
        for (int k = 0; ran && k < NGRAD; ++k) {
            if (got[0][k].t.data == NULL) continue;
            TEST_CHECK(memcmp(got[0][k].buf, got[1][k].buf, got[0][k].bytes) == 0,
                       "%s %s: aligned and padded rows give different bytes", tag, ssmt_m2_grad_names[k]);
        }
        ssmt_free_all(got[0], NGRAD), ssmt_free_all(got[1], NGRAD);
        for (int i = 0; i < 11; ++i) ssmt_dev_free(&dv[i]);
        for (int i = 0; i < 5; ++i) ssmt_dev_free(&dp[i]), ssmt_free(&pad[i]);
        ssmt_free(&dout), ssmt_free(&dfinal);
        ssmt_mamba2_problem_free(&prob);
    }
}

/* Host tensors with the CUDA backend are refused; a call with every output absent succeeds. */
static void test_rules(ssmt_rng * rng) {
    ssmt_mamba2_config cfg;
    ssmt_mamba2_config_init(&cfg);
    ssmt_mamba2_problem prob;
    TEST_CHECK(ssmt_mamba2_random_args(rng, &cfg, &prob) == 0, "rules: problem");
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    ssmt_host                dout = ssmt_alloc(SSM_DTYPE_F32, 4, prob.x.t.shape);
    ssm_mamba2_scan_bwd_args a;
    memset(&a, 0, sizeof a);
    a.x = prob.x.t, a.dt = prob.dt.t, a.a = prob.a.t, a.b = prob.b.t, a.c = prob.c.t, a.dout = dout.t;
    ssmt_host g[NGRAD];
    ssmt_m2_alloc_grads(&a, SSM_DTYPE_F32, g, 0);
    ssmt_expect_cuda_refusal("mamba2_scan_bwd", ctx_cuda, ssm_mamba2_scan_bwd(ctx_cuda, &p, &a));
    ssmt_host * hin[6] = {&prob.x, &prob.dt, &prob.a, &prob.b, &prob.c, &dout};
    ssmt_dev    dv[6];
    for (int i = 0; i < 6; ++i) dv[i] = ssmt_to_device(hin[i]);
    ssm_mamba2_scan_bwd_args da;
    memset(&da, 0, sizeof da);
    da.x = dv[0].view, da.dt = dv[1].view, da.a = dv[2].view, da.b = dv[3].view, da.c = dv[4].view, da.dout = dv[5].view;
    TEST_CHECK_STATUS(ssm_mamba2_scan_bwd(ctx_cuda, &p, &da), SSM_STATUS_OK);
    for (int i = 0; i < 6; ++i) ssmt_dev_free(&dv[i]);
    ssmt_free_all(g, NGRAD);
    ssmt_free(&dout);
    ssmt_mamba2_problem_free(&prob);
}

int main(void) {
    if (!ssmt_cuda_present("test_cuda_mamba2_bwd")) return 77;
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261202u);
    ctx_ref = ssmt_make_ctx(SSM_BACKEND_REF, 0, SSM_ISA_AUTO);
    ctx_cpu = ssmt_make_ctx(SSM_BACKEND_CPU, 0, SSM_ISA_AUTO);
    ctx_cuda = ssmt_make_ctx(SSM_BACKEND_CUDA, 0, SSM_ISA_AUTO);
    TEST_CHECK(ctx_ref && ctx_cpu && ctx_cuda, "context creation failed");
    if (ssmt_failures) TEST_EXIT();
    test_matrix(&rng);
    test_head_batches(&rng);
    test_layout_bytes(&rng);
    TEST_CHECK(g_planes_runs > 0, "chunked_planes ran on none of the bf16 cases");
    test_rules(&rng);
    ssm_context_free(ctx_ref);
    ssm_context_free(ctx_cpu);
    ssm_context_free(ctx_cuda);
    TEST_EXIT();
}
