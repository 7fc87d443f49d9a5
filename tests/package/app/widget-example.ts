// widget-example.ts: the checkpointing widget from 'vitrine/widget' (mount) and the element from
// 'vitrine/widget/element', type-checked with the DOM lib as a course page's script would be.
import { mount, timingSummary, type StepTimes } from 'vitrine/widget';
import 'vitrine/widget/element';

export async function course(el: HTMLElement, times: StepTimes): Promise<string[]> {
  const view = mount(el, { model: 'fmnist', kind: 'mae', batch: 32, policy: 'block', parts: ['schedule', 'compare'] });
  await view.ready;
  view.show('sqrt', 3);
  view.setTimes(times);
  const tag = document.createElement('vitrine-checkpointing');
  tag.setAttribute('policy', 'none');
  const policies: string[] = Object.keys(view.R ?? {});
  return policies.concat(timingSummary(times).ties.flat(), tag.view ? ['connected'] : []);
}
