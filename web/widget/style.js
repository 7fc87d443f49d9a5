// style.js: the checkpointing widget's look, one <style> added to the document the first time a
// widget mounts (so that one script tag is all a page needs). Every rule is under .vtc, so it
// neither takes from nor leaks into the page around it. Colours pass WCAG AA contrast on white.
export const WIDGET_CSS = `
.vtc { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 14px; color: #1d232b; line-height: 1.4; min-width: 0; }
.vtc *, .vtc *::before, .vtc *::after { box-sizing: border-box; }
.vtc h2, .vtc h3, .vtc h4 { font-size: 14px; margin: 12px 0 6px; color: #4a535e; }
.vtc p { margin: 6px 0; }
.vtc .vtc-model { font-size: 13px; color: #4a535e; margin: 4px 0 8px; }
.vtc .vtc-note { color: #56606b; font-size: 12px; margin: 6px 0; }
.vtc .vtc-hidden { position: absolute !important; width: 1px; height: 1px; padding: 0; margin: -1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; border: 0; }
.vtc .vtc-controls { display: flex; gap: 8px; align-items: center; flex-wrap: wrap; margin: 6px 0; }
.vtc .vtc-controls label { font-size: 12px; color: #56606b; display: flex; gap: 6px; align-items: center; }
.vtc select, .vtc button { font: inherit; font-size: 14px; color: #1d232b; }
.vtc select { padding: 4px 6px; border: 1px solid #c4cad2; border-radius: 4px; background: #fff; max-width: 100%; }
.vtc button { padding: 6px 12px; border: 1px solid #c4cad2; border-radius: 4px; background: #fff; cursor: pointer; }
.vtc button:disabled { color: #6b7480; cursor: default; }
.vtc button:focus-visible, .vtc select:focus-visible { outline: 2px solid #2f6fde; outline-offset: 1px; }
.vtc .vtc-svgbox { width: 100%; min-width: 0; }
.vtc svg.vtc-schedule, .vtc svg.vtc-plot { display: block; max-width: 100%; height: auto; border: 1px solid #dde1e6; border-radius: 4px; background: #fff; }
.vtc svg text { font: 11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; fill: #1d232b; }
.vtc svg text.axis { fill: #56606b; }
.vtc svg text.chip { fill: #4a535e; font-size: 10.5px; }
.vtc svg text.peak-label { fill: #b02a1e; font-weight: 600; }
.vtc svg text.pt { font-size: 10.5px; }
.vtc svg rect.moment.current { stroke: #1d232b; stroke-width: 2; }
.vtc .vtc-now { min-height: 2.8em; font-size: 13px; background: #f4f6f9; border-radius: 4px; padding: 6px 10px; margin: 6px 0; }
.vtc .vtc-key { display: inline-block; width: 12px; height: 10px; vertical-align: -1px; border-radius: 2px; }
.vtc .vtc-fwd { background: #2f6fde; } .vtc .vtc-bwd { background: #8a4fd1; }
.vtc .vtc-rec { background: repeating-linear-gradient(45deg, #d9731c 0 3px, #eeb07a 3px 5px); }
.vtc .vtc-prose { max-width: 980px; }
.vtc .vtc-tablebox { width: 100%; }
.vtc table.vtc-table { border-collapse: collapse; font-size: 12px; width: 100%; font-variant-numeric: tabular-nums; }
.vtc table.vtc-table th, .vtc table.vtc-table td { text-align: right; padding: 3px 8px; border-bottom: 1px solid #dde1e6; vertical-align: top; }
.vtc table.vtc-table th:first-child, .vtc table.vtc-table td:first-child { text-align: left; }
.vtc table.vtc-table td[colspan] { text-align: left; color: #4a535e; }
.vtc .vtc-tools { display: flex; gap: 8px; margin-top: 8px; flex-wrap: wrap; align-items: center; }
.vtc .vtc-compare { display: grid; grid-template-columns: minmax(0, 560px) minmax(0, 1fr); gap: 16px; align-items: start; margin-top: 8px; }
.vtc figure { margin: 0; min-width: 0; }
.vtc figcaption { font-size: 12px; color: #56606b; margin-top: 3px; }
@media (max-width: 900px) { .vtc .vtc-compare { grid-template-columns: minmax(0, 1fr); } }
@media (max-width: 700px) {
  .vtc table.vtc-table, .vtc table.vtc-table tbody, .vtc table.vtc-table tr, .vtc table.vtc-table th, .vtc table.vtc-table td { display: block; width: 100%; text-align: left !important; }
  .vtc table.vtc-table tr:first-of-type { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
  .vtc table.vtc-table tr { border-bottom: 1px solid #c4cad2; padding: 4px 0; }
  .vtc table.vtc-table td, .vtc table.vtc-table th { border: 0; padding: 1px 4px; }
  .vtc table.vtc-table td[data-label]::before { content: attr(data-label) ": "; color: #56606b; }
}
`;

/** Adds the widget's <style> to `doc` once. */
export function injectStyle(doc = document) {
  if (doc.querySelector('style[data-vitrine-widget]')) return;
  const s = doc.createElement('style');
  s.dataset.vitrineWidget = '';
  s.textContent = WIDGET_CSS;
  (doc.head || doc.documentElement).appendChild(s);
}
