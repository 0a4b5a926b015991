import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// What a service loads when it starts is part of its memory: every module it imports statically stays in
// the heap for the life of the process. The services without tables (the edge, routing) must not reach
// pg or kysely (about 13 MB of resident memory per process, docs/performance.md): the database half of
// @gateway/platform is its own entry, `@gateway/platform/db`. Checked on the built JavaScript, which has
// exactly the imports that run (type-only imports are gone, lazy `import()` and createRequire are not
// static and not followed).
const root = fileURLToPath(new URL('../../../', import.meta.url));

/** Our workspace packages by name: their directory and their `exports` map. */
function workspacePackages(): Map<string, { dir: string; exports: Record<string, { default: string }> }> {
  const packages = new Map<string, { dir: string; exports: Record<string, { default: string }> }>();
  for (const group of ['apps', 'libs']) {
    for (const entry of readdirSync(join(root, group))) {
      const dir = join(root, group, entry);
      if (!existsSync(join(dir, 'package.json'))) continue;
      const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name: string; main?: string; exports?: Record<string, { default: string }> };
      packages.set(manifest.name, { dir, exports: manifest.exports ?? { '.': { default: manifest.main ?? './dist/index.js' } } });
    }
  }
  return packages;
}

// Static imports and re-exports of compiled ESM, statements that may span lines: `import x from 'a'`,
// `import { a, b } from 'a'`, `export * from 'a'`, `import 'a'`. Not `import('a')`.
const STATIC_IMPORT = /^\s*(?:import|export)\s[^;'"]*?from\s*['"]([^'"]+)['"]|^\s*import\s*['"]([^'"]+)['"]/gm;

/** The third-party packages the static import graph from `entry` reaches (our own files are walked). */
function packagesReached(entry: string): Set<string> {
  const packages = workspacePackages();
  const reached = new Set<string>();
  const seen = new Set<string>();
  const pending = [entry];
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    for (const match of readFileSync(file, 'utf8').matchAll(STATIC_IMPORT)) {
      const specifier = (match[1] ?? match[2])!;
      if (specifier.startsWith('node:')) continue;
      if (specifier.startsWith('.')) {
        pending.push(resolve(dirname(file), specifier));
        continue;
      }
      const parts = specifier.split('/');
      const name = specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
      const own = packages.get(name);
      if (!own) {
        reached.add(name);
        continue;
      }
      const subpath = ['.', ...parts.slice(name.split('/').length)].join('/');
      const target = own.exports[subpath]?.default;
      if (!target) throw new Error(`${file}: ${specifier} is not exported by ${name}`);
      pending.push(join(own.dir, target));
    }
  }
  return reached;
}

describe('what a service loads at start', () => {
  const main = (app: string) => {
    const path = join(root, 'apps', app, 'dist', 'main.js');
    if (!existsSync(path)) throw new Error(`${path} is missing: build the apps first (npm run build)`);
    return path;
  };

  it.each(['edge', 'routing'])('%s, which holds no database, loads neither pg nor kysely', (app) => {
    const reached = packagesReached(main(app));
    // The walk really follows the graph: both services speak gRPC through @gateway/platform.
    expect(reached).toContain('@grpc/grpc-js');
    expect([...reached].filter((name) => name === 'pg' || name === 'kysely')).toEqual([]);
  });

  it('follows @gateway/platform/db where a service uses it (the ledger reaches pg and kysely)', () => {
    const reached = packagesReached(main('ledger'));
    expect(reached).toContain('pg');
    expect(reached).toContain('kysely');
  });
});
