// dump.test.mjs: python/vitrine_dump.py end to end -- its own tests (python/test_vitrine_dump.py),
// its dumps through the engine (vitrine/testing's assertParity), and the example of
// docs/parity-format.md, which writes a file without the tool. Python: $VITRINE_PYTHON or
// /usr/bin/python3 (Debian's python3-torch). The dumps of real timm / lightly models run when
// those import (PYTHONPATH); else the test says why it is skipped.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { REPO, WASM_DIR, engine } from './util.mjs';
import { assertParity } from '../../web/testing.js';
import { fmtE } from '../../web/formats/parity-report.js';

const PY = process.env.VITRINE_PYTHON || '/usr/bin/python3';
const PYDIR = path.join(REPO, 'python');
const py = (args, opts = {}) => spawnSync(PY, args, { encoding: 'utf8', cwd: PYDIR, maxBuffer: 64 << 20, ...opts });
const probe = (mod) => {
  const r = py(['-c', `import ${mod}`]);
  return r.error
    ? `${PY}: ${r.error.message}`
    : r.status
      ? `${mod} is not importable by ${PY}: ${r.stderr.trim().split('\n').pop()}`
      : null;
};
const noTorch = probe('torch');
const noRefs = noTorch || probe('timm') || probe('lightly');
if (noTorch)
  console.log(
    `# dump.test.mjs: ${noTorch}: the dump tool's tests are skipped (bash scripts/setup.sh installs python3-torch)`,
  );
const temp = () => mkdtempSync(path.join(tmpdir(), 'vitrine-dump-'));

test(
  'python/test_vitrine_dump.py passes (the timm / lightly parts say why they skip)',
  { skip: noTorch ?? false },
  (t) => {
    const r = py(['-m', 'unittest', '-v', 'test_vitrine_dump']);
    assert.equal(r.status, 0, r.stderr + r.stdout);
    assert.match(r.stderr, /^OK/m);
    for (const line of r.stderr.split('\n').filter((l) => /skipped/.test(l))) t.diagnostic(line.trim());
  },
);

test(
  "dumps of a torch-only stand-in of timm's ViT pass vitrine parity, under every policy",
  { skip: noTorch ?? false },
  async (t) => {
    const dir = temp();
    try {
      const r = py(['test_vitrine_dump.py', '--standin-dumps', dir]);
      assert.equal(r.status, 0, r.stderr);
      const files = readdirSync(dir).sort();
      assert.equal(files.length, 2);
      const vt = await engine('simd');
      for (const f of files) {
        for (const policy of ['none', 'block', 'selective']) {
          const res = await assertParity(path.join(dir, f), { engine: vt, policy });
          if (policy === 'none')
            t.diagnostic(`${f}: worst ${res.worst} err ${fmtE(res.err)} torch32_err ${fmtE(res.torch32_err)}`);
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

test('the example of docs/parity-format.md writes a file vitrine parity passes', { skip: noTorch ?? false }, () => {
  const md = readFileSync(path.join(REPO, 'docs/parity-format.md'), 'utf8');
  const m = /<!-- example:begin -->\n```python\n([\s\S]*?)```\n<!-- example:end -->/.exec(md);
  assert.ok(m, 'the example block');
  assert.ok(m[1].split('\n').length <= 30, 'a short example');
  const dir = temp();
  try {
    writeFileSync(path.join(dir, 'example.py'), m[1]);
    const r = py(['example.py'], { cwd: dir });
    assert.equal(r.status, 0, r.stderr);
    const cli = spawnSync(
      process.execPath,
      [path.join(REPO, 'web/cli.js'), 'parity', 'example.safetensors', '--wasm', 'simd'],
      { cwd: dir, encoding: 'utf8', env: { ...process.env, VITRINE_WASM_DIR: WASM_DIR } },
    );
    assert.equal(cli.status, 0, cli.stdout + cli.stderr);
    assert.match(cli.stdout, /^PASS example\.safetensors  worst \S+ err \S+ torch32_err \d/m);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// The tool's command line on real timm and lightly models: every module, call and input it offers.
const TINY = '{"img_size": 32, "patch_size": 8, "embed_dim": 64, "depth": 2, "num_heads": 4}';
const CONFIGS = {
  timm_forward_features: ['--kind', 'timm', '--kwargs', TINY.replace('}', ', "num_classes": 0}')],
  timm_forward_head: [
    '--kind',
    'timm',
    '--kwargs',
    TINY.replace(
      '}',
      ', "num_classes": 10, "global_pool": "avg", "reg_tokens": 2, "qk_norm": true, "init_values": 0.1}',
    ),
    '--call',
    'forward',
  ],
  timm_name_vit_tiny: [
    '--kind',
    'timm',
    '--name',
    'vit_tiny_patch16_224',
    '--kwargs',
    '{"img_size": 32, "depth": 2}',
    '--call',
    'forward',
    '--batch',
    '1',
  ],
  lightly_encode_mask_keep: [
    '--kind',
    'lightly',
    '--kwargs',
    TINY,
    '--call',
    'encode',
    '--idx-mask',
    '--idx-keep',
    '--mask-ratio',
    '0.25',
  ],
  lightly_intermediates_norm: [
    '--kind',
    'lightly',
    '--kwargs',
    TINY,
    '--call',
    'forward_intermediates',
    '--norm',
    '--idx-mask',
  ],
  lightly_forward_pooled_frozen: [
    '--kind',
    'lightly',
    '--kwargs',
    TINY,
    '--call',
    'forward',
    '--idx-keep',
    '--freeze',
    'vit.patch_embed',
    '--freeze',
    'mask_token',
  ],
  lightly_encode_bool_mask: [
    '--kind',
    'lightly',
    '--kwargs',
    TINY.replace('}', ', "reg_tokens": 1}'),
    '--mask',
    '--seed',
    '3',
  ],
  causal_prefix_mask: [
    '--kind',
    'causal',
    '--kwargs',
    TINY.replace('}', ', "class_token": false, "no_embed_class": true, "global_pool": "avg"}'),
    '--mask',
  ],
  mae_loss_norm_pix: [
    '--kind',
    'mae',
    '--kwargs',
    TINY,
    '--decoder',
    '{"decoder_dim": 32, "decoder_depth": 1, "decoder_heads": 4, "norm_pix_loss": true}',
  ],
  aim_loss: ['--kind', 'aim', '--kwargs', TINY, '--head', '{"head_hidden_dim": 48, "head_blocks": 1}'],
  // the rest of timm's ViT and its families (tests/parity holds one file of each option)
  timm_clip_quickgelu: [
    '--kind',
    'timm',
    '--name',
    'vit_base_patch16_clip_quickgelu_224',
    '--kwargs',
    '{"img_size": 32, "embed_dim": 32, "depth": 1, "num_heads": 2, "num_classes": 3}',
    '--call',
    'forward',
  ],
  timm_siglip_map: [
    '--kind',
    'timm',
    '--name',
    'vit_base_patch16_siglip_224',
    '--kwargs',
    '{"img_size": 32, "embed_dim": 32, "depth": 1, "num_heads": 2, "num_classes": 3}',
    '--call',
    'forward',
  ],
  timm_deit_distilled_training: [
    '--kind',
    'timm',
    '--name',
    'deit_tiny_distilled_patch16_224',
    '--kwargs',
    '{"img_size": 32, "depth": 1, "num_classes": 3}',
    '--call',
    'forward',
    '--distilled-training',
  ],
  timm_dynamic_size: [
    '--kind',
    'timm',
    '--kwargs',
    TINY.replace('}', ', "dynamic_img_size": true}'),
    '--image-size',
    '40,24',
  ],
  timm_intermediates_nlc_prefix_norm: [
    '--kind',
    'timm',
    '--kwargs',
    TINY.replace('}', ', "reg_tokens": 2}'),
    '--call',
    'forward_intermediates',
    '--indices',
    '0,',
    '--norm',
    '--return-prefix-tokens',
    '--output-fmt',
    'NLC',
  ],
  timm_intermediates_nchw_stop_early_only: [
    '--kind',
    'timm',
    '--name',
    'deit_tiny_distilled_patch16_224',
    '--kwargs',
    '{"img_size": 32, "depth": 2, "num_classes": 3}',
    '--call',
    'forward_intermediates',
    '--indices',
    '1',
    '--stop-early',
    '--intermediates-only',
  ],
  mae_registers: [
    '--kind',
    'mae',
    '--kwargs',
    TINY.replace('}', ', "reg_tokens": 2}'),
    '--decoder',
    '{"decoder_dim": 32, "decoder_depth": 1, "decoder_heads": 4}',
  ],
};

test(
  `real timm / lightly: ${Object.keys(CONFIGS).length} configurations dumped by the tool's CLI pass vitrine parity`,
  { skip: noRefs ?? false },
  async (t) => {
    const dir = temp();
    try {
      const argv = Object.entries(CONFIGS).map(([name, a]) => [path.join(dir, `${name}.safetensors`), ...a]);
      // one Python process (timm imports slowly): main(argv) per configuration, as the script runs it
      const r = py(
        ['-c', 'import json, sys, vitrine_dump\nsys.exit(max(vitrine_dump.main(a) for a in json.load(sys.stdin)))'],
        { input: JSON.stringify(argv) },
      );
      assert.equal(r.status, 0, r.stderr + r.stdout);
      const vt = await engine('simd');
      for (const name of Object.keys(CONFIGS)) {
        const res = await assertParity(path.join(dir, `${name}.safetensors`), { engine: vt });
        t.diagnostic(
          `${name}: ${res.module} ${res.fn}: worst ${res.worst} err ${fmtE(res.err)} torch32_err ${fmtE(res.torch32_err)} (max torch32_err ${fmtE(res.max_torch32_err)}, ${res.tensors.length} tensors)`,
        );
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
