/*
 * cli-mamba2-train.c — CLI operator-table entries of Mamba-2 training and serving:
 * mamba2_scan_bwd (spec mamba2_ssd.md §2.7) and the decode step mamba2_step (§2.9).
 *
 * mamba2_scan_bwd takes mamba2_scan's shape keys, params and inputs (drawn by
 * cli-mamba2.c's generator: trained-layer ranges) plus dout and dfinal_states ~ N(0,1).
 * mamba2_step draws its inputs the same way, one token per row; the state pool is
 * N(0,1) in fp32 and is updated in place by default (final_state borrows the pool, and
 * `run` writes the updated pool as final_state.npy). per_head=1 passes the per-head form
 * a Mamba-2 layer uses: a (H), dt (B,H), dt_bias (H), d (H) seen through stride-0 views as
 * (H,P,N), (B,H,P), (H,P), (H,P).
 */
#define _XOPEN_SOURCE 700

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"



static double e_of(const ssm_tensor * t) {
    return (double)ssm_dtype_size((ssm_dtype)t->dtype);
}

/* ======================================================================================
 * mamba2_scan_bwd (spec §2.7)
 * ====================================================================================== */

static const cli_key bwd_shape[] = {
    CLI_KEY_INT("B", "2", "batch"), CLI_KEY_INT("S", "200", "sequence length (tokens per batch row)"),
    CLI_KEY_INT("H", "4", "heads"), CLI_KEY_INT("P", "32", "head dimension"), CLI_KEY_INT("N", "32", "state size"),
    CLI_KEY_INT("G", "2", "groups sharing B and C (H % G == 0)"), CLI_KEY_INT("chunk", "64", "chunk size Q"),
    CLI_KEY_END,
};
static const cli_key bwd_param[] = {
    CLI_M2_KEY_HAS_D, CLI_M2_KEY_HAS_Z, CLI_M2_KEY_HAS_DT_BIAS, CLI_M2_KEY_SOFTPLUS, CLI_M2_KEY_DT_LIMIT,
    CLI_KEY_INT("has_init", "1", "initial states input (and the dinitial_states gradient)"),
    CLI_KEY_INT("has_dfinal", "1", "dfinal_states incoming gradient"),
    CLI_KEY_INT("seq_idx", "0", "seq_idx with this many sequences per row (0 = off)"), CLI_KEY_NSEQ, CLI_KEY_END,
};
static const char * const bwd_cases[] = {
    "B=2,S=77,H=4,P=16,N=32,G=2,chunk=32;has_d=2,dt_limit=0:0.08",
    "B=1,S=64,H=4,P=8,N=16,G=4,chunk=16;has_z=0,has_init=0,has_dfinal=0",
    "B=1,S=33,H=2,P=8,N=8,G=1,chunk=16;has_d=0,has_z=0,has_dt_bias=0,dt_softplus=0,has_init=0",
    "B=2,S=70,H=4,P=8,N=16,G=2,chunk=16;seq_idx=3,dt_limit=0.01:0.05", "B=1,S=60,H=4,P=8,N=16,G=2,chunk=16;nseq=4",
    "B=1,S=1,H=1,P=1,N=1,G=1,chunk=1;", NULL,
};

static int64_t bwd_nstates(const cli_problem * pb) {
    const int64_t nseq = cli_param_int(pb, "nseq");
    return nseq > 0 ? nseq : cli_shape(pb, "B");
}

static int bwd_validate(const cli_problem * pb, char * err, size_t errlen) {
    static const char * const bools[] = {"has_dfinal", NULL};
    if (cli_mamba2_validate(pb, err, errlen) != 0 || cli_check_bools(pb, bools, err, errlen) != 0) return -1;
    return 0;
}

static int bwd_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    if (cli_mamba2_scan_inputs(pb, seed, err, errlen) != 0) return -1;
    const int64_t B = cli_shape(pb, "B"), S = cli_shape(pb, "S"), H = cli_shape(pb, "H"), P = cli_shape(pb, "P"),
                  N = cli_shape(pb, "N");
    cli_rng rng;
    cli_rng_seed(&rng, seed ^ 0x5bd1e995u); /* the incoming gradients: a stream of their own */
    const int64_t oshp[4] = {B, S, H, P};
    if (cli_gen_arg(pb, "dout", 4, oshp, err, errlen) != 0) return -1;
    cli_gen_normal(&cli_arg_buf(pb, "dout")->view, &rng);
    if (cli_param_int(pb, "has_dfinal")) {
        const int64_t fshp[4] = {bwd_nstates(pb), H, P, N};
        if (cli_gen_arg(pb, "dfinal_states", 4, fshp, err, errlen) != 0) return -1;
        cli_gen_normal(&cli_arg_buf(pb, "dfinal_states")->view, &rng);
    }
    return 0;
}

/* Every gradient the inputs allow. */
static int bwd_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const int64_t B = cli_shape(pb, "B"), S = cli_shape(pb, "S"), H = cli_shape(pb, "H"), P = cli_shape(pb, "P"),
                  N = cli_shape(pb, "N"), G = cli_shape(pb, "G");
    const int64_t xshp[4] = {B, S, H, P}, dtshp[3] = {B, S, H}, hshp[1] = {H}, gshp[4] = {B, S, G, N};
    const int64_t ishp[4] = {bwd_nstates(pb), H, P, N};
    if (cli_out_arg(pb, "dx", f64, 4, xshp, err, errlen) || cli_out_arg(pb, "ddt", f64, 3, dtshp, err, errlen) ||
        cli_out_arg(pb, "da", f64, 1, hshp, err, errlen) || cli_out_arg(pb, "db", f64, 4, gshp, err, errlen) ||
        cli_out_arg(pb, "dc", f64, 4, gshp, err, errlen))
        return -1;
    if (cli_present(pb, "d")) {
        const ssm_tensor d = cli_view(pb, "d");
        if (cli_out_arg(pb, "dd", f64, d.ndim, d.shape, err, errlen)) return -1;
    }
    if (cli_present(pb, "z") && cli_out_arg(pb, "dz", f64, 4, xshp, err, errlen)) return -1;
    if (cli_present(pb, "dt_bias") && cli_out_arg(pb, "ddt_bias", f64, 1, hshp, err, errlen)) return -1;
    if (cli_present(pb, "initial_states") && cli_out_arg(pb, "dinitial_states", f64, 4, ishp, err, errlen)) return -1;
    return 0;
}

CLI_DEFINE_CALL(mamba2_scan_bwd, ssm_mamba2_params, cli_mamba2_params)

/* Like mamba2_scan's count (cli-mamba2.c), the chunk is not semantic and backends tile it
 * their own way, so only the chunk-independent terms of the spec's §5.2 backward total
 * (10·B·S·H·P·N + 6·B·S·Q·H·P + 6·B·S·Q·G·N + 6·X) are counted: 10·B·S·H·P·N + 6·X, X =
 * B·NC·H·P·N. The §5.2 total, like this count, leaves out the forward recompute: GFLOP/s
 * is a lower bound on the arithmetic sustained. */
static double bwd_flops(const cli_problem * pb) {
    const double B = (double)cli_shape(pb, "B"), S = (double)cli_shape(pb, "S"), Q = (double)cli_shape(pb, "chunk");
    const double HPN = (double)(cli_shape(pb, "H") * cli_shape(pb, "P") * cli_shape(pb, "N"));
    const double NC  = ceil(S / Q);
    return 10.0 * B * S * HPN + 6.0 * B * NC * HPN;
}

/* Spec §5.2 backward bytes: (11e [+6e with z])·B·S·H·P + (11e+16)·B·S·G·N + 24·B·S·G·Q +
 * (24 + 5e_s)·X + (3e_dt + 100 + Q/8)·B·S·H, with e_s = 4 (ssmops keeps states fp32). */
static double bwd_bytes(const cli_problem * pb) {
    const double B = (double)cli_shape(pb, "B"), S = (double)cli_shape(pb, "S"), H = (double)cli_shape(pb, "H");
    const double P = (double)cli_shape(pb, "P"), N = (double)cli_shape(pb, "N"), G = (double)cli_shape(pb, "G");
    const double Q = (double)cli_shape(pb, "chunk"), X = B * ceil(S / Q) * H * P * N;
    const double e = (double)ssm_dtype_size(pb->dtype), e_s = 4.0;
    double       n = 11.0 * e * B * S * H * P + (11.0 * e + 16.0) * B * S * G * N + 24.0 * B * S * G * Q +
               (24.0 + 5.0 * e_s) * X + (3.0 * e + 100.0 + Q / 8.0) * B * S * H;
    if (cli_param_int(pb, "has_z")) n += 6.0 * e * B * S * H * P;
    return n;
}

CLI_OP(mamba2_scan_bwd, "every gradient of mamba2_scan, recomputing the forward (docs/ops/mamba2.md)", bwd_shape, bwd_param,
       CLI_BENCH("B=1,S=2048,H=48,P=64,N=128,G=1,chunk=256",
                 "has_d=1,has_z=0,has_dt_bias=1,dt_softplus=1,has_init=0,has_dfinal=0", NULL),
       bwd_cases, CLI_FNS(bwd_validate, bwd_generate, cli_mamba2_bind, bwd_alloc), NULL, bwd_flops, bwd_bytes);

/* ======================================================================================
 * mamba2_step (spec §2.9)
 * ====================================================================================== */

static const cli_key step_shape[] = {
    CLI_KEY_INT("B", "4", "batch rows (one token each)"), CLI_KEY_INT("H", "8", "heads"),
    CLI_KEY_INT("P", "32", "head dimension"), CLI_KEY_INT("N", "32", "state size"),
    CLI_KEY_INT("G", "2", "groups sharing B and C (H % G == 0)"), CLI_KEY_END,
};
static const cli_key step_param[] = {
    CLI_KEY_INT("per_head", "1", "1: a (H), dt (B,H), dt_bias (H), d (H) as stride-0 views (a Mamba-2 layer); 0: full"),
    CLI_KEY_INT("has_d", "1", "D skip term"), CLI_M2_KEY_HAS_Z, CLI_M2_KEY_HAS_DT_BIAS, CLI_M2_KEY_SOFTPLUS,
    CLI_M2_KEY_DT_LIMIT, CLI_KEY_SLOTS,
    CLI_KEY_INT("in_place", "1", "final_state is the state pool itself (updated in place)"), CLI_KEY_END,
};
static const char * const step_cases[] = {
    "B=3,H=4,P=8,N=32,G=4;per_head=0,has_z=0,slots=5", "B=4,H=4,P=16,N=16,G=2;slots=6",
    "B=2,H=6,P=16,N=64,G=3;in_place=0,slots=4",
    "B=2,H=4,P=8,N=16,G=1;per_head=0,has_d=0,has_dt_bias=0,dt_softplus=0,dt_limit=0.01:0.05,in_place=0",
    "B=1,H=2,P=64,N=128,G=1;dt_limit=0:0.08", "B=1,H=1,P=1,N=1,G=1;", NULL,
};

static int step_validate(const cli_problem * pb, char * err, size_t errlen) {
    static const char * const bools[] = {"per_head", "has_d", "has_z", "has_dt_bias", "dt_softplus", "in_place", NULL};
    if (cli_check_shape_positive(pb, err, errlen) != 0 || cli_check_bools(pb, bools, err, errlen) != 0) return -1;
    return cli_check_slots(pb, cli_shape(pb, "B"), err, errlen);
}

static int64_t step_slots(const cli_problem * pb) {
    const int64_t slots = cli_param_int(pb, "slots");
    return slots > 0 ? slots : cli_shape(pb, "B");
}

/* The per-head form: 1-D (H) a/dt_bias/d and 2-D (B,H) dt seen with stride 0 over P and N. */
static void step_per_head_views(cli_problem * pb) {
    const int64_t H = cli_shape(pb, "H"), P = cli_shape(pb, "P"), N = cli_shape(pb, "N");
    cli_buf *     a = cli_arg_buf(pb, "a");
    if (a->mem && a->mem_ndim == 1) {
        const int64_t shape[3] = {H, P, N}, strides[3] = {1, 0, 0};
        cli_buf_set_view(a, 3, shape, strides);
    }
    cli_buf * dt = cli_arg_buf(pb, "dt");
    if (dt->mem && dt->mem_ndim == 2) {
        const int64_t shape[3] = {dt->mem_shape[0], H, P}, strides[3] = {H, 1, 0};
        cli_buf_set_view(dt, 3, shape, strides);
    }
    const char * per_p[] = {"dt_bias", "d"};
    for (int i = 0; i < 2; ++i) {
        cli_buf * buf = cli_arg_buf(pb, per_p[i]);
        if (buf->mem && buf->mem_ndim == 1) {
            const int64_t shape[2] = {H, P}, strides[2] = {1, 0};
            cli_buf_set_view(buf, 2, shape, strides);
        }
    }
}

static double inv_softplus(double y) {
    return log(expm1(y));
}

/* Raw dt such that the processed dt softplus(dt + dt_bias) is log-uniform in [1e-3, 1e-1],
 * as in cli-mamba2.c; per head or per (head, channel). */
static void step_fill_dt(cli_problem * pb, cli_rng * rng) {
    const int     softplus = (int)cli_param_int(pb, "dt_softplus");
    const int64_t H = cli_shape(pb, "H"), P = cli_shape(pb, "P"), B = cli_shape(pb, "B");
    const int64_t per      = cli_param_int(pb, "per_head") ? H : H * P; /* dt_bias elements */
    cli_buf *     bias_buf = cli_arg_buf(pb, "dt_bias");
    const cli_buf *  dtb   = cli_arg_buf(pb, "dt");
    const int64_t    dshp[2] = {B, per}; /* dt's memory: (B, H) or (B, H·P) */
    const ssm_tensor dt    = ssm_tensor_make(dtb->mem, (ssm_dtype)dtb->view.dtype, 2, dshp);
    for (int64_t i = 0; i < per; ++i) {
        const double target = cli_log_uniform(rng, 1e-3, 1e-1);
        const double bias   = bias_buf->mem ? (softplus ? inv_softplus(target) : 0.5 * target) : 0.0;
        if (bias_buf->mem) cli_set(&bias_buf->view, i, bias); /* contiguous memory, index = offset */
        for (int64_t b = 0; b < B; ++b) {
            const double t   = cli_log_uniform(rng, 1e-3, 1e-1);
            const double pre = softplus ? inv_softplus(t) : t;
            cli_set(&dt, b * per + i, pre - cli_round(SSM_DTYPE_F32, bias));
        }
    }
}

static int step_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    const int64_t B = cli_shape(pb, "B"), H = cli_shape(pb, "H"), P = cli_shape(pb, "P"), N = cli_shape(pb, "N"),
                  G = cli_shape(pb, "G");
    const int     per_head = (int)cli_param_int(pb, "per_head");
    cli_rng       rng;
    cli_rng_seed(&rng, seed);
    const int64_t xshp[3] = {B, H, P}, gshp[3] = {B, G, N}, sshp[4] = {step_slots(pb), H, P, N};
    const int64_t ashp[3] = {H, P, N}, hpshp[2] = {H, P}, dtshp[3] = {B, H, P};
    if (cli_gen_arg(pb, "x", 3, xshp, err, errlen) || cli_gen_arg(pb, "b", 3, gshp, err, errlen) ||
        cli_gen_arg(pb, "c", 3, gshp, err, errlen) || cli_gen_arg(pb, "state", 4, sshp, err, errlen) ||
        cli_gen_arg(pb, "a", per_head ? 1 : 3, ashp, err, errlen) ||
        cli_gen_arg(pb, "dt", per_head ? 2 : 3, dtshp, err, errlen))
        return -1;
    cli_gen_normal(&cli_arg_buf(pb, "x")->view, &rng);
    cli_gen_normal(&cli_arg_buf(pb, "b")->view, &rng);
    cli_gen_normal(&cli_arg_buf(pb, "c")->view, &rng);
    cli_gen_normal(&cli_arg_buf(pb, "state")->view, &rng);
    const ssm_tensor * a  = &cli_arg_buf(pb, "a")->view;
    const int64_t      na = cli_numel(a->ndim, a->shape);
    for (int64_t i = 0; i < na; ++i) cli_set(a, i, -cli_log_uniform(&rng, 1.0, 16.0));
    if (cli_param_int(pb, "has_d")) {
        if (cli_gen_arg(pb, "d", per_head ? 1 : 2, hpshp, err, errlen)) return -1;
        cli_gen_normal(&cli_arg_buf(pb, "d")->view, &rng);
    }
    if (cli_param_int(pb, "has_z")) {
        if (cli_gen_arg(pb, "z", 3, xshp, err, errlen)) return -1;
        cli_gen_normal(&cli_arg_buf(pb, "z")->view, &rng);
    }
    if (cli_param_int(pb, "has_dt_bias") && cli_gen_arg(pb, "dt_bias", per_head ? 1 : 2, hpshp, err, errlen)) return -1;
    step_fill_dt(pb, &rng);
    if (cli_param_int(pb, "slots") > 0) {
        const int64_t ishp[1] = {B};
        if (cli_gen_arg(pb, "state_batch_indices", 1, ishp, err, errlen)) return -1;
        cli_gen_slot_indices(&cli_arg_buf(pb, "state_batch_indices")->view, step_slots(pb), &rng);
    }
    step_per_head_views(pb);
    return 0;
}

static int step_bind(cli_problem * pb, char * err, size_t errlen) {
    const int32_t a_ndim = cli_view(pb, "a").ndim == 1 ? 1 : 3; /* per-head (H) or full (H,P,N) */
    if (cli_need_ndim(pb, "a", a_ndim, err, errlen) || cli_bind_shapes(pb, "x b state", NULL, err, errlen)) return -1;
    cli_bind_flags(pb);
    cli_set_param_int(pb, "per_head", a_ndim == 1);
    cli_set_param_int(pb, "has_d", cli_present(pb, "d")); /* a switch here: (H) or (H,P) by per_head */
    step_per_head_views(pb);
    return 0;
}

static int step_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const int64_t oshp[3] = {cli_shape(pb, "B"), cli_shape(pb, "H"), cli_shape(pb, "P")};
    if (cli_out_arg(pb, "out", f64, 3, oshp, err, errlen)) return -1;
    if (cli_param_int(pb, "in_place")) return cli_in_place(pb, "final_state", "state", f64, err, errlen);
    const ssm_tensor st = cli_view(pb, "state");
    return cli_out_arg(pb, "final_state", f64, 4, st.shape, err, errlen);
}

CLI_DEFINE_CALL(mamba2_step, ssm_mamba2_params, cli_mamba2_params)

/* Spec §5.4 decode: 5·B·H·P·N FLOPs (decay, outer product, add, output dot). */
static double step_flops(const cli_problem * pb) {
    return 5.0 * (double)(cli_shape(pb, "B") * cli_shape(pb, "H")) * (double)(cli_shape(pb, "P") * cli_shape(pb, "N"));
}

/* The state traffic that dominates decode: 2·e_state·B·H·P·N (read + write of the rows the
 * batch uses); GB/s is measured on this alone. */
static double step_bytes(const cli_problem * pb) {
    const ssm_tensor st = cli_view(pb, "state");
    const double     e  = st.data ? e_of(&st) : 4.0;
    const double     BH = (double)(cli_shape(pb, "B") * cli_shape(pb, "H"));
    return 2.0 * e * BH * (double)(cli_shape(pb, "P") * cli_shape(pb, "N"));
}

CLI_OP(mamba2_step, "decode: one token per row, state pool updated in place, state_batch_indices (docs/ops/mamba2.md)",
       step_shape, step_param, CLI_BENCH("B=1,H=48,P=64,N=128,G=1", NULL, NULL), step_cases,
       CLI_FNS(step_validate, step_generate, step_bind, step_alloc), NULL, step_flops, step_bytes);
