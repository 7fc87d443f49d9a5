// The benchmark's verdicts on its thread targets (bench/lib.mjs, used by bench/run.mjs section 9):
// a speedup below the target is "not measurable" only when the peak loop timed beside it could not
// reach the target either (the two vCPUs were one core's hardware threads), otherwise a plain "no".
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { threadVerdict, SHARED_CORE } from '../../bench/lib.mjs';

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
