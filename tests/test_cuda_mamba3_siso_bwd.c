/*
 * test_cuda_mamba3_siso_bwd.c — the CUDA backend of ssm_mamba3_siso_bwd (every gradient of
 * ssm_mamba3_siso) against the float64 reference backward (REF on the host copies, F64 outputs) and
 * against the CPU backend, both within the DESIGN §5 bar of the compute dtype (v's dtype), at the
 * shape matrix of test_mamba3_siso_bwd_cpu.c: S = 1, below / at / above the CPU chunk and odd
 * (the CUDA chunks: 64 tokens in chunked_planes, 32 there for K = V = 96, 32 in chunked; several
 * chunks and tails, a length ending one token short of a 64-token chunk); Hq = 1, 1 < Hq < H,
 * Hq = H; K, V in {32, 64, 96}, a small odd V, K = 128 (V = 64: the gradient kernel's compile-time
 * instance, also through strided views) and K = 256 with V = 200 (the state outside shared memory);
 * A = K/2, A < K/2, A = 1; d and z on and off; initial states on and off,
 * with and without the dfinal_* gradients; varlen with empty sequences (I32 and I64 cu_seqlens;
 * at K = 128, V = 64 sequences of exactly one 64-token chunk, of 2·64 + 1 and of 63 tokens);
 * f32 / f16 / bf16 inputs; strided views and angles broadcast over heads (stride 0); the seed
 * regime; only some outputs requested. Outputs are F32, NaN-poisoned before each device run; a
 * second run on re-poisoned outputs must give identical bytes; with SSMOPS_TEST_HASH_LOG every
 * entry's gradients are hashed per case (two builds compared byte for byte). Prints the worst rel_rms per
 * gradient and dtype. Selection table: with 16-bit q, k, v every case runs chunked_planes forced
 * (it may refuse where its shared memory does not fit, K = 256 with V = 200), chained_planes32
 * forced (it may run where chunked_planes ran with K % 32 == 0 and K <= 128 — it also needs 16-byte
 * rows of one 16-bit dtype and 64-token chunks — and must refuse elsewhere), chained_planes forced
 * (the same with K % 64 == 0; its walk blocks are twice as wide, its gradients must be
 * chained_planes32's bytes), chunked forced and the default (chunked_planes where it ran, else
 * chunked; either chain entry is accepted there too, since their rules depend on the device's SM
 * count); with fp32 the default is chunked and the plane entries forced must answer UNSUPPORTED
 * without writing an output; chunked_planes and both chain entries must each run on some case
 * (ssm_context_last_variant names the entry that ran). A varlen case at K = V = 64 (empty sequences first and in the middle, a 2-token and a
 * 17-token tail chunk, initial states and every dfinal_*) covers the chain's walk cases; a GQA
 * case of 20 chunks, Hq = 2 groups of 6 heads, the plane gradient kernel's multi-head slices.
 * Six cases run again given the CUDA forward's saved results, chunk_states (F32 dense: used in
 * place; F64 padded where the case is strided: copied) and pregate_y (with z), within the same
 * bars against the reference and the CPU backend run without them: the chain entries read
 * chunk_states instead of their forward walk (with them doubled on the device the gradients
 * change); chunked_planes reads pregate_y only (every gradient but dz the bytes of its run
 * without them, and dz doubled to the bit with pregate_y doubled).
 * Label cuda; exits 77 ("no CUDA device: skipped", a CTest skip) without a GPU.
 * Seed: SSMOPS_TEST_SEED (default 20261206).
 */
#include <stdlib.h>
#include <string.h>

#include "cudautil.h"
#include "grads.h"

static ssm_context *ctx_ref, *ctx_cpu, *ctx_cuda;
static double       worst[3][SSMT_SISO_NGRADS]; /* per compute dtype (0 f32, 1 f16, 2 bf16), vs the reference */
static int          dtype_slot(ssm_dtype t) { return t == SSM_DTYPE_F16 ? 1 : t == SSM_DTYPE_BF16 ? 2 : 0; }

typedef struct bwd_case {
    const char *       name;
    ssmt_mamba3_config cfg;
    int                has_dfinal;
    int                only_some; /* request dv, ddt, dq_bias and dangles only */
    int                saved;     /* also with the CUDA forward's chunk_states and pregate_y given */
} bwd_case;

static ssmt_host out_like(const ssm_tensor * like, int strided) {
    ssmt_host h = strided ? ssmt_alloc_layout(SSM_DTYPE_F32, like->ndim, like->shape, NULL, 3)
                          : ssmt_alloc(SSM_DTYPE_F32, like->ndim, like->shape);
    if (h.t.data) ssmt_poison(&h.t);
    return h;
}

/* The host buffers the args' views may point into. */
enum { MAX_HOSTS = 64 };
typedef struct host_set {
    ssmt_host * h[MAX_HOSTS];
    ssmt_dev    dev[MAX_HOSTS];
    int         n;
} host_set;

static void add_host(host_set * s, ssmt_host * h) {
    if (h->t.data != NULL && s->n < MAX_HOSTS) s->h[s->n++] = h;
}

/* Every view of an args struct (of size bytes; it holds only ssm_tensor fields) re-pointed into
 * the device copy of the host buffer it lies in; buffers are uploaded once. */
static void to_device(host_set * s, void * a, size_t size) {
    ssm_tensor * f = (ssm_tensor *)a;
    const int    nf = (int)(size / sizeof(ssm_tensor));
    for (int i = 0; i < nf; ++i) {
        if (f[i].data == NULL) continue;
        int found = -1;
        for (int j = 0; j < s->n && found < 0; ++j) {
            const char * b = (const char *)s->h[j]->buf;
            if ((const char *)f[i].data >= b && (const char *)f[i].data <= b + s->h[j]->bytes) found = j;
        }
        TEST_CHECK(found >= 0, "tensor field %d lies in no known host buffer", i);
        if (found < 0) continue;
        if (s->dev[found].mem == NULL) s->dev[found] = ssmt_to_device(s->h[found]);
        f[i].data = (char *)s->dev[found].mem + ((const char *)f[i].data - (const char *)s->h[found]->buf);
        f[i].device = s->dev[found].view.device;
    }
}

/* The selection table's tensor-core entry (16-bit q, k, v where its shared memory fits: the
 * default there); the other entry, chunked, applies to every problem. */
static const char kPlanes[] = "chunked_planes";
static int        g_planes_runs; /* 16-bit cases the plane kernels ran */
/* The state chain entries: chunked_planes' gradient kernel after one kernel for the chunk sums
 * and both state walks, in blocks of 32 K columns (K % 32 == 0) or 64 (K % 64 == 0). */
static const char kChain[] = "chained_planes", kChain32[] = "chained_planes32";
static int        g_chain_runs[2]; /* 16-bit cases the state chain ran: [0] 64 columns, [1] 32 */
static int        g_saved_runs;    /* 16-bit cases the state chain ran given chunk_states */

/* What the device runs of one case compare: the case, its parameters, the device args (outputs
 * in the host buffers hs->h[first_out..] and their device copies), the reference and CPU results. */
typedef struct dev_target {
    const bwd_case *                 bc;
    const ssm_mamba3_params *        p;
    ssm_mamba3_siso_bwd_args *       da;
    ssm_mamba3_siso_bwd_args *       ref;
    host_set *                       hs;
    int                              first_out;
    ssmt_host *                      got; /* [SSMT_SISO_NGRADS], views of hs's output buffers */
    ssmt_host *                      cpu; /* [SSMT_SISO_NGRADS] */
    ssm_dtype                        cd;
    const char *                     suffix; /* of the tags: "" or ", saved" */
} dev_target;

/* Two device runs on NaN-poisoned outputs: the entry `variant` forced, or the default (variant
 * NULL; it must be `expect`). refuse 0: both must run, within the bar against the reference and
 * the CPU, with equal bytes; 1: the forced entry may answer UNSUPPORTED; 2: it must. A refusal
 * must leave every output unwritten. Returns 1 when the runs ran. */
static int device_runs(const dev_target * tg, const char * variant, const char * expect, int refuse) {
    const bwd_case * bc = tg->bc;
    host_set *       hs = tg->hs;
    const ssmt_bar   bar = ssmt_bar_for(tg->cd);
    const char *     label = variant != NULL ? variant : expect;
    char             tag[160], cpu_tag[180];
    snprintf(tag, sizeof tag, "cuda[%s%s%s]", label, variant != NULL ? ", forced" : "", tg->suffix);
    snprintf(cpu_tag, sizeof cpu_tag, "%s-vs-cpu", tag);
    void * first[SSMT_SISO_NGRADS];
    memset(first, 0, sizeof first);
    int ran = 1;
    for (int pass = 0; pass < 2 && ran; ++pass) {
        void * poison[SSMT_SISO_NGRADS];
        memset(poison, 0, sizeof poison);
        for (int j = tg->first_out; j < hs->n; ++j) {
            ssmt_poison(&hs->h[j]->t);
            if (hs->dev[j].mem)
                TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, hs->dev[j].mem, hs->h[j]->buf, hs->h[j]->bytes), SSM_STATUS_OK);
        }
        for (int g = 0; g < SSMT_SISO_NGRADS; ++g)
            if (tg->got[g].t.data != NULL) poison[g] = ssmt_snapshot(&tg->got[g]);
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba3_siso_bwd", variant), SSM_STATUS_OK);
        const ssm_status st = ssm_mamba3_siso_bwd(ctx_cuda, tg->p, tg->da);
        const char *     last = ssm_context_last_variant(ctx_cuda);
        const int        refused = st == SSM_STATUS_UNSUPPORTED && refuse > 0 && pass == 0;
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba3_siso_bwd", NULL), SSM_STATUS_OK);
        for (int j = tg->first_out; j < hs->n; ++j) ssmt_to_host(hs->h[j], &hs->dev[j]);
        if (refuse == 2 && !refused)
            TEST_CHECK(0, "%s: %s: expected UNSUPPORTED, got %s", bc->name, tag, ssm_status_string(st));
        if (refused || refuse == 2) {
            for (int g = 0; g < SSMT_SISO_NGRADS; ++g)
                if (poison[g] != NULL)
                    TEST_CHECK(ssmt_unchanged(&tg->got[g], poison[g]), "%s: %s refused but wrote %s", bc->name, tag,
                               ssmt_siso_grad_names[g]);
            ran = 0;
        } else {
            TEST_CHECK(st == SSM_STATUS_OK, "%s: %s%s: %s (%s)", bc->name, tag, pass ? " (second run)" : "",
                       ssm_status_string(st), ssm_context_last_error(ctx_cuda));
            /* the default may be a state chain where chunked_planes is expected: their rules count SMs */
            const int same = last != NULL && (strcmp(last, label) == 0 ||
                                              (variant == NULL && strcmp(label, kPlanes) == 0 &&
                                               (strcmp(last, kChain) == 0 || strcmp(last, kChain32) == 0)));
            TEST_CHECK(st != SSM_STATUS_OK || same, "%s: %s ran variant '%s'", bc->name, tag,
                       last != NULL ? last : "(none)");
            for (int g = 0; g < SSMT_SISO_NGRADS && st == SSM_STATUS_OK; ++g) {
                if (tg->got[g].t.data == NULL) continue;
                if (pass == 0) {
                    const double rr = ssmt_check_variant(bc->name, ssmt_siso_grad_names[g], tag, &tg->got[g].t,
                                                         ssmt_siso_grad_slot(tg->ref, g), bar);
                    double *     w = &worst[dtype_slot(tg->cd)][g];
                    if (rr > *w || rr != rr) *w = rr;
                    /* against the CPU backend (an fp32 result within the same bar) */
                    ssmt_check_variant(bc->name, ssmt_siso_grad_names[g], cpu_tag, &tg->got[g].t, &tg->cpu[g].t, bar);
                    first[g] = ssmt_snapshot(&tg->got[g]);
                    char hl[300]; /* SSMOPS_TEST_HASH_LOG: the bytes of every entry's gradients, per case */
                    snprintf(hl, sizeof hl, "%s/%s/%s/dtype%d", bc->name, ssmt_siso_grad_names[g], tag,
                             dtype_slot(tg->cd));
                    ssmt_hash_log(hl, &tg->got[g].t);
                } else {
                    TEST_CHECK(ssmt_unchanged(&tg->got[g], first[g]), "%s/%s: %s: the second run's bytes differ",
                               bc->name, ssmt_siso_grad_names[g], tag);
                }
            }
            if (st != SSM_STATUS_OK) ran = 0;
        }
        for (int g = 0; g < SSMT_SISO_NGRADS; ++g) free(poison[g]);
    }
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g) free(first[g]);
    return ran;
}

/* After chunked_planes ran given the saved results (tg->da; it reads pregate_y, not chunk_states):
 * every gradient but dz is the bytes of its run without them (noy: snapshots of tg->got then, NULL
 * where absent); dz is formed from y, not recomputed: with pregate_y doubled on the device, a
 * dz-only run gives twice the run's dz (the host copy in tg->got) to the bit. pregate_y is
 * restored afterwards for the runs that follow. */
static void y_read_check(const dev_target * tg, ssmt_host * y, void * const * noy) {
    const int gz = 10; /* dz in ssmt_siso_grad_names */
    TEST_CHECK(strcmp(ssmt_siso_grad_names[gz], "dz") == 0, "grad %d is %s, not dz", gz, ssmt_siso_grad_names[gz]);
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g)
        if (g != gz && noy[g] != NULL)
            TEST_CHECK(ssmt_unchanged(&tg->got[g], noy[g]), "%s/%s: %s given the saved results: the bytes differ "
                       "from the run without them", tg->bc->name, ssmt_siso_grad_names[g], kPlanes);
    int j = -1;
    for (int i = 0; i < tg->hs->n; ++i)
        if (tg->hs->h[i] == y) j = i;
    if (j < 0 || tg->got[gz].t.data == NULL) return;
    ssmt_dev * yd = &tg->hs->dev[j];
    ssmt_to_host(y, yd);
    void * saved = ssmt_snapshot(y);
    for (int64_t i = 0, n = ssmt_numel(&y->t); i < n; ++i) ssmt_set(&y->t, i, 2.0 * ssmt_get(&y->t, i));
    TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, yd->mem, y->buf, y->bytes), SSM_STATUS_OK);
    ssmt_host                dz2 = out_like(&tg->got[gz].t, 0);
    ssmt_dev                 dd = ssmt_to_device(&dz2);
    ssm_mamba3_siso_bwd_args a = *tg->da;
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g) *ssmt_siso_grad_slot(&a, g) = (ssm_tensor){0};
    a.dz = dd.view;
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba3_siso_bwd", kPlanes), SSM_STATUS_OK);
    TEST_CHECK_STATUS(ssm_mamba3_siso_bwd(ctx_cuda, tg->p, &a), SSM_STATUS_OK);
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba3_siso_bwd", NULL), SSM_STATUS_OK);
    ssmt_to_host(&dz2, &dd);
    int64_t bad = 0;
    for (int64_t i = 0, n = ssmt_numel(&dz2.t); i < n; ++i)
        bad += ssmt_get(&dz2.t, i) != 2.0 * ssmt_get(&tg->got[gz].t, i);
    TEST_CHECK(bad == 0, "%s: %lld dz elements are not twice the run's with pregate_y doubled", tg->bc->name,
               (long long)bad);
    memcpy(y->buf, saved, y->bytes);
    TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, yd->mem, y->buf, y->bytes), SSM_STATUS_OK);
    free(saved);
    ssmt_dev_free(&dd);
    ssmt_free(&dz2);
}

/* After the chain entry `chain` ran given chunk_states (tg->da, the device copy cs of the host
 * buffer in tg->hs): with chunk_states doubled on the device its gradients change (it reads them, not a
 * recompute) where any state is nonzero (where all are, a single chunk without initial states,
 * none may change). chunk_states is restored afterwards for the runs that follow. */
static void doubled_states_check(const dev_target * tg, ssmt_host * cs, const char * chain) {
    int j = -1;
    for (int i = 0; i < tg->hs->n; ++i)
        if (tg->hs->h[i] == cs) j = i;
    if (j < 0) return;
    void * run[SSMT_SISO_NGRADS];
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g) run[g] = tg->got[g].t.data ? ssmt_snapshot(&tg->got[g]) : NULL;
    ssmt_dev * cd = &tg->hs->dev[j];
    ssmt_to_host(cs, cd);
    void *  saved = ssmt_snapshot(cs);
    int64_t nonzero = 0;
    for (int64_t i = 0, n = ssmt_numel(&cs->t); i < n; ++i) {
        nonzero += ssmt_get(&cs->t, i) != 0.0;
        ssmt_set(&cs->t, i, 2.0 * ssmt_get(&cs->t, i));
    }
    TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, cd->mem, cs->buf, cs->bytes), SSM_STATUS_OK);
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba3_siso_bwd", chain), SSM_STATUS_OK);
    TEST_CHECK_STATUS(ssm_mamba3_siso_bwd(ctx_cuda, tg->p, tg->da), SSM_STATUS_OK);
    TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba3_siso_bwd", NULL), SSM_STATUS_OK);
    int changed = 0;
    for (int k = tg->first_out; k < tg->hs->n; ++k) ssmt_to_host(tg->hs->h[k], &tg->hs->dev[k]);
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g)
        if (run[g] != NULL) changed += !ssmt_unchanged(&tg->got[g], run[g]);
    if (nonzero > 0)
        TEST_CHECK(changed > 0, "%s: %s: no gradient changed with chunk_states doubled (not read)", tg->bc->name, chain);
    else
        TEST_CHECK(changed == 0, "%s: %s: chunk_states all zero, yet doubling them changed %d gradients", tg->bc->name,
                   chain, changed);
    memcpy(cs->buf, saved, cs->bytes);
    TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, cd->mem, cs->buf, cs->bytes), SSM_STATUS_OK);
    free(saved);
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g) free(run[g]);
}

/* Both chain entries forced: chained_planes (K % 64 == 0; else it must refuse), then
 * chained_planes32 (refuse as device_runs), whose gradients must be chained_planes' bytes where
 * both ran (the walks' width changes which block computes a state element, not its arithmetic).
 * Returns kChain32 when it ran (its gradients in tg->got), else NULL. */
static const char * chain_runs(const dev_target * tg, int k, int refuse) {
    const int ran64 = device_runs(tg, kChain, NULL, refuse == 1 && k % 64 == 0 ? 1 : 2);
    void *    wide[SSMT_SISO_NGRADS];
    memset(wide, 0, sizeof wide);
    for (int g = 0; g < SSMT_SISO_NGRADS && ran64; ++g)
        if (tg->got[g].t.data != NULL) wide[g] = ssmt_snapshot(&tg->got[g]);
    const int ran32 = device_runs(tg, kChain32, NULL, refuse);
    for (int g = 0; g < SSMT_SISO_NGRADS && ran32 && ran64; ++g)
        if (wide[g] != NULL)
            TEST_CHECK(ssmt_unchanged(&tg->got[g], wide[g]), "%s/%s: %s%s: the bytes differ from %s's", tg->bc->name,
                       ssmt_siso_grad_names[g], kChain32, tg->suffix, kChain);
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g) free(wide[g]);
    g_chain_runs[0] += ran64, g_chain_runs[1] += ran32;
    return ran32 ? kChain32 : NULL;
}

static void run_case(ssmt_rng * rng, const bwd_case * bc) {
    ssmt_mamba3_config cfg = bc->cfg;
    const ssm_dtype    cd = cfg.dtype;
    cfg.out_dtype = SSM_DTYPE_F64;
    ssmt_mamba3_problem      prob;
    ssmt_mamba3_bwd_problem  bwd;
    ssm_mamba3_params        p;
    ssm_mamba3_siso_bwd_args args;
    if (ssmt_siso_bwd_reference(rng, ctx_ref, bc->name, &cfg, bc->has_dfinal, bc->only_some, &prob, &bwd, &p, &args))
        return;

    /* the CPU backend, F32 outputs (the reference's are F64) */
    ssmt_host                cpu[SSMT_SISO_NGRADS], got[SSMT_SISO_NGRADS];
    ssm_mamba3_siso_bwd_args ca = args, da = args;
    memset(cpu, 0, sizeof cpu);
    memset(got, 0, sizeof got);
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g) {
        if (ssmt_siso_grad_slot(&args, g)->data == NULL) continue;
        cpu[g] = out_like(ssmt_siso_grad_slot(&args, g), cfg.strided);
        got[g] = out_like(ssmt_siso_grad_slot(&args, g), cfg.strided);
        *ssmt_siso_grad_slot(&ca, g) = cpu[g].t;
        *ssmt_siso_grad_slot(&da, g) = got[g].t;
    }
    ssm_status st = ssm_mamba3_siso_bwd(ctx_cpu, &p, &ca);
    TEST_CHECK(st == SSM_STATUS_OK, "%s: cpu: %s (%s)", bc->name, ssm_status_string(st),
               ssm_context_last_error(ctx_cpu));

    /* the device copies: the forward inputs, dout, dfinal_*, the poisoned outputs */
    host_set hs;
    memset(&hs, 0, sizeof hs);
    ssmt_host * inputs[] = {&prob.q,          &prob.k,           &prob.v,           &prob.adt,
                            &prob.dt,         &prob.trap,        &prob.q_bias,      &prob.k_bias,
                            &prob.angles,     &prob.d,           &prob.z,           &prob.angle_state,
                            &prob.ssm_state,  &prob.k_state,     &prob.v_state,     &prob.cu_seqlens,
                            &bwd.dout,        &bwd.dfinal_angle_state, &bwd.dfinal_ssm_state,
                            &bwd.dfinal_k_state, &bwd.dfinal_v_state};
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; ++i) add_host(&hs, inputs[i]);
    /* saved: the CUDA forward's out, chunk_states (F32 dense, or F64 padded where the case is
     * strided) and pregate_y (F32, with z), inputs of the backward runs below (so not poisoned by
     * them) */
    ssmt_host yo, y, cs;
    memset(&yo, 0, sizeof yo), memset(&y, 0, sizeof y), memset(&cs, 0, sizeof cs);
    if (bc->saved) {
        yo = ssmt_alloc(prob.args.out.dtype, 4, prob.args.v.shape);
        cs = ssmt_mamba3_chunk_states(&cfg, cfg.chunk, cfg.strided ? SSM_DTYPE_F64 : SSM_DTYPE_F32, cfg.strided);
        if (cfg.has_z) {
            y = cfg.strided ? ssmt_alloc_layout(SSM_DTYPE_F32, 4, prob.args.v.shape, NULL, 3)
                            : ssmt_alloc(SSM_DTYPE_F32, 4, prob.args.v.shape);
            if (y.t.data) ssmt_poison(&y.t);
        }
        TEST_CHECK(yo.t.data && cs.t.data && (y.t.data || !cfg.has_z), "%s: no memory for the saved results",
                   bc->name);
        add_host(&hs, &yo), add_host(&hs, &y), add_host(&hs, &cs);
    }
    const int first_out = hs.n;
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g) add_host(&hs, &got[g]);
    to_device(&hs, &da, sizeof da);

    /* 16-bit q, k, v: each entry forced (chunked_planes may refuse where its shared memory does
     * not fit), then the default (chunked_planes where it ran); fp32: the default is chunked and
     * chunked_planes forced refuses without writing anything */
    const int   x16 = cd == SSM_DTYPE_F16 || cd == SSM_DTYPE_BF16;
    dev_target  tg = {bc, &p, &da, &args, &hs, first_out, got, cpu, cd, ""};
    int         planes = 0;
    void * noy[SSMT_SISO_NGRADS]; /* chunked_planes' gradients without pregate_y */
    memset(noy, 0, sizeof noy);
    if (x16) {
        planes = device_runs(&tg, kPlanes, NULL, 1);
        g_planes_runs += planes;
        for (int g = 0; g < SSMT_SISO_NGRADS && planes && bc->saved; ++g)
            if (got[g].t.data != NULL) noy[g] = ssmt_snapshot(&got[g]);
        /* their rules add 16-byte rows, 64-token chunks and K <= 128 to chunked_planes' and K % 32 == 0 */
        chain_runs(&tg, (int)cfg.dk, planes && cfg.dk % 32 == 0 && cfg.dk <= 128 ? 1 : 2);
        device_runs(&tg, "chunked", NULL, 0);
        device_runs(&tg, NULL, planes ? kPlanes : "chunked", 0);
    } else {
        device_runs(&tg, NULL, "chunked", 0);
        device_runs(&tg, kPlanes, NULL, 2);
        device_runs(&tg, kChain, NULL, 2);
        device_runs(&tg, kChain32, NULL, 2);
    }
    if (bc->saved && yo.t.data && cs.t.data) {
        /* the CUDA forward on the case's inputs writes the saved results; the backward given them
         * within the same bars */
        ssm_mamba3_siso_args fa = prob.args;
        fa.out = yo.t, fa.pregate_y = y.t, fa.chunk_states = cs.t;
        fa.final_angle_state = fa.final_ssm_state = fa.final_k_state = fa.final_v_state = (ssm_tensor){0};
        to_device(&hs, &fa, sizeof fa);
        const ssm_status fs = ssm_mamba3_siso(ctx_cuda, &p, &fa);
        TEST_CHECK(fs == SSM_STATUS_OK, "%s: the CUDA forward for the saved results: %s (%s)", bc->name,
                   ssm_status_string(fs), ssm_context_last_error(ctx_cuda));
        ssm_mamba3_siso_bwd_args dy = da;
        dy.pregate_y = fa.pregate_y, dy.chunk_states = fa.chunk_states;
        dev_target ty = tg;
        ty.da = &dy, ty.suffix = ", saved";
        if (fs == SSM_STATUS_OK && x16) {
            if (device_runs(&ty, kPlanes, NULL, 1)) y_read_check(&ty, &y, noy);
            const char * ran = chain_runs(&ty, (int)cfg.dk, planes && cfg.dk % 32 == 0 && cfg.dk <= 128 ? 1 : 2);
            g_saved_runs += ran != NULL;
            if (ran) doubled_states_check(&ty, &cs, ran);
            device_runs(&ty, NULL, planes ? kPlanes : "chunked", 0);
        } else if (fs == SSM_STATUS_OK) {
            device_runs(&ty, NULL, "chunked", 0);
        }
    }
    ssmt_free(&yo), ssmt_free(&y), ssmt_free(&cs);
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g) free(noy[g]);
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g) {
        ssmt_free(&cpu[g]);
        ssmt_free(&got[g]);
    }
    for (int j = 0; j < hs.n; ++j) ssmt_dev_free(&hs.dev[j]);
    ssmt_mamba3_bwd_free(&bwd);
    ssmt_mamba3_problem_free(&prob);
}

static ssmt_mamba3_config base_config(int64_t B, int64_t S, int64_t H, int64_t Hq, int64_t K, int64_t V, int64_t A,
                                      ssm_dtype dt) {
    ssmt_mamba3_config c;
    ssmt_mamba3_config_init(&c);
    c.batch = B, c.seqlen = S, c.nheads = H, c.nheads_qk = Hq, c.dk = K, c.dv = V, c.nangles = A;
    c.chunk = 64;
    c.dtype = dt;
    c.param_dtype = SSM_DTYPE_F32;
    return c;
}

int main(void) {
    if (!ssmt_cuda_present("test_cuda_mamba3_siso_bwd")) return 77;
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261206ull);
    ctx_ref = ssmt_make_ctx(SSM_BACKEND_REF, 1, SSM_ISA_AUTO);
    ctx_cpu = ssmt_make_ctx(SSM_BACKEND_CPU, 2, SSM_ISA_AUTO);
    ctx_cuda = ssmt_make_ctx(SSM_BACKEND_CUDA, 0, SSM_ISA_AUTO);
    TEST_CHECK(ctx_ref && ctx_cpu && ctx_cuda, "context creation failed");
    if (ssmt_failures) TEST_EXIT();

    static const int64_t lens_a[4] = {37, 0, 70, 1};
    static const int64_t lens_b[3] = {0, 65, 9};
    static const int64_t lens_c[5] = {64, 0, 129, 63, 0};
    static const int64_t lens_d[6] = {0, 130, 64, 0, 17, 1};
    const ssm_dtype      dtypes[3] = {SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16};
    for (int di = 0; di < 3; ++di) {
        const ssm_dtype dt = dtypes[di];
        bwd_case        cases[20];
        int             n = 0;
        cases[n] = (bwd_case){"s1_states", base_config(2, 1, 4, 2, 32, 32, 16, dt), 1, 0, 0};
        cases[n].cfg.has_states = 1;
        ++n;
        cases[n++] = (bwd_case){"s50_hq1", base_config(1, 50, 4, 1, 64, 64, 32, dt), 0, 0, 0};
        cases[n] = (bwd_case){"s64_hqh", base_config(1, 64, 3, 3, 96, 96, 20, dt), 0, 0, 0};
        cases[n].cfg.has_d = 0, cases[n].cfg.has_states = 1;
        ++n;
        cases[n] = (bwd_case){"s131_v7", base_config(2, 131, 6, 2, 32, 7, 5, dt), 1, 0, 0};
        cases[n].cfg.has_z = 0, cases[n].cfg.has_states = 1, cases[n].cfg.trap_randn = 1;
        ++n;
        cases[n] = (bwd_case){"s200_plain", base_config(1, 200, 2, 1, 64, 32, 1, dt), 1, 0, 0};
        cases[n].cfg.has_d = 0, cases[n].cfg.has_z = 0;
        ++n;
        cases[n] = (bwd_case){"varlen_states", base_config(1, 0, 4, 1, 64, 32, 16, dt), 1, 0, 0};
        cases[n].cfg.nseq = 4, cases[n].cfg.seqlens = lens_a, cases[n].cfg.has_states = 1;
        ++n;
        cases[n] = (bwd_case){"varlen_nostates", base_config(1, 0, 4, 2, 32, 64, 8, dt), 0, 0, 0};
        cases[n].cfg.nseq = 3, cases[n].cfg.seqlens = lens_b, cases[n].cfg.index_i64 = 1;
        ++n;
        cases[n] = (bwd_case){"strided_bcast", base_config(2, 70, 4, 2, 32, 32, 8, dt), 1, 0, 0};
        cases[n].cfg.strided = 1, cases[n].cfg.angles_broadcast = 1, cases[n].cfg.has_states = 1;
        ++n;
        cases[n] = (bwd_case){"seed_regime", base_config(1, 100, 4, 2, 64, 96, 16, dt), 1, 0, 0};
        cases[n].cfg.seed_regime = 1, cases[n].cfg.has_states = 1;
        ++n;
        cases[n] = (bwd_case){"varlen_nodfinal", base_config(1, 0, 2, 1, 32, 32, 16, dt), 0, 0, 0};
        cases[n].cfg.nseq = 3, cases[n].cfg.seqlens = lens_b, cases[n].cfg.has_states = 1;
        ++n;
        cases[n] = (bwd_case){"batch8", base_config(8, 20, 4, 2, 32, 16, 4, dt), 1, 0, 0};
        cases[n].cfg.has_states = 1;
        ++n;
        cases[n] = (bwd_case){"some_outputs", base_config(1, 90, 4, 2, 32, 32, 8, dt), 1, 1, 0};
        cases[n].cfg.has_states = 1;
        ++n;
        /* K = 128, V = 64 (the layer's shape), several chunks, GQA */
        cases[n] = (bwd_case){"k128_v64", base_config(1, 150, 4, 1, 128, 64, 32, dt), 1, 0, 0};
        cases[n].cfg.has_states = 1;
        ++n;
        /* the layer's K, V (the gradient kernel's compile-time instance) through strided views: the
         * loaders' element paths; no d, no z, a tail chunk */
        cases[n] = (bwd_case){"k128_v64_strided", base_config(1, 77, 2, 2, 128, 64, 32, dt), 1, 0, 0};
        cases[n].cfg.strided = 1, cases[n].cfg.has_d = 0, cases[n].cfg.has_z = 0;
        ++n;
        /* K = 256, V = 200: the state is too large for the gradient kernel's shared memory (it reads
         * S_c and dS from global memory); a chunk tail */
        cases[n] = (bwd_case){"k256_v200", base_config(1, 45, 2, 1, 256, 200, 64, dt), 1, 0, 0};
        cases[n].cfg.has_states = 1;
        ++n;
        /* one token short of two 64-token chunks: the last chunk's length is odd (63) */
        cases[n] = (bwd_case){"s127_odd", base_config(1, 127, 2, 1, 64, 32, 16, dt), 1, 0, 0};
        cases[n].cfg.has_states = 1;
        ++n;
        /* the layer's K, V over varlen sequences: a whole chunk, empty ones (also last), a 1-token tail */
        cases[n] = (bwd_case){"varlen_k128", base_config(1, 0, 4, 2, 128, 64, 32, dt), 1, 0, 0};
        cases[n].cfg.nseq = 5, cases[n].cfg.seqlens = lens_c, cases[n].cfg.has_states = 1;
        ++n;
        /* the state chain's walk cases: empty sequences (first, middle), tails of 2 and 17 tokens, a
         * whole chunk, one token; initial states and every dfinal_* */
        cases[n] = (bwd_case){"varlen_chain", base_config(1, 0, 4, 1, 64, 64, 16, dt), 1, 0, 0};
        cases[n].cfg.nseq = 6, cases[n].cfg.seqlens = lens_d, cases[n].cfg.has_states = 1;
        ++n;
        /* enough chunks (20, a tail) and GQA groups (Hq = 2 of 6 heads each) that the plane gradient
         * kernel's blocks take slices of 2 heads, 3 parts per group (its rule in mamba3_siso/bwd.cu) */
        cases[n] = (bwd_case){"gqa_slices", base_config(1, 1275, 12, 2, 128, 64, 32, dt), 1, 0, 0};
        cases[n].cfg.has_states = 1;
        ++n;
        /* these also run given the CUDA forward's saved results */
        static const char * const with_saved[] = {"s50_hq1",  "strided_bcast", "seed_regime",
                                                  "k128_v64", "varlen_k128",   "gqa_slices"};
        for (int c = 0; c < n; ++c)
            for (size_t j = 0; j < sizeof with_saved / sizeof with_saved[0]; ++j)
                if (strcmp(cases[c].name, with_saved[j]) == 0) cases[c].saved = 1;
        for (int c = 0; c < n; ++c) run_case(&rng, &cases[c]);
    }

    printf("worst rel_rms per gradient (CUDA vs reference):\n%-14s %10s %10s %10s\n", "gradient", "f32", "f16",
           "bf16");
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g)
        printf("%-14s %10.3g %10.3g %10.3g\n", ssmt_siso_grad_names[g], worst[0][g], worst[1][g], worst[2][g]);
    TEST_CHECK(g_planes_runs > 0, "%s ran on none of the 16-bit cases", kPlanes);
    TEST_CHECK(g_chain_runs[0] > 0, "%s ran on none of the 16-bit cases", kChain);
    TEST_CHECK(g_chain_runs[1] > 0, "%s ran on none of the 16-bit cases", kChain32);
    TEST_CHECK(g_saved_runs > 0, "%s ran on none of the 16-bit cases given chunk_states", kChain);
    ssm_context_free(ctx_ref);
    ssm_context_free(ctx_cpu);
    ssm_context_free(ctx_cuda);
    TEST_EXIT();
}
