// testing-example.ts: typed use of vitrine/testing, checked by tsc --noEmit against the shipped
// testing.d.ts (a Node project). The @ts-expect-error lines fail the check if the types were too loose.
import {
  assertParity,
  assertGolden,
  PARITY_TOLERANCE,
  type GoldenStatus,
  type TolerancedParityResult,
} from 'vitrine/testing';
import type { Model } from 'vitrine';

export async function check(model: Model, images: Float32Array): Promise<number> {
  const r: TolerancedParityResult = await assertParity(new URL('./model.safetensors', import.meta.url), {
    wasm: 'simd',
    policy: 'block',
    tolerance: PARITY_TOLERANCE / 10,
  });
  const g: GoldenStatus = assertGolden('encode', () => model.encode(images), {
    dir: new URL('./goldens', import.meta.url),
    t: { diagnostic: (m: string) => void m },
  });
  const said: string = g.report;
  void said;
  // @ts-expect-error: t is a test context (t.diagnostic)
  assertGolden('t', 1, { t: {} });
  const p: Promise<GoldenStatus> = assertGolden('loss', async () => model.loss(images), { tolerance: 1e-6 });
  await p;
  // @ts-expect-error: a build is a wasm build's name
  await assertParity('x.safetensors', { wasm: 'avx512' });
  // @ts-expect-error: a backend is where the call runs (wasm, webgpu), not a build
  await assertParity('x.safetensors', { backend: 'simd' });
  // @ts-expect-error: assertParity returns a promise
  const sync: TolerancedParityResult = assertParity('x.safetensors');
  // @ts-expect-error: a golden holds numbers, typed arrays, { data, shape } and objects of these
  assertGolden('s', () => 'text');
  void sync;
  return g.status === 'matched' ? (r.err ?? 0) : r.tolerance;
}
