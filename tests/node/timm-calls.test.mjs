// timm-calls.test.mjs: timm's calls through the JS API (web/runtime/model.js) against the dumps of
// the real timm in tests/parity: images of another size for a dynamic_img_size model
// (timmForward / encode with height, width), DeiT's two heads (timmForward with distilledTraining),
// timm's own forward_intermediates (timmForwardIntermediates: indices, norm, prefix tokens,
// stop_early, NCHW / NLC, intermediates only) with its backward; their plans; and DeiT-distilled
// trained by train() with both heads in the loss, predicting with the heads averaged.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { train } from '../../web/vitrine.js';
import { REPO, engine, readSafetensors, f32, relErr } from './util.mjs';

const dump = (name) => readSafetensors(readFileSync(path.join(REPO, 'tests/parity', `${name}.safetensors`)));

// the model of a dump, its weights loaded (the dump's param/ tensors)
async function modelOf(name) {
  const vt = await engine('simd');
  const { meta, tensors } = dump(name);
  const m = vt.createModel({ kind: 'timm', config: meta.config });
  m.loadSafetensors(readFileSync(path.join(REPO, 'tests/parity', `${name}.safetensors`)), { filePrefix: 'param/' });
  return { m, meta, tensors, call: JSON.parse(meta.call), images: tensors['input/images'] };
}
const close = (got, want, what) => {
  const e = relErr(got.data, f32(want));
  assert.deepEqual(got.shape, want.shape, `${what}: shape`);
  assert.ok(e <= 1e-4, `${what}: err ${e}`);
  return e;
};

test('images of another size: dynamic_img_size models take them (timmForward, encode), others refuse them', async () => {
  for (const name of ['dynamic_size_both_axes', 'dynamic_size_one_axis', 'dynamic_size_same_tokens', 'dynamic_pad']) {
    const { m, tensors, call, images } = await modelOf(name);
    try {
      const [, , height, width] = images.shape;
      assert.ok(m.dims.dynamic, name);
      const opts = { height, width, batch: images.shape[0] };
      const out = call.fn === 'forward' ? m.timmForward(f32(images), opts) : m.encode(f32(images), opts);
      close(out, tensors['expect/out'], name);
      // its plan is the call's (planned == the arena's peak)
      const fn = call.fn === 'forward' ? 'timm_forward' : 'encode';
      assert.equal(
        m.memory().planned.activations,
        m.plan(fn, { batch: 2, height, width, needGrad: false }).activations,
      );
      assert.equal(m.memory().arena.peak, m.memory().planned.activations, `${name}: planned == peak`);
    } finally {
      m.dispose();
    }
  }
  const { m } = await modelOf('deit_b16');
  try {
    const { chans, img } = m.dims;
    assert.throws(
      () => m.timmForward(new Float32Array(chans * (img + 4) * img), { height: img + 4, width: img }),
      /dynamic_img_size/,
    );
    assert.throws(() => m.timmForward(new Float32Array(10), { height: 2.5 }), /height: 2\.5 is not an image size/);
    assert.throws(
      () => m.timmForward(new Float32Array(chans * 9 * 7 + 1), { height: 9, width: 7 }),
      /not a positive multiple of C\*H\*W/,
    );
  } finally {
    m.dispose();
  }
});

test("DeiT distilled: timmForward averages the two heads; distilledTraining returns both, timm's", async () => {
  const t = await modelOf('deit_distilled_training');
  try {
    const [head, dist] = t.m.timmForward(f32(t.images), { distilledTraining: true });
    close(head, t.tensors['expect/out'], 'head');
    close(dist, t.tensors['expect/out_dist'], 'head_dist');
    const avg = t.m.timmForward(f32(t.images));
    for (let i = 0; i < avg.data.length; i++)
      assert.equal(avg.data[i], Math.fround(0.5 * head.data[i] + 0.5 * dist.data[i]), `average ${i}`);
  } finally {
    t.m.dispose();
  }
  const e = await modelOf('deit_distilled_eval');
  try {
    close(e.m.timmForward(f32(e.images)), e.tensors['expect/out'], 'eval');
  } finally {
    e.m.dispose();
  }
});

test("timm's own forward_intermediates through timmForwardIntermediates, forward and backward, every tests/parity file of it", async () => {
  const names = readdirNames().filter((n) => n.startsWith('timm_inter_'));
  assert.ok(names.length >= 9);
  for (const name of names) {
    const { m, tensors, call, images } = await modelOf(name);
    try {
      const [, , height, width] = images.shape;
      const opts = {
        indices: call.indices ?? null,
        norm: call.norm ?? false,
        returnPrefixTokens: call.return_prefix_tokens ?? false,
        stopEarly: call.stop_early ?? false,
        outputFmt: call.output_fmt ?? 'NCHW',
        intermediatesOnly: call.intermediates_only ?? false,
        height,
        width,
        needGrad: true,
      };
      const r = m.timmForwardIntermediates(f32(images), opts);
      const outs = [
        ...(r.out ? [['out', r.out]] : []),
        ...r.intermediates.map((x, k) => [`intermediates.${k}`, x]),
        ...(r.prefixTokens || []).map((x, k) => [`intermediates_prefix.${k}`, x]),
      ];
      assert.deepEqual(
        outs.map(([k]) => k).sort(),
        Object.keys(tensors)
          .filter((k) => k.startsWith('expect/') && !k.startsWith('expect/grad/'))
          .map((k) => k.slice(7))
          .sort(),
        name,
      );
      for (const [k, x] of outs) close(x, tensors[`expect/${k}`], `${name} ${k}`);
      // the backward with the file's upstream gradients: every parameter's and the images'
      m.zeroGrad();
      const { dimages } = m.backward({ douts: outs.map(([k]) => f32(tensors[`input/dout/${k}`])), inputGrad: true });
      close({ data: dimages, shape: images.shape }, tensors['expect/grad/input/images'], `${name} d images`);
      for (const p of m.params())
        if (p.grad)
          close({ data: p.grad.slice(), shape: p.shape }, tensors[`expect/grad/${p.name}`], `${name} ${p.name}`);
      assert.equal(m.memory().arena.peak, m.memory().planned.activations, `${name}: planned == peak`);
    } finally {
      m.dispose();
    }
  }
  const { m } = await modelOf('timm_inter_default');
  try {
    const x = new Float32Array(2 * m.dims.chans * m.dims.img * m.dims.width);
    assert.throws(() => m.timmForwardIntermediates(x, { indices: 3 }), /last-n \(3\) is out of range \(1 to 2\)/);
    assert.throws(
      () => m.timmForwardIntermediates(x, { indices: [0, 5] }),
      /feature index 5 is out of range \(0 to 1\)/,
    );
    assert.throws(() => m.timmForwardIntermediates(x, { outputFmt: 'NHWC' }), /outputFmt: 'NHWC' \(NCHW or NLC\)/);
    assert.throws(() => m.timmForwardIntermediates(x, { norm: 1 }), /norm: true or false/);
  } finally {
    m.dispose();
  }
});

function readdirNames() {
  return readdirSync(path.join(REPO, 'tests/parity'))
    .filter((f) => f.endsWith('.safetensors'))
    .map((f) => f.slice(0, -12))
    .sort();
}

test('train(): a DeiT distilled classifier trains both heads and predicts with them averaged', async () => {
  const px = new Uint8Array(8 * 32 * 32 * 3).map((_, i) => (i % 96 < 48 === (((i / 3072) | 0) % 2 === 0) ? 200 : 40));
  const data = { pixels: px, n: 8, size: 32, chans: 3, labels: [0, 1, 0, 1, 0, 1, 0, 1], classes: ['a', 'b'] };
  const run = train({
    objective: 'classify',
    model: 'deit_tiny_distilled_patch16_224',
    imgSize: 32,
    data,
    val: 0,
    steps: 3,
    batch: 4,
    wasm: 'simd',
    threads: 1,
  });
  const res = await run.done;
  assert.equal(res.status, 'done');
  assert.ok(Number.isFinite(res.lossLast));
  const [top] = await run.predict({ width: 32, height: 32, data: new Uint8ClampedArray(32 * 32 * 4).fill(200) });
  assert.equal(top.length, 2);
  assert.ok(Math.abs(top[0].p + top[1].p - 1) < 1e-5);
  run.dispose();
});
