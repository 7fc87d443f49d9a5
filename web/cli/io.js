// io.js: what the commands share for files and the terminal: untrusted input files read safely,
// errors in strerror's words, the output folder of a run (made once, written atomically, removed
// again when nothing went in), a progress line.
import { readdirSync, unlinkSync, rmdirSync, existsSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { readRegularFile, writeAtomic, makeDirs, DataError, strerror } from '../train/node-data.js';
import { CliError } from './args.js';
import { parseJson, show } from '../formats/metadata.js';

/** Why a file operation failed, in strerror's words (a DataError's own message). */
export const why = (e) => (e instanceof DataError ? e.message : strerror(e));

/** The bytes of an input file (weights, checkpoints, configs, parity files, images): a regular
 * file only (a FIFO or /dev/zero would hang a plain read), at most 1 GiB. */
export const readInput = (file) => new Uint8Array(readRegularFile(file, 1 << 30));

/** --config JSON|FILE: a JSON object, given as text or in a file (strict: a key repeated in an
 * object is refused, as is JSON that is not an object). A usage error (exit 2) names what is wrong. */
export function readConfig(text) {
  const usage = (m) => new CliError(`--config: ${m}`, 2);
  let json = text;
  if (!text.trim().startsWith('{')) {
    // a file's name, or JSON that is not an object
    try {
      json = new TextDecoder().decode(readRegularFile(text, 1 << 20));
    } catch (e) {
      let v;
      try {
        v = JSON.parse(text);
      } catch {
        throw usage(`cannot read ${text}: ${why(e)}`);
      }
      throw usage(`${show(v)} is not a JSON object ({"encoder": {...}} or timm kwargs), nor a file`);
    }
  }
  let v;
  const where = json === text ? '' : `${text}: `;
  try {
    v = parseJson(json, 'config');
  } catch (e) {
    throw usage(`${where}${e.field === 'config' ? '' : `${e.field.slice(7)}: `}${e.reason}`);
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw usage(`${where}${show(v)} is not a JSON object`);
  return v;
}

export const mib = (b) => (b / 1048576).toFixed(1);
const fmtTime = (s) => `${Math.floor(s / 60)}:${String(Math.floor(s % 60)).padStart(2, '0')}`;

/** PNG bytes of { width, height, data: RGBA } (pngjs). */
export function encodePng({ width, height, data }) {
  const { PNG } = createRequire(import.meta.url)('pngjs');
  const png = new PNG({ width, height });
  png.data.set(data);
  return PNG.sync.write(png);
}

/** A progress line on a terminal (redrawn at most every 100 ms), about ten lines in a log. */
export class Progress {
  constructor(total, stream = process.stderr) {
    this.total = total;
    this.stream = stream;
    this.tty = !!stream.isTTY;
    this.last = 0;
    this.lastLine = -1;
  }
  update(step, text, force = false) {
    const now = performance.now();
    if (this.tty) {
      if (!force && now - this.last < 100) return;
      this.last = now;
      const cols = this.stream.columns || 100,
        w = 20,
        f = Math.round((w * step) / this.total);
      const line = `${String(step).padStart(String(this.total).length)}/${this.total} [${'='.repeat(f)}${f < w ? '>' : ''}${' '.repeat(Math.max(0, w - f - 1))}] ${text}`;
      this.stream.write('\r' + line.slice(0, cols - 1).padEnd(cols - 1));
    } else {
      const every = Math.max(1, Math.round(this.total / 10));
      if (force || step % every === 0) {
        if (step !== this.lastLine) this.stream.write(`step ${step}/${this.total} ${text}\n`);
        this.lastLine = step;
      }
    }
  }
  done() {
    if (this.tty) this.stream.write('\n');
  }
  /** The text of a step: loss, images/s, the epoch, time left. */
  static text(r, rate, epoch, left, extra = '') {
    return `loss ${r.loss.toFixed(4)} | ${rate.toFixed(0)} img/s${extra} | epoch ${epoch.toFixed(2)} | eta ${fmtTime(left)}`;
  }
}

// temporary files left by killed runs (their process is gone)
function removeStaleTemps(dir) {
  let names = [];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const n of names) {
    const m = /^\..*\.tmp-(\d+)$/.exec(n);
    if (!m || Number(m[1]) === process.pid) continue;
    let alive = true;
    try {
      process.kill(Number(m[1]), 0);
    } catch (e) {
      alive = e.code === 'EPERM';
    }
    if (!alive)
      try {
        unlinkSync(path.join(dir, n));
      } catch {
        /* gone */
      }
  }
}

/**
 * What a run writes, and only once it has something: the output folder is made up front (--out
 * naming a file or /proc/x is refused before training) and removed again at the end if the run
 * wrote nothing into it; every file is written atomically (web/train/node-data.js writeAtomic), temporary
 * files of killed runs are cleared at the first write. `paths`: { state, ... } of the run.
 */
export class Outputs {
  constructor(outDir, paths) {
    this.outDir = outDir;
    this.paths = paths;
    this.savedStep = null;
    this.wrote = [];
    this.cleaned = false;
    try {
      this.made = makeDirs(outDir);
    } catch (e) {
      throw new CliError(`--out ${e.message}`, 2);
    }
  }
  write(file, bytes) {
    if (!this.cleaned) {
      removeStaleTemps(this.outDir);
      this.cleaned = true;
    }
    try {
      writeAtomic(file, bytes);
    } catch (e) {
      throw new CliError(`cannot write ${file}: ${why(e)}`);
    }
    if (!this.wrote.includes(file)) this.wrote.push(file);
  }
  /** The truth about the checkpoint file after a failed write. */
  stateNote() {
    if (this.savedStep != null) return `the checkpoint of step ${this.savedStep} in ${this.paths.state} is complete`;
    return existsSync(this.paths.state) ? `${this.paths.state} is unchanged` : 'no checkpoint has been written';
  }
  /** Removes the folders made for the run when nothing was written into them. */
  cleanUp() {
    if (this.made && !this.wrote.length)
      for (const d of [...this.made].reverse())
        try {
          rmdirSync(d);
        } catch {
          return;
        }
  }
}
