// Names every test vitest skipped in a CI run and fails when one is not declared in
// .ci/expected-skips.txt for that run (README of .ci/expected-skips.txt: its first lines).
// Usage: node .ci/check-skips.mjs <report dir> [<skipped count from the test logs>]
// The reports are vitest's JSON reports, one per `vitest run` (scripts/vitest-reporters.mjs names them
// <project>[.admission-<mode>].<id>.json). With a count, a log that counted more skipped tests than the
// reports hold (a run without a report) fails too. Exit 0: every skip declared; 1: not.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const [reportDir, loggedCount] = process.argv.slice(2);
if (!reportDir) {
  console.error('usage: node .ci/check-skips.mjs <report dir> [<skipped count from the logs>]');
  process.exit(2);
}

const WHEN = new Set(['always', 'admission=ledger', 'admission=leased', 'non-root']);
const declared = [];
readFileSync(join(root, '.ci/expected-skips.txt'), 'utf8').split('\n').forEach((line, index) => {
  if (line.trim() === '' || line.trimStart().startsWith('#')) return;
  const fields = line.split(' | ').map((field) => field.trim());
  const [file, test, when, why] = fields;
  if (fields.length !== 4 || !file || !test || !WHEN.has(when) || !why) {
    console.error(`.ci/expected-skips.txt:${index + 1}: expected "file | test | ${[...WHEN].join('|')} | why": ${line}`);
    process.exit(2);
  }
  const pattern = new RegExp(`^${test.split('*').map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`);
  declared.push({ file, pattern, when, line: index + 1, used: 0 });
});

/** Whether a declared skip applies to a run: its admission mode (from the report's name) and this user. */
function applies(when, admission) {
  if (when === 'always') return true;
  if (when === 'non-root') return process.getuid?.() !== 0;
  return when === `admission=${admission ?? 'leased'}`;
}

const skipped = [];
let reports = 0;
for (const name of readdirSync(reportDir).filter((entry) => entry.endsWith('.json')).sort()) {
  reports++;
  const admission = /\.admission-([a-z]+)\./.exec(name)?.[1];
  const report = JSON.parse(readFileSync(join(reportDir, name), 'utf8'));
  for (const file of report.testResults ?? []) {
    const path = relative(root, file.name);
    for (const test of file.assertionResults ?? []) {
      if (test.status === 'passed' || test.status === 'failed') continue;
      skipped.push({ path, name: test.fullName, status: test.status, admission, run: name });
    }
  }
}

const unexpected = [];
for (const test of skipped) {
  const match = declared.find((entry) => entry.file === test.path && entry.pattern.test(test.name) && applies(entry.when, test.admission));
  if (match) match.used++;
  else unexpected.push(test);
}

console.log(`== skipped tests: ${skipped.length} in ${reports} vitest runs, ${skipped.length - unexpected.length} declared in .ci/expected-skips.txt`);
for (const entry of declared) if (entry.used > 0) console.log(`   ${entry.used} × .ci/expected-skips.txt:${entry.line} (${entry.file}, ${entry.when})`);
let failed = false;
if (unexpected.length > 0) {
  failed = true;
  console.log(`== ${unexpected.length} skipped tests not declared (make them run, or declare them with a reason):`);
  for (const test of unexpected) console.log(`   ${test.path} › ${test.name} [${test.status}${test.admission ? `, admission=${test.admission}` : ''}]`);
}
if (loggedCount !== undefined && Number(loggedCount) > skipped.length) {
  failed = true;
  console.log(`== the test logs count ${loggedCount} skipped, the reports ${skipped.length}: a vitest run wrote no report (its config lacks testReporters()?)`);
}
process.exit(failed ? 1 : 0);
