/* Kernel tables of the Mamba-2 CPU backend, and the standalone ops' scratch. */
#include "cpu_common.h"

const ssmi_cpu_kernels ssmi_cpu_scalar_kernels = {
    "scalar",
    ssmi_f32_gemm_ukernel__scalar,
    ssmi_f32_vexp__scalar,
    ssmi_f32_decay_rows__scalar,
    ssmi_f32_silu_gate__scalar,
    ssmi_load_row__scalar,
    ssmi_store_row__scalar,
};

const ssmi_cpu_kernels ssmi_cpu_avx2_kernels = {
    "avx2",
    ssmi_f32_gemm_ukernel__avx2_6x16,
    ssmi_f32_vexp__avx2,
    ssmi_f32_decay_rows__avx2,
    ssmi_f32_silu_gate__avx2,
    ssmi_load_row__avx2,
    ssmi_store_row__avx2,
};

/* The AVX2 table with the kernels that have an AVX-512 version replaced. */
const ssmi_cpu_kernels ssmi_cpu_avx512_kernels = {
    "avx512",
    ssmi_f32_gemm_ukernel__avx512_8x32,
    ssmi_f32_vexp__avx2,
    ssmi_f32_decay_rows__avx2,
    ssmi_f32_silu_gate__avx2,
    ssmi_load_row__avx512,
    ssmi_store_row__avx512,
};

const ssmi_cpu_kernels * ssmi_cpu_kernels_for(const ssm_context * ctx) {
    /* ssmi_context_isa never returns an ISA the host lacks (context creation refuses it). */
    switch (ssmi_context_isa(ctx)) {
        case SSM_ISA_AVX512: return &ssmi_cpu_avx512_kernels;
        case SSM_ISA_AVX2: return &ssmi_cpu_avx2_kernels;
        default: return &ssmi_cpu_scalar_kernels;
    }
}

static const ssmi_cpu_layer_kernels scalar_layer_kernels = {
    ssmi_f32_conv_weights__scalar,
    ssmi_f32_conv_row__scalar,
    ssmi_f32_conv_grad_row__scalar,
    ssmi_f32_conv_wgrad_row__scalar,
    ssmi_f32_conv_dx_row__scalar,
    ssmi_f32_add_row__scalar,
    ssmi_f32_rmsnorm_row__scalar,
    ssmi_f32_rmsnorm_bwd_row__scalar,
};

static const ssmi_cpu_layer_kernels avx2_layer_kernels = {
    ssmi_f32_conv_weights__avx2,
    ssmi_f32_conv_row__avx2,
    ssmi_f32_conv_grad_row__avx2,
    ssmi_f32_conv_wgrad_row__avx2,
    ssmi_f32_conv_dx_row__avx2,
    ssmi_f32_add_row__avx2,
    ssmi_f32_rmsnorm_row__avx2,
    ssmi_f32_rmsnorm_bwd_row__avx2,
};

const ssmi_cpu_layer_kernels * ssmi_cpu_layer_kernels_for(const ssm_context * ctx) {
    return ssmi_context_avx2(ctx) ? &avx2_layer_kernels : &scalar_layer_kernels;
}

void ssmi_cpu_sequence(const ssm_tensor * cu_seqlens, int64_t seqlen, int64_t s, int64_t * row, int64_t * t0,
                       int64_t * len) {
    if (ssmi_present(cu_seqlens)) {
        const int64_t a = ssmi_get_i64(cu_seqlens, ssmi_off1(cu_seqlens, s));
        const int64_t b = ssmi_get_i64(cu_seqlens, ssmi_off1(cu_seqlens, s + 1));
        *row = 0, *t0 = a, *len = b - a;
    } else {
        *row = s, *t0 = 0, *len = seqlen;
    }
}

float * ssmi_cpu_thread_scratch(ssm_context * ctx, const char * op, int64_t floats_per_thread) {
    const int64_t threads = ssmi_num_threads(ctx);
    const size_t  bytes   = (size_t) threads * (size_t) ssmi_cpu_lines(floats_per_thread) * sizeof(float);
    float *       p       = (float *) ssmi_alloc(ctx, bytes > 0 ? bytes : SSMI_ALIGN);
    if (p == NULL) ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: could not allocate %zu bytes of scratch", op, bytes);
    return p;
}

int64_t * ssmi_cpu_chunk_rows(ssm_context * ctx, const char * op, const ssm_tensor * cu_seqlens, int64_t seqlen,
                              int64_t nseq, int64_t chunk) {
    int64_t * row0 = (int64_t *)ssmi_alloc(ctx, (size_t)(nseq > 0 ? nseq : 1) * sizeof(int64_t));
    if (row0 == NULL) {
        ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no memory for the chunk_states row plan", op);
        return NULL;
    }
    int64_t rows = 0;
    for (int64_t s = 0; s < nseq; ++s) {
        int64_t r, t0, len;
        ssmi_cpu_sequence(cu_seqlens, seqlen, s, &r, &t0, &len);
        row0[s] = rows;
        rows += (len + chunk - 1) / chunk;
    }
    return row0;
}
