// testing.test.mjs: vitrine/testing (assertParity, assertGolden) and what `vitrine parity` reports for
// CI (--junit, --tap, --tolerance, exit status), on fixtures and on files made wrong on purpose.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AssertionError } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, existsSync, rmSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { REPO, FIXTURES, WASM_DIR, engine, fixture, readSafetensors, f32 } from './util.mjs';
import { assertParity, assertGolden, encodeSafetensors, goldenTensors, PARITY_TOLERANCE } from '../../web/testing.js';
import { applyTolerance, checkTolerance, junitReport } from '../../web/formats/parity-report.js';
import { readSafetensorsHeader } from '../../web/formats/safetensors.js';

const CLI = path.join(REPO, 'web/cli.js');
const ENV = { ...process.env, VITRINE_WASM_DIR: WASM_DIR };
const cli = (args, cwd = REPO) =>
  spawnSync(process.execPath, [CLI, 'parity', ...args, '--wasm', 'simd'], { cwd, env: ENV, encoding: 'utf8' });
const temp = () => mkdtempSync(path.join(tmpdir(), 'vitrine-testing-'));
const FIX = (n) => path.join(FIXTURES, n);

// A fixture with its tensors changed by edit({ name: { dtype, shape, bytes } }) (same metadata).
function rewritten(name, edit, meta = null) {
  const { meta: m, tensors } = readSafetensors(fixture(name));
  edit(tensors);
  return encodeSafetensors(
    Object.entries(tensors).map(([k, t]) => ({ name: k, ...t })),
    meta || m,
  );
}
// expect/out of vit_encode with one value moved by `rel` times max|expect/out|: the engine's err ~ rel
function offBy(rel) {
  return rewritten('vit_encode.safetensors', (t) => {
    const v = f32(t['expect/out']).slice();
    const m = v.reduce((a, x) => Math.max(a, Math.abs(x)), 0);
    v[100] += rel * m;
    t['expect/out'].bytes = new Uint8Array(v.buffer);
  });
}
const rejects = async (p, re) => {
  const e = await p.then(
    () => null,
    (x) => x,
  );
  assert.ok(e, 'expected a rejection');
  assert.ok(e instanceof AssertionError, `${e.name}: ${e.message}`);
  assert.match(e.message, re);
  return e;
};

test('assertParity: passes a fixture and resolves to the result; fails naming the worst tensor, its err and torch32_err', async () => {
  const vt = await engine('simd');
  const r = await assertParity(FIX('vit_encode.safetensors'), { engine: vt, policy: 'block' });
  assert.equal(r.pass, true);
  assert.equal(r.tolerance, PARITY_TOLERANCE);
  assert.ok(r.tensors.length > 10 && r.err <= 1e-4 && r.torch32_err > 0);
  assert.equal(r.json, undefined);
  const url = new URL(`file://${FIX('adamw_steps.safetensors')}`);
  assert.equal((await assertParity(url, { wasm: 'simd', wasmDir: WASM_DIR })).pass, true); // its own engine, a URL
  const dir = temp();
  try {
    const f = path.join(dir, 'off.safetensors');
    writeFileSync(f, offBy(3e-3));
    const e = await rejects(
      assertParity(f, { engine: vt }),
      new RegExp(
        `^vitrine parity: ${f.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} fails ` +
          '\\(lightly\\.MaskedVisionTransformerTIMM encode, wasm simd, grad checkpointing none\\)\\n' +
          "worst tensor out: err 3\\.0\\d\\de-03 > 1\\.000e-04 \\(PyTorch's own float32: torch32_err 3\\.0\\d\\de-03\\)\\n" +
          'pass rule: every expect/ tensor has err = max\\|ours - expect\\| / max\\|expect\\| <= 1\\.000e-04$',
      ),
    );
    assert.equal(e.operator, 'assertParity');
    assert.ok(e.actual > 2.9e-3 && e.expected === 1e-4);
    assert.equal(e.result.worst, 'out');
    // a tighter tolerance fails a passing file; a looser one is refused, not applied
    await rejects(
      assertParity(FIX('vit_encode.safetensors'), { engine: vt, tolerance: 1e-9 }),
      /\d+ of \d+ tensors over: .*\npass rule: .* <= 1\.000e-09 \(--tolerance; the format's rule is 1\.000e-04\)$/,
    );
    await assert.rejects(assertParity(f, { engine: vt, tolerance: 1e-2 }), {
      name: 'RangeError',
      message: /looser than the parity rule/,
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('assertParity: a file that cannot be read or run is a failure naming the file and the tensor', async () => {
  const vt = await engine('simd');
  const dir = temp();
  const cases = {
    missing_param: [
      (t) => {
        delete t['param/vit.blocks.1.attn.qkv.weight'];
      },
      /param\/vit\.blocks\.1\.attn\.qkv\.weight is missing/,
    ],
    missing_images: [
      (t) => {
        delete t['input/images'];
      },
      /input\/images is missing/,
    ],
    missing_dout: [
      (t) => {
        delete t['input/dout/out'];
      },
      /input\/dout\/out is missing: the expect\/grad\/ tensors are gradients of sum\(out \* dout\)/,
    ],
    expect_i64: [
      (t) => {
        t['expect/out'] = { ...t['expect/out'], dtype: 'I64', bytes: new Uint8Array(t['expect/out'].bytes.length * 2) };
      },
      /tensor "expect\/out" has dtype I64, expected a float dtype/,
    ],
    images_bool: [
      (t) => {
        t['input/images'] = {
          ...t['input/images'],
          dtype: 'BOOL',
          bytes: new Uint8Array(t['input/images'].bytes.length / 4),
        };
      },
      /tensor "input\/images" has dtype BOOL, expected a float dtype/,
    ],
    expect_nan: [
      (t) => {
        const v = f32(t['expect/grad/vit.norm.bias']).slice();
        v[5] = NaN;
        t['expect/grad/vit.norm.bias'].bytes = new Uint8Array(v.buffer);
      },
      /expect\/grad\/vit\.norm\.bias holds NaN \(element 5 of \[64\]\): the reference is broken/,
    ],
    torch32_shape: [
      (t) => {
        t['torch32/out'] = { ...t['torch32/out'], shape: [2, 1, 64], bytes: t['torch32/out'].bytes.slice(0, 512) };
      },
      /torch32\/out is \[2, 1, 64\], expect\/out is \[2, 17, 64\]/,
    ],
  };
  try {
    for (const [name, [edit, re]] of Object.entries(cases)) {
      const f = path.join(dir, `${name}.safetensors`);
      writeFileSync(f, rewritten('vit_encode.safetensors', edit));
      const e = await rejects(
        assertParity(f, { engine: vt }),
        new RegExp(`${name}\\.safetensors could not be run .*: ${re.source}`),
      );
      assert.equal(e.result.pass, false, name);
    }
    writeFileSync(path.join(dir, 'short.safetensors'), fixture('vit_encode.safetensors').subarray(0, 1000));
    await rejects(
      assertParity(path.join(dir, 'short.safetensors'), { engine: vt }),
      /short\.safetensors could not be run/,
    );
    await rejects(
      assertParity(path.join(dir, 'none.safetensors'), { engine: vt }),
      /^vitrine parity: cannot read .*none\.safetensors: No such file or directory$/,
    );
    await rejects(assertParity(dir, { engine: vt }), /cannot read .*: not a regular file \(a directory\)/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the pass rule: err <= 1e-4 in the harness, in the CLI and in applyTolerance alike', async () => {
  const vt = await engine('simd');
  const dir = temp();
  try {
    for (const [rel, pass] of [
      [0.9e-4, true],
      [1.1e-4, false],
    ]) {
      const bytes = offBy(rel),
        f = path.join(dir, `off${rel}.safetensors`);
      writeFileSync(f, bytes);
      const r = vt.parity(bytes);
      assert.equal(r.pass, pass, `${rel}: harness err ${r.err}`);
      assert.equal(applyTolerance(r).pass, pass);
      assert.equal(
        r.tensors.every((t) => t.err <= PARITY_TOLERANCE),
        pass,
      );
      const c = cli([f]);
      assert.equal(c.status, pass ? 0 : 1, c.stderr);
      assert.match(c.stdout, new RegExp(`^${pass ? 'PASS' : 'FAIL'} .*worst out err`, 'm'));
    }
    assert.equal(checkTolerance(undefined), 1e-4);
    assert.equal(checkTolerance(1e-6), 1e-6);
    for (const bad of [1e-3, 'x', -1, Infinity, NaN, '1e-6'])
      assert.throws(() => checkTolerance(bad), RangeError, String(bad));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('vitrine parity --junit / --tap / --tolerance / --json, and the exit status 0, 1, 2', () => {
  const dir = temp();
  try {
    const pass = path.join(dir, 'a&b <"x">.safetensors');
    copyFileSync(FIX('vit_encode_idx_keep.safetensors'), pass);
    const fail = path.join(dir, 'fail.safetensors');
    writeFileSync(fail, offBy(5e-3));
    const bad = path.join(dir, 'bad.safetensors');
    writeFileSync(
      bad,
      rewritten('vit_encode.safetensors', (t) => {
        delete t['input/images'];
      }),
    );
    const gone = path.join(dir, 'gone.safetensors');
    const xml = path.join(dir, 'reports', 'sub', 'parity.xml');

    let r = cli([pass, FIX('adamw_steps.safetensors'), '--junit', xml]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(readFileSync(xml, 'utf8'), /<testsuite name="vitrine parity" tests="2" failures="0" errors="0"/);
    r = cli([pass, fail, bad, '--junit', xml]);
    assert.equal(r.status, 1, 'a failure, every file readable');
    r = cli([pass, fail, bad, gone, '--junit', xml]);
    assert.equal(r.status, 2, 'a file that cannot be read');
    assert.match(r.stdout, /^FAIL .*gone\.safetensors: cannot open .*: No such file or directory$/m);
    const x = readFileSync(xml, 'utf8');
    assert.match(
      x,
      /^<\?xml version="1\.0" encoding="UTF-8"\?>\n<testsuites name="vitrine parity" tests="4" failures="1" errors="2"/,
    );
    assert.match(
      x,
      /<property name="pass_rule" value="pass rule: every expect\/ tensor has err = max\|ours - expect\| \/ max\|expect\| &lt;= 1\.000e-04"\/>/,
    );
    assert.match(
      x,
      /<testcase name="[^"]*a&amp;b &lt;&quot;x&quot;&gt;\.safetensors" classname="lightly\.MaskedVisionTransformerTIMM\.encode" file="[^"]*" time="\d+\.\d{3}">\n      <system-out>ok {3}out err /,
    );
    assert.match(
      x,
      /<failure message="worst tensor out: err 5\.\d{3}e-03 &gt; 1\.000e-04 \(torch32_err \d\.\d{3}e-0\d\)" type="parity">/,
    );
    assert.match(x, /OVER out err 5\.\d{3}e-03 torch32_err/);
    assert.match(x, /<error message="input\/images is missing" type="not run">/);
    assert.match(
      x,
      /<error message="cannot open [^"]*gone\.safetensors: No such file or directory" type="unreadable">/,
    );
    const py = spawnSync(
      'python3',
      [
        '-c',
        'import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); ' +
          'print(len(r.findall(".//testcase")), len(r.findall(".//failure")), len(r.findall(".//error")), r.find(".//testcase").get("name"))',
        xml,
      ],
      { encoding: 'utf8' },
    );
    if (!py.error) assert.equal(py.stdout.trim(), `4 1 2 ${pass}`, py.stderr); // well-formed, the names unescaped

    r = cli([pass, fail, '--tap']);
    assert.equal(r.status, 1);
    assert.match(
      r.stdout,
      /^TAP version 13\n# vitrine parity: pass rule: .* <= 1\.000e-04\n1\.\.2\nok 1 - .*a&b <"x">\.safetensors\n {2}---\n {2}module: "lightly\.MaskedVisionTransformerTIMM"\n/,
    );
    assert.match(
      r.stdout,
      /\nnot ok 2 - .*fail\.safetensors\n[\s\S]* {2}worst: "out"\n {2}err: "5\.\d{3}e-03"\n {2}torch32_err: "\d\.\d{3}e-0\d"\n[\s\S]* {2}over:\n {4}- \{ name: "out", err: "5\.\d{3}e-03"/,
    );
    assert.doesNotMatch(r.stdout, /passed, .* failed/);

    r = cli([pass, '--tolerance', '1e-9']);
    assert.equal(r.status, 1, 'a tighter tolerance fails a passing file');
    assert.match(r.stdout, /^pass rule: .* <= 1\.000e-09 \(--tolerance; the format's rule is 1\.000e-04\)\nFAIL /);
    r = cli([pass, '--tolerance', '1e-5']);
    assert.equal(r.status, 0, r.stdout);
    r = cli([pass, '--tolerance', '1e-3']);
    assert.equal(r.status, 2);
    assert.match(
      r.stderr,
      /^vitrine parity: --tolerance 1\.000e-03 is looser than the parity rule \(err <= 1\.000e-04\): refused/,
    );
    assert.equal(r.stdout, '');
    r = cli([pass, '--tolerance=0x10']);
    assert.equal(r.status, 2);
    assert.equal(r.stderr, "vitrine parity: --tolerance: '0x10' is not a decimal number\n");
    r = cli([pass, `--junit=${xml}`, '--tolerance=1e-5', '--tap']); // --flag=value as --flag value
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^TAP version 13\n# vitrine parity: pass rule: .* <= 1\.000e-05 /);
    assert.match(
      readFileSync(xml, 'utf8'),
      /tests="1" failures="0" errors="0"[\s\S]*<property name="tolerance" value="1\.000e-05"\/>/,
    );
    r = cli(['--help']);
    assert.equal(r.status, 0);
    for (const flag of ['--tap', '--junit FILE', '--tolerance T'])
      assert.match(r.stdout, new RegExp(`^ {2}${flag} `, 'm'));
    assert.match(r.stdout, /2 a usage error or a file\n +that could not be read/);
    r = cli([pass, fail, '--json', '--tolerance', '1e-9']);
    const j = JSON.parse(r.stdout);
    assert.deepEqual(
      j.map((o) => [o.pass, o.tolerance]),
      [
        [false, 1e-9],
        [false, 1e-9],
      ],
    );
    assert.equal(cli([pass, '--json', '--tap']).status, 2);
    r = cli([pass, '--junit']); // then --wasm simd: not a file name
    assert.equal(r.status, 2);
    assert.match(r.stderr, /^vitrine parity: --junit needs a file name \('--wasm' is an option\)$/m);
    assert.ok(!existsSync(path.join(REPO, '--wasm')));
    writeFileSync(path.join(dir, 'file'), 'x');
    r = cli([pass, '--junit', path.join(dir, 'file', 'x.xml')]);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /cannot write --junit .*file\/x\.xml: .*not a directory/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('junitReport escapes what XML cannot hold and counts failures and errors apart', () => {
  const x = junitReport([
    { file: 'a\u0001b', result: { pass: false, status: -3, error: 'bad "x" & <y>', tensors: [] } },
  ]);
  assert.match(x, /tests="1" failures="0" errors="1"/);
  assert.match(x, /name="a\uFFFDb"/);
  assert.match(x, /<error message="bad &quot;x&quot; &amp; &lt;y&gt;" type="not run">/);
});

// ---- assertGolden ----

// Runs fn with environment variables set (undefined: removed), restoring them after.
function withEnv(vars, fn) {
  const old = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const set = (o) => {
    for (const [k, v] of Object.entries(o))
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
  };
  set(vars);
  // an async fn keeps the variables until it settles (a plain finally would restore them at its first await)
  let r;
  try {
    r = fn();
  } catch (e) {
    set(old);
    throw e;
  }
  if (r && typeof r.then === 'function') return r.finally(() => set(old));
  set(old);
  return r;
}
const NOCI = { CI: undefined, VITRINE_UPDATE_GOLDENS: undefined };

test('assertGolden: records, matches, fails on any changed bit or shape, never overwrites unless asked', () =>
  withEnv(NOCI, () => {
    const dir = temp();
    try {
      const v = (x = 3) => ({
        out: { data: new Float32Array([1, 2, x, -0.5]), shape: [2, 2] },
        loss: 0.25,
        steps: [1, 2],
      });
      const rec = assertGolden('g', () => v(), { dir });
      assert.deepEqual([rec.status, rec.file], ['recorded', path.join(dir, 'g.safetensors')]);
      const file = path.join(dir, 'g.safetensors'),
        kept = readFileSync(file);
      const { meta, tensors } = readSafetensors(kept);
      assert.deepEqual(meta, { format: 'vitrine-golden/1', name: 'g' });
      assert.deepEqual(
        Object.entries(tensors).map(([k, t]) => [k, t.dtype, t.shape]),
        [
          ['out', 'F32', [2, 2]],
          ['loss', 'F64', []],
          ['steps', 'F64', [2]],
        ],
      );
      assert.equal(assertGolden('g', v(), { dir }).status, 'matched');
      const unchanged = () => assert.ok(readFileSync(file).equals(kept), 'the golden was written over');

      assert.throws(
        () => assertGolden('g', () => v(Math.fround(3 + 2 ** -22)), { dir }),
        (e) =>
          e instanceof AssertionError &&
          /^golden g \(.*g\.safetensors\) differs \(bit for bit\):\n {2}tensor out \(F32 \[2, 2\]\): 1 of 4 values changed \(first at element 2: 3 -> 3\.000000238418579\); err = max\|new - golden\| \/ max\|golden\| = 7\.947e-08\nif the change is intended, record it again: VITRINE_UPDATE_GOLDENS=1/.test(
            e.message,
          ),
      );
      unchanged();
      assert.equal(assertGolden('g', () => v(Math.fround(3 + 2 ** -22)), { dir, tolerance: 1e-7 }).status, 'matched');
      assert.throws(
        () => assertGolden('g', () => v(3.5), { dir, tolerance: 1e-7 }),
        /differs beyond tolerance 1\.000e-07:\n {2}tensor out .*err = .* = 1\.667e-01 > tolerance 1\.000e-07/,
      );
      assert.throws(
        () => assertGolden('g', () => ({ ...v(), loss: 0.25 + 2 ** -54 }), { dir }),
        /tensor loss \(F64 \[\]\): 1 of 1 values changed/,
      );
      unchanged();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }));

test('assertGolden: shapes, tensors, NaN, -0, corrupt goldens, update, VITRINE_UPDATE_GOLDENS, CI, promises', async () => {
  const dir = temp();
  const file = path.join(dir, 'h.safetensors');
  try {
    await withEnv(NOCI, async () => {
      const t = (data, shape = [data.length]) => ({ data: Float32Array.from(data), shape });
      assertGolden('h', { a: t([1, NaN, 0]), b: 7n, c: true }, { dir });
      const kept = readFileSync(file);
      assert.equal(assertGolden('h', { a: t([1, NaN, 0]), b: 7n, c: true }, { dir }).status, 'matched'); // NaN equals NaN
      assert.throws(
        () => assertGolden('h', { a: t([1, NaN, -0]), b: 7n, c: true }, { dir }),
        /tensor a \(F32 \[3\]\): 1 of 3 values changed \(first at element 2: 0 -> 0\)/,
      );
      assert.throws(
        () => assertGolden('h', { a: t([1, NaN, 0, 4], [2, 2]), b: 7n, c: true }, { dir }),
        /tensor a: the golden is F32 \[3\], the value now is F32 \[2, 2\] \(another shape\)/,
      );
      assert.throws(
        () => assertGolden('h', { a: { data: Float64Array.from([1, NaN, 0]), shape: [3] }, b: 7n, c: true }, { dir }),
        /the golden is F32 \[3\], the value now is F64 \[3\]/,
      );
      assert.throws(
        () => assertGolden('h', { a: t([1, NaN, 0]), b: 7n }, { dir }),
        /tensor c \(BOOL \[\]\) of the golden is missing from the value/,
      );
      assert.throws(
        () => assertGolden('h', { a: t([1, NaN, 0]), b: 7n, c: true, d: 1 }, { dir }),
        /tensor d \(F64 \[\]\) is not in the golden/,
      );
      assert.throws(
        () => assertGolden('h', { a: t([1, 2, 0]), b: 7n, c: true }, { dir, tolerance: 1 }),
        /err = inf \(a NaN or infinity appeared\)|values changed/,
      );
      assert.ok(readFileSync(file).equals(kept));

      // corrupt or foreign goldens: a clear failure, the file left as it is
      for (const [bytes, re] of [
        [kept.subarray(0, 20), /is not a readable golden \(safetensors: header of \d+ bytes in a file of 20\)/],
        [
          encodeSafetensors(goldenTensors({ a: t([1]) }), { format: 'other' }),
          /metadata format is "other", not vitrine-golden\/1/,
        ],
        [Buffer.concat([kept.subarray(0, kept.length - 4)]), /data_offsets .* do not hold/],
      ]) {
        writeFileSync(file, bytes);
        assert.throws(
          () => assertGolden('h', { a: t([1, NaN, 0]), b: 7n, c: true }, { dir }),
          (e) =>
            e instanceof AssertionError &&
            re.test(e.message) &&
            /it is left as it is: delete it, or record it again with VITRINE_UPDATE_GOLDENS=1/.test(e.message),
          String(re),
        );
        assert.ok(readFileSync(file).equals(Buffer.from(bytes)));
      }
      assert.equal(assertGolden('h', { a: t([5]) }, { dir, update: true }).status, 'updated');
      assert.equal(assertGolden('h', { a: t([5]) }, { dir }).status, 'matched');
      await withEnv({ VITRINE_UPDATE_GOLDENS: '1' }, async () =>
        assert.equal(assertGolden('h', { a: t([6]) }, { dir }).status, 'updated'),
      );
      await withEnv({ VITRINE_UPDATE_GOLDENS: '0' }, async () =>
        assert.throws(() => assertGolden('h', { a: t([7]) }, { dir }), /values changed/),
      );
      const p = assertGolden('h', async () => ({ a: t([6]) }), { dir });
      assert.ok(p instanceof Promise);
      assert.equal((await p).status, 'matched');
      await assert.rejects(
        assertGolden('h', async () => ({ a: t([8]) }), { dir }),
        AssertionError,
      );
    });
    await withEnv({ CI: 'true', VITRINE_UPDATE_GOLDENS: undefined }, async () => {
      assert.throws(
        () => assertGolden('new', 1, { dir }),
        /golden new: .*new\.safetensors does not exist, and in CI \(CI=true\) a golden is never recorded/,
      );
      assert.ok(!existsSync(path.join(dir, 'new.safetensors')));
      assert.throws(
        () => assertGolden('new', 1, { dir, update: true }),
        /golden new: re-recording asked for \(update: true\) in CI \(CI=true\): a golden is never \(re-\)recorded in CI/,
      );
      assert.ok(!existsSync(path.join(dir, 'new.safetensors')));
    });
    await withEnv({ CI: 'false' }, async () => assert.equal(assertGolden('new2', 1, { dir }).status, 'recorded'));
    for (const bad of ['../x', 'a/b', '', '.hidden', 3])
      assert.throws(() => assertGolden(bad, 1, { dir }), TypeError, String(bad));
    assert.throws(
      () => assertGolden('u', () => ({ a: new Uint16Array(2) }), { dir }),
      /a: Uint16Array is not a dtype a golden holds/,
    );
    assert.throws(() => assertGolden('u', () => ({ a: null }), { dir }), /a: null is not a value a golden holds/);
    assert.throws(
      () => assertGolden('u', () => ({ data: new Float32Array(3), shape: [2, 2] }), { dir }),
      /value: shape \[2,2\] does not hold its 3 values/,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('assertGolden says what it did: recorded, re-recorded, unchanged (t.diagnostic; stdout without t)', () =>
  withEnv(NOCI, () => {
    const dir = temp();
    try {
      const said = [],
        t = { diagnostic: (m) => said.push(m) };
      const file = path.join(dir, 'r.safetensors');
      assertGolden('r', { a: new Float32Array([1, 2]), b: 3 }, { dir, t });
      assertGolden('r', { a: new Float32Array([1, 2]), b: 3 }, { dir, t });
      assertGolden('r', { a: new Float32Array([1, 2]), b: 3.5 }, { dir, t, tolerance: 0.5 });
      assertGolden('r', { a: new Float32Array([1, 2]), b: 4 }, { dir, t, update: true });
      assert.deepEqual(said, [
        `golden r: recorded ${file} (2 tensors)`,
        'golden r: unchanged (2 tensors, bit for bit)',
        'golden r: unchanged (2 tensors, within tolerance 5.000e-01)',
        `golden r: re-recorded ${file} (2 tensors): 1 change: tensor b (F64 []): 1 of 1 values changed (first at element 0: 3 -> 4); err = max|new - golden| / max|golden| = 3.333e-01`,
      ]);
      assert.throws(() => assertGolden('r', 1, { dir, t: {} }), /t is not a test context/);
      // in a user's test file run by node --test: the lines are in the output, with t and without
      writeFileSync(
        path.join(dir, 'g.test.mjs'),
        `import { test } from 'node:test';\nimport { assertGolden } from ${JSON.stringify(path.join(REPO, 'web/testing.js'))};\n` +
          `const dir = new URL('./goldens', import.meta.url);\n` +
          `test('with t', (t) => { assertGolden('with_t', [1, 2], { dir, t }); });\n` +
          `test('without t', () => { assertGolden('without_t', [3], { dir }); });\n`,
      );
      const env = { ...process.env };
      for (const k of ['CI', 'VITRINE_UPDATE_GOLDENS', 'NODE_TEST_CONTEXT']) delete env[k];
      const run = () =>
        spawnSync(process.execPath, ['--test', '--test-reporter=spec', path.join(dir, 'g.test.mjs')], {
          cwd: dir,
          env,
          encoding: 'utf8',
        });
      let r = run();
      assert.equal(r.status, 0, r.stdout + r.stderr);
      assert.match(r.stdout, /golden with_t: recorded .*with_t\.safetensors \(1 tensor\)/);
      assert.match(r.stdout, /golden without_t: recorded .*without_t\.safetensors \(1 tensor\)/);
      r = run();
      assert.equal(r.status, 0, r.stdout + r.stderr);
      assert.match(r.stdout, /golden with_t: unchanged \(1 tensor, bit for bit\)/);
      assert.doesNotMatch(r.stdout, /recorded/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }));

test('assertGolden never re-records in CI: VITRINE_UPDATE_GOLDENS=1 under CI=true fails, the golden kept', async () => {
  const dir = temp();
  try {
    const file = path.join(dir, 'c.safetensors');
    await withEnv(NOCI, async () => assertGolden('c', [1, 2], { dir }));
    const kept = readFileSync(file);
    await withEnv({ CI: 'true', VITRINE_UPDATE_GOLDENS: '1' }, async () => {
      for (const v of [
        [1, 3],
        [1, 2],
      ])
        assert.throws(
          () => assertGolden('c', v, { dir }),
          /golden c: re-recording asked for \(VITRINE_UPDATE_GOLDENS=1\) in CI \(CI=true\): a golden is never \(re-\)recorded in CI/,
        );
      assert.throws(() => assertGolden('c', [1, 3], { dir, update: true }), /never \(re-\)recorded in CI/);
    });
    assert.ok(readFileSync(file).equals(kept), 'the golden was written over in CI');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('assertGolden: tensors named __proto__ are kept; __metadata__ and colliding names are refused before recording', () =>
  withEnv(NOCI, () => {
    const dir = temp();
    try {
      // an own key __proto__ (as JSON.parse or a computed key makes it): recorded, then unchanged
      const proto = () => ({ ['__proto__']: new Float32Array([1, 2]), x: { ['__proto__']: 3 } });
      assert.equal(Object.keys(proto())[0], '__proto__');
      assert.equal(assertGolden('p', proto, { dir }).status, 'recorded');
      assert.equal(assertGolden('p', proto, { dir }).status, 'matched');
      const { header } = readSafetensorsHeader(readFileSync(path.join(dir, 'p.safetensors')));
      assert.deepEqual(Object.keys(header), ['__proto__', 'x.__proto__', '__metadata__']);
      assert.throws(
        () => assertGolden('p', () => ({ ['__proto__']: new Float32Array([1, 5]), x: { ['__proto__']: 3 } }), { dir }),
        /tensor __proto__ \(F32 \[2\]\): 1 of 2 values changed/,
      );
      // refused at the first run, with nothing written: the same refusal at every run after
      for (const [name, value, re] of [
        ['m', { __metadata__: 1, a: 2 }, /__metadata__: safetensors keeps that name for the file's metadata/],
        ['d', { 'a.b': 1, a: { b: 2 } }, /two values are both named 'a\.b'/],
        ['v', { value: 1, '': 2 }, /two values are both named 'value'/],
        ['l', { 0.1: 5, 0: [9, [7]] }, /two values are both named '0\.1'/],
      ]) {
        for (let run = 0; run < 2; run++) assert.throws(() => assertGolden(name, value, { dir }), re, name);
        assert.ok(!existsSync(path.join(dir, `${name}.safetensors`)), name);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }));

test('assertGolden on a model: encode, forward_intermediates and a loss, the same bits under every policy', async () =>
  withEnv(NOCI, async () => {
    const dir = temp();
    try {
      const vt = await engine('simd');
      const { meta, tensors } = readSafetensors(fixture('vit_forward_intermediates_norm1.safetensors'));
      const model = vt.createModel({ kind: 'lightly', config: meta.config });
      model.loadSafetensors(fixture('vit_forward_intermediates_norm1.safetensors'), { filePrefix: 'param/' });
      const images = f32(tensors['input/images']);
      for (const policy of ['none', 'block', 'sqrt']) {
        model.setGradCheckpointing(policy);
        const st = [
          assertGolden('encode', () => model.encode(images), { dir }).status,
          assertGolden('intermediates', () => model.forwardIntermediates(images, { norm: true }), { dir }).status,
        ];
        assert.deepEqual(st, policy === 'none' ? ['recorded', 'recorded'] : ['matched', 'matched'], policy);
      }
      const g = readSafetensors(readFileSync(path.join(dir, 'intermediates.safetensors'))).tensors;
      assert.deepEqual(Object.keys(g), ['out', 'intermediates.0', 'intermediates.1', 'intermediates.2']);
      // a changed parameter changes the encoding: the golden catches it
      model.params()[3].data[0] += 1e-3;
      assert.throws(
        () => assertGolden('encode', () => model.encode(images), { dir }),
        /tensor value \(F32 \[2, 17, 64\]\): \d+ of 2176 values changed/,
      );
      model.dispose();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }));
