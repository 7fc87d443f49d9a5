// data.js: training images for Node (the browser demo feeds ImageData instead).
//
// A data set here is plain data, the same whatever its source:
//   { name, n, chans, size, pixels: Uint8Array [n, chans, size, size] (0..255),
//     labels: Int32Array [n] | null, classes: string[] | null, files: string[] | null }
// Pixels stay bytes until a batch is made (images.js makeBatch normalises with channelStats:
// ImageNet's mean / std, their channel average for a grey 1-channel model: 0.449 / 0.226).
//
// Sources:
//   loadFashionMNIST(split)  Debian's dataset-fashion-mnist gzipped IDX files (60k train / 10k
//                            test, 28x28 grey, 10 classes), validated (magic numbers, sizes).
//   loadImageFolder(dir)     every PNG / JPEG under dir (pure-JS decoders pngjs and jpeg-js, behind
//                            header checks: size cap before decoding, bounded inflate, regular
//                            files only, see decodeImage);
//                            files in sub-folders take the sub-folder's name as their class
//                            (torchvision ImageFolder); anything unreadable is reported by name
//                            and skipped; no usable image at all is an error.
// Decoded images go through the pixel pipeline of web/formats/images.js (resizeCrop: shorter side to the
// model's size, centre crop, its channels), as in the browser; images.js's adapt() converts a
// whole data set.
//   writeAtomic(file, bytes)  the old content or the new one, never a torn file (checkpoints).
import {
  readFileSync,
  readdirSync,
  statSync,
  mkdirSync,
  openSync,
  writeSync,
  fsyncSync,
  closeSync,
  renameSync,
  fstatSync,
  readSync,
  unlinkSync,
  constants as fsConstants,
} from 'node:fs';
import path from 'node:path';
import { gunzipSync, inflateSync } from 'node:zlib';
import { createRequire } from 'node:module';
import {
  resizeCrop,
  checkDatasetBytes,
  imageHeader,
  checkImageSize,
  DEFAULT_MAX_PIXELS,
  MAX_IMAGE_FILE_BYTES,
} from '../formats/images.js';
import { DataError } from '../errors.js';

const require = createRequire(import.meta.url);

export const FASHION_MNIST_DIR = '/usr/share/datasets/fashion-mnist';
export const FASHION_MNIST_CLASSES = [
  'T-shirt/top',
  'Trouser',
  'Pullover',
  'Dress',
  'Coat',
  'Sandal',
  'Shirt',
  'Sneaker',
  'Bag',
  'Ankle boot',
];

export { DataError };

// ---- IDX (MNIST-style) files ---------------------------------------------------------------

function readGz(file) {
  let raw;
  try {
    raw = readFileSync(file);
  } catch (e) {
    throw new DataError(
      `cannot read ${file}: ${e.code === 'ENOENT' ? 'no such file' : e.message}` +
        (file.startsWith(FASHION_MNIST_DIR) ? " (install Debian's dataset-fashion-mnist: bash scripts/setup.sh)" : ''),
    );
  }
  try {
    return raw[0] === 0x1f && raw[1] === 0x8b ? gunzipSync(raw) : raw;
  } catch (e) {
    throw new DataError(`${file}: not a readable gzip file (${e.message})`);
  }
}

/** Parses IDX bytes: 0x0000 0x08 (ubyte) ndim, then ndim big-endian uint32 sizes, then data.
 * Returns { dims, data: Uint8Array }. */
export function parseIdx(buf, file = 'IDX file', wantDims = null) {
  if (buf.length < 4) throw new DataError(`${file}: ${buf.length} bytes, too short for an IDX header`);
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const magic = dv.getUint32(0, false);
  if (magic >>> 8 !== 0x08)
    throw new DataError(
      `${file}: bad IDX magic number 0x${magic.toString(16).padStart(8, '0')} (expected 0x0000080N: unsigned bytes)`,
    );
  const ndim = magic & 0xff;
  if (wantDims != null && ndim !== wantDims)
    throw new DataError(
      `${file}: IDX magic 0x${magic.toString(16).padStart(8, '0')} says ${ndim} dimensions, expected ${wantDims} (0x0000080${wantDims})`,
    );
  if (buf.length < 4 + 4 * ndim) throw new DataError(`${file}: truncated IDX header`);
  const dims = [];
  for (let d = 0; d < ndim; d++) dims.push(dv.getUint32(4 + 4 * d, false));
  const n = dims.reduce((a, b) => a * b, 1),
    off = 4 + 4 * ndim;
  if (buf.length !== off + n)
    throw new DataError(`${file}: ${buf.length - off} data bytes, the header [${dims.join(', ')}] says ${n}`);
  return { dims, data: new Uint8Array(buf.buffer, buf.byteOffset + off, n) };
}

/** Fashion-MNIST from the gzipped IDX files ('train': 60000, 'test': 10000 images). */
export function loadFashionMNIST(split = 'train', dir = FASHION_MNIST_DIR) {
  const stem = split === 'train' ? 'train' : split === 'test' ? 't10k' : null;
  if (!stem) throw new DataError(`Fashion-MNIST split '${split}': use 'train' or 'test'`);
  const fi = path.join(dir, `${stem}-images-idx3-ubyte.gz`),
    fl = path.join(dir, `${stem}-labels-idx1-ubyte.gz`);
  const im = parseIdx(readGz(fi), fi, 3),
    lb = parseIdx(readGz(fl), fl, 1);
  const [n, rows, cols] = im.dims;
  if (rows !== 28 || cols !== 28) throw new DataError(`${fi}: images are ${rows}x${cols}, Fashion-MNIST's are 28x28`);
  if (lb.dims[0] !== n) throw new DataError(`${fl}: ${lb.dims[0]} labels for ${n} images in ${fi}`);
  const want = split === 'train' ? 60000 : 10000;
  if (n !== want) throw new DataError(`${fi}: ${n} images, Fashion-MNIST's ${split} split has ${want}`);
  const labels = Int32Array.from(lb.data);
  const bad = labels.findIndex((v) => v > 9);
  if (bad >= 0) throw new DataError(`${fl}: label ${labels[bad]} at ${bad} (classes are 0..9)`);
  return {
    name: `fashion-mnist/${split}`,
    n,
    chans: 1,
    size: 28,
    pixels: im.data,
    labels,
    classes: FASHION_MNIST_CLASSES,
    files: null,
  };
}

// ---- image folders ---------------------------------------------------------------------------

// the PNG / JPEG header reader and the megapixel cap are web/formats/images.js's (the browser's too)
export { DEFAULT_MAX_PIXELS, MAX_IMAGE_FILE_BYTES, imageHeader };

const be32 = (b, o) => ((b[o] << 24) | (b[o + 1] << 16) | (b[o + 2] << 8) | b[o + 3]) >>> 0;
const PNG_CHANNELS = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 };

// Bytes the PNG's image data must inflate to: per (Adam7 pass) row a filter byte + packed pixels.
function pngInflatedSize(h) {
  const bits = PNG_CHANNELS[h.ctype] * h.depth;
  const rows = (w, n) => (w > 0 && n > 0 ? n * (1 + Math.ceil((w * bits) / 8)) : 0);
  if (!h.interlace) return rows(h.width, h.height);
  const passes = [
    [0, 0, 8, 8],
    [4, 0, 8, 8],
    [0, 4, 4, 8],
    [2, 0, 4, 4],
    [0, 2, 2, 4],
    [1, 0, 2, 2],
    [0, 1, 1, 2],
  ];
  let n = 0;
  for (const [x0, y0, dx, dy] of passes) n += rows(Math.ceil((h.width - x0) / dx), Math.ceil((h.height - y0) / dy));
  return n;
}

// The PNG's chunks walked with bounds checks, its IDAT inflated with a cap at the size its header
// implies: a zlib bomb stops at that size, short data (for which pngjs 7 hands back pixels of
// earlier images) is refused, before pngjs sees the file.
function checkPngData(bytes, h) {
  const idat = [];
  let o = 8,
    end = false;
  while (o + 12 <= bytes.length) {
    const len = be32(bytes, o),
      type = String.fromCharCode(...bytes.subarray(o + 4, o + 8));
    if (len > bytes.length - o - 12)
      throw new DataError(`PNG: chunk ${type} of ${len} bytes runs past the end of the file`);
    if (type === 'IDAT') idat.push(bytes.subarray(o + 8, o + 8 + len));
    o += 12 + len;
    if (type === 'IEND') {
      end = true;
      break;
    }
  }
  if (!end) throw new DataError('PNG: truncated (no IEND chunk)');
  if (!idat.length) throw new DataError('PNG: no image data (IDAT)');
  const want = pngInflatedSize(h);
  let got;
  try {
    got = inflateSync(Buffer.concat(idat), { maxOutputLength: want + 1 }).length;
  } catch (e) {
    if (e.code === 'ERR_BUFFER_TOO_LARGE' || e instanceof RangeError)
      throw new DataError(`PNG: image data inflates past the ${want} bytes a ${h.width}x${h.height} image holds`);
    throw new DataError(`PNG: image data is not valid zlib (${e.message})`);
  }
  if (got !== want)
    throw new DataError(
      `PNG: image data holds ${got} bytes, a ${h.width}x${h.height} image needs ${want}${got > want ? '' : ' (truncated)'}`,
    );
}

/** Decodes PNG or JPEG bytes (by their magic numbers) -> { width, height, data: RGBA bytes }.
 * The header's size is checked against maxPixels before anything is decoded. Decoders: pngjs
 * (behind checkPngData: bounded inflate, exact data size) and jpeg-js (its own resolution and
 * memory limits set from the header); both return zero-initialised buffers, copied here. */
export function decodeImage(bytes, { maxPixels = DEFAULT_MAX_PIXELS, raise = '--max-image-mp raises it' } = {}) {
  const h = checkImageSize(imageHeader(bytes), maxPixels, raise);
  if (h.format === 'png') {
    checkPngData(bytes, h);
    const { PNG } = require('pngjs');
    const png = PNG.sync.read(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    if (png.width !== h.width || png.height !== h.height || png.data.length !== h.width * h.height * 4)
      throw new DataError(`PNG decoded to ${png.width}x${png.height}, its header says ${h.width}x${h.height}`);
    return { width: png.width, height: png.height, data: Uint8Array.from(png.data) };
  }
  const jpeg = require('jpeg-js');
  // jpeg-js's own accounting: coefficients (2 bytes / sample / component, MCU-padded) + output
  const mb = Math.ceil(((h.width + 16) * (h.height + 16) * (8 * Math.max(1, h.components) + 4)) / 2 ** 20) + 16;
  const im = jpeg.decode(bytes, {
    useTArray: true,
    formatAsRGBA: true,
    maxMemoryUsageInMB: mb,
    maxResolutionInMP: maxPixels / 1e6,
  });
  if (im.width !== h.width || im.height !== h.height)
    throw new DataError(`JPEG decoded to ${im.width}x${im.height}, its header says ${h.width}x${h.height}`);
  return { width: im.width, height: im.height, data: im.data };
}

/** The bytes of a regular file, at most maxBytes: opened without blocking (a FIFO would hang a
 * plain read), checked with fstat, then read to its size. */
export function readRegularFile(file, maxBytes = MAX_IMAGE_FILE_BYTES) {
  const fd = openSync(file, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile())
      throw new DataError(
        `not a regular file (${st.isFIFO() ? 'a FIFO' : st.isDirectory() ? 'a directory' : st.isSocket() ? 'a socket' : 'a device'})`,
      );
    if (st.size > maxBytes) throw new DataError(`${st.size} bytes, more than ${maxBytes}`);
    const buf = Buffer.alloc(st.size);
    let off = 0;
    while (off < st.size) {
      const n = readSync(fd, buf, off, st.size - off, off);
      if (n === 0) break;
      off += n;
    }
    return buf.subarray(0, off);
  } finally {
    closeSync(fd);
  }
}

/** The data a resumed run reads: only what the user names now, never a path stored in the
 * checkpoint (file). stored: the run's 'fashion-mnist' or folder; given: --data or null. Returns
 * 'fashion-mnist' or the folder named, resolved; DataError when they do not go together. */
export function resumedData(file, stored, given) {
  if (stored === 'fashion-mnist') {
    if (given != null) throw new DataError(`${file}: the run trained on Fashion-MNIST; leave --data out`);
    return stored;
  }
  if (given == null)
    throw new DataError(
      `${file}: the run trained on a folder of images (${JSON.stringify(stored)}); name it again with --data DIR`,
    );
  return path.resolve(given);
}

// strerror() wording for the usual reasons a file cannot be opened, read, written or made
const STRERROR = {
  ENOENT: 'No such file or directory',
  EACCES: 'Permission denied',
  EISDIR: 'Is a directory',
  ENOTDIR: 'Not a directory',
  ENOSPC: 'No space left on device',
  EFBIG: 'File too large',
  EDQUOT: 'Disk quota exceeded',
  EROFS: 'Read-only file system',
  EEXIST: 'File exists',
};
export const strerror = (e) => STRERROR[e.code] || e.message;

/** mkdir -p without Node's recursive mkdir (which loops forever under /proc): one component at a
 * time, each checked. Returns the directories it created (to remove them again on failure). */
export function makeDirs(dir) {
  const abs = path.resolve(dir),
    made = [];
  let p = path.parse(abs).root;
  for (const part of abs.slice(p.length).split(path.sep).filter(Boolean)) {
    p = path.join(p, part);
    let st = null;
    try {
      st = statSync(p);
    } catch (e) {
      if (e.code !== 'ENOENT') throw new Error(`${dir}: ${p}: ${strerror(e)}`);
    }
    if (st) {
      if (!st.isDirectory()) throw new Error(`${dir}: ${p} is not a directory`);
      continue;
    }
    try {
      mkdirSync(p);
    } catch (e) {
      throw new Error(`${dir}: cannot create ${p}: ${strerror(e)}`);
    }
    made.push(p);
  }
  return made;
}

/** Every PNG / JPEG under dir, resized / cropped to size x size with `chans` channels.
 * onWarning(message) hears about each file skipped (default: console.warn). */
export function loadImageFolder(
  dir,
  { size, chans, maxPixels = DEFAULT_MAX_PIXELS, onWarning = (m) => console.warn(m) } = {},
) {
  const found = listImageFolder(dir, onWarning);
  try {
    checkDatasetBytes(`--data ${dir}`, found.length, size, chans);
  } catch (e) {
    throw new DataError(e.message);
  }
  const per = chans * size * size,
    keep = [];
  const pixels = [];
  for (const [file, cls] of found) {
    const rel = path.relative(dir, file);
    try {
      const bytes = readRegularFile(file);
      const im = decodeImage(bytes, { maxPixels });
      if (!(im.width > 0 && im.height > 0)) throw new DataError(`empty image ${im.width}x${im.height}`);
      pixels.push(resizeCrop(im.data, im.width, im.height, 4, size, chans));
      keep.push([rel, cls]);
    } catch (e) {
      const why = e instanceof DataError ? e.message : `cannot decode (${e.message})`;
      onWarning(`skipped ${rel}: ${why}`);
    }
  }
  if (!keep.length)
    throw new DataError(
      `--data ${dir}: no usable PNG or JPEG image (${found.length} file${found.length === 1 ? '' : 's'} looked at)`,
    );
  const all = new Uint8Array(keep.length * per);
  pixels.forEach((p, i) => all.set(p, i * per));
  const classNames = [...new Set(keep.map(([, c]) => c).filter((c) => c != null))].sort();
  const labelled = classNames.length >= 2 && keep.every(([, c]) => c != null);
  return {
    name: `folder:${dir}`,
    n: keep.length,
    chans,
    size,
    pixels: all,
    labels: labelled ? Int32Array.from(keep.map(([, c]) => classNames.indexOf(c))) : null,
    classes: labelled ? classNames : null,
    files: keep.map(([f]) => f),
  };
}

/** A folder of images opened for streaming (web/train/datasets.js): every PNG / JPEG under dir is
 * (what: the folder as messages name it -- the CLI's flag, or the API's option; raise: how the
 * megapixel limit is raised, in the same words)
 * listed and its header checked (size within maxPixels) without decoding it; decode(i) reads and
 * decodes image i when a batch needs it. Files in sub-folders take the sub-folder's name as their
 * class (torchvision ImageFolder): labels and classes when there are at least two and every image
 * has one (classNames: the sub-folders found, whatever their number). A file skipped is said
 * through onWarning; no usable image at all is an error. */
export function openImageFolder(
  dir,
  {
    maxPixels = DEFAULT_MAX_PIXELS,
    onWarning = (m) => console.warn(m),
    what = `--data ${dir}`,
    raise = '--max-image-mp raises it',
  } = {},
) {
  const found = listImageFolder(dir, onWarning, what),
    keep = [];
  for (const [file, cls] of found) {
    const rel = path.relative(dir, file);
    try {
      checkImageSize(headerOf(file), maxPixels, raise);
      keep.push([file, rel, cls]);
    } catch (e) {
      onWarning(
        `skipped ${rel}: ${e instanceof DataError ? e.message : e.code ? e.message : `cannot read (${e.message})`}`,
      );
    }
  }
  if (!keep.length)
    throw new DataError(
      `${what}: no usable PNG or JPEG image (${found.length} file${found.length === 1 ? '' : 's'} looked at)`,
    );
  const classNames = [...new Set(keep.map(([, , c]) => c).filter((c) => c != null))].sort();
  const labelled = classNames.length >= 2 && keep.every(([, , c]) => c != null);
  return {
    name: `folder:${dir}`,
    n: keep.length,
    files: keep.map(([, r]) => r),
    classNames,
    labels: labelled ? Int32Array.from(keep.map(([, , c]) => classNames.indexOf(c))) : null,
    classes: labelled ? classNames : null,
    itemName: (i) => keep[i][1],
    decode(i) {
      try {
        return { ...decodeImage(readRegularFile(keep[i][0]), { maxPixels, raise }), chans: 4 };
      } catch (e) {
        throw new DataError(
          `${path.join(dir, keep[i][1])}: ${e instanceof DataError ? e.message : e.code ? e.message : `cannot decode (${e.message})`}`,
        );
      }
    },
  };
}

// every file under dir (sorted, hidden ones left out) with its class: the first sub-folder's name
// (what: the folder as messages name it)
function listImageFolder(dir, onWarning, what = `--data ${dir}`) {
  let st;
  try {
    st = statSync(dir);
  } catch (e) {
    throw new DataError(`${what}: ${e.code === 'ENOENT' ? 'no such file or directory' : e.message}`);
  }
  if (!st.isDirectory()) throw new DataError(`${what}: not a directory`);
  const found = [];
  const walk = (d, cls) => {
    let entries;
    try {
      entries = readdirSync(d, { withFileTypes: true });
    } catch (e) {
      onWarning(`skipped ${d}: ${e.message}`);
      return;
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const e of entries) {
      if (e.name.startsWith('.')) continue;
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p, cls ?? e.name);
      else found.push([p, cls]);
    }
  };
  walk(dir, null);
  return found;
}

// an image's header from the first bytes of its file (all of it when they do not hold the header)
function headerOf(file) {
  const fd = openSync(file, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
  let head, size;
  try {
    const st = fstatSync(fd);
    if (!st.isFile())
      throw new DataError(
        `not a regular file (${st.isFIFO() ? 'a FIFO' : st.isDirectory() ? 'a directory' : st.isSocket() ? 'a socket' : 'a device'})`,
      );
    if (st.size > MAX_IMAGE_FILE_BYTES) throw new DataError(`${st.size} bytes, more than ${MAX_IMAGE_FILE_BYTES}`);
    size = st.size;
    head = Buffer.alloc(Math.min(size, 1 << 18));
    head = head.subarray(0, readSync(fd, head, 0, head.length, 0));
  } finally {
    closeSync(fd);
  }
  try {
    return imageHeader(head);
  } catch (e) {
    if (head.length < size) return imageHeader(readRegularFile(file));
    throw e;
  }
}

// ---- files ---------------------------------------------------------------------------------------

/** Writes bytes so that `file` is always either the old or the new content: a temporary file in
 * the same directory, fsync, rename over, fsync of the directory. When anything fails (a full disk:
 * ENOSPC, EFBIG, EDQUOT) the temporary file is removed and the error is thrown with its code; `file`
 * is then as it was (absent if it was absent). */
export function writeAtomic(file, bytes) {
  const dir = path.dirname(file),
    tmp = path.join(dir, `.${path.basename(file)}.tmp-${process.pid}`);
  const fd = openSync(tmp, 'w');
  try {
    try {
      let off = 0;
      while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, file);
  } catch (e) {
    try {
      unlinkSync(tmp);
    } catch {
      /* already gone */
    }
    throw e;
  }
  try {
    const d = openSync(dir, 'r');
    try {
      fsyncSync(d);
    } finally {
      closeSync(d);
    }
  } catch {
    /* not every fs syncs directories */
  }
}
