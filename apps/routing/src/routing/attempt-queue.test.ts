import { describe, expect, it } from 'vitest';
import type { Model } from '@gateway/proto';
import type { ProviderAdapter } from '../providers/provider-adapter.js';
import type { Candidate } from '../strategies/index.js';
import { AttemptQueue } from './attempt-queue.js';

const modelA = { id: 'acme/a' } as Model;
const modelB = { id: 'acme/b' } as Model;
const candidate = (providerId: string, model?: Model): Candidate => ({
  offer: { providerId, upstreamModel: 'upstream', endpoints: ['chat.completions'] },
  adapter: {} as ProviderAdapter,
  model,
});

/** The provider ids the queue hands out, `steer` called after each take (by provider id). */
function taken(queue: AttemptQueue, steer: (providerId: string) => void = () => undefined): string[] {
  const seen: string[] = [];
  for (let next = queue.take(); next !== undefined && seen.length < 20; next = queue.take()) {
    seen.push(next.offer.providerId);
    steer(next.offer.providerId);
  }
  return seen;
}

describe('AttemptQueue: the order of a request’s attempts', () => {
  it('hands out each candidate once, in order, then nothing', () => {
    const queue = new AttemptQueue([candidate('p1'), candidate('p2'), candidate('p3')]);
    expect(taken(queue)).toEqual(['p1', 'p2', 'p3']);
    expect(queue.take()).toBeUndefined();
  });

  it('retrySame gives the candidate just taken once more, and only once', () => {
    const queue = new AttemptQueue([candidate('p1'), candidate('p2')]);
    const answers: boolean[] = [];
    expect(taken(queue, (providerId) => { if (providerId === 'p1') answers.push(queue.retrySame()); })).toEqual(['p1', 'p1', 'p2']);
    expect(answers).toEqual([true, false]);
  });

  it('each candidate may be retried once of its own', () => {
    const queue = new AttemptQueue([candidate('p1'), candidate('p2')]);
    expect(taken(queue, () => queue.retrySame())).toEqual(['p1', 'p1', 'p2', 'p2']);
  });

  it('position is the 1-based place of the candidate last taken', () => {
    const queue = new AttemptQueue([candidate('p1'), candidate('p2')]);
    queue.take();
    expect(queue.position).toBe(1);
    queue.retrySame();
    queue.take();
    expect(queue.position).toBe(1);
    queue.take();
    expect(queue.position).toBe(2);
  });

  it('skipToModel jumps past the rest of the current model to the first candidate of another', () => {
    const queue = new AttemptQueue([candidate('a1', modelA), candidate('a2', modelA), candidate('b1', modelB), candidate('b2', modelB)]);
    expect(taken(queue, (providerId) => { if (providerId === 'a1') expect(queue.skipToModel()).toBe(true); })).toEqual(['a1', 'b1', 'b2']);
  });

  it('skipToModel is false, and moves nothing, on the last model or a candidate without a model', () => {
    const last = new AttemptQueue([candidate('a1', modelA), candidate('b1', modelB), candidate('b2', modelB)]);
    expect(taken(last, (providerId) => { if (providerId === 'b1') expect(last.skipToModel()).toBe(false); })).toEqual(['a1', 'b1', 'b2']);
    const plain = new AttemptQueue([candidate('p1'), candidate('p2')]);
    expect(taken(plain, (providerId) => { if (providerId === 'p1') expect(plain.skipToModel()).toBe(false); })).toEqual(['p1', 'p2']);
  });
});
