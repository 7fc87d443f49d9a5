// init.test.mjs: training from timm / lightly / vitrine weights: Model.initFrom (one call, the
// layout recognised by itself) and `vitrine train --init FILE [--init-strict]`, from files laid out
// like each source, with and without a classifier head; out/encoder.safetensors carries its timm
// kwargs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { readSafetensorsMeta, withMetadata } from '../../web/vitrine.js';
import { REPO, WASM_DIR, engine, readSafetensors, writeSafetensors } from './util.mjs';

const CLI = path.join(REPO, 'web/cli.js');
const ENC = { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 2, num_heads: 2 };
const TINY = { encoder: ENC, decoder_dim: 16, decoder_depth: 1, decoder_heads: 2 };
const env = { ...process.env, VITRINE_WASM_DIR: WASM_DIR };
const cli = (args) => spawnSync(process.execPath, [CLI, 'train', ...args], { env, encoding: 'utf8' });

// The same tensors without metadata (a file as timm's / lightly's save_file writes it); drop: names to leave out.
function plain(bytes, drop = []) {
  const { tensors } = readSafetensors(bytes);
  return writeSafetensors(Object.fromEntries(Object.entries(tensors).filter(([n]) => !drop.includes(n))));
}

// timm VisionTransformer(num_classes=10) and lightly MaskedVisionTransformerTIMM files, seeded
async function sourceFiles(dir) {
  const vt = await engine('simd');
  const timm = vt.createModel({ kind: 'timm', config: { ...ENC, num_classes: 10 } });
  timm.initWeights(5n);
  const timmHead = plain(timm.saveSafetensors());
  const timmNoHead = plain(timm.saveSafetensors(), ['head.weight', 'head.bias']);
  const lightly = vt.createModel({ kind: 'lightly', config: { ...ENC, num_classes: 0 } });
  lightly.initWeights(6n);
  const lightlyBytes = plain(lightly.saveSafetensors());
  const files = {
    timmHead: path.join(dir, 'timm_head.safetensors'),
    timmNoHead: path.join(dir, 'timm.safetensors'),
    lightly: path.join(dir, 'lightly.safetensors'),
  };
  writeFileSync(files.timmHead, timmHead);
  writeFileSync(files.timmNoHead, timmNoHead);
  writeFileSync(files.lightly, lightlyBytes);
  const weights = {
    timm: Object.fromEntries(timm.params().map((p) => [p.name, p.data.slice()])),
    lightly: Object.fromEntries(lightly.params().map((p) => [p.name, p.data.slice()])),
  };
  timm.dispose();
  lightly.dispose();
  return { files, bytes: { timmHead, timmNoHead, lightly: lightlyBytes }, weights };
}

test('Model.initFrom: timm (head or not), lightly, vitrine files into an MAE model, the layout recognised', async () => {
  const vt = await engine('simd');
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-init-'));
  const { bytes, weights } = await sourceFiles(dir);
  const fresh = () => {
    const m = vt.createModel({ kind: 'mae', config: TINY });
    m.initWeights(1n);
    return m;
  };
  let m = fresh();
  let r = m.initFrom(bytes.timmHead);
  assert.equal(r.source, 'timm VisionTransformer state_dict');
  assert.equal(r.skipped, 2);
  assert.match(r.notes.join('\n'), /head\.weight \[10, 32\]: skipped: a classifier head, and the model has none/);
  assert.equal(r.posEmbed, 'learned_now_trainable');
  const pos = m.params().find((p) => p.name === 'backbone.vit.pos_embed');
  assert.equal(pos.requiresGrad, true);
  assert.deepEqual(pos.data.slice(), weights.timm.pos_embed); // a copy: data is a live view (a Proxy)
  m.dispose();
  m = fresh();
  assert.throws(() => m.initFrom(bytes.timmHead, { strict: true }), /VitrineError: strict: .*head\.weight/s);
  r = m.initFrom(bytes.timmNoHead, { strict: true });
  assert.equal(r.skipped + r.missing, 0);
  m.dispose();
  m = fresh();
  r = m.initFrom(bytes.lightly, { strict: true });
  assert.equal(r.source, 'lightly MaskedVisionTransformerTIMM (vit. keys)');
  assert.equal(r.posEmbed, 'sincos_frozen');
  assert.deepEqual(
    m
      .params()
      .find((p) => p.name === 'backbone.mask_token')
      .data.slice(),
    weights.lightly.mask_token,
  );
  assert.equal(m.params().find((p) => p.name === 'backbone.vit.pos_embed').requiresGrad, false);
  // vitrine's own encoder file (timm keys + timm_kwargs) back into a timm classifier: the head is not in it
  const enc = m.saveSafetensors({ modelPrefix: 'backbone.vit.' });
  const kw = JSON.parse(readSafetensorsMeta(enc).timm_kwargs);
  assert.deepEqual(kw, {
    ...ENC,
    num_classes: 0,
    global_pool: 'token',
    mlp_ratio: 4,
    qkv_bias: true,
    qk_norm: false,
    init_values: null,
    class_token: true,
    reg_tokens: 0,
    no_embed_class: false,
    pos_embed: 'learn',
  });
  const cls = vt.createModel({ kind: 'timm', config: kw });
  r = cls.initFrom(enc, { strict: true });
  assert.equal(r.source, 'vitrine encoder (timm keys)');
  cls.dispose();
  m.dispose();
});

test('vitrine train --init FILE [--init-strict]: timm with / without head, lightly, a vitrine checkpoint', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-init-'));
  const { files, weights } = await sourceFiles(dir);
  const common = ['--config', JSON.stringify(TINY), '--steps', '2', '--batch', '4', '--no-eval', '--json'];
  // a timm file with a 10-class head: loaded, head skipped and named, learned pos_embed trains
  let out = path.join(dir, 'a');
  let r = cli([...common, '--init', files.timmHead, '--out', out]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /timm VisionTransformer state_dict: \d+ tensors loaded.*2 skipped/);
  assert.match(r.stderr, /head\.weight \[10, 32\]: skipped: a classifier head/);
  assert.match(r.stderr, /pos_embed: a learned one .*trainable/);
  // it trained from them: the patch embedding moved away from the file's, not from a seeded init
  const enc = readSafetensors(readFileSync(path.join(out, 'encoder.safetensors')));
  const pe = new Float32Array(
    enc.tensors['patch_embed.proj.weight'].bytes.buffer.slice(enc.tensors['patch_embed.proj.weight'].bytes.byteOffset),
  );
  const src = weights.timm['patch_embed.proj.weight'];
  let maxd = 0;
  for (let i = 0; i < src.length; i++) maxd = Math.max(maxd, Math.abs(pe[i] - src[i]));
  assert.ok(maxd > 0 && maxd < 0.05, `patch_embed moved by ${maxd} from the --init weights`);
  assert.ok(JSON.parse(enc.meta.timm_kwargs).embed_dim === 32, 'encoder.safetensors lacks timm_kwargs');
  // strict: the head is an error, nothing trained
  r = cli([...common, '--init', files.timmHead, '--init-strict', '--out', path.join(dir, 'b')]);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /init-strict.*head\.weight/s);
  // without a head, strict passes; lightly's layout too (sin-cos pos_embed stays frozen)
  r = cli([...common, '--init', files.timmNoHead, '--init-strict', '--out', path.join(dir, 'c')]);
  assert.equal(r.status, 0, r.stderr);
  r = cli([...common, '--init', files.lightly, '--init-strict', '--out', path.join(dir, 'd')]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /lightly MaskedVisionTransformerTIMM.*0 skipped/);
  assert.match(r.stderr, /pos_embed: lightly's sin-cos table, frozen/);
  // vitrine: a checkpoint of the first run, and its encoder file
  r = cli([
    ...common,
    '--init',
    path.join(out, 'checkpoint.safetensors'),
    '--init-strict',
    '--out',
    path.join(dir, 'e'),
  ]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /vitrine training checkpoint/);
  r = cli([...common, '--init', path.join(out, 'encoder.safetensors'), '--init-strict', '--out', path.join(dir, 'f')]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /vitrine encoder \(timm keys\)/);
  // --init with --resume is refused
  r = cli(['--resume', path.join(out, 'checkpoint.safetensors'), '--init', files.lightly]);
  assert.equal(r.status, 2);
});

test('createModel(name, options) as timm.create_model; Model.loadWeights and the normalisation it sets', async () => {
  const vt = await engine('simd');
  const m = vt.createModel('vit_tiny_patch16_224', { numClasses: 5, imgSize: 112, global_pool: 'avg' });
  const shape = (n) => m.params().find((p) => p.name === n).shape;
  assert.deepEqual([m.dims.img, m.dims.patch, m.dims.dim, m.arch], [112, 16, 192, 'vit_tiny_patch16_224']);
  assert.deepEqual(
    [shape('head.weight'), shape('pos_embed'), shape('fc_norm.weight')],
    [[5, 192], [1, 50, 192], [192]],
  );
  assert.deepEqual(m.normalization.mean, [0.5, 0.5, 0.5]); // timm's pretrained_cfg of the architecture
  assert.throws(() => vt.createModel('vit_tiny_patch16_224', { numClasses: -1 }), /num_classes/);
  // as timm.create_model(name): a 1000-class head unless num_classes says otherwise (0: none)
  for (const [opts, head] of [
    [{}, [1000, 192]],
    [{ numClasses: 0 }, null],
    [{ num_classes: 7 }, [7, 192]],
  ]) {
    const t = vt.createModel('vit_tiny_patch16_224', { imgSize: 32, ...opts });
    assert.deepEqual(t.params().find((p) => p.name === 'head.weight')?.shape ?? null, head, JSON.stringify(opts));
    t.dispose();
  }
  assert.throws(() => vt.createModel('vit_huge_patch99', {}), /unknown preset 'vit_huge_patch99'/);
  // weights of another size and their own pretrained_cfg; saved again with the normalisation
  const src = vt.createModel('vit_tiny_patch16_224', { imgSize: 64 });
  src.initWeights(3);
  const bytes = withMetadata(src.saveSafetensors(), {
    pretrained_cfg: JSON.stringify({ mean: [0.2, 0.3, 0.4], std: [0.5, 0.6, 0.7] }),
  });
  const r = await m.loadWeights(bytes);
  assert.equal(r.resampled, 1, r.notes.join('\n')); // pos_embed 4x4 -> 7x7
  assert.deepEqual(r.normalization.mean, [0.2, 0.3, 0.4]);
  assert.deepEqual(JSON.parse(readSafetensorsMeta(m.saveSafetensors()).pretrained_cfg), {
    mean: [0.2, 0.3, 0.4],
    std: [0.5, 0.6, 0.7],
    input_size: [3, 112, 112],
  });
  assert.deepEqual((await m.loadWeights(bytes, { mean: [0.1], std: [0.9] })).normalization.mean, [0.1]);
  await assert.rejects(
    m.loadWeights(new TextEncoder().encode('not weights at all'), {}),
    /the weights: not a safetensors file/,
  );
  await assert.rejects(
    m.loadWeights(withMetadata(bytes, { pretrained_cfg: '{"mean": [1, 2], "std": [1, 1]}' })),
    /pretrained_cfg mean: \[1,2\] is not 1 or 3/,
  );
  m.dispose();
  src.dispose();
});
