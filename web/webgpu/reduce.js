// reduce.js: deterministic reductions across rows -- column sums (bias, LayerNorm weight and
// LayerNorm bias gradients, ...) and the in-order sum of partial results (split-K). No atomics:
// every sum has one fixed order, a function of the shape only.
//   colsum: out_t[n] (+)= sum_m term_t(m, n) for up to 4 terms t at once. Stage 1: a workgroup
//   takes 64 columns x 4 row lanes of one chunk of CHUNK rows (lane r sums rows r, r+4, ..., in
//   order; the 4 lanes are added as (l0 + l1) + (l2 + l3)); consecutive invocations read
//   consecutive columns (coalesced). With more than one chunk, stage 2 adds the chunks' partials
//   in chunk order (reducePartials).
import { grid1d, LINEAR_WG } from './wgsl.js';

const CHUNK = 256;

function reduceWGSL(acc) {
  return `@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
  let i = (${LINEAR_WG}) * 256u + li;
  if (i >= u.n) { return; }
  var v = ld_p(i);
  for (var s = 1u; s < u.S; s++) { v = v + ld_p(s * u.n + i); }
  ${acc ? 'v = ld_c(i) + v;' : ''}
  st_c(i, v);
}`;
}

/** c[n] = (c[n] +) p[0][n] + p[1][n] + ... + p[S-1][n], left to right (p: S x n dense). */
export function reducePartials(prog, p, c, n, S, acc) {
  prog.dispatch(
    `reduce_partials${acc ? '_acc' : ''}`,
    { p, c },
    reduceWGSL(acc),
    { n, S },
    {},
    grid1d(n, 256, prog.gpu.limits.maxComputeWorkgroupsPerDimension),
  );
}

/** Chunks of a column sum over M rows (shape only). */
export const colsumChunks = (M) => Math.max(1, Math.ceil(M / CHUNK));

/**
 * out_t[n] (+)= sum_{m < M} term_t(m, n), n < N. terms: [{ out: operand | null, expr: WGSL f32 of
 * m, n }] (a null out is skipped); ops: the operands the expressions read; args: their u32
 * arguments; ws: the workspace word where its partials may start (past the caller's own scratch).
 */
export function colsum(prog, name, terms, ops, args, M, N, acc, ws = 0) {
  const live = terms.filter((t) => t.out);
  if (!live.length || N === 0) return;
  const S = colsumChunks(M);
  const parts = live.map((t, j) => (S > 1 ? prog.scratch(S * N, ws + j * S * N) : null));
  const outs = {};
  live.forEach((t, j) => {
    outs[`o${j}`] = S > 1 ? parts[j] : t.out;
  });
  const L = [
    `var<workgroup> red: array<f32, ${256 * live.length}>;`,
    `@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let n = wid.x * 64u + li % 64u;
  let lane = li / 64u;
  let mbeg = wid.y * ${CHUNK}u;
  let mend = min(u.M, mbeg + ${CHUNK}u);`,
  ];
  live.forEach((t, j) => L.push(`  var s${j} = 0.0;`));
  L.push('  if (n < u.N) {', '    for (var m = mbeg + lane; m < mend; m += 4u) {');
  live.forEach((t, j) => L.push(`      s${j} = s${j} + (${t.expr});`));
  L.push('    }', '  }');
  live.forEach((t, j) => L.push(`  red[${j * 256}u + li] = s${j};`));
  L.push('  workgroupBarrier();', '  if (lane == 0u && n < u.N) {');
  live.forEach((t, j) => {
    const r = (k) => `red[${j * 256}u + ${k * 64}u + li]`;
    L.push(`    var v${j} = (${r(0)} + ${r(1)}) + (${r(2)} + ${r(3)});`);
    if (S > 1) L.push(`    st_o${j}(wid.y * u.N + n, v${j});`);
    else L.push(`    st_o${j}(n, ${acc ? `ld_o${j}(n) + ` : ''}v${j});`);
  });
  L.push('  }', '}');
  prog.dispatch(`colsum_${name}`, { ...ops, ...outs }, L.join('\n'), { ...args, M, N }, {}, [Math.ceil(N / 64), S, 1]);
  if (S > 1) live.forEach((t, j) => reducePartials(prog, parts[j], t.out, N, S, acc));
}

// the sum (or max) of a whole vector, two stages: workgroups of 256 take ALL_CHUNK elements each
// (invocation l sums elements l, l+256, ... of the chunk in order, then a fixed tree), then one
// workgroup reduces the partials the same way; `term` maps element i to the value summed
const ALL_CHUNK = 4096;
function allWGSL(op, term, final) {
  const comb = op === 'max' ? 'max(a, b)' : 'a + b';
  return `var<workgroup> red: array<f32, 256>;
fn comb(a: f32, b: f32) -> f32 { return ${comb}; }
fn tree(li: u32, v: f32) -> f32 {
  red[li] = v;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s = s >> 1u) {
    if (li < s) { red[li] = comb(red[li], red[li + s]); }
    workgroupBarrier();
  }
  return red[0];
}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let beg = wid.x * u.chunk;
  let end = min(u.n, beg + u.chunk);
  var v = 0.0;
  for (var i = beg + li; i < end; i += 256u) { v = comb(v, ${term}); }
  let r = tree(li, v);
  if (li == 0u) { ${final} }
}`;
}

/**
 * A whole-vector reduction: op 'sum' or 'max' (of values >= 0) of term(i) over i < n, then
 * `final` (WGSL with the result r in scope, e.g. 'st_loss(0u, r / f32(u.total));', u.total = n)
 * runs once.
 * ops / args: what term and final read. ws: workspace word for the partials.
 */
export function reduceAll(prog, name, op, term, final, ops, args, fargs, n, ws = 0) {
  const P = Math.max(1, Math.ceil(n / ALL_CHUNK));
  if (P === 1) {
    prog.dispatch(
      `${name}_all`,
      ops,
      allWGSL(op, term, final),
      { ...args, n, chunk: ALL_CHUNK, total: n },
      fargs,
      [1, 1, 1],
    );
    return;
  }
  const part = prog.scratch(P, ws);
  prog.dispatch(
    `${name}_part`,
    { ...ops, part },
    allWGSL(op, term, 'st_part(wid.x, r);'),
    { ...args, n, chunk: ALL_CHUNK, total: n },
    fargs,
    [P, 1, 1],
  );
  prog.dispatch(
    `${name}_final`,
    { ...ops, part },
    allWGSL(op, 'ld_part(i)', final),
    { ...args, n: P, chunk: P, total: n },
    fargs,
    [1, 1, 1],
  );
}
