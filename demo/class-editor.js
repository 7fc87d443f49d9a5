// class-editor.js: the classify mode's page side -- the classes (name them, add images with a
// button or by dropping files, the Fashion-MNIST sample as ten classes, every 5th image held out as
// the training loop's split does: web/train/datasets.js splitFraction 0.2), what keeps a run from starting, and the classifier's held-out
// accuracy, confusion matrix and the prediction of a dropped image.
import { $, S, page, setStatus } from './state.js';
import { fetchFmnistSample } from './sample.js';
import { trainer } from './engine-client.js';
import { decodeAll, decodeFile, pixelsFor, thumb } from './own-images.js';

const MAX_CLASS_IMAGES = 4096; // over all classes
const classImageCount = () => S.classes.reduce((a, c) => a + c.images.length, 0);
export function classMessage(text) {
  const el = $('class-msg');
  el.hidden = !text;
  el.textContent = text || '';
}

export function addClass(name) {
  if (S.run) {
    classMessage('The classes are fixed while a run exists: Reset to change them.');
    return null;
  }
  name = (name || '').trim() || `class ${S.classes.length + 1}`;
  if (S.classes.some((c) => c.name === name)) {
    classMessage(`There is already a class named '${name}'.`);
    return null;
  }
  const c = { name, images: [], bad: [] };
  S.classes.push(c);
  classMessage(null);
  renderClasses();
  page.planSoon();
  return c;
}

export async function addToClass(c, files) {
  if (S.run) {
    classMessage('The classes are fixed while a run exists: Reset to change them.');
    return;
  }
  if (!files.length) return;
  const { ok, bad } = await decodeAll(files);
  const room = Math.max(0, MAX_CLASS_IMAGES - classImageCount());
  c.images.push(...ok.slice(0, room));
  c.bad = bad;
  const parts = [];
  if (bad.length) parts.push(`not images this browser can decode, left out of '${c.name}': ${bad.join(', ')}`);
  if (ok.length > room) parts.push(`at most ${MAX_CLASS_IMAGES} images in all: ${ok.length - room} left out`);
  classMessage(parts.length ? parts.join('; ') : null);
  renderClasses();
}

export function removeClass(i) {
  if (S.run) return;
  S.classes.splice(i, 1);
  classMessage(null);
  renderClasses();
  page.planSoon();
}

/** The ten classes of the built-in Fashion-MNIST sample (merged by name with the user's). */
export async function fmnistClasses() {
  if (S.run) {
    classMessage('The classes are fixed while a run exists: Reset to change them.');
    return;
  }
  $('fmnist-classes').disabled = true;
  setStatus('reading the Fashion-MNIST sample…');
  try {
    const d = await fetchFmnistSample(),
      px = d.size * d.size;
    const byName = new Map(S.classes.map((c) => [c.name, c]));
    const target = d.classes.map((name) => byName.get(name) || { name, images: [], bad: [] });
    const room = Math.max(0, MAX_CLASS_IMAGES - classImageCount());
    const n = Math.min(d.n, room),
      rgba = new Uint8ClampedArray(4 * px);
    for (let i = 0; i < n; i++) {
      for (let k = 0; k < px; k++) {
        const v = d.pixels[i * px + k];
        rgba[4 * k] = rgba[4 * k + 1] = rgba[4 * k + 2] = v;
        rgba[4 * k + 3] = 255;
      }
      target[d.labels[i]].images.push(
        await createImageBitmap(new ImageData(rgba, d.size, d.size), { premultiplyAlpha: 'none' }),
      );
    }
    for (const c of target) if (!byName.has(c.name)) S.classes.push(c);
    classMessage(null);
    setStatus(`${n} Fashion-MNIST images in ${d.classes.length} classes`);
  } catch (e) {
    classMessage(e.message);
    setStatus(e.message, true, false);
  }
  renderClasses();
  page.syncButtons();
  page.planSoon();
}

/** Which images are held out: every 5th over the classes in order (web/train/datasets.js splitFraction 0.2, the loop's default). */
export function heldOutCounts() {
  let i = 0;
  return S.classes.map((c) => {
    let h = 0;
    for (let j = 0; j < c.images.length; j++, i++) if (i % 5 === 4) h++;
    return h;
  });
}

export function renderClasses() {
  const list = $('class-list'),
    locked = !!S.run,
    held = heldOutCounts();
  list.textContent = '';
  S.classes.forEach((c, i) => {
    const card = document.createElement('div');
    card.className = 'class-card';
    card.dataset.class = String(i);
    const name = document.createElement('div');
    name.className = 'name';
    name.title = c.name;
    name.textContent = c.name + ' ';
    const count = document.createElement('span');
    count.className = 'count';
    count.textContent = `${c.images.length} image${c.images.length === 1 ? '' : 's'}${held[i] ? `, ${held[i]} held out` : ''}`;
    name.appendChild(count);
    const th = document.createElement('div');
    th.className = 'thumbs';
    c.images
      .slice(0, 20)
      .forEach((bm, k) => th.appendChild(thumb(bm, 24, `image ${k + 1} of ${c.images.length} in class ${c.name}`)));
    if (!c.images.length) th.textContent = 'no images yet: drop image files here';
    const tools = document.createElement('div');
    tools.className = 'tools';
    const add = document.createElement('label');
    add.className = 'filebtn';
    add.textContent = 'add images';
    const input = document.createElement('input');
    input.className = 'visually-hidden'; // focusable: Enter / Space opens the picker
    input.setAttribute('aria-label', `add images to class ${c.name}`);
    input.type = 'file';
    input.accept = 'image/*';
    input.multiple = true;
    input.disabled = locked;
    input.addEventListener('change', () => {
      addToClass(c, [...input.files]);
      input.value = '';
    });
    add.appendChild(input);
    const rm = document.createElement('button');
    rm.textContent = 'remove';
    rm.setAttribute('aria-label', `remove class ${c.name}`);
    rm.disabled = locked;
    rm.addEventListener('click', () => removeClass(i));
    tools.append(add, rm);
    card.append(name, th, tools);
    if (c.bad.length) {
      const bad = document.createElement('div');
      bad.className = 'bad';
      bad.textContent = `not images: ${c.bad.join(', ')}`;
      card.appendChild(bad);
    }
    card.addEventListener('dragover', (e) => {
      e.preventDefault();
      e.stopPropagation();
      card.classList.add('over');
    });
    card.addEventListener('dragleave', () => card.classList.remove('over'));
    card.addEventListener('drop', (e) => {
      e.preventDefault();
      e.stopPropagation();
      card.classList.remove('over');
      addToClass(c, [...e.dataTransfer.files]);
    });
    list.appendChild(card);
  });
  const n = classImageCount(),
    h = held.reduce((a, b) => a + b, 0);
  $('class-summary').textContent = S.classes.length
    ? `${S.classes.length} classes, ${n} images (${n - h} train, ${h} held out)`
    : 'no classes yet';
}

/** What stops a classify run from starting, in words (null: nothing). */
export function classProblem(cfg) {
  if (S.classes.length < 2)
    return `Classify needs at least two classes (there ${S.classes.length === 1 ? 'is 1' : `are ${S.classes.length}`}): add classes and their images, or use the Fashion-MNIST sample.`;
  const empty = S.classes.find((c) => !c.images.length);
  if (empty)
    return `Class '${empty.name}' has no images: add some (its "add images" button, or drop files onto it), or remove it.`;
  if (classImageCount() - heldOutCounts().reduce((a, b) => a + b, 0) < 1) return 'No training images: add more images.';
  if (cfg.init === 'tab' && !S.tabEncoder)
    return 'No MAE / AIM encoder has been trained in this tab yet: train one first (then Reset and switch to classify), or start from random init.';
  if (cfg.init === 'file' && !S.initFile)
    return 'Choose the safetensors file to start from (or start from random init).';
  return null;
}

/** The classes' images at the model's size and channels (the pixel pipeline), labels, names. */
export function classData(size, chans) {
  const bitmaps = [],
    labels = [];
  S.classes.forEach((c, k) =>
    c.images.forEach((bm) => {
      bitmaps.push(bm);
      labels.push(k);
    }),
  );
  return {
    name: 'your classes',
    n: bitmaps.length,
    chans,
    size,
    pixels: pixelsFor(bitmaps, size, chans),
    labels: Int32Array.from(labels),
    classes: S.classes.map((c) => c.name),
  };
}

/** A resumed classify run gives its classes' images back (at the model's size): the editor shows them. */
export async function classesFrom(ud) {
  const px = ud.size * ud.size,
    C = ud.chans || 3,
    rgba = new Uint8ClampedArray(4 * px);
  const classes = ud.classes.map((name) => ({ name, images: [], bad: [] }));
  for (let i = 0; i < ud.n; i++) {
    for (let k = 0; k < px; k++) {
      for (let ch = 0; ch < 3; ch++) rgba[4 * k + ch] = ud.pixels[i * C * px + (ch % C) * px + k];
      rgba[4 * k + 3] = 255;
    }
    classes[ud.labels[i]].images.push(
      await createImageBitmap(new ImageData(rgba, ud.size, ud.size), { premultiplyAlpha: 'none' }),
    );
  }
  S.classes = classes;
  renderClasses();
}

export function syncTabEncoder(info) {
  S.tabEncoder = info || null;
  const opt = $('init').querySelector('option[value=tab]');
  opt.disabled = !info;
  opt.textContent = info
    ? `the ${info.kind.toUpperCase()} encoder trained in this tab (model ${info.model}, step ${info.step})`
    : 'the MAE / AIM encoder trained in this tab (none yet)';
  if (!info && $('init').value === 'tab') $('init').value = 'random';
}

// ---- accuracy and prediction ---------------------------------------------------------------------

export function renderEvals() {
  const last = S.evals[S.evals.length - 1],
    names = S.run && S.run.cfg.classes ? S.run.cfg.classes : [];
  $('stat-acc').textContent = last
    ? `${(100 * last.top1).toFixed(1)}% (${Math.round(last.top1 * last.n)}/${last.n}) at step ${last.step}`
    : '–';
  $('confusion').setAttribute(
    'aria-label',
    last ? `confusion matrix at step ${last.step}: rows the true class, columns the predicted` : '',
  );
  $('acc-history').textContent =
    S.evals.length > 1
      ? `held-out accuracy by step: ${S.evals.map((e) => `${e.step}: ${(100 * e.top1).toFixed(0)}%`).join(' · ')}`
      : '';
  const t = $('confusion');
  t.textContent = '';
  if (!last) return;
  const head = document.createElement('tr');
  head.innerHTML = '<th>true ↓ predicted →</th>';
  for (const n of names) {
    const th = document.createElement('th');
    th.textContent = n;
    th.title = n;
    head.appendChild(th);
  }
  t.appendChild(head);
  last.confusion.forEach((row, i) => {
    const tr = document.createElement('tr');
    const th = document.createElement('th');
    th.textContent = names[i] || String(i);
    tr.appendChild(th);
    row.forEach((v, j) => {
      const td = document.createElement('td');
      td.textContent = v;
      if (i === j) td.className = 'diag';
      tr.appendChild(td);
    });
    t.appendChild(tr);
  });
}

export function renderPrediction() {
  const ol = $('prediction'),
    p = S.prediction;
  ol.textContent = '';
  if (!p) return;
  if (p.error) {
    const li = document.createElement('li');
    li.className = 'bad';
    li.textContent = p.error;
    ol.appendChild(li);
    return;
  }
  for (const t of p.top) {
    const li = document.createElement('li');
    const b = document.createElement('b');
    b.textContent = t.name;
    const bar = document.createElement('span');
    bar.className = 'pbar';
    bar.style.width = `${Math.round(120 * t.p)}px`;
    li.append(b, ` ${(100 * t.p).toFixed(1)}%`, bar);
    ol.appendChild(li);
  }
}

export async function onPredict(file) {
  if (!file) return;
  const ctx = $('predict-img').getContext('2d');
  ctx.clearRect(0, 0, 56, 56);
  $('predict-img').setAttribute('aria-label', `the image to predict: ${file.name}`);
  if (!S.run || !S.run.cfg || S.run.cfg.kind !== 'classify') {
    S.prediction = {
      file: file.name,
      error: 'No classifier yet: in classify mode, add classes and press Start; then drop an image here.',
    };
    renderPrediction();
    return;
  }
  let bm;
  try {
    bm = await decodeFile(file);
  } catch {
    S.prediction = { file: file.name, error: `${file.name}: not an image this browser can decode` };
    renderPrediction();
    return;
  }
  ctx.drawImage(thumb(bm, 56), 0, 0);
  try {
    const { img: size, chans } = S.run.dims,
      pixels = pixelsFor([bm], size, chans);
    const r = await trainer.call('predict', { pixels, size, chans }, [pixels.buffer]);
    S.prediction = { file: file.name, step: r.step, top: r.top };
    setStatus(`${file.name}: ${r.top[0].name} (${(100 * r.top[0].p).toFixed(1)}%), the classifier at step ${r.step}`);
  } catch (e) {
    S.prediction = { file: file.name, error: e.message };
  }
  renderPrediction();
}
