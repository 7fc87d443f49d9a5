// webgpu-parity.test.mjs: every public PyTorch fixture (../shared/fixtures) computed on the WebGPU
// backend (SwiftShader) passes the parity rule, judged by the engine's own harness
// (web/webgpu/parity.js: the harness records the call, the GPU replays it, vt_parity_check
// compares); checkpointing policies give the GPU the bits of none; `vitrine parity --backend
// webgpu`. Needs an adapter (fails without: webgpu-util.mjs).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createVitrine, withMetadata } from '../../web/vitrine.js';
import { GpuParity } from '../../web/webgpu/parity.js';
import { REPO, FIXTURES, WASM_DIR, fixture, fixtureNames } from './util.mjs';
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

test('vitrine parity --backend webgpu: the lines of the wasm harness; a broken file fails', () => {
  // (a model's file through GpuParity is the test above; here the command's wiring, without
  // compiling every pipeline once more in another process)
  const files = ['adamw_steps.safetensors', 'sincos_pos_embed.safetensors'].map((f) => path.join(FIXTURES, f));
  // a file the harness refuses to set up (its call is not JSON): a FAIL line like any other, no
  // backend tag of nothing ('[undefined]')
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-gpu-parity-')),
    crafted = path.join(dir, 'bad_call.safetensors');
  writeFileSync(crafted, withMetadata(fixture('vit_encode.safetensors'), { call: '{not json' }));
  files.push(crafted);
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
  rmSync(dir, { recursive: true, force: true });
  assert.equal(r.status, 2, r.stderr); // the unreadable file
  assert.match(r.stdout, /^PASS .*adamw_steps\.safetensors  worst param\.\d err /m);
  assert.match(
    r.stdout,
    /^PASS .*sincos_pos_embed\.safetensors  worst .*\[wasm \(a sin-cos table is made when a model is built/m,
  );
  assert.match(r.stdout, /^FAIL \/nonexistent\.safetensors: cannot open/m);
  assert.match(r.stdout, /^FAIL .*bad_call\.safetensors/m);
  assert.doesNotMatch(r.stdout, /\[undefined\]/);
  assert.match(r.stdout, /2 passed, 2 failed/);
});
