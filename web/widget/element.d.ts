// Types of vitrine/widget/element (web/widget/element.js): importing it defines <vitrine-checkpointing>.
import type { CheckpointingView, WidgetOptions } from './index.js';

/** <vitrine-checkpointing model="fmnist" kind="mae" batch="32" mask-ratio="0.75" policy="block"
 * policies="none,block,sqrt" parts="schedule,compare" config="{...}">: the checkpointing widget. */
export class VitrineCheckpointing extends HTMLElement {
  static readonly observedAttributes: string[];
  /** The widget (null before the element is connected). */
  view: CheckpointingView | null;
  /** Resolves once the step is recorded and drawn. */
  ready?: Promise<CheckpointingView>;
  /** The options its attributes give. */
  options(): WidgetOptions;
}

declare global {
  interface HTMLElementTagNameMap {
    'vitrine-checkpointing': VitrineCheckpointing;
  }
}
