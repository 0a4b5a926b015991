import { describe, expect, it } from 'vitest';
import { controlCharacterRefusal } from './url-guard.js';

describe('controlCharacterRefusal', () => {
  it('lets ordinary URLs through, percent escapes of printable characters included', () => {
    for (const url of ['/v1/generation?id=gen_1', '/v1/account/keys/key%2D1', '/v1/models/acme%2Fchat', '/v1/x?a=%20b&c=%E2%82%AC', '/v1/x?bad=%0g']) {
      expect(controlCharacterRefusal(url), url).toBeUndefined();
    }
  });

  it('names the query parameter or the path that carries a control character, escaped or not', () => {
    expect(controlCharacterRefusal('/v1/generation?id=a%00b')?.apiError.param).toBe('query.id');
    expect(controlCharacterRefusal('/v1/generation?x=1&cursor=%0A')?.apiError.param).toBe('query.cursor');
    expect(controlCharacterRefusal('/v1/x?k%7F=1')?.apiError.param).toBe('query.k?');
    expect(controlCharacterRefusal('/v1/account/keys/k%1F')?.apiError.param).toBe('path');
    const refusal = controlCharacterRefusal('/v1/generation?id=%00');
    expect(refusal?.apiError.type).toBe('invalid_request_error');
    expect(refusal?.apiError.message).toBe('query.id: contains a control character.');
  });
});
