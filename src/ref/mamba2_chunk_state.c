/* Reference of mamba2_chunk_state (spec §2.2, §1.4):
 *   states[b,c,h,p,n] = Σ_j exp(cum[Q−1] − cum[j])·dt[j]·x[cQ+j,h,p]·B[cQ+j,g,n]
 * over the valid positions j of chunk c whose seq id equals the id of the chunk's last
 * token (M_state; a negative last id drops the chunk). No exponent clamp (DESIGN §3). */
#include "ref_common.h"
#include "ssmi_ref.h"

ssm_status ssmi_ref_mamba2_chunk_state(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                       const ssm_mamba2_chunk_state_args * a) {
    (void)ctx;
    (void)p;
    const int64_t      ratio = d->nheads / d->ngroups;
    const ssm_tensor * seq = ssmi_present(&a->seq_idx) ? &a->seq_idx : NULL;
    for (int64_t b = 0; b < d->batch; ++b)
        for (int64_t c = 0; c < d->nchunks; ++c) {
            const int64_t t0 = c * d->chunk;
            const int64_t len = ssmi_ref_chunk_len(d, c);
            const int64_t last_id = (seq != NULL && len > 0) ? ssmi_ref_seq(seq, b, t0 + len - 1) : 0;
            for (int64_t h = 0; h < d->nheads; ++h) {
                const int64_t g = h / ratio;
                const double  cl = ssmi_get_f64(&a->da_cumsum, ssmi_off4(&a->da_cumsum, b, h, c, d->chunk - 1));
                for (int64_t pp = 0; pp < d->headdim; ++pp)
                    for (int64_t n = 0; n < d->dstate; ++n) {
                        double acc = 0.0;
                        for (int64_t j = 0; j < len; ++j) {
                            if (seq != NULL && (last_id < 0 || ssmi_ref_seq(seq, b, t0 + j) != last_id)) continue;
                            const double cj = ssmi_get_f64(&a->da_cumsum, ssmi_off4(&a->da_cumsum, b, h, c, j));
                            const double dtj = ssmi_get_f64(&a->dt, ssmi_off4(&a->dt, b, h, c, j));
                            const double xj = ssmi_get_f64(&a->x, ssmi_off4(&a->x, b, t0 + j, h, pp));
                            const double bj = ssmi_get_f64(&a->b, ssmi_off4(&a->b, b, t0 + j, g, n));
                            acc += exp(cl - cj) * dtj * bj * xj;
                        }
                        ssmi_set_f64(&a->states, ssmi_off5(&a->states, b, c, h, pp, n), acc);
                    }
            }
        }
    return SSM_STATUS_OK;
}
