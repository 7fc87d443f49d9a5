// index.js: the checkpointing widget (import 'vitrine/widget'). mount(el, options) draws one
// model's recorded training step under every checkpointing policy -- the schedule block by block,
// the activation memory over the step, the policies side by side -- from an engine that records
// and never trains (no threads, no cross-origin isolation needed). The <vitrine-checkpointing>
// element is element.js (import 'vitrine/widget/element'). Also what the widget is made of, for
// apps that measure or draw it their own way: the recorded step read for teaching (trace.js),
// the measurements (measure.js), the drawings and their words (schedule.js, compare.js).
export { mount, CheckpointingView, widgetSpec, WIDGET_MODELS } from './view.js';
export { readTrace, blockMoments, recomputations, stepMoments, blockSizes, droppedBytes } from './trace.js';
export {
  recordPolicies,
  measureTimes,
  timingSummary,
  sameComputations,
  distinctPolicies,
  quantile,
  median,
  pairedRatios,
  wave,
  modelFor,
  HALF_WAY,
  AGAIN,
  BUSY,
} from './measure.js';
export { drawSchedule, describeMoment, keptText, chipText, chainName, memoryAt, COLOR } from './schedule.js';
export {
  renderCompareTable,
  drawComparePlot,
  tableRows,
  timesProse,
  sqrtProse,
  order,
  keeps,
  policyName,
  COLUMNS,
} from './compare.js';
export { MiB, fmtBytes, policyLabel, mflop, pct, ordinal, recomputeText, msText, ratioText } from './format.js';
export { injectStyle, WIDGET_CSS } from './style.js';
