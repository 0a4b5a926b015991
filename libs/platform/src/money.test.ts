import { describe, expect, it } from 'vitest';
import { Decimal as DefaultDecimal } from 'decimal.js';
import { formatCredits, parseCredits, PICO_PER_CREDIT } from './money.js';

describe('money', () => {
  it('parses decimal credits into exact pico-credits', () => {
    expect(parseCredits('10')).toBe(10n * PICO_PER_CREDIT);
    expect(parseCredits('0.0000005')).toBe(500_000n);
    expect(parseCredits('0.000000000001')).toBe(1n);
    expect(parseCredits('-0.05')).toBe(-50_000_000_000n);
  });

  it('refuses what it cannot represent exactly', () => {
    expect(() => parseCredits('0.0000000000001')).toThrow(/decimal places/);
    expect(() => parseCredits('1e-7')).toThrow(/not a decimal/);
    expect(() => parseCredits('')).toThrow();
  });

  it('formats without trailing zeros and round-trips', () => {
    expect(formatCredits(9_999_998_500_000n)).toBe('9.9999985');
    expect(formatCredits(10n * PICO_PER_CREDIT)).toBe('10');
    expect(formatCredits(-250_000_000_000n)).toBe('-0.25');
    expect(formatCredits(0n)).toBe('0');
    for (const text of ['0.1', '123.456789012345', '0.000000000001']) expect(formatCredits(parseCredits(text))).toBe(text);
  });

  it('formats as decimal.js renders the same amount, for seeded random amounts of every shape', () => {
    // Exact at these sizes (decimal.js rounds to 20 significant digits by default).
    const Decimal = DefaultDecimal.clone({ precision: 80 });
    // A small LCG: the same 5,000 amounts every run (whole, fractional, tiny, negative, 0, large).
    let seed = 39;
    const next = () => (seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648);
    for (let i = 0; i < 5_000; i++) {
      const digits = 1 + (next() % 30);
      let text = String(1 + (next() % 9));
      for (let d = 1; d < digits; d++) text += String(next() % 10);
      // Whole credits, zeros at the end of the fraction and plain values all come up.
      const shape = next() % 4;
      let pico = BigInt(text) * (shape === 0 ? PICO_PER_CREDIT : shape === 1 ? 1_000n : 1n);
      if (next() % 2 === 0) pico = -pico;
      if (i === 0) pico = 0n;
      const expected = new Decimal(pico.toString()).div(new Decimal(PICO_PER_CREDIT.toString())).toFixed();
      expect(formatCredits(pico), pico.toString()).toBe(expected === '-0' ? '0' : expected);
    }
  });

  it('multiplies token counts by prices with no float error (0.1 + 0.2 style traps)', () => {
    const price = parseCredits('0.0000001');
    expect(formatCredits(3n * price + parseCredits('0.0000002'))).toBe('0.0000005');
  });
});

describe('money precision', () => {
  it('does not round amounts with more than 20 significant digits', () => {
    expect(parseCredits('123456789012.123456789012')).toBe(123456789012123456789012n);
    expect(formatCredits(parseCredits('99999999999999.999999999999'))).toBe('99999999999999.999999999999');
  });
});
