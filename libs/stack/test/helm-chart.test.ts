import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

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
  const commandFlags = (parts: readonly string[], app: string) => {
    expect(parts[0]).toBe('node');
    expect(parts.at(-1)).toBe(`apps/${app}/dist/main.js`);
    return parts.slice(1, -1);
  };

  it('the bench starts services with the node flags the image, compose and the chart run them with', async () => {
    const { SERVICE_NODE_FLAGS, SERVICES } = await import('../src/bench/gateway-cluster.js');
    const dockerfile = readFileSync(`${root}deploy/Dockerfile`, 'utf8');
    const nodeOptions = /^ENV NODE_OPTIONS="([^"]*)"$/m.exec(dockerfile)?.[1]?.split(' ') ?? [];
    const cmd = JSON.parse(/^CMD (\[.*\])$/m.exec(dockerfile)?.[1] ?? '[]') as string[];
    const cliFlags = commandFlags(cmd, 'edge');
    expect([...nodeOptions, ...cliFlags]).toEqual([...SERVICE_NODE_FLAGS]);
    // They are on the command line because node refuses them in NODE_OPTIONS (moved there, a service
    // would not start); should a node release accept one, this fails and the flag can move.
    for (const flag of cliFlags) {
      const probe = spawnSync(process.execPath, ['-e', '0'], { env: { ...process.env, NODE_OPTIONS: flag }, encoding: 'utf8' });
      expect(probe.stderr, flag).toMatch(/not allowed in NODE_OPTIONS/);
    }

    const compose = parse(readFileSync(`${root}deploy/docker-compose.yaml`, 'utf8')) as { services: Record<string, { command?: string[] }> };
    for (const app of SERVICES) expect(commandFlags(compose.services[app]?.command ?? [], app), `compose ${app}`).toEqual(cliFlags);

    const values = parse(readFileSync(`${root}helm/gateway/values.yaml`, 'utf8')) as { nodeFlags?: string[] };
    expect(values.nodeFlags).toEqual(cliFlags);
    for (const app of SERVICES) {
      const template = readFileSync(`${root}helm/gateway/templates/${app}.yaml`, 'utf8');
      expect(template, `chart ${app}`).toContain(`command: ["node",{{ range .Values.nodeFlags }} {{ . | quote }},{{ end }} "apps/${app}/dist/main.js"]`);
    }
  });
});
