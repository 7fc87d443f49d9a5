// predict.js: `vitrine predict` -- the top classes with probabilities for each image, from a
// classifier of `vitrine train --objective classify` (or the demo's "Download classifier"). Images
// go through the pixel pipeline (web/images.js) as they did in training; an image that cannot be
// read or decoded is named and skipped, the others still predicted (exit status 1 then).
import { readRegularFile, decodeImage, DataError } from '../data.js';
import { readSafetensorsMeta } from '../safetensors.js';
import { predictTop, CLASSIFIER_FORMAT } from '../classify.js';
import { CliError, whole } from './args.js';
import { loadEngine, ENGINE_OPTIONS } from './engine.js';
import { readInput, why } from './io.js';

export const command = {
  name: 'predict',
  summary: 'the top classes of images, from a classifier (train --objective classify)',
  usage: 'vitrine predict --weights FILE [options] IMAGE...',
  description: 'Prints, per image, the classes with the highest softmax probabilities:\n' +
    'FILE: Coat 71.2%, Pullover 20.3%, Shirt 6.0%',
  positionals: 'IMAGE...',
  options: {
    weights: { value: 'FILE', help: 'classifier.safetensors of vitrine train --objective classify' },
    top: { value: 'K', help: 'how many classes per image (default 3)', parse: whole(1, 1000) },
    json: { type: 'boolean', help: 'one JSON array of {file, top: [{class, index, p}]} instead' },
    ...ENGINE_OPTIONS,
  },
  main: predict,
};

async function predict({ values: o, positionals: images }) {
  if (!o.weights || !images.length) throw new CliError(`${command.usage} (vitrine predict --help)`, 2);
  const top = o.top ?? 3;
  let bytes, meta;
  try { bytes = readInput(o.weights); } catch (e) { throw new CliError(`cannot read ${o.weights}: ${why(e)}`); }
  try { meta = JSON.parse(readSafetensorsMeta(bytes).vitrine_classifier || 'null'); } catch (e) { meta = null; }
  if (!meta || meta.format !== CLASSIFIER_FORMAT) throw new CliError(`${o.weights}: not a classifier of vitrine train --objective classify (no class names in its metadata)`);
  const vt = await loadEngine(o);
  let model;
  try {
    model = vt.createModel(meta.spec);
    model.loadSafetensors(bytes);
  } catch (e) { throw new CliError(`${o.weights}: ${e.message}`); }
  let failed = 0;
  const results = [];
  for (const file of images) {
    let im;
    try {
      im = decodeImage(new Uint8Array(readRegularFile(file)));
    } catch (e) {
      failed++;
      const text = e.code ? why(e) : e instanceof DataError ? e.message : `cannot decode (${e.message})`;
      process.stderr.write(`vitrine predict: ${file}: ${text}\n`);
      results.push({ file, error: text });
      continue;
    }
    const z = model.timmForward(im); // the pipeline: the model's size and channels, ImageNet's mean / std
    const t = predictTop(z.data, meta.classes, Math.min(top, meta.classes.length));
    results.push({ file, top: t.map(({ name, index, p }) => ({ class: name, index, p: Number(p.toFixed(6)) })) });
    if (!o.json) process.stdout.write(`${file}: ${t.map(({ name, p }) => `${name} ${(100 * p).toFixed(1)}%`).join(', ')}\n`);
  }
  if (o.json) process.stdout.write(JSON.stringify(results) + '\n');
  model.dispose();
  return failed ? 1 : 0;
}
