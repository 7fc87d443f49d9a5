// wasi_run.mjs: run a WASI (preview1) command module (a bench/*.c built for wasm) under Node,
// with the arguments given, and exit with its exit code. Used by bench/run.mjs.
//   node bench/wasi_run.mjs file.wasm [args...]
import { readFileSync } from 'node:fs';

const emitWarning = process.emitWarning; // node:wasi warns once that it is experimental
process.emitWarning = (w, ...rest) => (String(w).includes('WASI') ? undefined : emitWarning.call(process, w, ...rest));
const { WASI } = await import('node:wasi');
// Node 20's V8 has relaxed SIMD behind a flag (the *-relaxed builds); it must be set before the compile.
(await import('node:v8')).setFlagsFromString('--experimental-wasm-relaxed-simd');
const [file, ...args] = process.argv.slice(2);
const wasi = new WASI({ version: 'preview1', args: [file, ...args], env: {}, returnOnExit: true });
const module = await WebAssembly.compile(readFileSync(file));
const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
process.exitCode = wasi.start(instance) ?? 0;
