// finetune-timm.test.mjs: fine-tuning from a state_dict made by timm itself -- timm.create_model's
// vit_tiny_patch16_224 (224 px) written as safetensors (tools/timm_finetune_reference.py) -- started
// at 224, 112 and 160 px and at patch 8, as timm starts a model of another size from a checkpoint:
// vitrine's loadWeights (pos_embed / patch_embed resampled, timm's pretrained_cfg normalisation
// 0.5 / 0.5 for an image's 8-bit pixels) gives timm's logits within the parity rule
// (docs/parity-format.md: err <= 1e-4), then train() fine-tunes from the same file at 224 and 112
// px. Needs /usr/bin/python3 with torch and timm: VITRINE_TIMM_SRC=DIR (a pytorch-image-models
// checkout) or an importable timm; else skipped, saying so.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { train } from '../../web/vitrine.js';
import { REPO, engine, readSafetensors, f32, relErr } from './util.mjs';

const PY = '/usr/bin/python3',
  SRC = process.env.VITRINE_TIMM_SRC;
const probe = spawnSync(PY, ['-c', 'import torch, numpy'], { encoding: 'utf8' });
const timmThere = SRC || spawnSync(PY, ['-c', 'import timm'], { encoding: 'utf8' }).status === 0;
const skip =
  probe.status !== 0
    ? `${PY} with torch and numpy not found: fine-tuning from timm's own state_dict skipped`
    : !timmThere
      ? "timm not importable and VITRINE_TIMM_SRC not set: fine-tuning from timm's own state_dict skipped"
      : false;

test(
  "a 224-px state_dict made by timm: vitrine starts vit_tiny_patch16_224 from it at 224, 112, 160 px and patch 8 with timm's logits, and fine-tunes from it",
  { skip },
  async (t) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-timm-ft-'));
    try {
      const r = spawnSync(
        PY,
        [path.join(REPO, 'tools/timm_finetune_reference.py'), dir, ...(SRC ? ['--timm', SRC] : [])],
        { encoding: 'utf8' },
      );
      assert.equal(r.status, 0, r.stderr);
      const weights = new Uint8Array(readFileSync(path.join(dir, 'vit_tiny_patch16_224.safetensors')));
      const ref = readSafetensors(readFileSync(path.join(dir, 'reference.safetensors'))),
        vt = await engine('simd');
      const mean = JSON.parse(ref.meta.mean),
        rows = [];
      assert.deepEqual(mean, [0.5, 0.5, 0.5], "timm's pretrained_cfg of the augreg weights");
      for (const c of JSON.parse(ref.meta.cases)) {
        const model = vt.createModel('vit_tiny_patch16_224', {
          numClasses: 1000,
          imgSize: c.img_size,
          patchSize: c.patch_size,
        });
        const rep = await model.loadWeights(weights);
        assert.deepEqual(model.normalization.mean, mean, c.name);
        assert.equal(
          rep.resampled,
          (c.img_size / c.patch_size !== 14 ? 1 : 0) + (c.patch_size !== 16 ? 1 : 0),
          `${c.name}: ${rep.notes.join('; ')}`,
        );
        const px = ref.tensors[`${c.name}/pixels`];
        const img = {
          width: c.img_size,
          height: c.img_size,
          data: new Uint8ClampedArray(px.bytes.buffer, px.bytes.byteOffset, px.bytes.byteLength),
        };
        const got = model.timmForward(img).data,
          want = f32(ref.tensors[`${c.name}/logits`]);
        const err = relErr(got, want);
        rows.push(
          `${c.img_size} px, patch ${c.patch_size}: logits err ${err.toExponential(2)}${rep.notes.length ? ` (${rep.notes.join('; ')})` : ''}`,
        );
        assert.ok(err <= 1e-4, `${c.name}: err ${err}`);
        model.dispose();
      }
      t.diagnostic(`against timm ${ref.meta.timm} (torch ${ref.meta.torch}):`);
      rows.forEach((row) => t.diagnostic(row));
      // fine-tuned from the file at 224 and at 112 px: timm's normalisation, the resampling reported
      const px = new Uint8Array(8 * 32 * 32 * 3).map((_, i) =>
        i % 96 < 48 === (((i / 3072) | 0) % 2 === 0) ? 200 : 40,
      );
      const data = { pixels: px, n: 8, size: 32, chans: 3, labels: [0, 1, 0, 1, 0, 1, 0, 1], classes: ['a', 'b'] };
      for (const imgSize of [224, 112]) {
        let ready;
        const res = await train({
          objective: 'classify',
          model: 'vit_tiny_patch16_224',
          imgSize,
          weights,
          data,
          val: 0,
          steps: 2,
          batch: 2,
          wasm: 'simd',
          threads: 1,
          onReady: (i) => {
            ready = i;
          },
        }).done;
        assert.equal(res.status, 'done');
        assert.deepEqual(
          [ready.normalization.mean, ready.init.resampled, ready.init.skipped],
          [[0.5, 0.5, 0.5], imgSize === 224 ? 0 : 1, 2],
        );
        assert.ok(Number.isFinite(res.lossLast));
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

test(
  "OpenAI's CLIP ViT-B/16 image tower (its width, one block) from a state_dict timm made: timm's logits at 224 and 112 px, then fine-tuned at 112",
  { skip },
  async (t) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-timm-clip-'));
    try {
      const r = spawnSync(
        PY,
        [
          path.join(REPO, 'tools/timm_finetune_reference.py'),
          dir,
          '--arch',
          'vit_base_patch16_clip_quickgelu_224',
          ...(SRC ? ['--timm', SRC] : []),
        ],
        { encoding: 'utf8' },
      );
      assert.equal(r.status, 0, r.stderr);
      const weights = new Uint8Array(readFileSync(path.join(dir, 'clip_b16_depth1.safetensors')));
      const ref = readSafetensors(readFileSync(path.join(dir, 'reference_clip_b16_depth1.safetensors'))),
        vt = await engine('simd');
      const mean = JSON.parse(ref.meta.mean);
      assert.deepEqual(mean, [0.48145466, 0.4578275, 0.40821073], "OpenAI's mean in timm's pretrained_cfg");
      for (const c of JSON.parse(ref.meta.cases)) {
        const model = vt.createModel('vit_base_patch16_clip_quickgelu_224', {
          numClasses: 512,
          depth: 1,
          imgSize: c.img_size,
        });
        const rep = await model.loadWeights(weights, { strict: true });
        assert.deepEqual(model.normalization.mean, mean, c.name);
        assert.equal(rep.resampled, c.img_size === 224 ? 0 : 1, c.name);
        const px = ref.tensors[`${c.name}/pixels`];
        const img = {
          width: c.img_size,
          height: c.img_size,
          data: new Uint8ClampedArray(px.bytes.buffer, px.bytes.byteOffset, px.bytes.byteLength),
        };
        const err = relErr(model.timmForward(img).data, f32(ref.tensors[`${c.name}/logits`]));
        t.diagnostic(`CLIP B/16 tower, ${c.img_size} px: the 512 outputs' err ${err.toExponential(2)} against timm`);
        assert.ok(err <= 1e-4, `${c.name}: err ${err}`);
        model.dispose();
      }
      const px = new Uint8Array(8 * 32 * 32 * 3).map((_, i) =>
        i % 96 < 48 === (((i / 3072) | 0) % 2 === 0) ? 200 : 40,
      );
      const data = { pixels: px, n: 8, size: 32, chans: 3, labels: [0, 1, 0, 1, 0, 1, 0, 1], classes: ['a', 'b'] };
      let ready;
      const res = await train({
        objective: 'classify',
        model: 'vit_base_patch16_clip_quickgelu_224',
        config: { depth: 1 },
        imgSize: 112,
        weights,
        data,
        val: 0,
        steps: 2,
        batch: 2,
        policy: 'block',
        wasm: 'simd',
        threads: 1,
        onReady: (i) => {
          ready = i;
        },
      }).done;
      assert.equal(res.status, 'done');
      assert.deepEqual([ready.normalization.mean, ready.init.resampled, ready.init.skipped], [mean, 1, 2]);
      assert.ok(Number.isFinite(res.lossLast));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
