/*
 * Mamba-2 chunk_state on the CPU (spec §2.2): one task per (batch row, chunk, head).
 *
 *   states[p][n] = Σ_j x[j][p] · bw[j][n],   bw[j][n] = b[j][n] · exp(cl − cm[j]) · dt[j]
 *
 * with cl = da_cumsum[.., Q−1] and j over the chunk's valid tokens in the sequence of its
 * last token (M_state). No exponent clamp (DESIGN §3), bw stays fp32 (upstream rounds it
 * to the activation dtype; we are more accurate). The GEMM runs in the orientation of
 * the output: [P][N] for the upstream layout, [N][P] when the n stride of `states` is
 * smaller (the CANN layout [B,NC,H,N,P] as a strided view), so each row of the fp32
 * tile is stored with the output's contiguous stride.
 *
 * Per-thread scratch: x tile Q×P, bw tile Q×N, result tile P×N, dt / cm / w rows.
 */
#include "ssmi_cpu.h"
#include "cpu_common.h"

typedef struct state_job {
    const ssmi_mamba2_dims *            dims;
    const ssm_mamba2_chunk_state_args * args;
    const ssmi_cpu_kernels *            kernels;
    float *                             scratch;
    int64_t                             scratch_floats; /* per thread, whole lines */
    int                                 n_major;        /* store [N][P] rows        */
} state_job;

static void state_task(void * arg, int64_t task, int32_t thread) {
    const state_job *                   job = (const state_job *) arg;
    const ssm_mamba2_chunk_state_args * a   = job->args;
    const ssmi_mamba2_dims *            d   = job->dims;
    const ssmi_cpu_kernels *            k   = job->kernels;
    const int64_t H = d->nheads, P = d->headdim, N = d->dstate, Q = d->chunk, NC = d->nchunks;
    const int64_t b = task / (NC * H), c = (task / H) % NC, h = task % H;
    const int64_t g   = h / (H / d->ngroups);
    const int64_t t0  = c * Q;
    const int64_t len = ssmi_cpu_chunk_len(d, c);

    float * xt   = job->scratch + (int64_t) thread * job->scratch_floats; /* x      [len][P] */
    float * bw   = xt + ssmi_cpu_lines(Q * P);                           /* bw     [len][N] */
    float * tile = bw + ssmi_cpu_lines(Q * N);                           /* result P×N / N×P */
    float * w    = tile + ssmi_cpu_lines(P * N);                         /* weights [Q]     */

    /* w[j] = exp(cl − cm[j]) · dt[j] on M_state tokens, else 0 */
    const float cl  = ssmi_get_f32(&a->da_cumsum, ssmi_off4(&a->da_cumsum, b, h, c, Q - 1));
    int64_t     sl  = 0;
    const int   seq = ssmi_present(&a->seq_idx) && len > 0;
    if (seq) sl = ssmi_cpu_seq_at(&a->seq_idx, b, t0 + len - 1);
    for (int64_t j = 0; j < len; ++j) {
        w[j] = cl - ssmi_get_f32(&a->da_cumsum, ssmi_off4(&a->da_cumsum, b, h, c, j));
    }
    k->vexp(len, w, w);
    for (int64_t j = 0; j < len; ++j) {
        const int keep = !seq || ssmi_cpu_seq_at(&a->seq_idx, b, t0 + j) == sl;
        w[j]           = keep ? w[j] * ssmi_get_f32(&a->dt, ssmi_off4(&a->dt, b, h, c, j)) : 0.0f;
    }
    for (int64_t j = 0; j < len; ++j) {
        float * row = bw + j * N;
        k->load_row(row, a->b.data, a->b.dtype, ssmi_off4(&a->b, b, t0 + j, g, 0), a->b.strides[3], N);
        for (int64_t n = 0; n < N; ++n) row[n] *= w[j];
        k->load_row(xt + j * P, a->x.data, a->x.dtype, ssmi_off4(&a->x, b, t0 + j, h, 0), a->x.strides[3], P);
    }
    const ssm_tensor * s = &a->states;
    if (job->n_major) {
        /* tile[n][p] = Σ_j bw[j][n] · x[j][p] */
        k->gemm(N, P, len, bw, 1, N, xt, P, tile, P, NULL, 0.0f, 0);
        for (int64_t n = 0; n < N; ++n)
            k->store_row(s->data, s->dtype, ssmi_off5(s, b, c, h, 0, n), s->strides[3], tile + n * P, P);
    } else {
        /* tile[p][n] = Σ_j x[j][p] · bw[j][n] */
        k->gemm(P, N, len, xt, 1, P, bw, N, tile, N, NULL, 0.0f, 0);
        for (int64_t p = 0; p < P; ++p)
            k->store_row(s->data, s->dtype, ssmi_off5(s, b, c, h, p, 0), s->strides[4], tile + p * N, N);
    }
}

static int64_t abs64(int64_t v) { return v < 0 ? -v : v; }

ssm_status ssmi_cpu_mamba2_chunk_state(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                       const ssm_mamba2_chunk_state_args * a) {
    (void) p;
    const int64_t ntasks = d->batch * d->nchunks * d->nheads;
    if (ntasks == 0 || d->headdim == 0 || d->dstate == 0) return SSM_STATUS_OK;
    const int64_t Q = d->chunk, P = d->headdim, N = d->dstate;
    state_job     job;
    job.dims           = d;
    job.args           = a;
    job.kernels        = ssmi_cpu_kernels_for(ctx);
    job.scratch_floats = ssmi_cpu_lines(ssmi_cpu_lines(Q * P) + ssmi_cpu_lines(Q * N) + ssmi_cpu_lines(P * N) +
                                        ssmi_cpu_lines(Q));
    job.n_major        = abs64(a->states.strides[3]) < abs64(a->states.strides[4]);
    job.scratch        = ssmi_cpu_thread_scratch(ctx, "mamba2_chunk_state", job.scratch_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, ntasks, state_task, &job);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}
