// element.js: <vitrine-checkpointing>, the checkpointing widget as an HTML element; importing this
// module defines it (its one side effect). A course page needs one script tag:
//   <script type="module" src="node_modules/vitrine/web/widget/element.js"></script>
//   <vitrine-checkpointing model="fmnist" kind="mae" batch="32" policy="block"></vitrine-checkpointing>
// Attributes: model (a preset of web/train/presets.js: fmnist, fmnist-p7, ...; or a timm preset name),
// config (the engine's JSON config instead of a preset), kind (mae | aim), batch, mask-ratio,
// policy (the schedule shown first), policies (comma-separated; default every named policy and a
// budget half way between none and block), parts (schedule, compare). Changing one records again.
// el.view is the CheckpointingView (view.js); el.ready resolves once it is drawn.
import { mount } from './view.js';

// parts is read once, when the element connects
const ATTRS = ['model', 'config', 'kind', 'batch', 'mask-ratio', 'policy', 'policies'];

export class VitrineCheckpointing extends HTMLElement {
  static get observedAttributes() {
    return ATTRS;
  }
  options() {
    const a = (n) => this.getAttribute(n),
      list = (n) =>
        a(n)
          ? a(n)
              .split(',')
              .map((s) => s.trim())
              .filter(Boolean)
          : null;
    const o = { model: a('model') || 'fmnist', kind: a('kind') || 'mae', modelName: `'${a('model') || 'fmnist'}'` };
    if (a('config')) {
      o.config = a('config'); // JSON text: a mistake in it is said in the widget, where the recording fails
      o.modelName = 'model of this page';
    }
    if (a('batch')) o.batch = Number(a('batch'));
    if (a('mask-ratio')) o.maskRatio = Number(a('mask-ratio'));
    if (a('policy')) o.policy = a('policy');
    o.policies = list('policies');
    if (list('parts')) o.parts = list('parts');
    return o;
  }
  connectedCallback() {
    if (this.view) return;
    this.view = mount(this, this.options());
    this.ready = this.view.ready;
  }
  attributeChangedCallback() {
    if (!this.view) return;
    this.ready = this.view.set(this.options());
  }
  disconnectedCallback() {
    if (this.view) this.view.destroy();
    this.view = null;
  }
}

if (globalThis.customElements && !customElements.get('vitrine-checkpointing'))
  customElements.define('vitrine-checkpointing', VitrineCheckpointing);
