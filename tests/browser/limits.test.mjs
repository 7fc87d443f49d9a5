// limits.test.mjs: the megapixel cap in a browser (issue 39, item 2; defect 10): a training run's
// images -- Files and URLs -- are refused from their PNG / JPEG header before Chromium decodes them,
// with the message Node gives for the same bytes (one header reader and one check:
// web/formats/images.js imageHeader / checkImageSize). The files are headers of 20000x20000 and
// 10000x5000 images with no real image data: refused before decoding, they are never looked at.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { skip, png, launchChromium } from './harness.mjs';
import { PNG_SIGNATURE, chunk } from '../png_chunks.mjs';
import { imageHeader, checkImageSize } from '../../web/formats/images.js';
import { openSource } from '../../web/train/datasets.js';

if (skip) console.log(`# ${skip}`);

function pngHeader(w, h) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8;
  ihdr[9] = 2;
  return Buffer.concat([
    PNG_SIGNATURE,
    chunk('IHDR', ihdr),
    chunk('IDAT', Buffer.alloc(64)),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}
// a JPEG's SOI, an APP0 segment and a baseline frame header of w x h, 3 components
function jpegHeader(w, h) {
  const sof = Buffer.from([
    0xff,
    0xc0,
    0,
    17,
    8,
    h >> 8,
    h & 255,
    w >> 8,
    w & 255,
    3,
    1,
    0x22,
    0,
    2,
    0x11,
    1,
    3,
    0x11,
    1,
  ]);
  return Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 4, 0, 0]), sof, Buffer.from([0xff, 0xd9])]);
}
const FILES = {
  'big.png': pngHeader(20000, 20000),
  'wide.jpg': jpegHeader(10000, 5000),
  'ok.png': png(30, 20, (x, y) => [x * 8, y * 12, 90]),
};
// Node's message for the same bytes
const nodeMessage = (bytes) => {
  try {
    checkImageSize(imageHeader(bytes), 40e6, 'maxPixels raises it');
  } catch (e) {
    return e.message;
  }
  return null;
};

let dir, server, base, ctx, page, profile;
before(async () => {
  if (skip) return;
  dir = mkdtempSync(path.join(tmpdir(), 'vitrine-limits-'));
  for (const [f, b] of Object.entries(FILES)) writeFileSync(path.join(dir, f), b);
  writeFileSync(path.join(dir, 'index.html'), '<!doctype html><title>limits</title>');
  const { startServer } = await import('../../demo/serve.mjs');
  ({ server } = await startServer({ port: 0, mounts: [['/limits/', dir]] }));
  base = `http://127.0.0.1:${server.address().port}`;
  ({ ctx, page, profile } = await launchChromium());
  await page.goto(`${base}/limits/index.html`);
});
after(async () => {
  if (ctx) await ctx.close();
  if (server) server.close();
  for (const d of [dir, profile]) if (d) rmSync(d, { recursive: true, force: true });
});

test(
  "a browser refuses images over 40 megapixels from their header, with Node's message",
  { skip, timeout: 60_000 },
  async () => {
    const got = await page.evaluate(
      async ({ files, base }) => {
        const { openSource } = await import('/web/train/datasets.js');
        const out = {};
        const blobs = Object.entries(files).map(([name, bytes]) => new File([new Uint8Array(bytes)], name));
        const viaFiles = await openSource({ kind: 'files', files: blobs });
        const viaUrls = await openSource({ kind: 'urls', urls: Object.keys(files).map((f) => `${base}/limits/${f}`) });
        for (const [how, src] of [
          ['files', viaFiles],
          ['urls', viaUrls],
        ])
          for (let i = 0; i < src.n; i++)
            try {
              const im = await src.decode(i);
              out[`${how} ${src.itemName(i)}`] = `decoded ${im.width}x${im.height}`;
            } catch (e) {
              out[`${how} ${src.itemName(i)}`] = `${e.name}: ${e.message}`;
            }
        return out;
      },
      { files: Object.fromEntries(Object.entries(FILES).map(([k, v]) => [k, Array.from(v)])), base },
    );
    for (const f of ['big.png', 'wide.jpg']) {
      const msg = nodeMessage(FILES[f]);
      assert.match(msg, /megapixels, more than the limit of 40 \(maxPixels raises it\)$/);
      assert.equal(got[`files ${f}`], `DataError: ${f}: ${msg}`);
      assert.equal(got[`urls ${base}/limits/${f}`], `DataError: ${base}/limits/${f}: ${msg}`);
    }
    assert.equal(got['files ok.png'], 'decoded 30x20');
    assert.equal(got[`urls ${base}/limits/ok.png`], 'decoded 30x20');
    // Node, for the same URLs: the same message
    const src = await openSource({ kind: 'urls', urls: [`${base}/limits/big.png`] });
    await assert.rejects(
      src.decode(0),
      (e) => e.message === `${base}/limits/big.png: ${nodeMessage(FILES['big.png'])}`,
    );
  },
);
