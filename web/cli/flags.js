// flags.js: the command line's flags of a training run, made from the option registry
// (web/train/options.js and the objective's module): each option with a CLI flag becomes an
// OptionSpec of web/cli/args.js whose value is parsed by its declared type and range (strict
// numbers: decimal digits, no '0x10', no '1e9' for a count), whose help states the objective's
// default, and whose key in the parsed values is the option's API name -- so the values are the
// Trainer's options as they are.
import { whole, decimal, oneOf, seed, UsageError } from './args.js';
import { OPTIONS, own } from '../train/options.js';
import { runDefault } from '../train/objectives/index.js';

// a list of numbers: '0.5,0.5,0.5'
export const numbers = (n) => (v, flag) => {
  const parts = v.split(',');
  if (!n.includes(parts.length))
    throw new UsageError(`${flag}: '${v}' is not ${n.join(' or ')} comma-separated numbers`);
  return parts.map((p) => decimal()(p, flag));
};

/** The parser of a value of type `t` (options.js's kinds) on the command line. */
export function parserOf(t) {
  switch (t.kind) {
    case 'whole':
      return whole(t.min, t.max);
    case 'number':
      return decimal(t.min, t.max, { open: t.open, above: t.above });
    case 'word':
      return oneOf(...t.words);
    case 'seed':
      return seed;
    case 'stats':
      return numbers([1, 3]);
    default:
      return null; // text: as given (what reads it checks it)
  }
}

// a default as the help shows it
function defaultText(v) {
  if (typeof v === 'function') return `${v(64)} at 64 images a step, in proportion`;
  return Array.isArray(v) ? v.join(',') : String(v);
}

/** The flags of the declarations `decls` ({ apiName: OptionDecl }) that `obj` takes, as
 * web/cli/args.js OptionSpecs keyed by flag (help: with the objective's default). */
export function flagsOf(decls, obj) {
  const out = {};
  for (const [name, d] of Object.entries(decls)) {
    if (!d.flag || d.internal || (d.for && !d.for(obj))) continue;
    const def = obj && (own(obj.defaults, name) || own(OPTIONS, name)) ? runDefault(obj, name) : d.default;
    const help = def != null && !/\(default/.test(d.help) ? `${d.help} (default ${defaultText(def)})` : d.help;
    out[d.flag] = {
      key: name,
      help,
      ...(d.type.kind === 'flag' ? { type: 'boolean' } : { value: d.value || 'VALUE' }),
      ...(d.short ? { short: d.short } : {}),
      ...(d.alias ? { alias: d.alias } : {}),
      ...(parserOf(d.type) ? { parse: parserOf(d.type) } : {}),
    };
  }
  return out;
}

/** The flag of option `name` (API name) for messages: '--grad-checkpointing' for policy. */
export const flagOf = (name, decls = OPTIONS) =>
  own(decls, name) && decls[name].flag ? `--${decls[name].flag}` : `--${name}`;
