/*
 * test_mamba3_siso_bwd_cpu.c — the optimised CPU backward of Mamba-3 SISO (every gradient of
 * ssm_mamba3_siso) against the float64 reference backward run with F64 outputs, through the
 * public API. Shapes around the CPU chunk (64): S = 1, below, at, above, odd; GQA with
 * Hq = 1, Hq = H and 1 < Hq < H; K, V in {32, 64, 96} and a small odd V; A = K/2 and
 * A < K/2; d and z on and off; initial states on and off, with and without the dfinal_*
 * gradients; varlen with empty sequences; f32/f16/bf16 inputs; strided views and angles
 * broadcast over heads (stride 0); NaN-poisoned outputs; a run with only some outputs.
 * Every gradient must meet the DESIGN §5 bar of the compute dtype (the reductions dq_bias,
 * dk_bias, dd as whole vectors); 1, 2 and 3 threads must give identical bytes; the scalar
 * ISA must meet the same bars. Four cases with z run again given the CPU forward's pregate_y:
 * the same bars and thread rules, and every gradient but dz the bytes of the run without it.
 * Five cases run again given chunk_states: from the CPU forward at chunk_size 32 and 64 (F32
 * and F64 rows, a permuted padded view where the case is strided), every gradient within the
 * bars and the thread rules, and within the same bars of the run without them (the closeness is
 * printed); doubled rows move some gradient (they are read). At chunk_size 48 (rows from the
 * reference forward) the rows are not read: the bytes of the run without them, doubled or not.
 * Prints the worst rel_rms per gradient and dtype.
 * Seed: SSMOPS_TEST_SEED (default 20261205).
 */
#include <stdlib.h>
#include <string.h>

#include "grads.h"
#include "testutil.h"

static ssm_context *ctx_ref, *ctx_cpu[4], *ctx_scalar;

/* worst rel_rms per gradient, per compute dtype (0 f32, 1 f16, 2 bf16) */
static double worst[3][SSMT_SISO_NGRADS];
static int    dtype_slot(ssm_dtype t) { return t == SSM_DTYPE_F16 ? 1 : t == SSM_DTYPE_BF16 ? 2 : 0; }

typedef struct bwd_case {
    const char *       name;
    ssmt_mamba3_config cfg;
    int                has_dfinal;
    int                only_some; /* request dv, ddt, dq_bias and dangles only          */
    int                out_16bit; /* also run with gradients in the (16-bit) compute dtype */
    int                saved_y;   /* also given the CPU forward's pregate_y (z on) */
    int                saved_cs;  /* also given chunk_states at chunk_size 32, 64 and 48 */
} bwd_case;

/* A poisoned output like `like` in dtype (padded strides when strided). */
static ssmt_host out_like(const ssm_tensor * like, ssm_dtype dtype, int strided) {
    return strided ? ssmt_alloc_layout(dtype, like->ndim, like->shape, NULL, 3)
                   : ssmt_alloc(dtype, like->ndim, like->shape);
}

/* Gradients stored in a 16-bit dtype must be the F32 results rounded to it, element for
 * element (the DESIGN bars are checked on F32 outputs: a 16-bit output's own rounding
 * alone can exceed max_rel for heavy-tailed gradients such as dangles). */
static void check_rounded_outputs(const bwd_case * bc, const ssm_mamba3_params * p,
                                  const ssm_mamba3_siso_bwd_args * args, const ssmt_host * f32, ssm_dtype dt) {
    ssm_mamba3_siso_bwd_args ca = *args;
    ssmt_host                got[SSMT_SISO_NGRADS];
    memset(got, 0, sizeof got);
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g) {
        ssm_tensor * slot = ssmt_siso_grad_slot(&ca, g);
        if (slot->data == NULL) continue;
        got[g] = out_like(slot, dt, bc->cfg.strided);
        *slot = got[g].t;
    }
    const ssm_status s = ssm_mamba3_siso_bwd(ctx_cpu[2], p, &ca);
    TEST_CHECK(s == SSM_STATUS_OK, "%s 16-bit outputs: %s (%s)", bc->name, ssm_status_string(s),
               ssm_context_last_error(ctx_cpu[2]));
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g) {
        if (got[g].t.data == NULL) continue;
        int64_t bad = 0, n = ssmt_numel(&got[g].t);
        for (int64_t i = 0; i < n; ++i)
            if (ssmt_get(&got[g].t, i) != ssmt_round_to(dt, ssmt_get(&f32[g].t, i))) ++bad;
        TEST_CHECK(bad == 0, "%s/%s: %lld of %lld 16-bit outputs are not the rounded F32 result", bc->name,
                   ssmt_siso_grad_names[g], (long long)bad, (long long)n);
        ssmt_free(&got[g]);
    }
}

/* The backward given the CPU forward's pregate_y (F32, padded where the case is strided): dz from
 * it within the bars again (threads and scalar as before), every other gradient the bytes of the
 * run without it (first). */
static void saved_y_runs(const bwd_case * bc, const ssm_mamba3_params * p, const ssmt_mamba3_problem * prob,
                         ssm_mamba3_siso_bwd_args * args, const ssmt_host * first) {
    const ssm_tensor *   v = &prob->args.v;
    ssmt_host            y = bc->cfg.strided ? ssmt_alloc_layout(SSM_DTYPE_F32, 4, v->shape, NULL, 3)
                                             : ssmt_alloc(SSM_DTYPE_F32, 4, v->shape);
    ssmt_host            out = ssmt_alloc(SSM_DTYPE_F32, 4, v->shape);
    ssm_mamba3_siso_args fa = prob->args;
    TEST_CHECK(y.t.data && out.t.data, "%s: no memory for pregate_y", bc->name);
    if (y.t.data && out.t.data) {
        fa.out = out.t, fa.pregate_y = y.t;
        fa.final_angle_state = fa.final_ssm_state = fa.final_k_state = fa.final_v_state = ssmt_absent();
        const ssm_status st = ssm_mamba3_siso(ctx_cpu[2], p, &fa);
        TEST_CHECK(st == SSM_STATUS_OK, "%s: the forward for pregate_y: %s (%s)", bc->name, ssm_status_string(st),
                   ssm_context_last_error(ctx_cpu[2]));
        char name[200];
        snprintf(name, sizeof name, "%s+pregate_y", bc->name);
        ssm_mamba3_siso_bwd_args ya = *args;
        ya.pregate_y = y.t;
        ssmt_host with[SSMT_SISO_NGRADS];
        ssmt_bwd_cpu_variants(&ssmt_siso_bwd_op, name, p, &ya, bc->cfg.strided, ssmt_bar_for(bc->cfg.dtype), ctx_cpu,
                              ctx_scalar, worst[dtype_slot(bc->cfg.dtype)], with);
        /* dz is read from pregate_y, not recomputed: twice pregate_y gives twice dz */
        if (args->dz.data != NULL) {
            ssmt_host dz2 = out_like(&args->dz, SSM_DTYPE_F32, 0);
            for (int64_t i = 0, n = ssmt_numel(&y.t); i < n; ++i) ssmt_set(&y.t, i, 2.0 * ssmt_get(&y.t, i));
            ssm_mamba3_siso_bwd_args da = ya;
            for (int g = 0; g < SSMT_SISO_NGRADS; ++g) *ssmt_siso_grad_slot(&da, g) = ssmt_absent();
            da.dz = dz2.t;
            TEST_CHECK_STATUS(ssm_mamba3_siso_bwd(ctx_cpu[1], p, &da), SSM_STATUS_OK);
            int64_t bad = 0;
            for (int g = 0; g < SSMT_SISO_NGRADS; ++g)
                if (strcmp(ssmt_siso_grad_names[g], "dz") == 0 && with[g].buf != NULL)
                    for (int64_t i = 0, n = ssmt_numel(&dz2.t); i < n; ++i)
                        bad += ssmt_get(&dz2.t, i) != 2.0 * ssmt_get(&with[g].t, i);
            TEST_CHECK(bad == 0, "%s: %lld dz elements are not twice the run's with pregate_y doubled", name,
                       (long long)bad);
            ssmt_free(&dz2);
        }
        for (int g = 0; g < SSMT_SISO_NGRADS; ++g) {
            if (with[g].buf == NULL) continue;
            if (strcmp(ssmt_siso_grad_names[g], "dz") != 0)
                TEST_CHECK(first[g].buf && memcmp(with[g].buf, first[g].buf, with[g].bytes) == 0,
                           "%s/%s: the bytes differ from the run without pregate_y", name, ssmt_siso_grad_names[g]);
            ssmt_free(&with[g]);
        }
    }
    ssmt_free(&y), ssmt_free(&out);
}

/* How close the backward given chunk_states comes to the one without (per compute dtype): the
 * worst rel_rms and max_rel over the gradients, and the gradients compared / bitwise equal. */
static double  cs_worst_rms[3], cs_worst_max[3];
static int64_t cs_compared[3], cs_identical[3];

/* The backward given chunk_states at chunk size C, from the CPU forward where C % 32 == 0 (F32
 * rows, F64 at C = 64; K outside V in memory and padded where the case is strided), else from
 * the reference forward (the CPU forward refuses such a C). The gradients within the bars
 * (threads and scalar as before) and compared with the run without chunk_states (first). Then
 * the rows doubled: some gradient moves where C % 32 == 0 (the rows are read), none moves
 * otherwise (they are not). */
static void chunk_states_runs(const bwd_case * bc, const ssm_mamba3_params * p, const ssmt_mamba3_problem * prob,
                              ssm_mamba3_siso_bwd_args * args, const ssmt_host * first) {
    static const int64_t chunks[3] = {32, 64, 48};
    const int            slot = dtype_slot(bc->cfg.dtype);
    const ssmt_bar       bar = ssmt_bar_for(bc->cfg.dtype);
    for (int ci = 0; ci < 3; ++ci) {
        const int64_t     C = chunks[ci];
        const int         read = C % 32 == 0;
        ssm_mamba3_params pc = *p;
        pc.chunk_size = C;
        const ssm_dtype dt = C == 64 ? SSM_DTYPE_F64 : SSM_DTYPE_F32;
        ssmt_host       cs = ssmt_mamba3_chunk_states(&bc->cfg, C, dt, bc->cfg.strided);
        ssmt_host       out = ssmt_alloc(SSM_DTYPE_F32, 4, prob->args.v.shape);
        char            name[200];
        snprintf(name, sizeof name, "%s+chunk_states C%lld", bc->name, (long long)C);
        TEST_CHECK(cs.t.data && out.t.data, "%s: no memory", name);
        if (cs.t.data && out.t.data) {
            ssm_mamba3_siso_args fa = prob->args;
            fa.out = out.t, fa.chunk_states = cs.t, fa.pregate_y = ssmt_absent();
            fa.final_angle_state = fa.final_ssm_state = fa.final_k_state = fa.final_v_state = ssmt_absent();
            ssm_context *    fctx = read ? ctx_cpu[2] : ctx_ref;
            const ssm_status st = ssm_mamba3_siso(fctx, &pc, &fa);
            TEST_CHECK(st == SSM_STATUS_OK, "%s: the forward: %s (%s)", name, ssm_status_string(st),
                       ssm_context_last_error(fctx));
            ssm_mamba3_siso_bwd_args ca = *args;
            ca.chunk_states = cs.t;
            ssmt_host with[SSMT_SISO_NGRADS];
            ssmt_bwd_cpu_variants(&ssmt_siso_bwd_op, name, &pc, &ca, bc->cfg.strided, bar, ctx_cpu, ctx_scalar,
                                  worst[slot], with);
            for (int g = 0; g < SSMT_SISO_NGRADS; ++g) {
                if (with[g].buf == NULL || first[g].buf == NULL) continue;
                const int same = memcmp(with[g].buf, first[g].buf, with[g].bytes) == 0;
                if (!read) {
                    TEST_CHECK(same, "%s/%s: the bytes differ from the run without chunk_states (not read)", name,
                               ssmt_siso_grad_names[g]);
                    continue;
                }
                const ssmt_cmp c = ssmt_compare(&with[g].t, &first[g].t);
                TEST_CHECK(c.nonfinite == 0 && c.rel_rms <= bar.rel_rms && c.max_rel <= bar.max_rel,
                           "%s/%s vs without chunk_states: rel_rms %.3g max_rel %.3g (bar %.3g %.3g)", name,
                           ssmt_siso_grad_names[g], c.rel_rms, c.max_rel, bar.rel_rms, bar.max_rel);
                if (c.rel_rms > cs_worst_rms[slot]) cs_worst_rms[slot] = c.rel_rms;
                if (c.max_rel > cs_worst_max[slot]) cs_worst_max[slot] = c.max_rel;
                cs_compared[slot] += 1, cs_identical[slot] += same;
            }
            /* the rows doubled */
            for (int64_t i = 0, n = ssmt_numel(&cs.t); i < n; ++i) ssmt_set(&cs.t, i, 2.0 * ssmt_get(&cs.t, i));
            ssm_mamba3_siso_bwd_args da = ca;
            ssmt_host                two[SSMT_SISO_NGRADS];
            memset(two, 0, sizeof two);
            for (int g = 0; g < SSMT_SISO_NGRADS; ++g) {
                ssm_tensor * t = ssmt_siso_grad_slot(&da, g);
                if (t->data == NULL) continue;
                two[g] = bc->cfg.strided ? ssmt_alloc_layout(SSM_DTYPE_F32, t->ndim, t->shape, NULL, 3)
                                         : ssmt_alloc(SSM_DTYPE_F32, t->ndim, t->shape);
                *t = two[g].t;
            }
            TEST_CHECK_STATUS(ssm_mamba3_siso_bwd(ctx_cpu[1], &pc, &da), SSM_STATUS_OK);
            int moved = 0;
            for (int g = 0; g < SSMT_SISO_NGRADS; ++g) {
                if (two[g].buf == NULL || with[g].buf == NULL) continue;
                const int same = memcmp(two[g].buf, with[g].buf, two[g].bytes) == 0;
                moved += !same;
                if (!read)
                    TEST_CHECK(same, "%s/%s: doubled chunk_states change it (they must not be read)", name,
                               ssmt_siso_grad_names[g]);
            }
            if (read) TEST_CHECK(moved > 0, "%s: doubled chunk_states change no gradient (not read?)", name);
            ssmt_free_all(two, SSMT_SISO_NGRADS);
            ssmt_free_all(with, SSMT_SISO_NGRADS);
        }
        ssmt_free(&cs), ssmt_free(&out);
    }
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

    ssmt_host first[SSMT_SISO_NGRADS];
    ssmt_bwd_cpu_variants(&ssmt_siso_bwd_op, bc->name, &p, &args, cfg.strided, ssmt_bar_for(cd), ctx_cpu, ctx_scalar,
                          worst[dtype_slot(cd)], first);
    if (bc->out_16bit && cd != SSM_DTYPE_F32) check_rounded_outputs(bc, &p, &args, first, cd);
    if (bc->saved_y && cfg.has_z) saved_y_runs(bc, &p, &prob, &args, first);
    if (bc->saved_cs) chunk_states_runs(bc, &p, &prob, &args, first);
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g)
        if (first[g].buf) ssmt_free(&first[g]);
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
    ssmt_rng rng;
    ssmt_rng_from_env(&rng, 20261205ull);

    ssmt_make_cpu_ctxs(&ctx_ref, ctx_cpu, &ctx_scalar);
    if (!(ctx_ref && ctx_cpu[1] && ctx_cpu[2] && ctx_cpu[3])) TEST_EXIT();

    static const int64_t lens_a[4] = {37, 0, 70, 1};
    static const int64_t lens_b[3] = {0, 65, 9};
    const ssm_dtype      dtypes[3] = {SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16};
    for (int di = 0; di < 3; ++di) {
        const ssm_dtype dt = dtypes[di];
        bwd_case        cases[16];
        int             n = 0;

        /* S = 1, 1 < Hq < H, states and dfinal */
        cases[n] = (bwd_case){"s1_states", base_config(2, 1, 4, 2, 32, 32, 16, dt), 1, 0, 0, 0, 0};
        cases[n].cfg.has_states = 1;
        ++n;
        /* below the chunk, Hq = 1, A = K/2, d and z, no states */
        cases[n] = (bwd_case){"s50_hq1", base_config(1, 50, 4, 1, 64, 64, 32, dt), 0, 0, 0, 1, 0};
        cases[n].out_16bit = 1;
        ++n;
        /* at the chunk, Hq = H, K = V = 96, A < K/2, no d, states without dfinal */
        cases[n] = (bwd_case){"s64_hqh", base_config(1, 64, 3, 3, 96, 96, 20, dt), 0, 0, 0, 0, 0};
        cases[n].cfg.has_d = 0, cases[n].cfg.has_states = 1;
        ++n;
        /* above the chunk, odd S, small odd V, no z, states and dfinal, trap randn */
        cases[n] = (bwd_case){"s131_v7", base_config(2, 131, 6, 2, 32, 7, 5, dt), 1, 0, 0, 0, 0};
        cases[n].cfg.has_z = 0, cases[n].cfg.has_states = 1, cases[n].cfg.trap_randn = 1;
        cases[n].saved_cs = 1;
        ++n;
        /* neither d nor z, A = 1, several chunks */
        cases[n] = (bwd_case){"s200_plain", base_config(1, 200, 2, 1, 64, 32, 1, dt), 1, 0, 0, 0, 0};
        cases[n].cfg.has_d = 0, cases[n].cfg.has_z = 0, cases[n].saved_cs = 1;
        ++n;
        /* varlen with an empty sequence, states and dfinal */
        cases[n] = (bwd_case){"varlen_states", base_config(1, 0, 4, 1, 64, 32, 16, dt), 1, 0, 0, 1, 0};
        cases[n].cfg.nseq = 4, cases[n].cfg.seqlens = lens_a, cases[n].cfg.has_states = 1;
        cases[n].saved_cs = 1;
        ++n;
        /* varlen starting with an empty sequence, no states, I64 cu_seqlens */
        cases[n] = (bwd_case){"varlen_nostates", base_config(1, 0, 4, 2, 32, 64, 8, dt), 0, 0, 0, 0, 0};
        cases[n].cfg.nseq = 3, cases[n].cfg.seqlens = lens_b, cases[n].cfg.index_i64 = 1;
        ++n;
        /* strided views, angles broadcast over heads (stride 0), states, dfinal */
        cases[n] = (bwd_case){"strided_bcast", base_config(2, 70, 4, 2, 32, 32, 8, dt), 1, 0, 0, 1, 0};
        cases[n].cfg.strided = 1, cases[n].cfg.angles_broadcast = 1, cases[n].cfg.has_states = 1;
        cases[n].out_16bit = 1, cases[n].saved_cs = 1;
        ++n;
        /* the seed regime (negative dt, small angles) */
        cases[n] = (bwd_case){"seed_regime", base_config(1, 100, 4, 2, 64, 96, 16, dt), 1, 0, 0, 1, 0};
        cases[n].cfg.seed_regime = 1, cases[n].cfg.has_states = 1, cases[n].saved_cs = 1;
        ++n;
        /* varlen with empty sequences, states but no dfinal: their state gradients are 0 */
        cases[n] = (bwd_case){"varlen_nodfinal", base_config(1, 0, 2, 1, 32, 32, 16, dt), 0, 0, 0, 0, 0};
        cases[n].cfg.nseq = 3, cases[n].cfg.seqlens = lens_b, cases[n].cfg.has_states = 1;
        ++n;
        /* many rows: each task takes all heads of a group (one workspace slot) */
        cases[n] = (bwd_case){"batch8", base_config(8, 20, 4, 2, 32, 16, 4, dt), 1, 0, 0, 0, 0};
        cases[n].cfg.has_states = 1;
        ++n;
        /* only some outputs requested */
        cases[n] = (bwd_case){"some_outputs", base_config(1, 90, 4, 2, 32, 32, 8, dt), 1, 1, 1, 0, 0};
        cases[n].cfg.has_states = 1;
        ++n;
        for (int c = 0; c < n; ++c) run_case(&rng, &cases[c]);
    }

    printf("worst rel_rms per gradient (CPU and scalar vs reference):\n%-14s %10s %10s %10s\n", "gradient", "f32",
           "f16", "bf16");
    for (int g = 0; g < SSMT_SISO_NGRADS; ++g)
        printf("%-14s %10.3g %10.3g %10.3g\n", ssmt_siso_grad_names[g], worst[0][g], worst[1][g], worst[2][g]);
    printf("given chunk_states vs without (C 32, 64), worst over the gradients:\n");
    static const char * const dtype_names[3] = {"f32", "f16", "bf16"};
    for (int i = 0; i < 3; ++i)
        printf("  %-5s rel_rms %.3g max_rel %.3g; %lld of %lld gradients bitwise equal\n", dtype_names[i],
               cs_worst_rms[i], cs_worst_max[i], (long long)cs_identical[i], (long long)cs_compared[i]);

    ssmt_free_cpu_ctxs(ctx_ref, ctx_cpu, ctx_scalar);
    TEST_EXIT();
}
