// timm.test.mjs: issue 12 through the WebAssembly builds: the MLP hidden size as Python computes it,
// timm's forward (pool -> fc_norm -> head), idx_keep with repeated indices, parity dumps of a
// failing file, size mismatches explained. (test_timm.c checks the same natively.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { simdSupported } from '../../web/vitrine.js';
import { engine, readSafetensors, relErr } from './util.mjs';

const BUILD = simdSupported() ? 'simd' : 'scalar';

// A seeded normal-ish fill (sum of uniforms), enough for test data.
function fill(n, seed) {
  let s = seed >>> 0;
  const u = () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296;
  };
  return Float32Array.from({ length: n }, () => u() + u() + u() - 1.5);
}

// safetensors bytes of F32 tensors [{ name, shape, data }] and string metadata
export function writeSafetensors(tensors, meta) {
  const header = { __metadata__: meta };
  let off = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: 'F32', shape: t.shape, data_offsets: [off, off + 4 * t.data.length] };
    off += 4 * t.data.length;
  }
  let json = JSON.stringify(header);
  while ((8 + json.length) % 8) json += ' ';
  const hb = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + hb.length + off);
  new DataView(out.buffer).setBigUint64(0, BigInt(hb.length), true);
  out.set(hb, 8);
  let p = 8 + hb.length;
  for (const t of tensors) {
    out.set(new Uint8Array(t.data.buffer, t.data.byteOffset, 4 * t.data.length), p);
    p += 4 * t.data.length;
  }
  return out;
}

const TINY = { img_size: 8, patch_size: 4, embed_dim: 8, depth: 2, num_heads: 2, mlp_ratio: 2.0 };

function randomize(model, seed) {
  model.params().forEach((p, i) => {
    const d = p.data;
    d.set(
      fill(p.numel, seed + i).map((v) => (p.shape.length === 1 && p.name.endsWith('weight') ? 1 + 0.2 * v : 0.3 * v)),
    );
  });
}

test('MLP hidden size: int(dim * ratio) in double, for the encoder, the MAE decoder and the AIM head', async () => {
  const vt = await engine(BUILD);
  const rows = (m, name) => m.params().find((p) => p.name === name).shape[0];
  let m = vt.createModel({
    kind: 'timm',
    config: { ...TINY, embed_dim: 15, num_heads: 3, mlp_ratio: 4.2, num_classes: 0 },
  });
  assert.equal(rows(m, 'blocks.0.mlp.fc1.weight'), Math.trunc(15 * 4.2));
  assert.equal(rows(m, 'blocks.0.mlp.fc1.weight'), 63);
  m.dispose();
  m = vt.createModel({
    kind: 'mae',
    config: {
      encoder: { ...TINY, num_classes: 0 },
      decoder_dim: 25,
      decoder_depth: 1,
      decoder_heads: 5,
      decoder_mlp_ratio: 1.16,
    },
  });
  assert.equal(rows(m, 'decoder.blocks.0.mlp.fc1.weight'), 28);
  m.dispose();
  m = vt.createModel({
    kind: 'aim',
    config: {
      encoder: { ...TINY, class_token: false, no_embed_class: true, global_pool: 'avg', num_classes: 0 },
      head_hidden_dim: 15,
      head_blocks: 1,
      head_mlp_ratio: 4.2,
    },
  });
  assert.equal(rows(m, 'projection_head.blocks.1.mlp.fc1.weight'), 63);
  m.dispose();
  // many pairs: JavaScript numbers are doubles, as Python's floats
  for (let dim = 1; dim <= 64; dim += 7)
    for (let k = 1; k <= 800; k += 13) {
      const ratio = Number((k / 100).toFixed(2));
      if (Math.trunc(dim * 2 * ratio) < 1) continue;
      const c = vt.createModel({
        kind: 'timm',
        config: { ...TINY, embed_dim: dim * 2, num_heads: 2, depth: 1, mlp_ratio: ratio, num_classes: 0 },
      });
      assert.equal(rows(c, 'blocks.0.mlp.fc1.weight'), Math.trunc(dim * 2 * ratio), `dim ${dim * 2} ratio ${ratio}`);
      c.dispose();
    }
});

test("timm's forward: pool -> fc_norm -> head on forward_features, every pooling", async () => {
  const vt = await engine(BUILD);
  const B = 2,
    images = fill(B * 3 * 8 * 8, 5);
  for (const pool of ['token', 'avg', 'max', 'avgmax', ''])
    for (const C of [0, 3]) {
      const m = vt.createModel({ kind: 'timm', config: { ...TINY, reg_tokens: 1, global_pool: pool, num_classes: C } });
      randomize(m, 40);
      const P = Object.fromEntries(m.params().map((p) => [p.name, p.data.slice()]));
      const f = m.encode(images);
      const [, T, D] = f.shape,
        Pn = 2;
      const rows = pool ? B : B * T;
      const pooled = [];
      for (let r = 0; r < rows; r++) {
        const v = new Float64Array(D);
        for (let d = 0; d < D; d++) {
          if (!pool) {
            v[d] = f.data[r * D + d];
            continue;
          }
          const x = (t) => f.data[(r * T + t) * D + d];
          if (pool === 'token') {
            v[d] = x(0);
            continue;
          }
          let s = 0,
            mx = -Infinity;
          for (let t = Pn; t < T; t++) {
            s += x(t);
            mx = Math.max(mx, x(t));
          }
          const avg = s / (T - Pn);
          v[d] = pool === 'avg' ? avg : pool === 'max' ? mx : 0.5 * (mx + avg);
        }
        if (['avg', 'max', 'avgmax'].includes(pool)) {
          // fc_norm
          const mu = v.reduce((a, b) => a + b) / D,
            va = v.reduce((a, b) => a + (b - mu) ** 2, 0) / D;
          for (let d = 0; d < D; d++)
            v[d] = ((v[d] - mu) / Math.sqrt(va + 1e-6)) * P['fc_norm.weight'][d] + P['fc_norm.bias'][d];
        }
        if (C) {
          const y = new Float64Array(C);
          for (let k = 0; k < C; k++) {
            y[k] = P['head.bias'][k];
            for (let d = 0; d < D; d++) y[k] += P['head.weight'][k * D + d] * v[d];
          }
          pooled.push(...y);
        } else pooled.push(...v);
      }
      const out = m.timmForward(images, { needGrad: true });
      const W = C || D;
      assert.deepEqual(out.shape, pool ? [B, W] : [B, T, W], `pool '${pool}' C ${C}`);
      assert.ok(
        relErr(out.data, Float64Array.from(pooled)) < 1e-5,
        `pool '${pool}' C ${C}: ${relErr(out.data, pooled)}`,
      );
      const { dimages } = m.backward({ douts: [fill(out.data.length, 9)], inputGrad: true });
      assert.ok(dimages.some((v) => v !== 0));
      m.dispose();
    }
});

test('idx_keep with repeated indices: a gather; gradients of a repeated token add up', async () => {
  const vt = await engine(BUILD);
  const m = vt.createModel({ kind: 'lightly', config: { ...TINY, depth: 0, num_classes: 0 } });
  randomize(m, 3);
  const images = fill(2 * 3 * 8 * 8, 11),
    keep = [
      [0, 3, 3, 1, 0, 3, 2],
      [4, 4, 4, 0, 1, 2, 4],
    ];
  const full = m.encode(images, { needGrad: true });
  const [, L, D] = full.shape,
    K = 7;
  const dout = fill(2 * K * D, 12),
    dfull = new Float32Array(2 * L * D);
  keep.forEach((row, b) =>
    row.forEach((l, k) => {
      for (let d = 0; d < D; d++) dfull[(b * L + l) * D + d] += dout[(b * K + k) * D + d];
    }),
  );
  const ref = m.backward({ douts: [dfull], inputGrad: true }).dimages;
  const y = m.encode(images, { idxKeep: keep, needGrad: true });
  assert.deepEqual(y.shape, [2, K, D]);
  keep.forEach((row, b) =>
    row.forEach((l, k) =>
      assert.deepEqual(
        y.data.subarray((b * K + k) * D, (b * K + k + 1) * D),
        full.data.subarray((b * L + l) * D, (b * L + l + 1) * D),
      ),
    ),
  );
  const got = m.backward({ douts: [dout], inputGrad: true }).dimages;
  assert.ok(relErr(got, ref) < 1e-5, `dimages off the scatter-add reference: ${relErr(got, ref)}`);
  // idx_mask stays a scatter: repeats are refused
  assert.throws(
    () =>
      m.encode(images, {
        idxMask: [
          [1, 1],
          [2, 3],
        ],
      }),
    /repeats/,
  );
  m.dispose();
});

test('parity: a failing file still dumps what was computed; a size mismatch names output, shapes, cause', async () => {
  const vt = await engine(BUILD);
  const B = 2,
    images = fill(B * 3 * 8 * 8, 21);
  const cfg = { ...TINY, global_pool: 'avg', num_classes: 3 };
  const m = vt.createModel({ kind: 'timm', config: cfg });
  randomize(m, 7);
  const out = m.timmForward(images);
  const params = m.params().map((p) => ({ name: `param/${p.name}`, shape: p.shape, data: p.data.slice() }));
  const meta = {
    format: 'vitrine-parity/1',
    module: 'timm.VisionTransformer',
    config: JSON.stringify(cfg),
    call: '{"fn": "forward"}',
  };
  const file = (expect) =>
    writeSafetensors([...params, { name: 'input/images', shape: [B, 3, 8, 8], data: images }, expect], meta);
  let r = vt.parity(file({ name: 'expect/out', shape: [B, 3], data: out.data }), { dump: true });
  assert.equal(r.pass, true, r.error);
  const wrong = out.data.slice();
  wrong[0] += 1;
  r = vt.parity(file({ name: 'expect/out', shape: [B, 3], data: wrong }), { dump: true });
  assert.equal(r.pass, false);
  assert.ok(r.dump && readSafetensors(r.dump).tensors.out, 'no dump of a failing file');
  r = vt.parity(file({ name: 'expect/out', shape: [B, 8], data: new Float32Array(B * 8) }), { dump: true });
  assert.equal(r.pass, false);
  assert.match(r.error, /'out'.*\[2, 3\].*\[2, 8\].*no classifier head/);
  assert.ok(r.dump && readSafetensors(r.dump).tensors.out, 'no dump of a mismatched file');
  m.dispose();
});
