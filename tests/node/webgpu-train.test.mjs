// webgpu-train.test.mjs: the WebGPU backend (web/webgpu/backend.js) trains a model from its real
// state on the SwiftShader adapter: createVitrine({ backend }) chooses and says why; the engine's
// recorded step replays on the GPU with the wasm engine's masks, lr and step count, recorded once
// per shape / policy; every checkpointing policy gives the bits of 'none' on the GPU; a 50-step MAE
// run stays with the wasm run; checkpoints cross between the backends both ways; faults (lost
// device, a shader that does not compile, out of memory) leave the weights intact. Needs an
// adapter (fails without: webgpu-util.mjs). Models and batches are tiny: SwiftShader is a CPU
// rasteriser (~0.3-1 s a step here once the pipelines are compiled).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createVitrine, train } from '../../web/vitrine.js';
import { GpuError } from '../../web/webgpu/device.js';
import { deviceMisfit } from '../../web/webgpu/backend.js';
import { REPO, WASM_DIR, readSafetensors } from './util.mjs';
import { testGpu, rand, rel, sameBits } from './webgpu-util.mjs';

const SMALL = {
  encoder: { img_size: 16, patch_size: 4, in_chans: 1, embed_dim: 16, depth: 2, num_heads: 2 },
  decoder_dim: 16,
  decoder_depth: 1,
  decoder_heads: 2,
};
const B = 2;
// the stated tolerance of a GPU run against the wasm run: relative difference of each step's loss
// (measured on SwiftShader: <= 2.1e-7 over 50 steps; the kernels sum in other orders than the CPU's)
const LOSS_TOL = 1e-4;

await testGpu().then((g) => g.destroy()); // no adapter: every test here fails, saying what is missing
const engines = [];
async function engine(backend) {
  const vt = await createVitrine({ wasm: 'simd', threads: 1, wasmDir: WASM_DIR, backend, gpu: { swiftshader: true } });
  engines.push(vt);
  return vt;
}
after(() => engines.forEach((vt) => vt.close()));
const gpuVt = await engine('webgpu'),
  cpuVt = await engine('wasm');

function model(vt, { policy = 'none', steps = 50, seed = 1 } = {}) {
  const m = vt.createModel({ kind: 'mae', config: SMALL });
  m.initWeights(seed);
  m.setGradCheckpointing(policy);
  m.trainerInit({ lr: 2e-3, warmupSteps: 2, totalSteps: steps, seed: seed + 1 });
  return m;
}
const images = (step) => rand(B * 16 * 16, 100 + step);
const state = (m) => m.params().map((p) => p.data.slice());
const grads = (m) =>
  m
    .params()
    .filter((p) => p.grad)
    .map((p) => p.grad.slice());
const flat = (arrs) => {
  const n = arrs.reduce((a, x) => a + x.length, 0),
    out = new Float32Array(n);
  let o = 0;
  for (const x of arrs) {
    out.set(x, o);
    o += x.length;
  }
  return out;
};

test('backend: webgpu names its adapter, auto refuses a software one for wasm, wasm is the default', async () => {
  assert.equal(gpuVt.backend.name, 'webgpu');
  assert.equal(gpuVt.backend.adapter.software, true);
  assert.match(gpuVt.backend.reason, /swiftshader/i);
  assert.equal(cpuVt.backend.name, 'wasm');
  const auto = await engine('auto');
  assert.equal(auto.backend.name, 'wasm');
  assert.match(auto.backend.reason, /software .*slower than wasm/);
  await assert.rejects(
    createVitrine({ wasm: 'simd', threads: 1, wasmDir: WASM_DIR, backend: 'cuda' }),
    /backend must be 'webgpu', 'wasm' or 'auto'/,
  );
});

test("a GPU step from the model's real state: the wasm run's losses and gradients, recorded once per shape and policy", async () => {
  const g = model(gpuVt),
    c = model(cpuVt);
  for (let s = 0; s < 3; s++) {
    const lg = await g.trainStepAsync(images(s), B),
      lc = c.trainStep(images(s), B);
    assert.ok(Math.abs(lg - lc) <= LOSS_TOL * Math.abs(lc), `step ${s}: loss ${lg} on the GPU, ${lc} on wasm`);
  }
  assert.equal(g._backend.recordings, 1, 'one recording for three steps of one shape and policy');
  assert.equal(g.stepCount, 3);
  // the newest state is on the GPU: wasm readers refuse until sync()
  assert.throws(() => g.saveTrainState(), /await model.sync\(\) first/);
  assert.throws(() => g.initWeights(3), /await model.sync\(\) first/);
  await g.sync();
  const eg = rel(flat(grads(g)), flat(grads(c)));
  assert.ok(eg <= 1e-4, `gradients of step 3: ${eg.toExponential(2)}`);
  const ep = rel(flat(state(g)), flat(state(c)));
  assert.ok(ep <= 1e-2, `parameters after 3 AdamW steps: ${ep.toExponential(2)}`); // AdamW's first steps are sign-like: lr-sized
  assert.ok(g.saveTrainState().length > 0);
  // another policy, another batch: recorded again, going on from the GPU's state
  g.setGradCheckpointing('block');
  c.setGradCheckpointing('block');
  const lg = await g.trainStepAsync(rand(3 * 256, 7), 3),
    lc = c.trainStep(rand(3 * 256, 7), 3);
  assert.equal(g._backend.recordings, 2);
  assert.ok(Math.abs(lg - lc) <= LOSS_TOL * Math.abs(lc), `after the switch: ${lg} vs ${lc}`);
  await assert.rejects(g.trainStepAsync(images(0), 3), /batch 3 given, the images hold 2/);
  g.dispose();
});

test('concurrent trainStepAsync calls are queued (the sequential bits); dispose() mid-step rejects saying so', async () => {
  // three steps called at once run one after another: the losses and state of three awaited in turn
  const q = model(gpuVt),
    s = model(gpuVt);
  const queued = await Promise.all([0, 1, 2].map((i) => q.trainStepAsync(images(i), B)));
  const seq = [];
  for (let i = 0; i < 3; i++) seq.push(await s.trainStepAsync(images(i), B));
  assert.deepEqual(queued, seq);
  await Promise.all([q.sync(), s.sync()]);
  assert.equal(q.stepCount, 3);
  assert.ok(sameBits(flat(state(q)), flat(state(s))), 'queued steps: other parameters than sequential ones');
  // a step and a sync called together: the sync waits for the step
  const p = q.trainStepAsync(images(3), B),
    sy = q.sync();
  await p;
  await sy;
  assert.doesNotThrow(() => q.saveTrainState());
  q.dispose();
  s.dispose();
  // disposed at any moment of a step (recording, upload, the replay, the read-back) or while a step
  // waits behind it: each rejects with an AbortError that says the model was disposed
  for (const ms of [0, 1, 5, 20, 60]) {
    const m = model(gpuVt),
      a = m.trainStepAsync(images(0), B),
      b = m.trainStepAsync(images(1), B);
    await new Promise((r) => setTimeout(r, ms));
    m.dispose();
    let ran = ms > 0; // a step may have ended before dispose(); the one queued behind it only if it did
    for (const [what, x] of [
      ['the step', a],
      ['the queued step', b],
    ])
      await x.then(
        () => assert.ok(ran, `${what} resolved after dispose at ${ms} ms`),
        (e) => {
          ran = false;
          assert.equal(e.name, 'AbortError', `${what} at ${ms} ms: ${e.message}`);
          assert.equal(e.kind, 'disposed');
          assert.equal(e.code, 'VT_ERR_STATE');
          assert.match(e.message, /^trainStepAsync: the model was disposed (during the call|before the call ran)$/);
        },
      );
  }
});

test('every checkpointing policy gives the bits of none on the GPU (losses, parameters, AdamW state)', async () => {
  const probe = gpuVt.createModel({ kind: 'mae', config: SMALL }),
    policies = probe.namedPolicies();
  probe.dispose();
  assert.ok(policies.length >= 4 && policies.includes('block') && policies.includes('selective'), policies.join(' '));
  let want = null;
  for (const policy of policies) {
    const m = model(gpuVt, { policy });
    const losses = Float32Array.from([await m.trainStepAsync(images(0), B), await m.trainStepAsync(images(1), B)]);
    await m.sync();
    const got = {
      losses,
      params: flat(state(m)),
      grads: flat(grads(m)),
      train: m.saveTrainState(),
      calls: m._backend.step.calls.length,
    };
    m.dispose();
    if (!want) {
      want = got;
      continue;
    }
    if (policy === 'block')
      assert.ok(got.calls > want.calls, `block re-computes: ${got.calls} calls, none ${want.calls}`);
    for (const k of ['losses', 'params', 'grads'])
      assert.ok(sameBits(got[k], want[k]), `${policy}: ${k} differ from none's`);
    // the checkpoint's tensors (AdamW's m and v, the step, the generator; its metadata names the policy)
    const a = readSafetensors(got.train),
      b = readSafetensors(want.train);
    assert.deepEqual(Object.keys(a.tensors), Object.keys(b.tensors));
    for (const k of Object.keys(a.tensors))
      assert.ok(
        Buffer.compare(Buffer.from(a.tensors[k].bytes), Buffer.from(b.tensors[k].bytes)) === 0,
        `${policy}: ${k} differs from none's`,
      );
  }
});

test("a classifier's step on the GPU (labels uploaded each step): the wasm run's losses", async () => {
  const enc = { img_size: 16, patch_size: 4, in_chans: 1, embed_dim: 16, depth: 2, num_heads: 2, num_classes: 5 };
  const mk = (vt) => {
    const m = vt.createModel({ kind: 'timm', config: enc });
    m.initWeights(1);
    m.trainerInit({ lr: 1e-3, seed: 2 });
    return m;
  };
  const g = mk(gpuVt),
    c = mk(cpuVt);
  for (let s = 0; s < 3; s++) {
    const x = rand(3 * 256, s + 1),
      y = [s % 5, (s + 1) % 5, (s + 3) % 5];
    const lg = await g.trainStepLabelsAsync(x, y),
      lc = c.trainStepLabels(x, y);
    assert.ok(Math.abs(lg - lc) <= LOSS_TOL * lc, `step ${s}: ${lg} vs ${lc}`);
  }
  assert.equal(g._backend.recordings, 1);
  g.dispose();
  c.dispose();
});

test('a step over more than one binding: the regions split across buffers, the same bits', async () => {
  const run = async () => {
    const m = model(gpuVt);
    const losses = Float32Array.from([await m.trainStepAsync(images(0), B), await m.trainStepAsync(images(1), B)]);
    await m.sync();
    const out = {
      losses,
      params: flat(state(m)),
      single: m._backend.step.layout.single,
      buffers: m._backend.step.layout.buffers.length,
    };
    m.dispose();
    return out;
  };
  const one = await run(),
    limits = gpuVt.backend.gpu.limits,
    keep = { ...limits };
  const m = model(cpuVt),
    regions = m.traceStep({ batch: B, json: true }).regions;
  m.dispose();
  // one binding no larger than the largest region: the whole no longer fits one buffer's binding
  limits.maxStorageBufferBindingSize = Math.ceil(Math.max(...Object.values(regions)) / 256) * 256;
  let split;
  try {
    split = await run();
  } finally {
    Object.assign(limits, keep);
  }
  assert.equal(one.single, true);
  assert.equal(split.single, false);
  assert.ok(split.buffers > 3, `${split.buffers} buffers`);
  assert.ok(
    sameBits(split.losses, one.losses) && sameBits(split.params, one.params),
    'split = one buffer, bit for bit',
  );
});

test('50 MAE steps on the GPU stay with the wasm run; checkpoints resume across backends both ways', async () => {
  const N = 50,
    K = 40;
  const g = model(gpuVt, { steps: N }),
    c = model(cpuVt, { steps: N });
  const lossesClose = (a, b, what) =>
    a.forEach((x, i) =>
      assert.ok(Math.abs(x - b[i]) <= LOSS_TOL * Math.abs(b[i]), `${what}, step ${i}: ${x} vs ${b[i]}`),
    );
  const run = async (m, from, to, gpu) => {
    const out = [];
    for (let s = from; s < to; s++) out.push(gpu ? await m.trainStepAsync(images(s), B) : m.trainStep(images(s), B));
    return out;
  };
  const lg = await run(g, 0, K, true),
    lc = await run(c, 0, K, false);
  lossesClose(lg, lc, 'GPU vs wasm');
  const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
  assert.ok(mean(lc.slice(-10)) < mean(lc.slice(0, 10)), 'the loss falls');
  // GPU -> wasm: the GPU run's checkpoint resumes on wasm; wasm -> GPU the other way
  await g.sync();
  const fromGpu = g.saveTrainState(),
    fromCpu = c.saveTrainState();
  const c2 = model(cpuVt, { steps: N, seed: 9 }),
    g2 = model(gpuVt, { steps: N, seed: 9 });
  c2.loadTrainState(fromGpu);
  g2.loadTrainState(fromCpu);
  assert.equal(c2.stepCount, K);
  assert.equal(g2.stepCount, K);
  const tail = await run(c, K, N, false);
  lossesClose(await run(g, K, N, true), tail, 'the GPU run');
  lossesClose(await run(c2, K, N, false), tail, "wasm resumed from the GPU's checkpoint");
  lossesClose(await run(g2, K, N, true), tail, "the GPU resumed from wasm's checkpoint");
  for (const m of [g, c, c2, g2]) m.dispose();
});

// the CLI's train runs the Trainer's Session in a worker thread: on the GPU there too
test("vitrine train --backend webgpu (the Trainer's Session): the wasm run's losses; stopped and resumed on the GPU, the straight run's checkpoint bits; resumed on wasm", () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-gpu-train-'));
  const config = JSON.stringify({
    encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 16, depth: 1, num_heads: 2 },
    decoder_dim: 16,
    decoder_depth: 1,
    decoder_heads: 2,
  });
  const spawn = (out, args) =>
    spawnSync(
      process.execPath,
      [
        path.join(REPO, 'web/cli.js'),
        'train',
        '--wasm',
        'simd',
        '--threads',
        '1',
        '--no-eval',
        '--json',
        '--out',
        path.join(dir, out),
        ...args,
      ],
      { encoding: 'utf8', env: { ...process.env, VITRINE_WASM_DIR: WASM_DIR, VITRINE_WEBGPU: 'swiftshader' } },
    );
  const cli = (out, ...args) => {
    const r = spawn(out, args);
    assert.equal(r.status, 0, r.stderr);
    return { json: JSON.parse(r.stdout.trim().split('\n').pop()), stderr: r.stderr };
  };
  const checkpoint = (out) =>
    Object.entries(readSafetensors(readFileSync(path.join(dir, out, 'checkpoint.safetensors'))).tensors).map(
      ([k, t]) => [k, Buffer.from(t.bytes).toString('hex')],
    );
  try {
    const run = ['--config', config, '--batch', '4', '--steps', '6', '--save-every', '3'],
      GPU = ['--backend', 'webgpu'];
    const gpu = cli('gpu', ...run, '--stop-at', '3', ...GPU),
      cpu = cli('cpu', ...run);
    assert.match(gpu.stderr, /backend webgpu \(WebGPU adapter .*swiftshader/i);
    assert.ok(
      Math.abs(gpu.json.loss_first - cpu.json.loss_first) <= LOSS_TOL * cpu.json.loss_first,
      `${gpu.json.loss_first} vs ${cpu.json.loss_first}`,
    );
    const straight = cli('gpu-straight', ...run, ...GPU),
      onGpu = cli('gpu-resumed', '--resume', path.join(dir, 'gpu', 'checkpoint.safetensors'), ...GPU);
    assert.equal(onGpu.json.steps, 6);
    assert.deepEqual(
      checkpoint('gpu-resumed'),
      checkpoint('gpu-straight'),
      'resumed at 3 on the GPU != straight on the GPU',
    );
    assert.equal(onGpu.json.loss_last, straight.json.loss_last);
    assert.ok(
      Math.abs(straight.json.loss_last - cpu.json.loss_last) <= LOSS_TOL * cpu.json.loss_last,
      `${straight.json.loss_last} vs ${cpu.json.loss_last}`,
    );
    const onWasm = cli('gpu-wasm', '--resume', path.join(dir, 'gpu', 'checkpoint.safetensors'));
    assert.equal(onWasm.json.steps, 6);
    assert.ok(
      Math.abs(onWasm.json.loss_last - cpu.json.loss_last) <= LOSS_TOL * cpu.json.loss_last,
      `${onWasm.json.loss_last} vs ${cpu.json.loss_last}`,
    );
    const accum = spawn('accum', [...run, '--grad-accum-steps', '2', ...GPU]); // K micro-batches are not one recording
    assert.equal(accum.status, 2, accum.stderr);
    assert.match(accum.stderr, /--grad-accum-steps: gradAccum 2: accumulated steps do not run on the WebGPU backend/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// issue 35: train --objective classify refused --backend ("unknown option"), while docs/cli.md
// says train takes it
test("vitrine train --objective classify --backend webgpu: the wasm run's losses, the adapter named", () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-gpu-classify-'));
  const cli = (out, ...more) =>
    spawnSync(
      process.execPath,
      [
        path.join(REPO, 'web/cli.js'),
        'train',
        '--objective',
        'classify',
        '--wasm',
        'simd',
        '--threads',
        '1',
        '--config',
        JSON.stringify({ img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 16, depth: 1, num_heads: 2 }),
        '--batch',
        '4',
        '--steps',
        '3',
        '--train-max',
        '16',
        '--eval-max',
        '8',
        '--json',
        '--out',
        path.join(dir, out),
        ...more,
      ],
      { encoding: 'utf8', env: { ...process.env, VITRINE_WASM_DIR: WASM_DIR, VITRINE_WEBGPU: 'swiftshader' } },
    );
  try {
    const g = cli('gpu', '--backend', 'webgpu'),
      c = cli('cpu');
    assert.equal(g.status, 0, g.stderr);
    assert.equal(c.status, 0, c.stderr);
    assert.match(g.stderr, /backend webgpu \(WebGPU adapter .*swiftshader/i);
    const [jg, jc] = [g, c].map((r) => JSON.parse(r.stdout.trim().split('\n').pop()));
    for (const k of ['loss_first', 'loss_last'])
      assert.ok(Math.abs(jg[k] - jc[k]) <= LOSS_TOL * Math.abs(jc[k]), `${k}: ${jg[k]} on the GPU, ${jc[k]} on wasm`);
    assert.equal(jg.eval_images, jc.eval_images);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// the Trainer's Session in its worker thread on the GPU: each step's loss with the wasm run's, the
// state synced at the checkpoint (an event) and the end; stopped and resumed on the GPU it gives
// the straight GPU run's checkpoint bit for bit; a classifier's steps and evaluation; gradAccum refused
test("train({ backend: 'webgpu' }): the Session steps on the GPU in a worker thread; checkpoints resume bit for bit", async () => {
  const n = 12,
    px = new Uint8Array(n * 256),
    labels = [];
  for (let i = 0; i < n; i++) {
    labels.push(i % 2);
    for (let k = 0; k < 256; k++) px[i * 256 + k] = (((i % 2 ? k % 16 : k >> 4) + i) >> 1) % 2 ? 200 : 30;
  }
  const data = { pixels: px, n, size: 16, chans: 1, labels, classes: ['a', 'b'] };
  const base = {
    objective: 'mae',
    config: SMALL,
    data,
    batch: B,
    steps: 8,
    lr: 2e-3,
    warmup: 2,
    seed: 1,
    wasm: 'simd',
    threads: 1,
    noEval: true,
  };
  const GPU = { backend: 'webgpu', gpu: { swiftshader: true } };
  const tensorsOf = (bytes) =>
    Object.entries(readSafetensors(bytes).tensors).map(([k, t]) => [k, Buffer.from(t.bytes).toString('hex')]);
  const run = async (o) => {
    const losses = [],
      checkpoints = [],
      memory = [];
    let engineInfo = null;
    const t = train({
      ...o,
      onEngine: (e) => {
        engineInfo = e;
      },
      onStep: (e) => {
        losses.push(e.loss);
        if (e.memory) memory.push(e.memory);
      },
      onCheckpoint: (c) => checkpoints.push(c),
    });
    try {
      return { r: await t.done, losses, checkpoints, engineInfo, memory };
    } finally {
      t.dispose();
    }
  };
  const gpu = await run({ ...base, ...GPU, checkpointEvery: 4 }),
    cpu = await run(base);
  assert.equal(gpu.engineInfo.backend.name, 'webgpu');
  assert.equal(cpu.engineInfo.backend.name, 'wasm');
  assert.ok(gpu.memory[0].gpu > 0 && cpu.memory[0].gpu === undefined, 'the steps held GPU buffers'); // (they ran there)
  assert.equal(gpu.r.status, 'done');
  assert.equal(gpu.losses.length, 8);
  gpu.losses.forEach((x, i) =>
    assert.ok(
      Math.abs(x - cpu.losses[i]) <= LOSS_TOL * Math.abs(cpu.losses[i]),
      `step ${i + 1}: ${x} on the GPU, ${cpu.losses[i]} on wasm`,
    ),
  );
  assert.deepEqual(
    gpu.checkpoints.map((c) => c.step),
    [4],
  );
  // the step-4 checkpoint (synced from the GPU) resumed on the GPU: the straight run's bits
  const resumed = await run({ data, resume: gpu.checkpoints[0].bytes, wasm: 'simd', threads: 1, noEval: true, ...GPU });
  assert.equal(resumed.r.step, 8);
  assert.deepEqual(tensorsOf(resumed.r.checkpoint), tensorsOf(gpu.r.checkpoint), 'GPU resumed at 4 != GPU straight');
  assert.equal(resumed.r.lossLast, gpu.r.lossLast);
  assert.deepEqual(tensorsOf(resumed.r.weights), tensorsOf(gpu.r.weights));
  // a classifier: labels each step on the GPU, the held-out evaluation after a sync
  const cb = {
    objective: 'classify',
    config: SMALL.encoder,
    data,
    batch: B,
    steps: 3,
    lr: 1e-3,
    warmup: 1,
    seed: 2,
    wasm: 'simd',
    threads: 1,
    evalEvery: 2,
  };
  const gc = await run({ ...cb, ...GPU }),
    cc = await run(cb);
  gc.losses.forEach((x, i) =>
    assert.ok(
      Math.abs(x - cc.losses[i]) <= LOSS_TOL * Math.abs(cc.losses[i]),
      `classify step ${i + 1}: ${x} on the GPU, ${cc.losses[i]} on wasm`,
    ),
  );
  assert.ok(gc.r.eval && gc.r.eval.n === cc.r.eval.n && gc.r.eval.n > 0, JSON.stringify(gc.r.eval));
  // K micro-batches are not one recording: refused before a step
  await assert.rejects(
    run({ ...base, ...GPU, gradAccum: 2 }).then((x) => x.r),
    /gradAccum 2: accumulated steps do not run on the WebGPU backend/,
  );
});

test("plan --backend webgpu: the step against the adapter's limits; a limit broken is named", () => {
  const r = spawnSync(
    process.execPath,
    [path.join(REPO, 'web/cli.js'), 'plan', '--backend', 'webgpu', '--wasm', 'simd', '--threads', '1', '--json'],
    { encoding: 'utf8', env: { ...process.env, VITRINE_WASM_DIR: WASM_DIR, VITRINE_WEBGPU: 'swiftshader' } },
  );
  assert.equal(r.status, 0, r.stderr);
  const w = JSON.parse(r.stdout).webgpu;
  assert.equal(w.fits, true);
  assert.match(w.adapter, /swiftshader/i);
  // the same recorded step against smaller limits: the binding limit, then the buffer limit, named
  const m = model(cpuVt),
    trace = m.traceStep({ batch: B, json: true }),
    arena = trace.regions.arena;
  assert.equal(deviceMisfit(trace, { maxBufferSize: 2 ** 30, maxStorageBufferBindingSize: 2 ** 30 }), null);
  assert.match(
    deviceMisfit(trace, { maxBufferSize: 2 ** 30, maxStorageBufferBindingSize: 1024 }),
    /binds \d+ bytes of the \w+ region at once, over maxStorageBufferBindingSize \(1024\)/,
  );
  assert.match(
    deviceMisfit(trace, { maxBufferSize: arena - 1, maxStorageBufferBindingSize: 2 ** 30 }),
    new RegExp(`the arena region needs ${arena} bytes, over maxBufferSize`),
  );
  // what the GPU records: whole row ranges (fewer, larger calls: the decoder's 136 rows are not
  // cut into 64-row MLP chunks), a larger arena; the wasm model's own recording is as before
  const calls = (t) => t.entries.filter((e) => e.call).length,
    chunked = m.traceStep({ batch: 8, json: true });
  const whole = m.recordStep({ batch: 8 });
  assert.ok(
    calls(whole) < calls(chunked) && whole.regions.arena > chunked.regions.arena,
    `${calls(whole)} vs ${calls(chunked)} calls`,
  );
  assert.equal(calls(m.traceStep({ batch: 8, json: true })), calls(chunked));
  m.dispose();
});

// issue 36: a step holding a kernel the GPU lacks was a plain Error; it is a GpuError of kind
// 'unsupported' (what a caller of backend 'auto' falls back on), one line naming the kernel and wasm
test("a kernel the GPU lacks: a one-line GpuError 'unsupported' naming it and backend wasm; the model trains on wasm", async () => {
  const { KERNELS } = await import('../../web/webgpu/kernels.js');
  const config = { ...SMALL, encoder: { ...SMALL.encoder, act_layer: 'quick_gelu' } };
  const m = gpuVt.createModel({ kind: 'mae', config });
  m.initWeights(1);
  m.trainerInit({ lr: 2e-3, seed: 2 });
  const before = state(m),
    had = KERNELS.quick_gelu_forward;
  delete KERNELS.quick_gelu_forward;
  try {
    await assert.rejects(m.trainStepAsync(images(0), B), (e) => {
      assert.ok(e instanceof GpuError, `${e.name}: ${e.message}`);
      assert.equal(e.kind, 'unsupported');
      assert.match(e.message, /^the kernel quick_gelu_forward has no WebGPU implementation: .*backend 'wasm'/);
      assert.doesNotMatch(e.message, /\n/);
      return true;
    });
  } finally {
    KERNELS.quick_gelu_forward = had;
  }
  assert.equal(m.stepCount, 0);
  state(m).forEach((p, i) => assert.ok(sameBits(p, before[i]), 'parameters unchanged'));
  // the same model on wasm: the step the GPU would have run
  const c = cpuVt.createModel({ kind: 'mae', config });
  c.initWeights(1);
  c.trainerInit({ lr: 2e-3, seed: 2 });
  assert.equal(m.trainStep(images(0), B), c.trainStep(images(0), B));
  // and with the kernel back, on the GPU, within the rule of wasm
  const l1 = await m.trainStepAsync(images(1), B),
    w1 = c.trainStep(images(1), B);
  assert.ok(Math.abs(l1 - w1) <= LOSS_TOL * Math.abs(w1), `${l1} vs ${w1}`);
  m.dispose();
  c.dispose();
});

test('faults: a lost device, a shader that does not compile, out of memory: a clear error, the weights intact', async () => {
  // a shader that does not compile (one kernel's WGSL broken): the first step fails, nothing changes
  // (last in this file: it loses the shared device)
  const vt = gpuVt,
    m = model(vt),
    before = state(m);
  const { PipelineCache } = await import('../../web/webgpu/program.js');
  const get = PipelineCache.prototype.get;
  PipelineCache.prototype.get = function (label, code, n) {
    return get.call(this, label, /gelu/.test(label) ? `${code}\nfn broken( {` : code, n);
  };
  try {
    await assert.rejects(
      m.trainStepAsync(images(0), B),
      (e) => e instanceof GpuError && e.kind === 'compile' && /intact/.test(e.message),
    );
  } finally {
    PipelineCache.prototype.get = get;
  }
  assert.equal(m.stepCount, 0);
  state(m).forEach((p, i) => assert.ok(sameBits(p, before[i]), 'parameters unchanged'));
  // out of memory while allocating the step's buffers
  const storage = m._backend.pool.storage;
  m._backend.pool.storage = async () => {
    throw new GpuError('out-of-memory', 'allocating: out of GPU memory (injected)');
  };
  await assert.rejects(m.trainStepAsync(images(0), B), (e) => e.kind === 'out-of-memory' && /intact/.test(e.message));
  m._backend.pool.storage = storage;
  assert.equal(m.stepCount, 0);
  // two good steps (state on the GPU, not synced), then the device is lost: back to step 0's state
  const l0 = await m.trainStepAsync(images(0), B);
  await m.trainStepAsync(images(1), B);
  assert.equal(m.stepCount, 2);
  vt.backend.gpu.device.destroy();
  await new Promise((r) => setTimeout(r, 10));
  await assert.rejects(
    m.trainStepAsync(images(2), B),
    (e) => e instanceof GpuError && e.kind === 'lost' && /back at step 0.*2 GPU steps lost/.test(e.message),
  );
  assert.equal(m.stepCount, 0);
  state(m).forEach((p, i) => assert.ok(sameBits(p, before[i]), 'the weights of the last sync'));
  // the wasm engine carries on from there, with the masks of step 0 again (the generator went back)
  const c = model(cpuVt),
    lc = c.trainStep(images(0), B);
  assert.equal(m.trainStep(images(0), B), lc, 'the same step 0 on wasm');
  assert.ok(Math.abs(l0 - lc) <= LOSS_TOL * Math.abs(lc), `the GPU's step 0: ${l0} vs ${lc}`);
  m.dispose();
  c.dispose();
});
