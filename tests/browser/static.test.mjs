// static.test.mjs: the demo as static files (npm run build:demo) served by a plain static server
// -- one that sends no headers but Content-Type, as a static host does -- runs threaded: the page
// registers coi-sw.js, reloads once under it, is cross-origin isolated and its engine runs a pool
// of more than one thread; a few training steps run (screenshot: build/demo-static.png). Skipped
// (saying so) without Chromium.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { createReadStream, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, extname, resolve, sep } from 'node:path';
import { skip, CHROMIUM, BUILD } from './harness.mjs';

if (skip) console.log(`# ${skip}`);

const TYPES = {
  '.html': 'text/html',
  '.js': 'text/javascript',
  '.mjs': 'text/javascript',
  '.css': 'text/css',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
  '.bin': 'application/octet-stream',
};

/** The plainest static server: GET a file of `dir`, its Content-Type, nothing else. */
function plainServer(dir) {
  const server = createServer((req, res) => {
    let p = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    if (p.endsWith('/')) p += 'index.html';
    const file = resolve(dir, '.' + p);
    let st = null;
    try {
      st = file.startsWith(dir + sep) ? statSync(file) : null;
    } catch {
      /* absent */
    }
    if (!st || !st.isFile()) {
      res.writeHead(404);
      res.end();
      return;
    }
    res.writeHead(200, { 'Content-Type': TYPES[extname(file)] || 'application/octet-stream' });
    if (req.method === 'HEAD') {
      res.end();
      return;
    }
    createReadStream(file).pipe(res);
  });
  return new Promise((ok) =>
    server.listen(0, '127.0.0.1', () => ok({ server, url: `http://127.0.0.1:${server.address().port}/` })),
  );
}

describe('the static demo (npm run build:demo)', { skip, timeout: 180_000 }, () => {
  let out, server, url, ctx, page, profile;
  const errors = [];
  before(async () => {
    const { buildDemo } = await import('../../scripts/build-demo.mjs');
    out = await buildDemo({ out: mkdtempSync(join(tmpdir(), 'vitrine-static-')), quiet: true });
    ({ server, url } = await plainServer(out));
    const { chromium } = await import('playwright-core');
    profile = mkdtempSync(join(tmpdir(), 'vitrine-chromium-'));
    ctx = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1300, height: 1000 },
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    page = ctx.pages()[0] || (await ctx.newPage());
    page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
    page.on('response', (r) => {
      if (r.status() >= 400) errors.push(`HTTP ${r.status()}: ${r.url()}`);
    });
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(`console: ${m.text()}`);
    });
  });
  after(async () => {
    if (ctx) await ctx.close();
    if (server) server.close();
    for (const d of [profile, out]) if (d) rmSync(d, { recursive: true, force: true });
  });

  test('served without any header, the page isolates itself through coi-sw.js and trains on more than one thread', async () => {
    const head = await fetch(url + 'demo/');
    assert.equal(head.headers.get('cross-origin-embedder-policy'), null, 'the server sends no isolation headers');
    await page.goto(url); // index.html -> demo/
    await page.waitForFunction(() => window.vitrineDemo && window.vitrineDemo.booted, null, {
      timeout: 60_000,
      polling: 100,
    });
    const s = await page.evaluate(() => ({
      isolated: window.crossOriginIsolated,
      threads: window.vitrineDemo.threads,
      how: window.vitrineDemo.isolation,
      note: window.vitrineDemo.threadsNote,
      sw: !!navigator.serviceWorker.controller,
      cores: navigator.hardwareConcurrency,
      path: location.pathname,
    }));
    assert.equal(s.path, '/demo/');
    assert.equal(s.isolated, true, `not isolated (${s.note})`);
    assert.equal(s.sw, true);
    assert.equal(s.how, 'service worker');
    assert.ok(s.threads > 1, `${s.threads} thread(s) (${s.note}), cores ${s.cores}`);
    // the Fashion-MNIST sample is in the folder: a short run trains on it
    await page.selectOption('#model', 'mini');
    await page.fill('#batch', '8');
    await page.fill('#steps', '3');
    await page.click('#start');
    await page.waitForFunction(() => window.vitrineDemo.stopped === 'done' || window.vitrineDemo.error, null, {
      timeout: 60_000,
      polling: 100,
    });
    const r = await page.evaluate(() => ({
      error: window.vitrineDemo.error,
      n: window.vitrineDemo.losses.length,
      data: window.vitrineDemo.run.data.name,
    }));
    assert.equal(r.error, null);
    assert.equal(r.n, 3);
    assert.equal(r.data, 'fashion-mnist sample');
    assert.match(await page.textContent('#build'), /\d+ threads/);
    await page.screenshot({ path: join(BUILD, 'demo-static.png') }); // the page's top: the badge names the threads
    assert.deepEqual(errors, []);
  });
});
