// data-order.js: the order a run sees its images in, and the seeded generator it and augmentation
// draw from (a generator of our own: the same bits in every JS engine). Nothing to save: the step
// count gives the cursor, so a resumed run sees what the straight run saw.

/** splitmix32-style hash of 32-bit words -> uint32. */
export function hash32(...words) {
  let h = 0x9e3779b9;
  for (const w of words) {
    h = (h + (w >>> 0)) >>> 0;
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35) >>> 0;
    h = (h ^ (h >>> 16)) >>> 0;
  }
  return h;
}
/** mulberry32: () -> uint32. */
export function rng32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}
export const seedWords = (seed) => {
  const s = BigInt(seed);
  return [Number(s & 0xffffffffn), Number((s >> 32n) & 0xffffffffn)];
};

/** A seeded permutation of 0..n-1 (Fisher-Yates). */
export function permutation(n, seed) {
  const p = new Int32Array(n);
  for (let i = 0; i < n; i++) p[i] = i;
  const r = rng32(seed);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor((r() / 4294967296) * (i + 1));
    const t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  return p;
}

/** The order images are seen in: epoch e is permutation(n, hash(seed, e)); the image at global
 * position q (step s, slot j: q = s * batch + j) is perm(q / n)[q % n]. Nothing else to save:
 * the step count gives the cursor. */
export class DataOrder {
  constructor(n, seed) {
    if (!(n > 0)) throw new Error('DataOrder: no images');
    this.n = n;
    this.seed = String(seed);
    this._w = seedWords(seed);
    this._epoch = -1;
    this._perm = null;
  }
  at(q) {
    const e = Math.floor(q / this.n);
    if (e !== this._epoch) {
      this._perm = permutation(this.n, hash32(this._w[0], this._w[1], e));
      this._epoch = e;
    }
    return this._perm[q % this.n];
  }
  batch(step, B) {
    const out = new Int32Array(B);
    for (let j = 0; j < B; j++) out[j] = this.at(step * B + j);
    return out;
  }
}
