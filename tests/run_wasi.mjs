// run_wasi.mjs: run a WASI (preview1) command module under Node and exit with its exit code.
//   node tests/run_wasi.mjs file.wasm [args...]
// The current directory is pre-opened as "." for modules that read files.
import { readFileSync } from 'node:fs';

// node:wasi prints an ExperimentalWarning on first use; drop only that one.
const emitWarning = process.emitWarning;
process.emitWarning = (warning, ...rest) => {
  const type = typeof rest[0] === 'string' ? rest[0] : rest[0] && rest[0].type;
  if (type === 'ExperimentalWarning' && String(warning).includes('WASI')) return;
  return emitWarning.call(process, warning, ...rest);
};
const { WASI } = await import('node:wasi');
// Node 20's V8 has relaxed SIMD behind a flag (the *-relaxed builds); it must be set before the compile.
(await import('node:v8')).setFlagsFromString('--experimental-wasm-relaxed-simd');

const [file, ...args] = process.argv.slice(2);
if (!file) {
  console.error('usage: node tests/run_wasi.mjs file.wasm [args...]');
  process.exit(2);
}
const wasi = new WASI({
  version: 'preview1',
  args: [file, ...args],
  env: process.env,
  preopens: { '.': process.cwd() },
  returnOnExit: true,
});
const module = await WebAssembly.compile(readFileSync(file));
const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
const code = wasi.start(instance);
process.exitCode = code ?? 0;
