import { createHash, randomBytes } from 'node:crypto';

/**
 * Key wire format: `<prefix><32 base62 random chars>-<6 base62 checksum chars>`.
 *
 *   API key:          gw-api-<body>-<checksum>   (46 characters)
 *   provisioning key: gw-prov-<body>-<checksum>  (47 characters)
 *
 * checksum = the first 6 bytes of SHA-256(prefix + body), read as a big-endian unsigned integer,
 * reduced modulo 62^6 and written as 6 base62 digits (most significant first, zero-padded with '0').
 * The prefix is inside the hashed text, so relabelling an API key as a provisioning key (or the
 * reverse) breaks the checksum too. The checksum exists so a typo, a truncated paste or a key of the
 * wrong kind is refused from its text alone, without a database read (and without a hash lookup
 * that could be used to probe the table). It is not a secret and not a MAC.
 *
 * 32 base62 characters carry ~190 bits of randomness.
 *
 * Protocol knowledge, not one service's: auth issues and checks keys with it, and anyone holding a key
 * (a client, a test posing as a hostile caller) can tell a well-formed key from a typo the same way.
 * How keys are stored (KeyHasher) stays auth's own.
 */
export type KeyKind = 'api' | 'provisioning';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const BODY_LENGTH = 32;
const CHECKSUM_LENGTH = 6;
const CHECKSUM_MODULUS = 62n ** BigInt(CHECKSUM_LENGTH);

export const keyPrefixes: Readonly<Record<KeyKind, string>> = {
  api: 'gw-api-',
  provisioning: 'gw-prov-',
};

const keyPatterns: Readonly<Record<KeyKind, RegExp>> = {
  api: /^gw-api-([0-9A-Za-z]{32})-([0-9A-Za-z]{6})$/,
  provisioning: /^gw-prov-([0-9A-Za-z]{32})-([0-9A-Za-z]{6})$/,
};

export function keyLength(kind: KeyKind): number {
  return keyPrefixes[kind].length + BODY_LENGTH + 1 + CHECKSUM_LENGTH;
}

export function keyChecksum(kind: KeyKind, body: string): string {
  const digest = createHash('sha256').update(keyPrefixes[kind] + body).digest();
  let remaining = BigInt(digest.readUIntBE(0, 6)) % CHECKSUM_MODULUS;
  let text = '';
  for (let index = 0; index < CHECKSUM_LENGTH; index++) {
    text = BASE62[Number(remaining % 62n)] + text;
    remaining /= 62n;
  }
  return text;
}

/** Uniform base62 characters by rejection sampling (248 = 4 * 62, so bytes >= 248 are dropped). */
function randomBase62(length: number): string {
  let text = '';
  while (text.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte >= 248) continue;
      text += BASE62[byte % 62];
      if (text.length === length) break;
    }
  }
  return text;
}

export function generateKey(kind: KeyKind): string {
  const body = randomBase62(BODY_LENGTH);
  return `${keyPrefixes[kind]}${body}-${keyChecksum(kind, body)}`;
}

/** True when the text has the prefix, length, alphabet and checksum of a key of this kind. Pure. */
export function isWellFormedKey(text: string, kind: KeyKind): boolean {
  // Length first: a huge input is refused before any regex runs over it.
  if (typeof text !== 'string' || text.length !== keyLength(kind)) return false;
  const match = keyPatterns[kind].exec(text);
  if (!match) return false;
  return keyChecksum(kind, match[1]!) === match[2];
}

/**
 * A recognisable, non-secret preview: the prefix, the first 3 random characters, and the last 3
 * characters (which are checksum, not randomness). E.g. `gw-api-AbC...x9Z`.
 */
export function keyLabel(plaintext: string, kind: KeyKind): string {
  const visible = keyPrefixes[kind].length + 3;
  return `${plaintext.slice(0, visible)}...${plaintext.slice(-3)}`;
}
