/*
 * mamba2_step.c — public entry point of the Mamba-2 decode step (spec §2.9).
 *
 * Same three steps as every entry point: validate (shapes from x and b, the state pool,
 * the slot indices, aliasing), fill ssmi_mamba2_dims, dispatch to REF, CPU or CUDA. The pool
 * may be updated in place: final_state may be exactly the same view as state. Any other
 * overlap between an output and an input is an error, because the backends read inputs
 * while writing outputs.
 *
 * CUDA (explicitly, or AUTO with x on a CUDA device): every float tensor must be on the
 * device; state_batch_indices may be in host memory (used as it is: the fastest decode) or
 * on the device (copied to the host for validation, which synchronises the stream). The
 * same validation then runs on CPU-typed copies of the views.
 */
#include <stdint.h>
#include <string.h>

#include "../core/ssmi.h"
#include "../cpu/ssmi_cpu.h"
#include "../ref/ssmi_ref.h"
#include "ops_common.h"

#ifdef SSMOPS_HAVE_CUDA
#include "../cuda/ssmi_cuda.h"
#endif

static const char step_op[] = "mamba2_step";

/* Pairwise disjointness of an output with a list of inputs. */
static ssm_status check_out_vs(ssm_context * ctx, const char * out_name, const ssm_tensor * out,
                               const char * const * names, const ssm_tensor * const * ins, int nin) {
    if (!ssmi_present(out)) return SSM_STATUS_OK;
    for (int i = 0; i < nin; ++i)
        SSM_FORWARD_IF_ERROR(ssmi_check_no_overlap(ctx, step_op, out_name, out, names[i], ins[i]));
    return SSM_STATUS_OK;
}

static ssm_status validate_step(ssm_context * ctx, const ssm_mamba2_params * p, const ssm_mamba2_step_args * a,
                                ssmi_mamba2_dims * d) {
    static const int64_t any3[3] = {-1, -1, -1};
    const uint32_t       F = SSMI_FLOAT_DTYPES;
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_step_params(ctx, step_op, p, a));
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, step_op, "x", &a->x, 0, 3, any3, F));
    d->batch = a->x.shape[0];
    d->nheads = a->x.shape[1];
    d->headdim = a->x.shape[2];
    d->seqlen = 1;
    d->chunk = 1;
    d->nchunks = 1;
    const int64_t wb[3] = {d->batch, -1, -1};
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, step_op, "b", &a->b, 0, 3, wb, F));
    d->ngroups = a->b.shape[1];
    d->dstate = a->b.shape[2];
    SSM_RETURN_IF(d->ngroups < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: b.shape[1]=%lld (ngroups) must be at least 1",
                  step_op, (long long)d->ngroups);
    SSM_RETURN_IF(d->nheads % d->ngroups != 0, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: x.shape[1]=%lld is not a multiple of b.shape[1]=%lld", step_op, (long long)d->nheads,
                  (long long)d->ngroups);
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, step_op, "c", &a->c, 0, 3, a->b.shape, F));
    const int64_t whp[3] = {d->batch, d->nheads, d->headdim};
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, step_op, "dt", &a->dt, 0, 3, whp, F));
    const int64_t wa[3] = {d->nheads, d->headdim, d->dstate};
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, step_op, "a", &a->a, 0, 3, wa, F));
    const int64_t wp[2] = {d->nheads, d->headdim};
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, step_op, "d", &a->d, 1, 2, wp, F));
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, step_op, "z", &a->z, 1, 3, whp, F));
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, step_op, "dt_bias", &a->dt_bias, 1, 2, wp, F));
    const int64_t wst[4] = {-1, d->nheads, d->headdim, d->dstate};
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, step_op, "state", &a->state, 0, 4, wst, F));
    d->slots = a->state.shape[0];
    const int64_t widx[1] = {d->batch};
    SSM_FORWARD_IF_ERROR(
        ssmi_check_tensor(ctx, step_op, "state_batch_indices", &a->state_batch_indices, 1, 1, widx, SSMI_INDEX_DTYPES));
    SSM_RETURN_IF(!ssmi_present(&a->state_batch_indices) && d->slots != d->batch, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: state.shape[0]=%lld differs from x.shape[0]=%lld; without state_batch_indices row b uses "
                  "slot b",
                  step_op, (long long)d->slots, (long long)d->batch);
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, step_op, "out", &a->out, 0, 3, whp, F));
    const int64_t wfin[4] = {d->slots, d->nheads, d->headdim, d->dstate};
    SSM_FORWARD_IF_ERROR(ssmi_check_output(ctx, step_op, "final_state", &a->final_state, 1, 4, wfin, F));

    /* Aliasing: final_state may be the state view itself, nothing else may overlap. */
    const char * const       names[] = {"x", "dt", "a", "b", "c", "d", "z", "dt_bias", "state_batch_indices", "state"};
    const ssm_tensor * const ins[] = {&a->x, &a->dt,      &a->a, &a->b, &a->c, &a->d, &a->z, &a->dt_bias,
                                      &a->state_batch_indices, &a->state};
    const int                in_place = ssmi_present(&a->final_state) && ssmi_same_view(&a->final_state, &a->state);
    SSM_FORWARD_IF_ERROR(check_out_vs(ctx, "final_state", &a->final_state, names, ins, in_place ? 9 : 10));
    SSM_FORWARD_IF_ERROR(check_out_vs(ctx, "out", &a->out, names, ins, 10));
    SSM_FORWARD_IF_ERROR(ssmi_check_no_overlap(ctx, step_op, "out", &a->out, "final_state", &a->final_state));
    return ssmi_check_slot_indices(ctx, step_op, &a->state_batch_indices, d->batch, d->slots, "state");
}

#ifdef SSMOPS_HAVE_CUDA
/* The CUDA path: devices checked, float tensors re-typed, the index tensor as a host view,
 * the shared validation, the kernel, then the unused slots of a separate final pool. */
static ssm_status step_cuda(ssm_context * ctx, const ssm_mamba2_params * params, const ssm_mamba2_step_args * args) {
    ssmi_mamba2_dims d;
    if (params == NULL || args == NULL) return validate_step(ctx, params, args, &d);
    ssm_mamba2_step_args h = *args;
    ssm_tensor * const   fl[] = {&h.x,       &h.dt,    &h.a,   &h.b,  &h.c,          &h.d,
                                 &h.z,       &h.dt_bias, &h.state, &h.out, &h.final_state};
    const char * const   names[] = {"x", "dt", "a", "b", "c", "d", "z", "dt_bias", "state", "out", "final_state"};
    SSM_FORWARD_IF_ERROR(ssmi_cuda_retype(ctx, step_op, fl, names, 11));
    void *     buf = NULL;
    ssm_status st = ssmi_cuda_host_index(ctx, step_op, &args->state_batch_indices, &h.state_batch_indices, &buf);
    if (st == SSM_STATUS_OK) st = validate_step(ctx, params, &h, &d);
    if (st == SSM_STATUS_OK) st = ssmi_cuda_mamba2_step(ctx, params, &d, &h);
    if (st == SSM_STATUS_OK)
        st = ssmi_cuda_copy_unused_slots(ctx, step_op, &h.state, &h.final_state, &h.state_batch_indices, d.batch);
    ssmi_free(ctx, buf);
    return st;
}
#endif

ssm_status ssm_mamba2_step(ssm_context * ctx, const ssm_mamba2_params * params, const ssm_mamba2_step_args * args) {
    ssmi_clear_error(ctx);
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend_cuda(ctx, step_op, args != NULL ? &args->x : NULL, &be));
#ifdef SSMOPS_HAVE_CUDA
    if (be == SSMI_BACKEND_CUDA) return step_cuda(ctx, params, args);
#endif
    ssmi_mamba2_dims d;
    SSM_FORWARD_IF_ERROR(validate_step(ctx, params, args, &d));
    SSM_FORWARD_IF_ERROR(be == SSMI_BACKEND_REF ? ssmi_ref_mamba2_step(ctx, params, &d, args)
                                                : ssmi_cpu_mamba2_step(ctx, params, &d, args));
    /* A separate final_state is the whole pool after the step (after success only: a
     * failed call writes nothing; the step never touches these slots, nor the input). */
    return ssmi_copy_unused_slots(ctx, step_op, &args->state, &args->final_state, &args->state_batch_indices,
                                  d.batch);
}
