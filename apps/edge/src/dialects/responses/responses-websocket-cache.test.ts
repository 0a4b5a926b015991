import { describe, expect, it } from 'vitest';
import { EdgeError } from '../../errors.js';
import { ConversationBudget, ConversationCache, inputItems } from './responses-websocket-cache.js';

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

  it('one budget across every connection: its count never passes the bound, the oldest entry of any connection goes first, and an evicted id is previous_response_not_found', () => {
    const budget = new ConversationBudget(100);
    const first = new ConversationCache({ maxResponses: 8, maxChars: 80 }, budget);
    const second = new ConversationCache({ maxResponses: 8, maxChars: 80 }, budget);
    first.remember('resp_a1', [], [], 30);
    second.remember('resp_b1', [], [], 30);
    first.remember('resp_a2', [], [], 30);
    expect(budget.totalChars).toBe(90);
    // 40 more passes 100: the oldest of all (first's resp_a1) goes, not the newest connection's own.
    second.remember('resp_b2', [], [], 40);
    expect(budget.totalChars).toBe(100);
    expect([first.has('resp_a1'), second.has('resp_b1'), first.has('resp_a2'), second.has('resp_b2')]).toEqual([false, true, true, true]);
    expect(first.totalChars + second.totalChars).toBe(budget.totalChars);
    expect(() => first.continuation('resp_a1', 'more', 4)).toThrow(EdgeError);
    try {
      first.continuation('resp_a1', 'more', 4);
    } catch (error) {
      expect((error as EdgeError).apiError).toMatchObject({ status: 400, code: 'previous_response_not_found', param: 'previous_response_id' });
    }
    // Many connections filling it: never above the bound.
    const many = Array.from({ length: 20 }, () => new ConversationCache({ maxResponses: 8, maxChars: 80 }, budget));
    many.forEach((cache, index) => {
      cache.remember(`resp_m${index}`, [], [], 25);
      expect(budget.totalChars).toBeLessThanOrEqual(100);
    });
    expect(budget.totalChars).toBe(100);
    expect(many.slice(-4).every((cache, index) => cache.has(`resp_m${16 + index}`))).toBe(true);
    expect(first.totalChars + second.totalChars).toBe(0);
  });

  it('a closed connection gives its share back; an entry over the global bound alone is not kept; forget counts down both', () => {
    const budget = new ConversationBudget(50);
    const cache = new ConversationCache({ maxResponses: 8, maxChars: 1_000 }, budget);
    cache.remember('resp_1', [], [], 20);
    cache.remember('resp_2', [], [], 20);
    cache.forget('resp_1');
    expect(budget.totalChars).toBe(20);
    cache.remember('resp_big', [], [], 51);
    expect(cache.has('resp_big')).toBe(false);
    expect(budget.totalChars).toBe(20);
    // Replacing an id counts it once.
    cache.remember('resp_2', [], [], 30);
    expect(budget.totalChars).toBe(30);
    cache.clear();
    expect(budget.totalChars).toBe(0);
    expect(budget.entries).toBe(0);
  });

  it('inputItems: a string is one user message, an array itself, nothing is none', () => {
    expect(inputItems('hi')).toEqual([user('hi')]);
    expect(inputItems([user('a')])).toEqual([user('a')]);
    expect(inputItems(undefined)).toEqual([]);
  });
});
