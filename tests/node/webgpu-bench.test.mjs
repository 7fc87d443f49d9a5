// webgpu-bench.test.mjs: bench/webgpu_bench.mjs runs on the software adapter as the correctness
// smoke test it says it is: the adapter named with the banner that its times mean nothing, every
// GEMM of the ViT-Ti/16 step (batch 1) within the parity rule of float64, the attention and
// LayerNorm outputs finite, the roofline printed. No time is asserted. Needs an adapter.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { REPO, WASM_DIR } from './util.mjs';
import { testGpu } from './webgpu-util.mjs';

await testGpu().then((g) => g.destroy()); // no adapter: the test fails, saying what is missing

test('bench/webgpu_bench.mjs on SwiftShader: a smoke test that says so; every GEMM within the rule', () => {
  const r = spawnSync(process.execPath, [path.join(REPO, 'bench/webgpu_bench.mjs'), '--models', 'ti'], {
    encoding: 'utf8',
    env: { ...process.env, VITRINE_WASM_DIR: WASM_DIR },
  });
  assert.equal(r.status, 0, r.stderr);
  const out = r.stdout;
  assert.match(out, /^adapter: .*swiftshader.*\(software\)/im);
  assert.match(out, /A software adapter: shaders run on the CPU\. .* its speeds mean nothing/);
  const section = (title) => out.split('\n## ').find((s) => s.startsWith(title)) || '';
  const gemms = section('GEMMs of the classify training step')
    .split('\n')
    .filter((l) => /^\| vit_tiny\/16 \| (forward|dinp|dW) \|/.test(l));
  assert.ok(gemms.length >= 15, `${gemms.length} GEMM rows:\n${out}`);
  for (const row of gemms) {
    const err = Number(row.split('|').at(-4));
    assert.ok(err <= 1e-4, row);
  }
  const others = section('Attention and LayerNorm')
    .split('\n')
    .filter((l) => /^\| vit_tiny\/16 \| (attention|layernorm)_/.test(l));
  assert.equal(others.length, 4, out);
  for (const row of others) assert.match(row, /\| yes \|$/);
  assert.match(out, /## Roofline: vit_tiny_patch16_224 classify step, batch 1/);
  assert.ok(
    section('Roofline of each GEMM')
      .split('\n')
      .filter((l) => l.startsWith('| vit_tiny/16')).length >= 15,
  );
  assert.match(out, /^\| \*\*step\*\* \| \d+ \|/m);
});
