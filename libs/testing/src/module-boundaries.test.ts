import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// CONVENTIONS 3 made checkable: projects carry nx tags (`type:app`, `type:lib`, `type:composition`).
// An app may import only libs (never another app); a lib only libs. Exactly one file wires the apps
// together: the composition root apps/standalone/src/stack.ts (`npm start` runs it through main.ts,
// which imports only stack.ts). The rest of apps/standalone obeys the app rule too, its tests and
// fixtures included: they start services through stack.ts's exported API, run the services as processes
// (`node apps/<name>/dist/main.js`) and gatewayctl as its CLI, or use libs (docs/architecture.md
// "Ground rules"). Libraries stay below apps: every project under libs/ is a lib, so no arrow runs back
// up from libs/ to apps/. Checked on package.json dependencies and on every import, static or dynamic.
const root = fileURLToPath(new URL('../../../', import.meta.url));

/** The one source file that may import apps. */
const COMPOSITION_ROOT = join('apps', 'standalone', 'src', 'stack.ts');

interface Project { name: string; dir: string; type: string; dependencies: string[] }

function projects(): Project[] {
  const found: Project[] = [];
  for (const group of ['apps', 'libs']) {
    for (const entry of readdirSync(join(root, group))) {
      const dir = join(root, group, entry);
      let manifest: { name: string; nx?: { tags?: string[] }; dependencies?: Record<string, string>; devDependencies?: Record<string, string> };
      try { manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')); } catch { continue; }
      const type = manifest.nx?.tags?.find((tag) => tag.startsWith('type:'))?.slice('type:'.length) ?? 'untagged';
      found.push({ name: manifest.name, dir, type, dependencies: [...Object.keys(manifest.dependencies ?? {}), ...Object.keys(manifest.devDependencies ?? {})] });
    }
  }
  return found;
}

function sourceFiles(dir: string): string[] {
  const files: string[] = [];
  for (const entry of readdirSync(dir)) {
    if (entry === 'node_modules' || entry === 'dist' || entry.startsWith('.') || entry === 'gen') continue;
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) files.push(...sourceFiles(path));
    else if (/\.(ts|mts|js|mjs)$/.test(entry)) files.push(path);
  }
  return files;
}

/** A package.json dependency: the composition project lists every app it wires (and builds after them). */
const allowed = (from: Project, to: Project) => from.type === 'composition' || to.type === 'lib';

/** Whether `file` (relative to the root) may import from `to`: libs always; apps only in the composition root. */
const importAllowed = (file: string, from: Project, to: Project) =>
  to.type === 'lib' || (from.type === 'composition' && file === COMPOSITION_ROOT);

const importPattern = /(?:\bfrom|\bimport|\brequire)\s*\(?\s*['"]([^'"]+)['"]/g;

/** The imports of `text` (the source of `file`, inside `project`) that cross a forbidden boundary. */
function forbiddenImports(all: readonly Project[], project: Project, file: string, text: string): string[] {
  return importsOf(all, project, file, text).filter(({ target }) => !importAllowed(relative(root, file), project, target))
    .map(({ specifier }) => `${relative(root, file)}: ${specifier}`);
}

/** The imports of `text` that reach an app other than `project` (allowed or not). */
function appImports(all: readonly Project[], project: Project, file: string, text: string): string[] {
  return importsOf(all, project, file, text).filter(({ target }) => target.type !== 'lib').map(({ specifier }) => specifier);
}

/** Every import of `text` that reaches another project, with that project. */
function importsOf(all: readonly Project[], project: Project, file: string, text: string): { specifier: string; target: Project }[] {
  const byName = new Map(all.map((candidate) => [candidate.name, candidate]));
  const found: { specifier: string; target: Project }[] = [];
  for (const match of text.matchAll(importPattern)) {
    const specifier = match[1]!;
    let target: Project | undefined;
    if (specifier.startsWith('.')) {
      const absolute = resolve(file, '..', specifier);
      target = all.find((candidate) => candidate !== project && (absolute + sep).startsWith(candidate.dir + sep));
    } else {
      const packageName = specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!;
      target = byName.get(packageName);
    }
    if (target && target !== project) found.push({ specifier, target });
  }
  return found;
}

describe('module boundaries', () => {
  const all = projects();
  const byName = new Map(all.map((project) => [project.name, project]));

  it('tags every project with a type', () => {
    expect(all.length).toBeGreaterThanOrEqual(10);
    expect(all.filter((project) => !['app', 'lib', 'composition'].includes(project.type)).map((project) => project.name)).toEqual([]);
  });

  it('keeps libraries below apps: everything under libs/ is a lib, composition roots live in apps/', () => {
    const misplaced = all.filter((project) => relative(root, project.dir).startsWith(`libs${sep}`) !== (project.type === 'lib'))
      .map((project) => `${relative(root, project.dir)} (${project.type})`);
    expect(misplaced).toEqual([]);
    expect(all.filter((project) => project.type === 'composition').map((project) => relative(root, project.dir)))
      .toEqual([join('apps', 'standalone')]);
  });

  it('declares no forbidden package dependency', () => {
    const violations = all.flatMap((project) =>
      project.dependencies.map((name) => byName.get(name)).filter((target) => target && !allowed(project, target))
        .map((target) => `${project.name} -> ${target!.name}`));
    expect(violations).toEqual([]);
  });

  it('imports nothing across a forbidden boundary', () => {
    const violations: string[] = [];
    for (const project of all) {
      for (const file of sourceFiles(project.dir)) violations.push(...forbiddenImports(all, project, file, readFileSync(file, 'utf8')));
    }
    expect(violations).toEqual([]);
  });

  it('has exactly one file importing apps: the composition root', () => {
    const importers: string[] = [];
    for (const project of all) {
      for (const file of sourceFiles(project.dir)) {
        if (appImports(all, project, file, readFileSync(file, 'utf8')).length > 0) importers.push(relative(root, file));
      }
    }
    expect(importers).toEqual([COMPOSITION_ROOT]);
  });

  it('would report an app importing another app, anywhere but the composition root', () => {
    const project = (name: string) => all.find((candidate) => candidate.name === name)!;
    const standalone = project('@gateway/standalone');
    const at = (...path: string[]) => join(root, ...path);
    // Samples are written with FROM / IMPORT( so this file's own scan does not read them as imports.
    const code = (text: string) => text.replaceAll('FROM', 'from').replaceAll('IMPORT(', 'import(');
    const ledger = code("import { startLedgerService } FROM '@gateway/ledger';");
    // In the composition project: its bench, its entry point, a test inside src, a dynamic import.
    expect(forbiddenImports(all, standalone, at('apps', 'standalone', 'src', 'bench', 'ledger-bench.ts'), ledger)).toHaveLength(1);
    expect(forbiddenImports(all, standalone, at('apps', 'standalone', 'src', 'main.ts'), ledger)).toHaveLength(1);
    expect(forbiddenImports(all, standalone, at('apps', 'standalone', 'src', 'bench', 'bench.test.ts'), code("import { validateCatalogText } FROM '@gateway/catalog';"))).toHaveLength(1);
    expect(forbiddenImports(all, standalone, at('apps', 'standalone', 'src', 'bench', 'main.ts'), code("const { runGatewayctl } = await IMPORT('@gateway/gatewayctl');"))).toHaveLength(1);
    // By relative path into another app's folder.
    expect(forbiddenImports(all, standalone, at('apps', 'standalone', 'src', 'bench', 'peers.ts'), code("import { x } FROM '../../../ledger/src/index.js';"))).toHaveLength(1);
    // From other apps, including one importing the composition root.
    expect(forbiddenImports(all, project('@gateway/clients-test'), at('apps', 'clients-test', 'src', 'client-stack.ts'), code("import { startStack } FROM '@gateway/standalone';"))).toHaveLength(1);
    expect(forbiddenImports(all, project('@gateway/routing'), at('apps', 'routing', 'src', 'x.ts'), code("export { SETTLER_DURABLE } FROM '@gateway/ledger';"))).toHaveLength(1);
    // The composition project's tests, their harnesses and fixtures: a type import, a script, a relative path.
    expect(forbiddenImports(all, standalone, at('apps', 'standalone', 'test', 'usage.e2e.test.ts'), ledger)).toHaveLength(1);
    expect(forbiddenImports(all, standalone, at('apps', 'standalone', 'test', 'stack-harness.ts'), code("import type { RunningEdge } FROM '@gateway/edge';"))).toHaveLength(1);
    expect(forbiddenImports(all, standalone, at('apps', 'standalone', 'test', 'fixtures', 'publisher.mjs'), code("import { createUsagePublisher } FROM '@gateway/routing';"))).toHaveLength(1);
    expect(forbiddenImports(all, standalone, at('apps', 'standalone', 'test', 'invariant-fuzz', 'fuzz-stack.ts'), code("import { generateKey } FROM '../../../auth/src/key-format.js';"))).toHaveLength(1);
    // Allowed: the composition root wiring apps, anyone importing a lib or the composition root's own files, a file its own app.
    expect(forbiddenImports(all, standalone, at('apps', 'standalone', 'src', 'stack.ts'), ledger)).toEqual([]);
    expect(forbiddenImports(all, standalone, at('apps', 'standalone', 'test', 'usage.e2e.test.ts'),
      code("import { startStack } FROM '../src/index.js';\nimport { createClient } FROM '@gateway/platform';"))).toEqual([]);
    expect(forbiddenImports(all, project('@gateway/ledger'), at('apps', 'ledger', 'src', 'bench', 'settle-process.ts'),
      code("import { startLedgerService } FROM '../index.js';\nimport { SETTLER_DURABLE } FROM '@gateway/platform';"))).toEqual([]);
  });
});
