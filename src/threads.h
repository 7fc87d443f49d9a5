/* threads.h: the engine's one parallel loop. Kernels split their work into contiguous ranges
 * that threads run at the same time; a range's results never depend on which thread runs it or
 * on how many threads there are (splits are made only where no sum changes order), so every
 * thread count gives the same bits.
 *
 * Threads: native builds start pthreads (vt_set_threads); wasm builds with shared memory get
 * workers from the JavaScript pool (web/runtime/pool.js), each of which calls vt_worker_loop(tid) and
 * stays there. Builds without either run everything on the calling thread. */
#ifndef VT_THREADS_H
#define VT_THREADS_H

#define VT_MAX_THREADS 64

/* fn(ctx, lo, hi, tid): do items [lo, hi); tid < vt_threads_max() names the thread (for
 * per-thread scratch). */
typedef void (*vt_par_fn)(void *ctx, int lo, int hi, int tid);

/* Runs fn over [0, n) split into at most vt_threads_max() contiguous chunks whose boundaries are
 * multiples of `grain`; `work` (about the flops of the whole loop) decides how many threads pay
 * off (small loops stay on the caller). The caller runs chunk 0 and returns when all are done.
 * A call made from inside a chunk runs inline (no nesting). */
void vt_parallel_for(int n, int grain, double work, vt_par_fn fn, void *ctx);
/* The same with at most max_threads threads (tid < max_threads): for kernels whose per-thread
 * scratch was planned for that many (a plan is made for a stated thread count, which the pool
 * may exceed). */
void vt_parallel_for_max(int n, int grain, double work, int max_threads, vt_par_fn fn, void *ctx);

/* Threads a parallel loop may use (1 = none): per-thread scratch is sized by it. */
int vt_threads_max(void);
/* Native: starts n-1 worker threads (stops the old ones). Wasm: uses n threads, the caller plus
 * n-1 workers that the JavaScript pool has started (vt_threads_ready() of them must be running).
 * Returns the count now in use, or a negative vt_status (n out of range, not enough workers,
 * thread creation failed). Call only between engine calls. */
int vt_set_threads(int n);
/* wasm: workers inside vt_worker_loop; native: worker threads running */
int vt_threads_ready(void);
/* wasm: the body of a pool worker; returns when vt_threads_shutdown() is called. */
void vt_worker_loop(int tid);
/* Stops every worker (native: joins them; wasm: waits until every worker counted ready has left). */
void vt_threads_shutdown(void);
/* wasm: asks every worker to leave its loop and returns at once (the pool's close() waits with a
 * time limit, then vt_threads_lost for any that never leave, then vt_threads_shutdown). */
void vt_threads_quit(void);
/* wasm: n pool workers will never run again (their JavaScript workers died): they stop counting
 * as ready, and jobs run on the workers left (inline once none is). Call only between engine calls.
 * Returns the workers left. */
int vt_threads_lost(int n);
/* Tests: chunks of pooled loops thread tid has run so far (-1 out of range). */
int vt_threads_chunks_run(int tid);
/* Tests: the flops below which a chunk is not worth a thread (0 = split everything). */
void vt_threads_set_min_work(double flops);
/* 1 when the caller may block in atomic.wait (not on a browser's main thread), else it spins. */
void vt_threads_caller_can_wait(int yes);
#endif
