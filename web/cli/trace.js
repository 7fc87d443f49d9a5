// trace.js: `vitrine trace` -- one training step of anything `vitrine train` runs (or an encode pass
// and its backward) as the kernel calls it is made of, recorded by the engine without running it
// (Model.traceStep: vt_trace_*; docs/kernels.md). The summary: calls and FLOPs per kernel, the FLOPs
// the checkpointing policy re-computes, the activation arena's peak, and per block what it keeps
// for the backward, re-computes and frees; --json: the list itself. The step is plan's: train's
// defaults (MAE, fmnist-p7-mlp2, batch 64, block, mask ratio 0.5). build/vitrine trace is the
// native twin (engine defaults there: give --mask-ratio 0.5 for train's step).
import { CliError, whole } from './args.js';
import { loadEngine, ENGINE_OPTIONS, namesHelp } from './engine.js';
import { specOf, MODEL_OPTIONS, OBJECTIVE_OPTION, OBJECTIVE_MODULE, POOL_OPTION, registerModuleOf } from './plan.js';
import { OPTIONS } from '../train/options.js';
import { objectiveNamed, runDefault } from '../train/objectives/index.js';
import { defaultLr } from '../train/session.js';

const mae = objectiveNamed(OPTIONS.objective.default);

export const command = {
  name: 'trace',
  summary: 'a training step (or an encode pass) as the kernel calls it is made of',
  usage: 'vitrine trace [options]',
  description:
    'Records one step without running it: every kernel call with its operands (where in the\n' +
    'parameters, gradients, optimizer state, activation arena or inputs), its phase (forward,\n' +
    "re-compute, backward, optimizer) and block, and the arena's allocations. Defaults: the step\n" +
    `vitrine train runs (MAE, ${OPTIONS.model.default}, batch ${runDefault(mae, 'batch')}, checkpointing ${OPTIONS.policy.default}).`,
  options: {
    objective: OBJECTIVE_OPTION(''),
    'objective-module': OBJECTIVE_MODULE,
    ...MODEL_OPTIONS,
    classes: { value: 'N', help: 'classify: the classes of the head (default 10)', parse: whole(2, 1000000) },
    pool: POOL_OPTION,
    json: { type: 'boolean', help: 'the list of kernel calls (format vitrine-trace/1) instead of the summary' },
    ...ENGINE_OPTIONS,
  },
  moreHelp: namesHelp,
  route: async (argv) => {
    await registerModuleOf(argv);
    return command;
  },
  main: ({ values }) => trace(values),
};

async function trace(o) {
  const objective = o.objective || mae.name;
  if (o.maskRatio != null && !(o.maskRatio >= 0 && o.maskRatio < 1))
    throw new CliError(`--mask-ratio: ${o.maskRatio} is not in [0, 1)`, 2);
  let spec;
  try {
    spec = specOf(o, objective);
  } catch (e) {
    throw new CliError(e.message, e instanceof CliError ? e.status : 2);
  }
  const vt = await loadEngine(o);
  let model;
  try {
    model = vt.createModel(spec);
    model.initWeights(0);
    model.setGradCheckpointing(o.policy || OPTIONS.policy.default);
    const obj = objective === 'encode' ? null : objectiveNamed(objective);
    const batch = o.batch ?? runDefault(obj || mae, 'batch');
    // the trainer of a run's first step (its settings as a new run's, one step long)
    if (obj)
      model.trainerInit(
        obj.trainer({ lr: defaultLr(obj, batch), warmup: 0, steps: 1, seed: OPTIONS.seed.default, ...obj.settings(o) }),
      );
    const name = o.config != null ? 'config' : o.model || OPTIONS.model.default;
    const out = model.traceStep({
      batch,
      call: objective === 'encode' ? 'encode' : 'train',
      json: o.json,
      labels: obj && obj.labels ? new Int32Array(batch) : null,
    });
    process.stdout.write(o.json ? JSON.stringify(out) + '\n' : `${name} (${objective}), ${out}`);
    return 0;
  } catch (e) {
    if (e instanceof CliError) throw e;
    throw new CliError(e.message);
  } finally {
    if (model) model.dispose();
  }
}
