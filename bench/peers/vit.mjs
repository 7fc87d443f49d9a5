// peers/vit.mjs: what the peers of the ViT classifier step (bench/tfjs_vit.mjs, bench/jaxjs_vit.mjs,
// bench/jaxjs_webgpu.mjs's page) share, browser and Node alike (no I/O): the model's parameters
// under PyTorch's names and layouts (bench/torch_vit.py's state_dict), deterministic weights and
// inputs, their layout in the JS peers, and the comparison of a peer's step with PyTorch's
// (peers/torch_check.mjs runs it) under the parity rule of ../shared/docs/parity-format.md: per
// tensor err = max|ours - expect| / max|expect| <= 1e-4, expect = PyTorch in float64, with
// PyTorch's own float32 error (torch32_err) beside it.
import { readSafetensorsHeader } from '../../web/formats/safetensors.js';

export const PRESETS = { vit_tiny_patch16_224: [192, 12, 3], vit_small_patch16_224: [384, 12, 6] };
export const IMG = 224,
  P = 16,
  N = 196,
  T = 197,
  CLASSES = 1000;
/** AdamW as every peer runs it (vitrine's trainStepLabels, torch.optim.AdamW). */
export const ADAMW = { lr: 1.5e-4, b1: 0.9, b2: 0.95, eps: 1e-8, wd: 0.05 };
/** The parity rule's bound (../shared/docs/parity-format.md). */
export const PARITY = 1e-4;

/** The parameters in torch_vit.py's state_dict order: [key, torch shape, init]. init: ['normal',
 * std] or ['one+normal', std] (a LayerNorm weight). Biases and LayerNorm shifts are not zero, so
 * that a peer that drops one is caught by the check. */
export function paramSpec(D, depth) {
  const lin = (name, dout, din, std = 0.02) => [
    [`${name}.weight`, [dout, din], ['normal', std]],
    [`${name}.bias`, [dout], ['normal', 0.02]],
  ];
  const ln = (name) => [
    [`${name}.weight`, [D], ['one+normal', 0.1]],
    [`${name}.bias`, [D], ['normal', 0.02]],
  ];
  const spec = [
    ['patch_embed.weight', [D, 3, P, P], ['normal', 0.02]],
    ['patch_embed.bias', [D], ['normal', 0.02]],
    ['cls_token', [1, 1, D], ['normal', 0.02]],
    ['pos_embed', [1, T, D], ['normal', 0.02]],
  ];
  for (let i = 0; i < depth; i++)
    spec.push(
      ...ln(`blocks.${i}.norm1`),
      ...lin(`blocks.${i}.attn.qkv`, 3 * D, D, 0.06), // wider than timm's 0.02: attention not uniform
      ...lin(`blocks.${i}.attn.proj`, D, D),
      ...ln(`blocks.${i}.norm2`),
      ...lin(`blocks.${i}.fc1`, 4 * D, D),
      ...lin(`blocks.${i}.fc2`, D, 4 * D),
    );
  spec.push(...ln('norm'), ...lin('head', CLASSES, D));
  return spec;
}

// mulberry32: a small seeded generator, the same stream in every process
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The weights, torch layouts: Map key -> { shape, data: Float32Array }. */
export function makeWeights(D, depth, seed = 1) {
  const u = rng(seed);
  const normal = () => Math.sqrt(-2 * Math.log(1 - u())) * Math.cos(2 * Math.PI * u());
  const out = new Map();
  for (const [key, shape, [kind, std]] of paramSpec(D, depth)) {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    for (let i = 0; i < data.length; i++) data[i] = (kind === 'one+normal' ? 1 : 0) + std * normal();
    out.set(key, { shape, data });
  }
  return out;
}

/** The inputs of bench/step_bench.mjs --job vit: images a sine pattern, labels (i * 7) % 1000. */
export function makeInputs(B) {
  return {
    images: Float32Array.from({ length: B * 3 * IMG * IMG }, (_, i) => Math.sin(i * 0.37)),
    labels: Int32Array.from({ length: B }, (_, i) => (i * 7) % CLASSES),
  };
}

/** A torch-layout tensor in the JS peers' layout, and back: a Linear's weight [out, in] is [in, out]
 * there (x W), the patch embedding's [D, 3, 16, 16] is [768, D] (the product on im2col rows). */
export function toPeerLayout(key, shape, data) {
  if (key === 'patch_embed.weight')
    return { shape: [3 * P * P, shape[0]], data: transpose2(data, shape[0], 3 * P * P) };
  if (key.endsWith('.weight') && shape.length === 2)
    return { shape: [shape[1], shape[0]], data: transpose2(data, ...shape) };
  return { shape, data };
}
export function fromPeerLayout(key, torchShape, data) {
  if (key === 'patch_embed.weight') return transpose2(data, 3 * P * P, torchShape[0]);
  if (key.endsWith('.weight') && torchShape.length === 2) return transpose2(data, torchShape[1], torchShape[0]);
  return data;
}
function transpose2(a, rows, cols) {
  const o = new Float32Array(a.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) o[c * rows + r] = a[r * cols + c];
  return o;
}

// ---- safetensors bytes (../shared/docs/parity-format.md's format) -------------------------------

const DTYPES = { F32: Float32Array, I64: BigInt64Array };
/** Safetensors bytes of tensors (Map name -> { shape, data: Float32Array or BigInt64Array }) and
 * string metadata. */
export function encodeSafetensors(tensors, metadata = {}) {
  const header = { __metadata__: metadata };
  let off = 0;
  for (const [name, { shape, data }] of tensors) {
    const dtype = Object.keys(DTYPES).find((k) => data instanceof DTYPES[k]);
    header[name] = { dtype, shape, data_offsets: [off, off + data.byteLength] };
    off += data.byteLength;
  }
  let text = JSON.stringify(header); // ASCII: names and numbers
  while ((8 + text.length) % 8) text += ' ';
  const out = new Uint8Array(8 + text.length + off);
  new DataView(out.buffer).setBigUint64(0, BigInt(text.length), true);
  out.set(new TextEncoder().encode(text), 8);
  let at = 8 + text.length;
  for (const [, { data }] of tensors) {
    out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), at);
    at += data.byteLength;
  }
  return out;
}
/** A torch_vit.py key as timm's VisionTransformer (and so vitrine's initFrom) names it. */
export const timmKey = (key) => key.replace(/^patch_embed\./, 'patch_embed.proj.').replace(/\.(fc[12])\./, '.mlp.$1.');

// ---- the comparison with PyTorch (its reference: bench/peers/torch_check.mjs) -------------------

/** PyTorch's answer (bench/torch_vit.py --check's safetensors bytes): { losses64, losses32 (both
 * steps' losses), grads64, grads32 (Map torch key -> Float32Array: the first step's gradients in
 * float64 rounded to float32, and PyTorch's float32 ones), torch (its version) }. */
export function referenceOf(bytes) {
  const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  const { length: n, header } = readSafetensorsHeader(u8);
  const grads = (side) => {
    const out = new Map();
    for (const [name, e] of Object.entries(header)) {
      if (!name.startsWith(`${side}/grad/`)) continue;
      if (e.dtype !== 'F32') throw new Error(`${name}: ${e.dtype}, not F32`);
      const [a, b] = e.data_offsets;
      // a copy (Uint8Array's slice: a Node Buffer's own slice is a view of its whole pool)
      const copy = Uint8Array.prototype.slice.call(u8, 8 + n + a, 8 + n + b);
      out.set(name.slice(`${side}/grad/`.length), new Float32Array(copy.buffer));
    }
    return out;
  };
  const meta = header.__metadata__ || {};
  return {
    losses64: JSON.parse(meta.losses64),
    losses32: JSON.parse(meta.losses32),
    grads64: grads('expect'),
    grads32: grads('torch32'),
    torch: meta.torch,
  };
}

const maxAbs = (a) => a.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
const errOf = (ours, expect) => {
  let m = 0;
  for (let i = 0; i < expect.length; i++) m = Math.max(m, Math.abs(ours[i] - expect[i]));
  return m / maxAbs(expect);
};
const norm = (a) => Math.sqrt(a.reduce((s, x) => s + x * x, 0));

/** A step's losses (one per step of the reference, from the same weights and inputs) against
 * PyTorch's: [{ step, ours, expect, err, torch32_err }] and the problems (strings). */
export function lossCheck(losses, ref) {
  const rows = ref.losses64.map((expect, i) => ({
    step: i + 1,
    ours: losses[i],
    expect,
    err: Math.abs(losses[i] - expect) / Math.abs(expect),
    torch32_err: Math.abs(ref.losses32[i] - expect) / Math.abs(expect),
  }));
  const problems = rows
    .filter((l) => !(l.err <= PARITY))
    .map((l) => `loss of step ${l.step}: ${l.ours} against PyTorch's ${l.expect} (err ${l.err.toExponential(2)})`);
  return { rows, problems };
}

/** A peer's step against the reference: losses (every step the reference has) and every gradient
 * tensor (torch layout) under the parity rule; the gradient norms beside. { ok, why, losses,
 * grads: [{ key, err, torch32_err, norm, torch_norm }], worst, grad_norm, torch_grad_norm }. */
export function compareWithTorch({ losses, grads }, ref) {
  const { rows: lossRows, problems } = lossCheck(losses, ref);
  const rows = [];
  for (const [key, expect] of ref.grads64) {
    const ours = grads.get(key);
    if (!ours || ours.length !== expect.length) {
      problems.push(`gradient ${key}: ${ours ? `${ours.length} values, PyTorch has ${expect.length}` : 'missing'}`);
      continue;
    }
    rows.push({
      key,
      err: errOf(ours, expect),
      torch32_err: errOf(ref.grads32.get(key), expect),
      norm: norm(ours),
      torch_norm: norm(expect),
    });
  }
  const worst = rows.reduce((w, r) => (!w || !(r.err <= w.err) ? r : w), null);
  for (const r of rows)
    if (!(r.err <= PARITY))
      problems.push(
        `gradient ${r.key}: err ${r.err.toExponential(2)} (norm ${r.norm.toPrecision(6)}, PyTorch's ${r.torch_norm.toPrecision(6)})`,
      );
  const total = (k) => Math.sqrt(rows.reduce((s, r) => s + r[k] * r[k], 0));
  return {
    ok: problems.length === 0,
    why: problems.length ? `${problems.length} disagreement(s) with PyTorch; first: ${problems[0]}` : null,
    rule: `err = max|ours - torch float64| / max|torch float64| <= ${PARITY} per tensor`,
    losses: lossRows,
    worst,
    grad_norm: total('norm'),
    torch_grad_norm: total('torch_norm'),
    torch32_worst: rows.reduce((m, r) => Math.max(m, r.torch32_err), 0),
    grads: rows,
  };
}
