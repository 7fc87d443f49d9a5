// package.test.mjs: the npm package as its users get it.   node --test tests/package/
// `npm pack` once (its prepack builds the wasm with CMake and checks build/wasm/ against
// WASM_BUILDS), then each test in a fresh temporary directory outside the repository, with the
// tarball installed by `npm install <tarball>` (its dependencies, pngjs and jpeg-js, from the npm
// cache, else the registry) and none of the repository's VITRINE_* variables:
//   contents  the shell, its .d.ts, the CLI, the docs and every file of wasm/builds.json; no C, tests, benchmarks, fixtures
//   prepack   its check of build/wasm/ (a missing build file, a stray vitrine-* file) on a made-up directory
//   node      app/node-app.mjs imports 'vitrine': trains with checkpointing, saves / reloads safetensors;
//             app/trainer-app.mjs: the Trainer in a worker thread (events, abort / pause and resume bit for bit)
//   cli       npx vitrine plan / parity <fixture> from the installed package, as the repository's CLI
//   bundler   app/ bundled by Vite (vite build), served on 127.0.0.1, in Debian's Chromium: trains in a
//             Worker with the loss falling; the same app from Vite's dev server; the same page as plain
//             <script type="module"> with no bundler; the locateFile option; the Trainer (its own Worker)
//             from the bundle and from the plain page; docs/widget-example.html, the course page with
//             one script tag, from the installed package, served with no isolation headers: the
//             checkpointing widget records and draws every policy on 1 thread
//   types     tsc --noEmit on app/example.ts (and app/testing-example.ts) against the shipped .d.ts files
//   ci        docs/testing.md's test file and docs/ci-example.yml's steps, as written, in a scratch project
// The bundler test skips itself (saying so) when /usr/bin/chromium is absent, as tests/browser does.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createServer } from 'node:http';
import {
  existsSync,
  mkdtempSync,
  rmSync,
  readFileSync,
  writeFileSync,
  readdirSync,
  copyFileSync,
  mkdirSync,
  statSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname, extname, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { BUILDS as WASM_BUILDS, TABLE, wasmDirProblems } from '../../scripts/prepack.mjs';
import { falling } from './app/tiny.js';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const APP = join(REPO, 'tests/package/app');
const FIXTURE = resolve(REPO, '../shared/fixtures/mae_loss_normpix1.safetensors');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const noBrowser = existsSync(CHROMIUM)
  ? false
  : `${CHROMIUM} not found: the bundler test is skipped (apt-get install chromium; CI installs it)`;
if (noBrowser) console.log(`# ${noBrowser}`);

// Children run as on a user's machine: no VITRINE_* (which would point the shell at this repo's build)
// and no npm_* variables of an enclosing `npm test`.
const ENV = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(VITRINE_|npm_)/i.test(k)));
function run(cmd, args, cwd, { ok = true, env = ENV } = {}) {
  const r = spawnSync(cmd, args, { cwd, env, encoding: 'utf8', maxBuffer: 64 << 20 });
  if (ok && r.status !== 0)
    assert.fail(`${cmd} ${args.join(' ')} (in ${cwd}) exited ${r.status}\n${r.stdout}\n${r.stderr}`);
  return r;
}

const temps = [];
function tempDir(name) {
  const d = mkdtempSync(join(tmpdir(), `vitrine-${name}-`));
  temps.push(d);
  return d;
}
let tarball, packed;
// A fresh directory with the tarball installed, as `npm init` + `npm install <tarball>` would make it.
function installed(name) {
  const d = tempDir(name);
  writeFileSync(
    join(d, 'package.json'),
    JSON.stringify({ name: `vitrine-${name}-test`, private: true, type: 'module' }, null, 2),
  );
  run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', tarball], d);
  return d;
}
const copyApp = (d, files) => files.forEach((f) => copyFileSync(join(APP, f), join(d, f)));

before(() => {
  const d = tempDir('pack');
  const r = run('npm', ['pack', '--json', '--pack-destination', d], REPO);
  [packed] = JSON.parse(r.stdout);
  tarball = join(d, packed.filename);
});

after(() => {
  for (const d of temps) rmSync(d, { recursive: true, force: true });
});

test('contents: the shell, its types, the CLI and every wasm build; nothing else', () => {
  const files = packed.files.map((f) => f.path).sort();
  const web = readdirSync(join(REPO, 'web'), { recursive: true })
    .map((f) => `web/${f.split(sep).join('/')}`)
    .filter((f) => /\.(js|ts)$/.test(f));
  const docs = readdirSync(join(REPO, 'docs')).map((f) => `docs/${f}`);
  const want = [
    'package.json',
    'README.md',
    'LICENSE',
    'wasm/builds.json',
    'python/vitrine_dump.py',
    'python/vitrine_continue.py',
    ...web,
    ...docs,
    `build/wasm/${TABLE}`,
    ...Object.values(WASM_BUILDS).flatMap((b) => b.files.map((f) => `build/wasm/${f}`)),
  ];
  assert.deepEqual(files, want.sort());
  const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8'));
  assert.equal(pkg.private, undefined);
  assert.equal(pkg.exports['.'].types, './web/vitrine.d.ts');
  assert.deepEqual(pkg.exports['./testing'], { types: './web/testing.d.ts', default: './web/testing.js' });
  assert.deepEqual(pkg.exports['./widget'], { types: './web/widget/index.d.ts', default: './web/widget/index.js' });
  assert.deepEqual(pkg.exports['./widget/element'], {
    types: './web/widget/element.d.ts',
    default: './web/widget/element.js',
  });
  assert.deepEqual(
    pkg.sideEffects,
    ['./web/widget/element.js'],
    'importing the element defines it: its one side effect',
  );
  assert.equal(pkg.bin.vitrine, 'web/cli.js');
  assert.deepEqual(Object.keys(pkg.dependencies).sort(), ['jpeg-js', 'pngjs']);
  // sizes, for the README
  const kB = (n) => `${(n / 1000).toFixed(1)} kB`;
  const lines = packed.files.map((f) => {
    const gz = gzipSync(readFileSync(join(REPO, f.path)), { level: 9 }).length;
    return `${f.path.padEnd(36)} ${kB(f.size).padStart(9)}  (gzip ${kB(gz)})`;
  });
  console.log(
    `${packed.filename}: ${kB(packed.size)} packed, ${kB(packed.unpackedSize)} unpacked, ${packed.files.length} files\n${lines.join('\n')}`,
  );
});

test('prepack: refuses a build/wasm/ that lacks a file of wasm/builds.json or holds a vitrine-* it does not list', () => {
  const d = tempDir('wasmdir');
  const files = [TABLE, ...Object.values(WASM_BUILDS).flatMap((b) => b.files)];
  for (const f of [...files, 'test_kernels_simd.wasm']) writeFileSync(join(d, f), ''); // test_*: neither shipped nor checked
  assert.deepEqual(wasmDirProblems(d, WASM_BUILDS), { missing: [], stray: [] });
  rmSync(join(d, files[2]));
  writeFileSync(join(d, 'vitrine-old.wasm'), '');
  assert.deepEqual(wasmDirProblems(d, WASM_BUILDS), { missing: [files[2]], stray: ['vitrine-old.wasm'] });
});

test('node: import vitrine, train with checkpointing, save and reload safetensors', () => {
  const d = installed('node');
  copyApp(d, ['tiny.js', 'node-app.mjs']);
  const r = JSON.parse(run(process.execPath, ['node-app.mjs'], d).stdout);
  assert.equal(r.relaxed, true, 'enableNodeRelaxedSimd() did not enable relaxed SIMD');
  assert.equal(r.build, 'relaxed'); // the default where relaxed SIMD validates
  assert.equal(r.simdKernels, true);
  assert.equal(r.policy, 'block');
  assert.ok(r.falling, `loss did not fall: ${r.losses}`);
  assert.ok(r.sameBitsAsNoCheckpointing, 'checkpointed losses differ from the plain run');
  assert.ok(r.weightsBytes > 0 && r.weightsRoundTrip && r.paramsEqual, 'weights did not survive save / reload');
  assert.equal(r.resumedStep, 20);
  assert.ok(r.resumeBitForBit, 'the resumed run is not bit for bit the same');
  assert.deepEqual(Object.keys(r.builds).sort(), Object.keys(WASM_BUILDS).sort());
  for (const [name, b] of Object.entries(r.builds)) {
    assert.equal(b.build, name);
    assert.equal(b.simdKernels, WASM_BUILDS[name].simd, name);
    assert.ok(Number.isFinite(b.loss), `${name}: loss ${b.loss}`);
  }
});

test('node: the Trainer (train(), a worker thread): events, abort and resume, pause and resume, bit for bit', () => {
  const d = installed('trainer');
  copyApp(d, ['tiny.js', 'trainer-app.mjs']);
  const r = JSON.parse(run(process.execPath, ['trainer-app.mjs'], d).stdout);
  assert.equal(r.build, 'relaxed'); // the worker turns relaxed SIMD on in Node, as the CLI does
  assert.equal(r.steps, 24);
  assert.ok(r.falling && r.memory, JSON.stringify(r));
  assert.equal(r.aborted[0], 'aborted');
  assert.ok(r.aborted[1] >= 5 && r.aborted[1] < 24, JSON.stringify(r.aborted));
  assert.deepEqual(r.resumed, ['done', 24, 24 - r.aborted[1]]);
  assert.ok(r.resumeBitForBit && r.pauseBitForBit, JSON.stringify(r));
});

test('cli: npx vitrine plan and parity', () => {
  const d = installed('cli');
  const planArgs = [
    'plan',
    '--preset',
    'vit_tiny_patch16_224',
    '--batch',
    '8',
    '--grad-checkpointing',
    'block',
    '--json',
  ];
  const plan = run('npx', ['--no', 'vitrine', ...planArgs], d);
  assert.equal(plan.stdout, run(process.execPath, ['web/cli.js', ...planArgs], REPO).stdout);
  assert.match(plan.stdout, /"total"/);
  const parity = run('npx', ['--no', 'vitrine', 'parity', FIXTURE], d, { ok: false });
  assert.equal(parity.status, 0, parity.stdout + parity.stderr);
  assert.match(parity.stdout, /^PASS /m);
  assert.doesNotMatch(parity.stdout, /FAIL/);
});

// ---- vitrine/testing in a user's project ------------------------------------------------------

const PY = process.env.VITRINE_PYTHON || '/usr/bin/python3';
const pyHas = (mod) => {
  const r = spawnSync(PY, ['-c', `import ${mod}`]);
  return !r.error && r.status === 0;
};
const noTorch = pyHas('torch')
  ? false
  : `${PY} cannot import torch: the CI example needs a dump (bash scripts/setup.sh installs python3-torch)`;

test(
  "ci: docs/testing.md's test file and docs/ci-example.yml's steps, as written, pass in a scratch project",
  { skip: noTorch },
  (t) => {
    const d = tempDir('ci');
    writeFileSync(join(d, 'package.json'), JSON.stringify({ name: 'my-vit', private: true }, null, 2));
    run(
      'npm',
      ['install', '--save-dev', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', tarball],
      d,
    );
    mkdirSync(join(d, 'test'));
    const doc = readFileSync(join(REPO, 'docs/testing.md'), 'utf8');
    writeFileSync(
      join(d, 'test/vit.test.mjs'),
      /<!-- user-test:begin -->\n```js\n([\s\S]*?)```\n<!-- user-test:end -->/.exec(doc)[1],
    );
    // the dump: the documented command where timm imports, else a torch-only stand-in of timm's ViT
    const dump = /^python3 (node_modules\/vitrine\/python\/vitrine_dump\.py .*\\\n.*)$/m.exec(doc)[1];
    if (pyHas('timm') && pyHas('lightly')) run('bash', ['-c', `"${PY}" ${dump}`], d);
    else {
      t.diagnostic(
        `timm / lightly not importable by ${PY}: the dump is python/test_vitrine_dump.py's stand-in of timm's ViT`,
      );
      run(PY, [join(REPO, 'python/test_vitrine_dump.py'), '--standin-dumps', join(d, 'stand-in')], d);
      copyFileSync(join(d, 'stand-in/standin_forward_features.safetensors'), join(d, 'test/vit_tiny.safetensors'));
      rmSync(join(d, 'stand-in'), { recursive: true });
    }
    // (NODE_TEST_CONTEXT, set for this file by the enclosing runner, would make their node --test a child)
    const local = { ...ENV },
      ci = { ...ENV, CI: 'true' };
    for (const k of ['CI', 'NODE_TEST_CONTEXT']) delete local[k];
    delete ci.NODE_TEST_CONTEXT;
    // the first run records the golden (which the project commits); the second compares
    let r = run(process.execPath, ['--test', 'test/'], d, { env: local });
    assert.ok(existsSync(join(d, 'test/goldens/vit_tiny_encode.safetensors')));
    r = run(process.execPath, ['--test', 'test/'], d, { env: local });
    assert.match(r.stdout, /# pass 2\n# fail 0/);
    // the workflow's `run:` steps in order, as CI runs them
    const steps = [...readFileSync(join(REPO, 'docs/ci-example.yml'), 'utf8').matchAll(/^ +run: (.*)$/gm)].map(
      (m) => m[1],
    );
    assert.deepEqual(
      steps.map((s) => s.split(' ')[0]),
      ['npm', 'npx', 'node'],
    );
    for (const step of steps) run('bash', ['-c', step], d, { env: ci });
    const parity = readFileSync(join(d, 'reports/parity.xml'), 'utf8'),
      tests = readFileSync(join(d, 'reports/node-test.xml'), 'utf8');
    assert.match(parity, /<testsuite name="vitrine parity" tests="1" failures="0" errors="0"/);
    assert.match(tests, /<testcase name="the encoding of my model has not changed"/);
    assert.doesNotMatch(tests, /<failure/);
    // a changed golden fails the test step, in the JUnit report too; a missing one fails in CI
    const golden = join(d, 'test/goldens/vit_tiny_encode.safetensors'),
      bytes = readFileSync(golden);
    bytes[bytes.length - 1] ^= 1;
    writeFileSync(golden, bytes);
    r = run('bash', ['-c', steps[2]], d, { env: ci, ok: false });
    assert.notEqual(r.status, 0);
    assert.match(
      readFileSync(join(d, 'reports/node-test.xml'), 'utf8'),
      /<failure[^>]*>[\s\S]*golden vit_tiny_encode .* differs \(bit for bit\)/,
    );
    rmSync(golden);
    r = run('bash', ['-c', steps[2]], d, { env: ci, ok: false });
    assert.notEqual(r.status, 0);
    assert.match(r.stdout, /in CI \(CI=true\) a golden is never recorded/);
    assert.ok(!existsSync(golden));
  },
);

// ---- the bundler and the browser ---------------------------------------------------------------

const MIME = {
  '.html': 'text/html',
  '.js': 'text/javascript',
  '.mjs': 'text/javascript',
  '.wasm': 'application/wasm',
  '.json': 'application/json',
};
// A static server for `root` on 127.0.0.1 (random port), logging every request as [status, path].
function serve(root, log) {
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const file = resolve(root, '.' + path);
    let status = 404;
    if (file.startsWith(root + sep) && existsSync(file) && statSync(file).isFile()) {
      status = 200;
      res.writeHead(200, {
        'content-type': MIME[extname(file)] || 'application/octet-stream',
        'cache-control': 'no-store',
      });
      res.end(readFileSync(file));
    } else {
      res.writeHead(404);
      res.end();
    }
    log.push([status, path]);
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok(server)));
}

describe('bundler: Vite, a Worker, Chromium; and the same page without a bundler', { skip: noBrowser }, () => {
  let d, server, base, browser, page;
  const log = [],
    errors = [];
  const ourFile = (p) => readFileSync(join(d, 'node_modules/vitrine/build/wasm', p));
  before(async () => {
    d = installed('bundler');
    copyApp(d, ['index.html', 'main.js', 'worker.js', 'tiny.js']);
    // the same app with no bundler: the worker imports the module by its path instead of 'vitrine'
    mkdirSync(join(d, 'plain'));
    for (const f of ['index.html', 'tiny.js']) copyFileSync(join(APP, f), join(d, 'plain', f));
    for (const f of ['worker.js', 'main.js']) {
      const text = readFileSync(join(APP, f), 'utf8');
      assert.match(text, /from 'vitrine';/);
      writeFileSync(
        join(d, 'plain', f),
        text.replace("from 'vitrine';", "from '../node_modules/vitrine/web/vitrine.js';"),
      );
    }
    // the .wasm served from elsewhere, for locateFile
    mkdirSync(join(d, 'elsewhere'));
    copyFileSync(
      join(d, 'node_modules/vitrine/build/wasm/vitrine-relaxed.wasm'),
      join(d, 'elsewhere/vitrine-relaxed.wasm'),
    );

    const { build } = await import('vite');
    await build({
      root: d,
      base: './',
      configFile: false,
      logLevel: 'warn',
      build: { outDir: join(d, 'dist'), emptyOutDir: true },
    });

    server = await serve(d, log);
    base = `http://127.0.0.1:${server.address().port}`;
    const { chromium } = await import('playwright-core');
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    page = await browser.newPage();
    page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(`console: ${m.text()}`);
    });
  });
  after(async () => {
    if (browser) await browser.close();
    if (server) server.close();
  });

  async function trainIn(pageUrl, msg, origin = base) {
    log.length = 0;
    errors.length = 0;
    await page.goto(origin + pageUrl);
    await page.waitForFunction(() => window.ready === true, null, { timeout: 20_000 });
    const r = await page.evaluate((m) => window.runTraining(m), msg);
    assert.ok(r.ok, r.error);
    assert.equal(r.build, 'relaxed'); // Chromium validates relaxed SIMD: the default build
    assert.equal(r.simdKernels, true);
    assert.equal(r.policy, 'block');
    assert.ok(falling(r.losses), `loss did not fall: ${r.losses}`);
    assert.deepEqual(errors, []);
    return r;
  }
  const wasmRequests = () => log.filter(([, p]) => p.endsWith('.wasm'));

  test('Vite bundle: the wasm copied into dist/, loaded from there; training in a Worker', async () => {
    const dist = join(d, 'dist');
    const files = readdirSync(dist, { recursive: true }).map((f) => f.split(sep).join('/'));
    const copiedOf = (name) =>
      files.filter((f) => f.endsWith('.wasm') && readFileSync(join(dist, f)).equals(ourFile(name)));
    // every browser build (named by a literal URL) is copied; the relaxed one is loaded here
    for (const name of ['vitrine-simd.wasm', 'vitrine-scalar.wasm', 'vitrine-relaxed.wasm'])
      assert.equal(copiedOf(name).length, 1, `Vite did not copy ${name} into dist/: ${files.join(', ')}`);
    const copied = copiedOf('vitrine-relaxed.wasm');
    assert.ok(!files.some((f) => /wasi/.test(f)), `the Node-only WASI builds were copied: ${files.join(', ')}`);
    await trainIn('/dist/index.html', { steps: 20 });
    assert.ok(
      log.every(([s, p]) => s === 200 && p.startsWith('/dist/')),
      `requests outside dist/ or failed: ${JSON.stringify(log)}`,
    );
    assert.deepEqual(wasmRequests(), [[200, `/dist/${copied[0]}`]]);
  });

  // the Trainer (train()) starts its own module Worker from the package: events, abort and resume,
  // pause and resume, bit for bit (tiny.js trainerRuns)
  async function trainerIn(pageUrl, origin = base) {
    errors.length = 0;
    await page.goto(origin + pageUrl);
    await page.waitForFunction(() => window.ready === true, null, { timeout: 20_000 });
    const r = await page.evaluate(() => window.runTrainer());
    assert.ok(r.ok, r.error);
    assert.equal(r.build, 'relaxed');
    assert.equal(r.steps, 24);
    assert.ok(r.falling && r.memory, JSON.stringify(r));
    assert.equal(r.aborted[0], 'aborted');
    assert.ok(r.aborted[1] >= 5 && r.aborted[1] < 24, JSON.stringify(r.aborted));
    assert.deepEqual(r.resumed, ['done', 24, 24 - r.aborted[1]]);
    assert.ok(r.resumeBitForBit, 'the resumed run is not bit for bit the straight one');
    assert.ok(r.pauseBitForBit, 'the paused run is not bit for bit the straight one');
    assert.deepEqual(errors, []);
  }
  test('the Trainer in Chromium: from the Vite bundle and with no bundler', async () => {
    await trainerIn('/dist/index.html');
    await trainerIn('/plain/index.html');
  });

  test('no bundler: <script type="module">, the worker imports node_modules/vitrine/web/vitrine.js', async () => {
    await trainIn('/plain/index.html', { steps: 20 });
    assert.deepEqual(wasmRequests(), [[200, '/node_modules/vitrine/build/wasm/vitrine-relaxed.wasm']]);
    assert.ok(
      log.every(([s]) => s === 200),
      JSON.stringify(log),
    );
  });

  test('the course page (docs/widget-example.html): one script tag, no isolation, the widget records and draws every policy', async () => {
    // the page as a teacher would put it beside node_modules/, copied from the installed package
    copyFileSync(join(d, 'node_modules/vitrine/docs/widget-example.html'), join(d, 'course.html'));
    log.length = 0;
    errors.length = 0;
    await page.goto(`${base}/course.html`);
    await page.waitForFunction(
      () => {
        const el = document.querySelector('vitrine-checkpointing');
        return el && el.view && el.view.R && el.querySelector('svg.vtc-schedule rect.moment');
      },
      null,
      { timeout: 60_000 },
    );
    const r = await page.evaluate(() => {
      const el = document.querySelector('vitrine-checkpointing');
      return {
        isolated: globalThis.crossOriginIsolated,
        policies: Object.keys(el.view.R),
        shown: el.view.sched.policy,
        moments: el.querySelectorAll('svg.vtc-schedule rect.moment[data-phase="recompute"]').length,
        rows: [...el.querySelectorAll('table.vtc-table tr[data-policy]')].map((tr) => tr.dataset.policy),
        caption: el.querySelector('.vtc-model').textContent,
        peak: el.view.R.block.peak.bytes === el.view.R.block.planned,
      };
    });
    assert.equal(r.isolated, false, 'served with no COOP / COEP headers');
    assert.match(r.caption, /Recorded by the engine at 1 thread\./);
    for (const p of ['none', 'block', 'sqrt', 'selective']) assert.ok(r.policies.includes(p), r.policies.join());
    assert.equal(r.shown, 'block');
    assert.ok(r.moments > 0, 'block re-computes');
    assert.deepEqual(r.rows.sort(), r.policies.sort());
    assert.equal(r.peak, true);
    // an attribute changed: recorded again
    await page.evaluate(() => document.querySelector('vitrine-checkpointing').setAttribute('batch', '8'));
    await page.waitForFunction(
      () => /batch 8,/.test(document.querySelector('vitrine-checkpointing .vtc-model').textContent),
      null,
      {
        timeout: 30_000,
      },
    );
    // a mistake in the config: said in one line in the widget, no error thrown at the page
    await page.evaluate(() => document.querySelector('vitrine-checkpointing').setAttribute('config', '{"encoder": '));
    await page.waitForFunction(
      () =>
        /^The step could not be recorded: /.test(
          document.querySelector('vitrine-checkpointing .vtc-model').textContent,
        ),
      null,
      { timeout: 30_000 },
    );
    assert.ok(
      log.every(([s]) => s === 200),
      JSON.stringify(log),
    );
    assert.ok(log.some(([, p]) => p === '/node_modules/vitrine/web/widget/element.js'));
    assert.deepEqual(errors, []);
    await page.screenshot({ path: join(REPO, 'build', 'package-widget-example.png'), fullPage: true });
  });

  test('Vite dev server (no configuration): the same app trains', async () => {
    const { createServer: viteServer } = await import('vite');
    const dev = await viteServer({
      root: d,
      configFile: false,
      logLevel: 'warn',
      server: { host: '127.0.0.1', port: 0, strictPort: false },
    });
    try {
      await dev.listen();
      const wasm = [];
      const onResponse = (r) => {
        if (r.url().endsWith('.wasm')) wasm.push([r.status(), new URL(r.url()).pathname]);
      };
      page.on('response', onResponse);
      await trainIn('/index.html', { steps: 20 }, dev.resolvedUrls.local[0].replace(/\/$/, ''));
      page.off('response', onResponse);
      assert.deepEqual(wasm, [[200, '/node_modules/vitrine/build/wasm/vitrine-relaxed.wasm']]);
    } finally {
      await dev.close();
    }
  });

  test('locateFile: the .wasm served from elsewhere (bundled and not)', async () => {
    await trainIn('/plain/index.html', { steps: 12, wasmBase: '/elsewhere/' });
    assert.deepEqual(wasmRequests(), [[200, '/elsewhere/vitrine-relaxed.wasm']]);
    await trainIn('/dist/index.html', { steps: 12, wasmBase: '/elsewhere/' });
    assert.deepEqual(wasmRequests(), [[200, '/elsewhere/vitrine-relaxed.wasm']]);
  });
});

// ---- TypeScript --------------------------------------------------------------------------------

test('types: tsc --noEmit on typed examples against the shipped vitrine.d.ts and testing.d.ts', () => {
  const d = installed('types');
  copyApp(d, ['example.ts', 'example-browser.ts', 'testing-example.ts', 'widget-example.ts']);
  // the .d.ts names exactly the builds of WASM_BUILDS (a missing key or an excess one is an error)
  writeFileSync(
    join(d, 'builds.ts'),
    "import type { WASM_BUILDS } from 'vitrine';\n" +
      `export const names: Record<keyof typeof WASM_BUILDS, true> = ${JSON.stringify(Object.fromEntries(Object.keys(WASM_BUILDS).map((k) => [k, true])))};\n`,
  );
  const tsc = join(REPO, 'node_modules/typescript/bin/tsc');
  const common = { strict: true, noEmit: true, target: 'es2022', skipLibCheck: false };
  const browser = { ...common, lib: ['es2022', 'dom'], types: [] };
  // a Node project: no DOM lib, Node's types (@types/node, a devDependency here)
  const node = { ...common, lib: ['es2022'], types: ['node'], typeRoots: [join(REPO, 'node_modules/@types')] };
  const configs = {
    'tsconfig.browser-nodenext.json': [
      { ...browser, module: 'nodenext', moduleResolution: 'nodenext' },
      ['example.ts', 'example-browser.ts', 'widget-example.ts'],
    ],
    'tsconfig.browser-bundler.json': [
      { ...browser, module: 'esnext', moduleResolution: 'bundler' },
      ['example.ts', 'example-browser.ts', 'widget-example.ts'],
    ],
    'tsconfig.node.json': [
      { ...node, module: 'nodenext', moduleResolution: 'nodenext' },
      ['example.ts', 'builds.ts', 'testing-example.ts'],
    ],
  };
  for (const [name, [compilerOptions, files]] of Object.entries(configs)) {
    writeFileSync(join(d, name), JSON.stringify({ compilerOptions, files }, null, 2));
    const r = run(process.execPath, [tsc, '-p', name], d, { ok: false });
    assert.equal(r.status, 0, `${name}:\n${r.stdout}${r.stderr}`);
  }
  // the check can fail: a wrong call is an error
  writeFileSync(
    join(d, 'wrong.ts'),
    "import { createVitrine } from 'vitrine';\nvoid createVitrine({ wasm: 'simd', locateFile: 42 });\n",
  );
  writeFileSync(
    join(d, 'tsconfig.wrong.json'),
    JSON.stringify({ compilerOptions: configs['tsconfig.node.json'][0], files: ['wrong.ts'] }),
  );
  const bad = run(process.execPath, [tsc, '-p', 'tsconfig.wrong.json'], d, { ok: false });
  assert.notEqual(bad.status, 0);
  assert.match(bad.stdout, /wrong\.ts\(2,/);
});
