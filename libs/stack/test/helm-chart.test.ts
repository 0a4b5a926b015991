import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// No helm binary here: helm/gateway/ci/check-chart.mjs checks the chart statically (values referenced by
// templates exist, includes defined, one Deployment + Service per server app, the catalog parses).
// Running it with the tests keeps the chart in step with the apps.
const root = fileURLToPath(new URL('../../../', import.meta.url));

describe('helm chart', () => {
  it('passes its static checks', () => {
    const result = spawnSync(process.execPath, ['helm/gateway/ci/check-chart.mjs'], { cwd: root, encoding: 'utf8' });
    expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0);
  });
});

describe('runtime flags', () => {
  it('the bench starts services with the node flags the image runs them with', async () => {
    const { SERVICE_NODE_FLAGS } = await import('../src/bench/gateway-cluster.js');
    const dockerfile = readFileSync(`${root}deploy/Dockerfile`, 'utf8');
    const declared = /^ENV NODE_OPTIONS="([^"]*)"$/m.exec(dockerfile)?.[1];
    expect(declared?.split(' ')).toEqual([...SERVICE_NODE_FLAGS]);
  });
});
