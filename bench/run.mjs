// run.mjs: every benchmark of bench/ in one run, called by bench/run.sh (which builds first):
// writes bench/results.json (every measurement) and bench/results.md (the tables). Reports; never
// fails on a time. Each table says its statistic. Comparisons are interleaved: inside one
// process where both sides are vitrine engines (bench/step_bench.mjs, train_bench's policies,
// kernel_bench's peak pairs), process by process in rounds (A B C A B C ...) otherwise, with the
// order rotated every round; a ratio is the median of the per-round ratios, with its range.
// Processes are pinned with taskset: one core (cpu 0) for one-core figures, cpus 0-1 for two.
// Clocks: one-core figures are CPU time (each process's, or kernel_bench's / train_bench's
// thread's: another process's share of the core is not charged), two-core figures and thread
// speedups wall time (nothing else measures a speedup); each table names its clock.
//   node bench/run.mjs [--quick] [--before-root DIR --before-ref REV] [--from results.json] [--out DIR]
//                      [--only kernels,one_core,two_cores,main_job,default_jobs,policies,thread_profile,builds,demo]
import { execSync } from 'node:child_process';
import { writeFileSync, readFileSync, existsSync, mkdirSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import {
  ROOT,
  hostInfo,
  loadavg,
  runJSON,
  median,
  min,
  summary,
  paired,
  f,
  fr,
  pct,
  threadVerdict,
  SHARED_CORE,
  JAXJS_NODE_FLAGS,
} from './lib.mjs';

const argv = process.argv.slice(2);
const QUICK = argv.includes('--quick');
const argVal = (n) => {
  const i = argv.indexOf(n);
  return i >= 0 ? argv[i + 1] : null;
};
const BEFORE = argVal('--before-root'),
  BEFORE_REF = argVal('--before-ref'),
  FROM = argVal('--from');
const OUT_ARG = argVal('--out'),
  OUT = OUT_ARG || join(ROOT, 'bench'); // where results.md / results.json go (tests render elsewhere)
if (OUT_ARG) mkdirSync(OUT, { recursive: true });
const OUT_REL = relative(ROOT, resolve(OUT)),
  SHOWN_OUT = OUT_REL && !OUT_REL.startsWith('..') ? OUT_REL : resolve(OUT); // as the log and results.md name it
const PY = process.env.VITRINE_PYTHON || '/usr/bin/python3';
const BUILD = join(ROOT, 'build');
const TINY = 'vit_tiny_patch16_224',
  SMALL = 'vit_small_patch16_224';
const t0 = Date.now();
const log = (s) => process.stderr.write(`[bench ${((Date.now() - t0) / 1e3).toFixed(0)}s] ${s}\n`);
const node = (file) => [process.execPath, [join(ROOT, 'bench', file)]];
const wasi = (wasm) => [process.execPath, [join(ROOT, 'bench/wasi_run.mjs'), wasm]];
const ONE = '0',
  TWO = '0,1';
const CPU = ['--clock', 'cpu']; // the one-core runs' clock (see above)

let R = {
  date: new Date().toISOString(),
  host: hostInfo(),
  quick: QUICK,
  before: BEFORE ? { root: BEFORE, ref: BEFORE_REF } : null,
  commit: null,
  sections: {},
  notes: [],
};
try {
  R.commit = execSync('git rev-parse --short HEAD', {
    cwd: ROOT,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  }).trim();
} catch {
  /* no git */
}

/** Runs `cmd args` pinned to cpus; returns its JSON objects (logging a failure). */
function run(label, [cmd, args0], args, { cpus = ONE, env = {} } = {}) {
  log(`${label} (load ${loadavg()[0]})`);
  const r = runJSON(cmd, [...args0, ...args], { cpus, env });
  if (r.status !== 0 || !r.objects.length) {
    log(`${label}: exit ${r.status} ${r.signal || ''} ${r.stderr.slice(-500)}`);
    R.notes.push(`${label}: failed (exit ${r.status}${r.signal ? ', ' + r.signal : ''})`);
  }
  return r.objects;
}
/** A section: its measurements with the load average before and after (--only a,b: those). */
const ONLY = argVal('--only') ? argVal('--only').split(',') : null;
async function section(key, fn) {
  if (ONLY && !ONLY.includes(key)) return;
  const s = { load_start: loadavg(), t_start: (Date.now() - t0) / 1e3 };
  try {
    Object.assign(s, await fn());
  } catch (e) {
    s.error = String((e && e.stack) || e);
    log(`${key}: ${s.error}`);
  }
  s.load_end = loadavg();
  s.seconds = (Date.now() - t0) / 1e3 - s.t_start;
  R.sections[key] = s;
}
const rotate = (list, i) => list.map((_, j) => list[(i + j) % list.length]);
const haveTorch = () => existsSync(PY) && runJSON(PY, ['-c', 'import torch']).status === 0;
const haveTfjs = () => existsSync(join(ROOT, 'node_modules/@tensorflow/tfjs-backend-wasm'));
const haveJaxjs = () => existsSync(join(ROOT, 'node_modules/@jax-js/jax'));

if (FROM) R = JSON.parse(readFileSync(FROM, 'utf8'));
else {
  const rounds = QUICK ? 1 : 3;
  const batches = QUICK ? [1] : [1, 4];
  // ---- peaks, GEMM and attention (kernel_bench, every build) ------------------------------------
  await section('kernels', async () => {
    const kargs = ['--batch', '2', ...(QUICK ? ['--quick', '--widths', '192'] : ['--rounds', '11'])];
    const out = {};
    const builds = [
      ['wasm-relaxed', wasi(join(BUILD, 'wasm/kernel_bench-relaxed.wasm'))],
      ...(BEFORE ? [['before wasm-relaxed', wasi(join(BEFORE, 'build/wasm/kernel_bench-relaxed.wasm'))]] : []),
      ['wasm-simd', wasi(join(BUILD, 'wasm/kernel_bench-simd.wasm'))],
      ['native-fma', [join(BUILD, 'kernel_bench_fma'), []]],
      ['native-sse2', [join(BUILD, 'kernel_bench'), []]],
    ];
    for (const [name, cmd] of builds) out[name] = run(`kernels ${name}`, cmd, kargs)[0] || null;
    return { builds: out };
  });

  // ---- the ViT-Ti/16 step on one core: vitrine relaxed, PyTorch strictly one core, TF.js --------
  await section('one_core', async () => {
    const res = [];
    for (const b of batches) {
      const steps = QUICK ? 2 : b === 1 ? 5 : 3;
      const jobs = [
        [
          'vitrine',
          () =>
            run(`1 core b${b} vitrine`, node('step_bench.mjs'), [
              '--job',
              'vit',
              '--batch',
              String(b),
              '--rounds',
              String(steps),
              '--warmup',
              '3',
              '--peak',
              'relaxed',
              ...CPU,
              '--engine',
              '.:relaxed:1',
              ...(BEFORE ? ['--engine', `${BEFORE}:relaxed:1:before`] : []),
            ])[0],
        ],
        ...(haveTorch()
          ? [
              [
                'pytorch',
                () =>
                  run(
                    `1 core b${b} pytorch`,
                    [PY, [join(ROOT, 'bench/torch_vit.py')]],
                    [
                      '--batch',
                      String(b),
                      '--torch-threads',
                      '1',
                      '--blas-threads',
                      '1',
                      '--steps',
                      String(steps),
                      '--warmup',
                      '2',
                      ...CPU,
                    ],
                  )[0],
              ],
            ]
          : []),
        ...(haveTfjs()
          ? [
              [
                'tfjs',
                () =>
                  run(`1 core b${b} tfjs wasm`, node('tfjs_vit.mjs'), [
                    '--backend',
                    'wasm',
                    '--batch',
                    String(b),
                    '--steps',
                    String(QUICK ? 1 : b === 1 ? 3 : 2),
                    '--warmup',
                    QUICK ? '1' : '2',
                    ...CPU,
                  ])[0],
              ],
            ]
          : []),
        // jax-js checks its step against PyTorch first (bench/jaxjs_vit.mjs): no PyTorch, no jax-js figure
        ...(haveJaxjs() && haveTorch()
          ? [
              [
                'jaxjs',
                () =>
                  run(
                    `1 core b${b} jax-js wasm`,
                    [process.execPath, [...JAXJS_NODE_FLAGS, join(ROOT, 'bench/jaxjs_vit.mjs')]],
                    [
                      '--batch',
                      String(b),
                      '--steps',
                      String(QUICK ? 1 : b === 1 ? 3 : 2),
                      '--warmup',
                      QUICK ? '0' : '1', // after the check's two steps
                      ...CPU,
                    ],
                  )[0],
              ],
            ]
          : []),
      ];
      for (let r = 0; r < rounds; r++) {
        const round = { batch: b, round: r, load: loadavg()[0] };
        for (const [name, fn] of rotate(jobs, r)) round[name] = fn() || null;
        res.push(round);
      }
      if (!QUICK && b === 1 && haveTfjs())
        res.push({
          batch: b,
          naive_tfjs:
            run('1 core b1 tfjs wasm, naive layout', node('tfjs_vit.mjs'), [
              '--backend',
              'wasm',
              '--batch',
              '1',
              '--steps',
              '1',
              '--warmup',
              '1',
              '--layout',
              'naive',
              ...CPU,
            ])[0] || null,
        });
    }
    if (!haveTorch()) R.notes.push(`PyTorch: ${PY} cannot import torch (bash scripts/setup.sh installs python3-torch)`);
    if (!haveTfjs()) R.notes.push('TF.js: node_modules/@tensorflow missing (npm ci)');
    if (!haveJaxjs()) R.notes.push('jax-js: node_modules/@jax-js/jax missing (npm ci)');
    else if (!haveTorch()) R.notes.push('jax-js: not run (its step is checked against PyTorch before it is timed)');
    return { rounds: res };
  });

  // ---- two cores: vitrine 1 vs 2 threads (one process), PyTorch's thread configurations --------
  await section('two_cores', async () => {
    const res = [];
    const configs = QUICK
      ? [
          [1, 1],
          [1, 2],
        ]
      : [
          [1, 1],
          [1, 2],
          [2, 1],
          [2, 2],
        ];
    for (const b of batches) {
      const steps = QUICK ? 2 : b === 1 ? 5 : 3;
      const jobs = [
        [
          'vitrine',
          () =>
            run(
              `2 cores b${b} vitrine`,
              node('step_bench.mjs'),
              [
                '--job',
                'vit',
                '--batch',
                String(b),
                '--rounds',
                String(steps + 2),
                '--warmup',
                '3',
                '--engine',
                '.:relaxed-mt:1',
                '--engine',
                '.:relaxed-mt:2',
                ...(BEFORE
                  ? ['--engine', `${BEFORE}:relaxed-mt:1:before 1t`, '--engine', `${BEFORE}:relaxed-mt:2:before 2t`]
                  : []),
              ],
              { cpus: TWO },
            )[0],
        ],
      ];
      // the ceiling of a 2-thread speedup at that moment: the peak loop on 1 thread, then on 2 (kernel_bench --peak-threads)
      jobs.push([
        'peak',
        () =>
          run(
            `2 cores b${b} peak loop 1 vs 2 threads`,
            [join(BUILD, 'kernel_bench_fma'), []],
            ['--peak-threads', '2', '--rounds', '7'],
            { cpus: TWO },
          )[0],
      ]);
      if (haveTorch())
        for (const [tt, bt] of configs)
          jobs.push([
            `pytorch ${tt}x${bt}`,
            () =>
              run(
                `2 cores b${b} pytorch torch ${tt} x OpenBLAS ${bt}`,
                [PY, [join(ROOT, 'bench/torch_vit.py')]],
                [
                  '--batch',
                  String(b),
                  '--torch-threads',
                  String(tt),
                  '--blas-threads',
                  String(bt),
                  '--steps',
                  String(steps),
                  '--warmup',
                  '2',
                ],
                { cpus: TWO },
              )[0],
          ]);
      for (let r = 0; r < rounds; r++) {
        const round = { batch: b, round: r, load: loadavg()[0] };
        for (const [name, fn] of rotate(jobs, r)) round[name] = fn() || null;
        res.push(round);
      }
    }
    return { rounds: res, configs };
  });

  // ---- the main job: images/s at 1 and 2 threads (and before) ----------------------------------
  const peak2 = (label) =>
    run(
      `${label}: peak loop 1 vs 2 threads`,
      [join(BUILD, 'kernel_bench_fma'), []],
      ['--peak-threads', '2', '--rounds', '7'],
      { cpus: TWO },
    )[0] || null;
  await section('main_job', async () => ({
    peak_before: peak2('main job'),
    out:
      run(
        'main job',
        node('step_bench.mjs'),
        [
          '--job',
          'mainjob',
          '--rounds',
          QUICK ? '3' : '21',
          '--warmup',
          '5',
          '--engine',
          '.:relaxed-mt:1',
          '--engine',
          '.:relaxed-mt:2',
          ...(BEFORE
            ? ['--engine', `${BEFORE}:relaxed-mt:1:before 1t`, '--engine', `${BEFORE}:relaxed-mt:2:before 2t`]
            : []),
        ],
        { cpus: TWO },
      )[0] || null,
    peak_after: peak2('main job'),
  }));

  // ---- the default jobs' steps: presets and policies (bench/classify_bench.mjs) -----------------
  await section('default_jobs', async () => ({
    rows: run('default jobs', node('classify_bench.mjs'), ['--threads', '2', '--repeat', QUICK ? '2' : '15'], {
      cpus: TWO,
    }),
  }));

  // ---- where the time goes, and the checkpointing policies (train_bench, relaxed, one core) ------
  await section('policies', async () => {
    const tb = wasi(join(BUILD, 'wasm/train_bench-relaxed.wasm'));
    const pol = (l) => l.flatMap((p) => ['--policy', p]);
    const jobs = QUICK
      ? [[TINY, 'encode', 1, ['none', 'block', 'selective']]]
      : [
          [TINY, 'encode', 4, ['none', 'block', 'every:2', 'sqrt', 'selective']],
          [TINY, 'mae', 4, ['none', 'block', 'selective']],
          [SMALL, 'encode', 1, ['none', 'block', 'selective']],
        ];
    const out = [];
    for (const [preset, kind, b, policies] of jobs)
      out.push(
        ...run(`policies ${preset} ${kind} b${b}`, tb, [
          '--preset',
          preset,
          '--kind',
          kind,
          '--batch',
          String(b),
          ...pol(policies),
          '--repeat',
          QUICK ? '2' : '5',
          '--warmup',
          '2',
          ...CPU,
        ]),
      );
    // the older engine's breakdown beside this one's: the two processes alternate in rounds (A B, B A, ...)
    const pairs = [];
    if (BEFORE) {
      const sides = [
        ['after', tb],
        ['before', wasi(join(BEFORE, 'build/wasm/train_bench-relaxed.wasm'))],
      ];
      for (let r = 0; r < rounds; r++)
        for (const [side, prog] of rotate(sides, r))
          pairs.push(
            ...run(`policies ${side} (paired)`, prog, [
              '--preset',
              TINY,
              '--kind',
              'encode',
              '--batch',
              String(QUICK ? 1 : 4),
              '--policy',
              'none',
              '--repeat',
              QUICK ? '2' : '3',
              '--warmup',
              '2',
              ...CPU,
            ]).map((o) => ({ ...o, side, round: r })),
          );
    }
    return { rows: out, pairs };
  });

  // ---- where the time goes at 1 and 2 threads: the native FMA twin (train_bench has per-kernel
  // timers; the wasm commands have no threads), processes in rounds -----------------------------
  await section('thread_profile', async () => {
    const MAIN =
      '{"encoder": {"img_size": 28, "patch_size": 7, "in_chans": 1, "embed_dim": 128, "depth": 4, "num_heads": 4, ' +
      '"mlp_ratio": 2}, "decoder_dim": 64, "decoder_depth": 2, "decoder_heads": 4, "norm_pix_loss": true}'; // web/train/presets.js fmnist-p7-mlp2
    const jobs = [
      ['vit_tiny b1', ['--preset', TINY, '--batch', '1']],
      ...(QUICK ? [] : [['vit_tiny b4', ['--preset', TINY, '--batch', '4']]]),
      ['main job', ['--config', MAIN, '--kind', 'mae', '--batch', '64', '--mask-ratio', '0.5', '--policy', 'block']],
    ];
    const res = [];
    for (let r = 0; r < rounds; r++)
      for (const [name, a] of jobs)
        for (const t of r % 2 ? [2, 1] : [1, 2])
          res.push(
            ...run(
              `thread profile ${name} ${t}t`,
              [join(BUILD, 'train_bench_fma'), []],
              [...a, '--threads', String(t), '--repeat', QUICK ? '2' : '5', '--warmup', '2'],
              { cpus: TWO },
            ).map((o) => ({ ...o, job: name, round: r })),
          );
    return { rows: res };
  });

  // ---- builds side by side on one core: wasm relaxed vs native FMA, SIMD128 vs SSE2 -------------
  await section('builds', async () => {
    const progs = [
      ['wasm-relaxed', wasi(join(BUILD, 'wasm/train_bench-relaxed.wasm'))],
      ['native-fma', [join(BUILD, 'train_bench_fma'), []]],
      ['wasm-simd', wasi(join(BUILD, 'wasm/train_bench-simd.wasm'))],
      ['native-sse2', [join(BUILD, 'train_bench'), []]],
    ];
    const res = [];
    for (let r = 0; r < rounds; r++) {
      const round = { round: r, load: loadavg()[0] };
      for (const [name, cmd] of rotate(progs, r))
        round[name] = run(`builds ${name}`, cmd, [
          '--preset',
          TINY,
          '--kind',
          'encode',
          ...batches.flatMap((b) => ['--batch', String(b)]),
          '--policy',
          'none',
          '--repeat',
          '3',
          '--warmup',
          '2',
          ...CPU,
        ]);
      res.push(round);
    }
    return { rounds: res };
  });

  // ---- the demo's 224-px MAE: decoder sized for a tab vs lightly's -----------------------------
  await section('demo', async () => ({
    out:
      run(
        'demo decoders',
        node('step_bench.mjs'),
        [
          '--job',
          'demo',
          '--batch',
          QUICK ? '1' : '8',
          '--rounds',
          QUICK ? '1' : '3',
          '--warmup',
          '1',
          '--engine',
          '.:relaxed-mt:2',
        ],
        { cpus: TWO },
      )[0] || null,
  }));

  R.seconds = (Date.now() - t0) / 1e3;
  writeFileSync(join(OUT, 'results.json'), JSON.stringify(R, null, 1) + '\n'); // the measurements first
}

// ---- the report ------------------------------------------------------------------------------
const md = [];
const P = (s = '') => md.push(s);
const S = R.sections;
const short = (m) => m.replace('_patch16_224', '');
const loadNote = (s) => (s ? `load average ${s.load_start?.[0]} -> ${s.load_end?.[0]} (1 min)` : '');
const H = R.host;
P('# vitrine benchmarks');
P();
// a run on a busy machine says so first (the loads of every section, 1 min). The run itself counts:
// ~1 in its one-core sections, ~2 in its two-core ones, so only a load above the cores is other work.
const loads = Object.values(S)
  .flatMap((x) => [x.load_start?.[0], x.load_end?.[0]])
  .filter((x) => x != null);
if (loads.length && Math.max(...loads) > R.host.cores + 0.5)
  P(
    `**Measured under load**: the 1-minute load average was ${f(Math.min(...loads), 1)}–${f(Math.max(...loads), 1)} on ${R.host.cores} cores ` +
      'during this run, more than the run itself makes (other work on the machine). The paired ratios and the CPU-time figures hold up best; two-core wall times and ' +
      'thread speedups are lowered by what the other processes took (see "cores had").\n',
  );
// ... and a run whose two vCPUs had one core's multiply-add units (the peak loop did not scale)
const ceilings = [
  ...(S.two_cores?.rounds || []).map((r) => r.peak?.scaling),
  S.main_job?.peak_before?.scaling,
  S.main_job?.peak_after?.scaling,
].filter((x) => x != null && Number.isFinite(x));
if (ceilings.length && min(ceilings) < SHARED_CORE)
  P(
    `**Two vCPUs, one core's arithmetic**: the peak loop (registers only, no memory, no synchronisation) ran ${f(min(ceilings), 2)}–` +
      `${f(Math.max(...ceilings), 2)} times as fast on 2 threads as on 1 in this run (${ceilings.filter((x) => x < SHARED_CORE).length} of ` +
      `${ceilings.length} probes below ${SHARED_CORE}; two cores give ~2): the host ran the two vCPUs, at those times, as the two hardware ` +
      'threads of one core. A thread target is then not measurable (section 9 says so), and the one-core figures may be lowered by ' +
      "whatever ran on that core's other hardware thread (another tenant, when cpu 1 was idle): it takes cache and load slots, which " +
      'cost the matrix products more than the peak loop.\n',
  );
P(
  `${R.date}, commit ${R.commit || '?'}${R.before ? ` (before: ${R.before.ref || R.before.root})` : ''}. ${H.cpu}, ${H.cores} cores, host vector ISA ` +
    `${H.isa} (PyTorch/OpenBLAS use it); vitrine runs WebAssembly SIMD128, 128-bit vectors whatever the host (its default relaxed ` +
    `build: f32x4.relaxed_madd, an FMA${H.fma ? ' here' : ' where the CPU has one'}), Node ${H.node} (V8 ${H.v8}). ` +
    `${R.quick ? '**QUICK smoke run: the figures mean nothing.** ' : ''}Made by \`bash bench/run.sh${R.before ? ` --before ${R.before.ref}` : ''}\` in ` +
    `${f(R.seconds / 60, 1)} min (the measuring; run.sh adds the builds). Processes pinned with taskset: one core = cpu 0, two cores = cpus 0-1.` +
    `${H.taskset ? '' : ' (taskset missing: NOT pinned.)'} Every table names its statistic and its load average (1 min, at its start and end): ` +
    'other processes on these cores slow everything down, paired ratios least.',
);
P();

// 1. peaks
const K = S.kernels?.builds || {};
P('## 1. The one-core multiply-add peak');
P();
P(
  `Best and median of 15 timed calls of 12 independent multiply-add chains (registers only), after warm-up. ${loadNote(S.kernels)}.`,
);
P();
P('| build | loop | median GFLOP/s | best |');
P('|---|---|---|---|');
for (const [b, k] of Object.entries(K)) {
  if (!k) {
    P(`| ${b} | (failed) | | |`);
    continue;
  }
  P(`| ${b} | ${k.peak.name} | ${f(k.peak.gflops_median)} | ${f(k.peak.gflops_best)} |`);
  if (k.avx2_fma_gflops_best)
    P(
      `| ${b}, AVX2 + FMA (256-bit; NOT a vitrine build: what OpenBLAS can use) | the same C loop, -mavx2 -mfma | | ${f(k.avx2_fma_gflops_best)} |`,
    );
}
P();

// 2. GEMM
P('## 2. GEMM and attention at ViT widths, % of the one-core peak');
P();
P(
  'M = 2 images x 197 tokens = 394 rows. Forward = `vt_matmul_forward` (2MKN flops), backward = `vt_matmul_backward` with dinp, dW and dbias ' +
    '(4MKN); attention = `vt_attention_forward` / `_backward` (head_dim 64, T 197; flops of its products 4T²D / 8T²D). Statistic: every ' +
    `kernel call is paired with a peak call just before it, both timed by the thread's CPU clock; the cell is the median over ` +
    `${K['wasm-relaxed']?.rounds ?? '?'} rounds of (kernel GFLOP/s / that peak), with its lowest and highest. ${loadNote(S.kernels)}.`,
);
P();
const kb = (b) => K[b]?.rows || [];
const cols = [
  'wasm-relaxed',
  ...(K['before wasm-relaxed'] ? ['before wasm-relaxed'] : []),
  'wasm-simd',
  'native-fma',
  'native-sse2',
].filter((b) => K[b]);
P(`| width | op | M x K x N | dir | ${cols.join(' | ')} |`);
P(`|---|---|---|---|${cols.map(() => '---').join('|')}|`);
const rowKey = (r) => `${r.width}/${r.op}/${r.dir}`;
for (const r of kb('wasm-relaxed')) {
  const cell = (b) => {
    const x = kb(b).find((q) => rowKey(q) === rowKey(r));
    return x ? `${f(x.pct_peak, 0)}% (${f(x.pct_peak_min, 0)}–${f(x.pct_peak_max, 0)})` : '–';
  };
  P(`| ${r.width} | ${r.op} | ${r.M}x${r.K}x${r.N} | ${r.dir} | ${cols.map(cell).join(' | ')} |`);
}
P();

// 3. one core
const oc = S.one_core?.rounds || [];
const ocb = [...new Set(oc.filter((r) => r.round != null).map((r) => r.batch))];
const runOf = (o, label) =>
  o?.runs?.find((x) => (label ? x.label === label : x.root === ROOT || !x.label.startsWith('before')));
P('## 3. The ViT-Ti/16 training step on one core: vitrine vs PyTorch vs TF.js vs jax-js');
P();
P(
  "One step of timm's ViT-Ti/16 (vit_tiny_patch16_224) with a 1000-class head: forward, cross-entropy, backward, AdamW (lr 1.5e-4, " +
    'betas 0.9/0.95, weight decay 0.05), policy none; the same in all four (bench/step_bench.mjs --job vit, bench/torch_vit.py, ' +
    'bench/tfjs_vit.mjs, bench/jaxjs_vit.mjs). Each process pinned to cpu 0. vitrine: the relaxed build (the default) through the JS shell. PyTorch: strictly ' +
    'one core (torch.set_num_threads(1), OPENBLAS_NUM_THREADS=1, taskset); its share of CPU time over the timed steps is shown. TF.js: ' +
    'wasm backend (XNNPACK, SIMD, threads off) on its fast path: every product a plain 2-D matMul without transpose flags, their ' +
    'gradients written with explicit tf.transpose, attention per head on 2-D slices (XNNPACK takes only that layout; the rest falls to ' +
    'scalar loops). jax-js: its Wasm backend (one thread: Node has no Worker for its pool; relaxed SIMD on), the step one ' +
    'jit(valueAndGrad) program with AdamW inside, tokens padded to 200 (its vectoriser wants multiples of 4) with the pad keys masked, ' +
    "each process's first two steps checked against PyTorch (the same weights and inputs, float64) under the parity rule before any " +
    "is timed. Clock: each process's CPU time (user + system, all its threads), so that other processes on cpu 0 are not charged. " +
    "Statistic: rounds of the four processes (order rotated); ms = median over rounds of each process's median step; " +
    "ratios = median (min–max) of the per-round ratios. % of peak: model FLOPs (bench/train_bench.c's formula + the head) / step time / " +
    "the relaxed-madd peak timed (by the same clock) just before each step, median (min–max) over the steps. PyTorch's CPU share is " +
    'its CPU time over wall time (at most 100% pinned to one core).',
);
P();
P(
  '| batch | rounds | load | vitrine ms | PyTorch ms (CPU share) | TF.js ms | jax-js ms | vitrine / PyTorch | TF.js / vitrine | jax-js / vitrine | vitrine % of peak | vitrine images/s |',
);
P('|---|---|---|---|---|---|---|---|---|---|---|---|');
const oneCore = {};
for (const b of ocb) {
  const rs = oc.filter((r) => r.batch === b && r.round != null);
  const v = rs.map((r) => runOf(r.vitrine)?.ms_median),
    t = rs.map((r) => r.pytorch?.ms_per_step),
    j = rs.map((r) => r.tfjs?.ms_per_step),
    x = rs.map((r) => r.jaxjs?.ms_per_step);
  const share = median(rs.map((r) => r.pytorch?.cpu_share));
  const pk = runOf(rs[0]?.vitrine)?.pct_peak;
  const pkAll = summary(
    rs.flatMap((r) => {
      const x = runOf(r.vitrine);
      return x && x.pct_peak ? [x.pct_peak.median] : [];
    }),
  );
  oneCore[b] = {
    vitrine_ms: median(v),
    torch_ms: median(t),
    tfjs_ms: median(j),
    vitrine_over_torch: paired(v, t),
    tfjs_over_vitrine: paired(j, v),
    jaxjs_ms: median(x),
    jaxjs_over_vitrine: paired(x, v),
    pct_peak: pkAll,
  };
  P(
    `| ${b} | ${rs.length} | ${f(rs[0]?.load, 1)}–${f(rs[rs.length - 1]?.load, 1)} | ${f(median(v), 0)} | ${f(median(t), 0)} (${f(100 * share, 0)}%) | ${f(median(j), 0)} | ${f(median(x), 0)} | ` +
      `${fr(oneCore[b].vitrine_over_torch)} | ${fr(oneCore[b].tfjs_over_vitrine)} | ${fr(oneCore[b].jaxjs_over_vitrine)} | ${pk ? pct(pkAll, 0) : '–'} | ${f((b * 1e3) / median(v), 2)} |`,
  );
}
const naive = oc.find((r) => r.naive_tfjs)?.naive_tfjs;
if (naive)
  P(
    `\nTF.js, the obvious layout instead (batched tf.matMul with transpose flags and tf's own gradients: its scalar loops), batch 1: ${f(naive.ms_per_step, 0)} ms per step.`,
  );
const ti = oc.find((r) => r.pytorch)?.pytorch;
if (ti)
  P(
    `\nPyTorch ${ti.torch}, BLAS ${ti.libs.map((l) => l.split('/').pop()).join(', ')} (OpenBLAS core ${ti.openblas_core}, ${ti.blas_threads} thread; sgemm 1024³ at that setting ${f(ti.sgemm1024_gflops)} GFLOP/s).`,
  );
const tj = oc.find((r) => r.tfjs)?.tfjs;
if (tj) P(`TensorFlow.js ${tj.tfjs}.`);
const jx = oc.filter((r) => 'jaxjs' in r); // null: the process printed nothing
const jxOk = jx.filter((r) => r.jaxjs?.check?.ok && r.jaxjs.ms_per_step != null);
if (jx.length) {
  const c = jxOk.map((r) => r.jaxjs.check),
    any = jx.find((r) => r.jaxjs)?.jaxjs;
  P(
    `jax-js ${any?.jaxjs ?? '?'}, attention ${any?.attention ?? '?'}; like vitrine it runs WebAssembly SIMD128 with relaxed_madd (128-bit ` +
      `vectors on ${H.cpu}, whose own ISA is ${H.isa}). Checked against PyTorch in ${c.length} of ${jx.length} processes` +
      (c.length
        ? `: losses of steps 1-2 err ≤ ${Math.max(...c.flatMap((x) => x.losses.map((l) => l.err))).toExponential(1)}, every gradient tensor ` +
          `err ≤ ${Math.max(...c.map((x) => x.worst.err)).toExponential(1)} (worst ${c[0].worst.key}; PyTorch float32's own ≤ ` +
          `${Math.max(...c.map((x) => x.torch32_worst)).toExponential(1)}), gradient norm ${f(c[0].grad_norm, 4)} against PyTorch's ${f(c[0].torch_grad_norm, 4)} (b${jxOk[0].batch})`
        : '') +
      '.',
  );
  for (const r of jx.filter((r) => !jxOk.includes(r)))
    P(`**jax-js b${r.batch} round ${r.round}: not timed**: ${r.jaxjs?.error || 'no result'}.`);
}
P();

// 4. two cores
const tc = S.two_cores?.rounds || [];
P("## 4. Two cores: thread scaling, and vitrine against PyTorch's fastest two-core setting");
P();
P(
  'The step of section 3, processes pinned to cpus 0-1. vitrine: the relaxed shared-memory build (relaxed-mt) at 1 and 2 threads in ONE ' +
    'process, their steps alternating; "same bits": the losses of every step and the weights after the last are identical at both thread ' +
    'counts. PyTorch: each (torch intra-op threads x OpenBLAS threads) setting in its own process, OPENBLAS_NUM_THREADS set before loading. ' +
    "Clock: wall time (a speedup is a wall-time figure; on a busy machine the other processes' share of the two cores lowers it). Statistic: rounds of all processes (order rotated); ms = median over rounds of each process's median step; speedups and ratios = " +
    'median (min–max) of per-round ratios (vitrine 2 threads vs 1: per step pair). "cores had": the 2-thread steps\' CPU time over their ' +
    'wall time, median (2.0 = both cores its own; less = other processes took part of them). "peak loop 2t/1t": in the same rounds, ' +
    'the multiply-add peak loop on 2 threads against 1 (kernel_bench --peak-threads 2; no memory, no synchronisation): the most any 2-thread ' +
    "program could gain on these cores at that time, median (min–max) of the rounds' medians.",
);
P();
P(
  '| batch | load | vitrine 1t ms | 2t ms | 2t speedup | cores had (2t) | peak loop 2t/1t | same bits | PyTorch 1x1 | 1x2 | 2x1 | 2x2 (torch x OpenBLAS threads, ms) | best PyTorch 2-core | its speedup vs 1x1 | vitrine 2t / best PyTorch |',
);
P('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
const twoCore = {};
for (const b of [...new Set(tc.map((r) => r.batch))]) {
  const rs = tc.filter((r) => r.batch === b);
  const v1 = rs.flatMap((r) => runOf(r.vitrine, 'this tree relaxed-mt 1t')?.ms || []),
    v2 = rs.flatMap((r) => runOf(r.vitrine, 'this tree relaxed-mt 2t')?.ms || []);
  const sp = paired(v1, v2);
  const same = rs.every((r) => r.vitrine?.same_bits?.every((x) => x.same));
  const cfg = (c) => rs.map((r) => r[`pytorch ${c}`]?.ms_per_step);
  const names = ['1x2', '2x1', '2x2'];
  const best = names
    .map((c) => [c, median(cfg(c))])
    .filter((x) => x[1] != null)
    .sort((x, y) => x[1] - y[1])[0];
  const v2r = rs.map((r) => runOf(r.vitrine, 'this tree relaxed-mt 2t')?.ms_median);
  const had = median(rs.map((r) => runOf(r.vitrine, 'this tree relaxed-mt 2t')?.cores_used?.median));
  const ceil = summary(rs.map((r) => r.peak?.scaling));
  twoCore[b] = {
    v1: median(v1),
    v2: median(v2),
    speedup: sp,
    cores_had: had,
    ceiling: ceil,
    same,
    best,
    v2_over_best: best ? paired(v2r, cfg(best[0])) : null,
    torch_speedup: best ? paired(cfg('1x1'), cfg(best[0])) : null,
  };
  P(
    `| ${b} | ${f(rs[0]?.load, 1)}–${f(rs[rs.length - 1]?.load, 1)} | ${f(median(v1), 0)} | ${f(median(v2), 0)} | ${fr(sp)} | ${f(had, 2)} | ${fr(ceil)} | ${same ? 'yes' : '**no**'} | ` +
      `${['1x1', ...names].map((c) => f(median(cfg(c)), 0)).join(' | ')} | ${best ? best[0] : '–'} | ${fr(twoCore[b].torch_speedup)} | ${fr(twoCore[b].v2_over_best)} |`,
  );
}
P();

// 5. main job
const mj = S.main_job?.out;
P('## 5. The main job: images per second');
P();
P(
  'The step of `node web/cli.js train` (the main job) as the CLI runs it: Session.stepOnce (the Trainer, web/train/session.js; TrainingRun.trainOne in an older tree) on Fashion-MNIST = batch assembly + ' +
    "Model.trainStep (MAE, fmnist-p7-mlp2, batch 64, mask ratio 0.5, block checkpointing, the CLI's lr schedule), relaxed-mt build, " +
    'pinned to cpus 0-1, 1 and 2 threads (and the older engine with --before) alternating step by step in one process, wall time. images/s = 64 / ' +
    "the median step time (the CLI's own figure averages the same steps, start-up and evaluation excluded)." +
    (mj
      ? ` ${mj.rounds} rounds after ` +
        `${mj.warmup} warm-up steps; load ${mj.loadavg_start[0]} -> ${mj.loadavg_end[0]}.`
      : ''),
);
P();
const mainJob = {};
if (mj) {
  P(
    '| engine | threads | ms per step | images/s | time vs the first row: median (min–max) | cores had (CPU / wall, median) |',
  );
  P('|---|---|---|---|---|---|');
  for (const r of mj.runs)
    P(
      `| ${r.label} | ${r.threads} | ${f(r.ms_median, 1)} | ${f(r.images_per_s, 0)} | ${fr(r.vs_first)} | ${f(r.cores_used?.median, 2)} |`,
    );
  const a1 = mj.runs.find((r) => r.label === 'this tree relaxed-mt 1t'),
    a2 = mj.runs.find((r) => r.label === 'this tree relaxed-mt 2t');
  if (a1 && a2) mainJob.speedup = paired(a1.ms, a2.ms);
  mainJob.same = mj.same_bits.every((x) => x.same);
  // the ceiling of its speedup: the lower of the peak loop's 2t/1t just before and just after the table
  mainJob.ceiling = min([S.main_job.peak_before?.scaling, S.main_job.peak_after?.scaling]);
  P(
    `\n2 threads / 1 thread: ${fr(mainJob.speedup)}x; same bits at 1 and 2 threads: ${mainJob.same ? 'yes' : '**no**'}.` +
      ` The peak loop on 2 threads against 1 (the ceiling of a speedup on these cores then; section 4): ${fr(S.main_job.peak_before && { median: S.main_job.peak_before.scaling, min: S.main_job.peak_before.scaling_min, max: S.main_job.peak_before.scaling_max })} before this table, ` +
      `${fr(S.main_job.peak_after && { median: S.main_job.peak_after.scaling, min: S.main_job.peak_after.scaling_min, max: S.main_job.peak_after.scaling_max })} after.`,
  );
}
P();

// 5b. the default jobs
const dj = S.default_jobs?.rows || [];
if (dj.length) {
  P("### The default jobs' steps: presets and policies");
  P();
  P(
    'bench/classify_bench.mjs: the classifier step (`vitrine train --objective classify`: timm ViT + head, batch 128, avg pooling) and ' +
      'the MAE step (`vitrine train`: batch 64, mask ratio 0.5) of two presets under two policies, all interleaved step by step in one ' +
      `process, relaxed-mt, 2 threads, pinned to cpus 0-1, ${dj[0].repeat} steps each after 2 warm-up steps, wall time. Statistic: images/s = batch / ` +
      `median step time; ratios = median of per-step ratios. ${loadNote(S.default_jobs)}.`,
  );
  P();
  P('| preset | objective | batch | policy | images/s | time vs none | time vs the first preset |');
  P('|---|---|---|---|---|---|---|');
  for (const o of dj)
    P(
      `| ${o.preset} | ${o.objective}${o.mask_ratio ? ` (mask ${o.mask_ratio})` : ''} | ${o.batch} | ${o.policy} | ${f(o.img_per_s, 0)} | ` +
        `${f(o[Object.keys(o).find((k) => k.startsWith('time_ratio_to_none'))], 2)} | ${f(o[Object.keys(o).find((k) => k.startsWith('time_ratio_to_fmnist'))], 2)} |`,
    );
  P();
}

// 6. policies and breakdown
const pr = S.policies?.rows || [];
P('## 6. Where the time goes, and the checkpointing policies (one core)');
P();
P(
  'bench/train_bench.c, relaxed build (WASI), pinned to cpu 0: "encode" = lightly\'s encode over 197 tokens + backward of a fixed upstream ' +
    'gradient + AdamW; "mae" = lightly\'s MAE example (mask ratio 0.75, decoder 512 wide, 1 deep). One model per policy, same weights; ' +
    `the policies' steps interleaved round by round, timed by the thread's CPU clock. Statistic: ms = median over rounds; x none = median (min–max) of per-round ratios. ${loadNote(S.policies)}.`,
);
P();
P('| model | objective | batch | policy | ms/step | x none | GFLOP/s | activations MiB | total MiB |');
P('|---|---|---|---|---|---|---|---|---|');
const MiB = (x) => f(x / 1048576, 1);
for (const o of pr) {
  if (o.error) {
    P(`| ${short(o.model)} | ${o.objective} | ${o.batch} | ${o.policy} | error: ${o.error} |||||`);
    continue;
  }
  P(
    `| ${short(o.model)} | ${o.objective} | ${o.batch} | ${o.policy} | ${f(o.ms_per_step, 0)} | ` +
      `${f(o.time_vs_first_policy, 2)} (${f(o.time_vs_first_min, 2)}–${f(o.time_vs_first_max, 2)}) | ${f(o.gflops)} | ${MiB(o.activation_bytes)} | ${MiB(o.total_bytes)} |`,
  );
}
P();
const KN = [
  'matmul_fwd',
  'matmul_bwd',
  'attention_fwd',
  'attention_bwd',
  'layernorm_fwd',
  'layernorm_bwd',
  'gelu_fwd',
  'gelu_bwd',
  'optimizer',
  'other',
];
P(
  `Per step, ms (share), policy none; kernels timed by link-time wrapping of their dispatch functions, mean over the timed steps:`,
);
P();
P(`| model | objective | batch | ${KN.join(' | ')} |`);
P(`|---|---|---|${KN.map(() => '---').join('|')}|`);
const breakdown = (o, label = '') =>
  P(
    `| ${label}${short(o.model)} | ${o.objective} | ${o.batch} | ${KN.map((k) => `${f(o.kernels_ms[k], 0)} (${f((100 * o.kernels_ms[k]) / o.ms_per_step, 0)}%)`).join(' | ')} |`,
  );
for (const o of pr.filter((o) => o.policy === 'none' && !o.error)) breakdown(o);
P();
// before / after: processes alternating in rounds; each side's row is its median round
const pp = (S.policies?.pairs || []).filter((o) => !o.error);
if (pp.length) {
  const side = (s) => pp.filter((o) => o.side === s).sort((a, b) => a.round - b.round);
  const [bf, af] = [side('before'), side('after')];
  const mid = (l) => [...l].sort((a, b) => a.ms_per_step - b.ms_per_step)[l.length >> 1];
  P(
    `Before (${R.before?.ref}) and after, the same step in processes alternating round by round (${af.length} rounds, order rotated), ` +
      `each row its median round; before / after time = ${fr(
        paired(
          bf.map((o) => o.ms_per_step),
          af.map((o) => o.ms_per_step),
        ),
        2,
      )} ` +
      '(median, min–max of the per-round ratios):',
  );
  P();
  P(`| model | objective | batch | ${KN.join(' | ')} |`);
  P(`|---|---|---|${KN.map(() => '---').join('|')}|`);
  breakdown(mid(bf), 'before: ');
  breakdown(mid(af), 'after: ');
  P();
}

// 6b. threads profile
const tp = S.thread_profile?.rows || [];
if (tp.length) {
  P('### Where the time goes at 1 and 2 threads');
  P();
  P(
    "The native FMA build (vitrine_fma: the relaxed wasm build's kernels, splits and bits; train_bench has per-kernel timers, the " +
      'wasm commands no threads), pinned to cpus 0-1, 1 and 2 threads in alternating processes, rounds. ViT-Ti/16 encode step (+ AdamW), ' +
      "policy none; the main job's MAE step (fmnist-p7-mlp2, batch 64, mask ratio 0.5, block); wall time. ms per step (per kernel: mean over the " +
      `steps) = median over rounds; x = 1-thread time / 2-thread time. "other": the step minus its kernels (the serial loops of the ` +
      `orchestration, and the fork/join of the kernels that the wrappers do not see). ${loadNote(S.thread_profile)}.`,
  );
  P();
  P(`| job | ${['step', ...KN].join(' | ')} |`);
  P(`|---|${['step', ...KN].map(() => '---').join('|')}|`);
  for (const job of [...new Set(tp.map((o) => o.job))]) {
    const g = (t, k) =>
      median(
        tp
          .filter((o) => o.job === job && o.threads === t && !o.error)
          .map((o) => (k === 'step' ? o.ms_per_step : o.kernels_ms[k])),
      );
    P(
      `| ${job} | ${['step', ...KN].map((k) => `${f(g(1, k), 1)} / ${f(g(2, k), 1)} (x${f(g(1, k) / g(2, k), 2)})`).join(' | ')} |`,
    );
  }
  P();
}

// 7. builds
const br = S.builds?.rounds || [];
P('## 7. Builds side by side, one core');
P();
P(
  "bench/train_bench.c's encode step (ViT-Ti/16, policy none) in each build, processes pinned to cpu 0 in rounds (order rotated), " +
    "timed by the thread's CPU clock. " +
    `Statistic: ms = median over rounds; ratios = median (min–max) of per-round ratios. ${loadNote(S.builds)}.`,
);
P();
P(
  '| batch | wasm relaxed | native FMA | wasm SIMD128 | native SSE2 | relaxed / native FMA | SIMD128 / SSE2 | SIMD128 / relaxed |',
);
P('|---|---|---|---|---|---|---|---|');
for (const b of [...new Set(br.flatMap((r) => (r['wasm-relaxed'] || []).map((o) => o.batch)))]) {
  const g = (name) => br.map((r) => (r[name] || []).find((o) => o.batch === b)?.ms_per_step);
  P(
    `| ${b} | ${['wasm-relaxed', 'native-fma', 'wasm-simd', 'native-sse2'].map((n) => f(median(g(n)), 0)).join(' | ')} | ` +
      `${fr(paired(g('wasm-relaxed'), g('native-fma')))} | ${fr(paired(g('wasm-simd'), g('native-sse2')))} | ${fr(paired(g('wasm-simd'), g('wasm-relaxed')))} |`,
  );
}
P();

// 8. demo
const dm = S.demo?.out;
P("## 8. The demo's 224-px MAE: a decoder sized for a tab, and lightly's");
P();
if (dm) {
  P(
    `MAE on ViT-Ti/16 at 224 px, batch 8, mask ratio 0.75, policy none, relaxed-mt, 2 threads (pinned to cpus 0-1), the two decoders' steps ` +
      `alternating in one process (bench/step_bench.mjs --job demo), wall time. ms = median over ${dm.rounds} rounds; load ${dm.loadavg_start[0]} -> ${dm.loadavg_end[0]}.`,
  );
  P();
  P('| decoder | dim x depth (heads) | s per step | planned total MiB (activations) |');
  P('|---|---|---|---|');
  const { MAE_DECODERS } = await import('../web/train/presets.js');
  for (const r of dm.runs) {
    const d = MAE_DECODERS[r.variant];
    P(
      `| ${r.variant} | ${d.decoder_dim} x ${d.decoder_depth} (${d.decoder_heads}) | ${f(r.ms_median / 1e3, 2)} | ${MiB(r.plan.total)} (${MiB(r.plan.activations)}) |`,
    );
  }
}
P();

// 9. targets
P('## 9. Targets (reported, not asserted)');
P();
P('| target | measured | met |');
P('|---|---|---|');
const yes = (c) => (c == null ? '–' : c ? 'yes' : '**no**');
for (const b of Object.keys(oneCore)) {
  const p = oneCore[b].pct_peak;
  if (p?.median != null)
    P(`| ViT-Ti/16 step (b${b}), 1 core, >= 70% of the relaxed-madd peak | ${pct(p, 0)} | ${yes(p.median >= 0.7)} |`);
}
const gr = kb('wasm-relaxed').filter((r) => r.op !== 'attention');
if (gr.length) {
  const lo = Math.min(...gr.map((r) => r.pct_peak)),
    hi = Math.max(...gr.map((r) => r.pct_peak));
  const worst = gr.find((r) => r.pct_peak === lo);
  P(
    `| GEMM at ViT widths >= 80% of the peak, every row, fwd and bwd (relaxed) | ${f(lo, 0)}–${f(hi, 0)}% (lowest: ${worst.width} ${worst.op} ${worst.dir}) | ${yes(lo >= 80)} |`,
  );
}
const ar = kb('wasm-relaxed').filter((r) => r.op === 'attention');
if (ar.length) {
  // reported beside the GEMMs, not counted as one: two products (K = 64, then T) with the softmax between
  const lo = Math.min(...ar.map((r) => r.pct_peak)),
    hi = Math.max(...ar.map((r) => r.pct_peak));
  P(
    `| (no target) attention at ViT widths, fwd and bwd: its two products per head with the scaling and softmax between | ${f(lo, 0)}–${f(hi, 0)}% | – |`,
  );
}
for (const b of Object.keys(twoCore)) {
  const s = twoCore[b].speedup;
  if (s?.median != null)
    P(
      `| 2 threads >= 1.8x one thread, ViT-Ti/16 step b${b} | ${fr(s)}x (the peak loop's 2t/1t then: ${fr(twoCore[b].ceiling)}) | ${threadVerdict(s.median, 1.8, twoCore[b].ceiling?.median)} |`,
    );
  P(
    `| same bits at 1 and 2 threads, ViT-Ti/16 b${b} | ${twoCore[b].same ? 'identical' : 'different'} | ${yes(twoCore[b].same)} |`,
  );
}
if (mainJob.speedup)
  P(
    `| 2 threads >= 1.7x one thread, the main job | ${fr(mainJob.speedup)}x | ${threadVerdict(mainJob.speedup.median, 1.7, mainJob.ceiling)} |`,
  );
P();

// 10. before / after
if (R.before) {
  P(`## 10. Before (${R.before.ref}) and after (${R.commit})`);
  P();
  P(
    'The same harness on both engines, interleaved as in the sections above. Ratios = before time / after time (median, min–max of per-round or per-step ratios).',
  );
  P();
  P('| what | before | after | before / after |');
  P('|---|---|---|---|');
  for (const b of ocb) {
    const rs = oc.filter((r) => r.batch === b && r.round != null);
    const a = rs.flatMap((r) => runOf(r.vitrine)?.ms || []),
      bf = rs.flatMap((r) => runOf(r.vitrine, 'before')?.ms || []);
    P(
      `| ViT-Ti/16 step b${b}, 1 core (CPU time), ms | ${f(median(bf), 0)} | ${f(median(a), 0)} | ${fr(paired(bf, a))} |`,
    );
    // per round: each engine's median step against the same round's PyTorch and TF.js processes
    const bm = rs.map((r) => runOf(r.vitrine, 'before')?.ms_median),
      am = rs.map((r) => runOf(r.vitrine)?.ms_median);
    const t = rs.map((r) => r.pytorch?.ms_per_step),
      j = rs.map((r) => r.tfjs?.ms_per_step);
    P(
      `| ViT-Ti/16 b${b}, 1 core: vitrine / PyTorch strictly one core | ${fr(paired(bm, t))} | ${fr(paired(am, t))} | |`,
    );
    P(`| ViT-Ti/16 b${b}, 1 core: TF.js fast path / vitrine | ${fr(paired(j, bm))} | ${fr(paired(j, am))} | |`);
    const x = rs.map((r) => r.jaxjs?.ms_per_step);
    if (x.some((y) => y != null))
      P(`| ViT-Ti/16 b${b}, 1 core: jax-js / vitrine | ${fr(paired(x, bm))} | ${fr(paired(x, am))} | |`);
    const pk = (label) =>
      summary(
        rs.flatMap((r) => {
          const x = runOf(r.vitrine, label);
          return x?.pct_peak ? [x.pct_peak.median] : [];
        }),
      );
    P(
      `| ViT-Ti/16 b${b}, 1 core: whole step, % of the relaxed-madd peak | ${pct(pk('before'), 0)} | ${pct(pk(), 0)} | |`,
    );
  }
  for (const b of [...new Set(tc.map((r) => r.batch))]) {
    const rs = tc.filter((r) => r.batch === b);
    for (const t of [1, 2]) {
      const a = rs.flatMap((r) => runOf(r.vitrine, `this tree relaxed-mt ${t}t`)?.ms || []),
        bf = rs.flatMap((r) => runOf(r.vitrine, `before ${t}t`)?.ms || []);
      P(
        `| ViT-Ti/16 step b${b}, relaxed-mt ${t} thread${t > 1 ? 's' : ''}, ms | ${f(median(bf), 0)} | ${f(median(a), 0)} | ${fr(paired(bf, a))} |`,
      );
    }
    const bf1 = rs.flatMap((r) => runOf(r.vitrine, 'before 1t')?.ms || []),
      bf2 = rs.flatMap((r) => runOf(r.vitrine, 'before 2t')?.ms || []);
    P(`| ViT-Ti/16 b${b}: 2 threads / 1 thread | ${fr(paired(bf1, bf2))} | ${fr(twoCore[b]?.speedup)} | |`);
    const best = twoCore[b]?.best;
    if (best) {
      const t = rs.map((r) => r[`pytorch ${best[0]}`]?.ms_per_step);
      P(
        `| ViT-Ti/16 b${b}, 2 cores: vitrine 2 threads / best PyTorch (${best[0]}) | ${fr(
          paired(
            rs.map((r) => runOf(r.vitrine, 'before 2t')?.ms_median),
            t,
          ),
        )} | ` + `${fr(twoCore[b].v2_over_best)} | |`,
      );
    }
  }
  if (mj) {
    for (const t of [1, 2]) {
      const a = mj.runs.find((r) => r.label === `this tree relaxed-mt ${t}t`),
        bf = mj.runs.find((r) => r.label === `before ${t}t`);
      if (a && bf)
        P(
          `| main job images/s, ${t} thread${t > 1 ? 's' : ''} | ${f(bf.images_per_s, 0)} | ${f(a.images_per_s, 0)} | ${fr(paired(bf.ms, a.ms))} |`,
        );
    }
    const b1 = mj.runs.find((r) => r.label === 'before 1t'),
      b2 = mj.runs.find((r) => r.label === 'before 2t');
    if (b1 && b2) P(`| main job: 2 threads / 1 thread | ${fr(paired(b1.ms, b2.ms))} | ${fr(mainJob.speedup)} | |`);
  }
  const before = kb('before wasm-relaxed');
  if (before.length) {
    const g = (rows) => rows.filter((r) => r.op !== 'attention').map((r) => r.pct_peak);
    P(
      `| GEMM rows (relaxed, one core), % of peak: lowest–highest, median | ${f(Math.min(...g(before)), 0)}–${f(Math.max(...g(before)), 0)}%, ${f(median(g(before)), 0)}% | ` +
        `${f(Math.min(...g(kb('wasm-relaxed'))), 0)}–${f(Math.max(...g(kb('wasm-relaxed'))), 0)}%, ${f(median(g(kb('wasm-relaxed'))), 0)}% | |`,
    );
  }
  P();
}
if (R.notes.length) {
  for (const n of R.notes) P(`- ${n}`);
  P();
}
P(`Raw numbers: ${SHOWN_OUT}/results.json.`);

writeFileSync(join(OUT, 'results.json'), JSON.stringify(R, null, 1) + '\n');
writeFileSync(join(OUT, 'results.md'), md.join('\n') + '\n');
// a full run's tables also go into bench/README.md, between its markers (a smoke run's or a
// partial one's (--only) never)
if (!R.quick && !FROM && !OUT_ARG && !ONLY) {
  const readme = join(ROOT, 'bench/README.md'),
    text = readFileSync(readme, 'utf8');
  const a = '<!-- results: written by bench/run.mjs -->',
    b = '<!-- /results -->';
  const i = text.indexOf(a),
    j = text.indexOf(b);
  if (i >= 0 && j > i)
    writeFileSync(
      readme,
      text.slice(0, i + a.length) + '\n' + md.slice(1).join('\n').replace(/^#/gm, '##').trim() + '\n' + text.slice(j),
    );
}
process.stdout.write(md.join('\n') + '\n');
log(`wrote ${SHOWN_OUT}/results.md and ${SHOWN_OUT}/results.json`);
