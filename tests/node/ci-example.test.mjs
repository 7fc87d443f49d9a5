// ci-example.test.mjs: docs/ci-example.yml's `node --test` step against both ways Node reads its
// arguments, whatever Node runs this test. Node <= 20 takes paths (a folder is searched for test
// files; a glob is a path that does not exist); Node >= 21 takes globs (a bare folder matches
// itself and is then run as a file, which fails). The step's arguments are expanded by bash as the
// workflow's `run:` expands them, in a project laid out as docs/testing.md lays it out; each form
// must then run exactly the project's test files. tests/package/package.test.mjs runs the steps.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  mkdtempSync,
  mkdirSync,
  writeFileSync,
  readFileSync,
  readdirSync,
  statSync,
  rmSync,
  existsSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { REPO } from './util.mjs';

const WORKFLOW = readFileSync(path.join(REPO, 'docs/ci-example.yml'), 'utf8');

// every path under dir (files and folders), relative, '/'-separated; node_modules left out
function walk(dir, rel = '') {
  const out = [];
  for (const e of readdirSync(path.join(dir, rel), { withFileTypes: true })) {
    if (e.name === 'node_modules') continue;
    const p = rel ? `${rel}/${e.name}` : e.name;
    out.push(p);
    if (e.isDirectory()) out.push(...walk(dir, p));
  }
  return out;
}

// Node <= 20's test files in a folder: test.{js,cjs,mjs}, test-*, *.test.*, *-test.*, *_test.*, and
// every .js / .cjs / .mjs file in a folder named test
const JS = /\.(c|m)?js$/;
const node20Name = (p) =>
  JS.test(p) &&
  (/(^|\/)test(\.|-)[^/]*$/.test(p) ||
    /[.\-_]test\.(c|m)?js$/.test(p) ||
    p
      .split('/')
      .slice(0, -1)
      .some((d) => d === 'test'));

/** The files `node --test ARGS` runs in cwd as Node <= 20 reads ARGS (paths), or why it fails. */
export function asNode20(args, cwd) {
  const files = [];
  for (const a of args) {
    const full = path.join(cwd, a);
    if (!existsSync(full)) return { error: `Could not find '${full}'` };
    if (statSync(full).isDirectory()) {
      const base = path.relative(cwd, full).split(path.sep).join('/');
      for (const p of walk(full))
        if (statSync(path.join(full, p)).isFile() && node20Name(`${base}/${p}`))
          files.push(path.posix.normalize(`${base}/${p}`));
    } else files.push(path.posix.normalize(a));
  }
  return { files: [...new Set(files)].sort() };
}

// glob(7) as Node 21+'s test runner matches it: * and ? within a segment, ** across segments
function globRegex(g) {
  let re = '';
  for (let i = 0; i < g.length; i++) {
    const c = g[i];
    if (c === '*' && g[i + 1] === '*') {
      re += g[i + 2] === '/' ? '(?:.*/)?' : '.*';
      i += g[i + 2] === '/' ? 2 : 1;
    } else if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${re.replace(/\/$/, '')}$`);
}

/** The files `node --test ARGS` runs in cwd as Node >= 21 reads ARGS (globs), or why it fails. */
export function asNode22(args, cwd) {
  const all = walk(cwd),
    files = [];
  for (const a of args) {
    const re = globRegex(path.posix.normalize(a)),
      hits = all.filter((p) => re.test(p));
    if (!hits.length) return { error: `Could not find '${path.join(cwd, a)}'` };
    for (const h of hits) {
      if (statSync(path.join(cwd, h)).isDirectory()) return { error: `Cannot find module '${path.join(cwd, h)}'` };
      files.push(h);
    }
  }
  return { files: [...new Set(files)].sort() };
}

// the positional arguments of a `node --test ...` command line after bash has expanded it in cwd
function expanded(step, cwd) {
  const r = spawnSync('bash', ['-c', `set -- ${step.replace(/^node\s+/, '')}; printf '%s\\0' "$@"`], {
    cwd,
    encoding: 'utf8',
  });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout
    .split('\0')
    .filter(Boolean)
    .filter((a) => !a.startsWith('-'));
}

// a project as docs/testing.md lays it out: test files, a helper, the dump and its goldens
function project() {
  const d = mkdtempSync(path.join(tmpdir(), 'vitrine-ci-'));
  mkdirSync(path.join(d, 'test/goldens'), { recursive: true });
  mkdirSync(path.join(d, 'reports'));
  for (const f of ['test/vit.test.mjs', 'test/more.test.mjs', 'test/helpers.mjs']) writeFileSync(path.join(d, f), '');
  writeFileSync(path.join(d, 'test/vit_tiny.safetensors'), '');
  writeFileSync(path.join(d, 'test/goldens/vit_tiny_encode.safetensors'), '');
  return d;
}

const nodeStep = (yml) => {
  const steps = [...yml.matchAll(/^ +run: (node --test .*)$/gm)].map((m) => m[1]);
  assert.equal(steps.length, 1, 'one `node --test` step');
  return steps[0];
};

test("docs/ci-example.yml's node --test step runs the project's test files on Node 20 and on Node 22", () => {
  const d = project();
  try {
    const want = ['test/more.test.mjs', 'test/vit.test.mjs'];
    const args = expanded(nodeStep(WORKFLOW), d);
    assert.deepEqual(asNode20(args, d), { files: want }, `Node 20 reading ${JSON.stringify(args)}`);
    assert.deepEqual(asNode22(args, d), { files: want }, `Node 22 reading ${JSON.stringify(args)}`);
    // and the workflow runs both
    assert.match(WORKFLOW, /node: \[20, 22\]/);
    assert.match(WORKFLOW, /node-version: \$\{\{ matrix\.node \}\}/);
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});

test('the two readings tell the forms apart: a bare folder fails on Node 22, a quoted glob on Node 20', () => {
  const d = project();
  try {
    const bare = expanded('node --test test/', d),
      quoted = expanded(`node --test 'test/**/*.test.mjs'`, d);
    assert.deepEqual(asNode20(bare, d).files, ['test/helpers.mjs', 'test/more.test.mjs', 'test/vit.test.mjs']);
    assert.match(asNode22(bare, d).error, /Cannot find module '.*test'/);
    assert.match(asNode20(quoted, d).error, /Could not find '.*test\/\*\*\/\*\.test\.mjs'/);
    assert.deepEqual(asNode22(quoted, d).files, ['test/more.test.mjs', 'test/vit.test.mjs']);
    // this machine's Node says the same as its reading (the reading of the other Node is the model's)
    const major = Number(process.versions.node.split('.')[0]);
    for (const [args, why] of [
      [bare, 'a bare folder'],
      [quoted, 'a quoted glob'],
    ]) {
      writeFileSync(path.join(d, 'test/vit.test.mjs'), "import { test } from 'node:test';\ntest('x', () => {});\n");
      writeFileSync(path.join(d, 'test/more.test.mjs'), "import { test } from 'node:test';\ntest('y', () => {});\n");
      const env = { ...process.env };
      delete env.NODE_TEST_CONTEXT;
      const r = spawnSync(process.execPath, ['--test', ...args], { cwd: d, env, encoding: 'utf8' });
      const model = major <= 20 ? asNode20(args, d) : asNode22(args, d);
      assert.equal(r.status === 0, !model.error, `${why} on Node ${process.versions.node}: ${r.stdout}${r.stderr}`);
    }
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});
