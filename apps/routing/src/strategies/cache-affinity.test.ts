import { ChatRequest, type ChatMessage } from '@gateway/proto';
import { describe, expect, it } from 'vitest';
import type { ProviderAdapter } from '../providers/provider-adapter.js';
import { affinityKeyOf, CacheAffinity, preferAffine, rendezvousScore } from './cache-affinity.js';
import type { Candidate } from './strategy.js';

const ephemeral = { type: 'ephemeral', ttl: '' };

function text(value: string, marked = false) {
  return { part: { $case: 'text' as const, value }, ...(marked ? { cacheControl: ephemeral } : {}) };
}

function request(messages: Partial<ChatMessage>[], extra: Partial<ChatRequest> = {}, accountId = 'acct-1'): ChatRequest {
  return ChatRequest.fromPartial({
    context: { requestId: 'r', accountId, keyId: 'k' },
    modelId: 'claude',
    messages: messages as ChatMessage[],
    ...extra,
  });
}

describe('cache affinity keys', () => {
  it('a plain request (no key, no breakpoint) has none', () => {
    expect(affinityKeyOf(request([{ role: 'user', content: [text('hello')] }]))).toBeUndefined();
  });

  it('prompt_cache_key: same account and key match whatever the prompt; another account or model does not', () => {
    const a = affinityKeyOf(request([{ role: 'user', content: [text('one')] }], { promptCacheKey: 's-1' }));
    const b = affinityKeyOf(request([{ role: 'user', content: [text('two')] }], { promptCacheKey: 's-1' }));
    expect(a).toBeDefined();
    expect(a).toBe(b);
    expect(affinityKeyOf(request([{ role: 'user', content: [text('one')] }], { promptCacheKey: 's-1' }, 'acct-2'))).not.toBe(a);
    expect(affinityKeyOf(request([{ role: 'user', content: [text('one')] }], { promptCacheKey: 's-1', modelId: 'other' }))).not.toBe(a);
    expect(affinityKeyOf(request([{ role: 'user', content: [text('one')] }], { promptCacheKey: 's-2' }))).not.toBe(a);
  });

  it('breakpoint: the content up to the last marked part decides; what follows it does not', () => {
    const system = { role: 'system', content: [text('a long system prompt', true)] };
    const first = affinityKeyOf(request([system, { role: 'user', content: [text('question 1')] }]));
    const second = affinityKeyOf(request([system, { role: 'user', content: [text('question 2')] }]));
    expect(first).toBeDefined();
    expect(first).toBe(second);
    const changed = affinityKeyOf(request([{ role: 'system', content: [text('another system prompt', true)] }, { role: 'user', content: [text('question 1')] }]));
    expect(changed).not.toBe(first);
    // A later breakpoint makes a longer prefix: a different key.
    const longer = affinityKeyOf(request([system, { role: 'user', content: [text('question 1', true)] }]));
    expect(longer).not.toBe(first);
    // Parts after the marked one in the same message do not count.
    const tail1 = affinityKeyOf(request([{ role: 'user', content: [text('doc', true), text('q1')] }]));
    const tail2 = affinityKeyOf(request([{ role: 'user', content: [text('doc', true), text('q2')] }]));
    expect(tail1).toBe(tail2);
    expect(affinityKeyOf(request([system], {}, 'acct-2'))).not.toBe(affinityKeyOf(request([system])));
  });

  it('a large file is keyed by its length and both ends; a change in either changes the key', () => {
    const pdf = Buffer.alloc(100_000, 7);
    const file = (data: Buffer) => request([{ role: 'user', content: [{ part: { $case: 'file', value: { filename: 'a.pdf', data, url: '', mediaType: 'application/pdf', context: '', fileId: '' } }, cacheControl: ephemeral }, text('q')] }]);
    const key = affinityKeyOf(file(pdf));
    expect(affinityKeyOf(file(Buffer.from(pdf)))).toBe(key);
    const head = Buffer.from(pdf); head[10] = 1;
    const tail = Buffer.from(pdf); tail[99_990] = 1;
    expect(affinityKeyOf(file(head))).not.toBe(key);
    expect(affinityKeyOf(file(tail))).not.toBe(key);
    expect(affinityKeyOf(file(Buffer.alloc(100_001, 7)))).not.toBe(key);
  });

  it('a breakpoint on a tool alone keys on the tools', () => {
    const tools = [{ name: 'weather', description: 'd', parameters: '{}', cacheControl: ephemeral }];
    const a = affinityKeyOf(request([{ role: 'user', content: [text('q1')] }], { tools }));
    const b = affinityKeyOf(request([{ role: 'user', content: [text('q2')] }], { tools }));
    expect(a).toBeDefined();
    expect(a).toBe(b);
    expect(affinityKeyOf(request([{ role: 'user', content: [text('q1')] }], { tools: [{ ...tools[0]!, description: 'other' }] }))).not.toBe(a);
  });
});

describe('CacheAffinity', () => {
  it('pins the provider that served a key and re-pins on the next success elsewhere', () => {
    const affinity = new CacheAffinity();
    expect(affinity.pinned('k')).toBeUndefined();
    affinity.served('k', 'p1');
    expect(affinity.pinned('k')).toBe('p1');
    affinity.served('k', 'p2');
    expect(affinity.pinned('k')).toBe('p2');
    expect(affinity.size).toBe(1);
  });

  it('is bounded: beyond its size the least recently used key is forgotten', () => {
    const affinity = new CacheAffinity(3);
    affinity.served('a', 'p1');
    affinity.served('b', 'p1');
    affinity.served('c', 'p1');
    expect(affinity.pinned('a')).toBe('p1'); // a is now the most recently used
    affinity.served('d', 'p2');
    expect(affinity.size).toBe(3);
    expect(affinity.pinned('b')).toBeUndefined();
    expect(affinity.pinned('a')).toBe('p1');
    expect(affinity.pinned('c')).toBe('p1');
    expect(affinity.pinned('d')).toBe('p2');
  });
});

describe('preferAffine', () => {
  const offers = (...ids: string[]): Candidate[] => ids.map((providerId) => ({ offer: { providerId, upstreamModel: 'm', endpoints: ['chat.completions'] }, adapter: {} as ProviderAdapter }));
  const ids = (ordered: Candidate[]) => ordered.map((candidate) => candidate.offer.providerId);
  const none = () => false;

  it('puts the pinned provider first, the rest in the strategy order behind it', () => {
    const affinity = new CacheAffinity();
    affinity.served('k', 'p3');
    const ordered = offers('p1', 'p2', 'p3', 'p4');
    preferAffine(ordered, 'k', affinity, none);
    expect(ids(ordered)).toEqual(['p3', 'p1', 'p2', 'p4']);
  });

  it('a pinned provider with an open circuit is passed over for the healthy one the key hashes to', () => {
    const affinity = new CacheAffinity();
    affinity.served('k', 'p1');
    const ordered = offers('p1', 'p2', 'p3');
    preferAffine(ordered, 'k', affinity, (providerId) => providerId === 'p1');
    const expected = ['p2', 'p3'].sort((a, b) => rendezvousScore('k', b) - rendezvousScore('k', a))[0]!;
    expect(ids(ordered)[0]).toBe(expected);
  });

  it('without a pin, a key is placed by rendezvous hashing: the same first provider whatever the strategy order (every replica agrees)', () => {
    for (const key of ['a', 'b', 'c', 'd', 'e', 'f']) {
      const firsts = new Set<string>();
      for (const order of [['p1', 'p2', 'p3'], ['p3', 'p1', 'p2'], ['p2', 'p3', 'p1']]) {
        const ordered = offers(...order);
        preferAffine(ordered, key, new CacheAffinity(), none);
        expect([...ids(ordered)].sort()).toEqual(['p1', 'p2', 'p3']);
        firsts.add(ids(ordered)[0]!);
      }
      expect(firsts.size).toBe(1);
    }
    const spread = new Set(Array.from({ length: 30 }, (_, index) => {
      const ordered = offers('p1', 'p2', 'p3');
      preferAffine(ordered, `key-${index}`, new CacheAffinity(), none);
      return ids(ordered)[0];
    }));
    expect(spread.size).toBe(3);
  });
});
