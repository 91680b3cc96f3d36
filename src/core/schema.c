/*
 * schema.c — the operator schema: every public operator's arguments, written once.
 *
 * One table per operator lists each field of its ssm_<op>_args struct in field order: name,
 * role (input / optional input / output / optional output), accepted ranks, dtype class,
 * the activation hint, the shape as the manuals write it, and the rules that tie an output
 * to an input (`needs`: a gradient exists only with its input; `in_place`: a decode step's
 * final state may be exactly its input pool). The library's validation checks presence,
 * device, rank and dtype class of every tensor, the `needs` rules and the overlap rules from
 * these tables (src/ops/dispatch.c); the CLI builds its argument lists from them, the tests
 * check them against the structs (tests/test_schema.c), and `ssmops list --schema OP`
 * prints the argument table of the manuals from them.
 *
 * Adding an operator: its table here (groups that several operators share are macros),
 * its line in SSMI_OP_LIST (ssmi_ops.h) and its entry in OP_INFO below.
 */
#include <stddef.h>
#include <string.h>

#include "ssmi.h"

#define IN   SSM_ARG_INPUT
#define OPT  SSM_ARG_OPTIONAL_INPUT
#define OUT  SSM_ARG_OUTPUT
#define OOPT SSM_ARG_OPTIONAL_OUTPUT
#define R(n) (1u << (n))

/* One field of the args struct ARGS (#defined before each table): a float tensor held in
 * the activation dtype (A), any other float tensor (F), an index tensor (I); the optional
 * outputs that need an input (AN, FN) or may be their input's view (FP, AP). */
#define ARG(field, role, cls, ranks, flags, shape, needs, in_place) \
    {#field, role, cls, ranks, flags, offsetof(ARGS, field), shape, needs, in_place}
#define FLT SSM_DTYPE_CLASS_FLOAT
#define ACT SSM_ARG_ACTIVATION
#define A(field, role, ranks, shape)  ARG(field, role, FLT, ranks, ACT, shape, NULL, NULL)
#define F(field, role, ranks, shape)  ARG(field, role, FLT, ranks, 0, shape, NULL, NULL)
#define I(field, role, ranks, shape)  ARG(field, role, SSM_DTYPE_CLASS_INDEX, ranks, 0, shape, NULL, NULL)
#define AN(field, ranks, shape, need) ARG(field, OOPT, FLT, ranks, ACT, shape, need, NULL)
#define FN(field, ranks, shape, need) ARG(field, OOPT, FLT, ranks, 0, shape, need, NULL)
#define AP(field, ranks, shape, pool) ARG(field, OOPT, FLT, ranks, ACT, shape, NULL, pool)
#define FP(field, ranks, shape, pool) ARG(field, OOPT, FLT, ranks, 0, shape, NULL, pool)

/* ==== Mamba-2 ============================================================================ */

#define M2_BSHP   "(batch, S, H, P)"
#define M2_BSGN   "(batch, S, G, N)"
#define M2_CHUNKS "(batch, H, NC, Q)"
#define M2_STATES "(batch, NC, H, P, N)"
#define M2_SEQ    "(batch, H, P, N), or (nseq, H, P, N) with `cu_seqlens`"
/* The slots of the state pools of a sequence operator (gathered from / scattered to by
 * src/ops/state_pools.c). */
#define POOL_INDICES(shape) I(initial_state_indices, OPT, R(1), shape), I(final_state_indices, OPT, R(1), shape)

#define ARGS ssm_mamba2_chunk_cumsum_args
static const ssm_arg_info chunk_cumsum_args[] = {
    A(dt, IN, R(3), "(batch, S, H)"),     F(a, IN, R(1), "(H)"),
    F(dt_bias, OPT, R(1), "(H)"),         F(dt_out, OUT, R(4), M2_CHUNKS),
    F(da_cumsum, OUT, R(4), M2_CHUNKS),
};
#undef ARGS

#define ARGS ssm_mamba2_chunk_state_args
static const ssm_arg_info chunk_state_args[] = {
    A(b, IN, R(4), M2_BSGN),          A(x, IN, R(4), M2_BSHP),           F(dt, IN, R(4), M2_CHUNKS),
    F(da_cumsum, IN, R(4), M2_CHUNKS), I(seq_idx, OPT, R(2), "(batch, S)"), F(states, OUT, R(5), M2_STATES),
};
#undef ARGS

#define ARGS ssm_mamba2_state_passing_args
static const ssm_arg_info state_passing_args[] = {
    F(states, IN, R(5), M2_STATES),         F(da_chunk_cumsum, IN, R(3), "(batch, H, NC)"),
    F(initial_states, OPT, R(4), "(batch, H, P, N)"), I(seq_idx, OPT, R(2), "(batch, S)"),
    A(states_in, OUT, R(5), M2_STATES),     F(final_states, OOPT, R(4), "(batch, H, P, N)"),
};
#undef ARGS

#define ARGS ssm_mamba2_bmm_args
static const ssm_arg_info bmm_args[] = {
    A(c, IN, R(4), M2_BSGN), A(b, IN, R(4), M2_BSGN), I(seq_idx, OPT, R(2), "(batch, S)"),
    F(cb, OUT, R(5), "(batch, NC, G, Q, Q)"),
};
#undef ARGS

#define ARGS ssm_mamba2_chunk_scan_args
static const ssm_arg_info chunk_scan_args[] = {
    F(cb, IN, R(5), "(batch, NC, G, Q, Q)"), A(x, IN, R(4), M2_BSHP),       F(dt, IN, R(4), M2_CHUNKS),
    F(da_cumsum, IN, R(4), M2_CHUNKS),     A(c, IN, R(4), M2_BSGN),          F(states_in, IN, R(5), M2_STATES),
    F(d, OPT, R(1) | R(2), "(H) or (H, P)"), A(z, OPT, R(4), M2_BSHP),       I(seq_idx, OPT, R(2), "(batch, S)"),
    A(out, OUT, R(4), M2_BSHP),            AN(out_x, R(4), M2_BSHP, "z"),
};
#undef ARGS

/* The inputs of the combined forward, which its backward takes too. */
#define M2_SCAN_INPUTS                                                                                              \
    A(x, IN, R(4), M2_BSHP), A(dt, IN, R(3), "(batch, S, H)"), F(a, IN, R(1), "(H)"), A(b, IN, R(4), M2_BSGN),    \
        A(c, IN, R(4), M2_BSGN), F(d, OPT, R(1) | R(2), "(H) or (H, P)"), A(z, OPT, R(4), M2_BSHP),               \
        F(dt_bias, OPT, R(1), "(H)"), F(initial_states, OPT, R(4), M2_SEQ), I(seq_idx, OPT, R(2), "(batch, S)"),      \
        I(cu_seqlens, OPT, R(1), "(nseq + 1)")

#define ARGS ssm_mamba2_scan_args
static const ssm_arg_info scan_args[] = {
    M2_SCAN_INPUTS,
    POOL_INDICES("(NS): nseq, or batch without `cu_seqlens`"),
    I(num_computed_tokens, OPT, R(1), "(NS), with `chunk_states`"),
    A(out, OUT, R(4), M2_BSHP),
    F(final_states, OOPT, R(4), M2_SEQ),
    F(chunk_states, OOPT, R(4), "(NCS, H, P, N): one row per chunk boundary"),
};
#undef ARGS

#define ARGS ssm_mamba2_scan_bwd_args
static const ssm_arg_info scan_bwd_args[] = {
    M2_SCAN_INPUTS,
    A(dout, IN, R(4), M2_BSHP),
    F(dfinal_states, OPT, R(4), M2_SEQ),
    A(dx, OOPT, R(4), M2_BSHP),
    A(ddt, OOPT, R(3), "(batch, S, H)"),
    F(da, OOPT, R(1), "(H)"),
    A(db, OOPT, R(4), M2_BSGN),
    A(dc, OOPT, R(4), M2_BSGN),
    FN(dd, R(1) | R(2), "(H) or (H, P), as `d`", "d"),
    AN(dz, R(4), M2_BSHP, "z"),
    FN(ddt_bias, R(1), "(H)", "dt_bias"),
    FN(dinitial_states, R(4), M2_SEQ, "initial_states"),
};
#undef ARGS

#define ARGS ssm_mamba2_step_args
static const ssm_arg_info step_args[] = {
    A(x, IN, R(3), "(B, H, P); dim 0 is T with `cu_seqlens`"),
    A(dt, IN, R(3), "(B, H, P); dim 0 is T with `cu_seqlens`"),
    F(a, IN, R(3), "(H, P, N)"),
    A(b, IN, R(3), "(B, G, N); dim 0 is T with `cu_seqlens`"),
    A(c, IN, R(3), "(B, G, N); dim 0 is T with `cu_seqlens`"),
    F(d, OPT, R(2), "(H, P)"),
    A(z, OPT, R(3), "(B, H, P); dim 0 is T with `cu_seqlens`"),
    F(dt_bias, OPT, R(2), "(H, P)"),
    F(state, IN, R(4), "(slots, H, P, N)"),
    I(state_batch_indices, OPT, R(1) | R(2), "(rows), or rows × L with `cu_seqlens`"),
    I(dst_state_batch_indices, OPT, R(1) | R(2), "(rows), or rows × L with `cu_seqlens`"),
    I(cu_seqlens, OPT, R(1), "(rows+1)"),
    I(num_accepted_tokens, OPT, R(1), "(rows)"),
    A(out, OUT, R(3), "(B, H, P); dim 0 is T with `cu_seqlens`"),
    FP(final_state, R(4), "(slots, H, P, N)", "state"),
    F(intermediate_states, OOPT, R(4), "(B, H, P, N); dim 0 is T with `cu_seqlens`"),
};
#undef ARGS

/* ==== layer operators ===================================================================== */

#define CONV_INPUTS                                                                                    \
    A(x, IN, R(3), "(batch, D, S)"), F(weight, IN, R(2), "(D, W)"), F(bias, OPT, R(1), "(D)"),          \
        I(seq_idx, OPT, R(2), "(batch, S)"), A(initial_states, OPT, R(3), "(batch, D, W−1)")

#define ARGS ssm_causal_conv1d_args
static const ssm_arg_info conv1d_args[] = {
    CONV_INPUTS,
    I(cu_seqlens, OPT, R(1), "(nseq + 1)"),
    POOL_INDICES("(NS): nseq, or batch without `cu_seqlens`"),
    A(out, OUT, R(3), "(batch, D, S)"),
    A(final_states, OOPT, R(3), "(batch, D, W−1), or (nseq, D, W−1) with `cu_seqlens`"),
};
#undef ARGS

#define ARGS ssm_causal_conv1d_bwd_args
static const ssm_arg_info conv1d_bwd_args[] = {
    CONV_INPUTS,
    A(dout, IN, R(3), "(batch, D, S)"),
    A(dfinal_states, OPT, R(3), "(batch, D, W−1)"),
    A(dx, OOPT, R(3), "(batch, D, S)"),
    F(dweight, OOPT, R(2), "(D, W)"),
    FN(dbias, R(1), "(D)", "bias"),
    AN(dinitial_states, R(3), "(batch, D, W−1)", "initial_states"),
};
#undef ARGS

#define ARGS ssm_causal_conv1d_update_args
static const ssm_arg_info conv1d_update_args[] = {
    A(x, IN, R(2), "(B, D)"),
    F(weight, IN, R(2), "(D, W)"),
    F(bias, OPT, R(1), "(D)"),
    A(conv_state, IN, R(3), "(slots, D, L)"),
    I(state_batch_indices, OPT, R(1), "(B)"),
    A(out, OUT, R(2), "(B, D)"),
    AP(final_conv_state, R(3), "(slots, D, L)", "conv_state"),
};
#undef ARGS

#define NORM_INPUTS A(x, IN, R(2), "(M, D)"), A(z, OPT, R(2), "(M, D)"), F(weight, IN, R(1), "(D)")

#define ARGS ssm_rmsnorm_gated_args
static const ssm_arg_info rmsnorm_args[] = {NORM_INPUTS, A(out, OUT, R(2), "(M, D)")};
#undef ARGS

#define ARGS ssm_rmsnorm_gated_bwd_args
static const ssm_arg_info rmsnorm_bwd_args[] = {
    NORM_INPUTS,
    A(dout, IN, R(2), "(M, D)"),
    A(dx, OOPT, R(2), "(M, D)"),
    AN(dz, R(2), "(M, D)", "z"),
    F(dweight, OOPT, R(1), "(D)"),
};
#undef ARGS

/* ==== Mamba-3 SISO ======================================================================== */

#define S3_QK   "(B, S, Hq, K)"
#define S3_V    "(B, S, H, V)"
#define S3_TOK  "(B, H, S)"
#define S3_ANG  "(B, S, H, A)"
#define S3_NSA  "(NS, H, A)"
#define S3_NSS  "(NS, H, V, K)"
#define S3_NSK  "(NS, H, K)"
#define S3_NSV  "(NS, H, V)"
#define S3_CHST "(NCS, H, V, K)"

/* q … k_bias of the sequence operators; then angles (raw or cumulative: their own flag). */
#define SISO_QKV                                                                                             \
    A(q, IN, R(4), S3_QK), A(k, IN, R(4), S3_QK), A(v, IN, R(4), S3_V), F(adt, IN, R(3), S3_TOK),             \
        F(dt, IN, R(3), S3_TOK), A(trap, IN, R(3), S3_TOK), F(q_bias, IN, R(2), "(H, K)"),                   \
        F(k_bias, IN, R(2), "(H, K)")
#define SISO_DZ F(d, OPT, R(1), "(H)"), A(z, OPT, R(4), S3_V)
/* The combined forward's inputs, which its backward takes too. */
#define SISO_INPUTS                                                                                      \
    SISO_QKV, A(angles, IN, R(4), S3_ANG), SISO_DZ, F(angle_state, OPT, R(3), S3_NSA),                   \
        F(ssm_state, OPT, R(4), S3_NSS), F(k_state, OPT, R(3), S3_NSK), F(v_state, OPT, R(3), S3_NSV),   \
        I(cu_seqlens, OPT, R(1), "(NS + 1)")

#define ARGS ssm_mamba3_angle_cumsum_args
static const ssm_arg_info angle_cumsum_args[] = {
    A(angles, IN, R(4), S3_ANG),      F(dt, IN, R(3), S3_TOK),
    F(angle_state, OPT, R(3), S3_NSA), I(cu_seqlens, OPT, R(1), "(NS + 1)"),
    A(angles_cumsum, OUT, R(4), S3_ANG), F(final_angle_state, OOPT, R(3), S3_NSA),
};
#undef ARGS

#define ARGS ssm_mamba3_angle_cumsum_bwd_args
static const ssm_arg_info angle_cumsum_bwd_args[] = {
    A(dangles_cumsum, IN, R(4), S3_ANG), F(dfinal_angle_state, OPT, R(3), S3_NSA), A(angles, IN, R(4), S3_ANG),
    F(dt, IN, R(3), S3_TOK),             I(cu_seqlens, OPT, R(1), "(NS + 1)"),    A(dangles, OUT, R(4), S3_ANG),
    F(ddt, OUT, R(3), S3_TOK),           F(dangle_state, OOPT, R(3), S3_NSA),
};
#undef ARGS

#define ARGS ssm_mamba3_siso_fwd_args
static const ssm_arg_info siso_fwd_args[] = {
    SISO_QKV,
    F(angles, IN, R(4), S3_ANG),
    SISO_DZ,
    F(ssm_state, OPT, R(4), S3_NSS),
    F(k_state, OPT, R(3), S3_NSK),
    F(v_state, OPT, R(3), S3_NSV),
    I(cu_seqlens, OPT, R(1), "(NS + 1)"),
    A(out, OUT, R(4), S3_V),
    F(final_ssm_state, OOPT, R(4), S3_NSS),
    F(final_k_state, OOPT, R(3), S3_NSK),
    F(final_v_state, OOPT, R(3), S3_NSV),
    F(pregate_y, OOPT, R(4), S3_V),
    F(chunk_states, OOPT, R(4), S3_CHST),
};
#undef ARGS

#define ARGS ssm_mamba3_siso_args
static const ssm_arg_info siso_args[] = {
    SISO_INPUTS,
    POOL_INDICES("(NS)"),
    A(out, OUT, R(4), S3_V),
    F(final_angle_state, OOPT, R(3), S3_NSA),
    F(final_ssm_state, OOPT, R(4), S3_NSS),
    F(final_k_state, OOPT, R(3), S3_NSK),
    F(final_v_state, OOPT, R(3), S3_NSV),
    F(pregate_y, OOPT, R(4), S3_V),
    F(chunk_states, OOPT, R(4), S3_CHST),
};
#undef ARGS

#define ARGS ssm_mamba3_siso_bwd_args
static const ssm_arg_info siso_bwd_args[] = {
    SISO_INPUTS,
    A(dout, IN, R(4), S3_V),
    F(dfinal_angle_state, OPT, R(3), S3_NSA),
    F(dfinal_ssm_state, OPT, R(4), S3_NSS),
    F(dfinal_k_state, OPT, R(3), S3_NSK),
    F(dfinal_v_state, OPT, R(3), S3_NSV),
    A(dq, OOPT, R(4), S3_QK),
    A(dk, OOPT, R(4), S3_QK),
    A(dv, OOPT, R(4), S3_V),
    F(dadt, OOPT, R(3), S3_TOK),
    F(ddt, OOPT, R(3), S3_TOK),
    F(dtrap, OOPT, R(3), S3_TOK),
    F(dq_bias, OOPT, R(2), "(H, K)"),
    F(dk_bias, OOPT, R(2), "(H, K)"),
    A(dangles, OOPT, R(4), S3_ANG),
    FN(dd, R(1), "(H)", "d"),
    AN(dz, R(4), S3_V, "z"),
    FN(dangle_state, R(3), S3_NSA, "angle_state"),
    FN(dssm_state, R(4), S3_NSS, "ssm_state"),
    FN(dk_state, R(3), S3_NSK, "k_state"),
    FN(dv_state, R(3), S3_NSV, "v_state"),
    /* inputs after the outputs: the args struct only grows at its end */
    F(pregate_y, OPT, R(4), S3_V),
    F(chunk_states, OPT, R(4), S3_CHST),
};
#undef ARGS

#define ARGS ssm_mamba3_siso_step_args
static const ssm_arg_info siso_step_args[] = {
    A(q, IN, R(3), "(B, Hq, K); dim 0 is T with `cu_seqlens`"),
    A(k, IN, R(3), "(B, Hq, K); dim 0 is T with `cu_seqlens`"),
    A(v, IN, R(3), "(B, H, V); dim 0 is T with `cu_seqlens`"),
    F(adt, IN, R(2), "(B, H); dim 0 is T with `cu_seqlens`"),
    F(dt, IN, R(2), "(B, H); dim 0 is T with `cu_seqlens`"),
    A(trap, IN, R(2), "(B, H); dim 0 is T with `cu_seqlens`"),
    F(q_bias, IN, R(2), "(H, K)"),
    F(k_bias, IN, R(2), "(H, K)"),
    A(angles, IN, R(3), "(B, H, A); dim 0 is T with `cu_seqlens`"),
    F(d, OPT, R(1), "(H)"),
    A(z, OPT, R(3), "(B, H, V); dim 0 is T with `cu_seqlens`"),
    F(angle_state, IN, R(3), "(slots, H, A)"),
    F(ssm_state, IN, R(4), "(slots, H, V, K)"),
    F(k_state, IN, R(3), "(slots, H, K)"),
    F(v_state, IN, R(3), "(slots, H, V)"),
    I(state_batch_indices, OPT, R(1) | R(2), "(rows), or rows × L with `cu_seqlens`"),
    I(dst_state_batch_indices, OPT, R(1) | R(2), "(rows), or rows × L with `cu_seqlens`"),
    I(cu_seqlens, OPT, R(1), "(rows+1)"),
    I(num_accepted_tokens, OPT, R(1), "(rows)"),
    A(out, OUT, R(3), "(B, H, V); dim 0 is T with `cu_seqlens`"),
    FP(final_angle_state, R(3), "(slots, H, A)", "angle_state"),
    FP(final_ssm_state, R(4), "(slots, H, V, K)", "ssm_state"),
    FP(final_k_state, R(3), "(slots, H, K)", "k_state"),
    FP(final_v_state, R(3), "(slots, H, V)", "v_state"),
    F(intermediate_angle_state, OOPT, R(3), "(B, H, A); dim 0 is T with `cu_seqlens`"),
    F(intermediate_ssm_state, OOPT, R(4), "(B, H, V, K); dim 0 is T with `cu_seqlens`"),
    F(intermediate_k_state, OOPT, R(3), "(B, H, K); dim 0 is T with `cu_seqlens`"),
    F(intermediate_v_state, OOPT, R(3), "(B, H, V); dim 0 is T with `cu_seqlens`"),
};
#undef ARGS

/* ==== Mamba-3 MIMO ======================================================================== */

#define MM_QK   "(B, S, R, G, N)"
#define MM_V    "(B, S, H, P)"
#define MM_OUT  "(B, S, H, P) with `mimo_o`; else (B, S, R, H, P)"
#define MM_TOK  "(B, H, S)"
#define MM_HRN  "(H, R, N)"
#define MM_HRP  "(H, R, P)"
#define MM_NORM "(H, P) or (H·P)"
#define MM_NSA  "(NS, H, A)"
#define MM_NSS  "(NS, H, P, N)"
#define MM_NSK  "(NS, R, H, N)"
#define MM_NSV  "(NS, H, P)"
#define MM_YPRE "(B, S, H, R, P)"
#define MM_CHST "(NCS, H, N, P)"

/* The forward's inputs, which its backward takes too. */
#define MIMO_INPUTS                                                                                            \
    A(q, IN, R(5), MM_QK), A(k, IN, R(5), MM_QK), A(v, IN, R(4), MM_V), F(adt, IN, R(3), MM_TOK),               \
        F(dt, IN, R(3), MM_TOK), A(trap, IN, R(3), MM_TOK), F(q_bias, IN, R(3), MM_HRN),                       \
        F(k_bias, IN, R(3), MM_HRN), F(mimo_v, IN, R(3), MM_HRP), F(mimo_z, OPT, R(3), MM_HRP),                \
        F(mimo_o, OPT, R(3), MM_HRP), F(angles, IN, R(4), "(B, S, H, A)"), F(d, OPT, R(1), "(H)"),             \
        A(z, OPT, R(4), MM_V), F(outproj_norm_weight, OPT, R(1) | R(2), MM_NORM),                              \
        F(angle_state, OPT, R(3), MM_NSA), F(ssm_state, OPT, R(4), MM_NSS), F(k_state, OPT, R(4), MM_NSK),     \
        F(v_state, OPT, R(3), MM_NSV), I(cu_seqlens, OPT, R(1), "(NS + 1)")

#define ARGS ssm_mamba3_mimo_bwd_fwd_args
static const ssm_arg_info mimo_bwd_fwd_args[] = {
    A(dout, IN, R(4) | R(5), MM_OUT),
    A(q, IN, R(5), MM_QK),
    A(k, IN, R(5), MM_QK),
    A(v, IN, R(4), MM_V),
    F(q_bias, IN, R(3), MM_HRN),
    F(k_bias, IN, R(3), MM_HRN),
    F(mimo_v, IN, R(3), MM_HRP),
    F(mimo_o, OPT, R(3), MM_HRP),
    A(z, OPT, R(4), MM_V),
    F(mimo_z, OPT, R(3), MM_HRP),
    F(angles, IN, R(4), "(B, S, H, A)"),
    F(da_cs, IN, R(3), MM_TOK),
    F(da_cs_rev, IN, R(3), MM_TOK),
    F(dt, IN, R(3), MM_TOK),
    A(trap, IN, R(3), MM_TOK),
    F(d, OPT, R(1), "(H)"),
    F(segsum, IN, R(5), "(B, H, nc, C, C)"),
    FN(dmimo_o, R(4), "(B, H, R, P)", "mimo_o"),
    F(states, OOPT, R(5), "(B, H, nc, N, P)"),
    AN(dz, R(4), MM_V, "z"),
    FN(dmimo_z, R(4), "(B, H, R, P)", "z"),
    A(qk_dot, OOPT, R(5), "(B, H, S, R, R)"),
};
#undef ARGS

#define ARGS ssm_mamba3_mimo_args
static const ssm_arg_info mimo_args[] = {
    MIMO_INPUTS,
    POOL_INDICES("(NS)"),
    A(out, OUT, R(4) | R(5), MM_OUT),
    F(final_angle_state, OOPT, R(3), MM_NSA),
    F(final_ssm_state, OOPT, R(4), MM_NSS),
    F(final_k_state, OOPT, R(4), MM_NSK),
    F(final_v_state, OOPT, R(3), MM_NSV),
    F(pregate_y, OOPT, R(5), MM_YPRE),
    F(chunk_states, OOPT, R(4), MM_CHST),
};
#undef ARGS

#define ARGS ssm_mamba3_mimo_bwd_args
static const ssm_arg_info mimo_bwd_args[] = {
    MIMO_INPUTS,
    A(dout, IN, R(4) | R(5), MM_OUT),
    F(dfinal_angle_state, OPT, R(3), MM_NSA),
    F(dfinal_ssm_state, OPT, R(4), MM_NSS),
    F(dfinal_k_state, OPT, R(4), MM_NSK),
    F(dfinal_v_state, OPT, R(3), MM_NSV),
    A(dq, OOPT, R(5), MM_QK),
    A(dk, OOPT, R(5), MM_QK),
    A(dv, OOPT, R(4), MM_V),
    AN(dz, R(4), MM_V, "z"),
    F(dq_bias, OOPT, R(3), MM_HRN),
    F(dk_bias, OOPT, R(3), MM_HRN),
    F(dmimo_v, OOPT, R(3), MM_HRP),
    FN(dmimo_z, R(3), MM_HRP, "z"),
    FN(dmimo_o, R(3), MM_HRP, "mimo_o"),
    FN(dd, R(1), "(H)", "d"),
    F(dadt, OOPT, R(3), MM_TOK),
    F(ddt, OOPT, R(3), MM_TOK),
    A(dtrap, OOPT, R(3), MM_TOK),
    F(dangles, OOPT, R(4), "(B, S, H, A)"),
    F(doutproj_norm_weight, OOPT, R(1) | R(2), "(H, P), or the shape of `outproj_norm_weight`"),
    FN(dangle_state, R(3), MM_NSA, "angle_state"),
    FN(dssm_state, R(4), MM_NSS, "ssm_state"),
    FN(dk_state, R(4), MM_NSK, "k_state"),
    FN(dv_state, R(3), MM_NSV, "v_state"),
    /* inputs after the outputs: the args struct only grows at its end */
    F(pregate_y, OPT, R(5), MM_YPRE),
    F(chunk_states, OPT, R(4), MM_CHST),
};
#undef ARGS

#define ARGS ssm_mamba3_mimo_step_args
static const ssm_arg_info mimo_step_args[] = {
    A(q, IN, R(4), "(B, R, G, N); dim 0 is T with `cu_seqlens`"),
    A(k, IN, R(4), "(B, R, G, N); dim 0 is T with `cu_seqlens`"),
    A(v, IN, R(3), "(B, H, P); dim 0 is T with `cu_seqlens`"),
    A(z, OPT, R(3), "(B, H, P); dim 0 is T with `cu_seqlens`"),
    F(adt, IN, R(2), "(B, H); dim 0 is T with `cu_seqlens`"),
    F(dt, IN, R(2), "(B, H); dim 0 is T with `cu_seqlens`"),
    A(trap, IN, R(2), "(B, H); dim 0 is T with `cu_seqlens`"),
    F(angles, IN, R(3), "(B, H, A); dim 0 is T with `cu_seqlens`"),
    F(q_bias, IN, R(3), MM_HRN),
    F(k_bias, IN, R(3), MM_HRN),
    F(mimo_v, IN, R(3), MM_HRP),
    F(mimo_z, OPT, R(3), MM_HRP),
    F(mimo_o, OPT, R(3), MM_HRP),
    F(d, OPT, R(1), "(H)"),
    F(outproj_norm_weight, OPT, R(1) | R(2), MM_NORM),
    F(angle_state, IN, R(3), "(slots, H, A)"),
    F(ssm_state, IN, R(4), "(slots, H, P, N)"),
    F(k_state, IN, R(4), "(slots, R, H, N)"),
    F(v_state, IN, R(3), "(slots, H, P)"),
    I(state_batch_indices, OPT, R(1) | R(2), "(rows), or rows × L with `cu_seqlens`"),
    I(dst_state_batch_indices, OPT, R(1) | R(2), "(rows), or rows × L with `cu_seqlens`"),
    I(cu_seqlens, OPT, R(1), "(rows+1)"),
    I(num_accepted_tokens, OPT, R(1), "(rows)"),
    A(out, OUT, R(3) | R(4), "(B, H, P) with `mimo_o`; else (B, R, H, P); dim 0 is T with `cu_seqlens`"),
    FP(final_angle_state, R(3), "(slots, H, A)", "angle_state"),
    FP(final_ssm_state, R(4), "(slots, H, P, N)", "ssm_state"),
    FP(final_k_state, R(4), "(slots, R, H, N)", "k_state"),
    FP(final_v_state, R(3), "(slots, H, P)", "v_state"),
    F(intermediate_angle_state, OOPT, R(3), "(B, H, A); dim 0 is T with `cu_seqlens`"),
    F(intermediate_ssm_state, OOPT, R(4), "(B, H, P, N); dim 0 is T with `cu_seqlens`"),
    F(intermediate_k_state, OOPT, R(4), "(B, R, H, N); dim 0 is T with `cu_seqlens`"),
    F(intermediate_v_state, OOPT, R(3), "(B, H, P); dim 0 is T with `cu_seqlens`"),
};
#undef ARGS

/* ==== the operators ======================================================================== */

#define BE_HOST (R(SSM_BACKEND_REF) | R(SSM_BACKEND_CPU))
#define BE_CUDA (BE_HOST | R(SSM_BACKEND_CUDA))
#define COUNT(t) ((int32_t)(sizeof(t) / sizeof((t)[0])))

/* Operator op with params struct P, argument table T, backends, workspace. */
#define OP(op, P, T, backends, ws) \
    [SSMI_OP_##op] = {#op, #P, sizeof(P), sizeof(ssm_##op##_args), COUNT(T), T, backends, ws}

static const ssm_op_info op_info[SSMI_OP_COUNT] = {
    OP(mamba2_chunk_cumsum, ssm_mamba2_params, chunk_cumsum_args, BE_HOST, 0),
    OP(mamba2_chunk_state, ssm_mamba2_params, chunk_state_args, BE_CUDA, 0),
    OP(mamba2_state_passing, ssm_mamba2_params, state_passing_args, BE_HOST, 0),
    OP(mamba2_bmm, ssm_mamba2_params, bmm_args, BE_HOST, 0),
    OP(mamba2_chunk_scan, ssm_mamba2_params, chunk_scan_args, BE_HOST, 0),
    OP(mamba2_scan, ssm_mamba2_params, scan_args, BE_CUDA, 1),
    OP(mamba2_scan_bwd, ssm_mamba2_params, scan_bwd_args, BE_CUDA, 0),
    OP(mamba2_step, ssm_mamba2_params, step_args, BE_CUDA, 0),
    OP(causal_conv1d, ssm_conv1d_params, conv1d_args, BE_CUDA, 0),
    OP(causal_conv1d_bwd, ssm_conv1d_params, conv1d_bwd_args, BE_CUDA, 0),
    OP(causal_conv1d_update, ssm_conv1d_params, conv1d_update_args, BE_CUDA, 0),
    OP(rmsnorm_gated, ssm_rmsnorm_params, rmsnorm_args, BE_CUDA, 0),
    OP(rmsnorm_gated_bwd, ssm_rmsnorm_params, rmsnorm_bwd_args, BE_CUDA, 0),
    OP(mamba3_angle_cumsum, ssm_mamba3_params, angle_cumsum_args, BE_CUDA, 0),
    OP(mamba3_angle_cumsum_bwd, ssm_mamba3_params, angle_cumsum_bwd_args, BE_CUDA, 0),
    OP(mamba3_siso_fwd, ssm_mamba3_params, siso_fwd_args, BE_CUDA, 0),
    OP(mamba3_siso, ssm_mamba3_params, siso_args, BE_CUDA, 0),
    OP(mamba3_siso_bwd, ssm_mamba3_params, siso_bwd_args, BE_CUDA, 0),
    OP(mamba3_siso_step, ssm_mamba3_params, siso_step_args, BE_CUDA, 0),
    OP(mamba3_mimo_bwd_fwd, ssm_mamba3_mimo_params, mimo_bwd_fwd_args, BE_CUDA, 0),
    OP(mamba3_mimo, ssm_mamba3_mimo_params, mimo_args, BE_CUDA, 0),
    OP(mamba3_mimo_bwd, ssm_mamba3_mimo_params, mimo_bwd_args, BE_CUDA, 0),
    OP(mamba3_mimo_step, ssm_mamba3_mimo_params, mimo_step_args, BE_CUDA, 0),
};

const ssm_op_info * ssmi_op_info(ssmi_op op) { return (op >= 0 && op < SSMI_OP_COUNT) ? &op_info[op] : NULL; }

const ssm_arg_info * ssmi_op_arg(ssmi_op op, const char * name) {
    const ssm_op_info * info = ssmi_op_info(op);
    for (int32_t i = 0; info != NULL && name != NULL && i < info->nargs; ++i)
        if (strcmp(info->args[i].name, name) == 0) return &info->args[i];
    return NULL;
}

SSM_API int32_t ssm_op_count(void) { return SSMI_OP_COUNT; }

SSM_API const ssm_op_info * ssm_op_get(int32_t i) { return ssmi_op_info((ssmi_op)i); }

SSM_API int32_t ssm_op_find(const char * name) {
    if (name != NULL && strncmp(name, "ssm_", 4) == 0) name += 4;
    return ssmi_op_find(name);
}

SSM_API size_t ssm_op_info_struct_size(void) { return sizeof(ssm_op_info); }

SSM_API size_t ssm_arg_info_struct_size(void) { return sizeof(ssm_arg_info); }
