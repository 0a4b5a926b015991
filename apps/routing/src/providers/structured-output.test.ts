import { describe, expect, it } from 'vitest';
import { ErrorReason, GatewayError } from '@gateway/platform';
import { jsonSchemaEngineFor } from '@gateway/platform/json-schema';
import type { ChatRequest, ResponseFormat } from '@gateway/proto';
import { ProviderError, type AdapterChatRequest, type AdapterStreamPart, type ProviderAdapterV1 } from './provider-adapter.js';
import { SimulatedAdapter } from './simulated/simulated-adapter.js';
import { InstructedStructuredOutput, JSON_OBJECT_INSTRUCTION, structuredOutputViolation } from './structured-output.js';

function chat(text: string, responseFormat?: ResponseFormat): ChatRequest {
  return {
    context: undefined, modelId: 'm', routingStrategy: '', endpoint: 'chat.completions', tools: [], stop: [], includeUsage: false, timeoutMs: 0,
    messages: [{ role: 'user', content: [{ part: { $case: 'text', value: text } }], toolCalls: [], toolCallId: '', reasoning: [], isError: false }],
    ...(responseFormat ? { responseFormat } : {}),
  };
}

const schemaFormat = (schema: unknown): ResponseFormat => ({ type: 'json_schema', schemaName: 'answer', schema: JSON.stringify(schema) });
const jsonObject: ResponseFormat = { type: 'json_object', schemaName: '', schema: '' };

/** An adapter answering fixed text, recording what it was asked. */
class FixedAdapter implements ProviderAdapterV1 {
  readonly specificationVersion = 'v1' as const;
  readonly providerId = 'fixed';
  readonly kind = 'fixed';
  seen: AdapterChatRequest[] = [];
  constructor(private readonly answer: string, private readonly finishReason = 'stop') {}
  async chat(request: AdapterChatRequest) {
    this.seen.push(request);
    return { choices: [{ index: 0, finishReason: this.finishReason, stopSequence: '', message: { content: this.answer, toolCalls: [], reasoning: [], images: [] } }], usage: undefined };
  }
  async *chatStream(request: AdapterChatRequest): AsyncIterable<AdapterStreamPart> {
    this.seen.push(request);
    for (const piece of [this.answer.slice(0, 3), this.answer.slice(3)]) {
      yield { type: 'delta', delta: { choiceIndex: 0, content: piece, toolCalls: [], reasoning: '', reasoningSignature: '', finishReason: '', images: [], reasoningEncrypted: '', stopSequence: '' } };
    }
    yield { type: 'delta', delta: { choiceIndex: 0, content: '', toolCalls: [], reasoning: '', reasoningSignature: '', finishReason: this.finishReason, images: [], reasoningEncrypted: '', stopSequence: '' } };
  }
  async embed(): Promise<never> { throw new Error('no'); }
  async close() {}
}

const signal = new AbortController().signal;

async function drain(parts: AsyncIterable<AdapterStreamPart>): Promise<string> {
  let text = '';
  for await (const part of parts) if (part.type === 'delta') text += part.delta.content;
  return text;
}

describe('structured output checks', () => {
  const personSchema = {
    type: 'object',
    properties: { name: { type: 'string', minLength: 2 }, age: { type: 'integer', minimum: 0 }, tags: { type: 'array', items: { type: 'string' } } },
    required: ['name', 'age'],
    additionalProperties: false,
  };

  it('names what is wrong with an answer', () => {
    expect(structuredOutputViolation(jsonObject, '{"a":1}')).toBeUndefined();
    expect(structuredOutputViolation(jsonObject, 'Sure! {"a":1}')).toMatch(/not valid JSON/);
    expect(structuredOutputViolation(jsonObject, '[1,2]')).toMatch(/not a JSON object/);
    expect(structuredOutputViolation(schemaFormat(personSchema), '{"name":"Ada","age":36}')).toBeUndefined();
    expect(structuredOutputViolation(schemaFormat(personSchema), '{"name":"Ada"}')).toMatch(/does not match the schema.*age/);
    expect(structuredOutputViolation(schemaFormat(personSchema), '{"name":"Ada","age":-1}')).toMatch(/\/age/);
    expect(structuredOutputViolation(schemaFormat(personSchema), '{"name":"Ada","age":3,"extra":true}')).toMatch(/additional properties/);
    expect(structuredOutputViolation({ type: 'text', schemaName: '', schema: '' }, 'anything')).toBeUndefined();
  });

  it('instructs the provider and passes a conforming answer', async () => {
    const inner = new FixedAdapter('{"name":"Ada","age":36}');
    const adapter = new InstructedStructuredOutput(inner);
    const result = await adapter.chat({ upstreamModel: 'u', chat: chat('Who?', schemaFormat(personSchema)) }, signal);
    expect(result.choices[0]?.message?.content).toBe('{"name":"Ada","age":36}');
    const sent = inner.seen[0]!.chat.messages;
    expect(sent[0]?.role).toBe('system');
    expect(sent[0]?.content[0]?.part).toMatchObject({ $case: 'text' });
    expect(JSON.stringify(sent[0]?.content)).toContain('minLength');
    expect(sent[1]?.role).toBe('user');
  });

  it('json_object without the word json gets the instruction; a prompt naming JSON does not', async () => {
    const inner = new FixedAdapter('{"ok":true}');
    const adapter = new InstructedStructuredOutput(inner);
    await adapter.chat({ upstreamModel: 'u', chat: chat('Three colours', jsonObject) }, signal);
    await adapter.chat({ upstreamModel: 'u', chat: chat('Three colours as json', jsonObject) }, signal);
    expect(inner.seen[0]!.chat.messages[0]?.content[0]?.part).toEqual({ $case: 'text', value: JSON_OBJECT_INSTRUCTION });
    expect(inner.seen[1]!.chat.messages).toHaveLength(1);
  });

  it('a non-conforming answer is a broken answer (retryable: the router fails over)', async () => {
    const adapter = new InstructedStructuredOutput(new FixedAdapter('{"name":"Ada"}'));
    const error = await adapter.chat({ upstreamModel: 'u', chat: chat('Who?', schemaFormat(personSchema)) }, signal).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).retryable).toBe(true);
    expect((error as ProviderError).message).toMatch(/does not match the schema/);
    // Truncated answers (length) are not judged: they were never going to be complete JSON.
    const truncated = new InstructedStructuredOutput(new FixedAdapter('{"name":"A', 'length'));
    await expect(truncated.chat({ upstreamModel: 'u', chat: chat('Who?', schemaFormat(personSchema)) }, signal)).resolves.toBeDefined();
  });

  it('streams pass through and are judged when they end', async () => {
    const good = new InstructedStructuredOutput(new FixedAdapter('{"name":"Ada","age":1}'));
    expect(await drain(good.chatStream({ upstreamModel: 'u', chat: chat('Who?', schemaFormat(personSchema)) }, signal))).toBe('{"name":"Ada","age":1}');
    const bad = new InstructedStructuredOutput(new FixedAdapter('not json at all'));
    await expect(drain(bad.chatStream({ upstreamModel: 'u', chat: chat('Who?', jsonObject) }, signal))).rejects.toThrow(/not valid JSON/);
    const plain = new InstructedStructuredOutput(new FixedAdapter('not json at all'));
    expect(await drain(plain.chatStream({ upstreamModel: 'u', chat: chat('Who?') }, signal))).toBe('not json at all');
  });

  it('an unusable schema is the client\'s 400, typed (not a provider failure), before the provider is called', async () => {
    const cases: Array<[string, unknown]> = [
      ['fails its meta-schema', { type: 'object', properties: { a: { type: 'no-such-type' } } }],
      ['a $ref to nowhere', { type: 'object', properties: { a: { $ref: '#/definitions/missing' } } }],
    ];
    for (const [name, schema] of cases) {
      const inner = new FixedAdapter('{}');
      const adapter = new InstructedStructuredOutput(inner);
      for (const call of [
        () => adapter.chat({ upstreamModel: 'u', chat: chat('x', schemaFormat(schema)) }, signal),
        () => drain(adapter.chatStream({ upstreamModel: 'u', chat: chat('x', schemaFormat(schema)) }, signal)),
      ]) {
        const error = await call().then(() => undefined, (caught: unknown) => caught);
        expect(error, name).toBeInstanceOf(GatewayError);
        expect((error as GatewayError).reason, name).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
        expect((error as GatewayError).param).toBe('body.response_format.json_schema.schema');
        expect((error as GatewayError).code).toBe('invalid_json_schema');
        expect((error as GatewayError).message).toMatch(/^body\.response_format\.json_schema\.schema: not a usable JSON Schema: /);
      }
      expect(inner.seen, name).toHaveLength(0);
    }
  });

  it('keeps a bounded number of compiled schemas, in its own cache and in ajv\'s', async () => {
    const engine = jsonSchemaEngineFor({}) as unknown as { _cache: Map<unknown, unknown> };
    const adapter = new InstructedStructuredOutput(new FixedAdapter('{}'));
    const distinct = (index: number) => schemaFormat({ type: 'object', properties: { [`field${index}`]: { type: 'string' } } });
    await adapter.chat({ upstreamModel: 'u', chat: chat('x', distinct(-1)) }, signal);
    const before = engine._cache.size;
    for (let index = 0; index < 600; index++) await adapter.chat({ upstreamModel: 'u', chat: chat('x', distinct(index)) }, signal);
    // At most the 256 cached validators more than before (the meta-schemas stay).
    expect(engine._cache.size - before).toBeLessThanOrEqual(256);
    // Failed compiles leave nothing behind either.
    const afterValid = engine._cache.size;
    for (let index = 0; index < 50; index++) {
      await adapter.chat({ upstreamModel: 'u', chat: chat('x', schemaFormat({ properties: { [`f${index}`]: { $ref: '#/nowhere' } } })) }, signal).catch(() => undefined);
    }
    expect(engine._cache.size).toBe(afterValid);
  });
});

describe('simulated provider with JSON modes', () => {
  const adapter = new InstructedStructuredOutput(new SimulatedAdapter('sim'));
  const schemas: Array<[string, unknown]> = [
    ['flat object', { type: 'object', properties: { city: { type: 'string' }, population: { type: 'integer', minimum: 1000 } }, required: ['city', 'population'], additionalProperties: false }],
    ['nested, arrays, enums', {
      type: 'object',
      properties: {
        mood: { type: 'string', enum: ['happy', 'sad'] },
        scores: { type: 'array', items: { type: 'number', minimum: 0, maximum: 1 }, minItems: 3 },
        owner: { type: 'object', properties: { email: { type: 'string', format: 'email' }, active: { type: 'boolean' } }, required: ['email', 'active'] },
        note: { anyOf: [{ type: 'string', maxLength: 5 }, { type: 'null' }] },
      },
      required: ['mood', 'scores', 'owner', 'note'],
      additionalProperties: false,
    }],
    ['$defs and $ref, draft 2020-12', {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: { step: { type: 'object', properties: { explanation: { type: 'string' }, output: { type: 'string' } }, required: ['explanation', 'output'] } },
      properties: { steps: { type: 'array', items: { $ref: '#/$defs/step' } }, final_answer: { type: 'string', minLength: 10 } },
      required: ['steps', 'final_answer'],
    }],
  ];

  it.each(schemas)('answers %s with JSON that conforms (streamed and not)', async (_name, schema) => {
    const format = schemaFormat(schema);
    const result = await adapter.chat({ upstreamModel: 'sim-1', chat: chat('Describe something', format) }, signal);
    const content = result.choices[0]!.message!.content;
    expect(structuredOutputViolation(format, content)).toBeUndefined();
    expect(await drain(adapter.chatStream({ upstreamModel: 'sim-1', chat: chat('Describe something', format) }, signal))).toBe(content);
  });

  it('answers json_object with a JSON object', async () => {
    const result = await adapter.chat({ upstreamModel: 'sim-1', chat: chat('Say hi', jsonObject) }, signal);
    expect(typeof JSON.parse(result.choices[0]!.message!.content)).toBe('object');
  });
});
