// Types of vitrine/testing (web/testing.js): assertions for Node's test runner.
import type { ParityResult, ParityTensor, Vitrine, WasmBuild } from './vitrine.js';

/** The parity format's pass rule: err <= 1e-4 for every expect/ tensor. */
export const PARITY_TOLERANCE: number;
/** The pass rule under a tolerance, as one line. */
export function passRule(tolerance?: number): string;

export interface AssertParityOptions {
  /** Gradient checkpointing policy: none | block | every:K | sqrt | selective | budget:BYTES (default none). */
  policy?: string | null;
  /** The wasm build (default: the best this host runs: relaxed, else simd, else scalar). */
  wasm?: WasmBuild;
  /** Where the call is computed: 'wasm' (default) or 'webgpu' (the recording replayed on the GPU). */
  backend?: 'wasm' | 'webgpu';
  /** A tighter tolerance than 1e-4 (a looser one is a RangeError). */
  tolerance?: number;
  /** Kernel threads (default 1; the same bits at any count). */
  threads?: number;
  /** A directory holding the build's glue and .wasm (instead of the package's). */
  wasmDir?: string;
  /** An engine to use instead of one made from wasm / backend / threads / wasmDir. */
  engine?: Vitrine;
}

/** A parity result judged under a tolerance. */
export interface TolerancedParityResult extends Omit<ParityResult, 'json' | 'dump'> {
  tolerance: number;
}

/** Runs a parity file as `vitrine parity` does; rejects with an AssertionError naming the worst
 * tensor, its err and torch32_err when it fails (or when the file cannot be read or run). */
export function assertParity(file: string | URL, options?: AssertParityOptions): Promise<TolerancedParityResult>;

/** A value a golden holds: a typed array, { data, shape } (Model.encode's output), a number,
 * bigint or boolean, an array of numbers; arrays and plain objects of these nest. */
export type GoldenValue =
  | Float32Array
  | Float64Array
  | Int32Array
  | BigInt64Array
  | Int8Array
  | Uint8Array
  | Uint8ClampedArray
  | {
      data: Float32Array | Float64Array | Int32Array | BigInt64Array | Int8Array | Uint8Array | Uint8ClampedArray;
      shape: number[];
    }
  | number
  | bigint
  | boolean
  | number[]
  | GoldenValue[]
  | { [key: string]: GoldenValue };

export interface AssertGoldenOptions {
  /** Where goldens live: dir/<name>.safetensors (default 'goldens', from the working directory). */
  dir?: string | URL;
  /** (Re)record the golden (default: VITRINE_UPDATE_GOLDENS=1). */
  update?: boolean;
  /** Allowed err = max|new - golden| / max|golden| per float tensor (default: none, bit for bit). */
  tolerance?: number;
  /** node:test's test context: what the golden did (recorded, re-recorded, unchanged) becomes
   * one t.diagnostic line (without it, recording and re-recording print the line on stdout). */
  t?: { diagnostic(message: string): void };
}
export interface GoldenStatus {
  status: 'recorded' | 'matched' | 'updated';
  file: string;
  /** "golden NAME: recorded FILE (N tensors)" | "...: re-recorded ..." | "...: unchanged (...)" */
  report: string;
}

/** Checks a value against its golden file (recorded on the first run outside CI, or with
 * update -- never in CI, where asking to fails); throws an AssertionError on any changed bit (or beyond tolerance), another shape, or a
 * golden that cannot be read. Returns a promise when fn does. */
export function assertGolden(
  name: string,
  fn: () => Promise<GoldenValue>,
  options?: AssertGoldenOptions,
): Promise<GoldenStatus>;
export function assertGolden(
  name: string,
  fn: (() => GoldenValue) | GoldenValue,
  options?: AssertGoldenOptions,
): GoldenStatus;

/** A value's tensors as a golden holds them. */
export function goldenTensors(
  value: GoldenValue,
): { name: string; dtype: string; shape: number[]; bytes: Uint8Array }[];
/** safetensors bytes of such tensors with string metadata. */
export function encodeSafetensors(
  tensors: { name: string; dtype: string; shape: number[]; bytes: Uint8Array }[],
  metadata?: Record<string, string>,
): Uint8Array;
export type { ParityResult, ParityTensor };
