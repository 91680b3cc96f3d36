/*
 * test_mamba2_cpu.c — the optimised CPU backend of every Mamba-2 forward operator against
 * the float64 reference (run with F64 outputs), on seeded random shapes around the tile
 * and chunk edges, with every optional input on and off, f32/f16/bf16 inputs, strided
 * views, NaN-poisoned outputs. Also: 1, 2 and 3 threads give identical bytes, the scalar
 * ISA passes the same bars, and chunk_state runs on the CANN layout at the CANN shape.
 * Seed: SSMOPS_TEST_SEED (default 20261201).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static ssm_context *ctx_ref, *ctx_cpu[4], *ctx_scalar;
static int          have_avx2;

/* ---- the op-generic harness: ssmt_op_case / ssmt_op_run (testutil) ------------------- *
 * For each output slot: REF into F64, CPU (threads 1/2/3 and scalar) into out_dtype; bars
 * for the compute dtype; memcmp across thread counts. */
static void run_case(const ssmt_op_case * oc) { ssmt_op_run(oc, ctx_ref, ctx_cpu, ctx_scalar); }

/* ---- runners -------------------------------------------------------------------------- */
static ssm_mamba2_params g_params;
static ssm_status run_cumsum(ssm_context * c, void * a) {
    return ssm_mamba2_chunk_cumsum(c, &g_params, a);
}
static ssm_status run_state(ssm_context * c, void * a) {
    return ssm_mamba2_chunk_state(c, &g_params, a);
}
static ssm_status run_passing(ssm_context * c, void * a) {
    return ssm_mamba2_state_passing(c, &g_params, a);
}
static ssm_status run_bmm(ssm_context * c, void * a) {
    return ssm_mamba2_bmm(c, &g_params, a);
}
static ssm_status run_chunk_scan(ssm_context * c, void * a) {
    return ssm_mamba2_chunk_scan(c, &g_params, a);
}
/* The scan runs with a caller workspace of exactly the reported size. */
static ssm_status run_scan(ssm_context * c, void * a) {
    size_t           bytes = 0;
    const ssm_status s     = ssm_mamba2_scan_workspace_size(c, &g_params, a, &bytes);
    if (s != SSM_STATUS_OK) return s;
    void * ws = bytes ? aligned_alloc(64, (bytes + 63) & ~(size_t) 63) : NULL;
    const ssm_status r = ssm_mamba2_scan(c, &g_params, a, ws, bytes);
    free(ws);
    return r;
}

static int64_t force_boundary_at = 0;

/* ---- one configuration: the whole chain ---------------------------------------------- */
static void test_config(ssmt_rng * rng, const ssmt_mamba2_config * cfg, int64_t chunk, int softplus, int limit,
                        const char * tag) {
    ssmt_mamba2_problem prob;
    if (ssmt_mamba2_random_args(rng, cfg, &prob) != 0) {
        TEST_CHECK(0, "%s: could not build the problem", tag);
        return;
    }
    if (force_boundary_at > 0 && prob.seq_idx.t.data) /* ids 0 | 1 split exactly there */
        for (int64_t b = 0; b < cfg->batch; ++b)
            for (int64_t t = 0; t < cfg->seqlen; ++t)
                ssmt_set(&prob.seq_idx.t, b * cfg->seqlen + t, t < force_boundary_at ? 0 : 1);
    ssm_mamba2_params_init(&g_params);
    g_params.chunk_size  = chunk;
    g_params.dt_softplus = softplus;
    if (limit) {
        g_params.dt_limit_lo = 0.002f;
        g_params.dt_limit_hi = 0.08f;
    }
    char name[256];

    /* combined scan */
    {
        ssm_mamba2_scan_args a = prob.args;
        snprintf(name, sizeof name, "scan[%s]", tag);
        ssmt_op_case oc = ssmt_op_case_make(name, NULL, &a, sizeof a, cfg->dtype, cfg->out_dtype, run_scan);
        ssmt_op_add_out(&oc, &a.out);
        ssmt_op_add_out(&oc, &a.final_states);
        run_case(&oc);
    }
    if (prob.nseq > 0) { /* the standalone ops have no varlen form */
        ssmt_mamba2_problem_free(&prob);
        return;
    }
    const int64_t B = cfg->batch, S = cfg->seqlen, H = cfg->nheads, P = cfg->headdim, N = cfg->dstate,
                  G = cfg->ngroups, Q = chunk, NC = (S + Q - 1) / Q;
    const ssm_tensor * seq = prob.seq_idx.t.data ? &prob.seq_idx.t : NULL;

    /* chunk_cumsum (REF with F32 outputs also feeds the later ops) */
    const int64_t hq[4] = { B, H, NC, Q };
    ssmt_host     dt_out = ssmt_alloc(SSM_DTYPE_F32, 4, hq), dacs = ssmt_alloc(SSM_DTYPE_F32, 4, hq);
    {
        ssm_mamba2_chunk_cumsum_args a = { 0 };
        a.dt = prob.dt.t, a.a = prob.a.t, a.dt_bias = prob.dt_bias.t, a.dt_out = dt_out.t, a.da_cumsum = dacs.t;
        snprintf(name, sizeof name, "chunk_cumsum[%s]", tag);
        ssmt_op_case oc = ssmt_op_case_make(name, NULL, &a, sizeof a, SSM_DTYPE_F32, SSM_DTYPE_F32, run_cumsum);
        ssmt_op_add_out(&oc, &a.dt_out);
        ssmt_op_add_out(&oc, &a.da_cumsum);
        run_case(&oc);
        TEST_CHECK_STATUS(ssm_mamba2_chunk_cumsum(ctx_ref, &g_params, &a), SSM_STATUS_OK);
    }
    /* chunk_state */
    const int64_t spn[5] = { B, NC, H, P, N };
    ssmt_host     states = ssmt_alloc(SSM_DTYPE_F32, 5, spn);
    {
        ssm_mamba2_chunk_state_args a = { 0 };
        a.b = prob.b.t, a.x = prob.x.t, a.dt = dt_out.t, a.da_cumsum = dacs.t, a.states = states.t;
        if (seq) a.seq_idx = *seq;
        snprintf(name, sizeof name, "chunk_state[%s]", tag);
        ssmt_op_case oc = ssmt_op_case_make(name, NULL, &a, sizeof a, cfg->dtype, cfg->out_dtype, run_state);
        ssmt_op_add_out(&oc, &a.states);
        run_case(&oc);
        TEST_CHECK_STATUS(ssm_mamba2_chunk_state(ctx_ref, &g_params, &a), SSM_STATUS_OK);
    }
    /* state_passing: da_chunk_cumsum is a strided view of da_cumsum[..., Q−1] */
    ssmt_host states_in = ssmt_alloc(SSM_DTYPE_F32, 5, spn);
    {
        ssm_mamba2_state_passing_args a = { 0 };
        ssm_tensor dcc = dacs.t;
        dcc.ndim       = 3;
        dcc.shape[2]   = NC;
        dcc.strides[0] = H * NC * Q, dcc.strides[1] = NC * Q, dcc.strides[2] = Q;
        dcc.data       = (float *) dacs.t.data + (Q - 1);
        a.states = states.t, a.da_chunk_cumsum = dcc, a.initial_states = prob.initial_states.t, a.states_in = states_in.t;
        if (seq) a.seq_idx = *seq;
        const int64_t fshape[4] = { B, H, P, N };
        ssmt_host     fin       = ssmt_alloc(SSM_DTYPE_F32, 4, fshape);
        if (cfg->has_final) a.final_states = fin.t;
        snprintf(name, sizeof name, "state_passing[%s]", tag);
        ssmt_op_case oc = ssmt_op_case_make(name, NULL, &a, sizeof a, cfg->dtype, cfg->out_dtype, run_passing);
        ssmt_op_add_out(&oc, &a.states_in);
        ssmt_op_add_out(&oc, &a.final_states);
        run_case(&oc);
        TEST_CHECK_STATUS(ssm_mamba2_state_passing(ctx_ref, &g_params, &a), SSM_STATUS_OK);
        ssmt_free(&fin);
    }
    /* bmm */
    const int64_t cbs[5] = { B, NC, G, Q, Q };
    ssmt_host     cb     = ssmt_alloc(SSM_DTYPE_F32, 5, cbs);
    {
        ssm_mamba2_bmm_args a = { 0 };
        a.c = prob.c.t, a.b = prob.b.t, a.cb = cb.t;
        if (seq) a.seq_idx = *seq;
        snprintf(name, sizeof name, "bmm[%s]", tag);
        ssmt_op_case oc = ssmt_op_case_make(name, NULL, &a, sizeof a, cfg->dtype, cfg->out_dtype, run_bmm);
        ssmt_op_add_out(&oc, &a.cb);
        run_case(&oc);
        TEST_CHECK_STATUS(ssm_mamba2_bmm(ctx_ref, &g_params, &a), SSM_STATUS_OK);
    }
    /* chunk_scan */
    {
        ssm_mamba2_chunk_scan_args a = { 0 };
        a.cb = cb.t, a.x = prob.x.t, a.dt = dt_out.t, a.da_cumsum = dacs.t, a.c = prob.c.t, a.states_in = states_in.t;
        a.d = prob.d.t, a.z = prob.z.t;
        if (seq) a.seq_idx = *seq;
        ssmt_host outx = ssmt_alloc(cfg->out_dtype, 4, prob.x.t.shape);
        ssmt_host out  = ssmt_alloc(cfg->out_dtype, 4, prob.x.t.shape);
        a.out          = out.t;
        if (cfg->has_z) a.out_x = outx.t;
        snprintf(name, sizeof name, "chunk_scan[%s]", tag);
        ssmt_op_case oc = ssmt_op_case_make(name, NULL, &a, sizeof a, cfg->dtype, cfg->out_dtype, run_chunk_scan);
        ssmt_op_add_out(&oc, &a.out);
        ssmt_op_add_out(&oc, &a.out_x);
        run_case(&oc);
        ssmt_free(&outx);
        ssmt_free(&out);
    }
    ssmt_free(&dt_out), ssmt_free(&dacs), ssmt_free(&states), ssmt_free(&states_in), ssmt_free(&cb);
    ssmt_mamba2_problem_free(&prob);
}

/* ---- CANN-layout chunk_state at the CANN shape ---------------------------------------- */
static void test_cann_chunk_state(ssmt_rng * rng) {
    ssmt_cann_chunk_state c;
    ssmt_cann_chunk_state_make(rng, &c);
    g_params = c.params;
    ssm_mamba2_chunk_state_args a = c.args;
    TEST_CHECK_STATUS(ssm_mamba2_chunk_state(ctx_ref, &g_params, &a), SSM_STATUS_OK);
    a.states = c.outv;
    TEST_CHECK_STATUS(ssm_mamba2_chunk_state(ctx_cpu[2], &g_params, &a), SSM_STATUS_OK);
    ssmt_check_bar("chunk_state[cann B1 NC4 L256 H128 G8 N128 P64 f16]", &c.out.t, &c.ref.t, SSM_DTYPE_F16);
    ssmt_cann_chunk_state_free(&c);
}

int main(void) {
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261201u);
    const int ctxs_ok = ssmt_make_cpu_ctxs(&ctx_ref, ctx_cpu, &ctx_scalar);
    have_avx2 = ctx_cpu[1] && ssm_context_isa(ctx_cpu[1]) == SSM_ISA_AVX2;
    printf("cpu isa %s\n", ctx_cpu[1] ? ssm_isa_name(ssm_context_isa(ctx_cpu[1])) : "?");
    if (!ctxs_ok) TEST_EXIT();

    /* shape sweep: S around the chunk and the internal chunk 64 */
    static const int64_t seqlens[] = { 1, 7, 31, 64, 65, 200, 257 };
    static const ssm_dtype dtypes[] = { SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16 };
    int                    k       = 0;
    for (size_t si = 0; si < sizeof seqlens / sizeof seqlens[0]; ++si) {
        for (int variant = 0; variant < 3; ++variant, ++k) {
            ssmt_mamba2_config cfg;
            ssmt_mamba2_config_init(&cfg);
            cfg.batch  = 1 + (k % 2);
            cfg.seqlen = seqlens[si];
            static const int64_t hpng[][4] = { { 4, 5, 3, 1 }, { 6, 24, 40, 6 }, { 6, 64, 128, 3 }, { 2, 16, 16, 2 } };
            const int            sh        = k % 4;
            cfg.nheads = hpng[sh][0], cfg.headdim = hpng[sh][1], cfg.dstate = hpng[sh][2], cfg.ngroups = hpng[sh][3];
            if (cfg.seqlen > 100 && sh == 2) cfg.nheads = 3; /* keep the reference quick */
            cfg.dtype       = dtypes[k % 3];
            cfg.out_dtype   = (k % 5 == 0) ? cfg.dtype : SSM_DTYPE_F32;
            cfg.d_mode      = k % 3;
            cfg.has_z       = (k % 2) == 1;
            cfg.has_dt_bias = (k % 4) != 3;
            cfg.has_initial = (k % 3) != 1;
            cfg.has_final   = (k % 2) == 0 || cfg.has_initial;
            cfg.dt_softplus = (k % 3) == 0;
            cfg.strided     = (k % 2) == 0;
            cfg.index_i64   = (k % 4) == 1;
            int64_t lens[4] = { cfg.seqlen / 3, 0, cfg.seqlen - cfg.seqlen / 3 - cfg.seqlen / 4, cfg.seqlen / 4 };
            ssmt_mamba2_layout(&cfg, variant, cfg.seqlen > 1 ? 3 : 0, lens, 4);
            static const int64_t chunks[] = { 16, 64, 32, 7 };
            char tag[200];
            snprintf(tag, sizeof tag, "S%lld H%lld P%lld N%lld G%lld %s v%d", (long long) cfg.seqlen,
                     (long long) cfg.nheads, (long long) cfg.headdim, (long long) cfg.dstate, (long long) cfg.ngroups,
                     ssm_dtype_name(cfg.dtype), variant);
            test_config(&rng, &cfg, chunks[k % 4], cfg.dt_softplus, (k % 5) == 2, tag);
        }
    }
    /* a seq_idx boundary exactly on a chunk boundary */
    {
        ssmt_mamba2_config cfg;
        ssmt_mamba2_config_init(&cfg);
        cfg.seqlen = 128, cfg.seq_segments = 2, cfg.has_initial = 1, cfg.has_final = 1, cfg.d_mode = 2, cfg.has_z = 1;
        force_boundary_at = 64;
        test_config(&rng, &cfg, 64, 1, 0, "S128 seq on boundary");
        force_boundary_at = 0;
    }
    test_cann_chunk_state(&rng);
    (void) have_avx2;
    ssmt_free_cpu_ctxs(ctx_ref, ctx_cpu, ctx_scalar);
    TEST_EXIT();
}
