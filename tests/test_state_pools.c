/*
 * test_state_pools.c — the state pools of the sequence operators (mamba2_scan, causal_conv1d,
 * mamba3_siso, mamba3_mimo: initial_state_indices / final_state_indices) on REF and CPU.
 *
 * Every fixture of those operators with dense initial and final states becomes a pooled
 * call: the initial rows are placed at chosen slots of a padded pool of random values
 * (zeros in the dense call where the index is negative), the final rows go to chosen slots
 * of another padded pool, or of the same pool (in place). The pooled call must give the
 * dense call's bytes — out, and each final row at its slot — and leave every other slot and
 * byte of the pools as it was; REF against CPU within the bars; identical bytes for 1 and 3
 * threads. Invalid indices (out of range, a final slot twice, a slot read by one sequence
 * and written by another in place, a length that is not NS, indices without their pool)
 * fail and write nothing. causal_conv1d with cu_seqlens (empty sequences too) is checked
 * against one call per sequence, alone and with an in-place pool.
 * Built with SSMT_POOLS_ON_CUDA (test_cuda_state_pools.c) the same checks run on the CUDA
 * backend: every tensor of a call is copied to device memory (an in-place pair shares one
 * copy), the call runs there and the outputs come back; the second backend is CUDA (against
 * REF within the bars of the fixture's input dtype) and the third a second CUDA run, with the
 * index tensors in device memory, that must give the first run's bytes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/fixtures.h"
#include "common/testutil.h"
#ifdef SSMT_POOLS_ON_CUDA
#include "common/cudautil.h"
#endif

#define MAXP 4

typedef struct pool_names {
    const char * op;
    const char * initial[MAXP];
    const char * final[MAXP];
} pool_names;

static const pool_names names[] = {
    {"mamba2_scan", {"initial_states"}, {"final_states"}},
    {"causal_conv1d", {"initial_states"}, {"final_states"}},
    {"mamba3_siso",
     {"angle_state", "ssm_state", "k_state", "v_state"},
     {"final_angle_state", "final_ssm_state", "final_k_state", "final_v_state"}},
    {"mamba3_mimo",
     {"angle_state", "ssm_state", "k_state", "v_state"},
     {"final_angle_state", "final_ssm_state", "final_k_state", "final_v_state"}},
};

static const pool_names * names_of(const char * op) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (strcmp(names[i].op, op) == 0) return &names[i];
    return NULL;
}

static ssm_tensor * field(const ssmt_fixture * f, const char * name) {
    const ssm_op_info * info = ssm_op_get(ssm_op_find(f->op));
    for (int32_t i = 0; i < info->nargs; ++i)
        if (strcmp(info->args[i].name, name) == 0)
            return (ssm_tensor *)(void *)((char *)&f->args + info->args[i].offset);
    return NULL;
}

/* ---- running a call on a backend ------------------------------------------------------- */

static ssm_context * g_cuda; /* the CUDA context (SSMT_POOLS_ON_CUDA), else NULL */

#ifdef SSMT_POOLS_ON_CUDA
static const ssmt_fixture * g_fixture; /* the fixture run_fixture_args runs */
static ssm_status           run_fixture_args(ssm_context * ctx, void * args) {
    ssmt_fixture f = *g_fixture;
    memcpy(&f.args, args, ssm_op_get(ssm_op_find(f.op))->args_size);
    return ssmt_fixture_run(ctx, &f);
}
#endif

/* The fixture's call on ctx (on the CUDA context: on device copies, dev_idx: the index tensors
 * too). */
static ssm_status run_fixture(ssm_context * ctx, const ssmt_fixture * f, int dev_idx) {
#ifdef SSMT_POOLS_ON_CUDA
    if (ctx == g_cuda) {
        g_fixture = f;
        return ssmt_run_on_device(ctx, f->op, &f->args, dev_idx, run_fixture_args);
    }
#endif
    (void)dev_idx;
    return ssmt_fixture_run(ctx, f);
}

static ssm_conv1d_params g_conv_params;
#ifdef SSMT_POOLS_ON_CUDA
static ssm_status run_conv_args(ssm_context * ctx, void * args) { return ssm_causal_conv1d(ctx, &g_conv_params, args); }
#endif
/* causal_conv1d on ctx (on the CUDA context: on device copies, the index tensors too). */
static ssm_status run_conv(ssm_context * ctx, const ssm_causal_conv1d_args * a) {
#ifdef SSMT_POOLS_ON_CUDA
    if (ctx == g_cuda) return ssmt_run_on_device(ctx, "causal_conv1d", a, 1, run_conv_args);
#endif
    return ssm_causal_conv1d(ctx, &g_conv_params, a);
}

/* The bar a backend's result meets against REF: the fixture's input dtype on CUDA (its
 * 16-bit paths), fp32 on the CPU; rounded when the result is 16-bit. */
static void check_bar_of(const ssmt_fixture * f, const char * what, const ssm_tensor * got, const ssm_tensor * ref,
                         ssm_dtype stored) {
    ssm_dtype compute = SSM_DTYPE_F32;
#ifdef SSMT_POOLS_ON_CUDA
    const ssm_op_info * info = ssm_op_get(ssm_op_find(f->op));
    const ssm_tensor *  first = (const ssm_tensor *)(const void *)((const char *)&f->args + info->args[0].offset);
    if (first->dtype == SSM_DTYPE_F16 || first->dtype == SSM_DTYPE_BF16) compute = (ssm_dtype)first->dtype;
#else
    (void)f;
#endif
    if (stored == SSM_DTYPE_F16 || stored == SSM_DTYPE_BF16)
        ssmt_check_bar_rounded(what, got, ref, compute);
    else
        ssmt_check_bar(what, got, ref, compute);
}

/* A pooled problem built around a fixture: pools, indices, and the dense call's outputs. */
typedef struct pooled {
    int        npairs;
    int64_t    ns, slots;
    ssm_tensor dense_init[MAXP], dense_fin[MAXP];
    ssmt_host  dense_result[MAXP]; /* the dense call's final rows */
    ssmt_host  init_pool[MAXP], fin_pool[MAXP];
    ssmt_host  init_idx, fin_idx;
    void *     dense_outs; /* the dense call's output bytes */
} pooled;

static void set_idx(const ssmt_host * h, int64_t i, int64_t v) { ssmt_set(&h->t, i, (double)v); }
static int64_t get_idx(const ssmt_host * h, int64_t i) { return (int64_t)ssmt_get(&h->t, i); }

/* Row-by-row equality of a (rows, ...) view's row r and another's row s (values, exactly). */
static int same_row(const ssm_tensor * a, int64_t r, const ssm_tensor * b, int64_t s) {
    const ssm_tensor ra = ssmt_pick(a, 0, r), rb = ssmt_pick(b, 0, s);
    const int64_t    n = ssmt_numel(&ra);
    for (int64_t k = 0; k < n; ++k) {
        const double x = ssmt_get(&ra, k), y = ssmt_get(&rb, k);
        if (memcmp(&x, &y, sizeof x) != 0) return 0;
    }
    return 1;
}

/* Installs the pools into the fixture's args (fin_pool: the final pools to use). */
static void install(const ssmt_fixture * f, const pool_names * pn, const pooled * p, int in_place) {
    for (int k = 0; k < p->npairs; ++k) {
        *field(f, pn->initial[k]) = p->init_pool[k].t;
        *field(f, pn->final[k]) = in_place ? p->init_pool[k].t : p->fin_pool[k].t;
    }
    *field(f, "initial_state_indices") = p->init_idx.t;
    *field(f, "final_state_indices") = p->fin_idx.t;
}

static void uninstall(const ssmt_fixture * f, const pool_names * pn, const pooled * p) {
    for (int k = 0; k < p->npairs; ++k) {
        *field(f, pn->initial[k]) = p->dense_init[k];
        *field(f, pn->final[k]) = p->dense_fin[k];
    }
    *field(f, "initial_state_indices") = ssmt_absent();
    *field(f, "final_state_indices") = ssmt_absent();
}

/* The outputs of the pooled call other than the dense finals match the dense call's bytes. */
static void check_outs(const ssmt_fixture * f, const pooled * p, const char * what) {
    size_t off = 0;
    for (int o = 0; o < f->nouts; ++o) {
        const size_t n = ssmt_view_bytes(&f->outs[o]);
        int          is_final = 0;
        for (int k = 0; k < p->npairs; ++k) is_final |= f->outs[o].data == p->dense_fin[k].data;
        if (!is_final)
            TEST_CHECK(memcmp((const char *)p->dense_outs + off, f->outs[o].data, n) == 0,
                       "%s %s: %s differs from the dense call", f->name, what, f->out_names[o]);
        off += n;
    }
}

/* Final pool k after a pooled call: slot fin_idx[i] holds dense final row i; every other
 * slot equals `before` (a contiguous clone of the pool taken before the call). */
static void check_pool(const ssmt_fixture * f, const pooled * p, int k, const ssm_tensor * pool,
                       const ssm_tensor * before, const char * what) {
    for (int64_t s = 0; s < p->slots; ++s) {
        int64_t writer = -1;
        for (int64_t i = 0; i < p->ns; ++i)
            if (get_idx(&p->fin_idx, i) == s) writer = i;
        if (writer >= 0)
            TEST_CHECK(same_row(pool, s, &p->dense_result[k].t, writer),
                       "%s %s: pool %d slot %lld is not final row %lld",
                       f->name, what, k, (long long)s, (long long)writer);
        else
            TEST_CHECK(same_row(pool, s, before, s), "%s %s: pool %d slot %lld changed", f->name, what, k,
                       (long long)s);
    }
}

static int build(const ssmt_fixture * f, const pool_names * pn, pooled * p, ssmt_rng * rng) {
    memset(p, 0, sizeof *p);
    for (int k = 0; k < MAXP && pn->initial[k] != NULL; ++k) {
        const ssm_tensor * di = field(f, pn->initial[k]);
        const ssm_tensor * df = field(f, pn->final[k]);
        if (di->data == NULL || df->data == NULL) return 0;
        p->dense_init[k] = *di;
        p->dense_fin[k] = *df;
        p->npairs = k + 1;
    }
    p->ns = p->dense_init[0].shape[0];
    p->slots = 2 * p->ns + 3;
    const int64_t ns1[1] = {p->ns};
    p->init_idx = ssmt_alloc(SSM_DTYPE_I64, 1, ns1);
    p->fin_idx = ssmt_alloc(SSM_DTYPE_I32, 1, ns1);
    /* initial slots: even, descending, every third sequence without one (zeros); final
     * slots: odd, ascending, every fourth sequence dropped */
    for (int64_t i = 0; i < p->ns; ++i) {
        set_idx(&p->init_idx, i, i % 3 == 1 ? -1 - i : p->slots - 1 - 2 * i);
        set_idx(&p->fin_idx, i, i % 4 == 2 ? -1 : 1 + 2 * i);
    }
    for (int k = 0; k < p->npairs; ++k) {
        const ssm_tensor * di = &p->dense_init[k];
        int64_t            shape[SSM_MAX_DIMS];
        memcpy(shape, di->shape, sizeof shape);
        shape[0] = p->slots;
        p->init_pool[k] = ssmt_alloc_layout((ssm_dtype)di->dtype, di->ndim, shape, NULL, 1);
        shape[0] = p->slots;
        p->fin_pool[k] = ssmt_alloc_layout((ssm_dtype)p->dense_fin[k].dtype, p->dense_fin[k].ndim, shape, NULL, 2);
        ssmt_fill_normal(rng, &p->init_pool[k].t, 0.0, 1.0);
        ssmt_fill_normal(rng, &p->fin_pool[k].t, 0.0, 1.0);
        for (int64_t i = 0; i < p->ns; ++i) {
            const int64_t    s = get_idx(&p->init_idx, i);
            const ssm_tensor row = ssmt_pick(di, 0, i);
            if (s >= 0) {
                const ssm_tensor dst = ssmt_pick(&p->init_pool[k].t, 0, s);
                ssmt_copy(&dst, &row);
            } else {
                ssmt_fill_value(&row, 0.0); /* what a negative index reads */
            }
        }
    }
    p->dense_outs = malloc(ssmt_fixture_out_bytes(f) + 1);
    return 1;
}

static void release(pooled * p) {
    for (int k = 0; k < p->npairs; ++k) {
        ssmt_free(&p->init_pool[k]);
        ssmt_free(&p->fin_pool[k]);
        ssmt_free(&p->dense_result[k]);
    }
    ssmt_free(&p->init_idx);
    ssmt_free(&p->fin_idx);
    free(p->dense_outs);
}

/* A call that must fail with `want` and write nothing (outputs stay poisoned, pools keep
 * their bytes). */
static void expect_failure(const ssmt_fixture * f, const pooled * p, ssm_context * ctx, int in_place, ssm_status want,
                           const char * what) {
    void * snaps[MAXP][2];
    for (int k = 0; k < p->npairs; ++k) {
        snaps[k][0] = ssmt_snapshot(&p->init_pool[k]);
        snaps[k][1] = ssmt_snapshot(&p->fin_pool[k]);
    }
    ssmt_fixture_fill(f, 0xA5);
    void * poisoned = malloc(ssmt_fixture_out_bytes(f) + 1);
    ssmt_fixture_save(f, poisoned);
    const ssm_status st = run_fixture(ctx, f, 0);
    TEST_CHECK(st == want, "%s %s: got %s, expected %s (%s)", f->name, what, ssm_status_string(st),
               ssm_status_string(want), ssm_context_last_error(ctx));
    TEST_CHECK(ssmt_fixture_diff(f, poisoned) < 0, "%s %s: a failed call wrote an output", f->name, what);
    for (int k = 0; k < p->npairs; ++k) {
        TEST_CHECK(ssmt_unchanged(&p->init_pool[k], snaps[k][0]), "%s %s: initial pool %d written", f->name, what, k);
        TEST_CHECK(ssmt_unchanged(&p->fin_pool[k], snaps[k][1]), "%s %s: final pool %d written", f->name, what, k);
        free(snaps[k][0]);
        free(snaps[k][1]);
    }
    free(poisoned);
    (void)in_place;
}

static void test_fixture(const ssmt_fixture * f, ssm_context * ref, ssm_context * cpu1, ssm_context * cpu3,
                         ssmt_rng * rng) {
    const pool_names * pn = names_of(f->op);
    pooled             p;
    if (pn == NULL || !build(f, pn, &p, rng)) return;
    /* REF, then the backend under test twice: CPU with 1 and 3 threads, or CUDA twice (the
     * second with device index tensors) */
    ssm_context * const ctxs[3] = {ref, cpu1, cpu3};
    const char * const  who = g_cuda != NULL ? "cuda" : "cpu";
    ssmt_host           ref_fin[MAXP], cpu_fin[MAXP];
    memset(ref_fin, 0, sizeof ref_fin);
    memset(cpu_fin, 0, sizeof cpu_fin);
    void *              cpu1_bytes = malloc(ssmt_fixture_out_bytes(f) + 1);
    for (int c = 0; c < 3; ++c) {
        /* the dense call (negative-index rows of the dense initial states are zero) */
        uninstall(f, pn, &p);
        ssmt_fixture_fill(f, 0xFF);
        TEST_CHECK_STATUS(run_fixture(ctxs[c], f, c == 2), SSM_STATUS_OK);
        ssmt_fixture_save(f, p.dense_outs);
        for (int k = 0; k < p.npairs; ++k) {
            ssmt_free(&p.dense_result[k]);
            p.dense_result[k] = ssmt_clone(&p.dense_fin[k], (ssm_dtype)p.dense_fin[k].dtype);
        }
        /* separate pools */
        ssmt_host before[MAXP];
        for (int k = 0; k < p.npairs; ++k) before[k] = ssmt_clone(&p.fin_pool[k].t, (ssm_dtype)p.fin_pool[k].t.dtype);
        install(f, pn, &p, 0);
        ssmt_fixture_fill(f, 0xFF);
        TEST_CHECK_STATUS(run_fixture(ctxs[c], f, c == 2), SSM_STATUS_OK);
        check_outs(f, &p, c == 0 ? "ref pools" : "pools");
        for (int k = 0; k < p.npairs; ++k) {
            check_pool(f, &p, k, &p.fin_pool[k].t, &before[k].t, c == 0 ? "ref pools" : "pools");
            ssmt_free(&before[k]);
        }
        if (c == 0)
            for (int k = 0; k < p.npairs; ++k) ref_fin[k] = ssmt_clone(&p.fin_pool[k].t, SSM_DTYPE_F64);
        if (c == 1) {
            ssmt_fixture_save(f, cpu1_bytes);
            for (int k = 0; k < p.npairs; ++k) cpu_fin[k] = ssmt_clone(&p.fin_pool[k].t, SSM_DTYPE_F64);
            for (int k = 0; k < p.npairs; ++k)
                check_bar_of(f, "pooled final (vs ref)", &cpu_fin[k].t, &ref_fin[k].t,
                             (ssm_dtype)p.fin_pool[k].t.dtype);
        }
        if (c == 2) {
            TEST_CHECK(ssmt_fixture_diff(f, cpu1_bytes) < 0, "%s: %s outputs differ between the two runs", f->name,
                       who);
            for (int k = 0; k < p.npairs; ++k) {
                ssmt_host now = ssmt_clone(&p.fin_pool[k].t, SSM_DTYPE_F64);
                TEST_CHECK(memcmp(now.buf, cpu_fin[k].buf, now.bytes) == 0,
                           "%s: %s final pool %d differs between the two runs", f->name, who, k);
                ssmt_free(&now);
            }
        }
        /* in place: the initial pool is the final pool; a sequence without an initial state
         * writes a slot nobody reads (odd), the others their own slot */
        ssmt_host saved_fin = p.fin_idx;
        const int64_t ns1[1] = {p.ns};
        p.fin_idx = ssmt_alloc(SSM_DTYPE_I64, 1, ns1);
        for (int64_t i = 0; i < p.ns; ++i) {
            const int64_t s = get_idx(&p.init_idx, i);
            set_idx(&p.fin_idx, i, s >= 0 ? s : p.slots - 2 - 2 * i);
        }
        ssmt_host inplace_before[MAXP];
        for (int k = 0; k < p.npairs; ++k)
            inplace_before[k] = ssmt_clone(&p.init_pool[k].t, (ssm_dtype)p.init_pool[k].t.dtype);
        void * init_snap[MAXP];
        for (int k = 0; k < p.npairs; ++k) init_snap[k] = ssmt_snapshot(&p.init_pool[k]);
        install(f, pn, &p, 1);
        ssmt_fixture_fill(f, 0xFF);
        TEST_CHECK_STATUS(run_fixture(ctxs[c], f, c == 2), SSM_STATUS_OK);
        check_outs(f, &p, "in place");
        for (int k = 0; k < p.npairs; ++k) check_pool(f, &p, k, &p.init_pool[k].t, &inplace_before[k].t, "in place");
        /* back to the initial pool's contents for the next runs */
        for (int k = 0; k < p.npairs; ++k) {
            memcpy(p.init_pool[k].buf, init_snap[k], p.init_pool[k].bytes);
            free(init_snap[k]);
            ssmt_free(&inplace_before[k]);
        }

        /* in place, sequence 0 writes the slot sequence 2 reads */
        if (p.ns >= 3) {
            set_idx(&p.fin_idx, 0, get_idx(&p.init_idx, 2));
            set_idx(&p.fin_idx, 2, p.slots - 6); /* a slot nobody reads: only the cross rule fails */
            install(f, pn, &p, 1);
            expect_failure(f, &p, ctxs[c], 1, SSM_STATUS_INVALID_ARGUMENT, "cross read/write in place");
        }
        ssmt_free(&p.fin_idx);
        p.fin_idx = saved_fin;

        /* out of range, a repeated final slot, lengths, indices without their pool */
        install(f, pn, &p, 0);
        const int64_t keep0 = get_idx(&p.init_idx, 0);
        set_idx(&p.init_idx, 0, p.slots);
        expect_failure(f, &p, ctxs[c], 0, SSM_STATUS_INVALID_ARGUMENT, "initial slot out of range");
        set_idx(&p.init_idx, 0, keep0);
        const int64_t keepf = get_idx(&p.fin_idx, 0);
        set_idx(&p.fin_idx, 0, p.slots + 5);
        expect_failure(f, &p, ctxs[c], 0, SSM_STATUS_INVALID_ARGUMENT, "final slot out of range");
        if (p.ns >= 2) {
            set_idx(&p.fin_idx, 0, get_idx(&p.fin_idx, 1));
            expect_failure(f, &p, ctxs[c], 0, SSM_STATUS_INVALID_ARGUMENT, "a final slot twice");
        }
        set_idx(&p.fin_idx, 0, keepf);
        *field(f, "initial_state_indices") = ssmt_reshaped(&p.init_idx.t, 0, p.ns + 1);
        expect_failure(f, &p, ctxs[c], 0, SSM_STATUS_INVALID_SHAPE, "indices of another length");
        *field(f, "initial_state_indices") = p.init_idx.t;
        for (int k = 0; k < p.npairs; ++k) *field(f, pn->final[k]) = ssmt_absent();
        expect_failure(f, &p, ctxs[c], 0, SSM_STATUS_INVALID_ARGUMENT, "final indices without final pools");
        uninstall(f, pn, &p);
    }
    for (int k = 0; k < p.npairs; ++k) {
        ssmt_free(&ref_fin[k]);
        ssmt_free(&cpu_fin[k]);
    }
    free(cpu1_bytes);
    release(&p);
}

/* causal_conv1d with cu_seqlens (packed sequences with their own conv states, some empty):
 * each sequence equals its own batch-1 call; the backend `be` (CPU or CUDA) against REF, and
 * twice the same bytes; pooled states on top. */
static void test_conv_varlen(ssm_context * ref, ssm_context * be, ssmt_rng * rng) {
    enum { NS = 5, D = 6, W = 4 };
    static const int64_t lens[NS] = {3, 0, 9, 1, 0};
    int64_t              S = 0;
    for (int i = 0; i < NS; ++i) S += lens[i];
    const int64_t xs[3] = {1, D, S}, ss[3] = {NS, D, W - 1}, ws[2] = {D, W}, cs[1] = {NS + 1}, bs[1] = {D};
    ssmt_host     x = ssmt_alloc_layout(SSM_DTYPE_F32, 3, xs, (const int32_t[]){0, 2, 1}, 1); /* channel-last */
    ssmt_host     w = ssmt_alloc(SSM_DTYPE_F32, 2, ws), bias = ssmt_alloc(SSM_DTYPE_F32, 1, bs);
    ssmt_host     init = ssmt_alloc(SSM_DTYPE_F32, 3, ss), cu = ssmt_alloc(SSM_DTYPE_I32, 1, cs);
    ssmt_fill_normal(rng, &x.t, 0.0, 1.0);
    ssmt_fill_normal(rng, &w.t, 0.0, 0.5);
    ssmt_fill_normal(rng, &bias.t, 0.0, 0.5);
    ssmt_fill_normal(rng, &init.t, 0.0, 1.0);
    int64_t at = 0;
    for (int i = 0; i <= NS; ++i) {
        ssmt_set(&cu.t, i, (double)at);
        if (i < NS) at += lens[i];
    }
    ssm_conv1d_params_init(&g_conv_params);
    ssm_context * const ctxs[2] = {ref, be};
    ssmt_host           outs[2], fins[2];
    for (int c = 0; c < 2; ++c) {
        outs[c] = ssmt_alloc(SSM_DTYPE_F32, 3, xs);
        fins[c] = ssmt_alloc(SSM_DTYPE_F32, 3, ss);
        ssm_causal_conv1d_args a = {0};
        a.x = x.t, a.weight = w.t, a.bias = bias.t, a.initial_states = init.t, a.cu_seqlens = cu.t;
        a.out = outs[c].t, a.final_states = fins[c].t;
        TEST_CHECK_STATUS(run_conv(ctxs[c], &a), SSM_STATUS_OK);
        /* the same bytes again */
        ssmt_host o2 = ssmt_alloc(SSM_DTYPE_F32, 3, xs), f2 = ssmt_alloc(SSM_DTYPE_F32, 3, ss);
        ssmt_fill_value(&o2.t, NAN), ssmt_fill_value(&f2.t, NAN);
        a.out = o2.t, a.final_states = f2.t;
        TEST_CHECK_STATUS(run_conv(ctxs[c], &a), SSM_STATUS_OK);
        TEST_CHECK(memcmp(o2.buf, outs[c].buf, o2.bytes) == 0 && memcmp(f2.buf, fins[c].buf, f2.bytes) == 0,
                   "conv varlen: two runs differ");
        ssmt_free(&o2), ssmt_free(&f2);
        /* each sequence alone */
        for (int i = 0; i < NS; ++i) {
            const int64_t st = (int64_t)ssmt_get(&cu.t, i);
            if (lens[i] == 0) {
                TEST_CHECK(same_row(&fins[c].t, i, &init.t, i), "conv varlen: empty sequence %d's final state", i);
                continue;
            }
            const int64_t os[3] = {1, D, lens[i]}, fs[3] = {1, D, W - 1};
            ssmt_host     o1 = ssmt_alloc(SSM_DTYPE_F32, 3, os), f1 = ssmt_alloc(SSM_DTYPE_F32, 3, fs);
            ssm_causal_conv1d_args b = {0};
            b.x = ssmt_slice(&x.t, 2, st, lens[i]), b.weight = w.t, b.bias = bias.t;
            b.initial_states = ssmt_slice(&init.t, 0, i, 1), b.out = o1.t, b.final_states = f1.t;
            TEST_CHECK_STATUS(run_conv(ctxs[c], &b), SSM_STATUS_OK);
            const ssm_tensor got = ssmt_slice(&outs[c].t, 2, st, lens[i]);
            for (int64_t k = 0; k < D * lens[i]; ++k)
                TEST_CHECK(ssmt_get(&got, k) == ssmt_get(&o1.t, k), "conv varlen: sequence %d out %lld", i,
                           (long long)k);
            TEST_CHECK(same_row(&fins[c].t, i, &f1.t, 0), "conv varlen: sequence %d final state", i);
            ssmt_free(&o1), ssmt_free(&f1);
        }
    }
    ssmt_check_bar("conv varlen out (vs ref)", &outs[1].t, &outs[0].t, SSM_DTYPE_F32);
    ssmt_check_bar("conv varlen final (vs ref)", &fins[1].t, &fins[0].t, SSM_DTYPE_F32);

    /* in-place pool with cu_seqlens: sequence i reads slot 2i+1 (none for i = 3), writes 2i+1 */
    const int64_t ps[3] = {2 * NS + 2, D, W - 1}, ns1[1] = {NS};
    ssmt_host     pool = ssmt_alloc_layout(SSM_DTYPE_F32, 3, ps, NULL, 1);
    ssmt_host     ii = ssmt_alloc(SSM_DTYPE_I32, 1, ns1), fi = ssmt_alloc(SSM_DTYPE_I64, 1, ns1);
    ssmt_fill_normal(rng, &pool.t, 0.0, 1.0);
    ssmt_host dense = ssmt_alloc(SSM_DTYPE_F32, 3, ss);
    for (int i = 0; i < NS; ++i) {
        ssmt_set(&ii.t, i, i == 3 ? -1.0 : 2.0 * i + 1);
        ssmt_set(&fi.t, i, 2.0 * i + 1);
        const ssm_tensor src = ssmt_pick(&pool.t, 0, 2 * i + 1), dst = ssmt_pick(&dense.t, 0, i);
        if (i == 3) ssmt_fill_value(&dst, 0.0); else ssmt_copy(&dst, &src);
    }
    ssmt_host              o_d = ssmt_alloc(SSM_DTYPE_F32, 3, xs), f_d = ssmt_alloc(SSM_DTYPE_F32, 3, ss);
    ssmt_host              o_p = ssmt_alloc(SSM_DTYPE_F32, 3, xs);
    ssm_causal_conv1d_args a = {0};
    a.x = x.t, a.weight = w.t, a.bias = bias.t, a.initial_states = dense.t, a.cu_seqlens = cu.t;
    a.out = o_d.t, a.final_states = f_d.t;
    TEST_CHECK_STATUS(run_conv(be, &a), SSM_STATUS_OK);
    a.initial_states = pool.t, a.final_states = pool.t, a.out = o_p.t;
    a.initial_state_indices = ii.t, a.final_state_indices = fi.t;
    TEST_CHECK_STATUS(run_conv(be, &a), SSM_STATUS_OK);
    TEST_CHECK(memcmp(o_d.buf, o_p.buf, o_d.bytes) == 0, "conv varlen pooled: out differs from the dense call");
    for (int i = 0; i < NS; ++i)
        TEST_CHECK(same_row(&pool.t, 2 * i + 1, &f_d.t, i), "conv varlen pooled: slot %d", 2 * i + 1);

    /* invalid: with seq_idx, batch 2 */
    ssm_causal_conv1d_args bad = {0};
    const int64_t          sq[2] = {1, S};
    ssmt_host              seq = ssmt_alloc(SSM_DTYPE_I32, 2, sq);
    ssmt_fill_value(&seq.t, 0.0);
    bad.x = x.t, bad.weight = w.t, bad.cu_seqlens = cu.t, bad.seq_idx = seq.t, bad.out = o_d.t;
    TEST_CHECK_STATUS(run_conv(be, &bad), SSM_STATUS_INVALID_ARGUMENT);
    bad.seq_idx = ssmt_absent();
    const int64_t xs2[3] = {2, D, S}; /* two rows with cu_seqlens: buffers of two rows */
    ssmt_host     x2 = ssmt_alloc(SSM_DTYPE_F32, 3, xs2), o2 = ssmt_alloc(SSM_DTYPE_F32, 3, xs2);
    ssmt_fill_normal(rng, &x2.t, 0.0, 1.0);
    void * so2 = ssmt_snapshot(&o2);
    bad.x = x2.t, bad.out = o2.t;
    TEST_CHECK_STATUS(run_conv(be, &bad), SSM_STATUS_INVALID_ARGUMENT);
    TEST_CHECK(ssmt_unchanged(&o2, so2), "conv varlen with two rows: the failed call wrote");
    free(so2), ssmt_free(&x2), ssmt_free(&o2);

    ssmt_free(&seq), ssmt_free(&o_d), ssmt_free(&f_d), ssmt_free(&o_p), ssmt_free(&dense), ssmt_free(&pool);
    ssmt_free(&ii), ssmt_free(&fi);
    for (int c = 0; c < 2; ++c) ssmt_free(&outs[c]), ssmt_free(&fins[c]);
    ssmt_free(&x), ssmt_free(&w), ssmt_free(&bias), ssmt_free(&init), ssmt_free(&cu);
}

int main(void) {
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 2112);
#ifdef SSMT_POOLS_ON_CUDA
    if (!ssmt_cuda_present("test_cuda_state_pools")) return 77;
    g_cuda = ssmt_make_ctx(SSM_BACKEND_CUDA, 1, SSM_ISA_AUTO);
    ssm_context * cpu1 = NULL, *cpu3 = NULL;
    ssm_context * const be1 = g_cuda, *const be2 = g_cuda;
#else
    ssm_context * cpu1 = ssmt_make_ctx(SSM_BACKEND_CPU, 1, SSM_ISA_AUTO);
    ssm_context * cpu3 = ssmt_make_ctx(SSM_BACKEND_CPU, 3, SSM_ISA_AUTO);
    ssm_context * const be1 = cpu1, *const be2 = cpu3;
#endif
    ssm_context * ref = ssmt_make_ctx(SSM_BACKEND_REF, 1, SSM_ISA_AUTO);
    int           tested = 0;
    for (int i = 0; i < ssmt_fixture_count(); ++i) {
        ssmt_fixture f;
        if (ssmt_fixture_make(i, 77 + (uint64_t)i, &f) != 0) continue;
        /* a caller workspace is host memory: the CPU's fixture */
        if (names_of(f.op) != NULL && !(g_cuda != NULL && f.caller_workspace)) {
            printf("%s\n", f.name);
            test_fixture(&f, ref, be1, be2, &rng);
            ++tested;
        }
        ssmt_fixture_free(&f);
    }
    TEST_CHECK(tested >= 4, "only %d fixtures of the pooled operators", tested);
    test_conv_varlen(ref, be2, &rng);
    ssm_context_free(ref);
    ssm_context_free(cpu1);
    ssm_context_free(cpu3);
    ssm_context_free(g_cuda);
    TEST_EXIT();
}
