// objectives/index.js: the registry of training objectives -- what a run trains, as src/objective.h
// is the engine's: one module per objective (mae.js, aim.js, classify.js) that says its options with
// their defaults, the model it makes, its trainer settings, its step, what it keeps in a checkpoint
// and what its run makes and reports. train(), the Session, the CLI's choices and --help, `plan`,
// `trace` and the checks of a checkpoint's run settings all read it; adding an objective is adding a
// module (registerObjective(url) for one outside this folder: the workers and the CLI load it too).
//
// An objective (the fields a module's default export has; those marked ? may be left out):
//   name          'mae': what train({ objective }) and --objective take
//   summary       one line (--help, errors that list the objectives)
//   labels        true: it trains on classes (its data must have them; its step takes labels)
//   runKey?       the checkpoint metadata entry its run settings go in (default 'vitrine_run';
//                 the entry keeps `objective` when several objectives share it)
//   countKey?     the run field that keeps how many images it trains on (default 'dataN')
//   masks?        true: its step masks a share of the patches (maskRatio: MAE)
//   specInState?  true: the model comes back from the checkpoint's model_config (MAE / AIM), else
//                 the run settings keep the spec
//   defaults      its defaults of the common options (web/train/options.js: batch, steps, val, ...)
//                 and of its own; lr may be a function of the images per optimizer step
//   options?      its own options: { name: OptionDecl } (options.js's form)
//   runRules?     { field: check } of its other fields in a checkpoint's run settings (check(v):
//                 null, or what is wrong); checkSpec?(spec, run, key) of the spec the run keeps
//   report?       what its run reports, by name: 'encoder' (kNN, reconstructions) or 'classifier'
//                 (held-out top-1, confusion); the CLI says the loss and its files for any other
//   spec(o, ctx)  the model of a new run, and of a `plan` / `trace` of its step (createModel's
//                 spec), from its options (ctx: { classes, weights: { meta, name } | null, run })
//   settings(o)   its own fields of a new run's settings (what a checkpoint keeps)
//   trainer(run)  Model.trainerInit's options of a run (lr, warm-up, steps, seeds, ...)
//   step?(model, batch)  one training step on the model's backend: { images, labels, n, step, run }
//                 -> Promise<loss>; default: the engine's step (labels when `labels`)
//   weights?(session)    the bytes the run makes (default: the model's safetensors)
//   evaluate?(session, chunk), predict?(session, images, opts)   what its run can measure and answer
//   torch?        its run as PyTorch continues it (web/train/torch-run.js; python/vitrine_continue.py):
//                 { module: the state_dict's module, encoder(modelConfig): the encoder's config,
//                 parts(modelConfig): the module's other sizes, loss(trainConfig, modelConfig): the
//                 loss settings ({ kind, ... }), lossRanges: { train_config field: [lo, hi] } read
//                 back from loss.<field>, weightsMeta?(model): the model file's extra metadata }
import { VitrineError } from '../../errors.js';
import { OPTIONS, OptionError, own, closest, checkOptions } from '../options.js';
import mae from './mae.js';
import aim from './aim.js';
import classify from './classify.js';

const REGISTRY = new Map();
const MODULES = new Map(); // name -> the URL of a module registered from outside this folder

const REQUIRED = ['name', 'summary', 'defaults', 'spec', 'settings', 'trainer'];

/** Adds an objective: its definition (a module's default export). Throws when it lacks what every
 * objective says, or when its name is taken. */
export function addObjective(def) {
  const missing = REQUIRED.filter((k) => def == null || def[k] == null);
  if (missing.length)
    throw new VitrineError(`objective ${def && def.name ? `'${def.name}'` : ''}: no ${missing.join(', ')}`, -1);
  if (typeof def.name !== 'string' || !/^[a-z][a-z0-9-]{0,31}$/.test(def.name))
    throw new VitrineError(`objective name ${JSON.stringify(def.name)}: lower-case letters, digits, '-'`, -1);
  if (REGISTRY.has(def.name) && REGISTRY.get(def.name) !== def)
    throw new VitrineError(`objective '${def.name}' is registered already`, -1);
  REGISTRY.set(def.name, Object.freeze({ runKey: 'vitrine_run', countKey: 'dataN', labels: false, ...def }));
  return REGISTRY.get(def.name);
}

/** Registers the objective a module exports (its default export), by the module's URL (or, in
 * Node, file path): train() hands the URL to its worker, which imports it too. Returns its name. */
export async function registerObjective(url) {
  let href = String(url);
  if (!/^[a-z][a-z0-9+.-]*:/i.test(href) && typeof process !== 'undefined' && process.versions?.node) {
    const [{ pathToFileURL }, { resolve }] = await Promise.all([
      import(/* @vite-ignore */ 'node:url'),
      import(/* @vite-ignore */ 'node:path'),
    ]);
    href = pathToFileURL(resolve(href)).href;
  }
  let mod;
  try {
    mod = await import(/* @vite-ignore */ /* webpackIgnore: true */ href);
  } catch (e) {
    throw new VitrineError(`objective module ${url}: cannot import it (${e.message})`, -1);
  }
  const def = addObjective(mod.default);
  MODULES.set(def.name, href);
  return def.name;
}

/** The URLs of the modules registered from outside (what a worker imports before a run). */
export const objectiveModules = () => [...MODULES.values()];

/** The registered objectives' names, in registration order. */
export const objectiveNames = () => [...REGISTRY.keys()];

/** The objective called `name`: own names only, a VitrineError naming the objectives (and the
 * closest one) otherwise. what: the option as the caller names it ('objective', '--objective'). */
export function objectiveNamed(name, what = 'objective') {
  if (typeof name === 'string' && REGISTRY.has(name)) return REGISTRY.get(name);
  const near = typeof name === 'string' ? closest(name, objectiveNames()) : null;
  throw new OptionError(
    what,
    `${JSON.stringify(name)} is not an objective (${objectiveNames().join(', ')}${near ? `; did you mean ${near}?` : ''})`,
  );
}

/** The run-settings keys objectives keep their settings under. */
export const runKeys = () => [...new Set([...REGISTRY.values()].map((o) => o.runKey))];

/** The default of option `key` for objective `obj`: its own, else the common one (web/train/options.js). */
export function defaultOf(obj, key, common) {
  if (own(obj.defaults, key)) return obj.defaults[key];
  return common && own(common, key) ? common[key].default : undefined;
}

for (const def of [mae, aim, classify]) addObjective(def);

/** The default of option `key` in a run of objective `obj` (its own, else options.js's). */
export const runDefault = (obj, key) => defaultOf(obj, key, OPTIONS);

/** A run's options checked (web/train/options.js checkOptions) for the objective they name (a
 * resumed run's: the checkpoint's, known once it is read). Returns the objective, or null. */
export function checkRunOptions(o) {
  const obj = o && o.objective != null ? objectiveNamed(o.objective) : null;
  checkOptions(o, obj, [...REGISTRY.values()]);
  if (!obj && o.resume == null) throw new OptionError('objective', `give one (${objectiveNames().join(', ')})`);
  return obj;
}
