// parity.js: `vitrine parity --backend webgpu` -- a PyTorch parity file (docs/parity-format.md)
// computed on the GPU and judged by the engine's own parity harness. The harness makes the file's
// model and inputs and records the call twice (harness/parity.h: forward only, where the outputs
// are left; forward + backward with the file's upstream gradients); both lists replay here over
// the model's parameters and the lists' recorded inputs; what the GPU computed goes back as a dump
// (the --dump layout) that vt_parity_check compares with the file exactly as the wasm harness
// compares its own results. AdamW files run the WGSL AdamW kernel step by step; sin-cos table files
// are not a kernel computation (the table is made when a model is built): they run through the
// wasm harness, and the result says so (`backend`).
import { BufferPool } from './buffers.js';
import { kernelsOf, operand, KERNELS } from './kernels.js';
import { GpuStep } from './step.js';
import { readSafetensorsHeader } from '../formats/safetensors.js';
import { adapterName } from './device.js';

/** Where a result of GpuParity.run was computed, for a report's line: "webgpu on <adapter>", or
 * wasm with the reason (a sin-cos table). */
export const ranOn = (r) => (r.backend === 'webgpu' ? `webgpu on ${r.adapter}` : r.backend);

const INPUTS = ['images', 'idx_keep', 'idx_mask', 'mask', 'labels', 'douts', 'scalars'];
const ZEROED = ['grads', 'dimages']; // accumulated into (the harness zeroes the gradients first)

/** Safetensors bytes of float32 tensors: [{ name, shape, data: Float32Array }]. */
export function f32Safetensors(tensors) {
  const header = {};
  let off = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: 'F32', shape: t.shape, data_offsets: [off, off + t.data.byteLength] };
    off += t.data.byteLength;
  }
  let text = JSON.stringify(header);
  while ((8 + text.length) % 8) text += ' ';
  const h = new TextEncoder().encode(text),
    out = new Uint8Array(8 + h.length + off);
  new DataView(out.buffer).setBigUint64(0, BigInt(h.length), true);
  out.set(h, 8);
  off = 8 + h.length;
  for (const t of tensors) {
    out.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), off);
    off += t.data.byteLength;
  }
  return out;
}

// a tensor of a parity file as float32 (F32 only: what the AdamW files hold)
function tensorOf(u8, name) {
  const { length: n, header } = readSafetensorsHeader(u8),
    t = header[name];
  if (!t) throw new Error(`${name} is missing`);
  if (t.dtype !== 'F32') throw new Error(`${name} is ${t.dtype}, not F32`);
  const [a, b] = t.data_offsets;
  const raw = new Uint8Array(b - a); // a copy (a Node Buffer's slice would share its pool)
  raw.set(u8.subarray(8 + n + a, 8 + n + b));
  return { shape: t.shape, data: new Float32Array(raw.buffer) };
}

/** The GPU side of parity runs on one engine: its kernels and buffers (gpu: vt.backend.gpu). */
export class GpuParity {
  constructor(vt, gpu) {
    this.vt = vt;
    this.gpu = gpu;
    this.kernels = kernelsOf(gpu);
    this.pool = new BufferPool(gpu);
  }

  /** Runs one file (bytes) as vt.parity does, on the GPU: the same result object. */
  async run(bytes, { policy = null, dump = false, file = null } = {}) {
    const vt = this.vt,
      u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    let meta, call;
    try {
      meta = readSafetensorsHeader(u8).header.__metadata__ || {};
      call = JSON.parse(meta.call || '{}');
    } catch {
      meta = {};
      call = {};
    }
    if (call.fn === 'sincos')
      return this._named(
        vt.parity(u8, { policy, dump, file }),
        'wasm (a sin-cos table is made when a model is built, not by a kernel of the step)',
      );
    let tensors;
    try {
      tensors = meta.module === 'torch.optim.AdamW' ? await this._adamw(u8, meta, call) : await this._model(u8, policy);
    } catch (e) {
      // the device failed: not a property of the file (a kernel the GPU lacks is: the file fails)
      if (e.name === 'GpuError' && e.kind !== 'unsupported') throw e;
      // a failure of the file on the GPU: the file's module and call, as the harness names them
      const r = vt.parity(null, { file, readError: e.message });
      r.status = e.status ?? -1;
      r.module = typeof meta.module === 'string' ? meta.module : '';
      r.fn = typeof call.fn === 'string' ? call.fn : '';
      r.json = r.json
        .replace(/"status": -?\d+/, `"status": ${r.status}`)
        .replace('"module": "", "fn": ""', `"module": ${JSON.stringify(r.module)}, "fn": ${JSON.stringify(r.fn)}`);
      return this._named(r, 'webgpu');
    }
    const d = f32Safetensors(tensors),
      r = this._check(u8, d, file);
    if (dump) r.dump = d;
    return this._named(r, 'webgpu');
  }

  /** Where result r ran, for its report line (ranOn). */
  ranOn(r) {
    return ranOn(r);
  }

  // the result named with where it ran: backend (and the adapter, on the GPU), in the object and
  // its JSON (the harness's, with "backend" and "adapter" added last)
  _named(r, backend) {
    r.backend = backend;
    r.adapter = backend === 'webgpu' ? adapterName(this.gpu.info) : null;
    if (r.json)
      r.json = `${r.json.slice(0, -1)}, "backend": ${JSON.stringify(backend)}, "adapter": ${JSON.stringify(r.adapter)}}`;
    return r;
  }

  _check(u8, dumpBytes, file) {
    return this.vt.parityCheck(u8, dumpBytes, file);
  }

  // a model's file: the harness's two recordings, replayed; the outputs, parameter gradients and d images
  async _model(u8, policy) {
    const job = this.vt.openParityJob(u8, policy);
    try {
      const [fwd, full] = job.record();
      const out = [];
      const outputs = await this._replay(job, fwd, 0, async (s) =>
        Promise.all(
          fwd.outputs.map(async ([r, off, bytes, shape], i) => ({
            name: job.outputName(i),
            shape,
            data: new Float32Array(await s.read(r, off, bytes)),
          })),
        ),
      );
      out.push(...outputs);
      await this._replay(job, full, 1, async (s) => {
        const grads = new Float32Array(await s.read('grads'));
        for (const g of job.gradients())
          out.push({ name: `grad/${g.name}`, shape: g.shape, data: grads.slice(g.at, g.at + g.numel) });
        if (full.regions.dimages) {
          const di = new Float32Array(await s.read('dimages'));
          out.push({ name: 'grad/input/images', shape: imagesShape(u8, di.length), data: di });
        }
      });
      return out;
    } finally {
      job.close();
    }
  }

  // one recording on the GPU: parameters from the model, inputs as recorded, gradients zeroed
  async _replay(job, trace, which, read) {
    const s = await GpuStep.create(
      this.kernels,
      this.pool,
      trace,
      this.vt.manifest.kernels,
      `parity ${which ? 'backward' : 'forward'}`,
    );
    try {
      const params = job.region('params');
      s.write('params', 0, params.slice(0, Math.min(params.length, trace.regions.params)));
      for (const r of INPUTS) {
        if (!trace.regions[r]) continue;
        const bytes = job.input(which, r, trace.regions[r]);
        if (bytes) s.write(r, 0, bytes);
      }
      for (const r of ZEROED) if (trace.regions[r]) s.write(r, 0, new Uint8Array(trace.regions[r]));
      s.run();
      return await read(s);
    } finally {
      s.destroy();
    }
  }

  // AdamW: the file's steps through the WGSL kernel, the parameter read after each
  async _adamw(u8, meta, call) {
    const cfg = JSON.parse(meta.config || '{}'),
      steps = call.steps;
    if (!Number.isInteger(steps) || steps < 1 || steps > 100000) throw new Error('AdamW call needs steps >= 1');
    const w = tensorOf(u8, 'param/w'),
      n = w.data.length;
    const grads = Array.from({ length: steps }, (_, s) => tensorOf(u8, `input/grad.${s}`).data);
    if (grads.some((g) => g.length !== n)) throw new Error('an input/grad.<s> of another size than param/w');
    // one buffer: p, m, v, the gradients, the parameters after each step, lr, the step counts, the flag
    const off = { p: 0, m: n, v: 2 * n, g: 3 * n, out: (3 + steps) * n, lr: (3 + 2 * steps) * n },
      words = off.lr + 2 + steps;
    const buf = await this.pool.storage(words * 4, 'parity adamw'),
      prog = this.kernels.program('parity adamw');
    try {
      const init = new Float32Array(words);
      init.set(w.data, off.p);
      grads.forEach((g, s) => init.set(g, off.g + s * n));
      init[off.lr] = cfg.lr;
      for (let s = 0; s < steps; s++) init[off.lr + 2 + s] = s + 1; // flag at off.lr + 1 stays 0
      this.pool.upload(buf, 0, init);
      const op = (o, len) => operand(buf, o, len);
      for (let s = 0; s < steps; s++) {
        KERNELS.adamw(
          prog,
          {
            p: op(off.p, n),
            m: op(off.m, n),
            v: op(off.v, n),
            g: op(off.g + s * n, n),
            lr: op(off.lr, 1),
            step: op(off.lr + 2 + s, 1),
            flag: op(off.lr + 1, 1),
          },
          { n },
          { b1: cfg.betas[0], b2: cfg.betas[1], eps: cfg.eps, wd: cfg.weight_decay },
        );
        KERNELS.copy2d(
          prog,
          { dst: op(off.out + s * n, n), src: op(off.p, n) },
          { rows: 1, cols: n, dst_stride: n, src_stride: n },
        );
      }
      await prog.build();
      prog.run();
      const after = new Float32Array(await this.pool.read(buf, off.out * 4, steps * n * 4));
      return grads.map((_, s) => ({ name: `param.${s}`, shape: w.shape, data: after.slice(s * n, (s + 1) * n) }));
    } finally {
      prog.destroy();
      this.pool.release(buf);
    }
  }

  destroy() {
    this.pool.destroy();
  }
}

// the shape of the job's images: the file's input/images (any height and width), else a flat vector
function imagesShape(u8, floats) {
  const t = readSafetensorsHeader(u8).header['input/images'];
  return t && t.shape.reduce((a, b) => a * b, 1) === floats ? t.shape : [floats];
}
