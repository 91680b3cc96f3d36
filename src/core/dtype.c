/*
 * dtype.c — element types: sizes, names, the IEEE half conversions and the per-element
 * accessors (get/set/load/store) that every backend uses to read any dtype.
 *
 * The conversions are written in integer arithmetic on the bit patterns, so they are exact
 * on every compiler and CPU (no F16C, no dependence on the FPU rounding mode or on
 * flush-to-zero). All rounding is to nearest, ties to even (RNE).
 *
 *   f16  : 1 sign, 5 exponent (bias 15),  10 mantissa bits
 *   bf16 : 1 sign, 8 exponent (bias 127),  7 mantissa bits (the top half of an f32)
 *   f32  : 1 sign, 8 exponent (bias 127), 23 mantissa bits
 *   f64  : 1 sign, 11 exponent (bias 1023), 52 mantissa bits
 *
 * NaNs come out quiet (quiet bit set) with their sign and the top bits of their payload.
 *
 * f64 → f16/bf16 must round once, not twice (f64 → f32 → f16 can land on the wrong side of
 * a tie). We first narrow f64 to f32 with round-to-odd (truncate, then set the last bit if
 * anything was cut off) and then round that f32 to nearest-even. Round-to-odd keeps a
 * sticky bit in the last place; because f32 carries at least two more bits than f16 or
 * bf16 at every magnitude (including both subnormal ranges), the second rounding sees the
 * same "below / exactly at / above the midpoint" answer as the exact value would give
 * (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms
 * using rounding to odd", 2008).
 */
#include <math.h>
#include <string.h>

#include "ssmi.h"

/* ---- bit casts ------------------------------------------------------------------------ */
static inline uint32_t ssmi_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float ssmi_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint64_t ssmi_f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* Shifts m right by `shift` (1..31) bits, rounding to nearest, ties to even. */
static inline uint32_t ssmi_shift_rne(uint32_t m, unsigned shift) {
    const uint32_t half = 1u << (shift - 1);
    const uint32_t rest = m & ((1u << shift) - 1u);
    uint32_t r = m >> shift;
    if (rest > half || (rest == half && (r & 1u))) ++r;
    return r;
}

/* ---- f16 ------------------------------------------------------------------------------ */
static inline float ssmi_half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1fu) { /* Inf, or NaN made quiet */
        const uint32_t quiet = mant != 0 ? 0x00400000u : 0u;
        return ssmi_bits_f32(sign | 0x7f800000u | quiet | (mant << 13));
    }
    if (exp == 0) {
        if (mant == 0) return ssmi_bits_f32(sign); /* ±0 */
        /* Subnormal: mant·2^-24. Normalise so the leading 1 sits at bit 10. */
        uint32_t e = 113; /* f32 exponent field of 2^-14, decremented per shift */
        while ((mant & 0x400u) == 0) {
            mant <<= 1;
            --e;
        }
        return ssmi_bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
    }
    return ssmi_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t ssmi_float_bits_to_half(uint32_t x) {
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) { /* Inf, or NaN: keep the top payload bits, set quiet */
        if (ax == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    }
    /* 65520 = 0x477ff000 is the midpoint between 65504 (largest f16, odd mantissa) and
     * 2^16: from there on (the tie goes to the even neighbour, 2^16) the result is Inf. */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: f16 subnormal or zero */
        /* Up to 2^-25 (half of the smallest subnormal, a tie to even 0) gives ±0. */
        if (ax <= 0x33000000u) return sign;
        const uint32_t e = ax >> 23;                     /* 102..112: f32 is normal here */
        const uint32_t m = (ax & 0x7fffffu) | 0x800000u; /* value = m·2^(e-150)          */
        /* Result = value·2^24 = m·2^(e-126), shift right by 126-e (14..24). A carry into
         * bit 10 correctly produces the smallest normal, 0x0400. */
        return (uint16_t)(sign | ssmi_shift_rne(m, 126u - e));
    }
    /* Normal: rebias the exponent (127 → 15) and round away 13 mantissa bits. A carry out
     * of the mantissa increments the exponent, which is what rounding should do. */
    return (uint16_t)(sign | ssmi_shift_rne(ax - 0x38000000u, 13));
}

/* ---- bf16 ----------------------------------------------------------------------------- */
static inline float ssmi_brain_to_float(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x007fffffu) != 0) x |= 0x00400000u; /* quiet */
    return ssmi_bits_f32(x);
}

static inline uint16_t ssmi_float_bits_to_brain(uint32_t x) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u); /* quiet NaN */
    /* RNE on the low 16 bits. Cannot wrap: the largest finite |x| plus 0x8000 stays below
     * 2^32, and a carry out of the mantissa makes the exponent (and Inf) correctly. */
    const uint32_t lsb = (x >> 16) & 1u;
    return (uint16_t)((x + 0x7fffu + lsb) >> 16);
}

/* ---- f64 → f32 with round-to-odd (see the file comment) ------------------------------ */
static uint32_t ssmi_double_to_float_bits_odd(double d) {
    const uint64_t x = ssmi_f64_bits(d);
    const uint32_t sign = (uint32_t)(x >> 32) & 0x80000000u;
    const uint64_t ax = x & 0x7fffffffffffffffull;
    const uint32_t e = (uint32_t)(ax >> 52);
    const uint64_t m = ax & 0x000fffffffffffffull;
    if (e == 0x7ffu) { /* Inf, or NaN: keep sign and top payload, set quiet */
        if (m == 0) return sign | 0x7f800000u;
        return sign | 0x7fc00000u | (uint32_t)(m >> 29);
    }
    if (ax == 0) return sign;
    /* f32 exponent field = e - 1023 + 127 = e - 896. */
    if (e >= 896u + 255u) return sign | 0x7f7fffffu; /* ≥ 2^128: truncates to max, inexact (odd) */
    if (e > 896u) {                                   /* normal f32 */
        const uint32_t sticky = (m & ((1ull << 29) - 1u)) != 0;
        return sign | ((e - 896u) << 23) | (uint32_t)(m >> 29) | sticky;
    }
    /* f32 subnormal or below: value = M·2^(e-1075), in units of 2^-149 that is
     * M·2^(e-926), a right shift of 926 - e ≥ 30. A double subnormal (e == 0) is far
     * below 2^-149 and leaves only the sticky bit. */
    if (e == 0) return sign | 1u;
    const uint64_t full = m | (1ull << 52);
    const uint32_t shift = 926u - e;
    if (shift >= 64u) return sign | 1u;
    const uint32_t sticky = (full & ((1ull << shift) - 1u)) != 0;
    return sign | (uint32_t)(full >> shift) | sticky;
}

/* ---- the conversions, internal and public names share these bodies ------------------ */
float    ssmi_f16_to_f32(uint16_t h) { return ssmi_half_to_float(h); }
uint16_t ssmi_f32_to_f16(float f) { return ssmi_float_bits_to_half(ssmi_f32_bits(f)); }
float    ssmi_bf16_to_f32(uint16_t h) { return ssmi_brain_to_float(h); }
uint16_t ssmi_f32_to_bf16(float f) { return ssmi_float_bits_to_brain(ssmi_f32_bits(f)); }

SSM_API uint16_t ssm_f32_to_f16(float value) { return ssmi_f32_to_f16(value); }
SSM_API float    ssm_f16_to_f32(uint16_t bits) { return ssmi_f16_to_f32(bits); }
SSM_API uint16_t ssm_f32_to_bf16(float value) { return ssmi_f32_to_bf16(value); }
SSM_API float    ssm_bf16_to_f32(uint16_t bits) { return ssmi_bf16_to_f32(bits); }

static inline uint16_t ssmi_double_to_half(double d) {
    return ssmi_float_bits_to_half(ssmi_double_to_float_bits_odd(d));
}
static inline uint16_t ssmi_double_to_brain(double d) {
    return ssmi_float_bits_to_brain(ssmi_double_to_float_bits_odd(d));
}

/* ---- dtype facts ---------------------------------------------------------------------- */
SSM_API size_t ssm_dtype_size(ssm_dtype dtype) {
    switch ((int)dtype) {
        case SSM_DTYPE_F32: return 4;
        case SSM_DTYPE_F16: return 2;
        case SSM_DTYPE_BF16: return 2;
        case SSM_DTYPE_F64: return 8;
        case SSM_DTYPE_I32: return 4;
        case SSM_DTYPE_I64: return 8;
        default: return 0;
    }
}

SSM_API const char * ssm_dtype_name(ssm_dtype dtype) {
    switch ((int)dtype) {
        case SSM_DTYPE_F32: return "f32";
        case SSM_DTYPE_F16: return "f16";
        case SSM_DTYPE_BF16: return "bf16";
        case SSM_DTYPE_F64: return "f64";
        case SSM_DTYPE_I32: return "i32";
        case SSM_DTYPE_I64: return "i64";
        default: return "unknown";
    }
}

/* ---- element accessors ---------------------------------------------------------------- */
/* Integer stores are only reached by mistake (outputs are float), but must still be
 * defined behaviour: NaN gives 0, values outside the range saturate, others truncate as a
 * C cast would. */
static int64_t ssmi_double_to_i64_saturating(double v, int64_t lo, int64_t hi) {
    if (isnan(v)) return 0;
    if (v <= (double)lo) return lo;
    if (v >= (double)hi) return hi; /* (double)INT64_MAX is 2^63: ≥ catches it */
    return (int64_t)v;
}

double ssmi_get_f64(const ssm_tensor * t, int64_t off) {
    switch (t->dtype) {
        case SSM_DTYPE_F32: return (double)((const float *)t->data)[off];
        case SSM_DTYPE_F16: return (double)ssmi_half_to_float(((const uint16_t *)t->data)[off]);
        case SSM_DTYPE_BF16: return (double)ssmi_brain_to_float(((const uint16_t *)t->data)[off]);
        case SSM_DTYPE_F64: return ((const double *)t->data)[off];
        case SSM_DTYPE_I32: return (double)((const int32_t *)t->data)[off];
        case SSM_DTYPE_I64: return (double)((const int64_t *)t->data)[off];
        default: return 0.0;
    }
}

float ssmi_get_f32(const ssm_tensor * t, int64_t off) {
    switch (t->dtype) {
        case SSM_DTYPE_F32: return ((const float *)t->data)[off];
        case SSM_DTYPE_F16: return ssmi_half_to_float(((const uint16_t *)t->data)[off]);
        case SSM_DTYPE_BF16: return ssmi_brain_to_float(((const uint16_t *)t->data)[off]);
        case SSM_DTYPE_F64: return (float)((const double *)t->data)[off];
        case SSM_DTYPE_I32: return (float)((const int32_t *)t->data)[off];
        case SSM_DTYPE_I64: return (float)((const int64_t *)t->data)[off];
        default: return 0.0f;
    }
}

int64_t ssmi_get_i64(const ssm_tensor * t, int64_t off) {
    switch (t->dtype) {
        case SSM_DTYPE_I32: return (int64_t)((const int32_t *)t->data)[off];
        case SSM_DTYPE_I64: return ((const int64_t *)t->data)[off];
        default: return 0;
    }
}

void ssmi_set_f32(const ssm_tensor * t, int64_t off, float v) {
    switch (t->dtype) {
        case SSM_DTYPE_F32: ((float *)t->data)[off] = v; break;
        case SSM_DTYPE_F16: ((uint16_t *)t->data)[off] = ssmi_float_bits_to_half(ssmi_f32_bits(v)); break;
        case SSM_DTYPE_BF16: ((uint16_t *)t->data)[off] = ssmi_float_bits_to_brain(ssmi_f32_bits(v)); break;
        case SSM_DTYPE_F64: ((double *)t->data)[off] = (double)v; break;
        case SSM_DTYPE_I32:
            ((int32_t *)t->data)[off] = (int32_t)ssmi_double_to_i64_saturating(v, INT32_MIN, INT32_MAX);
            break;
        case SSM_DTYPE_I64: ((int64_t *)t->data)[off] = ssmi_double_to_i64_saturating(v, INT64_MIN, INT64_MAX); break;
        default: break;
    }
}

void ssmi_set_f64(const ssm_tensor * t, int64_t off, double v) {
    switch (t->dtype) {
        case SSM_DTYPE_F32: ((float *)t->data)[off] = (float)v; break; /* one RNE rounding */
        case SSM_DTYPE_F16: ((uint16_t *)t->data)[off] = ssmi_double_to_half(v); break;
        case SSM_DTYPE_BF16: ((uint16_t *)t->data)[off] = ssmi_double_to_brain(v); break;
        case SSM_DTYPE_F64: ((double *)t->data)[off] = v; break;
        case SSM_DTYPE_I32:
            ((int32_t *)t->data)[off] = (int32_t)ssmi_double_to_i64_saturating(v, INT32_MIN, INT32_MAX);
            break;
        case SSM_DTYPE_I64: ((int64_t *)t->data)[off] = ssmi_double_to_i64_saturating(v, INT64_MIN, INT64_MAX); break;
        default: break;
    }
}

/* The dtype switch sits outside the loops so each loop is a plain strided copy. */
void ssmi_load_f32(float * dst, const void * base, int32_t dtype, int64_t off, int64_t stride, int64_t n) {
    if (n <= 0) return;
    switch (dtype) {
        case SSM_DTYPE_F32: {
            const float * src = (const float *)base + off;
            if (stride == 1) {
                memcpy(dst, src, (size_t)n * sizeof(float));
            } else {
                for (int64_t i = 0; i < n; ++i) dst[i] = src[i * stride];
            }
            break;
        }
        case SSM_DTYPE_F16: {
            const uint16_t * src = (const uint16_t *)base + off;
            for (int64_t i = 0; i < n; ++i) dst[i] = ssmi_half_to_float(src[i * stride]);
            break;
        }
        case SSM_DTYPE_BF16: {
            const uint16_t * src = (const uint16_t *)base + off;
            for (int64_t i = 0; i < n; ++i) dst[i] = ssmi_brain_to_float(src[i * stride]);
            break;
        }
        case SSM_DTYPE_F64: {
            const double * src = (const double *)base + off;
            for (int64_t i = 0; i < n; ++i) dst[i] = (float)src[i * stride];
            break;
        }
        case SSM_DTYPE_I32: {
            const int32_t * src = (const int32_t *)base + off;
            for (int64_t i = 0; i < n; ++i) dst[i] = (float)src[i * stride];
            break;
        }
        case SSM_DTYPE_I64: {
            const int64_t * src = (const int64_t *)base + off;
            for (int64_t i = 0; i < n; ++i) dst[i] = (float)src[i * stride];
            break;
        }
        default:
            for (int64_t i = 0; i < n; ++i) dst[i] = 0.0f;
            break;
    }
}

void ssmi_store_f32(void * base, int32_t dtype, int64_t off, int64_t stride, const float * src, int64_t n) {
    if (n <= 0) return;
    switch (dtype) {
        case SSM_DTYPE_F32: {
            float * dst = (float *)base + off;
            if (stride == 1) {
                memcpy(dst, src, (size_t)n * sizeof(float));
            } else {
                for (int64_t i = 0; i < n; ++i) dst[i * stride] = src[i];
            }
            break;
        }
        case SSM_DTYPE_F16: {
            uint16_t * dst = (uint16_t *)base + off;
            for (int64_t i = 0; i < n; ++i) dst[i * stride] = ssmi_float_bits_to_half(ssmi_f32_bits(src[i]));
            break;
        }
        case SSM_DTYPE_BF16: {
            uint16_t * dst = (uint16_t *)base + off;
            for (int64_t i = 0; i < n; ++i) dst[i * stride] = ssmi_float_bits_to_brain(ssmi_f32_bits(src[i]));
            break;
        }
        case SSM_DTYPE_F64: {
            double * dst = (double *)base + off;
            for (int64_t i = 0; i < n; ++i) dst[i * stride] = (double)src[i];
            break;
        }
        case SSM_DTYPE_I32: {
            int32_t * dst = (int32_t *)base + off;
            for (int64_t i = 0; i < n; ++i)
                dst[i * stride] = (int32_t)ssmi_double_to_i64_saturating(src[i], INT32_MIN, INT32_MAX);
            break;
        }
        case SSM_DTYPE_I64: {
            int64_t * dst = (int64_t *)base + off;
            for (int64_t i = 0; i < n; ++i) dst[i * stride] = ssmi_double_to_i64_saturating(src[i], INT64_MIN, INT64_MAX);
            break;
        }
        default: break;
    }
}
