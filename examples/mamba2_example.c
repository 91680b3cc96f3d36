/* mamba2_example.c — run the Mamba-2 scan on two threads and check it against the float64
 * reference backend that ships inside ssmops. Uses only the public header.
 * Build: cc mamba2_example.c $(pkg-config --cflags --libs ssmops) -lm */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ssmops.h"

enum { BATCH = 2, S = 300, H = 4, P = 16, N = 8, G = 2 };

/* Uniform values in [lo, hi) from a small LCG: reproducible everywhere. */
static float * random_floats(size_t count, float lo, float hi, uint32_t * seed) {
    float * v = malloc(count * sizeof *v);
    for (size_t i = 0; v != NULL && i < count; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        v[i] = lo + (hi - lo) * (float)(*seed >> 8) / 16777216.0f;
    }
    return v;
}

/* Runs the scan with the given backend and thread count, writing `out`. */
static ssm_status run_scan(ssm_backend backend, int32_t threads, const ssm_mamba2_params * params,
                           const ssm_mamba2_scan_args * args) {
    ssm_context_params cp;
    ssm_context_params_init(&cp);
    cp.backend = backend;
    cp.num_threads = threads;
    ssm_context * ctx = NULL;
    ssm_status    status = ssm_context_create(&cp, &ctx);
    if (status == SSM_STATUS_OK) status = ssm_mamba2_scan(ctx, params, args, NULL, 0);
    if (status != SSM_STATUS_OK) fprintf(stderr, "%s: %s\n", ssm_status_string(status), ssm_context_last_error(ctx));
    ssm_context_free(ctx);
    return status;
}

int main(void) {
    const int64_t x_shape[] = {BATCH, S, H, P}, dt_shape[] = {BATCH, S, H}, h_shape[] = {H},
                  bc_shape[] = {BATCH, S, G, N};
    const size_t x_count = (size_t)BATCH * S * H * P, bc_count = (size_t)BATCH * S * G * N;
    uint32_t     seed = 42;
    float *      x = random_floats(x_count, -1.0f, 1.0f, &seed);
    float *      dt = random_floats((size_t)BATCH * S * H, -4.0f, 0.0f, &seed); /* raw, pre-softplus */
    float *      a = random_floats(H, -2.0f, -0.5f, &seed);                     /* A < 0: decay      */
    float *      b = random_floats(bc_count, -1.0f, 1.0f, &seed);
    float *      c = random_floats(bc_count, -1.0f, 1.0f, &seed);
    float *      out = malloc(x_count * sizeof *out);
    double *     ref = malloc(x_count * sizeof *ref);
    if (!x || !dt || !a || !b || !c || !out || !ref) return 2;

    ssm_mamba2_params params;
    ssm_mamba2_params_init(&params);
    params.chunk_size = 64;
    params.dt_softplus = 1;

    ssm_mamba2_scan_args args = {0}; /* zero-initialised: every optional input absent */
    args.x = ssm_tensor_make(x, SSM_DTYPE_F32, 4, x_shape);
    args.dt = ssm_tensor_make(dt, SSM_DTYPE_F32, 3, dt_shape);
    args.a = ssm_tensor_make(a, SSM_DTYPE_F32, 1, h_shape);
    args.b = ssm_tensor_make(b, SSM_DTYPE_F32, 4, bc_shape);
    args.c = ssm_tensor_make(c, SSM_DTYPE_F32, 4, bc_shape);

    args.out = ssm_tensor_make(out, SSM_DTYPE_F32, 4, x_shape); /* optimised CPU, 2 threads */
    if (run_scan(SSM_BACKEND_CPU, 2, &params, &args) != SSM_STATUS_OK) return 1;
    args.out = ssm_tensor_make(ref, SSM_DTYPE_F64, 4, x_shape); /* float64 reference       */
    if (run_scan(SSM_BACKEND_REF, 1, &params, &args) != SSM_STATUS_OK) return 1;

    double err2 = 0.0, ref2 = 0.0, max_err = 0.0;
    for (size_t i = 0; i < x_count; i++) {
        const double e = fabs((double)out[i] - ref[i]);
        err2 += e * e;
        ref2 += ref[i] * ref[i];
        max_err = (e > max_err || isnan(e)) ? e : max_err; /* a NaN sticks */
    }
    const double rel_rms = sqrt(err2 / ref2), max_rel = max_err / sqrt(ref2 / (double)x_count);
    const int    pass = rel_rms <= 1e-5 && max_rel <= 1e-3; /* the f32 bar; false for NaN */
    printf("ssmops %s: mamba2_scan batch=%d S=%d H=%d P=%d N=%d G=%d, f32, 2 threads\n", ssm_version(), BATCH, S, H, P,
           N, G);
    printf("vs float64 reference: rel_rms %.2e (bar 1e-5)  max_rel %.2e (bar 1e-3)  %s\n", rel_rms, max_rel,
           pass ? "PASS" : "FAIL");
    free(x);
    free(dt);
    free(a);
    free(b);
    free(c);
    free(out);
    free(ref);
    return pass ? 0 : 1;
}
