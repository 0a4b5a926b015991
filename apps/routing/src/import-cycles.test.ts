import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { importCycles } from '@gateway/testing';
import { describe, expect, it } from 'vitest';

// Issue 25: routing's modules form no import cycle (every import counts, `import type` included); a
// type two modules need lives in a leaf module of its own (routing/router-options.ts).
describe('apps/routing/src', () => {
  it('has no import cycle', async () => {
    expect(await importCycles(dirname(fileURLToPath(import.meta.url)))).toEqual([]);
  });
});
