// The WGSL data-movement, masking, pooling, loss and optimizer kernels (web/webgpu/ops.js) on the
// SwiftShader adapter against float64 transcriptions of their C references (kernels_ops_ref.c),
// on small edge shapes: repeated indices, masks, no index at all, sizes 1 and 3. Copies, gathers
// and scatters must be exact; sums within the parity rule; every run twice, the same bits.
// Needs an adapter (fails without).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { testGpu, Harness, rand, rel, sameBits, contractOf, gpuAndWasm } from './webgpu-util.mjs';
import * as ops from '../../web/webgpu/ops.js';
import { resampleTaps } from '../../web/webgpu/resample.js';
import { createVitrine } from '../../web/vitrine.js';
import { WASM_DIR } from './util.mjs';

let gpu, H, vt, contract;
const worstWasm = {}; // kernel -> the largest error against the wasm build (printed at the end)
before(async () => {
  gpu = await testGpu();
  H = new Harness(gpu);
  vt = await createVitrine({ wasm: 'simd', threads: 1, wasmDir: WASM_DIR });
  contract = contractOf(vt);
});
after(() => {
  console.log(
    '# WebGPU ops against the wasm build:',
    Object.entries(worstWasm)
      .map(([k, v]) => `${k} ${v.toExponential(1)}`)
      .join(', '),
  );
  gpu?.destroy();
  vt?.close();
});

const TOL = 1e-4;
const close = (name, got, want, tol = TOL) => {
  const e = rel(got, want);
  assert.ok(e <= tol, `${name}: error ${e.toExponential(2)}`);
};
const i64 = (vals) => {
  const a = new BigInt64Array(vals.length);
  vals.forEach((v, i) => {
    a[i] = BigInt(v);
  });
  return new Uint8Array(a.buffer);
};
const idxOf = (u8) => Array.from(new BigInt64Array(u8.buffer, u8.byteOffset, u8.byteLength / 8), Number);
// operands: f32 arrays as they are; 'i64:' / 'u8:' / 'i32:' prefixed names carry other types
// every call runs twice on fresh buffers: the same bits (reductions in a fixed order, chains)
async function run(arrays, call) {
  const once = () =>
    H.run(arrays, (p, o) => {
      const op = (n) => {
        if (n === null) return null;
        const x = o(n);
        if (n.startsWith('i64')) return { ...x, off: x.off / 8, len: x.len / 8, type: 'i64' };
        if (n.startsWith('i32')) return { ...x, off: x.off / 4, len: x.len / 4, type: 'i32' };
        return x;
      };
      call(p, op);
    });
  const a = await once(),
    b = await once();
  for (const k of Object.keys(arrays)) assert.ok(sameBits(a[k], b[k]), `${k}: the same bits twice`);
  return a;
}

test('copies, adds, LayerScale, row sums (strided, broadcast)', async () => {
  const rows = 5,
    cols = 3,
    dst = rand(rows * 7, 1),
    src = rand(rows * 4, 2);
  const r = await run({ dst, src, b: dst.slice() }, (p, o) => {
    ops.copy2d(p, { dst: o('dst'), src: o('src') }, { rows, cols, dst_stride: 7, src_stride: 4 });
    ops.add2d(p, { dst: o('b'), src: o('src') }, { rows, cols, dst_stride: 7, src_stride: 0 });
  });
  const c = dst.slice(),
    a = Float64Array.from(dst);
  for (let i = 0; i < rows; i++)
    for (let j = 0; j < cols; j++) {
      c[i * 7 + j] = src[i * 4 + j];
      a[i * 7 + j] += src[j];
    }
  assert.ok(sameBits(r.dst, c), 'copy2d exact');
  close('add2d', r.b, a);
  const M = 300,
    D = 3,
    x = rand(M * D, 3),
    g = rand(D, 4),
    y = rand(M * D, 5),
    dy = rand(M * D, 6);
  const q = await run(
    {
      x,
      g,
      y,
      dy,
      out: new Float32Array(M * D),
      db: new Float32Array(M * D),
      dg: rand(D, 7),
      s: rand(D, 8),
      ar: new Float32Array(M * D),
    },
    (p, o) => {
      ops.layerscale_forward(p, { out: o('out'), x: o('x'), g: o('g'), y: o('y') }, { M, D });
      ops.layerscale_backward(p, { dbranch: o('db'), dg: o('dg'), g: o('g'), dy: o('dy'), branch: o('y') }, { M, D });
      ops.sum_rows(p, { out: o('s'), x: o('x') }, { rows: M, n: D, stride: D });
      ops.add_rows(p, { out: o('ar'), x: o('x'), y: o('g') }, { rows: M, n: D, stride: D });
    },
  );
  const want = { out: [], db: [], dg: Array.from(rand(D, 7)), s: Array.from(rand(D, 8)), ar: [] };
  for (let m = 0; m < M; m++)
    for (let d = 0; d < D; d++) {
      const i = m * D + d;
      want.out[i] = x[i] + g[d] * y[i];
      want.db[i] = g[d] * dy[i];
      want.dg[d] += dy[i] * y[i];
      want.s[d] += x[i];
      want.ar[i] = x[i] + g[d];
    }
  for (const k of ['out', 'db', 'dg', 's', 'ar']) close(k, q[k], want[k]);
});

test('im2col and col2im_add (patch rows m0.., channels, image boundaries)', async () => {
  const B = 2,
    C = 3,
    p = 2,
    G = 3,
    S = 6,
    m0 = 4,
    n = 11,
    Kp = C * p * p;
  const images = rand(B * C * S * S, 9),
    dpatches = rand(n * Kp, 10),
    dimages = rand(B * C * S * S, 11);
  const r = await run({ images, patches: new Float32Array(n * Kp), dpatches, dimages }, (pr, o) => {
    ops.im2col(pr, { patches: o('patches'), images: o('images') }, { m0, n, C, S, p, G });
    ops.col2im_add(pr, { dimages: o('dimages'), dpatches: o('dpatches') }, { m0, n, C, S, p, G });
  });
  const patches = new Float32Array(n * Kp),
    di = Float64Array.from(dimages);
  for (let m = m0; m < m0 + n; m++) {
    const b = Math.floor(m / (G * G)),
      rr = Math.floor((m % (G * G)) / G),
      q = m % G;
    for (let c = 0; c < C; c++)
      for (let i = 0; i < p; i++)
        for (let j = 0; j < p; j++) {
          const at = ((b * C + c) * S + rr * p + i) * S + q * p + j,
            e = (m - m0) * Kp + (c * p + i) * p + j;
          patches[e] = images[at];
          di[at] += dpatches[e];
        }
  }
  assert.ok(sameBits(r.patches, patches), 'im2col exact');
  close('col2im_add', r.dimages, di);
});

const masked = (idx, mask, B, L, K) => {
  const m = new Uint8Array(B * L);
  for (let b = 0; b < B; b++) {
    if (idx) for (let k = 0; k < K; k++) m[b * L + idx[b * K + k]] = 1;
    else if (mask) for (let l = 0; l < L; l++) m[b * L + l] = mask[b * L + l] ? 1 : 0;
  }
  return m;
};

test('masking: mask_select, mask token, prefix and patch token gradients (idx with repeats, bytes, none)', async () => {
  const B = 2,
    L = 7,
    D = 3,
    K = 3,
    cls = 1,
    R = 2,
    P = cls + R;
  const idxv = [5, 1, 5, 0, 6, 3],
    maskv = Uint8Array.from([0, 1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 1, 0]);
  for (const mode of ['idx', 'mask', 'none']) {
    const idx = mode === 'idx' ? idxv : null,
      mask = mode === 'mask' ? maskv : null;
    const seq = rand(B * L * D, 12),
      mt = rand(D, 13),
      dseq = rand(B * L * D, 14);
    const arrays = {
      seq,
      mt,
      dseq,
      dmt: rand(D, 15),
      dcls: rand(D, 16),
      dreg: rand(R * D, 17),
      dtok: rand(B * (L - P) * D, 18),
    };
    if (idx) arrays.i64idx = i64(idx);
    if (mask) arrays.u8mask = mask;
    const r = await run(arrays, (p, o) => {
      const io = { idx: idx ? o('i64idx') : null, mask: mask ? o('u8mask') : null };
      ops.mask_select(p, { seq: o('seq'), mask_token: o('mt'), ...io }, { B, L, D, K });
      ops.mask_token_backward(p, { dmt: o('dmt'), dseq: o('dseq'), ...io }, { B, L, D, K });
      ops.prefix_tokens_backward(
        p,
        { dcls: o('dcls'), dreg: o('dreg'), dseq: o('dseq'), ...io },
        { B, L, D, K, cls, R },
      );
      ops.patch_tokens_backward(p, { dtok: o('dtok'), dseq: o('dseq'), ...io }, { B, L, D, K, P });
    });
    const m = masked(idx, mask, B, L, K);
    const ws = seq.slice(),
      dmt = Float64Array.from(rand(D, 15)),
      dcls = Float64Array.from(rand(D, 16));
    const dreg = Float64Array.from(rand(R * D, 17)),
      dtok = new Float32Array(B * (L - P) * D);
    for (let b = 0; b < B; b++)
      for (let l = 0; l < L; l++)
        for (let d = 0; d < D; d++) {
          const i = (b * L + l) * D + d;
          if (m[b * L + l]) {
            ws[i] = mt[d];
            dmt[d] += dseq[i];
          } else if (l === 0) dcls[d] += dseq[i];
          else if (l < P) dreg[(l - 1) * D + d] += dseq[i];
          if (l >= P) dtok[(b * (L - P) + l - P) * D + d] = m[b * L + l] ? 0 : dseq[i];
        }
    assert.ok(sameBits(r.seq, ws), `${mode}: mask_select exact`);
    assert.ok(sameBits(r.dtok, dtok), `${mode}: patch_tokens_backward exact`);
    close('mask_token_backward', r.dmt, dmt);
    close('prefix dcls', r.dcls, dcls);
    close('prefix dreg', r.dreg, dreg);
  }
});

test('rows by index: gather, scatter (last wins), scatter-add with repeats, except, sum at, layernorm rows', async () => {
  const B = 2,
    L = 5,
    K = 4,
    D = 3,
    Kx = 2,
    idx = [4, 0, 4, 4, 1, 2, 3, 1],
    except = [0, 3, 2, 2];
  const x = rand(B * L * D, 20),
    xk = rand(B * K * D, 21),
    out0 = rand(B * K * D, 22),
    big0 = rand(B * L * D, 23);
  const r = await run(
    {
      x,
      xk,
      i64idx: i64(idx),
      i64ex: i64(except),
      g: new Float32Array(B * K * D),
      sc: big0.slice(),
      sa: big0.slice(),
      ge: out0.slice(),
      at: rand(D, 24),
    },
    (p, o) => {
      const I = o('i64idx');
      ops.gather_rows(p, { out: o('g'), x: o('x'), idx: I }, { B, L, K, D });
      ops.scatter_rows(p, { out: o('sc'), x: o('xk'), idx: I }, { B, L, K, D });
      ops.scatter_add_rows(p, { out: o('sa'), x: o('xk'), idx: I }, { B, L, K, D });
      ops.gather_rows_except(p, { out: o('ge'), x: o('x'), idx: I, except: o('i64ex') }, { B, L, K, Kx, D });
      ops.sum_rows_at(p, { out: o('at'), x: o('x'), idx: I }, { B, L, K, D });
    },
  );
  const g = new Float32Array(B * K * D),
    sc = big0.slice(),
    sa = Float64Array.from(big0),
    ge = out0.slice();
  const at = Float64Array.from(rand(D, 24));
  for (let b = 0; b < B; b++)
    for (let k = 0; k < K; k++) {
      const l = idx[b * K + k],
        skip = except.slice(b * Kx, b * Kx + Kx).includes(l);
      for (let d = 0; d < D; d++) {
        g[(b * K + k) * D + d] = x[(b * L + l) * D + d];
        sc[(b * L + l) * D + d] = xk[(b * K + k) * D + d];
        sa[(b * L + l) * D + d] += xk[(b * K + k) * D + d];
        if (!skip) ge[(b * K + k) * D + d] = x[(b * L + l) * D + d];
        at[d] += x[(b * L + l) * D + d];
      }
    }
  assert.ok(sameBits(r.g, g) && sameBits(r.sc, sc) && sameBits(r.ge, ge), 'gathers and scatters exact');
  close('scatter_add_rows', r.sa, sa);
  close('sum_rows_at', r.at, at);
  // layernorm_backward_rows: the rows idx (repeated rows accumulate in order)
  const Dn = 67,
    inp = rand(B * L * Dn, 25, 2),
    w = rand(Dn, 26),
    dout = rand(B * K * Dn, 27);
  const mean = new Float32Array(B * L),
    rstd = new Float32Array(B * L);
  for (let row = 0; row < B * L; row++) {
    let s = 0,
      v = 0;
    for (let i = 0; i < Dn; i++) s += inp[row * Dn + i];
    mean[row] = s / Dn;
    for (let i = 0; i < Dn; i++) v += (inp[row * Dn + i] - mean[row]) ** 2;
    rstd[row] = 1 / Math.sqrt(v / Dn + 1e-6);
  }
  const di0 = rand(B * L * Dn, 28, 0.1);
  const q = await run(
    { inp, w, dout, mean, rstd, i64idx: i64(idx), di: di0, dw: new Float32Array(Dn), db: new Float32Array(Dn) },
    (p, o) =>
      ops.layernorm_backward_rows(
        p,
        {
          dinp: o('di'),
          dw: o('dw'),
          db: o('db'),
          dout: o('dout'),
          inp: o('inp'),
          w: o('w'),
          mean: o('mean'),
          rstd: o('rstd'),
          idx: o('i64idx'),
        },
        { B, L, K, D: Dn },
      ),
  );
  const di = Float64Array.from(di0),
    dw = new Float64Array(Dn),
    db = new Float64Array(Dn);
  for (let b = 0; b < B; b++)
    for (let k = 0; k < K; k++) {
      const row = b * L + idx[b * K + k],
        go = (b * K + k) * Dn;
      let a = 0,
        c = 0;
      const n = (i) => (inp[row * Dn + i] - mean[row]) * rstd[row];
      for (let i = 0; i < Dn; i++) {
        const dn = w[i] * dout[go + i];
        a += dn;
        c += dn * n(i);
        dw[i] += n(i) * dout[go + i];
        db[i] += dout[go + i];
      }
      for (let i = 0; i < Dn; i++) di[row * Dn + i] += (w[i] * dout[go + i] - a / Dn - (n(i) * c) / Dn) * rstd[row];
    }
  close('layernorm_backward_rows dinp', q.di, di);
  close('layernorm_backward_rows dw', q.dw, dw);
  close('layernorm_backward_rows db', q.db, db);
});

test('pooling forward and backward: token, avg, max (ties share), avgmax; assign', async () => {
  const B = 2,
    T = 6,
    D = 3,
    P = 1;
  const x = rand(B * T * D, 30);
  x[(0 * T + 2) * D + 1] = x[(0 * T + 4) * D + 1] = 5; // a tie for the max
  const dy = rand(B * D, 31);
  for (const kind of [0, 1, 2, 3])
    for (const assign of kind === 2 || kind === 3 ? [0] : [0, 1]) {
      const dx0 = rand(B * T * D, 32);
      const r = await run({ x, dy, y: new Float32Array(B * D), dx: dx0 }, (p, o) => {
        ops.pool_forward(p, { y: o('y'), x: o('x') }, { B, T, D, P, kind });
        ops.pool_backward(p, { dx: o('dx'), dy: o('dy'), x: o('x') }, { B, T, D, P, kind, assign });
      });
      const y = new Float64Array(B * D),
        dx = Float64Array.from(dx0);
      for (let b = 0; b < B; b++)
        for (let d = 0; d < D; d++) {
          const col = Array.from({ length: T - P }, (_, t) => x[(b * T + P + t) * D + d]);
          const avg = col.reduce((s, v) => s + v, 0) / (T - P),
            mx = Math.max(...col),
            g = dy[b * D + d];
          y[b * D + d] = kind === 0 ? x[b * T * D + d] : kind === 1 ? avg : kind === 2 ? mx : 0.5 * (mx + avg);
          if (kind === 0) {
            dx[b * T * D + d] = assign ? g : dx[b * T * D + d] + g;
            continue;
          }
          const ties = col.filter((v) => v === mx).length;
          for (let t = P; t < T; t++) {
            const at = (b * T + t) * D + d,
              v = x[at];
            if (assign) {
              dx[at] = g / (T - P);
              continue;
            }
            const ga = kind === 1 ? g / (T - P) : kind === 3 ? (0.5 * g) / (T - P) : 0;
            const gm = kind === 1 ? 0 : (kind === 3 ? 0.5 * g : g) / ties;
            dx[at] += ga + (v === mx ? gm : 0);
          }
        }
      close(`pool_forward ${kind}`, r.y, y);
      close(`pool_backward ${kind} ${assign}`, r.dx, dx);
    }
});

test('MAE / AIM targets (norm_pix, repeated and absent idx) and their backward; MSE; cross-entropy', async () => {
  const B = 2,
    C = 3,
    p = 2,
    G = 3,
    S = 6,
    O = C * p * p,
    offset = 1;
  const images = rand(B * C * S * S, 40);
  const pix = (n, e) => {
    const rr = Math.floor(n / G),
      q = n % G,
      c = e % C,
      px = Math.floor(e / C) % p,
      py = Math.floor(e / C / p);
    return (c * S + rr * p + py) * S + q * p + px;
  };
  for (const [idx, K] of [
    [[3, 1, 9, 9, 5, 2], 3],
    [null, G * G],
  ]) {
    for (const norm_pix of [0, 1]) {
      const dpred = rand(B * K * O, 41),
        di0 = rand(B * C * S * S, 42);
      const arrays = {
        images,
        tgt: new Float32Array(B * K * O),
        trs: new Float32Array(B * K),
        dpred,
        dt: new Float32Array(B * K * O),
        di: di0,
        recon: images.slice(),
        masked: images.slice(),
      };
      if (idx) arrays.i64idx = i64(idx);
      const r = await run(arrays, (pr, o) => {
        const I = idx ? o('i64idx') : null,
          a = { B, K, C, S, p, G, offset, norm_pix };
        ops.patch_targets(pr, { tgt: o('tgt'), trs: norm_pix ? o('trs') : null, images: o('images'), idx: I }, a);
        ops.targets_backward(
          pr,
          { dimages: o('di'), dt: o('dt'), dpred: o('dpred'), tgt: o('tgt'), trs: o('trs'), idx: I },
          a,
        );
        ops.unpatchify(
          pr,
          { recon: o('recon'), masked: o('masked'), pred: o('dpred'), images: o('images'), idx: I },
          a,
        );
      });
      const tgt = new Float64Array(B * K * O),
        trs = new Float64Array(B * K),
        di = Float64Array.from(di0);
      const recon = Float64Array.from(images),
        msk = Float64Array.from(images);
      for (let b = 0; b < B; b++)
        for (let j = 0; j < K; j++) {
          const row = b * K + j,
            n = idx ? idx[row] - offset : j,
            t = [];
          for (let e = 0; e < O; e++) t.push(images[b * C * S * S + pix(n, e)]);
          let rs = 1,
            y = t;
          if (norm_pix) {
            const mu = t.reduce((s, v) => s + v, 0) / O,
              v = t.reduce((s, x) => s + (x - mu) ** 2, 0) / (O - 1);
            rs = 1 / Math.sqrt(v + 1e-6);
            y = t.map((x) => (x - mu) * rs);
          }
          tgt.set(y, row * O);
          trs[row] = rs;
          let d = Array.from(dpred.subarray(row * O, row * O + O), (v) => -v);
          if (norm_pix) {
            const md = d.reduce((s, v) => s + v, 0) / O,
              c = d.reduce((s, v, e) => s + v * y[e], 0) / (O - 1);
            d = d.map((v, e) => rs * (v - md - y[e] * c));
          }
          d.forEach((v, e) => {
            di[b * C * S * S + pix(n, e)] += v;
          });
          const mu = t.reduce((s, v) => s + v, 0) / O,
            sd = Math.sqrt(t.reduce((s, x) => s + (x - mu) ** 2, 0) / (O - 1) + 1e-6);
          for (let e = 0; e < O; e++) {
            const at = b * C * S * S + pix(n, e),
              v = dpred[row * O + e];
            recon[at] = norm_pix ? v * sd + mu : v;
            msk[at] = 0;
          }
        }
      close(`patch_targets ${norm_pix}`, r.tgt, tgt);
      if (norm_pix) close('trs', r.trs, trs);
      close(`targets_backward ${norm_pix}`, r.di, di);
      close(`unpatchify ${norm_pix}`, r.recon, recon);
      assert.ok(sameBits(r.masked, Float32Array.from(msk)), 'unpatchify: masked patches zeroed');
    }
  }
  // MSE over more than one reduction chunk; cross-entropy with label smoothing
  const n = 9001,
    pred = rand(n, 43),
    tgt = rand(n, 44);
  const Bc = 3,
    Cc = 5,
    logits = rand(Bc * Cc, 45, 4),
    labels = new Int32Array([4, 0, 2]);
  const r = await run(
    {
      pred,
      tgt,
      loss: new Float32Array(1),
      dloss: Float32Array.of(0.5),
      dpred: new Float32Array(n),
      logits,
      i32lab: new Uint8Array(labels.buffer),
      logp: new Float32Array(Bc * Cc),
      ce: new Float32Array(1),
      dl: new Float32Array(Bc * Cc),
    },
    (p, o) => {
      ops.mse_forward(p, { loss: o('loss'), pred: o('pred'), tgt: o('tgt') }, { n });
      ops.mse_backward(p, { dpred: o('dpred'), pred: o('pred'), tgt: o('tgt'), dloss: o('dloss') }, { n });
      ops.cross_entropy_forward(
        p,
        { logp: o('logp'), loss: o('ce'), logits: o('logits'), labels: o('i32lab') },
        { B: Bc, C: Cc },
        { smoothing: 0.1 },
      );
      ops.cross_entropy_backward(
        p,
        { dlogits: o('dl'), logp: o('logp'), labels: o('i32lab'), dloss: o('dloss') },
        { B: Bc, C: Cc },
        { smoothing: 0.1 },
      );
    },
  );
  let s = 0;
  for (let i = 0; i < n; i++) s += (pred[i] - tgt[i]) ** 2;
  close('mse', r.loss, [s / n]);
  close(
    'mse_backward',
    r.dpred,
    Array.from(pred, (v, i) => ((2 * 0.5) / n) * (v - tgt[i])),
  );
  let total = 0;
  const logp = [],
    dl = [];
  for (let b = 0; b < Bc; b++) {
    const z = Array.from(logits.subarray(b * Cc, b * Cc + Cc)),
      mx = Math.max(...z);
    const lse = mx + Math.log(z.reduce((a, v) => a + Math.exp(v - mx), 0)),
      lp = z.map((v) => v - lse);
    logp.push(...lp);
    total += 0.9 * -lp[labels[b]] + 0.1 * -(lp.reduce((a, v) => a + v, 0) / Cc);
    lp.forEach((v, c) => dl.push((0.5 / Bc) * (Math.exp(v) - ((c === labels[b] ? 0.9 : 0) + 0.1 / Cc))));
  }
  close('log_softmax', r.logp, logp);
  close('cross_entropy', r.ce, [total / Bc]);
  close('cross_entropy_backward', r.dl, dl);
});

test('gradient norm, clipping, the non-finite flag, AdamW from buffers (skipped when flagged)', async () => {
  const n = 10000,
    g = rand(n, 50, 3);
  const norm = Math.sqrt(g.reduce((s, v) => s + v * v, 0));
  const p0 = rand(n, 51),
    m0 = rand(n, 52, 0.01),
    v0 = rand(n, 53, 0.01).map(Math.abs);
  const r = await run(
    {
      g,
      norm: new Float32Array(2),
      flag: new Float32Array(1),
      bad: Float32Array.of(1, NaN, 2),
      flag2: new Float32Array(1),
      p: p0,
      m: m0,
      v: v0,
      lr: Float32Array.of(1e-3),
      step: Float32Array.of(3),
      q: p0.slice(),
      qm: m0.slice(),
      qv: v0.slice(),
      one: Float32Array.of(1),
    },
    (pr, o) => {
      ops.grad_norm(pr, { norm: { ...o('norm'), len: 1, type: 'f64', off: o('norm').off / 2 }, g: o('g') }, { n });
      ops.check_finite(pr, { flag: o('flag'), x: o('g') }, { n });
      ops.check_finite(pr, { flag: o('flag2'), x: o('bad') }, { n: 3 });
      ops.clip_grads(
        pr,
        { g: o('g'), norm: { ...o('norm'), len: 1, type: 'f64', off: o('norm').off / 2 } },
        { n },
        { max_norm: 1 },
      );
      const a = { b1: 0.9, b2: 0.999, eps: 1e-8, wd: 0.05 };
      ops.adamw(
        pr,
        { p: o('p'), m: o('m'), v: o('v'), g: o('g'), lr: o('lr'), step: o('step'), flag: o('flag') },
        { n },
        a,
      );
      ops.adamw(
        pr,
        { p: o('q'), m: o('qm'), v: o('qv'), g: o('g'), lr: o('lr'), step: o('step'), flag: o('one') },
        { n },
        a,
      );
    },
  );
  close('grad_norm', [r.norm[0]], [norm]);
  assert.equal(r.flag[0], 0);
  assert.equal(r.flag2[0], 1);
  const coef = 1 / (norm + 1e-6),
    gc = Array.from(g, (v) => v * coef);
  close('clip_grads', r.g, gc);
  const want = { p: [], m: [], v: [] };
  for (let i = 0; i < n; i++) {
    want.m[i] = 0.9 * m0[i] + 0.1 * gc[i];
    want.v[i] = 0.999 * v0[i] + 0.001 * gc[i] * gc[i];
    want.p[i] =
      p0[i] * (1 - 1e-3 * 0.05) -
      ((1e-3 / (1 - 0.9 ** 3)) * want.m[i]) / (Math.sqrt(want.v[i]) / Math.sqrt(1 - 0.999 ** 3) + 1e-8);
  }
  close('adamw m', r.m, want.m);
  close('adamw v', r.v, want.v);
  close('adamw p', r.p, want.p, 1e-6);
  assert.ok(sameBits(r.q, p0) && sameBits(r.qm, m0) && sameBits(r.qv, v0), 'a flagged step changes nothing');
});

// reduce.js: a whole-vector sum is passes of in-order column sums (one pass up to 256 elements,
// three past 65536), a column sum chunks of 64 rows added in chunk order: no barriers, one order
test('whole-vector and column sums at every pass count: float64 within the rule, the same bits twice', async () => {
  for (const n of [1, 256, 257, 65537, 70001]) {
    const g = rand(n, 60 + n, 2);
    const r = await run(
      { g, norm: new Float32Array(2), loss: new Float32Array(1), tgt: new Float32Array(n) },
      (p, o) => {
        ops.grad_norm(p, { norm: { ...o('norm'), len: 1, type: 'f64', off: o('norm').off / 2 }, g: o('g') }, { n });
        ops.mse_forward(p, { loss: o('loss'), pred: o('g'), tgt: o('tgt') }, { n });
      },
    );
    const ss = g.reduce((s, v) => s + v * v, 0);
    close(`grad_norm of ${n}`, [r.norm[0]], [Math.sqrt(ss)]);
    close(`mse of ${n}`, r.loss, [ss / n]);
  }
  for (const rows of [1, 64, 65, 1000]) {
    const n = 70,
      x = rand(rows * n, rows, 1),
      out0 = rand(n, 7);
    const r = await run({ x, out: out0 }, (p, o) =>
      ops.sum_rows(p, { out: o('out'), x: o('x') }, { rows, n, stride: n }),
    );
    const want = Float64Array.from(out0);
    for (let m = 0; m < rows; m++) for (let j = 0; j < n; j++) want[j] += x[m * n + j];
    close(`sum_rows of ${rows}`, r.out, want);
  }
});

// ---- the kernels of timm's ViT options, against the wasm build's (the CPU's kernels) ----------------

// kernel `name` on the GPU (both runs the same bits, inputs untouched) and on wasm: every output
// within the parity rule of wasm's (exact: the same bits)
async function vsWasm(name, arrays, bind, ints, floats, outputs, exact = false) {
  const { gpu: g, wasm: w } = await gpuAndWasm(H, vt, contract, name, arrays, bind, ints, floats, outputs);
  for (const k of outputs) {
    const e = rel(g[k], w[k]);
    worstWasm[name] = Math.max(worstWasm[name] || 0, e);
    if (exact) assert.ok(sameBits(g[k], w[k]), `${name}: ${k} is not wasm's bits`);
    assert.ok(e <= TOL, `${name}: ${k} error ${e.toExponential(2)}`);
  }
  return g;
}

test('im2col_hw and col2im_add_hw against wasm: padded and floored grids, non-square, rows m0.., one pixel, none', async () => {
  // [B, C, H, W, p, Gh, Gw, m0]: dynamic_img_pad (the grid past the image), timm's floor (pixels
  // past the grid), a 1 x 1 image
  for (const [B, C, Hh, W, p, Gh, Gw, m0] of [
    [2, 3, 7, 5, 2, 4, 3, 3],
    [2, 3, 7, 5, 2, 3, 2, 1],
    [1, 2, 16, 24, 4, 4, 6, 0],
    [1, 1, 1, 1, 1, 1, 1, 0],
  ]) {
    const rows = B * Gh * Gw,
      Kp = C * p * p;
    for (const n of [rows - m0, 1, 0]) {
      const ints = { m0, n, C, H: Hh, W, p, Gh, Gw },
        images = rand(B * C * Hh * W, 1),
        np = Math.max(n, 1) * Kp;
      const r = await vsWasm(
        'im2col_hw',
        { images, patches: rand(np, 2) },
        { patches: 'patches', images: 'images' },
        ints,
        {},
        n ? ['patches'] : [],
        true,
      );
      if (n === rows - m0 && Gh * p > Hh)
        assert.ok(
          r.patches.some((v) => v === 0),
          'padding reads as 0',
        );
      await vsWasm(
        'col2im_add_hw',
        { dimages: rand(B * C * Hh * W, 3), dpatches: rand(np, 4) },
        { dimages: 'dimages', dpatches: 'dpatches' },
        ints,
        {},
        n ? ['dimages'] : [],
        true,
      );
    }
  }
});

test('resample_aa forward and backward against wasm: up, down, same size, from / to one, many taps, none', async () => {
  // the host's taps are the C reference's: every output's weights sum to 1 (within float32)
  for (const [a, b] of [
    [7, 3],
    [14, 16],
    [37, 7],
  ])
    for (let y = 0; y < b; y++) {
      const { w } = resampleTaps(a, b, y);
      assert.ok(Math.abs(w.reduce((s, v) => s + v, 0) - 1) < 1e-6, `${a} -> ${b}, output ${y}`);
    }
  // [outer, n_in, n_out, inner]: pos_embed grids resized along the width (inner D) or the height
  for (const [outer, nIn, nOut, inner] of [
    [1, 3, 5, 1],
    [2, 7, 3, 3],
    [1, 4, 4, 2],
    [3, 1, 3, 1],
    [1, 3, 1, 4],
    [2, 14, 16, 70],
    [1, 16, 14, 5],
    [1, 37, 7, 1],
    [0, 3, 5, 2],
  ]) {
    const o = Math.max(outer, 1),
      ints = { outer, n_in: nIn, n_out: nOut, inner };
    await vsWasm(
      'resample_aa_forward',
      { inp: rand(o * nIn * inner, 1), out: rand(o * nOut * inner, 2) },
      { out: 'out', inp: 'inp' },
      ints,
      {},
      outer ? ['out'] : [],
    );
    await vsWasm(
      'resample_aa_backward',
      { dinp: rand(o * nIn * inner, 3, 0.5), dout: rand(o * nOut * inner, 4) },
      { dinp: 'dinp', dout: 'dout' },
      ints,
      {},
      outer ? ['dinp'] : [],
    );
  }
});

test('add_scaled against wasm: n 0, 1, 3, 257, 1000', async () => {
  for (const n of [1, 3, 257, 1000])
    for (const alpha of [0.5, -1.25])
      await vsWasm(
        'add_scaled',
        { dst: rand(n, n), src: rand(n, n + 1) },
        { dst: 'dst', src: 'src' },
        { n },
        { alpha },
        ['dst'],
      );
  await vsWasm(
    'add_scaled',
    { dst: rand(4, 1), src: rand(4, 2) },
    { dst: 'dst', src: 'src' },
    { n: 0 },
    { alpha: 2 },
    [],
  );
});

test("transpose: B strided R x C matrices (timm's NCHW intermediates and their gradients), exact", async () => {
  const B = 2,
    R = 5,
    C = 3,
    P = 2;
  const sbs = (R + P) * C,
    dbs = C * R + 4;
  const src = rand(B * sbs, 7),
    dst = rand(B * dbs, 8);
  const r = await run({ dst, src }, (p, o) =>
    ops.transpose(p, { dst: o('dst'), src: o('src') }, { B, R, C, dst_bs: dbs, dst_rs: R, src_bs: sbs, src_rs: C }),
  );
  const want = dst.slice();
  for (let b = 0; b < B; b++)
    for (let i = 0; i < R; i++) for (let j = 0; j < C; j++) want[b * dbs + j * R + i] = src[b * sbs + i * C + j];
  assert.ok(sameBits(r.dst, want), 'transpose exact, the gaps untouched');
});
