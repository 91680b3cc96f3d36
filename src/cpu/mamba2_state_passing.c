/*
 * Mamba-2 state_passing on the CPU (spec §2.3): every state element (b, h, p, n) runs its
 * own fp32 recurrence over the chunks, so the work is cut into tasks of one (b, h, p) row
 * of N elements, walked in pieces of PIECE elements that live on the stack.
 *   states_in[0] = initial (or 0);  s ← exp(da_chunk_cumsum[c])·T_c·s + states[c]
 *   states_in[c+1] = s (c < NC−1);  final_states = s after the last chunk
 * T_c = 0 when seq_idx of chunk c's last token differs from the previous chunk's (with
 * the id before the first chunk taken as 0).
 */
#include "ssmi_cpu.h"
#include "cpu_common.h"

#define PIECE 256

typedef struct passing_job {
    const ssmi_mamba2_dims *              dims;
    const ssm_mamba2_state_passing_args * args;
    const ssmi_cpu_kernels *              kernels;
} passing_job;

static void passing_task(void * arg, int64_t task, int32_t thread) {
    (void) thread;
    const passing_job *                   job = (const passing_job *) arg;
    const ssm_mamba2_state_passing_args * a   = job->args;
    const ssmi_mamba2_dims *              d   = job->dims;
    const ssmi_cpu_kernels *              k   = job->kernels;
    const int64_t H = d->nheads, P = d->headdim, N = d->dstate, NC = d->nchunks, Q = d->chunk;
    const int64_t b = task / (H * P), h = (task / P) % H, p = task % P;
    const ssm_tensor *si = &a->states_in, *st = &a->states;
    float             s[PIECE], add[PIECE];
    for (int64_t n0 = 0; n0 < N; n0 += PIECE) {
        const int64_t nn = N - n0 < PIECE ? N - n0 : PIECE;
        if (ssmi_present(&a->initial_states)) {
            const ssm_tensor * init = &a->initial_states;
            k->load_row(s, init->data, init->dtype, ssmi_off4(init, b, h, p, n0), init->strides[3], nn);
        } else {
            for (int64_t n = 0; n < nn; ++n) s[n] = 0.0f;
        }
        if (NC > 0) k->store_row(si->data, si->dtype, ssmi_off5(si, b, 0, h, p, n0), si->strides[4], s, nn);
        int64_t prev = 0;
        for (int64_t c = 0; c < NC; ++c) {
            float scale = expf(ssmi_get_f32(&a->da_chunk_cumsum, ssmi_off3(&a->da_chunk_cumsum, b, h, c)));
            if (ssmi_present(&a->seq_idx)) {
                int64_t last = (c + 1) * Q < d->seqlen ? (c + 1) * Q : d->seqlen;
                last         = last - 1 < 0 ? 0 : last - 1;
                const int64_t cur = d->seqlen > 0 ? ssmi_cpu_seq_at(&a->seq_idx, b, last) : prev;
                if (cur != prev) scale = 0.0f;
                prev = cur;
            }
            k->load_row(add, st->data, st->dtype, ssmi_off5(st, b, c, h, p, n0), st->strides[4], nn);
            for (int64_t n = 0; n < nn; ++n) s[n] = scale * s[n] + add[n];
            if (c + 1 < NC)
                k->store_row(si->data, si->dtype, ssmi_off5(si, b, c + 1, h, p, n0), si->strides[4], s, nn);
        }
        if (ssmi_present(&a->final_states)) {
            const ssm_tensor * fs = &a->final_states;
            k->store_row(fs->data, fs->dtype, ssmi_off4(fs, b, h, p, n0), fs->strides[3], s, nn);
        }
    }
}

ssm_status ssmi_cpu_mamba2_state_passing(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                         const ssm_mamba2_state_passing_args * a) {
    (void) p;
    passing_job job = { d, a, ssmi_cpu_kernels_for(ctx) };
    ssmi_parallel_for(ctx, d->batch * d->nheads * d->headdim, passing_task, &job);
    return SSM_STATUS_OK;
}
