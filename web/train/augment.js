// augment.js: augmentation of training images, the same in Node and in a browser -- its text
// ('none', or a comma list such as 'hflip,rrc:0.08-1', what checkpoints keep), the draws of
// timm's RandomResizedCrop and flip, and vitrine's first flip / shift. Every draw comes from
// (seed, step, slot): nothing to save, a resumed run draws what the straight run drew.
import { channelStats } from '../formats/images.js';
import { DataError } from '../errors.js';
import { hash32, seedWords } from './data-order.js';

const NUM = '(\\d+(?:\\.\\d+)?|\\.\\d+)';
/** Augmentation settings from text: 'none', or a comma list of
 *   hflip[:P]          timm's --hflip: flip horizontally with probability P (default 0.5)
 *   rrc[:A-B[:C-D]]    timm's RandomResizedCrop: a box of A..B of the area (default 0.08-1) and
 *                      aspect ratio C..D (default 0.75-1.3333333), resized to the model's size
 *   flip               horizontal flip, p = 0.5 (vitrine's first augmentation; kept for its runs)
 *   shift:N            translate by -N..N pixels each way, the uncovered border black
 *                      (torchvision's RandomCrop(size, padding=N))
 * Returns { flip, shift, hflip, rrc: { scale: [A, B], ratio: [C, D] } | null }. */
export function parseAugment(text) {
  const a = { flip: false, shift: 0, hflip: 0, rrc: null };
  if (text === 'none') return a;
  const bad = () =>
    new DataError(
      `augment '${text}': use none, or a comma list of hflip[:P], rrc[:A-B[:C-D]] (timm's RandomResizedCrop scale, ratio), flip, shift:N`,
    );
  for (const part of String(text).split(',')) {
    let m;
    if (part === 'flip') a.flip = true;
    else if ((m = /^shift:(\d{1,2})$/.exec(part))) a.shift = Number(m[1]);
    else if ((m = new RegExp(`^hflip(?::${NUM})?$`).exec(part))) {
      a.hflip = m[1] == null ? 0.5 : Number(m[1]);
      if (!(a.hflip > 0 && a.hflip <= 1)) throw bad();
    } else if ((m = new RegExp(`^rrc(?::${NUM}-${NUM}(?::${NUM}-${NUM})?)?$`).exec(part))) {
      const scale = m[1] == null ? [0.08, 1] : [Number(m[1]), Number(m[2])];
      const ratio = m[3] == null ? [0.75, 4 / 3] : [Number(m[3]), Number(m[4])];
      if (!(scale[0] > 0 && scale[0] <= scale[1] && scale[1] <= 1 && ratio[0] > 0 && ratio[0] <= ratio[1])) throw bad();
      a.rrc = { scale, ratio };
    } else throw bad();
  }
  return a;
}
const fmt = (v) => String(Number(v.toPrecision(8)));
/** The canonical text of parseAugment's settings (what checkpoints keep). */
export function augmentText(a) {
  if (!a) return 'none';
  const parts = [];
  if (a.hflip) parts.push(a.hflip === 0.5 ? 'hflip' : `hflip:${fmt(a.hflip)}`);
  if (a.rrc)
    parts.push(`rrc:${fmt(a.rrc.scale[0])}-${fmt(a.rrc.scale[1])}:${fmt(a.rrc.ratio[0])}-${fmt(a.rrc.ratio[1])}`);
  if (a.flip) parts.push('flip');
  if (a.shift) parts.push(`shift:${a.shift}`);
  return parts.length ? parts.join(',') : 'none';
}

/** Augments a normalised batch [B, C, S, S] in place with flip / shift (vitrine's first
 * augmentation, kept bit for bit for its runs). Image j of step `step` draws its flip and shift
 * from hash32(seed, step, j): nothing to save, a resumed run draws the same. The border a shift
 * uncovers is raw pixel 0 (black), normalised as the rest. */
export function augmentBatch(buf, B, chans, size, aug, seed, step, stats = {}) {
  if (!aug || (!aug.flip && !aug.shift)) return buf;
  const [w0, w1] = seedWords(seed),
    px = size * size,
    per = chans * px,
    st = channelStats(chans, stats),
    n = 2 * aug.shift + 1;
  const tmp = new Float32Array(px);
  for (let j = 0; j < B; j++) {
    const h = hash32(w0, w1, step, j),
      flip = aug.flip && (h & 1) === 1;
    const dx = aug.shift ? ((h >>> 1) % n) - aug.shift : 0,
      dy = aug.shift ? ((h >>> 9) % n) - aug.shift : 0;
    if (!flip && !dx && !dy) continue;
    for (let c = 0; c < chans; c++) {
      const img = buf.subarray(j * per + c * px, j * per + (c + 1) * px),
        fill = -st.mean[c] / st.std[c];
      tmp.set(img);
      for (let y = 0; y < size; y++) {
        const sy = y - dy;
        for (let x = 0; x < size; x++) {
          let sx = x - dx;
          if (flip) sx = size - 1 - sx; // flip the shifted image
          img[y * size + x] = sy >= 0 && sy < size && sx >= 0 && sx < size ? tmp[sy * size + sx] : fill;
        }
      }
    }
  }
  return buf;
}

/** torchvision's RandomResizedCrop.get_params with uniform() from our generator: a box of a
 * random area share and aspect ratio (10 tries), else the centre crop within the ratio. */
export function randomResizedCropBox(W, H, { scale, ratio }, uniform) {
  const area = W * H,
    lr = [Math.log(ratio[0]), Math.log(ratio[1])];
  for (let t = 0; t < 10; t++) {
    const target = area * (scale[0] + (scale[1] - scale[0]) * uniform());
    const aspect = Math.exp(lr[0] + (lr[1] - lr[0]) * uniform());
    const w = Math.round(Math.sqrt(target * aspect)),
      h = Math.round(Math.sqrt(target / aspect));
    if (w > 0 && w <= W && h > 0 && h <= H) {
      const y = Math.floor(uniform() * (H - h + 1)),
        x = Math.floor(uniform() * (W - w + 1));
      return { x, y, w, h };
    }
  }
  const r = W / H;
  let w = W,
    h = H;
  if (r < ratio[0]) h = Math.round(W / ratio[0]);
  else if (r > ratio[1]) w = Math.round(H * ratio[1]);
  return { x: Math.floor((W - w) / 2), y: Math.floor((H - h) / 2), w, h };
}

/** An image [chans, size, size] of bytes flipped horizontally (a copy). */
export function flipped(im, chans, size) {
  const out = new Uint8Array(im.length);
  for (let c = 0; c < chans; c++)
    for (let y = 0; y < size; y++) {
      const row = c * size * size + y * size;
      for (let x = 0; x < size; x++) out[row + x] = im[row + size - 1 - x];
    }
  return out;
}
