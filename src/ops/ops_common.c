/* ops_common.c — shared validation and dispatch helpers of src/ops/ (see ops_common.h). */
#include "ops_common.h"

ssm_status ssmi_check_disjoint(ssm_context * ctx, const char * op, const ssmi_named * outs, int nout,
                               const ssmi_named * ins, int nin) {
    for (int o = 0; o < nout; ++o) {
        if (!ssmi_present(outs[o].t)) continue;
        for (int i = 0; i < nin; ++i) {
            if (!ssmi_present(ins[i].t)) continue;
            SSM_FORWARD_IF_ERROR(ssmi_check_no_overlap(ctx, op, outs[o].name, outs[o].t, ins[i].name, ins[i].t));
        }
        for (int k = o + 1; k < nout; ++k) {
            if (!ssmi_present(outs[k].t)) continue;
            SSM_FORWARD_IF_ERROR(ssmi_check_no_overlap(ctx, op, outs[o].name, outs[o].t, outs[k].name, outs[k].t));
        }
    }
    return SSM_STATUS_OK;
}

ssm_status ssmi_check_cu_seqlens(ssm_context * ctx, const char * op, const ssm_tensor * cu, const char * batch_name,
                                 int64_t batch, int64_t seqlen, int64_t * nseq) {
    static const int64_t any1[1] = {-1};
    *nseq = 0;
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, "cu_seqlens", cu, 1, 1, any1, SSMI_INDEX_DTYPES));
    if (!ssmi_present(cu)) return SSM_STATUS_OK;
    const int64_t len = cu->shape[0];
    SSM_RETURN_IF(len < 2, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: cu_seqlens.shape[0]=%lld must be at least 2 (nseq + 1 with nseq >= 1)", op, (long long)len);
    SSM_RETURN_IF(batch != 1, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: %s.shape[0]=%lld must be 1 when cu_seqlens is given",
                  op, batch_name, (long long)batch);
    const int64_t first = ssmi_get_i64(cu, 0);
    SSM_RETURN_IF(first != 0, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: cu_seqlens[0]=%lld must be 0", op,
                  (long long)first);
    int64_t prev = first;
    for (int64_t s = 1; s < len; ++s) {
        const int64_t v = ssmi_get_i64(cu, ssmi_off1(cu, s));
        SSM_RETURN_IF(v < prev, ctx, SSM_STATUS_INVALID_ARGUMENT,
                      "%s: cu_seqlens[%lld]=%lld is smaller than cu_seqlens[%lld]=%lld; it must be non-decreasing", op,
                      (long long)s, (long long)v, (long long)(s - 1), (long long)prev);
        prev = v;
    }
    SSM_RETURN_IF(prev != seqlen, ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: cu_seqlens[%lld]=%lld must equal S=%lld", op,
                  (long long)(len - 1), (long long)prev, (long long)seqlen);
    *nseq = len - 1;
    return SSM_STATUS_OK;
}

ssm_status ssmi_pick_backend(ssm_context * ctx, const char * op, ssmi_backend_kind * out) {
    const ssm_backend b = ctx == NULL ? SSM_BACKEND_AUTO : ctx->backend;
    switch (b) {
        case SSM_BACKEND_REF: *out = SSMI_BACKEND_REF; return SSM_STATUS_OK;
        case SSM_BACKEND_AUTO:
        case SSM_BACKEND_CPU: *out = SSMI_BACKEND_CPU; return SSM_STATUS_OK;
        case SSM_BACKEND_CUDA: return ssmi_error(ctx, SSM_STATUS_UNSUPPORTED, "%s: the CUDA backend is not built", op);
        default: return ssmi_error(ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: context backend %d is unknown", op, (int)b);
    }
}
