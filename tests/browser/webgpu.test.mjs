// webgpu.test.mjs: the demo chooses where training runs and says why, in headless Debian Chromium
// with WebGPU on SwiftShader (--enable-unsafe-webgpu --use-webgpu-adapter=swiftshader):
// ?backend=webgpu trains an MAE run on the GPU (the adapter named), and so does the library's
// Trainer (train({ backend: 'webgpu' }), a Web Worker); auto, finding only a software
// adapter, trains on wasm and says so; without WebGPU, ?backend=webgpu falls back to wasm with the
// reason. Skipped (with a message) only when /usr/bin/chromium is absent.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { skip, openDemoBrowser } from './harness.mjs';

if (skip) console.log(`# ${skip}`);
const WEBGPU = ['--enable-unsafe-webgpu', '--use-webgpu-adapter=swiftshader'];

describe('demo backends', { skip, timeout: 240_000 }, () => {
  test('?backend=webgpu trains on the SwiftShader adapter; auto keeps wasm, saying why', async () => {
    const b = await openDemoBrowser({ args: WEBGPU });
    try {
      const S = (expr) => b.page.evaluate(expr);
      await b.openPage('?backend=webgpu');
      const be = await S(() => window.vitrineDemo.backend);
      assert.equal(be.name, 'webgpu', JSON.stringify(be));
      assert.equal(be.adapter.architecture, 'swiftshader');
      assert.match(await b.page.textContent('#backend'), /training on WebGPU: .*swiftshader.*software/i);
      await b.reset();
      await b.configure({ kind: 'mae', model: 'mini', batch: 4, steps: 3, lr: '0.002', warmup: 1, seed: 3 });
      await b.page.click('#start');
      await b.waitFor(() => window.vitrineDemo.stopped === 'done' || window.vitrineDemo.error, null, 180_000);
      assert.equal(await S(() => window.vitrineDemo.error), null);
      const losses = await S(() => window.vitrineDemo.losses.map((l) => l.loss));
      assert.equal(losses.length, 3);
      assert.ok(losses.every(Number.isFinite), losses.join(' '));
      assert.ok(await S(() => window.vitrineDemo.mem.gpu > 0), 'the steps held GPU buffers'); // (the Session stepped there)
      assert.match(await b.page.textContent('#mem-bars'), /on the GPU now: [\d.]+ [KMG]iB of buffers/); // the gauge shows them
      // the run kept for a reload: its state synced from the GPU at the end (persist)
      await b.waitFor(() => window.vitrineDemo.saved && window.vitrineDemo.saved.step === 3, null, 30_000);
      assert.equal(await S(() => window.vitrineDemo.saved.ok), true);
      await b.reset();
      // the library's Trainer in a Web Worker on the GPU (its Session steps with trainStepAsync)
      const t = await S(async () => {
        const { train } = await import('/web/vitrine.js');
        const n = 8,
          pixels = new Uint8Array(n * 256).map((_, i) => (i * 37) & 255),
          gpu = [];
        let backend = null;
        const run = train({
          objective: 'mae',
          config: {
            encoder: { img_size: 16, patch_size: 4, in_chans: 1, embed_dim: 16, depth: 2, num_heads: 2 },
            decoder_dim: 16,
            decoder_depth: 1,
            decoder_heads: 2,
          },
          data: { pixels, n, size: 16, chans: 1 },
          batch: 2,
          steps: 2,
          noEval: true,
          backend: 'webgpu',
          onEngine: (e) => {
            backend = e.backend.name;
          },
          onStep: (e) => {
            if (e.memory) gpu.push(e.memory.gpu);
          },
        });
        try {
          const r = await run.done;
          return { backend, gpu, status: r.status, step: r.step, checkpoint: r.checkpoint ? r.checkpoint.length : 0 };
        } finally {
          run.dispose();
        }
      });
      assert.equal(t.backend, 'webgpu');
      assert.ok(t.gpu[0] > 0, JSON.stringify(t));
      assert.equal(t.status, 'done');
      assert.equal(t.step, 2);
      assert.ok(t.checkpoint > 0);
      await b.openPage(''); // auto: a software adapter only
      const auto = await S(() => window.vitrineDemo.backend);
      assert.equal(auto.name, 'wasm');
      assert.match(await b.page.textContent('#backend'), /training on wasm: .*software .*slower than wasm/);
      assert.deepEqual(b.errors, []);
    } finally {
      await b.close();
    }
  });

  test('without WebGPU, ?backend=webgpu falls back to wasm with the reason', async () => {
    const b = await openDemoBrowser();
    try {
      await b.openPage('?backend=webgpu');
      const be = await b.page.evaluate(() => window.vitrineDemo.backend);
      assert.equal(be.name, 'wasm');
      assert.match(be.reason, /^webgpu asked for: /);
      assert.match(await b.page.textContent('#backend'), /training on wasm: webgpu asked for: /);
    } finally {
      await b.close();
    }
  });
});
