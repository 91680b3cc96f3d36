/* Reference of causal_conv1d (spec §6.2) in float64: forward, backward, decode update.
 *   pre[b,d,t] = bias[d] + Σ_k weight[d,k]·xin[b,d,t−(W−1)+k],   out = act(pre)
 *   xin[τ] = x[τ] for τ ≥ 0, initial_states[b,d,W−1+τ] (or 0) for τ < 0
 * With seq_idx a term counts only if τ ≥ 0 and seq_idx[τ] == seq_idx[t]; a token with a
 * negative id is padding: out = 0 (so its gradient is 0 too). */
#include <string.h>

#include "ref_common.h"
#include "ssmi_ref_layer.h"

static double act(int silu, double v) { return silu ? ssmi_ref_silu(v) : v; }

/* d act / d pre. */
static double act_grad(int silu, double v) {
    return silu ? ssmi_ref_silu_grad(v) : 1.0;
}

static double weight_at(const ssm_tensor * w, int64_t d, int64_t k) { return ssmi_get_f64(w, ssmi_off2(w, d, k)); }

/* Sequence id of token t of row b, or 0 without seq_idx. */
static int64_t seq_at(const ssm_tensor * s, int64_t b, int64_t t) {
    return ssmi_present(s) ? ssmi_get_i64(s, ssmi_off2(s, b, t)) : 0;
}

/* xin[b,d,tau]. */
static double xin_at(const ssmi_conv1d_dims * dm, const ssm_tensor * x, const ssm_tensor * init, int64_t b, int64_t d,
                     int64_t tau) {
    if (tau >= 0) return ssmi_get_f64(x, ssmi_off3(x, b, d, tau));
    if (!ssmi_present(init)) return 0.0;
    return ssmi_get_f64(init, ssmi_off3(init, b, d, dm->width - 1 + tau));
}

/* Does input tau feed token t (same sequence, and not before the row with seq_idx)? */
static int feeds(const ssm_tensor * seq, int64_t b, int64_t tau, int64_t t) {
    if (!ssmi_present(seq)) return 1;
    return tau >= 0 && seq_at(seq, b, tau) == seq_at(seq, b, t);
}

static int is_padding(const ssm_tensor * seq, int64_t b, int64_t t) { return ssmi_present(seq) && seq_at(seq, b, t) < 0; }

static double pre_at(const ssmi_conv1d_dims * dm, const ssm_tensor * x, const ssm_tensor * w, const ssm_tensor * bias,
                     const ssm_tensor * seq, const ssm_tensor * init, int64_t b, int64_t d, int64_t t) {
    double pre = ssmi_present(bias) ? ssmi_get_f64(bias, ssmi_off1(bias, d)) : 0.0;
    for (int64_t k = 0; k < dm->width; ++k) {
        const int64_t tau = t - (dm->width - 1) + k;
        if (feeds(seq, b, tau, t)) pre += weight_at(w, d, k) * xin_at(dm, x, init, b, d, tau);
    }
    return pre;
}

ssm_status ssmi_ref_causal_conv1d(ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * dm,
                                  const ssm_causal_conv1d_args * a) {
    (void)ctx;
    const int64_t S = dm->seqlen, W = dm->width;
    for (int64_t b = 0; b < dm->batch; ++b)
        for (int64_t d = 0; d < dm->dim; ++d) {
            for (int64_t t = 0; t < S; ++t) {
                double y = 0.0;
                if (!is_padding(&a->seq_idx, b, t))
                    y = act(p->activation, pre_at(dm, &a->x, &a->weight, &a->bias, &a->seq_idx, &a->initial_states, b,
                                                  d, t));
                ssmi_set_f64(&a->out, ssmi_off3(&a->out, b, d, t), y);
            }
            if (ssmi_present(&a->final_states))
                for (int64_t j = 0; j < W - 1; ++j)
                    ssmi_set_f64(&a->final_states, ssmi_off3(&a->final_states, b, d, j),
                                 xin_at(dm, &a->x, &a->initial_states, b, d, S - (W - 1) + j));
        }
    return SSM_STATUS_OK;
}

/* Gradient that reaches xin[b,d,tau] (tau may be negative: an initial state). */
static double dxin_at(const ssmi_conv1d_dims * dm, const ssm_causal_conv1d_bwd_args * a, const double * gpre, int64_t b,
                      int64_t d, int64_t tau) {
    const int64_t S = dm->seqlen, W = dm->width;
    double        g = 0.0;
    for (int64_t k = 0; k < W; ++k) {
        const int64_t t = tau + (W - 1) - k;
        if (t < 0 || t >= S || !feeds(&a->seq_idx, b, tau, t)) continue;
        g += weight_at(&a->weight, d, k) * gpre[t];
    }
    const int64_t j = tau - (S - (W - 1)); /* final_states[j] = xin[S−(W−1)+j] */
    if (ssmi_present(&a->dfinal_states) && j >= 0 && j < W - 1)
        g += ssmi_get_f64(&a->dfinal_states, ssmi_off3(&a->dfinal_states, b, d, j));
    return g;
}

ssm_status ssmi_ref_causal_conv1d_bwd(ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * dm,
                                      const ssm_causal_conv1d_bwd_args * a) {
    const int64_t S = dm->seqlen, W = dm->width;
    const size_t  n = (size_t)(S + W);
    double *      gpre = (double *)ssmi_alloc(ctx, n * sizeof(double));
    SSM_RETURN_IF(gpre == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "causal_conv1d_bwd: could not allocate %zu bytes of reference scratch", n * sizeof(double));
    double * dw = gpre + S; /* dweight[d, :] summed over batch and time */
    for (int64_t d = 0; d < dm->dim; ++d) {
        double dbias = 0.0;
        for (int64_t k = 0; k < W; ++k) dw[k] = 0.0;
        for (int64_t b = 0; b < dm->batch; ++b) {
            for (int64_t t = 0; t < S; ++t) {
                gpre[t] = 0.0;
                if (is_padding(&a->seq_idx, b, t)) continue;
                const double pre = pre_at(dm, &a->x, &a->weight, &a->bias, &a->seq_idx, &a->initial_states, b, d, t);
                gpre[t] = ssmi_get_f64(&a->dout, ssmi_off3(&a->dout, b, d, t)) * act_grad(p->activation, pre);
                dbias += gpre[t];
            }
            if (ssmi_present(&a->dx))
                for (int64_t tau = 0; tau < S; ++tau)
                    ssmi_set_f64(&a->dx, ssmi_off3(&a->dx, b, d, tau), dxin_at(dm, a, gpre, b, d, tau));
            if (ssmi_present(&a->dinitial_states))
                for (int64_t j = 0; j < W - 1; ++j)
                    ssmi_set_f64(&a->dinitial_states, ssmi_off3(&a->dinitial_states, b, d, j),
                                 dxin_at(dm, a, gpre, b, d, j - (W - 1)));
            for (int64_t k = 0; k < W; ++k)
                for (int64_t t = 0; t < S; ++t) {
                    const int64_t tau = t - (W - 1) + k;
                    if (feeds(&a->seq_idx, b, tau, t))
                        dw[k] += gpre[t] * xin_at(dm, &a->x, &a->initial_states, b, d, tau);
                }
        }
        if (ssmi_present(&a->dweight))
            for (int64_t k = 0; k < W; ++k) ssmi_set_f64(&a->dweight, ssmi_off2(&a->dweight, d, k), dw[k]);
        if (ssmi_present(&a->dbias)) ssmi_set_f64(&a->dbias, ssmi_off1(&a->dbias, d), dbias);
    }
    ssmi_free(ctx, gpre);
    return SSM_STATUS_OK;
}

static int64_t slot_of(const ssm_tensor * idx, int64_t b) {
    return ssmi_present(idx) ? ssmi_get_i64(idx, ssmi_off1(idx, b)) : b;
}

ssm_status ssmi_ref_causal_conv1d_update(ssm_context * ctx, const ssm_conv1d_params * p, const ssmi_conv1d_dims * dm,
                                         const ssm_causal_conv1d_update_args * a) {
    const int64_t      L = dm->state_len, W = dm->width;
    const ssm_tensor * st = &a->conv_state;
    const ssm_tensor * fin = &a->final_conv_state;
    const int          has_fin = ssmi_present(fin);
    const size_t       nbuf = (size_t)(L + 1);
    double *           buf = (double *)ssmi_alloc(ctx, nbuf * sizeof(double));
    SSM_RETURN_IF(buf == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "causal_conv1d_update: could not allocate %zu bytes of reference scratch", nbuf * sizeof(double));
    for (int64_t b = 0; b < dm->batch; ++b) {
        const int64_t slot = slot_of(&a->state_batch_indices, b);
        for (int64_t d = 0; d < dm->dim; ++d) {
            if (slot < 0) {
                ssmi_set_f64(&a->out, ssmi_off2(&a->out, b, d), 0.0);
                continue;
            }
            /* buf = [conv_state[slot,d,0..L), x[b,d]]: the window is its last W entries */
            for (int64_t j = 0; j < L; ++j) buf[j] = ssmi_get_f64(st, ssmi_off3(st, slot, d, j));
            buf[L] = ssmi_get_f64(&a->x, ssmi_off2(&a->x, b, d));
            double pre = ssmi_present(&a->bias) ? ssmi_get_f64(&a->bias, ssmi_off1(&a->bias, d)) : 0.0;
            for (int64_t k = 0; k < W; ++k) pre += weight_at(&a->weight, d, k) * buf[L + 1 - W + k];
            ssmi_set_f64(&a->out, ssmi_off2(&a->out, b, d), act(p->activation, pre));
            if (has_fin)
                for (int64_t j = 0; j < L; ++j) ssmi_set_f64(fin, ssmi_off3(fin, slot, d, j), buf[j + 1]);
        }
    }
    ssmi_free(ctx, buf);
    return SSM_STATUS_OK;
}
