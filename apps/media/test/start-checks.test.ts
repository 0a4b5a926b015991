import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

// media converts audio in temporary files under TMPDIR (/tmp): a read-only container without a writable
// /tmp must refuse to start with one line naming TMPDIR and the path, not answer 500 to every
// transcription. The built main.js, as the image runs it.
const main = fileURLToPath(new URL('../dist/main.js', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'media-start-checks-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const env = (tmp: string) => ({
  PATH: process.env.PATH,
  TMPDIR: tmp,
  // Never reached: the check comes before the database.
  DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none',
  GATEWAY_INTERNAL_TOKEN: 'media-start-checks-internal-token-0123456789',
  GRPC_LISTEN: '127.0.0.1:0',
  LOG_LEVEL: 'warn',
});

describe('media start checks', () => {
  it('refuses to start, in one line naming TMPDIR and the path, when the temporary directory cannot be written', () => {
    // A path below a regular file can never be created, whoever runs the test (root ignores modes).
    const file = join(scratch, 'a-file');
    writeFileSync(file, '');
    const tmp = join(file, 'tmp');
    const run = spawnSync(process.execPath, [main], { env: env(tmp), encoding: 'utf8', timeout: 20_000 });
    expect(run.status).toBe(1);
    expect(run.stderr.trimEnd().split('\n')).toEqual([expect.stringMatching(new RegExp(`^media: TMPDIR=${tmp.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is not writable \\(ENOTDIR\\): `))]);
    expect(run.stdout).not.toMatch(/fatal/);
  });

  it('passes the check with a writable directory and leaves no probe file in it', () => {
    const tmp = join(scratch, 'writable');
    // The database is unreachable, so media stops after the check, with the database's error, not TMPDIR's.
    const run = spawnSync(process.execPath, [main], { env: env(tmp), encoding: 'utf8', timeout: 20_000 });
    expect(run.status).toBe(1);
    expect(`${run.stdout}${run.stderr}`).not.toMatch(/TMPDIR/);
    expect(`${run.stdout}${run.stderr}`).toMatch(/ECONNREFUSED|connect/);
    expect(readdirSync(tmp)).toEqual([]);
  });
});
