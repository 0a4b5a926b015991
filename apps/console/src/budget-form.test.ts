import { describe, expect, it } from 'vitest';
import { parseLimit, parseThresholds, spentPercent } from './budget-form.js';

describe('the budget form', () => {
  it('reads thresholds as whole percents, ascending, without repeats', () => {
    expect(parseThresholds('80, 50,100 50')).toEqual({ thresholds: [50, 80, 100] });
    expect(parseThresholds('  ')).toEqual({ thresholds: [] });
    expect(parseThresholds('1,100')).toEqual({ thresholds: [1, 100] });
  });

  it('names a threshold that is not a whole percent from 1 to 100, and more than ten', () => {
    for (const wrong of ['0', '101', '50.5', '-5', 'ten', '1000']) {
      const answer = parseThresholds(`50, ${wrong}`);
      expect(answer, wrong).toHaveProperty('problem');
      expect((answer as { problem: string }).problem).toContain(`"${wrong}"`);
    }
    expect(parseThresholds('1,2,3,4,5,6,7,8,9,10,11')).toEqual({ problem: 'At most 10 thresholds.' });
    expect(parseThresholds('1,2,3,4,5,6,7,8,9,10,10')).toEqual({ thresholds: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] });
  });

  it('takes a limit of credits above 0 and at most 1,000,000 with at most 12 decimals, normalised', () => {
    expect(parseLimit(' 2.50 ')).toEqual({ limit: '2.5' });
    expect(parseLimit('0.000000000001')).toEqual({ limit: '0.000000000001' });
    expect(parseLimit('1000000')).toEqual({ limit: '1000000' });
    for (const wrong of ['0', '0.0', '1000000.000000000001', '-1', '1e3', '0.0000000000001', 'abc', '']) {
      expect(parseLimit(wrong), wrong).toHaveProperty('problem');
    }
  });

  it('says the share of the limit spent in whole percents, exactly (no float rounding)', () => {
    expect(spentPercent('0.2', '0.25')).toBe('80 %');
    // 0.29 / 0.5 is 57.99999… in binary floating point; the exact share is 58 %.
    expect(spentPercent('0.29', '0.5')).toBe('58 %');
    expect(spentPercent('0.999999999999', '1')).toBe('99 %');
    expect(spentPercent('3', '2')).toBe('150 %');
    expect(spentPercent('0', '5')).toBe('0 %');
  });
});
