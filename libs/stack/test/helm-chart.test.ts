import { spawnSync } from 'node:child_process';
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
