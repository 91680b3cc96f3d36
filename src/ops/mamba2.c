/*
 * mamba2.c — public entry points of the Mamba-2 (SSD) forward operators.
 *
 * Each operator is its validator plus one line that defines the entry point: the call goes
 * through ssmi_dispatch (dispatch.c), which checks what the schema says of every tensor,
 * runs the validator below (shapes follow spec mamba2_ssd.md §2 from the tensors that
 * define each dimension, index-tensor values), checks output layouts and aliasing, and calls
 * the backend the context picks (REF, CPU, and CUDA for chunk_state and scan: explicitly, or
 * AUTO with x on a CUDA device). Nothing is written before the backend runs, so a failed
 * call leaves every output untouched.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../core/ssmi.h"
#include "../cpu/ssmi_cpu.h"
#include "../ref/ssmi_ref.h"
#include "ops_common.h"

#ifdef SSMOPS_HAVE_CUDA
#include "../cuda/ssmi_cuda.h"
#endif

void ssm_mamba2_params_init(ssm_mamba2_params * params) {
    SSMI_PARAMS_INIT(params);
    params->chunk_size = 256;
    params->dt_softplus = 0;
    params->dt_limit_lo = 0.0f;
    params->dt_limit_hi = INFINITY;
}

/* ceil(a/b) for a ≥ 0, b ≥ 1, without forming a + b − 1 (S may be INT64_MAX). */
static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/* Processed-dt-like tensor (batch, H, NC, Q): Q must be params->chunk_size and NC must be
 * ceil(S/Q). Sets d->chunk and d->nchunks. */
static ssm_status check_chunked_dt(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t,
                                   const ssm_mamba2_params * p, ssmi_mamba2_dims * d) {
    const int64_t want[4] = {d->batch, d->nheads, -1, -1};
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, name, t, want));
    SSM_RETURN_IF(t->shape[3] != p->chunk_size, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: %s.shape[3]=%lld differs from params->chunk_size=%lld", op, name, (long long)t->shape[3],
                  (long long)p->chunk_size);
    d->chunk = p->chunk_size;
    d->nchunks = ceil_div(d->seqlen, d->chunk);
    SSM_RETURN_IF(t->shape[2] != d->nchunks, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: %s.shape[2]=%lld must be ceil(S/Q)=%lld for S=%lld, Q=%lld", op, name, (long long)t->shape[2],
                  (long long)d->nchunks, (long long)d->seqlen, (long long)d->chunk);
    return SSM_STATUS_OK;
}

/* ---- chunk_cumsum: dt (batch, S, H) defines every dimension ----------------------------- */

static ssm_status validate_chunk_cumsum(ssm_context * ctx, const char * op, const ssm_mamba2_params * p,
                                        const ssm_mamba2_chunk_cumsum_args * a, ssmi_mamba2_dims * d) {
    SSMI_TAKE_DIMS(&a->dt, &d->batch, &d->seqlen, &d->nheads);
    d->ngroups = 1;
    d->chunk = p->chunk_size;
    d->nchunks = ceil_div(d->seqlen, d->chunk);
    SSMI_SHAPE(a, d->nheads);
    SSMI_SHAPE(dt_bias, d->nheads);
    SSMI_SHAPE(dt_out, d->batch, d->nheads, d->nchunks, d->chunk);
    SSMI_SHAPE(da_cumsum, d->batch, d->nheads, d->nchunks, d->chunk);
    return SSM_STATUS_OK;
}
SSMI_DEFINE_OP(mamba2_chunk_cumsum, ssm_mamba2_params, m2, ssmi_mamba2_check_params, validate_chunk_cumsum)

/* ---- chunk_state: x and b define the dimensions ---------------------------------------- */

static ssm_status validate_chunk_state(ssm_context * ctx, const char * op, const ssm_mamba2_params * p,
                                       const ssm_mamba2_chunk_state_args * a, ssmi_mamba2_dims * d) {
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_xbcz(ctx, op, &a->x, &a->b, NULL, NULL, d));
    SSM_FORWARD_IF_ERROR(check_chunked_dt(ctx, op, "dt", &a->dt, p, d));
    SSMI_SHAPE(da_cumsum, d->batch, d->nheads, d->nchunks, d->chunk);
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_seq_idx(ctx, op, &a->seq_idx, d));
    SSMI_SHAPE(states, d->batch, d->nchunks, d->nheads, d->headdim, d->dstate);
    return SSM_STATUS_OK;
}
SSMI_DEFINE_CUDA_OP(mamba2_chunk_state, ssm_mamba2_params, m2, ssmi_mamba2_check_params, validate_chunk_state, x)

/* ---- state_passing: states (batch, NC, H, P, N) defines the dimensions ------------------ */

static ssm_status validate_state_passing(ssm_context * ctx, const char * op, const ssm_mamba2_params * p,
                                         const ssm_mamba2_state_passing_args * a, ssmi_mamba2_dims * d) {
    SSMI_TAKE_DIMS(&a->states, &d->batch, &d->nchunks, &d->nheads, &d->headdim, &d->dstate);
    SSM_FORWARD_IF_ERROR(
        ssmi_check_head_state(ctx, op, "states.shape[3] (P)", d->headdim, "states.shape[4] (N)", d->dstate, "P·N"));
    d->ngroups = 1; /* no B/C here */
    d->chunk = p->chunk_size;
    SSMI_SHAPE(da_chunk_cumsum, d->batch, d->nheads, d->nchunks);
    SSMI_SHAPE(initial_states, d->batch, d->nheads, d->headdim, d->dstate);
    /* S comes from seq_idx when given (it must cover exactly NC chunks), else NC·Q. */
    SSM_RETURN_IF(__builtin_mul_overflow(d->nchunks, d->chunk, &d->seqlen), ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: states.shape[1]=%lld (NC) times chunk_size=%lld overflows int64", op,
                  (long long)d->nchunks, (long long)d->chunk);
    if (ssmi_present(&a->seq_idx)) {
        SSM_RETURN_IF(a->seq_idx.shape[0] != d->batch, ctx, SSM_STATUS_INVALID_SHAPE,
                      "%s: seq_idx.shape[0]=%lld differs from states.shape[0]=%lld", op, (long long)a->seq_idx.shape[0],
                      (long long)d->batch);
        const int64_t s = a->seq_idx.shape[1];
        SSM_RETURN_IF(ceil_div(s, d->chunk) != d->nchunks, ctx, SSM_STATUS_INVALID_SHAPE,
                      "%s: seq_idx.shape[1]=%lld needs ceil(S/Q)=%lld chunks but states.shape[1]=%lld (Q=%lld)", op,
                      (long long)s, (long long)ceil_div(s, d->chunk), (long long)d->nchunks, (long long)d->chunk);
        d->seqlen = s;
        SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_seq_idx(ctx, op, &a->seq_idx, d));
    }
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "states_in", &a->states_in, a->states.shape));
    SSMI_SHAPE(final_states, d->batch, d->nheads, d->headdim, d->dstate);
    return SSM_STATUS_OK;
}
SSMI_DEFINE_OP(mamba2_state_passing, ssm_mamba2_params, m2, ssmi_mamba2_check_params, validate_state_passing)

/* ---- bmm: c (batch, S, G, N) defines the dimensions ------------------------------------- */

static ssm_status validate_bmm(ssm_context * ctx, const char * op, const ssm_mamba2_params * p,
                               const ssm_mamba2_bmm_args * a, ssmi_mamba2_dims * d) {
    SSMI_TAKE_DIMS(&a->c, &d->batch, &d->seqlen, &d->ngroups, &d->dstate);
    d->nheads = d->ngroups; /* no heads here; one per group keeps H/G well defined */
    d->chunk = p->chunk_size;
    d->nchunks = ceil_div(d->seqlen, d->chunk);
    SSM_FORWARD_IF_ERROR(ssmi_check_shape(ctx, op, "b", &a->b, a->c.shape));
    SSM_FORWARD_IF_ERROR(ssmi_check_inner_dim(ctx, op, "c.shape[3] (N)", d->dstate));
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_seq_idx(ctx, op, &a->seq_idx, d));
    SSMI_SHAPE(cb, d->batch, d->nchunks, d->ngroups, d->chunk, d->chunk);
    return SSM_STATUS_OK;
}
SSMI_DEFINE_OP(mamba2_bmm, ssm_mamba2_params, m2, ssmi_mamba2_check_params, validate_bmm)

/* ---- chunk_scan: x and c define the dimensions ------------------------------------------ */

static ssm_status validate_chunk_scan(ssm_context * ctx, const char * op, const ssm_mamba2_params * p,
                                      const ssm_mamba2_chunk_scan_args * a, ssmi_mamba2_dims * d) {
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_xbcz(ctx, op, &a->x, NULL, &a->c, &a->z, d));
    SSM_FORWARD_IF_ERROR(check_chunked_dt(ctx, op, "dt", &a->dt, p, d));
    SSMI_SHAPE(da_cumsum, d->batch, d->nheads, d->nchunks, d->chunk);
    SSMI_SHAPE(cb, d->batch, d->nchunks, d->ngroups, d->chunk, d->chunk);
    SSMI_SHAPE(states_in, d->batch, d->nchunks, d->nheads, d->headdim, d->dstate);
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_d(ctx, op, &a->d, d));
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_seq_idx(ctx, op, &a->seq_idx, d));
    SSMI_SHAPE(out, d->batch, d->seqlen, d->nheads, d->headdim);
    SSMI_SHAPE(out_x, d->batch, d->seqlen, d->nheads, d->headdim);
    return SSM_STATUS_OK;
}
SSMI_DEFINE_OP(mamba2_chunk_scan, ssm_mamba2_params, m2, ssmi_mamba2_check_params, validate_chunk_scan)

/* ---- scan (combined forward) --------------------------------------------------------- */

/* The validator of the one operator whose impl is written out (it takes a workspace). */
static ssm_status validate_scan(ssm_context * ctx, const char * op, const void * params, const void * args,
                                ssmi_dims * dims) {
    const ssm_mamba2_scan_args * a = args;
    ssmi_mamba2_dims *           d = &dims->m2;
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_scan_inputs(ctx, op, params, a, d));
    /* States are per sequence with cu_seqlens, per batch row otherwise. */
    const int64_t ns = d->nseq > 0 ? d->nseq : d->batch;
    SSMI_SHAPE(out, d->batch, d->seqlen, d->nheads, d->headdim);
    SSMI_SHAPE(final_states, ns, d->nheads, d->headdim, d->dstate);
    SSM_RETURN_IF(ssmi_present(&a->num_computed_tokens) && !ssmi_present(&a->chunk_states), ctx,
                  SSM_STATUS_INVALID_ARGUMENT,
                  "%s: num_computed_tokens was given without chunk_states, the only output it positions", op);
    if (!ssmi_present(&a->chunk_states)) return SSM_STATUS_OK;
    SSM_RETURN_IF(ssmi_present(&a->seq_idx), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: chunk_states is not available with seq_idx (use cu_seqlens)", op);
    SSMI_SHAPE(num_computed_tokens, ns);
    /* One row per chunk boundary of every sequence (ssmi_chunk_state_rows). */
    const int64_t q = ((const ssm_mamba2_params *)params)->chunk_size;
    int64_t       rows = 0;
    for (int64_t i = 0; i < ns; ++i) {
        const int64_t start = ssmi_computed_tokens(&a->num_computed_tokens, i);
        const int64_t len = d->nseq > 0 ? ssmi_get_i64(&a->cu_seqlens, ssmi_off1(&a->cu_seqlens, i + 1)) -
                                              ssmi_get_i64(&a->cu_seqlens, ssmi_off1(&a->cu_seqlens, i))
                                        : d->seqlen;
        SSM_RETURN_IF(start < 0 || start > INT64_MAX / 2 - len, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: num_computed_tokens[%lld]=%lld must be non-negative and leave start + length in range",
                      op, (long long)i, (long long)start);
        rows += ssmi_chunk_state_rows(start, len, q);
    }
    SSMI_SHAPE(chunk_states, rows, d->nheads, d->headdim, d->dstate);
    return SSM_STATUS_OK;
}

/* The scan on backend be: the workspace bytes it needs (bytes != NULL), or the run. The
 * reference allocates its own float64 scratch: it needs no workspace and ignores one. */
static ssm_status scan_backend(ssm_context * ctx, ssmi_backend_kind be, const ssm_mamba2_params * p,
                               const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a, void * workspace,
                               size_t * bytes) {
#ifdef SSMOPS_HAVE_CUDA
    if (be == SSMI_BACKEND_CUDA)
        return bytes != NULL ? ssmi_cuda_mamba2_scan_workspace_size(ctx, p, d, a, bytes)
                             : ssmi_cuda_mamba2_scan(ctx, p, d, a, workspace);
#endif
    if (bytes != NULL) {
        *bytes = be == SSMI_BACKEND_REF ? 0 : ssmi_cpu_mamba2_scan_workspace_size(ctx, p, d, a);
        return SSM_STATUS_OK;
    }
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba2_scan(ctx, p, d, a) : ssmi_cpu_mamba2_scan(ctx, p, d, a, workspace);
}

static ssm_status scan_workspace(ssm_context * ctx, ssmi_backend_kind be, const void * p, const ssmi_dims * d,
                                 const void * a, size_t * bytes) {
    return scan_backend(ctx, be, p, &d->m2, a, NULL, bytes);
}

static ssm_status scan_run(ssm_context * ctx, ssmi_backend_kind be, const void * p, const ssmi_dims * d,
                           const void * a, void * workspace) {
    return scan_backend(ctx, be, p, &d->m2, a, workspace, NULL);
}

static const ssmi_op_impl scan_impl = {SSMI_OP_mamba2_scan,  ssmi_mamba2_check_params,         validate_scan,
                                       scan_workspace,       scan_run,
                                       offsetof(ssm_mamba2_scan_args, x)};

ssm_status ssm_mamba2_scan_workspace_size(ssm_context * ctx, const ssm_mamba2_params * params,
                                          const ssm_mamba2_scan_args * args, size_t * bytes) {
    static const char op[] = "mamba2_scan_workspace_size";
    ssmi_clear_error(ctx);
    SSM_RETURN_IF(bytes == NULL, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: bytes is NULL", op);
    return ssmi_dispatch(ctx, &scan_impl, op, params, args, NULL, 0, bytes);
}

ssm_status ssm_mamba2_scan(ssm_context * ctx, const ssm_mamba2_params * params, const ssm_mamba2_scan_args * args,
                           void * workspace, size_t workspace_size) {
    return ssmi_dispatch(ctx, &scan_impl, "mamba2_scan", params, args, workspace, workspace_size, NULL);
}
