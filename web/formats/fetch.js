// fetch.js: bytes from somewhere that may lie, stall or never end -- a URL (fetch) or a Blob's
// stream -- read chunk by chunk and counted as they arrive (after any Content-Encoding is undone),
// against a cap checked before each chunk is kept; with the caller's AbortSignal, a stall timeout
// (no bytes for N seconds) and a total one. Every failure is a VitrineError whose message starts
// with the URL (or the name given) and says what happened. Browser and Node alike.
import { VitrineError } from '../errors.js';

/** Seconds without a byte before a URL is given up (the stall timeout). */
export const URL_STALL_SECONDS = 30;
/** Seconds a URL may take in all, by what it is: weights (a ViT-B is 344 MB), an image. */
export const URL_TIMEOUT_SECONDS = { weights: 1800, image: 120 };

const why = (e) => (e && e.cause ? e.cause.message || e.cause.code : e && e.message) || String(e);
const secs = (s) => `${Number(s.toPrecision(3))} s`;

// the limits of one read, checked: { stallSeconds, timeoutSeconds } positive numbers or Infinity
function limits({ stallSeconds, timeoutSeconds }) {
  for (const [k, v] of Object.entries({ stallSeconds, timeoutSeconds }))
    if (!(typeof v === 'number' && v > 0))
      throw new VitrineError(`${k}: ${JSON.stringify(v)} is not a positive number of seconds`, -1);
  return { stallSeconds, timeoutSeconds };
}

/**
 * Reads a body (a ReadableStream of Uint8Array chunks) to bytes, at most maxBytes of them.
 * opts: what (names it in messages), total (the size announced, for progress and messages),
 * signal, stallSeconds / timeoutSeconds (Infinity: none), onProgress({ loaded, total, name }),
 * peek: (head: Uint8Array, loaded) => { need } | { total } | null, called once `need` bytes are in
 * (first with 0 bytes: it says what it needs): { need: N } asks again when N bytes are in,
 * { total: N } says the body is exactly N bytes (more or fewer is an error, and the buffer is made
 * once), null stops asking; it throws to refuse. ctl: the AbortController of the fetch (aborted on
 * a timeout or the caller's signal); started: when the clock began (ms).
 */
export async function readBody(body, opts = {}) {
  const { what = 'the bytes', signal = null, onProgress = null, peek = null, maxBytes = Infinity } = opts;
  const { stallSeconds = Infinity, timeoutSeconds = Infinity } = opts;
  const started = opts.started ?? Date.now();
  let total = opts.total ?? null,
    loaded = 0,
    stop = null; // why the read was stopped (a timeout, the caller's abort)
  const reader = body.getReader();
  const halt = (reason) => {
    if (stop) return;
    stop = reason;
    reader.cancel().catch(() => {});
    if (opts.ctl) opts.ctl.abort();
  };
  const tooLate = () =>
    `not finished after ${secs(timeoutSeconds)} (the timeout; ${loaded}${total ? ` of ${total}` : ''} bytes read)`;
  const stalled = () =>
    `stalled: no bytes for ${secs(stallSeconds)} after ${loaded}${total ? ` of ${total}` : ''} bytes`;
  const aborted = () => `aborted after ${loaded}${total ? ` of ${total}` : ''} bytes`;
  let stallTimer = null;
  const arm = () => {
    if (stallSeconds === Infinity) return;
    clearTimeout(stallTimer);
    stallTimer = setTimeout(() => halt(stalled()), stallSeconds * 1000);
  };
  const left = timeoutSeconds * 1000 - (Date.now() - started);
  const totalTimer = timeoutSeconds === Infinity ? null : setTimeout(() => halt(tooLate()), Math.max(0, left));
  const onAbort = () => halt(aborted());
  if (signal) signal.addEventListener('abort', onAbort);
  const fail = (msg, status) => {
    halt(msg);
    return new VitrineError(`${what}: ${msg}`, status);
  };
  try {
    if (signal && signal.aborted) throw fail(aborted(), -7);
    let cap = maxBytes,
      exact = null,
      chunks = [],
      buf = null,
      need = 0,
      asking = !!peek;
    const head = () => (buf ? buf.subarray(0, loaded) : concat(chunks, loaded));
    const ask = () => {
      while (asking && loaded >= need) {
        const r = peek(head(), loaded);
        if (!r) asking = false;
        else if (r.need != null) need = r.need;
        else if (r.cap != null) {
          asking = false;
          cap = Math.min(cap, r.cap);
          if (loaded > cap) throw fail(`more than the cap of ${cap} bytes (${loaded} arrived)`, -3);
        } else {
          asking = false;
          exact = r.total;
          if (exact > cap) throw fail(`says it is ${exact} bytes, over the cap of ${cap} bytes`, -3);
          if (loaded > exact) throw fail(`more bytes than the ${exact} it says it is`, -3);
          cap = exact;
          total = exact;
          buf = new Uint8Array(exact);
          buf.set(concat(chunks, loaded));
          chunks = null;
        }
      }
    };
    try {
      ask();
    } catch (e) {
      throw e instanceof VitrineError && e.message.startsWith(`${what}: `) ? e : fail(e.message, e.status ?? -3);
    }
    if (onProgress) onProgress({ loaded, total, name: what });
    arm();
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (e) {
        if (stop) throw new VitrineError(`${what}: ${stop}`, stop.startsWith('aborted') ? -7 : -8);
        // a body cut short (the server or the network went away): say what came
        throw fail(`the download broke off after ${loaded}${total ? ` of ${total}` : ''} bytes (${why(e)})`, -8);
      }
      if (stop) throw new VitrineError(`${what}: ${stop}`, stop.startsWith('aborted') ? -7 : -8);
      if (chunk.done) break;
      arm();
      const v = chunk.value;
      if (loaded + v.length > cap)
        throw fail(
          exact != null
            ? `more bytes than the ${exact} it says it is`
            : `more than the cap of ${cap} bytes (${loaded + v.length} arrived)`,
          -3,
        );
      if (buf) buf.set(v, loaded);
      else chunks.push(v);
      loaded += v.length;
      if (onProgress) onProgress({ loaded, total, name: what });
      try {
        ask();
      } catch (e) {
        throw e instanceof VitrineError && e.message.startsWith(`${what}: `) ? e : fail(e.message, e.status ?? -3);
      }
    }
    if (exact != null && loaded !== exact) throw fail(`ended after ${loaded} of the ${exact} bytes it says it is`, -8);
    return buf || concat(chunks, loaded);
  } finally {
    clearTimeout(stallTimer);
    clearTimeout(totalTimer);
    if (signal) signal.removeEventListener('abort', onAbort);
  }
}

function concat(chunks, n) {
  if (chunks.length === 1 && chunks[0].length === n) return chunks[0];
  const out = new Uint8Array(n);
  let o = 0;
  for (const c of chunks) {
    out.set(c, o);
    o += c.length;
  }
  return out;
}

/**
 * A URL's bytes: fetch(url) with the caller's signal, a stall timeout (no bytes -- the response's
 * head included -- for stallSeconds) and a total one (timeoutSeconds), its body counted after
 * decoding against maxBytes (a Content-Length over it, without a Content-Encoding, is refused
 * before the body is read). what: the URL as messages name it. peek, onProgress: readBody's.
 */
export async function fetchBytes(url, opts = {}) {
  const { what = String(url), signal = null, maxBytes = Infinity } = opts;
  const { stallSeconds, timeoutSeconds } = limits({
    stallSeconds: opts.stallSeconds ?? URL_STALL_SECONDS,
    timeoutSeconds: opts.timeoutSeconds ?? URL_TIMEOUT_SECONDS.weights,
  });
  if (signal && signal.aborted) throw new VitrineError(`${what}: aborted before it was fetched`, -7);
  const ctl = new AbortController(),
    started = Date.now();
  let stop = null;
  const halt = (reason) => {
    if (!stop) {
      stop = reason;
      ctl.abort();
    }
  };
  // until the response's head is in: the stall and total clocks run here, then in readBody
  const t1 = setTimeout(
    () =>
      halt(
        stallSeconds <= timeoutSeconds
          ? `stalled: no response for ${secs(stallSeconds)}`
          : `no response after ${secs(timeoutSeconds)} (the timeout)`,
      ),
    Math.min(stallSeconds, timeoutSeconds) * 1000,
  );
  const onAbort = () => halt('aborted before the response came');
  if (signal) signal.addEventListener('abort', onAbort);
  let r;
  try {
    r = await fetch(url, { signal: ctl.signal });
  } catch (e) {
    if (stop) throw new VitrineError(`${what}: ${stop}`, stop.startsWith('aborted') ? -7 : -8);
    throw new VitrineError(`${what}: cannot fetch (${why(e)})`, -8);
  } finally {
    clearTimeout(t1);
    if (signal) signal.removeEventListener('abort', onAbort);
  }
  if (stop) throw new VitrineError(`${what}: ${stop}`, stop.startsWith('aborted') ? -7 : -8);
  const drop = () => {
    ctl.abort();
    if (r.body) r.body.cancel().catch(() => {});
  };
  if (!r.ok) {
    drop();
    throw new VitrineError(`${what}: HTTP ${r.status}${r.statusText ? ' ' + r.statusText : ''}`, -8);
  }
  const length = r.headers.get('content-length'),
    encoded = !/^(identity)?$/i.test((r.headers.get('content-encoding') || '').trim());
  const total = !encoded && length != null && /^\d+$/.test(length.trim()) ? Number(length) : null;
  if (total != null && total > maxBytes) {
    drop();
    throw new VitrineError(`${what}: Content-Length ${total} is over the cap of ${maxBytes} bytes`, -3);
  }
  if (!r.body) return new Uint8Array(0);
  return readBody(r.body, { ...opts, what, total, stallSeconds, timeoutSeconds, maxBytes, ctl, started });
}
