// lifecycle.test.mjs: a Trainer's life in a tab (web/train/trainer.js in a module Web Worker):
// dispose() right after train() (the worker not made yet), mid-run and after `done` -- a run not
// over settles `done` with an AbortError (kind 'disposed'), never left pending; a finished run keeps
// its status. The package's files are served beside a page of this test's own (demo/serve.mjs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { skip, launchChromium, ROOT, BUILD } from './harness.mjs';

test(
  'dispose() in a tab: done settles with an AbortError; a finished run keeps its status',
  { skip, timeout: 180_000 },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vitrine-lifecycle-'));
    const { startServer } = await import('../../demo/serve.mjs');
    const { server } = await startServer({
      port: 0,
      mounts: [
        ['/pkg/web/', join(ROOT, 'web')],
        ['/pkg/build/wasm/', join(BUILD, 'wasm')],
        ['/pkg/page/', dir],
      ],
    });
    const { ctx, page, profile, errors } = await launchChromium();
    try {
      writeFileSync(join(dir, 'index.html'), '<!doctype html><meta charset="utf-8"><title>lifecycle</title>\n');
      await page.goto(`http://127.0.0.1:${server.address().port}/pkg/page/`);
      const out = await page.evaluate(async () => {
        const { train } = await import('/pkg/web/vitrine.js');
        const n = 16,
          px = new Uint8Array(n * 784).map((_, i) => (i * 37) % 251);
        const opts = {
          objective: 'mae',
          config: {
            encoder: { img_size: 28, patch_size: 7, in_chans: 1, embed_dim: 32, depth: 2, num_heads: 2 },
            decoder_dim: 16,
            decoder_depth: 1,
            decoder_heads: 2,
          },
          data: { pixels: px, n, size: 28, chans: 1 },
          steps: 400,
          batch: 8,
          wasm: 'simd',
          threads: 1,
        };
        const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
        // how done settles within 20 s, or { pending: true }
        const outcome = (run) =>
          Promise.race([
            run.done.then(
              (r) => ({ resolved: r.status }),
              (e) => ({ name: e.name, kind: e.kind, code: e.code, message: e.message }),
            ),
            sleep(20000).then(() => ({ pending: true })),
          ]);
        const res = {};
        // right after train()
        let early = 0;
        const a = train({ ...opts, onStep: () => early++, onReady: () => early++ });
        a.dispose();
        res.early = { ...(await outcome(a)), status: a.status };
        // mid-run
        let b;
        const stepped = new Promise((r) => {
          b = train({
            ...opts,
            onStep: (e) => {
              if (e.step === 2) r();
            },
          });
        });
        await stepped;
        b.dispose();
        res.mid = { ...(await outcome(b)), status: b.status };
        // after done
        const c = train({ ...opts, steps: 2 });
        res.finished = (await c.done).status;
        c.dispose();
        await sleep(300);
        res.after = c.status;
        await sleep(1000);
        res.earlyEvents = early; // the run disposed at once never set up nor stepped
        return res;
      });
      // one comparison: a failure shows every case
      const pick = (o) => (typeof o === 'object' ? { name: o.name, kind: o.kind, code: o.code, status: o.status } : o);
      const disposed = { name: 'AbortError', kind: 'disposed', code: 'VT_ERR_STATE', status: 'disposed' };
      assert.deepEqual(
        {
          early: pick(out.early),
          mid: pick(out.mid),
          finished: out.finished,
          after: out.after,
          earlyEvents: out.earlyEvents,
        },
        { early: disposed, mid: disposed, finished: 'done', after: 'done', earlyEvents: 0 },
        JSON.stringify(out),
      );
      assert.match(out.early.message, /^the run was disposed before its first step/);
      assert.match(out.mid.message, /^the run was disposed at step \d+ of 400 \(dispose\(\)/);
      assert.deepEqual(
        errors.filter((e) => !/status of 404/.test(e)),
        [],
      );
    } finally {
      await ctx.close();
      server.close();
      rmSync(profile, { recursive: true, force: true });
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
