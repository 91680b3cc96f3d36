/*
 * test_concurrency.c — concurrent callers get the bytes of a serial run.
 *
 * The fixtures of tests/common/fixtures.h (every public operator, some in several variants)
 * first run serially, once per backend (reference, CPU), from outputs filled with one byte
 * pattern: those bytes are the expected results. Then, released together by a start gate:
 *  - NCTX threads with their own context each: reference, CPU with 1 and 2 threads, and CPU
 *    with 3 threads whose context is created and freed every round;
 *  - NNULL threads calling with ctx == NULL (one thread, automatic backend, malloc), which
 *    also make one failing call per round and check that the thread-local message is their
 *    own.
 * Every thread owns a fixture set built from the same seed and, for ROUNDS rounds, runs every
 * fixture (starting at a different one per thread and round, so that different operators
 * overlap) and compares the outputs' bytes with the serial run's. Results must not depend on
 * the thread count, so one serial CPU run serves every CPU context. The fixtures in a rounding
 * mode other than the exact one are left out (ctx == NULL always runs in the exact mode).
 * SSMOPS_TEST_ROUNDS sets the rounds (default 6). Built with -DSSMOPS_TSAN=ON this is the
 * ThreadSanitizer test (docs/RELIABILITY.md). Seed: SSMOPS_TEST_SEED (default 20262002).
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fixtures.h"

#define NCTX 8
#define NNULL 8

typedef struct expected {
    unsigned char * bytes[2]; /* per fixture: [0] reference backend, [1] CPU backend; NULL = skipped */
} expected;

typedef struct shared {
    uint64_t        seed;
    int             rounds;
    int             nfix;
    expected *      want; /* nfix entries */
    pthread_mutex_t mu;   /* the start gate: workers wait for go = 1 */
    pthread_cond_t  cv;
    int             go;
} shared;

typedef struct worker {
    shared *    sh;
    int         id;      /* 0 .. NCTX + NNULL − 1 */
    ssm_backend backend; /* SSM_BACKEND_AUTO for ctx == NULL */
    int         threads; /* context threads (0 for ctx == NULL) */
    int         churn;   /* create and free the context every round */
    /* results, read by main after the join */
    long runs, mismatches, failures, message_errors;
    char first_problem[256];
} worker;

static void note(worker * w, const char * fmt, const char * name, const char * detail) {
    if (w->first_problem[0] == '\0') snprintf(w->first_problem, sizeof w->first_problem, fmt, name, detail);
}

static ssm_context * make_ctx(ssm_backend backend, int threads) {
    ssm_context_params p;
    ssm_context_params_init(&p);
    p.backend = backend, p.num_threads = threads;
    ssm_context * ctx = NULL;
    return ssm_context_create(&p, &ctx) == SSM_STATUS_OK ? ctx : NULL;
}

/* A mamba2_scan call that must fail with a message naming chunk_size=<2000 + id>: each
 * ctx == NULL thread has its own message buffer, so it reads back its own value. */
static void check_own_message(worker * w, const ssmt_fixture * scan) {
    ssm_mamba2_params p = scan->params.m2;
    p.chunk_size = 2000 + w->id;
    char want[32];
    snprintf(want, sizeof want, "%d", 2000 + w->id);
    const ssm_status st = ssm_mamba2_scan(NULL, &p, &scan->args.scan, NULL, 0);
    const char *     msg = ssm_context_last_error(NULL);
    if (st == SSM_STATUS_OK || strstr(msg, want) == NULL) {
        ++w->message_errors;
        note(w, "ctx == NULL message of %s: \"%s\"", scan->name, msg);
    }
}

static void * run_worker(void * arg) {
    worker *       w = arg;
    shared *       sh = w->sh;
    ssmt_fixture * fix = calloc((size_t)sh->nfix, sizeof *fix);
    int            built = fix != NULL, scan = -1;
    for (int i = 0; built && i < sh->nfix; ++i) {
        built = ssmt_fixture_make(i, sh->seed, &fix[i]) == 0;
        if (built && scan < 0 && strcmp(fix[i].op, "mamba2_scan") == 0) scan = i;
    }
    const int     slot = w->backend == SSM_BACKEND_REF ? 0 : 1;
    ssm_context * ctx = NULL;
    if (built && w->backend != SSM_BACKEND_AUTO && !w->churn) built = (ctx = make_ctx(w->backend, w->threads)) != NULL;
    pthread_mutex_lock(&sh->mu); /* all start together, once every thread is built */
    while (!sh->go) pthread_cond_wait(&sh->cv, &sh->mu);
    pthread_mutex_unlock(&sh->mu);
    for (int r = 0; built && r < sh->rounds; ++r) {
        if (w->churn && (ctx = make_ctx(w->backend, w->threads)) == NULL) {
            ++w->failures;
            note(w, "%s: %s", "context_create", "failed");
            break;
        }
        for (int j = 0; j < sh->nfix; ++j) {
            const int             i = (j + w->id + r) % sh->nfix;
            const ssmt_fixture *  f = &fix[i];
            const unsigned char * want = sh->want[i].bytes[slot];
            if (want == NULL) continue;
            ssmt_fixture_fill(f, 0xA5);
            const ssm_status st = ssmt_fixture_run(ctx, f);
            ++w->runs;
            if (st != SSM_STATUS_OK) {
                ++w->failures;
                note(w, "%s: %s", f->name, ssm_context_last_error(ctx));
                continue;
            }
            const int o = ssmt_fixture_diff(f, want);
            if (o >= 0) {
                ++w->mismatches;
                note(w, "%s: output %s differs from the serial run's", f->name, f->out_names[o]);
            }
        }
        if (w->backend == SSM_BACKEND_AUTO && scan >= 0) check_own_message(w, &fix[scan]);
        if (w->churn) ssm_context_free(ctx), ctx = NULL;
    }
    if (!built) {
        ++w->failures;
        note(w, "%s: %s", "setup", "could not build the fixtures or the context");
    }
    ssm_context_free(ctx);
    for (int i = 0; fix != NULL && i < sh->nfix; ++i) ssmt_fixture_free(&fix[i]);
    free(fix);
    return NULL;
}

/* The serial run: every fixture once per backend, 1-thread contexts. */
static int serial_reference(shared * sh) {
    ssm_context * ctx[2] = {make_ctx(SSM_BACKEND_REF, 1), make_ctx(SSM_BACKEND_CPU, 1)};
    int           ok = ctx[0] != NULL && ctx[1] != NULL;
    for (int i = 0; ok && i < sh->nfix; ++i) {
        ssmt_fixture f;
        if (ssmt_fixture_make(i, sh->seed, &f) != 0) {
            TEST_CHECK(0, "fixture %d could not be built", i);
            ok = 0;
            break;
        }
        if (f.ref_mode == SSM_REF_EXACT) {
            for (int b = 0; b < 2; ++b) {
                ssmt_fixture_fill(&f, 0xA5);
                const ssm_status st = ssmt_fixture_run(ctx[b], &f);
                TEST_CHECK(st == SSM_STATUS_OK, "%s serial on %s: %s", f.name, b ? "cpu" : "ref",
                           ssm_context_last_error(ctx[b]));
                if (st != SSM_STATUS_OK) continue;
                sh->want[i].bytes[b] = malloc(ssmt_fixture_out_bytes(&f));
                if (sh->want[i].bytes[b] != NULL) ssmt_fixture_save(&f, sh->want[i].bytes[b]);
            }
        }
        ssmt_fixture_free(&f);
    }
    ssm_context_free(ctx[0]), ssm_context_free(ctx[1]);
    return ok;
}

static double seconds_since(const struct timespec * t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

int main(void) {
    ssmt_rng        rng;
    shared          sh;
    struct timespec t0;
    memset(&sh, 0, sizeof sh);
    sh.seed = ssmt_rng_from_env(&rng, 20262002);
    const char * env = getenv("SSMOPS_TEST_ROUNDS");
    sh.rounds = env != NULL && atoi(env) > 0 ? atoi(env) : 6;
    sh.nfix = ssmt_fixture_count();
    sh.want = calloc((size_t)sh.nfix, sizeof *sh.want);
    TEST_CHECK(sh.want != NULL, "out of memory");
    if (sh.want == NULL) TEST_EXIT();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (serial_reference(&sh)) {
        printf("serial run: %d fixtures on ref and cpu in %.2f s\n", sh.nfix, seconds_since(&t0));
        worker    w[NCTX + NNULL];
        pthread_t tid[NCTX + NNULL];
        int       started = 0;
        memset(w, 0, sizeof w);
        pthread_mutex_init(&sh.mu, NULL);
        pthread_cond_init(&sh.cv, NULL);
        for (int i = 0; i < NCTX + NNULL; ++i) {
            w[i].sh = &sh, w[i].id = i;
            if (i < NCTX) { /* ref, cpu 1 thread, cpu 2 threads, cpu 3 threads with churn */
                static const ssm_backend backend[4] = {SSM_BACKEND_REF, SSM_BACKEND_CPU, SSM_BACKEND_CPU,
                                                       SSM_BACKEND_CPU};
                w[i].backend = backend[i % 4], w[i].threads = i % 4 == 0 ? 1 : i % 4, w[i].churn = i % 4 == 3;
            } else {
                w[i].backend = SSM_BACKEND_AUTO;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int ok[NCTX + NNULL];
        for (int i = 0; i < NCTX + NNULL; ++i) started += ok[i] = pthread_create(&tid[i], NULL, run_worker, &w[i]) == 0;
        pthread_mutex_lock(&sh.mu);
        sh.go = 1;
        pthread_cond_broadcast(&sh.cv);
        pthread_mutex_unlock(&sh.mu);
        for (int i = 0; i < NCTX + NNULL; ++i)
            if (ok[i]) pthread_join(tid[i], NULL);
        TEST_CHECK(started == NCTX + NNULL, "only %d of %d threads started", started, NCTX + NNULL);
        {
            long runs = 0;
            for (int i = 0; i < NCTX + NNULL; ++i) {
                const worker * x = &w[i];
                runs += x->runs;
                TEST_CHECK(x->mismatches == 0 && x->failures == 0 && x->message_errors == 0,
                           "thread %d (%s, %d threads%s): %ld runs, %ld mismatches, %ld failures, %ld wrong "
                           "messages; first: %s",
                           i, x->backend == SSM_BACKEND_AUTO ? "ctx NULL" : ssm_backend_name(x->backend), x->threads,
                           x->churn ? ", churn" : "", x->runs, x->mismatches, x->failures, x->message_errors,
                           x->first_problem);
            }
            printf("%d threads with own contexts + %d with ctx == NULL, %d rounds of %d fixtures: %ld runs in %.2f s\n",
                   NCTX, NNULL, sh.rounds, sh.nfix, runs, seconds_since(&t0));
        }
        pthread_cond_destroy(&sh.cv);
        pthread_mutex_destroy(&sh.mu);
    }
    for (int i = 0; i < sh.nfix; ++i) free(sh.want[i].bytes[0]), free(sh.want[i].bytes[1]);
    free(sh.want);
    TEST_EXIT();
}
