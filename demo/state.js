// state.js: the page's state, shared by its modules (window.vitrineDemo is this object: for people
// poking around, and for the browser tests), the element lookup, the status line, and the page's
// actions other modules call back into (set by main.js).

export const $ = (id) => document.getElementById(id);

export const S = {
  booted: false, // start-up done (a saved run resumed, if any)
  ready: false,
  build: null,
  simdKernels: false,
  error: null,
  threads: 0,
  threadsNote: null, // the training engine's kernel threads, and why fewer than every core
  isolation: null, // how the page is cross-origin isolated: 'headers' | 'service worker' | null (demo/isolation.js)
  presets: [], // the engine's timm presets (224 px)
  run: null, // { cfg, dims, params, data } of the configured run
  running: false,
  step: 0,
  losses: [],
  stopped: null,
  policy: 'none', // the run's current checkpointing policy
  plan: null, // the last planner report
  stepEstimate: null, // { seconds, batch }: a timm preset's step as the planner timed it (worker.js: stepEstimate)
  refusal: null, // text of the last refusal
  busy: null, // the label of a wait in progress (progress shown after a second: busy())
  teach: null, // the teaching view's state (teach.js)
  userImages: [], // ImageBitmaps
  saved: null,
  resumed: false,
  lastSpeed: null,
  mem: null,
  // classify mode
  classes: [], // [{ name, images: [ImageBitmap], bad: [file names that are not images] }]
  evals: [], // [{ step, top1, n, confusion }] held-out accuracy of the run
  split: null, // { train, heldOut } image counts of the run
  prediction: null, // { file, step, top: [{ name, index, p }] } | { file, error }
  tabEncoder: null, // { kind, step, model, custom }: the last MAE / AIM encoder trained in this tab
  initFile: null, // { name, bytes } the safetensors file a classifier starts from
};
window.vitrineDemo = S;

/** The page's actions that other modules call (main.js fills them in). */
export const page = { planSoon: () => {}, syncButtons: () => {}, showExpect: () => {} };

/** The status line; bad: shown in red; an error (not a refusal) is also kept in S.error.
 * stale: a function that says when the message no longer holds (checked by clearStale()). */
let staleCheck = null;
export function setStatus(text, bad = false, isError = bad, stale = null) {
  const el = $('status');
  el.textContent = text;
  el.style.color = bad ? '#ffb4a8' : '';
  if (isError) S.error = text;
  staleCheck = stale;
}
/** After any change of the page's state: a message that no longer holds goes. */
export function clearStale() {
  if (staleCheck && staleCheck()) {
    staleCheck = null;
    setStatus('');
  }
}

/** Runs `promise` as a wait the page shows: after a second the header's progress bar and the label
 * with the seconds waited (and `expect`ed, when known); progress(fraction) makes the bar
 * determinate. Resolves / rejects as the promise. Waits may overlap: the latest is shown. A
 * blocking wait (setting a run up) keeps Start disabled meanwhile (S.busy). */
const waits = [];
const blockingLabel = () => {
  const b = waits.filter((w) => w.blocking);
  return b.length ? b[b.length - 1].label : null;
};
export async function busy(label, promise, { expect = 0, blocking = true } = {}) {
  const w = { label, t0: performance.now(), expect, fraction: null, blocking };
  waits.push(w);
  S.busy = blockingLabel();
  page.syncButtons();
  const timer = setInterval(showWait, 250);
  try {
    return await promise;
  } finally {
    clearInterval(timer);
    waits.splice(waits.indexOf(w), 1);
    S.busy = blockingLabel();
    showWait();
    page.syncButtons();
  }
}
function showWait() {
  const w = waits[waits.length - 1],
    box = $('progress'),
    bar = $('progress-bar');
  const s = w ? (performance.now() - w.t0) / 1000 : 0;
  if (!w || s < 1) {
    if (!w) box.hidden = true;
    return;
  }
  box.hidden = false;
  if (w.fraction == null) bar.removeAttribute('value');
  else {
    bar.max = 1;
    bar.value = w.fraction;
  }
  $('progress-text').textContent =
    `${w.label}… ${s.toFixed(0)} s` +
    (w.expect ? ` (about ${w.expect < 10 ? w.expect.toFixed(1) : w.expect.toFixed(0)} s expected)` : '');
}
/** A determinate fraction (0..1) for the latest wait. */
export function progress(fraction) {
  const w = waits[waits.length - 1];
  if (w) {
    w.fraction = Math.max(0, Math.min(1, fraction));
    showWait();
  }
}
