// The benchmark's verdicts on its thread targets (bench/lib.mjs, used by bench/run.mjs section 9):
// a speedup below the target is "not measurable" only when the peak loop timed beside it could not
// reach the target either (the two vCPUs were one core's hardware threads), otherwise a plain "no".
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { threadVerdict, SHARED_CORE } from '../../bench/lib.mjs';
import { REPO } from './util.mjs';

test('a thread target is met, missed, or not measurable on the cores the run had', () => {
  assert.equal(threadVerdict(1.84, 1.8, 1.98), 'yes');
  assert.equal(threadVerdict(1.84, 1.8, 0.99), 'yes'); // met is met, whatever the probe said
  assert.equal(threadVerdict(1.71, 1.8, 1.97), '**no**'); // two cores there, the step did not use them
  assert.equal(threadVerdict(1.71, 1.8, null), '**no**'); // no probe: no excuse
  assert.equal(threadVerdict(1.71, 1.8, NaN), '**no**');
  assert.match(threadVerdict(1.71, 1.8, 1.04), /^not measurable here \(the peak loop's own 2t\/1t: 1\.04\)$/);
  assert.equal(threadVerdict(1.79, 1.8, 1.8), '**no**'); // a ceiling at the target is no excuse
  assert.equal(threadVerdict(null, 1.8, 1.0), '–');
  assert.ok(SHARED_CORE > 1 && SHARED_CORE < 1.8);
});

// bench/run.mjs renders its tables from a results.json (--from) into another folder (--out): the
// shared-core banner and the verdicts come out of the measurements as above.

function results(ceiling, ms2) {
  const run = (label, threads, ms, cores) => ({
    label,
    threads,
    ms,
    ms_median: ms[1],
    images_per_s: 64000 / ms[1],
    cores_used: { median: cores },
    vs_first: { median: ms[1] / 100, min: ms[1] / 100, max: ms[1] / 100 },
  });
  const pair = () => ({
    same_bits: [{ run: 'this tree relaxed-mt 2t', against: 'this tree relaxed-mt 1t', same: true }],
    runs: [run('this tree relaxed-mt 1t', 1, [100, 100, 100], 1), run('this tree relaxed-mt 2t', 2, ms2, 1.98)],
  });
  const peak = { scaling: ceiling, scaling_min: ceiling, scaling_max: ceiling };
  return {
    date: '2026-12-02T00:00:00Z',
    commit: 'test',
    notes: [],
    host: { cpu: 'a test CPU', cores: 2, isa: 'AVX2 + FMA3', fma: true, node: 'v20', v8: '11' },
    sections: {
      two_cores: {
        rounds: [1, 4].flatMap((batch) => [0, 1, 2].map((round) => ({ batch, round, load: 1, vitrine: pair(), peak }))),
      },
      main_job: {
        peak_before: peak,
        peak_after: peak,
        out: { rounds: 3, warmup: 1, loadavg_start: [1], loadavg_end: [1], ...pair() },
      },
    },
  };
}
function render(R) {
  const dir = mkdtempSync(join(tmpdir(), 'vitrine-bench-'));
  try {
    writeFileSync(join(dir, 'in.json'), JSON.stringify(R));
    const out = join(dir, 'out'); // made by run.mjs; results.md names it, not bench/
    const r = spawnSync(process.execPath, [join(REPO, 'bench/run.mjs'), '--from', join(dir, 'in.json'), '--out', out], {
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, r.stderr);
    const md = readFileSync(join(out, 'results.md'), 'utf8');
    assert.ok(md.includes(`Raw numbers: ${out}/results.json.`), md.slice(-200));
    assert.ok((r.stdout + r.stderr).includes(`wrote ${out}/results.md and ${out}/results.json`));
    return md;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
const targets = (md) =>
  md
    .slice(md.indexOf('## 9.'))
    .split('\n')
    .filter((l) => l.startsWith('| 2 threads'));

test('bench/run.mjs: two vCPUs on one core are said, and make the thread targets not measurable', () => {
  const md = render(results(1.01, [60, 60, 60])); // 1.67x while the peak loop itself scaled 1.01x
  assert.match(
    md,
    /\*\*Two vCPUs, one core's arithmetic\*\*: the peak loop .* ran 1\.01–1\.01 times as fast on 2 threads/,
  );
  const t = targets(md);
  assert.equal(t.length, 3, t.join('\n'));
  for (const l of t) assert.match(l, /\| not measurable here \(the peak loop's own 2t\/1t: 1\.01\) \|$/);
});

test('bench/run.mjs: on two real cores a missed thread target is a plain no, a met one yes', () => {
  const md = render(results(1.97, [60, 60, 60])); // 1.67x: below 1.8 and 1.7
  assert.doesNotMatch(md, /one core's arithmetic/);
  for (const l of targets(md)) assert.match(l, /\| \*\*no\*\* \|$/);
  for (const l of targets(render(results(1.97, [52, 52, 52])))) assert.match(l, /\| yes \|$/); // 1.92x
});
