// visualize.js: pictures of what an MAE / AIM model does -- deterministic masks for showing
// reconstructions, and originals / masked / reconstructions as one RGBA image.
import { toRGBA } from '../formats/images.js';
import { rng32, permutation } from './data-order.js';

/** Deterministic masks for showing reconstructions: MAE idx_keep / idx_mask as lightly's
 * random_token_mask lays them out (class token kept first; as many tokens kept as the engine's
 * training step keeps), AIM a prefix mask (the first quarter of the patches bidirectional). */
export function showMasks(model, batch, maskRatio = 0.75, seed = 7) {
  const { prefix, img, patch } = model.dims,
    N = (img / patch) ** 2,
    L = prefix + N;
  if (model.kind === 'aim') {
    const mask = new Uint8Array(batch * N);
    for (let b = 0; b < batch; b++) for (let j = 0; j < N; j++) mask[b * N + j] = j >= Math.floor(N / 4) ? 1 : 0;
    return { mask };
  }
  const nKeep = model.planTrainStep({ batch, maskRatio }).tokensKept,
    r = rng32(seed);
  const keep = new BigInt64Array(batch * nKeep),
    masked = new BigInt64Array(batch * (L - nKeep));
  for (let b = 0; b < batch; b++) {
    const p = Array.from(permutation(L - 1, r())).map((i) => i + 1);
    keep[b * nKeep] = 0n;
    p.slice(0, nKeep - 1).forEach((v, j) => {
      keep[b * nKeep + 1 + j] = BigInt(v);
    });
    p.slice(nKeep - 1).forEach((v, j) => {
      masked[b * (L - nKeep) + j] = BigInt(v);
    });
  }
  return { idxKeep: keep, idxMask: masked };
}

/** Three rows (original, masked, reconstruction) of `batch` images, each scaled by `zoom`, with
 * `gap` pixels between them: { width, height, data: RGBA Uint8ClampedArray }. */
export function visualizeGrid(model, images, vis, { zoom = 4, gap = 2, stats = {} } = {}) {
  const { img, chans } = model.dims,
    B = vis.shape[0],
    cell = img * zoom;
  const width = B * cell + (B + 1) * gap,
    height = 3 * cell + 4 * gap;
  const data = new Uint8ClampedArray(width * height * 4).fill(255);
  [images, vis.masked, vis.recon].forEach((src, row) => {
    for (let b = 0; b < B; b++) {
      const rgba = toRGBA(src, { chans, img }, b, stats);
      const x0 = gap + b * (cell + gap),
        y0 = gap + row * (cell + gap);
      for (let y = 0; y < cell; y++)
        for (let x = 0; x < cell; x++) {
          const s = 4 * (Math.floor(y / zoom) * img + Math.floor(x / zoom)),
            d = 4 * ((y0 + y) * width + x0 + x);
          data[d] = rgba[s];
          data[d + 1] = rgba[s + 1];
          data[d + 2] = rgba[s + 2];
          data[d + 3] = 255;
        }
    }
  });
  return { width, height, data };
}
