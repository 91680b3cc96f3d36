/*
 * cli-ceilings.c — the machine's own ceilings for `ssmops bench` (DESIGN §6):
 *   FMA peak: 12 independent 8-wide FMA accumulator chains per thread (enough to cover the
 *             FMA latency × throughput of current x86 cores), AVX2+FMA when the CPU has it,
 *             a scalar multiply-add loop otherwise; the best of a few runs.
 *   copy bandwidth: each thread memcpy's its slice of a buffer much larger than the last-level
 *             cache; bytes read + written per second, median of several runs.
 * Threads are plain pthreads started together at a barrier.
 */
#define _XOPEN_SOURCE 700

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CLI_HAVE_X86 1
#else
#define CLI_HAVE_X86 0
#endif

#include "cli.h"

/* ---- FMA kernels -------------------------------------------------------------------------- */

#if CLI_HAVE_X86
/* 12 chains × 8 lanes × 2 FLOP per iteration. */
__attribute__((target("avx2,fma"))) static float fma_chains_avx2(int64_t iters) {
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256       a0 = _mm256_set1_ps(0.10f), a1 = _mm256_set1_ps(0.11f), a2 = _mm256_set1_ps(0.12f);
    __m256       a3 = _mm256_set1_ps(0.13f), a4 = _mm256_set1_ps(0.14f), a5 = _mm256_set1_ps(0.15f);
    __m256       a6 = _mm256_set1_ps(0.16f), a7 = _mm256_set1_ps(0.17f), a8 = _mm256_set1_ps(0.18f);
    __m256       a9 = _mm256_set1_ps(0.19f), a10 = _mm256_set1_ps(0.20f), a11 = _mm256_set1_ps(0.21f);
    for (int64_t i = 0; i < iters; ++i) {
        a0  = _mm256_fmadd_ps(a0, m, c);
        a1  = _mm256_fmadd_ps(a1, m, c);
        a2  = _mm256_fmadd_ps(a2, m, c);
        a3  = _mm256_fmadd_ps(a3, m, c);
        a4  = _mm256_fmadd_ps(a4, m, c);
        a5  = _mm256_fmadd_ps(a5, m, c);
        a6  = _mm256_fmadd_ps(a6, m, c);
        a7  = _mm256_fmadd_ps(a7, m, c);
        a8  = _mm256_fmadd_ps(a8, m, c);
        a9  = _mm256_fmadd_ps(a9, m, c);
        a10 = _mm256_fmadd_ps(a10, m, c);
        a11 = _mm256_fmadd_ps(a11, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s        = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}
#endif

/* 12 scalar chains × 2 FLOP per iteration. */
static float fma_chains_scalar(int64_t iters) {
    float a[12];
    for (int k = 0; k < 12; ++k) a[k] = 0.1f + 0.01f * (float)k;
    for (int64_t i = 0; i < iters; ++i)
        for (int k = 0; k < 12; ++k) a[k] = a[k] * 0.999999f + 1e-7f;
    float s = 0.0f;
    for (int k = 0; k < 12; ++k) s += a[k];
    return s;
}

/* ---- threads ------------------------------------------------------------------------------- */

typedef struct ceil_job {
    pthread_barrier_t * start;
    pthread_barrier_t * stop;
    int                 avx2;
    int64_t             iters; /* FMA job */
    char *              dst;   /* copy job: this thread's slice */
    const char *        src;
    size_t              bytes;
    volatile float      sink;
} ceil_job;

static void * fma_worker(void * p) {
    ceil_job * job = (ceil_job *)p;
    pthread_barrier_wait(job->start);
#if CLI_HAVE_X86
    job->sink = job->avx2 ? fma_chains_avx2(job->iters) : fma_chains_scalar(job->iters);
#else
    job->sink = fma_chains_scalar(job->iters);
#endif
    pthread_barrier_wait(job->stop);
    return NULL;
}

static void * copy_worker(void * p) {
    ceil_job * job = (ceil_job *)p;
    pthread_barrier_wait(job->start);
    memcpy(job->dst, job->src, job->bytes);
    pthread_barrier_wait(job->stop);
    return NULL;
}

static void * touch_worker(void * p) {
    ceil_job * job = (ceil_job *)p;
    pthread_barrier_wait(job->start);
    memset(job->dst, 1, job->bytes);
    memset((char *)job->src, 2, job->bytes);
    pthread_barrier_wait(job->stop);
    return NULL;
}

/* Starts one worker per job, releases them together, returns the wall time between the
 * start and stop barriers (or a negative value if threads cannot be started). */
static double run_team(ceil_job * jobs, int threads, void * (*fn)(void *)) {
    pthread_barrier_t start, stop;
    pthread_t *       ids = calloc((size_t)threads, sizeof *ids);
    if (!ids) return -1.0;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&stop, NULL, (unsigned)threads + 1);
    int started = 0;
    for (; started < threads; ++started) {
        jobs[started].start = &start;
        jobs[started].stop  = &stop;
        if (pthread_create(&ids[started], NULL, fn, &jobs[started]) != 0) break;
    }
    double elapsed;
    if (started == threads) {
        pthread_barrier_wait(&start);
        const double t0 = cli_now();
        pthread_barrier_wait(&stop);
        elapsed = cli_now() - t0;
    } else {
        /* The started workers wait at a barrier that can never fill: give up the process. */
        fprintf(stderr, "ssmops: error: cannot start %d threads for the ceilings\n", threads);
        exit(CLI_EXIT_FAIL);
    }
    for (int i = 0; i < threads; ++i) pthread_join(ids[i], NULL);
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&stop);
    free(ids);
    return elapsed;
}

static double measure_fma(int threads, int avx2, int quick) {
    ceil_job * jobs = calloc((size_t)threads, sizeof *jobs);
    if (!jobs) return 0.0;
    const double flop_per_iter = avx2 ? 12.0 * 8.0 * 2.0 : 12.0 * 2.0;
    /* Calibrate the iteration count on one thread to ~target seconds per run. */
    const double target = quick ? 0.05 : 0.2;
    int64_t      iters  = 1 << 16;
    for (;;) {
        for (int i = 0; i < threads; ++i) {
            jobs[i].avx2  = avx2;
            jobs[i].iters = iters;
        }
        const double t = run_team(jobs, 1, fma_worker);
        if (t < 0) {
            free(jobs);
            return 0.0;
        }
        if (t >= target / 8 || iters > ((int64_t)1 << 40)) {
            iters = (int64_t)((double)iters * target / (t > 1e-9 ? t : 1e-9));
            break;
        }
        iters *= 4;
    }
    double best = 0.0;
    for (int run = 0; run < (quick ? 2 : 5); ++run) {
        for (int i = 0; i < threads; ++i) jobs[i].iters = iters;
        const double t = run_team(jobs, threads, fma_worker);
        if (t > 0) {
            const double gflops = flop_per_iter * (double)iters * threads / t * 1e-9;
            if (gflops > best) best = gflops;
        }
    }
    free(jobs);
    return best;
}

static int cmp_double(const void * a, const void * b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double measure_copy(int threads, int quick, int buffer_mib) {
    const size_t bytes = (size_t)buffer_mib << 20;
    char *       src   = cli_alloc(bytes);
    char *       dst   = cli_alloc(bytes);
    ceil_job *   jobs  = calloc((size_t)threads, sizeof *jobs);
    double       gbps  = 0.0;
    if (src && dst && jobs) {
        const size_t slice = bytes / (size_t)threads / 64 * 64;
        for (int i = 0; i < threads; ++i) {
            jobs[i].dst   = dst + (size_t)i * slice;
            jobs[i].src   = src + (size_t)i * slice;
            jobs[i].bytes = i == threads - 1 ? bytes - (size_t)i * slice : slice;
        }
        run_team(jobs, threads, touch_worker); /* first touch by the copying thread */
        enum { MAX_RUNS = 9 };
        double    rates[MAX_RUNS];
        const int runs = quick ? 3 : MAX_RUNS;
        int       n    = 0;
        for (int run = 0; run < runs; ++run) {
            const double t = run_team(jobs, threads, copy_worker);
            if (t > 0) rates[n++] = 2.0 * (double)bytes / t * 1e-9;
        }
        if (n > 0) {
            qsort(rates, (size_t)n, sizeof rates[0], cmp_double);
            gbps = rates[n / 2];
        }
    }
    free(src);
    free(dst);
    free(jobs);
    return gbps;
}

int cli_measure_ceilings(int threads, int quick, int buffer_mib, cli_ceilings * out) {
    static cli_ceilings cached;
    static int          cached_valid = 0, cached_mib = 0;
    if (cached_valid && cached.threads == threads && cached_mib == buffer_mib) {
        *out = cached;
        return 0;
    }
    const uint32_t features = ssm_cpu_features();
    out->threads            = threads;
    out->avx2 = CLI_HAVE_X86 && (features & SSM_CPU_AVX2) && (features & SSM_CPU_FMA);
    cli_progress("measuring FMA peak on %d thread(s)", threads);
    out->fma_gflops = measure_fma(threads, out->avx2, quick);
    cli_progress("measuring copy bandwidth on %d thread(s)", threads);
    out->copy_gbps = measure_copy(threads, quick, buffer_mib);
    cli_progress("%s", "");
    if (out->fma_gflops <= 0 || out->copy_gbps <= 0) return -1;
    cached       = *out;
    cached_valid = 1;
    cached_mib   = buffer_mib;
    return 0;
}

int cli_cmd_ceilings(const cli_options * opt) {
    const int    threads = opt->threads > 0 ? opt->threads : cli_default_threads();
    const int    mib     = opt->buffer_mib > 0 ? opt->buffer_mib : 256;
    cli_ceilings c;
    if (cli_measure_ceilings(threads, 0, mib, &c) != 0)
        return cli_fail("could not measure the ceilings (out of memory or threads)");
    printf("ceilings on %d thread(s):\n", threads);
    printf("  fma_peak   %10.1f GFLOP/s  (12 independent %s FMA chains per thread)\n", c.fma_gflops,
           c.avx2 ? "AVX2 8-wide" : "scalar");
    printf("  copy_bw    %10.2f GB/s     (memcpy of %d MiB, bytes read + written, median)\n", c.copy_gbps, mib);
    if (opt->json) {
        FILE * f = fopen(opt->json, "w");
        if (!f) return cli_fail("cannot write %s", opt->json);
        fprintf(f,
                "[\n  {\"kind\": \"ceilings\", \"threads\": %d, \"fma_gflops\": %.3f, \"fma_kernel\": \"%s\", "
                "\"copy_gbps\": %.3f, \"copy_buffer_mib\": %d, \"version\": \"%s\"}\n]\n",
                threads, c.fma_gflops, c.avx2 ? "avx2_fma" : "scalar", c.copy_gbps, mib, ssm_version());
        if (fclose(f) != 0) return cli_fail("cannot write %s", opt->json);
    }
    return CLI_EXIT_OK;
}
