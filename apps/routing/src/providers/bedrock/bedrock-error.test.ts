import { describe, expect, it } from 'vitest';
import { bedrockErrorType, bedrockHttpError, bedrockStreamException } from './bedrock-error.js';
import { convertBedrockUsage } from './convert-bedrock-usage.js';
import { mapBedrockFinishReason } from './map-bedrock-finish-reason.js';

describe('bedrock errors', () => {
  it('reads the error type from the header, the body\'s __type or an exception frame', () => {
    expect(bedrockErrorType('ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/')).toBe('validationexception');
    expect(bedrockErrorType('com.amazon.coral.service#UnrecognizedClientException')).toBe('unrecognizedclientexception');
    expect(bedrockErrorType('modelStreamErrorException')).toBe('modelstreamerrorexception');
    expect(bedrockErrorType(undefined)).toBe('');
  });

  it('maps HTTP errors by type first, then by status', () => {
    const kind = (status: number, body: string, type?: string) => bedrockHttpError(status, body, type).kind;
    expect(kind(400, '{"message":"bad"}', 'ValidationException:x')).toBe('rejected');
    expect(bedrockHttpError(400, '{"message":"messages.0: blank"}', 'ValidationException').providerMessage).toBe('messages.0: blank');
    expect(kind(400, '{"message":"quota"}', 'ServiceQuotaExceededException')).toBe('overloaded');
    expect(kind(403, '{"Message":"denied"}', 'AccessDeniedException')).toBe('misconfigured');
    expect(kind(403, '{"message":"x"}', 'UnrecognizedClientException')).toBe('misconfigured');
    expect(kind(400, '{"__type":"com.amazon.coral.service#ExpiredTokenException","message":"expired"}')).toBe('misconfigured');
    expect(kind(404, '{"message":"no model"}')).toBe('misconfigured');
    expect(kind(429, '{"message":"slow"}', 'ModelNotReadyException')).toBe('overloaded');
    expect(kind(424, '{"message":"model failed"}')).toBe('overloaded');
    expect(kind(408, '{"message":"model timed out"}')).toBe('overloaded');
    expect(kind(500, '<html>oops</html>')).toBe('overloaded');
    expect(kind(503, '')).toBe('overloaded');
    expect(kind(413, 'too big')).toBe('rejected');
    expect(bedrockHttpError(502, '').providerMessage).toBe('HTTP 502');
  });

  it('maps exception frames inside a stream', () => {
    expect(bedrockStreamException('validationException', '{"message":"bad input"}')).toMatchObject({ kind: 'rejected', providerMessage: 'bad input' });
    for (const type of ['throttlingException', 'modelStreamErrorException', 'internalServerException', 'serviceUnavailableException', 'somethingNew']) {
      expect(bedrockStreamException(type, '{"message":"m"}').kind).toBe('overloaded');
    }
  });
});

describe('convertBedrockUsage', () => {
  it('adds cache reads and writes into the input (Bedrock inputTokens excludes them)', () => {
    expect(convertBedrockUsage({ inputTokens: 10, outputTokens: 5, cacheReadInputTokens: 100, cacheWriteInputTokens: 50 })).toMatchObject({
      inputTokens: 160, cachedInputTokens: 100, cacheWriteTokens: 50, outputTokens: 5, reasoningTokens: 0, estimated: false,
    });
    expect(convertBedrockUsage({ inputTokens: 10, outputTokens: 5 })).toMatchObject({ inputTokens: 10, cachedInputTokens: 0, cacheWriteTokens: 0 });
    expect(convertBedrockUsage({ totalTokens: 3 })).toBeUndefined();
    expect(convertBedrockUsage(undefined)).toBeUndefined();
  });

  it('maps stop reasons', () => {
    expect(['end_turn', 'tool_use', 'max_tokens', 'stop_sequence', 'guardrail_intervened', 'content_filtered', 'model_context_window_exceeded', undefined, 'new_reason'].map(mapBedrockFinishReason))
      .toEqual(['stop', 'tool_calls', 'length', 'stop', 'content_filter', 'content_filter', 'length', 'stop', 'stop']);
  });
});
