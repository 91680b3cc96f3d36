/*
 * test_mamba3_mimo_bwd.c — every gradient of ssm_mamba3_mimo (spec §3.5-§3.8, §4):
 *  1. the float64 reference backward against the stored vectors tests/data/mamba3_mimo_bwd
 *     (torch.autograd in float64 through upstream's chunk reference) at rel_rms ≤ 1e-10;
 *  2. the reference backward against central finite differences of the reference forward
 *     (ssm_mamba3_mimo, REF backend, float64) for every gradient, on small shapes: reduced
 *     and non-reduced dout, z and d on/off, fused norm (with and without its weight), GQA,
 *     tails, div 2 and 4, initial states with dfinal_*, varlen with an empty sequence;
 *  3. the CPU backward against the reference within the DESIGN §5 bars of the compute
 *     dtype (f32, f16, bf16; the parameter-gradient reductions as whole vectors) over the
 *     issue's shapes (the seed's (N,P,R,C) list, tails S = 13/20/35, GQA, B = 2, several
 *     chunks, states, varlen), NaN-poisoned outputs, identical bytes for 1, 2 and 3 threads,
 *     and the scalar ISA. Prints the worst rel_rms per gradient and dtype;
 *  4. the forward's pregate_y and chunk_states (reference and CPU) and the backwards given them
 *     (the same bytes as without them), their shape and dtype rules.
 * Seed: SSMOPS_TEST_SEED (default 20261207).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grads.h"
#include "testutil.h"

/* The forward input each gradient belongs to (a slot of the forward args). */
static ssm_tensor * input_slot(ssm_mamba3_mimo_args * a, int i) {
    ssm_tensor * s[SSMT_MIMO_NGRADS] = {
        &a->q,           &a->k,         &a->v,       &a->z,      &a->q_bias,
        &a->k_bias,      &a->mimo_v,    &a->mimo_z,  &a->mimo_o, &a->d,
        &a->adt,         &a->dt,        &a->trap,    &a->angles, &a->outproj_norm_weight,
        &a->angle_state, &a->ssm_state, &a->k_state, &a->v_state};
    return s[i];
}

static ssm_context *ctx_ref, *ctx_cpu[4], *ctx_scalar;

static ssmt_mimo_config config(int64_t B, int64_t S, int64_t H, int64_t G, int64_t R, int64_t N, int64_t P, int64_t C,
                               ssm_dtype dt) {
    ssmt_mimo_config c;
    ssmt_mimo_config_init(&c);
    c.batch = B, c.seqlen = S, c.nheads = H, c.ngroups = G, c.rank = R, c.dstate = N, c.headdim = P, c.chunk = C;
    c.dtype = dt;
    c.param_dtype = SSM_DTYPE_F32;
    c.out_dtype = SSM_DTYPE_F64;
    return c;
}

/* Switches of a case's config beyond config()'s sizes (the others keep ssmt_mimo_config_init's defaults). */
enum {
    PER_RANK = 1, NO_Z = 2, NO_D = 4, DIV2 = 8, FUSED = 16, NORM_WEIGHT = 32, STATES = 64, STRIDED = 128, I64 = 256
};

static ssmt_mimo_config with(ssmt_mimo_config c, unsigned f) {
    c.reduce_o = f & PER_RANK ? 0 : c.reduce_o, c.has_z = f & NO_Z ? 0 : c.has_z, c.has_d = f & NO_D ? 0 : c.has_d;
    c.div = f & DIV2 ? 2 : c.div, c.fused = f & FUSED ? 1 : c.fused;
    c.has_norm_weight = f & NORM_WEIGHT ? 1 : c.has_norm_weight, c.has_states = f & STATES ? 1 : c.has_states;
    c.strided = f & STRIDED ? 1 : c.strided, c.index_i64 = f & I64 ? 1 : c.index_i64;
    return c;
}

/* c as varlen over the nseq lengths lens. */
static ssmt_mimo_config varlen(ssmt_mimo_config c, int32_t nseq, const int64_t * lens) {
    c.nseq = nseq, c.seqlens = lens;
    return c;
}

/* ---- 1. stored vectors ------------------------------------------------------------------ */
#define NIN 21
static const char * const in_names[NIN] = {"q",      "k",      "v",       "adt",       "dt",        "trap",
                                           "q_bias", "k_bias", "mimo_v",  "mimo_z",    "mimo_o",    "angles",
                                           "d",      "z",      "outproj_norm_weight", "angle_state", "ssm_state",
                                           "k_state", "v_state", "cu_seqlens", "dout"};

static ssm_tensor * case_input(ssm_mamba3_mimo_bwd_args * a, int i) {
    ssm_tensor * s[NIN] = {&a->q,      &a->k,      &a->v,      &a->adt,     &a->dt,     &a->trap,   &a->q_bias,
                           &a->k_bias, &a->mimo_v, &a->mimo_z, &a->mimo_o,  &a->angles, &a->d,      &a->z,
                           &a->outproj_norm_weight, &a->angle_state, &a->ssm_state, &a->k_state, &a->v_state,
                           &a->cu_seqlens, &a->dout};
    return s[i];
}

static void stored_vectors(void) {
    char names[32][128];
    const int ncase = ssmt_case_list("mamba3_mimo_bwd", names, 32);
    TEST_CHECK(ncase >= 8, "expected the 8 stored mamba3_mimo_bwd cases, found %d", ncase);
    for (int c = 0; c < ncase; ++c) {
        ssmt_case cs;
        if (ssmt_case_load(&cs, "mamba3_mimo_bwd", names[c]) != 0) {
            TEST_CHECK(0, "%s: cannot load", names[c]);
            continue;
        }
        ssm_mamba3_mimo_bwd_args a;
        ssmt_host                hin[NIN], ref[SSMT_MIMO_NGRADS], got[SSMT_MIMO_NGRADS];
        memset(&a, 0, sizeof a);
        memset(hin, 0, sizeof hin);
        memset(ref, 0, sizeof ref);
        memset(got, 0, sizeof got);
        for (int i = 0; i < NIN; ++i)
            if (ssmt_case_has(&cs, in_names[i])) {
                hin[i] = ssmt_case_tensor(&cs, in_names[i], i == 19 ? SSM_DTYPE_I32 : SSM_DTYPE_F64);
                *case_input(&a, i) = hin[i].t;
            }
        for (int g = 0; g < SSMT_MIMO_NGRADS; ++g)
            if (ssmt_case_has(&cs, ssmt_mimo_grad_names[g])) {
                ref[g] = ssmt_case_tensor(&cs, ssmt_mimo_grad_names[g], SSM_DTYPE_F64);
                got[g] = ssmt_alloc(SSM_DTYPE_F64, ref[g].t.ndim, ref[g].t.shape);
                *ssmt_mimo_grad_slot(&a, g) = got[g].t;
            }
        ssm_mamba3_mimo_params p;
        ssm_mamba3_mimo_params_init(&p);
        p.chunk_size = cs.chunk;
        p.rotary_dim_divisor = (int32_t)(a.q.shape[4] / a.angles.shape[3]);
        p.fuse_pregate_norm = ssmt_case_has(&cs, "outproj_norm_weight");
        const ssm_status s = ssm_mamba3_mimo_bwd(ctx_ref, &p, &a);
        TEST_CHECK(s == SSM_STATUS_OK, "%s: %s (%s)", names[c], ssm_status_string(s), ssm_context_last_error(ctx_ref));
        for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) {
            if (got[g].t.data == NULL) continue;
            char label[200];
            snprintf(label, sizeof label, "stored %s/%s", names[c], ssmt_mimo_grad_names[g]);
            const ssmt_cmp cmp = ssmt_compare(&got[g].t, &ref[g].t);
            TEST_CHECK(cmp.nonfinite == 0 && cmp.rel_rms <= 1e-10, "%s: rel_rms %.3g", label, cmp.rel_rms);
            ssmt_free(&got[g]);
            ssmt_free(&ref[g]);
        }
        for (int i = 0; i < NIN; ++i) ssmt_free(&hin[i]);
    }
}

/* ---- 2. finite differences ------------------------------------------------------------- */
/* L = <dout, out> + Σ <dfinal_x, final_x> of one reference forward. */
static double loss(ssm_mamba3_mimo_args * fa, const ssm_mamba3_mimo_params * p, const ssmt_mimo_bwd_problem * bwd) {
    const ssm_status s = ssm_mamba3_mimo(ctx_ref, p, fa);
    if (s != SSM_STATUS_OK) return NAN;
    const ssm_tensor *outs[5] = {&fa->out, &fa->final_angle_state, &fa->final_ssm_state, &fa->final_k_state,
                                 &fa->final_v_state};
    const ssm_tensor *ws[5] = {&bwd->dout.t, &bwd->dfinal_angle_state.t, &bwd->dfinal_ssm_state.t,
                               &bwd->dfinal_k_state.t, &bwd->dfinal_v_state.t};
    double L = 0.0;
    for (int i = 0; i < 5; ++i) {
        if (outs[i]->data == NULL || ws[i]->data == NULL) continue;
        const int64_t n = ssmt_numel(outs[i]);
        for (int64_t j = 0; j < n; ++j) L += ssmt_get(outs[i], j) * ssmt_get(ws[i], j);
    }
    return L;
}

/* The forward problem and its backward's buffers of one case; 0 on success, else a failed
 * check and nothing left allocated. */
static int alloc_problem(ssmt_rng * rng, const ssmt_mimo_config * cfg, int has_dfinal, const char * name,
                         ssmt_mimo_problem * prob, ssmt_mimo_bwd_problem * bwd) {
    if (ssmt_mimo_random_args(rng, cfg, prob) != 0) {
        TEST_CHECK(0, "%s: allocation failed", name);
        return -1;
    }
    if (ssmt_mimo_bwd_alloc(rng, cfg, prob, has_dfinal, bwd) != 0) {
        TEST_CHECK(0, "%s: allocation failed", name);
        ssmt_mimo_problem_free(prob);
        return -1;
    }
    return 0;
}

typedef struct fd_case {
    const char *     name;
    ssmt_mimo_config cfg;
    int              has_dfinal;
} fd_case;

static double worst_fd[SSMT_MIMO_NGRADS];

static void run_fd(ssmt_rng * rng, const fd_case * fc) {
    ssmt_mimo_config cfg = fc->cfg;
    cfg.dtype = cfg.param_dtype = cfg.out_dtype = SSM_DTYPE_F64;
    cfg.has_final = fc->has_dfinal;
    ssmt_mimo_problem     prob;
    ssmt_mimo_bwd_problem bwd;
    if (alloc_problem(rng, &cfg, fc->has_dfinal, fc->name, &prob, &bwd) != 0) return;
    const ssm_status s = ssm_mamba3_mimo_bwd(ctx_ref, &prob.params, &bwd.args);
    TEST_CHECK(s == SSM_STATUS_OK, "%s: %s (%s)", fc->name, ssm_status_string(s), ssm_context_last_error(ctx_ref));
    ssm_mamba3_mimo_args fa = prob.args;
    for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) {
        const ssm_tensor * gr = ssmt_mimo_grad_slot(&bwd.args, g);
        const ssm_tensor * in = input_slot(&fa, g);
        /* a gradient without its input: only the fused norm's implicit all-ones weight */
        if (gr->data == NULL || in->data == NULL) continue;
        const int64_t n = ssmt_numel(gr);
        double        gmax = 0.0;
        for (int64_t j = 0; j < n; ++j) gmax = fmax(gmax, fabs(ssmt_get(gr, j)));
        TEST_CHECK(isfinite(gmax), "%s/%s: non-finite gradient", fc->name, ssmt_mimo_grad_names[g]);
        const int samples = n < 6 ? (int)n : 6;
        double    err = 0.0;
        for (int k = 0; k < samples; ++k) {
            const int64_t j = ssmt_randint(rng, 0, n - 1);
            const double  x0 = ssmt_get(in, j), h = 1e-5 * fmax(1.0, fabs(x0));
            ssmt_set(in, j, x0 + h);
            const double lp = loss(&fa, &prob.params, &bwd);
            ssmt_set(in, j, x0 - h);
            const double lm = loss(&fa, &prob.params, &bwd);
            ssmt_set(in, j, x0);
            const double fd = (lp - lm) / (2.0 * h);
            err = fmax(err, fabs(fd - ssmt_get(gr, j)) / fmax(gmax, 1e-6));
        }
        TEST_CHECK(err <= 1e-6, "%s/%s: finite differences differ by %.3g (relative to max|grad| %.3g)", fc->name,
                   ssmt_mimo_grad_names[g], err, gmax);
        if (err > worst_fd[g] || err != err) worst_fd[g] = err;
    }
    ssmt_mimo_bwd_free(&bwd);
    ssmt_mimo_problem_free(&prob);
}

static void finite_differences(ssmt_rng * rng) {
    static const int64_t lens[3] = {5, 0, 7};
    const ssm_dtype      f64 = SSM_DTYPE_F64;
    const fd_case        c[] = {
        {"fd_reduced_z_d", config(1, 10, 2, 1, 2, 8, 4, 4, f64), 0},
        {"fd_nonreduced_noz_nod_div2", with(config(1, 9, 2, 2, 3, 8, 4, 3, f64), PER_RANK | NO_Z | NO_D | DIV2), 0},
        {"fd_nonreduced_z", with(config(1, 7, 2, 1, 2, 8, 4, 4, f64), PER_RANK), 0},
        {"fd_reduced_noz", with(config(2, 6, 4, 2, 2, 8, 4, 4, f64), NO_Z), 0},
        {"fd_fused_weight", with(config(1, 9, 2, 1, 2, 8, 6, 4, f64), FUSED | NORM_WEIGHT), 0},
        {"fd_fused_noweight_gqa", with(config(1, 6, 4, 2, 1, 8, 4, 4, f64), FUSED), 0},
        {"fd_states_dfinal", with(config(2, 8, 2, 1, 2, 8, 4, 3, f64), STATES), 1},
        {"fd_varlen_empty", varlen(with(config(1, 0, 2, 1, 2, 8, 4, 4, f64), STATES), 3, lens), 1},
        {"fd_varlen_nostates", varlen(config(1, 0, 2, 1, 2, 8, 4, 4, f64), 3, lens), 0},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; ++i) run_fd(rng, &c[i]);
}

/* ---- 3. CPU against the reference ------------------------------------------------------ */
static double worst[3][SSMT_MIMO_NGRADS]; /* f32, f16, bf16 */
static int    dtype_slot(ssm_dtype t) { return t == SSM_DTYPE_F16 ? 1 : t == SSM_DTYPE_BF16 ? 2 : 0; }

typedef struct cpu_case {
    const char *     name;
    ssmt_mimo_config cfg;
    int              has_dfinal;
    int              only_some; /* dv, ddt, dq_bias, dangles only */
} cpu_case;

static void run_cpu(ssmt_rng * rng, const cpu_case * cc) {
    ssmt_mimo_config cfg = cc->cfg;
    const ssm_dtype  cd = cfg.dtype;
    cfg.out_dtype = SSM_DTYPE_F64;
    ssmt_mimo_problem     prob;
    ssmt_mimo_bwd_problem bwd;
    if (alloc_problem(rng, &cfg, cc->has_dfinal, cc->name, &prob, &bwd) != 0) return;
    ssm_mamba3_mimo_bwd_args args = bwd.args;
    if (cc->only_some)
        for (int g = 0; g < SSMT_MIMO_NGRADS; ++g)
            if (g != 2 && g != 4 && g != 11 && g != 13) memset(ssmt_mimo_grad_slot(&args, g), 0, sizeof(ssm_tensor));
    const ssm_status rs = ssm_mamba3_mimo_bwd(ctx_ref, &prob.params, &args);
    TEST_CHECK(rs == SSM_STATUS_OK, "%s: reference: %s (%s)", cc->name, ssm_status_string(rs),
               ssm_context_last_error(ctx_ref));
    ssmt_host first[SSMT_MIMO_NGRADS];
    ssmt_bwd_cpu_variants(&ssmt_mimo_bwd_op, cc->name, &prob.params, &args, cfg.strided, ssmt_bar_for(cd), ctx_cpu,
                          ctx_scalar, worst[dtype_slot(cd)], first);
    for (int g = 0; g < SSMT_MIMO_NGRADS; ++g)
        if (first[g].buf) ssmt_free(&first[g]);
    ssmt_mimo_bwd_free(&bwd);
    ssmt_mimo_problem_free(&prob);
}

static void cpu_against_reference(ssmt_rng * rng) {
    static const int64_t seed_shapes[6][4] = {{32, 64, 4, 16}, {128, 32, 4, 16}, {64, 128, 4, 16},
                                              {128, 64, 8, 8}, {64, 64, 3, 6},   {64, 64, 1, 64}};
    static const int64_t lens[4] = {23, 0, 41, 1};
    const ssm_dtype      dtypes[3] = {SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16};
    for (int di = 0; di < 3; ++di) {
        const ssm_dtype dt = dtypes[di];
        cpu_case        c[24];
        int             n = 0;
        for (int i = 0; i < 6; ++i) {
            const int64_t *sh = seed_shapes[i];
            c[n] = (cpu_case){"seed_shape", config(1, 2 * sh[3], 2, 1, sh[2], sh[0], sh[1], sh[3], dt), 0, 0};
            ++n;
        }
        const cpu_case more[] = {
            /* the seed's tail shapes: S = 35 (H = 2), S = 13 (R = 3, C = 6), S = 20 (B = 2, H = 4, G = 2) */
            {"tail_s35", config(1, 35, 2, 1, 4, 64, 64, 16, dt), 0, 0},
            {"tail_s13_r3", config(1, 13, 2, 1, 3, 64, 64, 6, dt), 0, 0},
            {"tail_s20_b2_gqa", config(2, 20, 4, 2, 4, 32, 32, 8, dt), 0, 0},
            /* non-reduced with z, non-reduced without z or d, reduced without z */
            {"nonreduced_z_div2", with(config(1, 40, 2, 1, 2, 32, 16, 8, dt), PER_RANK | DIV2), 0, 0},
            {"nonreduced_plain", with(config(1, 45, 2, 2, 4, 32, 32, 16, dt), PER_RANK | NO_Z | NO_D), 0, 0},
            {"reduced_noz_gqa", with(config(1, 33, 4, 1, 4, 32, 32, 16, dt), NO_Z), 0, 0},
            /* fused norm, with and without its weight */
            {"fused_weight", with(config(1, 50, 2, 1, 4, 32, 32, 16, dt), FUSED | NORM_WEIGHT), 0, 0},
            {"fused_noweight", with(config(2, 21, 2, 2, 2, 16, 32, 8, dt), FUSED), 0, 0},
            /* several CPU chunks (64 rows each), initial states with dfinal */
            {"states_multichunk", with(config(2, 150, 4, 2, 2, 32, 32, 16, dt), STATES), 1, 0},
            /* varlen with an empty sequence, states, dfinal; and without states */
            {"varlen_states", varlen(with(config(1, 0, 4, 1, 4, 32, 16, 16, dt), STATES), 4, lens), 1, 0},
            {"varlen_nostates_i64", varlen(with(config(1, 0, 2, 1, 2, 16, 32, 8, dt), I64), 4, lens), 0, 0},
            /* strided views, states without dfinal */
            {"strided_states", with(config(2, 30, 4, 2, 2, 32, 16, 8, dt), STRIDED | STATES), 0, 0},
            /* only some outputs */
            {"some_outputs", with(config(1, 70, 4, 2, 4, 32, 32, 16, dt), STATES), 1, 1},
        };
        for (size_t i = 0; i < sizeof more / sizeof more[0]; ++i) c[n++] = more[i];
        for (int i = 0; i < n; ++i) run_cpu(rng, &c[i]);
    }
}

/* ---- 4. the forward's saved results --------------------------------------------------- */

/* Rows of chunk_states: one per chunk of each sequence (ceil(len / C)). */
static int64_t chunk_state_rows(const ssmt_mimo_problem * prob, const ssmt_mimo_config * cfg, int64_t * first_rows,
                                int max_seqs) {
    const ssm_tensor * cu = &prob->args.cu_seqlens;
    const int64_t      ns = cu->data != NULL ? cu->shape[0] - 1 : prob->v.t.shape[0], C = cfg->chunk;
    int64_t            rows = 0;
    for (int64_t i = 0; i < ns; ++i) {
        const int64_t len = cu->data != NULL ? (int64_t)(ssmt_get(cu, i + 1) - ssmt_get(cu, i)) : prob->v.t.shape[1];
        if (i < max_seqs) first_rows[i] = len > 0 ? rows : -1;
        rows += (len + C - 1) / C;
    }
    return rows;
}

/* The backward with and without the saved results, on the reference (which ignores them) and the
 * CPU (which reads chunk_states where chunk_size is its own chunk, 64/R tokens): the same bytes
 * either way; then refused ones (nothing written). */
static void saved_backwards(const cpu_case * cc, const ssmt_mimo_problem * prob, ssmt_mimo_bwd_problem * bwd,
                            const ssm_tensor * y, const ssm_tensor * cs, const ssm_tensor * const * bad,
                            const ssm_status * bad_status, int nbad) {
    for (int be = 0; be < 2; ++be) {
        ssm_context *            ctx = be ? ctx_cpu[2] : ctx_ref;
        ssm_mamba3_mimo_bwd_args a = bwd->args;
        ssmt_host                g0[SSMT_MIMO_NGRADS], g1[SSMT_MIMO_NGRADS];
        memset(g0, 0, sizeof g0), memset(g1, 0, sizeof g1);
        for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) {
            ssm_tensor * slot = ssmt_mimo_grad_slot(&a, g);
            if (slot->data == NULL) continue;
            g0[g] = ssmt_alloc(SSM_DTYPE_F32, slot->ndim, slot->shape);
            g1[g] = ssmt_alloc(SSM_DTYPE_F32, slot->ndim, slot->shape);
        }
        /* pass 0: neither; 1: pregate_y; 2: chunk_states; 3: both; 4…: the refused ones */
        for (int pass = 0; pass < 4 + nbad; ++pass) {
            ssmt_host * got = pass == 0 ? g0 : g1;
            void *      pg[SSMT_MIMO_NGRADS];
            for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) {
                pg[g] = NULL;
                if (!got[g].buf) continue;
                ssmt_poison(&got[g].t);
                *ssmt_mimo_grad_slot(&a, g) = got[g].t;
                pg[g] = ssmt_snapshot(&got[g]);
            }
            a.pregate_y = pass == 1 || pass == 3 ? *y : (ssm_tensor){0};
            a.chunk_states = pass == 2 || pass == 3 ? *cs : (ssm_tensor){0};
            if (pass >= 4) { /* a bad one replaces the field of its name */
                const ssm_tensor * b = bad[pass - 4];
                if (b->ndim == 5) a.pregate_y = *b;
                else a.chunk_states = *b;
            }
            const ssm_status want = pass < 4 ? SSM_STATUS_OK : bad_status[pass - 4];
            const ssm_status st = ssm_mamba3_mimo_bwd(ctx, &prob->params, &a);
            TEST_CHECK(st == want, "%s %s backward, saved case %d: %s (%s)", cc->name, be ? "cpu" : "ref", pass,
                       ssm_status_string(st), ssm_context_last_error(ctx));
            for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) {
                if (!got[g].buf) continue;
                if (pass >= 1 && pass < 4)
                    TEST_CHECK(memcmp(g0[g].buf, g1[g].buf, g1[g].bytes) == 0, "%s %s: %s differs (saved case %d)",
                               cc->name, be ? "cpu" : "ref", ssmt_mimo_grad_names[g], pass);
                if (pass >= 4)
                    TEST_CHECK(ssmt_unchanged(&got[g], pg[g]), "%s %s: a refused saved input wrote %s", cc->name,
                               be ? "cpu" : "ref", ssmt_mimo_grad_names[g]);
                free(pg[g]);
            }
        }
        for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) {
            if (g0[g].buf) ssmt_free(&g0[g]);
            if (g1[g].buf) ssmt_free(&g1[g]);
        }
    }
}

/* The forward's pregate_y and chunk_states (docs/ops/mamba3_mimo.md §4, §5): the reference and the
 * CPU forward write y[t,r] per head and rank (B, S, H, R, P) — without z and mimo_o exactly the
 * per-rank out (B, S, R, H, P) — and Ŝ entering every chunk (NCS, H, N, P) — zero at the first
 * chunk of a sequence without initial states; the CPU's within the bar of the reference's, its
 * out the same bytes as without them; both backwards given them give the same bytes as without;
 * a wrong shape or a 16-bit dtype is refused with nothing written, by the forward and the
 * backward. */
static void run_saved(ssmt_rng * rng, const cpu_case * cc) {
    ssmt_mimo_config cfg = cc->cfg;
    cfg.out_dtype = SSM_DTYPE_F32;
    ssmt_mimo_problem     prob;
    ssmt_mimo_bwd_problem bwd;
    if (alloc_problem(rng, &cfg, cc->has_dfinal, cc->name, &prob, &bwd) != 0) return;
    int64_t       first[8];
    const int64_t ncs = chunk_state_rows(&prob, &cfg, first, 8);
    const int64_t ys[5] = {prob.v.t.shape[0], prob.v.t.shape[1], prob.v.t.shape[2], cfg.rank, prob.v.t.shape[3]};
    const int64_t css[4] = {ncs, cfg.nheads, cfg.dstate, cfg.headdim};
    ssmt_host     yref = ssmt_alloc(SSM_DTYPE_F64, 5, ys), csref = ssmt_alloc(SSM_DTYPE_F64, 4, css);
    ssmt_host     oref = ssmt_alloc(SSM_DTYPE_F64, prob.out.t.ndim, prob.out.t.shape);
    ssmt_host     ycpu = cfg.strided ? ssmt_alloc_layout(SSM_DTYPE_F32, 5, ys, NULL, 3) : ssmt_alloc(SSM_DTYPE_F32, 5, ys);
    ssmt_host     cscpu = cfg.strided ? ssmt_alloc_layout(SSM_DTYPE_F32, 4, css, NULL, 2) : ssmt_alloc(SSM_DTYPE_F32, 4, css);
    ssmt_host     out0 = ssmt_alloc(SSM_DTYPE_F32, prob.out.t.ndim, prob.out.t.shape);
    ssm_mamba3_mimo_args fa = prob.args;
    fa.out = oref.t, fa.pregate_y = yref.t, fa.chunk_states = csref.t;
    TEST_CHECK_STATUS(ssm_mamba3_mimo(ctx_ref, &prob.params, &fa), SSM_STATUS_OK);
    if (!cfg.reduce_o && !cfg.has_z) /* out[b,t,r,h,:] = y[t,r] of head h */
        for (int64_t i = 0; i < ssmt_numel(&oref.t); ++i) {
            int64_t ix[5], rem = i;
            for (int k = 4; k >= 0; --k) ix[k] = rem % oref.t.shape[k], rem /= oref.t.shape[k];
            const int64_t yl = (((ix[0] * ys[1] + ix[1]) * ys[2] + ix[3]) * ys[3] + ix[2]) * ys[4] + ix[4];
            const double  o = ssmt_get(&oref.t, i), y = ssmt_get(&yref.t, yl);
            if (o != y) {
                TEST_CHECK(0, "%s: reference pregate_y[%lld] = %g differs from the per-rank out %g", cc->name,
                           (long long)i, y, o);
                break;
            }
        }
    const int64_t per_row = cfg.nheads * cfg.dstate * cfg.headdim;
    for (int i = 0; i < 8 && !cfg.has_states && i < (cfg.nseq > 0 ? cfg.nseq : cfg.batch); ++i) {
        if (first[i] < 0) continue; /* an empty sequence has no row */
        double m = 0.0;
        for (int64_t e = 0; e < per_row; ++e) m = fmax(m, fabs(ssmt_get(&csref.t, first[i] * per_row + e)));
        TEST_CHECK(m == 0.0, "%s: chunk_states row %lld (sequence %d starts, no initial state) is not 0: %g",
                   cc->name, (long long)first[i], i, m);
    }
    fa.out = out0.t, fa.pregate_y = (ssm_tensor){0}, fa.chunk_states = (ssm_tensor){0};
    TEST_CHECK_STATUS(ssm_mamba3_mimo(ctx_cpu[2], &prob.params, &fa), SSM_STATUS_OK);
    void * o0 = ssmt_snapshot(&out0);
    ssmt_poison(&out0.t);
    fa.pregate_y = ycpu.t, fa.chunk_states = cscpu.t;
    TEST_CHECK_STATUS(ssm_mamba3_mimo(ctx_cpu[2], &prob.params, &fa), SSM_STATUS_OK);
    TEST_CHECK(ssmt_unchanged(&out0, o0), "%s: the CPU out differs with pregate_y and chunk_states", cc->name);
    ssmt_check_variant(cc->name, "pregate_y", "cpu", &ycpu.t, &yref.t, ssmt_bar_for(cfg.dtype));
    ssmt_check_variant(cc->name, "chunk_states", "cpu", &cscpu.t, &csref.t, ssmt_bar_for(cfg.dtype));
    /* refused by the forward and the backward: P − 1 columns, one row too few, F16 */
    ssmt_host  y16 = ssmt_alloc(SSM_DTYPE_F16, 5, ys), cs16 = ssmt_alloc(SSM_DTYPE_F16, 4, css);
    ssm_tensor ybad = ycpu.t, csbad = cscpu.t;
    ybad.shape[4] -= 1;
    csbad.shape[0] -= 1;
    const ssm_tensor * bad[4] = {&ybad, &csbad, &y16.t, &cs16.t};
    const ssm_status   bad_status[4] = {SSM_STATUS_INVALID_SHAPE, SSM_STATUS_INVALID_SHAPE, SSM_STATUS_INVALID_LAYOUT,
                                        SSM_STATUS_INVALID_LAYOUT};
    ssmt_poison(&out0.t);
    void * pz = ssmt_snapshot(&out0);
    for (int k = 0; k < 4; ++k) {
        fa.pregate_y = ycpu.t, fa.chunk_states = cscpu.t;
        if (bad[k]->ndim == 5) fa.pregate_y = *bad[k];
        else fa.chunk_states = *bad[k];
        const ssm_status st = ssm_mamba3_mimo(ctx_cpu[2], &prob.params, &fa);
        TEST_CHECK(st == bad_status[k], "%s: forward, bad saved case %d: %s", cc->name, k, ssm_status_string(st));
    }
    TEST_CHECK(ssmt_unchanged(&out0, pz), "%s: a refused forward wrote out", cc->name);
    free(pz);
    saved_backwards(cc, &prob, &bwd, &ycpu.t, &cscpu.t, bad, bad_status, 4);
    free(o0);
    ssmt_free(&y16);
    ssmt_free(&cs16);
    ssmt_free(&out0);
    ssmt_free(&ycpu);
    ssmt_free(&cscpu);
    ssmt_free(&oref);
    ssmt_free(&yref);
    ssmt_free(&csref);
    ssmt_mimo_bwd_free(&bwd);
    ssmt_mimo_problem_free(&prob);
}

static void saved_results(ssmt_rng * rng) {
    static const int64_t lens[4] = {23, 0, 41, 1};
    const ssm_dtype      dtypes[2] = {SSM_DTYPE_F32, SSM_DTYPE_BF16};
    for (int di = 0; di < 2; ++di) {
        const ssm_dtype dt = dtypes[di];
        const cpu_case  c[] = {
            {"saved_reduced_tail", config(1, 35, 2, 1, 4, 32, 32, 16, dt), 0, 0},
            {"saved_per_rank_plain", with(config(2, 21, 4, 2, 2, 16, 24, 8, dt), PER_RANK | NO_Z), 0, 0},
            {"saved_fused_states", with(config(1, 50, 2, 1, 4, 32, 32, 16, dt), FUSED | NORM_WEIGHT | STATES), 1, 0},
            {"saved_varlen", varlen(config(1, 0, 2, 1, 2, 16, 16, 8, dt), 4, lens), 0, 0},
            {"saved_strided", with(config(2, 30, 4, 2, 2, 32, 16, 8, dt), STRIDED), 0, 0},
            /* chunk_size = 64/R, the CPU backward's chunk: it reads the saved states (the cases above
             * with R = 4 and chunk 16 do too; the others take the recompute) */
            {"saved_read_varlen", varlen(with(config(1, 0, 2, 1, 2, 16, 16, 32, dt), STATES), 4, lens), 1, 0},
            {"saved_read_strided", with(config(2, 40, 4, 2, 4, 32, 16, 16, dt), STRIDED), 0, 0},
        };
        for (size_t i = 0; i < sizeof c / sizeof c[0]; ++i) run_saved(rng, &c[i]);
    }
}

int main(void) {
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261207ull);
    ssmt_make_cpu_ctxs(&ctx_ref, ctx_cpu, &ctx_scalar);
    if (!(ctx_ref && ctx_cpu[1] && ctx_cpu[2] && ctx_cpu[3])) TEST_EXIT();

    stored_vectors();
    finite_differences(&rng);
    printf("worst finite-difference error (relative to max|grad|):\n");
    for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) printf("  %-22s %.3g\n", ssmt_mimo_grad_names[g], worst_fd[g]);
    cpu_against_reference(&rng);
    printf("worst rel_rms per gradient (CPU and scalar vs reference):\n%-22s %10s %10s %10s\n", "gradient", "f32", "f16",
           "bf16");
    for (int g = 0; g < SSMT_MIMO_NGRADS; ++g)
        printf("%-22s %10.3g %10.3g %10.3g\n", ssmt_mimo_grad_names[g], worst[0][g], worst[1][g], worst[2][g]);
    saved_results(&rng);

    ssmt_free_cpu_ctxs(ctx_ref, ctx_cpu, ctx_scalar);
    TEST_EXIT();
}
