// trainer.js: training as a library call. train(options) starts a run in a worker -- a Node worker
// thread, a browser module Web Worker -- so the calling thread never blocks, and returns a
// Trainer: events as the run goes (onStep, onEval, onCheckpoint, onLoad, onLog, onReady), pause(),
// resume(), abort() (or an AbortSignal: the run stops at the next step boundary and leaves a
// resumable checkpoint), predict(), and `done`, the run's result. The loop itself is
// web/train/session.js (the same one the CLI and the demo run).
//
//   const run = train({ objective: 'classify', model: 'vit_tiny_patch16_224', weights: 'vit_tiny.safetensors',
//                       data: 'photos/', epochs: 3, batch: 16, lr: 1e-4, onStep: (e) => console.log(e.step, e.loss) });
//   const { weights, checkpoint, eval: ev } = await run.done;   // weights: timm keys, class names
import { VitrineError, AbortError } from '../errors.js';
import { objectiveModules, checkRunOptions } from './objectives/index.js';
import { CALLBACKS, OPTIONS, show } from './options.js';
import { nodeWorker } from '../runtime/pool.js';
import { drawableSize, transferableImage } from '../formats/images.js';

const IS_NODE = typeof process !== 'undefined' && !!(process.versions && process.versions.node);
const nodeModule = (name) => import(/* @vite-ignore */ /* webpackIgnore: true */ `node:${name}`);
const isUrl = (s) => s instanceof URL || (typeof s === 'string' && /^(https?|file|blob|data):/i.test(s));
const isBlob = (x) => typeof Blob !== 'undefined' && x instanceof Blob;
const base = () => (typeof location !== 'undefined' ? location.href : undefined);
const absUrl = (u) => new URL(String(u), base()).href;

// a File's path in a picked folder (else its name), as segments
const pathOf = (f) => String(f.webkitRelativePath || f.name || '').split('/');
/** Files in path order: segment by segment, each compared as Node's folder reader sorts a folder's
 * entries (web/train/node-data.js), so that a folder picked in a tab is read in the order Node
 * reads it from disk (the data order and the held-out fifth follow it). */
export function byPath(files) {
  const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  return [...files].sort((x, y) => {
    const a = pathOf(x),
      b = pathOf(y);
    for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return cmp(a[i], b[i]);
    return a.length - b.length;
  });
}

// Files with their paths in a picked folder read here (a File's webkitRelativePath may not cross to
// a worker): the worker takes their classes and names from these
const filesOf = (files) => ({ kind: 'files', files, paths: files.map((f) => f.webkitRelativePath || f.name || '') });

// A list of Files, URLs or images of the page (ImageBitmap, ImageData, an image, canvas, video or
// video frame: made something that crosses to the worker), in the order given.
async function describeItems(items, what) {
  if (items.length && items.every(isBlob)) return filesOf(items);
  if (items.length && items.every(isUrl)) return { kind: 'urls', urls: items.map(absUrl) };
  if (items.length && items.every((x) => isBlob(x) || isImageSource(x)))
    return { kind: 'images', images: await Promise.all(items.map((x, i) => transferableImage(x, `${what}[${i}]`))) };
  throw new VitrineError(
    `${what}: a list of Files, of URLs or of images (ImageBitmap, ImageData, canvas, <img>, <video>, VideoFrame; got ${items.length ? 'a mix, or neither' : 'none'})`,
    -1,
  );
}
const isImageSource = (x) =>
  !!drawableSize(x) ||
  (x &&
    typeof x === 'object' &&
    typeof x.width === 'number' &&
    typeof x.height === 'number' &&
    ArrayBuffer.isView(x.data));

/** A data option -> the description web/train/datasets.js reads in the worker. */
export async function describeData(d, what = 'data') {
  if (d == null) throw new VitrineError(`${what}: none given`, -1);
  if (typeof d === 'string' && !isUrl(d)) {
    if (d === 'fashion-mnist' || d === 'fashion-mnist:test')
      return { kind: 'fashion-mnist', split: d.endsWith(':test') ? 'test' : 'train' };
    if (!IS_NODE)
      throw new VitrineError(`${what}: '${d}': a folder path is for Node; in a browser give Files, URLs or pixels`, -1);
    return { kind: 'folder', dir: (await nodeModule('path')).resolve(d) };
  }
  if (isUrl(d)) return { kind: 'urls', urls: [absUrl(d)] };
  if (typeof FileList !== 'undefined' && d instanceof FileList) d = Array.from(d);
  if (Array.isArray(d)) return d.length && d.every(isBlob) ? filesOf(byPath(d)) : describeItems(d, what);
  if (typeof d !== 'object') throw new VitrineError(`${what}: ${show(d)} is not data`, -1);
  if (d.kind) return d;
  const { labels = null, classes = null } = d;
  if (d.dir != null) return describeData(String(d.dir), what);
  if (d.files) {
    // labels given follow the files as given; else the files in path order (as a folder is read)
    const files = Array.from(d.files);
    return { ...filesOf(labels == null ? byPath(files) : files), labels, classes };
  }
  if (d.urls) return { kind: 'urls', urls: Array.from(d.urls, absUrl), labels, classes };
  if (d.pixels)
    return { kind: 'pixels', n: d.n, size: d.size, chans: d.chans, pixels: d.pixels, labels, classes, name: d.name };
  if (d.byClass) {
    // { cat: [File | URL | an image of the page ...], dog: [...] }, in the order given
    const names = Object.keys(d.byClass),
      items = [],
      lab = [];
    names.forEach((c, k) =>
      Array.from(d.byClass[c]).forEach((x) => {
        items.push(x);
        lab.push(k);
      }),
    );
    const inner = await describeItems(items, what);
    return { ...inner, labels: lab, classes: names };
  }
  throw new VitrineError(
    `${what}: give a folder (Node), Files, URLs, images, { pixels, n, size, chans, labels }, or { byClass: { name: [...] } }`,
    -1,
  );
}

// weights / a checkpoint: bytes and Blobs as they are; a URL made absolute here (a worker would
// resolve a relative one against its own script); in Node a path stays a path
async function describeSource(w) {
  if (w == null || w instanceof Uint8Array || w instanceof ArrayBuffer || ArrayBuffer.isView(w) || isBlob(w)) return w;
  if (typeof w === 'object' && !(w instanceof URL) && w.bytes != null) return w; // { bytes, name }: as it is
  if (isUrl(w) || !IS_NODE) return absUrl(w);
  return (await nodeModule('path')).resolve(String(w));
}

// the worker, the same interface in Node and in a browser
async function spawn({ backend, gpu } = {}) {
  if (IS_NODE) {
    if (backend && backend !== 'wasm') (await import('../webgpu/device.js')).useSwiftShaderIcd(gpu); // (Dawn in the worker reads the process's)
    const { Worker } = await nodeModule('worker_threads');
    const w = nodeWorker(Worker, new URL('./worker.js', import.meta.url));
    return {
      post: (m, t) => w.postMessage(m, t),
      on: (h) => w.on('message', h),
      onError: (h) => {
        w.on('error', h);
        w.on('exit', (c) => c && h(new Error(`the training worker exited (${c})`)));
      },
      terminate: () => w.terminate(),
      ref: (on) => (on ? w.ref() : w.unref()),
    };
  }
  const w = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
  return {
    post: (m, t) => w.postMessage(m, t),
    on: (h) => w.addEventListener('message', (e) => h(e.data)),
    onError: (h) =>
      w.addEventListener('error', (e) => {
        e.preventDefault();
        h(new Error(e.message || 'the training worker failed to load'));
      }),
    terminate: () => w.terminate(),
    ref: () => {},
  };
}

/**
 * A training run in a worker. new Trainer(options) (or train(options)) starts it. Options:
 *   objective 'mae' | 'aim' | 'classify'; model: a timm architecture ('vit_tiny_patch16_224':
 *     timm's create_model with imgSize, patchSize), a train preset ('fmnist-p7-mlp2'), or config
 *     (timm kwargs / the engine's { encoder, ... }; classify: with an architecture, timm kwargs
 *     over it, as create_model(name, **kwargs)); pool 'avg' | 'token' (classify);
 *   weights: where the run starts from -- bytes, a File / Blob, a URL (progress: onLoad), a path
 *     in Node -- timm / lightly / vitrine safetensors (pos_embed / patch_embed of another size
 *     resampled as timm does); weightsStrict;
 *   data: a folder path (Node; sub-folders are classes), a FileList / File[] (classes: their
 *     folders) or URLs, { files | urls, labels, classes }, { byClass: { name: [...] } },
 *     { pixels: Uint8Array [n, chans, size, size], n, size, chans, labels, classes },
 *     'fashion-mnist' (Node); val: the same, or a fraction held out (classify default 0.2);
 *   steps or epochs; batch (-b); gradAccum; lr; minLr; warmup (steps) or warmupEpochs;
 *   weightDecay; labelSmoothing; maskRatio; policy (gradient checkpointing); seed;
 *   augment ('hflip,rrc:0.08-1' ...); mean / std (default: the weights', else timm's for the
 *   architecture); resume: checkpoint bytes; stopAt; checkpointEvery; evalEvery; noEval;
 *   wasm, threads (the worker's engine); backend 'wasm' | 'webgpu' | 'auto' (createVitrine's: where
 *     the steps run; webgpu: replayed on the GPU, the state synced at checkpoints, evaluations and
 *     the end; gradAccum 1 only), gpu (createVitrine's gpu options); signal (AbortSignal);
 *   onStep({ step, steps, epoch, loss, lr, seconds, imagesPerSecond, memory }), onEval, onCheckpoint({ step,
 *   bytes }), onLoad({ loaded, total, name }), onLog({ text }), onReady(info), onEngine(info).
 * `done` resolves to { status: 'done' | 'stopped' | 'aborted', step, steps, epoch, lossFirst,
 * lossLast, trainSeconds, imagesPerSecond, checkpoint, weights, saveError (why they are null after
 * steps: a state the engine will not save), eval, classes, run } and rejects
 * with a VitrineError (its `result`: what a run that took steps leaves, the last good checkpoint).
 */
export class Trainer {
  constructor(options = {}) {
    this.options = options;
    this.status = 'starting';
    this.step = 0;
    this.steps = null;
    this.epoch = 0;
    this.loss = null;
    this.info = null;
    this._replies = new Map();
    this._next = 1;
    this._worker = null;
    this._pending = [];
    this._settled = false;
    this._disposed = false;
    this._pausing = null; // { promise, resolve } of the pause asked for, until the worker says it waits
    this.done = new Promise((resolve, reject) => {
      this._resolve = resolve;
      this._reject = reject;
    });
    this.done.catch(() => {}); // an unobserved failure is not an unhandled rejection until awaited
    this._start().catch((e) => this._fail(e));
    if (options.signal && OPTIONS.signal.type.check(options.signal) == null) {
      // (a signal that is not one is named by _start's check)
      if (options.signal.aborted) this.abort();
      else options.signal.addEventListener('abort', () => this.abort(), { once: true });
    }
  }

  // `done` settles once: what comes after (a worker's exit after dispose()) changes nothing
  _finish(result) {
    if (this._settled) return;
    this._settled = true;
    this.status = result.status;
    this._acked(null);
    this._resolve(result);
  }
  _fail(e, result = null, status = 'error') {
    if (this._settled) return;
    this._settled = true;
    this.status = status;
    if (!(e instanceof Error)) e = new VitrineError(String(e), -1); // (a value thrown, not an error)
    e.result = result;
    this._acked(null);
    if (this._worker) this._worker.ref(false);
    this._reject(e);
  }

  async _start() {
    try {
      checkRunOptions(this.options); // before anything starts: a wrong option is named here
    } catch (e) {
      this._fail(e);
      return;
    }
    const { signal, data, val, weights, resume, ...rest } = this.options;
    void signal; // the callbacks and the signal stay here; the rest crosses to the worker
    for (const cb of Object.values(CALLBACKS)) delete rest[cb];
    const options = { ...rest, data: await describeData(data, 'data'), weights: await describeSource(weights) };
    // objectives registered in this thread from their modules: the worker imports them too
    const modules = [...new Set([...(rest.objectiveModules || []), ...objectiveModules()])];
    if (modules.length) options.objectiveModules = modules;
    if (val != null) options.val = typeof val === 'number' ? val : await describeData(val, 'val');
    if (resume != null) options.resume = isBlob(resume) ? new Uint8Array(await resume.arrayBuffer()) : resume;
    if (this._disposed) return; // dispose() settled the run while its options were read
    const w = await spawn(options);
    if (this._disposed) {
      w.terminate(); // disposed while the worker was made: it never starts
      return;
    }
    this._worker = w;
    // a worker's own failure (a Node worker thread that exits, a script that does not load)
    const crashed = (e) =>
      this._fail(
        e instanceof VitrineError
          ? e
          : new VitrineError(
              /^the training worker/.test(e.message) ? e.message : `the training worker failed: ${e.message}`,
              -7,
            ),
      );
    w.onError(crashed);
    w.on((m) => {
      if (this._disposed) return;
      if (m.type === 'event') this._event(m.name, m.data);
      else if (m.type === 'reply') {
        const r = this._replies.get(m.id);
        this._replies.delete(m.id);
        if (r) m.ok ? r.resolve(m.result) : r.reject(new VitrineError(m.error.message, m.error.status ?? -1));
        if (!this._replies.size && this.status !== 'training' && this.status !== 'paused' && this.status !== 'starting')
          w.ref(false);
      } else if (m.type === 'done') {
        w.ref(false); // kept for predict() until dispose(), without keeping Node alive
        this._finish(m.result);
      } else if (m.type === 'error') {
        const e = m.error;
        this._fail(
          Object.assign(
            new VitrineError(e.message, e.status ?? -1),
            { name: ['DataError', 'OptionError'].includes(e.name) ? e.name : 'VitrineError' },
            e.field != null ? { field: e.field } : {},
          ),
          m.result,
        );
      }
    });
    w.post({ type: 'start', options });
    for (const msg of this._pending.splice(0)) w.post(msg);
  }

  _event(name, data) {
    if (name === 'ready') {
      this.info = data;
      this.step = data.step;
      this.steps = data.steps;
      if (this.status === 'starting') this.status = 'training';
    }
    if (name === 'step') {
      this.step = data.step;
      this.epoch = data.epoch;
      this.loss = data.loss;
    }
    if (name === 'paused') {
      this.step = data.step;
      this._acked(data);
      return;
    }
    const cb = this.options[CALLBACKS[name]];
    if (cb) cb(data);
  }
  _send(msg) {
    if (this._worker) this._worker.post(msg);
    else this._pending.push(msg);
  }
  // the pause asked for took effect (what the worker says), or will not (null: resumed, ended)
  _acked(ack) {
    const p = this._pausing;
    this._pausing = null;
    this._pausedAt = ack;
    if (p) p.resolve(ack);
  }

  /** Stops at the next step boundary after the worker reads the request (the step under way
   * finishes; the run waits; resume() continues bit for bit). Returns a promise of where the run
   * waits: { step, received } (received: the steps taken when the worker read the request; step is
   * received or received + 1), or null when it resumed or ended first. */
  pause() {
    if (this.status === 'training' || this.status === 'starting') {
      this.status = 'paused';
      let resolve;
      const promise = new Promise((r) => {
        resolve = r;
      });
      this._acked(null);
      this._pausing = { promise, resolve };
      this._send({ type: 'pause' });
      return promise;
    }
    if (this._pausing) return this._pausing.promise;
    return Promise.resolve(this.status === 'paused' ? this._pausedAt : null);
  }
  resume() {
    if (this.status === 'paused') {
      this.status = 'training';
      this._acked(null);
      this._send({ type: 'resume' });
    }
  }
  /** Ends the run at the next step boundary: `done` resolves with status 'aborted' and the
   * checkpoint of the last step (resume: it, as options.resume). */
  abort() {
    if (['starting', 'training', 'paused'].includes(this.status)) this._send({ type: 'abort' });
  }

  /** A classifier's top classes with probabilities, per image: [[{ index, name, p }, ...], ...]
   * (images: one or a list of File / Blob, ImageBitmap, ImageData, HTMLImageElement,
   * HTMLCanvasElement, OffscreenCanvas, HTMLVideoElement, VideoFrame -- any size -- or a normalised
   * Float32Array NCHW; top: how many classes, default 3). Works during and after the run, until
   * dispose(); after it, vt.loadClassifier(run) reopens what the run made. */
  async predict(images, { top, topk } = {}) {
    if (!this._worker && !this._disposed) await new Promise((r) => setTimeout(r, 0));
    if (!this._worker)
      throw new VitrineError(
        this._disposed
          ? 'predict: the run was disposed (vt.loadClassifier(run) reopens what it made)'
          : 'predict: the training worker is not started (after dispose(): vt.loadClassifier(run))',
        -7,
      );
    // a page's elements do not cross to a worker: each as an ImageBitmap of it, made here
    const list = Array.isArray(images) ? images : [images];
    const sent =
      images instanceof Float32Array
        ? images
        : await Promise.all(list.map((x, i) => transferableImage(x, `predict: image ${i}`)));
    if (!this._worker) throw new AbortError('predict: the run was disposed while the images were read', 'disposed');
    const id = this._next++;
    this._worker.ref(true);
    return new Promise((resolve, reject) => {
      this._replies.set(id, { resolve, reject });
      this._worker.post({ type: 'predict', id, images: sent, options: { topk: topk ?? top ?? 3 } });
    });
  }

  /** Ends the worker (and its engine), at any moment. A run not over yet ends with it: `done`
   * rejects with an AbortError (kind 'disposed'; status 'disposed'), as do predictions waiting; a
   * run over keeps its result and status. */
  dispose() {
    if (this._disposed) return;
    this._disposed = true;
    if (this._worker) {
      this._worker.terminate();
      this._worker = null;
    }
    const where = this.step ? `at step ${this.step}${this.steps ? ` of ${this.steps}` : ''}` : 'before its first step';
    this._fail(
      new AbortError(`the run was disposed ${where} (dispose(); abort() ends a run with its checkpoint)`, 'disposed'),
      null,
      'disposed',
    );
    for (const r of this._replies.values()) r.reject(new AbortError('predict: the run was disposed', 'disposed'));
    this._replies.clear();
  }
}

/** train(options): new Trainer(options). */
export function train(options) {
  return new Trainer(options);
}
