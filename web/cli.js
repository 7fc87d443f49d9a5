#!/usr/bin/env node
// cli.js: the Node command line over the wasm build, with the contract of the native
// tools/vitrine.c (same lines, same JSON, same exit status):
//   vitrine parity FILE... [--grad-checkpointing POLICY] [--dump DIR] [--json] [--wasm BUILD]
//   vitrine plan --preset NAME --batch B [--tokens-kept K] [--grad-checkpointing POLICY] [--json] [--wasm BUILD]
// BUILD: simd | scalar | wasi | wasi-simd | wasi-scalar (default: the best this host runs).
// Exit status: 0 all passed, 1 a check failed or a file could not be run, 2 usage error.
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { basename } from 'node:path';
import { createVitrine } from './vitrine.js';

const USAGE_PARITY = 'usage: vitrine parity FILE... [--grad-checkpointing POLICY] [--dump DIR] [--json] [--wasm simd|scalar|wasi]';
const USAGE_PLAN = 'vitrine plan --preset NAME --batch B [--tokens-kept K] [--grad-checkpointing POLICY] [--json] [--wasm simd|scalar|wasi]';

// printf's %.Ne: the exponent has at least two digits.
function fmtE(v, digits) {
  const [m, e] = Number(v).toExponential(digits).split('e');
  const sign = e[0] === '-' ? '-' : '+';
  const ex = e.replace(/^[+-]/, '');
  return `${m}e${sign}${ex.length < 2 ? '0' + ex : ex}`;
}
// A JSON string as the native CLI writes it: escapes " and \ , control characters as \u00XX.
const jstr = (s) => '"' + String(s).replace(/["\\\u0000-\u001f]/g,
  (c) => (c === '"' || c === '\\' ? '\\' + c : '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'))) + '"';
// strerror() wording for the usual reasons a file cannot be opened.
const STRERROR = { ENOENT: 'No such file or directory', EACCES: 'Permission denied', EISDIR: 'Is a directory' };

// node:wasi prints an ExperimentalWarning on first use; drop only that one.
const emitWarning = process.emitWarning;
process.emitWarning = (warning, ...rest) => {
  const type = typeof rest[0] === 'string' ? rest[0] : rest[0] && rest[0].type;
  if (type === 'ExperimentalWarning' && String(warning).includes('WASI')) return;
  return emitWarning.call(process, warning, ...rest);
};
const loadEngine = (wasm) => createVitrine({ wasm });

async function cmdParity(args) {
  let policy = null, dump = null, json = false, wasm;
  const files = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--grad-checkpointing' && i + 1 < args.length) policy = args[++i];
    else if (a === '--dump' && i + 1 < args.length) dump = args[++i];
    else if (a === '--wasm' && i + 1 < args.length) wasm = args[++i];
    else if (a === '--json') json = true;
    else if (a.startsWith('--')) { process.stderr.write(`vitrine parity: unknown option ${a}\n`); return 2; }
    else files.push(a);
  }
  if (!files.length) { process.stderr.write(USAGE_PARITY + '\n'); return 2; }
  let vt;
  try { vt = await loadEngine(wasm); } catch (e) { process.stderr.write(`vitrine parity: ${e.message}\n`); return 2; }
  if (dump) mkdirSync(dump, { recursive: true });
  let failed = 0;
  const out = [];
  if (json) out.push('[');
  files.forEach((file, i) => {
    let r;
    try {
      r = vt.parity(readFileSync(file), { policy, dump: !!dump });
    } catch (e) {
      r = { pass: false, module: '', fn: '', error: e.syscall ? `cannot open ${file}: ${STRERROR[e.code] || e.message}` : e.message, tensors: [] };
    }
    if (!r.pass) failed++;
    if (r.pass && dump && r.dump) {
      try { writeFileSync(`${dump}/${basename(file)}`, r.dump); } catch (e) { process.stderr.write(`${e.message}\n`); failed++; }
    }
    const tensors = r.tensors || [];
    if (json) {
      let line = `${i ? ',' : ''}\n {"file": ${jstr(file)}, "pass": ${r.pass ? 'true' : 'false'}, "module": ${jstr(r.module || '')}, "fn": ${jstr(r.fn || '')}`;
      if (r.error) line += `, "error": ${jstr(r.error)}`;
      if (r.worst != null) line += `, "worst": ${jstr(r.worst)}, "err": ${fmtE(r.err, 6)}, "torch32_err": ${fmtE(r.torch32_err, 6)}`;
      line += ', "tensors": [' + tensors.map((t) => `{"name": ${jstr(t.name)}, "err": ${fmtE(t.err, 6)}, "torch32_err": ${fmtE(t.torch32_err, 6)}}`).join(', ') + ']}';
      out.push(line);
    } else if (r.error) {
      out.push(`FAIL ${file}: ${r.error}\n`);
    } else if (r.worst != null) {
      out.push(`${r.pass ? 'PASS' : 'FAIL'} ${file}  worst ${r.worst} err ${fmtE(r.err, 3)} torch32_err ${fmtE(r.torch32_err, 3)}  (${tensors.length} tensors, max torch32_err ${fmtE(r.max_torch32_err, 3)})\n`);
    }
    process.stdout.write(out.join(''));
    out.length = 0;
  });
  process.stdout.write(json ? '\n]\n' : `${files.length - failed} passed, ${failed} failed\n`);
  return failed ? 1 : 0;
}

async function cmdPlan(args) {
  let preset = 'vit_tiny_patch16_224', policy = 'none', batch = 1, kept = 0, json = false, wasm;
  const int = (s) => parseInt(s, 10) || 0; // atoi
  for (let i = 0; i < args.length; i++) {
    const a = args[i], more = i + 1 < args.length;
    if (a === '--preset' && more) preset = args[++i];
    else if (a === '--batch' && more) batch = int(args[++i]);
    else if (a === '--tokens-kept' && more) kept = int(args[++i]);
    else if (a === '--grad-checkpointing' && more) policy = args[++i];
    else if (a === '--objective' && more) ++i; // accepted and ignored, as natively
    else if (a === '--wasm' && more) wasm = args[++i];
    else if (a === '--json') json = true;
    else { process.stderr.write(`vitrine plan: unknown option ${a}\n`); return 2; }
  }
  let vt;
  try { vt = await loadEngine(wasm); } catch (e) { process.stderr.write(`vitrine plan: ${e.message}\n`); return 2; }
  let p, model;
  try {
    model = vt.createModel({ preset, kind: 'lightly' });
    model.setGradCheckpointing(policy);
    p = model.plan('encode', { batch, tokensKept: kept > 0 ? kept : 0, needGrad: true });
  } catch (e) {
    process.stderr.write(`vitrine plan: ${e.message}\n`);
    return 1;
  } finally { if (model) model.dispose(); }
  if (json) {
    process.stdout.write(`{"preset": "${preset}", "batch": ${batch}, "tokens_kept": ${kept}, "policy": "${policy}", "params": ${p.params}, ` +
      `"grads": ${p.grads}, "optimizer": ${p.optimizer}, "activations": ${p.activations}, "total": ${p.total}}\n`);
  } else {
    const f = (n) => String(n).padStart(12);
    process.stdout.write(`${preset} batch ${batch}${kept ? ' (tokens kept)' : ''}, grad checkpointing ${policy}\n` +
      `  params      ${f(p.params)} bytes\n  grads       ${f(p.grads)} bytes\n  optimizer   ${f(p.optimizer)} bytes\n` +
      `  activations ${f(p.activations)} bytes\n  total       ${f(p.total)} bytes (${(p.total / 1048576).toFixed(1)} MiB)\n`);
  }
  return 0;
}

async function main(argv) {
  if (argv[0] === 'parity') return cmdParity(argv.slice(1));
  if (argv[0] === 'plan') return cmdPlan(argv.slice(1));
  process.stderr.write(`${USAGE_PARITY}\n       ${USAGE_PLAN}\n`);
  return 2;
}

process.exitCode = await main(process.argv.slice(2));
