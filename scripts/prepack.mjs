// prepack.mjs: run by `npm pack` / `npm publish` (package.json "prepack") before the tarball is
// made. Builds the wasm with CMake into build/wasm/ (configuring build/ first if it is not yet)
// and checks that build/wasm/ holds exactly the files of wasm/builds.json (the one list of
// builds) and the table CMake writes from it (vitrine-builds.js): package.json "files" ships
// build/wasm/vitrine-*, so a missing file would make a package that cannot load that build, and a
// stray one (a build the list does not have, or an old one) would ship unused. The package then
// needs no build step where it is installed. Usage: npm pack   (or: node scripts/prepack.mjs)
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const BUILD = join(ROOT, 'build'); // the package's layout: web/runtime/loader.js finds ../build/wasm/
/** The builds of wasm/builds.json: name -> { runtime, simd, relaxed, threads, mt, browser, files }. */
export const BUILDS = JSON.parse(readFileSync(join(ROOT, 'wasm/builds.json'), 'utf8')).builds;
/** The file CMake writes from builds.json for the loader (it ships beside the builds). */
export const TABLE = 'vitrine-builds.js';

/** What would ship wrong from `dir`: { missing, stray } file names against `builds`. */
export function wasmDirProblems(dir, builds = BUILDS) {
  const want = new Set([TABLE, ...Object.values(builds).flatMap((b) => b.files)]);
  const have = new Set(existsSync(dir) ? readdirSync(dir).filter((f) => f.startsWith('vitrine-')) : []);
  return { missing: [...want].filter((f) => !have.has(f)), stray: [...have].filter((f) => !want.has(f)) };
}

function main() {
  const quiet = !!process.env.npm_config_json; // `npm pack --json` wants only JSON on stdout
  const cmake = (args) => {
    const r = spawnSync('cmake', args, { cwd: ROOT, stdio: ['ignore', quiet ? 'ignore' : 'inherit', 'inherit'] });
    if (r.status !== 0) {
      console.error(
        `prepack: cmake ${args.join(' ')} failed (${r.error ? r.error.message : 'exit ' + r.status}); see wasm/README.md`,
      );
      process.exit(1);
    }
  };
  if (!existsSync(join(BUILD, 'CMakeCache.txt'))) cmake(['-S', '.', '-B', BUILD, '-DCMAKE_BUILD_TYPE=Release']);
  cmake(['--build', BUILD, '-j2', '--target', 'vitrine_wasm']);

  const { missing, stray } = wasmDirProblems(join(BUILD, 'wasm'));
  if (missing.length)
    console.error(
      `prepack: the build made no ${missing.join(', ')} (emcc / clang-14 + wasi-libc / clang-19 installed? see wasm/README.md)`,
    );
  if (stray.length)
    console.error(
      `prepack: build/wasm/ holds ${stray.join(', ')}, which wasm/builds.json does not list: add the build there, or delete the file(s)`,
    );
  if (missing.length || stray.length) process.exit(1);
  if (!quiet) console.error(`prepack: build/wasm/ holds the ${Object.keys(BUILDS).length} builds of wasm/builds.json`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) main();
