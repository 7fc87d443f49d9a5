// teach-worker.js: the engine side of the page's "How checkpointing works" view (teach.js), a module
// Web Worker with an engine of its own, so that nothing here touches the run being trained: the
// recorded step of the page's model under each policy (Model.traceStep, read by the checkpointing
// widget, web/widget/), the step times of every policy measured properly (web/widget/measure.js:
// warm-up, interleaved rounds, the baseline timed twice), and the two lightly bugs run live (an
// AIM block without its mask; frozen preprocessing, with what PyTorch's re-entrant checkpoint
// computed beside vitrine's). Messages in: {id, type, ...}; replies carry the id; {type:
// 'progress', done, total} while measuring.
import { createVitrine, showMasks } from '../web/vitrine.js';
import { modelFor as modelOn, recordPolicies, measureTimes, wave } from '../web/widget/index.js';

let vt = null,
  aborted = false;
const post = (m) => self.postMessage(m);
const yieldNow = () => new Promise((r) => setTimeout(r, 0));
const modelFor = (spec, opts) => modelOn(vt, spec, opts);
const hex = (a) => {
  const u = new Uint32Array(a.buffer, a.byteOffset, a.length);
  let h = 0x811c9dc5;
  for (const v of u) h = Math.imul(h ^ v, 16777619) >>> 0;
  return h.toString(16);
};

const maxAbs = (a) => a.reduce((s, v) => Math.max(s, Math.abs(v)), 0);
const maxDiff = (a, b) => a.reduce((s, v, i) => Math.max(s, Math.abs(v - b[i])), 0);
const grads = (m) =>
  m
    .params()
    .filter((p) => p.grad)
    .map((p) => ({ name: p.name, g: p.grad.slice() }));
const blockOf = (name) => {
  const r = /(?:^|\.)blocks\.(\d+)\./.exec(name);
  return r ? Number(r[1]) : -1;
};
/** The encoder's blocks' gradient norms [depth] (decoder / head blocks left out). */
function blockNorms(gs, depth) {
  const s = new Array(depth).fill(0);
  for (const { name, g } of gs) {
    const b = blockOf(name);
    if (b >= 0 && !/decoder|head/.test(name)) for (const v of g) s[b] += v * v;
  }
  return s.map(Math.sqrt);
}

/** lightly #2049: the AIM encoder with and without its prefix-causal mask on the same images and
 * upstream gradient, and with it, plain and checkpointed ('block'). */
function maskDemo({ encoder, batch = 2 }) {
  const m = modelFor(
    { kind: 'aim', config: { encoder: { ...encoder }, head_hidden_dim: 64, head_blocks: 1 } },
    { trainer: false },
  );
  try {
    const { img, chans, patch } = m.dims,
      N = (img / patch) ** 2 + m.dims.prefix,
      x = wave(batch * chans * img * img, 0.113);
    // image b's prefix: its first N/4, N/2, ... tokens attend both ways, the rest causally (lightly's random_prefix_mask)
    const prefix = Array.from({ length: batch }, (_, b) => Math.max(1, Math.floor((N * (b + 1)) / 4)));
    const mask = new Uint8Array(batch * N);
    for (let b = 0; b < batch; b++) for (let j = 0; j < N; j++) mask[b * N + j] = j >= prefix[b] ? 1 : 0;
    const run = (opts, policy) => {
      m.setGradCheckpointing(policy);
      m.zeroGrad();
      const out = m.encode(x, { ...opts, needGrad: true });
      m.backward({ douts: [wave(out.data.length, 0.071, 1)] });
      return { out: out.data, gs: grads(m) };
    };
    const masked = run({ mask, isCausal: true }, 'none');
    const dropped = run({ isCausal: false }, 'none');
    const ckpt = run({ mask, isCausal: true }, 'block');
    const D = m.dims.dim,
      rowMax = (a, b) =>
        Array.from({ length: N }, (_, r) => maxDiff(a.subarray(r * D, (r + 1) * D), b.subarray(r * D, (r + 1) * D)));
    const rows = (a, b) => {
      let n = 0;
      for (let r = 0; r < a.length / D; r++)
        for (let k = 0; k < D; k++)
          if (a[r * D + k] !== b[r * D + k]) {
            n++;
            break;
          }
      return n;
    };
    const gDiff = (A, B) => Math.max(...A.map((p, i) => maxDiff(p.g, B[i].g)));
    const gMax = Math.max(...masked.gs.map((p) => maxAbs(p.g)));
    return {
      N,
      prefix,
      tokens: batch * N,
      D,
      depth: m.dims.depth,
      dropped: {
        outMax: maxDiff(masked.out, dropped.out),
        outScale: maxAbs(masked.out),
        rowsDiffer: rows(masked.out, dropped.out),
        rowMax: rowMax(masked.out, dropped.out),
        gradMax: gDiff(masked.gs, dropped.gs),
        gradScale: gMax,
        norms: blockNorms(dropped.gs, m.dims.depth),
      },
      masked: { norms: blockNorms(masked.gs, m.dims.depth) },
      ckpt: {
        outMax: maxDiff(masked.out, ckpt.out),
        gradMax: gDiff(masked.gs, ckpt.gs),
        outSame: hex(masked.out) === hex(ckpt.out),
        gradSame: masked.gs.every((p, i) => hex(p.g) === hex(ckpt.gs[i].g)),
        tensors: masked.gs.length,
      },
    };
  } finally {
    m.dispose();
  }
}

// the encoder's preprocessing (everything its first block's input is made of) and its blocks, by name
const PRE = /(?:^|\.)(patch_embed\.|cls_token$|reg_token$|pos_embed$|norm_pre\.)/;
const encoderParam = (n) => !/^(decoder|projection_head|prediction_head|head)\b|(^|\.)decoder\./.test(n);

/** Frozen preprocessing (lightly's case): the encoder's preprocessing frozen (patch embedding, class
 * token; the positions are fixed anyway), one loss forward + backward of the same images three
 * ways: plain ('none'); checkpointed ('block') as vitrine computes it; and what PyTorch's
 * re-entrant checkpoint (use_reentrant=True, timm before 1.0.13) computed. Its rule: a checkpointed
 * segment whose inputs all need no gradient returns outputs that need none either (the block's
 * weights are not inputs of the checkpointed function), so autograd never reaches its weights.
 * With nothing before the first block trainable, that holds for every block in turn: the pre-fix
 * computation is the step with the encoder's blocks left out of the backward (frozen here, in this
 * demonstration's own model: not an option of the library). Every gradient compared by name. */
function frozenDemo({ spec, batch = 4, maskRatio = 0.75 }) {
  const build = () => modelFor(spec, { maskRatio, trainer: false });
  const m = build(),
    bug = build();
  try {
    const names = m.params().map((p) => p.name);
    const pre = names.filter((n) => encoderParam(n) && PRE.test(n) && !/blocks\.\d+\./.test(n));
    const blocks = names.filter((n) => encoderParam(n) && blockOf(n) >= 0);
    for (const model of [m, bug]) pre.forEach((n) => model.setRequiresGrad(n, false));
    // PyTorch's rule, applied block by block: the first block's input needs a gradient only if something trainable made it
    const inputNeedsGrad = pre.some((n) => m.params().find((p) => p.name === n).requiresGrad);
    const lost = inputNeedsGrad ? [] : blocks;
    lost.forEach((n) => bug.setRequiresGrad(n, false));
    const { img, chans } = m.dims,
      x = wave(batch * chans * img * img, 0.21),
      masks = showMasks(m, batch, maskRatio, 7);
    const run = (model, policy) => {
      model.setGradCheckpointing(policy);
      model.zeroGrad();
      const loss = model.loss(x, { ...masks, needGrad: true });
      model.backward();
      return { loss, gs: grads(model) };
    };
    const plain = run(m, 'none'),
      ckpt = run(m, 'block'),
      pre2049 = run(bug, 'block');
    const byName = (gs) => new Map(gs.map((p) => [p.name, p.g]));
    const fixedG = byName(ckpt.gs),
      bugG = byName(pre2049.gs);
    const norm = (g) => Math.sqrt(g.reduce((s, v) => s + v * v, 0));
    // every tensor that trains: its gradient under vitrine's checkpoint and under the pre-fix one
    const tensors = ckpt.gs.map(({ name, g }) => ({
      name,
      block: encoderParam(name) ? blockOf(name) : -1,
      fixed: norm(g),
      bug: bugG.has(name) ? norm(bugG.get(name)) : null, // null: no gradient at all
      same: bugG.has(name) && hex(bugG.get(name)) === hex(g),
    }));
    return {
      frozen: pre,
      frozenCount: m.params().filter((p) => !p.requiresGrad).length,
      trainable: plain.gs.length,
      depth: m.dims.depth,
      loss: plain.loss,
      lossSame:
        Math.fround(plain.loss) === Math.fround(ckpt.loss) && Math.fround(plain.loss) === Math.fround(pre2049.loss),
      inputNeedsGrad,
      plain: blockNorms(plain.gs, m.dims.depth),
      ckpt: blockNorms(ckpt.gs, m.dims.depth),
      same:
        plain.gs.length === ckpt.gs.length &&
        plain.gs.every((p, i) => p.name === ckpt.gs[i].name && hex(p.g) === hex(ckpt.gs[i].g)),
      patchGrad: m
        .params()
        .filter((p) => pre.includes(p.name))
        .some((p) => p.grad),
      tensors,
      differ: tensors.filter((t) => !t.same).map((t) => t.name),
      fixedHas: [...fixedG.keys()].length,
    };
  } finally {
    m.dispose();
    bug.dispose();
  }
}

const handlers = {
  async init() {
    vt = await createVitrine();
    return { build: vt.build, threads: vt.threads, memory: vt.memory().linear };
  },
  traces: (msg) => ({ ...recordPolicies(vt, msg), memory: vt.memory().linear }),
  async times(msg) {
    aborted = false;
    const res = await measureTimes(vt, msg, {
      onStep: async (done, total) => {
        post({ type: 'progress', done, total });
        await yieldNow();
      },
      stopped: () => aborted,
    });
    return { ...res, threads: vt.threads };
  },
  maskDemo,
  frozenDemo,
  memory: () => ({ linear: vt.memory().linear }),
};

let chain = Promise.resolve();
self.onmessage = (e) => {
  const msg = e.data;
  if (msg.type === 'abort') {
    aborted = true;
    return;
  } // outside the queue: it stops the measurement in flight
  chain = chain.then(async () => {
    try {
      const h = handlers[msg.type];
      if (!h) throw new Error(`unknown message ${msg.type}`);
      post({ id: msg.id, ok: true, result: await h(msg) });
    } catch (err) {
      post({ id: msg.id, ok: false, error: err && err.message ? err.message : String(err) });
    }
  });
};
