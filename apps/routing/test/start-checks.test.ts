import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

// routing writes its usage outbox for every served request: a container whose outbox directory is not
// writable (read-only root filesystem, a volume owned by root) must refuse to start with one line naming
// USAGE_OUTBOX_DIR and the path, not fail later. The built main.js, as the image runs it.
const main = fileURLToPath(new URL('../dist/main.js', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'routing-start-checks-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('routing start checks', () => {
  it('refuses to start, in one line naming USAGE_OUTBOX_DIR and the path, when the outbox directory cannot be written', () => {
    // A path below a regular file can never be created, whoever runs the test (root ignores modes).
    const file = join(scratch, 'a-file');
    writeFileSync(file, '');
    const outbox = join(file, 'usage-outbox');
    const run = spawnSync(process.execPath, [main], {
      env: {
        PATH: process.env.PATH,
        NATS_URL: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
        NATS_NAMESPACE: 'routing-start-checks',
        GATEWAY_INTERNAL_TOKEN: 'routing-start-checks-internal-token-0123456789',
        GRPC_LISTEN: '127.0.0.1:0',
        USAGE_OUTBOX_DIR: outbox,
        LOG_LEVEL: 'warn',
      },
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(run.status).toBe(1);
    expect(run.stderr.trimEnd().split('\n')).toEqual([expect.stringMatching(new RegExp(`^routing: USAGE_OUTBOX_DIR=${outbox.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is not writable \\(ENOTDIR\\): `))]);
    expect(run.stdout).not.toMatch(/"level":\s*60|fatal/);
  });
});
