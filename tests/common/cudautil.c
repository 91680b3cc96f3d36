/* cudautil.c — see cudautil.h. */
#include "cudautil.h"
#include "fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ssmt_dev ssmt_to_device(const ssmt_host * h) {
    ssmt_dev d;
    memset(&d, 0, sizeof d);
    if (h->t.data == NULL) return d;
    TEST_CHECK_STATUS(ssm_cuda_malloc(NULL, &d.mem, h->bytes > 64 ? h->bytes : 64), SSM_STATUS_OK);
    if (d.mem == NULL) return d;
    if (h->bytes > 0) TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, d.mem, h->buf, h->bytes), SSM_STATUS_OK);
    d.view = h->t;
    d.view.data = (char *)d.mem + ((const char *)h->t.data - (const char *)h->buf);
    d.view.device.type = SSM_DEVICE_CUDA;
    d.view.device.index = 0;
    return d;
}

void ssmt_to_host(const ssmt_host * h, const ssmt_dev * d) {
    if (d->mem != NULL && h->bytes > 0)
        TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, h->buf, d->mem, h->bytes), SSM_STATUS_OK);
}

void ssmt_dev_free(ssmt_dev * d) {
    if (d->mem != NULL) TEST_CHECK_STATUS(ssm_cuda_free(NULL, d->mem), SSM_STATUS_OK);
    memset(d, 0, sizeof *d);
}

enum { MAX_MIRRORS = 48 };
/* The device copy of one host range [host, host + bytes) at mem; out: an output lies in it. */
typedef struct mirror {
    char * host;
    void * mem;
    size_t bytes;
    int    out;
} mirror;

ssm_status ssmt_run_on_device(ssm_context * ctx, const char * op, const void * args, int dev_idx,
                              ssm_status (*call)(ssm_context * ctx, const void * args)) {
    const ssm_op_info * info = ssm_op_get(ssm_op_find(op));
    unsigned char       copy[4096];
    mirror              m[MAX_MIRRORS];
    int                 nm = 0;
    TEST_CHECK(info != NULL && info->args_size <= sizeof copy, "%s: no room for the args", op);
    if (info == NULL || info->args_size > sizeof copy) return SSM_STATUS_INTERNAL;
    memcpy(copy, args, info->args_size);
    for (int32_t i = 0; i < info->nargs; ++i) {
        const ssm_arg_info * arg = &info->args[i];
        ssm_tensor *         t = (ssm_tensor *)(void *)(copy + arg->offset);
        if (t->data == NULL || (arg->dtype_class == SSM_DTYPE_CLASS_INDEX && !dev_idx)) continue;
        char *       lo = (char *)t->data;
        const size_t n = ssmt_view_bytes(t);
        int          k = 0;
        while (k < nm && !(lo >= m[k].host && lo + n <= m[k].host + m[k].bytes)) ++k;
        if (k == nm) {
            TEST_CHECK(nm < MAX_MIRRORS, "%s: more than %d tensors", op, MAX_MIRRORS);
            if (nm == MAX_MIRRORS) break;
            m[nm].host = lo, m[nm].bytes = n, m[nm].out = 0, m[nm].mem = NULL;
            TEST_CHECK_STATUS(ssm_cuda_malloc(NULL, &m[nm].mem, n > 64 ? n : 64), SSM_STATUS_OK);
            if (n > 0 && m[nm].mem != NULL) TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, m[nm].mem, lo, n), SSM_STATUS_OK);
            ++nm;
        }
        m[k].out |= (arg->role & SSM_ARG_ROLE_OUTPUT) != 0;
        t->data = (char *)m[k].mem + (lo - m[k].host);
        t->device.type = SSM_DEVICE_CUDA;
        t->device.index = 0;
    }
    const ssm_status st = call(ctx, copy);
    for (int k = 0; k < nm; ++k) {
        if (m[k].out && m[k].bytes > 0 && m[k].mem != NULL)
            TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, m[k].host, m[k].mem, m[k].bytes), SSM_STATUS_OK);
        if (m[k].mem != NULL) TEST_CHECK_STATUS(ssm_cuda_free(NULL, m[k].mem), SSM_STATUS_OK);
    }
    return st;
}

int ssmt_cuda_present(const char * test) {
    if (ssm_cuda_device_count() > 0) return 1;
    printf("%s: no CUDA device: skipped\n", test);
    return 0;
}

int ssmt_cuda_portable(void) {
    const char * env = getenv("SSMOPS_CUDA_PORTABLE");
    return env != NULL && strcmp(env, "1") == 0;
}

int ssmt_variant_needs_wgmma(const char * op, const char * name) {
    static const char * const entries[][2] = {
        {"mamba2_scan", "chain2"},     {"mamba2_scan", "chain"},     {"mamba2_scan", "wgmma"},
        {"mamba2_chunk_state", "wgmma"},
        {"mamba3_siso", "chain64"},    {"mamba3_siso", "chain32"},    {"mamba3_siso", "wgmma"},
        {"mamba3_siso_fwd", "chain64"}, {"mamba3_siso_fwd", "chain32"}, {"mamba3_siso_fwd", "wgmma"}};
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; ++i)
        if (strcmp(entries[i][0], op) == 0 && strcmp(entries[i][1], name) == 0) return 1;
    return 0;
}
