// checkpoint.js: a training checkpoint's run settings, checked as the untrusted input they are
// before anything is made from them. Each option a run keeps is checked as train() checks it (its
// declaration in web/train/options.js or its objective's module); the engine's entries (format,
// kind, step, grad_checkpointing, model_config) with web/formats/metadata.js's rules. An objective's
// settings are kept under its runKey: `vitrine_run` (MAE / AIM, with `objective`) or
// `vitrine_classify` (a classifier), the keys vitrine has always written.
import { VitrineError } from '../errors.js';
import {
  MetadataError,
  show,
  parseJson,
  num,
  text,
  oneOf,
  optional,
  checkFields,
  checkSpec,
  isObject,
  FORMATS,
} from '../formats/metadata.js';
import { OPTIONS, own } from './options.js';
import { objectiveNamed, objectiveNames, runKeys } from './objectives/index.js';

/** What every run's settings keep besides its options: where its data and weights came from, the
 * model by name, its first loss, the parameters it does not train. */
const RUN_FIELDS = {
  data: text({ what: "'fashion-mnist' or a folder's path" }),
  preset: optional(text({ max: 200 })),
  init: optional(text()),
  lossFirst: optional(num(-Infinity, Infinity)),
  frozen: optional((v) =>
    Array.isArray(v) && v.every((n) => typeof n === 'string') ? null : `${show(v)} is not a list of names`,
  ),
};

// the objectives that keep their settings under `key`
const objectivesOf = (key) => objectiveNames().filter((n) => objectiveNamed(n).runKey === key);

/** The run settings `run` (parsed from the entry `key`) checked: every option it keeps against its
 * declaration, then the fields every run keeps and the objective's own. Returns the objective. */
function checkRunSettings(run, key) {
  if (!isObject(run)) throw new MetadataError(key, `${show(run)} is not an object`);
  const names = objectivesOf(key);
  let obj;
  if (names.length > 1 || own(run, 'objective')) {
    const why = oneOf(...names)(run.objective);
    if (why) throw new MetadataError(`${key}.objective`, why);
    obj = objectiveNamed(run.objective);
  } else obj = objectiveNamed(names[0]);
  const decls = { ...OPTIONS, ...obj.options };
  for (const [name, d] of Object.entries(decls)) {
    if (!d.run) continue;
    const v = own(run, name) ? run[name] : undefined;
    if (v == null) {
      if (d.run === 'always') throw new MetadataError(`${key}.${name}`, 'missing');
      continue;
    }
    const why = (d.stored || d.type.check)(v);
    if (why) throw new MetadataError(`${key}.${name}`, why);
  }
  if ((run.mean == null) !== (run.std == null))
    throw new MetadataError(`${key}.${run.mean == null ? 'mean' : 'std'}`, 'missing (mean and std go together)');
  checkFields(run, { ...RUN_FIELDS, ...obj.runRules }, key);
  return obj;
}

/**
 * A training checkpoint's metadata (readSafetensorsMeta) -> { run, step, policy, spec, objective }:
 * run is the run's settings under `key` ('vitrine_run' | 'vitrine_classify' | another objective's),
 * step the steps it has taken (refused when it is past the run's last), policy its checkpointing
 * policy, spec the model (an objective that keeps it in the state, as MAE / AIM: { kind, config }
 * from model_config; else run.spec). The engine checks model_config, train_config, rng and the
 * CRCs again when it loads the state.
 */
export function checkCheckpoint(meta, key) {
  if (!isObject(meta)) throw new MetadataError('__metadata__', `${show(meta)} is not an object`);
  if (meta.format !== FORMATS.checkpoint)
    throw new MetadataError('format', `${show(meta.format)} is not ${show(FORMATS.checkpoint)}`);
  if (!own(meta, key) || meta[key] == null)
    throw new MetadataError(key, 'missing (not a checkpoint of this kind of run)');
  const run = parseJson(meta[key], key);
  const obj = checkRunSettings(run, key);
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
  if (obj.specInState) {
    if (meta.kind !== obj.name)
      throw new MetadataError('kind', `${show(meta.kind)} is not the run's objective ${show(obj.name)}`);
    spec = checkSpec(
      { kind: meta.kind, config: parseJson(meta.model_config, 'model_config') },
      'kind',
      [obj.name],
      'model_config',
    );
  } else {
    spec = checkSpec(run.spec, `${key}.spec`, ['timm']);
    if (obj.checkSpec) obj.checkSpec(spec, run, key);
  }
  return { run, step, policy: meta.grad_checkpointing ?? null, spec, objective: obj };
}

/**
 * A checkpoint's run settings from its metadata, every field checked before anything is made from
 * it (a checkpoint is untrusted input): { run, objective, step, policy } (run.objective and
 * run.spec filled in). Throws a VitrineError naming the damaged field: "<what>: damaged checkpoint
 * metadata: vitrine_run.batch: ...".
 */
export function runFromCheckpoint(meta, what = 'the checkpoint') {
  const bad = (m) => new VitrineError(`${what}: ${m}`, -3);
  if (!isObject(meta) || meta.format !== FORMATS.checkpoint) throw bad('not a vitrine training checkpoint');
  // an objective's own entry before the shared one (a crafted file with both: the classifier's)
  const keys = runKeys().sort((a, b) => (a === 'vitrine_run') - (b === 'vitrine_run'));
  const key = keys.find((k) => own(meta, k) && meta[k] != null);
  if (!key) throw bad(`a training state without the run settings (${keys.join(' / ')})`);
  let c;
  try {
    c = checkCheckpoint(meta, key);
  } catch (e) {
    if (e instanceof MetadataError)
      throw Object.assign(bad(`damaged checkpoint metadata: ${e.field}: ${e.reason}`), { field: e.field });
    throw e;
  }
  const run = { ...c.run, objective: c.objective.name, spec: c.spec };
  return { run, objective: run.objective, step: c.step, policy: c.policy };
}
