/*
 * cli-layer.c — CLI operator-table entries of the rest of a Mamba-2 layer (spec
 * mamba2_ssd.md §6): causal_conv1d, causal_conv1d_bwd, causal_conv1d_update,
 * rmsnorm_gated, rmsnorm_gated_bwd.
 *
 * Inputs: activations (x, z, dout, conv states) N(0,1) in the compute dtype; conv weight
 * and bias U(−1/√W, 1/√W) fp32 (PyTorch's Conv1d initialisation for a depthwise filter);
 * the norm's weight 1 + 0.1·N(0,1) fp32 (trained around its initial 1).
 *
 * channel_last=1 (default) lays x, out, dout and dx out as Mamba-2 does, (B, S, D) in
 * memory, and passes the logical (B, D, S) view with strides (S·D, 1, D); the conv state
 * of the update is (slots, L, D) in memory, seen as (slots, D, L). `run` files hold the
 * memory order (like layout=cann of mamba2_chunk_state): (B, S, D) unless channel_last=0.
 */
#define _XOPEN_SOURCE 700

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"


#define K_B            CLI_KEY_INT("B", "2", "batch")
#define K_S            CLI_KEY_INT("S", "300", "sequence length")
#define K_D            CLI_KEY_INT("D", "64", "channels (conv_dim = d_inner + 2*G*N in Mamba-2)")
#define K_W            CLI_KEY_INT("W", "4", "filter width (d_conv)")
#define P_HAS_BIAS     CLI_KEY_INT("has_bias", "1", "conv bias input")
#define P_ACTIVATION   CLI_KEY_INT("activation", "1", "0 none, 1 silu")
#define P_SEQ_IDX      CLI_KEY_INT("seq_idx", "0", "seq_idx with this many sequences per row (0 = off; no states then)")
#define P_CHANNEL_LAST \
    CLI_KEY_INT("channel_last", "1", "x/out/dout/dx (B,S,D) in memory (and run files) seen as (B,D,S), as Mamba-2")

static double e_act(const cli_problem * pb) {
    return (double)ssm_dtype_size(pb->dtype);
}

/* (B, S, D) memory seen as (B, D, S) when channel_last; else the memory is (B, D, S). */
static void conv_view(cli_problem * pb, const char * name) {
    cli_buf * buf = cli_arg_buf(pb, name);
    if (!buf->mem || !cli_param_int(pb, "channel_last") || buf->mem_ndim != 3) return;
    const int64_t B = buf->mem_shape[0], S = buf->mem_shape[1], D = buf->mem_shape[2];
    const int64_t shape[3] = {B, D, S}, strides[3] = {S * D, 1, D};
    cli_buf_set_view(buf, 3, shape, strides);
}

/* Memory shape of a (B, D, S) activation. */
static void conv_mem_shape(const cli_problem * pb, int64_t B, int64_t D, int64_t S, int64_t shape[3]) {
    const int cl = (int)cli_param_int(pb, "channel_last");
    shape[0]     = B;
    shape[1]     = cl ? S : D;
    shape[2]     = cl ? D : S;
}

static int gen_act(cli_problem * pb, const char * name, int64_t B, int64_t D, int64_t S, cli_rng * rng, char * err,
                   size_t errlen) {
    int64_t mem[3];
    conv_mem_shape(pb, B, D, S, mem);
    if (cli_gen_arg(pb, name, 3, mem, err, errlen)) return -1;
    conv_view(pb, name);
    cli_gen_normal(&cli_arg_buf(pb, name)->view, rng);
    return 0;
}

static int out_act(cli_problem * pb, const char * name, int f64, int64_t B, int64_t D, int64_t S, char * err,
                   size_t errlen) {
    int64_t mem[3];
    conv_mem_shape(pb, B, D, S, mem);
    if (cli_out_arg(pb, name, f64, 3, mem, err, errlen)) return -1;
    conv_view(pb, name);
    return 0;
}

static int conv_validate(const cli_problem * pb, char * err, size_t errlen) {
    static const char * const bools[] = {"has_bias", "activation", "has_init", "has_final", "has_dfinal",
                                         "channel_last", "in_place", NULL};
    if (cli_check_shape_positive(pb, err, errlen) || cli_check_bools(pb, bools, err, errlen)) return -1;
    const int64_t nseq = cli_param_or(pb, "seq_idx", 0), S = cli_shape_or(pb, "S", 1);
    if (nseq < 0 || nseq > S) {
        snprintf(err, errlen, "%s: seq_idx=%lld sequences per row must be in [0, S=%lld]", pb->op->name,
                 (long long)nseq, (long long)S);
        return -1;
    }
    if (nseq > 0 && (cli_param_or(pb, "has_init", 0) || cli_param_or(pb, "has_final", 0) ||
                     cli_param_or(pb, "has_dfinal", 0))) {
        snprintf(err, errlen, "%s: seq_idx=%lld needs has_init=0 and has_final=0/has_dfinal=0 (no states with seq_idx)",
                 pb->op->name, (long long)nseq);
        return -1;
    }
    return cli_check_slots(pb, cli_shape(pb, "B"), err, errlen);
}

static ssm_conv1d_params conv_params(const cli_problem * pb) {
    ssm_conv1d_params p;
    ssm_conv1d_params_init(&p);
    p.activation = (int32_t)cli_param_int(pb, "activation");
    return p;
}

/* weight (D, W), bias (D): U(−1/√W, 1/√W), fp32. */
static int gen_filter(cli_problem * pb, int64_t D, int64_t W, cli_rng * rng, char * err, size_t errlen) {
    const double  bound   = 1.0 / sqrt((double)W);
    const int64_t wshp[2] = {D, W}, dshp[1] = {D};
    if (cli_gen_arg(pb, "weight", 2, wshp, err, errlen)) return -1;
    cli_gen_uniform(&cli_arg_buf(pb, "weight")->view, rng, -bound, bound);
    if (cli_param_int(pb, "has_bias")) {
        if (cli_gen_arg(pb, "bias", 1, dshp, err, errlen)) return -1;
        cli_gen_uniform(&cli_arg_buf(pb, "bias")->view, rng, -bound, bound);
    }
    return 0;
}

/* The forward inputs common to causal_conv1d and its backward. */
static int gen_conv_inputs(cli_problem * pb, cli_rng * rng, char * err, size_t errlen) {
    const int64_t B = cli_shape(pb, "B"), S = cli_shape(pb, "S"), D = cli_shape(pb, "D"), W = cli_shape(pb, "W");
    if (gen_act(pb, "x", B, D, S, rng, err, errlen) || gen_filter(pb, D, W, rng, err, errlen)) return -1;
    if (cli_param_int(pb, "has_init") && W > 1) {
        const int64_t ishp[3] = {B, D, W - 1};
        if (cli_gen_arg(pb, "initial_states", 3, ishp, err, errlen)) return -1;
        cli_gen_normal(&cli_arg_buf(pb, "initial_states")->view, rng);
    }
    const int64_t nseq = cli_param_int(pb, "seq_idx");
    if (nseq > 0) {
        const int64_t sshp[2] = {B, S};
        if (cli_gen_arg(pb, "seq_idx", 2, sshp, err, errlen)) return -1;
        cli_gen_seq_idx(&cli_arg_buf(pb, "seq_idx")->view, nseq, rng);
    }
    return 0;
}

/* `run`: x (memory order) and weight give B, S, D, W. */
static int bind_conv_inputs(cli_problem * pb, char * err, size_t errlen) {
    if (cli_need_ndim(pb, "x", 3, err, errlen)) return -1;
    conv_view(pb, "x");
    if (cli_bind_shapes(pb, NULL, "batch=B", err, errlen)) return -1;
    cli_bind_flags(pb);
    return 0;
}

/* ======================================================================================
 * causal_conv1d (spec §6.2)
 * ====================================================================================== */

static const cli_key conv_shape[] = {K_B, K_S, K_D, K_W, CLI_KEY_END};
static const cli_key conv_param[] = {
    P_HAS_BIAS, P_ACTIVATION, CLI_KEY_INT("has_init", "1", "initial_states input (B,D,W-1)"),
    CLI_KEY_INT("has_final", "1", "final_states output (B,D,W-1)"), P_SEQ_IDX, P_CHANNEL_LAST, CLI_KEY_END,
};
static const char * const conv_cases[] = {
    "B=2,S=77,D=48,W=4;", "B=1,S=64,D=40,W=3;has_bias=0,activation=0,channel_last=0", "B=2,S=2,D=16,W=4;",
    "B=2,S=90,D=32,W=4;seq_idx=4,has_init=0,has_final=0", "B=1,S=33,D=24,W=2;has_init=0",
    "B=1,S=5,D=7,W=1;has_init=0,has_final=0", NULL,
};

static int conv_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    cli_rng rng;
    cli_rng_seed(&rng, seed);
    return gen_conv_inputs(pb, &rng, err, errlen);
}

static int conv_bind(cli_problem * pb, char * err, size_t errlen) {
    if (bind_conv_inputs(pb, err, errlen)) return -1;
    cli_set_param_int(pb, "has_final", !cli_present(pb, "seq_idx") && cli_shape(pb, "W") > 1);
    return 0;
}

static int conv_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const int64_t B = cli_shape(pb, "B"), S = cli_shape(pb, "S"), D = cli_shape(pb, "D"), W = cli_shape(pb, "W");
    if (out_act(pb, "out", f64, B, D, S, err, errlen)) return -1;
    if (cli_param_int(pb, "has_final") && W > 1) {
        const int64_t fshp[3] = {B, D, W - 1};
        if (cli_out_arg(pb, "final_states", f64, 3, fshp, err, errlen)) return -1;
    }
    return 0;
}

CLI_DEFINE_CALL(causal_conv1d, ssm_conv1d_params, conv_params)

/* 2·B·S·D·W (one multiply-add per tap); bytes: x in, out out, the filter. */
static double conv_flops(const cli_problem * pb) {
    return 2.0 * (double)(cli_shape(pb, "B") * cli_shape(pb, "S")) * (double)(cli_shape(pb, "D") * cli_shape(pb, "W"));
}

static double conv_bytes(const cli_problem * pb) {
    const double B = (double)cli_shape(pb, "B"), S = (double)cli_shape(pb, "S"), D = (double)cli_shape(pb, "D");
    const double W = (double)cli_shape(pb, "W"), e = e_act(pb);
    double       n = 2.0 * e * B * S * D + 4.0 * D * (W + 1.0);
    if (cli_param_int(pb, "has_init")) n += e * B * D * (W - 1.0);
    if (cli_param_int(pb, "has_final")) n += e * B * D * (W - 1.0);
    return n;
}

/* conv_dim of the H=48, P=64, N=128, G=1 scan shape */
CLI_OP(causal_conv1d, "depthwise causal conv1d with bias, silu, states, seq_idx; channel-last x (docs/ops/layer.md)", conv_shape,
       conv_param, CLI_BENCH("B=1,S=2048,D=3328,W=4", "has_init=0,has_final=0", NULL), conv_cases,
       CLI_FNS(conv_validate, conv_generate, conv_bind, conv_alloc), NULL, conv_flops, conv_bytes);

/* ======================================================================================
 * causal_conv1d_bwd (spec §6.2)
 * ====================================================================================== */

static const cli_key convb_param[] = {
    P_HAS_BIAS, P_ACTIVATION, CLI_KEY_INT("has_init", "1", "initial_states input (and the dinitial_states gradient)"),
    CLI_KEY_INT("has_dfinal", "1", "dfinal_states incoming gradient"), P_SEQ_IDX, P_CHANNEL_LAST, CLI_KEY_END,
};
static const char * const convb_cases[] = {
    "B=2,S=77,D=48,W=4;", "B=1,S=64,D=40,W=3;has_bias=0,activation=0,channel_last=0,has_dfinal=0",
    "B=2,S=2,D=16,W=4;", "B=2,S=90,D=32,W=4;seq_idx=4,has_init=0,has_dfinal=0", "B=1,S=33,D=24,W=2;has_init=0", NULL,
};

static int convb_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    cli_rng rng;
    cli_rng_seed(&rng, seed);
    if (gen_conv_inputs(pb, &rng, err, errlen)) return -1;
    const int64_t B = cli_shape(pb, "B"), S = cli_shape(pb, "S"), D = cli_shape(pb, "D"), W = cli_shape(pb, "W");
    if (gen_act(pb, "dout", B, D, S, &rng, err, errlen)) return -1;
    if (cli_param_int(pb, "has_dfinal") && W > 1) {
        const int64_t fshp[3] = {B, D, W - 1};
        if (cli_gen_arg(pb, "dfinal_states", 3, fshp, err, errlen)) return -1;
        cli_gen_normal(&cli_arg_buf(pb, "dfinal_states")->view, &rng);
    }
    return 0;
}

static int convb_bind(cli_problem * pb, char * err, size_t errlen) {
    if (cli_need_ndim(pb, "dout", 3, err, errlen)) return -1;
    conv_view(pb, "dout");
    return bind_conv_inputs(pb, err, errlen);
}

static int convb_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const int64_t B = cli_shape(pb, "B"), S = cli_shape(pb, "S"), D = cli_shape(pb, "D"), W = cli_shape(pb, "W");
    const int64_t wshp[2] = {D, W}, dshp[1] = {D}, ishp[3] = {B, D, W - 1};
    if (out_act(pb, "dx", f64, B, D, S, err, errlen) || cli_out_arg(pb, "dweight", f64, 2, wshp, err, errlen))
        return -1;
    if (cli_present(pb, "bias") && cli_out_arg(pb, "dbias", f64, 1, dshp, err, errlen)) return -1;
    if (cli_present(pb, "initial_states") && cli_out_arg(pb, "dinitial_states", f64, 3, ishp, err, errlen)) return -1;
    return 0;
}

CLI_DEFINE_CALL(causal_conv1d_bwd, ssm_conv1d_params, conv_params)

/* dx and dweight: one multiply-add per tap each, 4·B·S·D·W (the recomputed pre-activation
 * for silu adds another 2·B·S·D·W, not counted). */
static double convb_flops(const cli_problem * pb) {
    return 2.0 * conv_flops(pb);
}

static double convb_bytes(const cli_problem * pb) {
    const double B = (double)cli_shape(pb, "B"), S = (double)cli_shape(pb, "S"), D = (double)cli_shape(pb, "D");
    const double W = (double)cli_shape(pb, "W"), e = e_act(pb);
    return 3.0 * e * B * S * D + 8.0 * D * (W + 1.0);
}

CLI_OP(causal_conv1d_bwd, "gradients of causal_conv1d: dx, dweight, dbias, dinitial_states (docs/ops/layer.md)", conv_shape,
       convb_param, CLI_BENCH("B=1,S=2048,D=3328,W=4", "has_init=0,has_dfinal=0", NULL), convb_cases,
       CLI_FNS(conv_validate, convb_generate, convb_bind, convb_alloc), NULL, convb_flops, convb_bytes);

/* ======================================================================================
 * causal_conv1d_update (spec §6.2, decode)
 * ====================================================================================== */

static const cli_key convu_shape[] = {
    CLI_KEY_INT("B", "4", "batch rows (one token each)"), K_D, K_W,
    CLI_KEY_INT("L", "4", "conv state length (>= W-1; Mamba-2 uses W)"), CLI_KEY_END,
};
static const cli_key convu_param[] = {
    P_HAS_BIAS, P_ACTIVATION, CLI_KEY_SLOTS,
    CLI_KEY_INT("in_place", "1", "final_conv_state is the conv_state pool itself (updated in place)"),
    CLI_KEY_INT("channel_last", "1", "conv_state (slots,L,D) in memory seen as (slots,D,L), as Mamba-2 stores it"),
    CLI_KEY_END,
};
static const char * const convu_cases[] = {
    "B=3,D=48,W=4,L=4;slots=5", "B=2,D=40,W=3,L=2;has_bias=0,activation=0,channel_last=0",
    "B=4,D=16,W=4,L=6;in_place=0,slots=6", "B=1,D=7,W=1,L=1;", NULL,
};

static int64_t convu_slots(const cli_problem * pb) {
    const int64_t slots = cli_param_int(pb, "slots");
    return slots > 0 ? slots : cli_shape(pb, "B");
}

static int convu_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    const int64_t B = cli_shape(pb, "B"), D = cli_shape(pb, "D"), W = cli_shape(pb, "W"), L = cli_shape(pb, "L");
    cli_rng       rng;
    cli_rng_seed(&rng, seed);
    const int64_t xshp[2] = {B, D};
    if (cli_gen_arg(pb, "x", 2, xshp, err, errlen) || gen_filter(pb, D, W, &rng, err, errlen)) return -1;
    cli_gen_normal(&cli_arg_buf(pb, "x")->view, &rng);
    if (gen_act(pb, "conv_state", convu_slots(pb), D, L, &rng, err, errlen)) return -1;
    if (cli_param_int(pb, "slots") > 0) {
        const int64_t ishp[1] = {B};
        if (cli_gen_arg(pb, "state_batch_indices", 1, ishp, err, errlen)) return -1;
        cli_gen_slot_indices(&cli_arg_buf(pb, "state_batch_indices")->view, convu_slots(pb), &rng);
    }
    return 0;
}

static int convu_bind(cli_problem * pb, char * err, size_t errlen) {
    if (cli_need_ndim(pb, "conv_state", 3, err, errlen)) return -1;
    conv_view(pb, "conv_state");
    if (cli_bind_shapes(pb, NULL, NULL, err, errlen)) return -1;
    cli_bind_flags(pb);
    return 0;
}

static int convu_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const int64_t oshp[2] = {cli_shape(pb, "B"), cli_shape(pb, "D")};
    if (cli_out_arg(pb, "out", f64, 2, oshp, err, errlen)) return -1;
    if (cli_param_int(pb, "in_place")) return cli_in_place(pb, "final_conv_state", "conv_state", f64, err, errlen);
    const ssm_tensor st = cli_view(pb, "conv_state");
    return out_act(pb, "final_conv_state", f64, st.shape[0], st.shape[1], st.shape[2], err, errlen);
}

CLI_DEFINE_CALL(causal_conv1d_update, ssm_conv1d_params, conv_params)

static double convu_flops(const cli_problem * pb) {
    return 2.0 * (double)(cli_shape(pb, "B") * cli_shape(pb, "D") * cli_shape(pb, "W"));
}

/* The rolling state is read and rewritten (2·e·B·D·L), plus x in and out out. */
static double convu_bytes(const cli_problem * pb) {
    const double B = (double)cli_shape(pb, "B"), D = (double)cli_shape(pb, "D"), L = (double)cli_shape(pb, "L");
    const ssm_tensor st  = cli_view(pb, "conv_state");
    const double     e_s = st.data ? (double)ssm_dtype_size((ssm_dtype)st.dtype) : e_act(pb);
    return 2.0 * e_s * B * D * L + 2.0 * e_act(pb) * B * D;
}

CLI_OP(causal_conv1d_update, "decode: one token through a rolling conv state, updated in place (docs/ops/layer.md)", convu_shape,
       convu_param, CLI_BENCH("B=1,D=3328,W=4,L=4", NULL, NULL), convu_cases,
       CLI_FNS(conv_validate, convu_generate, convu_bind, convu_alloc), NULL, convu_flops, convu_bytes);

/* ======================================================================================
 * rmsnorm_gated and its backward (spec §6.3)
 * ====================================================================================== */

static const cli_key norm_shape[] = {
    CLI_KEY_INT("M", "300", "rows (batch*S)"), CLI_KEY_INT("D", "256", "row width (d_ssm)"), CLI_KEY_END,
};
static const cli_key norm_param[] = {
    CLI_KEY_INT("group_size", "0", "columns per normalised group (D % group_size == 0; 0 = D)"),
    CLI_KEY_INT("norm_before_gate", "0", "0: norm(x*silu(z)) as Mamba2 calls it; 1: norm(x)*silu(z)"),
    CLI_KEY_INT("has_z", "1", "gate z"), {"eps", CLI_KEY_FLOAT, "1e-5", "added to the mean square", NULL},
    CLI_KEY_END,
};
static const char * const norm_cases[] = {
    "M=70,D=96;group_size=32", "M=33,D=64;norm_before_gate=1", "M=40,D=48;has_z=0,eps=1e-6", "M=1,D=1;", NULL,
};

static int norm_validate(const cli_problem * pb, char * err, size_t errlen) {
    static const char * const bools[] = {"norm_before_gate", "has_z", NULL};
    if (cli_check_shape_positive(pb, err, errlen) || cli_check_bools(pb, bools, err, errlen)) return -1;
    const int64_t gs = cli_param_int(pb, "group_size"), D = cli_shape(pb, "D");
    if (gs < 0 || (gs > 0 && D % gs != 0)) {
        snprintf(err, errlen, "%s: group_size=%lld must be 0 or divide D=%lld", pb->op->name, (long long)gs,
                 (long long)D);
        return -1;
    }
    if (!(cli_param_float(pb, "eps") > 0.0)) {
        snprintf(err, errlen, "%s: eps=%g must be > 0", pb->op->name, cli_param_float(pb, "eps"));
        return -1;
    }
    return 0;
}

static ssm_rmsnorm_params norm_params(const cli_problem * pb) {
    ssm_rmsnorm_params p;
    ssm_rmsnorm_params_init(&p);
    p.eps              = cli_param_float(pb, "eps");
    p.group_size       = cli_param_int(pb, "group_size");
    p.norm_before_gate = (int32_t)cli_param_int(pb, "norm_before_gate");
    return p;
}

static int gen_norm_inputs(cli_problem * pb, cli_rng * rng, char * err, size_t errlen) {
    const int64_t M = cli_shape(pb, "M"), D = cli_shape(pb, "D");
    const int64_t xshp[2] = {M, D}, wshp[1] = {D};
    if (cli_gen_arg(pb, "x", 2, xshp, err, errlen) || cli_gen_arg(pb, "weight", 1, wshp, err, errlen)) return -1;
    cli_gen_normal(&cli_arg_buf(pb, "x")->view, rng);
    const ssm_tensor * w = &cli_arg_buf(pb, "weight")->view;
    for (int64_t i = 0; i < D; ++i) cli_set(w, i, 1.0 + 0.1 * cli_rng_normal(rng));
    if (cli_param_int(pb, "has_z")) {
        if (cli_gen_arg(pb, "z", 2, xshp, err, errlen)) return -1;
        cli_gen_normal(&cli_arg_buf(pb, "z")->view, rng);
    }
    return 0;
}

static int norm_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    cli_rng rng;
    cli_rng_seed(&rng, seed);
    return gen_norm_inputs(pb, &rng, err, errlen);
}

static int norm_bind(cli_problem * pb, char * err, size_t errlen) {
    if (cli_bind_shapes(pb, NULL, NULL, err, errlen)) return -1;
    cli_bind_flags(pb);
    return 0;
}

static int norm_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const int64_t shp[2] = {cli_shape(pb, "M"), cli_shape(pb, "D")};
    return cli_out_arg(pb, "out", f64, 2, shp, err, errlen);
}

CLI_DEFINE_CALL(rmsnorm_gated, ssm_rmsnorm_params, norm_params)

/* Elementwise work, counted per element: square-accumulate 2, normalise and weight 2, and
 * with z the gate (sigmoid, two multiplies) 4. */
static double norm_flops(const cli_problem * pb) {
    const double MD = (double)(cli_shape(pb, "M") * cli_shape(pb, "D"));
    return (4.0 + (cli_param_int(pb, "has_z") ? 4.0 : 0.0)) * MD;
}

static double norm_bytes(const cli_problem * pb) {
    const double MD = (double)(cli_shape(pb, "M") * cli_shape(pb, "D"));
    return (2.0 + (cli_param_int(pb, "has_z") ? 1.0 : 0.0)) * e_act(pb) * MD + 4.0 * (double)cli_shape(pb, "D");
}

/* B=1, S=2048, d_ssm = H*P of the scan shape, one group */
CLI_OP(rmsnorm_gated, "gated RMSNorm per row and group, norm_before_gate 0/1 (docs/ops/layer.md)", norm_shape, norm_param,
       CLI_BENCH("M=2048,D=3072", NULL, NULL), norm_cases, CLI_FNS(norm_validate, norm_generate, norm_bind, norm_alloc),
       NULL, norm_flops, norm_bytes);


static int normb_generate(cli_problem * pb, uint64_t seed, char * err, size_t errlen) {
    cli_rng rng;
    cli_rng_seed(&rng, seed);
    if (gen_norm_inputs(pb, &rng, err, errlen)) return -1;
    const int64_t shp[2] = {cli_shape(pb, "M"), cli_shape(pb, "D")};
    if (cli_gen_arg(pb, "dout", 2, shp, err, errlen)) return -1;
    cli_gen_normal(&cli_arg_buf(pb, "dout")->view, &rng);
    return 0;
}

static int normb_alloc(cli_problem * pb, int f64, char * err, size_t errlen) {
    const int64_t shp[2] = {cli_shape(pb, "M"), cli_shape(pb, "D")}, wshp[1] = {cli_shape(pb, "D")};
    if (cli_out_arg(pb, "dx", f64, 2, shp, err, errlen) || cli_out_arg(pb, "dweight", f64, 1, wshp, err, errlen))
        return -1;
    if (cli_present(pb, "z") && cli_out_arg(pb, "dz", f64, 2, shp, err, errlen)) return -1;
    return 0;
}

CLI_DEFINE_CALL(rmsnorm_gated_bwd, ssm_rmsnorm_params, norm_params)

/* Per element: the recomputed forward (as norm_flops) plus c1, dv, dweight (6), and with
 * z the gate's derivative (6). */
static double normb_flops(const cli_problem * pb) {
    const double MD = (double)(cli_shape(pb, "M") * cli_shape(pb, "D"));
    return norm_flops(pb) + (6.0 + (cli_param_int(pb, "has_z") ? 6.0 : 0.0)) * MD;
}

static double normb_bytes(const cli_problem * pb) {
    const double MD = (double)(cli_shape(pb, "M") * cli_shape(pb, "D"));
    return (3.0 + (cli_param_int(pb, "has_z") ? 2.0 : 0.0)) * e_act(pb) * MD + 8.0 * (double)cli_shape(pb, "D");
}

CLI_OP(rmsnorm_gated_bwd, "gradients of rmsnorm_gated: dx, dz, dweight (docs/ops/layer.md)", norm_shape, norm_param,
       CLI_BENCH("M=2048,D=3072", NULL, NULL), norm_cases,
       CLI_FNS(norm_validate, normb_generate, norm_bind, normb_alloc), NULL, normb_flops, normb_bytes);
