// metadata.js: what travels beside the tensors of a vitrine file, checked as the untrusted input it
// is -- one validator per kind of file, run before anything is allocated or decoded from it:
//   checkClassifier(meta)        a classifier file of `vitrine train --objective classify`
//                                (vitrine_classifier: format, classes, spec, img, chans)
//   checkEncoder(meta)           an encoder's timm_kwargs (the architecture of encoder.safetensors)
// and the rules they and a training checkpoint's run settings (web/train/checkpoint.js) are
// checked with. (A parity dump's metadata is the engine's to check: harness/parity.c. The engine checks again
// what it reads itself -- model configs, train_config, step, rng, CRCs -- when it loads a state.)
// Every number is range-checked, every string and list type-checked, JSON with a repeated key is
// refused, and a failure names the field (`vitrine_run.batch`, `vitrine_classifier.classes[2]`,
// `timm_kwargs.img_size`), never a byte offset. No I/O, no Node modules: the CLI and the demo alike.
import { VitrineError } from '../errors.js';

/** A field of a file's metadata that is missing or wrong: `field` names it (dotted path). */
export class MetadataError extends VitrineError {
  constructor(field, message) {
    super(`${field}: ${message}`, -3); // VT_ERR_FORMAT, as the engine's damaged-file errors
    this.name = 'MetadataError';
    this.field = field; // e.g. 'vitrine_run.batch'
    this.reason = message; // what is wrong with it
  }
}

// a value as a message shows it: JSON, at most 60 characters
export function show(v) {
  if (v === undefined) return 'missing';
  let s;
  try {
    s = typeof v === 'number' && !Number.isFinite(v) ? String(v) : JSON.stringify(v);
  } catch {
    s = String(v);
  }
  return s.length > 60 ? `${s.slice(0, 57)}...` : s;
}

// ---- strict JSON ---------------------------------------------------------------------------

// The first object key that JSON text (known to parse) repeats, as a dotted path, or null.
function repeatedKey(text) {
  const frames = []; // objects { keys: Set, key, expectKey } and arrays { index }
  const step = (f) => (f.keys ? `.${f.key}` : `[${f.index}]`); // a frame's current child
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      const top = frames[frames.length - 1];
      if (top && top.keys && top.expectKey) {
        // an object's key: new in that object?
        const k = JSON.parse(text.slice(i, j + 1));
        if (top.keys.has(k)) return `${frames.slice(0, -1).map(step).join('')}.${k}`.replace(/^\./, '');
        top.keys.add(k);
        top.key = k;
        top.expectKey = false;
      }
      i = j;
    } else if (c === '{') frames.push({ keys: new Set(), key: '', expectKey: true });
    else if (c === '[') frames.push({ index: 0 });
    else if (c === '}' || c === ']') frames.pop();
    else if (c === ',') {
      const top = frames[frames.length - 1];
      if (top.keys) top.expectKey = true;
      else top.index++;
    }
  }
  return null;
}

/** JSON text -> value, strictly: the text must parse and no object may repeat a key (JSON.parse
 * keeps the last silently). Errors name `field` (and the repeated key's path), never a position. */
export function parseJson(text, field) {
  if (typeof text !== 'string') throw new MetadataError(field, `${show(text)} is not JSON text`);
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    // V8 says where ("at position 12", or quotes the text): the field is what the reader needs
    const why = e.message
      .replace(/ at position \d+.*$/s, '')
      .replace(/ in JSON$/, '')
      .replace(/, "[\s\S]*" is not valid JSON$/, '');
    throw new MetadataError(field, `not JSON (${why})`);
  }
  const dup = repeatedKey(text);
  if (dup) throw new MetadataError(field ? `${field}${dup[0] === '[' ? '' : '.'}${dup}` : dup, 'the key appears twice');
  return v;
}

// ---- rules: each returns null (good) or what is wrong ----------------------------------------

export const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
/** A whole number in min..max. */
export const int = (min, max) => (v) =>
  Number.isInteger(v) && v >= min && v <= max ? null : `${show(v)} is not a whole number in ${min}..${max}`;
/** A finite number in min..max ([min, max) when open). */
export const num =
  (min, max, { open = false } = {}) =>
  (v) =>
    typeof v === 'number' && v >= min && (open ? v < max : v <= max)
      ? null
      : `${show(v)} is not a number in ${open ? `[${min}, ${max})` : `${min}..${max}`}`;
/** Text: non-empty, at most `max` characters, matching `re` when given. */
export const text =
  ({ max = 4096, re = null, what = null } = {}) =>
  (v) =>
    typeof v === 'string' && v.length > 0 && v.length <= max && (!re || re.test(v))
      ? null
      : `${show(v)} is not ${what || `text of 1..${max} characters`}`;
/** One of the values listed. */
export const oneOf =
  (...vals) =>
  (v) =>
    vals.includes(v) ? null : `${show(v)} is not one of ${vals.map((x) => show(x)).join(', ')}`;
/** The rule, or null / absent. */
export const optional = (rule) => (v) => (v == null ? null : rule(v));
/** A JSON object (what its fields are is checked elsewhere). */
export const object = () => (v) => (isObject(v) ? null : `${show(v)} is not an object`);

/** Checks obj's fields against { name: rule } (fields not listed are ignored) and returns obj.
 * field: obj's own name, the prefix of every message. */
export function checkFields(obj, rules, field) {
  if (!isObject(obj)) throw new MetadataError(field, `${show(obj)} is not an object`);
  for (const [k, rule] of Object.entries(rules)) {
    const why = rule(obj[k]);
    if (why) throw new MetadataError(`${field}.${k}`, why);
  }
  return obj;
}

// ---- the kinds of file -----------------------------------------------------------------------

/** The formats vitrine writes, by kind. */
export const FORMATS = { checkpoint: 'vitrine-train/1', classifier: 'vitrine-classifier/1' };
/** Class names: 2 .. 100000 distinct non-empty strings of at most 200 characters. */
export const MAX_CLASSES = 100000;
// timm kwargs an encoder file or a classifier's spec may carry: their JSON types (the engine
// checks names and ranges when it builds the model: src/config.c)
// (timm's img_size (H, W) is the one kwarg that is a pair)
const KWARG = (v) =>
  v === null ||
  ['number', 'boolean', 'string'].includes(typeof v) ||
  (Array.isArray(v) && v.length === 2 && v.every((x) => typeof x === 'number'))
    ? null
    : `${show(v)} is not a number, true / false, text, null or a pair of numbers`;

/** A model spec as createModel takes it ({ kind, config } | { kind, preset }): its shape checked
 * (the engine checks the config's names and ranges). field: its name in messages, configField its
 * config's (default field.config). */
export function checkSpec(spec, field, kinds = null, configField = `${field}.config`) {
  checkFields(spec, { kind: kinds ? oneOf(...kinds) : text({ max: 32 }), preset: optional(text({ max: 200 })) }, field);
  if (spec.preset != null) return spec;
  if (!isObject(spec.config)) throw new MetadataError(configField, `${show(spec.config)} is not an object`);
  for (const [k, v] of Object.entries(spec.config)) {
    if (k === 'encoder' && isObject(v)) {
      for (const [ek, ev] of Object.entries(v)) {
        const why = KWARG(ev);
        if (why) throw new MetadataError(`${configField}.encoder.${ek}`, why);
      }
      continue;
    }
    const why = KWARG(v);
    if (why) throw new MetadataError(`${configField}.${k}`, why);
  }
  return spec;
}

/** A classifier file's metadata -> { classes, spec, img, chans }: class names (distinct, one per
 * output of the head), the timm spec, the image size and channels it takes. The caller compares
 * img / chans with the model the engine builds from spec (Vitrine.checkModel). */
export function checkClassifier(meta) {
  if (!isObject(meta)) throw new MetadataError('__metadata__', `${show(meta)} is not an object`);
  if (meta.vitrine_classifier == null)
    throw new MetadataError('vitrine_classifier', 'missing (not a classifier of vitrine train --objective classify)');
  const F = 'vitrine_classifier',
    c = checkFields(
      parseJson(meta.vitrine_classifier, F),
      {
        format: oneOf(FORMATS.classifier),
        img: int(1, 1000000),
        chans: int(1, 1000000),
        classes: (v) =>
          Array.isArray(v) && v.length >= 2 && v.length <= MAX_CLASSES
            ? null
            : `${show(v)} is not a list of 2..${MAX_CLASSES} class names`,
      },
      F,
    );
  const seen = new Set();
  c.classes.forEach((name, i) => {
    const why = text({
      max: 200,
      re: /^[^\u0000-\u001f\u007f]+$/,
      what: 'a class name (1..200 characters, no control characters)',
    })(name);
    if (why) throw new MetadataError(`${F}.classes[${i}]`, why);
    if (seen.has(name)) throw new MetadataError(`${F}.classes[${i}]`, `${show(name)} is named twice`);
    seen.add(name);
  });
  const spec = checkSpec(c.spec, `${F}.spec`, ['timm']);
  if (!spec.config) throw new MetadataError(`${F}.spec.config`, 'missing (a classifier states its config)');
  if (spec.config.num_classes !== c.classes.length)
    throw new MetadataError(
      `${F}.spec.config.num_classes`,
      `${show(spec.config.num_classes)} is not the number of class names (${c.classes.length})`,
    );
  return { classes: c.classes, spec, img: c.img, chans: c.chans };
}

/** An encoder file's timm_kwargs (vitrine's encoder.safetensors: timm's constructor arguments) ->
 * the kwargs object, or null when the file has none (a timm / lightly state_dict). */
export function checkEncoder(meta) {
  if (!isObject(meta)) throw new MetadataError('__metadata__', `${show(meta)} is not an object`);
  if (meta.timm_kwargs == null) return null;
  const kw = parseJson(meta.timm_kwargs, 'timm_kwargs');
  if (!isObject(kw)) throw new MetadataError('timm_kwargs', `${show(kw)} is not an object`);
  for (const [k, v] of Object.entries(kw)) {
    const why = KWARG(v);
    if (why) throw new MetadataError(`timm_kwargs.${k}`, why);
  }
  return kw;
}
