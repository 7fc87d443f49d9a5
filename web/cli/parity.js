// parity.js: `vitrine parity` -- runs PyTorch dumps (docs/parity-format.md) through the engine's
// parity harness and prints one line per file, with the contract of the native build/vitrine
// parity (the same lines; --json: the harness's own JSON, byte for byte).
import path from 'node:path';
import { writeAtomic, makeDirs } from '../data.js';
import { CliError } from './args.js';
import { loadEngine, ENGINE_OPTIONS, namesHelp } from './engine.js';
import { readInput, why, fmtE } from './io.js';

export const command = {
  name: 'parity',
  summary: 'check PyTorch dumps (docs/parity-format.md): PASS / FAIL per file',
  usage: 'vitrine parity FILE... [options]',
  description: 'Runs the call each file describes and compares every expected tensor:\n' +
    'err = max|ours - expect| / max|expect|, PASS when every err <= 1e-4; beside it PyTorch\'s own\n' +
    'float32 error (torch32_err) when the file has it. Exit status 1 when a file fails or cannot be run.',
  positionals: 'FILE...',
  options: {
    'grad-checkpointing': { value: 'POLICY', key: 'policy', help: 'run the file under this checkpointing policy (default none)' },
    dump: { value: 'DIR', help: 'write what was computed to DIR/<file name> (pass or fail)' },
    json: { type: 'boolean', help: 'one JSON object per file, as the parity harness writes it' },
    ...ENGINE_OPTIONS,
  },
  moreHelp: namesHelp,
  main: parity,
};

/** One result as the text line both CLIs print (a torch32 error the file does not have is left out). */
export function parityLine(file, r) {
  if (r.error) return `FAIL ${file}: ${r.error}`;
  const t32 = r.torch32_err != null ? ` torch32_err ${fmtE(r.torch32_err, 3)}` : '';
  const max32 = r.max_torch32_err != null ? `, max torch32_err ${fmtE(r.max_torch32_err, 3)}` : '';
  return `${r.pass ? 'PASS' : 'FAIL'} ${file}  worst ${r.worst} err ${fmtE(r.err, 3)}${t32}  (${r.tensors.length} tensors${max32})`;
}

async function parity({ values: o, positionals: files }) {
  if (!files.length) throw new CliError(`${command.usage} (vitrine parity --help)`, 2);
  const vt = await loadEngine(o);
  if (o.dump) try { makeDirs(o.dump); } catch (e) { throw new CliError(`--dump ${e.message}`, 2); }
  let failed = 0;
  if (o.json) process.stdout.write('[');
  files.forEach((file, i) => {
    let bytes = null, readError = null;
    try { bytes = readInput(file); } catch (e) { readError = `cannot open ${file}: ${why(e)}`; }
    const r = vt.parity(bytes, { policy: o.policy, dump: !!o.dump, file, readError });
    if (!r.pass) failed++;
    if (o.dump && r.dump) { // pass or fail: what was computed
      const out = path.join(o.dump, path.basename(file));
      try { writeAtomic(out, r.dump); } catch (e) { process.stderr.write(`vitrine parity: cannot write ${out}: ${why(e)}\n`); failed++; }
    }
    if (o.json) process.stdout.write(`${i ? ',' : ''}\n ${r.json}`);
    else if (r.error || r.worst != null) process.stdout.write(parityLine(file, r) + '\n');
  });
  process.stdout.write(o.json ? '\n]\n' : `${files.length - failed} passed, ${failed} failed\n`);
  return failed ? 1 : 0;
}
