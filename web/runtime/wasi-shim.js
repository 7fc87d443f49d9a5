// wasi-shim.js: a WASI-preview1 import object of our own for the clang-built reactors (the
// 'relaxed' builds), so that they run in the browser as in Node without node:wasi. The engine does
// no I/O: wasi-libc links only fd_write / fd_seek / fd_close (stdio) into it; stdout/stderr lines
// go to the console, other descriptors are EBADF, and any other preview1 function the module
// imports answers ENOSYS. getMemory() is read at each call (the memory is the instance's export,
// or an imported one).

export class WasiExit extends Error {
  constructor(code) {
    super(`wasm called proc_exit(${code})`);
    this.code = code;
  }
}

export function wasiShim(getMemory, module = null) {
  const ERR = { SUCCESS: 0, BADF: 8, INVAL: 28, NOSYS: 52, SPIPE: 70 };
  const dv = () => new DataView(getMemory().buffer);
  const bytes = (p, n) => new Uint8Array(getMemory().buffer, p >>> 0, n >>> 0).slice(); // copy: shared memory can't be decoded
  const pending = { 1: '', 2: '' };
  const stdio = (fd) => fd === 0 || fd === 1 || fd === 2;
  const now = (id) =>
    id === 0
      ? BigInt(Date.now()) * 1000000n
      : BigInt(Math.round((globalThis.performance ? performance.now() : Date.now()) * 1e6));
  const w = {
    fd_write(fd, iovs, n, nwritten) {
      if (fd !== 1 && fd !== 2) return ERR.BADF;
      const d = dv();
      let total = 0,
        text = '';
      for (let i = 0; i < n; i++) {
        const p = d.getUint32(iovs + 8 * i, true),
          len = d.getUint32(iovs + 8 * i + 4, true);
        text += new TextDecoder().decode(bytes(p, len));
        total += len;
      }
      const lines = (pending[fd] + text).split('\n');
      pending[fd] = lines.pop();
      for (const l of lines) (fd === 1 ? console.log : console.error)(l);
      dv().setUint32(nwritten, total, true);
      return ERR.SUCCESS;
    },
    fd_seek: (fd) => (stdio(fd) ? ERR.SPIPE : ERR.BADF),
    fd_close: (fd) => (stdio(fd) ? ERR.SUCCESS : ERR.BADF),
    fd_fdstat_get(fd, p) {
      if (!stdio(fd)) return ERR.BADF;
      const d = dv();
      d.setUint8(p, 2);
      d.setUint16(p + 2, 0, true); // character device, no flags
      d.setBigUint64(p + 8, 0xffffffffffffffffn, true);
      d.setBigUint64(p + 16, 0xffffffffffffffffn, true);
      return ERR.SUCCESS;
    },
    fd_prestat_get: () => ERR.BADF, // no pre-opened directories
    environ_sizes_get(count, size) {
      dv().setUint32(count, 0, true);
      dv().setUint32(size, 0, true);
      return ERR.SUCCESS;
    },
    environ_get: () => ERR.SUCCESS,
    args_sizes_get(count, size) {
      dv().setUint32(count, 0, true);
      dv().setUint32(size, 0, true);
      return ERR.SUCCESS;
    },
    args_get: () => ERR.SUCCESS,
    clock_time_get(id, _precision, out) {
      if (id > 3) return ERR.INVAL;
      dv().setBigUint64(out, now(id), true);
      return ERR.SUCCESS;
    },
    clock_res_get(id, out) {
      dv().setBigUint64(out, 1000n, true);
      return ERR.SUCCESS;
    },
    random_get(p, n) {
      for (let o = 0; o < n; o += 65536) {
        const chunk = new Uint8Array(Math.min(65536, n - o));
        globalThis.crypto.getRandomValues(chunk);
        new Uint8Array(getMemory().buffer, (p >>> 0) + o, chunk.length).set(chunk);
      }
      return ERR.SUCCESS;
    },
    sched_yield: () => ERR.SUCCESS,
    proc_exit(code) {
      throw new WasiExit(code);
    },
  };
  if (module)
    // whatever else the module imports from preview1: ENOSYS
    for (const imp of WebAssembly.Module.imports(module))
      if (imp.module === 'wasi_snapshot_preview1' && imp.kind === 'function' && !(imp.name in w))
        w[imp.name] = () => ERR.NOSYS;
  return { wasi_snapshot_preview1: w };
}
