// parity-report.js: what `vitrine parity` (web/cli/parity.js) and vitrine/testing say about parity
// results (the objects Vitrine.parity returns: the harness's JSON, harness/parity.c): the pass rule
// and a tighter tolerance, a failure in a few lines, TAP and JUnit XML. No engine here: results in,
// text out. A torch32 error the file does not have (null) is left out, as in the CLI's lines.

/** The harness's pass rule (VT_PARITY_TOL, harness/parity.h): every expect/ tensor has
 * err = max|ours - expect| / max|expect| <= 1e-4. */
export const PARITY_TOLERANCE = 1e-4;

/** printf's %.Ne (the exponent has at least two digits); inf / nan as C prints them. */
export function fmtE(v, digits = 3) {
  if (v == null) return 'none';
  if (Number.isNaN(v)) return 'nan';
  if (!Number.isFinite(v)) return v < 0 ? '-inf' : 'inf';
  const [m, e] = Number(v).toExponential(digits).split('e');
  const ex = e.replace(/^[+-]/, '');
  return `${m}e${e[0] === '-' ? '-' : '+'}${ex.length < 2 ? '0' + ex : ex}`;
}
/** A result of a file that could not be read (VT_ERR_IO: the harness, which works on bytes, never
 * returns it; Vitrine.parity's readError does). `vitrine parity` exits 2 for such a file. */
export const unreadable = (r) => r.status === -8;

// torch32_err is null when the file has no torch32/ tensor for it: then it is left out
const t32 = (v, text) => (v == null ? '' : text(fmtE(v)));

/** The tolerance a run checks against: PARITY_TOLERANCE, or a tighter one. A looser value is a
 * RangeError: the rule of the format is the loosest a file may pass under. */
export function checkTolerance(t) {
  if (t == null) return PARITY_TOLERANCE;
  if (typeof t !== 'number' || !Number.isFinite(t) || t < 0)
    throw new RangeError(`tolerance ${JSON.stringify(t)}: not a number >= 0`);
  if (t > PARITY_TOLERANCE)
    throw new RangeError(
      `tolerance ${fmtE(t)} is looser than the parity rule (err <= ${fmtE(PARITY_TOLERANCE)}): refused; a tolerance can only tighten it`,
    );
  return t;
}

/** The pass rule as one line, e.g. for a report's header. */
export const passRule = (tolerance = PARITY_TOLERANCE) =>
  `pass rule: every expect/ tensor has err = max|ours - expect| / max|expect| <= ${fmtE(tolerance)}` +
  (tolerance < PARITY_TOLERANCE ? ` (--tolerance; the format's rule is ${fmtE(PARITY_TOLERANCE)})` : '');

/** The result judged under `tolerance` (<= PARITY_TOLERANCE): a copy with pass recomputed from
 * the tensors' errors, and `tolerance` set. A file that could not be run stays failed. */
export function applyTolerance(result, tolerance = PARITY_TOLERANCE) {
  const tol = checkTolerance(tolerance);
  const tensors = result.tensors || [];
  const pass = !!result.pass && !result.error && tensors.length > 0 && tensors.every((t) => t.err <= tol);
  return { ...result, pass, tolerance: tol };
}

/** The tensors over the tolerance, worst first. */
export const overTolerance = (result, tolerance = result.tolerance ?? PARITY_TOLERANCE) =>
  (result.tensors || [])
    .filter((t) => !(t.err <= tolerance))
    .sort((a, b) => (b.err > a.err ? 1 : b.err < a.err ? -1 : 0));

/** What failed, in a few lines: the worst tensor, its err and PyTorch's own; the others over. */
export function failureDetail(r, tolerance = r.tolerance ?? PARITY_TOLERANCE) {
  if (r.error) return r.error;
  const over = overTolerance(r, tolerance);
  const own =
    r.torch32_err == null
      ? 'the file has no torch32/ result for it'
      : `PyTorch's own float32: torch32_err ${fmtE(r.torch32_err)}`;
  const lines = [`worst tensor ${r.worst}: err ${fmtE(r.err)} > ${fmtE(tolerance)} (${own})`];
  if (over.length > 1) {
    const shown = over
      .slice(0, 8)
      .map((t) => `${t.name} ${fmtE(t.err)}`)
      .join(', ');
    lines.push(`${over.length} of ${r.tensors.length} tensors over: ${shown}${over.length > 8 ? ', ...' : ''}`);
  }
  return lines.join('\n');
}

// ---- TAP (version 13) -------------------------------------------------------------------------

const yamlString = (s) => JSON.stringify(String(s)); // a JSON string is a YAML double-quoted scalar

/** TAP for results [{ file, result }] (pass / fail per file, diagnostics as YAML blocks). */
export function tapReport(items, tolerance = PARITY_TOLERANCE) {
  const out = ['TAP version 13', `# vitrine parity: ${passRule(tolerance)}`, `1..${items.length}`];
  items.forEach(({ file, result: r }, i) => {
    const desc = String(file).replace(/#/g, '\\#').replace(/\n/g, ' ');
    out.push(`${r.pass ? 'ok' : 'not ok'} ${i + 1} - ${desc}`);
    const y = ['  ---'];
    if (r.module) y.push(`  module: ${yamlString(r.module)}`, `  fn: ${yamlString(r.fn)}`);
    if (r.backend) y.push(`  backend: ${yamlString(r.backend)}`); // (parity --backend webgpu: where it ran)
    if (r.adapter) y.push(`  adapter: ${yamlString(r.adapter)}`);
    if (r.error) y.push(`  error: ${yamlString(r.error)}`);
    if (r.worst != null) {
      y.push(`  worst: ${yamlString(r.worst)}`, `  err: ${yamlString(fmtE(r.err))}`);
      if (r.torch32_err != null) y.push(`  torch32_err: ${yamlString(fmtE(r.torch32_err))}`);
      y.push(`  tensors: ${r.tensors.length}`, `  tolerance: ${yamlString(fmtE(tolerance))}`);
      const over = overTolerance(r, tolerance);
      if (over.length)
        y.push(
          '  over:',
          ...over.map(
            (t) =>
              `    - { name: ${yamlString(t.name)}, err: ${yamlString(fmtE(t.err))}${t32(t.torch32_err, (e) => `, torch32_err: ${yamlString(e)}`)} }`,
          ),
        );
    }
    y.push('  ...');
    out.push(...y);
  });
  return out.join('\n') + '\n';
}

// ---- JUnit XML --------------------------------------------------------------------------------

const xmlEscape = (s) =>
  String(s)
    .replace(/[^\t\n\r\x20-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu, '\uFFFD') // characters XML 1.0 cannot hold
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;');

/** JUnit XML (the Ant / Surefire form CI services read) for results [{ file, result, seconds }]:
 * one <testcase> per file; a file that ran and exceeded the tolerance is a <failure> naming the
 * worst tensor, its err and torch32_err; a file that could not be read or run is an <error>. Every
 * tensor's err is in <system-out>; the pass rule is a <property>. */
export function junitReport(
  items,
  { tolerance = PARITY_TOLERANCE, name = 'vitrine parity', policy = null, build = null } = {},
) {
  const failures = items.filter((x) => !x.result.pass && !x.result.error).length;
  const errors = items.filter((x) => x.result.error).length;
  const time = items.reduce((s, x) => s + (x.seconds || 0), 0);
  const props = [
    ['pass_rule', passRule(tolerance)],
    ['tolerance', fmtE(tolerance)],
  ];
  if (policy) props.push(['grad_checkpointing', policy]);
  if (build) props.push(['wasm', build]);
  const lines = [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuites name="${xmlEscape(name)}" tests="${items.length}" failures="${failures}" errors="${errors}" time="${time.toFixed(3)}">`,
    `  <testsuite name="${xmlEscape(name)}" tests="${items.length}" failures="${failures}" errors="${errors}" skipped="0" time="${time.toFixed(3)}">`,
    '    <properties>',
    ...props.map(([k, v]) => `      <property name="${k}" value="${xmlEscape(v)}"/>`),
    '    </properties>',
  ];
  for (const { file, result: r, seconds = 0 } of items) {
    const cls = r.module ? `${r.module}.${r.fn}` : 'vitrine.parity';
    lines.push(
      `    <testcase name="${xmlEscape(file)}" classname="${xmlEscape(cls)}" file="${xmlEscape(file)}" time="${seconds.toFixed(3)}">`,
    );
    if (r.error)
      lines.push(
        `      <error message="${xmlEscape(r.error)}" type="${unreadable(r) ? 'unreadable' : 'not run'}">${xmlEscape(r.error)}</error>`,
      );
    else if (!r.pass) {
      const msg = `worst tensor ${r.worst}: err ${fmtE(r.err)} > ${fmtE(tolerance)}${t32(r.torch32_err, (e) => ` (torch32_err ${e})`)}`;
      lines.push(
        `      <failure message="${xmlEscape(msg)}" type="parity">${xmlEscape(failureDetail(r, tolerance))}</failure>`,
      );
    }
    if (r.tensors && r.tensors.length) {
      const body = r.tensors
        .map(
          (t) =>
            `${t.err <= tolerance ? 'ok  ' : 'OVER'} ${t.name} err ${fmtE(t.err)}${t32(t.torch32_err, (e) => ` torch32_err ${e}`)}`,
        )
        .join('\n');
      lines.push(`      <system-out>${xmlEscape(body)}</system-out>`);
    }
    lines.push('    </testcase>');
  }
  lines.push('  </testsuite>', '</testsuites>');
  return lines.join('\n') + '\n';
}
