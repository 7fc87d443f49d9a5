// types.test.mjs: web/vitrine.d.ts cannot drift from the JavaScript. tsc generates declarations
// from web/vitrine.js (the members marked @internal left out), and a type-level check compares
// them with the hand-written file: every export, and every public member of Vitrine, Model,
// VitrineError, WasiExit and Trainer, declared in both or the compile fails naming what is missing; the
// builds are wasm/builds.json's (WasmBuild, Vitrine.build).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { REPO } from './util.mjs';

const TSC = path.join(REPO, 'node_modules/typescript/bin/tsc');
const tsc = (args, cwd) => spawnSync(process.execPath, [TSC, ...args], { cwd, encoding: 'utf8' });

// The check, as a type: [never, never] when A and B have the same public keys.
const CHECK = (hand, gen, builds) => `import type * as Hand from ${JSON.stringify(hand)};
import type * as Gen from ${JSON.stringify(gen)};
import type builds from ${JSON.stringify(builds)};
type Public<T> = { [K in keyof T as K extends \`_\${string}\` ? never : K]: T[K] };
type Same<A, B> = [Exclude<keyof Public<A>, keyof Public<B>>, Exclude<keyof Public<B>, keyof Public<A>>];
type SameUnion<A, B> = [Exclude<A, B>, Exclude<B, A>];
type Ok<T extends [never, never]> = T;
export type Exports = Ok<Same<typeof Gen, typeof Hand>>;
export type VitrineMembers = Ok<Same<InstanceType<typeof Gen.Vitrine>, Hand.Vitrine>>;
export type ModelMembers = Ok<Same<InstanceType<typeof Gen.Model>, Hand.Model>>;
export type ErrorMembers = Ok<Same<InstanceType<typeof Gen.VitrineError>, Hand.VitrineError>>;
export type ExitMembers = Ok<Same<InstanceType<typeof Gen.WasiExit>, Hand.WasiExit>>;
export type TrainerMembers = Ok<Same<InstanceType<typeof Gen.Trainer>, Hand.Trainer>>;
type Names = keyof (typeof builds)['builds'] & string;
export type Builds = Ok<SameUnion<Names | 'wasi', Hand.WasmBuild>>;
export type Build = Ok<SameUnion<Exclude<Names, \`\${string}-mt\`>, Hand.Vitrine['build']>>;
`;

function check(handDts) {
  const dir = mkdtempSync(path.join(tmpdir(), 'vitrine-types-'));
  try {
    const gen = tsc(
      [
        '--allowJs',
        '--declaration',
        '--emitDeclarationOnly',
        '--stripInternal',
        '--skipLibCheck',
        '--target',
        'es2022',
        '--module',
        'nodenext',
        '--moduleResolution',
        'nodenext',
        '--outDir',
        path.join(dir, 'gen'),
        path.join(REPO, 'web/vitrine.js'),
      ],
      REPO,
    );
    assert.equal(gen.status, 0, `declarations from the JS:\n${gen.stdout}${gen.stderr}`);
    writeFileSync(path.join(dir, 'hand.d.ts'), handDts);
    writeFileSync(
      path.join(dir, 'check.ts'),
      CHECK('./hand.js', './gen/web/vitrine.js', path.join(REPO, 'wasm/builds.json')),
    );
    writeFileSync(
      path.join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          noEmit: true,
          strict: true,
          target: 'es2022',
          module: 'nodenext',
          moduleResolution: 'nodenext',
          resolveJsonModule: true,
          skipLibCheck: true,
          lib: ['es2022', 'dom'],
          types: [],
        },
        files: ['check.ts'],
      }),
    );
    return tsc(['-p', 'tsconfig.json'], dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('web/vitrine.d.ts declares what web/vitrine.js exports, member for member, and the builds of wasm/builds.json', async () => {
  const { readFileSync } = await import('node:fs');
  const dts = readFileSync(path.join(REPO, 'web/vitrine.d.ts'), 'utf8');
  const ok = check(dts);
  assert.equal(ok.status, 0, `vitrine.d.ts and the JS differ:\n${ok.stdout}${ok.stderr}`);
  // the check can fail: a member missing from the .d.ts, an export it invents, a build it lacks
  for (const [what, bad] of [
    ['a missing member', dts.replace(/\n  namedPolicies\(\): string\[\];/, '')],
    ['an export the JS lacks', dts + '\nexport function notInTheJs(): void;\n'],
    ['a build left out', dts.replace(" | 'wasi-simd-mt';", ';')],
  ]) {
    assert.notEqual(bad, dts, what);
    const r = check(bad);
    assert.notEqual(r.status, 0, `${what} passed the check`);
    assert.match(r.stdout, /check\.ts\(\d+,\d+\): error/, what);
  }
});
