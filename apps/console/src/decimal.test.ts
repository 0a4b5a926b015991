import { describe, expect, it } from 'vitest';
import { fromUnits, perMillion, rounded, sum, toUnits } from './decimal.js';

describe('decimal amounts', () => {
  it('reads exponent spellings exactly', () => {
    expect(toUnits(3e-6)).toBe(3_000_000n);
    expect(toUnits(7.5e-7)).toBe(750_000n);
    expect(toUnits('0.000052')).toBe(52_000_000n);
    expect(toUnits('-1.5')).toBe(-1_500_000_000_000n);
    expect(() => toUnits('abc')).toThrow();
  });

  it('prices per 1M tokens', () => {
    expect(perMillion(3e-6)).toBe('3.00');
    expect(perMillion(7.5e-7)).toBe('0.75');
    expect(perMillion(1.5e-5)).toBe('15.00');
    expect(perMillion(0)).toBe('0.00');
  });

  it('sums without floating point', () => {
    expect(sum(['0.1', '0.2'])).toBe('0.3');
    expect(sum([])).toBe('0');
    expect(fromUnits(1n)).toBe('0.000000000001');
    expect(rounded('0.0000125', 5)).toBe('0.00001');
    expect(rounded('0.000015', 5)).toBe('0.00002');
  });
});
