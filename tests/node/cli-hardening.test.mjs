// cli-hardening.test.mjs: issue 16 through the command lines (web/cli.js over wasm, build/vitrine):
// one clear line and a non-zero exit instead of a stack trace (item 3), no hangs on FIFOs and
// devices (4), a full disk (6), a failed resume leaves its checkpoint alone (7), resume reads only
// the data the user names (10), strict numbers and SIGINT's exit status (11). Each case checks the
// message and that nothing was lost or left behind.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  mkdtempSync,
  writeFileSync,
  readFileSync,
  readdirSync,
  existsSync,
  mkdirSync,
  rmSync,
  copyFileSync,
  statSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { REPO, WASM_DIR, tmpfs } from './util.mjs';
import { readSafetensorsMeta, readSafetensorsHeader } from '../../web/vitrine.js';

const require = createRequire(import.meta.url);
const CLI = path.join(REPO, 'web/cli.js'),
  NATIVE = path.join(REPO, 'build/vitrine');
const TINY = JSON.stringify({
  encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 2, num_heads: 2 },
  decoder_dim: 16,
  decoder_depth: 1,
  decoder_heads: 2,
});
const env = { ...process.env, VITRINE_WASM_DIR: WASM_DIR };
const tmp = () => mkdtempSync(path.join(tmpdir(), 'vitrine-clih-'));
const node = (args, opts = {}) =>
  spawnSync(process.execPath, [CLI, ...args], { env, encoding: 'utf8', timeout: 120000, ...opts });
const train = (args, opts) =>
  node(['train', '--config', TINY, '--batch', '4', '--steps', '4', '--no-eval', ...args], opts);
const noStack = (r) => assert.doesNotMatch(r.stderr + r.stdout, /\n\s+at .*:\d+:\d+/, 'a stack trace');
const oneLine = (r, re, status) => {
  noStack(r);
  assert.equal(r.status, status, r.stderr);
  const lines = r.stderr
    .trim()
    .split('\n')
    .filter((l) => !/^step \d|^vitrine train: MAE|^\s*\d+\/\d+ \[/.test(l));
  assert.ok(
    lines.some((l) => re.test(l)),
    `no line matching ${re} in:\n${r.stderr}`,
  );
};

test('bad numbers: one line each, exit 2, nothing made', () => {
  const dir = tmp(),
    out = path.join(dir, 'out');
  const cases = [
    [['--lr', ''], /--lr: '' is not a decimal number in 0\.\.1000/],
    [['--lr', '0x10'], /--lr: '0x10' is not a decimal/],
    [['--lr', '1e39'], /--lr: '1e39' is not a decimal/],
    [['--batch', '1e9'], /--batch: '1e9' is not a whole number in 1\.\.65536/],
    [['--save-every', '0'], /--save-every: '0' is not a whole number in 1\.\./],
    [['--eval-bank', '0', '--eval-queries', '0'], /--eval-bank: '0'/],
    [['--seed', '-1'], /--seed: '-1' is not a whole number/],
    [['--max-image-mp', '0'], /admits no image/],
    [['--mask-ratio', '0x1'], /--mask-ratio: '0x1' is not a decimal number/],
    [['--mask-ratio', ''], /--mask-ratio: '' is not a decimal/],
    [['--mask-ratio', '1'], /--mask-ratio: '1' is not a decimal number in \[0, 1\)/],
    [['--threads', '0'], /--threads: '0' is not a whole number in 1\.\.64/],
    [['--threads', '2x'], /--threads: '2x' is not a whole number/],
    [['--threads', '99999999999'], /--threads: '99999999999' is not a whole number in 1\.\.64/],
    [['--wasm', 'relaxed-x'], /relaxed-x/],
  ];
  for (const [args, re] of cases) {
    const r = train([...args, '--out', out]);
    oneLine(r, re, 2);
    assert.ok(!existsSync(out), `${args}: made ${out}`);
  }
  oneLine(train(['--out', out, '--init']), /--init needs a value/, 2);
  assert.ok(!existsSync(out));
  // plan, both CLIs: no silent wrap of 99999999999 to 1215752191
  for (const cmd of [[process.execPath, CLI], [NATIVE]]) {
    if (!existsSync(cmd[cmd.length - 1])) continue;
    const r = spawnSync(cmd[0], [...cmd.slice(1), 'plan', '--batch', '99999999999'], { env, encoding: 'utf8' });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /--batch: '99999999999' is not a whole number in 1\.\.2147483647/);
    assert.doesNotMatch(r.stdout, /1215752191/);
    // --threads: strict too, in plan and parity (atoi took '4x' as 4, '0x10' as 0)
    for (const [sub, v] of [
      ['plan', '4x'],
      ['plan', '0'],
      ['parity', '99999999999'],
      ['parity', ''],
    ]) {
      const t = spawnSync(
        cmd[0],
        [...cmd.slice(1), sub, ...(sub === 'parity' ? ['x.safetensors'] : []), '--threads', v],
        { env, encoding: 'utf8' },
      );
      assert.equal(t.status, 2, `${sub} --threads '${v}': ${t.stderr}`);
      assert.match(
        t.stderr,
        new RegExp(`^vitrine ${sub}: --threads: '${v}' is not a whole number in 1\\.\\.(64|2147483647)\\n$`),
      );
    }
  }
  rmSync(dir, { recursive: true, force: true });
});

test('--out naming a file or /proc/x, parity --dump naming a file, /dev/zero and a FIFO: one line, fast, nothing left', () => {
  const dir = tmp(),
    file = path.join(dir, 'file');
  writeFileSync(file, 'keep me');
  oneLine(train(['--out', file]), /--out .*file is not a directory/, 2);
  assert.equal(readFileSync(file, 'utf8'), 'keep me');
  const t = Date.now();
  oneLine(train(['--out', '/proc/vitrine-x/y']), /--out \/proc\/vitrine-x\/y: cannot create \/proc\/vitrine-x/, 2);
  assert.ok(Date.now() - t < 60000);
  oneLine(train(['--out', path.join(file, 'sub')]), /is not a directory/, 2);
  spawnSync('mkfifo', [path.join(dir, 'fifo')]);
  const fixture = path.join(REPO, '../shared/fixtures/adamw_steps.safetensors');
  for (const cmd of [[process.execPath, CLI], [NATIVE]]) {
    if (!existsSync(cmd[cmd.length - 1])) continue;
    const run = (args) =>
      spawnSync(cmd[0], [...cmd.slice(1), 'parity', ...args], { env, encoding: 'utf8', timeout: 30000 });
    let r = run([fixture, '--dump', file]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /vitrine parity: --dump .*file.*not a directory/);
    assert.equal(readFileSync(file, 'utf8'), 'keep me');
    r = run(['/dev/zero']);
    assert.equal(r.status, 2); // not readable as a file: exit 2
    assert.match(r.stdout, /FAIL \/dev\/zero: cannot open \/dev\/zero: not a regular file \(a device\)/);
    if (existsSync(path.join(dir, 'fifo'))) {
      r = run([path.join(dir, 'fifo')]);
      assert.equal(r.status, 2, 'a FIFO hung or passed');
      assert.match(r.stdout, /not a regular file \(a FIFO\)/);
    }
  }
  // --config naming a FIFO
  if (existsSync(path.join(dir, 'fifo'))) {
    const r = node(['train', '--config', path.join(dir, 'fifo'), '--out', path.join(dir, 'o')]);
    oneLine(r, /--config: cannot read .*fifo: not a regular file \(a FIFO\)/, 2);
  }
  assert.deepEqual(readdirSync(dir).sort(), ['fifo', 'file'].filter((f) => existsSync(path.join(dir, f))).sort());
  rmSync(dir, { recursive: true, force: true });
});

// a short run to a checkpoint (stop at step 2 of 4)
function checkpoint(dir, extra = []) {
  const r = train(['--out', dir, '--stop-at', '2', ...extra]);
  assert.equal(r.status, 0, r.stderr);
  return path.join(dir, 'checkpoint.safetensors');
}

test('a failed resume rewrites nothing; a NaN stop writes the last good state and says so', () => {
  const dir = tmp(),
    ck = checkpoint(path.join(dir, 'a'));
  const before = readFileSync(ck),
    files = readdirSync(path.dirname(ck)).sort();
  let r = node(['train', '--resume', ck, '--out', path.dirname(ck), '--grad-checkpointing', 'budget:2KB', '--no-eval']);
  oneLine(r, /checkpointing budget of 2000 bytes is too small/, 1);
  assert.match(r.stderr, /nothing was written \(.*checkpoint\.safetensors is unchanged\)/);
  assert.ok(readFileSync(ck).equals(before), 'the checkpoint was rewritten');
  assert.deepEqual(readdirSync(path.dirname(ck)).sort(), files);
  // the plain resume still works afterwards (the poisoned-checkpoint bug)
  r = node(['train', '--resume', ck, '--out', path.dirname(ck), '--no-eval']);
  assert.equal(r.status, 0, r.stderr);
  // a fresh run that fails at its first step: no folder left
  const none = path.join(dir, 'none');
  oneLine(train(['--out', none, '--grad-checkpointing', 'budget:2KB']), /too small/, 1);
  assert.ok(!existsSync(none), 'an empty output folder was left');
  // lr 1000 diverges, by a NaN loss or by an update that overflows (AdamW's fused check, issue 22
  // item 4), whichever comes first in this build. A NaN loss changes nothing: the last good step's
  // checkpoint, encoder, reconstructions are written. An overflowing update cannot be undone: the
  // state is refused, the checkpoint of the last --save-every step stays. Either way the checkpoint
  // on disk is of the last finite step and holds no NaN or infinity.
  const nan = path.join(dir, 'nan');
  r = train(['--out', nan, '--lr', '1000', '--steps', '40', '--save-every', '1']);
  assert.equal(r.status, 1, r.stderr);
  noStack(r);
  const loss = /training stopped at step (\d+): the loss is NaN/.exec(r.stderr);
  const update = /training stopped: the update of step (\d+) made \S+ non-finite/.exec(r.stderr);
  assert.ok(loss || update, r.stderr);
  const good = loss ? Number(loss[1]) : Number(update[1]) - 1;
  if (loss)
    assert.match(
      r.stderr,
      new RegExp(`wrote what it could from step ${good}: .*checkpoint\\.safetensors, .*encoder\\.safetensors`),
    );
  else
    assert.match(
      r.stderr,
      new RegExp(
        `not saved: the update of step ${good + 1} made the state non-finite; the checkpoint of step ${good} in .*checkpoint\\.safetensors is complete`,
      ),
    );
  const bytes = new Uint8Array(readFileSync(path.join(nan, 'checkpoint.safetensors')));
  assert.equal(readSafetensorsMeta(bytes).step, String(good));
  const { length: n, header } = readSafetensorsHeader(bytes);
  for (const [k, v] of Object.entries(header)) {
    if (k === '__metadata__' || v.dtype !== 'F32') continue;
    const x = new Float32Array(bytes.slice(8 + n + v.data_offsets[0], 8 + n + v.data_offsets[1]).buffer);
    assert.ok(x.every(Number.isFinite), `${k} holds a non-finite value`);
  }
  rmSync(dir, { recursive: true, force: true });
});

test('resume reads only the data the user names; broken metadata is one line', () => {
  const dir = tmp(),
    imgs = path.join(dir, 'imgs');
  const { PNG } = require('pngjs');
  for (const c of ['a', 'b']) {
    mkdirSync(path.join(imgs, c), { recursive: true });
    for (let i = 0; i < 6; i++) {
      const p = new PNG({ width: 28, height: 28 });
      p.data.fill(40 * i + (c === 'a' ? 0 : 20));
      writeFileSync(path.join(imgs, c, `${i}.png`), PNG.sync.write(p));
    }
  }
  const ck = checkpoint(path.join(dir, 'run'), ['--data', imgs]);
  // a crafted checkpoint naming /etc as its data: --resume alone reads nothing but the checkpoint
  const { withMetadata } = awaitTrainJs();
  const meta = readSafetensorsMeta(new Uint8Array(readFileSync(ck)));
  const run = JSON.parse(meta.vitrine_run);
  const evil = path.join(dir, 'evil.safetensors');
  writeFileSync(
    evil,
    withMetadata(new Uint8Array(readFileSync(ck)), { vitrine_run: JSON.stringify({ ...run, data: '/etc' }) }),
  );
  let r = node(['train', '--resume', evil, '--out', path.join(dir, 'o1'), '--no-eval']);
  oneLine(r, /trained on a folder of images \("\/etc"\); name it again with --data DIR/, 2);
  assert.ok(!existsSync(path.join(dir, 'o1')));
  assert.doesNotMatch(r.stderr, /skipped/); // nothing under /etc was looked at
  // named again: it resumes (the count must match)
  r = node(['train', '--resume', evil, '--data', imgs, '--out', path.join(dir, 'o2'), '--no-eval']);
  assert.equal(r.status, 0, r.stderr);
  // broken metadata: one line each, nothing written
  const cases = [
    [{ vitrine_run: '{"batch": ' }, /damaged checkpoint metadata: vitrine_run: not JSON/],
    [
      { vitrine_run: JSON.stringify({ ...run, batch: 1e9 }) },
      /damaged checkpoint metadata: vitrine_run\.batch: 1000000000 is not a whole number/,
    ],
    [
      { vitrine_run: JSON.stringify({ ...run, seed: '-1' }) },
      /damaged checkpoint metadata: vitrine_run\.seed: "-1" is not/,
    ],
    [
      { vitrine_run: JSON.stringify({ ...run, lr: 'x' }) },
      /damaged checkpoint metadata: vitrine_run\.lr: "x" is not a number/,
    ],
    [{ model_config: '{' }, /damaged checkpoint metadata: model_config: not JSON/],
  ];
  for (const [extra, re] of cases) {
    const f = path.join(dir, 'broken.safetensors');
    writeFileSync(f, withMetadata(new Uint8Array(readFileSync(ck)), extra));
    r = node(['train', '--resume', f, '--data', imgs, '--out', path.join(dir, 'o3'), '--no-eval']);
    oneLine(r, re, 1);
    assert.ok(!existsSync(path.join(dir, 'o3')));
  }
  // a flipped bit in a tensor: refused by name (the engine's checksum)
  const bytes = readFileSync(ck);
  bytes[bytes.length - 100] ^= 0x04;
  const flipped = path.join(dir, 'flipped.safetensors');
  writeFileSync(flipped, bytes);
  r = node(['train', '--resume', flipped, '--data', imgs, '--out', path.join(dir, 'o4'), '--no-eval']);
  oneLine(r, /tensor '[^']+' is damaged \(crc32/, 1);
  rmSync(dir, { recursive: true, force: true });
});

let trainJs = null;
function awaitTrainJs() {
  return trainJs;
}
test.before(async () => {
  trainJs = await import('../../web/formats/safetensors.js');
});

test('SIGINT saves, says how to resume and exits 130', async () => {
  const dir = tmp();
  const child = spawn(
    process.execPath,
    [CLI, 'train', '--config', TINY, '--batch', '4', '--steps', '100000', '--no-eval', '--out', dir],
    { env },
  );
  let err = '';
  child.stderr.on('data', (d) => {
    err += d;
  });
  await new Promise((res) => {
    const iv = setInterval(() => {
      if (/step \d+\/100000|\d+\/100000 \[/.test(err)) {
        clearInterval(iv);
        res();
      }
    }, 50);
  });
  child.kill('SIGINT');
  const code = await new Promise((res) => child.on('exit', (c) => res(c)));
  assert.equal(code, 130, err);
  assert.match(err, /interrupted at step \d+; continue with --resume/);
  assert.ok(existsSync(path.join(dir, 'checkpoint.safetensors')));
  rmSync(dir, { recursive: true, force: true });
});

test("SIGINT during MAE's kNN evaluation says so, keeps the checkpoint and exits 130", async () => {
  const dir = tmp();
  const child = spawn(
    process.execPath,
    [CLI, 'train', '--config', TINY, '--batch', '4', '--steps', '3', '--out', dir],
    {
      env,
    },
  );
  let err = '',
    code = null;
  child.stderr.on('data', (d) => {
    err += d;
  });
  const exited = new Promise((res) =>
    child.on('exit', (c) => {
      code = c;
      res(c);
    }),
  );
  // the evaluation of 10,000 + 2,000 images has begun (or the run ended without saying it would)
  await new Promise((res) => {
    const iv = setInterval(() => {
      if (/kNN evaluation \(bank \d+, queries \d+\)/.test(err) || code != null) {
        clearInterval(iv);
        res();
      }
    }, 20);
  });
  assert.equal(code, null, `the run ended before the kNN evaluation began:\n${err}`);
  child.kill('SIGINT');
  assert.equal(await exited, 130, err);
  assert.match(
    err,
    /vitrine train: interrupted during the kNN evaluation \(SIGINT\); the checkpoint of step 3 is intact in \S+checkpoint\.safetensors, the encoder weights in \S+encoder\.safetensors\n/,
  );
  assert.doesNotMatch(err, /\n\s+at .*:\d+:\d+/, 'a stack trace');
  const meta = readSafetensorsMeta(readFileSync(path.join(dir, 'checkpoint.safetensors')));
  assert.equal(meta.step, '3');
  assert.ok(existsSync(path.join(dir, 'encoder.safetensors')));
  rmSync(dir, { recursive: true, force: true });
});

test('full disk: the truth about the checkpoint, no temporary files, exit 1', (t) => {
  // sizes of a tiny run's files
  const probe = tmp();
  checkpoint(probe);
  const ckBytes = statSync(path.join(probe, 'checkpoint.safetensors')).size,
    encBytes = statSync(path.join(probe, 'encoder.safetensors')).size;
  rmSync(probe, { recursive: true, force: true });
  // 1) nothing fits: the first checkpoint cannot be written and the run says there is none
  const small = tmpfs(t, 8);
  if (!small) return;
  let r = train(['--out', small, '--save-every', '1']);
  noStack(r);
  assert.equal(r.status, 1, r.stderr);
  assert.match(
    r.stderr,
    /cannot write .*checkpoint\.safetensors: No space left on device; no checkpoint has been written/,
  );
  assert.doesNotMatch(r.stderr, /previous checkpoint is kept/);
  assert.deepEqual(readdirSync(small), []);
  // 2) the checkpoint fits (written once, at the end), the encoder does not: exit 1, the checkpoint
  // complete and loadable, no temporary file
  const pages = (b) => Math.ceil(b / 4096);
  const kib = 4 * (pages(ckBytes) + Math.floor(pages(encBytes) / 2));
  const mid = tmpfs(t, kib);
  r = train(['--out', mid]);
  noStack(r);
  assert.equal(r.status, 1, r.stderr);
  assert.match(
    r.stderr,
    /cannot write .*encoder\.safetensors: No space left on device \(the checkpoint of step 4 in .* is complete\)/,
  );
  assert.deepEqual(readdirSync(mid), ['checkpoint.safetensors']);
  const meta = readSafetensorsMeta(new Uint8Array(readFileSync(path.join(mid, 'checkpoint.safetensors'))));
  assert.equal(meta.step, '4');
});

test('train --objective classify and predict: strict numbers, FIFOs, /dev/zero, --out under /proc: one line each', () => {
  const dir = tmp(),
    out = path.join(dir, 'out');
  const classify = (args) =>
    node(['train', '--objective', 'classify', '--config', TINY, '--batch', '4', '--steps', '2', '--no-eval', ...args]);
  for (const [args, re] of [
    [['--batch', '1e9'], /--batch: '1e9' is not a whole number in 1\.\.65536/],
    [['--lr', '0x10'], /--lr: '0x10' is not a decimal/],
    [['--label-smoothing', '1'], /--label-smoothing: '1' is not a decimal number in \[0, 1\)/],
    [['--threads', '0'], /--threads: '0' is not a whole number in 1\.\.64/],
    [['--seed', '-1'], /--seed: '-1' is not a whole number/],
    [['--eval-max', '0'], /--eval-max: '0'/],
    [['--steps', ''], /--steps: '' is not a whole number/],
  ]) {
    const r = classify([...args, '--out', out]);
    oneLine(r, re, 2);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.ok(!existsSync(out), `${args}: made ${out}`);
  }
  spawnSync('mkfifo', [path.join(dir, 'fifo')]);
  const fifo = existsSync(path.join(dir, 'fifo')) ? path.join(dir, 'fifo') : '/dev/zero';
  for (const flag of ['--resume', '--init', '--config']) {
    const r = node(
      [
        'train',
        '--objective',
        'classify',
        ...(flag === '--init' ? ['--config', TINY, '--steps', '2'] : []),
        flag,
        fifo,
      ],
      { timeout: 30000 },
    );
    assert.notEqual(r.status, null, `${flag} FIFO: hung`);
    oneLine(r, /not a regular file/, flag === '--init' ? 1 : flag === '--config' ? 2 : 1);
  }
  oneLine(classify(['--out', '/proc/vitrine-x/y']), /--out \/proc\/vitrine-x\/y: cannot create \/proc\/vitrine-x/, 2);
  // predict: --top strict, the weights and images read only when regular files
  oneLine(
    node(['predict', '--weights', fifo, '--top', '2x', 'a.png']),
    /--top: '2x' is not a whole number in 1\.\.1000/,
    2,
  );
  const w = node(['predict', '--weights', fifo, 'a.png'], { timeout: 30000 });
  assert.notEqual(w.status, null, 'predict --weights FIFO: hung');
  oneLine(w, /cannot read .*: not a regular file/, 1);
  rmSync(dir, { recursive: true, force: true });
});
