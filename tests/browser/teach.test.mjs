// teach.test.mjs: the demo's lesson and its "How checkpointing works" view in headless Debian
// Chromium (playwright-core), one browser for the file. Checks: the guided lesson opens on the
// problem (the default model at batch 384 in a phone's 256 MB: refused, with the numbers) and
// goes, by next / back, to a run under block that fits and trains; every figure the page shows of
// that run (the lesson, the refusal, the memory panel, the comparison, the schedule) agrees with
// the others and with an engine asked in the page; the schedule drawn for 'block' and 'every:2'
// re-computes the blocks the engine's recorded step re-computes, at its moments (the list recorded
// again here through Model.traceStep and read without the page's code), each just before its
// backward; every policy but none re-computes; a budget that keeps everything is none and is not
// raced; step times measured in interleaved rounds, none twice; the mask demonstration differs
// without the mask and is bit for bit the same checkpointed; behind a frozen preprocessing the
// re-entrant checkpoint's computation loses exactly the blocks' gradients, vitrine's keeps them;
// keyboard alone adds images and trains, the focus handed from Start to Pause and back, the policy
// applied on commit and its status never stale; axe-core finds no violation; at 1400 x 1000 and
// 390 px wide nothing sticks out, no drawing's words leave it or overlap, no menu cuts its text
// (screenshots build/demo-teach-*.png). Skipped only when /usr/bin/chromium is absent.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { BUILD, ROOT, skip, png, openDemoBrowser } from './harness.mjs';
import { median, pairedRatios } from '../../web/widget/index.js';

const AXE = join(ROOT, 'node_modules/axe-core/axe.min.js');

if (skip) console.log(`# ${skip}`);

describe('browser demo: the lesson and how checkpointing works', { skip, timeout: 420_000 }, () => {
  let page, profile, errors, close, waitFor, openPage, reset, switchPolicyAt;
  const choosers = [];
  const S = (fn, arg) => page.evaluate(fn, arg);
  const shot = async (sel, name) => (await page.$(sel)).screenshot({ path: join(BUILD, `demo-${name}.png`) });
  const teachReady = () =>
    waitFor(
      () => window.vitrineDemo.teach && window.vitrineDemo.teach.R && window.vitrineDemo.teach.R.none,
      null,
      90_000,
    );
  const W = '#teach-widget';

  before(async () => {
    let wait;
    ({ page, profile, errors, close, waitFor: wait, openPage, reset, switchPolicyAt } = await openDemoBrowser());
    // a wait that times out says where the page was
    waitFor = (fn, arg, timeout) =>
      wait(fn, arg, timeout).catch(async (e) => {
        const st = await page.evaluate(() => ({
          status: document.getElementById('status').textContent,
          step: window.vitrineDemo.step,
          policy: window.vitrineDemo.policy,
          busy: window.vitrineDemo.busy,
          running: window.vitrineDemo.running,
          error: window.vitrineDemo.error,
          focus: document.activeElement && document.activeElement.id,
        }));
        throw new Error(`${e.message}: ${JSON.stringify(st)}`);
      });
    // file pickers, intercepted from the start: Playwright turns Chromium's interception on with the first
    // listener, and a picker opened while that is still on its way is not reported
    page.on('filechooser', (c) => choosers.push(c));
    await page.setViewportSize({ width: 1400, height: 1000 });
    await openPage();
    await teachReady();
  });
  after(async () => {
    if (close) await close();
  });

  // everything on the page that could be cut off, stick out or overlap: [] when nothing does
  const layoutProblems = () =>
    S(() => {
      const out = [],
        vw = document.documentElement.clientWidth,
        shown = (e) => e.getClientRects().length && !e.closest('.visually-hidden, .vtc-hidden, [hidden]');
      if (document.documentElement.scrollWidth > vw + 1)
        out.push(`the page is ${document.documentElement.scrollWidth} px wide in a ${vw} px viewport`);
      for (const e of document.querySelectorAll('main *, header *')) {
        if (!shown(e)) continue;
        const r = e.getBoundingClientRect();
        if (r.width > 0 && (r.right > vw + 1 || r.left < -1))
          out.push(
            `${e.tagName.toLowerCase()}#${e.id}.${e.className.baseVal ?? e.className}: ${r.left.toFixed(0)}–${r.right.toFixed(0)} px`,
          );
        const cs = getComputedStyle(e);
        if (
          e.children.length === 0 &&
          (cs.overflowX === 'hidden' || cs.textOverflow === 'ellipsis') &&
          e.scrollWidth > e.clientWidth + 1
        )
          out.push(`${e.tagName.toLowerCase()}#${e.id}: its text is cut (${e.scrollWidth} > ${e.clientWidth})`);
      }
      // a drawing's words: inside it, none over another
      for (const svg of document.querySelectorAll('svg')) {
        if (!shown(svg)) continue;
        const vb = svg.viewBox.baseVal,
          ts = [...svg.querySelectorAll('text')]
            .filter((t) => t.textContent)
            .map((t) => ({ t: t.textContent, b: t.getBBox() }));
        for (const { t, b } of ts)
          if (
            b.x < vb.x - 0.5 ||
            b.y < vb.y - 0.5 ||
            b.x + b.width > vb.x + vb.width + 0.5 ||
            b.y + b.height > vb.y + vb.height + 0.5
          )
            out.push(`'${t}' leaves its drawing (${svg.getAttribute('class') || svg.id})`);
        for (let i = 0; i < ts.length; i++)
          for (let j = i + 1; j < ts.length; j++) {
            const [p, q] = [ts[i].b, ts[j].b];
            const w = Math.min(p.x + p.width, q.x + q.width) - Math.max(p.x, q.x),
              h = Math.min(p.y + p.height, q.y + q.height) - Math.max(p.y, q.y);
            if (w > 1 && h > 2) out.push(`'${ts[i].t}' overlaps '${ts[j].t}'`);
          }
      }
      // a menu shows its whole choice
      const ctx = document.createElement('canvas').getContext('2d');
      for (const sel of document.querySelectorAll('select')) {
        if (!shown(sel) || sel.selectedIndex < 0) continue;
        const cs = getComputedStyle(sel),
          text = sel.options[sel.selectedIndex].text;
        ctx.font = `${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
        const w = ctx.measureText(text).width,
          room = sel.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight) - 18; // the arrow
        if (w > room)
          out.push(`menu #${sel.id || sel.className}: '${text}' needs ${w.toFixed(0)} px, has ${room.toFixed(0)}`);
      }
      return out;
    });
  const axeViolations = async () => {
    if (!(await S(() => !!window.axe))) await page.addScriptTag({ path: AXE });
    return S(async () =>
      (await window.axe.run(document, { resultTypes: ['violations'] })).violations.map(
        (v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`,
      ),
    );
  };
  const cells = (sel) =>
    S(
      (sel) =>
        Object.fromEntries(
          [...document.querySelectorAll(`${sel} tr[data-policy]`)].map((tr) => [
            tr.dataset.policy,
            [...tr.children].map((c) => c.textContent),
          ]),
        ),
      sel,
    );

  test('the lesson: refused with the numbers in a phone’s 256 MB, then block fits and trains; every figure agrees with the engine', async () => {
    await waitFor(() => window.vitrineDemo.lesson.plans, null, 60_000);
    assert.match(await page.textContent('#lesson-title'), /^1\. The problem/);
    const before = await page.textContent('#lesson-body');
    const need = /the trainer needs ([\d.]+ MiB), ([\d.]+ MiB) of it activations/.exec(before);
    assert.ok(need, before);
    assert.equal(await page.getAttribute('#lesson-back', 'aria-disabled'), 'true');
    await shot('#lesson-panel', 'teach-lesson-1');
    // Try it: the lesson's run in the form, Start pressed, refused before it runs
    await page.click('#lesson-try');
    await waitFor(() => window.vitrineDemo.lesson.refused, null, 60_000);
    const refusal = await page.textContent('#refusal-text');
    assert.match(
      refusal,
      new RegExp(
        `^Refused before running\\. Does not fit: with checkpointing 'none' and batch 384 the trainer needs ${need[1]} \\(`,
      ),
    );
    assert.match(refusal, new RegExp(`activations ${need[2]}`));
    assert.match(refusal, /the budget is 256\.0 MiB/);
    assert.equal(await S(() => !!window.vitrineDemo.run), false, 'nothing ran');
    assert.match(await page.textContent('#lesson-body'), /The page said: Does not fit/);
    assert.equal(await page.inputValue('#batch'), '384');
    assert.equal(await page.inputValue('#budget'), '256');
    // the memory panel says the same of the same run
    await waitFor(() => document.querySelector('#policy-table tr[data-policy="none"]'));
    const mem = await cells('#policy-table');
    assert.equal(mem.none[1], need[2], 'activations');
    assert.equal(mem.none[3], need[1], 'training');
    assert.equal(mem.none[5], 'no');
    assert.equal(mem.block[5], 'yes');
    // steps 2 and 3: the lesson's model recorded, drawn under none
    await page.click('#lesson-next');
    await waitFor(() => !document.getElementById('lesson-figure').hidden, null, 60_000);
    assert.match(await page.textContent('#lesson-title'), /^2\. What a block keeps/);
    await page.click('#lesson-next');
    const step3 = await page.textContent('#lesson-body');
    const peakNone = /to its peak, ([\d.]+ MiB)/.exec(step3)[1];
    assert.equal(peakNone, need[2], 'the peak of the step is its activations');
    await page.click('#lesson-back');
    assert.match(await page.textContent('#lesson-title'), /^2\./);
    await page.click('#lesson-next');
    await page.click('#lesson-next');
    assert.match(await page.textContent('#lesson-title'), /^4\. What block drops/);
    const step4 = await page.textContent('#lesson-body');
    const b4 =
      /The peak falls from ([\d.]+ MiB) to ([\d.]+ MiB), and the trainer needs ([\d.]+ MiB) of the 256\.0 MiB: it fits/.exec(
        step4,
      );
    assert.ok(b4, step4);
    assert.equal(b4[1], peakNone);
    assert.equal(mem.block[1], b4[2], "the memory panel's activations under block are the recorded peak");
    assert.equal(mem.block[3], b4[3]);
    await shot('#lesson-panel', 'teach-lesson-4');
    // Train with block: it fits and trains
    await page.click('#lesson-train');
    await waitFor(
      () => window.vitrineDemo.losses.filter((l) => l.policy === 'block').length >= 2 || window.vitrineDemo.error,
      null,
      120_000,
    );
    assert.equal(await S(() => window.vitrineDemo.error), null);
    assert.equal(await S(() => window.vitrineDemo.run.cfg.batch), 384);
    assert.match(await page.textContent('#status'), /^training… checkpointing 'block'/);
    assert.match(await page.textContent('#lesson-body'), /Training under block: step \d+, loss [\d.]+/);
    // the figures of this run against an engine asked in the page: the plan's activations and re-computed FLOPs, the recorded peak
    const eng = await S(async () => {
      const { createVitrine } = await import('/web/vitrine.js');
      const { TRAIN_PRESETS } = await import('/web/train/presets.js');
      const { fmtBytes, mflop, readTrace } = await import('/web/widget/index.js');
      const vt = await createVitrine();
      const p = TRAIN_PRESETS.fmnist,
        m = vt.createModel({ kind: 'mae', config: { encoder: { ...p.encoder }, ...p.mae } });
      m.initWeights(1);
      m.trainerInit({ maskRatio: 0.75 });
      const out = {};
      for (const pol of ['none', 'block', 'sqrt', 'selective']) {
        m.setGradCheckpointing(pol);
        const plan = m.planTrainStep({ batch: 384 }),
          r = readTrace(m.traceStep({ batch: 384, json: true }));
        out[pol] = {
          act: fmtBytes(plan.activations),
          peak: fmtBytes(r.peak.bytes),
          rec: mflop(plan.recomputeFlops),
          recRecorded: mflop(r.flops.recompute),
        };
      }
      m.dispose();
      vt.close();
      return out;
    });
    await waitFor(
      () => window.vitrineDemo.teach.R && window.vitrineDemo.teach.R.block && window.vitrineDemo.teach.pc.batch === 384,
    );
    const cmp = await cells(`${W} table.vtc-table`),
      mem2 = await cells('#policy-table');
    const sched = await page.textContent(`${W} .vtc-schedule-part [id$="-sched-label"]`);
    for (const pol of ['none', 'block', 'sqrt', 'selective']) {
      assert.equal(eng[pol].act, eng[pol].peak, `${pol}: planned activations are the recorded peak`);
      assert.equal(eng[pol].rec, eng[pol].recRecorded, `${pol}: planned re-computation is the recorded one`);
      assert.equal(mem2[pol][1], eng[pol].act, `${pol}: the memory panel's activations`);
      assert.equal(cmp[pol][2], eng[pol].peak, `${pol}: the comparison's arena peak`);
      if (pol !== 'none') {
        assert.ok(mem2[pol][2].startsWith(eng[pol].rec), `${pol}: memory panel re-computed ${mem2[pol][2]}`);
        assert.ok(cmp[pol][3].startsWith(eng[pol].rec), `${pol}: comparison re-computed ${cmp[pol][3]}`);
        assert.equal(mem2[pol][2], cmp[pol][3], `${pol}: one text for the re-computation`);
      }
    }
    assert.match(
      sched,
      new RegExp(
        `^The recorded training step under 'block':.*activation arena peak ${eng.block.peak} \\(the plan: ${eng.block.act}\\)`,
      ),
    );
    // the summary speaks of the same numbers as the table's row
    const sum = await page.textContent('#mem-summary');
    assert.match(sum, new RegExp(`^The trainer under 'block' at batch 384 will hold ${mem2.block[3]} while training`));
    // step 5: the cost, measured on this run; step 6: sqrt
    await page.click('#lesson-next');
    await waitFor(
      () =>
        /This run measured [\d.]+ ms \([\d.]+–[\d.]+\) a step under block/.test(
          document.getElementById('lesson-body').textContent,
        ),
      null,
      120_000,
    );
    await page.click('#lesson-next');
    assert.match(await page.textContent('#lesson-body'), /only in chains deeper than r² ≈ \d+ blocks/);
    assert.equal(await page.getAttribute('#lesson-next', 'aria-disabled'), 'true');
    await shot('#lesson-panel', 'teach-lesson-6');
    await page.click('#pause');
    await waitFor(() => !window.vitrineDemo.running);
    await reset();
    // back to the explorer's default run
    await page.fill('#batch', '32');
    await page.selectOption('#budget', '1024');
    await page.selectOption('#policy', 'none');
    await waitFor(() => window.vitrineDemo.teach.pc && window.vitrineDemo.teach.pc.batch === 32, null, 60_000);
    assert.deepEqual(errors, []);
  });

  // the recorded step of the page's model, again, straight from the engine: the blocks' re-computations
  // as (chain, block, t0, t1) in FLOPs from the start, merging consecutive calls of one block
  const recorded = (policy) =>
    S(async (policy) => {
      const { createVitrine } = await import('/web/vitrine.js');
      const { TRAIN_PRESETS } = await import('/web/train/presets.js');
      const vt = await createVitrine({ threads: 1 });
      const p = TRAIN_PRESETS.fmnist,
        m = vt.createModel({ kind: 'mae', config: { encoder: { ...p.encoder }, ...p.mae } });
      m.initWeights(1);
      m.trainerInit({ maskRatio: 0.75 });
      m.setGradCheckpointing(policy);
      const t = m.traceStep({ batch: 32, json: true });
      m.dispose();
      vt.close();
      const out = [],
        order = [];
      let now = 0;
      for (const e of t.entries) {
        if (e.call === undefined) continue;
        if (e.block >= 0 && e.phase !== 'optimizer') {
          const last = order[order.length - 1];
          if (!last || last.phase !== e.phase || last.chain !== e.chain || last.block !== e.block)
            order.push({ phase: e.phase, chain: e.chain, block: e.block });
        }
        if (e.phase === 'recompute') {
          const last = out[out.length - 1];
          if (last && last.chain === e.chain && last.block === e.block && last.t1 === now) last.t1 += e.flops;
          else out.push({ chain: e.chain, block: e.block, t0: now, t1: now + e.flops });
        }
        now += e.flops;
      }
      return { rec: out, order, total: now };
    }, policy);
  const drawn = () =>
    S(() =>
      [...document.querySelectorAll('#teach-widget svg.vtc-schedule rect.moment')].map((r) => ({
        phase: r.dataset.phase,
        chain: Number(r.dataset.chain),
        block: Number(r.dataset.block),
        t0: Number(r.dataset.t0),
        t1: Number(r.dataset.t1),
      })),
    );

  for (const [choose, policy] of [
    [['block'], 'block'],
    [['every', 2], 'every:2'],
  ]) {
    test(`the schedule of '${policy}' re-computes what the recorded step re-computes, each block just before its backward`, async () => {
      await page.selectOption('#policy', choose[0]);
      if (choose[1]) {
        await page.fill('#policy-k', String(choose[1]));
        await page.press('#policy-k', 'Enter');
      }
      await waitFor((p) => window.vitrineDemo.teach.view.sched.policy === p, policy, 30_000);
      const want = await recorded(policy),
        rects = await drawn();
      const rec = rects
        .filter((r) => r.phase === 'recompute')
        .map(({ chain, block, t0, t1 }) => ({ chain, block, t0, t1 }));
      assert.deepEqual(rec, want.rec, 'the re-computations drawn are the recorded ones, at the recorded FLOPs');
      assert.equal(Math.max(...rects.map((r) => r.t1)), want.total);
      // in the drawing's order: forward of every block, then per block (segment) re-computation before backward
      const seq = rects.filter((r) => r.block >= 0).map(({ phase, chain, block }) => ({ phase, chain, block }));
      assert.deepEqual(seq, want.order);
      const enc = seq
        .filter((r) => r.chain === 0 && r.phase !== 'forward')
        .map((r) => `${r.phase[0]}${r.block}`)
        .join(' ');
      if (policy === 'block')
        assert.equal(enc, 'b3 r2 b2 r1 b1 r0 b0', 'the last block is not re-run: its internals are still in the slot');
      else assert.equal(enc, 'r2 r3 b3 b2 r0 r1 b1 b0', 'a 2-block segment runs forward again, then its backward');
      // every block's row names what it keeps and what it drops, in the same form
      const chips = await S(() =>
        [...document.querySelectorAll('#teach-widget svg.vtc-schedule text.chip')].map((t) => t.textContent),
      );
      assert.equal(chips.length, 6);
      for (const c of chips)
        assert.match(
          c,
          /^keeps [\d.]+ [KM]iB \((input|output|nothing|everything)\) · drops ([\d.]+ [KM]iB|nothing)$/,
          c,
        );
      assert.ok(
        chips.slice(0, 4).some((c) => /drops [\d.]+ MiB/.test(c)),
        chips.join(' | '),
      );
      // the memory as the textbook draws it: still needed (filled) under what is allocated (dashed)
      assert.equal(
        await S(
          () =>
            document.querySelectorAll(
              '#teach-widget svg.vtc-schedule path.live, #teach-widget svg.vtc-schedule path.allocated',
            ).length,
        ),
        2,
      );
      await shot(`${W} .vtc-schedule-part`, `teach-schedule-${policy.replace(':', '')}`);
      // stepping through it: the moment's words name the block
      await page.click(`${W} .vtc-next`);
      await page.click(`${W} .vtc-next`);
      assert.match(await page.textContent(`${W} .vtc-now`), /Forward of encoder block 0/);
    });
  }

  test('every policy but none re-computes; a budget that keeps everything is none, not raced; step times in interleaved rounds, none twice', async () => {
    const rows = await S(() =>
      [...document.querySelectorAll('#teach-widget table.vtc-table tr[data-policy]')].map((tr) => ({
        p: tr.dataset.policy,
        rec: Number(tr.querySelector('[data-recompute]').dataset.recompute),
      })),
    );
    const policies = rows.map((r) => r.p);
    for (const p of ['none', 'block', 'sqrt', 'selective', 'every:2', 'every:3', 'every:4'])
      assert.ok(policies.includes(p), `${p} in ${policies}`);
    assert.ok(policies.some((p) => p.startsWith('budget:')));
    for (const r of rows) assert.ok(r.p === 'none' ? r.rec === 0 : r.rec > 0, `${r.p}: ${r.rec} FLOPs re-computed`);
    assert.match(await page.textContent(`${W} .vtc-sqrt`), /Why sqrt (loses to|beats) block here/);
    // the budget half way between none and block says so, and only it
    const names = await cells(`${W} table.vtc-table`);
    assert.equal(Object.values(names).filter((c) => / \(half way between none and block\)$/.test(c[0])).length, 1);
    // budget at the default 1 GB: everything fits; the page says it is the computation of none, and the table too
    await page.selectOption('#policy', 'auto');
    await waitFor(
      () =>
        /budget search chose to keep everything: the same computation as none/.test(
          document.getElementById('mem-summary').textContent,
        ),
      null,
      30_000,
    );
    const auto = await S(() => window.vitrineDemo.plan.policy);
    await waitFor(
      (p) => !!document.querySelector(`#teach-widget tr[data-policy="${p}"][data-same="none"]`),
      auto,
      30_000,
    );
    await page.selectOption('#policy', 'none');
    // a wait over a second shows the progress bar and what is being waited for; the button stops it
    const measuring = () =>
      waitFor(
        () =>
          !document.getElementById('progress').hidden &&
          /^timing \d+ policies, \d+ interleaved rounds .*… \d+ s/.test(
            document.getElementById('progress-text').textContent,
          ),
        null,
        30_000,
      );
    await page.click('#measure-times');
    await measuring();
    assert.equal(await page.textContent('#measure-times'), 'Stop measuring');
    await page.click('#measure-times');
    await waitFor(
      () => /^Stopped after \d+ of \d+ rounds\. Each policy/.test(document.getElementById('times-note').textContent),
      null,
      30_000,
    );
    await waitFor(
      () => document.getElementById('measure-times').textContent === 'Measure the step time of every policy',
    );
    await page.click('#measure-times');
    await measuring();
    await waitFor(
      () => window.vitrineDemo.teach.times && /^Each/.test(document.getElementById('times-note').textContent),
      null,
      200_000,
    );
    const { ms: times, again } = await S(() => window.vitrineDemo.teach.times);
    assert.ok(!(auto in times), 'the budget that is none was not timed');
    const timed = Object.keys(times);
    for (const p of timed)
      assert.ok(
        times[p].length >= 3 && times[p].length === times.none.length && times[p].every((ms) => ms > 0),
        `${p}: ${times[p]}`,
      );
    assert.equal(again.length, times.none.length, 'none timed twice every round');
    assert.match(
      await page.textContent('#times-note'),
      /rounds timing one step of every policy, and none a second time/,
    );
    assert.match(
      await page.textContent(`${W} .vtc-times`),
      /^Timing none twice in each round, the second timing over the first had a median of [\d.]+× and a middle half of [\d.]+–[\d.]+×/,
    );
    // against none: the median of the rounds' ratios, and whether this machine can tell it from none
    const vsNone = await cells(`${W} table.vtc-table`);
    for (const p of timed.filter((q) => q !== 'none'))
      assert.ok(vsNone[p][5].startsWith(`${median(pairedRatios(times, p)).toFixed(2)}×`), `${p}: ${vsNone[p][5]}`);
    assert.match(vsNone[auto][4], /^the same computation as none/);
    // the one figure beside Start is now this measurement
    assert.match(
      await page.textContent('#expect'),
      /^Measured below: [\d.]+ ms \([\d.]+–[\d.]+\) per step under 'none'/,
    );
    await shot('#teach-panel', 'teach');
  });

  test('the two bugs: without the mask the outputs differ, checkpointed with it the same bits; behind frozen preprocessing the re-entrant checkpoint loses the blocks’ gradients', async () => {
    await page.click('#run-mask');
    await waitFor(() => window.vitrineDemo.teach.mask, null, 60_000);
    const r = await S(() => window.vitrineDemo.teach.mask);
    assert.ok(r.dropped.outMax > 0 && r.dropped.gradMax > 0, JSON.stringify(r.dropped));
    assert.equal(r.dropped.rowsDiffer, r.tokens);
    assert.equal(r.ckpt.outMax, 0);
    assert.equal(r.ckpt.gradMax, 0);
    assert.ok(r.ckpt.outSame && r.ckpt.gradSame, 'checkpointed: outputs and gradients bit for bit');
    assert.match(await page.textContent('#mask-result'), /yes: outputs and all \d+ gradients/);
    assert.match(
      await page.textContent('#bug-mask svg.rowchart'),
      /largest \|output difference\| in the token/,
      'the chart says what its bars are',
    );
    await page.click('#run-frozen');
    await waitFor(() => window.vitrineDemo.teach.frozen, null, 60_000);
    const f = await S(() => window.vitrineDemo.teach.frozen);
    assert.equal(f.patchGrad, false);
    assert.equal(f.inputNeedsGrad, false);
    assert.ok(
      f.frozen.some((n) => /patch_embed/.test(n)) && f.frozen.some((n) => /cls_token/.test(n)),
      f.frozen.join(),
    );
    assert.ok(
      f.ckpt.every((n) => n > 0),
      `every checkpointed block gets a gradient: ${f.ckpt}`,
    );
    assert.equal(f.same, true);
    assert.equal(f.lossSame, true);
    // the pre-fix computation: exactly the encoder blocks' tensors have no gradient; everything else the same bits
    const inBlocks = f.tensors.filter((t) => t.block >= 0);
    assert.equal(inBlocks.length, 12 * f.depth);
    assert.ok(inBlocks.every((t) => t.bug === null && t.fixed > 0 && !t.same));
    assert.ok(f.tensors.filter((t) => t.block < 0).every((t) => t.same));
    assert.deepEqual(
      f.differ,
      inBlocks.map((t) => t.name),
    );
    const table = await page.textContent('#frozen-result');
    assert.match(table, /encoder block 0 \(12 tensors\)[\d.e-]+no gradientyes: 12 of 12/);
    assert.match(table, /the rest: final norm, decoder \/ head \(\d+ tensors\)[\d.e-]+[\d.e-]+no: the same bits/);
    await page.click('#frozen-differ summary');
    assert.match(await page.textContent('#frozen-differ'), /blocks\.0\.attn\.qkv\.weight/);
    await shot('.bugs', 'teach-bugs');
    assert.deepEqual(errors, []);
  });

  test('axe-core finds no violation; at 1400 x 1000 and 390 px wide nothing sticks out, no words leave their drawing or overlap, no menu cuts its choice', async () => {
    // the lesson at its refusal and the explorer with everything drawn (the times and both bugs, above)
    await page.click('#lesson-back');
    await page.click('#lesson-back');
    await page.click('#lesson-back');
    await page.click('#lesson-back');
    await page.click('#lesson-back');
    assert.deepEqual(await axeViolations(), []);
    assert.deepEqual(await layoutProblems(), []);
    await page.screenshot({ path: join(BUILD, 'demo-teach-desktop.png'), fullPage: true });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForTimeout(400); // the drawings follow their width
    assert.deepEqual(await layoutProblems(), []);
    assert.deepEqual(await axeViolations(), []);
    await page.screenshot({ path: join(BUILD, 'demo-teach-phone.png'), fullPage: true });
    for (const n of [2, 4]) {
      await page.click('#lesson-next');
      await page.click('#lesson-next');
      await waitFor(() => !document.getElementById('lesson-figure').hidden, null, 60_000);
      await page.waitForTimeout(200);
      assert.deepEqual(await layoutProblems(), [], `lesson step ${n + 1}`);
    }
    await shot('#lesson-panel', 'teach-lesson-phone');
    await page.setViewportSize({ width: 1400, height: 1000 });
    await page.selectOption('#budget', '1024');
    await page.waitForTimeout(400);
  });

  test('keyboard alone: images added through the file picker and the drop zone, training started, the policy applied on commit', async () => {
    const dir = join(profile, 'kbd');
    mkdirSync(dir, { recursive: true });
    const files = [0, 1, 2].map((i) => {
      const p = join(dir, `k${i}.png`);
      writeFileSync(
        p,
        png(30, 30, (x, y) => [(x * 8 + i * 60) & 255, y * 8, 90]),
      );
      return p;
    });
    await reset();
    await page.focus('body');
    const tabTo = async (sel) => {
      for (let i = 0; i < 250; i++) {
        if (await S((sel) => document.activeElement && document.activeElement.matches(sel), sel)) return;
        await page.keyboard.press('Tab');
      }
      throw new Error(`Tab never reached ${sel}`);
    };
    await tabTo('#model');
    await page.keyboard.type('mini');
    await tabTo('#batch');
    await page.keyboard.press('Control+A');
    await page.keyboard.type('2');
    await tabTo('#steps');
    await page.keyboard.press('Control+A');
    await page.keyboard.type('400000');
    await tabTo('#policy');
    await page.keyboard.press('Home'); // none
    // a key that should open the file picker; when none opens, the error says what the page saw
    const openPicker = async (key) => {
      await S(() => {
        const seen = (window.pickerSeen = []),
          act = () => navigator.userActivation.isActive;
        for (const id of ['drop', 'files'])
          document
            .getElementById(id)
            .addEventListener('keydown', (e) => seen.push(`keydown '${e.key}' on ${e.target.id}, activation ${act()}`));
        document
          .getElementById('files')
          .addEventListener('click', () => seen.push(`click on files, activation ${act()}`));
      });
      const n = choosers.length;
      await page.keyboard.press(key);
      for (let t0 = Date.now(); choosers.length === n; await new Promise((r) => setTimeout(r, 50))) {
        if (Date.now() - t0 > 10_000)
          throw new Error(
            `no file picker opened: ${JSON.stringify(await S(() => ({ seen: window.pickerSeen, focused: document.hasFocus(), active: document.activeElement.id })))}`,
          );
      }
      return choosers[n];
    };
    // the file picker, from the keyboard: Tab onto it, Enter opens it
    await tabTo('#files');
    const chooser = await openPicker('Enter');
    await chooser.setFiles(files.slice(0, 2));
    await waitFor(() => /2 images of yours/.test(document.getElementById('user-count').textContent));
    // the drop zone too: focused, Space opens the same picker
    await tabTo('#drop');
    const chooser2 = await openPicker(' ');
    await chooser2.setFiles(files.slice(2));
    await waitFor(() => /3 images of yours/.test(document.getElementById('user-count').textContent));
    assert.equal(await page.inputValue('#data'), 'user');
    await tabTo('#start');
    const headerH = await S(() => document.querySelector('header').offsetHeight);
    await page.keyboard.press('Enter');
    await waitFor(() => window.vitrineDemo.step >= 3 || window.vitrineDemo.error, null, 60_000);
    // Start is disabled once the run starts: the focus went on to Pause, never to the page's body
    assert.equal(await S(() => document.activeElement.id), 'pause');
    assert.equal(await S(() => window.vitrineDemo.run.data.name), 'your images');
    // the policy by arrow keys: previews only; Enter commits it to the run
    await tabTo('#policy');
    await page.keyboard.press('ArrowDown'); // block
    await page.keyboard.press('ArrowDown'); // the next one
    const applied = await S(() => window.vitrineDemo.policy);
    assert.equal(applied, 'none', 'arrow keys alone do not apply a policy to the run');
    await page.keyboard.press('ArrowUp'); // back to block
    await page.keyboard.press('Enter');
    await waitFor(
      // (a 'mini' step takes about a millisecond: the notice may already say since which step)
      () => /checkpointing 'block' (from the next step|since step)/.test(document.getElementById('status').textContent),
      null,
      20_000,
    );
    await waitFor(() => window.vitrineDemo.losses.some((l) => l.policy === 'block'), null, 30_000);
    const switchAt = await S(() => window.vitrineDemo.losses.find((l) => l.policy === 'block').step);
    // once that step has run the status says since when, not 'from the next step'
    await waitFor((n) => window.vitrineDemo.step > n + 2, switchAt, 30_000);
    assert.equal(await page.textContent('#status'), `training… checkpointing 'block' since step ${switchAt}`);
    assert.equal(
      await S(() => document.querySelector('header').offsetHeight),
      headerH,
      'the status does not move the page',
    );
    await tabTo('#pause');
    await page.keyboard.press('Enter');
    await waitFor(() => !window.vitrineDemo.running);
    assert.equal(await S(() => document.activeElement.id), 'start', 'Pause disabled: the focus on Start');
    await shot('#setup-panel', 'keyboard');
    // text alternatives: every canvas and drawing says what it shows (the loss with its numbers, the schedule, the plot)
    const alts = await S(() =>
      [...document.querySelectorAll('canvas, svg:not(svg svg)')]
        .filter((e) => e.getClientRects().length)
        .map((e) => ({
          id: e.id || e.outerHTML.slice(0, 80),
          role: e.getAttribute('role'),
          text:
            e.getAttribute('aria-label') ||
            (e.getAttribute('aria-labelledby') || '')
              .split(' ')
              .map((id) => (document.getElementById(id) || {}).textContent || '')
              .join(' ')
              .trim(),
        })),
    );
    for (const a of alts)
      assert.ok(a.role === 'img' && a.text.length > 10, `${a.id}: role ${a.role}, text alternative '${a.text}'`);
    const alt = Object.fromEntries(alts.map((a) => [a.id, a.text]));
    assert.match(alt['loss-chart'], /^Loss on a log scale, \d+ steps: [\d.]+ at step \d+, running mean/);
    const svgAlt = (cls) => Object.entries(alt).find(([id]) => id.includes(cls))[1];
    assert.match(svgAlt('vtc-schedule'), /activation arena peak [\d.]+ [KM]iB/);
    assert.match(svgAlt('vtc-plot'), /Arena peak against/);
    // refusals and class messages are alerts; status, accuracy and the schedule's moments live regions
    for (const id of ['refusal', 'class-msg']) assert.equal(await page.getAttribute(`#${id}`, 'role'), 'alert');
    assert.equal(await S(() => document.querySelector('#teach-widget .vtc-now').getAttribute('aria-live')), 'polite');
    for (const id of ['status', 'stat-acc', 'times-note', 'lesson-announce'])
      assert.ok(
        await S((id) => {
          const e = document.getElementById(id);
          return e.getAttribute('role') === 'status' || !!e.getAttribute('aria-live');
        }, id),
        id,
      );
    // every file picker can be focused (none is display:none), every button names what it acts on, no two alike
    const pickers = await S(() =>
      [...document.querySelectorAll('input[type=file]')].map((e) => ({
        id: e.id,
        display: getComputedStyle(e).display,
        tab: e.tabIndex,
      })),
    );
    for (const f of pickers) assert.ok(f.display !== 'none' && f.tab >= 0, JSON.stringify(f));
    const names = await S(() =>
      [...document.querySelectorAll('button')]
        .filter((b) => b.getClientRects().length)
        .map((b) => (b.getAttribute('aria-label') || b.textContent).trim()),
    );
    for (const n of names) assert.ok(n.split(/\s+/).length >= 2, `button '${n}' says what it acts on`);
    assert.equal(new Set(names).size, names.length, `buttons alike: ${names}`);
    await page.screenshot({ path: join(BUILD, 'demo-keyboard-page.png'), fullPage: true });
    await reset();
    assert.deepEqual(errors, []);
  });
});
