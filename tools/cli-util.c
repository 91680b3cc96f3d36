/*
 * cli-util.c — buffers and strided views, dtype conversion, comparisons, RNG, parsing and
 * messages shared by every ssmops command. Nothing here is fast: the CLI's hot path is the
 * library call itself.
 */
#define _XOPEN_SOURCE 700

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* ---- buffers ---------------------------------------------------------------------------- */

void * cli_alloc(size_t bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void * p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded ? rounded : 64);
    return p;
}

int64_t cli_numel(int32_t ndim, const int64_t * shape) {
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; ++i) n *= shape[i];
    return n;
}

int cli_buf_alloc(cli_buf * buf, ssm_dtype dtype, int32_t ndim, const int64_t * shape) {
    cli_buf_free(buf);
    if (ndim < 0 || ndim > SSM_MAX_DIMS) return -1;
    for (int32_t i = 0; i < ndim; ++i)
        if (shape[i] < 0) return -1;
    const int64_t n = cli_numel(ndim, shape);
    buf->mem = cli_alloc((size_t)n * ssm_dtype_size(dtype));
    if (!buf->mem) return -1;
    buf->mem_ndim = ndim;
    for (int32_t i = 0; i < ndim; ++i) buf->mem_shape[i] = shape[i];
    buf->view = ssm_tensor_make(buf->mem, dtype, ndim, shape);
    return 0;
}

void cli_buf_set_view(cli_buf * buf, int32_t ndim, const int64_t * shape, const int64_t * strides) {
    buf->view.ndim = ndim;
    for (int32_t i = 0; i < SSM_MAX_DIMS; ++i) {
        buf->view.shape[i]   = i < ndim ? shape[i] : 0;
        buf->view.strides[i] = i < ndim ? strides[i] : 0;
    }
}

void cli_buf_free(cli_buf * buf) {
    if (!buf->borrowed) free(buf->mem);
    memset(buf, 0, sizeof *buf);
}

int cli_buf_clone(cli_buf * dst, const ssm_tensor * src, ssm_dtype dtype) {
    if (cli_buf_alloc(dst, dtype, src->ndim, src->shape) != 0) return -1;
    cli_copy(&dst->view, src);
    return 0;
}

int cli_buf_convert(cli_buf * buf, ssm_dtype dtype) {
    if (!buf->mem || buf->borrowed || buf->view.data != buf->mem) return -1;
    if (buf->view.dtype == (int32_t)dtype) return 0;
    cli_buf out;
    memset(&out, 0, sizeof out);
    if (cli_buf_alloc(&out, dtype, buf->mem_ndim, buf->mem_shape) != 0) return -1;
    const ssm_tensor mem = ssm_tensor_make(buf->mem, (ssm_dtype)buf->view.dtype, buf->mem_ndim, buf->mem_shape);
    cli_copy(&out.view, &mem);
    const ssm_tensor old = buf->view;
    cli_buf_set_view(&out, old.ndim, old.shape, old.strides);
    cli_buf_free(buf);
    *buf = out;
    return 0;
}

/* ---- element access ----------------------------------------------------------------------- */

int cli_is_float(ssm_dtype dtype) {
    return dtype == SSM_DTYPE_F32 || dtype == SSM_DTYPE_F16 || dtype == SSM_DTYPE_BF16 || dtype == SSM_DTYPE_F64;
}

double cli_get(const ssm_tensor * t, int64_t offset) {
    switch ((ssm_dtype)t->dtype) {
        case SSM_DTYPE_F32: return ((const float *)t->data)[offset];
        case SSM_DTYPE_F64: return ((const double *)t->data)[offset];
        case SSM_DTYPE_F16: return ssm_f16_to_f32(((const uint16_t *)t->data)[offset]);
        case SSM_DTYPE_BF16: return ssm_bf16_to_f32(((const uint16_t *)t->data)[offset]);
        case SSM_DTYPE_I32: return ((const int32_t *)t->data)[offset];
        case SSM_DTYPE_I64: return (double)((const int64_t *)t->data)[offset];
    }
    return NAN;
}

void cli_set(const ssm_tensor * t, int64_t offset, double value) {
    switch ((ssm_dtype)t->dtype) {
        case SSM_DTYPE_F32: ((float *)t->data)[offset] = (float)value; return;
        case SSM_DTYPE_F64: ((double *)t->data)[offset] = value; return;
        case SSM_DTYPE_F16: ((uint16_t *)t->data)[offset] = ssm_f32_to_f16((float)value); return;
        case SSM_DTYPE_BF16: ((uint16_t *)t->data)[offset] = ssm_f32_to_bf16((float)value); return;
        case SSM_DTYPE_I32: ((int32_t *)t->data)[offset] = (int32_t)value; return;
        case SSM_DTYPE_I64: ((int64_t *)t->data)[offset] = (int64_t)value; return;
    }
}

double cli_round(ssm_dtype dtype, double value) {
    switch (dtype) {
        case SSM_DTYPE_F32: return (float)value;
        case SSM_DTYPE_F16: return ssm_f16_to_f32(ssm_f32_to_f16((float)value));
        case SSM_DTYPE_BF16: return ssm_bf16_to_f32(ssm_f32_to_bf16((float)value));
        default: return value;
    }
}

int64_t cli_offset(const ssm_tensor * t, int64_t k) {
    int64_t off = 0;
    for (int32_t d = t->ndim - 1; d >= 0; --d) {
        const int64_t n = t->shape[d];
        off += (k % n) * t->strides[d];
        k /= n;
    }
    return off;
}

static int64_t tensor_numel(const ssm_tensor * t) {
    return cli_numel(t->ndim, t->shape);
}

void cli_copy(const ssm_tensor * dst, const ssm_tensor * src) {
    const int64_t n = tensor_numel(src);
    for (int64_t k = 0; k < n; ++k) cli_set(dst, cli_offset(dst, k), cli_get(src, cli_offset(src, k)));
}

void cli_fill(const ssm_tensor * t, double value) {
    const int64_t n = tensor_numel(t);
    for (int64_t k = 0; k < n; ++k) cli_set(t, cli_offset(t, k), value);
}

/* ---- comparison ------------------------------------------------------------------------- */

int cli_same_shape(const ssm_tensor * a, const ssm_tensor * b) {
    if (a->ndim != b->ndim) return 0;
    for (int32_t i = 0; i < a->ndim; ++i)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

void cli_compare(const ssm_tensor * y, const ssm_tensor * r, cli_diff * diff) {
    const int64_t n   = tensor_numel(r);
    double        se  = 0.0, sr = 0.0, emax = 0.0;
    memset(diff, 0, sizeof *diff);
    diff->count = n;
    for (int64_t k = 0; k < n; ++k) {
        const double yv = cli_get(y, cli_offset(y, k));
        const double rv = cli_get(r, cli_offset(r, k));
        if (!isfinite(rv)) {
            /* The reference itself is not finite: the backend must agree exactly. */
            const int same = (isnan(rv) && isnan(yv)) || (isinf(rv) && yv == rv);
            if (!same) diff->nonfinite++;
            continue;
        }
        if (!isfinite(yv)) {
            diff->nonfinite++;
            continue;
        }
        const double e = fabs(yv - rv);
        se += e * e;
        sr += rv * rv;
        if (e > emax) {
            emax        = e;
            diff->worst = k;
        }
    }
    const double rms = n > 0 ? sqrt(sr / (double)n) : 0.0;
    if (sr > 0.0) {
        diff->rel_rms = sqrt(se) / sqrt(sr);
        diff->max_rel = emax / rms;
    } else {
        /* All-zero reference: only an exact match passes. */
        diff->rel_rms = se > 0.0 ? INFINITY : 0.0;
        diff->max_rel = emax > 0.0 ? INFINITY : 0.0;
    }
}

cli_bar cli_bar_for(ssm_dtype compute_dtype) {
    cli_bar bar;
    switch (compute_dtype) {
        case SSM_DTYPE_F16:
            bar.rel_rms = ldexp(1.0, -11);
            bar.max_rel = ldexp(1.0, -7);
            break;
        case SSM_DTYPE_BF16:
            bar.rel_rms = ldexp(1.0, -8);
            bar.max_rel = ldexp(1.0, -4);
            break;
        default:
            bar.rel_rms = 1e-5;
            bar.max_rel = 1e-3;
            break;
    }
    return bar;
}

int cli_diff_passes(const cli_diff * diff, cli_bar bar) {
    return diff->nonfinite == 0 && diff->rel_rms <= bar.rel_rms && diff->max_rel <= bar.max_rel;
}

/* ---- random numbers ----------------------------------------------------------------------- */

void cli_rng_seed(cli_rng * rng, uint64_t seed) {
    rng->state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
}

uint64_t cli_rng_next(cli_rng * rng) {
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z          = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z          = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double cli_rng_uniform(cli_rng * rng) {
    return (double)(cli_rng_next(rng) >> 11) * 0x1.0p-53;
}

double cli_rng_normal(cli_rng * rng) {
    /* Box–Muller; 1 − u keeps the logarithm finite. */
    const double u1 = 1.0 - cli_rng_uniform(rng);
    const double u2 = cli_rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- names ----------------------------------------------------------------------------------- */

int cli_parse_dtype(const char * text, ssm_dtype * out) {
    static const struct {
        const char * name;
        ssm_dtype    dtype;
    } names[] = {
        {"f32", SSM_DTYPE_F32},  {"fp32", SSM_DTYPE_F32},     {"float32", SSM_DTYPE_F32},
        {"f16", SSM_DTYPE_F16},  {"fp16", SSM_DTYPE_F16},     {"float16", SSM_DTYPE_F16},
        {"bf16", SSM_DTYPE_BF16}, {"bfloat16", SSM_DTYPE_BF16}, {"f64", SSM_DTYPE_F64},
        {"fp64", SSM_DTYPE_F64},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (strcmp(text, names[i].name) == 0) {
            *out = names[i].dtype;
            return 0;
        }
    return -1;
}

int cli_parse_backend(const char * text, ssm_backend * out) {
    static const ssm_backend all[] = {SSM_BACKEND_AUTO, SSM_BACKEND_REF, SSM_BACKEND_CPU, SSM_BACKEND_CUDA};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (strcmp(text, ssm_backend_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    return -1;
}

int cli_parse_int64(const char * text, int64_t * out) {
    char * end = NULL;
    errno      = 0;
    const long long v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') return -1;
    *out = (int64_t)v;
    return 0;
}

int cli_parse_double(const char * text, double * out) {
    char * end = NULL;
    errno      = 0;
    const double v = strtod(text, &end);
    if (errno == ERANGE || end == text || *end != '\0' || isnan(v)) return -1;
    *out = v;
    return 0;
}

/* ---- keys ------------------------------------------------------------------------------------- */

int cli_key_count(const cli_key * keys) {
    int n = 0;
    while (keys && keys[n].name) ++n;
    return n;
}

int cli_key_index(const cli_key * keys, const char * name) {
    for (int i = 0; keys && keys[i].name; ++i)
        if (strcmp(keys[i].name, name) == 0) return i;
    return -1;
}

static int word_in_choices(const char * word, const char * choices) {
    const size_t n = strlen(word);
    const char * p = choices;
    while (p && *p) {
        const char * bar = strchr(p, '|');
        const size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, word, n) == 0) return 1;
        p = bar ? bar + 1 : NULL;
    }
    return 0;
}

int cli_parse_value(const cli_key * key, const char * text, cli_value * value, char * err, size_t errlen) {
    cli_value v;
    memset(&v, 0, sizeof v);
    if (strlen(text) >= sizeof v.text) {
        snprintf(err, errlen, "%s=%s: value too long", key->name, text);
        return -1;
    }
    snprintf(v.text, sizeof v.text, "%s", text);
    switch (key->type) {
        case CLI_KEY_INT:
            if (cli_parse_int64(text, &v.i) != 0) {
                snprintf(err, errlen, "%s=%s: expected an integer", key->name, text);
                return -1;
            }
            v.f = (double)v.i;
            break;
        case CLI_KEY_FLOAT:
            if (cli_parse_double(text, &v.f) != 0) {
                snprintf(err, errlen, "%s=%s: expected a number", key->name, text);
                return -1;
            }
            break;
        case CLI_KEY_RANGE: {
            const char * colon = strchr(text, ':');
            char         lo[64];
            if (!colon || (size_t)(colon - text) >= sizeof lo) {
                snprintf(err, errlen, "%s=%s: expected lo:hi (e.g. 0:inf)", key->name, text);
                return -1;
            }
            memcpy(lo, text, (size_t)(colon - text));
            lo[colon - text] = '\0';
            if (cli_parse_double(lo, &v.lo) != 0 || cli_parse_double(colon + 1, &v.hi) != 0 || v.lo > v.hi) {
                snprintf(err, errlen, "%s=%s: expected lo:hi with lo <= hi (e.g. 0:inf)", key->name, text);
                return -1;
            }
            break;
        }
        case CLI_KEY_WORD:
            if (!word_in_choices(text, key->choices)) {
                snprintf(err, errlen, "%s=%s: expected one of %s", key->name, text, key->choices);
                return -1;
            }
            break;
    }
    *value = v;
    return 0;
}

int cli_parse_kv(const char * list, const cli_key * keys, cli_value * values, const cli_key * alt_keys,
                 cli_value * alt_values, const char * what, const char * op_name, char * err, size_t errlen) {
    if (!list || !*list) return 0;
    char * copy = strdup(list);
    if (!copy) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int    rc    = 0;
    char * save  = NULL;
    char   seen[128] = {0}; /* keys given in this list: a repeated key is an error, not "last wins" */
    for (char * item = strtok_r(copy, ",", &save); item && rc == 0; item = strtok_r(NULL, ",", &save)) {
        char * eq = strchr(item, '=');
        if (!eq || eq == item) {
            snprintf(err, errlen, "--%s %s: expected key=value", what, item);
            rc = -1;
            break;
        }
        *eq       = '\0';
        int index = cli_key_index(keys, item);
        if (index < 0 && alt_keys && cli_key_index(alt_keys, item) >= 0) {
            /* e.g. --param chunk=64: a shape key given among the params (as case.json does) */
            const int alt = cli_key_index(alt_keys, item);
            rc            = cli_parse_value(&alt_keys[alt], eq + 1, &alt_values[alt], err, errlen);
            alt_values[alt].given = 1;
            continue;
        }
        if (index < 0) {
            char names[256] = "";
            for (int i = 0; keys && keys[i].name; ++i) {
                strncat(names, i ? "," : "", sizeof names - strlen(names) - 1);
                strncat(names, keys[i].name, sizeof names - strlen(names) - 1);
            }
            snprintf(err, errlen, "%s has no %s key '%s' (keys: %s)", op_name, what, item, names[0] ? names : "none");
            rc = -1;
            break;
        }
        if (index < (int)sizeof seen && seen[index]) {
            snprintf(err, errlen, "--%s gives %s twice", what, item);
            rc = -1;
            break;
        }
        if (index < (int)sizeof seen) seen[index] = 1;
        rc = cli_parse_value(&keys[index], eq + 1, &values[index], err, errlen);
        values[index].given = 1;
    }
    free(copy);
    return rc;
}

/* ---- messages and system helpers ------------------------------------------------------------------ */

int cli_usage_error(const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ssmops: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n(ssmops --help for usage)\n", stderr);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

int cli_fail(const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ssmops: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_EXIT_FAIL;
}

int cli_lib_error(const ssm_context * ctx, ssm_status status, const char * what) {
    const char * msg = ssm_context_last_error(ctx);
    fprintf(stderr, "ssmops: %s failed: %s: %s\n", what, ssm_status_string(status),
            msg && *msg ? msg : "(no message)");
    return CLI_EXIT_FAIL;
}

void cli_progress(const char * fmt, ...) {
    if (!isatty(STDERR_FILENO)) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("\r\033[K", stderr);
    vfprintf(stderr, fmt, ap);
    fflush(stderr);
    va_end(ap);
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_default_threads(void) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int)(n > 1024 ? 1024 : n) : 1;
}

/* SSMOPS_VARIANT="op=name[,op=name...]": the CLI's and scripts' way to force entries of the
 * CUDA selection tables, applied to CUDA and AUTO contexts (reference and CPU contexts have no
 * tables). A bad value is a usage error with the library's message. */
static ssm_status apply_variant_env(ssm_context * ctx) {
    const char * env = getenv("SSMOPS_VARIANT");
    if (env == NULL || *env == '\0') return SSM_STATUS_OK;
    char list[512];
    if (strlen(env) >= sizeof list) {
        fprintf(stderr, "ssmops: error: SSMOPS_VARIANT is longer than %zu characters\n", sizeof list - 1);
        return SSM_STATUS_INVALID_ARGUMENT;
    }
    strcpy(list, env);
    char * save = NULL;
    for (char * item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char * eq = strchr(item, '=');
        if (eq == NULL) {
            fprintf(stderr, "ssmops: error: SSMOPS_VARIANT item '%s' is not op=variant\n", item);
            return SSM_STATUS_INVALID_ARGUMENT;
        }
        *eq = '\0';
        const ssm_status st = ssm_context_set_variant(ctx, item, eq + 1);
        if (st != SSM_STATUS_OK) {
            fprintf(stderr, "ssmops: error: SSMOPS_VARIANT: %s\n", ssm_context_last_error(ctx));
            return st;
        }
    }
    return SSM_STATUS_OK;
}

ssm_status cli_context_create_mode(ssm_backend backend, int threads, int32_t ref_mode, ssm_context ** ctx) {
    ssm_context_params params;
    ssm_context_params_init(&params);
    params.backend     = backend;
    params.num_threads = threads > 0 ? threads : cli_default_threads();
    params.ref_mode    = ref_mode;
    /* SSMOPS_CUDA_PORTABLE=1: the CLI's and scripts' way to set params.cuda_portable */
    const char * portable = getenv("SSMOPS_CUDA_PORTABLE");
    if (portable != NULL && portable[0] != '\0') {
        if (strcmp(portable, "0") != 0 && strcmp(portable, "1") != 0) {
            fprintf(stderr, "ssmops: error: SSMOPS_CUDA_PORTABLE=%s must be 0 or 1\n", portable);
            return SSM_STATUS_INVALID_ARGUMENT;
        }
        params.cuda_portable = portable[0] == '1';
    }
    ssm_status st = ssm_context_create(&params, ctx);
    if (st == SSM_STATUS_OK && (backend == SSM_BACKEND_CUDA || backend == SSM_BACKEND_AUTO) &&
        (st = apply_variant_env(*ctx)) != SSM_STATUS_OK) {
        ssm_context_free(*ctx);
        *ctx = NULL;
    }
    return st;
}

ssm_status cli_context_create(ssm_backend backend, int threads, ssm_context ** ctx) {
    return cli_context_create_mode(backend, threads, SSM_REF_EXACT, ctx);
}
