// app.test.mjs: what an app builder hit in a tab (issue 34, "What an app builder hit"; Node's half:
// tests/node/app-builder.test.mjs), in headless Chromium, with the package's files served as an
// app serves them (./node_modules/vitrine/):
//   2. a folder picked in a tab trains as Node trains it from disk: the same step-1 loss from
//      Chromium's FileList, from its files in reverse, and from the folder read by Node;
//   4. every image source of a page -- File, ImageBitmap, ImageData, <img>, <canvas>,
//      OffscreenCanvas, <video>, VideoFrame -- predicts through the Trainer's worker (no
//      DataCloneError), through vt.loadClassifier in the page and in a worker of the page, and
//      trains given by class;
//   docs/finetune.md's webcam page, as written, with Chromium's fake camera.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { skip, launchChromium, png, ROOT, BUILD } from './harness.mjs';
import { guideBlock, timmStateDict } from '../node/util.mjs';

const TINY = { img_size: 28, patch_size: 7, in_chans: 3, embed_dim: 32, depth: 1, num_heads: 2 };
const FAKE_CAMERA = ['--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream'];
const RUN = { objective: 'classify', config: TINY, steps: 1, batch: 8, seed: 3, val: 0.2, wasm: 'simd', threads: 1 };

// photos/<class>/<i>.png: circles or stripes, of assorted sizes, with names that do not sort as numbers
function writeFolder(dir) {
  for (const cls of ['circles', 'stripes'])
    for (let i = 0; i < 10; i++) {
      mkdirSync(join(dir, cls), { recursive: true });
      const w = 30 + 3 * i,
        h = 28 + (i % 4);
      writeFileSync(
        join(dir, cls, `${i * 7}.png`),
        png(w, h, (x, y) => {
          const on = cls === 'stripes' ? ((y + i) >> 2) % 2 : Math.hypot(x - w / 2, y - h / 2) % 9 < 4;
          return on ? [220, 140 + 8 * i, 40] : [30, 60, 180];
        }),
      );
    }
}

// a server of the app: the package at ./node_modules/vitrine/, the app's files at /app/
async function serveApp(dir) {
  const { startServer } = await import('../../demo/serve.mjs');
  const { server } = await startServer({
    port: 0,
    mounts: [
      ['/app/node_modules/vitrine/web/', join(ROOT, 'web')],
      ['/app/node_modules/vitrine/build/wasm/', join(BUILD, 'wasm')],
      ['/app/', dir],
    ],
  });
  return { server, url: `http://127.0.0.1:${server.address().port}/app/` };
}

test(
  'a tab and Node: the same folder, the same run; every image source predicts and trains',
  { skip, timeout: 300_000 },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vitrine-app-'));
    writeFolder(join(dir, 'photos'));
    writeFileSync(
      join(dir, 'index.html'),
      '<!doctype html><input type="file" id="photos" webkitdirectory>' +
        '<script type="module">import * as v from "./node_modules/vitrine/web/vitrine.js"; window.v = v;</script>',
    );
    writeFileSync(
      join(dir, 'worker.js'),
      `import { createVitrine } from './node_modules/vitrine/web/vitrine.js';
     // a worker of the page: the classifier reopened here, every image source a worker has
     self.onmessage = async ({ data: { weights, bitmap, blob, pixels } }) => {
       try {
         const vt = await createVitrine({ wasm: 'simd', threads: 1 }), c = await vt.loadClassifier(weights);
         const off = new OffscreenCanvas(pixels.width, pixels.height);
         off.getContext('2d').putImageData(new ImageData(pixels.data, pixels.width, pixels.height), 0, 0);
         const frame = new VideoFrame(off, { timestamp: 0 });
         const p = await c.predict([bitmap, blob, pixels, off, frame], { top: 1 });
         frame.close();
         self.postMessage({ names: p.map(([t]) => t.name), ps: p.map(([t]) => t.p) });
       } catch (e) { self.postMessage({ error: e.message }); }
     };`,
    );
    const { server, url } = await serveApp(dir);
    const { ctx, page, profile, errors, waitFor } = await launchChromium({ args: FAKE_CAMERA });
    try {
      // Node: the folder from disk
      const { train } = await import('../../web/vitrine.js');
      const node = await train({ ...RUN, data: join(dir, 'photos') }).done;
      assert.equal(node.status, 'done');
      await page.goto(url);
      await waitFor(() => !!window.v);
      await page.setInputFiles('#photos', join(dir, 'photos'));
      const tab = await page.evaluate(async (RUN) => {
        const files = document.getElementById('photos').files,
          loss = async (data) => {
            const run = window.v.train({ ...RUN, data }),
              r = await run.done;
            run.dispose();
            return r.lossFirst;
          };
        return { list: await loss(files), reversed: await loss(Array.from(files).reverse()) };
      }, RUN);
      assert.equal(tab.list, node.lossFirst, 'the FileList trains as Node reads the folder');
      assert.equal(tab.reversed, node.lossFirst, 'in any order given');

      // every image source of the page: the Trainer's worker, vt.loadClassifier here and in a worker
      const r = await page.evaluate(async (RUN) => {
        const v = window.v,
          w = 37,
          h = 31;
        const pixels = new ImageData(w, h);
        for (let i = 0; i < w * h; i++) pixels.data.set([(i * 7) % 256, (i * 3) % 256, 200, 255], 4 * i);
        const canvas = Object.assign(document.createElement('canvas'), { width: w, height: h });
        canvas.getContext('2d').putImageData(pixels, 0, 0);
        const off = new OffscreenCanvas(w, h);
        off.getContext('2d').putImageData(pixels, 0, 0);
        const blob = await new Promise((res) => canvas.toBlob(res, 'image/png'));
        const img = new Image();
        img.src = URL.createObjectURL(blob);
        await img.decode();
        const bitmap = await createImageBitmap(pixels);
        const frame = new VideoFrame(canvas, { timestamp: 0 });
        const video = Object.assign(document.createElement('video'), {
          muted: true,
          srcObject: canvas.captureStream(),
        });
        // a canvas stream yields a frame when the canvas is painted: paint once more, and play
        const loaded = new Promise((res) => (video.onloadeddata = res));
        canvas.getContext('2d').putImageData(pixels, 0, 0);
        await video.play();
        if (video.readyState < 2) await loaded;
        const sources = {
          ImageData: pixels,
          ImageBitmap: bitmap,
          Blob: blob,
          img,
          canvas,
          OffscreenCanvas: off,
          video,
          VideoFrame: frame,
        };
        // trained from images of the page given by class
        const run = v.train({
          ...RUN,
          val: 0,
          steps: 2,
          batch: 4,
          data: { byClass: { a: [bitmap, canvas, img, pixels], b: [off, frame, blob, video] } },
        });
        const result = await run.done;
        const out = { trained: result.status, classes: result.classes, worker: {}, page: {} };
        for (const [k, x] of Object.entries(sources)) {
          try {
            const [[t]] = await run.predict(x, { top: 1 });
            out.worker[k] = t.name;
          } catch (e) {
            out.worker[k] = `${e.name}: ${e.message}`;
          }
        }
        const vt = await v.createVitrine({ wasm: 'simd', threads: 1 });
        run.dispose();
        const c = await vt.loadClassifier(run); // after dispose(): what the run made
        for (const [k, x] of Object.entries(sources)) out.page[k] = (await c.predict(x, { top: 1 }))[0][0].name;
        const inWorker = await new Promise((res) => {
          const wk = new Worker('./worker.js', { type: 'module' });
          wk.onmessage = (e) => res(e.data);
          wk.postMessage({ weights: result.weights, bitmap, blob, pixels: { width: w, height: h, data: pixels.data } });
        });
        out.inWorker = inWorker;
        frame.close();
        return out;
      }, RUN);
      assert.equal(r.trained, 'done');
      assert.deepEqual(r.classes, ['a', 'b']);
      for (const [k, name] of Object.entries(r.worker))
        assert.match(name, /^[ab]$/, `${k} through the Trainer: ${name}`);
      for (const [k, name] of Object.entries(r.page)) assert.match(name, /^[ab]$/, `${k} in the page: ${name}`);
      assert.equal(r.inWorker.error, undefined, r.inWorker.error);
      assert.equal(r.inWorker.names.length, 5);
      assert.ok(r.inWorker.ps.every((p) => p > 0 && p <= 1));
      // the same pixels, the same answer, whatever held them
      const same = ['ImageData', 'ImageBitmap', 'canvas', 'OffscreenCanvas', 'VideoFrame'];
      for (const k of same) assert.equal(r.page[k], r.page.ImageData, k);
      assert.deepEqual(
        errors.filter((e) => !/status of 404/.test(e)), // (the page has no icon)
        [],
      );
    } finally {
      await ctx.close();
      server.close();
      rmSync(profile, { recursive: true, force: true });
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

test('docs/finetune.md: the webcam page, as written, with a fake camera', { skip, timeout: 300_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vitrine-webcam-'));
  writeFileSync(join(dir, 'index.html'), guideBlock('## From a webcam', 'html'));
  writeFileSync(join(dir, 'vit_tiny.safetensors'), await timmStateDict());
  const { server, url } = await serveApp(dir);
  const { ctx, page, profile, errors, waitFor } = await launchChromium({ args: FAKE_CAMERA });
  try {
    await page.goto(url);
    await waitFor(() => document.getElementById('cam').readyState >= 2);
    for (const c of ['a', 'a', 'a', 'b', 'b', 'b']) {
      await page.click(`#${c}`);
      await page.waitForTimeout(150); // the fake camera's frames move on
    }
    await waitFor(() => /B: 3 frames/.test(document.getElementById('log').textContent));
    await page.click('#go');
    await waitFor(() => /^(A|B) \d+%$/.test(document.getElementById('guess').textContent), null, 240_000);
    const first = await page.textContent('#guess');
    assert.match(await page.textContent('#log'), /^done: predicting live$/m);
    // live: predictions keep coming (the output is rewritten frame after frame)
    await page.evaluate(() => (document.getElementById('guess').textContent = ''));
    await waitFor(() => /^(A|B) \d+%$/.test(document.getElementById('guess').textContent));
    console.log(`the webcam page guessed ${first}, then ${await page.textContent('#guess')}`);
    assert.deepEqual(
      errors.filter((e) => !/status of 404/.test(e)), // (the page has no icon)
      [],
    );
  } finally {
    await ctx.close();
    server.close();
    rmSync(profile, { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  }
});
