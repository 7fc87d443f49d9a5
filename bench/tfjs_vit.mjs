// tfjs_vit.mjs: the TensorFlow.js side of bench/run.mjs -- the ViT classifier training step of
// bench/step_bench.mjs (--job vit) and bench/torch_vit.py, in Node, one thread, on TF.js's wasm
// backend (XNNPACK, SIMD build, threads off) or its cpu backend (plain JS).
//
// Kept on TF.js's fast path. The wasm backend multiplies with XNNPACK only when both operands are
// plain 2-D matrices with no transpose flag (tfjs-backend-wasm batch_mat_mul_impl.cc: batch 1,
// !transpose_a, !transpose_b); anything else -- a batched product, or the transposed products
// tf.matMul's own gradients ask for (dA = dY B^T, dB = A^T dY) -- falls to a scalar loop there.
// So here: every product is mm(a, b) of two 2-D tensors, its gradient written out with explicit
// tf.transpose (a separate kernel) and plain products again (tf.customGrad); attention runs per
// (image, head) on 2-D slices of the fused qkv matrix, S = q k^T as mm(q, transpose(k)).
// --layout naive runs the obvious version instead (batched tf.matMul with transpose flags and
// tf's own gradients), for the record of what the fast path buys.
//
// The model is timm's VisionTransformer in tf ops: patch embedding as im2col (reshape/transpose)
// + a product (= the 16x16 stride-16 Conv2d), class token, pos_embed, pre-norm blocks (LayerNorm
// eps 1e-6 via moments, fused qkv, softmax(q k^T / sqrt(hd)) v, proj, fc1 -> exact GELU (erf) ->
// fc2), final LayerNorm, [CLS] into a 1000-class head. Step: forward, cross-entropy, gradients by
// tf.variableGrads, AdamW written out in tf ops (TF.js has none). Weights and inputs: those of
// bench/peers/vit.mjs, as bench/jaxjs_vit.mjs's (which checks them against PyTorch).
// --clock cpu times each step by the process's CPU time (bench/lib.mjs clockOf), not wall time.
//   node bench/tfjs_vit.mjs --backend wasm|cpu [--preset NAME] [--batch B] [--steps R] [--layout fast|naive] [--clock wall|cpu]
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { clockOf } from './lib.mjs';
import { CLASSES, PRESETS, makeInputs, makeWeights, toPeerLayout } from './peers/vit.mjs';

const require = createRequire(import.meta.url);
const tf = require('@tensorflow/tfjs');
const wasmBackend = require('@tensorflow/tfjs-backend-wasm');

const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : def;
};
const backend = opt('--backend', 'wasm'),
  layout = opt('--layout', 'fast');
const preset = opt('--preset', 'vit_tiny_patch16_224');
const B = Number(opt('--batch', 1)),
  steps = Number(opt('--steps', 3)),
  warmup = Number(opt('--warmup', 2));
const clockKind = opt('--clock', 'wall'),
  clock = clockOf(clockKind);
const [D, depth, H] = PRESETS[preset];
const hd = D / H,
  T = 197,
  N = 196,
  P = 16;

if (backend === 'wasm') {
  tf.env().set('WASM_HAS_MULTITHREAD_SUPPORT', false); // one thread, as the vitrine and PyTorch runs it is set beside
  wasmBackend.setWasmPaths(join(dirname(require.resolve('@tensorflow/tfjs-backend-wasm')), '/'));
}
await tf.setBackend(backend);
await tf.ready();

// a * b for 2-D a [m,k], b [k,n]; the gradient as plain 2-D products too (see above)
const mmFast = tf.customGrad((a, b, save) => {
  save([a, b]);
  return {
    value: tf.matMul(a, b),
    gradFunc: (dy, [sa, sb]) => [tf.matMul(dy, tf.transpose(sb)), tf.matMul(tf.transpose(sa), dy)],
  };
});
const mm = layout === 'fast' ? (a, b) => mmFast(a, b) : (a, b) => tf.matMul(a, b);

// the weights and inputs every peer starts from (bench/peers/vit.mjs; PyTorch's check uses them too)
const weights = makeWeights(D, depth);
const variable = (key) => {
  const { shape, data } = weights.get(key);
  const t = toPeerLayout(key, shape, data);
  return tf.variable(tf.tensor(t.data, t.shape));
};
const lin = (name) => ({ w: variable(`${name}.weight`), b: variable(`${name}.bias`) });
const params = {
  pe: lin('patch_embed'),
  cls: variable('cls_token'),
  pos: variable('pos_embed'),
  norm: lin('norm'),
  head: lin('head'),
  blocks: Array.from({ length: depth }, (_, i) => ({
    n1: lin(`blocks.${i}.norm1`),
    qkv: lin(`blocks.${i}.attn.qkv`),
    proj: lin(`blocks.${i}.attn.proj`),
    n2: lin(`blocks.${i}.norm2`),
    fc1: lin(`blocks.${i}.fc1`),
    fc2: lin(`blocks.${i}.fc2`),
  })),
};
const vars = [];
(function collect(o) {
  for (const v of Object.values(o)) v instanceof tf.Variable ? vars.push(v) : collect(v);
})(params);

const gelu = (x) => tf.mul(tf.mul(x, 0.5), tf.add(1, tf.erf(tf.mul(x, Math.SQRT1_2))));
const dense = (x, l) => tf.add(mm(x, l.w), l.b); // x [rows, din]
function layerNorm(x, l) {
  const { mean, variance } = tf.moments(x, -1, true);
  return tf.add(tf.mul(tf.mul(tf.sub(x, mean), tf.rsqrt(tf.add(variance, 1e-6))), l.w), l.b);
}
function attention(qkv) {
  // qkv [B*T, 3D] -> [B*T, D]
  if (layout !== 'fast') {
    const [q, k, v] = tf.unstack(qkv.reshape([B, T, 3, H, hd]).transpose([2, 0, 3, 1, 4]));
    const att = tf.softmax(tf.mul(tf.matMul(q, k, false, true), hd ** -0.5));
    return tf
      .matMul(att, v)
      .transpose([0, 2, 1, 3])
      .reshape([B * T, D]);
  }
  const rows = [];
  for (let b = 0; b < B; b++) {
    const heads = [];
    for (let h = 0; h < H; h++) {
      const q = tf.slice(qkv, [b * T, h * hd], [T, hd]),
        k = tf.slice(qkv, [b * T, D + h * hd], [T, hd]);
      const v = tf.slice(qkv, [b * T, 2 * D + h * hd], [T, hd]);
      heads.push(mm(tf.softmax(tf.mul(mm(q, tf.transpose(k)), hd ** -0.5)), v));
    }
    rows.push(tf.concat(heads, 1));
  }
  return tf.concat(rows, 0);
}
function forward(img) {
  // img [B, 3, 224, 224] -> logits [B, CLASSES]
  const patches = img
    .reshape([B, 3, 14, P, 14, P])
    .transpose([0, 2, 4, 1, 3, 5])
    .reshape([B * N, 3 * P * P]);
  let x = dense(patches, params.pe).reshape([B, N, D]);
  x = tf.add(tf.concat([tf.tile(params.cls, [B, 1, 1]), x], 1), params.pos).reshape([B * T, D]);
  for (const p of params.blocks) {
    x = tf.add(x, dense(attention(dense(layerNorm(x, p.n1), p.qkv)), p.proj));
    x = tf.add(x, dense(gelu(dense(layerNorm(x, p.n2), p.fc1)), p.fc2));
  }
  const cls = tf.slice(layerNorm(x, params.norm).reshape([B, T, D]), [0, 0, 0], [B, 1, D]).reshape([B, D]);
  return dense(cls, params.head);
}

const state = vars.map((v) => ({ m: tf.variable(tf.zerosLike(v)), v: tf.variable(tf.zerosLike(v)) }));
let t = 0;
function adamw(grads, lr = 1.5e-4, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.05) {
  t++;
  tf.tidy(() => {
    vars.forEach((p, i) => {
      const g = grads[p.name],
        s = state[i];
      s.m.assign(tf.add(tf.mul(s.m, b1), tf.mul(g, 1 - b1)));
      s.v.assign(tf.add(tf.mul(s.v, b2), tf.mul(tf.square(g), 1 - b2)));
      const mh = tf.div(s.m, 1 - b1 ** t),
        vh = tf.div(s.v, 1 - b2 ** t);
      p.assign(tf.sub(tf.mul(p, 1 - lr * wd), tf.mul(tf.div(mh, tf.add(tf.sqrt(vh), eps)), lr)));
    });
  });
}

const inputs = makeInputs(B);
const img = tf.tensor(inputs.images, [B, 3, 224, 224]);
const labels = tf.oneHot(tf.tensor1d(inputs.labels, 'int32'), CLASSES);
function step() {
  const { grads } = tf.variableGrads(() => tf.losses.softmaxCrossEntropy(labels, forward(img)), vars);
  adamw(grads);
  tf.dispose(grads);
}

const result = {
  build: `tfjs-${backend}`,
  layout,
  model: preset,
  objective: 'classify',
  batch: B,
  tfjs: tf.version.tfjs,
  threads: 1,
  clock: clockKind,
};
try {
  const times = [];
  for (let i = 0; i < warmup + steps; i++) {
    const t0 = clock();
    step();
    if (i >= warmup) times.push(clock() - t0);
  }
  const s = [...times].sort((a, b) => a - b),
    n = s.length;
  Object.assign(result, {
    ms: times.map((x) => +x.toFixed(2)),
    ms_per_step: +(n % 2 ? s[n >> 1] : (s[n / 2 - 1] + s[n / 2]) / 2).toFixed(3),
  });
} catch (e) {
  result.error = String((e && e.message) || e);
}
console.log(JSON.stringify(result));
