// classify.test.mjs: the demo's classify mode in headless Debian Chromium (playwright-core), on the
// user's own images: two classes of PNGs (horizontal vs vertical stripes under noise) made here,
// added through a class's file input and by a drop event (DataTransfer) onto a class. Checks:
// the errors (one class, an empty class, a file that is not an image) are messages, not a broken
// page; a run reaches a held-out accuracy above chance (the number the page shows); a dropped
// image gets a prediction with probabilities, the right class; the classifier's recorded step peaks
// at its plan; switching checkpointing mid-run changes no loss bit; a reload resumes the run and its classes; a
// classifier starts from the MAE encoder trained in the tab, or from a file; the downloaded
// classifier is one `vitrine predict` reads; the Fashion-MNIST sample fills ten classes. Writes build/demo-classify-screenshot.png. Skipped only when /usr/bin/chromium is absent.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { ROOT, BUILD, skip, png, openDemoBrowser } from './harness.mjs';

if (skip) console.log(`# ${skip}`);

// stripes 2 pixels wide, horizontal or vertical, under seeded noise; 28x28 (the mini model's size)
// and 36x36 (resized by the page's canvas, as any image of the user's)
function stripes(dir, i, size = 28) {
  let s = 1000 + i;
  const rnd = () => (s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 4294967296;
  return png(size, size, (x, y) => {
    const bright = ((dir === 'horizontal' ? y : x) >> 1) % 2 === 0;
    const v = Math.max(0, Math.min(255, Math.round((bright ? 175 : 60) + 90 * (rnd() - 0.5))));
    return [v, v, Math.min(255, v + 20)];
  });
}

describe('browser demo: classify mode', { skip, timeout: 180_000 }, () => {
  let page, profile, url, errors, close, dir, waitFor, openPage, reset, fill, startPausedAt;
  const S = (expr, arg) => page.evaluate(expr, arg);
  const waitDone = () => waitFor(() => window.vitrineDemo.stopped === 'done' || window.vitrineDemo.error, null, 90_000);
  const losses = () => S(() => window.vitrineDemo.losses.map((l) => ({ step: l.step, hex: l.hex, policy: l.policy })));
  const classMsg = () =>
    S(() => (document.getElementById('class-msg').hidden ? '' : document.getElementById('class-msg').textContent));
  const write = (name, bytes) => {
    const p = join(dir, name);
    writeFileSync(p, bytes);
    return p;
  };
  const N = 20; // images per class: 40 in all, every 5th held out: 8
  const configure = (o = {}) =>
    fill({ kind: 'classify', model: 'mini', batch: 8, steps: 40, lr: '0.003', warmup: 2, seed: 1, ...o });
  /** A drop event carrying files (name, bytes) onto the element `selector`, as a drag from the desktop. */
  async function dropFiles(selector, files) {
    await S(
      async ({ selector, files }) => {
        const dt = new DataTransfer();
        for (const { name, b64, type } of files) {
          const bin = atob(b64),
            u8 = new Uint8Array(bin.length);
          for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
          dt.items.add(new File([u8], name, { type }));
        }
        const el = document.querySelector(selector);
        el.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
        el.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
      },
      {
        selector,
        files: files.map(([name, bytes, type = 'image/png']) => ({
          name,
          b64: Buffer.from(bytes).toString('base64'),
          type,
        })),
      },
    );
  }
  const count = (i) =>
    S((i) => {
      const c = window.vitrineDemo.classes[i];
      return c ? c.images.length : -1;
    }, i);

  before(async () => {
    ({
      page,
      profile,
      url,
      errors,
      close,
      waitFor,
      openPage,
      reset,
      configure: fill,
      startPausedAt,
    } = await openDemoBrowser({ acceptDownloads: true }));
    dir = join(profile, 'images');
    mkdirSync(dir);
    await openPage();
  });

  after(async () => {
    if (close) await close();
  });

  let reference; // the losses and accuracies of the run trained straight through
  let classifierFile; // the classifier downloaded from the page
  test("errors are messages; two classes of the user's images (file input and drop) train to a held-out accuracy above chance; a dropped image is predicted", async () => {
    await configure();
    assert.equal(await page.isVisible('#classify-data'), true);
    assert.equal(await page.isVisible('#mae-data'), false);
    assert.equal(await page.isVisible('#classify-panel'), true);
    // no classes, then one class: refused with a message, nothing set up
    await page.click('#start');
    await waitFor(() => !document.getElementById('class-msg').hidden);
    assert.match(await classMsg(), /at least two classes \(there are 0\)/);
    await page.fill('#class-name', 'horizontal');
    await page.click('#add-class');
    await page.click('#start');
    await waitFor(() => /there is 1/.test(document.getElementById('class-msg').textContent));
    await page.fill('#class-name', 'vertical');
    await page.press('#class-name', 'Enter');
    assert.equal(await page.isHidden('#class-msg'), true, 'a second class clears the stale "at least two classes"');
    await page.fill('#class-name', 'vertical');
    await page.click('#add-class');
    assert.match(await classMsg(), /already a class named 'vertical'/);
    assert.deepEqual(await S(() => window.vitrineDemo.classes.map((c) => c.name)), ['horizontal', 'vertical']);
    // an empty class
    await page.click('#start');
    await waitFor(() => /Class 'horizontal' has no images/.test(document.getElementById('class-msg').textContent));
    assert.equal(await S(() => window.vitrineDemo.run), null);

    // class 0 through its file input (28 px and 36 px PNGs, and a text file that is not an image)
    const h = Array.from({ length: N }, (_, i) => write(`h${i}.png`, stripes('horizontal', i, i % 3 ? 28 : 36)));
    await page.setInputFiles('.class-card[data-class="0"] input[type=file]', [
      ...h,
      write('notes.txt', 'not an image\n'),
    ]);
    await waitFor((n) => window.vitrineDemo.classes[0].images.length === n, N);
    assert.match(await classMsg(), /not images this browser can decode, left out of 'horizontal': notes\.txt/);
    assert.match(
      await page.textContent('.class-card[data-class="0"]'),
      new RegExp(`${N} images, 4 held out.*not images: notes\\.txt`),
    );
    await page.click('#start'); // class 1 still empty
    await waitFor(() => /Class 'vertical' has no images/.test(document.getElementById('class-msg').textContent));
    // class 1 by a drop of files onto it
    await dropFiles(
      '.class-card[data-class="1"]',
      Array.from({ length: N }, (_, i) => [`v${i}.png`, stripes('vertical', 100 + i, i % 3 ? 28 : 36)]),
    );
    await waitFor((n) => window.vitrineDemo.classes[1].images.length === n, N);
    assert.equal(await count(0), N);
    assert.match(await page.textContent('#class-summary'), /2 classes, 40 images \(32 train, 8 held out\)/);

    await page.click('#start');
    await waitDone();
    assert.equal(await S(() => window.vitrineDemo.error), null);
    const run = await S(() => window.vitrineDemo.run);
    assert.deepEqual(run.cfg.classes, ['horizontal', 'vertical']);
    assert.equal(run.data.n, 40);
    assert.equal(await page.textContent('#stat-heldout'), '8 of 40 images');
    const l = await losses();
    assert.equal(l.length, 40);
    // the held-out accuracy the page shows, periodically (every 4 steps of 40) and at the end
    const acc = await page.textContent('#stat-acc');
    const m = /^([\d.]+)% \((\d+)\/8\) at step 40$/.exec(acc);
    assert.ok(m, `accuracy shown: '${acc}'`);
    assert.ok(Number(m[1]) >= 75, `held-out accuracy ${m[1]}% (chance: 50%)`);
    const evals = await S(() => window.vitrineDemo.evals);
    assert.deepEqual(
      evals.map((e) => e.step),
      [4, 8, 12, 16, 20, 24, 28, 32, 36, 40],
    );
    assert.equal(
      evals[9].confusion.flat().reduce((a, b) => a + b, 0),
      8,
    );
    assert.equal(await page.locator('#confusion td').count(), 4);
    // the teaching view recorded the classifier's training step: its arena peaks at the plan
    await waitFor(
      () =>
        window.vitrineDemo.teach.R &&
        window.vitrineDemo.teach.R.none &&
        window.vitrineDemo.teach.pc.cfg.kind === 'classify',
      null,
      60_000,
    );
    const rec = await S(() =>
      Object.entries(window.vitrineDemo.teach.R).map(([p, r]) => ({
        p,
        peak: r.peak.bytes,
        planned: r.planned,
        activations: r.activations,
      })),
    );
    for (const r of rec) assert.ok(r.peak === r.planned && r.planned === r.activations, JSON.stringify(r));

    // a new image of each class dropped on the predict zone: the right class, with probabilities
    for (const [dirName, seed] of [
      ['vertical', 900],
      ['horizontal', 901],
    ]) {
      await dropFiles('#predict-drop', [[`new-${dirName}.png`, stripes(dirName, seed, 40)]]);
      await waitFor(
        (f) => window.vitrineDemo.prediction && window.vitrineDemo.prediction.file === f,
        `new-${dirName}.png`,
      );
      const p = await S(() => window.vitrineDemo.prediction);
      assert.equal(p.error, undefined);
      assert.equal(p.top.length, 2);
      assert.equal(p.top[0].name, dirName, JSON.stringify(p.top));
      assert.ok(Math.abs(p.top[0].p + p.top[1].p - 1) < 1e-6);
      const shown = await page.textContent('#prediction li:first-child');
      assert.match(shown, new RegExp(`^${dirName} \\d+\\.\\d%$`));
    }
    // not an image: a message where the prediction goes
    await dropFiles('#predict-drop', [['bad.png', Buffer.from('no png here'), 'image/png']]);
    await waitFor(() => window.vitrineDemo.prediction && window.vitrineDemo.prediction.file === 'bad.png');
    assert.match(await page.textContent('#prediction'), /bad\.png: not an image this browser can decode/);
    await dropFiles('#predict-drop', [['new-h.png', stripes('horizontal', 902, 28)]]);
    await waitFor(() => window.vitrineDemo.prediction && window.vitrineDemo.prediction.file === 'new-h.png');
    await page.screenshot({ path: join(BUILD, 'demo-classify-screenshot.png'), fullPage: true });

    // the classifier downloaded: timm keys, head and class names, as `vitrine predict` reads them
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#download-classifier')]);
    assert.equal(download.suggestedFilename(), 'vitrine-classifier-step40.safetensors');
    classifierFile = join(dir, 'classifier.safetensors');
    await download.saveAs(classifierFile);
    const cli = spawnSync(
      process.execPath,
      [
        join(ROOT, 'web/cli.js'),
        'predict',
        '--weights',
        classifierFile,
        '--json',
        write('cli-v.png', stripes('vertical', 904, 28)),
        write('cli-h.png', stripes('horizontal', 905, 28)),
      ],
      { encoding: 'utf8', env: { ...process.env, VITRINE_WASM_DIR: join(BUILD, 'wasm') } },
    );
    assert.equal(cli.status, 0, cli.stderr);
    assert.deepEqual(
      JSON.parse(cli.stdout).map((r) => r.top[0].class),
      ['vertical', 'horizontal'],
    );
    reference = { losses: l.map((x) => x.hex), evals: evals.map((e) => e.top1) };
    assert.deepEqual(errors, []);
  });

  test('checkpointing switched mid-run changes no bit', async () => {
    await reset();
    assert.equal(await count(1), N, 'the classes stay after Reset');
    await page.selectOption('#policy', 'none');
    // paused as soon as it runs, so that the switch lands mid-run however fast the steps are
    await startPausedAt(1);
    const at = await S(() => window.vitrineDemo.step);
    assert.ok(at >= 1 && at <= 30, `paused at step ${at}`);
    await page.selectOption('#policy', 'block');
    await waitFor(() => /checkpointing 'block' from the next step/.test(document.getElementById('status').textContent));
    await page.click('#start');
    await waitDone();
    assert.equal(await S(() => window.vitrineDemo.error), null);
    const l = await losses();
    assert.equal(l.filter((x) => x.policy === 'none').length, at);
    assert.equal(l.filter((x) => x.policy === 'block').length, 40 - at);
    assert.deepEqual(
      l.map((x) => x.hex),
      reference.losses,
    );
    assert.deepEqual(await S(() => window.vitrineDemo.evals.map((e) => e.top1)), reference.evals);
  });

  test('a reload resumes the classify run, its classes back in the editor, bit for bit', async () => {
    await reset();
    await page.selectOption('#policy', 'none');
    await startPausedAt(15);
    await waitFor(() => /kept in this browser at step/.test(document.getElementById('storage-status').textContent));
    assert.ok((await S(() => window.vitrineDemo.step)) < 40, 'paused mid-run');
    await openPage();
    assert.equal(await S(() => window.vitrineDemo.resumed), true);
    assert.equal(await page.inputValue('#kind'), 'classify');
    assert.deepEqual(await S(() => window.vitrineDemo.classes.map((c) => [c.name, c.images.length])), [
      ['horizontal', N],
      ['vertical', N],
    ]);
    await page.click('#start');
    await waitDone();
    assert.deepEqual(
      (await losses()).map((x) => x.hex),
      reference.losses,
    );
    assert.deepEqual(await S(() => window.vitrineDemo.evals.map((e) => e.top1)), reference.evals);
    await dropFiles('#predict-drop', [['again.png', stripes('vertical', 903, 28)]]);
    await waitFor(() => window.vitrineDemo.prediction && window.vitrineDemo.prediction.file === 'again.png');
    assert.equal(await S(() => window.vitrineDemo.prediction.top[0].name), 'vertical');
  });

  test('a classifier starts from the MAE encoder trained in this tab; the Fashion-MNIST sample fills ten classes', async () => {
    await reset();
    assert.equal(await page.isDisabled('#init option[value=tab]'), true);
    await configure({ kind: 'mae', steps: 3 });
    await page.selectOption('#data', 'fmnist');
    await page.click('#start');
    await waitDone();
    await reset();
    assert.match(
      await page.textContent('#init option[value=tab]'),
      /the MAE encoder trained in this tab \(model mini, step 3\)/,
    );
    await configure({ steps: 3 });
    await page.selectOption('#init', 'tab');
    await page.click('#start');
    await waitDone();
    assert.equal(await S(() => window.vitrineDemo.error), null);
    assert.match(await page.textContent('#status'), /finished: 3 steps/);
    assert.equal(await page.textContent('#stat-init'), 'the MAE encoder trained in this tab (step 3)');
    // a different model than the encoder's: refused with the reason
    await reset();
    await page.selectOption('#model', 'fmnist');
    await page.click('#start');
    await waitFor(() => /training stopped|choose that model/.test(document.getElementById('status').textContent));
    assert.match(
      await page.textContent('#status'),
      /the encoder trained in this tab is model 'mini': choose that model/,
    );
    assert.equal(await S(() => window.vitrineDemo.run), null);

    // from a file: the classifier downloaded above (its head has the shape of this one's: loaded too)
    await page.selectOption('#model', 'mini');
    await page.selectOption('#init', 'file');
    assert.equal(await page.isVisible('#init-file'), true);
    await page.click('#start');
    await waitFor(() => /Choose the safetensors file/.test(document.getElementById('class-msg').textContent));
    await page.setInputFiles('#init-file', classifierFile);
    await waitFor(() => window.vitrineDemo.initFile);
    await page.click('#start');
    await waitDone();
    assert.equal(await S(() => window.vitrineDemo.error), null);
    assert.equal(await page.textContent('#stat-init'), 'classifier.safetensors');
    // trained 40 steps and started from those weights, 3 more steps: still right
    assert.ok(/^100\.0%/.test(await page.textContent('#stat-acc')), await page.textContent('#stat-acc'));

    await reset();
    await page.selectOption('#init', 'random');
    await page.click('#clear-classes');
    await page.click('#fmnist-classes');
    await waitFor(
      () =>
        window.vitrineDemo.classes.length === 10 &&
        /Fashion-MNIST images in 10 classes/.test(document.getElementById('status').textContent),
    );
    const meta = await S(async () => (await fetch('/build/demo-data/fmnist-sample.json')).json());
    assert.deepEqual(await S(() => window.vitrineDemo.classes.map((c) => c.name)), meta.classes);
    assert.equal(await S(() => window.vitrineDemo.classes.reduce((a, c) => a + c.images.length, 0)), meta.n);
    // the memory budget: a classifier that does not fit is refused before it runs, with a policy that fits
    await configure({ model: 'fmnist-base', batch: 512 });
    await page.selectOption('#policy', 'none');
    await page.selectOption('#budget', '512');
    await page.click('#start');
    await waitFor(() => !document.getElementById('refusal').hidden);
    assert.match(
      await page.textContent('#refusal'),
      /Refused before running\. Does not fit.*MiB.*It fits with checkpointing '(selective|block|sqrt|every:\d)' at batch 512/,
    );
    assert.equal(await S(() => window.vitrineDemo.run), null);
    await page.selectOption('#budget', '1024');
    // a 224 px timm preset: not offered for classify, said so
    await page.selectOption('#model', 'vit_tiny_patch16_224');
    await page.click('#start');
    await waitFor(() => /Cannot set up this model/.test(document.getElementById('refusal').textContent));
    assert.match(
      await page.textContent('#refusal'),
      /classify mode builds its classifier on a 28 \/ 32 px model or a custom config/,
    );
    assert.equal(await S(() => window.vitrineDemo.run), null);
    await configure({ steps: 2, batch: 16 });
    await page.click('#start');
    await waitDone();
    assert.equal(await S(() => window.vitrineDemo.error), null);
    assert.equal(await S(() => window.vitrineDemo.evals.at(-1).n), Math.floor(meta.n / 5));
    await reset(); // leave nothing in the profile
    assert.deepEqual(errors, []);
  });
});
