// hardening.test.mjs: issue 16 in the Node layer: image bombs and stale memory (item 8), FIFOs and
// other non-regular files in a data folder (item 4), the atomic writer on a full disk (item 6).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, readFileSync, readdirSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { deflateSync } from 'node:zlib';
import { createRequire } from 'node:module';
import { decodeImage, imageHeader, loadImageFolder, writeAtomic, DataError } from '../../web/train/node-data.js';
import { chunk, PNG_SIGNATURE } from '../png_chunks.mjs';

const require = createRequire(import.meta.url);
const { PNG } = require('pngjs');
const tmp = () => mkdtempSync(path.join(tmpdir(), 'vitrine-hard-'));

// ---- PNGs of any chunks (tests/png_chunks.mjs) ----
function png({ width, height, depth = 8, ctype = 0, interlace = 0, raw = null, idat = null, iend = true }) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = depth;
  ihdr[9] = ctype;
  ihdr[12] = interlace;
  const parts = [PNG_SIGNATURE, chunk('IHDR', ihdr)];
  if (idat || raw) parts.push(chunk('IDAT', idat || deflateSync(raw)));
  if (iend) parts.push(chunk('IEND', Buffer.alloc(0)));
  return Buffer.concat(parts);
}
const timed = (f) => {
  const t = process.hrtime.bigint();
  const r = f();
  return [r, Number(process.hrtime.bigint() - t) / 1e6];
};

test('image bombs are refused from their header, before decoding, fast and small', () => {
  // the 45-byte PNG: a header claiming 30000x30000 and nothing else
  const bomb = png({ width: 30000, height: 30000, iend: true });
  assert.equal(bomb.length, 45);
  const rss0 = process.memoryUsage().rss;
  let [, ms] = timed(() =>
    assert.throws(
      () => decodeImage(bomb),
      /30000x30000 is 900\.0 megapixels, more than the limit of 40 \(--max-image-mp raises it\)/,
    ),
  );
  assert.ok(ms < 500, `${ms} ms`);
  // the limit raised: still no decoding of data that is not there
  assert.throws(() => decodeImage(bomb, { maxPixels: 1e9 }), /PNG: no image data \(IDAT\)/);
  // a zlib bomb: 20 MB of zeros deflate to ~20 KB; a 100x100 grey image holds 10100 bytes
  const zbomb = png({ width: 100, height: 100, idat: deflateSync(Buffer.alloc(20e6), { level: 9 }) });
  assert.ok(zbomb.length < 40000, `${zbomb.length}`);
  [, ms] = timed(() =>
    assert.throws(() => decodeImage(zbomb), /PNG: image data inflates past the 10100 bytes a 100x100 image holds/),
  );
  assert.ok(ms < 500, `${ms} ms`);
  // a JPEG frame header claiming 60000x60000 in 30 bytes (SOI, SOF0, EOI)
  const sof = Buffer.from([
    0xff, 0xd8, 0xff, 0xc0, 0x00, 0x11, 8, 0xea, 0x60, 0xea, 0x60, 3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1, 0xff, 0xd9,
  ]);
  assert.deepEqual(imageHeader(sof), { format: 'jpeg', width: 60000, height: 60000, components: 3 });
  assert.throws(() => decodeImage(sof), /60000x60000 is 3600\.0 megapixels/);
  // within the limit, jpeg-js's memory cap comes from the header: no gigabyte for 156 bytes
  const small = Buffer.from(sof);
  small.writeUInt16BE(4000, 7);
  small.writeUInt16BE(4000, 9);
  [, ms] = timed(() => assert.throws(() => decodeImage(small)));
  assert.ok(process.memoryUsage().rss - rss0 < 400e6, `rss grew by ${(process.memoryUsage().rss - rss0) / 1e6} MB`);
  // headers that are not images
  assert.throws(() => imageHeader(Buffer.from('GIF89a')), /not a PNG or JPEG image/);
  assert.throws(() => imageHeader(png({ width: 4, height: 4, depth: 3 })), /bit depth 3/);
  assert.throws(() => imageHeader(Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 1])), /JPEG/);
});

test('PNG data must be exactly what the header implies: short data never hands back old pixels', () => {
  const W = 16,
    H = 16;
  const full = new PNG({ width: W, height: H });
  for (let i = 0; i < full.data.length; i++) full.data[i] = (i * 37 + 11) & 255;
  const good = PNG.sync.write(full);
  assert.deepEqual(Buffer.from(decodeImage(good).data), full.data);
  // grey rows with filter 0, cut short by one row / one byte, and one byte too long
  const raw = Buffer.alloc(H * (1 + W));
  for (let y = 0; y < H; y++) for (let x = 0; x < W; x++) raw[y * (W + 1) + 1 + x] = (x * 16 + y) & 255;
  const cases = [
    [raw.subarray(0, raw.length - W - 1), /holds 255 bytes, a 16x16 image needs 272 \(truncated\)/],
    [raw.subarray(0, raw.length - 1), /holds 271 bytes, a 16x16 image needs 272 \(truncated\)/],
    [Buffer.concat([raw, Buffer.alloc(1)]), /holds 273 bytes, a 16x16 image needs 272$/],
  ];
  // decode a full image, then a short one, 400 times: the short ones are always refused
  for (let k = 0; k < 400; k++) {
    assert.deepEqual(Buffer.from(decodeImage(good).data), full.data);
    const [data, msg] = cases[k % 3];
    assert.throws(() => decodeImage(png({ width: W, height: H, raw: data })), msg);
  }
  assert.throws(() => decodeImage(png({ width: W, height: H, raw, iend: false })), /truncated \(no IEND chunk\)/);
  const lying = png({ width: W, height: H, raw });
  lying.writeUInt32BE(1e6, 33); // the IDAT chunk's length runs past the end of the file
  assert.throws(() => decodeImage(lying), /chunk IDAT of 1000000 bytes runs past the end of the file/);
  const exact = decodeImage(png({ width: W, height: H, raw }));
  for (let y = 0; y < H; y++) for (let x = 0; x < W; x++) assert.equal(exact.data[4 * (y * W + x)], (x * 16 + y) & 255);
  // Adam7: a 5x3 grey image, every pass written row by row (filter 0)
  const passes = [
    [0, 0, 8, 8],
    [4, 0, 8, 8],
    [0, 4, 4, 8],
    [2, 0, 4, 4],
    [0, 2, 2, 4],
    [1, 0, 2, 2],
    [0, 1, 1, 2],
  ];
  const px = (x, y) => 10 * y + x + 1,
    rows = [];
  for (const [x0, y0, dx, dy] of passes)
    for (let y = y0; y < 3; y += dy) {
      const row = [];
      for (let x = x0; x < 5; x += dx) row.push(px(x, y));
      if (row.length) rows.push(0, ...row);
    }
  const inter = decodeImage(png({ width: 5, height: 3, interlace: 1, raw: Buffer.from(rows) }));
  for (let y = 0; y < 3; y++) for (let x = 0; x < 5; x++) assert.equal(inter.data[4 * (y * 5 + x)], px(x, y));
  assert.throws(
    () => decodeImage(png({ width: 5, height: 3, interlace: 1, raw: Buffer.from(rows.slice(0, -1)) })),
    /holds 21 bytes, a 5x3 image needs 22 \(truncated\)/,
  );
  // 1-bit grey: 9 pixels wide -> 2 bytes per row
  const bits = decodeImage(png({ width: 9, height: 2, depth: 1, raw: Buffer.from([0, 0xff, 0x80, 0, 0x00, 0x00]) }));
  assert.deepEqual(
    Array.from({ length: 18 }, (_, i) => bits.data[4 * i]),
    [...Array(9).fill(255), ...Array(9).fill(0)],
  );
});

test('a data folder with a FIFO, a huge header and a zlib bomb: each skipped by name, no hang', (t) => {
  const dir = tmp();
  const ok = new PNG({ width: 8, height: 8 });
  ok.data.fill(200);
  writeFileSync(path.join(dir, 'a.png'), PNG.sync.write(ok));
  writeFileSync(path.join(dir, 'bomb.png'), png({ width: 30000, height: 30000 }));
  writeFileSync(path.join(dir, 'zbomb.png'), png({ width: 10, height: 10, idat: deflateSync(Buffer.alloc(1e6)) }));
  mkdirSync(path.join(dir, 'sub'));
  const fifo = spawnSync('mkfifo', [path.join(dir, 'sub', 'pipe.png')]);
  if (fifo.status !== 0) t.diagnostic('mkfifo unavailable: the FIFO case is not run');
  const warnings = [];
  const [ds, ms] = timed(() => loadImageFolder(dir, { size: 8, chans: 1, onWarning: (w) => warnings.push(w) }));
  assert.equal(ds.n, 1);
  assert.ok(ms < 2000, `${ms} ms`);
  assert.ok(
    warnings.some((w) => /^skipped bomb\.png: 30000x30000 is 900\.0 megapixels/.test(w)),
    warnings.join('\n'),
  );
  assert.ok(
    warnings.some((w) => /^skipped zbomb\.png: PNG: image data inflates past the 110 bytes/.test(w)),
    warnings.join('\n'),
  );
  if (fifo.status === 0)
    assert.ok(
      warnings.some((w) => w === `skipped ${path.join('sub', 'pipe.png')}: not a regular file (a FIFO)`),
      warnings.join('\n'),
    );
  // the limit is an option (the CLI's --max-image-mp)
  const w2 = [];
  loadImageFolder(dir, { size: 8, chans: 1, maxPixels: 1e9, onWarning: (w) => w2.push(w) });
  assert.ok(
    w2.some((w) => /bomb\.png: PNG: no image data/.test(w)),
    w2.join('\n'),
  );
  rmSync(dir, { recursive: true, force: true });
});

// A real full disk: a 64 KiB tmpfs (root only; said so and skipped where mount is not allowed).
function smallTmpfs(t) {
  const dir = tmp();
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', dir], { encoding: 'utf8' });
  if (r.status !== 0) {
    t.skip(`cannot mount a tmpfs here (${(r.stderr || '').trim() || 'not root'})`);
    return null;
  }
  t.after(() => {
    spawnSync('umount', [dir]);
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

test('writeAtomic on a full disk: ENOSPC thrown, no temporary file left, the old file intact', (t) => {
  const dir = smallTmpfs(t);
  if (!dir) return;
  const file = path.join(dir, 'checkpoint.safetensors');
  // nothing there before: nothing there after
  assert.throws(
    () => writeAtomic(file, new Uint8Array(1 << 20)),
    (e) => e.code === 'ENOSPC',
  );
  assert.deepEqual(readdirSync(dir), []);
  // an old file: kept as it was
  const old = Buffer.from('old checkpoint bytes');
  writeAtomic(file, old);
  assert.throws(
    () => writeAtomic(file, new Uint8Array(1 << 20)),
    (e) => e.code === 'ENOSPC',
  );
  assert.deepEqual(readdirSync(dir), ['checkpoint.safetensors']);
  assert.deepEqual(readFileSync(file), old);
});

test('demo server: a foreign Host header gets 403 (DNS rebinding), symlinks never lead out of its folders', async (t) => {
  const build = tmp();
  mkdirSync(path.join(build, 'wasm'));
  mkdirSync(path.join(build, 'demo-data'));
  writeFileSync(path.join(build, 'wasm', 'a.txt'), 'inside');
  writeFileSync(path.join(build, 'demo-data', 'b.txt'), 'inside too');
  const { symlinkSync } = await import('node:fs');
  symlinkSync('/etc/passwd', path.join(build, 'wasm', 'passwd.txt'));
  symlinkSync('/etc', path.join(build, 'wasm', 'etc'));
  symlinkSync(path.join(build, 'demo-data', 'b.txt'), path.join(build, 'wasm', 'b.txt')); // another served folder: still outside this mount
  symlinkSync('a.txt', path.join(build, 'wasm', 'alias.txt')); // inside: served
  const saved = process.env.VITRINE_BUILD;
  process.env.VITRINE_BUILD = build; // read once, when serve.mjs is imported
  const { startServer } = await import('../../demo/serve.mjs');
  if (saved === undefined) delete process.env.VITRINE_BUILD;
  else process.env.VITRINE_BUILD = saved;
  const { server } = await startServer({ port: 0 });
  t.after(() => {
    server.close();
    rmSync(build, { recursive: true, force: true });
  });
  const port = server.address().port;
  const { request } = await import('node:http');
  const get = (p, host) =>
    new Promise((res, rej) => {
      const req = request(
        { host: '127.0.0.1', port, path: p, setHost: false, headers: host === null ? {} : { Host: host } },
        (r) => {
          let body = '';
          r.on('data', (d) => {
            body += d;
          });
          r.on('end', () => res({ status: r.statusCode, body, headers: r.headers }));
        },
      );
      req.on('error', rej);
      req.end();
    });
  for (const h of [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, 'localhost']) {
    const r = await get('/build/wasm/a.txt', h);
    assert.equal(r.status, 200, h);
    // the Host check sits beside cross-origin isolation (threads), not instead of it
    assert.equal(r.headers['cross-origin-opener-policy'], 'same-origin');
    assert.equal(r.headers['cross-origin-embedder-policy'], 'require-corp');
  }
  for (const h of [`evil.example:${port}`, 'evil.example', `127.0.0.1:${port + 1}`, `127.0.0.1.evil.example:${port}`]) {
    const r = await get('/build/wasm/a.txt', h);
    assert.equal(r.status, 403, String(h));
    assert.match(r.body, /is not served \(DNS rebinding\?\)/);
  }
  assert.equal((await get('/build/wasm/a.txt', null)).status, 400); // no Host at all: node:http refuses it itself
  assert.equal((await get('/build/wasm/alias.txt', `127.0.0.1:${port}`)).body, 'inside');
  for (const p of [
    '/build/wasm/passwd.txt',
    '/build/wasm/etc/passwd',
    '/build/wasm/b.txt',
    '/build/wasm/%2e%2e/%2e%2e/etc/passwd',
  ]) {
    const r = await get(p, `127.0.0.1:${port}`);
    assert.equal(r.status, 404, p);
    assert.doesNotMatch(r.body, /root:/);
  }
  // --allow-host with --no-isolation: the named host is served, without COOP / COEP; others still get 403
  const plain = await startServer({ port: 0, allowedHosts: ['Vitrine.Test'], isolate: false });
  t.after(() => plain.server.close());
  const get2 = (host) =>
    new Promise((res, rej) => {
      const req = request(
        {
          host: '127.0.0.1',
          port: plain.server.address().port,
          path: '/build/wasm/a.txt',
          setHost: false,
          headers: { Host: host },
        },
        (r) => {
          r.resume();
          r.on('end', () => res(r));
        },
      );
      req.on('error', rej);
      req.end();
    });
  const ok = await get2('vitrine.test');
  assert.equal(ok.statusCode, 200);
  assert.equal(ok.headers['cross-origin-opener-policy'], undefined);
  assert.equal((await get2('evil.example')).statusCode, 403);
});

test('the image fuzz loop: 20000 mutated PNG / JPEG inputs, every decode exact or refused (tests/fuzz/fuzz_images.mjs)', () => {
  const r = spawnSync(
    process.execPath,
    [path.join(path.dirname(new URL(import.meta.url).pathname), '../fuzz/fuzz_images.mjs'), '--runs', '20000'],
    { encoding: 'utf8' },
  );
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /fuzz_images: 20000 runs in .* 0 failures/);
});

test('JS API: dout and mask lengths checked; views and calls after dispose() throw VitrineError', async () => {
  const { engine } = await import('./util.mjs');
  const { VitrineError } = await import('../../web/vitrine.js');
  const vt = await engine('simd');
  const config = { img_size: 8, patch_size: 4, in_chans: 1, embed_dim: 8, depth: 1, num_heads: 2 };
  const m = vt.createModel({ kind: 'lightly', config });
  m.initWeights(1);
  const images = new Float32Array(2 * 64).map((_, i) => Math.sin(i));
  const out = m.encode(images, { needGrad: true }); // [2, 5, 8]
  m.zeroGrad();
  const grads0 = m.params().map((p) => (p.grad ? p.grad.slice() : null));
  const isArgError = (re) => (e) => e instanceof VitrineError && e.code === 'VT_ERR_ARG' && re.test(e.message);
  assert.throws(
    () => m.backward({ douts: [new Float32Array(1)] }),
    isArgError(/douts\[0\] has 1 values, output 0 has 80/),
  );
  assert.throws(() => m.backward({ douts: [new Float32Array(81)] }), isArgError(/has 81 values, output 0 has 80/));
  assert.throws(() => m.backward({ douts: [new Float64Array(80)] }), isArgError(/Float64Array/));
  m.params().forEach((p, i) => {
    if (p.grad) assert.deepEqual(Array.from(p.grad), Array.from(grads0[i]), `${p.name} changed by a refused backward`);
  });
  m.backward({ douts: [new Float32Array(out.data.length).fill(1)] }); // the right length works
  // mask: [B, N] over the whole sequence (4 patches + the class token)
  const c = vt.createModel({ kind: 'causal', config: { ...config, class_token: false, global_pool: 'avg' } });
  assert.throws(
    () => c.encode(images, { mask: [1, 0, 1] }),
    isArgError(/mask: 3 values, \[batch=2, 4 tokens\] needs 8/),
  );
  c.encode(images, { mask: new Array(8).fill(1) });
  c.dispose();
  // after dispose: old views, entries and calls throw; the next model in that memory is untouched
  const ps = m.params(),
    view = ps[1].data,
    grad = ps[1].grad;
  view[0] = 0.5;
  assert.equal(view[0], 0.5);
  m.dispose();
  const disposed = (e) => e instanceof VitrineError && e.code === 'VT_ERR_STATE' && /disposed/.test(e.message);
  assert.throws(() => {
    view[0] = 123;
  }, disposed);
  assert.throws(() => view[0], disposed);
  assert.throws(() => view.fill(7), disposed);
  assert.throws(() => grad.set([1, 2]), disposed);
  assert.throws(() => ps[1].data, disposed);
  assert.throws(() => ps[1].requiresGrad, disposed);
  assert.throws(() => m.params(), disposed);
  assert.throws(() => m.encode(images), disposed);
  assert.throws(() => m.backward({}), disposed);
  assert.throws(() => m.saveSafetensors(), disposed);
  const next = vt.createModel({ kind: 'lightly', config });
  next.initWeights(1);
  const fresh = next.params().map((p) => p.data.slice());
  assert.throws(() => view.fill(9), disposed);
  next.params().forEach((p, i) => assert.deepEqual(Array.from(p.data), Array.from(fresh[i]), p.name));
  next.dispose();
});
