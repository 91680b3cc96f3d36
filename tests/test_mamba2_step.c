/*
 * test_mamba2_step.c — the Mamba-2 decode step.
 *  - upstream vectors (tests/data/mamba2_step): the reference to 1e-10, the CPU within the
 *    case dtype's bar, in place on the pool and into a separate final_state;
 *  - the CPU forward scan over S tokens equals S CPU steps (fp32, rel_rms ≤ 1e-5);
 *  - CPU against the reference for per-head and general forms, f32/f16/bf16 activations,
 *    f32/f16/bf16/f64 state pools with padding rows and unused slots, strided views;
 *    1, 2, 3 threads give identical bytes; the scalar ISA passes the same bars;
 *  - every validation rule, with outputs left untouched.
 * Seed: SSMOPS_TEST_SEED (default 20261202).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static ssm_context *ctx_ref, *ctx_cpu[4], *ctx_scalar;


/* ---- upstream vectors ----------------------------------------------------------------- */
static void run_vector(const char * name) {
    ssmt_case cs;
    if (ssmt_case_load(&cs, "mamba2_step", name) != 0) {
        TEST_CHECK(0, "cannot load case %s", name);
        return;
    }
    const int per_head = strcmp(name, "per_head_pool") == 0;
    ssmt_host x = ssmt_case_tensor(&cs, "x", cs.dtype), dt = ssmt_case_tensor(&cs, "dt", cs.dtype);
    ssmt_host a = ssmt_case_tensor(&cs, "a", SSM_DTYPE_F32), b = ssmt_case_tensor(&cs, "b", cs.dtype);
    ssmt_host c = ssmt_case_tensor(&cs, "c", cs.dtype), d = ssmt_case_tensor(&cs, "d", SSM_DTYPE_F32);
    ssmt_host bias = ssmt_case_tensor(&cs, "dt_bias", SSM_DTYPE_F32);
    ssmt_host z    = { 0 };
    if (ssmt_case_has(&cs, "z")) z = ssmt_case_tensor(&cs, "z", cs.dtype);
    ssmt_host idx  = ssmt_case_tensor(&cs, "state_batch_indices", SSM_DTYPE_I32);
    ssmt_host st   = ssmt_case_tensor(&cs, "state", SSM_DTYPE_F32);
    ssmt_host eout = ssmt_case_tensor(&cs, "out", SSM_DTYPE_F64);
    ssmt_host efin = ssmt_case_tensor(&cs, "final_state", SSM_DTYPE_F64);
    const int64_t B = x.t.shape[0], H = x.t.shape[1], P = x.t.shape[2], N = b.t.shape[2];
    ssm_mamba2_step_args args = { 0 };
    args.x = x.t, args.b = b.t, args.c = c.t, args.z = z.t, args.state_batch_indices = idx.t;
    if (per_head) { /* a (H), dt (B,H), dt_bias (H), d (H) as stride-0 views */
        const int64_t sa[3] = { H, P, N }, sdt[3] = { B, H, P }, shp[2] = { H, P };
        const int     ka[3] = { 1, 0, 0 }, kdt[3] = { 1, 1, 0 }, khp[2] = { 1, 0 };
        args.a = ssmt_broadcast(&a.t, 3, sa, ka), args.dt = ssmt_broadcast(&dt.t, 3, sdt, kdt);
        args.dt_bias = ssmt_broadcast(&bias.t, 2, shp, khp), args.d = ssmt_broadcast(&d.t, 2, shp, khp);
    } else {
        args.a = a.t, args.dt = dt.t, args.dt_bias = bias.t, args.d = d.t;
    }
    args.state = st.t;
    ssm_mamba2_params prm;
    ssm_mamba2_params_init(&prm);
    ssmt_case_mamba2_params(&cs, &prm);
    char label[200];
    /* reference into separate F64 outputs */
    {
        ssmt_host out = ssmt_alloc(SSM_DTYPE_F64, 3, x.t.shape), fin = ssmt_alloc(SSM_DTYPE_F64, 4, st.t.shape);
        ssm_mamba2_step_args r = args;
        r.out = out.t, r.final_state = fin.t;
        TEST_CHECK_STATUS(ssm_mamba2_step(ctx_ref, &prm, &r), SSM_STATUS_OK);
        snprintf(label, sizeof label, "vector %s ref out", name);
        ssmt_check_close(label, &out.t, &eout.t, 1e-10);
        snprintf(label, sizeof label, "vector %s ref final_state", name);
        ssmt_check_close(label, &fin.t, &efin.t, 1e-10);
        ssmt_free(&out), ssmt_free(&fin);
    }
    /* CPU, in place on a pool of the case dtype (values are exact in it) */
    for (int v = 0; v < 2; ++v) {
        const ssm_dtype sdt  = v == 0 ? SSM_DTYPE_F32 : cs.dtype;
        ssmt_host       pool = ssmt_clone(&st.t, sdt), out = ssmt_alloc(cs.dtype, 3, x.t.shape);
        ssm_mamba2_step_args r = args;
        r.state = pool.t, r.final_state = pool.t, r.out = out.t;
        TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[2], &prm, &r), SSM_STATUS_OK);
        snprintf(label, sizeof label, "vector %s cpu out (pool %s)", name, ssm_dtype_name(sdt));
        ssmt_check_bar(label, &out.t, &eout.t, cs.dtype);
        snprintf(label, sizeof label, "vector %s cpu pool in place (%s)", name, ssm_dtype_name(sdt));
        ssmt_check_bar(label, &pool.t, &efin.t, sdt == SSM_DTYPE_F32 ? cs.dtype : sdt);
        ssmt_free(&pool), ssmt_free(&out);
    }
    ssmt_free(&x), ssmt_free(&dt), ssmt_free(&a), ssmt_free(&b), ssmt_free(&c), ssmt_free(&d), ssmt_free(&bias);
    ssmt_free(&z), ssmt_free(&idx), ssmt_free(&st), ssmt_free(&eout), ssmt_free(&efin);
}

/* ---- random problems -------------------------------------------------------------------- */
typedef struct step_problem {
    int64_t   B, H, P, N, G, slots;
    ssmt_host x, dt, a, b, c, d, z, bias, idx, state;
    ssm_mamba2_step_args args; /* inputs only */
} step_problem;

static void problem_free(step_problem * q) {
    ssmt_free(&q->x), ssmt_free(&q->dt), ssmt_free(&q->a), ssmt_free(&q->b), ssmt_free(&q->c), ssmt_free(&q->d);
    ssmt_free(&q->z), ssmt_free(&q->bias), ssmt_free(&q->idx), ssmt_free(&q->state);
}

/* per_head: a, dt, dt_bias, d per head through stride-0 views; else full tensors. */
static void problem_make(ssmt_rng * rng, step_problem * q, int64_t B, int64_t H, int64_t P, int64_t N, int64_t G,
                         int64_t slots, ssm_dtype dtype, ssm_dtype sdt, int per_head, int with_idx, int opt,
                         int strided) {
    memset(q, 0, sizeof *q);
    q->B = B, q->H = H, q->P = P, q->N = N, q->G = G, q->slots = with_idx ? slots : B;
    const int64_t sx[3] = { B, H, P }, sb[3] = { B, G, N }, sa[3] = { H, P, N }, shp[2] = { H, P };
    const int64_t sst[4] = { q->slots, H, P, N };
    static const int32_t rev3[3] = { 2, 1, 0 };
    q->x = strided ? ssmt_alloc_layout(dtype, 3, sx, rev3, 1) : ssmt_alloc(dtype, 3, sx);
    q->b = ssmt_alloc(dtype, 3, sb), q->c = strided ? ssmt_alloc_layout(dtype, 3, sb, NULL, 3) : ssmt_alloc(dtype, 3, sb);
    ssmt_fill_normal(rng, &q->x.t, 0, 1), ssmt_fill_normal(rng, &q->b.t, 0, 1), ssmt_fill_normal(rng, &q->c.t, 0, 1);
    q->state = strided ? ssmt_alloc_layout(sdt, 4, sst, NULL, 2) : ssmt_alloc(sdt, 4, sst);
    ssmt_fill_normal(rng, &q->state.t, 0, 1);
    ssm_mamba2_step_args * a = &q->args;
    a->x = q->x.t, a->b = q->b.t, a->c = q->c.t, a->state = q->state.t;
    if (per_head) {
        const int64_t s1[1] = { H }, s2[2] = { B, H };
        q->a = ssmt_alloc(SSM_DTYPE_F32, 1, s1), q->dt = ssmt_alloc(dtype, 2, s2);
        q->bias = ssmt_alloc(SSM_DTYPE_F32, 1, s1), q->d = ssmt_alloc(SSM_DTYPE_F32, 1, s1);
        const int ka[3] = { 1, 0, 0 }, kdt[3] = { 1, 1, 0 }, khp[2] = { 1, 0 };
        a->a = ssmt_broadcast(&q->a.t, 3, sa, ka), a->dt = ssmt_broadcast(&q->dt.t, 3, sx, kdt);
        a->dt_bias = ssmt_broadcast(&q->bias.t, 2, shp, khp), a->d = ssmt_broadcast(&q->d.t, 2, shp, khp);
    } else {
        q->a = ssmt_alloc(SSM_DTYPE_F32, 3, sa), q->dt = ssmt_alloc(dtype, 3, sx);
        q->bias = ssmt_alloc(SSM_DTYPE_F32, 2, shp), q->d = ssmt_alloc(SSM_DTYPE_F32, 2, shp);
        a->a = q->a.t, a->dt = q->dt.t, a->dt_bias = q->bias.t, a->d = q->d.t;
    }
    ssmt_fill_uniform(rng, &q->a.t, -8.0, -0.5), ssmt_fill_uniform(rng, &q->dt.t, -3.0, 1.0);
    ssmt_fill_uniform(rng, &q->bias.t, -2.0, 0.0), ssmt_fill_normal(rng, &q->d.t, 0, 1);
    if (!(opt & 1)) a->d.data = NULL;
    if (!(opt & 2)) a->dt_bias.data = NULL;
    if (opt & 4) {
        q->z = ssmt_alloc(dtype, 3, sx);
        ssmt_fill_normal(rng, &q->z.t, 0, 1);
        a->z = q->z.t;
    }
    if (with_idx) { /* a random permutation of slots, every third row padding */
        const int64_t si[1] = { B };
        q->idx = ssmt_alloc((B % 2) ? SSM_DTYPE_I64 : SSM_DTYPE_I32, 1, si);
        int64_t * perm = malloc((size_t) slots * sizeof(int64_t));
        for (int64_t s = 0; s < slots; ++s) perm[s] = s;
        for (int64_t s = slots - 1; s > 0; --s) {
            const int64_t j = ssmt_randint(rng, 0, s), t = perm[s];
            perm[s] = perm[j], perm[j] = t;
        }
        for (int64_t r = 0; r < B; ++r) ssmt_set(&q->idx.t, r, (r % 3 == 1) ? -1 : (double) perm[r]);
        free(perm);
        a->state_batch_indices = q->idx.t;
    }
}

/* CPU (every thread count, scalar ISA) against the reference; in place and separate. */
static void check_problem(const step_problem * q, const ssm_mamba2_params * prm, ssm_dtype compute, const char * tag) {
    ssm_mamba2_step_args r = q->args;
    ssmt_host rout = ssmt_alloc(SSM_DTYPE_F64, 3, q->x.t.shape), rfin = ssmt_alloc(SSM_DTYPE_F64, 4, q->state.t.shape);
    r.out = rout.t, r.final_state = rfin.t;
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_ref, prm, &r), SSM_STATUS_OK);
    /* the bar of the state: the pool is rounded to its own dtype */
    const ssm_dtype sdt = (ssm_dtype) q->state.t.dtype;
    ssm_dtype       pool_bar = compute;
    if (sdt == SSM_DTYPE_BF16 || (sdt == SSM_DTYPE_F16 && pool_bar != SSM_DTYPE_BF16)) pool_bar = sdt;
    void * first_out = NULL, *first_pool = NULL;
    size_t out_bytes = 0, pool_bytes = 0;
    char   label[256];
    for (int v = 0; v < 5; ++v) {
        ssm_context * ctx = v == 3 ? ctx_scalar : ctx_cpu[v == 4 ? 2 : v + 1];
        const int     in_place = v != 4;
        ssmt_host     out  = ssmt_alloc((ssm_dtype) q->x.t.dtype, 3, q->x.t.shape);
        ssmt_host     pool = ssmt_clone(&q->state.t, sdt); /* contiguous copy of the pool */
        ssmt_host     fin  = ssmt_alloc(sdt, 4, q->state.t.shape);
        ssm_mamba2_step_args c = q->args;
        c.out = out.t;
        if (in_place) c.state = pool.t, c.final_state = pool.t;
        else c.final_state = fin.t;
        const ssm_status st = ssm_mamba2_step(ctx, prm, &c);
        TEST_CHECK(st == SSM_STATUS_OK, "%s v%d: %s", tag, v, ssm_context_last_error(ctx));
        const ssmt_host * res = in_place ? &pool : &fin;
        if (v == 0 || v >= 3) {
            snprintf(label, sizeof label, "%s out %s", tag, v == 3 ? "scalar" : v == 4 ? "separate" : "cpu");
            ssmt_check_bar(label, &out.t, &rout.t, compute);
            snprintf(label, sizeof label, "%s final %s", tag, v == 3 ? "scalar" : v == 4 ? "separate" : "cpu");
            ssmt_check_bar(label, &res->t, &rfin.t, pool_bar);
        }
        if (v == 0) {
            first_out = malloc(out.bytes), first_pool = malloc(pool.bytes);
            memcpy(first_out, out.buf, out.bytes), memcpy(first_pool, pool.buf, pool.bytes);
            out_bytes = out.bytes, pool_bytes = pool.bytes;
        } else if (v < 3 || v == 4) {
            TEST_CHECK(memcmp(first_out, out.buf, out_bytes) == 0, "%s: out differs (variant %d)", tag, v);
            TEST_CHECK(memcmp(first_pool, res->buf, pool_bytes) == 0, "%s: pool differs (variant %d)", tag, v);
        }
        ssmt_free(&out), ssmt_free(&pool), ssmt_free(&fin);
    }
    free(first_out), free(first_pool);
    ssmt_free(&rout), ssmt_free(&rfin);
}

static void test_random(ssmt_rng * rng) {
    static const ssm_dtype dts[3]  = { SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16 };
    static const ssm_dtype sdts[4] = { SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16, SSM_DTYPE_F64 };
    static const int64_t   shp[4][5] = { { 3, 4, 8, 16, 2 }, { 5, 6, 5, 19, 3 }, { 2, 2, 64, 128, 1 }, { 7, 4, 3, 8, 4 } };
    for (int k = 0; k < 24; ++k) {
        const int64_t * s = shp[k % 4];
        step_problem    q;
        const int       per_head = k % 2, with_idx = (k % 3) != 0, strided = (k % 5) == 3;
        problem_make(rng, &q, s[0], s[1], s[2], s[3], s[4], s[0] + 2, dts[k % 3], sdts[(k / 3) % 4], per_head, with_idx,
                     k % 8, strided);
        ssm_mamba2_params prm;
        ssm_mamba2_params_init(&prm);
        prm.dt_softplus = (k % 4) != 1;
        if (k % 6 == 5) prm.dt_limit_lo = 0.05, prm.dt_limit_hi = 0.3;
        char tag[160];
        snprintf(tag, sizeof tag, "rand%d B%lld H%lld P%lld N%lld G%lld %s pool %s %s%s%s", k, (long long) s[0],
                 (long long) s[1], (long long) s[2], (long long) s[3], (long long) s[4], ssm_dtype_name(dts[k % 3]),
                 ssm_dtype_name(sdts[(k / 3) % 4]), per_head ? "head" : "general", with_idx ? " idx" : "",
                 strided ? " strided" : "");
        check_problem(&q, &prm, dts[k % 3], tag);
        problem_free(&q);
    }
}

/* N = 0: no state, y = D·x (gated); a is empty and is given as a 1-byte buffer, so a read of
 * a[h, p, 0] is a heap overflow under ASan (a step must not read it for the decay). */
static void test_empty_state(ssmt_rng * rng) {
    for (int per_head = 0; per_head < 2; ++per_head) {
        step_problem q;
        problem_make(rng, &q, 3, 2, 5, 0, 1, 4, SSM_DTYPE_F32, SSM_DTYPE_F32, per_head, 1, 7, 0);
        void * tiny = malloc(1);
        TEST_CHECK(tiny != NULL, "malloc(1)");
        const int64_t sa[3] = { 2, 5, 0 };
        ssm_tensor    ea    = q.args.a;
        ea.data = tiny, ea.ndim = 3;
        for (int i = 0; i < 3; ++i) ea.shape[i] = sa[i], ea.strides[i] = 0;
        q.args.a = ea;
        ssm_mamba2_params prm;
        ssm_mamba2_params_init(&prm);
        prm.dt_softplus = 1;
        check_problem(&q, &prm, SSM_DTYPE_F32, per_head ? "N=0 per-head" : "N=0 general");
        free(tiny);
        problem_free(&q);
    }
}

/* ---- forward scan == S steps --------------------------------------------------------------- */
static void test_scan_equals_steps(ssmt_rng * rng, int general) {
    ssmt_mamba2_config cfg;
    ssmt_mamba2_config_init(&cfg);
    cfg.batch = 2, cfg.seqlen = 37, cfg.nheads = 4, cfg.headdim = 16, cfg.dstate = 32, cfg.ngroups = 2;
    cfg.d_mode = 1, cfg.has_z = 1, cfg.has_dt_bias = 1, cfg.has_initial = 1, cfg.has_final = 1, cfg.dt_softplus = 1;
    ssmt_mamba2_problem pr;
    if (ssmt_mamba2_random_args(rng, &cfg, &pr) != 0) {
        TEST_CHECK(0, "problem");
        return;
    }
    ssm_mamba2_params prm;
    ssm_mamba2_params_init(&prm);
    prm.chunk_size = 16, prm.dt_softplus = 1, prm.dt_limit_lo = 0.004, prm.dt_limit_hi = 0.08; /* clamps some */
    TEST_CHECK_STATUS(ssm_mamba2_scan(ctx_cpu[2], &prm, &pr.args, NULL, 0), SSM_STATUS_OK);
    const int64_t B = cfg.batch, S = cfg.seqlen, H = cfg.nheads, P = cfg.headdim, N = cfg.dstate, G = cfg.ngroups;
    /* the steps: pool = initial states (fp32), per-token views of x, dt, b, c, z */
    ssmt_host pool = ssmt_clone(&pr.initial_states.t, SSM_DTYPE_F32);
    const int64_t so[4] = { B, S, H, P };
    ssmt_host     outs = ssmt_alloc(SSM_DTYPE_F32, 4, so);
    ssmt_host     afull = { 0 }, dfull = { 0 }, bfull = { 0 };
    const int64_t sa[3] = { H, P, N }, shp[2] = { H, P };
    if (general) { /* the same values as full tensors: the general (per-element exp) path */
        afull = ssmt_alloc(SSM_DTYPE_F32, 3, sa), dfull = ssmt_alloc(SSM_DTYPE_F32, 2, shp);
        bfull = ssmt_alloc(SSM_DTYPE_F32, 2, shp);
        for (int64_t i = 0; i < H * P * N; ++i) ssmt_set(&afull.t, i, ssmt_get(&pr.a.t, i / (P * N)));
        for (int64_t i = 0; i < H * P; ++i) {
            ssmt_set(&dfull.t, i, ssmt_get(&pr.d.t, i / P));
            ssmt_set(&bfull.t, i, ssmt_get(&pr.dt_bias.t, i / P));
        }
    }
    for (int64_t t = 0; t < S; ++t) {
        ssm_mamba2_step_args a = { 0 };
        a.x = pr.x.t, a.x.ndim = 3;
        a.x.data = (char *) pr.x.t.data + t * pr.x.t.strides[1] * ssm_dtype_size(pr.x.t.dtype);
        a.x.shape[0] = B, a.x.shape[1] = H, a.x.shape[2] = P;
        a.x.strides[0] = pr.x.t.strides[0], a.x.strides[1] = pr.x.t.strides[2], a.x.strides[2] = pr.x.t.strides[3];
        a.z = a.x, a.z.data = (char *) pr.z.t.data + t * pr.z.t.strides[1] * ssm_dtype_size(pr.z.t.dtype);
        a.z.strides[0] = pr.z.t.strides[0], a.z.strides[1] = pr.z.t.strides[2], a.z.strides[2] = pr.z.t.strides[3];
        a.out = a.x, a.out.data = (float *) outs.t.data + t * H * P;
        a.out.strides[0] = S * H * P, a.out.strides[1] = P, a.out.strides[2] = 1;
        a.dt = pr.dt.t, a.dt.data = (char *) pr.dt.t.data + t * pr.dt.t.strides[1] * ssm_dtype_size(pr.dt.t.dtype);
        a.dt.shape[0] = B, a.dt.shape[1] = H, a.dt.shape[2] = P;
        a.dt.strides[0] = pr.dt.t.strides[0], a.dt.strides[1] = pr.dt.t.strides[2], a.dt.strides[2] = 0;
        ssm_tensor bt = pr.b.t;
        bt.ndim = 3, bt.data = (char *) pr.b.t.data + t * pr.b.t.strides[1] * ssm_dtype_size(pr.b.t.dtype);
        bt.shape[0] = B, bt.shape[1] = G, bt.shape[2] = N;
        bt.strides[0] = pr.b.t.strides[0], bt.strides[1] = pr.b.t.strides[2], bt.strides[2] = pr.b.t.strides[3];
        a.b = bt;
        a.c = bt, a.c.data = (char *) pr.c.t.data + t * pr.c.t.strides[1] * ssm_dtype_size(pr.c.t.dtype);
        a.c.strides[0] = pr.c.t.strides[0], a.c.strides[1] = pr.c.t.strides[2], a.c.strides[2] = pr.c.t.strides[3];
        if (general) {
            a.a = afull.t, a.d = dfull.t, a.dt_bias = bfull.t;
        } else {
            const int ka[3] = { 1, 0, 0 }, khp[2] = { 1, 0 };
            a.a = ssmt_broadcast(&pr.a.t, 3, sa, ka), a.d = ssmt_broadcast(&pr.d.t, 2, shp, khp);
            a.dt_bias = ssmt_broadcast(&pr.dt_bias.t, 2, shp, khp);
        }
        a.state = pool.t, a.final_state = pool.t;
        const ssm_status st = ssm_mamba2_step(t % 2 ? ctx_cpu[1] : ctx_cpu[2], &prm, &a);
        TEST_CHECK(st == SSM_STATUS_OK, "step t=%lld: %s", (long long) t, ssm_context_last_error(ctx_cpu[1]));
    }
    char label[128];
    snprintf(label, sizeof label, "scan == %lld steps (%s): out", (long long) S, general ? "general" : "per head");
    ssmt_check_close(label, &outs.t, &pr.out.t, 1e-5);
    snprintf(label, sizeof label, "scan == %lld steps (%s): final", (long long) S, general ? "general" : "per head");
    ssmt_check_close(label, &pool.t, &pr.final_states.t, 1e-5);
    ssmt_free(&pool), ssmt_free(&outs), ssmt_free(&afull), ssmt_free(&dfull), ssmt_free(&bfull);
    ssmt_mamba2_problem_free(&pr);
}

/* ---- validation ------------------------------------------------------------------------------ */
static void expect_fail(const char * what, const ssm_mamba2_step_args * a, const ssm_mamba2_params * prm,
                        ssm_status want, const ssmt_host * out, const ssmt_host * pool) {
    void * so = ssmt_snapshot(out), *sp = ssmt_snapshot(pool);
    for (int be = 0; be < 2; ++be) {
        ssm_context *    ctx = be ? ctx_ref : ctx_cpu[1];
        const ssm_status st  = ssm_mamba2_step(ctx, prm, a);
        TEST_CHECK(st == want, "%s: got %s, want %s (%s)", what, ssm_status_string(st), ssm_status_string(want),
                   ssm_context_last_error(ctx));
        TEST_CHECK(strlen(ssm_context_last_error(ctx)) > 10, "%s: no message", what);
    }
    TEST_CHECK(ssmt_unchanged(out, so) && ssmt_unchanged(pool, sp), "%s: an output was written", what);
    free(so), free(sp);
}

static void test_validation(ssmt_rng * rng) {
    step_problem q;
    problem_make(rng, &q, 4, 4, 8, 16, 2, 6, SSM_DTYPE_F32, SSM_DTYPE_F32, 1, 1, 7, 0);
    ssmt_host out = ssmt_alloc(SSM_DTYPE_F32, 3, q.x.t.shape);
    ssmt_host pool = ssmt_clone(&q.state.t, SSM_DTYPE_F32);
    ssm_mamba2_params prm;
    ssm_mamba2_params_init(&prm);
    ssm_mamba2_step_args ok = q.args;
    ok.out = out.t, ok.state = pool.t, ok.final_state = pool.t;
    ssm_mamba2_step_args a;
    {   /* a valid call works */
        ssmt_host o2 = ssmt_alloc(SSM_DTYPE_F32, 3, q.x.t.shape), p2 = ssmt_clone(&q.state.t, SSM_DTYPE_F32);
        a = ok, a.out = o2.t, a.state = p2.t, a.final_state = p2.t;
        TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[1], &prm, &a), SSM_STATUS_OK);
        a.final_state.data = NULL; /* no final_state: the pool is only read */
        TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[1], &prm, &a), SSM_STATUS_OK);
        ssmt_free(&o2), ssmt_free(&p2);
    }
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[1], NULL, &ok), SSM_STATUS_INVALID_ARGUMENT);
    TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[1], &prm, NULL), SSM_STATUS_INVALID_ARGUMENT);
    ssm_mamba2_params bad = prm;
    bad.size = 4;
    expect_fail("params size", &ok, &bad, SSM_STATUS_INVALID_ARGUMENT, &out, &pool);
    bad = prm, bad.dt_limit_lo = 1.0, bad.dt_limit_hi = 0.5;
    expect_fail("dt_limit lo > hi", &ok, &bad, SSM_STATUS_INVALID_ARGUMENT, &out, &pool);
    bad = prm, bad.dt_limit_hi = NAN;
    expect_fail("dt_limit NaN", &ok, &bad, SSM_STATUS_INVALID_ARGUMENT, &out, &pool);
    a = ok, a.x.data = NULL;
    expect_fail("x missing", &a, &prm, SSM_STATUS_INVALID_ARGUMENT, &out, &pool);
    a = ok, a.x.ndim = 4;
    expect_fail("x ndim", &a, &prm, SSM_STATUS_INVALID_SHAPE, &out, &pool);
    a = ok, a.x.dtype = SSM_DTYPE_I32;
    expect_fail("x dtype", &a, &prm, SSM_STATUS_INVALID_LAYOUT, &out, &pool);
    a = ok, a.dt.shape[2] = 7;
    expect_fail("dt shape", &a, &prm, SSM_STATUS_INVALID_SHAPE, &out, &pool);
    a = ok, a.a.shape[2] = 15;
    expect_fail("a shape", &a, &prm, SSM_STATUS_INVALID_SHAPE, &out, &pool);
    a = ok, a.b.shape[1] = 3;
    expect_fail("H % G", &a, &prm, SSM_STATUS_INVALID_SHAPE, &out, &pool);
    a = ok, a.c.shape[2] = 8;
    expect_fail("c shape", &a, &prm, SSM_STATUS_INVALID_SHAPE, &out, &pool);
    a = ok, a.d.shape[1] = 9;
    expect_fail("d shape", &a, &prm, SSM_STATUS_INVALID_SHAPE, &out, &pool);
    a = ok, a.z.shape[0] = 3;
    expect_fail("z shape", &a, &prm, SSM_STATUS_INVALID_SHAPE, &out, &pool);
    a = ok, a.dt_bias.ndim = 1;
    expect_fail("dt_bias ndim", &a, &prm, SSM_STATUS_INVALID_SHAPE, &out, &pool);
    a = ok, a.state.shape[3] = 8, a.final_state.shape[3] = 8;
    expect_fail("state shape", &a, &prm, SSM_STATUS_INVALID_SHAPE, &out, &pool);
    a = ok, a.out.shape[2] = 4;
    expect_fail("out shape", &a, &prm, SSM_STATUS_INVALID_SHAPE, &out, &pool);
    a = ok, a.final_state.shape[0] = 5;
    expect_fail("final_state shape", &a, &prm, SSM_STATUS_INVALID_SHAPE, &out, &pool);
    a = ok, a.state_batch_indices.dtype = SSM_DTYPE_F32;
    expect_fail("index dtype", &a, &prm, SSM_STATUS_INVALID_LAYOUT, &out, &pool);
    a = ok, a.state_batch_indices.shape[0] = 3;
    expect_fail("index shape", &a, &prm, SSM_STATUS_INVALID_SHAPE, &out, &pool);
    a = ok, a.state_batch_indices.data = NULL; /* slots (6) != B (4) without indices */
    expect_fail("slots != B", &a, &prm, SSM_STATUS_INVALID_SHAPE, &out, &pool);
    {   /* index values */
        ssmt_host idx = ssmt_clone(&q.idx.t, (ssm_dtype) q.idx.t.dtype);
        a = ok, a.state_batch_indices = idx.t;
        ssmt_set(&idx.t, 0, 6);
        expect_fail("index == slots", &a, &prm, SSM_STATUS_INVALID_ARGUMENT, &out, &pool);
        ssmt_set(&idx.t, 0, ssmt_get(&q.idx.t, 2));
        expect_fail("duplicate slot", &a, &prm, SSM_STATUS_INVALID_ARGUMENT, &out, &pool);
        ssmt_set(&idx.t, 0, -1), ssmt_set(&idx.t, 2, -7); /* two padding rows are fine */
        ssmt_host o2 = ssmt_alloc(SSM_DTYPE_F32, 3, q.x.t.shape), p2 = ssmt_clone(&q.state.t, SSM_DTYPE_F32);
        a.out = o2.t, a.state = p2.t, a.final_state = p2.t;
        TEST_CHECK_STATUS(ssm_mamba2_step(ctx_cpu[1], &prm, &a), SSM_STATUS_OK);
        TEST_CHECK(ssmt_get(&o2.t, 0) == 0.0 && ssmt_get(&o2.t, 2 * 4 * 8 + 5) == 0.0, "padding rows give 0");
        ssmt_free(&o2), ssmt_free(&p2), ssmt_free(&idx);
    }
    /* aliasing */
    a = ok, a.final_state.strides[0] += 1; /* overlaps the pool without being the same view */
    expect_fail("final_state overlaps state", &a, &prm, SSM_STATUS_INVALID_LAYOUT, &out, &pool);
    a = ok, a.out.data = pool.t.data;
    expect_fail("out overlaps state", &a, &prm, SSM_STATUS_INVALID_LAYOUT, &out, &pool);
    a = ok, a.out.data = q.x.t.data;
    expect_fail("out overlaps x", &a, &prm, SSM_STATUS_INVALID_LAYOUT, &out, &pool);
    a = ok, a.final_state.strides[3] = 0;
    expect_fail("final_state stride 0", &a, &prm, SSM_STATUS_INVALID_LAYOUT, &out, &pool);
    a = ok, a.dt.data = pool.t.data; /* an input inside the in-place pool */
    expect_fail("final_state overlaps dt", &a, &prm, SSM_STATUS_INVALID_LAYOUT, &out, &pool);
    a = ok, a.x.device.type = SSM_DEVICE_CUDA;
    expect_fail("x on CUDA", &a, &prm, SSM_STATUS_INVALID_LAYOUT, &out, &pool);
    ssmt_free(&out), ssmt_free(&pool);
    problem_free(&q);
}

int main(void) {
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261202u);
    if (!ssmt_make_cpu_ctxs(&ctx_ref, ctx_cpu, &ctx_scalar)) TEST_EXIT();
    run_vector("per_head_pool");
    run_vector("general_bf16_noz");
    test_scan_equals_steps(&rng, 0);
    test_scan_equals_steps(&rng, 1);
    test_random(&rng);
    test_empty_state(&rng);
    test_validation(&rng);
    ssmt_free_cpu_ctxs(ctx_ref, ctx_cpu, ctx_scalar);
    TEST_EXIT();
}
