// worker-data.js: what the demo's workers train on and keep: the demo's models beside
// web/train.js's presets and the spec of a form's configuration, the Fashion-MNIST sample and any
// data set at the model's size (web/images.js, the pixel pipeline), and the training state in
// IndexedDB (so that a reload resumes).
import { TRAIN_PRESETS, modelSpec } from '../web/train.js';
import { adapt, makeBatch } from '../web/images.js';
import { classifierSpec, CLASSIFY_DEFAULTS } from '../web/classify.js';
import { fetchFmnistSample } from './sample.js';

// Demo models beside train.js's: `mini` is small enough to train at a glance (and in the tests).
export const DEMO_MODELS = {
  mini: {
    label: 'mini: 28 px, patch 7, dim 48, depth 3 (fast)',
    encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 48, depth: 3, num_heads: 3 },
    mae: { decoder_dim: 32, decoder_depth: 1, decoder_heads: 2 },
    aim: { head_hidden_dim: 64, head_blocks: 1 },
  },
  'rgb32-tiny': {
    label: 'rgb32-tiny: 32 px RGB, patch 4, dim 192, depth 12 (vit_tiny at 32 px)',
    encoder: { img_size: 32, patch_size: 4, in_chans: 3, embed_dim: 192, depth: 12, num_heads: 3 },
    mae: { decoder_dim: 128, decoder_depth: 2, decoder_heads: 4 },
    aim: { head_hidden_dim: 256, head_blocks: 2 },
  },
};

function customConfig(cfg) {
  try { return JSON.parse(cfg.custom); } catch (e) { throw new Error(`custom config: not JSON (${e.message})`); }
}
/** The encoder's timm kwargs of cfg.model (null for a timm preset name). */
export function encoderOf(cfg) {
  if (cfg.model === 'custom') { const c = customConfig(cfg); return { ...(c.encoder || c) }; }
  const d = DEMO_MODELS[cfg.model] || TRAIN_PRESETS[cfg.model];
  return d ? { ...d.encoder } : null;
}

/** cfg.model: a DEMO_MODELS or TRAIN_PRESETS key, a timm preset name, or 'custom' (cfg.custom:
 * JSON text as the engine reads it: { encoder: {...timm kwargs}, decoder_dim, ... }). cfg.kind
 * classify: timm's VisionTransformer on that encoder with a head of cfg.classes.length classes
 * (at least 2, for planning before the classes exist) and cfg.pool pooling. */
export function specFor(cfg) {
  if (cfg.kind === 'classify') {
    const encoder = encoderOf(cfg);
    if (!encoder) throw new Error(`classify mode builds its classifier on a 28 / 32 px model or a custom config; the timm preset '${cfg.model}' (224 px RGB) is offered for MAE / AIM only`);
    return classifierSpec({ config: { encoder }, numClasses: Math.max(2, (cfg.classes || []).length), pool: cfg.pool || CLASSIFY_DEFAULTS.pool });
  }
  if (cfg.model === 'custom') return { kind: cfg.kind, config: customConfig(cfg) };
  const d = DEMO_MODELS[cfg.model];
  if (d) return { kind: cfg.kind, config: { encoder: { ...d.encoder }, ...d[cfg.kind] } };
  if (TRAIN_PRESETS[cfg.model]) return modelSpec(cfg.kind, { preset: cfg.model });
  return { kind: cfg.kind, preset: cfg.model };
}
// the policy a config trains under ('auto' is resolved by the planner into budget:BYTES)
export const policyOf = (cfg) => (cfg.checkpointing ? cfg.resolved || cfg.policy : 'none');

// ---- data -------------------------------------------------------------------------------------

let fmnist = null; // { name, n, chans: 1, size: 28, pixels, labels, classes }
export async function loadFmnist() {
  if (!fmnist) fmnist = await fetchFmnistSample();
  return fmnist;
}

/** Images `idx` of a data set as a data set of their own. */
function gather(src, idx) {
  const per = src.chans * src.size * src.size, pixels = new Uint8Array(idx.length * per);
  idx.forEach((i, j) => pixels.set(src.pixels.subarray(i * per, (i + 1) * per), j * per));
  return { ...src, n: idx.length, pixels };
}

export const ADAPT_MAX = 64 * 1024 * 1024; // bytes of a data set adapted once, whole
/** The data set at the model's size and channels (web/images.js adapt: the pixel pipeline, as in
 * Node): adapted once when small, else per batch. get(idx) -> the normalised batch. */
export function makeSource(src, S, C) {
  if ((src.size === S && src.chans === C) || src.n * C * S * S <= ADAPT_MAX) {
    const ds = adapt(src, S, C);
    return { ds, get: (idx) => makeBatch(ds, idx) };
  }
  return { ds: src, get: (idx) => makeBatch(adapt(gather(src, idx), S, C), Int32Array.from(idx, (_, j) => j)) };
}

// ---- IndexedDB (the training state, so that a reload resumes) --------------------------------

const DB_NAME = 'vitrine-demo', STORE = 'runs', KEY = 'current';
function db() {
  return new Promise((res, rej) => {
    const r = indexedDB.open(DB_NAME, 1);
    r.onupgradeneeded = () => r.result.createObjectStore(STORE);
    r.onsuccess = () => res(r.result);
    r.onerror = () => rej(r.error);
  });
}
async function idb(mode, fn) {
  const d = await db();
  try {
    return await new Promise((res, rej) => {
      const tx = d.transaction(STORE, mode), req = fn(tx.objectStore(STORE));
      tx.oncomplete = () => res(req.result);
      tx.onerror = tx.onabort = () => rej(tx.error);
    });
  } finally { d.close(); }
}
export const idbGet = () => idb('readonly', (s) => s.get(KEY));
export const idbPut = (v) => idb('readwrite', (s) => s.put(v, KEY));
export const idbDel = () => idb('readwrite', (s) => s.delete(KEY));
export const MAX_SAVED = 256 * 1024 * 1024;
