// fuzz_images.mjs [--runs N | --seconds S] [--seed K]: a mutation fuzz loop over web/train/node-data.js's image
// path (header checks, the PNG data checks, pngjs, jpeg-js) in JS, seeded by images it makes itself
// (PNG of every colour type, bit depth and interlace; baseline JPEG). Every decode must either throw
// or return exactly what the header says (width, height, width*height*4 bytes, within the pixel
// cap), the same bytes when decoded again after another image (no stale memory), and none may take
// more than 2 s. Exit 1 with the failing input written to build/fuzz-images-crash.bin.
import { writeFileSync, mkdirSync } from 'node:fs';
import { deflateSync } from 'node:zlib';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { decodeImage, imageHeader } from '../../web/train/node-data.js';
import { chunk, PNG_SIGNATURE } from '../png_chunks.mjs';

const require = createRequire(import.meta.url);
const { PNG } = require('pngjs');
const jpeg = require('jpeg-js');
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

let seed = 12345;
const rand = () => {
  seed = (seed * 1103515245 + 12345) >>> 0;
  return seed / 2 ** 32;
};
const ri = (n) => Math.floor(rand() * n);

// a valid PNG of any type: rows of random bytes with random filters (filters decode anything)
function makePng(w, h, depth, ctype, interlace) {
  const ch = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 }[ctype],
    bits = ch * depth;
  const rows = [];
  const pass = (pw, ph) => {
    for (let y = 0; y < ph; y++) {
      rows.push(ri(5));
      for (let i = 0; i < Math.ceil((pw * bits) / 8); i++) rows.push(ri(256));
    }
  };
  if (!interlace) pass(w, h);
  else
    for (const [x0, y0, dx, dy] of [
      [0, 0, 8, 8],
      [4, 0, 8, 8],
      [0, 4, 4, 8],
      [2, 0, 4, 4],
      [0, 2, 2, 4],
      [1, 0, 2, 2],
      [0, 1, 1, 2],
    ]) {
      const pw = Math.ceil((w - x0) / dx),
        ph = Math.ceil((h - y0) / dy);
      if (pw > 0 && ph > 0) pass(pw, ph);
    }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = depth;
  ihdr[9] = ctype;
  ihdr[12] = interlace;
  const parts = [PNG_SIGNATURE, chunk('IHDR', ihdr)];
  if (ctype === 3) parts.push(chunk('PLTE', Buffer.from(Array.from({ length: 3 << depth }, () => ri(256)))));
  if (ctype === 3 && ri(2)) parts.push(chunk('tRNS', Buffer.from([ri(256), ri(256)])));
  parts.push(chunk('IDAT', deflateSync(Buffer.from(rows))), chunk('IEND', Buffer.alloc(0)));
  return Buffer.concat(parts);
}
function seeds() {
  const out = [];
  const types = { 0: [1, 2, 4, 8, 16], 2: [8, 16], 3: [1, 2, 4, 8], 4: [8, 16], 6: [8, 16] };
  for (const [ct, depths] of Object.entries(types))
    for (const d of depths) for (const il of [0, 1]) out.push(makePng(1 + ri(13), 1 + ri(13), d, Number(ct), il));
  const p = new PNG({ width: 9, height: 7 });
  for (let i = 0; i < p.data.length; i++) p.data[i] = ri(256);
  out.push(PNG.sync.write(p));
  for (const [w, h] of [
    [8, 8],
    [17, 5],
    [3, 30],
  ]) {
    const data = Buffer.from(Array.from({ length: w * h * 4 }, () => ri(256)));
    out.push(Buffer.from(jpeg.encode({ width: w, height: h, data }, 50 + ri(50)).data));
  }
  return out;
}
function mutate(b) {
  const x = Buffer.from(b);
  const n = 1 + ri(4);
  for (let k = 0; k < n; k++) {
    const op = ri(6),
      at = ri(x.length);
    if (op === 0) x[at] ^= 1 << ri(8);
    else if (op === 1) x[at] = ri(256);
    else if (op === 2 && x.length > 24)
      x.writeUInt32BE([0, 1, 65535, 30000, 1 << 20, ri(100)][ri(6)] >>> 0, 16 + 4 * ri(2)); // PNG dims
    else if (op === 3)
      return x.subarray(0, ri(x.length)); // truncation
    else if (op === 4)
      return Buffer.concat([
        x.subarray(0, at),
        Buffer.from(Array.from({ length: ri(16) }, () => ri(256))),
        x.subarray(at),
      ]);
    else if (op === 5 && x.length > 10) x.writeUInt16BE(ri(65536), Math.min(x.length - 2, at)); // JPEG lengths and dims
  }
  return x;
}

const args = process.argv.slice(2);
const opt = (k, d) => {
  const i = args.indexOf(k);
  return i >= 0 ? Number(args[i + 1]) : d;
};
const runs = opt('--runs', Infinity),
  seconds = opt('--seconds', runs === Infinity ? 60 : Infinity);
seed = opt('--seed', 12345);
const MAX = 4e6; // a low cap so that mutated headers meet it often
const corpus = seeds(),
  t0 = Date.now();
let n = 0,
  ok = 0,
  refused = 0,
  slowest = 0;
const fail = (input, why) => {
  mkdirSync(path.join(ROOT, 'build'), { recursive: true });
  const f = path.join(ROOT, 'build', 'fuzz-images-crash.bin');
  writeFileSync(f, input);
  console.error(`fuzz_images: ${why} (input: ${f})`);
  process.exit(1);
};
const other = corpus[0];
while (n < runs && (Date.now() - t0) / 1000 < seconds) {
  const input = ri(10) === 0 ? corpus[ri(corpus.length)] : mutate(corpus[ri(corpus.length)]);
  n++;
  const t = Date.now();
  let im = null;
  try {
    im = decodeImage(input, { maxPixels: MAX });
  } catch (e) {
    if (!(e instanceof Error)) fail(input, `threw a non-Error: ${e}`);
    refused++;
  }
  const ms = Date.now() - t;
  slowest = Math.max(slowest, ms);
  if (ms > 2000) fail(input, `one decode took ${ms} ms`);
  if (!im) continue;
  ok++;
  const h = imageHeader(input);
  if (
    im.width !== h.width ||
    im.height !== h.height ||
    im.data.length !== h.width * h.height * 4 ||
    h.width * h.height > MAX
  )
    fail(input, `decoded ${im.width}x${im.height} (${im.data.length} bytes), header ${h.width}x${h.height}`);
  try {
    decodeImage(other, { maxPixels: MAX });
  } catch {
    /* only to disturb decoder state */
  }
  const again = decodeImage(input, { maxPixels: MAX });
  if (Buffer.compare(Buffer.from(again.data), Buffer.from(im.data)) !== 0)
    fail(input, 'the same bytes decoded to different pixels');
  if (corpus.length < 200 && ri(8) === 0) corpus.push(input); // keep some that decode as seeds
}
console.log(
  `fuzz_images: ${n} runs in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${ok} decoded, ${refused} refused, slowest ${slowest} ms, 0 failures`,
);
