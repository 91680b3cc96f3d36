/* Reference of mamba2_chunk_scan (spec §2.5, §1.3):
 *   y[cQ+i] = Σ_{j≤i} cb[i,j]·exp(cum[i] − cum[j])·dt[j]·x[cQ+j]
 *           + M_prev(i)·exp(cum[i])·Σ_n states_in[c][p][n]·C[cQ+i][n]  +  D_h(p)·x[cQ+i]
 *   out_x = y (if requested);  out = y·silu(z) if z else y.
 * M_prev(i) = [seq[cQ+i] == seq[cQ−1]] (seq[−1] := 0), 1 without seq_idx. cb already holds
 * M_pair, so the diagonal term needs no mask. A partial last chunk is handled by only
 * visiting valid positions. No exponent clamp. */
#include "ref_common.h"
#include "ssmi_ref.h"

ssm_status ssmi_ref_mamba2_chunk_scan(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                      const ssm_mamba2_chunk_scan_args * a) {
    (void)ctx;
    (void)p;
    const int64_t      ratio = d->nheads / d->ngroups;
    const ssm_tensor * seq = ssmi_present(&a->seq_idx) ? &a->seq_idx : NULL;
    for (int64_t b = 0; b < d->batch; ++b)
        for (int64_t c = 0; c < d->nchunks; ++c) {
            const int64_t t0 = c * d->chunk;
            const int64_t len = ssmi_ref_chunk_len(d, c);
            const int64_t prev_id = (seq != NULL && c > 0) ? ssmi_ref_seq(seq, b, t0 - 1) : 0;
            for (int64_t h = 0; h < d->nheads; ++h) {
                const int64_t g = h / ratio;
                for (int64_t i = 0; i < len; ++i) {
                    const int64_t t = t0 + i;
                    const double  cm = ssmi_get_f64(&a->da_cumsum, ssmi_off4(&a->da_cumsum, b, h, c, i));
                    const int     from_prev = seq == NULL || ssmi_ref_seq(seq, b, t) == prev_id;
                    for (int64_t pp = 0; pp < d->headdim; ++pp) {
                        double off = 0.0;
                        if (from_prev) {
                            for (int64_t n = 0; n < d->dstate; ++n)
                                off += ssmi_get_f64(&a->c, ssmi_off4(&a->c, b, t, g, n)) *
                                       ssmi_get_f64(&a->states_in, ssmi_off5(&a->states_in, b, c, h, pp, n));
                            off *= exp(cm);
                        }
                        double dia = 0.0;
                        for (int64_t j = 0; j <= i; ++j) {
                            const double cbij = ssmi_get_f64(&a->cb, ssmi_off5(&a->cb, b, c, g, i, j));
                            const double cj = ssmi_get_f64(&a->da_cumsum, ssmi_off4(&a->da_cumsum, b, h, c, j));
                            const double dtj = ssmi_get_f64(&a->dt, ssmi_off4(&a->dt, b, h, c, j));
                            const double xj = ssmi_get_f64(&a->x, ssmi_off4(&a->x, b, t0 + j, h, pp));
                            dia += cbij * exp(cm - cj) * dtj * xj;
                        }
                        const double xt = ssmi_get_f64(&a->x, ssmi_off4(&a->x, b, t, h, pp));
                        double       y = off + dia + ssmi_ref_d(&a->d, h, pp) * xt;
                        if (ssmi_present(&a->out_x)) ssmi_set_f64(&a->out_x, ssmi_off4(&a->out_x, b, t, h, pp), y);
                        if (ssmi_present(&a->z)) y *= ssmi_ref_silu(ssmi_get_f64(&a->z, ssmi_off4(&a->z, b, t, h, pp)));
                        ssmi_set_f64(&a->out, ssmi_off4(&a->out, b, t, h, pp), y);
                    }
                }
            }
        }
    return SSM_STATUS_OK;
}
