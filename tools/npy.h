/*
 * npy.h — a small reader/writer for NumPy .npy files, shared by the ssmops CLI and tests.
 *
 * Reads format versions 1.0, 2.0 and 3.0 with little-endian (or native on a little-endian
 * host) dtypes f2, f4, f8, i4, i8, C order only (fortran_order True is an error), any shape
 * with up to 8 dims including () scalars and (n,) vectors. Writes version 1.0, C order, with
 * the header padded so the data starts at a multiple of 64 bytes.
 * Functions never print: on failure they return -1 and put one sentence into err.
 */
#ifndef SSMOPS_NPY_H
#define SSMOPS_NPY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SSMNPY_MAX_DIMS 8

typedef struct ssmnpy_array {
    char    dtype[4]; /* "f2","f4","f8","i4","i8" (little endian), NUL-terminated */
    int32_t ndim;     /* 0 for a scalar                                            */
    int64_t shape[SSMNPY_MAX_DIMS];
    void *  data;   /* malloc'd, C order; free with ssmnpy_free                  */
    size_t  nbytes; /* product(shape) * itemsize                                 */
} ssmnpy_array;

/* Reads path into *out (zeroed first). 0 on success; -1 with a message in err on failure
 * (out then owns nothing). err may be NULL. */
int ssmnpy_read(const char * path, ssmnpy_array * out, char * err, size_t errlen);
/* Writes a C-order array. dtype is "f2","f4","f8","i4","i8" (a leading '<' is accepted).
 * data holds product(shape) elements (may be NULL only when that product is 0). */
int ssmnpy_write(const char * path, const char * dtype, int32_t ndim, const int64_t * shape, const void * data,
                 char * err, size_t errlen);
/* Frees the data and zeroes *a; NULL and an already-freed array are fine. */
void ssmnpy_free(ssmnpy_array * a);
/* Bytes per element of "f2".."i8" (0 if unknown). */
size_t ssmnpy_itemsize(const char * dtype);

#ifdef __cplusplus
}
#endif

#endif /* SSMOPS_NPY_H */
