// families.test.mjs: the timm families by name through the JS API -- CLIP (OpenAI and OpenCLIP,
// B/16 and B/32), SigLIP B/16, DeiT and DeiT-distilled, DINOv2 with registers: createModel(name)
// makes timm's architecture (its options, its state_dict keys), a state_dict timm saved for the
// family (tests/parity's, dumped from the real timm) loads strictly and computes what timm
// computes, and the normalisation is the family's pretrained_cfg.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { REPO, engine, readSafetensors, writeSafetensors, f32, relErr } from './util.mjs';
import { TIMM_PRETRAINED } from '../../web/vitrine.js';
import { resolveNormalization } from '../../web/formats/pretrained.js';

const CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073];
const IMAGENET_MEAN = [0.485, 0.456, 0.406];
// name: [a tests/parity dump of its structure (made by timm from the name, or, for DeiT tiny /
// small and DINOv2 small, from the name of the same structure at another width), what its
// state_dict has that a plain ViT's has not, mean]
const FAMILIES = {
  vit_base_patch16_clip_224: ['clip_openclip_b16', 'norm_pre.weight', CLIP_MEAN],
  vit_base_patch32_clip_224: ['clip_openclip_b32_features', 'norm_pre.weight', CLIP_MEAN],
  vit_base_patch16_clip_quickgelu_224: ['clip_openai_b16', 'norm_pre.weight', CLIP_MEAN],
  vit_base_patch32_clip_quickgelu_224: ['clip_openai_b32', 'norm_pre.weight', CLIP_MEAN],
  vit_base_patch16_siglip_224: ['siglip_b16_map', 'attn_pool.latent', [0.5, 0.5, 0.5]],
  deit_tiny_patch16_224: ['deit_b16', 'cls_token', IMAGENET_MEAN],
  deit_small_patch16_224: ['deit_b16', 'cls_token', IMAGENET_MEAN],
  deit_base_patch16_224: ['deit_b16', 'cls_token', IMAGENET_MEAN],
  deit_tiny_distilled_patch16_224: ['deit_distilled_eval', 'head_dist.weight', IMAGENET_MEAN],
  deit_small_distilled_patch16_224: ['deit_distilled_eval', 'head_dist.weight', IMAGENET_MEAN],
  deit_base_distilled_patch16_224: ['deit_distilled_eval', 'head_dist.weight', IMAGENET_MEAN],
  vit_small_patch14_reg4_dinov2: ['dinov2_reg4', 'reg_token', IMAGENET_MEAN],
  vit_base_patch14_reg4_dinov2: ['dinov2_reg4', 'reg_token', IMAGENET_MEAN],
};

test('createModel(name) makes each family, its keys and its normalisation', async () => {
  const vt = await engine('simd');
  for (const [name, [, key, mean]] of Object.entries(FAMILIES)) {
    assert.ok(vt.presets().includes(name), `${name} is a preset`);
    const dino = name.includes('dinov2');
    const m = vt.createModel(name, { embedDim: 16, depth: 1, numHeads: 2, imgSize: dino ? 28 : 32, numClasses: 3 });
    try {
      const names = m.params().map((p) => p.name);
      assert.ok(names.includes(key), `${name}: ${key}`);
      assert.equal(names.includes('patch_embed.proj.bias'), !name.includes('clip'), `${name}: CLIP has no patch bias`);
      const { img, chans } = m.dims;
      const out = m.timmForward(new Float32Array(2 * chans * img * img).fill(0.25), {});
      assert.deepEqual(out.shape, [2, 3], name);
      assert.deepEqual(resolveNormalization({ arch: name }).mean, mean, `${name}: mean`);
      assert.ok(TIMM_PRETRAINED[name].tag, name);
    } finally {
      m.dispose();
    }
  }
});

test("a timm-saved state_dict of each family loads strictly and computes timm's forward", async (t) => {
  const vt = await engine('simd');
  for (const [name, [dump]] of Object.entries(FAMILIES)) {
    if (!dump) continue;
    const { meta, tensors } = readSafetensors(readFileSync(path.join(REPO, 'tests/parity', `${dump}.safetensors`)));
    const sd = Object.fromEntries(
      Object.entries(tensors)
        .filter(([k]) => k.startsWith('param/'))
        .map(([k, t]) => [k.slice(6), t]),
    );
    // the family by name, with the dump's sizes over it (timm's create_model(name, **kwargs))
    const m = vt.createModel({ kind: 'timm', preset: name, config: JSON.parse(meta.config) });
    try {
      const r = m.initFrom(writeSafetensors(sd), { strict: true });
      assert.equal(r.skipped + r.missing, 0, `${name}: ${r.notes}`);
      assert.equal(r.loaded, m.params().length, name);
      const call = JSON.parse(meta.call);
      if (call.fn !== 'forward' || call.distilled_training) continue;
      const img = tensors['input/images'];
      const out = m.timmForward(f32(img), { normalize: false, batch: img.shape[0] });
      const err = relErr(out.data, f32(tensors['expect/out']));
      assert.ok(err <= 1e-4, `${name}: forward err ${err}`);
      t.diagnostic(`${name}: forward err ${err.toExponential(2)} against timm's float64`);
    } finally {
      m.dispose();
    }
  }
});

// each family at its real width (one block), as timm itself makes and saves it: strict, and timm's
// forward (tools/timm_families_reference.py; needs /usr/bin/python3 with torch and timm:
// VITRINE_TIMM_SRC=DIR or an importable timm, else skipped, saying so)
const PY = '/usr/bin/python3',
  SRC = process.env.VITRINE_TIMM_SRC;
const timmThere =
  spawnSync(PY, ['-c', 'import torch, numpy'], { encoding: 'utf8' }).status === 0 &&
  (SRC || spawnSync(PY, ['-c', 'import timm'], { encoding: 'utf8' }).status === 0);
test(
  "each family's state_dict as timm makes and saves it (its width, one block) loads strictly and computes timm's forward",
  { skip: timmThere ? false : "timm not importable and VITRINE_TIMM_SRC not set: timm's own state_dicts skipped" },
  async (t) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-families-'));
    try {
      const r = spawnSync(
        PY,
        [path.join(REPO, 'tools/timm_families_reference.py'), dir, ...(SRC ? ['--timm', SRC] : [])],
        { encoding: 'utf8' },
      );
      assert.equal(r.status, 0, r.stderr);
      const ref = readSafetensors(readFileSync(path.join(dir, 'reference.safetensors'))),
        vt = await engine('simd');
      const names = JSON.parse(ref.meta.names);
      assert.deepEqual([...names].sort(), Object.keys(FAMILIES).sort());
      for (const name of names) {
        const m = vt.createModel(name, {
          depth: 1,
          numClasses: 3,
          ...(name.includes('dinov2') ? { imgSize: 224 } : {}),
        });
        try {
          const rep = m.initFrom(readFileSync(path.join(dir, `${name}.safetensors`)), { strict: true });
          assert.equal(rep.loaded, m.params().length, name);
          const img = ref.tensors[`${name}/images`];
          const err = relErr(m.timmForward(f32(img)).data, f32(ref.tensors[`${name}/logits`]));
          t.diagnostic(`${name}: strict, logits err ${err.toExponential(2)} against timm ${ref.meta.timm}`);
          assert.ok(err <= 1e-4, `${name}: err ${err}`);
        } finally {
          m.dispose();
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
