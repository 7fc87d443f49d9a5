// golden-cli.test.mjs: `vitrine golden show` and `vitrine golden diff` on goldens assertGolden
// recorded: what they print (shapes, dtypes, statistics, first values; the elements that differ),
// their exit status (diff: 0 the same, 1 different, 2 unreadable) and their usage errors.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { REPO } from './util.mjs';
import { assertGolden } from '../../web/testing.js';

const CLI = path.join(REPO, 'web/cli.js');
const golden = (args, cwd) => spawnSync(process.execPath, [CLI, 'golden', ...args], { cwd, encoding: 'utf8' });
const quiet = { diagnostic() {} };

function goldens() {
  const d = mkdtempSync(path.join(tmpdir(), 'vitrine-golden-'));
  const env = { CI: process.env.CI, U: process.env.VITRINE_UPDATE_GOLDENS };
  delete process.env.CI;
  delete process.env.VITRINE_UPDATE_GOLDENS;
  try {
    const out = (x, y) => ({ data: Float32Array.from([1, 2, x, -0.5, NaN, y]), shape: [2, 3] });
    assertGolden('a', { out: out(3, 7), loss: 0.25, n: 5n }, { dir: path.join(d, 'old'), t: quiet });
    assertGolden(
      'a',
      { out: out(Math.fround(3 + 2 ** -22), 8), loss: 0.25, ok: true },
      { dir: path.join(d, 'new'), t: quiet },
    );
    assertGolden('a', { out: out(3, 7), loss: 0.25, n: 5n }, { dir: path.join(d, 'same'), t: quiet });
  } finally {
    if (env.CI !== undefined) process.env.CI = env.CI;
    if (env.U !== undefined) process.env.VITRINE_UPDATE_GOLDENS = env.U;
  }
  return d;
}

test("vitrine golden show: each tensor's dtype, shape, statistics and first values", () => {
  const d = goldens();
  try {
    const r = golden(['show', 'old/a.safetensors', '--values', '4'], d);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(
      r.stdout,
      [
        'old/a.safetensors: golden "a", 3 tensors, 40 bytes of data',
        '  out   F32 [2, 3]          min -0.5  max 7  mean 2.5  std 2.52982  1 NaN',
        '        first: 1, 2, 3, -0.5, ... (6 values)',
        '  loss  F64 []              min 0.25  max 0.25  mean 0.25  std 0',
        '        first: 0.25',
        '  n     I64 []              min 5  max 5  mean 5  std 0',
        '        first: 5',
        '',
      ].join('\n'),
    );
    const two = golden(['show', 'old/a.safetensors', 'new/a.safetensors'], d);
    assert.equal(two.status, 0);
    assert.match(two.stdout, /new\/a\.safetensors: golden "a", 3 tensors[\s\S]*ok +BOOL \[\] +min 1 +max 1/);
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});

test('vitrine golden diff: the differing elements, tensors only in one file; exit 0 / 1 / 2', () => {
  const d = goldens();
  try {
    let r = golden(['diff', 'old/a.safetensors', 'new/a.safetensors'], d);
    assert.equal(r.status, 1, r.stderr);
    assert.equal(
      r.stdout,
      [
        '--- old/a.safetensors: golden "a"',
        '+++ new/a.safetensors: golden "a"',
        'tensor out (F32 [2, 3]): 2 of 6 values differ; max |new/a.safetensors - old/a.safetensors| 1.000e+00, err 1.429e-01',
        '  [0, 2] (element 2)  3 -> 3.000000238418579',
        '  [1, 2] (element 5)  7 -> 8',
        'tensor n (I64 []): only in old/a.safetensors',
        'tensor ok (BOOL []): only in new/a.safetensors',
        '3 tensors differ, 1 the same bit for bit',
        '',
      ].join('\n'),
    );
    r = golden(['diff', 'old/a.safetensors', 'new/a.safetensors', '--max', '1'], d);
    assert.match(
      r.stdout,
      / {2}\[0, 2\] \(element 2\) {2}3 -> 3\.000000238418579\n {2}\.\.\. 1 more \(--max N shows more\)\n/,
    );
    r = golden(['diff', 'old/a.safetensors', 'same/a.safetensors'], d);
    assert.equal(r.status, 0, r.stdout);
    assert.match(r.stdout, /^the same: 3 tensors, bit for bit$/m);
    // a NaN equals a NaN, a -0 is not 0 (assertGolden's rule)
    writeFileSync(
      path.join(d, 'z.mjs'),
      `import { encodeSafetensors } from ${JSON.stringify(path.join(REPO, 'web/testing.js'))};
import { writeFileSync } from 'node:fs';
const f = (v) => encodeSafetensors([{ name: 'x', dtype: 'F32', shape: [2], bytes: new Uint8Array(Float32Array.from(v).buffer) }], { format: 'vitrine-golden/1', name: 'z' });
writeFileSync('z0.safetensors', f([0, NaN])); writeFileSync('z1.safetensors', f([-0, NaN]));`,
    );
    assert.equal(spawnSync(process.execPath, ['z.mjs'], { cwd: d }).status, 0);
    r = golden(['diff', 'z0.safetensors', 'z1.safetensors'], d);
    assert.equal(r.status, 1);
    assert.match(r.stdout, /tensor x \(F32 \[2\]\): 1 of 2 values differ[^\n]*\n {2}\[0\] {2}0 -> -0\n/);
    r = golden(['diff', 'old/a.safetensors', 'new/a.safetensors', '--tolerance', '0.5'], d);
    assert.equal(r.status, 1); // n and ok are in one file only, whatever the tolerance
    assert.doesNotMatch(r.stdout, /tensor out/);
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});

test('vitrine golden: usage errors and unreadable files in one line, exit 2; --help for each', () => {
  const d = goldens();
  try {
    writeFileSync(path.join(d, 'bad.safetensors'), 'not a golden');
    for (const [args, re] of [
      [[], /^vitrine golden: show or diff \(vitrine golden show FILE\.\.\. \| vitrine golden diff A B\)\n$/],
      [['frob'], /^vitrine golden: unknown subcommand 'frob' \(show or diff\)\n$/],
      [['show'], /^vitrine golden show: give a FILE/],
      [['diff', 'old/a.safetensors'], /^vitrine golden diff: give two files A B \(got 1\)/],
      [
        ['show', 'missing.safetensors'],
        /^vitrine golden show: cannot read missing\.safetensors: No such file or directory\n$/,
      ],
      [
        ['diff', 'old/a.safetensors', 'bad.safetensors'],
        /^vitrine golden diff: bad\.safetensors: not a golden it can read \(safetensors: /,
      ],
      [['show', '--values', 'x', 'old/a.safetensors'], /^vitrine golden show: --values: 'x' is not a whole number/],
    ]) {
      const r = golden(args, d);
      assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, re, args.join(' '));
      assert.equal(r.stderr.trim().split('\n').length, 1);
    }
    for (const args of [['--help'], ['show', '--help'], ['diff', '--help']]) {
      const r = golden(args, d);
      assert.equal(r.status, 0);
      assert.match(r.stdout, /^usage: vitrine golden/);
    }
    const top = spawnSync(process.execPath, [CLI, '--help'], { encoding: 'utf8' });
    assert.match(top.stdout, /\n {2}golden +read goldens/);
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});
