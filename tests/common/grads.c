/* grads.c — see grads.h. */
#include "grads.h"

#include <string.h>

const char * const ssmt_m2_grad_names[NGRAD] = {
    "dx", "ddt", "da", "db", "dc", "dd", "dz", "ddt_bias", "dinitial_states"};

ssm_tensor * ssmt_m2_grad_slot(ssm_mamba2_scan_bwd_args * a, int k) {
    ssm_tensor * s[NGRAD] = {
        &a->dx, &a->ddt, &a->da, &a->db, &a->dc, &a->dd, &a->dz, &a->ddt_bias, &a->dinitial_states};
    return s[k];
}

ssm_tensor * ssmt_m2_grad_input(ssm_mamba2_scan_bwd_args * a, int k) {
    ssm_tensor * s[NGRAD] = {&a->x, &a->dt, &a->a, &a->b, &a->c, &a->d, &a->z, &a->dt_bias, &a->initial_states};
    return s[k];
}

void ssmt_m2_alloc_grads(ssm_mamba2_scan_bwd_args * a, ssm_dtype dtype, ssmt_host h[NGRAD], int strided_dx) {
    for (int k = 0; k < NGRAD; ++k) {
        memset(&h[k], 0, sizeof h[k]);
        const ssm_tensor * in = ssmt_m2_grad_input(a, k);
        if (in->data != NULL) {
            h[k] = (k == GX && strided_dx) ? ssmt_alloc_layout(dtype, in->ndim, in->shape, NULL, 2)
                                           : ssmt_alloc(dtype, in->ndim, in->shape);
            ssmt_poison(&h[k].t);
        }
        *ssmt_m2_grad_slot(a, k) = h[k].t;
    }
}

const char * const ssmt_siso_grad_names[SSMT_SISO_NGRADS] = {
    "dq",      "dk", "dv", "dadt",         "ddt",        "dtrap",    "dq_bias", "dk_bias",
    "dangles", "dd", "dz", "dangle_state", "dssm_state", "dk_state", "dv_state"};

ssm_tensor * ssmt_siso_grad_slot(ssm_mamba3_siso_bwd_args * a, int i) {
    ssm_tensor * s[SSMT_SISO_NGRADS] = {&a->dq,    &a->dk,           &a->dv,         &a->dadt,     &a->ddt,
                                        &a->dtrap, &a->dq_bias,      &a->dk_bias,    &a->dangles,  &a->dd,
                                        &a->dz,    &a->dangle_state, &a->dssm_state, &a->dk_state, &a->dv_state};
    return s[i];
}

const char * const ssmt_mimo_grad_names[SSMT_MIMO_NGRADS] = {
    "dq",           "dk",         "dv",       "dz",      "dq_bias",
    "dk_bias",      "dmimo_v",    "dmimo_z",  "dmimo_o", "dd",
    "dadt",         "ddt",        "dtrap",    "dangles", "doutproj_norm_weight",
    "dangle_state", "dssm_state", "dk_state", "dv_state"};

ssm_tensor * ssmt_mimo_grad_slot(ssm_mamba3_mimo_bwd_args * a, int i) {
    ssm_tensor * s[SSMT_MIMO_NGRADS] = {
        &a->dq,           &a->dk,         &a->dv,       &a->dz,      &a->dq_bias,
        &a->dk_bias,      &a->dmimo_v,    &a->dmimo_z,  &a->dmimo_o, &a->dd,
        &a->dadt,         &a->ddt,        &a->dtrap,    &a->dangles, &a->doutproj_norm_weight,
        &a->dangle_state, &a->dssm_state, &a->dk_state, &a->dv_state};
    return s[i];
}

void ssmt_free_all(ssmt_host * h, int n) {
    for (int k = 0; k < n; ++k) ssmt_free(&h[k]);
}
