/*
 * test_mamba3_mimo_ref.c — the float64 reference backend of the Mamba-3 MIMO operators.
 *  (a) every stored vector of tests/data/mamba3_mimo, _bwd_fwd and _step through the public
 *      API (REF backend, F64 outputs): rel_rms ≤ 1e-10 against the float64 outputs; the
 *      bf16 bwd_fwd cases also with ref_mode UPSTREAM_BF16 against *__bf16ref.npy:
 *      rel_rms < 1e-3 for every output (printed; expect ~1e-7);
 *  (b) forward (chunked) == the token recurrence on random shapes (tails, GQA, R 1..8, div
 *      2/4, reduced / per-rank, z and d on/off, fused norm, states, varlen with an empty
 *      sequence, strided layouts), ≤ 1e-12;
 *  (c) the chunk size (1, 3, 8, 16) does not change the forward, ≤ 1e-12;
 *  (d) a split with final → initial states == one call; varlen == one call per sequence;
 *      an empty sequence leaves its four states exactly as given;
 *  (e) S reference steps == the forward over S tokens (outputs, final states; the step's
 *      angle is not wrapped: compared modulo 2π), ≤ 1e-12; the indexed step (padding rows,
 *      permuted slots) == the unindexed step on the gathered states, unused pool rows
 *      are copied to separate final pools; in place == separate buffers;
 *  (f) bwd_fwd (exact) agrees with the forward where they coincide, ≤ 1e-12: qk_dot =
 *      q̄·k̄; states[c] = the pre-loaded state entering chunk c (= h + σ̄·Σ k̃⊗u of the prefix
 *      forward's final states); dmimo_o = Σ_t out_rank·dout of a per-rank forward; and dz,
 *      dmimo_z == central finite differences of ⟨dout, out⟩ (rel_rms ≤ 1e-6).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ssmi_ref_mimo.h"
#include "fixtures.h"
#include "testutil.h"

#define DATA_TOL 1e-10
#define EXACT_TOL 1e-12
#define BF16_TOL 1e-3
#define FD_TOL 1e-6
#define TWO_PI 6.283185307179586476925

static ssm_context * g_ref;  /* REF backend, exact */
static ssm_context * g_bf16; /* REF backend, ref_mode UPSTREAM_BF16 */

/* max |remainder(y − r, 2π)| over all elements (angles equal modulo 2π). */
static double angle_diff(const ssm_tensor * y, const ssm_tensor * r) {
    double m = 0.0;
    for (int64_t i = 0; i < ssmt_numel(r); ++i) {
        const double d = fabs(remainder(ssmt_get(y, i) - ssmt_get(r, i), TWO_PI));
        if (!(d <= m)) m = d;
    }
    return m;
}

static void check_angle(const char * label, const ssm_tensor * y, const ssm_tensor * r, double tol) {
    const double d = angle_diff(y, r);
    printf("%-60s max|Δθ mod 2π| %.3e %s\n", label, d, d <= tol ? "PASS" : "FAIL");
    TEST_CHECK(d <= tol, "%s: angles differ by %g modulo 2π", label, d);
}

/* Dims of a forward call, as ops/ would fill them. */
static ssmi_mimo_dims fwd_dims(const ssm_mamba3_mimo_args * a, const ssm_mamba3_mimo_params * p) {
    ssmi_mimo_dims d;
    memset(&d, 0, sizeof d);
    d.batch = a->q.shape[0];
    d.seqlen = a->q.shape[1];
    d.rank = a->q.shape[2];
    d.ngroups = a->q.shape[3];
    d.dstate = a->q.shape[4];
    d.nheads = a->v.shape[2];
    d.headdim = a->v.shape[3];
    d.nangles = d.dstate / p->rotary_dim_divisor;
    d.chunk = p->chunk_size;
    d.nchunks = (d.seqlen + d.chunk - 1) / d.chunk;
    d.varlen = a->cu_seqlens.data != NULL;
    d.nseq = d.varlen ? a->cu_seqlens.shape[0] - 1 : d.batch;
    d.has_states = a->ssm_state.data != NULL;
    d.reduce_o = a->mimo_o.data != NULL;
    return d;
}

/* ---- (a) stored test vectors ------------------------------------------------------------ */

static int is_act(const char * name) {
    static const char * const act[] = {"q", "k", "v", "z", "trap", "dout", NULL};
    for (int i = 0; act[i] != NULL; ++i)
        if (strcmp(act[i], name) == 0) return 1;
    return 0;
}

/* A number after "key": in case.json (def when absent). */
static double json_number(const ssmt_case * c, const char * key, double def) {
    char path[1200], pat[80];
    snprintf(path, sizeof path, "%s/case.json", c->dir);
    FILE * f = fopen(path, "rb");
    if (f == NULL) return def;
    static char text[65536];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char * at = strstr(text, pat);
    return at != NULL ? strtod(at + strlen(pat), NULL) : def;
}

/* Short names for the many initialisers below. */
static ssm_tensor bag(const ssmt_bag * g, const char * name) { return ssmt_bag_get(g, name); }
static ssmt_host  out_like(const ssmt_bag * g, const char * name) { return ssmt_bag_out_like(g, name); }

/* Designated initialisers of the inputs that the forward and the step name alike, from the bag *g. */
#define MIMO_BAG_INPUTS(g)                                                                                         \
    SSMT_M3_BAG_INPUTS(g), .mimo_v = bag(g, "mimo_v"), .mimo_z = bag(g, "mimo_z"), .mimo_o = bag(g, "mimo_o"),     \
        .outproj_norm_weight = bag(g, "outproj_norm_weight"), .angle_state = bag(g, "angle_state"),                \
        .ssm_state = bag(g, "ssm_state"), .k_state = bag(g, "k_state"), .v_state = bag(g, "v_state")

/* Inputs of the stored cases: activations (q, k, v, z, trap, dout) in the case dtype,
 * cu_seqlens I32, other floats F32 (their stored values). */
static ssm_dtype input_dtype(const ssmt_case * c, const char * file, void * arg) {
    (void)arg;
    if (strcmp(file, "cu_seqlens") == 0) return SSM_DTYPE_I32;
    return is_act(file) ? c->dtype : SSM_DTYPE_F32;
}

static void compare_out(const ssmt_bag * g, const char * op, const char * name, const ssmt_host * got, double tol) {
    char key[60], label[240];
    snprintf(key, sizeof key, "want:%s", name);
    const ssm_tensor w = bag(g, key);
    if (w.data == NULL) return;
    TEST_CHECK(got->t.data != NULL, "%s/%s: no output for %s", op, g->c.name, name);
    if (got->t.data == NULL) return;
    snprintf(label, sizeof label, "data %s/%s %s", op, g->c.name, name);
    ssmt_check_tol(label, &got->t, &w, tol);
}

static void params_of(const ssmt_bag * g, ssm_mamba3_mimo_params * p) {
    ssm_mamba3_mimo_params_init(p);
    if (g->c.chunk > 0) p->chunk_size = g->c.chunk;
    p->rotary_dim_divisor = (int32_t)json_number(&g->c, "div", 4);
    p->fuse_pregate_norm = (int32_t)json_number(&g->c, "fuse_pregate_headwise_rms_norm", 0);
    p->norm_eps = json_number(&g->c, "outproj_norm_eps", 1e-5);
}

/* The outputs of a forward or step case: out and the four final states. */
static const char * const k_fwd_outs[5] = {"out", "final_angle_state", "final_ssm_state", "final_k_state",
                                           "final_v_state"};

/* The five outputs of case g, shaped like its stored ones, in the order of k_fwd_outs. */
static void fwd_outs_like(const ssmt_bag * g, ssmt_host o[5]) {
    for (int i = 0; i < 5; ++i) o[i] = out_like(g, k_fwd_outs[i]);
}

/* The status st of op on case `name` (a counted check), then, when it is OK, each stored output
 * against o[i]; the outputs are freed. */
static void check_fwd_outs(const ssmt_bag * g, const char * op, const char * name, ssm_status st, ssmt_host o[5]) {
    TEST_CHECK(st == SSM_STATUS_OK, "%s/%s: %s (%s)", op, name, ssm_status_string(st), ssm_context_last_error(g_ref));
    for (int i = 0; i < 5; ++i) {
        if (st == SSM_STATUS_OK) compare_out(g, op, k_fwd_outs[i], &o[i], DATA_TOL);
        ssmt_free(&o[i]);
    }
}

static void data_forward(const char * name) {
    static const char * const list[] = {
        "q",          "k",          "v",          "adt",       "dt",          "trap",          "q_bias",
        "k_bias",     "mimo_v",     "mimo_z",     "mimo_o",    "angles",      "d",             "z",
        "outproj_norm_weight",      "angle_state", "ssm_state", "k_state",    "v_state",       "cu_seqlens",
        "want:out",   "want:final_angle_state",   "want:final_ssm_state",     "want:final_k_state",
        "want:final_v_state",       NULL};
    ssmt_bag g;
    if (ssmt_bag_load(&g, "mamba3_mimo", name, list, input_dtype, NULL) != 0) return;
    ssm_mamba3_mimo_params p;
    params_of(&g, &p);
    ssmt_host o[5];
    fwd_outs_like(&g, o);
    ssm_mamba3_mimo_args a = {MIMO_BAG_INPUTS(&g),
                              .cu_seqlens = bag(&g, "cu_seqlens"),
                              SSMT_M3_OUTS_FROM(o)};
    check_fwd_outs(&g, "mamba3_mimo", name, ssm_mamba3_mimo(g_ref, &p, &a), o);
    ssmt_bag_free(&g);
}

static void data_bwd_fwd(const char * name) {
    static const char * const list[] = {
        "dout",      "q",          "k",        "v",        "q_bias",   "k_bias",      "mimo_v",  "mimo_o",
        "z",         "mimo_z",     "angles",   "da_cs",    "da_cs_rev", "dt",         "trap",    "d",
        "segsum",    "want:dmimo_o", "want:states", "want:dz", "want:dmimo_z", "want:qk_dot",
        "want:dmimo_o__bf16ref",    "want:states__bf16ref", "want:dz__bf16ref", "want:dmimo_z__bf16ref",
        "want:qk_dot__bf16ref",     NULL};
    static const char * const outs[5] = {"dmimo_o", "states", "dz", "dmimo_z", "qk_dot"};
    ssmt_bag g;
    if (ssmt_bag_load(&g, "mamba3_mimo_bwd_fwd", name, list, input_dtype, NULL) != 0) return;
    ssm_mamba3_mimo_params p;
    params_of(&g, &p);
    for (int mode = 0; mode < 2; ++mode) {
        if (mode == 1 && bag(&g, "want:qk_dot__bf16ref").data == NULL) break;
        ssmt_host o[5];
        for (int i = 0; i < 5; ++i) o[i] = out_like(&g, outs[i]);
        ssm_mamba3_mimo_bwd_fwd_args a = {.dout = bag(&g, "dout"),
                                          .q = bag(&g, "q"),
                                          .k = bag(&g, "k"),
                                          .v = bag(&g, "v"),
                                          .q_bias = bag(&g, "q_bias"),
                                          .k_bias = bag(&g, "k_bias"),
                                          .mimo_v = bag(&g, "mimo_v"),
                                          .mimo_o = bag(&g, "mimo_o"),
                                          .z = bag(&g, "z"),
                                          .mimo_z = bag(&g, "mimo_z"),
                                          .angles = bag(&g, "angles"),
                                          .da_cs = bag(&g, "da_cs"),
                                          .da_cs_rev = bag(&g, "da_cs_rev"),
                                          .dt = bag(&g, "dt"),
                                          .trap = bag(&g, "trap"),
                                          .d = bag(&g, "d"),
                                          .segsum = bag(&g, "segsum"),
                                          .dmimo_o = o[0].t,
                                          .states = o[1].t,
                                          .dz = o[2].t,
                                          .dmimo_z = o[3].t,
                                          .qk_dot = o[4].t};
        ssm_context *    ctx = mode == 0 ? g_ref : g_bf16;
        const ssm_status st = ssm_mamba3_mimo_bwd_fwd(ctx, &p, &a);
        TEST_CHECK(st == SSM_STATUS_OK, "mamba3_mimo_bwd_fwd/%s: %s (%s)", name, ssm_status_string(st),
                   ssm_context_last_error(ctx));
        if (st == SSM_STATUS_OK)
            for (int i = 0; i < 5; ++i) {
                char key[60];
                snprintf(key, sizeof key, "%s%s", outs[i], mode == 0 ? "" : "__bf16ref");
                compare_out(&g, mode == 0 ? "mamba3_mimo_bwd_fwd" : "mamba3_mimo_bwd_fwd[bf16 mode]", key, &o[i],
                            mode == 0 ? DATA_TOL : BF16_TOL);
            }
        for (int i = 0; i < 5; ++i) ssmt_free(&o[i]);
    }
    ssmt_bag_free(&g);
}

static void data_step(const char * name) {
    static const char * const list[] = {
        "q",          "k",          "v",         "z",         "adt",     "dt",      "trap",     "angles",
        "q_bias",     "k_bias",     "mimo_v",    "mimo_z",    "mimo_o",  "d",       "outproj_norm_weight",
        "angle_state", "ssm_state", "k_state",   "v_state",   "want:out", "want:final_angle_state",
        "want:final_ssm_state",     "want:final_k_state",     "want:final_v_state", NULL};
    ssmt_bag g;
    if (ssmt_bag_load(&g, "mamba3_mimo_step", name, list, input_dtype, NULL) != 0) return;
    ssm_mamba3_mimo_params p;
    params_of(&g, &p);
    ssmt_host o[5];
    fwd_outs_like(&g, o);
    ssm_mamba3_mimo_step_args a = {MIMO_BAG_INPUTS(&g),
                                   SSMT_M3_OUTS_FROM(o)};
    check_fwd_outs(&g, "mamba3_mimo_step", name, ssm_mamba3_mimo_step(g_ref, &p, &a), o);
    ssmt_bag_free(&g);
}

static void test_data(void) {
    static const char * const ops[3] = {"mamba3_mimo", "mamba3_mimo_bwd_fwd", "mamba3_mimo_step"};
    static char names[64][128];
    for (int o = 0; o < 3; ++o) {
        const int n = ssmt_case_list(ops[o], names, 64);
        TEST_CHECK(n > 0, "no cases for %s", ops[o]);
        for (int i = 0; i < n; ++i) {
            if (o == 0) data_forward(names[i]);
            if (o == 1) data_bwd_fwd(names[i]);
            if (o == 2) data_step(names[i]);
        }
    }
}

/* ---- random forward problems ------------------------------------------------------------- */

static const int64_t k_lens_empty[4] = {7, 0, 13, 5};

static ssmt_mimo_config base_cfg(void) {
    ssmt_mimo_config c;
    ssmt_mimo_config_init(&c);
    c.out_dtype = SSM_DTYPE_F64;
    return c;
}

/* A config as base_cfg() with the fields named here changed: a nonzero number replaces base_cfg's,
 * a flag switches its default (reduce_o, z, d on; the rest off) the other way. */
typedef struct cfg_delta {
    const char * name;
    int64_t      seqlen, rank, chunk, nheads, ngroups, dstate, headdim;
    int32_t      div;
    int          per_rank, no_z, no_d, fused, norm_weight, states, final, varlen_empty, index_i64, strided, bf16;
} cfg_delta;

static ssmt_mimo_config cfg_of(const cfg_delta * d) {
    ssmt_mimo_config c = base_cfg();
    if (d->seqlen) c.seqlen = d->seqlen;
    if (d->rank) c.rank = d->rank;
    if (d->chunk) c.chunk = d->chunk;
    if (d->nheads) c.nheads = d->nheads;
    if (d->ngroups) c.ngroups = d->ngroups;
    if (d->dstate) c.dstate = d->dstate;
    if (d->headdim) c.headdim = d->headdim;
    if (d->div) c.div = d->div;
    if (d->per_rank) c.reduce_o = 0;
    if (d->no_z) c.has_z = 0;
    if (d->no_d) c.has_d = 0;
    if (d->fused) c.fused = 1;
    if (d->norm_weight) c.has_norm_weight = 1;
    if (d->states) c.has_states = 1;
    if (d->final) c.has_final = 1;
    if (d->varlen_empty) c.nseq = 4, c.seqlens = k_lens_empty;
    if (d->index_i64) c.index_i64 = 1;
    if (d->strided) c.strided = 1;
    if (d->bf16) c.dtype = SSM_DTYPE_BF16;
    return c;
}

/* The shapes of (b). */
static const cfg_delta k_shapes[] = {
    {.name = "default reduced z d gqa"},
    {.name = "tail S13 R3 C6 GQA h2g1", .seqlen = 13, .rank = 3, .chunk = 6, .nheads = 2, .ngroups = 1},
    {.name = "R1 per-rank no z S35", .rank = 1, .per_rank = 1, .no_z = 1, .seqlen = 35, .chunk = 16},
    {.name = "R8 C4 div2 no d", .rank = 8, .chunk = 4, .div = 2, .no_d = 1, .seqlen = 21},
    {.name = "per-rank z div2 states", .per_rank = 1, .seqlen = 20, .div = 2, .states = 1, .final = 1},
    {.name = "fused norm weight states R4 C5",
     .fused = 1, .norm_weight = 1, .states = 1, .final = 1, .rank = 4, .seqlen = 19, .chunk = 5},
    {.name = "fused norm default weight", .fused = 1, .rank = 2},
    {.name = "varlen with empty sequence, states", .varlen_empty = 1, .states = 1, .final = 1, .index_i64 = 1},
    {.name = "varlen no states per-rank no z no d",
     .varlen_empty = 1, .final = 1, .per_rank = 1, .no_z = 1, .no_d = 1},
    {.name = "strided bf16 inputs G=H",
     .strided = 1, .states = 1, .final = 1, .bf16 = 1, .dstate = 32, .headdim = 16, .rank = 4, .nheads = 4,
     .ngroups = 4},
};

/* F64 copies of every output of a forward problem, poisoned, with a's shapes. */
typedef struct fwd_outs {
    ssmt_host out, fa, fs, fk, fv;
} fwd_outs;

static fwd_outs alloc_outs(const ssm_mamba3_mimo_args * a) {
    fwd_outs o;
    memset(&o, 0, sizeof o);
    o.out = ssmt_alloc(SSM_DTYPE_F64, a->out.ndim, a->out.shape);
    if (a->final_angle_state.data) o.fa = ssmt_alloc(SSM_DTYPE_F64, 3, a->final_angle_state.shape);
    if (a->final_ssm_state.data) o.fs = ssmt_alloc(SSM_DTYPE_F64, 4, a->final_ssm_state.shape);
    if (a->final_k_state.data) o.fk = ssmt_alloc(SSM_DTYPE_F64, 4, a->final_k_state.shape);
    if (a->final_v_state.data) o.fv = ssmt_alloc(SSM_DTYPE_F64, 3, a->final_v_state.shape);
    return o;
}

static void set_outs(ssm_mamba3_mimo_args * a, const fwd_outs * o) {
    a->out = o->out.t;
    a->final_angle_state = o->fa.t;
    a->final_ssm_state = o->fs.t;
    a->final_k_state = o->fk.t;
    a->final_v_state = o->fv.t;
}

static void free_outs(fwd_outs * o) {
    ssmt_free(&o->out);
    ssmt_free(&o->fa);
    ssmt_free(&o->fs);
    ssmt_free(&o->fk);
    ssmt_free(&o->fv);
}

static void compare_outs(const char * what, const fwd_outs * y, const fwd_outs * r, double tol) {
    static const char * const names[5] = {"out", "final_angle", "final_ssm", "final_k", "final_v"};
    const ssmt_host * const   ys[5] = {&y->out, &y->fa, &y->fs, &y->fk, &y->fv};
    const ssmt_host * const   rs[5] = {&r->out, &r->fa, &r->fs, &r->fk, &r->fv};
    for (int i = 0; i < 5; ++i) {
        if (i > 0 && !rs[i]->t.data) continue; /* out always, the finals where r has them */
        char label[200];
        snprintf(label, sizeof label, "%s %s", what, names[i]);
        ssmt_check_tol(label, &ys[i]->t, &rs[i]->t, tol);
    }
}

static ssm_status run_fwd(const ssm_mamba3_mimo_params * p, ssm_mamba3_mimo_args * a, const fwd_outs * o) {
    set_outs(a, o);
    const ssm_status st = ssm_mamba3_mimo(g_ref, p, a);
    TEST_CHECK(st == SSM_STATUS_OK, "mamba3_mimo: %s (%s)", ssm_status_string(st), ssm_context_last_error(g_ref));
    return st;
}

/* (b) chunked == recurrent, (c) chunk-size independence. */
static void test_recurrent_and_chunks(void) {
    for (int i = 0; i < (int)(sizeof k_shapes / sizeof k_shapes[0]); ++i) {
        const ssmt_mimo_config cfg = cfg_of(&k_shapes[i]);
        ssmt_rng rng;
        ssmt_rng_seed(&rng, 100 + (uint64_t)i);
        ssmt_mimo_problem pr;
        if (ssmt_mimo_random_args(&rng, &cfg, &pr) != 0) {
            TEST_CHECK(0, "alloc %s", k_shapes[i].name);
            continue;
        }
        fwd_outs chunked = alloc_outs(&pr.args), rec = alloc_outs(&pr.args);
        ssm_mamba3_mimo_args a = pr.args;
        if (run_fwd(&pr.params, &a, &chunked) == SSM_STATUS_OK) {
            set_outs(&a, &rec);
            const ssmi_mimo_dims d = fwd_dims(&a, &pr.params);
            TEST_CHECK_STATUS(ssmi_ref_mamba3_mimo_recurrent(NULL, &pr.params, &d, &a), SSM_STATUS_OK);
            char label[160];
            snprintf(label, sizeof label, "(b) chunked==recurrent [%s]", k_shapes[i].name);
            compare_outs(label, &chunked, &rec, EXACT_TOL);
            /* (c) chunk sizes 1, 3, 8, 16 (C·R ≤ 128) */
            static const int64_t chunks[4] = {1, 3, 8, 16};
            for (int c = 0; c < 4; ++c) {
                if (chunks[c] * cfg.rank > 128) continue;
                ssm_mamba3_mimo_params pc = pr.params;
                pc.chunk_size = chunks[c];
                fwd_outs o = alloc_outs(&pr.args);
                if (run_fwd(&pc, &a, &o) == SSM_STATUS_OK) {
                    snprintf(label, sizeof label, "(c) C=%lld vs C=%lld [%s]", (long long)chunks[c],
                             (long long)pr.params.chunk_size, k_shapes[i].name);
                    compare_outs(label, &o, &chunked, EXACT_TOL);
                }
                free_outs(&o);
            }
        }
        free_outs(&chunked);
        free_outs(&rec);
        ssmt_mimo_problem_free(&pr);
    }
}

/* The forward arguments of tokens [t0, t0+len) of a dense problem (rows all batch rows). */
static ssm_mamba3_mimo_args time_slice(const ssm_mamba3_mimo_args * a, int64_t t0, int64_t len) {
    ssm_mamba3_mimo_args s = *a;
    SSMT_M3_TOKEN_SLICE(s, *a, t0, len);
    return s;
}

static void set_states_from(ssm_mamba3_mimo_args * a, const fwd_outs * f) {
    a->angle_state = f->fa.t;
    a->ssm_state = f->fs.t;
    a->k_state = f->fk.t;
    a->v_state = f->fv.t;
}

/* (d) split == one call; varlen == per-sequence calls; empty sequence passes states. */
static void test_split_varlen(void) {
    /* split, dense B=2 with initial states */
    ssmt_mimo_config c = base_cfg();
    c.seqlen = 23;
    c.rank = 3;
    c.chunk = 4;
    c.has_states = 1;
    c.has_final = 1;
    for (int variant = 0; variant < 2; ++variant) {
        c.reduce_o = variant == 0;
        c.fused = variant == 0;
        ssmt_rng rng;
        ssmt_rng_seed(&rng, 900 + (uint64_t)variant);
        ssmt_mimo_problem pr;
        if (ssmt_mimo_random_args(&rng, &c, &pr) != 0) continue;
        fwd_outs one = alloc_outs(&pr.args), first = alloc_outs(&pr.args), two = alloc_outs(&pr.args);
        ssm_mamba3_mimo_args a = pr.args;
        run_fwd(&pr.params, &a, &one);
        const int64_t        s1 = 10;
        ssm_mamba3_mimo_args a1 = time_slice(&pr.args, 0, s1);
        set_outs(&a1, &first);
        a1.out = ssmt_slice(&two.out.t, 1, 0, s1);
        TEST_CHECK_STATUS(ssm_mamba3_mimo(g_ref, &pr.params, &a1), SSM_STATUS_OK);
        ssm_mamba3_mimo_args a2 = time_slice(&pr.args, s1, c.seqlen - s1);
        set_states_from(&a2, &first);
        a2.out = ssmt_slice(&two.out.t, 1, s1, c.seqlen - s1);
        a2.final_angle_state = two.fa.t;
        a2.final_ssm_state = two.fs.t;
        a2.final_k_state = two.fk.t;
        a2.final_v_state = two.fv.t;
        TEST_CHECK_STATUS(ssm_mamba3_mimo(g_ref, &pr.params, &a2), SSM_STATUS_OK);
        compare_outs(variant == 0 ? "(d) split==one [reduced fused]" : "(d) split==one [per-rank]", &two, &one,
                     EXACT_TOL);
        free_outs(&one);
        free_outs(&first);
        free_outs(&two);
        ssmt_mimo_problem_free(&pr);
    }
    /* varlen == per-sequence dense calls */
    c = base_cfg();
    c.nseq = 4;
    c.seqlens = k_lens_empty;
    c.has_states = 1;
    c.has_final = 1;
    c.rank = 2;
    c.chunk = 3;
    ssmt_rng rng;
    ssmt_rng_seed(&rng, 77);
    ssmt_mimo_problem pr;
    if (ssmt_mimo_random_args(&rng, &c, &pr) != 0) return;
    fwd_outs packed = alloc_outs(&pr.args), per = alloc_outs(&pr.args);
    ssm_mamba3_mimo_args a = pr.args;
    run_fwd(&pr.params, &a, &packed);
    int64_t t0 = 0;
    for (int s = 0; s < c.nseq; ++s) {
        const int64_t len = c.seqlens[s];
        if (len > 0) {
            ssm_mamba3_mimo_args b = time_slice(&pr.args, t0, len);
            memset(&b.cu_seqlens, 0, sizeof b.cu_seqlens);
            b.out = ssmt_slice(&per.out.t, 1, t0, len);
            b.angle_state = ssmt_slice(&pr.angle_state.t, 0, s, 1);
            b.ssm_state = ssmt_slice(&pr.ssm_state.t, 0, s, 1);
            b.k_state = ssmt_slice(&pr.k_state.t, 0, s, 1);
            b.v_state = ssmt_slice(&pr.v_state.t, 0, s, 1);
            b.final_angle_state = ssmt_slice(&per.fa.t, 0, s, 1);
            b.final_ssm_state = ssmt_slice(&per.fs.t, 0, s, 1);
            b.final_k_state = ssmt_slice(&per.fk.t, 0, s, 1);
            b.final_v_state = ssmt_slice(&per.fv.t, 0, s, 1);
            TEST_CHECK_STATUS(ssm_mamba3_mimo(g_ref, &pr.params, &b), SSM_STATUS_OK);
        } else {
            /* the empty sequence: the packed call must pass its states through exactly */
            const ssm_tensor fin[4] = {ssmt_pick(&packed.fa.t, 0, s), ssmt_pick(&packed.fs.t, 0, s), ssmt_pick(&packed.fk.t, 0, s),
                                       ssmt_pick(&packed.fv.t, 0, s)};
            const ssm_tensor ini[4] = {ssmt_pick(&pr.angle_state.t, 0, s), ssmt_pick(&pr.ssm_state.t, 0, s),
                                       ssmt_pick(&pr.k_state.t, 0, s), ssmt_pick(&pr.v_state.t, 0, s)};
            const ssm_tensor dst[4] = {ssmt_pick(&per.fa.t, 0, s), ssmt_pick(&per.fs.t, 0, s), ssmt_pick(&per.fk.t, 0, s),
                                       ssmt_pick(&per.fv.t, 0, s)};
            for (int k = 0; k < 4; ++k) {
                int same = 1;
                for (int64_t i = 0; i < ssmt_numel(&ini[k]); ++i)
                    if (ssmt_get(&fin[k], i) != ssmt_get(&ini[k], i)) same = 0;
                TEST_CHECK(same, "(d) empty sequence %d: state %d changed", s, k);
                ssmt_copy(&dst[k], &ini[k]);
            }
            printf("%-60s %s\n", "(d) empty sequence leaves its four states unchanged", "checked");
        }
        t0 += len;
    }
    compare_outs("(d) varlen==per-sequence", &per, &packed, EXACT_TOL);
    free_outs(&packed);
    free_outs(&per);
    ssmt_mimo_problem_free(&pr);
}

/* ---- (e) steps == forward ------------------------------------------------------------------ */

static void test_steps(void) {
    static const cfg_delta cfgs[3] = {
        {.name = "default"},
        {.name = "per-rank div2 R3", .per_rank = 1, .div = 2, .rank = 3},
        {.name = "fused norm weight R4", .fused = 1, .norm_weight = 1, .rank = 4}};
    for (int ci = 0; ci < 3; ++ci) {
        ssmt_mimo_config c = cfg_of(&cfgs[ci]);
        c.seqlen = 11;
        c.has_states = 1;
        c.has_final = 1;
        ssmt_rng rng;
        ssmt_rng_seed(&rng, 300 + (uint64_t)ci);
        ssmt_mimo_problem pr;
        if (ssmt_mimo_random_args(&rng, &c, &pr) != 0) continue;
        fwd_outs fwd = alloc_outs(&pr.args), stp = alloc_outs(&pr.args);
        ssm_mamba3_mimo_args a = pr.args;
        run_fwd(&pr.params, &a, &fwd);
        /* the pool: F64 copies of the initial states, updated in place each step */
        ssmt_copy(&stp.fa.t, &pr.angle_state.t);
        ssmt_copy(&stp.fs.t, &pr.ssm_state.t);
        ssmt_copy(&stp.fk.t, &pr.k_state.t);
        ssmt_copy(&stp.fv.t, &pr.v_state.t);
        const ssmt_host pool[4] = {stp.fa, stp.fs, stp.fk, stp.fv};
        for (int64_t t = 0; t < c.seqlen; ++t) {
            ssm_mamba3_mimo_step_args s;
            memset(&s, 0, sizeof s);
            SSMT_M3_STEP_AT(s, pr.args, t);
            s.mimo_v = pr.mimo_v.t;
            s.mimo_z = pr.mimo_z.t;
            s.mimo_o = pr.mimo_o.t;
            s.outproj_norm_weight = pr.norm_weight.t;
            SSMT_M3_STEP_IN_PLACE(s, pool);
            s.out = ssmt_pick(&stp.out.t, 1, t);
            const ssm_status st = ssm_mamba3_mimo_step(g_ref, &pr.params, &s);
            TEST_CHECK(st == SSM_STATUS_OK, "step %lld: %s (%s)", (long long)t, ssm_status_string(st),
                       ssm_context_last_error(g_ref));
            if (st != SSM_STATUS_OK) break;
        }
        char label[160];
        snprintf(label, sizeof label, "(e) %lld steps==forward [cfg %d] out", (long long)c.seqlen, ci);
        ssmt_check_tol(label, &stp.out.t, &fwd.out.t, EXACT_TOL);
        snprintf(label, sizeof label, "(e) steps==forward [cfg %d] final_ssm", ci);
        ssmt_check_tol(label, &stp.fs.t, &fwd.fs.t, EXACT_TOL);
        snprintf(label, sizeof label, "(e) steps==forward [cfg %d] final_k", ci);
        ssmt_check_tol(label, &stp.fk.t, &fwd.fk.t, EXACT_TOL);
        snprintf(label, sizeof label, "(e) steps==forward [cfg %d] final_v", ci);
        ssmt_check_tol(label, &stp.fv.t, &fwd.fv.t, EXACT_TOL);
        snprintf(label, sizeof label, "(e) steps==forward [cfg %d] final_angle (mod 2π)", ci);
        check_angle(label, &stp.fa.t, &fwd.fa.t, 1e-12 * TWO_PI * 10.0);
        free_outs(&fwd);
        free_outs(&stp);
        ssmt_mimo_problem_free(&pr);
    }
}

/* (e) indexed step == unindexed step on gathered states; untouched slots; in place. */
static void test_step_indices(void) {
    ssmt_mimo_config c = base_cfg();
    c.batch = 5;
    c.rank = 3;
    c.index_i64 = 1;
    const int64_t slots = 7;
    ssmt_rng      rng;
    ssmt_rng_seed(&rng, 4242);
    ssmt_mimo_step_problem pr;
    if (ssmt_mimo_random_step(&rng, &c, slots, 1, &pr) != 0) {
        TEST_CHECK(0, "alloc step problem");
        return;
    }
    TEST_CHECK_STATUS(ssm_mamba3_mimo_step(g_ref, &pr.params, &pr.args), SSM_STATUS_OK);
    /* unindexed: pool of B rows gathered from the slots (padding rows read slot 0) */
    ssmt_mimo_step_problem un;
    ssmt_rng_seed(&rng, 4242);
    if (ssmt_mimo_random_step(&rng, &c, c.batch, 0, &un) != 0) {
        ssmt_mimo_step_free(&pr);
        return;
    }
    ssm_mamba3_mimo_step_args u = pr.args;
    memset(&u.state_batch_indices, 0, sizeof u.state_batch_indices);
    const ssm_tensor * pools[4] = {&pr.angle_state.t, &pr.ssm_state.t, &pr.k_state.t, &pr.v_state.t};
    const ssm_tensor * gath[4] = {&un.angle_state.t, &un.ssm_state.t, &un.k_state.t, &un.v_state.t};
    for (int64_t b = 0; b < c.batch; ++b) {
        const int64_t s = (int64_t)ssmt_get(&pr.state_batch_indices.t, b);
        for (int k = 0; k < 4; ++k) {
            const ssm_tensor dst = ssmt_pick(gath[k], 0, b), src = ssmt_pick(pools[k], 0, s < 0 ? 0 : s);
            ssmt_copy(&dst, &src);
        }
    }
    u.angle_state = un.angle_state.t;
    u.ssm_state = un.ssm_state.t;
    u.k_state = un.k_state.t;
    u.v_state = un.v_state.t;
    u.out = un.out.t;
    u.final_angle_state = un.final_angle_state.t;
    u.final_ssm_state = un.final_ssm_state.t;
    u.final_k_state = un.final_k_state.t;
    u.final_v_state = un.final_v_state.t;
    TEST_CHECK_STATUS(ssm_mamba3_mimo_step(g_ref, &un.params, &u), SSM_STATUS_OK);
    const ssm_tensor * fin_idx[4] = {&pr.final_angle_state.t, &pr.final_ssm_state.t, &pr.final_k_state.t,
                                     &pr.final_v_state.t};
    const ssm_tensor * fin_un[4] = {&un.final_angle_state.t, &un.final_ssm_state.t, &un.final_k_state.t,
                                    &un.final_v_state.t};
    int used[16] = {0};
    for (int64_t b = 0; b < c.batch; ++b) {
        const int64_t    s = (int64_t)ssmt_get(&pr.state_batch_indices.t, b);
        const ssm_tensor oi = ssmt_pick(&pr.out.t, 0, b), ou = ssmt_pick(&un.out.t, 0, b);
        if (s < 0) {
            int zero = 1;
            for (int64_t i = 0; i < ssmt_numel(&oi); ++i)
                if (ssmt_get(&oi, i) != 0.0) zero = 0;
            TEST_CHECK(zero, "(e) padding row %lld: out is not 0", (long long)b);
            continue;
        }
        used[s] = 1;
        char label[120];
        snprintf(label, sizeof label, "(e) indexed step row %lld out", (long long)b);
        ssmt_check_tol(label, &oi, &ou, 0.0);
        for (int k = 0; k < 4; ++k) {
            const ssm_tensor fi = ssmt_pick(fin_idx[k], 0, s), fu = ssmt_pick(fin_un[k], 0, b);
            snprintf(label, sizeof label, "(e) indexed step row %lld final state %d", (long long)b, k);
            ssmt_check_tol(label, &fi, &fu, 0.0);
        }
    }
    /* a separate final pool is the whole pool after the step: slots no row uses are copies */
    for (int64_t s = 0; s < slots; ++s) {
        if (used[s]) continue;
        for (int k = 0; k < 4; ++k) {
            const ssm_tensor fi = ssmt_pick(fin_idx[k], 0, s), pool = ssmt_pick(pools[k], 0, s);
            int              same = 1;
            for (int64_t i = 0; i < ssmt_numel(&fi); ++i)
                if (ssmt_get(&fi, i) != ssmt_get(&pool, i)) same = 0;
            TEST_CHECK(same, "(e) slot %lld without a row is not a copy of the input pool (state %d)", (long long)s, k);
        }
    }
    /* in place: finals = the same views as the input pool == separate buffers above */
    ssm_mamba3_mimo_step_args ip = pr.args;
    ssmt_host outs2 = ssmt_alloc(SSM_DTYPE_F64, pr.out.t.ndim, pr.out.t.shape);
    ip.out = outs2.t;
    ip.final_angle_state = ip.angle_state;
    ip.final_ssm_state = ip.ssm_state;
    ip.final_k_state = ip.k_state;
    ip.final_v_state = ip.v_state;
    TEST_CHECK_STATUS(ssm_mamba3_mimo_step(g_ref, &pr.params, &ip), SSM_STATUS_OK);
    ssmt_check_tol("(e) in-place step out", &outs2.t, &pr.out.t, 0.0);
    for (int64_t s = 0; s < slots; ++s) {
        if (!used[s]) continue;
        for (int k = 0; k < 4; ++k) {
            const ssm_tensor fi = ssmt_pick(fin_idx[k], 0, s), pool = ssmt_pick(pools[k], 0, s);
            char             label[120];
            snprintf(label, sizeof label, "(e) in-place slot %lld state %d", (long long)s, k);
            /* pool (param dtype) vs F32-or-F64 finals: compare at the pool's precision */
            const ssmt_host fr = ssmt_clone(&fi, (ssm_dtype)pool.dtype);
            ssmt_check_tol(label, &pool, &fr.t, 0.0);
            ssmt_host tmp = fr;
            ssmt_free(&tmp);
        }
    }
    ssmt_free(&outs2);
    ssmt_mimo_step_free(&un);
    ssmt_mimo_step_free(&pr);
}

/* ---- (f) bwd_fwd vs forward ---------------------------------------------------------------- */

/* The bwd_fwd arguments that match a dense forward problem: θ = cumulative π·tanh(raw)·Δ,
 * da_cs / da_cs_rev / segsum from adt (a = 0 past S), all F64. */
typedef struct consistent {
    ssmt_host theta, da_cs, da_cs_rev, segsum, dout, states, qk_dot, dmimo_o, dz, dmimo_z;
} consistent;

static void build_consistent(const ssmt_mimo_problem * pr, const ssmt_mimo_config * c, ssmt_rng * rng,
                             consistent * w) {
    const int64_t B = c->batch, S = c->seqlen, H = c->nheads, R = c->rank, N = c->dstate, P = c->headdim;
    const int64_t C = c->chunk, A = N / c->div, nc = (S + C - 1) / C;
    const int64_t sh_a[4] = {B, S, H, A}, sh_s[3] = {B, H, S}, sh_seg[5] = {B, H, nc, C, C};
    const int64_t sh_st[5] = {B, H, nc, N, P}, sh_qk[5] = {B, H, S, R, R}, sh_rp[4] = {B, H, R, P};
    w->theta = ssmt_alloc(SSM_DTYPE_F64, 4, sh_a);
    w->da_cs = ssmt_alloc(SSM_DTYPE_F64, 3, sh_s);
    w->da_cs_rev = ssmt_alloc(SSM_DTYPE_F64, 3, sh_s);
    w->segsum = ssmt_alloc(SSM_DTYPE_F64, 5, sh_seg);
    w->dout = ssmt_alloc(SSM_DTYPE_F64, 4, pr->v.t.shape);
    w->states = ssmt_alloc(SSM_DTYPE_F64, 5, sh_st);
    w->qk_dot = ssmt_alloc(SSM_DTYPE_F64, 5, sh_qk);
    w->dmimo_o = ssmt_alloc(SSM_DTYPE_F64, 4, sh_rp);
    w->dz = ssmt_alloc(SSM_DTYPE_F64, 4, pr->v.t.shape);
    w->dmimo_z = ssmt_alloc(SSM_DTYPE_F64, 4, sh_rp);
    ssmt_fill_normal(rng, &w->dout.t, 0.0, 1.0);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            for (int64_t a = 0; a < A; ++a) {
                double th = 0.0;
                for (int64_t t = 0; t < S; ++t) {
                    const double dt = ssmt_get(&pr->dt.t, (b * H + h) * S + t);
                    th += 3.14159265358979323846 * tanh(ssmt_get(&pr->angles.t, ((b * S + t) * H + h) * A + a)) * dt;
                    ssmt_set(&w->theta.t, ((b * S + t) * H + h) * A + a, th);
                }
            }
            for (int64_t cc = 0; cc < nc; ++cc) {
                double av[256];
                for (int64_t i = 0; i < C; ++i)
                    av[i] = cc * C + i < S ? ssmt_get(&pr->adt.t, (b * H + h) * S + cc * C + i) : 0.0;
                double acc = 0.0;
                for (int64_t i = 0; i < C; ++i) {
                    acc += av[i];
                    if (cc * C + i < S) ssmt_set(&w->da_cs.t, (b * H + h) * S + cc * C + i, acc);
                }
                acc = 0.0;
                for (int64_t i = C - 1; i >= 0; --i) {
                    if (cc * C + i < S) ssmt_set(&w->da_cs_rev.t, (b * H + h) * S + cc * C + i, acc);
                    acc += av[i];
                }
                for (int64_t i = 0; i < C; ++i) {
                    const int64_t base = (((b * H + h) * nc + cc) * C + i) * C;
                    double        sum = 0.0;
                    for (int64_t j = 0; j < C; ++j) ssmt_set(&w->segsum.t, base + j, 0.0);
                    for (int64_t j = i - 1; j >= 0; --j) {
                        sum += av[j + 1];
                        ssmt_set(&w->segsum.t, base + j, sum);
                    }
                }
            }
        }
}

static void free_consistent(consistent * w) {
    ssmt_host * all[] = {&w->theta, &w->da_cs, &w->da_cs_rev, &w->segsum, &w->dout,
                         &w->states, &w->qk_dot, &w->dmimo_o, &w->dz, &w->dmimo_z};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
}

/* ⟨dout, out⟩ of the reduced forward (F64 out). */
static double loss_of(const ssmt_mimo_problem * pr, const ssm_mamba3_mimo_params * p, const ssm_tensor * dout) {
    ssmt_host            out = ssmt_alloc(SSM_DTYPE_F64, 4, pr->v.t.shape);
    ssm_mamba3_mimo_args a = pr->args;
    a.out = out.t;
    memset(&a.final_angle_state, 0, sizeof a.final_angle_state);
    memset(&a.final_ssm_state, 0, sizeof a.final_ssm_state);
    memset(&a.final_k_state, 0, sizeof a.final_k_state);
    memset(&a.final_v_state, 0, sizeof a.final_v_state);
    double l = 0.0;
    if (ssm_mamba3_mimo(g_ref, p, &a) == SSM_STATUS_OK)
        for (int64_t i = 0; i < ssmt_numel(&out.t); ++i) l += ssmt_get(&out.t, i) * ssmt_get(dout, i);
    else
        l = NAN;
    ssmt_free(&out);
    return l;
}

/* Central differences of loss_of w.r.t. every element of t (in place, restored). */
static void fd_grad(const ssmt_mimo_problem * pr, const ssm_mamba3_mimo_params * p, const ssm_tensor * dout,
                    const ssm_tensor * t, const ssm_tensor * g) {
    const double h = 1e-6;
    for (int64_t i = 0; i < ssmt_numel(t); ++i) {
        const double x = ssmt_get(t, i);
        ssmt_set(t, i, x + h);
        const double lp = loss_of(pr, p, dout);
        ssmt_set(t, i, x - h);
        const double lm = loss_of(pr, p, dout);
        ssmt_set(t, i, x);
        ssmt_set(g, i, (lp - lm) / (2.0 * h));
    }
}

static void test_bwd_fwd_vs_forward(void) {
    for (int variant = 0; variant < 2; ++variant) {
        ssmt_mimo_config c = base_cfg();
        c.dtype = SSM_DTYPE_F64;
        c.param_dtype = SSM_DTYPE_F64;
        c.seqlen = variant == 0 ? 13 : 16;
        c.chunk = variant == 0 ? 4 : 8;
        c.rank = variant == 0 ? 3 : 2;
        c.div = variant == 0 ? 4 : 2;
        c.has_d = variant == 0;
        c.headdim = 4;
        c.dstate = 8;
        c.has_final = 1;
        ssmt_rng rng;
        ssmt_rng_seed(&rng, 5150 + (uint64_t)variant);
        ssmt_mimo_problem pr;
        if (ssmt_mimo_random_args(&rng, &c, &pr) != 0) continue;
        consistent w;
        build_consistent(&pr, &c, &rng, &w);
        ssm_mamba3_mimo_params pb = pr.params;
        ssm_mamba3_mimo_bwd_fwd_args b = {.dout = w.dout.t,
                                          .q = pr.q.t,
                                          .k = pr.k.t,
                                          .v = pr.v.t,
                                          .q_bias = pr.q_bias.t,
                                          .k_bias = pr.k_bias.t,
                                          .mimo_v = pr.mimo_v.t,
                                          .mimo_o = pr.mimo_o.t,
                                          .z = pr.z.t,
                                          .mimo_z = pr.mimo_z.t,
                                          .angles = w.theta.t,
                                          .da_cs = w.da_cs.t,
                                          .da_cs_rev = w.da_cs_rev.t,
                                          .dt = pr.dt.t,
                                          .trap = pr.trap.t,
                                          .d = pr.d.t,
                                          .segsum = w.segsum.t,
                                          .dmimo_o = w.dmimo_o.t,
                                          .states = w.states.t,
                                          .dz = w.dz.t,
                                          .dmimo_z = w.dmimo_z.t,
                                          .qk_dot = w.qk_dot.t};
        TEST_CHECK_STATUS(ssm_mamba3_mimo_bwd_fwd(g_ref, &pb, &b), SSM_STATUS_OK);
        const int64_t B = c.batch, S = c.seqlen, H = c.nheads, G = c.ngroups, R = c.rank, N = c.dstate;
        const int64_t P = c.headdim, C = c.chunk, nc = (S + C - 1) / C;
        /* qk_dot = q̄·k̄ */
        ssmt_host qk = ssmt_alloc(SSM_DTYPE_F64, 5, w.qk_dot.t.shape);
        for (int64_t bb = 0; bb < B; ++bb)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t t = 0; t < S; ++t)
                    for (int64_t r = 0; r < R; ++r)
                        for (int64_t r2 = 0; r2 < R; ++r2) {
                            const int64_t g = h / (H / G);
                            double        s = 0.0;
                            for (int64_t n = 0; n < N; ++n)
                                s += (ssmt_get(&pr.q.t, (((bb * S + t) * R + r) * G + g) * N + n) +
                                      ssmt_get(&pr.q_bias.t, (h * R + r) * N + n)) *
                                     (ssmt_get(&pr.k.t, (((bb * S + t) * R + r2) * G + g) * N + n) +
                                      ssmt_get(&pr.k_bias.t, (h * R + r2) * N + n));
                            ssmt_set(&qk.t, (((bb * H + h) * S + t) * R + r) * R + r2, s);
                        }
        ssmt_check_tol("(f) bwd_fwd qk_dot == q̄·k̄", &w.qk_dot.t, &qk.t, EXACT_TOL);
        ssmt_free(&qk);
        /* states[c] = pre-loaded state entering chunk c, from the prefix forward's finals */
        ssmt_host want = ssmt_alloc(SSM_DTYPE_F64, 5, w.states.t.shape);
        ssmt_fill_value(&want.t, 0.0);
        for (int64_t cc = 1; cc < nc; ++cc) {
            const int64_t        L = cc * C;
            ssm_mamba3_mimo_args a = time_slice(&pr.args, 0, L);
            fwd_outs             f = alloc_outs(&pr.args);
            ssmt_host            o = ssmt_alloc(SSM_DTYPE_F64, pr.out.t.ndim, pr.out.t.shape);
            set_outs(&a, &f);
            a.out = ssmt_slice(&o.t, 1, 0, L);
            TEST_CHECK_STATUS(ssm_mamba3_mimo(g_ref, &pr.params, &a), SSM_STATUS_OK);
            for (int64_t bb = 0; bb < B; ++bb)
                for (int64_t h = 0; h < H; ++h) {
                    const double dt1 = ssmt_get(&pr.dt.t, (bb * H + h) * S + L);
                    const double tr1 = ssmt_get(&pr.trap.t, (bb * H + h) * S + L);
                    const double sbar = dt1 / (1.0 + exp(tr1));
                    for (int64_t n = 0; n < N; ++n)
                        for (int64_t p = 0; p < P; ++p) {
                            double s = ssmt_get(&f.fs.t, ((bb * H + h) * P + p) * N + n);
                            for (int64_t r = 0; r < R; ++r)
                                s += sbar * ssmt_get(&f.fk.t, ((bb * R + r) * H + h) * N + n) *
                                     ssmt_get(&f.fv.t, (bb * H + h) * P + p) *
                                     ssmt_get(&pr.mimo_v.t, (h * R + r) * P + p);
                            ssmt_set(&want.t, ((((bb * H + h) * nc + cc) * N + n) * P) + p, s);
                        }
                }
            ssmt_free(&o);
            free_outs(&f);
        }
        ssmt_check_tol("(f) bwd_fwd states == pre-loaded chunk-entering states", &w.states.t, &want.t, EXACT_TOL);
        ssmt_free(&want);
        /* dmimo_o[b,h,r] = Σ_t out_rank[b,t,r,h]·dout[b,t,h] (per-rank forward, same z) */
        {
            const int64_t sh_raw[5] = {B, S, R, H, P};
            ssmt_host     raw = ssmt_alloc(SSM_DTYPE_F64, 5, sh_raw);
            ssm_mamba3_mimo_args a = pr.args;
            memset(&a.mimo_o, 0, sizeof a.mimo_o);
            memset(&a.final_angle_state, 0, sizeof a.final_angle_state);
            memset(&a.final_ssm_state, 0, sizeof a.final_ssm_state);
            memset(&a.final_k_state, 0, sizeof a.final_k_state);
            memset(&a.final_v_state, 0, sizeof a.final_v_state);
            a.out = raw.t;
            TEST_CHECK_STATUS(ssm_mamba3_mimo(g_ref, &pr.params, &a), SSM_STATUS_OK);
            ssmt_host dmo = ssmt_alloc(SSM_DTYPE_F64, 4, w.dmimo_o.t.shape);
            for (int64_t bb = 0; bb < B; ++bb)
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t r = 0; r < R; ++r)
                        for (int64_t p = 0; p < P; ++p) {
                            double s = 0.0;
                            for (int64_t t = 0; t < S; ++t)
                                s += ssmt_get(&raw.t, (((bb * S + t) * R + r) * H + h) * P + p) *
                                     ssmt_get(&w.dout.t, ((bb * S + t) * H + h) * P + p);
                            ssmt_set(&dmo.t, ((bb * H + h) * R + r) * P + p, s);
                        }
            ssmt_check_tol("(f) bwd_fwd dmimo_o == Σ_t out_rank·dout", &w.dmimo_o.t, &dmo.t, EXACT_TOL);
            ssmt_free(&dmo);
            ssmt_free(&raw);
        }
        /* dz, dmimo_z == finite differences of ⟨dout, out⟩ */
        {
            ssmt_host fz = ssmt_alloc(SSM_DTYPE_F64, 4, pr.z.t.shape);
            fd_grad(&pr, &pr.params, &w.dout.t, &pr.z.t, &fz.t);
            ssmt_check_tol("(f) bwd_fwd dz == finite differences", &w.dz.t, &fz.t, FD_TOL);
            ssmt_host fmz = ssmt_alloc(SSM_DTYPE_F64, 3, pr.mimo_z.t.shape);
            fd_grad(&pr, &pr.params, &w.dout.t, &pr.mimo_z.t, &fmz.t);
            ssmt_host sum = ssmt_alloc(SSM_DTYPE_F64, 3, pr.mimo_z.t.shape);
            const int64_t nrp = H * R * P;
            for (int64_t i = 0; i < nrp; ++i) {
                double s = 0.0;
                for (int64_t bb = 0; bb < B; ++bb) s += ssmt_get(&w.dmimo_z.t, bb * nrp + i);
                ssmt_set(&sum.t, i, s);
            }
            ssmt_check_tol("(f) bwd_fwd Σ_b dmimo_z == finite differences", &sum.t, &fmz.t, FD_TOL);
            ssmt_free(&fz);
            ssmt_free(&fmz);
            ssmt_free(&sum);
        }
        free_consistent(&w);
        ssmt_mimo_problem_free(&pr);
    }
}

/* The bf16 mode on a random seed-distribution problem stays near the exact mode (the seed's
 * expected gap ~6e-3) and writes every output finite. */
static void test_bf16_mode_random(void) {
    ssmt_mimo_config c = base_cfg();
    c.dtype = SSM_DTYPE_BF16;
    c.seqlen = 21;
    c.rank = 4;
    c.chunk = 6;
    c.dstate = 32;
    c.headdim = 16;
    c.strided = 1;
    for (int variant = 0; variant < 2; ++variant) {
        c.reduce_o = variant == 0;
        ssmt_rng rng;
        ssmt_rng_seed(&rng, 61 + (uint64_t)variant);
        ssmt_mimo_bwd_fwd_problem ex, bf;
        if (ssmt_mimo_random_bwd_fwd(&rng, &c, &ex) != 0) continue;
        ssmt_rng_seed(&rng, 61 + (uint64_t)variant);
        if (ssmt_mimo_random_bwd_fwd(&rng, &c, &bf) != 0) {
            ssmt_mimo_bwd_fwd_free(&ex);
            continue;
        }
        TEST_CHECK_STATUS(ssm_mamba3_mimo_bwd_fwd(g_ref, &ex.params, &ex.args), SSM_STATUS_OK);
        TEST_CHECK_STATUS(ssm_mamba3_mimo_bwd_fwd(g_bf16, &bf.params, &bf.args), SSM_STATUS_OK);
        const ssmt_bar bar = {2e-2, 1.0};
        ssmt_check_within("bf16 mode vs exact (random, seed dist.) states", &bf.states.t, &ex.states.t, bar);
        ssmt_check_within("bf16 mode vs exact (random, seed dist.) qk_dot", &bf.qk_dot.t, &ex.qk_dot.t, bar);
        ssmt_check_within("bf16 mode vs exact (random, seed dist.) dz", &bf.dz.t, &ex.dz.t, bar);
        ssmt_check_within("bf16 mode vs exact (random, seed dist.) dmimo_z", &bf.dmimo_z.t, &ex.dmimo_z.t, bar);
        if (c.reduce_o)
            ssmt_check_within("bf16 mode vs exact (random, seed dist.) dmimo_o", &bf.dmimo_o.t, &ex.dmimo_o.t, bar);
        ssmt_mimo_bwd_fwd_free(&ex);
        ssmt_mimo_bwd_fwd_free(&bf);
    }
}

int main(void) {
    g_ref = ssmt_ref_ctx_or_exit(SSM_REF_EXACT);
    g_bf16 = ssmt_ref_ctx_or_exit(SSM_REF_UPSTREAM_BF16);
    test_data();
    test_recurrent_and_chunks();
    test_split_varlen();
    test_steps();
    test_step_indices();
    test_bwd_fwd_vs_forward();
    test_bf16_mode_random();
    ssm_context_free(g_ref);
    ssm_context_free(g_bf16);
    TEST_EXIT();
}
