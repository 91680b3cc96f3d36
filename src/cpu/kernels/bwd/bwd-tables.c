/* The backward kernel table for the context ISA (see bwd.h). */
#include "../../../core/ssmi.h"
#include "bwd.h"
#include "bwd-tables.h"

static const ssmi_cpu_bwd_kernels scalar_bwd = {
    ssmi_f32_transpose__scalar,
    ssmi_f32_dot__scalar,
    ssmi_f32_colsum_dot__scalar,
    ssmi_f32_exp_sub__scalar,
    ssmi_f32_gate_grads__scalar,
    ssmi_f32_siso_bwd_prep__scalar,
    ssmi_f32_siso_bwd_token__scalar,
};

static const ssmi_cpu_bwd_kernels avx2_bwd = {
    ssmi_f32_transpose__avx2,
    ssmi_f32_dot__avx2,
    ssmi_f32_colsum_dot__avx2,
    ssmi_f32_exp_sub__avx2,
    ssmi_f32_gate_grads__avx2,
    ssmi_f32_siso_bwd_prep__avx2,
    ssmi_f32_siso_bwd_token__avx2,
};

const ssmi_cpu_bwd_kernels * ssmi_cpu_bwd_kernels_for(const ssm_context * ctx) {
    /* ssmi_context_isa never returns an ISA the host lacks (context creation refuses it). */
    return ssmi_context_avx2(ctx) ? &avx2_bwd : &scalar_bwd;
}
