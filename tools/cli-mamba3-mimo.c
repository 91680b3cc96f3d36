/*
 * cli-mamba3-mimo.c — CLI operator-table entries of Mamba-3 MIMO (spec mamba3_mimo.md):
 * mamba3_mimo_bwd_fwd (backward phase 1, the seed interface), mamba3_mimo (forward),
 * mamba3_mimo_bwd (every gradient) and mamba3_mimo_step (decode). Shape keys
 * B,S,H,G,R,N,P,chunk (DESIGN §7; the step has no S and no chunk); params div (the rotary
 * divisor, A = N/div), has_d, has_z (z with mimo_z), reduce_o (mimo_o given: reduced out /
 * dout), fused (= fuse_pregate_headwise_rms_norm, the test vectors' name) with
 * has_norm_weight and outproj_norm_eps, has_states, has_final, has_dfinal, nseq (varlen),
 * save_y / save_states (the forward also writes pregate_y / chunk_states, F32), saved_y /
 * saved_states (the backward also takes the pregate_y / chunk_states a CPU forward writes for
 * its inputs, so that `bench` measures the backward that reads them), and for the step slots
 * and in_place.
 *
 * Inputs (spec §5.5):
 *   forward, backward, step: upstream's test distributions: q, k, v, z, dout, the dfinal_*
 *   and the ssm/k/v states N(0,1); q_bias, k_bias, mimo_z, d N(0,1); mimo_v, mimo_o
 *   N(0,1)/R; raw angles U(0,1); dt = softplus(−3 + N(0,1)); adt = −dt·U(0,1); trap U(0,1)
 *   (pre-sigmoid); angle_state U(0, 2π); outproj_norm_weight 1 + 0.1·N(0,1).
 *   mamba3_mimo_bwd_fwd: the seed's: q, k, v, dout, z, trap N(0,1); q_bias, k_bias, d
 *   N(0,1)/8; mimo_v, mimo_z, mimo_o N(0,1)/4; cumulative angles U(0,1); dt U(0.05, 0.15);
 *   da_cs, da_cs_rev, segsum N(0,1)/8 independently (the seed feeds inconsistent values; the
 *   operator must use them as given), or with consistent=1 built from adt = −dt·U(0,1) as
 *   spec §2.4 defines them (a = 0 past S).
 * Activations (q, k, v, z, trap, dout) are in the compute dtype, everything else fp32.
 *
 * check mamba3_mimo_bwd_fwd also compares the two rounding models of the issue (cli-check.c):
 * with bf16 inputs (or --ref-mode bf16) the backend run with ctx ref_mode =
 * SSM_REF_UPSTREAM_BF16 against the reference in that mode, rel_rms < 1e-3 (DESIGN §5).
 *
 * The reference backward is token-recurrent float64: the check shapes keep S small.
 */
#define _XOPEN_SOURCE 700

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"


#define K_B     CLI_KEY_INT("B", "2", "batch (1 with nseq)")
#define K_H     CLI_KEY_INT("H", "4", "value heads (H % G == 0)")
#define K_G     CLI_KEY_INT("G", "2", "q/k heads")
#define K_R     CLI_KEY_INT("R", "2", "MIMO rank")
#define K_N     CLI_KEY_INT("N", "32", "state size = q/k width (even, a multiple of div)")
#define K_P     CLI_KEY_INT("P", "16", "value width")
#define K_CHUNK CLI_KEY_INT("chunk", "8", "chunk size C (C*R <= 128)")

#define P_DIV    CLI_KEY_INT("div", "4", "rotary_dim_divisor (2 or 4): A = N/div rotated pairs (a, a+N/2)")
#define P_HAS_D  CLI_KEY_INT("has_d", "1", "skip term d (H)")
#define P_HAS_Z  CLI_KEY_INT("has_z", "1", "gate z (B,S,H,P) with mimo_z (H,R,P)")
#define P_REDUCE CLI_KEY_INT("reduce_o", "1", "mimo_o given: out/dout (B,S,H,P); 0: per rank (B,S,R,H,P)")
#define P_FUSED  CLI_KEY_INT("fused", "0", "fused pre-gate headwise RMSNorm (needs has_z, reduce_o)")
#define P_FUSED2 \
    CLI_KEY_INT("fuse_pregate_headwise_rms_norm", "0", "same as fused (the name upstream and the test vectors use)")
#define P_NORM_W CLI_KEY_INT("has_norm_weight", "1", "with fused: outproj_norm_weight (H,P) (0: all ones)")
#define P_EPS    {"outproj_norm_eps", CLI_KEY_FLOAT, "1e-5", "eps of the fused norm", NULL}
#define P_STATES CLI_KEY_INT("has_states", "1", "initial states in (angle, ssm, k, v)")
#define P_SAVE_Y CLI_KEY_INT("save_y", "0", "also write pregate_y (B,S,H,R,P) F32, the input of the backward")
#define P_SAVED_Y \
    CLI_KEY_INT("saved_y", "0", "the forward's pregate_y as input (written by a CPU forward on the same inputs)")
#define P_SAVE_S CLI_KEY_INT("save_states", "0", "also write chunk_states (NCS,H,N,P) F32, the input of the backward")
#define P_SAVED_S \
    CLI_KEY_INT("saved_states", "0", "the forward's chunk_states as input (written by a CPU forward on the same inputs)")

/* ---- dimensions and tensor shapes by argument name ---------------------------------- */

typedef enum op_kind { OP_BWD_FWD, OP_FWD, OP_BWD, OP_STEP } op_kind;

typedef struct mdims {
    int64_t B, S, H, G, R, N, P, C, A, NS, nc, NCS; /* NCS: chunks of all sequences */
    int     reduce;   /* out / dout without the rank axis                    */
    op_kind kind;
    cli_sym syms[CLI_MAX_SYMS]; /* the schema's dimension symbols: the shape keys, A, NS (slots), nc, C */
} mdims;

static op_kind kind_of(const cli_problem * pb) {
    const char * n = pb->op->name;
    if (strcmp(n, "mamba3_mimo_bwd_fwd") == 0) return OP_BWD_FWD;
    if (strcmp(n, "mamba3_mimo_bwd") == 0) return OP_BWD;
    if (strcmp(n, "mamba3_mimo_step") == 0) return OP_STEP;
    return OP_FWD;
}

static mdims dims_of(const cli_problem * pb) {
    mdims d = {cli_shape_or(pb, "B", 1), cli_shape_or(pb, "S", 1),     cli_shape_or(pb, "H", 1),
               cli_shape_or(pb, "G", 1), cli_shape_or(pb, "R", 1),     cli_shape_or(pb, "N", 2),
               cli_shape_or(pb, "P", 1), cli_shape_or(pb, "chunk", 1), 0, 0, 0, 0, 0, kind_of(pb), {{NULL, 0}}};
    const int64_t div = cli_param_or(pb, "div", 4);
    d.A      = div > 0 ? d.N / div : 0;
    d.nc     = (d.S + d.C - 1) / d.C;
    d.reduce = cli_param_or(pb, "reduce_o", 1) != 0;
    d.NS     = cli_state_rows(pb, d.B);
    d.NCS    = cli_chunk_rows(pb, d.B, d.S, d.C);
    const cli_sym derived[] = {{"A", d.A}, {"NS", d.NS}, {"slots", d.NS}, {"nc", d.nc}, {"C", d.C},
                               {"NCS", d.NCS}, {"rows", d.B}, {NULL, 0}}; /* rows: the step's batch rows */
    cli_syms(pb, derived, d.syms, CLI_MAX_SYMS);
    return d;
}


static ssm_mamba3_mimo_params params_of(const cli_problem * pb) {
    ssm_mamba3_mimo_params p;
    ssm_mamba3_mimo_params_init(&p);
    if (cli_key_index(pb->op->shape_keys, "chunk") >= 0) p.chunk_size = cli_shape(pb, "chunk");
    p.rotary_dim_divisor = (int32_t)cli_param_int(pb, "div");
    p.fuse_pregate_norm  = cli_fused(pb);
    if (cli_has_param(pb, "outproj_norm_eps")) p.norm_eps = cli_param_float(pb, "outproj_norm_eps");
    return p;
}

/* ---- validation (usage errors; the library checks the rest) --------------------------- */

static int mimo_validate(const cli_problem * pb, char * err, size_t errlen) {
    static const char * const bools[] = {"has_d",   "has_z",      "reduce_o",   "fused", "fuse_pregate_headwise_rms_norm",
                                         "has_norm_weight", "has_states", "has_final", "has_dfinal", "in_place",
                                         "consistent", "save_y", "saved_y", "save_states", "saved_states", NULL};
    if (cli_check_shape_positive(pb, err, errlen) || cli_check_bools(pb, bools, err, errlen)) return -1;
    const mdims   d   = dims_of(pb);
    const int64_t div = cli_param_int(pb, "div");
    if (div < 1 || div > 64) { /* the library takes 2 or 4 and reports the rest */
        snprintf(err, errlen, "%s: div=%lld must be in [1, 64] (the operator accepts 2 or 4)", pb->op->name,
                 (long long)div);
        return -1;
    }
    return cli_check_nseq_slots(pb, d.B, err, errlen);
}

/* ---- input generation ------------------------------------------------------------------- */

static void gen_scaled_normal(const ssm_tensor * t, cli_rng * rng, double scale) {
    const int64_t n = cli_numel(t->ndim, t->shape);
    for (int64_t k = 0; k < n; ++k) cli_set(t, cli_offset(t, k), scale * cli_rng_normal(rng));
}

static double softplus(double x) {
    return x > 20.0 ? x : log1p(exp(x));
}

/* Upstream's test distributions (forward, backward, step). */
static void fill_layer_input(const mdims * d, const char * name, const ssm_tensor * t, cli_rng * rng) {
    const int64_t n = cli_numel(t->ndim, t->shape);
    if (strcmp(name, "mimo_v") == 0 || strcmp(name, "mimo_o") == 0) {
        gen_scaled_normal(t, rng, 1.0 / (double)d->R);
    } else if (strcmp(name, "angles") == 0 || strcmp(name, "trap") == 0) {
        cli_gen_uniform(t, rng, 0.0, 1.0);
    } else if (strcmp(name, "dt") == 0) {
        for (int64_t k = 0; k < n; ++k) cli_set(t, cli_offset(t, k), softplus(-3.0 + cli_rng_normal(rng)));
    } else if (strcmp(name, "adt") == 0) {
        cli_gen_uniform(t, rng, 0.0, 1.0); /* scaled by −dt once dt exists (adt_from_dt) */
    } else if (strcmp(name, "angle_state") == 0) {
        cli_gen_uniform(t, rng, 0.0, 2.0 * M_PI);
    } else if (strcmp(name, "outproj_norm_weight") == 0) {
        for (int64_t k = 0; k < n; ++k) cli_set(t, cli_offset(t, k), 1.0 + 0.1 * cli_rng_normal(rng));
    } else {
        cli_gen_normal(t, rng);
    }
}

/* The seed's bwd_fwd distributions (spec §5.5). */
static void fill_seed_input(const char * name, const ssm_tensor * t, cli_rng * rng) {
    if (strcmp(name, "q_bias") == 0 || strcmp(name, "k_bias") == 0 || strcmp(name, "d") == 0 ||
        strcmp(name, "da_cs") == 0 || strcmp(name, "da_cs_rev") == 0 || strcmp(name, "segsum") == 0) {
        gen_scaled_normal(t, rng, 1.0 / 8.0);
    } else if (strncmp(name, "mimo_", 5) == 0) {
        gen_scaled_normal(t, rng, 1.0 / 4.0);
    } else if (strcmp(name, "angles") == 0) {
        cli_gen_uniform(t, rng, 0.0, 1.0);
    } else if (strcmp(name, "dt") == 0) {
        cli_gen_uniform(t, rng, 0.05, 0.15);
    } else {
        cli_gen_normal(t, rng);
    }
}

/* consistent=1: da_cs, da_cs_rev and segsum of spec §2.4 from a = −dt·U(0,1) (a = 0 past S),
 * in float64, stored in their fp32 tensors. */
static int consistent_decays(cli_problem * pb, const mdims * d, cli_rng * rng, char * err, size_t errlen) {
    const ssm_tensor * dt  = &cli_arg_buf(pb, "dt")->view;
    const ssm_tensor * cs  = &cli_arg_buf(pb, "da_cs")->view;
    const ssm_tensor * rev = &cli_arg_buf(pb, "da_cs_rev")->view;
    const ssm_tensor * seg = &cli_arg_buf(pb, "segsum")->view;
    const int64_t      Sp  = d->nc * d->C;
    double *           a   = malloc((size_t)Sp * sizeof *a);
    double *           cm  = malloc((size_t)Sp * sizeof *cm);
    if (!a || !cm) {
        free(a);
        free(cm);
        snprintf(err, errlen, "%s: out of memory", pb->op->name);
        return -1;
    }
    for (int64_t b = 0; b < d->B; ++b)
        for (int64_t h = 0; h < d->H; ++h) {
            const int64_t row = (b * d->H + h) * d->S;
            for (int64_t t = 0; t < Sp; ++t)
                a[t] = t < d->S ? -cli_rng_uniform(rng) * cli_get(dt, cli_offset(dt, row + t)) : 0.0;
            for (int64_t c = 0; c < d->nc; ++c) {
                const int64_t t0  = c * d->C;
                double        run = 0.0;
                for (int64_t i = 0; i < d->C; ++i) cm[t0 + i] = (run += a[t0 + i]);
                for (int64_t i = 0; i < d->C && t0 + i < d->S; ++i) {
                    cli_set(cs, cli_offset(cs, row + t0 + i), cm[t0 + i]);
                    cli_set(rev, cli_offset(rev, row + t0 + i), cm[t0 + d->C - 1] - cm[t0 + i]);
                }
                const int64_t base = ((b * d->H + h) * d->nc + c) * d->C * d->C;
                for (int64_t i = 0; i < d->C; ++i)
                    for (int64_t j = 0; j < d->C; ++j)
                        cli_set(seg, cli_offset(seg, base + i * d->C + j), i > j ? cm[t0 + i] - cm[t0 + j] : 0.0);
            }
        }
    free(a);
    free(cm);
    return 0;
}

/* One input by its distribution: the seed's for bwd_fwd, upstream's tests' for the rest. */
static void fill_input(cli_problem * pb, const void * dims, const char * name, const ssm_tensor * t, cli_rng * rng) {
    const mdims * d = dims;
    (void)pb;
    if (strcmp(name, "cu_seqlens") == 0)
        cli_gen_cu_seqlens(t, d->S, d->NS, rng);
    else if (strcmp(name, "state_batch_indices") == 0)
        cli_gen_slot_indices(t, d->NS, rng);
    else if (d->kind == OP_BWD_FWD)
        fill_seed_input(name, t, rng);
    else
        fill_layer_input(d, name, t, rng);
}

static ssm_status run_mimo_cpu(ssm_context * ctx, const cli_problem * pb, void * args) {
    const ssm_mamba3_mimo_params p = params_of(pb);
    return ssm_mamba3_mimo(ctx, &p, args);
}

/* saved_y=1 / saved_states=1: pregate_y / chunk_states as a CPU forward on the generated inputs
 * writes them (F32). */
static int saved_results(cli_problem * pb, const mdims * d, char * err, size_t errlen) {
    const int64_t        yshp[5] = {d->B, d->S, d->H, d->R, d->P}, cshp[4] = {d->NCS, d->H, d->N, d->P};
    const int64_t        oshp[5] = {d->B, d->S, d->R, d->H, d->P}, rshp[4] = {d->B, d->S, d->H, d->P};
    ssm_mamba3_mimo_args fa;
    const cli_m3_saved   s = {"mamba3_mimo", &fa, sizeof fa, &fa.out, &fa.pregate_y, &fa.chunk_states, 5,
                              d->reduce ? 4 : 5, yshp, cshp, d->reduce ? rshp : oshp, run_mimo_cpu};
    return cli_m3_saved_results(pb, &s, err, errlen);
}

static int mimo_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    const mdims d = dims_of(pb);
    cli_rng     rng;
    if (cli_m3_generate(pb, seed, d.syms, !d.reduce, fill_input, &d, &rng, err, errlen)) return -1;
    if (d.kind == OP_BWD_FWD && cli_param_int(pb, "consistent")) return consistent_decays(pb, &d, &rng, err, errlen);
    if (d.kind == OP_BWD && (cli_param_int(pb, "saved_y") || cli_param_int(pb, "saved_states"))) {
        const mdims dv = dims_of(pb); /* NCS from the cu_seqlens just drawn */
        return saved_results(pb, &dv, err, errlen);
    }
    return 0;
}

/* `run`: bwd_fwd's chunk (semantic there: the decays are chunk-local) from segsum (B,H,nc,C,C);
 * div = N / A when not given. */
static int mimo_bind(cli_problem * pb, char * err, size_t errlen) {
    if (cli_bind_shapes(pb, NULL, NULL, err, errlen)) return -1;
    cli_bind_flags(pb);
    const int ci = cli_key_index(pb->op->shape_keys, "chunk");
    if (ci >= 0 && !pb->shape[ci].given && cli_has_arg(pb, "segsum") && cli_present(pb, "segsum"))
        cli_set_shape(pb, "chunk", cli_dim(pb, "segsum", 3));
    const int       di = cli_key_index(pb->op->param_keys, "div");
    const ssm_tensor ang = cli_view(pb, "angles");
    const int64_t   A = ang.shape[ang.ndim - 1];
    if (di >= 0 && !pb->param[di].given && A > 0 && cli_shape(pb, "N") % A == 0)
        cli_set_param_int(pb, "div", cli_shape(pb, "N") / A);
    return 0;
}

static int mimo_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const mdims d = dims_of(pb);
    return cli_m3_alloc(pb, f64, d.syms, !d.reduce, err, errlen);
}

/* ---- cost models (spec §7) ----------------------------------------------------------------- */

static double e_act(const cli_problem * pb) {
    return (double)ssm_dtype_size(pb->dtype);
}

/* Tokens the chunked algorithm processes, each sequence padded to a whole number of
 * chunks: B·nc·C, or Σ ceil(len_i/C)·C with cu_seqlens. */
static double padded_tokens(const cli_problem * pb, const mdims * d) {
    const ssm_tensor cu = cli_has_arg(pb, "cu_seqlens") ? cli_view(pb, "cu_seqlens") : (ssm_tensor){0};
    if (!cu.data) return (double)(d->B * d->nc * d->C);
    double        n  = 0.0;
    const int64_t ns = cli_numel(cu.ndim, cu.shape) - 1;
    for (int64_t i = 0; i < ns; ++i) {
        const int64_t len = (int64_t)(cli_get(&cu, cli_offset(&cu, i + 1)) - cli_get(&cu, cli_offset(&cu, i)));
        n += (double)(((len + d->C - 1) / d->C) * d->C);
    }
    return n;
}

/* Spec §7 mimo_fwd / mimo_bwd_fwd FLOPs per token and head at chunk C:
 * 4·C·R²·N (full qkdot L×L gemm + intra scores) + 2·C·R²·P (scores·U) + 4·R·N·P (inter +
 * state update) + 2·R²·P (diagonal). */
static double fwd_flops_per_token(const mdims * d) {
    const double C = (double)d->C, R = (double)d->R, N = (double)d->N, P = (double)d->P;
    return 4.0 * C * R * R * N + 2.0 * C * R * R * P + 4.0 * R * N * P + 2.0 * R * R * P;
}

/* Counted at chunk= (the CPU forward and bwd_fwd tile with exactly that chunk). */
static double fwd_flops(const cli_problem * pb) {
    const mdims d = dims_of(pb);
    return padded_tokens(pb, &d) * (double)d.H * fwd_flops_per_token(&d);
}

/* Spec §7 bytes, each tensor once; q, k read once (not once per value head). */
static double head_param_bytes(const cli_problem * pb, const mdims * d) {
    const double H = (double)d->H, R = (double)d->R;
    double       n = 4.0 * H * R * (2.0 * (double)d->N + (double)d->P); /* q_bias, k_bias, mimo_v */
    n += 4.0 * H * R * (double)d->P * (double)(cli_param_or(pb, "has_z", 0) + cli_param_or(pb, "reduce_o", 0));
    n += 4.0 * H * (double)cli_param_or(pb, "has_d", 0);
    return n;
}

static double out_elems(const mdims * d) {
    return (double)(d->B * d->S * d->H * d->P) * (d->reduce ? 1.0 : (double)d->R);
}

static double state_bytes_per_set(const mdims * d) {
    return 4.0 * (double)(d->NS * d->H) * (double)(d->P * d->N + d->R * d->N + d->P + d->A);
}

/* ======================================================================================
 * mamba3_mimo_bwd_fwd (spec §3.4, §4.1, §5.1)
 * ====================================================================================== */

static const cli_key bf_shape[] = {
    CLI_KEY_INT("B", "1", "batch"), CLI_KEY_INT("S", "35", "sequence length (any; a partial last chunk reads 0)"),
    CLI_KEY_INT("H", "2", "value heads (H % G == 0)"), CLI_KEY_INT("G", "1", "q/k heads"),
    CLI_KEY_INT("R", "4", "MIMO rank"), CLI_KEY_INT("N", "64", "state size = q/k width (even, a multiple of div)"),
    CLI_KEY_INT("P", "64", "value width"),
    CLI_KEY_INT("chunk", "16", "chunk size C (semantic here: the decays are chunk-local; C*R <= 128)"), CLI_KEY_END,
};
static const cli_key bf_param[] = {
    P_DIV, P_HAS_D, P_HAS_Z, P_REDUCE,
    CLI_KEY_INT("consistent", "0",
                "da_cs, da_cs_rev, segsum from adt = -dt*U(0,1) (0: independent N(0,1)/8, as the seed)"),
    CLI_KEY_END,
};
/* The seed's branches (reduce_o, z, d), GQA with batch 2, tails and its (N,P,R,C) list. */
static const char * const bf_cases[] = {
    "B=1,S=32,H=1,G=1,R=4,N=64,P=64,chunk=16;", "B=1,S=32,H=1,G=1,R=4,N=64,P=64,chunk=16;has_z=0,has_d=0",
    "B=1,S=32,H=1,G=1,R=4,N=64,P=64,chunk=16;reduce_o=0,has_z=0",
    "B=1,S=32,H=1,G=1,R=4,N=64,P=64,chunk=16;reduce_o=0,has_d=0", "B=1,S=32,H=2,G=1,R=4,N=64,P=64,chunk=16;",
    "B=2,S=20,H=4,G=2,R=4,N=64,P=64,chunk=16;", "B=1,S=13,H=1,G=1,R=3,N=64,P=64,chunk=6;",
    "B=1,S=32,H=1,G=1,R=4,N=32,P=64,chunk=16;has_z=0,has_d=0",
    "B=1,S=32,H=1,G=1,R=4,N=128,P=32,chunk=16;has_z=0,has_d=0",
    "B=1,S=32,H=1,G=1,R=4,N=64,P=128,chunk=16;has_z=0,has_d=0",
    "B=1,S=16,H=1,G=1,R=8,N=128,P=64,chunk=8;has_z=0,has_d=0",
    "B=1,S=12,H=1,G=1,R=3,N=64,P=64,chunk=6;has_z=0,has_d=0",
    "B=1,S=64,H=1,G=1,R=1,N=64,P=64,chunk=64;has_z=0,has_d=0",
    "B=2,S=21,H=4,G=2,R=2,N=32,P=32,chunk=8;div=2,reduce_o=0", "B=1,S=37,H=2,G=1,R=2,N=32,P=16,chunk=8;consistent=1",
    "B=1,S=1,H=1,G=1,R=1,N=2,P=1,chunk=1;div=2", NULL,
};

CLI_DEFINE_CALL(mamba3_mimo_bwd_fwd, ssm_mamba3_mimo_params, params_of)

/* Spec §7 bwd_fwd: the forward's reads (q, k, v, z, θ f32, da_cs/da_cs_rev/dt f32, trap,
 * segsum f32, parameters) + dout; writes states (their dtype: fp32 here, upstream bf16),
 * qk_dot, dz and the per-row dmimo_o / dmimo_z. */
static double bf_bytes(const cli_problem * pb) {
    const mdims  d = dims_of(pb);
    const double e = e_act(pb), BH = (double)(d.B * d.H), T = (double)(d.B * d.S);
    const double z = (double)cli_param_int(pb, "has_z");
    double       n = 2.0 * T * (double)(d.R * d.G * d.N) * e + T * (double)(d.H * d.P) * e * (1.0 + z);
    n += 4.0 * T * (double)(d.H * d.A) + 12.0 * BH * (double)d.S + e * BH * (double)d.S;
    n += 4.0 * BH * (double)(d.nc * d.C * d.C) + head_param_bytes(pb, &d);
    n += out_elems(&d) * e; /* dout */
    const ssm_tensor st = cli_view(pb, "states");
    const double     es = st.data ? (double)ssm_dtype_size((ssm_dtype)st.dtype) : 4.0;
    n += es * BH * (double)(d.nc * d.N * d.P) + e * BH * (double)(d.S * d.R * d.R) + z * T * (double)(d.H * d.P) * e;
    n += 4.0 * BH * (double)(d.R * d.P) * ((double)cli_param_int(pb, "reduce_o") + z);
    return n;
}

CLI_OP(mamba3_mimo_bwd_fwd, "MIMO backward phase 1, seed interface: states, qk_dot, dz, dmimo_o/z (mimo 3.4)", bf_shape,
       bf_param, CLI_BENCH("B=1,S=8192,H=16,G=1,R=4,N=64,P=64,chunk=16", "has_d=1,has_z=1,reduce_o=1", "bf16"),
       bf_cases, CLI_FNS(mimo_validate, mimo_generate, mimo_bind, mimo_alloc), NULL, fwd_flops, bf_bytes);

/* ======================================================================================
 * mamba3_mimo (spec §3.3, §3.7)
 * ====================================================================================== */

static const cli_key fwd_shape[] = {
    K_B, CLI_KEY_INT("S", "37", "sequence length (tokens per batch row)"), K_H, K_G, K_R, K_N, K_P, K_CHUNK,
    CLI_KEY_END,
};
static const cli_key fwd_param[] = {
    P_DIV, P_HAS_D, P_HAS_Z, P_REDUCE, P_FUSED, P_FUSED2, P_NORM_W, P_EPS, P_STATES, CLI_KEY_HAS_FINAL, CLI_KEY_NSEQ,
    P_SAVE_Y, P_SAVE_S, CLI_KEY_END,
};
static const char * const fwd_cases[] = {
    "B=2,S=37,H=4,G=2,R=2,N=32,P=16,chunk=8;",
    "B=1,S=40,H=2,G=1,R=1,N=64,P=32,chunk=16;reduce_o=0,has_z=0,has_states=0",
    "B=1,S=35,H=2,G=1,R=2,N=32,P=16,chunk=16;div=2,reduce_o=0", "B=1,S=24,H=2,G=1,R=4,N=32,P=32,chunk=8;fused=1",
    "B=1,S=20,H=2,G=1,R=2,N=16,P=16,chunk=8;fused=1,has_norm_weight=0,has_states=0",
    "B=1,S=36,H=2,G=1,R=2,N=32,P=32,chunk=8;nseq=3",
    "B=2,S=20,H=4,G=2,R=4,N=32,P=16,chunk=8;has_d=0,has_z=0,has_states=0,has_final=0",
    "B=1,S=13,H=2,G=1,R=3,N=16,P=16,chunk=6;", "B=1,S=1,H=1,G=1,R=1,N=2,P=1,chunk=1;div=2",
    "B=1,S=36,H=2,G=1,R=2,N=32,P=16,chunk=8;nseq=3,fused=1,save_y=1,save_states=1", NULL,
};

CLI_DEFINE_CALL(mamba3_mimo, ssm_mamba3_mimo_params, params_of)

/* The top-level forward's compulsory traffic: spec §7's mimo_fwd reads with adt + dt in
 * place of da_cs, da_cs_rev, dt and segsum (formed inside, never stored), raw angles fp32,
 * out, and the four states in (has_states) and out (has_final). */
static double fwd_bytes(const cli_problem * pb) {
    const mdims  d = dims_of(pb);
    const double e = e_act(pb), T = (double)(d.B * d.S), BH = (double)(d.B * d.H);
    const double z = (double)cli_param_int(pb, "has_z");
    double       n = 2.0 * T * (double)(d.R * d.G * d.N) * e + T * (double)(d.H * d.P) * e * (1.0 + z);
    n += 4.0 * T * (double)(d.H * d.A) + (8.0 + e) * BH * (double)d.S + head_param_bytes(pb, &d);
    n += out_elems(&d) * e;
    n += state_bytes_per_set(&d) * (double)(cli_param_int(pb, "has_states") + cli_param_int(pb, "has_final"));
    if (cli_param_int(pb, "save_y")) n += 4.0 * T * (double)(d.H * d.R * d.P); /* pregate_y written */
    if (cli_param_int(pb, "save_states")) n += 4.0 * (double)(d.NCS * d.H * d.N * d.P); /* chunk_states written */
    return n;
}

CLI_OP(mamba3_mimo, "MIMO forward: raw angles, adt, rank R, mimo_o/z, fused norm, states, varlen (mimo 3.7)", fwd_shape,
       fwd_param,
       CLI_BENCH("B=1,S=8192,H=16,G=1,R=4,N=64,P=64,chunk=16",
                 "has_d=1,has_z=1,reduce_o=1,has_states=0,has_final=0", "bf16"),
       fwd_cases, CLI_FNS(mimo_validate, mimo_generate, mimo_bind, mimo_alloc), NULL, fwd_flops, fwd_bytes);

/* ======================================================================================
 * mamba3_mimo_bwd (spec §3.5, §3.6, §4)
 * ====================================================================================== */

static const cli_key bwd_shape[] = {
    CLI_KEY_INT("B", "1", "batch (1 with nseq)"),
    CLI_KEY_INT("S", "29", "sequence length (the reference backward is token-recurrent float64)"),
    CLI_KEY_INT("H", "2", "value heads (H % G == 0)"), CLI_KEY_INT("G", "1", "q/k heads"), K_R,
    CLI_KEY_INT("N", "16", "state size = q/k width (even, a multiple of div)"), K_P, K_CHUNK, CLI_KEY_END,
};
static const cli_key bwd_param[] = {
    P_DIV, P_HAS_D, P_HAS_Z, P_REDUCE, P_FUSED, P_FUSED2, P_NORM_W, P_EPS, P_STATES, CLI_KEY_HAS_DFINAL, CLI_KEY_NSEQ,
    P_SAVED_Y, P_SAVED_S, CLI_KEY_END,
};
static const char * const bwd_cases[] = {
    "B=2,S=21,H=4,G=2,R=2,N=16,P=8,chunk=8;",
    "B=1,S=24,H=2,G=1,R=1,N=32,P=16,chunk=16;reduce_o=0,has_z=0,has_states=0,has_dfinal=0",
    "B=1,S=19,H=2,G=1,R=2,N=16,P=16,chunk=8;div=2,reduce_o=0",
    "B=1,S=16,H=2,G=1,R=4,N=16,P=16,chunk=8;fused=1,has_states=0,has_dfinal=0",
    "B=1,S=24,H=2,G=1,R=2,N=16,P=8,chunk=8;nseq=3",
    "B=2,S=20,H=4,G=2,R=4,N=16,P=8,chunk=8;has_d=0,has_z=0,has_states=0,has_dfinal=0",
    "B=1,S=13,H=1,G=1,R=3,N=16,P=16,chunk=6;", "B=1,S=1,H=1,G=1,R=1,N=2,P=1,chunk=1;div=2",
    "B=1,S=24,H=2,G=1,R=4,N=16,P=16,chunk=8;nseq=3,fused=1,saved_y=1,saved_states=1",
    "B=2,S=21,H=2,G=1,R=2,N=16,P=8,chunk=8;saved_states=1", NULL,
};

CLI_DEFINE_CALL(mamba3_mimo_bwd, ssm_mamba3_mimo_params, params_of)

/* Spec §7 mimo_bwd_bwd per token and head, 6·C·R²·N + 6·C·R²·P + 8·R·N·P + 2·R²·P + 4·R²·N,
 * plus the forward the backward recomputes (fwd_flops_per_token), both at chunk=. The CPU
 * backward tiles with its own chunk of 64/R tokens whatever chunk= says (64 fused rows; 16
 * tokens at R = 4, the bench default, where the two agree). */
static double bwd_flops(const cli_problem * pb) {
    const mdims  d = dims_of(pb);
    const double C = (double)d.C, R = (double)d.R, N = (double)d.N, P = (double)d.P;
    const double bb = 6.0 * C * R * R * N + 6.0 * C * R * R * P + 8.0 * R * N * P + 2.0 * R * R * P + 4.0 * R * R * N;
    return padded_tokens(pb, &d) * (double)d.H * (bb + fwd_flops_per_token(&d));
}

/* Every input read once (the forward's, dout, dfinal_*) and every gradient written once:
 * dq, dk, dv, dz in the compute dtype (dq, dk per q/k head after the group reduction),
 * dadt, ddt, dangles fp32, dtrap act, the parameter gradients and the state gradients. */
static double bwd_bytes(const cli_problem * pb) {
    const mdims  d = dims_of(pb);
    const double e = e_act(pb), T = (double)(d.B * d.S), BH = (double)(d.B * d.H);
    const double z = (double)cli_param_int(pb, "has_z");
    double       n = 2.0 * 2.0 * T * (double)(d.R * d.G * d.N) * e;      /* q, k, dq, dk */
    n += 2.0 * T * (double)(d.H * d.P) * e * (1.0 + z);                     /* v, z, dv, dz */
    n += 2.0 * 4.0 * T * (double)(d.H * d.A);                               /* angles, dangles */
    n += 2.0 * (8.0 + e) * BH * (double)d.S;                                /* adt, dt, trap + grads */
    n += 2.0 * head_param_bytes(pb, &d) + out_elems(&d) * e;               /* params + grads, dout */
    const double copies = 2.0 * (double)cli_param_int(pb, "has_states") + (double)cli_param_int(pb, "has_dfinal");
    if (cli_param_int(pb, "saved_y")) n += 4.0 * T * (double)(d.H * d.R * d.P); /* pregate_y read */
    if (cli_param_int(pb, "saved_states")) n += 4.0 * (double)(d.NCS * d.H * d.N * d.P); /* chunk_states read */
    return n + copies * state_bytes_per_set(&d);
}

CLI_OP(mamba3_mimo_bwd,
       "every gradient of mamba3_mimo incl. the initial states, recomputing the forward (mimo 3.5-3.6, 4)", bwd_shape,
       bwd_param,
       CLI_BENCH("B=1,S=8192,H=16,G=1,R=4,N=64,P=64,chunk=16",
                 "has_d=1,has_z=1,reduce_o=1,has_states=0,has_dfinal=0", "bf16"),
       bwd_cases, CLI_FNS(mimo_validate, mimo_generate, mimo_bind, mimo_alloc), NULL, bwd_flops, bwd_bytes);

/* ======================================================================================
 * mamba3_mimo_step (spec §3.9)
 * ====================================================================================== */

static const cli_key step_shape[] = {
    CLI_KEY_INT("B", "3", "batch rows (one token each)"), K_H, K_G, K_R, K_N, K_P, CLI_KEY_END,
};
static const cli_key step_param[] = {
    P_DIV, P_HAS_D, P_HAS_Z, P_REDUCE, P_FUSED, P_FUSED2, P_NORM_W, P_EPS, CLI_KEY_SLOTS, CLI_KEY_IN_PLACE_POOLS,
    CLI_KEY_END,
};
static const char * const step_cases[] = {
    "B=3,H=4,G=2,R=2,N=32,P=16;", "B=2,H=4,G=4,R=3,N=32,P=32;reduce_o=0,has_z=0,slots=5",
    "B=4,H=4,G=1,R=4,N=16,P=8;has_d=0,in_place=0,slots=6", "B=2,H=2,G=1,R=2,N=32,P=32;reduce_o=0",
    "B=2,H=2,G=1,R=4,N=32,P=32;fused=1", "B=2,H=4,G=2,R=2,N=64,P=32;div=2", "B=16,H=4,G=1,R=4,N=64,P=64;",
    "B=1,H=1,G=1,R=1,N=2,P=1;div=2,in_place=0", NULL,
};

CLI_DEFINE_CALL(mamba3_mimo_step, ssm_mamba3_mimo_params, params_of)

/* Spec §7 decode step per (b, h): ≈ 6·R·P·N + P·N FLOP (γ and β rank-1 updates, output
 * contraction, decay). */
static double step_flops(const cli_problem * pb) {
    const mdims  d = dims_of(pb);
    const double R = (double)d.R, N = (double)d.N, P = (double)d.P;
    return (double)(d.B * d.H) * (6.0 * R * P * N + P * N);
}

/* The state traffic that bounds decode: the four states of the B rows read and written,
 * 2·e_state·B·H·(P·N + R·N + P + A); GB/s is measured on this alone. */
static double step_bytes(const cli_problem * pb) {
    const mdims      d  = dims_of(pb);
    const ssm_tensor st = cli_view(pb, "ssm_state");
    const double     e  = st.data ? (double)ssm_dtype_size((ssm_dtype)st.dtype) : 4.0;
    return 2.0 * e * (double)(d.B * d.H) * (double)(d.P * d.N + d.R * d.N + d.P + d.A);
}

CLI_OP(mamba3_mimo_step, "MIMO decode: one token per row, four state pools updated in place (mimo 3.9)", step_shape,
       step_param, CLI_BENCH("B=1,H=16,G=1,R=4,N=64,P=64", NULL, "bf16"), step_cases,
       CLI_FNS(mimo_validate, mimo_generate, mimo_bind, mimo_alloc), NULL, step_flops, step_bytes);
