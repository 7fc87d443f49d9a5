// state.js: the page's state, shared by its modules (window.vitrineDemo is this object: for people
// poking around, and for the browser tests), the element lookup, the status line, and the page's
// actions other modules call back into (set by main.js).

export const $ = (id) => document.getElementById(id);

export const S = {
  booted: false,      // start-up done (a saved run resumed, if any)
  ready: false, build: null, simdKernels: false, error: null,
  threads: 0, threadsNote: null, // the training engine's kernel threads, and why fewer than every core
  run: null,          // { cfg, dims, params, data } of the configured run
  running: false, step: 0, losses: [], stopped: null,
  policy: 'none',     // the run's current checkpointing policy
  plan: null,         // the last planner report
  refusal: null,      // text of the last refusal
  timeline: null,     // the last measure() result
  userImages: [],     // ImageBitmaps
  saved: null, resumed: false, lastSpeed: null, mem: null,
  // classify mode
  classes: [],        // [{ name, images: [ImageBitmap], bad: [file names that are not images] }]
  evals: [],          // [{ step, top1, n, confusion }] held-out accuracy of the run
  split: null,        // { train, heldOut } image counts of the run
  prediction: null,   // { file, step, top: [{ name, index, p }] } | { file, error }
  tabEncoder: null,   // { kind, step, model, custom }: the last MAE / AIM encoder trained in this tab
  initFile: null,     // { name, bytes } the safetensors file a classifier starts from
};
window.vitrineDemo = S;

/** The page's actions that other modules call (main.js fills them in). */
export const page = { planSoon: () => {}, syncButtons: () => {} };

/** The status line; bad: shown in red; an error (not a refusal) is also kept in S.error. */
export function setStatus(text, bad = false, isError = bad) {
  const el = $('status');
  el.textContent = text;
  el.style.color = bad ? '#ffb4a8' : '';
  if (isError) S.error = text;
}
