// Vitest reporters for every project's config. With GATEWAY_TEST_REPORT_DIR set (.ci/run sets it),
// each `vitest run` also writes vitest's JSON report there, one file per run: .ci/check-skips.mjs
// reads them to name every skipped test and fail CI on a skip .ci/expected-skips.txt does not declare.
// Unset, nothing changes (the default reporter alone; a --reporter on the command line wins anyway).
import { randomBytes } from 'node:crypto';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** `{ reporters }` for a vitest config's `test` block, or nothing when no report directory is set. */
export function testReporters() {
  const directory = process.env.GATEWAY_TEST_REPORT_DIR;
  if (!directory) return {};
  // The project (apps/standalone → libs-stack) and the run's conditions, for the skip check to read back.
  const project = relative(root, process.cwd()).replaceAll(/[\\/]/g, '-') || 'root';
  const admission = process.env.GATEWAY_TEST_ADMISSION ? `.admission-${process.env.GATEWAY_TEST_ADMISSION}` : '';
  const outputFile = join(directory, `${project}${admission}.${process.pid}-${randomBytes(3).toString('hex')}.json`);
  return { reporters: ['default', ['json', { outputFile }]] };
}
