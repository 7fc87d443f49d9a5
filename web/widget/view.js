// view.js: the checkpointing widget -- mount(el, options) draws, for one model and batch, the
// engine's recorded training step under each checkpointing policy: the schedule block by block
// (stepped through moment by moment, in words), the activation memory over the step, and every
// policy side by side (table, plot, why sqrt can lose to block). The recording needs one engine
// and no training: by default the widget starts its own on this thread (no threads, no
// cross-origin isolation); an app that has an engine elsewhere (the demo's teaching worker)
// passes `record` instead. Step times are the app's to measure and hand over (setTimes).
import { createVitrine } from '../runtime/create.js';
import { TRAIN_PRESETS, modelSpec } from '../train/presets.js';
import { fmtBytes, policyLabel, mflop, pct, ordinal } from './format.js';
import { recordPolicies, sameComputations } from './measure.js';
import { drawSchedule, describeMoment, chainName } from './schedule.js';
import { renderCompareTable, drawComparePlot, sqrtProse, timesProse, order, keeps } from './compare.js';
import { injectStyle } from './style.js';

let seq = 0;
const h = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs))
    if (k === 'text') e.textContent = v;
    else if (k === 'class') e.className = v;
    else e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
};

/** What createModel takes for the widget's options: spec as given, else a preset of TRAIN_PRESETS
 * (or a timm preset name) for `kind` ('mae' | 'aim'). */
export function widgetSpec({ spec = null, model = 'fmnist', kind = 'mae', config = null } = {}) {
  if (spec) return spec;
  if (config) return modelSpec(kind, { config });
  return modelSpec(kind, { preset: model });
}
export const WIDGET_MODELS = Object.keys(TRAIN_PRESETS);

export class CheckpointingView {
  /**
   * options: { model ('fmnist' ...) | spec | config, kind ('mae'), batch (32), maskRatio (0.75),
   *   policy (the schedule's first, 'block'), policies (null: every named policy and a budget half
   *   way between none and block), parts (['schedule', 'compare']), headingLevel (3),
   *   record (async ({ spec, batch, maskRatio, policies }) -> { results, dims, threads }), vitrine
   *   (an engine to record with), wasm, locateFile (for the engine the widget starts), recordNow
   *   (false: wait for set()), modelName (how the caption names the model) }
   */
  constructor(root, options = {}) {
    injectStyle(root.ownerDocument || document);
    this.root = root;
    this.opts = {
      batch: 32,
      maskRatio: 0.75,
      policy: 'block',
      parts: ['schedule', 'compare'],
      headingLevel: 3,
      ...options,
    };
    this.R = null;
    this.times = null;
    this.sched = { policy: null, index: -1, count: 0 };
    this.playing = 0;
    this.id = `vtc${++seq}`;
    this._recSeq = 0;
    this._build();
    // drawn at the width shown: drawn again when the width changes (not the height: that is the drawing's own)
    this._drawnWidth = 0;
    this._resize = new ResizeObserver(() => {
      cancelAnimationFrame(this._raf);
      this._raf = requestAnimationFrame(() => {
        if (this.box.clientWidth && this.box.clientWidth !== this._drawnWidth) this._redraw();
      });
    });
    this._resize.observe(this.box);
    // recordNow false: nothing recorded until set() (an app that sets the model itself)
    this.ready = this.opts.recordNow === false ? Promise.resolve(this) : this._handled(this.record());
  }

  _build() {
    const id = this.id,
      hl = `h${this.opts.headingLevel}`,
      parts = this.opts.parts;
    this.root.classList.add('vtc');
    this.root.textContent = '';
    this.model = h('p', { class: 'vtc-model', 'aria-live': 'polite' });
    this.root.append(this.model);
    this.box = h('div', { class: 'vtc-box' });
    this.root.append(this.box);
    if (parts.includes('schedule')) {
      this.policySel = h('select', { class: 'vtc-policy' });
      this.prev = h('button', {
        type: 'button',
        class: 'vtc-prev',
        'aria-label': 'previous moment of the step',
        text: '◀ previous',
      });
      this.playBtn = h('button', { type: 'button', class: 'vtc-play', 'aria-label': 'play the step', text: '▶ play' });
      this.next = h('button', {
        type: 'button',
        class: 'vtc-next',
        'aria-label': 'next moment of the step',
        text: 'next ▶',
      });
      this.pos = h('span', { class: 'vtc-note vtc-pos' });
      this.svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
      this.svg.setAttribute('class', 'vtc-schedule');
      this.svg.setAttribute('role', 'img');
      this.svg.setAttribute('aria-labelledby', `${id}-sched-label`);
      this.label = h('p', { id: `${id}-sched-label`, class: 'vtc-hidden' });
      this.now = h('p', { class: 'vtc-now', 'aria-live': 'polite' });
      this.prose = h('div', { class: 'vtc-prose' });
      const heading = h(hl, { id: `${id}-sched-h`, text: 'One training step, block by block' });
      this.schedPart = h(
        'section',
        { class: 'vtc-part vtc-schedule-part', 'aria-labelledby': `${id}-sched-h` },
        heading,
        h(
          'div',
          { class: 'vtc-controls', role: 'group', 'aria-label': 'the step shown' },
          h('label', {}, 'Policy shown ', this.policySel),
          this.prev,
          this.playBtn,
          this.next,
          this.pos,
        ),
        h('div', { class: 'vtc-svgbox' }, this.svg),
        this.label,
        this.now,
        h(
          'p',
          { class: 'vtc-note' },
          'Rows: the blocks (the encoder, then the MAE decoder or the AIM head); time runs left to right in proportion to the FLOPs of each kernel call. ',
          h('span', { class: 'vtc-key vtc-fwd' }),
          ' forward, ',
          h('span', { class: 'vtc-key vtc-rec' }),
          " a block's forward run again in the backward, ",
          h('span', { class: 'vtc-key vtc-bwd' }),
          ' backward. Each row says what the block keeps for its backward and what it drops (against keeping everything), to be re-computed. ' +
            'Below, the activation memory over the same time, as the textbook figure draws it: filled, what is still needed ' +
            '(it rises through the forward and falls as the backward finishes with each block; a re-computation raises it again for a while); ' +
            "dashed, what the arena has allocated (a block's buffers are given back when their scope ends, not at once); the red mark, the peak, which is what the plan reserves.",
        ),
        this.prose,
      );
      this.box.append(this.schedPart);
      this.prev.addEventListener('click', () => this.step(-1));
      this.next.addEventListener('click', () => this.step(1));
      this.playBtn.addEventListener('click', () => this.play());
      this.policySel.addEventListener('change', () => this.show(this.policySel.value, -1));
    }
    if (parts.includes('compare')) {
      this.table = h(
        'table',
        { class: 'vtc-table' },
        h('caption', { class: 'vtc-hidden', text: 'memory, re-computation and step time of every policy' }),
      );
      this.tools = h('div', { class: 'vtc-tools' });
      this.timesNote = h('p', { class: 'vtc-note vtc-times', 'aria-live': 'polite' });
      this.plot = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
      this.plot.setAttribute('class', 'vtc-plot');
      this.plot.setAttribute('role', 'img');
      this.plot.setAttribute('aria-labelledby', `${id}-plot-label`);
      this.plotLabel = h('figcaption', { id: `${id}-plot-label` });
      this.sqrt = h('div', { class: 'vtc-prose vtc-sqrt' });
      this.compareHeading = h(hl, { id: `${id}-cmp-h`, text: 'Every policy on this model' });
      this.comparePart = h(
        'section',
        { class: 'vtc-part vtc-compare-part', 'aria-labelledby': `${id}-cmp-h` },
        this.compareHeading,
        h('div', { class: 'vtc-tablebox' }, this.table),
        this.tools,
        this.timesNote,
        h('div', { class: 'vtc-compare' }, (this.figure = h('figure', {}, this.plot, this.plotLabel)), this.sqrt),
      );
      this.box.append(this.comparePart);
    }
  }

  /** Records the step under every policy of the options (again, after set()); resolves when drawn. */
  async record() {
    const o = this.opts,
      mine = ++this._recSeq;
    this.model.textContent = 'recording the step…';
    try {
      const spec = widgetSpec(o);
      const res = await this._recorder()({
        spec,
        batch: o.batch,
        maskRatio: o.maskRatio,
        policies: o.policies || null,
      });
      if (mine !== this._recSeq) return this;
      this._show(res, spec);
    } catch (e) {
      if (mine === this._recSeq) this.model.textContent = `The step could not be recorded: ${e.message}`;
      throw e;
    }
    return this;
  }

  _show(res, spec) {
    const o = this.opts;
    this.spec = spec;
    this.R = res.results;
    this.dims = res.dims;
    this.threads = res.threads;
    this.times = null;
    const d = res.dims;
    this.model.textContent =
      `${spec.kind === 'timm' ? 'classifier' : spec.kind.toUpperCase()} ${o.modelName || (o.spec ? 'model' : `'${o.model || 'fmnist'}'`)}: ` +
      `${d.img} px images, patch ${d.patch}, width ${d.dim}, ${d.depth} encoder blocks; batch ${o.batch}` +
      (spec.kind === 'mae' ? `, mask ratio ${o.maskRatio}` : '') +
      `. Recorded by the engine${res.threads ? ` at ${res.threads} thread${res.threads > 1 ? 's' : ''}` : ''}.`;
    this._fillPolicies();
    const first = this.R[o.policy] ? o.policy : 'block' in this.R ? 'block' : 'none';
    if (this.svg) this.show(first, -1);
    this.renderCompare();
    this.root.dispatchEvent(new CustomEvent('vitrine-recorded', { detail: { results: this.R } }));
  }

  /** Shows recorded results the app already has ({ results, dims, threads }, as `record` returns them) without recording. */
  setResults(res, options = {}) {
    Object.assign(this.opts, options);
    ++this._recSeq;
    this._show(res, this.opts.spec || widgetSpec(this.opts));
    this.ready = Promise.resolve(this);
    return this;
  }

  _recorder() {
    if (this.opts.record) return this.opts.record;
    return async (req) => {
      if (!this._vt)
        this._vt =
          this.opts.vitrine ||
          (await createVitrine({ threads: 1, wasm: this.opts.wasm, locateFile: this.opts.locateFile }));
      return recordPolicies(this._vt, req);
    };
  }

  /** New options (model, kind, spec, batch, maskRatio, policies, policy): recorded again. */
  set(options) {
    Object.assign(this.opts, options);
    this.ready = this._handled(this.record());
    return this.ready;
  }
  // a failed recording is said in the widget; its promise still rejects for whoever awaits it, and
  // is not an unhandled rejection for whoever does not
  _handled(p) {
    p.catch(() => {});
    return p;
  }

  /** One more policy recorded and added (the app's own choice; `note` follows its name in the table). */
  async addPolicy(policy, note = null) {
    if (!this.R) await this.ready;
    if (!this.R[policy]) {
      const res = await this._recorder()({
        spec: this.spec,
        batch: this.opts.batch,
        maskRatio: this.opts.maskRatio,
        policies: [policy],
      });
      this.R[policy] = { ...res.results[policy], ...(note ? { note } : {}) };
      sameComputations(this.R);
      this._fillPolicies();
      this.renderCompare();
    }
    return this.R[policy];
  }

  _fillPolicies() {
    if (!this.policySel) return;
    const sel = this.policySel;
    sel.textContent = '';
    for (const p of order(Object.keys(this.R), this.R.none.chains[0].depth)) sel.add(new Option(policyLabel(p), p));
  }

  _width(node) {
    return Math.max(300, node.clientWidth || this.root.clientWidth || 1000);
  }
  _redraw() {
    if (!this.R) return;
    this._drawnWidth = this.box.clientWidth;
    if (this.svg && this.sched.policy) this.show(this.sched.policy, this.sched.index, { quiet: true });
    if (this.plot) drawComparePlot(this.plot, this.R, this.times, { width: this._width(this.figure) });
  }

  /** The schedule of `policy` with moment `index` highlighted (-1: none; the whole step in words). */
  show(policy, index = -1, { quiet = false } = {}) {
    const R = this.R,
      r = R && R[policy];
    if (!r || !this.svg) return;
    this.sched.policy = policy;
    this.sched.index = index;
    this._drawnWidth = this.box.clientWidth;
    this.policySel.value = policy;
    const ymax = Math.max(...Object.values(R).map((x) => x.peak.bytes));
    const { moments } = drawSchedule(this.svg, r, {
      cursor: index,
      ymax,
      none: R.none,
      width: this._width(this.svg.parentNode),
    });
    this.sched.count = moments.length;
    this.pos.textContent =
      index < 0 ? `${moments.length} moments: step through them` : `moment ${index + 1} of ${moments.length}`;
    const rec = r.moments.filter((m) => m.phase === 'recompute');
    this.label.textContent =
      `The recorded training step under '${policyLabel(policy)}': ${r.chains.map((c, i) => `${c.depth} ${chainName(r, i)} block${c.depth === 1 ? '' : 's'}`).join(' and ')}; ` +
      (rec.length
        ? `re-computed in the backward: ${rec.map((m) => `${chainName(r, m.chain)} block ${m.block}`).join(', ')}, each just before its backward; `
        : 'nothing is re-computed; ') +
      `activation arena peak ${fmtBytes(r.peak.bytes)} (the plan: ${fmtBytes(r.planned)}); ` +
      `${mflop(r.flops.forward)} forward, ${mflop(r.flops.recompute)} re-computed, ${mflop(r.flops.backward)} backward.`;
    if (!quiet) {
      this.now.textContent = index < 0 ? this.label.textContent : describeMoment(r, moments[index]);
      this.prose.innerHTML = this.policyProse(policy);
      this.root.dispatchEvent(new CustomEvent('vitrine-moment', { detail: { policy, index } }));
    }
  }
  step(d) {
    if (!this.R || !this.sched.policy) return;
    const i = Math.max(0, Math.min(this.sched.count - 1, this.sched.index + d));
    this.show(this.sched.policy, i);
  }
  play() {
    if (this.playing) {
      clearInterval(this.playing);
      this.playing = 0;
      this.playBtn.textContent = '▶ play';
      this.playBtn.setAttribute('aria-label', 'play the step');
      return;
    }
    if (!this.R) return;
    if (this.sched.index >= this.sched.count - 1) this.sched.index = -1;
    this.playBtn.textContent = '❚❚ pause';
    this.playBtn.setAttribute('aria-label', 'pause the step');
    this.playing = setInterval(() => {
      if (this.sched.index >= this.sched.count - 1) this.play();
      else this.step(1);
    }, 900);
  }

  /** The shown policy in words, with this model's numbers. */
  policyProse(policy) {
    const R = this.R,
      r = R[policy],
      fwd = R.none.flops.forward,
      rec = `${pct(r.flops.recompute, fwd)} of a forward`;
    if (r.same)
      return `<p>This is the same computation as <code>${policyLabel(r.same)}</code>: the same kernel calls in the same order, peak ${fmtBytes(r.peak.bytes)}.</p>`;
    if (policy === 'none')
      return `<p>Without checkpointing every block keeps what its backward needs: the memory climbs through the forward to ${fmtBytes(r.peak.bytes)} and nothing is computed twice.</p>`;
    if (policy.startsWith('budget:'))
      return (
        `<p>The budget search was given ${fmtBytes(Number(policy.slice(7)))} for activations and chose the least re-computation that fits; the encoder keeps ${keeps(r)}. It re-computes ${rec}` +
        `${r.flops.recompute ? '' : ': nothing needed re-computing'}, peak ${fmtBytes(r.peak.bytes)}.</p>`
      );
    const what =
      policy === 'selective'
        ? 'Each block keeps the outputs of its matrix products and re-computes the rest (attention probabilities, GELU, LayerNorms) just before its backward'
        : r.chains[0].segment > 1
          ? `Only every ${ordinal(r.chains[0].segment)} block keeps its input; a whole segment runs forward again before its backward`
          : 'Each block keeps only its input; its forward runs again just before its backward';
    return `<p>${what}. Peak ${fmtBytes(r.peak.bytes)} against ${fmtBytes(R.none.peak.bytes)} without checkpointing, for ${rec} more work.</p>`;
  }

  /** Step times ({ ms, again } of measureTimes; null: none): the table, the plot and their words again. */
  setTimes(times) {
    this.times = times;
    this.renderCompare();
  }
  renderCompare() {
    if (!this.table || !this.R) return;
    const R = this.R,
      measured = !!(this.times && this.times.ms && this.times.ms.none && this.times.ms.none.length);
    renderCompareTable(this.table, R, this.times);
    drawComparePlot(this.plot, R, this.times, { width: this._width(this.figure) });
    const pts = Object.entries(R)
      .map(([p, r]) => `${policyLabel(p)} ${fmtBytes(r.peak.bytes)}`)
      .join(', ');
    this.plotLabel.textContent =
      `Arena peak against ${measured ? 'measured step time' : 'FLOPs per step'}, one point per computation (${pts}); ` +
      'the orange curve joins every:K from K = 1 (block) to the depth; the ring is sqrt.';
    this.timesNote.textContent = timesProse(R, this.times);
    this.sqrt.innerHTML = sqrtProse(R);
  }

  destroy() {
    this._resize.disconnect();
    if (this.playing) this.play();
    if (this._vt && !this.opts.vitrine) this._vt.close();
    this._vt = null;
    this.root.textContent = '';
  }
}

/** mount(el, options) -> CheckpointingView (its `ready` resolves once the step is recorded and drawn). */
export const mount = (el, options = {}) => new CheckpointingView(el, options);
