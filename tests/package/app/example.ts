// example.ts: typed use of the package, checked by tsc --noEmit against the shipped vitrine.d.ts.
// The @ts-expect-error lines fail the check if the types were missing (any) or too loose.
import { createVitrine, WASM_BUILDS, VitrineError, type Vitrine, type Model, type TrainOptions } from 'vitrine';

export async function trainTiny(
  pixels: Float32Array,
  batch: number,
): Promise<{ losses: number[]; weights: Uint8Array }> {
  const vt: Vitrine = await createVitrine({ locateFile: (file: string, url: URL) => new URL(file, url) });
  const model: Model = vt.createModel({
    kind: 'mae',
    config: {
      encoder: { img_size: 16, patch_size: 4, in_chans: 1, embed_dim: 32, depth: 2, num_heads: 2 },
      decoder_dim: 32,
    },
  });
  model.initWeights(1);
  model.setGradCheckpointing('block');
  const opts: TrainOptions = { lr: 3e-3, warmupSteps: 0 };
  model.trainerInit(opts);
  const losses: number[] = [];
  for (let i = 0; i < 3; i++) losses.push(model.trainStep(pixels, batch));
  const weights: Uint8Array = model.saveSafetensors();
  model.loadSafetensors(weights);
  const files: readonly string[] = WASM_BUILDS.simd.files;
  if (!files.length) throw new VitrineError('no files', -1);
  return { losses, weights };
}

export async function misuse(model: Model): Promise<void> {
  // @ts-expect-error: no such build
  await createVitrine({ wasm: 'avx512' });
  // @ts-expect-error: trainStep returns the loss, a number
  const s: string = model.trainStep(new Float32Array(256), 1);
  // @ts-expect-error: the policy is a string or a boolean
  model.setGradCheckpointing(3);
  void s;
}
