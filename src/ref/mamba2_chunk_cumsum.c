/* Reference of mamba2_chunk_cumsum (spec §2.1): dt processing and the inclusive in-chunk
 * cumsum of dt·A, float64. Padded positions of the last chunk get dt_out = 0, so the
 * cumsum stays constant there (padding comes AFTER processing, trap T6). */
#include "ref_common.h"
#include "ssmi_ref.h"

ssm_status ssmi_ref_mamba2_chunk_cumsum(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                        const ssm_mamba2_chunk_cumsum_args * a) {
    (void)ctx;
    for (int64_t b = 0; b < d->batch; ++b)
        for (int64_t h = 0; h < d->nheads; ++h) {
            const double ah = ssmi_get_f64(&a->a, ssmi_off1(&a->a, h));
            const double bias = ssmi_ref_bias(&a->dt_bias, h);
            for (int64_t c = 0; c < d->nchunks; ++c) {
                double run = 0.0;
                for (int64_t i = 0; i < d->chunk; ++i) {
                    const int64_t t = c * d->chunk + i;
                    double        v = 0.0;
                    if (t < d->seqlen)
                        v = ssmi_ref_process_dt(p, ssmi_get_f64(&a->dt, ssmi_off3(&a->dt, b, t, h)), bias);
                    ssmi_set_f64(&a->dt_out, ssmi_off4(&a->dt_out, b, h, c, i), v);
                    run += v * ah;
                    ssmi_set_f64(&a->da_cumsum, ssmi_off4(&a->da_cumsum, b, h, c, i), run);
                }
            }
        }
    return SSM_STATUS_OK;
}
