import { createHmac } from 'node:crypto';

// The key wire format (prefixes, checksum, generation, well-formedness, labels) is libs/platform's
// key-format.ts; how auth stores keys is here.
export { generateKey, isWellFormedKey, keyChecksum, keyLabel, keyLength, keyPrefixes, type KeyKind } from '@gateway/platform';

/**
 * Keys are stored only as HMAC-SHA-256(secret, plaintext): a leaked table cannot be checked against
 * guesses without the secret, and lookup stays an equality on an indexed column.
 */
export class KeyHasher {
  constructor(private readonly secret: string) {
    if (secret.length < 32) throw new Error('keyHashSecret must be at least 32 characters');
  }

  hash(plaintext: string): string {
    return createHmac('sha256', this.secret).update(plaintext).digest('hex');
  }
}
