/*
 * test_mamba3_mimo_validation.c — argument validation of the four Mamba-3 MIMO entry points
 * (mamba3_mimo_bwd_fwd, mamba3_mimo, mamba3_mimo_bwd, mamba3_mimo_step).
 * For each rule: the expected status, a last error that starts with "<op>:" (and mentions
 * the argument or rule where given), and every buffer of the fixture (inputs and the
 * NaN-poisoned outputs) byte-identical to its content before the call. Each case runs with
 * ctx NULL (CPU backend) and with a REF-backend context: validation comes before dispatch.
 * Each operator's unmodified fixture must succeed on REF, so the failures come from the
 * mutation. The in-place step (final_* exactly the input views) must succeed.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

enum { OP_BWD_FWD, OP_FWD, OP_BWD, OP_STEP };
static const char * const op_names[] = {"mamba3_mimo_bwd_fwd", "mamba3_mimo", "mamba3_mimo_bwd", "mamba3_mimo_step"};

static ssm_context *          g_ref;
static ssm_context *          g_cuda; /* may be NULL */
static ssmt_rng               g_rng;
static ssm_mamba3_mimo_params g_params;

/* Every buffer a call could touch, for the byte snapshots. */
typedef ssmt_bufset fixture;

static ssm_status call_op(int op, ssm_context * ctx, const ssm_mamba3_mimo_params * p, const void * args) {
    switch (op) {
        case OP_BWD_FWD: return ssm_mamba3_mimo_bwd_fwd(ctx, p, args);
        case OP_FWD: return ssm_mamba3_mimo(ctx, p, args);
        case OP_BWD: return ssm_mamba3_mimo_bwd(ctx, p, args);
        default: return ssm_mamba3_mimo_step(ctx, p, args);
    }
}

/* One invalid call with ctx NULL and REF: status, message, untouched memory. */
static void expect_p(fixture * f, int op, const ssm_mamba3_mimo_params * p, const void * args, ssm_status want,
                     const char * what, const char * must_mention) {
    for (int k = 0; k < 2; ++k) {
        ssm_context * ctx = k == 0 ? NULL : g_ref;
        void *        snaps[SSMT_BUFSET_MAX];
        ssmt_bufset_snapshot(f, snaps);
        const ssm_status got  = call_op(op, ctx, p, args);
        const char *     last = ssm_context_last_error(ctx);
        ssmt_check_refusal(op_names[op], what, k ? "REF" : "NULL", got, want, last, op_names[op], SSMT_NAME_PREFIX,
                           must_mention);
        ssmt_bufset_check_unchanged(f, snaps, op_names[op], what);
        if (k == 0 && got == want) printf("ok  %-20s %-44s %s\n", op_names[op], what, last != NULL ? last : "(null)");
    }
}

static void expect(fixture * f, int op, const ssm_mamba3_mimo_params * p, const void * args, ssm_status want,
                   const char * what, const char * mention) {
    expect_p(f, op, p, args, want, what, mention);
}

static void expect_ok(int op, const ssm_mamba3_mimo_params * p, const void * args, const char * what) {
    const ssm_status st = call_op(op, g_ref, p, args);
    TEST_CHECK(st == SSM_STATUS_OK, "%s / %s: the valid call fails: %s", op_names[op], what,
               ssm_context_last_error(g_ref));
    if (st == SSM_STATUS_OK) printf("ok  %-20s %-44s (valid call succeeds)\n", op_names[op], what);
}

/* One case of a test: `a` = `ok`, then the mutation (an expression), then one expect() on the
 * test's fixture `f`, operator `op` and params `p`. */
#define CASE(mutation, want, what, mention)         \
    do {                                            \
        a = ok;                                     \
        mutation;                                   \
        expect(f, op, &p, &a, want, what, mention); \
    } while (0)

/* params NULL / size / chunk / divisor / fused flag / eps, args NULL, CUDA backend. */
static void params_rules(fixture * f, int op, const ssm_mamba3_mimo_params * base, const void * args) {
    expect(f, op, NULL, args, SSM_STATUS_INVALID_ARGUMENT, "params NULL", "params");
    expect(f, op, base, NULL, SSM_STATUS_INVALID_ARGUMENT, "args NULL", "args");
    ssm_mamba3_mimo_params q = *base;
    q.size = sizeof q - 1;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "params.size too small", "size");
    q = *base;
    q.chunk_size = 0;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "chunk 0", "chunk_size");
    q.chunk_size = 129;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "chunk 129", "chunk_size");
    q = *base;
    q.rotary_dim_divisor = 3;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "divisor 3", "rotary_dim_divisor");
    q.rotary_dim_divisor = 8;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "divisor 8", "rotary_dim_divisor");
    q = *base;
    q.fuse_pregate_norm = 2;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "fuse_pregate_norm 2", "fuse_pregate_norm");
    q = *base;
    q.norm_eps = -1.0;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "norm_eps negative", "norm_eps");
    q.norm_eps = NAN;
    expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "norm_eps NaN", "norm_eps");
    if (op != OP_STEP) {
        q = *base;
        q.chunk_size = 65; /* R = 2 in every fixture: C·R = 130 */
        expect(f, op, &q, args, SSM_STATUS_INVALID_ARGUMENT, "C·R = 130 > 128", "C·R");
    }
    if (g_cuda != NULL) {
        const ssm_status got = call_op(op, g_cuda, base, args);
        ssmt_expect_cuda_refusal(op_names[op], g_cuda, got);
    }
}

/* The rules on q, k, v, z, mimo_z every op shares (fields of the op's args; restored).
 * seq: the q/k rank has an S axis (5-D) — the step's is 4-D. */
static void qkv_rules(fixture * f, int op, const ssm_mamba3_mimo_params * p, const void * args, ssm_tensor * q,
                      ssm_tensor * k, ssm_tensor * v, ssm_tensor * z, ssm_tensor * mimo_z, int seq) {
    const ssm_tensor sq = *q, sk = *k, sv = *v, sz = *z, smz = *mimo_z;
    const int32_t    nd = seq ? 5 : 4, ndim_n = nd - 1, ndim_h = nd - 3, ndim_p = nd - 2;
    *q = ssmt_absent();
    expect(f, op, p, args, SSM_STATUS_INVALID_ARGUMENT, "q missing", "q");
    *q = sq;
    q->ndim = nd - 1;
    expect(f, op, p, args, SSM_STATUS_INVALID_SHAPE, "q wrong rank", "q");
    *q = ssmt_retyped(&sq, SSM_DTYPE_I32);
    expect(f, op, p, args, SSM_STATUS_INVALID_LAYOUT, "q int32", "q");
    *q = sq;
    q->device.type = SSM_DEVICE_CUDA;
    expect(f, op, p, args, SSM_STATUS_INVALID_LAYOUT, "q on CUDA", "q");
    *q = sq;
    *k = ssmt_reshaped(&sk, ndim_n, sk.shape[ndim_n] + 2);
    expect(f, op, p, args, SSM_STATUS_INVALID_SHAPE, "k N differs from q", "k");
    *k = sk;
    /* N odd / not a multiple of div / over 128 (q and k reshaped together) */
    *q = ssmt_reshaped(&sq, ndim_n, 7);
    *k = ssmt_reshaped(&sk, ndim_n, 7);
    expect(f, op, p, args, SSM_STATUS_INVALID_ARGUMENT, "N odd (7)", "even");
    *q = ssmt_reshaped(&sq, ndim_n, 6);
    *k = ssmt_reshaped(&sk, ndim_n, 6);
    expect(f, op, p, args, SSM_STATUS_INVALID_ARGUMENT, "N=6 with divisor 4", "rotary_dim_divisor");
    *q = ssmt_reshaped(&sq, ndim_n, 132);
    *k = ssmt_reshaped(&sk, ndim_n, 132);
    expect(f, op, p, args, SSM_STATUS_INVALID_ARGUMENT, "N=132 > 128", "exceeds");
    *q = sq;
    *k = sk;
    /* R over 128 (stride-0 views over the fixture's buffers); test_huge_rank has the overflow */
    *q = ssmt_reshaped(&sq, nd - 3, 129);
    *k = ssmt_reshaped(&sk, nd - 3, 129);
    q->strides[nd - 3] = 0, k->strides[nd - 3] = 0;
    expect(f, op, p, args, SSM_STATUS_INVALID_ARGUMENT, "R=129 > 128", "(R)");
    *q = sq;
    *k = sk;
    /* H not a multiple of G; P over 128 */
    *v = ssmt_reshaped(&sv, ndim_h, 3);
    expect(f, op, p, args, SSM_STATUS_INVALID_SHAPE, "H=3 with G=2", "multiple");
    *v = ssmt_reshaped(&sv, ndim_p, 129);
    expect(f, op, p, args, SSM_STATUS_INVALID_ARGUMENT, "P=129 > 128", "P");
    *v = ssmt_reshaped(&sv, 0, sv.shape[0] + 1);
    expect(f, op, p, args, SSM_STATUS_INVALID_SHAPE, "v batch differs from q", "v");
    *v = sv;
    /* z and mimo_z: both or neither */
    *mimo_z = ssmt_absent();
    expect(f, op, p, args, SSM_STATUS_INVALID_ARGUMENT, "z without mimo_z", "mimo_z");
    *mimo_z = smz;
    *z = ssmt_absent();
    expect(f, op, p, args, SSM_STATUS_INVALID_ARGUMENT, "mimo_z without z", "z");
    *z = sz;
}

/* ---- fixtures ------------------------------------------------------------------------------ */

typedef struct fixtures {
    ssmt_mimo_config          cfg, vcfg, ncfg;
    ssmt_mimo_problem         pr, vpr, npr; /* dense+states (reduced, z, d); varlen; per-rank */
    ssmt_mimo_bwd_problem     bw, vbw, nbw;
    ssmt_mimo_bwd_fwd_problem bf, nbf;      /* reduced with z; per-rank with z                 */
    ssmt_mimo_step_problem    st, nst;      /* indexed pool; per-rank                          */
    ssmt_host                 extra[8];
    fixture                   f;
} fixtures;

static const int64_t k_lens[] = {5, 0, 7};

static int fixtures_make(fixtures * x) {
    memset(x, 0, sizeof *x);
    ssmt_mimo_config_init(&x->cfg); /* B 2, S 20, H 4, G 2, R 2, N 16, P 8, C 8, div 4 */
    x->cfg.has_states = 1;
    x->cfg.has_final = 1;
    x->vcfg = x->cfg;
    x->vcfg.nseq = 3;
    x->vcfg.seqlens = k_lens;
    x->ncfg = x->cfg;
    x->ncfg.reduce_o = 0;
    if (ssmt_mimo_random_args(&g_rng, &x->cfg, &x->pr) != 0) return -1;
    if (ssmt_mimo_random_args(&g_rng, &x->vcfg, &x->vpr) != 0) return -1;
    if (ssmt_mimo_random_args(&g_rng, &x->ncfg, &x->npr) != 0) return -1;
    if (ssmt_mimo_bwd_alloc(&g_rng, &x->cfg, &x->pr, 1, &x->bw) != 0) return -1;
    if (ssmt_mimo_bwd_alloc(&g_rng, &x->vcfg, &x->vpr, 1, &x->vbw) != 0) return -1;
    if (ssmt_mimo_bwd_alloc(&g_rng, &x->ncfg, &x->npr, 0, &x->nbw) != 0) return -1;
    if (ssmt_mimo_random_bwd_fwd(&g_rng, &x->cfg, &x->bf) != 0) return -1;
    if (ssmt_mimo_random_bwd_fwd(&g_rng, &x->ncfg, &x->nbf) != 0) return -1;
    ssmt_mimo_config sc = x->cfg;
    sc.batch = 3;
    if (ssmt_mimo_random_step(&g_rng, &sc, 5, 1, &x->st) != 0) return -1;
    if (ssmt_mimo_random_step(&g_rng, &x->ncfg, x->ncfg.batch, 0, &x->nst) != 0) return -1;
    ssmt_mimo_problem * prs[3] = {&x->pr, &x->vpr, &x->npr};
    for (int i = 0; i < 3; ++i) ssmt_bufset_add_members(&x->f, &prs[i]->q, &prs[i]->final_v_state);
    ssmt_mimo_bwd_problem * bws[3] = {&x->bw, &x->vbw, &x->nbw};
    for (int i = 0; i < 3; ++i) ssmt_bufset_add_members(&x->f, &bws[i]->dout, &bws[i]->dv_state);
    ssmt_mimo_bwd_fwd_problem * bfs[2] = {&x->bf, &x->nbf};
    for (int i = 0; i < 2; ++i) ssmt_bufset_add_members(&x->f, &bfs[i]->dout, &bfs[i]->qk_dot);
    ssmt_mimo_step_problem * sts[2] = {&x->st, &x->nst};
    for (int i = 0; i < 2; ++i) ssmt_bufset_add_members(&x->f, &sts[i]->q, &sts[i]->final_v_state);
    return 0;
}

static void fixtures_free(fixtures * x) {
    ssmt_mimo_problem_free(&x->pr);
    ssmt_mimo_problem_free(&x->vpr);
    ssmt_mimo_problem_free(&x->npr);
    ssmt_mimo_bwd_free(&x->bw);
    ssmt_mimo_bwd_free(&x->vbw);
    ssmt_mimo_bwd_free(&x->nbw);
    ssmt_mimo_bwd_fwd_free(&x->bf);
    ssmt_mimo_bwd_fwd_free(&x->nbf);
    ssmt_mimo_step_free(&x->st);
    ssmt_mimo_step_free(&x->nst);
    for (int i = 0; i < 8; ++i) ssmt_free(&x->extra[i]);
}

/* ---- bwd_fwd ---------------------------------------------------------------------------------- */

static void test_bwd_fwd(fixtures * x) {
    fixture *                          f = &x->f;
    const int                          op = OP_BWD_FWD;
    const ssm_mamba3_mimo_bwd_fwd_args ok = x->bf.args;
    ssm_mamba3_mimo_bwd_fwd_args       a = ok;
    const ssm_mamba3_mimo_params       p = x->bf.params;
    expect_ok(op, &p, &a, "fixture (reduced, z, d)");
    expect_ok(op, &x->nbf.params, &x->nbf.args, "fixture (per-rank dout, z)");
    params_rules(f, op, &p, &a);
    qkv_rules(f, op, &p, &a, &a.q, &a.k, &a.v, &a.z, &a.mimo_z, 1);
    ssm_mamba3_mimo_params q = p;
    q.fuse_pregate_norm = 1;
    expect(f, op, &q, &a, SSM_STATUS_INVALID_ARGUMENT, "fused norm not in this interface", "fuse_pregate_norm");
    /* dout rank follows mimo_o */
    a.dout = x->nbf.args.dout;
    expect(f, op, &p, &a, SSM_STATUS_INVALID_SHAPE, "5-D dout with mimo_o (reduced)", "dout");
    a = x->nbf.args;
    a.dout = x->bf.args.dout;
    expect(f, op, &x->nbf.params, &a, SSM_STATUS_INVALID_SHAPE, "4-D dout without mimo_o (per-rank)", "dout");
    CASE(a.dout = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "dout missing", "dout");
    /* per-token and chunk tensors */
    CASE(a.angles = ssmt_reshaped(&ok.angles, 3, 3), SSM_STATUS_INVALID_SHAPE, "angles A != N/div", "angles");
    CASE(a.da_cs = ssmt_reshaped(&ok.da_cs, 2, 19), SSM_STATUS_INVALID_SHAPE, "da_cs S wrong", "da_cs");
    CASE(a.da_cs_rev = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "da_cs_rev missing", "da_cs_rev");
    CASE(a.segsum = ssmt_reshaped(&ok.segsum, 2, 2), SSM_STATUS_INVALID_SHAPE, "segsum nc wrong", "segsum");
    CASE(a.segsum = ssmt_reshaped(&ok.segsum, 4, 4), SSM_STATUS_INVALID_SHAPE, "segsum C wrong", "segsum");
    CASE(a.q_bias = ssmt_reshaped(&ok.q_bias, 1, 3), SSM_STATUS_INVALID_SHAPE, "q_bias R wrong", "q_bias");
    CASE(a.mimo_v = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "mimo_v missing", "mimo_v");
    CASE(a.d = ssmt_reshaped(&ok.d, 0, 5), SSM_STATUS_INVALID_SHAPE, "d wrong length", "d");
    /* outputs without their inputs */
    a = x->nbf.args;
    a.dmimo_o = x->bf.args.dmimo_o;
    expect(f, op, &x->nbf.params, &a, SSM_STATUS_INVALID_ARGUMENT, "dmimo_o without mimo_o", "mimo_o");
    CASE((a.z = ssmt_absent(), a.mimo_z = ssmt_absent()), SSM_STATUS_INVALID_ARGUMENT, "dz / dmimo_z without z", "z");
    a.dz = ssmt_absent();
    expect(f, op, &p, &a, SSM_STATUS_INVALID_ARGUMENT, "dmimo_z without z", "dmimo_z");
    a.dmimo_z = ssmt_absent();
    expect_ok(op, &p, &a, "no z, no dz / dmimo_z");
    /* output shapes, strides, overlaps */
    CASE(a.states = ssmt_reshaped(&ok.states, 2, 4), SSM_STATUS_INVALID_SHAPE, "states nc wrong", "states");
    CASE(a.qk_dot = ssmt_reshaped(&ok.qk_dot, 3, 3), SSM_STATUS_INVALID_SHAPE, "qk_dot R wrong", "qk_dot");
    CASE(a.dz.strides[3] = 0, SSM_STATUS_INVALID_LAYOUT, "dz with a 0 stride", "dz");
    CASE((a.dz.data = ok.v.data, a.dz.dtype = ok.v.dtype), SSM_STATUS_INVALID_LAYOUT, "dz overlaps v", "v");
    CASE(a.dmimo_z.data = ok.dmimo_o.data, SSM_STATUS_INVALID_LAYOUT, "dmimo_z overlaps dmimo_o", "dmimo_o");
    CASE(a.qk_dot = ssmt_retyped(&ok.qk_dot, SSM_DTYPE_I64), SSM_STATUS_INVALID_LAYOUT, "qk_dot int64", "qk_dot");
}

/* ---- forward ----------------------------------------------------------------------------- */

static void test_forward(fixtures * x) {
    fixture *                    f = &x->f;
    const int                    op = OP_FWD;
    const ssm_mamba3_mimo_args   ok = x->pr.args;
    ssm_mamba3_mimo_args         a = ok;
    const ssm_mamba3_mimo_params p = x->pr.params;
    expect_ok(op, &p, &a, "fixture (reduced, z, d, states)");
    expect_ok(op, &x->vpr.params, &x->vpr.args, "varlen fixture (empty sequence)");
    expect_ok(op, &x->npr.params, &x->npr.args, "per-rank fixture");
    params_rules(f, op, &p, &a);
    qkv_rules(f, op, &p, &a, &a.q, &a.k, &a.v, &a.z, &a.mimo_z, 1);
    /* fused norm: needs mimo_o and z; the weight only with it */
    ssm_mamba3_mimo_params fp = p;
    fp.fuse_pregate_norm = 1;
    expect_ok(op, &fp, &a, "fused norm without a weight");
    ssm_mamba3_mimo_args n = x->npr.args;
    ssm_mamba3_mimo_params fnp = x->npr.params;
    fnp.fuse_pregate_norm = 1;
    expect(f, op, &fnp, &n, SSM_STATUS_INVALID_ARGUMENT, "fused without mimo_o", "mimo_o");
    a.z = ssmt_absent();
    a.mimo_z = ssmt_absent();
    expect(f, op, &fp, &a, SSM_STATUS_INVALID_ARGUMENT, "fused without z", "z");
    a = x->pr.args;
    const int64_t whp[2] = {4, 8};
    x->extra[0] = ssmt_alloc(SSM_DTYPE_F32, 2, whp);
    ssmt_fill_value(&x->extra[0].t, 1.0);
    ssmt_bufset_add(f, &x->extra[0]);
    a.outproj_norm_weight = x->extra[0].t;
    expect(f, op, &p, &a, SSM_STATUS_INVALID_ARGUMENT, "outproj_norm_weight without fused", "fuse_pregate_norm");
    expect_ok(op, &fp, &a, "fused norm with an (H, P) weight");
    a.outproj_norm_weight = ssmt_reshaped(&x->extra[0].t, 1, 7);
    expect(f, op, &fp, &a, SSM_STATUS_INVALID_SHAPE, "norm weight (H, 7)", "outproj_norm_weight");
    /* out rank follows mimo_o */
    CASE(a.out = x->npr.args.out, SSM_STATUS_INVALID_SHAPE, "5-D out with mimo_o", "out");
    n = x->npr.args;
    n.out = x->pr.args.out;
    expect(f, op, &x->npr.params, &n, SSM_STATUS_INVALID_SHAPE, "4-D out without mimo_o", "out");
    CASE(a.out = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "out missing", "out");
    /* per-token tensors */
    CASE(a.adt = ssmt_reshaped(&ok.adt, 1, 3), SSM_STATUS_INVALID_SHAPE, "adt H wrong", "adt");
    CASE(a.trap = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "trap missing", "trap");
    CASE(a.angles = ssmt_reshaped(&ok.angles, 3, 8), SSM_STATUS_INVALID_SHAPE, "angles A = N/2 with divisor 4",
         "angles");
    /* initial states: all four or none, shapes */
    CASE(a.v_state = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "3 of 4 initial states", "initial states");
    CASE(a.k_state = ssmt_reshaped(&ok.k_state, 1, 3), SSM_STATUS_INVALID_SHAPE, "k_state R wrong", "k_state");
    CASE(a.final_ssm_state = ssmt_reshaped(&ok.final_ssm_state, 2, 16), SSM_STATUS_INVALID_SHAPE,
         "final_ssm_state (N,P) order", "final_ssm_state");
    /* varlen */
    CASE(a.cu_seqlens = x->vpr.args.cu_seqlens, SSM_STATUS_INVALID_ARGUMENT, "varlen with B=2", "cu_seqlens");
    ssm_mamba3_mimo_args v = x->vpr.args;
    const int64_t        sh1[1] = {4};
    x->extra[1] = ssmt_alloc(SSM_DTYPE_I32, 1, sh1);
    const double bad[4] = {0, 5, 4, 12};
    for (int i = 0; i < 4; ++i) ssmt_set(&x->extra[1].t, i, bad[i]);
    ssmt_bufset_add(f, &x->extra[1]);
    v.cu_seqlens = x->extra[1].t;
    expect(f, op, &x->vpr.params, &v, SSM_STATUS_INVALID_ARGUMENT, "cu_seqlens decreasing", "non-decreasing");
    v = x->vpr.args;
    v.angle_state = x->pr.args.angle_state;
    expect(f, op, &x->vpr.params, &v, SSM_STATUS_INVALID_SHAPE, "varlen states per batch row", "angle_state");
    v = x->vpr.args;
    v.cu_seqlens = ssmt_retyped(&x->vpr.args.cu_seqlens, SSM_DTYPE_F32);
    expect(f, op, &x->vpr.params, &v, SSM_STATUS_INVALID_LAYOUT, "cu_seqlens f32", "cu_seqlens");
    /* overlaps */
    CASE((a.out.data = ok.q.data, a.out.dtype = ok.q.dtype), SSM_STATUS_INVALID_LAYOUT, "out overlaps q", "q");
    CASE(a.final_ssm_state = ok.ssm_state, SSM_STATUS_INVALID_LAYOUT, "final_ssm_state = ssm_state (no in place)",
         "ssm_state");
    CASE(a.final_k_state.data = ok.final_ssm_state.data, SSM_STATUS_INVALID_LAYOUT,
         "final_k_state overlaps final_ssm_state", "final_ssm_state");
}

/* ---- backward ---------------------------------------------------------------------------- */

static void test_bwd(fixtures * x) {
    fixture *                      f = &x->f;
    const int                      op = OP_BWD;
    const ssm_mamba3_mimo_bwd_args ok = x->bw.args;
    ssm_mamba3_mimo_bwd_args       a = ok;
    const ssm_mamba3_mimo_params   p = x->pr.params;
    /* the valid calls: the backward itself is another helper's; only validation is tested
       here, so only the invalid calls are required to behave */
    params_rules(f, op, &p, &a);
    qkv_rules(f, op, &p, &a, &a.q, &a.k, &a.v, &a.z, &a.mimo_z, 1);
    a.dout = x->nbw.args.dout;
    expect(f, op, &p, &a, SSM_STATUS_INVALID_SHAPE, "5-D dout with mimo_o", "dout");
    ssm_mamba3_mimo_bwd_args n = x->nbw.args;
    n.dout = x->bw.args.dout;
    expect(f, op, &x->npr.params, &n, SSM_STATUS_INVALID_SHAPE, "4-D dout without mimo_o", "dout");
    CASE(a.dout = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "dout missing", "dout");
    CASE(a.dfinal_k_state = ssmt_reshaped(&ok.dfinal_k_state, 2, 3), SSM_STATUS_INVALID_SHAPE, "dfinal_k_state H wrong",
         "dfinal_k_state");
    CASE(a.dq = ssmt_reshaped(&ok.dq, 3, 4), SSM_STATUS_INVALID_SHAPE, "dq per value head (not G)", "dq");
    /* gradients without their inputs */
    CASE(a.d = ssmt_absent(), SSM_STATUS_INVALID_ARGUMENT, "dd without d", "dd");
    CASE((a.z = ssmt_absent(), a.mimo_z = ssmt_absent()), SSM_STATUS_INVALID_ARGUMENT, "dz without z", "dz");
    a.dz = ssmt_absent();
    expect(f, op, &p, &a, SSM_STATUS_INVALID_ARGUMENT, "dmimo_z without z", "dmimo_z");
    n = x->nbw.args;
    n.dmimo_o = x->bw.args.dmimo_v;
    expect(f, op, &x->npr.params, &n, SSM_STATUS_INVALID_ARGUMENT, "dmimo_o without mimo_o", "dmimo_o");
    a = x->bw.args;
    const int64_t whp[2] = {4, 8};
    x->extra[2] = ssmt_alloc(SSM_DTYPE_F32, 2, whp);
    ssmt_bufset_add(f, &x->extra[2]);
    a.doutproj_norm_weight = x->extra[2].t;
    expect(f, op, &p, &a, SSM_STATUS_INVALID_ARGUMENT, "doutproj_norm_weight without fused", "fuse_pregate_norm");
    a = x->bw.args;
    a.angle_state = ssmt_absent();
    a.ssm_state = ssmt_absent();
    a.k_state = ssmt_absent();
    a.v_state = ssmt_absent();
    expect(f, op, &p, &a, SSM_STATUS_INVALID_ARGUMENT, "dangle_state without initial states", "angle_state");
    a.dangle_state = ssmt_absent();
    expect(f, op, &p, &a, SSM_STATUS_INVALID_ARGUMENT, "dssm_state without initial states", "ssm_state");
    /* fused norm rules hold for the backward too */
    a = x->bw.args;
    ssm_mamba3_mimo_params fnp = x->npr.params;
    fnp.fuse_pregate_norm = 1;
    n = x->nbw.args;
    expect(f, op, &fnp, &n, SSM_STATUS_INVALID_ARGUMENT, "fused without mimo_o", "mimo_o");
    /* varlen with B = 2, overlaps */
    a.cu_seqlens = x->vpr.args.cu_seqlens;
    expect(f, op, &p, &a, SSM_STATUS_INVALID_ARGUMENT, "varlen with B=2", "cu_seqlens");
    CASE((a.dq.data = ok.q.data, a.dq.dtype = ok.q.dtype), SSM_STATUS_INVALID_LAYOUT, "dq overlaps q", "q");
    CASE(a.dk = ok.dq, SSM_STATUS_INVALID_LAYOUT, "dk overlaps dq", "dq");
    CASE((a.dv.data = ok.dout.data, a.dv.dtype = ok.dout.dtype), SSM_STATUS_INVALID_LAYOUT, "dv overlaps dout", "dout");
}

/* ---- step ------------------------------------------------------------------------------- */

static void test_step(fixtures * x) {
    fixture *                       f = &x->f;
    const int                       op = OP_STEP;
    const ssm_mamba3_mimo_step_args ok = x->st.args;
    ssm_mamba3_mimo_step_args       a = ok;
    const ssm_mamba3_mimo_params    p = x->st.params;
    expect_ok(op, &p, &a, "indexed pool fixture");
    expect_ok(op, &x->nst.params, &x->nst.args, "per-rank fixture");
    params_rules(f, op, &p, &a);
    qkv_rules(f, op, &p, &a, &a.q, &a.k, &a.v, &a.z, &a.mimo_z, 0);
    /* out rank follows mimo_o */
    a.out = x->nst.args.out;
    expect(f, op, &p, &a, SSM_STATUS_INVALID_SHAPE, "4-D out with mimo_o", "out");
    ssm_mamba3_mimo_step_args n = x->nst.args;
    n.out = x->st.args.out;
    expect(f, op, &x->nst.params, &n, SSM_STATUS_INVALID_SHAPE, "3-D out without mimo_o", "out");
    /* fused */
    a = x->st.args;
    ssm_mamba3_mimo_params fnp = x->nst.params;
    fnp.fuse_pregate_norm = 1;
    expect(f, op, &fnp, &x->nst.args, SSM_STATUS_INVALID_ARGUMENT, "fused without mimo_o", "mimo_o");
    /* states required, shapes */
    a.k_state = ssmt_absent();
    expect(f, op, &p, &a, SSM_STATUS_INVALID_ARGUMENT, "k_state missing", "k_state");
    CASE(a.ssm_state = ssmt_reshaped(&ok.ssm_state, 0, 4), SSM_STATUS_INVALID_SHAPE, "ssm_state slots differ",
         "ssm_state");
    CASE(a.adt = ssmt_reshaped(&ok.adt, 1, 3), SSM_STATUS_INVALID_SHAPE, "adt H wrong", "adt");
    /* state_batch_indices */
    CASE(a.state_batch_indices = ssmt_absent(), SSM_STATUS_INVALID_SHAPE, "5 slots for 3 rows without indices",
         "slots");
    a = x->st.args;
    const int64_t sh3[1] = {3};
    x->extra[3] = ssmt_alloc(SSM_DTYPE_I32, 1, sh3);
    x->extra[4] = ssmt_alloc(SSM_DTYPE_I32, 1, sh3);
    const double dup[3] = {1, 4, 1}, big[3] = {0, 5, 2};
    for (int i = 0; i < 3; ++i) {
        ssmt_set(&x->extra[3].t, i, dup[i]);
        ssmt_set(&x->extra[4].t, i, big[i]);
    }
    ssmt_bufset_add(f, &x->extra[3]);
    ssmt_bufset_add(f, &x->extra[4]);
    a.state_batch_indices = x->extra[3].t;
    expect(f, op, &p, &a, SSM_STATUS_INVALID_ARGUMENT, "two rows share a slot", "share");
    a.state_batch_indices = x->extra[4].t;
    expect(f, op, &p, &a, SSM_STATUS_INVALID_ARGUMENT, "index 5 of 5 slots", "slots");
    a.state_batch_indices = ssmt_retyped(&x->extra[4].t, SSM_DTYPE_F32);
    expect(f, op, &p, &a, SSM_STATUS_INVALID_LAYOUT, "indices f32", "state_batch_indices");
    /* in-place rule: exactly the same view is allowed, any other overlap is not */
    a = x->st.args;
    a.final_angle_state = a.angle_state;
    a.final_ssm_state = a.ssm_state;
    a.final_k_state = a.k_state;
    a.final_v_state = a.v_state;
    {
        /* the valid in-place call changes the pool: run it on copies */
        ssmt_host c[4] = {ssmt_clone(&a.angle_state, (ssm_dtype)a.angle_state.dtype),
                          ssmt_clone(&a.ssm_state, (ssm_dtype)a.ssm_state.dtype),
                          ssmt_clone(&a.k_state, (ssm_dtype)a.k_state.dtype),
                          ssmt_clone(&a.v_state, (ssm_dtype)a.v_state.dtype)};
        ssm_mamba3_mimo_step_args ip = a;
        ip.angle_state = ip.final_angle_state = c[0].t;
        ip.ssm_state = ip.final_ssm_state = c[1].t;
        ip.k_state = ip.final_k_state = c[2].t;
        ip.v_state = ip.final_v_state = c[3].t;
        expect_ok(op, &p, &ip, "in place (final_* = the input views)");
        for (int i = 0; i < 4; ++i) ssmt_free(&c[i]);
    }
    a.final_angle_state = x->st.args.final_angle_state;
    a.final_k_state = x->st.args.final_k_state;
    a.final_v_state = x->st.args.final_v_state;
    a.final_ssm_state = ssmt_reshaped(&x->st.args.ssm_state, 0, 4);
    expect(f, op, &p, &a, SSM_STATUS_INVALID_SHAPE, "final_ssm_state slots differ", "final_ssm_state");
    /* the same memory through a different view (another dtype): not the in-place case */
    a.final_ssm_state = ssmt_retyped(&x->st.args.ssm_state, SSM_DTYPE_BF16); /* inside the pool's bytes */
    expect(f, op, &p, &a, SSM_STATUS_INVALID_LAYOUT, "final_ssm_state another view of ssm_state", "overlaps ssm_state");
    a = ok;
    a.final_k_state = ok.k_state;
    a.final_k_state.data = (char *)ok.k_state.data + ssm_dtype_size((ssm_dtype)a.k_state.dtype);
    expect(f, op, &p, &a, SSM_STATUS_INVALID_LAYOUT, "final_k_state = k_state shifted by one element", "k_state");
    CASE((a.out.data = ok.k_state.data, a.out.dtype = ok.k_state.dtype), SSM_STATUS_INVALID_LAYOUT,
         "out overlaps k_state", "k_state");
}

/* R = 2^61 - 1 as stride-0 views over one-element buffers, with q/k (1,1,R,1,2) small enough
 * that no element count overflows: C·R wrapped in int64, passed the C·R ≤ 128 rule and sized
 * the CPU scratch with the wrapped product (ASan: a heap write past it). Rejected on CPU now. */
static void test_huge_rank(void) {
    const int64_t R = (INT64_C(1) << 61) - 1;
    ssm_context_params cp;
    ssm_context_params_init(&cp);
    cp.backend = SSM_BACKEND_CPU;
    ssm_context * cpu = NULL;
    TEST_CHECK(ssm_context_create(&cp, &cpu) == SSM_STATUS_OK, "CPU context");
    if (cpu == NULL) return;
    static const int64_t one3[3] = {1, 1, 1}, one4[4] = {1, 1, 1, 1}, seg[5] = {1, 1, 1, 8, 8};
    static const int64_t qk[5] = {1, 1, 1, 1, 2}, hn[3] = {1, 1, 2}, hp[3] = {1, 1, 1};
    ssmt_host t[16];
    int       n = 0;
    t[n++] = ssmt_alloc(SSM_DTYPE_F16, 4, one4); /* dout  0 */
    t[n++] = ssmt_alloc(SSM_DTYPE_F16, 5, qk);   /* q     1 */
    t[n++] = ssmt_alloc(SSM_DTYPE_F16, 5, qk);   /* k     2 */
    t[n++] = ssmt_alloc(SSM_DTYPE_F16, 4, one4); /* v     3 */
    t[n++] = ssmt_alloc(SSM_DTYPE_F16, 3, hn);   /* q_bias 4 */
    t[n++] = ssmt_alloc(SSM_DTYPE_F16, 3, hn);   /* k_bias 5 */
    t[n++] = ssmt_alloc(SSM_DTYPE_F16, 3, hp);   /* mimo_v 6 */
    t[n++] = ssmt_alloc(SSM_DTYPE_F16, 3, hp);   /* mimo_o 7 */
    t[n++] = ssmt_alloc(SSM_DTYPE_F32, 4, one4); /* angles 8 */
    t[n++] = ssmt_alloc(SSM_DTYPE_F32, 3, one3); /* da_cs 9 */
    t[n++] = ssmt_alloc(SSM_DTYPE_F32, 3, one3); /* da_cs_rev 10 */
    t[n++] = ssmt_alloc(SSM_DTYPE_F32, 3, one3); /* dt 11 */
    t[n++] = ssmt_alloc(SSM_DTYPE_F32, 3, one3); /* trap 12 */
    t[n++] = ssmt_alloc(SSM_DTYPE_F32, 5, seg);  /* segsum 13 */
    for (int i = 0; i < n; ++i) ssmt_fill_value(&t[i].t, 0.0);
    ssm_mamba3_mimo_bwd_fwd_args a;
    memset(&a, 0, sizeof a);
    a.dout = t[0].t, a.q = t[1].t, a.k = t[2].t, a.v = t[3].t, a.q_bias = t[4].t, a.k_bias = t[5].t;
    a.mimo_v = t[6].t, a.mimo_o = t[7].t, a.angles = t[8].t, a.da_cs = t[9].t, a.da_cs_rev = t[10].t;
    a.dt = t[11].t, a.trap = t[12].t, a.segsum = t[13].t;
    a.q.shape[2] = R, a.q.strides[2] = 0, a.k.shape[2] = R, a.k.strides[2] = 0;
    ssm_tensor * hr[4] = {&a.q_bias, &a.k_bias, &a.mimo_v, &a.mimo_o};
    for (int i = 0; i < 4; ++i) hr[i]->shape[1] = R, hr[i]->strides[1] = 0;
    ssm_mamba3_mimo_params p;
    ssm_mamba3_mimo_params_init(&p);
    p.chunk_size = 8, p.rotary_dim_divisor = 2;
    const ssm_status st = ssm_mamba3_mimo_bwd_fwd(cpu, &p, &a);
    TEST_CHECK(st == SSM_STATUS_INVALID_ARGUMENT && strstr(ssm_context_last_error(cpu), "(R)") != NULL,
               "R = 2^61-1 on CPU: got %s [%s]", ssm_status_string(st), ssm_context_last_error(cpu));
    if (st == SSM_STATUS_INVALID_ARGUMENT) printf("ok  mamba3_mimo_bwd_fwd  R = 2^61-1 (stride-0 views, CPU)       %s\n",
                                                  ssm_context_last_error(cpu));
    for (int i = 0; i < n; ++i) ssmt_free(&t[i]);
    ssm_context_free(cpu);
}

int main(void) {
    g_ref = ssmt_ref_ctx_or_exit(SSM_REF_EXACT);
    g_cuda = ssmt_cuda_ctx_or_null(NULL);
    ssmt_rng_seed(&g_rng, 11);
    ssm_mamba3_mimo_params_init(&g_params);
    TEST_CHECK(g_params.size == sizeof g_params && g_params.chunk_size == 16 && g_params.rotary_dim_divisor == 4 &&
                   g_params.fuse_pregate_norm == 0 && g_params.norm_eps == 1e-5,
               "ssm_mamba3_mimo_params_init defaults");
    fixtures * x = calloc(1, sizeof *x);
    if (x == NULL || fixtures_make(x) != 0) {
        fprintf(stderr, "cannot build the fixtures\n");
        return 1;
    }
    test_bwd_fwd(x);
    test_forward(x);
    test_bwd(x);
    test_step(x);
    test_huge_rank();
    fixtures_free(x);
    free(x);
    ssm_context_free(g_ref);
    ssm_context_free(g_cuda);
    TEST_EXIT();
}
