#!/usr/bin/env node
// cli.js: `vitrine`, the command line (Node). One module per command in web/cli/ (each exports
// `command`: its name, options, help and main), all over one argument parser (web/cli/args.js):
//   vitrine COMMAND [options]     vitrine COMMAND --help     vitrine --help     vitrine --version
// The engine is loaded only by the commands that run it, so help works before anything is built.
// Exit status: 0 done (all passed), 1 a check failed or something could not be done, 2 a usage error
// (parity: or a file that cannot be read).
import { readFileSync } from 'node:fs';
import { runCommand } from './cli/args.js';

/** The commands, in the order `vitrine --help` lists them: a new command is a file web/cli/NAME.js
 * exporting `command`, and its name here. */
export const COMMANDS = ['train', 'predict', 'plan', 'trace', 'parity', 'export', 'golden'];
const load = async (name) => (await import(`./cli/${name}.js`)).command;

// node:wasi prints an ExperimentalWarning on first use; drop only that one.
const emitWarning = process.emitWarning;
process.emitWarning = (warning, ...rest) => {
  const type = typeof rest[0] === 'string' ? rest[0] : rest[0] && rest[0].type;
  if (type === 'ExperimentalWarning' && String(warning).includes('WASI')) return;
  return emitWarning.call(process, warning, ...rest);
};

async function usage() {
  const lines = [];
  for (const name of COMMANDS) {
    const c = await load(name);
    lines.push(`  ${name.padEnd(8)} ${c.summary}`);
  }
  return (
    'usage: vitrine COMMAND [options]    (vitrine COMMAND --help: its options)\n\n' +
    `Vision Transformers (timm / lightly) trained and checked through WebAssembly.\n\ncommands:\n${lines.join('\n')}\n\n` +
    '  vitrine --version    the version\n' +
    'Exit status: 0 done, 1 a check failed or something could not be done, 2 a usage error.\n'
  );
}

async function main(argv) {
  const [first, ...rest] = argv;
  if (first === '--version' || first === '-v') {
    process.stdout.write(
      `vitrine ${JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version}\n`,
    );
    return 0;
  }
  if (first === '--help' || first === '-h') {
    process.stdout.write(await usage());
    return 0;
  }
  if (first === 'help' && COMMANDS.includes(rest[0])) return main([rest[0], '--help']);
  if (!COMMANDS.includes(first)) {
    process.stderr.write(
      first == null ? await usage() : `vitrine: unknown command '${first}' (vitrine --help lists them)\n`,
    );
    return 2;
  }
  let command = await load(first);
  if (command.route)
    try {
      command = await command.route(rest);
    } catch (e) {
      process.stderr.write(`vitrine ${first}: ${e.message}\n`);
      return 2;
    }
  return runCommand(command, rest);
}

process.exitCode = await main(process.argv.slice(2));
