import { webcrypto } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { newIdempotencyKey } from './api.js';

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('idempotency keys for top-ups', () => {
  afterEach(() => { vi.unstubAllGlobals(); });

  it('are random UUIDs, a new one per call', () => {
    const first = newIdempotencyKey();
    expect(first).toMatch(UUID_V4);
    expect(newIdempotencyKey()).not.toBe(first);
  });

  it('take the same shape from getRandomValues where randomUUID is missing (a page not in a secure context)', () => {
    vi.stubGlobal('crypto', { getRandomValues: <T extends Uint8Array>(array: T) => webcrypto.getRandomValues(array) });
    const keys = new Set(Array.from({ length: 50 }, () => newIdempotencyKey()));
    expect(keys.size).toBe(50);
    for (const key of keys) expect(key).toMatch(UUID_V4);
  });
});
