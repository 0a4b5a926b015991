import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { root } from './helm-chart-support.js';

// Whether some release of Node `major` (its latest, as a node:<major> image pulls) satisfies an npm
// engines range; covers the comparator forms the lockfile holds (>=, >, <, <=, ^, ~, bare, x and *).
function acceptsNodeMajor(range: string, major: number): boolean {
  const version = [major, 999, 999];
  const parse = (text: string) => text.split('.').map((part) => (/^\d+$/.test(part) ? Number(part) : undefined));
  const compare = (bound: (number | undefined)[]) => {
    for (let index = 0; index < 3; index++) {
      const part = bound[index];
      if (part === undefined) return 0;
      if (version[index] !== part) return version[index]! - part;
    }
    return 0;
  };
  return range.split('||').some((clause) =>
    clause
      .trim()
      .replace(/([<>=^~]+)\s+/g, '$1')
      .split(/\s+/)
      .filter(Boolean)
      .every((comparator) => {
        const [, operator = '', text = ''] = /^([<>=^~]*)v?(.*)$/.exec(comparator)!;
        const bound = parse(text);
        if (operator === '>=') return compare(bound) >= 0;
        if (operator === '>') return compare(bound) > 0;
        if (operator === '<=') return compare(bound) <= 0;
        if (operator === '<') return compare(bound) < 0;
        if (operator === '^' || operator === '~' || operator === '' || operator === '=') return bound[0] === undefined || bound[0] === major;
        throw new Error(`unknown engines comparator ${comparator}`);
      }),
  );
}

describe('image build', () => {
  const dockerfile = readFileSync(`${root}deploy/Dockerfile`, 'utf8');
  const runs = [...dockerfile.matchAll(/^RUN ((?:.*\\\n)*.*)$/gm)].map((match) => match[1]!.replace(/\\\n\s*/g, ' '));

  it('installs with `npm ci` and builds with `npm run build`, as .ci/run and deploy/README.md do', () => {
    const ci = readFileSync(`${root}.ci/run`, 'utf8');
    const ciInstall = /^npm (ci|install)\b.*$/m.exec(ci)?.[0];
    expect(ciInstall).toMatch(/^npm ci\b/);
    const installs = runs.flatMap((run) => [...run.matchAll(/\bnpm (ci|install|i)\b/g)].map((match) => match[0]));
    expect(installs.length).toBeGreaterThanOrEqual(2);
    expect(new Set(installs)).toEqual(new Set(['npm ci']));
    expect(runs.some((run) => /\bnpm run build\b/.test(run))).toBe(true);
    expect(readFileSync(`${root}deploy/README.md`, 'utf8')).toContain('npm ci && npm run build');
    // The README's two set-up commands install the same way.
    const setup = readFileSync(`${root}README.md`, 'utf8').split('## Set-up')[1]!.split('```')[1]!;
    const setupCommands = setup.split('\n').filter((line) => line.startsWith('npm '));
    expect(setupCommands).toHaveLength(2);
    for (const command of setupCommands) expect(command).toMatch(/^npm ci && npm (start|test)\b/);
  });

  it('runs no install script but those of packages package.json allows, and ships each image\'s SBOM', () => {
    const installs = runs.flatMap((run) => [...run.matchAll(/\bnpm ci\b[^&;]*/g)].map((match) => match[0]));
    expect(installs.length).toBeGreaterThanOrEqual(2);
    expect(installs.filter((install) => !install.includes('--ignore-scripts'))).toEqual([]);
    const allowed = Object.keys((JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { allowScripts: Record<string, boolean> }).allowScripts);
    const rebuilt = runs.flatMap((run) => [...run.matchAll(/\bnpm rebuild ([^&;]*)/g)].flatMap((match) => match[1]!.trim().split(/\s+/)));
    expect(rebuilt.length).toBeGreaterThan(0);
    expect(rebuilt.filter((name) => !allowed.includes(name))).toEqual([]);
    // deploy/sbom.mjs writes the SBOM in the runtime stage (deploy/ci/images.sh checks its contents per image).
    expect(runs.some((run) => /node deploy\/sbom\.mjs "\$\{APP\}" > \/app\/sbom\.cdx\.json/.test(run))).toBe(true);
  });

  it('runs on a Node major that package.json and every installed dependency accept', () => {
    const image = /^ARG NODE_IMAGE=node:(\d+)[-\w.]*$/m.exec(dockerfile);
    expect(image).not.toBeNull();
    const major = Number(image![1]);
    expect(dockerfile.match(/^FROM (\S+)/gm)?.every((line) => line.startsWith('FROM ${NODE_IMAGE}'))).toBe(true);
    const manifest = JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { engines: { node: string } };
    expect(acceptsNodeMajor(manifest.engines.node, major), manifest.engines.node).toBe(true);
    const lock = JSON.parse(readFileSync(`${root}package-lock.json`, 'utf8')) as {
      packages: Record<string, { engines?: { node?: string } | string[]; optional?: boolean }>;
    };
    const refusing = Object.entries(lock.packages)
      .filter(([, entry]) => !entry.optional && !Array.isArray(entry.engines) && entry.engines?.node)
      .filter(([, entry]) => !acceptsNodeMajor((entry.engines as { node: string }).node, major))
      .map(([path, entry]) => `${path} ${(entry.engines as { node: string }).node}`);
    expect(refusing).toEqual([]);
    // The range check itself tells lines apart (Node 20 is refused by @nats-io/nuid's ">= 22.x").
    expect(acceptsNodeMajor('>= 22.x', 20)).toBe(false);
    expect(acceptsNodeMajor('^20.0.0 || ^22.0.0 || >=24.0.0', 23)).toBe(false);
    expect(acceptsNodeMajor('^20.19.0 || >=22.12.0', 22)).toBe(true);
  });

  it('can make every app the default process, and runs it as a user other than root', () => {
    const apps = readdirSync(`${root}apps`, { withFileTypes: true }).filter((entry) => entry.isDirectory()).map((entry) => entry.name);
    expect(apps.length).toBeGreaterThan(5);
    expect(dockerfile).toMatch(/^ARG APP=\w+$/m);
    // The build copies every app's dist into the image, so each APP value finds its main.js.
    expect(runs.some((run) => run.includes('for project in apps/*'))).toBe(true);
    for (const app of apps) expect(JSON.parse(readFileSync(`${root}apps/${app}/package.json`, 'utf8')).scripts?.build, app).toBeTruthy();
    const users = [...dockerfile.matchAll(/^USER (\S+)$/gm)].map((match) => match[1]);
    expect(users.length).toBeGreaterThan(0);
    expect(users.at(-1)).not.toMatch(/^(root|0)(:|$)/);
    // USER comes after the last RUN of the runtime stage and before its CMD.
    const runtime = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
    expect(runtime.lastIndexOf('\nUSER ')).toBeGreaterThan(runtime.lastIndexOf('\nRUN '));
  });
});
