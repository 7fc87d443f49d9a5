// serve.mjs: one command for the browser demo. Makes what the page needs (the wasm build, via
// CMake, when it is missing; the Fashion-MNIST sample from Debian's dataset-fashion-mnist) and
// serves the repository's demo/, web/, build/wasm/ and build/demo-data/ on 127.0.0.1.
//   node demo/serve.mjs [--port 8080] [--host 127.0.0.1] [--allow-host NAME]... [--no-build] [--no-isolation]   (npm run demo)
// Requests whose Host header is not a loopback name (or --host / --allow-host) get 403 (DNS
// rebinding); symlinks are followed only within the served folders.
// --port 0 picks a free port. Nothing is fetched from outside: the page loads only these files.
// Every response carries Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy:
// require-corp: the page is then cross-origin isolated, which is what gives it SharedArrayBuffer,
// so the engine's thread pool (web/runtime/pool.js) can run. Without them the page runs on 1 thread.
import { createServer } from 'node:http';
import { createReadStream, readFileSync } from 'node:fs';
import { stat, realpath } from 'node:fs/promises';
import { spawnSync } from 'node:child_process';
import { join, resolve, dirname, extname, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { prepareData } from './prepare-data.mjs';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const BUILD = resolve(process.env.VITRINE_BUILD || join(ROOT, 'build'));
// the browser builds' files (wasm/builds.json) and the table the loader reads
const { builds } = JSON.parse(readFileSync(join(ROOT, 'wasm/builds.json'), 'utf8'));
export const WASM_FILES = [
  'vitrine-builds.js',
  ...Object.values(builds)
    .filter((b) => b.browser)
    .flatMap((b) => b.files),
];
// cross-origin isolation (threads); same-origin files need nothing more under require-corp
export const ISOLATION_HEADERS = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};

export const MIME = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.bin': 'application/octet-stream',
  '.png': 'image/png',
  '.svg': 'image/svg+xml',
  '.ico': 'image/x-icon',
  '.ts': 'text/plain; charset=utf-8',
  '.md': 'text/markdown; charset=utf-8',
  '.safetensors': 'application/octet-stream',
};
// URL prefix -> directory on disk. Nothing else of the repository is served.
const MOUNTS = [
  ['/demo/', join(ROOT, 'demo')],
  ['/web/', join(ROOT, 'web')],
  ['/build/wasm/', join(BUILD, 'wasm')],
  ['/build/demo-data/', join(BUILD, 'demo-data')],
];

async function exists(p) {
  try {
    await stat(p);
    return true;
  } catch {
    return false;
  }
}

/** Builds the wasm with CMake when one of the page's files is missing. */
export async function ensureWasm({ quiet = false } = {}) {
  const missing = [];
  for (const f of WASM_FILES) if (!(await exists(join(BUILD, 'wasm', f)))) missing.push(f);
  if (!missing.length) return;
  if (!quiet) console.log(`demo: ${missing.join(', ')} missing in ${BUILD}/wasm: building with CMake`);
  const run = (args) => {
    const r = spawnSync('cmake', args, { cwd: ROOT, stdio: quiet ? 'ignore' : 'inherit' });
    if (r.status !== 0)
      throw new Error(
        `cmake ${args.join(' ')} failed (${r.error ? r.error.message : 'exit ' + r.status}); see wasm/README.md`,
      );
  };
  run(['-S', '.', '-B', BUILD, '-DCMAKE_BUILD_TYPE=Release']);
  run(['--build', BUILD, '-j2', '--target', 'vitrine_wasm']);
  for (const f of WASM_FILES)
    if (!(await exists(join(BUILD, 'wasm', f))))
      throw new Error(`the build made no ${f} (is emscripten installed? see wasm/README.md)`);
}

/** Everything the page needs: the wasm build and the data sample. */
export async function prepare({ quiet = false, build = true } = {}) {
  if (build) await ensureWasm({ quiet });
  await prepareData({ out: join(BUILD, 'demo-data'), quiet });
}

// The file for a URL path, or null: inside its mount both by name and after following symlinks
// (a link inside a served folder must not lead out of it).
async function resolvePath(urlPath, mounts) {
  for (const [prefix, dir] of mounts) {
    if (!urlPath.startsWith(prefix)) continue;
    const file = resolve(dir, '.' + urlPath.slice(prefix.length - 1));
    if (file !== dir && !file.startsWith(dir + sep)) return null; // no way out of the mount by name
    let real, realDir;
    try {
      [real, realDir] = await Promise.all([realpath(file), realpath(dir)]);
    } catch {
      return null;
    }
    if (real !== realDir && !real.startsWith(realDir + sep)) return null; // ... nor through a symlink
    return real;
  }
  return null;
}

// DNS rebinding: a page of another site whose name is made to resolve to 127.0.0.1 would reach us
// with its own name in Host. Only the loopback names (and the host we were told to listen on, or
// names given in allowedHosts) are served.
function hostAllowed(header, port, allowed) {
  if (!header) return false;
  const m = /^(\[[0-9a-f:.]+\]|[^:\[\]]+)(?::(\d+))?$/i.exec(header);
  if (!m) return false;
  if (m[2] !== undefined && Number(m[2]) !== port) return false;
  return allowed.has(m[1].toLowerCase());
}

/** How long a client may take (ms): to send a request's headers, the whole request, and between
 * requests on a kept-alive connection; a half-sent request is closed after at most `headers` +
 * `check` (Node's defaults would keep it open for a minute and more). */
export const TIMEOUTS = { headers: 10000, request: 30000, keepAlive: 5000, check: 1000 };

/** Starts the static server; resolves to { server, url } once it listens. isolate: false leaves
 * out the COOP / COEP headers (to see the page's 1-thread fallback); timeouts: TIMEOUTS' fields.
 * mounts: more [URL prefix, directory] pairs, served before the demo's (tests serving a page of their own). */
export function startServer({
  port = 8080,
  host = '127.0.0.1',
  log = false,
  allowedHosts = [],
  isolate = true,
  timeouts = {},
  mounts = [],
} = {}) {
  const served = [...mounts, ...MOUNTS];
  const allowed = new Set(['localhost', '127.0.0.1', '[::1]', ...allowedHosts.map((h) => h.toLowerCase())]);
  if (host !== '0.0.0.0' && host !== '::') allowed.add(host.includes(':') ? `[${host}]` : host.toLowerCase());
  const iso = isolate ? ISOLATION_HEADERS : {},
    t = { ...TIMEOUTS, ...timeouts };
  const server = createServer(
    {
      headersTimeout: t.headers,
      requestTimeout: t.request,
      keepAliveTimeout: t.keepAlive,
      connectionsCheckingInterval: t.check,
    },
    async (req, res) => {
      // every response is text the browser must not sniff as something else (a 404 names the path asked for)
      const send = (code, text, headers = {}) => {
        res.writeHead(code, {
          'Content-Type': 'text/plain; charset=utf-8',
          'X-Content-Type-Options': 'nosniff',
          ...iso,
          ...headers,
        });
        res.end(text);
      };
      if (!hostAllowed(req.headers.host, server.address().port, allowed))
        return send(
          403,
          `host '${req.headers.host || ''}' is not served (DNS rebinding?): use http://127.0.0.1:${server.address().port}/ or --allow-host NAME\n`,
        );
      if (req.method !== 'GET' && req.method !== 'HEAD')
        return send(405, 'method not allowed\n', { Allow: 'GET, HEAD' });
      let path;
      try {
        path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
      } catch {
        return send(400, 'bad URL\n');
      }
      if (path === '/' || path === '/demo') return send(302, 'see /demo/\n', { Location: '/demo/' });
      if (path.endsWith('/')) path += 'index.html';
      const file = await resolvePath(path, served);
      if (!file) return send(404, `not found: ${JSON.stringify(path)}\n`);
      let st;
      try {
        st = await stat(file);
      } catch {
        st = null;
      }
      if (!st || !st.isFile()) return send(404, `not found: ${JSON.stringify(path)}\n`);
      res.writeHead(200, {
        'Content-Type': MIME[extname(file).toLowerCase()] || 'application/octet-stream',
        'Content-Length': st.size,
        'Cache-Control': 'no-cache',
        'X-Content-Type-Options': 'nosniff',
        ...iso,
      });
      if (log) console.log(`${req.method} ${path}`);
      if (req.method === 'HEAD') return res.end();
      createReadStream(file)
        .on('error', () => res.destroy())
        .pipe(res);
    },
  );
  // Node's headersTimeout starts when a request's first byte is parsed: bytes between requests
  // (blank lines, which HTTP lets a client send) never start it, yet each one resets the keep-alive
  // timeout, so a socket that drips them after a request stayed open for ever. Here a connection
  // that has no request in flight must complete the next one's headers within `headers` ms.
  const conns = new WeakMap(); // socket -> { inFlight, timer }
  const waitForRequest = (socket, c) => {
    clearTimeout(c.timer);
    c.timer = setTimeout(() => {
      if (c.inFlight) return;
      socket.end('HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      setTimeout(() => socket.destroy(), t.check).unref();
    }, t.headers);
    c.timer.unref();
  };
  server.on('connection', (socket) => {
    const c = { inFlight: 0, timer: null };
    conns.set(socket, c);
    socket.on('close', () => clearTimeout(c.timer));
    waitForRequest(socket, c);
  });
  server.on('request', (req, res) => {
    const socket = req.socket,
      c = conns.get(socket);
    if (!c) return;
    c.inFlight++;
    clearTimeout(c.timer);
    res.once('close', () => {
      if (--c.inFlight === 0 && !socket.destroyed) waitForRequest(socket, c);
    });
  });
  return new Promise((resolveP, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const a = server.address();
      resolveP({ server, url: `http://${host}:${a.port}/demo/` });
    });
  });
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const opt = (name, def) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : def;
  };
  try {
    await prepare({ build: !args.includes('--no-build') });
    const allowedHosts = args.flatMap((a, i) => (a === '--allow-host' && args[i + 1] ? [args[i + 1]] : []));
    const { url } = await startServer({
      port: Number(opt('--port', process.env.PORT || 8080)),
      host: opt('--host', '127.0.0.1'),
      log: args.includes('--log'),
      allowedHosts,
      isolate: !args.includes('--no-isolation'),
    });
    console.log(`vitrine demo: ${url}   (Ctrl-C stops)`);
  } catch (e) {
    console.error(`demo: ${e.message}`);
    process.exit(1);
  }
}
