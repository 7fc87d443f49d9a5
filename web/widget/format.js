// format.js: how the checkpointing widget and the demo write bytes, FLOPs and policy names, one
// function each, so that a figure reads the same wherever it is shown (the page, the widget,
// bench/teach_policies.mjs's table in docs/demo.md).

export const MiB = 1024 * 1024;
export const fmtBytes = (b) =>
  !Number.isFinite(b)
    ? '–'
    : b >= 1024 * MiB
      ? `${(b / (1024 * MiB)).toFixed(2)} GiB`
      : b >= MiB || b === 0
        ? `${(b / MiB).toFixed(1)} MiB`
        : `${(b / 1024).toFixed(1)} KiB`;
/** The engine's policy name as people read it (a budget in MiB instead of bytes). */
export const policyLabel = (p) => (p.startsWith('budget:') ? `budget:${fmtBytes(Number(p.slice(7)))}` : p);
export const mflop = (f) => (f >= 1e9 ? `${(f / 1e9).toFixed(2)} GFLOP` : `${(f / 1e6).toFixed(1)} MFLOP`);
export const pct = (f, whole) => `${((100 * f) / whole).toFixed(0)}%`;
export const ordinal = (k) =>
  `${k}${k % 10 === 1 && k % 100 !== 11 ? 'st' : k % 10 === 2 && k % 100 !== 12 ? 'nd' : k % 10 === 3 && k % 100 !== 13 ? 'rd' : 'th'}`;
/** FLOPs a policy re-computes per step, with their share of one forward pass. */
export const recomputeText = (flops, forward) =>
  flops ? `${mflop(flops)} (${pct(flops, forward)} of a forward)` : '0: nothing re-computed';
/** A step time in ms with its middle half: "104.6 ms (98.1–120.3)". */
export const msText = (s) => `${s.median.toFixed(1)} ms (${s.q1.toFixed(1)}–${s.q3.toFixed(1)})`;
export const ratioText = (s) => `${s.median.toFixed(2)}× (${s.q1.toFixed(2)}–${s.q3.toFixed(2)})`;
