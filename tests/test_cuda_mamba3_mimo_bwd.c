/*
 * test_cuda_mamba3_mimo_bwd.c — the CUDA backend of ssm_mamba3_mimo_bwd (every gradient of the
 * MIMO forward, spec §4) against the float64 reference (REF backend on the host copies, F64
 * outputs) within the DESIGN §5 bars of the compute dtype (v's dtype; the parameter-gradient
 * reductions as whole vectors), and against the CPU backend within the same bars, over the
 * shape matrix of test_mamba3_mimo_bwd.c (the seed's (N, P, R, C) list, tails S = 13/20/35,
 * GQA, B = 2, several chunks, non-reduced dout with and without z / d, fused norm with and
 * without its weight, initial states with dfinal_*, varlen with empty sequences and i64
 * indices, strided views, only some outputs) for f32 / f16 / bf16, plus ranks R = 1, 2, 4, 8
 * at one shape, stride-0 (broadcast) inputs, gradients stored in the compute dtype, and a
 * GQA case with H/G = 4 and a C·R = 128, N = 128, P = 72 case (2×2 output tiles of the chunk
 * products, a partial inner slice, a tail chunk). Outputs are NaN-poisoned first; a second run
 * on re-poisoned outputs must give identical bytes. The selection table: with 16-bit q, k, v
 * every case runs chunk_parallel_planes (tensor-core chunk products) forced, chunk_parallel
 * (fp32) forced and the default, which must be chunk_parallel_planes; with fp32 the default is
 * chunk_parallel and chunk_parallel_planes forced must answer UNSUPPORTED without writing an
 * output. The worst errors are printed per entry. Every case also hands the CUDA forward's
 * pregate_y and chunk_states to the backward (in place and strided, each alone and both): the
 * same gradient bytes as without them, and a wrong shape or dtype refused with nothing written.
 * Label cuda; exits 77 ("no CUDA device: skipped", a CTest skip) without a GPU.
 * Seed: SSMOPS_TEST_SEED (default 20261208).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cudautil.h"
#include "grads.h"

/* The input tensors of the backward that travel to the device (cu_seqlens stays on the host). */
#define NIN 24
static ssmt_host * input_host(ssmt_mimo_problem * p, ssmt_mimo_bwd_problem * w, int i) {
    ssmt_host * s[NIN] = {&p->q,           &p->k,           &p->v,        &p->adt,     &p->dt,
                          &p->trap,        &p->q_bias,      &p->k_bias,   &p->mimo_v,  &p->mimo_z,
                          &p->mimo_o,      &p->angles,      &p->d,        &p->z,       &p->norm_weight,
                          &p->angle_state, &p->ssm_state,   &p->k_state,  &p->v_state, &w->dout,
                          &w->dfinal_angle_state, &w->dfinal_ssm_state, &w->dfinal_k_state, &w->dfinal_v_state};
    return s[i];
}

static ssm_tensor * input_slot(ssm_mamba3_mimo_bwd_args * a, int i) {
    ssm_tensor * s[NIN] = {&a->q,           &a->k,         &a->v,       &a->adt,     &a->dt,
                           &a->trap,        &a->q_bias,    &a->k_bias,  &a->mimo_v,  &a->mimo_z,
                           &a->mimo_o,      &a->angles,    &a->d,       &a->z,       &a->outproj_norm_weight,
                           &a->angle_state, &a->ssm_state, &a->k_state, &a->v_state, &a->dout,
                           &a->dfinal_angle_state, &a->dfinal_ssm_state, &a->dfinal_k_state, &a->dfinal_v_state};
    return s[i];
}

static ssm_context *ctx_ref, *ctx_cpu, *ctx_cuda;
static double       worst[2][3][SSMT_MIMO_NGRADS]; /* [fp32 entry, tensor-core entry][f32, f16, bf16]: vs reference */
static int          dtype_slot(ssm_dtype t) { return t == SSM_DTYPE_F16 ? 1 : t == SSM_DTYPE_BF16 ? 2 : 0; }

typedef struct bwd_case {
    const char *     name;
    ssmt_mimo_config cfg;
    int              has_dfinal;
    int              only_some;    /* dv, ddt, dq_bias, dangles only                         */
    int              grad_compute; /* gradients stored in the compute dtype (else F32)      */
    int              broadcast;    /* mimo_v and the initial angle state with stride-0 dims */
} bwd_case;

static ssmt_mimo_config config(int64_t B, int64_t S, int64_t H, int64_t G, int64_t R, int64_t N, int64_t P, int64_t C,
                               ssm_dtype dt) {
    ssmt_mimo_config c;
    ssmt_mimo_config_init(&c);
    c.batch = B, c.seqlen = S, c.nheads = H, c.ngroups = G, c.rank = R, c.dstate = N, c.headdim = P, c.chunk = C;
    c.dtype = dt;
    c.param_dtype = SSM_DTYPE_F32;
    c.out_dtype = SSM_DTYPE_F64;
    return c;
}

/* A stride-0 view over dim `dim` of t (its first slice repeated): the host tensor's values along
 * that dim are made equal so that the view and the buffer say the same thing. */
static void broadcast_dim(ssm_tensor * t, int dim) {
    if (t->data == NULL || t->shape[dim] < 2) return;
    ssm_tensor first = ssmt_pick(t, dim, 0);
    for (int64_t j = 1; j < t->shape[dim]; ++j) {
        ssm_tensor other = ssmt_pick(t, dim, j);
        ssmt_copy(&other, &first);
    }
    t->strides[dim] = 0;
}

/* The selection table's entries: the tensor-core one (q, k, v in fp16 or bf16: the default there)
 * and the fp32 one (every problem). */
static const char kPlanes[] = "chunk_parallel_planes";
static const char kFp32[] = "chunk_parallel";

/* What the device runs of one case compare: the case, its parameters and device args (outputs
 * in the host buffers got[] and their device copies dev[]), the reference and CPU results. */
typedef struct dev_target {
    const bwd_case *                 bc;
    const char *                     tag;
    const ssm_mamba3_mimo_params *   p;
    const ssm_mamba3_mimo_bwd_args * da;
    ssm_mamba3_mimo_bwd_args *       ref;
    ssmt_host *                      got; /* [SSMT_MIMO_NGRADS] */
    ssmt_host *                      cpu; /* [SSMT_MIMO_NGRADS] */
    ssmt_dev *                       dev; /* [SSMT_MIMO_NGRADS] */
    ssm_dtype                        cd;
} dev_target;

/* Two device runs on NaN-poisoned outputs: the entry `variant` forced, or the default (variant
 * NULL; it must be `expect`). The entry runs where it applies (the tensor-core one on 16-bit
 * q, k, v), within the bar against the reference and twice the bar against the CPU, with equal
 * bytes both runs; elsewhere it must answer UNSUPPORTED and write no output. */
static void device_runs(const dev_target * tg, const char * variant, const char * expect) {
    const bwd_case * bc = tg->bc;
    const ssm_dtype  cd = tg->cd;
    const int        x16 = cd == SSM_DTYPE_F16 || cd == SSM_DTYPE_BF16;
    const int        refuse = variant != NULL && strcmp(variant, kPlanes) == 0 && !x16;
    const char *     label = variant != NULL ? variant : expect;
    const ssmt_bar   bar = ssmt_bar_for(cd);
    const ssmt_bar   two = {2.0 * bar.rel_rms, 2.0 * bar.max_rel};
    char             tag[500], cpu_tag[520];
    snprintf(tag, sizeof tag, "cuda[%s%s]", label, variant != NULL ? ", forced" : "");
    snprintf(cpu_tag, sizeof cpu_tag, "%s vs cpu", tag);
    void * first[SSMT_MIMO_NGRADS];
    memset(first, 0, sizeof first);
    for (int pass = 0; pass < 2; ++pass) {
        void * poison[SSMT_MIMO_NGRADS];
        memset(poison, 0, sizeof poison);
        for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) {
            if (tg->got[g].t.data == NULL) continue;
            ssmt_poison(&tg->got[g].t);
            poison[g] = ssmt_snapshot(&tg->got[g]);
            TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, tg->dev[g].mem, tg->got[g].buf, tg->got[g].bytes), SSM_STATUS_OK);
        }
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba3_mimo_bwd", variant), SSM_STATUS_OK);
        const ssm_status st = ssm_mamba3_mimo_bwd(ctx_cuda, tg->p, tg->da);
        const char *     last = ssm_context_last_variant(ctx_cuda);
        TEST_CHECK(st != SSM_STATUS_OK || (last != NULL && strcmp(last, label) == 0), "%s: %s ran entry '%s'",
                   tg->tag, tag, last != NULL ? last : "(none)");
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx_cuda, "mamba3_mimo_bwd", NULL), SSM_STATUS_OK);
        for (int g = 0; g < SSMT_MIMO_NGRADS; ++g)
            if (tg->got[g].t.data != NULL) ssmt_to_host(&tg->got[g], &tg->dev[g]);
        if (refuse) {
            TEST_CHECK(st == SSM_STATUS_UNSUPPORTED, "%s: %s: expected UNSUPPORTED, got %s", tg->tag, tag,
                       ssm_status_string(st));
            for (int g = 0; g < SSMT_MIMO_NGRADS; ++g)
                if (poison[g] != NULL)
                    TEST_CHECK(ssmt_unchanged(&tg->got[g], poison[g]), "%s: %s refused but wrote %s", tg->tag, tag,
                               ssmt_mimo_grad_names[g]);
        } else {
            TEST_CHECK(st == SSM_STATUS_OK, "%s: %s%s: %s (%s)", tg->tag, tag, pass ? " (second run)" : "",
                       ssm_status_string(st), ssm_context_last_error(ctx_cuda));
            for (int g = 0; g < SSMT_MIMO_NGRADS && st == SSM_STATUS_OK; ++g) {
                if (tg->got[g].t.data == NULL) continue;
                if (pass == 1) {
                    TEST_CHECK(ssmt_unchanged(&tg->got[g], first[g]), "%s: %s: %s differs between two runs", tg->tag,
                               tag, ssmt_mimo_grad_names[g]);
                    continue;
                }
                first[g] = ssmt_snapshot(&tg->got[g]);
                char label_g[560];
                snprintf(label_g, sizeof label_g, "%s %s %s", tg->tag, tag, ssmt_mimo_grad_names[g]);
                if (bc->grad_compute && x16) {
                    ssmt_check_bar_rounded(label_g, &tg->got[g].t, ssmt_mimo_grad_slot(tg->ref, g), cd);
                } else {
                    const double rr = ssmt_check_variant(tg->tag, ssmt_mimo_grad_names[g], tag, &tg->got[g].t,
                                                         ssmt_mimo_grad_slot(tg->ref, g), bar);
                    double * w = &worst[strcmp(label, kPlanes) == 0][dtype_slot(cd)][g];
                    if (rr > *w || rr != rr) *w = rr;
                    /* against the CPU: both within the bar of the reference, so within twice it of each other */
                    ssmt_check_variant(tg->tag, ssmt_mimo_grad_names[g], cpu_tag, &tg->got[g].t, &tg->cpu[g].t, two);
                }
            }
        }
        for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) free(poison[g]);
        if (refuse || st != SSM_STATUS_OK) break;
    }
    for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) free(first[g]);
}

static ssm_mamba3_mimo_params g_params; /* the forward's parameters for run_fwd */
static ssm_status              run_fwd(ssm_context * c, void * a) { return ssm_mamba3_mimo(c, &g_params, a); }

/* One default backward run on poisoned gradients given the forward's saved results y and cs
 * (a zeroed view: absent); returns its status, the gradients in tg->got, a snapshot of each
 * poisoned buffer in poison[]. */
static ssm_status bwd_saved(const dev_target * tg, const ssm_tensor * y, const ssm_tensor * cs, void ** poison) {
    for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) {
        poison[g] = NULL;
        if (tg->got[g].t.data == NULL) continue;
        ssmt_poison(&tg->got[g].t);
        poison[g] = ssmt_snapshot(&tg->got[g]);
        TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, tg->dev[g].mem, tg->got[g].buf, tg->got[g].bytes), SSM_STATUS_OK);
    }
    ssm_mamba3_mimo_bwd_args db = *tg->da;
    db.pregate_y = *y, db.chunk_states = *cs;
    const ssm_status st = ssm_mamba3_mimo_bwd(ctx_cuda, tg->p, &db);
    for (int g = 0; g < SSMT_MIMO_NGRADS; ++g)
        if (tg->got[g].t.data != NULL) ssmt_to_host(&tg->got[g], &tg->dev[g]);
    return st;
}

static void free_all(void ** v) {
    for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) free(v[g]), v[g] = NULL;
}

/* A refused saved input: the status, and no gradient written. */
static void refused(const dev_target * tg, const ssm_tensor * y, const ssm_tensor * cs, ssm_status want,
                    const char * what) {
    void *           poison[SSMT_MIMO_NGRADS];
    const ssm_status st = bwd_saved(tg, y, cs, poison);
    TEST_CHECK(st == want, "%s: %s: %s, want %s", tg->tag, what, ssm_status_string(st), ssm_status_string(want));
    for (int g = 0; g < SSMT_MIMO_NGRADS; ++g)
        if (poison[g] != NULL)
            TEST_CHECK(ssmt_unchanged(&tg->got[g], poison[g]), "%s: %s was refused but wrote %s", tg->tag, what,
                       ssmt_mimo_grad_names[g]);
    free_all(poison);
}

/* The forward's saved results handed to the backward (docs/ops/mamba3_mimo.md §5): the CUDA
 * forward writes pregate_y (B, S, H, R, P) and chunk_states (NCS, H, N, P), in their workspaces'
 * own layouts (used in place) and strided (copied out), within the bar of the reference's and
 * with the same out bytes as without them; the backward given either or both (the default
 * entry; the recompute's output tiles, chunk states and state pass skipped, strided ones copied
 * in) gives the same bytes as without them; a wrong shape or dtype is refused with nothing
 * written. fa: the forward's host inputs of the case; ncs: its chunk-state rows. */
static void saved_runs(const dev_target * tg, const ssm_mamba3_mimo_args * fa, const ssmt_mimo_config * cfg,
                       int64_t ncs) {
    const int64_t    ys[5] = {fa->v.shape[0], fa->v.shape[1], fa->v.shape[2], cfg->rank, fa->v.shape[3]};
    const int64_t    css[4] = {ncs, fa->v.shape[2], cfg->dstate, fa->v.shape[3]};
    const ssmt_bar   bar = ssmt_bar_for(tg->cd);
    const ssm_tensor none = {0};
    g_params = *tg->p;
    /* the reference's (F64) */
    ssmt_host            yref = ssmt_alloc(SSM_DTYPE_F64, 5, ys), csref = ssmt_alloc(SSM_DTYPE_F64, 4, css);
    ssmt_host            oref = ssmt_alloc(SSM_DTYPE_F64, fa->out.ndim, fa->out.shape);
    ssm_mamba3_mimo_args fr = *fa;
    fr.out = oref.t, fr.pregate_y = yref.t, fr.chunk_states = csref.t;
    TEST_CHECK_STATUS(ssm_mamba3_mimo(ctx_ref, tg->p, &fr), SSM_STATUS_OK);
    /* out without them, and the default backward without them */
    ssmt_host            out0 = ssmt_alloc(SSM_DTYPE_F32, fa->out.ndim, fa->out.shape);
    ssm_mamba3_mimo_args fc = *fa;
    fc.out = out0.t;
    TEST_CHECK_STATUS(ssmt_run_on_device(ctx_cuda, "mamba3_mimo", &fc, 0, run_fwd), SSM_STATUS_OK);
    void * o0 = ssmt_snapshot(&out0);
    void * base[SSMT_MIMO_NGRADS], *poison[SSMT_MIMO_NGRADS];
    TEST_CHECK_STATUS(bwd_saved(tg, &none, &none, poison), SSM_STATUS_OK);
    free_all(poison);
    for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) base[g] = tg->got[g].t.data != NULL ? ssmt_snapshot(&tg->got[g]) : NULL;
    for (int layout = 0; layout < 2; ++layout) {
        const char * lname = layout ? "strided (copied)" : "in place";
        ssmt_host    y = layout ? ssmt_alloc_layout(SSM_DTYPE_F32, 5, ys, NULL, 3) : ssmt_alloc(SSM_DTYPE_F32, 5, ys);
        ssmt_host    cs = layout ? ssmt_alloc_layout(SSM_DTYPE_F32, 4, css, NULL, 2) : ssmt_alloc(SSM_DTYPE_F32, 4, css);
        ssmt_host    out = ssmt_alloc(SSM_DTYPE_F32, fa->out.ndim, fa->out.shape);
        fc.out = out.t, fc.pregate_y = y.t, fc.chunk_states = cs.t;
        const ssm_status fs = ssmt_run_on_device(ctx_cuda, "mamba3_mimo", &fc, 0, run_fwd);
        TEST_CHECK(fs == SSM_STATUS_OK, "%s: forward with the saved results %s: %s (%s)", tg->tag, lname,
                   ssm_status_string(fs), ssm_context_last_error(ctx_cuda));
        char label[80];
        snprintf(label, sizeof label, "cuda forward, %s", lname);
        ssmt_check_variant(tg->tag, "pregate_y", label, &y.t, &yref.t, bar);
        ssmt_check_variant(tg->tag, "chunk_states", label, &cs.t, &csref.t, bar);
        TEST_CHECK(ssmt_unchanged(&out, o0), "%s: forward out differs with the saved results %s", tg->tag, lname);
        ssmt_dev dy = ssmt_to_device(&y), dcs = ssmt_to_device(&cs);
        for (int which = 1; which <= 3; ++which) { /* pregate_y, chunk_states, both */
            const ssm_status st = bwd_saved(tg, which & 1 ? &dy.view : &none, which & 2 ? &dcs.view : &none, poison);
            TEST_CHECK(st == SSM_STATUS_OK, "%s: backward with saved results %d %s: %s (%s)", tg->tag, which, lname,
                       ssm_status_string(st), ssm_context_last_error(ctx_cuda));
            for (int g = 0; g < SSMT_MIMO_NGRADS && st == SSM_STATUS_OK; ++g)
                if (base[g] != NULL)
                    TEST_CHECK(ssmt_unchanged(&tg->got[g], base[g]), "%s: %s differs with saved results %d %s", tg->tag,
                               ssmt_mimo_grad_names[g], which, lname);
            free_all(poison);
        }
        if (layout == 0) {
            ssm_tensor bad = dy.view;
            bad.shape[4] -= 1;
            refused(tg, &bad, &dcs.view, SSM_STATUS_INVALID_SHAPE, "pregate_y with P - 1 columns");
            bad = dy.view;
            bad.dtype = SSM_DTYPE_BF16;
            refused(tg, &bad, &none, SSM_STATUS_INVALID_LAYOUT, "a bf16 pregate_y");
            bad = dcs.view;
            bad.shape[0] -= 1;
            refused(tg, &dy.view, &bad, SSM_STATUS_INVALID_SHAPE, "chunk_states with a row too few");
            bad = dcs.view;
            bad.dtype = SSM_DTYPE_F16;
            refused(tg, &none, &bad, SSM_STATUS_INVALID_LAYOUT, "an f16 chunk_states");
        }
        ssmt_dev_free(&dy);
        ssmt_dev_free(&dcs);
        ssmt_free(&out);
        ssmt_free(&y);
        ssmt_free(&cs);
    }
    free(o0);
    free_all(base);
    ssmt_free(&out0);
    ssmt_free(&oref);
    ssmt_free(&yref);
    ssmt_free(&csref);
}

static void run_case(ssmt_rng * rng, const bwd_case * bc) {
    ssmt_mimo_config cfg = bc->cfg;
    const ssm_dtype  cd = cfg.dtype;
    char             tag[400];
    snprintf(tag, sizeof tag, "%s %s B%lld S%lld H%lld G%lld R%lld N%lld P%lld C%lld", bc->name, ssm_dtype_name(cd),
             (long long)cfg.batch, (long long)cfg.seqlen, (long long)cfg.nheads, (long long)cfg.ngroups,
             (long long)cfg.rank, (long long)cfg.dstate, (long long)cfg.headdim, (long long)cfg.chunk);
    cfg.out_dtype = SSM_DTYPE_F64;
    ssmt_mimo_problem     prob;
    ssmt_mimo_bwd_problem bwd;
    if (ssmt_mimo_random_args(rng, &cfg, &prob) != 0) {
        TEST_CHECK(0, "%s: allocation failed", tag);
        return;
    }
    if (ssmt_mimo_bwd_alloc(rng, &cfg, &prob, bc->has_dfinal, &bwd) != 0) {
        TEST_CHECK(0, "%s: allocation failed", tag);
        ssmt_mimo_problem_free(&prob);
        return;
    }
    ssm_mamba3_mimo_bwd_args args = bwd.args;
    if (bc->broadcast) {
        broadcast_dim(&prob.mimo_v.t, 1); /* (H, R, P): every rank the same */
        args.mimo_v = prob.mimo_v.t;
        if (prob.angle_state.t.data != NULL) {
            broadcast_dim(&prob.angle_state.t, 2); /* (NS, H, A) */
            args.angle_state = prob.angle_state.t;
        }
    }
    if (bc->only_some)
        for (int g = 0; g < SSMT_MIMO_NGRADS; ++g)
            if (g != 2 && g != 4 && g != 11 && g != 13) memset(ssmt_mimo_grad_slot(&args, g), 0, sizeof(ssm_tensor));
    const ssm_status rs = ssm_mamba3_mimo_bwd(ctx_ref, &prob.params, &args);
    TEST_CHECK(rs == SSM_STATUS_OK, "%s: reference: %s (%s)", tag, ssm_status_string(rs),
               ssm_context_last_error(ctx_ref));

    /* CPU and CUDA outputs: F32 (or the compute dtype), strided when the case is */
    const ssm_dtype gd = bc->grad_compute ? cd : SSM_DTYPE_F32;
    ssm_mamba3_mimo_bwd_args ca = args, da = args;
    ssmt_host                cpu[SSMT_MIMO_NGRADS], gpu[SSMT_MIMO_NGRADS];
    ssmt_dev                 dgrad[SSMT_MIMO_NGRADS], din[NIN];
    memset(cpu, 0, sizeof cpu), memset(gpu, 0, sizeof gpu), memset(dgrad, 0, sizeof dgrad), memset(din, 0, sizeof din);
    for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) {
        const ssm_tensor * slot = ssmt_mimo_grad_slot(&args, g);
        if (slot->data == NULL) continue;
        cpu[g] = cfg.strided ? ssmt_alloc_layout(gd, slot->ndim, slot->shape, NULL, 3)
                             : ssmt_alloc(gd, slot->ndim, slot->shape);
        gpu[g] = cfg.strided ? ssmt_alloc_layout(gd, slot->ndim, slot->shape, NULL, 3)
                             : ssmt_alloc(gd, slot->ndim, slot->shape);
        ssmt_poison(&gpu[g].t);
        *ssmt_mimo_grad_slot(&ca, g) = cpu[g].t;
        dgrad[g] = ssmt_to_device(&gpu[g]);
        *ssmt_mimo_grad_slot(&da, g) = dgrad[g].view;
    }
    for (int i = 0; i < NIN; ++i) {
        ssmt_host * h = input_host(&prob, &bwd, i);
        if (h->t.data == NULL) continue;
        ssmt_host moved = *h;
        moved.t = *input_slot(&args, i); /* the view the call uses (broadcast strides) */
        din[i] = ssmt_to_device(&moved);
        *input_slot(&da, i) = din[i].view;
    }
    const ssm_status cs = ssm_mamba3_mimo_bwd(ctx_cpu, &prob.params, &ca);
    TEST_CHECK(cs == SSM_STATUS_OK, "%s: cpu: %s (%s)", tag, ssm_status_string(cs), ssm_context_last_error(ctx_cpu));
    /* 16-bit q, k, v: the tensor-core entry forced, the fp32 entry forced, then the default (the
     * tensor-core entry); fp32: the default (chunk_parallel), and the tensor-core entry forced
     * refuses without writing anything */
    const dev_target tg = {bc, tag, &prob.params, &da, &args, gpu, cpu, dgrad, cd};
    if (cd == SSM_DTYPE_F16 || cd == SSM_DTYPE_BF16) {
        device_runs(&tg, kPlanes, NULL);
        device_runs(&tg, kFp32, NULL);
        device_runs(&tg, NULL, kPlanes);
    } else {
        device_runs(&tg, NULL, kFp32);
        device_runs(&tg, kPlanes, NULL);
    }
    ssm_mamba3_mimo_args fa = prob.args; /* the forward's inputs as the backward saw them */
    fa.mimo_v = args.mimo_v, fa.angle_state = args.angle_state;
    fa.final_angle_state = fa.final_ssm_state = fa.final_k_state = fa.final_v_state = (ssm_tensor){0};
    int64_t ncs = 0; /* chunk_states rows: ceil(len / C) per sequence */
    for (int64_t i = 0; i < (cfg.nseq > 0 ? cfg.nseq : cfg.batch); ++i) {
        const int64_t len = cfg.nseq > 0 ? cfg.seqlens[i] : cfg.seqlen;
        ncs += (len + cfg.chunk - 1) / cfg.chunk;
    }
    saved_runs(&tg, &fa, &cfg, ncs);
    for (int g = 0; g < SSMT_MIMO_NGRADS; ++g) {
        ssmt_dev_free(&dgrad[g]);
        if (cpu[g].buf) ssmt_free(&cpu[g]);
        if (gpu[g].buf) ssmt_free(&gpu[g]);
    }
    for (int i = 0; i < NIN; ++i) ssmt_dev_free(&din[i]);
    ssmt_mimo_bwd_free(&bwd);
    ssmt_mimo_problem_free(&prob);
}

/* The matrix of test_mamba3_mimo_bwd.c's CPU section, per dtype. */
static void run_matrix(ssmt_rng * rng) {
    static const int64_t seed_shapes[6][4] = {{32, 64, 4, 16}, {128, 32, 4, 16}, {64, 128, 4, 16},
                                              {128, 64, 8, 8}, {64, 64, 3, 6},   {64, 64, 1, 64}};
    static const int64_t lens[4] = {23, 0, 41, 1};
    static const int64_t lens_empty_end[3] = {17, 9, 0};
    const ssm_dtype      dtypes[3] = {SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16};
    for (int di = 0; di < 3; ++di) {
        const ssm_dtype dt = dtypes[di];
        bwd_case        c[32];
        int             n = 0;
        memset(c, 0, sizeof c);
        for (int i = 0; i < 6; ++i) {
            const int64_t * sh = seed_shapes[i];
            c[n++] = (bwd_case){"seed_shape", config(1, 2 * sh[3], 2, 1, sh[2], sh[0], sh[1], sh[3], dt), 0, 0, 0, 0};
        }
        c[n++] = (bwd_case){"tail_s35", config(1, 35, 2, 1, 4, 64, 64, 16, dt), 0, 0, 0, 0};
        c[n++] = (bwd_case){"tail_s13_r3", config(1, 13, 2, 1, 3, 64, 64, 6, dt), 0, 0, 0, 0};
        c[n++] = (bwd_case){"tail_s20_b2_gqa", config(2, 20, 4, 2, 4, 32, 32, 8, dt), 0, 0, 0, 0};
        c[n] = (bwd_case){"nonreduced_z_div2", config(1, 40, 2, 1, 2, 32, 16, 8, dt), 0, 0, 0, 0};
        c[n].cfg.reduce_o = 0, c[n].cfg.div = 2;
        ++n;
        c[n] = (bwd_case){"nonreduced_plain", config(1, 45, 2, 2, 4, 32, 32, 16, dt), 0, 0, 0, 0};
        c[n].cfg.reduce_o = 0, c[n].cfg.has_z = 0, c[n].cfg.has_d = 0;
        ++n;
        c[n] = (bwd_case){"reduced_noz_gqa", config(1, 33, 4, 1, 4, 32, 32, 16, dt), 0, 0, 0, 0};
        c[n].cfg.has_z = 0;
        ++n;
        c[n] = (bwd_case){"fused_weight", config(1, 50, 2, 1, 4, 32, 32, 16, dt), 0, 0, 0, 0};
        c[n].cfg.fused = 1, c[n].cfg.has_norm_weight = 1;
        ++n;
        c[n] = (bwd_case){"fused_noweight", config(2, 21, 2, 2, 2, 16, 32, 8, dt), 0, 0, 0, 0};
        c[n].cfg.fused = 1;
        ++n;
        c[n] = (bwd_case){"states_multichunk", config(2, 150, 4, 2, 2, 32, 32, 16, dt), 1, 0, 0, 0};
        c[n].cfg.has_states = 1;
        ++n;
        c[n] = (bwd_case){"varlen_states", config(1, 0, 4, 1, 4, 32, 16, 16, dt), 1, 0, 0, 0};
        c[n].cfg.nseq = 4, c[n].cfg.seqlens = lens, c[n].cfg.has_states = 1;
        ++n;
        c[n] = (bwd_case){"varlen_nostates_i64", config(1, 0, 2, 1, 2, 16, 32, 8, dt), 0, 0, 0, 0};
        c[n].cfg.nseq = 4, c[n].cfg.seqlens = lens, c[n].cfg.index_i64 = 1;
        ++n;
        c[n] = (bwd_case){"varlen_empty_last_states", config(1, 0, 2, 1, 2, 16, 16, 4, dt), 1, 0, 0, 0};
        c[n].cfg.nseq = 3, c[n].cfg.seqlens = lens_empty_end, c[n].cfg.has_states = 1;
        ++n;
        c[n] = (bwd_case){"strided_states", config(2, 30, 4, 2, 2, 32, 16, 8, dt), 0, 0, 0, 0};
        c[n].cfg.strided = 1, c[n].cfg.has_states = 1;
        ++n;
        c[n] = (bwd_case){"some_outputs", config(1, 70, 4, 2, 4, 32, 32, 16, dt), 1, 1, 0, 0};
        c[n].cfg.has_states = 1;
        ++n;
        /* ranks 1, 2, 4, 8 at one shape (C·R = 64), states and dfinal */
        static const int64_t ranks[4] = {1, 2, 4, 8};
        for (int ri = 0; ri < 4; ++ri) {
            c[n] = (bwd_case){"rank", config(2, 37, 4, 2, ranks[ri], 32, 24, 64 / ranks[ri], dt), 1, 0, 0, 0};
            c[n].cfg.has_states = 1;
            ++n;
        }
        c[n] = (bwd_case){"gqa_hg4_c128", config(1, 300, 8, 2, 1, 16, 16, 128, dt), 0, 0, 0, 0};
        ++n;
        /* C·R = 128 rows with N = 128 and P = 72: the chunk products span 2×2 output tiles and a
         * partial 32-deep inner slice; S = 150 ends in a 22-token tail chunk */
        c[n] = (bwd_case){"wide_tiles", config(1, 150, 2, 1, 2, 128, 72, 64, dt), 1, 0, 0, 0};
        c[n].cfg.has_states = 1;
        ++n;
        c[n] = (bwd_case){"broadcast_stride0", config(2, 19, 2, 1, 2, 16, 16, 8, dt), 1, 0, 0, 1};
        c[n].cfg.has_states = 1;
        ++n;
        c[n] = (bwd_case){"grads_in_compute_dtype", config(1, 29, 2, 1, 2, 32, 32, 8, dt), 1, 0, 1, 0};
        c[n].cfg.has_states = 1, c[n].cfg.fused = 1, c[n].cfg.has_norm_weight = 1;
        ++n;
        for (int i = 0; i < n; ++i) run_case(rng, &c[i]);
    }
}

/* The selection table: the tensor-core entry first, then the fp32 one. */
static void test_table(void) {
    const int32_t n = ssm_variant_count(SSM_BACKEND_CUDA, "mamba3_mimo_bwd");
    TEST_CHECK(n == 2, "mamba3_mimo_bwd: %d CUDA entries, want 2", (int)n);
    const char * const want[2] = {kPlanes, kFp32};
    for (int i = 0; i < 2 && i < n; ++i) {
        const char * name = ssm_variant_name(SSM_BACKEND_CUDA, "mamba3_mimo_bwd", i);
        TEST_CHECK(name != NULL && strcmp(name, want[i]) == 0, "mamba3_mimo_bwd: entry %d is '%s', want '%s'", i,
                   name ? name : "(null)", want[i]);
    }
}

int main(void) {
    if (!ssmt_cuda_present("test_cuda_mamba3_mimo_bwd")) return 77;
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261208ull);
    ctx_ref = ssmt_make_ctx(SSM_BACKEND_REF, 1, SSM_ISA_AUTO);
    ctx_cpu = ssmt_make_ctx(SSM_BACKEND_CPU, 2, SSM_ISA_AUTO);
    ctx_cuda = ssmt_make_ctx(SSM_BACKEND_CUDA, 0, SSM_ISA_AUTO);
    TEST_CHECK(ctx_ref && ctx_cpu && ctx_cuda, "context creation failed");
    if (ssmt_failures) TEST_EXIT();
    test_table();
    run_matrix(&rng);
    printf("worst rel_rms per gradient (CUDA vs reference; %s on f32, %s on 16-bit):\n%-22s %10s %10s %10s %10s "
           "%10s\n",
           kFp32, kPlanes, "gradient", "f32", "f16", "bf16", "f16 tc", "bf16 tc");
    for (int g = 0; g < SSMT_MIMO_NGRADS; ++g)
        printf("%-22s %10.3g %10.3g %10.3g %10.3g %10.3g\n", ssmt_mimo_grad_names[g], worst[0][0][g], worst[0][1][g],
               worst[0][2][g], worst[1][1][g], worst[1][2][g]);
    ssm_context_free(ctx_ref);
    ssm_context_free(ctx_cpu);
    ssm_context_free(ctx_cuda);
    TEST_EXIT();
}
