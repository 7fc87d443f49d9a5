// measure.js: what the checkpointing widget shows, measured on an engine it is given (the widget's
// own, the demo's teacher worker, and bench/teach_policies.mjs in Node, which writes the table of
// docs/demo.md): the recorded step of a model under each checkpointing policy (Model.traceStep,
// read by trace.js, with the engine's plan beside it; policies whose recorded steps are the same
// kernel calls marked as one computation) and the step time of each policy measured properly --
// warm-up steps first (the first step allocates the arena), then rounds that each time one step of
// every policy in a rotated order, so that a slow moment of the machine falls on every policy
// alike and a policy's time can be set against the baseline's of the same round. Each round also
// times the baseline twice: how much two timings of the same computation disagree is the noise
// floor, and a busy machine shows there (timingSummary).
import { readTrace } from './trace.js';

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

/** The budget half way between the activations of none and block (what the comparison adds to the named policies). */
export const HALF_WAY = 'half way between none and block';

/** The recorded step under each policy (null: 'none', the named policies the engine's budget
 * search tries, and a budget half way between the activations of none and block, its `note`
 * saying so), read for teaching, with the engine's plan beside it. A policy whose kernel calls are
 * those of an earlier one (a budget that keeps everything is none) has `same`: that policy. */
export function recordPolicies(vt, { spec, batch, maskRatio, policies = null }) {
  const m = modelFor(vt, spec, { maskRatio });
  try {
    const out = {};
    let half = null;
    if (!policies) {
      const act = (p) => m.planTrainStep({ batch, policy: p }).activations;
      half = `budget:${Math.floor((act('none') + act('block')) / 2)}`;
      policies = [...m.namedPolicies(), half];
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
        ...(p === half ? { note: HALF_WAY } : {}),
      };
    }
    sameComputations(out);
    return { results: out, named: m.namedPolicies(), dims: m.dims, threads: vt.threads };
  } finally {
    m.dispose();
  }
}

/** Marks in R (policy -> readTrace result) each policy whose digest equals an earlier one's: r.same = that policy. */
export function sameComputations(R) {
  const seen = new Map();
  for (const [p, r] of Object.entries(R)) {
    if (seen.has(r.digest)) r.same = seen.get(r.digest);
    else {
      seen.set(r.digest, p);
      delete r.same;
    }
  }
  return R;
}
/** The policies of R worth timing: one per computation (a policy with `same` is not raced against its twin). */
export const distinctPolicies = (R, policies = Object.keys(R)) => policies.filter((p) => !R[p].same);

// the baseline's second timing in each round
export const AGAIN = 'again';

/** Step times of `policies` (the first is the baseline, timed twice a round): `warmup` steps of each
 * first, then `reps` rounds, each timing one step of every policy, and the baseline once more, in
 * an order rotated each round. Returns { ms: { [policy]: [ms of round 0, 1, ..] }, again: [ms of
 * the baseline's second timing per round], aborted }. onStep(done, total) is awaited after every
 * step (the worker reports progress and yields there); stopped() ends the measurement early. */
export async function measureTimes(
  vt,
  { spec, batch, maskRatio, policies, reps = 7, warmup = 1 },
  { now = () => performance.now(), onStep = async () => {}, stopped = () => false } = {},
) {
  const m = modelFor(vt, spec, { maskRatio });
  const { img, chans } = m.dims,
    x = wave(batch * chans * img * img);
  const slots = [...policies, AGAIN],
    total = policies.length * warmup + slots.length * reps;
  let done = 0;
  const ms = Object.fromEntries(policies.map((p) => [p, []])),
    again = [];
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
      for (let i = 0; i < slots.length && !stopped(); i++) {
        const s = slots[(i + r) % slots.length];
        m.setGradCheckpointing(s === AGAIN ? policies[0] : s);
        const t0 = now();
        oneStep(m, spec, batch, x);
        round[s] = now() - t0;
        await onStep(++done, total);
      }
      if (Object.keys(round).length === slots.length) {
        for (const p of policies) ms[p].push(round[p]);
        again.push(round[AGAIN]);
      }
    }
    return { ms, again, aborted: stopped() };
  } finally {
    m.dispose();
  }
}

const spread = (a) => ({ median: median(a), q1: quantile(a, 0.25), q3: quantile(a, 0.75), n: a.length });
const overlap = (a, b) => a.q1 <= b.q3 && b.q1 <= a.q3;
/** Two timings of the same computation that commonly (middle half) disagree by more than this: a busy machine. */
export const BUSY = 0.05;

/**
 * timingSummary({ ms, again }, base = 'none') -> {
 *   rounds, noise: { median, q1, q3 } of again / base per round (two timings of one computation),
 *   busy: the noise's middle half reaches past 1 +- BUSY,
 *   byPolicy: { [p]: { ms: {median, q1, q3, n}, ratio: {median, q1, q3} | null (the base), distinct: its ratios'
 *               middle half clear of the noise's (a difference this machine shows) } },
 *   ties: [[p, q, ...]] checkpointing policies whose ratios' middle halves overlap (not distinguishable here)
 * }
 */
export function timingSummary({ ms, again = [] }, base = 'none') {
  const ps = Object.keys(ms).filter((p) => ms[p].length);
  const rounds = ms[base] ? ms[base].length : 0;
  const noise = again.length && rounds ? spread(pairedRatios({ [AGAIN]: again, [base]: ms[base] }, AGAIN, base)) : null;
  const byPolicy = {};
  for (const p of ps) {
    const ratio = p === base || !ms[base] ? null : spread(pairedRatios(ms, p, base));
    byPolicy[p] = {
      ms: spread(ms[p]),
      ratio,
      distinct: ratio ? (noise ? !overlap(ratio, noise) : ratio.q1 > 1 || ratio.q3 < 1) : false,
    };
  }
  // policies (other than the base) in order of their median ratio, grouped while each overlaps every
  // one of its group: within a group no two can be told apart here (not transitively: a chain of
  // overlaps can join two that can)
  const others = ps
    .filter((p) => byPolicy[p].ratio)
    .sort((a, b) => byPolicy[a].ratio.median - byPolicy[b].ratio.median);
  const ties = [];
  let group = [];
  for (const p of others) {
    if (group.length && !group.every((q) => overlap(byPolicy[q].ratio, byPolicy[p].ratio))) {
      if (group.length > 1) ties.push(group);
      group = [];
    }
    group.push(p);
  }
  if (group.length > 1) ties.push(group);
  return {
    rounds,
    noise,
    busy: !!noise && (noise.q1 < 1 - BUSY || noise.q3 > 1 + BUSY),
    byPolicy,
    ties,
  };
}
