/* npy.c — .npy reader/writer (see npy.h). Parses the header dictionary with a small
 * hand-written scanner: the format only ever holds three keys with simple values. */
#define _POSIX_C_SOURCE 200809L /* fseeko, ftello */
#include "npy.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
#define NPY_MAX_HEADER (1u << 24) /* far above anything numpy writes; guards malloc */

static int npy_fail(char * err, size_t errlen, const char * fmt, ...) {
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char  first;
    memcpy(&first, &one, 1);
    return first == 1;
}

size_t ssmnpy_itemsize(const char * dtype) {
    if (dtype == NULL) return 0;
    if (strcmp(dtype, "f2") == 0) return 2;
    if (strcmp(dtype, "f4") == 0 || strcmp(dtype, "i4") == 0) return 4;
    if (strcmp(dtype, "f8") == 0 || strcmp(dtype, "i8") == 0) return 8;
    return 0;
}

/* ---- header dictionary scanner ----------------------------------------------------- */
typedef struct npy_scan {
    const char * p;
    const char * end;
} npy_scan;

static void scan_ws(npy_scan * s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) ++s->p;
}

static int scan_char(npy_scan * s, char c) {
    scan_ws(s);
    if (s->p < s->end && *s->p == c) {
        ++s->p;
        return 1;
    }
    return 0;
}

/* A quoted Python string ('...' or "...") without escapes, copied into buf. */
static int scan_string(npy_scan * s, char * buf, size_t cap) {
    scan_ws(s);
    if (s->p >= s->end || (*s->p != '\'' && *s->p != '"')) return 0;
    const char q = *s->p++;
    size_t     n = 0;
    while (s->p < s->end && *s->p != q) {
        if (n + 1 >= cap) return 0;
        buf[n++] = *s->p++;
    }
    if (s->p >= s->end) return 0;
    ++s->p;
    buf[n] = '\0';
    return 1;
}

static int scan_word(npy_scan * s, const char * word) {
    scan_ws(s);
    const size_t n = strlen(word);
    if ((size_t)(s->end - s->p) >= n && memcmp(s->p, word, n) == 0) {
        s->p += n;
        return 1;
    }
    return 0;
}

/* "(3, 4)", "(5,)" or "()" (also accepts a trailing L on integers, as old numpy wrote). */
static int scan_shape(npy_scan * s, int32_t * ndim, int64_t * shape, char * err, size_t errlen) {
    if (!scan_char(s, '(')) return npy_fail(err, errlen, "npy: header 'shape' is not a tuple");
    *ndim = 0;
    for (;;) {
        if (scan_char(s, ')')) return 0;
        scan_ws(s);
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return npy_fail(err, errlen, "npy: header 'shape' holds a non-integer entry");
        int64_t v = 0;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
            if (v > (INT64_MAX - 9) / 10) return npy_fail(err, errlen, "npy: header 'shape' entry overflows int64");
            v = v * 10 + (*s->p++ - '0');
        }
        if (s->p < s->end && *s->p == 'L') ++s->p;
        if (*ndim >= SSMNPY_MAX_DIMS)
            return npy_fail(err, errlen, "npy: more than %d dimensions are not supported", SSMNPY_MAX_DIMS);
        shape[(*ndim)++] = v;
        if (scan_char(s, ',')) continue;
        if (scan_char(s, ')')) return 0;
        return npy_fail(err, errlen, "npy: header 'shape' tuple is malformed");
    }
}

/* descr such as "<f4" -> dtype "f4". */
static int parse_descr(const char * descr, char dtype[4], char * err, size_t errlen) {
    const size_t n = strlen(descr);
    if (n != 3) return npy_fail(err, errlen, "npy: dtype '%s' is not supported (f2, f4, f8, i4, i8)", descr);
    const char   order = descr[0];
    const char   code[3] = {descr[1], descr[2], '\0'};
    const size_t isz = ssmnpy_itemsize(code);
    if (isz == 0) return npy_fail(err, errlen, "npy: dtype '%s' is not supported (f2, f4, f8, i4, i8)", descr);
    if (order == '>') return npy_fail(err, errlen, "npy: big-endian dtype '%s' is not supported", descr);
    if (order == '=' && !host_is_little_endian())
        return npy_fail(err, errlen, "npy: native-order dtype '%s' on a big-endian host is not supported", descr);
    if (order == '|' && isz != 1)
        return npy_fail(err, errlen, "npy: dtype '%s' has byte order '|' but %zu-byte elements", descr, isz);
    if (order != '<' && order != '=' && order != '|')
        return npy_fail(err, errlen, "npy: dtype '%s' has an unknown byte-order character", descr);
    memcpy(dtype, code, 3);
    return 0;
}

static int parse_header(const char * text, size_t len, ssmnpy_array * out, int * fortran, char * err,
                        size_t errlen) {
    npy_scan s = {text, text + len};
    int      have_descr = 0, have_order = 0, have_shape = 0;
    if (!scan_char(&s, '{')) return npy_fail(err, errlen, "npy: header is not a dictionary");
    for (;;) {
        if (scan_char(&s, '}')) break;
        char key[32];
        if (!scan_string(&s, key, sizeof key)) return npy_fail(err, errlen, "npy: header key is not a string");
        if (!scan_char(&s, ':')) return npy_fail(err, errlen, "npy: header key '%s' lacks ':'", key);
        if (strcmp(key, "descr") == 0) {
            char descr[32];
            if (!scan_string(&s, descr, sizeof descr))
                return npy_fail(err, errlen, "npy: header 'descr' is not a simple dtype string");
            if (parse_descr(descr, out->dtype, err, errlen) != 0) return -1;
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (scan_word(&s, "True")) {
                *fortran = 1;
            } else if (scan_word(&s, "False")) {
                *fortran = 0;
            } else {
                return npy_fail(err, errlen, "npy: header 'fortran_order' is not a bool");
            }
            have_order = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (scan_shape(&s, &out->ndim, out->shape, err, errlen) != 0) return -1;
            have_shape = 1;
        } else {
            return npy_fail(err, errlen, "npy: header has an unknown key '%s'", key);
        }
        if (scan_char(&s, ',')) continue;
        if (scan_char(&s, '}')) break;
        return npy_fail(err, errlen, "npy: header dictionary is malformed after key '%s'", key);
    }
    if (!have_descr || !have_order || !have_shape)
        return npy_fail(err, errlen, "npy: header lacks '%s'",
                        !have_descr ? "descr" : (!have_order ? "fortran_order" : "shape"));
    return 0;
}

/* Product of shape times itemsize, or -1 on overflow. */
static int array_bytes(int32_t ndim, const int64_t * shape, size_t itemsize, size_t * bytes) {
    size_t total = itemsize;
    for (int32_t i = 0; i < ndim; ++i) {
        if (shape[i] < 0) return -1;
        if (shape[i] == 0) {
            *bytes = 0;
            return 0;
        }
        if ((uint64_t)shape[i] > SIZE_MAX / total) return -1;
        total *= (size_t)shape[i];
    }
    *bytes = total;
    return 0;
}

/* numpy writes a Fortran-ordered array with its first index fastest: permute it into the C
 * order every caller expects (element by element; test vectors are small). */
static int fortran_to_c_order(ssmnpy_array * a, char * err, size_t errlen) {
    const size_t isz = ssmnpy_itemsize(a->dtype);
    unsigned char * c = malloc(a->nbytes);
    if (c == NULL) return npy_fail(err, errlen, "npy: out of memory reordering a Fortran-order array");
    int64_t idx[8] = {0};
    const size_t n = a->nbytes / isz;
    for (size_t e = 0; e < n; ++e) { /* e walks C order; idx is its multi-index */
        size_t f_off = 0, stride = 1;
        for (int32_t d = 0; d < a->ndim; ++d) {
            f_off += (size_t)idx[d] * stride;
            stride *= (size_t)a->shape[d];
        }
        memcpy(c + e * isz, (const unsigned char *)a->data + f_off * isz, isz);
        for (int32_t d = a->ndim - 1; d >= 0; --d) {
            if (++idx[d] < a->shape[d]) break;
            idx[d] = 0;
        }
    }
    free(a->data);
    a->data = c;
    return 0;
}

static int read_all(const char * path, FILE * f, ssmnpy_array * out, char * err, size_t errlen) {
    unsigned char pre[8];
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, npy_magic, 6) != 0)
        return npy_fail(err, errlen, "npy: %s is not a .npy file (bad magic)", path);
    const unsigned major = pre[6];
    size_t         hlen;
    if (major == 1) {
        unsigned char l2[2];
        if (fread(l2, 1, 2, f) != 2) return npy_fail(err, errlen, "npy: %s is truncated in the header", path);
        hlen = (size_t)l2[0] | ((size_t)l2[1] << 8);
    } else if (major == 2 || major == 3) {
        unsigned char l4[4];
        if (fread(l4, 1, 4, f) != 4) return npy_fail(err, errlen, "npy: %s is truncated in the header", path);
        hlen = (size_t)l4[0] | ((size_t)l4[1] << 8) | ((size_t)l4[2] << 16) | ((size_t)l4[3] << 24);
    } else {
        return npy_fail(err, errlen, "npy: %s has unsupported format version %u.%u", path, major, (unsigned)pre[7]);
    }
    if (hlen == 0 || hlen > NPY_MAX_HEADER)
        return npy_fail(err, errlen, "npy: %s has a bad header length %zu", path, hlen);
    char * text = malloc(hlen + 1);
    if (text == NULL) return npy_fail(err, errlen, "npy: out of memory reading %s", path);
    if (fread(text, 1, hlen, f) != hlen) {
        free(text);
        return npy_fail(err, errlen, "npy: %s is truncated in the header", path);
    }
    text[hlen] = '\0';
    int       fortran = 0;
    const int rc = parse_header(text, hlen, out, &fortran, err, errlen);
    free(text);
    if (rc != 0) return -1;

    size_t bytes;
    if (array_bytes(out->ndim, out->shape, ssmnpy_itemsize(out->dtype), &bytes) != 0)
        return npy_fail(err, errlen, "npy: %s has a shape whose size overflows", path);
    /* The data must be exactly what the header promises: checked against the file's size
     * before allocating, so a small file cannot make the reader allocate a huge buffer. */
    const off_t here = ftello(f);
    if (here < 0 || fseeko(f, 0, SEEK_END) != 0) return npy_fail(err, errlen, "npy: cannot seek in %s", path);
    const off_t end = ftello(f);
    if (end < here || fseeko(f, here, SEEK_SET) != 0) return npy_fail(err, errlen, "npy: cannot seek in %s", path);
    const uint64_t have = (uint64_t)(end - here);
    if (have < (uint64_t)bytes)
        return npy_fail(err, errlen, "npy: %s is truncated: expected %zu data bytes, found %llu", path, bytes,
                        (unsigned long long)have);
    if (have > (uint64_t)bytes)
        return npy_fail(err, errlen, "npy: %s has %llu bytes after its %zu data bytes", path,
                        (unsigned long long)(have - (uint64_t)bytes), bytes);
    out->data = malloc(bytes > 0 ? bytes : 1);
    if (out->data == NULL) return npy_fail(err, errlen, "npy: out of memory (%zu bytes) reading %s", bytes, path);
    if (bytes > 0 && fread(out->data, 1, bytes, f) != bytes) {
        free(out->data);
        out->data = NULL;
        return npy_fail(err, errlen, "npy: %s is truncated: expected %zu data bytes", path, bytes);
    }
    out->nbytes = bytes;
    if (fortran && out->ndim > 1 && bytes > 0) return fortran_to_c_order(out, err, errlen);
    return 0;
}

int ssmnpy_read(const char * path, ssmnpy_array * out, char * err, size_t errlen) {
    if (out == NULL) return npy_fail(err, errlen, "npy: output array is NULL");
    memset(out, 0, sizeof *out);
    if (path == NULL) return npy_fail(err, errlen, "npy: path is NULL");
    if (!host_is_little_endian()) return npy_fail(err, errlen, "npy: big-endian hosts are not supported");
    FILE * f = fopen(path, "rb");
    if (f == NULL) return npy_fail(err, errlen, "npy: cannot open %s for reading", path);
    const int rc = read_all(path, f, out, err, errlen);
    fclose(f);
    if (rc != 0) {
        free(out->data);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

int ssmnpy_write(const char * path, const char * dtype, int32_t ndim, const int64_t * shape, const void * data,
                 char * err, size_t errlen) {
    if (path == NULL) return npy_fail(err, errlen, "npy: path is NULL");
    if (dtype == NULL) return npy_fail(err, errlen, "npy: dtype is NULL");
    if (dtype[0] == '<') ++dtype;
    const size_t isz = ssmnpy_itemsize(dtype);
    if (isz == 0) return npy_fail(err, errlen, "npy: dtype '%s' is not supported (f2, f4, f8, i4, i8)", dtype);
    if (ndim < 0 || ndim > SSMNPY_MAX_DIMS)
        return npy_fail(err, errlen, "npy: ndim %d is outside [0, %d]", (int)ndim, SSMNPY_MAX_DIMS);
    if (ndim > 0 && shape == NULL) return npy_fail(err, errlen, "npy: shape is NULL");
    if (!host_is_little_endian()) return npy_fail(err, errlen, "npy: big-endian hosts are not supported");
    size_t bytes;
    if (array_bytes(ndim, shape, isz, &bytes) != 0)
        return npy_fail(err, errlen, "npy: shape has a negative entry or its size overflows");
    if (bytes > 0 && data == NULL) return npy_fail(err, errlen, "npy: data is NULL for %zu bytes", bytes);

    /* Header text: dict, spaces, '\n'; magic(6)+version(2)+len(2)+text is a multiple of 64. */
    char dict[400];
    int  n = snprintf(dict, sizeof dict, "{'descr': '<%s', 'fortran_order': False, 'shape': (", dtype);
    for (int32_t i = 0; i < ndim; ++i)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld,%s", (long long)shape[i], (i + 1 < ndim) ? " " : "");
    if (ndim > 1) --n; /* "(3, 4,)" -> "(3, 4)"; a 1-tuple keeps its comma */
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    const size_t unpadded = 10 + (size_t)n + 1;
    const size_t total = (unpadded + 63) / 64 * 64;
    const size_t hlen = total - 10;
    char         head[512];
    memcpy(head, npy_magic, 6);
    head[6] = 1;
    head[7] = 0;
    head[8] = (char)(hlen & 0xff);
    head[9] = (char)((hlen >> 8) & 0xff);
    memcpy(head + 10, dict, (size_t)n);
    memset(head + 10 + n, ' ', total - 10 - (size_t)n);
    head[total - 1] = '\n';

    FILE * f = fopen(path, "wb");
    if (f == NULL) return npy_fail(err, errlen, "npy: cannot open %s for writing", path);
    int ok = fwrite(head, 1, total, f) == total;
    if (ok && bytes > 0) ok = fwrite(data, 1, bytes, f) == bytes;
    if (fclose(f) != 0) ok = 0;
    if (!ok) return npy_fail(err, errlen, "npy: writing %s failed", path);
    return 0;
}

void ssmnpy_free(ssmnpy_array * a) {
    if (a == NULL) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}
