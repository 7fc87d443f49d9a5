// pool.test.mjs: the thread pool survives its workers (web/runtime/pool.js). A worker killed between engine
// calls (as a browser reclaiming memory would) is seen through its exit event: the engine goes on
// with the workers left -- the same bits, the workers left still take part -- then with one thread,
// says so in threadsNote, and close() returns. A worker that died unseen (its events taken away)
// does not make close() hang: it waits a bounded time, then says so. A pool whose workers cannot
// start leaves the engine on one thread, saying why.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createVitrine } from '../../web/vitrine.js';
import { startPool, POOL_TIMEOUTS } from '../../web/runtime/pool.js';
import { WASM_DIR, MT_BUILDS } from './util.mjs';

const CONFIG = {
  encoder: { img_size: 16, patch_size: 4, in_chans: 3, embed_dim: 24, depth: 2, num_heads: 3 },
  decoder_dim: 16,
  decoder_depth: 1,
  decoder_heads: 2,
};
const IMAGES = Float32Array.from({ length: 4 * 3 * 16 * 16 }, (_, i) => Math.sin(0.29 * i));

// three MAE steps from the same start: the state's bytes
function steps(vt) {
  const m = vt.createModel({ kind: 'mae', config: CONFIG });
  m.initWeights(3);
  m.trainerInit({ lr: 1e-3, warmupSteps: 1, totalSteps: 10, seed: 5 });
  for (let i = 0; i < 3; i++) m.trainStep(IMAGES, 4);
  const state = m.saveTrainState();
  m.dispose();
  return Buffer.from(state);
}
const build = MT_BUILDS.includes('simd-mt') ? 'simd-mt' : MT_BUILDS[0];

test(`${build}: workers killed one by one -- the engine goes on with those left, then one thread, the same bits; close() returns`, async () => {
  const one = await createVitrine({ wasm: build, threads: 1, wasmDir: WASM_DIR });
  const ref = steps(one);
  one.close();
  const vt = await createVitrine({ wasm: build, threads: 3, wasmDir: WASM_DIR });
  vt._splitEverything(true);
  assert.equal(vt.threads, 3);
  assert.ok(steps(vt).equals(ref));
  const [w1, w2] = vt._pool.workers;
  w1.terminate();
  await once(w1, 'exit');
  assert.equal(vt.threads, 2);
  assert.match(vt.threadsNote, /^2 threads: pool worker 1 stopped \(exit code \d+\)$/);
  const before = vt._chunksRun();
  assert.ok(steps(vt).equals(ref), 'after a worker died: other bits');
  const after = vt._chunksRun();
  assert.ok(after[2] > before[2], `the worker left took no part: ${before} -> ${after}`);
  assert.equal(after[1], before[1], 'the dead worker ran chunks');
  w2.terminate();
  await once(w2, 'exit');
  assert.equal(vt.threads, 1);
  assert.match(vt.threadsNote, /^1 thread: pool worker 2 stopped/);
  assert.ok(steps(vt).equals(ref), 'on one thread: other bits');
  const t0 = Date.now();
  vt.close();
  assert.ok(Date.now() - t0 < POOL_TIMEOUTS.close, 'close() waited for workers it knew were dead');
  assert.equal(vt.threads, 1);
  assert.ok(steps(vt).equals(ref));
});

test(`${build}: a worker that died unseen -- close() returns after its bounded wait and says so`, async () => {
  const vt = await createVitrine({ wasm: build, threads: 3, wasmDir: WASM_DIR });
  const [w1] = vt._pool.workers;
  w1.removeAllListeners('exit'); // the pool never hears of this death
  w1.removeAllListeners('error');
  w1.terminate();
  await once(w1, 'exit');
  assert.equal(vt.threads, 3, 'the pool cannot know');
  const t0 = Date.now();
  vt.close();
  const waited = Date.now() - t0;
  assert.ok(waited >= POOL_TIMEOUTS.close - 50 && waited < POOL_TIMEOUTS.close + 5000, `close() took ${waited} ms`);
  assert.equal(vt.threads, 1);
  assert.match(vt.threadsNote, /^1 thread: 1 pool worker did not stop \(dead\) and was terminated$/);
  const m = vt.createModel({ kind: 'mae', config: CONFIG }); // the engine still works, on this thread
  m.initWeights(1);
  assert.ok(
    Number.isFinite(
      m.loss(IMAGES, {
        idxKeep: Array.from({ length: 4 }, () => [0, 1, 2, 3, 4]),
        idxMask: Array.from({ length: 4 }, () => Array.from({ length: 12 }, (_, i) => i + 5)),
      }),
    ),
  );
  m.dispose();
});

test(`${build}: workers that cannot start leave the engine on one thread, saying why`, async () => {
  const vt = await createVitrine({ wasm: build, threads: 1, wasmDir: WASM_DIR });
  const low = vt._low,
    c = vt._c;
  const engine = (over) => ({
    module: low.module,
    memory: low.memory,
    malloc: (n) => c.malloc(n),
    setThreads: (n, w) => c.set_threads(n, w),
    ready: () => c.threads_ready(),
    quit: () => c.threads_quit(),
    lost: (n) => c.threads_lost(n),
    shutdown: () => c.threads_shutdown(),
    run: low.run,
    stack: low.stack,
    ...over,
  });
  // a worker loop that is not there: every worker reports its error
  await assert.rejects(
    startPool(engine({ run: 'vtw_no_such_export' }), 3),
    /pool worker \d: .*is not a function|pool worker \d: exit code/,
  );
  // workers that never enter the loop within the time allowed (long enough for a worker to start
  // and say 'ready' on a loaded host: the message is the loop's, not the start's)
  await assert.rejects(
    startPool(engine({ ready: () => 0 }), 2, { timeouts: { start: 3000 } }),
    /only 0 of 1 workers entered the loop within 3000 ms/,
  );
  assert.equal(c.threads_max(), 1, 'a failed start left the engine with more than one thread');
  vt.close();
});
