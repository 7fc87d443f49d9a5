// engine-client.js: the page's side of the engine workers: the trainer (worker.js: one model, the
// training loop, weights, IndexedDB), the planner (worker.js: plans configurations without growing
// the trainer's memory) and the teacher (teach-worker.js: recorded steps, step times, the lightly
// bugs live). A call is a message with an id; the reply carries it back.
import { setStatus } from './state.js';

class Rpc {
  constructor(name, onEvent, url = new URL('./worker.js', import.meta.url)) {
    this.name = name;
    this.next = 1;
    this.pending = new Map();
    this.w = new Worker(url, { type: 'module', name });
    this.w.onmessage = (e) => {
      const m = e.data;
      if (m.id && this.pending.has(m.id)) {
        const { res, rej } = this.pending.get(m.id);
        this.pending.delete(m.id);
        if (m.ok) res(m.result);
        else rej(new Error(m.error));
      } else if (onEvent) onEvent(m);
    };
    this.w.onerror = (e) => {
      e.preventDefault();
      const err = new Error(`${name} worker: ${e.message || 'failed to load (see the console)'}`);
      setStatus(err.message, true);
      for (const { rej } of this.pending.values()) rej(err);
      this.pending.clear();
    };
  }
  call(type, payload = {}, transfer = []) {
    const id = this.next++;
    return new Promise((res, rej) => {
      this.pending.set(id, { res, rej });
      this.w.postMessage({ id, type, ...payload }, transfer);
    });
  }
  post(type, payload = {}) {
    this.w.postMessage({ type, ...payload });
  } // no reply (abort)
  terminate() {
    this.w.terminate();
  }
}

/** The trainer and the planner (live bindings: the planner is replaced when its memory grew). */
export let trainer = null,
  planner = null;

/** Starts both workers' engines; resolves to the trainer's init report. */
export async function startWorkers(onTrainerEvent) {
  trainer = new Rpc('trainer', onTrainerEvent);
  // where training steps run: ?backend=webgpu|wasm|auto in the page's address (default auto: the
  // GPU when it has a hardware adapter); the planner only plans (wasm)
  const backend = new URLSearchParams(globalThis.location ? location.search : '').get('backend') || 'auto';
  const [info] = await Promise.all([trainer.call('init', { backend }), startPlanner()]);
  return info;
}
/** A fresh planner (wasm memory never shrinks: one that planned a big model is replaced). */
export function startPlanner() {
  if (planner) planner.terminate();
  planner = new Rpc('planner');
  return planner.call('init');
}
/** A teacher (teach.js replaces it with a fresh one when its memory grew: wasm memory never shrinks). */
export async function startTeacher(onEvent) {
  const t = new Rpc('teacher', onEvent, new URL('./teach-worker.js', import.meta.url));
  await t.call('init');
  return t;
}
