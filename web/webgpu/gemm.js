// gemm.js: the one matrix-product kernel behind matmul forward/backward and attention.
//   C[z](m, n) = alpha * sum_k A[z](m, k) B[z](n, k)  (+ bias[n]) (+ C[z](m, n) when accumulating)
// A(m, k) sits at a + m*lda + k (aT: a + k*lda + m), B(n, k) at b + n*ldb + k (bT: b + k*ldb + n),
// C(m, n) at c + m*ldc + n; batch z = zb*H + zh offsets each operand by zb*sb + zh*sh (attention:
// z = (image, head) over strided q/k/v rows).
//
// Design (for real GPUs): a workgroup computes a BM x BN tile of C with 256 invocations, each a
// TM x TN register tile (4x4, or 8x4 for large problems) of vec4 accumulators; K advances BK = 16 at
// a time through workgroup memory, where both tiles are stored k-major as vec4 along m / n (padded
// by one vec4 per row against bank conflicts) so the inner loop is TM/4 + TN/4 vec4 reads per
// TM*TN fused multiply-adds. Global loads are coalesced along whichever index is contiguous
// (k for a row-major weight, m or n for a transposed operand) and every load is guarded, so no
// size needs to be a multiple of a tile.
//
// Determinism: each C element is one invocation's sum over k in increasing order (fma), whatever
// the tile shape; the tile shape is therefore free to change with the device without changing a
// bit. Only the split of a long k (split-K: dW = dout^T x over many rows, the MLP's second product
// of a few images) changes the grouping of the sum, so the split is a function of the shape alone:
// S raw partial sums in the workspace, then splitEpilogue adds them in order s = 0, 1, ... and
// applies the epilogue a whole-k tile applies (alpha, bias, accumulate, any ldc) -- no atomics.
import { grid1d, LINEAR_WG } from './wgsl.js';

const BK = 16,
  TN = 4;
// tile shapes: rows x columns of C a workgroup computes, rows per invocation (4 columns each)
const TILES = { 128: { BM: 128, BN: 64, TM: 8 }, 64: { BM: 64, BN: 64, TM: 4 }, 32: { BM: 32, BN: 32, TM: 4 } };
const tileCount = (t, M, N, batch) => Math.ceil(M / t.BM) * Math.ceil(N / t.BN) * batch;

function tileFor(M, N, batch) {
  // 128x64 (8x4 a invocation) where there are enough such tiles to fill a GPU (~64 workgroups);
  // 32x32 (64 invocations) for small products (attention of few tokens, narrow heads), where a
  // 64x64 tile would be mostly padding and leave the GPU idle; 64x64 otherwise
  if (tileCount(TILES[128], M, N, batch) >= 64) return TILES[128];
  if (M <= 32 || N <= 32 || tileCount(TILES[64], M, N, batch) < 16) return TILES[32];
  return TILES[64];
}

/** The split of a long reduction (shape only): S pieces of kchunk (a multiple of BK). */
export function gemmSplit(M, N, K, batch) {
  const tiles = tileCount(tileFor(M, N, batch), M, N, batch);
  if (batch !== 1 || tiles >= 64 || K < 1024) return { S: 1, kchunk: Math.max(K, 1) };
  let S = Math.min(Math.ceil(K / 256), Math.ceil(256 / tiles));
  const kchunk = Math.ceil(K / S / BK) * BK;
  S = Math.ceil(K / kchunk);
  return { S, kchunk };
}

// C's epilogue, 4 columns at a time: alpha (1 = exact), bias (flags & 1), accumulate (flags & 2)
const STORE_ROW = `fn store_row(cbase: u32, m: u32, n0: u32, v4: vec4<f32>) {
  if (m >= u.M) { return; }
  for (var j = 0u; j < 4u; j++) {
    let n = n0 + j;
    if (n < u.N) {
      var v = v4[j] * u.alpha;
      if ((u.flags & 1u) != 0u) { v = v + ld_bias(n); }
      let ci = cbase + m * u.ldc + n;
      if ((u.flags & 2u) != 0u) { v = ld_c(ci) + v; }
      st_c(ci, v);
    }
  }
}
`;
// which (image, head) z and which piece s of a split-K the workgroup computes, its operands' bases
const PROLOGUE = `  let s = wid.z % u.S;
  let zz = wid.z / u.S;
  let zb = zz / u.H;
  let zh = zz % u.H;
  let abase = zb * u.a_sb + zh * u.a_sh;
  let bbase = zb * u.b_sb + zh * u.b_sh;
  let cbase = zb * u.c_sb + zh * u.c_sh + s * u.c_ss;
  let kbeg = s * u.kchunk;
  let kend = min(u.K, kbeg + u.kchunk);`;

// One shader per tile shape: the operands' layouts (strides), bias, accumulation and split are
// uniforms tested in workgroup-uniform branches, not variants to compile.
function gemmWGSL({ BM, BN, TM }) {
  const WX = BN / TN,
    WY = BM / TM,
    NT = WX * WY,
    AS = BM / 4 + 1,
    BS = BN / 4 + 1;
  // tile loads: each invocation stores whole vec4s (4 consecutive m or n at one k). A transposed
  // operand (contiguous along m or n) gives 4 consecutive elements to each invocation; a row-major
  // one (contiguous along k) gives consecutive k to consecutive invocations: both coalesced.
  const tileLoad = (X, rows, stride, ld, org) => {
    const q = rows / 4,
      total = q * BK,
      base = X === 'A' ? 'abase' : 'bbase',
      T = X === 'A' ? 'u.aT' : 'u.bT';
    const store = `${X}s[kk * ${stride} + r / 4u] = vec4<f32>(${[0, 1, 2, 3].map((j) => `${ld}(${base}, ${org} + r + ${j}u, k0 + kk, kend)`).join(', ')});`;
    return `    if (${T} != 0u) {
      for (var idx = li; idx < ${total}u; idx += ${NT}u) {
        let r = (idx % ${q}u) * 4u; let kk = idx / ${q}u;
        ${store}
      }
    } else {
      for (var idx = li; idx < ${total}u; idx += ${NT}u) {
        let kk = idx % BK; let r = (idx / BK) * 4u;
        ${store}
      }
    }`;
  };
  return `const BM = ${BM}u; const BN = ${BN}u; const BK = ${BK}u; const AS = ${AS}u; const BS = ${BS}u;
var<workgroup> As: array<vec4<f32>, ${BK * AS}>;
var<workgroup> Bs: array<vec4<f32>, ${BK * BS}>;
// guarded element loads: 0 outside the matrix or past this split's k range
fn la(base: u32, m: u32, k: u32, kend: u32) -> f32 {
  if (m < u.M && k < kend) { return ld_a(base + m * u.a_sm + k * u.a_sk); }
  return 0.0;
}
fn lb(base: u32, n: u32, k: u32, kend: u32) -> f32 {
  if (n < u.N && k < kend) { return ld_b(base + n * u.b_sn + k * u.b_sk); }
  return 0.0;
}
${STORE_ROW}@compute @workgroup_size(${WX}, ${WY}, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
${PROLOGUE}
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
${Array.from({ length: TM }, (_, i) => `  var c${i} = vec4<f32>(0.0);`).join('\n')}
  for (var k0 = kbeg; k0 < kend; k0 += BK) {
${tileLoad('A', BM, 'AS', 'la', 'm0')}
${tileLoad('B', BN, 'BS', 'lb', 'n0')}
    workgroupBarrier();
    // a ${TM}x4 outer product a step: ${TM / 4 + 1} vec4 reads of workgroup memory, ${TM} vec4 fma
    // (accumulators in named registers: an array indexed in a loop may live in memory)
    for (var kk = 0u; kk < BK; kk++) {
      let b = Bs[kk * BS + lid.x];
${Array.from({ length: TM / 4 }, (_, r) => `      let a${r} = As[kk * AS + lid.y * ${TM / 4}u + ${r}u];`).join('\n')}
${Array.from({ length: TM }, (_, i) => `      c${i} = fma(vec4<f32>(a${i >> 2}.${'xyzw'[i & 3]}), b, c${i});`).join('\n')}
    }
    workgroupBarrier();
  }
  // split-K partials at s * c_ss
${Array.from({ length: TM }, (_, i) => `  store_row(cbase, m0 + lid.y * ${TM}u + ${i}u, n0 + lid.x * 4u, c${i});`).join('\n')}
}`;
}

// The kernel of a software adapter (SwiftShader: shaders on the CPU, where workgroup memory is
// only a copy and every branch in the k loop costs): no workgroup memory, each invocation a
// RTM x RTN register tile straight from the operands, k in order -- each C element the very fma
// sequence the tiled kernel makes, so the same bits (tests/node/webgpu-kernels.test.mjs). Rows and
// columns past M / N load a clamped (valid) element and are never stored: no branch in the loop.
const REG = { TM: 8, TN: 8, WX: 8, WY: 8 };
function regWGSL({ TM, TN, WX, WY }) {
  const NQ = TN / 4,
    acc = (i, q) => `c${i}_${q}`;
  const L = [STORE_ROW, `@compute @workgroup_size(${WX}, ${WY}, 1)`];
  L.push(`fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
${PROLOGUE}
  let m0 = (wid.y * ${WY}u + lid.y) * ${TM}u;
  let n0 = (wid.x * ${WX}u + lid.x) * ${TN}u;`);
  for (let i = 0; i < TM; i++) L.push(`  let ar${i} = abase + min(m0 + ${i}u, u.M - 1u) * u.a_sm;`);
  for (let j = 0; j < TN; j++) L.push(`  let br${j} = bbase + min(n0 + ${j}u, u.N - 1u) * u.b_sn;`);
  for (let i = 0; i < TM; i++) for (let q = 0; q < NQ; q++) L.push(`  var ${acc(i, q)} = vec4<f32>(0.0);`);
  L.push('  for (var k = kbeg; k < kend; k++) {', '    let ak = k * u.a_sk;', '    let bk = k * u.b_sk;');
  for (let q = 0; q < NQ; q++)
    L.push(`    let b${q} = vec4<f32>(${[0, 1, 2, 3].map((j) => `ld_b(br${4 * q + j} + bk)`).join(', ')});`);
  for (let i = 0; i < TM; i++) {
    L.push(`    let a${i} = vec4<f32>(ld_a(ar${i} + ak));`);
    for (let q = 0; q < NQ; q++) L.push(`    ${acc(i, q)} = fma(a${i}, b${q}, ${acc(i, q)});`);
  }
  L.push('  }');
  for (let i = 0; i < TM; i++)
    for (let q = 0; q < NQ; q++) L.push(`  store_row(cbase, m0 + ${i}u, n0 + ${4 * q}u, ${acc(i, q)});`);
  L.push('}');
  return L.join('\n');
}

/**
 * Appends C = alpha A B^T (+ bias) (+ C) to program `prog` (see the header for the layout).
 * g: { a, b, c, bias?: operands; M, N, K; lda, ldb, ldc; aT, bT, acc, alpha?: number;
 *      batch?: { B, H, a: [sb, sh], b: [sb, sh], c: [sb, sh] }; ws?: workspace float offset for split-K
 *      partials (past any workspace the caller's operands use); tile?: 32 | 64 | 128 | 'reg' (default: the
 *      Kernels' family; tiled: by shape) }
 */
export function gemm(prog, g) {
  const { M, N, K } = g;
  const nb = g.batch ? g.batch.B * g.batch.H : 1;
  if (M === 0 || N === 0 || nb === 0) return;
  // the tile shape only changes speed, never a bit (see the header): g.tile may force one; else
  // the library's family (Kernels: 'reg' on a software adapter), the tiled one by shape
  const kind = g.tile ?? (prog.k.gemm === 'reg' ? 'reg' : null);
  const tile = kind === 'reg' ? null : kind ? TILES[kind] : tileFor(M, N, nb);
  const [BM, BN] = tile ? [tile.BM, tile.BN] : [REG.TM * REG.WY, REG.TN * REG.WX];
  const { S, kchunk } = gemmSplit(M, N, K, nb);
  const split = S > 1;
  const bt = g.batch || { B: 1, H: 1, a: [0, 0], b: [0, 0], c: [0, 0] };
  const args = {
    M,
    N,
    K,
    H: bt.H,
    S,
    kchunk,
    a_sm: g.aT ? 1 : g.lda,
    a_sk: g.aT ? g.lda : 1,
    b_sn: g.bT ? 1 : g.ldb,
    b_sk: g.bT ? g.ldb : 1,
    ldc: g.ldc,
    a_sb: bt.a[0],
    a_sh: bt.a[1],
    b_sb: bt.b[0],
    b_sh: bt.b[1],
    c_sb: bt.c[0],
    c_sh: bt.c[1],
    c_ss: split ? M * N : 0,
    aT: g.aT ? 1 : 0,
    bT: g.bT ? 1 : 0,
    // the partials of a split are raw sums (dense, ldc N): the epilogue is splitEpilogue's
    ...(split ? { ldc: N, flags: 0 } : { flags: (g.bias ? 1 : 0) | (g.acc ? 2 : 0) }),
  };
  const part = split ? prog.scratch(S * M * N, g.ws || 0) : null;
  prog.dispatch(
    tile ? `gemm_${BM}x${BN}` : 'gemm_reg',
    { a: g.a, b: g.b, c: split ? part : g.c, bias: split ? null : g.bias || null },
    tile ? gemmWGSL(tile) : regWGSL(REG),
    args,
    { alpha: split ? 1 : (g.alpha ?? 1) },
    [Math.ceil(N / BN), Math.ceil(M / BM), nb * S],
  );
  if (split) splitEpilogue(prog, part, g, S);
}

// C(m, n) = [C(m, n) +] (alpha * (p_0 + p_1 + ... + p_{S-1})(m, n) [+ bias[n]]), the partials added
// left to right: store_row's epilogue in store_row's order, over the in-order sum of the split.
function splitEpilogue(prog, p, g, S) {
  const { M, N } = g;
  prog.dispatch(
    'gemm_split_epilogue',
    { p, c: g.c, bias: g.bias || null },
    `@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
  let i = (${LINEAR_WG}) * 256u + li;
  if (i >= u.M * u.N) { return; }
  var v = ld_p(i);
  for (var s = 1u; s < u.S; s++) { v = v + ld_p(s * u.M * u.N + i); }
  v = v * u.alpha;
  let n = i % u.N;
  if ((u.flags & 1u) != 0u) { v = v + ld_bias(n); }
  let ci = (i / u.N) * u.ldc + n;
  if ((u.flags & 2u) != 0u) { v = ld_c(ci) + v; }
  st_c(ci, v);
}`,
    { M, N, S, ldc: g.ldc, flags: (g.bias ? 1 : 0) | (g.acc ? 2 : 0) },
    { alpha: g.alpha ?? 1 },
    grid1d(M * N, 256, prog.gpu.limits.maxComputeWorkgroupsPerDimension),
  );
}

/** Design of the tile a problem of this shape runs with (the bench's design table). */
export function gemmDesign(M, N, K, batch = 1) {
  const { BM, BN, TM } = tileFor(M, N, batch);
  const { S } = gemmSplit(M, N, K, batch);
  return {
    tile: `${BM}x${BN}x${BK}`,
    workgroup: `${BN / TN}x${BM / TM}`,
    perThread: `${TM}x${TN}`,
    sharedBytes: 16 * BK * (BM / 4 + 1 + BN / 4 + 1),
    vector: 'vec4 (workgroup memory, accumulators)',
    splitK: S,
  };
}
