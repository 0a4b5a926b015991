// Prints the bin directory of the Node major that package.json's `engines.node` names, or nothing when
// the node running this script is already that major. The first time the machine's node is another
// major it fetches the official binary from npm (the `node-<platform>-<arch>` packages carry it) into
// .data/node-<major>, once. scripts/node-major.sh puts the printed directory first on PATH.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const range = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).engines?.node ?? '';
// engines names one major: ">=22 <23" (or "22", "^22…", "22.x").
const match = /^\s*(?:>=|\^|~)?\s*v?(\d+)\b/.exec(range);
if (!match) fail(`package.json engines.node (${JSON.stringify(range)}) does not start with a major`);
const wanted = match[1];
const running = process.versions.node.split('.')[0];
if (running === wanted) process.exit(0);

const dir = join(root, '.data', `node-${wanted}`);
const bin = join(dir, 'bin');
if (!existsSync(join(bin, 'node'))) {
  const pkg = `node-${process.platform}-${process.arch}@${wanted}`;
  process.stderr.write(`node-major: this is Node ${process.versions.node}, package.json wants ${wanted}: fetching ${pkg} from npm into .data/node-${wanted} (once, ~50 MB)\n`);
  mkdirSync(join(root, '.data'), { recursive: true });
  // Unpacked beside the target and renamed into place, so a run that stops half-way (or two at once)
  // never leaves a partial binary where the check above looks.
  const work = mkdtempSync(join(root, '.data', `node-${wanted}-partial-`));
  try {
    execFileSync('npm', ['pack', pkg, '--pack-destination', work, '--silent'], { cwd: work, stdio: ['ignore', 'ignore', 'inherit'] });
    const tarball = readdirSync(work).find((name) => name.endsWith('.tgz'));
    if (!tarball) fail(`npm pack ${pkg} left no tarball`);
    execFileSync('tar', ['xzf', tarball], { cwd: work, stdio: 'inherit' });
    const version = execFileSync(join(work, 'package', 'bin', 'node'), ['--version'], { encoding: 'utf8' }).trim();
    if (version.split('.')[0] !== `v${wanted}`) fail(`${pkg} carries node ${version}`);
    try {
      renameSync(join(work, 'package'), dir);
    } catch (error) {
      if (!existsSync(join(bin, 'node'))) throw error; // else another run put it there first
    }
    process.stderr.write(`node-major: node ${version} in .data/node-${wanted}\n`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
process.stdout.write(bin);

function fail(message) {
  process.stderr.write(`node-major: ${message}\n`);
  process.exit(1);
}
