// main.js: the demo page. Everything heavy runs in module workers: the trainer and the planner
// (worker.js, through engine-client.js) and the teacher (teach-worker.js, through teach.js). The
// page's parts, one module each: state.js (the state, window.vitrineDemo, the status line and the
// progress of waits), form.js (the run's form), policy-control.js (the checkpointing policy),
// memory-view.js (plan, budget, refusals), charts.js (loss, reconstructions), own-images.js (the
// user's images through the pixel pipeline), class-editor.js (the classify mode), weights.js
// (download, load), teach.js (how checkpointing works), isolation.js (threads on a static host).
// This file: the trainer's events, the buttons' actions and the start-up.
import { $, S, page, setStatus, busy, clearStale } from './state.js';
import { fmtBytes, policyLabel } from './plan.js';
import { trainer, startWorkers } from './engine-client.js';
import { CONFIG_IDS, readForm, writeForm, budgetBytes, syncFormVisibility, syncButtons } from './form.js';
import { fillPolicies, setPolicyValue, syncPolicy, wirePolicy } from './policy-control.js';
import { showRefusal, wireRefusal, renderMemory, refreshPlan, planSoon, planTimer } from './memory-view.js';
import { setupCanvas, drawLoss, drawRecon } from './charts.js';
import { addFiles, userData } from './own-images.js';
import {
  classMessage,
  addClass,
  fmnistClasses,
  renderClasses,
  classProblem,
  classData,
  classesFrom,
  syncTabEncoder,
  renderEvals,
  renderPrediction,
  onPredict,
} from './class-editor.js';
import { onDownload, onLoadWeights } from './weights.js';
import { ensureIsolation } from './isolation.js';
import { initTeach, teachConfigChanged, expectedStepSeconds, showExpect } from './teach.js';
import { initLesson, lessonUpdate } from './lesson.js';

page.planSoon = () => {
  planSoon();
  teachConfigChanged();
};
page.syncButtons = syncButtons;
page.showExpect = showExpect;
// the lesson (lesson.js) drives the page through these
page.start = () => onStart();
page.pause = () => onPause();
page.reset = () => onReset();
page.formChanged = () => {
  syncFormVisibility();
  page.planSoon();
};
page.policyApplied = (p) => {
  applied = p;
  if (policyCtl) policyCtl.reset(p);
};

// ---- worker events -----------------------------------------------------------------------------

let lastStepAt = 0,
  stepWait = null; // a step that takes over a second shows as a wait
const endStepWait = () => {
  if (stepWait) {
    stepWait();
    stepWait = null;
  }
};
function onTrainerEvent(m) {
  if (m.type === 'step') {
    lastStepAt = performance.now();
    endStepWait();
    S.losses.push({ step: m.step, loss: m.loss, hex: m.hex, policy: m.policy, ms: m.ms });
    S.step = m.step;
    S.policy = m.policy;
    S.lastSpeed = { ms: m.ms, ips: m.ips };
    if (m.mem) {
      S.mem = m.mem;
      renderMemory();
    }
    $('stat-step').textContent = `${m.step} / ${S.run ? S.run.cfg.steps : '?'}`;
    $('stat-loss').textContent = m.loss.toFixed(4);
    $('stat-ms').textContent = `${m.ms.toFixed(1)} ms`;
    $('stat-ips').textContent = m.ips.toFixed(0);
    $('stat-policy').textContent = policyLabel(m.policy);
    // a policy switch's notice holds until its first step has run, then says since when
    if (S.switchAt && m.step >= S.switchAt.step) {
      setStatus(`training… checkpointing '${policyLabel(S.switchAt.policy)}' since step ${S.switchAt.step}`);
      S.switchAt = null;
    }
    scheduleDraw();
    showExpect();
    lessonUpdate();
  } else if (m.type === 'viz') {
    drawRecon(m);
  } else if (m.type === 'eval') {
    S.evals.push({ step: m.step, top1: m.top1, n: m.n, confusion: m.confusion });
    renderEvals();
  } else if (m.type === 'stopped') {
    S.running = false;
    endStepWait();
    S.stopped = m.reason;
    S.switchAt = null;
    setStatus(m.reason === 'done' ? `finished: ${m.step} steps` : `stopped at step ${m.step}`);
    syncButtons();
    lessonUpdate();
  } else if (m.type === 'saved') {
    S.saved = m;
    $('storage-status').textContent = m.ok
      ? `Training state (${fmtBytes(m.bytes)}) kept in this browser at step ${m.step}: reload and it resumes.`
      : m.message;
  } else if (m.type === 'error') {
    S.running = false;
    endStepWait();
    setStatus(`training stopped: ${m.message}`, true);
    syncButtons();
  }
}
let drawPending = false;
function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => {
    drawPending = false;
    drawLoss();
  });
}
// while training: a step still running after a second is a wait with its progress (a 224 px step)
setInterval(() => {
  if (!S.running || stepWait || performance.now() - lastStepAt < 1000) return;
  busy(
    `training step ${S.step + 1}`,
    new Promise((r) => {
      stepWait = r;
    }),
    { expect: expectedStepSeconds(), blocking: false },
  );
}, 250);

// ---- actions -----------------------------------------------------------------------------------

function afterSetup(r) {
  S.run = { cfg: r.cfg, dims: r.dims, params: r.params, data: r.data, keep: r.keep };
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
  S.stopped = r.step >= r.cfg.steps ? 'done' : null;
  $('stat-step').textContent = `${r.step} / ${r.cfg.steps}`;
  $('stat-policy').textContent = policyLabel(r.policy);
  if (S.losses.length) $('stat-loss').textContent = S.losses[S.losses.length - 1].loss.toFixed(4);
  if (r.viz) drawRecon(r.viz);
  $('storage-status').textContent = r.keep
    ? 'The training state is kept in this browser (IndexedDB): reload and it resumes.'
    : 'This run is not kept for a reload: saving its training state would pass the budget.';
  syncButtons();
  drawLoss();
  renderMemory();
}

/** The one-click fix of a refusal: its policy (and batch), then `then` (start, or apply). */
function fixFor(report, then) {
  const s = report && report.suggestion;
  if (!s) return null;
  const batchChange = !S.run && s.batch !== Number($('batch').value);
  const pol = s.policy.startsWith('budget:') ? 'auto' : s.policy;
  return {
    label: `Use checkpointing '${policyLabel(s.policy)}'${batchChange ? ` at batch ${s.batch}` : ''} (${fmtBytes(s.need)})`,
    apply: () => {
      setPolicyValue(pol);
      if (batchChange) $('batch').value = String(s.batch);
      then(pol);
    },
  };
}

async function ensureRun() {
  if (S.run) return true;
  const cfg = readForm();
  const cls = cfg.kind === 'classify';
  if (cls) {
    const problem = classProblem(cfg);
    classMessage(problem);
    if (problem) {
      setStatus(problem, true, false, () => !classProblem(readForm()));
      return false;
    }
  } else if (cfg.data === 'user' && !S.userImages.length) {
    showRefusal('No images of yours yet: drop some image files, or train on the Fashion-MNIST sample.');
    return false;
  }
  const p = await busy('planning the run', refreshPlan());
  if (!p || p.error) {
    showRefusal(`Cannot set up this model: ${p ? p.error : 'the engine is not ready'}`);
    return false;
  }
  if (!p.report.fits) {
    S.refusal = p.report.message;
    showRefusal(
      `Refused before running. ${p.report.message}`,
      fixFor(p.report, () => onStart()),
    );
    setStatus('refused: does not fit the budget', true, false, () => S.plan && S.plan.fits);
    return false;
  }
  S.refusal = null;
  showRefusal(null);
  cfg.resolved = p.report.policy;
  const ud = cls
    ? classData(p.dims.img, p.dims.chans)
    : cfg.data === 'user'
      ? userData(p.dims.img, p.dims.chans)
      : null;
  const init = cls && cfg.init === 'file' ? { name: S.initFile.name, bytes: S.initFile.bytes.slice() } : null;
  const r = await busy(
    'setting up the model',
    trainer.call('setup', { cfg, userData: ud, init, budget: budgetBytes(), keep: p.report.keep }, [
      ...(ud ? [ud.pixels.buffer] : []),
      ...(init ? [init.bytes.buffer] : []),
    ]),
  );
  afterSetup(r);
  setStatus(
    `${r.params.toLocaleString()} parameters, ${r.dims.img}x${r.dims.img}x${r.dims.chans}, data: ${r.data.name} (${r.data.n})` +
      (r.init ? `; started from ${r.init.what}: ${r.init.text}` : ''),
  );
  return true;
}

async function onStart() {
  S.error = null;
  clearTimeout(planTimer);
  try {
    if (!(await ensureRun())) {
      syncButtons();
      return;
    }
    await trainer.call('start');
    S.running = true;
    S.stopped = null;
    lastStepAt = performance.now();
    if (!S.switchAt) setStatus(`training… checkpointing '${policyLabel(S.policy)}'`);
  } catch (e) {
    setStatus(e.message, true);
  }
  syncButtons();
}

async function onPause() {
  try {
    await trainer.call('pause');
  } catch (e) {
    setStatus(e.message, true);
  }
  S.running = false;
  endStepWait();
  S.switchAt = null;
  setStatus(`paused at step ${S.step}`);
  syncButtons();
  lessonUpdate();
}

async function onReset() {
  // the MAE / AIM encoder of the run reset stays in the worker for a classifier to start from
  try {
    syncTabEncoder((await busy('resetting', trainer.call('reset'))).tabEncoder);
  } catch (e) {
    setStatus(e.message, true);
  }
  Object.assign(S, {
    run: null,
    running: false,
    step: 0,
    losses: [],
    stopped: null,
    resumed: false,
    mem: null,
    refusal: null,
    error: null,
    evals: [],
    split: null,
    prediction: null,
  });
  $('stat-acc').textContent = '–';
  $('stat-heldout').textContent = '–';
  $('stat-init').textContent = '–';
  renderEvals();
  renderPrediction();
  classMessage(null);
  $('predict-img').getContext('2d').clearRect(0, 0, 56, 56);
  $('stat-step').textContent = '0';
  $('stat-loss').textContent = '–';
  $('stat-ms').textContent = '–';
  $('stat-ips').textContent = '–';
  $('stat-policy').textContent = '–';
  setupCanvas($('recon'));
  $('recon-note').textContent = '';
  $('recon').setAttribute('aria-label', 'reconstructions of the last batch appear here while training');
  $('storage-status').textContent = 'The training state is kept in this browser (IndexedDB): reload and it resumes.';
  showRefusal(null);
  drawLoss();
  syncButtons();
  setStatus('reset');
  page.planSoon();
}

/** A policy chosen (committed: policy-control.js): planned, and applied to the run from its next step. */
let applied = 'none',
  policyCtl = null;
async function commitPolicy(policy) {
  teachConfigChanged();
  if (!S.run) {
    showRefusal(null);
    await refreshPlan();
    applied = policy;
    return;
  }
  try {
    const r = await busy(
      `applying checkpointing '${policy}'`,
      trainer.call('policy', { policy, budget: budgetBytes() }),
    );
    if (!r.ok) {
      setPolicyValue(applied);
      policyCtl.reset(applied);
      S.refusal = r.report.message;
      showRefusal(
        `Checkpointing not changed: '${policyLabel(r.report.policy)}' does not fit. ${r.report.message}`,
        fixFor(r.report, (p) => commitPolicy(p)),
      );
    } else {
      applied = policy;
      S.policy = r.policy;
      showRefusal(null);
      if (S.running) {
        S.switchAt = { policy: r.policy, step: S.step + 1 };
        setStatus(`checkpointing '${policyLabel(r.policy)}' from the next step (step ${S.step + 1})`);
      } else
        setStatus(`checkpointing '${policyLabel(r.policy)}' from the next step the run takes (step ${S.step + 1})`);
    }
  } catch (e) {
    setStatus(e.message, true);
  }
  await refreshPlan();
}

// ---- start-up ----------------------------------------------------------------------------------

/** Enter or Space on a drop zone opens its file picker (keyboard users cannot drag). */
function keyboardPicker(zoneId, inputId) {
  $(zoneId).addEventListener('keydown', (e) => {
    if (e.target !== e.currentTarget || (e.key !== 'Enter' && e.key !== ' ')) return;
    e.preventDefault();
    $(inputId).click();
  });
}
function dropZone(id, onFiles) {
  const z = $(id);
  z.addEventListener('dragover', (e) => {
    e.preventDefault();
    z.classList.add('over');
  });
  z.addEventListener('dragleave', () => z.classList.remove('over'));
  z.addEventListener('drop', (e) => {
    e.preventDefault();
    z.classList.remove('over');
    onFiles([...e.dataTransfer.files]);
  });
}

function wire() {
  for (const id of CONFIG_IDS)
    $(id).addEventListener('change', () => {
      syncFormVisibility();
      page.planSoon();
    });
  for (const id of ['batch', 'lr', 'mask-ratio', 'custom']) $(id).addEventListener('input', page.planSoon);
  $('budget').addEventListener('change', async () => {
    if (!S.run) showRefusal(null);
    await refreshPlan();
    teachConfigChanged();
  });
  policyCtl = wirePolicy({ onPreview: () => teachConfigChanged(), onCommit: commitPolicy });
  wireRefusal();
  $('start').addEventListener('click', onStart);
  $('pause').addEventListener('click', onPause);
  $('reset').addEventListener('click', onReset);
  $('download-encoder').addEventListener('click', () => onDownload(false));
  $('download-full').addEventListener('click', () => onDownload(true));
  $('download-classifier').addEventListener('click', () => onDownload(true));
  // classify mode: the class editor, where to start from, prediction
  $('add-class').addEventListener('click', () => {
    if (addClass($('class-name').value)) $('class-name').value = '';
    clearStale();
  });
  $('class-name').addEventListener('keydown', (e) => {
    if (e.key === 'Enter') $('add-class').click();
  });
  $('fmnist-classes').addEventListener('click', fmnistClasses);
  $('clear-classes').addEventListener('click', () => {
    if (S.run) return;
    S.classes = [];
    classMessage(null);
    renderClasses();
    page.planSoon();
  });
  $('init').addEventListener('change', () => {
    const t = S.tabEncoder;
    if ($('init').value === 'tab' && t) {
      $('model').value = t.model;
      if (t.model === 'custom') $('custom').value = t.custom;
      syncFormVisibility();
      page.planSoon();
    }
  });
  $('init-file').addEventListener('change', async (e) => {
    const f = e.target.files[0];
    S.initFile = f ? { name: f.name, bytes: new Uint8Array(await f.arrayBuffer()) } : null;
    clearStale();
  });
  const cdata = $('classify-data');
  cdata.addEventListener('dragover', (e) => e.preventDefault());
  cdata.addEventListener('drop', (e) => {
    e.preventDefault();
    classMessage(
      S.run
        ? 'The classes are fixed while a run exists: Reset to change them.'
        : 'Drop images onto a class (add a class first).',
    );
  });
  $('predict-file').addEventListener('change', (e) => {
    onPredict(e.target.files[0]);
    e.target.value = '';
  });
  dropZone('predict-drop', (files) => onPredict(files[0]));
  keyboardPicker('predict-drop', 'predict-file');
  $('files').addEventListener('change', (e) => {
    addFiles([...e.target.files]);
    e.target.value = '';
  });
  dropZone('drop', (files) => {
    if (!S.run) addFiles(files);
  });
  keyboardPicker('drop', 'files');
  $('load-weights').addEventListener('change', (e) => {
    if (e.target.files[0]) onLoadWeights(e.target.files[0], ensureRun);
    e.target.value = '';
  });
}

async function boot() {
  let info;
  S.isolation = await ensureIsolation();
  try {
    info = await busy('loading the engine', startWorkers(onTrainerEvent));
  } catch (e) {
    setStatus(`the engine did not load: ${e.message}`, true);
    return;
  }
  S.build = info.build;
  S.simdKernels = info.simdKernels;
  S.threads = info.threads;
  S.threadsNote = info.threadsNote;
  const badge = $('build');
  // the training worker's engine runs a pool of info.threads threads (web/runtime/pool.js); without
  // cross-origin isolation (COOP/COEP headers: demo/serve.mjs sends them) it runs on 1 and says why
  badge.textContent =
    `wasm: ${info.build}${info.build === 'relaxed' ? ' (SIMD128 + fused multiply-add kernels)' : info.simdKernels ? ' (SIMD128 kernels)' : ''}` +
    `, ${info.threads} thread${info.threads === 1 ? '' : 's'}` +
    (info.threadsNote ? ` (${info.threadsNote.replace(/^1 thread: /, '')})` : '');
  badge.title =
    info.threadsNote ||
    `kernels split over ${info.threads} threads (every core this browser reports), the same bits as 1 thread;` +
      ` cross-origin isolated by ${S.isolation === 'service worker' ? 'the service worker coi-sw.js (a static host)' : "the server's headers"}`;
  badge.classList.toggle('simd', info.simdKernels);
  const be = info.backend,
    a = be.adapter,
    bb = $('backend'); // where training steps run, and why
  S.backend = be;
  bb.textContent =
    be.name === 'webgpu'
      ? `training on WebGPU: ${a.description || a.device} (${a.vendor} ${a.architecture})${a.software ? ', software' : ''}`
      : `training on wasm: ${be.reason}`;
  bb.title = be.reason;
  const sel = $('model');
  for (const [k, label] of Object.entries(info.models))
    sel.add(new Option(label === k ? `${k}: 28 px (train.js preset)` : label, k));
  for (const p of info.presets) sel.add(new Option(`${p} (224 px RGB: heavy for a tab)`, p));
  S.presets = info.presets;
  const dec = $('decoder');
  for (const [k, label] of Object.entries(info.decoders)) dec.add(new Option(`${k}: ${label}`, k));
  dec.value = 'tab';
  sel.add(new Option('custom config…', 'custom'));
  sel.value = 'fmnist';
  fillPolicies(info.policies);
  syncFormVisibility();
  wire();

  S.ready = true;
  renderClasses();
  drawLoss();
  // a run kept in IndexedDB resumes (a finished one as finished, with its reconstructions)
  try {
    const saved = await trainer.call('saved');
    if (saved) {
      writeForm(saved.cfg);
      applied = saved.cfg.checkpointing ? saved.cfg.policy : 'none';
      policyCtl.reset(applied);
      const r = await busy(
        `resuming the run kept in this browser (step ${saved.step})`,
        trainer.call('setup', { resume: true, budget: budgetBytes() }),
      );
      afterSetup(r);
      if (r.userData && r.userData.classes) await classesFrom(r.userData);
      S.resumed = true;
      const done = r.step >= r.cfg.steps;
      setStatus(
        done
          ? `finished: ${r.step} steps (kept in this browser; Reset to train again)`
          : `resumed at step ${r.step} of ${r.cfg.steps}: press Continue training`,
      );
      $('storage-status').textContent =
        `Resumed from this browser's storage at step ${r.step}${done ? ', the run finished' : ''}.`;
    } else setStatus('ready');
    await refreshPlan();
  } catch (e) {
    setStatus(`could not resume: ${e.message}`, true);
    await refreshPlan();
  }
  syncPolicy();
  syncButtons();
  initTeach();
  initLesson();
  S.booted = true;
}

boot();
