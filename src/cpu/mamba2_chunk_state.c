/*
 * Mamba-2 chunk_state on the CPU (spec §2.2): one task per (batch row, chunk, group, block
 * of the group's heads).
 *
 *   states[p][n] = Σ_j xw[j][p] · b[j][n],   xw[j][p] = x[j][p] · exp(cl − cm[j]) · dt[j]
 *
 * with cl = da_cumsum[.., Q−1] and j over the chunk's valid tokens in the sequence of its
 * last token (M_state). No exponent clamp (DESIGN §3). The per-token weight goes into x
 * (Q×P) rather than into B (Q×N), so the group's B tile is converted once per task and
 * shared by its heads: with G < H that saves most of the non-GEMM work (upstream scales
 * B and rounds it to the activation dtype; we keep fp32). The GEMM runs in the orientation
 * of the output: [P][N] for the upstream layout, [N][P] when the n stride of `states` is
 * smaller (the CANN layout [B,NC,H,N,P] as a strided view), so each row of the fp32 tile
 * is stored with the output's contiguous stride. A head's arithmetic does not depend on
 * its block, so results are identical for any thread count.
 *
 * Per-thread scratch: b tile Q×N, xw tile Q×P, result tile P×N, weights row.
 */
#include "ssmi_cpu.h"
#include "cpu_common.h"

typedef struct state_job {
    const ssmi_mamba2_dims *            dims;
    const ssm_mamba2_chunk_state_args * args;
    const ssmi_cpu_kernels *            kernels;
    float *                             scratch;
    int64_t                             scratch_floats; /* per thread, whole lines */
    int64_t                             head_block;     /* heads of a group per task */
    int64_t                             blocks;         /* head blocks per group     */
    int                                 n_major;        /* store [N][P] rows        */
} state_job;

/* w[j] = exp(cl − cm[j]) · dt[j] on M_state tokens, else 0. */
static void state_weights(const state_job * job, int64_t b, int64_t c, int64_t h, int64_t len, float * w) {
    const ssm_mamba2_chunk_state_args * a  = job->args;
    const ssmi_mamba2_dims *            d  = job->dims;
    const int64_t                       Q  = d->chunk, t0 = c * Q;
    const float cl  = ssmi_get_f32(&a->da_cumsum, ssmi_off4(&a->da_cumsum, b, h, c, Q - 1));
    const int   seq = ssmi_present(&a->seq_idx) && len > 0;
    int64_t     sl  = 0;
    if (seq) sl = ssmi_cpu_seq_at(&a->seq_idx, b, t0 + len - 1);
    for (int64_t j = 0; j < len; ++j) w[j] = cl - ssmi_get_f32(&a->da_cumsum, ssmi_off4(&a->da_cumsum, b, h, c, j));
    job->kernels->vexp(len, w, w);
    for (int64_t j = 0; j < len; ++j) {
        const int keep = !seq || ssmi_cpu_seq_at(&a->seq_idx, b, t0 + j) == sl;
        w[j]           = keep ? w[j] * ssmi_get_f32(&a->dt, ssmi_off4(&a->dt, b, h, c, j)) : 0.0f;
    }
}

static void state_task(void * arg, int64_t task, int32_t thread) {
    const state_job *                   job = (const state_job *) arg;
    const ssm_mamba2_chunk_state_args * a   = job->args;
    const ssmi_mamba2_dims *            d   = job->dims;
    const ssmi_cpu_kernels *            k   = job->kernels;
    const int64_t P = d->headdim, N = d->dstate, Q = d->chunk, NC = d->nchunks, G = d->ngroups;
    const int64_t R = d->nheads / G, nb = job->blocks;
    const int64_t b = task / (NC * G * nb), c = (task / (G * nb)) % NC, g = (task / nb) % G, blk = task % nb;
    const int64_t h0 = g * R + blk * job->head_block;
    const int64_t h1 = h0 + job->head_block < (g + 1) * R ? h0 + job->head_block : (g + 1) * R;
    const int64_t t0 = c * Q, len = ssmi_cpu_chunk_len(d, c);

    float * bt   = job->scratch + (int64_t) thread * job->scratch_floats; /* b      [len][N] */
    float * xw   = bt + ssmi_cpu_lines(Q * N);                           /* x·w    [len][P] */
    float * tile = xw + ssmi_cpu_lines(Q * P);                           /* result P×N / N×P */
    float * w    = tile + ssmi_cpu_lines(P * N);                         /* weights [Q]     */

    for (int64_t j = 0; j < len; ++j)
        k->load_row(bt + j * N, a->b.data, a->b.dtype, ssmi_off4(&a->b, b, t0 + j, g, 0), a->b.strides[3], N);
    const ssm_tensor * s = &a->states;
    for (int64_t h = h0; h < h1; ++h) {
        state_weights(job, b, c, h, len, w);
        for (int64_t j = 0; j < len; ++j) {
            float * row = xw + j * P;
            k->load_row(row, a->x.data, a->x.dtype, ssmi_off4(&a->x, b, t0 + j, h, 0), a->x.strides[3], P);
            for (int64_t p = 0; p < P; ++p) row[p] *= w[j];
        }
        if (job->n_major) {
            /* tile[n][p] = Σ_j b[j][n] · xw[j][p] */
            k->gemm(N, P, len, bt, 1, N, xw, P, tile, P, NULL, 0.0f, 0);
            for (int64_t n = 0; n < N; ++n)
                k->store_row(s->data, s->dtype, ssmi_off5(s, b, c, h, 0, n), s->strides[3], tile + n * P, P);
        } else {
            /* tile[p][n] = Σ_j xw[j][p] · b[j][n] */
            k->gemm(P, N, len, xw, 1, P, bt, N, tile, N, NULL, 0.0f, 0);
            for (int64_t p = 0; p < P; ++p)
                k->store_row(s->data, s->dtype, ssmi_off5(s, b, c, h, p, 0), s->strides[4], tile + p * N, N);
        }
    }
}

static int64_t abs64(int64_t v) { return v < 0 ? -v : v; }

ssm_status ssmi_cpu_mamba2_chunk_state(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                       const ssm_mamba2_chunk_state_args * a) {
    (void) p;
    if (d->batch * d->nchunks * d->nheads == 0 || d->headdim == 0 || d->dstate == 0) return SSM_STATUS_OK;
    const int64_t Q = d->chunk, P = d->headdim, N = d->dstate, R = d->nheads / d->ngroups;
    const int64_t threads = ssmi_num_threads(ctx);
    state_job     job;
    /* whole groups per task when that gives a few tasks per thread, else split the heads */
    job.head_block = ssmi_cpu_head_block(R, R, d->batch * d->nchunks * d->ngroups, 4 * threads);
    job.blocks = (R + job.head_block - 1) / job.head_block;
    const int64_t ntasks = d->batch * d->nchunks * d->ngroups * job.blocks;
    job.dims           = d;
    job.args           = a;
    job.kernels        = ssmi_cpu_kernels_for(ctx);
    job.scratch_floats = ssmi_cpu_lines(ssmi_cpu_lines(Q * N) + ssmi_cpu_lines(Q * P) + ssmi_cpu_lines(P * N) +
                                        ssmi_cpu_lines(Q));
    job.n_major        = abs64(a->states.strides[3]) < abs64(a->states.strides[4]);
    job.scratch        = ssmi_cpu_thread_scratch(ctx, "mamba2_chunk_state", job.scratch_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, ntasks, state_task, &job);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}
