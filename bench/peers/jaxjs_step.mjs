// peers/jaxjs_step.mjs: the ViT classifier training step in jax-js (npm @jax-js/jax), on whichever
// device the caller initialised (bench/jaxjs_vit.mjs: Wasm in Node; bench/jaxjs_webgpu.mjs's page:
// WebGPU in Chromium). Browser and Node alike: the caller passes the jax-js module.
//
// timm's VisionTransformer as bench/torch_vit.py writes it (patch embedding as im2col + a product
// (= the 16x16 stride-16 Conv2d), class token, pos_embed, pre-norm blocks: LayerNorm eps 1e-6,
// fused qkv, softmax(q k^T / sqrt(hd)) v, proj, fc1 -> exact GELU -> fc2; final LayerNorm, [CLS]
// into the head), cross-entropy, and AdamW, all one jit(valueAndGrad) program that jax-js's
// compiler fuses. Its vectoriser wants axis lengths that are multiples of 4, so the 197 tokens are
// padded to 200 (zero rows after the position embedding) and the pad keys masked out of attention;
// the pad rows never reach the loss (only [CLS] does), so they add nothing to any gradient.
// Attention: 'sdpa' (nn.dotProductAttention, masked) or 'matmul' (the two products as batched
// matmuls over [B, H, 200, 64]); bench/README.md says which was faster.
//
// jax-js dispatches lazily: a step's loss must be read (item() / await data()) to run it; every
// output of the jitted program shares the same pending work, so reading the loss runs all of it.
import { ADAMW, CLASSES, IMG, N, P, PRESETS, T, fromPeerLayout, toPeerLayout } from './vit.mjs';

/** The step of `preset` (depth blocks; fewer than the preset's for a quick check at the real widths)
 * at batch B on jax's default device, from `weights` (peers/vit.mjs makeWeights) and `inputs`
 * (makeInputs). Returns { step(): the loss (a jax Array, not yet run), grads(): after step 1 the
 * first step's gradients (Map torch key -> Float32Array, torch layout; async), tokens }.
 * maskPad false leaves the pad keys in attention: a wrong step, which the check must refuse. */
export function jaxjsStep(jax, { preset, depth, attention = 'sdpa', weights, inputs, maskPad = true }) {
  const { numpy: np, nn, jit, valueAndGrad, tree } = jax;
  const [D, , H] = PRESETS[preset];
  const B = inputs.labels.length,
    hd = D / H,
    TP = Math.ceil(T / 4) * 4;
  if (!['sdpa', 'matmul'].includes(attention)) throw new Error(`attention: sdpa or matmul, not ${attention}`);

  const dense = (x, l) => np.matmul(x, l.w).add(l.b); // x [rows, din] -> [rows, dout]
  function layerNorm(x, l) {
    const mu = np.mean(x.ref, -1, { keepdims: true });
    const xc = x.sub(mu);
    const v = np.mean(np.square(xc.ref), -1, { keepdims: true });
    return xc
      .mul(np.reciprocal(np.sqrt(v.add(1e-6))))
      .mul(l.w)
      .add(l.b);
  }
  function attend(qkv) {
    // qkv [B*TP, 3D] -> [B*TP, D]; the keys past the T real tokens masked out
    const [q, k, v] = np.split(qkv.reshape([B, TP, 3 * D]), 3, 2).map((a) => a.reshape([B, TP, H, hd]));
    const keep = np
      .arange(TP)
      .less(maskPad ? T : TP)
      .reshape([1, 1, 1, TP]);
    if (attention === 'sdpa') return nn.dotProductAttention(q, k, v, { mask: keep }).reshape([B * TP, D]);
    const heads = (a) => a.transpose([0, 2, 1, 3]); // [B, H, TP, hd]
    const s = np.matmul(heads(q), k.transpose([0, 2, 3, 1])).mul(hd ** -0.5);
    const p = nn.softmax(np.where(keep, s, -Infinity), -1);
    return np
      .matmul(p, heads(v))
      .transpose([0, 2, 1, 3])
      .reshape([B * TP, D]);
  }
  function logits(params, img) {
    // img [B, 3, 224, 224] -> [B, CLASSES]
    const patches = img
      .reshape([B, 3, IMG / P, P, IMG / P, P])
      .transpose([0, 2, 4, 1, 3, 5])
      .reshape([B * N, 3 * P * P]);
    let x = dense(patches, params.pe).reshape([B, N, D]);
    x = np.concatenate([np.broadcastTo(params.cls, [B, 1, D]), x], 1).add(params.pos);
    x = np
      .pad(x, [
        [0, 0],
        [0, TP - T],
        [0, 0],
      ])
      .reshape([B * TP, D]);
    for (const p of params.blocks) {
      x = x.ref.add(dense(attend(dense(layerNorm(x, p.n1), p.qkv)), p.proj));
      const h = nn.gelu(dense(layerNorm(x.ref, p.n2), p.fc1), { approximate: false }); // exact (erf), as torch's
      x = x.add(dense(h, p.fc2));
    }
    const cls = x.reshape([B, TP, D]).slice([], 0); // [B, D]: only [CLS] reaches the head
    return dense(layerNorm(cls, params.norm), params.head);
  }
  const lossOf = (params, img, onehot) =>
    np.mean(np.sum(onehot.mul(nn.logSoftmax(logits(params, img), -1)), -1)).mul(-1);

  // [loss, params, m, v] of one step; bc = [1 / (1 - b1^t), 1 / sqrt(1 - b2^t)] of this step
  const { lr, b1, b2, eps, wd } = ADAMW;
  const trainStep = jit((params, m, v, bc, img, onehot) => {
    const [loss, g] = valueAndGrad(lossOf)(tree.ref(params), img, onehot);
    const c1 = bc.ref.slice(0),
      c2 = bc.slice(1);
    const m2 = tree.map((mi, gi) => mi.mul(b1).add(gi.mul(1 - b1)), m, tree.ref(g));
    const v2 = tree.map((vi, gi) => vi.mul(b2).add(np.square(gi).mul(1 - b2)), v, g);
    // torch's AdamW: p (1 - lr wd) - lr c1 m / (sqrt(v) c2 + eps)
    const p2 = tree.map(
      (p, mi, vi) => p.mul(1 - lr * wd).sub(mi.mul(c1.ref).div(np.sqrt(vi).mul(c2.ref).add(eps)).mul(lr)),
      params,
      tree.ref(m2),
      tree.ref(v2),
    );
    c1.dispose();
    c2.dispose();
    return [loss, p2, m2, v2];
  });

  // the params tree, its leaves made by leaf(torch key): once with the arrays, once with the keys
  // (the same order of leaves: the gradients' way back to PyTorch's names)
  const paramTree = (leaf) => {
    const lin = (name) => ({ w: leaf(`${name}.weight`), b: leaf(`${name}.bias`) });
    return {
      pe: lin('patch_embed'),
      cls: leaf('cls_token'),
      pos: leaf('pos_embed'),
      blocks: Array.from({ length: depth }, (_, i) => ({
        n1: lin(`blocks.${i}.norm1`),
        qkv: lin(`blocks.${i}.attn.qkv`),
        proj: lin(`blocks.${i}.attn.proj`),
        n2: lin(`blocks.${i}.norm2`),
        fc1: lin(`blocks.${i}.fc1`),
        fc2: lin(`blocks.${i}.fc2`),
      })),
      norm: lin('norm'),
      head: lin('head'),
    };
  };
  let params = paramTree((key) => {
    const { shape, data } = weights.get(key);
    const t = toPeerLayout(key, shape, data);
    return np.array(t.data).reshape(t.shape);
  });
  const torchKeys = tree.leaves(paramTree((key) => key));
  let m = tree.map((p) => np.zerosLike(p.ref), params);
  let v = tree.map((p) => np.zerosLike(p.ref), params);
  const img = np.array(inputs.images).reshape([B, 3, IMG, IMG]);
  const onehot = np
    .array(Float32Array.from({ length: B * CLASSES }, (_, i) => +(i % CLASSES === inputs.labels[(i / CLASSES) | 0])))
    .reshape([B, CLASSES]);
  let t = 0;
  return {
    tokens: TP,
    step() {
      t++;
      const bc = np.array([1 / (1 - b1 ** t), 1 / Math.sqrt(1 - b2 ** t)]);
      const [loss, p2, m2, v2] = trainStep(params, m, v, bc, img.ref, onehot.ref);
      params = p2;
      m = m2;
      v = v2;
      return loss;
    },
    async grads() {
      // after step 1, m = (1 - b1) g + b1 * 0: the gradients of the very program that is timed
      if (t !== 1) throw new Error('grads(): after the first step only');
      const out = new Map(),
        leaves = tree.leaves(tree.ref(m));
      for (let i = 0; i < leaves.length; i++) {
        const key = torchKeys[i];
        const g = Float32Array.from(await leaves[i].data(), (x) => x / Math.fround(1 - b1)); // data() consumes the reference
        out.set(key, fromPeerLayout(key, weights.get(key).shape, g));
      }
      return out;
    },
  };
}
