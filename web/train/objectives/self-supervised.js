// self-supervised.js: what the two objectives that pre-train an encoder without labels share --
// lightly's MAE (mae.js) and AIM (aim.js): the model (a train preset's encoder with its MAE decoder
// or AIM head, a timm architecture at any size, or a config), the trainer's settings, the encoder's
// weights as what the run makes, and the options and run settings both have always kept.
import { TRAIN_PRESETS, modelSpec, encoderPrefix } from '../presets.js';
import { optional } from '../../formats/metadata.js';
import { number, whole, ownValue, show, OptionError, MAX_IMAGES } from '../options.js';

/** The option both take (AIM keeps it in its run settings too, as it always has). */
export const MASK_RATIO = {
  flag: 'mask-ratio',
  value: 'R',
  type: number(0, 1, { open: true }), // (the engine's range; one that masks no patch of the model is refused by the run)
  run: true,
  help: 'MAE: the share of patches masked, 0 <= R < 1',
};

/** An MAE / AIM objective: name, summary, and its peak learning rate for 64 images a step (a
 * short run needs more than lightly's 1.5e-4 x batch / 256 and 1e-3 x batch / 4096, which are for
 * hundreds of epochs: measured on Fashion-MNIST, docs/experiments.md). */
export function selfSupervised({ name, summary, lr64, torch }) {
  return {
    torch,
    name,
    summary,
    labels: false,
    runKey: 'vitrine_run',
    countKey: 'dataN',
    specInState: true, // the checkpoint's kind and model_config are the model
    masks: name === 'mae', // its step masks a share of the patches (maskRatio)
    report: 'encoder',
    defaults: { batch: 64, steps: 5000, lr: (images) => (lr64 * images) / 64, val: 0, maskRatio: 0.5 },
    options: { maskRatio: MASK_RATIO },
    runRules: { dataN: optional(whole(1, MAX_IMAGES).check) },
    /** A train preset (with its decoder / head), a timm architecture (timm's create_model with
     * imgSize / patchSize / inChans over its encoder; a config gives its decoder / head), or a
     * config ({ encoder, ... }). */
    spec(o) {
      if (o.config != null) configObject(o.config); // (an encoder that is no object is refused)
      const arch = typeof o.model === 'string' ? o.model : null;
      const over = encoderOverrides(o);
      if (arch && !isTrainPreset(arch)) {
        // the architecture's encoder (imgSize ... over it) under the config's decoder / head, if any
        const c = o.config != null ? (typeof o.config === 'string' ? JSON.parse(o.config) : o.config) : {};
        const config = Object.keys(over).length ? { ...c, encoder: { ...c.encoder, ...over } } : c;
        return { kind: name, preset: arch, config: Object.keys(config).length ? config : null };
      }
      const s = modelSpec(name, {
        preset: arch || 'fmnist-p7-mlp2',
        config: o.config != null ? o.config : o.model && typeof o.model === 'object' ? o.model : null,
      });
      if (Object.keys(over).length) s.config = { ...s.config, encoder: { ...s.config.encoder, ...over } };
      return s;
    },
    settings(o) {
      const s = { maskRatio: o.maskRatio ?? 0.5 };
      if (o.weightDecay != null) s.weightDecay = o.weightDecay;
      if (o.augment != null && o.augment !== 'none') s.augment = o.augment;
      return s;
    },
    trainer(run) {
      return {
        lr: run.lr,
        warmupSteps: run.warmup,
        totalSteps: run.steps,
        seed: BigInt(run.seed) + 1n,
        maskRatio: run.maskRatio ?? 0.75,
        ...(run.weightDecay != null ? { weightDecay: run.weightDecay } : {}),
      };
    },
    /** The encoder (timm keys, timm_kwargs, pretrained_cfg). */
    weights(session) {
      const m = session.model;
      return m.saveSafetensors({ modelPrefix: encoderPrefix(m.kind) });
    },
  };
}

/** A run's config (an object, or its JSON text: the validator checked it holds an object) with its
 * encoder, when it gives one, an object: one that is not would spread to nothing and leave the
 * architecture's encoder or timm's defaults in its place. */
export function configObject(config) {
  const c = typeof config === 'string' ? JSON.parse(config) : config;
  if (c && c.encoder != null && (typeof c.encoder !== 'object' || Array.isArray(c.encoder)))
    throw new OptionError('config', `encoder: ${show(c.encoder)} is not an object of timm kwargs`);
  return c;
}

/** A train preset's own name (never a name of Object.prototype). */
export const isTrainPreset = (name) => ownValue(TRAIN_PRESETS, name) != null;

/** timm's create_model keyword arguments a run gives over an architecture's encoder. */
export function encoderOverrides(o) {
  const over = { img_size: o.imgSize, patch_size: o.patchSize, in_chans: o.inChans };
  Object.keys(over).forEach((k) => over[k] === undefined && delete over[k]);
  return over;
}
