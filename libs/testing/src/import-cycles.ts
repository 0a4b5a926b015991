import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/*
 * The relative-import graph of a source folder and its cycles, for tests that keep a package free of them
 * (issue 25). Every kind of reference counts: `import`, `import type`, `export … from`, `import()`; the
 * TypeScript compiler's own pre-processor lists them, so comments and strings never fool it. Only
 * specifiers starting with `.` are followed (packages are other projects' business); `./x.js` stands for
 * `./x.ts`, a folder for its `index.ts`.
 */

function typescriptFiles(dir: string): string[] {
  const files: string[] = [];
  for (const entry of readdirSync(dir)) {
    if (entry === 'node_modules' || entry === 'dist' || entry.startsWith('.')) continue;
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) files.push(...typescriptFiles(path));
    else if (entry.endsWith('.ts') && !entry.endsWith('.d.ts')) files.push(path);
  }
  return files;
}

function resolveSpecifier(from: string, specifier: string): string | undefined {
  const base = resolve(dirname(from), specifier);
  const candidates = [base.replace(/\.(m?)js$/, '.$1ts'), base, `${base}.ts`, join(base, 'index.ts')];
  return candidates.find((candidate) => candidate.endsWith('.ts') && existsSync(candidate) && statSync(candidate).isFile());
}

/** Each file of `dir` (relative path) with the files of `dir` it references. */
export async function importGraph(dir: string): Promise<Map<string, string[]>> {
  const ts = (await import('typescript')).default;
  const root = resolve(dir);
  const graph = new Map<string, string[]>();
  for (const file of typescriptFiles(root)) {
    const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
    const targets = new Set<string>();
    for (const { fileName } of importedFiles) {
      if (!fileName.startsWith('.')) continue;
      const target = resolveSpecifier(file, fileName);
      if (target !== undefined && target.startsWith(root)) targets.add(relative(root, target));
    }
    graph.set(relative(root, file), [...targets].sort());
  }
  return graph;
}

/** Every import cycle of `dir`, each as the files around it (`a.ts → b.ts → a.ts`); [] when there is none. */
export async function importCycles(dir: string): Promise<string[]> {
  const graph = await importGraph(dir);
  const cycles = new Set<string>();
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (file: string) => {
    state.set(file, 'open');
    path.push(file);
    for (const next of graph.get(file) ?? []) {
      if (state.get(next) === 'open') {
        const loop = path.slice(path.indexOf(next));
        // One spelling per cycle whatever file the walk entered it by: start at the smallest name.
        const start = loop.indexOf([...loop].sort()[0]!);
        const rotated = [...loop.slice(start), ...loop.slice(0, start)];
        cycles.add([...rotated, rotated[0]].join(' → '));
      } else if (state.get(next) === undefined) visit(next);
    }
    path.pop();
    state.set(file, 'done');
  };
  for (const file of [...graph.keys()].sort()) if (state.get(file) === undefined) visit(file);
  return [...cycles].sort();
}
