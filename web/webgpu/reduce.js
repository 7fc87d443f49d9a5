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
  prog.dispatch(`reduce_partials${acc ? '_acc' : ''}`, { p, c }, reduceWGSL(acc), { n, S }, {},
    grid1d(n, 256, prog.gpu.limits.maxComputeWorkgroupsPerDimension));
}

/** Chunks of a column sum over M rows (shape only). */
export const colsumChunks = (M) => Math.max(1, Math.ceil(M / CHUNK));

/**
 * out_t[n] (+)= sum_{m < M} term_t(m, n), n < N. terms: [{ out: operand | null, expr: WGSL f32 of
 * m, n }] (a null out is skipped); ops: the operands the expressions read; args: their u32 arguments.
 */
export function colsum(prog, name, terms, ops, args, M, N, acc) {
  const live = terms.filter((t) => t.out);
  if (!live.length || N === 0) return;
  const S = colsumChunks(M);
  const parts = live.map((t, j) => (S > 1 ? prog.scratch(S * N, j * S * N) : null));
  const outs = {};
  live.forEach((t, j) => { outs[`o${j}`] = S > 1 ? parts[j] : t.out; });
  const L = [`var<workgroup> red: array<f32, ${256 * live.length}>;`,
    `@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let n = wid.x * 64u + li % 64u;
  let lane = li / 64u;
  let mbeg = wid.y * ${CHUNK}u;
  let mend = min(u.M, mbeg + ${CHUNK}u);`];
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
  prog.dispatch(`colsum_${name}`, { ...ops, ...outs }, L.join('\n'), { ...args, M, N }, {},
    [Math.ceil(N / 64), S, 1]);
  if (S > 1) live.forEach((t, j) => reducePartials(prog, parts[j], t.out, N, S, acc));
}
