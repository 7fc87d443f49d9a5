// relaxed.test.mjs: the relaxed-SIMD build's loading (web/vitrine.js's own WASI shim, the default
// pick) and that it really fuses: its dumps differ from the SIMD128 build's where a multiply-add
// rounds once instead of twice (both pass parity: tests/node/parity.test.mjs; bit for bit against
// the native FMA build: same file).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { createVitrine, relaxedSimdSupported, wasiShim, WasiExit } from '../../web/vitrine.js';
import { RELAXED, HOST_FMA, WASM_DIR, engine, fixture } from './util.mjs';

test('Node 20 validates relaxed SIMD once enableNodeRelaxedSimd() ran (util.mjs)', () => {
  assert.equal(RELAXED, true);
  assert.equal(relaxedSimdSupported(), true);
});

test('createVitrine() picks the relaxed build where relaxed SIMD validates', async () => {
  const vt = await createVitrine({ wasmDir: WASM_DIR });
  assert.equal(vt.build, 'relaxed');
  assert.equal(vt.simdKernels, true);
});

test('a missing relaxed file is an error when asked for, a fallback to SIMD128 by default', async () => {
  const dir = path.join(WASM_DIR, 'no-such-dir');
  await assert.rejects(createVitrine({ wasm: 'relaxed', wasmDir: dir }));
  // the default falls back to loading simd from the same (missing) dir: that fails too, naming simd
  await assert.rejects(createVitrine({ wasmDir: dir }), /vitrine-simd/);
});

test('the WASI shim covers every import of the relaxed module; stdio, exit and unknown calls', async () => {
  const module = await WebAssembly.compile(readFileSync(path.join(WASM_DIR, 'vitrine-relaxed.wasm')));
  const memory = new WebAssembly.Memory({ initial: 1 });
  const shim = wasiShim(() => memory, module);
  for (const imp of WebAssembly.Module.imports(module)) {
    assert.equal(imp.module, 'wasi_snapshot_preview1', `unexpected import ${imp.module}.${imp.name}`);
    assert.equal(typeof shim.wasi_snapshot_preview1[imp.name], 'function', imp.name);
  }
  const w = shim.wasi_snapshot_preview1;
  // fd_write: two iovecs making "hi\n" to stdout -> one console line, nwritten = 3
  const u8 = new Uint8Array(memory.buffer),
    dv = new DataView(memory.buffer);
  u8.set([104, 105, 10], 100);
  dv.setUint32(0, 100, true);
  dv.setUint32(4, 2, true);
  dv.setUint32(8, 102, true);
  dv.setUint32(12, 1, true);
  const log = console.log,
    lines = [];
  console.log = (s) => lines.push(s);
  try {
    assert.equal(w.fd_write(1, 0, 2, 200), 0);
  } finally {
    console.log = log;
  }
  assert.deepEqual(lines, ['hi']);
  assert.equal(dv.getUint32(200, true), 3);
  assert.equal(w.fd_write(7, 0, 2, 200), 8, 'EBADF for a descriptor that is not stdout/stderr');
  assert.equal(w.fd_seek(1, 0n, 0, 0), 70, 'ESPIPE on stdio');
  assert.throws(
    () => w.proc_exit(3),
    (e) => e instanceof WasiExit && e.code === 3,
  );
  // a preview1 function the shim does not implement, named by a module: ENOSYS
  const m2 = new WebAssembly.Module(wasmImporting('wasi_snapshot_preview1', 'path_open'));
  assert.equal(wasiShim(() => memory, m2).wasi_snapshot_preview1.path_open(), 52);
});

// (module (import "<mod>" "<name>" (func))) as bytes
function wasmImporting(mod, name) {
  const enc = (s) => [s.length, ...new TextEncoder().encode(s)]; // names < 128 bytes: 1-byte LEB
  const imp = [1, ...enc(mod), ...enc(name), 0, 0]; // 1 import: func of type 0
  return new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 4, 1, 96, 0, 0, 2, imp.length, ...imp]);
}

test(
  "the relaxed build fuses: its dumps differ from SIMD128's on an FMA host",
  { skip: !HOST_FMA && 'this CPU has no FMA' },
  async () => {
    const [rel, simd] = await Promise.all([engine('relaxed'), engine('simd')]);
    const bytes = fixture('vit_encode.safetensors');
    const a = rel.parity(bytes, { dump: true }),
      b = simd.parity(bytes, { dump: true });
    assert.ok(a.pass && b.pass);
    assert.ok(
      !Buffer.from(a.dump).equals(Buffer.from(b.dump)),
      'relaxed and SIMD128 gave the same bits: relaxed_madd did not fuse',
    );
  },
);
