// rotation-objective.mjs: a training objective from outside web/ (tests/node/objectives.test.mjs
// registers it): RotNet's rotation prediction (Gidaris et al., 2018) -- each image turned by a
// quarter turn k (k = 0 .. turns-1, drawn from the step and the slot, so a resumed run turns what
// the straight run turned), and the model, a timm classifier with one output per turn, learns which
// turn it was given. Self-supervised: its data need no labels. One module, the registry's fields
// (web/train/objectives/index.js); nothing else of vitrine changes for it.
import { classifierSpec } from '../../web/vitrine.js';

// a whole number in 2..4 (web/train/options.js's form of a type: a kind the command line parses
// by, and a check that says what is wrong)
const TURNS = {
  kind: 'whole',
  min: 2,
  max: 4,
  check: (v) => (Number.isInteger(v) && v >= 2 && v <= 4 ? null : `${JSON.stringify(v)} is not a whole number in 2..4`),
};

// image j of [n, c, s, s] turned k quarter turns anticlockwise into out
function turn(src, out, n, c, s, ks) {
  for (let j = 0; j < n; j++)
    for (let ch = 0; ch < c; ch++) {
      const o = (j * c + ch) * s * s;
      for (let y = 0; y < s; y++)
        for (let x = 0; x < s; x++) {
          const k = ks[j];
          const [sy, sx] =
            k === 0 ? [y, x] : k === 1 ? [x, s - 1 - y] : k === 2 ? [s - 1 - y, s - 1 - x] : [s - 1 - x, y];
          out[o + y * s + x] = src[o + sy * s + sx];
        }
    }
}

export default {
  name: 'rotation',
  summary: 'rotation prediction (RotNet): which quarter turn each image was given',
  labels: false,
  defaults: { batch: 8, steps: 100, lr: 1e-3, val: 0, turns: 4 },
  options: {
    turns: { flag: 'turns', value: 'N', type: TURNS, run: true, help: 'how many quarter turns to tell apart' },
  },
  spec(o) {
    const config = o.config != null ? o.config : o.model && typeof o.model === 'object' ? o.model : null;
    return classifierSpec({
      preset: typeof o.model === 'string' ? o.model : 'fmnist-p7-mlp2',
      config,
      numClasses: o.turns ?? 4,
      pool: 'avg',
    });
  },
  settings(o) {
    return { turns: o.turns ?? 4 };
  },
  trainer(run) {
    return {
      lr: run.lr,
      warmupSteps: run.warmup,
      totalSteps: run.steps,
      seed: BigInt(run.seed) + 1n,
      clipNorm: 1,
      weightDecay: run.weightDecay ?? 0.05,
    };
  },
  async step(model, { images, n, step, run }) {
    const { chans, img } = model.dims;
    const k = Int32Array.from({ length: n }, (_, j) => (step * 7 + j) % run.turns);
    const out = new Float32Array(images.length);
    turn(images, out, n, chans, img, k);
    return model.trainStepLabelsAsync(out, k);
  },
};
