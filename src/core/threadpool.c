/*
 * threadpool.c — a persistent pool of num_threads − 1 pthread workers plus the caller.
 *
 * Design
 * ------
 * One job at a time. ssmi_parallel_for publishes the job (fn, arg, ntasks) under the pool
 * mutex, bumps an atomic generation counter (release) and broadcasts. Tasks are handed out
 * through an atomic counter, so load balances itself; the caller takes tasks too, as
 * thread 0, and worker i is always thread i + 1 (a fixed id, so per-thread scratch can be
 * indexed by it).
 *
 * A worker joins a job by registering in `job_state` (generation | closed bit | count).
 * When the caller has run out of tasks it closes the job (fetch_or of the closed bit) and
 * waits only for the workers that registered before that; a worker that wakes later sees
 * the closed bit (or a newer generation) and stays out. So a descheduled worker never
 * holds the caller up — on a loaded machine the caller simply runs every task itself.
 * Each registered worker bumps `finished` (release) after its last task; the caller
 * waits for finished == registered (acquire), which makes every task's writes visible.
 *
 * Waking a sleeping thread costs 30-40 µs on the VMs we measured, more than a whole decode
 * step. So a worker that finished a job polls the generation for SSMI_SPIN_NS before it
 * sleeps on the condition variable, and the caller polls `finished` for as long before it
 * sleeps: back-to-back calls (a decode loop) never pay a wake-up. The condition variables
 * are only the slow path; both sides re-check the atomics under the mutex, so no wake-up
 * is lost.
 *
 * Thread safety: a context (and so its pool) serves one user thread at a time. Concurrent
 * ssmi_parallel_for calls on the same context from different user threads are NOT
 * supported, as with zstd's ZSTD_CCtx. A task that calls ssmi_parallel_for on the same
 * context again runs the inner loop serially on its own thread id.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SSMI_CPU_RELAX() _mm_pause()
#else
#define SSMI_CPU_RELAX() ((void)0)
#endif

#include "ssmi.h"

typedef struct ssmi_worker {
    ssmi_threadpool * pool;
    int32_t           thread; /* 1 .. num_threads − 1 */
    pthread_t         handle;
} ssmi_worker;

struct ssmi_threadpool {
    ssm_context *   owner;       /* its allocator holds the pool (the context being created) */
    int32_t         num_threads; /* including the caller */
    ssmi_worker *   workers;     /* num_threads − 1 */
    pthread_mutex_t mutex;
    pthread_cond_t  wake;        /* a new job or stop, for the workers */
    pthread_cond_t  done;        /* the last worker finished, for the caller */
    atomic_ullong   generation;  /* bumped once per job (release) */
    atomic_int      stop;
    atomic_ullong   job_state;   /* (generation & 0xffffffff) << 32 | closed << 31 | registered */
    atomic_int      finished;    /* registered workers done with the current job */
    /* The current job, written under mutex before the generation bump. */
    ssmi_task_fn    fn;
    void *          arg;
    int64_t         ntasks;
    atomic_llong    next_task;
};

/* Which pool (if any) the current thread is running a task for, and as which thread id:
 * lets a nested call on the same pool run serially instead of deadlocking. */
static _Thread_local const ssmi_threadpool * ssmi_tls_pool = NULL;
static _Thread_local int32_t                 ssmi_tls_thread = 0;

/* How long a thread polls before it sleeps: long enough to bridge the gap between two
 * back-to-back operator calls, short enough not to matter when calls are rare. */
#define SSMI_SPIN_NS 200000LL

static long long ssmi_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Polls until *gen != seen or stop is set, or SSMI_SPIN_NS passed; returns 1 if it changed. */
static int ssmi_spin_for_job(ssmi_threadpool * pool, unsigned long long seen) {
    const long long t0 = ssmi_now_ns();
    for (unsigned i = 1;; ++i) {
        if (atomic_load_explicit(&pool->generation, memory_order_acquire) != seen ||
            atomic_load_explicit(&pool->stop, memory_order_relaxed))
            return 1;
        SSMI_CPU_RELAX();
        if ((i & 63) == 0 && ssmi_now_ns() - t0 > SSMI_SPIN_NS) return 0;
    }
}

#define SSMI_JOB_CLOSED (1ull << 31)
#define SSMI_JOB_COUNT  (SSMI_JOB_CLOSED - 1)

/* Polls until `want` workers have finished, or SSMI_SPIN_NS passed; returns 1 when done. */
static int ssmi_spin_for_done(ssmi_threadpool * pool, int want) {
    const long long t0 = ssmi_now_ns();
    for (unsigned i = 1;; ++i) {
        if (atomic_load_explicit(&pool->finished, memory_order_acquire) >= want) return 1;
        SSMI_CPU_RELAX();
        if ((i & 63) == 0 && ssmi_now_ns() - t0 > SSMI_SPIN_NS) return 0;
    }
}

static void ssmi_run_tasks(ssmi_threadpool * pool, ssmi_task_fn fn, void * arg, int64_t ntasks, int32_t thread) {
    const ssmi_threadpool * const outer_pool = ssmi_tls_pool;
    const int32_t outer_thread = ssmi_tls_thread;
    ssmi_tls_pool = pool;
    ssmi_tls_thread = thread;
    for (;;) {
        const long long task = atomic_fetch_add_explicit(&pool->next_task, 1, memory_order_relaxed);
        if (task >= ntasks) break;
        fn(arg, (int64_t)task, thread);
    }
    ssmi_tls_pool = outer_pool;
    ssmi_tls_thread = outer_thread;
}

/* Joins job `generation` unless the caller already closed it or moved on; 1 if joined. */
static int ssmi_register(ssmi_threadpool * pool, unsigned long long generation) {
    const unsigned long long tag = (generation & 0xffffffffull) << 32;
    unsigned long long       s   = atomic_load_explicit(&pool->job_state, memory_order_acquire);
    for (;;) {
        if ((s & ~(SSMI_JOB_CLOSED | SSMI_JOB_COUNT)) != tag || (s & SSMI_JOB_CLOSED)) return 0;
        if (atomic_compare_exchange_weak_explicit(&pool->job_state, &s, s + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return 1;
    }
}

static void * ssmi_worker_main(void * p) {
    ssmi_worker * const     self = (ssmi_worker *)p;
    ssmi_threadpool * const pool = self->pool;
    unsigned long long      seen = 0;
    for (;;) {
        if (!ssmi_spin_for_job(pool, seen)) {
            pthread_mutex_lock(&pool->mutex);
            while (!atomic_load(&pool->stop) && atomic_load(&pool->generation) == seen)
                pthread_cond_wait(&pool->wake, &pool->mutex);
            pthread_mutex_unlock(&pool->mutex);
        }
        if (atomic_load(&pool->stop)) break;
        /* The job fields were written before the generation bump (release); reading the
         * new generation with acquire makes them visible. */
        seen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        if (!ssmi_register(pool, seen)) continue; /* closed or replaced: stay out */
        const ssmi_task_fn fn     = pool->fn;
        void * const       arg    = pool->arg;
        const int64_t      ntasks = pool->ntasks;

        ssmi_run_tasks(pool, fn, arg, ntasks, self->thread);

        atomic_fetch_add_explicit(&pool->finished, 1, memory_order_release);
        /* Under the mutex, so a caller between its check and its wait cannot miss it. */
        pthread_mutex_lock(&pool->mutex);
        pthread_cond_signal(&pool->done);
        pthread_mutex_unlock(&pool->mutex);
    }
    return NULL;
}

/* Stops and joins the first `started` workers, then frees the pool. */
static void ssmi_threadpool_destroy(ssmi_threadpool * pool, int32_t started) {
    ssm_context * const owner = pool->owner;
    pthread_mutex_lock(&pool->mutex);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    for (int32_t i = 0; i < started; ++i) pthread_join(pool->workers[i].handle, NULL);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mutex);
    ssmi_free(owner, pool->workers);
    ssmi_free(owner, pool);
}

ssmi_threadpool * ssmi_threadpool_create(ssm_context * owner, int32_t num_threads) {
    if (num_threads < 2) return NULL;
    ssmi_threadpool * const pool = ssmi_alloc(owner, sizeof *pool);
    if (pool == NULL) return NULL;
    memset(pool, 0, sizeof *pool);
    pool->owner = owner;
    pool->num_threads = num_threads;
    const size_t wbytes = (size_t)(num_threads - 1) * sizeof *pool->workers;
    pool->workers = ssmi_alloc(owner, wbytes);
    if (pool->workers == NULL) {
        ssmi_free(owner, pool);
        return NULL;
    }
    memset(pool->workers, 0, wbytes);
    atomic_init(&pool->next_task, 0);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->stop, 0);
    atomic_init(&pool->job_state, SSMI_JOB_CLOSED);
    atomic_init(&pool->finished, 0);
    if (pthread_mutex_init(&pool->mutex, NULL) != 0) {
        ssmi_free(owner, pool->workers);
        ssmi_free(owner, pool);
        return NULL;
    }
    if (pthread_cond_init(&pool->wake, NULL) != 0) {
        pthread_mutex_destroy(&pool->mutex);
        ssmi_free(owner, pool->workers);
        ssmi_free(owner, pool);
        return NULL;
    }
    if (pthread_cond_init(&pool->done, NULL) != 0) {
        pthread_cond_destroy(&pool->wake);
        pthread_mutex_destroy(&pool->mutex);
        ssmi_free(owner, pool->workers);
        ssmi_free(owner, pool);
        return NULL;
    }
    for (int32_t i = 0; i < num_threads - 1; ++i) {
        pool->workers[i].pool = pool;
        pool->workers[i].thread = i + 1;
        if (pthread_create(&pool->workers[i].handle, NULL, ssmi_worker_main, &pool->workers[i]) != 0) {
            ssmi_threadpool_destroy(pool, i);
            return NULL;
        }
    }
    return pool;
}

void ssmi_threadpool_free(ssmi_threadpool * pool) {
    if (pool == NULL) return;
    ssmi_threadpool_destroy(pool, pool->num_threads - 1);
}

void ssmi_parallel_for(ssm_context * ctx, int64_t ntasks, ssmi_task_fn fn, void * arg) {
    if (ntasks <= 0) return;
    ssmi_threadpool * const pool = ctx != NULL ? ctx->pool : NULL;
    if (pool == NULL || ntasks == 1 || ssmi_tls_pool == pool) {
        /* Serial: no pool, nothing to share, or nested inside one of this pool's tasks
         * (then keep the thread id the caller already owns). */
        const int32_t thread = (pool != NULL && ssmi_tls_pool == pool) ? ssmi_tls_thread : 0;
        for (int64_t task = 0; task < ntasks; ++task) fn(arg, task, thread);
        return;
    }

    pthread_mutex_lock(&pool->mutex);
    pool->fn     = fn;
    pool->arg    = arg;
    pool->ntasks = ntasks;
    atomic_store_explicit(&pool->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->finished, 0, memory_order_relaxed);
    const unsigned long long generation = atomic_load_explicit(&pool->generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&pool->job_state, (generation & 0xffffffffull) << 32, memory_order_relaxed);
    atomic_store_explicit(&pool->generation, generation, memory_order_release);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);

    ssmi_run_tasks(pool, fn, arg, ntasks, 0);

    /* No task is left: close the job and wait only for the workers that joined it. */
    const unsigned long long state =
        atomic_fetch_or_explicit(&pool->job_state, SSMI_JOB_CLOSED, memory_order_acq_rel);
    const int joined = (int)(state & SSMI_JOB_COUNT);
    if (joined > 0 && !ssmi_spin_for_done(pool, joined)) {
        pthread_mutex_lock(&pool->mutex);
        while (atomic_load_explicit(&pool->finished, memory_order_acquire) < joined)
            pthread_cond_wait(&pool->done, &pool->mutex);
        pthread_mutex_unlock(&pool->mutex);
    }
}
