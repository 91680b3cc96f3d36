/*
 * tensor.c — tensor views: construction, element counts and the argument checks every
 * operator runs before its first write.
 *
 * Sizes come from users (often from Python), so every product and sum over shapes and
 * strides is computed with overflow checks: a view whose element count or byte span does
 * not fit in int64_t and size_t is rejected instead of wrapping around.
 */
#include <stdio.h>

#include "ssmi.h"

SSM_API size_t ssm_tensor_struct_size(void) { return sizeof(ssm_tensor); }

SSM_API ssm_tensor ssm_tensor_make(void * data, ssm_dtype dtype, int32_t ndim, const int64_t * shape) {
    ssm_tensor t = {0};
    t.data = data;
    t.dtype = (int32_t)dtype;
    t.device.type = SSM_DEVICE_CPU;
    t.device.index = 0;
    t.ndim = ndim < 0 ? 0 : (ndim > SSM_MAX_DIMS ? SSM_MAX_DIMS : ndim);
    if (shape == NULL) t.ndim = 0;
    for (int32_t i = 0; i < t.ndim; ++i) t.shape[i] = shape[i];
    /* Row-major strides; wrapping is impossible to detect here, and ssmi_check_tensor
     * rejects such shapes before any stride is used. */
    uint64_t stride = 1;
    for (int32_t i = t.ndim - 1; i >= 0; --i) {
        t.strides[i] = (int64_t)(stride & (uint64_t)INT64_MAX);
        stride *= t.shape[i] > 0 ? (uint64_t)t.shape[i] : 1u;
    }
    return t;
}

int64_t ssmi_numel(const ssm_tensor * t) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; ++i) {
        if (t->shape[i] == 0) return 0;
    }
    for (int32_t i = 0; i < t->ndim; ++i)
        if (__builtin_mul_overflow(n, t->shape[i], &n)) return INT64_MAX;
    return n;
}

/* ---- overflow-safe arithmetic on non-negative int64 ---------------------------------- */
static int ssmi_mul_ok(int64_t a, int64_t b, int64_t * out) {
    if (a != 0 && b > INT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}
static int ssmi_add_ok(int64_t a, int64_t b, int64_t * out) {
    if (b > INT64_MAX - a) return 0;
    *out = a + b;
    return 1;
}

/* Element offsets of the first and last byte's elements relative to t->data: the view
 * covers elements [lo, hi]. Returns 0 when a span does not fit in int64. Assumes ndim
 * and shapes are valid and numel > 0. */
static int ssmi_offset_span(const ssm_tensor * t, int64_t * lo, int64_t * hi) {
    int64_t neg = 0, pos = 0;
    for (int32_t i = 0; i < t->ndim; ++i) {
        if (t->shape[i] <= 1) continue; /* the stride of a size-1 dim is never used */
        const int64_t s = t->strides[i];
        if (s == INT64_MIN) return 0; /* |s| does not fit */
        int64_t reach;
        if (!ssmi_mul_ok(t->shape[i] - 1, s < 0 ? -s : s, &reach)) return 0;
        if (!ssmi_add_ok(s < 0 ? neg : pos, reach, s < 0 ? &neg : &pos)) return 0;
    }
    *lo = -neg;
    *hi = pos;
    return 1;
}

/* Writes "(2, 3, 4)" into buf (truncated if needed). */
static const char * ssmi_shape_string(const ssm_tensor * t, char * buf, size_t len) {
    size_t used = 0;
    int n = snprintf(buf, len, "(");
    used = n > 0 ? (size_t)n : 0;
    for (int32_t i = 0; i < t->ndim && used < len; ++i) {
        n = snprintf(buf + used, len - used, i == 0 ? "%lld" : ", %lld", (long long)t->shape[i]);
        if (n < 0) break;
        used += (size_t)n;
    }
    if (used < len) snprintf(buf + used, len - used, ")");
    return buf;
}

static void ssmi_dtype_list(uint32_t mask, char * buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    int count = 0;
    for (int32_t d = 0; d < 32 && used < len; ++d) {
        if (!(mask & (1u << d)) || ssm_dtype_size((ssm_dtype)d) == 0) continue;
        const int n = snprintf(buf + used, len - used, "%s%s", count ? ", " : "", ssm_dtype_name((ssm_dtype)d));
        if (n < 0) break;
        used += (size_t)n;
        ++count;
    }
}

static const char * ssmi_device_name(int32_t type) {
    return type == SSM_DEVICE_CPU ? "CPU" : type == SSM_DEVICE_CUDA ? "CUDA" : "unknown";
}

/* "1 or 2" for the ranks bits {1, 2}. */
static void ssmi_rank_list(uint32_t ranks, char * buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    int count = 0, total = 0;
    for (int32_t r = 0; r <= SSM_MAX_DIMS; ++r) total += (ranks >> r) & 1u;
    for (int32_t r = 0; r <= SSM_MAX_DIMS && used < len; ++r) {
        if (!((ranks >> r) & 1u)) continue;
        ++count;
        const char * sep = count == 1 ? "" : count == total ? " or " : ", ";
        const int    n = snprintf(buf + used, len - used, "%s%d", sep, (int)r);
        if (n < 0) break;
        used += (size_t)n;
    }
}

ssm_status ssmi_check_view(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t, int optional,
                           uint32_t ranks, uint32_t dtype_mask, int32_t device) {
    if (!ssmi_present(t)) {
        if (optional) return SSM_STATUS_OK;
        return ssmi_error(ctx, SSM_STATUS_INVALID_ARGUMENT, "%s: %s is required (data is NULL)", op, name);
    }
    if (t->device.type != device) {
        if (device == SSM_DEVICE_CPU)
            return ssmi_error(ctx, SSM_STATUS_INVALID_LAYOUT,
                              "%s: %s.device.type=%d is not supported (tensors must be in CPU memory)", op, name,
                              (int)t->device.type);
        return ssmi_error(ctx, SSM_STATUS_INVALID_LAYOUT,
                          "%s: %s.device.type=%d (%s) but the backend runs on the %s device (mixed devices are not "
                          "allowed)",
                          op, name, (int)t->device.type, ssmi_device_name(t->device.type), ssmi_device_name(device));
    }
    if (t->ndim < 0 || t->ndim > SSM_MAX_DIMS || !((ranks >> t->ndim) & 1u)) {
        char allowed[48];
        ssmi_rank_list(ranks, allowed, sizeof allowed);
        return ssmi_error(ctx, SSM_STATUS_INVALID_SHAPE, "%s: %s.ndim=%d must be %s", op, name, (int)t->ndim,
                          allowed);
    }
    const int dtype_ok = t->dtype >= 0 && t->dtype < 32 && (dtype_mask & (1u << t->dtype)) != 0 &&
                         ssm_dtype_size((ssm_dtype)t->dtype) != 0;
    if (!dtype_ok) {
        char allowed[96];
        ssmi_dtype_list(dtype_mask, allowed, sizeof allowed);
        if (ssm_dtype_size((ssm_dtype)t->dtype) == 0) {
            return ssmi_error(ctx, SSM_STATUS_INVALID_LAYOUT, "%s: %s.dtype=%d is not a known dtype (allowed: %s)", op,
                              name, (int)t->dtype, allowed);
        }
        return ssmi_error(ctx, SSM_STATUS_INVALID_LAYOUT, "%s: %s.dtype=%s is not allowed (allowed: %s)", op, name,
                          ssm_dtype_name((ssm_dtype)t->dtype), allowed);
    }
    for (int32_t i = 0; i < t->ndim; ++i)
        SSM_RETURN_IF(t->shape[i] < 0, ctx, SSM_STATUS_INVALID_SHAPE, "%s: %s.shape[%d]=%lld must be non-negative",
                      op, name, (int)i, (long long)t->shape[i]);
    /* An empty view touches no memory: its strides and extent do not matter. */
    int64_t numel = 1;
    for (int32_t i = 0; i < t->ndim; ++i)
        if (t->shape[i] == 0) return SSM_STATUS_OK;
    char shape[160];
    const int64_t elem = (int64_t)ssm_dtype_size((ssm_dtype)t->dtype);
    int64_t bytes = 0;
    int fits = 1;
    for (int32_t i = 0; i < t->ndim && fits; ++i) fits = ssmi_mul_ok(numel, t->shape[i], &numel);
    fits = fits && ssmi_mul_ok(numel, elem, &bytes);
#if SIZE_MAX < INT64_MAX
    fits = fits && (uint64_t)bytes <= (uint64_t)SIZE_MAX;
#endif
    SSM_RETURN_IF(!fits, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: %s.shape=%s has more elements than fit in int64 bytes (the size overflows)", op, name,
                  ssmi_shape_string(t, shape, sizeof shape));
    int64_t lo = 0, hi = 0, span = 0;
    fits = ssmi_offset_span(t, &lo, &hi) && ssmi_add_ok(hi, -lo, &span) && ssmi_add_ok(span, 1, &span) &&
           ssmi_mul_ok(span, elem, &span);
#if SIZE_MAX < INT64_MAX
    fits = fits && (uint64_t)span <= (uint64_t)SIZE_MAX;
#endif
    SSM_RETURN_IF(!fits, ctx, SSM_STATUS_INVALID_SHAPE,
                  "%s: %s with shape=%s spans more bytes than fit in int64 (its strides overflow)", op, name,
                  ssmi_shape_string(t, shape, sizeof shape));
    return SSM_STATUS_OK;
}

ssm_status ssmi_check_shape(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t,
                            const int64_t * want) {
    if (!ssmi_present(t) || want == NULL) return SSM_STATUS_OK;
    for (int32_t i = 0; i < t->ndim; ++i)
        SSM_RETURN_IF(want[i] >= 0 && t->shape[i] != want[i], ctx, SSM_STATUS_INVALID_SHAPE,
                      "%s: %s.shape[%d]=%lld must be %lld", op, name, (int)i, (long long)t->shape[i],
                      (long long)want[i]);
    return SSM_STATUS_OK;
}

ssm_status ssmi_check_tensor(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t,
                             int optional, int32_t ndim, const int64_t * want, uint32_t dtype_mask) {
    const uint32_t ranks = ndim >= 0 && ndim <= SSM_MAX_DIMS ? 1u << ndim : 0u;
    SSM_FORWARD_IF_ERROR(ssmi_check_view(ctx, op, name, t, optional, ranks, dtype_mask, SSM_DEVICE_CPU));
    return ssmi_check_shape(ctx, op, name, t, want);
}

ssm_status ssmi_check_output(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t,
                             int optional, int32_t ndim, const int64_t * want, uint32_t dtype_mask) {
    SSM_FORWARD_IF_ERROR(ssmi_check_tensor(ctx, op, name, t, optional, ndim, want, dtype_mask));
    return ssmi_check_output_layout(ctx, op, name, t);
}

ssm_status ssmi_check_output_layout(ssm_context * ctx, const char * op, const char * name, const ssm_tensor * t) {
    if (!ssmi_present(t) || ssmi_numel(t) == 0) return SSM_STATUS_OK;

    /* Dims that actually step through memory, sorted by |stride| (insertion sort: ≤ 6). */
    int32_t dims[SSM_MAX_DIMS];
    int32_t count = 0;
    for (int32_t i = 0; i < t->ndim; ++i) {
        if (t->shape[i] <= 1) continue;
        SSM_RETURN_IF(t->strides[i] == 0, ctx, SSM_STATUS_INVALID_LAYOUT,
                      "%s: %s.strides[%d]=0 is not allowed on an output (its %lld elements would share memory)", op,
                      name, (int)i, (long long)t->shape[i]);
        int32_t j = count++;
        /* |stride| fits: ssmi_check_view rejected INT64_MIN via the span check. */
        const int64_t s = t->strides[i] < 0 ? -t->strides[i] : t->strides[i];
        while (j > 0) {
            const int64_t prev = t->strides[dims[j - 1]] < 0 ? -t->strides[dims[j - 1]] : t->strides[dims[j - 1]];
            if (prev <= s) break;
            dims[j] = dims[j - 1];
            --j;
        }
        dims[j] = i;
    }
    /* Each stride must step past everything the smaller strides reach; then every index
     * maps to its own element (a mixed-radix argument). The sums cannot overflow: they are
     * bounded by the span ssmi_check_view already accepted. */
    int64_t reach = 0;
    for (int32_t k = 0; k < count; ++k) {
        const int32_t i = dims[k];
        const int64_t s = t->strides[i] < 0 ? -t->strides[i] : t->strides[i];
        SSM_RETURN_IF(s <= reach, ctx, SSM_STATUS_INVALID_LAYOUT,
                      "%s: %s.strides[%d]=%lld lets two elements of the output share memory (it must exceed %lld, "
                      "the reach of the smaller strides)",
                      op, name, (int)i, (long long)t->strides[i], (long long)reach);
        reach += (t->shape[i] - 1) * s;
    }
    return SSM_STATUS_OK;
}

/* First and last byte addresses covered by a checked, non-empty view. */
static void ssmi_byte_range(const ssm_tensor * t, uintptr_t * first, uintptr_t * last) {
    int64_t lo = 0, hi = 0;
    (void)ssmi_offset_span(t, &lo, &hi); /* cannot fail on a checked view */
    const int64_t elem = (int64_t)ssm_dtype_size((ssm_dtype)t->dtype);
    const uintptr_t base = (uintptr_t)t->data;
    /* Unsigned arithmetic on addresses: defined, and the view is real memory. */
    *first = base - (uintptr_t)(-lo * elem);
    *last = base + (uintptr_t)(hi * elem) + (uintptr_t)(elem - 1);
}

ssm_status ssmi_check_no_overlap(ssm_context * ctx, const char * op, const char * out_name, const ssm_tensor * out,
                                 const char * in_name, const ssm_tensor * in) {
    if (!ssmi_present(out) || !ssmi_present(in)) return SSM_STATUS_OK;
    if (ssmi_numel(out) == 0 || ssmi_numel(in) == 0) return SSM_STATUS_OK;
    uintptr_t out_first, out_last, in_first, in_last;
    ssmi_byte_range(out, &out_first, &out_last);
    ssmi_byte_range(in, &in_first, &in_last);
    SSM_RETURN_IF(out_first <= in_last && in_first <= out_last, ctx, SSM_STATUS_INVALID_LAYOUT,
                  "%s: %s overlaps %s in memory (an output may not share bytes with an input)", op, out_name,
                  in_name);
    return SSM_STATUS_OK;
}
