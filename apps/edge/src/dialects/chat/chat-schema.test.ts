import { describe, expect, it } from 'vitest';
import { EdgeError } from '../../errors.js';
import { parseChatCompletionRequest } from './chat-schema.js';

const valid = { model: 'acme/chat-small', messages: [{ role: 'user', content: 'hi' }] };

function failure(body: unknown): { message: string; param?: string; status: number } {
  try {
    parseChatCompletionRequest(body);
  } catch (error) {
    expect(error).toBeInstanceOf(EdgeError);
    return (error as EdgeError).apiError;
  }
  throw new Error('expected a validation failure');
}

describe('chat completions schema (spec §4.8)', () => {
  it('accepts a complete valid request, nulls as absent, and unknown fields kept', () => {
    const parsed = parseChatCompletionRequest({
      ...valid,
      messages: [
        { role: 'system', content: 'be brief' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look' },
            { type: 'image_url', image_url: { url: 'https://x/y.png', detail: 'low' } },
            { type: 'file', file: { filename: 'a.pdf', file_data: 'data:application/pdf;base64,QUJD' } },
            { type: 'file', file: { file_url: 'https://x/a.pdf' } },
            { type: 'input_audio', input_audio: { data: 'QUJD', format: 'wav' } },
          ],
        },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'result' },
      ],
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
      tool_choice: { type: 'function', function: { name: 'f' } },
      response_format: { type: 'json_schema', json_schema: { name: 's', schema: { type: 'object' }, strict: true } },
      temperature: 2,
      top_p: 0,
      stream: true,
      stream_options: { include_usage: true },
      stop: ['a', 'b'],
      max_tokens: 5,
      reasoning_effort: 'minimal',
      presence_penalty: -2,
      frequency_penalty: 2,
      logit_bias: { '50256': -100 },
      parallel_tool_calls: false,
      prediction: { type: 'content', content: 'x' },
      web_search_options: { search_context_size: 'low' },
      image_config: { aspect_ratio: '21:9' },
      routing: 'latency',
      seed: 3,
      user: null,
    });
    expect(parsed.routing).toBe('latency');
    expect((parsed as Record<string, unknown>).seed).toBe(3);
  });

  const violations: Array<[string, Record<string, unknown>, string]> = [
    ['model missing', { messages: valid.messages }, 'body.model'],
    ['model not a string', { ...valid, model: 3 }, 'body.model'],
    ['messages missing', { model: 'm' }, 'body.messages'],
    ['messages empty', { ...valid, messages: [] }, 'body.messages'],
    ['role unknown', { ...valid, messages: [{ role: 'robot', content: 'x' }] }, 'body.messages.0.role'],
    ['content of wrong type', { ...valid, messages: [{ role: 'user', content: 5 }] }, 'body.messages.0.content'],
    ['block type unknown', { ...valid, messages: [{ role: 'user', content: [{ type: 'video', url: 'x' }] }] }, 'body.messages.0.content.0.type'],
    ['text block without text', { ...valid, messages: [{ role: 'user', content: [{ type: 'text', text: 1 }] }] }, 'body.messages.0.content.0.text'],
    [
      'image detail unknown',
      { ...valid, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'u', detail: 'ultra' } }] }] },
      'body.messages.0.content.0.image_url.detail',
    ],
    ['file without any source', { ...valid, messages: [{ role: 'user', content: [{ type: 'file', file: { filename: 'a' } }] }] }, 'body.messages.0.content.0.file'],
    [
      'audio format unknown',
      { ...valid, messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'QQ==', format: 'ogg' } }] }] },
      'body.messages.0.content.0.input_audio.format',
    ],
    ['tools not an array', { ...valid, tools: {} }, 'body.tools'],
    ['tool without name', { ...valid, tools: [{ type: 'function', function: {} }] }, 'body.tools.0.function.name'],
    ['tool_choice unknown', { ...valid, tool_choice: 'sometimes' }, 'body.tool_choice'],
    ['response_format type unknown', { ...valid, response_format: { type: 'yaml' } }, 'body.response_format.type'],
    ['json_schema without name', { ...valid, response_format: { type: 'json_schema', json_schema: {} } }, 'body.response_format.json_schema.name'],
    ['temperature above 2', { ...valid, temperature: 2.5 }, 'body.temperature'],
    ['temperature below 0', { ...valid, temperature: -0.1 }, 'body.temperature'],
    ['top_p above 1', { ...valid, top_p: 1.5 }, 'body.top_p'],
    ['stream not boolean', { ...valid, stream: 'yes' }, 'body.stream'],
    ['include_usage not boolean', { ...valid, stream_options: { include_usage: 'yes' } }, 'body.stream_options.include_usage'],
    ['stop of numbers', { ...valid, stop: [1] }, 'body.stop.0'],
    ['max_completion_tokens zero', { ...valid, max_completion_tokens: 0 }, 'body.max_completion_tokens'],
    ['max_completion_tokens fractional', { ...valid, max_completion_tokens: 1.5 }, 'body.max_completion_tokens'],
    ['max_tokens zero', { ...valid, max_tokens: 0 }, 'body.max_tokens'],
    ['reasoning_effort unknown', { ...valid, reasoning_effort: 'extreme' }, 'body.reasoning_effort'],
    ['presence_penalty below -2', { ...valid, presence_penalty: -3 }, 'body.presence_penalty'],
    ['frequency_penalty above 2', { ...valid, frequency_penalty: 2.1 }, 'body.frequency_penalty'],
    ['logit_bias not numeric', { ...valid, logit_bias: { '1': 'high' } }, 'body.logit_bias.1'],
    ['parallel_tool_calls not boolean', { ...valid, parallel_tool_calls: 1 }, 'body.parallel_tool_calls'],
    ['prediction not an object', { ...valid, prediction: 'text' }, 'body.prediction'],
    ['web_search_options not an object', { ...valid, web_search_options: true }, 'body.web_search_options'],
    ['aspect ratio unknown', { ...valid, image_config: { aspect_ratio: '7:3' } }, 'body.image_config.aspect_ratio'],
    ['routing unknown', { ...valid, routing: 'fastest' }, 'body.routing'],
    ['tool call without id', { ...valid, messages: [{ role: 'assistant', tool_calls: [{ function: { name: 'f', arguments: '{}' } }] }] }, 'body.messages.0.tool_calls.0.id'],
    ['message not an object', { ...valid, messages: ['hi'] }, 'body.messages.0'],
    ['messages not an array', { ...valid, messages: { role: 'user', content: 'hi' } }, 'body.messages'],
    ['message name not a string', { ...valid, messages: [{ role: 'user', content: 'x', name: 7 }] }, 'body.messages.0.name'],
    ['tool_call_id not a string', { ...valid, messages: [{ role: 'tool', content: 'x', tool_call_id: 7 }] }, 'body.messages.0.tool_call_id'],
    [
      'tool call arguments not a string',
      { ...valid, messages: [{ role: 'assistant', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: {} } }] }] },
      'body.messages.0.tool_calls.0.function.arguments',
    ],
    ['image_url without url', { ...valid, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] }, 'body.messages.0.content.0.image_url.url'],
    ['image_url url empty', { ...valid, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: '' } }] }] }, 'body.messages.0.content.0.image_url.url'],
    ['file_data empty', { ...valid, messages: [{ role: 'user', content: [{ type: 'file', file: { file_data: '' } }] }] }, 'body.messages.0.content.0.file.file_data'],
    ['file_url not a string', { ...valid, messages: [{ role: 'user', content: [{ type: 'file', file: { file_url: 3 } }] }] }, 'body.messages.0.content.0.file.file_url'],
    ['file filename not a string', { ...valid, messages: [{ role: 'user', content: [{ type: 'file', file: { filename: 1, file_data: 'QQ==' } }] }] }, 'body.messages.0.content.0.file.filename'],
    ['input_audio without data', { ...valid, messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { format: 'wav' } }] }] }, 'body.messages.0.content.0.input_audio.data'],
    ['tool type not function', { ...valid, tools: [{ type: 'retrieval', function: { name: 'f' } }] }, 'body.tools.0.type'],
    ['tool parameters not an object', { ...valid, tools: [{ type: 'function', function: { name: 'f', parameters: 'schema' } }] }, 'body.tools.0.function.parameters'],
    ['tool_choice function without name', { ...valid, tool_choice: { type: 'function', function: {} } }, 'body.tool_choice.function.name'],
    ['response_format not an object', { ...valid, response_format: 'json' }, 'body.response_format'],
    [
      'json_schema schema not an object',
      { ...valid, response_format: { type: 'json_schema', json_schema: { name: 's', schema: 'object' } } },
      'body.response_format.json_schema.schema',
    ],
    [
      'json_schema strict not boolean',
      { ...valid, response_format: { type: 'json_schema', json_schema: { name: 's', strict: 'yes' } } },
      'body.response_format.json_schema.strict',
    ],
    ['temperature not a number', { ...valid, temperature: 'warm' }, 'body.temperature'],
    ['top_p below 0', { ...valid, top_p: -0.1 }, 'body.top_p'],
    ['stream_options not an object', { ...valid, stream_options: true }, 'body.stream_options'],
    ['stop neither string nor array', { ...valid, stop: 5 }, 'body.stop'],
    ['max_tokens fractional', { ...valid, max_tokens: 2.5 }, 'body.max_tokens'],
    ['max_completion_tokens not a number', { ...valid, max_completion_tokens: '10' }, 'body.max_completion_tokens'],
    ['presence_penalty above 2', { ...valid, presence_penalty: 2.5 }, 'body.presence_penalty'],
    ['frequency_penalty below -2', { ...valid, frequency_penalty: -2.5 }, 'body.frequency_penalty'],
    ['logit_bias not an object', { ...valid, logit_bias: [1] }, 'body.logit_bias'],
    ['image_config not an object', { ...valid, image_config: '16:9' }, 'body.image_config'],
    ['routing not a string', { ...valid, routing: 1 }, 'body.routing'],
    // Issue 37 item 6: n within OpenAI's 1–128; a seed is an exact integer; verbosity and store as OpenAI spells them.
    ['n above 128', { ...valid, n: 129 }, 'body.n'],
    ['n of 0', { ...valid, n: 0 }, 'body.n'],
    ['top_logprobs above 20', { ...valid, logprobs: true, top_logprobs: 21 }, 'body.top_logprobs'],
    ['logprobs not a boolean', { ...valid, logprobs: 'yes' }, 'body.logprobs'],
    ['seed fractional', { ...valid, seed: 1.5 }, 'body.seed'],
    ['seed beyond a safe integer', { ...valid, seed: 2 ** 53 }, 'body.seed'],
    ['seed a string', { ...valid, seed: '7' }, 'body.seed'],
    ['verbosity unknown', { ...valid, verbosity: 'terse' }, 'body.verbosity'],
    ['store not a boolean', { ...valid, store: 'yes' }, 'body.store'],
  ];

  it('n up to 128 parses (whether the model answers several choices is the conversion’s to say)', () => {
    expect(() => parseChatCompletionRequest({ ...valid, n: 128, seed: -(2 ** 53 - 1), verbosity: 'high', store: false, logprobs: true, top_logprobs: 20 })).not.toThrow();
  });

  it.each(violations)('%s -> 400 naming %s', (_name, body, path) => {
    const apiError = failure(body);
    expect(apiError.status).toBe(400);
    expect(apiError.param).toBe(path);
    expect(apiError.message.startsWith(`${path}: `)).toBe(true);
  });

  const accepted: Array<[string, Record<string, unknown>]> = [
    ['stop as one string', { stop: 'END' }],
    ['max_completion_tokens 1', { max_completion_tokens: 1 }],
    ['temperature 0 and top_p 1', { temperature: 0, top_p: 1 }],
    ['penalties at -2 and 2', { presence_penalty: 2, frequency_penalty: -2 }],
    ['tool_choice none / auto / required', { tool_choice: 'required' }],
    ['response_format text', { response_format: { type: 'text' } }],
    ['response_format json_object', { response_format: { type: 'json_object' } }],
    ['json_schema without schema', { response_format: { type: 'json_schema', json_schema: { name: 's' } } }],
    ['stream false with include_usage false', { stream: false, stream_options: { include_usage: false } }],
    // `none` is a current model's default (the Agents SDK sends it); `xhigh` the catalog and /v1/responses take too.
    ...['none', 'minimal', 'low', 'medium', 'high', 'xhigh'].map((effort): [string, Record<string, unknown>] => [`reasoning_effort ${effort}`, { reasoning_effort: effort }]),
    ...['1:1', '2:3', '3:2', '3:4', '4:3', '4:5', '5:4', '9:16', '16:9', '21:9'].map(
      (ratio): [string, Record<string, unknown>] => [`aspect ratio ${ratio}`, { image_config: { aspect_ratio: ratio } }],
    ),
    ...['reliability', 'balanced', 'latency', 'throughput', 'cache'].map((routing): [string, Record<string, unknown>] => [`routing ${routing}`, { routing }]),
    ...['low', 'high', 'auto'].map((detail): [string, Record<string, unknown>] => [
      `image detail ${detail}`,
      { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/y.png', detail } }] }] },
    ]),
    ['audio mp3', { messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'QQ==', format: 'mp3' } }] }] }],
    ['file_id (refused later with its own code)', { messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: 'file-1' } }] }] }],
    ['developer role', { messages: [{ role: 'developer', content: 'rules' }, { role: 'user', content: 'hi' }] }],
  ];

  it.each(accepted)('accepts %s', (_name, fields) => {
    expect(() => parseChatCompletionRequest({ ...valid, ...fields })).not.toThrow();
  });

  it('a body that is not an object names the body', () => {
    expect(failure([1, 2]).message).toMatch(/^body: /);
  });
});

describe('the usual chat body checked by hand (plainChatRequest, issue 39)', () => {
  // Values of every kind for each field the hand check knows, in and out of the schema's bounds.
  const VALUES: unknown[] = [null, undefined, true, false, 0, 1, -1, 0.5, 1.5, 2, 2.5, -2, -2.5, 3, 20, 21, 128, 129, 4_294_967_295, 4_294_967_296,
    Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER + 2, 1e300, '', 'x', 'user', [], {}, { include_usage: true }, { include_usage: null },
    { include_usage: 'yes' }, { include_usage: true, other: 1 }];
  const FIELDS = ['temperature', 'top_p', 'presence_penalty', 'frequency_penalty', 'max_tokens', 'max_completion_tokens', 'stream', 'user', 'seed', 'n',
    'logprobs', 'top_logprobs', 'parallel_tool_calls', 'store', 'prompt_cache_key', 'stream_options',
    // Fields the hand check leaves to the schema, and names no schema field has.
    'tools', 'stop', 'routing', 'models', 'cache_control', 'extra_thing', '__proto__'];
  const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'];
  const BAD_ROLES = ['robot', '', 3, null];

  /** A small seeded generator (the same bodies every run). */
  function generator(seed: number) {
    let state = seed;
    const next = () => (state = (state * 1_103_515_245 + 12_345) % 2_147_483_648);
    const pick = <T>(list: readonly T[]): T => list[next() % list.length]!;
    const message = (): unknown => {
      if (next() % 40 === 0) return pick([null, 'text', [], 7]);
      const built: Record<string, unknown> = {};
      if (next() % 25 !== 0) built.role = next() % 12 === 0 ? pick(BAD_ROLES) : pick(ROLES);
      const content = next() % 10;
      if (content < 6) built.content = pick(['hi', '', 'a longer line of text']);
      else if (content === 6) built.content = null;
      else if (content === 7) built.content = [{ type: 'text', text: 'hi' }];
      else if (content === 8) built.content = pick([3, true, undefined]);
      if (next() % 6 === 0) built.name = pick(['alice', null, 4, '']);
      if (next() % 15 === 0) built[pick(['tool_call_id', 'reasoning', 'extra'])] = pick(['x', null, 1]);
      return built;
    };
    return (): unknown => {
      if (next() % 60 === 0) return pick([null, [], 'body', 3]);
      const body: Record<string, unknown> = {};
      if (next() % 20 !== 0) body.model = pick(['acme/chat-small', '', 5, null]);
      if (next() % 20 !== 0) {
        const count = next() % 25 === 0 ? 0 : 1 + (next() % 4);
        body.messages = next() % 40 === 0 ? 'not a list' : Array.from({ length: count }, message);
      }
      const extra = next() % 4;
      for (let index = 0; index < extra; index++) {
        const field = pick(FIELDS);
        const value = pick(VALUES);
        if (field === '__proto__') Object.defineProperty(body, field, { value, enumerable: true, configurable: true, writable: true });
        else body[field] = value;
      }
      return body;
    };
  }

  it('answers what the schema answers, for 20,000 seeded bodies, and leaves every other body to it', async () => {
    const { plainChatRequest } = await import('./plain-chat-request.js');
    const { chatCompletionRequest } = await import('./chat-schema.js');
    const next = generator(39);
    let taken = 0;
    let refused = 0;
    for (let index = 0; index < 20_000; index++) {
      const body = next();
      const snapshot = JSON.stringify(body);
      const fast = plainChatRequest(body);
      const schema = chatCompletionRequest.safeParse(body);
      if (!schema.success) refused++;
      if (fast === undefined) continue;
      taken++;
      expect(schema.success, snapshot).toBe(true);
      expect(fast, snapshot).toStrictEqual(schema.data);
      // The body itself is left as it was, and the answer shares no object with it (as the schema's).
      expect(JSON.stringify(body)).toBe(snapshot);
      expect(fast).not.toBe(body);
      expect((fast as { messages: unknown[] }).messages).not.toBe((body as { messages: unknown[] }).messages);
    }
    // Both ways were taken often: the comparison means something.
    expect(taken).toBeGreaterThan(2_000);
    expect(refused).toBeGreaterThan(2_000);
  });

  it('takes the usual request (the bench\'s, an SDK\'s with nulls) and words a refusal as the schema does', async () => {
    const { plainChatRequest } = await import('./plain-chat-request.js');
    const usual = { model: 'acme/chat-small', messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi', name: 'ann' }], max_tokens: 16,
      temperature: 0.2, stream: true, stream_options: { include_usage: true }, user: null, seed: null };
    expect(plainChatRequest(usual)).toStrictEqual(usual);
    expect(parseChatCompletionRequest(usual)).toStrictEqual(usual);
    // Out of bounds: the schema's 400, naming the field.
    expect(plainChatRequest({ ...usual, temperature: 3 })).toBeUndefined();
    expect(failure({ ...usual, temperature: 3 }).param).toBe('body.temperature');
    expect(plainChatRequest({ ...usual, messages: [{ role: 'robot', content: 'x' }] })).toBeUndefined();
    expect(failure({ ...usual, messages: [{ role: 'robot', content: 'x' }] }).param).toBe('body.messages.0.role');
    // `models` names the model when `model` is absent (routing choices): the schema's way.
    expect(parseChatCompletionRequest({ models: ['acme/chat-small'], messages: usual.messages }).model).toBe('acme/chat-small');
  });
});
