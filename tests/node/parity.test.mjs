// parity.test.mjs: the PyTorch fixture suite through each wasm build (vitrine/testing's
// assertParity), checkpointing bit for bit, and the wasm builds against the native build.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  BUILDS,
  REPO,
  FIXTURES,
  NATIVE,
  NATIVE_FMA,
  HOST_FMA,
  RELAXED,
  engine,
  fixture,
  fixtureNames,
  readSafetensors,
  f32,
  relErr,
} from './util.mjs';
import { readSafetensorsHeader } from '../../web/vitrine.js';
import { assertParity } from '../../web/testing.js';

const names = fixtureNames();
const isModel = (bytes) => {
  const { meta } = readSafetensors(bytes);
  return meta.module !== 'torch.optim.AdamW' && JSON.parse(meta.call).fn !== 'sincos';
};

test('relaxed SIMD is enabled in this Node', () =>
  assert.ok(RELAXED, 'enableNodeRelaxedSimd() failed: no relaxed build tested'));

for (const build of BUILDS) {
  test(`fixtures pass through the ${build} build`, async () => {
    const vt = await engine(build);
    assert.ok(names.length >= 16, `expected the fixture suite in ${FIXTURES}`);
    const simdKernels = !build.endsWith('scalar') && existsSync(path.join(REPO, 'src/kernels/kernels_simd.c'));
    assert.equal(vt.simdKernels, simdKernels, `${build}: SIMD kernels linked in`);
    for (const name of names) {
      const r = await assertParity(path.join(FIXTURES, name), { engine: vt }); // vitrine/testing, as users run it
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

const NATIVE_SIMD =
  process.arch === 'x64' &&
  (() => {
    try {
      return /^VT_NATIVE_SIMD:BOOL=ON$/m.test(readFileSync(path.join(path.dirname(NATIVE), 'CMakeCache.txt'), 'utf8'));
    } catch {
      return false;
    }
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
      const fused = build.startsWith('relaxed');
      if (fused && !USE_FMA) {
        t.diagnostic(`relaxed vs native FMA: skipped (${HOST_FMA ? `no ${NATIVE_FMA}` : 'this CPU has no FMA'})`);
        continue;
      }
      const nativeDir = fused ? fmaDir : dir,
        nativeName = fused ? 'native FMA' : 'native';
      const vt = await engine(build);
      const tol = build.endsWith('scalar') ? 1e-5 : 1e-4; // scalar: the native kernels; SIMD: parity tolerance
      let worst = 0,
        worstAt = '',
        bitwiseFiles = 0;
      for (const name of names) {
        const ours = readSafetensors(vt.parity(fixture(name), { dump: true }).dump).tensors;
        const native = readSafetensors(readFileSync(path.join(nativeDir, name))).tensors;
        assert.deepEqual(Object.keys(ours).sort(), Object.keys(native).sort(), name);
        let same = true;
        for (const k of Object.keys(native)) {
          const e = relErr(f32(ours[k]), f32(native[k]));
          if (!Buffer.from(ours[k].bytes).equals(Buffer.from(native[k].bytes))) same = false;
          if (e > worst) {
            worst = e;
            worstAt = `${name} ${k}`;
          }
          assert.ok(e <= tol, `${build} vs ${nativeName}: ${name} ${k} err ${e} > ${tol}`);
        }
        if (same) bitwiseFiles++;
      }
      t.diagnostic(
        `${build} vs ${nativeName}: ${bitwiseFiles}/${names.length} files bitwise equal, worst rel err ${worst.toExponential(3)}${worstAt ? ` (${worstAt})` : ''}`,
      );
      // an x86-64 native build runs the same SIMD128 kernels (src/kernels/simd128.h): same bits;
      // the native FMA build fuses exactly the relaxed build's multiply-adds: same bits
      if (!build.endsWith('scalar') && (fused || NATIVE_SIMD))
        assert.equal(bitwiseFiles, names.length, `${build} vs ${nativeName}: every dump byte-identical`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    rmSync(fmaDir, { recursive: true, force: true });
  }
});

// The parity harness writes the one JSON form of a result (harness/parity.c): the native CLI
// prints it, the wasm export returns it, web/cli.js prints the engine's text as is.
test(
  "parity --json: the native and Node CLIs print the harness's JSON, byte for byte",
  { skip: !existsSync(NATIVE) && `no native ${NATIVE}` },
  () => {
    const files = ['vit_encode.safetensors', 'adamw_steps.safetensors'].map((n) => path.join(FIXTURES, n));
    files.push(path.join(FIXTURES, 'missing.safetensors'));
    const args = ['parity', ...files, '--json'];
    const nat = spawnSync(NATIVE, args, { encoding: 'utf8' });
    const js = spawnSync(process.execPath, [path.join(REPO, 'web/cli.js'), ...args, '--wasm', 'simd'], {
      encoding: 'utf8',
      env: { ...process.env, VITRINE_WASM_DIR: path.join(path.dirname(NATIVE), 'wasm') },
    });
    assert.equal(nat.status, 2); // a file that cannot be read
    assert.equal(js.status, 2, js.stderr);
    assert.equal(js.stdout, nat.stdout);
    const r = JSON.parse(nat.stdout);
    assert.deepEqual(
      r.map((x) => [path.basename(x.file), x.pass, x.status]),
      [
        ['vit_encode.safetensors', true, 0],
        ['adamw_steps.safetensors', true, 0],
        ['missing.safetensors', false, -8],
      ],
    );
    assert.match(r[2].error, /^cannot open .*missing\.safetensors: No such file or directory$/);
    assert.ok(r[0].tensors.length > 10 && r[0].err <= 1e-4 && r[0].max_torch32_err > 0);
  },
);

test('a NaN in the result is a failure with err = Infinity, in valid JSON; a NaN in an expected value is a broken file', async () => {
  const vt = await engine('simd');
  const nanAt = (name, key, i) => {
    const bytes = new Uint8Array(fixture(name));
    const { length: n, header } = readSafetensorsHeader(bytes);
    new DataView(bytes.buffer, bytes.byteOffset + 8 + n + header[key].data_offsets[0] + 4 * i, 4).setFloat32(
      0,
      NaN,
      true,
    );
    return bytes;
  };
  // a NaN weight: AdamW's result is NaN in the middle of the tensor only (a NaN used to count only
  // as the last element)
  const r = vt.parity(nanAt('adamw_steps.safetensors', 'param/w', 17));
  assert.equal(r.pass, false);
  assert.equal(r.status, 0); // the file ran; it failed
  assert.equal(r.worst, 'param.0');
  assert.equal(r.err, Infinity);
  assert.match(r.json, /"worst": "param\.0", "err": 1e999,/); // JSON has no inf: 1e999 reads as Infinity
  const e = vt.parity(nanAt('sincos_pos_embed.safetensors', 'expect/sincos.d96.g3.p0', 100));
  assert.equal(e.pass, false);
  assert.equal(e.status, -3);
  assert.equal(
    e.error,
    'expect/sincos.d96.g3.p0 holds NaN (element 100 of [9, 96]): the reference is broken; make the dump again',
  );
});

// A parity file names the sizes it wants computed; sizes past what wasm32 can address are refused
// with a message (they wrapped around in 32-bit size_t and the table overran its buffer).
test('a sin-cos key past wasm32 memory is an out-of-memory error, not an overrun', async () => {
  const header = {
    __metadata__: {
      format: 'vitrine-parity/1',
      module: 'lightly.utils.get_2d_sincos_pos_embed',
      config: '{}',
      call: '{"fn": "sincos"}',
    },
    'expect/sincos.d65536.g1024.p0': { dtype: 'F32', shape: [1], data_offsets: [0, 4] },
  };
  let text = JSON.stringify(header);
  while ((8 + text.length) % 8) text += ' ';
  const bytes = new Uint8Array(8 + text.length + 4);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(text.length), true);
  bytes.set(new TextEncoder().encode(text), 8);
  for (const build of BUILDS) {
    const r = (await engine(build)).parity(bytes);
    assert.equal(r.pass, false, build);
    assert.equal(r.status, -2, `${build}: ${r.error}`);
    assert.match(r.error, /do not fit in memory/, build);
  }
});
