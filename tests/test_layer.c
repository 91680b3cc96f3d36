/*
 * test_layer.c — causal_conv1d (forward, backward, update) and gated RMSNorm (forward,
 * backward):
 *  - the reference backward equals central finite differences of the reference forward
 *    (float64, loss = Σ out·dout (+ Σ final·dfinal));
 *  - the CPU backend against the reference within the DESIGN §5 bars (f32/f16/bf16,
 *    channel-last views, seq_idx with padding, initial/final states), identical bytes for
 *    1, 2 and 3 threads;
 *  - the conv forward over S tokens equals S calls of the update (rolling state L ≥ W−1),
 *    and the update with a slot pool and padding rows against the reference;
 *  - every validation rule, outputs untouched.
 * Seed: SSMOPS_TEST_SEED (default 20261203).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static ssm_context *ctx_ref, *ctx_cpu[4];

/* (batch, D, S) stored channel-last: memory (batch, S, D), as Mamba-2 keeps it. */
static ssmt_host alloc_bds(ssm_dtype dt, int64_t B, int64_t D, int64_t S) {
    static const int32_t order[3] = { 0, 2, 1 };
    const int64_t        sh[3]    = { B, D, S };
    return ssmt_alloc_layout(dt, 3, sh, order, 0);
}

static double dot(const ssm_tensor * a, const ssm_tensor * b) {
    double s = 0.0;
    for (int64_t i = 0; i < ssmt_numel(a); ++i) s += ssmt_get(a, i) * ssmt_get(b, i);
    return s;
}

/* ---- conv problems ------------------------------------------------------------------------ */
typedef struct conv_problem {
    int64_t   B, D, S, W;
    ssmt_host x, w, bias, seq, init, dout, dfin;
} conv_problem;

static void conv_make(ssmt_rng * rng, conv_problem * q, ssm_dtype dt, int64_t B, int64_t D, int64_t S, int64_t W,
                      int with_seq, int with_init) {
    memset(q, 0, sizeof *q);
    q->B = B, q->D = D, q->S = S, q->W = W;
    const int64_t sw[2] = { D, W }, sd[1] = { D }, ss[2] = { B, S }, si[3] = { B, D, W - 1 };
    q->x = alloc_bds(dt, B, D, S), q->dout = alloc_bds(dt, B, D, S);
    const ssm_dtype pdt = dt == SSM_DTYPE_F64 ? SSM_DTYPE_F64 : SSM_DTYPE_F32; /* FD needs f64 parameters */
    q->w = ssmt_alloc(pdt, 2, sw), q->bias = ssmt_alloc(pdt, 1, sd);
    ssmt_fill_normal(rng, &q->x.t, 0, 1), ssmt_fill_normal(rng, &q->dout.t, 0, 1);
    ssmt_fill_normal(rng, &q->w.t, 0, 0.5), ssmt_fill_normal(rng, &q->bias.t, 0, 0.5);
    if (with_seq) { /* row b: (b) padding tokens (−1), then ids 0, 0, ..., 1, ..., 2 */
        q->seq = ssmt_alloc(SSM_DTYPE_I32, 2, ss);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < S; ++t) ssmt_set(&q->seq.t, b * S + t, t < b ? -1 : (double) ((t * 3) / S));
    }
    if (with_init) {
        q->init = ssmt_alloc(dt, 3, si), q->dfin = ssmt_alloc(dt, 3, si);
        ssmt_fill_normal(rng, &q->init.t, 0, 1), ssmt_fill_normal(rng, &q->dfin.t, 0, 1);
    }
}

static void conv_free(conv_problem * q) {
    ssmt_free(&q->x), ssmt_free(&q->w), ssmt_free(&q->bias), ssmt_free(&q->seq), ssmt_free(&q->init);
    ssmt_free(&q->dout), ssmt_free(&q->dfin);
}

static ssm_causal_conv1d_args conv_args(const conv_problem * q) {
    ssm_causal_conv1d_args a = { 0 };
    a.x = q->x.t, a.weight = q->w.t, a.bias = q->bias.t, a.seq_idx = q->seq.t, a.initial_states = q->init.t;
    return a;
}

static ssm_causal_conv1d_bwd_args conv_bwd_args(const conv_problem * q) {
    ssm_causal_conv1d_bwd_args a = { 0 };
    a.x = q->x.t, a.weight = q->w.t, a.bias = q->bias.t, a.seq_idx = q->seq.t, a.initial_states = q->init.t;
    a.dout = q->dout.t, a.dfinal_states = q->dfin.t;
    return a;
}

/* Loss of the reference forward: Σ out·dout + Σ final·dfinal. */
static double conv_loss(const conv_problem * q, const ssm_conv1d_params * p) {
    ssm_causal_conv1d_args a   = conv_args(q);
    ssmt_host              out = ssmt_alloc(SSM_DTYPE_F64, 3, q->x.t.shape);
    const int64_t          sf[3] = { q->B, q->D, q->W - 1 };
    ssmt_host              fin   = ssmt_alloc(SSM_DTYPE_F64, 3, sf);
    a.out = out.t;
    if (q->init.t.data) a.final_states = fin.t;
    TEST_CHECK_STATUS(ssm_causal_conv1d(ctx_ref, p, &a), SSM_STATUS_OK);
    double l = dot(&out.t, &q->dout.t);
    if (q->init.t.data) l += dot(&fin.t, &q->dfin.t);
    ssmt_free(&out), ssmt_free(&fin);
    return l;
}

/* Central differences of loss(·) w.r.t. every element of t, into g (F64, t's shape). */
typedef double (*loss_fn)(const void * q, const void * p);
static void fd_grad(const ssm_tensor * t, ssmt_host * g, loss_fn f, const void * q, const void * p) {
    const double h = 1e-6;
    *g             = ssmt_alloc(SSM_DTYPE_F64, t->ndim, t->shape);
    for (int64_t i = 0; i < ssmt_numel(t); ++i) {
        const double v = ssmt_get(t, i);
        ssmt_set(t, i, v + h);
        const double lp = f(q, p);
        ssmt_set(t, i, v - h);
        const double lm = f(q, p);
        ssmt_set(t, i, v);
        ssmt_set(&g->t, i, (lp - lm) / (2 * h));
    }
}
static double conv_loss_fn(const void * q, const void * p) { return conv_loss(q, p); }

static void test_conv_fd(ssmt_rng * rng, int silu, int with_seq) {
    conv_problem q;
    conv_make(rng, &q, SSM_DTYPE_F64, 2, 3, 9, 4, with_seq, !with_seq);
    ssm_conv1d_params p;
    ssm_conv1d_params_init(&p);
    p.activation = silu;
    ssm_causal_conv1d_bwd_args a = conv_bwd_args(&q);
    const int64_t              sf[3] = { q.B, q.D, q.W - 1 };
    ssmt_host dx = ssmt_alloc(SSM_DTYPE_F64, 3, q.x.t.shape), dw = ssmt_alloc(SSM_DTYPE_F64, 2, q.w.t.shape);
    ssmt_host db = ssmt_alloc(SSM_DTYPE_F64, 1, q.bias.t.shape), di = ssmt_alloc(SSM_DTYPE_F64, 3, sf);
    a.dx = dx.t, a.dweight = dw.t, a.dbias = db.t;
    if (!with_seq) a.dinitial_states = di.t;
    TEST_CHECK_STATUS(ssm_causal_conv1d_bwd(ctx_ref, &p, &a), SSM_STATUS_OK);
    ssmt_host g;
    char      label[128];
    const char * tag = with_seq ? "seq_idx" : "initial+final";
    fd_grad(&q.x.t, &g, conv_loss_fn, &q, &p);
    snprintf(label, sizeof label, "conv ref dx == FD (%s, act %d)", tag, silu);
    ssmt_check_close(label, &dx.t, &g.t, 1e-8);
    ssmt_free(&g);
    fd_grad(&q.w.t, &g, conv_loss_fn, &q, &p);
    snprintf(label, sizeof label, "conv ref dweight == FD (%s, act %d)", tag, silu);
    ssmt_check_close(label, &dw.t, &g.t, 1e-8);
    ssmt_free(&g);
    fd_grad(&q.bias.t, &g, conv_loss_fn, &q, &p);
    snprintf(label, sizeof label, "conv ref dbias == FD (%s, act %d)", tag, silu);
    ssmt_check_close(label, &db.t, &g.t, 1e-8);
    ssmt_free(&g);
    if (!with_seq) {
        fd_grad(&q.init.t, &g, conv_loss_fn, &q, &p);
        snprintf(label, sizeof label, "conv ref dinitial == FD (%s, act %d)", tag, silu);
        ssmt_check_close(label, &di.t, &g.t, 1e-8);
        ssmt_free(&g);
    } else { /* padding tokens: out = 0 */
        ssmt_host out = ssmt_alloc(SSM_DTYPE_F64, 3, q.x.t.shape);
        ssm_causal_conv1d_args f = conv_args(&q);
        f.out = out.t;
        TEST_CHECK_STATUS(ssm_causal_conv1d(ctx_ref, &p, &f), SSM_STATUS_OK);
        TEST_CHECK(ssmt_get(&out.t, 1 * q.D * q.S + 0 * q.S + 0) == 0.0, "padding token of row 1 is not 0");
        ssmt_free(&out);
    }
    ssmt_free(&dx), ssmt_free(&dw), ssmt_free(&db), ssmt_free(&di);
    conv_free(&q);
}

/* CPU vs reference: forward and backward, all thread counts identical. */
static void test_conv_cpu(ssmt_rng * rng, ssm_dtype dt, int64_t B, int64_t D, int64_t S, int64_t W, int with_seq,
                          int silu) {
    conv_problem q;
    conv_make(rng, &q, dt, B, D, S, W, with_seq, !with_seq);
    ssm_conv1d_params p;
    ssm_conv1d_params_init(&p);
    p.activation = silu;
    const int64_t sf[3] = { B, D, W - 1 };
    char          tag[128];
    snprintf(tag, sizeof tag, "conv B%lld D%lld S%lld W%lld %s%s act%d", (long long) B, (long long) D, (long long) S,
             (long long) W, ssm_dtype_name(dt), with_seq ? " seq" : " init", silu);
    /* forward */
    ssmt_host rout = ssmt_alloc(SSM_DTYPE_F64, 3, q.x.t.shape), rfin = ssmt_alloc(SSM_DTYPE_F64, 3, sf);
    ssm_causal_conv1d_args a = conv_args(&q);
    a.out = rout.t;
    if (!with_seq) a.final_states = rfin.t;
    TEST_CHECK_STATUS(ssm_causal_conv1d(ctx_ref, &p, &a), SSM_STATUS_OK);
    ssmt_host first = { 0 };
    for (int th = 1; th <= 3; ++th) {
        ssmt_host out = alloc_bds(dt, B, D, S), fin = ssmt_alloc(dt, 3, sf);
        a.out = out.t;
        if (!with_seq) a.final_states = fin.t;
        TEST_CHECK_STATUS(ssm_causal_conv1d(ctx_cpu[th], &p, &a), SSM_STATUS_OK);
        char label[200];
        if (th == 1) {
            snprintf(label, sizeof label, "%s out", tag);
            ssmt_check_bar(label, &out.t, &rout.t, dt);
            if (!with_seq) {
                snprintf(label, sizeof label, "%s final", tag);
                ssmt_check_close(label, &fin.t, &rfin.t, 0.0); /* a copy: exact */
            }
            first = out;
        } else {
            TEST_CHECK(memcmp(first.buf, out.buf, out.bytes) == 0, "%s: %d threads differ", tag, th);
            ssmt_free(&out);
        }
        ssmt_free(&fin);
    }
    ssmt_free(&first), ssmt_free(&rout), ssmt_free(&rfin);
    /* backward */
    ssm_causal_conv1d_bwd_args g = conv_bwd_args(&q);
    ssmt_host r[4] = { ssmt_alloc(SSM_DTYPE_F64, 3, q.x.t.shape), ssmt_alloc(SSM_DTYPE_F64, 2, q.w.t.shape),
                       ssmt_alloc(SSM_DTYPE_F64, 1, q.bias.t.shape), ssmt_alloc(SSM_DTYPE_F64, 3, sf) };
    g.dx = r[0].t, g.dweight = r[1].t, g.dbias = r[2].t;
    if (!with_seq) g.dinitial_states = r[3].t;
    TEST_CHECK_STATUS(ssm_causal_conv1d_bwd(ctx_ref, &p, &g), SSM_STATUS_OK);
    ssmt_host f[4];
    memset(f, 0, sizeof f);
    static const char * names[4] = { "dx", "dweight", "dbias", "dinitial" };
    for (int th = 1; th <= 3; ++th) {
        ssmt_host c[4] = { alloc_bds(dt, B, D, S), ssmt_alloc(SSM_DTYPE_F32, 2, q.w.t.shape),
                           ssmt_alloc(SSM_DTYPE_F32, 1, q.bias.t.shape), ssmt_alloc(dt, 3, sf) };
        g.dx = c[0].t, g.dweight = c[1].t, g.dbias = c[2].t;
        if (!with_seq) g.dinitial_states = c[3].t;
        TEST_CHECK_STATUS(ssm_causal_conv1d_bwd(ctx_cpu[th], &p, &g), SSM_STATUS_OK);
        for (int o = 0; o < (with_seq ? 3 : 4); ++o) {
            char label[200];
            snprintf(label, sizeof label, "%s %s", tag, names[o]);
            if (th == 1) ssmt_check_bar(label, &c[o].t, &r[o].t, dt);
            else TEST_CHECK(memcmp(f[o].buf, c[o].buf, c[o].bytes) == 0, "%s: %d threads differ", label, th);
        }
        for (int o = 0; o < 4; ++o) {
            if (th == 1) f[o] = c[o];
            else ssmt_free(&c[o]);
        }
    }
    for (int o = 0; o < 4; ++o) ssmt_free(&f[o]), ssmt_free(&r[o]);
    conv_free(&q);
}

/* Forward over S tokens == S updates through a rolling state of L columns. */
static void test_conv_update_chain(ssmt_rng * rng, int64_t L) {
    conv_problem q;
    const int64_t B = 3, D = 70, S = 11, W = 4;
    conv_make(rng, &q, SSM_DTYPE_F32, B, D, S, W, 0, 1);
    ssm_conv1d_params p;
    ssm_conv1d_params_init(&p);
    const int64_t sf[3] = { B, D, W - 1 }, sl[3] = { B, D, L }, so[2] = { B, D };
    ssmt_host out = alloc_bds(SSM_DTYPE_F32, B, D, S), fin = ssmt_alloc(SSM_DTYPE_F32, 3, sf);
    ssm_causal_conv1d_args a = conv_args(&q);
    a.out = out.t, a.final_states = fin.t;
    TEST_CHECK_STATUS(ssm_causal_conv1d(ctx_cpu[2], &p, &a), SSM_STATUS_OK);
    /* state = [zeros, initial_states] */
    ssmt_host st = ssmt_alloc(SSM_DTYPE_F32, 3, sl), xs = ssmt_alloc(SSM_DTYPE_F32, 2, so);
    ssmt_host steps = alloc_bds(SSM_DTYPE_F32, B, D, S), y = ssmt_alloc(SSM_DTYPE_F32, 2, so);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t d = 0; d < D; ++d)
            for (int64_t j = 0; j < L; ++j) {
                const int64_t k = j - (L - (W - 1));
                ssmt_set(&st.t, (b * D + d) * L + j, k >= 0 ? ssmt_get(&q.init.t, (b * D + d) * (W - 1) + k) : 0.0);
            }
    for (int64_t t = 0; t < S; ++t) {
        for (int64_t b = 0; b < B; ++b)
            for (int64_t d = 0; d < D; ++d) ssmt_set(&xs.t, b * D + d, ssmt_get(&q.x.t, (b * D + d) * S + t));
        ssm_causal_conv1d_update_args u = { 0 };
        u.x = xs.t, u.weight = q.w.t, u.bias = q.bias.t, u.conv_state = st.t, u.final_conv_state = st.t, u.out = y.t;
        TEST_CHECK_STATUS(ssm_causal_conv1d_update(ctx_cpu[t % 3 + 1], &p, &u), SSM_STATUS_OK);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t d = 0; d < D; ++d) ssmt_set(&steps.t, (b * D + d) * S + t, ssmt_get(&y.t, b * D + d));
    }
    char label[128];
    snprintf(label, sizeof label, "conv forward == %lld updates (L=%lld): out", (long long) S, (long long) L);
    ssmt_check_close(label, &steps.t, &out.t, 1e-6);
    ssmt_host last = ssmt_alloc(SSM_DTYPE_F32, 3, sf); /* the state's last W−1 columns */
    for (int64_t i = 0; i < B * D; ++i)
        for (int64_t j = 0; j < W - 1; ++j) ssmt_set(&last.t, i * (W - 1) + j, ssmt_get(&st.t, i * L + L - (W - 1) + j));
    snprintf(label, sizeof label, "conv forward == %lld updates (L=%lld): state", (long long) S, (long long) L);
    ssmt_check_close(label, &last.t, &fin.t, 0.0);
    ssmt_free(&out), ssmt_free(&fin), ssmt_free(&st), ssmt_free(&xs), ssmt_free(&steps), ssmt_free(&y), ssmt_free(&last);
    conv_free(&q);
}

/* Update with a slot pool, padding rows, a separate final state: CPU vs reference. */
static void test_conv_update_pool(ssmt_rng * rng, ssm_dtype dt) {
    const int64_t B = 5, D = 67, W = 4, L = 5, slots = 8;
    const int64_t sx[2] = { B, D }, sw[2] = { D, W }, sd[1] = { D }, sl[3] = { slots, D, L }, si[1] = { B };
    ssmt_host x = ssmt_alloc(dt, 2, sx), w = ssmt_alloc(SSM_DTYPE_F32, 2, sw), bias = ssmt_alloc(SSM_DTYPE_F32, 1, sd);
    ssmt_host st = ssmt_alloc(dt, 3, sl), idx = ssmt_alloc(SSM_DTYPE_I64, 1, si);
    ssmt_fill_normal(rng, &x.t, 0, 1), ssmt_fill_normal(rng, &w.t, 0, 0.5), ssmt_fill_normal(rng, &bias.t, 0, 0.5);
    ssmt_fill_normal(rng, &st.t, 0, 1);
    static const int ids[5] = { 6, -1, 0, 3, -2 };
    for (int b = 0; b < B; ++b) ssmt_set(&idx.t, b, ids[b]);
    ssm_conv1d_params p;
    ssm_conv1d_params_init(&p);
    ssm_causal_conv1d_update_args u = { 0 };
    u.x = x.t, u.weight = w.t, u.bias = bias.t, u.conv_state = st.t, u.state_batch_indices = idx.t;
    ssmt_host rout = ssmt_alloc(SSM_DTYPE_F64, 2, sx), rfin = ssmt_alloc(SSM_DTYPE_F64, 3, sl);
    u.out = rout.t, u.final_conv_state = rfin.t;
    TEST_CHECK_STATUS(ssm_causal_conv1d_update(ctx_ref, &p, &u), SSM_STATUS_OK);
    for (int v = 0; v < 2; ++v) {
        ssmt_host out = ssmt_alloc(dt, 2, sx), pool = ssmt_clone(&st.t, dt), fin = ssmt_alloc(dt, 3, sl);
        u.out = out.t;
        if (v == 0) u.conv_state = pool.t, u.final_conv_state = pool.t;
        else u.conv_state = st.t, u.final_conv_state = fin.t;
        TEST_CHECK_STATUS(ssm_causal_conv1d_update(ctx_cpu[2], &p, &u), SSM_STATUS_OK);
        char label[128];
        snprintf(label, sizeof label, "conv update pool %s %s: out", ssm_dtype_name(dt), v ? "separate" : "in place");
        ssmt_check_bar(label, &out.t, &rout.t, dt);
        snprintf(label, sizeof label, "conv update pool %s %s: state", ssm_dtype_name(dt), v ? "separate" : "in place");
        ssmt_check_close(label, v ? &fin.t : &pool.t, &rfin.t, 0.0); /* shifted copies: exact */
        TEST_CHECK(ssmt_get(&out.t, 1 * D + 3) == 0.0 && ssmt_get(&out.t, 4 * D) == 0.0, "padding rows give 0");
        ssmt_free(&out), ssmt_free(&pool), ssmt_free(&fin);
    }
    ssmt_free(&x), ssmt_free(&w), ssmt_free(&bias), ssmt_free(&st), ssmt_free(&idx), ssmt_free(&rout), ssmt_free(&rfin);
}

/* ---- gated RMSNorm -------------------------------------------------------------------------- */
typedef struct norm_problem {
    ssmt_host x, z, w, dout;
    int       has_z;
} norm_problem;

static void norm_make(ssmt_rng * rng, norm_problem * q, ssm_dtype dt, int64_t M, int64_t D, int has_z) {
    memset(q, 0, sizeof *q);
    const int64_t s2[2] = { M, D }, s1[1] = { D };
    q->x = ssmt_alloc(dt, 2, s2), q->dout = ssmt_alloc(dt, 2, s2);
    q->w = ssmt_alloc(dt == SSM_DTYPE_F64 ? SSM_DTYPE_F64 : SSM_DTYPE_F32, 1, s1);
    ssmt_fill_normal(rng, &q->x.t, 0, 1), ssmt_fill_normal(rng, &q->dout.t, 0, 1), ssmt_fill_uniform(rng, &q->w.t, 0.5, 1.5);
    q->has_z = has_z;
    if (has_z) {
        q->z = ssmt_alloc(dt, 2, s2);
        ssmt_fill_normal(rng, &q->z.t, 0, 1);
    }
}
static void norm_free(norm_problem * q) { ssmt_free(&q->x), ssmt_free(&q->z), ssmt_free(&q->w), ssmt_free(&q->dout); }

static double norm_loss_fn(const void * qv, const void * pv) {
    const norm_problem * q = qv;
    ssmt_host            out = ssmt_alloc(SSM_DTYPE_F64, 2, q->x.t.shape);
    ssm_rmsnorm_gated_args a = { 0 };
    a.x = q->x.t, a.z = q->z.t, a.weight = q->w.t, a.out = out.t;
    TEST_CHECK_STATUS(ssm_rmsnorm_gated(ctx_ref, pv, &a), SSM_STATUS_OK);
    const double l = dot(&out.t, &q->dout.t);
    ssmt_free(&out);
    return l;
}

static void test_norm(ssmt_rng * rng, ssm_dtype dt, int64_t M, int64_t D, int64_t gs, int nbg, int has_z, int fd) {
    norm_problem q;
    norm_make(rng, &q, fd ? SSM_DTYPE_F64 : dt, M, D, has_z);
    ssm_rmsnorm_params p;
    ssm_rmsnorm_params_init(&p);
    p.group_size = gs, p.norm_before_gate = nbg;
    char tag[128];
    snprintf(tag, sizeof tag, "rmsnorm M%lld D%lld gs%lld nbg%d z%d %s", (long long) M, (long long) D, (long long) gs,
             nbg, has_z, fd ? "ref-vs-FD" : ssm_dtype_name(dt));
    ssm_rmsnorm_gated_bwd_args g = { 0 };
    g.x = q.x.t, g.z = q.z.t, g.weight = q.w.t, g.dout = q.dout.t;
    ssmt_host r[3] = { ssmt_alloc(SSM_DTYPE_F64, 2, q.x.t.shape), ssmt_alloc(SSM_DTYPE_F64, 2, q.x.t.shape),
                       ssmt_alloc(SSM_DTYPE_F64, 1, q.w.t.shape) };
    g.dx = r[0].t, g.dweight = r[2].t;
    if (has_z) g.dz = r[1].t;
    TEST_CHECK_STATUS(ssm_rmsnorm_gated_bwd(ctx_ref, &p, &g), SSM_STATUS_OK);
    static const char * names[3] = { "dx", "dz", "dweight" };
    char                label[200];
    if (fd) {
        const ssm_tensor * ins[3] = { &q.x.t, &q.z.t, &q.w.t };
        for (int o = 0; o < 3; ++o) {
            if (o == 1 && !has_z) continue;
            ssmt_host fg;
            fd_grad(ins[o], &fg, norm_loss_fn, &q, &p);
            snprintf(label, sizeof label, "%s %s", tag, names[o]);
            ssmt_check_close(label, &r[o].t, &fg.t, 1e-8);
            ssmt_free(&fg);
        }
    } else {
        ssmt_host rout = ssmt_alloc(SSM_DTYPE_F64, 2, q.x.t.shape);
        ssm_rmsnorm_gated_args a = { 0 };
        a.x = q.x.t, a.z = q.z.t, a.weight = q.w.t, a.out = rout.t;
        TEST_CHECK_STATUS(ssm_rmsnorm_gated(ctx_ref, &p, &a), SSM_STATUS_OK);
        ssmt_host fo, f[3];
        memset(&fo, 0, sizeof fo), memset(f, 0, sizeof f);
        for (int th = 1; th <= 3; ++th) {
            ssmt_host out = ssmt_alloc(dt, 2, q.x.t.shape);
            a.out = out.t;
            TEST_CHECK_STATUS(ssm_rmsnorm_gated(ctx_cpu[th], &p, &a), SSM_STATUS_OK);
            ssmt_host c[3] = { ssmt_alloc(dt, 2, q.x.t.shape), ssmt_alloc(dt, 2, q.x.t.shape),
                               ssmt_alloc(SSM_DTYPE_F32, 1, q.w.t.shape) };
            g.dx = c[0].t, g.dweight = c[2].t, g.dz = has_z ? c[1].t : (ssm_tensor){ 0 };
            TEST_CHECK_STATUS(ssm_rmsnorm_gated_bwd(ctx_cpu[th], &p, &g), SSM_STATUS_OK);
            if (th == 1) {
                snprintf(label, sizeof label, "%s out", tag);
                ssmt_check_bar(label, &out.t, &rout.t, dt);
                for (int o = 0; o < 3; ++o) {
                    if (o == 1 && !has_z) continue;
                    snprintf(label, sizeof label, "%s %s", tag, names[o]);
                    ssmt_check_bar(label, &c[o].t, &r[o].t, dt);
                }
                fo = out;
                for (int o = 0; o < 3; ++o) f[o] = c[o];
            } else {
                TEST_CHECK(memcmp(fo.buf, out.buf, out.bytes) == 0, "%s out: %d threads differ", tag, th);
                for (int o = 0; o < 3; ++o)
                    if (o != 1 || has_z)
                        TEST_CHECK(memcmp(f[o].buf, c[o].buf, c[o].bytes) == 0, "%s %s: %d threads differ", tag,
                                   names[o], th);
                ssmt_free(&out);
                for (int o = 0; o < 3; ++o) ssmt_free(&c[o]);
            }
        }
        ssmt_free(&fo), ssmt_free(&rout);
        for (int o = 0; o < 3; ++o) ssmt_free(&f[o]);
    }
    for (int o = 0; o < 3; ++o) ssmt_free(&r[o]);
    norm_free(&q);
}

/* ---- validation -------------------------------------------------------------------------------- */
#define EXPECT(call, want, what)                                                                              \
    do {                                                                                                      \
        for (int be_ = 0; be_ < 2; ++be_) {                                                                   \
            ssm_context *    ctx_ = be_ ? ctx_ref : ctx_cpu[1];                                               \
            const ssm_status st_  = call;                                                                     \
            TEST_CHECK(st_ == (want), "%s: got %s (%s)", what, ssm_status_string(st_), ssm_context_last_error(ctx_)); \
        }                                                                                                     \
    } while (0)

static void test_validation(ssmt_rng * rng) {
    conv_problem q;
    conv_make(rng, &q, SSM_DTYPE_F32, 2, 5, 6, 3, 0, 1);
    ssm_conv1d_params p;
    ssm_conv1d_params_init(&p);
    TEST_CHECK(p.activation == 1 && p.size == sizeof p, "conv params defaults");
    const int64_t sf[3] = { 2, 5, 2 };
    ssmt_host     out = alloc_bds(SSM_DTYPE_F32, 2, 5, 6), fin = ssmt_alloc(SSM_DTYPE_F32, 3, sf);
    void *        snap = ssmt_snapshot(&out);
    ssm_causal_conv1d_args ok = conv_args(&q), a;
    ok.out = out.t, ok.final_states = fin.t;
    ssm_conv1d_params bp = p;
    bp.activation = 2;
    EXPECT(ssm_causal_conv1d(ctx_, &bp, &ok), SSM_STATUS_INVALID_ARGUMENT, "activation 2");
    bp = p, bp.size = 1;
    EXPECT(ssm_causal_conv1d(ctx_, &bp, &ok), SSM_STATUS_INVALID_ARGUMENT, "conv params size");
    EXPECT(ssm_causal_conv1d(ctx_, &p, NULL), SSM_STATUS_INVALID_ARGUMENT, "conv args NULL");
    a = ok, a.weight.shape[1] = 0;
    EXPECT(ssm_causal_conv1d(ctx_, &p, &a), SSM_STATUS_INVALID_SHAPE, "W = 0");
    a = ok, a.weight.shape[0] = 4;
    EXPECT(ssm_causal_conv1d(ctx_, &p, &a), SSM_STATUS_INVALID_SHAPE, "weight D");
    a = ok, a.bias.shape[0] = 4;
    EXPECT(ssm_causal_conv1d(ctx_, &p, &a), SSM_STATUS_INVALID_SHAPE, "bias D");
    a = ok, a.initial_states.shape[2] = 3;
    EXPECT(ssm_causal_conv1d(ctx_, &p, &a), SSM_STATUS_INVALID_SHAPE, "initial_states W-1");
    const int64_t ss[2] = { 2, 6 };
    ssmt_host     seq   = ssmt_alloc(SSM_DTYPE_I32, 2, ss);
    ssmt_fill_value(&seq.t, 0);
    a = ok, a.seq_idx = seq.t, a.final_states.data = NULL;
    EXPECT(ssm_causal_conv1d(ctx_, &p, &a), SSM_STATUS_INVALID_ARGUMENT, "seq_idx with initial_states");
    a = ok, a.seq_idx = seq.t, a.initial_states.data = NULL;
    EXPECT(ssm_causal_conv1d(ctx_, &p, &a), SSM_STATUS_INVALID_ARGUMENT, "seq_idx with final_states");
    a = ok, a.seq_idx = seq.t, a.seq_idx.dtype = SSM_DTYPE_F32, a.initial_states.data = NULL, a.final_states.data = NULL;
    EXPECT(ssm_causal_conv1d(ctx_, &p, &a), SSM_STATUS_INVALID_LAYOUT, "seq_idx dtype");
    a = ok, a.out.data = q.x.t.data;
    EXPECT(ssm_causal_conv1d(ctx_, &p, &a), SSM_STATUS_INVALID_LAYOUT, "out overlaps x");
    a = ok, a.final_states.data = out.t.data;
    EXPECT(ssm_causal_conv1d(ctx_, &p, &a), SSM_STATUS_INVALID_LAYOUT, "final overlaps out");
    TEST_CHECK(ssmt_unchanged(&out, snap), "conv: a failed call wrote out");
    /* backward */
    ssm_causal_conv1d_bwd_args g = conv_bwd_args(&q), gb;
    ssmt_host dx = alloc_bds(SSM_DTYPE_F32, 2, 5, 6);
    g.dx = dx.t;
    gb = g, gb.dout.shape[2] = 5;
    EXPECT(ssm_causal_conv1d_bwd(ctx_, &p, &gb), SSM_STATUS_INVALID_SHAPE, "dout shape");
    gb = g, gb.dbias = fin.t, gb.dbias.ndim = 1, gb.dbias.shape[0] = 5, gb.dbias.strides[0] = 1, gb.bias.data = NULL;
    EXPECT(ssm_causal_conv1d_bwd(ctx_, &p, &gb), SSM_STATUS_INVALID_ARGUMENT, "dbias without bias");
    gb = g, gb.dinitial_states = fin.t, gb.initial_states.data = NULL, gb.dfinal_states.data = NULL;
    EXPECT(ssm_causal_conv1d_bwd(ctx_, &p, &gb), SSM_STATUS_INVALID_ARGUMENT, "dinitial without initial");
    gb = g, gb.seq_idx = seq.t, gb.initial_states.data = NULL;
    EXPECT(ssm_causal_conv1d_bwd(ctx_, &p, &gb), SSM_STATUS_INVALID_ARGUMENT, "dfinal with seq_idx");
    gb = g, gb.dx.data = q.dout.t.data;
    EXPECT(ssm_causal_conv1d_bwd(ctx_, &p, &gb), SSM_STATUS_INVALID_LAYOUT, "dx overlaps dout");
    /* update */
    const int64_t sx[2] = { 2, 5 }, sl[3] = { 3, 5, 1 }, si[1] = { 2 };
    ssmt_host     x2 = ssmt_alloc(SSM_DTYPE_F32, 2, sx), o2 = ssmt_alloc(SSM_DTYPE_F32, 2, sx);
    ssmt_host     cs = ssmt_alloc(SSM_DTYPE_F32, 3, sl), idx = ssmt_alloc(SSM_DTYPE_I32, 1, si);
    ssmt_fill_value(&x2.t, 1), ssmt_fill_value(&cs.t, 1), ssmt_set(&idx.t, 0, 2), ssmt_set(&idx.t, 1, 0);
    ssm_causal_conv1d_update_args u = { 0 }, ub;
    u.x = x2.t, u.weight = q.w.t, u.conv_state = cs.t, u.state_batch_indices = idx.t, u.out = o2.t;
    EXPECT(ssm_causal_conv1d_update(ctx_, &p, &u), SSM_STATUS_INVALID_SHAPE, "conv state L < W-1");
    const int64_t sl2[3] = { 3, 5, 2 };
    ssmt_host     cs2    = ssmt_alloc(SSM_DTYPE_F32, 3, sl2);
    ssmt_fill_value(&cs2.t, 1);
    u.conv_state = cs2.t, u.final_conv_state = cs2.t;
    EXPECT(ssm_causal_conv1d_update(ctx_, &p, &u), SSM_STATUS_OK, "update in place");
    ub = u, ub.state_batch_indices.data = NULL;
    EXPECT(ssm_causal_conv1d_update(ctx_, &p, &ub), SSM_STATUS_INVALID_SHAPE, "update slots != B");
    ssmt_set(&idx.t, 1, 2);
    EXPECT(ssm_causal_conv1d_update(ctx_, &p, &u), SSM_STATUS_INVALID_ARGUMENT, "update duplicate slot");
    ssmt_set(&idx.t, 1, 3);
    EXPECT(ssm_causal_conv1d_update(ctx_, &p, &u), SSM_STATUS_INVALID_ARGUMENT, "update slot out of range");
    ssmt_set(&idx.t, 1, -1);
    ub = u, ub.final_conv_state.strides[0] = 11;
    EXPECT(ssm_causal_conv1d_update(ctx_, &p, &ub), SSM_STATUS_INVALID_LAYOUT, "update partial overlap");
    ub = u, ub.out.data = cs2.t.data;
    EXPECT(ssm_causal_conv1d_update(ctx_, &p, &ub), SSM_STATUS_INVALID_LAYOUT, "update out overlaps state");
    /* rmsnorm */
    norm_problem nq;
    norm_make(rng, &nq, SSM_DTYPE_F32, 3, 8, 1);
    ssm_rmsnorm_params np;
    ssm_rmsnorm_params_init(&np);
    TEST_CHECK(np.eps == 1e-5 && np.group_size == 0 && np.norm_before_gate == 0, "rmsnorm defaults");
    ssmt_host              no = ssmt_alloc(SSM_DTYPE_F32, 2, nq.x.t.shape);
    ssm_rmsnorm_gated_args na = { 0 }, nb;
    na.x = nq.x.t, na.z = nq.z.t, na.weight = nq.w.t, na.out = no.t;
    EXPECT(ssm_rmsnorm_gated(ctx_, &np, &na), SSM_STATUS_OK, "rmsnorm ok");
    ssm_rmsnorm_params bnp = np;
    bnp.group_size = 3;
    EXPECT(ssm_rmsnorm_gated(ctx_, &bnp, &na), SSM_STATUS_INVALID_ARGUMENT, "D % group_size");
    bnp = np, bnp.eps = 0.0;
    EXPECT(ssm_rmsnorm_gated(ctx_, &bnp, &na), SSM_STATUS_INVALID_ARGUMENT, "eps 0");
    bnp = np, bnp.eps = NAN;
    EXPECT(ssm_rmsnorm_gated(ctx_, &bnp, &na), SSM_STATUS_INVALID_ARGUMENT, "eps NaN");
    bnp = np, bnp.group_size = -1;
    EXPECT(ssm_rmsnorm_gated(ctx_, &bnp, &na), SSM_STATUS_INVALID_ARGUMENT, "group_size < 0");
    bnp = np, bnp.norm_before_gate = 2;
    EXPECT(ssm_rmsnorm_gated(ctx_, &bnp, &na), SSM_STATUS_INVALID_ARGUMENT, "norm_before_gate 2");
    nb = na, nb.weight.shape[0] = 7;
    EXPECT(ssm_rmsnorm_gated(ctx_, &np, &nb), SSM_STATUS_INVALID_SHAPE, "weight shape");
    nb = na, nb.z.shape[1] = 7;
    EXPECT(ssm_rmsnorm_gated(ctx_, &np, &nb), SSM_STATUS_INVALID_SHAPE, "z shape");
    nb = na, nb.out.data = nq.z.t.data;
    EXPECT(ssm_rmsnorm_gated(ctx_, &np, &nb), SSM_STATUS_INVALID_LAYOUT, "out overlaps z");
    ssm_rmsnorm_gated_bwd_args nbw = { 0 };
    nbw.x = nq.x.t, nbw.weight = nq.w.t, nbw.dout = nq.dout.t, nbw.dz = no.t;
    EXPECT(ssm_rmsnorm_gated_bwd(ctx_, &np, &nbw), SSM_STATUS_INVALID_ARGUMENT, "dz without z");
    free(snap);
    ssmt_free(&out), ssmt_free(&fin), ssmt_free(&seq), ssmt_free(&dx), ssmt_free(&x2), ssmt_free(&o2), ssmt_free(&cs);
    ssmt_free(&cs2), ssmt_free(&idx), ssmt_free(&no);
    norm_free(&nq);
    conv_free(&q);
}

int main(void) {
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261203u);
    ctx_ref = ssmt_make_ctx(SSM_BACKEND_REF, 1, SSM_ISA_AUTO);
    for (int t = 1; t <= 3; ++t) ctx_cpu[t] = ssmt_make_ctx(SSM_BACKEND_CPU, t, SSM_ISA_AUTO);
    TEST_CHECK(ctx_ref && ctx_cpu[1] && ctx_cpu[2] && ctx_cpu[3], "context creation failed");
    if (ssmt_failures) TEST_EXIT();
    for (int silu = 0; silu <= 1; ++silu) {
        test_conv_fd(&rng, silu, 0);
        test_conv_fd(&rng, silu, 1);
    }
    test_conv_cpu(&rng, SSM_DTYPE_F32, 2, 70, 130, 4, 0, 1);
    test_conv_cpu(&rng, SSM_DTYPE_F32, 3, 65, 131, 4, 1, 1);
    test_conv_cpu(&rng, SSM_DTYPE_BF16, 2, 33, 5, 2, 0, 0);
    test_conv_cpu(&rng, SSM_DTYPE_F16, 2, 130, 70, 3, 1, 1);
    test_conv_cpu(&rng, SSM_DTYPE_F32, 1, 9, 2, 4, 0, 1); /* S < W−1: final mixes initial states */
    test_conv_update_chain(&rng, 3);
    test_conv_update_chain(&rng, 6);
    test_conv_update_pool(&rng, SSM_DTYPE_F32);
    test_conv_update_pool(&rng, SSM_DTYPE_BF16);
    for (int nbg = 0; nbg <= 1; ++nbg) {
        test_norm(&rng, SSM_DTYPE_F64, 3, 12, 4, nbg, 1, 1);
        test_norm(&rng, SSM_DTYPE_F64, 2, 6, 0, nbg, 0, 1);
        test_norm(&rng, SSM_DTYPE_F32, 300, 96, 32, nbg, 1, 0);
        test_norm(&rng, SSM_DTYPE_BF16, 70, 64, 0, nbg, 1, 0);
        test_norm(&rng, SSM_DTYPE_F16, 9, 40, 8, nbg, 0, 0);
    }
    test_validation(&rng);
    for (int t = 1; t <= 3; ++t) ssm_context_free(ctx_cpu[t]);
    ssm_context_free(ctx_ref);
    TEST_EXIT();
}
