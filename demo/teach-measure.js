// teach-measure.js: what the teaching view measures, on an engine it is given (the page's teacher
// worker, teach-worker.js; and bench/teach_policies.mjs in Node, for the table of docs/demo.md): the
// recorded step of a model under each checkpointing policy (Model.traceStep, read by
// trace-model.js, with the engine's plan beside it) and the step time of each policy measured
// properly -- warm-up steps first (the first step allocates the arena), then rounds that each time
// one step of every policy in a rotated order, so that a slow moment of the machine falls on every
// policy alike and a policy's time can be set against none's of the same round.
import { readTrace } from './trace-model.js';

/** The q-quantile of a (linear between order statistics); median = quantile(a, 0.5). */
export const quantile = (a, q) => {
  const s = [...a].sort((x, y) => x - y),
    i = q * (s.length - 1),
    lo = Math.floor(i);
  return s.length ? s[lo] + (s[Math.min(lo + 1, s.length - 1)] - s[lo]) * (i - lo) : NaN;
};
export const median = (a) => quantile(a, 0.5);
/** Round by round, the time of `p` over the time of `base` in the same round (times from measureTimes). */
export const pairedRatios = (times, p, base = 'none') => {
  const a = times[p] || [],
    b = times[base] || [];
  return a.slice(0, Math.min(a.length, b.length)).map((t, i) => t / b[i]);
};

// deterministic stand-ins for images and upstream gradients (values in [-1, 1])
export const wave = (n, k = 0.37, ph = 0) => {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = Math.sin(i * k + ph);
  return x;
};
const classifier = (spec) => spec.kind === 'timm';

export function modelFor(vt, spec, { maskRatio, trainer = true }) {
  const m = vt.createModel(spec);
  m.initWeights(1);
  if (trainer) m.trainerInit({ lr: 1e-4, warmupSteps: 0, totalSteps: 1000, maskRatio, seed: 1 });
  return m;
}
function oneStep(m, spec, batch, x) {
  if (classifier(spec))
    return m.trainStepLabels(
      x,
      Int32Array.from({ length: batch }, (_, i) => i % 2),
    );
  return m.trainStep(x, batch);
}

/** The recorded step under each policy (null: 'none', the named policies the engine's budget
 * search tries, and a budget half way between the activations of none and block), read for
 * teaching, with the engine's plan beside it. */
export function recordPolicies(vt, { spec, batch, maskRatio, policies = null }) {
  const m = modelFor(vt, spec, { maskRatio });
  try {
    const out = {};
    if (!policies) {
      const act = (p) => m.planTrainStep({ batch, policy: p }).activations;
      policies = [...m.namedPolicies(), `budget:${Math.floor((act('none') + act('block')) / 2)}`];
    }
    for (const p of policies) {
      m.setGradCheckpointing(p);
      const plan = m.planTrainStep({ batch });
      const labels = classifier(spec) ? new Int32Array(batch) : null; // labels are inputs of the list, not part of it
      out[p] = {
        ...readTrace(m.traceStep({ batch, labels, json: true })),
        policy: p,
        activations: plan.activations,
        recomputeFlops: plan.recomputeFlops,
        stepBytes: plan.total,
      };
    }
    return { results: out, named: m.namedPolicies(), dims: m.dims };
  } finally {
    m.dispose();
  }
}

/** Step times of `policies`: `warmup` steps of each first, then `reps` rounds, each timing one step
 * of every policy in a rotated order. Returns { ms: { [policy]: [ms of round 0, 1, ..] }, aborted }.
 * onStep(done, total) is awaited after every step (the worker reports progress and yields there);
 * stopped() ends the measurement early. */
export async function measureTimes(
  vt,
  { spec, batch, maskRatio, policies, reps = 7, warmup = 1 },
  { now = () => performance.now(), onStep = async () => {}, stopped = () => false } = {},
) {
  const m = modelFor(vt, spec, { maskRatio });
  const { img, chans } = m.dims,
    x = wave(batch * chans * img * img);
  const total = policies.length * (warmup + reps);
  let done = 0;
  const ms = Object.fromEntries(policies.map((p) => [p, []]));
  try {
    for (const p of policies)
      for (let w = 0; w < warmup; w++) {
        m.setGradCheckpointing(p);
        oneStep(m, spec, batch, x);
        await onStep(++done, total);
      }
    for (let r = 0; r < reps && !stopped(); r++) {
      // a round stopped half way is dropped, so that every policy keeps the same rounds
      const round = {};
      for (let i = 0; i < policies.length && !stopped(); i++) {
        const p = policies[(i + r) % policies.length];
        m.setGradCheckpointing(p);
        const t0 = now();
        oneStep(m, spec, batch, x);
        round[p] = now() - t0;
        await onStep(++done, total);
      }
      if (Object.keys(round).length === policies.length) for (const p of policies) ms[p].push(round[p]);
    }
    return { ms, aborted: stopped() };
  } finally {
    m.dispose();
  }
}
