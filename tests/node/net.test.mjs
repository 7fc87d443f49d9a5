// net.test.mjs: URLs read as untrusted streams (issue 39, item 2): weights and data images from a
// local server that stalls, drips, never answers, lies in its Content-Length or sends gzip bombs
// (a few MB on the wire inflating to GBs, made as they are sent). Every read takes the run's
// AbortSignal (train()'s abort() and its signal stop it), a stall and a total timeout, and counts
// bytes as they arrive, after decoding, against a cap checked before they are kept (weights: what
// their header says they are, at most 2 GiB; an image: what its header's size can need, at most
// 512 MB); every message starts with the URL. The megapixel cap refuses a URL's image from its
// first bytes, with the message a folder's image gets (tests/browser/limits.test.mjs: the browser's).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { createGzip } from 'node:zlib';
import { mkdirSync, writeFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { readWeights, MAX_WEIGHTS_BYTES } from '../../web/formats/pretrained.js';
import { fetchBytes } from '../../web/formats/fetch.js';
import { openSource } from '../../web/train/datasets.js';
import { openImageFolder } from '../../web/train/node-data.js';
import { train } from '../../web/vitrine.js';
import { readSafetensorsHeader, MAX_TENSORS } from '../../web/formats/safetensors.js';
import { engine } from './util.mjs';
import { PNG_SIGNATURE, chunk } from '../png_chunks.mjs';
import { png } from '../browser/harness.mjs';

const TMP = path.join(process.env.VITRINE_TMP || '/work/tmp/net', `net-test-${process.pid}`);
const MB = 2 ** 20;

// a safetensors header (8-byte length + JSON) for one U8 tensor of n bytes: a file of its own
function stHeader(n) {
  let json = JSON.stringify({ w: { dtype: 'U8', shape: [n], data_offsets: [0, n] } });
  while (json.length % 8) json += ' ';
  const b = Buffer.alloc(8 + json.length);
  b.writeBigUInt64LE(BigInt(json.length), 0);
  b.write(json, 8, 'latin1');
  return b;
}
// a PNG's signature and IHDR (8-bit grey) of w x h, then whatever follows
const pngHead = (w, h) => {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8;
  return Buffer.concat([PNG_SIGNATURE, chunk('IHDR', ihdr)]);
};

// `prefix` then `zeros` zero bytes, gzip-encoded as it is sent (never held in memory: the
// compressor waits for the socket)
function gzipBomb(res, prefix, zeros) {
  res.writeHead(200, { 'content-encoding': 'gzip', 'content-type': 'application/octet-stream' });
  const gz = createGzip({ level: 9 });
  gz.pipe(res);
  gz.write(prefix);
  const zero = Buffer.alloc(MB);
  let sent = 0;
  const pump = () => {
    while (sent < zeros) {
      sent += zero.length;
      if (!gz.write(zero)) return gz.once('drain', pump);
    }
    gz.end();
  };
  res.on('close', () => gz.destroy());
  pump();
}

const opened = []; // sockets of the server, destroyed at the end (the stalling ones never end)
const ROUTES = {
  // the response's head, then nothing
  '/silent.safetensors': (req, res) => {
    res.writeHead(200, { 'content-length': 1000 });
    res.flushHeaders();
  },
  // nothing at all
  '/nohead.safetensors': () => {},
  '/nohead.png': () => {},
  // a real header, then a byte every 100 ms
  '/drip.safetensors': (req, res) => {
    const h = stHeader(1e6);
    res.writeHead(200, { 'content-length': h.length + 1e6 });
    res.write(h);
    const t = setInterval(() => res.write(Buffer.alloc(1)), 100);
    res.on('close', () => clearInterval(t));
  },
  // a Content-Length over the cap: refused before the body is read
  '/huge-length.safetensors': (req, res) => {
    res.writeHead(200, { 'content-length': 3e9 });
    res.write(stHeader(3e9 - 64));
  },
  // gzip bombs: a header saying 3 GB; one saying 1 MiB followed by 2 GiB; no header at all
  '/bomb-3g.safetensors': (req, res) => gzipBomb(res, stHeader(3e9), 4 * 2 ** 30),
  '/bomb-1m.safetensors': (req, res) => gzipBomb(res, stHeader(MB), 2 * 2 ** 30),
  '/bomb.bin': (req, res) => gzipBomb(res, Buffer.alloc(0), 4 * 2 ** 30),
  // a 100x100 PNG's header, then 2 GiB of zeros, gzip-encoded
  '/bomb.png': (req, res) => gzipBomb(res, pngHead(100, 100), 2 * 2 ** 30),
  // a 8000x8000 PNG's header and 64 kB, then nothing: refused from its header, not waited for
  '/huge-drip.png': (req, res) => {
    res.writeHead(200, { 'content-type': 'image/png' });
    res.write(Buffer.concat([pngHead(8000, 8000), Buffer.alloc(65536)]));
  },
  '/a.png': (req, res) => res.end(png(28, 28, (x, y) => [x * 9, y * 9, 100])),
  '/b.png': (req, res) => res.end(png(28, 28, (x) => [255 - x * 9, 50, 50])),
};
let server, base;
before(async () => {
  server = createServer((req, res) => (ROUTES[req.url] || ((q, r) => r.writeHead(404).end()))(req, res));
  server.on('connection', (s) => opened.push(s));
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${server.address().port}`;
  mkdirSync(TMP, { recursive: true });
});
after(() => {
  for (const s of opened) s.destroy();
  server.close();
  rmSync(TMP, { recursive: true, force: true });
});

const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
// rejects within `ms` (a hang fails the test instead of holding it), message matching re
async function refuses(p, re, ms = 15000) {
  let timer;
  const hang = new Promise((_, rej) => {
    timer = setTimeout(() => rej(new Error(`still waiting after ${ms} ms`)), ms);
  });
  try {
    await assert.rejects(Promise.race([p, hang]), (e) => {
      assert.equal(e.name === 'VitrineError' || e.name === 'DataError', true, `${e.name}: ${e.message}`);
      assert.match(e.message, re);
      assert.doesNotMatch(e.message, /\n/);
      return true;
    });
  } finally {
    clearTimeout(timer);
  }
}
// the peak RSS growth while fn runs (sampled every 20 ms)
async function peakGrowth(fn) {
  const base0 = process.memoryUsage().rss;
  let peak = base0;
  const t = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
  try {
    await fn();
  } finally {
    clearInterval(t);
  }
  return Math.max(peak, process.memoryUsage().rss) - base0;
}

test('weights from a URL: stall, total timeout and abort, each named with the URL and the bytes read', async () => {
  const silent = `${base}/silent.safetensors`;
  await refuses(
    readWeights(silent, { stallSeconds: 0.3 }),
    new RegExp(`^${esc(silent)}: stalled: no bytes for 0\\.3 s after 0 of 1000 bytes$`),
  );
  await refuses(
    readWeights(`${base}/nohead.safetensors`, { stallSeconds: 0.3 }),
    new RegExp(`^${esc(base)}/nohead\\.safetensors: stalled: no response for 0\\.3 s$`),
  );
  // bytes keep coming (no stall), but too slowly: the total timeout
  await refuses(
    readWeights(`${base}/drip.safetensors`, { stallSeconds: 0.5, timeoutSeconds: 1 }),
    /drip\.safetensors: not finished after 1 s \(the timeout; \d+ of \d+ bytes read\)$/,
  );
  // the caller's signal, while the body or the head is awaited
  for (const [url, re] of [
    [silent, /silent\.safetensors: aborted after 0 of 1000 bytes$/],
    [`${base}/nohead.safetensors`, /nohead\.safetensors: aborted before the response came$/],
  ]) {
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(), 200);
    const t0 = Date.now();
    await refuses(readWeights(url, { signal: ctl.signal }), re, 5000);
    assert.ok(Date.now() - t0 < 3000);
  }
  // the options are checked
  await refuses(readWeights(silent, { stallSeconds: 0 }), /^stallSeconds: 0 is not a positive number of seconds$/);
});

test('weights: a Content-Length over the cap is refused before the body; gzip bombs stop at what the header says', async () => {
  const t0 = Date.now();
  await refuses(
    readWeights(`${base}/huge-length.safetensors`),
    new RegExp(`huge-length\\.safetensors: Content-Length 3000000000 is over the cap of ${MAX_WEIGHTS_BYTES} bytes$`),
  );
  assert.ok(Date.now() - t0 < 3000);
  let most = 0;
  const onProgress = (p) => (most = Math.max(most, p.loaded));
  const grew = await peakGrowth(async () => {
    // a header saying 3 GB: refused once the header is in, nothing more read
    await refuses(
      readWeights(`${base}/bomb-3g.safetensors`, { onProgress }),
      new RegExp(`bomb-3g\\.safetensors: says it is \\d+ bytes, over the cap of ${MAX_WEIGHTS_BYTES} bytes$`),
    );
    assert.ok(most < 16 * MB, `${most} bytes read`);
    // a header saying 1 MiB, 2 GiB coming: refused past 1 MiB
    most = 0;
    await refuses(
      readWeights(`${base}/bomb-1m.safetensors`, { onProgress }),
      /bomb-1m\.safetensors: more bytes than the \d+ it says it is$/,
    );
    assert.ok(most <= MB + 200, `${most} bytes kept`);
    // no header at all (zeros): not a safetensors file, from its first 8 bytes
    await refuses(readWeights(`${base}/bomb.bin`), /bomb\.bin: not a safetensors file \(a header of 0 bytes/);
  });
  assert.ok(grew < 600 * MB, `RSS grew ${grew} bytes`);
});

test('fetchBytes: a gzip body counted after decoding against the cap, never past it', async () => {
  let most = 0;
  const grew = await peakGrowth(() =>
    refuses(
      fetchBytes(`${base}/bomb.bin`, { maxBytes: 64 * MB, onProgress: (p) => (most = Math.max(most, p.loaded)) }),
      /bomb\.bin: more than the cap of 67108864 bytes \(\d+ arrived\)$/,
    ),
  );
  assert.ok(most <= 64 * MB, `${most} bytes kept`);
  assert.ok(grew < 600 * MB, `RSS grew ${grew} bytes`);
});

test("data from URLs: an image's header refuses it early (the folder's message); a gzip bomb stops at the image's cap", async () => {
  const src = await openSource(
    { kind: 'urls', urls: [`${base}/huge-drip.png`, `${base}/bomb.png`, `${base}/nohead.png`] },
    {
      urlStallSeconds: 0.5,
    },
  );
  const big = `${base}/huge-drip.png`;
  const mp = '8000x8000 is 64.0 megapixels, more than the limit of 40 (maxPixels raises it)';
  await refuses(src.decode(0), new RegExp(`^${esc(big)}: ${esc(mp)}$`), 5000);
  // the same message for the same header in a folder
  const dir = path.join(TMP, 'folder');
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'big.png'), Buffer.concat([pngHead(8000, 8000), chunk('IEND', Buffer.alloc(0))]));
  writeFileSync(
    path.join(dir, 'ok.png'),
    png(4, 4, () => [1, 2, 3]),
  );
  const warnings = [];
  openImageFolder(dir, { onWarning: (w) => warnings.push(w), raise: 'maxPixels raises it' });
  assert.deepEqual(warnings, [`skipped big.png: ${mp}`]);
  let grew = await peakGrowth(() =>
    refuses(
      src.decode(1),
      new RegExp(`bomb\\.png: more than the cap of ${16 * 100 * 100 + 16 * MB} bytes \\(\\d+ arrived\\)$`),
    ),
  );
  assert.ok(grew < 600 * MB, `RSS grew ${grew} bytes`);
  await refuses(src.decode(2), /nohead\.png: stalled: no response for 0\.5 s$/);
  // a signal aborts an image being read
  const ctl = new AbortController();
  const src2 = await openSource({ kind: 'urls', urls: [`${base}/nohead.png`] }, { signal: ctl.signal });
  setTimeout(() => ctl.abort(), 200);
  await refuses(src2.decode(0), /nohead\.png: aborted before the response came$/, 5000);
});

const TINY = {
  encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 1, num_heads: 2 },
  decoder_dim: 16,
  decoder_depth: 1,
  decoder_heads: 2,
};
const RUN = { objective: 'mae', model: TINY, steps: 3, batch: 2, lr: 1e-3, wasm: 'simd', threads: 1 };
const pixels = { pixels: new Uint8Array(4 * 784), n: 4, size: 28, chans: 1 };
// done, or what it rejects with, within ms
const settle = (p, ms) =>
  Promise.race([
    p.then(
      (r) => ({ result: r }),
      (e) => ({ error: e }),
    ),
    new Promise((r) => setTimeout(() => r({ hung: true }), ms)),
  ]);

test('train(): abort() and the signal stop a weights URL being read; urlStallSeconds gives a URL up', async () => {
  const url = `${base}/silent.safetensors`;
  // the signal
  const ctl = new AbortController();
  const run = train({ ...RUN, data: pixels, weights: url, signal: ctl.signal });
  setTimeout(() => ctl.abort(), 1500);
  const a = await settle(run.done, 15000);
  run.dispose();
  assert.ok(!a.hung, 'abort did not stop the weights URL being read');
  assert.match(a.error.message, new RegExp(`^${esc(url)}: aborted after 0 of 1000 bytes$`));
  // abort()
  const run2 = train({ ...RUN, data: pixels, weights: url });
  setTimeout(() => run2.abort(), 1500);
  const b = await settle(run2.done, 15000);
  run2.dispose();
  assert.ok(!b.hung, 'abort() did not stop the weights URL being read');
  assert.match(b.error.message, /silent\.safetensors: aborted after 0 of 1000 bytes$/);
  // the stall timeout, as an option of the run
  const run3 = train({ ...RUN, data: pixels, weights: url, urlStallSeconds: 0.5 });
  const c = await settle(run3.done, 15000);
  run3.dispose();
  assert.ok(!c.hung);
  assert.match(c.error.message, /silent\.safetensors: stalled: no bytes for 0\.5 s after 0 of 1000 bytes$/);
  await assert.rejects(train({ ...RUN, data: pixels, urlTimeoutSeconds: -1 }).done, (e) =>
    /^urlTimeoutSeconds: -1 is not a number in \(0, 604800\]$/.test(e.message),
  );
});

test("train(): abort() stops a batch's image URL being read: the run ends 'aborted'", async () => {
  const urls = [`${base}/a.png`, `${base}/b.png`, `${base}/nohead.png`, `${base}/a.png`];
  const run = train({
    ...RUN,
    data: { urls, labels: [0, 1, 0, 1], classes: ['a', 'b'] },
    val: 0,
    onReady: () => setTimeout(() => run.abort(), 500),
  });
  const r = await settle(run.done, 15000);
  run.dispose();
  assert.ok(!r.hung, "abort() did not stop a batch's image URL");
  assert.equal(r.error, undefined, r.error && r.error.message);
  assert.equal(r.result.status, 'aborted');
});

// a safetensors file whose header holds n one-float tensors (300,000: a 20 MB header)
function manyTensors(n) {
  const parts = [];
  for (let i = 0; i < n; i++)
    parts.push(`"blocks.${i}.attn.qkv.weight":{"dtype":"F32","shape":[1],"data_offsets":[${4 * i},${4 * i + 4}]}`);
  let json = `{${parts.join(',')}}`;
  while (json.length % 8) json += ' ';
  const b = Buffer.alloc(8 + json.length + 4 * n);
  b.writeBigUInt64LE(BigInt(json.length), 0);
  b.write(json, 8, 'latin1');
  return new Uint8Array(b.buffer, b.byteOffset, b.length);
}

test('a safetensors header of 300,000 keys is refused from a count, in JS and in the engine (item 15)', async () => {
  const bytes = manyTensors(300000);
  assert.ok(bytes.length > 20e6);
  const why = '300000 entries in the header, more than the 65536 tensors read';
  await refuses(readWeights(bytes), new RegExp(`^the weights: not a safetensors file \\(${why}\\)$`));
  const vt = await engine('simd');
  const m = vt.createModel('vit_tiny_patch16_224');
  try {
    assert.throws(
      () => m.initFrom(bytes),
      (e) => e.message === `safetensors: ${why}`,
    );
    // the engine's own reader (loadSafetensors goes to it directly), the same count
    assert.throws(
      () => m.loadSafetensors(bytes),
      (e) => e.message.endsWith(`safetensors: ${why}`) && e.status === -3,
    );
  } finally {
    m.dispose();
  }
  // the cap itself is read
  const ok = manyTensors(MAX_TENSORS);
  assert.equal(Object.keys(readSafetensorsHeader(ok).header).length, MAX_TENSORS);
});
