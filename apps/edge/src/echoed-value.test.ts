import { describe, expect, it } from 'vitest';
import { MAX_ECHOED_CHARACTERS, echoed } from './echoed-value.js';

describe('echoed (client values quoted in error messages)', () => {
  it('keeps a value up to the bound as it is', () => {
    expect(echoed('gpt-4o')).toBe('gpt-4o');
    const atBound = 'a'.repeat(MAX_ECHOED_CHARACTERS);
    expect(echoed(atBound)).toBe(atBound);
    expect(echoed('')).toBe('');
  });

  it('cuts a longer value to the bound and tells its full length', () => {
    const long = 'm'.repeat(31 * 1024 * 1024);
    const shown = echoed(long);
    expect(shown).toBe(`${'m'.repeat(MAX_ECHOED_CHARACTERS)}… (${long.length} characters)`);
    expect(echoed('abcdef', 3)).toBe('abc… (6 characters)');
    expect(echoed('a'.repeat(MAX_ECHOED_CHARACTERS + 1)).length).toBeLessThan(MAX_ECHOED_CHARACTERS + 30);
  });

  it('never splits a surrogate pair', () => {
    const value = `ab${'😀'.repeat(10)}`; // 2 + 20 UTF-16 units
    const shown = echoed(value, 3); // the third unit is the first half of 😀
    expect(shown).toBe('ab… (22 characters)');
    expect(echoed(value, 4)).toBe('ab😀… (22 characters)');
    expect(JSON.stringify(echoed(value, 5))).not.toMatch(/\\ud[89ab]/);
  });
});
