/*
 * mamba2_step.c — public entry point of the Mamba-2 decode step (spec §2.9).
 *
 * The validator checks the shapes (from x and b), the state pool and the read and write
 * slots (ssmi_check_step_slots); the schema gives the rest. The pool may be updated in place: final_state may be exactly the
 * state view; any other overlap between an output and an input is an error, because the
 * backends read inputs while writing outputs. A separate final_state gets the slots no row
 * used after the step (dispatch.c). REF, CPU or CUDA (explicitly, or AUTO with x on a CUDA
 * device); state_batch_indices may be in host memory or, on the CUDA backend, on the device
 * (read there by the kernels: no host copy); the other index tensors are read on the host.
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

/* The slot tensors of a step's args. */
static ssmi_step_slots step_slots(const ssm_mamba2_step_args * a) {
    return (ssmi_step_slots){&a->state_batch_indices, &a->dst_state_batch_indices, &a->cu_seqlens,
                             &a->num_accepted_tokens};
}

/* d->batch: rows (B); d->seqlen: tokens (T; B without cu_seqlens); d->nseq: B with
 * cu_seqlens, else 0. */
static ssm_status validate_step(ssm_context * ctx, const char * op, const ssm_mamba2_params * p,
                                const ssm_mamba2_step_args * a, ssmi_mamba2_dims * d) {
    (void)p;
    const int64_t T = a->x.shape[0];
    d->seqlen = T;
    d->nheads = a->x.shape[1];
    d->headdim = a->x.shape[2];
    d->chunk = 1;
    d->nchunks = 1;
    SSM_FORWARD_IF_ERROR(ssmi_check_cu_seqlens(ctx, op, &a->cu_seqlens, "x", 1, T, &d->nseq));
    d->batch = ssmi_present(&a->cu_seqlens) ? d->nseq : T;
    SSMI_SHAPE(b, T, -1, -1);
    d->ngroups = a->b.shape[1];
    d->dstate = a->b.shape[2];
    SSM_RETURN_IF(d->ngroups < 1, ctx, SSM_STATUS_INVALID_SHAPE, "%s: b.shape[1]=%lld (ngroups) must be at least 1",
                  op, (long long)d->ngroups);
    SSM_RETURN_IF(d->nheads % d->ngroups != 0, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: x.shape[1]=%lld is not a multiple of b.shape[1]=%lld", op, (long long)d->nheads,
                  (long long)d->ngroups);
    SSM_FORWARD_IF_ERROR(
        ssmi_check_head_state(ctx, op, "x.shape[2] (P)", d->headdim, "b.shape[2] (N)", d->dstate, "P·N"));
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "c", &a->c, a->b.shape));
    SSMI_SHAPE(dt, T, d->nheads, d->headdim);
    SSMI_SHAPE(a, d->nheads, d->headdim, d->dstate);
    SSMI_SHAPE(d, d->nheads, d->headdim);
    SSMI_SHAPE(z, T, d->nheads, d->headdim);
    SSMI_SHAPE(dt_bias, d->nheads, d->headdim);
    SSMI_SHAPE(state, -1, d->nheads, d->headdim, d->dstate);
    d->slots = a->state.shape[0];
    SSM_RETURN_IF(!ssmi_present(&a->state_batch_indices) && !ssmi_present(&a->dst_state_batch_indices) &&
                      d->slots != d->batch, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: state.shape[0]=%lld differs from the %lld rows; without state_batch_indices row b uses slot b",
                  op, (long long)d->slots, (long long)d->batch);
    SSMI_SHAPE(out, T, d->nheads, d->headdim);
    SSMI_SHAPE(intermediate_states, T, d->nheads, d->headdim, d->dstate);
    const int             has_final = ssmi_present(&a->final_state);
    const int             in_place = has_final && ssmi_same_addresses(&a->final_state, &a->state);
    const ssmi_step_slots slots = step_slots(a);
    return ssmi_check_step_slots(ctx, op, &slots, d->batch, d->slots, "state", in_place, has_final);
}

SSMI_DEFINE_CUDA_OP(mamba2_step, ssm_mamba2_params, m2, ssmi_mamba2_check_step_params, validate_step, x)
