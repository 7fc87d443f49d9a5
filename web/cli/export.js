// export.js: `vitrine export --torch DIR CHECKPOINT` -- a training checkpoint as a run PyTorch
// continues (web/train/torch-run.js: the model's state_dict under PyTorch's keys, AdamW's
// state_dict, the schedule, the data position, the mask generator), for
// python/vitrine_continue.py under torchrun; and the reading of such a folder again, for `vitrine
// train --resume DIR` (readTorchRun). docs/scale-out.md.
import { statSync } from 'node:fs';
import path from 'node:path';
import { readRegularFile, writeAtomic, makeDirs } from '../train/node-data.js';
import { exportTorchRun, importTorchRun, TORCH_RUN_FILES } from '../train/torch-run.js';
import { CliError } from './args.js';
import { readInput, why, mib } from './io.js';
import { loadEngine, ENGINE_OPTIONS } from './engine.js';

// a ViT-B/16 MAE's optimizer file is ~0.9 GB: room for that, and no more than a Buffer holds
const MAX_FILE = 2 ** 31 - 1;

export const command = {
  name: 'export',
  summary: 'a training checkpoint as a PyTorch run (python/vitrine_continue.py continues it)',
  usage: 'vitrine export --torch DIR CHECKPOINT',
  description:
    "Writes the whole training state of CHECKPOINT (vitrine train's checkpoint.safetensors) into DIR\n" +
    "in PyTorch's shapes: model.safetensors (the state_dict: lightly's MAE / AIM example, timm's\n" +
    "classifier), optimizer.safetensors + run.json (torch.optim.AdamW's state_dict, the schedule,\n" +
    'the data position, the mask generator). python/vitrine_continue.py DIR trains on (torchrun,\n' +
    'DistributedDataParallel); vitrine train --resume DIR comes back. See docs/scale-out.md.',
  positionals: 'CHECKPOINT',
  options: {
    torch: { value: 'DIR', help: 'the folder to write (made if absent; its three files replaced)' },
    json: { type: 'boolean', help: 'end the output with one JSON line' },
    ...ENGINE_OPTIONS,
  },
  main: ({ values, positionals }) => exportRun(values, positionals),
};

async function exportRun(o, positionals) {
  if (o.torch == null) throw new CliError('--torch DIR: where to write the run (the only format there is)', 2);
  if (o.torch === '') throw new CliError('--torch: an empty folder name', 2);
  if (positionals.length !== 1)
    throw new CliError(`give one CHECKPOINT (got ${positionals.length}): vitrine export --torch DIR CHECKPOINT`, 2);
  const file = positionals[0];
  let bytes;
  try {
    bytes = readInput(file);
  } catch (e) {
    throw new CliError(`cannot read ${file}: ${why(e)}`);
  }
  // the engine's own check of the state (train_config, step, rng, model_config, the CRC-32s) first
  const vt = await loadEngine(o);
  try {
    vt.checkTrainState(bytes);
  } catch (e) {
    throw new CliError(`${file}: ${e.message}`);
  } finally {
    vt.close();
  }
  let files;
  try {
    files = exportTorchRun(bytes, { source: file });
  } catch (e) {
    throw new CliError(e.message);
  }
  writeTorchRun(o.torch, files);
  const run = JSON.parse(new TextDecoder().decode(files['run.json'])),
    sizes = Object.fromEntries(TORCH_RUN_FILES.map((f) => [f, files[f].length])),
    total = Object.values(sizes).reduce((a, b) => a + b, 0);
  const groups = run.optimizer.state_dict.param_groups,
    trained = groups.reduce((a, g) => a + g.params.length, 0);
  process.stderr.write(
    `vitrine export: wrote ${o.torch}: ${run.objective.toUpperCase()} at step ${run.step} of ${run.schedule.total_steps}, ` +
      `${trained} trained tensors in ${groups.length} AdamW groups, ${mib(total)} MiB ` +
      `(${TORCH_RUN_FILES.map((f) => `${f} ${mib(sizes[f])}`).join(', ')})\n` +
      `  continue: python3 python/vitrine_continue.py ${o.torch} --data ${run.data.source === 'fashion-mnist' ? 'fashion-mnist' : 'DIR'} --out OUT\n`,
  );
  if (o.json)
    process.stdout.write(
      JSON.stringify({ dir: o.torch, objective: run.objective, step: run.step, bytes: sizes, total }) + '\n',
    );
  return 0;
}

/** Writes a torch run's files into dir (made if absent), each atomically, run.json last. */
export function writeTorchRun(dir, files) {
  try {
    makeDirs(dir);
    for (const f of TORCH_RUN_FILES) writeAtomic(path.join(dir, f), files[f]);
  } catch (e) {
    throw new CliError(`cannot write ${dir}: ${e.code ? why(e) : e.message}`);
  }
}

/** Whether `p` is a folder (a torch run given to --resume), not a checkpoint file. */
export function isFolder(p) {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}

/** A torch run folder (python/vitrine_continue.py's --out, or an export) as a vitrine checkpoint's
 * bytes; a missing, damaged or half-written run is one line naming the file. */
export function readTorchRun(dir) {
  const files = {};
  for (const f of TORCH_RUN_FILES) {
    try {
      files[f] = new Uint8Array(readRegularFile(path.join(dir, f), MAX_FILE));
    } catch (e) {
      throw new CliError(`${dir}: cannot read ${f}: ${why(e)} (a torch run holds ${TORCH_RUN_FILES.join(', ')})`);
    }
  }
  try {
    return importTorchRun(files, { source: dir });
  } catch (e) {
    throw new CliError(e.message);
  }
}
