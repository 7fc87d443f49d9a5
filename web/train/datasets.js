// datasets.js: what a training run reads, the same code in Node and in a browser (a Worker).
//
// A source is a list of images known up front (their count, labels and class names) and decoded
// when a batch needs them:
//   { name, n, labels: Int32Array | null, classes: string[] | null, itemName(i),
//     native: { size, chans, pixels } | null   (in-memory bytes [n, chans, size, size]),
//     decode(i) -> Promise<{ width, height, chans, data }> (interleaved pixels, chans 1 / 3 / 4) }
// made by openSource from a description that crosses to a worker as it is:
//   { kind: 'pixels', n, chans, size, pixels, labels?, classes?, name? }   typed arrays
//   { kind: 'files', files: File[], labels?, classes? }   a FileList / File[] (browser); with no
//        labels, a file's class is its folder under the one picked (<input webkitdirectory>)
//   { kind: 'urls', urls: string[], labels?, classes? }  fetched and decoded when used
//   { kind: 'images', images: [Blob | ImageBitmap | { width, height, data }], labels?, classes? }
//        images of a page (train() made its elements ImageBitmaps), drawn when used
//   { kind: 'folder', dir }                              Node: sub-folders are classes (data.js)
//   { kind: 'fashion-mnist', split }                     Node: Debian's dataset-fashion-mnist
// Batches turns images of a source into the normalised float batch a model takes: decode ->
// (RandomResizedCrop box | centre crop) -> resize -> channels -> flip -> normalise, the pixel
// pipeline of images.js, with a bounded cache of what was already resized (a folder larger than
// memory trains: nothing is decoded up front). Augmentation is drawn from (seed, step, slot), so a
// resumed run draws what the straight run drew.
import {
  resizeCrop,
  resizeBox,
  makeBatch,
  decodeBlob,
  imagePixels,
  imageHeader,
  checkImageSize,
  imageByteCap,
  DEFAULT_MAX_PIXELS,
  MAX_IMAGE_FILE_BYTES,
} from '../formats/images.js';
import { fetchBytes, URL_TIMEOUT_SECONDS } from '../formats/fetch.js';
import { DataError } from '../errors.js';
import { show } from './options.js';
import { hash32, rng32, seedWords } from './data-order.js';
import { augmentBatch, randomResizedCropBox, flipped } from './augment.js';

const IS_NODE = typeof process !== 'undefined' && !!(process.versions && process.versions.node);
// web/train/node-data.js (Node's files and decoders), never followed by a bundler
const nodeData = () => {
  const p = './node-data.js';
  return import(/* @vite-ignore */ /* webpackIgnore: true */ p);
};

export { DataError };

// ---- labels ----------------------------------------------------------------------------------------

/** labels (any array of class indices, or null) checked against n images and the class names
 * (or, without names, 0..max): Int32Array, or null. */
export function checkLabels(labels, n, classes, what) {
  if (classes != null) checkClassNames(classes, what);
  if (labels == null) return null;
  if (typeof labels.length !== 'number') throw new DataError(`${what}: labels must be an array of class indices`);
  if (labels.length !== n) throw new DataError(`${what}: ${labels.length} labels for ${n} images`);
  const out = new Int32Array(n);
  const C = classes ? classes.length : Infinity;
  for (let i = 0; i < n; i++) {
    const v = labels[i];
    if (!Number.isInteger(v) || v < 0 || v >= C)
      throw new DataError(
        `${what}: labels[${i}] = ${JSON.stringify(v)} is not a class: ${classes ? `there are ${C} (${classes.slice(0, 8).join(', ')}${C > 8 ? ', ...' : ''}): 0..${C - 1}` : 'a whole number >= 0'}`,
      );
    out[i] = v;
  }
  return out;
}
/** Class names: a list of distinct non-empty names (a name given twice would make two classes of
 * one, and a classifier file no reader can trust). */
export function checkClassNames(classes, what) {
  if (!Array.isArray(classes)) throw new DataError(`${what}: classes must be a list of names`);
  const seen = new Set();
  classes.forEach((c, i) => {
    if (typeof c !== 'string' || !c.length || c.length > 200)
      throw new DataError(`${what}: classes[${i}] = ${JSON.stringify(c)} is not a name of 1..200 characters`);
    if (seen.has(c)) throw new DataError(`${what}: the class ${JSON.stringify(c)} is named twice`);
    seen.add(c);
  });
}
const classNames = (labels, classes) =>
  classes || (labels ? Array.from({ length: Math.max(-1, ...labels) + 1 }, (_, i) => String(i)) : null);

// ---- sources -------------------------------------------------------------------------------------

// what: the option that gave the pixels, as messages name it ('data', 'val')
function pixelSource(d, what = 'data') {
  const { n, chans, size } = d,
    per = chans * size * size;
  const px = d.pixels;
  if (!(Number.isInteger(n) && n > 0 && [1, 3].includes(chans) && Number.isInteger(size) && size > 0))
    throw new DataError(
      `${what}: pixels: n ${n}, chans ${chans}, size ${size}: needs n > 0 images of 1 or 3 channels, size > 0`,
    );
  if (!(px instanceof Uint8Array || px instanceof Uint8ClampedArray) || px.length !== n * per)
    throw new DataError(
      `${what}: pixels: ${px && px.length} bytes, [n, chans, size, size] = [${n}, ${chans}, ${size}, ${size}] needs ${n * per} (a Uint8Array)`,
    );
  const labels = checkLabels(d.labels, n, d.classes || null, d.name || what);
  return {
    name: d.name || `${n} images of ${size}x${size}x${chans}`,
    n,
    labels,
    classes: classNames(labels, d.classes),
    itemName: (i) => `image ${i}`,
    native: { size, chans, pixels: px },
    async decode(i) {
      // CHW -> interleaved
      const im = px.subarray(i * per, (i + 1) * per);
      if (chans === 1) return { width: size, height: size, chans: 1, data: im };
      const hw = size * size,
        data = new Uint8Array(per);
      for (let c = 0; c < chans; c++) for (let k = 0; k < hw; k++) data[k * chans + c] = im[c * hw + k];
      return { width: size, height: size, chans, data };
    },
  };
}

// a file's class: its folder under the one picked ('photos/cat/1.jpg' -> 'cat'; path: its
// webkitRelativePath, as the calling thread read it)
function folderClass(path) {
  const parts = String(path || '')
    .split('/')
    .filter(Boolean);
  return parts.length >= 3 ? parts[1] : null;
}

// file i's path: the one the calling thread read (d.paths), else its own
const pathOf = (d, f, i) => (d.paths && d.paths[i]) || f.webkitRelativePath || f.name || '';

function blobSource(items, d, what, fetchOne) {
  const n = items.length;
  if (!n) throw new DataError(`${what}: no images`);
  let labels = d.labels,
    classes = d.classes || null;
  if (labels == null && d.kind === 'files') {
    // classes from the folders of a picked directory
    const cls = items.map((f, i) => folderClass(pathOf(d, f, i)));
    if (cls.every((c) => c != null)) {
      classes = [...new Set(cls)].sort();
      labels = cls.map((c) => classes.indexOf(c));
    }
  }
  labels = checkLabels(labels, n, classes, what);
  const name = (i) =>
    d.kind === 'files' ? pathOf(d, items[i], i) || `file ${i}` : d.kind === 'images' ? `image ${i}` : String(items[i]);
  return {
    name: what,
    n,
    labels,
    classes: classNames(labels, classes),
    itemName: name,
    native: null,
    async decode(i) {
      let im;
      try {
        im = await fetchOne(items[i]);
      } catch (e) {
        // (a URL's reader names the URL already)
        const err = new DataError(e.message.startsWith(`${name(i)}: `) ? e.message : `${name(i)}: ${e.message}`);
        if (e.status === -7) err.aborted = true;
        throw err;
      }
      return { width: im.width, height: im.height, chans: 4, data: im.data };
    },
  };
}

// The megapixel cap from the image's header before it is decoded, in Node and in a browser alike
// (images.js checkImageSize: one message); lim: { maxPixels, raise }.
async function decodeBytes(bytes, lim) {
  if (IS_NODE) return (await nodeData()).decodeImage(bytes, lim);
  return decodeFile(new Blob([bytes]), lim);
}
// A URL's image: read as an untrusted stream (web/formats/fetch.js) -- the run's signal, a stall and
// a total timeout, at most a folder's largest file -- its header checked from its first bytes, so an
// image over the cap is refused before the rest of it comes.
async function fetchImage(url, lim) {
  const peek = (head, loaded) => {
    if (loaded < 65536) return { need: 65536 };
    let h;
    try {
      h = imageHeader(head, { partial: true });
    } catch (e) {
      if (IS_NODE) throw e; // (a browser decodes more than PNG and JPEG: its bitmap's size is checked)
      return null;
    }
    if (!h) return loaded < MAX_IMAGE_FILE_BYTES / 4 ? { need: loaded * 4 } : null;
    return { cap: imageByteCap(checkImageSize(h, lim.maxPixels, lim.raise)) };
  };
  const bytes = await fetchBytes(url, {
    signal: lim.signal,
    stallSeconds: lim.urlStallSeconds,
    timeoutSeconds: lim.urlTimeoutSeconds ?? URL_TIMEOUT_SECONDS.image,
    maxBytes: MAX_IMAGE_FILE_BYTES,
    peek,
  });
  return decodeBytes(bytes, lim);
}
// an image of the page as it crossed to the worker: a Blob (decoded), an ImageBitmap (drawn), pixels
async function decodeImageItem(x, lim) {
  if (typeof Blob !== 'undefined' && x instanceof Blob) return decodeFile(x, lim);
  return imagePixels(x);
}
async function decodeFile(f, lim) {
  try {
    return await decodeBlob(f, lim);
  } catch (e) {
    if (e instanceof DataError) throw e;
    throw new Error('not an image this browser decodes');
  }
}

/** A source from its description (see the top of this file). opts: { maxPixels, onWarning } for
 * folders, { maxPixels, signal, urlStallSeconds, urlTimeoutSeconds } for images read from Files and
 * URLs; what: the option it came from as messages name it ('data', 'val', '--data', ...); raise:
 * how the megapixel limit is raised, in the same words. */
export async function openSource(d, { what = 'data', raise = 'maxPixels raises it', ...opts } = {}) {
  if (!d || typeof d !== 'object') throw new DataError(`${what}: ${show(d)} is not a data description`);
  const lim = {
    maxPixels: opts.maxPixels ?? DEFAULT_MAX_PIXELS,
    raise,
    signal: opts.signal || null,
    urlStallSeconds: opts.urlStallSeconds,
    urlTimeoutSeconds: opts.urlTimeoutSeconds,
  };
  switch (d.kind) {
    case 'pixels':
      return pixelSource(d, what);
    case 'files':
      return blobSource(Array.from(d.files || []), d, `${(d.files || []).length} files`, (f) => decodeFile(f, lim));
    case 'urls':
      return blobSource(Array.from(d.urls || []), d, `${(d.urls || []).length} URLs`, (u) => fetchImage(u, lim));
    case 'images':
      return blobSource(Array.from(d.images || []), d, `${(d.images || []).length} images`, (x) =>
        decodeImageItem(x, lim),
      );
    case 'folder':
    case 'fashion-mnist': {
      if (!IS_NODE)
        throw new DataError(
          `${what}: a ${d.kind === 'folder' ? 'folder path' : 'Fashion-MNIST from disk'} is for Node; in a browser give Files or URLs`,
        );
      const data = await nodeData();
      if (d.kind === 'fashion-mnist')
        return pixelSource({ kind: 'pixels', ...data.loadFashionMNIST(d.split || 'train') }, what);
      const f = data.openImageFolder(d.dir, { ...opts, what: `${what} ${d.dir}`, raise });
      return { ...f, native: null, decode: async (i) => f.decode(i) };
    }
    default:
      throw new DataError(`${what}: unknown kind ${JSON.stringify(d.kind)}`);
  }
}

// ---- splits --------------------------------------------------------------------------------------

/** Train / held-out indices of n images: a fraction f held out, spread evenly (image i is held
 * out when floor((i + 1) f) > floor(i f): f = 0.2 holds out every 5th, i % 5 == 4). */
export function splitFraction(n, f) {
  if (!(f >= 0 && f < 1)) throw new DataError(`val: a fraction in [0, 1), got ${f}`);
  const train = [],
    held = [];
  for (let i = 0; i < n; i++) (Math.floor((i + 1) * f) > Math.floor(i * f) ? held : train).push(i);
  return { train: Int32Array.from(train), val: Int32Array.from(held) };
}

// ---- batches ---------------------------------------------------------------------------------------

export const DEFAULT_CACHE_BYTES = 256 * 1024 * 1024;

/** Images of a source at a model's size, normalised: batch(indices, step) -> Float32Array
 * [B, chans, size, size] (augmented when step is given and augment says so). stats: { mean, std }.
 * What was resized (no random crop) is kept in an LRU cache of cacheBytes; in-memory images
 * already at the model's size are read in place. */
export class Batches {
  constructor(
    source,
    { size, chans, stats = {}, augment = null, augmentSeed = 0n, cacheBytes = DEFAULT_CACHE_BYTES } = {},
  ) {
    this.source = source;
    this.size = size;
    this.chans = chans;
    this.stats = stats;
    this.augment = augment;
    this.augmentSeed = augmentSeed;
    this.cacheBytes = cacheBytes;
    this.per = chans * size * size;
    const nat = source.native;
    this.inPlace = !!(nat && nat.size === size && nat.chans === chans);
    this._cache = new Map();
    this._cached = 0;
    this._decoded = new Map();
    this._decodedBytes = 0;
    this._bytes = null;
  }
  // the model-size bytes [chans, size, size] of image i, centre-cropped
  async _centre(i) {
    const hit = this._cache.get(i);
    if (hit) {
      this._cache.delete(i);
      this._cache.set(i, hit);
      return hit;
    }
    const im = await this._decode(i);
    const out = resizeCrop(im.data, im.width, im.height, im.chans, this.size, this.chans);
    if (this.per <= this.cacheBytes) {
      this._cache.set(i, out);
      this._cached += out.length;
      for (const [k, v] of this._cache) {
        if (this._cached <= this.cacheBytes) break;
        this._cache.delete(k);
        this._cached -= v.length;
      }
    }
    return out;
  }
  // a decoded image; small ones kept (a random crop is drawn from the whole image every time)
  async _decode(i) {
    const hit = this._decoded.get(i);
    if (hit) return hit;
    const im = await this.source.decode(i);
    if (!(im.width > 0 && im.height > 0))
      throw new DataError(`${this.source.itemName(i)}: an empty ${im.width}x${im.height} image`);
    if (this.augment && this.augment.rrc && im.data.length <= this.cacheBytes / 64) {
      this._decoded.set(i, im);
      this._decodedBytes += im.data.length;
      for (const [k, v] of this._decoded) {
        if (this._decodedBytes <= this.cacheBytes / 4) break;
        this._decoded.delete(k);
        this._decodedBytes -= v.data.length;
      }
    }
    return im;
  }
  /** The normalised images `indices` (a training step's when `step` is a number: augmented). */
  async batch(indices, step = null, out = null) {
    const B = indices.length,
      per = this.per,
      aug = step == null ? null : this.augment;
    out = out || new Float32Array(B * per);
    const stats = this.stats;
    if (this.inPlace && !(aug && (aug.rrc || aug.hflip))) {
      makeBatch({ chans: this.chans, size: this.size, pixels: this.source.native.pixels }, indices, out, stats);
    } else {
      if (!this._bytes || this._bytes.length < B * per) this._bytes = new Uint8Array(B * per);
      const bytes = this._bytes,
        [w0, w1] = seedWords(this.augmentSeed);
      for (let j = 0; j < B; j++) {
        const i = indices[j];
        let im;
        const draw = aug && (aug.rrc || aug.hflip) ? rng32(hash32(w0, w1, step, j, 0x41554731)) : null; // 'AUG1'
        const uniform = draw && (() => draw() / 4294967296);
        if (aug && aug.rrc) {
          const d = await this._decode(i),
            box = randomResizedCropBox(d.width, d.height, aug.rrc, uniform);
          im = resizeBox(d.data, d.width, d.height, d.chans, box, this.size, this.chans);
        } else if (this.inPlace) {
          im = this.source.native.pixels.subarray(i * per, (i + 1) * per);
        } else {
          im = await this._centre(i);
        }
        if (aug && aug.hflip && uniform() < aug.hflip) im = flipped(im, this.chans, this.size);
        bytes.set(im, j * per);
      }
      makeBatch(
        { chans: this.chans, size: this.size, pixels: bytes },
        Int32Array.from({ length: B }, (_, j) => j),
        out,
        stats,
      );
    }
    if (aug) augmentBatch(out, B, this.chans, this.size, aug, this.augmentSeed, step, stats);
    return out;
  }
}
