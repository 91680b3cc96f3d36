/*
 * Mamba-3 angle cumsum on the CPU (spec §3.2, §6.6), forward and backward.
 *
 * Tasks: one per (sequence, head). Forward: θ = wrap(θ + π·tanh(raw)·dt) token by token
 * in fp32 (ssmi_cpu_m3_angle_run, the same steps the fused forward takes). Backward, from
 * the last token down: G += dθ_t, dangles_t = π·dt_t·(1 − tanh²)·G, ddt_t = π·Σ_i tanh_i·G_i
 * (i ascending), and dangle_state = G after token 0 (dfinal, or 0, for an empty sequence).
 * Each output element is written by one task in a fixed order: bitwise identical results
 * for any thread count.
 */
#include <string.h>

#include "mamba3_common.h"
#include "ssmi_cpu_mamba3.h"

#define ANGLE_BLOCK 256 /* tokens of dt loaded at a time */

typedef struct angle_job {
    const ssmi_mamba3_dims *                 d;
    const ssmi_cpu_m3_kernels *              k;
    const ssm_mamba3_angle_cumsum_args *     fa;
    const ssm_mamba3_angle_cumsum_bwd_args * ba;
    float *                                  scratch;
    int64_t                                  thread_floats;
} angle_job;

static int64_t angle_thread_floats(int64_t A) {
    return ssmi_cpu_lines(ANGLE_BLOCK) + 4 * ssmi_cpu_lines(A + 8);
}

static void angle_fwd_task(void * arg, int64_t task, int32_t thread) {
    const angle_job *                    job = (const angle_job *) arg;
    const ssm_mamba3_angle_cumsum_args * a   = job->fa;
    const int64_t                        H = job->d->nheads, A = job->d->nangles, s = task / H, h = task % H;
    float * dtv   = job->scratch + (int64_t) thread * job->thread_floats;
    float * theta = dtv + ssmi_cpu_lines(ANGLE_BLOCK);
    float * raw   = theta + ssmi_cpu_lines(A + 8);
    int64_t row, t0, len;
    ssmi_cpu_sequence(&a->cu_seqlens, job->d->seqlen, s, &row, &t0, &len);
    ssmi_cpu_m3_load_row3(job->k, ssmi_present(&a->angle_state) ? &a->angle_state : NULL, s, h, A, theta);
    for (int64_t b0 = 0; b0 < len; b0 += ANGLE_BLOCK) {
        const int64_t n = len - b0 < ANGLE_BLOCK ? len - b0 : ANGLE_BLOCK;
        job->k->base->load_row(dtv, a->dt.data, a->dt.dtype, ssmi_off3(&a->dt, row, h, t0 + b0), a->dt.strides[2], n);
        ssmi_cpu_m3_angle_run(job->k, &a->angles, row, h, t0 + b0, n, A, dtv, theta, raw, &a->angles_cumsum);
    }
    ssmi_cpu_m3_store_row3(job->k, &a->final_angle_state, s, h, A, theta);
}

static void angle_bwd_task(void * arg, int64_t task, int32_t thread) {
    const angle_job *                        job = (const angle_job *) arg;
    const ssm_mamba3_angle_cumsum_bwd_args * a   = job->ba;
    const ssmi_cpu_kernels *                 b   = job->k->base;
    const int64_t                            H = job->d->nheads, A = job->d->nangles, s = task / H, h = task % H;
    float * dtv = job->scratch + (int64_t) thread * job->thread_floats;
    float * g   = dtv + ssmi_cpu_lines(ANGLE_BLOCK);
    float * raw = g + ssmi_cpu_lines(A + 8);
    float * dth = raw + ssmi_cpu_lines(A + 8);
    float * tnh = dth + ssmi_cpu_lines(A + 8);
    int64_t row, t0, len;
    ssmi_cpu_sequence(&a->cu_seqlens, job->d->seqlen, s, &row, &t0, &len);
    ssmi_cpu_m3_load_row3(job->k, ssmi_present(&a->dfinal_angle_state) ? &a->dfinal_angle_state : NULL, s, h, A, g);
    for (int64_t e = len; e > 0; e -= ANGLE_BLOCK) {
        const int64_t n = e < ANGLE_BLOCK ? e : ANGLE_BLOCK, tb = t0 + e - n;
        b->load_row(dtv, a->dt.data, a->dt.dtype, ssmi_off3(&a->dt, row, h, tb), a->dt.strides[2], n);
        for (int64_t i = n - 1; i >= 0; --i) {
            const int64_t t = tb + i;
            if (A > 0) {
                b->load_row(dth, a->dangles_cumsum.data, a->dangles_cumsum.dtype,
                            ssmi_off4(&a->dangles_cumsum, row, t, h, 0), a->dangles_cumsum.strides[3], A);
                b->load_row(raw, a->angles.data, a->angles.dtype, ssmi_off4(&a->angles, row, t, h, 0),
                            a->angles.strides[3], A);
                job->k->vtanh(A, raw, tnh);
            }
            const float pdt = SSMI_PI_F * dtv[i];
            float       ddt = 0.0f;
            for (int64_t j = 0; j < A; ++j) {
                g[j] += dth[j];
                ddt += tnh[j] * g[j];
                raw[j] = pdt * (1.0f - tnh[j] * tnh[j]) * g[j];
            }
            if (ssmi_present(&a->dangles) && A > 0)
                b->store_row(a->dangles.data, a->dangles.dtype, ssmi_off4(&a->dangles, row, t, h, 0),
                             a->dangles.strides[3], raw, A);
            if (ssmi_present(&a->ddt)) ssmi_set_f32(&a->ddt, ssmi_off3(&a->ddt, row, h, t), SSMI_PI_F * ddt);
        }
    }
    ssmi_cpu_m3_store_row3(job->k, &a->dangle_state, s, h, A, g);
}

static ssm_status run_angle(ssm_context * ctx, const char * op, angle_job * job, ssmi_task_fn fn) {
    const ssmi_mamba3_dims * d = job->d;
    if (d->nheads == 0 || d->nseq == 0) return SSM_STATUS_OK;
    job->k             = ssmi_cpu_m3_kernels_for(ctx);
    job->thread_floats = angle_thread_floats(d->nangles);
    job->scratch       = ssmi_cpu_thread_scratch(ctx, op, job->thread_floats);
    if (job->scratch == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    ssmi_parallel_for(ctx, d->nseq * d->nheads, fn, job);
    ssmi_free(ctx, job->scratch);
    return SSM_STATUS_OK;
}

ssm_status ssmi_cpu_mamba3_angle_cumsum(ssm_context * ctx, const ssm_mamba3_params * p, const ssmi_mamba3_dims * d,
                                        const ssm_mamba3_angle_cumsum_args * a) {
    (void) p;
    angle_job job = { d, NULL, a, NULL, NULL, 0 };
    return run_angle(ctx, "mamba3_angle_cumsum", &job, angle_fwd_task);
}

ssm_status ssmi_cpu_mamba3_angle_cumsum_bwd(ssm_context * ctx, const ssm_mamba3_params * p,
                                            const ssmi_mamba3_dims * d, const ssm_mamba3_angle_cumsum_bwd_args * a) {
    (void) p;
    angle_job job = { d, NULL, NULL, a, NULL, 0 };
    return run_angle(ctx, "mamba3_angle_cumsum_bwd", &job, angle_bwd_task);
}
