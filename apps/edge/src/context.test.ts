import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

// context.ts is the shape every route receives and nothing else: logic that reads the context lives with
// its subject (credentials in inference/, the key cache in inference/auth-cache.ts), so the file every
// route imports pulls in no module at run time.
describe('context.ts', () => {
  const source = readFileSync(new URL('./context.ts', import.meta.url), 'utf8');

  it('imports only types', () => {
    const imports = source.match(/^import\b[^;]*;/gms) ?? [];
    expect(imports.length).toBeGreaterThan(0);
    expect(imports.filter((statement) => !statement.startsWith('import type '))).toEqual([]);
  });

  it('declares only types', () => {
    const declarations = source.match(/^export\s+(?:declare\s+)?(\w+)/gm) ?? [];
    expect(declarations.length).toBeGreaterThan(0);
    expect(declarations.filter((declaration) => !/\b(interface|type)$/.test(declaration))).toEqual([]);
    expect(source).not.toMatch(/^(?:export\s+)?(?:async\s+)?(?:function|const|let|class)\b/m);
  });
});
