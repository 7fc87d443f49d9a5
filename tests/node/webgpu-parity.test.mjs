// webgpu-parity.test.mjs: every public PyTorch fixture (../shared/fixtures) computed on the WebGPU
// backend (SwiftShader) passes the parity rule, judged by the engine's own harness
// (web/webgpu/parity.js: the harness records the call, the GPU replays it, vt_parity_check
// compares); checkpointing policies give the GPU the bits of none; `vitrine parity --backend
// webgpu`. Needs an adapter (fails without: webgpu-util.mjs).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createVitrine } from '../../web/vitrine.js';
import { GpuParity } from '../../web/webgpu/parity.js';
import { tapReport } from '../../web/formats/parity-report.js';
import { REPO, FIXTURES, WASM_DIR, fixture, fixtureNames, readSafetensors, writeSafetensors } from './util.mjs';
import { testGpu } from './webgpu-util.mjs';

await testGpu().then((g) => g.destroy()); // no adapter: the tests fail, saying what is missing
const vt = await createVitrine({
  wasm: 'simd',
  threads: 1,
  wasmDir: WASM_DIR,
  backend: 'webgpu',
  gpu: { swiftshader: true },
});
const gp = new GpuParity(vt, vt.backend.gpu);
after(() => {
  gp.destroy();
  vt.close();
});
const dumps = new Map();

test('every public fixture passes on the GPU (the wasm harness judges; sin-cos tables are made by wasm)', async () => {
  const names = fixtureNames();
  assert.ok(names.length >= 16, names.join(' '));
  for (const f of names) {
    const r = await gp.run(fixture(f), { file: f, dump: true });
    assert.equal(r.pass, true, `${f}: ${r.error || `${r.worst} err ${r.err}`}`);
    assert.equal(r.backend, f.startsWith('sincos') ? r.backend : 'webgpu', `${f} ran on ${r.backend}`);
    assert.ok(r.tensors.length > 0 && r.tensors.every((t) => t.err <= 1e-4));
    dumps.set(f, r.dump);
  }
});

test('checkpointing policies give the GPU the bits of none (outputs, parameter and image gradients)', async () => {
  for (const f of ['mae_loss_normpix1.safetensors', 'aim_loss.safetensors']) {
    for (const policy of ['block', 'selective']) {
      const r = await gp.run(fixture(f), { file: f, dump: true, policy });
      assert.equal(r.pass, true, `${f} ${policy}`);
      assert.ok(
        Buffer.compare(Buffer.from(r.dump), Buffer.from(dumps.get(f))) === 0,
        `${f}: ${policy} differs from none`,
      );
    }
  }
});

// a fixture whose module no harness knows: it fails on the GPU as on wasm, named
const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-gpu-parity-'));
after(() => rmSync(dir, { recursive: true, force: true }));
function unknownModule() {
  const { meta, tensors } = readSafetensors(fixture('vit_encode.safetensors'));
  const file = path.join(dir, 'unknown_module.safetensors');
  writeFileSync(file, writeSafetensors(tensors, { ...meta, module: 'timm.NoSuchModel' }));
  return file;
}

// issue 35: a file that failed on the GPU printed '[undefined]' and its JSON had module ""
test("a file the GPU cannot run fails naming its module and call, the backend and the adapter, as wasm's does", async () => {
  const file = unknownModule(),
    bytes = fixture('vit_encode.safetensors');
  const r = await gp.run(new Uint8Array(readFileSync(file)), { file });
  const w = vt.parity(new Uint8Array(readFileSync(file)), { file });
  assert.equal(r.pass, false);
  assert.equal(r.error, w.error);
  const j = JSON.parse(r.json);
  assert.equal(j.module, 'timm.NoSuchModel');
  assert.equal(j.fn, JSON.parse(w.json).fn);
  assert.equal(j.backend, 'webgpu');
  assert.match(j.adapter, /swiftshader.*\(software\)/i);
  assert.equal(gp.ranOn(r), `webgpu on ${j.adapter}`);
  // a passing file's JSON and TAP name them too
  const okr = await gp.run(bytes, { file: 'vit_encode' }),
    ok = JSON.parse(okr.json);
  assert.equal(ok.pass, true);
  assert.deepEqual([ok.backend, ok.adapter], ['webgpu', j.adapter]);
  assert.match(
    tapReport([{ file: 'vit_encode', result: okr }]),
    /\n {2}backend: "webgpu"\n {2}adapter: ".*swiftshader/i,
  );
});

test('vitrine parity --backend webgpu: the lines of the wasm harness, each naming where it ran; a broken file fails', () => {
  // (a model's file through GpuParity is the test above; here the command's wiring, without
  // compiling every pipeline once more in another process)
  const files = ['adamw_steps.safetensors', 'sincos_pos_embed.safetensors'].map((f) => path.join(FIXTURES, f));
  files.push(unknownModule());
  const r = spawnSync(
    process.execPath,
    [
      path.join(REPO, 'web/cli.js'),
      'parity',
      '--backend',
      'webgpu',
      '--wasm',
      'simd',
      '--threads',
      '1',
      ...files,
      '/nonexistent.safetensors',
    ],
    { encoding: 'utf8', env: { ...process.env, VITRINE_WASM_DIR: WASM_DIR, VITRINE_WEBGPU: 'swiftshader' } },
  );
  assert.equal(r.status, 2, r.stderr); // the unreadable file
  assert.match(r.stdout, /^PASS .*adamw_steps\.safetensors  worst param\.\d err .* \[webgpu on .*swiftshader.*\]$/im);
  assert.match(r.stdout, /^FAIL .*unknown_module\.safetensors: .*NoSuchModel.* \[webgpu on .*swiftshader.*\]$/im);
  assert.doesNotMatch(r.stdout, /undefined/);
  assert.match(
    r.stdout,
    /^PASS .*sincos_pos_embed\.safetensors  worst .*\[wasm \(a sin-cos table is made when a model is built/m,
  );
  assert.match(r.stdout, /^FAIL \/nonexistent\.safetensors: cannot open/m);
  assert.match(r.stdout, /2 passed, 2 failed/);
});

// issue 36: tests/parity (every timm ViT option and family, dumped from the real timm) on the GPU:
// quick_gelu, gelu_tanh, RMSNorm, attention pooling, padded / floored / non-square / resized grids,
// DeiT's two heads. Through the command users run (one process, every file), as wasm's are.
const OPTIONS = path.join(REPO, 'tests/parity');
const optionFiles = readdirSync(OPTIONS)
  .filter((f) => f.endsWith('.safetensors'))
  .sort()
  .map((f) => path.join(OPTIONS, f));

test('vitrine parity --backend webgpu: every file of tests/parity passes on the GPU', () => {
  assert.ok(optionFiles.length >= 30, optionFiles.join(' '));
  const r = spawnSync(
    process.execPath,
    [
      path.join(REPO, 'web/cli.js'),
      'parity',
      '--backend',
      'webgpu',
      '--wasm',
      'simd',
      '--threads',
      '1',
      ...optionFiles,
    ],
    { encoding: 'utf8', env: { ...process.env, VITRINE_WASM_DIR: WASM_DIR, VITRINE_WEBGPU: 'swiftshader' } },
  );
  const lines = r.stdout.split('\n').filter((l) => /^(PASS|FAIL) /.test(l));
  console.log(lines.map((l) => `# ${l.replace(/ \[webgpu on .*\]$/, '')}`).join('\n'));
  assert.equal(r.status, 0, r.stdout + r.stderr);
  for (const f of optionFiles) {
    const line = lines.find((l) => l.split(/\s+/)[1] === f);
    assert.match(line || `(no line for ${f})`, /^PASS .* worst .* err .* \[webgpu on .*swiftshader.*\]$/i);
  }
  assert.match(r.stdout, new RegExp(`^${optionFiles.length} passed, 0 failed$`, 'm'));
});

test('tests/parity on the GPU: checkpointing gives the bits of none (pre-norm CLIP, SigLIP pooling, resized grids, DeiT)', async () => {
  for (const f of ['clip_openai_b16', 'siglip_b16_map', 'dynamic_size_both_axes', 'deit_distilled_eval']) {
    const bytes = readFileSync(path.join(OPTIONS, `${f}.safetensors`));
    const none = await gp.run(bytes, { file: f, dump: true });
    assert.equal(none.pass, true, `${f}: ${none.error}`);
    const block = await gp.run(bytes, { file: f, dump: true, policy: 'block' });
    assert.equal(block.pass, true, `${f} block: ${block.error}`);
    assert.ok(Buffer.compare(Buffer.from(block.dump), Buffer.from(none.dump)) === 0, `${f}: block differs from none`);
  }
});

test("a file whose model needs a kernel the GPU lacks fails on its own line, naming the kernel and backend 'wasm'", async () => {
  const { KERNELS } = await import('../../web/webgpu/kernels.js');
  const had = KERNELS.rmsnorm_forward;
  delete KERNELS.rmsnorm_forward;
  try {
    const r = await gp.run(readFileSync(path.join(OPTIONS, 'embed_norm_rms.safetensors')), { file: 'embed_norm_rms' });
    assert.equal(r.pass, false);
    assert.match(r.error, /the kernel rmsnorm_forward has no WebGPU implementation: .*backend 'wasm'/);
    assert.equal(r.backend, 'webgpu');
  } finally {
    KERNELS.rmsnorm_forward = had;
  }
});
