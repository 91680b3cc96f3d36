/* Reference of mamba2_state_passing (spec §2.3, §1.4):
 *   S_0 = initial (or 0);  S_{c+1} = exp(da_chunk_cumsum[c])·T_c·S_c + states[c]
 *   states_in[c] = S_c;    final_states = S_NC
 * T_c = [seq(last_c) == seq(last_{c−1})] with seq(last_{−1}) := 0 (1 without seq_idx). */
#include "ref_common.h"
#include "ssmi_ref.h"

ssm_status ssmi_ref_mamba2_state_passing(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                         const ssm_mamba2_state_passing_args * a) {
    (void)ctx;
    (void)p;
    const ssm_tensor * seq = ssmi_present(&a->seq_idx) ? &a->seq_idx : NULL;
    const ssm_tensor * init = &a->initial_states;
    for (int64_t b = 0; b < d->batch; ++b)
        for (int64_t h = 0; h < d->nheads; ++h)
            for (int64_t pp = 0; pp < d->headdim; ++pp)
                for (int64_t n = 0; n < d->dstate; ++n) {
                    double  s = ssmi_present(init) ? ssmi_get_f64(init, ssmi_off4(init, b, h, pp, n)) : 0.0;
                    int64_t prev_id = 0;
                    for (int64_t c = 0; c < d->nchunks; ++c) {
                        ssmi_set_f64(&a->states_in, ssmi_off5(&a->states_in, b, c, h, pp, n), s);
                        double scale = exp(ssmi_get_f64(&a->da_chunk_cumsum, ssmi_off3(&a->da_chunk_cumsum, b, h, c)));
                        if (seq != NULL) {
                            const int64_t end = (c + 1) * d->chunk < d->seqlen ? (c + 1) * d->chunk : d->seqlen;
                            const int64_t cur = ssmi_ref_seq(seq, b, end - 1);
                            if (cur != prev_id) scale = 0.0;
                            prev_id = cur;
                        }
                        /* A reset drops S_c outright: 0·S_c would turn an Inf/NaN state into NaN. */
                        s = (scale == 0.0 ? 0.0 : scale * s) +
                            ssmi_get_f64(&a->states, ssmi_off5(&a->states, b, c, h, pp, n));
                    }
                    if (ssmi_present(&a->final_states))
                        ssmi_set_f64(&a->final_states, ssmi_off4(&a->final_states, b, h, pp, n), s);
                }
    return SSM_STATUS_OK;
}
