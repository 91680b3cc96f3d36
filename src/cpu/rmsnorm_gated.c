/* Gated RMSNorm on the CPU (spec §6.3), fp32 math in the row kernels of kernels/layer
 * (vectorised over the row, fixed-order sums of squares). Forward: tasks are blocks of
 * rows. Backward: the same row blocks, each writing its dweight partial sum; the partials
 * are added in block order afterwards, in parallel over column blocks. The blocks depend
 * only on M (not on the thread count), so every thread count gives the same bits. Rows of
 * f32 tensors with contiguous columns are read and written in place. */
#include <math.h>
#include <string.h>

#include "cpu_common.h"
#include "ssmi_cpu_layer.h"

#define NORM_MAX_BLOCKS 256 /* row blocks of the backward: bounds the partial sums' memory */
#define NORM_SUM_COLS 1024  /* columns per task of the dweight reduction */

typedef struct norm_job {
    const ssm_rmsnorm_params *         p;
    const ssmi_rmsnorm_dims *          d;
    const ssm_tensor *                 x, *z, *w, *out; /* forward */
    const ssm_rmsnorm_gated_bwd_args * bwd;             /* backward (NULL in the forward) */
    const ssmi_cpu_kernels *           k;
    const ssmi_cpu_layer_kernels *     lk;
    float *                            scratch;         /* per thread: rows of dstride floats */
    int64_t                            scratch_floats;
    float *                            partial;         /* backward: nblocks × D dweight partials */
    int64_t                            rows_per_block, nblocks, dstride;
} norm_job;

static inline int direct_row(const ssm_tensor * t) {
    return ssmi_present(t) && t->dtype == SSM_DTYPE_F32 && t->strides[1] == 1;
}

/* Row r of an (M, D) tensor as fp32: in place, or converted into buf. */
static const float * in_row(const norm_job * job, const ssm_tensor * t, int64_t r, float * buf) {
    if (direct_row(t)) return (const float *) t->data + ssmi_off2(t, r, 0);
    job->k->load_row(buf, t->data, t->dtype, ssmi_off2(t, r, 0), t->strides[1], job->d->dim);
    return buf;
}

/* Where row r of an output goes: in place, or buf (then flushed by out_flush). */
static float * out_row(const ssm_tensor * t, int64_t r, float * buf) {
    return direct_row(t) ? (float *) t->data + ssmi_off2(t, r, 0) : buf;
}
static void out_flush(const norm_job * job, const ssm_tensor * t, int64_t r, const float * buf) {
    if (ssmi_present(t) && !direct_row(t))
        job->k->store_row(t->data, t->dtype, ssmi_off2(t, r, 0), t->strides[1], buf, job->d->dim);
}

static void row_range(const norm_job * job, int64_t task, int64_t * r0, int64_t * r1) {
    *r0 = task * job->rows_per_block;
    *r1 = *r0 + job->rows_per_block < job->d->rows ? *r0 + job->rows_per_block : job->d->rows;
}

static void fwd_task(void * arg, int64_t task, int32_t thread) {
    const norm_job * job = (const norm_job *) arg;
    const int64_t    D = job->d->dim, ds = job->dstride;
    float *          s = job->scratch + (int64_t) thread * job->scratch_floats;
    float *xb = s, *zb = s + ds, *w = s + 2 * ds, *ob = s + 3 * ds, *tmp = s + 4 * ds;
    job->k->load_row(w, job->w->data, job->w->dtype, ssmi_off1(job->w, 0), job->w->strides[0], D);
    const int has_z = ssmi_present(job->z);
    int64_t   r0, r1;
    row_range(job, task, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
        const float * x = in_row(job, job->x, r, xb);
        const float * z = has_z ? in_row(job, job->z, r, zb) : NULL;
        float *       o = out_row(job->out, r, ob);
        job->lk->rmsnorm_row(D, job->d->group_size, (float) job->p->eps, job->p->norm_before_gate, x, z, w, o, tmp);
        out_flush(job, job->out, r, o);
    }
}

static void bwd_task(void * arg, int64_t task, int32_t thread) {
    const norm_job *                   job = (const norm_job *) arg;
    const ssm_rmsnorm_gated_bwd_args * a   = job->bwd;
    const int64_t                      D = job->d->dim, ds = job->dstride;
    float *                            s = job->scratch + (int64_t) thread * job->scratch_floats;
    float *xb = s, *zb = s + ds, *w = s + 2 * ds, *dyb = s + 3 * ds, *dxb = s + 4 * ds, *dzb = s + 5 * ds,
          *tmp = s + 6 * ds;
    float *   dw    = job->partial + task * ds;
    const int has_z = ssmi_present(job->z);
    job->k->load_row(w, job->w->data, job->w->dtype, ssmi_off1(job->w, 0), job->w->strides[0], D);
    memset(dw, 0, (size_t) D * sizeof(float));
    int64_t r0, r1;
    row_range(job, task, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
        const float * x  = in_row(job, job->x, r, xb);
        const float * z  = has_z ? in_row(job, job->z, r, zb) : NULL;
        const float * dy = in_row(job, &a->dout, r, dyb);
        float *       dx = ssmi_present(&a->dx) ? out_row(&a->dx, r, dxb) : dxb;
        float *       dz = ssmi_present(&a->dz) ? out_row(&a->dz, r, dzb) : dzb;
        job->lk->rmsnorm_bwd_row(D, job->d->group_size, (float) job->p->eps, job->p->norm_before_gate, x, z, w, dy, dx,
                                dz, dw, tmp);
        out_flush(job, &a->dx, r, dx);
        if (has_z) out_flush(job, &a->dz, r, dz);
    }
}

/* dweight[c0, c0+NORM_SUM_COLS): the row blocks' partials in block order. */
static void sum_task(void * arg, int64_t task, int32_t thread) {
    const norm_job * job = (const norm_job *) arg;
    const int64_t    c0  = task * NORM_SUM_COLS;
    const int64_t    n   = job->d->dim - c0 < NORM_SUM_COLS ? job->d->dim - c0 : NORM_SUM_COLS;
    float *          sum = job->scratch + (int64_t) thread * job->scratch_floats;
    memset(sum, 0, (size_t) n * sizeof(float));
    for (int64_t t = 0; t < job->nblocks; ++t) job->lk->add_row(n, job->partial + t * job->dstride + c0, sum);
    const ssm_tensor * dwt = &job->bwd->dweight;
    job->k->store_row(dwt->data, dwt->dtype, ssmi_off1(dwt, c0), dwt->strides[0], sum, n);
}

static void init_job(norm_job * job, const ssm_context * ctx, const ssm_rmsnorm_params * p, const ssmi_rmsnorm_dims * d) {
    memset(job, 0, sizeof *job);
    job->p       = p;
    job->d       = d;
    job->k       = ssmi_cpu_kernels_for(ctx);
    job->lk      = ssmi_cpu_layer_kernels_for(ctx);
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
    job.scratch_floats = 4 * job.dstride + ssmi_cpu_lines(d->group_size);
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
    job.scratch_floats = 6 * job.dstride + 2 * ssmi_cpu_lines(d->group_size);
    job.scratch        = ssmi_cpu_thread_scratch(ctx, "rmsnorm_gated_bwd", job.scratch_floats);
    if (job.scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    const size_t pbytes = (size_t) (job.nblocks > 0 ? job.nblocks : 1) * (size_t) job.dstride * sizeof(float);
    job.partial         = (float *) ssmi_alloc(ctx, pbytes);
    if (job.partial == NULL) {
        ssmi_free(ctx, job.scratch);
        return ssmi_error(ctx, SSM_STATUS_OUT_OF_MEMORY, "rmsnorm_gated_bwd: could not allocate %zu bytes of scratch",
                          pbytes);
    }
    if (job.nblocks > 0) ssmi_parallel_for(ctx, job.nblocks, bwd_task, &job);
    if (ssmi_present(&a->dweight)) ssmi_parallel_for(ctx, (D + NORM_SUM_COLS - 1) / NORM_SUM_COLS, sum_task, &job);
    ssmi_free(ctx, job.partial);
    ssmi_free(ctx, job.scratch);
    return SSM_STATUS_OK;
}
