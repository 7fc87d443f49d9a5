// parity.js: `vitrine parity` -- runs PyTorch dumps (docs/parity-format.md) through the engine's
// parity harness and prints one line per file, with the contract of the native build/vitrine
// parity (the same lines; --json: the harness's own JSON, byte for byte). For CI: --tap, --junit
// FILE, --tolerance T (tighter only), reported by web/formats/parity-report.js (as vitrine/testing is).
import path from 'node:path';
import { writeAtomic, makeDirs } from '../train/node-data.js';
import { CliError, UsageError, decimal } from './args.js';
import { loadEngine, ENGINE_OPTIONS, BACKEND_OPTION, namesHelp } from './engine.js';
import { readInput, why } from './io.js';
import {
  PARITY_TOLERANCE,
  checkTolerance,
  applyTolerance,
  passRule,
  fmtE,
  tapReport,
  junitReport,
  unreadable,
} from '../formats/parity-report.js';

export const command = {
  name: 'parity',
  summary: 'check PyTorch dumps (docs/parity-format.md): PASS / FAIL per file',
  usage: 'vitrine parity FILE... [options]',
  description:
    'Runs the call each file describes and compares every expected tensor:\n' +
    'err = max|ours - expect| / max|expect|, PASS when every err <= 1e-4 (the pass rule, printed first);\n' +
    "beside it PyTorch's own float32 error (torch32_err) when the file has it.\n" +
    'Exit status 0 all passed, 1 a file failed or could not be run, 2 a usage error or a file\n' +
    'that could not be read (docs/testing.md: CI).',
  positionals: 'FILE...',
  options: {
    'grad-checkpointing': {
      value: 'POLICY',
      key: 'policy',
      help: 'run the file under this checkpointing policy (default none)',
    },
    dump: { value: 'DIR', help: 'write what was computed to DIR/<file name> (pass or fail)' },
    json: { type: 'boolean', help: 'one JSON object per file, as the parity harness writes it' },
    tap: { type: 'boolean', help: 'TAP version 13 on stdout instead of the lines (not with --json)' },
    junit: { value: 'FILE', help: 'also write JUnit XML to FILE (its folder is made)', parse: reportFile },
    tolerance: {
      value: 'T',
      help: `check err <= T instead of ${fmtE(PARITY_TOLERANCE)}: tighter only (a looser T is refused)`,
      parse: tolerance,
    },
    ...ENGINE_OPTIONS,
    ...BACKEND_OPTION,
  },
  moreHelp: namesHelp,
  main: parity,
};

// --junit's file: a file name, never the next option taken for one (--junit --wasm simd)
function reportFile(v, flag) {
  if (v.startsWith('-')) throw new UsageError(`${flag} needs a file name ('${v}' is an option)`);
  return v;
}
// --tolerance: a decimal number, checked by the rule vitrine/testing applies (tighter only)
function tolerance(v, flag) {
  const t = decimal()(v, flag);
  try {
    return checkTolerance(t);
  } catch (e) {
    throw new UsageError(`${flag}${e.message.replace(/^tolerance/, '')}`);
  }
}

/** One result as the text line both CLIs print (a torch32 error the file does not have is left out). */
export function parityLine(file, r) {
  if (r.error) return `FAIL ${file}: ${r.error}`;
  const t32 = r.torch32_err != null ? ` torch32_err ${fmtE(r.torch32_err)}` : '';
  const max32 = r.max_torch32_err != null ? `, max torch32_err ${fmtE(r.max_torch32_err)}` : '';
  return `${r.pass ? 'PASS' : 'FAIL'} ${file}  worst ${r.worst} err ${fmtE(r.err)}${t32}  (${r.tensors.length} tensors${max32})`;
}

async function parity({ values: o, positionals: files, given }) {
  if (!files.length) throw new CliError(`${command.usage} (vitrine parity --help)`, 2);
  if (o.json && o.tap) throw new UsageError('--json and --tap are two forms of stdout: choose one');
  const vt = await loadEngine(o);
  try {
    return await parityWith(vt, o, files, given);
  } finally {
    if (vt.backend.name === 'webgpu') vt.close();
  }
}

async function parityWith(vt, o, files, given) {
  const tol = o.tolerance ?? PARITY_TOLERANCE,
    tightened = given.has('tolerance');
  // --backend webgpu: each file computed on the GPU, judged by the same harness (web/webgpu/parity.js)
  const gpu =
    vt.backend.name === 'webgpu' ? new (await import('../webgpu/parity.js')).GpuParity(vt, vt.backend.gpu) : null;
  if (o.dump)
    try {
      makeDirs(o.dump);
    } catch (e) {
      throw new CliError(`--dump ${e.message}`, 2);
    }
  let failed = 0,
    unread = 0;
  const items = [];
  if (o.json) process.stdout.write('[');
  else if (!o.tap) process.stdout.write(passRule(tol) + '\n');
  for (const [i, file] of files.entries()) {
    let bytes = null,
      readError = null;
    try {
      bytes = readInput(file);
    } catch (e) {
      readError = `cannot open ${file}: ${why(e)}`;
    }
    const t0 = performance.now();
    let r =
      gpu && !readError
        ? await gpu.run(bytes, { policy: o.policy, dump: !!o.dump, file })
        : vt.parity(bytes, { policy: o.policy, dump: !!o.dump, file, readError });
    if (tightened) r = applyTolerance(r, tol);
    items.push({ file, result: r, seconds: (performance.now() - t0) / 1000 });
    if (!r.pass) failed++;
    if (unreadable(r)) unread++;
    if (o.dump && r.dump) {
      // pass or fail: what was computed
      const out = path.join(o.dump, path.basename(file));
      try {
        writeAtomic(out, r.dump);
      } catch (e) {
        process.stderr.write(`vitrine parity: cannot write ${out}: ${why(e)}\n`);
        failed++;
      }
    }
    if (o.json) {
      // the harness's JSON; with --tolerance, its pass under the tighter rule and the tolerance
      const text = tightened
        ? r.json.replace(/"pass": (true|false)/, `"pass": ${r.pass}, "tolerance": ${tol}`)
        : r.json;
      process.stdout.write(`${i ? ',' : ''}\n ${text}`);
    } else if (!o.tap && (r.error || r.worst != null))
      process.stdout.write(parityLine(file, r) + (gpu && r.backend ? ` [${gpu.ranOn(r)}]` : '') + '\n');
  }
  if (o.json) process.stdout.write('\n]\n');
  else if (o.tap) process.stdout.write(tapReport(items, tol));
  else process.stdout.write(`${files.length - failed} passed, ${failed} failed\n`);
  if (o.junit) {
    try {
      makeDirs(path.dirname(path.resolve(o.junit)));
      writeAtomic(
        o.junit,
        new TextEncoder().encode(junitReport(items, { tolerance: tol, policy: o.policy, build: vt.build })),
      );
    } catch (e) {
      throw new CliError(`cannot write --junit ${o.junit}: ${why(e)}`, 2);
    }
  }
  return unread ? 2 : failed ? 1 : 0;
}
