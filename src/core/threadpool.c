/*
 * threadpool.c — a persistent pool of num_threads − 1 pthread workers plus the caller.
 *
 * Design
 * ------
 * One job at a time. ssmi_parallel_for publishes the job (fn, arg, ntasks) under the pool
 * mutex, bumps a generation counter and broadcasts; workers sleep on a condition variable
 * between jobs (no spinning). Tasks are handed out through an atomic counter, so load
 * balances itself; the caller takes tasks too, as thread 0, and worker i is always thread
 * i + 1 (a fixed id, so per-thread scratch can be indexed by it). Each worker reports back
 * under the mutex when the counter runs dry; the caller waits until every worker has
 * reported, which also makes every task's writes visible to the caller (mutex
 * happens-before).
 *
 * Thread safety: a context (and so its pool) serves one user thread at a time. Concurrent
 * ssmi_parallel_for calls on the same context from different user threads are NOT
 * supported, as with zstd's ZSTD_CCtx. A task that calls ssmi_parallel_for on the same
 * context again runs the inner loop serially on its own thread id.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "ssmi.h"

typedef struct ssmi_worker {
    ssmi_threadpool * pool;
    int32_t           thread; /* 1 .. num_threads − 1 */
    pthread_t         handle;
} ssmi_worker;

struct ssmi_threadpool {
    int32_t         num_threads; /* including the caller */
    ssmi_worker *   workers;     /* num_threads − 1 */
    pthread_mutex_t mutex;
    pthread_cond_t  wake;        /* a new job or stop, for the workers */
    pthread_cond_t  done;        /* the last worker finished, for the caller */
    uint64_t        generation;  /* bumped once per job */
    int             stop;
    int32_t         pending;     /* workers that have not finished the current job */
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

static void * ssmi_worker_main(void * p) {
    ssmi_worker * const self = (ssmi_worker *)p;
    ssmi_threadpool * const pool = self->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->mutex);
    for (;;) {
        while (!pool->stop && pool->generation == seen) pthread_cond_wait(&pool->wake, &pool->mutex);
        if (pool->stop) break;
        seen = pool->generation;
        const ssmi_task_fn fn = pool->fn;
        void * const arg = pool->arg;
        const int64_t ntasks = pool->ntasks;
        pthread_mutex_unlock(&pool->mutex);

        ssmi_run_tasks(pool, fn, arg, ntasks, self->thread);

        pthread_mutex_lock(&pool->mutex);
        if (--pool->pending == 0) pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->mutex);
    return NULL;
}

/* Stops and joins the first `started` workers, then frees the pool. */
static void ssmi_threadpool_destroy(ssmi_threadpool * pool, int32_t started) {
    pthread_mutex_lock(&pool->mutex);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    for (int32_t i = 0; i < started; ++i) pthread_join(pool->workers[i].handle, NULL);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mutex);
    free(pool->workers);
    free(pool);
}

ssmi_threadpool * ssmi_threadpool_create(int32_t num_threads) {
    if (num_threads < 2) return NULL;
    ssmi_threadpool * const pool = calloc(1, sizeof *pool);
    if (pool == NULL) return NULL;
    pool->num_threads = num_threads;
    pool->workers = calloc((size_t)(num_threads - 1), sizeof *pool->workers);
    if (pool->workers == NULL) {
        free(pool);
        return NULL;
    }
    atomic_init(&pool->next_task, 0);
    if (pthread_mutex_init(&pool->mutex, NULL) != 0) {
        free(pool->workers);
        free(pool);
        return NULL;
    }
    if (pthread_cond_init(&pool->wake, NULL) != 0) {
        pthread_mutex_destroy(&pool->mutex);
        free(pool->workers);
        free(pool);
        return NULL;
    }
    if (pthread_cond_init(&pool->done, NULL) != 0) {
        pthread_cond_destroy(&pool->wake);
        pthread_mutex_destroy(&pool->mutex);
        free(pool->workers);
        free(pool);
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
    pool->fn = fn;
    pool->arg = arg;
    pool->ntasks = ntasks;
    atomic_store_explicit(&pool->next_task, 0, memory_order_relaxed);
    pool->pending = pool->num_threads - 1;
    ++pool->generation;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);

    ssmi_run_tasks(pool, fn, arg, ntasks, 0);

    pthread_mutex_lock(&pool->mutex);
    while (pool->pending > 0) pthread_cond_wait(&pool->done, &pool->mutex);
    pthread_mutex_unlock(&pool->mutex);
}
