// pretrained.js: timm's pretrained weights the way timm uses them -- the bytes from wherever they
// are (bytes, a File / Blob, a file in Node, a URL fetched with progress), and the normalisation
// the weights were trained with:
//   1. mean / std given by the caller (--mean / --std);
//   2. the weights' own metadata: `pretrained_cfg` (timm's name; JSON with mean and std), which
//      vitrine writes into every file it saves;
//   3. timm's default for the architecture: the pretrained_cfg of its default tag (TIMM_PRETRAINED: timm's
//      vit_*_patch16_224 / patch32_224 default to the augreg weights, mean = std = 0.5);
//   4. else ImageNet's mean / std (vitrine's default, what its own small models train with).
// No Node module is imported unless a file path is read in Node.
import { readSafetensorsMeta, parseSafetensorsHeader } from './safetensors.js';
import { IMAGENET_MEAN, IMAGENET_STD } from './images.js';
import { VitrineError } from '../errors.js';
import { fetchBytes, readBody, URL_TIMEOUT_SECONDS } from './fetch.js';

const IS_NODE = typeof process !== 'undefined' && !!(process.versions && process.versions.node);
const nodeModule = (name) => import(/* @vite-ignore */ /* webpackIgnore: true */ `node:${name}`);

// timm.data's OPENAI_CLIP_MEAN / _STD and IMAGENET_DEFAULT_MEAN / _STD
const CLIP = { mean: [0.48145466, 0.4578275, 0.40821073], std: [0.26862954, 0.26130258, 0.27577711] };
const IMAGENET = { mean: IMAGENET_MEAN, std: IMAGENET_STD };

/** timm's pretrained_cfg (timm/models/vision_transformer.py and deit.py default_cfgs, timm
 * 1.0.29) of the default tag of each timm architecture the engine builds (vt_preset): its mean /
 * std and input size. */
export const TIMM_PRETRAINED = {
  vit_tiny_patch16_224: {
    tag: 'augreg_in21k_ft_in1k',
    mean: [0.5, 0.5, 0.5],
    std: [0.5, 0.5, 0.5],
    input_size: [3, 224, 224],
  },
  vit_small_patch16_224: {
    tag: 'augreg_in21k_ft_in1k',
    mean: [0.5, 0.5, 0.5],
    std: [0.5, 0.5, 0.5],
    input_size: [3, 224, 224],
  },
  vit_base_patch16_224: {
    tag: 'augreg2_in21k_ft_in1k',
    mean: [0.5, 0.5, 0.5],
    std: [0.5, 0.5, 0.5],
    input_size: [3, 224, 224],
  },
  vit_base_patch32_224: {
    tag: 'augreg_in21k_ft_in1k',
    mean: [0.5, 0.5, 0.5],
    std: [0.5, 0.5, 0.5],
    input_size: [3, 224, 224],
  },
  // CLIP's image towers (OpenCLIP's and OpenAI's weights): OpenAI's mean / std
  vit_base_patch16_clip_224: { tag: 'laion2b_ft_in12k_in1k', ...CLIP, input_size: [3, 224, 224] },
  vit_base_patch32_clip_224: { tag: 'laion2b_ft_in12k_in1k', ...CLIP, input_size: [3, 224, 224] },
  vit_base_patch16_clip_quickgelu_224: { tag: 'metaclip_2pt5b', ...CLIP, input_size: [3, 224, 224] },
  vit_base_patch32_clip_quickgelu_224: { tag: 'laion400m_e32', ...CLIP, input_size: [3, 224, 224] },
  vit_base_patch16_siglip_224: {
    tag: 'v2_webli',
    mean: [0.5, 0.5, 0.5],
    std: [0.5, 0.5, 0.5],
    input_size: [3, 224, 224],
  },
  // DeiT (distilled or not) and DINOv2: ImageNet's mean / std
  deit_tiny_patch16_224: { tag: 'fb_in1k', ...IMAGENET, input_size: [3, 224, 224] },
  deit_small_patch16_224: { tag: 'fb_in1k', ...IMAGENET, input_size: [3, 224, 224] },
  deit_base_patch16_224: { tag: 'fb_in1k', ...IMAGENET, input_size: [3, 224, 224] },
  deit_tiny_distilled_patch16_224: { tag: 'fb_in1k', ...IMAGENET, input_size: [3, 224, 224] },
  deit_small_distilled_patch16_224: { tag: 'fb_in1k', ...IMAGENET, input_size: [3, 224, 224] },
  deit_base_distilled_patch16_224: { tag: 'fb_in1k', ...IMAGENET, input_size: [3, 224, 224] },
  vit_small_patch14_reg4_dinov2: { tag: 'lvd142m', ...IMAGENET, input_size: [3, 518, 518] },
  vit_base_patch14_reg4_dinov2: { tag: 'lvd142m', ...IMAGENET, input_size: [3, 518, 518] },
};

/** A mean or std list checked: 1 or 3 finite numbers (std > 0). */
export function checkStats(v, what, positive) {
  if (
    !Array.isArray(v) ||
    !(v.length === 1 || v.length === 3) ||
    !v.every((x) => typeof x === 'number' && Number.isFinite(x) && (!positive || x > 0))
  )
    throw new VitrineError(
      `${what}: ${JSON.stringify(v)} is not 1 or 3 ${positive ? 'positive' : 'finite'} numbers`,
      -1,
    );
  return v;
}

/** mean / std a pretrained_cfg (timm's, or vitrine's own) in safetensors metadata gives, or null. */
export function statsFromMeta(meta, what = 'the weights') {
  const text = meta && meta.pretrained_cfg;
  if (typeof text !== 'string') return null;
  let cfg;
  try {
    cfg = JSON.parse(text);
  } catch (e) {
    throw new VitrineError(`${what}: pretrained_cfg in its metadata is not JSON (${e.message})`, -3);
  }
  if (!cfg || typeof cfg !== 'object' || cfg.mean == null || cfg.std == null) return null;
  return {
    mean: checkStats(cfg.mean, `${what}: pretrained_cfg mean`, false),
    std: checkStats(cfg.std, `${what}: pretrained_cfg std`, true),
  };
}

/** The normalisation a run uses, and where it comes from (the order at the top of this file).
 * arch: a timm architecture name or null; meta: the metadata of the weights the run starts from. */
export function resolveNormalization({ mean = null, std = null, meta = null, arch = null, what } = {}) {
  if ((mean == null) !== (std == null)) throw new VitrineError('mean and std: give both or neither', -1);
  if (mean != null)
    return { mean: checkStats(mean, 'mean', false), std: checkStats(std, 'std', true), source: 'given' };
  const m = statsFromMeta(meta, what);
  if (m) return { ...m, source: "the weights' pretrained_cfg" };
  const t = arch && Object.hasOwn(TIMM_PRETRAINED, arch) ? TIMM_PRETRAINED[arch] : null;
  // (the architecture's default: weights that state nothing may never have seen that tag)
  if (t)
    return {
      mean: t.mean,
      std: t.std,
      source: `timm's default for ${arch} (${arch}.${t.tag}'s pretrained_cfg)${meta ? ': the weights state none' : ''}`,
    };
  return { mean: IMAGENET_MEAN, std: IMAGENET_STD, source: "ImageNet (vitrine's default)", isDefault: true };
}

/** The `pretrained_cfg` metadata entry vitrine writes into what it saves (timm's keys). */
export function pretrainedCfg({ mean, std, chans, img, numClasses = null }) {
  return JSON.stringify({
    mean,
    std,
    input_size: [chans, img, img],
    ...(numClasses != null ? { num_classes: numClasses } : {}),
  });
}

// ---- the bytes --------------------------------------------------------------------------------------

/** Largest weights file read (bytes): a ViT-B is 344 MB in float32. */
export const MAX_WEIGHTS_BYTES = 2 ** 31;

/** Largest safetensors header read (bytes): the engine's and the reference reader's cap. */
export const MAX_HEADER_BYTES = 100 * 1000 * 1000;

/** What a safetensors file says its size is, from its first bytes, for readBody's peek: the header's
 * length first, then the header, whose tensors' data_offsets end where the file must end. A header
 * that cannot be one is refused here, before the rest is read. */
export function safetensorsPeek(head, loaded) {
  if (loaded < 8) return { need: 8 };
  const n = Number(new DataView(head.buffer, head.byteOffset, 8).getBigUint64(0, true));
  if (n === 0 || n > MAX_HEADER_BYTES)
    throw new VitrineError(`not a safetensors file (a header of ${n} bytes; 1..${MAX_HEADER_BYTES} are read)`, -3);
  if (loaded < 8 + n) return { need: 8 + n };
  let h;
  try {
    h = parseSafetensorsHeader(head, n);
  } catch (e) {
    throw new VitrineError(`not a safetensors file (${e.message.replace(/^safetensors: /, '')})`, -3);
  }
  let end = 0;
  for (const k of Object.keys(h)) {
    const t = h[k];
    if (k === '__metadata__' || !t || !Array.isArray(t.data_offsets)) continue;
    const e = t.data_offsets[1];
    if (Number.isSafeInteger(e) && e > end) end = e;
  }
  return { total: 8 + n + end };
}

const isUrlText = (s) => /^(https?|file|blob|data):/i.test(s);

/** The bytes of weights: a Uint8Array / ArrayBuffer (as is), a Blob / File, a URL (fetched,
 * onProgress({ loaded, total, name }) as it arrives), or in Node a file path. Checked to be
 * safetensors; a failure names what was asked for. Returns { bytes, name, meta }. */
export async function readWeights(
  src,
  { onProgress = null, signal = null, name = null, stallSeconds, timeoutSeconds, maxBytes = MAX_WEIGHTS_BYTES } = {},
) {
  let bytes,
    what = name;
  if (src instanceof Uint8Array) bytes = src;
  else if (src instanceof ArrayBuffer) bytes = new Uint8Array(src);
  else if (ArrayBuffer.isView(src)) bytes = new Uint8Array(src.buffer, src.byteOffset, src.byteLength);
  else if (typeof Blob !== 'undefined' && src instanceof Blob) {
    what = what || src.name || 'the Blob';
    bytes = await readBody(src.stream(), {
      total: src.size,
      what,
      onProgress,
      signal,
      maxBytes,
      peek: safetensorsPeek,
    });
  } else if (src instanceof URL || (typeof src === 'string' && (isUrlText(src) || !IS_NODE))) {
    const url = String(src);
    what = what || url;
    if (IS_NODE && /^file:/i.test(url))
      return readWeights((await nodeModule('url')).fileURLToPath(url), { onProgress, signal, name: url, maxBytes });
    bytes = await fetchBytes(url, {
      what,
      signal,
      onProgress,
      maxBytes,
      stallSeconds,
      timeoutSeconds: timeoutSeconds ?? URL_TIMEOUT_SECONDS.weights,
      peek: safetensorsPeek,
    });
  } else if (typeof src === 'string') {
    // Node: a file
    what = what || src;
    const fs = await nodeModule('fs');
    let st;
    try {
      st = fs.statSync(src);
    } catch (e) {
      throw new VitrineError(`${what}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`, -8);
    }
    if (!st.isFile()) throw new VitrineError(`${what}: not a regular file`, -8);
    if (st.size > maxBytes) throw new VitrineError(`${what}: ${st.size} bytes, over the cap of ${maxBytes} bytes`, -3);
    bytes = new Uint8Array(fs.readFileSync(src));
    if (onProgress) onProgress({ loaded: bytes.length, total: bytes.length, name: what });
  } else {
    throw new VitrineError(
      `weights: ${Object.prototype.toString.call(src)} is not bytes, a Blob, a URL or a file path`,
      -1,
    );
  }
  what = what || 'the weights';
  let meta;
  try {
    meta = readSafetensorsMeta(bytes);
  } catch (e) {
    throw new VitrineError(`${what}: not a safetensors file (${e.message.replace(/^safetensors: /, '')})`, -3);
  }
  return { bytes, name: what, meta };
}
