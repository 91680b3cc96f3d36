/* Mamba-2 chunk_cumsum on the CPU (spec §2.1): one task per (batch row, head); the
 * running sum is fp32 in token order, so every thread count gives the same bits. */
#include "ssmi_cpu.h"
#include "cpu_common.h"

#define CUMSUM_MAX_CHUNK 1024 /* the public limit of chunk_size: row buffers fit the stack */

typedef struct cumsum_job {
    const ssm_mamba2_params *            params;
    const ssmi_mamba2_dims *             dims;
    const ssm_mamba2_chunk_cumsum_args * args;
    const ssmi_cpu_kernels *             kernels;
} cumsum_job;

static void cumsum_task(void * arg, int64_t task, int32_t thread) {
    (void) thread;
    const cumsum_job *                   job  = (const cumsum_job *) arg;
    const ssm_mamba2_chunk_cumsum_args * a    = job->args;
    const ssmi_mamba2_dims *             d    = job->dims;
    const int64_t                        b    = task / d->nheads;
    const int64_t                        h    = task % d->nheads;
    const int64_t                        Q    = d->chunk;
    const float                          ah   = ssmi_get_f32(&a->a, ssmi_off1(&a->a, h));
    const float bias = ssmi_present(&a->dt_bias) ? ssmi_get_f32(&a->dt_bias, ssmi_off1(&a->dt_bias, h)) : 0.0f;
    float       dt_row[CUMSUM_MAX_CHUNK]; /* processed dt of one chunk      */
    float       cs_row[CUMSUM_MAX_CHUNK]; /* inclusive cumsum of dt·A       */
    for (int64_t c = 0; c < d->nchunks; ++c) {
        float run = 0.0f;
        for (int64_t i = 0; i < Q; ++i) {
            const int64_t t = c * Q + i;
            float         v = 0.0f; /* padded positions: dt 0 (padding after processing) */
            if (t < d->seqlen) {
                v = ssmi_get_f32(&a->dt, ssmi_off3(&a->dt, b, t, h)) + bias;
                v = ssmi_cpu_process_dt(v, job->params->dt_softplus, job->params->dt_limit_lo,
                                        job->params->dt_limit_hi);
            }
            run += v * ah;
            dt_row[i] = v;
            cs_row[i] = run;
        }
        job->kernels->store_row(a->dt_out.data, a->dt_out.dtype, ssmi_off4(&a->dt_out, b, h, c, 0),
                                a->dt_out.strides[3], dt_row, Q);
        job->kernels->store_row(a->da_cumsum.data, a->da_cumsum.dtype, ssmi_off4(&a->da_cumsum, b, h, c, 0),
                                a->da_cumsum.strides[3], cs_row, Q);
    }
}

ssm_status ssmi_cpu_mamba2_chunk_cumsum(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                        const ssm_mamba2_chunk_cumsum_args * a) {
    if (d->chunk > CUMSUM_MAX_CHUNK)
        return ssmi_error(ctx, SSM_STATUS_UNSUPPORTED, "mamba2_chunk_cumsum: chunk_size=%lld exceeds %d",
                          (long long) d->chunk, CUMSUM_MAX_CHUNK);
    cumsum_job job = { p, d, a, ssmi_cpu_kernels_for(ctx) };
    ssmi_parallel_for(ctx, d->batch * d->nheads, cumsum_task, &job);
    return SSM_STATUS_OK;
}
