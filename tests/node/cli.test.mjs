// cli.test.mjs: the command line's conventions (web/cli.js over web/cli/args.js) and `plan` for
// anything train runs. Every command answers --help / -h on stdout with exit 0, also before the
// wasm is built (a copy of web/ without build/), where a command that needs the build says so in
// one line; --flag=value is --flag value; an unknown flag is one line and exit 2; vitrine --help and
// --version. plan: every objective, train's defaults, --budget and --all-policies from the engine
// (Model.planTrainStep, Model.namedPolicies), absent values null, never -1.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, cpSync, mkdirSync, rmSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { REPO, WASM_DIR, NATIVE, engine } from './util.mjs';
import { modelSpec } from '../../web/train/presets.js';

const CLI = path.join(REPO, 'web/cli.js'),
  COMMANDS = ['train', 'predict', 'plan', 'trace', 'parity', 'export', 'golden'];
const env = { ...process.env, VITRINE_WASM_DIR: WASM_DIR };
const run = (args, cli = CLI, e = env) =>
  spawnSync(process.execPath, [cli, ...args], { env: e, encoding: 'utf8', timeout: 60000 });

test('--help / -h of every command on stdout, exit 0; vitrine --help and --version', () => {
  for (const cmd of COMMANDS)
    for (const h of ['--help', '-h']) {
      const r = run([cmd, h]);
      assert.equal(r.status, 0, `${cmd} ${h}: ${r.stderr}`);
      assert.match(r.stdout, new RegExp(`^usage: vitrine ${cmd}`), cmd);
      if (cmd !== 'predict' && cmd !== 'export' && cmd !== 'golden')
        assert.match(
          r.stdout,
          /POLICY: none, block, every:K, sqrt, budget:BYTES, selective/,
          `${cmd}: the engine's policies`,
        );
      assert.equal(r.stderr, '');
    }
  assert.match(
    run(['train', '--objective', 'classify', '--help']).stdout,
    /^usage: vitrine train --objective classify/,
  );
  const top = run(['--help']);
  assert.equal(top.status, 0);
  for (const cmd of COMMANDS) assert.match(top.stdout, new RegExp(`^ {2}${cmd} `, 'm'));
  const v = run(['--version']);
  assert.equal(v.status, 0);
  assert.equal(v.stdout, `vitrine ${JSON.parse(readFileSync(path.join(REPO, 'package.json'), 'utf8')).version}\n`);
  const none = run([]);
  assert.equal(none.status, 2);
  assert.match(none.stderr, /^usage: vitrine COMMAND/);
});

test(
  'the native CLI (build/vitrine) answers --help / -h on every command, on stdout with exit 0',
  { skip: !existsSync(NATIVE) && `no native ${NATIVE}` },
  () => {
    for (const cmd of ['parity', 'plan', 'trace'])
      for (const args of [
        [cmd, '--help'],
        [cmd, '-h'],
        ['help', cmd],
        [cmd, 'x.safetensors', '--help'],
      ]) {
        const r = spawnSync(NATIVE, args, { encoding: 'utf8' });
        assert.equal(r.status, 0, `${args.join(' ')}: ${r.stderr}`);
        assert.match(r.stdout, new RegExp(`^usage: vitrine ${cmd} `), args.join(' '));
        assert.match(r.stdout, /\n {2}-h, --help +this help\n/);
        assert.match(r.stdout, /POLICY: none, block, every:K, sqrt, budget:BYTES, selective/);
        assert.equal(r.stderr, '');
      }
    const top = spawnSync(NATIVE, ['--help'], { encoding: 'utf8' });
    assert.equal(top.status, 0);
    for (const cmd of ['parity', 'plan', 'trace']) assert.match(top.stdout, new RegExp(`vitrine ${cmd} `));
    const bad = spawnSync(NATIVE, ['frob'], { encoding: 'utf8' });
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /^vitrine: unknown command 'frob'\n/);
    assert.equal(spawnSync(NATIVE, ['plan', '--frob'], { encoding: 'utf8' }).status, 2);
  },
);

test('unknown flags and stray arguments: one line, exit 2; --flag=value as --flag value', () => {
  for (const [args, re] of [
    [
      ['plan', '--frobnicate'],
      /^vitrine plan: unknown option --frobnicate \(vitrine plan --help lists the options\)\n$/,
    ],
    [['plan', 'extra'], /^vitrine plan: unexpected argument 'extra'/],
    [['predict', '--json=1', 'x.png'], /^vitrine predict: --json takes no value\n$/],
    [['parity', '--dump'], /^vitrine parity: --dump needs a value\n$/],
    [['nonsense'], /^vitrine: unknown command 'nonsense'/],
    [['plan', '--batch=0'], /^vitrine plan: --batch: '0' is not a whole number in 1\.\.2147483647\n$/],
  ]) {
    const r = run(args);
    assert.equal(r.status, 2, `${args}: ${r.stderr}`);
    assert.match(r.stderr, re);
    assert.equal(r.stderr.split('\n').length, 2, r.stderr);
  }
  const a = run(['plan', '--batch', '8', '--preset', 'fmnist', '--json', '--threads', '1']),
    b = run(['plan', '--batch=8', '--preset=fmnist', '--json', '--threads=1']);
  assert.equal(a.status, 0, a.stderr);
  assert.equal(a.stdout, b.stdout);
});

test('before the wasm is built: help works, a command that needs the build says so in one line', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-nobuild-'));
  try {
    cpSync(path.join(REPO, 'web'), path.join(dir, 'web'), { recursive: true });
    mkdirSync(path.join(dir, 'wasm'));
    cpSync(path.join(REPO, 'wasm/builds.json'), path.join(dir, 'wasm/builds.json'));
    cpSync(path.join(REPO, 'package.json'), path.join(dir, 'package.json'));
    const cli = path.join(dir, 'web/cli.js'),
      bare = { ...process.env, VITRINE_WASM_DIR: '', VITRINE_BUILD: '' };
    for (const args of [['--help'], ['plan', '--help'], ['train', '--help']]) {
      const r = run(args, cli, bare);
      assert.equal(r.status, 0, `${args}: ${r.stderr}`);
      assert.doesNotMatch(r.stderr, /ERR_MODULE_NOT_FOUND|\n\s+at /);
    }
    assert.match(run(['plan', '--help'], cli, bare).stdout, /once the engine is built \(npm run build\)/);
    const r = run(['plan'], cli, bare);
    assert.equal(r.status, 1);
    assert.match(
      r.stderr,
      /^vitrine plan: the WebAssembly build is missing \(.*build\/wasm\/vitrine-builds\.js\): run bash scripts\/setup\.sh, or npm run build\n$/,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const plan = (args) => {
  const r = run(['plan', '--json', '--threads', '1', ...args]);
  assert.equal(r.status, 0, `${args}: ${r.stderr}`);
  return JSON.parse(r.stdout);
};

test("plan: train's step by default, every objective, --all-policies and --budget from the engine, absent values null", async () => {
  const p = plan([]);
  assert.deepEqual(
    [p.objective, p.preset, p.batch, p.policy, p.mask_ratio],
    ['mae', 'fmnist-p7-mlp2', 64, 'block', 0.5],
  );
  assert.equal(p.total, p.params + p.grads + p.optimizer + p.activations);
  // the engine's own numbers: the same model, the same step
  const vt = await engine('simd');
  const m = vt.createModel(modelSpec('mae', { preset: 'fmnist-p7-mlp2' }));
  try {
    m.setGradCheckpointing('block');
    const want = m.planTrainStep({ batch: 64, maskRatio: 0.5, budget: 20e6 });
    const q = plan(['--budget', '20MB', '--all-policies']);
    assert.equal(q.budget, 20e6);
    assert.equal(q.total, want.total);
    assert.equal(q.recompute_flops, want.recomputeFlops);
    assert.equal(q.fits, want.fits);
    assert.equal(q.max_batch, want.maxBatch > 0 ? want.maxBatch : null);
    assert.deepEqual(
      q.fit,
      want.fit
        ? {
            policy: want.fit.policy,
            params: want.fit.params,
            grads: want.fit.grads,
            optimizer: want.fit.optimizer,
            activations: want.fit.activations,
            total: want.fit.total,
            recompute_flops: want.fit.recomputeFlops,
          }
        : null,
    );
    assert.deepEqual(
      q.policies.map((r) => r.policy),
      m.namedPolicies(),
    );
    for (const r of q.policies) {
      const x = m.planTrainStep({ batch: 64, maskRatio: 0.5, policy: r.policy, budget: 20e6 });
      assert.deepEqual([r.total, r.recompute_flops, r.fits], [x.total, x.recomputeFlops, x.fits], r.policy);
    }
  } finally {
    m.dispose();
  }
  // train --grad-accum-steps K: the memory of one micro-batch, said in the header
  const micro = plan(['-b', '16', '--budget', '20MB']),
    accum = plan(['-b', '16', '--grad-accum-steps', '4', '--budget', '20MB']);
  assert.deepEqual({ ...accum, grad_accum_steps: 1 }, micro);
  assert.equal(accum.grad_accum_steps, 4);
  const text = run(['plan', '-b', '16', '--grad-accum-steps', '4', '--threads', '1']);
  assert.match(text.stdout, /batch 16 \(one micro-batch of a step of 4 x 16 images\)/);
  assert.equal(run(['plan', '--grad-accum-steps', '0']).status, 2);
  // nothing fits: null, not -1
  const tiny = plan(['--budget', '1000']);
  assert.equal(tiny.fits, false);
  assert.equal(tiny.fit, null);
  assert.equal(tiny.max_batch, null);
  assert.doesNotMatch(JSON.stringify(tiny), /-1[,}]/);
  // every objective; without a budget, no fit search (null)
  const aim = plan(['--objective', 'aim']),
    cls = plan(['--objective', 'classify', '--classes', '3']);
  assert.equal(aim.mask_ratio, null);
  assert.equal(aim.tokens_masked, 0);
  assert.equal(aim.budget, null);
  assert.equal(aim.fits, null);
  assert.equal(cls.batch, 128);
  assert.equal(cls.tokens_masked, 0);
  assert.ok(cls.params < p.params, 'a classifier has no MAE decoder');
  const cfg = plan([
    '--objective',
    'mae',
    '--config',
    JSON.stringify({
      encoder: { img_size: 16, patch_size: 4, in_chans: 1, embed_dim: 16, depth: 2, num_heads: 2 },
      decoder_dim: 16,
      decoder_depth: 1,
      decoder_heads: 2,
    }),
    '--batch',
    '2',
  ]);
  assert.equal(cfg.preset, null);
  assert.ok(cfg.total > 0);
  const enc = run([
    'plan',
    '--objective',
    'encode',
    '--preset',
    'vit_tiny_patch16_224',
    '--batch',
    '2',
    '--threads',
    '1',
  ]);
  assert.match(enc.stdout, /^vit_tiny_patch16_224 batch 2, grad checkpointing block, 1 thread\n/);
  // text: a budget nothing meets, said in words
  const t = run(['plan', '--budget', '1000', '--threads', '1']);
  assert.match(t.stdout, /does not fit\n {2}no policy fits batch 64; the smallest plan: \S+, total \d+ bytes/);
  assert.match(t.stdout, /no batch fits\n/);
  assert.equal(run(['plan', '--budget', 'lots']).status, 2);
  assert.equal(run(['plan', '--objective', 'mae', '--tokens-kept', '3']).status, 2);
});

test("parity: a file without PyTorch's float32 results leaves torch32 out (text) / null (JSON), in both CLIs", () => {
  const file = path.join(REPO, '../shared/fixtures/sincos_pos_embed.safetensors'); // expect/ only, no torch32/
  const r = run(['parity', file, '--threads', '1']);
  assert.equal(r.status, 0, r.stderr);
  assert.match(
    r.stdout,
    /^pass rule: .*\nPASS \S+sincos_pos_embed\.safetensors {2}worst \S+ err \d\.\d{3}e[-+]\d\d {2}\(3 tensors\)\n1 passed, 0 failed\n$/,
  );
  const j = JSON.parse(run(['parity', file, '--json', '--threads', '1']).stdout)[0];
  assert.equal(j.torch32_err, null);
  assert.equal(j.max_torch32_err, null);
  assert.ok(j.tensors.every((t) => t.torch32_err === null));
  const native = path.join(REPO, 'build/vitrine');
  const n = spawnSync(native, ['parity', file, '--threads', '1'], { encoding: 'utf8' });
  if (!n.error) assert.equal(n.stdout, r.stdout, 'the native CLI prints the same line');
});
