import { describe, expect, it } from 'vitest';
import { apiKeyInvalidBody } from '@gateway/testing';
import { geminiHttpError, geminiStreamError } from './gemini-error.js';
import { convertGeminiUsage } from './convert-gemini-usage.js';
import { mapGeminiFinishReason } from './map-gemini-finish-reason.js';

const googleError = (code: number, status: string, message: string) => JSON.stringify({ error: { code, status, message } });

describe('geminiHttpError', () => {
  it('a wrong key (400 API_KEY_INVALID) is misconfigured; another 400 is rejected in the API words', () => {
    expect(geminiHttpError(400, JSON.stringify(apiKeyInvalidBody())).kind).toBe('misconfigured');
    const rejected = geminiHttpError(400, googleError(400, 'INVALID_ARGUMENT', 'Unknown name "x"'));
    expect([rejected.kind, rejected.providerMessage, rejected.retryable]).toEqual(['rejected', 'Unknown name "x"', false]);
    // An account condition (region, billing) is ours, not the caller's.
    expect(geminiHttpError(400, googleError(400, 'FAILED_PRECONDITION', 'User location is not supported for the API use.')).kind).toBe('misconfigured');
  });

  it('401/403/404 misconfigured, 408/429/5xx overloaded, a page that is not JSON keeps its text', () => {
    expect([401, 403, 404].map((status) => geminiHttpError(status, '{}').kind)).toEqual(['misconfigured', 'misconfigured', 'misconfigured']);
    expect([408, 429, 500, 503].map((status) => geminiHttpError(status, '').kind)).toEqual(['overloaded', 'overloaded', 'overloaded', 'overloaded']);
    expect(geminiHttpError(502, '<html>bad gateway</html>').providerMessage).toBe('<html>bad gateway</html>');
    expect(geminiHttpError(400, '').providerMessage).toBe('HTTP 400');
  });

  it('an error object inside a stream maps by its code', () => {
    expect(geminiStreamError(googleError(503, 'UNAVAILABLE', 'overloaded')).kind).toBe('overloaded');
    expect(geminiStreamError(googleError(400, 'INVALID_ARGUMENT', 'bad')).kind).toBe('rejected');
  });
});

describe('convertGeminiUsage', () => {
  it('output counts thoughts (candidatesTokenCount does not); cached part of the prompt reported', () => {
    expect(convertGeminiUsage({ promptTokenCount: 100, candidatesTokenCount: 10, thoughtsTokenCount: 30, cachedContentTokenCount: 60 })).toMatchObject({
      inputTokens: 100, cachedInputTokens: 60, outputTokens: 40, reasoningTokens: 30, cacheWriteTokens: 0,
    });
    expect(convertGeminiUsage({ totalTokenCount: 5 })).toBeUndefined();
    expect(convertGeminiUsage(undefined)).toBeUndefined();
  });
});

describe('mapGeminiFinishReason', () => {
  it('STOP with calls is tool_calls; MAX_TOKENS length; safety kinds content_filter', () => {
    expect(mapGeminiFinishReason('STOP', true)).toBe('tool_calls');
    expect(mapGeminiFinishReason('STOP', false)).toBe('stop');
    expect(mapGeminiFinishReason('MAX_TOKENS', true)).toBe('length');
    expect(mapGeminiFinishReason('RECITATION', false)).toBe('content_filter');
    expect(mapGeminiFinishReason('MALFORMED_FUNCTION_CALL', false)).toBe('stop');
  });
});
