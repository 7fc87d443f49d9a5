// errors.test.mjs: one vocabulary of VitrineError.code for the engine's failures and those the
// shell finds itself (the names of src/status.h), and web/vitrine.d.ts declaring what
// web/vitrine.js exports.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import * as shell from '../../web/vitrine.js';
import { withMetadata } from '../../web/formats/safetensors.js';
import { REPO, engine, fixture } from './util.mjs';

const { VitrineError, STATUS_CODES, readSafetensorsHeader, readSafetensorsMeta } = shell;

test('STATUS_CODES are the names and values of vt_status in src/status.h', () => {
  const h = readFileSync(path.join(REPO, 'src/status.h'), 'utf8');
  const body = /typedef enum \{([\s\S]*?)\} vt_status;/.exec(h)[1];
  const fromC = Object.fromEntries(
    [...body.matchAll(/\b(VT_ERR_\w+)\s*=\s*(-\d+)/g)].map(([, name, v]) => [Number(v), name]),
  );
  assert.ok(Object.keys(fromC).length >= 8);
  assert.deepEqual({ ...STATUS_CODES }, fromC);
});

test('engine failures and shell-found failures carry the same codes', async () => {
  const vt = await engine('simd');
  const is = (fn, status) =>
    assert.throws(fn, (e) => {
      assert.ok(e instanceof VitrineError, String(e));
      assert.equal(e.status, status);
      assert.equal(e.code, STATUS_CODES[status]);
      return true;
    });
  is(() => vt.createModel({ preset: 'vit_huge_patch99' }), -1); // the engine: bad argument
  is(() => vt.createModel({ kind: 'resnet' }), -1); // the shell: bad argument
  const m = vt.createModel({
    kind: 'mae',
    config: {
      encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 1, num_heads: 2 },
      decoder_dim: 16,
      decoder_depth: 1,
      decoder_heads: 2,
    },
  });
  is(() => m.loadSafetensors(new Uint8Array([1, 2, 3])), -3); // the engine: bad file format
  is(() => readSafetensorsMeta(new Uint8Array([1, 2, 3])), -3); // the shell: bad file format
  is(() => m.backward(), -7); // the shell: bad state
  m.initWeights(1);
  m.trainerInit();
  is(() => m.trainStep(new Float32Array(784).fill(NaN)), -5); // the engine: non-finite
  m.dispose();
  assert.equal(new VitrineError('x', -99).code, 'VT_ERR_UNKNOWN');
});

test('one safetensors header reader: metadata added by withMetadata read back, tensors untouched', () => {
  const bytes = new Uint8Array(fixture('vit_encode.safetensors'));
  const before = readSafetensorsHeader(bytes);
  const out = withMetadata(bytes, { run: { a: 1 }, note: 'x' });
  const after = readSafetensorsHeader(out);
  assert.equal((8 + after.length) % 8, 0);
  assert.deepEqual(readSafetensorsMeta(out), { ...readSafetensorsMeta(bytes), run: '{"a":1}', note: 'x' });
  const data = (u8, h) => u8.subarray(8 + h.length);
  assert.ok(Buffer.from(data(out, after)).equals(Buffer.from(data(bytes, before))));
  for (const bad of [
    new Uint8Array(7),
    Uint8Array.from([255, 0, 0, 0, 0, 0, 0, 0, 123]),
    Uint8Array.from([1, 0, 0, 0, 0, 0, 0, 0, 91]),
  ])
    assert.throws(
      () => readSafetensorsHeader(bad),
      (e) => e instanceof VitrineError && e.code === 'VT_ERR_FORMAT',
    );
});

test('web/vitrine.d.ts declares every export of web/vitrine.js, and the codes', () => {
  const dts = readFileSync(path.join(REPO, 'web/vitrine.d.ts'), 'utf8');
  const declared = new Set(
    [...dts.matchAll(/^export (?:declare )?(?:function|class|const|let) (\w+)/gm)].map((m) => m[1]),
  );
  assert.deepEqual([...declared].sort(), Object.keys(shell).sort());
  const union = /export type StatusCode =([^;]*);/.exec(dts)[1];
  assert.deepEqual(
    [...union.matchAll(/'(\w+)'/g)].map((m) => m[1]).sort(),
    [...Object.values(STATUS_CODES), 'VT_ERR_UNKNOWN'].sort(),
  );
});
