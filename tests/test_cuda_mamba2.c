/*
 * test_cuda_mamba2.c — the CUDA backend of ssm_mamba2_scan and ssm_mamba2_chunk_state
 * against the float64 reference (REF backend on the host copies, F64 outputs), DESIGN §5
 * bars per compute dtype: S below / at / above the chunk and odd, G = 1 / 1 < G < H / G = H,
 * every option on and off, seq_idx, varlen with an empty sequence, f32 / f16 / bf16, padded
 * and permuted layouts, a B of another dtype than x, NaN-poisoned outputs, identical bytes across
 * two runs, a caller workspace, index tensors in host and device memory, AUTO dispatch from device
 * tensors, device-rule errors, and chunk_state on the CANN layout at the CANN shape.
 * Every scan case runs, each on re-poisoned outputs against the reference (scan_pass): the default
 * choice of the selection table (label "v7"), then every entry of the table forced through the
 * context (ssm_context_set_variant), twice each (the same bytes both times), where it applies; an
 * entry that does not apply must fail with UNSUPPORTED (the dtype rules are checked exactly: "ffma"
 * only for fp32 x, "mma_64row" for every 16-bit x). The shapes reach every entry on an H200: the
 * wgmma kernels' layouts (N = 64 / 128, P = 64 / 72, partial token tiles, 1 to 4 token tiles per
 * row tile, an idle second warpgroup), the 128-row tiles' edges (chunk lengths around 64, 128, 192,
 * 256), P/N off every tile (P=72 N=136, N=20), long chains, and a grid where the default picks
 * the chain. An unknown variant name is INVALID_ARGUMENT. A NaN in dt gives the reference's NaN
 * pattern (it is not clamped to a dt limit). With SSMOPS_CUDA_PORTABLE=1 (test_cuda_mamba2_portable)
 * no run, default or forced, may choose a wgmma entry, and every other entry must run.
 * f16/bf16 outputs are measured against the reference rounded to their dtype (ssmt_check_bar_rounded).
 * Label cuda; exits 77 ("no CUDA device: skipped", a CTest skip) without a GPU.
 * Seed: SSMOPS_TEST_SEED (default 20261202).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cudautil.h"

static ssm_context *ctx_ref, *ctx_cuda, *ctx_auto;

/* ---- the combined scan ------------------------------------------------------------------- */
typedef struct scan_opts {
    int64_t chunk;
    int     limit;        /* dt_limit (0.002, 0.05) instead of (0, inf)          */
    int     index_device; /* seq_idx / cu_seqlens in device memory                */
    int     workspace;    /* caller workspace instead of the stream allocator     */
    int     use_auto;     /* AUTO backend: dispatch from the device tensors       */
    int     b_f32;        /* B in f32 whatever x's dtype                          */
} scan_opts;

/* One scan problem on the device, as every pass of test_scan runs it. */
typedef struct scan_run {
    ssm_context *                ctx;
    const ssm_mamba2_params *    p;
    const ssm_mamba2_scan_args * da; /* device views */
    void *                       ws;
    size_t                       ws_bytes;
    ssmt_mamba2_problem *        pr; /* host copies of out and final_states */
    ssmt_dev *                   out_dev;
    ssmt_dev *                   fin_dev;
    const ssmt_host *            rout; /* float64 reference */
    const ssmt_host *            rfin;
    ssm_dtype                    dtype;
    const char *                 tag;
} scan_run;

/* Runs and skips of every entry of the scan's table over the whole test (index = table entry). */
enum { MAX_ENTRIES = 16 };
static int scan_ran[MAX_ENTRIES], scan_not_applicable[MAX_ENTRIES];

static int scan_entry_index(const char * name) {
    const int32_t n = ssm_variant_count(SSM_BACKEND_CUDA, "mamba2_scan");
    for (int32_t i = 0; i < n && i < MAX_ENTRIES; ++i)
        if (strcmp(ssm_variant_name(SSM_BACKEND_CUDA, "mamba2_scan", i), name) == 0) return (int)i;
    return -1;
}

/* Whether entry `name` must apply to a scan of x dtype `dtype` (1), must not (0), or depends on the
 * device and the layouts (-1). */
static int scan_entry_must_apply(const char * name, ssm_dtype dtype) {
    if (strcmp(name, "ffma") == 0) return dtype == SSM_DTYPE_F32;
    if (strcmp(name, "mma_64row") == 0) return dtype != SSM_DTYPE_F32;
    return dtype == SSM_DTYPE_F32 ? 0 : -1;
}

/* Outputs NaN-poisoned on the host and the device, one scan by the default choice (variant NULL)
 * or with the table entry `variant` forced, the outputs copied back and checked against the
 * reference ("scan[tag name] out"). Returns 0 when the forced entry does not apply (UNSUPPORTED,
 * nothing checked), else 1. */
static int scan_pass(const scan_run * r, const char * name, const char * variant) {
    ssmt_mamba2_problem * pr = r->pr;
    ssmt_poison(&pr->out.t);
    if (pr->final_states.t.data) ssmt_poison(&pr->final_states.t);
    if (r->out_dev->mem)
        TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, r->out_dev->mem, pr->out.buf, pr->out.bytes), SSM_STATUS_OK);
    if (r->fin_dev->mem)
        TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, r->fin_dev->mem, pr->final_states.buf, pr->final_states.bytes),
                          SSM_STATUS_OK);
    if (variant != NULL) {
        TEST_CHECK_STATUS(ssm_context_set_variant(r->ctx, "mamba2_scan", variant), SSM_STATUS_OK);
        ssmt_variant_forced = 1;
    }
    const ssm_status st = ssm_mamba2_scan(r->ctx, r->p, r->da, r->ws, r->ws_bytes);
    if (st == SSM_STATUS_OK)
        TEST_CHECK(!ssmt_cuda_portable() || !ssmt_variant_needs_wgmma("mamba2_scan", ssm_context_last_variant(r->ctx)),
                   "%s: SSMOPS_CUDA_PORTABLE=1 ran the wgmma entry '%s'", r->tag, ssm_context_last_variant(r->ctx));
    if (variant != NULL) {
        const int idx = scan_entry_index(variant);
        const int must = scan_entry_must_apply(variant, r->dtype);
        TEST_CHECK(st == SSM_STATUS_OK || st == SSM_STATUS_UNSUPPORTED, "%s: %s scan %s (%s)", r->tag, name,
                   ssm_status_string(st), ssm_context_last_error(r->ctx));
        TEST_CHECK(must < 0 || (st == SSM_STATUS_OK) == (must == 1), "%s: forced %s gave %s (%s)", r->tag, variant,
                   ssm_status_string(st), ssm_context_last_error(r->ctx));
        if (st == SSM_STATUS_UNSUPPORTED)
            TEST_CHECK(strstr(ssm_context_last_error(r->ctx), "does not apply") != NULL, "%s: message: %s", r->tag,
                       ssm_context_last_error(r->ctx));
        if (idx >= 0 && st == SSM_STATUS_OK) ++scan_ran[idx];
        if (idx >= 0 && st != SSM_STATUS_OK) ++scan_not_applicable[idx];
        TEST_CHECK_STATUS(ssm_context_set_variant(r->ctx, "mamba2_scan", "auto"), SSM_STATUS_OK);
        if (st == SSM_STATUS_UNSUPPORTED) {
            ssmt_variant_forced = 0;
            return 0;
        }
        TEST_CHECK(strcmp(ssm_context_last_variant(r->ctx), variant) == 0, "%s: ran %s, forced %s", r->tag,
                   ssm_context_last_variant(r->ctx), variant);
    } else {
        TEST_CHECK(st == SSM_STATUS_OK, "%s: %s scan %s (%s)", r->tag, name, ssm_status_string(st),
                   ssm_context_last_error(r->ctx));
        TEST_CHECK(scan_entry_index(ssm_context_last_variant(r->ctx)) >= 0, "%s: the default ran '%s'", r->tag,
                   ssm_context_last_variant(r->ctx));
    }
    ssmt_to_host(&pr->out, r->out_dev);
    ssmt_to_host(&pr->final_states, r->fin_dev);
    char label[256];
    snprintf(label, sizeof label, "scan[%s %s] out", r->tag, name);
    ssmt_check_bar_rounded(label, &pr->out.t, &r->rout->t, r->dtype);
    if (pr->final_states.t.data) {
        snprintf(label, sizeof label, "scan[%s %s] final_states", r->tag, name);
        ssmt_check_bar_rounded(label, &pr->final_states.t, &r->rfin->t, r->dtype);
    }
    ssmt_variant_forced = 0;
    return 1;
}

/* scan_pass twice with the entry `variant` forced ("name", then "name again" on re-poisoned
 * outputs): both checked against the reference, and the second must give the first one's bytes
 * (no races). */
static void scan_pass_twice(const scan_run * r, const char * name, const char * variant) {
    ssmt_mamba2_problem * pr = r->pr;
    char                  again[64];
    snprintf(again, sizeof again, "%s again", name);
    if (!scan_pass(r, name, variant)) return;
    void * out = ssmt_snapshot(&pr->out);
    void * fin = pr->final_states.t.data ? ssmt_snapshot(&pr->final_states) : NULL;
    scan_pass(r, again, variant);
    TEST_CHECK(ssmt_unchanged(&pr->out, out), "%s: out differs between two %s runs", r->tag, name);
    if (fin)
        TEST_CHECK(ssmt_unchanged(&pr->final_states, fin), "%s: final_states differ between two %s runs", r->tag,
                   name);
    free(out);
    free(fin);
}

static void test_scan(ssmt_rng * rng, const ssmt_mamba2_config * cfg, const scan_opts * o, const char * tag) {
    ssmt_mamba2_problem pr;
    if (ssmt_mamba2_random_args(rng, cfg, &pr) != 0) {
        TEST_CHECK(0, "%s: allocation failed", tag);
        return;
    }
    if (o->b_f32) { /* the same values in f32 */
        ssmt_host b32 = ssmt_clone(&pr.b.t, SSM_DTYPE_F32);
        ssmt_free(&pr.b);
        pr.b = b32;
        pr.args.b = b32.t;
    }
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    p.chunk_size = o->chunk;
    p.dt_softplus = cfg->dt_softplus;
    if (o->limit) p.dt_limit_lo = 0.002, p.dt_limit_hi = 0.05;

    /* reference: float64 outputs on the host */
    ssm_mamba2_scan_args ra = pr.args;
    ssmt_host            rout = ssmt_alloc(SSM_DTYPE_F64, pr.out.t.ndim, pr.out.t.shape);
    ssmt_host            rfin = {0};
    ra.out = rout.t;
    if (pr.final_states.t.data) {
        rfin = ssmt_alloc(SSM_DTYPE_F64, pr.final_states.t.ndim, pr.final_states.t.shape);
        ra.final_states = rfin.t;
    }
    TEST_CHECK_STATUS(ssm_mamba2_scan(ctx_ref, &p, &ra, NULL, 0), SSM_STATUS_OK);

    /* device copies (outputs arrive NaN-poisoned from the generator) */
    ssmt_host * const hin[] = {&pr.x, &pr.dt, &pr.a, &pr.b, &pr.c, &pr.d, &pr.z, &pr.dt_bias, &pr.initial_states,
                               &pr.out, &pr.final_states, &pr.seq_idx, &pr.cu_seqlens};
    enum { NT = 13 };
    ssmt_dev dv[NT];
    for (int i = 0; i < NT; ++i) {
        const int index = i >= 11;
        if (index && !o->index_device) memset(&dv[i], 0, sizeof dv[i]);
        else dv[i] = ssmt_to_device(hin[i]);
    }
    ssm_mamba2_scan_args da = pr.args;
    ssm_tensor * const   slot[] = {&da.x, &da.dt, &da.a, &da.b, &da.c, &da.d, &da.z, &da.dt_bias, &da.initial_states,
                                   &da.out, &da.final_states, &da.seq_idx, &da.cu_seqlens};
    for (int i = 0; i < NT; ++i)
        if (dv[i].mem != NULL) *slot[i] = dv[i].view;

    ssm_context * ctx = o->use_auto ? ctx_auto : ctx_cuda;
    void *        ws = NULL;
    size_t ws_bytes = 0;
    if (o->workspace) {
        TEST_CHECK_STATUS(ssm_mamba2_scan_workspace_size(ctx, &p, &da, &ws_bytes), SSM_STATUS_OK);
        TEST_CHECK_STATUS(ssm_cuda_malloc(NULL, &ws, ws_bytes), SSM_STATUS_OK);
    }
    const scan_run r = {ctx, &p, &da, ws, ws_bytes, &pr, &dv[9], &dv[10], &rout, &rfin, cfg->dtype, tag};
    scan_pass(&r, "v7", NULL); /* the default choice (hash logs compare builds by its label) */
    const int32_t n = ssm_variant_count(SSM_BACKEND_CUDA, "mamba2_scan");
    for (int32_t i = 0; i < n; ++i) {
        const char * name = ssm_variant_name(SSM_BACKEND_CUDA, "mamba2_scan", i);
        scan_pass_twice(&r, name, name);
    }

    if (ws) TEST_CHECK_STATUS(ssm_cuda_free(NULL, ws), SSM_STATUS_OK);
    for (int i = 0; i < NT; ++i) ssmt_dev_free(&dv[i]);
    ssmt_free(&rout);
    ssmt_free(&rfin);
    ssmt_mamba2_problem_free(&pr);
}

/* ---- chunk_state (upstream layout) -------------------------------------------------------- */
static void test_chunk_state(ssmt_rng * rng, const ssmt_mamba2_config * cfg, int64_t chunk, const char * tag) {
    ssmt_mamba2_problem pr;
    if (ssmt_mamba2_random_args(rng, cfg, &pr) != 0) {
        TEST_CHECK(0, "%s: allocation failed", tag);
        return;
    }
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    p.chunk_size = chunk;
    p.dt_softplus = cfg->dt_softplus;
    const int64_t B = cfg->batch, S = cfg->seqlen, H = cfg->nheads, NC = (S + chunk - 1) / chunk;
    const int64_t sdt[4] = {B, H, NC, chunk}, sst[5] = {B, NC, H, cfg->headdim, cfg->dstate};
    ssmt_host     dt = ssmt_alloc(SSM_DTYPE_F32, 4, sdt), dacs = ssmt_alloc(SSM_DTYPE_F32, 4, sdt);
    ssm_mamba2_chunk_cumsum_args ca = {0};
    ca.dt = pr.args.dt, ca.a = pr.args.a, ca.dt_bias = pr.args.dt_bias, ca.dt_out = dt.t, ca.da_cumsum = dacs.t;
    TEST_CHECK_STATUS(ssm_mamba2_chunk_cumsum(ctx_ref, &p, &ca), SSM_STATUS_OK);
    ssmt_host ref = ssmt_alloc(SSM_DTYPE_F64, 5, sst), got = ssmt_alloc(SSM_DTYPE_F32, 5, sst);
    ssm_mamba2_chunk_state_args a = {0};
    a.b = pr.args.b, a.x = pr.args.x, a.dt = dt.t, a.da_cumsum = dacs.t, a.seq_idx = pr.args.seq_idx, a.states = ref.t;
    TEST_CHECK_STATUS(ssm_mamba2_chunk_state(ctx_ref, &p, &a), SSM_STATUS_OK);
    ssmt_dev db = ssmt_to_device(&pr.b), dx = ssmt_to_device(&pr.x), ddt = ssmt_to_device(&dt), dda = ssmt_to_device(&dacs);
    ssmt_dev dst = ssmt_to_device(&got);
    a.b = db.view, a.x = dx.view, a.dt = ddt.view, a.da_cumsum = dda.view, a.states = dst.view;
    const ssm_status st = ssm_mamba2_chunk_state(ctx_cuda, &p, &a);
    TEST_CHECK(st == SSM_STATUS_OK, "%s: chunk_state %s (%s)", tag, ssm_status_string(st),
               ssm_context_last_error(ctx_cuda));
    ssmt_to_host(&got, &dst);
    char label[256];
    snprintf(label, sizeof label, "chunk_state[%s]", tag);
    ssmt_check_bar(label, &got.t, &ref.t, cfg->dtype);
    /* fp32 x runs "ffma", fp16/bf16 x with these chunks (≤ 256) the scan's state kernels ("wgmma" or
     * "mma"); the default's entry forced gives its bytes, an entry of the other dtype does not apply
     * (test_cuda_mamba2_chunk_state covers every entry) */
    const int fp32 = cfg->dtype == SSM_DTYPE_F32;
    char      own[32];
    snprintf(own, sizeof own, "%s", ssm_context_last_variant(ctx_cuda));
    TEST_CHECK(fp32 ? strcmp(own, "ffma") == 0 : (strcmp(own, "wgmma") == 0 || strcmp(own, "mma") == 0),
               "%s: chunk_state ran '%s'", tag, own);
    void * first = ssmt_snapshot(&got);
    ssmt_variant_forced = 1;
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba2_chunk_state", fp32 ? "wmma" : "ffma"), SSM_STATUS_OK);
    TEST_CHECK_STATUS(ssm_mamba2_chunk_state(ctx_cuda, &p, &a), SSM_STATUS_UNSUPPORTED);
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba2_chunk_state", own), SSM_STATUS_OK);
    TEST_CHECK_STATUS(ssm_mamba2_chunk_state(ctx_cuda, &p, &a), SSM_STATUS_OK);
    ssmt_to_host(&got, &dst);
    TEST_CHECK(ssmt_unchanged(&got, first), "%s: chunk_state forced '%s' differs from the default", tag, own);
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba2_chunk_state", "auto"), SSM_STATUS_OK);
    ssmt_variant_forced = 0;
    free(first);
    ssmt_dev_free(&db), ssmt_dev_free(&dx), ssmt_dev_free(&ddt), ssmt_dev_free(&dda), ssmt_dev_free(&dst);
    ssmt_free(&dt), ssmt_free(&dacs), ssmt_free(&ref), ssmt_free(&got);
    ssmt_mamba2_problem_free(&pr);
}

/* ---- chunk_state on the CANN layout at the CANN shape -------------------------------------- */
static void test_cann_chunk_state(ssmt_rng * rng) {
    ssmt_cann_chunk_state c;
    ssmt_cann_chunk_state_make(rng, &c);
    ssm_mamba2_chunk_state_args a = c.args;
    TEST_CHECK_STATUS(ssm_mamba2_chunk_state(ctx_ref, &c.params, &a), SSM_STATUS_OK);
    ssmt_dev   dx = ssmt_to_device(&c.x), db = ssmt_to_device(&c.b), ddt = ssmt_to_device(&c.dt);
    ssmt_dev   dda = ssmt_to_device(&c.dacs), ds = ssmt_to_device(&c.out);
    ssm_tensor dtv_d = c.dtv, dav_d = c.dav, sv_d = c.outv;
    dtv_d.data = ddt.view.data, dav_d.data = dda.view.data, sv_d.data = ds.view.data;
    dtv_d.device = dav_d.device = sv_d.device = dx.view.device;
    a.b = db.view, a.x = dx.view, a.dt = dtv_d, a.da_cumsum = dav_d, a.states = sv_d;
    TEST_CHECK_STATUS(ssm_mamba2_chunk_state(ctx_cuda, &c.params, &a), SSM_STATUS_OK);
    ssmt_to_host(&c.out, &ds);
    ssmt_check_bar("chunk_state[cann B1 NC4 L256 H128 G8 N128 P64 f16]", &c.out.t, &c.ref.t, SSM_DTYPE_F16);
    ssmt_dev_free(&dx), ssmt_dev_free(&db), ssmt_dev_free(&ddt), ssmt_dev_free(&dda), ssmt_dev_free(&ds);
    ssmt_cann_chunk_state_free(&c);
}

/* ---- variant names -------------------------------------------------------------------------- */
static void test_variant_names(void) {
    static const char * const ops[] = {"mamba2_chunk_state", "mamba2_scan"};
    for (int k = 0; k < 2; ++k) {
        const int32_t n = ssm_variant_count(SSM_BACKEND_CUDA, ops[k]);
        TEST_CHECK(n > 0 && n <= MAX_ENTRIES, "%s: %d CUDA variants", ops[k], (int)n);
        for (int32_t i = 0; i < n; ++i) {
            const char * name = ssm_variant_name(SSM_BACKEND_CUDA, ops[k], i);
            const char * why = ssm_variant_why(SSM_BACKEND_CUDA, ops[k], i);
            TEST_CHECK(name != NULL && name[0] != '\0' && why != NULL && why[0] != '\0', "%s: entry %d", ops[k], (int)i);
        }
        /* an unknown name: INVALID_ARGUMENT, naming the valid ones */
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, ops[k], "no_such_kernel"), SSM_STATUS_INVALID_ARGUMENT);
        TEST_CHECK(strstr(ssm_context_last_error(ctx_cuda), "ffma") != NULL, "message: %s",
                   ssm_context_last_error(ctx_cuda));
    }
    /* a name of another operator's table */
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba2_chunk_state", "chain"), SSM_STATUS_INVALID_ARGUMENT);
}

/* ---- a NaN dt ------------------------------------------------------------------------------- */
/* A NaN in dt stays NaN through the dt rule (it is not clamped to dt_limit_lo), so every output and
 * final state it reaches is NaN on the device as in the reference: the same NaN pattern, per dtype
 * (fp32: ffma; fp16/bf16: the default 16-bit entry), with and without softplus. */
static void test_nan_dt(ssmt_rng * rng) {
    static const ssm_dtype dtypes[] = {SSM_DTYPE_F32, SSM_DTYPE_BF16, SSM_DTYPE_F16};
    for (int k = 0; k < 3; ++k) {
        ssmt_mamba2_config cfg;
        ssmt_mamba2_config_init(&cfg);
        cfg.batch = 2, cfg.seqlen = 300, cfg.nheads = 2, cfg.headdim = 64, cfg.dstate = 64, cfg.ngroups = 1;
        cfg.dtype = dtypes[k];
        cfg.out_dtype = SSM_DTYPE_F32;
        cfg.has_dt_bias = 1, cfg.has_initial = 1, cfg.has_final = 1, cfg.dt_softplus = k != 1;
        ssmt_mamba2_problem pr;
        if (ssmt_mamba2_random_args(rng, &cfg, &pr) != 0) {
            TEST_CHECK(0, "nan dt: allocation failed");
            return;
        }
        ssmt_set(&pr.dt.t, (1 * cfg.seqlen + 100) * cfg.nheads + 1, NAN); /* row 1, token 100, head 1 */
        ssm_mamba2_params p;
        ssm_mamba2_params_init(&p);
        p.dt_softplus = cfg.dt_softplus;
        p.dt_limit_lo = 0.001; /* a NaN clamped to a limit would be finite */
        ssm_mamba2_scan_args ra = pr.args;
        ssmt_host            rout = ssmt_alloc(SSM_DTYPE_F64, pr.out.t.ndim, pr.out.t.shape);
        ssmt_host            rfin = ssmt_alloc(SSM_DTYPE_F64, pr.final_states.t.ndim, pr.final_states.t.shape);
        ra.out = rout.t, ra.final_states = rfin.t;
        TEST_CHECK_STATUS(ssm_mamba2_scan(ctx_ref, &p, &ra, NULL, 0), SSM_STATUS_OK);
        ssmt_host * const hin[] = {&pr.x, &pr.dt, &pr.a, &pr.b, &pr.c, &pr.dt_bias, &pr.initial_states, &pr.out,
                                   &pr.final_states};
        ssmt_dev          dv[9];
        for (int i = 0; i < 9; ++i) dv[i] = ssmt_to_device(hin[i]);
        ssm_mamba2_scan_args da = pr.args;
        ssm_tensor * const   slot[] = {&da.x, &da.dt, &da.a, &da.b, &da.c, &da.dt_bias, &da.initial_states, &da.out,
                                       &da.final_states};
        for (int i = 0; i < 9; ++i) *slot[i] = dv[i].view;
        TEST_CHECK_STATUS(ssm_mamba2_scan(ctx_cuda, &p, &da, NULL, 0), SSM_STATUS_OK);
        ssmt_to_host(&pr.out, &dv[7]);
        ssmt_to_host(&pr.final_states, &dv[8]);
        int64_t nans = 0;
        const int64_t bad = ssmt_nan_mismatch(&pr.out.t, &rout.t, &nans) +
                            ssmt_nan_mismatch(&pr.final_states.t, &rfin.t, &nans);
        TEST_CHECK(nans > 0 && bad == 0, "nan dt %s: %lld NaN in the reference, %lld elements differ in NaN-ness",
                   ssm_dtype_name(cfg.dtype), (long long)nans, (long long)bad);
        for (int i = 0; i < 9; ++i) ssmt_dev_free(&dv[i]);
        ssmt_free(&rout), ssmt_free(&rfin);
        ssmt_mamba2_problem_free(&pr);
    }
}

/* ---- device rules ---------------------------------------------------------------------------- */
static void test_device_rules(ssmt_rng * rng) {
    ssmt_mamba2_config cfg;
    ssmt_mamba2_config_init(&cfg);
    ssmt_mamba2_problem pr;
    if (ssmt_mamba2_random_args(rng, &cfg, &pr) != 0) return;
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    p.chunk_size = 16;
    /* CPU tensors under the CUDA backend */
    TEST_CHECK_STATUS(ssm_mamba2_scan(ctx_cuda, &p, &pr.args, NULL, 0), SSM_STATUS_INVALID_LAYOUT);
    TEST_CHECK(strstr(ssm_context_last_error(ctx_cuda), "CUDA") != NULL, "message: %s", ssm_context_last_error(ctx_cuda));
    /* mixed devices under AUTO (x on the device, the rest on the host): nothing written */
    ssmt_dev              dx = ssmt_to_device(&pr.x);
    ssm_mamba2_scan_args a = pr.args;
    a.x = dx.view;
    TEST_CHECK_STATUS(ssm_mamba2_scan(ctx_auto, &p, &a, NULL, 0), SSM_STATUS_INVALID_LAYOUT);
    TEST_CHECK(strstr(ssm_context_last_error(ctx_auto), "mixed devices") != NULL, "message: %s",
               ssm_context_last_error(ctx_auto));
    /* a host pointer labelled as a CUDA tensor */
    ssmt_host hx = pr.x;
    ssmt_dev   all[4] = {ssmt_to_device(&pr.dt), ssmt_to_device(&pr.a), ssmt_to_device(&pr.b), ssmt_to_device(&pr.c)};
    ssmt_dev   dout = ssmt_to_device(&pr.out);
    a.dt = all[0].view, a.a = all[1].view, a.b = all[2].view, a.c = all[3].view, a.out = dout.view;
    a.x = hx.t;
    a.x.device.type = SSM_DEVICE_CUDA;
    TEST_CHECK_STATUS(ssm_mamba2_scan(ctx_cuda, &p, &a, NULL, 0), SSM_STATUS_INVALID_LAYOUT);
    /* ops without a CUDA path say so */
    const int64_t sdt[4] = {cfg.batch, cfg.nheads, (cfg.seqlen + 15) / 16, 16};
    ssmt_host     o1 = ssmt_alloc(SSM_DTYPE_F32, 4, sdt), o2 = ssmt_alloc(SSM_DTYPE_F32, 4, sdt);
    ssm_mamba2_chunk_cumsum_args ca = {0};
    ca.dt = pr.args.dt, ca.a = pr.args.a, ca.dt_out = o1.t, ca.da_cumsum = o2.t;
    TEST_CHECK_STATUS(ssm_mamba2_chunk_cumsum(ctx_cuda, &p, &ca), SSM_STATUS_UNSUPPORTED);
    TEST_CHECK(strstr(ssm_context_last_error(ctx_cuda), "CUDA") != NULL, "message: %s", ssm_context_last_error(ctx_cuda));
    ssmt_free(&o1), ssmt_free(&o2);
    ssmt_dev_free(&dx), ssmt_dev_free(&dout);
    for (int i = 0; i < 4; ++i) ssmt_dev_free(&all[i]);
    ssmt_mamba2_problem_free(&pr);
}

int main(void) {
    if (!ssmt_cuda_present("test_cuda_mamba2")) {
        return 77;
    }
    const char * env = getenv("SSMOPS_TEST_SEED");
    uint64_t     seed = env ? strtoull(env, NULL, 10) : 20261202u;
    printf("seed %llu, %d CUDA device(s)\n", (unsigned long long)seed, (int)ssm_cuda_device_count());
    ssmt_rng rng;
    ssmt_rng_seed(&rng, seed);
    ctx_ref = ssmt_make_ctx(SSM_BACKEND_REF, 0, SSM_ISA_AUTO);
    ctx_cuda = ssmt_make_ctx(SSM_BACKEND_CUDA, 0, SSM_ISA_AUTO);
    ctx_auto = ssmt_make_ctx(SSM_BACKEND_AUTO, 0, SSM_ISA_AUTO);
    TEST_CHECK(ctx_ref && ctx_cuda && ctx_auto, "context creation failed");
    if (ssmt_failures) TEST_EXIT();

    test_device_rules(&rng);
    test_variant_names();

    static const ssm_dtype dtypes[] = {SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16};
    /* H, P, N, G: G = 1, 1 < G < H, G = H; P and N off the 16/64 tiles too */
    static const int64_t hpng[][4] = {{4, 64, 128, 1}, {6, 24, 40, 3}, {4, 5, 3, 4}, {2, 80, 256, 2}};
    static const int64_t seqlens[] = {1, 63, 64, 65, 200, 257};
    static const int64_t chunks[] = {64, 64, 32, 16, 128, 7};
    int                  k = 0;
    for (size_t si = 0; si < sizeof seqlens / sizeof seqlens[0]; ++si) {
        for (int variant = 0; variant < 3; ++variant) {
            for (int di = 0; di < 3; ++di, ++k) {
                ssmt_mamba2_config cfg;
                ssmt_mamba2_config_init(&cfg);
                const int sh = k % 4;
                cfg.batch = 1 + (k % 2);
                cfg.seqlen = seqlens[si];
                cfg.nheads = hpng[sh][0], cfg.headdim = hpng[sh][1], cfg.dstate = hpng[sh][2], cfg.ngroups = hpng[sh][3];
                cfg.dtype = dtypes[di];
                cfg.out_dtype = (k % 4 == 0) ? cfg.dtype : SSM_DTYPE_F32;
                cfg.d_mode = k % 3;
                cfg.has_z = (k % 2) == 1;
                cfg.has_dt_bias = (k % 4) != 3;
                cfg.has_initial = (k % 3) != 1;
                cfg.has_final = (k % 2) == 0 || cfg.has_initial;
                cfg.dt_softplus = (k % 3) == 0;
                cfg.strided = (k % 2) == 0;
                cfg.index_i64 = (k % 4) == 1;
                int64_t lens[4] = {cfg.seqlen / 3, 0, cfg.seqlen - cfg.seqlen / 3 - cfg.seqlen / 4, cfg.seqlen / 4};
                const char * layout = ssmt_mamba2_layout(&cfg, variant, cfg.seqlen > 1 ? 3 : 0, lens, 4);
                scan_opts o = {chunks[si], (k % 5) == 2, (k % 2) == 0, (k % 3) == 0, (k % 4) == 2, 0};
                char      tag[200];
                snprintf(tag, sizeof tag, "S%lld Q%lld H%lld P%lld N%lld G%lld %s %s", (long long)cfg.seqlen,
                         (long long)o.chunk, (long long)cfg.nheads, (long long)cfg.headdim, (long long)cfg.dstate,
                         (long long)cfg.ngroups, ssm_dtype_name(cfg.dtype),
                         layout);
                test_scan(&rng, &cfg, &o, tag);
                if (variant < 2 && si % 2 == 0) test_chunk_state(&rng, &cfg, chunks[si], tag);
            }
        }
    }
    /* the 128-row output tiles (tags "v4 ..."): chunk lengths just below / at / above 64, 128, 192
     * and 256 tokens (upper warps idle, the last token tile alone, a full chunk plus one), several
     * chunks; P and N off the tiles with the 16-byte paths on (P=72, N=136) and off (N=20) */
    static const int64_t wide_hpng[][4] = {{3, 72, 136, 1}, {4, 16, 20, 2}, {2, 64, 128, 2}};
    static const int64_t wide_seqlens[] = {96, 128, 129, 192, 193, 256, 520};
    for (size_t si = 0; si < sizeof wide_seqlens / sizeof wide_seqlens[0]; ++si) {
        for (int variant = 0; variant < 3; ++variant, ++k) {
            ssmt_mamba2_config cfg;
            ssmt_mamba2_config_init(&cfg);
            const int sh = (int)((si + (size_t)variant) % 3);
            cfg.batch = variant == 2 ? 1 : 1 + (k % 2);
            cfg.seqlen = wide_seqlens[si];
            cfg.nheads = wide_hpng[sh][0], cfg.headdim = wide_hpng[sh][1], cfg.dstate = wide_hpng[sh][2];
            cfg.ngroups = wide_hpng[sh][3];
            cfg.dtype = (k % 2) ? SSM_DTYPE_BF16 : SSM_DTYPE_F16;
            /* k % 3 would equal the variant here (k = 54 + 3·si + variant): dense would always get
             * narrow outputs and varlen never initial states; k3 varies them within each variant */
            const int k3 = (k + (int)si) % 3;
            cfg.out_dtype = (k3 == 0) ? cfg.dtype : SSM_DTYPE_F32;
            cfg.d_mode = k3;
            cfg.has_z = (k % 2) == 0;
            cfg.has_dt_bias = (k % 4) != 1;
            cfg.has_initial = k3 != 2;
            cfg.has_final = 1;
            cfg.dt_softplus = (k % 2) == 1;
            cfg.strided = (k % 4) == 3;
            cfg.index_i64 = (k % 2) == 0;
            int64_t lens[4] = {cfg.seqlen / 3, 0, cfg.seqlen - cfg.seqlen / 3 - cfg.seqlen / 4, cfg.seqlen / 4};
            const char * layout = ssmt_mamba2_layout(&cfg, variant, 3, lens, 4);
            scan_opts o = {64, (k % 5) == 1, (k % 2) == 1, k3 == 1, 0, 0};
            char      tag[200];
            snprintf(tag, sizeof tag, "v4 S%lld H%lld P%lld N%lld G%lld %s %s%s", (long long)cfg.seqlen,
                     (long long)cfg.nheads, (long long)cfg.headdim, (long long)cfg.dstate, (long long)cfg.ngroups,
                     ssm_dtype_name(cfg.dtype), layout,
                     cfg.strided ? " strided" : "");
            test_scan(&rng, &cfg, &o, tag);
        }
    }
    /* the wgmma kernels' layouts (tags "v6 ..."; 16-bit, contiguous rows, N = 64 or 128): P = 64 and
     * P = 72 (a second, partial p tile), chunk lengths below / at / above 64 and 128 and odd, dense /
     * seq_idx / varlen, D and z on and off (every case also runs every other entry in test_scan) */
    static const int64_t wg_hpng[][4] = {{2, 64, 128, 1}, {3, 72, 64, 1}, {2, 72, 128, 2}, {4, 64, 64, 4}};
    static const int64_t wg_seqlens[] = {63, 64, 65, 127, 128, 129, 257, 520};
    for (size_t si = 0; si < sizeof wg_seqlens / sizeof wg_seqlens[0]; ++si) {
        for (int variant = 0; variant < 3; ++variant, ++k) {
            ssmt_mamba2_config cfg;
            ssmt_mamba2_config_init(&cfg);
            const int sh = (int)((si + (size_t)variant) % 4);
            cfg.batch = variant == 2 ? 1 : 1 + (int)(si % 2);
            cfg.seqlen = wg_seqlens[si];
            cfg.nheads = wg_hpng[sh][0], cfg.headdim = wg_hpng[sh][1], cfg.dstate = wg_hpng[sh][2];
            cfg.ngroups = wg_hpng[sh][3];
            cfg.dtype = ((si + (size_t)variant) % 2) ? SSM_DTYPE_BF16 : SSM_DTYPE_F16;
            const int k3 = (int)((si + 2 * (size_t)variant) % 3);
            cfg.out_dtype = (k3 == 0) ? cfg.dtype : SSM_DTYPE_F32;
            cfg.d_mode = k3;                            /* none, 1-d, 2-d */
            cfg.has_z = (int)((si / 2 + (size_t)variant) % 2); /* on and off at every length pair */
            cfg.has_dt_bias = 1;
            cfg.has_initial = k3 != 1;
            cfg.has_final = 1;
            cfg.dt_softplus = (int)(si % 2);
            cfg.strided = 0;
            cfg.index_i64 = variant == 1;
            int64_t lens[4] = {cfg.seqlen / 3, 0, cfg.seqlen - cfg.seqlen / 3 - cfg.seqlen / 4, cfg.seqlen / 4};
            const char * layout = ssmt_mamba2_layout(&cfg, variant, 3, lens, 4);
            scan_opts o = {64, 0, 0, 0, 0, 0};
            char      tag[200];
            snprintf(tag, sizeof tag, "v6 S%lld H%lld P%lld N%lld G%lld %s %s d%d z%d", (long long)cfg.seqlen,
                     (long long)cfg.nheads, (long long)cfg.headdim, (long long)cfg.dstate, (long long)cfg.ngroups,
                     ssm_dtype_name(cfg.dtype), layout,
                     cfg.d_mode, cfg.has_z);
            test_scan(&rng, &cfg, &o, tag);
        }
    }
    /* the wgmma output kernel's pipeline edges (tags "v7 ..."; the same layouts): chunk lengths that
     * give the 128-row tile at i0 = 128 three token tiles with an idle second warpgroup (192), four
     * with one row in it (193), four with a partial last tile (255), and a partial p tile (P = 72) */
    static const int64_t wg_pipe_seqlens[] = {192, 193, 255, 449};
    for (size_t si = 0; si < sizeof wg_pipe_seqlens / sizeof wg_pipe_seqlens[0]; ++si) {
        for (int variant = 0; variant < 3; ++variant, ++k) {
            ssmt_mamba2_config cfg;
            ssmt_mamba2_config_init(&cfg);
            const int sh = (int)((si + (size_t)variant) % 4);
            cfg.batch = variant == 2 ? 1 : 1 + (int)(si % 2);
            cfg.seqlen = wg_pipe_seqlens[si];
            cfg.nheads = wg_hpng[sh][0], cfg.headdim = wg_hpng[sh][1], cfg.dstate = wg_hpng[sh][2];
            cfg.ngroups = wg_hpng[sh][3];
            cfg.dtype = ((si + (size_t)variant) % 2) ? SSM_DTYPE_F16 : SSM_DTYPE_BF16;
            const int k3 = (int)((si + 2 * (size_t)variant) % 3);
            cfg.out_dtype = (k3 == 1) ? cfg.dtype : SSM_DTYPE_F32;
            cfg.d_mode = k3;
            cfg.has_z = (int)((si + (size_t)variant) % 2);
            cfg.has_dt_bias = 1;
            cfg.has_initial = k3 != 2;
            cfg.has_final = 1;
            cfg.dt_softplus = (int)((si + 1) % 2);
            cfg.strided = 0;
            cfg.index_i64 = variant == 1;
            int64_t lens[3] = {cfg.seqlen - cfg.seqlen / 4, 0, cfg.seqlen / 4};
            const char * layout = ssmt_mamba2_layout(&cfg, variant, 2, lens, 3);
            scan_opts o = {64, 0, 0, 0, 0, 0};
            char      tag[200];
            snprintf(tag, sizeof tag, "v7 S%lld H%lld P%lld N%lld G%lld %s %s d%d z%d", (long long)cfg.seqlen,
                     (long long)cfg.nheads, (long long)cfg.headdim, (long long)cfg.dstate, (long long)cfg.ngroups,
                     ssm_dtype_name(cfg.dtype), layout,
                     cfg.d_mode, cfg.has_z);
            test_scan(&rng, &cfg, &o, tag);
        }
    }
    /* the chained state kernel over long chains (every case runs it in test_scan): 9 chunks with a
     * partial last one, varlen with an empty sequence and P = 72, seq_idx with G = H, and a grid of
     * more blocks than the H200 has SMs with short chains (B = 2, H = 40: 160 blocks, 3 chunks), where
     * the default chooses the chain */
    static const int64_t ch_cfg[][7] = {/* S, B, H, P, N, G, variant */
                                        {2100, 1, 2, 64, 128, 1, 0},
                                        {2100, 1, 3, 72, 64, 1, 2},
                                        {1500, 2, 2, 64, 64, 2, 1},
                                        {700, 2, 40, 64, 128, 1, 0}};
    for (size_t ci = 0; ci < sizeof ch_cfg / sizeof ch_cfg[0]; ++ci, ++k) {
        ssmt_mamba2_config cfg;
        ssmt_mamba2_config_init(&cfg);
        cfg.seqlen = ch_cfg[ci][0], cfg.batch = ch_cfg[ci][1];
        cfg.nheads = ch_cfg[ci][2], cfg.headdim = ch_cfg[ci][3], cfg.dstate = ch_cfg[ci][4];
        cfg.ngroups = ch_cfg[ci][5];
        const int variant = (int)ch_cfg[ci][6];
        cfg.dtype = (ci % 2) ? SSM_DTYPE_F16 : SSM_DTYPE_BF16;
        cfg.out_dtype = SSM_DTYPE_F32;
        cfg.d_mode = (int)(ci % 3);
        cfg.has_z = (int)(ci % 2 == 0);
        cfg.has_dt_bias = 1;
        cfg.has_initial = ci != 2;
        cfg.has_final = 1;
        cfg.dt_softplus = 1;
        cfg.index_i64 = variant == 1;
        int64_t lens[3] = {1000, 0, cfg.seqlen - 1000};
        const char * layout = ssmt_mamba2_layout(&cfg, variant, 3, lens, 3);
        scan_opts o = {256, 0, 0, 0, 0, 0};
        char      tag[200];
        snprintf(tag, sizeof tag, "chain S%lld B%lld H%lld P%lld N%lld G%lld %s %s", (long long)cfg.seqlen,
                 (long long)cfg.batch, (long long)cfg.nheads, (long long)cfg.headdim, (long long)cfg.dstate,
                 (long long)cfg.ngroups, ssm_dtype_name(cfg.dtype),
                 layout);
        test_scan(&rng, &cfg, &o, tag);
    }
    /* no tokens at all: final = initial */
    {
        ssmt_mamba2_config cfg;
        ssmt_mamba2_config_init(&cfg);
        cfg.seqlen = 0;
        cfg.has_initial = cfg.has_final = 1;
        scan_opts o = {64, 0, 0, 0, 0, 0};
        test_scan(&rng, &cfg, &o, "S0 final=initial f32");
    }
    test_cann_chunk_state(&rng);

    /* the cases below draw from a generator of their own: the cases above keep their inputs */
    ssmt_rng xrng;
    ssmt_rng_seed(&xrng, seed + 7);
    test_nan_dt(&xrng);
    /* B in f32 under fp16/bf16 x (the chunk states weight B instead of x), N = 64 and 128 too */
    static const int64_t bf_hpng[][4] = {{2, 64, 128, 1}, {3, 72, 40, 3}, {2, 64, 64, 2}};
    for (int ci = 0; ci < 3; ++ci, ++k) {
        ssmt_mamba2_config cfg;
        ssmt_mamba2_config_init(&cfg);
        cfg.seqlen = 300, cfg.batch = 2;
        cfg.nheads = bf_hpng[ci][0], cfg.headdim = bf_hpng[ci][1], cfg.dstate = bf_hpng[ci][2];
        cfg.ngroups = bf_hpng[ci][3];
        cfg.dtype = ci % 2 ? SSM_DTYPE_F16 : SSM_DTYPE_BF16;
        cfg.out_dtype = ci == 2 ? cfg.dtype : SSM_DTYPE_F32;
        cfg.d_mode = ci;
        cfg.has_z = ci != 1;
        cfg.has_dt_bias = 1;
        cfg.has_initial = 1;
        cfg.has_final = 1;
        cfg.dt_softplus = 1;
        int64_t      lens[3] = {100, 0, 200};
        const char * layout = ssmt_mamba2_layout(&cfg, ci, 2, lens, 3);
        scan_opts    o = {64, 0, ci == 1, 0, 0, 1};
        char         tag[200];
        snprintf(tag, sizeof tag, "b-f32 S%lld H%lld P%lld N%lld G%lld %s %s", (long long)cfg.seqlen,
                 (long long)cfg.nheads, (long long)cfg.headdim, (long long)cfg.dstate, (long long)cfg.ngroups,
                 ssm_dtype_name(cfg.dtype), layout);
        test_scan(&xrng, &cfg, &o, tag);
    }

    /* every entry ran somewhere (those of sm_90a only on such a device and build); with
     * SSMOPS_CUDA_PORTABLE=1 exactly the entries without wgmma ran */
    const int32_t n = ssm_variant_count(SSM_BACKEND_CUDA, "mamba2_scan");
    for (int32_t i = 0; i < n && i < MAX_ENTRIES; ++i) {
        const char * name = ssm_variant_name(SSM_BACKEND_CUDA, "mamba2_scan", i);
        printf("mamba2_scan variant %-10s ran %4d times, did not apply %4d times\n", name, scan_ran[i],
               scan_not_applicable[i]);
        if (scan_entry_must_apply(name, SSM_DTYPE_F32) == 1 || scan_entry_must_apply(name, SSM_DTYPE_F16) == 1)
            TEST_CHECK(scan_ran[i] > 0, "mamba2_scan variant %s never ran", name);
        if (ssmt_cuda_portable())
            TEST_CHECK((scan_ran[i] > 0) == !ssmt_variant_needs_wgmma("mamba2_scan", name),
                       "SSMOPS_CUDA_PORTABLE=1: mamba2_scan variant %s ran %d times", name, scan_ran[i]);
    }

    ssm_context_free(ctx_ref);
    ssm_context_free(ctx_cuda);
    ssm_context_free(ctx_auto);
    TEST_EXIT();
}
