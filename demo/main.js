// main.js: the demo page. Everything heavy runs in two module workers (worker.js, through
// engine-client.js): the trainer and the planner. The page's parts, one module each: state.js (the
// state, window.vitrineDemo), form.js (the run's form), memory-view.js (plan, budget, refusals),
// charts.js (loss, reconstructions, activation timelines), own-images.js (the user's images through
// the pixel pipeline), class-editor.js (the classify mode). This file: the trainer's events, the
// buttons' actions and the start-up.
import { $, S, page, setStatus } from './state.js';
import { fmtBytes } from './plan.js';
import { trainer, startWorkers } from './engine-client.js';
import { CONFIG_IDS, readForm, writeForm, budgetBytes, syncFormVisibility, syncButtons, fillPolicies } from './form.js';
import { showRefusal, renderMemory, refreshPlan, planSoon, planTimer } from './memory-view.js';
import { POLICY_LABEL, setupCanvas, drawLoss, drawRecon, drawTimelines } from './charts.js';
import { addFiles, userData } from './own-images.js';
import { classMessage, addClass, fmnistClasses, renderClasses, classProblem, classData, classesFrom, syncTabEncoder, renderEvals,
  renderPrediction, onPredict } from './class-editor.js';

page.planSoon = planSoon;
page.syncButtons = syncButtons;

async function measure() {
  if (!S.run) return;
  try {
    S.timeline = await trainer.call('measure', { policy: $('policy').value, budget: budgetBytes() });
    drawTimelines();
  } catch (e) { setStatus(`timeline: ${e.message}`, true); }
}

// ---- worker events -----------------------------------------------------------------------------

function onTrainerEvent(m) {
  if (m.type === 'step') {
    S.losses.push({ step: m.step, loss: m.loss, hex: m.hex, policy: m.policy, ms: m.ms });
    S.step = m.step;
    S.policy = m.policy;
    S.lastSpeed = { ms: m.ms, ips: m.ips };
    if (m.mem) { S.mem = m.mem; renderMemory(); }
    $('stat-step').textContent = `${m.step} / ${S.run ? S.run.cfg.steps : '?'}`;
    $('stat-loss').textContent = m.loss.toFixed(4);
    $('stat-ms').textContent = `${m.ms.toFixed(1)} ms`;
    $('stat-ips').textContent = m.ips.toFixed(0);
    $('stat-policy').textContent = POLICY_LABEL(m.policy);
    scheduleDraw();
  } else if (m.type === 'viz') {
    drawRecon(m);
  } else if (m.type === 'eval') {
    S.evals.push({ step: m.step, top1: m.top1, n: m.n, confusion: m.confusion });
    renderEvals();
  } else if (m.type === 'stopped') {
    S.running = false;
    S.stopped = m.reason;
    setStatus(m.reason === 'done' ? `done: ${m.step} steps` : `stopped at step ${m.step}`);
    syncButtons();
  } else if (m.type === 'saved') {
    S.saved = m;
    $('storage-status').textContent = m.ok ? `Training state (${fmtBytes(m.bytes)}) kept in this browser at step ${m.step}: reload and it resumes.` : m.message;
  } else if (m.type === 'error') {
    S.running = false;
    setStatus(`training stopped: ${m.message}`, true);
    syncButtons();
  }
}
let drawPending = false;
function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => { drawPending = false; drawLoss(); });
}

// ---- actions -----------------------------------------------------------------------------------

function afterSetup(r) {
  S.run = { cfg: r.cfg, dims: r.dims, params: r.params, data: r.data };
  S.evals = (r.evals || []).map((e) => ({ step: e.step, top1: e.top1, n: e.n, confusion: e.confusion }));
  S.split = r.split || null;
  if ('tabEncoder' in r) syncTabEncoder(r.tabEncoder);
  if (r.cfg.kind === 'classify') {
    $('stat-heldout').textContent = r.split ? `${r.split.heldOut} of ${r.split.train + r.split.heldOut} images` : '–';
    $('stat-init').textContent = r.cfg.initFrom || 'random init';
    renderEvals();
  }
  S.step = r.step;
  S.losses = r.losses.map((l) => ({ step: l.step, loss: l.loss, hex: l.hex, policy: l.policy, ms: l.ms }));
  S.policy = r.policy;
  S.mem = r.mem;
  S.stopped = null;
  $('stat-step').textContent = `${r.step} / ${r.cfg.steps}`;
  $('stat-policy').textContent = POLICY_LABEL(r.policy);
  if (S.losses.length) $('stat-loss').textContent = S.losses[S.losses.length - 1].loss.toFixed(4);
  syncButtons();
  drawLoss();
}

async function ensureRun() {
  if (S.run) return true;
  const cfg = readForm();
  const cls = cfg.kind === 'classify';
  if (cls) {
    const problem = classProblem(cfg);
    classMessage(problem);
    if (problem) { setStatus(problem, true, false); return false; }
  } else if (cfg.data === 'user' && !S.userImages.length) { showRefusal('No images of yours yet: drop some image files, or train on the Fashion-MNIST sample.'); return false; }
  setStatus('planning…');
  const p = await refreshPlan();
  if (!p || p.error) { showRefusal(`Cannot set up this model: ${p ? p.error : 'the engine is not ready'}`); setStatus(''); return false; }
  if (!p.report.fits) {
    S.refusal = p.report.message;
    showRefusal(`Refused before running. ${p.report.message}`);
    setStatus('refused: does not fit the budget', true, false);
    return false;
  }
  S.refusal = null;
  showRefusal(null);
  cfg.resolved = p.report.policy;
  setStatus('setting up the model…');
  const ud = cls ? classData(p.dims.img, p.dims.chans) : cfg.data === 'user' ? userData(p.dims.img, p.dims.chans) : null;
  const init = cls && cfg.init === 'file' ? { name: S.initFile.name, bytes: S.initFile.bytes.slice() } : null;
  const r = await trainer.call('setup', { cfg, userData: ud, init }, [...(ud ? [ud.pixels.buffer] : []), ...(init ? [init.bytes.buffer] : [])]);
  afterSetup(r);
  setStatus(`${r.params.toLocaleString()} parameters, ${r.dims.img}x${r.dims.img}x${r.dims.chans}, data: ${r.data.name} (${r.data.n})` +
    (r.init ? `; started from ${r.init.what}: ${r.init.text}` : ''));
  await measure();
  return true;
}

async function onStart() {
  $('start').disabled = true;
  S.error = null;
  clearTimeout(planTimer);
  try {
    if (!(await ensureRun())) { syncButtons(); return; }
    await trainer.call('start');
    S.running = true;
    S.stopped = null;
    setStatus('training…');
  } catch (e) { setStatus(e.message, true); }
  syncButtons();
}

async function onPause() {
  try { await trainer.call('pause'); } catch (e) { setStatus(e.message, true); }
  S.running = false;
  setStatus(`paused at step ${S.step}`);
  syncButtons();
}

async function onReset() {
  // the MAE / AIM encoder of the run reset stays in the worker for a classifier to start from
  try { syncTabEncoder((await trainer.call('reset')).tabEncoder); } catch (e) { setStatus(e.message, true); }
  Object.assign(S, { run: null, running: false, step: 0, losses: [], stopped: null, timeline: null, resumed: false, mem: null, refusal: null, error: null,
    evals: [], split: null, prediction: null });
  $('stat-acc').textContent = '–'; $('stat-heldout').textContent = '–'; $('stat-init').textContent = '–';
  renderEvals(); renderPrediction(); classMessage(null);
  $('predict-img').getContext('2d').clearRect(0, 0, 56, 56);
  $('stat-step').textContent = '0'; $('stat-loss').textContent = '–'; $('stat-ms').textContent = '–'; $('stat-ips').textContent = '–'; $('stat-policy').textContent = '–';
  setupCanvas($('recon')); $('recon-note').textContent = '';
  $('storage-status').textContent = 'The training state is kept in this browser (IndexedDB): reload and it resumes.';
  showRefusal(null);
  drawLoss();
  drawTimelines();
  syncButtons();
  setStatus('reset');
  planSoon();
}

let prevCkpt = { checked: false, policy: 'block' };
async function onCheckpointing() {
  const want = $('ckpt').checked ? $('policy').value : 'none';
  if (!S.run) { prevCkpt = { checked: $('ckpt').checked, policy: $('policy').value }; planSoon(); return; }
  try {
    const r = await trainer.call('policy', { policy: want, budget: budgetBytes() });
    if (!r.ok) {
      $('ckpt').checked = prevCkpt.checked;
      $('policy').value = prevCkpt.policy;
      S.refusal = r.report.message;
      showRefusal(`Checkpointing not changed. ${r.report.message}`);
    } else {
      prevCkpt = { checked: $('ckpt').checked, policy: $('policy').value };
      S.policy = r.policy;
      showRefusal(null);
      setStatus(`checkpointing '${POLICY_LABEL(r.policy)}' from the next step (step ${S.step + 1})`);
    }
  } catch (e) { setStatus(e.message, true); }
  await refreshPlan();
  await measure();
}

function download(bytes, name) {
  const url = URL.createObjectURL(new Blob([bytes], { type: 'application/octet-stream' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
async function onDownload(full) {
  try {
    const r = await trainer.call('exportWeights', { full });
    const what = r.kind === 'classifier' ? 'classifier' : full ? 'full' : 'encoder-timm';
    download(r.bytes, `vitrine-${r.kind === 'classifier' ? '' : r.kind + '-'}${what}-step${r.step}.safetensors`);
    setStatus(`downloaded ${r.kind === 'classifier' ? 'the classifier (timm keys, head, class names: vitrine predict --weights reads it)'
      : full ? 'the full model (lightly keys)' : 'the encoder (timm keys)'}: ${fmtBytes(r.bytes.length)}`);
  } catch (e) { setStatus(e.message, true); }
}
async function onLoadWeights(file) {
  try {
    if (!(await ensureRun())) return;
    const bytes = new Uint8Array(await file.arrayBuffer());
    const r = await trainer.call('importWeights', { bytes, name: file.name }, [bytes.buffer]);
    setStatus(`loaded ${file.name} as ${r.as}`);
    S.step = r.step;
    S.losses = [];
    S.evals = [];
    if (S.run.cfg.kind === 'classify') { S.run.cfg = { ...S.run.cfg, initFrom: file.name }; $('stat-init').textContent = file.name; renderEvals(); }
    drawLoss();
    $('stat-step').textContent = `${r.step} / ${S.run.cfg.steps}`;
    syncButtons();
  } catch (e) { setStatus(e.message, true); }
}

// ---- start-up ----------------------------------------------------------------------------------

async function boot() {
  let info;
  try {
    info = await startWorkers(onTrainerEvent);
  } catch (e) { setStatus(`the engine did not load: ${e.message}`, true); return; }
  S.build = info.build;
  S.simdKernels = info.simdKernels;
  S.threads = info.threads;
  S.threadsNote = info.threadsNote;
  const badge = $('build');
  // the training worker's engine runs a pool of info.threads threads (web/pool.js); without
  // cross-origin isolation (COOP/COEP headers: demo/serve.mjs sends them) it runs on 1 and says why
  badge.textContent = `wasm: ${info.build}${info.build === 'relaxed' ? ' (SIMD128 + fused multiply-add kernels)' : info.simdKernels ? ' (SIMD128 kernels)' : ''}` +
    `, ${info.threads} thread${info.threads === 1 ? '' : 's'}` + (info.threadsNote ? ` (${info.threadsNote.replace(/^1 thread: /, '')})` : '');
  badge.title = info.threadsNote || `kernels split over ${info.threads} threads (every core this browser reports), the same bits as 1 thread`;
  badge.classList.toggle('simd', info.simdKernels);
  const be = info.backend, a = be.adapter, bb = $('backend'); // where training steps run, and why
  S.backend = be;
  bb.textContent = be.name === 'webgpu' ? `training on WebGPU: ${a.description || a.device} (${a.vendor} ${a.architecture})${a.software ? ', software' : ''}`
    : `training on wasm: ${be.reason}`;
  bb.title = be.reason;
  const sel = $('model');
  for (const [k, label] of Object.entries(info.models)) sel.add(new Option(label === k ? `${k}: 28 px (train.js preset)` : label, k));
  for (const p of info.presets) sel.add(new Option(`${p} (224 px RGB: heavy for a tab)`, p));
  sel.add(new Option('custom config…', 'custom'));
  sel.value = 'fmnist';
  fillPolicies(info.policies);
  syncFormVisibility();

  for (const id of CONFIG_IDS) $(id).addEventListener('change', () => { syncFormVisibility(); planSoon(); });
  for (const id of ['batch', 'lr', 'mask-ratio', 'custom']) $(id).addEventListener('input', planSoon);
  $('budget').addEventListener('change', async () => { if (!S.run) showRefusal(null); await refreshPlan(); });
  $('ckpt').addEventListener('change', onCheckpointing);
  $('policy').addEventListener('change', () => { if ($('ckpt').checked || !S.run) onCheckpointing(); else measure(); });
  $('start').addEventListener('click', onStart);
  $('pause').addEventListener('click', onPause);
  $('reset').addEventListener('click', onReset);
  $('measure').addEventListener('click', measure);
  $('download-encoder').addEventListener('click', () => onDownload(false));
  $('download-full').addEventListener('click', () => onDownload(true));
  $('download-classifier').addEventListener('click', () => onDownload(true));
  // classify mode: the class editor, where to start from, prediction
  $('add-class').addEventListener('click', () => { if (addClass($('class-name').value)) $('class-name').value = ''; });
  $('class-name').addEventListener('keydown', (e) => { if (e.key === 'Enter') $('add-class').click(); });
  $('fmnist-classes').addEventListener('click', fmnistClasses);
  $('clear-classes').addEventListener('click', () => { if (S.run) return; S.classes = []; classMessage(null); renderClasses(); planSoon(); });
  $('init').addEventListener('change', () => {
    const t = S.tabEncoder;
    if ($('init').value === 'tab' && t) { $('model').value = t.model; if (t.model === 'custom') $('custom').value = t.custom; syncFormVisibility(); planSoon(); }
  });
  $('init-file').addEventListener('change', async (e) => {
    const f = e.target.files[0];
    S.initFile = f ? { name: f.name, bytes: new Uint8Array(await f.arrayBuffer()) } : null;
  });
  const cdata = $('classify-data');
  cdata.addEventListener('dragover', (e) => e.preventDefault());
  cdata.addEventListener('drop', (e) => { e.preventDefault(); classMessage(S.run ? 'The classes are fixed while a run exists: Reset to change them.' : 'Drop images onto a class (add a class first).'); });
  $('predict-file').addEventListener('change', (e) => { onPredict(e.target.files[0]); e.target.value = ''; });
  const pdrop = $('predict-drop');
  pdrop.addEventListener('dragover', (e) => { e.preventDefault(); pdrop.classList.add('over'); });
  pdrop.addEventListener('dragleave', () => pdrop.classList.remove('over'));
  pdrop.addEventListener('drop', (e) => { e.preventDefault(); pdrop.classList.remove('over'); onPredict(e.dataTransfer.files[0]); });
  $('files').addEventListener('change', (e) => addFiles([...e.target.files]));
  $('load-weights').addEventListener('change', (e) => { if (e.target.files[0]) onLoadWeights(e.target.files[0]); e.target.value = ''; });
  const drop = $('drop');
  drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => { e.preventDefault(); drop.classList.remove('over'); if (!S.run) addFiles([...e.dataTransfer.files]); });

  S.ready = true;
  renderClasses();
  drawLoss();
  drawTimelines();
  // a run kept in IndexedDB resumes
  try {
    const saved = await trainer.call('saved');
    if (saved) {
      writeForm(saved.cfg);
      prevCkpt = { checked: !!saved.cfg.checkpointing, policy: saved.cfg.policy };
      setStatus(`resuming the run kept in this browser (step ${saved.step})…`);
      const r = await trainer.call('setup', { resume: true });
      afterSetup(r);
      if (r.userData && r.userData.classes) await classesFrom(r.userData);
      S.resumed = true;
      setStatus(`resumed at step ${r.step} of ${r.cfg.steps}: press Continue`);
      $('storage-status').textContent = `Resumed from this browser's storage at step ${r.step}.`;
      await refreshPlan();
      await measure();
    } else {
      setStatus('ready');
      await refreshPlan();
    }
  } catch (e) { setStatus(`could not resume: ${e.message}`, true); await refreshPlan(); }
  syncButtons();
  S.booted = true;
}

boot();
