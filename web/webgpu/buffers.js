// buffers.js: GPU memory for the backend -- storage buffers (checked against the device's limits,
// allocated inside an out-of-memory error scope, pooled by size so that re-planning reuses them),
// uploads, and read-backs through pooled staging buffers of at most STAGING_CHUNK bytes. `bytes` +
// `stagingBytes` is what the memory gauge shows.
import { GpuError } from './device.js';

const ALIGN = 256;
const round = (n) => Math.max(ALIGN, Math.ceil(n / ALIGN) * ALIGN);
/** The largest read-back buffer (bytes): a longer read goes through it in pieces. */
export const STAGING_CHUNK = 16 << 20;
const STAGING_SMALL = 64 << 10; // reads up to this size (scalars, a loss) get a buffer of their size

export class BufferPool {
  constructor(gpu) {
    this.gpu = gpu;
    this.free = new Map(); // size -> [GPUBuffer] (storage)
    this.staging = new Map(); // size -> [GPUBuffer] (MAP_READ)
    this.bytes = 0; // storage bytes held (in use or pooled)
    this.stagingBytes = 0; // read-back bytes held (pooled)
  }

  /** A storage buffer of at least `bytes` (rounded to 256); GpuError 'limit' over maxBufferSize,
   * 'out-of-memory' when the device has no room. */
  async storage(bytes, label = 'vitrine') {
    const size = round(bytes);
    const max = this.gpu.limits.maxBufferSize;
    if (size > max) throw new GpuError('limit', `${label}: ${size} bytes exceed this device's maxBufferSize (${max})`);
    const list = this.free.get(size);
    if (list && list.length) return list.pop();
    const buf = await this.gpu.scoped(`allocating ${size} bytes for ${label}`, () =>
      this.gpu.device.createBuffer({
        label,
        size,
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
      }),
    );
    this.bytes += size;
    return buf;
  }

  /** Returns a storage buffer to the pool. */
  release(buf) {
    if (!this.free.has(buf.size)) this.free.set(buf.size, []);
    this.free.get(buf.size).push(buf);
  }

  /** Writes a typed array (or part of one) at byteOffset of buf. */
  upload(buf, byteOffset, data) {
    this.gpu.check();
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    if (bytes.byteLength % 4 === 0) this.gpu.device.queue.writeBuffer(buf, byteOffset, bytes);
    else {
      // writeBuffer wants multiples of 4 bytes: pad (masks of an odd length)
      const padded = new Uint8Array(Math.ceil(bytes.byteLength / 4) * 4);
      padded.set(bytes);
      this.gpu.device.queue.writeBuffer(buf, byteOffset, padded);
    }
  }

  /** Copies byteLength bytes at byteOffset of buf into a new ArrayBuffer (after all submitted
   * work). A read larger than STAGING_CHUNK goes through one staging buffer of that size, a chunk
   * at a time: the read-back memory stays bounded (a sync reads every state region). */
  async read(buf, byteOffset = 0, byteLength = buf.size - byteOffset) {
    this.gpu.check();
    const out = new Uint8Array(byteLength);
    for (let done = 0; done < byteLength;) {
      const n = Math.min(byteLength - done, STAGING_CHUNK);
      out.set(new Uint8Array(await this._readChunk(buf, byteOffset + done, n)), done);
      done += n;
    }
    return out.buffer;
  }

  async _readChunk(buf, byteOffset, byteLength) {
    // the smallest pooled read-back buffer that holds the piece, else a new one of the piece's size
    // rounded up to a power of two (at most STAGING_CHUNK + 256): few sizes, a bounded total
    const start = Math.floor(byteOffset / 4) * 4,
      need = round(byteOffset + byteLength - start);
    let size = 0;
    for (const [sz, l] of this.staging) if (sz >= need && l.length && (!size || sz < size)) size = sz;
    if (!size) size = need <= STAGING_SMALL ? need : Math.min(STAGING_CHUNK + ALIGN, 2 ** Math.ceil(Math.log2(need)));
    let list = this.staging.get(size);
    if (!list) this.staging.set(size, (list = []));
    let st = list.pop();
    if (!st) {
      st = this.gpu.device.createBuffer({
        label: 'vitrine read-back',
        size,
        usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
      });
      this.stagingBytes += size;
    }
    const n = Math.ceil((byteOffset + byteLength - start) / 4) * 4;
    const enc = this.gpu.device.createCommandEncoder();
    enc.copyBufferToBuffer(buf, start, st, 0, n);
    this.gpu.device.queue.submit([enc.finish()]);
    try {
      await st.mapAsync(GPUMapMode.READ, 0, n);
    } catch (e) {
      this.gpu.check(); // a lost device says so
      throw new GpuError('internal', `reading ${byteLength} bytes back: ${e.message}`);
    }
    const out = st.getMappedRange(0, n).slice(byteOffset - start, byteOffset - start + byteLength);
    st.unmap();
    list.push(st);
    return out;
  }

  /** Frees every buffer of the pool (the in-use ones are the caller's to destroy). */
  destroy() {
    for (const l of [...this.free.values(), ...this.staging.values()]) for (const b of l) b.destroy();
    this.free.clear();
    this.staging.clear();
    this.bytes = 0;
    this.stagingBytes = 0;
  }
}
