// vitrine.d.ts: the types of web/vitrine.js, written by hand and checked against the JavaScript by
// tests/node/types.test.mjs (declarations generated from the JS by tsc: every export and every
// public member of Vitrine, Model, VitrineError and WasiExit must be declared here, and nothing
// more; the builds must be wasm/builds.json's).

/** The builds of wasm/builds.json, or 'wasi'. '-mt': the shared-memory file of a build, even at 1
 * thread (threads > 1 picks it by itself). */
export type WasmBuild =
  'relaxed' | 'simd' | 'scalar' | 'wasi' | 'wasi-simd' | 'wasi-scalar' | 'relaxed-mt' | 'simd-mt' | 'wasi-simd-mt';
/** A build as Vitrine.build names it (without "-mt"). */
export type BuildName = Exclude<WasmBuild, 'wasi' | `${string}-mt`>;
export type ModelKind = 'timm' | 'lightly' | 'causal' | 'mae' | 'aim';
export type CallName =
  'encode' | 'forward' | 'timm_forward' | 'intermediates' | 'intermediates_norm' | 'loss' | 'timm_intermediates';
/** 'none' | 'block' | 'every:K' | 'sqrt' | 'budget:BYTES' | 'selective' (true = 'block', false = 'none'). */
export type Policy = string | boolean;

export interface CreateOptions {
  /** Default: 'relaxed' (SIMD128 + fused multiply-add; other bits than 'simd') where relaxed SIMD
   * validates, else 'simd' where WebAssembly SIMD128 validates, else 'scalar'. WASI builds: Node only. */
  wasm?: WasmBuild;
  /** Where to fetch the build's .wasm from, e.g. (file) => '/static/' + file. `file` is the file's
   * name ('vitrine-simd.wasm'), `url` where it is by default (beside this module, or where a bundler
   * put it). A string is resolved against the page (in a browser) or the working directory (Node). */
  locateFile?: (file: string, url: URL) => string | URL | Promise<string | URL>;
  /** A directory with both the glue (vitrine-*.mjs) and the .wasm of a build made elsewhere; its glue
   * is imported at run time (not followed by bundlers). Node also reads $VITRINE_WASM_DIR, $VITRINE_BUILD/wasm.
   * Default: the files of the package, build/wasm/ beside web/vitrine.js. */
  wasmDir?: string | URL;
  /** Kernel threads, 1..64. Default: every core the host reports (navigator.hardwareConcurrency,
   * os.availableParallelism()). More than 1 needs SharedArrayBuffer (in a browser: a
   * cross-origin-isolated page, COOP same-origin + COEP require-corp) and a SIMD build; where
   * that is missing (or the workers fail to start) the engine runs on 1 thread and `threadsNote`
   * says why. Every count gives the same bits. */
  threads?: number;
  /** Where training steps run: 'wasm' (default); 'webgpu' (the engine's recorded step replayed on a
   * WebGPU adapter, software ones included; rejects with a GpuError when there is none); 'auto'
   * (WebGPU on a hardware adapter, else wasm). `Vitrine.backend` says which and why. */
  backend?: 'wasm' | 'webgpu' | 'auto';
  /** The adapter request: { swiftshader: true } in Node uses Chromium's SwiftShader (no GPU needed);
   * limits lowers max* device limits on purpose (e.g. { maxBufferSize: 268435456 }). */
  gpu?: {
    swiftshader?: boolean;
    powerPreference?: 'high-performance' | 'low-power';
    limits?: Partial<Record<'maxBufferSize' | 'maxStorageBufferBindingSize', number>>;
  };
}

/** The adapter a WebGPU backend runs on. */
export interface GpuAdapterInfo {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  software: boolean;
}
/** Where training steps run, and why (createVitrine's backend option). */
/** Where training steps run (web/runtime/backend.js: the operations every backend implements). */
export interface Backend {
  name: 'wasm' | 'webgpu';
  reason: string;
  adapter: GpuAdapterInfo | null;
  /** what it can step: the micro-batches one step may sum (gradAccumWhy: why no more), whether the
   * newest state stays on the device between steps, the device's buffer limits (null on wasm) */
  limits: {
    gradAccum: number;
    gradAccumWhy: string | null;
    stateOnDevice: boolean;
    maxBufferSize: number | null;
    maxStorageBufferBindingSize: number | null;
  };
}

export function createVitrine(options?: CreateOptions): Promise<Vitrine>;
/** The builds createVitrine can load (wasm/builds.json) and the files of each (in build/wasm/ of the package). */
export const WASM_BUILDS: Readonly<
  Record<
    Exclude<WasmBuild, 'wasi'>,
    {
      readonly runtime: 'emscripten' | 'wasi' | 'reactor';
      readonly simd: boolean;
      /** relaxed SIMD's fused multiply-add */
      readonly relaxed: boolean;
      /** a shared-memory ("-mt") file, for the thread pool */
      readonly threads: boolean;
      /** this build's "-mt" twin, if it has one */
      readonly mt: Exclude<WasmBuild, 'wasi'> | null;
      /** runs in a browser (the WASI builds: Node only) */
      readonly browser: boolean;
      readonly files: readonly string[];
    }
  >
>;
export function simdSupported(): boolean;
/** WebAssembly.validate of a tiny module using f32x4.relaxed_madd. */
export function relaxedSimdSupported(): boolean;
/** Node 20: sets V8's --experimental-wasm-relaxed-simd (before the first compile); resolves to relaxedSimdSupported(). */
export function enableNodeRelaxedSimd(): Promise<boolean>;
/** Thrown by the WASI shim when the module calls proc_exit. */
export class WasiExit extends Error {
  readonly code: number;
}
/** vitrine.js's own WASI preview1 imports for clang-built reactors (no node:wasi; browser and Node). */
// Structural stand-ins for WebAssembly's types: a Node project's lib (es2022 + @types/node) has no
// WebAssembly namespace, and this file must check there too (tests/package).
type WasmMemory = { readonly buffer: ArrayBufferLike; grow(delta: number): number };
type WasmModule = object;
type WasmInstance = { readonly exports: Record<string, unknown> };
type WasmImports = Record<string, Record<string, unknown>>;
export function wasiShim(
  getMemory: () => WasmMemory,
  module?: WasmModule | null,
): { wasi_snapshot_preview1: Record<string, Function> };
/** Compile + instantiate a clang-built reactor from dir/file with wasiShim (+ imports), run _initialize. */
export function loadReactor(
  dir: string | URL,
  file: string,
  options?: { imports?: WasmImports; memory?: WasmMemory | null },
): Promise<{
  fn(name: string): Function | undefined;
  buffer(): ArrayBufferLike;
  instance: WasmInstance;
  module: WasmModule;
}>;

/** The names of the engine's statuses (src/status.h), VitrineError.code. */
export type StatusCode =
  | 'VT_ERR_ARG'
  | 'VT_ERR_NOMEM'
  | 'VT_ERR_FORMAT'
  | 'VT_ERR_MISMATCH'
  | 'VT_ERR_NUMERIC'
  | 'VT_ERR_BUDGET'
  | 'VT_ERR_STATE'
  | 'VT_ERR_IO'
  | 'VT_ERR_UNKNOWN';
/** vt_status (negative) -> its name. */
export const STATUS_CODES: Readonly<Record<number, StatusCode>>;

/** What every engine failure and every bad argument found in JS throws. */
export class VitrineError extends Error {
  constructor(message: string, status: number);
  /** The engine's negative vt_status (errors found in JS: the status the engine would give). */
  status: number;
  /** The status's name in src/status.h, e.g. 'VT_ERR_ARG' (VT_ERR_UNKNOWN for none of them). */
  code: StatusCode;
}
/** What a run or an operation that its owner ended rejects with (not a failure): kind 'disposed'
 * (dispose() while it ran or waited: Trainer.done, Model.trainStepAsync) or 'aborted'. status -7
 * (VT_ERR_STATE); name 'AbortError', as the platform's aborted operations. */
export class AbortError extends VitrineError {
  constructor(message: string, kind?: 'aborted' | 'disposed');
  name: 'AbortError';
  kind: 'aborted' | 'disposed';
}

export interface Tensor {
  data: Float32Array;
  shape: number[];
}

/** torch32_err: PyTorch's own float32 error; null when the file has no torch32/ tensor for it. */
export interface ParityTensor {
  name: string;
  err: number;
  torch32_err: number | null;
}
/** The parity harness's result (harness/parity.h). */
export interface ParityResult {
  /** The file name, when one was given. */
  file?: string;
  pass: boolean;
  /** 0 when the file ran (pass or fail), else the engine's status for why it could not. */
  status: number;
  module: string;
  fn: string;
  error?: string;
  worst?: string;
  err?: number;
  torch32_err?: number | null;
  /** null when no tensor of the file has a PyTorch float32 result */
  max_torch32_err: number | null;
  tensors: ParityTensor[];
  /** This result as the harness wrote it (the CLIs print it as is); null if it could not be written. */
  json: string | null;
  /** safetensors bytes of what the engine computed (with dump: true). */
  dump?: Uint8Array;
}

export interface PlanBytes {
  params: number;
  grads: number;
  optimizer: number;
  activations: number;
  total: number;
}
/** A recorded step (docs/kernels.md: format vitrine-trace/1). */
export interface TraceList {
  format: 'vitrine-trace/1';
  what: string;
  kernels: string[];
  regions: Record<string, number>;
  arena_planned: number;
  chains: { name: string; depth: number; segment: number; threads: number; store: string[] }[];
  entries: Record<string, unknown>[];
}
/** One training step's plan (vt_plan_train_step). */
export interface TrainStepPlan extends PlanBytes {
  /** false only for a budget:BYTES policy no layout meets (the bytes are then least's) */
  policyMet: boolean;
  /** per image: MAE's kept / masked tokens (the engine's rule); AIM: every token, 0 */
  tokensKept: number;
  tokensMasked: number;
  /** forward flops re-computed during the backward under the policy */
  recomputeFlops: number;
  /** against the budget given (false without one) */
  fits: boolean;
  /** the least re-computation whose plan fits the budget (null: none, or no budget) */
  fit: (PlanBytes & { policy: string; recomputeFlops: number }) | null;
  /** the policy whose plan is smallest (null without a budget) */
  least: (PlanBytes & { policy: string }) | null;
  /** the largest batch up to the one asked that fits under some policy (0: none) */
  maxBatch: number;
}

/** What the engine states about itself (vtw_manifest in wasm/exports.c). */
export interface EngineManifest {
  /** The results the engine writes, laid out by name: { type, size, fields: { name: index } }. */
  readonly layouts: Readonly<
    Record<
      string,
      {
        readonly type: 'i32' | 'u32' | 'f64' | 'text';
        readonly size: number;
        readonly fields: Readonly<Record<string, number>>;
      }
    >
  >;
  readonly kinds: readonly ModelKind[];
  readonly calls: readonly CallName[];
  readonly policies: readonly string[];
  readonly presets: readonly string[];
  /** Each preset's encoder as timm kwargs (createModel with a preset and a config uses it). */
  readonly preset_encoders: Readonly<
    Record<
      string,
      {
        readonly img_size: number;
        readonly patch_size: number;
        readonly in_chans: number;
        readonly embed_dim: number;
        readonly depth: number;
        readonly num_heads: number;
        readonly mlp_ratio: number;
      }
    >
  >;
  readonly limits: { readonly policy_text_max: number; readonly timeline_max: number; readonly max_models: number };
}

export class Vitrine {
  readonly build: BuildName;
  /** What the engine states about itself: result layouts, model kinds, calls, policies, presets, limits. */
  readonly manifest: EngineManifest;
  /** This build has the SIMD128 kernels (not only -msimd128). */
  readonly simdKernels: boolean;
  /** Threads the kernels use (the caller + pool workers alive). */
  readonly threads: number;
  /** The shared-memory (-mt) file is loaded. */
  readonly threaded: boolean;
  /** Why fewer threads than asked for (e.g. '1 thread: the page is not cross-origin isolated ...',
   * '2 threads: pool worker 1 stopped (exit code 1)'), else null. */
  readonly threadsNote: string | null;
  /** Linear-memory bytes of the pool workers' stacks (the per-thread attention scratch is in each plan's activations). */
  readonly threadStackBytes: number;
  /** Where training steps run (createVitrine's backend) and why. */
  backend: Backend;
  /** Stops the pool's workers; the engine goes on with 1 thread. Returns even when a worker died
   * unseen (a bounded wait; threadsNote then says so). */
  close(): void;
  /** The timm preset names the engine knows. */
  presets(): string[];
  /** The checkpointing policies as the engine reads them: 'none', 'block', 'every:K', 'sqrt', 'budget:BYTES', 'selective'. */
  policies(): string[];
  /** A byte count as budget:BYTES reads it ('300MB' -> 300000000, '256MiB'); throws a VitrineError otherwise. */
  parseBytes(text: string): number;
  /** kind (default timm) with a timm preset name, a config, or both: the preset's encoder under the
   * config's MAE decoder / AIM head (kind mae / aim), else the config's timm kwargs over the preset. */
  createModel(options: { preset?: string; config?: object | string; kind?: ModelKind }): Model;
  /** timm's create_model(name, num_classes=..., img_size=...): a timm architecture the engine knows
   * (vit_tiny_patch16_224, ...) with timm kwargs in camelCase or timm's own names; as in timm, a
   * 1000-class head unless numClasses says otherwise (0: none). */
  createModel(
    name: string,
    options?: {
      numClasses?: number;
      imgSize?: number;
      patchSize?: number;
      inChans?: number;
      globalPool?: string;
      kind?: ModelKind;
      [kwarg: string]: unknown;
    },
  ): Model;
  /** A classifier reopened: a classify run's weights (train()'s result.weights, `vitrine train
   * --objective classify`'s classifier.safetensors) as bytes, a File / Blob, a URL, a path in Node,
   * or the run itself (a Trainer or its result, after dispose() too). Its metadata is checked
   * before anything is made from it. */
  loadClassifier(
    source: WeightsSource | Trainer | TrainResult,
    options?: { onProgress?: (p: LoadProgress) => void; signal?: AbortSignalLike },
  ): Promise<Classifier>;
  /** The dims createModel(options) would give the model, from the spec alone: checked as createModel
   * checks it (a VitrineError otherwise), nothing allocated. */
  checkModel(options: { preset?: string; config?: object | string; kind?: ModelKind }): ModelDims;
  /** Checks the metadata of training-state bytes (format, kind, model_config, train_config, step,
   * rng, the tensors' CRC-32s) with no model, as Model.loadTrainState checks them first; a
   * VitrineError names the field. */
  checkTrainState(bytes: Uint8Array | ArrayBuffer): void;
  /** readError: the file could not be read (bytes are ignored); the result says so. */
  parity(
    bytes: Uint8Array | ArrayBuffer | null,
    options?: { policy?: string | null; dump?: boolean; file?: string | null; readError?: string | null },
  ): ParityResult;
  /** Size of the wasm linear memory in bytes. */
  memory(): { linear: number };
}

/** An ImageData, or anything of its shape: RGBA bytes, width x height. (Types by shape, here and
 * below, so that they compile without TypeScript's DOM lib, e.g. in a Node project.) */
export interface ImageDataLike {
  readonly width: number;
  readonly height: number;
  readonly data: Uint8ClampedArray | Uint8Array;
}
/** An ImageBitmap (browser only: its pixels read through a canvas, then the pixel pipeline). */
export interface ImageBitmapLike {
  readonly width: number;
  readonly height: number;
  close(): void;
}
/** ImageBitmap of any size or ImageData of the model's size (one or an array; through the pixel
 * pipeline: shorter side resized to the model's size, centre crop, its channels, normalised with
 * mean / std) or Float32Array NCHW (taken as it is). */
export type Images = Float32Array | ImageDataLike | ImageBitmapLike | Array<ImageDataLike | ImageBitmapLike>;
/** Any image a page or a worker holds, by shape: a File / Blob (BlobLike), an ImageBitmap, ImageData,
 * an <img>, a <canvas>, an OffscreenCanvas, a <video> (its current frame) or a VideoFrame. */
export type ImageSource =
  | ImageDataLike
  | ImageBitmapLike
  | { readonly size: number; readonly type: string; arrayBuffer(): Promise<ArrayBuffer> }
  | { readonly naturalWidth: number; readonly naturalHeight: number }
  | { readonly videoWidth: number; readonly videoHeight: number }
  | { readonly displayWidth: number; readonly displayHeight: number }
  | { readonly width: number; readonly height: number; getContext(id: '2d'): unknown };
/** [B, K] indices over the full token sequence (0 = class token), flat or nested. */
export type Indices = BigInt64Array | ArrayLike<number | bigint> | Array<Array<number | bigint>>;

export interface CallOptions {
  idxMask?: Indices;
  idxKeep?: Indices;
  /** lightly: [B, L] True = replace by the mask token; causal / AIM: [B, N] True = causal part. */
  mask?: ArrayLike<number | boolean> | Array<Array<number | boolean>>;
  /** causal / AIM: apply the causal part of mask (default true). */
  isCausal?: boolean;
  /** Keep what backward needs (per the checkpointing policy). Default false. */
  needGrad?: boolean;
  /** For ImageData / ImageBitmap input; default ImageNet's. */
  mean?: number[];
  std?: number[];
  /** Images of another size than the model's (a Float32Array [B, C, height, width]): timm's
   * dynamic_img_size models take any size (pos_embed resampled as timm does); others refuse it. */
  height?: number;
  width?: number;
}

/** timm's VisionTransformer.forward_intermediates keyword arguments. */
export interface TimmIntermediatesOptions extends Pick<CallOptions, 'height' | 'width' | 'needGrad' | 'mean' | 'std'> {
  /** null: every block; n: the last n; a list: those blocks (negative from the end). */
  indices?: number | number[] | null;
  /** timm's final norm on each (an identity with fc_norm or final_norm false). */
  norm?: boolean;
  returnPrefixTokens?: boolean;
  stopEarly?: boolean;
  /** 'NCHW' ([B, D, Gh, Gw], timm's default) or 'NLC' ([B, N, D]); prefix tokens split off either way. */
  outputFmt?: 'NCHW' | 'NLC';
  intermediatesOnly?: boolean;
}

export interface Param {
  readonly name: string;
  readonly shape: number[];
  readonly numel: number;
  readonly requiresGrad: boolean;
  /** A fresh view on each access: read it right away, never keep it across another call. */
  readonly data: Float32Array;
  readonly grad: Float32Array | null;
}

export interface ModelMemory {
  linear: number;
  /** The plan of the last call (null before any call). */
  planned: PlanBytes | null;
  used: { params: number; grads: number; activations: number };
  arena: { planned: number; peak: number; capacity: number };
  /** GPU bytes held (the WebGPU backend only). */
  gpu?: number;
}

/** A model's image size, patch size, channels, width, depth, heads and prefix tokens ([CLS] + registers). */
export interface ModelDims {
  img: number;
  patch: number;
  chans: number;
  dim: number;
  depth: number;
  heads: number;
  prefix: number;
  /** The image's width (img is its height; the same for a square image). */
  width: number;
  /** timm's dynamic_img_size / dynamic_img_pad. */
  dynamic: boolean;
  pad: boolean;
  /** DeiT's distilled model (dist_token, head_dist). */
  distilled: boolean;
}

/** The mean / std pixels are normalised with, and where they come from. */
export interface Normalization {
  mean: number[];
  std: number[];
  source?: string;
}

export class Model {
  readonly kind: ModelKind;
  /** The timm architecture it was created as (a preset name), or null. */
  readonly arch: string | null;
  /** mean / std for images given as pixels (ImageData, ImageBitmap): timm's pretrained_cfg of the
   * architecture, then that of weights loaded, else ImageNet's; saveSafetensors writes it as pretrained_cfg. */
  normalization: Normalization;
  readonly dims: ModelDims;
  encode(images: Images, options?: CallOptions): Tensor;
  /** timm VisionTransformer.forward: pool -> fc_norm -> head on forward_features (DeiT distilled:
   * the two heads averaged). */
  timmForward(images: Images, options?: CallOptions & { distilledTraining?: false }): Tensor;
  /** DeiT distilled in timm's distilled training mode: [head, headDist]. */
  timmForward(images: Images, options: CallOptions & { distilledTraining: true }): [Tensor, Tensor];
  /** timm's own forward_intermediates: out (absent with intermediatesOnly), the blocks taken, their prefix tokens. */
  timmForwardIntermediates(
    images: Images,
    options?: TimmIntermediatesOptions,
  ): { out?: Tensor; intermediates: Tensor[]; prefixTokens?: Tensor[] };
  forward(images: Images, options?: CallOptions): Tensor;
  forwardIntermediates(
    images: Images,
    options?: CallOptions & { norm?: boolean },
  ): { out: Tensor; intermediates: Tensor[] };
  loss(images: Images, options?: CallOptions): number;
  /** Output i of the last call, copied out (0 = out, 1.. = intermediates). */
  output(i?: number): Tensor;
  outputCount(): number;
  backward(options?: { douts?: Array<Float32Array | null>; inputGrad?: boolean; paramGrads?: boolean }): {
    dimages?: Float32Array;
  };
  setGradCheckpointing(policy: Policy): void;
  readonly gradCheckpointing: string;
  /** 'none' and the named policies the engine's budget search tries for this model (block, selective, sqrt, every:2 ...). */
  namedPolicies(): string[];
  setRequiresGrad(name: string, on?: boolean): number;
  zeroGrad(): void;
  params(): Param[];
  /** All or nothing: a missing, unexpected or mis-shaped tensor, or a value that is not finite (NaN, infinity), is refused by name. */
  loadSafetensors(bytes: Uint8Array | ArrayBuffer, options?: { modelPrefix?: string; filePrefix?: string }): void;
  /** Starts the model from timm / lightly / vitrine weights, the key layout recognised by itself. */
  initFrom(bytes: Uint8Array | ArrayBuffer, options?: { strict?: boolean }): InitReport;
  /** initFrom for weights wherever they are: bytes, a Blob / File, a URL (fetched; onProgress as it
   * arrives), in Node a file path; the normalisation from mean / std, else the weights' pretrained_cfg. */
  loadWeights(
    src: WeightsSource,
    options?: {
      strict?: boolean;
      onProgress?: (p: LoadProgress) => void;
      signal?: AbortSignalLike | null;
      /** a URL: seconds without a byte (default 30) and in all (default 1800) before it is given up */
      stallSeconds?: number;
      timeoutSeconds?: number;
      /** the largest file read (default 2^31 bytes); a file is never read past what its header declares */
      maxBytes?: number;
      mean?: number[] | null;
      std?: number[] | null;
    },
  ): Promise<InitReport & { name: string; normalization: Normalization }>;
  saveSafetensors(options?: { modelPrefix?: string; filePrefix?: string }): Uint8Array;
  plan(
    fn?: CallName,
    options?: {
      batch?: number;
      tokensKept?: number;
      tokensMasked?: number;
      mask?: boolean;
      needGrad?: boolean;
      height?: number;
      width?: number;
      distilledTraining?: boolean;
    },
  ): PlanBytes;
  /** The plan of one trainStep of `batch` images, and what fits `budget` bytes (MAE / AIM models). */
  planTrainStep(options: {
    batch: number;
    maskRatio?: number | null;
    policy?: string | null;
    budget?: number;
  }): TrainStepPlan;
  memory(): ModelMemory;
  /** Arena bytes in use after each allocation / release of the last call; backwardStart = the
   * event index where the backward began (-1 if none ran). */
  activationTimeline(): { bytes: number[]; live: number[]; backwardStart: number };
  releaseActivations(): void;
  /** Frees the model; a trainStepAsync / sync in flight or queued then rejects with an AbortError (kind 'disposed'). */
  dispose(): void;
  /** Whether dispose() was called. */
  readonly disposed: boolean;

  // ---- training (MAE / AIM models) ----
  /** timm / lightly initialisation for the model's kind, seeded (same seed, same bits). */
  initWeights(seed?: number | bigint): void;
  /** The engine's defaults for this kind (lightly's benchmarks); seed 0. */
  trainDefaults(): Required<TrainOptions>;
  /** AdamW state, seeded mask generator, step 0. Options not given take trainDefaults(). Returns the settings used. */
  trainerInit(options?: TrainOptions): Required<TrainOptions>;
  /** One step (seeded masks, loss, backward, clipping, AdamW at the scheduled lr); returns the loss.
   * A non-finite loss or gradient throws a VitrineError (code 'VT_ERR_NUMERIC') and keeps the last good state. */
  trainStep(images: Images, batch?: number, options?: { mean?: number[]; std?: number[] }): number;
  /** A classifier's step (kind timm, num_classes > 0): cross-entropy with timm's label smoothing
   * on one class index per image. Returns the loss. */
  trainStepLabels(images: Images, labels: ArrayLike<number>, options?: { mean?: number[]; std?: number[] }): number;
  /** trainStep on the engine's backend: with backend 'webgpu' the recorded step replayed on the GPU
   * (the newest state then stays there: sync() before saving or evaluating), else trainStep.
   * Calls made before the previous one settled are queued, not refused: each starts when the one
   * before it settles (its images are read then) and gives what calls awaited one after another
   * give; sync() queues the same way. dispose() rejects the call in flight and those queued with an
   * AbortError (kind 'disposed'). */
  trainStepAsync(images: Images, batch?: number, options?: { mean?: number[]; std?: number[] }): Promise<number>;
  /** trainStepLabels on the engine's backend (as trainStepAsync). */
  trainStepLabelsAsync(
    images: Images,
    labels: ArrayLike<number>,
    options?: { mean?: number[]; std?: number[] },
  ): Promise<number>;
  /** After GPU steps: the parameters, gradients and AdamW state back in wasm memory (a no-op on wasm). */
  sync(): Promise<void>;
  /** One training step (or with call 'encode' an encode pass and its backward) recorded, not run:
   * the engine's summary, or with json the list of kernel calls (docs/kernels.md). */
  traceStep(options: {
    batch: number;
    call?: 'train' | 'encode';
    labels?: ArrayLike<number> | null;
    json?: boolean;
  }): string | TraceList;
  /** Steps done (AdamW's step count). */
  readonly stepCount: number;
  /** Scheduled learning rate at `step` (default: the next step). */
  lr(step?: number): number;
  /** Parameters, AdamW m / v, step, mask generator, configs: safetensors bytes (never a state holding a NaN or infinity). */
  saveTrainState(): Uint8Array;
  /** All or nothing; resumes bit for bit (call initWeights first so the same parameters are frozen);
   * the metadata and every value checked first (finite, second moments >= 0). */
  loadTrainState(bytes: Uint8Array | ArrayBuffer): void;
  /** After loss() or trainStep(): normalised NCHW images for teaching (masked input, reconstruction). */
  visualize(): { masked: Float32Array; recon: Float32Array; shape: [number, number, number, number] };
}

export interface TrainOptions {
  /** Peak learning rate. */
  lr?: number;
  beta1?: number;
  beta2?: number;
  eps?: number;
  weightDecay?: number;
  /** lightly's cosine-warmup schedule; totalSteps 0 = constant lr. */
  warmupSteps?: number;
  totalSteps?: number;
  /** Global gradient-norm clipping; 0 = off. */
  clipNorm?: number;
  /** MAE: fraction of patches masked (lightly random_token_mask). */
  maskRatio?: number;
  labelSmoothing?: number;
  /** timm's lr_min: the cosine falls to minLr + (lr - minLr) * 0.001 (0 = lightly's schedule). */
  minLr?: number;
  /** K micro-batches per step (timm's --grad-accum-steps): a step's batch must be a multiple of K;
   * each loss is scaled by 1/K, then one clip + AdamW (one big batch up to fp32 summation order). */
  gradAccum?: number;
  /** Seed of the mask generator. */
  seed?: number | bigint;
}

export const IMAGENET_MEAN: number[];
export const IMAGENET_STD: number[];
/** Mean / std per channel; default ImageNet's. */
export interface ChannelStats {
  mean?: number[];
  std?: number[];
}
/** A data set as the pixel pipeline keeps it: bytes [n, chans, size, size]. */
export interface PixelSet {
  readonly chans: number;
  readonly size: number;
  readonly pixels: Uint8Array;
}
/** The pixel pipeline (web/formats/images.js): interleaved pixels of w x h (RGBA: srcChans 4) -> bytes
 * [chans, size, size]: shorter side resized to size, centre crop, the model's channels. */
export function resizeCrop(
  src: ArrayLike<number>,
  w: number,
  h: number,
  srcChans: number,
  size: number,
  chans: number,
): Uint8Array;
/** Images `indices` of a data set -> normalised Float32Array NCHW, (v / 255 - mean) / std. */
export function makeBatch(
  ds: PixelSet,
  indices: ArrayLike<number>,
  out?: Float32Array | null,
  stats?: ChannelStats,
): Float32Array;
/** Browser: a Blob / File decoded without colour conversion or premultiplied alpha -> RGBA pixels;
 * maxPixels: a PNG / JPEG over it refused from its header before decoding (raise: how the caller
 * raises the limit, in the message). */
export function decodeBlob(
  blob: {
    readonly size: number;
    readonly type: string;
    arrayBuffer(): Promise<ArrayBuffer>;
  },
  options?: { maxPixels?: number; raise?: string },
): Promise<{ width: number; height: number; data: Uint8ClampedArray }>;
/** The same safetensors bytes with extra __metadata__ entries (strings; others as JSON text). */
export function withMetadata(bytes: Uint8Array, extra: Record<string, unknown>): Uint8Array;
/** Per-channel mean / std for `chans` channels (1 channel: the average of the 3 given, ImageNet: 0.449 / 0.226). */
export function channelStats(chans: number, options?: ChannelStats): { mean: number[]; std: number[] };
/** Normalised NCHW image b -> RGBA bytes (undoing mean / std; grey repeated over R, G, B). */
export function toRGBA(
  nchw: Float32Array,
  dims: { chans: number; img: number },
  b?: number,
  options?: { mean?: number[]; std?: number[] },
): Uint8ClampedArray;
/** The JSON header of safetensors bytes and its length in bytes (data start at 8 + length);
 * throws a VitrineError (VT_ERR_FORMAT) for bytes that are not safetensors. */
export function readSafetensorsHeader(bytes: Uint8Array | ArrayBuffer): { length: number; header: Record<string, any> };
/** The __metadata__ of safetensors bytes ({} when none). */
export function readSafetensorsMeta(bytes: Uint8Array | ArrayBuffer): Record<string, string>;

/** The files of a run moved to PyTorch (docs/scale-out.md): file name -> bytes. */
export type TorchRunFiles = {
  'model.safetensors': Uint8Array;
  'optimizer.safetensors': Uint8Array;
  'run.json': Uint8Array;
};
/** The files of a torch run, in the order they are written (run.json last). */
export const TORCH_RUN_FILES: readonly ['model.safetensors', 'optimizer.safetensors', 'run.json'];
/** A training checkpoint (result.checkpoint, Session / CLI checkpoints) as a run python/vitrine_continue.py
 * continues in PyTorch: the state_dict, AdamW's state_dict, schedule, data position, mask generator.
 * A damaged checkpoint throws a VitrineError naming the field. */
export function exportTorchRun(checkpoint: Uint8Array | ArrayBuffer, options?: { source?: string }): TorchRunFiles;
/** A torch run (exported, or trained on by python/vitrine_continue.py) as checkpoint bytes that
 * train({ resume }) continues; a run written in part or damaged throws a VitrineError naming the file. */
export function importTorchRun(files: TorchRunFiles, options?: { source?: string }): Uint8Array;

/** What Model.initFrom loaded and skipped. */
export interface InitReport {
  source: string;
  filePrefix: string;
  loaded: number;
  skipped: number;
  missing: number;
  /** pos_embed / patch_embed of another grid or patch size, resampled as timm does on load (in notes) */
  resampled: number;
  posEmbed: 'none' | 'sincos_frozen' | 'trainable' | 'learned_now_trainable';
  notes: string[];
}

// ---- training as a library call (web/train/trainer.js) ----

/** A File / Blob, by shape (no DOM lib needed). */
export interface BlobLike {
  readonly size: number;
  readonly type: string;
  arrayBuffer(): Promise<ArrayBuffer>;
}
/** An AbortSignal, by shape. */
export interface AbortSignalLike {
  readonly aborted: boolean;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
}
/** Weights: bytes, a File / Blob, a URL (fetched with progress), or in Node a file path. */
export type WeightsSource = Uint8Array | ArrayBuffer | BlobLike | URL | string;
export interface LoadProgress {
  loaded: number;
  total: number | null;
  name: string;
}
/** What a run trains on: a folder path (Node; sub-folders are classes), Files (their folders are
 * classes) or URLs, labelled lists, images by class, pixels, or 'fashion-mnist' (Node). */
export type DataSource =
  | string
  | URL
  | ArrayLike<BlobLike>
  | Array<string | URL>
  | { dir: string }
  | { files: ArrayLike<BlobLike>; labels?: ArrayLike<number>; classes?: string[] }
  | { urls: Array<string | URL>; labels?: ArrayLike<number>; classes?: string[] }
  | {
      pixels: Uint8Array | Uint8ClampedArray;
      n: number;
      size: number;
      chans: number;
      labels?: ArrayLike<number>;
      classes?: string[];
      name?: string;
    }
  | { byClass: Record<string, Array<ImageSource | string | URL>> };
export interface TrainMemory {
  planned: PlanBytes | null;
  measured: { params: number; grads: number; activations: number };
  wasm: number;
  gpu?: number;
}
export interface TrainStepEvent {
  step: number;
  steps: number;
  epoch: number;
  loss: number;
  lr: number;
  seconds: number;
  imagesPerSecond: number;
  /** every 20 steps and at the last */
  memory?: TrainMemory;
}
export interface TrainEval {
  step: number;
  top1: number;
  n: number;
  confusion: number[][];
  seconds: number;
}
export interface TrainerInfo {
  run: Record<string, unknown>;
  dims: Model['dims'];
  policy: string;
  classes: string[] | null;
  init: (InitReport & { name: string }) | null;
  normalization: Normalization;
  step: number;
  steps: number;
  images: number;
  heldOut: number;
  params: number;
}
export interface TrainerOptions {
  /** a registered objective: 'mae' | 'aim' | 'classify', or one registerObjective added */
  objective?: 'mae' | 'aim' | 'classify' | (string & {});
  /** a timm architecture (timm's create_model), a train preset ('fmnist-p7-mlp2'), or the model's config */
  model?: string | object;
  config?: object;
  imgSize?: number;
  patchSize?: number;
  pool?: 'avg' | 'token';
  weights?: WeightsSource | { bytes: Uint8Array | ArrayBuffer; name?: string };
  weightsStrict?: boolean;
  data: DataSource;
  /** held-out data, or the fraction of data held out (classify default 0.2) */
  val?: DataSource | number;
  trainMax?: number;
  valMax?: number;
  steps?: number;
  epochs?: number;
  batch?: number;
  /** gradient accumulation: one optimizer step from gradAccum batches (each loss / gradAccum) */
  gradAccum?: number;
  lr?: number;
  minLr?: number;
  warmup?: number;
  warmupEpochs?: number;
  weightDecay?: number;
  labelSmoothing?: number;
  maskRatio?: number;
  policy?: string;
  seed?: number | string;
  /** 'none' or a comma list: hflip[:P], rrc[:A-B[:C-D]], flip, shift:N */
  augment?: string;
  mean?: number[];
  std?: number[];
  /** a checkpoint (TrainResult.checkpoint, onCheckpoint's bytes): the run continues bit for bit */
  resume?: Uint8Array | ArrayBuffer | BlobLike;
  stopAt?: number;
  checkpointEvery?: number;
  evalEvery?: number;
  noEval?: boolean;
  wasm?: WasmBuild;
  threads?: number;
  /** where the worker's steps run (createVitrine's backend): 'webgpu' replays each step on the GPU,
   * the state synced to wasm memory at checkpoints, evaluations and the end; gradAccum 1 only */
  backend?: 'wasm' | 'webgpu' | 'auto';
  gpu?: {
    swiftshader?: boolean;
    powerPreference?: 'high-performance' | 'low-power';
    limits?: Partial<Record<'maxBufferSize' | 'maxStorageBufferBindingSize', number>>;
  };
  cacheBytes?: number;
  /** refuse images over this many pixels, from their header (default 40e6), in Node and in a browser */
  maxPixels?: number;
  /** seconds without a byte before a URL (weights, an image) is given up (default 30) */
  urlStallSeconds?: number;
  /** seconds a URL may take in all (default 1800 for weights, 120 for an image) */
  urlTimeoutSeconds?: number;
  /** aborts the run: at the next step boundary, and any URL being read */
  signal?: AbortSignalLike;
  onStep?: (e: TrainStepEvent) => void;
  onEval?: (e: TrainEval) => void;
  onCheckpoint?: (e: { step: number; bytes: Uint8Array }) => void;
  onLoad?: (p: LoadProgress) => void;
  onLog?: (e: { text: string }) => void;
  onReady?: (info: TrainerInfo) => void;
  onEngine?: (e: { build: BuildName; threads: number; threadsNote: string | null; backend: Backend }) => void;
}
export interface TrainResult {
  status: 'done' | 'stopped' | 'aborted';
  step: number;
  steps: number;
  epoch: number;
  lossFirst: number | null;
  lossLast: number | null;
  /** steps taken by this run (a resumed run: since the checkpoint) */
  trained: number;
  trainSeconds: number;
  imagesPerSecond: number | null;
  /** the training state with the run's settings (null when no step was taken) */
  checkpoint: Uint8Array | null;
  /** timm keys: a classifier (head, class names) or the encoder; pretrained_cfg in the metadata */
  weights: Uint8Array | null;
  /** why checkpoint and weights are null after steps: a state the engine will not save (an update made it non-finite) */
  saveError: { message: string; status?: number; code?: string } | null;
  eval: TrainEval | null;
  classes: string[] | null;
  run: Record<string, unknown>;
}
export interface Prediction {
  index: number;
  name: string;
  p: number;
}
/** A classifier file's model, class names and normalisation (Vitrine.loadClassifier). */
export interface Classifier {
  readonly model: Model;
  /** The class names, one per output of the head. */
  readonly classes: string[];
  /** Where it came from (a file, a URL, 'the classifier'). */
  readonly name: string;
  readonly dims: ModelDims;
  readonly normalization: Normalization;
  /** The top classes of each image with probabilities, one list per image: one image source or a
   * list (any size), or a normalised Float32Array NCHW. top: how many (default 3; topk: the same). */
  predict(
    images: Float32Array | ImageSource | ImageSource[],
    options?: { top?: number; topk?: number },
  ): Promise<Prediction[][]>;
  dispose(): void;
}
/** A training run in a worker (Node: a worker thread; browser: a module Web Worker). */
export class Trainer {
  constructor(options: TrainerOptions);
  readonly options: TrainerOptions;
  /** resolves when the run ends (done, stopped at stopAt, aborted); rejects with a VitrineError whose
   * `result` holds what a run that took steps leaves (its last good checkpoint); dispose() before
   * the run ended: rejects with an AbortError (kind 'disposed', result null) */
  readonly done: Promise<TrainResult>;
  status: 'starting' | 'training' | 'paused' | 'done' | 'stopped' | 'aborted' | 'error' | 'disposed';
  step: number;
  steps: number | null;
  epoch: number;
  loss: number | null;
  info: TrainerInfo | null;
  /** Stops at the next step boundary after the worker reads the request (at once if asked before
   * the worker exists). Resolves to where the run waits -- step, and received: the steps taken when
   * the worker read the request (step is received or received + 1) -- or null when it resumed or
   * ended first. */
  pause(): Promise<{ step: number; received: number } | null>;
  resume(): void;
  abort(): void;
  predict(
    images: Float32Array | ImageSource | ImageSource[],
    options?: { top?: number; topk?: number },
  ): Promise<Prediction[][]>;
  /** Ends the worker at any moment (before it exists, mid-step, mid-download, paused): a run not
   * over ends with it (`done` rejects with an AbortError, kind 'disposed'; status 'disposed'); a run
   * over keeps its result and status. */
  dispose(): void;
}
export function train(options: TrainerOptions): Trainer;
/** timm's pretrained_cfg (default tag, mean, std, input size) of each timm architecture the engine builds. */
export const TIMM_PRETRAINED: Readonly<
  Record<
    string,
    {
      readonly tag: string;
      readonly mean: readonly number[];
      readonly std: readonly number[];
      readonly input_size: readonly number[];
    }
  >
>;

// ---- the stepping session and the pieces of a run (what train() runs in its worker; a page that
// steps a run itself, as the demo does, uses them directly) ----

/** A model spec as createModel takes it. */
export interface ModelSpec {
  kind: ModelKind;
  preset?: string | null;
  config?: Record<string, unknown> | null;
}
/** The small default ViTs (Fashion-MNIST 28x28 grey) with their MAE decoder and AIM head. */
export const TRAIN_PRESETS: Readonly<Record<string, Record<string, any>>>;
/** MAE decoders for a 224-px timm preset: `tab` (the demo's) and `lightly` (lightly's MAE example's). */
export const MAE_DECODERS: Readonly<
  Record<string, { label: string; decoder_dim: number; decoder_depth: number; decoder_heads: number }>
>;
/** The config (createModel with a preset) of decoder `name` of MAE_DECODERS. */
export function maeDecoder(name: string): { decoder_dim: number; decoder_depth: number; decoder_heads: number };
/** The spec of an MAE / AIM model: a train preset, a timm preset name, or a config. */
export function modelSpec(
  objective: 'mae' | 'aim',
  options?: { preset?: string; config?: object | string | null },
): ModelSpec;
/** The prefix of the encoder's weights in an MAE / AIM model (timm keys below it). */
export function encoderPrefix(kind: ModelKind): string;
/** Deterministic masks for showing reconstructions (MAE idx_keep / idx_mask, AIM a prefix mask). */
export function showMasks(
  model: Model,
  batch: number,
  maskRatio?: number,
  seed?: number,
): { idxKeep: BigInt64Array; idxMask: BigInt64Array } | { mask: Uint8Array };
/** A classifier run's training settings (lr, weightDecay, labelSmoothing, clipNorm, pool). */
export const CLASSIFY_DEFAULTS: Readonly<{
  lr: number;
  weightDecay: number;
  labelSmoothing: number;
  clipNorm: number;
  pool: 'avg' | 'token';
}>;
/** The classifier createModel takes: a train preset's encoder (or a config's) with num_classes and pooling. */
export function classifierSpec(options: {
  preset?: string;
  config?: object | string | null;
  numClasses: number;
  pool?: 'avg' | 'token';
}): ModelSpec;
/** The RGBA pixels of an ImageBitmap (drawn on an OffscreenCanvas). */
export function bitmapPixels(bitmap: ImageBitmapLike): { width: number; height: number; data: Uint8ClampedArray };

/** One run set up in this thread (model, data, normalisation, trainer, the checkpoint it resumes),
 * stepping on request: what train() runs in its worker. Session.open(vt, options) takes
 * TrainerOptions' run options (not the callbacks, the signal or the worker's engine options). */
export class Session {
  static open(
    vt: Vitrine,
    options: Omit<TrainerOptions, 'data' | 'val'> & { data: object; val?: object | number },
    hooks?: { log?: (text: string) => void; onLoad?: (p: LoadProgress) => void },
  ): Promise<Session>;
  readonly vt: Vitrine;
  model: Model | null;
  /** the objective's name; objectiveDef what its module says */
  objective: string;
  objectiveDef: Objective;
  run: Record<string, any>;
  classes: string[] | null;
  stats: { mean?: number[]; std?: number[] };
  initReport: (InitReport & { name: string }) | null;
  normalizationSource: string;
  trainIdx: Int32Array;
  valIdx: Int32Array | null;
  effBatch: number;
  startStep: number;
  lossFirst: number | null;
  lossLast: number | null;
  /** the model's newest state stays on its backend's device between steps (webgpu): sync() first */
  readonly stateOnDevice: boolean;
  readonly step: number;
  readonly steps: number;
  readonly epoch: number;
  batchAt(step?: number): Promise<{ images: Float32Array; labels: Int32Array | null; indices: Int32Array }>;
  stepOnce(): Promise<{ step: number; loss: number; lr: number; seconds: number; images: Float32Array }>;
  sync(): Promise<void>;
  memory(): TrainMemory;
  evaluate(chunk?: number): Promise<TrainEval | null>;
  checkpoint(): Uint8Array;
  weights(): Uint8Array;
  predict(
    images:
      Float32Array | BlobLike | ImageDataLike | ImageBitmapLike | Array<BlobLike | ImageDataLike | ImageBitmapLike>,
    options?: { topk?: number },
  ): Promise<Prediction[][]>;
  loop(options?: {
    stopAt?: number;
    checkpointEvery?: number;
    evalEvery?: number;
    evalChunk?: number;
    emit?: (name: 'step' | 'eval' | 'checkpoint', data: any) => void | Promise<void>;
    control?: { paused?: () => boolean; aborted?: () => boolean; waitResume?: () => Promise<void> };
    yieldEvery?: number;
  }): Promise<{ status: 'done' | 'stopped' | 'aborted' | 'error'; error: Error | null }>;
  dispose(): void;
}

/** A training objective as its module's default export says it (web/train/objectives/index.js
 * describes every field); registerObjective(url) adds one. */
export interface Objective {
  name: string;
  summary: string;
  /** it trains on classes (its data must have them; its step takes labels) */
  labels?: boolean;
  /** the checkpoint metadata entry of its run settings (default 'vitrine_run') */
  runKey?: string;
  countKey?: string;
  specInState?: boolean;
  masks?: boolean;
  /** its defaults of the common options and of its own (lr: a number, or of the images a step) */
  defaults: Record<string, unknown>;
  /** its own options: { name: { flag?, value?, type: { kind, check(v) }, run?, help } } */
  options?: Record<
    string,
    {
      flag?: string;
      value?: string;
      type: { kind: string; check(v: unknown): string | null };
      run?: boolean | 'always';
      help: string;
    }
  >;
  runRules?: Record<string, (v: unknown) => string | null>;
  report?: 'encoder' | 'classifier' | (string & {});
  spec(
    options: Record<string, any>,
    ctx?: {
      classes?: string[];
      weights?: { meta: Record<string, string>; name: string } | null;
      run?: Record<string, any>;
    },
  ): ModelSpec;
  settings(options: Record<string, any>): Record<string, unknown>;
  trainer(run: Record<string, any>): Record<string, unknown>;
  step?(
    model: Model,
    batch: { images: Float32Array; labels: Int32Array | null; n: number; step: number; run: Record<string, any> },
  ): Promise<number>;
  weights?(session: Session): Uint8Array;
  evaluate?(session: Session, chunk?: number): Promise<TrainEval | null>;
  predict?(session: Session, images: unknown, options?: { topk?: number }): Promise<Prediction[][]>;
}
/** Registers the objective a module exports (its default export), by the module's URL (in Node
 * also a file path): train() hands it to its worker, the CLI takes it as --objective-module FILE.
 * Returns its name. */
export function registerObjective(url: string | URL): Promise<string>;
/** The registered objectives' names ('mae', 'aim', 'classify', ...). */
export function objectiveNames(): string[];
/** train()'s options checked as train() checks them (web/train/options.js): an unknown key names
 * the closest known one, a value of the wrong type or out of range names the option and what it
 * takes (an OptionError, a VitrineError). For a form of an app's own; returns the objective (its module's
 * definition), or null for a resumed run. */
export function checkTrainOptions(options: Partial<TrainerOptions>): Objective | null;
