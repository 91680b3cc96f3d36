/* Shared helpers of the Mamba-3 SISO CPU drivers (see mamba3_common.h). */
#include <string.h>

#include "mamba3_common.h"

static const ssmi_cpu_m3_kernels scalar_m3 = {
    &ssmi_cpu_scalar_kernels,
    ssmi_f32_angle_rate__scalar,
    ssmi_f32_angle_advance__scalar,
    ssmi_f32_angle_step__scalar,
    ssmi_f32_vtanh__scalar,
    ssmi_f32_sincos_pairs__scalar,
    ssmi_f32_bias_rotate_qk__scalar,
    ssmi_f32_rotate__scalar,
    ssmi_f32_siso_state_step__scalar,
};

/* The AVX2 Mamba-3 kernels after a base table (GEMM and row conversions). */
#define SSMI_M3_AVX2_KERNELS                                                                             \
    ssmi_f32_angle_rate__avx2, ssmi_f32_angle_advance__avx2, ssmi_f32_angle_step__avx2, ssmi_f32_vtanh__avx2, \
        ssmi_f32_sincos_pairs__avx2, ssmi_f32_bias_rotate_qk__avx2, ssmi_f32_rotate__avx2,                \
        ssmi_f32_siso_state_step__avx2

static const ssmi_cpu_m3_kernels avx2_m3 = {&ssmi_cpu_avx2_kernels, SSMI_M3_AVX2_KERNELS};

/* The AVX2 Mamba-3 kernels on the AVX-512 base table (its GEMM and row conversions). */
static const ssmi_cpu_m3_kernels avx512_m3 = {&ssmi_cpu_avx512_kernels, SSMI_M3_AVX2_KERNELS};

const ssmi_cpu_m3_kernels * ssmi_cpu_m3_kernels_for(const ssm_context * ctx) {
    /* ssmi_context_isa never returns an ISA the host lacks (context creation refuses it). */
    switch (ssmi_context_isa(ctx)) {
        case SSM_ISA_AVX512: return &avx512_m3;
        case SSM_ISA_AVX2: return &avx2_m3;
        default: return &scalar_m3;
    }
}

void ssmi_cpu_m3_token_scalars(const ssmi_cpu_m3_kernels * k, const ssm_tensor * adt, const ssm_tensor * dt,
                               const ssm_tensor * trap, int64_t row, int64_t h, int64_t t0, int64_t n,
                               int64_t t_end, float * tmp, float * adt_o, float * dt_o, float * lam_o,
                               float * gamma_o, float * sigma_o) {
    const ssmi_cpu_kernels * b     = k->base;
    const int64_t            nload = t0 + n < t_end ? n + 1 : n; /* the next token, if any */
    float *                  dtv = tmp, *lam = tmp + n + 1;
    b->load_row(dtv, dt->data, dt->dtype, ssmi_off3(dt, row, h, t0), dt->strides[2], nload);
    b->load_row(lam, trap->data, trap->dtype, ssmi_off3(trap, row, h, t0), trap->strides[2], nload);
    for (int64_t i = 0; i < nload; ++i) lam[i] = ssmi_cpu_m3_sigmoid(lam[i]);
    if (nload == n) dtv[n] = 0.0f, lam[n] = 0.0f;
    if (adt_o) b->load_row(adt_o, adt->data, adt->dtype, ssmi_off3(adt, row, h, t0), adt->strides[2], n);
    for (int64_t i = 0; i < n; ++i) {
        const float g = dtv[i] * lam[i];
        if (gamma_o) gamma_o[i] = g;
        /* γ'_i = dt_{i+1}(1 − λ_{i+1}); entry n is (0, 0) at the sequence end, giving 0 */
        if (sigma_o) sigma_o[i] = g + dtv[i + 1] * (1.0f - lam[i + 1]);
    }
    if (dt_o) memcpy(dt_o, dtv, (size_t) (n + 1) * sizeof(float));
    if (lam_o) memcpy(lam_o, lam, (size_t) (n + 1) * sizeof(float));
}

void ssmi_cpu_m3_angle_run(const ssmi_cpu_m3_kernels * k, const ssm_tensor * angles, int64_t row, int64_t h,
                           int64_t t0, int64_t n, int64_t A, const float * dt, float * theta, float * raw,
                           const ssm_tensor * out) {
    if (A == 0) return;
    for (int64_t i = 0; i < n; ++i) {
        k->base->load_row(raw, angles->data, angles->dtype, ssmi_off4(angles, row, t0 + i, h, 0), angles->strides[3],
                          A);
        k->angle_rate(A, raw, raw);
        k->angle_advance(A, theta, raw, dt[i]);
        if (ssmi_present(out))
            k->base->store_row(out->data, out->dtype, ssmi_off4(out, row, t0 + i, h, 0), out->strides[3], theta, A);
    }
}

void ssmi_cpu_m3_load_state_kv(const ssmi_cpu_m3_kernels * k, const ssm_tensor * state, int64_t s, int64_t h,
                               int64_t K, int64_t V, float * s_kv) {
    for (int64_t n = 0; n < K; ++n)
        k->base->load_row(s_kv + n * V, state->data, state->dtype, ssmi_off4(state, s, h, 0, n), state->strides[2], V);
}

void ssmi_cpu_m3_store_state_kv(const ssmi_cpu_m3_kernels * k, const ssm_tensor * state, int64_t s, int64_t h,
                                int64_t K, int64_t V, const float * s_kv) {
    for (int64_t n = 0; n < K; ++n)
        k->base->store_row(state->data, state->dtype, ssmi_off4(state, s, h, 0, n), state->strides[2], s_kv + n * V, V);
}

void ssmi_cpu_m3_fold_initial(int64_t K, int64_t V, float c0, const float * k_in, const float * v_in, float * s_kv) {
    for (int64_t n = 0; n < K; ++n) {
        const float kn  = c0 * k_in[n];
        float *     row = s_kv + n * V;
        for (int64_t p = 0; p < V; ++p) row[p] += kn * v_in[p];
    }
}

void ssmi_cpu_m3_load_row3(const ssmi_cpu_m3_kernels * k, const ssm_tensor * t, int64_t i0, int64_t i1, int64_t n,
                           float * dst) {
    if (!ssmi_present(t)) {
        memset(dst, 0, (size_t) n * sizeof(float));
        return;
    }
    k->base->load_row(dst, t->data, t->dtype, ssmi_off3(t, i0, i1, 0), t->strides[2], n);
}

void ssmi_cpu_m3_store_row3(const ssmi_cpu_m3_kernels * k, const ssm_tensor * t, int64_t i0, int64_t i1,
                            int64_t n, const float * src) {
    if (!ssmi_present(t)) return;
    k->base->store_row(t->data, t->dtype, ssmi_off3(t, i0, i1, 0), t->strides[2], src, n);
}
