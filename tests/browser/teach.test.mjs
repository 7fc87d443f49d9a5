// teach.test.mjs: the demo's "How checkpointing works" view in headless Debian Chromium
// (playwright-core), on the default model. Checks: the schedule drawn for 'block' and 'every:2'
// re-computes the blocks the engine's recorded step re-computes, at its moments (the list recorded
// again here through Model.traceStep and read without the page's code), each just before its
// backward; every policy but none re-computes something; step times measured in interleaved
// rounds; the mask demonstration differs without the mask and is bit for bit the same
// checkpointed; checkpointed blocks behind a frozen patch embedding get their gradients; and
// keyboard alone adds images (file picker and drop zone) and trains, the policy applied on
// commit, not at every arrow key. Saves a screenshot of each view in build/. Skipped only when
// /usr/bin/chromium is absent.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { BUILD, skip, png, openDemoBrowser } from './harness.mjs';
import { median, pairedRatios } from '../../demo/teach-measure.js';

if (skip) console.log(`# ${skip}`);

describe('browser demo: how checkpointing works', { skip, timeout: 300_000 }, () => {
  let page, profile, errors, close, waitFor, openPage, reset;
  const choosers = [];
  const S = (fn, arg) => page.evaluate(fn, arg);
  const shot = async (sel, name) => (await page.$(sel)).screenshot({ path: join(BUILD, `demo-${name}.png`) });
  const teachReady = () =>
    waitFor(
      () => window.vitrineDemo.teach && window.vitrineDemo.teach.R && window.vitrineDemo.teach.R.none,
      null,
      90_000,
    );

  before(async () => {
    let wait;
    ({ page, profile, errors, close, waitFor: wait, openPage, reset } = await openDemoBrowser());
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
    await openPage();
    await teachReady();
  });
  after(async () => {
    if (close) await close();
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
      [...document.querySelectorAll('#schedule rect.moment')].map((r) => ({
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
      await waitFor((p) => window.vitrineDemo.teach.sched.policy === p, policy, 30_000);
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
      await shot('.sched-wrap', `teach-schedule-${policy.replace(':', '')}`);
      // stepping through it: the moment's words name the block
      await page.click('#sched-next');
      await page.click('#sched-next');
      assert.match(await page.textContent('#sched-now'), /Forward of encoder block 0/);
    });
  }

  test('every policy but none re-computes; step times measured in interleaved rounds', async () => {
    const rows = await S(() =>
      [...document.querySelectorAll('#compare-table tr[data-policy]')].map((tr) => ({
        p: tr.dataset.policy,
        rec: Number(tr.querySelector('[data-recompute]').dataset.recompute),
      })),
    );
    const policies = rows.map((r) => r.p);
    for (const p of ['none', 'block', 'sqrt', 'selective', 'every:2', 'every:3', 'every:4'])
      assert.ok(policies.includes(p), `${p} in ${policies}`);
    assert.ok(policies.some((p) => p.startsWith('budget:')));
    for (const r of rows) assert.ok(r.p === 'none' ? r.rec === 0 : r.rec > 0, `${r.p}: ${r.rec} FLOPs re-computed`);
    assert.match(await page.textContent('#sqrt-prose'), /Why sqrt (loses to|beats) block here/);
    // budget at the default 1 GB: everything fits, and the page says that nothing needed re-computing
    await page.selectOption('#policy', 'auto');
    await waitFor(
      () =>
        /budget search chose to keep everything: nothing needed re-computing/.test(
          document.getElementById('mem-summary').textContent,
        ),
      null,
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
    const times = await S(() => window.vitrineDemo.teach.times);
    for (const p of policies)
      assert.ok(
        times[p].length >= 3 && times[p].length === times.none.length && times[p].every((ms) => ms > 0),
        `${p}: ${times[p]}`,
      );
    assert.match(await page.textContent('#times-note'), /rounds timing one step of every policy in turn/);
    // against none: the median of the rounds' ratios
    const vsNone = await S(() =>
      Object.fromEntries(
        [...document.querySelectorAll('#compare-table tr[data-policy]')].map((tr) => [
          tr.dataset.policy,
          tr.lastElementChild.textContent,
        ]),
      ),
    );
    for (const p of policies.filter((q) => q !== 'none'))
      assert.ok(vsNone[p].startsWith(`${median(pairedRatios(times, p)).toFixed(2)}×`), `${p}: ${vsNone[p]}`);
    await shot('#teach-panel', 'teach');
  });

  test('the mask demonstration: without the mask the outputs and gradients differ; checkpointed with it, the same bits', async () => {
    await page.click('#run-mask');
    await waitFor(() => window.vitrineDemo.teach.mask, null, 60_000);
    const r = await S(() => window.vitrineDemo.teach.mask);
    assert.ok(r.dropped.outMax > 0 && r.dropped.gradMax > 0, JSON.stringify(r.dropped));
    assert.equal(r.dropped.rowsDiffer, r.tokens);
    assert.equal(r.ckpt.outMax, 0);
    assert.equal(r.ckpt.gradMax, 0);
    assert.ok(r.ckpt.outSame && r.ckpt.gradSame, 'checkpointed: outputs and gradients bit for bit');
    assert.match(await page.textContent('#mask-result'), /yes: outputs and all \d+ gradients/);
    await page.click('#run-frozen');
    await waitFor(() => window.vitrineDemo.teach.frozen, null, 60_000);
    const f = await S(() => window.vitrineDemo.teach.frozen);
    assert.equal(f.patchGrad, false);
    assert.ok(
      f.ckpt.every((n) => n > 0),
      `every checkpointed block gets a gradient: ${f.ckpt}`,
    );
    assert.equal(f.same, true);
    await shot('.bugs', 'teach-bugs');
    assert.deepEqual(errors, []);
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
    await page.keyboard.type('4000');
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
    await page.keyboard.press('Enter');
    await waitFor(() => window.vitrineDemo.step >= 3 || window.vitrineDemo.error, null, 60_000);
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
      () => /checkpointing 'block' from the next step/.test(document.getElementById('status').textContent),
      null,
      20_000,
    );
    await waitFor(() => window.vitrineDemo.losses.some((l) => l.policy === 'block'), null, 30_000);
    await tabTo('#pause');
    await page.keyboard.press('Enter');
    await waitFor(() => !window.vitrineDemo.running);
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
    assert.match(alt.schedule, /activation arena peak [\d.]+ [KM]iB/);
    assert.match(alt['compare-plot'], /Arena peak against/);
    // refusals and class messages are alerts; status, accuracy and the schedule's moments live regions
    for (const id of ['refusal', 'class-msg']) assert.equal(await page.getAttribute(`#${id}`, 'role'), 'alert');
    for (const id of ['status', 'stat-acc', 'sched-now', 'times-note'])
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
