// model.js: the Model class, one model of a loaded engine (web/runtime/engine.js): its parameter table,
// weights in and out (safetensors), the calls (encode, forward, forward_intermediates, timm's
// forward, the loss) and their backward, checkpointing and memory plans, and training (the
// engine's trainer, src/trainer.c; the loop around it is web/train/session.js). Images go through the pixel
// pipeline (web/formats/images.js). Results come back by name through the engine's layouts.
import { VitrineError, AbortError } from '../errors.js';
import { toNCHW, channelStats } from '../formats/images.js';
import { withMetadata, readSafetensorsMeta, nonFiniteTensor } from '../formats/safetensors.js';
import { readWeights, resolveNormalization, statsFromMeta, pretrainedCfg } from '../formats/pretrained.js';

// A view of a model's memory that cannot outlive the model: every access checks that the model is
// alive (after dispose() it throws a VitrineError: writing through an old view would wreck the next
// model in the same memory) and rebuilds the view when the wasm memory has grown (which detaches
// plain views). Reads and writes go through a Proxy: for bulk work take .slice() or .set(array).
function liveView(model, make) {
  let view = make();
  const current = () => {
    if (!model._h) throw new VitrineError('the model was disposed: its parameter views are gone', -7);
    if (view.length === 0 && view.byteOffset === 0) view = make(); // detached by memory growth
    return view;
  };
  return new Proxy(view, {
    get(_, k) {
      const v = current(),
        x = Reflect.get(v, k, v);
      return typeof x === 'function' ? x.bind(v) : x;
    },
    set(_, k, x) {
      return Reflect.set(current(), k, x);
    },
    has(_, k) {
      return Reflect.has(current(), k);
    },
    ownKeys() {
      return Reflect.ownKeys(current());
    },
    getOwnPropertyDescriptor(_, k) {
      return Reflect.getOwnPropertyDescriptor(current(), k);
    },
    defineProperty(_, k, d) {
      return Reflect.defineProperty(current(), k, d);
    },
  });
}

// Index lists [B, K] (flat or nested; numbers or bigints) -> BigInt64Array, K.
function toIndices(name, x, batch) {
  if (x == null) return null;
  const flat =
    x instanceof BigInt64Array
      ? x
      : BigInt64Array.from((Array.isArray(x) ? x.flat() : Array.from(x)).map((v) => BigInt(v)));
  if (flat.length % batch) throw new VitrineError(`${name}: ${flat.length} indices are not [batch=${batch}, K]`, -1);
  return { data: flat, k: flat.length / batch };
}
const toMask = (x) =>
  x == null ? null : Uint8Array.from((Array.isArray(x) ? x.flat() : Array.from(x)).map((v) => (v ? 1 : 0)));

// bytes of vt_scalars (loss, dloss, lr, step, nonfinite, grad_norm: docs/kernels.md)
const SCALARS = 32;
// a step's inputs besides images and labels: region -> the step_inputs layout's field
const STEP_INPUTS = { idx_keep: 'idxKeep', idx_mask: 'idxMask', mask: 'mask' };

// A seed (number >= 0 below 2^53, or bigint below 2^64) -> [lo, hi] 32-bit halves.
function seedHalves(seed) {
  let s;
  try {
    s = BigInt(seed);
  } catch {
    s = -1n;
  }
  if (s < 0n || s >= 1n << 64n) throw new VitrineError(`seed must be an integer in [0, 2^64), got ${seed}`, -1);
  return [Number(s & 0xffffffffn), Number(s >> 32n)];
}

// A plan's byte counts are exact integers in JavaScript only up to 2^53: a plan beyond that (a
// batch of billions) is refused rather than printed rounded.
function exactBytes(plan, batch) {
  for (const [k, v] of Object.entries(plan))
    if (!Number.isSafeInteger(v))
      throw new VitrineError(
        `plan of batch ${batch}: ${k} of about ${v.toExponential(2)} bytes, more than 2^53: beyond what JavaScript counts exactly (a smaller batch)`,
        -1,
      );
  return plan;
}

/** @internal The engine's model_dims layout as Model.dims names it. */
export const modelDims = (d) => ({
  img: d.imgSize,
  patch: d.patchSize,
  chans: d.inChans,
  dim: d.embedDim,
  depth: d.depth,
  heads: d.numHeads,
  prefix: d.prefixTokens,
  width: d.imgWidth, // the image's width (img: its height; the same for a square image)
  dynamic: d.dynamicImgSize === 1, // timm's dynamic_img_size: images of any size
  pad: d.dynamicImgPad === 1, // dynamic_img_pad: the grid's ceiling
  distilled: d.distilled === 1, // DeiT's dist_token and head_dist
});

// ---- images of another size (timm's dynamic_img_size), DeiT's two heads, timm's own
// forward_intermediates: the engine's sized calls (vtw_forward_sized, vtw_forward_timm_intermediates) ----

// a call's image size: the config's, or opts.height x opts.width (whole numbers)
function callSize(dims, opts) {
  const size = (v, what, dflt) => {
    if (v == null) return dflt;
    if (!Number.isInteger(v) || v < 1 || v > 65536)
      throw new VitrineError(`${what}: ${v} is not an image size in pixels (a whole number in 1..65536)`, -1);
    return v;
  };
  return { height: size(opts.height, 'height', dims.img), width: size(opts.width, 'width', dims.width) };
}
// tokens of a [B, N] mask for images of height x width (timm's PatchEmbed: floored, or the ceiling
// with dynamic_img_pad), prefix tokens included
function tokensOf(dims, height, width) {
  const g = (n) => (dims.pad ? Math.ceil(n / dims.patch) : Math.floor(n / dims.patch));
  return g(height) * g(width) + dims.prefix;
}
// timm's forward_intermediates options as the engine's export takes them: indices (null: every
// block; n: the last n; a list), flags (norm 1, return_prefix_tokens 2, stop_early 4, NCHW 8,
// intermediates_only 16)
function intermediatesArgs(o) {
  const ix = o.indices;
  let list = null,
    lastN = 0;
  if (Number.isInteger(ix)) {
    lastN = ix;
    if (ix === 0) throw new VitrineError('indices: last-n (0) is out of range (1 to depth)', -1);
  } else if (Array.isArray(ix) && ix.length && ix.every(Number.isInteger)) list = Int32Array.from(ix);
  else if (ix != null)
    throw new VitrineError(`indices: ${JSON.stringify(ix)} is not null, a whole number or a list of block indices`, -1);
  const fmt = o.outputFmt ?? 'NCHW';
  if (fmt !== 'NCHW' && fmt !== 'NLC') throw new VitrineError(`outputFmt: '${fmt}' (NCHW or NLC)`, -1);
  for (const k of ['norm', 'returnPrefixTokens', 'stopEarly', 'intermediatesOnly'])
    if (o[k] != null && typeof o[k] !== 'boolean') throw new VitrineError(`${k}: true or false, got ${o[k]}`, -1);
  const flags =
    (o.norm ? 1 : 0) |
    (o.returnPrefixTokens ? 2 : 0) |
    (o.stopEarly ? 4 : 0) |
    (fmt === 'NCHW' ? 8 : 0) |
    (o.intermediatesOnly ? 16 : 0);
  return { list, lastN, flags };
}

export class Model {
  constructor(vt, handle, kind, arch = null) {
    this._vt = vt;
    this._h = handle;
    this.kind = kind;
    /** The timm architecture it was created as (a preset name), or null. */
    this.arch = arch;
    /** The mean / std images given as pixels are normalised with, and where they come from:
     * timm's pretrained_cfg of the architecture, then the pretrained_cfg of weights loaded
     * (initFrom, loadWeights), else ImageNet's (web/formats/pretrained.js). Written into saveSafetensors. */
    this.normalization = resolveNormalization({ arch });
    this._inputs = []; // wasm allocations of the last forward's inputs (kept for backward)
    this._last = null; // { fn, batch, nImages, sizes | train } of the last call
    this.dims = modelDims(vt.withLayouts(['model_dims'], (p) => vt._c.model_dims(handle, p))[0]);
    // where its training steps run (createVitrine's backend: web/runtime/backend.js), opened for it
    this._backend = vt.backend.open(this, vt);
  }
  // wasm memory must hold the newest state (after steps on a device: await sync() first); a
  // writer of the state makes the backend's copy stale
  _wasmState(what, writes = true) {
    this._backend.touch(what, { writes });
  }
  get _c() {
    if (!this._h) throw new VitrineError('model is disposed', -7);
    return this._vt._c;
  }
  _stats(opts = {}) {
    return { mean: opts.mean || this.normalization.mean, std: opts.std || this.normalization.std };
  }
  _fn(name) {
    // a call's number (vt_fn) from its name
    const i = this._vt.manifest.calls.indexOf(name);
    if (i < 0) throw new VitrineError(`unknown call '${name}' (${this._vt.manifest.calls.join(', ')})`, -1);
    return i;
  }

  /** Whether dispose() was called (a step in flight then rejects with an AbortError, kind 'disposed'). */
  get disposed() {
    return !this._h;
  }

  dispose() {
    if (!this._h) return;
    this._backend.free();
    this._freeInputs();
    this._vt._c.model_free(this._h);
    this._h = 0;
  }
  _freeInputs() {
    this._inputs.forEach((p) => this._vt.free(p));
    this._inputs = [];
  }

  /** requires_grad for parameters named `name` or under `name.` ('' = all). Returns the count. */
  setRequiresGrad(name, on = true) {
    const c = this._c;
    this._backend.touch('setRequiresGrad', { writes: true, rerecord: true }); // the gradient layout changes
    return this._vt.check(this._vt.withStrings([name], (n) => c.set_requires_grad(this._h, n, on ? 1 : 0)));
  }
  zeroGrad() {
    this._c.zero_grad(this._h);
  }

  /** 'none' | 'block' | 'every:K' | 'sqrt' | 'budget:BYTES' | 'selective' (Vitrine.policies()). */
  setGradCheckpointing(policy) {
    const c = this._c;
    if (policy === true) policy = 'block';
    if (policy === false || policy == null) policy = 'none';
    this._vt.check(this._vt.withStrings([policy], (p) => c.set_grad_checkpointing(this._h, p)));
  }
  get gradCheckpointing() {
    return this._vt.cstring(this._c.get_grad_checkpointing(this._h));
  }
  /** 'none' and the named policies the engine's budget search tries for this model, in its order
   * (block, selective, sqrt, every:2 ... every:depth). */
  namedPolicies() {
    const vt = this._vt,
      c = this._c,
      out = ['none'],
      w = vt.manifest.limits.policy_text_max,
      t = vt.alloc(w);
    try {
      for (let i = 0; vt.check(c.named_policy(this._h, i, t)); i++) out.push(vt.cstring(t));
    } finally {
      vt.free(t);
    }
    return out;
  }

  /** The parameter table. data / grad are views of the model's memory (Float32Array-like): they
   * follow memory growth and throw a VitrineError once the model is disposed, as do the entries'
   * getters. grad is null for a frozen parameter. */
  params() {
    const c = this._c,
      vt = this._vt,
      h = this._h,
      self = this;
    const n = vt.check(c.param_count(h));
    const out = [];
    for (let i = 0; i < n; i++) {
      const ndim = vt.check(c.param_ndim(h, i));
      const shape = [];
      for (let d = 0; d < ndim; d++) shape.push(vt.check(c.param_dim(h, i, d)));
      const numel = c.param_numel(h, i);
      out.push({
        name: vt.cstring(c.param_name(h, i)),
        shape,
        numel,
        get requiresGrad() {
          return self._c.param_requires_grad(h, i) === 1;
        },
        get data() {
          self._c;
          return liveView(self, () => vt.f32(c.param_data(h, i), numel));
        },
        get grad() {
          if (!(self._c.param_grad(h, i) >>> 0)) return null;
          return liveView(self, () => vt.f32(c.param_grad(h, i) >>> 0, numel)); // the layout moves with requires_grad
        },
      });
    }
    return out;
  }

  // ---- weights ----
  loadSafetensors(bytes, { modelPrefix = '', filePrefix = '' } = {}) {
    const vt = this._vt,
      c = this._c;
    this._wasmState('loadSafetensors');
    const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const p = vt.copyIn(u8);
    try {
      vt.check(
        vt.withStrings([modelPrefix, filePrefix], (mp, fp) => c.load_safetensors(this._h, p, u8.length, mp, fp)),
      );
    } finally {
      vt.free(p);
    }
  }
  /** Starts this model from the weights of a timm VisionTransformer state_dict (head or not),
   * lightly's MaskedVisionTransformerTIMM (vit.*) or MAE / AIM models, or vitrine's own files
   * (encoder, full model, training checkpoint): the key layout is recognised by itself. Returns
   * { source, filePrefix, loaded, skipped, missing, posEmbed, notes: ['tensor [shape]: why', ...] };
   * posEmbed: 'none' | 'sincos_frozen' | 'trainable' | 'learned_now_trainable'. strict: any
   * skipped tensor (or an encoder parameter the file lacks) throws and changes nothing. Call it
   * before the trainer is set up. */
  initFrom(bytes, { strict = false } = {}) {
    const vt = this._vt,
      c = this._c;
    this._wasmState('initFrom');
    const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const meta = readSafetensorsMeta(u8),
      stats = statsFromMeta(meta); // a bad pretrained_cfg: refused before anything loads
    // a NaN or infinity in a weight would only show at the first step, as a gradient norm
    const bad = nonFiniteTensor(u8);
    if (bad) throw new VitrineError(`${bad} holds a NaN or an infinity: not weights to start from`, -5);
    const p = vt.copyIn(u8);
    try {
      let out;
      try {
        out = vt.takeBytes((o) => c.init_from(this._h, p, u8.length, strict ? 1 : 0, o));
      } catch (e) {
        // the engine names the command line's flag; this call's option is `strict`
        if (/^--init-strict: /.test(e.message))
          throw Object.assign(e, { message: e.message.replace(/^--init-strict: /, 'strict: '), field: 'strict' });
        throw e;
      }
      const r = JSON.parse(new TextDecoder().decode(out));
      if (stats) this.normalization = { ...stats, source: "the weights' pretrained_cfg" };
      return {
        source: r.source,
        filePrefix: r.file_prefix,
        loaded: r.loaded,
        skipped: r.skipped,
        missing: r.missing,
        resampled: r.resampled,
        posEmbed: r.pos_embed,
        notes: r.notes,
      };
    } finally {
      vt.free(p);
    }
  }
  /** initFrom for weights wherever they are: bytes, a Blob / File, a URL (fetched, onProgress({
   * loaded, total, name }) as it arrives; signal aborts it; stallSeconds / timeoutSeconds give it up,
   * maxBytes caps it: web/formats/fetch.js) or, in Node, a file path. The
   * normalisation becomes mean / std when given, else the weights' pretrained_cfg, else the
   * architecture's. Returns initFrom's report with { name, normalization }. */
  async loadWeights(
    src,
    {
      strict = false,
      onProgress = null,
      signal = null,
      stallSeconds,
      timeoutSeconds,
      maxBytes,
      mean = null,
      std = null,
    } = {},
  ) {
    const w = await readWeights(src, { onProgress, signal, stallSeconds, timeoutSeconds, maxBytes });
    const report = this.initFrom(w.bytes, { strict });
    this.normalization = resolveNormalization({ mean, std, meta: w.meta, arch: this.arch, what: w.name });
    return { ...report, name: w.name, normalization: this.normalization };
  }
  /** The parameters (those under modelPrefix, named filePrefix + the rest) as safetensors bytes,
   * with the normalisation in the metadata as timm's pretrained_cfg (mean, std, input_size). */
  saveSafetensors({ modelPrefix = '', filePrefix = '' } = {}) {
    const vt = this._vt,
      c = this._c;
    this._wasmState('saveSafetensors', false);
    const bytes = vt.withStrings([modelPrefix, filePrefix], (mp, fp) =>
      vt.takeBytes((out) => c.save_safetensors(this._h, mp, fp, out)),
    );
    const { img, chans } = this.dims;
    return withMetadata(bytes, {
      pretrained_cfg: pretrainedCfg({ ...channelStats(chans, this.normalization), chans, img }),
    });
  }

  // ---- calls ----
  // images -> { data, batch, height, width }: NCHW floats of the config's size or of opts.height x
  // opts.width (the engine refuses another size unless the model has dynamic_img_size), or pixels
  // (ImageData, ImageBitmap) brought to a square config's size
  _images(images, opts) {
    const { height, width } = callSize(this.dims, opts),
      { chans, img } = this.dims;
    if (height === img && width === img) return { ...toNCHW(images, this.dims, this._stats(opts)), height, width };
    const per = chans * height * width;
    if (!(images instanceof Float32Array))
      throw new VitrineError(
        `images of ${height}x${width} pixels: a Float32Array [B, ${chans}, ${height}, ${width}] (NCHW), normalised`,
        -1,
      );
    if (images.length === 0 || images.length % per)
      throw new VitrineError(
        `images: length ${images.length} is not a positive multiple of C*H*W = ${chans}*${height}*${width} = ${per}`,
        -1,
      );
    return { data: images, batch: images.length / per, height, width };
  }
  _run(fn, images, opts = {}) {
    const vt = this._vt,
      c = this._c;
    this._wasmState(fn, opts.needGrad);
    const { data, batch, height, width } = this._images(images, opts);
    const sized = height !== this.dims.img || width !== this.dims.width || !!opts.distilledTraining;
    const idxMask = toIndices('idxMask', opts.idxMask, batch);
    const idxKeep = toIndices('idxKeep', opts.idxKeep, batch);
    const mask = toMask(opts.mask);
    if (mask) {
      // [B, N]: the whole sequence, prefix tokens included; the engine reads B * N bytes
      const N = tokensOf(this.dims, height, width);
      if (mask.length !== batch * N)
        throw new VitrineError(`mask: ${mask.length} values, [batch=${batch}, ${N} tokens] needs ${batch * N}`, -1);
    }
    this._freeInputs();
    this._last = null;
    const put = (arr) => {
      if (!arr) return 0;
      const p = vt.copyIn(arr);
      this._inputs.push(p);
      return p;
    };
    const pImg = put(data),
      pMask = put(idxMask && idxMask.data),
      pKeep = put(idxKeep && idxKeep.data),
      pM = put(mask);
    const needGrad = opts.needGrad ? 1 : 0;
    const rest = [pMask, idxMask ? idxMask.k : 0, pKeep, idxKeep ? idxKeep.k : 0, pM, opts.isCausal === false ? 0 : 1];
    vt.check(
      sized
        ? c.forward_sized(
            this._h,
            this._fn(fn),
            pImg,
            batch,
            height,
            width,
            opts.distilledTraining ? 1 : 0,
            ...rest,
            needGrad,
          )
        : c.forward(this._h, this._fn(fn), pImg, batch, ...rest, needGrad),
    );
    this._last = {
      fn,
      batch,
      nImages: data.length,
      sizes: {
        batch,
        tokensMasked: idxMask ? idxMask.k : 0,
        tokensKept: idxKeep ? idxKeep.k : 0,
        mask: !!mask,
        needGrad: !!needGrad,
        ...(sized ? { height, width, distilledTraining: !!opts.distilledTraining } : {}),
      },
    };
  }
  /** Output i of the last call, copied out: { data: Float32Array, shape }. */
  output(i = 0) {
    const { p, shape } = this._outputRef(i);
    return {
      data: this._vt
        .f32(
          p,
          shape.reduce((a, b) => a * b, 1),
        )
        .slice(),
      shape,
    };
  }
  _outputRef(i) {
    // output i's address and shape
    const vt = this._vt,
      c = this._c,
      s = vt.alloc(24);
    try {
      const p = c.output(this._h, i, s, s + 16) >>> 0;
      if (!p) throw vt.error(-1);
      return { p, shape: Array.from(vt.i32(s, vt.i32(s + 16, 1)[0])) };
    } finally {
      vt.free(s);
    }
  }
  outputCount() {
    return this._c.output_count(this._h);
  }

  /** lightly encode / timm forward_features: [B, T, D]. opts: idxMask, idxKeep, mask, isCausal,
   * needGrad (keep what backward needs), mean, std (for ImageData / ImageBitmap). */
  encode(images, opts) {
    this._run('encode', images, opts);
    return this.output(0);
  }
  /** lightly forward: the pooled [B, D] (no fc_norm, no head). */
  forward(images, opts) {
    this._run('forward', images, opts);
    return this.output(0);
  }
  /** timm VisionTransformer.forward: forward_features, then forward_head (pool -> fc_norm ->
   * head): [B, num_classes] ([B, D] without a head, [B, T, .] with global_pool ''). A DeiT
   * distilled model averages its two heads; with opts.distilledTraining (timm's
   * set_distilled_training(True) in train mode) it returns both, [head, headDist]. opts.height /
   * opts.width: images of another size (dynamic_img_size). */
  timmForward(images, opts = {}) {
    this._run('timm_forward', images, opts);
    return opts.distilledTraining ? [this.output(0), this.output(1)] : this.output(0);
  }
  /** timm's own VisionTransformer.forward_intermediates: { out, intermediates, prefixTokens } --
   * out the final norm of the last block run (absent with intermediatesOnly), intermediates the
   * blocks taken ([B, D, Gh, Gw] with outputFmt 'NCHW', timm's default, or [B, N, D] with 'NLC'),
   * prefixTokens their prefix tokens [B, P, D] (returnPrefixTokens). opts: indices (null every
   * block, n the last n, a list: timm's), norm, returnPrefixTokens, stopEarly, outputFmt,
   * intermediatesOnly; height / width (dynamic_img_size), needGrad, mean / std. */
  timmForwardIntermediates(images, opts = {}) {
    const vt = this._vt,
      c = this._c;
    const { list, lastN, flags } = intermediatesArgs(opts);
    this._wasmState('timm_intermediates', opts.needGrad);
    const { data, batch, height, width } = this._images(images, opts);
    this._freeInputs();
    this._last = null;
    const pImg = vt.copyIn(data);
    this._inputs.push(pImg);
    const pIdx = list ? vt.copyIn(list) : 0;
    try {
      vt.check(
        c.forward_timm_intermediates(
          this._h,
          pImg,
          batch,
          height,
          width,
          pIdx,
          list ? list.length : -1,
          lastN,
          flags,
          opts.needGrad ? 1 : 0,
        ),
      );
    } finally {
      if (pIdx) vt.free(pIdx);
    }
    const sizes = { batch, height, width, needGrad: !!opts.needGrad, intermediates: { list, lastN, flags } };
    this._last = { fn: 'timm_intermediates', batch, nImages: data.length, sizes };
    const outs = Array.from({ length: this.outputCount() }, (_, i) => this.output(i));
    const out = opts.intermediatesOnly ? undefined : outs.shift();
    const n = flags & 2 && this.dims.prefix ? outs.length / 2 : outs.length;
    return {
      ...(out ? { out } : {}),
      intermediates: outs.slice(0, n),
      ...(flags & 2 && this.dims.prefix ? { prefixTokens: outs.slice(n) } : {}),
    };
  }
  /** { out, intermediates: [B, T, D] per block }; opts.norm applies the final norm to each. */
  forwardIntermediates(images, opts = {}) {
    this._run(opts.norm ? 'intermediates_norm' : 'intermediates', images, opts);
    const n = this.outputCount(),
      intermediates = [];
    for (let i = 1; i < n; i++) intermediates.push(this.output(i));
    return { out: this.output(0), intermediates };
  }
  /** MAE / AIM training loss (a number). */
  loss(images, opts) {
    this._run('loss', images, opts);
    return this._c.loss_value(this._h);
  }

  /** Backward of the last call made with needGrad. douts: upstream gradient per output
   * (Float32Array or null; omit for a loss). Parameter gradients accumulate unless
   * paramGrads: false. With inputGrad: true, returns { dimages: Float32Array }. */
  backward({ douts = [], inputGrad = false, paramGrads = true } = {}) {
    const vt = this._vt,
      c = this._c;
    if (!this._last) throw new VitrineError('backward needs a forward (with needGrad) first', -7);
    if (!Array.isArray(douts)) throw new VitrineError('backward: douts must be an array (one entry per output)', -1);
    const nOut = this.outputCount();
    if (douts.length > nOut)
      throw new VitrineError(`backward: ${douts.length} upstream gradients, the call has ${nOut} outputs`, -1);
    douts.forEach((d, i) => {
      // each as long as its output: the engine reads that many floats
      if (d == null) return;
      const want = this._outputRef(i).shape.reduce((a, b) => a * b, 1);
      if (!(d instanceof Float32Array) || d.length !== want)
        throw new VitrineError(
          `backward: douts[${i}] has ${d.length} values${d instanceof Float32Array ? '' : ` (${d.constructor && d.constructor.name})`}, output ${i} has ${want} (a Float32Array)`,
          -1,
        );
    });
    const ptrs = [];
    try {
      const dp = douts.map((d) => {
        if (!d) return 0;
        const p = vt.copyIn(d);
        ptrs.push(p);
        return p;
      });
      const arr = vt.alloc(4 * Math.max(1, dp.length));
      ptrs.push(arr);
      vt.u32(arr, dp.length).set(dp);
      let dimg = 0;
      if (inputGrad) {
        dimg = vt.alloc(4 * this._last.nImages);
        ptrs.push(dimg);
        vt.f32(dimg, this._last.nImages).fill(0);
      }
      vt.check(c.backward(this._h, dp.length ? arr : 0, dp.length, dimg, paramGrads ? 1 : 0));
      return inputGrad ? { dimages: vt.f32(dimg, this._last.nImages).slice() } : {};
    } finally {
      ptrs.forEach((p) => vt.free(p));
    }
  }

  // ---- memory ----
  /** Bytes a call needs, by kind, before anything is allocated. fn: encode | forward |
   * intermediates | intermediates_norm | loss | timm_forward. */
  plan(
    fn = 'encode',
    {
      batch = 1,
      tokensKept = 0,
      tokensMasked = 0,
      mask = false,
      needGrad = true,
      height = null,
      width = null,
      distilledTraining = false,
      intermediates = null,
    } = {},
  ) {
    const vt = this._vt,
      c = this._c,
      f = this._fn(fn);
    const { height: H, width: W } = callSize(this.dims, { height, width });
    const g = needGrad ? 1 : 0,
      m = mask ? 1 : 0;
    const plan = (out) => {
      if (fn === 'timm_intermediates') {
        const { list, lastN, flags } = intermediates || intermediatesArgs({});
        const p = list ? vt.copyIn(list) : 0;
        try {
          return c.plan_timm_intermediates(this._h, batch, H, W, p, list ? list.length : -1, lastN, flags, g, out);
        } finally {
          if (p) vt.free(p);
        }
      }
      return H !== this.dims.img || W !== this.dims.width || distilledTraining
        ? c.plan_sized(this._h, f, batch, H, W, distilledTraining ? 1 : 0, tokensMasked, tokensKept, m, g, out)
        : c.plan(this._h, f, batch, tokensMasked, tokensKept, m, g, out);
    };
    return exactBytes(vt.withLayouts(['plan_bytes'], plan)[0], batch);
  }

  /** The plan of one trainStep(images of `batch`) before anything is allocated, from the engine
   * (vt_plan_train_step): bytes by kind, the tokens an MAE step keeps / masks per image, the FLOPs
   * the policy re-computes, and against `budget` (bytes for the whole plan; 0 = no search): whether
   * it fits, the policy with the least re-computation that fits (`fit`), the policy with the
   * smallest plan (`least`) and the largest batch that fits (`maxBatch`). maskRatio null: the
   * trainer's (or the default); policy null: the model's. The model is not changed. */
  planTrainStep({ batch, maskRatio = null, policy = null, budget = 0 } = {}) {
    const vt = this._vt,
      c = this._c;
    const pol = policy == null ? this.gradCheckpointing : policy;
    const [r, text] = vt.withStrings([pol], (p) =>
      vt.withLayouts(['step_plan', 'step_plan_text'], (out, names) =>
        c.plan_train_step(this._h, batch, maskRatio == null ? -1 : maskRatio, p, budget, out, names),
      ),
    );
    const keys = Object.keys(vt.manifest.layouts.plan_bytes.fields);
    const bytes = (prefix) =>
      Object.fromEntries(keys.map((k) => [k, r[prefix ? prefix + k[0].toUpperCase() + k.slice(1) : k]]));
    exactBytes(bytes(''), batch);
    return {
      ...bytes(''),
      policyMet: r.policyMet === 1,
      tokensKept: r.tokensKept,
      tokensMasked: r.tokensMasked,
      recomputeFlops: r.recomputeFlops,
      fits: r.fits === 1,
      fit: text.fitPolicy ? { policy: text.fitPolicy, ...bytes('fit'), recomputeFlops: r.fitRecomputeFlops } : null,
      least: text.leastPolicy ? { policy: text.leastPolicy, ...bytes('least') } : null,
      maxBatch: r.maxBatch,
    };
  }

  /** Memory by kind: planned (for the last call) and used (measured), plus the wasm linear size
   * (and `gpu`, the GPU bytes held, on the WebGPU backend). */
  memory() {
    const vt = this._vt,
      c = this._c;
    const [arena] = vt.withLayouts(['arena_stats'], (out) => c.arena_stats(this._h, out));
    let params = 0,
      grads = 0,
      planned = null;
    this.params().forEach((p, i) => {
      params += 4 * p.numel;
      if (c.param_grad(this._h, i) >>> 0) grads += 4 * p.numel;
    });
    if (this._last && this._last.train) {
      const { params, grads, optimizer, activations, total } = this.planTrainStep({ batch: this._last.batch });
      planned = { params, grads, optimizer, activations, total };
    } else if (this._last) {
      planned = this.plan(this._last.fn, this._last.sizes);
    }
    return {
      linear: vt.buffer().byteLength,
      planned,
      used: { params, grads, activations: arena.peak },
      arena,
      ...this._backend.memory(),
    };
  }
  /** The last call's activation memory as the engine's arena saw it, one entry per arena event:
   * bytes = arena in use (max = measured peak), live = minus what the backward has finished with
   * (rises through the forward, falls through the backward); backwardStart = where the backward
   * began (-1 if none). */
  activationTimeline() {
    const vt = this._vt,
      c = this._c,
      max = vt.manifest.limits.timeline_max;
    const out = vt.alloc(2 * 8 * max),
      b = vt.alloc(4);
    try {
      const n = vt.check(c.activation_timeline(this._h, out, max, b));
      const all = vt.f64(out, 2 * max);
      return {
        bytes: Array.from(all.subarray(0, n)),
        live: Array.from(all.subarray(max, max + n)),
        backwardStart: vt.i32(b, 1)[0],
      };
    } finally {
      vt.free(out);
      vt.free(b);
    }
  }
  releaseActivations() {
    this._c.release_activations(this._h);
    this._last = null;
  }

  // ---- training (MAE / AIM models, classifiers; src/trainer.c) ----

  /** timm / lightly initialisation for the model's kind, seeded (the same seed gives the same
   * bits everywhere). MAE: xavier Linears, frozen sin-cos pos_embed; see vt_init_weights. */
  initWeights(seed = 0) {
    const [lo, hi] = seedHalves(seed);
    this._wasmState('initWeights');
    this._vt.check(this._c.init_weights(this._h, lo, hi));
    this._last = null;
  }

  /** The engine's default training settings for this model's kind (lightly's benchmarks). */
  trainDefaults() {
    const vt = this._vt,
      k = vt.manifest.kinds.indexOf(this.kind);
    return { ...vt.withLayouts(['train_config'], (out) => this._c.train_config_default(k, out))[0], seed: 0 };
  }

  /** Makes an MAE / AIM model, or a timm classifier (kind timm, num_classes > 0: trainStepLabels),
   * trainable: AdamW state, the seeded mask generator, step 0. Options not given take
   * trainDefaults(); totalSteps 0 = constant lr, else lightly's cosine warmup; labelSmoothing:
   * timm's (classifier). Returns the settings used. */
  trainerInit(options = {}) {
    const vt = this._vt,
      c = this._c,
      t = this.trainDefaults(),
      known = Object.keys(t);
    for (const k of Object.keys(options))
      if (!known.includes(k)) throw new VitrineError(`trainerInit: unknown option '${k}' (${known.join(', ')})`, -1);
    for (const k of known) if (options[k] != null) t[k] = options[k];
    const [lo, hi] = seedHalves(t.seed);
    this._backend.touch('trainerInit', { writes: true, rerecord: true }); // the mask ratio is part of the recording
    vt.withLayouts(['train_config'], (cfg) => c.trainer_init(this._h, cfg, lo, hi), [t]);
    this._last = null;
    this._gradAccum = t.gradAccum;
    return t;
  }

  // one step of c.train_step (labels null) or c.train_step_labels (labels: Int32Array)
  _step(what, images, batch, labels, opts) {
    const vt = this._vt,
      c = this._c,
      x = toNCHW(images, this.dims, this._stats(opts));
    if (batch != null && batch !== x.batch)
      throw new VitrineError(`${what}: batch ${batch} given, the images hold ${x.batch}`, -1);
    if (labels && labels.length !== x.batch)
      throw new VitrineError(`${what}: ${labels.length} labels for ${x.batch} images`, -1);
    this._wasmState(what);
    this._freeInputs();
    this._last = null;
    const pImg = vt.copyIn(x.data);
    this._inputs.push(pImg);
    const pLab = labels ? vt.copyIn(labels) : 0,
      pLoss = vt.alloc(4);
    try {
      vt.check(
        labels ? c.train_step_labels(this._h, pImg, pLab, x.batch, pLoss) : c.train_step(this._h, pImg, x.batch, pLoss),
      );
      // with gradAccum K the engine ran K micro-batches: the last one is what visualize and memory see
      const K = this._gradAccum || 1;
      this._last = { fn: 'loss', batch: x.batch / K, nImages: x.data.length / K, train: true };
      return vt.f32(pLoss, 1)[0];
    } finally {
      vt.free(pLoss);
      vt.free(pLab);
    }
  }
  /** One training step (seeded masks, loss, backward, clipping, AdamW at the scheduled lr) on
   * images: Float32Array NCHW (normalised) or ImageData / ImageBitmap (one or a list, through the
   * pixel pipeline as for forward). `batch`, when given, must match. Returns the loss. A non-finite
   * loss or gradient throws a VitrineError (code 'VT_ERR_NUMERIC') and changes nothing: the last
   * good state is kept. An update that makes a parameter or moment non-finite (AdamW's fused check)
   * throws 'VT_ERR_NUMERIC' having written it: the state is then not good -- saveTrainState and
   * saveSafetensors refuse it, no step runs -- until loadTrainState (or trainerInit): the last state
   * saved is the good one. The step's images stay in wasm memory until the next call, for visualize(). */
  trainStep(images, batch, opts = {}) {
    return this._step('trainStep', images, batch, null, opts);
  }
  /** A classifier's training step: cross-entropy (timm's label smoothing from trainerInit) on
   * labels (Int32Array or array of class indices, one per image), backward, clipping, AdamW.
   * Images as for trainStep. Returns the loss; a non-finite one throws and changes nothing. */
  trainStepLabels(images, labels, opts = {}) {
    return this._step('trainStepLabels', images, null, Int32Array.from(labels), opts);
  }
  /** One training step on the model's backend (createVitrine's backend: web/runtime/backend.js):
   * the engine's trainStep on wasm; on webgpu the recorded step replayed on the GPU (the newest
   * state then stays there until sync()). Returns a promise of the loss.
   * Calls made before the last one settled are queued: each starts when the one before it
   * settles (its images are read then), with the results of calls made one after another.
   * dispose() rejects the step in flight and those queued with an AbortError (kind 'disposed'). */
  trainStepAsync(images, batch, opts = {}) {
    return this._serial('trainStepAsync', () => this._backend.run(images, { batch, labels: null, opts }));
  }
  /** trainStepLabels on the model's backend (as trainStepAsync, queued as it is). */
  trainStepLabelsAsync(images, labels, opts = {}) {
    return this._serial('trainStepLabelsAsync', () =>
      this._backend.run(images, { labels: Int32Array.from(labels), opts }),
    );
  }
  /** After steps on a device: copies the parameters, gradients and AdamW state back into wasm
   * memory, where saving, evaluating and wasm steps read them (nothing to do on wasm). Queued
   * behind the steps in flight, as they are. */
  async sync() {
    await this._serial('sync', () => this._backend.sync());
  }
  // The backend's asynchronous operations one at a time, in call order (a step begun on the
  // engine must end before the next begins); started at once when none is in flight. An operation
  // the model's dispose() overtook rejects saying so, whatever the backend then threw.
  _serial(what, op) {
    const go = async () => {
      if (!this._h) throw new AbortError(`${what}: the model was disposed before the call ran`, 'disposed');
      try {
        return await op();
      } catch (e) {
        if (!this._h && !(e instanceof AbortError))
          throw new AbortError(`${what}: the model was disposed during the call`, 'disposed');
        throw e;
      }
    };
    const p = this._queue ? this._queue.then(go) : go(),
      tail = p.then(
        () => {},
        () => {},
      );
    this._queue = tail;
    tail.then(() => {
      if (this._queue === tail) this._queue = null;
    });
    return p;
  }

  // ---- the step as data, for a backend that replays it elsewhere (web/runtime/backend.js;
  // docs/kernels.md, "Running a step elsewhere") ----

  /** @internal fn() with the model recording for a device (vt_model_set_whole_rows): kernel calls
   * over whole row ranges -- fewer, larger dispatches than the CPU's cache-sized chunks -- and the
   * planner's bytes in that layout; the model's own plans stay the CPU's (set back after). */
  wholeRows(fn) {
    this._vt.check(this._c.model_set_whole_rows(this._h, 1));
    try {
      return fn();
    } finally {
      this._c.model_set_whole_rows(this._h, 0);
    }
  }
  /** @internal The training step of `batch` images (a classifier's with labels) recorded for a
   * device (wholeRows). */
  recordStep({ batch, labels = null }) {
    return this.wholeRows(() => this.traceStep({ batch, labels: labels ? Array.from(labels) : null, json: true }));
  }
  /** @internal Region `name` of the model's state (params, grads, adam_m, adam_v) as a view of wasm
   * memory (fresh: memory may grow), or null when the model has none yet. */
  region(name) {
    const vt = this._vt,
      id = vt.manifest.regions.indexOf(name),
      pb = vt.alloc(8);
    try {
      const p = this._c.model_region(this._h, id, pb) >>> 0,
        n = vt.f64(pb, 1)[0];
      return p ? new Uint8Array(vt.buffer(), p, n) : null;
    } finally {
      vt.free(pb);
    }
  }
  /** @internal One training step whose kernels run elsewhere: the engine checks the images
   * (labels), draws the step's inputs as its own step would (vt_train_step_begin: masks, the
   * scalars region), `run` computes the step and returns the 32 scalar bytes it left, and the
   * engine ends the step (vt_train_step_end: the step counts, or a non-finite one is refused and
   * changes nothing). before(x) runs first (record, upload). Returns the loss. */
  async stepElsewhere(images, { batch = null, labels = null, opts = {} }, { before, run }) {
    const vt = this._vt,
      c = this._c,
      x = toNCHW(images, this.dims, this._stats(opts));
    if (batch != null && batch !== x.batch)
      throw new VitrineError(`trainStepAsync: batch ${batch} given, the images hold ${x.batch}`, -1);
    if (labels && labels.length !== x.batch)
      throw new VitrineError(`trainStepAsync: ${labels.length} labels for ${x.batch} images`, -1);
    const pImg = vt.copyIn(x.data),
      pLab = labels ? vt.copyIn(labels) : 0,
      pIn = vt.alloc(vt.layoutBytes('step_inputs')),
      pSc = vt.alloc(SCALARS);
    let begun = false;
    try {
      await before(x);
      vt.check(c.train_step_begin(this._h, pImg, pLab, x.batch, pIn, pSc));
      begun = true;
      const where = vt.readLayout('step_inputs', pIn),
        inputs = {};
      for (const [r, f] of Object.entries(STEP_INPUTS))
        if (where[f]) inputs[r] = (n) => vt.u8().slice(where[f], where[f] + n);
      const sc = await run({ x, labels, inputs, scalars: vt.u8().slice(pSc, pSc + SCALARS) });
      vt.u8().set(sc, pSc);
      begun = false;
      const loss = vt.f32(pSc, 1)[0];
      const rc = c.train_step_end(this._h, pSc);
      this._last = { fn: 'loss', batch: x.batch, nImages: x.data.length, train: true, elsewhere: true };
      if (rc < 0) throw Object.assign(vt.error(rc), { loss });
      return loss;
    } catch (e) {
      if (begun && this._h) {
        // it failed mid-step: the generator goes back, the step is not counted
        const nf = new Float32Array(SCALARS / 4);
        nf[4] = 1;
        vt.u8().set(new Uint8Array(nf.buffer), pSc);
        c.train_step_end(this._h, pSc);
      }
      throw e;
    } finally {
      vt.free(pImg);
      vt.free(pLab);
      vt.free(pIn);
      vt.free(pSc);
    }
  }

  /** A training step of `batch` images (a classifier's with `labels`), or call 'encode' and its backward,
   * recorded, not run (docs/kernels.md): the engine's summary, or with json its list of kernel calls. */
  traceStep({ batch, call = 'train', labels = null, json = false } = {}) {
    const vt = this._vt,
      c = this._c,
      d = this.dims,
      n = 4 * batch * d.chans * d.img * d.img;
    if (call !== 'train' && call !== 'encode')
      throw new VitrineError(`traceStep: call '${call}' (train or encode)`, -1);
    const img = vt.alloc(n),
      lab = labels ? vt.copyIn(Int32Array.from(labels)) : 0;
    vt.u8().fill(0, img, img + n); // image values are inputs of the list, not part of it
    try {
      const out = vt.takeBytes((o) =>
        c.trace(this._h, call === 'train' ? -1 : this._fn('encode'), img, lab, batch, json ? 1 : 0, o),
      );
      return json ? JSON.parse(new TextDecoder().decode(out)) : new TextDecoder().decode(out);
    } finally {
      vt.free(img);
      vt.free(lab);
    }
  }

  /** Steps done (the AdamW step count; it comes back with loadTrainState). */
  get stepCount() {
    return this._c.train_step_count(this._h);
  }
  /** The learning rate the schedule gives at `step` (default: the next step). */
  lr(step = this.stepCount) {
    return this._c.train_lr(this._h, step);
  }

  /** Everything a resumed run needs (parameters, AdamW m / v, step, mask generator, configs) as
   * safetensors bytes; loadTrainState continues bit for bit. A state holding a NaN or infinity is
   * never saved (VT_ERR_NUMERIC). */
  saveTrainState() {
    this._wasmState('saveTrainState', false);
    return this._vt.takeBytes((out) => this._c.train_state_save(this._h, out));
  }
  /** All or nothing; the model's config must be the saved one (initWeights first, so the same
   * parameters are frozen). Every field of the metadata and every value is checked first: a NaN or
   * infinity, a negative second moment, a generator of zeros are refused by name. */
  loadTrainState(bytes) {
    const vt = this._vt,
      c = this._c;
    const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    this._wasmState('loadTrainState');
    const p = vt.copyIn(u8);
    try {
      vt.check(c.train_state_load(this._h, p, u8.length));
    } finally {
      vt.free(p);
    }
    this._last = null;
    this._gradAccum = JSON.parse(readSafetensorsMeta(u8).train_config).grad_accum ?? 1; // checked by the engine
  }

  /** After a loss() forward or a trainStep(): { masked, recon, shape [B, C, H, W] }, normalised
   * NCHW like the input. masked: MAE's masked patches set to 0 (the mean colour), the input
   * elsewhere (AIM: the input); recon: the predicted patches (de-normalised per patch under
   * norm_pix_loss) over the masked ones, the input elsewhere (AIM: every patch predicted). After
   * trainStep the prediction is the one of the step's forward (parameters before its update). */
  visualize() {
    const vt = this._vt,
      c = this._c;
    if (!this._last || this._last.fn !== 'loss')
      throw new VitrineError('visualize needs a loss forward (loss() or trainStep()) first', -7);
    if (this._last.elsewhere)
      throw new VitrineError(
        `visualize: the last step ran on the ${this._vt.backend.name} backend (its forward stays there); call loss() after sync()`,
        -7,
      );
    const n = this._last.nImages,
      { chans, img } = this.dims;
    const pm = vt.alloc(4 * n),
      pr = vt.alloc(4 * n);
    try {
      vt.check(c.loss_visualize(this._h, pm, pr));
      return {
        masked: vt.f32(pm, n).slice(),
        recon: vt.f32(pr, n).slice(),
        shape: [this._last.batch, chans, img, img],
      };
    } finally {
      vt.free(pm);
      vt.free(pr);
    }
  }
}
