/*
 * fuzz_npy: libFuzzer harness for the CLI's .npy reader (tools/npy.c, ssmnpy_read).
 *
 * The input bytes are the whole file: they go into an anonymous memory file (memfd) that
 * ssmnpy_read opens through /proc/self/fd, so the reader runs unchanged on crafted headers,
 * huge shapes, truncated data, Fortran order and unknown dtypes. A crash or sanitizer report
 * is a bug; so is a success whose array disagrees with its own header (nbytes must be
 * product(shape) * itemsize, the data must be the file's last nbytes bytes, in C order or
 * permuted from Fortran order) or a failure without a message or that leaves *out owning
 * memory.
 */
#include "npy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);

/* A broken promise: say which, and abort so libFuzzer saves the input. */
#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "fuzz_npy: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

/* 1 if a's C-order data is file (first index fastest, numpy's Fortran order) permuted. */
static int fortran_matches(const ssmnpy_array * a, size_t item, const uint8_t * file) {
    int64_t idx[SSMNPY_MAX_DIMS] = {0};
    size_t  n = a->nbytes / item;
    for (size_t c = 0; c < n; ++c) {
        size_t f = 0, stride = 1;
        for (int32_t d = 0; d < a->ndim; ++d) {
            f += (size_t)idx[d] * stride;
            stride *= (size_t)a->shape[d];
        }
        if (memcmp((const uint8_t *)a->data + c * item, file + f * item, item) != 0) return 0;
        for (int32_t d = a->ndim - 1; d >= 0; --d) { /* next C-order index */
            if (++idx[d] < a->shape[d]) break;
            idx[d] = 0;
        }
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static int fd = -1;
    if (fd < 0) {
        fd = memfd_create("fuzz_npy", 0);
        CHECK(fd >= 0);
    }
    CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, data, size, 0) == (ssize_t)size);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

    ssmnpy_array a;
    memset(&a, 0x5A, sizeof a); /* the reader must zero it first */
    char err[256] = "";
    if (ssmnpy_read(path, &a, err, sizeof err) != 0) {
        /* A failure names its reason and leaves nothing owned. */
        CHECK(err[0] != '\0' && a.data == NULL && a.nbytes == 0);
        return 0;
    }
    const size_t item = ssmnpy_itemsize(a.dtype);
    CHECK(item != 0 && a.ndim >= 0 && a.ndim <= SSMNPY_MAX_DIMS);
    size_t n = 1;
    for (int32_t i = 0; i < a.ndim; ++i) {
        CHECK(a.shape[i] >= 0);
        CHECK(!__builtin_mul_overflow(n, (size_t)a.shape[i], &n));
    }
    size_t bytes = 0;
    CHECK(!__builtin_mul_overflow(n, item, &bytes) && bytes == a.nbytes && bytes <= size);
    CHECK(bytes == 0 || a.data != NULL);
    /* Touch every byte: ASan reports a buffer smaller than nbytes. */
    unsigned sum = 0;
    for (size_t i = 0; i < bytes; ++i) sum += ((const unsigned char *)a.data)[i];
    /* The data are the file's last bytes, as written (C order) or permuted from Fortran order. */
    CHECK(bytes == 0 || memcmp(a.data, data + size - bytes, bytes) == 0 ||
          fortran_matches(&a, item, data + size - bytes));
    (void)sum;
    ssmnpy_free(&a);
    CHECK(a.data == NULL);
    return 0;
}
