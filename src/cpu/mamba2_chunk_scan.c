/*
 * Mamba-2 chunk_scan on the CPU (spec §2.5): one task per (batch row, chunk, head).
 *   y = diag(alpha)·C·S_inᵀ  +  Mdiag·X  +  D·x        alpha_i = M_prev(i) · exp(cm_i)
 *   Mdiag[i][j] = cb[i][j] · exp(cm_i − cm_j) · dt_j    (j ≤ i; cb already M_pair-masked)
 *   out_x = y (if given);  out = y·silu(z) (if z) else y
 * The state is loaded transposed to N×P (P contiguous) so both GEMMs run with P as the
 * vector dimension. Rows past the sequence end (partial last chunk) are neither read
 * nor written.
 */
#include "ssmi_cpu.h"
#include "cpu_common.h"

typedef struct scan_job {
    const ssmi_mamba2_dims *           dims;
    const ssm_mamba2_chunk_scan_args * args;
    const ssmi_cpu_kernels *           kernels;
    float *                            scratch;
    int64_t                            scratch_floats;
} scan_job;

static void chunk_scan_task(void * arg, int64_t task, int32_t thread) {
    const scan_job *                   job = (const scan_job *) arg;
    const ssm_mamba2_chunk_scan_args * a   = job->args;
    const ssmi_mamba2_dims *           d   = job->dims;
    const ssmi_cpu_kernels *           k   = job->kernels;
    const int64_t H = d->nheads, P = d->headdim, N = d->dstate, Q = d->chunk, NC = d->nchunks;
    const int64_t b = task / (NC * H), c = (task / H) % NC, h = task % H;
    const int64_t g   = h / (H / d->ngroups);
    const int64_t t0  = c * Q;
    const int64_t len = ssmi_cpu_chunk_len(d, c);
    if (len == 0) return;

    float * ct    = job->scratch + (int64_t) thread * job->scratch_floats; /* c      [len][N] */
    float * st    = ct + ssmi_cpu_lines(Q * N);                           /* S_inᵀ  [N][P]   */
    float * cbt   = st + ssmi_cpu_lines(N * P);                           /* cb     [Q][Q]   */
    float * mm    = cbt + ssmi_cpu_lines(Q * Q);                          /* Mdiag  [Q][Q]   */
    float * xt    = mm + ssmi_cpu_lines(Q * Q);                           /* x      [len][P] */
    float * yt    = xt + ssmi_cpu_lines(Q * P);                           /* y      [len][P] */
    float * dtv   = yt + ssmi_cpu_lines(Q * P);                           /* dt     [Q]      */
    float * cm    = dtv + ssmi_cpu_lines(Q);                              /* cumsum [Q]      */
    float * alpha = cm + ssmi_cpu_lines(Q);                               /* [Q]             */
    float * dvec  = alpha + ssmi_cpu_lines(Q);                            /* D row  [P]      */
    float * zrow  = dvec + ssmi_cpu_lines(P);                             /* z row  [P]      */

    for (int64_t i = 0; i < len; ++i) {
        dtv[i] = ssmi_get_f32(&a->dt, ssmi_off4(&a->dt, b, h, c, i));
        cm[i]  = ssmi_get_f32(&a->da_cumsum, ssmi_off4(&a->da_cumsum, b, h, c, i));
    }
    k->vexp(len, cm, alpha);
    if (ssmi_present(&a->seq_idx)) {
        const int64_t prev = c == 0 ? 0 : ssmi_cpu_seq_at(&a->seq_idx, b, t0 - 1);
        for (int64_t i = 0; i < len; ++i)
            if (ssmi_cpu_seq_at(&a->seq_idx, b, t0 + i) != prev) alpha[i] = 0.0f;
    }
    const ssm_tensor * si = &a->states_in;
    for (int64_t n = 0; n < N; ++n)
        k->load_row(st + n * P, si->data, si->dtype, ssmi_off5(si, b, c, h, 0, n), si->strides[3], P);
    for (int64_t i = 0; i < len; ++i) {
        k->load_row(ct + i * N, a->c.data, a->c.dtype, ssmi_off4(&a->c, b, t0 + i, g, 0), a->c.strides[3], N);
        k->load_row(xt + i * P, a->x.data, a->x.dtype, ssmi_off4(&a->x, b, t0 + i, h, 0), a->x.strides[3], P);
        k->load_row(cbt + i * Q, a->cb.data, a->cb.dtype, ssmi_off5(&a->cb, b, c, g, i, 0), a->cb.strides[4], len);
    }
    k->gemm(len, P, N, ct, N, 1, st, P, yt, P, alpha, 0.0f, 0);
    k->decay_rows(len, len, cbt, Q, cm, dtv, mm, Q);
    k->gemm(len, P, len, mm, Q, 1, xt, P, yt, P, NULL, 1.0f, 1);

    const int has_d = ssmi_present(&a->d);
    if (has_d) {
        if (a->d.ndim == 2) k->load_row(dvec, a->d.data, a->d.dtype, ssmi_off2(&a->d, h, 0), a->d.strides[1], P);
        else {
            const float dh = ssmi_get_f32(&a->d, ssmi_off1(&a->d, h));
            for (int64_t p = 0; p < P; ++p) dvec[p] = dh;
        }
    }
    for (int64_t i = 0; i < len; ++i) {
        float *       y = yt + i * P;
        const float * x = xt + i * P;
        const int64_t t = t0 + i;
        if (has_d)
            for (int64_t p = 0; p < P; ++p) y[p] += dvec[p] * x[p];
        if (ssmi_present(&a->out_x))
            k->store_row(a->out_x.data, a->out_x.dtype, ssmi_off4(&a->out_x, b, t, h, 0), a->out_x.strides[3], y, P);
        if (ssmi_present(&a->z)) {
            k->load_row(zrow, a->z.data, a->z.dtype, ssmi_off4(&a->z, b, t, h, 0), a->z.strides[3], P);
            k->silu_gate(P, y, zrow, y);
        }
        k->store_row(a->out.data, a->out.dtype, ssmi_off4(&a->out, b, t, h, 0), a->out.strides[3], y, P);
    }
}

ssm_status ssmi_cpu_mamba2_chunk_scan(ssm_context * ctx, const ssm_mamba2_params * p, const ssmi_mamba2_dims * d,
                                      const ssm_mamba2_chunk_scan_args * a) {
    (void) p;
    const int64_t ntasks = d->batch * d->nchunks * d->nheads;
    if (ntasks == 0 || d->headdim == 0) return SSM_STATUS_OK;
    const int64_t Q = d->chunk, N = d->dstate, P = d->headdim;
    scan_job      job;
    job.dims           = d;
    job.args           = a;
    job.kernels        = ssmi_cpu_kernels_for(ctx);
    job.scratch_floats = ssmi_cpu_lines(ssmi_cpu_lines(Q * N) + ssmi_cpu_lines(N * P) + 2 * ssmi_cpu_lines(Q * Q) +
                                        2 * ssmi_cpu_lines(Q * P) + 3 * ssmi_cpu_lines(Q) + 2 * ssmi_cpu_lines(P));
    job.scratch        = ssmi_cpu_thread_scratch(ctx, "mamba2_chunk_scan", job.scratch_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, ntasks, chunk_scan_task, &job);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}
