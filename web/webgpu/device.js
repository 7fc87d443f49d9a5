// device.js: the WebGPU device vitrine's kernels run on -- the adapter and the limits asked for in
// full, errors turned into GpuError (error scopes, a lost device, a shader that does not compile).
// Not here: kernels (kernels.js), buffers (buffers.js).
//
// In the browser the adapter is navigator.gpu's. In Node it is the npm package `webgpu` (Dawn's
// bindings, a devDependency: absent from a plain install, then there is no adapter); with
// `swiftshader: true` (or VITRINE_WEBGPU=swiftshader) Dawn's Vulkan loader is pointed at Chromium's
// SwiftShader ICD, a CPU rasteriser that needs no GPU (tests, CI).

export const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';
const DAWN_PACKAGE = 'webgpu';

/** A WebGPU failure with a kind the caller can act on:
 * 'unavailable' (no WebGPU, no adapter), 'lost' (device lost), 'out-of-memory', 'validation',
 * 'internal', 'compile' (a shader that does not compile), 'limit' (a buffer over a device limit),
 * 'unsupported' (a kernel of the step this backend does not have: the wasm backend runs it). */
export class GpuError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = 'GpuError';
    this.kind = kind;
  }
}

// The limits the kernels depend on: the device gets the adapter's values for these (WebGPU's
// defaults are far lower: 128 MiB bindings, 256 MiB buffers, 16 KiB of workgroup memory).
const LIMITS = [
  'maxBufferSize',
  'maxStorageBufferBindingSize',
  'maxComputeWorkgroupStorageSize',
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupSizeX',
  'maxComputeWorkgroupSizeY',
  'maxComputeWorkgroupsPerDimension',
  'maxStorageBuffersPerShaderStage',
  'minStorageBufferOffsetAlignment',
  'minUniformBufferOffsetAlignment',
  'maxUniformBufferBindingSize',
  'maxBindGroups',
];

const isNode = () => typeof process !== 'undefined' && !!process.versions && !!process.versions.node;

// Node: Dawn's bindings, or null with the reason.
async function nodeGpu(swiftshader) {
  let mod;
  try {
    // a specifier bundlers do not follow: the browser never loads it (navigator.gpu is there)
    mod = await import(/* @vite-ignore */ /* webpackIgnore: true */ DAWN_PACKAGE);
  } catch (e) {
    return { gpu: null, why: `the npm package "webgpu" (Dawn for Node) is not installed (${e.code || e.message})` };
  }
  if (swiftshader) {
    const { existsSync } = await import('node:fs');
    if (!existsSync(SWIFTSHADER_ICD))
      return { gpu: null, why: `SwiftShader asked for, but ${SWIFTSHADER_ICD} is missing (Debian package chromium)` };
    // read by the Vulkan loader when Dawn creates its instance (each create() call); a worker
    // thread's process.env is its own copy, which the loader never sees: there the thread that
    // starts the worker sets it first (useSwiftShaderIcd)
    const { isMainThread } = await import('node:worker_threads');
    if (isMainThread) process.env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
    else if (process.env.VK_ICD_FILENAMES !== SWIFTSHADER_ICD)
      return {
        gpu: null,
        why: `SwiftShader asked for in a worker thread: VK_ICD_FILENAMES=${SWIFTSHADER_ICD} must be set before the worker starts (useSwiftShaderIcd)`,
      };
  }
  if (!globalThis.GPUBufferUsage) Object.assign(globalThis, mod.globals);
  return { gpu: mod.create([]), why: '' };
}

/** Node, in the thread that is about to start a worker thread asking for a GPU (web/train/trainer.js):
 * with swiftshader (or VITRINE_WEBGPU=swiftshader) the Vulkan loader pointed at SwiftShader in the
 * process environment, which the worker's Dawn reads (its own process.env copy would not reach it). */
export function useSwiftShaderIcd({ swiftshader } = {}) {
  if (isNode() && (swiftshader ?? process.env.VITRINE_WEBGPU === 'swiftshader'))
    process.env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
}

/** The description of an adapter: vendor, architecture, device, description, fallback (software). */
export function adapterInfo(adapter) {
  const i = adapter.info || {};
  const software =
    !!(i.isFallbackAdapter || adapter.isFallbackAdapter) ||
    /swiftshader|llvmpipe|lavapipe|warp/i.test(`${i.architecture} ${i.description} ${i.device}`);
  return {
    vendor: i.vendor || '',
    architecture: i.architecture || '',
    device: i.device || '',
    description: i.description || '',
    software,
  };
}

/** An adapter's name as the reports print it: "google swiftshader ... (software)". */
export function adapterName(info) {
  const named =
    [info.vendor, info.architecture, info.device, info.description].filter(Boolean).join(' ') || 'unnamed adapter';
  return info.software ? `${named} (software)` : named;
}

/**
 * requestGpu({ swiftshader, powerPreference, limits }) -> Gpu. limits: max* limits lowered below
 * the adapter's. Throws GpuError('unavailable', why) when there is no WebGPU or no adapter.
 */
export async function requestGpu(opts = {}) {
  const swiftshader = opts.swiftshader ?? (isNode() && process.env.VITRINE_WEBGPU === 'swiftshader');
  let gpu = globalThis.navigator && globalThis.navigator.gpu,
    why = '';
  if (!gpu && isNode()) ({ gpu, why } = await nodeGpu(swiftshader));
  if (!gpu) throw new GpuError('unavailable', why || 'WebGPU is not available here (no navigator.gpu)');
  const adapter = await gpu.requestAdapter({ powerPreference: opts.powerPreference || 'high-performance' });
  if (!adapter)
    throw new GpuError(
      'unavailable',
      'no WebGPU adapter' +
        (isNode() && !swiftshader
          ? " (Node: no Vulkan driver Dawn accepts; VITRINE_WEBGPU=swiftshader uses Chromium's SwiftShader)"
          : ''),
    );
  const requiredLimits = {};
  for (const k of LIMITS) if (adapter.limits[k] !== undefined) requiredLimits[k] = adapter.limits[k];
  // opts.limits lowers max* limits on purpose (a small GPU's limits on a large one; WebGPU's
  // defaults are the floor: 256 MiB buffers, 128 MiB bindings)
  for (const [k, v] of Object.entries(opts.limits || {})) {
    if (!(k in requiredLimits) || !k.startsWith('max'))
      throw new GpuError('unavailable', `limits: ${k} is not a max* limit vitrine asks for (${LIMITS.join(', ')})`);
    requiredLimits[k] = Math.min(requiredLimits[k], v);
  }
  let device;
  try {
    device = await adapter.requestDevice({ requiredLimits, label: 'vitrine' });
  } catch (e) {
    throw new GpuError('unavailable', `the adapter refused a device: ${e.message}`);
  }
  return new Gpu(gpu, adapter, device);
}

/** One device and what it allows; every failure of it becomes a GpuError. */
export class Gpu {
  constructor(gpu, adapter, device) {
    this.gpu = gpu; // keeps Dawn's instance alive in Node
    this.adapter = adapter;
    this.device = device;
    this.info = adapterInfo(adapter);
    const L = device.limits;
    this.limits = {};
    for (const k of LIMITS) this.limits[k] = L[k];
    this.lost = null; // GpuError once the device is lost
    this.uncaptured = []; // errors outside any scope (a bug of ours: reported by check())
    device.lost.then((info) => {
      this.lost = new GpuError('lost', `the WebGPU device was lost (${info.reason}): ${info.message || 'no message'}`);
    });
    device.addEventListener?.('uncapturederror', (ev) => this.uncaptured.push(ev.error));
  }

  /** Throws the device-lost error, if any, and any uncaptured error. */
  check() {
    if (this.lost) throw this.lost;
    if (this.uncaptured.length) {
      const e = this.uncaptured.splice(0);
      throw new GpuError('internal', `WebGPU error: ${e.map((x) => x.message).join('; ')}`);
    }
  }

  /** Runs fn (sync or async) inside out-of-memory, validation and internal error scopes; the
   * first error found is thrown as a GpuError with `what` in its message. */
  async scoped(what, fn) {
    this.check();
    const d = this.device;
    d.pushErrorScope('internal');
    d.pushErrorScope('validation');
    d.pushErrorScope('out-of-memory');
    let result,
      thrown = null;
    try {
      result = await fn();
    } catch (e) {
      thrown = e;
    }
    const oom = await d.popErrorScope(),
      val = await d.popErrorScope(),
      int = await d.popErrorScope();
    if (thrown) throw thrown instanceof GpuError ? thrown : new GpuError('internal', `${what}: ${thrown.message}`);
    if (this.lost) throw this.lost;
    if (oom) throw new GpuError('out-of-memory', `${what}: out of GPU memory (${oom.message})`);
    if (val) throw new GpuError('validation', `${what}: ${val.message}`);
    if (int) throw new GpuError('internal', `${what}: ${int.message}`);
    return result;
  }

  /** A shader module, compiled: a compile error becomes GpuError('compile') with the messages. */
  async shader(label, code) {
    this.device.pushErrorScope('validation');
    const module = this.device.createShaderModule({ label, code });
    const info = await module.getCompilationInfo();
    await this.device.popErrorScope(); // the same errors as the compilation messages
    const errors = info.messages.filter((m) => m.type === 'error');
    if (errors.length)
      throw new GpuError(
        'compile',
        `WGSL of ${label} does not compile: ` + errors.map((m) => `${m.lineNum}:${m.linePos} ${m.message}`).join('; '),
      );
    return module;
  }

  /** Releases the device (its buffers with it). Dawn's instance (this.gpu) stays referenced: in
   * Node, letting it go with the device crashed the process at exit (abort / segfault, seen 5 in 6). */
  destroy() {
    this.device.destroy();
  }
}
