// weights.js: the weights panel -- download the model (encoder with timm keys, the full model with
// lightly keys, or the classifier with its head and class names) and load a safetensors file to
// start from (or this run's own training state to resume it).
import { $, S, setStatus, busy, page } from './state.js';
import { fmtBytes } from './plan.js';
import { trainer } from './engine-client.js';
import { budgetBytes } from './form.js';
import { drawLoss } from './charts.js';
import { renderEvals } from './class-editor.js';

function download(bytes, name) {
  const url = URL.createObjectURL(new Blob([bytes], { type: 'application/octet-stream' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

export async function onDownload(full) {
  try {
    const r = await busy('writing the weights', trainer.call('exportWeights', { full }));
    const what = r.kind === 'classifier' ? 'classifier' : full ? 'full' : 'encoder-timm';
    download(r.bytes, `vitrine-${r.kind === 'classifier' ? '' : r.kind + '-'}${what}-step${r.step}.safetensors`);
    setStatus(
      `downloaded ${
        r.kind === 'classifier'
          ? 'the classifier (timm keys, head, class names: vitrine predict --weights reads it)'
          : full
            ? 'the full model (lightly keys)'
            : 'the encoder (timm keys)'
      }: ${fmtBytes(r.bytes.length)}`,
    );
  } catch (e) {
    setStatus(e.message, true);
  }
}

/** A safetensors file into the run (set up first by ensureRun). The file is read into wasm memory
 * beside the run (twice: tried as this run's training state, whose loader checks a copy, then
 * as weights), which the plan does not hold: refused when that would pass the budget. */
export async function onLoadWeights(file, ensureRun) {
  try {
    if (S.plan && S.plan.need + 2 * file.size > budgetBytes()) {
      setStatus(
        `${file.name} (${fmtBytes(file.size)}) is read into the trainer's memory beside the run: ${fmtBytes(S.plan.need + 2 * file.size)} would pass the ${fmtBytes(budgetBytes())} budget`,
        true,
        false,
      );
      return;
    }
    if (!(await ensureRun())) return;
    const bytes = new Uint8Array(await file.arrayBuffer());
    const r = await busy(
      `loading ${file.name}`,
      trainer.call('importWeights', { bytes, name: file.name }, [bytes.buffer]),
    );
    setStatus(`loaded ${file.name} as ${r.as}`);
    S.step = r.step;
    S.losses = [];
    S.evals = [];
    S.stopped = null;
    if (S.run.cfg.kind === 'classify') {
      S.run.cfg = { ...S.run.cfg, initFrom: file.name };
      $('stat-init').textContent = file.name;
      renderEvals();
    }
    drawLoss();
    $('stat-step').textContent = `${r.step} / ${S.run.cfg.steps}`;
    page.syncButtons();
  } catch (e) {
    setStatus(e.message, true);
  }
}
