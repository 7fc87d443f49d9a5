// tiny.js: what every app of the package tests trains: a small MAE ViT (16x16 grey, patch 4,
// embed_dim 32, depth 2; decoder dim 32, depth 1) on one fixed synthetic batch, with per-block
// gradient checkpointing. Steps take milliseconds; the loss falls within a few dozen.
export const CONFIG = {
  encoder: { img_size: 16, patch_size: 4, in_chans: 1, embed_dim: 32, depth: 2, num_heads: 2 },
  decoder_dim: 32,
  decoder_depth: 1,
  decoder_heads: 2,
};
export const BATCH = 8;

/** BATCH images, NCHW [8, 1, 16, 16]: stripes of different frequency and phase. */
export function images() {
  const S = CONFIG.encoder.img_size,
    x = new Float32Array(BATCH * S * S);
  for (let b = 0; b < BATCH; b++) {
    for (let i = 0; i < S * S; i++)
      x[b * S * S + i] = Math.sin(((i % S) + (b + 1) * Math.floor(i / S)) * (0.2 + 0.1 * b));
  }
  return x;
}

/** A new model, `steps` training steps on images(); returns the model and the losses. */
export function train(vt, { steps = 30, policy = 'block', seed = 1 } = {}) {
  const model = vt.createModel({ kind: 'mae', config: CONFIG });
  model.initWeights(seed);
  model.setGradCheckpointing(policy);
  model.trainerInit({ lr: 3e-3, warmupSteps: 0, totalSteps: 0, seed });
  const x = images(),
    losses = [];
  for (let i = 0; i < steps; i++) losses.push(model.trainStep(x, BATCH));
  return { model, losses };
}

/** The loss falls: the mean of the last 5 losses is below 0.8 x the mean of the first 5. */
export function falling(losses) {
  const mean = (a) => a.reduce((s, v) => s + v, 0) / a.length;
  return (
    losses.length >= 10 && losses.every(Number.isFinite) && mean(losses.slice(-5)) < 0.8 * mean(losses.slice(0, 5))
  );
}

/** The Trainer's data: 32 grey 16x16 images as bytes [32, 1, 16, 16] (stripes as images() draws). */
export function pixelData() {
  const S = CONFIG.encoder.img_size,
    n = 32,
    pixels = new Uint8Array(n * S * S);
  for (let b = 0; b < n; b++)
    for (let i = 0; i < S * S; i++)
      pixels[b * S * S + i] = Math.round(
        127.5 + 120 * Math.sin(((i % S) + ((b % 8) + 1) * Math.floor(i / S)) * (0.2 + 0.1 * (b % 8))),
      );
  return { pixels, n, size: S, chans: 1 };
}

/** train() -- the package's Trainer, in a worker -- three times: straight (its events), aborted
 * after step 5 then resumed from that checkpoint, paused at step 3 then resumed. What the tests check. */
export async function trainerRuns(train, readSafetensorsHeader) {
  const opts = {
    objective: 'mae',
    config: CONFIG,
    data: pixelData(),
    steps: 24,
    batch: BATCH,
    lr: 3e-3,
    seed: 1,
    policy: 'block',
  };
  const losses = [];
  let memory = null,
    engine = null;
  const straight = await train({
    ...opts,
    onEngine: (e) => {
      engine = e;
    },
    onStep: (e) => {
      losses.push(e.loss);
      memory = memory || e.memory;
    },
  }).done;
  const ac = new AbortController();
  const aborted = await train({
    ...opts,
    signal: ac.signal,
    onStep: (e) => {
      if (e.step === 5) ac.abort();
    },
  }).done;
  const resumed = await train({ data: opts.data, resume: aborted.checkpoint }).done;
  const paused = [];
  const run = train({
    ...opts,
    onStep: (e) => {
      paused.push(e.loss);
      if (e.step === 3) {
        run.pause();
        setTimeout(() => run.resume(), 200);
      }
    },
  });
  const again = await run.done;
  const tensors = (b) => Array.from(b.subarray(8 + readSafetensorsHeader(b).length)).join(',');
  // 4 batches of other images, other masks each step: the loss falls less steadily than on tiny.js's one batch
  const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
  return {
    build: engine.build,
    steps: straight.step,
    losses,
    falling: mean(losses.slice(-5)) < 0.9 * mean(losses.slice(0, 5)),
    memory: !!memory && memory.planned.total > 0 && memory.measured.activations > 0,
    aborted: [aborted.status, aborted.step],
    resumed: [resumed.status, resumed.step, resumed.trained],
    resumeBitForBit: tensors(resumed.checkpoint) === tensors(straight.checkpoint),
    pauseBitForBit:
      tensors(again.checkpoint) === tensors(straight.checkpoint) && paused.every((l, i) => l === losses[i]),
  };
}
