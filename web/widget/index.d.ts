// Types of vitrine/widget (web/widget/index.js): the checkpointing widget and what it is made of.
import type { Vitrine, WasmBuild } from '../vitrine.js';

/** What createModel takes: { kind, config } or { kind, preset }. */
export interface WidgetModelSpec {
  kind: 'mae' | 'aim' | 'timm' | string;
  config?: object;
  preset?: string;
  [key: string]: unknown;
}

/** The engine's recorded step (Model.traceStep, json) read for teaching: readTrace's result. */
export interface RecordedStep {
  what: string;
  chains: { name: string; depth: number; segment: number; store: string[] }[];
  /** FLOPs of the whole step. */
  total: number;
  flops: { forward: number; recompute: number; backward: number; optimizer: number };
  moments: { phase: string; chain: number; block: number; t0: number; t1: number; flops: number; calls: number }[];
  /** The arena after each event: top = bytes allocated, live = what is still needed. */
  memory: { t: number; top: number; live: number }[];
  peak: { bytes: number; t: number; moment: number };
  /** The plan's arena bytes (= peak.bytes). */
  planned: number;
  blocks: {
    store: string;
    kept: number;
    keptNames: string[];
    forward: number;
    recompute: number;
    backward: number;
  }[][];
  /** A hash of every kernel call: equal digests, the same computation. */
  digest: string;
}
/** recordPolicies' entry of one policy: the recorded step and the engine's plan beside it. */
export interface PolicyRecord extends RecordedStep {
  policy: string;
  activations: number;
  recomputeFlops: number;
  stepBytes: number;
  /** Said after the policy's name (the budget half way between none and block). */
  note?: string;
  /** The earlier policy whose kernel calls these are (one computation). */
  same?: string;
}
export type Recorded = Record<string, PolicyRecord>;
export interface RecordResult {
  results: Recorded;
  dims: { img: number; patch: number; chans: number; dim: number; depth: number; heads: number; prefix: number };
  threads?: number;
  named?: string[];
}
export interface RecordRequest {
  spec: WidgetModelSpec;
  batch: number;
  maskRatio: number;
  /** null: every named policy and a budget half way between none and block. */
  policies: string[] | null;
}
/** Step times of measureTimes: ms per round for each policy, and the baseline's second timing. */
export interface StepTimes {
  ms: Record<string, number[]>;
  again: number[];
}

export interface WidgetOptions {
  /** A preset of web/train/presets.js (fmnist, fmnist-p7, fmnist-p7-mlp2, fmnist-base) or a timm preset name. Default fmnist. */
  model?: string;
  /** The engine's config ({ encoder: {...timm kwargs}, decoder_dim, ... }) instead of a preset. */
  config?: object;
  /** createModel's spec as it is (instead of model / config / kind). */
  spec?: WidgetModelSpec;
  /** mae (default) or aim. */
  kind?: 'mae' | 'aim';
  /** Images a step (default 32). */
  batch?: number;
  /** MAE's mask ratio (default 0.75). */
  maskRatio?: number;
  /** The policy the schedule shows first (default block). */
  policy?: string;
  /** The policies compared (default: every named policy and a budget half way between none and block). */
  policies?: string[] | null;
  /** What to draw (default both). */
  parts?: ('schedule' | 'compare')[];
  /** The level of the widget's headings (default 3). */
  headingLevel?: number;
  /** How the caption names the model. */
  modelName?: string;
  /** Records the steps elsewhere (a worker's engine); default: an engine of the widget's own, 1 thread. */
  record?: (request: RecordRequest) => Promise<RecordResult>;
  /** An engine to record with (default: the widget starts one, with no threads). */
  vitrine?: Vitrine;
  /** For the engine the widget starts: the build, and where its .wasm is. */
  wasm?: WasmBuild;
  locateFile?: (file: string, url: string) => string | URL;
  /** false: nothing recorded until set() or setResults(). */
  recordNow?: boolean;
}

export class CheckpointingView {
  constructor(root: HTMLElement, options?: WidgetOptions);
  readonly root: HTMLElement;
  /** Resolves once the step is recorded and drawn (rejects when it cannot be recorded). */
  ready: Promise<CheckpointingView>;
  /** The recorded step under each policy (null until recorded). */
  R: Recorded | null;
  dims: RecordResult['dims'] | null;
  times: StepTimes | null;
  sched: { policy: string | null; index: number; count: number };
  /** Where an app adds its own controls under the comparison's table. */
  readonly tools: HTMLElement;
  record(): Promise<CheckpointingView>;
  /** New options: recorded again. */
  set(options: WidgetOptions): Promise<CheckpointingView>;
  /** Results the app already has, drawn without recording. */
  setResults(res: RecordResult, options?: WidgetOptions): CheckpointingView;
  /** One more policy recorded and compared; `note` follows its name in the table. */
  addPolicy(policy: string, note?: string | null): Promise<PolicyRecord>;
  /** The schedule of `policy`, moment `index` highlighted (-1: none). */
  show(policy: string, index?: number): void;
  step(d: number): void;
  play(): void;
  policyProse(policy: string): string;
  /** Step times measured by the app (measureTimes): table, plot and their words again. */
  setTimes(times: StepTimes | null): void;
  renderCompare(): void;
  destroy(): void;
}

/** Draws the widget in `el`; `ready` resolves once it is drawn. */
export function mount(el: HTMLElement, options?: WidgetOptions): CheckpointingView;
export function widgetSpec(options?: WidgetOptions): WidgetModelSpec;
export const WIDGET_MODELS: string[];

export function readTrace(trace: object): RecordedStep;
export function blockMoments(r: RecordedStep, chain: number): RecordedStep['moments'];
export function recomputations(r: RecordedStep, chain: number): { block: number; t0: number; t1: number }[];
export function stepMoments(r: RecordedStep): (RecordedStep['moments'][number] & { inBlock: boolean })[];
export function blockSizes(
  block: RecordedStep,
  none: RecordedStep,
  chain: number,
): { input: number; internals: number };
export function droppedBytes(r: RecordedStep, none: RecordedStep, chain: number, block: number): number;

export function recordPolicies(vt: Vitrine, request: RecordRequest | Omit<RecordRequest, 'policies'>): RecordResult;
export function measureTimes(
  vt: Vitrine,
  request: {
    spec: WidgetModelSpec;
    batch: number;
    maskRatio: number;
    policies: string[];
    reps?: number;
    warmup?: number;
  },
  hooks?: { now?: () => number; onStep?: (done: number, total: number) => Promise<void>; stopped?: () => boolean },
): Promise<StepTimes & { aborted: boolean }>;
export interface Spread {
  median: number;
  q1: number;
  q3: number;
  n?: number;
}
export interface TimingSummary {
  rounds: number;
  /** The baseline timed twice, per round: the noise floor. */
  noise: Spread | null;
  busy: boolean;
  byPolicy: Record<string, { ms: Spread; ratio: Spread | null; distinct: boolean }>;
  /** Groups of policies whose ratios' middle halves all overlap pairwise: not distinguishable on this machine. */
  ties: string[][];
}
export function timingSummary(times: StepTimes, base?: string): TimingSummary;
export function sameComputations(R: Recorded): Recorded;
export function distinctPolicies(R: Recorded, policies?: string[]): string[];
export function quantile(a: number[], q: number): number;
export function median(a: number[]): number;
export function pairedRatios(times: Record<string, number[]>, policy: string, base?: string): number[];
export function wave(n: number, k?: number, phase?: number): Float32Array;
export function modelFor(
  vt: Vitrine,
  spec: WidgetModelSpec,
  options: { maskRatio?: number; trainer?: boolean },
): unknown;
export const HALF_WAY: string;
export const AGAIN: string;
export const BUSY: number;

export function drawSchedule(
  svg: SVGSVGElement,
  r: RecordedStep,
  options?: { cursor?: number; ymax?: number; none?: RecordedStep | null; width?: number },
): { moments: ReturnType<typeof stepMoments> };
export function describeMoment(r: RecordedStep, moment: ReturnType<typeof stepMoments>[number]): string;
export function keptText(r: RecordedStep, chain: number, block: number): string;
export function chipText(r: RecordedStep, none: RecordedStep | null, chain: number, block: number): string;
export function chainName(r: RecordedStep, chain: number): string;
export function memoryAt(r: RecordedStep, t: number): { t: number; top: number; live: number };
export const COLOR: Record<'forward' | 'recompute' | 'backward' | 'optimizer', string>;

export const COLUMNS: string[];
export function tableRows(
  R: Recorded,
  times?: StepTimes | null,
): { policy: string; cells: string[]; recompute: number; same: string | null; distinct: boolean | null }[];
export function renderCompareTable(table: HTMLTableElement, R: Recorded, times?: StepTimes | null): void;
export function drawComparePlot(
  svg: SVGSVGElement,
  R: Recorded,
  times: StepTimes | null,
  options?: { width?: number },
): unknown[];
export function timesProse(R: Recorded, times: StepTimes | null): string;
export function sqrtProse(R: Recorded): string;
export function order(policies: string[], depth: number): string[];
export function keeps(r: RecordedStep): string;
export function policyName(policy: string, r: PolicyRecord): string;

export const MiB: number;
export function fmtBytes(bytes: number): string;
export function policyLabel(policy: string): string;
export function mflop(flops: number): string;
export function pct(part: number, whole: number): string;
export function ordinal(k: number): string;
export function recomputeText(flops: number, forward: number): string;
export function msText(s: Spread): string;
export function ratioText(s: Spread): string;

export const WIDGET_CSS: string;
export function injectStyle(doc?: Document): void;
