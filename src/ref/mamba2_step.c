/* Reference of mamba2_step (spec §2.9) in float64, per batch row b, head h, channel p:
 *   v = clamp(softplus?(dt[b,h,p] + dt_bias[h,p]), lo, hi)     (the forward's dt_limit)
 *   s[n] = state[slot,h,p,n]·exp(a[h,p,n]·v) + v·b[b,g,n]·x[b,h,p]
 *   y = Σ_n s[n]·c[b,g,n] + d[h,p]·x[b,h,p];  out = y·silu(z) if z
 * The output uses the unrounded s (trap T19); final_state gets s rounded to its dtype.
 * A padding row (slot < 0) gets out = 0 and touches no slot. final_state is the whole pool
 * after the update: when it is not the state view itself, slots no row uses are copied. */
#include <string.h>

#include "ref_common.h"
#include "ssmi_ref.h"

static int64_t slot_of(const ssm_mamba2_step_args * a, int64_t b) {
    const ssm_tensor * idx = &a->state_batch_indices;
    return ssmi_present(idx) ? ssmi_get_i64(idx, ssmi_off1(idx, b)) : b;
}

static double opt2(const ssm_tensor * t, int64_t i, int64_t j) {
    return ssmi_present(t) ? ssmi_get_f64(t, ssmi_off2(t, i, j)) : 0.0;
}

/* One (b, h, p): updates the state row (when final_state is present) and returns out. */
static double step_channel(const ssm_mamba2_params * prm, const ssmi_mamba2_dims * d, const ssm_mamba2_step_args * a,
                           int64_t b, int64_t h, int64_t p, int64_t slot) {
    const int64_t g = h / (d->nheads / d->ngroups);
    const double  xv = ssmi_get_f64(&a->x, ssmi_off3(&a->x, b, h, p));
    const double  v = ssmi_ref_process_dt(prm, ssmi_get_f64(&a->dt, ssmi_off3(&a->dt, b, h, p)), opt2(&a->dt_bias, h, p));
    double        y = 0.0;
    for (int64_t n = 0; n < d->dstate; ++n) {
        const double st = ssmi_get_f64(&a->state, ssmi_off4(&a->state, slot, h, p, n));
        const double an = ssmi_get_f64(&a->a, ssmi_off3(&a->a, h, p, n));
        const double bn = ssmi_get_f64(&a->b, ssmi_off3(&a->b, b, g, n));
        const double s = st * exp(an * v) + v * bn * xv;
        if (ssmi_present(&a->final_state)) ssmi_set_f64(&a->final_state, ssmi_off4(&a->final_state, slot, h, p, n), s);
        y += s * ssmi_get_f64(&a->c, ssmi_off3(&a->c, b, g, n));
    }
    y += opt2(&a->d, h, p) * xv;
    if (ssmi_present(&a->z)) y *= ssmi_ref_silu(ssmi_get_f64(&a->z, ssmi_off3(&a->z, b, h, p)));
    return y;
}

ssm_status ssmi_ref_mamba2_step(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                const ssm_mamba2_step_args * a) {
    (void)ctx;
    for (int64_t b = 0; b < d->batch; ++b) {
        const int64_t slot = slot_of(a, b);
        for (int64_t h = 0; h < d->nheads; ++h)
            for (int64_t ch = 0; ch < d->headdim; ++ch) {
                const double y = slot < 0 ? 0.0 : step_channel(p, d, a, b, h, ch, slot);
                ssmi_set_f64(&a->out, ssmi_off3(&a->out, b, h, ch), y);
            }
    }
    return SSM_STATUS_OK;
}
