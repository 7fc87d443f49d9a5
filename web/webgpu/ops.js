// ops.js: the step's kernels besides the GEMM family (issue 20's ops.h: data movement, token
// assembly and masking, rows by index, pooling, targets and losses, gradient norm, clipping,
// the non-finite check, AdamW) in WGSL. Each function takes (prog, ops, ints, floats) with the
// operand and argument names of src/kernels/kernel_list.h; a null operand is absent (NULL).
// Semantics are the scalar references' (kernels_ops_ref.c); the bits are this backend's own:
// sums run in a fixed order (reduce.js) in float32 where the CPU sums in double.
//
// Repeated indices: where the C reference adds or writes rows in (b, k) order and an index may
// repeat (scatter_add_rows, layernorm_backward_rows, targets_backward, scatter_rows' last write),
// the first occurrence of each index follows a chain to the later ones, so each output row is
// written by one invocation in the reference's order (`chains` below); no two invocations ever
// write one element.
import { ew } from './elementwise.js';
import { LINEAR_WG } from './wgsl.js';
import { colsum, reduceAll } from './reduce.js';
import { rowKernel, rowGrid } from './rows.js';
import { absent } from './program.js';

const NONE = 0x7fffffff;

// chains of an index array idx [B, K] in the workspace at word ws: word (b, k) = the next k' > k
// with the same index (NONE if none), with bit 31 set when k is the index's first occurrence
function chains(prog, idx, B, K, ws) {
  const chain = prog.scratch(B * K, ws, 'u32');
  ew(
    prog,
    'index_chains',
    { chain, idx },
    { K },
    {},
    B * K,
    `  let b = i / u.K;
  let k = i % u.K;
  let v = ldi_idx(i);
  var nxt = ${NONE}u;
  var first = 0x80000000u;
  for (var j = 0u; j < u.K; j++) {
    if (ldi_idx(b * u.K + j) == v) {
      if (j < k) { first = 0u; }
      if (j > k && nxt == ${NONE}u) { nxt = j; }
    }
  }
  stu_chain(i, first | nxt);`,
  );
  return chain;
}

// WGSL: v += the rows of the later occurrences of this index, in k order (c: the first's chain
// word, b: the image); row(k) is the value of chain row k
const chainAdd = (row) => `  loop {
    let nxt = c & ${NONE}u;
    if (nxt == ${NONE}u) { break; }
    v = v + ${row('(b * u.K + nxt)')};
    c = ldu_chain(b * u.K + nxt);
  }`;

// the masked map [B, L] (u32 0/1) in the workspace at ws: rows idx[b, :] when idx is given,
// else mask[b, l] != 0, else none
function maskedMap(prog, idx, mask, B, L, K, ws) {
  const map = prog.scratch(B * L, ws, 'u32');
  ew(
    prog,
    'masked_map',
    { map, idx: idx || absent('i64'), mask: mask || absent('u8') },
    { L, K, has_idx: idx ? 1 : 0, has_mask: mask ? 1 : 0 },
    {},
    B * L,
    `  let b = i / u.L;
  let l = i % u.L;
  var m = 0u;
  if (u.has_idx != 0u) {
    for (var k = 0u; k < u.K; k++) { if (ldi_idx(b * u.K + k) == l) { m = 1u; } }
  } else if (u.has_mask != 0u) {
    m = select(0u, 1u, ldb_mask(i) != 0u);
  }
  stu_map(i, m);`,
  );
  return map;
}

// ---- data movement and element-wise -------------------------------------------------------------

export function fill(prog, { x }, { n }, { value }) {
  ew(prog, 'fill', { x }, {}, { value }, n, '  st_x(i, u.value);');
}

export function copy2d(prog, { dst, src }, { rows, cols, dst_stride, src_stride }) {
  ew(
    prog,
    'copy2d',
    { dst, src },
    { cols, ds: dst_stride, ss: src_stride },
    {},
    rows * cols,
    `  let r = i / u.cols;
  let c = i % u.cols;
  st_dst(r * u.ds + c, ld_src(r * u.ss + c));`,
  );
}

export function add2d(prog, { dst, src }, { rows, cols, dst_stride, src_stride }) {
  ew(
    prog,
    'add2d',
    { dst, src },
    { cols, ds: dst_stride, ss: src_stride },
    {},
    rows * cols,
    `  let r = i / u.cols;
  let c = i % u.cols;
  st_dst(r * u.ds + c, ld_dst(r * u.ds + c) + ld_src(r * u.ss + c));`,
  );
}

export function add_rows(prog, { out, x, y }, { rows, n, stride }) {
  ew(
    prog,
    'add_rows',
    { out, x, y },
    { cols: n, stride, has_y: y ? 1 : 0 },
    {},
    rows * n,
    `  let r = i / u.cols;
  let e = i % u.cols;
  var v = 0.0;
  if (u.has_y != 0u) { v = ld_y(e); }
  st_out(r * u.stride + e, ld_x(r * u.stride + e) + v);`,
  );
}

export function sum_rows(prog, { out, x }, { rows, n, stride }) {
  colsum(prog, 'sum_rows', [{ out, expr: 'ld_x(m * u.stride + n)' }], { x }, { stride }, rows, n, true);
}

export function layerscale_forward(prog, { out, x, g, y }, { M, D }) {
  ew(prog, 'layerscale_forward', { out, x, g, y }, { D }, {}, M * D, '  st_out(i, ld_x(i) + ld_g(i % u.D) * ld_y(i));');
}

export function layerscale_backward(prog, { dbranch, dg, g, dy, branch }, { M, D }) {
  ew(prog, 'layerscale_backward', { dbranch, g, dy }, { D }, {}, M * D, '  st_dbranch(i, ld_g(i % u.D) * ld_dy(i));');
  colsum(
    prog,
    'layerscale_dg',
    [{ out: dg, expr: 'ld_dy(m * u.N + n) * ld_branch(m * u.N + n)' }],
    { dy, branch },
    {},
    M,
    D,
    true,
  );
}

// patch row m = b*G*G + r*G + q, element e = (c, i, j): images[b, c, r*p + i, q*p + j]
const PIXEL = `  let Kp = u.C * u.p * u.p;
  let m = u.m0 + i / Kp;
  let e = i % Kp;
  let b = m / (u.G * u.G);
  let r = (m % (u.G * u.G)) / u.G;
  let q = m % u.G;
  let c = e / (u.p * u.p);
  let y = (e / u.p) % u.p;
  let x = e % u.p;
  let at = ((b * u.C + c) * u.S + r * u.p + y) * u.S + q * u.p + x;`;

export function im2col(prog, { patches, images }, { m0, n, C, S, p, G }) {
  ew(
    prog,
    'im2col',
    { patches, images },
    { m0, C, S, p, G },
    {},
    n * C * p * p,
    `${PIXEL}
  st_patches(i, ld_images(at));`,
  );
}

export function col2im_add(prog, { dimages, dpatches }, { m0, n, C, S, p, G }) {
  // patches do not overlap: every pixel has one writer
  ew(
    prog,
    'col2im_add',
    { dimages, dpatches },
    { m0, C, S, p, G },
    {},
    n * C * p * p,
    `${PIXEL}
  st_dimages(at, ld_dimages(at) + ld_dpatches(i));`,
  );
}

// patch row m = b*Gh*Gw + r*Gw + q of H x W images, element e = (c, i, j): pixel (r*p + i, q*p + j),
// inside the image or not (a padded grid)
const PIXEL_HW = `  let Kp = u.C * u.p * u.p;
  let m = u.m0 + i / Kp;
  let e = i % Kp;
  let G = u.Gh * u.Gw;
  let b = m / G;
  let r = (m % G) / u.Gw;
  let q = m % u.Gw;
  let c = e / (u.p * u.p);
  let y = r * u.p + (e / u.p) % u.p;
  let x = q * u.p + e % u.p;
  let inside = y < u.H && x < u.W;
  let at = ((b * u.C + c) * u.H + y) * u.W + x;`;

export function im2col_hw(prog, { patches, images }, { m0, n, C, H, W, p, Gh, Gw }) {
  ew(
    prog,
    'im2col_hw',
    { patches, images },
    { m0, C, H, W, p, Gh, Gw },
    {},
    n * C * p * p,
    `${PIXEL_HW}
  var v = 0.0;
  if (inside) { v = ld_images(at); }
  st_patches(i, v);`,
  );
}

export function col2im_add_hw(prog, { dimages, dpatches }, { m0, n, C, H, W, p, Gh, Gw }) {
  // patches do not overlap: every pixel has at most one writer
  ew(
    prog,
    'col2im_add_hw',
    { dimages, dpatches },
    { m0, C, H, W, p, Gh, Gw },
    {},
    n * C * p * p,
    `${PIXEL_HW}
  if (inside) { st_dimages(at, ld_dimages(at) + ld_dpatches(i)); }`,
  );
}

export function add_scaled(prog, { dst, src }, { n }, { alpha }) {
  ew(prog, 'add_scaled', { dst, src }, {}, { alpha }, n, '  st_dst(i, ld_dst(i) + u.alpha * ld_src(i));');
}

export { resample_aa_forward, resample_aa_backward } from './resample.js';

// ---- masking ----------------------------------------------------------------------------------------

export function mask_select(prog, { seq, mask_token, idx, mask }, { B, L, D, K }) {
  if (idx) {
    const chain = chains(prog, idx, B, K, 0);
    ew(
      prog,
      'mask_select_idx',
      { seq, mask_token, idx, chain },
      { L, D, K },
      {},
      B * K * D,
      `  let bk = i / u.D;
  let d = i % u.D;
  if ((ldu_chain(bk) & 0x80000000u) == 0u) { return; } // a repeated index: its first occurrence writes
  let row = (bk / u.K) * u.L + ldi_idx(bk);
  st_seq(row * u.D + d, ld_mask_token(d));`,
    );
  } else if (mask) {
    ew(
      prog,
      'mask_select_mask',
      { seq, mask_token, mask },
      { D },
      {},
      B * L * D,
      `  let bl = i / u.D;
  if (ldb_mask(bl) != 0u) { st_seq(i, ld_mask_token(i % u.D)); }`,
    );
  }
}

export function mask_token_backward(prog, { dmt, dseq, idx, mask }, { B, L, D, K }) {
  const map = maskedMap(prog, idx, mask, B, L, K, 0);
  colsum(
    prog,
    'mask_token_backward',
    [{ out: dmt, expr: 'select(0.0, ld_dseq(m * u.N + n), ldu_map(m) != 0u)' }],
    { dseq, map },
    {},
    B * L,
    D,
    true,
    B * L,
  );
}

export function prefix_tokens_backward(prog, { dcls, dreg, dseq, idx, mask }, { B, L, D, K, cls, R }) {
  const map = maskedMap(prog, idx, mask, B, L, K, 0);
  // rows m = b; columns: dcls's d (row 0), dreg's (r, d) (row cls + r)
  if (cls)
    colsum(
      prog,
      'dcls',
      [{ out: dcls, expr: 'select(ld_dseq(m * u.L * u.N + n), 0.0, ldu_map(m * u.L) != 0u)' }],
      { dseq, map },
      { L },
      B,
      D,
      true,
      B * L,
    );
  if (R)
    colsum(
      prog,
      'dreg',
      [
        {
          out: dreg,
          expr: `select(ld_dseq(m * u.L * u.D + u.cls * u.D + n), 0.0,
      ldu_map(m * u.L + u.cls + n / u.D) != 0u)`,
        },
      ],
      { dseq, map },
      { L, D, cls },
      B,
      R * D,
      true,
      B * L,
    );
}

export function patch_tokens_backward(prog, { dtok, dseq, idx, mask }, { B, L, D, K, P }) {
  const map = maskedMap(prog, idx, mask, B, L, K, 0);
  ew(
    prog,
    'patch_tokens_backward',
    { dtok, dseq, map },
    { L, D, P, N: L - P },
    {},
    B * (L - P) * D,
    `  let row = i / u.D;
  let d = i % u.D;
  let b = row / u.N;
  let l = u.P + row % u.N;
  st_dtok(i, select(ld_dseq((b * u.L + l) * u.D + d), 0.0, ldu_map(b * u.L + l) != 0u));`,
  );
}

// ---- rows by index ------------------------------------------------------------------------------------

export function gather_rows(prog, { out, x, idx }, { B, L, K, D }) {
  ew(
    prog,
    'gather_rows',
    { out, x, idx },
    { L, K, D },
    {},
    B * K * D,
    `  let bk = i / u.D;
  st_out(i, ld_x(((bk / u.K) * u.L + ldi_idx(bk)) * u.D + i % u.D));`,
  );
}

export function scatter_rows(prog, { out, x, idx }, { B, L, K, D }) {
  const chain = chains(prog, idx, B, K, 0);
  ew(
    prog,
    'scatter_rows',
    { out, x, idx, chain },
    { L, K, D },
    {},
    B * K * D,
    `  let bk = i / u.D;
  if ((ldu_chain(bk) & ${NONE}u) != ${NONE}u) { return; } // a later k writes the same row: the last one wins
  st_out(((bk / u.K) * u.L + ldi_idx(bk)) * u.D + i % u.D, ld_x(i));`,
  );
}

export function scatter_add_rows(prog, { out, x, idx }, { B, L, K, D }) {
  const chain = chains(prog, idx, B, K, 0);
  ew(
    prog,
    'scatter_add_rows',
    { out, x, idx, chain },
    { L, K, D },
    {},
    B * K * D,
    `  let bk = i / u.D;
  let d = i % u.D;
  var c = ldu_chain(bk);
  if ((c & 0x80000000u) == 0u) { return; }
  let b = bk / u.K;
  let at = (b * u.L + ldi_idx(bk)) * u.D + d;
  var v = ld_out(at) + ld_x(i);
${chainAdd((k) => `ld_x(${k} * u.D + d)`)}
  st_out(at, v);`,
  );
}

export function gather_rows_except(prog, { out, x, idx, except }, { B, L, K, Kx, D }) {
  const keep = prog.scratch(B * K, 0, 'u32');
  ew(
    prog,
    'rows_except',
    { keep, idx, except },
    { K, Kx },
    {},
    B * K,
    `  let b = i / u.K;
  let v = ldi_idx(i);
  var k = 1u;
  for (var j = 0u; j < u.Kx; j++) { if (ldi_except(b * u.Kx + j) == v) { k = 0u; } }
  stu_keep(i, k);`,
  );
  ew(
    prog,
    'gather_rows_except',
    { out, x, idx, keep },
    { L, K, D },
    {},
    B * K * D,
    `  let bk = i / u.D;
  if (ldu_keep(bk) == 0u) { return; }
  st_out(i, ld_x(((bk / u.K) * u.L + ldi_idx(bk)) * u.D + i % u.D));`,
  );
}

export function sum_rows_at(prog, { out, x, idx }, { B, L, K, D }) {
  colsum(
    prog,
    'sum_rows_at',
    [{ out, expr: 'ld_x(((m / u.K) * u.L + ldi_idx(m)) * u.N + n)' }],
    { x, idx },
    { L, K },
    B * K,
    D,
    true,
  );
}

export function layernorm_backward_rows(prog, { dinp, dw, db, dout, inp, w, mean, rstd, idx }, { B, L, K, D }) {
  if (dinp) {
    const chain = chains(prog, idx, B, K, 0);
    // one row per workgroup: the chain of a repeated row is followed by the whole workgroup
    // (the row and its chain are read as workgroup-uniform values: the loop holds barriers)
    const body = `  let urow = ${LINEAR_WG};
  if (urow >= u.R) { return; }
  if (lane == 0u) { wchain = ldu_chain(urow); }
  var c = workgroupUniformLoad(&wchain);
  if ((c & 0x80000000u) == 0u) { return; }
  let b = urow / u.K;
  let base = (b * u.L + ldi_idx(urow)) * u.D;
  let mu = ld_mean(base / u.D);
  let rs = ld_rstd(base / u.D);
  var k = urow;
  loop {
    let g = k * u.D;
    var a = 0.0; var s = 0.0;
    for (var i = lane; i < u.D; i += 64u) {
      let n = (ld_inp(base + i) - mu) * rs;
      let dn = ld_w(i) * ld_dout(g + i);
      a = a + dn;
      s = s + dn * n;
    }
    let mean_dn = row_sum(li, lane, a) / f32(u.D);
    let mean_dn_n = row_sum(li, lane, s) / f32(u.D);
    for (var i = lane; i < u.D; i += 64u) {
      let n = (ld_inp(base + i) - mu) * rs;
      let dn = ld_w(i) * ld_dout(g + i);
      st_dinp(base + i, ld_dinp(base + i) + (dn - mean_dn - n * mean_dn_n) * rs);
    }
    let nxt = c & ${NONE}u;
    if (nxt == ${NONE}u) { break; }
    k = b * u.K + nxt;
    if (lane == 0u) { wchain = ldu_chain(k); }
    c = workgroupUniformLoad(&wchain);
  }`;
    prog.dispatch(
      'layernorm_backward_rows',
      { dinp, dout, inp, w, mean, rstd, idx, chain },
      'var<workgroup> wchain: u32;\n' + rowKernel(body, 1),
      { R: B * K, L, K, D },
      {},
      rowGrid(prog, B * K, 1),
    );
  }
  const row = '((m / u.K) * u.L + ldi_idx(m))';
  colsum(
    prog,
    'layernorm_rows_dw_db',
    [
      { out: dw, expr: `(ld_inp(${row} * u.N + n) - ld_mean(${row})) * ld_rstd(${row}) * ld_dout(m * u.N + n)` },
      { out: db, expr: 'ld_dout(m * u.N + n)' },
    ],
    dw ? { dout, inp, mean, rstd, idx } : { dout },
    { L, K },
    B * K,
    D,
    true,
    dinp ? B * K : 0,
  );
}

// ---- pooling ------------------------------------------------------------------------------------------

const POOL = { TOKEN: 0, AVG: 1, MAX: 2, AVGMAX: 3 };

export function pool_forward(prog, { y, x }, { B, T, D, P, kind }) {
  // one invocation per (image, channel), over the tokens in order (coalesced across channels)
  ew(
    prog,
    'pool_forward',
    { y, x },
    { T, D, P, kind },
    {},
    B * D,
    `  let b = i / u.D;
  let d = i % u.D;
  let xb = b * u.T * u.D + d;
  if (u.kind == ${POOL.TOKEN}u) { st_y(i, ld_x(xb)); return; }
  var s = 0.0;
  var mx = ld_x(xb + u.P * u.D);
  for (var t = u.P; t < u.T; t++) {
    let v = ld_x(xb + t * u.D);
    s = s + v;
    if (v > mx || v != v) { mx = v; }
  }
  let avg = s / f32(u.T - u.P);
  st_y(i, select(select(0.5 * (mx + avg), mx, u.kind == ${POOL.MAX}u), avg, u.kind == ${POOL.AVG}u));`,
  );
}

export function pool_backward(prog, { dx, dy, x }, { B, T, D, P, kind, assign }) {
  ew(
    prog,
    'pool_backward',
    { dx, dy, x },
    { T, D, P, kind, assign },
    {},
    B * D,
    `  let b = i / u.D;
  let d = i % u.D;
  let xb = b * u.T * u.D + d;
  let g = ld_dy(i);
  if (u.kind == ${POOL.TOKEN}u) {
    st_dx(xb, select(ld_dx(xb) + g, g, u.assign != 0u));
    return;
  }
  let n = f32(u.T - u.P);
  if (u.assign != 0u) {
    for (var t = u.P; t < u.T; t++) { st_dx(xb + t * u.D, g / n); }
    return;
  }
  var ga = 0.0;
  if (u.kind == ${POOL.AVG}u) { ga = g / n; }
  if (u.kind == ${POOL.AVGMAX}u) { ga = 0.5 * g / n; }
  var mx = bitcast<f32>(0xff7fffffu); // -FLT_MAX (WGSL has no constant infinity)
  var ties = 0u;
  if (u.kind != ${POOL.AVG}u) { // amax's gradient is shared evenly by the maxima (PyTorch's)
    for (var t = u.P; t < u.T; t++) { mx = max(mx, ld_x(xb + t * u.D)); }
    for (var t = u.P; t < u.T; t++) { ties += select(0u, 1u, ld_x(xb + t * u.D) == mx); }
  }
  var gm = 0.0;
  if (ties > 0u) { gm = select(g, 0.5 * g, u.kind == ${POOL.AVGMAX}u) / f32(ties); }
  for (var t = u.P; t < u.T; t++) {
    let at = xb + t * u.D;
    st_dx(at, ld_dx(at) + (ga + select(0.0, gm, ties > 0u && ld_x(at) == mx)));
  }`,
  );
}

// ---- targets and losses -------------------------------------------------------------------------------

// lightly's patchify: patch n (row-major), element e = (py, px, c) with the channel fastest
const PIX = `fn pix(n: u32, e: u32) -> u32 {
  let r = n / u.G; let q = n % u.G;
  let c = e % u.C; let px = (e / u.C) % u.p; let py = e / u.C / u.p;
  return (c * u.S + r * u.p + py) * u.S + q * u.p + px;
}
fn patch_of(row: u32) -> u32 {
  if (u.has_idx != 0u) { return ldi_idx(row) - u.offset; }
  return row % u.K;
}
`;
const NORM_PIX_EPS = 1e-6;

export function patch_targets(prog, { tgt, trs, images, idx }, { B, K, C, S, p, G, offset, norm_pix }) {
  const O = C * p * p;
  const body = `  let o = row * u.O;
  let img = (row / u.K) * u.C * u.S * u.S;
  var n = 0u;
  if (ok) { n = patch_of(row); }
  var s = 0.0;
  if (ok) { for (var e = lane; e < u.O; e += 64u) { let v = ld_images(img + pix(n, e)); st_tgt(o + e, v); s = s + v; } }
  if (u.norm_pix == 0u) { return; }
  let mu = row_sum(li, lane, s) / f32(u.O);
  var q = 0.0;
  if (ok) { for (var e = lane; e < u.O; e += 64u) { let d = ld_tgt(o + e) - mu; q = q + d * d; } }
  let r = 1.0 / sqrt(row_sum(li, lane, q) / f32(max(u.O, 2u) - 1u) + ${NORM_PIX_EPS});
  if (ok) {
    for (var e = lane; e < u.O; e += 64u) { st_tgt(o + e, (ld_tgt(o + e) - mu) * r); }
    if (lane == 0u) { st_trs(row, r); }
  }`;
  prog.dispatch(
    'patch_targets',
    { tgt, trs, images, idx: idx || absent('i64') },
    PIX + rowKernel(body),
    { R: B * K, K, C, S, p, G, O, offset, norm_pix, has_idx: idx ? 1 : 0 },
    {},
    rowGrid(prog, B * K),
  );
}

export function targets_backward(prog, { dimages, dt, dpred, tgt, trs, idx }, { B, K, C, S, p, G, offset, norm_pix }) {
  const O = C * p * p;
  // dt = -dpred, through normalize_mean_var's backward when norm_pix (row sums: fixed trees)
  const body = `  let o = row * u.O;
  if (u.norm_pix == 0u) {
    if (ok) { for (var e = lane; e < u.O; e += 64u) { st_dt(o + e, -ld_dpred(o + e)); } }
    return;
  }
  var a = 0.0; var c = 0.0;
  if (ok) { for (var e = lane; e < u.O; e += 64u) { let d = -ld_dpred(o + e); a = a + d; c = c + d * ld_tgt(o + e); } }
  let md = row_sum(li, lane, a) / f32(u.O);
  let cy = row_sum(li, lane, c) / f32(max(u.O, 2u) - 1u);
  if (ok) {
    let r = ld_trs(row);
    for (var e = lane; e < u.O; e += 64u) { st_dt(o + e, r * (-ld_dpred(o + e) - md - ld_tgt(o + e) * cy)); }
  }`;
  prog.dispatch(
    'targets_backward_dt',
    { dt, dpred, tgt, trs },
    rowKernel(body),
    { R: B * K, O, norm_pix },
    {},
    rowGrid(prog, B * K),
  );
  // dimages += dt at each patch's pixels; a repeated patch index adds its rows in j order
  const chain = idx ? chains(prog, idx, B, K, 0) : null;
  ew(
    prog,
    'targets_backward_add',
    { dimages, dt, idx: idx || absent('i64'), chain: chain || absent('u32') },
    { K, C, S, p, G, O, offset, has_idx: idx ? 1 : 0 },
    {},
    B * K * O,
    `  let row = i / u.O;
  let e = i % u.O;
  var c = 0x80000000u | ${NONE}u;
  if (u.has_idx != 0u) { c = ldu_chain(row); }
  if ((c & 0x80000000u) == 0u) { return; }
  let b = row / u.K;
  let at = b * u.C * u.S * u.S + pix(patch_of(row), e);
  var v = ld_dimages(at) + ld_dt(i);
${chainAdd((k) => `ld_dt(${k} * u.O + e)`)}
  st_dimages(at, v);`,
    PIX,
  );
}

export function mse_forward(prog, { loss, pred, tgt }, { n }) {
  reduceAll(
    prog,
    'mse',
    'sum',
    '(ld_pred(i) - ld_tgt(i)) * (ld_pred(i) - ld_tgt(i))',
    'st_loss(0u, r / f32(u.total));',
    { loss, pred, tgt },
    {},
    {},
    n,
  );
}

export function mse_backward(prog, { dpred, pred, tgt, dloss }, { n }) {
  ew(
    prog,
    'mse_backward',
    { dpred, pred, tgt, dloss },
    {},
    {},
    n,
    '  st_dpred(i, (2.0 * ld_dloss(0u) / f32(u.n)) * (ld_pred(i) - ld_tgt(i)));',
  );
}

export function cross_entropy_forward(prog, { logp, loss, logits, labels }, { B, C }, { smoothing }) {
  // per image: log-softmax (max subtraction), then its loss term into the workspace; the mean over
  // images by reduceAll
  const term = prog.scratch(B, 0);
  const body = `  let o = row * u.C;
  var mx = bitcast<f32>(0xff7fffffu);
  if (ok) { for (var c = lane; c < u.C; c += 64u) { mx = max(mx, ld_logits(o + c)); } }
  mx = row_max(li, lane, mx);
  var se = 0.0;
  if (ok) { for (var c = lane; c < u.C; c += 64u) { se = se + exp(ld_logits(o + c) - mx); } }
  let lse = mx + log(row_sum(li, lane, se));
  var sl = 0.0;
  if (ok) { for (var c = lane; c < u.C; c += 64u) { let v = ld_logits(o + c) - lse; st_logp(o + c, v); sl = sl + v; } }
  sl = row_sum(li, lane, sl);
  if (ok && lane == 0u) {
    let y = ldu_labels(row);
    st_term(row, (1.0 - u.smoothing) * -(ld_logits(o + y) - lse) + u.smoothing * -(sl / f32(u.C)));
  }`;
  prog.dispatch(
    'cross_entropy_rows',
    { logp, logits, labels, term },
    rowKernel(body),
    { R: B, C },
    { smoothing },
    rowGrid(prog, B),
  );
  reduceAll(prog, 'cross_entropy', 'sum', 'ld_term(i)', 'st_loss(0u, r / f32(u.total));', { loss, term }, {}, {}, B, B);
}

export function cross_entropy_backward(prog, { dlogits, logp, labels, dloss }, { B, C }, { smoothing }) {
  ew(
    prog,
    'cross_entropy_backward',
    { dlogits, logp, labels, dloss },
    { B, C },
    { smoothing },
    B * C,
    `  let c = i % u.C;
  let tgt = select(0.0, 1.0 - u.smoothing, c == ldu_labels(i / u.C)) + u.smoothing / f32(u.C);
  st_dlogits(i, (ld_dloss(0u) / f32(u.B)) * (exp(ld_logp(i)) - tgt));`,
  );
}

// ---- gradients and the optimizer ------------------------------------------------------------------------

export function grad_norm(prog, { norm, g }, { n }) {
  reduceAll(prog, 'grad_norm', 'sum', 'ld_g(i) * ld_g(i)', 'st_norm(0u, sqrt(r));', { norm, g }, {}, {}, n);
}

// a float that is NaN or infinite, from its bits (WGSL may assume finite floats in arithmetic)
const NONFINITE = (w) => `((${w} & 0x7f800000u) == 0x7f800000u)`;

export function clip_grads(prog, { g, norm }, { n }, { max_norm }) {
  ew(
    prog,
    'clip_grads',
    { g, norm },
    {},
    { max_norm },
    n,
    `  let nb = bitcast<u32>(ld_norm(0u));
  if (${NONFINITE('nb')}) { return; }
  let coef = u.max_norm / (ld_norm(0u) + 1e-6);
  if (coef < 1.0) { st_g(i, ld_g(i) * coef); }`,
  );
}

export function check_finite(prog, { flag, x }, { n }) {
  reduceAll(
    prog,
    'check_finite',
    'max',
    `select(0.0, 1.0, ${NONFINITE('bitcast<u32>(ld_x(i))')})`,
    'st_flag(0u, select(r, 1.0, ld_flag(0u) != 0.0));',
    { flag, x },
    {},
    {},
    n,
  );
}

export function adamw(prog, { p, m, v, g, lr, step, flag }, { n }, { b1, b2, eps, wd }) {
  // the C reference's float32 scalars: step = lr / (1 - b1^t), bc2s = sqrt(1 - b2^t), decay = 1 - lr wd
  ew(
    prog,
    'adamw',
    { p, m, v, g, lr, step, flag },
    {},
    { b1, b2, eps, wd },
    n,
    `  if (ld_flag(0u) != 0.0) { return; }
  let t = ld_step(0u);
  let a = ld_lr(0u);
  let stp = a / (1.0 - pow(u.b1, t));
  let bc2s = sqrt(1.0 - pow(u.b2, t));
  let gi = ld_g(i);
  let mi = u.b1 * ld_m(i) + (1.0 - u.b1) * gi;
  let vi = u.b2 * ld_v(i) + (1.0 - u.b2) * gi * gi;
  st_m(i, mi);
  st_v(i, vi);
  st_p(i, ld_p(i) * (1.0 - a * u.wd) - stp * (mi / (sqrt(vi) / bc2s + u.eps)));`,
  );
}

// ---- teaching (not part of a step) ------------------------------------------------------------------------

export function unpatchify(prog, { recon, masked, pred, images, idx }, { B, K, C, S, p, G, offset, norm_pix }) {
  const O = C * p * p;
  // a patch predicted twice (a repeated index) shows the later row, as the reference writes it
  const chain = idx ? chains(prog, idx, B, K, 0) : null;
  const body = `  let o = row * u.O;
  let img = (row / u.K) * u.C * u.S * u.S;
  var n = 0u;
  var last = true;
  if (ok) {
    n = patch_of(row);
    if (u.has_idx != 0u) { last = (ldu_chain(row) & ${NONE}u) == ${NONE}u; }
  }
  var mu = 0.0; var sd = 1.0;
  if (u.norm_pix != 0u) { // the original patch's statistics invert normalize_mean_var
    var s = 0.0;
    if (ok) { for (var e = lane; e < u.O; e += 64u) { s = s + ld_images(img + pix(n, e)); } }
    mu = row_sum(li, lane, s) / f32(u.O);
    var q = 0.0;
    if (ok) { for (var e = lane; e < u.O; e += 64u) { let d = ld_images(img + pix(n, e)) - mu; q = q + d * d; } }
    sd = sqrt(row_sum(li, lane, q) / f32(max(u.O, 2u) - 1u) + ${NORM_PIX_EPS});
  }
  if (ok && last) {
    for (var e = lane; e < u.O; e += 64u) {
      let at = img + pix(n, e);
      let v = ld_pred(o + e);
      st_recon(at, select(v, v * sd + mu, u.norm_pix != 0u));
      if (u.has_masked != 0u) { st_masked(at, 0.0); }
    }
  }`;
  prog.dispatch(
    'unpatchify',
    { recon, masked, pred, images, idx: idx || absent('i64'), chain: chain || absent('u32') },
    PIX + rowKernel(body),
    { R: B * K, K, C, S, p, G, O, offset, norm_pix, has_idx: idx ? 1 : 0, has_masked: masked ? 1 : 0 },
    {},
    rowGrid(prog, B * K),
  );
}

// ---- timm's NCHW intermediates ----------------------------------------------------------------

/** dst[b dst_bs + c dst_rs + r] = src[b src_bs + r src_rs + c]: B matrices of R x C transposed
 * (one invocation per element; a copy: the C reference's bits) */
export function transpose(prog, { dst, src }, { B, R, C, dst_bs, dst_rs, src_bs, src_rs }) {
  ew(
    prog,
    'transpose',
    { dst, src },
    { R, C, dbs: dst_bs, drs: dst_rs, sbs: src_bs, srs: src_rs },
    {},
    B * R * C,
    `  let b = i / (u.R * u.C);
  let rc = i % (u.R * u.C);
  let r = rc / u.C;
  let c = rc % u.C;
  st_dst(b * u.dbs + c * u.drs + r, ld_src(b * u.sbs + r * u.srs + c));`,
  );
}
