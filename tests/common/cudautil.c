/* cudautil.c — see cudautil.h. */
#include "cudautil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"

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

/* One device copy of a host buffer that one or more views of an args struct start at. */
typedef struct mirror {
    char * host;
    size_t bytes;
    void * mem;
    int    out; /* some view of it is an output */
} mirror;

enum { MIRRORS_MAX = 64 };

ssm_status ssmt_run_mirrored(ssm_context * ctx, const char * op, ssmt_run_fn fn, void * args, int index_dev) {
    const ssm_op_info * info = ssm_op_get(ssm_op_find(op));
    TEST_CHECK(info != NULL && info->nargs <= MIRRORS_MAX, "%s: not an operator of the schema", op);
    if (info == NULL || info->nargs > MIRRORS_MAX) return SSM_STATUS_INVALID_ARGUMENT;
    mirror          m[MIRRORS_MAX];
    int             n = 0;
    unsigned char * dargs = malloc(info->args_size);
    TEST_CHECK(dargs != NULL, "%s: no memory for the device args", op);
    if (dargs == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    memcpy(dargs, args, info->args_size);
    for (int32_t i = 0; i < info->nargs; ++i) { /* the buffers, each as long as its longest view */
        const ssm_arg_info * ai = &info->args[i];
        const ssm_tensor *   t = (const ssm_tensor *)(const void *)((const char *)args + ai->offset);
        if (t->data == NULL || (ai->dtype_class == SSM_DTYPE_CLASS_INDEX && !index_dev)) continue;
        const size_t bytes = ssmt_view_bytes(t);
        int          k = 0;
        while (k < n && m[k].host != (char *)t->data) ++k;
        if (k == n) m[n++] = (mirror){(char *)t->data, 0, NULL, 0};
        if (bytes > m[k].bytes) m[k].bytes = bytes;
        m[k].out |= (ai->role & SSM_ARG_ROLE_OUTPUT) != 0;
    }
    for (int k = 0; k < n; ++k) { /* at least 64 bytes: an empty view still needs an address */
        TEST_CHECK_STATUS(ssm_cuda_malloc(NULL, &m[k].mem, m[k].bytes > 64 ? m[k].bytes : 64), SSM_STATUS_OK);
        if (m[k].mem != NULL && m[k].bytes > 0)
            TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, m[k].mem, m[k].host, m[k].bytes), SSM_STATUS_OK);
    }
    for (int32_t i = 0; i < info->nargs; ++i) {
        ssm_tensor * t = (ssm_tensor *)(void *)(dargs + info->args[i].offset);
        for (int k = 0; k < n && t->data != NULL; ++k)
            if (m[k].host == (char *)t->data) {
                t->data = m[k].mem;
                t->device.type = SSM_DEVICE_CUDA;
                t->device.index = 0;
                break;
            }
    }
    const ssm_status st = fn(ctx, dargs);
    for (int k = 0; k < n; ++k) {
        if (m[k].out && m[k].mem != NULL && m[k].bytes > 0)
            TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, m[k].host, m[k].mem, m[k].bytes), SSM_STATUS_OK);
        if (m[k].mem != NULL) TEST_CHECK_STATUS(ssm_cuda_free(NULL, m[k].mem), SSM_STATUS_OK);
    }
    free(dargs);
    return st;
}

int ssmt_cuda_present(const char * test) {
    if (ssm_cuda_device_count() > 0) return 1;
    printf("%s: no CUDA device: skipped\n", test);
    return 0;
}
