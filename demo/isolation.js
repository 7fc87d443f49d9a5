// isolation.js: threads for the static demo. demo/serve.mjs sends the COOP / COEP headers that make
// the page cross-origin isolated (SharedArrayBuffer, so the engine's worker pool runs); a static
// host (npm run build:demo) cannot, and the folder it serves has coi-sw.js at its top, a service
// worker that adds them. Here the page registers it when it is not isolated and reloads once under
// it. Where there is no coi-sw.js (serve.mjs --no-isolation) nothing happens: the engine runs on
// one thread and its badge says why.
const SW_URL = new URL('../coi-sw.js', import.meta.url);
const RELOADED = 'vitrine-coi-reloaded';

/** Resolves to how the page is isolated: 'headers' | 'service worker' | null (not isolated); or
 * never, when the page reloads itself under the service worker. */
export async function ensureIsolation() {
  if (globalThis.crossOriginIsolated) {
    sessionStorage.removeItem(RELOADED);
    return navigator.serviceWorker && navigator.serviceWorker.controller ? 'service worker' : 'headers';
  }
  if (!('serviceWorker' in navigator) || !globalThis.isSecureContext) return null;
  try {
    const probe = await fetch(SW_URL, { method: 'HEAD', cache: 'no-store' });
    if (!probe.ok) return null; // served without it (demo/serve.mjs)
    await navigator.serviceWorker.register(SW_URL);
    await navigator.serviceWorker.ready;
  } catch {
    return null;
  }
  if (sessionStorage.getItem(RELOADED)) return null; // reloaded once already and still not isolated: stop
  sessionStorage.setItem(RELOADED, '1');
  location.reload();
  return new Promise(() => {});
}
