import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// CONVENTIONS 3 made checkable: projects carry nx tags (`type:app`, `type:lib`, `type:composition`).
// An app may import only libs (never another app); a lib only libs; only the composition roots
// (apps/standalone: `npm start` and the bench; apps/clients-test, which runs real clients against it)
// may depend on apps. Libraries stay below apps: every project under libs/ is a lib, so no arrow runs
// back up from libs/ to apps/. Checked on package.json dependencies and on every import.
const root = fileURLToPath(new URL('../../../', import.meta.url));

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

const allowed = (from: Project, to: Project) => from.type === 'composition' || to.type === 'lib';

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
    expect(all.filter((project) => project.type === 'composition').map((project) => relative(root, project.dir)).sort())
      .toEqual([join('apps', 'clients-test'), join('apps', 'standalone')]);
  });

  it('declares no forbidden package dependency', () => {
    const violations = all.flatMap((project) =>
      project.dependencies.map((name) => byName.get(name)).filter((target) => target && !allowed(project, target))
        .map((target) => `${project.name} -> ${target!.name}`));
    expect(violations).toEqual([]);
  });

  it('imports nothing across a forbidden boundary', () => {
    const violations: string[] = [];
    const importPattern = /(?:from|import|require\()\s*['"]([^'"]+)['"]/g;
    for (const project of all) {
      for (const file of sourceFiles(project.dir)) {
        for (const match of readFileSync(file, 'utf8').matchAll(importPattern)) {
          const specifier = match[1]!;
          let target: Project | undefined;
          if (specifier.startsWith('.')) {
            const absolute = resolve(file, '..', specifier);
            target = all.find((candidate) => candidate !== project && (absolute + sep).startsWith(candidate.dir + sep));
          } else {
            const packageName = specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!;
            target = byName.get(packageName);
          }
          if (target && target !== project && !allowed(project, target)) violations.push(`${relative(root, file)}: ${specifier}`);
        }
      }
    }
    expect(violations).toEqual([]);
  });
});
