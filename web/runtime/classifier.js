// classifier.js: a classifier reopened -- vt.loadClassifier(bytes | File / Blob | URL | path in
// Node | a finished run) checks the file's metadata (web/formats/metadata.js checkClassifier:
// class names, spec, image size; the engine checks the spec), builds its model, loads its weights
// and its normalisation, and returns a Classifier whose predict(images, { top }) takes every image
// source a page has, in a tab and in a worker. What `vitrine predict` does for files, as one call
// (transformers.js's pipeline()).
import { VitrineError } from '../errors.js';
import { checkClassifier, MetadataError } from '../formats/metadata.js';
import { readWeights, statsFromMeta } from '../formats/pretrained.js';
import { IMAGENET_MEAN, IMAGENET_STD, imagePixels, resizeCrop, makeBatch } from '../formats/images.js';

/** Softmax of one row of logits -> [{ index, name, p }] sorted by probability, the first k. */
export function predictTop(z, names, k = 3) {
  let mx = -Infinity;
  for (const v of z) mx = Math.max(mx, v);
  let s = 0;
  const e = Array.from(z, (v) => {
    const x = Math.exp(v - mx);
    s += x;
    return x;
  });
  return e
    .map((x, i) => ({ index: i, name: names && names[i] != null ? names[i] : String(i), p: x / s }))
    .sort((a, b) => b.p - a.p || a.index - b.index)
    .slice(0, k);
}

/** Images as a normalised batch [B, chans, img, img]: a Float32Array NCHW as it is, or one image
 * source or a list of them (imagePixels: File / Blob, ImageBitmap, ImageData, an image, canvas,
 * video or video frame of a page) through the pixel pipeline, normalised with stats. */
export async function classifierBatch(images, { img, chans }, stats, what = 'predict') {
  if (images instanceof Float32Array) return images;
  const list = Array.isArray(images) ? images : [images],
    per = chans * img * img,
    px = new Uint8Array(list.length * per);
  if (!list.length) throw new VitrineError(`${what}: no images`, -1);
  for (let b = 0; b < list.length; b++) {
    const im = await imagePixels(list[b], `${what}: image ${b}`);
    px.set(resizeCrop(im.data, im.width, im.height, 4, img, chans), b * per);
  }
  return makeBatch(
    { chans, size: img, pixels: px },
    Int32Array.from(list, (_, i) => i),
    null,
    stats,
  );
}

/** A classifier file's model, class names and normalisation: predict(images, { top }). */
export class Classifier {
  constructor(model, classes, name) {
    this.model = model;
    /** The class names, one per output of the head. */
    this.classes = classes;
    /** Where it came from (a file, a URL, 'the bytes'). */
    this.name = name;
  }
  /** The image size and channels it takes ({ img, chans, ... }: Model.dims). */
  get dims() {
    return this.model.dims;
  }
  /** The mean / std its images are normalised with (its pretrained_cfg). */
  get normalization() {
    return this.model.normalization;
  }
  /** The top classes of each image, with probabilities: [[{ index, name, p }, ...], ...] (one list
   * per image). images: one image source or a list (File / Blob, ImageBitmap, ImageData,
   * HTMLImageElement, HTMLCanvasElement, OffscreenCanvas, HTMLVideoElement, VideoFrame; any size),
   * or a normalised Float32Array NCHW. top: how many classes (default 3). */
  async predict(images, { top = 3, topk } = {}) {
    const k = topk ?? top;
    if (!(Number.isInteger(k) && k >= 1))
      throw new VitrineError(`top: ${JSON.stringify(k)} is not a whole number >= 1`, -1);
    const x = await classifierBatch(images, this.model.dims, this.model.normalization),
      z = this.model.timmForward(x),
      C = z.shape[1];
    return Array.from({ length: z.shape[0] }, (_, b) =>
      predictTop(z.data.subarray(b * C, (b + 1) * C), this.classes, Math.min(k, C)),
    );
  }
  /** Frees its model. */
  dispose() {
    this.model.dispose();
  }
}

/**
 * vt.loadClassifier(source, { onProgress, signal }) -> Promise<Classifier>. source: a classifier
 * file of a classify run (train()'s result.weights, `vitrine train --objective classify`'s
 * classifier.safetensors, the demo's download) as bytes, a File / Blob, a URL (fetched with
 * progress), a path in Node; or the run itself (a Trainer: its done; or its result). Its metadata
 * is checked before anything is made from it; a failure names what was given.
 */
export async function loadClassifier(
  vt,
  source,
  { onProgress = null, signal = null, stallSeconds, timeoutSeconds } = {},
) {
  let src = source;
  if (src && typeof src === 'object' && src.done && typeof src.done.then === 'function') src = await src.done; // a Trainer
  if (src && typeof src === 'object' && !ArrayBuffer.isView(src) && 'weights' in src) {
    if (!src.weights)
      throw new VitrineError(
        `loadClassifier: the run left no weights (${src.saveError ? src.saveError.message : src.status})`,
        -7,
      );
    src = src.weights; // a finished run's result
  }
  const w = await readWeights(src, {
    onProgress,
    signal,
    stallSeconds,
    timeoutSeconds,
    name: ArrayBuffer.isView(src) ? 'the classifier' : null,
  });
  if (w.meta.vitrine_classifier == null)
    throw new VitrineError(
      `${w.name}: not a classifier (no class names in its metadata: a classify run's weights)`,
      -3,
    );
  let c;
  try {
    c = checkClassifier(w.meta);
  } catch (e) {
    if (e instanceof MetadataError) throw new VitrineError(`${w.name}: damaged classifier metadata: ${e.message}`, -3);
    throw e;
  }
  let dims;
  try {
    dims = vt.checkModel(c.spec);
  } catch (e) {
    throw new VitrineError(`${w.name}: damaged classifier metadata: vitrine_classifier.spec: ${e.message}`, -3);
  }
  if (c.img !== dims.img || c.chans !== dims.chans)
    throw new VitrineError(
      `${w.name}: damaged classifier metadata: vitrine_classifier: ${c.img} px x ${c.chans} channels are not its model's (${dims.img} x ${dims.chans})`,
      -3,
    );
  const stats = statsFromMeta(w.meta, w.name) || { mean: IMAGENET_MEAN, std: IMAGENET_STD };
  const model = vt.createModel(c.spec);
  try {
    model.loadSafetensors(w.bytes);
  } catch (e) {
    model.dispose();
    throw new VitrineError(`${w.name}: ${e.message}`, e.status || -3);
  }
  model.normalization = { ...stats, source: `${w.name}'s pretrained_cfg` };
  return new Classifier(model, c.classes, w.name);
}
