import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { importCycles } from './import-cycles.js';

const fixtures = mkdtempSync(join(tmpdir(), 'import-cycles-'));
afterAll(() => rmSync(fixtures, { recursive: true, force: true }));

function folder(name: string, files: Record<string, string>): string {
  const dir = join(fixtures, name);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

describe('import cycles', () => {
  it('libs/testing/src has none', async () => {
    expect(await importCycles(dirname(fileURLToPath(import.meta.url)))).toEqual([]);
  });

  it('finds a cycle made of type imports, re-exports and a folder index, and ignores comments and packages', async () => {
    const dir = folder('cyclic', {
      'a.ts': "import type { B } from './b.js';\nexport type A = B;\n",
      'b.ts': "export * from './inner';\nexport type B = string;\n",
      'inner/index.ts': "import { type A } from '../a.js';\nexport const c: A | undefined = undefined;\n",
      'c.ts': "// import { x } from './d.js'\nimport { z } from 'zod';\nexport const d = z;\n",
      'd.ts': "const text = \"import './c.js'\";\nexport { text };\n",
    });
    expect(await importCycles(dir)).toEqual(['a.ts → b.ts → inner/index.ts → a.ts']);
  });

  it('a chain without a way back is no cycle', async () => {
    const dir = folder('chain', { 'a.ts': "import './b.js';\n", 'b.ts': "export { c } from './c.js';\n", 'c.ts': 'export const c = 1;\n' });
    expect(await importCycles(dir)).toEqual([]);
  });
});
