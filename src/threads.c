/* threads.c: the pool behind vt_parallel_for (threads.h).
 *
 * One job at a time, posted by the thread that calls the engine: the job's fields are written,
 * its chunks (a few per thread) are opened by writing the job's tag into one word per chunk,
 * `gen` is bumped and sleeping workers are woken. Chunks have owners: thread t owns the t-th
 * contiguous run of them, claims its own first (in order), then takes what is left of the
 * others' (from their ends); the caller then waits only for chunks others are running. So a
 * worker that the OS has paused (2 cores shared with other work) delays nothing: the caller does
 * its share. And since every row-split kernel gives thread t the same rows (the t-th part of
 * them, as the GEMM's parts do), the rows a thread wrote are the rows it reads next, from its own
 * core's cache (measured: claiming chunks first come, first served, the main job's 2-thread step
 * moved data between the cores' caches between kernels). Chunk k always covers the same items,
 * so who runs it changes no bit. Waiting: spin first, then block (wasm: memory.atomic.wait32;
 * Linux: futex). A browser's main thread may not block: there the caller only spins
 * (vt_threads_caller_can_wait(0)).
 *
 * Backends: wasm with shared memory (-matomics: workers are instances of the same module run by
 * web/runtime/pool.js, entering vt_worker_loop), Linux (pthreads + futex), and none (one thread). */
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
/* polls before blocking (~150 us at ~0.4 ns a poll): a step's kernels follow each other within
 * microseconds, and a blocked thread is slow to wake where the cores are virtual (measured on the
 * 2-vCPU VM of bench/README.md: 4,000 polls, ~1.5 us, let the workers block between kernels and
 * the main job's step gained 1.1-1.35x from a second thread; 400,000 polls: 1.5-1.9x, same bits) */
#define VT_SPIN              400000
#define VT_CHUNKS_PER_THREAD 4

/* Chunk k of the current job is open while avail[k] holds the job's tag (tags count jobs, never
 * 0); a thread claims it by swapping the tag for 0. A thread still busy with an older job holds an
 * older tag, so its claims fail: a successful claim proves the job is unfinished, and whoever wins
 * one reads the job's fields only after winning. (32-bit words: no 64-bit atomics needed.) */
#define VT_MAX_CHUNKS (VT_MAX_THREADS * VT_CHUNKS_PER_THREAD)

static struct {
    atomic_int gen;                        /* bumped per job (and at shutdown); idle workers wait on it */
    _Atomic uint32_t avail[VT_MAX_CHUNKS]; /* the current job's tag while chunk k is open, else 0 / older */
    _Atomic uint32_t tag;                  /* the current job's tag */
    atomic_int chunks;                     /* the current job's chunk count C */
    atomic_int done;                       /* chunks of the current job finished */
    atomic_int arrived;                    /* workers that have seen the current job (tests: see below) */
    atomic_int ready;                      /* workers inside vt_worker_loop */
    atomic_int sleepers;                   /* workers blocked (or about to block) on gen */
    atomic_int caller_waits;               /* the caller is blocked (or about to block) on done */
    atomic_int quit;
    atomic_int busy; /* a job is running: calls from inside it run inline */
    vt_par_fn fn;    /* the job; written only while no chunk of it can be claimed */
    void *ctx;
    int n, grain;
    atomic_int max_tid; /* threads with tid >= it leave the job's chunks to others */
} pool;
static int threads_max = 1;
__attribute__((unused)) static int workers = 0, caller_can_wait = 1;
/* chunks each thread has run (tests check that the workers really take part) */
static atomic_int chunks_run[VT_MAX_THREADS];
int vt_threads_chunks_run(int tid) {
    return tid >= 0 && tid < VT_MAX_THREADS ? atomic_load(&chunks_run[tid]) : -1;
}

int vt_threads_max(void) { return threads_max; }
int vt_threads_ready(void) { return atomic_load(&pool.ready); }
void vt_threads_caller_can_wait(int yes) { caller_can_wait = yes; }

/* ---- waiting ---- */
#if defined(VT_POOL_WASM)
/* memory.atomic.wait32 only in a function of its own that reads nothing after it, reached through a
 * volatile pointer: V8 11.3's baseline compiler (Liftoff; Node 20) writes the wait's index as 64
 * bits into a 4-byte stack slot, so the neighbouring slot of the function that waits (another
 * local) reads 0 afterwards (three locals set, a wait32 with timeout 0, the last local read back:
 * 0 under --liftoff --no-wasm-tier-up; the optimising tier is right, so is Chromium 156's V8).
 * A pool worker enters its loop once and never leaves Liftoff's code. In the owner-first layout of
 * b475b24 that slot was the worker's tid: after its first sleep a worker ran its chunks as thread
 * 0, on thread 0's scratch (garbage attention gradients in the clang-14 builds). A static
 * function is inlined whatever it is marked (clang-14's driver and emcc run wasm-opt after
 * linking); a call through a volatile pointer stays a call (tests/node/threads.test.mjs checks
 * every -mt file). */
static void wait_impl(atomic_int *a, int v) { __builtin_wasm_memory_atomic_wait32((int *)a, v, -1); }
static void (*volatile wait_fn)(atomic_int *, int) = wait_impl;
static void wait_while(atomic_int *a, int v) { wait_fn(a, v); }
static void wake_all(atomic_int *a) { __builtin_wasm_memory_atomic_notify((int *)a, 0x7fffffffu); }
#elif defined(VT_POOL_NATIVE)
static void wait_while(atomic_int *a, int v) {
    syscall(SYS_futex, (int *)a, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}
static void wake_all(atomic_int *a) {
    syscall(SYS_futex, (int *)a, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}
#endif

#if defined(VT_POOL_WASM) || defined(VT_POOL_NATIVE)
/* Runs chunk k of job `tag` if it is still open. Chunk k of C covers items
 * [units*k/C, units*(k+1)/C) x grain: the same ranges whoever runs them. */
static void run_chunk(int tid, uint32_t tag, int k) {
    uint32_t t = tag;
    if (!atomic_compare_exchange_strong(&pool.avail[k], &t, 0)) return;
    int C = atomic_load(&pool.chunks), n = pool.n, grain = pool.grain;
    int64_t units = ((int64_t)n + grain - 1) / grain;
    int64_t lo = units * k / C * grain, hi = units * (k + 1) / C * grain;
    pool.fn(pool.ctx, (int)lo, (int)(hi < n ? hi : n), tid);
    atomic_fetch_add_explicit(&chunks_run[tid], 1, memory_order_relaxed);
    if (atomic_fetch_add(&pool.done, 1) + 1 == C && atomic_load(&pool.caller_waits)) wake_all(&pool.done);
}
/* Claims and runs chunks of job `tag` until none is left: thread tid's own run of chunks in
 * order, then the others' from their ends (their owners work from the front). C and max_tid are
 * read before any claim: if they belong to a newer job than `tag`, every claim fails. */
static void run_chunks(int tid, uint32_t tag) {
    int C = atomic_load(&pool.chunks), nt = atomic_load(&pool.max_tid);
    if (tid >= nt || C > VT_MAX_CHUNKS) return; /* threads with tid >= nt leave the job to others */
    for (int k = tid * C / nt; k < (tid + 1) * C / nt; k++) run_chunk(tid, tag, k);
    for (int o = 1; o < nt; o++) {
        int other = (tid + o) % nt;
        for (int k = (other + 1) * C / nt - 1; k >= other * C / nt; k--) run_chunk(tid, tag, k);
    }
}

void vt_worker_loop(int tid) {
    int seen = atomic_load(&pool.gen);
    atomic_fetch_add(&pool.ready, 1);
    for (;;) {
        int g, spins = 0;
        while ((g = atomic_load(&pool.gen)) == seen) {
            if (++spins < VT_SPIN) continue;
            atomic_fetch_add(&pool.sleepers, 1);
            wait_while(&pool.gen, seen);
            atomic_fetch_sub(&pool.sleepers, 1);
        }
        seen = g;
        if (atomic_load(&pool.quit)) break;
        atomic_fetch_add(&pool.arrived, 1);
        run_chunks(tid, atomic_load(&pool.tag));
    }
    atomic_fetch_sub(&pool.ready, 1);
}

void vt_parallel_for(int n, int grain, double work, vt_par_fn fn, void *ctx) {
    vt_parallel_for_max(n, grain, work, VT_MAX_THREADS, fn, ctx);
}

void vt_parallel_for_max(int n, int grain, double work, int max_threads, vt_par_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t units = ((int64_t)n + grain - 1) / grain;
    double by_work = min_work > 0 ? work / min_work : (double)VT_MAX_THREADS;
    int nt = threads_max < max_threads ? threads_max : max_threads;
    if (units < nt) nt = (int)units;
    if (by_work < nt) nt = by_work < 1 ? 1 : (int)by_work;
    /* inline: one thread pays, no workers, nested, or a worker joined after vt_set_threads */
    if (nt <= 1 || workers == 0 || atomic_load(&pool.busy) || atomic_load(&pool.ready) != workers) {
        fn(ctx, 0, n, 0);
        return;
    }
    /* more chunks than threads: a thread that the OS has paused leaves its share to the others */
    int64_t C = (int64_t)nt * VT_CHUNKS_PER_THREAD;
    if (C > units) C = units;
    atomic_store(&pool.busy, 1);
    uint32_t tag = atomic_load(&pool.tag) + 1;
    if (tag == 0) tag = 1; /* (after 2^32 jobs) 0 means claimed */
    pool.fn = fn, pool.ctx = ctx, pool.n = n, pool.grain = grain;
    atomic_store(&pool.max_tid, nt);
    atomic_store(&pool.chunks, (int)C);
    atomic_store(&pool.done, 0);
    atomic_store(&pool.arrived, 0);
    atomic_store(&pool.tag, tag);
    for (int k = 0; k < (int)C; k++) atomic_store(&pool.avail[k], tag);
    atomic_fetch_add(&pool.gen, 1);
    /* A wake is a system call (native) or a lock (wasm) per job, and most jobs find every worker
     * still polling: wake only when one may sleep. A worker counts itself a sleeper before its
     * wait checks gen, and gen is bumped before sleepers is read (both seq_cst): either the wake
     * below sees it, or its wait sees the new gen and returns at once. (done and caller_waits
     * likewise.) */
    if (atomic_load(&pool.sleepers)) wake_all(&pool.gen);
    /* Tests split even microsecond-long loops (min_work 0), which the caller would finish before
     * a sleeping worker wakes: there it lets every worker arrive first, so that the workers
     * really run chunks and the bitwise tests compare threads, not the caller with itself. */
    if (min_work == 0)
        while (atomic_load(&pool.arrived) < workers) {}
    run_chunks(0, tag);
    int d, spins = 0;
    while ((d = atomic_load(&pool.done)) != (int)C) { /* only chunks others are running are left */
        if (++spins < VT_SPIN) continue;
#if defined(VT_POOL_WASM)
        if (!caller_can_wait) continue;
#endif
        atomic_store(&pool.caller_waits, 1);
        wait_while(&pool.done, d);
        atomic_store(&pool.caller_waits, 0);
    }
    atomic_store(&pool.busy, 0);
}

/* A worker that will never run again (wasm: the JavaScript worker died, web/runtime/pool.js saw it) stops
 * counting: jobs go on with the others, or inline once none is left. Between engine calls only,
 * so the lost worker holds no chunk of a running job. */
int vt_threads_lost(int n) {
    if (n < 0 || n > workers) n = workers;
    atomic_fetch_sub(&pool.ready, n);
    workers -= n;
    return workers;
}

/* Workers leave their loop at once (vt_threads_shutdown waits for them); returns at once. */
void vt_threads_quit(void) {
    if (!workers) return;
    atomic_store(&pool.quit, 1);
    atomic_fetch_add(&pool.gen, 1);
    wake_all(&pool.gen);
}

void vt_threads_shutdown(void) {
    if (workers) { /* (none left: every one lost, vt_threads_lost) */
        vt_threads_quit();
#if defined(VT_POOL_NATIVE)
        extern void vt_native_join(void);
        vt_native_join();
#else
        while (atomic_load(&pool.ready) > 0) {} /* each leaves its loop at once */
#endif
        atomic_store(&pool.quit, 0);
    }
    workers = 0;
    threads_max = 1;
}
#else /* no threads */
int vt_threads_lost(int n) {
    (void)n;
    return 0;
}
void vt_threads_quit(void) {}
void vt_worker_loop(int tid) { (void)tid; }
void vt_parallel_for(int n, int grain, double work, vt_par_fn fn, void *ctx) {
    (void)grain, (void)work;
    if (n > 0) fn(ctx, 0, n, 0);
}
void vt_parallel_for_max(int n, int grain, double work, int max_threads, vt_par_fn fn, void *ctx) {
    (void)max_threads;
    vt_parallel_for(n, grain, work, fn, ctx);
}
void vt_threads_shutdown(void) {}
#endif

#if defined(VT_POOL_WASM)
int vt_set_threads(int n) {
    if (n < 1 || n > VT_MAX_THREADS)
        return vt_fail(VT_ERR_ARG, "threads: %d is not in [1, %d]", n, VT_MAX_THREADS);
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
    if (n < 1 || n > VT_MAX_THREADS)
        return vt_fail(VT_ERR_ARG, "threads: %d is not in [1, %d]", n, VT_MAX_THREADS);
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
