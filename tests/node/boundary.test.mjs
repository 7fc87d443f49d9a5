// boundary.test.mjs: the wasm/JS boundary stated once, in C (wasm/exports.c). Every build exports
// exactly the functions marked VTW_API (wasm.cmake reads the marker; the shell finds them on the
// instance); every result layout vtw_manifest describes is a whole, unambiguous array; the names
// the engine offers are the names it reads (each policy parses, each kind builds, each call plans).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { REPO, BUILDS, engine } from './util.mjs';

const marked = [...readFileSync(path.join(REPO, 'wasm/exports.c'), 'utf8').matchAll(/^VTW_API [^(]*?\bvtw_(\w+)\(/gm)]
  .map((m) => m[1])
  .sort();

test('every build exports exactly the VTW_API functions of wasm/exports.c', async () => {
  assert.ok(marked.length > 40 && marked.includes('manifest') && marked.includes('malloc'), marked.join(' '));
  for (const build of BUILDS) assert.deepEqual(Object.keys((await engine(build))._c).sort(), marked, build);
});

test('the manifest: layouts whole and named once; kinds, calls, policies and presets the engine reads', async () => {
  const vt = await engine('simd'),
    { layouts, kinds, calls, policies, presets, limits } = vt.manifest;
  for (const [name, L] of Object.entries(layouts)) {
    assert.deepEqual(
      Object.values(L.fields).sort((a, b) => a - b),
      Array.from({ length: L.size }, (_, i) => i),
      name,
    );
    assert.ok(['i32', 'u32', 'f64', 'text'].includes(L.type), name);
  }
  assert.ok(limits.policy_text_max > 0 && limits.timeline_max > 0);
  const cfg = { img_size: 16, patch_size: 4, in_chans: 1, embed_dim: 16, depth: 2, num_heads: 2 };
  for (const kind of kinds) {
    const config =
      kind === 'mae'
        ? { encoder: cfg, decoder_dim: 8, decoder_depth: 1, decoder_heads: 2 }
        : kind === 'aim'
          ? { encoder: cfg, head_hidden_dim: 8, head_blocks: 1 }
          : cfg;
    const m = vt.createModel({ kind, config });
    assert.equal(m.kind, kind);
    for (const p of policies) m.setGradCheckpointing(p.replace('K', '2').replace('BYTES', '1MB'));
    for (const call of calls) {
      // the loss: planTrainStep's business (MAE needs its masks' sizes)
      if (call === 'loss' || (call === 'timm_forward' && kind !== 'timm')) continue;
      assert.ok(m.plan(call, { batch: 2 }).total > 0, `${kind} ${call}`);
    }
    if (kind === 'mae' || kind === 'aim') assert.ok(m.planTrainStep({ batch: 2 }).total > 0, kind);
    assert.deepEqual(m.namedPolicies().slice(0, 4), ['none', 'block', 'selective', 'sqrt']);
    m.dispose();
  }
  for (const preset of presets) vt.createModel({ kind: 'timm', preset }).dispose();
  assert.throws(
    () => vt.createModel({ kind: 'timm', config: cfg }).setGradCheckpointing('nonsense'),
    new RegExp(`\\(${policies.join(', ')}\\)`),
  ); // the parser's message lists the same names
});
