/* testutil.c — shared test support; see testutil.h. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cudautil.h"
#include "npy.h"

int ssmt_failures = 0;
int ssmt_checks = 0;

/* ---- random numbers ------------------------------------------------------------------ */
static uint64_t splitmix64(uint64_t * x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void ssmt_rng_seed(ssmt_rng * rng, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; ++i) rng->s[i] = splitmix64(&x);
}

uint64_t ssmt_rng_from_env(ssmt_rng * rng, uint64_t default_seed) {
    const char *   env  = getenv("SSMOPS_TEST_SEED");
    const uint64_t seed = env ? strtoull(env, NULL, 10) : default_seed;
    printf("seed %llu\n", (unsigned long long) seed);
    ssmt_rng_seed(rng, seed);
    return seed;
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t ssmt_u64(ssmt_rng * rng) { /* xoshiro256** */
    uint64_t *     s = rng->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double ssmt_uniform(ssmt_rng * rng, double lo, double hi) {
    const double u = (double)(ssmt_u64(rng) >> 11) * 0x1.0p-53;
    return lo + (hi - lo) * u;
}

double ssmt_normal(ssmt_rng * rng) {
    const double u1 = 1.0 - ssmt_uniform(rng, 0.0, 1.0); /* (0, 1] */
    const double u2 = ssmt_uniform(rng, 0.0, 1.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t ssmt_randint(ssmt_rng * rng, int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    return lo + (int64_t)(ssmt_u64(rng) % (uint64_t)(hi - lo + 1));
}

/* ---- element access ------------------------------------------------------------------ */
int64_t ssmt_numel(const ssm_tensor * t) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; ++i) n *= t->shape[i];
    return n;
}

int64_t ssmt_nan_mismatch(const ssm_tensor * got, const ssm_tensor * ref, int64_t * nans) {
    int64_t bad = 0;
    for (int64_t i = 0, n = ssmt_numel(ref); i < n; ++i) {
        const int rn = isnan(ssmt_get(ref, i)), gn = isnan(ssmt_get(got, i));
        *nans += rn, bad += rn != gn;
    }
    return bad;
}

int64_t ssmt_offset(const ssm_tensor * t, int64_t lin) {
    int64_t off = 0;
    for (int32_t i = t->ndim - 1; i >= 0; --i) {
        const int64_t n = t->shape[i] > 0 ? t->shape[i] : 1;
        off += (lin % n) * t->strides[i];
        lin /= n;
    }
    return off;
}

static double get_at(const ssm_tensor * t, int64_t off) {
    switch (t->dtype) {
        case SSM_DTYPE_F32: return ((const float *)t->data)[off];
        case SSM_DTYPE_F64: return ((const double *)t->data)[off];
        case SSM_DTYPE_F16: return ssm_f16_to_f32(((const uint16_t *)t->data)[off]);
        case SSM_DTYPE_BF16: return ssm_bf16_to_f32(((const uint16_t *)t->data)[off]);
        case SSM_DTYPE_I32: return ((const int32_t *)t->data)[off];
        case SSM_DTYPE_I64: return (double)((const int64_t *)t->data)[off];
        default: return NAN;
    }
}

/* f16/bf16 go through f32 (double rounding is fine for generated test inputs). */
static void set_at(const ssm_tensor * t, int64_t off, double v) {
    switch (t->dtype) {
        case SSM_DTYPE_F32: ((float *)t->data)[off] = (float)v; break;
        case SSM_DTYPE_F64: ((double *)t->data)[off] = v; break;
        case SSM_DTYPE_F16: ((uint16_t *)t->data)[off] = ssm_f32_to_f16((float)v); break;
        case SSM_DTYPE_BF16: ((uint16_t *)t->data)[off] = ssm_f32_to_bf16((float)v); break;
        case SSM_DTYPE_I32: ((int32_t *)t->data)[off] = (int32_t)v; break;
        case SSM_DTYPE_I64: ((int64_t *)t->data)[off] = (int64_t)v; break;
        default: break;
    }
}

double ssmt_get(const ssm_tensor * t, int64_t lin) { return get_at(t, ssmt_offset(t, lin)); }
void   ssmt_set(const ssm_tensor * t, int64_t lin, double v) { set_at(t, ssmt_offset(t, lin), v); }

double ssmt_round_to(ssm_dtype dtype, double v) {
    switch (dtype) {
        case SSM_DTYPE_F32: return (float)v;
        case SSM_DTYPE_F16: return ssm_f16_to_f32(ssm_f32_to_f16((float)v));
        case SSM_DTYPE_BF16: return ssm_bf16_to_f32(ssm_f32_to_bf16((float)v));
        default: return v;
    }
}

/* ---- host tensors -------------------------------------------------------------------- */
static int is_float(int32_t dtype) {
    return dtype == SSM_DTYPE_F32 || dtype == SSM_DTYPE_F16 || dtype == SSM_DTYPE_BF16 || dtype == SSM_DTYPE_F64;
}

/* Poison a raw buffer: NaN patterns for floats, 0x5A bytes for ints. */
static void poison_bytes(void * buf, size_t bytes, int32_t dtype) {
    const size_t esz = ssm_dtype_size((ssm_dtype)dtype);
    if (!is_float(dtype) || esz == 0) {
        memset(buf, 0x5A, bytes);
        return;
    }
    const ssm_tensor one = {.data = buf, .dtype = dtype, .ndim = 0};
    for (size_t i = 0; i + esz <= bytes; i += esz) {
        ssm_tensor e = one;
        e.data = (char *)buf + i;
        set_at(&e, 0, NAN);
    }
}

ssmt_host ssmt_alloc_layout(ssm_dtype dtype, int32_t ndim, const int64_t * shape, const int32_t * order, int64_t pad) {
    ssmt_host h;
    memset(&h, 0, sizeof h);
    const size_t esz = ssm_dtype_size(dtype);
    if (esz == 0 || ndim < 0 || ndim > SSM_MAX_DIMS) return h;
    h.t.dtype = (int32_t)dtype;
    h.t.device.type = SSM_DEVICE_CPU;
    h.t.ndim = ndim;
    int64_t stride = 1, span = 1;
    for (int32_t k = ndim - 1; k >= 0; --k) {
        const int32_t i = order != NULL ? order[k] : k;
        h.t.shape[i] = shape[i];
        h.t.strides[i] = stride;
        const int64_t extent = shape[i] + (shape[i] > 0 ? pad : 0);
        stride *= extent > 0 ? extent : 1;
    }
    span = stride;
    h.bytes = ((size_t)span * esz + 63) / 64 * 64;
    if (h.bytes == 0) h.bytes = 64;
    h.buf = aligned_alloc(64, h.bytes);
    if (h.buf == NULL) {
        memset(&h, 0, sizeof h);
        return h;
    }
    poison_bytes(h.buf, h.bytes, (int32_t)dtype);
    h.t.data = h.buf;
    return h;
}

ssmt_host ssmt_alloc(ssm_dtype dtype, int32_t ndim, const int64_t * shape) {
    return ssmt_alloc_layout(dtype, ndim, shape, NULL, 0);
}

ssmt_host ssmt_clone(const ssm_tensor * src, ssm_dtype dtype) {
    ssmt_host h = ssmt_alloc(dtype, src->ndim, src->shape);
    if (h.t.data != NULL) ssmt_copy(&h.t, src);
    return h;
}

void ssmt_free(ssmt_host * h) {
    if (h == NULL) return;
    free(h->buf);
    memset(h, 0, sizeof *h);
}

void ssmt_fill_value(const ssm_tensor * t, double v) {
    const int64_t n = ssmt_numel(t);
    for (int64_t i = 0; i < n; ++i) ssmt_set(t, i, v);
}

void ssmt_fill_normal(ssmt_rng * rng, const ssm_tensor * t, double mean, double std) {
    const int64_t n = ssmt_numel(t);
    for (int64_t i = 0; i < n; ++i) ssmt_set(t, i, mean + std * ssmt_normal(rng));
}

void ssmt_fill_uniform(ssmt_rng * rng, const ssm_tensor * t, double lo, double hi) {
    const int64_t n = ssmt_numel(t);
    for (int64_t i = 0; i < n; ++i) ssmt_set(t, i, ssmt_uniform(rng, lo, hi));
}

void ssmt_fill_fn(const ssm_tensor * t, double (*fn)(void * arg, int64_t lin), void * arg) {
    const int64_t n = ssmt_numel(t);
    for (int64_t i = 0; i < n; ++i) ssmt_set(t, i, fn(arg, i));
}

void ssmt_poison(const ssm_tensor * t) {
    const int64_t n = ssmt_numel(t);
    for (int64_t i = 0; i < n; ++i) {
        if (is_float(t->dtype))
            ssmt_set(t, i, NAN);
        else
            memset((char *)t->data + ssmt_offset(t, i) * (int64_t)ssm_dtype_size((ssm_dtype)t->dtype), 0x5A,
                   ssm_dtype_size((ssm_dtype)t->dtype));
    }
}

void ssmt_copy(const ssm_tensor * dst, const ssm_tensor * src) {
    const int64_t n = ssmt_numel(src);
    for (int64_t i = 0; i < n; ++i) ssmt_set(dst, i, ssmt_get(src, i));
}

ssmt_host ssmt_to_f64(const ssm_tensor * src) { return ssmt_clone(src, SSM_DTYPE_F64); }

void * ssmt_snapshot(const ssmt_host * h) {
    void * s = malloc(h->bytes > 0 ? h->bytes : 1);
    if (s != NULL && h->bytes > 0) memcpy(s, h->buf, h->bytes);
    return s;
}

int ssmt_unchanged(const ssmt_host * h, const void * snapshot) {
    return h->bytes == 0 || memcmp(h->buf, snapshot, h->bytes) == 0;
}

void ssmt_bufset_add(ssmt_bufset * s, ssmt_host * h) {
    if (h->buf != NULL && s->n < SSMT_BUFSET_MAX) s->h[s->n++] = h;
}

void ssmt_bufset_add_members(ssmt_bufset * s, ssmt_host * first, ssmt_host * last) {
    /* Walked as bytes of the enclosing struct: members of one type lie sizeof apart, while
     * ssmt_host pointer arithmetic past `first` would leave the one-element object it points to. */
    for (char * p = (char *)first; p <= (char *)last; p += sizeof(ssmt_host)) ssmt_bufset_add(s, (ssmt_host *)p);
}

void ssmt_bufset_snapshot(const ssmt_bufset * s, void ** snaps) {
    for (int i = 0; i < s->n; ++i) snaps[i] = ssmt_snapshot(s->h[i]);
}

void ssmt_bufset_check_unchanged(const ssmt_bufset * s, void ** snaps, const char * op, const char * what) {
    for (int i = 0; i < s->n; ++i) {
        TEST_CHECK(ssmt_unchanged(s->h[i], snaps[i]), "%s / %s: buffer %d was modified", op, what, i);
        free(snaps[i]);
    }
}

/* ---- comparisons --------------------------------------------------------------------- */
/* Half the spacing of the 16-bit dtype dt at |v|: the largest error of rounding v to dt
 * (normal range; below it, the subnormal spacing). */
static double half_ulp16(double v, ssm_dtype dt) {
    const int mant = dt == SSM_DTYPE_F16 ? 10 : 7, emin = dt == SSM_DTYPE_F16 ? -14 : -126;
    int       e = emin;
    if (fabs(v) >= ldexp(1.0, emin)) {
        (void)frexp(fabs(v), &e); /* |v| in [2^(e-1), 2^e) */
        e -= 1;
    }
    return ldexp(1.0, e - mant - 1);
}

/* ssmt_compare; with dt16 (F16/BF16), each element's error beyond half an ulp of dt at r. */
static ssmt_cmp compare_impl(const ssm_tensor * y, const ssm_tensor * r, ssm_dtype dt16) {
    ssmt_cmp      c = {0, 0, 0, 0};
    const int64_t n = ssmt_numel(r);
    double        num = 0.0, den = 0.0, maxd = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const double yv = ssmt_get(y, i), rv = ssmt_get(r, i);
        if (!isfinite(yv) && isfinite(rv)) {
            ++c.nonfinite;
            continue;
        }
        if (!isfinite(rv)) {
            /* a NaN/Inf in the reference must be reproduced exactly (same class) */
            if (!(isnan(rv) ? isnan(yv) : yv == rv)) ++c.nonfinite;
            continue;
        }
        double e = fabs(yv - rv);
        if (dt16 == SSM_DTYPE_F16 || dt16 == SSM_DTYPE_BF16) e = fmax(0.0, e - half_ulp16(rv, dt16));
        num += e * e;
        den += rv * rv;
        if (e > maxd) maxd = e;
    }
    c.n = n;
    const double rms = n > 0 ? sqrt(den / (double)n) : 0.0;
    c.rel_rms = den > 0.0 ? sqrt(num / den) : sqrt(num);
    c.max_rel = rms > 0.0 ? maxd / rms : maxd;
    return c;
}

ssmt_cmp ssmt_compare(const ssm_tensor * y, const ssm_tensor * r) { return compare_impl(y, r, SSM_DTYPE_F32); }

ssmt_cmp ssmt_compare_rounded(const ssm_tensor * y, const ssm_tensor * r) {
    return compare_impl(y, r, (ssm_dtype)y->dtype);
}

ssmt_bar ssmt_bar_for(ssm_dtype compute_dtype) {
    ssmt_bar b;
    switch (compute_dtype) {
        case SSM_DTYPE_F16:
            b.rel_rms = 0x1.0p-11;
            b.max_rel = 0x1.0p-7;
            break;
        case SSM_DTYPE_BF16:
            b.rel_rms = 0x1.0p-8;
            b.max_rel = 0x1.0p-4;
            break;
        default:
            b.rel_rms = 1e-5;
            b.max_rel = 1e-3;
            break;
    }
    return b;
}

int ssmt_same_shape(const char * name, const ssm_tensor * a, const ssm_tensor * b) {
    int same = a->ndim == b->ndim;
    for (int32_t i = 0; same && i < a->ndim; ++i) same = a->shape[i] == b->shape[i];
    TEST_CHECK(same, "%s: shapes differ", name);
    return same;
}

int ssmt_variant_forced = 0;

/* With SSMOPS_TEST_HASH_LOG=FILE, every checked output computed by the default kernel choice
 * appends "name hash" to FILE (FNV-1a over its elements' values as float64 bits), so that two
 * builds can be compared for identical bytes case by case. Outputs of a forced variant are left
 * out: the test sets ssmt_variant_forced, SSMOPS_CUDA_PORTABLE=1 passes over the wgmma entries, or
 * (in builds older than the variant registry) an SSMOPS_CUDA_* environment knob is set to a value
 * other than its default's. */
void ssmt_hash_log(const char * name, const ssm_tensor * y) {
    const char * path = getenv("SSMOPS_TEST_HASH_LOG");
    if (path == NULL || *path == '\0' || ssmt_variant_forced) return;
    static const char * const knobs[][2] = {
        {"SSMOPS_CUDA_SCAN_STATE", NULL}, {"SSMOPS_CUDA_SCAN_KERNEL", "v7"}, {"SSMOPS_CUDA_SISO_STATE", NULL},
        {"SSMOPS_CUDA_SISO_CHAIN_KS", NULL}, {"SSMOPS_CUDA_SISO_FAST", "7"}, {"SSMOPS_CUDA_STEP_KERNEL", "v3"},
        {"SSMOPS_CUDA_MIMO_KERNEL", "v2"}, {"SSMOPS_CUDA_SISO_CHAIN_PIPE", NULL},
        {"SSMOPS_CUDA_PORTABLE", "0"}};
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; ++i) {
        const char * v = getenv(knobs[i][0]);
        if (v != NULL && (knobs[i][1] == NULL || strcmp(v, knobs[i][1]) != 0)) return;
    }
    uint64_t      h = 0xcbf29ce484222325ull;
    const int64_t n = ssmt_numel(y);
    for (int64_t i = 0; i < n; ++i) {
        const double v = ssmt_get(y, i);
        uint64_t     bits;
        memcpy(&bits, &v, sizeof bits);
        for (int b = 0; b < 8; ++b) h = (h ^ ((bits >> (8 * b)) & 0xFF)) * 0x100000001b3ull;
    }
    FILE * f = fopen(path, "a");
    if (f == NULL) return;
    fprintf(f, "%s %016llx\n", name, (unsigned long long)h);
    fclose(f);
}

static int check_line_cmp(const char * name, const ssm_tensor * y, const ssm_tensor * r, ssmt_bar bar, int rounded) {
    ssmt_hash_log(name, y);
    if (!ssmt_same_shape(name, y, r)) {
        printf("%-48s shape mismatch FAIL\n", name);
        return 0;
    }
    const ssmt_cmp c = rounded ? ssmt_compare_rounded(y, r) : ssmt_compare(y, r);
    const int      pass = c.nonfinite == 0 && c.rel_rms <= bar.rel_rms && c.max_rel <= bar.max_rel;
    printf("%-48s rel_rms=%.3e max_rel=%.3e bar=%.1e/%.1e%s %s\n", name, c.rel_rms, c.max_rel, bar.rel_rms, bar.max_rel,
           c.nonfinite ? " NONFINITE" : "", pass ? "PASS" : "FAIL");
    TEST_CHECK(pass, "%s: rel_rms=%.3e max_rel=%.3e nonfinite=%lld", name, c.rel_rms, c.max_rel,
               (long long)c.nonfinite);
    return pass;
}

static int check_line(const char * name, const ssm_tensor * y, const ssm_tensor * r, ssmt_bar bar) {
    return check_line_cmp(name, y, r, bar, 0);
}

int ssmt_check_bar(const char * name, const ssm_tensor * y, const ssm_tensor * r, ssm_dtype compute_dtype) {
    return check_line(name, y, r, ssmt_bar_for(compute_dtype));
}

int ssmt_check_bar_rounded(const char * name, const ssm_tensor * y, const ssm_tensor * r, ssm_dtype compute_dtype) {
    return check_line_cmp(name, y, r, ssmt_bar_for(compute_dtype), y->dtype == SSM_DTYPE_F16 || y->dtype == SSM_DTYPE_BF16);
}

int ssmt_check_within(const char * name, const ssm_tensor * y, const ssm_tensor * r, ssmt_bar bar) {
    return check_line(name, y, r, bar);
}

int ssmt_check_close(const char * name, const ssm_tensor * y, const ssm_tensor * r, double tol_rel_rms) {
    const ssmt_bar bar = {tol_rel_rms, 100.0 * tol_rel_rms};
    return check_line(name, y, r, bar);
}

/* ---- test cases ---------------------------------------------------------------------- */
#ifndef SSMOPS_TEST_DATA
#define SSMOPS_TEST_DATA "tests/data"
#endif

static int cmp_names(const void * a, const void * b) { return strcmp((const char *)a, (const char *)b); }

int ssmt_case_list(const char * op, char (*names)[128], int max) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", SSMOPS_TEST_DATA, op);
    DIR * d = opendir(dir);
    if (d == NULL) return 0;
    int             n = 0;
    struct dirent * e;
    while ((e = readdir(d)) != NULL && n < max) {
        if (e->d_name[0] == '.') continue;
        char        path[1400];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s/case.json", dir, e->d_name);
        if (stat(path, &st) != 0) continue;
        if (strlen(e->d_name) >= 128) continue;
        memcpy(names[n++], e->d_name, strlen(e->d_name) + 1);
    }
    closedir(d);
    qsort(names, (size_t)n, 128, cmp_names);
    return n;
}

static char * read_text(const char * path) {
    FILE * f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char * s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s != NULL) {
        const size_t got = fread(s, 1, (size_t)n, f);
        s[got] = '\0';
    }
    fclose(f);
    return s;
}

/* The raw value text after "key": inside [from, to) (NULL if absent). */
static const char * json_value(const char * from, const char * to, const char * key) {
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char * p = strstr(from, pat);
    if (p == NULL || (to != NULL && p >= to)) return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ':') ++p;
    return p;
}

static void json_string(const char * v, char * out, size_t cap) {
    out[0] = '\0';
    if (v == NULL || *v != '"') return;
    ++v;
    size_t n = 0;
    while (*v && *v != '"' && n + 1 < cap) out[n++] = *v++;
    out[n] = '\0';
}

int ssmt_case_load(ssmt_case * c, const char * op, const char * name) {
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s/%s/%s", SSMOPS_TEST_DATA, op, name);
    snprintf(c->op, sizeof c->op, "%s", op);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->dt_lo = 0.0;
    c->dt_hi = INFINITY;
    char path[1100];
    snprintf(path, sizeof path, "%s/case.json", c->dir);
    char * text = read_text(path);
    if (text == NULL) {
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    char dtype[16];
    json_string(json_value(text, NULL, "dtype"), dtype, sizeof dtype);
    c->dtype = strcmp(dtype, "f16") == 0    ? SSM_DTYPE_F16
               : strcmp(dtype, "bf16") == 0 ? SSM_DTYPE_BF16
               : strcmp(dtype, "f64") == 0  ? SSM_DTYPE_F64
                                            : SSM_DTYPE_F32;
    const char * params = json_value(text, NULL, "params");
    const char * params_end = params != NULL ? strchr(params, '}') : NULL;
    if (params != NULL) {
        const char * v = json_value(params, params_end, "chunk");
        if (v != NULL) c->chunk = strtoll(v, NULL, 10);
        v = json_value(params, params_end, "dt_softplus");
        if (v != NULL) c->dt_softplus = (int32_t)strtol(v, NULL, 10);
        v = json_value(params, params_end, "dt_limit");
        if (v != NULL) {
            char lim[64];
            json_string(v, lim, sizeof lim);
            char * colon = strchr(lim, ':');
            if (colon != NULL) {
                c->has_dt_limit = 1;
                c->dt_lo = strtod(lim, NULL);
                c->dt_hi = strtod(colon + 1, NULL);
            }
        }
        json_string(json_value(params, params_end, "layout"), c->layout, sizeof c->layout);
    }
    free(text);
    return 0;
}

int ssmt_case_has(const ssmt_case * c, const char * tensor) {
    char        path[1200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s.npy", c->dir, tensor);
    return stat(path, &st) == 0;
}

ssmt_host ssmt_case_tensor(const ssmt_case * c, const char * tensor, ssm_dtype dtype) {
    ssmt_host    h;
    ssmnpy_array a;
    char         path[1200], err[256];
    memset(&h, 0, sizeof h);
    snprintf(path, sizeof path, "%s/%s.npy", c->dir, tensor);
    if (ssmnpy_read(path, &a, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return h;
    }
    if (a.ndim > SSM_MAX_DIMS) {
        fprintf(stderr, "%s: %d dims is too many\n", path, (int)a.ndim);
        ssmnpy_free(&a);
        return h;
    }
    const ssm_dtype src_dtype = strcmp(a.dtype, "f2") == 0   ? SSM_DTYPE_F16
                                : strcmp(a.dtype, "f4") == 0 ? SSM_DTYPE_F32
                                : strcmp(a.dtype, "f8") == 0 ? SSM_DTYPE_F64
                                : strcmp(a.dtype, "i4") == 0 ? SSM_DTYPE_I32
                                                             : SSM_DTYPE_I64;
    if (is_float(src_dtype) != is_float(dtype)) {
        fprintf(stderr, "%s: cannot convert npy dtype %s to %s\n", path, a.dtype, ssm_dtype_name(dtype));
        ssmnpy_free(&a);
        return h;
    }
    const ssm_tensor src = ssm_tensor_make(a.data, src_dtype, a.ndim, a.shape);
    h = ssmt_clone(&src, dtype);
    ssmnpy_free(&a);
    if (h.t.data == NULL) fprintf(stderr, "%s: out of memory\n", path);
    return h;
}

void ssmt_case_mamba2_params(const ssmt_case * c, ssm_mamba2_params * p) {
    ssm_mamba2_params_init(p);
    if (c->chunk > 0) p->chunk_size = c->chunk;
    p->dt_softplus = c->dt_softplus;
    p->dt_limit_lo = c->dt_lo;
    p->dt_limit_hi = c->dt_hi;
}

int ssmt_bag_load(ssmt_bag * g, const char * op, const char * name, const char * const * list,
                  ssmt_bag_dtype_fn dtype_of, void * arg) {
    memset(g, 0, sizeof *g);
    if (ssmt_case_load(&g->c, op, name) != 0) {
        TEST_CHECK(0, "cannot load %s/%s", op, name);
        return -1;
    }
    for (int i = 0; list[i] != NULL && g->n < SSMT_BAG_MAX; ++i) {
        const int    want = strncmp(list[i], "want:", 5) == 0;
        const char * file = want ? list[i] + 5 : list[i];
        if (!ssmt_case_has(&g->c, file)) continue;
        snprintf(g->names[g->n], sizeof g->names[0], "%s", list[i]);
        g->h[g->n] = ssmt_case_tensor(&g->c, file, want ? SSM_DTYPE_F64 : dtype_of(&g->c, file, arg));
        ++g->n;
    }
    return 0;
}

ssm_tensor ssmt_bag_get(const ssmt_bag * g, const char * name) {
    for (int i = 0; i < g->n; ++i)
        if (strcmp(g->names[i], name) == 0) return g->h[i].t;
    return ssmt_absent();
}

ssmt_host ssmt_bag_out_like(const ssmt_bag * g, const char * name) {
    char key[60];
    snprintf(key, sizeof key, "want:%s", name);
    const ssm_tensor w = ssmt_bag_get(g, key);
    if (w.data == NULL) return (ssmt_host){0};
    return ssmt_alloc(SSM_DTYPE_F64, w.ndim, w.shape);
}

void ssmt_bag_free(ssmt_bag * g) {
    for (int i = 0; i < g->n; ++i) ssmt_free(&g->h[i]);
}

/* ---- Mamba-2 random problems --------------------------------------------------------- */
void ssmt_mamba2_config_init(ssmt_mamba2_config * cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->batch = 2;
    cfg->seqlen = 40;
    cfg->nheads = 4;
    cfg->headdim = 8;
    cfg->dstate = 8;
    cfg->ngroups = 2;
    cfg->dtype = SSM_DTYPE_F32;
    cfg->param_dtype = SSM_DTYPE_F32;
    cfg->out_dtype = SSM_DTYPE_F32;
}

const char * ssmt_mamba2_layout(ssmt_mamba2_config * cfg, int variant, int32_t segments, const int64_t * lens,
                                int32_t n) {
    if (variant == 1) cfg->seq_segments = segments;
    if (variant == 2) {
        cfg->nseq = n;
        cfg->seqlens = lens;
    }
    return variant == 0 ? "dense" : variant == 1 ? "seq_idx" : "varlen";
}

static double inv_softplus(double y) { return log(expm1(y)); }

/* A 4-D activation tensor, optionally in a padded, time-inner layout. */
static ssmt_host alloc_act(const ssmt_mamba2_config * cfg, ssm_dtype dtype, int32_t ndim, const int64_t * shape,
                           int variant) {
    if (!cfg->strided) return ssmt_alloc(dtype, ndim, shape);
    /* variant 0: padded row-major; variant 1: time axis (dim 1) innermost, padded. */
    static const int32_t t_inner4[4] = {0, 2, 3, 1};
    static const int32_t t_inner3[3] = {0, 2, 1};
    const int32_t *      order = variant == 1 ? (ndim == 4 ? t_inner4 : t_inner3) : NULL;
    return ssmt_alloc_layout(dtype, ndim, shape, order, variant == 1 ? 1 : 3);
}
/* The (batch, S) a problem is laid out with: the config's, or with varlen (nseq > 0) one row
 * holding the nseq sequences end to end. */
static void varlen_rows(int64_t batch, int64_t seqlen, int32_t nseq, const int64_t * seqlens, int64_t * rows,
                        int64_t * S) {
    *rows = batch;
    *S = seqlen;
    if (nseq > 0) {
        *rows = 1;
        *S = 0;
        for (int32_t s = 0; s < nseq; ++s) *S += seqlens[s];
    }
}

/* With varlen (nseq > 0): cu (nseq + 1) of the index dtype = 0, then the running sums of the
 * sequence lengths. Returns 0 when the allocation failed, 1 otherwise. */
static int alloc_cu_seqlens(ssmt_host * cu, int32_t nseq, const int64_t * seqlens, int32_t index_i64) {
    if (nseq <= 0) return 1;
    const int64_t sh_cu[1] = {nseq + 1};
    *cu = ssmt_alloc(index_i64 ? SSM_DTYPE_I64 : SSM_DTYPE_I32, 1, sh_cu);
    if (cu->t.data == NULL) return 0;
    int64_t acc = 0;
    ssmt_set(&cu->t, 0, 0.0);
    for (int32_t s = 0; s < nseq; ++s) {
        acc += seqlens[s];
        ssmt_set(&cu->t, s + 1, (double)acc);
    }
    return 1;
}


int ssmt_mamba2_random_args(ssmt_rng * rng, const ssmt_mamba2_config * cfg, ssmt_mamba2_problem * pr) {
    memset(pr, 0, sizeof *pr);
    int64_t batch, S;
    varlen_rows(cfg->batch, cfg->seqlen, cfg->nseq, cfg->seqlens, &batch, &S);
    if (cfg->nseq > 0) pr->nseq = cfg->nseq;
    const int64_t   H = cfg->nheads, P = cfg->headdim, N = cfg->dstate, G = cfg->ngroups;
    const int64_t   sh_x[4] = {batch, S, H, P}, sh_b[4] = {batch, S, G, N}, sh_dt[3] = {batch, S, H};
    const int64_t   sh_h[1] = {H}, sh_hp[2] = {H, P};
    const int64_t   lead = cfg->nseq > 0 ? cfg->nseq : batch;
    const int64_t   sh_st[4] = {lead, H, P, N};
    const ssm_dtype idx_dtype = cfg->index_i64 ? SSM_DTYPE_I64 : SSM_DTYPE_I32;

    pr->x = alloc_act(cfg, cfg->dtype, 4, sh_x, 0);
    pr->dt = alloc_act(cfg, cfg->dtype, 3, sh_dt, 1);
    pr->a = ssmt_alloc(cfg->param_dtype, 1, sh_h);
    pr->b = alloc_act(cfg, cfg->dtype, 4, sh_b, 1);
    pr->c = alloc_act(cfg, cfg->dtype, 4, sh_b, 0);
    pr->out = alloc_act(cfg, cfg->out_dtype, 4, sh_x, 1);
    int ok = pr->x.t.data && pr->dt.t.data && pr->a.t.data && pr->b.t.data && pr->c.t.data && pr->out.t.data;
    if (cfg->d_mode == 1) pr->d = ssmt_alloc(cfg->param_dtype, 1, sh_h);
    if (cfg->d_mode == 2) pr->d = ssmt_alloc(cfg->param_dtype, 2, sh_hp);
    if (cfg->d_mode != 0) ok = ok && pr->d.t.data;
    if (cfg->has_z) ok = ok && (pr->z = alloc_act(cfg, cfg->dtype, 4, sh_x, 0)).t.data;
    if (cfg->has_dt_bias) ok = ok && (pr->dt_bias = ssmt_alloc(cfg->param_dtype, 1, sh_h)).t.data;
    if (cfg->has_initial) ok = ok && (pr->initial_states = ssmt_alloc(cfg->param_dtype, 4, sh_st)).t.data;
    if (cfg->has_final) ok = ok && (pr->final_states = ssmt_alloc(cfg->out_dtype, 4, sh_st)).t.data;
    if (cfg->seq_segments > 0 && cfg->nseq == 0) {
        const int64_t sh_s[2] = {batch, S};
        ok = ok && (pr->seq_idx = ssmt_alloc(idx_dtype, 2, sh_s)).t.data;
    }
    ok = ok && alloc_cu_seqlens(&pr->cu_seqlens, cfg->nseq, cfg->seqlens, cfg->index_i64);
    if (!ok) {
        ssmt_mamba2_problem_free(pr);
        return -1;
    }

    ssmt_fill_normal(rng, &pr->x.t, 0.0, 1.0);
    ssmt_fill_normal(rng, &pr->b.t, 0.0, 1.0);
    ssmt_fill_normal(rng, &pr->c.t, 0.0, 1.0);
    if (cfg->has_z) ssmt_fill_normal(rng, &pr->z.t, 0.0, 1.0);
    if (cfg->d_mode != 0) ssmt_fill_normal(rng, &pr->d.t, 0.0, 1.0);
    if (cfg->has_initial) ssmt_fill_normal(rng, &pr->initial_states.t, 0.0, 1.0);
    for (int64_t h = 0; h < H; ++h) ssmt_set(&pr->a.t, h, -exp(ssmt_uniform(rng, 0.0, log(16.0))));
    /* dt: processed values in about [1e-3, 0.1] (log-uniform), reached through the bias. */
    for (int64_t h = 0; h < H; ++h) {
        if (!cfg->has_dt_bias) break;
        const double dt0 = exp(ssmt_uniform(rng, log(1e-3), log(0.1)));
        ssmt_set(&pr->dt_bias.t, h, cfg->dt_softplus ? inv_softplus(dt0) : 0.5 * dt0);
    }
    const int64_t ndt = ssmt_numel(&pr->dt.t);
    for (int64_t i = 0; i < ndt; ++i) {
        const int64_t h = i % H;
        const double  bias = cfg->has_dt_bias ? ssmt_get(&pr->dt_bias.t, h) : 0.0;
        const double  target = exp(ssmt_uniform(rng, log(1e-3), log(0.1)));
        double        raw;
        if (cfg->dt_softplus)
            raw = cfg->has_dt_bias ? ssmt_uniform(rng, -1.0, 1.0) : inv_softplus(target);
        else
            raw = target - bias;
        ssmt_set(&pr->dt.t, i, raw);
    }
    if (pr->seq_idx.t.data != NULL) {
        for (int64_t b = 0; b < batch; ++b) {
            int64_t id = b % 2, changes = 0;
            for (int64_t t = 0; t < S; ++t) {
                if (t > 0 && changes < cfg->seq_segments && ssmt_uniform(rng, 0.0, 1.0) < 3.0 / (double)S) {
                    id += ssmt_randint(rng, 1, 2);
                    ++changes;
                }
                ssmt_set(&pr->seq_idx.t, b * S + t, (double)id);
            }
        }
    }

    ssm_mamba2_scan_args * a = &pr->args;
    a->x = pr->x.t;
    a->dt = pr->dt.t;
    a->a = pr->a.t;
    a->b = pr->b.t;
    a->c = pr->c.t;
    a->d = pr->d.t;
    a->z = pr->z.t;
    a->dt_bias = pr->dt_bias.t;
    a->initial_states = pr->initial_states.t;
    a->seq_idx = pr->seq_idx.t;
    a->cu_seqlens = pr->cu_seqlens.t;
    a->out = pr->out.t;
    a->final_states = pr->final_states.t;
    return 0;
}

void ssmt_mamba2_problem_free(ssmt_mamba2_problem * pr) {
    ssmt_host * all[] = {&pr->x,           &pr->dt,         &pr->a,
                         &pr->b,           &pr->c,          &pr->d,
                         &pr->z,           &pr->dt_bias,    &pr->initial_states,
                         &pr->seq_idx,     &pr->cu_seqlens, &pr->out,
                         &pr->final_states};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
    memset(&pr->args, 0, sizeof pr->args);
}

void ssmt_cann_chunk_state_make(ssmt_rng * rng, ssmt_cann_chunk_state * c) {
    const int64_t B = 1, NC = 4, L = 256, H = 128, G = 8, N = 128, P = 64, S = NC * L;
    const int64_t xs[4] = {B, S, H, P}, bs[4] = {B, S, G, N}, tm[4] = {B, NC, L, H}, st[5] = {B, NC, H, N, P};
    c->x = ssmt_alloc(SSM_DTYPE_F16, 4, xs), c->b = ssmt_alloc(SSM_DTYPE_F16, 4, bs);
    c->dt = ssmt_alloc(SSM_DTYPE_F32, 4, tm), c->dacs = ssmt_alloc(SSM_DTYPE_F32, 4, tm);
    c->out = ssmt_alloc(SSM_DTYPE_F32, 5, st), c->ref = ssmt_alloc(SSM_DTYPE_F64, 5, st);
    ssmt_fill_normal(rng, &c->x.t, 0, 0.2), ssmt_fill_normal(rng, &c->b.t, 0, 0.2);
    ssmt_fill_normal(rng, &c->dt.t, 0, 0.2), ssmt_fill_normal(rng, &c->dacs.t, 0, 0.2);
    c->dtv = c->dt.t, c->dav = c->dacs.t, c->outv = c->out.t, c->refv = c->ref.t;
    const int64_t hv[4] = {B, H, NC, L}, hs[4] = {NC * L * H, 1, L * H, H};
    for (int i = 0; i < 4; ++i)
        c->dtv.shape[i] = c->dav.shape[i] = hv[i], c->dtv.strides[i] = c->dav.strides[i] = hs[i];
    const int64_t pv[5] = {B, NC, H, P, N}, ps[5] = {NC * H * N * P, H * N * P, N * P, 1, P};
    for (int i = 0; i < 5; ++i)
        c->outv.shape[i] = c->refv.shape[i] = pv[i], c->outv.strides[i] = c->refv.strides[i] = ps[i];
    ssm_mamba2_params_init(&c->params);
    c->params.chunk_size = L;
    memset(&c->args, 0, sizeof c->args);
    c->args.b = c->b.t, c->args.x = c->x.t, c->args.dt = c->dtv, c->args.da_cumsum = c->dav, c->args.states = c->refv;
}

void ssmt_cann_chunk_state_free(ssmt_cann_chunk_state * c) {
    ssmt_free(&c->x), ssmt_free(&c->b), ssmt_free(&c->dt), ssmt_free(&c->dacs), ssmt_free(&c->out);
    ssmt_free(&c->ref);
}

/* ---- Mamba-3 SISO random problems ---------------------------------------------------- */
void ssmt_mamba3_config_init(ssmt_mamba3_config * cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->batch = 2;
    cfg->seqlen = 40;
    cfg->nheads = 4;
    cfg->nheads_qk = 2;
    cfg->dk = 16;
    cfg->dv = 8;
    cfg->nangles = 4;
    cfg->chunk = 16;
    cfg->dtype = SSM_DTYPE_F32;
    cfg->param_dtype = SSM_DTYPE_F32;
    cfg->out_dtype = SSM_DTYPE_F32;
    cfg->has_d = 1;
    cfg->has_z = 1;
}

void ssmt_mamba3_params(const ssmt_mamba3_config * cfg, ssm_mamba3_params * p) {
    ssm_mamba3_params_init(p);
    if (cfg->chunk > 0) p->chunk_size = cfg->chunk;
}

/* The tensors the Mamba-3 args structs (SISO and MIMO) and the problems holding them name
 * alike, as X-macro lists: X(dst, src, name) for the forward inputs, the forward outputs and the
 * backward's own tensors (dout, dfinal_*, the gradient outputs). */
/* clang-format off */
#define M3_INPUTS(X, dst, src)                                                                                 \
    X(dst, src, q) X(dst, src, k) X(dst, src, v) X(dst, src, adt) X(dst, src, dt) X(dst, src, trap)            \
    X(dst, src, q_bias) X(dst, src, k_bias) X(dst, src, angles) X(dst, src, d) X(dst, src, z)                  \
    X(dst, src, angle_state) X(dst, src, ssm_state) X(dst, src, k_state) X(dst, src, v_state)
#define M3_OUTPUTS(X, dst, src)                                                                                \
    X(dst, src, out) X(dst, src, final_angle_state) X(dst, src, final_ssm_state) X(dst, src, final_k_state)    \
    X(dst, src, final_v_state)
#define M3_BWD_TENSORS(X, dst, src)                                                                            \
    X(dst, src, dout) X(dst, src, dfinal_angle_state) X(dst, src, dfinal_ssm_state)                            \
    X(dst, src, dfinal_k_state) X(dst, src, dfinal_v_state) X(dst, src, dq) X(dst, src, dk) X(dst, src, dv)    \
    X(dst, src, dadt) X(dst, src, ddt) X(dst, src, dtrap) X(dst, src, dq_bias) X(dst, src, dk_bias)            \
    X(dst, src, dangles) X(dst, src, dd) X(dst, src, dz) X(dst, src, dangle_state) X(dst, src, dssm_state)     \
    X(dst, src, dk_state) X(dst, src, dv_state)
/* clang-format on */
/* dst->name = the view of the host src->name; dst->name = src->name. */
#define M3_FROM_HOST(dst, src, name) (dst)->name = (src)->name.t;
#define M3_COPY(dst, src, name) (dst)->name = (src)->name;
/* Forward or step args a from the problem pr: the fields SISO and MIMO share. */
#define M3_SET_SHARED_ARGS(a, pr)       \
    do {                                \
        M3_INPUTS(M3_FROM_HOST, a, pr)  \
        M3_OUTPUTS(M3_FROM_HOST, a, pr) \
    } while (0)
/* Backward args b: the forward inputs from the forward args a, the rest from the backward
 * problem w (the fields SISO and MIMO share). */
#define M3_SET_SHARED_BWD_ARGS(b, a, w)    \
    do {                                   \
        M3_INPUTS(M3_COPY, b, a)           \
        (b)->cu_seqlens = (a)->cu_seqlens; \
        M3_BWD_TENSORS(M3_FROM_HOST, b, w) \
    } while (0)

/* Shapes of the four Mamba-3 state tensors of n rows (sequences or pool slots): angle, ssm,
 * k (k_ndim dims: 3 for SISO, 4 for MIMO) and v. */
typedef struct state_shapes {
    int64_t angle[3], ssm[4], k[4], v[3];
    int32_t k_ndim;
} state_shapes;

/* SISO: angle (n, H, A), ssm (n, H, V, K), k (n, H, K), v (n, H, V). */
static state_shapes siso_state_shapes(const ssmt_mamba3_config * cfg, int64_t n) {
    const int64_t      H = cfg->nheads, K = cfg->dk, V = cfg->dv;
    const state_shapes sh = {{n, H, cfg->nangles}, {n, H, V, K}, {n, H, K, 0}, {n, H, V}, 3};
    return sh;
}

/* The four Mamba-3 state tensors (angle, ssm, k, v) of one problem when `want`, allocated
 * together; filled with N(0,1) when rng is given. Returns 0 when an allocation failed. */
static int alloc_state_set(ssmt_rng * rng, int want, ssm_dtype dtype, const state_shapes * sh, ssmt_host * angle,
                           ssmt_host * ssm, ssmt_host * k, ssmt_host * v) {
    if (!want) return 1;
    *angle = ssmt_alloc(dtype, 3, sh->angle);
    *ssm   = ssmt_alloc(dtype, 4, sh->ssm);
    *k     = ssmt_alloc(dtype, sh->k_ndim, sh->k);
    *v     = ssmt_alloc(dtype, 3, sh->v);
    ssmt_host * all[4] = {angle, ssm, k, v};
    for (int i = 0; i < 4; ++i) {
        if (all[i]->t.data == NULL) return 0;
        if (rng != NULL) ssmt_fill_normal(rng, &all[i]->t, 0.0, 1.0);
    }
    return 1;
}

/* A pool of decode states (or initial states of the MIMO forward): angle U(0, 2π), ssm, k, v
 * N(0, 1). */
static void fill_state_pool(ssmt_rng * rng, const ssmt_host * angle, const ssmt_host * ssm, const ssmt_host * k,
                            const ssmt_host * v) {
    ssmt_fill_uniform(rng, &angle->t, 0.0, 6.283185307179586);
    ssmt_fill_normal(rng, &ssm->t, 0.0, 1.0);
    ssmt_fill_normal(rng, &k->t, 0.0, 1.0);
    ssmt_fill_normal(rng, &v->t, 0.0, 1.0);
}

/* state_batch_indices of a decode problem of B rows: row b takes entry b of a random
 * permutation of the slots, every third row (b % 3 == 2) is padding (−1). Returns 0 when out
 * of memory. */
static int fill_state_batch_indices(ssmt_rng * rng, const ssm_tensor * idx, int64_t B, int64_t slots) {
    int64_t * perm = malloc((size_t)slots * sizeof *perm);
    if (perm == NULL) return 0;
    for (int64_t i = 0; i < slots; ++i) perm[i] = i;
    for (int64_t i = slots - 1; i > 0; --i) {
        const int64_t j = ssmt_randint(rng, 0, i), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    for (int64_t b = 0; b < B; ++b) ssmt_set(idx, b, b % 3 == 2 ? -1.0 : (double)perm[b]);
    free(perm);
    return 1;
}

/* A tensor in the config's layout: contiguous, or (strided) variant 0 = padded row-major,
 * variant 1 = dims 1 and 2 swapped in memory (heads outside time), padded. */
static ssmt_host m3_alloc(const ssmt_mamba3_config * cfg, ssm_dtype dtype, int32_t ndim, const int64_t * shape,
                          int variant) {
    if (!cfg->strided) return ssmt_alloc(dtype, ndim, shape);
    static const int32_t swap4[4] = {0, 2, 1, 3};
    static const int32_t swap3[3] = {0, 2, 1};
    const int32_t *      order = variant == 1 ? (ndim == 4 ? swap4 : ndim == 3 ? swap3 : NULL) : NULL;
    return ssmt_alloc_layout(dtype, ndim, shape, order, variant == 1 ? 1 : 3);
}

/* (B, S, H, A) angles: one (B, S, 1, A) buffer seen with stride 0 over H when broadcast. */
static ssmt_host m3_alloc_angles(const ssmt_mamba3_config * cfg, ssm_dtype dtype, const int64_t * shape) {
    if (!cfg->angles_broadcast) return m3_alloc(cfg, dtype, 4, shape, 0);
    const int64_t one[4] = {shape[0], shape[1], 1, shape[3]};
    ssmt_host     h = ssmt_alloc(dtype, 4, one);
    if (h.t.data != NULL) {
        h.t.shape[2] = shape[2];
        h.t.strides[2] = 0;
    }
    return h;
}

/* Rows of the last dim ~ randn scaled to unit rms (spec §4.3: rms-normalised q and k). */
static void fill_rms_rows(ssmt_rng * rng, const ssm_tensor * t) {
    const int64_t n = ssmt_numel(t), K = t->shape[t->ndim - 1];
    double        row[4096];
    for (int64_t r = 0; K > 0 && r < n / K; ++r) {
        double ss = 0.0;
        for (int64_t c = 0; c < K; ++c) {
            row[c % 4096] = ssmt_normal(rng);
            ss += row[c % 4096] * row[c % 4096];
        }
        const double rms = sqrt(ss / (double)K);
        for (int64_t c = 0; c < K; ++c) ssmt_set(t, r * K + c, row[c % 4096] / (rms > 0.0 ? rms : 1.0));
    }
}

/* dt, adt, trap (same shape, any layout) for the config's regime. */
static void fill_m3_scalars(ssmt_rng * rng, const ssmt_mamba3_config * cfg, const ssm_tensor * dt,
                            const ssm_tensor * adt, const ssm_tensor * trap) {
    const int64_t n = ssmt_numel(dt);
    for (int64_t i = 0; i < n; ++i) {
        double dtv, adtv, trv;
        if (cfg->seed_regime) {
            dtv = 0.05 * ssmt_normal(rng);
            adtv = -ssmt_uniform(rng, 0.0, 0.08);
            trv = ssmt_normal(rng);
        } else {
            dtv = exp(ssmt_uniform(rng, log(1e-3), log(0.1)));
            adtv = -ssmt_uniform(rng, 1.0, 16.0) * ssmt_round_to(cfg->param_dtype, dtv);
            trv = cfg->trap_randn ? ssmt_normal(rng) : ssmt_uniform(rng, 0.0, 1.0);
        }
        ssmt_set(dt, i, dtv);
        ssmt_set(adt, i, adtv);
        ssmt_set(trap, i, trv);
    }
}

/* Biases and d for the config's regime. */
static void fill_m3_params(ssmt_rng * rng, const ssmt_mamba3_config * cfg, const ssm_tensor * q_bias,
                           const ssm_tensor * k_bias, const ssm_tensor * d) {
    const double bstd = cfg->seed_regime ? 0.05 : 1.0;
    ssmt_fill_normal(rng, q_bias, 0.0, bstd);
    ssmt_fill_normal(rng, k_bias, 0.0, bstd);
    if (d != NULL && d->data != NULL) {
        if (cfg->seed_regime)
            ssmt_fill_uniform(rng, d, 0.0, 0.2);
        else
            ssmt_fill_normal(rng, d, 0.0, 1.0);
    }
}

/* The draws of a SISO problem and a SISO step problem `pr` that come first, in this order:
 * q and k (unit-rms rows), v, z, dt / adt / trap, the biases and d. */
#define FILL_SISO_INPUTS(rng, cfg, pr)                                                                    \
    do {                                                                                                  \
        fill_rms_rows((rng), &(pr)->q.t);                                                                 \
        fill_rms_rows((rng), &(pr)->k.t);                                                                 \
        ssmt_fill_normal((rng), &(pr)->v.t, 0.0, 1.0);                                                    \
        if ((cfg)->has_z) ssmt_fill_normal((rng), &(pr)->z.t, 0.0, 1.0);                                  \
        fill_m3_scalars((rng), (cfg), &(pr)->dt.t, &(pr)->adt.t, &(pr)->trap.t);                          \
        fill_m3_params((rng), (cfg), &(pr)->q_bias.t, &(pr)->k_bias.t, (cfg)->has_d ? &(pr)->d.t : NULL); \
    } while (0)

int ssmt_mamba3_random_args(ssmt_rng * rng, const ssmt_mamba3_config * cfg, ssmt_mamba3_problem * pr) {
    memset(pr, 0, sizeof *pr);
    int64_t batch, S;
    varlen_rows(cfg->batch, cfg->seqlen, cfg->nseq, cfg->seqlens, &batch, &S);
    pr->nseq = cfg->nseq > 0 ? cfg->nseq : batch;
    const int64_t H = cfg->nheads, Hq = cfg->nheads_qk, K = cfg->dk, V = cfg->dv, A = cfg->nangles, NS = pr->nseq;
    const int64_t sh_q[4] = {batch, S, Hq, K}, sh_v[4] = {batch, S, H, V}, sh_s[3] = {batch, H, S};
    const int64_t sh_a[4] = {batch, S, H, A}, sh_b[2] = {H, K}, sh_h[1] = {H};
    const state_shapes sh_st = siso_state_shapes(cfg, NS);
    const ssm_dtype dt_ = cfg->dtype, pd = cfg->param_dtype, od = cfg->out_dtype;

    pr->q = m3_alloc(cfg, dt_, 4, sh_q, 0);
    pr->k = m3_alloc(cfg, dt_, 4, sh_q, 1);
    pr->v = m3_alloc(cfg, dt_, 4, sh_v, 1);
    pr->adt = m3_alloc(cfg, pd, 3, sh_s, 1);
    pr->dt = m3_alloc(cfg, pd, 3, sh_s, 0);
    pr->trap = m3_alloc(cfg, dt_, 3, sh_s, 1);
    pr->q_bias = ssmt_alloc(pd, 2, sh_b);
    pr->k_bias = ssmt_alloc(pd, 2, sh_b);
    const ssm_dtype at_ = cfg->angles_f32 ? SSM_DTYPE_F32 : dt_;
    pr->angles = m3_alloc_angles(cfg, at_, sh_a);
    pr->theta = m3_alloc_angles(cfg, at_, sh_a);
    pr->out = m3_alloc(cfg, od, 4, sh_v, 0);
    int ok = pr->q.t.data && pr->k.t.data && pr->v.t.data && pr->adt.t.data && pr->dt.t.data && pr->trap.t.data &&
             pr->q_bias.t.data && pr->k_bias.t.data && pr->angles.t.data && pr->theta.t.data && pr->out.t.data;
    if (cfg->has_d) ok = ok && (pr->d = ssmt_alloc(pd, 1, sh_h)).t.data;
    if (cfg->has_z) ok = ok && (pr->z = m3_alloc(cfg, dt_, 4, sh_v, 0)).t.data;
    ok = ok && alloc_state_set(NULL, cfg->has_states, pd, &sh_st, &pr->angle_state, &pr->ssm_state, &pr->k_state,
                               &pr->v_state);
    ok = ok && alloc_state_set(NULL, cfg->has_final, od, &sh_st, &pr->final_angle_state, &pr->final_ssm_state,
                               &pr->final_k_state, &pr->final_v_state);
    ok = ok && alloc_cu_seqlens(&pr->cu_seqlens, cfg->nseq, cfg->seqlens, cfg->index_i64);
    if (!ok) {
        ssmt_mamba3_problem_free(pr);
        return -1;
    }

    FILL_SISO_INPUTS(rng, cfg, pr);
    if (cfg->seed_regime) {
        ssmt_fill_normal(rng, &pr->angles.t, 0.0, 0.1);
        ssmt_fill_uniform(rng, &pr->theta.t, 0.0, 0.25);
    } else {
        ssmt_fill_normal(rng, &pr->angles.t, 0.0, 1.0);
        ssmt_fill_uniform(rng, &pr->theta.t, 0.0, 6.283185307179586);
    }
    if (cfg->has_states) {
        ssmt_fill_normal(rng, &pr->angle_state.t, 0.0, 1.0);
        ssmt_fill_normal(rng, &pr->ssm_state.t, 0.0, 1.0);
        ssmt_fill_normal(rng, &pr->k_state.t, 0.0, 1.0);
        ssmt_fill_normal(rng, &pr->v_state.t, 0.0, 1.0);
    }

    ssm_mamba3_siso_args * a = &pr->args;
    M3_SET_SHARED_ARGS(a, pr);
    a->cu_seqlens = pr->cu_seqlens.t;

    ssm_mamba3_siso_fwd_args * f = &pr->fwd_args;
    f->q = a->q;
    f->k = a->k;
    f->v = a->v;
    f->adt = a->adt;
    f->dt = a->dt;
    f->trap = a->trap;
    f->q_bias = a->q_bias;
    f->k_bias = a->k_bias;
    f->angles = pr->theta.t;
    f->d = a->d;
    f->z = a->z;
    f->ssm_state = a->ssm_state;
    f->k_state = a->k_state;
    f->v_state = a->v_state;
    f->cu_seqlens = a->cu_seqlens;
    f->out = a->out;
    f->final_ssm_state = a->final_ssm_state;
    f->final_k_state = a->final_k_state;
    f->final_v_state = a->final_v_state;

    ssm_mamba3_angle_cumsum_args * g = &pr->angle_args;
    g->angles = a->angles;
    g->dt = a->dt;
    g->angle_state = a->angle_state;
    g->cu_seqlens = a->cu_seqlens;
    g->angles_cumsum = pr->theta.t;
    g->final_angle_state = a->final_angle_state;
    if (cfg->angles_broadcast) {
        /* theta is a per-head output of the angle cumsum; a stride-0 output is invalid */
        memset(&g->angles_cumsum, 0, sizeof g->angles_cumsum);
    }
    return 0;
}

int64_t ssmt_mamba3_chunk_rows(const ssmt_mamba3_config * cfg, int64_t chunk) {
    if (cfg->nseq == 0) return cfg->batch * ((cfg->seqlen + chunk - 1) / chunk);
    int64_t rows = 0;
    for (int32_t i = 0; i < cfg->nseq; ++i) rows += (cfg->seqlens[i] + chunk - 1) / chunk;
    return rows;
}

ssmt_host ssmt_mamba3_chunk_states(const ssmt_mamba3_config * cfg, int64_t chunk, ssm_dtype dtype, int strided) {
    const int64_t        shape[4] = {ssmt_mamba3_chunk_rows(cfg, chunk), cfg->nheads, cfg->dv, cfg->dk};
    static const int32_t order[4] = {0, 1, 3, 2};
    ssmt_host h = strided ? ssmt_alloc_layout(dtype, 4, shape, order, 2) : ssmt_alloc(dtype, 4, shape);
    if (h.t.data != NULL) ssmt_poison(&h.t);
    return h;
}

void ssmt_mamba3_problem_free(ssmt_mamba3_problem * pr) {
    ssmt_host * all[] = {&pr->q,           &pr->k,           &pr->v,
                         &pr->adt,         &pr->dt,          &pr->trap,
                         &pr->q_bias,      &pr->k_bias,      &pr->angles,
                         &pr->theta,       &pr->d,           &pr->z,
                         &pr->angle_state, &pr->ssm_state,   &pr->k_state,
                         &pr->v_state,     &pr->cu_seqlens,  &pr->out,
                         &pr->final_angle_state, &pr->final_ssm_state, &pr->final_k_state,
                         &pr->final_v_state};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
    memset(&pr->args, 0, sizeof pr->args);
    memset(&pr->fwd_args, 0, sizeof pr->fwd_args);
    memset(&pr->angle_args, 0, sizeof pr->angle_args);
}

int ssmt_mamba3_bwd_alloc(ssmt_rng * rng, const ssmt_mamba3_config * cfg, const ssmt_mamba3_problem * pr,
                          int has_dfinal, ssmt_mamba3_bwd_problem * w) {
    memset(w, 0, sizeof *w);
    const ssm_mamba3_siso_args * a = &pr->args;
    const int64_t                H = cfg->nheads, K = cfg->dk;
    const state_shapes           sh_st = siso_state_shapes(cfg, pr->nseq);
    const int64_t                sh_b[2] = {H, K}, sh_h[1] = {H};
    const ssm_dtype od = cfg->out_dtype;
    ssmt_mamba3_config full = *cfg; /* gradient outputs never broadcast */
    full.angles_broadcast = 0;
    w->dout = m3_alloc(cfg, cfg->dtype, 4, a->v.shape, 1);
    w->dq = m3_alloc(cfg, od, 4, a->q.shape, 0);
    w->dk = m3_alloc(cfg, od, 4, a->q.shape, 1);
    w->dv = m3_alloc(cfg, od, 4, a->v.shape, 1);
    w->dadt = m3_alloc(cfg, od, 3, a->adt.shape, 1);
    w->ddt = m3_alloc(cfg, od, 3, a->adt.shape, 0);
    w->dtrap = m3_alloc(cfg, od, 3, a->adt.shape, 1);
    w->dq_bias = ssmt_alloc(od, 2, sh_b);
    w->dk_bias = ssmt_alloc(od, 2, sh_b);
    w->dangles = m3_alloc_angles(&full, od, a->angles.shape);
    int ok = w->dout.t.data && w->dq.t.data && w->dk.t.data && w->dv.t.data && w->dadt.t.data && w->ddt.t.data &&
             w->dtrap.t.data && w->dq_bias.t.data && w->dk_bias.t.data && w->dangles.t.data;
    if (cfg->has_d) ok = ok && (w->dd = ssmt_alloc(od, 1, sh_h)).t.data;
    if (cfg->has_z) ok = ok && (w->dz = m3_alloc(cfg, od, 4, a->v.shape, 0)).t.data;
    ok = ok && alloc_state_set(NULL, cfg->has_states, od, &sh_st, &w->dangle_state, &w->dssm_state, &w->dk_state,
                               &w->dv_state);
    if (ok) ssmt_fill_normal(rng, &w->dout.t, 0.0, 1.0);
    ok = ok && alloc_state_set(rng, has_dfinal, SSM_DTYPE_F32, &sh_st, &w->dfinal_angle_state, &w->dfinal_ssm_state,
                               &w->dfinal_k_state, &w->dfinal_v_state);
    if (!ok) {
        ssmt_mamba3_bwd_free(w);
        return -1;
    }
    ssm_mamba3_siso_bwd_args * b = &w->args;
    M3_SET_SHARED_BWD_ARGS(b, a, w);
    return 0;
}

void ssmt_mamba3_bwd_free(ssmt_mamba3_bwd_problem * w) {
    ssmt_host * all[] = {&w->dout,         &w->dfinal_angle_state, &w->dfinal_ssm_state, &w->dfinal_k_state,
                         &w->dfinal_v_state, &w->dq,              &w->dk,               &w->dv,
                         &w->dadt,         &w->ddt,               &w->dtrap,            &w->dq_bias,
                         &w->dk_bias,      &w->dangles,           &w->dd,               &w->dz,
                         &w->dangle_state, &w->dssm_state,        &w->dk_state,         &w->dv_state};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
    memset(&w->args, 0, sizeof w->args);
}

int ssmt_mamba3_random_step(ssmt_rng * rng, const ssmt_mamba3_config * cfg, int64_t slots, int with_indices,
                            ssmt_mamba3_step_problem * pr) {
    memset(pr, 0, sizeof *pr);
    const int64_t B = cfg->batch, H = cfg->nheads, Hq = cfg->nheads_qk, K = cfg->dk, V = cfg->dv, A = cfg->nangles;
    if ((with_indices && slots < B) || (!with_indices && slots != B)) return -1;
    pr->slots = slots;
    const int64_t sh_q[3] = {B, Hq, K}, sh_v[3] = {B, H, V}, sh_s[2] = {B, H}, sh_a[3] = {B, H, A};
    const int64_t sh_b[2] = {H, K}, sh_h[1] = {H}, sh_i[1] = {B};
    const state_shapes sh_st = siso_state_shapes(cfg, slots);
    const ssm_dtype dt_ = cfg->dtype, pd = cfg->param_dtype, od = cfg->out_dtype;
    pr->q = ssmt_alloc(dt_, 3, sh_q);
    pr->k = ssmt_alloc(dt_, 3, sh_q);
    pr->v = ssmt_alloc(dt_, 3, sh_v);
    pr->adt = ssmt_alloc(pd, 2, sh_s);
    pr->dt = ssmt_alloc(pd, 2, sh_s);
    pr->trap = ssmt_alloc(dt_, 2, sh_s);
    pr->q_bias = ssmt_alloc(pd, 2, sh_b);
    pr->k_bias = ssmt_alloc(pd, 2, sh_b);
    pr->angles = ssmt_alloc(dt_, 3, sh_a);
    pr->out = ssmt_alloc(od, 3, sh_v);
    int ok = pr->q.t.data && pr->k.t.data && pr->v.t.data && pr->adt.t.data && pr->dt.t.data && pr->trap.t.data &&
             pr->q_bias.t.data && pr->k_bias.t.data && pr->angles.t.data && pr->out.t.data;
    ok = ok && alloc_state_set(NULL, 1, pd, &sh_st, &pr->angle_state, &pr->ssm_state, &pr->k_state, &pr->v_state);
    ok = ok && alloc_state_set(NULL, 1, od, &sh_st, &pr->final_angle_state, &pr->final_ssm_state, &pr->final_k_state,
                               &pr->final_v_state);
    if (cfg->has_d) ok = ok && (pr->d = ssmt_alloc(pd, 1, sh_h)).t.data;
    if (cfg->has_z) ok = ok && (pr->z = ssmt_alloc(dt_, 3, sh_v)).t.data;
    if (with_indices)
        ok = ok && (pr->state_batch_indices = ssmt_alloc(cfg->index_i64 ? SSM_DTYPE_I64 : SSM_DTYPE_I32, 1, sh_i)).t.data;
    if (!ok) {
        ssmt_mamba3_step_free(pr);
        return -1;
    }
    FILL_SISO_INPUTS(rng, cfg, pr);
    ssmt_fill_normal(rng, &pr->angles.t, 0.0, cfg->seed_regime ? 0.1 : 1.0);
    fill_state_pool(rng, &pr->angle_state, &pr->ssm_state, &pr->k_state, &pr->v_state);
    if (with_indices && !fill_state_batch_indices(rng, &pr->state_batch_indices.t, B, slots)) {
        ssmt_mamba3_step_free(pr);
        return -1;
    }
    ssm_mamba3_siso_step_args * a = &pr->args;
    M3_SET_SHARED_ARGS(a, pr);
    a->state_batch_indices = pr->state_batch_indices.t;
    return 0;
}

void ssmt_mamba3_step_free(ssmt_mamba3_step_problem * pr) {
    ssmt_host * all[] = {&pr->q,           &pr->k,           &pr->v,          &pr->adt,
                         &pr->dt,          &pr->trap,        &pr->q_bias,     &pr->k_bias,
                         &pr->angles,      &pr->d,           &pr->z,          &pr->angle_state,
                         &pr->ssm_state,   &pr->k_state,     &pr->v_state,    &pr->state_batch_indices,
                         &pr->out,         &pr->final_angle_state, &pr->final_ssm_state, &pr->final_k_state,
                         &pr->final_v_state};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
    memset(&pr->args, 0, sizeof pr->args);
}

/* ---- Mamba-3 MIMO random problems --------------------------------------------------------- */
void ssmt_mimo_config_init(ssmt_mimo_config * cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->batch = 2;
    cfg->seqlen = 20;
    cfg->nheads = 4;
    cfg->ngroups = 2;
    cfg->rank = 2;
    cfg->dstate = 16;
    cfg->headdim = 8;
    cfg->chunk = 8;
    cfg->div = 4;
    cfg->dtype = SSM_DTYPE_F32;
    cfg->param_dtype = SSM_DTYPE_F32;
    cfg->out_dtype = SSM_DTYPE_F32;
    cfg->reduce_o = 1;
    cfg->has_z = 1;
    cfg->has_d = 1;
}

void ssmt_mimo_params(const ssmt_mimo_config * cfg, ssm_mamba3_mimo_params * p) {
    ssm_mamba3_mimo_params_init(p);
    if (cfg->chunk > 0) p->chunk_size = cfg->chunk;
    if (cfg->div > 0) p->rotary_dim_divisor = cfg->div;
    p->fuse_pregate_norm = cfg->fused ? 1 : 0;
}

/* A per-token tensor in the config's layout: contiguous, or (strided) variant 0 = padded
 * row-major, variant 1 = dims 1 and 2 swapped in memory, padded. */
static ssmt_host mimo_alloc(const ssmt_mimo_config * cfg, ssm_dtype dtype, int32_t ndim, const int64_t * shape,
                            int variant) {
    if (!cfg->strided) return ssmt_alloc(dtype, ndim, shape);
    static const int32_t swap5[5] = {0, 2, 1, 3, 4};
    static const int32_t swap4[4] = {0, 2, 1, 3};
    static const int32_t swap3[3] = {0, 2, 1};
    const int32_t * order = NULL;
    if (variant == 1) order = ndim == 5 ? swap5 : ndim == 4 ? swap4 : ndim == 3 ? swap3 : NULL;
    return ssmt_alloc_layout(dtype, ndim, shape, order, variant == 1 ? 1 : 3);
}

static double softplus_(double x) { return x > 20.0 ? x : log1p(exp(x)); }

/* t = N(0,1)·scale in every element. */
static void fill_scaled_normal(ssmt_rng * rng, const ssm_tensor * t, double scale) {
    ssmt_fill_normal(rng, t, 0.0, scale);
}

/* MIMO: angle (n, H, N/div), ssm (n, H, P, N), k (n, R, H, N), v (n, H, P). */
static state_shapes mimo_state_shapes(const ssmt_mimo_config * cfg, int64_t n) {
    const int64_t      H = cfg->nheads, R = cfg->rank, N = cfg->dstate, P = cfg->headdim;
    const int64_t      A = N / (cfg->div > 0 ? cfg->div : 4);
    const state_shapes sh = {{n, H, A}, {n, H, P, N}, {n, R, H, N}, {n, H, P}, 4};
    return sh;
}

/* dt = softplus(−3 + N(0,1)), adt = −dt·U(0,1), trap ~ U(0,1) (upstream's test inputs). */
static void fill_mimo_scalars(ssmt_rng * rng, const ssmt_mimo_config * cfg, const ssm_tensor * dt,
                              const ssm_tensor * adt, const ssm_tensor * trap) {
    const int64_t n = ssmt_numel(dt);
    for (int64_t i = 0; i < n; ++i) {
        const double dtv = ssmt_round_to(cfg->param_dtype, softplus_(-3.0 + ssmt_normal(rng)));
        ssmt_set(dt, i, dtv);
        ssmt_set(adt, i, -dtv * ssmt_uniform(rng, 0.0, 1.0));
        ssmt_set(trap, i, ssmt_uniform(rng, 0.0, 1.0));
    }
}

/* The per-head parameters of a MIMO config (shared by forward and step). */
static int alloc_mimo_params(const ssmt_mimo_config * cfg, ssmt_host * q_bias, ssmt_host * k_bias, ssmt_host * mimo_v,
                             ssmt_host * mimo_z, ssmt_host * mimo_o, ssmt_host * d, ssmt_host * w) {
    const int64_t H = cfg->nheads, R = cfg->rank, N = cfg->dstate, P = cfg->headdim;
    const int64_t sh_n[3] = {H, R, N}, sh_p[3] = {H, R, P}, sh_h[1] = {H}, sh_w[2] = {H, P};
    const ssm_dtype pd = cfg->param_dtype;
    *q_bias = ssmt_alloc(pd, 3, sh_n);
    *k_bias = ssmt_alloc(pd, 3, sh_n);
    *mimo_v = ssmt_alloc(pd, 3, sh_p);
    int ok = q_bias->t.data && k_bias->t.data && mimo_v->t.data;
    if (cfg->has_z) ok = ok && (*mimo_z = ssmt_alloc(pd, 3, sh_p)).t.data;
    if (cfg->reduce_o) ok = ok && (*mimo_o = ssmt_alloc(pd, 3, sh_p)).t.data;
    if (cfg->has_d) ok = ok && (*d = ssmt_alloc(pd, 1, sh_h)).t.data;
    if (cfg->fused && cfg->has_norm_weight) ok = ok && (*w = ssmt_alloc(pd, 2, sh_w)).t.data;
    return ok;
}

/* Upstream's test distributions for the parameters (spec §5.5). */
static void fill_mimo_params(ssmt_rng * rng, const ssmt_mimo_config * cfg, ssmt_host * q_bias, ssmt_host * k_bias,
                             ssmt_host * mimo_v, ssmt_host * mimo_z, ssmt_host * mimo_o, ssmt_host * d,
                             ssmt_host * w) {
    const double inv_r = 1.0 / (double)cfg->rank;
    fill_scaled_normal(rng, &q_bias->t, 1.0);
    fill_scaled_normal(rng, &k_bias->t, 1.0);
    fill_scaled_normal(rng, &mimo_v->t, inv_r);
    if (mimo_z->t.data) fill_scaled_normal(rng, &mimo_z->t, 1.0);
    if (mimo_o->t.data) fill_scaled_normal(rng, &mimo_o->t, inv_r);
    if (d->t.data) fill_scaled_normal(rng, &d->t, 1.0);
    if (w->t.data) ssmt_fill_normal(rng, &w->t, 1.0, 0.1);
}

/* The draws of a MIMO problem and a MIMO step problem `pr` that come first, in this order:
 * q, k, v, z, dt / adt / trap, angles, the per-head parameters. */
#define FILL_MIMO_INPUTS(rng, cfg, pr)                                                                            \
    do {                                                                                                          \
        ssmt_fill_normal((rng), &(pr)->q.t, 0.0, 1.0);                                                            \
        ssmt_fill_normal((rng), &(pr)->k.t, 0.0, 1.0);                                                            \
        ssmt_fill_normal((rng), &(pr)->v.t, 0.0, 1.0);                                                            \
        if ((cfg)->has_z) ssmt_fill_normal((rng), &(pr)->z.t, 0.0, 1.0);                                          \
        fill_mimo_scalars((rng), (cfg), &(pr)->dt.t, &(pr)->adt.t, &(pr)->trap.t);                                \
        ssmt_fill_uniform((rng), &(pr)->angles.t, 0.0, 1.0);                                                      \
        fill_mimo_params((rng), (cfg), &(pr)->q_bias, &(pr)->k_bias, &(pr)->mimo_v, &(pr)->mimo_z, &(pr)->mimo_o, \
                         &(pr)->d, &(pr)->norm_weight);                                                           \
    } while (0)

int ssmt_mimo_random_args(ssmt_rng * rng, const ssmt_mimo_config * cfg, ssmt_mimo_problem * pr) {
    memset(pr, 0, sizeof *pr);
    ssmt_mimo_params(cfg, &pr->params);
    int64_t batch, S;
    varlen_rows(cfg->batch, cfg->seqlen, cfg->nseq, cfg->seqlens, &batch, &S);
    pr->nseq = cfg->nseq > 0 ? cfg->nseq : batch;
    const int64_t H = cfg->nheads, G = cfg->ngroups, R = cfg->rank, N = cfg->dstate, P = cfg->headdim;
    const int64_t A = N / (cfg->div > 0 ? cfg->div : 4);
    const int64_t sh_q[5] = {batch, S, R, G, N}, sh_v[4] = {batch, S, H, P}, sh_s[3] = {batch, H, S};
    const int64_t sh_a[4] = {batch, S, H, A}, sh_raw[5] = {batch, S, R, H, P};
    const state_shapes sh_st = mimo_state_shapes(cfg, pr->nseq);
    const ssm_dtype act = cfg->dtype, pd = cfg->param_dtype, od = cfg->out_dtype;

    pr->q = mimo_alloc(cfg, act, 5, sh_q, 0);
    pr->k = mimo_alloc(cfg, act, 5, sh_q, 1);
    pr->v = mimo_alloc(cfg, act, 4, sh_v, 1);
    pr->adt = mimo_alloc(cfg, pd, 3, sh_s, 1);
    pr->dt = mimo_alloc(cfg, pd, 3, sh_s, 0);
    pr->trap = mimo_alloc(cfg, act, 3, sh_s, 1);
    pr->angles = mimo_alloc(cfg, pd, 4, sh_a, 0);
    pr->out = cfg->reduce_o ? mimo_alloc(cfg, od, 4, sh_v, 0) : mimo_alloc(cfg, od, 5, sh_raw, 1);
    int ok = pr->q.t.data && pr->k.t.data && pr->v.t.data && pr->adt.t.data && pr->dt.t.data && pr->trap.t.data &&
             pr->angles.t.data && pr->out.t.data;
    ok = ok && alloc_mimo_params(cfg, &pr->q_bias, &pr->k_bias, &pr->mimo_v, &pr->mimo_z, &pr->mimo_o, &pr->d,
                                 &pr->norm_weight);
    if (cfg->has_z) ok = ok && (pr->z = mimo_alloc(cfg, act, 4, sh_v, 0)).t.data;
    ok = ok && alloc_state_set(NULL, cfg->has_states, pd, &sh_st, &pr->angle_state, &pr->ssm_state, &pr->k_state,
                               &pr->v_state);
    ok = ok && alloc_state_set(NULL, cfg->has_final, od, &sh_st, &pr->final_angle_state, &pr->final_ssm_state,
                               &pr->final_k_state, &pr->final_v_state);
    ok = ok && alloc_cu_seqlens(&pr->cu_seqlens, cfg->nseq, cfg->seqlens, cfg->index_i64);
    if (!ok) {
        ssmt_mimo_problem_free(pr);
        return -1;
    }

    FILL_MIMO_INPUTS(rng, cfg, pr);
    if (cfg->has_states) fill_state_pool(rng, &pr->angle_state, &pr->ssm_state, &pr->k_state, &pr->v_state);

    ssm_mamba3_mimo_args * a = &pr->args;
    M3_SET_SHARED_ARGS(a, pr);
    a->mimo_v = pr->mimo_v.t;
    a->mimo_z = pr->mimo_z.t;
    a->mimo_o = pr->mimo_o.t;
    a->outproj_norm_weight = pr->norm_weight.t;
    a->cu_seqlens = pr->cu_seqlens.t;
    return 0;
}

void ssmt_mimo_problem_free(ssmt_mimo_problem * pr) {
    ssmt_host * all[] = {&pr->q,           &pr->k,          &pr->v,           &pr->z,
                         &pr->adt,         &pr->dt,         &pr->trap,        &pr->q_bias,
                         &pr->k_bias,      &pr->mimo_v,     &pr->mimo_z,      &pr->mimo_o,
                         &pr->angles,      &pr->d,          &pr->norm_weight, &pr->angle_state,
                         &pr->ssm_state,   &pr->k_state,    &pr->v_state,     &pr->cu_seqlens,
                         &pr->out,         &pr->final_angle_state, &pr->final_ssm_state,
                         &pr->final_k_state, &pr->final_v_state};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
    memset(&pr->args, 0, sizeof pr->args);
}

int ssmt_mimo_bwd_alloc(ssmt_rng * rng, const ssmt_mimo_config * cfg, const ssmt_mimo_problem * pr, int has_dfinal,
                        ssmt_mimo_bwd_problem * w) {
    memset(w, 0, sizeof *w);
    const ssm_mamba3_mimo_args * a = &pr->args;
    const int64_t H = cfg->nheads, R = cfg->rank, N = cfg->dstate, P = cfg->headdim;
    const state_shapes sh_st = mimo_state_shapes(cfg, pr->nseq);
    const int64_t sh_n[3] = {H, R, N}, sh_p[3] = {H, R, P}, sh_h[1] = {H}, sh_w[2] = {H, P};
    const ssm_dtype od = cfg->out_dtype, pd = cfg->param_dtype;
    w->dout = mimo_alloc(cfg, cfg->dtype, a->out.ndim, a->out.shape, 1);
    w->dq = mimo_alloc(cfg, od, 5, a->q.shape, 0);
    w->dk = mimo_alloc(cfg, od, 5, a->q.shape, 1);
    w->dv = mimo_alloc(cfg, od, 4, a->v.shape, 1);
    w->dq_bias = ssmt_alloc(od, 3, sh_n);
    w->dk_bias = ssmt_alloc(od, 3, sh_n);
    w->dmimo_v = ssmt_alloc(od, 3, sh_p);
    w->dadt = mimo_alloc(cfg, od, 3, a->adt.shape, 0);
    w->ddt = mimo_alloc(cfg, od, 3, a->adt.shape, 1);
    w->dtrap = mimo_alloc(cfg, od, 3, a->adt.shape, 0);
    w->dangles = mimo_alloc(cfg, od, 4, a->angles.shape, 1);
    int ok = w->dout.t.data && w->dq.t.data && w->dk.t.data && w->dv.t.data && w->dq_bias.t.data &&
             w->dk_bias.t.data && w->dmimo_v.t.data && w->dadt.t.data && w->ddt.t.data && w->dtrap.t.data &&
             w->dangles.t.data;
    if (cfg->has_z) {
        ok = ok && (w->dz = mimo_alloc(cfg, od, 4, a->v.shape, 0)).t.data;
        ok = ok && (w->dmimo_z = ssmt_alloc(od, 3, sh_p)).t.data;
    }
    if (cfg->reduce_o) ok = ok && (w->dmimo_o = ssmt_alloc(od, 3, sh_p)).t.data;
    if (cfg->has_d) ok = ok && (w->dd = ssmt_alloc(od, 1, sh_h)).t.data;
    if (cfg->fused) ok = ok && (w->doutproj_norm_weight = ssmt_alloc(od, 2, sh_w)).t.data;
    ok = ok && alloc_state_set(NULL, cfg->has_states, od, &sh_st, &w->dangle_state, &w->dssm_state, &w->dk_state,
                               &w->dv_state);
    if (ok) ssmt_fill_normal(rng, &w->dout.t, 0.0, 1.0);
    ok = ok && alloc_state_set(rng, has_dfinal, pd, &sh_st, &w->dfinal_angle_state, &w->dfinal_ssm_state,
                               &w->dfinal_k_state, &w->dfinal_v_state);
    if (!ok) {
        ssmt_mimo_bwd_free(w);
        return -1;
    }
    ssm_mamba3_mimo_bwd_args * b = &w->args;
    M3_SET_SHARED_BWD_ARGS(b, a, w);
    b->mimo_v = a->mimo_v;
    b->mimo_z = a->mimo_z;
    b->mimo_o = a->mimo_o;
    b->outproj_norm_weight = a->outproj_norm_weight;
    b->dmimo_v = w->dmimo_v.t;
    b->dmimo_z = w->dmimo_z.t;
    b->dmimo_o = w->dmimo_o.t;
    b->doutproj_norm_weight = w->doutproj_norm_weight.t;
    return 0;
}

void ssmt_mimo_bwd_free(ssmt_mimo_bwd_problem * w) {
    ssmt_host * all[] = {&w->dout,    &w->dfinal_angle_state, &w->dfinal_ssm_state, &w->dfinal_k_state,
                         &w->dfinal_v_state, &w->dq,   &w->dk,       &w->dv,      &w->dz,
                         &w->dq_bias, &w->dk_bias, &w->dmimo_v,  &w->dmimo_z, &w->dmimo_o, &w->dd,
                         &w->dadt,    &w->ddt,     &w->dtrap,    &w->dangles, &w->doutproj_norm_weight,
                         &w->dangle_state, &w->dssm_state, &w->dk_state, &w->dv_state};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
    memset(&w->args, 0, sizeof w->args);
}

/* da_cs (inclusive in-chunk prefix), da_cs_rev (exclusive in-chunk suffix) and segsum
 * [i > j: Σ_{m=j+1..i} a] of a dense row (spec §2.4), in float64 from adt; a = 0 past S. */
static void mimo_decays_from_adt(const ssmt_mimo_bwd_fwd_problem * pr, int64_t B, int64_t H, int64_t S, int64_t C,
                                 int64_t nc) {
    double * a = malloc((size_t)(nc * C) * sizeof(double));
    if (a == NULL) return;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            for (int64_t t = 0; t < nc * C; ++t) a[t] = t < S ? ssmt_get(&pr->adt.t, (b * H + h) * S + t) : 0.0;
            for (int64_t c = 0; c < nc; ++c) {
                double acc = 0.0;
                for (int64_t i = 0; i < C; ++i) {
                    acc += a[c * C + i];
                    if (c * C + i < S) ssmt_set(&pr->da_cs.t, (b * H + h) * S + c * C + i, acc);
                }
                acc = 0.0;
                for (int64_t i = C - 1; i >= 0; --i) {
                    if (c * C + i < S) ssmt_set(&pr->da_cs_rev.t, (b * H + h) * S + c * C + i, acc);
                    acc += a[c * C + i];
                }
                for (int64_t i = 0; i < C; ++i) {
                    double sum = 0.0;
                    const int64_t base = (((b * H + h) * nc + c) * C + i) * C;
                    for (int64_t j = C - 1; j >= 0; --j) ssmt_set(&pr->segsum.t, base + j, 0.0);
                    for (int64_t j = i - 1; j >= 0; --j) {
                        sum += a[c * C + j + 1];
                        ssmt_set(&pr->segsum.t, base + j, sum);
                    }
                }
            }
        }
    free(a);
}

int ssmt_mimo_random_bwd_fwd(ssmt_rng * rng, const ssmt_mimo_config * cfg, ssmt_mimo_bwd_fwd_problem * pr) {
    memset(pr, 0, sizeof *pr);
    ssmt_mimo_params(cfg, &pr->params);
    pr->params.fuse_pregate_norm = 0;
    const int64_t B = cfg->batch, S = cfg->seqlen, H = cfg->nheads, G = cfg->ngroups, R = cfg->rank;
    const int64_t N = cfg->dstate, P = cfg->headdim, C = cfg->chunk, A = N / (cfg->div > 0 ? cfg->div : 4);
    const int64_t nc = (S + C - 1) / C;
    pr->nchunks = nc;
    const int64_t sh_q[5] = {B, S, R, G, N}, sh_v[4] = {B, S, H, P}, sh_s[3] = {B, H, S}, sh_a[4] = {B, S, H, A};
    const int64_t sh_raw[5] = {B, S, R, H, P}, sh_seg[5] = {B, H, nc, C, C}, sh_st[5] = {B, H, nc, N, P};
    const int64_t sh_qk[5] = {B, H, S, R, R}, sh_brp[4] = {B, H, R, P};
    const ssm_dtype act = cfg->dtype, pd = cfg->param_dtype, od = cfg->out_dtype;
    ssmt_host       unused_w = {0};
    pr->dout = cfg->reduce_o ? mimo_alloc(cfg, act, 4, sh_v, 1) : mimo_alloc(cfg, act, 5, sh_raw, 1);
    pr->q = mimo_alloc(cfg, act, 5, sh_q, 0);
    pr->k = mimo_alloc(cfg, act, 5, sh_q, 1);
    pr->v = mimo_alloc(cfg, act, 4, sh_v, 1);
    pr->angles = mimo_alloc(cfg, pd, 4, sh_a, 0);
    pr->da_cs = mimo_alloc(cfg, pd, 3, sh_s, 1);
    pr->da_cs_rev = mimo_alloc(cfg, pd, 3, sh_s, 0);
    pr->dt = mimo_alloc(cfg, pd, 3, sh_s, 1);
    pr->trap = mimo_alloc(cfg, act, 3, sh_s, 0);
    pr->segsum = mimo_alloc(cfg, pd, 5, sh_seg, 0);
    pr->states = ssmt_alloc(od, 5, sh_st);
    pr->qk_dot = ssmt_alloc(od, 5, sh_qk);
    ssmt_mimo_config pc = *cfg;
    pc.fused = 0;
    int ok = pr->dout.t.data && pr->q.t.data && pr->k.t.data && pr->v.t.data && pr->angles.t.data &&
             pr->da_cs.t.data && pr->da_cs_rev.t.data && pr->dt.t.data && pr->trap.t.data && pr->segsum.t.data &&
             pr->states.t.data && pr->qk_dot.t.data;
    ok = ok && alloc_mimo_params(&pc, &pr->q_bias, &pr->k_bias, &pr->mimo_v, &pr->mimo_z, &pr->mimo_o, &pr->d,
                                 &unused_w);
    if (cfg->has_z) {
        ok = ok && (pr->z = mimo_alloc(cfg, act, 4, sh_v, 0)).t.data;
        ok = ok && (pr->dz = mimo_alloc(cfg, od, 4, sh_v, 1)).t.data;
        ok = ok && (pr->dmimo_z = ssmt_alloc(od, 4, sh_brp)).t.data;
    }
    if (cfg->reduce_o) ok = ok && (pr->dmimo_o = ssmt_alloc(od, 4, sh_brp)).t.data;
    if (cfg->consistent) ok = ok && (pr->adt = ssmt_alloc(pd, 3, sh_s)).t.data;
    if (!ok) {
        ssmt_free(&unused_w);
        ssmt_mimo_bwd_fwd_free(pr);
        return -1;
    }
    ssmt_fill_normal(rng, &pr->q.t, 0.0, 1.0);
    ssmt_fill_normal(rng, &pr->k.t, 0.0, 1.0);
    ssmt_fill_normal(rng, &pr->v.t, 0.0, 1.0);
    ssmt_fill_normal(rng, &pr->dout.t, 0.0, 1.0);
    if (cfg->has_z) ssmt_fill_normal(rng, &pr->z.t, 0.0, 1.0);
    ssmt_fill_normal(rng, &pr->trap.t, 0.0, 1.0);
    ssmt_fill_normal(rng, &pr->q_bias.t, 0.0, 0.125);
    ssmt_fill_normal(rng, &pr->k_bias.t, 0.0, 0.125);
    ssmt_fill_normal(rng, &pr->mimo_v.t, 0.0, 0.25);
    if (pr->mimo_o.t.data) ssmt_fill_normal(rng, &pr->mimo_o.t, 0.0, 0.25);
    if (pr->mimo_z.t.data) ssmt_fill_normal(rng, &pr->mimo_z.t, 0.0, 0.25);
    if (pr->d.t.data) ssmt_fill_normal(rng, &pr->d.t, 0.0, 0.125);
    ssmt_fill_uniform(rng, &pr->angles.t, 0.0, 1.0);
    ssmt_fill_uniform(rng, &pr->dt.t, 0.05, 0.15);
    if (cfg->consistent) {
        for (int64_t i = 0; i < B * H * S; ++i) ssmt_set(&pr->adt.t, i, -ssmt_get(&pr->dt.t, i) * ssmt_uniform(rng, 0.0, 1.0));
        mimo_decays_from_adt(pr, B, H, S, C, nc);
    } else {
        ssmt_fill_normal(rng, &pr->da_cs.t, 0.0, 0.125);
        ssmt_fill_normal(rng, &pr->da_cs_rev.t, 0.0, 0.125);
        ssmt_fill_normal(rng, &pr->segsum.t, 0.0, 0.125);
    }
    ssm_mamba3_mimo_bwd_fwd_args * a = &pr->args;
    a->dout = pr->dout.t;
    a->q = pr->q.t;
    a->k = pr->k.t;
    a->v = pr->v.t;
    a->q_bias = pr->q_bias.t;
    a->k_bias = pr->k_bias.t;
    a->mimo_v = pr->mimo_v.t;
    a->mimo_o = pr->mimo_o.t;
    a->z = pr->z.t;
    a->mimo_z = pr->mimo_z.t;
    a->angles = pr->angles.t;
    a->da_cs = pr->da_cs.t;
    a->da_cs_rev = pr->da_cs_rev.t;
    a->dt = pr->dt.t;
    a->trap = pr->trap.t;
    a->d = pr->d.t;
    a->segsum = pr->segsum.t;
    a->dmimo_o = pr->dmimo_o.t;
    a->states = pr->states.t;
    a->dz = pr->dz.t;
    a->dmimo_z = pr->dmimo_z.t;
    a->qk_dot = pr->qk_dot.t;
    return 0;
}

void ssmt_mimo_bwd_fwd_free(ssmt_mimo_bwd_fwd_problem * pr) {
    ssmt_host * all[] = {&pr->dout,   &pr->q,      &pr->k,       &pr->v,      &pr->q_bias, &pr->k_bias,
                         &pr->mimo_v, &pr->mimo_o, &pr->z,       &pr->mimo_z, &pr->angles, &pr->da_cs,
                         &pr->da_cs_rev, &pr->dt,  &pr->trap,    &pr->d,      &pr->segsum, &pr->adt,
                         &pr->dmimo_o, &pr->states, &pr->dz,     &pr->dmimo_z, &pr->qk_dot};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
    memset(&pr->args, 0, sizeof pr->args);
}

int ssmt_mimo_random_step(ssmt_rng * rng, const ssmt_mimo_config * cfg, int64_t slots, int with_indices,
                          ssmt_mimo_step_problem * pr) {
    memset(pr, 0, sizeof *pr);
    ssmt_mimo_params(cfg, &pr->params);
    pr->slots = slots;
    const int64_t B = cfg->batch, H = cfg->nheads, G = cfg->ngroups, R = cfg->rank, N = cfg->dstate;
    const int64_t P = cfg->headdim, A = N / (cfg->div > 0 ? cfg->div : 4);
    const int64_t sh_q[4] = {B, R, G, N}, sh_v[3] = {B, H, P}, sh_s[2] = {B, H}, sh_a[3] = {B, H, A};
    const int64_t sh_raw[4] = {B, R, H, P}, sh_b[1] = {B};
    const state_shapes sh_st = mimo_state_shapes(cfg, slots);
    const ssm_dtype act = cfg->dtype, pd = cfg->param_dtype, od = cfg->out_dtype;
    pr->q = ssmt_alloc(act, 4, sh_q);
    pr->k = ssmt_alloc(act, 4, sh_q);
    pr->v = ssmt_alloc(act, 3, sh_v);
    pr->adt = ssmt_alloc(pd, 2, sh_s);
    pr->dt = ssmt_alloc(pd, 2, sh_s);
    pr->trap = ssmt_alloc(act, 2, sh_s);
    pr->angles = ssmt_alloc(pd, 3, sh_a);
    pr->out = cfg->reduce_o ? ssmt_alloc(od, 3, sh_v) : ssmt_alloc(od, 4, sh_raw);
    int ok = pr->q.t.data && pr->k.t.data && pr->v.t.data && pr->adt.t.data && pr->dt.t.data && pr->trap.t.data &&
             pr->angles.t.data && pr->out.t.data;
    ok = ok && alloc_state_set(NULL, 1, pd, &sh_st, &pr->angle_state, &pr->ssm_state, &pr->k_state, &pr->v_state);
    ok = ok && alloc_state_set(NULL, 1, od, &sh_st, &pr->final_angle_state, &pr->final_ssm_state, &pr->final_k_state,
                               &pr->final_v_state);
    ok = ok && alloc_mimo_params(cfg, &pr->q_bias, &pr->k_bias, &pr->mimo_v, &pr->mimo_z, &pr->mimo_o, &pr->d,
                                 &pr->norm_weight);
    if (cfg->has_z) ok = ok && (pr->z = ssmt_alloc(act, 3, sh_v)).t.data;
    if (with_indices)
        ok = ok && (pr->state_batch_indices = ssmt_alloc(cfg->index_i64 ? SSM_DTYPE_I64 : SSM_DTYPE_I32, 1, sh_b)).t.data;
    if (!ok || (with_indices && slots < B) || (!with_indices && slots != B)) {
        ssmt_mimo_step_free(pr);
        return -1;
    }
    FILL_MIMO_INPUTS(rng, cfg, pr);
    fill_state_pool(rng, &pr->angle_state, &pr->ssm_state, &pr->k_state, &pr->v_state);
    if (with_indices && !fill_state_batch_indices(rng, &pr->state_batch_indices.t, B, slots)) {
        ssmt_mimo_step_free(pr);
        return -1;
    }
    ssm_mamba3_mimo_step_args * a = &pr->args;
    M3_SET_SHARED_ARGS(a, pr);
    a->mimo_v = pr->mimo_v.t;
    a->mimo_z = pr->mimo_z.t;
    a->mimo_o = pr->mimo_o.t;
    a->outproj_norm_weight = pr->norm_weight.t;
    a->state_batch_indices = pr->state_batch_indices.t;
    return 0;
}

void ssmt_mimo_step_free(ssmt_mimo_step_problem * pr) {
    ssmt_host * all[] = {&pr->q,           &pr->k,          &pr->v,           &pr->z,
                         &pr->adt,         &pr->dt,         &pr->trap,        &pr->angles,
                         &pr->q_bias,      &pr->k_bias,     &pr->mimo_v,      &pr->mimo_z,
                         &pr->mimo_o,      &pr->d,          &pr->norm_weight, &pr->angle_state,
                         &pr->ssm_state,   &pr->k_state,    &pr->v_state,     &pr->state_batch_indices,
                         &pr->out,         &pr->final_angle_state, &pr->final_ssm_state,
                         &pr->final_k_state, &pr->final_v_state};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ssmt_free(all[i]);
    memset(&pr->args, 0, sizeof pr->args);
}

/* ---- contexts ------------------------------------------------------------------------ */
ssm_context * ssmt_make_ctx_mode(ssm_backend backend, int threads, ssm_isa isa, ssm_ref_mode mode) {
    ssm_context_params cp;
    ssm_context_params_init(&cp);
    cp.backend     = backend;
    cp.num_threads = threads;
    cp.isa         = isa;
    cp.ref_mode    = mode;
    cp.cuda_portable = backend != SSM_BACKEND_REF && backend != SSM_BACKEND_CPU && ssmt_cuda_portable();
    ssm_context *    ctx = NULL;
    const ssm_status st  = ssm_context_create(&cp, &ctx);
    const char *     env = getenv("SSMOPS_ISA");
    if (st == SSM_STATUS_UNSUPPORTED_HARDWARE && isa == SSM_ISA_AUTO && env != NULL && env[0] != '\0') {
        /* a run that forces an ISA through the environment (tests/CMakeLists.txt's *_avx2
         * tests) on a host without it: a skip, not a failure */
        printf("SSMOPS_ISA=%s: this host lacks it (%s): skipped\n", env, ssm_context_last_error(NULL));
        exit(77);
    }
    return st == SSM_STATUS_OK ? ctx : NULL;
}

ssm_context * ssmt_make_ctx(ssm_backend backend, int threads, ssm_isa isa) {
    return ssmt_make_ctx_mode(backend, threads, isa, SSM_REF_EXACT);
}

int ssmt_make_cpu_ctxs(ssm_context ** ref, ssm_context * cpu[4], ssm_context ** scalar) {
    *ref = ssmt_make_ctx(SSM_BACKEND_REF, 1, SSM_ISA_AUTO);
    for (int t = 1; t <= 3; ++t) cpu[t] = ssmt_make_ctx(SSM_BACKEND_CPU, t, SSM_ISA_AUTO);
    *scalar = ssmt_make_ctx(SSM_BACKEND_CPU, 2, SSM_ISA_SCALAR);
    const int all = *ref && cpu[1] && cpu[2] && cpu[3] && *scalar;
    TEST_CHECK(all, "context creation failed");
    return all;
}

void ssmt_free_cpu_ctxs(ssm_context * ref, ssm_context * const cpu[4], ssm_context * scalar) {
    ssm_context_free(ref);
    for (int t = 1; t <= 3; ++t) ssm_context_free(cpu[t]);
    ssm_context_free(scalar);
}

ssm_context * ssmt_ref_ctx_or_exit(ssm_ref_mode mode) {
    ssm_context_params cp;
    ssm_context_params_init(&cp);
    cp.backend = SSM_BACKEND_REF;
    cp.ref_mode = mode;
    ssm_context * ctx = NULL;
    if (ssm_context_create(&cp, &ctx) != SSM_STATUS_OK) {
        fprintf(stderr, "cannot create a REF%s context\n", mode == SSM_REF_EXACT ? "" : " bf16");
        exit(1);
    }
    return ctx;
}

ssm_context * ssmt_cuda_ctx_or_null(const char * note) {
    ssm_context_params cp;
    ssm_context_params_init(&cp);
    cp.backend = SSM_BACKEND_CUDA;
    ssm_context * ctx = NULL;
    if (ssm_context_create(&cp, &ctx) != SSM_STATUS_OK) {
        if (note != NULL) printf("%s\n", note);
        return NULL;
    }
    return ctx;
}

void ssmt_expect_cuda_refusal(const char * op, ssm_context * cuda_ctx, ssm_status got) {
    /* the operators with a CUDA path: the schema says which (the workspace query is its op's) */
    char name[64];
    snprintf(name, sizeof name, "%s", op);
    char * ws = strstr(name, "_workspace_size");
    if (ws != NULL) *ws = '\0';
    const ssm_op_info * info = ssm_op_get(ssm_op_find(name));
    const int           cuda_path = info != NULL && ((info->backends >> SSM_BACKEND_CUDA) & 1u) != 0;
    TEST_CHECK(info != NULL, "%s: not an operator of the schema", op);
    TEST_CHECK(got == SSM_STATUS_UNSUPPORTED || (cuda_path && got == SSM_STATUS_INVALID_LAYOUT),
               "%s: CUDA backend with host tensors gives %s", op, ssm_status_string(got));
    TEST_CHECK(strstr(ssm_context_last_error(cuda_ctx), "CUDA") != NULL, "%s: CUDA message: %s", op,
               ssm_context_last_error(cuda_ctx));
}

void ssmt_check_refusal(const char * op, const char * what, const char * ctx, ssm_status got, ssm_status want,
                        const char * msg, const char * name, ssmt_name_rule rule, const char * must_mention) {
    const char * shown = msg != NULL ? msg : "(null)";
    TEST_CHECK(got == want, "%s / %s (ctx %s): got %s, want %s [%s]", op, what, ctx, ssm_status_string(got),
               ssm_status_string(want), shown);
    if (rule == SSMT_NAME_PREFIX) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%s:", name);
        TEST_CHECK(msg != NULL && strncmp(msg, prefix, strlen(prefix)) == 0, "%s / %s: message does not name the op: %s",
                   op, what, shown);
    } else {
        TEST_CHECK(msg != NULL && msg[0] != '\0', "%s / %s: empty last error", op, what);
        if (msg == NULL) return;
        TEST_CHECK(strstr(msg, name) != NULL, "%s / %s: message does not name the op: %s", op, what, msg);
    }
    if (must_mention != NULL)
        TEST_CHECK(strstr(shown, must_mention) != NULL, "%s / %s: message lacks '%s': %s", op, what, must_mention,
                   shown);
}

/* ---- the CPU-vs-reference harness of the operator tests ----------------------------- */
void ssmt_op_add_out(ssmt_op_case * oc, ssm_tensor * t) {
    if (t->data != NULL && oc->nouts < SSMT_MAX_OUTS) oc->outs[oc->nouts++] = t;
}

void ssmt_op_add_outs(ssmt_op_case * oc, const char * op) {
    const ssm_op_info * info = ssm_op_get(ssm_op_find(op));
    TEST_CHECK(info != NULL && info->args_size == oc->args_size, "%s: not the schema's args struct", op);
    for (int32_t i = 0; info != NULL && i < info->nargs; ++i)
        if (info->args[i].role & SSM_ARG_ROLE_OUTPUT)
            ssmt_op_add_out(oc, (ssm_tensor *)(void *)((char *)oc->args + info->args[i].offset));
}

ssmt_op_case ssmt_op_case_make(const char * name, const char * op, void * args, size_t args_size, ssm_dtype compute,
                               ssm_dtype out_dtype, ssmt_run_fn run) {
    ssmt_op_case oc = {0};
    oc.name = name, oc.args = args, oc.args_size = args_size, oc.compute = compute, oc.out_dtype = out_dtype;
    oc.run = run;
    if (op != NULL) ssmt_op_add_outs(&oc, op);
    return oc;
}

ssmt_host ssmt_unwrap_angles(const ssm_tensor * got, const ssm_tensor * ref) {
    ssmt_host     c      = ssmt_to_f64(got);
    const double  two_pi = 6.283185307179586;
    const int64_t n      = ssmt_numel(ref);
    for (int64_t i = 0; i < n; ++i) {
        const double g = ssmt_get(&c.t, i), r = ssmt_get(ref, i);
        if (g - r > 0.5 * two_pi) ssmt_set(&c.t, i, g - two_pi);
        if (r - g > 0.5 * two_pi) ssmt_set(&c.t, i, g + two_pi);
    }
    return c;
}

/* Output o of variant `label` within the bars of the compute dtype. */
static void op_check_bar(const ssmt_op_case * oc, int o, const ssm_tensor * got, const ssm_tensor * ref,
                         const char * label) {
    ssmt_host unw = { 0 };
    if (oc->angle_outs & (1u << o)) unw = ssmt_unwrap_angles(got, ref);
    const ssmt_cmp cmp = ssmt_compare(unw.buf ? &unw.t : got, ref);
    if (unw.buf) ssmt_free(&unw);
    const ssmt_bar bar = ssmt_bar_for(oc->compute);
    const int      ok  = cmp.nonfinite == 0 && cmp.rel_rms <= bar.rel_rms && cmp.max_rel <= bar.max_rel;
    if (getenv("SHOWCMP")) printf("%s rel_rms %.3g max_rel %.3g\n", label, cmp.rel_rms, cmp.max_rel);
    TEST_CHECK(ok, "%s rel_rms %.3g max_rel %.3g nonfinite %lld (bar %.3g %.3g)", label, cmp.rel_rms, cmp.max_rel,
               (long long) cmp.nonfinite, bar.rel_rms, bar.max_rel);
}

void ssmt_op_run(const ssmt_op_case * oc, ssm_context * ref_ctx, ssm_context * const cpu[4], ssm_context * scalar) {
    ssmt_host ref[SSMT_MAX_OUTS], got[SSMT_MAX_OUTS], first[SSMT_MAX_OUTS];
    void *    saved = malloc(oc->args_size);
    memcpy(saved, oc->args, oc->args_size);
    for (int o = 0; o < oc->nouts; ++o) {
        ref[o]       = ssmt_alloc(SSM_DTYPE_F64, oc->outs[o]->ndim, oc->outs[o]->shape);
        *oc->outs[o] = ref[o].t;
        first[o].buf = NULL;
    }
    const ssm_status rs = oc->run(ref_ctx, oc->args);
    TEST_CHECK(rs == SSM_STATUS_OK, "%s ref: %s (%s)", oc->name, ssm_status_string(rs), ssm_context_last_error(ref_ctx));
    for (int variant = 0; variant < 4; ++variant) {
        ssm_context * ctx = variant < 3 ? cpu[variant + 1] : scalar;
        memcpy(oc->args, saved, oc->args_size);
        for (int o = 0; o < oc->nouts; ++o) {
            got[o]       = ssmt_alloc(oc->out_dtype, ref[o].t.ndim, ref[o].t.shape);
            *oc->outs[o] = got[o].t;
        }
        const ssm_status s = oc->run(ctx, oc->args);
        TEST_CHECK(s == SSM_STATUS_OK, "%s variant %d: %s (%s)", oc->name, variant, ssm_status_string(s),
                   ssm_context_last_error(ctx));
        for (int o = 0; o < oc->nouts; ++o) {
            char label[300];
            snprintf(label, sizeof label, "%s/out%d/%s", oc->name, o, variant < 3 ? "cpu" : "scalar");
            if (variant == 0 || variant == 3) op_check_bar(oc, o, &got[o].t, &ref[o].t, label);
            if (variant == 0) {
                first[o] = got[o];
            } else {
                if (variant < 3)
                    TEST_CHECK(memcmp(first[o].buf, got[o].buf, got[o].bytes) == 0, "%s: %d threads differ from 1",
                               label, variant + 1);
                ssmt_free(&got[o]);
            }
        }
    }
    for (int o = 0; o < oc->nouts; ++o) {
        ssmt_free(&ref[o]);
        if (first[o].buf) ssmt_free(&first[o]);
    }
    memcpy(oc->args, saved, oc->args_size);
    free(saved);
}

/* ---- views ---------------------------------------------------------------------------- */
ssm_tensor ssmt_absent(void) {
    ssm_tensor t;
    memset(&t, 0, sizeof t);
    return t;
}

ssm_tensor ssmt_slice(const ssm_tensor * t, int32_t dim, int64_t start, int64_t len) {
    ssm_tensor v = *t;
    if (t->data == NULL) return v;
    v.data       = (char *) t->data + start * t->strides[dim] * (int64_t) ssm_dtype_size((ssm_dtype) t->dtype);
    v.shape[dim] = len;
    return v;
}

ssm_tensor ssmt_pick(const ssm_tensor * t, int32_t dim, int64_t at) {
    ssm_tensor v = ssmt_slice(t, dim, at, 1);
    if (t->data == NULL) return v;
    for (int32_t i = dim; i + 1 < v.ndim; ++i) {
        v.shape[i]   = v.shape[i + 1];
        v.strides[i] = v.strides[i + 1];
    }
    v.ndim -= 1;
    return v;
}

ssm_tensor ssmt_reshaped(const ssm_tensor * t, int32_t dim, int64_t n) {
    ssm_tensor v = *t;
    v.shape[dim] = n;
    return v;
}

ssm_tensor ssmt_retyped(const ssm_tensor * t, int32_t dtype) {
    ssm_tensor v = *t;
    v.dtype      = dtype;
    return v;
}

ssm_tensor ssmt_broadcast(const ssm_tensor * h, int32_t ndim, const int64_t * shape, const int * keep) {
    ssm_tensor v = *h;
    v.ndim       = ndim;
    int src      = 0;
    for (int i = 0; i < ndim; ++i) {
        v.shape[i]   = shape[i];
        v.strides[i] = keep[i] ? h->strides[src++] : 0;
    }
    return v;
}

void ssmt_check_tol(const char * label, const ssm_tensor * y, const ssm_tensor * r, double tol) {
    const ssmt_bar bar = { tol, 100.0 * tol };
    ssmt_check_within(label, y, r, bar);
}

void ssmt_expect_close(const char * name, const ssm_tensor * y, const ssm_tensor * r, double tol) {
    if (!ssmt_check_close(name, y, r, tol)) TEST_CHECK(0, "%s not within %.3g", name, tol);
}

double ssmt_check_variant(const char * name, const char * slot, const char * variant, const ssm_tensor * y,
                          const ssm_tensor * r, ssmt_bar bar) {
    const ssmt_cmp c  = ssmt_compare(y, r);
    const int      ok = c.nonfinite == 0 && c.rel_rms <= bar.rel_rms && c.max_rel <= bar.max_rel;
    TEST_CHECK(ok, "%s/%s/%s: rel_rms %.3g max_rel %.3g nonfinite %lld (bar %.3g %.3g)", name, slot, variant,
               c.rel_rms, c.max_rel, (long long) c.nonfinite, bar.rel_rms, bar.max_rel);
    return c.rel_rms;
}

int64_t ssmt_mamba2_bwd_case(ssmt_mamba2_config * cfg, int k, int si, int variant, int64_t lens[4]) {
    static const int64_t   seqlens[SSMT_MAMBA2_BWD_NSEQLENS] = {1, 7, 32, 33, 64, 100, 129};
    static const ssm_dtype dtypes[] = {SSM_DTYPE_F32, SSM_DTYPE_F16, SSM_DTYPE_BF16};
    /* H, P, N, G: R = 1 / 6 / 20 (three head blocks) / 9 (8 + 1) / 1 / 8 */
    static const int64_t hpng[][4] = {{4, 5, 3, 1}, {6, 24, 40, 6}, {20, 16, 16, 1}, {18, 8, 24, 2}, {3, 64, 128, 3},
                                      {16, 8, 32, 2}};
    static const int64_t chunks[] = {16, 64, 32, 7};
    ssmt_mamba2_config_init(cfg);
    cfg->batch = 1 + (k % 2);
    cfg->seqlen = seqlens[si];
    const int sh = k % 6;
    cfg->nheads = hpng[sh][0], cfg->headdim = hpng[sh][1], cfg->dstate = hpng[sh][2], cfg->ngroups = hpng[sh][3];
    cfg->dtype = dtypes[k % 3];
    cfg->out_dtype = (k % 5 == 0) ? cfg->dtype : SSM_DTYPE_F32;
    cfg->d_mode = (k + k / 3) % 3;
    cfg->has_z = (k % 2) == 1;
    cfg->has_dt_bias = (k % 4) != 3;
    cfg->has_initial = ((k / 3) * 2 + k % 3) % 3 != 1;
    cfg->dt_softplus = (k / 2) % 2 == 0;
    cfg->strided = (k % 2) == 0;
    cfg->index_i64 = (k % 4) == 1;
    lens[0] = cfg->seqlen / 3, lens[1] = 0, lens[2] = cfg->seqlen - cfg->seqlen / 3 - cfg->seqlen / 4;
    lens[3] = cfg->seqlen / 4;
    ssmt_mamba2_layout(cfg, variant, cfg->seqlen > 1 ? 3 : 0, lens, 4);
    return chunks[k % 4];
}
