// Vitest reporters for every project's config. With GATEWAY_TEST_REPORT_DIR set (.ci/run sets it),
// each `vitest run` also writes vitest's JSON report there, one file per run: .ci/check-skips.mjs
// reads them to name every skipped test and fail CI on a skip .ci/expected-skips.txt does not declare.
// Unset, nothing changes (the default reporter alone; a --reporter on the command line wins anyway).
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * The tests run on the Node major that ships (package.json engines, the image's): every project's
 * config calls testReporters(), so a run on another major (the machine's Node 20 without
 * scripts/node-major.sh) stops here instead of testing what does not ship.
 */
function assertShippedNodeMajor() {
  const engines = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).engines?.node ?? '';
  const wanted = /^>=(\d+)/.exec(engines)?.[1];
  const running = process.versions.node.split('.')[0];
  if (wanted && running !== wanted) {
    throw new Error(`tests must run on Node ${wanted} (package.json engines "${engines}"), this is Node ${process.versions.node}: run them through \`sh scripts/node-major.sh …\` (npm test does)`);
  }
  if (process.env.CI && !process.env.GATEWAY_NODE_ANNOUNCED) {
    process.env.GATEWAY_NODE_ANNOUNCED = '1';
    console.log(`== vitest runs on node ${process.version} (engines ${engines})`);
  }
}

/** `{ reporters }` for a vitest config's `test` block, or nothing when no report directory is set. */
export function testReporters() {
  assertShippedNodeMajor();
  const directory = process.env.GATEWAY_TEST_REPORT_DIR;
  if (!directory) return {};
  // The project (apps/standalone → libs-stack) and the run's conditions, for the skip check to read back.
  const project = relative(root, process.cwd()).replaceAll(/[\\/]/g, '-') || 'root';
  const admission = process.env.GATEWAY_TEST_ADMISSION ? `.admission-${process.env.GATEWAY_TEST_ADMISSION}` : '';
  const outputFile = join(directory, `${project}${admission}.${process.pid}-${randomBytes(3).toString('hex')}.json`);
  return { reporters: ['default', ['json', { outputFile }]] };
}
