// resample.test.mjs: a checkpoint of another image or patch size loaded as timm loads it -- vitrine's
// load path (Model.initFrom: pos_embed and patch_embed resampled in src/resample.c) against what
// torch computes for timm's resample_abs_pos_embed / resample_patch_embed (bicubic, antialias,
// the pinv of the resize; tools/resample_reference.py), on several grid changes with 0, 1 and 5
// prefix rows and patch sizes 16 -> 8 / 14 / 32 and 14 -> 16. Skipped (saying so) without
// /usr/bin/python3 with torch. VITRINE_TIMM_SRC=DIR (a pytorch-image-models checkout): the reference
// is timm's own functions from it (the same bits as the script's steps: docs/finetune.md).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { REPO, engine, readSafetensors, writeSafetensors, f32, relErr } from './util.mjs';

const PY = '/usr/bin/python3';
const probe = spawnSync(PY, ['-c', 'import torch, numpy'], { encoding: 'utf8' });
const skip = probe.status === 0 ? false : `${PY} with torch and numpy not found: resampling against torch skipped`;

// float32: the interpolation rounds each product and sum (PyTorch's AVX2 kernels differ from ours in
// the last place); the pseudo-inverse is float32 in timm, double here. Measured: 1.6e-6 at most.
const TOL = 4e-6;

test('pos_embed and patch_embed of another grid load as timm resamples them', { skip }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-resample-'));
  try {
    const file = path.join(dir, 'ref.safetensors');
    const timm = process.env.VITRINE_TIMM_SRC ? ['--timm', process.env.VITRINE_TIMM_SRC] : [];
    const r = spawnSync(PY, [path.join(REPO, 'tools/resample_reference.py'), file, ...timm], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const ref = readSafetensors(readFileSync(file)),
      cases = JSON.parse(ref.meta.cases),
      vt = await engine('simd');
    const rows = [];
    for (const c of cases) {
      const D = c.dim,
        pos = c.what === 'pos_embed',
        patch = pos ? 16 : c.new;
      const prefixOf = (P) => (P === 0 ? { class_token: false, global_pool: 'avg' } : { reg_tokens: P - 1 });
      const model = vt.createModel({
        kind: 'timm',
        config: {
          img_size: (pos ? c.new : 14) * patch,
          patch_size: patch,
          embed_dim: D,
          depth: 1,
          num_heads: 1,
          ...prefixOf(pos ? c.prefix : 1),
        },
      });
      const mine = Object.fromEntries(model.params().map((p) => [p.name, p]));
      const t = (name, x, shape) => ({
        dtype: 'F32',
        shape,
        bytes: new Uint8Array(x.buffer.slice(x.byteOffset, x.byteOffset + x.byteLength)),
      });
      // the file: the tensor of the old size, and (for the layout to be recognised) the other one
      const input = f32(ref.tensors[`${c.name}/in`]);
      const tensors = pos
        ? {
            pos_embed: t('pos_embed', input, ref.tensors[`${c.name}/in`].shape),
            'patch_embed.proj.weight': t(
              'w',
              mine['patch_embed.proj.weight'].data.slice(),
              mine['patch_embed.proj.weight'].shape,
            ),
          }
        : { 'patch_embed.proj.weight': t('w', input, ref.tensors[`${c.name}/in`].shape) };
      const rep = model.initFrom(writeSafetensors(tensors));
      assert.ok(rep.resampled === 1, `${c.name}: ${JSON.stringify(rep)}`);
      const got = mine[pos ? 'pos_embed' : 'patch_embed.proj.weight'].data.slice(),
        want = f32(ref.tensors[`${c.name}/out`]);
      assert.equal(got.length, want.length, c.name);
      let abs = 0;
      for (let i = 0; i < got.length; i++) abs = Math.max(abs, Math.abs(got[i] - want[i]));
      const err = relErr(got, want);
      rows.push(
        `${c.what} ${c.old} -> ${c.new}${pos ? `, ${c.prefix} prefix` : ''}: max |diff| ${abs.toExponential(2)}, relative ${err.toExponential(2)}`,
      );
      assert.ok(err <= TOL, `${c.name} (${c.what} ${c.old} -> ${c.new}): relative error ${err} > ${TOL}`);
      if (pos)
        assert.ok(
          got.subarray(0, c.prefix * D).every((v, i) => v === input[i]),
          `${c.name}: the prefix rows changed`,
        );
      model.dispose();
    }
    console.log(`against ${ref.meta.by || 'torch'} with torch ${ref.meta.torch}:\n${rows.join('\n')}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
