// cli-messages.test.mjs: issue 22 through the command line -- parity's text report on non-finite
// numbers (item 2) and the messages of item 6: --config that is not a JSON object or repeats a key,
// an unknown --preset, a policy the engine refuses, checkpoint metadata named by field, a plan
// beyond 2^53 bytes, createVitrine's threads, and an MAE run whose last checkpoint does not fit on
// the disk (its encoder is still written). Each: one line, the right exit status, nothing left.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  mkdtempSync,
  writeFileSync,
  readFileSync,
  readdirSync,
  existsSync,
  rmSync,
  statSync,
  mkdirSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { crc32 } from 'node:zlib';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { REPO, WASM_DIR, FIXTURES, NATIVE, tmpfs } from './util.mjs';
import { createVitrine, readSafetensorsHeader, readSafetensorsMeta, withMetadata } from '../../web/vitrine.js';

const CLI = path.join(REPO, 'web/cli.js');
const env = { ...process.env, VITRINE_WASM_DIR: WASM_DIR };
const cli = (args) => spawnSync(process.execPath, [CLI, ...args], { env, encoding: 'utf8', timeout: 120000 });
const TINY = JSON.stringify({
  encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 2, num_heads: 2 },
  decoder_dim: 16,
  decoder_depth: 1,
  decoder_heads: 2,
});
const tmp = () => mkdtempSync(path.join(tmpdir(), 'vitrine-msg-'));
function oneLine(r, re, status) {
  assert.doesNotMatch(r.stderr + r.stdout, /\n\s+at .*:\d+:\d+|TypeError|Cannot read properties/, 'a stack trace');
  assert.equal(r.status, status, r.stderr);
  const lines = r.stderr
    .trim()
    .split('\n')
    .filter((l) => !/^step \d|^vitrine train: (MAE|AIM) /.test(l));
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0], re);
}

// a copy of a fixture with one float32 of `tensor` set to v
function poke(dir, name, tensor, v) {
  const b = new Uint8Array(readFileSync(path.join(FIXTURES, 'vit_encode.safetensors')));
  const { length: n, header } = readSafetensorsHeader(b);
  new DataView(b.buffer).setFloat32(8 + n + header[tensor].data_offsets[0], v, true);
  const f = path.join(dir, name);
  writeFileSync(f, b);
  return f;
}

test("parity: NaN images, an infinite expectation, NaN in PyTorch's own results -- a line each, the count, the native CLI's lines (item 2)", () => {
  const dir = tmp();
  const files = [
    poke(dir, 'nan_images.st', 'input/images', NaN),
    poke(dir, 'inf_expect.st', 'expect/out', Infinity),
    poke(dir, 'nan_torch32.st', 'torch32/out', NaN),
    path.join(FIXTURES, 'vit_encode.safetensors'),
  ];
  const r = cli(['parity', ...files, '--wasm', 'simd']);
  assert.equal(r.status, 1, r.stderr);
  assert.equal(r.stderr, '');
  const lines = r.stdout.trim().split('\n');
  assert.equal(lines.length, 6, r.stdout);
  assert.match(lines[0], /^pass rule: /);
  assert.match(lines[1], /^FAIL .*nan_images\.st {2}worst \S+ err inf /);
  assert.match(
    lines[2],
    /^FAIL .*inf_expect\.st: expect\/out holds an infinity \(element 0 of \[2, 17, 64\]\): the reference is broken/,
  );
  assert.match(lines[3], /^PASS .*nan_torch32\.st .*max torch32_err inf\)$/);
  assert.match(lines[4], /^PASS .*vit_encode\.safetensors/);
  assert.equal(lines[5], '2 passed, 2 failed');
  if (existsSync(NATIVE)) {
    // the native CLI prints the same lines
    const n = spawnSync(NATIVE, ['parity', ...files], { encoding: 'utf8' });
    assert.equal(n.stdout, r.stdout);
  }
  rmSync(dir, { recursive: true, force: true });
});

test('--config, --preset, --grad-checkpointing, plan --batch: one line naming the flag, exit 2 (item 6)', () => {
  const dir = tmp(),
    out = path.join(dir, 'out');
  writeFileSync(path.join(dir, 'dup.json'), '{"encoder": {"img_size": 28, "img_size": 32}}');
  const cases = [
    [
      ['train', '--config', '[1]'],
      /^vitrine train: --config: \[1\] is not a JSON object \(\{"encoder": \{\.\.\.\}\} or timm kwargs\), nor a file$/,
    ],
    [['train', '--config', 'null'], /--config: null is not a JSON object/],
    [
      ['train', '--config', path.join(dir, 'nofile.json')],
      /--config: cannot read .*nofile\.json: No such file or directory$/,
    ],
    [
      ['train', '--config', '{"encoder": {"img_size": 28, "patch_size": 7, "img_size": 32}}'],
      /^vitrine train: --config: encoder\.img_size: the key appears twice$/,
    ],
    [
      ['train', '--config', path.join(dir, 'dup.json')],
      /--config: .*dup\.json: encoder\.img_size: the key appears twice$/,
    ],
    [
      ['train', '--config', '{"encoder": {"img_size": 10000000}}'],
      /^vitrine train: --config: img_size must be an integer in 0\.\.1000000$/,
    ],
    [
      ['train', '--preset', 'nope'],
      /^vitrine train: --preset: 'nope' is not a preset \(fmnist, fmnist-p7, fmnist-p7-mlp2, fmnist-base; timm's vit_tiny_patch16_224, /,
    ],
    [
      ['train', '--grad-checkpointing', 'every:0'],
      /^vitrine train: --grad-checkpointing: every:K needs an integer K in 1\.\.64, got 'every:0'$/,
    ],
    [
      ['train', '--objective', 'classify', '--grad-checkpointing', 'sometimes'],
      /^vitrine train: --grad-checkpointing: /,
    ],
    [['plan', '--preset', 'nope'], /^vitrine plan: --preset: 'nope' is not a preset/],
    [['plan', '--grad-checkpointing', 'every:0'], /^vitrine plan: --grad-checkpointing: every:K/],
    [
      ['plan', '--preset', 'vit_tiny_patch16_224', '--batch', '2147483647'],
      /^vitrine plan: plan of batch 2147483647: activations of about 3\.91e\+16 bytes, more than 2\^53/,
    ],
    [['train', '--stop-at', '0'], /--stop-at: '0' is not a whole number in 1\.\./],
  ];
  for (const [args, re] of cases) {
    const r = cli(
      [...args, '--out', out, '--steps', '2'].filter(
        (a, i, all) =>
          args[0] !== 'plan' ||
          (a !== '--out' && all[i - 1] !== '--out' && a !== '--steps' && all[i - 1] !== '--steps'),
      ),
    );
    oneLine(r, re, 2);
    assert.ok(!existsSync(out), `${args}: made ${out}`);
  }
  assert.equal(cli(['plan', '--batch', '100000']).status, 0, 'a large plan below 2^53 is printed');
  rmSync(dir, { recursive: true, force: true });
});

test('resumed MAE checkpoints: metadata errors name the field; a complete run, --stop-at at its step (item 6)', () => {
  const dir = tmp(),
    a = path.join(dir, 'a');
  let r = cli(['train', '--config', TINY, '--batch', '4', '--steps', '4', '--stop-at', '2', '--no-eval', '--out', a]);
  assert.equal(r.status, 0, r.stderr);
  const ck = path.join(a, 'checkpoint.safetensors'),
    bytes = new Uint8Array(readFileSync(ck));
  const meta = readSafetensorsMeta(bytes),
    run = JSON.parse(meta.vitrine_run);
  const cases = [
    [
      { vitrine_run: JSON.stringify({ ...run, maskRatio: 1.5 }) },
      /damaged checkpoint metadata: vitrine_run\.maskRatio: 1\.5 is not a number in \[0, 1\)$/,
    ],
    [
      { vitrine_run: '{"batch": ' },
      /damaged checkpoint metadata: vitrine_run: not JSON \(Unexpected end of JSON input\)$/,
    ],
    [
      { vitrine_run: JSON.stringify(run).replace('{', '{"batch": 4, ') },
      /damaged checkpoint metadata: vitrine_run\.batch: the key appears twice$/,
    ],
    [{ vitrine_run: JSON.stringify({ ...run, wasm: 'nope' }) }, /damaged checkpoint metadata: wasm: /],
    [{ grad_checkpointing: 'every:0' }, /damaged checkpoint metadata: grad_checkpointing: every:K needs/],
    [
      { model_config: meta.model_config.replace('"img_size": 28', '"img_size": 10000000') },
      /training state: model_config: config: img_size must be an integer/,
    ],
    [{ step: '5' }, /damaged checkpoint metadata: step: 5 is past the run's last step \(vitrine_run\.steps 4\)$/],
  ];
  for (const [extra, re] of cases) {
    const f = path.join(dir, 'crafted.safetensors');
    writeFileSync(f, withMetadata(bytes, extra));
    r = cli(['train', '--resume', f, '--no-eval', '--out', path.join(dir, 'o')]);
    oneLine(r, re, 1);
    assert.ok(!existsSync(path.join(dir, 'o')));
  }
  oneLine(
    cli(['train', '--resume', ck, '--stop-at', '1', '--out', a]),
    /^vitrine train: --stop-at 1: the run is at step 2 already$/,
    2,
  );
  r = cli(['train', '--resume', ck, '--no-eval', '--out', a]);
  assert.equal(r.status, 0, r.stderr);
  const done = readFileSync(ck),
    files = readdirSync(a).sort();
  r = cli(['train', '--resume', ck, '--no-eval', '--out', a]);
  oneLine(
    r,
    /checkpoint\.safetensors: the run is complete \(step 4 of 4\): nothing to resume, nothing was written$/,
    1,
  );
  assert.doesNotMatch(r.stdout, /checkpoint/);
  assert.ok(readFileSync(ck).equals(done));
  assert.deepEqual(readdirSync(a).sort(), files);
  rmSync(dir, { recursive: true, force: true });
});

test("createVitrine({ threads: '4' }) is refused, naming the string (item 6)", async () => {
  await assert.rejects(
    createVitrine({ threads: '4', wasm: 'simd', wasmDir: WASM_DIR }),
    /threads must be an integer in \[1, 64\], got the string "4"/,
  );
});

test('full disk at the end of an MAE run: the encoder that fits is still written, the truth told, exit 1 (item 6)', (t) => {
  const probe = tmp(),
    train = (out) => cli(['train', '--config', TINY, '--batch', '4', '--steps', '4', '--no-eval', '--out', out]);
  assert.equal(train(probe).status, 0);
  const ckBytes = statSync(path.join(probe, 'checkpoint.safetensors')).size,
    encBytes = statSync(path.join(probe, 'encoder.safetensors')).size;
  rmSync(probe, { recursive: true, force: true });
  assert.ok(encBytes < ckBytes / 2);
  // room for the encoder (and the picture), not for the checkpoint: written only at the end
  const pages = (b) => Math.ceil(b / 4096);
  const disk = tmpfs(t, 4 * (pages(encBytes) + pages(ckBytes) / 2 + 4));
  if (!disk) return;
  const r = train(disk);
  assert.equal(r.status, 1, r.stderr);
  assert.match(
    r.stderr,
    /cannot write .*checkpoint\.safetensors: No space left on device; no checkpoint has been written/,
  );
  assert.match(r.stderr, /wrote what it could from step 4: .*encoder\.safetensors/);
  assert.ok(existsSync(path.join(disk, 'encoder.safetensors')));
  assert.ok(!readdirSync(disk).some((f) => f.includes('.tmp-')), readdirSync(disk).join(' '));
});

test("full disk at the end of a classifier run: the classifier that does not fit is named, the checkpoint's truth told, no empty folder (item 6)", (t) => {
  const dir = tmp(),
    { PNG } = createRequire(import.meta.url)('pngjs');
  for (const c of ['a', 'b'])
    for (let i = 0; i < 5; i++) {
      const p = new PNG({ width: 28, height: 28 });
      p.data.fill(c === 'a' ? 20 * i : 250 - 20 * i);
      mkdirSync(path.join(dir, 'imgs', c), { recursive: true });
      writeFileSync(path.join(dir, 'imgs', c, `${i}.png`), PNG.sync.write(p));
    }
  const cfg = JSON.stringify({ img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 1, num_heads: 2 });
  const classify = (out, extra = []) =>
    cli([
      'train',
      '--objective',
      'classify',
      '--config',
      cfg,
      '--data',
      path.join(dir, 'imgs'),
      '--batch',
      '4',
      '--steps',
      '2',
      '--no-eval',
      '--out',
      out,
      ...extra,
    ]);
  assert.equal(classify(path.join(dir, 'probe')).status, 0);
  const ckBytes = statSync(path.join(dir, 'probe', 'classify-checkpoint.safetensors')).size;
  // nothing fits: one line per failed write, no folder left
  const none = tmpfs(t, 8);
  if (!none) return;
  let r = classify(path.join(none, 'out'), ['--save-every', '1']);
  assert.equal(r.status, 1, r.stderr);
  assert.match(
    r.stderr,
    /cannot write .*classify-checkpoint\.safetensors: No space left on device; no checkpoint has been written/,
  );
  assert.doesNotMatch(r.stderr, /ENOSPC|\n\s+at /);
  assert.deepEqual(readdirSync(none), []);
  // the checkpoint fits, the classifier does not
  const mid = tmpfs(t, 4 * (Math.ceil(ckBytes / 4096) + 2));
  r = classify(path.join(mid, 'out'));
  assert.equal(r.status, 1, r.stderr);
  assert.match(
    r.stderr,
    /cannot write .*classifier\.safetensors: No space left on device \(the checkpoint of step 2 in .* is complete\)/,
  );
  assert.deepEqual(readdirSync(path.join(mid, 'out')), ['classify-checkpoint.safetensors']);
  rmSync(dir, { recursive: true, force: true });
});

// checkpoint bytes with one float32 of `tensor` set, and the CRC-32 of every tensor written afresh
function withValue(bytes, tensor, at, x) {
  const b = new Uint8Array(bytes),
    { length: n, header } = readSafetensorsHeader(b);
  new DataView(b.buffer, b.byteOffset).setFloat32(8 + n + header[tensor].data_offsets[0] + 4 * at, x, true);
  const sums = {};
  for (const [k, v] of Object.entries(header))
    if (k !== '__metadata__')
      sums[k] = crc32(b.subarray(8 + n + v.data_offsets[0], 8 + n + v.data_offsets[1]))
        .toString(16)
        .padStart(8, '0');
  return withMetadata(b, { crc32: JSON.stringify(sums) });
}

test('a state with NaN or negative moments is refused on resume; a run whose update goes non-finite keeps the last finite checkpoint (item 4)', () => {
  const dir = tmp(),
    a = path.join(dir, 'a');
  let r = cli(['train', '--config', TINY, '--batch', '4', '--steps', '6', '--stop-at', '2', '--no-eval', '--out', a]);
  assert.equal(r.status, 0, r.stderr);
  const ck = path.join(a, 'checkpoint.safetensors'),
    bytes = new Uint8Array(readFileSync(ck));
  const t = Object.keys(readSafetensorsHeader(bytes).header).find(
    (k) => k.startsWith('adam_v/') && k.endsWith('patch_embed.proj.weight'),
  );
  for (const [tensor, x, re] of [
    [t, NaN, /adam_v\/.* non-finite \(nan at element 5\)/],
    [t, -1, /adam_v\/.* negative: a second moment never is \(-1 at element 5\)/],
    [t.replace('adam_v/', 'adam_m/'), Infinity, /adam_m\/.* non-finite \(inf at element 5\)/],
    [t.replace('adam_v/', 'param/'), NaN, /param\/.* non-finite/],
  ]) {
    const f = path.join(dir, 'crafted.safetensors');
    writeFileSync(f, withValue(bytes, tensor, 5, x));
    r = cli(['train', '--resume', f, '--no-eval', '--out', path.join(dir, 'o')]);
    oneLine(r, re, 1);
    assert.ok(!existsSync(path.join(dir, 'o')));
  }
  // finite values whose next update overflows (m / eps past float's range): the run stops there,
  // the checkpoint on disk stays the last finite one, nothing non-finite is written
  const f = path.join(dir, 'b', 'checkpoint.safetensors');
  mkdirSync(path.dirname(f));
  writeFileSync(f, withValue(withValue(bytes, t.replace('adam_v/', 'adam_m/'), 5, 3e38), t, 5, 0));
  const before = readFileSync(f);
  r = cli(['train', '--resume', f, '--no-eval', '--save-every', '1', '--out', path.dirname(f)]);
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /training stopped: the update of step 3 made param\/\S+ non-finite/);
  assert.match(
    r.stderr,
    /not saved: the update of step 3 made the state non-finite; .*checkpoint\.safetensors is unchanged/,
  );
  assert.ok(readFileSync(f).equals(before), 'the last finite checkpoint was overwritten');
  assert.deepEqual(readdirSync(path.dirname(f)), ['checkpoint.safetensors']);
  rmSync(dir, { recursive: true, force: true });
});
