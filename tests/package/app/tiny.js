// tiny.js: what every app of the package tests trains: a small MAE ViT (16x16 grey, patch 4,
// embed_dim 32, depth 2; decoder dim 32, depth 1) on one fixed synthetic batch, with per-block
// gradient checkpointing. Steps take milliseconds; the loss falls within a few dozen.
export const CONFIG = {
  encoder: { img_size: 16, patch_size: 4, in_chans: 1, embed_dim: 32, depth: 2, num_heads: 2 },
  decoder_dim: 32, decoder_depth: 1, decoder_heads: 2,
};
export const BATCH = 8;

/** BATCH images, NCHW [8, 1, 16, 16]: stripes of different frequency and phase. */
export function images() {
  const S = CONFIG.encoder.img_size, x = new Float32Array(BATCH * S * S);
  for (let b = 0; b < BATCH; b++) {
    for (let i = 0; i < S * S; i++) x[b * S * S + i] = Math.sin(((i % S) + (b + 1) * Math.floor(i / S)) * (0.2 + 0.1 * b));
  }
  return x;
}

/** A new model, `steps` training steps on images(); returns the model and the losses. */
export function train(vt, { steps = 30, policy = 'block', seed = 1 } = {}) {
  const model = vt.createModel({ kind: 'mae', config: CONFIG });
  model.initWeights(seed);
  model.setGradCheckpointing(policy);
  model.trainerInit({ lr: 3e-3, warmupSteps: 0, totalSteps: 0, seed });
  const x = images(), losses = [];
  for (let i = 0; i < steps; i++) losses.push(model.trainStep(x, BATCH));
  return { model, losses };
}

/** The loss falls: the mean of the last 5 losses is below 0.8 x the mean of the first 5. */
export function falling(losses) {
  const mean = (a) => a.reduce((s, v) => s + v, 0) / a.length;
  return losses.length >= 10 && losses.every(Number.isFinite) && mean(losses.slice(-5)) < 0.8 * mean(losses.slice(0, 5));
}
