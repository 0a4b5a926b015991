import { isDeepStrictEqual } from 'node:util';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import type { FakeBehaviour, FakeUpstream, RecordedRequest } from '@gateway/testing';
import { resetFakes, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { reasoningSent, UPSTREAM_KINDS, type UpstreamKind } from './messages-e2e-harness.js';

// POST /v1/responses end to end, every hop real (edge, auth, ledger, router, a fake provider speaking
// its real wire format over HTTP), driven by the real `openai` client's `client.responses`. The
// provider's wire format is a parameter: each upstream kind of the messages suite (UPSTREAM_KINDS in
// messages-e2e-harness.ts: the OpenAI-compatible and the Anthropic-wire fakes) runs the whole suite.

const MAIN = 'testco/main';
const DUAL = 'testco/dual';
const BILLED = 'testco/billed';
const PROVIDER_KEY_ENV = 'RESPONSES_E2E_KEY';

/** The conversation a provider received, compactly: role, text, calls made, call answered. */
function turns(kind: UpstreamKind, request: RecordedRequest) {
  return kind.conversation(request).map((message) => ({
    role: message.role,
    text: message.text,
    ...(message.toolCalls.length > 0 ? { toolCalls: message.toolCalls } : {}),
    ...(message.toolResultFor ? { answers: message.toolResultFor } : {}),
  }));
}


/**
 * Whether a request asked for this structured-output schema: natively (OpenAI-compatible
 * `response_format`), or in the instruction the gateway writes for providers without native support.
 */
function schemaSent(kind: UpstreamKind, request: RecordedRequest, schema: unknown): boolean {
  if (kind.kind === 'openai') return isDeepStrictEqual(request.body.response_format?.json_schema?.schema, schema);
  return kind.conversation(request).some((message) => message.role === 'system' && message.text.includes(JSON.stringify(schema)));
}

function catalog(kind: UpstreamKind, first: FakeUpstream, second: FakeUpstream): string {
  const model = (id: string, offers: string[]) => `
  - id: ${id}
    owned_by: testco
    created: 1767225600
    input_modalities: [text]
    output_modalities: [text]
    supported_parameters: [tools, tool_choice, response_format, temperature, max_completion_tokens, reasoning, stream_options]
    reasoning_efforts: [low, high]
    pricing: { per_input_token: "0.000001", per_output_token: "0.000002" }
    limit_group: default
    offers:${offers.map((provider) => `
      - { provider: ${provider}, upstream_model: ${id.split('/')[1]}-upstream, endpoints: [chat.completions, responses] }`).join('')}`;
  return `
startups:
  - { id: testco, display_name: Test Co }
providers:
${kind.provider('upstream-one', first, PROVIDER_KEY_ENV)}
${kind.provider('upstream-two', second, PROVIDER_KEY_ENV)}
limit_groups:
  - id: default
    tiers: { tier-1: { minute: 600 } }
models:${model(MAIN, ['upstream-one'])}${model(DUAL, ['upstream-one', 'upstream-two'])}${model(BILLED, ['upstream-one'])}
`;
}

/** `event:` names and data of SSE text, read without any SDK. */
function sseEvents(text: string): { event: string; data: Record<string, unknown> }[] {
  return text
    .split('\n\n')
    .filter((frame) => frame.trim() !== '')
    .map((frame) => {
      const lines = frame.split('\n');
      return {
        event: lines.find((line) => line.startsWith('event: '))?.slice(7) ?? '',
        data: JSON.parse(lines.find((line) => line.startsWith('data: '))?.slice(6) ?? '{}') as Record<string, unknown>,
      };
    });
}

describe.each(UPSTREAM_KINDS)('POST /v1/responses on an $kind upstream, end to end', (kind) => {
  let one: FakeUpstream;
  let two: FakeUpstream;
  let harness: ChatHarness;

  beforeAll(async () => {
    one = await kind.start();
    two = await kind.start();
    harness = await startChatHarness({
      configYaml: catalog(kind, one, two),
      providerSecrets: { [PROVIDER_KEY_ENV]: 'sk-responses-e2e' },
      routing: { attemptTimeoutMs: 2_000, maxAttempts: 3 },
    });
  }, 120_000);

  afterAll(() => stopHarnessAndFakes(harness, [one, two]));

  beforeEach(() => resetFakes([one, two]));

  const responsesUrl = () => `${harness.stack.url}/v1/responses`;
  const postRaw = (body: Record<string, unknown>) =>
    fetch(responsesUrl(), { method: 'POST', headers: { authorization: `Bearer ${harness.apiKey}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });

  it('create: the SDK computes output_text; the provider got the instructions and the input', async () => {
    one.script({ text: 'Gateways route requests.' });
    const { data: response, response: http } = await harness.client.responses
      .create({ model: MAIN, instructions: 'Answer in one sentence.', input: 'What does a gateway do?', max_output_tokens: 50 })
      .withResponse();
    expect(response.id).toBe(`resp_${http.headers.get('x-gateway-request-id')!.slice(4)}`);
    expect(response).toMatchObject({ object: 'response', status: 'completed', model: MAIN, store: true, max_output_tokens: 50 });
    expect(response.output_text).toBe('Gateways route requests.');
    expect(response.usage!.input_tokens).toBeGreaterThan(0);
    expect(response.usage!.total_tokens).toBe(response.usage!.input_tokens + response.usage!.output_tokens);
    expect(one.requests).toHaveLength(1);
    expect(turns(kind, one.requests[0]!)).toEqual([
      { role: 'system', text: 'Answer in one sentence.' },
      { role: 'user', text: 'What does a gateway do?' },
    ]);
  });

  it('stream: events in order with increasing sequence numbers (raw SSE), and the SDK helper assembles the answer', async () => {
    one.script({ text: 'Streaming through the gateway.', chunkCount: 4 }, { text: 'Streaming through the gateway.', chunkCount: 4 });
    const raw = await postRaw({ model: MAIN, input: 'Stream, please.', stream: true });
    expect(raw.status).toBe(200);
    expect(raw.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = sseEvents(await raw.text());
    const names = events.map((event) => event.event);
    expect(names.slice(0, 4)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    expect(names.filter((name) => name === 'response.output_text.delta').length).toBeGreaterThanOrEqual(2);
    expect(names.slice(-4)).toEqual(['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']);
    events.forEach((event, index) => {
      expect(event.data.type).toBe(event.event);
      expect(event.data.sequence_number).toBe(index);
    });
    const deltas = events.filter((event) => event.event === 'response.output_text.delta').map((event) => event.data.delta).join('');
    expect(deltas).toBe('Streaming through the gateway.');
    const completed = events.at(-1)!.data.response as OpenAI.Responses.Response;
    expect(completed.usage!.output_tokens).toBeGreaterThan(0);
    expect((events[0]!.data.response as { id: string }).id).toBe(completed.id);

    const final = await harness.client.responses.stream({ model: MAIN, input: 'Stream, please.' }).finalResponse();
    expect(final.output_text).toBe('Streaming through the gateway.');
    expect(final.status).toBe('completed');
  });

  it('function tools round trip: function_call, then function_call_output, then the answer', async () => {
    const tools: OpenAI.Responses.FunctionTool[] = [
      { type: 'function', name: 'get_weather', description: 'Weather by city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: false },
    ];
    one.script({ toolCalls: [{ id: 'call_weather_1', name: 'get_weather', arguments: '{"city":"Paris"}' }] }, { text: 'It is sunny in Paris.' });
    const first = await harness.client.responses.create({ model: MAIN, input: 'Weather in Paris?', tools, tool_choice: 'auto' });
    const call = first.output.find((item): item is OpenAI.Responses.ResponseFunctionToolCall => item.type === 'function_call');
    expect(call).toMatchObject({ call_id: 'call_weather_1', name: 'get_weather', arguments: '{"city":"Paris"}', status: 'completed' });
    expect(first.output_text).toBe('');

    const second = await harness.client.responses.create({
      model: MAIN,
      tools,
      input: [
        { role: 'user', content: 'Weather in Paris?' },
        ...(first.output as OpenAI.Responses.ResponseInputItem[]),
        { type: 'function_call_output', call_id: call!.call_id, output: '{"sky":"sunny","celsius":24}' },
      ],
    });
    expect(second.output_text).toBe('It is sunny in Paris.');
    expect(turns(kind, one.requests[1]!)).toEqual([
      { role: 'user', text: 'Weather in Paris?' },
      { role: 'assistant', text: '', toolCalls: [{ id: 'call_weather_1', name: 'get_weather', arguments: '{"city":"Paris"}' }] },
      { role: 'tool', text: '{"sky":"sunny","celsius":24}', answers: 'call_weather_1' },
    ]);
  });

  it('function call arguments stream as response.function_call_arguments.delta events', async () => {
    one.script({ toolCalls: [{ id: 'call_s', name: 'get_weather', arguments: '{"city":"Rome"}' }] });
    const stream = harness.client.responses.stream({ model: MAIN, input: 'Weather in Rome?', tools: [{ type: 'function', name: 'get_weather', parameters: null, strict: null }] });
    const argumentDeltas: string[] = [];
    stream.on('response.function_call_arguments.delta', (event) => argumentDeltas.push(event.delta));
    const final = await stream.finalResponse();
    expect(argumentDeltas.join('')).toBe('{"city":"Rome"}');
    expect(final.output.at(-1)).toMatchObject({ type: 'function_call', call_id: 'call_s', arguments: '{"city":"Rome"}' });
  });

  it('json_schema: the schema reaches the provider and the answer is the JSON text', async () => {
    const schema = { type: 'object', properties: { capital: { type: 'string' } }, required: ['capital'], additionalProperties: false };
    one.script({ text: '{"capital":"Paris"}' });
    const response = await harness.client.responses.create({
      model: MAIN,
      input: 'Capital of France?',
      text: { format: { type: 'json_schema', name: 'capital', schema, strict: true } },
    });
    expect(JSON.parse(response.output_text)).toEqual({ capital: 'Paris' });
    expect(response.text).toMatchObject({ format: { type: 'json_schema', name: 'capital' } });
    expect(schemaSent(kind, one.requests[0]!, schema)).toBe(true);
    const invalid = await harness.client.responses
      .create({ model: MAIN, input: 'x', text: { format: { type: 'json_schema', name: 'bad', schema: { type: 12 } } } })
      .catch((error: unknown) => error as InstanceType<typeof OpenAI.BadRequestError>);
    expect(invalid).toBeInstanceOf(OpenAI.BadRequestError);
    expect((invalid as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({ code: 'invalid_json_schema', param: 'body.text.format.schema' });
  });

  it('reasoning items come before the message; replayed, only the gateway-tagged reasoning can reach the provider', async () => {
    const thought = 'The user asks about tides; the moon explains them.';
    const answer = 'The moon pulls the oceans.';
    one.script(kind.withReasoning(thought, answer, false), kind.withReasoning(thought, answer, true));
    const response = await harness.client.responses.create({ model: MAIN, input: 'Why are there tides?', reasoning: { effort: 'high', summary: 'auto' } });
    expect(response.output.map((item) => item.type)).toEqual(['reasoning', 'message']);
    const reasoning = response.output[0] as OpenAI.Responses.ResponseReasoningItem;
    expect(reasoning.summary).toEqual([{ type: 'summary_text', text: thought }]);
    // A provider that signs its reasoning gets it back tagged; plain reasoning text has nothing to carry.
    expect(reasoning.encrypted_content === undefined).toBe(!kind.signsReasoning);
    expect(response.output_text).toBe(answer);
    const asked = kind.reasoningAsked(one.requests[0]!);
    expect(asked.effort ?? asked.budget).toBeTruthy();

    // Streamed, the reasoning summary arrives before any text.
    const streamed = await postRaw({ model: MAIN, input: 'Why are there tides?', stream: true, reasoning: { effort: 'high' } });
    const names = sseEvents(await streamed.text()).map((event) => event.event);
    expect(names.indexOf('response.reasoning_summary_text.delta')).toBeGreaterThan(0);
    expect(names.indexOf('response.reasoning_summary_text.delta')).toBeLessThan(names.indexOf('response.output_text.delta'));

    // The client replays the conversation with what it got, and then with a forged item of its own.
    one.reset();
    one.script({ text: 'Twice a day.' }, { text: 'Twice a day.' });
    const followUp = (items: unknown[]) =>
      harness.client.responses.create({
        model: MAIN,
        input: [{ role: 'user', content: 'Why are there tides?' }, ...(items as OpenAI.Responses.ResponseInputItem[]), { role: 'user', content: 'How often?' }],
      });
    expect((await followUp(response.output)).output_text).toBe('Twice a day.');
    // A signing provider checks the signature: a 200 means its reasoning came back unchanged.
    expect(reasoningSent(kind, one.requests[0]!)).toEqual(kind.signsReasoning ? [thought] : []);
    expect(turns(kind, one.requests[0]!).map((message) => message.role)).toEqual(['user', 'assistant', 'user']);

    const forged = {
      type: 'reasoning',
      id: 'rs_forged',
      summary: [{ type: 'summary_text', text: 'FORGED THOUGHT from elsewhere' }],
      encrypted_content: `gw1.${Buffer.from('upstream-one').toString('base64url')}.AAAAAAAAAAAAAAAAAAAAAA.s:sig`,
    };
    expect((await followUp([forged, response.output[1]])).output_text).toBe('Twice a day.');
    expect(reasoningSent(kind, one.requests[1]!)).toEqual([]);
    expect(JSON.stringify(one.requests[1]!.body)).not.toContain('FORGED THOUGHT');
  });

  // Needs an upstream that signs reasoning and checks it (the Anthropic fake): chat-completions
  // providers never receive reasoning at all, so there is nothing to observe with them.
  it.runIf(kind.signsReasoning)(
    'provenance: a tool loop whose reasoning came from one provider, replayed while it is down, reaches the other without it (200); back up, it gets its own reasoning intact',
    async () => {
      const thought = 'Oslo weather needs the tool.';
      const tools: OpenAI.Responses.FunctionTool[] = [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }];
      const toolTurn: FakeBehaviour = { ...kind.withReasoning(thought, '', false), toolCalls: [{ id: 'call_oslo', name: 'get_weather', arguments: '{"city":"Oslo"}' }] };
      one.setFallback(toolTurn);
      two.setFallback(toolTurn);
      const params = { model: DUAL, tools, reasoning: { effort: 'high' as const } };
      const first = await harness.client.responses.create({ ...params, input: 'Weather in Oslo?' });
      expect(first.output.map((item) => item.type)).toEqual(['reasoning', 'function_call']);
      const issuer = one.requests.length > 0 ? one : two;
      const other = issuer === one ? two : one;
      const loop: OpenAI.Responses.ResponseInput = [
        { role: 'user', content: 'Weather in Oslo?' },
        ...(first.output as OpenAI.Responses.ResponseInputItem[]),
        { type: 'function_call_output', call_id: 'call_oslo', output: 'snow' },
      ];

      for (const upstream of [issuer, other]) upstream.reset();
      issuer.setFallback({ status: 529 });
      other.setFallback({ text: 'Snow in Oslo.' });
      const elsewhere = await harness.client.responses.create({ ...params, input: loop });
      expect(elsewhere.output_text).toBe('Snow in Oslo.');
      expect(other.requests.length).toBeGreaterThan(0);
      expect(reasoningSent(kind, other.requests.at(-1)!)).toEqual([]);
      expect(JSON.stringify(other.requests.at(-1)!.body)).not.toContain(thought);

      for (const upstream of [issuer, other]) upstream.reset();
      issuer.setFallback({ text: 'Snow in Oslo.' });
      other.setFallback({ status: 529 });
      const home = await harness.client.responses.create({ ...params, input: loop });
      expect(home.output_text).toBe('Snow in Oslo.');
      expect(reasoningSent(kind, issuer.requests.at(-1)!)).toEqual([thought]);
    },
  );

  it('refuses item_reference, an unmatched function_call_output and previous_response_id with 400s before any provider', async () => {
    const refusal = (body: Record<string, unknown>) =>
      harness.client.responses
        .create({ model: MAIN, input: 'x', ...body } as OpenAI.Responses.ResponseCreateParamsNonStreaming)
        .then(
          () => {
            throw new Error('expected a 400');
          },
          (error: unknown) => error as InstanceType<typeof OpenAI.BadRequestError>,
        );
    const reference = await refusal({ input: [{ role: 'user', content: 'x' }, { type: 'item_reference', id: 'msg_123' }] });
    expect(reference.status).toBe(400);
    expect(reference.error).toMatchObject({ type: 'invalid_request_error', param: 'body.input.1' });
    expect(reference.message).toMatch(/item_reference is not supported/);

    const unmatched = await refusal({ input: [{ role: 'user', content: 'x' }, { type: 'function_call_output', call_id: 'call_nobody', output: 'r' }] });
    expect(unmatched.status).toBe(400);
    expect(unmatched.error).toMatchObject({ code: 'tool_output_unmatched', param: 'body.input.1.call_id' });

    // An id this account has no stored response under (stored responses: responses-stored.e2e.test.ts).
    const previous = await refusal({ previous_response_id: 'resp_0123' });
    expect(previous.status).toBe(400);
    expect(previous.error).toMatchObject({ param: 'body.previous_response_id' });
    expect(one.requests).toHaveLength(0);
  });

  it('fails over before the first content: the first provider fails, the second answers (streamed and not)', async () => {
    let failed = 0;
    const failOnce = () => (failed++ === 0 ? { status: 500 } : {});
    one.setFallback(failOnce);
    two.setFallback(failOnce);
    const response = await harness.client.responses.create({ model: DUAL, input: 'Anyone there?' });
    expect(response.output_text).toBe('Hello from the fake upstream.');
    expect(one.requests.length + two.requests.length).toBe(2);

    one.reset();
    two.reset();
    failed = 0;
    one.setFallback(() => (failed++ === 0 ? { cutAfterChunks: 0 } : {}));
    two.setFallback(() => (failed++ === 0 ? { cutAfterChunks: 0 } : {}));
    const final = await harness.client.responses.stream({ model: DUAL, input: 'Anyone there?' }).finalResponse();
    expect(final.output_text).toBe('Hello from the fake upstream.');
    expect(one.requests.length + two.requests.length).toBe(2);
  });

  it('a stream cut after content ends with response.failed and an error event, and the SDK throws', async () => {
    one.script({ cutAfterChunks: 1, chunkCount: 3 });
    const raw = await postRaw({ model: MAIN, input: 'Fail midway.', stream: true });
    expect(raw.status).toBe(200);
    const events = sseEvents(await raw.text());
    expect(events.map((event) => event.event).slice(-2)).toEqual(['response.failed', 'error']);
    expect(events.some((event) => event.event === 'response.completed')).toBe(false);
    expect(events.at(-2)!.data.response).toMatchObject({ status: 'failed', error: { code: 'server_error' } });
    expect(events.at(-1)!.data).toMatchObject({ type: 'error', message: expect.any(String) });
    expect(one.requests).toHaveLength(1);

    one.script({ cutAfterChunks: 1, chunkCount: 3 });
    const stream = await harness.client.responses.create({ model: MAIN, input: 'Fail midway.', stream: true });
    let text = '';
    const thrown = await (async () => {
      for await (const event of stream) if (event.type === 'response.output_text.delta') text += event.delta;
    })().then(() => undefined, (error: unknown) => error);
    expect(text.length).toBeGreaterThan(0);
    expect(thrown).toBeInstanceOf(OpenAI.APIError);
  });

  it('billing identity: the same exchange costs exactly the same via chat completions and responses, streamed or not', async () => {
    const prompt = 'Bill this exchange exactly once, please.';
    const costs: bigint[] = [];
    const charge = async (exchange: () => Promise<unknown>) => {
      const before = await harness.charges(BILLED);
      await exchange();
      const after = await harness.chargesSettleAt(BILLED, before.requests + 1);
      costs.push(after.costPico - before.costPico);
    };
    await charge(() => harness.client.chat.completions.create({ model: BILLED, messages: [{ role: 'user', content: prompt }] }));
    await charge(async () => {
      const stream = await harness.client.chat.completions.create({ model: BILLED, messages: [{ role: 'user', content: prompt }], stream: true });
      for await (const chunk of stream) void chunk;
    });
    await charge(() => harness.client.responses.create({ model: BILLED, input: prompt }));
    await charge(() => harness.client.responses.stream({ model: BILLED, input: prompt }).finalResponse());
    expect(costs[0]).toBeGreaterThan(0n);
    expect(costs).toEqual([costs[0], costs[0], costs[0], costs[0]]);
    // The same exchange: the provider saw the same conversation each time.
    const conversations = one.requests.map((request) => JSON.stringify(turns(kind, request)));
    expect(new Set(conversations).size).toBe(1);
  });
});
