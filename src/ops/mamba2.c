/*
 * mamba2.c — public entry points of the Mamba-2 (SSD) forward operators.
 *
 * Every entry point does the same three things, in this order:
 *   1. validate params and every tensor (shapes follow spec mamba2_ssd.md §2 from the
 *      tensors that define each dimension), index-tensor values and output aliasing;
 *   2. fill ssmi_mamba2_dims;
 *   3. dispatch to the backend chosen by the context (REF, CPU, and CUDA for chunk_state
 *      and scan: explicitly, or AUTO with x on a CUDA device).
 * Nothing is written before step 3, so a failed call leaves every output untouched.
 * CUDA calls check the devices first (every float tensor on the CUDA device, index tensors
 * on either side; device index tensors are copied to the host), then run the same
 * validation on CPU-typed copies of the views (the rules do not depend on the device).
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
    if (params == NULL) return;
    memset(params, 0, sizeof *params);
    params->size = sizeof *params;
    params->chunk_size = 256;
    params->dt_softplus = 0;
    params->dt_limit_lo = 0.0f;
    params->dt_limit_hi = INFINITY;
}

/* ---- small helpers ------------------------------------------------------------------ */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static ssm_status check_in(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t, int optional,
                           int32_t ndim, const int64_t * want, uint32_t mask) {
    return ssmi_check_tensor(ctx, op, name, t, optional, ndim, want, mask);
}

static ssm_status check_out(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t, int optional,
                            int32_t ndim, const int64_t * want) {
    return ssmi_check_output(ctx, op, name, t, optional, ndim, want, SSMI_FLOAT_DTYPES);
}

/* Processed-dt-like tensor (batch, H, NC, Q): Q must be params->chunk_size and NC must be
 * ceil(S/Q). Sets d->chunk and d->nchunks. */
static ssm_status check_chunked_dt(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t,
                                   const ssm_mamba2_params * p, ssmi_mamba2_dims * d) {
    const int64_t want[4] = {d->batch, d->nheads, -1, -1};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, name, t, 0, 4, want, SSMI_FLOAT_DTYPES));
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

/* ---- chunk_cumsum -------------------------------------------------------------------- */

static ssm_status validate_chunk_cumsum(ssm_context * ctx, const ssm_mamba2_params * p,
                                        const ssm_mamba2_chunk_cumsum_args * a, ssmi_mamba2_dims * d) {
    static const char    op[] = "mamba2_chunk_cumsum";
    static const int64_t any3[3] = {-1, -1, -1};
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_params(ctx, op, p, a));
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "dt", &a->dt, 0, 3, any3, SSMI_FLOAT_DTYPES));
    d->batch = a->dt.shape[0];
    d->seqlen = a->dt.shape[1];
    d->nheads = a->dt.shape[2];
    d->ngroups = 1;
    d->chunk = p->chunk_size;
    d->nchunks = ceil_div(d->seqlen, d->chunk);
    const int64_t wh[1] = {d->nheads};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "a", &a->a, 0, 1, wh, SSMI_FLOAT_DTYPES));
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "dt_bias", &a->dt_bias, 1, 1, wh, SSMI_FLOAT_DTYPES));
    const int64_t wo[4] = {d->batch, d->nheads, d->nchunks, d->chunk};
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "dt_out", &a->dt_out, 0, 4, wo));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "da_cumsum", &a->da_cumsum, 0, 4, wo));
    const ssmi_named ins[] = {{"dt", &a->dt}, {"a", &a->a}, {"dt_bias", &a->dt_bias}};
    const ssmi_named outs[] = {{"dt_out", &a->dt_out}, {"da_cumsum", &a->da_cumsum}};
    return ssmi_check_disjoint(ctx, op, outs, 2, ins, 3);
}

ssm_status ssm_mamba2_chunk_cumsum(ssm_context * ctx, const ssm_mamba2_params * params,
                                   const ssm_mamba2_chunk_cumsum_args * args) {
    ssmi_clear_error(ctx);
    ssmi_mamba2_dims d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(validate_chunk_cumsum(ctx, params, args, &d));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, "mamba2_chunk_cumsum", &be));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba2_chunk_cumsum(ctx, params, &d, args)
                                : ssmi_cpu_mamba2_chunk_cumsum(ctx, params, &d, args);
}

/* ---- chunk_state --------------------------------------------------------------------- */

static ssm_status validate_chunk_state(ssm_context * ctx, const ssm_mamba2_params * p,
                                       const ssm_mamba2_chunk_state_args * a, ssmi_mamba2_dims * d) {
    static const char op[] = "mamba2_chunk_state";
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_params(ctx, op, p, a));
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_xbcz(ctx, op, &a->x, &a->b, NULL, NULL, d));
    SSM_FORWARD_IF_ERROR(check_chunked_dt(ctx, op, "dt", &a->dt, p, d));
    const int64_t wdt[4] = {d->batch, d->nheads, d->nchunks, d->chunk};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "da_cumsum", &a->da_cumsum, 0, 4, wdt, SSMI_FLOAT_DTYPES));
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_seq_idx(ctx, op, &a->seq_idx, d));
    const int64_t ws[5] = {d->batch, d->nchunks, d->nheads, d->headdim, d->dstate};
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "states", &a->states, 0, 5, ws));
    const ssmi_named ins[] = {
        {"b", &a->b}, {"x", &a->x}, {"dt", &a->dt}, {"da_cumsum", &a->da_cumsum}, {"seq_idx", &a->seq_idx}};
    const ssmi_named outs[] = {{"states", &a->states}};
    return ssmi_check_disjoint(ctx, op, outs, 1, ins, 5);
}

#ifdef SSMOPS_HAVE_CUDA
static ssm_status chunk_state_cuda(ssm_context * ctx, const ssm_mamba2_params * params,
                                   const ssm_mamba2_chunk_state_args * args) {
    static const char op[] = "mamba2_chunk_state";
    ssmi_mamba2_dims  d;
    if (params == NULL || args == NULL) return validate_chunk_state(ctx, params, args, &d);
    ssm_mamba2_chunk_state_args h = *args;
    ssm_tensor * const          fl[] = {&h.b, &h.x, &h.dt, &h.da_cumsum, &h.states};
    const char * const          names[] = {"b", "x", "dt", "da_cumsum", "states"};
    SSM_FORWARD_IF_ERROR(ssmi_cuda_retype(ctx, op, fl, names, 5));
    void * buf = NULL;
    SSM_FORWARD_IF_ERROR(ssmi_cuda_host_index(ctx, op, &args->seq_idx, &h.seq_idx, &buf));
    ssm_status st = validate_chunk_state(ctx, params, &h, &d);
    if (st == SSM_STATUS_OK) st = ssmi_cuda_mamba2_chunk_state(ctx, params, &d, &h);
    ssmi_free(ctx, buf);
    return st;
}
#endif

ssm_status ssm_mamba2_chunk_state(ssm_context * ctx, const ssm_mamba2_params * params,
                                  const ssm_mamba2_chunk_state_args * args) {
    ssmi_clear_error(ctx);
    ssmi_mamba2_dims d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend_cuda(ctx, "mamba2_chunk_state", args != NULL ? &args->x : NULL, &be));
#ifdef SSMOPS_HAVE_CUDA
    if (be == SSMI_BACKEND_CUDA) return chunk_state_cuda(ctx, params, args);
#endif
    SSM_FORWARD_IF_ERROR(validate_chunk_state(ctx, params, args, &d));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba2_chunk_state(ctx, params, &d, args)
                                : ssmi_cpu_mamba2_chunk_state(ctx, params, &d, args);
}

/* ---- state_passing ------------------------------------------------------------------- */

static ssm_status validate_state_passing(ssm_context * ctx, const ssm_mamba2_params * p,
                                         const ssm_mamba2_state_passing_args * a, ssmi_mamba2_dims * d) {
    static const char    op[] = "mamba2_state_passing";
    static const int64_t any5[5] = {-1, -1, -1, -1, -1};
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_params(ctx, op, p, a));
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "states", &a->states, 0, 5, any5, SSMI_FLOAT_DTYPES));
    d->batch = a->states.shape[0];
    d->nchunks = a->states.shape[1];
    d->nheads = a->states.shape[2];
    d->headdim = a->states.shape[3];
    d->dstate = a->states.shape[4];
    d->ngroups = 1; /* no B/C here */
    d->chunk = p->chunk_size;
    const int64_t wda[3] = {d->batch, d->nheads, d->nchunks};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "da_chunk_cumsum", &a->da_chunk_cumsum, 0, 3, wda, SSMI_FLOAT_DTYPES));
    const int64_t wst[4] = {d->batch, d->nheads, d->headdim, d->dstate};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "initial_states", &a->initial_states, 1, 4, wst, SSMI_FLOAT_DTYPES));
    /* S comes from seq_idx when given (it must cover exactly NC chunks), else NC·Q. */
    d->seqlen = d->nchunks * d->chunk;
    if (ssmi_present(&a->seq_idx)) {
        static const int64_t any2[2] = {-1, -1};
        SSM_FORWARD_IF_ERROR(check_in(ctx, op, "seq_idx", &a->seq_idx, 0, 2, any2, SSMI_INDEX_DTYPES));
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
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "states_in", &a->states_in, 0, 5, a->states.shape));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "final_states", &a->final_states, 1, 4, wst));
    const ssmi_named ins[] = {{"states", &a->states},
                            {"da_chunk_cumsum", &a->da_chunk_cumsum},
                            {"initial_states", &a->initial_states},
                            {"seq_idx", &a->seq_idx}};
    const ssmi_named outs[] = {{"states_in", &a->states_in}, {"final_states", &a->final_states}};
    return ssmi_check_disjoint(ctx, op, outs, 2, ins, 4);
}

ssm_status ssm_mamba2_state_passing(ssm_context * ctx, const ssm_mamba2_params * params,
                                    const ssm_mamba2_state_passing_args * args) {
    ssmi_clear_error(ctx);
    ssmi_mamba2_dims d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(validate_state_passing(ctx, params, args, &d));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, "mamba2_state_passing", &be));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba2_state_passing(ctx, params, &d, args)
                                : ssmi_cpu_mamba2_state_passing(ctx, params, &d, args);
}

/* ---- bmm ----------------------------------------------------------------------------- */

static ssm_status validate_bmm(ssm_context * ctx, const ssm_mamba2_params * p, const ssm_mamba2_bmm_args * a,
                               ssmi_mamba2_dims * d) {
    static const char    op[] = "mamba2_bmm";
    static const int64_t any4[4] = {-1, -1, -1, -1};
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_params(ctx, op, p, a));
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "c", &a->c, 0, 4, any4, SSMI_FLOAT_DTYPES));
    d->batch = a->c.shape[0];
    d->seqlen = a->c.shape[1];
    d->ngroups = a->c.shape[2];
    d->dstate = a->c.shape[3];
    d->nheads = d->ngroups; /* no heads here; one per group keeps H/G well defined */
    d->chunk = p->chunk_size;
    d->nchunks = ceil_div(d->seqlen, d->chunk);
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "b", &a->b, 0, 4, a->c.shape, SSMI_FLOAT_DTYPES));
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_seq_idx(ctx, op, &a->seq_idx, d));
    const int64_t wcb[5] = {d->batch, d->nchunks, d->ngroups, d->chunk, d->chunk};
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "cb", &a->cb, 0, 5, wcb));
    const ssmi_named ins[] = {{"c", &a->c}, {"b", &a->b}, {"seq_idx", &a->seq_idx}};
    const ssmi_named outs[] = {{"cb", &a->cb}};
    return ssmi_check_disjoint(ctx, op, outs, 1, ins, 3);
}

ssm_status ssm_mamba2_bmm(ssm_context * ctx, const ssm_mamba2_params * params, const ssm_mamba2_bmm_args * args) {
    ssmi_clear_error(ctx);
    ssmi_mamba2_dims d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(validate_bmm(ctx, params, args, &d));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, "mamba2_bmm", &be));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba2_bmm(ctx, params, &d, args)
                                : ssmi_cpu_mamba2_bmm(ctx, params, &d, args);
}

/* ---- chunk_scan ---------------------------------------------------------------------- */

static ssm_status validate_chunk_scan(ssm_context * ctx, const ssm_mamba2_params * p,
                                      const ssm_mamba2_chunk_scan_args * a, ssmi_mamba2_dims * d) {
    static const char op[] = "mamba2_chunk_scan";
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_params(ctx, op, p, a));
    memset(d, 0, sizeof *d);
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_xbcz(ctx, op, &a->x, NULL, &a->c, &a->z, d));
    SSM_FORWARD_IF_ERROR(check_chunked_dt(ctx, op, "dt", &a->dt, p, d));
    const int64_t wdt[4] = {d->batch, d->nheads, d->nchunks, d->chunk};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "da_cumsum", &a->da_cumsum, 0, 4, wdt, SSMI_FLOAT_DTYPES));
    const int64_t wcb[5] = {d->batch, d->nchunks, d->ngroups, d->chunk, d->chunk};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "cb", &a->cb, 0, 5, wcb, SSMI_FLOAT_DTYPES));
    const int64_t wst[5] = {d->batch, d->nchunks, d->nheads, d->headdim, d->dstate};
    SSM_FORWARD_IF_ERROR(check_in(ctx, op, "states_in", &a->states_in, 0, 5, wst, SSMI_FLOAT_DTYPES));
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_d(ctx, op, &a->d, d));
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_seq_idx(ctx, op, &a->seq_idx, d));
    SSM_RETURN_IF(ssmi_present(&a->out_x) && !ssmi_present(&a->z), ctx, SSM_STATUS_INVALID_ARGUMENT,
                  "%s: out_x was requested without z; it is the pre-gate output and needs z", op);
    const int64_t wx[4] = {d->batch, d->seqlen, d->nheads, d->headdim};
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "out", &a->out, 0, 4, wx));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "out_x", &a->out_x, 1, 4, wx));
    const ssmi_named ins[] = {{"cb", &a->cb},
                            {"x", &a->x},
                            {"dt", &a->dt},
                            {"da_cumsum", &a->da_cumsum},
                            {"c", &a->c},
                            {"states_in", &a->states_in},
                            {"d", &a->d},
                            {"z", &a->z},
                            {"seq_idx", &a->seq_idx}};
    const ssmi_named outs[] = {{"out", &a->out}, {"out_x", &a->out_x}};
    return ssmi_check_disjoint(ctx, op, outs, 2, ins, 9);
}

ssm_status ssm_mamba2_chunk_scan(ssm_context * ctx, const ssm_mamba2_params * params,
                                 const ssm_mamba2_chunk_scan_args * args) {
    ssmi_clear_error(ctx);
    ssmi_mamba2_dims d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(validate_chunk_scan(ctx, params, args, &d));
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend(ctx, "mamba2_chunk_scan", &be));
    return be == SSMI_BACKEND_REF ? ssmi_ref_mamba2_chunk_scan(ctx, params, &d, args)
                                : ssmi_cpu_mamba2_chunk_scan(ctx, params, &d, args);
}

/* ---- scan (combined forward) --------------------------------------------------------- */

static ssm_status validate_scan(ssm_context * ctx, const char * op, const ssm_mamba2_params * p,
                                const ssm_mamba2_scan_args * a, ssmi_mamba2_dims * d) {
    SSM_FORWARD_IF_ERROR(ssmi_mamba2_check_scan_inputs(ctx, op, p, a, d));
    /* States are per sequence with cu_seqlens, per batch row otherwise. */
    const int64_t lead = d->nseq > 0 ? d->nseq : d->batch;
    const int64_t wst[4] = {lead, d->nheads, d->headdim, d->dstate};
    const int64_t wx[4] = {d->batch, d->seqlen, d->nheads, d->headdim};
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "out", &a->out, 0, 4, wx));
    SSM_FORWARD_IF_ERROR(check_out(ctx, op, "final_states", &a->final_states, 1, 4, wst));
    const ssmi_named ins[] = {{"x", &a->x},
                            {"dt", &a->dt},
                            {"a", &a->a},
                            {"b", &a->b},
                            {"c", &a->c},
                            {"d", &a->d},
                            {"z", &a->z},
                            {"dt_bias", &a->dt_bias},
                            {"initial_states", &a->initial_states},
                            {"seq_idx", &a->seq_idx},
                            {"cu_seqlens", &a->cu_seqlens}};
    const ssmi_named outs[] = {{"out", &a->out}, {"final_states", &a->final_states}};
    return ssmi_check_disjoint(ctx, op, outs, 2, ins, 11);
}

#ifdef SSMOPS_HAVE_CUDA
/* The CUDA form of the scan's arguments: devices checked, float tensors re-typed, index
 * tensors as host views (bufs[0..1] to ssmi_free), then the shared validation. */
static ssm_status scan_cuda_prepare(ssm_context * ctx, const char * op, const ssm_mamba2_params * params,
                                    const ssm_mamba2_scan_args * args, ssm_mamba2_scan_args * h, ssmi_mamba2_dims * d,
                                    void * bufs[2]) {
    bufs[0] = bufs[1] = NULL;
    if (params == NULL || args == NULL) return validate_scan(ctx, op, params, args, d);
    *h = *args;
    ssm_tensor * const fl[] = {&h->x, &h->dt, &h->a, &h->b, &h->c, &h->d, &h->z, &h->dt_bias, &h->initial_states,
                               &h->out, &h->final_states};
    const char * const names[] = {"x", "dt", "a", "b", "c", "d", "z", "dt_bias", "initial_states", "out", "final_states"};
    SSM_FORWARD_IF_ERROR(ssmi_cuda_retype(ctx, op, fl, names, 11));
    SSM_FORWARD_IF_ERROR(ssmi_cuda_host_index(ctx, op, &args->seq_idx, &h->seq_idx, &bufs[0]));
    const ssm_status st = ssmi_cuda_host_index(ctx, op, &args->cu_seqlens, &h->cu_seqlens, &bufs[1]);
    return st != SSM_STATUS_OK ? st : validate_scan(ctx, op, params, h, d);
}

static ssm_status scan_cuda(ssm_context * ctx, const ssm_mamba2_params * params, const ssm_mamba2_scan_args * args,
                            void * workspace, size_t workspace_size, size_t * bytes_only) {
    const char *         op = bytes_only != NULL ? "mamba2_scan_workspace_size" : "mamba2_scan";
    ssm_mamba2_scan_args h;
    ssmi_mamba2_dims     d;
    void *               bufs[2];
    ssm_status           st = scan_cuda_prepare(ctx, op, params, args, &h, &d, bufs);
    size_t               need = 0;
    if (st == SSM_STATUS_OK) st = ssmi_cuda_mamba2_scan_workspace_size(ctx, params, &d, &h, &need);
    if (st == SSM_STATUS_OK && bytes_only != NULL) *bytes_only = need;
    if (st == SSM_STATUS_OK && bytes_only == NULL && workspace != NULL) {
        if (((uintptr_t)workspace % SSMI_ALIGN) != 0)
            st = ssmi_error(ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: workspace %p is not %d-byte aligned", op, workspace,
                            SSMI_ALIGN);
        else if (workspace_size < need)
            st = ssmi_error(ctx, SSM_STATUS_WORKSPACE_TOO_SMALL,
                            "%s: workspace_size=%zu is smaller than the %zu bytes needed (see "
                            "ssm_mamba2_scan_workspace_size)",
                            op, workspace_size, need);
    }
    if (st == SSM_STATUS_OK && bytes_only == NULL) st = ssmi_cuda_mamba2_scan(ctx, params, &d, &h, workspace);
    ssmi_free(ctx, bufs[0]);
    ssmi_free(ctx, bufs[1]);
    return st;
}
#endif

/* Workspace bytes the chosen backend needs (the reference allocates its own scratch). */
static size_t scan_workspace_bytes(const ssm_context * ctx, ssmi_backend_kind be, const ssm_mamba2_params * p,
                                   const ssmi_mamba2_dims * d, const ssm_mamba2_scan_args * a) {
    return be == SSMI_BACKEND_REF ? 0 : ssmi_cpu_mamba2_scan_workspace_size(ctx, p, d, a);
}

ssm_status ssm_mamba2_scan_workspace_size(ssm_context * ctx, const ssm_mamba2_params * params,
                                          const ssm_mamba2_scan_args * args, size_t * bytes) {
    static const char op[] = "mamba2_scan_workspace_size";
    ssmi_clear_error(ctx);
    SSM_RETURN_IF(bytes == NULL, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: bytes is NULL", op);
    ssmi_mamba2_dims d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend_cuda(ctx, op, args != NULL ? &args->x : NULL, &be));
#ifdef SSMOPS_HAVE_CUDA
    if (be == SSMI_BACKEND_CUDA) return scan_cuda(ctx, params, args, NULL, 0, bytes);
#endif
    SSM_FORWARD_IF_ERROR(validate_scan(ctx, op, params, args, &d));
    *bytes = scan_workspace_bytes(ctx, be, params, &d, args);
    return SSM_STATUS_OK;
}

ssm_status ssm_mamba2_scan(ssm_context * ctx, const ssm_mamba2_params * params, const ssm_mamba2_scan_args * args,
                           void * workspace, size_t workspace_size) {
    static const char op[] = "mamba2_scan";
    ssmi_clear_error(ctx);
    ssmi_mamba2_dims d;
    ssmi_backend_kind be = SSMI_BACKEND_CPU;
    SSM_FORWARD_IF_ERROR(ssmi_pick_backend_cuda(ctx, op, args != NULL ? &args->x : NULL, &be));
#ifdef SSMOPS_HAVE_CUDA
    if (be == SSMI_BACKEND_CUDA) return scan_cuda(ctx, params, args, workspace, workspace_size, NULL);
#endif
    SSM_FORWARD_IF_ERROR(validate_scan(ctx, op, params, args, &d));
    const size_t need = scan_workspace_bytes(ctx, be, params, &d, args);
    if (workspace != NULL) {
        SSM_RETURN_IF(((uintptr_t)workspace % SSMI_ALIGN) != 0, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: workspace %p is not %d-byte aligned", op, workspace, SSMI_ALIGN);
        SSM_RETURN_IF(workspace_size < need, ctx, SSM_STATUS_WORKSPACE_TOO_SMALL,
                      "%s: workspace_size=%zu is smaller than the %zu bytes needed (see "
                      "ssm_mamba2_scan_workspace_size)",
                      op, workspace_size, need);
    }
    /* The reference allocates its own float64 scratch and ignores the workspace. */
    if (be == SSMI_BACKEND_REF) return ssmi_ref_mamba2_scan(ctx, params, &d, args);
    if (workspace != NULL) return ssmi_cpu_mamba2_scan(ctx, params, &d, args, workspace);
    void * ws = ssmi_alloc(ctx, need);
    SSM_RETURN_IF(ws == NULL && need > 0, ctx, SSM_STATUS_OUT_OF_MEMORY,
                  "%s: could not allocate %zu bytes of workspace", op, need);
    const ssm_status st = ssmi_cpu_mamba2_scan(ctx, params, &d, args, ws);
    ssmi_free(ctx, ws);
    return st;
}
