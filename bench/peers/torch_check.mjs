// peers/torch_check.mjs: PyTorch's reference for a peer's step (Node): the weights and inputs of
// peers/vit.mjs written as a safetensors file, bench/torch_vit.py --check run on it, its answer
// (a safetensors file too) read back for peers/vit.mjs's compareWithTorch.
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from '../lib.mjs';
import { IMG, encodeSafetensors, referenceOf } from './vit.mjs';

/** Runs bench/torch_vit.py --check: the same weights and inputs (written to dir/peer-in.safetensors),
 * two steps of forward, cross-entropy, backward and AdamW in float64 and float32. Returns
 * peers/vit.mjs referenceOf's answer and `file`, PyTorch's (dir/peer-ref.safetensors), or throws
 * with PyTorch's own message. */
export function torchReference({ dir, preset, depth, weights, inputs, python = '/usr/bin/python3' }) {
  const B = inputs.labels.length;
  const inFile = join(dir, 'peer-in.safetensors'),
    outFile = join(dir, 'peer-ref.safetensors');
  const tensors = new Map([...weights].map(([k, v]) => [`param/${k}`, v]));
  tensors.set('input/images', { shape: [B, 3, IMG, IMG], data: inputs.images });
  tensors.set('input/labels', { shape: [B], data: BigInt64Array.from(inputs.labels, (x) => BigInt(x)) });
  writeFileSync(inFile, encodeSafetensors(tensors, { preset, depth: String(depth) }));
  const r = spawnSync(python, [join(ROOT, 'bench/torch_vit.py'), '--check', inFile, '--check-out', outFile], {
    encoding: 'utf8',
  });
  if (r.status !== 0)
    throw new Error(`torch_vit.py --check: exit ${r.status}: ${(r.stderr || '').trim().split('\n').pop()}`);
  return { ...referenceOf(readFileSync(outFile)), file: outFile };
}
