import { describe, expect, it } from 'vitest';
import { ReasoningTags } from './reasoning-tags.js';

describe('reasoning tags', () => {
  const tags = new ReasoningTags('a-test-key-of-enough-length');

  it('round-trips the issuer and the provider value', () => {
    const tagged = tags.tag('anthropic-main', 'EqQBCkYIBRgCKkA+sig==');
    expect(tagged.startsWith('gw1.')).toBe(true);
    expect(tagged.endsWith('EqQBCkYIBRgCKkA+sig==')).toBe(true);
    expect(tags.untag(tagged)).toEqual({ providerId: 'anthropic-main', value: 'EqQBCkYIBRgCKkA+sig==' });
  });

  it('treats untagged, edited and foreign-key values as foreign', () => {
    const tagged = tags.tag('provider-a', 'sig-a');
    expect(tags.untag('sig-a')).toEqual({ providerId: '', value: '' });
    // The issuer swapped for another provider: the MAC no longer matches.
    const swapped = tagged.replace(Buffer.from('provider-a').toString('base64url'), Buffer.from('provider-b').toString('base64url'));
    expect(tags.untag(swapped)).toEqual({ providerId: '', value: '' });
    // The value edited.
    expect(tags.untag(`${tagged}x`)).toEqual({ providerId: '', value: '' });
    // Another gateway's key.
    expect(new ReasoningTags('another-key-of-enough-length').untag(tagged)).toEqual({ providerId: '', value: '' });
    expect(tags.untag('gw1.only-one-dot')).toEqual({ providerId: '', value: '' });
    expect(tags.untag('gw9.a.b.c')).toEqual({ providerId: '', value: '' });
  });

  it("a tool call's signature round-trips through tagCall; a reasoning tag cannot stand in for it, nor it for reasoning", () => {
    const tagged = tags.tagCall('gem', 'CiQB0e2Kb+sig=');
    expect(tagged.startsWith('gw1.')).toBe(true);
    expect(tags.untagCall(tagged)).toEqual({ providerId: 'gem', value: 'CiQB0e2Kb+sig=' });
    expect(tags.untagCall(tags.tag('gem', 'CiQB0e2Kb+sig='))).toEqual({ providerId: '', value: '' });
    expect(tags.untag(tagged).value).not.toBe('CiQB0e2Kb+sig=');
    expect(tags.untagCall('CiQB0e2Kb+sig=')).toEqual({ providerId: '', value: '' });
    expect(tags.untagCall(`${tagged}x`)).toEqual({ providerId: '', value: '' });
    expect(new ReasoningTags('another-key-of-enough-length').untagCall(tagged)).toEqual({ providerId: '', value: '' });
    expect(tags.tagCall('gem', '')).toBe('');
  });

  it('leaves an empty value empty and refuses a short key', () => {
    expect(tags.tag('p', '')).toBe('');
    expect(() => new ReasoningTags('short')).toThrow(/16 bytes/);
  });
});
