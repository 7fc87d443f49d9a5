// checkpoint.js: a training checkpoint's run settings, checked as the untrusted input they are
// before anything is made from them: checkCheckpoint (the engine's entries and the fields both
// kinds of run have always kept, with web/formats/metadata.js's rules) and runFromCheckpoint (the
// Trainer's own fields too). The run's settings are kept under `vitrine_run` (MAE / AIM) or
// `vitrine_classify` (a classifier), the keys vitrine has always written.
import { VitrineError } from '../errors.js';
import {
  MetadataError,
  show,
  parseJson,
  int,
  num,
  text,
  oneOf,
  optional,
  object,
  checkFields,
  checkSpec,
  isObject,
  FORMATS,
  MAX_CLASSES,
} from '../formats/metadata.js';
import { checkStats } from '../formats/pretrained.js';
import { parseAugment } from './augment.js';

/** The metadata key of a checkpoint's run settings, per objective. */
export const RUN_KEY = { mae: 'vitrine_run', aim: 'vitrine_run', classify: 'vitrine_classify' };
const bad = (what, m) => new VitrineError(`${what}: ${m}`, -3);

const COUNT = 2000000000; // steps and warm-up: the engine's VT_MAX_STEPS
/** A seed: decimal digits, exact when 3 is added (initialisation S, masks S+1, data S+2, augmentation S+3). */
const SEED = text({ max: 16, re: /^\d+$/, what: 'a whole number in decimal digits below 2^53 - 2' });
const seedRule = (v) => SEED(v) || (Number(v) > 2 ** 53 - 3 ? `${show(v)} is more than 2^53 - 3` : null);

// the settings both kinds of run keep (web/cli/train.js, web/cli/classify.js)
const RUN_RULES = {
  batch: int(1, 65536),
  steps: int(1, COUNT),
  warmup: int(0, COUNT),
  lr: num(0, 1000),
  seed: seedRule,
  data: text({ what: "'fashion-mnist' or a folder's path" }),
  wasm: optional(text({ max: 64, re: /^[a-z0-9-]+$/, what: 'a build name' })),
  lossFirst: optional(num(-Infinity, Infinity)),
  preset: optional(text({ max: 200 })),
  init: optional(text()),
  augment: optional((v) => {
    // web/train/augment.js parseAugment's words: none, or hflip[:P], rrc[:A-B[:C-D]], flip, shift:N
    if (typeof v !== 'string' || v.length > 256) return `${show(v)} is not text of 1..256 characters`;
    try {
      parseAugment(v);
      return null;
    } catch {
      return `${show(v)} is not none, or a comma list of hflip[:P], rrc[:A-B[:C-D]], flip, shift:N`;
    }
  }),
};
const RULES_OF = {
  vitrine_run: {
    ...RUN_RULES,
    objective: oneOf('mae', 'aim'),
    maskRatio: optional(num(0, 1, { open: true })),
    dataN: optional(int(1, 2 ** 31)),
  },
  vitrine_classify: {
    ...RUN_RULES,
    pool: oneOf('token', 'avg'),
    weightDecay: num(0, 1000),
    labelSmoothing: num(0, 1, { open: true }),
    trainMax: optional(int(1, 2 ** 31 - 1)),
    trainN: optional(int(1, 2 ** 31 - 1)),
    config: optional(object()),
    spec: object(),
  },
};

/**
 * A training checkpoint's metadata (readSafetensorsMeta) -> { run, step, policy, spec }: run is the
 * run's settings under `key` ('vitrine_run' | 'vitrine_classify'), step the steps it has taken
 * (refused when it is past the run's last), policy its checkpointing policy, spec the model
 * (vitrine_run: { kind, config } from model_config; vitrine_classify: run.spec). The engine checks
 * model_config, train_config, rng and the CRCs again when it loads the state.
 */
export function checkCheckpoint(meta, key) {
  if (!isObject(meta)) throw new MetadataError('__metadata__', `${show(meta)} is not an object`);
  if (meta.format !== FORMATS.checkpoint)
    throw new MetadataError('format', `${show(meta.format)} is not ${show(FORMATS.checkpoint)}`);
  if (meta[key] == null) throw new MetadataError(key, 'missing (not a checkpoint of this kind of run)');
  const run = checkFields(parseJson(meta[key], key), RULES_OF[key], key);
  checkFields(
    meta,
    {
      kind: text({ max: 32 }),
      step: text({ max: 10, re: /^\d+$/, what: 'a step count in decimal digits' }),
      grad_checkpointing: optional(text({ max: 64 })),
      model_config: text({ max: 1 << 20 }),
    },
    '__metadata__',
  );
  const step = Number(meta.step);
  if (step > run.steps)
    throw new MetadataError('step', `${step} is past the run's last step (${key}.steps ${run.steps})`);
  let spec;
  if (key === 'vitrine_run') {
    if (meta.kind !== run.objective)
      throw new MetadataError('kind', `${show(meta.kind)} is not the run's objective ${show(run.objective)}`);
    spec = checkSpec(
      { kind: meta.kind, config: parseJson(meta.model_config, 'model_config') },
      'kind',
      ['mae', 'aim'],
      'model_config',
    );
  } else {
    spec = checkSpec(run.spec, `${key}.spec`, ['timm']);
    if (!spec.config) throw new MetadataError(`${key}.spec.config`, 'missing (a classifier run states its config)');
    const nc = spec.config.num_classes;
    if (!(Number.isInteger(nc) && nc >= 2 && nc <= MAX_CLASSES))
      throw new MetadataError(
        `${key}.spec.config.num_classes`,
        `${show(nc)} is not a whole number in 2..${MAX_CLASSES}`,
      );
    if (spec.config.global_pool !== run.pool)
      throw new MetadataError(
        `${key}.spec.config.global_pool`,
        `${show(spec.config.global_pool)} is not the run's pool ${show(run.pool)}`,
      );
  }
  return { run, step, policy: meta.grad_checkpointing ?? null, spec };
}

/**
 * A checkpoint's run settings from its metadata, every field range-checked before anything is made
 * from it (a checkpoint is untrusted input): { run, objective, step, policy }. The fields both kinds
 * of run have always kept are this file's checkCheckpoint; the Trainer's own (gradAccum,
 * minLr, augment, mean / std, frozen, ...) are checked here. Throws a VitrineError naming the
 * damaged field: "<what>: damaged checkpoint metadata: vitrine_run.batch: ...".
 */
export function runFromCheckpoint(meta, what = 'the checkpoint') {
  if (meta.format !== FORMATS.checkpoint) throw bad(what, 'not a vitrine training checkpoint');
  const objective = meta.vitrine_classify != null ? 'classify' : meta.vitrine_run != null ? null : undefined;
  if (objective === undefined)
    throw bad(what, 'a training state without the run settings (vitrine_run / vitrine_classify)');
  const key = objective ? RUN_KEY.classify : RUN_KEY.mae;
  const damaged = (field, s) => Object.assign(bad(what, `damaged checkpoint metadata: ${field}: ${s}`), { field });
  let c;
  try {
    c = checkCheckpoint(meta, key);
  } catch (e) {
    if (e instanceof MetadataError) throw damaged(e.field, e.reason);
    throw e;
  }
  const { run } = c,
    isInt = (v, min, max) => Number.isInteger(v) && v >= min && v <= max,
    num = (v, min, max) => typeof v === 'number' && v >= min && v <= max;
  const show = (k) => `${JSON.stringify(run[k])} is not valid`;
  for (const k of ['dataN', 'trainMax', 'trainN'])
    if (run[k] != null && !isInt(run[k], 1, 2 ** 31 - 1)) throw damaged(`${key}.${k}`, show(k));
  if (run.gradAccum != null && !isInt(run.gradAccum, 1, 65536)) throw damaged(`${key}.gradAccum`, show('gradAccum'));
  for (const [k, max] of [
    ['minLr', 1000],
    ['weightDecay', 1000],
    ['labelSmoothing', 1],
  ])
    if (run[k] != null && !num(run[k], 0, max)) throw damaged(`${key}.${k}`, show(k));
  if (run.mean != null || run.std != null) {
    try {
      checkStats(run.mean, 'mean', false);
      checkStats(run.std, 'std', true);
    } catch (e) {
      throw damaged(`${key}.mean / std`, e.message);
    }
  }
  if (run.augment == null) run.augment = 'none'; // checkpoints written before augmentation existed trained without
  try {
    if (typeof run.augment !== 'string') throw new Error('not text');
    parseAugment(run.augment);
  } catch (e) {
    throw damaged(`${key}.augment`, show('augment'));
  }
  if (run.frozen != null && !(Array.isArray(run.frozen) && run.frozen.every((n) => typeof n === 'string')))
    throw damaged(`${key}.frozen`, 'not a list of names');
  if (run.policy != null && typeof run.policy !== 'string') throw damaged(`${key}.policy`, show('policy'));
  if (objective === 'classify') run.objective = 'classify';
  run.spec = c.spec;
  return { run, objective: run.objective, step: c.step, policy: c.policy };
}
