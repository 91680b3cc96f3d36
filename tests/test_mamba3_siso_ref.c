/*
 * test_mamba3_siso_ref.c — the float64 reference backend of the Mamba-3 SISO operators.
 *  (a) the stored upstream float64 outputs of tests/data/mamba3_* through the public API
 *      (REF backend, F64 outputs): rel_rms ≤ 1e-10. Angles (θ, final angle states) are
 *      compared directly: both sides wrap the same sums into [0, 2π), and no stored value
 *      sits within rounding of the wrap point (a direct comparison would fail loudly if one
 *      did);
 *  (b) the worked example of spec §3.8 (cases A and B) and §6.7 (both gradient sets) to the
 *      printed digits (|ours − printed| ≤ half a unit of the last printed digit), and the
 *      chunked == recurrent references on it to 1e-12;
 *  (c) chunked reference == token-by-token recurrence on many shapes and options, ≤ 1e-12;
 *  (d) the chunk size (1, 7, 16, 64) does not change the result, ≤ 1e-12;
 *  (e) a sequence split in two (final → initial states) == one call;
 *  (f) varlen == one call per sequence; an empty sequence leaves all four states as given;
 *  (g) the reference backward == central finite differences of the reference forward
 *      (h = 1e-6, rel_rms ≤ 1e-6) for every gradient, loss = ⟨dout, out⟩ + Σ⟨dfinal_x,
 *      final_x⟩; batched with states, GQA, varlen with an empty sequence. θ's wrap is
 *      piecewise linear: a perturbation that crossed it would jump final_angle_state by
 *      2π; with h = 1e-6 and random states that has probability ~1e-6 per element;
 *  (h) S reference steps == the reference forward over S tokens (outputs and final
 *      states); indexed step (padding rows, permuted slots) == the unindexed step on the
 *      gathered states, untouched pool rows stay untouched; in place == separate buffers;
 *  (i) chunk_states: asking for them changes no other output; each sequence's first row is
 *      H_in (0 without initial states) exactly; the rows at chunk size C are every other row
 *      at C/2 (the boundary state does not depend on the chunk), ≤ 1e-12; varlen with an
 *      empty sequence, GQA, tails, strided inputs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ssmi_ref_mamba3.h"
#include "fixtures.h"
#include "testutil.h"

#define DATA_TOL 1e-10
#define EXACT_TOL 1e-12
#define FD_TOL 1e-6

static ssm_context * g_ref; /* REF backend context */

/* Dims of a combined-forward call, as ops/ would fill them. */
static ssmi_mamba3_dims siso_dims(const ssm_mamba3_siso_args * a, int64_t chunk) {
    ssmi_mamba3_dims d;
    memset(&d, 0, sizeof d);
    d.batch = a->q.shape[0];
    d.seqlen = a->q.shape[1];
    d.nheads_qk = a->q.shape[2];
    d.dk = a->q.shape[3];
    d.nheads = a->v.shape[2];
    d.dv = a->v.shape[3];
    d.nangles = a->angles.shape[3];
    d.chunk = chunk;
    d.varlen = a->cu_seqlens.data != NULL;
    d.nseq = d.varlen ? a->cu_seqlens.shape[0] - 1 : d.batch;
    d.has_states = a->ssm_state.data != NULL;
    return d;
}

/* ---- (a) stored test vectors ------------------------------------------------------------ */

/* Short names for the many initialisers below. */
static ssm_tensor bag(const ssmt_bag * g, const char * name) { return ssmt_bag_get(g, name); }
static ssmt_host  out_like(const ssmt_bag * g, const char * name) { return ssmt_bag_out_like(g, name); }

/* Inputs of the stored cases: cu_seqlens in the index dtype *arg, other floats in the case
 * dtype (their values are exact in it). */
static ssm_dtype input_dtype(const ssmt_case * c, const char * file, void * arg) {
    return strcmp(file, "cu_seqlens") == 0 ? *(const ssm_dtype *)arg : c->dtype;
}

static void compare_out(const ssmt_bag * g, const char * op, const char * name, const ssmt_host * got) {
    char key[40], label[200];
    snprintf(key, sizeof key, "want:%s", name);
    const ssm_tensor w = bag(g, key);
    if (w.data == NULL) return;
    snprintf(label, sizeof label, "data %s/%s %s", op, g->c.name, name);
    ssmt_check_tol(label, &got->t, &w, DATA_TOL);
}

static void case_params(const ssmt_bag * g, ssm_mamba3_params * p) {
    ssm_mamba3_params_init(p);
    if (g->c.chunk > 0) p->chunk_size = g->c.chunk;
}

static void data_angle_cumsum(const char * name, ssm_dtype idx) {
    static const char * const list[] = {
        "angles", "dt", "angle_state", "cu_seqlens", "want:angles_cumsum", "want:final_angle_state", NULL};
    ssmt_bag g;
    if (ssmt_bag_load(&g, "mamba3_angle_cumsum", name, list, input_dtype, &idx) != 0) return;
    ssm_mamba3_params p;
    case_params(&g, &p);
    ssmt_host                    th = out_like(&g, "angles_cumsum"), fin = out_like(&g, "final_angle_state");
    ssm_mamba3_angle_cumsum_args a = {.angles = bag(&g, "angles"),
                                      .dt = bag(&g, "dt"),
                                      .angle_state = bag(&g, "angle_state"),
                                      .cu_seqlens = bag(&g, "cu_seqlens"),
                                      .angles_cumsum = th.t,
                                      .final_angle_state = fin.t};
    TEST_CHECK_STATUS(ssm_mamba3_angle_cumsum(g_ref, &p, &a), SSM_STATUS_OK);
    compare_out(&g, "angle_cumsum", "angles_cumsum", &th);
    compare_out(&g, "angle_cumsum", "final_angle_state", &fin);
    ssmt_free(&th);
    ssmt_free(&fin);
    ssmt_bag_free(&g);
}

static const char * const k_siso_inputs[] = {SSMT_M3_INPUT_NAMES, "angle_state", "ssm_state", "k_state", "v_state",
                                             "cu_seqlens"};

/* The bag list of a case: k_siso_inputs, extra[0..nextra), then "want:<outs[i]>" for i < nouts (spelled in
 * keys); NULL-terminated. */
static void case_list(const char ** list, char (*keys)[40], const char * const * extra, int nextra,
                      const char * const * outs, int nouts) {
    int n = 0;
    for (size_t i = 0; i < sizeof k_siso_inputs / sizeof k_siso_inputs[0]; ++i) list[n++] = k_siso_inputs[i];
    for (int i = 0; i < nextra; ++i) list[n++] = extra[i];
    for (int i = 0; i < nouts; ++i) {
        snprintf(keys[i], sizeof keys[i], "want:%s", outs[i]);
        list[n++] = keys[i];
    }
    list[n] = NULL;
}

static void data_siso_fwd(const char * name, ssm_dtype idx) {
    static const char * const list[] = {SSMT_M3_INPUT_NAMES,    "ssm_state",  "k_state", "v_state", "cu_seqlens",
                                        "want:out",             "want:final_ssm_state", "want:final_k_state",
                                        "want:final_v_state",   NULL};
    ssmt_bag                  g;
    if (ssmt_bag_load(&g, "mamba3_siso_fwd", name, list, input_dtype, &idx) != 0) return;
    ssm_mamba3_params p;
    case_params(&g, &p);
    ssmt_host                out = out_like(&g, "out"), fs = out_like(&g, "final_ssm_state");
    ssmt_host                fk = out_like(&g, "final_k_state"), fv = out_like(&g, "final_v_state");
    ssm_mamba3_siso_fwd_args a = {SSMT_M3_BAG_INPUTS(&g),
                                  .ssm_state = bag(&g, "ssm_state"),
                                  .k_state = bag(&g, "k_state"),
                                  .v_state = bag(&g, "v_state"),
                                  .cu_seqlens = bag(&g, "cu_seqlens"),
                                  .out = out.t,
                                  .final_ssm_state = fs.t,
                                  .final_k_state = fk.t,
                                  .final_v_state = fv.t};
    TEST_CHECK_STATUS(ssm_mamba3_siso_fwd(g_ref, &p, &a), SSM_STATUS_OK);
    compare_out(&g, "siso_fwd", "out", &out);
    compare_out(&g, "siso_fwd", "final_ssm_state", &fs);
    compare_out(&g, "siso_fwd", "final_k_state", &fk);
    compare_out(&g, "siso_fwd", "final_v_state", &fv);
    ssmt_host * all[] = {&out, &fs, &fk, &fv};
    for (size_t i = 0; i < 4; ++i) ssmt_free(all[i]);
    ssmt_bag_free(&g);
}

static ssm_mamba3_siso_args siso_args_from(const ssmt_bag * g) {
    ssm_mamba3_siso_args a = {SSMT_M3_BAG_INPUTS(g),
                              .angle_state = bag(g, "angle_state"),
                              .ssm_state = bag(g, "ssm_state"),
                              .k_state = bag(g, "k_state"),
                              .v_state = bag(g, "v_state"),
                              .cu_seqlens = bag(g, "cu_seqlens")};
    return a;
}

static void data_siso(const char * name, ssm_dtype idx) {
    static const char * const outs[] = {"out", "final_angle_state", "final_ssm_state", "final_k_state",
                                        "final_v_state"};
    const char *              list[40];
    char                      keys[5][40];
    case_list(list, keys, NULL, 0, outs, 5);
    ssmt_bag g;
    if (ssmt_bag_load(&g, "mamba3_siso", name, list, input_dtype, &idx) != 0) return;
    ssm_mamba3_params p;
    case_params(&g, &p);
    ssmt_host o[5];
    for (int i = 0; i < 5; ++i) o[i] = out_like(&g, outs[i]);
    ssm_mamba3_siso_args a = siso_args_from(&g);
    a.out = o[0].t;
    SSMT_M3_FINALS_TO(a, o + 1);
    TEST_CHECK_STATUS(ssm_mamba3_siso(g_ref, &p, &a), SSM_STATUS_OK);
    for (int i = 0; i < 5; ++i) compare_out(&g, "siso", outs[i], &o[i]);
    /* the recurrent reference must match the stored outputs as well */
    for (int i = 0; i < 5; ++i)
        if (o[i].t.data != NULL) ssmt_poison(&o[i].t);
    const ssmi_mamba3_dims d = siso_dims(&a, p.chunk_size);
    TEST_CHECK_STATUS(ssmi_ref_mamba3_siso_recurrent(NULL, &p, &d, &a), SSM_STATUS_OK);
    for (int i = 0; i < 5; ++i) {
        char key[40], lab[300];
        snprintf(key, sizeof key, "want:%s", outs[i]);
        const ssm_tensor w = bag(&g, key);
        if (w.data == NULL) continue;
        snprintf(lab, sizeof lab, "data siso/%s %s (recurrent)", g.c.name, outs[i]);
        ssmt_check_tol(lab, &o[i].t, &w, DATA_TOL);
    }
    for (int i = 0; i < 5; ++i) ssmt_free(&o[i]);
    ssmt_bag_free(&g);
}

static const char * const k_bwd_outs[] = {"dq",    "dk",           "dv",         "dadt",     "ddt",
                                          "dtrap", "dq_bias",      "dk_bias",    "dangles",  "dd",
                                          "dz",    "dangle_state", "dssm_state", "dk_state", "dv_state"};
#define N_BWD_OUTS 15

static void bwd_set_outputs(ssm_mamba3_siso_bwd_args * a, ssm_tensor * o) {
    a->dq = o[0];
    a->dk = o[1];
    a->dv = o[2];
    a->dadt = o[3];
    a->ddt = o[4];
    a->dtrap = o[5];
    a->dq_bias = o[6];
    a->dk_bias = o[7];
    a->dangles = o[8];
    a->dd = o[9];
    a->dz = o[10];
    a->dangle_state = o[11];
    a->dssm_state = o[12];
    a->dk_state = o[13];
    a->dv_state = o[14];
}

static ssm_mamba3_siso_bwd_args bwd_from_siso(const ssm_mamba3_siso_args * s) {
    ssm_mamba3_siso_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = s->q;
    a.k = s->k;
    a.v = s->v;
    a.adt = s->adt;
    a.dt = s->dt;
    a.trap = s->trap;
    a.q_bias = s->q_bias;
    a.k_bias = s->k_bias;
    a.angles = s->angles;
    a.d = s->d;
    a.z = s->z;
    a.angle_state = s->angle_state;
    a.ssm_state = s->ssm_state;
    a.k_state = s->k_state;
    a.v_state = s->v_state;
    a.cu_seqlens = s->cu_seqlens;
    return a;
}

static void data_siso_bwd(const char * name, ssm_dtype idx) {
    static const char * const gin[] = {"dout", "dfinal_angle_state", "dfinal_ssm_state", "dfinal_k_state",
                                       "dfinal_v_state"};
    const char *              list[48];
    char                      keys[N_BWD_OUTS][40];
    case_list(list, keys, gin, 5, k_bwd_outs, N_BWD_OUTS);
    ssmt_bag g;
    if (ssmt_bag_load(&g, "mamba3_siso_bwd", name, list, input_dtype, &idx) != 0) return;
    ssm_mamba3_params p;
    case_params(&g, &p);
    const ssm_mamba3_siso_args s = siso_args_from(&g);
    ssm_mamba3_siso_bwd_args   a = bwd_from_siso(&s);
    a.dout = bag(&g, "dout");
    a.dfinal_angle_state = bag(&g, "dfinal_angle_state");
    a.dfinal_ssm_state = bag(&g, "dfinal_ssm_state");
    a.dfinal_k_state = bag(&g, "dfinal_k_state");
    a.dfinal_v_state = bag(&g, "dfinal_v_state");
    ssmt_host  o[N_BWD_OUTS];
    ssm_tensor ot[N_BWD_OUTS];
    int        have = 0;
    for (int i = 0; i < N_BWD_OUTS; ++i) {
        o[i] = out_like(&g, k_bwd_outs[i]);
        ot[i] = o[i].t;
        have += o[i].t.data != NULL;
    }
    TEST_CHECK(have >= 11, "bwd case %s has only %d reference gradients", name, have);
    bwd_set_outputs(&a, ot);
    TEST_CHECK_STATUS(ssm_mamba3_siso_bwd(g_ref, &p, &a), SSM_STATUS_OK);
    for (int i = 0; i < N_BWD_OUTS; ++i) compare_out(&g, "siso_bwd", k_bwd_outs[i], &o[i]);
    for (int i = 0; i < N_BWD_OUTS; ++i) ssmt_free(&o[i]);
    ssmt_bag_free(&g);
}

static void data_step(const char * name) {
    static const char * const list[] = {SSMT_M3_INPUT_NAMES,    "angle_state",  "ssm_state",  "k_state", "v_state",
                                        "want:out",             "want:final_angle_state",     "want:final_ssm_state",
                                        "want:final_k_state",   "want:final_v_state",         NULL};
    ssmt_bag                  g;
    ssm_dtype                 idx = SSM_DTYPE_I32;
    if (ssmt_bag_load(&g, "mamba3_siso_step", name, list, input_dtype, &idx) != 0) return;
    ssm_mamba3_params p;
    case_params(&g, &p);
    static const char * const outs[] = {"out", "final_angle_state", "final_ssm_state", "final_k_state",
                                        "final_v_state"};
    ssmt_host                 o[5];
    for (int i = 0; i < 5; ++i) o[i] = out_like(&g, outs[i]);
    ssm_mamba3_siso_step_args a = {SSMT_M3_BAG_INPUTS(&g),
                                   .angle_state = bag(&g, "angle_state"),
                                   .ssm_state = bag(&g, "ssm_state"),
                                   .k_state = bag(&g, "k_state"),
                                   .v_state = bag(&g, "v_state"),
                                   SSMT_M3_OUTS_FROM(o)};
    TEST_CHECK_STATUS(ssm_mamba3_siso_step(g_ref, &p, &a), SSM_STATUS_OK);
    for (int i = 0; i < 5; ++i) compare_out(&g, "siso_step", outs[i], &o[i]);
    for (int i = 0; i < 5; ++i) ssmt_free(&o[i]);
    ssmt_bag_free(&g);
}

static void test_data(void) {
    char names[64][128];
    int  n = ssmt_case_list("mamba3_angle_cumsum", names, 64);
    TEST_CHECK(n >= 3, "found %d angle_cumsum cases", n);
    for (int i = 0; i < n; ++i) data_angle_cumsum(names[i], i % 2 ? SSM_DTYPE_I64 : SSM_DTYPE_I32);
    n = ssmt_case_list("mamba3_siso_fwd", names, 64);
    TEST_CHECK(n >= 3, "found %d siso_fwd cases", n);
    for (int i = 0; i < n; ++i) data_siso_fwd(names[i], SSM_DTYPE_I32);
    n = ssmt_case_list("mamba3_siso", names, 64);
    TEST_CHECK(n >= 4, "found %d siso cases", n);
    for (int i = 0; i < n; ++i) data_siso(names[i], i % 2 ? SSM_DTYPE_I64 : SSM_DTYPE_I32);
    n = ssmt_case_list("mamba3_siso_bwd", names, 64);
    TEST_CHECK(n >= 4, "found %d siso_bwd cases", n);
    for (int i = 0; i < n; ++i) data_siso_bwd(names[i], SSM_DTYPE_I32);
    n = ssmt_case_list("mamba3_siso_step", names, 64);
    TEST_CHECK(n >= 2, "found %d siso_step cases", n);
    for (int i = 0; i < n; ++i) data_step(names[i]);
}

/* ---- (b) the worked example of spec §3.8 / §6.7 ---------------------------------------- */

/* A contiguous F64 tensor holding `vals` (NULL = poisoned). */
static ssmt_host f64_tensor(int32_t ndim, const int64_t * shape, const double * vals) {
    ssmt_host h = ssmt_alloc(SSM_DTYPE_F64, ndim, shape);
    if (vals != NULL && h.t.data != NULL)
        for (int64_t i = 0; i < ssmt_numel(&h.t); ++i) ssmt_set(&h.t, i, vals[i]);
    return h;
}

/* got[i] against the printed decimal strings: |got − printed| ≤ half a unit of the last
 * printed digit (at least 6 decimals: "0" stands for 0.000000). */
static void check_printed(const char * label, const ssm_tensor * got, const char * const * printed, int64_t n) {
    double worst = 0.0;
    int    ok = ssmt_numel(got) == n;
    for (int64_t i = 0; ok && i < n; ++i) {
        const char * dot = strchr(printed[i], '.');
        int          dec = dot != NULL ? (int)strlen(dot + 1) : 0;
        if (dec < 6) dec = 6;
        const double tol = 0.5 * pow(10.0, -dec) * (1.0 + 1e-9);
        const double err = fabs(ssmt_get(got, i) - strtod(printed[i], NULL));
        if (err / tol > worst) worst = err / tol;
        if (err > tol) ok = 0;
    }
    printf("%-48s worst=%.3f of the printed rounding %s\n", label, worst, ok ? "PASS" : "FAIL");
    TEST_CHECK(ok, "%s differs from the printed values (worst %.3f of the rounding)", label, worst);
}

typedef struct example {
    ssmt_host            q, k, v, adt, dt, trap, ang, qb, kb, d, z, ast, sst, kst, vst;
    ssmt_host            out, fa, fs, fk, fv;
    ssm_mamba3_siso_args a;
} example;

static void example_make(example * e, int case_b, int with_z) {
    static const int64_t sq[4] = {1, 3, 1, 4}, sv[4] = {1, 3, 1, 2}, ss[3] = {1, 1, 3}, sa[4] = {1, 3, 1, 1};
    static const int64_t sb[2] = {1, 4}, sd[1] = {1}, sast[3] = {1, 1, 1}, ssst[4] = {1, 1, 2, 4};
    static const int64_t skst[3] = {1, 1, 4}, svst[3] = {1, 1, 2};
    static const double  q[] = {1, 0, .5, 0, 0, 1, 0, .5, 1, 1, 0, 0}, k[] = {.5, .5, 1, 0, 1, 0, 0, 1, 0, 1, 1, 0};
    static const double  v[] = {1, 2, 0, -1, 3, 1}, adt[] = {-.1, -.2, -.05}, dt[] = {.05, .1, .02};
    static const double  trap[] = {0, 1, -1}, ang[] = {.5, -1, 2}, qb[] = {.1, 0, 0, 0}, kb[] = {0, .1, 0, 0};
    static const double  dsk[] = {.5}, z[] = {.5, -.5, 1, 0, 0, 2};
    static const double  ast[] = {1.0}, sst[] = {.2, -.1, 0, .3, 0, .4, -.2, .1}, kst[] = {.3, -.2, .5, .1};
    static const double  vst[] = {1, -.5};
    memset(e, 0, sizeof *e);
    e->q = f64_tensor(4, sq, q);
    e->k = f64_tensor(4, sq, k);
    e->v = f64_tensor(4, sv, v);
    e->adt = f64_tensor(3, ss, adt);
    e->dt = f64_tensor(3, ss, dt);
    e->trap = f64_tensor(3, ss, trap);
    e->ang = f64_tensor(4, sa, ang);
    e->qb = f64_tensor(2, sb, qb);
    e->kb = f64_tensor(2, sb, kb);
    e->d = f64_tensor(1, sd, dsk);
    if (with_z) e->z = f64_tensor(4, sv, z);
    if (case_b) {
        e->ast = f64_tensor(3, sast, ast);
        e->sst = f64_tensor(4, ssst, sst);
        e->kst = f64_tensor(3, skst, kst);
        e->vst = f64_tensor(3, svst, vst);
    }
    e->out = f64_tensor(4, sv, NULL);
    e->fa = f64_tensor(3, sast, NULL);
    e->fs = f64_tensor(4, ssst, NULL);
    e->fk = f64_tensor(3, skst, NULL);
    e->fv = f64_tensor(3, svst, NULL);
    ssm_mamba3_siso_args a = {.q = e->q.t,
                              .k = e->k.t,
                              .v = e->v.t,
                              .adt = e->adt.t,
                              .dt = e->dt.t,
                              .trap = e->trap.t,
                              .q_bias = e->qb.t,
                              .k_bias = e->kb.t,
                              .angles = e->ang.t,
                              .d = e->d.t,
                              .z = e->z.t,
                              .angle_state = e->ast.t,
                              .ssm_state = e->sst.t,
                              .k_state = e->kst.t,
                              .v_state = e->vst.t,
                              .out = e->out.t,
                              .final_angle_state = e->fa.t,
                              .final_ssm_state = e->fs.t,
                              .final_k_state = e->fk.t,
                              .final_v_state = e->fv.t};
    e->a = a;
}

static void example_free(example * e) {
    ssmt_host * all[] = {&e->q, &e->k,   &e->v,   &e->adt, &e->dt,  &e->trap, &e->ang, &e->qb, &e->kb, &e->d,
                         &e->z, &e->ast, &e->sst, &e->kst, &e->vst, &e->out,  &e->fa,  &e->fs, &e->fk, &e->fv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
}

/* Forward checks of one case: y (no z), Out (with z), states, θ; recurrent == chunked. */
static void example_forward(int case_b) {
    static const char * const yA[] = {"0.52625", "1.0525", "0.0312604", "-0.4886534", "1.5623382", "0.4996341"};
    static const char * const oA[] = {"0.1637846", "-0.1986808", "0.0228532", "0", "0", "0.8801526"};
    static const char * const sA[] = {"0.0202755",  "0.0433011", "0.0565517", "0",
                                      "-0.0462585", "0.0628002", "0.0862092", "-0.0834485"};
    static const char * const kA[] = {"0.116492", "1.093814", "1", "0"};
    static const char * const vA[] = {"3", "1"};
    static const char * const tA[] = {"6.1770843"};
    static const char * const yB[] = {"0.5387908", "1.3093232", "-0.0181958", "-0.2276348", "1.4393110", "0.9207478"};
    static const char * const oB[] = {"0.1676877", "-0.2471614", "-0.0133022", "0", "0", "1.6219840"};
    static const char * const sB[] = {"0.1207410",  "-0.0335353", "0.0653603",  "0.2131681",
                                      "-0.0804807", "0.2786428",  "-0.0591327", "-0.0138606"};
    static const char * const kB[] = {"-0.857472", "0.689015", "1", "0"};
    static const char * const tB[] = {"0.8938990"};
    const char                c = case_b ? 'B' : 'A';
    char                      label[96];
    ssm_mamba3_params         p;
    ssm_mamba3_params_init(&p);
    p.chunk_size = 2;
    for (int with_z = 0; with_z < 2; ++with_z) {
        example e;
        example_make(&e, case_b, with_z);
        TEST_CHECK_STATUS(ssm_mamba3_siso(g_ref, &p, &e.a), SSM_STATUS_OK);
        snprintf(label, sizeof label, "example case %c %s", c, with_z ? "Out" : "y");
        check_printed(label, &e.out.t, with_z ? (case_b ? oB : oA) : (case_b ? yB : yA), 6);
        if (!with_z) {
            snprintf(label, sizeof label, "example case %c S_out", c);
            check_printed(label, &e.fs.t, case_b ? sB : sA, 8);
            snprintf(label, sizeof label, "example case %c K_out", c);
            check_printed(label, &e.fk.t, case_b ? kB : kA, 4);
            if (!case_b) {
                snprintf(label, sizeof label, "example case %c V_out", c);
                check_printed(label, &e.fv.t, vA, 2);
            }
            snprintf(label, sizeof label, "example case %c theta_out", c);
            check_printed(label, &e.fa.t, case_b ? tB : tA, 1);
        }
        /* the recurrence gives the same to 1e-12 */
        ssmt_host          ref[5] = {ssmt_clone(&e.out.t, SSM_DTYPE_F64), ssmt_clone(&e.fa.t, SSM_DTYPE_F64),
                                     ssmt_clone(&e.fs.t, SSM_DTYPE_F64), ssmt_clone(&e.fk.t, SSM_DTYPE_F64),
                                     ssmt_clone(&e.fv.t, SSM_DTYPE_F64)};
        const ssm_tensor * outs[5] = {&e.out.t, &e.fa.t, &e.fs.t, &e.fk.t, &e.fv.t};
        for (int i = 0; i < 5; ++i) ssmt_poison(outs[i]);
        const ssmi_mamba3_dims d = siso_dims(&e.a, 2);
        TEST_CHECK_STATUS(ssmi_ref_mamba3_siso_recurrent(NULL, &p, &d, &e.a), SSM_STATUS_OK);
        static const char * const nm[5] = {"out", "final_angle_state", "final_ssm_state", "final_k_state",
                                           "final_v_state"};
        for (int i = 0; i < 5; ++i) {
            snprintf(label, sizeof label, "example case %c%s recurrent %s", c, with_z ? " z" : "", nm[i]);
            ssmt_check_tol(label, outs[i], &ref[i].t, EXACT_TOL);
            ssmt_free(&ref[i]);
        }
        example_free(&e);
    }
    /* θ of every token (the angle cumsum alone) */
    static const char * const thA[] = {"0.0725892", "6.1165126", "6.1770843"};
    static const char * const thB[] = {"1.0725892", "0.8333273", "0.8938990"};
    example                   e;
    example_make(&e, case_b, 0);
    ssmt_host                    th = f64_tensor(4, e.ang.t.shape, NULL);
    ssm_mamba3_angle_cumsum_args ag = {.angles = e.ang.t, .dt = e.dt.t, .angle_state = e.ast.t, .angles_cumsum = th.t};
    TEST_CHECK_STATUS(ssm_mamba3_angle_cumsum(g_ref, &p, &ag), SSM_STATUS_OK);
    snprintf(label, sizeof label, "example case %c theta", c);
    check_printed(label, &th.t, case_b ? thB : thA, 3);
    ssmt_free(&th);
    example_free(&e);
}

/* §6.7: case B, dO = 1, without and with all-ones final-state gradients. */
static void example_backward(int with_dfinal) {
    static const char * const dq[] = {"-0.058967", "-0.099870", "0.037091", "0.068321", "0.044146",  "-0.099631",
                                      "0.037830",  "0.163828",  "0.293827", "0.417977", "-0.104168", "-0.024417"};
    static const char * const dk0[] = {"0.187999", "0.141723", "-0.000829", "0.015530", "-0.152507", "-0.156521",
                                       "0",        "0",        "0.010423",  "0.009475", "0",         "0"};
    static const char * const dk1[] = {"0.352443",  "0.093154",  "0.120417", "0.136776",  "-0.270386", "-0.150867",
                                       "-0.083449", "-0.083449", "1.446569", "-0.146962", "1.021515",  "1.021515"};
    static const char * const dv0[] = {"0.186638", "-0.020794", "0.402941", "0.168160", "0", "0.891220"};
    static const char * const dv1[] = {"0.244746", "0.037314", "0.603702", "0.368921", "1.004473", "1.895693"};
    static const char * const dadt0[] = {"0.661099", "0.885621", "0.730764"};
    static const char * const dadt1[] = {"1.160546", "1.559395", "1.203776"};
    static const char * const ddt0[] = {"1.477536", "-0.370910", "-0.412326"};
    static const char * const ddt1[] = {"2.285624", "0.204934", "-2.946646"};
    static const char * const dtr0[] = {"0.041016", "-0.105864", "0.015157"};
    static const char * const dtr1[] = {"0.079924", "-0.216905", "0.037235"};
    static const char * const dan0[] = {"-0.023804", "-0.005396", "0.000686"};
    static const char * const dan1[] = {"-0.108459", "-0.079588", "-0.001888"};
    static const char * const dqb[] = {"0.279006", "0.218475", "-0.029246", "0.207732"};
    static const char * const dkb0[] = {"0.045914", "-0.005323", "-0.000829", "0.015530"};
    static const char * const dkb1[] = {"1.528626", "-0.204676", "1.058483", "1.074843"};
    static const char * const ddk[] = {"1.695283"};
    static const char * const dz[] = {"0.398684", "0.340475", "-0.016880", "-0.113817", "0.719656", "1.004337"};
    static const char *const  dth0[] = {"-0.192693"}, *dth1[] = {"-0.877962"};
    static const char * const ds0[] = {"-0.216421", "0.676372", "0.140806",  "0.270791",
                                       "-0.202132", "1.676965", "-0.085403", "0"};
    static const char * const ds1[] = {"0.488267", "1.381061", "0.845494", "0.975479",
                                       "0.502556", "2.381653", "0.619285", "0.704688"};
    static const char * const dki0[] = {"-0.002884", "-0.004053", "0.004588", "0.006770"};
    static const char * const dki1[] = {"0.005925", "0.004756", "0.013396", "0.015578"};
    static const char *const  dvi0[] = {"-0.002568", "-0.010968"}, *dvi1[] = {"0.009764", "0.001364"};
    example                   e;
    example_make(&e, 1, 1);
    ssm_mamba3_params p;
    ssm_mamba3_params_init(&p);
    p.chunk_size = 2;
    ssm_mamba3_siso_bwd_args a = bwd_from_siso(&e.a);
    ssmt_host                dout = f64_tensor(4, e.v.t.shape, NULL), dfa = f64_tensor(3, e.fa.t.shape, NULL);
    ssmt_host                dfs = f64_tensor(4, e.fs.t.shape, NULL), dfk = f64_tensor(3, e.fk.t.shape, NULL);
    ssmt_host                dfv = f64_tensor(3, e.fv.t.shape, NULL);
    ssmt_fill_value(&dout.t, 1.0);
    a.dout = dout.t;
    if (with_dfinal) {
        ssmt_fill_value(&dfa.t, 1.0);
        ssmt_fill_value(&dfs.t, 1.0);
        ssmt_fill_value(&dfk.t, 1.0);
        ssmt_fill_value(&dfv.t, 1.0);
        a.dfinal_angle_state = dfa.t;
        a.dfinal_ssm_state = dfs.t;
        a.dfinal_k_state = dfk.t;
        a.dfinal_v_state = dfv.t;
    }
    const ssm_tensor * like[N_BWD_OUTS] = {&e.q.t,   &e.k.t, &e.v.t, &e.adt.t, &e.dt.t,  &e.trap.t, &e.qb.t, &e.kb.t,
                                           &e.ang.t, &e.d.t, &e.z.t, &e.ast.t, &e.sst.t, &e.kst.t,  &e.vst.t};
    ssmt_host          g[N_BWD_OUTS];
    ssm_tensor         gt[N_BWD_OUTS];
    for (int i = 0; i < N_BWD_OUTS; ++i) {
        g[i] = f64_tensor(like[i]->ndim, like[i]->shape, NULL);
        gt[i] = g[i].t;
    }
    bwd_set_outputs(&a, gt);
    TEST_CHECK_STATUS(ssm_mamba3_siso_bwd(g_ref, &p, &a), SSM_STATUS_OK);
    const char * const * want[N_BWD_OUTS] = {dq,
                                             with_dfinal ? dk1 : dk0,
                                             with_dfinal ? dv1 : dv0,
                                             with_dfinal ? dadt1 : dadt0,
                                             with_dfinal ? ddt1 : ddt0,
                                             with_dfinal ? dtr1 : dtr0,
                                             dqb,
                                             with_dfinal ? dkb1 : dkb0,
                                             with_dfinal ? dan1 : dan0,
                                             ddk,
                                             dz,
                                             with_dfinal ? dth1 : dth0,
                                             with_dfinal ? ds1 : ds0,
                                             with_dfinal ? dki1 : dki0,
                                             with_dfinal ? dvi1 : dvi0};
    for (int i = 0; i < N_BWD_OUTS; ++i) {
        char label[96];
        snprintf(label, sizeof label, "example grads%s %s", with_dfinal ? " (dfinal=1)" : "", k_bwd_outs[i]);
        check_printed(label, &g[i].t, want[i], ssmt_numel(&g[i].t));
        ssmt_free(&g[i]);
    }
    ssmt_free(&dout);
    ssmt_free(&dfa);
    ssmt_free(&dfs);
    ssmt_free(&dfk);
    ssmt_free(&dfv);
    example_free(&e);
}

static void test_example(void) {
    example_forward(0);
    example_forward(1);
    example_backward(0);
    example_backward(1);
}

/* ---- shared random-problem helpers ------------------------------------------------------ */

static ssmt_rng g_rng;

/* Float64 everything (the reference comparisons are exact up to rounding). */
static ssmt_mamba3_config f64_config(void) {
    ssmt_mamba3_config c;
    ssmt_mamba3_config_init(&c);
    c.dtype = SSM_DTYPE_F64;
    c.param_dtype = SSM_DTYPE_F64;
    c.out_dtype = SSM_DTYPE_F64;
    c.has_final = 1;
    return c;
}

/* The five forward outputs of a problem as a list. */
static void prob_outs(const ssmt_mamba3_problem * pr, const ssm_tensor * o[5]) {
    o[0] = &pr->out.t;
    o[1] = &pr->final_angle_state.t;
    o[2] = &pr->final_ssm_state.t;
    o[3] = &pr->final_k_state.t;
    o[4] = &pr->final_v_state.t;
}

static const char * const k_fwd_names[5] = {"out", "final_angle_state", "final_ssm_state", "final_k_state",
                                            "final_v_state"};

/* ref[i] = an F64 copy of *o[i], then o[i] poisoned for a second computation into it. */
static void keep_and_poison(const ssm_tensor * const o[5], ssmt_host ref[5]) {
    for (int i = 0; i < 5; ++i) {
        ref[i] = ssmt_clone(o[i], SSM_DTYPE_F64);
        ssmt_poison(o[i]);
    }
}

/* Each *o[i] against ref[i] within EXACT_TOL, labelled "<what> <output name>"; ref is freed. */
static void check_and_free(const char * what, const ssm_tensor * const o[5], ssmt_host ref[5]) {
    for (int i = 0; i < 5; ++i) {
        char label[200];
        snprintf(label, sizeof label, "%s %s", what, k_fwd_names[i]);
        ssmt_check_tol(label, o[i], &ref[i].t, EXACT_TOL);
        ssmt_free(&ref[i]);
    }
}

/* ---- (c) chunked == recurrent ------------------------------------------------------------ */

static void chunked_vs_recurrent(const char * name, const ssmt_mamba3_config * cfg) {
    ssmt_mamba3_problem pr;
    if (ssmt_mamba3_random_args(&g_rng, cfg, &pr) != 0) {
        TEST_CHECK(0, "%s: allocation failed", name);
        return;
    }
    ssm_mamba3_params p;
    ssmt_mamba3_params(cfg, &p);
    TEST_CHECK_STATUS(ssm_mamba3_siso(g_ref, &p, &pr.args), SSM_STATUS_OK);
    const ssm_tensor * o[5];
    prob_outs(&pr, o);
    ssmt_host ref[5];
    keep_and_poison(o, ref);
    const ssmi_mamba3_dims d = siso_dims(&pr.args, p.chunk_size);
    TEST_CHECK_STATUS(ssmi_ref_mamba3_siso_recurrent(NULL, &p, &d, &pr.args), SSM_STATUS_OK);
    char what[160];
    snprintf(what, sizeof what, "recurrent %s", name);
    check_and_free(what, o, ref);
    ssmt_mamba3_problem_free(&pr);
}

/* A named float64 problem shape: B, S, H, Hq, K, V, A, chunk; d, z, initial states on or off. */
typedef struct shape {
    const char * name;
    int64_t      B, S, H, Hq, K, V, A, C;
    int          d, z, st;
} shape;

static ssmt_mamba3_config shape_config(const shape * s) {
    ssmt_mamba3_config c = f64_config();
    c.batch = s->B, c.seqlen = s->S, c.nheads = s->H, c.nheads_qk = s->Hq;
    c.dk = s->K, c.dv = s->V, c.nangles = s->A, c.chunk = s->C;
    c.has_d = s->d, c.has_z = s->z, c.has_states = s->st;
    return c;
}

static void test_recurrent(void) {
    static const shape shapes[] = {
        {"S1", 2, 1, 4, 2, 16, 8, 4, 16, 1, 1, 1},
        {"S=C Hq1 A=K/2 bare", 2, 16, 4, 1, 16, 8, 8, 16, 0, 0, 0},
        {"S37 Hq=H", 2, 37, 4, 4, 16, 8, 3, 16, 1, 0, 1},
        {"S37 Hq=H nostates", 1, 37, 2, 2, 16, 8, 8, 16, 0, 1, 0},
        {"K32 V32", 1, 9, 2, 1, 32, 32, 16, 4, 1, 1, 1},
        {"K64 V96", 1, 6, 2, 1, 64, 96, 8, 4, 1, 1, 1},
        {"K96 V64 A48", 1, 5, 2, 2, 96, 64, 48, 2, 0, 1, 1},
        {"K128 V128", 1, 4, 2, 2, 128, 128, 32, 3, 1, 0, 1},
        {"S64 C16 GQA", 2, 64, 4, 2, 16, 16, 4, 16, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
        const ssmt_mamba3_config c = shape_config(&shapes[i]);
        chunked_vs_recurrent(shapes[i].name, &c);
    }
    static const int64_t lens[] = {5, 0, 17, 1};
    for (int st = 0; st < 2; ++st) {
        ssmt_mamba3_config c = f64_config();
        c.nseq = 4;
        c.seqlens = lens;
        c.chunk = 4;
        c.has_states = st;
        c.index_i64 = st;
        chunked_vs_recurrent(st ? "varlen states" : "varlen", &c);
    }
    ssmt_mamba3_config c = f64_config();
    c.seed_regime = 1;
    c.angles_broadcast = 1;
    c.strided = 1;
    c.has_states = 1;
    c.seqlen = 33;
    chunked_vs_recurrent("seed regime, broadcast angles, strided", &c);
    c.seed_regime = 0;
    c.trap_randn = 1;
    chunked_vs_recurrent("trap randn, broadcast angles, strided", &c);
}

/* ---- (d) chunk size is not semantic -------------------------------------------------------- */

static void test_chunk_sizes(void) {
    ssmt_mamba3_config c = f64_config();
    c.seqlen = 70;
    c.has_states = 1;
    ssmt_mamba3_problem pr;
    if (ssmt_mamba3_random_args(&g_rng, &c, &pr) != 0) {
        TEST_CHECK(0, "allocation failed");
        return;
    }
    const ssm_tensor * o[5];
    prob_outs(&pr, o);
    ssmt_host         ref[5];
    ssm_mamba3_params p;
    ssm_mamba3_params_init(&p);
    p.chunk_size = 64;
    TEST_CHECK_STATUS(ssm_mamba3_siso(g_ref, &p, &pr.args), SSM_STATUS_OK);
    for (int i = 0; i < 5; ++i) ref[i] = ssmt_clone(o[i], SSM_DTYPE_F64);
    static const int64_t chunks[] = {1, 7, 16};
    for (int k = 0; k < 3; ++k) {
        p.chunk_size = chunks[k];
        for (int i = 0; i < 5; ++i) ssmt_poison(o[i]);
        TEST_CHECK_STATUS(ssm_mamba3_siso(g_ref, &p, &pr.args), SSM_STATUS_OK);
        for (int i = 0; i < 5; ++i) {
            char label[120];
            snprintf(label, sizeof label, "chunk %lld vs 64 %s", (long long)chunks[k], k_fwd_names[i]);
            ssmt_check_tol(label, o[i], &ref[i].t, EXACT_TOL);
        }
    }
    for (int i = 0; i < 5; ++i) ssmt_free(&ref[i]);
    ssmt_mamba3_problem_free(&pr);
}

/* ---- (e) split == one call ------------------------------------------------------------------ */

/* Tokens [t0, t0+len) of a combined-forward call (token tensors dim 1, scalars dim 2). */
static ssm_mamba3_siso_args token_slice(const ssm_mamba3_siso_args * a, int64_t t0, int64_t len) {
    ssm_mamba3_siso_args s = *a;
    SSMT_M3_TOKEN_SLICE(s, *a, t0, len);
    return s;
}

static void test_split(void) {
    ssmt_mamba3_config c = f64_config();
    c.seqlen = 31;
    c.has_states = 1;
    ssmt_mamba3_problem pr;
    if (ssmt_mamba3_random_args(&g_rng, &c, &pr) != 0) return;
    ssm_mamba3_params p;
    ssmt_mamba3_params(&c, &p);
    TEST_CHECK_STATUS(ssm_mamba3_siso(g_ref, &p, &pr.args), SSM_STATUS_OK);
    const ssm_tensor * o[5];
    prob_outs(&pr, o);
    ssmt_host ref[5], mid[4];
    keep_and_poison(o, ref);
    for (int i = 0; i < 4; ++i) mid[i] = ssmt_alloc(SSM_DTYPE_F64, o[i + 1]->ndim, o[i + 1]->shape);
    const int64_t        cut = 13;
    ssm_mamba3_siso_args a1 = token_slice(&pr.args, 0, cut);
    SSMT_M3_FINALS_TO(a1, mid);
    TEST_CHECK_STATUS(ssm_mamba3_siso(g_ref, &p, &a1), SSM_STATUS_OK);
    ssm_mamba3_siso_args a2 = token_slice(&pr.args, cut, c.seqlen - cut);
    SSMT_M3_STATES_FROM(a2, mid);
    TEST_CHECK_STATUS(ssm_mamba3_siso(g_ref, &p, &a2), SSM_STATUS_OK);
    check_and_free("split 13+18 == one call", o, ref);
    for (int i = 0; i < 4; ++i) ssmt_free(&mid[i]);
    ssmt_mamba3_problem_free(&pr);
}

/* ---- (f) varlen == separate calls ----------------------------------------------------------- */

static void test_varlen(void) {
    static const int64_t lens[] = {7, 0, 20, 1, 9};
    ssmt_mamba3_config   c = f64_config();
    c.nseq = 5;
    c.seqlens = lens;
    c.chunk = 8;
    c.has_states = 1;
    ssmt_mamba3_problem pr;
    if (ssmt_mamba3_random_args(&g_rng, &c, &pr) != 0) return;
    ssm_mamba3_params p;
    ssmt_mamba3_params(&c, &p);
    TEST_CHECK_STATUS(ssm_mamba3_siso(g_ref, &p, &pr.args), SSM_STATUS_OK);
    const ssm_tensor * o[5];
    prob_outs(&pr, o);
    ssmt_host ref[5];
    keep_and_poison(o, ref);
    /* the empty sequence (index 1): all four final states equal the initial ones exactly */
    const ssm_tensor ins[4] = {pr.args.angle_state, pr.args.ssm_state, pr.args.k_state, pr.args.v_state};
    for (int i = 0; i < 4; ++i) {
        const ssm_tensor fin = ssmt_slice(&ref[i + 1].t, 0, 1, 1), init = ssmt_slice(&ins[i], 0, 1, 1);
        char             label[120];
        snprintf(label, sizeof label, "varlen empty sequence keeps %s", k_fwd_names[i + 1]);
        ssmt_check_tol(label, &fin, &init, 0.0);
    }
    int64_t t0 = 0;
    for (int s = 0; s < 5; ++s) {
        ssm_mamba3_siso_args a = token_slice(&pr.args, t0, lens[s]);
        memset(&a.cu_seqlens, 0, sizeof a.cu_seqlens);
        a.angle_state = ssmt_slice(&pr.args.angle_state, 0, s, 1);
        a.ssm_state = ssmt_slice(&pr.args.ssm_state, 0, s, 1);
        a.k_state = ssmt_slice(&pr.args.k_state, 0, s, 1);
        a.v_state = ssmt_slice(&pr.args.v_state, 0, s, 1);
        a.final_angle_state = ssmt_slice(&pr.args.final_angle_state, 0, s, 1);
        a.final_ssm_state = ssmt_slice(&pr.args.final_ssm_state, 0, s, 1);
        a.final_k_state = ssmt_slice(&pr.args.final_k_state, 0, s, 1);
        a.final_v_state = ssmt_slice(&pr.args.final_v_state, 0, s, 1);
        TEST_CHECK_STATUS(ssm_mamba3_siso(g_ref, &p, &a), SSM_STATUS_OK);
        t0 += lens[s];
    }
    check_and_free("varlen == separate calls", o, ref);
    ssmt_mamba3_problem_free(&pr);
}

/* ---- (g) backward == finite differences --------------------------------------------------- */

/* loss = ⟨dout, out⟩ + Σ ⟨dfinal_x, final_x⟩ of one reference forward. */
static double fd_loss(const ssmt_mamba3_problem * pr, const ssmt_mamba3_bwd_problem * w) {
    ssm_mamba3_params p;
    ssm_mamba3_params_init(&p);
    p.chunk_size = 3;
    if (ssm_mamba3_siso(g_ref, &p, &pr->args) != SSM_STATUS_OK) return NAN;
    const ssm_tensor * o[5];
    prob_outs(pr, o);
    const ssm_tensor * g[5] = {&w->dout.t, &w->dfinal_angle_state.t, &w->dfinal_ssm_state.t, &w->dfinal_k_state.t,
                               &w->dfinal_v_state.t};
    double             loss = 0.0;
    for (int i = 0; i < 5; ++i) {
        if (g[i]->data == NULL || o[i]->data == NULL) continue;
        for (int64_t e = 0; e < ssmt_numel(g[i]); ++e) loss += ssmt_get(g[i], e) * ssmt_get(o[i], e);
    }
    return loss;
}

static void fd_case(const char * name, ssmt_mamba3_config * c) {
    ssmt_mamba3_problem     pr;
    ssmt_mamba3_bwd_problem w;
    if (ssmt_mamba3_random_args(&g_rng, c, &pr) != 0) return;
    if (ssmt_mamba3_bwd_alloc(&g_rng, c, &pr, 1, &w) != 0) {
        ssmt_mamba3_problem_free(&pr);
        return;
    }
    /* larger steps than the layer's (dt up to 0.5) so every gradient is well above the
     * finite-difference noise */
    for (int64_t i = 0; i < ssmt_numel(&pr.dt.t); ++i) {
        const double dtv = ssmt_uniform(&g_rng, 0.05, 0.5);
        ssmt_set(&pr.dt.t, i, dtv);
        ssmt_set(&pr.adt.t, i, -ssmt_uniform(&g_rng, 0.5, 2.0) * dtv);
    }
    ssm_mamba3_params p;
    ssm_mamba3_params_init(&p);
    p.chunk_size = 3;
    TEST_CHECK_STATUS(ssm_mamba3_siso_bwd(g_ref, &p, &w.args), SSM_STATUS_OK);
    const ssm_tensor * in[N_BWD_OUTS] = {&pr.q.t,    &pr.k.t,           &pr.v.t,         &pr.adt.t,     &pr.dt.t,
                                         &pr.trap.t, &pr.q_bias.t,      &pr.k_bias.t,    &pr.angles.t,  &pr.d.t,
                                         &pr.z.t,    &pr.angle_state.t, &pr.ssm_state.t, &pr.k_state.t, &pr.v_state.t};
    const ssm_tensor * gr[N_BWD_OUTS] = {&w.dq.t,    &w.dk.t,           &w.dv.t,         &w.dadt.t,     &w.ddt.t,
                                         &w.dtrap.t, &w.dq_bias.t,      &w.dk_bias.t,    &w.dangles.t,  &w.dd.t,
                                         &w.dz.t,    &w.dangle_state.t, &w.dssm_state.t, &w.dk_state.t, &w.dv_state.t};
    const double       step = 1e-6;
    for (int k = 0; k < N_BWD_OUTS; ++k) {
        if (in[k]->data == NULL) {
            TEST_CHECK(gr[k]->data == NULL, "%s: %s present without its input", name, k_bwd_outs[k]);
            continue;
        }
        ssmt_host fd = ssmt_alloc(SSM_DTYPE_F64, in[k]->ndim, in[k]->shape);
        for (int64_t e = 0; e < ssmt_numel(in[k]); ++e) {
            const double x = ssmt_get(in[k], e);
            ssmt_set(in[k], e, x + step);
            const double lp = fd_loss(&pr, &w);
            ssmt_set(in[k], e, x - step);
            const double lm = fd_loss(&pr, &w);
            ssmt_set(in[k], e, x);
            ssmt_set(&fd.t, e, (lp - lm) / (2.0 * step));
        }
        char label[120];
        snprintf(label, sizeof label, "fd %s %s", name, k_bwd_outs[k]);
        ssmt_check_tol(label, gr[k], &fd.t, FD_TOL);
        ssmt_free(&fd);
    }
    ssmt_mamba3_bwd_free(&w);
    ssmt_mamba3_problem_free(&pr);
}

static void test_finite_differences(void) {
    static const shape shapes[] = {
        {"batched states Hq1", 2, 5, 2, 1, 4, 3, 2, 16, 1, 1, 1},
        {"GQA no states no z", 2, 5, 4, 2, 4, 3, 1, 16, 1, 0, 0},
        {"varlen empty states", 2, 5, 4, 2, 4, 3, 1, 16, 1, 1, 1}, /* with the lengths below */
    };
    static const int64_t lens[] = {3, 0, 4};
    for (int i = 0; i < 3; ++i) {
        ssmt_mamba3_config c = shape_config(&shapes[i]);
        if (i == 2) c.nseq = 3, c.seqlens = lens;
        fd_case(shapes[i].name, &c);
    }
}

/* ---- (h) the step --------------------------------------------------------------------------- */

/* S in-place steps == the forward over S tokens. */
static void test_step_vs_forward(void) {
    ssmt_mamba3_config c = f64_config();
    c.batch = 3;
    c.seqlen = 6;
    c.has_states = 1;
    ssmt_mamba3_problem pr;
    if (ssmt_mamba3_random_args(&g_rng, &c, &pr) != 0) return;
    ssm_mamba3_params p;
    ssmt_mamba3_params(&c, &p);
    TEST_CHECK_STATUS(ssm_mamba3_siso(g_ref, &p, &pr.args), SSM_STATUS_OK);
    /* pools = copies of the initial states, updated in place */
    ssmt_host pool[4] = {ssmt_clone(&pr.angle_state.t, SSM_DTYPE_F64), ssmt_clone(&pr.ssm_state.t, SSM_DTYPE_F64),
                         ssmt_clone(&pr.k_state.t, SSM_DTYPE_F64), ssmt_clone(&pr.v_state.t, SSM_DTYPE_F64)};
    ssmt_host outs = ssmt_alloc(SSM_DTYPE_F64, 4, pr.out.t.shape);
    for (int64_t t = 0; t < c.seqlen; ++t) {
        ssm_mamba3_siso_step_args a = {.out = ssmt_pick(&outs.t, 1, t)};
        SSMT_M3_STEP_AT(a, pr.args, t);
        SSMT_M3_STEP_IN_PLACE(a, pool);
        TEST_CHECK_STATUS(ssm_mamba3_siso_step(g_ref, &p, &a), SSM_STATUS_OK);
    }
    const ssm_tensor * o[5];
    prob_outs(&pr, o);
    ssmt_check_tol("steps == forward out", &outs.t, o[0], EXACT_TOL);
    for (int i = 0; i < 4; ++i) {
        char label[96];
        snprintf(label, sizeof label, "steps == forward %s", k_fwd_names[i + 1]);
        ssmt_check_tol(label, &pool[i].t, o[i + 1], EXACT_TOL);
        ssmt_free(&pool[i]);
    }
    ssmt_free(&outs);
    ssmt_mamba3_problem_free(&pr);
}

/* Row b of a pool gathered into row b of a (B, ...) tensor (zeros for padding rows). */
static void gather_rows(const ssm_tensor * dst, const ssm_tensor * pool, const ssm_tensor * idx) {
    const int64_t B = dst->shape[0], row = ssmt_numel(dst) / B;
    for (int64_t b = 0; b < B; ++b) {
        const int64_t s = (int64_t)ssmt_get(idx, b);
        for (int64_t e = 0; e < row; ++e) ssmt_set(dst, b * row + e, s < 0 ? 0.0 : ssmt_get(pool, s * row + e));
    }
}

static void test_step_indexed(int in_place) {
    ssmt_mamba3_config c = f64_config();
    c.batch = 5;
    c.nheads = 4;
    c.nheads_qk = 2;
    c.index_i64 = in_place;
    ssmt_mamba3_step_problem pr;
    const int64_t            slots = 7;
    if (ssmt_mamba3_random_step(&g_rng, &c, slots, 1, &pr) != 0) {
        TEST_CHECK(0, "step allocation failed");
        return;
    }
    ssm_mamba3_params p;
    ssm_mamba3_params_init(&p);
    const ssm_tensor * pool_in[4] = {&pr.angle_state.t, &pr.ssm_state.t, &pr.k_state.t, &pr.v_state.t};
    const ssm_tensor * pool_out[4] = {&pr.final_angle_state.t, &pr.final_ssm_state.t, &pr.final_k_state.t,
                                      &pr.final_v_state.t};
    /* expected: the unindexed step on the gathered states */
    ssmt_host g_in[4], g_out[4], g_y = ssmt_alloc(SSM_DTYPE_F64, 3, pr.out.t.shape);
    for (int i = 0; i < 4; ++i) {
        int64_t sh[4];
        memcpy(sh, pool_in[i]->shape, sizeof sh);
        sh[0] = c.batch;
        g_in[i] = ssmt_alloc(SSM_DTYPE_F64, pool_in[i]->ndim, sh);
        g_out[i] = ssmt_alloc(SSM_DTYPE_F64, pool_in[i]->ndim, sh);
        gather_rows(&g_in[i].t, pool_in[i], &pr.state_batch_indices.t);
    }
    ssm_mamba3_siso_step_args ga = pr.args;
    memset(&ga.state_batch_indices, 0, sizeof ga.state_batch_indices);
    ga.angle_state = g_in[0].t;
    ga.ssm_state = g_in[1].t;
    ga.k_state = g_in[2].t;
    ga.v_state = g_in[3].t;
    ga.out = g_y.t;
    ga.final_angle_state = g_out[0].t;
    ga.final_ssm_state = g_out[1].t;
    ga.final_k_state = g_out[2].t;
    ga.final_v_state = g_out[3].t;
    TEST_CHECK_STATUS(ssm_mamba3_siso_step(g_ref, &p, &ga), SSM_STATUS_OK);

    /* the indexed call, separate final pools (poisoned) or in place on copies */
    ssm_mamba3_siso_step_args a = pr.args;
    ssmt_host                 copy[4];
    for (int i = 0; i < 4; ++i) copy[i] = ssmt_clone(pool_in[i], SSM_DTYPE_F64);
    if (in_place) {
        a.angle_state = a.final_angle_state = copy[0].t;
        a.ssm_state = a.final_ssm_state = copy[1].t;
        a.k_state = a.final_k_state = copy[2].t;
        a.v_state = a.final_v_state = copy[3].t;
    }
    TEST_CHECK_STATUS(ssm_mamba3_siso_step(g_ref, &p, &a), SSM_STATUS_OK);
    const ssm_tensor * idx = &pr.state_batch_indices.t;
    const int64_t      V = c.dv, H = c.nheads;
    int                bad_pad = 0, bad_untouched = 0;
    double             worst = 0.0;
    for (int64_t b = 0; b < c.batch; ++b) {
        const int64_t s = (int64_t)ssmt_get(idx, b);
        for (int64_t e = 0; e < H * V; ++e) {
            const double y = ssmt_get(&pr.out.t, b * H * V + e);
            if (s < 0)
                bad_pad += y != 0.0;
            else
                worst = fmax(worst, fabs(y - ssmt_get(&g_y.t, b * H * V + e)));
        }
    }
    for (int i = 0; i < 4; ++i) {
        const ssm_tensor * fin = in_place ? &copy[i].t : pool_out[i];
        const int64_t      row = ssmt_numel(fin) / slots;
        for (int64_t s = 0; s < slots; ++s) {
            int64_t b = -1;
            for (int64_t r = 0; r < c.batch; ++r)
                if ((int64_t)ssmt_get(idx, r) == s) b = r;
            for (int64_t e = 0; e < row; ++e) {
                const double v = ssmt_get(fin, s * row + e);
                if (b >= 0)
                    worst = fmax(worst, fabs(v - ssmt_get(&g_out[i].t, b * row + e)));
                else /* unused slot: untouched in place, a copy in a separate final pool */
                    bad_untouched += v != ssmt_get(pool_in[i], s * row + e);
            }
        }
    }
    printf("%-48s max_abs=%.3e padding_nonzero=%d untouched_changed=%d %s\n",
           in_place ? "indexed step in place == gathered step" : "indexed step == gathered step", worst, bad_pad,
           bad_untouched, worst <= 1e-14 && bad_pad == 0 && bad_untouched == 0 ? "PASS" : "FAIL");
    TEST_CHECK(worst <= 1e-14, "indexed step differs from the gathered step by %.3e", worst);
    TEST_CHECK(bad_pad == 0, "%d padding outputs are not 0", bad_pad);
    TEST_CHECK(bad_untouched == 0, "%d untouched pool values changed", bad_untouched);
    for (int i = 0; i < 4; ++i) {
        ssmt_free(&g_in[i]);
        ssmt_free(&g_out[i]);
        ssmt_free(&copy[i]);
    }
    ssmt_free(&g_y);
    ssmt_mamba3_step_free(&pr);
}

/* ---- (i) chunk_states -------------------------------------------------------------------- */

/* Length of sequence n of a config (a batch row or a varlen sequence) and the sequence count. */
static int64_t cfg_len(const ssmt_mamba3_config * c, int64_t n) { return c->nseq > 0 ? c->seqlens[n] : c->seqlen; }
static int64_t cfg_nseq(const ssmt_mamba3_config * c) { return c->nseq > 0 ? c->nseq : c->batch; }

/* The reference combined forward at chunk size C with chunk_states into a new F64 tensor; its
 * out and finals go to the problem's (poisoned first) buffers. */
static ssmt_host ref_chunk_states(ssmt_mamba3_problem * pr, const ssmt_mamba3_config * c, int64_t C) {
    ssmt_host         cs = ssmt_mamba3_chunk_states(c, C, SSM_DTYPE_F64, 0);
    ssm_mamba3_params p;
    ssmt_mamba3_params(c, &p);
    p.chunk_size = C;
    ssm_mamba3_siso_args a = pr->args;
    a.chunk_states = cs.t;
    const ssm_tensor * o[5];
    prob_outs(pr, o);
    for (int i = 0; i < 5; ++i) ssmt_poison(o[i]);
    TEST_CHECK_STATUS(ssm_mamba3_siso(g_ref, &p, &a), SSM_STATUS_OK);
    return cs;
}

/* chunk_states of the reference (spec §3.6: 𝐒 entering every chunk): asking for them leaves out
 * and the finals bit for bit; the first row of each sequence is H_in = S_in + DT_0(1−λ_0)·V_in
 * K_inᵀ (0 without initial states) exactly; and the boundary state does not depend on the chunk
 * size: the rows at C are every other row at C/2, ≤ EXACT_TOL. */
static void chunk_states_case(const char * name, const ssmt_mamba3_config * c, int64_t C) {
    ssmt_mamba3_problem pr;
    if (ssmt_mamba3_random_args(&g_rng, c, &pr) != 0) {
        TEST_CHECK(0, "%s: allocation failed", name);
        return;
    }
    ssm_mamba3_params p;
    ssmt_mamba3_params(c, &p);
    p.chunk_size = C;
    TEST_CHECK_STATUS(ssm_mamba3_siso(g_ref, &p, &pr.args), SSM_STATUS_OK);
    const ssm_tensor * o[5];
    prob_outs(&pr, o);
    ssmt_host base[5];
    for (int i = 0; i < 5; ++i) base[i] = ssmt_clone(o[i], SSM_DTYPE_F64);
    ssmt_host rows = ref_chunk_states(&pr, c, C);
    for (int i = 0; i < 5; ++i) {
        ssmt_host now = ssmt_clone(o[i], SSM_DTYPE_F64);
        TEST_CHECK(memcmp(now.buf, base[i].buf, now.bytes) == 0, "%s: %s changes when chunk_states is asked for", name,
                   k_fwd_names[i]);
        ssmt_free(&now), ssmt_free(&base[i]);
    }
    ssmt_host half = ref_chunk_states(&pr, c, C / 2);

    const int64_t H = c->nheads, V = c->dv, K = c->dk, S = pr.args.dt.shape[2];
    ssmt_host     want = ssmt_alloc(SSM_DTYPE_F64, 4, rows.t.shape);
    int64_t       row = 0, hrow = 0, t0 = 0, bad = 0;
    for (int64_t n = 0; n < cfg_nseq(c); ++n) {
        const int64_t len = cfg_len(c, n), b = c->nseq > 0 ? 0 : n, nc = (len + C - 1) / C;
        for (int64_t j = 0; j < nc; ++j) {
            const ssm_tensor dst = ssmt_slice(&want.t, 0, row + j, 1), src = ssmt_slice(&half.t, 0, hrow + 2 * j, 1);
            ssmt_copy(&dst, &src);
        }
        for (int64_t h = 0; h < H && len > 0; ++h) {
            const double trap = ssmt_get(&pr.args.trap, (b * H + h) * S + t0);
            const double dt = ssmt_get(&pr.args.dt, (b * H + h) * S + t0);
            const double c0 = dt * (1.0 - 1.0 / (1.0 + exp(-trap)));
            for (int64_t v = 0; v < V; ++v)
                for (int64_t k = 0; k < K; ++k) {
                    double hin = 0.0;
                    if (c->has_states) {
                        const double sin_ = ssmt_get(&pr.args.ssm_state, ((n * H + h) * V + v) * K + k);
                        const double vin = ssmt_get(&pr.args.v_state, (n * H + h) * V + v);
                        const double kin = ssmt_get(&pr.args.k_state, (n * H + h) * K + k);
                        hin = sin_ + c0 * vin * kin;
                    }
                    bad += ssmt_get(&rows.t, ((row * H + h) * V + v) * K + k) != hin;
                }
        }
        row += nc, hrow += (len + C / 2 - 1) / (C / 2), t0 += c->nseq > 0 ? len : 0;
    }
    TEST_CHECK(bad == 0, "%s: %lld elements of the sequences' first chunk_states rows are not H_in", name,
               (long long)bad);
    char label[160];
    snprintf(label, sizeof label, "%s chunk_states C=%lld vs every other row of C=%lld", name, (long long)C,
             (long long)(C / 2));
    ssmt_check_tol(label, &rows.t, &want.t, EXACT_TOL);
    ssmt_free(&want), ssmt_free(&half), ssmt_free(&rows);
    ssmt_mamba3_problem_free(&pr);
}

static void test_chunk_states(void) {
    static const int64_t lens[5] = {37, 0, 64, 5, 100};
    ssmt_mamba3_config   c = f64_config();
    c.nheads = 4, c.nheads_qk = 2, c.nseq = 5, c.seqlens = lens, c.has_states = 1;
    chunk_states_case("varlen states gqa", &c, 16);
    c.has_states = 0, c.index_i64 = 1;
    chunk_states_case("varlen nostates", &c, 32);
    c = f64_config();
    c.batch = 2, c.seqlen = 70, c.nheads = 3, c.nheads_qk = 1, c.has_states = 1, c.strided = 1;
    chunk_states_case("batch tail strided", &c, 64);
    c.seqlen = 50, c.has_states = 0, c.strided = 0, c.seed_regime = 1;
    chunk_states_case("batch seed regime", &c, 32);
}

int main(void) {
    g_ref = ssmt_ref_ctx_or_exit(SSM_REF_EXACT);
    test_data();
    test_example();
    ssmt_rng_seed(&g_rng, 20260301);
    test_recurrent();
    test_chunk_sizes();
    test_split();
    test_varlen();
    test_finite_differences();
    test_step_vs_forward();
    test_step_indexed(0);
    test_step_indexed(1);
    test_chunk_states();
    ssm_context_free(g_ref);
    TEST_EXIT();
}
