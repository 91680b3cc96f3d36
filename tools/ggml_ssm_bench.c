/*
 * ggml_ssm_bench.c — times ggml's CPU SSM_SCAN and SSM_CONV(+bias+silu) at a chosen shape, for
 * tools/compare_ggml.sh. Built only by that script, against the ggml copy in the ignored folder
 * .compare/ggml; not part of the library or its build.
 *
 *   ggml_ssm_bench scan H P N S [THREADS REPS]   Mamba-2 scan, n_group 1, one sequence of S tokens
 *   ggml_ssm_bench step H P N B [THREADS REPS]   decode: one token each for B sequences
 *   ggml_ssm_bench conv D S W   [THREADS REPS]   causal depthwise conv (width W) + bias + silu
 *
 * Inputs are seeded uniform values (A in [-1, -0.5], as ggml's own test). The graph runs on the
 * CPU backend with THREADS threads: 3 warm-up computes, then REPS timed ones. Prints one line,
 * "median_s <seconds>", the median of the REPS wall times.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void * a, const void * b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Fills an f32 tensor with uniform values in [lo, hi) from a fixed-seed LCG. */
static void fill_uniform(struct ggml_tensor * t, float lo, float hi, uint64_t * seed) {
    const int64_t n   = ggml_nelements(t);
    float *       buf = malloc((size_t)n * sizeof *buf);
    if (!buf) {
        fprintf(stderr, "ggml_ssm_bench: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; ++i) {
        *seed  = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
        buf[i] = lo + (hi - lo) * (float)((*seed >> 40) * (1.0 / 16777216.0));
    }
    ggml_backend_tensor_set(t, buf, 0, (size_t)n * sizeof *buf);
    free(buf);
}

int main(int argc, char ** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s scan H P N S | step H P N B | conv D S W  [THREADS REPS]\n", argv[0]);
        return 2;
    }
    const char *  kind    = argv[1];
    const int64_t a1      = atoll(argv[2]), a2 = atoll(argv[3]), a3 = atoll(argv[4]);
    const int64_t a4      = argc > 5 ? atoll(argv[5]) : 0;
    const int     threads = argc > 6 ? atoi(argv[6]) : 2;
    const int     reps    = argc > 7 ? atoi(argv[7]) : 20;
    if (a1 <= 0 || a2 <= 0 || a3 <= 0 || reps <= 0 || threads <= 0) {
        fprintf(stderr, "ggml_ssm_bench: bad arguments\n");
        return 2;
    }

    struct ggml_init_params ip = {.mem_size = 64 * ggml_tensor_overhead() + ggml_graph_overhead(),
                                  .mem_buffer = NULL, .no_alloc = true};
    struct ggml_context *   ctx = ggml_init(ip);
    struct ggml_tensor *    out = NULL;
    struct ggml_tensor *    A = NULL, *ids = NULL, *f[8] = {0};
    int                     nf = 0;
    if (!strcmp(kind, "scan") || !strcmp(kind, "step")) {
        const int64_t H = a1, P = a2, N = a3;
        const int64_t T = !strcmp(kind, "scan") ? a4 : 1;  /* tokens per sequence */
        const int64_t B = !strcmp(kind, "scan") ? 1 : a4;  /* sequences */
        struct ggml_tensor * s  = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, N, P, H, B);
        struct ggml_tensor * x  = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, P, H, T, B);
        struct ggml_tensor * dt = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, H, T, B);
        struct ggml_tensor * Bm = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, N, 1, T, B);
        struct ggml_tensor * Cm = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, N, 1, T, B);
        A                       = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, H);
        ids                     = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, B);
        out                     = ggml_ssm_scan(ctx, s, x, dt, A, Bm, Cm, ids, 1);
        f[nf++] = s, f[nf++] = x, f[nf++] = dt, f[nf++] = Bm, f[nf++] = Cm;
    } else if (!strcmp(kind, "conv")) {
        const int64_t D = a1, S = a2, W = a3;
        struct ggml_tensor * sx   = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, W - 1 + S, D, 1, 1);
        struct ggml_tensor * w    = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, W, D, 1, 1);
        struct ggml_tensor * bias = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, D);
        out = ggml_silu(ctx, ggml_add(ctx, ggml_ssm_conv(ctx, sx, w), bias));
        f[nf++] = sx, f[nf++] = w, f[nf++] = bias;
    } else {
        fprintf(stderr, "ggml_ssm_bench: unknown kind '%s'\n", kind);
        return 2;
    }
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);

    ggml_backend_t backend = ggml_backend_cpu_init();
    if (!backend) {
        fprintf(stderr, "ggml_ssm_bench: no CPU backend\n");
        return 1;
    }
    ggml_backend_cpu_set_n_threads(backend, threads);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (!buf) {
        fprintf(stderr, "ggml_ssm_bench: cannot allocate the tensors\n");
        return 1;
    }
    uint64_t seed = 1;
    for (int i = 0; i < nf; ++i) fill_uniform(f[i], -1.0f, 1.0f, &seed);
    if (A) fill_uniform(A, -1.0f, -0.5f, &seed);
    if (ids) {
        const int64_t n   = ggml_nelements(ids);
        int32_t *     idv = malloc((size_t)n * sizeof *idv);
        if (!idv) return 1;
        for (int64_t i = 0; i < n; ++i) idv[i] = (int32_t)i;
        ggml_backend_tensor_set(ids, idv, 0, (size_t)n * sizeof *idv);
        free(idv);
    }

    for (int i = 0; i < 3; ++i) {
        if (ggml_backend_graph_compute(backend, gf) != GGML_STATUS_SUCCESS) {
            fprintf(stderr, "ggml_ssm_bench: graph compute failed\n");
            return 1;
        }
    }
    double * t = malloc((size_t)reps * sizeof *t);
    if (!t) return 1;
    for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        ggml_backend_graph_compute(backend, gf);
        t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    printf("median_s %.9g\n", reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]));
    free(t);
    ggml_backend_buffer_free(buf);
    ggml_backend_free(backend);
    ggml_free(ctx);
    return 0;
}
