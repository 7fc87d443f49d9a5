// build-demo.mjs: the browser demo as a folder of static files that any static host serves as it
// is (GitHub Pages, a bucket, `python3 -m http.server`): no server code, no special headers.
//   npm run build:demo [-- --out DIR]        (default build/demo-static/)
// The folder keeps the repository's layout, so the page's relative URLs are those of
// demo/serve.mjs: demo/ (the page, its modules, its workers), web/ (the shell's browser modules),
// build/wasm/ (the browser builds of wasm/builds.json and their table), build/demo-data/ (the
// Fashion-MNIST sample, prepared here from Debian's dataset-fashion-mnist), index.html (to demo/)
// and coi-sw.js at the top. Threads need cross-origin isolation, which a host gives with two
// response headers (COOP / COEP); a static host cannot, so coi-sw.js (a service worker the page
// registers when it is not isolated) adds them to every response of the folder, and the page
// reloads once under it. demo/serve.mjs sends the headers itself and serves no coi-sw.js.
import { cp, mkdir, rm, readdir, writeFile, copyFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ROOT, BUILD, WASM_FILES, prepare } from '../demo/serve.mjs';

// demo/ files that run in Node, not in the page
const NODE_ONLY = new Set(['serve.mjs', 'prepare-data.mjs', 'coi-sw.js']);

/** Writes the static demo to `out` (emptied first); builds the wasm and the sample if missing. */
export async function buildDemo({ out = join(BUILD, 'demo-static'), quiet = false } = {}) {
  out = resolve(out);
  await prepare({ quiet });
  await rm(out, { recursive: true, force: true });
  await mkdir(join(out, 'build', 'wasm'), { recursive: true });
  const copyDir = async (from, to, keep) => {
    await mkdir(to, { recursive: true });
    for (const e of await readdir(from, { withFileTypes: true }))
      if (e.isFile() && keep(e.name)) await copyFile(join(from, e.name), join(to, e.name));
  };
  await copyDir(join(ROOT, 'demo'), join(out, 'demo'), (f) => !NODE_ONLY.has(f));
  // web/ and its rooms (webgpu/: the demo's backend auto; widget/: the teaching view); web/cli/ is Node's
  for (const room of ['', 'runtime', 'formats', 'train', 'train/objectives', 'webgpu', 'widget'])
    await copyDir(join(ROOT, 'web', room), join(out, 'web', room), (f) => f.endsWith('.js'));
  for (const f of WASM_FILES) await copyFile(join(BUILD, 'wasm', f), join(out, 'build', 'wasm', f));
  await cp(join(BUILD, 'demo-data'), join(out, 'build', 'demo-data'), { recursive: true });
  await copyFile(join(ROOT, 'demo', 'coi-sw.js'), join(out, 'coi-sw.js'));
  await writeFile(
    join(out, 'index.html'),
    '<!doctype html><meta charset="utf-8"><title>vitrine</title>' +
      '<link rel="icon" href="data:,"><meta http-equiv="refresh" content="0; url=demo/"><a href="demo/">the vitrine demo</a>\n',
  );
  if (!quiet) console.log(`demo: static files in ${out} (serve that folder with any static server; open demo/)`);
  return out;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2),
    i = args.indexOf('--out');
  if (args.includes('--help') || args.includes('-h')) {
    console.log('usage: node scripts/build-demo.mjs [--out DIR]   (npm run build:demo; default build/demo-static/)');
  } else {
    buildDemo({ out: i >= 0 ? args[i + 1] : undefined }).catch((e) => {
      console.error(`build:demo: ${e.message}`);
      process.exit(1);
    });
  }
}
