/* Reference of mamba2_step (spec §2.9) in float64, per batch row b, head h, channel p and
 * each token t of the row (one token b without cu_seqlens):
 *   v = clamp(softplus?(dt[t,h,p] + dt_bias[h,p]), lo, hi)     (the forward's dt_limit)
 *   s[n] = s[n]·exp(a[h,p,n]·v) + v·b[t,g,n]·x[t,h,p]           (s starts as the read slot)
 *   y = Σ_n s[n]·c[t,g,n] + d[h,p]·x[t,h,p];  out[t] = y·silu(z) if z
 * s stays unrounded across the tokens of a row and for the output (trap T19); the states
 * stored (final_state, intermediate_states) get s rounded to their dtype. The slots follow
 * core/step_slots.h: a padding row gets out = 0 and intermediate_states = 0 for its tokens
 * and touches no slot; a token table stores the state after each token into the pool, else
 * the state after the row's tokens goes to its write slot. The validated slot rules make
 * rows independent (no row reads a slot another row writes in place), and each (h, p) row
 * of the read slot is read before anything of that (h, p) is written, so in-place tables
 * that reuse the read slot are safe. final_state is the whole pool after the update: when
 * it is not the state view itself, slots no row writes are copied (dispatch.c). */
#include <string.h>

#include "../core/step_slots.h"
#include "ref_common.h"
#include "ssmi_ref.h"

static double opt2(const ssm_tensor * t, int64_t i, int64_t j) {
    return ssmi_present(t) ? ssmi_get_f64(t, ssmi_off2(t, i, j)) : 0.0;
}

/* Writes s (N values) to state row (slot, h, p) of pool t. */
static void store_state(const ssm_tensor * t, int64_t slot, int64_t h, int64_t p, const double * s, int64_t N) {
    for (int64_t n = 0; n < N; ++n) ssmi_set_f64(t, ssmi_off4(t, slot, h, p, n), s[n]);
}

/* Advances s (N values) by token t of head h, channel p; returns out[t, h, p]. */
static double step_token(const ssm_mamba2_params * prm, const ssmi_mamba2_dims * d, const ssm_mamba2_step_args * a,
                         int64_t t, int64_t h, int64_t p, double * s) {
    const int64_t g = h / (d->nheads / d->ngroups);
    const double  xv = ssmi_get_f64(&a->x, ssmi_off3(&a->x, t, h, p));
    const double  v = ssmi_ref_process_dt(prm, ssmi_get_f64(&a->dt, ssmi_off3(&a->dt, t, h, p)), opt2(&a->dt_bias, h, p));
    double        y = 0.0;
    for (int64_t n = 0; n < d->dstate; ++n) {
        const double an = ssmi_get_f64(&a->a, ssmi_off3(&a->a, h, p, n));
        const double bn = ssmi_get_f64(&a->b, ssmi_off3(&a->b, t, g, n));
        s[n] = s[n] * exp(an * v) + v * bn * xv;
        y += s[n] * ssmi_get_f64(&a->c, ssmi_off3(&a->c, t, g, n));
    }
    y += opt2(&a->d, h, p) * xv;
    if (ssmi_present(&a->z)) y *= ssmi_ref_silu(ssmi_get_f64(&a->z, ssmi_off3(&a->z, t, h, p)));
    return y;
}

/* Row b, head h, channel p over the row's tokens [t0, t1), from read slot rs. */
static void step_channel(const ssm_mamba2_params * prm, const ssmi_mamba2_dims * d, const ssm_mamba2_step_args * a,
                         const ssmi_step_slots * sl, int64_t b, int64_t t0, int64_t t1, int64_t rs, int64_t h,
                         int64_t p, double * s) {
    const int64_t      N = d->dstate;
    const int          has_final = ssmi_present(&a->final_state);
    const ssm_tensor * table = ssmi_step_token_table(sl);
    for (int64_t n = 0; n < N; ++n) s[n] = ssmi_get_f64(&a->state, ssmi_off4(&a->state, rs, h, p, n));
    for (int64_t t = t0; t < t1; ++t) {
        ssmi_set_f64(&a->out, ssmi_off3(&a->out, t, h, p), step_token(prm, d, a, t, h, p, s));
        if (ssmi_present(&a->intermediate_states)) store_state(&a->intermediate_states, t, h, p, s, N);
        if (table != NULL && has_final) {
            const int64_t ws = ssmi_step_token_slot(table, b, t - t0);
            if (ws >= 0) store_state(&a->final_state, ws, h, p, s, N);
        }
    }
    if (table == NULL && has_final) {
        const int64_t ws = ssmi_step_write_slot(sl, b);
        if (ws >= 0) store_state(&a->final_state, ws, h, p, s, N);
    }
}

ssm_status ssmi_ref_mamba2_step(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                const ssm_mamba2_step_args * a) {
    const ssmi_step_slots sl = {&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                                &a->num_accepted_tokens};
    double *              s = (double *)ssmi_alloc(ctx, (size_t)(d->dstate > 0 ? d->dstate : 1) * sizeof(double));
    SSM_RETURN_IF(s == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "mamba2_step: could not allocate the reference's state row");
    for (int64_t b = 0; b < d->batch; ++b) {
        int64_t t0, t1;
        ssmi_step_tokens(&sl, b, &t0, &t1);
        const int64_t rs = ssmi_step_read_slot(&sl, b);
        for (int64_t h = 0; h < d->nheads; ++h)
            for (int64_t ch = 0; ch < d->headdim; ++ch) {
                if (rs >= 0) {
                    step_channel(p, d, a, &sl, b, t0, t1, rs, h, ch, s);
                    continue;
                }
                for (int64_t t = t0; t < t1; ++t) { /* padding row */
                    ssmi_set_f64(&a->out, ssmi_off3(&a->out, t, h, ch), 0.0);
                    for (int64_t n = 0; n < d->dstate && ssmi_present(&a->intermediate_states); ++n)
                        ssmi_set_f64(&a->intermediate_states, ssmi_off4(&a->intermediate_states, t, h, ch, n), 0.0);
                }
            }
    }
    ssmi_free(ctx, s);
    return SSM_STATUS_OK;
}
