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

void ssmt_m2_bwd_args(ssmt_rng * rng, const ssmt_mamba2_config * cfg, const ssmt_mamba2_problem * prob, int64_t chunk,
                      int limit, int with_dfinal, ssm_mamba2_params * p, ssmt_host * dout, ssmt_host * dfinal,
                      ssm_mamba2_scan_bwd_args * a) {
    ssm_mamba2_params_init(p);
    p->chunk_size = chunk;
    p->dt_softplus = cfg->dt_softplus;
    if (limit) p->dt_limit_lo = 0.002, p->dt_limit_hi = 0.08;
    *dout = ssmt_alloc(cfg->dtype, 4, prob->x.t.shape);
    ssmt_fill_normal(rng, &dout->t, 0.0, 1.0);
    memset(dfinal, 0, sizeof *dfinal);
    if (with_dfinal) {
        const int64_t lead = prob->nseq > 0 ? prob->nseq : cfg->batch;
        const int64_t sst[4] = {lead, cfg->nheads, cfg->headdim, cfg->dstate};
        *dfinal = ssmt_alloc(SSM_DTYPE_F32, 4, sst);
        ssmt_fill_normal(rng, &dfinal->t, 0.0, 1.0);
    }
    memset(a, 0, sizeof *a);
    a->x = prob->x.t, a->dt = prob->dt.t, a->a = prob->a.t, a->b = prob->b.t, a->c = prob->c.t, a->d = prob->d.t;
    a->z = prob->z.t, a->dt_bias = prob->dt_bias.t, a->initial_states = prob->initial_states.t;
    a->seq_idx = prob->seq_idx.t, a->cu_seqlens = prob->cu_seqlens.t, a->dout = dout->t, a->dfinal_states = dfinal->t;
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

int ssmt_siso_bwd_reference(ssmt_rng * rng, ssm_context * ref, const char * name, const ssmt_mamba3_config * cfg,
                            int has_dfinal, int only_some, ssmt_mamba3_problem * prob, ssmt_mamba3_bwd_problem * bwd,
                            ssm_mamba3_params * p, ssm_mamba3_siso_bwd_args * args) {
    const int have_prob = ssmt_mamba3_random_args(rng, cfg, prob) == 0;
    if (!have_prob || ssmt_mamba3_bwd_alloc(rng, cfg, prob, has_dfinal, bwd) != 0) {
        if (have_prob) ssmt_mamba3_problem_free(prob);
        TEST_CHECK(0, "%s: allocation failed", name);
        return -1;
    }
    ssmt_mamba3_params(cfg, p);
    *args = bwd->args;
    if (only_some)
        for (int g = 0; g < SSMT_SISO_NGRADS; ++g)
            if (g != 2 && g != 4 && g != 6 && g != 8) memset(ssmt_siso_grad_slot(args, g), 0, sizeof(ssm_tensor));
    const ssm_status st = ssm_mamba3_siso_bwd(ref, p, args);
    TEST_CHECK(st == SSM_STATUS_OK, "%s: reference: %s (%s)", name, ssm_status_string(st), ssm_context_last_error(ref));
    return 0;
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

static ssm_tensor * siso_slot(void * args, int g) { return ssmt_siso_grad_slot(args, g); }
static ssm_tensor * mimo_slot(void * args, int g) { return ssmt_mimo_grad_slot(args, g); }

static ssm_status siso_run(ssm_context * ctx, const void * params, void * args) {
    return ssm_mamba3_siso_bwd(ctx, params, args);
}
static ssm_status mimo_run(ssm_context * ctx, const void * params, void * args) {
    return ssm_mamba3_mimo_bwd(ctx, params, args);
}
const ssmt_bwd_op ssmt_siso_bwd_op = {SSMT_SISO_NGRADS, ssmt_siso_grad_names, siso_slot, siso_run,
                                      sizeof(ssm_mamba3_siso_bwd_args)};
const ssmt_bwd_op ssmt_mimo_bwd_op = {SSMT_MIMO_NGRADS, ssmt_mimo_grad_names, mimo_slot, mimo_run,
                                      sizeof(ssm_mamba3_mimo_bwd_args)};

void ssmt_bwd_cpu_variants(const ssmt_bwd_op * op, const char * name, const void * params, void * args, int strided,
                           ssmt_bar bar, ssm_context * const cpu[4], ssm_context * scalar, double * worst,
                           ssmt_host * first) {
    enum { MAXG = SSMT_MIMO_NGRADS > SSMT_SISO_NGRADS ? SSMT_MIMO_NGRADS : SSMT_SISO_NGRADS };
    memset(first, 0, (size_t)op->ngrads * sizeof *first);
    for (int variant = 0; variant < 4; ++variant) {
        ssm_context * ctx = variant < 3 ? cpu[variant + 1] : scalar;
        if (ctx == NULL) continue;
        union {
            ssm_mamba3_siso_bwd_args siso;
            ssm_mamba3_mimo_bwd_args mimo;
        } ca;
        memcpy(&ca, args, op->args_size);
        ssmt_host got[MAXG];
        memset(got, 0, sizeof got);
        for (int g = 0; g < op->ngrads; ++g) {
            ssm_tensor * slot = op->slot(&ca, g);
            if (slot->data == NULL) continue;
            got[g] = strided ? ssmt_alloc_layout(SSM_DTYPE_F32, slot->ndim, slot->shape, NULL, 3)
                             : ssmt_alloc(SSM_DTYPE_F32, slot->ndim, slot->shape);
            *slot = got[g].t;
        }
        const ssm_status s = op->run(ctx, params, &ca);
        TEST_CHECK(s == SSM_STATUS_OK, "%s variant %d: %s (%s)", name, variant, ssm_status_string(s),
                   ssm_context_last_error(ctx));
        for (int g = 0; g < op->ngrads; ++g) {
            if (got[g].t.data == NULL) continue;
            if (variant == 0 || variant == 3) {
                const double rr = ssmt_check_variant(name, op->names[g], variant == 0 ? "cpu" : "scalar", &got[g].t,
                                                     op->slot(args, g), bar);
                if (rr > worst[g] || rr != rr) worst[g] = rr;
            }
            if (variant == 0) {
                first[g] = got[g];
            } else {
                if (variant < 3)
                    TEST_CHECK(memcmp(first[g].buf, got[g].buf, got[g].bytes) == 0, "%s/%s: %d threads differ from 1",
                               name, op->names[g], variant + 1);
                ssmt_free(&got[g]);
            }
        }
    }
}

void ssmt_free_all(ssmt_host * h, int n) {
    for (int k = 0; k < n; ++k) ssmt_free(&h[k]);
}
