// rows.js: kernels that reduce along a row -- LayerNorm forward and its input gradient, the
// attention softmax (with AIM's prefix-causal mask) and its backward.
// A workgroup of 256 invocations takes 4 rows, 64 lanes a row; lane l handles elements
// l, l+64, ... (consecutive lanes, consecutive addresses), keeps its partial sum, and the 64
// partials are added in workgroup memory in a fixed order (8 groups of 8, each in order, then the
// 8 in order: two barriers a sum, where a binary tree takes eight; a barrier is costly on a
// software adapter): the same order every run, no atomics, no subgroup operations (whose order
// the spec leaves open).
import { colsum } from './reduce.js';
import { absent } from './program.js';
import { grid1d, LINEAR_WG } from './wgsl.js';

const rowLib = (rows) => `
var<workgroup> red: array<f32, ${64 * rows}>;
var<workgroup> red8: array<f32, ${8 * rows}>;
// the sum (or max) of v over the 64 lanes of this invocation's row; every invocation must call it.
// Two barriers: lanes 0..7 each combine 8 partials in order, then every lane the 8 in order.
fn row_sum(li: u32, lane: u32, v: f32) -> f32 {
  red[li] = v;
  workgroupBarrier();
  let r8 = (li / 64u) * 8u;
  if (lane < 8u) {
    let b = li - lane + lane * 8u;
    var s = red[b];
    for (var j = 1u; j < 8u; j++) { s = s + red[b + j]; }
    red8[r8 + lane] = s;
  }
  workgroupBarrier();
  var r = red8[r8];
  for (var j = 1u; j < 8u; j++) { r = r + red8[r8 + j]; }
  return r;
}
fn row_max(li: u32, lane: u32, v: f32) -> f32 {
  red[li] = v;
  workgroupBarrier();
  let r8 = (li / 64u) * 8u;
  if (lane < 8u) {
    let b = li - lane + lane * 8u;
    var s = red[b];
    for (var j = 1u; j < 8u; j++) { s = max(s, red[b + j]); }
    red8[r8 + lane] = s;
  }
  workgroupBarrier();
  var r = red8[r8];
  for (var j = 1u; j < 8u; j++) { r = max(r, red8[r8 + j]); }
  return r;
}
`;

/** A kernel over u.R rows: `row`, `lane` (0..63), `ok` (row < u.R) and row_sum / row_max in
 * scope. rows = rows per workgroup: 4 (256 invocations), or 1 (64) when a row's loop count
 * depends on the row's data (barriers inside must be reached by the whole workgroup). */
export const rowKernel = (body, rows = 4) => `${rowLib(rows)}
@compute @workgroup_size(${64 * rows})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
  let lane = li % 64u;
  let row = (${LINEAR_WG}) * ${rows}u + li / 64u;
  let ok = row < u.R;
${body}
}`;

export const rowGrid = (prog, R, rows = 4) => grid1d(R, rows, prog.gpu.limits.maxComputeWorkgroupsPerDimension);

/** Per row of D: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps) (biased variance,
 * two passes as the C reference); mean, rstd [M] saved when given; out may alias inp. */
export function layernormForward(prog, { out, mean, rstd, inp, w, b }, M, D, eps) {
  const body = `  let base = row * u.D;
  var s = 0.0;
  if (ok) { for (var i = lane; i < u.D; i += 64u) { s = s + ld_inp(base + i); } }
  let mu = row_sum(li, lane, s) / f32(u.D);
  var q = 0.0;
  if (ok) { for (var i = lane; i < u.D; i += 64u) { let d = ld_inp(base + i) - mu; q = q + d * d; } }
  let rs = 1.0 / sqrt(row_sum(li, lane, q) / f32(u.D) + u.eps);
  if (ok) {
    for (var i = lane; i < u.D; i += 64u) {
      var y = (ld_inp(base + i) - mu) * rs;
      if ((u.flags & 1u) != 0u) { y = y * ld_w(i); }
      if ((u.flags & 2u) != 0u) { y = y + ld_b(i); }
      st_out(base + i, y);
    }
    if (lane == 0u && (u.flags & 4u) != 0u) { st_mean(row, mu); }
    if (lane == 0u && (u.flags & 8u) != 0u) { st_rstd(row, rs); }
  }`;
  const flags = (w ? 1 : 0) | (b ? 2 : 0) | (mean ? 4 : 0) | (rstd ? 8 : 0);
  prog.dispatch(
    'layernorm_forward',
    { out, mean, rstd, inp, w, b },
    rowKernel(body),
    { R: M, D, flags },
    { eps },
    rowGrid(prog, M),
  );
}

/** dnorm = w dy; dinp += rstd (dnorm - mean(dnorm) - norm mean(dnorm norm));
 * dw += sum_rows norm dy; db += sum_rows dy (each may be null). */
export function layernormBackward(prog, { dinp, dw, db, dout, inp, w, mean, rstd }, M, D) {
  if (dinp) {
    const body = `  let base = row * u.D;
  var mu = 0.0; var rs = 0.0;
  if (ok) { mu = ld_mean(row); rs = ld_rstd(row); }
  var a = 0.0; var c = 0.0;
  if (ok) {
    for (var i = lane; i < u.D; i += 64u) {
      let n = (ld_inp(base + i) - mu) * rs;
      var dn = ld_dout(base + i);
      if (u.has_w != 0u) { dn = ld_w(i) * dn; }
      a = a + dn;
      c = c + dn * n;
    }
  }
  let mean_dn = row_sum(li, lane, a) / f32(u.D);
  let mean_dn_n = row_sum(li, lane, c) / f32(u.D);
  if (ok) {
    for (var i = lane; i < u.D; i += 64u) {
      let n = (ld_inp(base + i) - mu) * rs;
      var dn = ld_dout(base + i);
      if (u.has_w != 0u) { dn = ld_w(i) * dn; }
      st_dinp(base + i, ld_dinp(base + i) + (dn - mean_dn - n * mean_dn_n) * rs);
    }
  }`;
    prog.dispatch(
      'layernorm_backward_dinp',
      { dinp, dout, inp, w, mean, rstd },
      rowKernel(body),
      { R: M, D, has_w: w ? 1 : 0 },
      {},
      rowGrid(prog, M),
    );
  }
  colsum(
    prog,
    'layernorm_dw_db',
    [
      { out: dw, expr: '(ld_inp(m * u.D + n) - ld_mean(m)) * ld_rstd(m) * ld_dout(m * u.D + n)' },
      { out: db, expr: 'ld_dout(m * u.D + n)' },
    ],
    { dout, inp, mean, rstd },
    { D },
    M,
    D,
    true,
  );
}

/**
 * The attention softmax, in place over R = B*H*Tq rows of T scores (att [B,H,Tq,T]; Tq = T but
 * for cross-attention), with max subtraction; with causal_mask (bytes [B,T], 1 = causal part),
 * query i sees key j when j <= i or mask[b, j] == 0, and a hidden key gets probability exactly 0
 * (no infinities are made: WGSL may assume finite floats).
 */
export function attentionSoftmax(prog, { att, causal_mask }, B, H, T, Tq = T) {
  const hidden = '(u.causal != 0u && j > i && ldb_causal_mask(b * u.T + j) != 0u)';
  const body = `  let base = row * u.T;
  let i = row % u.Tq;
  let b = row / (u.Tq * u.H);
  var mx = bitcast<f32>(0xff7fffffu);
  if (ok) { for (var j = lane; j < u.T; j += 64u) { if (!${hidden}) { mx = max(mx, ld_att(base + j)); } } }
  mx = row_max(li, lane, mx);
  var s = 0.0;
  if (ok) {
    for (var j = lane; j < u.T; j += 64u) {
      var e = 0.0;
      if (!${hidden}) { e = exp(ld_att(base + j) - mx); }
      st_att(base + j, e);
      s = s + e;
    }
  }
  let inv = 1.0 / row_sum(li, lane, s);
  if (ok) { for (var j = lane; j < u.T; j += 64u) { st_att(base + j, ld_att(base + j) * inv); } }`;
  const R = B * H * Tq;
  prog.dispatch(
    'attention_softmax',
    { att, causal_mask: causal_mask || absent('u8') },
    rowKernel(body),
    { R, T, Tq, H, causal: causal_mask ? 1 : 0 },
    {},
    rowGrid(prog, R),
  );
}

/** In place over rows of dP (ds): ds = p (dp - sum_j p dp) scale, p the saved probabilities. */
export function attentionSoftmaxBackward(prog, { ds, att }, R, T, scale) {
  const body = `  let base = row * u.T;
  var s = 0.0;
  if (ok) { for (var j = lane; j < u.T; j += 64u) { s = s + ld_att(base + j) * ld_ds(base + j); } }
  let sum_pdp = row_sum(li, lane, s);
  if (ok) {
    for (var j = lane; j < u.T; j += 64u) {
      st_ds(base + j, ld_att(base + j) * (ld_ds(base + j) - sum_pdp) * u.scale);
    }
  }`;
  prog.dispatch('attention_softmax_backward', { ds, att }, rowKernel(body), { R, T }, { scale }, rowGrid(prog, R));
}

/** Per row of D: rstd = 1/sqrt(mean(x^2) + eps); out = (x rstd) w (w may be null); rstd [M]
 * saved when given; out may alias inp. The sum of squares as LayerNorm's sums (a fixed tree). */
export function rmsnormForward(prog, { out, rstd, inp, w }, M, D, eps) {
  const body = `  let base = row * u.D;
  var s = 0.0;
  if (ok) { for (var i = lane; i < u.D; i += 64u) { let x = ld_inp(base + i); s = s + x * x; } }
  let rs = 1.0 / sqrt(row_sum(li, lane, s) / f32(u.D) + u.eps);
  if (ok) {
    for (var i = lane; i < u.D; i += 64u) {
      var y = ld_inp(base + i) * rs;
      if ((u.flags & 1u) != 0u) { y = y * ld_w(i); }
      st_out(base + i, y);
    }
    if (lane == 0u && (u.flags & 2u) != 0u) { st_rstd(row, rs); }
  }`;
  const flags = (w ? 1 : 0) | (rstd ? 2 : 0);
  prog.dispatch(
    'rmsnorm_forward',
    { out, rstd, inp, w },
    rowKernel(body),
    { R: M, D, flags },
    { eps },
    rowGrid(prog, M),
  );
}

/** n = x rstd, dn = w dy: dinp += (dn - n mean(dn n)) rstd; dw += sum_rows n dy (each may be null). */
export function rmsnormBackward(prog, { dinp, dw, dout, inp, w, rstd }, M, D) {
  if (dinp) {
    const body = `  let base = row * u.D;
  var rs = 0.0;
  if (ok) { rs = ld_rstd(row); }
  var c = 0.0;
  if (ok) {
    for (var i = lane; i < u.D; i += 64u) {
      var dn = ld_dout(base + i);
      if (u.has_w != 0u) { dn = ld_w(i) * dn; }
      c = c + dn * (ld_inp(base + i) * rs);
    }
  }
  let mean_dn_n = row_sum(li, lane, c) / f32(u.D);
  if (ok) {
    for (var i = lane; i < u.D; i += 64u) {
      let n = ld_inp(base + i) * rs;
      var dn = ld_dout(base + i);
      if (u.has_w != 0u) { dn = ld_w(i) * dn; }
      st_dinp(base + i, ld_dinp(base + i) + (dn - n * mean_dn_n) * rs);
    }
  }`;
    prog.dispatch(
      'rmsnorm_backward_dinp',
      { dinp, dout, inp, w, rstd },
      rowKernel(body),
      { R: M, D, has_w: w ? 1 : 0 },
      {},
      rowGrid(prog, M),
    );
  }
  colsum(
    prog,
    'rmsnorm_dw',
    [{ out: dw, expr: '(ld_inp(m * u.D + n) * ld_rstd(m)) * ld_dout(m * u.D + n)' }],
    { dout, inp, rstd },
    { D },
    M,
    D,
    true,
  );
}
