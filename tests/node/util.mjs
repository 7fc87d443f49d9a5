// util.mjs: shared helpers of the Node tests (not a test file itself).
// The repo is two levels up; the fixtures are ../shared/fixtures beside it (never copied); the
// build directory is $VITRINE_BUILD or <repo>/build, holding wasm/ and the native vitrine.
import { readFileSync, readdirSync, mkdtempSync, rmSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createVitrine, readSafetensorsHeader, enableNodeRelaxedSimd } from '../../web/vitrine.js';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const FIXTURES = path.resolve(REPO, '../shared/fixtures');
export const BUILD = path.resolve(process.env.VITRINE_BUILD || path.join(REPO, 'build'));
export const WASM_DIR = path.join(BUILD, 'wasm');
export const NATIVE = path.join(BUILD, 'vitrine');

export const fixtureNames = () =>
  readdirSync(FIXTURES)
    .filter((f) => f.endsWith('.safetensors'))
    .sort();
export const fixture = (name) => readFileSync(path.join(FIXTURES, name));

// node:wasi prints an ExperimentalWarning on first use; drop only that one.
const emitWarning = process.emitWarning;
process.emitWarning = (warning, ...rest) => {
  const type = typeof rest[0] === 'string' ? rest[0] : rest[0] && rest[0].type;
  if (type === 'ExperimentalWarning' && String(warning).includes('WASI')) return;
  return emitWarning.call(process, warning, ...rest);
};

// Node 20: relaxed SIMD is behind a V8 flag; set it before any test compiles wasm.
export const RELAXED = await enableNodeRelaxedSimd();
export const NATIVE_FMA = path.join(BUILD, 'vitrine-fma');
// this CPU has FMA3 (x86-64; V8 then fuses f32x4.relaxed_madd) or is arm64 (always fused)
export const HOST_FMA =
  process.arch === 'arm64' ||
  (process.arch === 'x64' &&
    (() => {
      try {
        return /^flags\s*:.*\bfma\b/m.test(readFileSync('/proc/cpuinfo', 'utf8'));
      } catch {
        return false;
      }
    })());

// The builds the suite must pass: each plain file on 1 thread, and each shared-memory ("-mt")
// file with its pool on every core (tests/node/threads.test.mjs: the same bits at any count).
// (wasm/builds.json, the one list of builds; MT_BUILDS: its shared-memory files)
const LISTED = JSON.parse(readFileSync(path.join(REPO, 'wasm/builds.json'), 'utf8')).builds;
export const BUILDS = Object.keys(LISTED);
export const MT_BUILDS = BUILDS.filter((b) => LISTED[b].threads);
const engines = new Map();
export function engine(build) {
  if (!engines.has(build))
    engines.set(
      build,
      createVitrine({ wasm: build, wasmDir: WASM_DIR, threads: build.endsWith('-mt') ? undefined : 1 }),
    );
  return engines.get(build);
}

// The tensors of safetensors bytes (the shell's header reader): { meta, tensors: { name: { dtype, shape, bytes } } }.
export function readSafetensors(buf) {
  const u8 = buf instanceof Uint8Array ? buf : new Uint8Array(buf);
  const { length: n, header } = readSafetensorsHeader(u8);
  const meta = header.__metadata__ || {};
  delete header.__metadata__;
  const tensors = {};
  for (const [k, v] of Object.entries(header)) {
    const [a, b] = v.data_offsets;
    tensors[k] = { dtype: v.dtype, shape: v.shape, bytes: u8.slice(8 + n + a, 8 + n + b) };
  }
  return { meta, tensors };
}
export const f32 = (t) => new Float32Array(t.bytes.buffer, t.bytes.byteOffset, t.bytes.byteLength / 4);
// safetensors bytes of { name: { dtype, shape, bytes } } (and string metadata), as save_file writes them.
export function writeSafetensors(tensors, meta = null) {
  const header = {};
  let off = 0;
  for (const [n, t] of Object.entries(tensors)) {
    header[n] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.bytes.length] };
    off += t.bytes.length;
  }
  if (meta) header.__metadata__ = meta;
  let json = JSON.stringify(header);
  while (json.length % 8) json += ' ';
  const hb = new TextEncoder().encode(json),
    out = new Uint8Array(8 + hb.length + off);
  new DataView(out.buffer).setBigUint64(0, BigInt(hb.length), true);
  out.set(hb, 8);
  let p = 8 + hb.length;
  for (const t of Object.values(tensors)) {
    out.set(t.bytes, p);
    p += t.bytes.length;
  }
  return out;
}

// max|a - b| / max|b|, the parity-format error.
export function relErr(a, b) {
  let d = 0,
    m = 0;
  for (let i = 0; i < b.length; i++) {
    d = Math.max(d, Math.abs(a[i] - b[i]));
    m = Math.max(m, Math.abs(b[i]));
  }
  return m > 0 ? d / m : d;
}

/** A real full disk: a tmpfs of `kib` KiB, unmounted after test t (root only; t skips, saying so,
 * elsewhere). Returns its folder, or null when skipped. */
export function tmpfs(t, kib) {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-tmpfs-'));
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${kib}k`, 'tmpfs', dir], { encoding: 'utf8' });
  if (r.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    t.skip(`cannot mount a tmpfs here (${(r.stderr || '').trim() || 'not root'})`);
    return null;
  }
  t.after(() => {
    spawnSync('umount', [dir]);
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

// ---- docs/finetune.md, run as written (tests/node/guide.test.mjs, tests/browser/guide.test.mjs) ----

/** The code block of docs/finetune.md that follows `heading` (its language `lang`). */
export function guideBlock(heading, lang) {
  const md = readFileSync(path.join(REPO, 'docs/finetune.md'), 'utf8');
  const at = md.indexOf(`\n${heading}\n`);
  assert.ok(at >= 0, `docs/finetune.md has no '${heading}'`);
  const m = new RegExp('```' + lang + '\\n([\\s\\S]*?)\\n```').exec(md.slice(at));
  assert.ok(m, `no ${lang} block under '${heading}'`);
  assert.ok(m[1].split('\n').length < 30, `the ${lang} block is ${m[1].split('\n').length} lines`);
  return m[1] + '\n';
}

/** photos/<class>/*.jpg: two classes (stripes across / circles), `n` each, of assorted sizes. */
export function writePhotos(dir, n = 10) {
  const jpeg = createRequire(import.meta.url)('jpeg-js');
  for (const cls of ['circles', 'stripes']) {
    mkdirSync(path.join(dir, cls), { recursive: true });
    for (let i = 0; i < n; i++) {
      const w = 60 + 8 * i,
        h = 48 + 4 * (i % 3),
        data = Buffer.alloc(w * h * 4);
      for (let y = 0; y < h; y++)
        for (let x = 0; x < w; x++) {
          const on = cls === 'stripes' ? ((y + i) >> 2) % 2 : Math.hypot(x - w / 2, y - h / 2) % 12 < 6;
          const o = 4 * (y * w + x);
          data[o] = on ? 220 : 30;
          data[o + 1] = on ? 140 + 8 * i : 60;
          data[o + 2] = on ? 40 : 180;
          data[o + 3] = 255;
        }
      writeFileSync(path.join(dir, cls, `${i}.jpg`), jpeg.encode({ data, width: w, height: h }, 90).data);
    }
  }
}

/** vit_tiny_patch16_224 (1000 classes), or another timm architecture (timm kwargs over it), as
 * timm's save_file writes its state_dict: no metadata. */
export async function timmStateDict(name = 'vit_tiny_patch16_224', kwargs = { numClasses: 1000 }) {
  const vt = await engine('simd');
  const m = vt.createModel(name, kwargs);
  m.initWeights(2024);
  const bytes = writeSafetensors(readSafetensors(m.saveSafetensors()).tensors);
  m.dispose();
  return bytes;
}
