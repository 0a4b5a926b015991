import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const repositoryRoot = fileURLToPath(new URL('../../../', import.meta.url));

describe('the gatewayctl command', () => {
  it('runs as `npx gatewayctl` from the repository root: npm linked an executable bin that loads the built CLI', () => {
    // Executed directly, as a shell runs it (not `node <file>`): the file must be executable and carry its shebang.
    const result = spawnSync('node_modules/.bin/gatewayctl', ['ledger', 'verify', '--help'], { cwd: repositoryRoot, encoding: 'utf8' });
    expect(result.error).toBeUndefined();
    expect(result.status, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^usage: gatewayctl ledger verify/);
  });
});
