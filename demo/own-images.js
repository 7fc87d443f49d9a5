// own-images.js: the user's images, as every image the page gives the engine (MAE / AIM training
// images, the classes' images, an image to predict): decoded by the browser without colour
// conversion, then web/formats/images.js's pixel pipeline -- shorter side to the model's size, centre crop,
// its channels -- the same code, and so the same pixels, as `vitrine train --data DIR` in Node.
import { $, S, page } from './state.js';
import { bitmapPixels, resizeCrop } from '../web/vitrine.js';

/** An image file -> an ImageBitmap of its own pixels (no colour conversion, not premultiplied). */
export const decodeFile = (f) => createImageBitmap(f, { colorSpaceConversion: 'none', premultiplyAlpha: 'none' });

/** ImageBitmaps of the files the browser can decode; the others by name. */
export async function decodeAll(files) {
  const ok = [],
    bad = [];
  for (const f of files) {
    try {
      ok.push(await decodeFile(f));
    } catch {
      bad.push(f.name || 'a file');
    }
  }
  return { ok, bad };
}

/** Images at the model's size and channels: bytes [n, chans, size, size] (the pixel pipeline). */
export function pixelsFor(bitmaps, size, chans) {
  const per = chans * size * size,
    pixels = new Uint8Array(bitmaps.length * per);
  bitmaps.forEach((bm, i) => {
    const im = bitmapPixels(bm);
    pixels.set(resizeCrop(im.data, im.width, im.height, 4, size, chans), i * per);
  });
  return pixels;
}

/** A small picture of an image for the page (display only: the canvas's own scaling); label: its
 * text alternative. */
export function thumb(bm, size = 24, label = 'an image') {
  const c = document.createElement('canvas');
  c.width = c.height = size;
  c.setAttribute('role', 'img');
  c.setAttribute('aria-label', `${label} (${bm.width}×${bm.height} px)`);
  const s = Math.min(bm.width, bm.height);
  c.getContext('2d').drawImage(bm, (bm.width - s) / 2, (bm.height - s) / 2, s, s, 0, 0, size, size);
  return c;
}

/** Adds dropped / chosen files to the user's MAE / AIM images (at most 1024). */
export async function addFiles(files) {
  const room = Math.max(0, 1024 - S.userImages.length),
    { ok, bad } = await decodeAll(files.slice(0, room));
  S.userImages.push(...ok);
  $('user-count').textContent =
    `${S.userImages.length} image${S.userImages.length === 1 ? '' : 's'} of yours` +
    (bad.length ? ` (not images: ${bad.join(', ')})` : '');
  const th = $('thumbs');
  th.textContent = '';
  S.userImages
    .slice(0, 24)
    .forEach((bm, i) => th.appendChild(thumb(bm, 28, `your image ${i + 1} of ${S.userImages.length}`)));
  if (ok.length && !S.run) {
    $('data').value = 'user';
    page.planSoon();
  }
}

/** The user's images as a data set at the model's size and channels. */
export function userData(size, chans) {
  return { name: 'your images', n: S.userImages.length, chans, size, pixels: pixelsFor(S.userImages, size, chans) };
}
