// presets.js: the models a training run makes by name -- the small default ViTs (TRAIN_PRESETS)
// with their MAE decoder / AIM head, the MAE decoders for a 224-px timm preset, and the spec
// createModel takes for MAE / AIM. No file I/O and no Node modules here.

/** Small ViTs for small images (Fashion-MNIST 28x28 grey). `fmnist`: patch 4 (7x7 = 49 patches
 * + [CLS]), embed_dim 64, depth 4, 4 heads (mlp_ratio 4); MAE decoder dim 64, depth 2, 4 heads,
 * predicting each masked patch normalised by its own mean and variance (the MAE paper's
 * norm_pix_loss: +1.4 kNN points after 1000 steps here; lightly's examples predict raw pixels);
 * AIM head hidden 128, 2 blocks. `fmnist-p7`: patch 7, embed_dim 128, the same depth, heads,
 * decoder and head. `fmnist-p7-mlp2` (the default of `vitrine train` and of `--objective
 * classify`): `fmnist-p7` with mlp_ratio 2. `fmnist-base` is twice as wide and 1.5x as deep
 * as `fmnist` (embed_dim 128, depth 6), for longer runs. timm presets (vit_tiny_patch16_224, ...)
 * work too, at 224x224 RGB. */
// every small preset's MAE decoder and AIM head (modelSpec copies them out)
const SMALL_HEADS = {
  mae: { decoder_dim: 64, decoder_depth: 2, decoder_heads: 4, norm_pix_loss: true },
  aim: { head_hidden_dim: 128, head_blocks: 2 },
};
export const TRAIN_PRESETS = {
  fmnist: {
    encoder: { img_size: 28, patch_size: 4, in_chans: 1, embed_dim: 64, depth: 4, num_heads: 4 },
    ...SMALL_HEADS,
  },
  // patch 7 (4x4 = 16 patches + [CLS]) at embed_dim 128 costs about what `fmnist` costs per MAE
  // step (fewer, wider tokens) and its features are twice as wide: better kNN per minute than
  // `fmnist` (README)
  'fmnist-p7': {
    encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 128, depth: 4, num_heads: 4 },
    ...SMALL_HEADS,
  },
  // the default: `fmnist-p7` with MLPs of 2x width instead of 4x. An MAE step costs 1/1.27 of
  // `fmnist-p7`'s at 2 threads, 1/1.5 at one (the MLPs and their GELU are most of it;
  // bench/classify_bench.mjs), and per step its kNN was as good (5000 steps: 83.25%; `fmnist-p7`
  // after 4000: 83.00%): the most kNN per minute measured (README)
  'fmnist-p7-mlp2': {
    encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 128, depth: 4, num_heads: 4, mlp_ratio: 2 },
    ...SMALL_HEADS,
  },
  'fmnist-base': {
    encoder: { img_size: 28, patch_size: 4, in_chans: 1, embed_dim: 128, depth: 6, num_heads: 4 },
    ...SMALL_HEADS,
  },
};

/** MAE decoders for a 224-px timm preset (Vitrine.createModel({ kind: 'mae', preset, config })):
 * `tab`, sized for a browser tab, the demo's default; `lightly`, lightly's MAE example's (and the
 * engine's default for a preset). Step times: bench/README.md, section 8. */
export const MAE_DECODERS = {
  tab: { label: 'sized for a tab: 128 wide, 2 deep, 4 heads', decoder_dim: 128, decoder_depth: 2, decoder_heads: 4 },
  lightly: {
    label: "lightly's MAE: 512 wide, 8 deep, 16 heads",
    decoder_dim: 512,
    decoder_depth: 8,
    decoder_heads: 16,
  },
};
/** The config (for createModel with a preset) of decoder `name` of MAE_DECODERS. */
export function maeDecoder(name) {
  const d = Object.hasOwn(MAE_DECODERS, name) ? MAE_DECODERS[name] : null;
  if (!d) throw new Error(`MAE decoder '${name}': use ${Object.keys(MAE_DECODERS).join(', ')}`);
  return { decoder_dim: d.decoder_dim, decoder_depth: d.decoder_depth, decoder_heads: d.decoder_heads };
}

/** What createModel takes for an objective ('mae' | 'aim') and a preset name or a config
 * (object or JSON text: { encoder: {...timm kwargs}, decoder_dim, ... } as the engine reads it). */
export function modelSpec(objective, { preset = 'fmnist', config = null } = {}) {
  if (objective !== 'mae' && objective !== 'aim') throw new Error(`objective '${objective}': use mae or aim`);
  if (config != null) return { kind: objective, config: typeof config === 'string' ? JSON.parse(config) : config };
  const p = Object.hasOwn(TRAIN_PRESETS, preset) ? TRAIN_PRESETS[preset] : null; // own names only
  if (p) return { kind: objective, config: { encoder: { ...p.encoder }, ...p[objective] } };
  return { kind: objective, preset }; // a timm preset name (the engine checks it)
}

/** The encoder's weights under timm's keys: lightly's MAE backbone is backbone.vit.*, AIM's
 * backbone.* (a causal timm ViT). */
export function encoderPrefix(kind) {
  return kind === 'mae' ? 'backbone.vit.' : 'backbone.';
}
