/*
 * ssmi_ops.h — the list of ssmops's public operators, one X(name) per operator in the order
 * of the public header. Everything that enumerates operators (kernel-variant tables, the
 * operator schema, the CLI) expands this list instead of retyping it.
 */
#ifndef SSMI_OPS_H
#define SSMI_OPS_H

#define SSMI_OP_LIST(X)           \
    X(mamba2_chunk_cumsum)        \
    X(mamba2_chunk_state)         \
    X(mamba2_state_passing)       \
    X(mamba2_bmm)                 \
    X(mamba2_chunk_scan)          \
    X(mamba2_scan)                \
    X(mamba2_scan_bwd)            \
    X(mamba2_step)                \
    X(causal_conv1d)              \
    X(causal_conv1d_bwd)          \
    X(causal_conv1d_update)       \
    X(rmsnorm_gated)              \
    X(rmsnorm_gated_bwd)          \
    X(mamba3_angle_cumsum)        \
    X(mamba3_angle_cumsum_bwd)    \
    X(mamba3_siso_fwd)            \
    X(mamba3_siso)                \
    X(mamba3_siso_bwd)            \
    X(mamba3_siso_step)           \
    X(mamba3_mimo_bwd_fwd)        \
    X(mamba3_mimo)                \
    X(mamba3_mimo_bwd)            \
    X(mamba3_mimo_step)

typedef enum ssmi_op {
#define SSMI_OP_ENUM_(name) SSMI_OP_##name,
    SSMI_OP_LIST(SSMI_OP_ENUM_)
#undef SSMI_OP_ENUM_
    SSMI_OP_COUNT
} ssmi_op;

#endif /* SSMI_OPS_H */
