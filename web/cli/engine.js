// engine.js: the commands' way to the wasm engine, imported only when a command runs it, so that
// `vitrine --help` and every command's --help work before anything is built. The options every
// engine command takes (--wasm, --threads) are described here once.
import { readFileSync } from 'node:fs';
import { CliError, UsageError } from './args.js';
import { flagsOf } from './flags.js';
import { OPTIONS } from '../train/options.js';
import { TRAIN_PRESETS } from '../train/presets.js';
import { VitrineError } from '../errors.js';

const BUILDS = JSON.parse(readFileSync(new URL('../../wasm/builds.json', import.meta.url), 'utf8'));
export const MAX_THREADS = 64;

const BUILD_NAMES = [...Object.keys(BUILDS.builds), 'wasi'];
/** --wasm and --threads, as every command that runs the engine takes them (web/train/options.js
 * declares them; --wasm is checked against wasm/builds.json here, before anything runs: train
 * starts its engine in a worker). */
export const ENGINE_OPTIONS = {
  wasm: {
    value: 'BUILD',
    help: `${BUILD_NAMES.join(' | ')}\n(default: the first of ${BUILDS.default.join(', ')} this host runs)`,
    parse: (v, flag) => {
      if (!BUILD_NAMES.includes(v))
        throw new UsageError(`${flag}: unknown wasm build '${v}' (${BUILD_NAMES.join(', ')})`);
      return v;
    },
  },
  threads: flagsOf({ threads: OPTIONS.threads }).threads,
};

/** --backend, for the commands that run training steps or plan them (train, plan). */
export const BACKEND_OPTION = { backend: flagsOf({ backend: OPTIONS.backend }).backend };

/** ", backend NAME (why)" for a run's first line: the reason is said unless plain wasm by default. */
export const backendNote = (engine, asked) =>
  `, backend ${engine.backend.name}${engine.backend.name === 'wasm' && !asked ? '' : ` (${engine.backend.reason})`}`;

/** The engine's flags of a training run: --wasm, --threads, --backend. */
export const engineFlags = () => ({ ...ENGINE_OPTIONS, ...BACKEND_OPTION });

const missing = (what) => `the WebAssembly build is missing (${what}): run bash scripts/setup.sh, or npm run build`;

/** The shell (web/vitrine.js), with relaxed SIMD turned on in this process before any wasm is
 * compiled (Node 20 has it behind a V8 flag). A build that is not there is one line, not a stack. */
export async function shell() {
  let vitrine;
  try {
    vitrine = await import('../vitrine.js');
  } catch (e) {
    const m = /(build[/\\]wasm[/\\][^'" ]*)/.exec(e.message);
    if (e.code === 'ERR_MODULE_NOT_FOUND' && m) throw new CliError(missing(m[1]));
    throw e;
  }
  await vitrine.enableNodeRelaxedSimd();
  return vitrine;
}

/** A loaded engine for --wasm / --threads; a build that cannot be loaded here is a usage error (exit 2). */
export async function loadEngine({ wasm, threads, backend } = {}) {
  const { createVitrine } = await shell();
  try {
    return await createVitrine({ wasm, threads, backend });
  } catch (e) {
    if (e.code === 'ENOENT') throw new CliError(missing(e.path));
    if (e.name === 'GpuError') throw new CliError(`--backend ${backend}: ${e.message}`);
    throw new UsageError(e.message);
  }
}

/** The names the engine offers, for help texts: { policies, presets }, or null before the build. */
export async function engineNames() {
  try {
    const vt = await loadEngine({ threads: 1 });
    const names = { policies: vt.policies(), presets: vt.presets() };
    vt.close();
    return names;
  } catch {
    return null;
  }
}

/** The help's closing lines: the checkpointing policies and timm presets, from the engine. */
export async function namesHelp() {
  const n = await engineNames();
  if (!n) return 'POLICY and timm presets: listed here once the engine is built (npm run build).\n';
  return (
    `POLICY: ${n.policies.join(', ')} (vitrine plan --all-policies shows what each costs)\n` +
    wrapList('timm presets: ', n.presets)
  );
}

// "label a, b, c" in lines of at most 100 characters, continued under the first name
function wrapList(label, names, width = 100) {
  let out = '',
    line = label;
  for (const [i, name] of names.entries()) {
    const piece = name + (i < names.length - 1 ? ',' : '');
    if (line.length > label.length && line.length + 1 + piece.length > width) {
      out += line + '\n';
      line = ' '.repeat(label.length) + piece;
    } else line += (line.length > label.length ? ' ' : '') + piece;
  }
  return out + line + '\n';
}

/**
 * The dims of the model `spec` makes, checked by the engine before anything is allocated or read
 * for it (Vitrine.checkModel): a spec from the command line that the engine refuses is a usage
 * error naming its flag (--preset: with the names there are); one from a file (`from`: { file,
 * field, what }) is that file's damaged metadata.
 */
export function specDims(vt, spec, { flag = '--config', from = null } = {}) {
  if (!from && spec.preset != null && !vt.presets().includes(spec.preset))
    throw new UsageError(
      `--preset: '${spec.preset}' is not a preset (${Object.keys(TRAIN_PRESETS).join(', ')}; timm's ${vt.presets().join(', ')})`,
    );
  try {
    return vt.checkModel(spec);
  } catch (e) {
    if (!(e instanceof VitrineError)) throw e;
    if (from)
      throw new CliError(`${from.file}: ${from.what || 'damaged checkpoint metadata'}: ${from.field}: ${e.message}`);
    throw new UsageError(`${spec.preset != null ? '--preset' : flag}: ${e.message.replace(/^config: /, '')}`);
  }
}

/** The engine a resumed run asks for (its checkpoint's build unless --wasm): a build name in the
 * checkpoint that cannot be loaded is its damaged metadata. */
export async function loadEngineFor(o, run, file) {
  try {
    return await loadEngine({ wasm: o.wasm || run.wasm, threads: o.threads, backend: o.backend });
  } catch (e) {
    if (file && !o.wasm && run.wasm && e instanceof UsageError)
      throw new CliError(`${file}: damaged checkpoint metadata: wasm: ${e.message}`);
    throw e;
  }
}

/** One batch of images at the model's size must fit wasm's memory (2 GiB), before anything is read. */
export function checkBatch(batch, { img, chans }) {
  const bytes = batch * chans * img * img * 4;
  if (bytes > 2 ** 31)
    throw new CliError(
      `--batch ${batch}: one batch of ${img}x${img}x${chans} images is ${(bytes / 2 ** 30).toFixed(1)} GiB, more than wasm memory holds`,
    );
}
