import { describe, expect, it } from 'vitest';
import { EdgeError } from '../errors.js';
import { activityEntries, keyRecord, stringifyWithDecimals } from './account-render.js';
import { activityQuery, createKeyBody, listKeysQuery, numberToDecimal, parseWith, updateKeyBody } from './account-schemas.js';

const failure = (run: () => unknown) => {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(EdgeError);
    return (error as EdgeError).apiError;
  }
  throw new Error('expected a failure');
};

describe('numberToDecimal', () => {
  it('writes the shortest round-trip decimal without an exponent', () => {
    expect(numberToDecimal(0.1)).toBe('0.1');
    expect(numberToDecimal(5)).toBe('5');
    expect(numberToDecimal(1e-7)).toBe('0.0000001');
    expect(numberToDecimal(1.5e-10)).toBe('0.00000000015');
    expect(numberToDecimal(1.2345e21)).toBe('1234500000000000000000');
    expect(numberToDecimal(-2.5e-7)).toBe('-0.00000025');
    expect(numberToDecimal(123.456)).toBe('123.456');
  });
});

describe('create key body', () => {
  it('normalises credit_limit from a number or a string, null meaning no limit', () => {
    expect(parseWith(createKeyBody, 'body', { name: ' a ', credit_limit: 5.5 })).toEqual({ name: 'a', credit_limit: '5.5' });
    expect(parseWith(createKeyBody, 'body', { name: 'a', credit_limit: '5.500000000001' }).credit_limit).toBe('5.500000000001');
    expect(parseWith(createKeyBody, 'body', { name: 'a', credit_limit: 1e-12 }).credit_limit).toBe('0.000000000001');
    expect(parseWith(createKeyBody, 'body', { name: 'a', credit_limit: null }).credit_limit).toBeNull();
    expect(parseWith(createKeyBody, 'body', { name: 'a', credit_limit: 0, default_routing_strategy: 'latency' }).default_routing_strategy).toBe('latency');
  });

  it('names the failing field in the message and param', () => {
    const cases: Array<[unknown, string, RegExp]> = [
      [{ credit_limit: 1 }, 'body.name', /is required/],
      [{ name: '   ', credit_limit: 1 }, 'body.name', /must not be empty/],
      [{ name: 'x'.repeat(201), credit_limit: 1 }, 'body.name', /at most 200/],
      [{ name: 'a' }, 'body.credit_limit', /is required/],
      [{ name: 'a', credit_limit: -1 }, 'body.credit_limit', /negative/],
      [{ name: 'a', credit_limit: 1e-13 }, 'body.credit_limit', /12 decimals/],
      [{ name: 'a', credit_limit: 'ten' }, 'body.credit_limit', /12 decimals/],
      [{ name: 'a', credit_limit: 1e13 }, 'body.credit_limit', /at most/],
      [{ name: 'a', credit_limit: true }, 'body.credit_limit', /must be a number/],
      [{ name: 'a', credit_limit: 1, default_routing_strategy: 'fastest' }, 'body.default_routing_strategy', /one of reliability/],
      [{ name: 'a', credit_limit: 1, limit: 5 }, 'body.limit', /unknown field/],
      [[], 'body', /JSON object/],
    ];
    for (const [body, param, message] of cases) {
      const error = failure(() => parseWith(createKeyBody, 'body', body));
      expect(error.status, JSON.stringify(body)).toBe(400);
      expect(error.type).toBe('invalid_request_error');
      expect(error.param, JSON.stringify(body)).toBe(param);
      expect(error.message.startsWith(`${param}: `), error.message).toBe(true);
      expect(error.message).toMatch(message);
    }
  });
});

describe('update key body', () => {
  it('keeps absent fields absent and null as a removal', () => {
    expect(parseWith(updateKeyBody, 'body', {})).toEqual({});
    expect(parseWith(updateKeyBody, 'body', { credit_limit: null, default_routing_strategy: null })).toEqual({ credit_limit: null, default_routing_strategy: null });
    expect(failure(() => parseWith(updateKeyBody, 'body', { disabled: 'yes' })).param).toBe('body.disabled');
  });
});

describe('queries', () => {
  it('bounds days to 1..30 and refuses a repeated or non-integer value', () => {
    expect(parseWith(activityQuery, 'query', { days: '30' }).days).toBe(30);
    expect(parseWith(activityQuery, 'query', {}).days).toBeUndefined();
    for (const days of ['0', '31', '-1', '1.5', 'seven', ['1', '2']]) {
      const error = failure(() => parseWith(activityQuery, 'query', { days }));
      expect(error.param).toBe('query.days');
      expect(error.message).toMatch(/^query\.days: /);
    }
  });

  it('refuses offset together with cursor', () => {
    expect(failure(() => parseWith(listKeysQuery, 'query', { offset: '1', cursor: 'abc' })).param).toBe('query.offset');
    expect(parseWith(listKeysQuery, 'query', { limit: '5', include_disabled: 'TRUE' })).toEqual({ limit: 5, include_disabled: true });
    expect(failure(() => parseWith(listKeysQuery, 'query', { limit: '101' })).param).toBe('query.limit');
  });
});

describe('key record JSON', () => {
  const key = {
    id: 'key_1',
    accountId: 'acc_1',
    name: 'n',
    label: 'gw-api-abc...xyz',
    disabled: false,
    creditLimit: '1000000000000.000000000001',
    defaultRoutingStrategy: '',
    createdAtMs: 1_767_225_600_999n,
    updatedAtMs: 1_767_225_601_000n,
  };

  it('writes credit amounts as number literals with every digit, and timestamps in unix seconds', () => {
    const text = stringifyWithDecimals(keyRecord(key, '0.000000000001'));
    expect(text).toContain('"credit_limit":1000000000000.000000000001');
    expect(text).toContain('"usage":0.000000000001');
    expect(text).toContain('"limit_remaining":1000000000000');
    const parsed = JSON.parse(text) as Record<string, unknown>;
    expect(parsed).toMatchObject({ id: 'key_1', default_routing_strategy: null, created_at: 1_767_225_600, updated_at: 1_767_225_601 });
    expect(parsed).not.toHaveProperty('account_id');
  });

  it('leaves a name that looks like the placeholder a string', () => {
    const sneaky = { ...key, name: '\u00005\u0000', creditLimit: undefined };
    const parsed = JSON.parse(stringifyWithDecimals(keyRecord(sneaky, '0'))) as Record<string, unknown>;
    expect(parsed.name).toBe('\u00005\u0000');
    expect(parsed.credit_limit).toBeNull();
    expect(parsed.limit_remaining).toBeNull();
  });
});

describe('activity entries', () => {
  it('sums keys per day and model, credits exactly, newest day first', () => {
    const usage = (input: number, output: number) => ({
      inputTokens: input, cachedInputTokens: 1, outputTokens: output, reasoningTokens: 2, inputAudioTokens: 0, outputAudioTokens: 0,
      inputAudioMs: 0, outputAudioMs: 0, outputTextTokens: 0, inputTextCharacters: 0, outputTextCharacters: 0, outputImageTokens: 0,
      inputImageTokens: 0, inputTextTokens: 0, estimated: false, cacheWriteTokens: 0,
    });
    const entries = activityEntries([
      { date: '2026-01-01', modelId: 'b', keyId: 'k1', requests: 1, usage: usage(10, 20), credits: '0.1' },
      { date: '2026-01-02', modelId: 'a', keyId: 'k1', requests: 2, usage: usage(1, 1), credits: '0.000000000001' },
      { date: '2026-01-01', modelId: 'b', keyId: 'k2', requests: 3, usage: usage(5, 5), credits: '0.2' },
      { date: '2026-01-01', modelId: 'a', keyId: 'k2', requests: 1, usage: usage(0, 0), credits: '0' },
    ]);
    expect(entries.map((entry) => `${entry.date}/${entry.model}`)).toEqual(['2026-01-02/a', '2026-01-01/a', '2026-01-01/b']);
    expect(entries[2]).toEqual({
      date: '2026-01-01', model: 'b', requests: 4, prompt_tokens: 15, completion_tokens: 25, reasoning_tokens: 4,
      cached_prompt_tokens: 2, total_tokens: 40, credits: '0.3',
    });
  });
});

describe('keys that reset and expire', () => {
  it('takes limit_reset daily, weekly, monthly or null on create and update, and names the field otherwise', () => {
    for (const reset of ['daily', 'weekly', 'monthly', null] as const) {
      expect(parseWith(createKeyBody, 'body', { name: 'a', credit_limit: 1, limit_reset: reset }).limit_reset).toBe(reset);
      expect(parseWith(updateKeyBody, 'body', { limit_reset: reset }).limit_reset).toBe(reset);
    }
    const bad = failure(() => parseWith(createKeyBody, 'body', { name: 'a', credit_limit: 1, limit_reset: 'yearly' }));
    expect(bad).toMatchObject({ status: 400, type: 'invalid_request_error', param: 'body.limit_reset' });
    expect(bad.message).toBe('body.limit_reset: must be one of daily, weekly, monthly or null');
    expect(failure(() => parseWith(updateKeyBody, 'body', { limit_reset: 'Daily' })).param).toBe('body.limit_reset');
  });

  it('reads expires_at as an ISO 8601 instant with its zone, to the millisecond', () => {
    const at = (value: unknown) => parseWith(createKeyBody, 'body', { name: 'a', credit_limit: null, expires_at: value }).expires_at;
    expect(at('2027-01-31T23:59:59Z')).toBe(Date.UTC(2027, 0, 31, 23, 59, 59));
    expect(at('2027-01-31T23:59:59.123456Z')).toBe(Date.UTC(2027, 0, 31, 23, 59, 59, 123));
    expect(at('2027-02-01T01:30:00+02:00')).toBe(Date.UTC(2027, 0, 31, 23, 30));
    expect(at('2027-01-31T20:00-04:00')).toBe(Date.UTC(2027, 1, 1, 0, 0));
    expect(at('2028-02-29T00:00:00Z')).toBe(Date.UTC(2028, 1, 29));
    expect(at(null)).toBeNull();
    expect(parseWith(updateKeyBody, 'body', { expires_at: null }).expires_at).toBeNull();
    for (const bad of ['2027-02-29T00:00:00Z', '2027-01-31T23:59:59', '2027-01-31', '2027-13-01T00:00:00Z', '2027-01-31T24:00:00Z', 'tomorrow', '']) {
      const error = failure(() => at(bad));
      expect(error.param).toBe('body.expires_at');
      expect(error.message).toMatch(/^body\.expires_at: must be an ISO 8601 date-time with a time zone/);
    }
    expect(failure(() => at(1_800_000_000)).message).toMatch(/^body\.expires_at: must be an ISO 8601 date-time with a time zone .* or null$/);
  });

  it('shows usage_daily/weekly/monthly exactly, limit_remaining of the current window, limit_reset and expires_at', () => {
    const key = {
      id: 'key_w', accountId: 'acct_1', name: 'w', label: 'sk-gw-…', disabled: false, creditLimit: '1', defaultRoutingStrategy: '',
      createdAtMs: 1_767_225_600_000n, updatedAtMs: 1_767_225_600_000n, limitReset: 'weekly', expiresAtMs: 1_801_000_000_123n,
    };
    const spend = { credits: '5.5', creditsDaily: '0.000000000001', creditsWeekly: '0.250000000001', creditsMonthly: '0.75' };
    const text = stringifyWithDecimals(keyRecord(key, spend));
    expect(text).toContain('"usage":5.5');
    expect(text).toContain('"usage_daily":0.000000000001');
    expect(text).toContain('"usage_weekly":0.250000000001');
    expect(text).toContain('"usage_monthly":0.75');
    expect(text).toContain('"limit_remaining":0.749999999999');
    expect(JSON.parse(text)).toMatchObject({ limit_reset: 'weekly', expires_at: '2027-01-26T21:46:40.123Z' });
    // The same key without a window: its lifetime spend is past the limit.
    const lifetime = JSON.parse(stringifyWithDecimals(keyRecord({ ...key, limitReset: '', expiresAtMs: undefined }, spend))) as Record<string, unknown>;
    expect(lifetime).toMatchObject({ limit_reset: null, limit_remaining: 0, expires_at: null, usage_daily: 1e-12 });
  });
});
