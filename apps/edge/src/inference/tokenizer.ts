import { createRequire } from 'node:module';
import { tokenizerSlices, withBoundedMergeCache } from '@gateway/platform';

type Encode = (typeof import('gpt-tokenizer'))['encode'];
let encode: Encode | undefined;

/**
 * gpt-tokenizer's `encode`, loaded on first use (an ordinary request never needs it; the ranks cost
 * ~65 MB of RSS). Its CommonJS build, as routing loads it: in `npm start` both share one copy. Its merge
 * cache bounded (withBoundedMergeCache: a few MB at most, whatever callers send).
 */
export function tokenizerEncode(): Encode {
  return (encode ??= withBoundedMergeCache(createRequire(import.meta.url)('gpt-tokenizer') as { encode: Encode; setMergeCacheSize(size: number): void }).encode);
}

/**
 * Characters one request may have tokenized (issue 29: tokenizing is CPU the caller does not pay for).
 * Text beyond it is counted as its UTF-8 bytes, an upper bound of its tokens (a byte-level BPE token
 * covers at least one byte). ~0.3 s of CPU at the tokenizer's ~3.5 MB/s, in slices.
 */
export const MAX_TOKENIZED_CHARACTERS = 1024 * 1024;
/** Characters tokenized between yields to the event loop: ~10 ms of CPU each. */
export const TOKENIZE_SLICE_CHARACTERS = 32 * 1024;

const ENCODE_OPTIONS = { disallowedSpecial: new Set<string>() };

/**
 * A request's budget of tokenized characters and its yields: every text of one request is counted
 * through one budget, so the request's tokenizer work is bounded whatever it sends, and the event loop
 * is held at most one slice (~10 ms) at a time.
 */
export class TokenCounter {
  private sinceYield = 0;

  constructor(private budget = MAX_TOKENIZED_CHARACTERS) {}

  /**
   * Tokens of `text`: by the tokenizer (long runs cut, see tokenizerSlices) while the budget lasts,
   * then its UTF-8 bytes. Stops once `stopAt` is reached (the answer is then at least `stopAt`).
   */
  async count(text: string, stopAt = Number.POSITIVE_INFINITY): Promise<number> {
    if (text.length === 0) return 0;
    const encoder = tokenizerEncode();
    let total = 0;
    let offset = 0;
    for (const slice of tokenizerSlices(text, TOKENIZE_SLICE_CHARACTERS)) {
      if (this.budget < slice.length) break;
      this.budget -= slice.length;
      total += encoder(slice, ENCODE_OPTIONS).length;
      offset += slice.length;
      if (total >= stopAt) return total;
      this.sinceYield += slice.length;
      if (this.sinceYield >= TOKENIZE_SLICE_CHARACTERS) {
        this.sinceYield = 0;
        // Let other requests (and /livez) run between slices: a long input costs its own latency only.
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    }
    if (offset < text.length) {
      this.budget = 0;
      total += Buffer.byteLength(offset === 0 ? text : text.slice(offset), 'utf8');
    }
    return total;
  }
}

/** Tokens of each text, through one request's TokenCounter. */
export async function countTextsTokens(texts: readonly string[]): Promise<number[]> {
  const counter = new TokenCounter();
  const counts: number[] = [];
  for (const text of texts) counts.push(await counter.count(text));
  return counts;
}
