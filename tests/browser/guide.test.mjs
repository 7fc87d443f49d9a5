// guide.test.mjs: docs/finetune.md's tab, as written: its HTML block served as a page (demo/serve.mjs,
// cross-origin isolated) beside vit_tiny.safetensors (laid out as timm's save_file writes a
// state_dict; a seeded initialisation: no network here) with the package's files at
// ./node_modules/vitrine/; in headless Chromium the folder of photos is picked (webkitdirectory), the
// run trains in the Trainer's Web Worker to the end, predicts the first photo and offers the
// classifier for download. Prints the page's log.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { skip, launchChromium, ROOT, BUILD } from './harness.mjs';
import { guideBlock, writePhotos, timmStateDict } from '../node/util.mjs';

test('docs/finetune.md: the tab, as written', { skip, timeout: 300_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vitrine-guide-tab-'));
  const { startServer } = await import('../../demo/serve.mjs');
  const { server } = await startServer({
    port: 0,
    mounts: [
      ['/guide/node_modules/vitrine/web/', join(ROOT, 'web')],
      ['/guide/node_modules/vitrine/build/wasm/', join(BUILD, 'wasm')],
      ['/guide/', dir],
    ],
  });
  const { ctx, page, profile, errors, waitFor } = await launchChromium({ acceptDownloads: true });
  try {
    writeFileSync(join(dir, 'index.html'), guideBlock('## In a tab', 'html'));
    writeFileSync(join(dir, 'vit_tiny.safetensors'), await timmStateDict());
    writePhotos(join(dir, 'photos'));
    const missing = []; // what the server did not find, whoever asked (the page, its workers)
    server.on('request', (req, res) =>
      res.on('finish', () => {
        if (res.statusCode >= 400) missing.push(req.url);
      }),
    );
    await page.goto(`http://127.0.0.1:${server.address().port}/guide/`);
    await page.setInputFiles('#photos', join(dir, 'photos'));
    await page.click('#go');
    await waitFor(
      () =>
        /Download classifier/.test(document.getElementById('save').textContent) ||
        document.getElementById('log').textContent.includes('Error'),
      null,
      240_000,
    );
    const log = await page.textContent('#log');
    console.log(`the page's log:\n${log}`);
    // the page has no icon: the browser's request for one is the only thing not found
    assert.deepEqual(missing, ['/favicon.ico']);
    assert.deepEqual(
      errors.filter((e) => !/status of 404/.test(e)),
      [],
    );
    assert.match(
      log,
      /^16 photos of circles, stripes; normalisation timm's default for vit_tiny_patch16_224 \(vit_tiny_patch16_224\.augreg_in21k_ft_in1k's pretrained_cfg\): the weights state none$/m,
    );
    assert.match(log, /^step 6\/6 loss \d/m);
    assert.match(log, /^done: top-1 \d+\.\d% on 4 held-out photos$/m);
    assert.match(log, /^0\.jpg: (circles|stripes) \d+\.\d%, (circles|stripes) \d+\.\d%$/m);
    const dl = await page.evaluate(() => document.getElementById('download').value);
    assert.ok(dl > 0, 'no download progress');
    assert.equal(await page.evaluate(() => window.crossOriginIsolated), true);
  } finally {
    await ctx.close();
    server.close();
    rmSync(profile, { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  }
});

// docs/finetune.md, "CLIP in a tab": the page as written but for one block (as the Node test:
// config: { depth: 1 } after the model), beside a state_dict of that tower laid out as timm writes
// it; it trains in the Trainer's Web Worker and predicts the first photo
test("docs/finetune.md: CLIP's image tower in a tab, as written (one block)", { skip, timeout: 300_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vitrine-guide-clip-tab-'));
  const { startServer } = await import('../../demo/serve.mjs');
  const { server } = await startServer({
    port: 0,
    mounts: [
      ['/guide/node_modules/vitrine/web/', join(ROOT, 'web')],
      ['/guide/node_modules/vitrine/build/wasm/', join(BUILD, 'wasm')],
      ['/guide/', dir],
    ],
  });
  const { ctx, page, profile, errors, waitFor } = await launchChromium();
  try {
    const html = guideBlock('### CLIP in a tab', 'html');
    const from = "model: 'vit_base_patch16_clip_quickgelu_224',";
    assert.ok(html.includes(from));
    writeFileSync(join(dir, 'index.html'), html.replace(from, `${from} config: { depth: 1 },`));
    writeFileSync(
      join(dir, 'clip_b16.safetensors'),
      await timmStateDict('vit_base_patch16_clip_quickgelu_224', { numClasses: 512, depth: 1 }),
    );
    writePhotos(join(dir, 'photos'));
    await page.goto(`http://127.0.0.1:${server.address().port}/guide/`);
    await page.setInputFiles('#photos', join(dir, 'photos'));
    await page.click('#go');
    await waitFor(
      () =>
        /\.jpg: /.test(document.getElementById('log').textContent) ||
        /Error/.test(document.getElementById('log').textContent),
      null,
      240_000,
    );
    const log = await page.textContent('#log');
    console.log(`the page's log:\n${log}`);
    assert.deepEqual(
      errors.filter((e) => !/status of 404/.test(e)),
      [],
    );
    assert.match(
      log,
      /^16 photos of circles, stripes; normalisation timm's default for vit_base_patch16_clip_quickgelu_224 \(vit_base_patch16_clip_quickgelu_224\.\w+'s pretrained_cfg\): the weights state none$/m,
    );
    assert.match(log, /^step 6\/6 loss \d/m);
    assert.match(log, /^done: top-1 \d+\.\d% on 4 held-out photos$/m);
    assert.match(log, /^0\.jpg: (circles|stripes) \d+\.\d%, (circles|stripes) \d+\.\d%$/m);
  } finally {
    await ctx.close();
    server.close();
    rmSync(profile, { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  }
});
