import { createRequire } from 'node:module';

type Encode = (typeof import('gpt-tokenizer'))['encode'];
let encode: Encode | undefined;

/**
 * gpt-tokenizer's `encode`, loaded on first use (an ordinary request never needs it; the ranks cost
 * ~65 MB of RSS). Its CommonJS build, as routing loads it: in `npm start` both share one copy.
 */
export function tokenizerEncode(): Encode {
  return (encode ??= (createRequire(import.meta.url)('gpt-tokenizer') as { encode: Encode }).encode);
}
