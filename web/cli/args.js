// args.js: the command line's one argument parser (over node:util's parseArgs) and the rules every
// command follows:
//   --flag value and --flag=value alike (a value may start with '-': --seed -1 is read, then refused);
//   --help / -h prints the command's help on stdout, exit 0;
//   a bad value, an unknown flag or a stray argument is one line on stderr, exit 2 (UsageError);
//   numbers are strict: decimal digits only ('' is not 0, '0x10' is not 16, '1e9' is not a count).
// A command describes its options once (OptionSpec below); its help is made from that description.
import { parseArgs } from 'node:util';

/** A usage error: the command prints `vitrine CMD: message` and exits 2. */
export class UsageError extends Error {
  constructor(message) {
    super(message);
    this.status = 2;
  }
}
/** Any other failure a command reports in one line; `status` is the exit status (default 1). */
export class CliError extends Error {
  constructor(message, status = 1) {
    super(message);
    this.status = status;
  }
}

const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
/** A whole number in min..max (decimal digits only). */
export const whole = (min, max) => (v, flag) => {
  if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max)
    throw new UsageError(`${flag}: '${v}' is not a whole number in ${min}..${max}`);
  return Number(v);
};
/** A decimal number in min..max ([min, max) when open, (min, max] when above; no range: any decimal). */
export const decimal =
  (min = -Infinity, max = Infinity, { open = false, above = false } = {}) =>
  (v, flag) => {
    const x = Number(v),
      ranged = Number.isFinite(min) || Number.isFinite(max);
    const shown = above ? `(${min}, ${max}${open ? ')' : ']'}` : open ? `[${min}, ${max})` : `${min}..${max}`;
    if (!DECIMAL.test(v) || !((above ? x > min : x >= min) && (open ? x < max : x <= max)))
      throw new UsageError(`${flag}: '${v}' is not a decimal number${ranged ? ` in ${shown}` : ''}`);
    return x;
  };
/** One of the words listed. */
export const oneOf =
  (...words) =>
  (v, flag) => {
    if (!words.includes(v)) throw new UsageError(`${flag}: '${v}' (use ${words.join(' or ')})`);
    return v;
  };
/** A seed: a whole number that stays exact when 2 is added (kept as its text). */
export const seed = (v, flag) => {
  whole(0, 2 ** 53 - 3)(v, flag);
  return v;
};

/**
 * @typedef {object} OptionSpec  one flag, --name (the key of the options object)
 * @property {'string'|'boolean'} [type]  default 'string'
 * @property {string} [value]     the value's placeholder in the help (N, FILE, ...)
 * @property {string} help        one line (or more, joined by '\n') for the help
 * @property {(v: string, flag: string) => any} [parse]  checks and converts the value
 * @property {string} [key]       the name in the result (default: the flag in camelCase)
 * @property {string} [short]     a one-letter form (-b), as timm's train.py has
 * @property {string} [alias]     another name of the flag (--batch-size for --batch)
 */
const camel = (s) => s.replace(/-([a-z])/g, (_, c) => c.toUpperCase());
const keyOf = (name, o) => o.key || camel(name);

/**
 * Parses argv for a command: { values, positionals, given: Set of keys given, help: bool }.
 * command: { name, options: { flag: OptionSpec }, positionals?: 'FILE...' (none when absent) }.
 * Throws a UsageError with a one-line message.
 */
export function parseCommand(command, argv) {
  const options = { help: { type: 'boolean', short: 'h' } },
    named = {};
  for (const [name, o] of Object.entries(command.options)) {
    options[name] = { type: o.type || 'string', ...(o.short ? { short: o.short } : {}) };
    named[name] = [name, o];
    if (o.alias) {
      options[o.alias] = { type: o.type || 'string' };
      named[o.alias] = [name, o];
    }
  }
  // a string flag takes the next argument whatever it looks like (parseArgs would call '-1' ambiguous)
  const args = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i],
      m = /^--([^=]+)$/.exec(a);
    if (a === '--') {
      args.push(...argv.slice(i));
      break;
    }
    if (m && options[m[1]] && options[m[1]].type === 'string' && i + 1 < argv.length) args.push(`${a}=${argv[++i]}`);
    else args.push(a);
  }
  let parsed;
  try {
    parsed = parseArgs({ args, options, strict: true, allowPositionals: !!command.positionals });
  } catch (e) {
    throw new UsageError(parseError(e, command.helpHint || command.name));
  }
  const values = {},
    given = new Set();
  if (parsed.values.help) return { values, positionals: [], given, help: true };
  for (const [flag, v] of Object.entries(parsed.values)) {
    const [name, o] = named[flag],
      key = keyOf(name, o);
    if (given.has(key)) throw new UsageError(`--${name} given twice (as --${flag} too)`);
    values[key] = o.parse && typeof v === 'string' ? o.parse(v, `--${flag}`) : v;
    given.add(key);
  }
  return { values, positionals: parsed.positionals, given, help: false };
}

// parseArgs's messages, as one line each
function parseError(e, cmd) {
  const flag = (/'(-[^' ]+)/.exec(e.message) || [])[1];
  const see = `(vitrine ${cmd} --help lists the options)`;
  switch (e.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `unknown option ${flag} ${see}`;
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
      return `unexpected argument '${(/'([^']*)'/.exec(e.message) || [])[1]}' ${see}`;
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      return /does not take an argument/.test(e.message) ? `${flag} takes no value` : `${flag} needs a value`;
    default:
      return e.message.split('\n')[0];
  }
}

/** The command's help, made from its description: usage, what it does, its options. */
export function helpText(command) {
  const flags = Object.entries(command.options).map(([name, o]) => [
    `${o.short ? `-${o.short}, ` : ''}--${name}${o.alias ? `, --${o.alias}` : ''}${(o.type || 'string') === 'string' ? ` ${o.value || 'VALUE'}` : ''}`,
    o.help,
  ]);
  flags.push(['-h, --help', 'this help']);
  const w = Math.max(...flags.map(([f]) => f.length)) + 2;
  const lines = flags.map(([f, h]) => `  ${f.padEnd(w)}${h.split('\n').join('\n' + ' '.repeat(w + 2))}`);
  return `usage: ${command.usage}\n${command.description.replace(/^/gm, '  ')}\n\noptions:\n${lines.join('\n')}\n`;
}

/**
 * Runs a command's main with the rules above: help on stdout (with command.moreHelp()'s lines, e.g.
 * names from the engine), a UsageError / CliError as one line `vitrine CMD: message` on stderr
 * (VITRINE_DEBUG=1 adds the stack of anything unexpected). Returns the exit status.
 */
export async function runCommand(command, argv) {
  try {
    const a = parseCommand(command, argv);
    if (a.help) {
      process.stdout.write(helpText(command) + (command.moreHelp ? '\n' + (await command.moreHelp()) : ''));
      return 0;
    }
    return await command.main(a);
  } catch (e) {
    const known = e instanceof UsageError || e instanceof CliError;
    if (process.env.VITRINE_DEBUG && !known) process.stderr.write(`${e.stack}\n`);
    process.stderr.write(`vitrine ${command.name}: ${e.message}\n`);
    return known ? e.status : 1;
  }
}
