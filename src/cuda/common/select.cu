/* select.cu — the CUDA backend's selection tables as the variant registry sees them
 * (src/core/variant.c). Each family's host code keeps the tables of its operators, with
 * their rules and launches, and reports them through one function per operator:
 *
 *   extern "C" int32_t ssmi_cuda_variants_<op>(int32_t i, ssmi_variant_info * out);
 *
 * which returns the number of entries and, for 0 ≤ i < that number and out != NULL, fills
 * *out with entry i's name and reason. This file only routes an operator to its function. */
extern "C" {
#include "../../core/ssmi.h"
}

/* The operators with a CUDA path. */
#define SSMI_CUDA_OP_LIST(X) \
    X(mamba2_chunk_state)    \
    X(mamba2_scan)           \
    X(mamba2_scan_bwd)       \
    X(mamba2_step)           \
    X(mamba3_siso_fwd)       \
    X(mamba3_siso)           \
    X(mamba3_siso_step)      \
    X(mamba3_mimo_bwd_fwd)   \
    X(mamba3_mimo)           \
    X(mamba3_mimo_step)      \
    X(mamba3_siso_bwd)       \
    X(causal_conv1d)         \
    X(causal_conv1d_bwd)     \
    X(causal_conv1d_update)  \
    X(rmsnorm_gated)         \
    X(rmsnorm_gated_bwd)     \
    X(mamba3_angle_cumsum)   \
    X(mamba3_angle_cumsum_bwd)   \
    X(mamba3_mimo_bwd)

#define SSMI_CUDA_DECLARE_(op) extern "C" int32_t ssmi_cuda_variants_##op(int32_t i, ssmi_variant_info * out);
SSMI_CUDA_OP_LIST(SSMI_CUDA_DECLARE_)
#undef SSMI_CUDA_DECLARE_

static int32_t variants_of(ssmi_op op, int32_t i, ssmi_variant_info * out) {
    switch (op) {
#define SSMI_CUDA_CASE_(op) \
    case SSMI_OP_##op: return ssmi_cuda_variants_##op(i, out);
        SSMI_CUDA_OP_LIST(SSMI_CUDA_CASE_)
#undef SSMI_CUDA_CASE_
        default: return 0;
    }
}

extern "C" int32_t ssmi_cuda_variant_count(ssmi_op op) { return variants_of(op, -1, NULL); }

extern "C" ssmi_variant_info ssmi_cuda_variant(ssmi_op op, int32_t i) {
    ssmi_variant_info info = {NULL, NULL};
    if (i >= 0 && i < variants_of(op, -1, NULL)) variants_of(op, i, &info);
    return info;
}
