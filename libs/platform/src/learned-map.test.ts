import { describe, expect, it } from 'vitest';
import { decodeLearnedMap, encodeLearnedMap, LEARNED_BUCKET, learnedBucketOptions, type LearnedMapEntry } from './learned-map.js';

const entry: LearnedMapEntry = {
  provider: 'oa', model: 'gpt-x', names: ['temperature'], expiresAt: 2_000,
  evidence: [{ name: 'top_p', account: 'acc_1', expiresAt: 1_500 }, { name: 'seed', account: 'acc_2', expiresAt: 1_600 }],
};
const bytes = (value: unknown) => Buffer.from(JSON.stringify(value), 'utf8');

describe('learned capability map value (version 2)', () => {
  it('round-trips, evidence as [name, account, expiresAt] triples', () => {
    const encoded = encodeLearnedMap([entry]);
    expect(JSON.parse(Buffer.from(encoded).toString('utf8'))).toEqual({
      version: 2,
      entries: [{ provider: 'oa', model: 'gpt-x', names: ['temperature'], expiresAt: 2_000, evidence: [['top_p', 'acc_1', 1_500], ['seed', 'acc_2', 1_600]] }],
    });
    expect(decodeLearnedMap(encoded)).toEqual([entry]);
  });

  it('leaves out evidence whose name the reader refuses, and reads object-shaped records too', () => {
    const value = bytes({ version: 2, entries: [{ provider: 'oa', model: 'm', names: [], expiresAt: 0, evidence: [['bad name', 'acc_1', 9], { name: 'top_k', account: 'acc_3', expiresAt: 9 }] }] });
    expect(decodeLearnedMap(value, (name) => /^\w+$/.test(name))[0]!.evidence).toEqual([{ name: 'top_k', account: 'acc_3', expiresAt: 9 }]);
  });

  it('reads nothing from a missing, empty, malformed or version-1 value, and skips malformed entries', () => {
    expect(decodeLearnedMap(undefined)).toEqual([]);
    expect(decodeLearnedMap(new Uint8Array())).toEqual([]);
    expect(decodeLearnedMap(Buffer.from('{not json', 'utf8'))).toEqual([]);
    expect(decodeLearnedMap(bytes({ version: 1, entries: [{ provider: 'oa', model: 'm', names: ['temperature'], expiresAt: 9 }] }))).toEqual([]);
    const mixed = bytes({ version: 2, entries: [{ provider: 'oa', model: 'm', names: [1], expiresAt: 9 }, { provider: 'oa', model: 'n', names: ['seed'], expiresAt: 9 }] });
    expect(decodeLearnedMap(mixed).map((each) => each.model)).toEqual(['n']);
  });

  it('opens one bucket with the limits every process uses', () => {
    expect(learnedBucketOptions()).toEqual({ name: LEARNED_BUCKET, ttlMs: 86_400_000, maxBytes: 16 * 1024 * 1024, maxValueBytes: 768 * 1024 });
    expect(learnedBucketOptions(1_000).ttlMs).toBe(1_000);
  });
});
