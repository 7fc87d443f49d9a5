// testing.js: vitrine/testing, assertions for Node's test runner (node:test) -- or any runner that
// takes a thrown AssertionError as a failure.
//   assertParity(file, { policy, wasm, backend, tolerance })   a parity file (docs/parity-format.md)
//     through the engine's parity harness, as `vitrine parity` runs it (wasm: the build; backend:
//     where the call is computed, wasm or webgpu -- the names createVitrine takes)
//   assertGolden(name, () => value, { dir, update, tolerance, t })   a value against the golden file
//     recorded for it (docs/testing.md: the golden format, recording and updating); what it did
//     (recorded, re-recorded, unchanged) goes to the test's output (t.diagnostic)
import { AssertionError } from 'node:assert';
import { statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createVitrine, enableNodeRelaxedSimd } from './vitrine.js';
import { readRegularFile, writeAtomic, makeDirs, strerror } from './train/node-data.js';
import {
  PARITY_TOLERANCE,
  checkTolerance,
  applyTolerance,
  failureDetail,
  passRule,
  fmtE,
} from './formats/parity-report.js';
import { encodeSafetensors, decodeTensors, compareTensors, fmtShape, GOLDEN_FORMAT } from './formats/golden.js';

export { PARITY_TOLERANCE, passRule, encodeSafetensors };

const MAX_FILE_BYTES = 1 << 30; // as `vitrine parity` reads
const toPath = (f) => (f instanceof URL ? fileURLToPath(f) : String(f));
const reason = strerror;

// ---- assertParity -----------------------------------------------------------------------------

const engines = new Map(); // one engine per build, backend, thread count and directory, for the process
async function engineFor(wasm, backend, threads, wasmDir) {
  const key = `${wasm ?? ''}|${backend ?? ''}|${threads}|${wasmDir ?? ''}`;
  if (!engines.has(key)) {
    engines.set(
      key,
      (async () => {
        await enableNodeRelaxedSimd(); // Node 20: before anything compiles wasm
        return createVitrine({ wasm, backend, threads, wasmDir });
      })(),
    );
  }
  return engines.get(key);
}
const gpuParities = new WeakMap(); // an engine's GPU side of parity (web/webgpu/parity.js), made once
async function gpuParity(vt) {
  if (!gpuParities.has(vt)) {
    const { GpuParity } = await import('./webgpu/parity.js');
    gpuParities.set(vt, new GpuParity(vt, vt.backend.gpu));
  }
  return gpuParities.get(vt);
}

/**
 * Runs a parity file through the engine's parity harness (what `vitrine parity` runs) and throws
 * an AssertionError when any expect/ tensor's err exceeds the tolerance, naming the worst tensor,
 * its err and PyTorch's own (torch32_err). A file that cannot be read or run throws too, saying
 * why. Resolves to the result (tensors with err and torch32_err) when it passes.
 * options: policy (gradient checkpointing, default none), wasm (the build: relaxed | simd | scalar |
 * wasi-simd | ...; default the best this host runs), backend (where the call is computed: 'wasm',
 * the default, or 'webgpu': the engine's recording replayed on the GPU, judged by the same
 * harness), tolerance (<= 1e-4, tighter only), threads (default 1), wasmDir, engine (an existing
 * Vitrine instead of wasm / backend / threads).
 */
export async function assertParity(
  file,
  { policy = null, wasm, backend, tolerance, threads = 1, wasmDir, engine } = {},
) {
  if (backend != null && backend !== 'wasm' && backend !== 'webgpu')
    throw new TypeError(
      `assertParity: backend ${JSON.stringify(backend)}: where the call runs, 'wasm' or 'webgpu'${typeof backend === 'string' && !['auto'].includes(backend) ? ` (a build is wasm: ${JSON.stringify(backend)})` : ''}`,
    );
  const tol = checkTolerance(tolerance);
  const f = toPath(file);
  let bytes;
  try {
    bytes = readRegularFile(f, MAX_FILE_BYTES);
  } catch (e) {
    throw new AssertionError({ message: `vitrine parity: cannot read ${f}: ${reason(e)}`, operator: 'assertParity' });
  }
  const vt = engine || (await engineFor(wasm, backend, threads, wasmDir));
  const r = applyTolerance(
    vt.backend.name === 'webgpu'
      ? await (await gpuParity(vt)).run(bytes, { policy, file: f })
      : vt.parity(bytes, { policy, file: f }),
    tol,
  );
  delete r.json;
  if (r.pass) return r;
  const how = `${r.module || '?'} ${r.fn || '?'}, wasm ${vt.build}${vt.backend.name === 'webgpu' ? ', backend webgpu' : ''}, grad checkpointing ${policy || 'none'}`;
  const err = new AssertionError({
    message: r.error
      ? `vitrine parity: ${f} could not be run (${how}): ${r.error}`
      : `vitrine parity: ${f} fails (${how})\n${failureDetail(r, tol)}\n${passRule(tol)}`,
    actual: r.error ? undefined : r.err,
    expected: r.error ? undefined : tol,
    operator: 'assertParity',
  });
  err.result = r;
  throw err;
}

// ---- golden values ----------------------------------------------------------------------------

const typedDtype = (a) =>
  a instanceof Float32Array
    ? 'F32'
    : a instanceof Float64Array
      ? 'F64'
      : a instanceof Int32Array
        ? 'I32'
        : a instanceof BigInt64Array
          ? 'I64'
          : a instanceof Int8Array
            ? 'I8'
            : a instanceof Uint8Array || a instanceof Uint8ClampedArray
              ? 'U8'
              : null;
const bytesOf = (a) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength).slice();
const isTensorLike = (v) => v && typeof v === 'object' && ArrayBuffer.isView(v.data) && Array.isArray(v.shape);

/** A value as named tensors: a typed array ([n]), { data, shape } (what Model.encode returns), a
 * number (F64 []), a bigint (I64 []), a boolean (BOOL []), an array of numbers (F64 [n]); arrays
 * and plain objects of these nest, named path.to.key (the root of a single tensor is 'value'). */
export function goldenTensors(value) {
  const out = [];
  const walk = (v, name) => {
    const where = name || 'value';
    if (isTensorLike(v)) {
      const dtype = typedDtype(v.data);
      if (!dtype) throw new TypeError(`${where}: ${v.data.constructor.name} is not a dtype a golden holds`);
      const numel = v.shape.reduce((a, b) => a * b, 1);
      if (!v.shape.every((d) => Number.isSafeInteger(d) && d >= 0) || numel !== v.data.length)
        throw new TypeError(`${where}: shape ${JSON.stringify(v.shape)} does not hold its ${v.data.length} values`);
      out.push({ name: where, dtype, shape: [...v.shape], bytes: bytesOf(v.data) });
    } else if (ArrayBuffer.isView(v) && !(v instanceof DataView)) {
      const dtype = typedDtype(v);
      if (!dtype) throw new TypeError(`${where}: ${v.constructor.name} is not a dtype a golden holds`);
      out.push({ name: where, dtype, shape: [v.length], bytes: bytesOf(v) });
    } else if (typeof v === 'number')
      out.push({ name: where, dtype: 'F64', shape: [], bytes: bytesOf(new Float64Array([v])) });
    else if (typeof v === 'bigint')
      out.push({ name: where, dtype: 'I64', shape: [], bytes: bytesOf(new BigInt64Array([BigInt.asIntN(64, v)])) });
    else if (typeof v === 'boolean')
      out.push({ name: where, dtype: 'BOOL', shape: [], bytes: new Uint8Array([v ? 1 : 0]) });
    else if (Array.isArray(v) && v.length && v.every((x) => typeof x === 'number'))
      out.push({ name: where, dtype: 'F64', shape: [v.length], bytes: bytesOf(Float64Array.from(v)) });
    else if (Array.isArray(v)) v.forEach((x, i) => walk(x, name ? `${name}.${i}` : String(i)));
    else if (
      v &&
      typeof v === 'object' &&
      (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null)
    ) {
      for (const [k, x] of Object.entries(v)) walk(x, name ? `${name}.${k}` : k);
    } else
      throw new TypeError(
        `${where}: ${v === null ? 'null' : typeof v} is not a value a golden holds (typed arrays, { data, shape }, numbers, arrays, objects of these)`,
      );
  };
  walk(value, '');
  if (!out.length) throw new TypeError('the value holds no tensors (an empty array or object)');
  // a golden is a flat safetensors file: each name must stand for one value, and one name is the
  // format's own (refused here, before anything is written, rather than lost in the file)
  const seen = new Set();
  for (const t of out) {
    if (t.name === '__metadata__')
      throw new TypeError(
        "__metadata__: safetensors keeps that name for the file's metadata, so a golden cannot hold a tensor of it (rename the key)",
      );
    if (seen.has(t.name))
      throw new TypeError(
        `two values are both named '${t.name}' (nested keys are joined with '.', so a key holding a '.' can name the same tensor as a nested one): rename one`,
      );
    seen.add(t.name);
  }
  return out;
}

const NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/;
const truthy = (v) => v != null && v !== '' && v !== '0' && v.toLowerCase() !== 'false';

/**
 * Checks a value against its golden file `dir/name.safetensors`:
 * - no golden yet: records it (the first run), unless in CI (the CI environment variable set),
 *   where a missing golden fails: goldens are recorded where they can be looked at, then committed;
 * - golden present: fails on any changed bit, or with `tolerance` when a float tensor's
 *   err = max|new - golden| / max|golden| exceeds it; another set of tensors, dtype or shape fails
 *   whatever the tolerance; a golden that cannot be read fails, saying so;
 * - update: true, or VITRINE_UPDATE_GOLDENS=1: (re)records it -- never in CI, where asking to is
 *   a failure. Nothing else ever writes it.
 * What it did goes to the test's output: t (node:test's test context) gets a diagnostic line
 * "golden NAME: recorded | re-recorded | unchanged ..."; without t, recording and re-recording
 * print that line on stdout (they are never silent).
 * fn: a function returning the value (or the value itself): see goldenTensors. When fn returns a
 * promise, so does assertGolden. Returns { status: 'recorded' | 'matched' | 'updated', file, report }.
 */
export function assertGolden(name, fn, { dir = 'goldens', update, tolerance, t } = {}) {
  if (typeof name !== 'string' || !NAME.test(name))
    throw new TypeError(`assertGolden: name ${JSON.stringify(name)}: letters, digits, _ . - (a file name, no path)`);
  if (tolerance != null && !(typeof tolerance === 'number' && tolerance >= 0 && Number.isFinite(tolerance)))
    throw new TypeError(`assertGolden ${name}: tolerance ${tolerance} is not a number >= 0`);
  if (t != null && typeof t.diagnostic !== 'function')
    throw new TypeError(`assertGolden ${name}: t is not a test context (node:test's t, with t.diagnostic)`);
  const value = typeof fn === 'function' ? fn() : fn;
  const check = (v) => {
    const r = checkGolden(name, v, {
      dir: toPath(dir),
      update: update ?? truthy(process.env.VITRINE_UPDATE_GOLDENS),
      askedBy: update != null ? `update: ${update}` : `VITRINE_UPDATE_GOLDENS=${process.env.VITRINE_UPDATE_GOLDENS}`,
      tolerance,
    });
    if (t) t.diagnostic(r.report);
    else if (r.status !== 'matched') process.stdout.write(`# ${r.report}\n`);
    return r;
  };
  return value && typeof value.then === 'function' ? value.then(check) : check(value);
}

const tensorCount = (ts) => `${ts.length} tensor${ts.length === 1 ? '' : 's'}`;

function checkGolden(name, value, { dir, update, askedBy, tolerance }) {
  const file = path.join(dir, `${name}.safetensors`);
  const now = goldenTensors(value);
  const ci = truthy(process.env.CI);
  if (update && ci)
    throw new AssertionError({
      operator: 'assertGolden',
      message:
        `golden ${name}: re-recording asked for (${askedBy}) in CI (CI=${process.env.CI}): a golden is never ` +
        '(re-)recorded in CI; record it where you can look at the value, and commit the file',
    });
  const record = (status, why = '') => {
    makeDirs(dir);
    writeAtomic(file, encodeSafetensors(now, { format: GOLDEN_FORMAT, name }));
    const what = status === 'recorded' ? 'recorded' : 're-recorded';
    return { status, file, report: `golden ${name}: ${what} ${file} (${tensorCount(now)})${why}` };
  };
  let exists = true;
  try {
    statSync(file);
  } catch (e) {
    if (e.code === 'ENOENT') exists = false;
    else
      throw new AssertionError({
        message: `golden ${name}: cannot read ${file}: ${reason(e)}`,
        operator: 'assertGolden',
      });
  }
  if (!exists) {
    if (update) return record('recorded');
    if (ci) {
      throw new AssertionError({
        operator: 'assertGolden',
        message:
          `golden ${name}: ${file} does not exist, and in CI (CI=${process.env.CI}) ` +
          'a golden is never recorded: run the test once where you can look at the value (it records it) and commit the file',
      });
    }
    return record('recorded');
  }
  let old;
  try {
    const got = decodeTensors(readRegularFile(file, MAX_FILE_BYTES));
    if (got.meta.format !== GOLDEN_FORMAT)
      throw new Error(`metadata format is ${JSON.stringify(got.meta.format)}, not ${GOLDEN_FORMAT}`);
    old = got.tensors;
  } catch (e) {
    if (update) return record('updated', `: the old one was not readable (${reason(e)})`);
    throw new AssertionError({
      operator: 'assertGolden',
      message:
        `golden ${name}: ${file} is not a readable golden (${reason(e)}); ` +
        'it is left as it is: delete it, or record it again with VITRINE_UPDATE_GOLDENS=1',
    });
  }
  const problems = [];
  const byName = new Map(old.map((t) => [t.name, t]));
  for (const t of now) {
    const o = byName.get(t.name);
    if (!o) problems.push(`tensor ${t.name} (${fmtShape(t)}) is not in the golden`);
    else if (o.dtype !== t.dtype || o.shape.length !== t.shape.length || o.shape.some((d, i) => d !== t.shape[i]))
      problems.push(`tensor ${t.name}: the golden is ${fmtShape(o)}, the value now is ${fmtShape(t)} (another shape)`);
    else {
      const d = compareTensors(o, t, tolerance);
      if (d) problems.push(`tensor ${t.name} (${fmtShape(t)}): ${d}`);
    }
    byName.delete(t.name);
  }
  for (const o of byName.values())
    problems.push(`tensor ${o.name} (${fmtShape(o)}) of the golden is missing from the value`);
  if (!problems.length)
    return {
      status: 'matched',
      file,
      report: `golden ${name}: unchanged (${tensorCount(now)}, ${tolerance != null ? `within tolerance ${fmtE(tolerance)}` : 'bit for bit'})`,
    };
  if (update)
    return record('updated', `: ${problems.length} change${problems.length === 1 ? '' : 's'}: ${problems[0]}`);
  throw new AssertionError({
    operator: 'assertGolden',
    message:
      `golden ${name} (${file}) differs${tolerance != null ? ` beyond tolerance ${fmtE(tolerance)}` : ' (bit for bit)'}:\n  ` +
      `${problems.join('\n  ')}\nif the change is intended, record it again: VITRINE_UPDATE_GOLDENS=1 (or { update: true })`,
  });
}
