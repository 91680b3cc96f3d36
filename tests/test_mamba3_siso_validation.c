/*
 * test_mamba3_siso_validation.c — argument validation of the six Mamba-3 SISO entry points.
 * For each rule: the expected status, a non-empty last error naming the operator (and,
 * where given, the argument), and every buffer of the fixture (inputs and the NaN-poisoned
 * outputs) byte-identical to its content before the call. Each case runs with ctx NULL
 * (CPU backend) and with a REF-backend context: validation comes before dispatch. Each
 * operator's unmodified fixture must succeed on REF, so the failures come from the
 * mutation. In-place step updates (final_* exactly the input view) must succeed.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

enum { OP_ANGLE, OP_ANGLE_BWD, OP_FWD, OP_SISO, OP_BWD, OP_STEP };
static const char * const op_names[] = {"mamba3_angle_cumsum", "mamba3_angle_cumsum_bwd", "mamba3_siso_fwd",
                                        "mamba3_siso",         "mamba3_siso_bwd",         "mamba3_siso_step"};

static ssm_context * g_ref;
static ssm_context * g_cuda; /* may be NULL */
static ssmt_rng      g_rng;

/* Every buffer a call could touch, for the byte snapshots. */
typedef ssmt_bufset fixture;

static ssm_status call_op(int op, ssm_context * ctx, const ssm_mamba3_params * p, const void * args) {
    switch (op) {
        case OP_ANGLE: return ssm_mamba3_angle_cumsum(ctx, p, args);
        case OP_ANGLE_BWD: return ssm_mamba3_angle_cumsum_bwd(ctx, p, args);
        case OP_FWD: return ssm_mamba3_siso_fwd(ctx, p, args);
        case OP_SISO: return ssm_mamba3_siso(ctx, p, args);
        case OP_BWD: return ssm_mamba3_siso_bwd(ctx, p, args);
        default: return ssm_mamba3_siso_step(ctx, p, args);
    }
}

static ssm_mamba3_params g_params;

/* One invalid call with ctx NULL and REF: status, message, untouched memory. */
static void expect_p(fixture * f, int op, const ssm_mamba3_params * p, const void * args, ssm_status want,
                     const char * what, const char * must_mention) {
    for (int k = 0; k < 2; ++k) {
        ssm_context * ctx = k == 0 ? NULL : g_ref;
        void *        snaps[SSMT_BUFSET_MAX];
        ssmt_bufset_snapshot(f, snaps);
        const ssm_status got = call_op(op, ctx, p, args);
        const char *     msg = ssm_context_last_error(ctx);
        ssmt_check_refusal(op_names[op], what, k ? "REF" : "NULL", got, want, msg, op_names[op], SSMT_NAME_ANYWHERE,
                           must_mention);
        ssmt_bufset_check_unchanged(f, snaps, op_names[op], what);
        if (k == 0 && got == want) printf("ok  %-24s %-46s %s\n", op_names[op], what, msg);
    }
}

static void expect(fixture * f, int op, const void * args, ssm_status want, const char * what, const char * mention) {
    expect_p(f, op, &g_params, args, want, what, mention);
}

static void expect_ok(int op, const void * args, const char * what) {
    const ssm_status st = call_op(op, g_ref, &g_params, args);
    TEST_CHECK(st == SSM_STATUS_OK, "%s / %s: the valid call fails: %s", op_names[op], what,
               ssm_context_last_error(g_ref));
    if (st == SSM_STATUS_OK) printf("ok  %-24s %-46s (valid call succeeds)\n", op_names[op], what);
}

/* One case of a test: `a` = `ok`, then the mutation (an expression), then one expect() on the
 * test's fixture `f` and operator `op`. */
#define CASE(mutation, want, what, mention)     \
    do {                                        \
        a = ok;                                 \
        mutation;                               \
        expect(f, op, &a, want, what, mention); \
    } while (0)

/* params NULL / size / chunk range, args NULL, CUDA backend. */
static void params_rules(fixture * f, int op, const void * args) {
    expect_p(f, op, NULL, args, SSM_STATUS_INVALID_ARGUMENT, "params NULL", "params");
    expect_p(f, op, &g_params, NULL, SSM_STATUS_INVALID_ARGUMENT, "args NULL", "args");
    ssm_mamba3_params q = g_params;
    q.size = sizeof q - 1;
    expect_p(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "params.size too small", "size");
    q = g_params;
    q.chunk_size = 0;
    expect_p(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "chunk 0", "chunk_size");
    q.chunk_size = 1025;
    expect_p(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "chunk 1025", "chunk_size");
    if (g_cuda != NULL) {
        const ssm_status got = call_op(op, g_cuda, &g_params, args);
        ssmt_expect_cuda_refusal(op_names[op], g_cuda, got);
    }
}

/* An I32 cu_seqlens tensor owned by the fixture. */
static ssm_tensor make_cu(fixture * f, ssmt_host * h, const int64_t * vals, int64_t n) {
    const int64_t sh[1] = {n};
    *h = ssmt_alloc(SSM_DTYPE_I32, 1, sh);
    for (int64_t i = 0; i < n; ++i) ssmt_set(&h->t, i, (double)vals[i]);
    ssmt_bufset_add(f, h);
    return h->t;
}

/* cu_seqlens rules on an op whose args hold cu_seqlens at *cu (batch 1, S = total). */
static void cu_rules(fixture * f, int op, void * args, ssm_tensor * cu, int64_t S, ssmt_host * hs) {
    const ssm_tensor saved = *cu;
    const int64_t    c0[] = {1, 5, S}, c1[] = {0, 6, 5, S}, c2[] = {0, 5, S - 1}, c3[] = {0};
    *cu = make_cu(f, &hs[0], c0, 3);
    expect(f, op, args, SSM_STATUS_INVALID_ARGUMENT, "cu_seqlens[0] != 0", "cu_seqlens");
    *cu = make_cu(f, &hs[1], c1, 4);
    expect(f, op, args, SSM_STATUS_INVALID_ARGUMENT, "cu_seqlens decreasing", "non-decreasing");
    *cu = make_cu(f, &hs[2], c2, 3);
    expect(f, op, args, SSM_STATUS_INVALID_ARGUMENT, "cu_seqlens[last] != S", "must equal S");
    *cu = make_cu(f, &hs[3], c3, 1);
    expect(f, op, args, SSM_STATUS_INVALID_SHAPE, "cu_seqlens of length 1", "cu_seqlens");
    *cu = ssmt_retyped(&saved, SSM_DTYPE_F32);
    expect(f, op, args, SSM_STATUS_INVALID_LAYOUT, "cu_seqlens f32", "cu_seqlens");
    *cu = ssmt_reshaped(&saved, 0, saved.shape[0] + 0);
    cu->ndim = 2;
    expect(f, op, args, SSM_STATUS_INVALID_SHAPE, "cu_seqlens 2-D", "cu_seqlens");
    *cu = saved;
}

/* ---- fixtures ------------------------------------------------------------------------------ */

typedef struct fixtures {
    ssmt_mamba3_config      cfg, vcfg;
    ssmt_mamba3_problem     pr, vpr; /* batched with states; varlen with states */
    ssmt_mamba3_bwd_problem bw, vbw;
    ssmt_host               cu_bad[8];
    fixture                 f;
} fixtures;

static const int64_t k_lens[] = {5, 0, 7};

static int fixtures_make(fixtures * x) {
    memset(x, 0, sizeof *x);
    ssmt_mamba3_config_init(&x->cfg);
    x->cfg.seqlen = 20;
    x->cfg.chunk = 8;
    x->cfg.has_states = 1;
    x->cfg.has_final = 1;
    x->vcfg = x->cfg;
    x->vcfg.nseq = 3;
    x->vcfg.seqlens = k_lens;
    if (ssmt_mamba3_random_args(&g_rng, &x->cfg, &x->pr) != 0) return -1;
    if (ssmt_mamba3_random_args(&g_rng, &x->vcfg, &x->vpr) != 0) return -1;
    if (ssmt_mamba3_bwd_alloc(&g_rng, &x->cfg, &x->pr, 1, &x->bw) != 0) return -1;
    if (ssmt_mamba3_bwd_alloc(&g_rng, &x->vcfg, &x->vpr, 1, &x->vbw) != 0) return -1;
    ssmt_bufset_add_members(&x->f, &x->pr.q, &x->pr.final_v_state);
    ssmt_bufset_add_members(&x->f, &x->vpr.q, &x->vpr.final_v_state);
    ssmt_bufset_add_members(&x->f, &x->bw.dout, &x->bw.dv_state);
    ssmt_bufset_add_members(&x->f, &x->vbw.dout, &x->vbw.dv_state);
    return 0;
}

static void fixtures_free(fixtures * x) {
    ssmt_mamba3_problem_free(&x->pr);
    ssmt_mamba3_problem_free(&x->vpr);
    ssmt_mamba3_bwd_free(&x->bw);
    ssmt_mamba3_bwd_free(&x->vbw);
    for (int i = 0; i < 8; ++i) ssmt_free(&x->cu_bad[i]);
}

/* ---- angle cumsum ---------------------------------------------------------------------------- */

static void test_angle(fixtures * x) {
    const int                          op = OP_ANGLE;
    fixture *                          f = &x->f;
    const ssm_mamba3_angle_cumsum_args ok = x->pr.angle_args;
    expect_ok(op, &ok, "batched");
    expect_ok(op, &x->vpr.angle_args, "varlen");
    params_rules(f, op, &ok);
    ssm_mamba3_angle_cumsum_args a;
    CASE(a.angles = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "angles absent", "angles");
    CASE(a.angles = ssmt_reshaped(&ok.angles, 1, 19), SSM_STATUS_INVALID_SHAPE, "dt S differs from angles S", "dt");
    CASE(a.angles.ndim = 3, SSM_STATUS_INVALID_SHAPE, "angles 3-D", "angles");
    CASE(a.dt = ssmt_retyped(&ok.dt, SSM_DTYPE_I32), SSM_STATUS_INVALID_LAYOUT, "dt i32", "dt");
    CASE(a.angle_state = ssmt_reshaped(&ok.angle_state, 2, 3), SSM_STATUS_INVALID_SHAPE, "angle_state A wrong",
         "angle_state");
    CASE(a.angles_cumsum = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "angles_cumsum absent", "angles_cumsum");
    CASE(a.angles_cumsum.strides[2] = 0, SSM_STATUS_INVALID_LAYOUT, "angles_cumsum stride 0", "angles_cumsum");
    CASE((a.angles_cumsum.data = ok.angles.data, a.angles_cumsum.dtype = ok.angles.dtype), SSM_STATUS_INVALID_LAYOUT,
         "angles_cumsum overlaps angles", "overlaps");
    CASE(a.final_angle_state.data = ok.angles_cumsum.data, SSM_STATUS_INVALID_LAYOUT, "final overlaps angles_cumsum",
         "overlaps");
    CASE(a.final_angle_state.data = ok.angle_state.data, SSM_STATUS_INVALID_LAYOUT, "final overlaps angle_state",
         "overlaps");
    CASE(a.cu_seqlens = x->vpr.cu_seqlens.t, SSM_STATUS_INVALID_ARGUMENT, "cu_seqlens with B=2", "must be 1");
    ssm_mamba3_angle_cumsum_args v = x->vpr.angle_args;
    cu_rules(f, op, &v, &v.cu_seqlens, x->vpr.args.q.shape[1], x->cu_bad);
    v = x->vpr.angle_args;
    v.angle_state = x->pr.angle_state.t; /* (2, H, A) but nseq = 3 */
    expect(f, op, &v, SSM_STATUS_INVALID_SHAPE, "varlen angle_state rows != nseq", "angle_state");
}

static void test_angle_bwd(fixtures * x) {
    const int                        op = OP_ANGLE_BWD;
    fixture *                        f = &x->f;
    ssm_mamba3_angle_cumsum_bwd_args ok = {.dangles_cumsum = x->pr.theta.t,
                                           .dfinal_angle_state = x->bw.dfinal_angle_state.t,
                                           .angles = x->pr.angles.t,
                                           .dt = x->pr.dt.t,
                                           .dangles = x->bw.dangles.t,
                                           .ddt = x->bw.ddt.t,
                                           .dangle_state = x->bw.dangle_state.t};
    /* the valid call writes its outputs; run it first and re-poison */
    expect_ok(op, &ok, "batched");
    ssmt_poison(&ok.dangles);
    ssmt_poison(&ok.ddt);
    ssmt_poison(&ok.dangle_state);
    params_rules(f, op, &ok);
    ssm_mamba3_angle_cumsum_bwd_args a;
    CASE(a.dangles_cumsum = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "dangles_cumsum absent", "dangles_cumsum");
    CASE(a.dangles_cumsum = ssmt_reshaped(&ok.dangles_cumsum, 3, 5), SSM_STATUS_INVALID_SHAPE, "dangles_cumsum A wrong",
         "dangles_cumsum");
    CASE(a.dfinal_angle_state = ssmt_reshaped(&ok.dfinal_angle_state, 0, 1), SSM_STATUS_INVALID_SHAPE,
         "dfinal_angle_state rows wrong", "dfinal_angle_state");
    CASE(a.dangles = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "dangles absent", "dangles");
    CASE(a.ddt = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "ddt absent", "ddt");
    CASE(a.ddt = ssmt_reshaped(&ok.ddt, 2, 19), SSM_STATUS_INVALID_SHAPE, "ddt S wrong", "ddt");
    CASE((a.dangles.data = ok.angles.data, a.dangles.dtype = ok.angles.dtype), SSM_STATUS_INVALID_LAYOUT,
         "dangles overlaps angles", "overlaps");
    CASE(a.dangle_state.data = ok.ddt.data, SSM_STATUS_INVALID_LAYOUT, "dangle_state overlaps ddt", "overlaps");
    CASE(a.cu_seqlens = ssmt_retyped(&x->vpr.cu_seqlens.t, SSM_DTYPE_F16), SSM_STATUS_INVALID_LAYOUT, "cu_seqlens f16",
         "cu_seqlens");
}

/* ---- the sequence forwards ---------------------------------------------------------------- */

/* Rules shared by siso_fwd and siso: the q/k/v/scalar/bias/angles/d/z shapes and outputs
 * (CASEs on the caller's f, op, a, ok; x the fixtures). */
#define SEQ_RULES()                                                                                                 \
    do {                                                                                                            \
        CASE(a.q = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "q absent", "q");                                    \
        CASE(a.k = ssmt_reshaped(&ok.k, 3, 8), SSM_STATUS_INVALID_SHAPE, "k shape != q shape", "k");                \
        CASE((a.q = ssmt_reshaped(&ok.q, 2, 3), a.k = ssmt_reshaped(&ok.k, 2, 3)), SSM_STATUS_INVALID_SHAPE,        \
             "H % Hq != 0", "multiple");                                                                            \
        CASE((a.q = ssmt_reshaped(&ok.q, 3, 15), a.k = ssmt_reshaped(&ok.k, 3, 15)), SSM_STATUS_INVALID_SHAPE,      \
             "K odd", "even");                                                                                      \
        CASE(a.v = ssmt_reshaped(&ok.v, 3, 0), SSM_STATUS_INVALID_SHAPE, "V = 0", "V");                             \
        CASE(a.v = ssmt_reshaped(&ok.v, 1, 19), SSM_STATUS_INVALID_SHAPE, "v S != q S", "v");                       \
        CASE(a.angles = ssmt_reshaped(&ok.angles, 3, 9), SSM_STATUS_INVALID_SHAPE, "A > K/2", "K/2");               \
        CASE(a.adt = ssmt_reshaped(&ok.adt, 2, 19), SSM_STATUS_INVALID_SHAPE, "adt S wrong", "adt");                \
        CASE(a.dt = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "dt absent", "dt");                                 \
        CASE(a.trap = ssmt_reshaped(&ok.trap, 1, 3), SSM_STATUS_INVALID_SHAPE, "trap H wrong", "trap");             \
        CASE(a.q_bias = ssmt_reshaped(&ok.q_bias, 1, 8), SSM_STATUS_INVALID_SHAPE, "q_bias K wrong", "q_bias");     \
        CASE(a.k_bias = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "k_bias absent", "k_bias");                     \
        CASE(a.d = ssmt_reshaped(&ok.d, 0, 3), SSM_STATUS_INVALID_SHAPE, "d shape wrong", "d");                     \
        CASE(a.z = ssmt_reshaped(&ok.z, 3, 4), SSM_STATUS_INVALID_SHAPE, "z shape wrong", "z");                     \
        CASE(a.z = ssmt_retyped(&ok.z, SSM_DTYPE_I64), SSM_STATUS_INVALID_LAYOUT, "z i64", "z");                    \
        CASE(a.ssm_state = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "ssm_state missing from the states",         \
             "initial states");                                                                                     \
        CASE(a.k_state = ssmt_reshaped(&ok.k_state, 2, 8), SSM_STATUS_INVALID_SHAPE, "k_state K wrong", "k_state"); \
        CASE(a.out = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "out absent", "out");                              \
        CASE(a.out = ssmt_reshaped(&ok.out, 3, 4), SSM_STATUS_INVALID_SHAPE, "out V wrong", "out");                 \
        CASE(a.out.strides[0] = 0, SSM_STATUS_INVALID_LAYOUT, "out stride 0", "out");                               \
        CASE(a.out.data = ok.v.data, SSM_STATUS_INVALID_LAYOUT, "out overlaps v", "overlaps");                      \
        CASE(a.final_k_state.data = ok.final_ssm_state.data, SSM_STATUS_INVALID_LAYOUT,                             \
             "final_k_state overlaps final_ssm_state", "overlaps");                                                 \
        CASE(a.final_v_state.data = ok.v_state.data, SSM_STATUS_INVALID_LAYOUT, "final_v_state overlaps v_state",   \
             "overlaps");                                                                                           \
        CASE(a.final_ssm_state = ssmt_reshaped(&ok.final_ssm_state, 0, 3), SSM_STATUS_INVALID_SHAPE,                \
             "final_ssm_state rows wrong", "final_ssm_state");                                                      \
        CASE(a.cu_seqlens = x->vpr.cu_seqlens.t, SSM_STATUS_INVALID_ARGUMENT, "cu_seqlens with B=2", "must be 1");  \
    } while (0)

/* chunk_states (the forwards' output, the backward's input; slot is its field in ok): one row per
 * chunk of chunk_size tokens of each sequence, `rows` in all. F32 and F64 accepted (on REF: the
 * CPU backend writes them only for a chunk_size that is a multiple of 32), a 16-bit one, a row
 * too few or too many and V, K swapped refused. */
static void chunk_states_rules(fixture * f, int op, const void * ok, const ssm_tensor * slot, size_t size, int64_t rows,
                               const ssm_tensor * v, int64_t K, const char * tag) {
    union {
        ssm_mamba3_siso_args     fwd;
        ssm_mamba3_siso_fwd_args core;
        ssm_mamba3_siso_bwd_args bwd;
    } u;
    unsigned char *  a = (unsigned char *)&u;
    const size_t     off = (size_t)((const unsigned char *)slot - (const unsigned char *)ok);
    const int64_t    H = v->shape[2], V = v->shape[3];
    const int64_t    sh[4] = {rows + 1, H, V, K}, swapped[4] = {rows, H, K, V};
    ssmt_host        c32 = ssmt_alloc(SSM_DTYPE_F32, 4, sh), c64 = ssmt_alloc(SSM_DTYPE_F64, 4, sh);
    ssmt_host        cvk = ssmt_alloc(SSM_DTYPE_F32, 4, swapped);
    const ssm_tensor c32r = ssmt_reshaped(&c32.t, 0, rows);
    const struct {
        ssm_tensor   t;
        ssm_status   want;
        const char * what;
    } cases[] = {{c32r, SSM_STATUS_OK, "chunk_states f32"},
                 {ssmt_reshaped(&c64.t, 0, rows), SSM_STATUS_OK, "chunk_states f64"},
                 {ssmt_retyped(&c32r, SSM_DTYPE_BF16), SSM_STATUS_INVALID_LAYOUT, "chunk_states bf16"},
                 {ssmt_reshaped(&c32.t, 0, rows - 1), SSM_STATUS_INVALID_SHAPE, "chunk_states a row too few"},
                 {c32.t, SSM_STATUS_INVALID_SHAPE, "chunk_states a row too many"},
                 {cvk.t, SSM_STATUS_INVALID_SHAPE, "chunk_states (NCS, H, K, V)"}};
    TEST_CHECK(c32.t.data && c64.t.data && cvk.t.data, "chunk_states: allocation failed");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && c32.t.data && c64.t.data && cvk.t.data; ++i) {
        char what[120];
        snprintf(what, sizeof what, "%s, %s", cases[i].what, tag);
        memcpy(a, ok, size);
        memcpy(a + off, &cases[i].t, sizeof(ssm_tensor));
        if (cases[i].want == SSM_STATUS_OK)
            expect_ok(op, a, what);
        else
            expect(f, op, a, cases[i].want, what, "chunk_states");
    }
    ssmt_free(&c32), ssmt_free(&c64), ssmt_free(&cvk);
}

static void test_siso_fwd(fixtures * x) {
    const int                      op = OP_FWD;
    fixture *                      f = &x->f;
    const ssm_mamba3_siso_fwd_args ok = x->pr.fwd_args;
    expect_ok(op, &ok, "batched");
    expect_ok(op, &x->vpr.fwd_args, "varlen");
    params_rules(f, op, &ok);
    ssm_mamba3_siso_fwd_args a;
    SEQ_RULES();
    a = ok;
    a.ssm_state = a.k_state = a.v_state = ssmt_absent();
    expect_ok(op, &a, "no states");
    ssm_mamba3_siso_fwd_args v = x->vpr.fwd_args;
    cu_rules(f, op, &v, &v.cu_seqlens, x->vpr.args.q.shape[1], x->cu_bad + 4);
    chunk_states_rules(f, op, &ok, &ok.chunk_states, sizeof ok, 6, &ok.v, ok.q.shape[3], "batched");
    v = x->vpr.fwd_args;
    chunk_states_rules(f, op, &v, &v.chunk_states, sizeof v, 2, &v.v, v.q.shape[3], "varlen");
}

/* pregate_y (the forward's output, the backward's input; slot is its field in ok, v the shape it
 * takes): F32 and F64 accepted, a 16-bit one and a wrong shape refused. */
static void pregate_rules(fixture * f, int op, const void * ok, const ssm_tensor * slot, size_t size,
                          const ssm_tensor * v) {
    union {
        ssm_mamba3_siso_args     fwd;
        ssm_mamba3_siso_bwd_args bwd;
    } u;
    unsigned char * a = (unsigned char *)&u;
    const size_t  off = (size_t)((const unsigned char *)slot - (const unsigned char *)ok);
    ssmt_host     y32 = ssmt_alloc(SSM_DTYPE_F32, 4, v->shape), y64 = ssmt_alloc(SSM_DTYPE_F64, 4, v->shape);
    const struct {
        ssm_tensor   t;
        ssm_status   want;
        const char * what;
    } cases[] = {{y32.t, SSM_STATUS_OK, "pregate_y f32"},
                 {y64.t, SSM_STATUS_OK, "pregate_y f64"},
                 {ssmt_retyped(&y32.t, SSM_DTYPE_BF16), SSM_STATUS_INVALID_LAYOUT, "pregate_y bf16"},
                 {ssmt_reshaped(&y32.t, 3, v->shape[3] - 1), SSM_STATUS_INVALID_SHAPE, "pregate_y V wrong"}};
    TEST_CHECK(y32.t.data && y64.t.data, "pregate_y: allocation failed");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && y32.t.data && y64.t.data; ++i) {
        memcpy(a, ok, size);
        memcpy(a + off, &cases[i].t, sizeof(ssm_tensor));
        if (cases[i].want == SSM_STATUS_OK)
            expect_ok(op, a, cases[i].what);
        else
            expect(f, op, a, cases[i].want, cases[i].what, "pregate_y");
    }
    ssmt_free(&y32), ssmt_free(&y64);
}

static void test_siso(fixtures * x) {
    const int                  op = OP_SISO;
    fixture *                  f = &x->f;
    const ssm_mamba3_siso_args ok = x->pr.args;
    expect_ok(op, &ok, "batched");
    expect_ok(op, &x->vpr.args, "varlen with an empty sequence");
    params_rules(f, op, &ok);
    ssm_mamba3_siso_args a;
    SEQ_RULES();
    CASE(a.angle_state = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "angle_state missing from the states",
         "initial states");
    CASE(a.angle_state = ssmt_reshaped(&ok.angle_state, 2, 3), SSM_STATUS_INVALID_SHAPE, "angle_state A wrong",
         "angle_state");
    CASE(a.final_angle_state.data = ok.out.data, SSM_STATUS_INVALID_LAYOUT, "final_angle_state overlaps out",
         "overlaps");
    a = ok;
    a.angles.strides[2] = 0; /* head broadcast of the raw angles is allowed */
    expect_ok(op, &a, "angles stride 0 over H");
    a = ok;
    a.angle_state = a.ssm_state = a.k_state = a.v_state = ssmt_absent();
    expect_ok(op, &a, "no states");
    pregate_rules(f, op, &ok, &ok.pregate_y, sizeof ok, &ok.v);
    chunk_states_rules(f, op, &ok, &ok.chunk_states, sizeof ok, 6, &ok.v, ok.q.shape[3], "batched");
    const ssm_mamba3_siso_args v = x->vpr.args;
    chunk_states_rules(f, op, &v, &v.chunk_states, sizeof v, 2, &v.v, v.q.shape[3], "varlen with an empty sequence");
}

/* ---- backward -------------------------------------------------------------------------------- */

static void test_siso_bwd(fixtures * x) {
    const int                      op = OP_BWD;
    fixture *                      f = &x->f;
    const ssm_mamba3_siso_bwd_args ok = x->bw.args;
    expect_ok(op, &ok, "batched");
    expect_ok(op, &x->vbw.args, "varlen");
    /* the valid calls wrote the gradients: poison them again for the byte comparisons */
    ssmt_host * outs[] = {&x->bw.dq,    &x->bw.dk,           &x->bw.dv,         &x->bw.dadt,     &x->bw.ddt,
                          &x->bw.dtrap, &x->bw.dq_bias,      &x->bw.dk_bias,    &x->bw.dangles,  &x->bw.dd,
                          &x->bw.dz,    &x->bw.dangle_state, &x->bw.dssm_state, &x->bw.dk_state, &x->bw.dv_state};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; ++i) ssmt_poison(&outs[i]->t);
    params_rules(f, op, &ok);
    ssm_mamba3_siso_bwd_args a;
    CASE(a.dout = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "dout absent", "dout");
    CASE(a.dout = ssmt_reshaped(&ok.dout, 3, 4), SSM_STATUS_INVALID_SHAPE, "dout V wrong", "dout");
    CASE(a.dfinal_ssm_state = ssmt_reshaped(&ok.dfinal_ssm_state, 3, 8), SSM_STATUS_INVALID_SHAPE,
         "dfinal_ssm_state K wrong", "dfinal_ssm_state");
    CASE(a.dfinal_angle_state = ssmt_retyped(&ok.dfinal_angle_state, SSM_DTYPE_I32), SSM_STATUS_INVALID_LAYOUT,
         "dfinal_angle_state i32", "dfinal_angle_state");
    CASE(a.d = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "dd without d", "dd");
    CASE(a.z = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "dz without z", "dz");
    CASE(a.angle_state = a.ssm_state = a.k_state = a.v_state = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT,
         "state gradients without states", "dangle_state");
    a.dangle_state = ssmt_absent();
    expect(f, op, &a, SSM_STATUS_INVALID_ARGUMENT, "dssm_state without states", "dssm_state");
    CASE(a.k_state = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "k_state missing from the states", "initial states");
    CASE(a.dq = ssmt_reshaped(&ok.dq, 2, 4), SSM_STATUS_INVALID_SHAPE, "dq Hq wrong", "dq");
    CASE(a.dangles = ssmt_reshaped(&ok.dangles, 3, 2), SSM_STATUS_INVALID_SHAPE, "dangles A wrong", "dangles");
    CASE(a.dd = ssmt_reshaped(&ok.dd, 0, 2), SSM_STATUS_INVALID_SHAPE, "dd H wrong", "dd");
    CASE(a.dq_bias.strides[1] = 0, SSM_STATUS_INVALID_LAYOUT, "dq_bias stride 0", "dq_bias");
    CASE((a.dv.data = ok.dout.data, a.dv.dtype = ok.dout.dtype), SSM_STATUS_INVALID_LAYOUT, "dv overlaps dout",
         "overlaps");
    CASE(a.dk.data = ok.dq.data, SSM_STATUS_INVALID_LAYOUT, "dk overlaps dq", "overlaps");
    CASE((a.dssm_state.data = ok.dfinal_ssm_state.data, a.dssm_state.dtype = ok.dfinal_ssm_state.dtype),
         SSM_STATUS_INVALID_LAYOUT, "dssm_state overlaps dfinal_ssm_state", "overlaps");
    CASE(a.cu_seqlens = x->vpr.cu_seqlens.t, SSM_STATUS_INVALID_ARGUMENT, "cu_seqlens with B=2", "must be 1");
    /* every gradient output absent, no dfinal: valid */
    a = ok;
    a.dq = a.dk = a.dv = a.dadt = a.ddt = a.dtrap = a.dq_bias = a.dk_bias = a.dangles = a.dd = a.dz = ssmt_absent();
    a.dangle_state = a.dssm_state = a.dk_state = a.dv_state = ssmt_absent();
    a.dfinal_angle_state = a.dfinal_ssm_state = a.dfinal_k_state = a.dfinal_v_state = ssmt_absent();
    expect_ok(op, &a, "no gradient outputs, no dfinal");
    pregate_rules(f, op, &ok, &ok.pregate_y, sizeof ok, &ok.v);
    chunk_states_rules(f, op, &ok, &ok.chunk_states, sizeof ok, 6, &ok.v, ok.q.shape[3], "batched");
    const ssm_mamba3_siso_bwd_args v = x->vbw.args;
    chunk_states_rules(f, op, &v, &v.chunk_states, sizeof v, 2, &v.v, v.q.shape[3], "varlen");
}

/* ---- step ------------------------------------------------------------------------------------ */

static void test_step(void) {
    ssmt_mamba3_config c;
    ssmt_mamba3_config_init(&c);
    c.batch = 4;
    ssmt_mamba3_step_problem pr, pi;
    if (ssmt_mamba3_random_step(&g_rng, &c, 4, 0, &pr) != 0 || ssmt_mamba3_random_step(&g_rng, &c, 6, 1, &pi) != 0) {
        TEST_CHECK(0, "step fixtures");
        return;
    }
    const int op = OP_STEP;
    fixture   fx;
    memset(&fx, 0, sizeof fx);
    fixture * f = &fx;
    ssmt_bufset_add_members(f, &pr.q, &pr.final_v_state);
    ssmt_bufset_add_members(f, &pi.q, &pi.final_v_state);
    const ssm_mamba3_siso_step_args ok = pr.args, oki = pi.args;
    expect_ok(op, &ok, "unindexed");
    expect_ok(op, &oki, "indexed with padding");
    params_rules(f, op, &ok);
    ssm_mamba3_siso_step_args a;
    CASE((a.q = ssmt_reshaped(&ok.q, 1, 3), a.k = ssmt_reshaped(&ok.k, 1, 3)), SSM_STATUS_INVALID_SHAPE, "H % Hq != 0",
         "multiple");
    CASE(a.q.ndim = 4, SSM_STATUS_INVALID_SHAPE, "q 4-D", "q");
    CASE(a.angles = ssmt_reshaped(&ok.angles, 2, 9), SSM_STATUS_INVALID_SHAPE, "A > K/2", "K/2");
    CASE(a.adt = ssmt_reshaped(&ok.adt, 1, 3), SSM_STATUS_INVALID_SHAPE, "adt H wrong", "adt");
    CASE(a.z = ssmt_reshaped(&ok.z, 2, 3), SSM_STATUS_INVALID_SHAPE, "z V wrong", "z");
    CASE(a.angle_state = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "angle_state absent", "angle_state");
    CASE(a.v_state = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "v_state absent", "v_state");
    CASE(a.ssm_state = ssmt_reshaped(&ok.ssm_state, 0, 3), SSM_STATUS_INVALID_SHAPE, "ssm_state slots differ",
         "ssm_state");
    /* slots != B without indices */
    a = oki;
    a.state_batch_indices = ssmt_absent();
    expect(f, op, &a, SSM_STATUS_INVALID_SHAPE, "slots != B without indices", "slots");
    /* index values and dtype (own buffers) */
    ssmt_host           ih[3];
    const int64_t       sh[1] = {c.batch};
    static const double bad[3][4] = {{0, 6, 1, -1}, {2, -1, 2, 3}, {0, 1, 2, 3}};
    for (int i = 0; i < 3; ++i) {
        ih[i] = ssmt_alloc(i == 2 ? SSM_DTYPE_F32 : SSM_DTYPE_I64, 1, sh);
        for (int b = 0; b < 4; ++b) ssmt_set(&ih[i].t, b, bad[i][b]);
        ssmt_bufset_add(f, &ih[i]);
    }
    a = oki;
    a.state_batch_indices = ih[0].t;
    expect(f, op, &a, SSM_STATUS_INVALID_ARGUMENT, "index >= slots", "state_batch_indices");
    a.state_batch_indices = ih[1].t;
    expect(f, op, &a, SSM_STATUS_INVALID_ARGUMENT, "duplicate slot", "share");
    a.state_batch_indices = ih[2].t;
    expect(f, op, &a, SSM_STATUS_INVALID_LAYOUT, "indices f32", "state_batch_indices");
    a.state_batch_indices = ssmt_reshaped(&oki.state_batch_indices, 0, 3);
    expect(f, op, &a, SSM_STATUS_INVALID_SHAPE, "indices length != B", "state_batch_indices");
    /* outputs */
    CASE(a.out = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "out absent", "out");
    CASE(a.out.data = ok.v.data, SSM_STATUS_INVALID_LAYOUT, "out overlaps v", "overlaps");
    CASE(a.out.data = ok.v_state.data, SSM_STATUS_INVALID_LAYOUT, "out overlaps v_state", "overlaps");
    a = ok;
    /* rows in reverse order: a valid output view over the same bytes, but not the same view */
    a.final_ssm_state = ok.ssm_state;
    a.final_ssm_state.data = (float *)ok.ssm_state.data + (ok.ssm_state.shape[2] - 1) * ok.ssm_state.strides[2];
    a.final_ssm_state.strides[2] = -ok.ssm_state.strides[2];
    expect(f, op, &a, SSM_STATUS_INVALID_LAYOUT, "final_ssm_state reversed view of ssm_state", "overlaps");
    CASE((a.final_k_state = ok.k_state, a.final_k_state.data = (float *)ok.k_state.data + 1), SSM_STATUS_INVALID_LAYOUT,
         "final_k_state shifted view of k_state", "overlaps");
    CASE((a.final_v_state = ok.k_state, a.final_v_state.shape[2] = ok.v_state.shape[2]), SSM_STATUS_INVALID_LAYOUT,
         "final_v_state on k_state", "overlaps");
    CASE((a.final_angle_state = ok.angle_state, a.final_angle_state.dtype = SSM_DTYPE_F16), SSM_STATUS_INVALID_LAYOUT,
         "final_angle_state same data, other dtype", "overlaps");
    CASE(a.final_ssm_state.data = ok.final_k_state.data, SSM_STATUS_INVALID_LAYOUT,
         "final_ssm_state overlaps final_k_state", "overlaps");
    CASE((a.final_v_state = ok.v_state, a.final_v_state.shape[0] = 5), SSM_STATUS_INVALID_SHAPE,
         "final_v_state slots wrong", "final_v_state");
    /* exactly the same views: in place, valid (last: it changes the pools) */
    a = oki;
    a.final_angle_state = oki.angle_state;
    a.final_ssm_state = oki.ssm_state;
    a.final_k_state = oki.k_state;
    a.final_v_state = oki.v_state;
    expect_ok(op, &a, "in place, indexed");
    for (int i = 0; i < 3; ++i) ssmt_free(&ih[i]);
    ssmt_mamba3_step_free(&pr);
    ssmt_mamba3_step_free(&pi);
}

int main(void) {
    g_ref = ssmt_ref_ctx_or_exit(SSM_REF_EXACT);
    g_cuda = ssmt_cuda_ctx_or_null("note: a CUDA-backend context cannot be created; the UNSUPPORTED dispatch case is "
                                   "skipped");
    ssmt_rng_seed(&g_rng, 11);
    ssm_mamba3_params_init(&g_params);
    g_params.chunk_size = 8;
    fixtures x;
    if (fixtures_make(&x) != 0) {
        fprintf(stderr, "cannot build the fixtures\n");
        return 1;
    }
    test_angle(&x);
    test_angle_bwd(&x);
    test_siso_fwd(&x);
    test_siso(&x);
    test_siso_bwd(&x);
    test_step();
    fixtures_free(&x);
    ssm_context_free(g_cuda);
    ssm_context_free(g_ref);
    TEST_EXIT();
}
