/* Gated RMSNorm on the CPU (spec §6.3), fp32 math. Forward: tasks are blocks of rows.
 * Backward: the same row blocks, each writing its dweight partial sum; the partials are
 * added in block order afterwards. The blocks depend only on M (not on the thread count),
 * so every thread count gives the same bits. */
#include <math.h>
#include <string.h>

#include "cpu_common.h"
#include "ssmi_cpu_layer.h"

#define NORM_MAX_BLOCKS 256 /* row blocks of the backward: bounds the partial sums' memory */

typedef struct norm_job {
    const ssm_rmsnorm_params *         p;
    const ssmi_rmsnorm_dims *          d;
    const ssm_tensor *                 x, *z, *w, *out;     /* forward */
    const ssm_rmsnorm_gated_bwd_args * bwd;                 /* backward (NULL in the forward) */
    const ssmi_cpu_kernels *           k;
    float *                            scratch;             /* per thread: 6 rows of D */
    int64_t                            scratch_floats;
    float *                            partial;             /* backward: nblocks × D dweight partials */
    int64_t                            rows_per_block, nblocks, dstride;
} norm_job;

static inline float sigmoidf_(float v) { return 1.0f / (1.0f + expf(-v)); }

/* v = x or x·silu(z) (gate before the norm) into vrow; sg = silu(z) when z is given. */
static void load_v(const norm_job * job, int64_t r, float * xrow, float * zrow, float * vrow, float * sg) {
    const int64_t D = job->d->dim;
    job->k->load_row(xrow, job->x->data, job->x->dtype, ssmi_off2(job->x, r, 0), job->x->strides[1], D);
    memcpy(vrow, xrow, (size_t) D * sizeof(float));
    if (!ssmi_present(job->z)) return;
    job->k->load_row(zrow, job->z->data, job->z->dtype, ssmi_off2(job->z, r, 0), job->z->strides[1], D);
    for (int64_t c = 0; c < D; ++c) sg[c] = zrow[c] * sigmoidf_(zrow[c]);
    if (!job->p->norm_before_gate)
        for (int64_t c = 0; c < D; ++c) vrow[c] *= sg[c];
}

static float rstd_of(const norm_job * job, const float * v, int64_t c0) {
    float sum = 0.0f;
    for (int64_t c = c0; c < c0 + job->d->group_size; ++c) sum += v[c] * v[c];
    return 1.0f / sqrtf(sum / (float) job->d->group_size + (float) job->p->eps);
}

static void fwd_task(void * arg, int64_t task, int32_t thread) {
    const norm_job * job = (const norm_job *) arg;
    const int64_t    D   = job->d->dim;
    float *          s   = job->scratch + (int64_t) thread * job->scratch_floats;
    float *xrow = s, *zrow = s + job->dstride, *vrow = s + 2 * job->dstride, *sg = s + 3 * job->dstride,
          *w = s + 4 * job->dstride, *o = s + 5 * job->dstride;
    job->k->load_row(w, job->w->data, job->w->dtype, 0, job->w->strides[0], D);
    const int64_t r0 = task * job->rows_per_block, r1 = r0 + job->rows_per_block < job->d->rows ? r0 + job->rows_per_block : job->d->rows;
    const int     gate_after = job->p->norm_before_gate && ssmi_present(job->z);
    for (int64_t r = r0; r < r1; ++r) {
        load_v(job, r, xrow, zrow, vrow, sg);
        for (int64_t c0 = 0; c0 < D; c0 += job->d->group_size) {
            const float rstd = rstd_of(job, vrow, c0);
            for (int64_t c = c0; c < c0 + job->d->group_size; ++c) o[c] = vrow[c] * rstd * w[c];
        }
        if (gate_after)
            for (int64_t c = 0; c < D; ++c) o[c] *= sg[c];
        job->k->store_row(job->out->data, job->out->dtype, ssmi_off2(job->out, r, 0), job->out->strides[1], o, D);
    }
}

static void bwd_task(void * arg, int64_t task, int32_t thread) {
    const norm_job *                   job = (const norm_job *) arg;
    const ssm_rmsnorm_gated_bwd_args * a   = job->bwd;
    const int64_t                      D = job->d->dim, gs = job->d->group_size;
    float *                            s = job->scratch + (int64_t) thread * job->scratch_floats;
    float *xrow = s, *zrow = s + job->dstride, *vrow = s + 2 * job->dstride, *sg = s + 3 * job->dstride,
          *w = s + 4 * job->dstride, *dy = s + 5 * job->dstride, *dxr = s + 6 * job->dstride,
          *dzr = s + 7 * job->dstride;
    float *       dw = job->partial + task * job->dstride;
    const int     has_z = ssmi_present(job->z), nbg = job->p->norm_before_gate;
    job->k->load_row(w, job->w->data, job->w->dtype, 0, job->w->strides[0], D);
    memset(dw, 0, (size_t) D * sizeof(float));
    const int64_t r0 = task * job->rows_per_block, r1 = r0 + job->rows_per_block < job->d->rows ? r0 + job->rows_per_block : job->d->rows;
    for (int64_t r = r0; r < r1; ++r) {
        load_v(job, r, xrow, zrow, vrow, sg);
        job->k->load_row(dy, a->dout.data, a->dout.dtype, ssmi_off2(&a->dout, r, 0), a->dout.strides[1], D);
        for (int64_t c0 = 0; c0 < D; c0 += gs) {
            const float rstd = rstd_of(job, vrow, c0);
            float       c1   = 0.0f;
            for (int64_t c = c0; c < c0 + gs; ++c) {
                const float xh = vrow[c] * rstd;
                if (nbg && has_z) {
                    const float sz = sigmoidf_(zrow[c]);
                    dzr[c]         = dy[c] * xh * w[c] * sz * (1.0f + zrow[c] * (1.0f - sz));
                    dy[c] *= sg[c];
                }
                c1 += xh * w[c] * dy[c];
                dw[c] += dy[c] * xh;
            }
            c1 /= (float) gs;
            for (int64_t c = c0; c < c0 + gs; ++c) {
                const float xh = vrow[c] * rstd;
                const float dv = (w[c] * dy[c] - xh * c1) * rstd;
                if (!nbg && has_z) {
                    const float sz = sigmoidf_(zrow[c]);
                    dzr[c]         = dv * xrow[c] * sz * (1.0f + zrow[c] * (1.0f - sz));
                    dxr[c]         = dv * sg[c];
                } else {
                    dxr[c] = dv;
                }
            }
        }
        if (ssmi_present(&a->dx))
            job->k->store_row(a->dx.data, a->dx.dtype, ssmi_off2(&a->dx, r, 0), a->dx.strides[1], dxr, D);
        if (ssmi_present(&a->dz))
            job->k->store_row(a->dz.data, a->dz.dtype, ssmi_off2(&a->dz, r, 0), a->dz.strides[1], dzr, D);
    }
}

static void init_job(norm_job * job, const ssm_context * ctx, const ssm_rmsnorm_params * p, const ssmi_rmsnorm_dims * d) {
    memset(job, 0, sizeof *job);
    job->p       = p;
    job->d       = d;
    job->k       = ssmi_cpu_kernels_for(ctx);
    job->dstride = ssmi_cpu_lines(d->dim);
    int64_t rpb  = (d->rows + NORM_MAX_BLOCKS - 1) / NORM_MAX_BLOCKS;
    job->rows_per_block = rpb < 8 ? 8 : rpb;
    job->nblocks        = (d->rows + job->rows_per_block - 1) / job->rows_per_block;
}

ssm_status ssmi_cpu_rmsnorm_gated(ssm_context * ctx, const ssm_rmsnorm_params * p, const ssmi_rmsnorm_dims * d,
                                  const ssm_rmsnorm_gated_args * a) {
    norm_job job;
    init_job(&job, ctx, p, d);
    if (job.nblocks == 0 || d->dim == 0) return SSM_STATUS_OK;
    job.x = &a->x, job.z = &a->z, job.w = &a->weight, job.out = &a->out;
    job.scratch_floats = 6 * job.dstride;
    job.scratch        = ssmi_cpu_thread_scratch(ctx, "rmsnorm_gated", job.scratch_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, job.nblocks, fwd_task, &job);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}

ssm_status ssmi_cpu_rmsnorm_gated_bwd(ssm_context * ctx, const ssm_rmsnorm_params * p, const ssmi_rmsnorm_dims * d,
                                      const ssm_rmsnorm_gated_bwd_args * a) {
    norm_job job;
    init_job(&job, ctx, p, d);
    const int64_t D = d->dim;
    if (D == 0) return SSM_STATUS_OK;
    job.x = &a->x, job.z = &a->z, job.w = &a->weight, job.bwd = a;
    job.scratch_floats = 8 * job.dstride;
    job.scratch        = ssmi_cpu_thread_scratch(ctx, "rmsnorm_gated_bwd", job.scratch_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    const size_t pbytes = (size_t) (job.nblocks > 0 ? job.nblocks : 1) * (size_t) job.dstride * sizeof(float);
    job.partial         = (float *) ssmi_alloc(ctx, pbytes);
    if (job.partial == NULL) {
        ssmi_free(ctx, job.scratch);
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "rmsnorm_gated_bwd: could not allocate %zu bytes of scratch",
                          pbytes);
    }
    ssmi_parallel_for(ctx, job.nblocks, bwd_task, &job);
    if (ssmi_present(&a->dweight)) {
        float * sum = job.scratch; /* thread 0's scratch is free again */
        memset(sum, 0, (size_t) D * sizeof(float));
        for (int64_t t = 0; t < job.nblocks; ++t)
            for (int64_t c = 0; c < D; ++c) sum[c] += job.partial[t * job.dstride + c];
        job.k->store_row(a->dweight.data, a->dweight.dtype, 0, a->dweight.strides[0], sum, D);
    }
    ssmi_free(ctx, job.partial);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}
