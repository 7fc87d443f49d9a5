// worker-data.js: what the demo's workers train on and keep: the demo's models beside
// web/train/presets.js's presets and the spec of a form's configuration, the Fashion-MNIST sample (brought
// to the model's size by the training loop's batches: web/train/datasets.js, the pixel pipeline), and
// the training checkpoint in IndexedDB (so that a reload resumes).
import { TRAIN_PRESETS, modelSpec, maeDecoder, classifierSpec, CLASSIFY_DEFAULTS } from '../web/vitrine.js';
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

// a table's own entry (never a name of Object.prototype), or null
const own = (table, name) => (typeof name === 'string' && Object.hasOwn(table, name) ? table[name] : null);

function customConfig(cfg) {
  try {
    return JSON.parse(cfg.custom);
  } catch (e) {
    throw new Error(`custom config: not JSON (${e.message})`);
  }
}
/** The encoder's timm kwargs of cfg.model (null for a timm preset name). */
export function encoderOf(cfg) {
  if (cfg.model === 'custom') {
    const c = customConfig(cfg);
    return { ...(c.encoder || c) };
  }
  const d = own(DEMO_MODELS, cfg.model) || own(TRAIN_PRESETS, cfg.model);
  return d ? { ...d.encoder } : null;
}

/** cfg.model: a DEMO_MODELS or TRAIN_PRESETS key, a timm preset name, or 'custom' (cfg.custom:
 * JSON text as the engine reads it: { encoder: {...timm kwargs}, decoder_dim, ... }). cfg.kind
 * classify: timm's VisionTransformer on that encoder with a head of cfg.classes.length classes
 * (at least 2, for planning before the classes exist) and cfg.pool pooling. */
export function specFor(cfg) {
  if (cfg.kind === 'classify') {
    const encoder = encoderOf(cfg);
    if (!encoder)
      throw new Error(
        `classify mode builds its classifier on a 28 / 32 px model or a custom config; the timm preset '${cfg.model}' (224 px RGB) is offered for MAE / AIM only`,
      );
    return classifierSpec({
      config: { encoder },
      numClasses: Math.max(2, (cfg.classes || []).length),
      pool: cfg.pool || CLASSIFY_DEFAULTS.pool,
    });
  }
  if (cfg.model === 'custom') return { kind: cfg.kind, config: customConfig(cfg) };
  const d = own(DEMO_MODELS, cfg.model);
  if (d) return { kind: cfg.kind, config: { encoder: { ...d.encoder }, ...d[cfg.kind] } };
  if (own(TRAIN_PRESETS, cfg.model)) return modelSpec(cfg.kind, { preset: cfg.model });
  // a timm preset (224 px): MAE with cfg.decoder of web/train/presets.js's MAE_DECODERS ('tab' in the
  // form by default; a run saved before the choice existed trained lightly's, the engine's default)
  if (cfg.kind === 'mae') return { kind: 'mae', preset: cfg.model, config: maeDecoder(cfg.decoder || 'lightly') };
  return { kind: cfg.kind, preset: cfg.model };
}
/** What a recorded step depends on: the model, the batch and the mask ratio (the teaching view and
 * the memory panel compare them to know they speak of the same step). */
export const configKey = (cfg) => JSON.stringify([specFor(cfg), cfg.batch, cfg.maskRatio]);
// the policy a config trains under ('auto' is resolved by the planner into budget:BYTES)
export const policyOf = (cfg) => (cfg.checkpointing ? cfg.resolved || cfg.policy : 'none');

// ---- data -------------------------------------------------------------------------------------

let fmnist = null; // { name, n, chans: 1, size: 28, pixels, labels, classes }
export async function loadFmnist() {
  if (!fmnist) fmnist = await fetchFmnistSample();
  return fmnist;
}

// ---- IndexedDB (the training state, so that a reload resumes) --------------------------------

const DB_NAME = 'vitrine-demo',
  STORE = 'runs',
  KEY = 'current';
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
      const tx = d.transaction(STORE, mode),
        req = fn(tx.objectStore(STORE));
      tx.oncomplete = () => res(req.result);
      tx.onerror = tx.onabort = () => rej(tx.error);
    });
  } finally {
    d.close();
  }
}
export const idbGet = () => idb('readonly', (s) => s.get(KEY));
export const idbPut = (v) => idb('readwrite', (s) => s.put(v, KEY));
export const idbDel = () => idb('readwrite', (s) => s.delete(KEY));
export const MAX_SAVED = 256 * 1024 * 1024;
