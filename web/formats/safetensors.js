// safetensors.js: the safetensors header in JavaScript -- read it, read its __metadata__, add to
// it. The engine reads and writes the tensors themselves (Model.loadSafetensors / saveSafetensors);
// this is for what travels beside them: a checkpoint's run settings, a classifier's class names,
// an encoder's timm_kwargs. Browser and Node alike (no I/O).
import { VitrineError } from '../errors.js';

/** Tensors read from one file (the engine's VT_ST_MAX_TENSORS): far more than any model's, counted
 * before the header is parsed. */
export const MAX_TENSORS = 65536;

// The keys of the JSON object in bytes [a, b), counted without parsing it (strings and nesting
// followed; malformed text is left to the parser).
function topLevelKeys(u8, a, b) {
  let keys = 0,
    depth = 0;
  for (let i = a; i < b; i++) {
    const c = u8[i];
    if (c === 0x22) {
      for (i++; i < b && u8[i] !== 0x22; i++) if (u8[i] === 0x5c) i++;
    } else if (c === 0x7b || c === 0x5b) depth++;
    else if (c === 0x7d || c === 0x5d) depth--;
    else if (c === 0x3a && depth === 1) keys++;
  }
  return keys;
}

/** The JSON header of safetensors bytes whose first 8 + n bytes are in u8 (n: its length), parsed
 * after its entries are counted (at most MAX_TENSORS and __metadata__). */
export function parseSafetensorsHeader(u8, n) {
  const keys = topLevelKeys(u8, 8, 8 + n);
  if (keys > MAX_TENSORS + 1)
    throw new VitrineError(`safetensors: ${keys} entries in the header, more than the ${MAX_TENSORS} tensors read`, -3);
  let h;
  try {
    h = JSON.parse(new TextDecoder().decode(u8.subarray(8, 8 + n)));
  } catch (e) {
    throw new VitrineError(`safetensors: bad header JSON (${e.message})`, -3);
  }
  if (!h || typeof h !== 'object' || Array.isArray(h))
    throw new VitrineError('safetensors: the header is not a JSON object', -3);
  return h;
}

/** The header of safetensors bytes: { length, header } -- the JSON header (tensor entries and
 * __metadata__) and its length in bytes (the data section starts at 8 + length). */
export function readSafetensorsHeader(bytes) {
  const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  if (u8.length < 8) throw new VitrineError('safetensors: shorter than its 8-byte header length', -3);
  const n = Number(new DataView(u8.buffer, u8.byteOffset, 8).getBigUint64(0, true));
  if (n > u8.length - 8) throw new VitrineError(`safetensors: header of ${n} bytes in a file of ${u8.length}`, -3);
  return { length: n, header: parseSafetensorsHeader(u8, n) };
}

/** The __metadata__ of safetensors bytes ({} when none; e.g. a training state: format, kind,
 * model_config, train_config, step, rng, grad_checkpointing). */
export function readSafetensorsMeta(bytes) {
  return readSafetensorsHeader(bytes).header.__metadata__ || {};
}

/** The same safetensors bytes with extra __metadata__ entries (string values; others are JSON
 * text); the tensor bytes are untouched (their offsets are relative to the data section). */
export function withMetadata(bytes, extra) {
  const { length: n, header } = readSafetensorsHeader(bytes);
  header.__metadata__ = { ...(header.__metadata__ || {}) };
  for (const [k, v] of Object.entries(extra)) header.__metadata__[k] = typeof v === 'string' ? v : JSON.stringify(v);
  let text = JSON.stringify(header);
  while ((8 + new TextEncoder().encode(text).length) % 8) text += ' ';
  const h = new TextEncoder().encode(text),
    out = new Uint8Array(8 + h.length + bytes.length - 8 - n);
  new DataView(out.buffer).setBigUint64(0, BigInt(h.length), true);
  out.set(h, 8);
  out.set(bytes.subarray(8 + n), 8 + h.length);
  return out;
}

// the exponent bits of each float type that mark a NaN or an infinity (all ones)
const NON_FINITE = { F32: [4, 0x7f800000], F16: [2, 0x7c00], BF16: [2, 0x7f80] };

/** The name of the first floating-point tensor of safetensors bytes that holds a NaN or an
 * infinity, or null (F32 / F16 / BF16 read from their bits; other types and entries whose
 * offsets do not fit the file are left to whoever reads them). */
export function nonFiniteTensor(bytes) {
  const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes),
    { length: n, header } = readSafetensorsHeader(u8),
    data = 8 + n;
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__' || !t || !Object.hasOwn(NON_FINITE, t.dtype) || !Array.isArray(t.data_offsets))
      continue;
    const [size, mask] = NON_FINITE[t.dtype],
      [a, b] = t.data_offsets;
    if (!(Number.isSafeInteger(a) && Number.isSafeInteger(b) && a >= 0 && a <= b && data + b <= u8.length)) continue;
    const view = new DataView(u8.buffer, u8.byteOffset + data + a, b - a);
    for (let o = 0; o + size <= b - a; o += size) {
      const bits = size === 4 ? view.getUint32(o, true) : view.getUint16(o, true);
      if ((bits & mask) === mask) return name;
    }
  }
  return null;
}
