/*
 * cli-mamba3-siso.c — CLI operator-table entries of Mamba-3 SISO (spec mamba3_siso.md):
 * mamba3_angle_cumsum (+ _bwd), mamba3_siso_fwd, mamba3_siso, mamba3_siso_bwd,
 * mamba3_siso_step. Shape keys B,S,H,Hq,K,V,A,chunk (DESIGN §7); params has_d, has_z,
 * has_states, has_final, has_dfinal, nseq (varlen), and for the step slots, in_place.
 *
 * The forwards take save_y / save_states (they also write pregate_y / chunk_states, F32), the
 * backward saved_y / saved_states (it also takes the pregate_y / chunk_states a CPU forward writes
 * for the generated inputs; chunk_states needs chunk a multiple of 32 there).
 *
 * mamba3_siso and mamba3_siso_bwd also take angles_f32 (raw angles in f32 whatever the compute
 * dtype: upstream's and the models' mix; the values drawn are the same).
 *
 * Inputs follow the upstream test generators (spec §4.3): q, k = rms-normalised N(0,1)
 * rows; v, z N(0,1); dt = exp(U(ln 1e-3, ln 0.1)); adt = −U(1,16)·dt; trap U(0,1) logits;
 * biases, raw angles, d and the four states N(0,1). mamba3_siso_fwd takes cumulative
 * angles: the angle_cumsum of raw ones (reference backend, fp32), as the combined forward
 * feeds it. Activations (q, k, v, z, trap, raw angles, dout) are in the compute dtype;
 * adt, dt, biases, d, cumulative angles and states fp32. Incoming gradients N(0,1).
 *
 * The reference backward is O(L²) per sequence: the check shapes keep S small.
 */
#define _XOPEN_SOURCE 700

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"


#define K_B     CLI_KEY_INT("B", "2", "batch (1 with nseq)")
#define K_S     CLI_KEY_INT("S", "100", "sequence length (tokens per batch row)")
#define K_H     CLI_KEY_INT("H", "4", "V-heads")
#define K_HQ    CLI_KEY_INT("Hq", "2", "Q/K heads (H % Hq == 0)")
#define K_K     CLI_KEY_INT("K", "32", "q/k head dim = state columns (even)")
#define K_V     CLI_KEY_INT("V", "16", "value head dim = state rows")
#define K_A     CLI_KEY_INT("A", "8", "rotated pairs (A <= K/2)")
#define K_CHUNK CLI_KEY_INT("chunk", "32", "chunk size C (not semantic; backends may tile their own)")

#define P_HAS_D      CLI_KEY_INT("has_d", "1", "D skip term d (H)")
#define P_HAS_Z      CLI_KEY_INT("has_z", "1", "gate z: out = y*silu(z)")
#define P_HAS_STATES CLI_KEY_INT("has_states", "1", "initial states in (all of them)")
#define P_SAVE_Y     CLI_KEY_INT("save_y", "0", "also write pregate_y (B,S,H,V) F32, the input of the backward")
#define P_SAVED_Y \
    CLI_KEY_INT("saved_y", "0", "the forward's pregate_y as input (written by a CPU forward on the same inputs)")
#define P_SAVE_S \
    CLI_KEY_INT("save_states", "0", "also write chunk_states (NCS,H,V,K) F32, the input of the backward")
#define P_SAVED_S \
    CLI_KEY_INT("saved_states", "0", "the forward's chunk_states as input (written by a CPU forward on the same inputs)")
#define P_ANGLES_F32 CLI_KEY_INT("angles_f32", "0", "raw angles in f32 whatever --dtype (upstream's and the models' mix)")

static ssm_mamba3_params params_of(const cli_problem * pb) {
    ssm_mamba3_params p;
    ssm_mamba3_params_init(&p);
    if (cli_key_index(pb->op->shape_keys, "chunk") >= 0) p.chunk_size = cli_shape(pb, "chunk");
    return p;
}

/* ---- dimensions and tensor shapes by argument name ---------------------------------- */

typedef struct m3dims {
    int64_t B, S, H, Hq, K, V, A, NS;
    int64_t NCS;      /* rows of chunk_states: chunks of all sequences */
    int     step;     /* one token per row: no S axis */
    cli_sym syms[CLI_MAX_SYMS]; /* the schema's dimension symbols: the shape keys, NS (slots) */
} m3dims;

static int is_step(const cli_problem * pb) {
    return cli_key_index(pb->op->shape_keys, "S") < 0;
}

static m3dims dims_of(const cli_problem * pb) {
    m3dims d = {cli_shape_or(pb, "B", 1),  cli_shape_or(pb, "S", 1), cli_shape_or(pb, "H", 1),
                cli_shape_or(pb, "Hq", 1), cli_shape_or(pb, "K", 2), cli_shape_or(pb, "V", 1),
                cli_shape_or(pb, "A", 1),  0,                        0,           is_step(pb), {{NULL, 0}}};
    d.NS = cli_state_rows(pb, d.B);
    d.NCS = cli_chunk_rows(pb, d.B, d.S, cli_shape_or(pb, "chunk", 1));
    const cli_sym derived[] = {{"NS", d.NS}, {"slots", d.NS}, {"NCS", d.NCS}, {"rows", d.B}, {NULL, 0}}; /* rows: the step's batch rows */
    cli_syms(pb, derived, d.syms, CLI_MAX_SYMS);
    return d;
}



static double e_act(const cli_problem * pb) {
    return (double)ssm_dtype_size(pb->dtype);
}

/* ---- validation (usage errors; the library checks the rest) --------------------------- */

static int m3_validate(const cli_problem * pb, char * err, size_t errlen) {
    static const char * const bools[] = {"has_d",      "has_z",    "has_states", "has_final", "has_dfinal",
                                         "in_place",   "angles_f32", "save_y",   "saved_y",    "save_states",
                                         "saved_states", NULL};
    if (cli_check_shape_positive(pb, err, errlen) || cli_check_bools(pb, bools, err, errlen)) return -1;
    const m3dims  d    = dims_of(pb);
    return cli_check_nseq_slots(pb, d.B, err, errlen);
}

/* ---- input generation ------------------------------------------------------------------- */

/* Each (token, head) row of q/k scaled to unit rms, as the layer's RMSNorm leaves it. */
static void rms_normalise_rows(const ssm_tensor * t, int64_t row_len, cli_rng * rng) {
    const int64_t n  = cli_numel(t->ndim, t->shape);
    double *      row = malloc((size_t)row_len * sizeof *row);
    if (!row) {
        cli_gen_normal(t, rng);
        return;
    }
    for (int64_t r = 0; r < n / row_len; ++r) {
        double ss = 0.0;
        for (int64_t i = 0; i < row_len; ++i) {
            row[i] = cli_rng_normal(rng);
            ss += row[i] * row[i];
        }
        const double scale = 1.0 / sqrt(ss / (double)row_len + 1e-12);
        for (int64_t i = 0; i < row_len; ++i) cli_set(t, r * row_len + i, row[i] * scale);
    }
    free(row);
}

static void fill_input(cli_problem * pb, const void * dims, const char * name, const ssm_tensor * t, cli_rng * rng) {
    const m3dims * d = dims;
    const int64_t  n = cli_numel(t->ndim, t->shape);
    (void)pb;
    if (strcmp(name, "q") == 0 || strcmp(name, "k") == 0) {
        rms_normalise_rows(t, d->K, rng);
    } else if (strcmp(name, "dt") == 0) {
        for (int64_t i = 0; i < n; ++i) cli_set(t, i, cli_log_uniform(rng, 1e-3, 0.1));
    } else if (strcmp(name, "adt") == 0) {
        cli_gen_uniform(t, rng, 1.0, 16.0); /* scaled by −dt once dt exists (adt_from_dt) */
    } else if (strcmp(name, "trap") == 0) {
        cli_gen_uniform(t, rng, 0.0, 1.0);
    } else if (strcmp(name, "cu_seqlens") == 0) {
        cli_gen_cu_seqlens(t, d->S, d->NS, rng);
    } else if (strcmp(name, "state_batch_indices") == 0) {
        cli_gen_slot_indices(t, d->NS, rng);
    } else {
        cli_gen_normal(t, rng);
    }
}

/* Cumulative angles θ for mamba3_siso_fwd from the raw ones just drawn: the reference
 * angle_cumsum (fp32 out), varlen-aware, with no initial angle state. */
static int cumulate_angles(cli_problem * pb, char * err, size_t errlen) {
    cli_buf *     raw = cli_arg_buf(pb, "angles");
    cli_buf       cum;
    ssm_context * ctx = NULL;
    memset(&cum, 0, sizeof cum);
    if (cli_buf_alloc(&cum, SSM_DTYPE_F32, raw->mem_ndim, raw->mem_shape) != 0) {
        snprintf(err, errlen, "%s: out of memory", pb->op->name);
        return -1;
    }
    ssm_status st = cli_context_create(SSM_BACKEND_REF, 1, &ctx);
    if (st == SSM_STATUS_OK) {
        const ssm_mamba3_params      p = params_of(pb);
        ssm_mamba3_angle_cumsum_args a;
        memset(&a, 0, sizeof a);
        a.angles        = raw->view;
        a.dt            = cli_view(pb, "dt");
        a.cu_seqlens    = cli_view(pb, "cu_seqlens");
        a.angles_cumsum = cum.view;
        st              = ssm_mamba3_angle_cumsum(ctx, &p, &a);
    }
    if (st != SSM_STATUS_OK) {
        snprintf(err, errlen, "making inputs: reference mamba3_angle_cumsum failed: %s: %s", ssm_status_string(st),
                 ssm_context_last_error(ctx));
        ssm_context_free(ctx);
        cli_buf_free(&cum);
        return -1;
    }
    ssm_context_free(ctx);
    cli_buf_free(raw);
    *raw = cum;
    return 0;
}

/* 1 when the operator has the angles_f32 key and it is set. */
static int angles_f32(const cli_problem * pb) {
    return cli_key_index(pb->op->param_keys, "angles_f32") >= 0 && cli_param_int(pb, "angles_f32") != 0;
}

/* The raw angles, drawn in the compute dtype, widened to an f32 buffer of the same view (the
 * values are those drawn, so the inputs are the same problem at either setting). */
static int widen_angles(cli_problem * pb, char * err, size_t errlen) {
    cli_buf * raw = cli_arg_buf(pb, "angles");
    if (raw->mem == NULL || raw->view.dtype == SSM_DTYPE_F32) return 0;
    cli_buf wide;
    memset(&wide, 0, sizeof wide);
    if (cli_buf_alloc(&wide, SSM_DTYPE_F32, raw->mem_ndim, raw->mem_shape) != 0) {
        snprintf(err, errlen, "%s: out of memory", pb->op->name);
        return -1;
    }
    const int64_t n = cli_numel(raw->mem_ndim, raw->mem_shape);
    ssm_tensor    from = raw->view, to = wide.view; /* the memories as flat rows */
    from.data = raw->mem, from.ndim = 1, from.shape[0] = n, from.strides[0] = 1;
    to.ndim = 1, to.shape[0] = n, to.strides[0] = 1;
    for (int64_t i = 0; i < n; ++i) cli_set(&to, i, cli_get(&from, i));
    /* the same view (strides in elements) over the f32 memory */
    const ptrdiff_t off = ((const char *)raw->view.data - (const char *)raw->mem) / (ptrdiff_t)ssm_dtype_size(raw->view.dtype);
    to = raw->view;
    to.dtype = SSM_DTYPE_F32;
    to.data = (float *)wide.mem + off;
    wide.view = to;
    cli_buf_free(raw);
    *raw = wide;
    return 0;
}

static ssm_status run_siso_cpu(ssm_context * ctx, const cli_problem * pb, void * args) {
    const ssm_mamba3_params p = params_of(pb);
    return ssm_mamba3_siso(ctx, &p, args);
}

/* saved_y=1 / saved_states=1 (the backward): pregate_y / chunk_states as a CPU forward on the
 * generated inputs writes them (F32). */
static int saved_results(cli_problem * pb, char * err, size_t errlen) {
    const ssm_tensor     v = cli_view(pb, "v");
    const m3dims         d = dims_of(pb); /* NCS from the cu_seqlens just drawn */
    const int64_t        cshp[4] = {d.NCS, d.H, d.V, d.K};
    ssm_mamba3_siso_args fa;
    const cli_m3_saved   s = {"mamba3_siso", &fa, sizeof fa, &fa.out, &fa.pregate_y, &fa.chunk_states, 4, 4,
                              v.shape, cshp, v.shape, run_siso_cpu};
    return cli_m3_saved_results(pb, &s, err, errlen);
}

static int m3_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    const m3dims d = dims_of(pb);
    cli_rng      rng;
    if (cli_m3_generate(pb, seed, d.syms, 0, fill_input, &d, &rng, err, errlen)) return -1;
    if (angles_f32(pb) && widen_angles(pb, err, errlen)) return -1;
    if (strcmp(pb->op->name, "mamba3_siso_bwd") == 0 && (cli_param_int(pb, "saved_y") || cli_param_int(pb, "saved_states")))
        return saved_results(pb, err, errlen);
    /* siso_fwd takes θ (fp32 "angles" argument), the other ops raw rates. */
    if (strcmp(pb->op->name, "mamba3_siso_fwd") == 0) return cumulate_angles(pb, err, errlen);
    return 0;
}

/* `run`: the chunk is not in the files (64 unless given). */
static int m3_bind(cli_problem * pb, char * err, size_t errlen) {
    const int ci = cli_key_index(pb->op->shape_keys, "chunk");
    if (ci >= 0 && !pb->shape[ci].given) cli_set_shape(pb, "chunk", 64);
    if (cli_bind_shapes(pb, NULL, NULL, err, errlen)) return -1;
    cli_bind_flags(pb);
    return 0;
}

static int m3_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const m3dims d = dims_of(pb);
    return cli_m3_alloc(pb, f64, d.syms, 0, err, errlen);
}

/* ======================================================================================
 * mamba3_angle_cumsum and its backward (spec §2.1, §2.2, §6.6)
 * ====================================================================================== */

static const cli_key angle_shape[] = {K_B, K_S, K_H, K_A, K_CHUNK, CLI_KEY_END};
static const cli_key angle_param[] = {
    CLI_KEY_INT("has_states", "1", "initial angle state in (angle_state)"), CLI_KEY_HAS_FINAL, CLI_KEY_NSEQ,
    CLI_KEY_END,
};
static const char * const angle_cases[] = {
    "B=2,S=70,H=4,A=8,chunk=32;", "B=1,S=96,H=4,A=16,chunk=64;has_states=0", "B=1,S=50,H=2,A=4,chunk=16;nseq=4",
    "B=1,S=1,H=1,A=1,chunk=1;has_final=0", NULL,
};

CLI_DEFINE_CALL(mamba3_angle_cumsum, ssm_mamba3_params, params_of)

static double tokens_of(const m3dims * d) {
    return (double)(d->B * d->S);
}

/* Spec §7: O1 ≈ H·T·A·(1 tanh + ~6 FLOP); bytes T·H·(A·e_raw + 4 + A·e_θ) + a state in/out. */
static double angle_flops(const cli_problem * pb) {
    const m3dims d = dims_of(pb);
    return 6.0 * tokens_of(&d) * (double)(d.H * d.A);
}

static double angle_bytes(const cli_problem * pb) {
    const m3dims d = dims_of(pb);
    const double e = e_act(pb);
    double       n = tokens_of(&d) * (double)d.H * ((double)d.A * 2.0 * e + 4.0);
    n += 4.0 * (double)(d.NS * d.H * d.A) * (double)(cli_param_int(pb, "has_states") + cli_param_int(pb, "has_final"));
    return n;
}

CLI_OP(mamba3_angle_cumsum, "theta = wrap(angle_state + cumsum(pi*tanh(angles)*dt)) per sequence (siso 2.1)",
       angle_shape, angle_param, CLI_BENCH("B=1,S=2048,H=32,A=32,chunk=64", NULL, NULL), angle_cases,
       CLI_FNS(m3_validate, m3_generate, m3_bind, m3_alloc), NULL, angle_flops, angle_bytes);

static const cli_key angleb_param[] = {
    CLI_KEY_INT("has_states", "1", "dangle_state output (the forward had an angle_state)"), CLI_KEY_HAS_DFINAL,
    CLI_KEY_NSEQ, CLI_KEY_END,
};
static const char * const angleb_cases[] = {
    "B=2,S=70,H=4,A=8,chunk=32;", "B=1,S=96,H=4,A=16,chunk=64;has_states=0,has_dfinal=0",
    "B=1,S=50,H=2,A=4,chunk=16;nseq=4", "B=1,S=1,H=1,A=1,chunk=1;", NULL,
};

CLI_DEFINE_CALL(mamba3_angle_cumsum_bwd, ssm_mamba3_params, params_of)

/* Spec §7: O2 ≈ H·T·A·(1 tanh + ~8 FLOP); bytes T·H·(A·e_θ + 2A·e_raw + 8). */
static double angleb_flops(const cli_problem * pb) {
    const m3dims d = dims_of(pb);
    return 8.0 * tokens_of(&d) * (double)(d.H * d.A);
}

static double angleb_bytes(const cli_problem * pb) {
    const m3dims d = dims_of(pb);
    return tokens_of(&d) * (double)d.H * ((double)d.A * 3.0 * e_act(pb) + 8.0);
}

CLI_OP(mamba3_angle_cumsum_bwd, "gradients of mamba3_angle_cumsum: dangles, ddt, dangle_state (siso 2.2, 6.6)",
       angle_shape, angleb_param, CLI_BENCH("B=1,S=2048,H=32,A=32,chunk=64", NULL, NULL), angleb_cases,
       CLI_FNS(m3_validate, m3_generate, m3_bind, m3_alloc), NULL, angleb_flops, angleb_bytes);

/* ======================================================================================
 * mamba3_siso_fwd, mamba3_siso (spec §2.3, §2.4)
 * ====================================================================================== */

static const cli_key siso_shape[] = {K_B, K_S, K_H, K_HQ, K_K, K_V, K_A, K_CHUNK, CLI_KEY_END};
static const cli_key siso_param[] = {P_HAS_D,      P_HAS_Z,  P_HAS_STATES, CLI_KEY_HAS_FINAL,
                                     CLI_KEY_NSEQ, P_SAVE_Y, P_SAVE_S,     CLI_KEY_END};
static const cli_key comb_param[] = {P_HAS_D,      P_HAS_Z,      P_HAS_STATES, CLI_KEY_HAS_FINAL,
                                     CLI_KEY_NSEQ, P_ANGLES_F32, P_SAVE_Y,     P_SAVE_S, CLI_KEY_END};
static const char * const siso_cases[] = {
    "B=2,S=77,H=4,Hq=2,K=32,V=16,A=8,chunk=32;",
    "B=1,S=64,H=4,Hq=4,K=16,V=8,A=8,chunk=16;has_d=0,has_z=0,has_states=0",
    "B=2,S=50,H=4,Hq=1,K=32,V=16,A=8,chunk=16;has_final=0,save_y=1", "B=1,S=60,H=4,Hq=2,K=16,V=16,A=4,chunk=16;nseq=4",
    "B=1,S=40,H=2,Hq=1,K=64,V=32,A=16,chunk=64;has_z=0", "B=1,S=1,H=1,Hq=1,K=2,V=1,A=1,chunk=1;",
    "B=1,S=150,H=2,Hq=1,K=32,V=16,A=8,chunk=64;nseq=3,save_states=1", NULL,
};


CLI_DEFINE_CALL(mamba3_siso_fwd, ssm_mamba3_params, params_of)

/* Spec §7 counts F_fwd ≈ H·T·(4KV + 2C(K+V)) at the chunk C. The chunk is not semantic and
 * the CPU backend tiles at its own (32 tokens) whatever chunk= says, so, as mamba2_scan
 * does, only the chunk-independent part H·T·4KV (Q̂·Sᵀ and the state update) is counted:
 * GFLOP/s is a lower bound on the arithmetic sustained. */
static double fwd_flops(const cli_problem * pb) {
    const m3dims d = dims_of(pb);
    return 4.0 * tokens_of(&d) * (double)d.H * (double)(d.K * d.V);
}

/* Spec §7 minimal fused traffic: T·[2·Hq·K·e + H·V·(e·(1+[z]) + e_out) + H·(2·4 + e_trap)
 * + H·A·e_ang] + H·(2K+1)·4 + NS·H·(4KV + 4K + 4V + 4A·[angle state])·([init] + [final]),
 * + 4·T·H·V with save_y (pregate_y), + 4·NCS·H·V·K with save_states (chunk_states). */
static double fwd_bytes_of(const cli_problem * pb, double e_ang, int angle_state) {
    const m3dims d = dims_of(pb);
    const double e = e_act(pb), T = tokens_of(&d), H = (double)d.H, K = (double)d.K, V = (double)d.V;
    const double z = (double)cli_param_int(pb, "has_z");
    double       n = T * (2.0 * (double)d.Hq * K * e + H * V * (e * (1.0 + z) + e) + H * (8.0 + e) +
                    H * (double)d.A * e_ang);
    n += H * (2.0 * K + 1.0) * 4.0;
    n += 4.0 * T * H * V * (double)cli_param_or(pb, "save_y", 0); /* pregate_y written */
    n += 4.0 * (double)d.NCS * H * K * V * (double)cli_param_or(pb, "save_states", 0); /* chunk_states written */
    const double states = (double)(cli_param_int(pb, "has_states") + cli_param_int(pb, "has_final"));
    n += (double)d.NS * H * (4.0 * K * V + 4.0 * K + 4.0 * V + (angle_state ? 4.0 * (double)d.A : 0.0)) * states;
    return n;
}

static double fwd_bytes(const cli_problem * pb) {
    return fwd_bytes_of(pb, 4.0, 0); /* cumulative angles are fp32 */
}

CLI_OP(mamba3_siso_fwd, "SISO chunked core forward, cumulative angles in; states, varlen (siso 2.3)", siso_shape,
       siso_param,
       CLI_BENCH("B=1,S=2048,H=32,Hq=1,K=128,V=64,A=32,chunk=64", "has_d=1,has_z=1,has_states=0,has_final=0", NULL),
       siso_cases, CLI_FNS(m3_validate, m3_generate, m3_bind, m3_alloc), NULL, fwd_flops, fwd_bytes);


CLI_DEFINE_CALL(mamba3_siso, ssm_mamba3_params, params_of)

/* The angle cumsum it fuses (6·H·T·A) on top of the core's chunk-independent count. */
static double siso_flops(const cli_problem * pb) {
    const m3dims d = dims_of(pb);
    return fwd_flops(pb) + 6.0 * tokens_of(&d) * (double)(d.H * d.A);
}

static double siso_bytes(const cli_problem * pb) {
    return fwd_bytes_of(pb, angles_f32(pb) ? 4.0 : e_act(pb), 1); /* raw angles in the compute dtype or f32 */
}

CLI_OP(mamba3_siso, "SISO combined forward: raw angles, four states in/out, varlen (siso 2.4, 2.7)", siso_shape,
       comb_param,
       CLI_BENCH("B=1,S=2048,H=32,Hq=1,K=128,V=64,A=32,chunk=64", "has_d=1,has_z=1,has_states=0,has_final=0", NULL),
       siso_cases, CLI_FNS(m3_validate, m3_generate, m3_bind, m3_alloc), NULL, siso_flops, siso_bytes);

/* ======================================================================================
 * mamba3_siso_bwd (spec §2.5, §6)
 * ====================================================================================== */

static const cli_key bwd_shape[] = {
    K_B, CLI_KEY_INT("S", "64", "sequence length (the reference backward is O(S^2))"), K_H, K_HQ, K_K, K_V, K_A,
    K_CHUNK, CLI_KEY_END,
};
static const cli_key bwd_param[] = {P_HAS_D,      P_HAS_Z,      P_HAS_STATES, CLI_KEY_HAS_DFINAL,
                                    CLI_KEY_NSEQ, P_ANGLES_F32, P_SAVED_Y,    P_SAVED_S, CLI_KEY_END};
static const char * const bwd_cases[] = {
    "B=2,S=37,H=4,Hq=2,K=16,V=8,A=4,chunk=16;", "B=1,S=48,H=2,Hq=1,K=32,V=16,A=8,chunk=16;has_states=0,has_dfinal=0",
    "B=1,S=40,H=4,Hq=2,K=16,V=16,A=8,chunk=16;has_z=0,has_d=0", "B=1,S=30,H=2,Hq=2,K=8,V=8,A=2,chunk=8;nseq=4",
    "B=1,S=1,H=1,Hq=1,K=2,V=1,A=1,chunk=1;", "B=1,S=70,H=4,Hq=2,K=32,V=16,A=8,chunk=16;nseq=3,saved_y=1",
    "B=1,S=150,H=2,Hq=1,K=32,V=16,A=8,chunk=64;nseq=3,saved_states=1,saved_y=1", NULL,
};

CLI_DEFINE_CALL(mamba3_siso_bwd, ssm_mamba3_params, params_of)

/* Spec §7: F_bwd ≈ H·T·(10KV + C(6K + 4V)) at the chunk C. The CPU backward tiles at its
 * own chunk (64 tokens) whatever chunk= says, so only the chunk-independent H·T·10KV (the
 * five C×K×V products per chunk) is counted, a lower bound like fwd_flops. The forward
 * recompute is not counted either. */
static double bwd_flops(const cli_problem * pb) {
    const m3dims d = dims_of(pb);
    return 10.0 * tokens_of(&d) * (double)d.H * (double)(d.K * d.V);
}

/* Every input read once and every gradient written once: per token 4·Hq·K·e (q, k, dq,
 * dk) + H·V·e·(3 + 2[z]) (v, dout, dv, z, dz) + 24·H (adt, dt, trap and their gradients)
 * + 2·H·A·e (angles, dangles); the states and their gradients (2 + [dfinal]) × NS·H·4·(KV
 * + K + V + A) when given; the biases and their gradients 16·H·K; 4·T·H·V with saved_y, 4·NCS·H·V·K
 * with saved_states. */
static double bwd_bytes(const cli_problem * pb) {
    const m3dims d = dims_of(pb);
    const double e = e_act(pb), H = (double)d.H, K = (double)d.K, V = (double)d.V, A = (double)d.A;
    const double z = (double)cli_param_int(pb, "has_z");
    const double ea = angles_f32(pb) ? 4.0 : e; /* angles and dangles */
    double n = tokens_of(&d) * (4.0 * (double)d.Hq * K * e + H * V * e * (3.0 + 2.0 * z) + 24.0 * H + 2.0 * H * A * ea);
    const double copies = 2.0 * (double)cli_param_int(pb, "has_states") + (double)cli_param_int(pb, "has_dfinal");
    n += copies * (double)d.NS * H * 4.0 * (K * V + K + V + A) + 16.0 * H * K;
    n += 4.0 * tokens_of(&d) * H * V * (double)cli_param_int(pb, "saved_y"); /* pregate_y read */
    n += 4.0 * (double)d.NCS * H * K * V * (double)cli_param_int(pb, "saved_states"); /* chunk_states read */
    return n;
}

CLI_OP(mamba3_siso_bwd, "every gradient of mamba3_siso, recomputing the forward (siso 2.5, 6)", bwd_shape, bwd_param,
       CLI_BENCH("B=1,S=2048,H=32,Hq=1,K=128,V=64,A=32,chunk=64", "has_d=1,has_z=1,has_states=0,has_dfinal=0", NULL),
       bwd_cases, CLI_FNS(m3_validate, m3_generate, m3_bind, m3_alloc), NULL, bwd_flops, bwd_bytes);

/* ======================================================================================
 * mamba3_siso_step (spec §2.6)
 * ====================================================================================== */

static const cli_key step_shape[] = {
    CLI_KEY_INT("B", "3", "batch rows (one token each)"), K_H, K_HQ, K_K, K_V, K_A, CLI_KEY_END,
};
static const cli_key step_param[] = {P_HAS_D, P_HAS_Z, CLI_KEY_SLOTS, CLI_KEY_IN_PLACE_POOLS, CLI_KEY_END};
static const char * const step_cases[] = {
    "B=3,H=4,Hq=2,K=32,V=16,A=8;", "B=2,H=4,Hq=4,K=16,V=32,A=8;has_d=0,slots=5",
    "B=4,H=4,Hq=1,K=16,V=8,A=4;has_z=0,in_place=0,slots=6", "B=16,H=4,Hq=1,K=64,V=32,A=16;",
    "B=1,H=1,Hq=1,K=2,V=1,A=1;in_place=0", NULL,
};

CLI_DEFINE_CALL(mamba3_siso_step, ssm_mamba3_params, params_of)

/* Spec §7 step per (b,h): ≈ 7KV + 2K + 16A + 6V FLOP. */
static double step_flops(const cli_problem * pb) {
    const m3dims d = dims_of(pb);
    const double K = (double)d.K, V = (double)d.V, A = (double)d.A;
    return (double)(d.B * d.H) * (7.0 * K * V + 2.0 * K + 16.0 * A + 6.0 * V);
}

/* The state traffic that bounds decode: the four states read and written,
 * 2·e_state·B·H·(KV + K + V + A); GB/s is measured on this alone. */
static double step_bytes(const cli_problem * pb) {
    const m3dims     d  = dims_of(pb);
    const ssm_tensor st = cli_view(pb, "ssm_state");
    const double     e  = st.data ? (double)ssm_dtype_size((ssm_dtype)st.dtype) : 4.0;
    return 2.0 * e * (double)(d.B * d.H) * (double)(d.K * d.V + d.K + d.V + d.A);
}

CLI_OP(mamba3_siso_step, "SISO decode: one token per row, four state pools updated in place (siso 2.6)", step_shape,
       step_param, CLI_BENCH("B=1,H=32,Hq=1,K=128,V=64,A=32", NULL, NULL), step_cases,
       CLI_FNS(m3_validate, m3_generate, m3_bind, m3_alloc), NULL, step_flops, step_bytes);
