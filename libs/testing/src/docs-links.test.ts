import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// A fresh clone holds only the repository: every document a user reads links inside it, and every
// relative link names a file that exists.
const root = fileURLToPath(new URL('../../../', import.meta.url));

function markdownFiles(dir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir)) {
    if (entry === 'node_modules' || entry === 'dist' || entry.startsWith('.')) continue;
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) found.push(...markdownFiles(path));
    else if (entry.endsWith('.md')) found.push(path);
  }
  return found;
}

const documents = [join(root, 'README.md'), ...['docs', 'deploy', 'helm', 'apps', 'libs'].flatMap((dir) => markdownFiles(join(root, dir)))];

describe('documentation links', () => {
  it('finds the documents', () => {
    expect(documents.length).toBeGreaterThan(15);
  });

  it('names no path outside the repository', () => {
    const outside = documents.flatMap((file) =>
      [...readFileSync(file, 'utf8').matchAll(/(?:\]\(|`)((?:\.\.\/)+[^)`\s]*)/g)]
        .filter((match) => !(resolve(file, '..', match[1]!) + sep).startsWith(root))
        .map((match) => `${relative(root, file)}: ${match[1]}`));
    expect(outside).toEqual([]);
  });

  it('links only to files that exist', () => {
    const broken = documents.flatMap((file) =>
      [...readFileSync(file, 'utf8').matchAll(/\]\(([^)\s]+)\)/g)]
        .map((match) => match[1]!)
        .filter((target) => !/^(?:[a-z]+:|#)/i.test(target))
        .filter((target) => !existsSync(resolve(file, '..', decodeURIComponent(target.split('#')[0]!))))
        .map((target) => `${relative(root, file)}: ${target}`));
    expect(broken).toEqual([]);
  });
});
