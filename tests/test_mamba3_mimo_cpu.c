/*
 * test_mamba3_mimo_cpu.c — the optimised CPU backend of the Mamba-3 MIMO family
 * (mamba3_mimo_bwd_fwd, mamba3_mimo forward, mamba3_mimo_step) against the float64
 * reference (run with F64 outputs): reduced and non-reduced, z/mimo_z on and off, d on and
 * off, fused norm, GQA (H=2,G=1; H=4,G=2; B=2), tails (S=13, 20, 35), the seed shapes
 * (N,P,R,C) ∈ {(32,64,4,16), (128,32,4,16), (64,128,4,16), (128,64,8,8), (64,64,3,6),
 * (64,64,1,64)}, div 2 and 4, f32/f16/bf16, strided views, NaN-poisoned outputs, initial
 * and final states, varlen with an empty sequence. 1, 2 and 3 threads give identical
 * bytes; the scalar ISA passes the same bars. bwd_fwd in the context's upstream-bf16 mode
 * (ref_mode SSM_REF_UPSTREAM_BF16, the §5.1 roundings): CPU vs the reference in the same
 * mode, rel_rms < 1e-3 for every output, on every bwd_fwd case above in its own dtype and
 * again with bf16 inputs (seed shapes, tails, GQA, reduced / non-reduced, z and d on/off),
 * 1 thread and scalar ISA, 2 and 3 threads bitwise == 1; and the CPU in that mode vs the
 * seed's stored bf16 reference outputs (tests/data/mamba3_mimo_bwd_fwd, <output>__bf16ref.npy),
 * rel_rms < 1e-3, next to the default mode vs the stored float64 outputs (DESIGN bars).
 * CPU self-consistency in fp32 (rel_rms ≤ 1e-5): forward over S tokens == S decode steps; two calls
 * chained through the final states == one call; varlen == one call per sequence; step with
 * a slot map, padding rows and an in-place pool.
 * Seed: SSMOPS_TEST_SEED (default 20261202). SHOWCMP=1 prints every comparison.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "testutil.h"

static ssm_context *ctx_ref, *ctx_cpu[4], *ctx_scalar;
static ssm_mamba3_mimo_params g_params;
/* ref_mode SSM_REF_UPSTREAM_BF16: the reference, the CPU at 1-3 threads, the scalar ISA */
static ssm_context *ctx_ref_bf16, *ctx_cpu_bf16[4], *ctx_scalar_bf16;
#define BF16_BAR 1e-3 /* seed / issue bar of the upstream-bf16 mode (rel_rms, every output) */

/* ---- the op-generic harness: ssmt_op_case / ssmt_op_run (testutil) ------------------- */
static void run_case(const ssmt_op_case * oc) { ssmt_op_run(oc, ctx_ref, ctx_cpu, ctx_scalar); }


static ssm_status run_bwd_fwd(ssm_context * c, void * a) { return ssm_mamba3_mimo_bwd_fwd(c, &g_params, a); }
static ssm_status run_fwd(ssm_context * c, void * a) { return ssm_mamba3_mimo(c, &g_params, a); }
static ssm_status run_step(ssm_context * c, void * a) { return ssm_mamba3_mimo_step(c, &g_params, a); }

static ssmt_host f32_like(const ssm_tensor * t) { return ssmt_alloc(SSM_DTYPE_F32, t->ndim, t->shape); }

static void cfg_tag(const ssmt_mimo_config * c, const char * what, char * tag, size_t n) {
    snprintf(tag, n, "%s B%lld S%lld H%lld G%lld R%lld N%lld P%lld C%lld div%d %s red%d z%d d%d fu%d st%d fin%d ns%d str%d",
             what, (long long) c->batch, (long long) c->seqlen, (long long) c->nheads, (long long) c->ngroups,
             (long long) c->rank, (long long) c->dstate, (long long) c->headdim, (long long) c->chunk, c->div,
             ssm_dtype_name(c->dtype), c->reduce_o, c->has_z, c->has_d, c->fused, c->has_states, c->has_final, c->nseq,
             c->strided);
}

/* ---- bwd_fwd: CPU vs float64 (bars), threads, scalar; the upstream-bf16 mode ------------ */
static const char * const bf_names[5] = { "dmimo_o", "states", "dz", "dmimo_z", "qk_dot" };
static double             g_worst_bf16[5]; /* worst CPU-vs-reference rel_rms in the bf16 mode */

/* The five output slots of a bwd_fwd args struct. */
static void bf_slots(ssm_mamba3_mimo_bwd_fwd_args * a, ssm_tensor * slot[5]) {
    slot[0] = &a->dmimo_o, slot[1] = &a->states, slot[2] = &a->dz, slot[3] = &a->dmimo_z, slot[4] = &a->qk_dot;
}

/* Fresh NaN-poisoned F32 outputs for every present output slot of a (absent ones stay absent). */
static void bf_alloc_outs(ssm_mamba3_mimo_bwd_fwd_args * a, ssmt_host h[5]) {
    ssm_tensor * slot[5];
    bf_slots(a, slot);
    for (int o = 0; o < 5; ++o) {
        h[o].buf = NULL;
        if (!slot[o]->data) continue;
        h[o] = ssmt_alloc(SSM_DTYPE_F32, slot[o]->ndim, slot[o]->shape);
        ssmt_poison(&h[o].t);
        *slot[o] = h[o].t;
    }
}

static void bf_free_outs(ssmt_host h[5]) {
    for (int o = 0; o < 5; ++o)
        if (h[o].buf) ssmt_free(&h[o]);
}

/* y vs r at rel_rms < BF16_BAR (and no NaN/Inf that r lacks); returns rel_rms. */
static double expect_bf16_bar(const char * label, const ssm_tensor * y, const ssm_tensor * r) {
    const ssmt_cmp c = ssmt_compare(y, r);
    if (getenv("SHOWCMP")) printf("%s rel_rms %.3g\n", label, c.rel_rms);
    TEST_CHECK(c.nonfinite == 0 && c.rel_rms < BF16_BAR, "%s rel_rms %.3g nonfinite %lld (bar %.3g)", label,
               c.rel_rms, (long long) c.nonfinite, BF16_BAR);
    return c.rel_rms;
}

/* The CPU in the upstream-bf16 mode vs the reference in the same mode (F32 outputs of
 * both): rel_rms < 1e-3 for every output at 1 thread and on the scalar ISA; 2 and 3
 * threads give the same bytes as 1. */
static void check_bf16_mode(const char * tag, const ssm_mamba3_mimo_bwd_fwd_args * args) {
    ssm_mamba3_mimo_bwd_fwd_args ra = *args;
    ssmt_host                    rb[5], first[5];
    ssm_tensor *                 rslot[5];
    bf_alloc_outs(&ra, rb);
    bf_slots(&ra, rslot);
    const ssm_status rs = ssm_mamba3_mimo_bwd_fwd(ctx_ref_bf16, &g_params, &ra);
    TEST_CHECK(rs == SSM_STATUS_OK, "%s bf16 ref: %s (%s)", tag, ssm_status_string(rs),
               ssm_context_last_error(ctx_ref_bf16));
    for (int variant = 0; variant < 4; ++variant) {
        ssm_context *                ctx = variant < 3 ? ctx_cpu_bf16[variant + 1] : ctx_scalar_bf16;
        ssm_mamba3_mimo_bwd_fwd_args ca  = *args;
        ssmt_host                    cb[5];
        ssm_tensor *                 cslot[5];
        bf_alloc_outs(&ca, cb);
        bf_slots(&ca, cslot);
        const ssm_status s = ssm_mamba3_mimo_bwd_fwd(ctx, &g_params, &ca);
        TEST_CHECK(s == SSM_STATUS_OK, "%s bf16 mode variant %d: %s (%s)", tag, variant, ssm_status_string(s),
                   ssm_context_last_error(ctx));
        for (int o = 0; o < 5; ++o) {
            if (!cb[o].buf) continue;
            char label[360];
            snprintf(label, sizeof label, "%s/%s/%s vs bf16 reference", tag, bf_names[o],
                     variant < 3 ? "cpu-bf16" : "scalar-bf16");
            if (variant == 0 || variant == 3) {
                const double e = expect_bf16_bar(label, &cb[o].t, rslot[o]);
                if (e > g_worst_bf16[o]) g_worst_bf16[o] = e;
            } else {
                TEST_CHECK(memcmp(first[o].buf, cb[o].buf, cb[o].bytes) == 0, "%s: %d threads differ from 1", label,
                           variant + 1);
            }
        }
        if (variant == 0)
            memcpy(first, cb, sizeof first);
        else
            bf_free_outs(cb);
    }
    bf_free_outs(first);
    bf_free_outs(rb);
}

static void test_bwd_fwd(ssmt_rng * rng, const ssmt_mimo_config * cfg) {
    ssmt_mimo_bwd_fwd_problem pr;
    char                      tag[300];
    cfg_tag(cfg, "bwd_fwd", tag, sizeof tag);
    if (ssmt_mimo_random_bwd_fwd(rng, cfg, &pr) != 0) {
        TEST_CHECK(0, "%s: could not build the problem", tag);
        return;
    }
    g_params                         = pr.params;
    ssm_mamba3_mimo_bwd_fwd_args a   = pr.args;
    ssmt_op_case oc = ssmt_op_case_make(tag, "mamba3_mimo_bwd_fwd", &a, sizeof a, cfg->dtype, cfg->out_dtype,
                                        run_bwd_fwd);
    run_case(&oc);
    check_bf16_mode(tag, &pr.args);
    ssmt_mimo_bwd_fwd_free(&pr);
    if (cfg->dtype != SSM_DTYPE_BF16) { /* the same configuration with bf16 inputs */
        ssmt_mimo_config c = *cfg;
        c.dtype            = SSM_DTYPE_BF16;
        cfg_tag(&c, "bwd_fwd", tag, sizeof tag);
        if (ssmt_mimo_random_bwd_fwd(rng, &c, &pr) != 0) {
            TEST_CHECK(0, "%s: could not build the problem", tag);
            return;
        }
        g_params = pr.params;
        check_bf16_mode(tag, &pr.args);
        ssmt_mimo_bwd_fwd_free(&pr);
    }
}

/* "div": <number> of a case's case.json (4 when absent). */
static int32_t case_div(const ssmt_case * c) {
    char path[1200];
    snprintf(path, sizeof path, "%s/case.json", c->dir);
    FILE * f = fopen(path, "rb");
    if (f == NULL) return 4;
    static char  text[65536];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n]          = '\0';
    const char * at = strstr(text, "\"div\":");
    return at != NULL ? (int32_t) strtol(at + 6, NULL, 10) : 4;
}

/* The stored bwd_fwd vectors: the CPU (2 threads) in the default mode vs the float64
 * outputs (DESIGN bars for the case dtype), and in the upstream-bf16 mode vs the seed's
 * bf16 reference outputs *__bf16ref.npy (rel_rms < 1e-3), where the case has them. */
static void test_bwd_fwd_vectors(void) {
    static const char * const ins[17] = { "dout",  "q",      "k",  "v",         "q_bias", "k_bias",
                                          "mimo_v", "mimo_o", "z",  "mimo_z",    "angles", "da_cs",
                                          "da_cs_rev", "dt",  "trap", "d",       "segsum" };
    static char names[64][128];
    const int   ncases = ssmt_case_list("mamba3_mimo_bwd_fwd", names, 64);
    int         nbf16  = 0;
    TEST_CHECK(ncases > 0, "no stored mamba3_mimo_bwd_fwd vectors");
    for (int ci = 0; ci < ncases; ++ci) {
        ssmt_case c;
        if (ssmt_case_load(&c, "mamba3_mimo_bwd_fwd", names[ci]) != 0) {
            TEST_CHECK(0, "cannot load mamba3_mimo_bwd_fwd/%s", names[ci]);
            continue;
        }
        ssmt_host in[17];
        for (int i = 0; i < 17; ++i) {
            const int act = !strcmp(ins[i], "dout") || !strcmp(ins[i], "q") || !strcmp(ins[i], "k") ||
                            !strcmp(ins[i], "v") || !strcmp(ins[i], "z") || !strcmp(ins[i], "trap");
            in[i].buf = NULL;
            memset(&in[i].t, 0, sizeof in[i].t);
            if (ssmt_case_has(&c, ins[i])) in[i] = ssmt_case_tensor(&c, ins[i], act ? c.dtype : SSM_DTYPE_F32);
        }
        ssm_mamba3_mimo_bwd_fwd_args a0 = { 0 };
        ssm_tensor * inslot[17] = { &a0.dout,   &a0.q,      &a0.k,    &a0.v,         &a0.q_bias, &a0.k_bias,
                                    &a0.mimo_v, &a0.mimo_o, &a0.z,    &a0.mimo_z,    &a0.angles, &a0.da_cs,
                                    &a0.da_cs_rev, &a0.dt,  &a0.trap, &a0.d,         &a0.segsum };
        for (int i = 0; i < 17; ++i) *inslot[i] = in[i].t;
        ssm_mamba3_mimo_params_init(&g_params);
        if (c.chunk > 0) g_params.chunk_size = c.chunk;
        g_params.rotary_dim_divisor = case_div(&c);
        for (int mode = 0; mode < 2; ++mode) {
            ssmt_host    want[5], got[5];
            ssm_tensor * slot[5];
            bf_slots(&a0, slot);
            int present = 0;
            for (int o = 0; o < 5; ++o) {
                char file[64];
                snprintf(file, sizeof file, "%s%s", bf_names[o], mode ? "__bf16ref" : "");
                want[o].buf = got[o].buf = NULL;
                memset(slot[o], 0, sizeof *slot[o]);
                if (!ssmt_case_has(&c, file)) continue;
                want[o] = ssmt_case_tensor(&c, file, SSM_DTYPE_F64);
                got[o]  = ssmt_alloc(SSM_DTYPE_F32, want[o].t.ndim, want[o].t.shape);
                ssmt_poison(&got[o].t);
                *slot[o] = got[o].t;
                ++present;
            }
            if (present > 0) {
                ssm_context *    ctx = mode ? ctx_cpu_bf16[2] : ctx_cpu[2];
                const ssm_status st  = ssm_mamba3_mimo_bwd_fwd(ctx, &g_params, &a0);
                TEST_CHECK(st == SSM_STATUS_OK, "vector %.100s mode %d: %s (%s)", names[ci], mode, ssm_status_string(st),
                           ssm_context_last_error(ctx));
                nbf16 += mode;
                for (int o = 0; o < 5 && st == SSM_STATUS_OK; ++o) {
                    if (!got[o].buf) continue;
                    char label[300];
                    snprintf(label, sizeof label, "vector %.100s/%s %s", names[ci], bf_names[o],
                             mode ? "cpu-bf16 vs __bf16ref" : "cpu vs float64");
                    if (mode) {
                        const double e = expect_bf16_bar(label, &got[o].t, &want[o].t);
                        printf("%-72s rel_rms=%.3e bar=%.0e %s\n", label, e, BF16_BAR, e < BF16_BAR ? "PASS" : "FAIL");
                    } else {
                        ssmt_check_bar(label, &got[o].t, &want[o].t, c.dtype);
                    }
                }
            }
            for (int o = 0; o < 5; ++o) {
                if (want[o].buf) ssmt_free(&want[o]);
                if (got[o].buf) ssmt_free(&got[o]);
            }
        }
        for (int i = 0; i < 17; ++i)
            if (in[i].buf) ssmt_free(&in[i]);
    }
    TEST_CHECK(nbf16 > 0, "no stored vector has *__bf16ref outputs");
}

/* ---- forward ------------------------------------------------------------------------------ */
static void test_fwd(ssmt_rng * rng, const ssmt_mimo_config * cfg) {
    ssmt_mimo_problem pr;
    char              tag[300];
    cfg_tag(cfg, "fwd", tag, sizeof tag);
    if (ssmt_mimo_random_args(rng, cfg, &pr) != 0) {
        TEST_CHECK(0, "%s: could not build the problem", tag);
        return;
    }
    g_params                 = pr.params;
    ssm_mamba3_mimo_args a   = pr.args;
    ssmt_op_case oc = ssmt_op_case_make(tag, "mamba3_mimo", &a, sizeof a, cfg->dtype, cfg->out_dtype, run_fwd);
    if (a.final_angle_state.data) oc.angle_outs = 1u << 1;
    run_case(&oc);
    ssmt_mimo_problem_free(&pr);
}

/* ---- CPU self-consistency (fp32) ----------------------------------------------------------- */
/* θ is defined modulo 2π and the step's θ is not wrapped (it may be several turns ahead of
 * the forward's wrapped one): each element of y is moved by whole turns to the side of r. */
static void expect_close_angle(const char * name, const ssm_tensor * y, const ssm_tensor * r) {
    ssmt_host     u      = ssmt_to_f64(y);
    const double  two_pi = 6.283185307179586;
    const int64_t n      = ssmt_numel(r);
    for (int64_t i = 0; i < n; ++i) {
        const double g = ssmt_get(&u.t, i), ri = ssmt_get(r, i);
        ssmt_set(&u.t, i, g - two_pi * nearbyint((g - ri) / two_pi));
    }
    ssmt_expect_close(name, &u.t, r, 1e-5);
    ssmt_free(&u);
}

static ssmt_mimo_config base_cfg(void) {
    ssmt_mimo_config c;
    ssmt_mimo_config_init(&c);
    c.batch = 2, c.seqlen = 45, c.nheads = 4, c.ngroups = 2, c.rank = 3, c.dstate = 32, c.headdim = 16, c.chunk = 8;
    c.has_states = 1, c.has_final = 1;
    return c;
}

/* forward over S tokens == S decode steps on an fp32 pool updated in place */
static void test_fwd_vs_steps(ssmt_rng * rng, int reduce, int has_states) {
    ssmt_mimo_config cfg = base_cfg();
    cfg.reduce_o = reduce, cfg.has_z = 1, cfg.has_states = has_states, cfg.strided = 1;
    ssmt_mimo_problem pr;
    if (ssmt_mimo_random_args(rng, &cfg, &pr) != 0) return;
    g_params = pr.params;
    TEST_CHECK_STATUS(ssm_mamba3_mimo(ctx_cpu[2], &g_params, &pr.args), SSM_STATUS_OK);
    const ssm_mamba3_mimo_args * a = &pr.args;
    const ssm_tensor * fin[4] = { &a->final_angle_state, &a->final_ssm_state, &a->final_k_state, &a->final_v_state };
    const ssm_tensor * init[4] = { &a->angle_state, &a->ssm_state, &a->k_state, &a->v_state };
    ssmt_host          p[4], out = f32_like(&a->out);
    ssmt_f32_pools(p, fin, has_states ? init : NULL, 4);
    for (int64_t t = 0; t < cfg.seqlen; ++t) {
        ssm_mamba3_mimo_step_args s = { 0 };
        SSMT_M3_STEP_AT(s, *a, t);
        s.mimo_v = a->mimo_v, s.mimo_z = a->mimo_z, s.mimo_o = a->mimo_o;
        SSMT_M3_STEP_IN_PLACE(s, p);
        s.out = ssmt_pick(&out.t, 1, t);
        const ssm_status st = ssm_mamba3_mimo_step(ctx_cpu[t % 3 + 1], &g_params, &s);
        TEST_CHECK(st == SSM_STATUS_OK, "step %lld: %s", (long long) t, ssm_context_last_error(ctx_cpu[t % 3 + 1]));
    }
    char n[128];
    snprintf(n, sizeof n, "fwd==steps red%d st%d out", reduce, has_states);
    ssmt_expect_close(n, &out.t, &a->out, 1e-5);
    snprintf(n, sizeof n, "fwd==steps red%d st%d final_ssm", reduce, has_states);
    ssmt_expect_close(n, &p[1].t, &a->final_ssm_state, 1e-5);
    snprintf(n, sizeof n, "fwd==steps red%d st%d final_k", reduce, has_states);
    ssmt_expect_close(n, &p[2].t, &a->final_k_state, 1e-5);
    snprintf(n, sizeof n, "fwd==steps red%d st%d final_v", reduce, has_states);
    ssmt_expect_close(n, &p[3].t, &a->final_v_state, 1e-5);
    snprintf(n, sizeof n, "fwd==steps red%d st%d final_angle", reduce, has_states);
    expect_close_angle(n, &p[0].t, &a->final_angle_state);
    for (int i = 0; i < 4; ++i) ssmt_free(&p[i]);
    ssmt_free(&out);
    ssmt_mimo_problem_free(&pr);
}

/* Tokens [t0, t0+len) of the forward args, writing out's slice. */
static ssm_mamba3_mimo_args slice_args(const ssm_mamba3_mimo_args * a, int64_t t0, int64_t len, const ssm_tensor * out) {
    ssm_mamba3_mimo_args s = *a;
    SSMT_M3_TOKEN_SLICE(s, *a, t0, len);
    s.out = ssmt_slice(out, 1, t0, len);
    return s;
}

/* two calls chained through the final states == one call */
static void test_split(ssmt_rng * rng) {
    ssmt_mimo_config cfg = base_cfg();
    cfg.seqlen = 70, cfg.rank = 4, cfg.dstate = 64, cfg.headdim = 32, cfg.chunk = 16;
    ssmt_mimo_problem pr;
    if (ssmt_mimo_random_args(rng, &cfg, &pr) != 0) return;
    g_params = pr.params;
    TEST_CHECK_STATUS(ssm_mamba3_mimo(ctx_cpu[2], &g_params, &pr.args), SSM_STATUS_OK);
    const ssm_mamba3_mimo_args * a = &pr.args;
    ssmt_host          out = f32_like(&a->out), m[4], e[4];
    const ssm_tensor * fin[4] = SSMT_M3_FINALS(*a);
    ssmt_f32_alloc(m, fin, 4);
    ssmt_f32_alloc(e, fin, 4);
    const int64_t        s1 = 27;
    ssm_mamba3_mimo_args p1 = slice_args(a, 0, s1, &out.t);
    SSMT_M3_FINALS_TO(p1, m);
    TEST_CHECK_STATUS(ssm_mamba3_mimo(ctx_cpu[1], &g_params, &p1), SSM_STATUS_OK);
    ssm_mamba3_mimo_args p2 = slice_args(a, s1, cfg.seqlen - s1, &out.t);
    SSMT_M3_STATES_FROM(p2, m);
    SSMT_M3_FINALS_TO(p2, e);
    TEST_CHECK_STATUS(ssm_mamba3_mimo(ctx_cpu[3], &g_params, &p2), SSM_STATUS_OK);
    const ssm_tensor * got[5] = { &out.t, &e[0].t, &e[1].t, &e[2].t, &e[3].t };
    const ssm_tensor * want[5] = { &a->out, &a->final_angle_state, &a->final_ssm_state, &a->final_k_state,
                                   &a->final_v_state };
    ssmt_m3_expect_outs("split", got, want, 1e-5, expect_close_angle);
    ssmt_free(&out);
    for (int i = 0; i < 4; ++i) ssmt_free(&m[i]), ssmt_free(&e[i]);
    ssmt_mimo_problem_free(&pr);
}

/* varlen (with an empty sequence) == one call per sequence */
static void test_varlen_vs_separate(ssmt_rng * rng) {
    static const int64_t lens[5] = { 30, 0, 5, 41, 17 };
    ssmt_mimo_config     cfg     = base_cfg();
    cfg.nseq = 5, cfg.seqlens = lens;
    ssmt_mimo_problem pr;
    if (ssmt_mimo_random_args(rng, &cfg, &pr) != 0) return;
    g_params = pr.params;
    TEST_CHECK_STATUS(ssm_mamba3_mimo(ctx_cpu[2], &g_params, &pr.args), SSM_STATUS_OK);
    const ssm_mamba3_mimo_args * a = &pr.args;
    ssmt_host          out = f32_like(&a->out), e[4];
    const ssm_tensor * fin[4] = SSMT_M3_FINALS(*a);
    ssmt_f32_alloc(e, fin, 4);
    const ssm_tensor * init[4] = { &a->angle_state, &a->ssm_state, &a->k_state, &a->v_state };
    int64_t t0 = 0;
    for (int s = 0; s < 5; ++s) {
        if (lens[s] == 0) { /* the identity on states */
            for (int i = 0; i < 4; ++i) {
                const ssm_tensor dst = ssmt_slice(&e[i].t, 0, s, 1), src = ssmt_slice(init[i], 0, s, 1);
                ssmt_copy(&dst, &src);
            }
            continue;
        }
        ssm_mamba3_mimo_args p = slice_args(a, t0, lens[s], &out.t);
        memset(&p.cu_seqlens, 0, sizeof p.cu_seqlens);
        p.angle_state = ssmt_slice(init[0], 0, s, 1), p.ssm_state = ssmt_slice(init[1], 0, s, 1);
        p.k_state = ssmt_slice(init[2], 0, s, 1), p.v_state = ssmt_slice(init[3], 0, s, 1);
        p.final_angle_state = ssmt_slice(&e[0].t, 0, s, 1), p.final_ssm_state = ssmt_slice(&e[1].t, 0, s, 1);
        p.final_k_state = ssmt_slice(&e[2].t, 0, s, 1), p.final_v_state = ssmt_slice(&e[3].t, 0, s, 1);
        TEST_CHECK_STATUS(ssm_mamba3_mimo(ctx_cpu[1], &g_params, &p), SSM_STATUS_OK);
        t0 += lens[s];
    }
    const ssm_tensor * got[5] = { &out.t, &e[0].t, &e[1].t, &e[2].t, &e[3].t };
    const ssm_tensor * want[5] = { &a->out, &a->final_angle_state, &a->final_ssm_state, &a->final_k_state,
                                   &a->final_v_state };
    ssmt_m3_expect_outs("varlen==separate", got, want, 1e-5, expect_close_angle);
    ssmt_free(&out);
    for (int i = 0; i < 4; ++i) ssmt_free(&e[i]);
    ssmt_mimo_problem_free(&pr);
}

/* ---- decode step ---------------------------------------------------------------------------- */
static void test_step(ssmt_rng * rng, ssmt_mimo_config cfg, int64_t slots, int with_indices) {
    ssmt_mimo_step_problem pr;
    char                   tag[300];
    cfg_tag(&cfg, "step", tag, sizeof tag);
    if (ssmt_mimo_random_step(rng, &cfg, slots, with_indices, &pr) != 0) {
        TEST_CHECK(0, "%s: could not build a step problem", tag);
        return;
    }
    g_params                      = pr.params;
    ssm_mamba3_mimo_step_args a   = pr.args;
    ssmt_op_case oc = ssmt_op_case_make(tag, "mamba3_mimo_step", &a, sizeof a, cfg.dtype, cfg.out_dtype, run_step);
    run_case(&oc);
    /* in place on an fp32 pool == separate final buffers; padding rows' out == 0 */
    const ssm_tensor * st[4] = { &pr.args.angle_state, &pr.args.ssm_state, &pr.args.k_state, &pr.args.v_state };
    ssmt_host          pool[4], sep[4];
    for (int i = 0; i < 4; ++i) {
        pool[i] = f32_like(st[i]), sep[i] = f32_like(st[i]);
        ssmt_copy(&pool[i].t, st[i]);
        ssmt_copy(&sep[i].t, st[i]);
    }
    ssmt_host out_a = f32_like(&pr.out.t), out_b = f32_like(&pr.out.t);
    ssm_mamba3_mimo_step_args s = pr.args;
    s.angle_state = pool[0].t, s.ssm_state = pool[1].t, s.k_state = pool[2].t, s.v_state = pool[3].t;
    s.final_angle_state = sep[0].t, s.final_ssm_state = sep[1].t, s.final_k_state = sep[2].t, s.final_v_state = sep[3].t;
    s.out = out_a.t;
    TEST_CHECK_STATUS(ssm_mamba3_mimo_step(ctx_cpu[2], &g_params, &s), SSM_STATUS_OK);
    s.final_angle_state = pool[0].t, s.final_ssm_state = pool[1].t, s.final_k_state = pool[2].t;
    s.final_v_state = pool[3].t, s.out = out_b.t;
    TEST_CHECK_STATUS(ssm_mamba3_mimo_step(ctx_cpu[3], &g_params, &s), SSM_STATUS_OK);
    TEST_CHECK(memcmp(out_a.buf, out_b.buf, out_a.bytes) == 0, "%s: in-place out differs", tag);
    for (int i = 0; i < 4; ++i)
        TEST_CHECK(memcmp(pool[i].buf, sep[i].buf, pool[i].bytes) == 0, "%s: in-place state %d differs", tag, i);
    if (with_indices) {
        const int64_t per_row = ssmt_numel(&out_b.t) / cfg.batch;
        for (int64_t b = 0; b < cfg.batch; ++b) {
            if (ssmt_get(&pr.state_batch_indices.t, b) >= 0) continue;
            int zero = 1;
            for (int64_t i = 0; i < per_row; ++i) zero = zero && ssmt_get(&out_b.t, b * per_row + i) == 0.0;
            TEST_CHECK(zero, "%s: padding row %lld out is not 0", tag, (long long) b);
        }
    }
    for (int i = 0; i < 4; ++i) ssmt_free(&pool[i]), ssmt_free(&sep[i]);
    ssmt_free(&out_a), ssmt_free(&out_b);
    ssmt_mimo_step_free(&pr);
}

int main(void) {
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261202u);
    ctx_ref = ssmt_make_ctx(SSM_BACKEND_REF, 1, SSM_ISA_AUTO);
    ctx_ref_bf16 = ssmt_make_ctx_mode(SSM_BACKEND_REF, 1, SSM_ISA_AUTO, SSM_REF_UPSTREAM_BF16);
    for (int t = 1; t <= 3; ++t) ctx_cpu[t] = ssmt_make_ctx(SSM_BACKEND_CPU, t, SSM_ISA_AUTO);
    for (int t = 1; t <= 3; ++t) ctx_cpu_bf16[t] = ssmt_make_ctx_mode(SSM_BACKEND_CPU, t, SSM_ISA_AUTO, SSM_REF_UPSTREAM_BF16);
    ctx_scalar      = ssmt_make_ctx(SSM_BACKEND_CPU, 2, SSM_ISA_SCALAR);
    ctx_scalar_bf16 = ssmt_make_ctx_mode(SSM_BACKEND_CPU, 2, SSM_ISA_SCALAR, SSM_REF_UPSTREAM_BF16);
    TEST_CHECK(ctx_ref && ctx_ref_bf16 && ctx_cpu[1] && ctx_cpu[2] && ctx_cpu[3] && ctx_scalar && ctx_cpu_bf16[1] &&
                   ctx_cpu_bf16[2] && ctx_cpu_bf16[3] && ctx_scalar_bf16,
               "context creation failed");
    if (ssmt_failures) TEST_EXIT();
    static const ssm_dtype dtypes[] = { SSM_DTYPE_BF16, SSM_DTYPE_F32, SSM_DTYPE_F16 };

    /* bwd_fwd: the seed's branches, GQA, tails and shapes */
    static const int64_t seed_shapes[][4] = { { 32, 64, 4, 16 }, { 128, 32, 4, 16 }, { 64, 128, 4, 16 },
                                              { 128, 64, 8, 8 }, { 64, 64, 3, 6 },   { 64, 64, 1, 64 } };
    static const int32_t branches[][3]    = { { 1, 0, 0 }, { 1, 1, 1 }, { 0, 0, 1 }, { 0, 1, 0 } }; /* red, z, d */
    int k = 0;
    for (int br = 0; br < 4; ++br, ++k) {
        ssmt_mimo_config c;
        ssmt_mimo_config_init(&c);
        c.batch = 1, c.seqlen = 32, c.nheads = 1, c.ngroups = 1, c.rank = 4, c.dstate = 64, c.headdim = 64, c.chunk = 16;
        c.reduce_o = branches[br][0], c.has_z = branches[br][1], c.has_d = branches[br][2];
        c.dtype = dtypes[k % 3], c.out_dtype = k % 2 ? SSM_DTYPE_F32 : c.dtype, c.strided = br % 2;
        test_bwd_fwd(&rng, &c);
    }
    static const int64_t gqa[][5] = { /* B, S, H, G, R (C) */
                                      { 1, 32, 2, 1, 4 }, { 2, 20, 4, 2, 4 }, { 1, 35, 2, 1, 4 }, { 1, 13, 2, 1, 3 } };
    for (int i = 0; i < 4; ++i, ++k) {
        ssmt_mimo_config c;
        ssmt_mimo_config_init(&c);
        c.batch = gqa[i][0], c.seqlen = gqa[i][1], c.nheads = gqa[i][2], c.ngroups = gqa[i][3], c.rank = gqa[i][4];
        c.dstate = 64, c.headdim = 64, c.chunk = i == 3 ? 6 : 16, c.div = i == 1 ? 2 : 4;
        c.reduce_o = i != 2, c.has_z = 1, c.has_d = 1, c.dtype = dtypes[i % 2], c.out_dtype = SSM_DTYPE_F32;
        c.strided = i % 2, c.consistent = i == 3;
        test_bwd_fwd(&rng, &c);
    }
    for (int i = 0; i < 6; ++i)
        for (int tail = 0; tail < 2; ++tail, ++k) {
            ssmt_mimo_config c;
            ssmt_mimo_config_init(&c);
            c.batch = 1, c.nheads = 2, c.ngroups = 1, c.dstate = seed_shapes[i][0], c.headdim = seed_shapes[i][1];
            c.rank = seed_shapes[i][2], c.chunk = seed_shapes[i][3];
            c.seqlen = 2 * c.chunk + (tail ? c.chunk / 2 + 1 : 0);
            c.reduce_o = (k % 3) != 0, c.has_z = k % 2, c.has_d = (k % 4) != 1, c.div = tail ? 2 : 4;
            c.dtype = dtypes[k % 3], c.out_dtype = SSM_DTYPE_F32, c.strided = tail;
            test_bwd_fwd(&rng, &c);
        }

    /* forward: branches, fused norm, GQA, tails, states, varlen, dtypes, strided */
    static const int64_t lens[4] = { 11, 0, 20, 9 };
    for (int i = 0; i < 12; ++i) {
        ssmt_mimo_config c;
        ssmt_mimo_config_init(&c);
        const int sh = i % 6;
        c.batch = 1 + (i % 2), c.nheads = (i % 3 == 0) ? 4 : 2, c.ngroups = (i % 3 == 0) ? 2 : 1;
        c.dstate = seed_shapes[sh][0] / 2, c.headdim = seed_shapes[sh][1] / 2, c.rank = seed_shapes[sh][2];
        c.chunk = seed_shapes[sh][3];
        c.seqlen = i < 6 ? 2 * c.chunk + 3 : (i % 3 == 0 ? 13 : (i % 3 == 1 ? 20 : 35));
        c.reduce_o = (i % 4) != 3, c.has_z = (i % 3) != 2, c.has_d = (i % 5) != 4, c.div = (i % 2) ? 2 : 4;
        c.fused = c.reduce_o && c.has_z && (i % 4 == 1), c.has_norm_weight = c.fused && (i % 8 == 1);
        c.has_states = (i % 3) != 1, c.has_final = (i % 4) != 2;
        c.dtype = dtypes[i % 3], c.out_dtype = (i % 4 == 0) ? c.dtype : SSM_DTYPE_F32, c.strided = (i % 2) == 0;
        c.index_i64 = i % 2;
        if (i >= 10) c.batch = 1, c.nseq = 4, c.seqlens = lens, c.seqlen = 40;
        test_fwd(&rng, &c);
    }

    test_fwd_vs_steps(&rng, 1, 1);
    test_fwd_vs_steps(&rng, 0, 0);
    test_split(&rng);
    test_varlen_vs_separate(&rng);
    {
        ssmt_mimo_config c;
        ssmt_mimo_config_init(&c);
        c.batch = 5, c.nheads = 4, c.ngroups = 2, c.rank = 4, c.dstate = 32, c.headdim = 64, c.dtype = SSM_DTYPE_BF16;
        test_step(&rng, c, 9, 1);
        c.batch = 3, c.nheads = 2, c.ngroups = 1, c.rank = 3, c.reduce_o = 0, c.has_z = 0, c.dtype = SSM_DTYPE_F32;
        c.div = 2;
        test_step(&rng, c, 3, 0);
        c.batch = 4, c.reduce_o = 1, c.has_z = 1, c.fused = 1, c.has_norm_weight = 1, c.rank = 2, c.dtype = SSM_DTYPE_F16;
        c.out_dtype = SSM_DTYPE_F16;
        test_step(&rng, c, 6, 1);
    }
    test_bwd_fwd_vectors();
    printf("bwd_fwd CPU vs reference in the upstream-bf16 mode, worst rel_rms (bar %.0e): dmimo_o %.3g states %.3g "
           "dz %.3g dmimo_z %.3g qk_dot %.3g\n",
           BF16_BAR, g_worst_bf16[0], g_worst_bf16[1], g_worst_bf16[2], g_worst_bf16[3], g_worst_bf16[4]);
    for (int t = 1; t <= 3; ++t) ssm_context_free(ctx_cpu[t]), ssm_context_free(ctx_cpu_bf16[t]);
    ssm_context_free(ctx_ref);
    ssm_context_free(ctx_ref_bf16);
    ssm_context_free(ctx_scalar);
    ssm_context_free(ctx_scalar_bf16);
    TEST_EXIT();
}
