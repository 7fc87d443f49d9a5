// webgpu-util.mjs: helpers of the WebGPU tests (not a test file itself): the adapter (a test that
// needs one FAILS without it, naming what is missing), float64 references of the kernels, and a
// harness that lays arrays out in GPU buffers, runs kernel calls on them and reads them back.
import { requestGpu } from '../../web/webgpu/device.js';
import { BufferPool } from '../../web/webgpu/buffers.js';
import { Kernels, KERNELS, operand } from '../../web/webgpu/kernels.js';

/** The SwiftShader adapter (Chromium's ICD, the npm package webgpu), or an error saying what is
 * missing: scripts/setup.sh installs chromium, libvulkan1 and the npm packages. */
export async function testGpu() {
  try {
    return await requestGpu({ swiftshader: true });
  } catch (e) {
    throw new Error(
      `the WebGPU tests need an adapter and found none: ${e.message} ` +
        '(bash scripts/setup.sh installs chromium, libvulkan1 and the npm package webgpu)',
    );
  }
}

// ---- float64 references ------------------------------------------------------------------------

/** erf in float64 (Taylor series below 2.5, Lentz's continued fraction of erfc above; ~1e-14). */
export function erf64(x) {
  const a = Math.abs(x);
  if (a >= 2.5) return Math.sign(x) * (1 - erfc64(a));
  let term = a,
    sum = a;
  const x2 = a * a;
  for (let n = 1; n < 100; n++) {
    term *= -x2 / n;
    const t = term / (2 * n + 1);
    sum += t;
    if (Math.abs(t) < 1e-17 * Math.abs(sum)) break;
  }
  return (Math.sign(x) * sum * 2) / Math.sqrt(Math.PI);
}
/** erfc in float64, accurate in relative terms for large x too. */
export function erfc64(x) {
  if (x < 2.5) return 1 - erf64(x);
  let f = x; // x + (1/2)/(x + 1/(x + (3/2)/(x + ...))), evaluated from the tail
  for (let n = 80; n >= 1; n--) f = x + n / 2 / f;
  return Math.exp(-x * x) / Math.sqrt(Math.PI) / f;
}
/** the normal cdf 0.5 (1 + erf(x / sqrt 2)) without cancellation */
export const phi64 = (x) => (x >= 0 ? 1 - 0.5 * erfc64(x / Math.SQRT2) : 0.5 * erfc64(-x / Math.SQRT2));
export const gelu64 = (x) => x * phi64(x);
export const geluGrad64 = (x) => phi64(x) + (x * Math.exp(-0.5 * x * x)) / Math.sqrt(2 * Math.PI);

export function matmulRef(inp, w, bias, M, K, N) {
  const out = new Float64Array(M * N);
  for (let m = 0; m < M; m++)
    for (let n = 0; n < N; n++) {
      let s = bias ? bias[n] : 0;
      for (let k = 0; k < K; k++) s += inp[m * K + k] * w[n * K + k];
      out[m * N + n] = s;
    }
  return out;
}
export function matmulBackwardRef(dout, inp, w, M, K, N) {
  const dinp = new Float64Array(M * K),
    dw = new Float64Array(N * K),
    db = new Float64Array(N);
  for (let m = 0; m < M; m++)
    for (let n = 0; n < N; n++) {
      const g = dout[m * N + n];
      db[n] += g;
      for (let k = 0; k < K; k++) {
        dinp[m * K + k] += g * w[n * K + k];
        dw[n * K + k] += g * inp[m * K + k];
      }
    }
  return { dinp, dw, db };
}
export function layernormRef(x, w, b, M, D, eps) {
  const out = new Float64Array(M * D),
    mean = new Float64Array(M),
    rstd = new Float64Array(M);
  for (let m = 0; m < M; m++) {
    let s = 0,
      v = 0;
    for (let i = 0; i < D; i++) s += x[m * D + i];
    const mu = s / D;
    for (let i = 0; i < D; i++) v += (x[m * D + i] - mu) ** 2;
    const rs = 1 / Math.sqrt(v / D + eps);
    for (let i = 0; i < D; i++) out[m * D + i] = (x[m * D + i] - mu) * rs * (w ? w[i] : 1) + (b ? b[i] : 0);
    mean[m] = mu;
    rstd[m] = rs;
  }
  return { out, mean, rstd };
}
/** the LayerNorm backward from the input alone (mean and rstd recomputed in float64) */
export function layernormBackwardRef(dy, x, w, M, D, eps) {
  const { mean, rstd } = layernormRef(x, null, null, M, D, eps);
  const dinp = new Float64Array(M * D),
    dw = new Float64Array(D),
    db = new Float64Array(D);
  for (let m = 0; m < M; m++) {
    let a = 0,
      c = 0;
    for (let i = 0; i < D; i++) {
      const n = (x[m * D + i] - mean[m]) * rstd[m],
        dn = (w ? w[i] : 1) * dy[m * D + i];
      a += dn;
      c += dn * n;
      dw[i] += n * dy[m * D + i];
      db[i] += dy[m * D + i];
    }
    for (let i = 0; i < D; i++) {
      const n = (x[m * D + i] - mean[m]) * rstd[m],
        dn = (w ? w[i] : 1) * dy[m * D + i];
      dinp[m * D + i] = (dn - a / D - (n * c) / D) * rstd[m];
    }
  }
  return { dinp, dw, db };
}
/** attention forward and backward (float64) in the kernels' layout (kernels.h) */
export function attentionRef({ q, k, v, dout, mask }, { qk_rs, v_rs, B, T, H, hd, scale }) {
  const D = H * hd,
    out = new Float64Array(B * T * D),
    att = new Float64Array(B * H * T * T);
  const dq = new Float64Array(q.length),
    dk = new Float64Array(k.length),
    dv = new Float64Array(v.length);
  const Q = (b, t, h, e) => (b * T + t) * qk_rs + h * hd + e,
    V = (b, t, h, e) => (b * T + t) * v_rs + h * hd + e;
  for (let b = 0; b < B; b++)
    for (let h = 0; h < H; h++)
      for (let i = 0; i < T; i++) {
        const p = new Float64Array(T),
          seen = (j) => !(mask && j > i && mask[b * T + j]);
        let mx = -Infinity;
        for (let j = 0; j < T; j++) {
          if (!seen(j)) continue;
          let s = 0;
          for (let e = 0; e < hd; e++) s += q[Q(b, i, h, e)] * k[Q(b, j, h, e)];
          p[j] = s * scale;
          mx = Math.max(mx, p[j]);
        }
        let z = 0;
        for (let j = 0; j < T; j++) {
          p[j] = seen(j) ? Math.exp(p[j] - mx) : 0;
          z += p[j];
        }
        for (let j = 0; j < T; j++) p[j] /= z;
        att.set(p, ((b * H + h) * T + i) * T);
        for (let e = 0; e < hd; e++) {
          let o = 0;
          for (let j = 0; j < T; j++) o += p[j] * v[V(b, j, h, e)];
          out[(b * T + i) * D + h * hd + e] = o;
        }
        if (!dout) continue;
        const dp = new Float64Array(T);
        let sum = 0;
        for (let j = 0; j < T; j++) {
          for (let e = 0; e < hd; e++) {
            dp[j] += dout[(b * T + i) * D + h * hd + e] * v[V(b, j, h, e)];
            dv[V(b, j, h, e)] += p[j] * dout[(b * T + i) * D + h * hd + e];
          }
          sum += p[j] * dp[j];
        }
        for (let j = 0; j < T; j++) {
          const ds = p[j] * (dp[j] - sum) * scale;
          for (let e = 0; e < hd; e++) {
            dq[Q(b, i, h, e)] += ds * k[Q(b, j, h, e)];
            dk[Q(b, j, h, e)] += ds * q[Q(b, i, h, e)];
          }
        }
      }
  return { out, att, dq, dk, dv };
}

// ---- data ----------------------------------------------------------------------------------------

/** deterministic pseudo-random floats in [-s, s) (xorshift32) */
export function rand(n, seed = 1, s = 1) {
  let x = (seed * 2654435761) >>> 0 || 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = ((x / 4294967296) * 2 - 1) * s;
  }
  return out;
}

/** max|got - want| / max|want| (the parity rule's measure) */
export function rel(got, want) {
  let e = 0,
    m = 0;
  for (let i = 0; i < want.length; i++) {
    const d = Math.abs(got[i] - want[i]);
    e = Number.isNaN(d) ? Infinity : Math.max(e, d);
    m = Math.max(m, Math.abs(want[i]));
  }
  return m === 0 ? e : e / m;
}

export const sameBits = (a, b) =>
  Buffer.compare(
    Buffer.from(a.buffer, a.byteOffset, a.byteLength),
    Buffer.from(b.buffer, b.byteOffset, b.byteLength),
  ) === 0;

/**
 * Lays arrays (name -> Float32Array | Uint8Array) out in GPU memory -- all in one buffer at
 * offsets that are not 256-byte aligned (shared: true: every operand in one binding window), or
 * one buffer each -- runs `calls(prog, op)` (op(name) = that array's operand) and returns every
 * array read back. Every element of the read-back is checked: a kernel that writes outside its
 * outputs is caught by the test comparing those arrays with their inputs.
 */
export class Harness {
  /** opts: the Kernels' options ({ gemm: 'tiled' | 'reg' }: one GEMM family on any adapter) */
  constructor(gpu, opts = {}) {
    this.gpu = gpu;
    this.kernels = new Kernels(gpu, opts);
    this.pool = new BufferPool(gpu);
  }
  async run(arrays, calls, { shared = true, times = 1 } = {}) {
    const names = Object.keys(arrays),
      where = {},
      bufs = [];
    const opFor = (bufOf) => (n) => {
      const a = arrays[n],
        w = where[n];
      return a instanceof Uint8Array
        ? operand(bufOf(w.b), w.off * 4, a.length, 'u8')
        : operand(bufOf(w.b), w.off, a.length);
    };
    // a dry run of the calls sizes the workspace, which then sits in the same buffer (as in the
    // backend: one binding per dispatch, one pipeline per kernel)
    const dry = this.kernels.program('dry');
    let top = 6; // floats: operands at offsets that are not 256-byte aligned (but 8-byte: i64 data)
    for (const n of names) {
      where[n] = shared ? { b: 0, off: top } : { b: bufs.length + names.indexOf(n), off: 2 };
      top += Math.ceil(arrays[n].byteLength / 8) * 2 + 6;
    }
    calls(
      dry,
      opFor(() => ({ size: Infinity })),
    );
    const wsOff = Math.ceil((top * 4) / 256) * 256;
    if (shared) bufs.push(await this.pool.storage(wsOff + dry.workspaceBytes, 'test arena'));
    else for (const n of names) bufs.push(await this.pool.storage(arrays[n].byteLength + 32, n));
    for (const n of names) this.pool.upload(bufs[where[n].b], where[n].off * 4, arrays[n]);
    const prog = this.kernels.program('test');
    calls(
      prog,
      opFor((b) => bufs[b]),
    );
    await prog.build(shared ? { workspace: { buf: bufs[0], byteOffset: wsOff } } : {});
    for (let i = 0; i < times; i++) prog.run();
    const out = {};
    for (const n of names) {
      const bytes = await this.pool.read(bufs[where[n].b], where[n].off * 4, arrays[n].byteLength);
      out[n] = arrays[n] instanceof Uint8Array ? new Uint8Array(bytes) : new Float32Array(bytes);
    }
    for (const b of bufs) this.pool.release(b);
    out.workspaceBytes = prog.workspaceBytes;
    prog.destroy();
    return out;
  }
}

// ---- the wasm build's kernels, against which the GPU's are compared --------------------------------

/** The kernel contract of a wasm engine (vt): name -> { ops: [[name, type, access, length]], ints, floats } (the manifest). */
export function contractOf(vt) {
  return vt.manifest.kernels;
}

/**
 * Kernel `name` run by the wasm engine vt (vtw_kernel_run: the CPU's kernel, as a recorded call of it
 * runs) on copies of `arrays` (name -> Float32Array); bind: operand name -> array name, or null (absent;
 * two operands may name one array: aliasing); ints / floats by name (the contract's). Returns every
 * array after the call.
 */
export function wasmKernel(vt, contract, name, arrays, bind, ints = {}, floats = {}) {
  const sig = contract[name],
    at = {},
    mem = [];
  const grab = (bytes) => {
    const p = vt.alloc(bytes);
    mem.push(p);
    return p;
  };
  try {
    for (const [k, a] of Object.entries(arrays)) {
      at[k] = vt.copyIn(a.length ? a : new Float32Array(1));
      mem.push(at[k]);
    }
    const po = grab(4 * sig.ops.length),
      pi = grab(8 * Math.max(1, sig.ints.length)),
      pf = grab(4 * Math.max(1, sig.floats.length));
    const dv = () => new DataView(vt.u8().buffer);
    sig.ops.forEach(([o], i) => dv().setUint32(po + 4 * i, bind[o] ? at[bind[o]] : 0, true));
    sig.ints.forEach((x, i) => dv().setFloat64(pi + 8 * i, ints[x], true));
    sig.floats.forEach((x, i) => dv().setFloat32(pf + 4 * i, floats[x], true));
    vt.check(vt.withStrings([name], (s) => vt._c.kernel_run(s, po, pi, sig.ints.length, pf)));
    const out = {};
    for (const [k, a] of Object.entries(arrays))
      out[k] = new Float32Array(vt.u8().slice(at[k], at[k] + a.byteLength).buffer);
    return out;
  } finally {
    mem.forEach((p) => vt.free(p));
  }
}

/**
 * Kernel `name` on the GPU (harness H, KERNELS[name]) and on the wasm build, each on its own copy of
 * arrays, the GPU twice: { gpu, wasm }; throws unless the GPU gives the same bits both times and
 * leaves every array but `outputs` as it was.
 */
export async function gpuAndWasm(H, vt, contract, name, arrays, bind, ints, floats, outputs) {
  const sig = contract[name];
  const gpuRun = () =>
    H.run(arrays, (p, o) => {
      const ops = {};
      for (const [x] of sig.ops) ops[x] = bind[x] ? o(bind[x]) : null;
      KERNELS[name](p, ops, ints, floats);
    });
  const gpu = await gpuRun(),
    again = await gpuRun(),
    wasm = wasmKernel(vt, contract, name, arrays, bind, ints, floats);
  for (const k of Object.keys(arrays)) {
    if (!sameBits(gpu[k], again[k])) throw new Error(`${name}: ${k} differs between two GPU runs`);
    if (!outputs.includes(k) && !(sameBits(gpu[k], arrays[k]) && sameBits(wasm[k], arrays[k])))
      throw new Error(`${name}: ${k} (not an output) was written`);
  }
  return { gpu, wasm };
}
