// parity.test.mjs: the PyTorch fixture suite through each wasm build, checkpointing bit for bit,
// and the wasm builds against the native build.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BUILDS, REPO, FIXTURES, NATIVE, NATIVE_FMA, HOST_FMA, RELAXED, engine, fixture, fixtureNames, readSafetensors, f32, relErr } from './util.mjs';

const names = fixtureNames();
const isModel = (bytes) => {
  const { meta } = readSafetensors(bytes);
  return meta.module !== 'torch.optim.AdamW' && JSON.parse(meta.call).fn !== 'sincos';
};

test('relaxed SIMD is enabled in this Node', () => assert.ok(RELAXED, 'enableNodeRelaxedSimd() failed: no relaxed build tested'));

for (const build of BUILDS) {
  test(`fixtures pass through the ${build} build`, async () => {
    const vt = await engine(build);
    assert.ok(names.length >= 16, `expected the fixture suite in ${FIXTURES}`);
    const simdKernels = !build.endsWith('scalar') && existsSync(path.join(REPO, 'src/kernels/kernels_simd.c'));
    assert.equal(vt.simdKernels, simdKernels, `${build}: SIMD kernels linked in`);
    for (const name of names) {
      const r = vt.parity(fixture(name));
      assert.equal(r.pass, true, `${name}: ${r.error || `worst ${r.worst} err ${r.err}`}`);
      assert.ok(r.tensors.length > 0);
    }
  });

  test(`checkpointing is bitwise in the ${build} build`, async () => {
    const vt = await engine(build);
    for (const name of names) {
      const bytes = fixture(name);
      if (!isModel(bytes)) continue;
      const ref = vt.parity(bytes, { policy: 'none', dump: true });
      assert.ok(ref.pass && ref.dump, `${name}: ${ref.error}`);
      for (const policy of ['block', 'every:2', 'sqrt', 'selective']) {
        const r = vt.parity(bytes, { policy, dump: true });
        assert.ok(r.pass, `${name} ${policy}: ${r.error}`);
        assert.ok(Buffer.from(r.dump).equals(Buffer.from(ref.dump)), `${name}: policy ${policy} changed the bits`);
      }
    }
  });
}

const NATIVE_SIMD = process.arch === 'x64' && (() => {
  try { return /^VT_NATIVE_SIMD:BOOL=ON$/m.test(readFileSync(path.join(path.dirname(NATIVE), 'CMakeCache.txt'), 'utf8')); } catch { return false; }
})();

// The relaxed build is compared with the native FMA build (build/vitrine-fma) where this CPU has
// FMA (both fuse every MADD: same bits); the others with the plain native build.
const USE_FMA = HOST_FMA && existsSync(NATIVE_FMA);
test('wasm builds agree with the native build', { skip: !existsSync(NATIVE) && `no native ${NATIVE}` }, async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-native-'));
  const fmaDir = mkdtempSync(path.join(tmpdir(), 'vitrine-native-fma-'));
  try {
    const files = names.map((n) => path.join(FIXTURES, n));
    const run = spawnSync(NATIVE, ['parity', ...files, '--dump', dir], { encoding: 'utf8' });
    assert.equal(run.status, 0, run.stdout + run.stderr);
    if (USE_FMA) {
      const r2 = spawnSync(NATIVE_FMA, ['parity', ...files, '--dump', fmaDir], { encoding: 'utf8' });
      assert.equal(r2.status, 0, r2.stdout + r2.stderr);
    }
    for (const build of BUILDS) {
      const fused = build === 'relaxed';
      if (fused && !USE_FMA) { t.diagnostic(`relaxed vs native FMA: skipped (${HOST_FMA ? `no ${NATIVE_FMA}` : 'this CPU has no FMA'})`); continue; }
      const nativeDir = fused ? fmaDir : dir, nativeName = fused ? 'native FMA' : 'native';
      const vt = await engine(build);
      const tol = build.endsWith('scalar') ? 1e-5 : 1e-4; // scalar: the native kernels; SIMD: parity tolerance
      let worst = 0, worstAt = '', bitwiseFiles = 0;
      for (const name of names) {
        const ours = readSafetensors(vt.parity(fixture(name), { dump: true }).dump).tensors;
        const native = readSafetensors(readFileSync(path.join(nativeDir, name))).tensors;
        assert.deepEqual(Object.keys(ours).sort(), Object.keys(native).sort(), name);
        let same = true;
        for (const k of Object.keys(native)) {
          const e = relErr(f32(ours[k]), f32(native[k]));
          if (!Buffer.from(ours[k].bytes).equals(Buffer.from(native[k].bytes))) same = false;
          if (e > worst) { worst = e; worstAt = `${name} ${k}`; }
          assert.ok(e <= tol, `${build} vs ${nativeName}: ${name} ${k} err ${e} > ${tol}`);
        }
        if (same) bitwiseFiles++;
      }
      t.diagnostic(`${build} vs ${nativeName}: ${bitwiseFiles}/${names.length} files bitwise equal, worst rel err ${worst.toExponential(3)}${worstAt ? ` (${worstAt})` : ''}`);
      // an x86-64 native build runs the same SIMD128 kernels (src/kernels/simd128.h): same bits;
      // the native FMA build fuses exactly the relaxed build's multiply-adds: same bits
      if (!build.endsWith('scalar') && (fused || NATIVE_SIMD)) assert.equal(bitwiseFiles, names.length, `${build} vs ${nativeName}: every dump byte-identical`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    rmSync(fmaDir, { recursive: true, force: true });
  }
});
