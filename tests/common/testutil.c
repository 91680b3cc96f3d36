/* testutil.c — shared test support; see testutil.h. */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* ---- comparisons --------------------------------------------------------------------- */
ssmt_cmp ssmt_compare(const ssm_tensor * y, const ssm_tensor * r) {
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
        const double e = fabs(yv - rv);
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

static int check_line(const char * name, const ssm_tensor * y, const ssm_tensor * r, ssmt_bar bar) {
    if (!ssmt_same_shape(name, y, r)) {
        printf("%-48s shape mismatch FAIL\n", name);
        return 0;
    }
    const ssmt_cmp c = ssmt_compare(y, r);
    const int      pass = c.nonfinite == 0 && c.rel_rms <= bar.rel_rms && c.max_rel <= bar.max_rel;
    printf("%-48s rel_rms=%.3e max_rel=%.3e bar=%.1e/%.1e%s %s\n", name, c.rel_rms, c.max_rel, bar.rel_rms, bar.max_rel,
           c.nonfinite ? " NONFINITE" : "", pass ? "PASS" : "FAIL");
    TEST_CHECK(pass, "%s: rel_rms=%.3e max_rel=%.3e nonfinite=%lld", name, c.rel_rms, c.max_rel,
               (long long)c.nonfinite);
    return pass;
}

int ssmt_check_bar(const char * name, const ssm_tensor * y, const ssm_tensor * r, ssm_dtype compute_dtype) {
    return check_line(name, y, r, ssmt_bar_for(compute_dtype));
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

int ssmt_mamba2_random_args(ssmt_rng * rng, const ssmt_mamba2_config * cfg, ssmt_mamba2_problem * pr) {
    memset(pr, 0, sizeof *pr);
    int64_t batch = cfg->batch, S = cfg->seqlen;
    if (cfg->nseq > 0) {
        batch = 1;
        S = 0;
        for (int32_t s = 0; s < cfg->nseq; ++s) S += cfg->seqlens[s];
        pr->nseq = cfg->nseq;
    }
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
    if (cfg->nseq > 0) {
        const int64_t sh_cu[1] = {cfg->nseq + 1};
        ok = ok && (pr->cu_seqlens = ssmt_alloc(idx_dtype, 1, sh_cu)).t.data;
    }
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
    if (pr->cu_seqlens.t.data != NULL) {
        int64_t acc = 0;
        ssmt_set(&pr->cu_seqlens.t, 0, 0.0);
        for (int32_t s = 0; s < cfg->nseq; ++s) {
            acc += cfg->seqlens[s];
            ssmt_set(&pr->cu_seqlens.t, s + 1, (double)acc);
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
