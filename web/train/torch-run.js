// train/torch-run.js: a vitrine training run in the shapes PyTorch and lightly use, and back. A
// "torch run" is a folder of three files, written by `vitrine export --torch DIR` (web/cli/export.js)
// and read and written by python/vitrine_continue.py (docs/scale-out.md):
//   run.json               the run: objective, the model (timm's VisionTransformer kwargs, lightly's
//                          MAE decoder / AIM head sizes), AdamW's state_dict structure (its param
//                          groups with lr, betas, eps, weight decay split as vitrine splits it), the
//                          schedule and the step reached, the loss settings, the data (source, order
//                          seed, position), the mask generator's state, and vitrine's own record of the
//                          run (model_config, train_config, the run settings) to come back with
//   model.safetensors      the model's state_dict under PyTorch's keys (lightly's MAE / AIM example
//                          modules, timm's VisionTransformer for a classifier), frozen tensors too
//   optimizer.safetensors  AdamW's state: state.<i>.exp_avg / state.<i>.exp_avg_sq, i as in its state_dict
// Every tensor is float32 and crosses bit for bit both ways. No I/O here (bytes in, bytes out).
import { readSafetensorsHeader } from '../formats/safetensors.js';
import { channelStats } from '../formats/images.js';
import { runFromCheckpoint } from './checkpoint.js';
import { objectiveNamed, objectiveNames } from './objectives/index.js';
import { own } from './options.js';
import { FORMATS } from '../formats/metadata.js';
import { VitrineError } from '../errors.js';

export const TORCH_RUN_FORMAT = 'vitrine-torch-run/1';
/** The files of a torch run, in the order they are written (run.json last: it names the step). */
export const TORCH_RUN_FILES = Object.freeze(['model.safetensors', 'optimizer.safetensors', 'run.json']);
/** The objectives a torch run can hold: those whose module says how PyTorch continues them
 * (objectives/index.js, `torch`): MAE, AIM, classify. */
export const torchObjectives = () => objectiveNames().filter((n) => objectiveNamed(n).torch);
// lightly's CosineWarmupScheduler ends at this share of the peak learning rate (src/optim.c)
const COSINE_END = 0.001;

const f32 = Math.fround;
const bad = (what, m) => new VitrineError(`${what}: ${m}`, -3);

// ---- safetensors: float32 tensors in, out -------------------------------------------------------

// { meta, tensors: Map name -> { shape, data (the little-endian bytes, a view) } } of F32 tensors
function readTensors(bytes, what) {
  const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  let h;
  try {
    h = readSafetensorsHeader(u8);
  } catch (e) {
    throw bad(what, e.message);
  }
  const base = 8 + h.length,
    tensors = new Map();
  for (const [name, e] of Object.entries(h.header)) {
    if (name === '__metadata__') continue;
    const shape = e && e.shape,
      off = e && e.data_offsets;
    if (!e || e.dtype !== 'F32')
      throw bad(what, `tensor ${name}: dtype ${JSON.stringify(e && e.dtype)} (a run's tensors are F32)`);
    if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0))
      throw bad(what, `tensor ${name}: shape ${JSON.stringify(shape)} is not a list of sizes`);
    const n = shape.reduce((a, b) => a * b, 1);
    if (
      !Array.isArray(off) ||
      off.length !== 2 ||
      !off.every(Number.isInteger) ||
      off[0] < 0 ||
      off[1] - off[0] !== 4 * n ||
      base + off[1] > u8.length
    )
      throw bad(what, `tensor ${name}: data_offsets ${JSON.stringify(off)} do not hold ${n} float32 values`);
    tensors.set(name, { shape, data: u8.subarray(base + off[0], base + off[1]) });
  }
  const meta = h.header.__metadata__ || {};
  return { meta, tensors };
}

// [name, shape, bytes] entries in order and string metadata -> safetensors bytes (header padded with
// spaces to a multiple of 8, as the engine and python/vitrine_dump.py write it)
function writeTensors(entries, meta) {
  const header = {};
  let off = 0;
  for (const [name, shape, data] of entries) {
    header[name] = { dtype: 'F32', shape, data_offsets: [off, off + data.length] };
    off += data.length;
  }
  header.__metadata__ = meta;
  let text = JSON.stringify(header);
  const enc = new TextEncoder();
  while ((8 + enc.encode(text).length) % 8) text += ' ';
  const h = enc.encode(text),
    out = new Uint8Array(8 + h.length + off);
  new DataView(out.buffer).setBigUint64(0, BigInt(h.length), true);
  out.set(h, 8);
  let at = 8 + h.length;
  for (const [, , data] of entries) {
    out.set(data, at);
    at += data.length;
  }
  return out;
}

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[i] = c >>> 0;
  }
  return t;
})();
/** CRC-32 (zlib's, as src/safetensors.c vt_crc32) of bytes, as 8 hex digits. */
export function crc32Hex(bytes) {
  let c = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return ((c ^ 0xffffffff) >>> 0).toString(16).padStart(8, '0');
}

// ---- what vitrine's trainer does, as numbers PyTorch takes ------------------------------------

/** AdamW's weight decay groups as src/optim.c splits them: no decay for 1-D parameters (biases,
 * norms) and, by name, tokens, positional embeddings and LayerScale gammas (lightly's groups). */
export const noWeightDecay = (name, shape) => shape.length <= 1 || /token|pos_embed|gamma/.test(name);

/** timm's VisionTransformer kwargs of an encoder config (model_config's "encoder"): its fields but
 * lightly's mask_token, init_values 0 written as timm's None (the engine's vt_timm_kwargs_json; a
 * test holds the two together). */
export function timmKwargs(encoder) {
  const kw = { ...encoder };
  delete kw.mask_token;
  if (kw.init_values === 0) kw.init_values = null;
  return kw;
}

/** The learning rate of step `step` (0-based: the step about to be taken) as src/trainer.c
 * vt_train_lr computes it, float32 operation by float32 operation: lightly's cosine warm-up
 * multiplier (in double, rounded once), then lr * f in the warm-up, min_lr + (lr - min_lr) * f after. */
export function scheduleLr({ lr, min_lr: minLr = 0, warmup_steps: warmup, total_steps: total }, step) {
  lr = f32(lr);
  minLr = f32(minLr);
  if (!(total > 0)) return lr;
  let f;
  if (step < warmup) f = f32((step + 1) / warmup);
  else {
    const s = step - warmup,
      M = total - warmup;
    f =
      s >= M - 1
        ? f32(COSINE_END)
        : f32(COSINE_END - ((COSINE_END - 1.0) * (Math.cos((Math.PI * s) / (M - 1)) + 1.0)) / 2.0);
  }
  return step < warmup ? f32(lr * f) : f32(minLr + f32(f32(lr - minLr) * f));
}

// ---- export -----------------------------------------------------------------------------------

/**
 * A vitrine checkpoint (Session.checkpoint(), `vitrine train`'s checkpoint.safetensors, train()'s
 * result.checkpoint) as a torch run: { 'model.safetensors', 'optimizer.safetensors', 'run.json' }
 * bytes. Its metadata is checked as a resume checks it (web/train/checkpoint.js runFromCheckpoint) and
 * every tensor against its CRC-32; a damaged field is a VitrineError naming it.
 */
export function exportTorchRun(checkpoint, { source = 'the checkpoint' } = {}) {
  const { meta, tensors } = readTensors(checkpoint, source);
  const c = runFromCheckpoint(meta, source),
    obj = objectiveNamed(c.objective),
    torch = obj.torch;
  if (!torch) throw bad(source, `a ${obj.name} run has no PyTorch counterpart (${torchObjectives().join(', ')} have)`);
  checkCrcs(meta, tensors, source);
  let mc, tc;
  try {
    mc = JSON.parse(meta.model_config);
    tc = JSON.parse(meta.train_config);
  } catch (e) {
    throw bad(source, `damaged checkpoint metadata: ${e.message}`);
  }
  const step = c.step,
    run = JSON.parse(meta[obj.runKey]),
    enc = torch.encoder(mc),
    params = paramsOf(tensors, source),
    opt = optimizerOf(params, tc, step);
  const model = {
    module: torch.module,
    timm_kwargs: timmKwargs(enc),
    ...torch.parts(mc),
    frozen: params.filter((p) => !p.m).map((p) => p.name),
  };
  const doc = {
    format: TORCH_RUN_FORMAT,
    objective: obj.name,
    step,
    model,
    optimizer: { class: 'torch.optim.AdamW', state_dict: opt.stateDict },
    schedule: {
      kind: 'cosine_warmup',
      ...opt.sched,
      end_factor: COSINE_END,
      clip_norm: f32(tc.clip_norm),
      next_lr: scheduleLr(opt.sched, step),
    },
    loss: torch.loss(tc, mc),
    ...dataOf(run, enc, step),
    masks: { generator: 'xoshiro128**', state: meta.rng },
    vitrine: {
      kind: meta.kind,
      key: obj.runKey,
      model_config: meta.model_config,
      train_config: tc,
      run,
      grad_checkpointing: meta.grad_checkpointing ?? null,
    },
    history: [],
  };
  // format 'pt': what safetensors' torch helpers write
  const tag = { format: 'pt', run: TORCH_RUN_FORMAT, step: String(step) };
  return {
    'model.safetensors': writeTensors(
      params.map((p) => [p.name, p.shape, p.data]),
      torch.weightsMeta ? { ...tag, ...torch.weightsMeta(model) } : tag,
    ),
    'optimizer.safetensors': writeTensors(opt.tensors, tag),
    'run.json': new TextEncoder().encode(readable(doc) + '\n'),
  };
}

// the checkpoint's parameters in the engine's (= the PyTorch state_dict's) order: { name, shape,
// data, m, v } (m, v: AdamW's moments, for the trainable ones)
function paramsOf(tensors, source) {
  const params = [];
  for (const [k, t] of tensors)
    if (k.startsWith('param/')) {
      const name = k.slice(6),
        m = tensors.get(`adam_m/${name}`),
        v = tensors.get(`adam_v/${name}`);
      if (!m !== !v) throw bad(source, `${name}: adam_m and adam_v go together`);
      params.push({ name, shape: t.shape, data: t.data, m, v });
    }
  return params;
}

// AdamW's state_dict at `step` (its groups split by weight decay as src/optim.c splits them), its
// tensors [name, shape, bytes], and the schedule's numbers
function optimizerOf(params, tc, step) {
  const trainable = params.filter((p) => p.m);
  const groups = [
    ['params', trainable.filter((p) => !noWeightDecay(p.name, p.shape)), f32(tc.weight_decay)],
    ['params_no_weight_decay', trainable.filter((p) => noWeightDecay(p.name, p.shape)), 0],
  ].filter(([, ps]) => ps.length);
  const lr = f32(tc.lr),
    sched = { lr, min_lr: f32(tc.min_lr ?? 0), warmup_steps: tc.warmup_steps, total_steps: tc.total_steps };
  const state = {},
    tensors = [];
  let i = 0;
  const paramGroups = groups.map(([name, ps, wd]) => {
    const ids = [];
    for (const p of ps) {
      state[i] = { step };
      tensors.push([`state.${i}.exp_avg`, p.shape, p.m.data], [`state.${i}.exp_avg_sq`, p.shape, p.v.data]);
      ids.push(i++);
    }
    return {
      name,
      params: ids,
      param_names: ps.map((p) => p.name),
      lr: scheduleLr(sched, step),
      initial_lr: lr,
      betas: [f32(tc.beta1), f32(tc.beta2)],
      eps: f32(tc.eps),
      weight_decay: wd,
      amsgrad: false,
      maximize: false,
      foreach: null,
      capturable: false,
    };
  });
  return { sched, stateDict: { state, param_groups: paramGroups }, tensors };
}

// run.json's batch and data: what a step takes, where the data come from, and how far the run is
function dataOf(run, enc, step) {
  const perStep = run.batch * (run.gradAccum || 1),
    n = run.dataN ?? run.trainN,
    seen = step * perStep,
    seed = BigInt(run.seed);
  const stats = channelStats(enc.in_chans, run.mean != null ? { mean: run.mean, std: run.std } : {});
  return {
    batch: { batch: run.batch, grad_accum: run.gradAccum || 1, images_per_step: perStep },
    data: {
      // the CLI keeps 'fashion-mnist', a library run the source's name
      source: run.data === 'fashion-mnist/train' ? 'fashion-mnist' : run.data,
      n,
      train_max: run.trainMax ?? null,
      img_size: enc.img_size,
      in_chans: enc.in_chans,
      classes: run.classes ?? null,
      mean: stats.mean,
      std: stats.std,
      augment: run.augment ?? 'none',
      augment_seed: String(seed + 3n),
      order: { kind: 'vitrine-data-order/1', seed: String(seed + 2n) },
      position: { images_seen: seen, epoch: n ? Math.floor(seen / n) : 0, index: n ? seen % n : 0 },
    },
  };
}

// JSON with the outer three levels on lines of their own, anything deeper on one line
function readable(v, depth = 0) {
  if (depth >= 3 || v === null || typeof v !== 'object' || !Object.keys(v).length) return JSON.stringify(v);
  const pad = ' '.repeat(2 * (depth + 1)),
    arr = Array.isArray(v),
    items = Object.entries(v).map(([k, x]) => `${pad}${arr ? '' : `${JSON.stringify(k)}: `}${readable(x, depth + 1)}`);
  return `${arr ? '[' : '{'}\n${items.join(',\n')}\n${' '.repeat(2 * depth)}${arr ? ']' : '}'}`;
}

function checkCrcs(meta, tensors, what) {
  if (meta.crc32 == null) return;
  let sums;
  try {
    sums = JSON.parse(meta.crc32);
  } catch {
    throw bad(what, 'damaged checkpoint metadata: crc32 is not JSON');
  }
  for (const [k, t] of tensors)
    if (sums[k] !== crc32Hex(t.data)) throw bad(what, `tensor '${k}' is damaged (its crc32 is not the recorded one)`);
}

// ---- import -----------------------------------------------------------------------------------

// run.json's fields as the import reads them: a missing or wrong one is named
function field(obj, path, what, check) {
  let v = obj;
  for (const k of path.split('.')) v = v != null && typeof v === 'object' ? v[k] : undefined;
  const why = check(v);
  if (why) throw bad(what, `run.json: ${path}: ${why}`);
  return v;
}
const isNum = (lo, hi) => (v) =>
  typeof v === 'number' && v >= lo && v <= hi ? null : `${JSON.stringify(v)} is not a number in ${lo}..${hi}`;
const isInt = (lo, hi) => (v) =>
  Number.isInteger(v) && v >= lo && v <= hi ? null : `${JSON.stringify(v)} is not a whole number in ${lo}..${hi}`;
const isText = (v) => (typeof v === 'string' && v.length ? null : `${JSON.stringify(v)} is not text`);
const isObj = (v) => (v && typeof v === 'object' && !Array.isArray(v) ? null : 'missing or not an object');

// run.json of a torch run, its header fields checked: { doc, objective, torch, step, key, rng }
function readRunDoc(files, source) {
  for (const f of TORCH_RUN_FILES)
    if (!files[f]) throw new VitrineError(`${source}: no ${f} (a torch run is ${TORCH_RUN_FILES.join(', ')})`, -8);
  let doc;
  try {
    doc = JSON.parse(new TextDecoder().decode(files['run.json']));
  } catch (e) {
    throw bad(source, `run.json is not JSON (${e.message})`);
  }
  const what = source;
  if (!doc || doc.format !== TORCH_RUN_FORMAT)
    throw bad(what, `run.json: format ${JSON.stringify(doc && doc.format)} is not ${TORCH_RUN_FORMAT}`);
  const objective = field(doc, 'objective', what, (v) =>
      torchObjectives().includes(v) ? null : `${JSON.stringify(v)} is not ${torchObjectives().join(', ')}`,
    ),
    torch = objectiveNamed(objective).torch;
  const step = field(doc, 'step', what, isInt(0, 2e9));
  for (const p of ['vitrine', 'schedule', 'loss', 'batch', 'masks', 'optimizer.state_dict']) field(doc, p, what, isObj);
  const key = objectiveNamed(objective).runKey;
  field(doc, 'vitrine.key', what, (v) => (v === key ? null : `${JSON.stringify(v)} is not ${key}`));
  field(doc, 'vitrine.kind', what, isText);
  field(doc, 'vitrine.model_config', what, isText);
  field(doc, 'vitrine.run', what, isObj);
  field(doc, 'vitrine.train_config', what, isObj);
  const rng = field(doc, 'masks.state', what, (v) =>
    typeof v === 'string' && /^[0-9a-f]{32}$/.test(v) ? null : `${JSON.stringify(v)} is not 32 hex digits`,
  );
  return { doc, objective, torch, step, key, rng };
}

// AdamW's moments of every trainable parameter, at the run's step (one set of betas and eps, one
// weight decay): { moments: Map name -> { ea, eq }, betas, eps, wd }
function momentsOf(doc, opt, step, what) {
  const groups = field(doc, 'optimizer.state_dict.param_groups', what, (v) =>
    Array.isArray(v) && v.length ? null : 'not a list of groups',
  );
  const state = doc.optimizer.state_dict.state,
    moments = new Map();
  let betas = null,
    eps = null,
    wd = 0;
  groups.forEach((g, gi) => {
    const at = `optimizer.state_dict.param_groups.${gi}`;
    field(doc, `${at}.param_names`, what, (v) =>
      Array.isArray(v) && Array.isArray(g.params) && v.length === g.params.length
        ? null
        : 'not a list of names, one per params entry',
    );
    const b = field(doc, `${at}.betas`, what, (v) =>
      Array.isArray(v) && v.length === 2 && v.every((x) => typeof x === 'number' && x >= 0 && x < 1)
        ? null
        : `${JSON.stringify(v)} is not two numbers in [0, 1)`,
    );
    const e = field(doc, `${at}.eps`, what, isNum(0, 1));
    const w = field(doc, `${at}.weight_decay`, what, isNum(0, 1000));
    if (betas && (b[0] !== betas[0] || b[1] !== betas[1] || e !== eps))
      throw bad(what, `run.json: ${at}: betas / eps differ between groups (vitrine keeps one set)`);
    [betas, eps] = [b, e];
    if (w) wd = wd && wd !== w ? NaN : w;
    g.params.forEach((id, j) => {
      const name = g.param_names[j],
        s = state && state[id];
      if (!s || Number(s.step) !== step)
        throw bad(
          what,
          `optimizer state of ${name} (state.${id}): step ${JSON.stringify(s && s.step)}, the run's is ${step}`,
        );
      const ea = opt.tensors.get(`state.${id}.exp_avg`),
        eq = opt.tensors.get(`state.${id}.exp_avg_sq`);
      if (!ea || !eq) throw bad(what, `optimizer.safetensors: no state.${id}.exp_avg / exp_avg_sq (${name})`);
      if (moments.has(name)) throw bad(what, `run.json: ${name} is in two param groups`);
      moments.set(name, { ea, eq });
    });
  });
  if (Number.isNaN(wd))
    throw bad(what, 'run.json: the param groups have two different weight decays (vitrine keeps one)');
  return { moments, betas, eps, wd };
}

// the engine's train_config of the run: PyTorch's schedule, AdamW's settings and the loss's
function trainConfigOf(doc, torch, { betas, eps, wd }, what) {
  const vit = doc.vitrine,
    lr = field(doc, 'schedule.lr', what, isNum(0, 1000));
  // a loss setting the objective keeps in run.json's loss (PyTorch may have changed it), else vitrine's
  const lossField = (k, kept) =>
    own(torch.lossRanges, k) ? field(doc, `loss.${k}`, what, isNum(...torch.lossRanges[k])) : kept;
  const tc = {
    lr,
    beta1: betas[0],
    beta2: betas[1],
    eps,
    weight_decay: wd,
    warmup_steps: field(doc, 'schedule.warmup_steps', what, isInt(0, 2e9)),
    total_steps: field(doc, 'schedule.total_steps', what, isInt(0, 2e9)),
    clip_norm: field(doc, 'schedule.clip_norm', what, isNum(0, 1e30)),
    mask_ratio: lossField('mask_ratio', vit.train_config.mask_ratio),
    seed: field(doc, 'vitrine.train_config.seed', what, isInt(0, 2 ** 53)),
    label_smoothing: lossField('label_smoothing', vit.train_config.label_smoothing ?? 0),
    min_lr: field(doc, 'schedule.min_lr', what, isNum(0, 1000)),
    grad_accum: field(doc, 'batch.grad_accum', what, isInt(1, 65536)),
  };
  return tc;
}

// the engine's layout: per parameter param/, then adam_m/ and adam_v/ when it trains
function stateEntries(model, moments, what) {
  const entries = [];
  for (const [name, t] of model.tensors) {
    entries.push([`param/${name}`, t.shape, t.data]);
    const mo = moments.get(name);
    if (!mo) continue;
    for (const [k, x] of [
      ['adam_m', mo.ea],
      ['adam_v', mo.eq],
    ]) {
      if (x.shape.join() !== t.shape.join())
        throw bad(
          what,
          `optimizer ${k === 'adam_m' ? 'exp_avg' : 'exp_avg_sq'} of ${name}: shape [${x.shape}], the parameter's is [${t.shape}]`,
        );
      entries.push([`${k}/${name}`, t.shape, x.data]);
    }
    moments.delete(name);
  }
  if (moments.size)
    throw bad(what, `optimizer state for ${[...moments.keys()][0]}, which model.safetensors does not hold`);
  return entries;
}

/**
 * A torch run ({ 'run.json', 'model.safetensors', 'optimizer.safetensors' } bytes, as export wrote
 * them or python/vitrine_continue.py after training) as a vitrine checkpoint: the engine's training
 * state (parameters, AdamW moments, step, schedule, mask generator) with the run's settings, what
 * `vitrine train --resume` and train({ resume }) continue. The three files must be of the same step
 * (a run written half is refused); what is wrong is a VitrineError naming the file and field.
 */
export function importTorchRun(files, { source = 'the torch run' } = {}) {
  const { doc, torch, step, key, rng } = readRunDoc(files, source),
    what = source,
    vit = doc.vitrine;
  const model = readTensors(files['model.safetensors'], `${source}: model.safetensors`),
    opt = readTensors(files['optimizer.safetensors'], `${source}: optimizer.safetensors`);
  for (const [f, t] of [
    ['model.safetensors', model],
    ['optimizer.safetensors', opt],
  ])
    if (t.meta.step !== String(step))
      throw bad(
        what,
        `${f} is of step ${JSON.stringify(t.meta.step)}, run.json of step ${step} (a run written in part: use a complete one)`,
      );
  const adam = momentsOf(doc, opt, step, what),
    tc = trainConfigOf(doc, torch, adam, what),
    entries = stateEntries(model, adam.moments, what);
  const crc = {};
  for (const [k, , d] of entries) crc[k] = crc32Hex(d);
  return writeTensors(entries, {
    format: FORMATS.checkpoint,
    kind: vit.kind,
    model_config: vit.model_config,
    train_config: JSON.stringify(tc),
    step: String(step),
    rng,
    grad_checkpointing: vit.grad_checkpointing || 'none',
    crc32: JSON.stringify(crc),
    [key]: JSON.stringify(vit.run),
  });
}
