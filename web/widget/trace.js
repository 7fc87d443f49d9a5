// trace.js: the engine's recorded training step (Model.traceStep; the format 'vitrine-trace/1' of
// docs/kernels.md) read for teaching: the step as a schedule of block-level moments on a time axis
// weighted by FLOPs, the activation arena over that time, per block what its forward keeps and
// what the backward re-computes, and a digest of the kernel calls (two policies with the same
// digest run the same computation). Pure functions of the list: the widget, the demo's worker,
// bench/teach_policies.mjs and the Node tests read it the same way.

const PHASES = ['forward', 'recompute', 'backward', 'optimizer'];

/**
 * readTrace(t) -> {
 *   what, chains: [{ name, depth, segment, store }], total (FLOPs), flops: { forward, recompute, backward, optimizer },
 *   moments: [{ phase, chain, block, t0, t1, flops, calls }]  consecutive calls of one phase, chain and block (t in FLOPs from the start)
 *   memory: [{ t, top, live }]  the arena after each allocation / scope end / release: top = bytes allocated,
 *                               live = top less what finished blocks are done with (the engine's own timeline)
 *   peak: { bytes, t, moment }, planned (the plan's arena bytes); moment: the index in moments of the
 *                               moment the peak's allocations are for (the first call after them),
 *   blocks: [[{ store, kept, keptNames, forward, recompute, backward }]] per chain, per block (bytes, FLOPs),
 *   digest: a hash of every kernel call (name, phase, arguments, operands) in order: equal digests, the same computation
 * }
 */
export function readTrace(t) {
  if (!t || t.format !== 'vitrine-trace/1') throw new Error(`not a recorded step (format ${t && t.format})`);
  const chains = t.chains.map((c) => ({ name: c.name, depth: c.depth, segment: c.segment, store: c.store.slice() }));
  const blocks = chains.map((c) =>
    Array.from({ length: c.depth }, (_, b) => ({
      store: c.store[b],
      kept: 0,
      keptNames: [],
      forward: 0,
      recompute: 0,
      backward: 0,
    })),
  );
  const flops = Object.fromEntries(PHASES.map((p) => [p, 0]));
  const moments = [],
    memory = [{ t: 0, top: 0, live: 0 }];
  let now = 0,
    top = 0,
    released = 0,
    calls = 0,
    peak = { bytes: 0, t: 0, call: 0 },
    cur = null;
  const chainOf = (name) => chains.findIndex((c) => name.startsWith(`${c.name}.blocks.`));
  let digest = 0x811c9dc5;
  for (const e of t.entries) {
    if (e.call !== undefined) {
      const f = e.flops || 0;
      const key = JSON.stringify([e.call, e.phase, e.ints, e.floats, e.ops]);
      for (let i = 0; i < key.length; i++) digest = Math.imul(digest ^ key.charCodeAt(i), 16777619) >>> 0;
      if (!cur || cur.phase !== e.phase || cur.chain !== e.chain || cur.block !== e.block) {
        cur = { phase: e.phase, chain: e.chain, block: e.block, t0: now, t1: now, flops: 0, calls: 0, first: calls };
        moments.push(cur);
      }
      cur.flops += f;
      cur.calls++;
      calls++;
      now += f;
      cur.t1 = now;
      flops[e.phase] = (flops[e.phase] || 0) + f;
      if (e.chain >= 0 && e.block >= 0) blocks[e.chain][e.block][e.phase === 'optimizer' ? 'backward' : e.phase] += f;
      continue;
    }
    if (e.alloc !== undefined) {
      top = e.offset + e.bytes;
      // what a block's forward keeps for the backward: <chain>.blocks.<b>.<field>
      const c = chainOf(e.alloc);
      if (c >= 0 && e.phase === 'forward') {
        const [b, ...field] = e.alloc.slice(chains[c].name.length + 8).split('.');
        const k = blocks[c][Number(b)];
        if (k) {
          k.kept += e.bytes;
          k.keptNames.push(field.join('.'));
        }
      }
    } else if (e.reset !== undefined) top = e.reset;
    else if (e.release !== undefined) released += e.release;
    else continue;
    const point = { t: now, top, live: top - Math.min(released, top) };
    memory.push(point);
    if (top > peak.bytes) peak = { bytes: top, t: now, call: calls };
  }
  const at = moments.findIndex((m) => m.first <= peak.call && peak.call < m.first + m.calls);
  peak = { bytes: peak.bytes, t: peak.t, moment: at >= 0 ? at : moments.length - 1 };
  return {
    what: t.what,
    chains,
    total: now,
    flops,
    moments,
    memory,
    peak,
    planned: t.arena_planned,
    blocks,
    digest: digest.toString(16),
  };
}

/** Bytes block b of chain c no longer keeps under `r` that it keeps under `none` (re-computed in the backward). */
export const droppedBytes = (r, none, c, b) => Math.max(0, none.blocks[c][b].kept - r.blocks[c][b].kept);

/** The block-level moments of chain `c` (phase, block), in order: what the schedule shows. */
export const blockMoments = (r, c) => r.moments.filter((m) => m.chain === c && m.block >= 0 && m.phase !== 'optimizer');

/** The times (FLOPs from the start) the backward re-computes each block of chain c: [{ block, t0, t1 }]. */
export const recomputations = (r, c) =>
  blockMoments(r, c)
    .filter((m) => m.phase === 'recompute')
    .map(({ block, t0, t1 }) => ({ block, t0, t1 }));

/** The moments of a recorded step worth stepping through: each block-level moment (its forward,
 * a re-computation, its backward) and the parts outside the blocks merged by phase. */
export function stepMoments(r) {
  const out = [];
  for (const m of r.moments) {
    const inBlock = m.chain >= 0 && m.block >= 0;
    const last = out[out.length - 1];
    if (!inBlock && last && !last.inBlock && last.phase === m.phase) {
      last.t1 = m.t1;
      last.flops += m.flops;
      continue;
    }
    if (!inBlock && m.flops === 0) continue;
    out.push({ ...m, inBlock });
  }
  return out;
}

/** Bytes of one stored block input and of one block's internals in chain c, from the recorded
 * steps under 'block' (each block keeps its input) and 'none' (each block keeps everything). */
export function blockSizes(blockTrace, noneTrace, c) {
  const input = blockTrace.blocks[c][0].kept,
    full = noneTrace.blocks[c][0].kept;
  return { input, internals: full - input };
}
