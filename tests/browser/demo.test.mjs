// demo.test.mjs: the browser demo (demo/) in headless Debian Chromium, driven by playwright-core.
//   node --test tests/browser/
// Serves the page on 127.0.0.1 (random port) with demo/serve.mjs, opens it in a fresh profile and
// checks: the relaxed-SIMD build loads, cross-origin isolated, with a pool of > 1 thread (and, served
// without COOP / COEP, falls back to 1 thread saying why); training runs with the loss falling; switching checkpointing in
// the middle of a run leaves every loss bit the same as a run that never switched; a reload
// resumes from IndexedDB bit for bit; a configuration that does not fit the budget is refused
// with the numbers and a policy; the user's own images (PNG files) train; the shell itself takes
// ImageData and ImageBitmap in the page (same bits as a Float32Array normalised by hand). Writes
// build/demo-screenshot.png. Skipped (with a message) only when /usr/bin/chromium is absent.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { BUILD, skip, png, openDemoBrowser } from './harness.mjs';

if (skip) console.log(`# ${skip}`);

// ---- the browser ---------------------------------------------------------------------------------

describe('browser demo', { skip, timeout: 180_000 }, () => {
  let page, ctx, profile, url, errors, close, files, waitFor, openPage, reset, fill, startPausedAt, switchPolicyAt;
  const S = (expr) => page.evaluate(expr);
  const losses = () =>
    S(() => window.vitrineDemo.losses.map((l) => ({ step: l.step, hex: l.hex, policy: l.policy, loss: l.loss })));
  const configure = (o = {}) =>
    fill({ kind: 'mae', model: 'fmnist', batch: 16, steps: 60, lr: '0.002', warmup: 2, seed: 3, data: 'fmnist', ...o });
  const waitDone = () => waitFor(() => window.vitrineDemo.stopped === 'done' || window.vitrineDemo.error, null, 60_000);

  before(async () => {
    ({
      page,
      ctx,
      profile,
      url,
      errors,
      close,
      waitFor,
      openPage,
      reset,
      configure: fill,
      startPausedAt,
      switchPolicyAt,
    } = await openDemoBrowser());
    const dir = join(profile, 'images');
    mkdirSync(dir);
    files = [
      ['stripes.png', png(40, 30, (x, y) => (Math.floor(y / 5) % 2 ? [230, 40, 40] : [20, 20, 200]))],
      ['checker.png', png(32, 32, (x, y) => (((x >> 2) + (y >> 2)) % 2 ? [255, 255, 255] : [0, 0, 0]))],
      ['gradient.png', png(50, 64, (x, y) => [x * 5, y * 4, 128])],
    ].map(([n, b]) => {
      const p = join(dir, n);
      writeFileSync(p, b);
      return p;
    });
    await openPage();
  });

  after(async () => {
    if (close) await close();
  });

  test('the page loads the relaxed-SIMD build (Chromium validates relaxed SIMD by default), cross-origin isolated, with a pool of threads', async () => {
    const s = await S(() => ({
      build: window.vitrineDemo.build,
      k: window.vitrineDemo.simdKernels,
      badge: document.getElementById('build').textContent,
      threads: window.vitrineDemo.threads,
      note: window.vitrineDemo.threadsNote,
      isolated: window.crossOriginIsolated,
      cores: navigator.hardwareConcurrency,
    }));
    assert.equal(s.build, 'relaxed');
    assert.equal(s.k, true);
    assert.match(s.badge, /relaxed/);
    assert.equal(s.isolated, true, 'serve.mjs sends COOP / COEP');
    assert.ok(s.threads > 1, `the page reports ${s.threads} thread(s) (${s.note}); cores ${s.cores}`);
    assert.equal(s.threads, s.cores);
    assert.match(s.badge, new RegExp(`${s.threads} threads`));
  });

  let reference; // the losses of a run that never switched
  test('served without COOP / COEP, the page falls back to 1 thread and says why', async () => {
    const { startServer } = await import('../../demo/serve.mjs');
    const plain = await startServer({ port: 0, isolate: false });
    const p2 = await ctx.newPage();
    try {
      await p2.goto(plain.url);
      await p2.waitForFunction(() => window.vitrineDemo && window.vitrineDemo.booted, null, {
        timeout: 30_000,
        polling: 50,
      });
      const s = await p2.evaluate(() => ({
        threads: window.vitrineDemo.threads,
        note: window.vitrineDemo.threadsNote,
        isolated: window.crossOriginIsolated,
        badge: document.getElementById('build').textContent,
      }));
      assert.equal(s.isolated, false);
      assert.equal(s.threads, 1);
      assert.match(s.note, /not cross-origin isolated/);
      assert.match(s.badge, /1 thread \(.*cross-origin isolated/);
    } finally {
      await p2.close();
      plain.server.close();
    }
  });

  test('trains with the loss falling; checkpointing switched mid-run changes no bit', async () => {
    await configure();
    assert.equal(await page.inputValue('#policy'), 'none');
    await switchPolicyAt(10, 'block'); // from the next step on, while training runs
    await waitDone();
    const switched = await losses();
    assert.equal(await S(() => window.vitrineDemo.error), null);
    assert.equal(switched.length, 60);
    const nNone = switched.filter((l) => l.policy === 'none').length,
      nBlock = switched.filter((l) => l.policy === 'block').length;
    assert.ok(nNone >= 10 && nBlock >= 10, `steps under none ${nNone}, under block ${nBlock}`);
    const mean = (a) => a.reduce((x, l) => x + l.loss, 0) / a.length;
    assert.ok(
      mean(switched.slice(-10)) < 0.9 * mean(switched.slice(0, 5)),
      `loss did not fall: ${mean(switched.slice(0, 5))} -> ${mean(switched.slice(-10))}`,
    );
    // the run's memory: the trainer's wasm memory within the reach planned for the policies it ran (its
    // arena keeps the size of the largest), within the budget
    const mem = await S(() => ({
      linear: window.vitrineDemo.mem.linear,
      budget: window.vitrineDemo.plan.budget,
      need: Math.max(
        ...window.vitrineDemo.plan.rows
          .filter((r) => r.policy === 'none' || r.policy === 'block')
          .map((r) => r.keepNeed),
      ),
    }));
    assert.ok(mem.linear <= mem.need && mem.need <= mem.budget, JSON.stringify(mem));
    await page.screenshot({ path: join(BUILD, 'demo-screenshot.png'), fullPage: true });

    await reset();
    await page.selectOption('#policy', 'none');
    await page.click('#start');
    await waitDone();
    reference = await losses();
    assert.ok(reference.every((l) => l.policy === 'none'));
    assert.deepEqual(
      switched.map((l) => l.hex),
      reference.map((l) => l.hex),
      'losses (float32 bits) with and without the switch',
    );
  });

  test('a reload resumes from IndexedDB, bit for bit; a finished run reloads as finished, with its reconstructions', async () => {
    await reset();
    await configure();
    await startPausedAt(15);
    await waitFor(() => /kept in this browser at step/.test(document.getElementById('storage-status').textContent));
    const at = await S(() => window.vitrineDemo.step);
    await openPage();
    assert.equal(await S(() => window.vitrineDemo.resumed), true);
    assert.equal(await S(() => window.vitrineDemo.step), at);
    await page.click('#start');
    await waitDone();
    const resumed = await losses();
    assert.deepEqual(
      resumed.map((l) => l.hex),
      reference.map((l) => l.hex),
    );
    await waitFor(() => /kept in this browser at step 60/.test(document.getElementById('storage-status').textContent));
    await openPage();
    const s = await S(() => ({
      status: document.getElementById('status').textContent,
      stopped: window.vitrineDemo.stopped,
      start: document.getElementById('start'),
      recon: document.getElementById('recon-note').textContent,
      step: window.vitrineDemo.step,
    }));
    assert.equal(s.step, 60);
    assert.equal(s.stopped, 'done');
    assert.match(s.status, /^finished: 60 steps/);
    assert.match(s.recon, /^step 60,/);
    assert.equal(await page.isDisabled('#start'), true);
    assert.match(await page.textContent('#start'), /Finished/);
  });

  test('a configuration that does not fit is refused, with the numbers and a policy that fits', async () => {
    await reset();
    await configure({ model: 'fmnist-base', batch: 512, steps: 1 });
    await page.selectOption('#policy', 'none');
    await page.selectOption('#budget', '512');
    await page.click('#start');
    await waitFor(() => !document.getElementById('refusal').hidden);
    const text = await page.textContent('#refusal-text');
    assert.match(text, /Refused before running\. Does not fit: with checkpointing 'none' and batch 512/);
    assert.match(text, /MiB/);
    const m = /It fits with checkpointing '(selective|block|sqrt|every:\d)' at batch 512/.exec(text);
    assert.ok(m, text);
    assert.equal(await S(() => window.vitrineDemo.run), null);
    assert.equal(await S(() => window.vitrineDemo.step), 0);
    await (await page.$('#ckpt-panel')).screenshot({ path: join(BUILD, 'demo-refusal.png') });
    // the fix, one click away: that policy, then the run starts
    assert.match(await page.textContent('#refusal-fix'), new RegExp(`Use checkpointing '${m[1]}'`));
    await page.click('#refusal-fix');
    await waitDone();
    assert.equal(await S(() => window.vitrineDemo.error), null);
    assert.equal(
      await page.inputValue('#policy'),
      m[1] === 'sqrt' || m[1] === 'selective' || m[1] === 'block' ? m[1] : 'every',
    );
    assert.equal(await S(() => window.vitrineDemo.losses[0].policy), m[1]);
    const mem = await S(() => ({ linear: window.vitrineDemo.mem.linear, budget: window.vitrineDemo.plan.budget }));
    assert.ok(mem.linear <= mem.budget, JSON.stringify(mem));
    await reset();
    await page.selectOption('#budget', '1024');
    await page.selectOption('#model', 'mini');
  });

  test("a form value out of range is refused by the library's validator, named with its range, not clamped", async () => {
    await reset();
    await configure({ batch: -5, steps: 5 });
    await page.click('#start');
    await waitFor(() => !document.getElementById('refusal').hidden);
    assert.match(await page.textContent('#refusal-text'), /batch: -5 is not a whole number in 1\.\.65536/);
    assert.equal(await S(() => window.vitrineDemo.run), null);
    assert.equal(await S(() => window.vitrineDemo.step), 0);
    await configure({ batch: 16, steps: 5, seed: 1.5 });
    await page.click('#start');
    await waitFor(() =>
      /seed: 1\.5 is not a whole number in 0\.\.2\^53-3/.test(document.getElementById('refusal-text').textContent),
    );
    assert.equal(await S(() => window.vitrineDemo.run), null);
  });

  test("a 224 px timm preset under MAE: a decoder sized for a tab by default, lightly's one choice away, the expected seconds per step said first", async () => {
    await reset();
    await configure({ model: 'mini' });
    assert.equal(await page.isHidden('#decoder-wrap'), true); // only a timm preset has the choice
    await page.selectOption('#model', 'vit_tiny_patch16_224');
    await waitFor(
      () =>
        !document.getElementById('decoder-wrap').hidden &&
        /at batch 16 here/.test(document.getElementById('expect').textContent),
    );
    assert.equal(await page.inputValue('#decoder'), 'tab');
    const labels = await page.$$eval('#decoder option', (os) => os.map((o) => o.textContent));
    assert.deepEqual(labels, [
      'tab: sized for a tab: 128 wide, 2 deep, 4 heads',
      "lightly: lightly's MAE: 512 wide, 8 deep, 16 heads",
    ]);
    // one expectation on the page, beside Start: this model's own forward pass timed, before any step runs
    assert.match(
      await page.textContent('#expect'),
      /^Expected: about [\d.]+ (ms|s) per step at batch 16 here \(one image's forward pass timed in this tab, x3 for the backward, x the batch/,
    );
    assert.equal(
      await page.$$eval(
        'body *',
        (els) => els.filter((e) => e.children.length === 0 && /Expected: about/.test(e.textContent)).length,
      ),
      1,
    );
    const tab = await S(() => window.vitrineDemo.plan.plan.params);
    await page.selectOption('#decoder', 'lightly');
    await waitFor(
      (p0) => window.vitrineDemo.plan && window.vitrineDemo.plan.plan && window.vitrineDemo.plan.plan.params !== p0,
      tab,
    );
    // lightly's decoder: 8 blocks of width 512 beside the tab's 2 of 128 (parameters in bytes)
    assert.ok((await S(() => window.vitrineDemo.plan.plan.params)) > tab + 4 * 20e6);
    await page.selectOption('#model', 'mini');
  });

  test("trains on the user's own images", async () => {
    await configure({ model: 'mini', batch: 4, steps: 3 });
    await page.setInputFiles('#files', files);
    await waitFor(() => /3 images of yours/.test(document.getElementById('user-count').textContent));
    assert.equal(await page.inputValue('#data'), 'user');
    await page.click('#start');
    await waitDone();
    assert.equal(await S(() => window.vitrineDemo.error), null);
    const run = await S(() => window.vitrineDemo.run);
    assert.equal(run.data.name, 'your images');
    assert.equal(run.data.n, 3);
    const l = await losses();
    assert.equal(l.length, 3);
    assert.ok(l.every((x) => Number.isFinite(x.loss)));
    await reset(); // leave nothing in the profile
    assert.deepEqual(errors, []);
  });

  test('"Load safetensors" recognises a timm state_dict with a head and starts training from it', async () => {
    const { createVitrine } = await import('../../web/vitrine.js');
    const vt = await createVitrine({ wasm: 'simd', wasmDir: join(BUILD, 'wasm') });
    // the demo's fmnist model's encoder as timm's VisionTransformer(num_classes=10)
    const timm = vt.createModel({
      kind: 'timm',
      config: { img_size: 28, patch_size: 4, in_chans: 1, embed_dim: 64, depth: 4, num_heads: 4, num_classes: 10 },
    });
    timm.initWeights(9n);
    const file = join(profile, 'timm_vit.safetensors');
    writeFileSync(file, timm.saveSafetensors());
    timm.dispose();
    await configure({ steps: 3 });
    await page.setInputFiles('#load-weights', file);
    await waitFor(
      () => /tensors loaded/.test(document.getElementById('status').textContent) || window.vitrineDemo.error,
    );
    const status = await S(() => document.getElementById('status').textContent);
    assert.match(
      status,
      /vitrine encoder \(timm keys\): \d+ tensors loaded, 2 skipped.*head\.weight \[10, 64\]: skipped: a classifier head.*learned pos_embed trains/,
    );
    await page.click('#start');
    await waitDone();
    assert.equal(await S(() => window.vitrineDemo.error), null);
    assert.equal((await losses()).length, 3);
    await reset();
    assert.deepEqual(errors, []);
  });

  // the Session disposed by Reset while its step awaited its batch used to throw out of the loop
  // ("Cannot read properties of null (reading 'stepCount')"), a page error in whichever test came next
  test('Reset while a step is under way: the run ends quietly', async () => {
    for (let i = 0; i < 4; i++) {
      await configure({ model: 'mini', batch: 4, steps: 400 });
      await page.click('#start');
      await waitFor((k) => window.vitrineDemo.losses.length >= k, 2 + i);
      await reset();
    }
    assert.deepEqual(errors, []);
  });

  test('the shell in the page: ImageData and ImageBitmap in, the same bits as Float32Array NCHW', async () => {
    const r = await S(async () => {
      const { createVitrine } = await import('/web/vitrine.js');
      const vt = await createVitrine();
      const S = 16,
        m = vt.createModel({
          kind: 'lightly',
          config: { img_size: S, patch_size: 4, embed_dim: 16, depth: 2, num_heads: 2, mask_token: true },
        });
      m.initWeights(1);
      // a 16x16 RGBA picture, drawn on a canvas: ImageData from it, an ImageBitmap of it
      const c = new OffscreenCanvas(S, S),
        g = c.getContext('2d');
      const id = g.createImageData(S, S);
      for (let i = 0; i < S * S; i++) id.data.set([(i * 7) & 255, (i * 13) & 255, (i * 29) & 255, 255], 4 * i);
      g.putImageData(id, 0, 0);
      const bitmap = await createImageBitmap(c);
      // the same image by hand: NCHW, ImageNet mean / std
      const mean = [0.485, 0.456, 0.406],
        std = [0.229, 0.224, 0.225],
        x = new Float32Array(3 * S * S);
      for (let ch = 0; ch < 3; ch++)
        for (let i = 0; i < S * S; i++) x[ch * S * S + i] = (id.data[4 * i + ch] / 255 - mean[ch]) / std[ch];
      const hex = (a) =>
        Array.from(new Uint32Array(Float32Array.from(a).buffer))
          .map((v) => v.toString(16))
          .join('');
      const fromArray = hex(m.encode(x).data),
        fromImageData = hex(m.encode(id).data),
        fromBitmap = hex(m.encode(bitmap).data);
      let error = null;
      try {
        m.encode(new ImageData(8, 8));
      } catch (e) {
        error = `${e.name}: ${e.message}`;
      }
      m.dispose();
      return {
        simd: vt.simdKernels,
        same: fromImageData === fromArray,
        bitmapSame: fromBitmap === fromImageData,
        error,
      };
    });
    assert.equal(r.simd, true);
    assert.ok(r.same, 'ImageData gives the bits of the Float32Array normalised by hand');
    assert.ok(r.bitmapSame, 'an ImageBitmap of the same pixels gives the same bits');
    assert.match(r.error || '', /8x8.*16x16|16x16/, 'a wrong-size ImageData is refused with the sizes');
  });
});
