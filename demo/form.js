// form.js: the run's form -- read it, write it back (a resumed run), which parts show for the
// objective, locked while a run exists -- and the buttons' states.
import { $, S } from './state.js';
import { MiB } from './plan.js';
import { renderClasses } from './class-editor.js';

export const CONFIG_IDS = ['kind', 'model', 'custom', 'batch', 'mask-ratio', 'lr', 'steps', 'warmup', 'seed', 'data', 'files',
  'init', 'init-file', 'pool', 'class-name', 'add-class', 'fmnist-classes', 'clear-classes'];

export function readForm() {
  const num = (id) => Number($(id).value);
  return {
    kind: $('kind').value, model: $('model').value, custom: $('custom').value,
    batch: Math.max(1, Math.floor(num('batch'))), maskRatio: num('mask-ratio'), lr: num('lr'),
    steps: Math.max(1, Math.floor(num('steps'))), warmup: Math.max(0, Math.floor(num('warmup'))), seed: Math.max(0, Math.floor(num('seed'))),
    data: $('data').value, checkpointing: $('ckpt').checked, policy: $('policy').value,
    init: $('init').value, pool: $('pool').value, classes: S.classes.map((c) => c.name),
  };
}
export function writeForm(cfg) {
  $('kind').value = cfg.kind; $('model').value = cfg.model; $('custom').value = cfg.custom;
  $('batch').value = cfg.batch; $('mask-ratio').value = cfg.maskRatio; $('lr').value = cfg.lr; $('steps').value = cfg.steps;
  $('warmup').value = cfg.warmup; $('seed').value = cfg.seed; $('data').value = cfg.data;
  $('ckpt').checked = !!cfg.checkpointing; $('policy').value = cfg.policy;
  if (cfg.init) $('init').value = cfg.init;
  if (cfg.pool) $('pool').value = cfg.pool;
  syncFormVisibility();
}
export const budgetBytes = () => Number($('budget').value) * MiB;
export const classifyMode = () => $('kind').value === 'classify';

export function syncFormVisibility() {
  const cls = classifyMode();
  $('custom-wrap').hidden = $('model').value !== 'custom';
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
export function syncButtons() {
  const has = !!S.run;
  $('start').disabled = !S.ready || S.running;
  $('start').textContent = has && S.step > 0 ? 'Continue' : 'Start';
  $('pause').disabled = !S.running;
  $('measure').disabled = !has;
  $('download-encoder').disabled = !has;
  $('download-full').disabled = !has;
  $('download-classifier').disabled = !has;
  lockForm(has);
}

/** The policy menu, from the engine's policies: every:K as every:2, budget:BYTES as the budget
 * the page chooses ('auto'); none is the checkbox off. */
export function fillPolicies(policies) {
  const sel = $('policy');
  for (const p of policies) {
    if (p === 'none') continue;
    const value = p === 'every:K' ? 'every:2' : p === 'budget:BYTES' ? 'auto' : p;
    sel.add(new Option(value === 'auto' ? 'budget: the least re-computation that fits' : value === 'block' ? "block (timm's set_grad_checkpointing)" : value, value));
  }
  sel.value = 'block';
}
