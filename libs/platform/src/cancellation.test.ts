import { describe, expect, it } from 'vitest';
import { Cancellation } from './cancellation.js';

describe('Cancellation', () => {
  it('runs each listener once with the first reason; later aborts and late listeners do nothing', () => {
    const cancellation = new Cancellation();
    const calls: string[] = [];
    const removed = () => calls.push('removed');
    cancellation.addEventListener('abort', () => calls.push('a'));
    cancellation.addEventListener('abort', removed);
    cancellation.addEventListener('abort', () => calls.push('b'));
    cancellation.removeEventListener('abort', removed);
    cancellation.abort('first');
    cancellation.abort('second');
    cancellation.addEventListener('abort', () => calls.push('late'));
    expect(calls).toEqual(['a', 'b']);
    expect(cancellation.aborted).toBe(true);
    expect(cancellation.reason).toBe('first');
  });

  it('gives an AbortError reason by default, and a throwing listener does not stop the others', async () => {
    const cancellation = new Cancellation();
    const seen: unknown[] = [];
    const uncaught = new Promise<unknown>((resolve) => process.once('uncaughtException', resolve));
    cancellation.addEventListener('abort', () => {
      throw new Error('listener failed');
    });
    cancellation.addEventListener('abort', () => seen.push('after'));
    cancellation.abort();
    expect(seen).toEqual(['after']);
    expect((cancellation.reason as DOMException).name).toBe('AbortError');
    expect(((await uncaught) as Error).message).toBe('listener failed');
  });
});
