// coi-sw.js: cross-origin isolation for the static demo (scripts/build-demo.mjs puts this file at
// the top of the folder, so its scope is the whole folder: the page, its workers, web/, the wasm).
// Threads need SharedArrayBuffer, which a page only gets when it is cross-origin isolated: its
// responses carry Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy:
// require-corp. A static host cannot add headers; this service worker adds them to every
// same-origin response it passes on. The page (main.js) registers it when it is not isolated and
// reloads once, under it. Nothing is cached or changed besides the headers.
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (e) => e.waitUntil(self.clients.claim()));

self.addEventListener('fetch', (e) => {
  const r = e.request;
  if (new URL(r.url).origin !== self.location.origin) return; // the folder's own files only
  if (r.cache === 'only-if-cached' && r.mode !== 'same-origin') return;
  e.respondWith(
    fetch(r).then((res) => {
      if (res.status === 0) return res; // opaque: nothing to add to
      const headers = new Headers(res.headers);
      headers.set('Cross-Origin-Opener-Policy', 'same-origin');
      headers.set('Cross-Origin-Embedder-Policy', 'require-corp');
      headers.set('Cross-Origin-Resource-Policy', 'same-origin');
      return new Response(res.body, { status: res.status, statusText: res.statusText, headers });
    }),
  );
});
