// vitrine.js: the JavaScript side of the vitrine engine, one ES module for the browser and Node.
//
//   const vt = await createVitrine();                          // the best build this host runs
//   const model = vt.createModel({ kind: 'mae', preset: 'vit_tiny_patch16_224' });
//   model.initWeights(0); model.setGradCheckpointing('block'); model.trainerInit({ lr: 1e-3 });
//   const loss = model.trainStep(images, batch);
//
// A facade over the rooms that do the work:
//   runtime/   the engine: loader.js (builds, probes, runtimes), wasi-shim.js, pool.js (threads),
//              create.js (createVitrine), engine.js (Vitrine), model.js (Model)
//   formats/   what files and pixels are: safetensors.js, metadata.js, images.js (the pixel
//              pipeline), pretrained.js (timm's weights and normalisation), parity-report.js
//   train/     training runs: trainer.js (train(): a run in a worker), worker.js, session.js (the
//              loop), datasets.js, augment.js, data-order.js, presets.js, objectives/, ...
//   webgpu/    the WebGPU backend (imported only when asked for)
//   cli/       the command line (Node)
export {
  simdSupported,
  relaxedSimdSupported,
  enableNodeRelaxedSimd,
  loadReactor,
  WASM_BUILDS,
} from './runtime/loader.js';
export { wasiShim, WasiExit } from './runtime/wasi-shim.js';
export { createVitrine } from './runtime/create.js';
export { Vitrine } from './runtime/engine.js';
export { Model } from './runtime/model.js';
export { VitrineError, AbortError, STATUS_CODES } from './errors.js';
export {
  IMAGENET_MEAN,
  IMAGENET_STD,
  channelStats,
  toRGBA,
  resizeCrop,
  makeBatch,
  decodeBlob,
  bitmapPixels,
} from './formats/images.js';
export { readSafetensorsHeader, readSafetensorsMeta, withMetadata } from './formats/safetensors.js';
export { TIMM_PRETRAINED } from './formats/pretrained.js';
export { train, Trainer } from './train/trainer.js';
export { Session } from './train/session.js';
export { TRAIN_PRESETS, MAE_DECODERS, maeDecoder, modelSpec, encoderPrefix } from './train/presets.js';
export { showMasks } from './train/visualize.js';
export { CLASSIFY_DEFAULTS, classifierSpec } from './train/objectives/classify.js';
export { registerObjective, objectiveNames, checkRunOptions as checkTrainOptions } from './train/objectives/index.js';
export { exportTorchRun, importTorchRun, TORCH_RUN_FILES } from './train/torch-run.js';
