// elementwise.js: kernels with one invocation per element (ew: the frame every element-wise
// kernel of ops.js uses) and the exact-erf GELU forward/backward. 256 invocations a workgroup,
// consecutive invocations on consecutive elements (coalesced); memory-bound: each element is read
// and written once.
import { grid1d, LINEAR_WG } from './wgsl.js';

// WGSL has no erf. Coefficients from tools/webgpu_erf_fit.py (which also measures them):
//   |z| < 0.9:        erf(z) = z P(z^2)
//   0.9 <= |z| <= 5.5: erfc(|z|) = exp(Q(|z| - 3.2)); beyond 5.5 erfc counts as 0 (< 7.4e-15)
// The normal cdf Phi(x) = 0.5 (1 + erf(x / sqrt 2)) takes 0.5 erfc(|z|) on the negative side
// directly, without the cancellation of 1 + erf. Float32 evaluation: erf within 2.2e-7 (3.7 ulp) of
// float64 with an exact exp; tests/node/webgpu-kernels.test.mjs measures it on the adapter.
// a polynomial in v by Horner's rule with fma, coefficients from the constant term up
const horner = (v, c) =>
  c.slice(0, -1).reduceRight((r, k) => `fma(${r}, ${v}, ${k.toExponential(9)})`, c.at(-1).toExponential(9));
const ERF_P = [
  1.128379226, -3.76126349e-1, 1.12837255e-1, -2.686097845e-2, 5.204870831e-3, -8.185928455e-4, 8.55301987e-5,
];
const ERF_Q = [
  -1.20194664e1, -6.687559128, -9.615353346e-1, -6.421333645e-3, 1.131843543e-3, -1.992043835e-4, 3.403554365e-5,
  -5.703398074e-6, 9.10339736e-7, -9.867640216e-8, 2.572495772e-9,
];
export const ERF_WGSL = `
fn erf_poly_small(s: f32) -> f32 { return ${horner('s', ERF_P)}; }
// erfc(t) for 0.9 <= t (0 beyond 5.5)
fn erfc_big(t: f32) -> f32 {
  let v = min(t, 5.5) - 3.2;
  return select(exp(${horner('v', ERF_Q)}), 0.0, t > 5.5);
}
fn erf(z: f32) -> f32 {
  let t = abs(z);
  if (t < 0.9) { return z * erf_poly_small(z * z); }
  let one_minus = 1.0 - erfc_big(t);
  return select(one_minus, -one_minus, z < 0.0);
}
// Phi(x) = 0.5 (1 + erf(x / sqrt 2))
fn normal_cdf(x: f32) -> f32 {
  let z = x * 0.70710678118654752440;
  let t = abs(z);
  if (t < 0.9) { return 0.5 + 0.5 * (z * erf_poly_small(z * z)); }
  let h = 0.5 * erfc_big(t);
  return select(1.0 - h, h, z < 0.0);
}
`;

/** A kernel with one invocation per element i < u.n (`i` in scope). */
export const elementwise = (body) => `@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
  let i = (${LINEAR_WG}) * 256u + li;
  if (i >= u.n) { return; }
${body}
}`;

const maxg = (prog) => prog.gpu.limits.maxComputeWorkgroupsPerDimension;

/** Appends an element-wise kernel over n elements (args gets n); prelude: WGSL functions. */
export function ew(prog, name, ops, args, fargs, n, body, prelude = '') {
  prog.dispatch(name, ops, prelude + elementwise(body), { n, ...args }, fargs, grid1d(n, 256, maxg(prog)));
}

/** out[n] = gelu(inp) (out may alias inp) */
export function geluForward(prog, { out, inp }, n) {
  ew(
    prog,
    'gelu_forward',
    { out, inp },
    {},
    {},
    n,
    `  let x = ld_inp(i);
  st_out(i, x * normal_cdf(x));`,
    ERF_WGSL,
  );
}

/** dinp[n] = dout * gelu'(inp) (not accumulated; dinp may alias dout) */
export function geluBackward(prog, { dinp, inp, dout }, n) {
  ew(
    prog,
    'gelu_backward',
    { dinp, inp, dout },
    {},
    {},
    n,
    `  let x = ld_inp(i);
  let pdf = 0.39894228040143267794 * exp(-0.5 * x * x);
  st_dinp(i, ld_dout(i) * (normal_cdf(x) + x * pdf));`,
    ERF_WGSL,
  );
}

// quick_gelu and tanh GELU: PyTorch's formulas in the C references' order (kernels_ref.c), their
// float constants as WGSL f32 literals (each rounds to the C constant's float).
// sigmoid(1.702 x) = 1 / (1 + exp(-1.702 x)); an exponent past float's range gives exactly 0, as
// the C division by an infinite denominator does (no infinity is made: WGSL may assume finite floats)
const QUICK_GELU_WGSL = `
fn qg_sigmoid(x: f32) -> f32 {
  let t = -(x * 1.702);
  return select(1.0 / (1.0 + exp(min(t, 88.0))), 0.0, t > 88.0);
}
`;
// tanh(z) = sign(z) (1 - 2 / (exp(2|z|) + 1)), the SIMD builds' form (kernels_simd.c); |z| capped at
// 10, past which the float result is exactly 1 either way
const GELU_TANH_WGSL = `
fn gt_tanh(z: f32) -> f32 {
  let t = 1.0 - 2.0 / (exp(2.0 * min(abs(z), 10.0)) + 1.0);
  return select(t, -t, z < 0.0);
}
fn gt_inner(x: f32, x2: f32) -> f32 { return 0.797884583 * (x + 0.044715 * (x2 * x)); }
`;
// 3.0f * 0.044715f as C folds it in float (a WGSL constant expression would fold it exactly)
const THREE_KAPPA = Math.fround(3 * Math.fround(0.044715)).toPrecision(9);

/** out[n] = inp sigmoid(1.702 inp) (out may alias inp) */
export function quickGeluForward(prog, { out, inp }, n) {
  ew(
    prog,
    'quick_gelu_forward',
    { out, inp },
    {},
    {},
    n,
    '  let x = ld_inp(i);\n  st_out(i, x * qg_sigmoid(x));',
    QUICK_GELU_WGSL,
  );
}

/** dinp[n] = dout s + ((dout inp)(1 - s)) s 1.702 (not accumulated; dinp may alias dout) */
export function quickGeluBackward(prog, { dinp, inp, dout }, n) {
  ew(
    prog,
    'quick_gelu_backward',
    { dinp, inp, dout },
    {},
    {},
    n,
    `  let x = ld_inp(i);
  let g = ld_dout(i);
  let s = qg_sigmoid(x);
  st_dinp(i, g * s + ((g * x) * (1.0 - s)) * s * 1.702);`,
    QUICK_GELU_WGSL,
  );
}

/** out[n] = (0.5 inp)(1 + tanh(sqrt(2/pi) (inp + 0.044715 inp^3))) (out may alias inp) */
export function geluTanhForward(prog, { out, inp }, n) {
  ew(
    prog,
    'gelu_tanh_forward',
    { out, inp },
    {},
    {},
    n,
    `  let x = ld_inp(i);
  st_out(i, (0.5 * x) * (1.0 + gt_tanh(gt_inner(x, x * x))));`,
    GELU_TANH_WGSL,
  );
}

/** dinp[n] = dout gelu_tanh'(inp), ATen's formula (not accumulated; dinp may alias dout) */
export function geluTanhBackward(prog, { dinp, inp, dout }, n) {
  ew(
    prog,
    'gelu_tanh_backward',
    { dinp, inp, dout },
    {},
    {},
    n,
    `  let x = ld_inp(i);
  let x2 = x * x;
  let t = gt_tanh(gt_inner(x, x2));
  let left_d = 0.5 * (1.0 + t);
  let right_d = (0.5 * x) * (1.0 - t * t) * (0.797884583 * (1.0 + ${THREE_KAPPA} * x2));
  st_dinp(i, ld_dout(i) * (left_d + right_d));`,
    GELU_TANH_WGSL,
  );
}
