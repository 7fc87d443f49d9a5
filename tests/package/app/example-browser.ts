// example-browser.ts: the DOM's own ImageData and ImageBitmap are what vitrine.d.ts calls images
// (checked with TypeScript's DOM lib; example.ts is also checked without it, as in a Node project).
import type { Model } from 'vitrine';

export function stepOn(model: Model, frames: ImageData[], bitmap: ImageBitmap): number {
  return model.trainStep(frames, frames.length) + model.trainStep([bitmap], 1) + model.loss(frames[0]);
}
