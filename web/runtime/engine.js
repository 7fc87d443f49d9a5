// engine.js: the Vitrine class, one loaded engine. Its functions are the instance's own exports
// (every function wasm/exports.c marks VTW_API); the names it offers (model kinds, calls,
// checkpointing policies, timm presets), its limits and the layout of every result it writes come
// from the engine itself (vtw_manifest), so nothing here counts positions or copies a C list.
// Rules kept everywhere: typed-array views over wasm memory are built fresh for each use (memory
// may grow on any call), pointers are read with `>>> 0`, and an engine failure becomes a
// VitrineError carrying the engine's message and status.
import { VitrineError } from '../errors.js';
import { Model, modelDims } from './model.js';
import { wasmBackend } from './backend.js';
import { loadClassifier } from './classifier.js';

const ELEMENT = { i32: [Int32Array, 4], u32: [Uint32Array, 4], f64: [Float64Array, 8] };
/** snake_case (C) -> camelCase (JS): 'fit_recompute_flops' -> 'fitRecomputeFlops'. */
export const camelCase = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

/** createModel(name, options): the spec of timm's create_model(name, **kwargs), options in camelCase
 * (numClasses -> num_classes) or timm's own names; kind: the model around the ViT (default timm). */
export function timmSpec(name, { kind = 'timm', ...kwargs } = {}) {
  const snake = (s) => s.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());
  const config = Object.fromEntries(
    Object.entries(kwargs)
      .filter(([, v]) => v !== undefined)
      .map(([key, v]) => [snake(key), v]),
  );
  // timm's create_model(name) has a 1000-class (ImageNet) head unless told otherwise; around an
  // MAE / AIM model the head is not used, so only the timm model gets it
  if (kind === 'timm' && !('num_classes' in config)) config.num_classes = 1000;
  return { kind, preset: name, config: Object.keys(config).length ? config : null };
}

export class Vitrine {
  /** low: what web/runtime/loader.js hands on for one build; build: its name (without "-mt"). */
  constructor(low, build) {
    this._low = low;
    this.build = build;
    this._c = low.exports;
    for (const f of ['manifest', 'malloc', 'free', 'last_error'])
      if (typeof this._c[f] !== 'function') throw new Error(`wasm build ${build} does not export vtw_${f}`);
    /** What the engine states about itself: layouts, kinds, calls, policies, presets, limits (vtw_manifest). */
    this.manifest = JSON.parse(this.cstring(this._c.manifest()));
    this.simdKernels = this._c.kernels_simd() === 1;
    this._pool = null;
    this.threaded = false; // the shared-memory (-mt) file is loaded
    this.threadsNote = null;
    /** Where training steps run and why (createVitrine's backend: web/runtime/backend.js). */
    this.backend = wasmBackend('default');
  }

  /** Threads the engine's kernels use: 1 + the pool's workers alive (threadsNote says when fewer
   * than asked for). */
  get threads() {
    return this._pool ? this._pool.live : this._c.threads_max();
  }
  /** Bytes of linear memory the pool's worker stacks take (besides the plan's per-thread scratch). */
  get threadStackBytes() {
    return this._pool ? this._pool.stackBytes : 0;
  }
  /** Stops the pool's workers; the engine goes on with 1 thread. Returns even when a worker has
   * died (it waits a bounded time for each to leave; threadsNote then says so). */
  close() {
    if (this.backend.name !== 'wasm') {
      this.backend.close();
      this.backend = wasmBackend('closed', this.backend.adapter);
    }
    if (!this._pool) return;
    const stuck = this._pool.close();
    this._pool = null;
    if (stuck)
      this.threadsNote = `1 thread: ${stuck} pool worker${stuck === 1 ? '' : 's'} did not stop (dead) and ${stuck === 1 ? 'was' : 'were'} terminated`;
  }
  /** Tests: split even the smallest shapes over the threads (true), or the default rule (false). */
  _splitEverything(on) {
    this._c.threads_set_min_work(on ? 0 : -1);
  }
  /** Tests: chunks of pooled loops each thread has run so far ([caller, worker 1, ...]). */
  _chunksRun() {
    return Array.from({ length: this._c.threads_max() }, (_, t) => this._c.threads_chunks_run(t));
  }

  // ---- memory: fresh views on every use, never kept across a call into wasm. @internal: the
  // shell's own helpers (web/runtime/model.js, a backend's), not declared in vitrine.d.ts ----
  /** @internal The wasm memory's current buffer (replaced when memory grows). */ buffer() {
    return this._low.buffer();
  }
  /** @internal */ u8() {
    return new Uint8Array(this._low.buffer());
  }
  /** @internal */ f32(ptr, n) {
    return new Float32Array(this._low.buffer(), ptr >>> 0, n);
  }
  /** @internal */ f64(ptr, n) {
    return new Float64Array(this._low.buffer(), ptr >>> 0, n);
  }
  /** @internal */ u32(ptr, n) {
    return new Uint32Array(this._low.buffer(), ptr >>> 0, n);
  }
  /** @internal */ i32(ptr, n) {
    return new Int32Array(this._low.buffer(), ptr >>> 0, n);
  }

  /** @internal */ alloc(bytes) {
    const p = this._c.malloc(Math.max(1, bytes)) >>> 0;
    if (!p)
      throw new VitrineError(`out of memory: malloc(${bytes}) failed (wasm memory ${this.u8().length} bytes)`, -2);
    return p;
  }
  /** @internal */ free(p) {
    if (p) this._c.free(p);
  }
  /** @internal */ copyIn(bytes) {
    // a typed array -> a new wasm allocation
    const src = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const p = this.alloc(src.length);
    this.u8().set(src, p);
    return p;
  }
  /** @internal */ cstring(ptr) {
    ptr >>>= 0;
    if (!ptr) return null;
    const u8 = this.u8();
    let end = ptr;
    while (u8[end]) end++;
    return new TextDecoder().decode(u8.slice(ptr, end)); // a copy: decode() refuses shared memory
  }
  /** @internal */ str(s) {
    return this.copyIn(new TextEncoder().encode(String(s) + '\0'));
  }
  /** @internal Runs fn(...ptrs) with C strings made from strs, freed afterwards. */
  withStrings(strs, fn) {
    const ptrs = [];
    try {
      for (const s of strs) ptrs.push(s == null ? 0 : this.str(s));
      return fn(...ptrs);
    } finally {
      ptrs.forEach((p) => this.free(p));
    }
  }
  /** @internal */ error(status) {
    const msg = this.cstring(this._c.last_error()) || 'unknown error';
    return new VitrineError(msg, status);
  }
  /** @internal */ check(rc) {
    if (rc < 0) throw this.error(rc);
    return rc;
  }

  // ---- results laid out by name (vtw_manifest's layouts) ----
  _layout(name) {
    const L = this.manifest.layouts[name];
    if (!L) throw new Error(`the engine describes no layout '${name}'`);
    const width = L.type === 'text' ? this.manifest.limits.policy_text_max : ELEMENT[L.type][1];
    return { ...L, width, bytes: L.size * width };
  }
  /** @internal Bytes of layout `name` (what to allocate for it). */
  layoutBytes(name) {
    return this._layout(name).bytes;
  }
  /** @internal The fields of layout `name` at ptr, by name (camelCase): numbers, or strings for a text layout. */
  readLayout(name, ptr) {
    const L = this._layout(name),
      out = {};
    const view = L.type === 'text' ? null : new ELEMENT[L.type][0](this._low.buffer(), ptr >>> 0, L.size);
    for (const [f, i] of Object.entries(L.fields))
      out[camelCase(f)] = view ? view[i] : this.cstring((ptr >>> 0) + i * L.width) || '';
    return out;
  }
  /** @internal Writes the fields of `values` (camelCase names; every field of the layout) at ptr. */
  writeLayout(name, ptr, values) {
    const L = this._layout(name),
      view = new ELEMENT[L.type][0](this._low.buffer(), ptr >>> 0, L.size);
    for (const [f, i] of Object.entries(L.fields)) {
      const v = values[camelCase(f)];
      if (v == null) throw new Error(`${name}: no value for ${camelCase(f)}`);
      view[i] = Number(v);
    }
  }
  /** @internal Calls fn(...ptrs) with a zeroed array for each layout named (filled from `inputs[i]` when
   * given), checks its status and returns the layouts' fields by name (an array of objects). */
  withLayouts(names, fn, inputs = []) {
    const ptrs = [];
    try {
      names.forEach((n, i) => {
        const L = this._layout(n),
          p = this.alloc(L.bytes);
        ptrs.push(p);
        this.u8().fill(0, p, p + L.bytes);
        if (inputs[i]) this.writeLayout(n, p, inputs[i]);
      });
      this.check(fn(...ptrs));
      return names.map((n, i) => this.readLayout(n, ptrs[i]));
    } finally {
      ptrs.forEach((p) => this.free(p));
    }
  }
  /** @internal Bytes the engine allocated and handed out through a bytes_out layout (fn(ptr)), copied, then freed. */
  takeBytes(fn) {
    const [{ ptr, len }] = this.withLayouts(['bytes_out'], fn);
    const bytes = this.u8().slice(ptr, ptr + len);
    this.free(ptr);
    return bytes;
  }

  /** The timm preset names the engine knows (vit_tiny_patch16_224, ...). */
  presets() {
    return [...this.manifest.presets];
  }
  /** The checkpointing policies as the engine reads them: none, block, every:K, sqrt, budget:BYTES,
   * selective (Model.namedPolicies() gives the concrete ones a model's budget search tries). */
  policies() {
    return [...this.manifest.policies];
  }

  /** A byte count as the policy budget:BYTES reads it ('300MB' -> 300000000, '256MiB', ...). */
  parseBytes(text) {
    return this.check(this.withStrings([text], (t) => this._c.parse_bytes(t)));
  }

  // fn(kind index, preset pointer, config JSON pointer, its bytes) for a spec, the strings freed
  // after. A preset and a config together: for MAE / AIM the preset's encoder under the config's
  // decoder or head (put together here: config.encoder's kwargs over the preset's encoder, as
  // timm's create_model(name, img_size=...)); for the encoder kinds the config's timm kwargs over the
  // preset's encoder (the engine does it, as timm's create_model(name, **kwargs)).
  _withSpec({ preset, config, kind = 'timm' } = {}, fn) {
    const k = this.manifest.kinds.indexOf(kind);
    if (k < 0) throw new VitrineError(`unknown model kind '${kind}' (${this.manifest.kinds.join(', ')})`, -1);
    if (preset && config != null && (kind === 'mae' || kind === 'aim')) {
      const enc = Object.hasOwn(this.manifest.preset_encoders, preset) ? this.manifest.preset_encoders[preset] : null;
      if (!enc) throw new VitrineError(`unknown preset '${preset}' (${this.manifest.presets.join(', ')})`, -1);
      const c = typeof config === 'string' ? JSON.parse(config) : config;
      if (c.encoder != null && (typeof c.encoder !== 'object' || Array.isArray(c.encoder)))
        throw new VitrineError('createModel: config.encoder must be an object of timm kwargs', -1);
      // the config's encoder kwargs over the preset's encoder (timm's create_model(name, img_size=...))
      return this._withSpec({ kind, config: { ...c, encoder: { ...enc, ...c.encoder } } }, fn);
    }
    const json = config == null ? null : typeof config === 'string' ? config : JSON.stringify(config);
    const bytes = json == null ? 0 : new TextEncoder().encode(json).length;
    return this.withStrings([preset || '', json], (p, j) => fn(k, p, j, bytes));
  }

  /** createModel({ preset, config, kind }): kind timm | lightly | causal | mae | aim (default
   * timm); a timm preset name, a config (object or JSON text; MAE/AIM: {encoder, ...}), or both:
   * the preset's encoder under the config's MAE decoder or AIM head, or (other kinds) the preset
   * with the config's timm kwargs over its encoder.
   * createModel(name, { numClasses, imgSize, patchSize, inChans, globalPool, kind, ...timm kwargs }):
   * timm's create_model(name, num_classes=..., img_size=...) for a timm preset name. */
  createModel(spec = {}, options = {}) {
    if (typeof spec === 'string') return this.createModel(timmSpec(spec, options));
    const h = this.check(this._withSpec(spec, (k, p, j, n) => this._c.model_create(k, p, j, n)));
    return new Model(this, h, spec.kind || 'timm', spec.preset || null);
  }

  /** A classifier reopened (a classify run's weights: bytes, a File / Blob, a URL, a path in
   * Node, or the finished run): Promise<Classifier>, whose predict(images, { top }) takes every
   * image source a page has (web/runtime/classifier.js). options: { onProgress, signal }. */
  loadClassifier(source, options = {}) {
    return loadClassifier(this, source, options);
  }

  /** The dims createModel(spec) would give the model ({ img, patch, chans, dim, depth, heads,
   * prefix }), from the spec alone: checked as createModel checks it, nothing allocated -- a spec
   * read from a file is checked before any data are read at its size. */
  checkModel(spec = {}) {
    return modelDims(
      this._withSpec(spec, (k, p, j, n) =>
        this.withLayouts(['model_dims'], (out) => this._c.model_check(k, p, j, n, out)),
      )[0],
    );
  }

  /** Checks the metadata of training-state bytes (saveTrainState's format: format, kind,
   * model_config, train_config, step, rng, the CRC-32 of every tensor) with no model, as
   * loadTrainState checks them first; a VitrineError names the field. For a caller that reads a
   * checkpoint before it makes anything from it. */
  checkTrainState(bytes) {
    const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes),
      p = this.copyIn(u8);
    try {
      this.check(this._c.train_state_check(p, u8.length));
    } finally {
      this.free(p);
    }
  }

  /** Runs a parity file (docs/parity-format.md) through the engine's parity harness. Returns its
   * result; `json` holds the result as the harness wrote it (what the CLIs print), with `file` in
   * it when given; with dump, `dump` holds the safetensors bytes of what the engine computed.
   * readError: the file could not be read (bytes are ignored): a failed result saying so. */
  parity(bytes, { policy = null, dump = false, file = null, readError = null } = {}) {
    const u8 = bytes == null ? new Uint8Array(0) : bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const p = this.copyIn(u8),
      L = this._layout('parity_out'),
      out = this.alloc(L.bytes);
    try {
      const rc = this.withStrings([policy || '', file || '', readError || ''], (pol, f, re) =>
        this._c.parity_run(p, u8.byteLength, pol, dump ? 1 : 0, f, re, out),
      );
      return this._parityResult(rc, out);
    } finally {
      this.free(p);
      this.free(out);
    }
  }
  /** @internal A parity_out layout at out (the harness's JSON, a dump) as a result; frees both. */
  _parityResult(rc, out) {
    const { json: jp, jsonLen, dump: dp, dumpLen } = this.readLayout('parity_out', out);
    const json = jp ? new TextDecoder().decode(this.u8().slice(jp, jp + jsonLen)) : null;
    const result = json
      ? JSON.parse(json)
      : { pass: false, status: rc, error: this.cstring(this._c.last_error()), tensors: [] };
    result.json = json;
    if (dp) result.dump = this.u8().slice(dp, dp + dumpLen);
    this.free(jp);
    this.free(dp);
    return result;
  }

  /** @internal A dump of what a backend computed for parity file `fileBytes` (f32 safetensors of
   * the --dump layout) judged by the engine's harness as it judges its own (vt_parity_check). */
  parityCheck(fileBytes, dumpBytes, file = null) {
    const p = this.copyIn(fileBytes),
      q = this.copyIn(dumpBytes),
      out = this.alloc(this._layout('parity_out').bytes);
    try {
      const rc = this.withStrings([file || ''], (f) =>
        this._c.parity_check(p, fileBytes.byteLength, q, dumpBytes.byteLength, f, out),
      );
      return this._parityResult(rc, out);
    } finally {
      this.free(p);
      this.free(q);
      this.free(out);
    }
  }
  /** @internal The harness's job of a parity file (its model and inputs made, the call recorded
   * twice: forward, forward + backward) for a backend that computes it elsewhere: a ParityJob. */
  openParityJob(bytes, policy = null) {
    return new ParityJob(this, bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes), policy);
  }

  /** The wasm linear memory, in bytes. */
  memory() {
    return { linear: this._low.buffer().byteLength };
  }
}

/** @internal A parity file's job in the engine's harness (harness/parity.h), for a backend that
 * replays its two recordings (web/webgpu/parity.js). close() frees it. */
class ParityJob {
  constructor(vt, u8, policy) {
    this.vt = vt;
    this.p = vt.copyIn(u8);
    const h = vt.withStrings([policy || ''], (pol) => vt._c.parity_open(this.p, u8.byteLength, pol));
    if (h < 0) {
      vt.free(this.p);
      throw vt.error(h);
    }
    this.h = h;
  }
  /** The call recorded for a device (whole row ranges): [forward only, forward + backward]. */
  record() {
    const vt = this.vt,
      c = vt._c,
      h = this.h;
    vt.check(c.model_set_whole_rows(h, 1));
    let a, b;
    try {
      [a, b] = vt.withLayouts(['bytes_out', 'bytes_out'], (x, y) => c.parity_record(h, x, y));
    } finally {
      c.model_set_whole_rows(h, 0);
    }
    return [a, b].map((o) => {
      const t = JSON.parse(new TextDecoder().decode(vt.u8().slice(o.ptr, o.ptr + o.len)));
      vt.free(o.ptr);
      return t;
    });
  }
  /** Region r of the job's model (params, grads) as a view of wasm memory, or null. */
  region(r) {
    const vt = this.vt,
      pb = vt.alloc(8);
    try {
      const ptr = vt._c.model_region(this.h, vt.manifest.regions.indexOf(r), pb) >>> 0;
      return ptr ? new Uint8Array(vt.buffer(), ptr, vt.f64(pb, 1)[0]) : null;
    } finally {
      vt.free(pb);
    }
  }
  /** The first `bytes` of input region r of recording `which` (0: forward, 1: with backward), or null. */
  input(which, r, bytes) {
    const vt = this.vt,
      ptr = vt._c.parity_input(this.h, which, vt.manifest.regions.indexOf(r)) >>> 0;
    return ptr ? vt.u8().slice(ptr, ptr + bytes) : null;
  }
  /** Each trainable parameter's gradient: { name, shape, at, numel } (at: its float offset in the grads region). */
  gradients() {
    const vt = this.vt,
      c = vt._c,
      h = this.h,
      base = this.region('grads').byteOffset,
      out = [];
    for (let i = 0, n = vt.check(c.param_count(h)); i < n; i++) {
      const g = c.param_grad(h, i) >>> 0;
      if (!g) continue;
      out.push({
        name: vt.cstring(c.param_name(h, i)),
        shape: Array.from({ length: c.param_ndim(h, i) }, (_, d) => c.param_dim(h, i, d)),
        at: (g - base) / 4,
        numel: c.param_numel(h, i),
      });
    }
    return out;
  }
  /** Output i's name in the file, as the harness names what it computes (loss, out, out_dist,
   * intermediates.<k>, intermediates_prefix.<k>). */
  outputName(i) {
    const p = this.vt._c.parity_output_name(this.h, i) >>> 0;
    if (!p) throw new VitrineError(`parity job: no output ${i}`, -1);
    return this.vt.cstring(p);
  }
  /** The job's model dims (as Model.dims). */
  get dims() {
    return modelDims(this.vt.withLayouts(['model_dims'], (p) => this.vt._c.model_dims(this.h, p))[0]);
  }
  close() {
    if (this.h > 0) this.vt._c.parity_close(this.h);
    this.h = 0;
    this.vt.free(this.p);
  }
}
