// classifier.js: what `vitrine train` reports for an objective that trains a classifier (report
// 'classifier': classify) -- the held-out top-1 and confusion matrix the run measured (the
// Trainer's evaluation, in its worker), the classifier's weights (timm keys, head; class names and
// normalisation in the metadata, what `vitrine predict` reads), and the report (text, and with
// --json one line).
import path from 'node:path';
import { CliError } from '../args.js';
import { backendNote } from '../engine.js';

function confusionText(conf, classes) {
  const w = Math.max(5, ...conf.flat().map((v) => String(v).length)) + 1;
  const short = classes.map((c) => c.slice(0, w - 1));
  let s = `confusion (rows: true, columns: predicted)\n${' '.repeat(14)}${short.map((c) => c.padStart(w)).join('')}\n`;
  conf.forEach((row, i) => {
    s += `${classes[i].slice(0, 13).padEnd(14)}${row.map((v) => String(v).padStart(w)).join('')}\n`;
  });
  return s;
}

/** The report of a classifier's run (web/cli/train.js calls these). */
export default {
  files: { weights: 'classifier.safetensors', state: 'classify-checkpoint.safetensors' },
  options: {},
  keepsEngine: false,
  noEval: (o) => !!o.noEval,
  startLine({ o, resumeBytes }, i, engine) {
    const r = i.run,
      { img, chans, dim, depth } = i.dims;
    return (
      `vitrine train: classify ${r.preset || (r.init && !r.config && !resumeBytes ? 'encoder of --init' : 'config')} ${img}x${img}x${chans} dim ${dim} depth ${depth}, ` +
      `${i.classes.length} classes, pool ${r.pool}, ${i.images} training images (${r.data}), ${i.heldOut} held out, batch ${r.batch}${r.gradAccum > 1 ? ` x ${r.gradAccum} accumulated` : ''}, ` +
      `steps ${i.step ? i.step + '..' : ''}${Math.min(r.steps, o.stopAt ?? r.steps)}/${r.steps}, lr ${r.lr}${r.minLr ? ` -> ${r.minLr}` : ''}, label smoothing ${r.labelSmoothing}, augment ${r.augment}, ` +
      `normalisation ${i.normalization.source}, init ${r.init ? path.basename(r.init) : 'random'}, grad checkpointing ${i.policy}, wasm ${engine.build}` +
      backendNote(engine, o.backend)
    );
  },
  onReady(ctx, i, engine) {
    if (!i.heldOut) ctx.warn('no held-out images (a folder needs at least 5), so no evaluation');
    ctx.say(this.startLine(ctx, i, engine));
  },
  async finish(ctx) {
    const { o, loop, outputs, say, saveError, info, t0 } = ctx,
      { result } = loop,
      r = result.run,
      classes = result.classes,
      ev = result.eval;
    if (result.weights) {
      // (none when the engine would not save the state: an update made it non-finite)
      try {
        outputs.write(outputs.paths.weights, result.weights);
      } catch (e) {
        throw new CliError(`${e.message} (${outputs.stateNote()})`);
      }
    }
    if (loop.error || saveError)
      say(`vitrine train: wrote what it could from step ${result.step}: ${outputs.wrote.join(', ') || 'nothing'}`);
    if (ev) say(`vitrine train: evaluation of ${ev.n} images ${ev.seconds.toFixed(1)} s`);
    const seconds = (performance.now() - t0) / 1000,
      done = result.trained,
      trainSeconds = result.trainSeconds,
      lastLoss = result.lossLast ?? r.lossFirst ?? null;
    const initName = r.init ? path.basename(r.init) : 'random',
      fmnist = r.data === 'fashion-mnist';
    process.stdout.write(
      `${result.step >= r.steps ? 'trained' : 'stopped at'} step ${result.step}/${r.steps} (classify, ${classes.length} classes, batch ${r.batch}, ` +
        `init ${initName}) in ${seconds.toFixed(1)} s\n` +
        `loss ${r.lossFirst != null ? r.lossFirst.toFixed(4) : 'n/a'} (first step) -> ${lastLoss != null ? lastLoss.toFixed(4) : 'n/a'} (last)\n` +
        (ev
          ? `top-1 ${(100 * ev.top1).toFixed(2)}% on ${ev.n} held-out images (${o.valDir ? o.valDir : fmnist ? 'the Fashion-MNIST test set' : 'every 5th image'})\n` +
            confusionText(ev.confusion, classes)
          : '') +
        `classifier weights (timm keys, head)  ${outputs.paths.weights}\ntraining checkpoint                   ${outputs.paths.state}\n`,
    );
    if (o.json)
      process.stdout.write(
        JSON.stringify({
          objective: 'classify',
          steps: result.step,
          loss_first: r.lossFirst ?? null,
          loss_last: lastLoss,
          top1: ev ? ev.top1 : null,
          eval_images: ev ? ev.n : 0,
          classes,
          confusion: ev ? ev.confusion : null,
          train_images_per_second: done
            ? Number(((done * r.batch * (r.gradAccum || 1)) / trainSeconds).toFixed(1))
            : null,
          train_seconds: Number(trainSeconds.toFixed(3)),
          seconds: Number(seconds.toFixed(3)),
          init: r.init ?? null,
          init_report: info ? info.init : null,
          normalization: { mean: r.mean ?? null, std: r.std ?? null },
          weights: outputs.paths.weights,
          checkpoint: outputs.paths.state,
        }) + '\n',
      );
  },
};
