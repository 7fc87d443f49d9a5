// run.js: what `vitrine train` runs for every objective (MAE, AIM, classify): the checkpoint a
// --resume names (read, its run settings checked as the untrusted input they are), the training
// loop (progress, a checkpoint every --save-every steps, Ctrl-C / SIGTERM after the step under way)
// and its ending (the last checkpoint, what to say, the exit status).
import { readSafetensorsMeta } from '../safetensors.js';
import { checkCheckpoint, MetadataError, FORMATS } from '../metadata.js';
import { resumedData } from '../data.js';
import { CliError } from './args.js';
import { readInput, why, Progress, mib } from './io.js';

/** Options a resumed run takes from its checkpoint: given again, they are a usage error. */
export function refuseOnResume(given, keys) {
  const fixed = keys.filter((k) => given.has(k));
  if (fixed.length) {
    const flags = fixed.map((k) => '--' + k.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase()));
    throw new CliError(`--resume takes ${flags.join(', ')} from the checkpoint; leave ${fixed.length > 1 ? 'them' : 'it'} out`, 2);
  }
}

/**
 * The checkpoint `file` of a run of `what` (its settings in the metadata entry `key`), checked
 * before anything is made from it (web/metadata.js checkCheckpoint: a damaged or crafted
 * checkpoint is one line naming the field): { bytes, meta, run, step, policy, spec }. Its data is
 * the folder named again with --data (never a stored path). A run already at its last step has
 * nothing to resume; requireCrc: a checkpoint without CRC-32s (written before they existed, or
 * with them taken out) is refused.
 */
export function readCheckpoint(file, key, what, dataGiven, { requireCrc = false } = {}) {
  let bytes, meta, c;
  try { bytes = readInput(file); } catch (e) { throw new CliError(`cannot read ${file}: ${why(e)}`); }
  try { meta = readSafetensorsMeta(bytes); } catch (e) { throw new CliError(`${file}: not a safetensors file (${e.message})`); }
  if (meta.format !== FORMATS.checkpoint || meta[key] == null) throw new CliError(`${file}: not a checkpoint of ${what}`);
  try { c = checkCheckpoint(meta, key); } catch (e) {
    if (e instanceof MetadataError) throw new CliError(`${file}: damaged checkpoint metadata: ${e.message}`);
    throw e;
  }
  if (requireCrc && meta.crc32 == null) throw new CliError(`${file}: no CRC-32 of its tensors in the metadata (--require-crc)`);
  if (c.step >= c.run.steps) throw new CliError(`${file}: the run is complete (step ${c.step} of ${c.run.steps}): nothing to resume, nothing was written`);
  try { c.run.data = resumedData(file, c.run.data, dataGiven); } catch (e) { throw new CliError(e.message, 2); }
  return { bytes, meta, ...c };
}

/** The engine's part of checkpoint `file` (its training state's metadata and CRC-32s), checked with
 * the engine loaded and before a model or data are made for it (Vitrine.checkTrainState). */
export function checkState(vt, file, bytes) {
  try { vt.checkTrainState(bytes); } catch (e) { throw new CliError(`${file}: ${e.message}`); }
}

/** A damaged-metadata error of checkpoint `file` naming `field` (for what the engine refuses of it). */
export const damaged = (file, field, message) => new CliError(`${file}: damaged checkpoint metadata: ${field}: ${message}`);

/** --stop-at against the step a resumed run is at (a usage error when there is nothing to do). */
export function stopAtOf(o, run, step) {
  if (o.stopAt != null && o.stopAt <= step) throw new CliError(`--stop-at ${o.stopAt}: the run is at step ${step} already`, 2);
  return Math.min(run.steps, o.stopAt ?? run.steps);
}

/** The checkpointing policy: --grad-checkpointing (a usage error naming the flag when the engine
 * refuses it) or the checkpoint's (damaged metadata when refused). */
export function setPolicy(model, policy, { fromFile = null } = {}) {
  try { model.setGradCheckpointing(policy); } catch (e) {
    if (fromFile) throw damaged(fromFile, 'grad_checkpointing', e.message);
    throw new CliError(`--grad-checkpointing: ${e.message}`, 2);
  }
}

const say = (s) => process.stderr.write(s + '\n');

/**
 * The training loop: steps of `tr` (a TrainingRun / ClassifyRun) up to stopAt, with a progress
 * line (memory too when `memory`), `save(step)` every saveEvery steps; Ctrl-C / SIGTERM stop it
 * after the step under way. Returns { startStep, error, interrupted, lastLoss, trainSeconds }.
 */
export async function trainSteps({ tr, model, run, stopAt, saveEvery, save, warn, memory = true }) {
  let interrupted = null;
  const onSig = (sig) => { interrupted = sig; };
  process.on('SIGINT', onSig);
  process.on('SIGTERM', onSig);
  const startStep = tr.step, bar = new Progress(run.steps), t0 = performance.now();
  let error = null, rate = 0, mem = '', lastLoss = run.lossFirst ?? null;
  try {
    while (tr.step < stopAt && !interrupted) {
      let r;
      try { r = await tr.trainOne(); } catch (e) { error = e; break; } // (async on --backend webgpu)
      if (run.lossFirst == null) run.lossFirst = r.loss;
      lastLoss = r.loss;
      rate = rate ? 0.9 * rate + 0.1 * (run.batch / r.seconds) : run.batch / r.seconds;
      if (memory && (r.step % 20 === 1 || !mem)) {
        const m = model.memory();
        mem = ` | mem ${mib(m.planned ? m.planned.total : 0)} MiB planned (act ${mib(m.used.activations)}), wasm ${mib(m.linear)} MiB`;
      }
      bar.update(r.step, Progress.text(r, rate, tr.epoch, (stopAt - r.step) * run.batch / rate, mem), r.step === stopAt);
      if (r.step % saveEvery === 0 && r.step < stopAt) {
        try { save(r.step); } catch (e) { warn(e.message); }
      }
      if (r.step % 10 === 0) await new Promise(setImmediate); // let signals in
    }
  } finally {
    bar.done();
    process.off('SIGINT', onSig);
    process.off('SIGTERM', onSig);
  }
  return { startStep, error, interrupted, lastLoss, trainSeconds: (performance.now() - t0) / 1000 };
}

/**
 * After the loop: nothing written when this run took no step (a resumed checkpoint stays as it
 * was); else the checkpoint of the last step (`save`), and what happened, said. A checkpoint that
 * cannot be written (a full disk, a state the engine will not save) does not stop the caller from
 * writing the smaller results of the same steps: it is returned as `saveError` (said here, exit
 * status 1). Returns { status (0, 1 after an error, 130 / 143 after SIGINT / SIGTERM), stepped, saveError }.
 */
export function endSteps(loop, { tr, run, outputs, save, resumeFile }) {
  const { startStep, error, interrupted, trainSeconds } = loop, stepped = tr.step > startStep;
  let status = error ? 1 : interrupted === 'SIGINT' ? 130 : interrupted ? 143 : 0, saveError = null;
  if (!stepped) {
    const kept = `nothing was written${resumeFile ? ` (${resumeFile} is unchanged)` : ''}`;
    if (error) throw new CliError(`${error.message}\n${kept}`);
    if (interrupted) { say(`vitrine train: interrupted before the first step; ${kept}`); return { status, stepped, saveError }; }
    throw new CliError(`no step was taken; ${kept}`);
  }
  if (outputs.savedStep !== tr.step) try { save(tr.step); } catch (e) { saveError = e; status = status || 1; }
  // (a state an update made non-finite is refused by the engine: the save's message says what is kept)
  if (saveError) say(`vitrine train: ${saveError.message}`);
  if (error) say(`vitrine train: ${error.message}${saveError ? '' : `\nthe last good state (step ${tr.step}) is in ${outputs.paths.state}`}`);
  else if (interrupted) say(`vitrine train: interrupted at step ${tr.step}; ${saveError ? 'its checkpoint could not be written' : `continue with --resume ${outputs.paths.state}`}`);
  const n = tr.step - startStep;
  say(`vitrine train: ${n} steps in ${trainSeconds.toFixed(1)} s (${n ? (n * run.batch / trainSeconds).toFixed(0) : 0} img/s)`);
  return { status, stepped, saveError };
}
