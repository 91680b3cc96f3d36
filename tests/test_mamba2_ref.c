/*
 * test_mamba2_ref.c — the float64 reference backend of the Mamba-2 forward operators.
 *  (a) the stored upstream float64 outputs of tests/data (chunk_cumsum, chunk_state incl.
 *      the CANN layout through strides, scan incl. seq_idx and varlen): rel_rms ≤ 1e-10;
 *  (b) chained reference scan == token-by-token recurrence over many option combinations;
 *  (c) the five public ops chained by hand == ssm_mamba2_scan (REF);
 *  (d) a sequence split in two (final → initial) == one call;
 *  (e) varlen == one call per sequence; an empty sequence returns its initial state.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ref/ssmi_ref.h"
#include "testutil.h"

#define DATA_TOL 1e-10
#define EXACT_TOL 1e-12

static ssm_context * g_ref; /* REF backend context */

/* ---- helpers --------------------------------------------------------------------------- */

/* Dims of a scan call, as ops/ would fill them (for the internal recurrent reference). */
static ssmi_mamba2_dims scan_dims(const ssm_mamba2_scan_args * a, int64_t chunk) {
    ssmi_mamba2_dims d;
    memset(&d, 0, sizeof d);
    d.batch = a->x.shape[0];
    d.seqlen = a->x.shape[1];
    d.nheads = a->x.shape[2];
    d.headdim = a->x.shape[3];
    d.ngroups = a->b.shape[2];
    d.dstate = a->b.shape[3];
    d.chunk = chunk;
    d.nchunks = (d.seqlen + chunk - 1) / chunk;
    d.nseq = a->cu_seqlens.data != NULL ? a->cu_seqlens.shape[0] - 1 : 0;
    return d;
}

/* ---- (a) stored test vectors ------------------------------------------------------------ */

/* Loads case `name` of op and its params; a counted failure and −1 when it cannot be loaded.
 * The stored outputs are checked with ssmt_check_tol (max_rel 100x: rms vs max over a few
 * thousand values). */
static int load_case(ssmt_case * c, const char * op, const char * name, ssm_mamba2_params * p) {
    if (ssmt_case_load(c, op, name) != 0) {
        TEST_CHECK(0, "cannot load case %s", name);
        return -1;
    }
    ssmt_case_mamba2_params(c, p);
    return 0;
}

static void data_chunk_cumsum(const char * name) {
    ssmt_case         c;
    ssm_mamba2_params p;
    if (load_case(&c, "mamba2_chunk_cumsum", name, &p) != 0) return;
    ssmt_host dt = ssmt_case_tensor(&c, "dt", SSM_DTYPE_F32), a = ssmt_case_tensor(&c, "a", SSM_DTYPE_F32);
    ssmt_host bias = ssmt_case_has(&c, "dt_bias") ? ssmt_case_tensor(&c, "dt_bias", SSM_DTYPE_F32) : (ssmt_host){0};
    ssmt_host want_dt = ssmt_case_tensor(&c, "dt_out", SSM_DTYPE_F64);
    ssmt_host want_da = ssmt_case_tensor(&c, "da_cumsum", SSM_DTYPE_F64);
    ssmt_host dt_out = ssmt_alloc(SSM_DTYPE_F64, 4, want_dt.t.shape);
    ssmt_host da = ssmt_alloc(SSM_DTYPE_F64, 4, want_da.t.shape);
    ssm_mamba2_chunk_cumsum_args args = {
        .dt = dt.t, .a = a.t, .dt_bias = bias.t, .dt_out = dt_out.t, .da_cumsum = da.t};
    TEST_CHECK_STATUS(ssm_mamba2_chunk_cumsum(g_ref, &p, &args), SSM_STATUS_OK);
    char         label[200];
    const double tol = DATA_TOL;
    snprintf(label, sizeof label, "data chunk_cumsum/%s dt_out", name);
    ssmt_check_tol(label, &dt_out.t, &want_dt.t, tol);
    snprintf(label, sizeof label, "data chunk_cumsum/%s da_cumsum", name);
    ssmt_check_tol(label, &da.t, &want_da.t, tol);
    ssmt_host * all[] = {&dt, &a, &bias, &want_dt, &want_da, &dt_out, &da};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
}

/* CANN tensors viewed in upstream layout (spec §0.2). */
static void cann_views(ssm_mamba2_chunk_state_args * args, const ssmt_host * x, const ssmt_host * b,
                       const ssmt_host * dt, const ssmt_host * da, const ssmt_host * st) {
    const int64_t B = x->t.shape[0], NC = x->t.shape[1], L = x->t.shape[2], H = x->t.shape[3], P = x->t.shape[4];
    const int64_t G = b->t.shape[3], N = b->t.shape[4];
    const int64_t sx[4] = {B, NC * L, H, P}, sb[4] = {B, NC * L, G, N};
    args->x = ssm_tensor_make(x->t.data, (ssm_dtype)x->t.dtype, 4, sx);
    args->b = ssm_tensor_make(b->t.data, (ssm_dtype)b->t.dtype, 4, sb);
    /* dt/da [B,NC,L,H] as (B,H,NC,Q): strides (NC·L·H, 1, L·H, H) */
    const int64_t sd[4] = {B, H, NC, L};
    args->dt = ssm_tensor_make(dt->t.data, (ssm_dtype)dt->t.dtype, 4, sd);
    args->dt.strides[0] = NC * L * H;
    args->dt.strides[1] = 1;
    args->dt.strides[2] = L * H;
    args->dt.strides[3] = H;
    args->da_cumsum = args->dt;
    args->da_cumsum.data = da->t.data;
    args->da_cumsum.dtype = da->t.dtype;
    /* states [B,NC,H,N,P] as (B,NC,H,P,N): last two strides swapped */
    const int64_t ss[5] = {B, NC, H, P, N};
    args->states = ssm_tensor_make(st->t.data, (ssm_dtype)st->t.dtype, 5, ss);
    args->states.strides[3] = 1;
    args->states.strides[4] = P;
}

static void data_chunk_state(const char * name) {
    ssmt_case         c;
    ssm_mamba2_params p;
    if (load_case(&c, "mamba2_chunk_state", name, &p) != 0) return;
    ssmt_host x = ssmt_case_tensor(&c, "x", SSM_DTYPE_F32), b = ssmt_case_tensor(&c, "b", SSM_DTYPE_F32);
    ssmt_host dt = ssmt_case_tensor(&c, "dt", SSM_DTYPE_F32), da = ssmt_case_tensor(&c, "da_cumsum", SSM_DTYPE_F32);
    ssmt_host seq = ssmt_case_has(&c, "seq_idx") ? ssmt_case_tensor(&c, "seq_idx", SSM_DTYPE_I32) : (ssmt_host){0};
    ssmt_host want = ssmt_case_tensor(&c, "states", SSM_DTYPE_F64);
    ssmt_host st = ssmt_alloc(SSM_DTYPE_F64, want.t.ndim, want.t.shape);
    ssm_mamba2_chunk_state_args args = {
        .b = b.t, .x = x.t, .dt = dt.t, .da_cumsum = da.t, .seq_idx = seq.t, .states = st.t};
    if (strcmp(c.layout, "cann") == 0) cann_views(&args, &x, &b, &dt, &da, &st);
    TEST_CHECK_STATUS(ssm_mamba2_chunk_state(g_ref, &p, &args), SSM_STATUS_OK);
    char label[200];
    snprintf(label, sizeof label, "data chunk_state/%s%s", name, c.layout[0] ? " (cann)" : "");
    ssmt_check_tol(label, &st.t, &want.t, DATA_TOL);
    ssmt_host * all[] = {&x, &b, &dt, &da, &seq, &want, &st};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
}

static void data_scan(const char * name, int index_i64) {
    ssmt_case         c;
    ssm_mamba2_params p;
    if (load_case(&c, "mamba2_scan", name, &p) != 0) return;
    static const char * const fl[] = {"x", "dt", "a", "b", "c", "d", "z", "dt_bias", "initial_states"};
    ssmt_host                 in[9], seq = {0}, cu = {0};
    for (int i = 0; i < 9; ++i)
        in[i] = ssmt_case_has(&c, fl[i]) ? ssmt_case_tensor(&c, fl[i], SSM_DTYPE_F32) : (ssmt_host){0};
    const ssm_dtype idt = index_i64 ? SSM_DTYPE_I64 : SSM_DTYPE_I32;
    if (ssmt_case_has(&c, "seq_idx")) seq = ssmt_case_tensor(&c, "seq_idx", idt);
    if (ssmt_case_has(&c, "cu_seqlens")) cu = ssmt_case_tensor(&c, "cu_seqlens", idt);
    ssmt_host            want_out = ssmt_case_tensor(&c, "out", SSM_DTYPE_F64);
    ssmt_host            want_fin = ssmt_case_tensor(&c, "final_states", SSM_DTYPE_F64);
    ssmt_host            out = ssmt_alloc(SSM_DTYPE_F64, 4, want_out.t.shape);
    ssmt_host            fin = ssmt_alloc(SSM_DTYPE_F64, 4, want_fin.t.shape);
    ssm_mamba2_scan_args args = {.x = in[0].t,
                                 .dt = in[1].t,
                                 .a = in[2].t,
                                 .b = in[3].t,
                                 .c = in[4].t,
                                 .d = in[5].t,
                                 .z = in[6].t,
                                 .dt_bias = in[7].t,
                                 .initial_states = in[8].t,
                                 .seq_idx = seq.t,
                                 .cu_seqlens = cu.t,
                                 .out = out.t,
                                 .final_states = fin.t};
    TEST_CHECK_STATUS(ssm_mamba2_scan(g_ref, &p, &args, NULL, 0), SSM_STATUS_OK);
    const double tol = DATA_TOL;
    char         label[200];
    snprintf(label, sizeof label, "data scan/%s%s out", name, index_i64 ? " (i64)" : "");
    ssmt_check_tol(label, &out.t, &want_out.t, tol);
    snprintf(label, sizeof label, "data scan/%s%s final_states", name, index_i64 ? " (i64)" : "");
    ssmt_check_tol(label, &fin.t, &want_fin.t, tol);

    /* The recurrent reference must match the stored outputs as well. */
    ssmt_poison(&out.t);
    ssmt_poison(&fin.t);
    const ssmi_mamba2_dims d = scan_dims(&args, p.chunk_size);
    TEST_CHECK_STATUS(ssmi_ref_mamba2_scan_recurrent(NULL, &p, &d, &args), SSM_STATUS_OK);
    snprintf(label, sizeof label, "data scan/%s recurrent out", name);
    ssmt_check_tol(label, &out.t, &want_out.t, tol);
    snprintf(label, sizeof label, "data scan/%s recurrent final_states", name);
    ssmt_check_tol(label, &fin.t, &want_fin.t, tol);

    for (int i = 0; i < 9; ++i) ssmt_free(&in[i]);
    ssmt_host * all[] = {&seq, &cu, &want_out, &want_fin, &out, &fin};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
}

static void test_data(void) {
    char names[64][128];
    int  n = ssmt_case_list("mamba2_chunk_cumsum", names, 64);
    TEST_CHECK(n >= 3, "found %d chunk_cumsum cases", n);
    for (int i = 0; i < n; ++i) data_chunk_cumsum(names[i]);
    n = ssmt_case_list("mamba2_chunk_state", names, 64);
    TEST_CHECK(n >= 5, "found %d chunk_state cases", n);
    for (int i = 0; i < n; ++i) data_chunk_state(names[i]);
    n = ssmt_case_list("mamba2_scan", names, 64);
    TEST_CHECK(n >= 7, "found %d scan cases", n);
    for (int i = 0; i < n; ++i) data_scan(names[i], 0);
    data_scan("varlen", 1);
    data_scan("seq_idx_g2", 1);
}

/* ---- (b) chained == recurrent ----------------------------------------------------------- */

static void chained_vs_recurrent(int iter, ssmt_rng * rng) {
    static const int64_t chunks[] = {8, 16, 32, 64};
    const int64_t        Q = chunks[iter % 4];
    /* S below / at / above Q, odd, multi-chunk */
    const int64_t      lens[] = {1, Q - 1, Q, Q + 1, 2 * Q + 3, 3 * Q - 1, 5, 97};
    ssmt_mamba2_config cfg;
    ssmt_mamba2_config_init(&cfg);
    cfg.batch = 1 + iter % 2;
    cfg.seqlen = lens[(iter / 2) % 8];
    if (cfg.seqlen < 1) cfg.seqlen = 1;
    cfg.nheads = 4;
    static const int64_t groups[] = {1, 4, 2};
    cfg.ngroups = groups[iter % 3];
    cfg.headdim = 3 + iter % 3;
    cfg.dstate = 4 + (iter % 4);
    static const ssm_dtype dts[] = {SSM_DTYPE_F32, SSM_DTYPE_BF16, SSM_DTYPE_F16, SSM_DTYPE_F64};
    cfg.dtype = dts[iter % 4];
    cfg.out_dtype = SSM_DTYPE_F64;
    cfg.d_mode = iter % 3;
    cfg.has_z = (iter / 3) % 2;
    cfg.has_dt_bias = (iter / 2) % 2;
    cfg.dt_softplus = (iter / 4) % 2;
    cfg.has_initial = (iter / 5) % 2;
    cfg.has_final = 1;
    cfg.strided = (iter / 7) % 2;
    cfg.index_i64 = (iter / 3) % 2;
    const int mode = iter % 5; /* 0-2 plain, 3 seq_idx, 4 varlen */
    int64_t   seqlens[4];
    if (mode == 3) cfg.seq_segments = 3;
    if (mode == 4) {
        seqlens[0] = cfg.seqlen;
        seqlens[1] = 0; /* empty sequence */
        seqlens[2] = Q + 2;
        seqlens[3] = 3;
        cfg.nseq = 4;
        cfg.seqlens = seqlens;
    }
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    p.chunk_size = Q;
    p.dt_softplus = cfg.dt_softplus;
    if ((iter / 6) % 2) {
        p.dt_limit_lo = 0.005f;
        p.dt_limit_hi = 0.05f;
    }
    ssmt_mamba2_problem pr;
    if (ssmt_mamba2_random_args(rng, &cfg, &pr) != 0) {
        TEST_CHECK(0, "allocation failed");
        return;
    }
    TEST_CHECK_STATUS(ssm_mamba2_scan(g_ref, &p, &pr.args, NULL, 0), SSM_STATUS_OK);
    ssmt_host out_chain = ssmt_to_f64(&pr.out.t), fin_chain = ssmt_to_f64(&pr.final_states.t);
    ssmt_poison(&pr.out.t);
    ssmt_poison(&pr.final_states.t);
    const ssmi_mamba2_dims d = scan_dims(&pr.args, Q);
    TEST_CHECK_STATUS(ssmi_ref_mamba2_scan_recurrent(NULL, &p, &d, &pr.args), SSM_STATUS_OK);
    char label[256];
    snprintf(label, sizeof label, "chain==rec #%d Q=%lld S=%lld G=%lld %s%s%s%s%s%s", iter, (long long)Q,
             (long long)d.seqlen, (long long)cfg.ngroups, ssm_dtype_name(cfg.dtype),
             cfg.d_mode ? (cfg.d_mode == 1 ? " D1" : " D2") : "", cfg.has_z ? " z" : "", cfg.dt_softplus ? " sp" : "",
             mode == 3 ? " seq" : (mode == 4 ? " varlen" : ""), cfg.strided ? " strided" : "");
    ssmt_check_close(label, &out_chain.t, &pr.out.t, EXACT_TOL);
    snprintf(label, sizeof label, "chain==rec #%d final_states", iter);
    ssmt_check_close(label, &fin_chain.t, &pr.final_states.t, EXACT_TOL);
    ssmt_free(&out_chain);
    ssmt_free(&fin_chain);
    ssmt_mamba2_problem_free(&pr);
}

/* ---- (c) the five public ops == scan ------------------------------------------------------ */

/* The config of (c)-(e): z, dt_bias, dt_softplus and final states on, F64 outputs; d_mode and the
 * initial states as given. */
static ssmt_mamba2_config full_config(int32_t d_mode, int32_t has_initial) {
    ssmt_mamba2_config cfg;
    ssmt_mamba2_config_init(&cfg);
    cfg.d_mode = d_mode, cfg.has_initial = has_initial, cfg.out_dtype = SSM_DTYPE_F64;
    cfg.has_z = 1, cfg.has_dt_bias = 1, cfg.dt_softplus = 1, cfg.has_final = 1;
    return cfg;
}

/* Params with chunk size Q and dt_softplus (as full_config's problems are drawn). */
static ssm_mamba2_params softplus_params(int64_t Q) {
    ssm_mamba2_params p;
    ssm_mamba2_params_init(&p);
    p.chunk_size = Q, p.dt_softplus = 1;
    return p;
}

static void five_ops_vs_scan(ssmt_rng * rng, int with_seq) {
    ssmt_mamba2_config cfg = full_config(2, 1);
    cfg.batch = 2;
    cfg.seqlen = 45;
    cfg.ngroups = 2;
    cfg.seq_segments = with_seq ? 3 : 0;
    const ssm_mamba2_params p = softplus_params(16);
    ssmt_mamba2_problem pr;
    if (ssmt_mamba2_random_args(rng, &cfg, &pr) != 0) return;
    const ssm_mamba2_scan_args * a = &pr.args;
    TEST_CHECK_STATUS(ssm_mamba2_scan(g_ref, &p, a, NULL, 0), SSM_STATUS_OK);

    const int64_t B = cfg.batch, H = cfg.nheads, Q = p.chunk_size, NC = (cfg.seqlen + Q - 1) / Q;
    const int64_t sdt[4] = {B, H, NC, Q}, sst[5] = {B, NC, H, cfg.headdim, cfg.dstate};
    const int64_t scb[5] = {B, NC, cfg.ngroups, Q, Q}, sdc[3] = {B, H, NC};
    const int64_t sfin[4] = {B, H, cfg.headdim, cfg.dstate};
    ssmt_host     dt_out = ssmt_alloc(SSM_DTYPE_F64, 4, sdt), da = ssmt_alloc(SSM_DTYPE_F64, 4, sdt);
    ssmt_host     states = ssmt_alloc(SSM_DTYPE_F64, 5, sst), states_in = ssmt_alloc(SSM_DTYPE_F64, 5, sst);
    ssmt_host     cb = ssmt_alloc(SSM_DTYPE_F64, 5, scb), dachunk = ssmt_alloc(SSM_DTYPE_F64, 3, sdc);
    ssmt_host     fin = ssmt_alloc(SSM_DTYPE_F64, 4, sfin), out = ssmt_alloc(SSM_DTYPE_F64, 4, a->x.shape);
    ssmt_host     out_x = ssmt_alloc(SSM_DTYPE_F64, 4, a->x.shape);

    const ssm_mamba2_chunk_cumsum_args a1 = {
        .dt = a->dt, .a = a->a, .dt_bias = a->dt_bias, .dt_out = dt_out.t, .da_cumsum = da.t};
    TEST_CHECK_STATUS(ssm_mamba2_chunk_cumsum(g_ref, &p, &a1), SSM_STATUS_OK);
    const ssm_mamba2_chunk_state_args a2 = {
        .b = a->b, .x = a->x, .dt = dt_out.t, .da_cumsum = da.t, .seq_idx = a->seq_idx, .states = states.t};
    TEST_CHECK_STATUS(ssm_mamba2_chunk_state(g_ref, &p, &a2), SSM_STATUS_OK);
    for (int64_t i = 0; i < B * H * NC; ++i) ssmt_set(&dachunk.t, i, ssmt_get(&da.t, i * Q + Q - 1));
    const ssm_mamba2_state_passing_args a3 = {.states = states.t,
                                              .da_chunk_cumsum = dachunk.t,
                                              .initial_states = a->initial_states,
                                              .seq_idx = a->seq_idx,
                                              .states_in = states_in.t,
                                              .final_states = fin.t};
    TEST_CHECK_STATUS(ssm_mamba2_state_passing(g_ref, &p, &a3), SSM_STATUS_OK);
    const ssm_mamba2_bmm_args a4 = {.c = a->c, .b = a->b, .seq_idx = a->seq_idx, .cb = cb.t};
    TEST_CHECK_STATUS(ssm_mamba2_bmm(g_ref, &p, &a4), SSM_STATUS_OK);
    const ssm_mamba2_chunk_scan_args a5 = {.cb = cb.t,
                                           .x = a->x,
                                           .dt = dt_out.t,
                                           .da_cumsum = da.t,
                                           .c = a->c,
                                           .states_in = states_in.t,
                                           .d = a->d,
                                           .z = a->z,
                                           .seq_idx = a->seq_idx,
                                           .out = out.t,
                                           .out_x = out_x.t};
    TEST_CHECK_STATUS(ssm_mamba2_chunk_scan(g_ref, &p, &a5), SSM_STATUS_OK);
    ssmt_check_close(with_seq ? "five ops == scan (seq_idx) out" : "five ops == scan out", &out.t, &pr.out.t, 1e-15);
    ssmt_check_close(with_seq ? "five ops == scan (seq_idx) final" : "five ops == scan final", &fin.t,
                     &pr.final_states.t, 1e-15);
    /* out_x is the pre-gate value: out = out_x · silu(z) */
    int64_t bad = 0;
    for (int64_t i = 0; i < ssmt_numel(&out.t); ++i) {
        const double zz = ssmt_get(&a->z, i), y = ssmt_get(&out_x.t, i);
        if (fabs(y * zz / (1.0 + exp(-zz)) - ssmt_get(&out.t, i)) > 1e-12 * (1.0 + fabs(y))) ++bad;
    }
    TEST_CHECK(bad == 0, "out != out_x * silu(z) at %lld positions", (long long)bad);
    ssmt_host * all[] = {&dt_out, &da, &states, &states_in, &cb, &dachunk, &fin, &out, &out_x};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
    ssmt_mamba2_problem_free(&pr);
}

/* ---- (d) split == one call ---------------------------------------------------------------- */

static void split_vs_one(ssmt_rng * rng, int64_t S, int64_t split, int64_t Q) {
    ssmt_mamba2_config cfg = full_config(1, 1);
    cfg.seqlen = S;
    const ssm_mamba2_params p = softplus_params(Q);
    ssmt_mamba2_problem pr;
    if (ssmt_mamba2_random_args(rng, &cfg, &pr) != 0) return;
    TEST_CHECK_STATUS(ssm_mamba2_scan(g_ref, &p, &pr.args, NULL, 0), SSM_STATUS_OK);

    ssmt_host            out2 = ssmt_alloc(SSM_DTYPE_F64, 4, pr.x.t.shape);
    ssmt_host            mid = ssmt_alloc(SSM_DTYPE_F64, 4, pr.final_states.t.shape);
    ssmt_host            fin2 = ssmt_alloc(SSM_DTYPE_F64, 4, pr.final_states.t.shape);
    ssm_mamba2_scan_args first = pr.args, second = pr.args;
    ssm_tensor *         seq_first[] = {&first.x, &first.dt, &first.b, &first.c, &first.z};
    ssm_tensor *         seq_second[] = {&second.x, &second.dt, &second.b, &second.c, &second.z};
    for (int i = 0; i < 5; ++i) {
        *seq_first[i] = ssmt_slice(seq_first[i], 1, 0, split);
        *seq_second[i] = ssmt_slice(seq_second[i], 1, split, S - split);
    }
    first.out = ssmt_slice(&out2.t, 1, 0, split);
    first.final_states = mid.t;
    second.out = ssmt_slice(&out2.t, 1, split, S - split);
    second.initial_states = mid.t;
    second.final_states = fin2.t;
    TEST_CHECK_STATUS(ssm_mamba2_scan(g_ref, &p, &first, NULL, 0), SSM_STATUS_OK);
    TEST_CHECK_STATUS(ssm_mamba2_scan(g_ref, &p, &second, NULL, 0), SSM_STATUS_OK);
    char label[128];
    snprintf(label, sizeof label, "split S=%lld at %lld (Q=%lld) out", (long long)S, (long long)split, (long long)Q);
    ssmt_check_close(label, &out2.t, &pr.out.t, EXACT_TOL);
    snprintf(label, sizeof label, "split S=%lld at %lld (Q=%lld) final", (long long)S, (long long)split, (long long)Q);
    ssmt_check_close(label, &fin2.t, &pr.final_states.t, EXACT_TOL);
    ssmt_free(&out2);
    ssmt_free(&mid);
    ssmt_free(&fin2);
    ssmt_mamba2_problem_free(&pr);
}

/* ---- (e) varlen == separate calls ----------------------------------------------------------- */

static void varlen_vs_separate(ssmt_rng * rng, int with_initial) {
    static const int64_t lens[] = {5, 0, 37, 16, 0, 1};
    const int            nseq = 6;
    ssmt_mamba2_config   cfg = full_config(2, with_initial);
    cfg.nseq = nseq;
    cfg.seqlens = lens;
    const ssm_mamba2_params p = softplus_params(16);
    ssmt_mamba2_problem pr;
    if (ssmt_mamba2_random_args(rng, &cfg, &pr) != 0) return;
    TEST_CHECK_STATUS(ssm_mamba2_scan(g_ref, &p, &pr.args, NULL, 0), SSM_STATUS_OK);

    ssmt_host out2 = ssmt_alloc(SSM_DTYPE_F64, 4, pr.x.t.shape);
    ssmt_host fin2 = ssmt_alloc(SSM_DTYPE_F64, 4, pr.final_states.t.shape);
    int64_t   st = 0;
    for (int s = 0; s < nseq; ++s) {
        ssm_mamba2_scan_args one = pr.args;
        one.cu_seqlens = ssmt_absent();
        ssm_tensor * per_token[] = {&one.x, &one.dt, &one.b, &one.c, &one.z};
        for (int i = 0; i < 5; ++i) *per_token[i] = ssmt_slice(per_token[i], 1, st, lens[s]);
        one.out = ssmt_slice(&out2.t, 1, st, lens[s]);
        one.initial_states = ssmt_slice(&pr.args.initial_states, 0, s, 1);
        one.final_states = ssmt_slice(&fin2.t, 0, s, 1);
        TEST_CHECK_STATUS(ssm_mamba2_scan(g_ref, &p, &one, NULL, 0), SSM_STATUS_OK);
        st += lens[s];
        if (lens[s] == 0) { /* empty: final == initial (or 0), exactly */
            const ssm_tensor got = ssmt_slice(&pr.final_states.t, 0, s, 1);
            int64_t          bad = 0;
            for (int64_t i = 0; i < ssmt_numel(&got); ++i) {
                const double want = with_initial ? ssmt_get(&pr.initial_states.t, s * ssmt_numel(&got) + i) : 0.0;
                if (ssmt_get(&got, i) != want) ++bad;
            }
            TEST_CHECK(bad == 0, "varlen empty sequence %d: final differs from %s at %lld positions", s,
                       with_initial ? "initial" : "0", (long long)bad);
        }
    }
    ssmt_check_close(with_initial ? "varlen == separate (init) out" : "varlen == separate out", &pr.out.t, &out2.t,
                     EXACT_TOL);
    ssmt_check_close(with_initial ? "varlen == separate (init) final" : "varlen == separate final", &pr.final_states.t,
                     &fin2.t, EXACT_TOL);
    ssmt_free(&out2);
    ssmt_free(&fin2);
    ssmt_mamba2_problem_free(&pr);
}

int main(void) {
    g_ref = ssmt_ref_ctx_or_exit(SSM_REF_EXACT);
    ssmt_rng rng;
    ssmt_rng_seed(&rng, 20261129);

    test_data();
    for (int iter = 0; iter < 60; ++iter) chained_vs_recurrent(iter, &rng);
    five_ops_vs_scan(&rng, 0);
    five_ops_vs_scan(&rng, 1);
    split_vs_one(&rng, 70, 33, 16);
    split_vs_one(&rng, 64, 32, 16);
    split_vs_one(&rng, 9, 1, 8);
    varlen_vs_separate(&rng, 1);
    varlen_vs_separate(&rng, 0);

    ssm_context_free(g_ref);
    TEST_EXIT();
}
