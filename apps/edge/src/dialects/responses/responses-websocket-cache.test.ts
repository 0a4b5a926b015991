import { describe, expect, it } from 'vitest';
import { EdgeError } from '../../errors.js';
import { ConversationCache, inputItems } from './responses-websocket-cache.js';

const user = (text: string) => ({ type: 'message', role: 'user', content: text });
const answer = (text: string) => ({ type: 'message', role: 'assistant', content: [{ type: 'output_text', text }] });

describe('ConversationCache (a responses WebSocket connection memory)', () => {
  it('a continuation is the remembered conversation (inputs, then outputs) followed by the new input', () => {
    const cache = new ConversationCache({ maxResponses: 4, maxChars: 10_000 });
    cache.remember('resp_1', [user('hi')], [answer('hello')], 30);
    const next = cache.continuation('resp_1', 'and then?', 20);
    expect(next.items).toEqual([user('hi'), answer('hello'), user('and then?')]);
    expect(next.chars).toBe(50);
    cache.remember('resp_2', next.items, [answer('then this')], next.chars + 10);
    expect(cache.continuation('resp_2', [user('more')], 5).items).toEqual([user('hi'), answer('hello'), user('and then?'), answer('then this'), user('more')]);
  });

  it('an unknown id is previous_response_not_found (400, param previous_response_id)', () => {
    const cache = new ConversationCache({ maxResponses: 4, maxChars: 10_000 });
    const thrown = (() => {
      try {
        cache.continuation('resp_missing', 'x', 1);
      } catch (error) {
        return error;
      }
      return undefined;
    })();
    expect(thrown).toBeInstanceOf(EdgeError);
    expect((thrown as EdgeError).apiError).toMatchObject({ status: 400, code: 'previous_response_not_found', param: 'previous_response_id' });
  });

  it('holds at most maxResponses responses, the oldest dropped first', () => {
    const cache = new ConversationCache({ maxResponses: 2, maxChars: 10_000 });
    cache.remember('resp_1', [], [answer('1')], 10);
    cache.remember('resp_2', [], [answer('2')], 10);
    cache.remember('resp_3', [], [answer('3')], 10);
    expect(cache.size).toBe(2);
    expect(cache.has('resp_1')).toBe(false);
    expect(cache.has('resp_2') && cache.has('resp_3')).toBe(true);
    expect(cache.totalChars).toBe(20);
  });

  it('holds at most maxChars characters: older entries go, and an entry over the bound alone is not kept', () => {
    const cache = new ConversationCache({ maxResponses: 10, maxChars: 100 });
    cache.remember('resp_1', [], [], 40);
    cache.remember('resp_2', [], [], 40);
    cache.remember('resp_3', [], [], 40);
    expect([cache.has('resp_1'), cache.has('resp_2'), cache.has('resp_3')]).toEqual([false, true, true]);
    expect(cache.totalChars).toBe(80);
    cache.remember('resp_big', [], [], 101);
    expect(cache.has('resp_big')).toBe(false);
    expect(cache.totalChars).toBe(80);
  });

  it('forget drops one response (a failed continuation evicts what it continued)', () => {
    const cache = new ConversationCache({ maxResponses: 4, maxChars: 1_000 });
    cache.remember('resp_1', [], [], 10);
    cache.forget('resp_1');
    cache.forget('resp_unknown');
    expect(cache.size).toBe(0);
    expect(cache.totalChars).toBe(0);
  });

  it('inputItems: a string is one user message, an array itself, nothing is none', () => {
    expect(inputItems('hi')).toEqual([user('hi')]);
    expect(inputItems([user('a')])).toEqual([user('a')]);
    expect(inputItems(undefined)).toEqual([]);
  });
});
