// policy-control.js: the checkpointing policy of the page -- one menu of the engine's policies
// ('none' among them), K of every:K, a sentence on what the chosen one keeps and re-computes --
// and when a choice counts: a pick with the mouse at once; with the keyboard, the arrow keys only
// preview it and Enter or Tab (leaving the menu) commits it, so that walking through the list does
// not re-plan and re-apply the run's policy at every key.
import { $ } from './state.js';

export const POLICY_TEXT = {
  none: 'none: every block keeps what its backward needs. The most memory, no extra work.',
  block:
    "block (timm's and lightly's set_grad_checkpointing): each block keeps only its input. In the backward the block's " +
    'forward runs again from that input, into one block-sized slot, before its backward: about one more forward per step.',
  every:
    'every:K: only every K-th block keeps its input. In the backward a whole segment of K blocks runs forward again, ' +
    "holding all K blocks' internals at once, before the backward goes back through it.",
  sqrt:
    'sqrt: every:K with K = √depth, the textbook rule: √n stored inputs and a √n-block segment at a time, O(√n) memory ' +
    'for about one more forward.',
  selective:
    "selective: each block keeps the outputs of its matrix products (q, k, v and the MLP's first layer) and drops what " +
    'is big but cheap to redo (the attention probabilities, the GELU, the LayerNorms), re-computed in the backward.',
  auto:
    'budget: the engine searches the policies for the least re-computation whose plan fits what the browser budget leaves ' +
    'for activations (when everything fits, that is none: nothing needs re-computing).',
};
const LABEL = {
  none: 'none (keep everything)',
  block: "block (timm's set_grad_checkpointing)",
  every: 'every:K',
  sqrt: 'sqrt (every:√depth)',
  selective: 'selective',
  auto: 'budget: the least re-computation that fits',
};

/** The menu from the engine's policy names (Vitrine.policies(): none, block, every:K, sqrt, budget:BYTES, selective). */
export function fillPolicies(policies) {
  const sel = $('policy');
  sel.textContent = '';
  for (const p of policies) {
    const v = p === 'every:K' ? 'every' : p === 'budget:BYTES' ? 'auto' : p;
    sel.add(new Option(LABEL[v] || v, v));
  }
  sel.value = 'none';
  syncPolicy();
}

/** The chosen policy: 'none' | 'block' | 'every:K' | 'sqrt' | 'selective' | 'auto' (budget). */
export function policyValue() {
  const v = $('policy').value;
  return v === 'every' ? `every:${Math.max(1, Math.floor(Number($('policy-k').value) || 1))}` : v;
}
export function setPolicyValue(p) {
  const m = /^every:(\d+)$/.exec(p || 'none');
  $('policy').value = m ? 'every' : p;
  if (m) $('policy-k').value = m[1];
  syncPolicy();
}
/** The K field for every:K, its bound (the model's depth) and the sentence on the policy. */
export function syncPolicy(depth) {
  const v = $('policy').value;
  $('k-wrap').hidden = v !== 'every';
  if (depth) $('policy-k').max = String(depth);
  $('policy-desc').textContent = POLICY_TEXT[v] || '';
}

/** Calls onPreview(policy) at every change and onCommit(policy) when a choice counts (above). */
export function wirePolicy({ onPreview, onCommit }) {
  const sel = $('policy'),
    k = $('policy-k');
  let keyed = false,
    pending = false,
    last = policyValue();
  const commit = () => {
    pending = false;
    const p = policyValue();
    if (p === last) return;
    last = p;
    onCommit(p);
  };
  const changed = () => {
    syncPolicy();
    onPreview(policyValue());
    pending = true;
    if (!keyed) commit(); // a keyboard choice waits for Enter or Tab
  };
  for (const el of [sel, k]) {
    el.addEventListener('keydown', (e) => {
      keyed = true;
      if (e.key === 'Enter' && pending) {
        e.preventDefault();
        commit();
      }
    });
    el.addEventListener('pointerdown', () => {
      keyed = false;
    });
    el.addEventListener('change', changed);
    el.addEventListener('blur', () => {
      if (pending) commit();
      keyed = false;
    });
  }
  k.addEventListener('input', () => {
    keyed = true;
  });
  return {
    reset: (p) => {
      last = p;
      pending = false;
    },
  };
}
