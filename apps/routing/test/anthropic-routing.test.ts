import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ErrorReason, GatewayError, GrpcStatus } from '@gateway/platform';
import { UsageOutcome, type ChatStreamResponse, Provider } from '@gateway/proto';
import { startFakeAnthropicUpstream, startFakeUpstream, type FakeAnthropicUpstream, type FakeUpstream } from '@gateway/testing';
import { chatRequest, drain, model, openaiProvider, snapshot, startRoutingBench, type RoutingBench } from './harness.js';
import { message, weatherTool } from './adapter-test-support.js';

/*
 * `kind: anthropic` providers behind the real routing service (gRPC, NATS): failover from an overloaded
 * Anthropic provider to an OpenAI-compatible one, and reasoning provenance across two Anthropic providers
 * whose fakes sign thinking with different keys (each refuses the other's signatures with a 400).
 */

function anthropicProvider(id: string, baseUrl: string): Provider {
  return Provider.fromPartial({ id, kind: 'anthropic', baseUrl, apiKeyEnv: `${id.toUpperCase().replaceAll('-', '_')}_API_KEY` });
}

describe('routing with Anthropic providers', () => {
  let claudeA: FakeAnthropicUpstream;
  let claudeB: FakeAnthropicUpstream;
  let openai: FakeUpstream;
  let bench: RoutingBench;

  const catalogSnapshot = () =>
    snapshot('v1', [
      model('acme/claude-or-openai', ['claude-a', 'openai-c']),
      model('acme/claude-pair', ['claude-a', 'claude-b']),
      model('acme/claude-a', ['claude-a'], { maxOutputTokens: 8_000 }),
      model('acme/embed-claude', ['claude-a'], { offers: [{ providerId: 'claude-a', upstreamModel: 'text-embed', endpoints: ['embeddings'] }] }),
      model('acme/embed-mixed', ['claude-a', 'openai-c'], {
        offers: ['claude-a', 'openai-c'].map((providerId) => ({ providerId, upstreamModel: 'text-embed', endpoints: ['embeddings'] })),
      }),
    ], [
      anthropicProvider('claude-a', claudeA.url),
      anthropicProvider('claude-b', claudeB.url),
      openaiProvider('openai-c', openai.url),
    ]);

  beforeAll(async () => {
    claudeA = await startFakeAnthropicUpstream({ apiKey: 'sk-ant-a' });
    claudeB = await startFakeAnthropicUpstream({ apiKey: 'sk-ant-b' });
    openai = await startFakeUpstream();
    bench = await startRoutingBench(catalogSnapshot());
  });
  afterAll(async () => {
    await bench.stop();
    await Promise.all([claudeA.close(), claudeB.close(), openai.close()]);
  });
  beforeEach(async () => {
    claudeA.reset();
    claudeB.reset();
    openai.reset();
    // A fresh service per test: provider health starts clean, so candidates come in catalog order.
    await bench.startService({
      providerSecrets: { CLAUDE_A_API_KEY: 'sk-ant-a', CLAUDE_B_API_KEY: 'sk-ant-b', OPENAI_C_API_KEY: 'sk-c' },
      attemptTimeoutMs: 2_000, maxAttempts: 3,
    });
  });
  afterEach(() => bench.stopService());

  const eventFor = async (requestId: string) => (await bench.usage.collected(requestId)).event;

  it('answers from an Anthropic provider with its usage, cache reads included in the input', async () => {
    claudeA.script({ text: 'Paris.', usage: { input_tokens: 12, cache_read_input_tokens: 300, cache_creation_input_tokens: 40, output_tokens: 2 } });
    const request = chatRequest('acme/claude-a', 'Capital of France?', { endpoint: 'messages' });
    const response = await bench.client.chat(request);
    expect(response).toMatchObject({ providerId: 'claude-a', choices: [{ finishReason: 'stop', message: { content: 'Paris.' } }] });
    expect(response.usage).toMatchObject({ inputTokens: 352, cachedInputTokens: 300, cacheWriteTokens: 40, outputTokens: 2, estimated: false });
    // The catalog model's max_output_tokens is the Anthropic max_tokens the request did not set.
    expect(claudeA.requests[0]!.body).toMatchObject({ model: 'claude-a-upstream-model', max_tokens: 8_000 });
    expect(claudeA.requests[0]!.headers['x-api-key']).toBe('sk-ant-a');
    expect(await eventFor(request.context!.requestId)).toMatchObject({
      providerId: 'claude-a', endpoint: 'messages', outcome: UsageOutcome.USAGE_OUTCOME_SERVED,
      usage: { inputTokens: 352, cachedInputTokens: 300, cacheWriteTokens: 40, outputTokens: 2 },
    });
  });

  it.each([
    ['529', { status: 529 }],
    ['429', { status: 429 }],
  ])('fails over from an Anthropic provider answering %s to an OpenAI-compatible one (Chat)', async (_name, behaviour) => {
    claudeA.script(behaviour);
    openai.script({ text: 'from openai' });
    const request = chatRequest('acme/claude-or-openai', 'hello', { endpoint: 'messages' });
    const response = await bench.client.chat(request);
    expect(response.providerId).toBe('openai-c');
    expect(response.choices[0]!.message!.content).toBe('from openai');
    expect(claudeA.requests).toHaveLength(1);
    expect(openai.requests).toHaveLength(1);
    expect(await eventFor(request.context!.requestId)).toMatchObject({ providerId: 'openai-c', outcome: UsageOutcome.USAGE_OUTCOME_SERVED });
  });

  it.each([
    ['529', { status: 529 }],
    ['an overloaded_error event before any content', { streamErrorAfterChunks: 0 }],
  ])('fails over inside a stream on %s', async (_name, behaviour) => {
    claudeA.script(behaviour);
    openai.script({ text: 'streamed by openai' });
    const { messages, error, text } = await drain(bench.client.chatStream({ chat: chatRequest('acme/claude-or-openai', 'hello', { endpoint: 'messages' }), combinedStart: false }));
    expect(error).toBeUndefined();
    expect(messages[0]?.event).toMatchObject({ $case: 'start', value: { providerId: 'openai-c' } });
    expect(text).toBe('streamed by openai');
    expect(claudeA.requests).toHaveLength(1);
  });

  it('ends the stream with an error (no failover) when Anthropic fails after the first content', async () => {
    claudeA.script({ text: 'first second third', chunkCount: 3, streamErrorAfterChunks: 1 });
    const { messages, error, text } = await drain(bench.client.chatStream({ chat: chatRequest('acme/claude-or-openai', 'hello', { endpoint: 'messages' }), combinedStart: false }));
    expect(messages[0]?.event).toMatchObject({ $case: 'start', value: { providerId: 'claude-a' } });
    expect(text).toBe('first ');
    expect([error?.status, error?.reason]).toEqual([GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM]);
    expect(openai.requests).toHaveLength(0);
  });

  it('never sends embeddings to an Anthropic provider, whatever offers the catalog lists', async () => {
    const response = await bench.client.embed({
      context: { requestId: 'req_embed_mixed', accountId: 'acc_test', keyId: 'key_test' }, modelId: 'acme/embed-mixed',
      routingStrategy: 'reliability', texts: ['hello'], tokenInputs: [],
    });
    expect(response.providerId).toBe('openai-c');
    expect(response.embeddings).toHaveLength(1);
    expect(claudeA.requests).toHaveLength(0);

    // Offered by Anthropic alone: no candidate at all, so no provider was tried (the released
    // reservation names none) rather than one failing.
    const context = { requestId: 'req_embed_claude_only', accountId: 'acc_test', keyId: 'key_test' };
    const error = await bench.client.embed({ context, modelId: 'acme/embed-claude', routingStrategy: 'reliability', texts: ['hello'], tokenInputs: [] })
      .then(() => undefined, (caught: unknown) => caught as GatewayError);
    expect([error?.status, error?.reason]).toEqual([GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM]);
    expect(await eventFor(context.requestId)).toMatchObject({ outcome: UsageOutcome.USAGE_OUTCOME_FAILED, providerId: '' });
  });

  it('sends thinking only back to the provider that issued it: stripped for B while A is down, intact for A', async () => {
    const thinkingOptions = { endpoint: 'messages', tools: [weatherTool], thinkingBudgetTokens: 1024, maxOutputTokens: 2048 };
    // Turn 1, served by A: a tool call with signed thinking, tagged as A's.
    claudeA.script({ toolCalls: [{ name: 'get_weather', input: { city: 'Paris' } }] });
    const first = await bench.client.chat(chatRequest('acme/claude-a', 'Weather in Paris?', thinkingOptions));
    const answer = first.choices[0]!.message!;
    expect(first.choices[0]!.finishReason).toBe('tool_calls');
    expect(answer.reasoning).toEqual([{ text: expect.any(String), signature: expect.any(String), encryptedData: '', providerId: 'claude-a' }]);
    const signature = answer.reasoning[0]!.signature;

    // The client replays the tool loop (the edge restores the issuer from its tag).
    const conversation = [
      message('user', 'Weather in Paris?'),
      message('assistant', answer.content, { toolCalls: answer.toolCalls, reasoning: answer.reasoning }),
      message('tool', 'Sunny, 24°C', { toolCallId: answer.toolCalls[0]!.id }),
    ];

    // A is down: B serves, without A's thinking (B's fake refuses A's signature, and a tool loop whose
    // assistant turn lacks thinking while thinking is on), and answers 200.
    claudeA.setFallback({ status: 529 });
    claudeB.script({ text: 'Sunny: wear shorts.' });
    const onB = await bench.client.chat(chatRequest('acme/claude-pair', '', { ...thinkingOptions, messages: conversation }));
    expect(onB.providerId).toBe('claude-b');
    expect(onB.choices[0]!.message!.content).toBe('Sunny: wear shorts.');
    const sentToB = claudeB.requests[0]!.body;
    expect(JSON.stringify(sentToB)).not.toContain(signature);
    expect(sentToB.messages[1].content.map((block: { type: string }) => block.type)).toEqual(['tool_use']);
    expect(sentToB.thinking).toBeUndefined();

    // The same replay streamed while A is still down: the same.
    claudeB.script({ text: 'Shorts.' });
    const streamedOnB = await drain(bench.client.chatStream({ chat: chatRequest('acme/claude-pair', '', { ...thinkingOptions, messages: conversation }), combinedStart: false }));
    expect(streamedOnB.error).toBeUndefined();
    expect(streamedOnB.messages[0]?.event).toMatchObject({ $case: 'start', value: { providerId: 'claude-b' } });
    expect(JSON.stringify(claudeB.requests[1]!.body)).not.toContain(signature);

    // A is back: its own thinking goes to it unchanged, first in the assistant turn, with thinking on.
    claudeA.setFallback({});
    claudeA.script({ text: 'Sunny, so shorts.' });
    const onA = await bench.client.chat(chatRequest('acme/claude-a', '', { ...thinkingOptions, messages: conversation }));
    expect(onA.providerId).toBe('claude-a');
    expect(onA.choices[0]!.message!.content).toBe('Sunny, so shorts.');
    const sentToA = claudeA.requests.at(-1)!.body;
    expect(sentToA.thinking).toEqual({ type: 'enabled', budget_tokens: 1024 });
    expect(sentToA.messages[1].content[0]).toEqual({ type: 'thinking', thinking: answer.reasoning[0]!.text, signature });
  });
});
