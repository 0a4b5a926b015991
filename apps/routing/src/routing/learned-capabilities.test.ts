import { describe, expect, it } from 'vitest';
import { MemoryKeyValueBucket, type KeyValueBucket } from '@gateway/platform';
import type { ChatRequest } from '@gateway/proto';
import { eventually, testLogger } from '@gateway/testing';
import { LEARNED_KEY, LearnedCapabilities } from './learned-capabilities.js';
import { requestSets, withoutParameters } from './learned-parameters.js';

const HOUR = 60 * 60_000;

function shared(now: () => number): { bus: { keyValue: () => Promise<KeyValueBucket> }; bucket: MemoryKeyValueBucket } {
  const bucket = new MemoryKeyValueBucket({ name: 'test', ttlMs: 24 * HOUR, maxBytes: 1 << 20, maxValueBytes: 1 << 19 }, now);
  return { bus: { keyValue: async () => bucket }, bucket };
}

function replica(bus: { keyValue: () => Promise<KeyValueBucket> } | undefined, now: () => number, extra: { maxEntries?: number; maxNamesPerEntry?: number } = {}) {
  return new LearnedCapabilities({ bus, logger: testLogger('learned'), now, watchTimeoutMs: 50, ...extra });
}

describe('LearnedCapabilities', () => {
  it('learns per provider × upstream model, shares it with another replica, forgets it after the TTL', async () => {
    let clock = 1_000_000;
    const now = () => clock;
    const { bus } = shared(now);
    const a = replica(bus, now);
    const b = replica(bus, now);
    await Promise.all([a.start(), b.start()]);
    a.learn('openai', 'o3', 'temperature');
    expect(a.droppedFor('openai', 'o3')).toEqual(['temperature']);
    // Another upstream model of the same provider, or another provider of the same model: nothing.
    expect(a.droppedFor('openai', 'gpt-4.1')).toEqual([]);
    expect(a.droppedFor('azure', 'o3')).toEqual([]);
    await eventually(() => expect(b.droppedFor('openai', 'o3')).toEqual(['temperature']), 2_000);
    // Both replicas learn another name of the same pair at once: the compare-and-set merge keeps both.
    a.learn('openai', 'o3', 'top_p');
    b.learn('openai', 'o3', 'seed');
    await eventually(() => {
      expect(a.droppedFor('openai', 'o3')).toEqual(['seed', 'temperature', 'top_p']);
      expect(b.droppedFor('openai', 'o3')).toEqual(['seed', 'temperature', 'top_p']);
    }, 2_000);
    // A replica started later reads it at its start.
    const late = replica(bus, now);
    await late.start();
    expect(late.droppedFor('openai', 'o3')).toEqual(['seed', 'temperature', 'top_p']);
    clock += 24 * HOUR + 1;
    expect(a.droppedFor('openai', 'o3')).toEqual([]);
    expect(late.entries()).toEqual([]);
    await Promise.all([a.stop(), b.stop(), late.stop()]);
  });

  it('an operator clear empties every replica', async () => {
    const now = () => 5_000;
    const { bus, bucket } = shared(now);
    const a = replica(bus, now);
    const b = replica(bus, now);
    await Promise.all([a.start(), b.start()]);
    a.learn('anthropic', 'claude-opus', 'top_p');
    await eventually(() => expect(b.droppedFor('anthropic', 'claude-opus')).toEqual(['top_p']), 2_000);
    await b.clear();
    expect(b.droppedFor('anthropic', 'claude-opus')).toEqual([]);
    await eventually(() => expect(a.droppedFor('anthropic', 'claude-opus')).toEqual([]), 2_000);
    const stored = await bucket.get(LEARNED_KEY);
    expect(JSON.parse(Buffer.from(stored!.value).toString('utf8')).entries).toEqual([]);
    await Promise.all([a.stop(), b.stop()]);
  });

  it('is bounded: pairs (oldest out first), names per pair, and only names a request can carry', () => {
    let clock = 0;
    const map = replica(undefined, () => clock, { maxEntries: 2, maxNamesPerEntry: 2 });
    map.learn('p', 'm1', 'temperature');
    clock += 1;
    map.learn('p', 'm2', 'temperature');
    clock += 1;
    map.learn('q', 'm3', 'temperature');
    expect(map.entries().map((entry) => `${entry.provider}/${entry.model}`).sort()).toEqual(['p/m2', 'q/m3']);
    map.learn('q', 'm3', 'top_p');
    map.learn('q', 'm3', 'seed');
    expect(map.droppedFor('q', 'm3')).toEqual(['temperature', 'top_p']);
    map.learn('q', 'm2', 'messages[0].role');
    map.learn('q', 'm2', '');
    expect(map.droppedFor('q', 'm2')).toEqual([]);
  });
});

function request(extra: Partial<ChatRequest>): ChatRequest {
  return { context: undefined, modelId: 'm', routingStrategy: '', endpoint: 'chat.completions', messages: [], tools: [], stop: [], includeUsage: false, timeoutMs: 0, ...extra };
}

describe('withoutParameters', () => {
  it('clears the fields a learned name stands for, and extra_body keys; leaves the rest and the original alone', () => {
    const original = request({ temperature: 0.2, topP: 0.5, stop: ['END'], reasoningEffort: 'high', thinkingBudgetTokens: 2048, extraBody: '{"seed":7,"logprobs":true}' });
    const { request: cleared, dropped } = withoutParameters(original, ['temperature', 'stop', 'reasoning_effort', 'seed', 'frequency_penalty']);
    expect(dropped).toEqual(['reasoning_effort', 'seed', 'stop', 'temperature']);
    expect(cleared.temperature).toBeUndefined();
    expect(cleared.stop).toEqual([]);
    expect(cleared.reasoningEffort).toBeUndefined();
    expect(cleared.thinkingBudgetTokens).toBeUndefined();
    expect(cleared.topP).toBe(0.5);
    expect(JSON.parse(cleared.extraBody!)).toEqual({ logprobs: true });
    expect(original.temperature).toBe(0.2);
    expect(original.extraBody).toBe('{"seed":7,"logprobs":true}');
  });

  it('returns the same request when it sets none of the names', () => {
    const plain = request({ topP: 0.5 });
    const result = withoutParameters(plain, ['temperature']);
    expect(result.request).toBe(plain);
    expect(result.dropped).toEqual([]);
    expect(requestSets(plain, 'top_p')).toBe(true);
    expect(requestSets(plain, 'seed')).toBe(false);
  });
});
