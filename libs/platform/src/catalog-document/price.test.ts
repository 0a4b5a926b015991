import { describe, expect, it } from 'vitest';
import { normalizePrice } from './price.js';

describe('normalizePrice', () => {
  it.each([
    ['0.0000005', '0.0000005'],
    ['0.50', '0.5'],
    ['10', '10'],
    ['0', '0'],
    ['000.000', '0'],
    ['5e-7', '0.0000005'],
    ['1.5E-6', '0.0000015'],
    ['2e3', '2000'],
    ['0.000000000001', '0.000000000001'],
  ])('%s -> %s', (text, expected) => {
    expect(normalizePrice(text)).toEqual({ price: expected });
  });

  it.each([
    ['0.0000000000001', /13 decimals/],
    ['1e-13', /13 decimals/],
    ['-1', />= 0/],
    ['0x1F', /decimal number/],
    ['abc', /decimal number/],
    ['', /decimal number/],
    ['.5', /decimal number/],
    ['123456789', /below 10\^8/],
  ])('refuses %s', (text, reason) => {
    const result = normalizePrice(text);
    expect('reason' in result && result.reason).toMatch(reason);
  });
});
