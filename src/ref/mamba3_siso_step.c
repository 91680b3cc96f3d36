/* Reference of mamba3_siso_step (spec §2.6, §3.4): one iteration of the recurrence per
 * batch row and head, in float64, from the state pool row idx[b] (or b), written to row
 * dst[b] of the final_* pools (idx[b] without dst; nothing when negative). Padding rows
 * (idx[b] < 0) get out[b] = 0 and touch no state. Only the write slots of non-padding rows
 * are written. Every value of a slot is read before any is written, so a
 * final_* that is the same view as its input state (in place) gives the same result. */
#include "ref_mamba3_common.h"
#include "ssmi_ref_mamba3.h"

typedef struct step_scratch {
    double *theta, *hs, *kprev, *vprev, *qt, *kt, *v, *z, *raw, *qhat, *y;
} step_scratch;

/* Row b, head h: reads slot n, writes slot ws of the final_* pools (none when ws < 0). */
static void step_head(const ssmi_mamba3_dims * d, const ssm_mamba3_siso_step_args * a, int64_t b, int64_t n,
                      int64_t ws, int64_t h, const step_scratch * w) {
    const int64_t K = d->dk, V = d->dv, A = d->nangles, g = h / (d->nheads / d->nheads_qk);
    const double  dskip = ssmi_present(&a->d) ? ssmi_get_f64(&a->d, ssmi_off1(&a->d, h)) : 0.0;
    if (A > 0) ssmi_ref_m3_read(w->theta, &a->angle_state, ssmi_off3(&a->angle_state, n, h, 0), A);
    ssmi_ref_m3_read(w->kprev, &a->k_state, ssmi_off3(&a->k_state, n, h, 0), K);
    ssmi_ref_m3_read(w->vprev, &a->v_state, ssmi_off3(&a->v_state, n, h, 0), V);
    for (int64_t r = 0; r < V; ++r)
        ssmi_ref_m3_read(w->hs + r * K, &a->ssm_state, ssmi_off4(&a->ssm_state, n, h, r, 0), K);
    for (int64_t c = 0; c < K; ++c) {
        w->qt[c] =
            ssmi_get_f64(&a->q, ssmi_off3(&a->q, b, g, c)) + ssmi_get_f64(&a->q_bias, ssmi_off2(&a->q_bias, h, c));
        w->kt[c] =
            ssmi_get_f64(&a->k, ssmi_off3(&a->k, b, g, c)) + ssmi_get_f64(&a->k_bias, ssmi_off2(&a->k_bias, h, c));
    }
    ssmi_ref_m3_read(w->v, &a->v, ssmi_off3(&a->v, b, h, 0), V);
    if (ssmi_present(&a->z)) ssmi_ref_m3_read(w->z, &a->z, ssmi_off3(&a->z, b, h, 0), V);
    if (A > 0) ssmi_ref_m3_read(w->raw, &a->angles, ssmi_off3(&a->angles, b, h, 0), A);
    const double adt = ssmi_get_f64(&a->adt, ssmi_off2(&a->adt, b, h));
    const double dt = ssmi_get_f64(&a->dt, ssmi_off2(&a->dt, b, h));
    const double trap = ssmi_get_f64(&a->trap, ssmi_off2(&a->trap, b, h));
    ssmi_ref_m3_step_head(w->theta, w->hs, w->kprev, w->vprev, w->raw, w->qt, w->kt, w->v,
                          ssmi_present(&a->z) ? w->z : NULL, adt, dt, trap, dskip, K, V, A, w->qhat, w->y);
    ssmi_ref_m3_write(&a->out, ssmi_off3(&a->out, b, h, 0), w->y, V);
    if (ws < 0) return;
    if (ssmi_present(&a->final_angle_state) && A > 0)
        ssmi_ref_m3_write(&a->final_angle_state, ssmi_off3(&a->final_angle_state, ws, h, 0), w->theta, A);
    if (ssmi_present(&a->final_ssm_state))
        for (int64_t r = 0; r < V; ++r)
            ssmi_ref_m3_write(&a->final_ssm_state, ssmi_off4(&a->final_ssm_state, ws, h, r, 0), w->hs + r * K, K);
    if (ssmi_present(&a->final_k_state))
        ssmi_ref_m3_write(&a->final_k_state, ssmi_off3(&a->final_k_state, ws, h, 0), w->kprev, K);
    if (ssmi_present(&a->final_v_state))
        ssmi_ref_m3_write(&a->final_v_state, ssmi_off3(&a->final_v_state, ws, h, 0), w->vprev, V);
}

ssm_status ssmi_ref_mamba3_siso_step(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                     const ssm_mamba3_siso_step_args * a) {
    (void)p;
    int          ok = 1;
    const size_t K = (size_t)d->dk, V = (size_t)d->dv, A = (size_t)d->nangles;
    const size_t sizes[11] = {A, ssmi_ref_m3_mul(V, K, &ok), K, V, K, K, V, V, A, K, V};
    step_scratch w;
    double **    ptrs[11] = {&w.theta, &w.hs, &w.kprev, &w.vprev, &w.qt, &w.kt, &w.v, &w.z, &w.raw, &w.qhat, &w.y};
    double *     block = NULL;
    SSM_RETURN_IF(!ok, ctx, SSM_STATUS_OUT_OF_MEMORY, "mamba3_siso_step: reference scratch size overflows size_t");
    SSM_FORWARD_IF_ERROR(ssmi_ref_m3_scratch(ctx, "mamba3_siso_step", 11, sizes, ptrs, &block));
    const ssm_tensor * idx = &a->state_batch_indices, *dst = &a->dst_state_batch_indices;
    for (int64_t b = 0; b < d->batch; ++b) {
        const int64_t n = ssmi_present(idx) ? ssmi_get_i64(idx, ssmi_off1(idx, b)) : b;
        const int64_t ws = ssmi_present(dst) ? ssmi_get_i64(dst, ssmi_off1(dst, b)) : n;
        if (n < 0) { /* padding row */
            for (int64_t h = 0; h < d->nheads; ++h) ssmi_ref_m3_write_zero(&a->out, ssmi_off3(&a->out, b, h, 0), d->dv);
            continue;
        }
        for (int64_t h = 0; h < d->nheads; ++h) step_head(d, a, b, n, ws, h, &w);
    }
    ssmi_free(ctx, block);
    return SSM_STATUS_OK;
}
