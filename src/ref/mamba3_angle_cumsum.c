/* Reference of mamba3_angle_cumsum and its backward (spec §3.2, §6.6) in float64.
 * Forward: per sequence, head and pair i, θ_t = wrap(θ_{t−1} + π·tanh(angles_t)·dt_t) from
 * θ_{−1} = angle_state (or 0); the running value is wrapped at every token, exactly as the
 * step operator does, so S steps reproduce this to the last bit. An empty sequence leaves
 * the angle state as it is (final = initial, unwrapped).
 * Backward: G_t = Σ_{u≥t} dθ_u + dθ_final; dangles = π·dt·(1 − tanh²)·G,
 * ddt = π·Σ_i tanh·G_i, dangle_state = G_0 (= dθ_final for an empty sequence). */
#include "ref_mamba3_common.h"
#include "ssmi_ref_mamba3.h"

ssm_status ssmi_ref_mamba3_angle_cumsum(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                        const ssm_mamba3_angle_cumsum_args * a) {
    (void)ctx;
    (void)p;
    const ssm_tensor * in = &a->angles, *dt = &a->dt, *st = &a->angle_state, *out = &a->angles_cumsum;
    const ssm_tensor * fin = &a->final_angle_state;
    for (int64_t q = 0; q < d->nseq; ++q) {
        const ssmi_ref_m3_seq s = ssmi_ref_m3_sequence(d, &a->cu_seqlens, q);
        for (int64_t h = 0; h < d->nheads; ++h)
            for (int64_t i = 0; i < d->nangles; ++i) {
                double run = ssmi_present(st) ? ssmi_get_f64(st, ssmi_off3(st, q, h, i)) : 0.0;
                for (int64_t t = s.t0; t < s.t0 + s.len; ++t) {
                    const double raw = ssmi_get_f64(in, ssmi_off4(in, s.b, t, h, i));
                    const double dtv = ssmi_get_f64(dt, ssmi_off3(dt, s.b, h, t));
                    run = ssmi_ref_m3_wrap(run + ssmi_ref_m3_omega(raw, dtv));
                    ssmi_set_f64(out, ssmi_off4(out, s.b, t, h, i), run);
                }
                if (ssmi_present(fin)) ssmi_set_f64(fin, ssmi_off3(fin, q, h, i), run);
            }
    }
    return SSM_STATUS_OK;
}

ssm_status ssmi_ref_mamba3_angle_cumsum_bwd(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                            const ssm_mamba3_angle_cumsum_bwd_args * a) {
    (void)p;
    const ssm_tensor *g = &a->dangles_cumsum, *gfin = &a->dfinal_angle_state, *in = &a->angles, *dt = &a->dt;
    const ssm_tensor *dang = &a->dangles, *ddt = &a->ddt, *dst = &a->dangle_state;
    const int64_t     A = d->nangles;
    double *          acc = NULL; /* G_t of every pair, carried backwards over t */
    if (A > 0) {
        acc = ssmi_alloc(ctx, (size_t)A * sizeof(double));
        SSM_RETURN_IF(acc == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY,
                      "mamba3_angle_cumsum_bwd: could not allocate %zu bytes of reference scratch",
                      (size_t)A * sizeof(double));
    }
    for (int64_t q = 0; q < d->nseq; ++q) {
        const ssmi_ref_m3_seq s = ssmi_ref_m3_sequence(d, &a->cu_seqlens, q);
        for (int64_t h = 0; h < d->nheads; ++h) {
            for (int64_t i = 0; i < A; ++i)
                acc[i] = ssmi_present(gfin) ? ssmi_get_f64(gfin, ssmi_off3(gfin, q, h, i)) : 0.0;
            for (int64_t t = s.t0 + s.len - 1; t >= s.t0; --t) {
                const double dtv = ssmi_get_f64(dt, ssmi_off3(dt, s.b, h, t));
                double       ddt_t = 0.0;
                for (int64_t i = 0; i < A; ++i) {
                    acc[i] += ssmi_get_f64(g, ssmi_off4(g, s.b, t, h, i));
                    const double th = tanh(ssmi_get_f64(in, ssmi_off4(in, s.b, t, h, i)));
                    ssmi_set_f64(dang, ssmi_off4(dang, s.b, t, h, i), SSMI_REF_PI * dtv * (1.0 - th * th) * acc[i]);
                    ddt_t += SSMI_REF_PI * th * acc[i];
                }
                ssmi_set_f64(ddt, ssmi_off3(ddt, s.b, h, t), ddt_t);
            }
            if (ssmi_present(dst))
                for (int64_t i = 0; i < A; ++i) ssmi_set_f64(dst, ssmi_off3(dst, q, h, i), acc[i]);
        }
    }
    ssmi_free(ctx, acc);
    return SSM_STATUS_OK;
}
