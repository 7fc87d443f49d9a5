// golden.js: `vitrine golden show FILE...` and `vitrine golden diff A B` -- a golden file
// (vitrine/testing's assertGolden; any safetensors of the dtypes a golden holds) for people: each
// tensor's shape, dtype, statistics and first values; and the elements where two of them differ,
// so that a reviewer can read a golden change before it is committed.
import { readInput, why } from './io.js';
import { CliError, UsageError, whole, decimal } from './args.js';
import {
  decodeTensors,
  compareTensors,
  differingElements,
  tensorStats,
  tensorValues,
  fmtShape,
  fmtValue,
  FLOAT,
  GOLDEN_FORMAT,
} from '../formats/golden.js';
import { fmtE } from '../formats/parity-report.js';

function readGolden(file) {
  let bytes;
  try {
    bytes = readInput(file);
  } catch (e) {
    throw new CliError(`cannot read ${file}: ${why(e)}`, 2);
  }
  try {
    return decodeTensors(bytes);
  } catch (e) {
    throw new CliError(`${file}: not a golden it can read (${e.message})`, 2);
  }
}

// a statistic in six significant digits, without trailing zeros
const g = (x) => (Number.isNaN(x) ? 'nan' : String(Number(x.toPrecision(6))));
const plural = (n, w) => `${n} ${w}${n === 1 ? '' : 's'}`;
const what = (meta) =>
  meta.format === GOLDEN_FORMAT
    ? `golden ${JSON.stringify(meta.name ?? '?')}`
    : meta.format
      ? `safetensors (format ${JSON.stringify(meta.format)})`
      : 'safetensors';

/** The lines `vitrine golden show` prints for one file's tensors. */
export function showLines(file, { meta, tensors }, head = 6) {
  const bytes = tensors.reduce((a, t) => a + t.bytes.length, 0);
  const lines = [`${file}: ${what(meta)}, ${plural(tensors.length, 'tensor')}, ${bytes} bytes of data`];
  const w = Math.max(...tensors.map((t) => t.name.length), 4);
  for (const t of tensors) {
    const s = tensorStats(t),
      v = tensorValues(t);
    const stats = s.n
      ? `min ${g(s.min)}  max ${g(s.max)}  mean ${g(s.mean)}  std ${g(s.std)}` +
        (s.nan ? `  ${s.nan} NaN` : '') +
        (s.inf ? `  ${s.inf} inf` : '')
      : 'empty';
    const first = Array.from(v.subarray(0, head), (x) => fmtValue(x, t.dtype)).join(', ');
    lines.push(`  ${t.name.padEnd(w)}  ${fmtShape(t).padEnd(18)}  ${stats}`);
    if (s.n) lines.push(`  ${' '.repeat(w)}  first: ${first}${s.n > head ? `, ... (${s.n} values)` : ''}`);
  }
  return lines;
}

/** `vitrine golden diff`: { lines, same } for two files' tensors. */
export function diffLines(fa, a, fb, b, { max = 20, tolerance } = {}) {
  const lines = [`--- ${fa}: ${what(a.meta)}`, `+++ ${fb}: ${what(b.meta)}`];
  const byName = new Map(b.tensors.map((t) => [t.name, t]));
  let same = 0,
    differ = 0;
  for (const t of a.tensors) {
    const u = byName.get(t.name);
    byName.delete(t.name);
    if (!u) {
      lines.push(`tensor ${t.name} (${fmtShape(t)}): only in ${fa}`);
      differ++;
    } else if (t.dtype !== u.dtype || t.shape.length !== u.shape.length || t.shape.some((d, i) => d !== u.shape[i])) {
      lines.push(`tensor ${t.name}: ${fmtShape(t)} in ${fa}, ${fmtShape(u)} in ${fb} (another dtype or shape)`);
      differ++;
    } else if (!compareTensors(t, u, tolerance)) same++;
    else {
      differ++;
      const d = differingElements(t, u, max);
      const va = tensorValues(t);
      let err = '';
      if (FLOAT.has(t.dtype)) {
        let ref = 0;
        for (const x of va) if (Math.abs(x) > ref) ref = Math.abs(x);
        err = `; max |${fb} - ${fa}| ${Number.isNaN(d.maxAbs) ? 'nan' : fmtE(d.maxAbs)}, err ${
          Number.isNaN(d.maxAbs) ? 'inf (a NaN appeared or went)' : fmtE(ref > 0 ? d.maxAbs / ref : d.maxAbs)
        }`;
      }
      lines.push(`tensor ${t.name} (${fmtShape(t)}): ${d.count} of ${va.length} values differ${err}`);
      for (const e of d.diffs)
        lines.push(
          `  [${e.at.join(', ')}]${t.shape.length > 1 ? ` (element ${e.i})` : ''}  ${fmtValue(e.old, t.dtype)} -> ${fmtValue(e.now, t.dtype)}`,
        );
      if (d.count > d.diffs.length) lines.push(`  ... ${d.count - d.diffs.length} more (--max N shows more)`);
    }
  }
  for (const u of byName.values()) {
    lines.push(`tensor ${u.name} (${fmtShape(u)}): only in ${fb}`);
    differ++;
  }
  lines.push(
    differ
      ? `${plural(differ, 'tensor')} differ, ${same} the same${tolerance != null ? ` (within tolerance ${fmtE(tolerance)})` : ' bit for bit'}`
      : `the same: ${plural(same, 'tensor')}${tolerance != null ? `, within tolerance ${fmtE(tolerance)}` : ', bit for bit'}`,
  );
  return { lines, same: differ === 0 };
}

const show = {
  name: 'golden show',
  summary: "print a golden's tensors",
  usage: 'vitrine golden show FILE... [--values N]',
  description:
    "Prints each tensor of each FILE (a golden of vitrine/testing's assertGolden, or any safetensors\n" +
    'of F32 / F64 / I64 / I32 / I8 / U8 / BOOL): its name, dtype and shape, min / max / mean / std of its\n' +
    'finite values (NaN and infinities counted apart) and its first values.\n' +
    'Exit status: 0 shown, 2 a file that cannot be read.',
  positionals: 'FILE...',
  options: {
    values: { value: 'N', help: 'first values shown per tensor (default 6)', parse: whole(0, 1000000) },
  },
  main({ values, positionals }) {
    if (!positionals.length) throw new UsageError('give a FILE (vitrine golden show FILE...)');
    const out = [];
    for (const f of positionals) out.push(...showLines(f, readGolden(f), values.values ?? 6));
    process.stdout.write(out.join('\n') + '\n');
    return 0;
  },
};

const diff = {
  name: 'golden diff',
  summary: 'the elements where two goldens differ',
  usage: 'vitrine golden diff A B [--max N] [--tolerance T]',
  description:
    'Compares the tensors of A (the golden as committed) and B (as recorded again) as assertGolden\n' +
    'does -- bit for bit, NaN equal to NaN, -0 not 0 -- and prints, per tensor that differs, how many\n' +
    'values changed, the largest change and its err = max|B - A| / max|A|, and the first elements that\n' +
    'differ (index, A -> B); tensors only in one file, or of another dtype or shape, are named.\n' +
    'Exit status: 0 the same, 1 they differ, 2 a file that cannot be read.',
  positionals: 'A B',
  options: {
    max: { value: 'N', help: 'differing elements listed per tensor (default 20)', parse: whole(0, 1000000) },
    tolerance: {
      value: 'T',
      help: "float tensors within err <= T count as the same (assertGolden's tolerance)",
      parse: decimal(0),
    },
  },
  main({ values, positionals }) {
    if (positionals.length !== 2)
      throw new UsageError(`give two files A B (got ${positionals.length}): vitrine golden diff A B`);
    const [fa, fb] = positionals;
    const r = diffLines(fa, readGolden(fa), fb, readGolden(fb), { max: values.max ?? 20, tolerance: values.tolerance });
    process.stdout.write(r.lines.join('\n') + '\n');
    return r.same ? 0 : 1;
  },
};

const SUBCOMMANDS = { show, diff };

export const command = {
  name: 'golden',
  summary: "read goldens: a golden's tensors (show), two goldens' differences (diff)",
  usage: 'vitrine golden show FILE... | vitrine golden diff A B',
  description:
    "Golden files are what vitrine/testing's assertGolden records (docs/testing.md).\n" +
    '  vitrine golden show FILE...    each tensor: shape, dtype, statistics, first values\n' +
    '  vitrine golden diff A B        the elements where they differ (exit 1 when they do)\n' +
    'vitrine golden show --help, vitrine golden diff --help: their options.',
  options: {},
  /** the subcommand named by the first argument */
  route(argv) {
    const sub = SUBCOMMANDS[argv[0]];
    if (sub) {
      argv.shift();
      return sub;
    }
    return {
      ...this,
      main() {
        const a = argv.find((x) => x !== '--');
        throw new UsageError(
          a == null
            ? 'show or diff (vitrine golden show FILE... | vitrine golden diff A B)'
            : `unknown subcommand '${a}' (show or diff)`,
        );
      },
      positionals: 'SUBCOMMAND',
    };
  },
  main() {
    throw new UsageError('show or diff');
  },
};
