import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import type { ChatRequest, ChatStreamResponse, GetSnapshotResponse } from '@gateway/proto';
import { ErrorReason, GatewayError, GrpcStatus } from '@gateway/platform';
import { createTestBus, eventually, testLogger, type TestBus } from '@gateway/testing';
import { startEdge, type RunningEdge } from '../src/index.js';
import { chatResponse, model, startEvent, startFakeServices, usage, type FakeServices } from './fakes.js';
import { canonicalDelta, rawEvents, toolCallDelta } from './responses-support.js';

// POST /v1/responses through the real edge (HTTP, pipeline, admission calls) with the real `openai`
// client, against scripted gRPC fakes of the services: what the router is asked (the canonical
// request, reasoning provenance included) and what the client gets for each router answer.

const logger = testLogger('edge-responses-test');
const MODEL = 'acme/reasoner';

function snapshot(): GetSnapshotResponse {
  return {
    version: 'v1',
    unchanged: false,
  moderationModel: '', defaultModels: {},
    models: [
      model({
        id: MODEL,
        aliases: ['reasoner'],
        supportedParameters: ['temperature', 'max_completion_tokens', 'tools', 'tool_choice', 'response_format', 'reasoning'],
        reasoningEfforts: ['low', 'high'],
        offers: [{ providerId: 'acme-cloud', upstreamModel: 'up', endpoints: ['chat.completions', 'responses'] }],
      }),
      model({ id: 'acme/chat-only', offers: [{ providerId: 'acme-cloud', upstreamModel: 'up', endpoints: ['chat.completions'] }] }),
    ],
    providers: [],
    startups: [{ id: 'acme', displayName: 'Acme AI', iconUrl: '/static/startups/acme.svg', created: 1_767_000_000n }],
    limitGroups: [{ id: 'default', tiers: { 'tier-1': { minute: 600 } } }],
  };
}

let testBus: TestBus;
let fakes: FakeServices;
let edge: RunningEdge;
let client: OpenAI;

beforeAll(async () => {
  testBus = await createTestBus('nats');
  fakes = await startFakeServices(snapshot(), logger);
  fakes.auth.apiKeys.set('sk-good', { accountId: 'acct_1', keyId: 'key_1', tier: 'tier-1', defaultRoutingStrategy: '' });
  fakes.ledger.available.set('acct_1', '10');
  edge = await startEdge({ port: 0, ...fakes.addresses, bus: testBus.bus, logger, admission: 'ledger', reasoningTagKey: 'edge-responses-test-tag-key' });
  client = new OpenAI({ baseURL: `${edge.url}/v1`, apiKey: 'sk-good', maxRetries: 0 });
});

afterAll(async () => {
  await edge?.stop();
  await fakes?.stop();
  await testBus?.destroy();
});

const defaultChat = (request: ChatRequest) => Promise.resolve(chatResponse(request, 'Hello there.'));
beforeEach(() => {
  fakes.router.chatAnswer = defaultChat;
});

async function withStream<T>(script: (request: ChatRequest) => AsyncIterable<ChatStreamResponse>, run: () => Promise<T>): Promise<T> {
  const previous = fakes.router.streamScript;
  fakes.router.streamScript = script;
  try {
    return await run();
  } finally {
    fakes.router.streamScript = previous;
  }
}

const deltaMessage = (fields: Parameters<typeof canonicalDelta>[0]): ChatStreamResponse => ({ event: { $case: 'delta', value: canonicalDelta(fields) } });

/** A stream whose provider thinks (signed), says something and calls a tool. */
async function* thinkingToolStream(request: ChatRequest): AsyncIterable<ChatStreamResponse> {
  yield startEvent(request);
  yield deltaMessage({ reasoning: 'The user wants the weather; ' });
  yield deltaMessage({ reasoning: 'call the tool.' });
  yield deltaMessage({ reasoningSignature: 'provider-signature-1' });
  yield deltaMessage({ content: 'Let me check.' });
  yield deltaMessage({ toolCalls: [toolCallDelta(0, { id: 'call_w1', name: 'weather', arguments: '{"city":' })] });
  yield deltaMessage({ toolCalls: [toolCallDelta(0, { arguments: '"Paris"}' })], finishReason: 'tool_calls' });
  yield { event: { $case: 'usage', value: { ...usage(40, 20), reasoningTokens: 8 } } };
}

describe('POST /v1/responses with the openai SDK', () => {
  it('answers client.responses.create: resp_ id of the request, catalog model, output_text, usage; the router gets the canonical request', async () => {
    const { data: response, response: http } = await client.responses
      .create({ model: 'reasoner', instructions: 'Be brief.', input: 'Hi', temperature: 0.2, reasoning: { effort: 'medium' }, metadata: { ticket: '7' } })
      .withResponse();
    expect(response.id).toBe(`resp_${http.headers.get('x-gateway-request-id')!.slice('req_'.length)}`);
    expect(response.object).toBe('response');
    expect(response.model).toBe(MODEL);
    expect(response.output_text).toBe('Hello there.');
    expect(response.metadata).toEqual({ ticket: '7' });
    expect(response.usage).toMatchObject({ input_tokens: 11, output_tokens: 3, total_tokens: 14 });
    expect(http.headers.get('x-gateway-dropped-params')).toBe('metadata');
    const chat = fakes.router.chats.at(-1)!;
    expect(chat).toMatchObject({ modelId: MODEL, endpoint: 'responses', temperature: 0.2, reasoningEffort: 'high' });
    expect(chat.messages.map((message) => message.role)).toEqual(['system', 'user']);
  });

  it('streams events with sequence numbers in order, and the SDK stream helper assembles reasoning, message and call', async () => {
    await withStream(thinkingToolStream, async () => {
      const stream = client.responses.stream({ model: 'reasoner', input: 'Weather in Paris?', tools: [{ type: 'function', name: 'weather', parameters: { type: 'object' }, strict: false }] });
      const types: string[] = [];
      const sequence: number[] = [];
      stream.on('event', (event) => {
        types.push(event.type);
        sequence.push(event.sequence_number);
      });
      const final = await stream.finalResponse();
      expect(sequence).toEqual(types.map((_, index) => index));
      expect(types[0]).toBe('response.created');
      expect(types.at(-1)).toBe('response.completed');
      expect(types.indexOf('response.reasoning_summary_text.delta')).toBeLessThan(types.indexOf('response.output_text.delta'));
      expect(types.indexOf('response.output_text.delta')).toBeLessThan(types.indexOf('response.function_call_arguments.delta'));
      expect(final.output.map((item) => item.type)).toEqual(['reasoning', 'message', 'function_call']);
      expect(final.output_text).toBe('Let me check.');
      expect(final.output[2]).toMatchObject({ type: 'function_call', call_id: 'call_w1', name: 'weather', arguments: '{"city":"Paris"}', status: 'completed' });
      expect(final.usage).toMatchObject({ input_tokens: 40, output_tokens: 20, output_tokens_details: { reasoning_tokens: 8 } });
    });
  });

  it('reasoning round trip: tagged reasoning goes back to the router with its issuer; an edited tag is dropped whole', async () => {
    const first = await withStream(thinkingToolStream, () =>
      client.responses.stream({ model: 'reasoner', input: 'Weather in Paris?', tools: [{ type: 'function', name: 'weather', parameters: null, strict: null }] }).finalResponse(),
    );
    const reasoning = first.output[0] as OpenAI.Responses.ResponseReasoningItem;
    expect(reasoning.encrypted_content).toMatch(/^gw1\./);

    const replay = (items: OpenAI.Responses.ResponseInputItem[]) =>
      client.responses.create({
        model: 'reasoner',
        input: [
          { role: 'user', content: 'Weather in Paris?' },
          ...items,
          { type: 'function_call_output', call_id: 'call_w1', output: '{"sky":"clear"}' },
        ],
      });
    // The client sends back exactly what it got.
    await replay(first.output as OpenAI.Responses.ResponseInputItem[]);
    const assistant = fakes.router.chats.at(-1)!.messages[1]!;
    expect(assistant.role).toBe('assistant');
    expect(assistant.toolCalls).toEqual([{ id: 'call_w1', name: 'weather', arguments: '{"city":"Paris"}' }]);
    expect(assistant.reasoning).toEqual([
      { text: 'The user wants the weather; call the tool.', signature: 'provider-signature-1', encryptedData: '', providerId: 'acme-cloud' },
    ]);
    expect(fakes.router.chats.at(-1)!.messages.map((message) => message.role)).toEqual(['user', 'assistant', 'tool']);

    // The same item with an edited tag (another issuer claimed): nothing of it reaches the router.
    const forged = { ...reasoning, encrypted_content: reasoning.encrypted_content!.replace(Buffer.from('acme-cloud').toString('base64url'), Buffer.from('other').toString('base64url')) };
    await replay([forged, ...(first.output.slice(1) as OpenAI.Responses.ResponseInputItem[])]);
    const stripped = fakes.router.chats.at(-1)!.messages[1]!;
    expect(stripped.reasoning).toEqual([]);
    expect(JSON.stringify(fakes.router.chats.at(-1)!.messages)).not.toContain('The user wants the weather');
  });

  it('a failure after content ends with response.failed then error (raw SSE), and the SDK throws', async () => {
    const failing = async function* (request: ChatRequest) {
      yield startEvent(request);
      yield deltaMessage({ content: 'partial ' });
      throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, 'provider reset', { retryAfterSeconds: 2 });
    };
    await withStream(failing, async () => {
      const raw = await fetch(`${edge.url}/v1/responses`, {
        method: 'POST',
        headers: { authorization: 'Bearer sk-good', 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'reasoner', input: 'Hi', stream: true }),
      });
      expect(raw.status).toBe(200);
      const events = rawEvents(await raw.text());
      expect(events.map((event) => event.event)).toEqual([
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
        'response.output_text.delta',
        'response.failed',
        'error',
      ]);
      expect(events.at(-1)!.data).toMatchObject({ type: 'error', code: 'no_upstream', message: 'No upstream available.' });

      const stream = await client.responses.create({ model: 'reasoner', input: 'Hi', stream: true });
      let text = '';
      const failure = await (async () => {
        for await (const event of stream) if (event.type === 'response.output_text.delta') text += event.delta;
      })().catch((error: unknown) => error);
      expect(text).toBe('partial ');
      expect(failure).toBeInstanceOf(OpenAI.APIError);
      expect((failure as Error).message).toContain('No upstream available.');
    });
  });

  it('a failure before any content is a plain HTTP error in the OpenAI envelope, and the reservation is released', async () => {
    const failing = async function* (request: ChatRequest) {
      yield startEvent(request);
      throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, 'every attempt failed', { retryAfterSeconds: 3 });
    };
    await withStream(failing, async () => {
      const failure = await client.responses.create({ model: 'reasoner', input: 'Hi', stream: true }).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(OpenAI.APIError);
      const apiError = failure as InstanceType<typeof OpenAI.APIError>;
      expect(apiError.status).toBe(503);
      expect(apiError.headers?.get('retry-after')).toBe('3');
      const requestId = apiError.headers?.get('x-gateway-request-id');
      await eventually(() => expect(fakes.ledger.releases.some((release) => release.context?.requestId === requestId)).toBe(true));
    });
  });

  it('refuses before admission: item_reference, previous_response_id, an unmatched output, a model without the endpoint', async () => {
    const admitsBefore = fakes.ledger.admits.length;
    const refusal = (body: Record<string, unknown>) =>
      client.responses.create({ model: 'reasoner', input: 'Hi', ...body } as OpenAI.Responses.ResponseCreateParamsNonStreaming).then(
        () => {
          throw new Error('expected a refusal');
        },
        (error: unknown) => error as InstanceType<typeof OpenAI.BadRequestError>,
      );

    const reference = await refusal({ input: [{ role: 'user', content: 'Hi' }, { type: 'item_reference', id: 'msg_1' }] });
    expect(reference).toBeInstanceOf(OpenAI.BadRequestError);
    expect(reference.error).toMatchObject({ type: 'invalid_request_error', param: 'body.input.1' });

    const previous = await refusal({ previous_response_id: 'resp_abc' });
    expect(previous.status).toBe(400);
    expect(previous.error).toMatchObject({ param: 'body.previous_response_id' });
    expect(previous.message).toMatch(/stores no responses/);

    const unmatched = await refusal({ input: [{ role: 'user', content: 'Hi' }, { type: 'function_call_output', call_id: 'call_x', output: 'r' }] });
    expect(unmatched.error).toMatchObject({ code: 'tool_output_unmatched', param: 'body.input.1.call_id' });

    const endpoint = await refusal({ model: 'acme/chat-only' });
    expect(endpoint.error).toMatchObject({ code: 'unsupported_endpoint' });
    expect(fakes.ledger.admits.length).toBe(admitsBefore);
  });
});
