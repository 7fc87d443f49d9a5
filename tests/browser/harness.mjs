// harness.mjs: what the browser tests share -- where the repository and the build are, the
// Chromium they drive (skipped, with a message, only when it is absent), an RGB PNG writer for the
// user's images, and the demo served on 127.0.0.1 (random port) opened in a fresh Chromium profile.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { deflateSync } from 'node:zlib';
import { PNG_SIGNATURE, chunk } from '../png_chunks.mjs';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const BUILD = resolve(process.env.VITRINE_BUILD || join(ROOT, 'build'));
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
export const skip = existsSync(CHROMIUM)
  ? false
  : `${CHROMIUM} not found: browser tests skipped (apt-get install chromium; CI installs it)`;

/** An RGB PNG, 8 bit: pixel(x, y) -> [r, g, b]. */
export function png(w, h, pixel) {
  const raw = Buffer.alloc(h * (1 + 3 * w));
  for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) raw.set(pixel(x, y), y * (1 + 3 * w) + 1 + 3 * x);
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8;
  ihdr[9] = 2;
  return Buffer.concat([
    PNG_SIGNATURE,
    chunk('IHDR', ihdr),
    chunk('IDAT', deflateSync(raw)),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

/** A fresh headless Chromium profile and its page (extra Chromium `args` appended), page errors and
 * console errors collected in `errors`; waitFor(fn, arg, timeout) on that page. */
export async function launchChromium({ acceptDownloads = false, args = [] } = {}) {
  const { chromium } = await import('playwright-core');
  const profile = mkdtempSync(join(tmpdir(), 'vitrine-chromium-'));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1300, height: 1000 },
    acceptDownloads,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      ...args,
    ],
  });
  const page = ctx.pages()[0] || (await ctx.newPage());
  const errors = [];
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(`console: ${m.text()}`);
  });
  const waitFor = (fn, arg, timeout = 30_000) => page.waitForFunction(fn, arg, { timeout, polling: 50 });
  return { ctx, page, profile, errors, waitFor };
}

/** The demo served (demo/serve.mjs, its data prepared) and one page of a fresh headless Chromium
 * profile (extra Chromium `args`), page errors and console errors collected in `errors`; helpers on
 * that page: waitFor(fn, arg, timeout), openPage(query) (load the demo, with ?query, wait until it
 * booted), reset() (the Reset button, wait until the run is gone), configure({ kind, model, batch,
 * steps, lr, warmup, seed, data }) (the run's form; data only when given), startPausedAt(n) (Start,
 * then Pause once step n is shown), switchPolicyAt(n, policy) (Start, then the policy changed once
 * step n is shown). close() ends all of it. */
export async function openDemoBrowser({ acceptDownloads = false, args = [] } = {}) {
  const { prepare, startServer } = await import('../../demo/serve.mjs');
  await prepare({ quiet: true });
  const { server, url } = await startServer({ port: 0 });
  const { ctx, page, profile, errors, waitFor } = await launchChromium({ acceptDownloads, args });
  const openPage = async (query = '') => {
    await page.goto(url + query);
    await waitFor(() => window.vitrineDemo && window.vitrineDemo.booted, null, 30_000);
  };
  const reset = async () => {
    await page.click('#reset');
    await waitFor(() => !window.vitrineDemo.run && window.vitrineDemo.losses.length === 0);
  };
  const configure = async ({ kind, model, batch, steps, lr, warmup, seed, data }) => {
    await page.selectOption('#kind', kind);
    await page.selectOption('#model', model);
    await page.fill('#batch', String(batch));
    await page.fill('#steps', String(steps));
    await page.fill('#lr', String(lr));
    await page.fill('#warmup', String(warmup));
    await page.fill('#seed', String(seed));
    if (data != null) await page.selectOption('#data', data);
  };
  // Start clicked inside the page, then, as soon as the step shown reaches n, Pause clicked there
  // ({ pause: true }; once it is enabled) or the policy changed ({ policy }), by a MutationObserver:
  // an action sent from the test (a round trip to Chromium) can come after dozens of a small
  // model's millisecond steps, or after the last of them.
  const startThen = (n, act) =>
    page.evaluate(
      ([n, act]) =>
        new Promise((resolve) => {
          const D = window.vitrineDemo,
            pause = document.getElementById('pause'),
            sel = document.getElementById('policy');
          const obs = new MutationObserver(() => {
            if (!D.stopped && !D.error && (D.step < n || (act.pause && pause.disabled))) return;
            obs.disconnect();
            if (D.stopped || D.error) return resolve();
            if (act.pause) pause.click();
            else {
              sel.value = act.policy;
              for (const type of ['input', 'change']) sel.dispatchEvent(new Event(type, { bubbles: true }));
            }
            resolve();
          });
          obs.observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
          document.getElementById('start').click();
        }),
      [n, act],
    );
  const startPausedAt = async (n) => {
    await startThen(n, { pause: true });
    await waitFor(() => !window.vitrineDemo.running);
  };
  const switchPolicyAt = (n, policy) => startThen(n, { policy });
  const close = async () => {
    await ctx.close();
    server.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return {
    server,
    url,
    ctx,
    page,
    profile,
    errors,
    waitFor,
    openPage,
    reset,
    configure,
    startPausedAt,
    switchPolicyAt,
    close,
  };
}
