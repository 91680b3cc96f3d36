/*
 * step_plan.cu — the rows' plan of a decode step's general forms (step_plan.cuh): built on the
 * host from the index views, uploaded, and completed on the device from a device
 * state_batch_indices.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../ssmi_cuda.h"
#include "step_plan.cuh"

namespace {

const int kPlanThreads = 256;

/* Element i of a device index tensor (I32 or I64). */
__device__ __forceinline__ long long index_ld(const void * idx, int i64, long long off) {
    return i64 ? ((const long long *)idx)[off] : (long long)((const int *)idx)[off];
}

/* The parts of the plan that come from a device state_batch_indices (strides s0, s1; two_d: a
 * 2-D table read at column col[b]): read[b], and write[b] = read[b] (write != NULL: a 1-D read
 * without dst), and the token table (table != NULL: the read table is the token table). Out of
 * [0, nslots): −1 (a padding row; no write). A padding row's table entries are −1 too. */
__global__ void plan_from_device_kernel(const void * idx, int i64, long long s0, long long s1, int two_d, int B,
                                        long long nslots, const int * col, int * read, int * write, int * table,
                                        int LC) {
    const int step = (int)(gridDim.x * blockDim.x);
    for (int b = (int)(blockIdx.x * blockDim.x + threadIdx.x); b < B; b += step) {
        const long long c = two_d ? (long long)col[b] : 0;
        const long long v = index_ld(idx, i64, (long long)b * s0 + c * s1);
        const int       r = v >= 0 && v < nslots ? (int)v : -1;
        read[b] = r;
        if (write != NULL) write[b] = r;
        if (table == NULL) continue;
        for (int j = 0; j < LC; ++j) {
            const long long w = index_ld(idx, i64, (long long)b * s0 + (long long)j * s1);
            table[(long long)b * LC + j] = r >= 0 && w >= 0 && w < nslots ? (int)w : -1;
        }
    }
}

/* A validated host slot as int32: negative (any) is −1. Values at or beyond nslots occur only
 * in token-table columns past a row's tokens, which are never read: −1 too. */
int as_slot(int64_t v, int64_t nslots) { return v >= 0 && v < nslots ? (int)v : -1; }

} /* namespace */

ssm_status ssmi_cuda_step_plan(ssm_context * ctx, const char * op, const ssmi_step_slots * slots, int64_t B, int64_t T,
                               int64_t nslots, cudaStream_t s, ssmi_cu_step_plan * plan, void ** mem,
                               int * max_tokens) {
    memset(plan, 0, sizeof *plan);
    *mem = NULL;
    *max_tokens = 0;
    if (B == 0) return SSM_STATUS_OK;
    const ssm_tensor * table = ssmi_step_token_table(slots);
    const int64_t      LC = table != NULL ? table->shape[1] : 0;
    SSM_RETURN_IF(B >= INT_MAX || T > INT_MAX || nslots > INT_MAX || LC > INT_MAX / (B + 4), ctx,
                  SSM_STATUS_UNSUPPORTED,
                  "%s: %lld rows, %lld tokens, %lld slots or a %lld-column slot table exceed the CUDA step's int32 "
                  "plan",
                  op, (long long)B, (long long)T, (long long)nslots, (long long)LC);
    const int    dev = ssmi_cuda_on_device(slots->read);
    const size_t n = (size_t)(B + 1) + 3 * (size_t)B + (size_t)(B * LC);
    int *        h = (int *)malloc(n * sizeof(int));
    SSM_RETURN_IF(h == NULL, ctx, SSM_STATUS_OUT_OF_MEMORY, "%s: no host memory for the rows' plan (%zu bytes)", op,
                  n * sizeof(int));
    int *tok = h, *read = tok + B + 1, *write = read + B, *col = write + B, *tab = col + B;
    /* from the device tensor below: the read slots, and the writes it gives */
    const int write_from_read = dev && table == NULL && !ssmi_present(slots->write);
    const int table_from_read = dev && table == slots->read;
    for (int64_t b = 0; b < B; ++b) {
        int64_t t0, t1;
        ssmi_step_tokens(slots, b, &t0, &t1);
        if (b == 0) tok[0] = (int)t0;
        tok[b + 1] = (int)t1;
        if (t1 - t0 > *max_tokens) *max_tokens = (int)(t1 - t0);
        col[b] = ssmi_present(slots->read) && slots->read->ndim == 2 ? (int)ssmi_step_read_column(slots, b) : 0;
        read[b] = dev ? -1 : as_slot(ssmi_step_read_slot(slots, b), nslots);
        write[b] = table != NULL || write_from_read ? -1 : as_slot(ssmi_step_write_slot(slots, b), nslots);
        for (int64_t j = 0; j < LC; ++j)
            tab[b * LC + j] = table_from_read ? -1 : as_slot(ssmi_step_token_slot(table, b, j), nslots);
    }
    void *     buf = NULL;
    ssm_status st = ssmi_cuda_status(ctx, op, "device allocation (the rows' plan)",
                                     ssmi_cuda_alloc_async(ctx, &buf, n * sizeof(int), s));
    /* Pageable source: the copy returns once it is staged (or, while capturing, travels in
     * kernel arguments), so h may be freed. */
    if (st == SSM_STATUS_OK)
        st = ssmi_cuda_status(ctx, op, "upload (the rows' plan)",
                              ssmi_cuda_memcpy_async(buf, h, n * sizeof(int), cudaMemcpyHostToDevice, s));
    free(h);
    int * d = (int *)buf;
    if (st == SSM_STATUS_OK && dev) {
        const ssm_tensor * idx = slots->read;
        st = ssmi_cuda_check_pointer(ctx, op, "state_batch_indices", idx);
        if (st == SSM_STATUS_OK) {
            const long long blocks = (B + kPlanThreads - 1) / kPlanThreads;
            plan_from_device_kernel<<<(unsigned)(blocks < 1024 ? blocks : 1024), kPlanThreads, 0, s>>>(
                idx->data, idx->dtype == SSM_DTYPE_I64, (long long)idx->strides[0],
                idx->ndim == 2 ? (long long)idx->strides[1] : 0, idx->ndim == 2, (int)B, (long long)nslots,
                d + 3 * B + 1, d + B + 1, write_from_read ? d + 2 * B + 1 : NULL,
                table_from_read ? d + 4 * B + 1 : NULL, (int)LC);
            st = ssmi_cuda_status(ctx, op, "plan_from_device_kernel launch", cudaGetLastError());
        }
    }
    if (st != SSM_STATUS_OK) {
        if (buf != NULL) (void)ssmi_cuda_free_async(ctx, buf, s);
        return st;
    }
    plan->tok = d;
    plan->read = d + B + 1;
    plan->write = d + 2 * B + 1;
    plan->table = table != NULL ? d + 4 * B + 1 : NULL;
    plan->LC = (int)LC;
    *mem = buf;
    return SSM_STATUS_OK;
}
