// plain.js: what `vitrine train` reports for an objective that names no report of its own (one
// registered from outside, say): the weights its run makes, its checkpoint, the loss and the time
// (text, and with --json one line).
import { backendNote } from '../engine.js';

/** The report of any other objective's run (web/cli/train.js calls these). */
export default {
  files: { weights: 'weights.safetensors', state: 'checkpoint.safetensors' },
  options: {},
  keepsEngine: false,
  noEval: (o) => !!o.noEval,
  startLine({ o }, i, engine) {
    const r = i.run,
      { img, chans, dim, depth } = i.dims;
    return (
      `vitrine train: ${r.objective} ${r.preset || 'config'} ${img}x${img}x${chans} dim ${dim} depth ${depth}, ${i.images} images (${r.data}), ` +
      `batch ${r.batch}, steps ${i.step ? i.step + '..' : ''}${Math.min(r.steps, o.stopAt ?? r.steps)}/${r.steps}, lr ${r.lr}, ` +
      `normalisation ${i.normalization.source}, grad checkpointing ${i.policy}, wasm ${engine.build}` +
      backendNote(engine, o.backend)
    );
  },
  onReady(ctx, i, engine) {
    ctx.say(this.startLine(ctx, i, engine));
  },
  async finish(ctx) {
    const { o, loop, outputs, say, t0 } = ctx,
      { result } = loop,
      r = result.run;
    if (result.weights) outputs.write(outputs.paths.weights, result.weights);
    else say(`vitrine train: wrote what it could from step ${result.step}: ${outputs.wrote.join(', ') || 'nothing'}`);
    const seconds = (performance.now() - t0) / 1000,
      lastLoss = result.lossLast ?? r.lossFirst ?? null,
      fmt = (v) => (v != null ? v.toFixed(4) : 'n/a');
    process.stdout.write(
      `${result.step >= r.steps ? 'trained' : 'stopped at'} step ${result.step}/${r.steps} (${r.objective}, batch ${r.batch}) in ${seconds.toFixed(1)} s\n` +
        `loss ${fmt(r.lossFirst)} (first step) -> ${fmt(lastLoss)} (last)\n` +
        (result.weights ? `weights              ${outputs.paths.weights}\n` : '') +
        `training checkpoint  ${outputs.paths.state}\n`,
    );
    if (o.json)
      process.stdout.write(
        JSON.stringify({
          objective: r.objective,
          steps: result.step,
          loss_first: r.lossFirst ?? null,
          loss_last: lastLoss,
          train_seconds: Number(result.trainSeconds.toFixed(3)),
          seconds: Number(seconds.toFixed(3)),
          weights: result.weights ? outputs.paths.weights : null,
          checkpoint: outputs.paths.state,
        }) + '\n',
      );
  },
};
