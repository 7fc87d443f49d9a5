// predict.js: `vitrine predict` -- the top classes with probabilities for each image, from a
// classifier of `vitrine train --objective classify` (or the demo's "Download classifier"). Images
// go through the pixel pipeline (web/formats/images.js) as they did in training; an image that cannot be
// read or decoded is named and skipped, the others still predicted (exit status 1 then).
import { readRegularFile, decodeImage, DataError } from '../train/node-data.js';
import { readSafetensorsMeta } from '../formats/safetensors.js';
import { predictTop } from '../train/objectives/classify.js';
import { checkClassifier, MetadataError } from '../formats/metadata.js';
import { makeBatch, resizeCrop, IMAGENET_MEAN, IMAGENET_STD } from '../formats/images.js';
import { statsFromMeta } from '../formats/pretrained.js';
import { VitrineError } from '../errors.js';
import { CliError, whole } from './args.js';
import { loadEngine, specDims, ENGINE_OPTIONS } from './engine.js';
import { readInput, why } from './io.js';

export const command = {
  name: 'predict',
  summary: 'the top classes of images, from a classifier (train --objective classify)',
  usage: 'vitrine predict --weights FILE [options] IMAGE...',
  description:
    'Prints, per image, the classes with the highest softmax probabilities:\n' +
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

// The classifier file: its metadata checked (web/formats/metadata.js checkClassifier), then its model's
// spec by the engine and the image size and channels it states against that model, before the
// model is made and its weights loaded.
function openClassifier(vt, file, bytes) {
  let meta, c;
  try {
    meta = readSafetensorsMeta(bytes);
  } catch (e) {
    throw new CliError(`${file}: not a safetensors file (${e.message})`);
  }
  if (meta.vitrine_classifier == null)
    throw new CliError(
      `${file}: not a classifier of vitrine train --objective classify (no class names in its metadata)`,
    );
  const damaged = (m) => new CliError(`${file}: damaged classifier metadata: ${m}`);
  try {
    c = checkClassifier(meta);
  } catch (e) {
    if (e instanceof MetadataError) throw damaged(e.message);
    throw e;
  }
  const dims = specDims(vt, c.spec, {
    from: { file, field: 'vitrine_classifier.spec', what: 'damaged classifier metadata' },
  });
  if (c.img !== dims.img)
    throw damaged(`vitrine_classifier.img: ${c.img} is not the image size of its model (${dims.img})`);
  if (c.chans !== dims.chans)
    throw damaged(`vitrine_classifier.chans: ${c.chans} is not the channels of its model (${dims.chans})`);
  // the classifier's normalisation: its pretrained_cfg (ImageNet's for classifiers written before)
  let stats, model;
  try {
    stats = statsFromMeta(meta, file) || { mean: IMAGENET_MEAN, std: IMAGENET_STD };
  } catch (e) {
    throw new CliError(e.message);
  }
  try {
    model = vt.createModel(c.spec);
    model.loadSafetensors(bytes);
    model.normalization = stats;
  } catch (e) {
    if (model) model.dispose();
    throw new CliError(`${file}: ${e.message}`);
  }
  return { model, classes: c.classes };
}

async function predict({ values: o, positionals: images }) {
  if (!o.weights || !images.length) throw new CliError(`${command.usage} (vitrine predict --help)`, 2);
  const top = o.top ?? 3;
  let bytes;
  try {
    bytes = readInput(o.weights);
  } catch (e) {
    throw new CliError(`cannot read ${o.weights}: ${why(e)}`);
  }
  const vt = await loadEngine(o);
  const { model, classes } = openClassifier(vt, o.weights, bytes);
  const { img, chans } = model.dims;
  let failed = 0;
  const results = [];
  for (const file of images) {
    let x;
    try {
      const im = decodeImage(new Uint8Array(readRegularFile(file)));
      // the pixel pipeline of training: shorter side to the model's size, centre crop, its channels,
      // then the classifier's normalisation
      x = makeBatch(
        { chans, size: img, pixels: resizeCrop(im.data, im.width, im.height, 4, img, chans) },
        Int32Array.of(0),
        null,
        model.normalization,
      );
    } catch (e) {
      failed++;
      const text =
        e.code && !(e instanceof VitrineError)
          ? why(e)
          : e instanceof DataError
            ? e.message
            : `cannot decode (${e.message})`;
      process.stderr.write(`vitrine predict: ${file}: ${text}\n`);
      results.push({ file, error: text });
      continue;
    }
    const z = model.timmForward(x);
    const t = predictTop(z.data, classes, Math.min(top, classes.length));
    results.push({ file, top: t.map(({ name, index, p }) => ({ class: name, index, p: Number(p.toFixed(6)) })) });
    if (!o.json)
      process.stdout.write(`${file}: ${t.map(({ name, p }) => `${name} ${(100 * p).toFixed(1)}%`).join(', ')}\n`);
  }
  if (o.json) process.stdout.write(JSON.stringify(results) + '\n');
  model.dispose();
  return failed ? 1 : 0;
}
