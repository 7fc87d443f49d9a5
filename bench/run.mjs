// run.mjs: every benchmark of bench/, side by side in one run, one core each, one after the other:
// writes bench/results.json (every measurement) and bench/results.md (the tables, the ratios
// against the project's targets, the step broken down by kernel). Reports; never fails on a time.
// Called by bench/run.sh (which builds first); `--quick` shrinks the grid (a smoke run).
import { spawnSync } from 'node:child_process';
import { writeFileSync, existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import os from 'node:os';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const BUILD = process.env.VITRINE_BUILD || join(ROOT, 'build');
const QUICK = process.argv.includes('--quick');
const PY = process.env.VITRINE_PYTHON || '/usr/bin/python3';
const TINY = 'vit_tiny_patch16_224', SMALL = 'vit_small_patch16_224';
const POLICIES = ['none', 'block', 'every:2', 'sqrt', 'selective'];
const t_start = Date.now();
const log = (s) => process.stderr.write(`[bench ${((Date.now() - t_start) / 1e3).toFixed(0)}s] ${s}\n`);

// Runs a command, returns the JSON objects it printed (one per line, or one document).
function run(label, cmd, args, env) {
  log(`${label}: ${cmd} ${args.join(' ')}`);
  const r = spawnSync(cmd, args, { cwd: ROOT, encoding: 'utf8', maxBuffer: 64 << 20, env: { ...process.env, ...env } });
  const out = r.stdout || '';
  if (r.status !== 0) log(`${label}: exit ${r.status} ${r.signal || ''} ${(r.stderr || '').slice(-400)}`);
  try { return [JSON.parse(out)]; } catch { /* one object per line */ }
  return out.split('\n').filter((l) => l.startsWith('{')).flatMap((l) => { try { return [JSON.parse(l)]; } catch { return []; } });
}
const node = (file, args) => [process.execPath, [file, ...args]];
const wasi = (wasm, args) => node(join(ROOT, 'bench/wasi_run.mjs'), [join(BUILD, 'wasm', wasm), ...args]);
const flags = (name, vals) => vals.flatMap((v) => [name, String(v)]);

const R = { date: new Date().toISOString(), host: { cpu: os.cpus()[0]?.model, cores: os.cpus().length, node: process.version },
  quick: QUICK, kernels: {}, train: [], torch_info: null, notes: [] };

// --from FILE: no measuring; the report is made again from a results.json (--threads-from FILE:
// with the threads section of another run of bench/threads_bench.mjs)
const argVal = (n) => { const i = process.argv.indexOf(n); return i >= 0 ? process.argv[i + 1] : null; };
const FROM = argVal('--from'), THREADS_FROM = argVal('--threads-from');
const cmpBatches = QUICK ? [1] : [1, 4];
if (FROM) Object.assign(R, JSON.parse(readFileSync(FROM, 'utf8')));
else {
  // 1-2. peak and GEMM: native, wasm SIMD128, wasm scalar (M = 2 images x 197 tokens)
  const kargs = ['--batch', '2', ...(QUICK ? ['--quick', '--widths', '192'] : [])];
  const HAVE_RELAXED = existsSync(join(BUILD, 'wasm', 'kernel_bench-relaxed.wasm')) && existsSync(join(BUILD, 'wasm', 'train_bench-relaxed.wasm'));
  if (!HAVE_RELAXED) R.notes.push('relaxed SIMD: build/wasm/*-relaxed.wasm missing (clang-19, lld-19, libclang-rt-19-dev-wasm32: scripts/setup.sh)');
  for (const [b, cmd] of [['native', [join(BUILD, 'kernel_bench'), kargs]], ['wasm-simd', wasi('kernel_bench-simd.wasm', kargs)],
    ...(HAVE_RELAXED ? [['wasm-relaxed', wasi('kernel_bench-relaxed.wasm', kargs)]] : []),
    ['wasm-scalar', wasi('kernel_bench-scalar.wasm', kargs)]]) R.kernels[b] = run(`kernels ${b}`, ...cmd)[0] || null;

  // The host's vector ISA, named beside every ratio against PyTorch (which uses it; wasm has 128 bits).
  const cpuFlags = (() => { try { return (readFileSync('/proc/cpuinfo', 'utf8').match(/^flags\s*:(.*)$/m) || ['', ''])[1].split(/\s+/); } catch { return []; } })();
  R.host.isa = cpuFlags.includes('avx512f') ? 'AVX-512 + AVX2 + FMA3' : cpuFlags.includes('avx2') ? 'AVX2 + FMA3' : cpuFlags.includes('fma') ? 'AVX + FMA3' : cpuFlags.includes('sse2') ? 'SSE2 (no FMA)' : process.arch;
  R.host.fma = cpuFlags.includes('fma') || process.arch === 'arm64';

  // 3. training steps: vitrine wasm SIMD (WASI) and native
  const jobs = QUICK
    ? [{ preset: TINY, kind: 'encode', batch: [1], policy: ['none', 'block', 'selective'] }]
    : [
        { preset: TINY, kind: 'encode', batch: [1, 4], policy: POLICIES },
        { preset: TINY, kind: 'encode', batch: [8], policy: ['none'] },
        { preset: TINY, kind: 'mae', batch: [4], policy: POLICIES },
        { preset: SMALL, kind: 'encode', batch: [1], policy: ['none', 'block', 'selective'] },
        { preset: SMALL, kind: 'encode', batch: [4], policy: ['none'] },
        { preset: SMALL, kind: 'mae', batch: [4], policy: ['none', 'block'] },
      ];
  const nativeJobs = QUICK ? jobs : [
    { preset: TINY, kind: 'encode', batch: [1, 4], policy: POLICIES },
    { preset: TINY, kind: 'mae', batch: [4], policy: ['none', 'block', 'selective'] },
    { preset: SMALL, kind: 'encode', batch: [1], policy: ['none'] },
  ];
  const targs = (j, warm) => ['--preset', j.preset, '--kind', j.kind, ...flags('--batch', j.batch), ...flags('--policy', j.policy),
    '--repeat', '3', '--warmup', String(warm)];
  // wasm: one extra warm-up step per configuration (V8 tiers each kernel up on a later call)
  for (const j of jobs) R.train.push(...run('train wasm-simd', ...wasi('train_bench-simd.wasm', targs(j, 2))));
  for (const j of nativeJobs) R.train.push(...run('train native', join(BUILD, 'train_bench'), targs(j, 1)));

  // relaxed SIMD (fused multiply-add) vs SIMD128 vs PyTorch+OpenBLAS (1 thread), interleaved: each
  // round runs the three one after another on the same configurations (A B C A B C ...); the ratios
  // are per round, their median reported (the machine is shared: a round's three runs see similar
  // interference, separate runs do not).
  R.relaxed = { rounds: [], configs: [] };
  if (HAVE_RELAXED) {
    const cfg = QUICK ? { presets: [TINY, SMALL], batches: [1] } : { presets: [TINY, SMALL], batches: [1, 4] };
    const nRounds = QUICK ? 2 : 4;
    const targsR = (warm) => [...flags('--preset', cfg.presets), '--kind', 'encode', ...flags('--batch', cfg.batches), '--policy', 'none',
      '--repeat', '3', '--warmup', String(warm)];
    for (let r = 0; r < nRounds; r++) {
      const round = [];
      round.push(...run(`interleaved ${r + 1}/${nRounds} wasm-relaxed`, ...wasi('train_bench-relaxed.wasm', targsR(2))));
      round.push(...run(`interleaved ${r + 1}/${nRounds} wasm-simd`, ...wasi('train_bench-simd.wasm', targsR(2))));
      if (existsSync(PY)) round.push(...run(`interleaved ${r + 1}/${nRounds} pytorch`, PY, [join(ROOT, 'bench/torch_vit.py'), ...flags('--preset', cfg.presets),
        ...flags('--batch', cfg.batches), '--policy', 'none', '--repeat', '3']).filter((o) => o.build));
      R.relaxed.rounds.push(round.filter((o) => !o.error));
    }
    for (const model of cfg.presets) for (const batch of cfg.batches) R.relaxed.configs.push({ model, batch });
    // the relaxed build's steps per policy, for the tables below (same jobs as SIMD128's, fewer in full)
    const rjobs = QUICK ? jobs : [
      { preset: TINY, kind: 'encode', batch: [1, 4], policy: ['none', 'block', 'selective'] },
      { preset: TINY, kind: 'mae', batch: [4], policy: ['none', 'block'] },
      { preset: SMALL, kind: 'encode', batch: [4], policy: ['none'] },
    ];
    for (const j of rjobs) R.train.push(...run('train wasm-relaxed', ...wasi('train_bench-relaxed.wasm', targs(j, 2))));
  }

  // the main job (node web/cli.js train: MAE on Fashion-MNIST, batch 64, block checkpointing) for a
  // fixed number of steps without evaluation, SIMD128 then relaxed, interleaved: images/s each
  R.mainJob = [];
  if (HAVE_RELAXED) {
    const steps = QUICK ? 40 : 150, rounds = QUICK ? 1 : 2;
    const { mkdtempSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    for (let r = 0; r < rounds; r++)
      for (const wasm of ['simd', 'relaxed']) {
        const out = mkdtempSync(join(tmpdir(), 'vitrine-bench-train-'));
        const o = run(`main job ${r + 1}/${rounds} --wasm ${wasm}`, process.execPath, [join(ROOT, 'web/cli.js'), 'train', '--steps', String(steps),
          '--no-eval', '--json', '--out', out, '--wasm', wasm])[0];
        rmSync(out, { recursive: true, force: true });
        if (o && o.seconds) R.mainJob.push({ round: r, wasm, steps: o.steps, seconds: o.seconds, images_per_s: o.steps * 64 / o.seconds });
      }
  }

  // the JS shell (Emscripten SIMD build): forward + backward (it has no optimizer call)
  const shellBatch = QUICK ? 1 : 4;
  R.train.push(...run('shell', ...node(join(ROOT, 'bench/shell_bench.mjs'), ['--batch', String(shellBatch), '--policy', 'none', '--repeat', '3'])));

  // 4. PyTorch (OpenBLAS, 1 thread) and TF.js (cpu, wasm backends), same model, same batches
  if (existsSync(PY)) {
    const torch = run('pytorch', PY, [join(ROOT, 'bench/torch_vit.py'), '--preset', TINY, ...flags('--batch', cmpBatches),
      '--policy', 'none', '--policy', 'block', '--repeat', '3']);
    R.torch_info = torch.find((o) => o.torch) || null;
    R.train.push(...torch.filter((o) => o.build));
    if (!QUICK) R.train.push(...run('pytorch', PY, [join(ROOT, 'bench/torch_vit.py'), '--preset', SMALL, '--batch', '1', '--repeat', '3']));
  } else R.notes.push(`PyTorch: ${PY} not found (bash scripts/setup.sh installs python3-torch)`);
  const tfjsRuns = QUICK ? [['wasm', 1], ['cpu', 1]] : [['wasm', 1], ['wasm', 4], ['cpu', 1]];
  for (const [backend, b] of tfjsRuns)
    R.train.push(...run(`tfjs ${backend}`, ...node(join(ROOT, 'bench/tfjs_vit.mjs'), ['--backend', backend, '--batch', String(b),
      '--repeat', backend === 'cpu' ? '1' : '2'])));
  if (!QUICK) R.notes.push('TF.js cpu backend: batch 1 only (~10 s per image per step; batch 4 would take minutes)');

  // 5. threads: vitrine (JS shell, shared-memory build) and PyTorch at 1, 2, every core; the main job
  R.threads = run('threads', ...node(join(ROOT, 'bench/threads_bench.mjs'), QUICK ? ['--quick'] : []))[0] || null;
  R.seconds = (Date.now() - t_start) / 1e3;
  // the measurements first, so that a failing report never loses a run
  writeFileSync(join(ROOT, 'bench/results.json'), JSON.stringify(R, null, 1) + '\n');
}
if (THREADS_FROM) R.threads = JSON.parse(readFileSync(THREADS_FROM, 'utf8'));

// ---- the report ------------------------------------------------------------------------------
// % of peak = the fastest call of a kernel / the highest peak kernel_bench measured over its run
// (it re-measures after every row): interference from other processes only slows either down.
const peakOf = (b) => Math.max(R.kernels[b]?.peak.gflops || 0, R.kernels[b]?.peak_max_gflops || 0) || null;
const best = (r, d) => r?.[`${d}_best_gflops`] ?? r?.[`${d}_gflops`];
const pct = (r, d, b) => (r && best(r, d) != null && peakOf(b) ? 100 * best(r, d) / peakOf(b) : null);
const f = (x, d = 1) => (x == null || !isFinite(x) ? '–' : Number(x).toFixed(d));
const MiB = (b) => f(b / 1048576, 1);
const find = (q) => R.train.find((o) => Object.entries(q).every(([k, v]) => o[k] === v) && !o.error);
const md = [];
const P = (s = '') => md.push(s);
P(`# vitrine benchmarks`);
P();
P(`${R.date}, ${R.host.cpu}, ${R.host.cores} cores (one used by each run, runs one after another), Node ${R.host.node}` +
  `${QUICK ? ' — QUICK smoke run' : ''}; ${f(R.seconds, 0)} s in all. Times are medians after warm-up; ` +
  'the machine is shared, so compare the ratios measured side by side here rather than absolute numbers across runs.');
P();
P('## 1. The multiply+add peak of one core');
P();
P('| build | loop | GFLOP/s |');
P('|---|---|---|');
for (const [b, k] of Object.entries(R.kernels)) {
  if (!k) { P(`| ${b} | (failed) | |`); continue; }
  P(`| ${b} | ${k.peak.name} | ${f(peakOf(b))}${k.peak_max_gflops ? ` (first ${f(k.peak.gflops)}, best of the run's re-measurements ${f(k.peak_max_gflops)})` : ''} |`);
  if (k.peak.stream_gflops) P(`| ${b} | (of which: 12 register chains ${f(k.peak.chains_gflops)}, L1-streaming 8 chains ${f(k.peak.stream_gflops)}; the larger is the peak) | |`);
  if (k.peak.avx2_fma_gflops) P(`| native, AVX2+FMA (**not** vitrine's native build) | ${k.peak.avx2_fma_name} | ${f(k.peak.avx2_fma_gflops)} |`);
}
P();
P('## 2. GEMM on ViT shapes (M = 2 images x 197 tokens = 394 rows)');
P();
P('GFLOP/s (median call) and % of the peak of the same build (the fastest call over the highest peak the run measured: ' +
  'kernel_bench re-measures the peak after every row, so that both see the same machine; wasm scalar: % of the wasm SIMD128 peak, the one that matters on this machine). ' +
  'Forward = `vt_matmul_forward` (out = x W^T + b), backward = `vt_matmul_backward` with dinp and dW (4MKN flops). Attention: ' +
  'QK^T and PV of every head as plain matmuls (head_dim 64), and the engine\'s attention kernel (QK^T, softmax, PV composed from the matmul kernels; backward).');
P();
const simdPeak = peakOf('wasm-simd');
P('| width | op | M x K x N | wasm SIMD fwd | % | wasm SIMD bwd | % | wasm scalar fwd | % SIMD peak | native fwd | % | native bwd | % |');
P('|---|---|---|---|---|---|---|---|---|---|---|---|---|');
const rows = (b) => R.kernels[b]?.rows || [];
for (const r of rows('wasm-simd')) {
  const sc = rows('wasm-scalar').find((x) => x.op === r.op && x.width === r.width);
  const na = rows('native').find((x) => x.op === r.op && x.width === r.width);
  P(`| ${r.width} | ${r.op} | ${r.M}x${r.K}x${r.N} | ${f(r.fwd_gflops)} | ${f(pct(r, 'fwd', 'wasm-simd'), 0)} | ${f(r.bwd_gflops)} | ${f(pct(r, 'bwd', 'wasm-simd'), 0)} | ` +
    `${f(sc?.fwd_gflops)} | ${f(sc && 100 * best(sc, 'fwd') / simdPeak, 0)} | ${f(na?.fwd_gflops)} | ${f(pct(na, 'fwd', 'native'), 0)} | ` +
    `${f(na?.bwd_gflops)} | ${f(na?.bwd_gflops && pct(na, 'bwd', 'native'), 0)} |`);
}
const relaxedPeak = peakOf('wasm-relaxed');
if (R.kernels['wasm-relaxed']) {
  P();
  P(`### 2b. Relaxed SIMD build (f32x4.relaxed_madd: an FMA on this ${R.host.fma ? 'FMA' : 'non-FMA'} host): % of the relaxed-madd peak (${f(relaxedPeak)} GFLOP/s)`);
  P();
  P('| width | op | M x K x N | relaxed fwd | % relaxed peak | relaxed bwd | % | SIMD128 fwd | SIMD128 bwd | relaxed / SIMD128 fwd | bwd |');
  P('|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows('wasm-relaxed')) {
    const sm = rows('wasm-simd').find((x) => x.op === r.op && x.width === r.width);
    P(`| ${r.width} | ${r.op} | ${r.M}x${r.K}x${r.N} | ${f(r.fwd_gflops)} | ${f(pct(r, 'fwd', 'wasm-relaxed'), 0)} | ${f(r.bwd_gflops)} | ${f(pct(r, 'bwd', 'wasm-relaxed'), 0)} | ` +
      `${f(sm?.fwd_gflops)} | ${f(sm?.bwd_gflops)} | ${f(sm && r.fwd_gflops / sm.fwd_gflops, 2)} | ${f(sm?.bwd_gflops && r.bwd_gflops / sm.bwd_gflops, 2)} |`);
  }
}
P();
P('## 3. Training step (forward, backward, zero_grad + AdamW), one core');
P();
P('Model FLOPs per step (matmuls + attention, multiply-add = 2, re-computation not counted): per block ' +
  '`24·T·D² + 4·T²·D`; encode fwd = `2·196·768·D + depth·block(197, D)`; MAE fwd = `2·196·768·D + depth·block(50, D) + ' +
  '2·50·D·512 + block(197, 512) + 2·147·512·768`; step = `B·(3·fwd − 2·196·768·D)` (no image gradient). ' +
  'encode = lightly `encode`, backward of a fixed random upstream gradient; MAE = lightly\'s MAE example, mask ratio 0.75, ' +
  'decoder as lightly\'s examples/pytorch/mae.py (decoder_dim 512, depth 1, 16 heads). Memory: activations = the arena\'s ' +
  'measured peak; total = params + grads + AdamW state + activations.');
P();
P('| build | model | objective | batch | policy | ms/step | x none | images/s | GFLOP/s | activations MiB | x less | total MiB |');
P('|---|---|---|---|---|---|---|---|---|---|---|---|');
for (const o of R.train.filter((o) => o.build === 'wasm-simd' || o.build === 'wasm-relaxed' || o.build === 'native')) {
  if (o.error) { P(`| ${o.build} | ${o.model} | ${o.objective} | ${o.batch} | ${o.policy} | error: ${o.error} |||||||`); continue; }
  const base = find({ build: o.build, model: o.model, objective: o.objective, batch: o.batch, policy: 'none' });
  P(`| ${o.build} | ${o.model.replace('_patch16_224', '')} | ${o.objective} | ${o.batch} | ${o.policy} | ${f(o.ms_per_step, 0)} | ` +
    `${f(base && o.ms_per_step / base.ms_per_step, 2)} | ${f(o.images_per_s, 2)} | ${f(o.gflops)} | ${MiB(o.activation_bytes)} | ` +
    `${f(base && base.activation_bytes / o.activation_bytes, 2)} | ${MiB(o.total_bytes)} |`);
}
const sh = R.train.find((o) => o.build === 'shell-simd' && !o.error);
const wsh = sh && find({ build: 'wasm-simd', model: sh.model, objective: 'encode', batch: sh.batch, policy: sh.policy });
if (sh) P(`\nJS shell (web/vitrine.js, Emscripten SIMD128): forward + backward, ${sh.model} batch ${sh.batch}: ${f(sh.fwd_bwd_ms, 0)} ms ` +
  `vs ${f(wsh && wsh.fwd_ms + wsh.bwd_ms, 0)} ms for the same C as a WASI command (the shell has no optimizer call; AdamW adds ${f(wsh?.opt_ms, 0)} ms).`);
P();
P('### Where the time goes (per step, ms; kernels timed by link-time wrapping of their dispatch functions)');
P();
const K = ['matmul_fwd', 'matmul_bwd', 'attention_fwd', 'attention_bwd', 'layernorm_fwd', 'layernorm_bwd', 'gelu_fwd', 'gelu_bwd', 'optimizer', 'other'];
P(`| build | model | objective | batch | policy | ${K.join(' | ')} |`);
P(`|---|---|---|---|---|${K.map(() => '---').join('|')}|`);
for (const q of [{ model: TINY, objective: 'encode', batch: 4, policy: 'none' }, { model: TINY, objective: 'encode', batch: 4, policy: 'block' },
  { model: TINY, objective: 'encode', batch: 4, policy: 'selective' }, { model: TINY, objective: 'mae', batch: 4, policy: 'none' },
  { model: TINY, objective: 'encode', batch: 1, policy: 'none' }])
  for (const b of ['wasm-relaxed', 'wasm-simd', 'native']) {
    const o = find({ build: b, ...q });
    if (o) P(`| ${b} | ${o.model.replace('_patch16_224', '')} | ${o.objective} | ${o.batch} | ${o.policy} | ${K.map((k) => `${f(o.kernels_ms[k], 0)} (${f(100 * o.kernels_ms[k] / o.ms_per_step, 0)}%)`).join(' | ')} |`);
  }
P();
P('## 4. Side by side: same model (ViT-Ti/16 encode), same batch, one thread');
P();
if (R.torch_info) P(`PyTorch ${R.torch_info.torch}, ${R.torch_info.threads} thread, BLAS: ${R.torch_info.libs.map((l) => l.split('/').pop()).join(', ')}` +
  ` (OpenBLAS core ${R.torch_info.openblas_core}; sgemm 1024³ ${f(R.torch_info.sgemm1024_gflops)} GFLOP/s — not the reference BLAS).`);
const tv = R.train.find((o) => o.tfjs);
if (tv) P(`TensorFlow.js ${tv.tfjs} in Node: cpu backend (JS) and wasm backend (XNNPACK SIMD, threads off); AdamW written in tf ops.`);
P();
P('| batch | policy | vitrine wasm SIMD ms | vitrine native ms | PyTorch+OpenBLAS ms | TF.js wasm ms | TF.js cpu ms | wasm/native | wasm/PyTorch | best TF.js / wasm |');
P('|---|---|---|---|---|---|---|---|---|---|');
const targets = [], targets2 = [];
for (const b of cmpBatches)
  for (const pol of ['none', 'block']) {
    const q = { model: TINY, objective: 'encode', batch: b, policy: pol };
    const w = find({ build: 'wasm-simd', ...q }), n = find({ build: 'native', ...q }), t = find({ build: 'pytorch', ...q });
    const tw = pol === 'none' ? find({ build: 'tfjs-wasm', model: TINY, batch: b }) : null;
    const tc = pol === 'none' ? find({ build: 'tfjs-cpu', model: TINY, batch: b }) : null;
    const best = [tw, tc].filter(Boolean).map((o) => o.ms_per_step).sort((x, y) => x - y)[0];
    P(`| ${b} | ${pol} | ${f(w?.ms_per_step, 0)} | ${f(n?.ms_per_step, 0)} | ${f(t?.ms_per_step, 0)} | ${f(tw?.ms_per_step, 0)}${tw?.gelu === 'tanh' ? ' (tanh GELU)' : ''} | ` +
      `${f(tc?.ms_per_step, 0)} | ${f(w && n && w.ms_per_step / n.ms_per_step, 2)} | ${f(w && t && w.ms_per_step / t.ms_per_step, 2)} | ${f(w && best && best / w.ms_per_step, 2)} |`);
    if (pol === 'none' && w) targets.push({ b, w, n, t, best });
  }
const tfMissing = R.train.filter((o) => o.missing_kernels).map((o) => `${o.build}: missing ${o.missing_kernels.join(', ')}`);
if (tfMissing.length) P(`\nTF.js kernels missing: ${tfMissing.join('; ')}.`);
const torchSmall = find({ build: 'pytorch', model: SMALL, batch: 1, policy: 'none' }), wSmall = find({ build: 'wasm-simd', model: SMALL, objective: 'encode', batch: 1, policy: 'none' });
if (torchSmall && wSmall) P(`\nViT-S/16 batch 1: vitrine wasm ${f(wSmall.ms_per_step, 0)} ms, PyTorch ${f(torchSmall.ms_per_step, 0)} ms (wasm/PyTorch ${f(wSmall.ms_per_step / torchSmall.ms_per_step, 2)}).`);
const med = (a) => { const b = a.filter((x) => x != null && isFinite(x)).sort((x, y) => x - y); return b.length ? (b.length % 2 ? b[b.length >> 1] : (b[b.length / 2 - 1] + b[b.length / 2]) / 2) : null; };
const relaxedRows = [];
if (R.relaxed?.rounds?.length) {
  P();
  P('## 5. Relaxed SIMD vs SIMD128 vs PyTorch+OpenBLAS: training step, one thread, interleaved');
  P();
  P(`${R.host.cpu}; host vector ISA ${R.host.isa} (PyTorch/OpenBLAS run 256/512-bit FMA; wasm is 128-bit, relaxed_madd an FMA on this host: ${R.host.fma ? 'yes' : 'no'}). ` +
    `${R.relaxed.rounds.length} rounds, each running wasm relaxed, wasm SIMD128 and PyTorch one after another (3 timed steps each after warm-up); ` +
    'ms = median over rounds, ratios = median of the per-round ratios. lightly `encode` step (forward, backward, AdamW), policy none. ' +
    'The machine is shared with other jobs: absolute times vary between runs; the paired ratios much less.');
  P();
  P('| model | batch | relaxed ms | SIMD128 ms | PyTorch ms | SIMD128 / relaxed | relaxed / PyTorch | SIMD128 / PyTorch | relaxed images/s |');
  P('|---|---|---|---|---|---|---|---|---|');
  for (const { model, batch } of R.relaxed.configs) {
    const get = (round, build) => round.find((o) => o.build === build && o.model === model && o.batch === batch && (o.policy ?? 'none') === 'none')?.ms_per_step;
    const rel = R.relaxed.rounds.map((rd) => get(rd, 'wasm-relaxed')), sim = R.relaxed.rounds.map((rd) => get(rd, 'wasm-simd'));
    const pt = R.relaxed.rounds.map((rd) => get(rd, 'pytorch'));
    const row = { model, batch, relaxed_ms: med(rel), simd_ms: med(sim), torch_ms: med(pt),
      simd_over_relaxed: med(rel.map((x, i) => sim[i] / x)), relaxed_over_torch: med(rel.map((x, i) => x / pt[i])),
      simd_over_torch: med(sim.map((x, i) => x / pt[i])) };
    relaxedRows.push(row);
    P(`| ${model.replace('_patch16_224', '')} | ${batch} | ${f(row.relaxed_ms, 0)} | ${f(row.simd_ms, 0)} | ${f(row.torch_ms, 0)} | ${f(row.simd_over_relaxed, 2)} | ` +
      `${f(row.relaxed_over_torch, 2)} | ${f(row.simd_over_torch, 2)} | ${f(row.relaxed_ms && 1e3 * batch / row.relaxed_ms, 2)} |`);
  }
  R.relaxed.summary = relaxedRows;
}
if (R.mainJob?.length) {
  const ips = (w) => med(R.mainJob.filter((o) => o.wasm === w).map((o) => o.images_per_s));
  const ratios = [...new Set(R.mainJob.map((o) => o.round))].map((r) => {
    const a = R.mainJob.find((o) => o.round === r && o.wasm === 'relaxed'), b = R.mainJob.find((o) => o.round === r && o.wasm === 'simd');
    return a && b ? a.images_per_s / b.images_per_s : null;
  });
  R.mainJobSummary = { simd_images_per_s: ips('simd'), relaxed_images_per_s: ips('relaxed'), relaxed_over_simd: med(ratios) };
  P();
  P(`Main job (\`node web/cli.js train --steps ${R.mainJob[0].steps} --no-eval\`: MAE, Fashion-MNIST, batch 64, block checkpointing, ` +
    `wall time incl. start-up): SIMD128 ${f(R.mainJobSummary.simd_images_per_s, 0)} images/s, relaxed ${f(R.mainJobSummary.relaxed_images_per_s, 0)} images/s ` +
    `(relaxed / SIMD128 = ${f(R.mainJobSummary.relaxed_over_simd, 2)}, median of ${ratios.length} interleaved pair${ratios.length > 1 ? 's' : ''}).`);
}
P();
P('## Targets (reported, not asserted)');
P();
P('| target | measured | met |');
P('|---|---|---|');
const yes = (c) => (c == null ? '–' : c ? 'yes' : '**no**');
const gemm = rows('wasm-simd').filter((r) => r.K >= 192 && r.N >= 192 && !r.op.startsWith('attention kernel'));
if (gemm.length) {
  const all = gemm.flatMap((r) => [pct(r, 'fwd', 'wasm-simd'), pct(r, 'bwd', 'wasm-simd')].filter((x) => x != null));
  P(`| GEMM >= 70% of the SIMD128 peak for K,N >= 192 (wasm SIMD, fwd and bwd) | ${f(Math.min(...all), 0)}–${f(Math.max(...all), 0)}% of ${f(simdPeak)} GFLOP/s | ${yes(Math.min(...all) >= 70)} |`);
}
const gemmR = rows('wasm-relaxed').filter((r) => r.K >= 192 && r.N >= 192 && !r.op.startsWith('attention kernel'));
if (gemmR.length) {
  const fw = gemmR.map((r) => pct(r, 'fwd', 'wasm-relaxed')), bw = gemmR.map((r) => pct(r, 'bwd', 'wasm-relaxed')).filter((x) => x != null);
  P(`| GEMM >= 80% of the relaxed-madd peak, ViT shapes, forward (wasm relaxed) | ${f(Math.min(...fw), 0)}–${f(Math.max(...fw), 0)}% of ${f(relaxedPeak)} GFLOP/s | ${yes(Math.min(...fw) >= 80)} |`);
  if (bw.length) P(`| GEMM >= 80% of the relaxed-madd peak, ViT shapes, backward (wasm relaxed) | ${f(Math.min(...bw), 0)}–${f(Math.max(...bw), 0)}% | ${yes(Math.min(...bw) >= 80)} |`);
}
for (const r of relaxedRows)
  P(`| relaxed 1-thread step <= 2x PyTorch+OpenBLAS 1 thread (${r.model.replace('_patch16_224', '')}, batch ${r.batch}; host ${R.host.isa}) | relaxed/PyTorch = ${f(r.relaxed_over_torch, 2)} (SIMD128/PyTorch ${f(r.simd_over_torch, 2)}) | ${yes(r.relaxed_over_torch == null ? null : r.relaxed_over_torch <= 2)} |`);
for (const { b, w, n, t, best } of targets) {
  if (n) P(`| wasm step within 2x of native (batch ${b}) | wasm/native = ${f(w.ms_per_step / n.ms_per_step, 2)} | ${yes(w.ms_per_step / n.ms_per_step <= 2)} |`);
  if (t) P(`| wasm step within 2x of PyTorch+OpenBLAS (batch ${b}) | wasm/PyTorch = ${f(w.ms_per_step / t.ms_per_step, 2)} | ${yes(w.ms_per_step / t.ms_per_step <= 2)} |`);
  if (best) P(`| >= 3x faster than TF.js's best backend (batch ${b}) | ${f(best / w.ms_per_step, 2)}x | ${yes(best / w.ms_per_step >= 3)} |`);
}
for (const b of ['wasm-simd', 'native']) {
  const base = find({ build: b, model: TINY, objective: 'encode', batch: 4, policy: 'none' });
  for (const [pol, tmax, mmin] of [['block', 1.3, 6], ['selective', 1.1, 2]]) {
    const o = find({ build: b, model: TINY, objective: 'encode', batch: 4, policy: pol });
    if (!base || !o) continue;
    const tr = o.ms_per_step / base.ms_per_step, mr = base.activation_bytes / o.activation_bytes;
    P(`| ${pol}: <= ${Math.round((tmax - 1) * 100)}% more time, >= ${mmin}x less activation memory (vit_tiny b4, ${b}) | ` +
      `${f((tr - 1) * 100, 0)}% more time, ${f(mr, 2)}x less memory | ${yes(tr <= tmax)} / ${yes(mr >= mmin)} |`);
  }
}
P();
P('## 5. Threads (web/pool.js + src/threads.c)');
P();
const TH = R.threads;
if (!TH) P('(the threads benchmark failed; see the log)');
else {
  P(`${TH.cpu}, ${TH.cores} cores; load average ${TH.loadavg_start.map((x) => f(x, 1)).join(' / ')} (1/5/15 min) at the start, ` +
    `${TH.loadavg_end.map((x) => f(x, 1)).join(' / ')} at the end: other jobs share these cores, and a fork-join step waits for its slowest ` +
    `thread, so the scaling below is a lower bound of what an idle machine gives. Interleaved (1 thread, 2 threads, 1, 2, ...), ` +
    `${TH.pairs} pairs; x1 = median of the per-pair ratios. vitrine: the encode step through the JS shell (forward + backward, no AdamW), ` +
    `Emscripten SIMD128 shared-memory build (128-bit vectors); PyTorch 1.13 + OpenBLAS: the same step + AdamW (OpenBLAS's own x86 kernels: AVX2/AVX-512 FMA on this host, see section 4).`);
  P();
  P('| model | batch | threads | vitrine ms/step | x 1 thread | same bits as 1 thread | PyTorch ms/step | x 1 thread | vitrine / PyTorch |');
  P('|---|---|---|---|---|---|---|---|---|');
  for (const v of TH.vitrine) {
    const t = TH.torch.find((o) => o.model === v.model && o.batch === v.batch && o.threads === v.threads);
    P(`| ${v.model.replace('_patch16_224', '')} | ${v.batch} | ${v.threads} | ${f(v.ms_per_step, 0)} | ${f(v.speedup_vs_1, 2)} | ${v.same_bits_as_1_thread ? 'yes' : '**no**'} | ` +
      `${f(t?.ms_per_step, 0)} | ${f(t?.speedup_vs_1, 2)} | ${f(t && v.ms_per_step / t.ms_per_step, 2)} |`);
  }
  if (TH.main_job) {
    const m = TH.main_job, ks = Object.keys(m.median_images_per_s);
    P();
    P(`The main job, \`${m.command}\` (MAE, Fashion-MNIST, batch 64), images/s: ` +
      ks.map((k) => `--threads ${k}: ${f(m.median_images_per_s[k], 1)} (runs: ${m.images_per_s[k].join(', ')})`).join('; ') +
      `; x${f(m.speedup, 2)} (median of paired ratios). --threads 1 is the engine as it ran before the pool (the same kernels on one thread).`);
  }
  const ti = TH.vitrine.find((o) => o.model === TINY && o.batch === 4 && o.threads === 2);
  if (ti) targets2.push([`2 threads >= 1.8x one thread, ViT-Ti/16 batch-4 step (vitrine)`, `x${f(ti.speedup_vs_1, 2)}`, ti.speedup_vs_1 >= 1.8]);
}
for (const [t, m, ok] of targets2) P(`\n- target: ${t}: ${m}: ${ok ? 'met' : '**not met**'}`);
if (R.notes.length) { P(); for (const n of R.notes) P(`- ${n}`); }
P();
P('Raw numbers: bench/results.json. Made by `bash bench/run.sh`.');

writeFileSync(join(ROOT, 'bench/results.json'), JSON.stringify(R, null, 1) + '\n');
writeFileSync(join(ROOT, 'bench/results.md'), md.join('\n') + '\n');
process.stdout.write(md.join('\n') + '\n');
log('wrote bench/results.md and bench/results.json');
