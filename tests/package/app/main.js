// main.js: runs worker.js once per call; the test calls window.runTraining({ steps, wasmBase }).
window.runTraining = (msg) => new Promise((resolve) => {
  const w = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
  const done = (r) => { w.terminate(); document.getElementById('out').textContent = JSON.stringify(r); resolve(r); };
  w.onmessage = ({ data }) => done(data);
  w.onerror = (e) => done({ ok: false, error: e.message || 'the worker failed to load' });
  w.postMessage(msg);
});
window.ready = true;
