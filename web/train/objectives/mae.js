// mae.js: lightly's masked autoencoder (MAE) as a training objective: a ViT encoder sees the
// patches a seeded mask keeps, a small decoder predicts the masked ones (src/objectives.c); the run
// makes the encoder. What it shares with AIM: self-supervised.js.
import { selfSupervised } from './self-supervised.js';

export default selfSupervised({
  name: 'mae',
  summary: "masked autoencoder (lightly's MAE): pre-trains an encoder on unlabelled images",
  lr64: 2e-3,
});
