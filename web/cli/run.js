// run.js: what `vitrine train` runs for every objective (MAE, AIM, classify): the checkpoint a
// --resume names (read, its run settings checked as the untrusted input they are), the training
// loop (progress, a checkpoint every --save-every steps, Ctrl-C / SIGTERM after the step under way)
// and its ending (the last checkpoint, what to say, the exit status).
import { readSafetensorsMeta } from '../safetensors.js';
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
 * The checkpoint `file` of a run of `what` (its settings in the metadata entry `key`):
 * { bytes, meta, run } with run's common fields range-checked (a damaged or crafted checkpoint is
 * one clear message) and its data the folder named again with --data (never a stored path).
 */
export function readCheckpoint(file, key, what, dataGiven) {
  let bytes, meta, run;
  try { bytes = readInput(file); } catch (e) { throw new CliError(`cannot read ${file}: ${why(e)}`); }
  try { meta = readSafetensorsMeta(bytes); } catch (e) { throw new CliError(`${file}: not a safetensors file (${e.message})`); }
  if (meta.format !== 'vitrine-train/1' || !meta[key]) throw new CliError(`${file}: not a checkpoint of ${what}`);
  const bad = (s) => new CliError(`${file}: damaged checkpoint metadata (${s})`);
  try { run = JSON.parse(meta[key]); } catch (e) { throw bad(`${key} is not JSON: ${e.message}`); }
  if (!run || typeof run !== 'object' || Array.isArray(run)) throw bad(`${key} is not an object`);
  const isInt = (v, min, max) => Number.isInteger(v) && v >= min && v <= max;
  for (const [k, min, max] of [['batch', 1, 65536], ['steps', 1, 2000000000], ['warmup', 0, 2000000000]])
    if (!isInt(run[k], min, max)) throw bad(`${k} ${JSON.stringify(run[k])}`);
  if (!(typeof run.lr === 'number' && run.lr >= 0 && run.lr <= 1000)) throw bad(`lr ${JSON.stringify(run.lr)}`);
  if (typeof run.seed !== 'string' || !/^\d{1,16}$/.test(run.seed) || Number(run.seed) > 2 ** 53 - 3) throw bad(`seed ${JSON.stringify(run.seed)}`);
  if (typeof run.data !== 'string' || !run.data) throw bad(`data ${JSON.stringify(run.data)}`);
  if (run.lossFirst != null && typeof run.lossFirst !== 'number') throw bad(`lossFirst ${JSON.stringify(run.lossFirst)}`);
  try { run.data = resumedData(file, run.data, dataGiven); } catch (e) { throw new CliError(e.message, 2); }
  return { bytes, meta, run, bad, isInt };
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
 * was); else the checkpoint of the last step (`save`), and what happened, said. Returns the exit
 * status the run ends with (0, 1 after an error, 130 / 143 after SIGINT / SIGTERM) and whether it
 * stepped.
 */
export function endSteps(loop, { tr, run, outputs, save, resumeFile }) {
  const { startStep, error, interrupted, trainSeconds } = loop, stepped = tr.step > startStep;
  const status = error ? 1 : interrupted === 'SIGINT' ? 130 : interrupted ? 143 : 0;
  if (!stepped) {
    if (error) throw new CliError(`${error.message}\nnothing was written${resumeFile ? ` (${resumeFile} is unchanged)` : ''}`);
    if (interrupted) { say('vitrine train: interrupted before the first step; nothing was written'); return { status, stepped }; }
  }
  if (stepped && outputs.savedStep !== tr.step) save(tr.step);
  if (error) say(`vitrine train: ${error.message}\nthe last good state (step ${tr.step}) is in ${outputs.paths.state}`);
  else if (interrupted) say(`vitrine train: interrupted at step ${tr.step}; continue with --resume ${outputs.paths.state}`);
  const n = tr.step - startStep;
  say(`vitrine train: ${n} steps in ${trainSeconds.toFixed(1)} s (${n ? (n * run.batch / trainSeconds).toFixed(0) : 0} img/s)`);
  return { status, stepped };
}
