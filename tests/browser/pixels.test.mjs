// pixels.test.mjs: one pixel pipeline (web/formats/images.js) for Node and the browser. The same image
// files go through Node (web/train/node-data.js decodeImage: pngjs / jpeg-js) and through Chromium (the
// page imports web/formats/images.js: decodeBlob, i.e. createImageBitmap), then resizeCrop (shorter side
// to the size, centre crop, channels) and makeBatch (normalise) in each, at the sizes and channels
// of the demo's models (shrinking, growing, grey and colour). PNG is lossless: the same floats,
// bit for bit. JPEG: the two decoders (jpeg-js, Chromium's libjpeg-turbo) round their inverse DCT
// and colour conversion differently, by a few levels (the bound is asserted and printed); the
// pipeline after decoding, given the pixels Node decoded, gives Node's floats bit for bit in the page.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { skip, png, openDemoBrowser } from './harness.mjs';
import { decodeImage } from '../../web/train/node-data.js';
import { resizeCrop, makeBatch } from '../../web/formats/images.js';

if (skip) console.log(`# ${skip}`);
const require = createRequire(import.meta.url);
const JPEG_LEVELS = 3; // the decoders' largest difference on these files (measured: 3 colour, 1 grey)

let seed = 7;
const rnd = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 4294967296;
function rgba(w, h, f) {
  const d = new Uint8Array(w * h * 4);
  for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) d.set([...f(x, y), 255], 4 * (y * w + x));
  return d;
}
function pngOf(w, h, data, colorType) {
  // pngjs: colour type 0 (grey), 6 (RGBA)
  const { PNG } = require('pngjs');
  const p = new PNG({ width: w, height: h, colorType, inputColorType: 6 });
  p.data.set(data);
  return PNG.sync.write(p, { colorType, inputColorType: 6 });
}
const colour = rgba(41, 30, (x, y) => [Math.min(255, x * 6 + ((rnd() * 40) | 0)), Math.min(255, y * 8), (x * y) & 255]);
const grey = rgba(33, 30, (x, y) => {
  const v = ((x * 9) ^ (y * 7)) & 255;
  return [v, v, v];
});
const FILES = {
  'rgb.png': png(41, 30, (x, y) => Array.from(colour.subarray(4 * (y * 41 + x), 4 * (y * 41 + x) + 3))),
  'rgba.png': pngOf(41, 30, colour, 6),
  'grey.png': pngOf(33, 30, grey, 0),
  'colour.jpg': require('jpeg-js').encode({ data: colour, width: 41, height: 30 }, 90).data,
  'grey.jpg': require('jpeg-js').encode({ data: grey, width: 33, height: 30 }, 90).data,
};
const TARGETS = [
  [28, 1],
  [32, 3],
  [64, 3],
  [16, 1],
]; // the demo's 28 px grey and 32 px RGB models; growing; shrinking
const hex = (f) => Buffer.from(f.buffer, f.byteOffset, f.byteLength).toString('hex');

/** Node's side: decode, then the pipeline at every target: { rgba, out: { 'size/chans': hex } }. */
function viaNode(bytes) {
  const im = decodeImage(new Uint8Array(bytes)),
    out = {};
  for (const [size, chans] of TARGETS) {
    const ds = { chans, size, pixels: resizeCrop(im.data, im.width, im.height, 4, size, chans) };
    out[`${size}/${chans}`] = hex(makeBatch(ds, [0]));
  }
  return { rgba: Array.from(im.data), out };
}

describe('the pixel pipeline in Node and in Chromium', { skip, timeout: 120_000 }, () => {
  let page, close;
  before(async () => {
    let openPage;
    ({ page, close, openPage } = await openDemoBrowser());
    await openPage();
  });
  after(async () => {
    if (close) await close();
  });

  // the page's side: decodeBlob, then the same pipeline; with `rgba`, the pipeline on those pixels
  const viaPage = (bytes, rgbaIn = null) =>
    page.evaluate(
      async ({ b64, targets, rgbaIn }) => {
        const { decodeBlob, resizeCrop, makeBatch } = await import('/web/formats/images.js');
        const u8 = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const im = rgbaIn ? { ...rgbaIn, data: Uint8Array.from(rgbaIn.data) } : await decodeBlob(new Blob([u8]));
        const hexOf = (f) =>
          Array.from(new Uint8Array(f.buffer, f.byteOffset, f.byteLength), (b) => b.toString(16).padStart(2, '0')).join(
            '',
          );
        const out = {};
        for (const [size, chans] of targets)
          out[`${size}/${chans}`] = hexOf(
            makeBatch({ chans, size, pixels: resizeCrop(im.data, im.width, im.height, 4, size, chans) }, [0]),
          );
        return { rgba: Array.from(im.data), width: im.width, height: im.height, out };
      },
      { b64: Buffer.from(bytes).toString('base64'), targets: TARGETS, rgbaIn },
    );

  for (const name of Object.keys(FILES).filter((f) => f.endsWith('.png'))) {
    test(`${name}: the same pixels and the same normalised floats, bit for bit`, async () => {
      const n = viaNode(FILES[name]),
        b = await viaPage(FILES[name]);
      assert.deepEqual(b.rgba, n.rgba, 'decoded pixels');
      assert.deepEqual(b.out, n.out, 'resized, cropped, normalised');
    });
  }

  for (const name of Object.keys(FILES).filter((f) => f.endsWith('.jpg'))) {
    test(`${name}: decoders within ${JPEG_LEVELS} levels; the pipeline on the same pixels bit for bit`, async () => {
      const n = viaNode(FILES[name]),
        b = await viaPage(FILES[name]);
      let max = 0,
        differ = 0;
      n.rgba.forEach((v, i) => {
        const d = Math.abs(v - b.rgba[i]);
        max = Math.max(max, d);
        differ += d > 0;
      });
      console.log(`# ${name}: jpeg-js and Chromium differ in ${differ} of ${n.rgba.length} values, by at most ${max}`);
      assert.ok(max <= JPEG_LEVELS, `${name}: the decoders differ by ${max} levels`);
      const im = decodeImage(new Uint8Array(FILES[name]));
      const same = await viaPage(FILES[name], { width: im.width, height: im.height, data: Array.from(im.data) });
      assert.deepEqual(same.out, n.out, "the pipeline on Node's pixels, in the page");
    });
  }
});
