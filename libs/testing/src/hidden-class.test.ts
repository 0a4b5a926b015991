import { describe, expect, it } from 'vitest';
import { Cancellation } from '@gateway/platform';
import { sameHiddenClass } from './hidden-class.js';

describe('sameHiddenClass', () => {
  it('tells objects of one shape from objects of another', () => {
    expect(sameHiddenClass({ a: 1, b: 'x' }, { a: 2, b: 'y' })).toBe(true);
    expect(sameHiddenClass({ a: 1, b: 'x' }, { b: 'y', a: 2 })).toBe(false);
    expect(sameHiddenClass({ a: 1 }, { a: 1, c: 2 })).toBe(false);
  });

  it('platform Cancellations share one hidden class, aborted or not, with listeners or not', () => {
    const idle = new Cancellation();
    const used = new Cancellation();
    used.addEventListener('abort', () => undefined);
    used.abort(new Error('gone'));
    expect(sameHiddenClass(idle, used)).toBe(true);
  });
});
