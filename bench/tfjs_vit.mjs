// tfjs_vit.mjs: the TensorFlow.js side of bench/run.mjs -- the same ViT training step as
// bench/torch_vit.py and bench/train_bench.c ("encode"), in Node, one thread, on TF.js's cpu
// backend (plain JS) and its wasm backend (XNNPACK, SIMD build, threads off).
// The model is timm's VisionTransformer in tf ops: patch embedding as im2col (reshape/transpose)
// + matMul (= the 16x16 stride-16 Conv2d), class token, pos_embed, pre-norm blocks (LayerNorm eps
// 1e-6 via moments, fused qkv, softmax(q k^T / sqrt(hd)) v, proj, fc1 -> exact GELU (erf) -> fc2),
// final LayerNorm. Step: forward, gradients of sum(out * G) (= backward of upstream gradient G,
// normal * 1e-3) by tf.variableGrads, AdamW written out in tf ops (TF.js has no AdamW).
// Where a backend lacks a kernel the step needs, the run says which ("Kernel 'Erf' not registered
// for backend 'wasm'") and, for GELU, runs once more with the tanh approximation, labelled.
//   node bench/tfjs_vit.mjs --backend cpu|wasm [--preset NAME] [--batch B] [--repeat R]
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);
const tf = require('@tensorflow/tfjs');
const wasmBackend = require('@tensorflow/tfjs-backend-wasm');

const PRESETS = { vit_tiny_patch16_224: [192, 12, 3], vit_small_patch16_224: [384, 12, 6] };
const args = process.argv.slice(2);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : def; };
const backend = opt('--backend', 'wasm');
const preset = opt('--preset', 'vit_tiny_patch16_224');
const B = Number(opt('--batch', 1)), repeat = Number(opt('--repeat', 2)), warmup = Number(opt('--warmup', 1));
const [D, depth, H] = PRESETS[preset];
const hd = D / H, T = 197, N = 196, P = 16;

if (backend === 'wasm') {
  tf.env().set('WASM_HAS_MULTITHREAD_SUPPORT', false); // one thread, as everything else here
  wasmBackend.setWasmPaths(join(dirname(require.resolve('@tensorflow/tfjs-backend-wasm')), '/'));
}
await tf.setBackend(backend);
await tf.ready();

function linear(din, dout) {
  const lim = Math.sqrt(6 / (din + dout));
  return { w: tf.variable(tf.randomUniform([din, dout], -lim, lim)), b: tf.variable(tf.zeros([dout])) };
}
const ln = () => ({ w: tf.variable(tf.ones([D])), b: tf.variable(tf.zeros([D])) });
const params = {
  pe: linear(3 * P * P, D), cls: tf.variable(tf.randomNormal([1, 1, D], 0, 0.02)),
  pos: tf.variable(tf.randomNormal([1, T, D], 0, 0.02)), norm: ln(),
  blocks: Array.from({ length: depth }, () => ({
    n1: ln(), qkv: linear(D, 3 * D), proj: linear(D, D), n2: ln(), fc1: linear(D, 4 * D), fc2: linear(4 * D, D),
  })),
};
const vars = [];
(function collect(o) { for (const v of Object.values(o)) (v instanceof tf.Variable ? vars.push(v) : collect(v)); })(params);

let geluKind = 'erf';
const gelu = (x) => geluKind === 'erf'
  ? tf.mul(tf.mul(x, 0.5), tf.add(1, tf.erf(tf.mul(x, Math.SQRT1_2))))
  : tf.mul(tf.mul(x, 0.5), tf.add(1, tf.tanh(tf.mul(tf.add(x, tf.mul(tf.pow(x, 3), 0.044715)), Math.sqrt(2 / Math.PI)))));
const dense = (x, l) => tf.add(tf.matMul(x, l.w), l.b);
function layerNorm(x, l) {
  const { mean, variance } = tf.moments(x, -1, true);
  return tf.add(tf.mul(tf.mul(tf.sub(x, mean), tf.rsqrt(tf.add(variance, 1e-6))), l.w), l.b);
}
function forward(img) { // img [B, 3, 224, 224] -> [B, 197, D]
  const patches = img.reshape([B, 3, 14, P, 14, P]).transpose([0, 2, 4, 1, 3, 5]).reshape([B * N, 3 * P * P]);
  let x = dense(patches, params.pe).reshape([B, N, D]);
  x = tf.add(tf.concat([tf.tile(params.cls, [B, 1, 1]), x], 1), params.pos).reshape([B * T, D]);
  for (const p of params.blocks) {
    const qkv = dense(layerNorm(x, p.n1), p.qkv).reshape([B, T, 3, H, hd]).transpose([2, 0, 3, 1, 4]);
    const [q, k, v] = tf.unstack(qkv);
    const att = tf.softmax(tf.mul(tf.matMul(q, k, false, true), hd ** -0.5));
    const o = tf.matMul(att, v).transpose([0, 2, 1, 3]).reshape([B * T, D]);
    x = tf.add(x, dense(o, p.proj));
    x = tf.add(x, dense(gelu(dense(layerNorm(x, p.n2), p.fc1)), p.fc2));
  }
  return layerNorm(x, params.norm).reshape([B, T, D]);
}

const state = vars.map((v) => ({ m: tf.variable(tf.zerosLike(v)), v: tf.variable(tf.zerosLike(v)) }));
let t = 0;
function adamw(grads, lr = 1.5e-4, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.05) {
  t++;
  tf.tidy(() => {
    vars.forEach((p, i) => {
      const g = grads[p.name], s = state[i];
      s.m.assign(tf.add(tf.mul(s.m, b1), tf.mul(g, 1 - b1)));
      s.v.assign(tf.add(tf.mul(s.v, b2), tf.mul(tf.square(g), 1 - b2)));
      const mh = tf.div(s.m, 1 - b1 ** t), vh = tf.div(s.v, 1 - b2 ** t);
      const decay = p.shape.length > 1 ? tf.mul(p, 1 - lr * wd) : p;
      p.assign(tf.sub(decay, tf.mul(tf.div(mh, tf.add(tf.sqrt(vh), eps)), lr)));
    });
  });
}

const img = tf.randomNormal([B, 3, 224, 224]), G = tf.mul(tf.randomNormal([B, T, D]), 1e-3);
function step() {
  const { grads } = tf.variableGrads(() => tf.sum(tf.mul(forward(img), G)), vars);
  adamw(grads);
  tf.dispose(grads);
}

const result = { build: `tfjs-${backend}`, model: preset, objective: 'encode', batch: B, policy: 'none', repeat, tfjs: tf.version.tfjs };
for (;;) {
  try {
    const times = [];
    for (let i = 0; i < warmup + repeat; i++) {
      const t0 = performance.now();
      step();
      if (i >= warmup) times.push(performance.now() - t0);
    }
    times.sort((a, b) => a - b);
    const n = times.length, ms = n % 2 ? times[n >> 1] : (times[n / 2 - 1] + times[n / 2]) / 2;
    Object.assign(result, { gelu: geluKind, ms_per_step: +ms.toFixed(3), images_per_s: +(B * 1e3 / ms).toFixed(4) });
    break;
  } catch (e) {
    const m = /Kernel '(\w+)' not registered for backend '(\w+)'/.exec(String(e && e.message));
    if (!m) { result.error = String(e && e.message || e); break; }
    (result.missing_kernels ||= []).push(m[1]);
    if (geluKind === 'erf' && m[1] === 'Erf') { geluKind = 'tanh'; continue; }
    result.error = `kernel '${m[1]}' is missing in the ${backend} backend`;
    break;
  }
}
console.log(JSON.stringify(result));
