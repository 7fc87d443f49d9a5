// datasets.test.mjs: what a run reads (web/train/datasets.js): timm's augmentation names (hflip,
// RandomResizedCrop scale / ratio) parsed and drawn from (seed, step, slot) -- the same draws for the
// same step, a box always inside the image at the area and aspect asked for --, batches that are
// the same bits whatever the cache holds, the held-out split of a fraction, and data refused with
// its reason.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseAugment, augmentText, randomResizedCropBox } from '../../web/train/augment.js';
import { openSource, Batches, splitFraction } from '../../web/train/datasets.js';
import { rng32 } from '../../web/train/data-order.js';

const stripes = (n = 12, size = 20) => {
  const pixels = new Uint8Array(n * size * size);
  for (let i = 0; i < n; i++)
    for (let k = 0; k < size * size; k++)
      pixels[i * size * size + k] = ((k % size) * 12 + i * 7 + ((k / size) | 0) * 3) % 256;
  return {
    kind: 'pixels',
    pixels,
    n,
    size,
    chans: 1,
    labels: Array.from({ length: n }, (_, i) => i % 3),
    classes: ['a', 'b', 'c'],
  };
};

test("augmentation: timm's names parsed, written back, refused when wrong", () => {
  assert.deepEqual(parseAugment('hflip'), { flip: false, shift: 0, hflip: 0.5, rrc: null });
  assert.deepEqual(parseAugment('rrc').rrc, { scale: [0.08, 1], ratio: [0.75, 4 / 3] });
  assert.deepEqual(parseAugment('hflip:0.25,rrc:0.2-1:0.5-2'), {
    flip: false,
    shift: 0,
    hflip: 0.25,
    rrc: { scale: [0.2, 1], ratio: [0.5, 2] },
  });
  for (const t of ['hflip', 'hflip:0.25,rrc:0.2-1:0.5-2', 'rrc,flip,shift:3', 'none'])
    assert.equal(augmentText(parseAugment(augmentText(parseAugment(t)))), augmentText(parseAugment(t)));
  for (const bad of ['', 'hflip:0', 'hflip:1.5', 'rrc:0.5-0.2', 'rrc:0-1', 'rrc:0.2-1:2-1', 'rrc:x', 'vflip'])
    assert.throws(() => parseAugment(bad), /use none, or a comma list of hflip/, bad);
});

test('RandomResizedCrop: every box inside the image, its area and aspect within scale and ratio (else the centre crop)', () => {
  const r = rng32(5),
    u = () => r() / 4294967296,
    spec = { scale: [0.2, 0.9], ratio: [0.75, 4 / 3] };
  let fallback = 0;
  for (let t = 0; t < 2000; t++) {
    const W = 20 + (t % 37),
      H = 15 + (t % 23),
      b = randomResizedCropBox(W, H, spec, u);
    assert.ok(
      b.w > 0 && b.h > 0 && b.x >= 0 && b.y >= 0 && b.x + b.w <= W && b.y + b.h <= H,
      JSON.stringify({ W, H, b }),
    );
    const area = (b.w * b.h) / (W * H),
      aspect = b.w / b.h;
    if (b.w === W || b.h === H) {
      fallback++;
      continue;
    }
    // rounding w and h to whole pixels moves area and aspect a little off the drawn values
    assert.ok(
      area > 0.2 * 0.7 && area < 0.9 * 1.3 && aspect > 0.75 * 0.8 && aspect < (4 / 3) * 1.25,
      JSON.stringify({ W, H, b, area, aspect }),
    );
  }
  assert.ok(fallback < 400, `${fallback} of 2000 boxes were the whole image or the fallback`);
});

test('batches: augmentation drawn from (seed, step, slot); the same bits whatever the cache; hflip:1 mirrors', async () => {
  const src = await openSource(stripes()),
    idx = Int32Array.from([0, 5, 7, 11]);
  const mk = (augment, cacheBytes) =>
    new Batches(src, { size: 24, chans: 1, augment: augment && parseAugment(augment), augmentSeed: 9n, cacheBytes });
  const a = mk('hflip,rrc:0.3-1'),
    b = mk('hflip,rrc:0.3-1', 1); // b: no cache at all
  const s3 = await a.batch(idx, 3),
    again = await b.batch(idx, 3),
    s4 = await a.batch(idx, 4);
  assert.deepEqual(again, s3, 'the same step draws the same');
  assert.notDeepEqual(s4, s3, 'another step draws otherwise');
  assert.deepEqual(await a.batch(idx), await mk(null).batch(idx), 'no step (evaluation): no augmentation');
  const plain = await mk(null).batch(idx),
    mirrored = await mk('hflip:1').batch(idx, 0),
    S = 24;
  for (let j = 0; j < 4; j++)
    for (let y = 0; y < S; y++)
      for (let x = 0; x < S; x++) assert.equal(mirrored[j * S * S + y * S + x], plain[j * S * S + y * S + (S - 1 - x)]);
  // at the source's own size nothing is resized: in place, as before
  const same = new Batches(src, { size: 20, chans: 1 });
  assert.equal(same.inPlace, true);
});

test('splits and refusals', async () => {
  assert.deepEqual(Array.from(splitFraction(12, 0.2).val), [4, 9]);
  assert.deepEqual(Array.from(splitFraction(5, 0).val), []);
  assert.throws(() => splitFraction(5, 1), /val: a fraction in \[0, 1\)/);
  await assert.rejects(openSource({ ...stripes(), labels: [0, 1] }), /2 labels for 12 images/);
  await assert.rejects(
    openSource({ ...stripes(), labels: Array(12).fill(3) }),
    /labels\[0\] = 3 is not a class: there are 3 \(a, b, c\): 0\.\.2/,
  );
  await assert.rejects(
    openSource({ ...stripes(), pixels: new Uint8Array(7) }),
    /7 bytes, \[n, chans, size, size\] = \[12, 1, 20, 20\] needs 4800/,
  );
  await assert.rejects(openSource({ kind: 'urls', urls: [] }), /no images/);
  await assert.rejects(openSource({ kind: 'nope' }), /unknown kind "nope"/);
});
