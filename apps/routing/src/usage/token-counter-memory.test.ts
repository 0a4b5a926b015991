import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { countTextTokens, tokenizer } from './token-counter.js';

// A full collection before each heap reading (the flag only takes effect for contexts made after it).
setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

function heapAfterCollection(): number {
  collect();
  collect();
  return process.memoryUsage().heapUsed;
}

/** `count` distinct words of `length` letters, as one text per 500 words. */
function* distinctWordTexts(count: number, length: number): Generator<string> {
  // Lower-case letters only: the pre-tokenizer keeps each word one piece (digits and capitals would split it).
  const letters = 'abcdefghijklmnopqrstuvwxyz';
  let seed = 12345;
  const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
  for (let made = 0; made < count; made += 500) {
    const words: string[] = [];
    for (let word = 0; word < 500; word++) {
      let text = '';
      for (let index = 0; index < length; index++) text += letters[next() % letters.length];
      words.push(text);
    }
    yield words.join(' ');
  }
}

describe('the tokenizer keeps at most its bounded merge cache of what it counted', () => {
  it('holds a few MB more heap at most after counting 40,000 distinct long words (TOKENIZER_MERGE_CACHE_ENTRIES)', () => {
    tokenizer(); // loaded (its ranks are heap too) before the first reading
    countTextTokens('warm up the counter once');
    const before = heapAfterCollection();
    let tokens = 0;
    for (const text of distinctWordTexts(40_000, 100)) tokens += countTextTokens(text);
    const grown = heapAfterCollection() - before;
    expect(tokens).toBeGreaterThan(40_000 * 10); // random letters: many tokens a word, all counted
    // gpt-tokenizer's default merge cache would keep every word and its tokens: ~17 MB for these; the
    // bounded one its last 4,096 (~4 MB).
    expect(grown).toBeLessThan(8 * 1024 * 1024);
  }, 60_000);
});
