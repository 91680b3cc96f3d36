/* cudautil.c — see cudautil.h. */
#include "cudautil.h"

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
        {"mamba3_siso", "chain64"},    {"mamba3_siso", "chain32"},    {"mamba3_siso", "wgmma"},
        {"mamba3_siso_fwd", "chain64"}, {"mamba3_siso_fwd", "chain32"}, {"mamba3_siso_fwd", "wgmma"}};
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; ++i)
        if (strcmp(entries[i][0], op) == 0 && strcmp(entries[i][1], name) == 0) return 1;
    return 0;
}
