/*
 * ssmi_scalar.h — scalar rules every backend applies the same way, written once for C and
 * CUDA (functions are __host__ __device__ under nvcc). The float and double forms of a rule
 * sit side by side: the reference computes in double, the fast backends in float.
 */
#ifndef SSMI_SCALAR_H
#define SSMI_SCALAR_H

#include <math.h>

#if defined(__CUDACC__)
#define SSMI_HD __host__ __device__
#else
#define SSMI_HD
#endif

/* Softplus applies only at or below this value (spec §2.1: log1p(exp(v)), else v). */
#define SSMI_SOFTPLUS_THRESHOLD 20.0

/* The Mamba-2 dt rule (spec §2.1): v = dt + dt_bias, then softplus when asked (thresholded),
 * then the clamp to [lo, hi], always. Written with comparisons, not fmin/fmax, so that a NaN
 * dt stays NaN on every backend (fmin/fmax would turn it into a limit). */
SSMI_HD static inline float ssmi_dt_rule_f32(float v, int softplus, float lo, float hi) {
    if (softplus && v <= (float)SSMI_SOFTPLUS_THRESHOLD) v = log1pf(expf(v));
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    return v;
}

SSMI_HD static inline double ssmi_dt_rule_f64(double v, int softplus, double lo, double hi) {
    if (softplus && v <= SSMI_SOFTPLUS_THRESHOLD) v = log1p(exp(v));
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    return v;
}

#endif /* SSMI_SCALAR_H */
