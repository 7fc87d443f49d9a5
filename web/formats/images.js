// images.js: the one pixel pipeline, the same code in Node and in the browser:
//   decode -> resize (shorter side to the model's size) -> centre crop -> channels -> normalise
// Decoding is the platform's: in Node web/train/node-data.js's decodeImage (pngjs / jpeg-js behind header
// checks), in a browser decodeBlob here (createImageBitmap without colour conversion or
// premultiplication, read back through a canvas). Everything after it is this file, so a model
// trained in Node sees the pixels the tab predicts on (tests/browser/pixels.test.mjs: the same
// PNG and JPEG bytes through Node and through Chromium). No I/O, no Node modules.
//
// Against torchvision's Resize(size) + CenterCrop(size) + ToTensor() + Normalize(mean, std) on a
// PIL image (what timm's eval transform does with crop_pct 1), it differs exactly here:
//   - the long side: torchvision int(size * long / short) (truncated), here Math.round(long * size / short);
//   - the crop offset: torchvision int(round((resized - size) / 2)) (Python rounds half to even),
//     here floor((resized - size) / 2): they differ when resized - size is 3 mod 4;
//   - shrinking (antialiasing): PIL's bilinear is a tent filter as wide as two source pixels per
//     output pixel; here an area (box) average over exactly the source interval of the output pixel;
//   - growing: both interpolate bilinearly between pixel centres (align_corners=False), edge pixels
//     repeated; PIL rounds to 8 bits between its horizontal and vertical pass, this keeps floats
//     and rounds once, to bytes, at the end;
//   - grey from colour: (R + G + B) / 3 here, ITU-R 601 luma (0.299 R + 0.587 G + 0.114 B) in PIL's
//     convert('L') and torchvision's Grayscale; colour from grey repeats it in both; alpha is
//     dropped in both (no compositing);
//   - normalise: (v / 255 - mean) / std, computed in double and rounded to float32 once;
//     torchvision rounds each of its float32 operations (a difference of at most an ulp or so).
import { VitrineError, DataError } from '../errors.js';

export const IMAGENET_MEAN = [0.485, 0.456, 0.406];
export const IMAGENET_STD = [0.229, 0.224, 0.225];

/** Per-channel mean / std for a model of `chans` channels (ImageNet's by default; timm's
 * pretrained_cfg gives others). Given 3 values and a 1-channel model, the grey channel (the average
 * of R, G, B) uses the average of the three (ImageNet: mean 0.449, std 0.226); given one value,
 * every channel uses it. */
export function channelStats(chans, { mean = IMAGENET_MEAN, std = IMAGENET_STD } = {}) {
  const avg = (a) => a.reduce((x, y) => x + y, 0) / a.length;
  const pick = (a) =>
    chans === 1 ? [a.length === 1 ? a[0] : avg(a)] : Array.from({ length: chans }, (_, c) => a[c % a.length]);
  return { mean: pick(mean), std: pick(std) };
}

// ---- image headers: sizes before anything is decoded ----------------------------------------

const PNG_MAGIC = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

/** Largest image decoded by default: 40 megapixels (a 160 MB RGBA bitmap; phone photos are 12-48).
 * Checked against the header before anything is decoded; `vitrine train --max-image-mp N` raises it. */
export const DEFAULT_MAX_PIXELS = 40e6;
/** Largest image file read (bytes), checked with fstat before reading. */
export const MAX_IMAGE_FILE_BYTES = 512 * 1024 * 1024;

const be32 = (b, o) => ((b[o] << 24) | (b[o + 1] << 16) | (b[o + 2] << 8) | b[o + 3]) >>> 0;
const be16 = (b, o) => (b[o] << 8) | b[o + 1];

// PNG: bits per pixel of each (colour type -> channels) and the bit depths it allows
const PNG_CHANNELS = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 };
const PNG_DEPTHS = { 0: [1, 2, 4, 8, 16], 2: [8, 16], 3: [1, 2, 4, 8], 4: [8, 16], 6: [8, 16] };

/** { format: 'png' | 'jpeg', width, height } from the first bytes of an image, without decoding
 * it; a header that is not one of a PNG or baseline / progressive JPEG throws a DataError.
 * partial: the bytes are the start of the image only -- null when the header is not in them yet. */
export function imageHeader(bytes, { partial = false } = {}) {
  if (bytes.length >= 8 && PNG_MAGIC.every((v, i) => bytes[i] === v)) {
    if (partial && bytes.length < 33) return null;
    if (bytes.length < 33 || be32(bytes, 8) !== 13 || String.fromCharCode(...bytes.subarray(12, 16)) !== 'IHDR')
      throw new DataError('PNG without its IHDR header');
    const width = be32(bytes, 16),
      height = be32(bytes, 20),
      depth = bytes[24],
      ctype = bytes[25];
    if (
      !(ctype in PNG_CHANNELS) ||
      !PNG_DEPTHS[ctype].includes(depth) ||
      bytes[26] !== 0 ||
      bytes[27] !== 0 ||
      bytes[28] > 1
    )
      throw new DataError(
        `PNG header: colour type ${ctype} / bit depth ${depth} / methods ${bytes[26]} ${bytes[27]} ${bytes[28]} are not valid PNG`,
      );
    return { format: 'png', width, height, depth, ctype, interlace: bytes[28] };
  }
  if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) {
    let o = 2;
    while (o + 4 <= bytes.length) {
      // segments up to the frame header (SOFn)
      if (bytes[o] !== 0xff) throw new DataError(`JPEG: no marker at byte ${o}`);
      const m = bytes[o + 1];
      if (m === 0xff) {
        o++;
        continue;
      } // fill byte
      if ((m >= 0xd0 && m <= 0xd8) || m === 0x01) {
        o += 2;
        continue;
      } // markers without a length
      if (m === 0xda || m === 0xd9) break; // a scan or the end before any frame header
      const len = be16(bytes, o + 2);
      if (len < 2) throw new DataError(`JPEG: segment 0x${m.toString(16)} of length ${len}`);
      if (m >= 0xc0 && m <= 0xcf && m !== 0xc4 && m !== 0xc8 && m !== 0xcc) {
        if (o + 10 > bytes.length) return partial ? null : brokenJpeg();
        return { format: 'jpeg', width: be16(bytes, o + 7), height: be16(bytes, o + 5), components: bytes[o + 9] };
      }
      o += 2 + len;
    }
    if (partial && o + 4 > bytes.length) return null;
    return brokenJpeg();
  }
  if (
    partial &&
    bytes.length < 8 &&
    [PNG_MAGIC, [0xff, 0xd8, 0xff]].some((m) => m.slice(0, bytes.length).every((v, i) => bytes[i] === v))
  )
    return null;
  throw new DataError('not a PNG or JPEG image');
}
const brokenJpeg = () => {
  throw new DataError('JPEG without a frame header (SOF) before its image data');
};

/** The most bytes an image file of header h is read to: 16 bytes a pixel (twice 16-bit RGBA, stored
 * uncompressed) and 16 MiB of other chunks / segments (profiles, EXIF), at most a folder's
 * largest file (MAX_IMAGE_FILE_BYTES). */
export const imageByteCap = (h) => Math.min(MAX_IMAGE_FILE_BYTES, 16 * h.width * h.height + 16 * 2 ** 20);

/** An image's header h checked before anything is decoded: not empty, at most maxPixels
 * (raise: how the caller raises the limit, in its words -- the CLI's flag or the API's option). The
 * same message in Node and in a browser. Returns h. */
export function checkImageSize(h, maxPixels = DEFAULT_MAX_PIXELS, raise = 'maxPixels raises it') {
  if (!(h.width > 0 && h.height > 0)) throw new DataError(`empty image ${h.width}x${h.height}`);
  if (h.width * h.height > maxPixels)
    throw new DataError(
      `${h.width}x${h.height} is ${((h.width * h.height) / 1e6).toFixed(1)} megapixels, more than the limit of ${maxPixels / 1e6} (${raise})`,
    );
  return h;
}

// ---- resize, centre crop, channels ------------------------------------------------------------

// Per-axis resampling taps [source index, weight] from `src` samples to `dst` (after scaling by
// `scale` and skipping `offset` destination samples): area average when shrinking, bilinear when growing.
function axisWeights(src, dst, scale, offset) {
  const out = [];
  for (let o = 0; o < dst; o++) {
    const taps = [];
    if (scale >= 1) {
      // area: the source interval [a, b) of output pixel o
      const a = (o + offset) * scale,
        b = (o + offset + 1) * scale;
      for (let s = Math.floor(a); s < Math.min(src, Math.ceil(b)); s++) {
        const w = Math.min(b, s + 1) - Math.max(a, s);
        if (w > 0) taps.push([s, w / scale]);
      }
    } else {
      // bilinear, pixel centres (align_corners=False)
      const c = (o + offset + 0.5) * scale - 0.5;
      const s0 = Math.floor(c),
        f = c - s0;
      const clamp = (v) => Math.min(src - 1, Math.max(0, v));
      taps.push([clamp(s0), 1 - f], [clamp(s0 + 1), f]);
    }
    out.push(taps);
  }
  return out;
}

// The same taps for a crop box [start, start + len) of a source axis resized to `dst` samples:
// the crop is an image of its own (torchvision's crop, then resize), so bilinear taps are clamped
// to the box.
function boxWeights(start, len, dst) {
  const scale = len / dst,
    out = [];
  for (let o = 0; o < dst; o++) {
    const taps = [];
    if (scale >= 1) {
      const a = start + o * scale,
        b = start + (o + 1) * scale;
      for (let s = Math.floor(a); s < Math.min(start + len, Math.ceil(b)); s++) {
        const w = Math.min(b, s + 1) - Math.max(a, s);
        if (w > 0) taps.push([s, w / scale]);
      }
    } else {
      const c = start + (o + 0.5) * scale - 0.5,
        s0 = Math.floor(c),
        f = c - s0;
      const clamp = (v) => Math.min(start + len - 1, Math.max(start, v));
      taps.push([clamp(s0), 1 - f], [clamp(s0 + 1), f]);
    }
    out.push(taps);
  }
  return out;
}

/** Interleaved pixels (RGBA: srcChans 4, RGB 3, grey 1) of w x h -> Uint8Array [chans, size, size]:
 * the shorter side resized to `size`, the centre `size` x `size` kept, then the model's channels
 * (1: the average (R+G+B)/3; 3 from grey: repeated). */
export function resizeCrop(src, w, h, srcChans, size, chans) {
  if (!(w > 0 && h > 0)) throw new VitrineError(`an empty ${w}x${h} image`, -1);
  const short = Math.min(w, h),
    scale = short / size;
  const rw = Math.round(w / scale),
    rh = Math.round(h / scale); // resized size
  const ox = Math.floor((rw - size) / 2),
    oy = Math.floor((rh - size) / 2);
  return resample(src, w, h, srcChans, axisWeights(w, size, scale, ox), axisWeights(h, size, scale, oy), size, chans);
}

/** The box { x, y, w, h } (whole source pixels) of an image resized to size x size, the model's
 * channels: what RandomResizedCrop does after choosing its box (the same filters as resizeCrop). */
export function resizeBox(src, w, h, srcChans, box, size, chans) {
  if (!(w > 0 && h > 0)) throw new VitrineError(`an empty ${w}x${h} image`, -1);
  if (!(box.w > 0 && box.h > 0 && box.x >= 0 && box.y >= 0 && box.x + box.w <= w && box.y + box.h <= h))
    throw new VitrineError(`crop box ${JSON.stringify(box)} is not inside the ${w}x${h} image`, -1);
  return resample(src, w, h, srcChans, boxWeights(box.x, box.w, size), boxWeights(box.y, box.h, size), size, chans);
}

// The separable resize with the taps of each axis: rows first (into floats), then columns, rounded
// once to bytes; the model's channels taken from the source's.
function resample(src, w, h, srcChans, wx, wy, size, chans) {
  const out = new Uint8Array(chans * size * size);
  const plane = new Float32Array(w * h),
    tmp = new Float32Array(size * h);
  for (let c = 0; c < chans; c++) {
    for (let i = 0; i < w * h; i++) {
      // the source plane for output channel c
      if (srcChans === 1) plane[i] = src[i];
      else if (chans === 1) plane[i] = (src[srcChans * i] + src[srcChans * i + 1] + src[srcChans * i + 2]) / 3;
      else plane[i] = src[srcChans * i + (c % 3)];
    }
    for (let y = 0; y < h; y++)
      for (let x = 0; x < size; x++) {
        let v = 0;
        for (const [s, wt] of wx[x]) v += wt * plane[y * w + s];
        tmp[y * size + x] = v;
      }
    for (let y = 0; y < size; y++)
      for (let x = 0; x < size; x++) {
        let v = 0;
        for (const [s, wt] of wy[y]) v += wt * tmp[s * size + x];
        out[c * size * size + y * size + x] = Math.max(0, Math.min(255, Math.round(v)));
      }
  }
  return out;
}

/** The most bytes a data set's pixels may take in memory (2 GiB): checked before it is read or
 * converted, so that a model's size from an untrusted file is a message, not an out-of-memory abort. */
export const MAX_DATASET_BYTES = 2 ** 31;
/** Throws a VitrineError when n images of size x size x chans would take more than MAX_DATASET_BYTES. */
export function checkDatasetBytes(name, n, size, chans) {
  const bytes = n * chans * size * size;
  if (bytes > MAX_DATASET_BYTES)
    throw new VitrineError(
      `${name}: ${n} images at ${size}x${size}x${chans} would take ${(bytes / 2 ** 30).toFixed(1)} GiB, more than the ${MAX_DATASET_BYTES / 2 ** 30} GiB a data set may hold in memory (a smaller img_size, or fewer images)`,
      -1,
    );
}

/** A data set ({ n, chans, size, pixels: Uint8Array [n, chans, size, size], ... }) at another size
 * and channel count, every image through resizeCrop (the data set itself when they already match). */
export function adapt(ds, size, chans) {
  if (ds.size === size && ds.chans === chans) return ds;
  checkDatasetBytes(ds.name, ds.n, size, chans);
  if (ds.chans !== 1 && ds.chans < 3)
    throw new VitrineError(`${ds.name}: ${ds.chans}-channel images: only grey (1) or colour (3+) convert`, -1);
  const per = chans * size * size,
    src = ds.chans * ds.size * ds.size,
    out = new Uint8Array(ds.n * per);
  const hwc = new Uint8Array(src),
    px = ds.size * ds.size;
  for (let i = 0; i < ds.n; i++) {
    // CHW -> interleaved for resizeCrop
    const im = ds.pixels.subarray(i * src, (i + 1) * src);
    for (let c = 0; c < ds.chans; c++) for (let k = 0; k < px; k++) hwc[k * ds.chans + c] = im[c * px + k];
    out.set(resizeCrop(hwc, ds.size, ds.size, ds.chans, size, chans), i * per);
  }
  return { ...ds, chans, size, pixels: out };
}

// ---- normalise ------------------------------------------------------------------------------------

// (v / 255 - mean) / std as float32 for every byte value v, per channel
function normaliseTables(chans, stats) {
  const { mean, std } = channelStats(chans, stats);
  return mean.map((m, c) => Float32Array.from({ length: 256 }, (_, v) => (v / 255 - m) / std[c]));
}

/** Images `indices` of a data set -> normalised Float32Array NCHW, (v / 255 - mean) / std with
 * channelStats(ds.chans, stats) (ImageNet's by default). `out`: a buffer to reuse. */
export function makeBatch(ds, indices, out = null, stats = {}) {
  const per = ds.chans * ds.size * ds.size,
    px = ds.size * ds.size,
    lut = normaliseTables(ds.chans, stats);
  out = out || new Float32Array(indices.length * per);
  for (let c = 0; c < ds.chans; c++) {
    const t = lut[c],
      o = c * px;
    for (let j = 0; j < indices.length; j++) {
      const src = indices[j] * per + o,
        dst = j * per + o;
      for (let k = 0; k < px; k++) out[dst + k] = t[ds.pixels[src + k]];
    }
  }
  return out;
}

/** Normalised NCHW floats (image b) -> RGBA bytes (W*H*4), undoing mean / std (as channelStats);
 * grey images are repeated over R, G, B. For showing inputs and reconstructions. */
export function toRGBA(nchw, { chans, img }, b = 0, stats = {}) {
  const { mean, std } = channelStats(chans, stats);
  const px = img * img,
    base = b * chans * px,
    out = new Uint8ClampedArray(4 * px);
  for (let i = 0; i < px; i++) {
    for (let k = 0; k < 3; k++) {
      const c = chans === 1 ? 0 : k % chans;
      out[4 * i + k] = Math.round(255 * (nchw[base + c * px + i] * std[c] + mean[c]));
    }
    out[4 * i + 3] = 255;
  }
  return out;
}

// ---- the API's image inputs -------------------------------------------------------------------------

const isImageLike = (x) =>
  x &&
  typeof x === 'object' &&
  typeof x.width === 'number' &&
  typeof x.height === 'number' &&
  (x.data instanceof Uint8ClampedArray || x.data instanceof Uint8Array);
const isBitmap = (x) => typeof ImageBitmap !== 'undefined' && x instanceof ImageBitmap;

/** An ImageBitmap's RGBA pixels at its own size (browser: an OffscreenCanvas, else a canvas). */
export function bitmapPixels(bm) {
  return drawnPixels(bm, bm.width, bm.height);
}

// a drawable source's RGBA pixels at w x h, drawn on a canvas of that size
function drawnPixels(source, w, h) {
  const canvas =
    typeof OffscreenCanvas !== 'undefined'
      ? new OffscreenCanvas(w, h)
      : typeof document !== 'undefined'
        ? Object.assign(document.createElement('canvas'), { width: w, height: h })
        : null;
  if (!canvas) throw new VitrineError('an image of the page needs a canvas to be read (a browser)', -1);
  const ctx = canvas.getContext('2d', { willReadFrequently: true });
  ctx.drawImage(source, 0, 0, w, h);
  const d = ctx.getImageData(0, 0, w, h);
  return { width: d.width, height: d.height, data: d.data };
}

const defined = (name) => typeof globalThis[name] === 'function';
const is = (x, name) => defined(name) && x instanceof globalThis[name];
/** The size a drawable image source of a page has ({ width, height }), or null when x is none:
 * ImageBitmap, HTMLImageElement (loaded), HTMLCanvasElement, OffscreenCanvas, HTMLVideoElement
 * (with a frame), VideoFrame, SVGImageElement. */
export function drawableSize(x) {
  if (!x || typeof x !== 'object') return null;
  if (is(x, 'ImageBitmap') || is(x, 'HTMLCanvasElement') || is(x, 'OffscreenCanvas'))
    return { width: x.width, height: x.height };
  if (is(x, 'HTMLImageElement')) return { width: x.naturalWidth, height: x.naturalHeight };
  if (is(x, 'HTMLVideoElement')) return { width: x.videoWidth, height: x.videoHeight };
  if (is(x, 'VideoFrame')) return { width: x.displayWidth, height: x.displayHeight };
  if (is(x, 'SVGImageElement')) return { width: x.width.baseVal.value, height: x.height.baseVal.value };
  return null;
}

/** Every image source a page (or a worker) has, as its RGBA pixels at its own size: { width,
 * height, data }. A Blob / File is decoded (decodeBlob); ImageData and ImageData-like pixels pass
 * as they are; ImageBitmap, HTMLImageElement, HTMLCanvasElement, OffscreenCanvas,
 * HTMLVideoElement (its current frame), VideoFrame are drawn. Anything else: a VitrineError naming
 * `what` and what it takes. */
export async function imagePixels(x, what = 'image') {
  if (isImageLike(x)) {
    if (x.data.length !== 4 * x.width * x.height)
      throw new VitrineError(`${what}: ${x.data.length} bytes are not the RGBA pixels of ${x.width}x${x.height}`, -1);
    return x;
  }
  if (typeof Blob !== 'undefined' && x instanceof Blob) return decodeBlob(x);
  const size = drawableSize(x);
  if (size) {
    if (!(size.width > 0 && size.height > 0))
      throw new VitrineError(`${what}: an image of ${size.width}x${size.height} (not loaded yet, or no frame)`, -1);
    return drawnPixels(x, size.width, size.height);
  }
  throw new VitrineError(
    `${what}: not an image (a File / Blob, ImageBitmap, ImageData, HTMLImageElement, HTMLCanvasElement, OffscreenCanvas, HTMLVideoElement or VideoFrame)`,
    -1,
  );
}

/** An image source as something that crosses to a worker: a Blob, ImageBitmap or ImageData-like
 * pixels as they are; a page's element, canvas or video frame as an ImageBitmap of it (the
 * element stays the page's). */
export async function transferableImage(x, what = 'image') {
  if (isImageLike(x) || (typeof Blob !== 'undefined' && x instanceof Blob) || is(x, 'ImageBitmap')) return x;
  if (drawableSize(x)) return createImageBitmap(x);
  return imagePixels(x, what); // (names what it is not)
}

/** Browser decoding: a Blob / File (PNG, JPEG, whatever the browser reads) -> { width, height,
 * data: RGBA }, decoded without colour-space conversion or premultiplied alpha (pixels with
 * alpha < 255 may still lose a level of RGB through the canvas). Throws when it is not an image.
 * maxPixels: a PNG or JPEG over it is refused from its header, before it is decoded (another
 * format the browser reads: from the decoded bitmap's size, before its pixels are read), with
 * checkImageSize's message, Node's (raise: how the caller raises it). */
export async function decodeBlob(blob, { maxPixels = Infinity, raise } = {}) {
  if (maxPixels !== Infinity) {
    const head = new Uint8Array(await blob.slice(0, 1 << 18).arrayBuffer());
    let h = null;
    try {
      h = imageHeader(head, { partial: head.length < blob.size });
    } catch {
      // not a PNG or JPEG, or a header this reader does not follow: the bitmap's size, below
    }
    if (!h && head.length < blob.size && blob.size <= MAX_IMAGE_FILE_BYTES) {
      try {
        h = imageHeader(new Uint8Array(await blob.arrayBuffer()));
      } catch {
        // (as above)
      }
    }
    if (h) checkImageSize(h, maxPixels, raise);
  }
  const bm = await createImageBitmap(blob, { colorSpaceConversion: 'none', premultiplyAlpha: 'none' });
  try {
    if (maxPixels !== Infinity) checkImageSize(bm, maxPixels, raise);
    return bitmapPixels(bm);
  } finally {
    bm.close();
  }
}

/** Images as the model takes them: Float32Array NCHW passes through (its length checked);
 * ImageBitmap (any size) and ImageData-like { width, height, data: RGBA } (the model's size) go
 * through the pipeline: resizeCrop to the model's size and channels, then (v / 255 - mean) / std
 * with stats { mean, std } (ImageNet's by default). Returns { data, batch }. */
export function toNCHW(images, { img, chans }, stats = {}) {
  const per = chans * img * img;
  if (images instanceof Float32Array) {
    if (images.length === 0 || images.length % per)
      throw new VitrineError(
        `images: length ${images.length} is not a positive multiple of C*H*W = ${chans}*${img}*${img} = ${per}`,
        -1,
      );
    return { data: images, batch: images.length / per };
  }
  const list = Array.isArray(images) ? images : [images];
  if (!list.length) throw new VitrineError('images: empty list', -1);
  const pixels = new Uint8Array(list.length * per);
  list.forEach((im, b) => {
    const bitmap = isBitmap(im);
    if (bitmap) im = bitmapPixels(im);
    if (!isImageLike(im) || im.data.length !== 4 * im.width * im.height)
      throw new VitrineError('images: expected Float32Array (NCHW), ImageData (RGBA) or ImageBitmap', -1);
    if (!bitmap && (im.width !== img || im.height !== img))
      // pixels the caller prepared: the model's size
      throw new VitrineError(
        `images: ImageData is ${im.width}x${im.height}, the model takes ${img}x${img} (decodeBlob + resizeCrop, or an ImageBitmap, resize)`,
        -1,
      );
    pixels.set(resizeCrop(im.data, im.width, im.height, 4, img, chans), b * per);
  });
  const ds = { chans, size: img, pixels };
  return {
    data: makeBatch(
      ds,
      Int32Array.from(list, (_, i) => i),
      null,
      stats,
    ),
    batch: list.length,
  };
}
