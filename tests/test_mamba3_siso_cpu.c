/*
 * test_mamba3_siso_cpu.c — the optimised CPU backend of the Mamba-3 SISO forward family
 * (combined forward, core forward, angle cumsum and its backward, decode step) against the
 * float64 reference (run with F64 outputs), on seeded random shapes around the chunk and
 * tile edges, every optional input on and off, f32/f16/bf16, strided views, stride-0 angles
 * over heads, varlen with an empty sequence, pregate_y on every second pair of configurations,
 * NaN-poisoned outputs. Also: 1, 2 and 3 threads
 * give identical bytes, the scalar ISA passes the same bars, and CPU self-consistency in
 * fp32 (rel_rms ≤ 1e-5): fused combined == angle_cumsum then siso_fwd; forward over S
 * tokens == S decode steps (in place on the pool); two calls chained through the final
 * states == one call; varlen == one call per sequence; step with a permuted slot map,
 * padding rows and an in-place pool. chunk_states of both forwards (C = 32, 64, 96; varlen with
 * an empty sequence, initial states on and off, GQA, tails, F32 and F64 rows, a strided view)
 * against the reference within the bars, with out and the finals unchanged by asking for them;
 * a chunk_size that is not a multiple of 32 is UNSUPPORTED with nothing written.
 * Seed: SSMOPS_TEST_SEED (default 20261201). SHOWCMP=1 prints every comparison.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "testutil.h"

static ssm_context *ctx_ref, *ctx_cpu[4], *ctx_scalar;
static ssm_mamba3_params g_params;

/* ---- the op-generic harness: ssmt_op_case / ssmt_op_run (testutil) ------------------- */
static void run_case(const ssmt_op_case * oc) { ssmt_op_run(oc, ctx_ref, ctx_cpu, ctx_scalar); }

static ssm_status run_siso(ssm_context * c, void * a) { return ssm_mamba3_siso(c, &g_params, a); }
static ssm_status run_fwd(ssm_context * c, void * a) { return ssm_mamba3_siso_fwd(c, &g_params, a); }
static ssm_status run_angle(ssm_context * c, void * a) { return ssm_mamba3_angle_cumsum(c, &g_params, a); }
static ssm_status run_angle_bwd(ssm_context * c, void * a) { return ssm_mamba3_angle_cumsum_bwd(c, &g_params, a); }
static ssm_status run_step(ssm_context * c, void * a) { return ssm_mamba3_siso_step(c, &g_params, a); }

/* ---- the sweep: every op against the reference for one configuration -------------------- */
static void test_config(ssmt_rng * rng, const ssmt_mamba3_config * cfg, const char * tag) {
    ssmt_mamba3_problem pr;
    if (ssmt_mamba3_random_args(rng, cfg, &pr) != 0) {
        TEST_CHECK(0, "%s: could not build the problem", tag);
        return;
    }
    ssmt_mamba3_params(cfg, &g_params);
    /* every second pair of configurations also asks both forwards for pregate_y (F32): pairs,
     * since neighbouring configurations often differ in z alone */
    static int calls;
    ssmt_host  y;
    memset(&y, 0, sizeof y);
    if (calls++ / 2 % 2 == 1) {
        y = ssmt_alloc(SSM_DTYPE_F32, 4, pr.args.v.shape);
        TEST_CHECK(y.t.data != NULL, "%s: no memory for pregate_y", tag);
        pr.args.pregate_y = y.t, pr.fwd_args.pregate_y = y.t;
    }
    char name[300];
    {
        ssm_mamba3_siso_args a  = pr.args;
        snprintf(name, sizeof name, "siso[%s]", tag);
        ssmt_op_case oc = ssmt_op_case_make(name, "mamba3_siso", &a, sizeof a, cfg->dtype, cfg->out_dtype, run_siso);
        if (a.final_angle_state.data) oc.angle_outs = 1u << 1;
        run_case(&oc);
    }
    {
        ssm_mamba3_siso_fwd_args a  = pr.fwd_args;
        snprintf(name, sizeof name, "siso_fwd[%s]", tag);
        ssmt_op_case oc = ssmt_op_case_make(name, "mamba3_siso_fwd", &a, sizeof a, cfg->dtype, cfg->out_dtype, run_fwd);
        run_case(&oc);
    }
    if (pr.angle_args.angles_cumsum.data) {
        ssm_mamba3_angle_cumsum_args a  = pr.angle_args;
        snprintf(name, sizeof name, "angle_cumsum[%s]", tag);
        ssmt_op_case oc = ssmt_op_case_make(name, "mamba3_angle_cumsum", &a, sizeof a, cfg->dtype, cfg->out_dtype,
                                            run_angle);
        oc.angle_outs = 3u;
        run_case(&oc);
    }
    {
        const int64_t * sa = pr.args.angles.shape;
        const int64_t   sd[3] = { sa[0], sa[2], sa[1] }, sst[3] = { pr.nseq, sa[2], sa[3] };
        ssmt_host       dth = ssmt_alloc(cfg->dtype, 4, sa), dfin = ssmt_alloc(SSM_DTYPE_F32, 3, sst);
        ssmt_host       dang = ssmt_alloc(cfg->out_dtype, 4, sa), ddt = ssmt_alloc(cfg->out_dtype, 3, sd);
        ssmt_host       dst  = ssmt_alloc(cfg->out_dtype, 3, sst);
        ssmt_fill_normal(rng, &dth.t, 0, 1), ssmt_fill_normal(rng, &dfin.t, 0, 1);
        ssm_mamba3_angle_cumsum_bwd_args a = { 0 };
        a.dangles_cumsum = dth.t, a.angles = pr.args.angles, a.dt = pr.args.dt, a.cu_seqlens = pr.args.cu_seqlens;
        if (cfg->has_states) a.dfinal_angle_state = dfin.t;
        a.dangles = dang.t, a.ddt = ddt.t;
        if (cfg->has_final) a.dangle_state = dst.t;
        snprintf(name, sizeof name, "angle_cumsum_bwd[%s]", tag);
        ssmt_op_case oc = ssmt_op_case_make(name, "mamba3_angle_cumsum_bwd", &a, sizeof a, cfg->dtype, cfg->out_dtype,
                                            run_angle_bwd);
        run_case(&oc);
        ssmt_free(&dth), ssmt_free(&dfin), ssmt_free(&dang), ssmt_free(&ddt), ssmt_free(&dst);
    }
    ssmt_free(&y);
    ssmt_mamba3_problem_free(&pr);
}

/* ---- CPU self-consistency (fp32) --------------------------------------------------------- */
static ssmt_host f32_like(const ssm_tensor * t) { return ssmt_alloc(SSM_DTYPE_F32, t->ndim, t->shape); }

/* The config of the self-consistency tests: these B, S, H, Hq, K, V, A; initial and final states. */
static ssmt_mamba3_config sc_config(int64_t B, int64_t S, int64_t H, int64_t Hq, int64_t K, int64_t V, int64_t A) {
    ssmt_mamba3_config cfg;
    ssmt_mamba3_config_init(&cfg);
    cfg.batch = B, cfg.seqlen = S, cfg.nheads = H, cfg.nheads_qk = Hq, cfg.dk = K, cfg.dv = V, cfg.nangles = A;
    cfg.has_states = 1, cfg.has_final = 1;
    return cfg;
}

/* A random problem of cfg, and g_params from it; 0, or -1 when it could not be built. */
static int sc_problem(ssmt_rng * rng, const ssmt_mamba3_config * cfg, ssmt_mamba3_problem * pr) {
    if (ssmt_mamba3_random_args(rng, cfg, pr) != 0) return -1;
    ssmt_mamba3_params(cfg, &g_params);
    return 0;
}

/* fused combined == angle_cumsum then siso_fwd */
static void test_fused_vs_chained(ssmt_rng * rng) {
    const ssmt_mamba3_config cfg = sc_config(2, 150, 4, 2, 32, 24, 16);
    ssmt_mamba3_problem      pr;
    if (sc_problem(rng, &cfg, &pr) != 0) return;
    TEST_CHECK_STATUS(ssm_mamba3_siso(ctx_cpu[2], &g_params, &pr.args), SSM_STATUS_OK);
    ssmt_host out2 = f32_like(&pr.out.t), fs2 = f32_like(&pr.final_ssm_state.t), fk2 = f32_like(&pr.final_k_state.t);
    ssmt_host fv2 = f32_like(&pr.final_v_state.t), fa2 = f32_like(&pr.final_angle_state.t);
    ssm_mamba3_angle_cumsum_args g = pr.angle_args;
    g.final_angle_state            = fa2.t;
    TEST_CHECK_STATUS(ssm_mamba3_angle_cumsum(ctx_cpu[2], &g_params, &g), SSM_STATUS_OK);
    ssm_mamba3_siso_fwd_args f = pr.fwd_args;
    f.out = out2.t, f.final_ssm_state = fs2.t, f.final_k_state = fk2.t, f.final_v_state = fv2.t;
    TEST_CHECK_STATUS(ssm_mamba3_siso_fwd(ctx_cpu[2], &g_params, &f), SSM_STATUS_OK);
    ssmt_expect_close("fused==chained out", &out2.t, &pr.out.t, 1e-5);
    ssmt_expect_close("fused==chained final_ssm", &fs2.t, &pr.final_ssm_state.t, 1e-5);
    ssmt_expect_close("fused==chained final_k", &fk2.t, &pr.final_k_state.t, 1e-5);
    ssmt_expect_close("fused==chained final_v", &fv2.t, &pr.final_v_state.t, 1e-5);
    ssmt_expect_close("fused==chained final_angle", &fa2.t, &pr.final_angle_state.t, 1e-5);
    ssmt_free(&out2), ssmt_free(&fs2), ssmt_free(&fk2), ssmt_free(&fv2), ssmt_free(&fa2);
    ssmt_mamba3_problem_free(&pr);
}

/* forward over S tokens == S decode steps on an fp32 pool updated in place */
static void test_fwd_vs_steps(ssmt_rng * rng, int has_states) {
    ssmt_mamba3_config cfg = sc_config(2, 45, 6, 3, 32, 8, 8);
    cfg.has_states = has_states, cfg.strided = 1;
    ssmt_mamba3_problem pr;
    if (sc_problem(rng, &cfg, &pr) != 0) return;
    TEST_CHECK_STATUS(ssm_mamba3_siso(ctx_cpu[2], &g_params, &pr.args), SSM_STATUS_OK);
    /* the pool starts as the initial states (zeros without) */
    const ssm_tensor * fin[4] = { &pr.final_angle_state.t, &pr.final_ssm_state.t, &pr.final_k_state.t,
                                  &pr.final_v_state.t };
    const ssm_tensor * init[4] = { &pr.angle_state.t, &pr.ssm_state.t, &pr.k_state.t, &pr.v_state.t };
    ssmt_host          p[4], out = f32_like(&pr.out.t);
    ssmt_f32_pools(p, fin, has_states ? init : NULL, 4);
    const ssm_mamba3_siso_args * a = &pr.args;
    for (int64_t t = 0; t < cfg.seqlen; ++t) {
        ssm_mamba3_siso_step_args s = { 0 };
        SSMT_M3_STEP_AT(s, *a, t);
        SSMT_M3_STEP_IN_PLACE(s, p);
        s.out = ssmt_pick(&out.t, 1, t);
        const ssm_status st = ssm_mamba3_siso_step(ctx_cpu[t % 3 + 1], &g_params, &s);
        TEST_CHECK(st == SSM_STATUS_OK, "step %lld: %s", (long long) t, ssm_context_last_error(ctx_cpu[t % 3 + 1]));
    }
    char n[128];
    snprintf(n, sizeof n, "fwd==steps%s out", has_states ? "+states" : "");
    ssmt_expect_close(n, &out.t, &pr.out.t, 1e-5);
    snprintf(n, sizeof n, "fwd==steps%s final_ssm", has_states ? "+states" : "");
    ssmt_expect_close(n, &p[1].t, &pr.final_ssm_state.t, 1e-5);
    snprintf(n, sizeof n, "fwd==steps%s final_k", has_states ? "+states" : "");
    ssmt_expect_close(n, &p[2].t, &pr.final_k_state.t, 1e-5);
    snprintf(n, sizeof n, "fwd==steps%s final_v", has_states ? "+states" : "");
    ssmt_expect_close(n, &p[3].t, &pr.final_v_state.t, 1e-5);
    snprintf(n, sizeof n, "fwd==steps%s final_angle", has_states ? "+states" : "");
    ssmt_expect_close(n, &p[0].t, &pr.final_angle_state.t, 1e-5);
    for (int i = 0; i < 4; ++i) ssmt_free(&p[i]);
    ssmt_free(&out);
    ssmt_mamba3_problem_free(&pr);
}

/* Tokens [t0, t0+len) of the combined args (batched), with the given states in and out. */
static ssm_mamba3_siso_args slice_args(const ssm_mamba3_siso_args * a, int64_t t0, int64_t len, const ssm_tensor * out) {
    ssm_mamba3_siso_args s = *a;
    SSMT_M3_TOKEN_SLICE(s, *a, t0, len);
    s.out = ssmt_slice(out, 1, t0, len);
    return s;
}

/* two calls chained through the final states == one call */
static void test_split(ssmt_rng * rng) {
    const ssmt_mamba3_config cfg = sc_config(2, 200, 4, 1, 64, 32, 16);
    ssmt_mamba3_problem      pr;
    if (sc_problem(rng, &cfg, &pr) != 0) return;
    TEST_CHECK_STATUS(ssm_mamba3_siso(ctx_cpu[2], &g_params, &pr.args), SSM_STATUS_OK);
    const ssm_mamba3_siso_args * a = &pr.args;
    ssmt_host          out = f32_like(&pr.out.t), m[4], e[4];
    const ssm_tensor * fin[4] = SSMT_M3_FINALS(*a);
    ssmt_f32_alloc(m, fin, 4);
    ssmt_f32_alloc(e, fin, 4);
    const int64_t        s1 = 77;
    ssm_mamba3_siso_args p1 = slice_args(a, 0, s1, &out.t);
    SSMT_M3_FINALS_TO(p1, m);
    TEST_CHECK_STATUS(ssm_mamba3_siso(ctx_cpu[1], &g_params, &p1), SSM_STATUS_OK);
    ssm_mamba3_siso_args p2 = slice_args(a, s1, cfg.seqlen - s1, &out.t);
    SSMT_M3_STATES_FROM(p2, m);
    SSMT_M3_FINALS_TO(p2, e);
    TEST_CHECK_STATUS(ssm_mamba3_siso(ctx_cpu[3], &g_params, &p2), SSM_STATUS_OK);
    const ssm_tensor * got[5] = { &out.t, &e[0].t, &e[1].t, &e[2].t, &e[3].t };
    const ssm_tensor * want[5] = { &a->out, &a->final_angle_state, &a->final_ssm_state, &a->final_k_state,
                                   &a->final_v_state };
    ssmt_m3_expect_outs("split", got, want, 1e-5, NULL);
    ssmt_free(&out);
    for (int i = 0; i < 4; ++i) ssmt_free(&m[i]), ssmt_free(&e[i]);
    ssmt_mamba3_problem_free(&pr);
}

/* varlen (with an empty sequence) == one call per sequence */
static void test_varlen_vs_separate(ssmt_rng * rng) {
    static const int64_t lens[5] = { 70, 0, 5, 129, 33 };
    ssmt_mamba3_config   cfg = sc_config(2, 40, 4, 2, 32, 16, 8); /* B, S: the defaults; nseq below */
    cfg.nseq = 5, cfg.seqlens = lens;
    ssmt_mamba3_problem pr;
    if (sc_problem(rng, &cfg, &pr) != 0) return;
    TEST_CHECK_STATUS(ssm_mamba3_siso(ctx_cpu[2], &g_params, &pr.args), SSM_STATUS_OK);
    const ssm_mamba3_siso_args * a = &pr.args;
    ssmt_host          out = f32_like(&pr.out.t), e[4];
    const ssm_tensor * fin[4] = SSMT_M3_FINALS(*a);
    ssmt_f32_alloc(e, fin, 4);
    int64_t t0 = 0;
    for (int s = 0; s < 5; ++s) {
        if (lens[s] == 0) { /* the identity on states: finals equal the initial states */
            const ssm_tensor * init[4] = { &a->angle_state, &a->ssm_state, &a->k_state, &a->v_state };
            for (int i = 0; i < 4; ++i) {
                const ssm_tensor dst = ssmt_slice(&e[i].t, 0, s, 1), src = ssmt_slice(init[i], 0, s, 1);
                ssmt_copy(&dst, &src);
            }
            continue;
        }
        ssm_mamba3_siso_args p = slice_args(a, t0, lens[s], &out.t);
        memset(&p.cu_seqlens, 0, sizeof p.cu_seqlens);
        p.angle_state = ssmt_slice(&a->angle_state, 0, s, 1), p.ssm_state = ssmt_slice(&a->ssm_state, 0, s, 1);
        p.k_state = ssmt_slice(&a->k_state, 0, s, 1), p.v_state = ssmt_slice(&a->v_state, 0, s, 1);
        p.final_angle_state = ssmt_slice(&e[0].t, 0, s, 1), p.final_ssm_state = ssmt_slice(&e[1].t, 0, s, 1);
        p.final_k_state = ssmt_slice(&e[2].t, 0, s, 1), p.final_v_state = ssmt_slice(&e[3].t, 0, s, 1);
        TEST_CHECK_STATUS(ssm_mamba3_siso(ctx_cpu[1], &g_params, &p), SSM_STATUS_OK);
        t0 += lens[s];
    }
    const ssm_tensor * got[5] = { &out.t, &e[0].t, &e[1].t, &e[2].t, &e[3].t };
    const ssm_tensor * want[5] = { &a->out, &a->final_angle_state, &a->final_ssm_state, &a->final_k_state,
                                   &a->final_v_state };
    ssmt_m3_expect_outs("varlen==separate", got, want, 1e-5, NULL);
    ssmt_free(&out);
    for (int i = 0; i < 4; ++i) ssmt_free(&e[i]);
    ssmt_mamba3_problem_free(&pr);
}

/* ---- chunk_states ------------------------------------------------------------------------- */

/* NaN elements of an F32 or F64 buffer, padding included. */
static int64_t nan_count(const ssmt_host * h) {
    int64_t n = 0;
    if (h->t.dtype == SSM_DTYPE_F64)
        for (size_t i = 0; i < h->bytes / sizeof(double); ++i) n += isnan(((const double *) h->buf)[i]) != 0;
    else
        for (size_t i = 0; i < h->bytes / sizeof(float); ++i) n += isnan(((const float *) h->buf)[i]) != 0;
    return n;
}

/* The two forwards seen together: args of either, its chunk_states slot and its outputs. */
typedef union fwd_any {
    ssm_mamba3_siso_args     siso;
    ssm_mamba3_siso_fwd_args fwd;
} fwd_any;

static ssm_tensor * cs_slot(int fused, fwd_any * a) { return fused ? &a->siso.chunk_states : &a->fwd.chunk_states; }
static ssm_status   run_any(int fused, ssm_context * c, fwd_any * a) { return fused ? run_siso(c, a) : run_fwd(c, a); }

/* out and the finals (the combined op's angle state too); absent ones are NULL. */
static void fwd_outputs(int fused, fwd_any * a, ssm_tensor * o[5]) {
    if (fused) {
        o[0] = &a->siso.out, o[1] = &a->siso.final_ssm_state, o[2] = &a->siso.final_k_state;
        o[3] = &a->siso.final_v_state, o[4] = &a->siso.final_angle_state;
    } else {
        o[0] = &a->fwd.out, o[1] = &a->fwd.final_ssm_state, o[2] = &a->fwd.final_k_state;
        o[3] = &a->fwd.final_v_state, o[4] = NULL;
    }
    for (int i = 0; i < 5; ++i)
        if (o[i] != NULL && o[i]->data == NULL) o[i] = NULL;
}

/* a: the args of pr's forward (fused or not); o: its outputs. */
static void fwd_of(const ssmt_mamba3_problem * pr, int fused, fwd_any * a, ssm_tensor * o[5]) {
    memset(a, 0, sizeof *a);
    if (fused) a->siso = pr->args;
    else a->fwd = pr->fwd_args;
    fwd_outputs(fused, a, o);
}

typedef struct cs_case {
    const char *       name;
    ssmt_mamba3_config cfg;
    ssm_dtype          cs_dtype;
    int                strided; /* chunk_states in a permuted, padded layout */
} cs_case;

/* One forward (fused or not) of a problem with chunk_states: the reference's rows (F64), then
 * the CPU's with 1, 2, 3 threads and the scalar ISA into poisoned buffers: within the bar of
 * the compute dtype (as final_ssm_state), every row written and nothing around it (padding
 * still NaN), the bytes of 1 thread for 2 and 3, and out and the finals the bytes of the run
 * without chunk_states. */
static void chunk_states_entry(const cs_case * cc, const ssmt_mamba3_problem * pr, int fused) {
    const int64_t C = cc->cfg.chunk;
    fwd_any      a;
    ssm_tensor * o[5];
    fwd_of(pr, fused, &a, o);
    char name[200];
    snprintf(name, sizeof name, "chunk_states %s[%s]", fused ? "siso" : "siso_fwd", cc->name);

    ssmt_host ref = ssmt_mamba3_chunk_states(&cc->cfg, C, SSM_DTYPE_F64, 0);
    *cs_slot(fused, &a) = ref.t;
    ssm_status st = run_any(fused, ctx_ref, &a);
    TEST_CHECK(st == SSM_STATUS_OK, "%s ref: %s", name, ssm_context_last_error(ctx_ref));
    /* the CPU without chunk_states: its out and finals */
    *cs_slot(fused, &a) = ssmt_absent();
    ssmt_host base[5];
    memset(base, 0, sizeof base);
    for (int i = 0; i < 5; ++i)
        if (o[i]) ssmt_poison(o[i]);
    TEST_CHECK_STATUS(run_any(fused, ctx_cpu[1], &a), SSM_STATUS_OK);
    for (int i = 0; i < 5; ++i)
        if (o[i]) base[i] = ssmt_clone(o[i], (ssm_dtype) o[i]->dtype);

    ssmt_host first;
    memset(&first, 0, sizeof first);
    for (int variant = 0; variant < 4; ++variant) {
        ssm_context * ctx = variant < 3 ? ctx_cpu[variant + 1] : ctx_scalar;
        ssmt_host     cs = ssmt_mamba3_chunk_states(&cc->cfg, C, cc->cs_dtype, cc->strided);
        for (int i = 0; i < 5; ++i)
            if (o[i]) ssmt_poison(o[i]);
        *cs_slot(fused, &a) = cs.t;
        st = run_any(fused, ctx, &a);
        TEST_CHECK(st == SSM_STATUS_OK, "%s variant %d: %s", name, variant, ssm_context_last_error(ctx));
        char label[260];
        snprintf(label, sizeof label, "%s/%s", name, variant < 3 ? "cpu" : "scalar");
        if (variant == 0 || variant == 3) ssmt_check_bar(label, &cs.t, &ref.t, cc->cfg.dtype);
        const int64_t pad = (int64_t) (cs.bytes / ssm_dtype_size(cc->cs_dtype)) - ssmt_numel(&cs.t);
        TEST_CHECK(nan_count(&cs) == pad, "%s: %lld NaN elements, want the %lld of the padding", label,
                   (long long) nan_count(&cs), (long long) pad);
        for (int i = 0; i < 5 && variant < 3; ++i) {
            if (!o[i]) continue;
            ssmt_host now = ssmt_clone(o[i], (ssm_dtype) o[i]->dtype);
            TEST_CHECK(memcmp(now.buf, base[i].buf, now.bytes) == 0,
                       "%s: output %d differs from the run without chunk_states", label, i);
            ssmt_free(&now);
        }
        if (variant == 0) {
            first = cs;
        } else {
            if (variant < 3)
                TEST_CHECK(memcmp(first.buf, cs.buf, cs.bytes) == 0, "%s: %d threads differ from 1", label,
                           variant + 1);
            ssmt_free(&cs);
        }
    }
    ssmt_free(&first), ssmt_free(&ref);
    for (int i = 0; i < 5; ++i) ssmt_free(&base[i]);
}

/* params->chunk_size not a multiple of the CPU's internal chunk (32) with chunk_states:
 * UNSUPPORTED, and out, the finals and chunk_states untouched (still the poison). */
static void chunk_states_unsupported(const ssmt_mamba3_problem * pr, const ssmt_mamba3_config * cfg, int64_t C,
                                     int fused) {
    fwd_any      a;
    ssm_tensor * o[5];
    fwd_of(pr, fused, &a, o);
    ssmt_host cs = ssmt_mamba3_chunk_states(cfg, C, SSM_DTYPE_F32, 0);
    *cs_slot(fused, &a) = cs.t;
    ssmt_host snap[5];
    memset(snap, 0, sizeof snap);
    for (int i = 0; i < 5; ++i)
        if (o[i]) ssmt_poison(o[i]), snap[i] = ssmt_clone(o[i], (ssm_dtype) o[i]->dtype);
    const int64_t keep  = g_params.chunk_size;
    g_params.chunk_size = C;
    const ssm_status st  = run_any(fused, ctx_cpu[2], &a);
    const char *     msg = ssm_context_last_error(ctx_cpu[2]);
    g_params.chunk_size  = keep;
    TEST_CHECK(st == SSM_STATUS_UNSUPPORTED, "%s chunk_size %lld with chunk_states: %s (%s), want UNSUPPORTED",
               fused ? "siso" : "siso_fwd", (long long) C, ssm_status_string(st), msg);
    TEST_CHECK(msg != NULL && strstr(msg, "chunk_states") != NULL, "the message does not name chunk_states: %s",
               msg ? msg : "(null)");
    TEST_CHECK(nan_count(&cs) == (int64_t) (cs.bytes / sizeof(float)), "chunk_size %lld: chunk_states was written",
               (long long) C);
    for (int i = 0; i < 5; ++i) {
        if (!o[i]) continue;
        ssmt_host now = ssmt_clone(o[i], (ssm_dtype) o[i]->dtype);
        TEST_CHECK(memcmp(now.buf, snap[i].buf, now.bytes) == 0, "chunk_size %lld: output %d was written",
                   (long long) C, i);
        ssmt_free(&now), ssmt_free(&snap[i]);
    }
    if (st == SSM_STATUS_UNSUPPORTED) printf("ok  chunk_size %lld with chunk_states: %s\n", (long long) C, msg);
    ssmt_free(&cs);
}

static void test_chunk_states(ssmt_rng * rng) {
    static const int64_t lens_a[5] = { 70, 0, 5, 129, 33 };
    static const int64_t lens_b[4] = { 0, 100, 64, 31 };
    cs_case              cases[6];
    int                  n = 0;
    /* varlen with an empty sequence, initial states, GQA, tails; C = 32 */
    cases[n] = (cs_case){ "varlen states gqa C32", sc_config(1, 0, 4, 2, 32, 16, 8), SSM_DTYPE_F32, 0 };
    cases[n].cfg.nseq = 5, cases[n].cfg.seqlens = lens_a, cases[n].cfg.chunk = 32;
    ++n;
    /* varlen starting empty, no initial states, C = 64, F64 rows in a strided view */
    cases[n] = (cs_case){ "varlen nostates C64 f64 strided", sc_config(1, 0, 6, 3, 64, 24, 16), SSM_DTYPE_F64, 1 };
    cases[n].cfg.nseq = 4, cases[n].cfg.seqlens = lens_b, cases[n].cfg.chunk = 64, cases[n].cfg.has_states = 0;
    ++n;
    /* batched, S not a multiple of the chunk, C = 96, strided inputs and rows */
    cases[n] = (cs_case){ "batch tail C96 strided", sc_config(2, 200, 6, 2, 64, 24, 16), SSM_DTYPE_F32, 1 };
    cases[n].cfg.chunk = 96, cases[n].cfg.strided = 1;
    ++n;
    /* the layer's head shape in bf16, angles broadcast over heads, C = 64, F64 rows */
    cases[n] = (cs_case){ "layer shape bf16 C64", sc_config(1, 150, 4, 1, 128, 64, 32), SSM_DTYPE_F64, 0 };
    cases[n].cfg.chunk = 64, cases[n].cfg.dtype = SSM_DTYPE_BF16, cases[n].cfg.angles_broadcast = 1;
    ++n;
    /* Hq = H, no states, C = 32, S a multiple of it */
    cases[n] = (cs_case){ "hq=h nostates C32", sc_config(2, 96, 3, 3, 32, 8, 16), SSM_DTYPE_F32, 0 };
    cases[n].cfg.chunk = 32, cases[n].cfg.has_states = 0;
    ++n;
    for (int c = 0; c < n; ++c) {
        ssmt_mamba3_problem pr;
        if (sc_problem(rng, &cases[c].cfg, &pr) != 0) {
            TEST_CHECK(0, "chunk_states %s: could not build the problem", cases[c].name);
            continue;
        }
        chunk_states_entry(&cases[c], &pr, 1);
        chunk_states_entry(&cases[c], &pr, 0);
        if (c == 0)
            for (int fused = 0; fused < 2; ++fused) {
                chunk_states_unsupported(&pr, &cases[c].cfg, 48, fused);
                chunk_states_unsupported(&pr, &cases[c].cfg, 16, fused);
            }
        ssmt_mamba3_problem_free(&pr);
    }
}

/* ---- decode step ------------------------------------------------------------------------ */
static void test_step(ssmt_rng * rng, int64_t B, int64_t H, int64_t Hq, int64_t K, int64_t V, int64_t A, ssm_dtype dt,
                      int64_t slots, int with_indices, int has_d, int has_z) {
    ssmt_mamba3_config cfg;
    ssmt_mamba3_config_init(&cfg);
    cfg.batch = B, cfg.nheads = H, cfg.nheads_qk = Hq, cfg.dk = K, cfg.dv = V, cfg.nangles = A, cfg.dtype = dt;
    cfg.has_d = has_d, cfg.has_z = has_z, cfg.out_dtype = (B % 2) ? dt : SSM_DTYPE_F32;
    ssmt_mamba3_step_problem pr;
    if (ssmt_mamba3_random_step(rng, &cfg, slots, with_indices, &pr) != 0) {
        TEST_CHECK(0, "could not build a step problem");
        return;
    }
    ssmt_mamba3_params(&cfg, &g_params);
    char tag[200];
    snprintf(tag, sizeof tag, "step[B%lld H%lld Hq%lld K%lld V%lld A%lld %s slots%lld idx%d]", (long long) B,
             (long long) H, (long long) Hq, (long long) K, (long long) V, (long long) A, ssm_dtype_name(dt),
             (long long) slots, with_indices);
    ssm_mamba3_siso_step_args a  = pr.args;
    ssmt_op_case oc = ssmt_op_case_make(tag, "mamba3_siso_step", &a, sizeof a, dt, cfg.out_dtype, run_step);
    oc.angle_outs = 1u << 1;
    run_case(&oc);

    /* in place on an fp32 pool: the same results as separate final buffers, untouched
     * slots (not named by any row) unchanged, padding rows' out == 0 */
    const ssm_tensor * st[4] = { &pr.args.angle_state, &pr.args.ssm_state, &pr.args.k_state, &pr.args.v_state };
    ssmt_host          pool[4], sep[4];
    for (int i = 0; i < 4; ++i) {
        pool[i] = f32_like(st[i]), sep[i] = f32_like(st[i]);
        ssmt_copy(&pool[i].t, st[i]);
        ssmt_copy(&sep[i].t, st[i]);
    }
    ssmt_host out_a = f32_like(&pr.out.t), out_b = f32_like(&pr.out.t);
    ssm_mamba3_siso_step_args s = pr.args;
    s.angle_state = pool[0].t, s.ssm_state = pool[1].t, s.k_state = pool[2].t, s.v_state = pool[3].t;
    s.final_angle_state = sep[0].t, s.final_ssm_state = sep[1].t, s.final_k_state = sep[2].t, s.final_v_state = sep[3].t;
    s.out = out_a.t;
    TEST_CHECK_STATUS(ssm_mamba3_siso_step(ctx_cpu[2], &g_params, &s), SSM_STATUS_OK);
    s.final_angle_state = pool[0].t, s.final_ssm_state = pool[1].t, s.final_k_state = pool[2].t,
    s.final_v_state = pool[3].t, s.out = out_b.t;
    TEST_CHECK_STATUS(ssm_mamba3_siso_step(ctx_cpu[3], &g_params, &s), SSM_STATUS_OK);
    TEST_CHECK(memcmp(out_a.buf, out_b.buf, out_a.bytes) == 0, "%s: in-place out differs", tag);
    for (int i = 0; i < 4; ++i)
        TEST_CHECK(memcmp(pool[i].buf, sep[i].buf, pool[i].bytes) == 0, "%s: in-place state %d differs", tag, i);
    if (with_indices)
        for (int64_t b = 0; b < B; ++b) {
            if (ssmt_get(&pr.state_batch_indices.t, b) >= 0) continue;
            int zero = 1;
            for (int64_t i = 0; i < H * V; ++i) zero = zero && ssmt_get(&out_b.t, b * H * V + i) == 0.0;
            TEST_CHECK(zero, "%s: padding row %lld out is not 0", tag, (long long) b);
        }
    for (int i = 0; i < 4; ++i) ssmt_free(&pool[i]), ssmt_free(&sep[i]);
    ssmt_free(&out_a), ssmt_free(&out_b);
    ssmt_mamba3_step_free(&pr);
}

int main(void) {
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261201u);
    if (!ssmt_make_cpu_ctxs(&ctx_ref, ctx_cpu, &ctx_scalar)) TEST_EXIT();
    printf("cpu isa %s\n", ssm_isa_name(ssm_context_isa(ctx_cpu[1])));

    /* shape sweep: S around the chunk (the internal one is 64) and odd; Hq = 1, H, between;
     * K, V in {32, 64, 96, 128} and odd-ish V; A = K/2, < K/2, 0, odd */
    static const int64_t   seqlens[] = { 1, 13, 63, 64, 65, 130 };
    static const int64_t   shapes[][5] = { /* H, Hq, K, V, A */
                                         { 4, 1, 32, 5, 16 },   { 4, 4, 64, 24, 5 },  { 6, 2, 96, 64, 0 },
                                         { 2, 1, 128, 32, 64 }, { 3, 3, 32, 96, 8 }, { 4, 2, 64, 128, 31 } };
    static const ssm_dtype dtypes[]    = { SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16 };
    int                    k           = 0;
    for (size_t si = 0; si < sizeof seqlens / sizeof seqlens[0]; ++si) {
        for (int variant = 0; variant < 3; ++variant, ++k) {
            ssmt_mamba3_config cfg;
            ssmt_mamba3_config_init(&cfg);
            const int sh = k % 6;
            cfg.batch = 1 + (k % 2), cfg.seqlen = seqlens[si];
            cfg.nheads = shapes[sh][0], cfg.nheads_qk = shapes[sh][1], cfg.dk = shapes[sh][2];
            cfg.dv = shapes[sh][3], cfg.nangles = shapes[sh][4];
            cfg.chunk            = (k % 3 == 0) ? 64 : (k % 3 == 1 ? 16 : 7);
            cfg.dtype            = dtypes[k % 3];
            cfg.out_dtype        = (k % 4 == 0) ? cfg.dtype : SSM_DTYPE_F32;
            cfg.has_d            = (k % 3) != 2;
            cfg.has_z            = (k % 2) == 1;
            cfg.has_states       = (k % 3) != 1;
            cfg.has_final        = (k % 4) != 3;
            cfg.strided          = (k % 2) == 0;
            cfg.angles_broadcast = (k % 5) == 1;
            cfg.seed_regime      = (k % 7) == 3;
            cfg.trap_randn       = (k % 4) == 2;
            cfg.index_i64        = (k % 4) == 1;
            int64_t lens[4]      = { cfg.seqlen / 3, 0, cfg.seqlen - cfg.seqlen / 3 - cfg.seqlen / 4, cfg.seqlen / 4 };
            if (variant == 2) cfg.nseq = 4, cfg.seqlens = lens;
            char tag[200];
            snprintf(tag, sizeof tag, "B%lld S%lld H%lld Hq%lld K%lld V%lld A%lld %s d%d z%d st%d fin%d str%d bc%d sr%d v%d",
                     (long long) cfg.batch, (long long) cfg.seqlen, (long long) cfg.nheads, (long long) cfg.nheads_qk,
                     (long long) cfg.dk, (long long) cfg.dv, (long long) cfg.nangles, ssm_dtype_name(cfg.dtype),
                     cfg.has_d, cfg.has_z, cfg.has_states, cfg.has_final, cfg.strided, cfg.angles_broadcast,
                     cfg.seed_regime, variant);
            test_config(&rng, &cfg, tag);
        }
    }
    /* the layer's head shape (K 128, V 64, A 32, Hq 1) over several internal chunks. F32
     * outputs: the seed-regime bf16 case has max|out|/rms(out) ≈ 33, so rounding out to
     * bf16 alone (2^-9 relative) would exceed the 2^-4 max_rel bar for any implementation. */
    for (int big = 0; big < 2; ++big) {
        ssmt_mamba3_config cfg;
        ssmt_mamba3_config_init(&cfg);
        cfg.batch = 1 + big, cfg.seqlen = 300 - 97 * big, cfg.nheads = 4, cfg.nheads_qk = 1, cfg.dk = 128, cfg.dv = 64;
        cfg.nangles = 32, cfg.chunk = 64, cfg.has_states = 1, cfg.has_final = 1;
        cfg.dtype = big ? SSM_DTYPE_BF16 : SSM_DTYPE_F32, cfg.out_dtype = SSM_DTYPE_F32;
        cfg.angles_broadcast = big, cfg.seed_regime = big;
        test_config(&rng, &cfg, big ? "layer shape bf16 broadcast seed-regime" : "layer shape f32");
    }
    test_fused_vs_chained(&rng);
    test_fwd_vs_steps(&rng, 1);
    test_fwd_vs_steps(&rng, 0);
    test_split(&rng);
    test_varlen_vs_separate(&rng);
    test_chunk_states(&rng);
    test_step(&rng, 1, 4, 1, 32, 16, 8, SSM_DTYPE_F32, 1, 0, 1, 1);
    test_step(&rng, 5, 6, 3, 64, 24, 31, SSM_DTYPE_BF16, 9, 1, 1, 0);
    test_step(&rng, 7, 4, 4, 128, 64, 64, SSM_DTYPE_F16, 7, 1, 0, 1);
    test_step(&rng, 4, 2, 1, 96, 5, 0, SSM_DTYPE_F32, 4, 0, 0, 0);
    ssmt_free_cpu_ctxs(ctx_ref, ctx_cpu, ctx_scalar);
    TEST_EXIT();
}
