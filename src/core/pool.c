/*
 * pool.c — decode state pools.
 *
 * Every decode step (mamba2_step, causal_conv1d_update, mamba3_siso_step, mamba3_mimo_step)
 * takes a pool of state rows indexed by slot and an optional output pool. When the output
 * is a separate buffer it must hold the whole pool after the step — the slots some batch row
 * updates, and a copy of every other slot — so "separate" and "in place" give the same pool.
 * This file copies the slots no row updates, exactly (raw bytes for equal dtypes, else one
 * rounding from double), serially: it is off the hot path (in-place pools never copy). The
 * sequence operators' pools (src/ops/state_pools.c) move their rows with the same copy.
 */
#include <string.h>

#include "ssmi.h"

void ssmi_copy_row(const ssm_tensor * in, int64_t in_row, const ssm_tensor * out, int64_t out_row) {
    const int32_t nd = in->ndim - 1; /* dims below the slot axis */
    int64_t       idx[SSM_MAX_DIMS] = {0};
    int64_t       count = 1;
    for (int32_t d = 1; d < in->ndim; ++d) count *= in->shape[d];
    const size_t es       = ssm_dtype_size((ssm_dtype)in->dtype);
    const int    raw_last = in->dtype == out->dtype && nd > 0 && in->strides[in->ndim - 1] == 1 &&
                         out->strides[out->ndim - 1] == 1;
    const int64_t inner = nd > 0 ? in->shape[in->ndim - 1] : 1;
    for (int64_t e = 0; e < count; e += raw_last ? inner : 1) {
        int64_t ioff = in_row * in->strides[0], ooff = out_row * out->strides[0];
        for (int32_t d = 0; d < nd; ++d) {
            ioff += idx[d] * in->strides[d + 1];
            ooff += idx[d] * out->strides[d + 1];
        }
        if (raw_last) {
            memcpy((char *)out->data + ooff * (int64_t)es, (const char *)in->data + ioff * (int64_t)es,
                   (size_t)inner * es);
            idx[nd - 1] = inner; /* carry into the next row below */
        } else {
            ssmi_set_f64(out, ooff, ssmi_get_f64(in, ioff));
            if (nd > 0) ++idx[nd - 1];
        }
        for (int32_t d = nd - 1; d > 0 && idx[d] >= in->shape[d + 1]; --d) {
            idx[d] = 0;
            ++idx[d - 1];
        }
    }
}

/* No allocation: this runs after the kernel has written the used slots, so it must not fail.
 * Slots are marked used in blocks of SLOT_BLOCK bits of a stack bitmap, one pass over the
 * indices per block. */
#define SLOT_BLOCK 32768

ssm_status ssmi_copy_unused_slots(ssm_context * ctx, const char * op, const ssm_tensor * in, const ssm_tensor * out,
                                  const ssm_tensor * indices, int64_t batch) {
    (void)ctx, (void)op;
    if (!ssmi_present(out) || out->data == in->data || !ssmi_present(indices)) return SSM_STATUS_OK;
    const int64_t slots = in->shape[0];
    unsigned char used[SLOT_BLOCK / 8];
    for (int64_t s0 = 0; s0 < slots; s0 += SLOT_BLOCK) {
        const int64_t n = slots - s0 < SLOT_BLOCK ? slots - s0 : SLOT_BLOCK;
        memset(used, 0, sizeof used);
        for (int64_t b = 0; b < batch; ++b) {
            const int64_t s = ssmi_get_i64(indices, b * indices->strides[0]) - s0;
            if (s >= 0 && s < n) used[s >> 3] |= (unsigned char)(1u << (s & 7));
        }
        for (int64_t s = 0; s < n; ++s)
            if (!(used[s >> 3] & (1u << (s & 7)))) ssmi_copy_row(in, s0 + s, out, s0 + s);
    }
    return SSM_STATUS_OK;
}
