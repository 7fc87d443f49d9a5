// reduce.js: deterministic reductions across rows -- column sums (bias, LayerNorm weight and
// LayerNorm bias gradients, ...), whole-vector sums (losses, the gradient norm) and the in-order
// sum of partial results (split-K). No atomics and no workgroup barriers: every sum is one
// invocation's loop in a fixed order, a function of the shape only; a long one is cut into
// pieces whose partial sums are added in piece order by a later dispatch.
//   colsum: out_t[n] (+)= sum_m term_t(m, n) for up to 4 terms t at once. One invocation per
//   (column, chunk of CHUNK rows) sums the chunk's rows in order (consecutive invocations take
//   consecutive columns: coalesced); with more than one chunk, reducePartials adds the chunks'
//   partials in chunk order.
//   reduceAll: the sum (or max) of a vector of n elements as passes of column sums: pass 1 views
//   it as GROUP rows of P = ceil(n / GROUP) and invocation j sums elements j, j + P, j + 2P, ...
//   (coalesced), the next pass does the same over the P partials, until one is left.
// (Barrier trees were slower on a software adapter by two orders of magnitude -- SwiftShader
// runs a workgroup with barriers as coroutines -- and no faster on a GPU for these sizes.)
import { grid1d, LINEAR_WG } from './wgsl.js';

const CHUNK = 64;

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
    `@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let n = wid.x * 64u + li;
  if (n >= u.N) { return; }
  let mbeg = wid.y * ${CHUNK}u;
  let mend = min(u.M, mbeg + ${CHUNK}u);`,
  ];
  live.forEach((t, j) => L.push(`  var s${j} = 0.0;`));
  L.push('  for (var m = mbeg; m < mend; m++) {');
  live.forEach((t, j) => L.push(`    s${j} = s${j} + (${t.expr});`));
  L.push('  }');
  live.forEach((t, j) => {
    if (S > 1) L.push(`  st_o${j}(wid.y * u.N + n, s${j});`);
    else L.push(`  st_o${j}(n, ${acc ? `ld_o${j}(n) + ` : ''}s${j});`);
  });
  L.push('}');
  prog.dispatch(`colsum_${name}`, { ...ops, ...outs }, L.join('\n'), { ...args, M, N }, {}, [Math.ceil(N / 64), S, 1]);
  if (S > 1) live.forEach((t, j) => reducePartials(prog, parts[j], t.out, N, S, acc));
}

// elements an invocation of a reduceAll pass adds (one pass for n <= GROUP, two up to GROUP^2, ...)
const GROUP = 256;
function passWGSL(op, term, final) {
  return `fn comb(a: f32, b: f32) -> f32 { return ${op === 'max' ? 'max(a, b)' : 'a + b'}; }
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
  let j = (${LINEAR_WG}) * 64u + li;
  if (j >= u.P) { return; }
  var r = 0.0;
  for (var t = 0u; t < ${GROUP}u; t++) {
    let i = j + t * u.P;
    if (i >= u.n) { break; }
    r = comb(r, ${term});
  }
  ${final}
}`;
}

/**
 * A whole-vector reduction: op 'sum' or 'max' (of values >= 0) of term(i) over i < n, then
 * `final` (WGSL with the result r in scope, e.g. 'st_loss(0u, r / f32(u.total));', u.total = n)
 * runs once.
 * ops / args: what term and final read. ws: workspace word for the partials.
 */
export function reduceAll(prog, name, op, term, final, ops, args, fargs, n, ws = 0) {
  const maxg = prog.gpu.limits.maxComputeWorkgroupsPerDimension;
  let len = Math.max(n, 1),
    src = null,
    at = ws;
  for (;;) {
    const P = Math.ceil(len / GROUP),
      last = P === 1;
    const out = last ? null : prog.scratch(P, at);
    const io = { ...(src ? { part: src } : {}), ...(out ? { out } : {}) };
    prog.dispatch(
      `${name}_${last ? 'final' : 'part'}`,
      { ...ops, ...io },
      passWGSL(op, src ? 'ld_part(i)' : term, last ? final : 'st_out(j, r);'),
      { ...args, n: src ? len : n, P, total: n },
      fargs,
      grid1d(P, 64, maxg),
    );
    if (last) return;
    src = out;
    at += P;
    len = P;
  }
}
