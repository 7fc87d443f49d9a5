// guide.test.mjs: docs/finetune.md's Node program, run exactly as written (its code block saved as
// finetune.mjs) in a scratch folder where `vitrine` is this repository: photos/ of two classes
// (generated JPEGs), vit_tiny.safetensors laid out as timm's save_file writes a state_dict (a
// seeded initialisation: no network here). Then `vitrine predict` reads the classifier it wrote.
// Prints the program's output.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, symlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { readSafetensorsMeta } from '../../web/vitrine.js';
import { REPO, guideBlock, writePhotos, timmStateDict } from './util.mjs';

test('docs/finetune.md: the Node program, as written', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-guide-'));
  try {
    mkdirSync(path.join(dir, 'node_modules'));
    symlinkSync(REPO, path.join(dir, 'node_modules', 'vitrine'), 'dir');
    writePhotos(path.join(dir, 'photos'));
    writeFileSync(path.join(dir, 'vit_tiny.safetensors'), await timmStateDict());
    writeFileSync(path.join(dir, 'finetune.mjs'), guideBlock('## In Node', 'js'));
    const r = spawnSync(process.execPath, ['finetune.mjs'], {
      cwd: dir,
      encoding: 'utf8',
      env: { ...process.env, VITRINE_WASM_DIR: '' },
    });
    console.log(`node finetune.mjs:\n${r.stdout}${r.stderr}`);
    assert.equal(r.status, 0, r.stderr);
    assert.match(
      r.stdout,
      /^16 photos of circles, stripes \(4 held out\); normalisation timm's default for vit_tiny_patch16_224 \(vit_tiny_patch16_224\.augreg_in21k_ft_in1k's pretrained_cfg\): the weights state none; pos_embed \[1, 197, 192\]: resampled .*grid 14x14 -> 7x7/m,
    );
    assert.match(r.stdout, /^step 6\/6 epoch 3\.00 loss \d/m);
    assert.match(r.stdout, /^done at step 6: top-1 \d+\.\d% on 4 held-out photos$/m);
    const meta = readSafetensorsMeta(new Uint8Array(readFileSync(path.join(dir, 'classifier.safetensors'))));
    assert.deepEqual(JSON.parse(meta.vitrine_classifier).classes, ['circles', 'stripes']);
    assert.deepEqual(JSON.parse(meta.pretrained_cfg).mean, [0.5, 0.5, 0.5]);
    // what the guide says next: vitrine predict reads it
    const p = spawnSync(
      process.execPath,
      [path.join(REPO, 'web/cli.js'), 'predict', '--weights', 'classifier.safetensors', 'photos/stripes/3.jpg'],
      { cwd: dir, encoding: 'utf8' },
    );
    assert.equal(p.status, 0, p.stderr);
    assert.match(p.stdout, /^photos\/stripes\/3\.jpg: (circles|stripes) \d+\.\d%, (circles|stripes) \d+\.\d%\n$/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// OpenAI's CLIP ViT-B/16 image tower (docs/finetune.md, "CLIP in Node"): the program as written but
// for one block (timm kwargs over the architecture: its width, pre-norm, QuickGELU and 512-wide
// projection head are the real tower's), from a state_dict laid out as timm writes it
export const ONE_BLOCK = [
  "model: 'vit_base_patch16_clip_quickgelu_224',",
  "model: 'vit_base_patch16_clip_quickgelu_224', config: { depth: 1 },",
];
test("docs/finetune.md: CLIP's image tower in Node, as written (one block)", async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-guide-clip-'));
  try {
    mkdirSync(path.join(dir, 'node_modules'));
    symlinkSync(REPO, path.join(dir, 'node_modules', 'vitrine'), 'dir');
    writePhotos(path.join(dir, 'photos'));
    writeFileSync(
      path.join(dir, 'clip_b16.safetensors'),
      await timmStateDict('vit_base_patch16_clip_quickgelu_224', { numClasses: 512, depth: 1 }),
    );
    const program = guideBlock('### CLIP in Node', 'js');
    assert.ok(program.includes(ONE_BLOCK[0]));
    writeFileSync(path.join(dir, 'finetune-clip.mjs'), program.replace(...ONE_BLOCK));
    const r = spawnSync(process.execPath, ['finetune-clip.mjs'], {
      cwd: dir,
      encoding: 'utf8',
      env: { ...process.env, VITRINE_WASM_DIR: '' },
    });
    console.log(`node finetune-clip.mjs:\n${r.stdout}${r.stderr}`);
    assert.equal(r.status, 0, r.stderr);
    assert.match(
      r.stdout,
      /^16 photos of circles, stripes; normalisation timm's default for vit_base_patch16_clip_quickgelu_224 \(vit_base_patch16_clip_quickgelu_224\.\w+'s pretrained_cfg\): the weights state none; pos_embed \[1, 197, 768\]: resampled .*grid 14x14 -> 7x7.*; head\.weight \[512, 768\]: skipped: a classifier head of another size/m,
    );
    assert.match(r.stdout, /^step 6\/6 loss \d/m);
    assert.match(r.stdout, /^done at step 6: top-1 \d+\.\d% on 4 held-out photos$/m);
    const meta = readSafetensorsMeta(new Uint8Array(readFileSync(path.join(dir, 'clip_classifier.safetensors'))));
    assert.deepEqual(JSON.parse(meta.vitrine_classifier).classes, ['circles', 'stripes']);
    assert.deepEqual(JSON.parse(meta.pretrained_cfg).mean, [0.48145466, 0.4578275, 0.40821073]);
    const kw = JSON.parse(meta.timm_kwargs);
    assert.deepEqual(
      [kw.embed_dim, kw.depth, kw.pre_norm, kw.act_layer, kw.img_size],
      [768, 1, true, 'quick_gelu', 112],
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
