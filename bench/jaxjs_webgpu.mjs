// jaxjs_webgpu.mjs: jax-js on its WebGPU backend beside vitrine's WebGPU step, in Debian's
// Chromium (playwright-core, /usr/bin/chromium or $CHROMIUM), on whatever adapter the browser
// gives: the ViT classifier training step (bench/peers/jaxjs_step.mjs; vitrine's recorded step
// replayed on the GPU, web/webgpu/backend.js). Reports; never fails on a time.
//
// Both are checked first, from the same weights and inputs as PyTorch (bench/torch_vit.py --check):
// jax-js as on Wasm (bench/jaxjs_vit.mjs), its first two steps' losses and every gradient under the
// parity rule; vitrine's first two losses (its gradients are its own tests' business). A step that
// disagrees is not timed (exit 1). Then the two steps interleaved in the page (jax-js, vitrine;
// vitrine, jax-js; ...), wall time, each step's loss read back (the GPU is done); the statistic:
// median (min–max) of the per-pair ratios jax-js / vitrine.
//
// --adapter swiftshader (the default; no GPU needed): Chromium's SwiftShader, a CPU rasteriser --
// a correctness smoke test whose times say nothing of a GPU. --adapter default: the browser's own
// choice (a machine with a GPU).
//   node bench/jaxjs_webgpu.mjs [--preset NAME] [--depth N] [--batch B] [--pairs P] [--adapter swiftshader|default]
// Prints a summary, then one JSON line. Serves the page on 127.0.0.1, port 0.
import { createServer } from 'node:http';
import { createReadStream, existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { extname, join, normalize, sep } from 'node:path';
import { ROOT, hostInfo, loadavg, paired, median } from './lib.mjs';
import { PRESETS, makeInputs, makeWeights } from './peers/vit.mjs';
import { torchReference } from './peers/torch_check.mjs';
import { MIME } from '../demo/serve.mjs';

const args = process.argv.slice(2);
const opt = (n, d) => {
  const i = args.indexOf(n);
  return i >= 0 ? args[i + 1] : d;
};
const preset = opt('--preset', 'vit_tiny_patch16_224'),
  B = Number(opt('--batch', 1)),
  pairs = Number(opt('--pairs', 3)),
  adapter = opt('--adapter', 'swiftshader');
const [D, DEPTH] = PRESETS[preset] || [];
const depth = Number(opt('--depth', DEPTH));
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const log = (s) => process.stderr.write(`[jaxjs_webgpu] ${s}\n`);

const out = { preset, depth, batch: B, pairs, adapter_asked: adapter, host: hostInfo(), loadavg_start: loadavg() };
const tmp = mkdtempSync(join(tmpdir(), 'vitrine-jaxjs-webgpu-'));
let server = null,
  ctx = null,
  exitCode = 0;
try {
  if (!PRESETS[preset]) throw new Error(`--preset: one of ${Object.keys(PRESETS).join(', ')}`);
  if (!['swiftshader', 'default'].includes(adapter))
    throw new Error(`--adapter: swiftshader or default, not ${adapter}`);
  if (!(Number.isInteger(depth) && depth >= 1)) throw new Error(`--depth: a whole number of blocks >= 1`);
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} not found (apt-get install chromium)`);
  log('PyTorch reference (bench/torch_vit.py --check)');
  const ref = torchReference({
    dir: tmp,
    preset,
    depth,
    weights: makeWeights(D, depth),
    inputs: makeInputs(B),
    python: process.env.VITRINE_PYTHON,
  });

  // the page and what it imports: bench/peers/, web/, build/wasm/, jax-js's dist/, PyTorch's answer
  const MOUNTS = [
    ['/bench/peers/', join(ROOT, 'bench/peers')],
    ['/web/', join(ROOT, 'web')],
    ['/build/wasm/', join(process.env.VITRINE_BUILD || join(ROOT, 'build'), 'wasm')],
    ['/jax/', join(ROOT, 'node_modules/@jax-js/jax/dist')],
  ];
  const PAGE =
    '<!doctype html><meta charset="utf-8"><title>jax-js and vitrine on WebGPU</title>\n<script type="module" src="/bench/peers/jaxjs_webgpu_page.mjs"></script>\n';
  server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const send = (code, body, type = 'text/plain; charset=utf-8') => {
      res.writeHead(code, { 'Content-Type': type });
      res.end(body);
    };
    if (path === '/') return send(200, PAGE, MIME['.html']);
    if (path === '/favicon.ico') return send(204, '');
    let file = path === '/ref.safetensors' ? ref.file : null;
    for (const [prefix, dir] of MOUNTS)
      if (!file && path.startsWith(prefix)) {
        const f = normalize(join(dir, path.slice(prefix.length)));
        if (f.startsWith(dir + sep)) file = f;
      }
    if (!file || !existsSync(file) || !statSync(file).isFile()) return send(404, `not found: ${path}`);
    res.writeHead(200, { 'Content-Type': MIME[extname(file)] || 'application/octet-stream' });
    createReadStream(file).pipe(res);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${server.address().port}/`;

  const { chromium } = await import('playwright-core');
  const profile = join(tmp, 'profile');
  ctx = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--enable-unsafe-webgpu',
      ...(adapter === 'swiftshader' ? ['--disable-gpu', '--use-webgpu-adapter=swiftshader'] : []),
    ],
  });
  const page = ctx.pages()[0] || (await ctx.newPage());
  const errors = [];
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => m.type() === 'error' && errors.push(`console: ${m.text()}`));
  await page.goto(url);
  await page
    .waitForFunction(() => window.peerBenchReady || null, null, { timeout: 60_000 })
    .catch(() => {
      throw new Error(`the page did not start: ${errors.join('; ') || 'no error shown'}`);
    });
  const call = (fn, arg) => page.evaluate(([fn, arg]) => window.peerBench[fn](arg), [fn, arg]);
  page.setDefaultTimeout(0);

  log(`setup (${preset}, depth ${depth}, batch ${B})`);
  Object.assign(out, await call('setup', { preset, depth, batch: B }));
  const a = out.adapter;
  out.adapter_named =
    [a.vendor, a.architecture, a.device, a.description].filter(Boolean).join(' ') + (a.software ? ' (software)' : '');
  log(`adapter: ${out.adapter_named}; jax-js's check`);
  const checked = await call('check');
  Object.assign(out, {
    check: checked.jaxjs,
    vitrine_check: checked.vitrine,
    vitrine_first_ms: checked.vitrine_first_ms,
  });
  if (!out.check.ok) throw new Error(`jax-js on WebGPU not timed: ${out.check.why}`);
  if (!out.vitrine_check.ok) throw new Error(`vitrine on WebGPU not timed: ${out.vitrine_check.why}`);
  const tj = [],
    tv = [];
  for (let i = 0; i < pairs; i++) {
    log(`pair ${i + 1} of ${pairs}`);
    if (i % 2) {
      tv.push(await call('vitrineStep'));
      tj.push(await call('jaxjsStep'));
    } else {
      tj.push(await call('jaxjsStep'));
      tv.push(await call('vitrineStep'));
    }
  }
  Object.assign(out, {
    jaxjs_ms: tj.map((x) => +x.toFixed(1)),
    vitrine_ms: tv.map((x) => +x.toFixed(1)),
    jaxjs_over_vitrine: paired(tj, tv),
    losses: await page.evaluate(() => window.peerBench.losses()),
    page_errors: errors,
  });
} catch (e) {
  out.error = String((e && e.message) || e);
  exitCode = 1;
} finally {
  await ctx?.close().catch(() => {});
  server?.close();
  rmSync(tmp, { recursive: true, force: true });
}
out.loadavg_end = loadavg();

const f = (x, d = 1) => (x == null || !Number.isFinite(x) ? '–' : x.toFixed(d));
const H = out.host;
console.log(`# jax-js and vitrine on WebGPU (Chromium), ${preset} depth ${depth}, batch ${B}`);
console.log(
  `adapter: ${out.adapter_named || '–'}; CPU ${H.cpu} (${H.isa}); load ${out.loadavg_start[0]} -> ${out.loadavg_end[0]}`,
);
if (out.adapter?.software)
  console.log(
    'A software adapter: the shaders run on the CPU. A correctness smoke test; its times say nothing of a GPU.',
  );
if (out.check) {
  const c = out.check;
  console.log(
    `jax-js's check against PyTorch: ${c.ok ? 'agrees' : 'DISAGREES'} (losses err ≤ ${Math.max(...c.losses.map((l) => l.err)).toExponential(1)}, ` +
      `worst gradient ${c.worst?.key} err ${c.worst?.err?.toExponential(1)}, PyTorch float32's own ≤ ${c.torch32_worst?.toExponential(1)})`,
  );
}
if (out.vitrine_check)
  console.log(
    `vitrine's check against PyTorch: ${out.vitrine_check.ok ? 'agrees' : 'DISAGREES'} (losses err ≤ ${Math.max(...out.vitrine_check.losses.map((l) => l.err)).toExponential(1)})`,
  );
if (out.jaxjs_over_vitrine)
  console.log(
    `wall ms per step (median of ${pairs}): jax-js ${f(median(out.jaxjs_ms))}, vitrine ${f(median(out.vitrine_ms))} (its first, recording: ${f(out.vitrine_first_ms, 0)}); ` +
      `jax-js / vitrine ${f(out.jaxjs_over_vitrine.median, 2)} (${f(out.jaxjs_over_vitrine.min, 2)}–${f(out.jaxjs_over_vitrine.max, 2)})`,
  );
if (out.error) console.log(`error: ${out.error}`);
console.log(JSON.stringify(out));
process.exit(exitCode);
