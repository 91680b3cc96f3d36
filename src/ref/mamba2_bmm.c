/* Reference of mamba2_bmm (spec §2.4): CB[b,c,g,i,j] = Σ_n C[cQ+i,g,n]·B[cQ+j,g,n] for valid
 * i, j of the same sequence (M_pair), else 0. The full Q×Q block is written. */
#include "ref_common.h"
#include "ssmi_ref.h"

ssm_status ssmi_ref_mamba2_bmm(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                               const ssm_mamba2_bmm_args * a) {
    (void)ctx;
    (void)p;
    const ssm_tensor * seq = ssmi_present(&a->seq_idx) ? &a->seq_idx : NULL;
    for (int64_t b = 0; b < d->batch; ++b)
        for (int64_t c = 0; c < d->nchunks; ++c) {
            const int64_t t0 = c * d->chunk;
            const int64_t len = ssmi_ref_chunk_len(d, c);
            for (int64_t g = 0; g < d->ngroups; ++g)
                for (int64_t i = 0; i < d->chunk; ++i)
                    for (int64_t j = 0; j < d->chunk; ++j) {
                        double    acc = 0.0;
                        const int pair = i < len && j < len &&
                                         (seq == NULL || ssmi_ref_seq(seq, b, t0 + i) == ssmi_ref_seq(seq, b, t0 + j));
                        if (pair)
                            for (int64_t n = 0; n < d->dstate; ++n)
                                acc += ssmi_get_f64(&a->c, ssmi_off4(&a->c, b, t0 + i, g, n)) *
                                       ssmi_get_f64(&a->b, ssmi_off4(&a->b, b, t0 + j, g, n));
                        ssmi_set_f64(&a->cb, ssmi_off5(&a->cb, b, c, g, i, j), acc);
                    }
        }
    return SSM_STATUS_OK;
}
