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

// timm's calls: another image size, DeiT's two heads, timm's own forward_intermediates
export function timmCalls(model: Model, images: Float32Array): number {
  const avg = model.timmForward(images, { height: 32, width: 48 });
  const [head, dist] = model.timmForward(images, { distilledTraining: true });
  const r = model.timmForwardIntermediates(images, {
    indices: [-1],
    norm: true,
    outputFmt: 'NLC',
    returnPrefixTokens: true,
  });
  const planned = model.plan('timm_intermediates', { batch: 2, height: 32, width: 48 }).activations;
  const prefix = r.prefixTokens ? r.prefixTokens.length : 0;
  // @ts-expect-error: outputFmt is NCHW or NLC
  model.timmForwardIntermediates(images, { outputFmt: 'NHWC' });
  return (
    avg.shape[0] +
    head.shape[0] +
    dist.shape[0] +
    r.intermediates.length +
    prefix +
    planned +
    (model.dims.dynamic ? 1 : 0)
  );
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
