// aim.js: lightly's AIM (autoregressive image models) as a training objective: a causal ViT
// predicts each patch from the ones before it, after a bidirectional prefix (src/objectives.c); the
// run makes the encoder. What it shares with MAE: self-supervised.js.
import { selfSupervised } from './self-supervised.js';

export default selfSupervised({
  name: 'aim',
  summary: "autoregressive image model (lightly's AIM): pre-trains a causal encoder on unlabelled images",
  lr64: 1e-3,
  torch: {
    module: 'lightly.examples.AIM',
    encoder: (mc) => mc.encoder,
    parts: (mc) => ({
      head: { head_hidden_dim: mc.head_hidden_dim, head_blocks: mc.head_blocks, head_mlp_ratio: mc.head_mlp_ratio },
    }),
    loss: () => ({ kind: 'aim' }),
    lossRanges: {},
  },
});
