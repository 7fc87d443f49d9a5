// parity-options.test.mjs: tests/parity (every option of timm's VisionTransformer vitrine computes
// and the families, dumped from the real timm / lightly by tests/parity/make_dumps.py) through
// each wasm build (vitrine/testing's assertParity), checkpointing bit for bit, and each build
// against the native one (the same bits where the kernels are the same; the parity tolerance for
// the scalar builds). The native build runs them in ctest (parity_options, test_checkpoint,
// test_threads).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BUILDS, REPO, NATIVE, NATIVE_FMA, HOST_FMA, engine, readSafetensors, f32, relErr } from './util.mjs';
import { assertParity } from '../../web/testing.js';

const DIR = path.join(REPO, 'tests/parity');
const names = readdirSync(DIR)
  .filter((f) => f.endsWith('.safetensors'))
  .sort();
const file = (n) => readFileSync(path.join(DIR, n));

test('tests/parity holds a dump of every option and family', () => {
  for (const want of [
    'clip_openai_b16',
    'clip_openai_b32',
    'clip_openclip_b16',
    'siglip_b16_map',
    'deit_b16',
    'deit_distilled_eval',
    'deit_distilled_training',
    'dinov2_reg4',
    'act_gelu_tanh',
    'act_quick_gelu',
    'norm_rms_qk_scale',
    'embed_norm_rms',
    'fc_norm_token',
    'final_norm_off',
    'proj_bias_off',
    'pool_include_prefix_avg',
    'map_reg_fc_norm',
    'prr_token',
    'prr_avg_reg',
    'img_non_square',
    'img_floor_grid',
    'dynamic_size_both_axes',
    'dynamic_pad',
    'mae_registers',
    'pool_max_pos_none',
    'timm_inter_default',
    'timm_inter_reg_nlc_norm_prefix',
    'timm_inter_clip_stop_early',
    'timm_inter_only_dynamic',
    'timm_inter_pad_stop_only',
    'timm_inter_no_prefix_rms_norm',
    'timm_inter_gap_norm_identity',
    'timm_inter_deit_distilled_dict',
    'timm_inter_dinov2_reg4',
  ])
    assert.ok(names.includes(`${want}.safetensors`), want);
});

for (const build of BUILDS) {
  test(`tests/parity passes through the ${build} build, every policy bit for bit`, async () => {
    const vt = await engine(build);
    for (const name of names) {
      const r = await assertParity(path.join(DIR, name), { engine: vt });
      assert.ok(r.tensors.length > 0, name);
    }
    if (build !== 'simd' && build !== 'scalar') return; // the policies once per kind of kernels
    for (const name of names) {
      const ref = vt.parity(file(name), { policy: 'none', dump: true });
      assert.ok(ref.pass && ref.dump, `${name}: ${ref.error}`);
      for (const policy of ['block', 'selective', 'every:2']) {
        const r = vt.parity(file(name), { policy, dump: true });
        assert.ok(r.pass, `${name} ${policy}: ${r.error}`);
        assert.ok(Buffer.from(r.dump).equals(Buffer.from(ref.dump)), `${name}: policy ${policy} changed the bits`);
      }
    }
  });
}

const USE_FMA = HOST_FMA && existsSync(NATIVE_FMA);
test(
  'tests/parity: the wasm builds agree with the native build',
  { skip: !existsSync(NATIVE) && `no native ${NATIVE}` },
  async (t) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-options-'));
    const fmaDir = mkdtempSync(path.join(tmpdir(), 'vitrine-options-fma-'));
    try {
      const files = names.map((n) => path.join(DIR, n));
      const run = spawnSync(NATIVE, ['parity', ...files, '--dump', dir], { encoding: 'utf8' });
      assert.equal(run.status, 0, run.stdout + run.stderr);
      if (USE_FMA) {
        const r2 = spawnSync(NATIVE_FMA, ['parity', ...files, '--dump', fmaDir], { encoding: 'utf8' });
        assert.equal(r2.status, 0, r2.stdout + r2.stderr);
      }
      for (const build of BUILDS) {
        const fused = build.startsWith('relaxed');
        if (fused && !USE_FMA) continue;
        const vt = await engine(build);
        const tol = build.endsWith('scalar') ? 1e-5 : 1e-4;
        let worst = 0,
          bitwise = 0;
        for (const name of names) {
          const ours = readSafetensors(vt.parity(file(name), { dump: true }).dump).tensors;
          const native = readSafetensors(readFileSync(path.join(fused ? fmaDir : dir, name))).tensors;
          assert.deepEqual(Object.keys(ours).sort(), Object.keys(native).sort(), name);
          let same = true;
          for (const k of Object.keys(native)) {
            const e = relErr(f32(ours[k]), f32(native[k]));
            if (!Buffer.from(ours[k].bytes).equals(Buffer.from(native[k].bytes))) same = false;
            worst = Math.max(worst, e);
            assert.ok(e <= tol, `${build}: ${name} ${k} err ${e} > ${tol}`);
          }
          if (same) bitwise++;
        }
        t.diagnostic(
          `${build}: ${bitwise}/${names.length} files bitwise equal to native, worst rel err ${worst.toExponential(3)}`,
        );
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(fmaDir, { recursive: true, force: true });
    }
  },
);
