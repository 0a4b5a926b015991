import { describe, expect, it } from 'vitest';
import { MAX_TOKENIZER_RUN, tokenizerSlices } from './tokenizer-slices.js';

const longestRun = (slice: string) => Math.max(0, ...(slice.match(/\S+|\s+/g) ?? []).map((run) => run.length));

describe('tokenizerSlices', () => {
  it('cuts one 160,000-letter word into pieces no longer than the run bound, losing nothing', () => {
    const word = 'a'.repeat(160_000);
    const slices = [...tokenizerSlices(word, 32 * 1024)];
    expect(slices.join('')).toBe(word);
    expect(Math.max(...slices.map((slice) => slice.length))).toBeLessThanOrEqual(MAX_TOKENIZER_RUN);
  });

  it('cuts long whitespace and punctuation runs too, and never inside a surrogate pair', () => {
    const text = `${' '.repeat(5_000)}${'!'.repeat(5_000)}${'😀'.repeat(3_000)}end`;
    const slices = [...tokenizerSlices(text, 32 * 1024)];
    expect(slices.join('')).toBe(text);
    for (const slice of slices) {
      expect(longestRun(slice)).toBeLessThanOrEqual(MAX_TOKENIZER_RUN + 1);
      expect(slice.charCodeAt(0) >= 0xdc00 && slice.charCodeAt(0) <= 0xdfff).toBe(false);
    }
  });

  it('leaves ordinary text whole up to the slice size, then cuts where a word starts', () => {
    const sentence = 'the gateway routes each request to a provider. ';
    expect([...tokenizerSlices(sentence.repeat(10), 32 * 1024)]).toEqual([sentence.repeat(10)]);
    const long = sentence.repeat(2_000);
    const slices = [...tokenizerSlices(long, 32 * 1024)];
    expect(slices.join('')).toBe(long);
    expect(slices.length).toBeGreaterThan(1);
    slices.forEach((slice, index) => {
      expect(slice.length).toBeLessThanOrEqual(32 * 1024);
      // No word is split: each slice ends with a space and the next one starts a word.
      if (index < slices.length - 1) expect(slice.endsWith(' ')).toBe(true);
      expect(slice.startsWith(' ')).toBe(false);
    });
  });
});
