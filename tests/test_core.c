/*
 * test_core.c — the core layer: version, status strings, half conversions (checked against
 * an independent double-arithmetic reference), element accessors, context and ISA choice,
 * error buffers, allocator, threadpool, and every rule of the tensor argument checks.
 *
 * Conversions are tested on all 65,536 f16 and bf16 bit patterns each way: every pattern
 * is decoded and compared with the reference decoder, re-encoded, and every value, every
 * midpoint between neighbours (ties), and the f32 values one ulp either side of those are
 * rounded and compared with the reference rounding.
 */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/ssmi.h"

/* ---- tiny harness ------------------------------------------------------------------ */
static long g_checks = 0;
static long g_failures = 0;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        ++g_checks;                                                         \
        if (!(cond)) {                                                      \
            ++g_failures;                                                   \
            if (g_failures <= 60) {                                         \
                fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
                fprintf(stderr, __VA_ARGS__);                               \
                fprintf(stderr, "\n");                                      \
            }                                                               \
        }                                                                   \
    } while (0)

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- independent reference: formats described by (exponent bits, mantissa bits) ---- */
typedef struct fmt16 {
    const char * name;
    int          mant_bits; /* 10 for f16, 7 for bf16 */
    int          bias;      /* 15, 127 */
    uint16_t     inf;       /* 0x7c00, 0x7f80 */
} fmt16;
static const fmt16 F16 = {"f16", 10, 15, 0x7c00};
static const fmt16 BF16 = {"bf16", 7, 127, 0x7f80};

/* Value of a non-NaN pattern, computed with ldexp. */
static double ref_decode(const fmt16 * f, uint16_t h) {
    const int sign = h >> 15;
    const int exp = (h & 0x7fff) >> f->mant_bits;
    const int mant = h & ((1 << f->mant_bits) - 1);
    double v;
    if (h == f->inf || h == (f->inf | 0x8000)) {
        v = INFINITY;
    } else if (exp == 0) {
        v = ldexp((double)mant, 1 - f->bias - f->mant_bits);
    } else {
        v = ldexp((double)((1 << f->mant_bits) + mant), exp - f->bias - f->mant_bits);
    }
    return sign ? -v : v;
}

static int ref_is_nan(const fmt16 * f, uint16_t h) {
    return (h & 0x7fff) > f->inf;
}

/* Round a (non-NaN) double to the format with round-to-nearest-even, by scaling to an
 * integer count of quanta: everything here is exact in double. */
static uint16_t ref_round(const fmt16 * f, double v) {
    const uint16_t sign = signbit(v) ? 0x8000 : 0;
    const double a = fabs(v);
    if (isinf(a)) return sign | f->inf;
    if (a == 0.0) return sign;
    const int min_exp = 1 - f->bias; /* exponent of the smallest normal */
    int e;
    (void)frexp(a, &e); /* a = m·2^e, m in [0.5, 1): a's exponent is e - 1 */
    int q_exp = (e - 1 < min_exp ? min_exp : e - 1) - f->mant_bits;
    const double k = ldexp(a, -q_exp); /* a in quanta */
    double n = floor(k);
    const double frac = k - n;
    if (frac > 0.5 || (frac == 0.5 && fmod(n, 2.0) != 0.0)) n += 1.0;
    /* n quanta of 2^q_exp: below 2^mant_bits it is subnormal (q_exp = min quantum). */
    long bits;
    if (e - 1 < min_exp) {
        bits = (long)n; /* n == 2^mant_bits becomes the smallest normal, as encoded */
    } else {
        const long expfield = (e - 1) + f->bias;
        bits = (expfield << f->mant_bits) + ((long)n - (1L << f->mant_bits)); /* carry ok */
    }
    if (bits >= f->inf) bits = f->inf;
    return (uint16_t)(sign | bits);
}

static uint16_t lib_from_f32(const fmt16 * f, float x) {
    return f == &F16 ? ssmi_f32_to_f16(x) : ssmi_f32_to_bf16(x);
}
static float lib_to_f32(const fmt16 * f, uint16_t h) {
    return f == &F16 ? ssmi_f16_to_f32(h) : ssmi_bf16_to_f32(h);
}
static uint16_t pub_from_f32(const fmt16 * f, float x) {
    return f == &F16 ? ssm_f32_to_f16(x) : ssm_f32_to_bf16(x);
}
static float pub_to_f32(const fmt16 * f, uint16_t h) {
    return f == &F16 ? ssm_f16_to_f32(h) : ssm_bf16_to_f32(h);
}

/* Checks one f32 → 16-bit rounding against the reference (non-NaN x). */
static void check_round_f32(const fmt16 * f, float x) {
    const uint16_t want = ref_round(f, (double)x);
    const uint16_t got = lib_from_f32(f, x);
    const uint16_t pub = pub_from_f32(f, x);
    CHECK(got == want && pub == want, "%s(%a = 0x%08x): got 0x%04x (public 0x%04x), want 0x%04x", f->name, (double)x,
          f32_bits(x), got, pub, want);
}

static void test_decode_and_roundtrip(const fmt16 * f) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const uint16_t h = (uint16_t)i;
        const float x = lib_to_f32(f, h);
        const float xp = pub_to_f32(f, h);
        CHECK(f32_bits(x) == f32_bits(xp), "%s 0x%04x: ssmi and ssm decoders differ", f->name, h);
        const uint16_t back = lib_from_f32(f, x);
        if (ref_is_nan(f, h)) {
            const uint16_t quiet = (uint16_t)(1u << (f->mant_bits - 1));
            CHECK(isnan(x), "%s 0x%04x must decode to NaN", f->name, h);
            CHECK((f32_bits(x) & 0x00400000u) != 0, "%s 0x%04x must decode to a quiet NaN", f->name, h);
            CHECK((f32_bits(x) >> 31) == (uint32_t)(h >> 15), "%s 0x%04x: NaN sign lost", f->name, h);
            CHECK(ref_is_nan(f, back) && (back & quiet) && (back >> 15) == (h >> 15),
                  "%s 0x%04x: NaN round trip gave 0x%04x", f->name, h, back);
            /* A quiet NaN keeps its whole payload through f32 and back. */
            if (h & quiet) CHECK(back == h, "%s 0x%04x: quiet NaN round trip gave 0x%04x", f->name, h, back);
            continue;
        }
        const double want = ref_decode(f, h);
        CHECK((double)x == want && !!signbit(x) == !!signbit(want), "%s 0x%04x decodes to %a, want %a", f->name, h,
              (double)x, want);
        CHECK(back == h, "%s 0x%04x -> f32 -> 0x%04x", f->name, h, back);
    }
}

/* Every value, every midpoint to the next value up, and one f32 ulp either side of both,
 * for both signs, rounded and compared with the reference. */
static void test_round_exhaustive(const fmt16 * f) {
    const double top = f == &F16 ? 65536.0 : ldexp(1.0, 128); /* "next" after the largest */
    for (uint32_t i = 0; i < f->inf; ++i) {
        const double v = ref_decode(f, (uint16_t)i);
        const double next = (i + 1 == f->inf) ? top : ref_decode(f, (uint16_t)(i + 1));
        const double mid = 0.5 * (v + next);
        const float pts[2] = {(float)v, (float)mid};
        CHECK((double)pts[0] == v && (double)pts[1] == mid, "%s 0x%04x: value or midpoint not exact in f32", f->name,
              i);
        for (int p = 0; p < 2; ++p) {
            const float cands[3] = {pts[p], nextafterf(pts[p], INFINITY), nextafterf(pts[p], -INFINITY)};
            for (int c = 0; c < 3; ++c) {
                check_round_f32(f, cands[c]);
                check_round_f32(f, -cands[c]);
            }
        }
        /* The midpoint itself must go to the even neighbour. */
        const uint16_t m = lib_from_f32(f, (float)mid);
        const uint16_t even = (i & 1u) ? (uint16_t)(i + 1) : (uint16_t)i;
        CHECK(m == even, "%s midpoint after 0x%04x rounded to 0x%04x, want even 0x%04x", f->name, i, m, even);
    }
}

static void test_round_specials(const fmt16 * f) {
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f, -1e-45f,
                              65504.0f, 65519.996f, 65520.0f, 65536.0f, 3.3895314e38f, 3.3961776e38f,
                              0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1.8p-24f, 0x1p-14f, 0x1.ff8p-15f, 0x1p-126f,
                              0x1p-133f, 0x1p-134f, 0x1.000002p-134f, 0x1p-149f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i) check_round_f32(f, specials[i]);
    CHECK(lib_from_f32(f, 0.0f) == 0 && lib_from_f32(f, -0.0f) == 0x8000, "%s: signed zeros", f->name);
    CHECK(lib_from_f32(f, INFINITY) == f->inf && lib_from_f32(f, -INFINITY) == (f->inf | 0x8000), "%s: infinities",
          f->name);
    CHECK(lib_from_f32(f, FLT_MAX) == f->inf, "%s: FLT_MAX must overflow to Inf", f->name);
    if (f == &F16) {
        CHECK(ssmi_f32_to_f16(65519.996f) == 0x7bff, "f16: just below 65520 rounds to 65504");
        CHECK(ssmi_f32_to_f16(65520.0f) == 0x7c00, "f16: 65520 (tie) rounds to Inf");
        CHECK(ssmi_f32_to_f16(0x1p-25f) == 0x0000, "f16: 2^-25 (tie) rounds to 0");
        CHECK(ssmi_f32_to_f16(0x1.000002p-25f) == 0x0001, "f16: just above 2^-25 rounds up");
        CHECK(ssmi_f32_to_f16(0x1.8p-24f) == 0x0002, "f16: 1.5·2^-24 (tie) rounds to even 2");
    }
    /* NaNs: quiet, sign kept; bf16 keeps the top payload bits. */
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fa5a5a5u, 0x7fffffffu,
                             0xffffffffu, 0x7f802000u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; ++i) {
        const uint16_t h = lib_from_f32(f, bits_f32(nans[i]));
        const uint16_t quiet = (uint16_t)(1u << (f->mant_bits - 1));
        CHECK(ref_is_nan(f, h) && (h & quiet) && (h >> 15) == (nans[i] >> 31), "%s(NaN 0x%08x) = 0x%04x", f->name,
              nans[i], h);
        if (f == &BF16) CHECK(h == (uint16_t)((nans[i] >> 16) | 0x40u), "bf16(NaN 0x%08x) = 0x%04x", nans[i], h);
    }
}

/* Random f32 bit patterns (LCG), compared with the reference. */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return g_rng;
}

static void test_round_random(const fmt16 * f, int count) {
    for (int i = 0; i < count; ++i) {
        const float x = bits_f32((uint32_t)(rng_next() >> 32));
        if (isnan(x)) continue;
        check_round_f32(f, x);
    }
}

/* ---- f64 → f16/bf16 directly (no double rounding) ----------------------------------- */
static uint16_t lib_from_f64(const fmt16 * f, double d) {
    uint16_t out = 0xdead;
    const int64_t shape[1] = {1};
    const ssm_tensor t = ssm_tensor_make(&out, f == &F16 ? SSM_DTYPE_F16 : SSM_DTYPE_BF16, 1, shape);
    ssmi_set_f64(&t, 0, d);
    return out;
}

static void check_round_f64(const fmt16 * f, double d) {
    const uint16_t want = ref_round(f, d);
    const uint16_t got = lib_from_f64(f, d);
    CHECK(got == want, "%s from f64 %a: got 0x%04x, want 0x%04x", f->name, d, got, want);
}

static void test_round_f64(const fmt16 * f) {
    const double top = f == &F16 ? 65536.0 : ldexp(1.0, 128);
    int double_rounding_cases = 0; /* where f64 → f32 → 16 bits would be wrong */
    for (uint32_t i = 0; i < f->inf; i += 1) {
        const double v = ref_decode(f, (uint16_t)i);
        const double next = (i + 1 == f->inf) ? top : ref_decode(f, (uint16_t)(i + 1));
        const double mid = 0.5 * (v + next);
        const double gap = next - v;
        /* Just above / below the midpoint by far less than an f32 ulp. */
        const double cands[] = {mid, mid + gap * 0x1p-40, mid - gap * 0x1p-40, nextafter(mid, INFINITY),
                                nextafter(mid, -INFINITY), v, v + gap * 0x1p-45};
        for (size_t c = 0; c < sizeof cands / sizeof cands[0]; ++c) {
            check_round_f64(f, cands[c]);
            check_round_f64(f, -cands[c]);
            const uint16_t via_f32 = lib_from_f32(f, (float)cands[c]);
            if (via_f32 != ref_round(f, cands[c])) ++double_rounding_cases;
        }
    }
    /* The trap the direct path avoids must actually be exercised by the cases above. */
    CHECK(double_rounding_cases > 1000, "%s: only %d double-rounding cases exercised", f->name, double_rounding_cases);
    const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, 1e300, -1e300, 1e-300, -1e-300, 4.9e-324,
                               (double)FLT_MAX, (double)FLT_MAX * 1.0000001, 0x1p-25, 0x1.0000000001p-25,
                               0x1p-134, 0x1.0000000001p-134, 0x1p-150, 0x1.0000000001p-150, 65519.99999999,
                               3.39617752923046e38, 3.3961775292304601e38 * (1 + 0x1p-50)};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i) check_round_f64(f, specials[i]);
    for (int i = 0; i < 200000; ++i) { /* random doubles around the format's range */
        const double m = (double)(rng_next() >> 11) * 0x1p-53;
        const int e = (int)(rng_next() % 320) - 170;
        check_round_f64(f, (rng_next() & 1) ? ldexp(m, e) : -ldexp(m, e));
    }
    const uint16_t n = lib_from_f64(f, NAN);
    const uint16_t nn = lib_from_f64(f, -NAN);
    CHECK(ref_is_nan(f, n) && ref_is_nan(f, nn) && (n >> 15) != (nn >> 15), "%s from f64 NaN: 0x%04x 0x%04x", f->name,
          n, nn);
}

/* ---- accessors ----------------------------------------------------------------------- */
static void test_accessors(void) {
    float fbuf[12];
    uint16_t hbuf[12], bbuf[12];
    double dbuf[12];
    int32_t ibuf[12];
    int64_t lbuf[12];
    const int64_t shape[1] = {12};
    const ssm_tensor tf = ssm_tensor_make(fbuf, SSM_DTYPE_F32, 1, shape);
    const ssm_tensor th = ssm_tensor_make(hbuf, SSM_DTYPE_F16, 1, shape);
    const ssm_tensor tb = ssm_tensor_make(bbuf, SSM_DTYPE_BF16, 1, shape);
    const ssm_tensor td = ssm_tensor_make(dbuf, SSM_DTYPE_F64, 1, shape);
    const ssm_tensor ti = ssm_tensor_make(ibuf, SSM_DTYPE_I32, 1, shape);
    const ssm_tensor tl = ssm_tensor_make(lbuf, SSM_DTYPE_I64, 1, shape);
    const ssm_tensor * all[6] = {&tf, &th, &tb, &td, &ti, &tl};
    for (int k = 0; k < 6; ++k) {
        for (int i = 0; i < 12; ++i) ssmi_set_f32(all[k], i, (float)(i - 5));
        for (int i = 0; i < 12; ++i) {
            CHECK(ssmi_get_f64(all[k], i) == (double)(i - 5), "%s get_f64[%d]", ssm_dtype_name(all[k]->dtype), i);
            CHECK(ssmi_get_f32(all[k], i) == (float)(i - 5), "%s get_f32[%d]", ssm_dtype_name(all[k]->dtype), i);
            ssmi_set_f64(all[k], i, (double)(2 * i));
            CHECK(ssmi_get_f64(all[k], i) == (double)(2 * i), "%s set_f64[%d]", ssm_dtype_name(all[k]->dtype), i);
        }
        /* load with stride 3 from offset 1, store back with stride -2 from offset 11 */
        float tmp[4];
        ssmi_load_f32(tmp, all[k]->data, all[k]->dtype, 1, 3, 4);
        for (int i = 0; i < 4; ++i) CHECK(tmp[i] == (float)(2 * (1 + 3 * i)), "%s load[%d]", ssm_dtype_name(all[k]->dtype), i);
        const float src[4] = {-1.0f, -2.0f, -3.0f, -4.0f};
        ssmi_store_f32(all[k]->data, all[k]->dtype, 11, -2, src, 4);
        for (int i = 0; i < 4; ++i)
            CHECK(ssmi_get_f32(all[k], 11 - 2 * i) == src[i], "%s store[%d]", ssm_dtype_name(all[k]->dtype), i);
        CHECK(ssmi_get_f32(all[k], 10) == 20.0f, "%s store touched a neighbour", ssm_dtype_name(all[k]->dtype));
        ssmi_load_f32(tmp, all[k]->data, all[k]->dtype, 0, 1, 4);
        CHECK(tmp[0] == 0.0f && tmp[2] == 4.0f && tmp[3] == 6.0f, "%s contiguous load", ssm_dtype_name(all[k]->dtype));
    }
    CHECK(ssmi_get_i64(&ti, 3) == 6 && ssmi_get_i64(&tl, 4) == 8, "get_i64");
    ibuf[0] = INT32_MIN;
    lbuf[0] = INT64_MAX;
    CHECK(ssmi_get_i64(&ti, 0) == INT32_MIN && ssmi_get_i64(&tl, 0) == INT64_MAX, "get_i64 extremes");
    /* f32 stores round to nearest even in the half formats */
    ssmi_set_f32(&th, 0, 1.0f + 0x1p-11f);
    CHECK(hbuf[0] == 0x3c00, "f16 store of a tie rounds to even: 0x%04x", hbuf[0]);
    ssmi_set_f32(&tb, 0, 1.0f + 0x1p-8f + 0x1p-20f);
    CHECK(bbuf[0] == 0x3f81, "bf16 store above a tie rounds up: 0x%04x", bbuf[0]);
    /* the f32 fast path with stride 1 and a strided f32 store */
    float big[64], out[64];
    for (int i = 0; i < 64; ++i) big[i] = (float)i * 0.5f;
    ssmi_load_f32(out, big, SSM_DTYPE_F32, 3, 1, 61);
    CHECK(memcmp(out, big + 3, 61 * sizeof(float)) == 0, "f32 contiguous load");
    ssmi_load_f32(out, big, SSM_DTYPE_F32, 0, 1, 0); /* n = 0 does nothing */
}

/* ---- status, version, dtype ------------------------------------------------------------ */
static void test_names(void) {
    static const struct { ssm_status s; const char * name; } table[] = {
        {SSM_STATUS_OK, "SSM_STATUS_OK"},
        {SSM_STATUS_INVALID_ARGUMENT, "SSM_STATUS_INVALID_ARGUMENT"},
        {SSM_STATUS_INVALID_SHAPE, "SSM_STATUS_INVALID_SHAPE"},
        {SSM_STATUS_INVALID_LAYOUT, "SSM_STATUS_INVALID_LAYOUT"},
        {SSM_STATUS_UNSUPPORTED, "SSM_STATUS_UNSUPPORTED"},
        {SSM_STATUS_UNSUPPORTED_HARDWARE, "SSM_STATUS_UNSUPPORTED_HARDWARE"},
        {SSM_STATUS_OUT_OF_MEMORY, "SSM_STATUS_OUT_OF_MEMORY"},
        {SSM_STATUS_WORKSPACE_TOO_SMALL, "SSM_STATUS_WORKSPACE_TOO_SMALL"},
        {SSM_STATUS_DEVICE_ERROR, "SSM_STATUS_DEVICE_ERROR"},
        {SSM_STATUS_INTERNAL, "SSM_STATUS_INTERNAL"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i) {
        const char * s = ssm_status_string(table[i].s);
        CHECK(s != NULL && strcmp(s, table[i].name) == 0, "status %d -> %s", (int)table[i].s, s ? s : "(null)");
    }
    const int unknown[] = {-1, 1, 9, 13, 19, 22, 29, 32, 89, 91, 1000, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; ++i) {
        const char * s = ssm_status_string((ssm_status)unknown[i]);
        CHECK(s != NULL && strcmp(s, "SSM_STATUS_UNKNOWN") == 0, "status %d -> %s", unknown[i], s ? s : "(null)");
    }
    CHECK(strcmp(ssm_version(), "0.1.0") == 0, "version %s", ssm_version());
    CHECK(ssm_version_number() == SSM_VERSION_NUMBER && ssm_version_number() == 100, "version number %u",
          ssm_version_number());
    CHECK(ssm_tensor_struct_size() == sizeof(ssm_tensor), "tensor struct size");
    const struct { ssm_dtype d; size_t size; const char * name; } dt[] = {
        {SSM_DTYPE_F32, 4, "f32"}, {SSM_DTYPE_F16, 2, "f16"}, {SSM_DTYPE_BF16, 2, "bf16"},
        {SSM_DTYPE_F64, 8, "f64"}, {SSM_DTYPE_I32, 4, "i32"}, {SSM_DTYPE_I64, 8, "i64"},
        {(ssm_dtype)5, 0, "unknown"}, {(ssm_dtype)-1, 0, "unknown"}};
    for (size_t i = 0; i < sizeof dt / sizeof dt[0]; ++i) {
        CHECK(ssm_dtype_size(dt[i].d) == dt[i].size, "dtype %d size", (int)dt[i].d);
        CHECK(strcmp(ssm_dtype_name(dt[i].d), dt[i].name) == 0, "dtype %d name %s", (int)dt[i].d,
              ssm_dtype_name(dt[i].d));
    }
    CHECK(strcmp(ssm_isa_name(SSM_ISA_AUTO), "auto") == 0 && strcmp(ssm_isa_name(SSM_ISA_SCALAR), "scalar") == 0 &&
              strcmp(ssm_isa_name(SSM_ISA_AVX2), "avx2") == 0 && strcmp(ssm_isa_name(SSM_ISA_AVX512), "avx512") == 0,
          "isa names");
    CHECK(strcmp(ssm_backend_name(SSM_BACKEND_AUTO), "auto") == 0 &&
              strcmp(ssm_backend_name(SSM_BACKEND_REF), "ref") == 0 &&
              strcmp(ssm_backend_name(SSM_BACKEND_CPU), "cpu") == 0 &&
              strcmp(ssm_backend_name(SSM_BACKEND_CUDA), "cuda") == 0,
          "backend names");

    int64_t shape[8] = {2, 3, 4, 5, 6, 7, 8, 9};
    char buf[8];
    const ssm_tensor t = ssm_tensor_make(buf, SSM_DTYPE_F16, 3, shape);
    CHECK(t.data == buf && t.dtype == SSM_DTYPE_F16 && t.device.type == SSM_DEVICE_CPU && t.device.index == 0 &&
              t.ndim == 3 && t.shape[0] == 2 && t.shape[2] == 4 && t.strides[0] == 12 && t.strides[1] == 4 &&
              t.strides[2] == 1,
          "tensor_make (2,3,4)");
    const ssm_tensor t8 = ssm_tensor_make(buf, SSM_DTYPE_F32, 8, shape);
    CHECK(t8.ndim == SSM_MAX_DIMS && t8.strides[SSM_MAX_DIMS - 1] == 1 && t8.strides[0] == 3 * 4 * 5 * 6 * 7,
          "tensor_make clamps ndim");
    const ssm_tensor t0 = ssm_tensor_make(buf, SSM_DTYPE_F32, -3, shape);
    CHECK(t0.ndim == 0 && ssmi_numel(&t0) == 1, "tensor_make scalar");
    CHECK(ssmi_numel(&t) == 24, "numel");
    shape[1] = 0;
    const ssm_tensor te = ssm_tensor_make(buf, SSM_DTYPE_F32, 3, shape);
    CHECK(ssmi_numel(&te) == 0, "numel of an empty tensor");
}

/* ---- context ------------------------------------------------------------------------- */
typedef struct counting_allocator {
    int allocs, frees;
    size_t last_alignment;
} counting_allocator;
static void * count_alloc(void * opaque, size_t size, size_t alignment) {
    counting_allocator * c = opaque;
    ++c->allocs;
    c->last_alignment = alignment;
    void * p = NULL;
    return posix_memalign(&p, alignment, size) == 0 ? p : NULL;
}
static void count_free(void * opaque, void * ptr) {
    counting_allocator * c = opaque;
    if (ptr) ++c->frees;
    free(ptr);
}

/* A device allocator's free that is never called (only its presence is checked). */
static void count_device_free(void * opaque, void * ptr, void * stream) {
    (void)stream;
    count_free(opaque, ptr);
}

static int host_has_avx2(void) { return ssmi_best_isa(ssm_cpu_features()) >= SSM_ISA_AVX2; }
static int host_has_avx512(void) { return ssmi_best_isa(ssm_cpu_features()) == SSM_ISA_AVX512; }

/* On Linux, /proc/cpuinfo's flags are what the kernel found in CPUID and enabled in XCR0 (it
 * drops the AVX-512 flags when it does not save the ZMM state): each feature bit must match
 * its flag. Returns 0 when the file cannot be read (then nothing is checked). */
static int check_features_against_cpuinfo(uint32_t f) {
    FILE * fp = fopen("/proc/cpuinfo", "r");
    if (fp == NULL) return 0;
    char line[8192];
    int  found = 0;
    while (!found && fgets(line, sizeof line, fp) != NULL) {
        if (strncmp(line, "flags", 5) != 0) continue;
        found = 1;
        static const struct {
            uint32_t     bit;
            const char * flag;
        } map[] = {{SSM_CPU_AVX2, "avx2"},         {SSM_CPU_FMA, "fma"},           {SSM_CPU_F16C, "f16c"},
                   {SSM_CPU_AVX512F, "avx512f"},   {SSM_CPU_AVX512BW, "avx512bw"}, {SSM_CPU_AVX512DQ, "avx512dq"},
                   {SSM_CPU_AVX512VL, "avx512vl"}};
        for (size_t i = 0; i < sizeof map / sizeof map[0]; ++i) {
            char want[32];
            snprintf(want, sizeof want, " %s", map[i].flag);
            int listed = 0;
            for (const char * p = strstr(line, want); p != NULL; p = strstr(p + 1, want)) {
                const char end = p[strlen(want)];
                if (end == ' ' || end == '\n' || end == '\0') listed = 1;
            }
            CHECK(listed == !!(f & map[i].bit), "feature %s: /proc/cpuinfo %d, ssm_cpu_features %d", map[i].flag,
                  listed, !!(f & map[i].bit));
        }
    }
    fclose(fp);
    return found;
}

static void test_context(void) {
    ssm_context_params p;
    memset(&p, 0x5a, sizeof p);
    ssm_context_params_init(&p);
    CHECK(p.size == sizeof p && p.num_threads == 1 && p.backend == SSM_BACKEND_AUTO && p.isa == SSM_ISA_AUTO &&
              p.deterministic == 1 && p.ref_mode == SSM_REF_EXACT && p.allocator.alloc == NULL &&
              p.allocator.free == NULL && p.cuda_stream == NULL,
          "params_init defaults");

    for (int32_t n = 1; n <= 4; ++n) {
        ssm_context_params q;
        ssm_context_params_init(&q);
        q.num_threads = n;
        q.backend = SSM_BACKEND_REF;
        ssm_context * ctx = NULL;
        const ssm_status s = ssm_context_create(&q, &ctx);
        CHECK(s == SSM_STATUS_OK && ctx != NULL, "create with %d threads: %s %s", n, ssm_status_string(s),
              ssm_context_last_error(NULL));
        if (ctx == NULL) continue;
        CHECK(ssm_context_num_threads(ctx) == n && ssmi_num_threads(ctx) == n, "num_threads %d", n);
        CHECK(ssm_context_backend(ctx) == SSM_BACKEND_REF, "backend");
        CHECK(ssm_context_isa(ctx) != SSM_ISA_AUTO, "isa resolved");
        CHECK(strcmp(ssm_context_last_error(ctx), "") == 0, "fresh context has no error");
        ssm_context_free(ctx);
    }
    ssm_context_free(NULL);
    CHECK(ssm_context_num_threads(NULL) == 1 && ssmi_num_threads(NULL) == 1, "NULL ctx has one thread");
    CHECK(ssm_context_backend(NULL) == SSM_BACKEND_AUTO, "NULL ctx backend");
    CHECK(ssm_context_isa(NULL) >= SSM_ISA_SCALAR && ssm_context_isa(NULL) <= SSM_ISA_AVX512, "NULL ctx isa");

    { /* NULL params = defaults; 0 threads = online CPUs */
        ssm_context * ctx = NULL;
        CHECK(ssm_context_create(NULL, &ctx) == SSM_STATUS_OK && ssm_context_num_threads(ctx) == 1, "NULL params");
        ssm_context_free(ctx);
        ssm_context_params q;
        ssm_context_params_init(&q);
        q.num_threads = 0;
        ctx = NULL;
        CHECK(ssm_context_create(&q, &ctx) == SSM_STATUS_OK && ssm_context_num_threads(ctx) >= 1, "0 threads");
        ssm_context_free(ctx);
    }

    { /* A params struct of the first layout (it ends after cuda_stream): accepted, the fields it
       * lacks at their defaults, whatever lies past it in memory. */
        _Alignas(ssm_context_params) unsigned char buf[sizeof(ssm_context_params)];
        memset(buf, 0xA5, sizeof buf);
        ssm_context_params q;
        ssm_context_params_init(&q);
        q.size = offsetof(ssm_context_params, device_allocator);
        q.num_threads = 2;
        memcpy(buf, &q, q.size);
        ssm_context * ctx = NULL;
        CHECK(ssm_context_create((const ssm_context_params *)(const void *)buf, &ctx) == SSM_STATUS_OK &&
                  ssm_context_num_threads(ctx) == 2,
              "first-layout params: %s", ssm_context_last_error(NULL));
        ssm_context_free(ctx);
    }

    /* Invalid parameters: status, a message in the thread-local buffer, *out untouched. */
    struct { const char * what; int field; int32_t value; ssm_status want; const char * needle; } bad[] = {
        {"size", 0, 0, SSM_STATUS_INVALID_ARGUMENT, "params.size="},
        {"threads -1", 1, -1, SSM_STATUS_INVALID_ARGUMENT, "params.num_threads=-1"},
        {"threads huge", 1, 100000, SSM_STATUS_INVALID_ARGUMENT, "params.num_threads=100000"},
        {"backend", 2, 7, SSM_STATUS_INVALID_ARGUMENT, "params.backend=7"},
        {"backend -1", 2, -1, SSM_STATUS_INVALID_ARGUMENT, "params.backend=-1"},
        {"isa", 3, 4, SSM_STATUS_INVALID_ARGUMENT, "params.isa=4"},
        {"isa -1", 3, -1, SSM_STATUS_INVALID_ARGUMENT, "params.isa=-1"},
        {"ref_mode", 4, 9, SSM_STATUS_INVALID_ARGUMENT, "params.ref_mode=9"},
        {"allocator half", 5, 0, SSM_STATUS_INVALID_ARGUMENT, "allocator"},
        {"device allocator half", 6, 0, SSM_STATUS_INVALID_ARGUMENT, "device_allocator"},
        {"size between layouts", 7, 0, SSM_STATUS_INVALID_ARGUMENT, "params.size="},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        ssm_context_params q;
        ssm_context_params_init(&q);
        switch (bad[i].field) {
            case 0: q.size = sizeof q - 8; break;
            case 1: q.num_threads = bad[i].value; break;
            case 2: q.backend = bad[i].value; break;
            case 3: q.isa = bad[i].value; break;
            case 4: q.ref_mode = bad[i].value; break;
            case 5: q.allocator.alloc = count_alloc; break;
            case 6: q.device_allocator.free = count_device_free; break;
            case 7: q.size = offsetof(ssm_context_params, device_allocator) + 8; break;
        }
        ssm_context * sentinel = (ssm_context *)&q;
        ssm_context * ctx = sentinel;
        const ssm_status s = ssm_context_create(&q, &ctx);
        const char * msg = ssm_context_last_error(NULL);
        CHECK(s == bad[i].want, "bad %s: %s", bad[i].what, ssm_status_string(s));
        CHECK(ctx == sentinel, "bad %s: *out was written", bad[i].what);
        CHECK(strstr(msg, "context_create: ") == msg && strstr(msg, bad[i].needle) != NULL, "bad %s: message '%s'",
              bad[i].what, msg);
        if (ctx != sentinel) ssm_context_free(ctx);
    }
    CHECK(ssm_context_create(NULL, NULL) == SSM_STATUS_INVALID_ARGUMENT, "out NULL");

    { /* explicit ISAs */
        ssm_context_params q;
        ssm_context_params_init(&q);
        q.isa = SSM_ISA_SCALAR;
        ssm_context * ctx = NULL;
        CHECK(ssm_context_create(&q, &ctx) == SSM_STATUS_OK && ssm_context_isa(ctx) == SSM_ISA_SCALAR, "isa scalar");
        ssm_context_free(ctx);
        q.isa = SSM_ISA_AVX2;
        ctx = NULL;
        const ssm_status s = ssm_context_create(&q, &ctx);
        if (host_has_avx2()) {
            CHECK(s == SSM_STATUS_OK && ssm_context_isa(ctx) == SSM_ISA_AVX2, "isa avx2 on an avx2 host");
        } else {
            CHECK(s == SSM_STATUS_UNSUPPORTED_HARDWARE && strstr(ssm_context_last_error(NULL), "avx2") != NULL,
                  "isa avx2 on a host without it: %s", ssm_status_string(s));
        }
        ssm_context_free(ctx);
        q.isa = SSM_ISA_AVX512;
        ctx = NULL;
        const ssm_status s5 = ssm_context_create(&q, &ctx);
        if (host_has_avx512()) {
            CHECK(s5 == SSM_STATUS_OK && ssm_context_isa(ctx) == SSM_ISA_AVX512, "isa avx512 on an avx512 host");
        } else {
            CHECK(s5 == SSM_STATUS_UNSUPPORTED_HARDWARE && strstr(ssm_context_last_error(NULL), "avx512") != NULL,
                  "isa avx512 on a host without it: %s", ssm_status_string(s5));
        }
        ssm_context_free(ctx);
    }

    { /* SSMOPS_ISA override (the caller's setting is restored afterwards) */
        const char * old = getenv("SSMOPS_ISA");
        char * saved = old ? strdup(old) : NULL;
        ssm_context_params q;
        ssm_context_params_init(&q);
        ssm_context * ctx = NULL;

        setenv("SSMOPS_ISA", "scalar", 1);
        CHECK(ssm_context_create(&q, &ctx) == SSM_STATUS_OK && ssm_context_isa(ctx) == SSM_ISA_SCALAR,
              "SSMOPS_ISA=scalar");
        ssm_context_free(ctx);

        setenv("SSMOPS_ISA", "bogus", 1);
        ssm_context * untouched = NULL;
        ssm_status s = ssm_context_create(&q, &untouched);
        CHECK(s == SSM_STATUS_INVALID_ARGUMENT && untouched == NULL, "SSMOPS_ISA=bogus: %s", ssm_status_string(s));
        CHECK(strstr(ssm_context_last_error(NULL), "SSMOPS_ISA=bogus") != NULL, "bogus message '%s'",
              ssm_context_last_error(NULL));
        q.isa = SSM_ISA_SCALAR; /* an explicit ISA does not read the environment */
        ctx = NULL;
        CHECK(ssm_context_create(&q, &ctx) == SSM_STATUS_OK && ssm_context_isa(ctx) == SSM_ISA_SCALAR,
              "explicit isa ignores SSMOPS_ISA");
        ssm_context_free(ctx);
        q.isa = SSM_ISA_AUTO;

        setenv("SSMOPS_ISA", "avx2", 1);
        ctx = NULL;
        s = ssm_context_create(&q, &ctx);
        if (host_has_avx2()) {
            CHECK(s == SSM_STATUS_OK && ssm_context_isa(ctx) == SSM_ISA_AVX2, "SSMOPS_ISA=avx2");
        } else {
            CHECK(s == SSM_STATUS_UNSUPPORTED_HARDWARE, "SSMOPS_ISA=avx2 without avx2: %s", ssm_status_string(s));
        }
        ssm_context_free(ctx);

        setenv("SSMOPS_ISA", "avx512", 1);
        ctx = NULL;
        s = ssm_context_create(&q, &ctx);
        if (host_has_avx512()) {
            CHECK(s == SSM_STATUS_OK && ssm_context_isa(ctx) == SSM_ISA_AVX512, "SSMOPS_ISA=avx512");
        } else {
            CHECK(s == SSM_STATUS_UNSUPPORTED_HARDWARE, "SSMOPS_ISA=avx512 without avx512: %s", ssm_status_string(s));
        }
        ssm_context_free(ctx);

        unsetenv("SSMOPS_ISA");
        ctx = NULL;
        CHECK(ssm_context_create(&q, &ctx) == SSM_STATUS_OK &&
                  ssm_context_isa(ctx) == ssmi_best_isa(ssm_cpu_features()),
              "AUTO without SSMOPS_ISA = best");
        ssm_context_free(ctx);
        if (saved) {
            setenv("SSMOPS_ISA", saved, 1);
            free(saved);
        }
    }

    { /* params.cuda_portable: 0 or 1, kept by the context; the environment is not read */
        const char * old = getenv("SSMOPS_CUDA_PORTABLE");
        char *       saved = old ? strdup(old) : NULL;
        setenv("SSMOPS_CUDA_PORTABLE", "1", 1);
        static const struct {
            int32_t value;
            int     ok;
        } cases[] = {{1, 1}, {0, 1}, {2, 0}, {-1, 0}};
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
            ssm_context_params p;
            ssm_context_params_init(&p);
            p.cuda_portable = cases[i].value;
            ssm_context *    ctx = NULL;
            const ssm_status s = ssm_context_create(&p, &ctx);
            if (cases[i].ok) {
                CHECK(s == SSM_STATUS_OK && ssmi_cuda_portable(ctx) == cases[i].value, "cuda_portable=%d: %s, mode %d",
                      (int)cases[i].value, ssm_status_string(s), ctx ? (int)ssmi_cuda_portable(ctx) : -1);
            } else {
                CHECK(s == SSM_STATUS_INVALID_ARGUMENT && ctx == NULL, "cuda_portable=%d: %s", (int)cases[i].value,
                      ssm_status_string(s));
                CHECK(strstr(ssm_context_last_error(NULL), "cuda_portable") != NULL, "message '%s'",
                      ssm_context_last_error(NULL));
            }
            ssm_context_free(ctx);
        }
        ssm_context * ctx = NULL;
        CHECK(ssm_context_create(NULL, &ctx) == SSM_STATUS_OK && ssmi_cuda_portable(ctx) == 0 &&
                  ssmi_cuda_portable(NULL) == 0,
              "defaults: not portable, whatever SSMOPS_CUDA_PORTABLE says");
        ssm_context_free(ctx);
        if (saved) {
            setenv("SSMOPS_CUDA_PORTABLE", saved, 1);
            free(saved);
        } else {
            unsetenv("SSMOPS_CUDA_PORTABLE");
        }
    }

    { /* features and best ISA */
        const uint32_t f = ssm_cpu_features();
        CHECK(f == ssmi_cpu_features(), "public and internal features agree");
#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
        if (!check_features_against_cpuinfo(f)) printf("test_core: no /proc/cpuinfo flags: features not cross-checked\n");
#endif
        CHECK(ssmi_best_isa(SSM_CPU_AVX2 | SSM_CPU_FMA | SSM_CPU_F16C) == SSM_ISA_AVX2, "best isa with all three");
        CHECK(ssmi_best_isa(SSM_CPU_AVX2 | SSM_CPU_FMA) == SSM_ISA_SCALAR, "AVX2 needs F16C too");
        CHECK(ssmi_best_isa(SSM_CPU_AVX2 | SSM_CPU_F16C) == SSM_ISA_SCALAR, "AVX2 needs FMA too");
        CHECK(ssmi_best_isa(0) == SSM_ISA_SCALAR, "no features = scalar");
        const uint32_t avx2 = SSM_CPU_AVX2 | SSM_CPU_FMA | SSM_CPU_F16C;
        const uint32_t a512 = SSM_CPU_AVX512F | SSM_CPU_AVX512BW | SSM_CPU_AVX512DQ | SSM_CPU_AVX512VL;
        CHECK(ssmi_best_isa(avx2 | a512) == SSM_ISA_AVX512, "best isa with the AVX2 set and AVX-512 F/BW/DQ/VL");
        CHECK(ssmi_best_isa(a512) == SSM_ISA_SCALAR, "AVX-512 without the AVX2 set = scalar");
        CHECK(ssmi_best_isa(avx2 | SSM_CPU_AVX512F) == SSM_ISA_AVX2, "AVX-512F alone = avx2");
        const uint32_t each[4] = {SSM_CPU_AVX512F, SSM_CPU_AVX512BW, SSM_CPU_AVX512DQ, SSM_CPU_AVX512VL};
        for (int i = 0; i < 4; ++i)
            CHECK(ssmi_best_isa(avx2 | (a512 & ~each[i])) == SSM_ISA_AVX2, "AVX-512 without feature bit 0x%x = avx2",
                  each[i]);
        printf("test_core: cpu features 0x%x (avx2 %d fma %d f16c %d avx512 f %d bw %d dq %d vl %d), best isa %s\n", f,
               !!(f & SSM_CPU_AVX2), !!(f & SSM_CPU_FMA), !!(f & SSM_CPU_F16C), !!(f & SSM_CPU_AVX512F),
               !!(f & SSM_CPU_AVX512BW), !!(f & SSM_CPU_AVX512DQ), !!(f & SSM_CPU_AVX512VL),
               ssm_isa_name(ssmi_best_isa(f)));
    }

    { /* allocator: ssmi_alloc goes through it, aligned, and every byte is given back */
        counting_allocator counter = {0, 0, 0};
        ssm_context_params q;
        ssm_context_params_init(&q);
        q.num_threads = 2;
        q.allocator.alloc = count_alloc;
        q.allocator.free = count_free;
        q.allocator.opaque = &counter;
        ssm_context * ctx = NULL;
        CHECK(ssm_context_create(&q, &ctx) == SSM_STATUS_OK, "create with an allocator");
        /* the context, the pool and its worker table: no byte of a context bypasses it */
        CHECK(counter.allocs == 3, "a 2-thread context takes 3 allocations from its allocator, got %d",
              counter.allocs);
        const int base = counter.allocs;
        void * a = ssmi_alloc(ctx, 1000);
        CHECK(a != NULL && ((uintptr_t)a % SSMI_ALIGN) == 0 && counter.allocs == base + 1 &&
                  counter.last_alignment == SSMI_ALIGN,
              "ssmi_alloc through the allocator");
        memset(a, 1, 1000);
        ssmi_free(ctx, a);
        ssmi_free(ctx, NULL);
        CHECK(ssmi_alloc(ctx, 0) == NULL, "ssmi_alloc(0) is NULL");
        ssm_context_free(ctx);
        CHECK(counter.allocs == counter.frees, "allocator: %d allocs, %d frees", counter.allocs, counter.frees);
        void * b = ssmi_alloc(NULL, 12345);
        CHECK(b != NULL && ((uintptr_t)b % SSMI_ALIGN) == 0, "ssmi_alloc(NULL ctx) aligned");
        memset(b, 2, 12345);
        ssmi_free(NULL, b);
    }
}

/* ---- errors ---------------------------------------------------------------------------- */
static void * error_thread(void * arg) {
    int * ok = arg;
    *ok = strcmp(ssm_context_last_error(NULL), "") == 0; /* another thread's buffer is separate */
    ssmi_error(NULL, SSM_STATUS_INTERNAL, "worker: %d", 7);
    *ok = *ok && strcmp(ssm_context_last_error(NULL), "worker: 7") == 0;
    return NULL;
}

static ssm_status never_called(void * arg, int32_t rep) {
    (void)arg, (void)rep;
    return SSM_STATUS_OK;
}

/* The CUDA timing helpers refuse bad arguments before touching a device (INVALID_ARGUMENT in a
 * CUDA build, with or without a GPU) or report that the backend is not built (UNSUPPORTED);
 * either way the message names the helper. */
static void test_cuda_timing_arguments(void) {
    float ms[1];
    static const struct {
        const char * name;
        int          cold;
    } helpers[] = {{"cuda_time", 0}, {"cuda_time_cold", 1}};
    for (int h = 0; h < 2; ++h) {
        for (int c = 0; c < 3; ++c) {
            ssm_status (*fn)(void *, int32_t) = c == 0 ? NULL : never_called;
            const int32_t reps = c == 1 ? -1 : 1;
            float *       out = c == 2 ? NULL : ms;
            const ssm_status st = helpers[h].cold ? ssm_cuda_time_cold(NULL, fn, NULL, reps, out)
                                                  : ssm_cuda_time(NULL, fn, NULL, reps, out);
            CHECK(st == SSM_STATUS_INVALID_ARGUMENT || st == SSM_STATUS_UNSUPPORTED, "%s case %d: status %d",
                  helpers[h].name, c, (int)st);
            CHECK(strncmp(ssm_context_last_error(NULL), helpers[h].name, strlen(helpers[h].name)) == 0 &&
                      ssm_context_last_error(NULL)[strlen(helpers[h].name)] == ':',
                  "%s case %d: message '%s'", helpers[h].name, c, ssm_context_last_error(NULL));
        }
    }
}

static void test_errors(void) {
    const ssm_status s = ssmi_error(NULL, SSM_STATUS_INVALID_SHAPE, "op: x.shape[%d]=%d must be %d", 2, 6, 4);
    CHECK(s == SSM_STATUS_INVALID_SHAPE, "ssmi_error returns its status");
    CHECK(strcmp(ssm_context_last_error(NULL), "op: x.shape[2]=6 must be 4") == 0, "thread-local message '%s'",
          ssm_context_last_error(NULL));
    pthread_t th;
    int ok = 0;
    pthread_create(&th, NULL, error_thread, &ok);
    pthread_join(th, NULL);
    CHECK(ok, "thread-local buffers are per thread");
    CHECK(strcmp(ssm_context_last_error(NULL), "op: x.shape[2]=6 must be 4") == 0, "other thread left ours alone");

    ssm_context * ctx = NULL;
    ssm_context_create(NULL, &ctx); /* clears the thread-local message, so set it again */
    ssmi_error(NULL, SSM_STATUS_INVALID_SHAPE, "op: x.shape[%d]=%d must be %d", 2, 6, 4);
    ssmi_error(ctx, SSM_STATUS_UNSUPPORTED, "ctx message");
    CHECK(strcmp(ssm_context_last_error(ctx), "ctx message") == 0, "context message");
    CHECK(strcmp(ssm_context_last_error(NULL), "op: x.shape[2]=6 must be 4") == 0, "ctx error not in TLS");
    ssmi_clear_error(ctx);
    CHECK(strcmp(ssm_context_last_error(ctx), "") == 0, "clear ctx error");
    ssm_context_free(ctx);
    ssmi_clear_error(NULL);
    CHECK(strcmp(ssm_context_last_error(NULL), "") == 0, "clear TLS error");
    /* long messages are truncated, never overflow */
    char longname[2000];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    ssmi_error(NULL, SSM_STATUS_INTERNAL, "%s", longname);
    CHECK(strlen(ssm_context_last_error(NULL)) == SSMI_ERROR_LEN - 1, "long message truncated");
}

/* ---- threadpool ------------------------------------------------------------------------ */
#define MAX_TASKS 1000
typedef struct pf_state {
    atomic_int  hits[MAX_TASKS];
    atomic_int  bad_thread;
    atomic_int  seen_thread[8];
    int32_t     nthreads;
    ssm_context * ctx;
    int         sleep_us;
} pf_state;

static void pf_task(void * arg, int64_t task, int32_t thread) {
    pf_state * st = arg;
    if (task < 0 || task >= MAX_TASKS) {
        atomic_fetch_add(&st->bad_thread, 1000);
        return;
    }
    atomic_fetch_add(&st->hits[task], 1);
    if (thread < 0 || thread >= st->nthreads) atomic_fetch_add(&st->bad_thread, 1);
    else atomic_fetch_add(&st->seen_thread[thread], 1);
    if (st->sleep_us > 0) {
        const struct timespec ts = {0, (long)st->sleep_us * 1000L};
        nanosleep(&ts, NULL);
    }
}

/* A task that runs a nested loop on the same context: it must run serially on this
 * thread's id. */
typedef struct nested_state {
    ssm_context * ctx;
    atomic_int    inner_hits;
    atomic_int    mismatched_thread;
} nested_state;
static _Thread_local int32_t t_outer_thread = -1;
static void nested_inner_check(void * arg, int64_t task, int32_t thread) {
    nested_state * st = arg;
    (void)task;
    if (thread != t_outer_thread) atomic_fetch_add(&st->mismatched_thread, 1);
    atomic_fetch_add(&st->inner_hits, 1);
}
static void nested_outer(void * arg, int64_t task, int32_t thread) {
    nested_state * st = arg;
    (void)task;
    t_outer_thread = thread;
    ssmi_parallel_for(st->ctx, 5, nested_inner_check, st);
    t_outer_thread = -1;
}

static void run_pf(ssm_context * ctx, int32_t nthreads, int64_t ntasks, int sleep_us, pf_state * st) {
    for (int i = 0; i < MAX_TASKS; ++i) atomic_store(&st->hits[i], 0);
    for (int i = 0; i < 8; ++i) atomic_store(&st->seen_thread[i], 0);
    atomic_store(&st->bad_thread, 0);
    st->nthreads = nthreads;
    st->sleep_us = sleep_us;
    ssmi_parallel_for(ctx, ntasks, pf_task, st);
}

static void test_threadpool(void) {
    static pf_state st; /* large: keep it off the stack */
    const int64_t counts[] = {0, 1, 2, 3, 4, 7, 64, 1000};
    for (int32_t n = 0; n <= 4; ++n) { /* n == 0: ctx NULL */
        ssm_context * ctx = NULL;
        if (n > 0) {
            ssm_context_params q;
            ssm_context_params_init(&q);
            q.num_threads = n;
            ssm_context_create(&q, &ctx);
        }
        const int32_t nthreads = n > 0 ? n : 1;
        for (int rep = 0; rep < 50; ++rep) {
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; ++c) {
                run_pf(ctx, nthreads, counts[c], 0, &st);
                int wrong = 0;
                for (int64_t i = 0; i < MAX_TASKS; ++i) {
                    const int want = i < counts[c] ? 1 : 0;
                    if (atomic_load(&st.hits[i]) != want) ++wrong;
                }
                CHECK(wrong == 0, "threads %d tasks %lld: %d tasks ran the wrong number of times", n,
                      (long long)counts[c], wrong);
                CHECK(atomic_load(&st.bad_thread) == 0, "threads %d tasks %lld: thread id out of range", n,
                      (long long)counts[c]);
            }
        }
        /* Sleeping tasks give the workers time to join in: more than one thread works. */
        if (nthreads > 1) {
            run_pf(ctx, nthreads, 40, 2000, &st);
            int used = 0;
            for (int i = 0; i < nthreads; ++i) used += atomic_load(&st.seen_thread[i]) > 0;
            CHECK(used >= 2, "threads %d: only %d thread(s) ran 40 sleeping tasks", n, used);
        } else {
            run_pf(ctx, nthreads, 10, 0, &st);
            CHECK(atomic_load(&st.seen_thread[0]) == 10, "serial runs on thread 0");
        }
        /* Nested loop on the same context: serial, on the outer task's thread id. */
        nested_state ns;
        ns.ctx = ctx;
        atomic_init(&ns.inner_hits, 0);
        atomic_init(&ns.mismatched_thread, 0);
        ssmi_parallel_for(ctx, 16, nested_outer, &ns);
        CHECK(atomic_load(&ns.inner_hits) == 16 * 5 && atomic_load(&ns.mismatched_thread) == 0,
              "threads %d: nested loops (%d inner hits, %d wrong ids)", n, atomic_load(&ns.inner_hits),
              atomic_load(&ns.mismatched_thread));
        ssm_context_free(ctx);
    }
}

/* ---- argument checks ------------------------------------------------------------------- */
static ssm_tensor view(void * data, ssm_dtype dtype, int32_t ndim, const int64_t * shape) {
    return ssm_tensor_make(data, dtype, ndim, shape);
}

#define EXPECT_MSG(call, want_status, want_msg)                                                         \
    do {                                                                                                \
        ssmi_clear_error(NULL);                                                                         \
        const ssm_status s_ = (call);                                                                   \
        CHECK(s_ == (want_status), "%s -> %s, want %s (%s)", #call, ssm_status_string(s_),              \
              ssm_status_string(want_status), ssm_context_last_error(NULL));                            \
        CHECK(strstr(ssm_context_last_error(NULL), (want_msg)) != NULL, "%s message '%s' lacks '%s'", #call, \
              ssm_context_last_error(NULL), (want_msg));                                                \
    } while (0)

static void test_checks(void) {
    static float buf[4096];
    const uint32_t F = SSMI_FLOAT_DTYPES;
    const int64_t s4[4] = {2, 3, 4, 5};
    const int64_t want4[4] = {2, 3, 4, 5};
    const int64_t any4[4] = {-1, 3, -1, -1};
    ssm_tensor x = view(buf, SSM_DTYPE_F32, 4, s4);

    CHECK(ssmi_check_tensor(NULL, "op", "x", &x, 0, 4, want4, F) == SSM_STATUS_OK, "valid tensor");
    CHECK(ssmi_check_tensor(NULL, "op", "x", &x, 0, 4, any4, F) == SSM_STATUS_OK, "valid with wildcards");
    CHECK(ssmi_check_tensor(NULL, "op", "x", &x, 0, 4, NULL, F) == SSM_STATUS_OK, "valid without want");

    ssm_tensor absent = x;
    absent.data = NULL;
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &absent, 0, 4, want4, F), SSM_STATUS_INVALID_ARGUMENT,
               "op: x is required (data is NULL)");
    CHECK(ssmi_check_tensor(NULL, "op", "x", &absent, 1, 4, want4, F) == SSM_STATUS_OK, "optional absent is OK");
    CHECK(ssmi_check_tensor(NULL, "op", "x", NULL, 1, 4, want4, F) == SSM_STATUS_OK, "optional NULL pointer is OK");
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", NULL, 0, 4, want4, F), SSM_STATUS_INVALID_ARGUMENT,
               "op: x is required");
    CHECK(ssmi_check_output(NULL, "op", "y", &absent, 1, 4, want4, F) == SSM_STATUS_OK, "optional absent output");

    ssm_tensor dev = x;
    dev.device.type = SSM_DEVICE_CUDA;
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &dev, 0, 4, want4, F), SSM_STATUS_INVALID_LAYOUT, "op: x.device");

    const int64_t s3[3] = {2, 3, 4};
    ssm_tensor x3 = view(buf, SSM_DTYPE_F32, 3, s3);
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &x3, 0, 4, want4, F), SSM_STATUS_INVALID_SHAPE,
               "op: x.ndim=3 must be 4");
    CHECK(strcmp(ssm_context_last_error(NULL), "op: x.ndim=3 must be 4") == 0, "exact ndim message '%s'",
          ssm_context_last_error(NULL));

    const int64_t s6[4] = {2, 3, 6, 5};
    ssm_tensor x6 = view(buf, SSM_DTYPE_F32, 4, s6);
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &x6, 0, 4, want4, F), SSM_STATUS_INVALID_SHAPE,
               "op: x.shape[2]=6 must be 4");
    CHECK(strcmp(ssm_context_last_error(NULL), "op: x.shape[2]=6 must be 4") == 0, "exact shape message '%s'",
          ssm_context_last_error(NULL));

    ssm_tensor neg = x;
    neg.shape[1] = -3;
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &neg, 0, 4, any4, F), SSM_STATUS_INVALID_SHAPE,
               "op: x.shape[1]=-3 must be non-negative");
    neg.shape[1] = 3;
    neg.shape[0] = -1;
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &neg, 0, 4, any4, F), SSM_STATUS_INVALID_SHAPE, "x.shape[0]=-1");

    ssm_tensor xi = view(buf, SSM_DTYPE_I32, 4, s4);
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &xi, 0, 4, want4, F), SSM_STATUS_INVALID_LAYOUT, "x.dtype=i32");
    CHECK(strstr(ssm_context_last_error(NULL), "f32") != NULL, "dtype message lists the allowed dtypes");
    CHECK(ssmi_check_tensor(NULL, "op", "seq_idx", &xi, 0, 4, want4, SSMI_INDEX_DTYPES) == SSM_STATUS_OK,
          "i32 index tensor OK");
    ssm_tensor xh = view(buf, SSM_DTYPE_F16, 4, s4);
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "seq_idx", &xh, 0, 4, want4, SSMI_INDEX_DTYPES),
               SSM_STATUS_INVALID_LAYOUT, "seq_idx.dtype=f16");
    ssm_tensor xu = x;
    xu.dtype = 7;
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &xu, 0, 4, want4, 0xffffffffu), SSM_STATUS_INVALID_LAYOUT,
               "x.dtype=7");
    xu.dtype = -2;
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &xu, 0, 4, want4, F), SSM_STATUS_INVALID_LAYOUT, "x.dtype=-2");

    /* Extent overflow: element count, bytes, and strides. Data is never touched. */
    const int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
    ssm_tensor h = view(buf, SSM_DTYPE_F32, 2, huge);
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &h, 0, 2, NULL, F), SSM_STATUS_INVALID_SHAPE,
               "op: x.shape=(1099511627776, 1099511627776)");
    const int64_t bytes_over[2] = {INT64_C(1) << 31, INT64_C(1) << 31}; /* 2^62 elements, 2^64 bytes */
    ssm_tensor hb = view(buf, SSM_DTYPE_F32, 2, bytes_over);
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &hb, 0, 2, NULL, F), SSM_STATUS_INVALID_SHAPE, "op: x.shape=");
    const int64_t two[1] = {2};
    ssm_tensor hs = view(buf, SSM_DTYPE_F32, 1, two);
    hs.strides[0] = INT64_MAX / 2;
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &hs, 0, 1, NULL, F), SSM_STATUS_INVALID_SHAPE, "op: x ");
    hs.strides[0] = INT64_MIN;
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &hs, 0, 1, NULL, F), SSM_STATUS_INVALID_SHAPE, "op: x ");
    const int64_t s2x2[2] = {2, 2};
    ssm_tensor hs2 = view(buf, SSM_DTYPE_F32, 2, s2x2); /* each reach fits, their sum does not */
    hs2.strides[0] = INT64_MAX / 2 + 1;
    hs2.strides[1] = -(INT64_MAX / 2);
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &hs2, 0, 2, NULL, F), SSM_STATUS_INVALID_SHAPE, "op: x ");
    hs2.strides[0] = INT64_MAX / 4; /* element span fits, byte span (×4) does not */
    hs2.strides[1] = 1;
    EXPECT_MSG(ssmi_check_tensor(NULL, "op", "x", &hs2, 0, 2, NULL, F), SSM_STATUS_INVALID_SHAPE, "op: x ");
    hs2.strides[0] = INT64_MAX / 64; /* fits: accepted (never dereferenced) */
    CHECK(ssmi_check_tensor(NULL, "op", "x", &hs2, 0, 2, NULL, F) == SSM_STATUS_OK, "large but fitting stride");
    /* A size-1 dim's stride is never used, whatever it is. */
    const int64_t one2[2] = {1, 3};
    ssm_tensor o1 = view(buf, SSM_DTYPE_F32, 2, one2);
    o1.strides[0] = INT64_MIN;
    CHECK(ssmi_check_tensor(NULL, "op", "x", &o1, 0, 2, NULL, F) == SSM_STATUS_OK, "stride of a size-1 dim ignored");
    CHECK(ssmi_check_output(NULL, "op", "y", &o1, 0, 2, NULL, F) == SSM_STATUS_OK, "output size-1 dim ignored");
    /* Empty tensors are valid even with absurd other dims. */
    const int64_t empty[3] = {0, INT64_C(1) << 40, INT64_C(1) << 40};
    ssm_tensor e = view(buf, SSM_DTYPE_F32, 3, empty);
    CHECK(ssmi_check_tensor(NULL, "op", "x", &e, 0, 3, NULL, F) == SSM_STATUS_OK, "empty tensor valid");
    CHECK(ssmi_check_output(NULL, "op", "y", &e, 0, 3, NULL, F) == SSM_STATUS_OK, "empty output valid");
    /* ndim 0 scalar */
    ssm_tensor sc = view(buf, SSM_DTYPE_F64, 0, NULL);
    CHECK(ssmi_check_tensor(NULL, "op", "s", &sc, 0, 0, NULL, F) == SSM_STATUS_OK, "scalar valid");

    /* Outputs */
    CHECK(ssmi_check_output(NULL, "op", "y", &x, 0, 4, want4, F) == SSM_STATUS_OK, "contiguous output");
    ssm_tensor y = x;
    y.strides[1] = 0;
    EXPECT_MSG(ssmi_check_output(NULL, "op", "y", &y, 0, 4, want4, F), SSM_STATUS_INVALID_LAYOUT,
               "op: y.strides[1]=0");
    CHECK(ssmi_check_tensor(NULL, "op", "y", &y, 0, 4, want4, F) == SSM_STATUS_OK, "broadcast input is fine");
    const int64_t s34[2] = {3, 4};
    ssm_tensor a = view(buf, SSM_DTYPE_F32, 2, s34);
    a.strides[0] = 2; /* rows overlap: (0,2) and (1,0) share */
    EXPECT_MSG(ssmi_check_output(NULL, "op", "y", &a, 0, 2, NULL, F), SSM_STATUS_INVALID_LAYOUT, "y.strides[0]=2");
    a.strides[0] = 4; /* exactly contiguous */
    CHECK(ssmi_check_output(NULL, "op", "y", &a, 0, 2, NULL, F) == SSM_STATUS_OK, "row-major output");
    a.strides[0] = 1; /* transposed (column-major) */
    a.strides[1] = 3;
    CHECK(ssmi_check_output(NULL, "op", "y", &a, 0, 2, NULL, F) == SSM_STATUS_OK, "transposed output");
    a.strides[0] = -7; /* padded rows walking backwards */
    a.strides[1] = 1;
    CHECK(ssmi_check_output(NULL, "op", "y", &a, 0, 2, NULL, F) == SSM_STATUS_OK, "negative padded output");
    a.strides[0] = -3; /* backwards rows overlapping by one */
    EXPECT_MSG(ssmi_check_output(NULL, "op", "y", &a, 0, 2, NULL, F), SSM_STATUS_INVALID_LAYOUT, "y.strides[0]=-3");
    a.strides[0] = 4; /* equal |strides| */
    a.strides[1] = 4;
    EXPECT_MSG(ssmi_check_output(NULL, "op", "y", &a, 0, 2, NULL, F), SSM_STATUS_INVALID_LAYOUT, "y.strides[");
    y = x;
    y.strides[0] = 0; /* zero stride allowed on a size-1 dim only */
    y.shape[0] = 1;
    const int64_t w1[4] = {1, 3, 4, 5};
    CHECK(ssmi_check_output(NULL, "op", "y", &y, 0, 4, w1, F) == SSM_STATUS_OK, "zero stride on a size-1 dim");
    /* Output checks still run the input rules. */
    EXPECT_MSG(ssmi_check_output(NULL, "op", "y", &x3, 0, 4, want4, F), SSM_STATUS_INVALID_SHAPE, "y.ndim=3");

    /* Overlap between an output and an input */
    const int64_t s8[1] = {8};
    ssm_tensor out = view(buf, SSM_DTYPE_F32, 1, s8);
    ssm_tensor in = view(buf + 8, SSM_DTYPE_F32, 1, s8);
    CHECK(ssmi_check_no_overlap(NULL, "op", "out", &out, "x", &in) == SSM_STATUS_OK, "adjacent views");
    in.data = buf + 7;
    EXPECT_MSG(ssmi_check_no_overlap(NULL, "op", "out", &out, "x", &in), SSM_STATUS_INVALID_LAYOUT,
               "op: out overlaps x");
    in.data = buf + 20; /* negative stride: covers buf[6..20] */
    in.strides[0] = -2;
    EXPECT_MSG(ssmi_check_no_overlap(NULL, "op", "out", &out, "x", &in), SSM_STATUS_INVALID_LAYOUT, "out overlaps x");
    in.data = buf + 22; /* covers buf[8..22] */
    CHECK(ssmi_check_no_overlap(NULL, "op", "out", &out, "x", &in) == SSM_STATUS_OK, "negative stride, disjoint");
    ssm_tensor in16 = view((char *)(buf + 8) - 2, SSM_DTYPE_F16, 1, s8); /* last f32 byte pair of out */
    EXPECT_MSG(ssmi_check_no_overlap(NULL, "op", "out", &out, "x", &in16), SSM_STATUS_INVALID_LAYOUT,
               "out overlaps x");
    ssm_tensor in_abs = in;
    in_abs.data = NULL;
    CHECK(ssmi_check_no_overlap(NULL, "op", "out", &out, "x", &in_abs) == SSM_STATUS_OK, "absent input");
    CHECK(ssmi_check_no_overlap(NULL, "op", "out", &in_abs, "x", &out) == SSM_STATUS_OK, "absent output");
    ssm_tensor empty_in = view(buf, SSM_DTYPE_F32, 3, empty);
    CHECK(ssmi_check_no_overlap(NULL, "op", "out", &out, "x", &empty_in) == SSM_STATUS_OK, "empty input");
    ssm_tensor bcast = view(buf + 3, SSM_DTYPE_F32, 1, s8); /* broadcast input inside out */
    bcast.strides[0] = 0;
    EXPECT_MSG(ssmi_check_no_overlap(NULL, "op", "out", &out, "x", &bcast), SSM_STATUS_INVALID_LAYOUT,
               "out overlaps x");

    /* With a context, messages go to the context, not the thread-local buffer. */
    ssm_context * ctx = NULL;
    ssm_context_create(NULL, &ctx);
    ssmi_clear_error(NULL);
    CHECK(ssmi_check_tensor(ctx, "op", "x", &x6, 0, 4, want4, F) == SSM_STATUS_INVALID_SHAPE, "ctx check");
    CHECK(strcmp(ssm_context_last_error(ctx), "op: x.shape[2]=6 must be 4") == 0, "ctx message '%s'",
          ssm_context_last_error(ctx));
    CHECK(strcmp(ssm_context_last_error(NULL), "") == 0, "TLS untouched by a ctx error");
    ssm_context_free(ctx);
}

/* DLPack views: dtypes, devices, strides, offsets, and what is refused. */
static void test_dlpack(void) {
    float         buf[24];
    int64_t       shape[3] = {2, 3, 4}, strides[3] = {1, 2, 6};
    ssm_dl_tensor dl;
    memset(&dl, 0, sizeof dl);
    dl.data = buf, dl.device.device_type = 1, dl.ndim = 3, dl.dtype.code = 2, dl.dtype.bits = 32;
    dl.dtype.lanes = 1, dl.shape = shape;
    ssm_tensor t;
    CHECK(ssm_tensor_from_dlpack(NULL, &dl, &t) == SSM_STATUS_OK && t.data == buf && t.dtype == SSM_DTYPE_F32 &&
              t.ndim == 3 && t.strides[0] == 12 && t.strides[1] == 4 && t.strides[2] == 1 &&
              t.device.type == SSM_DEVICE_CPU,
          "compact f32 view");
    dl.strides = strides, dl.byte_offset = 8;
    CHECK(ssm_tensor_from_dlpack(NULL, &dl, &t) == SSM_STATUS_OK && t.data == (char *)buf + 8 && t.strides[0] == 1 &&
              t.strides[2] == 6,
          "strided view with a byte offset");
    dl.byte_offset = 6;
    CHECK(ssm_tensor_from_dlpack(NULL, &dl, &t) == SSM_STATUS_INVALID_LAYOUT, "byte_offset not a multiple of 4");
    dl.byte_offset = 0;
    static const struct { uint8_t code, bits; int32_t want; } dts[] = {
        {2, 16, SSM_DTYPE_F16}, {4, 16, SSM_DTYPE_BF16}, {2, 64, SSM_DTYPE_F64}, {0, 32, SSM_DTYPE_I32},
        {0, 64, SSM_DTYPE_I64}, {1, 8, -1}, {0, 8, -1}, {2, 8, -1}, {5, 64, -1}};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; ++i) {
        dl.dtype.code = dts[i].code, dl.dtype.bits = dts[i].bits;
        const ssm_status s = ssm_tensor_from_dlpack(NULL, &dl, &t);
        if (dts[i].want >= 0) CHECK(s == SSM_STATUS_OK && t.dtype == dts[i].want, "dtype code %u bits %u", dts[i].code, dts[i].bits);
        else CHECK(s == SSM_STATUS_INVALID_LAYOUT && strstr(ssm_context_last_error(NULL), "dtype") != NULL,
                   "dtype code %u bits %u refused", dts[i].code, dts[i].bits);
    }
    dl.dtype.code = 2, dl.dtype.bits = 32, dl.dtype.lanes = 4;
    CHECK(ssm_tensor_from_dlpack(NULL, &dl, &t) == SSM_STATUS_INVALID_LAYOUT, "4 lanes refused");
    dl.dtype.lanes = 1, dl.device.device_type = 2, dl.device.device_id = 3;
    CHECK(ssm_tensor_from_dlpack(NULL, &dl, &t) == SSM_STATUS_OK && t.device.type == SSM_DEVICE_CUDA &&
              t.device.index == 3,
          "CUDA device");
    dl.device.device_type = 10; /* ROCm */
    ssm_tensor untouched = t;
    CHECK(ssm_tensor_from_dlpack(NULL, &dl, &t) == SSM_STATUS_INVALID_LAYOUT &&
              memcmp(&untouched, &t, sizeof t) == 0,
          "other devices refused, out untouched");
    dl.device.device_type = 1, dl.ndim = 7;
    CHECK(ssm_tensor_from_dlpack(NULL, &dl, &t) == SSM_STATUS_INVALID_SHAPE, "7 dims refused");
    dl.ndim = 3, shape[1] = 0, dl.data = NULL, dl.strides = NULL;
    CHECK(ssm_tensor_from_dlpack(NULL, &dl, &t) == SSM_STATUS_OK && t.data != NULL && t.shape[1] == 0,
          "empty tensor with NULL data is present");
    shape[1] = 3;
    CHECK(ssm_tensor_from_dlpack(NULL, &dl, &t) == SSM_STATUS_INVALID_ARGUMENT, "NULL data with elements");
    CHECK(ssm_tensor_from_dlpack(NULL, NULL, &t) == SSM_STATUS_INVALID_ARGUMENT, "NULL DLTensor");
}

/* The variant registry: names, the override's checks, SSMOPS_VARIANT, the last variant. */
static void test_variants(void) {
    ssm_context_params q;
    ssm_context_params_init(&q);
    q.backend = SSM_BACKEND_CPU;
    ssm_context * ctx = NULL;
    CHECK(ssm_context_create(&q, &ctx) == SSM_STATUS_OK, "cpu context");
    CHECK(strcmp(ssm_context_last_variant(ctx), "") == 0, "last variant before any call");
    CHECK(strcmp(ssm_context_last_variant(NULL), "") == 0, "last variant of ctx NULL");
    CHECK(ssm_context_set_variant(ctx, "mamba2_scan", "auto") == SSM_STATUS_OK, "auto is always valid");
    CHECK(ssm_context_set_variant(ctx, "mamba2_scan", NULL) == SSM_STATUS_OK, "NULL is always valid");
    ssm_status s = ssm_context_set_variant(ctx, "no_such_op", "x");
    CHECK(s == SSM_STATUS_INVALID_ARGUMENT && strstr(ssm_context_last_error(ctx), "no_such_op") != NULL,
          "unknown op: %s [%s]", ssm_status_string(s), ssm_context_last_error(ctx));
    s = ssm_context_set_variant(ctx, "mamba2_scan", "bogus");
    CHECK(s == SSM_STATUS_INVALID_ARGUMENT && strstr(ssm_context_last_error(ctx), "bogus") != NULL,
          "unknown variant on cpu: %s [%s]", ssm_status_string(s), ssm_context_last_error(ctx));
    CHECK(ssm_context_set_variant(NULL, "mamba2_scan", "auto") == SSM_STATUS_INVALID_ARGUMENT, "ctx NULL");
    CHECK(ssm_variant_count(SSM_BACKEND_CPU, "mamba2_scan") == 0, "the CPU backend has no tables");
    CHECK(ssm_variant_count(SSM_BACKEND_CUDA, "no_such_op") == 0, "no table for an unknown op");
    CHECK(ssm_variant_name(SSM_BACKEND_CUDA, "mamba2_scan", -1) == NULL, "name out of range");
    const int32_t n = ssm_variant_count(SSM_BACKEND_CUDA, "mamba2_scan");
    CHECK(ssm_variant_name(SSM_BACKEND_CUDA, "mamba2_scan", n) == NULL, "name past the end");
    for (int32_t i = 0; i < n; ++i) {
        const char * name = ssm_variant_name(SSM_BACKEND_CUDA, "mamba2_scan", i);
        const char * why  = ssm_variant_why(SSM_BACKEND_CUDA, "mamba2_scan", i);
        CHECK(name != NULL && name[0] != '\0' && why != NULL && why[0] != '\0', "entry %d named and explained",
              (int)i);
    }
    ssm_context_free(ctx);

}

int main(void) {
    const clock_t start = clock();
    test_variants();
    test_dlpack();
    test_names();
    test_decode_and_roundtrip(&F16);
    test_decode_and_roundtrip(&BF16);
    test_round_exhaustive(&F16);
    test_round_exhaustive(&BF16);
    test_round_specials(&F16);
    test_round_specials(&BF16);
    test_round_random(&F16, 1000000);
    test_round_random(&BF16, 1000000);
    test_round_f64(&F16);
    test_round_f64(&BF16);
    test_accessors();
    test_errors();
    test_cuda_timing_arguments();
    test_context();
    test_threadpool();
    test_checks();
    printf("test_core: %ld checks, %ld failures (%.2f s cpu)\n", g_checks, g_failures,
           (double)(clock() - start) / CLOCKS_PER_SEC);
    return g_failures == 0 ? 0 : 1;
}
