// main.js: runs worker.js once per call; the test calls window.runTraining({ steps, wasmBase }),
// and window.runTrainer(): the package's Trainer (train(): its own Web Worker), tiny.js trainerRuns.
import { train, readSafetensorsHeader } from 'vitrine';
import { trainerRuns } from './tiny.js';

window.runTraining = (msg) =>
  new Promise((resolve) => {
    const w = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
    const done = (r) => {
      w.terminate();
      document.getElementById('out').textContent = JSON.stringify(r);
      resolve(r);
    };
    w.onmessage = ({ data }) => done(data);
    w.onerror = (e) => done({ ok: false, error: e.message || 'the worker failed to load' });
    w.postMessage(msg);
  });
window.runTrainer = () =>
  trainerRuns(train, readSafetensorsHeader).then(
    (r) => ({ ok: true, ...r }),
    (e) => ({ ok: false, error: String((e && e.stack) || e) }),
  );
window.ready = true;
