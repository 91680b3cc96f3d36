/* Reference of mamba3_siso (spec §2.4), two independent ways:
 *  - ssmi_ref_mamba3_siso: the angle cumsum into a float64 θ (never rounded), then the
 *    chunked core forward (mamba3_siso_fwd.c) on it;
 *  - ssmi_ref_mamba3_siso_recurrent: the recurrence of §3.4 token by token (the same step
 *    the decode operator runs), with its own θ.
 * Varlen: every sequence runs from its own states; an empty one passes them through. */
#include <stdio.h>
#include <string.h>

#include "ref_mamba3_common.h"
#include "ssmi_ref_mamba3.h"

ssm_status ssmi_ref_mamba3_siso(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                const ssm_mamba3_siso_args * a) {
    int           ok = 1;
    const int64_t sh[4] = {d->batch, d->seqlen, d->nheads, d->nangles};
    size_t        n = ssmi_ref_m3_mul(ssmi_ref_m3_mul((size_t)d->batch, (size_t)d->seqlen, &ok),
                                      ssmi_ref_m3_mul((size_t)d->nheads, (size_t)d->nangles, &ok), &ok);
    double *      theta_buf = NULL;
    double **     ptrs[1] = {&theta_buf};
    double *      block = NULL;
    SSM_RETURN_IF(!ok, ctx, SSM_STATUS_OUT_OF_MEMORY, "mamba3_siso: reference scratch size overflows size_t");
    SSM_FORWARD_IF_ERROR(ssmi_ref_m3_scratch(ctx, "mamba3_siso", 1, &n, ptrs, &block));
    const ssm_tensor                   theta = ssm_tensor_make(theta_buf, SSM_DTYPE_F64, 4, sh);
    const ssm_mamba3_angle_cumsum_args ang = {.angles = a->angles,
                                              .dt = a->dt,
                                              .angle_state = a->angle_state,
                                              .cu_seqlens = a->cu_seqlens,
                                              .angles_cumsum = theta,
                                              .final_angle_state = a->final_angle_state};
    const ssm_mamba3_siso_fwd_args     core = {.q = a->q,
                                               .k = a->k,
                                               .v = a->v,
                                               .adt = a->adt,
                                               .dt = a->dt,
                                               .trap = a->trap,
                                               .q_bias = a->q_bias,
                                               .k_bias = a->k_bias,
                                               .angles = theta,
                                               .d = a->d,
                                               .z = a->z,
                                               .ssm_state = a->ssm_state,
                                               .k_state = a->k_state,
                                               .v_state = a->v_state,
                                               .cu_seqlens = a->cu_seqlens,
                                               .out = a->out,
                                               .final_ssm_state = a->final_ssm_state,
                                               .final_k_state = a->final_k_state,
                                               .final_v_state = a->final_v_state,
                                               .pregate_y = a->pregate_y,
                                               .chunk_states = a->chunk_states};
    /* final_angle_state is written last, once the core (which allocates) has succeeded: a
     * failed call leaves every output untouched. The forward cumsum allocates nothing. */
    ssm_mamba3_angle_cumsum_args theta_only = ang;
    theta_only.final_angle_state.data = NULL; /* absent */
    ssm_status st = ssmi_ref_mamba3_angle_cumsum(ctx, p, d, &theta_only);
    if (st == SSM_STATUS_OK) {
        st = ssmi_ref_mamba3_siso_fwd(ctx, p, d, &core);
        if (st != SSM_STATUS_OK) { /* the core's message names this operator, not the core's */
            char         msg[SSMI_ERROR_LEN];
            const char * tail = strchr(ssm_context_last_error(ctx), ':');
            snprintf(msg, sizeof msg, "%s", tail != NULL ? tail + 1 : " the core forward failed");
            st = ssmi_error(ctx, st, "mamba3_siso:%s", msg);
        }
    }
    if (st == SSM_STATUS_OK && ssmi_present(&a->final_angle_state)) st = ssmi_ref_mamba3_angle_cumsum(ctx, p, d, &ang);
    ssmi_free(ctx, block);
    return st;
}

static void recurrent_head(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_args * a, const ssmi_ref_m3_seq * s,
                           int64_t h, const ssmi_ref_m3_token_scratch * w) {
    const int64_t K = d->dk, V = d->dv, A = d->nangles, g = h / (d->nheads / d->nheads_qk);
    const double  dskip = ssmi_present(&a->d) ? ssmi_get_f64(&a->d, ssmi_off1(&a->d, h)) : 0.0;
    ssmi_ref_m3_read_state3(w->theta, &a->angle_state, s->n, h, A);
    ssmi_ref_m3_read_state3(w->kprev, &a->k_state, s->n, h, K);
    ssmi_ref_m3_read_state3(w->vprev, &a->v_state, s->n, h, V);
    ssmi_ref_m3_read_state4(w->hs, &a->ssm_state, s->n, h, V, K);
    for (int64_t t = s->t0; t < s->t0 + s->len; ++t) {
        for (int64_t c = 0; c < K; ++c) {
            w->qt[c] = ssmi_get_f64(&a->q, ssmi_off4(&a->q, s->b, t, g, c)) +
                       ssmi_get_f64(&a->q_bias, ssmi_off2(&a->q_bias, h, c));
            w->kt[c] = ssmi_get_f64(&a->k, ssmi_off4(&a->k, s->b, t, g, c)) +
                       ssmi_get_f64(&a->k_bias, ssmi_off2(&a->k_bias, h, c));
        }
        ssmi_ref_m3_read(w->v, &a->v, ssmi_off4(&a->v, s->b, t, h, 0), V);
        if (ssmi_present(&a->z)) ssmi_ref_m3_read(w->z, &a->z, ssmi_off4(&a->z, s->b, t, h, 0), V);
        if (A > 0) ssmi_ref_m3_read(w->raw, &a->angles, ssmi_off4(&a->angles, s->b, t, h, 0), A);
        const double adt = ssmi_get_f64(&a->adt, ssmi_off3(&a->adt, s->b, h, t));
        const double dt = ssmi_get_f64(&a->dt, ssmi_off3(&a->dt, s->b, h, t));
        const double trap = ssmi_get_f64(&a->trap, ssmi_off3(&a->trap, s->b, h, t));
        ssmi_ref_m3_step_head(w->theta, w->hs, w->kprev, w->vprev, w->raw, w->qt, w->kt, w->v,
                              ssmi_present(&a->z) ? w->z : NULL, adt, dt, trap, dskip, K, V, A, w->qhat, w->y);
        ssmi_ref_m3_write(&a->out, ssmi_off4(&a->out, s->b, t, h, 0), w->y, V);
    }
    if (ssmi_present(&a->final_angle_state) && A > 0)
        ssmi_ref_m3_write(&a->final_angle_state, ssmi_off3(&a->final_angle_state, s->n, h, 0), w->theta, A);
    if (ssmi_present(&a->final_ssm_state))
        for (int64_t r = 0; r < V; ++r)
            ssmi_ref_m3_write(&a->final_ssm_state, ssmi_off4(&a->final_ssm_state, s->n, h, r, 0), w->hs + r * K, K);
    if (ssmi_present(&a->final_k_state))
        ssmi_ref_m3_write(&a->final_k_state, ssmi_off3(&a->final_k_state, s->n, h, 0), w->kprev, K);
    if (ssmi_present(&a->final_v_state))
        ssmi_ref_m3_write(&a->final_v_state, ssmi_off3(&a->final_v_state, s->n, h, 0), w->vprev, V);
}

ssm_status ssmi_ref_mamba3_siso_recurrent(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                          const ssm_mamba3_siso_args * a) {
    (void)p;
    ssmi_ref_m3_token_scratch w;
    double *                  block;
    SSM_FORWARD_IF_ERROR(ssmi_ref_m3_token_scratch_alloc(ctx, "mamba3_siso", d, &w, &block));
    for (int64_t q = 0; q < d->nseq; ++q) {
        const ssmi_ref_m3_seq s = ssmi_ref_m3_sequence(d, &a->cu_seqlens, q);
        for (int64_t h = 0; h < d->nheads; ++h) recurrent_head(d, a, &s, h, &w);
    }
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}
