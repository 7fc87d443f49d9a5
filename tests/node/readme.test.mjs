// readme.test.mjs: the README is true of the code. Its app example runs as written (with 'vitrine'
// resolved to this repository, as an installed package resolves); its `plan` output is what plan
// prints; its policy table names the engine's policies, its build table wasm/builds.json's builds,
// its command line the CLI's commands; every file it and docs/ link exists; it stays short.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  readFileSync,
  readdirSync,
  existsSync,
  mkdtempSync,
  mkdirSync,
  symlinkSync,
  writeFileSync,
  rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { REPO, WASM_DIR, engine } from './util.mjs';

const README = readFileSync(path.join(REPO, 'README.md'), 'utf8');
const CLI = path.join(REPO, 'web/cli.js');
const env = { ...process.env, VITRINE_WASM_DIR: WASM_DIR };
const tableOf = (heading) => {
  const part = README.slice(README.indexOf(`## ${heading}`));
  return [...part.slice(0, part.indexOf('\n## ', 3)).matchAll(/^\| `([^`]+)`/gm)].map((m) => m[1]);
};

test('README: at most 200 lines, the two commands of the quick start', () => {
  assert.ok(README.split('\n').length <= 200, `${README.split('\n').length} lines`);
  assert.match(README, /^ {4}bash scripts\/setup\.sh /m);
  assert.match(README, /^ {4}bash scripts\/test\.sh /m);
});

test('README: the app example runs as written', () => {
  const code = /```js\n([\s\S]*?)```/.exec(README)[1];
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-readme-'));
  try {
    mkdirSync(path.join(dir, 'node_modules'));
    symlinkSync(REPO, path.join(dir, 'node_modules/vitrine'), 'dir');
    writeFileSync(path.join(dir, 'package.json'), '{"type": "module"}');
    writeFileSync(path.join(dir, 'example.mjs'), code);
    const r = spawnSync(process.execPath, ['example.mjs'], { cwd: dir, env, encoding: 'utf8', timeout: 120000 });
    assert.equal(r.status, 0, r.stderr);
    const losses = [...r.stdout.matchAll(/loss ([\d.]+)/g)].map((m) => Number(m[1]));
    assert.equal(losses.length, 3, r.stdout);
    assert.ok(losses[2] < losses[0], `the loss did not fall: ${losses}`);
    const [, withCk, without] = /([\d.]+) MiB with checkpointing, ([\d.]+) MiB without/.exec(r.stdout).map(Number);
    assert.ok(withCk < without, r.stdout);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('README: the plan it shows is what plan prints', () => {
  const block = /^ {4}\$ node web\/cli\.js (plan[^\n]*)\n((?: {4}[^\n]*\n)+)/m.exec(README);
  const r = spawnSync(process.execPath, [CLI, ...block[1].split(' ')], { env, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, block[2].replace(/^ {4}/gm, ''));
});

test('README: policies from the engine, builds from wasm/builds.json, commands from the CLI', async () => {
  const vt = await engine('simd');
  assert.deepEqual(tableOf('Gradient checkpointing'), vt.policies());
  const builds = Object.keys(JSON.parse(readFileSync(path.join(REPO, 'wasm/builds.json'), 'utf8')).builds);
  const named = [
    ...README.slice(README.indexOf('## Builds'))
      .split('\n## ')[0]
      .matchAll(/^\| `([^`]+)`(?: \(`([^`]+)`\))?/gm),
  ].flatMap((m) => m.slice(1).filter(Boolean));
  assert.deepEqual(named.sort(), builds.sort());
  const help = spawnSync(process.execPath, [CLI, '--help'], { encoding: 'utf8' });
  const commands = [...help.stdout.matchAll(/^ {2}(\w+) {2,}/gm)].map((m) => m[1]);
  const glance = [...new Set([...README.matchAll(/^ {4}vitrine (\w+) /gm)].map((m) => m[1]))];
  assert.deepEqual(glance.sort(), commands.sort());
});

test('README and docs/: every file they link exists', () => {
  const docs = readdirSync(path.join(REPO, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`);
  for (const file of ['README.md', 'bench/README.md', 'wasm/README.md', ...docs]) {
    const text = readFileSync(path.join(REPO, file), 'utf8');
    for (const [, link] of text.matchAll(/\]\(([^)#]+)(?:#[^)]*)?\)/g)) {
      if (/^[a-z]+:/.test(link)) continue;
      const target = path.relative(REPO, path.resolve(path.dirname(path.join(REPO, file)), link));
      assert.ok(existsSync(path.join(REPO, target)), `${file} links ${link}, which does not exist`);
    }
  }
});
