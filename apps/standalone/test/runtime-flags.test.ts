import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { npmStartScript } from '@gateway/testing';
import { root } from './helm-chart-support.js';

// The node flags every service runs with: the image, compose, the chart's values and templates, the bench and `npm start`.
describe('runtime flags', () => {
  const commandFlags = (parts: readonly string[], app: string) => {
    expect(parts[0]).toBe('node');
    expect(parts.at(-1)).toBe(`apps/${app}/dist/main.js`);
    return parts.slice(1, -1);
  };

  it('the bench starts services with the node flags the image, compose and the chart run them with', async () => {
    const { SERVICE_NODE_FLAGS, SERVICES, serviceNodeFlags } = await import('../src/bench/gateway-cluster.js');
    const dockerfile = readFileSync(`${root}deploy/Dockerfile`, 'utf8');
    const nodeOptions = /^ENV NODE_OPTIONS="([^"]*)"$/m.exec(dockerfile)?.[1]?.split(' ') ?? [];
    const cmd = JSON.parse(/^CMD (\[.*\])$/m.exec(dockerfile)?.[1] ?? '[]') as string[];
    // The image's CMD runs main.js, a link to the app its APP build arg names (edge by default).
    expect(/^ARG APP=(\S+)$/m.exec(dockerfile)?.[1]).toBe('edge');
    expect(dockerfile).toContain('ln -s "apps/${APP}/dist/main.js" main.js');
    const cliFlags = commandFlags([...cmd.slice(0, -1), cmd.at(-1) === 'main.js' ? 'apps/edge/dist/main.js' : String(cmd.at(-1))], 'edge');
    expect([...nodeOptions, ...cliFlags]).toEqual([...SERVICE_NODE_FLAGS]);
    // They are on the command line because node refuses them in NODE_OPTIONS (moved there, a service
    // would not start); should a node release accept one, this fails and the flag can move.
    for (const flag of cliFlags) {
      const probe = spawnSync(process.execPath, ['-e', '0'], { env: { ...process.env, NODE_OPTIONS: flag }, encoding: 'utf8' });
      expect(probe.stderr, flag).toMatch(/not allowed in NODE_OPTIONS/);
    }

    // Each service: the image's NODE_OPTIONS, the common command-line flags, then its own (a later flag wins).
    const compose = parse(readFileSync(`${root}deploy/docker-compose.yaml`, 'utf8')) as { services: Record<string, { command?: string[] }> };
    const values = parse(readFileSync(`${root}helm/gateway/values.yaml`, 'utf8')) as Record<string, { nodeFlags?: string[] }> & { nodeFlags?: string[] };
    expect(values.nodeFlags).toEqual(cliFlags);
    for (const app of SERVICES) {
      expect([...nodeOptions, ...commandFlags(compose.services[app]?.command ?? [], app)], `compose ${app}`).toEqual([...serviceNodeFlags(app)]);
      expect([...nodeOptions, ...cliFlags, ...(values[app]?.nodeFlags ?? [])], `chart values ${app}`).toEqual([...serviceNodeFlags(app)]);
      const template = readFileSync(`${root}helm/gateway/templates/${app}.yaml`, 'utf8');
      expect(template, `chart ${app}`).toContain(
        `command: ["node",{{ range .Values.nodeFlags }} {{ . | quote }},{{ end }}{{ range .Values.${app}.nodeFlags }} {{ . | quote }},{{ end }} "apps/${app}/dist/main.js"]`,
      );
    }
    // Every service but the edge runs with the small young generation; the edge with its own flags.
    expect(serviceNodeFlags('edge')).toEqual([...SERVICE_NODE_FLAGS, '--max-semi-space-size=16', '--heap-growing-percent=50']);
    expect(SERVICES.filter((app) => serviceNodeFlags(app).at(-1) === '--max-semi-space-size=8')).toEqual(SERVICES.filter((app) => app !== 'edge'));
  });

  it('node starts with the flags of every service and of `npm start` (a flag it does not know would stop the process)', async () => {
    const { SERVICES, serviceNodeFlags } = await import('../src/bench/gateway-cluster.js');
    const { NPM_START_NODE_FLAGS } = await import('../src/bench/peers.js');
    for (const [app, flags] of [...SERVICES.map((app) => [app, serviceNodeFlags(app)] as const), ['npm start', NPM_START_NODE_FLAGS] as const]) {
      const run = spawnSync(process.execPath, [...flags, '-e', 'process.stdout.write("up")'], { encoding: 'utf8' });
      expect({ app, status: run.status, stdout: run.stdout, stderr: run.stderr }).toEqual({ app, status: 0, stdout: 'up', stderr: '' });
    }
  });

  it('the bench and the tests run `npm start` with the node flags and environment of package.json\'s start script, the image\'s', async () => {
    const { NPM_START_NODE_FLAGS, NPM_START_ENV } = await import('../src/bench/peers.js');
    const { serviceNodeFlags } = await import('../src/bench/gateway-cluster.js');
    const script = (JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { scripts: { start: string } }).scripts.start;
    // Its environment first, then node through scripts/node-major.sh (package.json's Node major).
    const parsed = npmStartScript();
    expect(script).toBe(`${Object.entries(parsed.env).map(([name, value]) => `${name}=${value} `).join('')}sh scripts/node-major.sh node ${parsed.nodeFlags.join(' ')} apps/standalone/dist/main.js`);
    expect(parsed.entry).toBe('apps/standalone/dist/main.js');
    expect(parsed.nodeFlags).toEqual([...NPM_START_NODE_FLAGS]);
    expect(parsed.env).toEqual({ ...NPM_START_ENV });
    // The image's settings: its malloc threshold, and the edge's flags (the one process holds the edge) with the
    // NODE_OPTIONS semi-space left out, since the later --max-semi-space-size wins over it.
    const dockerfile = readFileSync(`${root}deploy/Dockerfile`, 'utf8');
    expect(parsed.env.MALLOC_MMAP_THRESHOLD_).toBe(/^ENV MALLOC_MMAP_THRESHOLD_=(\d+)$/m.exec(dockerfile)?.[1]);
    const nodeOptions = /^ENV NODE_OPTIONS="([^"]*)"$/m.exec(dockerfile)?.[1]?.split(' ') ?? [];
    expect(serviceNodeFlags('edge').slice(nodeOptions.length)).toEqual([...NPM_START_NODE_FLAGS]);
    expect(NPM_START_NODE_FLAGS.at(-2)).toMatch(/^--max-semi-space-size=/);
  });

  it('a later --max-semi-space-size on the command line wins over the one in NODE_OPTIONS', () => {
    // The chart relies on it: the image sets 32 MiB in NODE_OPTIONS, the services but the edge 8 on the command line.
    const probe = (args: string[]) => {
      // Allocates enough that survives a scavenge for V8 to grow the young generation to what it may.
      // (stdout.write, not console.log: with FORCE_COLOR set, as under nx, console.log colours numbers.)
      const script = "const v8=require('v8');let keep=[];let max=0;for(let i=0;i<3e6;i++){keep.push({a:i,b:'x'+i});if(keep.length>2000)keep=[];if(i%10000===0)max=Math.max(max,v8.getHeapSpaceStatistics().find((s)=>s.space_name==='new_space').space_size)}process.stdout.write(String(max))";
      const run = spawnSync(process.execPath, [...args, '-e', script], { env: { ...process.env, NODE_OPTIONS: '--max-semi-space-size=32' }, encoding: 'utf8' });
      return Number(run.stdout.trim()) / 1024 / 1024;
    };
    const small = probe(['--max-semi-space-size=8']);
    expect(small).toBeGreaterThan(0);
    expect(small).toBeLessThanOrEqual(16);
    expect(probe([])).toBeGreaterThan(16);
  });
});
