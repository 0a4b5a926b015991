// `npm run fuzz -- --minutes N [--seed S] [--path P] [--holes a,b]`: issue 35's invariant fuzzer for as
// long as asked. It builds what is not built (as `npm start` does), then runs the CI test file
// (apps/standalone/test/invariant-fuzz.test.ts) with its budget, seed, replay path and known holes from the
// environment; progress (runs, requests, failing runs, seed) prints every 30 s, a failure prints the
// shrunk sequence with its seed and path (replay it with --seed and --path).
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const options = { minutes: '30', seed: String(Date.now() % 2_147_483_647), path: undefined, holes: undefined };
const argv = process.argv.slice(2);
for (let index = 0; index < argv.length; index++) {
  const name = argv[index].replace(/^--/, '');
  if (!(name in options) || argv[index + 1] === undefined) {
    process.stderr.write(`usage: npm run fuzz -- --minutes N [--seed S] [--path P] [--holes name,name]\n`);
    process.exit(2);
  }
  options[name] = argv[++index];
}
if (!(Number(options.minutes) > 0) || !Number.isInteger(Number(options.seed))) {
  process.stderr.write('--minutes must be a positive number and --seed an integer\n');
  process.exit(2);
}

const stackDir = join(dirname(fileURLToPath(import.meta.url)), '..');
const built = spawnSync('node', [join(stackDir, 'scripts/ensure-built.mjs')], { stdio: 'inherit' });
if (built.status !== 0) process.exit(built.status ?? 1);

process.stdout.write(`fuzzing for ${options.minutes} min with seed ${options.seed}${options.path ? `, path ${options.path}` : ''}\n`);
const env = { ...process.env, FUZZ_MINUTES: options.minutes, FUZZ_SEED: options.seed };
if (options.path) env.FUZZ_PATH = options.path;
if (options.holes) env.FUZZ_HOLES = options.holes;
const run = spawnSync('npx', ['vitest', 'run', 'test/invariant-fuzz.test.ts'], { cwd: stackDir, stdio: 'inherit', env });
process.exit(run.status ?? 1);
