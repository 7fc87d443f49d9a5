// threads.test.mjs: the same bits at every thread count, through every wasm build that has
// threads (relaxed SIMD, Emscripten SIMD128 and WASI SIMD128: their shared-memory "-mt" files): every fixture,
// forward and backward (the parity dump holds every output and gradient), under every
// checkpointing policy, and a few MAE / AIM training steps (AdamW), at 2, 3 and 5 threads
// against 1 thread of the same file, byte for byte. Splitting is forced down to the smallest
// shapes, so the tiny fixtures still cut every kernel into pieces. Plus the API around it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createVitrine } from '../../web/vitrine.js';
import { WASM_DIR, MT_BUILDS, fixtureNames, fixture } from './util.mjs'; // (util.mjs turns relaxed SIMD on)

const POLICIES = ['none', 'block', 'selective', 'every:2'];
const COUNTS = [2, 3, 5];
const TINY = {
  encoder: { img_size: 16, patch_size: 4, in_chans: 3, embed_dim: 24, depth: 2, num_heads: 3 },
  decoder_dim: 16,
  decoder_depth: 1,
  decoder_heads: 2,
};

function runAll(vt) {
  vt._splitEverything(true);
  const out = new Map();
  for (const f of fixtureNames()) {
    const bytes = fixture(f);
    for (const policy of POLICIES) {
      const r = vt.parity(bytes, { policy, dump: true });
      assert.ok(r.pass, `${vt.build} x${vt.threads} ${f} ${policy}: ${r.error || r.worst}`);
      out.set(`${f} ${policy}`, r.dump);
    }
  }
  for (const kind of ['mae', 'aim']) {
    const m = vt.createModel({
      kind,
      config: kind === 'mae' ? TINY : { encoder: TINY.encoder, head_hidden_dim: 20, head_blocks: 1 },
    });
    m.initWeights(7);
    m.trainerInit({ lr: 1e-3, warmupSteps: 1, totalSteps: 10, seed: 3, clipNorm: 1 });
    const img = Float32Array.from({ length: 5 * 3 * 16 * 16 }, (_, i) => Math.cos(0.37 * i));
    for (const policy of ['none', 'block']) {
      m.setGradCheckpointing(policy);
      m.trainStep(img, 5);
      m.trainStep(img, 5);
    }
    out.set(`train ${kind}`, m.saveTrainState());
    m.dispose();
  }
  return out;
}

for (const build of MT_BUILDS) {
  test(`${build}: every fixture x policy and training, bitwise equal at 1, 2, 3 and 5 threads`, async () => {
    const one = await createVitrine({ wasm: build, threads: 1, wasmDir: WASM_DIR });
    assert.equal(one.threads, 1);
    assert.ok(one.threaded);
    const ref = runAll(one);
    one.close();
    for (const n of COUNTS) {
      const vt = await createVitrine({ wasm: build, threads: n, wasmDir: WASM_DIR });
      assert.equal(vt.threads, n);
      const got = runAll(vt);
      const chunks = vt._chunksRun();
      vt.close();
      // the workers really took part (else this would compare 1 thread with 1 thread)
      assert.ok(
        chunks.slice(1).every((c) => c > 0),
        `${build} x${n}: chunks run per thread (caller, workers) ${chunks}`,
      );
      assert.equal(vt.threads, 1, 'closed: one thread');
      for (const [k, v] of ref)
        assert.ok(Buffer.from(got.get(k)).equals(Buffer.from(v)), `${build}: ${k} differs at ${n} threads`);
    }
  });
}

// Node 20's Liftoff clobbers a local of any function that waits (src/threads.c, wait_impl), so every
// wait of the engine's own must end a function of its own: the wait, its result dropped, the
// function's end. Allowed besides: the linker's memory initialiser (memory.init, runs once before
// any call) and waits whose result is read (Emscripten's libc futex; ours never read it).
test('every -mt file: each memory.atomic.wait32 of the pool ends a function of its own', () => {
  for (const build of MT_BUILDS) {
    const file = path.join(WASM_DIR, `vitrine-${build}.wasm`);
    const lines = execFileSync('wasm-objdump', ['-d', file], { encoding: 'utf8', maxBuffer: 1 << 30 }).split('\n');
    let fn = null,
      body = [],
      ours = 0;
    const check = () => {
      if (fn == null) return;
      const ins = body.map((l) => l.slice(l.indexOf('|') + 1).replace(/^ /, ''));
      if (ins.some((i) => /^\s*memory\.init\b/.test(i))) return;
      ins.forEach((i, k) => {
        if (!/memory\.atomic\.wait32/.test(i)) return;
        if (ins[k + 1]?.trim() !== 'drop') return; // the result is read: not one of ours
        assert.ok(
          ins[k + 2] === 'end' && k + 3 === ins.length,
          `${build}: ${fn} waits and goes on (${ins
            .slice(k, k + 4)
            .map((x) => x.trim())
            .join('; ')}): Liftoff clobbers its locals`,
        );
        ours++;
      });
    };
    for (const l of lines) {
      if (/^[0-9a-f]+ func\[\d+\]/.test(l)) {
        check();
        fn = l.trim();
        body = [];
      } else if (fn && l.includes('|') && !/\| local\[/.test(l)) body.push(l);
    }
    check();
    assert.ok(ours >= 1, `${build}: the pool's wait not found in ${file}`);
  }
});

if (!process.env.VT_THREADS_LIFTOFF) {
  test("the same bits under V8's baseline compiler only (--liftoff --no-wasm-tier-up)", () => {
    const { NODE_TEST_CONTEXT, ...env } = process.env; // (set by the runner: the child would report in its binary form)
    const r = spawnSync(
      process.execPath,
      ['--liftoff', '--no-wasm-tier-up', '--test', '--test-name-pattern=bitwise equal', fileURLToPath(import.meta.url)],
      { env: { ...env, VT_THREADS_LIFTOFF: '1' }, encoding: 'utf8' },
    );
    assert.equal(r.status, 0, (r.stdout || '').slice(-4000) + (r.stderr || '').slice(-2000));
    assert.match(r.stdout, new RegExp(`# pass ${MT_BUILDS.length}\\b`));
  });
}

test('threads API: default every core, fallbacks, refusals', async () => {
  const os = await import('node:os');
  const vt = await createVitrine({ wasmDir: WASM_DIR });
  assert.equal(vt.threads, os.availableParallelism());
  assert.equal(vt.threaded, vt.threads > 1);
  vt.close();
  const sc = await createVitrine({ wasm: 'scalar', threads: 2, wasmDir: WASM_DIR });
  assert.equal(sc.threads, 1);
  assert.match(sc.threadsNote, /scalar build has no threads/);
  await assert.rejects(createVitrine({ threads: 0, wasmDir: WASM_DIR }), /threads must be an integer/);
  await assert.rejects(createVitrine({ threads: 1.5, wasmDir: WASM_DIR }), /threads must be an integer/);
  await assert.rejects(createVitrine({ wasm: 'scalar-mt', wasmDir: WASM_DIR }), /unknown wasm build/);
});
