/* threads.c: the pool behind vt_parallel_for (threads.h).
 *
 * One job at a time, posted by the thread that calls the engine: the job's fields are written,
 * then `gen` is bumped and the workers are woken. Each worker runs its chunk (if it has one) and
 * then decrements `pending`; every started worker acknowledges every job, so the fields stay
 * untouched until all have read them. Waiting: spin first (consecutive kernels follow each other
 * within microseconds), then block (wasm: memory.atomic.wait32; Linux: futex). A browser's main
 * thread may not block, so there the caller only spins (vt_threads_caller_can_wait(0)).
 *
 * Backends: wasm with shared memory (-matomics: workers are instances of the same module run by
 * web/pool.js, entering vt_worker_loop), Linux (pthreads + futex), and none (one thread). */
#include "threads.h"
#include "status.h"
#include <stdatomic.h>
#include <stdint.h>

#if defined(__wasm__) && defined(__wasm_atomics__)
#define VT_POOL_WASM 1
#elif defined(__linux__)
#define VT_POOL_NATIVE 1
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* a chunk should hold at least this many flops to be worth a wake-up (~10 us at 20 GFLOP/s);
 * tests set 0 so that even their tiny shapes are split */
static double min_work = 2.0e5;
void vt_threads_set_min_work(double flops) { min_work = flops >= 0 ? flops : 0; }
#define VT_SPIN 20000

static struct {
    atomic_int gen;     /* job counter; workers wait for it to change */
    atomic_int pending; /* workers that have not finished (acknowledged) the current job */
    atomic_int ready;   /* workers inside vt_worker_loop */
    atomic_int quit;
    atomic_int busy;    /* a job is running: calls from inside it run inline */
    vt_par_fn fn;
    void *ctx;
    int n, grain, nt;
} pool;
static int threads_max = 1;
__attribute__((unused)) static int workers = 0, caller_can_wait = 1;

int vt_threads_max(void) { return threads_max; }
int vt_threads_ready(void) { return atomic_load(&pool.ready); }
void vt_threads_caller_can_wait(int yes) { caller_can_wait = yes; }

/* ---- waiting ---- */
#if defined(VT_POOL_WASM)
static void wait_while(atomic_int *a, int v) { __builtin_wasm_memory_atomic_wait32((int *)a, v, -1); }
static void wake_all(atomic_int *a) { __builtin_wasm_memory_atomic_notify((int *)a, 0x7fffffffu); }
#elif defined(VT_POOL_NATIVE)
static void wait_while(atomic_int *a, int v) { syscall(SYS_futex, (int *)a, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0); }
static void wake_all(atomic_int *a) { syscall(SYS_futex, (int *)a, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0); }
#endif

/* chunk t of nt: items [lo, hi), boundaries at multiples of grain */
__attribute__((unused)) static void chunk(int n, int grain, int nt, int t, int *lo, int *hi) {
    int64_t units = ((int64_t)n + grain - 1) / grain;
    int64_t u0 = units * t / nt, u1 = units * (t + 1) / nt;
    *lo = (int)(u0 * grain);
    *hi = (int)(u1 * grain < n ? u1 * grain : n);
}

#if defined(VT_POOL_WASM) || defined(VT_POOL_NATIVE)
void vt_worker_loop(int tid) {
    int seen = atomic_load(&pool.gen);
    atomic_fetch_add(&pool.ready, 1);
    for (;;) {
        int g, spins = 0;
        while ((g = atomic_load(&pool.gen)) == seen) {
            if (++spins < VT_SPIN) continue;
            wait_while(&pool.gen, seen);
        }
        seen = g;
        if (atomic_load(&pool.quit)) break;
        if (tid < pool.nt) {
            int lo, hi;
            chunk(pool.n, pool.grain, pool.nt, tid, &lo, &hi);
            if (lo < hi) pool.fn(pool.ctx, lo, hi, tid);
        }
        if (atomic_fetch_sub(&pool.pending, 1) == 1) wake_all(&pool.pending);
    }
    atomic_fetch_sub(&pool.ready, 1);
}

void vt_parallel_for(int n, int grain, double work, vt_par_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t units = ((int64_t)n + grain - 1) / grain;
    double by_work = min_work > 0 ? work / min_work : (double)VT_MAX_THREADS;
    int nt = threads_max;
    if (units < nt) nt = (int)units;
    if (by_work < nt) nt = by_work < 1 ? 1 : (int)by_work;
    /* inline: one thread pays, no workers, nested, or a worker joined after vt_set_threads */
    if (nt <= 1 || workers == 0 || atomic_load(&pool.busy) || atomic_load(&pool.ready) != workers) {
        fn(ctx, 0, n, 0);
        return;
    }
    atomic_store(&pool.busy, 1);
    pool.fn = fn, pool.ctx = ctx, pool.n = n, pool.grain = grain, pool.nt = nt;
    atomic_store(&pool.pending, workers);
    atomic_fetch_add(&pool.gen, 1);
    wake_all(&pool.gen);
    int lo, hi;
    chunk(n, grain, nt, 0, &lo, &hi);
    fn(ctx, lo, hi, 0);
    int p, spins = 0;
    while ((p = atomic_load(&pool.pending)) != 0) {
        if (++spins < VT_SPIN) continue;
#if defined(VT_POOL_NATIVE)
        wait_while(&pool.pending, p);
#else
        if (caller_can_wait) wait_while(&pool.pending, p);
#endif
    }
    atomic_store(&pool.busy, 0);
}

void vt_threads_shutdown(void) {
    if (!workers) return;
    atomic_store(&pool.pending, workers);
    atomic_store(&pool.quit, 1);
    atomic_fetch_add(&pool.gen, 1);
    wake_all(&pool.gen);
#if defined(VT_POOL_NATIVE)
    extern void vt_native_join(void);
    vt_native_join();
#endif
    atomic_store(&pool.quit, 0);
    workers = 0;
    threads_max = 1;
}
#else /* no threads */
void vt_worker_loop(int tid) { (void)tid; }
void vt_parallel_for(int n, int grain, double work, vt_par_fn fn, void *ctx) {
    (void)grain, (void)work;
    if (n > 0) fn(ctx, 0, n, 0);
}
void vt_threads_shutdown(void) {}
#endif

#if defined(VT_POOL_WASM)
int vt_set_threads(int n) {
    if (n < 1 || n > VT_MAX_THREADS) return vt_fail(VT_ERR_ARG, "threads: %d is not in [1, %d]", n, VT_MAX_THREADS);
    int ready = atomic_load(&pool.ready);
    if (ready < n - 1)
        return vt_fail(VT_ERR_STATE, "threads: %d wanted, only %d pool workers are running", n, ready);
    workers = ready; /* every running worker acknowledges every job */
    threads_max = n;
    return n;
}
#elif defined(VT_POOL_NATIVE)
static pthread_t tids[VT_MAX_THREADS];
static void *native_worker(void *arg) {
    vt_worker_loop((int)(intptr_t)arg);
    return NULL;
}
void vt_native_join(void) {
    for (int i = 1; i <= workers; i++) pthread_join(tids[i], NULL);
}
int vt_set_threads(int n) {
    if (n < 1 || n > VT_MAX_THREADS) return vt_fail(VT_ERR_ARG, "threads: %d is not in [1, %d]", n, VT_MAX_THREADS);
    if (n == threads_max && workers == n - 1) return n;
    vt_threads_shutdown();
    for (int i = 1; i < n; i++) {
        if (pthread_create(&tids[i], NULL, native_worker, (void *)(intptr_t)i) != 0) {
            vt_threads_shutdown();
            return vt_fail(VT_ERR_NOMEM, "threads: cannot start worker thread %d", i);
        }
        workers = i;
    }
    while (atomic_load(&pool.ready) < n - 1) sched_yield();
    threads_max = n;
    return n;
}
#else
int vt_set_threads(int n) {
    if (n == 1) return 1;
    return vt_fail(VT_ERR_ARG, "threads: this build has no threads (asked for %d)", n);
}
#endif
