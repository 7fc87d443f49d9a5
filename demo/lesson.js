// lesson.js: the page's first lesson, a guided path in six steps (next / back) over the views the
// page already has. It opens on the problem: the page's default model at a batch whose step does
// not fit a phone's 256 MB without checkpointing, refused with the numbers; then what a block
// keeps, why memory grows through the forward, what `block` drops and re-computes (and the run
// that then fits and trains), what it costs (measured), and when `sqrt` would win. Every number is
// the planner's (the same report the memory panel shows) or the engine's recorded step (the
// teaching view's, drawn here by a second checkpointing widget), never typed in.
import { $, S, page, setStatus } from './state.js';
import { fmtBytes, policyLabel, MiB } from './plan.js';
import { planner } from './engine-client.js';
import { readForm, budgetBytes } from './form.js';
import { configKey } from './worker-data.js';
import { setPolicyValue } from './policy-control.js';
import { teachView, timePolicies } from './teach.js';
import {
  mount,
  blockSizes,
  stepMoments,
  median,
  quantile,
  timingSummary,
  msText,
  ratioText,
  mflop,
  pct,
} from '../web/widget/index.js';

/** The lesson's run: MAE on the default 28 px model, batch 384, in a phone's 256 MB. */
export const LESSON = { kind: 'mae', model: 'fmnist', batch: 384, maskRatio: 0.75, budgetMB: 256 };
const lessonCfg = (policy) => ({
  ...readForm(),
  kind: LESSON.kind,
  model: LESSON.model,
  batch: LESSON.batch,
  maskRatio: LESSON.maskRatio,
  data: 'fmnist',
  policy,
  checkpointing: policy !== 'none',
});
const L = { step: 0, plans: null, figure: null, timed: null, timing: false, refused: null };
S.lesson = L;

const esc = (t) => String(t).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
const lessonKey = () => configKey(lessonCfg('none'));
/** The page's form holds the lesson's run (and its budget). */
const onLesson = () => {
  const f = readForm();
  return (
    f.kind === LESSON.kind &&
    f.model === LESSON.model &&
    f.batch === LESSON.batch &&
    f.maskRatio === LESSON.maskRatio &&
    budgetBytes() === LESSON.budgetMB * MiB
  );
};
/** The run that exists is the lesson's (its model and batch). */
const lessonRun = () =>
  !!S.run && S.run.cfg.kind === LESSON.kind && S.run.cfg.model === LESSON.model && S.run.cfg.batch === LESSON.batch;
/** The recorded step of the lesson's model (the teaching view's), null until it is recorded. */
const recorded = () => {
  const t = S.teach;
  return t && t.R && t.key === lessonKey() ? t.R : null;
};

/** The lesson's run in the form (no run may exist: the form is locked while one does). */
function applyLesson(policy) {
  if (S.run) return false;
  $('kind').value = LESSON.kind;
  $('model').value = LESSON.model;
  $('batch').value = String(LESSON.batch);
  $('mask-ratio').value = String(LESSON.maskRatio);
  $('data').value = 'fmnist';
  $('budget').value = String(LESSON.budgetMB);
  setPolicyValue(policy);
  page.policyApplied(policy);
  page.formChanged();
  // a notice that goes once the form no longer holds the lesson's run
  setStatus(
    `the lesson's run is in the form: MAE '${LESSON.model}', batch ${LESSON.batch}, ${LESSON.budgetMB} MB, checkpointing '${policy}'`,
    false,
    false,
    () => !onLesson(),
  );
  return true;
}

/** The planner's reports for the lesson's run under none and under block, at the phone's budget. */
async function planLesson() {
  const budget = LESSON.budgetMB * MiB;
  const [none, block] = await Promise.all(
    ['none', 'block'].map((p) => planner.call('plan', { cfg: lessonCfg(p), budget }).then((r) => r.report)),
  );
  L.plans = { none, block };
}

// ---- the steps ---------------------------------------------------------------------------------

const row = (report, p) => report.rows.find((r) => r.policy === p);
function runTimesUnder(policy) {
  const ms = S.losses.filter((l) => l.policy === policy && Number.isFinite(l.ms)).map((l) => l.ms);
  return ms.slice(1); // the first step of a run allocates its arena: not a step like the others
}

const STEPS = [
  {
    title: '1. The problem: this run does not fit a phone',
    body() {
      const P = L.plans;
      if (!P) return '<p>Planning the lesson’s run…</p>';
      const n = row(P.none, 'none');
      return (
        `<p>A phone’s browser gives a tab about ${LESSON.budgetMB} MB. This page’s model, MAE <code>${LESSON.model}</code> (28 px images, 4 encoder blocks), ` +
        `trained on ${LESSON.batch} images a step: without checkpointing the trainer needs <b>${fmtBytes(n.need)}</b>, ${fmtBytes(n.activations)} of it ` +
        `activations, what the blocks keep for their backward. The budget is ${fmtBytes(P.none.budget)}: the page refuses it before it runs rather than let the tab crash mid-step.</p>` +
        (L.refused
          ? `<p class="lesson-quote"><b>The page said:</b> ${esc(L.refused)}</p>`
          : '<p>Try it: the button puts this run in the form above and presses Start.</p>')
      );
    },
    actions() {
      return [
        {
          id: 'lesson-try',
          label: S.run
            ? 'Reset the run, then try batch 384 in 256 MB'
            : 'Try it: batch 384 in 256 MB, no checkpointing',
          run: async () => {
            if (S.run) await page.reset();
            applyLesson('none');
            await page.start();
            L.refused = S.refusal;
            render();
          },
        },
      ];
    },
  },
  {
    title: '2. What a block keeps',
    body() {
      const R = recorded();
      if (!R) return waitText();
      const k = R.none.blocks[0][0],
        { input, internals } = blockSizes(R.block, R.none, 0);
      return (
        `<p>A block’s backward needs values its forward computed. Without checkpointing, encoder block 0 keeps <b>${fmtBytes(k.kept)}</b> for it: ` +
        `${esc(k.keptNames.join(', '))}. Its input is only ${fmtBytes(input)}: what it computes inside is ${(internals / input).toFixed(1)} times what it is given. ` +
        `The drawing is the engine’s record of this step: each row a block, what it keeps and drops, its forward in blue and its backward in purple.</p>`
      );
    },
    figure: () => ({
      policy: 'none',
      moment: (r) => stepMoments(r).findIndex((m) => m.inBlock && m.phase === 'forward'),
    }),
  },
  {
    title: '3. Why memory grows through the forward',
    body() {
      const R = recorded();
      if (!R) return waitText();
      const r = R.none,
        enc = r.blocks[0].reduce((a, b) => a + b.kept, 0),
        dec = r.blocks[1] ? r.blocks[1].reduce((a, b) => a + b.kept, 0) : 0;
      return (
        `<p>Every block’s forward adds what it keeps, and nothing is given back until the backward reaches that block: the memory climbs ` +
        `through the forward (the encoder’s 4 blocks keep ${fmtBytes(enc)}, the decoder’s ${fmtBytes(dec)}) to its peak, <b>${fmtBytes(r.peak.bytes)}</b>, ` +
        `as the backward begins; then it falls block by block. That peak is what the engine plans and allocates before the step runs.</p>`
      );
    },
    figure: () => ({ policy: 'none', moment: (r) => peakMoment(r) }),
  },
  {
    title: '4. What block drops and re-computes',
    body() {
      const R = recorded(),
        P = L.plans;
      if (!R || !P) return waitText();
      const r = R.block,
        fwd = R.none.flops.forward,
        b = row(P.block, 'block'),
        { input, internals } = blockSizes(R.block, R.none, 0);
      const ms = runTimesUnder('block');
      return (
        `<p>Under <code>block</code> (what timm and lightly call <code>set_grad_checkpointing()</code>) each block keeps only its input, ` +
        `${fmtBytes(input)}, and drops ${fmtBytes(internals)}. In the backward it runs its forward again from that input, just before its own backward ` +
        `(hatched in orange): ${mflop(r.flops.recompute)} a step, ${pct(r.flops.recompute, fwd)} of a forward. The peak falls from ${fmtBytes(R.none.peak.bytes)} ` +
        `to <b>${fmtBytes(r.peak.bytes)}</b>, and the trainer needs ${fmtBytes(b.need)} of the ${fmtBytes(P.block.budget)}: ${b.fits ? 'it fits' : 'it still does not fit'}. ` +
        `The losses stay the same bits.</p>` +
        (S.run && S.policy === 'block' && S.step
          ? `<p class="lesson-quote"><b>Training under block:</b> step ${S.step}, loss ${S.losses[S.losses.length - 1].loss.toFixed(4)}` +
            (ms.length ? `, ${ms[ms.length - 1].toFixed(0)} ms the last step.` : '.') +
            '</p>'
          : '<p>Train it: the button chooses block and presses Start.</p>')
      );
    },
    figure: () => ({ policy: 'block', moment: () => -1 }),
    actions() {
      const mine = lessonRun() && S.policy === 'block';
      return [
        {
          id: 'lesson-train',
          label: mine
            ? S.running
              ? 'Training under block…'
              : 'Continue training under block'
            : S.run
              ? 'Reset the run, then train the lesson’s run with block'
              : 'Train with block checkpointing',
          disabled: mine && S.running,
          run: async () => {
            if (!mine) {
              if (S.run) await page.reset();
              applyLesson('block');
            }
            await page.start();
            render();
          },
        },
      ];
    },
  },
  {
    title: '5. What it costs',
    body() {
      const R = recorded();
      if (!R) return waitText();
      const r = R.block,
        ratio = r.total / R.none.total,
        ms = runTimesUnder('block');
      let out =
        `<p>The re-computation is ${mflop(r.flops.recompute)} a step on top of ${mflop(R.none.total)}: the arithmetic predicts ${ratio.toFixed(2)}× the time of a step without checkpointing. ` +
        (ms.length >= 3
          ? `This run measured <b>${msText({ median: median(ms), q1: quantile(ms, 0.25), q3: quantile(ms, 0.75) })}</b> a step under block (median and middle half of ${ms.length} steps).</p>`
          : 'Train with block (step 4) and this run’s own step times appear here.</p>');
      if (L.timing) out += '<p>Timing none against block in the teaching engine…</p>';
      else if (L.timed) {
        const s = timingSummary(L.timed),
          b = s.byPolicy.block;
        out +=
          `<p>Timed in the teaching engine (outside the 256 MB the trainer is held to), none and block in ${s.rounds} interleaved rounds, none twice: ` +
          `block took <b>${ratioText(b.ratio)}</b> the time of none (median and middle half of the rounds’ ratios)` +
          (b.distinct
            ? '.'
            : `, not distinguishable from none on this machine: two timings of none differed by ${ratioText(s.noise)}.`) +
          (s.busy ? ' This machine was busy: only large differences in time mean anything here.' : '') +
          '</p>';
      }
      return out;
    },
    figure: () => ({ policy: 'block', moment: (r) => stepMoments(r).findIndex((m) => m.phase === 'recompute') }),
    actions() {
      return [
        {
          id: 'lesson-time',
          label: L.timing ? 'Timing…' : 'Time none against block (pauses the run)',
          disabled: L.timing || !recorded(),
          run: async () => {
            if (S.running) await page.pause();
            L.timing = true;
            render();
            try {
              L.timed = await timePolicies(['none', 'block'], 3);
            } finally {
              L.timing = false;
              render();
            }
          },
        },
      ];
    },
  },
  {
    title: '6. When sqrt wins',
    body() {
      const R = recorded();
      if (!R || !R.sqrt) return waitText();
      const { input, internals } = blockSizes(R.block, R.none, 0),
        rr = internals / input,
        n = R.none.chains[0].depth;
      return (
        `<p>The textbook rule keeps every √n-th block’s input and re-runs √n blocks at a time. It wins when a block keeps about as much as it passes on. ` +
        `Here a block’s internals are ${rr.toFixed(1)} times its input, so re-running 2 blocks at once (<code>sqrt</code> at depth ${n}) holds more than it saves: ` +
        `peak ${fmtBytes(R.sqrt.peak.bytes)} against ${fmtBytes(R.block.peak.bytes)} for block, and it re-computes ${pct(R.sqrt.flops.recompute, R.none.flops.forward)} of a forward ` +
        `against ${pct(R.block.flops.recompute, R.none.flops.forward)}. The best segment is √(n / r) = ${Math.sqrt(n / rr).toFixed(2)} blocks long: ` +
        `<code>sqrt</code> beats <code>block</code> only in chains deeper than r² ≈ ${Math.round(rr * rr)} blocks. Every policy on this model is compared below, with the why in full.</p>`
      );
    },
    figure: () => ({ policy: 'sqrt', moment: () => -1 }),
  },
];

function waitText() {
  if (S.run && !lessonRun())
    return '<p>This step speaks of the lesson’s run: Reset the run above to follow it (the form is locked while a run exists).</p>';
  return '<p>Recording the lesson’s step in the teaching view…</p>';
}
function peakMoment(r) {
  const ms = stepMoments(r);
  const i = ms.findIndex((m) => m.t1 >= r.peak.t && m.t0 <= r.peak.t && m.phase !== 'forward');
  return i >= 0 ? i : ms.findIndex((m) => m.t0 >= r.peak.t);
}

// ---- drawing -----------------------------------------------------------------------------------

let rendering = null;
function render() {
  const st = STEPS[L.step];
  $('lesson-pos').textContent = `step ${L.step + 1} of ${STEPS.length}`;
  $('lesson-title').textContent = st.title;
  $('lesson-body').innerHTML = st.body();
  // the actions: the same buttons kept (focus stays on them), their labels and states refreshed
  const box = $('lesson-actions'),
    acts = st.actions ? st.actions() : [];
  const keep = new Set(acts.map((a) => a.id));
  for (const b of [...box.children]) if (!keep.has(b.id)) b.remove();
  for (const a of acts) {
    let b = $(a.id);
    if (!b) {
      b = document.createElement('button');
      b.id = a.id;
      b.type = 'button';
      b.addEventListener('click', () => {
        const cur = (STEPS[L.step].actions ? STEPS[L.step].actions() : []).find((x) => x.id === b.id);
        if (cur && !b.getAttribute('aria-disabled')) cur.run();
      });
      box.appendChild(b);
    }
    b.textContent = a.label;
    // aria-disabled, not disabled: a button that has focus keeps it
    if (a.disabled) b.setAttribute('aria-disabled', 'true');
    else b.removeAttribute('aria-disabled');
  }
  box.hidden = !acts.length;
  $('lesson-back').setAttribute('aria-disabled', String(L.step === 0));
  $('lesson-next').setAttribute('aria-disabled', String(L.step === STEPS.length - 1));
  drawFigure(st);
}
function drawFigure(st) {
  const R = recorded(),
    fig = $('lesson-figure');
  fig.hidden = !st.figure || !R;
  if (fig.hidden) return;
  const want = st.figure(),
    v = teachView();
  if (!L.figure) L.figure = mount($('lesson-widget'), { parts: ['schedule'], recordNow: false, headingLevel: 4 });
  if (L.figure.R !== R)
    L.figure.setResults(
      { results: R, dims: v.dims, threads: v.threads },
      {
        spec: v.spec,
        batch: LESSON.batch,
        maskRatio: LESSON.maskRatio,
        modelName: `'${LESSON.model}'`,
        policy: want.policy,
      },
    );
  const key = `${L.step}`;
  if (rendering !== key) {
    rendering = key;
    L.figure.show(want.policy, want.moment(R[want.policy]));
  }
}

function go(d) {
  const to = Math.max(0, Math.min(STEPS.length - 1, L.step + d));
  if (to === L.step) return;
  L.step = to;
  rendering = null;
  $('lesson-announce').textContent =
    `Step ${L.step + 1} of ${STEPS.length}: ${STEPS[L.step].title.replace(/^\d+\. /, '')}`;
  // from step 2 on the lesson speaks of its own run: the form is set to it when no run is in the way
  if (L.step > 0 && !onLesson() && !S.run) applyLesson(S.policy === 'block' ? 'block' : 'none');
  render();
}

/** Called by main.js on each training step and when the teaching view recorded a step. */
let pending = 0;
export function lessonUpdate() {
  if (pending) return;
  pending = requestAnimationFrame(() => {
    pending = 0;
    render();
  });
}

export async function initLesson() {
  $('lesson-back').addEventListener('click', () => go(-1));
  $('lesson-next').addEventListener('click', () => go(1));
  document.addEventListener('teach-recorded', lessonUpdate);
  render();
  try {
    await planLesson();
  } catch (e) {
    $('lesson-body').textContent = `The lesson's run could not be planned: ${e.message}`;
    return;
  }
  render();
}
