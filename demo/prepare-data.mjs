// prepare-data.mjs: the demo's built-in image sample, made at build time from Debian's
// dataset-fashion-mnist package (never committed). Writes, under build/demo-data/:
//   fmnist-sample.bin         N x 28 x 28 uint8 (row-major, 0 = black background)
//   fmnist-sample-labels.bin  N uint8 class ids
//   fmnist-sample.json        { n, width, height, channels, classes, source }
// Usage: node demo/prepare-data.mjs [--n 2048] [--out DIR] [--force]
import { readFile, writeFile, mkdir, stat } from 'node:fs/promises';
import { gunzipSync } from 'node:zlib';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const DATASET_DIR = process.env.FASHION_MNIST_DIR || '/usr/share/datasets/fashion-mnist';
export const DEFAULT_OUT = join(ROOT, 'build', 'demo-data');
export const CLASSES = [
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

// An IDX file (gzip'd or not) -> { dims, data: Uint8Array }; only ubyte data (type 0x08).
export function readIdx(bytes) {
  const b = bytes[0] === 0x1f && bytes[1] === 0x8b ? new Uint8Array(gunzipSync(bytes)) : bytes;
  if (b.length < 4 || b[0] !== 0 || b[1] !== 0 || b[2] !== 0x08) throw new Error('not an IDX ubyte file');
  const nd = b[3];
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const dims = [];
  for (let i = 0; i < nd; i++) dims.push(dv.getUint32(4 + 4 * i, false));
  const off = 4 + 4 * nd,
    n = dims.reduce((a, c) => a * c, 1);
  if (b.length < off + n) throw new Error(`IDX file truncated: ${b.length - off} of ${n} bytes`);
  return { dims, data: b.subarray(off, off + n) };
}

async function exists(p) {
  try {
    await stat(p);
    return true;
  } catch {
    return false;
  }
}

/** Writes the sample unless it is there already (force: rewrite). Returns the output paths. */
export async function prepareData({ n = 2048, out = DEFAULT_OUT, force = false, quiet = false } = {}) {
  const paths = {
    images: join(out, 'fmnist-sample.bin'),
    labels: join(out, 'fmnist-sample-labels.bin'),
    meta: join(out, 'fmnist-sample.json'),
  };
  if (!force && (await exists(paths.images)) && (await exists(paths.labels)) && (await exists(paths.meta))) {
    const meta = JSON.parse(await readFile(paths.meta, 'utf8'));
    if (meta.n === n) return paths;
  }
  const imgFile = join(DATASET_DIR, 'train-images-idx3-ubyte.gz'),
    lblFile = join(DATASET_DIR, 'train-labels-idx1-ubyte.gz');
  if (!(await exists(imgFile))) {
    throw new Error(
      `${imgFile} not found: install Debian's dataset-fashion-mnist (apt-get install -y dataset-fashion-mnist)` +
        ' or set FASHION_MNIST_DIR',
    );
  }
  const imgs = readIdx(new Uint8Array(await readFile(imgFile)));
  const lbls = readIdx(new Uint8Array(await readFile(lblFile)));
  const [N, H, W] = imgs.dims;
  if (lbls.dims[0] !== N) throw new Error(`images (${N}) and labels (${lbls.dims[0]}) differ in count`);
  n = Math.min(n, N);
  await mkdir(out, { recursive: true });
  await writeFile(paths.images, imgs.data.subarray(0, n * H * W));
  await writeFile(paths.labels, lbls.data.subarray(0, n));
  await writeFile(
    paths.meta,
    JSON.stringify(
      {
        n,
        width: W,
        height: H,
        channels: 1,
        classes: CLASSES,
        source: 'Fashion-MNIST train set (Debian dataset-fashion-mnist), the first ' + n + ' images',
      },
      null,
      1,
    ) + '\n',
  );
  if (!quiet) console.log(`demo data: ${n} Fashion-MNIST images (${W}x${H}) -> ${out}`);
  return paths;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const opt = (name, def) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : def;
  };
  prepareData({
    n: Number(opt('--n', 2048)),
    out: resolve(opt('--out', DEFAULT_OUT)),
    force: args.includes('--force'),
  }).catch((e) => {
    console.error(e.message);
    process.exit(1);
  });
}
