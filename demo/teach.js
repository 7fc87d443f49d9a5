// teach.js: the "How checkpointing works" view. Its schedule, memory drawing and policy comparison
// are the package's checkpointing widget (web/widget/: mount), fed by the teacher worker
// (teach-worker.js: the recorded step of the page's model under every policy, at the thread count
// the trainer runs); this file follows the page's model and policy, measures step times on request
// (one computation timed once, the baseline twice a round: the noise floor), runs the two lightly
// bugs (bugs-view.js), and says the page's one figure for a step's time beside Start: measured
// when there is a measurement, else estimated, and which.
import { $, S, busy, progress, setStatus } from './state.js';
import { fmtBytes, policyLabel, MiB } from './plan.js';
import { startTeacher } from './engine-client.js';
import { readForm, budgetBytes } from './form.js';
import { specFor, encoderOf, configKey } from './worker-data.js';
import { mount, median, quantile, distinctPolicies, msText } from '../web/widget/index.js';
import { renderMask, renderFrozen } from './bugs-view.js';
import { renderMemory } from './memory-view.js';

const AUTO_LIMIT = 512 * MiB; // a model whose teacher would hold more is recorded on request only
let teacher = null,
  view = null,
  timer = 0,
  seq = 0;
const T = () => S.teach;

export function pageConfig() {
  const cfg = S.run ? S.run.cfg : readForm();
  return { cfg, spec: specFor(cfg), batch: cfg.batch, maskRatio: cfg.maskRatio, key: configKey(cfg) };
}
/** The policy the page has chosen, as the engine names it ('auto': the planner's budget:BYTES). */
function pagePolicy() {
  const f = readForm();
  return S.run
    ? S.policy
    : f.policy === 'auto'
      ? S.plan && S.plan.policy.startsWith('budget:')
        ? S.plan.policy
        : null
      : f.policy;
}
/** The widget of the view (lesson.js steps through it). */
export const teachView = () => view;

/** The run's own step times under its current policy since it was last switched: the last 20. */
function runTimes() {
  if (!S.run) return [];
  const out = [];
  for (let i = S.losses.length - 1; i >= 0 && out.length < 20; i--) {
    const l = S.losses[i];
    if (l.policy !== S.policy) break;
    if (Number.isFinite(l.ms)) out.push(l.ms);
  }
  return out;
}

/** The page's one figure for a step's time here: { seconds, text }, null when nothing is known. In
 * order: this run's steps under its policy (3 or more), the times measured below for the policy,
 * an estimate (a timm preset's own forward pass timed by the planner, x3, x the batch, x the
 * policy's FLOPs over none's; else the recorded FLOPs at the rate this tab measured). */
function expectation() {
  const t = T(),
    p = pagePolicy();
  const run = runTimes();
  if (run.length >= 3) {
    const s = { median: median(run), q1: quantile(run, 0.25), q3: quantile(run, 0.75) };
    return {
      seconds: s.median / 1000,
      text: `Measured: ${msText(s)} per step, the median (middle half) of the last ${run.length} steps under '${policyLabel(p)}'.`,
    };
  }
  const R = t && t.key === pageKey() ? t.R : null,
    r = R && p && R[p],
    own = r && (r.same || p),
    times = t && t.times && t.times.ms[own];
  if (times && times.length) {
    const s = { median: median(times), q1: quantile(times, 0.25), q3: quantile(times, 0.75) };
    return {
      seconds: s.median / 1000,
      text: `Measured below: ${msText(s)} per step under '${policyLabel(p)}' (median, middle half of ${times.length} rounds).`,
    };
  }
  const fmt = (s) => (s < 1 ? `${(1000 * s).toFixed(0)} ms` : s < 10 ? `${s.toFixed(1)} s` : `${Math.round(s)} s`);
  const e = S.stepEstimate;
  if (e) {
    const extra = r && R.none && r !== R.none ? r.total / R.none.total : 1;
    const seconds = e.seconds * extra;
    return {
      seconds,
      text:
        `Expected: about ${fmt(seconds)} per step at batch ${e.batch} here (one image's forward pass timed in this tab, x3 for the backward, x the batch` +
        `${extra > 1.0005 ? `, x${extra.toFixed(2)} for what ${policyLabel(p)} re-computes` : ''}).`,
    };
  }
  if (r && t.rate) {
    const seconds = r.total / t.rate;
    return {
      seconds,
      text: `Expected: about ${fmt(seconds)} per step (an estimate: ${(r.total / 1e9).toFixed(2)} GFLOP a step at the ${(t.rate / 1e9).toFixed(1)} GFLOP/s this tab measured).`,
    };
  }
  return null;
}
function pageKey() {
  try {
    return pageConfig().key;
  } catch {
    return null;
  }
}
/** Seconds a step of the page's model is expected to take here (null: not known yet). */
export function expectedStepSeconds() {
  const e = expectation();
  return e ? e.seconds : null;
}
/** Says it beside Start: one figure, measured or estimated, never both. */
export function showExpect() {
  const e = expectation();
  $('expect').textContent = e ? e.text : '';
}

export function teachConfigChanged() {
  clearTimeout(timer);
  timer = setTimeout(refresh, 250);
}

async function refresh(force = false) {
  if (!teacher || !view) return;
  let pc;
  try {
    pc = pageConfig();
  } catch (e) {
    $('teach-model').textContent = `(${e.message})`;
    return;
  }
  if (T().key === pc.key) {
    followPagePolicy();
    return;
  }
  const plan = S.plan && S.plan.plan,
    holds = plan ? plan.params + plan.grads + plan.optimizer : 0;
  if (!force && holds > AUTO_LIMIT) {
    $('teach-model').textContent =
      `(this model: its recorded step needs ${fmtBytes(holds)} in the teaching view's own engine)`;
    $('sched-record').hidden = false;
    return;
  }
  $('sched-record').hidden = true;
  const mine = ++seq;
  try {
    await busy(
      'recording the step under every policy',
      view.set({
        spec: pc.spec,
        batch: pc.batch,
        maskRatio: pc.maskRatio,
        modelName: `'${pc.cfg.model}'`,
        policy: pagePolicy() || 'block',
      }),
      { blocking: false },
    );
    if (mine !== seq) return;
    Object.assign(T(), {
      key: pc.key,
      pc,
      R: view.R,
      forwardFlops: view.R.none.flops.forward,
      times: null,
      mask: null,
      frozen: null,
    });
    for (const id of ['mask-result', 'frozen-result'])
      $(id)
        .querySelectorAll('tr')
        .forEach((tr) => tr.remove());
    for (const id of ['mask-prose', 'frozen-prose']) $(id).textContent = '';
    $('frozen-differ').hidden = true;
    document.querySelectorAll('#bug-mask svg.rowchart').forEach((x) => x.remove());
    $('teach-model').textContent =
      `(${pc.cfg.kind === 'classify' ? 'classifier' : pc.cfg.kind.toUpperCase()} '${pc.cfg.model}', batch ${pc.batch}: ${view.dims.depth} encoder blocks)`;
    $('times-note').textContent = '';
    await followPagePolicy();
    renderMemory();
    showExpect();
    document.dispatchEvent(new CustomEvent('teach-recorded'));
    await recycleTeacher();
  } catch (e) {
    if (mine === seq) $('teach-model').textContent = `(the step could not be recorded: ${e.message})`;
  }
}

/** The schedule shows the page's policy (recorded on demand when it is not among the compared). */
async function followPagePolicy() {
  const p = pagePolicy(),
    t = T();
  if (!p || !t.R) return;
  try {
    await view.addPolicy(p, p.startsWith('budget:') && !t.R[p] ? "the page's budget" : null);
    t.R = view.R;
  } catch (e) {
    $('teach-model').textContent = `('${p}': ${e.message})`;
    return;
  }
  view.show(p, -1);
  showExpect();
}

async function measureTimes() {
  const t = T();
  if (!t.R) return;
  if (t.measuring) {
    teacher.post('abort');
    return;
  }
  const plan = S.plan && S.plan.plan,
    fixed = plan ? plan.params + plan.grads + plan.optimizer : 0,
    room = budgetBytes() - fixed - (S.plan ? S.plan.parts.find(([n]) => n === 'wasm module')[1] : 0);
  // one computation timed once: a policy that runs the same kernel calls as another is not raced against it
  const all = distinctPolicies(t.R),
    policies = all.filter((p) => t.R[p].peak.bytes < room),
    skipped = all.filter((p) => !policies.includes(p));
  const perRound = (policies.reduce((a, p) => a + t.R[p].total, 0) + t.R.none.total) / (t.rate || 1e9);
  const reps = Math.max(3, Math.min(9, Math.floor(60 / Math.max(1e-3, perRound)) - 1));
  t.measuring = true;
  $('measure-times').textContent = 'Stop measuring';
  try {
    const res = await busy(
      `timing ${policies.length} policies, ${reps} interleaved rounds (about ${Math.ceil(perRound * (reps + 1))} s)`,
      teacher.call('times', {
        spec: t.pc.spec,
        batch: t.pc.batch,
        maskRatio: t.pc.maskRatio,
        policies,
        reps,
        warmup: 1,
      }),
      { blocking: false },
    );
    const rounds = res.ms.none.length;
    t.times = rounds ? { ms: res.ms, again: res.again } : null; // stopped before a whole round: nothing to show
    $('times-note').textContent =
      `${res.aborted ? `Stopped after ${rounds} of ${reps} rounds. ` : ''}Each policy: 1 warm-up step, then ${rounds} rounds timing one step of every policy, and none a second time, ` +
      `in an order rotated each round; ${res.threads} thread${res.threads > 1 ? 's' : ''}; the median and the middle half (25th–75th percentile) of the rounds.` +
      (skipped.length ? ` Not timed (over the budget): ${skipped.map(policyLabel).join(', ')}.` : '') +
      (S.running ? ' Training ran meanwhile: the times are shared with it.' : '');
    view.setTimes(t.times);
    showExpect();
  } catch (e) {
    setStatus(`timing: ${e.message}`, true);
  } finally {
    t.measuring = false;
    $('measure-times').textContent = 'Measure the step time of every policy';
    await recycleTeacher();
  }
}

/** Step times of `policies` of the page's model (none first), for the lesson: { ms, again, threads }. */
export async function timePolicies(policies, reps = 3) {
  const t = T();
  const res = await busy(
    `timing ${policies.join(' and ')}, ${reps} interleaved rounds`,
    teacher.call('times', { spec: t.pc.spec, batch: t.pc.batch, maskRatio: t.pc.maskRatio, policies, reps, warmup: 1 }),
    { blocking: false },
  );
  await recycleTeacher();
  return res;
}

/** The page's rate (FLOP/s): the default model's recorded FLOPs over its measured step time. */
async function calibrate() {
  const spec = specFor({ kind: 'mae', model: 'fmnist' }),
    batch = 32;
  const tr = await teacher.call('traces', { spec, batch, maskRatio: 0.75, policies: ['none'] });
  const tm = await teacher.call('times', { spec, batch, maskRatio: 0.75, policies: ['none'], reps: 3, warmup: 1 });
  T().rate = tr.results.none.total / (median(tm.ms.none) / 1000);
}

/** wasm memory never shrinks: a teacher that recorded a large model is replaced. */
async function recycleTeacher() {
  const m = await teacher.call('memory');
  if (m.linear > 256 * MiB) {
    teacher.terminate();
    teacher = await startTeacher(onTeacherEvent);
  }
}
function onTeacherEvent(m) {
  if (m.type === 'progress') progress(m.done / m.total);
}

// the demonstrations run on the page's encoder (a classifier's in an MAE; a 224 px preset's on the
// default 28 px model, to stay quick and small)
function bugSpec() {
  const { cfg, spec } = pageConfig();
  if (!encoderOf(cfg)) return specFor({ kind: 'mae', model: 'fmnist' });
  return cfg.kind === 'classify'
    ? { kind: 'mae', config: { encoder: encoderOf(cfg), decoder_dim: 64, decoder_depth: 1, decoder_heads: 4 } }
    : spec;
}
async function runBug(which) {
  try {
    const { cfg } = pageConfig();
    if (which === 'mask') {
      T().mask = await busy(
        'running the mask demonstration',
        teacher.call('maskDemo', { encoder: bugSpec().config.encoder }),
        { blocking: false },
      );
      renderMask(T().mask);
    } else {
      T().frozen = await busy(
        'running the frozen-preprocessing demonstration',
        teacher.call('frozenDemo', { spec: bugSpec(), maskRatio: cfg.maskRatio }),
        { blocking: false },
      );
      renderFrozen(T().frozen);
    }
    await recycleTeacher();
  } catch (e) {
    $(`${which}-prose`).textContent = e.message;
  }
}

export async function initTeach() {
  S.teach = { key: null, R: null, rate: 0, times: null };
  $('sched-record').addEventListener('click', () => refresh(true));
  $('run-mask').addEventListener('click', () => runBug('mask'));
  $('run-frozen').addEventListener('click', () => runBug('frozen'));
  try {
    teacher = await busy("starting the teaching view's engine", startTeacher(onTeacherEvent), { blocking: false });
    view = mount($('teach-widget'), {
      record: (req) => teacher.call('traces', req),
      headingLevel: 3,
      recordNow: false, // refresh() sets the page's model
    });
    // the measuring button and its note sit in the widget's comparison, under the table
    view.tools.append($('measure-times'), $('times-note'));
    $('measure-times').addEventListener('click', measureTimes);
    S.teach.view = view;
    await busy("measuring this tab's speed", calibrate(), { blocking: false });
    await refresh();
  } catch (e) {
    $('teach-model').textContent = `(the teaching view's engine did not start: ${e.message})`;
  }
}
