// Names every test vitest skipped in a CI run and fails when one is not declared in
// .ci/expected-skips.txt for that run (README of .ci/expected-skips.txt: its first lines).
// Usage: node .ci/check-skips.mjs <report dir> [<skipped count from the test logs>]
// The reports are vitest's JSON reports, one per `vitest run` (scripts/vitest-reporters.mjs names them
// <project>[.admission-<mode>].<id>.json). With a count, a log that counted more skipped tests than the
// reports hold (a run without a report) fails too. Failed tests are listed (their first lines), not judged:
// vitest's exit code fails the run for them. Exit 0: every skip declared; 1: not.
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
const failedTests = [];
let reports = 0;
for (const name of readdirSync(reportDir).filter((entry) => entry.endsWith('.json')).sort()) {
  reports++;
  const admission = /\.admission-([a-z]+)\./.exec(name)?.[1];
  const report = JSON.parse(readFileSync(join(reportDir, name), 'utf8'));
  for (const file of report.testResults ?? []) {
    const path = relative(root, file.name);
    if (file.status === 'failed' && file.message) {
      failedTests.push({ path, name: '(the file: a hook or an import)', admission, why: String(file.message).split('\n').slice(0, 4).join('\n      ') });
    }
    for (const test of file.assertionResults ?? []) {
      if (test.status === 'passed') continue;
      if (test.status === 'failed') {
        // The failure's first lines, so the end of the CI log names what failed without the whole log.
        const why = (test.failureMessages ?? []).join('\n').split('\n').slice(0, 4).map((text) => text.slice(0, 300)).join('\n      ');
        failedTests.push({ path, name: test.fullName, admission, duration: test.duration, why });
        continue;
      }
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
if (failedTests.length > 0) {
  // Failed tests fail the run through vitest's exit code; listed here because this is the log's tail.
  console.log(`== ${failedTests.length} failed tests:`);
  for (const test of failedTests) {
    console.log(`   ${test.path} › ${test.name}${test.admission ? ` [admission=${test.admission}]` : ''} (${Math.round(test.duration ?? 0)} ms)`);
    if (test.why) console.log(`      ${test.why}`);
  }
}
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
