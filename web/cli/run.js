// run.js: what `vitrine train` does around the Trainer for every objective (MAE, AIM, classify).
// The training loop itself is the Trainer's (web/train/trainer.js: web/train/session.js in a worker thread,
// the one loop of the project); here: the checkpoint a --resume names (read, its run settings
// checked as the untrusted input they are: runFromCheckpoint), the progress line, a checkpoint
// every --save-every steps (written atomically), Ctrl-C / SIGTERM (the run stops at the next step
// boundary) and the run's ending (the last checkpoint, what to say, the exit status).
import { readSafetensorsMeta } from '../formats/safetensors.js';
import { FORMATS } from '../formats/metadata.js';
import { resumedData } from '../train/node-data.js';
import { runFromCheckpoint } from '../train/session.js';
import { Trainer } from '../train/trainer.js';
import { parseAugment, augmentText } from '../train/augment.js';
import { CliError, decimal } from './args.js';
import { numbers } from './flags.js';
import { OPTIONS, own } from '../train/options.js';
import { readInput, why, Progress, mib } from './io.js';
import { isFolder, readTorchRun } from './export.js';

/** Options a resumed run takes from its checkpoint (what its settings keep, what made its model
 * and its data order): given again, they are a usage error naming their flags. */
export function refuseOnResume(given, obj) {
  const decls = { ...OPTIONS, ...obj.options },
    kept = ['model', 'config', 'epochs', 'warmupEpochs', 'trainMax', 'valSplit', 'hflip', 'scale', 'ratio'];
  const fixed = [...given].filter(
    (k) => kept.includes(k) || (own(decls, k) && decls[k].run && k !== 'policy' && k !== 'wasm'),
  );
  if (fixed.length) {
    const flags = fixed.map((k) =>
      own(decls, k) && decls[k].flag ? `--${decls[k].flag}` : `--${k.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase())}`,
    );
    throw new CliError(
      `--resume takes ${flags.join(', ')} from the checkpoint; leave ${fixed.length > 1 ? 'them' : 'it'} out`,
      2,
    );
  }
}

/**
 * The checkpoint `file` of a run of `what` (its settings in the metadata entry `key`), checked
 * before anything is made from it (web/train/session.js runFromCheckpoint, with web/formats/metadata.js
 * checkCheckpoint: a damaged or crafted checkpoint is one line naming the field):
 * { bytes, meta, run, step, policy, spec }. Its data is the folder named again with --data (never
 * a stored path). A run already at its last step has nothing to resume; requireCrc: a checkpoint
 * without CRC-32s (written before they existed, or with them taken out) is refused.
 */
export function readCheckpoint(file, key, what, dataGiven, { requireCrc = false } = {}) {
  let bytes, meta, c;
  // a folder: a run PyTorch trained (python/vitrine_continue.py), converted to a checkpoint
  if (isFolder(file)) bytes = readTorchRun(file);
  else
    try {
      bytes = readInput(file);
    } catch (e) {
      throw new CliError(`cannot read ${file}: ${why(e)}`);
    }
  try {
    meta = readSafetensorsMeta(bytes);
  } catch (e) {
    throw new CliError(`${file}: not a safetensors file (${e.message})`);
  }
  if (meta.format !== FORMATS.checkpoint || meta[key] == null)
    throw new CliError(`${file}: not a checkpoint of ${what}`);
  try {
    c = runFromCheckpoint(meta, file);
  } catch (e) {
    throw new CliError(e.message);
  }
  if (requireCrc && meta.crc32 == null)
    throw new CliError(`${file}: no CRC-32 of its tensors in the metadata (--require-crc)`);
  if (c.step >= c.run.steps)
    throw new CliError(
      `${file}: the run is complete (step ${c.step} of ${c.run.steps}): nothing to resume, nothing was written`,
    );
  try {
    c.run.data = resumedData(file, c.run.data, dataGiven);
  } catch (e) {
    throw new CliError(e.message, 2);
  }
  return { bytes, meta, ...c, spec: c.run.spec };
}

/** The engine's part of checkpoint `file` (its training state's metadata and CRC-32s), checked with
 * the engine loaded and before a model or data are made for it (Vitrine.checkTrainState). */
export function checkState(vt, file, bytes) {
  try {
    vt.checkTrainState(bytes);
  } catch (e) {
    throw new CliError(`${file}: ${e.message}`);
  }
}

/** A damaged-metadata error of checkpoint `file` naming `field` (for what the engine refuses of it). */
export const damaged = (file, field, message) =>
  new CliError(`${file}: damaged checkpoint metadata: ${field}: ${message}`);

/** --stop-at against the step a resumed run is at (a usage error when there is nothing to do). */
export function stopAtOf(o, run, step) {
  if (o.stopAt != null && o.stopAt <= step)
    throw new CliError(`--stop-at ${o.stopAt}: the run is at step ${step} already`, 2);
  return Math.min(run.steps, o.stopAt ?? run.steps);
}

/** The checkpointing policy: --grad-checkpointing (a usage error naming the flag when the engine
 * refuses it) or the checkpoint's (damaged metadata when refused). */
export function setPolicy(model, policy, { fromFile = null } = {}) {
  try {
    model.setGradCheckpointing(policy);
  } catch (e) {
    if (fromFile) throw damaged(fromFile, 'grad_checkpointing', e.message);
    throw new CliError(`--grad-checkpointing: ${e.message}`, 2);
  }
}

/**
 * The Trainer's error for a run that was not set up, as the command line says it: a policy the
 * engine refuses names --grad-checkpointing (a usage error); anything else is one line.
 */
export function setupError(error) {
  if (error.field === 'policy') return new CliError(`--grad-checkpointing: ${error.message}`, 2);
  if (error.field === 'gradAccum') return new CliError(`--grad-accum-steps: ${error.message}`, 2); // (refused on the WebGPU backend)
  if (error.name === 'OptionError' && /^--/.test(error.field || '')) return new CliError(error.message, 2); // a flag the run refused
  return new CliError(error.message);
}

/** timm's augmentation flags, composed into the run's augment (--augment) by scheduleOptions. */
export const AUGMENT_FLAGS = {
  hflip: {
    value: 'P',
    help: "flip horizontally with probability P (timm's --hflip; adds hflip:P to --augment)",
    parse: decimal(0, 1),
  },
  scale: {
    value: 'A,B',
    help: "RandomResizedCrop of A..B of the area (timm's --scale; adds rrc to --augment)",
    parse: numbers([2]),
  },
  ratio: {
    value: 'A,B',
    help: "RandomResizedCrop aspect ratios A..B (timm's --ratio; default 0.75,1.3333)",
    parse: numbers([2]),
  },
};

/** The Trainer's schedule and augmentation options of the flags (a usage error for what does not go together). */
export function scheduleOptions(o) {
  if (o.epochs != null && o.steps != null) throw new CliError('--steps and --epochs: give one', 2);
  if (o.epochs === 0) throw new CliError("--epochs: '0' trains nothing", 2);
  if (o.warmupEpochs != null && o.warmup != null) throw new CliError('--warmup and --warmup-epochs: give one', 2);
  if ((o.mean == null) !== (o.std == null)) throw new CliError('--mean and --std: give both', 2);
  if (o.ratio && !o.scale && !/rrc/.test(o.augment || ''))
    throw new CliError('--ratio needs --scale (or rrc in --augment)', 2);
  let augment = o.augment;
  const extra = [
    o.hflip ? `hflip:${o.hflip}` : null,
    o.scale ? `rrc:${o.scale[0]}-${o.scale[1]}${o.ratio ? `:${o.ratio[0]}-${o.ratio[1]}` : ''}` : null,
  ].filter(Boolean);
  if (extra.length) augment = [augment && augment !== 'none' ? augment : null, ...extra].filter(Boolean).join(',');
  if (augment != null) {
    try {
      augment = augmentText(parseAugment(augment));
    } catch (e) {
      throw new CliError(`--augment: ${e.message}`, 2);
    }
  }
  const out = {
    epochs: o.epochs,
    warmup: o.warmup,
    warmupEpochs: o.warmupEpochs,
    minLr: o.minLr,
    gradAccum: o.gradAccum,
    weightDecay: o.weightDecay,
    augment,
    mean: o.mean,
    std: o.std,
    imgSize: o.imgSize,
    lr: o.lr,
  };
  Object.keys(out).forEach((k) => out[k] === undefined && delete out[k]);
  return out;
}

/** The data a run reads, as the Trainer takes it: Fashion-MNIST's train split or a folder. */
export const dataOption = (data) => (data === 'fashion-mnist' ? 'fashion-mnist' : { kind: 'folder', dir: data });

const say = (s) => process.stderr.write(s + '\n');
const POS_EMBED_SAYS = {
  none: 'pos_embed: not loaded',
  sincos_frozen: "pos_embed: lightly's sin-cos table, frozen (as lightly's MAE / AIM keep it)",
  trainable: 'pos_embed: loaded, trainable',
  learned_now_trainable:
    "pos_embed: a learned one (not the sin-cos table): trainable (lightly's objective would freeze a sin-cos table)",
};

/** What the weights a run starts from gave: the report of Model.initFrom, in lines. */
export function sayInit(r, file) {
  say(
    `vitrine train: --init ${file}: ${r.source}: ${r.loaded} tensors loaded (trainable unless noted; ${r.resampled} resampled), ${r.skipped} skipped, ` +
      `${r.missing} encoder parameters not in the file (kept as initialised)`,
  );
  for (const n of r.notes) say(`  ${n}`);
  say(`  ${POS_EMBED_SAYS[r.posEmbed] || r.posEmbed}`);
}

/**
 * Runs the Trainer with `options` and says how it goes: a progress line (with memory when
 * `memory`), the checkpoint written every `saveEvery` steps to outputs.paths.state, Ctrl-C /
 * SIGTERM: abort (the run stops at the next step boundary). onReady(info) hears the run set up
 * (its model, data, the init report). Returns { result, error, interrupted, engine, info }: result
 * is what the run left (null when it failed before a step).
 */
export async function runTrainer({ options, outputs, saveEvery, warn, onReady = () => {}, memory = true }) {
  let interrupted = null,
    bar = null,
    rate = 0,
    mem = '',
    engine = null,
    info = null,
    trainer = null;
  const onSig = (sig) => {
    interrupted = sig;
    if (trainer) trainer.abort();
  };
  process.on('SIGINT', onSig);
  process.on('SIGTERM', onSig);
  let result = null,
    error = null;
  try {
    trainer = new Trainer({
      ...options,
      checkpointEvery: saveEvery,
      onEngine: (e) => {
        engine = e;
      },
      onLog: ({ text }) => say(`vitrine train: ${text}`),
      onReady: (i) => {
        info = i;
        bar = new Progress(i.steps);
        onReady(i, engine);
      },
      onStep: (e) => {
        rate = rate ? 0.9 * rate + 0.1 * e.imagesPerSecond : e.imagesPerSecond;
        if (memory && e.memory) {
          const m = e.memory;
          mem = ` | mem ${mib(m.planned ? m.planned.total : 0)} MiB planned (act ${mib(m.measured.activations)}), wasm ${mib(m.wasm)} MiB`;
        }
        const stop = options.stopAt != null ? Math.min(options.stopAt, e.steps) : e.steps;
        bar.update(
          e.step,
          Progress.text(e, rate, e.epoch, ((stop - e.step) * info.run.batch * (info.run.gradAccum || 1)) / rate, mem),
          e.step === stop,
        );
      },
      onCheckpoint: ({ step, bytes }) => {
        try {
          outputs.write(outputs.paths.state, bytes);
          outputs.savedStep = step;
        } catch (e) {
          warn(`${e.message}; ${outputs.stateNote()}`);
        }
      },
    });
    result = await trainer.done;
  } catch (e) {
    error = e;
    result = e.result || null;
  } finally {
    if (bar) bar.done();
    if (trainer) trainer.dispose();
    process.off('SIGINT', onSig);
    process.off('SIGTERM', onSig);
  }
  return {
    result,
    error,
    interrupted: interrupted || (result && result.status === 'aborted' ? 'SIGINT' : null),
    engine,
    info,
  };
}

/**
 * After the run: nothing written when it took no step (a resumed checkpoint stays as it was);
 * else the checkpoint of its last step, and what happened, said. A checkpoint that cannot be
 * written (a full disk, a state the engine will not save: result.saveError) does not stop the
 * caller from writing the smaller results of the same steps: it is returned as `saveError` (said
 * here, exit status 1). Returns { status (0, 1 after an error, 130 / 143 after SIGINT / SIGTERM),
 * stepped, saveError }.
 */
export function endRun({ result, error, interrupted }, { outputs, resumeFile, batch, info }) {
  const stepped = !!(result && (result.checkpoint || result.saveError));
  let status = error ? 1 : interrupted === 'SIGINT' ? 130 : interrupted ? 143 : 0,
    saveError = null;
  if (error && !info) throw setupError(error); // the run was not set up: nothing to write
  if (!stepped) {
    const kept = `nothing was written${resumeFile ? ` (${resumeFile} is unchanged)` : ''}`;
    if (error) throw new CliError(`${error.message}\n${kept}`);
    if (interrupted) {
      say(`vitrine train: interrupted before the first step; ${kept}`);
      return { status, stepped, saveError };
    }
    throw new CliError(`no step was taken; ${kept}`);
  }
  // (a state an update made non-finite is refused by the engine: its message says what is kept)
  if (result.saveError) saveError = new CliError(`${result.saveError.message}; ${outputs.stateNote()}`);
  else if (outputs.savedStep !== result.step) {
    try {
      outputs.write(outputs.paths.state, result.checkpoint);
      outputs.savedStep = result.step;
    } catch (e) {
      saveError = new CliError(`${e.message}; ${outputs.stateNote()}`);
    }
  }
  if (saveError) {
    status = status || 1;
    say(`vitrine train: ${saveError.message}`);
  }
  if (error)
    say(
      `vitrine train: ${error.message}${saveError ? '' : `\nthe last good state (step ${result.step}) is in ${outputs.paths.state}`}`,
    );
  else if (interrupted)
    say(
      `vitrine train: interrupted at step ${result.step}; ${saveError ? 'its checkpoint could not be written' : `continue with --resume ${outputs.paths.state}`}`,
    );
  const n = result.trained,
    secs = result.trainSeconds;
  say(`vitrine train: ${n} steps in ${secs.toFixed(1)} s (${n ? ((n * batch) / secs).toFixed(0) : 0} img/s)`);
  return { status, stepped, saveError };
}
