// worker.js: trains tiny.js's model in a Web Worker and posts the losses. Imports 'vitrine' by
// name (the bundled app); the no-bundler copy of this file imports the module's path instead.
import { createVitrine } from 'vitrine';
import { train } from './tiny.js';

self.onmessage = async ({ data }) => {
  try {
    // data.wasmBase: serve the .wasm from elsewhere (the locateFile option)
    const vt = await createVitrine(data.wasmBase ? { locateFile: (file) => data.wasmBase + file } : {});
    const { model, losses } = train(vt, { steps: data.steps });
    self.postMessage({
      ok: true,
      build: vt.build,
      simdKernels: vt.simdKernels,
      policy: model.gradCheckpointing,
      losses,
    });
  } catch (e) {
    self.postMessage({ ok: false, error: String((e && e.stack) || e) });
  }
};
