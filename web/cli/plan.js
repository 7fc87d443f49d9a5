// plan.js: `vitrine plan` -- the bytes a step needs, by kind, before anything is allocated: for
// anything `vitrine train` runs (any preset or --config, MAE / AIM / classify, train's defaults:
// fmnist-p7-mlp2, batch 64, checkpointing block) and for a plain encode pass. The numbers are the
// engine's (Model.planTrainStep: vt_plan_train_step; Model.plan for encode); --budget asks the
// engine what fits (the policy with the least re-computation, the largest batch), --all-policies
// plans every policy the engine's search tries. A value that does not exist is left out (text)
// or null (JSON), never -1. `--objective encode --json` prints what the native build/vitrine plan
// prints for the same preset, batch and policy.
import { TRAIN_PRESETS } from '../train/presets.js';
import { OPTIONS, ownValue } from '../train/options.js';
import { objectiveNamed, objectiveNames, registerObjective, runDefault } from '../train/objectives/index.js';
import { CliError, UsageError, whole } from './args.js';
import { loadEngine, specDims, ENGINE_OPTIONS, BACKEND_OPTION, namesHelp } from './engine.js';
import { setPolicy } from './run.js';
import { readConfig, mib } from './io.js';
import { flagsOf } from './flags.js';

const KINDS = ['params', 'grads', 'optimizer', 'activations', 'total'];
const mae = objectiveNamed(OPTIONS.objective.default);
const DEFAULT = { preset: OPTIONS.model.default, batch: runDefault(mae, 'batch'), policy: OPTIONS.policy.default };

/** The flags of the model and step that plan and trace share (train's: web/train/options.js). */
export const MODEL_OPTIONS = flagsOf(
  {
    model: OPTIONS.model,
    config: OPTIONS.config,
    imgSize: OPTIONS.imgSize,
    batch: OPTIONS.batch,
    maskRatio: mae.options.maskRatio,
    policy: OPTIONS.policy,
  },
  mae,
);

/** --pool of plan and trace: the pooling of a classifier's step. */
export const POOL_OPTION = {
  ...flagsOf(objectiveNamed('classify').options, objectiveNamed('classify')).pool,
  help: 'classify: the pooling (default avg; a timm architecture: token)',
};
/** --objective of plan and trace: a registered objective's training step, or encode. */
export const OBJECTIVE_OPTION = (what) => ({
  value: 'OBJECTIVE',
  help: `${objectiveNames().join(', ')}: a training step of that objective (default ${mae.name});\nencode: a forward and backward of the encoder${what}`,
  parse: (v, flag) => (v === 'encode' ? v : objectiveNamed(v, flag).name),
});
/** --objective-module FILE: registers the objective a module exports before the flags are read. */
export const OBJECTIVE_MODULE = {
  value: 'FILE',
  key: 'objectiveModule',
  help: 'a module whose default export is an objective to register (docs/api.md, Objectives)',
};
/** A command's route: the module --objective-module names registered first. */
export async function registerModuleOf(argv) {
  const i = argv.findIndex((a) => a === '--objective-module' || a.startsWith('--objective-module='));
  if (i < 0) return;
  const file = argv[i].includes('=') ? argv[i].slice(19) : argv[i + 1];
  try {
    await registerObjective(file);
  } catch (e) {
    throw new UsageError(`--objective-module: ${e.message}`);
  }
}

export const command = {
  name: 'plan',
  summary: 'the memory of a training step (or an encode pass) by kind, and what fits a budget',
  usage: 'vitrine plan [options]',
  description:
    'Plans one step before anything is allocated: parameters, gradients, AdamW state and\n' +
    'activations in bytes, and the forward FLOPs the checkpointing policy re-computes. Defaults: the\n' +
    `step vitrine train runs (MAE, ${DEFAULT.preset}, batch ${DEFAULT.batch}, checkpointing ${DEFAULT.policy}).`,
  options: {
    objective: OBJECTIVE_OPTION(' (what the native build/vitrine plan plans)'),
    'objective-module': OBJECTIVE_MODULE,
    ...MODEL_OPTIONS,
    batch: { ...MODEL_OPTIONS.batch, parse: whole(1, 2147483647) },
    'grad-accum-steps': {
      ...flagsOf({ gradAccum: OPTIONS.gradAccum }, mae)['grad-accum-steps'],
      help: "a run of train --grad-accum-steps K: its optimizer step sums K micro-batches of\n--batch images, one after the other, so its memory is one micro-batch's (what is planned)",
    },
    classes: { value: 'N', help: 'classify: the classes of the head (default 10)', parse: whole(2, 1000000) },
    pool: POOL_OPTION,
    'tokens-kept': {
      value: 'K',
      help: 'encode: idx_keep of K tokens per image (default all)',
      parse: whole(0, 2147483647),
    },
    budget: {
      value: 'BYTES',
      help: 'bytes the whole step may take: does it fit, the policy with the least\nre-computation that fits, the largest batch that fits (100MB, 2GiB, ... as budget:BYTES)',
    },
    'all-policies': {
      type: 'boolean',
      help: 'one row per policy the engine tries (none, block, selective, sqrt, every:K)',
    },
    json: { type: 'boolean', help: 'one JSON object instead' },
    ...ENGINE_OPTIONS,
    ...BACKEND_OPTION,
  },
  moreHelp: namesHelp,
  route: async (argv) => {
    await registerModuleOf(argv);
    return command;
  },
  main: ({ values }) => plan(values),
};

// The model a step of `objective` trains (as vitrine train builds it: its objective's spec, with
// a head of --classes classes), or the encoder of an encode pass
export function specOf(o, objective) {
  const config = o.config != null ? readConfig(o.config) : null;
  if (objective !== 'encode') {
    const classes = Array.from({ length: o.classes ?? 10 }, (_, i) => String(i));
    return objectiveNamed(objective).spec({ model: o.model, config, pool: o.pool, imgSize: o.imgSize }, { classes });
  }
  const preset = o.model || DEFAULT.preset,
    p = ownValue(TRAIN_PRESETS, preset);
  if (config) return { kind: 'lightly', config: config.encoder || config };
  return p ? { kind: 'lightly', config: p.encoder } : { kind: 'lightly', preset };
}

// --budget text -> bytes, read by the engine's parser of budget:BYTES
function budgetOf(vt, text) {
  try {
    return vt.parseBytes(text);
  } catch (e) {
    throw new CliError(`--budget: ${e.message}`, 2);
  }
}
const flops = (f) => (f >= 1e9 ? `${(f / 1e9).toFixed(2)} GFLOP` : `${(f / 1e6).toFixed(1)} MFLOP`);
const pick = (p) => Object.fromEntries(KINDS.map((k) => [k, p[k]]));

async function plan(o) {
  const objective = o.objective || mae.name;
  if (o.tokensKept != null && objective !== 'encode')
    throw new CliError(`--tokens-kept is for --objective encode (${objective} keeps what its step keeps)`, 2);
  if (o.maskRatio != null && !(o.maskRatio >= 0 && o.maskRatio < 1))
    throw new CliError(`--mask-ratio: ${o.maskRatio} is not in [0, 1)`, 2);
  if ((o.gradAccum ?? 1) > 1 && o.backend === 'webgpu')
    throw new CliError(
      '--grad-accum-steps: accumulated steps do not run on the WebGPU backend (train refuses them there); plan --backend wasm',
      2,
    );
  let spec;
  try {
    spec = specOf(o, objective);
  } catch (e) {
    throw new CliError(e.message, e instanceof CliError ? e.status : 2);
  }
  const vt = await loadEngine(o),
    nt = vt.threads;
  try {
    return await planWith(o, vt, nt, objective, spec);
  } finally {
    if (vt.backend.name === 'webgpu') vt.close();
  }
}

// --backend webgpu: the bytes the GPU will hold for this step (web/webgpu/fit.js: the regions,
// the recorded arena, the kernels' workspace, the read-back buffers) against the adapter's limits,
// and per policy the largest batch that fits them (the planner's bytes: nothing is allocated, so a
// batch far over any limit is named, never a wasm out-of-memory)
async function deviceFit(vt, model, { objective, batch, policy, maskRatio }) {
  const { gpuPlan, largestBatch, deviceMisfit } = await import('../webgpu/fit.js');
  const { stepWorkspace } = await import('../webgpu/step.js');
  const { kernelsOf } = await import('../webgpu/kernels.js');
  const { adapterName } = await import('../webgpu/device.js');
  const gpu = vt.backend.gpu,
    limits = gpu.limits,
    contract = vt.manifest.kernels;
  let p, maxBatch;
  if (objective === 'encode') {
    // an encode pass (parity's calls): its recorded list against the limits
    const trace = model.wholeRows(() => model.traceStep({ batch, call: 'encode', json: true })),
      workspace = stepWorkspace(kernelsOf(gpu), trace, contract);
    const buffers = Object.values(trace.regions).reduce((a, b) => a + Math.ceil(b / 256) * 256, 0) + workspace,
      limit = deviceMisfit(trace, limits);
    p = { regions: trace.regions, workspace, recorded: true, buffers, staging: 0, total: buffers, fits: !limit, limit };
    maxBatch = null;
  } else {
    model.trainerInit({ maskRatio: maskRatio ?? 0 });
    p = gpuPlan(model, {
      batch,
      policy,
      gpu,
      contract,
      labels: objectiveNamed(objective).labels ? new Array(batch).fill(0) : null,
    });
    const policies = [...new Set([policy, ...model.namedPolicies()])];
    maxBatch = Object.fromEntries(policies.map((q) => [q, largestBatch(model, q, limits)]));
  }
  const adapter = adapterName(gpu.info);
  const out = {
    adapter,
    max_buffer_size: limits.maxBufferSize,
    max_storage_buffer_binding_size: limits.maxStorageBufferBindingSize,
    regions: p.regions,
    workspace: p.workspace,
    recorded: p.recorded,
    buffers: p.buffers,
    staging: p.staging,
    total: p.total,
    fits: p.fits,
    limit: p.limit,
    max_batch: maxBatch,
  };
  const r = p.regions,
    parts = Object.entries(r)
      .filter(([, b]) => b > 0)
      .map(([k, b]) => `${k} ${b}${k === 'arena' && p.recorded ? ' (recorded)' : ''}`);
  if (p.workspace != null) parts.push(`workspace ${p.workspace}`);
  out.text =
    `webgpu ${adapter}: maxBufferSize ${limits.maxBufferSize}, maxStorageBufferBindingSize ${limits.maxStorageBufferBindingSize}\n` +
    `  GPU buffers ${String(p.buffers).padStart(12)} bytes: ${parts.join(', ')}${p.recorded ? '' : " (the planner's: not recorded)"}\n` +
    `  read-back   ${String(p.staging).padStart(12)} bytes (staging: a sync's reads in pieces, the scalars)\n` +
    `  total       ${String(p.total).padStart(12)} bytes (${mib(p.total)} MiB)\n` +
    `  ${p.fits ? 'fits this adapter' : `does not fit: ${p.limit}`}` +
    (maxBatch
      ? `\n  largest batch that fits this adapter, per policy (every region within both limits): ${Object.entries(
          maxBatch,
        )
          .map(([q, b]) => `${q} ${b}`)
          .join(', ')}`
      : '');
  model.setGradCheckpointing(policy);
  return out;
}

async function planWith(o, vt, nt, objective, spec) {
  let model;
  specDims(vt, spec); // --preset / --config refused by name, before anything is allocated
  try {
    model = vt.createModel(spec);
    const policy = o.policy || DEFAULT.policy;
    setPolicy(model, policy);
    const budget = o.budget != null ? budgetOf(vt, o.budget) : null;
    const obj = objective === 'encode' ? mae : objectiveNamed(objective);
    const batch = o.batch ?? runDefault(obj, 'batch');
    const maskRatio = obj.masks ? (o.maskRatio ?? runDefault(obj, 'maskRatio')) : null;
    const name = o.config != null ? 'config' : o.model || DEFAULT.preset,
      kept = o.tokensKept ?? 0;
    const stepOf = (p) => {
      if (objective !== 'encode')
        return { ...model.planTrainStep({ batch, maskRatio, policy: p, budget: budget ?? 0 }), policy: p };
      model.setGradCheckpointing(p);
      return { ...model.plan('encode', { batch, tokensKept: kept, needGrad: true }), policy: p };
    };
    const step = stepOf(policy);
    const rows = o.allPolicies ? model.namedPolicies().map((p) => stepOf(p)) : null;
    const out = {
      objective,
      name,
      batch,
      accum: o.gradAccum ?? 1,
      kept,
      maskRatio,
      policy,
      threads: nt,
      budget,
      step,
      rows,
      dims: model.dims,
    };
    const device =
      vt.backend.name === 'webgpu' ? await deviceFit(vt, model, { objective, batch, policy, maskRatio }) : null;
    if (device && o.json) out.webgpu = device;
    process.stdout.write(o.json ? jsonOf(out) : textOf(out));
    if (device && !o.json) process.stdout.write(device.text + '\n');
    return 0;
  } catch (e) {
    if (e instanceof CliError) throw e;
    throw new CliError(e.message, e.code === 'VT_ERR_ARG' ? 2 : 1); // what the flags asked for is refused: a usage error
  } finally {
    if (model) model.dispose();
  }
}

// JSON: encode without a budget or rows is the native CLI's object, byte for byte
function jsonOf({ objective, name, batch, accum, kept, maskRatio, policy, threads, budget, step, rows, webgpu }) {
  if (objective === 'encode' && budget == null && !rows && accum === 1 && !webgpu) {
    return (
      `{"preset": "${name}", "batch": ${batch}, "tokens_kept": ${kept}, "policy": "${policy}", "threads": ${threads}, ` +
      KINDS.map((k) => `"${k}": ${step[k]}`).join(', ') +
      '}\n'
    );
  }
  const fitsOf = (p) => (budget == null ? null : objective === 'encode' ? p.total <= budget : p.fits);
  const row = (p) => ({ policy: p.policy, ...pick(p), recompute_flops: p.recomputeFlops ?? null, fits: fitsOf(p) });
  const j = {
    objective,
    preset: name === 'config' ? null : name,
    batch,
    grad_accum_steps: accum,
    mask_ratio: maskRatio,
    tokens_kept: objective === 'encode' ? kept : step.tokensKept,
    tokens_masked: objective === 'encode' ? null : step.tokensMasked,
    policy,
    threads,
    ...pick(step),
    recompute_flops: step.recomputeFlops ?? null,
    policy_met: step.policyMet ?? null,
    budget,
    fits: fitsOf(step),
  };
  if (budget != null && objective !== 'encode') {
    j.fit = step.fit ? { policy: step.fit.policy, ...pick(step.fit), recompute_flops: step.fit.recomputeFlops } : null;
    j.least = step.least ? { policy: step.least.policy, ...pick(step.least) } : null;
    j.max_batch = step.maxBatch > 0 ? step.maxBatch : null;
  }
  if (rows) j.policies = rows.map(row);
  if (webgpu) {
    const { text, ...w } = webgpu;
    j.webgpu = w;
  }
  return JSON.stringify(j) + '\n';
}

function textOf({ objective, name, batch, accum, kept, maskRatio, policy, threads, budget, step, rows, dims }) {
  const f = (n) => String(n).padStart(12);
  const per = accum > 1 ? ` (one micro-batch of a step of ${accum} x ${batch} images)` : '';
  let s =
    objective === 'encode'
      ? `${name} batch ${batch}${per}${kept ? ' (tokens kept)' : ''}, grad checkpointing ${policy}, ${threads} thread${threads === 1 ? '' : 's'}\n`
      : `${objective.toUpperCase()} ${name} ${dims.img}x${dims.img}x${dims.chans} patch ${dims.patch} dim ${dims.dim} depth ${dims.depth}, batch ${batch}${per}` +
        `${maskRatio != null ? `, mask ratio ${maskRatio}: ${step.tokensKept} tokens kept, ${step.tokensMasked} masked per image` : ''}, ` +
        `grad checkpointing ${policy}, ${threads} thread${threads === 1 ? '' : 's'}\n`;
  s += KINDS.map(
    (k) => `  ${k.padEnd(11)} ${f(step[k])} bytes${k === 'total' ? ` (${mib(step.total)} MiB)` : ''}\n`,
  ).join('');
  if (step.recomputeFlops != null)
    s += `  re-computed ${flops(step.recomputeFlops).padStart(12)} per step (the forward FLOPs ${policy} runs again in the backward)\n`;
  if (step.policyMet === false) s += `  no layout meets ${policy}: these are the bytes of the smallest plan\n`;
  if (budget != null) {
    const fits = objective === 'encode' ? step.total <= budget : step.fits;
    s += `budget ${budget} bytes (${mib(budget)} MiB): ${fits ? 'fits' : 'does not fit'}\n`;
    if (objective !== 'encode') {
      if (step.fit)
        s += `  least re-computation that fits: ${step.fit.policy}, total ${step.fit.total} bytes (${mib(step.fit.total)} MiB), re-computes ${flops(step.fit.recomputeFlops)}\n`;
      else
        s += `  no policy fits batch ${batch}; the smallest plan: ${step.least.policy}, total ${step.least.total} bytes (${mib(step.least.total)} MiB)\n`;
      s +=
        step.maxBatch > 0
          ? `  largest ${accum > 1 ? 'micro-' : ''}batch that fits: ${step.maxBatch}${step.maxBatch === batch ? ' (the one asked)' : ''}\n`
          : '  no batch fits\n';
    }
  }
  if (rows) {
    const cols = ['policy', ...KINDS.map((k) => `${k} MiB`), 're-computed', ...(budget != null ? ['fits'] : [])];
    const cells = rows.map((r) => [
      r.policy,
      ...KINDS.map((k) => mib(r[k])),
      r.recomputeFlops != null ? flops(r.recomputeFlops) : '',
      ...(budget != null ? [(objective === 'encode' ? r.total <= budget : r.fits) ? 'yes' : 'no'] : []),
    ]);
    const w = cols.map((c, i) => Math.max(c.length, ...cells.map((r) => r[i].length)));
    s +=
      [cols, ...cells]
        .map((r) => '  ' + r.map((c, i) => (i ? c.padStart(w[i]) : c.padEnd(w[i]))).join('  '))
        .join('\n') + '\n';
  }
  return s;
}
