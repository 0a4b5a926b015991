import { describe, expect, it } from 'vitest';
import { parseBody } from './validation.js';
import { MAX_SCHEMA_ENUM_VALUES, MAX_SCHEMA_NODES, requireValidSchema } from './model-checks.js';
import { ToolPairing } from './tool-pairing.js';
import { requireFetchableUrl } from './urls.js';
import { parseChatCompletionRequest } from '../dialects/chat/chat-schema.js';
import { parseMessagesRequest } from '../dialects/messages/messages-schema.js';
import { parseResponsesRequest } from '../dialects/responses/responses-schema.js';
import { embeddingsSchema } from '../endpoints/embeddings/embeddings-endpoint.js';
import { editsSchema, generationsSchema } from '../endpoints/images/images-endpoint.js';
import { TokenCounter, countTextsTokens, MAX_TOKENIZED_CHARACTERS } from '../inference/tokenizer.js';
import { refusalOf } from '../../test/refusal.js';

/** The refusal `run` throws: an EdgeError with a 4xx. */
function refusal(run: () => unknown) {
  const apiError = refusalOf(run);
  expect(apiError.status).toBeGreaterThanOrEqual(400);
  expect(apiError.status).toBeLessThan(500);
  return apiError;
}

describe('client integers that go into uint32 fields of the Router call (issue 29)', () => {
  const TOO_BIG = 2 ** 32;
  const cases: Array<[string, () => unknown, string]> = [
    ['chat max_completion_tokens', () => parseChatCompletionRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: TOO_BIG }), 'body.max_completion_tokens'],
    ['chat max_tokens', () => parseChatCompletionRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: TOO_BIG }), 'body.max_tokens'],
    ['messages max_tokens', () => parseMessagesRequest({ model: 'm', max_tokens: TOO_BIG, messages: [{ role: 'user', content: 'hi' }] }), 'body.max_tokens'],
    ['messages top_k', () => parseMessagesRequest({ model: 'm', max_tokens: 5, top_k: TOO_BIG, messages: [{ role: 'user', content: 'hi' }] }), 'body.top_k'],
    ['messages thinking.budget_tokens', () => parseMessagesRequest({ model: 'm', max_tokens: 5, thinking: { type: 'enabled', budget_tokens: TOO_BIG }, messages: [{ role: 'user', content: 'hi' }] }), 'body.thinking.budget_tokens'],
    ['responses max_output_tokens', () => parseResponsesRequest({ model: 'm', input: 'hi', max_output_tokens: TOO_BIG }), 'body.max_output_tokens'],
    ['embeddings dimensions', () => parseBody(embeddingsSchema, { model: 'm', input: 'hi', dimensions: TOO_BIG }), 'body.dimensions'],
    ['images n', () => parseBody(generationsSchema, { model: 'm', prompt: 'a cat', n: TOO_BIG }), 'body.n'],
    ['image edits n (multipart text)', () => parseBody(editsSchema, { model: 'm', prompt: 'a cat', n: String(TOO_BIG) }), 'body.n'],
  ];
  it.each(cases)('%s = 2^32: 400 naming the field', (_name, run, param) => {
    const error = refusal(run);
    expect(error.param).toBe(param);
    expect(error.message).toContain(param);
  });

  it('2^32 - 1 still passes where the field has no smaller bound', () => {
    expect(parseBody(embeddingsSchema, { model: 'm', input: 'hi', dimensions: 2 ** 32 - 1 }).dimensions).toBe(2 ** 32 - 1);
  });
});

describe('JSON schema bounds (issue 29)', () => {
  const param = 'body.response_format.json_schema.schema';

  it('an enum of 100,000 strings is a 400 naming the enum bound, without the meta-schema check', () => {
    const schema = { type: 'object', properties: { a: { type: 'string', enum: Array.from({ length: 100_000 }, (_, index) => `value-${index}`) } } };
    const error = refusal(() => requireValidSchema(schema, param));
    expect(error).toMatchObject({ param, code: 'json_schema_too_large' });
    expect(error.message).toContain(`at most ${MAX_SCHEMA_ENUM_VALUES}`);
  });

  it('enums add up across the schema', () => {
    const properties = Object.fromEntries(Array.from({ length: 3 }, (_, index) => [`p${index}`, { enum: Array.from({ length: 400 }, (_, value) => value) }]));
    expect(refusal(() => requireValidSchema({ type: 'object', properties }, param)).code).toBe('json_schema_too_large');
  });

  it('a schema of more than the node bound is a 400 naming it; one within it passes', () => {
    const wide = (count: number) => ({ type: 'object', properties: Object.fromEntries(Array.from({ length: count }, (_, index) => [`p${index}`, { type: 'string' }])) });
    const error = refusal(() => requireValidSchema(wide(MAX_SCHEMA_NODES), param));
    expect(error.message).toContain(`at most ${MAX_SCHEMA_NODES}`);
    expect(() => requireValidSchema(wide(500), param)).not.toThrow();
    expect(() => requireValidSchema({ type: 'object', properties: { a: { enum: Array.from({ length: MAX_SCHEMA_ENUM_VALUES }, (_, value) => `v${value}`) } } }, param)).not.toThrow();
  });
});

describe('duplicate tool call ids (issue 29)', () => {
  it('a second call with the same id is a 400 naming the id and both places', () => {
    const pairing = new ToolPairing();
    pairing.call('toolu_1', 'body.messages.1.content.0');
    const error = refusal(() => pairing.call('toolu_1', 'body.messages.3.content.0'));
    expect(error).toMatchObject({ param: 'body.messages.3.content.0', code: 'duplicate_tool_call_id' });
    expect(error.message).toContain('toolu_1');
    expect(error.message).toContain('body.messages.1.content.0');
  });
});

describe('URLs of images and files (issue 29)', () => {
  it.each(['file:///etc/passwd', 'FILE:///srv/x.wav', 'ftp://example.com/a.png', 'gopher://x', 'javascript:alert(1)', '/v1/images/files/abc', 'https://', 'http:///etc/passwd', 'not a url'])(
    '%s is a 400 naming the field',
    (url) => {
      const error = refusal(() => requireFetchableUrl(url, 'body.messages.0.content.1.image_url.url'));
      expect(error).toMatchObject({ param: 'body.messages.0.content.1.image_url.url', code: 'invalid_url' });
      expect(error.message).toContain('https, http or data URL');
    },
  );

  it.each(['https://example.com/a.png', 'HTTP://127.0.0.1:8080/x', 'data:image/png;base64,iVBORw0KGgo='])('%s passes', (url) => {
    expect(requireFetchableUrl(url, 'p')).toBe(url);
  });
});

describe('TokenCounter (issue 29)', () => {
  it('counts a 160,000-letter word in cut pieces (linear work), and lets the event loop run in between', async () => {
    let turns = 0;
    const ticker = setInterval(() => turns++, 0);
    try {
      const [count] = await countTextsTokens(['a'.repeat(160_000)]);
      expect(count).toBeGreaterThanOrEqual(160_000 / 256);
      expect(count).toBeLessThanOrEqual(160_000);
    } finally {
      clearInterval(ticker);
    }
    // Timers ran while the word was counted: the count yielded between its slices.
    expect(turns).toBeGreaterThan(0);
  });

  it('counts ordinary text as the tokenizer does', async () => {
    const { encode } = await import('gpt-tokenizer');
    const text = 'The gateway routes each request to a provider that serves the model. '.repeat(100);
    expect(await countTextsTokens([text])).toEqual([encode(text).length]);
  });

  it('beyond the per-request budget, text is counted by its UTF-8 bytes (an upper bound), not tokenized', async () => {
    const counter = new TokenCounter();
    const first = 'word '.repeat(MAX_TOKENIZED_CHARACTERS / 5);
    const firstCount = await counter.count(first);
    expect(firstCount).toBeLessThan(first.length);
    const rest = 'é'.repeat(1_000);
    expect(await counter.count(rest)).toBe(2_000);
  });
});
