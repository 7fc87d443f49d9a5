// program.js: a list of compute dispatches built once and run many times -- the form a recorded
// step takes on the GPU. Each dispatch = a WGSL kernel variant (pipeline, cached by its source),
// its operands bound as windows of the caller's buffers, and its integer/float arguments in a
// 256-byte slot of one uniform buffer. Built once (pipelines compiled, bind groups made), a
// program is replayed by encoding its dispatches into one compute pass: no JS work per element,
// no allocation per run.
//
// Operands are (buffer, offset, length) in elements of their type, like the recorded step's
// (region, offset, length). WebGPU forbids a writable binding that overlaps another binding of
// the same buffer in one dispatch, and binding offsets must be 256-byte aligned: so every
// distinct buffer of a dispatch is bound ONCE, as the aligned window that covers all of its
// operands, and each operand's offset inside that window is a uniform. A window larger than
// maxStorageBufferBindingSize is refused (GpuError 'limit'): the plan keeps operands smaller.
//
// Scratch the kernels need beyond their operands (split-K partials, attention's d scores) comes
// from the program's workspace: one region, reused by every dispatch (contents never kept from
// one kernel call to the next), sized by the largest need; `workspaceBytes` tells the plan. The
// backend places it in the buffer that holds everything else, so that nearly every dispatch has
// ONE binding and each kernel one pipeline (layout flags are uniforms, not variants): few
// pipelines to compile, in the browser as on SwiftShader. Tables a kernel needs that depend on the
// shapes alone (resampling taps) are made on the host and uploaded once at build into a small
// constants buffer of the program's own (`constant`), as its uniforms are.
import { GpuError } from './device.js';
import { header } from './wgsl.js';

export const WORKSPACE = Symbol('workspace');
export const CONSTANTS = Symbol('constants');
const SLOT = 256; // bytes of uniforms per dispatch (minUniformBufferOffsetAlignment <= 256 everywhere)
// element sizes; on the GPU an f64 operand holds a float32 in its first word (WGSL has no f64;
// only this backend's kernels read it: grad_norm -> clip_grads), an i64 is read by its low word
export const TYPE_BYTES = { f32: 4, u32: 4, i32: 4, u8: 1, i64: 8, f64: 8 };

/** An operand: `len` elements of `type` at element `off` of `buf` (a GPUBuffer or WORKSPACE). */
export function operand(buf, off = 0, len = undefined, type = 'f32') {
  if (len === undefined) len = buf.size / TYPE_BYTES[type] - off;
  return { buf, off, len, type };
}

/** An absent operand of a type (the kernel's flags say not to touch it). */
export const absent = (type) => ({ absent: true, type });

/** Pipelines by WGSL source, per device (compiled once, shared by every program). */
export class PipelineCache {
  constructor(gpu) {
    this.gpu = gpu;
    this.map = new Map(); // code -> Promise<GPUComputePipeline>
    this.layouts = new Map(); // storage bindings -> GPUPipelineLayout
  }
  layout(n) {
    if (!this.layouts.has(n)) {
      const d = this.gpu.device;
      const entries = [{ binding: 0, visibility: GPUShaderStage.COMPUTE, buffer: { type: 'uniform' } }];
      for (let i = 1; i <= n; i++)
        entries.push({ binding: i, visibility: GPUShaderStage.COMPUTE, buffer: { type: 'storage' } });
      const bgl = d.createBindGroupLayout({ label: `vitrine ${n} buffers`, entries });
      this.layouts.set(n, { bgl, pl: d.createPipelineLayout({ bindGroupLayouts: [bgl] }) });
    }
    return this.layouts.get(n);
  }
  get(label, code, nbuf) {
    let p = this.map.get(code);
    if (!p) {
      p = (async () => {
        const module = await this.gpu.shader(label, code);
        try {
          return await this.gpu.device.createComputePipelineAsync({
            label,
            layout: this.layout(nbuf).pl,
            compute: { module, entryPoint: 'main' },
          });
        } catch (e) {
          throw new GpuError('compile', `pipeline ${label}: ${e.message}`);
        }
      })();
      this.map.set(code, p);
      p.catch(() => this.map.delete(code)); // a failure is not cached
    }
    return p;
  }
}

export class Program {
  /** kernels: the Kernels library (web/webgpu/kernels.js) whose device and caches it uses. */
  constructor(kernels, label = 'program') {
    this.k = kernels;
    this.gpu = kernels.gpu;
    this.label = label;
    this.list = []; // { label, ops, body, args, fargs, grid; at build: windows, uniforms, code }
    this.workspaceFloats = 0;
    this.constWords = []; // tables the kernels read (u32 words), uploaded once at build
    this.constAt = new Map(); // a table's words (as a string) -> its offset: one copy of each
    this.built = false;
  }

  get workspaceBytes() {
    return this.workspaceFloats * 4;
  }

  /** A workspace operand of n 4-byte elements (f32, or u32) at word offset off. */
  scratch(n, off = 0, type = 'f32') {
    this.workspaceFloats = Math.max(this.workspaceFloats, off + n);
    return operand(WORKSPACE, off, n, type);
  }

  /** A read-only table of u32 words (a Uint32Array) made on the host (a kernel's per-shape
   * coefficients, e.g. resampling taps): an operand in the program's constants buffer. */
  constant(words) {
    const key = words.join(',');
    let off = this.constAt.get(key);
    if (off === undefined) {
      off = this.constWords.length;
      this.constAt.set(key, off);
      for (const w of words) this.constWords.push(w);
    }
    return operand(CONSTANTS, off, words.length, 'u32');
  }

  /**
   * Appends one dispatch: kernel `name` with WGSL `body` (after the header wgsl.js makes), ops
   * { name: operand | null | absent(type) }, u32 args, f32 fargs, grid [x, y, z] workgroups. An
   * absent operand (null: an f32 one) is bound to the place of the first present one (so that a
   * kernel with and without it shares one pipeline): the kernel must not touch it (flags say so).
   */
  dispatch(name, ops, body, args, fargs, grid) {
    if (this.built) throw new Error('Program.dispatch after build()');
    if (grid.some((g) => g === 0)) return; // nothing to compute
    const maxg = this.gpu.limits.maxComputeWorkgroupsPerDimension;
    if (grid.some((g) => g > maxg))
      throw new GpuError('limit', `${name}: ${grid.join('x')} workgroups exceed ${maxg} per dimension`);
    const first = Object.values(ops).find((o) => o && !o.absent);
    const all = {};
    for (const [k, o] of Object.entries(ops)) {
      if (o && !o.absent) {
        all[k] = o;
        continue;
      }
      const type = o ? o.type : 'f32';
      all[k] = {
        buf: first.buf,
        off: Math.floor((first.off * TYPE_BYTES[first.type]) / TYPE_BYTES[type]),
        len: 1,
        type,
      };
    }
    for (const v of Object.values(args))
      if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) throw new Error(`${name}: argument ${v} is not a u32`);
    this.list.push({ label: name, ops: all, body, args, fargs, grid });
  }

  // The windows of one dispatch (one per distinct buffer), its header + body, its uniforms.
  layout(d) {
    const align = this.gpu.limits.minStorageBufferOffsetAlignment;
    const maxBind = this.gpu.limits.maxStorageBufferBindingSize;
    const real = (o) => (o.buf === WORKSPACE ? this.workspace : o.buf === CONSTANTS ? this.constBuf : o.buf);
    const shift = (o) => (o.buf === WORKSPACE ? this.workspaceOff : 0); // bytes
    const windows = [],
      slotOf = new Map(),
      bind = [],
      offs = {};
    for (const o of Object.values(d.ops)) {
      const buf = real(o),
        tb = TYPE_BYTES[o.type];
      if (!slotOf.has(buf)) {
        slotOf.set(buf, windows.length);
        windows.push({ buf, lo: Infinity, hi: 0 });
      }
      const w = windows[slotOf.get(buf)];
      w.lo = Math.min(w.lo, shift(o) + o.off * tb);
      w.hi = Math.max(w.hi, shift(o) + (o.off + Math.max(o.len, 1)) * tb);
    }
    for (const w of windows) {
      w.lo = Math.floor(w.lo / align) * align;
      w.hi = Math.ceil(w.hi / 4) * 4;
      if (w.hi > w.buf.size)
        throw new GpuError('limit', `${d.label}: an operand ends at byte ${w.hi} of a ${w.buf.size}-byte buffer`);
      if (w.hi - w.lo > maxBind)
        throw new GpuError(
          'limit',
          `${d.label}: its operands span ${w.hi - w.lo} bytes of one buffer, over ` +
            `maxStorageBufferBindingSize (${maxBind})`,
        );
    }
    for (const [name, o] of Object.entries(d.ops)) {
      const s = slotOf.get(real(o)),
        tb = TYPE_BYTES[o.type];
      bind.push({ name, slot: s + 1, type: o.type });
      // element offset inside the window (bytes for u8 operands, 4-byte words otherwise)
      offs[name] = (shift(o) + o.off * tb - windows[s].lo) / (tb === 1 ? 1 : 4);
    }
    const fields = [...Object.keys(d.args), ...Object.keys(d.fargs), ...bind.map((b) => `o_${b.name}`)];
    if (fields.length * 4 > SLOT) throw new Error(`${d.label}: too many uniforms`);
    const u = new Uint32Array(SLOT / 4),
      uf = new Float32Array(u.buffer);
    let i = 0;
    for (const v of Object.values(d.args)) u[i++] = v;
    for (const v of Object.values(d.fargs)) uf[i++] = v;
    for (const b of bind) u[i++] = offs[b.name];
    d.windows = windows;
    d.uniforms = u;
    d.fieldIndex = fields;
    d.code = header(windows.length, fields, new Set(Object.keys(d.fargs)), bind) + d.body;
  }

  /** Compiles the pipelines, places the workspace (in `opts.workspace` = { buf, byteOffset } of
   * the caller's, else a buffer of its own), lays the operands out, makes the bind groups. */
  async build(opts = {}) {
    const { device } = this.gpu;
    if (this.workspaceFloats > 0 && opts.workspace) {
      const { buf, byteOffset } = opts.workspace;
      if (byteOffset + this.workspaceBytes > buf.size)
        throw new GpuError(
          'limit',
          `${this.label}: the workspace needs ${this.workspaceBytes} bytes at ${byteOffset} of a ${buf.size}-byte buffer`,
        );
      this.workspace = buf;
      this.workspaceOff = byteOffset;
      this.ownWorkspace = false;
    } else if (this.workspaceFloats > 0) {
      this.workspace = await this.gpu.scoped(`${this.label}: workspace`, () =>
        device.createBuffer({
          label: `${this.label} workspace`,
          size: Math.ceil(this.workspaceFloats / 64) * 256,
          usage: GPUBufferUsage.STORAGE,
        }),
      );
      this.workspaceOff = 0;
      this.ownWorkspace = true;
    }
    if (this.constWords.length)
      this.constBuf = await this.gpu.scoped(`${this.label}: constants`, () => {
        const words = Uint32Array.from(this.constWords),
          buf = device.createBuffer({
            label: `${this.label} constants`,
            size: Math.ceil(words.byteLength / 256) * 256,
            usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST,
          });
        device.queue.writeBuffer(buf, 0, words);
        return buf;
      });
    for (const d of this.list) this.layout(d);
    const pipelines = await Promise.all(this.list.map((d) => this.k.pipelines.get(d.label, d.code, d.windows.length)));
    await this.gpu.scoped(`${this.label}: build`, () => {
      const n = Math.max(1, this.list.length);
      this.ubuf = device.createBuffer({
        label: `${this.label} uniforms`,
        size: n * SLOT,
        usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
      });
      const all = new Uint8Array(n * SLOT);
      this.list.forEach((d, i) => all.set(new Uint8Array(d.uniforms.buffer), i * SLOT));
      device.queue.writeBuffer(this.ubuf, 0, all);
      this.steps = this.list.map((d, i) => {
        const entries = [{ binding: 0, resource: { buffer: this.ubuf, offset: i * SLOT, size: SLOT } }];
        d.windows.forEach((w, s) =>
          entries.push({ binding: s + 1, resource: { buffer: w.buf, offset: w.lo, size: w.hi - w.lo } }),
        );
        const bindGroup = device.createBindGroup({
          label: d.label,
          layout: this.k.pipelines.layout(d.windows.length).bgl,
          entries,
        });
        return { pipeline: pipelines[i], bindGroup, grid: d.grid };
      });
    });
    this.built = true;
    return this;
  }

  /** The distinct kernels (pipelines) of the program. */
  get pipelineCount() {
    return new Set(this.list.map((d) => d.code)).size;
  }

  /** Sets a float argument of dispatch i (step-varying scalars: AdamW's lr, its step count). */
  setFloat(i, field, value) {
    const d = this.list[i],
      j = d.fieldIndex.indexOf(field);
    if (j < 0) throw new Error(`${d.label} has no argument ${field}`);
    new Float32Array(d.uniforms.buffer)[j] = value;
    if (this.built) this.gpu.device.queue.writeBuffer(this.ubuf, i * SLOT + j * 4, d.uniforms, j, 1);
  }

  /** Encodes every dispatch, in order, into one compute pass of `encoder`. */
  encode(encoder) {
    if (!this.built) throw new Error('Program.encode before build()');
    const pass = encoder.beginComputePass({ label: this.label });
    for (const s of this.steps) {
      pass.setPipeline(s.pipeline);
      pass.setBindGroup(0, s.bindGroup);
      pass.dispatchWorkgroups(s.grid[0], s.grid[1], s.grid[2]);
    }
    pass.end();
  }

  /** Runs each dispatch alone and waits for it: [{ label, ms }] (a bench's per-kernel view; slow). */
  async profile() {
    const out = [];
    for (const [i, s] of this.steps.entries()) {
      const enc = this.gpu.device.createCommandEncoder();
      const pass = enc.beginComputePass();
      pass.setPipeline(s.pipeline);
      pass.setBindGroup(0, s.bindGroup);
      pass.dispatchWorkgroups(s.grid[0], s.grid[1], s.grid[2]);
      pass.end();
      const t = performance.now();
      this.gpu.device.queue.submit([enc.finish()]);
      await this.gpu.device.queue.onSubmittedWorkDone();
      out.push({ label: this.list[i].label, ms: performance.now() - t, grid: s.grid });
    }
    this.gpu.check();
    return out;
  }

  /** Runs the program once (submitted; completes in queue order). */
  run() {
    this.gpu.check();
    const enc = this.gpu.device.createCommandEncoder({ label: this.label });
    this.encode(enc);
    this.gpu.device.queue.submit([enc.finish()]);
  }

  destroy() {
    this.ubuf?.destroy();
    this.constBuf?.destroy();
    if (this.ownWorkspace) this.workspace?.destroy();
    this.steps = null;
  }
}
