// form.js: the run's form -- read it, write it back (a resumed run), which parts show for the
// objective, locked while a run exists -- and the buttons' states.
import { $, S } from './state.js';
import { MiB } from './plan.js';
import { renderClasses } from './class-editor.js';
import { policyValue, setPolicyValue } from './policy-control.js';

export const CONFIG_IDS = [
  'kind',
  'model',
  'decoder',
  'custom',
  'batch',
  'mask-ratio',
  'lr',
  'steps',
  'warmup',
  'seed',
  'data',
  'files',
  'init',
  'init-file',
  'pool',
  'class-name',
  'add-class',
  'fmnist-classes',
  'clear-classes',
];

export function readForm() {
  const num = (id) => Number($(id).value);
  return {
    kind: $('kind').value,
    model: $('model').value,
    decoder: $('decoder').value,
    custom: $('custom').value,
    // as typed: the library's validator (web/train/options.js) names a value it refuses and its
    // range, where a clamp would have trained another run than the form shows
    batch: num('batch'),
    maskRatio: num('mask-ratio'),
    lr: num('lr'),
    steps: num('steps'),
    warmup: num('warmup'),
    seed: num('seed'),
    // checkpointing + policy: the form of a saved run (a run saved before 'none' was a policy of the menu reads the same)
    data: $('data').value,
    checkpointing: policyValue() !== 'none',
    policy: policyValue(),
    init: $('init').value,
    pool: $('pool').value,
    classes: S.classes.map((c) => c.name),
  };
}
export function writeForm(cfg) {
  $('kind').value = cfg.kind;
  $('model').value = cfg.model;
  $('custom').value = cfg.custom;
  $('decoder').value = cfg.decoder || 'lightly'; // a run saved before the choice trained lightly's
  $('batch').value = cfg.batch;
  $('mask-ratio').value = cfg.maskRatio;
  $('lr').value = cfg.lr;
  $('steps').value = cfg.steps;
  $('warmup').value = cfg.warmup;
  $('seed').value = cfg.seed;
  $('data').value = cfg.data;
  setPolicyValue(cfg.checkpointing ? cfg.policy : 'none');
  if (cfg.init) $('init').value = cfg.init;
  if (cfg.pool) $('pool').value = cfg.pool;
  syncFormVisibility();
}
export const budgetBytes = () => Number($('budget').value) * MiB;
export const classifyMode = () => $('kind').value === 'classify';

export function syncFormVisibility() {
  const cls = classifyMode();
  $('custom-wrap').hidden = $('model').value !== 'custom';
  // a timm preset (224 px, listed by the engine) under MAE: which decoder
  $('decoder-wrap').hidden = $('kind').value !== 'mae' || !S.presets.includes($('model').value);
  $('mask-wrap').style.visibility = $('kind').value === 'mae' ? '' : 'hidden';
  $('mae-data').hidden = cls;
  $('classify-data').hidden = !cls;
  $('init-file-wrap').hidden = $('init').value !== 'file';
  $('classify-panel').hidden = !cls;
  $('recon-panel').hidden = cls;
  $('download-encoder').hidden = cls;
  $('download-full').hidden = cls;
  $('download-classifier').hidden = !cls;
}
function lockForm(locked) {
  for (const id of CONFIG_IDS) $(id).disabled = locked;
  $('lock-note').hidden = !locked;
  renderClasses();
}
/** A control about to be disabled that has the focus hands it on (Start to Pause and back), so
 * that keyboard users never find the focus dropped on the page's body. Pause is enabled only once
 * the run has started: meanwhile the focus waits on Reset, and goes on to Pause when it can. */
const FOCUS_NEXT = { start: 'pause', pause: 'start' };
let focusWanted = null; // { id, interim }: where the focus goes when it can, and where it waits
export function syncButtons() {
  const had = document.activeElement;
  syncButtonStates();
  const usable = (id) => $(id) && !$(id).disabled && !$(id).hidden;
  if (had && had.disabled && FOCUS_NEXT[had.id]) {
    const want = FOCUS_NEXT[had.id];
    if (usable(want)) $(want).focus();
    else {
      $('reset').focus();
      focusWanted = { id: want, interim: $('reset') };
    }
  } else if (focusWanted) {
    // still waiting on Reset: on to the control wanted once it is usable; the user moved on: forgotten
    if (document.activeElement !== focusWanted.interim) focusWanted = null;
    else if (usable(focusWanted.id)) {
      $(focusWanted.id).focus();
      focusWanted = null;
    }
  }
}
function syncButtonStates() {
  const has = !!S.run;
  const done = has && S.step >= S.run.cfg.steps;
  $('start').disabled = !S.ready || S.running || S.busy || done;
  $('start').textContent = done
    ? 'Finished: reset to train again'
    : has && S.step > 0
      ? 'Continue training'
      : 'Start training';
  $('pause').disabled = !S.running;
  $('download-encoder').disabled = !has;
  $('download-full').disabled = !has;
  $('download-classifier').disabled = !has;
  lockForm(has);
}
