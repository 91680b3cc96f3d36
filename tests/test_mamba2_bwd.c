/*
 * test_mamba2_bwd.c — ssm_mamba2_scan_bwd, every gradient of the combined Mamba-2 scan.
 *  (a) the float64 reference against the stored upstream float64 gradients of tests/data
 *      (rel_rms ≤ 1e-10), and the CPU backend against them within the f32 bar;
 *  (b) the reference against central finite differences of the reference forward, for
 *      every gradient, on small shapes with every option (seq_idx with a row that skips
 *      its initial state, varlen with an empty sequence, clamped dt, z, D (H)/(H,P), ...);
 *  (c) the CPU backend against the reference within the DESIGN §5 bars (reductions da, dd,
 *      ddt_bias compared as whole vectors) for f32/f16/bf16 over a sweep of shapes and
 *      options, NaN-poisoned outputs, strided views; 1, 2 and 3 threads give identical
 *      bytes, and the scalar ISA passes the same bars;
 *  (d) every validation rule: status, a message naming the op, untouched buffers.
 * Seed: SSMOPS_TEST_SEED (default 20261202).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grads.h"
#include "testutil.h"

static ssm_context *g_ref, *g_cpu[4], *g_scalar, *g_cuda;

/* ---- gradient slots ------------------------------------------------------------------- */

/* ---- (a) stored test vectors ------------------------------------------------------------ */

static void data_case(const char * name) {
    ssmt_case c;
    if (ssmt_case_load(&c, "mamba2_scan_bwd", name) != 0) {
        TEST_CHECK(0, "cannot load case %s", name);
        return;
    }
    ssm_mamba2_params p;
    ssmt_case_mamba2_params(&c, &p);
    static const char * const fl[] = {"x", "dt", "a", "b", "c", "d", "z", "dt_bias", "initial_states", "dout",
                                      "dfinal_states"};
    ssmt_host in[11], seq = {0}, cu = {0};
    for (int i = 0; i < 11; ++i)
        in[i] = ssmt_case_has(&c, fl[i]) ? ssmt_case_tensor(&c, fl[i], SSM_DTYPE_F32) : (ssmt_host){0};
    if (ssmt_case_has(&c, "seq_idx")) seq = ssmt_case_tensor(&c, "seq_idx", SSM_DTYPE_I32);
    if (ssmt_case_has(&c, "cu_seqlens")) cu = ssmt_case_tensor(&c, "cu_seqlens", SSM_DTYPE_I64);
    ssm_mamba2_scan_bwd_args a;
    memset(&a, 0, sizeof a);
    a.x = in[0].t, a.dt = in[1].t, a.a = in[2].t, a.b = in[3].t, a.c = in[4].t, a.d = in[5].t, a.z = in[6].t;
    a.dt_bias = in[7].t, a.initial_states = in[8].t, a.dout = in[9].t, a.dfinal_states = in[10].t;
    a.seq_idx = seq.t, a.cu_seqlens = cu.t;
    for (int pass = 0; pass < 2; ++pass) {
        ssmt_host g[NGRAD];
        ssmt_m2_alloc_grads(&a, pass == 0 ? SSM_DTYPE_F64 : SSM_DTYPE_F32, g, 0);
        ssm_context * ctx = pass == 0 ? g_ref : g_cpu[2];
        const ssm_status st = ssm_mamba2_scan_bwd(ctx, &p, &a);
        TEST_CHECK(st == SSM_STATUS_OK, "data %s: %s", name, ssm_context_last_error(ctx));
        int ngot = 0;
        for (int k = 0; k < NGRAD; ++k) {
            if (!ssmt_case_has(&c, ssmt_m2_grad_names[k])) continue;
            ++ngot;
            ssmt_host want = ssmt_case_tensor(&c, ssmt_m2_grad_names[k], SSM_DTYPE_F64);
            char      label[200];
            snprintf(label, sizeof label, "data bwd/%s %s %s", name, pass == 0 ? "ref" : "cpu", ssmt_m2_grad_names[k]);
            if (pass == 0) {
                const ssmt_bar bar = {1e-10, 1e-8};
                ssmt_check_within(label, &g[k].t, &want.t, bar);
            } else {
                ssmt_check_bar(label, &g[k].t, &want.t, SSM_DTYPE_F32);
            }
            ssmt_free(&want);
        }
        TEST_CHECK(ngot >= 8, "data %s: only %d stored gradients", name, ngot);
        ssmt_free_all(g, NGRAD);
    }
    for (int i = 0; i < 11; ++i) ssmt_free(&in[i]);
    ssmt_free(&seq), ssmt_free(&cu);
}

/* ---- (b) finite differences of the reference forward ---------------------------------------- */

typedef struct fd_problem {
    ssmt_mamba2_problem prob;
    ssmt_host           dout, dfinal;
    ssm_mamba2_params   params;
} fd_problem;

/* L = Σ out·dout + Σ final_states·dfinal_states, by the reference forward in float64. */
static double fd_loss(fd_problem * f) {
    ssm_mamba2_scan_args a = f->prob.args;
    TEST_CHECK_STATUS(ssm_mamba2_scan(g_ref, &f->params, &a, NULL, 0), SSM_STATUS_OK);
    double        l = 0.0;
    const int64_t n = ssmt_numel(&a.out);
    for (int64_t i = 0; i < n; ++i) l += ssmt_get(&a.out, i) * ssmt_get(&f->dout.t, i);
    if (a.final_states.data != NULL) {
        const int64_t m = ssmt_numel(&a.final_states);
        for (int64_t i = 0; i < m; ++i) l += ssmt_get(&a.final_states, i) * ssmt_get(&f->dfinal.t, i);
    }
    return l;
}

/* Moves every raw dt whose processed value lies within 1e-3 of a clamp limit away from it,
 * so that no finite-difference step (≤ 2e-5 on dt or dt_bias) crosses a kink. */
static void keep_dt_off_limits(fd_problem * f) {
    const ssm_tensor * dt = &f->prob.dt.t;
    const int64_t      H = dt->shape[2], n = ssmt_numel(dt);
    for (int64_t i = 0; i < n; ++i) {
        const double bias = f->prob.dt_bias.t.data ? ssmt_get(&f->prob.dt_bias.t, i % H) : 0.0;
        for (int tries = 0; tries < 100; ++tries) {
            double v = ssmt_get(dt, i) + bias;
            if (f->params.dt_softplus && v <= 20.0) v = log1p(exp(v));
            if (fabs(v - f->params.dt_limit_lo) >= 1e-3 && fabs(v - f->params.dt_limit_hi) >= 1e-3) break;
            ssmt_set(dt, i, ssmt_get(dt, i) + 3e-3);
        }
    }
}

static void fd_check(ssmt_rng * rng, ssmt_mamba2_config * cfg, int64_t chunk, int softplus, int limit,
                     const int64_t * seq_ids, const char * tag) {
    fd_problem f;
    cfg->dtype = cfg->param_dtype = cfg->out_dtype = SSM_DTYPE_F64;
    cfg->dt_softplus = softplus;
    if (ssmt_mamba2_random_args(rng, cfg, &f.prob) != 0) {
        TEST_CHECK(0, "%s: could not build the problem", tag);
        return;
    }
    if (seq_ids != NULL)
        for (int64_t i = 0; i < ssmt_numel(&f.prob.seq_idx.t); ++i) ssmt_set(&f.prob.seq_idx.t, i, (double)seq_ids[i]);
    ssm_mamba2_params_init(&f.params);
    f.params.chunk_size = chunk;
    f.params.dt_softplus = softplus;
    if (limit) {
        f.params.dt_limit_lo = 0.01, f.params.dt_limit_hi = 0.06;
        keep_dt_off_limits(&f);
    }
    f.dout = ssmt_alloc(SSM_DTYPE_F64, 4, f.prob.x.t.shape);
    ssmt_fill_normal(rng, &f.dout.t, 0.0, 1.0);
    memset(&f.dfinal, 0, sizeof f.dfinal);
    if (cfg->has_final) {
        f.dfinal = ssmt_alloc(SSM_DTYPE_F64, 4, f.prob.final_states.t.shape);
        ssmt_fill_normal(rng, &f.dfinal.t, 0.0, 1.0);
    }
    ssm_mamba2_scan_bwd_args a;
    memset(&a, 0, sizeof a);
    const ssm_mamba2_scan_args * fa = &f.prob.args;
    a.x = fa->x, a.dt = fa->dt, a.a = fa->a, a.b = fa->b, a.c = fa->c, a.d = fa->d, a.z = fa->z;
    a.dt_bias = fa->dt_bias, a.initial_states = fa->initial_states, a.seq_idx = fa->seq_idx;
    a.cu_seqlens = fa->cu_seqlens, a.dout = f.dout.t, a.dfinal_states = f.dfinal.t;
    ssmt_host g[NGRAD];
    ssmt_m2_alloc_grads(&a, SSM_DTYPE_F64, g, 0);
    TEST_CHECK_STATUS(ssm_mamba2_scan_bwd(g_ref, &f.params, &a), SSM_STATUS_OK);

    /* five-point central differences: O(h^4) truncation, ~1e-9 relative rounding */
    const double h = 1e-5;
    for (int k = 0; k < NGRAD; ++k) {
        const ssm_tensor * in = ssmt_m2_grad_input(&a, k);
        if (in->data == NULL) continue;
        ssmt_host     fd = ssmt_alloc(SSM_DTYPE_F64, in->ndim, in->shape);
        const int64_t n = ssmt_numel(in);
        for (int64_t i = 0; i < n; ++i) {
            const double v = ssmt_get(in, i);
            double       l[4];
            static const double off[4] = {-2.0, -1.0, 1.0, 2.0};
            for (int s = 0; s < 4; ++s) {
                ssmt_set(in, i, v + off[s] * h);
                l[s] = fd_loss(&f);
            }
            ssmt_set(in, i, v);
            ssmt_set(&fd.t, i, (l[0] - 8.0 * l[1] + 8.0 * l[2] - l[3]) / (12.0 * h));
        }
        char label[200];
        snprintf(label, sizeof label, "fd[%s] %s", tag, ssmt_m2_grad_names[k]);
        const ssmt_bar bar = {1e-7, 1e-5};
        ssmt_check_within(label, &g[k].t, &fd.t, bar);
        ssmt_free(&fd);
    }
    if (limit) { /* clamped positions exist and get exactly zero gradient, others do not */
        int64_t zeros = 0, n = ssmt_numel(&g[GDT].t);
        for (int64_t i = 0; i < n; ++i) zeros += ssmt_get(&g[GDT].t, i) == 0.0;
        TEST_CHECK(zeros > 0 && zeros < n, "fd[%s]: %lld of %lld ddt are 0; want some clamped, some not", tag,
                   (long long)zeros, (long long)n);
    }
    ssmt_free_all(g, NGRAD);
    ssmt_free(&f.dout), ssmt_free(&f.dfinal);
    ssmt_mamba2_problem_free(&f.prob);
}

static void test_fd(ssmt_rng * rng) {
    ssmt_mamba2_config cfg;
    /* seq_idx: row 0 starts at id 0 (uses its initial state), row 1 at id 1 (does not) */
    ssmt_mamba2_config_init(&cfg);
    cfg.batch = 2, cfg.seqlen = 9, cfg.nheads = 4, cfg.headdim = 3, cfg.dstate = 4, cfg.ngroups = 2;
    cfg.d_mode = 2, cfg.has_z = 1, cfg.has_dt_bias = 1, cfg.has_initial = 1, cfg.has_final = 1, cfg.seq_segments = 1;
    static const int64_t ids[18] = {0, 0, 0, 1, 1, 1, 1, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 2};
    fd_check(rng, &cfg, 4, 1, 1, ids, "seq_idx z D(H,P) softplus clamp");
    /* varlen with an empty sequence */
    ssmt_mamba2_config_init(&cfg);
    static const int64_t lens[4] = {3, 0, 7, 2};
    cfg.nseq = 4, cfg.seqlens = lens, cfg.nheads = 2, cfg.headdim = 2, cfg.dstate = 3, cfg.ngroups = 1;
    cfg.d_mode = 1, cfg.has_initial = 1, cfg.has_final = 1, cfg.index_i64 = 1;
    fd_check(rng, &cfg, 4, 0, 0, NULL, "varlen empty D(H)");
    /* G = H, z, initial states without dfinal_states */
    ssmt_mamba2_config_init(&cfg);
    cfg.batch = 1, cfg.seqlen = 11, cfg.nheads = 3, cfg.headdim = 2, cfg.dstate = 3, cfg.ngroups = 3;
    cfg.has_z = 1, cfg.has_dt_bias = 1, cfg.has_initial = 1;
    fd_check(rng, &cfg, 3, 0, 0, NULL, "G=H z init no dfinal");
    /* nothing optional */
    ssmt_mamba2_config_init(&cfg);
    cfg.batch = 2, cfg.seqlen = 6, cfg.nheads = 2, cfg.headdim = 2, cfg.dstate = 2, cfg.ngroups = 1;
    fd_check(rng, &cfg, 16, 1, 0, NULL, "plain softplus");
}

/* ---- (c) CPU against the reference ---------------------------------------------------------- */

static void cpu_case(ssmt_rng * rng, ssmt_mamba2_config * cfg, int64_t chunk, int limit, int with_dfinal,
                     const char * tag) {
    ssmt_mamba2_problem prob;
    if (ssmt_mamba2_random_args(rng, cfg, &prob) != 0) {
        TEST_CHECK(0, "%s: could not build the problem", tag);
        return;
    }
    ssm_mamba2_params        p;
    ssmt_host                dout, dfinal;
    ssm_mamba2_scan_bwd_args a;
    ssmt_m2_bwd_args(rng, cfg, &prob, chunk, limit, with_dfinal, &p, &dout, &dfinal, &a);

    ssmt_host ref[NGRAD], first[NGRAD];
    ssmt_m2_alloc_grads(&a, SSM_DTYPE_F64, ref, 0);
    TEST_CHECK_STATUS(ssm_mamba2_scan_bwd(g_ref, &p, &a), SSM_STATUS_OK);
    const ssm_dtype od = cfg->out_dtype;
    for (int v = 0; v < 4; ++v) {
        ssm_context * ctx = v < 3 ? g_cpu[v + 1] : g_scalar;
        ssmt_host     got[NGRAD];
        ssmt_m2_alloc_grads(&a, od, got, cfg->strided);
        const ssm_status st = ssm_mamba2_scan_bwd(ctx, &p, &a);
        TEST_CHECK(st == SSM_STATUS_OK, "%s variant %d: %s", tag, v, ssm_context_last_error(ctx));
        for (int k = 0; k < NGRAD; ++k) {
            if (got[k].t.data == NULL) continue;
            char label[256];
            snprintf(label, sizeof label, "cpu[%s] %s %s", tag, v < 3 ? "avx/auto" : "scalar", ssmt_m2_grad_names[k]);
            if (v == 0 || v == 3) {
                const ssmt_cmp cmp = ssmt_compare(&got[k].t, &ref[k].t);
                const ssmt_bar bar = ssmt_bar_for(cfg->dtype);
                const int ok = cmp.nonfinite == 0 && cmp.rel_rms <= bar.rel_rms && cmp.max_rel <= bar.max_rel;
                TEST_CHECK(ok, "%s rel_rms %.3g max_rel %.3g nonfinite %lld (bar %.3g %.3g)", label, cmp.rel_rms,
                           cmp.max_rel, (long long)cmp.nonfinite, bar.rel_rms, bar.max_rel);
                if (getenv("SSMOPS_TEST_VERBOSE") != NULL)
                    printf("%-70s rel_rms %.3g max_rel %.3g\n", label, cmp.rel_rms, cmp.max_rel);
            }
            if (v >= 1 && v < 3)
                TEST_CHECK(memcmp(first[k].buf, got[k].buf, got[k].bytes) == 0, "%s: %d threads differ from 1", label,
                           v + 1);
        }
        if (v == 0) {
            for (int k = 0; k < NGRAD; ++k) first[k] = got[k];
        } else {
            ssmt_free_all(got, NGRAD);
        }
    }
    ssmt_free_all(first, NGRAD);
    ssmt_free_all(ref, NGRAD);
    ssmt_free(&dout), ssmt_free(&dfinal);
    ssmt_mamba2_problem_free(&prob);
}

static void test_cpu(ssmt_rng * rng) {
    int k = 0;
    for (int si = 0; si < SSMT_MAMBA2_BWD_NSEQLENS; ++si) {
        for (int variant = 0; variant < 3; ++variant, ++k) {
            ssmt_mamba2_config cfg;
            int64_t            lens[4];
            const int64_t      chunk = ssmt_mamba2_bwd_case(&cfg, k, si, variant, lens);
            const int with_dfinal = (k % 4) != 2;
            char      tag[200];
            snprintf(tag, sizeof tag, "S%lld H%lld P%lld N%lld G%lld %s v%d%s%s%s%s", (long long)cfg.seqlen,
                     (long long)cfg.nheads, (long long)cfg.headdim, (long long)cfg.dstate, (long long)cfg.ngroups,
                     ssm_dtype_name(cfg.dtype), variant, cfg.has_z ? " z" : "", cfg.has_initial ? " init" : "",
                     with_dfinal ? " dfinal" : "", (k % 5) == 2 ? " limit" : "");
            cpu_case(rng, &cfg, chunk, (k % 5) == 2, with_dfinal, tag);
        }
    }
}

/* ---- (d) validation ----------------------------------------------------------------------- */

#define MAXH 40
typedef struct vfix {
    ssmt_host                h[MAXH];
    int                      nh;
    ssm_mamba2_scan_bwd_args a;
    ssm_mamba2_params        p;
} vfix;

static ssm_tensor vt(vfix * f, ssm_dtype dt, int32_t ndim, const int64_t * shape, ssmt_rng * rng) {
    ssmt_host * h = &f->h[f->nh++];
    *h = ssmt_alloc(dt, ndim, shape);
    if (dt == SSM_DTYPE_F32) ssmt_fill_uniform(rng, &h->t, -0.5, 0.5);
    return h->t;
}

enum { VB = 2, VS = 10, VH = 4, VP = 3, VN = 4, VG = 2 };

static void vfix_init(vfix * f, ssmt_rng * rng) {
    memset(f, 0, sizeof *f);
    const int64_t sx[4] = {VB, VS, VH, VP}, sb[4] = {VB, VS, VG, VN}, sdt[3] = {VB, VS, VH}, sh[1] = {VH};
    const int64_t sst[4] = {VB, VH, VP, VN}, sseq[2] = {VB, VS};
    ssm_mamba2_scan_bwd_args * a = &f->a;
    a->x = vt(f, SSM_DTYPE_F32, 4, sx, rng), a->dt = vt(f, SSM_DTYPE_F32, 3, sdt, rng);
    a->a = vt(f, SSM_DTYPE_F32, 1, sh, rng), a->b = vt(f, SSM_DTYPE_F32, 4, sb, rng);
    a->c = vt(f, SSM_DTYPE_F32, 4, sb, rng), a->d = vt(f, SSM_DTYPE_F32, 1, sh, rng);
    a->z = vt(f, SSM_DTYPE_F32, 4, sx, rng), a->dt_bias = vt(f, SSM_DTYPE_F32, 1, sh, rng);
    a->initial_states = vt(f, SSM_DTYPE_F32, 4, sst, rng), a->seq_idx = vt(f, SSM_DTYPE_I32, 2, sseq, rng);
    for (int64_t i = 0; i < VB * VS; ++i) ssmt_set(&a->seq_idx, i, (double)((i % VS) / 4));
    a->dout = vt(f, SSM_DTYPE_F32, 4, sx, rng), a->dfinal_states = vt(f, SSM_DTYPE_F32, 4, sst, rng);
    for (int k = 0; k < NGRAD; ++k)
        *ssmt_m2_grad_slot(a, k) =
            vt(f, SSM_DTYPE_F32, ssmt_m2_grad_input(a, k)->ndim, ssmt_m2_grad_input(a, k)->shape, rng);
    for (int k = 0; k < NGRAD; ++k) ssmt_poison(ssmt_m2_grad_slot(a, k));
    ssm_mamba2_params_init(&f->p);
    f->p.chunk_size = 4;
}

static void vfix_free(vfix * f) {
    for (int i = 0; i < f->nh; ++i) ssmt_free(&f->h[i]);
}

/* One invalid call under ctx NULL and REF: status, message naming the op (and `mention`),
 * every buffer unchanged. */
static void expect_fail(vfix * f, const ssm_mamba2_params * p, const ssm_mamba2_scan_bwd_args * a, ssm_status want,
                        const char * what, const char * mention) {
    for (int k = 0; k < 2; ++k) {
        ssm_context * ctx = k == 0 ? NULL : g_ref;
        void *        snaps[MAXH];
        for (int i = 0; i < f->nh; ++i) snaps[i] = ssmt_snapshot(&f->h[i]);
        const ssm_status got = ssm_mamba2_scan_bwd(ctx, p, a);
        const char *     msg = ssm_context_last_error(ctx);
        TEST_CHECK(got == want, "bwd / %s: got %s, want %s [%s]", what, ssm_status_string(got), ssm_status_string(want),
                   msg);
        TEST_CHECK(msg != NULL && strstr(msg, "mamba2_scan_bwd") != NULL, "bwd / %s: message %s", what, msg);
        if (mention != NULL && msg != NULL)
            TEST_CHECK(strstr(msg, mention) != NULL, "bwd / %s: message lacks '%s': %s", what, mention, msg);
        for (int i = 0; i < f->nh; ++i) {
            TEST_CHECK(ssmt_unchanged(&f->h[i], snaps[i]), "bwd / %s: buffer %d was modified", what, i);
            free(snaps[i]);
        }
        if (k == 0 && got == want) printf("ok  %-44s %s\n", what, msg);
    }
}

/* The forward's message for the same broken forward arguments, op name aside. */
static void expect_same_as_forward(vfix * f, const ssm_mamba2_scan_bwd_args * a, const char * what) {
    ssm_mamba2_scan_args fa;
    memset(&fa, 0, sizeof fa);
    fa.x = a->x, fa.dt = a->dt, fa.a = a->a, fa.b = a->b, fa.c = a->c, fa.d = a->d, fa.z = a->z;
    fa.dt_bias = a->dt_bias, fa.initial_states = a->initial_states, fa.seq_idx = a->seq_idx;
    fa.cu_seqlens = a->cu_seqlens;
    fa.out = a->dx; /* (batch, S, H, P) — any valid output */
    const ssm_status fs = ssm_mamba2_scan(g_ref, &f->p, &fa, NULL, 0);
    char             fmsg[600];
    snprintf(fmsg, sizeof fmsg, "%s", ssm_context_last_error(g_ref));
    TEST_CHECK(fs != SSM_STATUS_OK, "forward accepts '%s'", what);
    expect_fail(f, &f->p, a, fs, what, NULL);
    const ssm_status bs = ssm_mamba2_scan_bwd(g_ref, &f->p, a);
    (void)bs;
    const char * bmsg = ssm_context_last_error(g_ref);
    const char * ftail = strchr(fmsg, ':'), *btail = strchr(bmsg, ':');
    TEST_CHECK(ftail && btail && strcmp(ftail, btail) == 0, "%s: forward says '%s', backward '%s'", what, fmsg, bmsg);
}

static void test_validation(ssmt_rng * rng) {
    vfix f;
    vfix_init(&f, rng);
    const ssm_mamba2_scan_bwd_args ok = f.a;
    TEST_CHECK_STATUS(ssm_mamba2_scan_bwd(g_ref, &f.p, &ok), SSM_STATUS_OK);
    TEST_CHECK_STATUS(ssm_mamba2_scan_bwd(NULL, &f.p, &ok), SSM_STATUS_OK);
    for (int k = 0; k < NGRAD; ++k) ssmt_poison(ssmt_m2_grad_slot(&f.a, k));
    ssm_mamba2_scan_bwd_args a;
    ssm_mamba2_params        q;

    expect_fail(&f, NULL, &ok, SSM_STATUS_INVALID_ARGUMENT, "params NULL", "params");
    expect_fail(&f, &f.p, NULL, SSM_STATUS_INVALID_ARGUMENT, "args NULL", "args");
    q = f.p, q.size = 0;
    expect_fail(&f, &q, &ok, SSM_STATUS_INVALID_ARGUMENT, "params.size 0", "size");
    q = f.p, q.chunk_size = 0;
    expect_fail(&f, &q, &ok, SSM_STATUS_INVALID_ARGUMENT, "chunk 0", "chunk_size");
    q = f.p, q.dt_limit_lo = 1.0, q.dt_limit_hi = 0.5;
    expect_fail(&f, &q, &ok, SSM_STATUS_INVALID_ARGUMENT, "dt_limit lo > hi", "dt_limit");
    q = f.p, q.dt_limit_hi = NAN;
    expect_fail(&f, &q, &ok, SSM_STATUS_INVALID_ARGUMENT, "dt_limit NaN", "NaN");

    /* forward arguments: the forward's own rule and message */
    a = ok, a.x.ndim = 3;
    expect_same_as_forward(&f, &a, "x 3-D");
    a = ok, a.x.data = NULL;
    expect_same_as_forward(&f, &a, "x absent");
    a = ok, a.b.shape[2] = 3, a.c.shape[2] = 3;
    expect_same_as_forward(&f, &a, "H % G != 0");
    a = ok, a.c.shape[3] = VN - 1;
    expect_same_as_forward(&f, &a, "c shape");
    a = ok, a.dt.shape[2] = VH + 1;
    expect_same_as_forward(&f, &a, "dt shape");
    a = ok, a.a.dtype = SSM_DTYPE_I32;
    expect_same_as_forward(&f, &a, "a integer");
    a = ok, a.d.shape[0] = VH + 1;
    expect_same_as_forward(&f, &a, "d shape");
    a = ok, a.z.shape[3] = VP + 1;
    expect_same_as_forward(&f, &a, "z shape");
    a = ok, a.initial_states.shape[0] = VB + 1;
    expect_same_as_forward(&f, &a, "initial_states shape");
    a = ok, a.seq_idx.dtype = SSM_DTYPE_F32;
    expect_same_as_forward(&f, &a, "seq_idx float");
    {
        vfix g;
        vfix_init(&g, rng);
        ssmt_set(&g.a.seq_idx, 5, 0.0); /* 0 0 0 0 1 0 ... decreasing */
        expect_same_as_forward(&g, &g.a, "seq_idx decreasing");
        ssmt_set(&g.a.seq_idx, 5, -1.0);
        ssmt_set(&g.a.seq_idx, 0, -1.0);
        expect_same_as_forward(&g, &g.a, "seq_idx negative");
        vfix_free(&g);
    }
    {
        vfix g;
        vfix_init(&g, rng);
        const int64_t scu[1] = {3};
        ssm_tensor    cu = vt(&g, SSM_DTYPE_I32, 1, scu, rng);
        ssmt_set(&cu, 0, 0), ssmt_set(&cu, 1, 4), ssmt_set(&cu, 2, VS);
        a = g.a, a.cu_seqlens = cu;
        expect_same_as_forward(&g, &a, "cu_seqlens with seq_idx");
        a.seq_idx.data = NULL;
        expect_same_as_forward(&g, &a, "cu_seqlens with batch 2");
        /* "both given" comes before cu_seqlens' own rules, in both directions */
        a = g.a, a.cu_seqlens = cu, a.cu_seqlens.shape[0] = 1;
        expect_same_as_forward(&g, &a, "cu_seqlens of length 1 with seq_idx");
        a = g.a, a.cu_seqlens = cu, a.cu_seqlens.dtype = SSM_DTYPE_F32;
        expect_same_as_forward(&g, &a, "float cu_seqlens with seq_idx");
        vfix_free(&g);
    }

    /* dout, dfinal_states */
    a = ok, a.dout.data = NULL;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_ARGUMENT, "dout absent", "dout");
    a = ok, a.dout.shape[1] = VS - 1;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_SHAPE, "dout shape", "dout");
    a = ok, a.dout.dtype = SSM_DTYPE_I32;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_LAYOUT, "dout integer", "dout");
    a = ok, a.dfinal_states.shape[3] = VN + 1;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_SHAPE, "dfinal_states shape", "dfinal_states");

    /* presence rules */
    a = ok, a.d.data = NULL;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_ARGUMENT, "dd without d", "dd");
    a = ok, a.z.data = NULL;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_ARGUMENT, "dz without z", "dz");
    a = ok, a.dt_bias.data = NULL;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_ARGUMENT, "ddt_bias without dt_bias", "ddt_bias");
    a = ok, a.initial_states.data = NULL;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_ARGUMENT, "dinitial_states without initial_states",
                "dinitial_states");

    /* output shapes, dtypes, layouts */
    for (int k = 0; k < NGRAD; ++k) {
        char what[120];
        a = ok;
        ssm_tensor * t = ssmt_m2_grad_slot(&a, k);
        t->shape[0] += 1;
        snprintf(what, sizeof what, "%s shape", ssmt_m2_grad_names[k]);
        expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_SHAPE, what, ssmt_m2_grad_names[k]);
        a = ok;
        t = ssmt_m2_grad_slot(&a, k);
        t->dtype = SSM_DTYPE_I64;
        snprintf(what, sizeof what, "%s integer", ssmt_m2_grad_names[k]);
        expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_LAYOUT, what, ssmt_m2_grad_names[k]);
        a = ok;
        t = ssmt_m2_grad_slot(&a, k);
        t->strides[0] = 0;
        snprintf(what, sizeof what, "%s stride 0", ssmt_m2_grad_names[k]);
        if (t->shape[0] > 1) expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_LAYOUT, what, ssmt_m2_grad_names[k]);
    }
    {
        /* dd must have d's shape: (H, P) d with an (H) dd */
        vfix          g;
        const int64_t shp[2] = {VH, VP}, sh1[1] = {VH};
        vfix_init(&g, rng);
        a = g.a, a.d = vt(&g, SSM_DTYPE_F32, 2, shp, rng);
        a.dd = vt(&g, SSM_DTYPE_F32, 1, sh1, rng);
        expect_fail(&g, &g.p, &a, SSM_STATUS_INVALID_SHAPE, "dd (H) for d (H,P)", "dd");
        a.dd = vt(&g, SSM_DTYPE_F32, 2, shp, rng);
        TEST_CHECK_STATUS(ssm_mamba2_scan_bwd(g_ref, &g.p, &a), SSM_STATUS_OK);
        vfix_free(&g);
    }
    /* overlaps: an output on an input, two outputs on one buffer */
    a = ok, a.dx = a.x;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_LAYOUT, "dx overlaps x", "dx");
    a = ok, a.dz = a.dout;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_LAYOUT, "dz overlaps dout", "dz");
    a = ok, a.dinitial_states = a.dfinal_states;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_LAYOUT, "dinitial_states overlaps dfinal_states", "dinitial_states");
    a = ok, a.dc = a.db;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_LAYOUT, "dc overlaps db", "dc");
    a = ok, a.ddt_bias = a.da;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_LAYOUT, "ddt_bias overlaps da", "da");
    a = ok, a.da = a.a;
    expect_fail(&f, &f.p, &a, SSM_STATUS_INVALID_LAYOUT, "da overlaps a", "da");

    /* host tensors on the CUDA backend (its own test: test_cuda_mamba2_bwd) */
    if (g_cuda != NULL) ssmt_expect_cuda_refusal("mamba2_scan_bwd", g_cuda, ssm_mamba2_scan_bwd(g_cuda, &f.p, &ok));
    /* every output absent is a valid (empty) call */
    a = ok;
    for (int k = 0; k < NGRAD; ++k) memset(ssmt_m2_grad_slot(&a, k), 0, sizeof(ssm_tensor));
    TEST_CHECK_STATUS(ssm_mamba2_scan_bwd(NULL, &f.p, &a), SSM_STATUS_OK);
    vfix_free(&f);
}

/* ---- (e) empty views with huge strides ------------------------------------------------- */

/* P = 0 with a stride of 2^62 on the sequence dim of x, z, dout and their gradients: valid (an
 * empty view addresses nothing), and no backend may form an offset from those strides (the
 * tokens are still walked for dt, B and C: int64 overflow, UBSan). With P = 0 there is no
 * state, so every gradient is zero. */
static void test_empty_views(ssmt_rng * rng) {
    enum { EB = 2, ES = 5, EH = 2, EN = 4 };
    const int64_t sx[4] = {EB, ES, EH, 0}, sb[4] = {EB, ES, 1, EN}, sdt[3] = {EB, ES, EH}, sh[1] = {EH};
    vfix          f;
    memset(&f, 0, sizeof f);
    ssm_mamba2_scan_bwd_args * a = &f.a;
    a->x = vt(&f, SSM_DTYPE_F32, 4, sx, rng), a->dt = vt(&f, SSM_DTYPE_F32, 3, sdt, rng);
    a->a = vt(&f, SSM_DTYPE_F32, 1, sh, rng), a->b = vt(&f, SSM_DTYPE_F32, 4, sb, rng);
    a->c = vt(&f, SSM_DTYPE_F32, 4, sb, rng), a->d = vt(&f, SSM_DTYPE_F32, 1, sh, rng);
    a->z = vt(&f, SSM_DTYPE_F32, 4, sx, rng), a->dt_bias = vt(&f, SSM_DTYPE_F32, 1, sh, rng);
    a->dout = vt(&f, SSM_DTYPE_F32, 4, sx, rng);
    for (int k = 0; k < NGRAD; ++k)
        if (ssmt_m2_grad_input(a, k)->data != NULL)
            *ssmt_m2_grad_slot(a, k) =
                vt(&f, SSM_DTYPE_F32, ssmt_m2_grad_input(a, k)->ndim, ssmt_m2_grad_input(a, k)->shape, rng);
    ssm_tensor * huge[] = {&a->x, &a->z, &a->dout, &a->dx, &a->dz};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; ++i) huge[i]->strides[1] = INT64_C(1) << 62;
    ssm_mamba2_params_init(&f.p);
    f.p.chunk_size = 4;
    ssm_context * ctxs[3] = {g_ref, g_cpu[2], g_scalar};
    for (int c = 0; c < 3; ++c) {
        for (int k = 0; k < NGRAD; ++k)
            if (ssmt_m2_grad_slot(a, k)->data != NULL) ssmt_poison(ssmt_m2_grad_slot(a, k));
        TEST_CHECK_STATUS(ssm_mamba2_scan_bwd(ctxs[c], &f.p, a), SSM_STATUS_OK);
        ssm_tensor * zero[] = {&a->ddt, &a->da, &a->db, &a->dc, &a->dd, &a->ddt_bias};
        for (size_t i = 0; i < sizeof zero / sizeof zero[0]; ++i)
            for (int64_t e = 0; e < ssmt_numel(zero[i]); ++e)
                TEST_CHECK(ssmt_get(zero[i], e) == 0, "empty views (ctx %d): gradient %zu [%lld] = %g, want 0", c, i,
                           (long long)e, ssmt_get(zero[i], e));
    }
    printf("ok  P = 0, sequence stride 2^62 (REF, CPU, CPU scalar)\n");
    vfix_free(&f);
}

int main(void) {
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261202u);
    ssmt_make_cpu_ctxs(&g_ref, g_cpu, &g_scalar);
    g_cuda = ssmt_make_ctx(SSM_BACKEND_CUDA, 1, SSM_ISA_AUTO);
    if (ssmt_failures) TEST_EXIT();
    printf("cpu isa %s\n", ssm_isa_name(ssm_context_isa(g_cpu[1])));

    char names[32][128];
    const int n = ssmt_case_list("mamba2_scan_bwd", names, 32);
    TEST_CHECK(n >= 4, "found %d mamba2_scan_bwd cases", n);
    for (int i = 0; i < n; ++i) data_case(names[i]);
    test_fd(&rng);
    test_cpu(&rng);
    test_validation(&rng);
    test_empty_views(&rng);

    ssmt_free_cpu_ctxs(g_ref, g_cpu, g_scalar);
    ssm_context_free(g_cuda);
    TEST_EXIT();
}
