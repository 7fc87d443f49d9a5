// teach.js: the "How checkpointing works" view. For the model on the page (the run's, else the
// form's) the teacher worker (teach-worker.js) records one training step under every policy
// (Model.traceStep); schedule-view.js draws one of them moment by moment, compare-view.js sets them
// side by side (with step times measured on request) and explains sqrt against block, bugs-view.js
// shows the two lightly bugs run live. Also the page's expected seconds per step: the recorded
// step's FLOPs at the rate this tab measured.
import { $, S, busy, progress, setStatus } from './state.js';
import { fmtBytes, policyLabel, MiB } from './plan.js';
import { startTeacher } from './engine-client.js';
import { readForm, budgetBytes } from './form.js';
import { specFor, encoderOf } from './worker-data.js';
import { drawSchedule, describeMoment, chainName, ordinal, mflop } from './schedule-view.js';
import { renderCompareTable, drawComparePlot, sqrtProse, order, keeps } from './compare-view.js';
import { median } from './teach-measure.js';
import { renderMask, renderFrozen } from './bugs-view.js';
import { renderMemory } from './memory-view.js';

const AUTO_LIMIT = 512 * MiB; // a model whose teacher would hold more is recorded on request only
let teacher = null,
  timer = 0,
  seq = 0,
  playing = 0;
const T = () => S.teach;

function pageConfig() {
  const cfg = S.run ? S.run.cfg : readForm();
  return { cfg, spec: specFor(cfg), batch: cfg.batch, maskRatio: cfg.maskRatio };
}
/** The policy the page has chosen, as the engine names it ('auto': the planner's budget:BYTES). */
function pagePolicy() {
  const f = readForm();
  return f.policy === 'auto' ? (S.plan && S.plan.policy.startsWith('budget:') ? S.plan.policy : null) : f.policy;
}

/** The page's one expectation of a step's time here: { seconds, how } (null: not known yet). In order:
 * the step times measured below; for a timm preset, its own forward pass timed by the planner
 * (worker.js: stepEstimate; x the recorded FLOPs of the policy over none's, once recorded); else
 * the recorded FLOPs at the rate this tab measured on the default model. */
function expectation() {
  const t = T(),
    p = S.run ? S.policy : pagePolicy();
  const r = t && t.R && (t.R[p] || t.R.none),
    times = t && t.times && t.times[p];
  if (r && times && times.length) return { seconds: median(times) / 1000, how: ' (measured below).' };
  const e = S.stepEstimate;
  if (e) {
    const extra = r && t.R.none && r !== t.R.none ? r.total / t.R.none.total : 1;
    return {
      seconds: e.seconds * extra,
      how:
        ` at batch ${e.batch} here (one image's forward pass timed in this tab, x3 for the backward, x the batch` +
        `${extra > 1.0005 ? `, x${extra.toFixed(2)} for what ${policyLabel(p)} re-computes` : ''}).`,
    };
  }
  if (r && t.rate)
    return {
      seconds: r.total / t.rate,
      how: ` (an estimate: ${(r.total / 1e9).toFixed(2)} GFLOP a step at the ${(t.rate / 1e9).toFixed(1)} GFLOP/s this tab measured).`,
    };
  return null;
}
/** Seconds a step of the page's model is expected to take here (null: not known yet). */
export function expectedStepSeconds() {
  const e = expectation();
  return e ? e.seconds : null;
}
/** Says it beside Start: one figure, whichever of the three is known first in that order. */
export function showExpect() {
  const e = expectation(),
    s = e && e.seconds;
  $('expect').textContent = !e
    ? ''
    : `Expected: about ${s < 1 ? `${(1000 * s).toFixed(0)} ms` : s < 10 ? `${s.toFixed(1)} s` : `${Math.round(s)} s`} per step${e.how}`;
}

export function teachConfigChanged() {
  clearTimeout(timer);
  timer = setTimeout(refresh, 250);
}

async function refresh(force = false) {
  if (!teacher) return;
  let pc;
  try {
    pc = pageConfig();
  } catch (e) {
    $('teach-model').textContent = `(${e.message})`;
    return;
  }
  const key = JSON.stringify([pc.spec, pc.batch, pc.maskRatio]);
  if (T().key === key) {
    followPagePolicy();
    return;
  }
  const plan = S.plan && S.plan.plan,
    holds = plan ? plan.params + plan.grads + plan.optimizer : 0;
  if (!force && holds > AUTO_LIMIT) {
    $('teach-model').textContent =
      `(this model: its recorded step needs ${fmtBytes(holds)} in the teaching view's own engine)`;
    $('sched-now').textContent = '';
    $('sched-record').hidden = false;
    return;
  }
  $('sched-record').hidden = true;
  const mine = ++seq;
  try {
    const res = await busy(
      'recording the step under every policy',
      teacher.call('traces', { spec: pc.spec, batch: pc.batch, maskRatio: pc.maskRatio }),
      { blocking: false },
    );
    if (mine !== seq) return;
    Object.assign(T(), {
      key,
      pc,
      R: res.results,
      forwardFlops: res.results.none.flops.forward,
      times: null,
      sched: { policy: null, index: -1 },
      memory: res.memory,
      mask: null,
      frozen: null,
    });
    for (const id of ['mask-result', 'frozen-result'])
      $(id)
        .querySelectorAll('tr')
        .forEach((tr) => tr.remove());
    for (const id of ['mask-prose', 'frozen-prose']) $(id).textContent = '';
    document.querySelectorAll('#bug-mask svg.rowchart').forEach((x) => x.remove());
    $('teach-model').textContent =
      `(${pc.cfg.kind === 'classify' ? 'classifier' : pc.cfg.kind.toUpperCase()} '${pc.cfg.model}', batch ${pc.batch}: ${res.dims.depth} encoder blocks)`;
    $('times-note').textContent = '';
    fillSchedPolicies();
    followPagePolicy();
    renderCompare();
    renderMemory();
    showExpect();
    await recycleTeacher();
  } catch (e) {
    if (mine === seq) $('sched-now').textContent = `The step could not be recorded: ${e.message}`;
  }
}

function fillSchedPolicies() {
  const sel = $('sched-policy'),
    t = T();
  sel.textContent = '';
  for (const p of order(Object.keys(t.R), t.R.none.chains[0].depth)) sel.add(new Option(policyLabel(p), p));
}
/** The schedule shows the page's policy (recorded on demand when it is not among the compared). */
async function followPagePolicy() {
  const p = pagePolicy(),
    t = T();
  if (!p || !t.R) return;
  if (!t.R[p]) {
    try {
      const res = await teacher.call('traces', {
        spec: t.pc.spec,
        batch: t.pc.batch,
        maskRatio: t.pc.maskRatio,
        policies: [p],
      });
      t.R[p] = res.results[p];
      fillSchedPolicies();
    } catch (e) {
      $('sched-now').textContent = `'${p}': ${e.message}`;
      return;
    }
  }
  showSchedule(p, -1);
  showExpect();
}

function showSchedule(policy, index) {
  const t = T(),
    r = t.R[policy];
  t.sched = { policy, index };
  $('sched-policy').value = policy;
  const ymax = Math.max(...Object.values(t.R).map((x) => x.peak.bytes));
  const { moments } = drawSchedule($('schedule'), r, { cursor: index, ymax });
  t.sched.count = moments.length;
  $('sched-pos').textContent =
    index < 0 ? `${moments.length} moments: step through them` : `moment ${index + 1} of ${moments.length}`;
  const rec = r.moments.filter((m) => m.phase === 'recompute');
  $('schedule-label').textContent =
    `The recorded training step under '${policyLabel(policy)}': ${r.chains.map((c, i) => `${c.depth} ${chainName(r, i)} block${c.depth === 1 ? '' : 's'}`).join(' and ')}; ` +
    (rec.length
      ? `re-computed in the backward: ${rec.map((m) => `${chainName(r, m.chain)} block ${m.block}`).join(', ')}, each just before its backward; `
      : 'nothing is re-computed; ') +
    `activation arena peak ${fmtBytes(r.peak.bytes)} (the plan: ${fmtBytes(r.planned)}); ` +
    `${mflop(r.flops.forward)} forward, ${mflop(r.flops.recompute)} re-computed, ${mflop(r.flops.backward)} backward.`;
  $('sched-now').textContent = index < 0 ? $('schedule-label').textContent : describeMoment(r, moments[index]);
  $('sched-prose').innerHTML = policyProse(policy, r);
}

function policyProse(policy, r) {
  const t = T(),
    fwd = t.forwardFlops,
    rec = `${((100 * r.flops.recompute) / fwd).toFixed(0)}% of a forward`;
  if (policy === 'none')
    return `<p>Without checkpointing every block keeps what its backward needs: the arena climbs through the forward to ${fmtBytes(r.peak.bytes)} and nothing is computed twice.</p>`;
  if (policy.startsWith('budget:')) {
    return (
      `<p>The budget search was given ${fmtBytes(Number(policy.slice(7)))} for activations and chose the least re-computation that fits; the encoder keeps ${keeps(r)}. It re-computes ${rec}` +
      `${r.flops.recompute ? '' : ': nothing needed re-computing'}, peak ${fmtBytes(r.peak.bytes)}.</p>`
    );
  }
  const what =
    policy === 'selective'
      ? 'Each block keeps the outputs of its matrix products and re-computes the rest (attention probabilities, GELU, LayerNorms) just before its backward'
      : r.chains[0].segment > 1
        ? `Only every ${ordinal(r.chains[0].segment)} block keeps its input; a whole segment runs forward again before its backward`
        : 'Each block keeps only its input; its forward runs again just before its backward';
  return `<p>${what}. Peak ${fmtBytes(r.peak.bytes)} against ${fmtBytes(t.R.none.peak.bytes)} without checkpointing, for ${rec} more work.</p>`;
}

function renderCompare() {
  const t = T();
  renderCompareTable($('compare-table'), t.R, t.times, t.forwardFlops);
  drawComparePlot($('compare-plot'), t.R, t.times);
  const pts = Object.entries(t.R)
    .map(([p, r]) => `${policyLabel(p)} ${fmtBytes(r.peak.bytes)}`)
    .join(', ');
  $('compare-label').textContent =
    `Arena peak against ${t.times ? 'measured step time' : 'FLOPs per step'}, one point per policy (${pts}); ` +
    'the orange curve joins every:K from K = 1 (block) to the depth; the ring is sqrt.';
  $('sqrt-prose').innerHTML = sqrtProse(t.R);
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
  const policies = Object.keys(t.R).filter((p) => t.R[p].peak.bytes < room),
    skipped = Object.keys(t.R).filter((p) => !policies.includes(p));
  const perRound = policies.reduce((a, p) => a + t.R[p].total / (t.rate || 1e9), 0);
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
    const rounds = Math.max(...Object.values(res.ms).map((a) => a.length));
    t.times = rounds ? res.ms : null; // stopped before a whole round: nothing to show
    $('times-note').textContent =
      `${res.aborted ? `Stopped after ${rounds} of ${reps} rounds. ` : ''}Each policy: 1 warm-up step, then ${rounds} rounds timing one step of every policy in turn ` +
      `(the order rotated each round), ${res.threads} thread${res.threads > 1 ? 's' : ''}; the median and the middle half (25th–75th percentile) of the rounds.` +
      (skipped.length ? ` Not timed (over the budget): ${skipped.map(policyLabel).join(', ')}.` : '') +
      (S.running ? ' Training ran meanwhile: the times are shared with it.' : '');
    renderCompare();
    showExpect();
  } catch (e) {
    setStatus(`timing: ${e.message}`, true);
  } finally {
    t.measuring = false;
    $('measure-times').textContent = 'Measure the step time of every policy';
    await recycleTeacher();
  }
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

function stepBy(d) {
  const t = T();
  if (!t.R || !t.sched.policy) return;
  const n = t.sched.count,
    i = Math.max(0, Math.min(n - 1, t.sched.index + d));
  showSchedule(t.sched.policy, i);
}
function play() {
  if (playing) {
    clearInterval(playing);
    playing = 0;
    $('sched-play').textContent = '▶ play';
    return;
  }
  const t = T();
  if (!t.R) return;
  if (t.sched.index >= t.sched.count - 1) t.sched.index = -1;
  $('sched-play').textContent = '❚❚ pause';
  playing = setInterval(() => {
    if (T().sched.index >= T().sched.count - 1) play();
    else stepBy(1);
  }, 900);
}

export async function initTeach() {
  S.teach = { key: null, R: null, rate: 0, times: null, sched: { policy: null, index: -1 } };
  $('sched-prev').addEventListener('click', () => stepBy(-1));
  $('sched-next').addEventListener('click', () => stepBy(1));
  $('sched-play').addEventListener('click', play);
  $('sched-policy').addEventListener('change', () => showSchedule($('sched-policy').value, -1));
  $('sched-record').addEventListener('click', () => refresh(true));
  $('measure-times').addEventListener('click', measureTimes);
  $('run-mask').addEventListener('click', () => runBug('mask'));
  $('run-frozen').addEventListener('click', () => runBug('frozen'));
  try {
    teacher = await busy("starting the teaching view's engine", startTeacher(onTeacherEvent), { blocking: false });
    await busy("measuring this tab's speed", calibrate(), { blocking: false });
    await refresh();
  } catch (e) {
    $('sched-now').textContent = `The teaching view's engine did not start: ${e.message}`;
  }
}
