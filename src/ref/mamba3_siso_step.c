/* Reference of mamba3_siso_step (spec §2.6, §3.4): per row and head, one iteration of the
 * recurrence for each of the row's tokens (one token b without cu_seqlens), in float64, from
 * the state pool row the row reads (core/step_slots.h). The four states (θ, h, k̂, v) stay
 * unrounded between the tokens; intermediate_* get them after each token. A token table
 * stores them after each token into the pools, else they go after the row's tokens to its
 * write slot (nothing when negative; a row of no token carries its read slot there).
 * Padding rows (read slot < 0) get out = 0 and intermediate_* = 0 for their tokens and
 * touch no state. Every value of a slot is read before any is written, and the validated
 * slot rules keep rows independent, so a final_* that is the same view as its input state
 * (in place) gives the same result. */
#include "../core/step_slots.h"
#include "ref_mamba3_common.h"
#include "ssmi_ref_mamba3.h"

/* The four states of head h (w) to row `row` of the pools angle, ssm, k, v (each may be
 * absent); zero: zeros instead. */
static void store_states(const ssmi_mamba3_dims * d, const ssm_tensor * angle, const ssm_tensor * ssm,
                         const ssm_tensor * k, const ssm_tensor * v, int64_t row, int64_t h,
                         const ssmi_ref_m3_token_scratch * w, int zero) {
    const int64_t K = d->dk, V = d->dv, A = d->nangles;
    if (ssmi_present(angle) && A > 0) {
        if (zero) ssmi_ref_m3_write_zero(angle, ssmi_off3(angle, row, h, 0), A);
        else ssmi_ref_m3_write(angle, ssmi_off3(angle, row, h, 0), w->theta, A);
    }
    if (ssmi_present(ssm))
        for (int64_t r = 0; r < V; ++r) {
            if (zero) ssmi_ref_m3_write_zero(ssm, ssmi_off4(ssm, row, h, r, 0), K);
            else ssmi_ref_m3_write(ssm, ssmi_off4(ssm, row, h, r, 0), w->hs + r * K, K);
        }
    if (ssmi_present(k)) {
        if (zero) ssmi_ref_m3_write_zero(k, ssmi_off3(k, row, h, 0), K);
        else ssmi_ref_m3_write(k, ssmi_off3(k, row, h, 0), w->kprev, K);
    }
    if (ssmi_present(v)) {
        if (zero) ssmi_ref_m3_write_zero(v, ssmi_off3(v, row, h, 0), V);
        else ssmi_ref_m3_write(v, ssmi_off3(v, row, h, 0), w->vprev, V);
    }
}

static void store_intermediate(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_step_args * a, int64_t t, int64_t h,
                               const ssmi_ref_m3_token_scratch * w, int zero) {
    store_states(d, &a->intermediate_angle_state, &a->intermediate_ssm_state, &a->intermediate_k_state,
                 &a->intermediate_v_state, t, h, w, zero);
}

static void store_final(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_step_args * a, int64_t slot, int64_t h,
                        const ssmi_ref_m3_token_scratch * w) {
    store_states(d, &a->final_angle_state, &a->final_ssm_state, &a->final_k_state, &a->final_v_state, slot, h, w, 0);
}

/* Token t of head h on the carried states in w; writes out[t, h]. */
static void step_token(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_step_args * a, int64_t t, int64_t h,
                       const ssmi_ref_m3_token_scratch * w) {
    const int64_t K = d->dk, V = d->dv, A = d->nangles, g = h / (d->nheads / d->nheads_qk);
    const double  dskip = ssmi_present(&a->d) ? ssmi_get_f64(&a->d, ssmi_off1(&a->d, h)) : 0.0;
    for (int64_t c = 0; c < K; ++c) {
        w->qt[c] =
            ssmi_get_f64(&a->q, ssmi_off3(&a->q, t, g, c)) + ssmi_get_f64(&a->q_bias, ssmi_off2(&a->q_bias, h, c));
        w->kt[c] =
            ssmi_get_f64(&a->k, ssmi_off3(&a->k, t, g, c)) + ssmi_get_f64(&a->k_bias, ssmi_off2(&a->k_bias, h, c));
    }
    ssmi_ref_m3_read(w->v, &a->v, ssmi_off3(&a->v, t, h, 0), V);
    if (ssmi_present(&a->z)) ssmi_ref_m3_read(w->z, &a->z, ssmi_off3(&a->z, t, h, 0), V);
    if (A > 0) ssmi_ref_m3_read(w->raw, &a->angles, ssmi_off3(&a->angles, t, h, 0), A);
    const double adt = ssmi_get_f64(&a->adt, ssmi_off2(&a->adt, t, h));
    const double dt = ssmi_get_f64(&a->dt, ssmi_off2(&a->dt, t, h));
    const double trap = ssmi_get_f64(&a->trap, ssmi_off2(&a->trap, t, h));
    ssmi_ref_m3_step_head(w->theta, w->hs, w->kprev, w->vprev, w->raw, w->qt, w->kt, w->v,
                          ssmi_present(&a->z) ? w->z : NULL, adt, dt, trap, dskip, K, V, A, w->qhat, w->y);
    ssmi_ref_m3_write(&a->out, ssmi_off3(&a->out, t, h, 0), w->y, V);
}

/* Row b, head h over its tokens [t0, t1) from read slot n. */
static void step_head(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_step_args * a, const ssmi_step_slots * sl,
                      int64_t b, int64_t t0, int64_t t1, int64_t n, int64_t h, const ssmi_ref_m3_token_scratch * w) {
    const int64_t      K = d->dk, V = d->dv, A = d->nangles;
    const ssm_tensor * table = ssmi_step_token_table(sl);
    if (A > 0) ssmi_ref_m3_read(w->theta, &a->angle_state, ssmi_off3(&a->angle_state, n, h, 0), A);
    ssmi_ref_m3_read(w->kprev, &a->k_state, ssmi_off3(&a->k_state, n, h, 0), K);
    ssmi_ref_m3_read(w->vprev, &a->v_state, ssmi_off3(&a->v_state, n, h, 0), V);
    for (int64_t r = 0; r < V; ++r)
        ssmi_ref_m3_read(w->hs + r * K, &a->ssm_state, ssmi_off4(&a->ssm_state, n, h, r, 0), K);
    for (int64_t t = t0; t < t1; ++t) {
        step_token(d, a, t, h, w);
        store_intermediate(d, a, t, h, w, 0);
        if (table == NULL) continue;
        const int64_t ws = ssmi_step_token_slot(table, b, t - t0);
        if (ws >= 0) store_final(d, a, ws, h, w);
    }
    if (table != NULL) return;
    const int64_t ws = ssmi_step_write_slot(sl, b);
    if (ws >= 0) store_final(d, a, ws, h, w);
}

ssm_status ssmi_ref_mamba3_siso_step(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                     const ssm_mamba3_siso_step_args * a) {
    (void)p;
    ssmi_ref_m3_token_scratch w;
    double *                  block;
    SSM_FORWARD_IF_ERROR(ssmi_ref_m3_token_scratch_alloc(ctx, "mamba3_siso_step", d, &w, &block));
    const ssmi_step_slots sl = {&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                                &a->num_accepted_tokens};
    for (int64_t b = 0; b < d->batch; ++b) {
        int64_t t0, t1;
        ssmi_step_tokens(&sl, b, &t0, &t1);
        const int64_t n = ssmi_step_read_slot(&sl, b);
        for (int64_t h = 0; h < d->nheads; ++h) {
            if (n >= 0) {
                step_head(d, a, &sl, b, t0, t1, n, h, &w);
                continue;
            }
            for (int64_t t = t0; t < t1; ++t) { /* padding row */
                ssmi_ref_m3_write_zero(&a->out, ssmi_off3(&a->out, t, h, 0), d->dv);
                store_intermediate(d, a, t, h, &w, 1);
            }
        }
    }
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}
