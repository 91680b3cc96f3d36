/* tools/npy.c: round trip in C order, and Fortran-order files (some test vectors are
 * stored that way) read back in C order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "testutil.h"

/* Writes a v1.0 .npy file with the given header dict and raw data. */
static int write_raw(const char * path, const char * dict, const void * data, size_t bytes) {
    char header[128];
    memset(header, ' ', sizeof header);
    const size_t n = strlen(dict);
    memcpy(header, dict, n);
    header[sizeof header - 10 - 1] = '\n'; /* 10-byte preamble + 118-byte header = 128 */
    FILE * f = fopen(path, "wb");
    if (f == NULL) return -1;
    const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0};
    fwrite(pre, 1, 10, f);
    fwrite(header, 1, 118, f);
    fwrite(data, 1, bytes, f);
    fclose(f);
    return 0;
}

int main(void) {
    char err[256];
    const char * path = "test_npy_tmp.npy";

    /* C order round trip of a (2,3,4) float32 array. */
    float c[24];
    for (int i = 0; i < 24; ++i) c[i] = (float)i * 0.5f;
    const int64_t shape[3] = {2, 3, 4};
    TEST_CHECK(ssmnpy_write(path, "f4", 3, shape, c, err, sizeof err) == 0, "write: %s", err);
    ssmnpy_array a;
    TEST_CHECK(ssmnpy_read(path, &a, err, sizeof err) == 0, "read: %s", err);
    TEST_CHECK(a.ndim == 3 && a.shape[0] == 2 && a.shape[1] == 3 && a.shape[2] == 4, "shape");
    TEST_CHECK(a.data != NULL && memcmp(a.data, c, sizeof c) == 0, "C-order data differs");
    ssmnpy_free(&a);

    /* The same logical array stored in Fortran order (first index fastest). */
    float f[24];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j)
            for (int k = 0; k < 4; ++k) f[i + 2 * (j + 3 * k)] = c[(i * 3 + j) * 4 + k];
    TEST_CHECK(write_raw(path, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3, 4), }", f, sizeof f) == 0,
               "cannot write %s", path);
    TEST_CHECK(ssmnpy_read(path, &a, err, sizeof err) == 0, "read fortran: %s", err);
    TEST_CHECK(a.data != NULL && memcmp(a.data, c, sizeof c) == 0, "Fortran-order data not reordered to C order");
    ssmnpy_free(&a);

    /* A header that is not a bool is still an error, with a message. */
    TEST_CHECK(write_raw(path, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", f, 8) == 0, "write");
    TEST_CHECK(ssmnpy_read(path, &a, err, sizeof err) != 0 && strstr(err, "fortran_order") != NULL,
               "bad fortran_order accepted (%s)", err);

    /* The data must match the header's size exactly: a huge shape over a small file is
     * refused before anything is allocated; trailing bytes and truncation are errors. */
    TEST_CHECK(write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824, 4), }", f, 16) == 0,
               "write");
    TEST_CHECK(ssmnpy_read(path, &a, err, sizeof err) != 0 && strstr(err, "truncated") != NULL,
               "16 GiB shape over a 16-byte payload accepted (%s)", err);
    TEST_CHECK(write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f, 16) == 0, "write");
    TEST_CHECK(ssmnpy_read(path, &a, err, sizeof err) != 0 && strstr(err, "after its") != NULL,
               "trailing bytes accepted (%s)", err);
    TEST_CHECK(write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", f, 16) == 0, "write");
    TEST_CHECK(ssmnpy_read(path, &a, err, sizeof err) != 0 && strstr(err, "truncated") != NULL,
               "short data accepted (%s)", err);
    TEST_CHECK(write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", f, 16) == 0, "write");
    TEST_CHECK(ssmnpy_read(path, &a, err, sizeof err) == 0 && a.nbytes == 16, "exact payload refused (%s)", err);
    ssmnpy_free(&a);
    remove(path);
    TEST_EXIT();
}
