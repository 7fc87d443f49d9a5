// node-app.mjs: the installed package in Node. Trains tiny.js's MAE model with per-block
// checkpointing, checks the losses are the bits of a run without checkpointing, saves the weights
// and the training state as safetensors files, reloads them into new models (same bytes; the
// resumed run continues bit for bit) and loads every build of WASM_BUILDS (relaxed SIMD enabled first). Prints one JSON line.
import { readFileSync, writeFileSync } from 'node:fs';
import { createVitrine, WASM_BUILDS, readSafetensorsMeta, enableNodeRelaxedSimd } from 'vitrine';
import { CONFIG, BATCH, images, train, falling } from './tiny.js';

const hex = (v) => Buffer.from(new Float32Array([v]).buffer).toString('hex');
const same = (a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;
// Node 20: relaxed SIMD is behind a V8 flag, which a Node app turns on before its first compile
const relaxed = await enableNodeRelaxedSimd();
const vt = await createVitrine();
const r = { relaxed, build: vt.build, simdKernels: vt.simdKernels };

const { model, losses } = train(vt, { steps: 20, policy: 'block' });
r.policy = model.gradCheckpointing;
r.losses = losses;
r.falling = falling(losses);
r.sameBitsAsNoCheckpointing = train(vt, { steps: 20, policy: 'none' }).losses.every(
  (l, i) => hex(l) === hex(losses[i]),
);

writeFileSync('weights.safetensors', model.saveSafetensors());
writeFileSync('train-state.safetensors', model.saveTrainState());
const weights = readFileSync('weights.safetensors');
const reloaded = vt.createModel({ kind: 'mae', config: CONFIG });
reloaded.loadSafetensors(weights);
r.weightsBytes = weights.length;
r.weightsRoundTrip = same(reloaded.saveSafetensors(), weights);
r.paramsEqual = model
  .params()
  .every((p, i) =>
    same(new Uint8Array(p.data.slice().buffer), new Uint8Array(reloaded.params()[i].data.slice().buffer)),
  );

const resumed = vt.createModel({ kind: 'mae', config: CONFIG });
resumed.initWeights(1);
resumed.setGradCheckpointing('block');
resumed.loadTrainState(readFileSync('train-state.safetensors'));
r.stateMeta = Object.keys(readSafetensorsMeta(readFileSync('train-state.safetensors'))).length;
r.resumedStep = resumed.stepCount;
const x = images();
const next = [model.trainStep(x, BATCH), model.trainStep(x, BATCH)];
const nextResumed = [resumed.trainStep(x, BATCH), resumed.trainStep(x, BATCH)];
r.resumeBitForBit = next.every((l, i) => hex(l) === hex(nextResumed[i]));

r.builds = {};
for (const name of Object.keys(WASM_BUILDS)) {
  // 1 thread: a "-mt" name loads its shared-memory file anyway
  const e = await createVitrine({ wasm: name, threads: 1 });
  const { losses: l } = train(e, { steps: 2 });
  r.builds[name] = { build: e.threaded ? `${e.build}-mt` : e.build, simdKernels: e.simdKernels, loss: l[1] };
  e.close();
}
console.log(JSON.stringify(r));
