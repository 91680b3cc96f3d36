/*
 * Mamba-2 bmm on the CPU (spec §2.4): one task per (batch row, chunk, group).
 *   cb[i][j] = Σ_n c[i][n] · b[j][n]   for valid i, j of the same sequence (M_pair), else 0
 * c is packed to a len×N fp32 tile and b transposed to an N×Q tile, so the GEMM's B
 * operand has the j columns contiguous; the Q×Q fp32 result is masked and stored row by row.
 */
#include "ssmi_cpu.h"
#include "cpu_common.h"

typedef struct bmm_job {
    const ssmi_mamba2_dims *    dims;
    const ssm_mamba2_bmm_args * args;
    const ssmi_cpu_kernels *    kernels;
    float *                     scratch;
    int64_t                     scratch_floats;
} bmm_job;

static void bmm_task(void * arg, int64_t task, int32_t thread) {
    const bmm_job *             job = (const bmm_job *) arg;
    const ssm_mamba2_bmm_args * a   = job->args;
    const ssmi_mamba2_dims *    d   = job->dims;
    const ssmi_cpu_kernels *    k   = job->kernels;
    const int64_t G = d->ngroups, N = d->dstate, Q = d->chunk, NC = d->nchunks;
    const int64_t b = task / (NC * G), c = (task / G) % NC, g = task % G;
    const int64_t t0  = c * Q;
    const int64_t len = ssmi_cpu_chunk_len(d, c);

    float * ct   = job->scratch + (int64_t) thread * job->scratch_floats; /* c   [len][N] */
    float * bt   = ct + ssmi_cpu_lines(Q * N);                           /* bᵀ  [N][Q]   */
    float * tile = bt + ssmi_cpu_lines(Q * N);                           /* cb  [Q][Q]   */
    float * row  = tile + ssmi_cpu_lines(Q * Q);                         /* one b row [N] */

    for (int64_t j = 0; j < len; ++j) {
        k->load_row(ct + j * N, a->c.data, a->c.dtype, ssmi_off4(&a->c, b, t0 + j, g, 0), a->c.strides[3], N);
        k->load_row(row, a->b.data, a->b.dtype, ssmi_off4(&a->b, b, t0 + j, g, 0), a->b.strides[3], N);
        for (int64_t n = 0; n < N; ++n) bt[n * Q + j] = row[n];
    }
    for (int64_t i = 0; i < Q * Q; ++i) tile[i] = 0.0f;
    k->gemm(len, len, N, ct, N, 1, bt, Q, tile, Q, NULL, 0.0f, 0);
    if (ssmi_present(&a->seq_idx)) {
        for (int64_t i = 0; i < len; ++i) {
            const int64_t si = ssmi_cpu_seq_at(&a->seq_idx, b, t0 + i);
            for (int64_t j = 0; j < len; ++j)
                if (ssmi_cpu_seq_at(&a->seq_idx, b, t0 + j) != si) tile[i * Q + j] = 0.0f;
        }
    }
    const ssm_tensor * o = &a->cb;
    for (int64_t i = 0; i < Q; ++i)
        k->store_row(o->data, o->dtype, ssmi_off5(o, b, c, g, i, 0), o->strides[4], tile + i * Q, Q);
}

ssm_status ssmi_cpu_mamba2_bmm(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                               const ssm_mamba2_bmm_args * a) {
    (void) p;
    const int64_t ntasks = d->batch * d->nchunks * d->ngroups;
    if (ntasks == 0 || d->chunk == 0) return SSM_STATUS_OK;
    const int64_t Q = d->chunk, N = d->dstate;
    bmm_job       job;
    job.dims           = d;
    job.args           = a;
    job.kernels        = ssmi_cpu_kernels_for(ctx);
    job.scratch_floats = ssmi_cpu_lines(2 * ssmi_cpu_lines(Q * N) + ssmi_cpu_lines(Q * Q) + ssmi_cpu_lines(N));
    job.scratch        = ssmi_cpu_thread_scratch(ctx, "mamba2_bmm", job.scratch_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, ntasks, bmm_task, &job);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}
