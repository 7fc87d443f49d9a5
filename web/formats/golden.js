// golden.js: the tensors of a golden file (docs/testing.md: safetensors of F32 / F64 / I64 / I32 /
// I8 / U8 / BOOL, metadata format vitrine-golden/1) -- written, read back with every entry checked,
// compared bit for bit (or within a tolerance), summarised and diffed element by element for
// people. vitrine/testing's assertGolden and `vitrine golden show / diff` share it. No I/O.
import { readSafetensorsHeader } from './safetensors.js';
import { fmtE } from './parity-report.js';

export const GOLDEN_FORMAT = 'vitrine-golden/1';

/** dtype -> [typed array, bytes per element] of the dtypes a golden holds */
export const DTYPES = {
  F64: [Float64Array, 8],
  F32: [Float32Array, 4],
  I64: [BigInt64Array, 8],
  I32: [Int32Array, 4],
  I8: [Int8Array, 1],
  U8: [Uint8Array, 1],
  BOOL: [Uint8Array, 1],
};
export const FLOAT = new Set(['F64', 'F32']);

const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** safetensors bytes of tensors [{ name, dtype, shape, bytes }] with string metadata: compact
 * JSON header padded with spaces to 8 bytes, the data back to back (little-endian). */
export function encodeSafetensors(tensors, metadata = {}) {
  if (!littleEndian) throw new Error('vitrine/testing: safetensors are little-endian; this host is not');
  // no prototype: a tensor named __proto__ is a key like any other (JSON.parse reads it back as one)
  const header = Object.create(null);
  let off = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.bytes.length] };
    off += t.bytes.length;
  }
  header.__metadata__ = metadata;
  const enc = new TextEncoder();
  let text = JSON.stringify(header);
  while ((8 + enc.encode(text).length) % 8) text += ' ';
  const h = enc.encode(text),
    out = new Uint8Array(8 + h.length + off);
  new DataView(out.buffer).setBigUint64(0, BigInt(h.length), true);
  out.set(h, 8);
  let p = 8 + h.length;
  for (const t of tensors) {
    out.set(t.bytes, p);
    p += t.bytes.length;
  }
  return out;
}

/** The tensors of safetensors bytes ({ meta, tensors: [{ name, dtype, shape, bytes }] } in file
 * order), each checked: a dtype a golden holds, a shape of whole numbers, data inside the file and
 * of the size the shape names. Throws Error(why) otherwise. */
export function decodeTensors(u8) {
  const { length: n, header } = readSafetensorsHeader(u8);
  const meta = header.__metadata__ || {};
  const dataLen = u8.length - 8 - n,
    tensors = [];
  for (const [name, e] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    if (!e || !DTYPES[e.dtype])
      throw new Error(
        `tensor ${name}: dtype ${e && e.dtype} is not one a golden holds (${Object.keys(DTYPES).join(', ')})`,
      );
    if (!Array.isArray(e.shape) || !e.shape.every((d) => Number.isSafeInteger(d) && d >= 0))
      throw new Error(`tensor ${name}: bad shape ${JSON.stringify(e.shape)}`);
    const numel = e.shape.reduce((a, b) => a * b, 1),
      [a, b] = e.data_offsets || [];
    if (
      !Number.isSafeInteger(a) ||
      !Number.isSafeInteger(b) ||
      a < 0 ||
      b > dataLen ||
      b - a !== numel * DTYPES[e.dtype][1]
    )
      throw new Error(
        `tensor ${name}: data_offsets ${JSON.stringify(e.data_offsets)} do not hold ${numel} ${e.dtype} values in ${dataLen} bytes of data`,
      );
    tensors.push({ name, dtype: e.dtype, shape: e.shape, bytes: u8.subarray(8 + n + a, 8 + n + b) });
  }
  return { meta, tensors };
}

/** The element values of a tensor (numbers, or bigints for I64). */
export function tensorValues(t) {
  const [T, size] = DTYPES[t.dtype];
  const b = t.bytes.byteOffset % size ? t.bytes.slice() : t.bytes;
  return new T(b.buffer, b.byteOffset, b.byteLength / size);
}

export const fmtShape = (t) => `${t.dtype} [${t.shape.join(', ')}]`;

// the same element: for floats the same bits but any NaN equals any NaN (-0 and 0 differ)
const sameElement = (dtype, a, b) =>
  FLOAT.has(dtype) ? Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b)) : a === b;

/** How two tensors of the same dtype and shape differ: null when they are the same bit for bit
 * (NaN equals NaN) or, with a tolerance, when each float tensor's err = max|new - old| / max|old|
 * is within it; else one line: how many values changed, the first (old -> new), the err. */
export function compareTensors(old, now, tolerance) {
  if (old.bytes.length === now.bytes.length && old.bytes.every((x, i) => x === now.bytes[i])) return null;
  const a = tensorValues(old),
    b = tensorValues(now),
    n = a.length,
    float = FLOAT.has(old.dtype);
  let changed = 0,
    first = -1,
    maxDiff = 0,
    maxRef = 0,
    nonFinite = false;
  for (let i = 0; i < n; i++) {
    if (!sameElement(old.dtype, a[i], b[i])) {
      changed++;
      if (first < 0) first = i;
    }
    if (float) {
      const d = Math.abs(a[i] - b[i]);
      if (Number.isNaN(d) && !(Number.isNaN(a[i]) && Number.isNaN(b[i]))) nonFinite = true;
      else if (d > maxDiff) maxDiff = d;
      if (Math.abs(a[i]) > maxRef) maxRef = Math.abs(a[i]);
    }
  }
  if (first < 0) first = 0; // only NaN payloads differ
  const err = maxRef > 0 ? maxDiff / maxRef : maxDiff;
  if (tolerance != null && float && !nonFinite && err <= tolerance) return null;
  const at = `element ${first}: ${a[first]} -> ${b[first]}`;
  const what = float
    ? `; err = max|new - golden| / max|golden| = ${nonFinite ? 'inf (a NaN or infinity appeared)' : fmtE(err)}${tolerance != null ? ` > tolerance ${fmtE(tolerance)}` : ''}`
    : '';
  return `${changed || 'no'} of ${n} values changed (first at ${at})${what}`;
}

/** A tensor's summary: { n, min, max, mean, std } over its finite values, nan and inf counts
 * (means in double precision; I64 values as numbers). */
export function tensorStats(t) {
  const v = tensorValues(t),
    n = v.length;
  let min = Infinity,
    max = -Infinity,
    sum = 0,
    count = 0,
    nan = 0,
    inf = 0;
  for (let i = 0; i < n; i++) {
    const x = Number(v[i]);
    if (Number.isNaN(x)) nan++;
    else if (!Number.isFinite(x)) inf++;
    else {
      if (x < min) min = x;
      if (x > max) max = x;
      sum += x;
      count++;
    }
  }
  const mean = count ? sum / count : NaN;
  let ss = 0;
  for (let i = 0; i < n; i++) {
    const x = Number(v[i]);
    if (Number.isFinite(x)) ss += (x - mean) * (x - mean);
  }
  return {
    n,
    min: count ? min : NaN,
    max: count ? max : NaN,
    mean,
    std: count ? Math.sqrt(ss / count) : NaN,
    nan,
    inf,
  };
}

/** The index of flat element i in a tensor of `shape` ([] for a scalar). */
export function unflat(i, shape) {
  const at = new Array(shape.length);
  for (let d = shape.length - 1; d >= 0; d--) {
    at[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? Math.floor(i / shape[d]) : 0;
  }
  return at;
}

/** The elements where two tensors of one dtype and shape differ (compareTensors' sense):
 * { count, diffs: [{ i, at, old, now }] (the first `max`), maxAbs } */
export function differingElements(old, now, max = 20) {
  const a = tensorValues(old),
    b = tensorValues(now);
  const diffs = [];
  let count = 0,
    maxAbs = 0;
  for (let i = 0; i < a.length; i++) {
    if (sameElement(old.dtype, a[i], b[i])) continue;
    count++;
    const d = Math.abs(Number(a[i]) - Number(b[i]));
    if (d > maxAbs || Number.isNaN(d)) maxAbs = Number.isNaN(d) ? NaN : Math.max(maxAbs, d);
    if (diffs.length < max) diffs.push({ i, at: unflat(i, old.shape), old: a[i], now: b[i] });
  }
  return { count, diffs, maxAbs };
}

/** A value as people read it: the number as JavaScript prints it (every bit of a float32 or float64
 * told apart), -0 kept, true / false for BOOL. */
export function fmtValue(x, dtype) {
  if (dtype === 'BOOL') return x ? 'true' : 'false';
  if (typeof x === 'number' && Object.is(x, -0)) return '-0';
  return String(x);
}
