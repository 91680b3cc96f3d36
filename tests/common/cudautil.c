/* cudautil.c — see cudautil.h. */
#include "cudautil.h"
#include "fixtures.h"

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

/* One device copy of a host byte range that one or more views of an args struct lie in. */
typedef struct mirror {
    char * lo;
    char * hi;
    void * mem;
    int    out; /* some view in it is an output */
} mirror;

enum { MIRRORS_MAX = 64 };

static int mirror_cmp(const void * a, const void * b) {
    const mirror * x = a;
    const mirror * y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

ssm_status ssmt_run_on_device(ssm_context * ctx, const char * op, const void * args, int index_dev, ssmt_run_fn fn) {
    const ssm_op_info * info = ssm_op_get(ssm_op_find(op));
    TEST_CHECK(info != NULL && info->nargs <= MIRRORS_MAX, "%s: not an operator of the schema", op);
    if (info == NULL || info->nargs > MIRRORS_MAX) return SSM_STATUS_INVALID_ARGUMENT;
    mirror          m[MIRRORS_MAX];
    int             n = 0;
    unsigned char * dargs = malloc(info->args_size);
    TEST_CHECK(dargs != NULL, "%s: no memory for the device args", op);
    if (dargs == NULL) return SSM_STATUS_OUT_OF_MEMORY;
    memcpy(dargs, args, info->args_size);
    /* every view's byte range, then overlapping ranges merged: views into one buffer (an
     * in-place pool, a slice of another view) share one copy */
    for (int32_t i = 0; i < info->nargs; ++i) {
        const ssm_arg_info * ai = &info->args[i];
        const ssm_tensor *   t = (const ssm_tensor *)(const void *)((const char *)args + ai->offset);
        if (t->data == NULL || (ai->dtype_class == SSM_DTYPE_CLASS_INDEX && !index_dev)) continue;
        m[n++] = (mirror){(char *)t->data, (char *)t->data + ssmt_view_bytes(t), NULL,
                          (ai->role & SSM_ARG_ROLE_OUTPUT) != 0};
    }
    qsort(m, (size_t)n, sizeof m[0], mirror_cmp);
    int merged = 0;
    for (int k = 0; k < n; ++k) {
        if (merged > 0 && m[k].lo < m[merged - 1].hi) {
            if (m[k].hi > m[merged - 1].hi) m[merged - 1].hi = m[k].hi;
            m[merged - 1].out |= m[k].out;
        } else {
            m[merged++] = m[k];
        }
    }
    n = merged;
    for (int k = 0; k < n; ++k) { /* at least 64 bytes: an empty view still needs an address */
        const size_t bytes = (size_t)(m[k].hi - m[k].lo);
        TEST_CHECK_STATUS(ssm_cuda_malloc(NULL, &m[k].mem, bytes > 64 ? bytes : 64), SSM_STATUS_OK);
        if (m[k].mem != NULL && bytes > 0) TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, m[k].mem, m[k].lo, bytes), SSM_STATUS_OK);
    }
    for (int32_t i = 0; i < info->nargs; ++i) {
        const ssm_arg_info * ai = &info->args[i];
        ssm_tensor *         t = (ssm_tensor *)(void *)(dargs + ai->offset);
        if (t->data == NULL || (ai->dtype_class == SSM_DTYPE_CLASS_INDEX && !index_dev)) continue;
        for (int k = 0; k < n; ++k)
            if ((char *)t->data >= m[k].lo && (char *)t->data < m[k].hi + (m[k].hi == m[k].lo)) {
                t->data = (char *)m[k].mem + ((char *)t->data - m[k].lo);
                t->device.type = SSM_DEVICE_CUDA;
                t->device.index = 0;
                break;
            }
    }
    const ssm_status st = fn(ctx, dargs);
    /* A successful call's outputs come back to the host buffers. A failed one must have written
     * nothing: its device copies are compared with the host bytes they were made from, and the
     * host is left alone (a test may pass a view larger than its buffer to provoke the failure). */
    for (int k = 0; k < n; ++k) {
        const size_t bytes = (size_t)(m[k].hi - m[k].lo);
        if (m[k].out && m[k].mem != NULL && bytes > 0) {
            if (st == SSM_STATUS_OK) {
                TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, m[k].lo, m[k].mem, bytes), SSM_STATUS_OK);
            } else {
                unsigned char * back = malloc(bytes);
                TEST_CHECK(back != NULL, "%s: no memory to check the failed call's outputs", op);
                if (back != NULL) {
                    TEST_CHECK_STATUS(ssm_cuda_memcpy(NULL, back, m[k].mem, bytes), SSM_STATUS_OK);
                    TEST_CHECK(memcmp(back, m[k].lo, bytes) == 0, "%s: the failed call (%s) wrote device memory", op,
                               ssm_status_string(st));
                    free(back);
                }
            }
        }
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

int ssmt_nan_pattern_runs(ssm_context * ctx, const char * op, const void * args, ssmt_run_fn fn,
                          ssmt_host * const * outs, const ssmt_host * ref, int n, const char * tag) {
    const int32_t entries = ssm_variant_count(SSM_BACKEND_CUDA, op);
    int           ran = 0;
    for (int32_t e = -1; e < entries; ++e) { /* -1: the default choice */
        const char * name = e < 0 ? NULL : ssm_variant_name(SSM_BACKEND_CUDA, op, e);
        for (int i = 0; i < n; ++i) ssmt_poison(&outs[i]->t);
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx, op, name), SSM_STATUS_OK);
        const ssm_status st = ssmt_run_on_device(ctx, op, args, 0, fn);
        const char *     last = ssm_context_last_variant(ctx);
        TEST_CHECK_STATUS(ssm_context_set_variant(ctx, op, NULL), SSM_STATUS_OK);
        if (st == SSM_STATUS_UNSUPPORTED && name != NULL) continue; /* the entry does not apply */
        TEST_CHECK(st == SSM_STATUS_OK, "%s [%s]: %s (%s)", tag, name ? name : "default", ssm_status_string(st),
                   ssm_context_last_error(ctx));
        if (st != SSM_STATUS_OK) continue;
        int64_t nans = 0, bad = 0;
        for (int i = 0; i < n; ++i) bad += ssmt_nan_mismatch(&outs[i]->t, &ref[i].t, &nans);
        TEST_CHECK(nans > 0 && bad == 0, "%s [%s]: %lld NaN in the reference, %lld elements differ in NaN-ness", tag,
                   last != NULL ? last : "?", (long long)nans, (long long)bad);
        ++ran;
    }
    return ran;
}
