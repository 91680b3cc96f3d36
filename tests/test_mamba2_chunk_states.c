/*
 * test_mamba2_chunk_states.c — mamba2_scan's chunk_states (the state at every chunk boundary
 * of each sequence, for prefix caching) on REF and CPU.
 *
 * The expected row for a boundary is computed independently: the float64 reference run on the
 * sequence cut at that boundary (same initial state), its final state. Sequences start at
 * absolute positions num_computed_tokens[i]; the cases include empty sequences, sequences
 * shorter than a chunk, ending exactly on a boundary and starting mid-chunk, in varlen and
 * in dense batch rows. Checked: the REF rows (float64 closeness), CPU rows in f32 and bf16
 * within the bars, out and final_states unchanged by asking for chunk_states, identical
 * bytes for 1 and 3 threads, chunk_states together with state pools, the invalid calls
 * (wrong row count, seq_idx, num_computed_tokens alone / negative / of another length)
 * failing without writing. Cases with bf16 inputs, and long sequences at a chunk size that
 * does not divide 256 (the CUDA scan's own chunk), cut differently from every backend's tiling.
 * Built with SSMT_CHUNKS_ON_CUDA (test_cuda_mamba2_chunk_states.c) the backend under test is
 * CUDA (every tensor copied to device memory; against the cut REF runs within the bars of the
 * input dtype), run twice — the second time with device index tensors — for the same bytes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/testutil.h"
#ifdef SSMT_CHUNKS_ON_CUDA
#include "common/cudautil.h"
#endif

static int64_t Q = 8; /* the chunk size of the case */

static ssm_context * g_cuda; /* the CUDA context (SSMT_CHUNKS_ON_CUDA), else NULL */
#ifdef SSMT_CHUNKS_ON_CUDA
static const ssm_mamba2_params * g_prm;
static ssm_status                call_scan(ssm_context * ctx, void * a) {
    return ssm_mamba2_scan(ctx, g_prm, a, NULL, 0);
}
#endif
/* The scan on ctx (on the CUDA context: on device copies, dev_idx: the index tensors too). */
static ssm_status run_scan(ssm_context * ctx, const ssm_mamba2_params * p, const ssm_mamba2_scan_args * a,
                           int dev_idx) {
#ifdef SSMT_CHUNKS_ON_CUDA
    g_prm = p;
    if (ctx == g_cuda) return ssmt_run_on_device(ctx, "mamba2_scan", a, dev_idx, call_scan);
#endif
    (void)dev_idx;
    return ssm_mamba2_scan(ctx, p, a, NULL, 0);
}
/* The bars of the backend under test: the input dtype on CUDA (its 16-bit paths), fp32 on
 * the CPU. */
static ssm_dtype compute_of(const ssm_tensor * x) {
    return g_cuda != NULL && (x->dtype == SSM_DTYPE_BF16 || x->dtype == SSM_DTYPE_F16) ? (ssm_dtype)x->dtype
                                                                                     : SSM_DTYPE_F32;
}

/* The expected chunk_states rows (float64, (rows, H, P, N)) from cut reference runs. */
static ssmt_host expected_rows(ssm_context * ref, const ssm_mamba2_params * prm, const ssmt_mamba2_problem * pb,
                               const ssm_tensor * computed, int64_t * nrows) {
    const ssm_mamba2_scan_args * a = &pb->args;
    const int                    varlen = a->cu_seqlens.data != NULL;
    const int64_t                ns = varlen ? pb->nseq : a->x.shape[0];
    const int64_t                H = a->x.shape[2], P = a->x.shape[3], N = a->b.shape[3];
    int64_t                      rows = 0;
    for (int pass = 0; pass < 2; ++pass) {
        ssmt_host out = {0};
        if (pass == 1) {
            const int64_t sh[4] = {rows, H, P, N};
            out = ssmt_alloc(SSM_DTYPE_F64, 4, sh);
        }
        int64_t r = 0;
        for (int64_t i = 0; i < ns; ++i) {
            const int64_t st = varlen ? (int64_t)ssmt_get(&a->cu_seqlens, i) : 0;
            const int64_t len = varlen ? (int64_t)ssmt_get(&a->cu_seqlens, i + 1) - st : a->x.shape[1];
            const int64_t row = varlen ? 0 : i;
            const int64_t c = computed->data ? (int64_t)ssmt_get(computed, i) : 0;
            for (int64_t t = 1; t <= len; ++t) {
                if ((c + t) % Q != 0) continue;
                if (pass == 1) {
                    ssm_mamba2_scan_args cut = *a;
                    ssm_tensor *         toks[5] = {&cut.x, &cut.dt, &cut.b, &cut.c, &cut.z};
                    for (int k = 0; k < 5; ++k) {
                        if (toks[k]->data == NULL) continue;
                        const ssm_tensor rowv = ssmt_slice(toks[k], 0, row, 1);
                        *toks[k] = ssmt_slice(&rowv, 1, st, t);
                    }
                    const int64_t osh[4] = {1, t, H, P};
                    ssmt_host     o = ssmt_alloc(SSM_DTYPE_F64, 4, osh);
                    cut.out = o.t;
                    cut.initial_states =
                        a->initial_states.data ? ssmt_slice(&a->initial_states, 0, i, 1) : ssmt_absent();
                    cut.final_states = ssmt_slice(&out.t, 0, r, 1);
                    cut.cu_seqlens = ssmt_absent();
                    cut.seq_idx = ssmt_absent();
                    TEST_CHECK_STATUS(ssm_mamba2_scan(ref, prm, &cut, NULL, 0), SSM_STATUS_OK);
                    ssmt_free(&o);
                }
                ++r;
            }
        }
        rows = r;
        if (pass == 1) {
            *nrows = rows;
            return out;
        }
    }
    return (ssmt_host){0};
}

static void run_case(const char * name, ssmt_mamba2_config * cfg, const int64_t * computed_vals, ssm_context * ref,
                     ssm_context * cpu1, ssm_context * cpu3, ssmt_rng * rng) {
    printf("%s\n", name);
    ssmt_mamba2_problem pb;
    if (ssmt_mamba2_random_args(rng, cfg, &pb) != 0) {
        TEST_CHECK(0, "%s: allocation", name);
        return;
    }
    ssm_mamba2_params prm;
    ssm_mamba2_params_init(&prm);
    prm.chunk_size = Q;
    prm.dt_softplus = 1;
    const int64_t ns = cfg->nseq > 0 ? cfg->nseq : cfg->batch;
    const int64_t ns1[1] = {ns};
    ssmt_host     computed = ssmt_alloc(SSM_DTYPE_I32, 1, ns1);
    for (int64_t i = 0; i < ns; ++i) ssmt_set(&computed.t, i, (double)computed_vals[i]);
    int64_t         rows = 0;
    ssmt_host       want = expected_rows(ref, &prm, &pb, &computed.t, &rows);
    const int64_t   H = cfg->nheads, P = cfg->headdim, N = cfg->dstate;
    const int64_t   csh[4] = {rows, H, P, N};
    ssm_mamba2_scan_args a = pb.args;

    /* reference without chunk_states: out and finals */
    ssmt_host ref_out = ssmt_alloc(SSM_DTYPE_F64, 4, a.out.shape);
    ssmt_host ref_fin = ssmt_alloc(SSM_DTYPE_F64, 4, a.final_states.shape);
    a.out = ref_out.t;
    a.final_states = ref_fin.t;
    TEST_CHECK_STATUS(ssm_mamba2_scan(ref, &prm, &a, NULL, 0), SSM_STATUS_OK);

    /* reference with chunk_states */
    ssmt_host rows_ref = ssmt_alloc(SSM_DTYPE_F64, 4, csh);
    ssmt_host out2 = ssmt_alloc(SSM_DTYPE_F64, 4, a.out.shape);
    ssmt_host fin2 = ssmt_alloc(SSM_DTYPE_F64, 4, a.final_states.shape);
    a.out = out2.t;
    a.final_states = fin2.t;
    a.chunk_states = rows_ref.t;
    a.num_computed_tokens = computed.t;
    TEST_CHECK_STATUS(ssm_mamba2_scan(ref, &prm, &a, NULL, 0), SSM_STATUS_OK);
    if (rows > 0) ssmt_check_close("ref chunk_states vs cut runs", &rows_ref.t, &want.t, 1e-12);
    ssmt_check_close("ref out with chunk_states", &out2.t, &ref_out.t, 1e-12);
    ssmt_check_close("ref final with chunk_states", &fin2.t, &ref_fin.t, 1e-12);

    /* the backend, f32 and bf16 rows, twice (CPU: 1 and 3 threads) */
    const ssm_dtype dts[2] = {SSM_DTYPE_F32, SSM_DTYPE_BF16};
    const ssm_dtype compute = compute_of(&a.x);
    for (int di = 0; di < 2; ++di) {
        ssmt_host rows1 = ssmt_alloc_layout(dts[di], 4, csh, NULL, 1);
        ssmt_host rows3 = ssmt_alloc_layout(dts[di], 4, csh, NULL, 1);
        ssmt_host o1 = ssmt_alloc(SSM_DTYPE_F32, 4, a.out.shape), o3 = ssmt_alloc(SSM_DTYPE_F32, 4, a.out.shape);
        ssmt_host f1 = ssmt_alloc(SSM_DTYPE_F32, 4, a.final_states.shape);
        ssmt_host f3 = ssmt_alloc(SSM_DTYPE_F32, 4, a.final_states.shape);
        ssmt_fill_value(&rows1.t, NAN), ssmt_fill_value(&rows3.t, NAN); /* poisoned */
        ssmt_fill_value(&o1.t, NAN), ssmt_fill_value(&o3.t, NAN), ssmt_fill_value(&f1.t, NAN);
        ssmt_fill_value(&f3.t, NAN);
        a.chunk_states = rows1.t, a.out = o1.t, a.final_states = f1.t;
        TEST_CHECK_STATUS(run_scan(cpu1, &prm, &a, 0), SSM_STATUS_OK);
        a.chunk_states = rows3.t, a.out = o3.t, a.final_states = f3.t;
        TEST_CHECK_STATUS(run_scan(cpu3, &prm, &a, 1), SSM_STATUS_OK);
        if (rows > 0) {
            if (dts[di] == SSM_DTYPE_F32)
                ssmt_check_bar("chunk_states f32", &rows1.t, &want.t, compute);
            else
                ssmt_check_bar_rounded("chunk_states bf16", &rows1.t, &want.t,
                                       compute == SSM_DTYPE_F32 ? SSM_DTYPE_BF16 : compute);
        }
        ssmt_check_bar("out with chunk_states", &o1.t, &ref_out.t, compute);
        ssmt_check_bar("final with chunk_states", &f1.t, &ref_fin.t, compute);
        TEST_CHECK(memcmp(rows1.buf, rows3.buf, rows1.bytes) == 0, "%s: chunk_states differ between the two runs",
                   name);
        TEST_CHECK(memcmp(o1.buf, o3.buf, o1.bytes) == 0 && memcmp(f1.buf, f3.buf, f1.bytes) == 0,
                   "%s: out/final differ between the two runs", name);
        ssmt_free(&rows1), ssmt_free(&rows3), ssmt_free(&o1), ssmt_free(&o3), ssmt_free(&f1), ssmt_free(&f3);
    }

    /* chunk_states with state pools: the pooled call's rows are the dense call's bytes */
    if (a.initial_states.data != NULL) {
        const int64_t slots = ns + 2;
        int64_t       psh[4] = {slots, H, P, N};
        ssmt_host     pool = ssmt_alloc_layout((ssm_dtype)a.initial_states.dtype, 4, psh, NULL, 1);
        ssmt_host     idx = ssmt_alloc(SSM_DTYPE_I64, 1, ns1);
        ssmt_fill_normal(rng, &pool.t, 0.0, 1.0);
        for (int64_t i = 0; i < ns; ++i) {
            ssmt_set(&idx.t, i, (double)(slots - 1 - i));
            const ssm_tensor src = ssmt_pick(&a.initial_states, 0, i), dst = ssmt_pick(&pool.t, 0, slots - 1 - i);
            ssmt_copy(&dst, &src);
        }
        ssmt_host d_rows = ssmt_alloc(SSM_DTYPE_F32, 4, csh), p_rows = ssmt_alloc(SSM_DTYPE_F32, 4, csh);
        ssmt_host d_out = ssmt_alloc(SSM_DTYPE_F32, 4, a.out.shape), p_out = ssmt_alloc(SSM_DTYPE_F32, 4, a.out.shape);
        ssm_mamba2_scan_args b = a;
        b.final_states = ssmt_absent();
        b.chunk_states = d_rows.t, b.out = d_out.t;
        TEST_CHECK_STATUS(run_scan(cpu3, &prm, &b, 0), SSM_STATUS_OK);
        b.initial_states = pool.t, b.initial_state_indices = idx.t;
        b.chunk_states = p_rows.t, b.out = p_out.t;
        TEST_CHECK_STATUS(run_scan(cpu3, &prm, &b, 1), SSM_STATUS_OK);
        TEST_CHECK(memcmp(d_rows.buf, p_rows.buf, d_rows.bytes) == 0 && memcmp(d_out.buf, p_out.buf, d_out.bytes) == 0,
                   "%s: pooled chunk_states differ from the dense call", name);
        ssmt_free(&pool), ssmt_free(&idx), ssmt_free(&d_rows), ssmt_free(&p_rows), ssmt_free(&d_out),
            ssmt_free(&p_out);
    }

    /* invalid calls write nothing */
    {
        const int64_t csh1[4] = {rows + 1, H, P, N}; /* room for the one-row-too-many view below */
        ssmt_host     rows_bad = ssmt_alloc(SSM_DTYPE_F32, 4, csh1);
        ssmt_host o = ssmt_alloc(SSM_DTYPE_F32, 4, a.out.shape);
        ssm_mamba2_scan_args b = a;
        b.final_states = ssmt_absent();
        b.out = o.t;
        b.chunk_states = ssmt_reshaped(&rows_bad.t, 0, rows);
        void *     so = ssmt_snapshot(&o);
        void *     sr = ssmt_snapshot(&rows_bad);
        ssm_status st;
        b.chunk_states = ssmt_reshaped(&rows_bad.t, 0, rows + 1);
        st = run_scan(cpu1, &prm, &b, 0);
        TEST_CHECK(st == SSM_STATUS_INVALID_SHAPE, "%s: one row too many: %s", name, ssm_status_string(st));
        b.chunk_states = ssmt_reshaped(&rows_bad.t, 0, rows);
        ssmt_host neg = ssmt_clone(&computed.t, SSM_DTYPE_I64);
        ssmt_set(&neg.t, ns - 1, -1.0);
        b.num_computed_tokens = neg.t;
        st = run_scan(g_cuda != NULL ? g_cuda : ref, &prm, &b, 0);
        TEST_CHECK(st == SSM_STATUS_INVALID_ARGUMENT, "%s: negative num_computed_tokens: %s", name,
                   ssm_status_string(st));
        b.num_computed_tokens = ssmt_reshaped(&computed.t, 0, ns + 1);
        st = run_scan(cpu1, &prm, &b, 0);
        TEST_CHECK(st == SSM_STATUS_INVALID_SHAPE, "%s: num_computed_tokens of another length: %s", name,
                   ssm_status_string(st));
        b.num_computed_tokens = computed.t;
        b.chunk_states = ssmt_absent();
        st = run_scan(cpu1, &prm, &b, 0);
        TEST_CHECK(st == SSM_STATUS_INVALID_ARGUMENT, "%s: num_computed_tokens without chunk_states: %s", name,
                   ssm_status_string(st));
        if (cfg->nseq == 0) {
            const int64_t sq[2] = {cfg->batch, cfg->seqlen};
            ssmt_host     seq = ssmt_alloc(SSM_DTYPE_I32, 2, sq);
            ssmt_fill_value(&seq.t, 0.0);
            b.seq_idx = seq.t;
            b.chunk_states = ssmt_reshaped(&rows_bad.t, 0, rows);
            st = run_scan(cpu1, &prm, &b, 0);
            TEST_CHECK(st == SSM_STATUS_INVALID_ARGUMENT, "%s: chunk_states with seq_idx: %s", name,
                       ssm_status_string(st));
            ssmt_free(&seq);
        }
        TEST_CHECK(ssmt_unchanged(&o, so) && ssmt_unchanged(&rows_bad, sr), "%s: a failed call wrote", name);
        free(so), free(sr);
        ssmt_free(&neg), ssmt_free(&rows_bad), ssmt_free(&o);
    }

    ssmt_free(&computed), ssmt_free(&want), ssmt_free(&ref_out), ssmt_free(&ref_fin), ssmt_free(&rows_ref),
        ssmt_free(&out2), ssmt_free(&fin2);
    ssmt_mamba2_problem_free(&pb);
}

int main(void) {
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 4242);
#ifdef SSMT_CHUNKS_ON_CUDA
    if (!ssmt_cuda_present("test_cuda_mamba2_chunk_states")) return 77;
    g_cuda = ssmt_make_ctx(SSM_BACKEND_CUDA, 1, SSM_ISA_AUTO);
    ssm_context * cpu1 = g_cuda, *cpu3 = g_cuda; /* the backend under test, twice */
#else
    ssm_context * cpu1 = ssmt_make_ctx(SSM_BACKEND_CPU, 1, SSM_ISA_AUTO);
    ssm_context * cpu3 = ssmt_make_ctx(SSM_BACKEND_CPU, 3, SSM_ISA_AUTO);
#endif
    ssm_context * ref = ssmt_make_ctx(SSM_BACKEND_REF, 1, SSM_ISA_AUTO);

    ssmt_mamba2_config cfg;
    /* varlen: empty, shorter than a chunk, exactly on boundaries, mid-chunk starts, long */
    static const int64_t lens[7] = {0, 5, 16, 37, 1, 0, 70};
    static const int64_t starts[7] = {0, 3, 8, 13, 7, 5, 0};
    ssmt_mamba2_config_init(&cfg);
    cfg.nseq = 7, cfg.seqlens = lens;
    cfg.has_initial = 1, cfg.has_final = 1, cfg.has_z = 1, cfg.d_mode = 2, cfg.has_dt_bias = 1;
    cfg.dt_softplus = 1;
    run_case("varlen", &cfg, starts, ref, cpu1, cpu3, &rng);
    static const int64_t zeros[7] = {0};
    run_case("varlen from position 0", &cfg, zeros, ref, cpu1, cpu3, &rng);
    cfg.dtype = SSM_DTYPE_BF16; /* the 16-bit scans (CUDA: the split state pass) */
    run_case("varlen bf16", &cfg, starts, ref, cpu1, cpu3, &rng);
    cfg.dtype = SSM_DTYPE_F32;
    cfg.has_initial = 0;
    run_case("varlen without initial states", &cfg, starts, ref, cpu1, cpu3, &rng);

    /* long sequences at a chunk size that does not divide 256, N a multiple of 8 */
    static const int64_t long_lens[4] = {300, 0, 530, 97};
    static const int64_t long_starts[4] = {50, 7, 700, 95};
    ssmt_mamba2_config_init(&cfg);
    cfg.nseq = 4, cfg.seqlens = long_lens;
    cfg.dstate = 16;
    cfg.has_initial = 1, cfg.has_final = 1, cfg.has_z = 1, cfg.has_dt_bias = 1;
    cfg.dt_softplus = 1;
    Q = 96;
    run_case("long varlen, Q = 96", &cfg, long_starts, ref, cpu1, cpu3, &rng);
    cfg.dtype = SSM_DTYPE_BF16, cfg.dstate = 64; /* CUDA on sm_90: the wgmma state kernel */
    run_case("long varlen bf16, N = 64, Q = 96", &cfg, long_starts, ref, cpu1, cpu3, &rng);
    Q = 8;

    /* dense batch rows, strided inputs */
    static const int64_t row_starts[3] = {0, 6, 17};
    ssmt_mamba2_config_init(&cfg);
    cfg.batch = 3, cfg.seqlen = 21;
    cfg.has_initial = 1, cfg.has_final = 1, cfg.strided = 1;
    cfg.dt_softplus = 1;
    run_case("batch rows", &cfg, row_starts, ref, cpu1, cpu3, &rng);

    ssm_context_free(ref);
#ifdef SSMT_CHUNKS_ON_CUDA
    ssm_context_free(g_cuda);
#else
    ssm_context_free(cpu1);
    ssm_context_free(cpu3);
#endif
    TEST_EXIT();
}
