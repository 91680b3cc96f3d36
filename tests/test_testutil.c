/*
 * test_testutil.c — the comparison measure the CUDA tests apply to 16-bit outputs
 * (ssmt_compare_rounded): an output rounded to the nearest f16/bf16 value, or one ulp the other
 * way when the exact value sits within a hair of a rounding boundary, costs (almost) nothing;
 * an output further off is charged its error beyond half an ulp.
 */
#include <math.h>

#include "testutil.h"

/* y (dtype dt) = ys[i], r (f64) = rs[i]; returns ssmt_compare_rounded(y, r). */
static ssmt_cmp measure(ssm_dtype dt, const double * ys, const double * rs, int n) {
    const int64_t shape[1] = {n};
    ssmt_host     y = ssmt_alloc(dt, 1, shape), r = ssmt_alloc(SSM_DTYPE_F64, 1, shape);
    for (int i = 0; i < n; ++i) ssmt_set(&y.t, i, ys[i]), ssmt_set(&r.t, i, rs[i]);
    const ssmt_cmp c = ssmt_compare_rounded(&y.t, &r.t);
    ssmt_free(&y);
    ssmt_free(&r);
    return c;
}

static void test_dtype(ssm_dtype dt, int mant) {
    const double ulp1 = ldexp(1.0, -mant); /* spacing in [1, 2) */
    /* exact values just below the midpoint between 1 and 1 + ulp, and a big one (16x the rms) */
    const double r[4] = {1.0 + ulp1 / 2 - 1e-9, 0.5, -0.25, 16.0 * (1.0 + ulp1 / 2 - 1e-9)};
    /* nearest rounding: no error */
    const double nearest[4] = {1.0, 0.5, -0.25, 16.0};
    ssmt_cmp     c = measure(dt, nearest, r, 4);
    TEST_CHECK(c.nonfinite == 0 && c.max_rel < 1e-12 && c.rel_rms < 1e-12, "%s nearest: rel_rms %.3g max_rel %.3g",
               ssm_dtype_name(dt), c.rel_rms, c.max_rel);
    /* the other neighbour of the near-midpoint values: only the 1e-9 hair is charged */
    const double flipped[4] = {1.0 + ulp1, 0.5, -0.25, 16.0 * (1.0 + ulp1)};
    c = measure(dt, flipped, r, 4);
    TEST_CHECK(c.nonfinite == 0 && c.max_rel < 1e-7, "%s one-ulp flip: max_rel %.3g", ssm_dtype_name(dt), c.max_rel);
    /* three ulps off on the big element (r just below the midpoint 16·(1 + ulp/2)): charged what exceeds half an ulp, two ulps of 16 */
    const double off[4] = {1.0, 0.5, -0.25, 16.0 * (1.0 + 3 * ulp1)};
    c = measure(dt, off, r, 4);
    const double rms = sqrt((r[0] * r[0] + r[1] * r[1] + r[2] * r[2] + r[3] * r[3]) / 4.0);
    const double want = (16.0 * 3 * ulp1 - 16.0 * (ulp1 / 2 - 1e-9) - 16.0 * ulp1 / 2) / rms;
    TEST_CHECK(fabs(c.max_rel - want) < 1e-6 * want + 1e-9, "%s three ulps off: max_rel %.6g, expected %.6g",
               ssm_dtype_name(dt), c.max_rel, want);
    TEST_CHECK(c.max_rel > 2.0 * ulp1 * 16.0 / rms, "%s three ulps off must be charged", ssm_dtype_name(dt));
    /* a NaN where the reference is finite is never excused */
    const double nan_y[4] = {NAN, 0.5, -0.25, 16.0};
    c = measure(dt, nan_y, r, 4);
    TEST_CHECK(c.nonfinite == 1, "%s NaN output: %lld non-finite", ssm_dtype_name(dt), (long long)c.nonfinite);
}

int main(void) {
    test_dtype(SSM_DTYPE_BF16, 7);
    test_dtype(SSM_DTYPE_F16, 10);
    TEST_EXIT();
}
