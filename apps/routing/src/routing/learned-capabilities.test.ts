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

function replica(
  bus: { keyValue: () => Promise<KeyValueBucket> } | undefined,
  now: () => number,
  extra: { maxEntries?: number; maxNamesPerEntry?: number; quorum?: number; maxEvidencePerEntry?: number; maxEvidencePerAccount?: number } = {},
) {
  return new LearnedCapabilities({ bus, logger: testLogger('learned'), now, watchTimeoutMs: 50, ...extra });
}

/** Refusals of the name from `accounts` distinct accounts (the quorum a name needs before every account goes without it). */
function learnFrom(map: LearnedCapabilities, provider: string, model: string, name: string, accounts = 3): void {
  for (let index = 0; index < accounts; index++) map.learn(provider, model, name, `acc_${name}_${index}`);
}

describe('LearnedCapabilities', () => {
  it('learns per provider × upstream model, shares it with another replica, forgets it after the TTL', async () => {
    let clock = 1_000_000;
    const now = () => clock;
    const { bus } = shared(now);
    const a = replica(bus, now);
    const b = replica(bus, now);
    await Promise.all([a.start(), b.start()]);
    learnFrom(a, 'openai', 'o3', 'temperature');
    expect(a.droppedFor('openai', 'o3', 'anyone')).toEqual(['temperature']);
    // Another upstream model of the same provider, or another provider of the same model: nothing.
    expect(a.droppedFor('openai', 'gpt-4.1', 'anyone')).toEqual([]);
    expect(a.droppedFor('azure', 'o3', 'anyone')).toEqual([]);
    await eventually(() => expect(b.droppedFor('openai', 'o3', 'anyone')).toEqual(['temperature']), 2_000);
    // Both replicas learn another name of the same pair at once: the compare-and-set merge keeps both.
    learnFrom(a, 'openai', 'o3', 'top_p');
    learnFrom(b, 'openai', 'o3', 'seed');
    await eventually(() => {
      expect(a.droppedFor('openai', 'o3', 'anyone')).toEqual(['seed', 'temperature', 'top_p']);
      expect(b.droppedFor('openai', 'o3', 'anyone')).toEqual(['seed', 'temperature', 'top_p']);
    }, 2_000);
    // A replica started later reads it at its start.
    const late = replica(bus, now);
    await late.start();
    expect(late.droppedFor('openai', 'o3', 'anyone')).toEqual(['seed', 'temperature', 'top_p']);
    clock += 24 * HOUR + 1;
    expect(a.droppedFor('openai', 'o3', 'anyone')).toEqual([]);
    expect(late.entries()).toEqual([]);
    await Promise.all([a.stop(), b.stop(), late.stop()]);
  });

  it('an operator clear empties every replica', async () => {
    const now = () => 5_000;
    const { bus, bucket } = shared(now);
    const a = replica(bus, now);
    const b = replica(bus, now);
    await Promise.all([a.start(), b.start()]);
    learnFrom(a, 'anthropic', 'claude-opus', 'top_p');
    await eventually(() => expect(b.droppedFor('anthropic', 'claude-opus', 'x')).toEqual(['top_p']), 2_000);
    await b.clear();
    expect(b.droppedFor('anthropic', 'claude-opus', 'x')).toEqual([]);
    await eventually(() => expect(a.droppedFor('anthropic', 'claude-opus', 'x')).toEqual([]), 2_000);
    const stored = await bucket.get(LEARNED_KEY);
    expect(JSON.parse(Buffer.from(stored!.value).toString('utf8')).entries).toEqual([]);
    await Promise.all([a.stop(), b.stop()]);
  });

  it('is bounded: pairs (oldest out first), names per pair, and only names a request can carry', () => {
    let clock = 0;
    const map = replica(undefined, () => clock, { maxEntries: 2, maxNamesPerEntry: 2 });
    learnFrom(map, 'p', 'm1', 'temperature');
    clock += 1;
    learnFrom(map, 'p', 'm2', 'temperature');
    clock += 1;
    learnFrom(map, 'q', 'm3', 'temperature');
    expect(map.entries().map((entry) => `${entry.provider}/${entry.model}`).sort()).toEqual(['p/m2', 'q/m3']);
    learnFrom(map, 'q', 'm3', 'top_p');
    learnFrom(map, 'q', 'm3', 'seed');
    expect(map.droppedFor('q', 'm3', 'x')).toEqual(['temperature', 'top_p']);
    learnFrom(map, 'q', 'm2', 'messages[0].role');
    learnFrom(map, 'q', 'm2', '');
    expect(map.droppedFor('q', 'm2', 'x')).toEqual([]);
  });
});

describe('LearnedCapabilities: evidence no single account can forge (issue 35 item 2)', () => {
  it('one account\'s refusals drop the name for that account at once and for nobody else, however often it repeats them', () => {
    const map = replica(undefined, () => 1_000);
    for (let index = 0; index < 50; index++) map.learn('openai', 'o3', 'temperature', 'acc_a');
    expect(map.droppedFor('openai', 'o3', 'acc_a')).toEqual(['temperature']);
    expect(map.droppedFor('openai', 'o3', 'acc_b')).toEqual([]);
    expect(map.droppedFor('openai', 'o3', '')).toEqual([]);
    // A second account: still not enough (quorum 3); each of the two goes without it, the rest keep it.
    map.learn('openai', 'o3', 'temperature', 'acc_b');
    expect(map.droppedFor('openai', 'o3', 'acc_b')).toEqual(['temperature']);
    expect(map.droppedFor('openai', 'o3', 'acc_c')).toEqual([]);
    // A third distinct account: every account goes without it from now on.
    map.learn('openai', 'o3', 'temperature', 'acc_c');
    expect(map.droppedFor('openai', 'o3', 'acc_z')).toEqual(['temperature']);
    expect(map.entries()).toEqual([{ provider: 'openai', model: 'o3', names: ['temperature'], expiresAt: 1_000 + 24 * HOUR }]);
  });

  it('an account\'s own names join the confirmed ones for it only', () => {
    const map = replica(undefined, () => 1_000);
    learnFrom(map, 'p', 'm', 'top_p');
    map.learn('p', 'm', 'seed', 'acc_a');
    expect(map.droppedFor('p', 'm', 'acc_a')).toEqual(['seed', 'top_p']);
    expect(map.droppedFor('p', 'm', 'acc_b')).toEqual(['top_p']);
  });

  it('evidence expires with the TTL: refusals spread over more than a window never add up', () => {
    let clock = 0;
    const map = replica(undefined, () => clock);
    map.learn('p', 'm', 'temperature', 'acc_a');
    map.learn('p', 'm', 'temperature', 'acc_b');
    clock += 24 * HOUR + 1;
    expect(map.droppedFor('p', 'm', 'acc_a')).toEqual([]);
    map.learn('p', 'm', 'temperature', 'acc_c');
    expect(map.droppedFor('p', 'm', 'acc_z')).toEqual([]);
  });

  it('is bounded: evidence per pair and per account (an account\'s oldest goes first), so one account cannot crowd out others', () => {
    const map = replica(undefined, () => 1_000, { maxEvidencePerEntry: 6, maxEvidencePerAccount: 2 });
    for (let index = 0; index < 40; index++) map.learn('p', 'm', `junk_${index}`, 'acc_hostile');
    expect(map.droppedFor('p', 'm', 'acc_hostile')).toEqual(['junk_38', 'junk_39']);
    // Three honest accounts still reach the quorum for temperature.
    learnFrom(map, 'p', 'm', 'temperature');
    expect(map.droppedFor('p', 'm', 'acc_honest')).toEqual(['temperature']);
    expect(map.evidenceCount('p', 'm')).toBeLessThanOrEqual(6);
  });

  it('across replicas: one account refused on every replica is still one account; three accounts on three replicas confirm', async () => {
    const now = () => 7_000;
    const { bus, bucket } = shared(now);
    const replicas = [replica(bus, now), replica(bus, now), replica(bus, now)];
    await Promise.all(replicas.map((one) => one.start()));
    for (const one of replicas) one.learn('openai', 'o3', 'temperature', 'acc_a');
    await eventually(async () => {
      const stored = JSON.parse(Buffer.from((await bucket.get(LEARNED_KEY))!.value).toString('utf8'));
      expect(stored.entries[0].evidence).toHaveLength(1);
    }, 2_000);
    await new Promise((resolve) => setTimeout(resolve, 150));
    for (const one of replicas) {
      expect(one.droppedFor('openai', 'o3', 'acc_a')).toEqual(['temperature']);
      expect(one.droppedFor('openai', 'o3', 'acc_b')).toEqual([]);
    }
    replicas[1]!.learn('openai', 'o3', 'temperature', 'acc_b');
    replicas[2]!.learn('openai', 'o3', 'temperature', 'acc_c');
    await eventually(() => {
      for (const one of replicas) expect(one.droppedFor('openai', 'o3', 'acc_z')).toEqual(['temperature']);
    }, 2_000);
    await Promise.all(replicas.map((one) => one.stop()));
  });

  it('a bucket value that names a name with fewer accounts than the quorum confirms nothing', async () => {
    const now = () => 9_000;
    const { bus, bucket } = shared(now);
    const forged = { version: 2, entries: [{ provider: 'p', model: 'm', names: [], expiresAt: 0, evidence: [
      { name: 'temperature', account: 'acc_a', expiresAt: now() + HOUR },
      { name: 'temperature', account: 'acc_a', expiresAt: now() + HOUR },
      { name: 'temperature', account: 'acc_a', expiresAt: now() + HOUR },
    ] }] };
    await bucket.create(LEARNED_KEY, Buffer.from(JSON.stringify(forged)));
    const map = replica(bus, now);
    await map.start();
    expect(map.droppedFor('p', 'm', 'acc_b')).toEqual([]);
    expect(map.droppedFor('p', 'm', 'acc_a')).toEqual(['temperature']);
    await map.stop();
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

  it('clears a seed the request sets as a field, and one in extra_body', () => {
    const asField = withoutParameters(request({ seed: 7n, topP: 0.5 }), ['seed']);
    expect(asField.dropped).toEqual(['seed']);
    expect(asField.request.seed).toBeUndefined();
    expect(asField.request.topP).toBe(0.5);
    const inExtra = withoutParameters(request({ extraBody: '{"seed":7,"logprobs":true}' }), ['seed']);
    expect(inExtra.dropped).toEqual(['seed']);
    expect(JSON.parse(inExtra.request.extraBody!)).toEqual({ logprobs: true });
    expect(requestSets(request({ seed: 0n }), 'seed')).toBe(true);
    expect(requestSets(request({}), 'seed')).toBe(false);
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
