// step.js: a recorded step (issue 20's trace, format vitrine-trace/1) as a GPU program. The
// regions the list addresses (parameters, gradients, AdamW's m and v, the activation arena, the
// inputs, the scalars) become GPU memory laid out as the trace says -- each region's bytes at
// one offset -- and every kernel call becomes the dispatches of its WGSL kernel (kernels.js)
// over those bytes. Built once per recording; then each step writes its inputs, runs, and reads
// back only what it asks for.
//
// Memory: every region in ONE buffer when the whole fits maxBufferSize and
// maxStorageBufferBindingSize (one binding a dispatch, one pipeline a kernel); else one buffer a
// region (a dispatch then binds a window of each buffer its operands are in). A region larger
// than maxBufferSize, or a kernel call whose operands in one region span more than
// maxStorageBufferBindingSize, is refused with a GpuError('limit') that names the limit.
import { GpuError } from './device.js';
import { KERNELS, operand } from './kernels.js';
import { TYPE_BYTES } from './program.js';

const ALIGN = 256;
const up = (n) => Math.ceil(n / ALIGN) * ALIGN;

/**
 * Where the regions go: { buffers: [bytes], at: { region: { buffer, offset } }, workspace: { buffer,
 * offset } }. regions: name -> bytes; workspaceBytes: the program's scratch. Throws GpuError('limit').
 */
export function layoutRegions(regions, workspaceBytes, limits) {
  const names = Object.keys(regions).filter((r) => regions[r] > 0);
  const maxBuf = limits.maxBufferSize,
    maxBind = limits.maxStorageBufferBindingSize;
  for (const r of names)
    if (up(regions[r]) > maxBuf)
      throw new GpuError(
        'limit',
        `the ${r} region needs ${regions[r]} bytes, over this device's maxBufferSize (${maxBuf})`,
      );
  const total = names.reduce((s, r) => s + up(regions[r]), 0) + up(workspaceBytes);
  const at = {};
  if (total <= Math.min(maxBuf, maxBind)) {
    let off = 0;
    for (const r of names) {
      at[r] = { buffer: 0, offset: off };
      off += up(regions[r]);
    }
    return {
      buffers: [Math.max(off + up(workspaceBytes), ALIGN)],
      at,
      workspace: { buffer: 0, offset: off },
      single: true,
    };
  }
  const buffers = [];
  for (const r of names) {
    at[r] = { buffer: buffers.length, offset: 0 };
    buffers.push(up(regions[r]));
  }
  if (up(workspaceBytes) > maxBuf)
    throw new GpuError('limit', `the kernels' workspace needs ${workspaceBytes} bytes, over maxBufferSize (${maxBuf})`);
  const workspace = { buffer: buffers.length, offset: 0 };
  buffers.push(Math.max(up(workspaceBytes), ALIGN));
  return { buffers, at, workspace, single: false };
}

/** The named operands, ints and floats of one call entry (null: an absent operand). sig: the
 * kernel's contract as the engine's manifest states it ({ ops: [[name, type, access, length]],
 * ints: [names], floats: [names] }: vt_kernel_contract_json). */
function callArgs(e, sig, place) {
  const ops = {},
    ints = {},
    floats = {};
  sig.ops.forEach(([name], i) => {
    const o = e.ops[i];
    if (!o) {
      ops[name] = null;
      return;
    }
    const [region, offset, bytes, , dtype] = o,
      tb = TYPE_BYTES[dtype];
    if (!tb) throw new Error(`${e.call}: operand ${name} of type ${dtype}`);
    const { buf, offset: base } = place(region);
    ops[name] = operand(buf, (base + offset) / tb, bytes / tb, dtype);
  });
  sig.ints.forEach((name, i) => {
    ints[name] = e.ints[i];
  });
  sig.floats.forEach((name, i) => {
    floats[name] = e.floats[i];
  });
  return { ops, ints, floats };
}

/** The workspace a recorded step's program needs (bytes): its calls appended to a dry program
 * (nothing is compiled or allocated). */
export function stepWorkspace(kernels, trace, contract) {
  const dry = kernels.program('dry'),
    fake = { size: Infinity };
  for (const e of trace.entries) {
    if (!e.call) continue;
    const a = callArgs(e, contract[e.call], () => ({ buf: fake, offset: 0 }));
    KERNELS[e.call](dry, a.ops, a.ints, a.floats);
  }
  return dry.workspaceBytes;
}

/** One recorded step on the GPU. */
export class GpuStep {
  /**
   * kernels: a Kernels library (kernels.js); pool: its BufferPool; trace: the parsed
   * vitrine-trace/1 JSON; contract: the engine's kernel contract (vt.manifest.kernels).
   */
  static async create(kernels, pool, trace, contract, label = 'step') {
    if (trace.format !== 'vitrine-trace/1') throw new Error(`a trace of format ${trace.format}`);
    const s = new GpuStep();
    s.kernels = kernels;
    s.pool = pool;
    s.trace = trace;
    s.calls = trace.entries.filter((e) => e.call);
    for (const e of s.calls) {
      // a kind the caller can act on: backend 'auto' (or the app) runs the model on wasm instead
      if (!KERNELS[e.call])
        throw new GpuError(
          'unsupported',
          `the kernel ${e.call} has no WebGPU implementation: run this model with backend 'wasm'`,
        );
      if (!contract[e.call]) throw new Error(`the kernel ${e.call} is not in the contract`);
    }
    // a dry program sizes the workspace; then the real one over the laid-out buffers
    s.layout = layoutRegions(trace.regions, stepWorkspace(kernels, trace, contract), kernels.gpu.limits);
    s.buffers = [];
    try {
      for (const [i, bytes] of s.layout.buffers.entries())
        s.buffers.push(await pool.storage(bytes, `${label} buffer ${i}`));
      s.prog = kernels.program(label);
      const place = (r) => {
        const w = s.layout.at[r];
        if (!w) throw new Error(`an operand in the region ${r}, which the trace gives no bytes`);
        return { buf: s.buffers[w.buffer], offset: w.offset };
      };
      for (const e of s.calls) {
        const a = callArgs(e, contract[e.call], place);
        KERNELS[e.call](s.prog, a.ops, a.ints, a.floats);
      }
      const ws = s.layout.workspace;
      await s.prog.build({ workspace: { buf: s.buffers[ws.buffer], byteOffset: ws.offset } });
    } catch (err) {
      s.destroy();
      throw err;
    }
    return s;
  }

  /** GPU bytes this step holds (regions, workspace). */
  get bytes() {
    return this.layout.buffers.reduce((a, b) => a + b, 0);
  }

  /** Writes bytes (a typed array) at byteOffset of a region. */
  write(region, byteOffset, data) {
    const w = this.layout.at[region];
    if (!w) throw new Error(`no region ${region} in this step`);
    if (byteOffset + data.byteLength > this.trace.regions[region])
      throw new Error(
        `${data.byteLength} bytes at ${byteOffset} overrun the ${region} region (${this.trace.regions[region]} bytes)`,
      );
    this.pool.upload(this.buffers[w.buffer], w.offset + byteOffset, data);
  }

  /** Reads bytes of a region back (after all work submitted so far). */
  async read(region, byteOffset = 0, bytes = this.trace.regions[region] - byteOffset) {
    const w = this.layout.at[region];
    if (!w) throw new Error(`no region ${region} in this step`);
    return this.pool.read(this.buffers[w.buffer], w.offset + byteOffset, bytes);
  }

  /** Runs the recorded calls once (queued; read() waits for them). */
  run() {
    this.prog.run();
  }

  destroy() {
    this.prog?.destroy();
    for (const b of this.buffers || []) this.pool.release(b);
    this.buffers = [];
  }
}
