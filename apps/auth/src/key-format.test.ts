import { describe, expect, it } from 'vitest';
import { generateKey, isWellFormedKey, keyChecksum, KeyHasher, keyLabel, keyLength, keyPrefixes } from './key-format.js';

const replaceAt = (text: string, index: number, character: string) => text.slice(0, index) + character + text.slice(index + 1);
const otherBase62 = (character: string) => (character === 'a' ? 'b' : 'a');

describe('key format', () => {
  it('mints well-formed keys of each kind with the documented shape', () => {
    for (let round = 0; round < 200; round++) {
      const api = generateKey('api');
      const provisioning = generateKey('provisioning');
      expect(api).toMatch(/^gw-api-[0-9A-Za-z]{32}-[0-9A-Za-z]{6}$/);
      expect(provisioning).toMatch(/^gw-prov-[0-9A-Za-z]{32}-[0-9A-Za-z]{6}$/);
      expect(api).toHaveLength(keyLength('api'));
      expect(provisioning).toHaveLength(keyLength('provisioning'));
      expect(isWellFormedKey(api, 'api')).toBe(true);
      expect(isWellFormedKey(provisioning, 'provisioning')).toBe(true);
    }
  });

  it('never mints the same key twice in a sample', () => {
    const keys = new Set(Array.from({ length: 2_000 }, () => generateKey('api')));
    expect(keys.size).toBe(2_000);
  });

  it('checksum is the documented function of prefix and body', () => {
    const key = generateKey('api');
    const body = key.slice(keyPrefixes.api.length, keyPrefixes.api.length + 32);
    expect(key.slice(-6)).toBe(keyChecksum('api', body));
    // The prefix is hashed too: the same body under the other prefix has another checksum.
    expect(keyChecksum('provisioning', body)).not.toBe(keyChecksum('api', body));
  });

  it('refuses a bad checksum, a changed body character, a wrong prefix and a wrong length', () => {
    const key = generateKey('api');
    const lastIndex = key.length - 1;
    expect(isWellFormedKey(replaceAt(key, lastIndex, otherBase62(key[lastIndex]!)), 'api')).toBe(false);
    const bodyIndex = keyPrefixes.api.length + 5;
    expect(isWellFormedKey(replaceAt(key, bodyIndex, otherBase62(key[bodyIndex]!)), 'api')).toBe(false);
    expect(isWellFormedKey(key.replace('gw-api-', 'gw-apx-'), 'api')).toBe(false);
    expect(isWellFormedKey(key.replace('gw-api-', 'sk-api-'), 'api')).toBe(false);
    expect(isWellFormedKey(key.slice(0, -1), 'api')).toBe(false);
    expect(isWellFormedKey(`${key}a`, 'api')).toBe(false);
    expect(isWellFormedKey('', 'api')).toBe(false);
    expect(isWellFormedKey('x'.repeat(1_000_000), 'api')).toBe(false);
    expect(isWellFormedKey(replaceAt(key, bodyIndex, '_'), 'api')).toBe(false);
    expect(isWellFormedKey(key.toUpperCase(), 'api')).toBe(false);
  });

  it('refuses each kind where the other is expected, even with its body re-checksummed', () => {
    const api = generateKey('api');
    const provisioning = generateKey('provisioning');
    expect(isWellFormedKey(api, 'provisioning')).toBe(false);
    expect(isWellFormedKey(provisioning, 'api')).toBe(false);
    // Relabelled with the other prefix but the old checksum: still refused.
    const body = api.slice(keyPrefixes.api.length, keyPrefixes.api.length + 32);
    expect(isWellFormedKey(`${keyPrefixes.provisioning}${body}-${api.slice(-6)}`, 'provisioning')).toBe(false);
  });

  it('labels show the prefix, 3 body characters and the last 3, never the secret', () => {
    const key = generateKey('api');
    const label = keyLabel(key, 'api');
    expect(label).toBe(`${key.slice(0, 10)}...${key.slice(-3)}`);
    expect(label).not.toContain(key.slice(10, 42));
    expect(keyLabel(generateKey('provisioning'), 'provisioning')).toMatch(/^gw-prov-[0-9A-Za-z]{3}\.\.\.[0-9A-Za-z]{3}$/);
  });

  it('hashes with the secret: deterministic, secret-dependent, not the plaintext', () => {
    const key = generateKey('api');
    const one = new KeyHasher('a'.repeat(32));
    const two = new KeyHasher('b'.repeat(32));
    expect(one.hash(key)).toBe(one.hash(key));
    expect(one.hash(key)).not.toBe(two.hash(key));
    expect(one.hash(key)).toMatch(/^[0-9a-f]{64}$/);
    expect(() => new KeyHasher('short')).toThrow(/32/);
  });
});
