/*
 * test_cuda_mamba2_chunk_state.c — every entry of the CUDA selection table of
 * ssm_mamba2_chunk_state against the float64 reference (REF backend on host copies, F64 states),
 * with the DESIGN §5 bar of the compute dtype: the default choice, then each entry forced through
 * the context (ssm_context_set_variant), twice each on re-poisoned states (the same bytes both
 * times, and the default's bytes where the default is that entry). An entry that does not apply
 * must fail with UNSUPPORTED and leave the states untouched; the applicability rules are checked
 * exactly where they do not depend on the device ("mma": fp16/bf16 x and chunk_size ≤ 256;
 * "wmma": fp16/bf16 x; "ffma": fp32 x; "wgmma": never beyond its rule, and the default wherever it
 * ran), and the default must be the first entry that runs.
 * Cases: the upstream layout (dt and da_cumsum (b, h, c, i), states (b, c, h, p, n)) and the CANN
 * layout (dt and da_cumsum [b, c, i, h], states [b, c, h, n, p]); chunk sizes 64, 128, 256, odd
 * ones (97, 33) and one above the scan's 256-token chunk (300); partial last chunks and S below the
 * chunk; seq_idx (the chunk's earlier sequences left out); f16 and bf16 x (and one f32 case);
 * states in f32, f16 and bf16, contiguous (pairs along n) and padded (element stores); x and B in
 * padded layouts (the element-wise tile loads); a B of another dtype than x (B weighted instead of
 * x); N = 64 / 128 (wgmma) and N = 40 / 136 / 256, P = 64 / 72 / 24, G = 1, 1 < G < H, G = H.
 * f16/bf16 states are measured against the reference rounded to their dtype.
 * Label cuda; exits 77 ("no CUDA device: skipped", a CTest skip) without a GPU.
 * Seed: SSMOPS_TEST_SEED (default 20261202).
 */
#include <stdlib.h>
#include <string.h>

#include "cudautil.h"

static ssm_context *ctx_ref, *ctx_cuda;

enum { MAX_ENTRIES = 8 };
static int entry_ran[MAX_ENTRIES], entry_refused[MAX_ENTRIES];

typedef struct cs_case {
    int64_t   batch, seqlen, nheads, headdim, dstate, ngroups, chunk;
    ssm_dtype dtype;     /* x and B */
    ssm_dtype st_dtype;  /* states */
    int       cann;      /* CANN layout of dt, da_cumsum and states */
    int       seq_idx;   /* seq_idx with sequence changes inside chunks */
    int       st_padded; /* states in a padded layout (odd strides: element stores) */
    int       xb_padded; /* x and B in padded layouts */
    int       b_f32;     /* B in f32 whatever x's dtype */
} cs_case;

/* 1: the entry must apply, 0: it must not, −1: it depends on the device. */
static int entry_must_apply(const char * name, const cs_case * c) {
    const int sixteen = c->dtype != SSM_DTYPE_F32;
    if (strcmp(name, "ffma") == 0) return !sixteen;
    if (strcmp(name, "wmma") == 0) return sixteen;
    if (strcmp(name, "mma") == 0) return sixteen && c->chunk <= 256;
    if (strcmp(name, "wgmma") == 0) {
        const int layout = !c->xb_padded && !c->b_f32 && (c->dstate == 64 || c->dstate == 128) && c->headdim % 8 == 0;
        return sixteen && c->chunk <= 256 && layout ? -1 : 0;
    }
    return -1;
}

static int entry_index(const char * name) {
    const int32_t n = ssm_variant_count(SSM_BACKEND_CUDA, "mamba2_chunk_state");
    for (int32_t i = 0; i < n; ++i)
        if (strcmp(ssm_variant_name(SSM_BACKEND_CUDA, "mamba2_chunk_state", i), name) == 0) return (int)i;
    return -1;
}

/* The device states re-poisoned (NaN over the whole buffer, padding too) from the host copy. */
static void repoison(const ssmt_host * h, const ssmt_dev * d) {
    memset(h->buf, 0xFF, h->bytes); /* all-ones bytes: NaN in every float dtype */
    TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, d->mem, h->buf, h->bytes), SSM_STATUS_OK);
}

/* One call on re-poisoned states, its result copied back to got. variant NULL: the default. */
static ssm_status run_once(const ssm_mamba2_params * p, const ssm_mamba2_chunk_state_args * a, const ssmt_host * got,
                           const ssmt_dev * dst, const char * variant) {
    repoison(got, dst);
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba2_chunk_state", variant ? variant : "auto"),
                      SSM_STATUS_OK);
    const ssm_status st = ssm_mamba2_chunk_state(ctx_cuda, p, a);
    ssmt_to_host(got, dst);
    return st;
}

static void check_states(const char * label, const ssmt_host * got, const ssmt_host * ref, const cs_case * c) {
    if (c->st_dtype == SSM_DTYPE_F32)
        ssmt_check_bar(label, &got->t, &ref->t, c->dtype);
    else
        ssmt_check_bar_rounded(label, &got->t, &ref->t, c->dtype);
}

static void run_case(ssmt_rng * rng, const cs_case * c) {
    char tag[256];
    snprintf(tag, sizeof tag, "%s S%lld B%lld Q%lld H%lld P%lld N%lld G%lld %s%s st-%s%s%s%s",
             c->cann ? "cann" : "upstream", (long long)c->seqlen, (long long)c->batch, (long long)c->chunk,
             (long long)c->nheads, (long long)c->headdim, (long long)c->dstate, (long long)c->ngroups,
             ssm_dtype_name(c->dtype), c->seq_idx ? " seq_idx" : "", ssm_dtype_name(c->st_dtype),
             c->st_padded ? " padded" : "", c->xb_padded ? " xb-padded" : "", c->b_f32 ? " b-f32" : "");
    ssmt_mamba2_config cfg;
    ssmt_mamba2_config_init(&cfg);
    cfg.batch = c->batch, cfg.seqlen = c->seqlen, cfg.nheads = c->nheads, cfg.headdim = c->headdim;
    cfg.dstate = c->dstate, cfg.ngroups = c->ngroups, cfg.dtype = c->dtype;
    cfg.has_dt_bias = 1, cfg.dt_softplus = 1;
    cfg.seq_segments = c->seq_idx ? 3 : 0;
    cfg.strided = c->xb_padded;
    ssmt_mamba2_problem pr;
    if (ssmt_mamba2_random_args(rng, &cfg, &pr) != 0) {
        TEST_CHECK(0, "%s: allocation failed", tag);
        return;
    }
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    p.chunk_size = c->chunk;
    p.dt_softplus = 1;
    const int64_t B = c->batch, S = c->seqlen, H = c->nheads, P = c->headdim, N = c->dstate;
    const int64_t NC = (S + c->chunk - 1) / c->chunk, Q = c->chunk;
    /* processed dt and its cumsum from the reference's chunk_cumsum, (b, h, c, i) */
    const int64_t sdt[4] = {B, H, NC, Q};
    ssmt_host     dt = ssmt_alloc(SSM_DTYPE_F32, 4, sdt), dacs = ssmt_alloc(SSM_DTYPE_F32, 4, sdt);
    ssm_mamba2_chunk_cumsum_args ca = {0};
    ca.dt = pr.args.dt, ca.a = pr.args.a, ca.dt_bias = pr.args.dt_bias, ca.dt_out = dt.t, ca.da_cumsum = dacs.t;
    TEST_CHECK_STATUS(ssm_mamba2_chunk_cumsum(ctx_ref, &p, &ca), SSM_STATUS_OK);
    /* the operator's inputs in the case's layouts: CANN [b, c, i, h] (memory order b, c, i, h of the
     * logical (b, h, c, i)) */
    static const int32_t cann_t[4] = {0, 2, 3, 1}, cann_s[5] = {0, 1, 2, 4, 3};
    ssmt_host dtl = ssmt_alloc_layout(SSM_DTYPE_F32, 4, sdt, c->cann ? cann_t : NULL, 0);
    ssmt_host dal = ssmt_alloc_layout(SSM_DTYPE_F32, 4, sdt, c->cann ? cann_t : NULL, 0);
    ssmt_copy(&dtl.t, &dt.t), ssmt_copy(&dal.t, &dacs.t);
    ssmt_host bl = ssmt_clone(&pr.b.t, c->b_f32 ? SSM_DTYPE_F32 : c->dtype);
    if (c->xb_padded) { /* keep the problem's padded B, converted where asked */
        ssmt_free(&bl);
        bl = ssmt_alloc_layout(c->b_f32 ? SSM_DTYPE_F32 : c->dtype, 4, pr.b.t.shape, NULL, 3);
        ssmt_copy(&bl.t, &pr.b.t);
    }
    const int64_t sst[5] = {B, NC, H, P, N};
    ssmt_host     ref = ssmt_alloc(SSM_DTYPE_F64, 5, sst);
    ssmt_host     got = ssmt_alloc_layout(c->st_dtype, 5, sst, c->cann ? cann_s : NULL, c->st_padded ? 1 : 0);
    ssm_mamba2_chunk_state_args a = {0};
    a.b = bl.t, a.x = pr.args.x, a.dt = dtl.t, a.da_cumsum = dal.t, a.seq_idx = pr.args.seq_idx, a.states = ref.t;
    TEST_CHECK_STATUS(ssm_mamba2_chunk_state(ctx_ref, &p, &a), SSM_STATUS_OK);

    ssmt_dev db = ssmt_to_device(&bl), dx = ssmt_to_device(&pr.x), ddt = ssmt_to_device(&dtl);
    ssmt_dev dda = ssmt_to_device(&dal), dst = ssmt_to_device(&got);
    a.b = db.view, a.x = dx.view, a.dt = ddt.view, a.da_cumsum = dda.view, a.states = dst.view;
    /* seq_idx stays in host memory (the backend reads it there to plan) */

    /* the default: the first entry that runs */
    char       def[64] = "";
    ssm_status st = run_once(&p, &a, &got, &dst, NULL);
    TEST_CHECK(st == SSM_STATUS_OK, "%s: default %s (%s)", tag, ssm_status_string(st), ssm_context_last_error(ctx_cuda));
    if (st == SSM_STATUS_OK) {
        snprintf(def, sizeof def, "%s", ssm_context_last_variant(ctx_cuda));
        char label[352]; /* "chunk_state[" tag "] default=" def */
        snprintf(label, sizeof label, "chunk_state[%s] default=%s", tag, def);
        check_states(label, &got, &ref, c);
    }
    void *        def_bytes = ssmt_snapshot(&got);
    int           first_runs = -1; /* table index of the first entry that runs */
    const int32_t n = ssm_variant_count(SSM_BACKEND_CUDA, "mamba2_chunk_state");
    ssmt_variant_forced = 1;
    for (int32_t i = 0; i < n && i < MAX_ENTRIES; ++i) {
        const char * name = ssm_variant_name(SSM_BACKEND_CUDA, "mamba2_chunk_state", i);
        const int    must = entry_must_apply(name, c);
        st = run_once(&p, &a, &got, &dst, name);
        TEST_CHECK(st == SSM_STATUS_OK || st == SSM_STATUS_UNSUPPORTED, "%s: forced %s gave %s (%s)", tag, name,
                   ssm_status_string(st), ssm_context_last_error(ctx_cuda));
        TEST_CHECK(must < 0 || (st == SSM_STATUS_OK) == (must == 1), "%s: forced %s gave %s, expected it %s", tag, name,
                   ssm_status_string(st), must ? "to run" : "not to apply");
        if (st != SSM_STATUS_OK) {
            ++entry_refused[i];
            /* a refused call writes nothing: the states are still all poison */
            const unsigned char * bytes = (const unsigned char *)got.buf;
            size_t                k = 0;
            while (k < got.bytes && bytes[k] == 0xFF) ++k;
            TEST_CHECK(k == got.bytes, "%s: refused %s wrote the states", tag, name);
            continue;
        }
        ++entry_ran[i];
        if (first_runs < 0) first_runs = (int)i;
        TEST_CHECK(strcmp(ssm_context_last_variant(ctx_cuda), name) == 0, "%s: ran %s, forced %s", tag,
                   ssm_context_last_variant(ctx_cuda), name);
        char label[352];
        snprintf(label, sizeof label, "chunk_state[%s] %s", tag, name);
        check_states(label, &got, &ref, c);
        void * once = ssmt_snapshot(&got);
        st = run_once(&p, &a, &got, &dst, name);
        TEST_CHECK(st == SSM_STATUS_OK && ssmt_unchanged(&got, once), "%s: %s run twice gave other bytes", tag, name);
        if (strcmp(def, name) == 0)
            TEST_CHECK(ssmt_unchanged(&got, def_bytes), "%s: forced %s differs from the default", tag, name);
        free(once);
    }
    ssmt_variant_forced = 0;
    TEST_CHECK(first_runs >= 0 && strcmp(def, ssm_variant_name(SSM_BACKEND_CUDA, "mamba2_chunk_state", first_runs)) == 0,
               "%s: the default ran '%s', not the first entry that runs", tag, def);
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba2_chunk_state", "auto"), SSM_STATUS_OK);
    free(def_bytes);
    ssmt_dev_free(&db), ssmt_dev_free(&dx), ssmt_dev_free(&ddt), ssmt_dev_free(&dda), ssmt_dev_free(&dst);
    ssmt_free(&dt), ssmt_free(&dacs), ssmt_free(&dtl), ssmt_free(&dal), ssmt_free(&bl), ssmt_free(&ref);
    ssmt_free(&got);
    ssmt_mamba2_problem_free(&pr);
}

int main(void) {
    if (!ssmt_cuda_present("test_cuda_mamba2_chunk_state")) return 77;
    const char * env = getenv("SSMOPS_TEST_SEED");
    uint64_t     seed = env ? strtoull(env, NULL, 10) : 20261202u;
    printf("seed %llu\n", (unsigned long long)seed);
    ssmt_rng rng;
    ssmt_rng_seed(&rng, seed);
    ctx_ref = ssmt_make_ctx(SSM_BACKEND_REF, 0, SSM_ISA_AUTO);
    ctx_cuda = ssmt_make_ctx(SSM_BACKEND_CUDA, 0, SSM_ISA_AUTO);
    TEST_CHECK(ctx_ref && ctx_cuda, "context creation failed");
    if (ssmt_failures) TEST_EXIT();

    /* H, P, N, G: the wgmma layouts (N = 64 / 128, P = 64 / 72), then N off them (mma only) */
    static const int64_t hpng[][4] = {{4, 64, 128, 1}, {6, 72, 64, 3}, {4, 64, 64, 4}, {3, 24, 40, 1},
                                      {2, 72, 136, 2}, {2, 64, 256, 1}};
    /* chunk sizes and sequence lengths: S at, below and off multiples of the chunk */
    static const int64_t chunk_s[][2] = {{64, 200},  {128, 128}, {256, 700}, {97, 300}, {33, 100},
                                         {256, 100}, {128, 389}, {64, 64},   {300, 650}};
    static const ssm_dtype st_dtypes[] = {SSM_DTYPE_F32, SSM_DTYPE_BF16, SSM_DTYPE_F16};
    int                    k = 0;
    for (size_t ci = 0; ci < sizeof chunk_s / sizeof chunk_s[0]; ++ci) {
        for (int cann = 0; cann < 2; ++cann) {
            for (int si = 0; si < 2; ++si, ++k) {
                const int64_t * s = hpng[(ci + (size_t)cann + 2 * (size_t)si) % 6];
                cs_case         c;
                memset(&c, 0, sizeof c);
                c.batch = 1 + (k % 2);
                c.chunk = chunk_s[ci][0], c.seqlen = chunk_s[ci][1];
                c.nheads = s[0], c.headdim = s[1], c.dstate = s[2], c.ngroups = s[3];
                c.dtype = (k % 2) ? SSM_DTYPE_BF16 : SSM_DTYPE_F16;
                c.cann = cann;
                c.seq_idx = si;
                /* states: f32 mostly (the operator's usual dtype), 16-bit every third case, padded
                 * every fourth */
                c.st_dtype = (k % 3 == 2) ? st_dtypes[1 + (k / 3) % 2] : SSM_DTYPE_F32;
                c.st_padded = (k % 4) == 1;
                c.xb_padded = (k % 7) == 3;
                c.b_f32 = (k % 5) == 4;
                run_case(&rng, &c);
            }
        }
    }
    /* fp32 x (ffma) in both layouts */
    {
        cs_case c = {2, 150, 4, 64, 128, 2, 64, SSM_DTYPE_F32, SSM_DTYPE_F32, 0, 1, 0, 0, 0};
        run_case(&rng, &c);
        c.cann = 1, c.seq_idx = 0;
        run_case(&rng, &c);
    }
    {
        /* the CANN test's layout and dtypes at a smaller size: H = 16 heads over G = 8 groups, S = 2·Q */
        cs_case c = {1, 512, 16, 64, 128, 8, 256, SSM_DTYPE_F16, SSM_DTYPE_F32, 1, 0, 0, 0, 0};
        run_case(&rng, &c);
    }

    const int32_t n = ssm_variant_count(SSM_BACKEND_CUDA, "mamba2_chunk_state");
    for (int32_t i = 0; i < n && i < MAX_ENTRIES; ++i) {
        const char * name = ssm_variant_name(SSM_BACKEND_CUDA, "mamba2_chunk_state", i);
        printf("mamba2_chunk_state variant %-6s ran %3d times, did not apply %3d times\n", name, entry_ran[i],
               entry_refused[i]);
        if (strcmp(name, "wgmma") != 0) TEST_CHECK(entry_ran[i] > 0, "variant %s never ran", name);
    }
    TEST_CHECK(entry_index("wgmma") == 0 && entry_index("mma") == 1, "the table's order: wgmma, mma first");
    ssm_context_free(ctx_ref);
    ssm_context_free(ctx_cuda);
    TEST_EXIT();
}
