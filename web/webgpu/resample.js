// resample.js: PyTorch's antialiased bicubic resize of one axis (resample_aa_forward / _backward:
// pos_embed at another grid, dynamic_img_size) on WebGPU. The taps and their weights depend on the
// sizes alone: they are made here on the host, with the C reference's float and double arithmetic
// step for step (kernels_ops_ref.c, vt_resample_aa_taps; Math.fround is float32 rounding), so the
// GPU applies the CPU's very weights, and read by the kernels from the program's constants.
//   table (u32 words): for each output y, [x0, nt, w_0 .. w_{T-1}] (T = the most taps of any y);
//   then for each input x, [ylo, yhi): the outputs whose taps may cover it (the backward's loop)
import { ew } from './elementwise.js';

const f = Math.fround;
const MAX_TAPS = 1024; // VT_RESAMPLE_MAX_TAPS (the engine refuses wider resizes)

// Pillow's bicubic, a = -0.5, in double as its literals are
function cubic(xf) {
  const x = Math.abs(xf),
    a = -0.5;
  if (x < 1) return f(((a + 2) * x - (a + 3)) * x * x + 1);
  if (x < 2) return f((((x - 5) * x + 8) * x - 4) * a);
  return 0;
}

/** The taps of output y of a resize n_in -> n_out: { x0, w: float32 weights }, as the C reference. */
export function resampleTaps(nIn, nOut, y) {
  const scale = f(f(nIn) / f(nOut)),
    support = scale >= 1 ? f(4 * 0.5 * scale) : 2,
    invscale = scale >= 1 ? f(1 / scale) : 1;
  const center = f(scale * (y + 0.5));
  const lo = Math.trunc(f(center - support) + 0.5),
    hi = Math.trunc(f(center + support) + 0.5);
  const x0 = Math.max(lo, 0),
    n = Math.min(Math.max(Math.min(hi, nIn) - x0, 0), MAX_TAPS);
  const w = new Float32Array(n);
  let total = 0;
  for (let j = 0; j < n; j++) {
    w[j] = cubic(f((f(f(j + x0) - center) + 0.5) * invscale));
    total = f(total + w[j]);
  }
  if (total !== 0) for (let j = 0; j < n; j++) w[j] = f(w[j] / total);
  return { x0, w };
}

// the table of a resize (see the header) and its row stride
function table(nIn, nOut) {
  const taps = Array.from({ length: nOut }, (_, y) => resampleTaps(nIn, nOut, y));
  const T = Math.max(1, ...taps.map((t) => t.w.length)),
    RS = 2 + T;
  const words = new Uint32Array(nOut * RS + 2 * nIn),
    fw = new Float32Array(words.buffer);
  taps.forEach(({ x0, w }, y) => {
    words[y * RS] = x0;
    words[y * RS + 1] = w.length;
    fw.set(w, y * RS + 2);
  });
  for (let x = 0; x < nIn; x++) {
    let ylo = nOut,
      yhi = 0;
    taps.forEach(({ x0, w }, y) => {
      if (x >= x0 && x < x0 + w.length) {
        ylo = Math.min(ylo, y);
        yhi = y + 1;
      }
    });
    words[nOut * RS + 2 * x] = Math.min(ylo, yhi);
    words[nOut * RS + 2 * x + 1] = yhi;
  }
  return { words, RS };
}

/** out[o, y, c] = sum_t inp[o, x0 + t, c] w_t, taps in order (outer x n_out x inner). */
export function resample_aa_forward(prog, { out, inp }, { outer, n_in, n_out, inner }) {
  if (outer * n_out * inner === 0) return;
  const { words, RS } = table(n_in, n_out);
  ew(
    prog,
    'resample_aa_forward',
    { out, inp, tbl: prog.constant(words) },
    { n_in, n_out, inner, RS },
    {},
    outer * n_out * inner,
    `  let c = i % u.inner;
  let y = (i / u.inner) % u.n_out;
  let o = i / (u.inner * u.n_out);
  let x0 = ldu_tbl(y * u.RS);
  let nt = ldu_tbl(y * u.RS + 1u);
  var acc = 0.0;
  for (var t = 0u; t < nt; t++) {
    let v = ld_inp((o * u.n_in + x0 + t) * u.inner + c) * bitcast<f32>(ldu_tbl(y * u.RS + 2u + t));
    acc = select(v, acc + v, t > 0u);
  }
  st_out(i, acc);`,
  );
}

/** dinp[o, x, c] += w dout[o, y, c] for every output y whose taps hold x, outputs in order (each
 * input element one invocation: the reference's order of adds). */
export function resample_aa_backward(prog, { dinp, dout }, { outer, n_in, n_out, inner }) {
  if (outer * n_in * inner === 0) return;
  const { words, RS } = table(n_in, n_out);
  ew(
    prog,
    'resample_aa_backward',
    { dinp, dout, tbl: prog.constant(words) },
    { n_in, n_out, inner, RS },
    {},
    outer * n_in * inner,
    `  let c = i % u.inner;
  let x = (i / u.inner) % u.n_in;
  let o = i / (u.inner * u.n_in);
  let yr = u.n_out * u.RS + 2u * x;
  var v = ld_dinp(i);
  for (var y = ldu_tbl(yr); y < ldu_tbl(yr + 1u); y++) {
    let x0 = ldu_tbl(y * u.RS);
    if (x >= x0 && x < x0 + ldu_tbl(y * u.RS + 1u)) {
      v = v + bitcast<f32>(ldu_tbl(y * u.RS + 2u + x - x0)) * ld_dout((o * u.n_out + y) * u.inner + c);
    }
  }
  st_dinp(i, v);`,
  );
}
