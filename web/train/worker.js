// trainer-worker.js: the thread a Trainer (web/train/trainer.js) trains in -- a Node worker thread or a
// browser module Web Worker: its own engine (with its own thread pool), a Session of
// web/train/session.js, and messages. In: { type: 'start', options } once, then 'pause', 'resume',
// 'abort' (taken at the next step boundary) and { type: 'predict', id, images, options }. Out:
// { type: 'event', name, data } ('engine', 'load', 'log', 'ready', 'step', 'eval', 'checkpoint';
// 'paused' { step, received }: the boundary a pause took effect at, the steps taken when it was read),
// { type: 'reply', id, ok, result | error }, and at the end { type: 'done', result } or
// { type: 'error', error, result } (result: what a run that took steps leaves, its last good
// checkpoint included).
import { createVitrine } from '../runtime/create.js';
import { enableNodeRelaxedSimd } from '../runtime/loader.js';
import { Session } from './session.js';
import { registerObjective } from './objectives/index.js';

const IS_NODE = typeof process !== 'undefined' && !!(process.versions && process.versions.node);
const nodeModule = (name) => import(/* @vite-ignore */ /* webpackIgnore: true */ `node:${name}`);
// the port to the Trainer (no top-level await: bundlers build workers as classic scripts too);
// messages wait in the port until the listener is there
let post = null;
const port = IS_NODE
  ? nodeModule('worker_threads').then(({ parentPort }) => ({
      post: (m, t) => parentPort.postMessage(m, t),
      listen: (h) => parentPort.on('message', h),
    }))
  : Promise.resolve({
      post: (m, t) => self.postMessage(m, t),
      listen: (h) => {
        self.onmessage = (e) => h(e.data);
      },
    });
port.then((p) => {
  post = p.post;
  p.listen(onMessage);
});

let session = null,
  paused = false,
  received = null, // the steps taken when the pause asked for was read
  aborted = false,
  waiting = [];
// abort() also stops a URL being read (weights while the run is set up, a batch's images)
const urlAbort = new AbortController();
const wake = () => waiting.splice(0).forEach((r) => r());
const stepsTaken = () => (session && session.model ? session.step : null);
const control = {
  paused: () => paused,
  aborted: () => aborted,
  // the run waits at this step boundary: the Trainer hears where (its pause() resolves to it)
  waitResume: () => {
    const step = stepsTaken();
    post({ type: 'event', name: 'paused', data: { step, received: received ?? step } });
    return new Promise((r) => waiting.push(r));
  },
};
const errorOf = (e) => ({
  message: e && e.message ? e.message : String(e),
  status: e && e.status,
  code: e && e.code,
  name: e && e.name,
  field: e && e.field,
});
const buffers = (...xs) => xs.filter((x) => x instanceof Uint8Array).map((x) => x.buffer);

async function onMessage(msg) {
  if (msg.type === 'start') start(msg.options);
  else if (msg.type === 'pause') {
    paused = true;
    received = stepsTaken();
  } else if (msg.type === 'resume') {
    paused = false;
    wake();
  } else if (msg.type === 'abort') {
    aborted = true;
    urlAbort.abort();
    paused = false;
    wake();
  } else if (msg.type === 'predict') {
    try {
      if (!session) throw new Error('predict: no model yet (the run is still being set up)');
      post({ type: 'reply', id: msg.id, ok: true, result: await session.predict(msg.images, msg.options) });
    } catch (e) {
      post({ type: 'reply', id: msg.id, ok: false, error: errorOf(e) });
    }
  }
}

async function start(o) {
  const event = (name, data, transfer = []) => post({ type: 'event', name, data }, transfer);
  let vt;
  try {
    if (IS_NODE) await enableNodeRelaxedSimd(); // Node 20: the relaxed build, as the CLI picks it
    vt = await createVitrine({ wasm: o.wasm, threads: o.threads, backend: o.backend, gpu: o.gpu });
    const { name, reason, adapter } = vt.backend;
    event('engine', {
      build: vt.build,
      threads: vt.threads,
      threadsNote: vt.threadsNote,
      backend: { name, reason, adapter, limits: vt.backend.limits },
    });
    for (const url of o.objectiveModules || []) await registerObjective(url);
    session = await Session.open(vt, o, {
      log: (text) => event('log', { text }),
      onLoad: (p) => event('load', p),
      signal: urlAbort.signal,
    });
  } catch (e) {
    post({ type: 'error', error: errorOf(e), result: null });
    return;
  }
  const s = session,
    m = s.model;
  event('ready', {
    run: { ...s.run, spec: s.run.spec },
    dims: m.dims,
    policy: m.gradCheckpointing,
    classes: s.classes,
    init: s.initReport,
    normalization: { mean: m.normalization.mean, std: m.normalization.std, source: s.normalizationSource },
    step: s.step,
    steps: s.steps,
    images: s.trainIdx.length,
    heldOut: s.valIdx ? s.valIdx.length : 0,
    params: m.params().reduce((a, p) => a + p.numel, 0),
  });
  if (aborted) {
    post({ type: 'done', result: result(s, 'aborted', false) });
    return;
  }
  const r = await s.loop({
    stopAt: o.stopAt ?? s.steps,
    checkpointEvery: o.checkpointEvery || 0,
    evalEvery: o.evalEvery || 0,
    evalChunk: o.evalChunk || 250,
    control,
    emit: (name, data) => {
      if (name === 'step') {
        const { images, ...rest } = data;
        void images;
        event('step', rest);
      } else if (name === 'checkpoint') event('checkpoint', data, buffers(data.bytes));
      else event(name, data);
    },
  });
  const stepped = s.step > s.startStep;
  let res;
  try {
    res = result(s, r.status, stepped);
    if (r.status === 'done' && !o.noEval) {
      res.eval = await s.evaluate(o.evalChunk || 250);
      if (res.eval) event('eval', res.eval);
    }
  } catch (e) {
    post({ type: 'error', error: errorOf(e), result: res || null }, res ? buffers(res.checkpoint, res.weights) : []);
    return;
  }
  if (r.error) post({ type: 'error', error: errorOf(r.error), result: res }, buffers(res.checkpoint, res.weights));
  else post({ type: 'done', result: res }, buffers(res.checkpoint, res.weights));
}

// what a run leaves: the checkpoint (when it took a step), the weights (timm keys), its numbers. A
// state the engine will not save (an update made it non-finite) leaves no checkpoint and no
// weights: saveError says why (the run's own error, if any, stays the run's error).
function result(s, status, stepped) {
  const trained = s.trained || 0;
  let checkpoint = null,
    weights = null,
    saveError = null;
  try {
    if (stepped) checkpoint = s.checkpoint();
    if (stepped || status === 'done') weights = s.weights();
  } catch (e) {
    saveError = errorOf(e);
  }
  return {
    status,
    step: s.step,
    steps: s.steps,
    epoch: s.epoch,
    lossFirst: s.lossFirst,
    lossLast: s.lossLast,
    trained,
    trainSeconds: s.trainSeconds || 0,
    imagesPerSecond: trained && s.trainSeconds ? (trained * s.effBatch) / s.trainSeconds : null,
    checkpoint,
    weights,
    saveError,
    classes: s.classes,
    run: { ...s.run },
    eval: null,
  };
}
