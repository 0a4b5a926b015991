import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { importCycles } from '@gateway/testing';
import { describe, expect, it } from 'vitest';

// Issue 25: the edge's modules form no import cycle (every import counts, `import type` included).
// A shared type or function lives in the module that owns it (a small leaf module when two need it),
// never behind a lazy import.
describe('apps/jobs/src', () => {
  it('has no import cycle', async () => {
    expect(await importCycles(dirname(fileURLToPath(import.meta.url)))).toEqual([]);
  });
});
