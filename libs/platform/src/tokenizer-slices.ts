/*
 * Text cut into pieces a BPE tokenizer (gpt-tokenizer) handles in linear time. Its merge step is
 * quadratic in the length of one pre-tokenized word: one 160,000-letter word held the event loop 30 s,
 * 16,000 letters ~0.3 s, 256 letters well under a millisecond. A run of the same class (whitespace or
 * not) longer than MAX_TOKENIZER_RUN is cut, so no word the tokenizer sees is longer; an ordinary text
 * (words far shorter than that) is cut only into slices of at most `maxSlice` characters, after a space
 * where one is near. Each cut may change the count by a token or so (a cut word is a few tokens more):
 * counts made this way are estimates — fine for holds and windows, which are bounds anyway.
 */

/** Longest run without a change between whitespace and non-whitespace that the tokenizer is given. */
export const MAX_TOKENIZER_RUN = 256;

function isWhitespace(code: number): boolean {
  // ASCII whitespace and the common Unicode spaces; anything else counts as a word character.
  return code === 32 || (code >= 9 && code <= 13) || code === 0xa0 || code === 0x3000 || (code >= 0x2000 && code <= 0x200a) || code === 0x2028 || code === 0x2029;
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}

/**
 * The end of the next slice of `text` from `start`: at most `maxSlice` characters on, earlier where a
 * run reaches MAX_TOKENIZER_RUN characters; never between the halves of a surrogate pair.
 */
export function nextTokenizerCut(text: string, start: number, maxSlice: number): number {
  const limit = Math.min(text.length, start + Math.max(maxSlice, MAX_TOKENIZER_RUN));
  let runStart = start;
  let runIsSpace = isWhitespace(text.charCodeAt(start));
  let lastWordStart = -1;
  for (let index = start + 1; index < limit; index++) {
    const space = isWhitespace(text.charCodeAt(index));
    if (space !== runIsSpace) {
      if (!space) lastWordStart = index;
      runStart = index;
      runIsSpace = space;
    } else if (index - runStart >= MAX_TOKENIZER_RUN) {
      return isLowSurrogate(text.charCodeAt(index)) ? index + 1 : index;
    }
  }
  if (limit >= text.length) return text.length;
  // Cut where a word starts when one is in the slice's second half: the cut then splits no word.
  if (lastWordStart > start + maxSlice / 2) return lastWordStart;
  return isLowSurrogate(text.charCodeAt(limit)) ? limit + 1 : limit;
}

/** The slices of `text`, in order, as nextTokenizerCut cuts them. */
export function* tokenizerSlices(text: string, maxSlice: number): Generator<string> {
  for (let start = 0; start < text.length; ) {
    const end = nextTokenizerCut(text, start, maxSlice);
    yield text.slice(start, end);
    start = end;
  }
}

/**
 * Entries of gpt-tokenizer's merge cache (word → tokens, one per process, shared by every caller). Its
 * default, 100,000, let one caller's distinct words hold ~15 MB per 40,000 (2026-11-30), and at that cap its
 * least-recently-used eviction made counting ~4.5× slower (100,000 distinct 250-letter words: 126 s, against
 * 21 s without a cache and 28 s with this one). Without any cache, the same long word repeated is merged
 * again each time (a 32 K-character slice of 256-letter runs: 25 ms against 1.3 ms cached), which held the
 * event loop past /livez's bound. With this many entries a word is at most MAX_TOKENIZER_RUN characters,
 * so the cache holds a few MB at most whatever callers send, and repeated words stay cheap.
 */
export const TOKENIZER_MERGE_CACHE_ENTRIES = 4_096;

/** The tokenizer with its merge cache bounded to TOKENIZER_MERGE_CACHE_ENTRIES. */
export function withBoundedMergeCache<Tokenizer extends { setMergeCacheSize(size: number): void }>(tokenizer: Tokenizer): Tokenizer {
  tokenizer.setMergeCacheSize(TOKENIZER_MERGE_CACHE_ENTRIES);
  return tokenizer;
}
