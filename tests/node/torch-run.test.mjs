// torch-run.test.mjs: a run moved to PyTorch and back (web/train/torch-run.js, `vitrine export
// --torch`, python/vitrine_continue.py, `vitrine train --resume DIR`), checked, not assumed. Per
// objective (MAE on the main job's model and batch, AIM with 2 accumulated micro-batches, the
// classifier with label smoothing and min_lr), on Fashion-MNIST with a schedule whose warm-up ends
// inside the checked steps:
//   1. vitrine's step 10 exported and imported again loads to the same bits (lossless both ways);
//   2. PyTorch continues steps 11-20 on the same batches and masks: its parameters agree with
//      vitrine's own steps 11-20, and its losses with vitrine's;
//   3. the same continuation on 2 processes (DistributedDataParallel, gloo, started as torchrun
//      would: MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE) agrees with 1 process;
//   4. the PyTorch state of step 20 resumed in vitrine takes steps 21-30 that agree with PyTorch's.
// "Agree" is within what 10 float32 AdamW steps allow, derived in agreement() below
// (docs/scale-out.md says the same). Python: $VITRINE_PYTHON or /usr/bin/python3 with torch; timm
// and lightly when importable (PYTHONPATH), else the script's --standin modules (the same keys and
// arithmetic: python/test_vitrine_continue.py holds the two together where timm is present).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { REPO, engine } from './util.mjs';
import { Session } from '../../web/train/session.js';
import { readSafetensorsHeader } from '../../web/formats/safetensors.js';
import { exportTorchRun, importTorchRun, scheduleLr, TORCH_RUN_FILES } from '../../web/train/torch-run.js';

const PY = process.env.VITRINE_PYTHON || '/usr/bin/python3';
const SCRIPT = path.join(REPO, 'python/vitrine_continue.py');
const py = (args, opts = {}) => spawnSync(PY, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
const probe = (code) => {
  const r = py(['-c', code]);
  return r.error ? `${PY}: ${r.error.message}` : r.status ? r.stderr.trim().split('\n').pop() : null;
};
const noTorch = probe('import torch, torch.distributed as d; assert d.is_gloo_available()');
const REAL =
  !noTorch &&
  !probe(
    `import sys; sys.path.insert(0, ${JSON.stringify(path.join(REPO, 'python'))}); import vitrine_continue as v; v.import_libraries()`,
  );
const MODULES = REAL ? [] : ['--standin'];
const noPil = noTorch
  ? null
  : probe('import PIL.Image') && 'PIL (Pillow) is not importable: the folder pipeline needs it';
if (noTorch) console.log(`# torch-run.test.mjs: ${noTorch}: skipped (bash scripts/setup.sh installs python3-torch)`);
else if (!REAL) console.log('# torch-run.test.mjs: timm / lightly not importable: the continuations use --standin');

// ---- what 10 float32 AdamW steps allow ---------------------------------------------------------

// AdamW's largest update |m_hat / (sqrt(v_hat) + eps)| at step t (1-based) for betas b1, b2: by
// Cauchy-Schwarz over m_t = sum_s (1-b1) b1^(t-s) g_s and v_t = sum_s (1-b2) b2^(t-s) g_s^2,
// |m_t| <= sqrt(sum_s (1-b1)^2 b1^(2(t-s)) / ((1-b2) b2^(t-s))) sqrt(v_t); with the bias corrections
// U_t = sqrt((1-b1)^2 / (1-b2) * sum_k<t (b1^2/b2)^k) * sqrt(1 - b2^t) / (1 - b1^t)   (U_1 = 1).
function updateBound(t, b1, b2) {
  const r = (b1 * b1) / b2,
    sum = r === 1 ? t : (1 - r ** t) / (1 - r);
  return Math.sqrt(((1 - b1) ** 2 / (1 - b2)) * sum) * (Math.sqrt(1 - b2 ** t) / (1 - b1 ** t));
}

/**
 * Parameters `got` against `ref` after the same 10 steps from the same state, where `ref64` is
 * ref's side computed in float64 from that state on the same batches (vitrine_continue --float64).
 * Per tensor, the tolerance is what float32 allows over these steps:
 *   2 * drift: PyTorch's own float32 run strays from the float64 one by `drift` = max|ref - ref64|
 *     (the gradients' rounding carried through AdamW's normalisation, the parameters rounded to
 *     float32 at every step); two float32 runs each within that of the exact one differ by at most
 *     twice it (vitrine's own distance to the float64 run is measured at or below PyTorch's:
 *     docs/scale-out.md);
 *   + sum_t lr_t U_t 2^-20: each run rounds the ~8 float32 operations of an AdamW update (moments,
 *     sqrt, bias corrections, eps, division, step size, the add), <= 8 half-ulps of the update each,
 *     2^-20 of it for the two;
 *   + steps * ulp(max|p|): the parameter itself rounded to float32 at each step, half an ulp a run.
 * The key bias of each attention (qkv.bias[D:2D]) has a gradient that is zero in exact arithmetic
 * (softmax ignores a vector added to every key): both runs step on rounding noise, which AdamW
 * normalises to full-size steps, so for it only AdamW's bound holds: 2 * sum_t lr_t U_t.
 * Returns { worst (the tensor nearest its tolerance), keyBias, ok }, err in units of D = sum_t lr_t.
 */
function agreement(ref, got, ref64, { lrs, t0, betas }) {
  const D = lrs.reduce((a, b) => a + b, 0),
    dist = lrs.reduce((a, lr, i) => a + lr * updateBound(t0 + i + 1, betas[0], betas[1]), 0);
  let worst = null,
    maxAbs = 0,
    maxRel = 0,
    keyBias = { diff: 0, tol: 2 * dist },
    ok = true;
  for (const [name, r] of ref) {
    const g = got.get(name),
      r64 = ref64.get(name);
    assert.ok(g && r64, `${name} in every run`);
    const key = /attn\.qkv\.bias$/.test(name) ? [r.length / 3, (2 * r.length) / 3] : null;
    let diff = 0,
      drift = 0,
      mx = 0,
      kd = 0;
    for (let i = 0; i < r.length; i++) {
      const d = Math.abs(g[i] - r[i]);
      if (key && i >= key[0] && i < key[1]) kd = Math.max(kd, d);
      else {
        diff = Math.max(diff, d);
        drift = Math.max(drift, Math.abs(r[i] - r64[i]));
        mx = Math.max(mx, Math.abs(r[i]));
      }
    }
    const ulp = mx > 0 ? 2 ** (Math.floor(Math.log2(mx)) - 23) : 0;
    const tol = 2 * drift + dist * 2 ** -20 + lrs.length * ulp;
    const e = { name, diff, rel: mx ? diff / mx : diff, drift, tol, ratio: tol ? diff / tol : diff ? Infinity : 0 };
    if (!worst || e.ratio > worst.ratio) worst = e;
    maxAbs = Math.max(maxAbs, diff);
    maxRel = Math.max(maxRel, e.rel);
    if (diff > tol) ok = false;
    if (kd > keyBias.diff) keyBias = { name, diff: kd, tol: 2 * dist };
  }
  if (keyBias.diff > keyBias.tol) ok = false;
  return { worst, keyBias, ok, D, maxAbs, maxRel };
}
const show = (a) =>
  `max |diff| ${a.maxAbs.toExponential(2)}, max relative (per tensor, max|diff| / max|p|) ${a.maxRel.toExponential(2)}; ` +
  `nearest its tolerance ${a.worst.name}: ${a.worst.diff.toExponential(2)} (${(a.worst.diff / a.D).toExponential(2)} of sum lr) ` +
  `<= ${a.worst.tol.toExponential(2)} (float32 drift ${a.worst.drift.toExponential(2)}), ${(100 * a.worst.ratio).toFixed(0)}% of it; ` +
  `key bias ${a.keyBias.diff.toExponential(2)} <= ${a.keyBias.tol.toExponential(2)}`;

// ---- runs and files ------------------------------------------------------------------------------

// name -> Float32Array of safetensors bytes: a torch run's model.safetensors, or a checkpoint's param/
function params(bytes, prefix = '') {
  const { length: n, header } = readSafetensorsHeader(bytes),
    out = new Map();
  for (const [k, e] of Object.entries(header))
    if (k !== '__metadata__' && k.startsWith(prefix))
      out.set(
        k.slice(prefix.length),
        new Float32Array(bytes.slice(8 + n + e.data_offsets[0], 8 + n + e.data_offsets[1]).buffer),
      );
  return out;
}
const readRun = (dir) =>
  Object.fromEntries(TORCH_RUN_FILES.map((f) => [f, new Uint8Array(readFileSync(path.join(dir, f)))]));
const writeRun = (dir, files) => {
  mkdirSync(dir, { recursive: true });
  for (const f of TORCH_RUN_FILES) writeFileSync(path.join(dir, f), files[f]);
};

const freePort = () =>
  new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });

// float32 and float64 continuations of `dir` to step `stopAt`, in one interpreter; the float32
// run's per-step losses from its --json lines
function continueTorch(dir, out, stopAt, extra = []) {
  const args = (o, more) => [
    dir,
    ...extra,
    '--out',
    o,
    '--stop-at',
    String(stopAt),
    '--threads',
    '1',
    '--log-every',
    '100',
    ...MODULES,
    ...more,
  ];
  const code =
    `import sys; sys.path.insert(0, ${JSON.stringify(path.dirname(SCRIPT))}); import vitrine_continue as v; ` +
    `sys.exit(v.main(${JSON.stringify(args(out, ['--json']))}) or v.main(${JSON.stringify(args(`${out}-f64`, ['--float64']))}))`;
  const r = py(['-c', code]);
  assert.equal(r.status, 0, r.stderr);
  const losses = r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
    .filter((j) => j.lr != null);
  return { run: readRun(out), f64: readRun(`${out}-f64`), losses };
}

// the continuation on 2 processes, started as torchrun starts them (env://, gloo)
async function continueTwoRanks(dir, out, stopAt) {
  const port = await freePort();
  const procs = [0, 1].map(
    (rank) =>
      new Promise((resolve) => {
        const p = spawn(
          PY,
          [SCRIPT, dir, '--out', out, '--stop-at', String(stopAt), '--threads', '1', '--log-every', '100', ...MODULES],
          {
            env: {
              ...process.env,
              MASTER_ADDR: '127.0.0.1',
              MASTER_PORT: String(port),
              RANK: String(rank),
              LOCAL_RANK: String(rank),
              WORLD_SIZE: '2',
            },
          },
        );
        let err = '';
        p.stderr.on('data', (d) => (err += d));
        p.on('close', (status) => resolve({ status, err }));
      }),
  );
  for (const r of await Promise.all(procs)) assert.equal(r.status, 0, r.err);
  return readRun(out);
}

// ---- the round trips -----------------------------------------------------------------------------

const CASES = {
  mae: { batch: 64, maskRatio: 0.5 }, // the main job's run: model, batch, mask ratio
  aim: { batch: 32, gradAccum: 2 },
  classify: { batch: 32, minLr: 1e-5, val: { kind: 'fashion-mnist', split: 'test' } },
};

async function roundTrips(t, objective) {
  const vt = await engine('simd');
  const dir = mkdtempSync(path.join(tmpdir(), `vitrine-torch-run-${objective}-`));
  try {
    const steps = [];
    const open = (o) => Session.open(vt, { data: { kind: 'fashion-mnist' }, policy: 'none', ...o });
    // vitrine: steps 1-10, the checkpoint, steps 11-20 (one session: a resume gives the same bits)
    const s = await open({ objective, model: 'fmnist-p7-mlp2', steps: 40, warmup: 15, seed: '3', ...CASES[objective] });
    let cp10, cp20;
    try {
      await s.loop({ stopAt: 10 });
      cp10 = s.checkpoint();
      await s.loop({ stopAt: 20, emit: (k, e) => k === 'step' && steps.push(e.loss) });
      cp20 = s.checkpoint();
    } finally {
      s.dispose();
    }
    const files = exportTorchRun(cp10, { source: 'cp10' }),
      doc = JSON.parse(new TextDecoder().decode(files['run.json']));
    const sched = doc.schedule,
      g = doc.optimizer.state_dict.param_groups[0],
      lrsOf = (a) => Array.from({ length: 10 }, (_, i) => scheduleLr(sched, a + i));

    // 1. lossless: the export imported again loads to the same state, bit for bit
    const m1 = vt.createModel(JSON.parse(JSON.stringify(s.run.spec))),
      m2 = vt.createModel(s.run.spec);
    try {
      for (const m of [m1, m2]) {
        m.initWeights(3n);
        for (const n of s.run.frozen) m.setRequiresGrad(n, false);
        m.trainerInit(s.trainerOptions);
      }
      m1.loadTrainState(cp10);
      m2.loadTrainState(importTorchRun(files));
      assert.deepEqual(m2.saveTrainState(), m1.saveTrainState(), 'export -> import is lossless');
    } finally {
      m1.dispose();
      m2.dispose();
    }

    // 2. PyTorch steps 11-20 against vitrine's
    writeRun(path.join(dir, 't10'), files);
    const p20 = continueTorch(path.join(dir, 't10'), path.join(dir, 'p20'), 20);
    const v20 = params(cp20, 'param/'),
      t20 = params(p20.run['model.safetensors']),
      t20d = params(p20.f64['model.safetensors']);
    const cfg = { lrs: lrsOf(10), t0: 10, betas: g.betas };
    const a2 = agreement(t20, v20, t20d, cfg);
    t.diagnostic(`vitrine steps 11-20 vs PyTorch's: ${show(a2)}`);
    assert.ok(a2.ok, `vitrine vs PyTorch after step 20: ${show(a2)}`);
    assert.equal(p20.losses.length, 10);
    const lossErr = Math.max(...p20.losses.map((l, i) => Math.abs(l.loss - steps[i]) / Math.abs(steps[i])));
    t.diagnostic(`losses of steps 11-20: relative difference at most ${lossErr.toExponential(2)}`);
    assert.ok(lossErr <= 1e-4, `the losses agree as a parity file must (1e-4): ${lossErr}`);

    // 3. the same on 2 processes
    const x2 = await continueTwoRanks(path.join(dir, 't10'), path.join(dir, 'p20x2'), 20);
    const a3 = agreement(t20, params(x2['model.safetensors']), t20d, cfg);
    t.diagnostic(`2 processes vs 1: ${show(a3)}`);
    assert.ok(a3.ok, `DistributedDataParallel on 2 processes vs 1: ${show(a3)}`);

    // 4. PyTorch's step 20 resumed in vitrine: steps 21-30 against PyTorch's own
    const back = importTorchRun(p20.run),
      s2 = await open({
        resume: back,
        resumeName: 'p20',
        ...(CASES[objective].val ? { val: CASES[objective].val } : {}),
      });
    let cp30;
    try {
      assert.equal(s2.step, 20);
      await s2.loop({ stopAt: 30 });
      cp30 = s2.checkpoint();
    } finally {
      s2.dispose();
    }
    const p30 = continueTorch(path.join(dir, 'p20'), path.join(dir, 'p30'), 30);
    const a4 = agreement(
      params(p30.run['model.safetensors']),
      params(cp30, 'param/'),
      params(p30.f64['model.safetensors']),
      {
        ...cfg,
        lrs: lrsOf(20),
        t0: 20,
      },
    );
    t.diagnostic(`PyTorch's step 20 resumed in vitrine, steps 21-30 vs PyTorch's: ${show(a4)}`);
    assert.ok(a4.ok, `vitrine resumed from PyTorch vs PyTorch after step 30: ${show(a4)}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

for (const objective of Object.keys(CASES))
  test(
    `${objective}: vitrine -> PyTorch (1 and 2 processes) -> vitrine agree within float32 AdamW's allowance`,
    { skip: noTorch ?? false },
    (t) => roundTrips(t, objective),
  );

// ---- the pieces, and what is refused ------------------------------------------------------------

test(
  'python/test_vitrine_continue.py passes (the stand-in against timm + lightly where importable)',
  { skip: noTorch ?? false },
  (t) => {
    const r = py(['-m', 'unittest', '-v', 'test_vitrine_continue'], { cwd: path.join(REPO, 'python') });
    assert.equal(r.status, 0, r.stderr + r.stdout);
    assert.match(r.stderr, /^OK/m);
    for (const line of r.stderr.split('\n').filter((l) => /skipped|largest difference/.test(l)))
      t.diagnostic(line.trim());
  },
);

test("the script's data order, augmentation hash and CRC are vitrine's", { skip: noTorch ?? false }, async () => {
  const { DataOrder, hash32, rng32 } = await import('../../web/train/data-order.js');
  const { crc32 } = await import('node:zlib');
  const { crc32Hex } = await import('../../web/train/torch-run.js');
  const seed = '9007199254740000', // above 2^32: both seed words matter
    qs = [0, 1, 999, 1000, 1001, 4321, 9999];
  const code =
    `import sys, json; sys.path.insert(0, ${JSON.stringify(path.dirname(SCRIPT))}); import vitrine_continue as v; ` +
    `o = v.DataOrder(1000, ${seed}); r = v.mulberry32(7); ` +
    `print(json.dumps([[o.at(q) for q in ${JSON.stringify(qs)}], v.hash32(1, 2, 3, 4, 0x41554731), [r() for _ in range(3)]]))`;
  const r = py(['-c', code]);
  assert.equal(r.status, 0, r.stderr);
  const o = new DataOrder(1000, seed),
    g = rng32(7);
  assert.deepEqual(JSON.parse(r.stdout), [qs.map((q) => o.at(q)), hash32(1, 2, 3, 4, 0x41554731), [g(), g(), g()]]);
  const bytes = new TextEncoder().encode('vitrine torch run');
  assert.equal(crc32Hex(bytes), crc32(bytes).toString(16).padStart(8, '0'));
});

test(
  'bad input is one line: vitrine_continue.py, importTorchRun, vitrine export, vitrine train --resume DIR',
  { skip: noTorch ?? false },
  async () => {
    const vt = await engine('simd');
    const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-torch-run-bad-'));
    const CLI = path.join(REPO, 'web/cli.js'),
      cli = (args) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 120000 });
    const oneLine = ({ status, stderr }, want, re) => {
      assert.equal(status, want, stderr);
      assert.equal(stderr.trim().split('\n').length, 1, stderr);
      assert.doesNotMatch(stderr, /Traceback|at .*\.js:\d+/);
      assert.match(stderr, re);
    };
    try {
      const s = await Session.open(vt, {
        objective: 'mae',
        model: 'fmnist-p7-mlp2',
        data: { kind: 'fashion-mnist' },
        batch: 8,
        steps: 4,
        policy: 'none',
        runInfo: { data: 'fashion-mnist' }, // as the CLI names it
      });
      let cp;
      try {
        await s.loop({ stopAt: 1 });
        cp = s.checkpoint();
      } finally {
        s.dispose();
      }
      writeFileSync(path.join(dir, 'cp.safetensors'), cp);
      const good = path.join(dir, 'good');
      const ex = cli(['export', '--torch', good, path.join(dir, 'cp.safetensors')]);
      assert.equal(ex.status, 0, ex.stderr);
      assert.match(ex.stderr, /wrote .*MAE at step 1 of 4/);
      const files = readRun(good),
        run = JSON.parse(new TextDecoder().decode(files['run.json'])),
        json = (o) => new TextEncoder().encode(JSON.stringify(o));
      const bad = {
        torn: { 'run.json': json({ ...run, step: 2 }) },
        format: { 'run.json': json({ ...run, format: 'x' }) },
        groups: { 'run.json': json({ ...run, optimizer: { state_dict: { state: {}, param_groups: 'x' } } }) },
        seed: { 'run.json': json({ ...run, data: { ...run.data, order: {} } }) },
        cut: { 'optimizer.safetensors': files['optimizer.safetensors'].subarray(0, 100) },
      };
      for (const [name, change] of Object.entries(bad)) writeRun(path.join(dir, name), { ...files, ...change });
      const at = (name) => path.join(dir, name);

      // the script: its checks in one interpreter (each main() call's exit status and stderr)
      const cases = [
        [[at('none')], 1, /no run\.json/],
        [[at('torn')], 1, /model\.safetensors is of step '1', run\.json of step 2/],
        [[at('format')], 1, /format "x" is not vitrine-torch-run\/1/],
        [[at('groups')], 1, /param_groups: "x" is not a list/],
        [[at('seed')], 1, /data\.order\.seed: missing is not text/],
        [[at('cut')], 1, /optimizer\.safetensors: not a safetensors file/],
        [[good, '--stop-at', '1'], 1, /at step 1 of 4: nothing to do/],
        [[good, '--data', '/nonexistent'], 1, /--data \/nonexistent: the run trained on fashion-mnist/],
        [[good, '--steps', 'x'], 2, /--steps: invalid int value/],
      ];
      const code = `import sys, io, json, contextlib; sys.path.insert(0, ${JSON.stringify(path.dirname(SCRIPT))}); import vitrine_continue as v
out = []
for args in json.loads(sys.argv[1]):
    e = io.StringIO()
    with contextlib.redirect_stderr(e):
        try:
            st = v.main(args + ['--threads', '1'] + ${JSON.stringify(MODULES)})
        except SystemExit as x:
            st = x.code
    out.append({'status': st, 'stderr': e.getvalue()})
print(json.dumps(out))`;
      const r = py(['-c', code, JSON.stringify(cases.map(([a]) => a))]);
      assert.equal(r.status, 0, r.stderr);
      JSON.parse(r.stdout).forEach((got, i) => oneLine(got, cases[i][1], cases[i][2]));
      // a fresh interpreter for what is decided at start: the processes, a library that is not there
      oneLine(
        py([SCRIPT, good, ...MODULES], { env: { ...process.env, WORLD_SIZE: '3', RANK: '0' } }),
        1,
        /batch 8 does not split over 3 processes/,
      );
      const noTimm = `import sys; sys.modules['timm'] = None; sys.path.insert(0, ${JSON.stringify(path.dirname(SCRIPT))}); import vitrine_continue as v; sys.exit(v.main([${JSON.stringify(good)}]))`;
      oneLine(py(['-c', noTimm]), 1, /timm is not importable .*--standin/);

      // the import, as the CLI and train({ resume }) call it
      for (const [name, re] of [
        ['torn', /model\.safetensors is of step "1", run\.json of step 2/],
        ['format', /format "x" is not vitrine-torch-run\/1/],
        ['groups', /param_groups: not a list of groups/],
        ['cut', /optimizer\.safetensors: /],
      ])
        assert.throws(
          () => importTorchRun(readRun(at(name)), { source: name }),
          (e) => e.name === 'VitrineError' && re.test(e.message),
        );

      // the command line
      oneLine(cli(['export', path.join(dir, 'cp.safetensors')]), 2, /--torch DIR/);
      oneLine(cli(['export', '--torch', at('x'), at('missing.safetensors')]), 1, /cannot read/);
      oneLine(cli(['export', '--torch', at('x'), path.join(good, 'model.safetensors')]), 1, /model\.safetensors: /);
      oneLine(
        cli(['train', '--resume', at('torn'), '--out', at('o')]),
        1,
        /torn: model\.safetensors is of step "1", run\.json of step 2/,
      );
      mkdirSync(at('empty'));
      oneLine(cli(['train', '--resume', at('empty'), '--out', at('o')]), 1, /empty: cannot read model\.safetensors/);
      // and the good one resumes through the command line
      const back = cli(['train', '--resume', good, '--out', at('back'), '--no-eval', '--stop-at', '2']);
      assert.equal(back.status, 0, back.stderr);
      assert.match(back.stderr, /steps 1\.\.2\/4/);
      // --masks torch: lightly's masks from torch's generator; vitrine's stream goes back as it came
      const tm = py([
        SCRIPT,
        good,
        '--masks',
        'torch',
        '--stop-at',
        '2',
        '--out',
        at('tm'),
        '--threads',
        '1',
        ...MODULES,
      ]);
      assert.equal(tm.status, 0, tm.stderr);
      const tmRun = JSON.parse(readFileSync(path.join(at('tm'), 'run.json'), 'utf8'));
      assert.equal(tmRun.step, 2);
      assert.equal(tmRun.masks.state, run.masks.state);
      assert.equal(tmRun.history.at(-1).masks, 'torch');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

test("run.json's timm kwargs are the engine's (timmKwargs against vt_timm_kwargs_json)", async () => {
  const { timmKwargs } = await import('../../web/train/torch-run.js');
  const { encoderPrefix } = await import('../../web/train/presets.js');
  const { readSafetensorsMeta } = await import('../../web/formats/safetensors.js');
  const vt = await engine('simd');
  const enc = { img_size: 32, patch_size: 8, in_chans: 3, embed_dim: 48, depth: 1, num_heads: 3 };
  const specs = [
    {
      kind: 'mae',
      config: { encoder: { ...enc, reg_tokens: 0 }, decoder_dim: 16, decoder_depth: 1, decoder_heads: 2 },
    },
    {
      kind: 'aim',
      config: { encoder: { ...enc, qk_norm: true, init_values: 1e-5 }, head_hidden_dim: 32, head_blocks: 1 },
    },
    { kind: 'timm', config: { ...enc, num_classes: 5, global_pool: 'avg', reg_tokens: 2, qkv_bias: false } },
  ];
  for (const spec of specs) {
    const m = vt.createModel(spec);
    try {
      m.trainerInit({});
      const mc = JSON.parse(readSafetensorsMeta(m.saveTrainState()).model_config);
      const kw = JSON.parse(
        readSafetensorsMeta(m.saveSafetensors({ modelPrefix: spec.kind === 'timm' ? '' : encoderPrefix(spec.kind) }))
          .timm_kwargs,
      );
      assert.deepEqual(timmKwargs(spec.kind === 'timm' ? mc : mc.encoder), kw, spec.kind);
    } finally {
      m.dispose();
    }
  }
});

test(
  'a folder of PNGs with augmentation (hflip, rrc, shift) continues on the same images',
  { skip: noTorch ?? (noPil || false) },
  async (t) => {
    const { PNG } = createRequire(import.meta.url)('pngjs');
    const vt = await engine('simd');
    const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-torch-run-folder-'));
    try {
      // 2 classes of 12 RGB images of assorted sizes: resized, cropped and made grey as vitrine does
      let seed = 1;
      const rnd = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 8) & 0xff;
      for (const c of ['cat', 'dog']) {
        mkdirSync(path.join(dir, 'imgs', c), { recursive: true });
        for (let i = 0; i < 12; i++) {
          const png = new PNG({ width: 20 + ((rnd() * 40) >> 8), height: 20 + ((rnd() * 40) >> 8) });
          for (let k = 0; k < png.data.length; k++) png.data[k] = k % 4 === 3 ? 255 : rnd();
          writeFileSync(path.join(dir, 'imgs', c, `${i}.png`), PNG.sync.write(png));
        }
      }
      const data = { kind: 'folder', dir: path.join(dir, 'imgs') };
      const s = await Session.open(vt, {
        objective: 'classify',
        model: 'fmnist-p7-mlp2',
        data,
        batch: 4,
        steps: 8,
        warmup: 2,
        policy: 'none',
        augment: 'hflip,rrc,shift:2',
        runInfo: { data: data.dir },
      });
      const losses = [];
      let cp3, cp6;
      try {
        await s.loop({ stopAt: 3 });
        cp3 = s.checkpoint();
        await s.loop({ stopAt: 6, emit: (k, e) => k === 'step' && losses.push(e.loss) });
        cp6 = s.checkpoint();
      } finally {
        s.dispose();
      }
      const files = exportTorchRun(cp3),
        doc = JSON.parse(new TextDecoder().decode(files['run.json']));
      writeRun(path.join(dir, 't3'), files);
      const p6 = continueTorch(path.join(dir, 't3'), path.join(dir, 'p6'), 6, ['--data', data.dir]);
      const a = agreement(
        params(p6.run['model.safetensors']),
        params(cp6, 'param/'),
        params(p6.f64['model.safetensors']),
        {
          lrs: Array.from({ length: 3 }, (_, i) => scheduleLr(doc.schedule, 3 + i)),
          t0: 3,
          betas: doc.optimizer.state_dict.param_groups[0].betas,
        },
      );
      t.diagnostic(`steps 4-6: ${show(a)}`);
      assert.ok(a.ok, show(a));
      const lossErr = Math.max(...p6.losses.map((l, i) => Math.abs(l.loss - losses[i]) / Math.abs(losses[i])));
      t.diagnostic(`losses of steps 4-6: relative difference at most ${lossErr.toExponential(2)}`);
      assert.ok(lossErr <= 1e-4, `losses: ${lossErr}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
