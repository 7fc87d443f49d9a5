// mae.js: lightly's masked autoencoder (MAE) as a training objective: a ViT encoder sees the
// patches a seeded mask keeps, a small decoder predicts the masked ones (src/objectives.c); the run
// makes the encoder. What it shares with AIM: self-supervised.js.
import { selfSupervised } from './self-supervised.js';

export default selfSupervised({
  name: 'mae',
  summary: "masked autoencoder (lightly's MAE): pre-trains an encoder on unlabelled images",
  lr64: 2e-3,
  torch: {
    module: 'lightly.examples.MAE',
    encoder: (mc) => mc.encoder,
    parts: (mc) => ({
      decoder: {
        decoder_dim: mc.decoder_dim,
        decoder_depth: mc.decoder_depth,
        decoder_heads: mc.decoder_heads,
        decoder_mlp_ratio: mc.decoder_mlp_ratio,
      },
    }),
    loss: (tc, mc) => ({ kind: 'mae', mask_ratio: Math.fround(tc.mask_ratio), norm_pix_loss: !!mc.norm_pix_loss }),
    lossRanges: { mask_ratio: [0, 1] },
  },
});
