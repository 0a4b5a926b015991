import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { eventually, startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { parseCredits } from '@gateway/platform';
import { ctlJson } from './configured-stack.js';
import { oneModelCatalog, pricedTokens, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { refusedUpgrade, WsClient } from './responses-websocket-client.js';

// WebSocket mode of the responses dialect (GET /v1/responses upgraded; Open Responses and OpenAI's
// "WebSocket mode"), end to end with a real `ws` client: every hop real (edge, auth, ledger, router)
// and an OpenAI-compatible fake upstream over HTTP. Each response.create is one request of the one
// pipeline: admitted, billed and limited as POST /v1/responses is.

const MODEL = 'testco/ws';
const INPUT_PRICE = '0.000001';
const OUTPUT_PRICE = '0.000002';
const PROVIDER_KEY_ENV = 'RESPONSES_WS_E2E_KEY';

function catalog(upstream: FakeUpstream): string {
  return oneModelCatalog({
    model: MODEL,
    provider: { kind: 'openai', url: upstream.url, keyEnv: PROVIDER_KEY_ENV },
    upstreamModel: 'ws-upstream',
    supportedParameters: ['tools', 'tool_choice', 'temperature', 'max_completion_tokens', 'stream_options'],
    endpoints: ['chat.completions', 'responses'],
    inputPrice: INPUT_PRICE,
    outputPrice: OUTPUT_PRICE,
  });
}

const messagesOf = (upstream: FakeUpstream, index: number) =>
  (upstream.requests[index]!.body.messages as { role: string; content: unknown }[]).map((message) => ({ role: message.role, content: message.content }));

describe('GET /v1/responses upgraded to a WebSocket, end to end', () => {
  let upstream: FakeUpstream;
  let harness: ChatHarness;
  let wsUrl: string;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    harness = await startChatHarness({ configYaml: catalog(upstream), providerSecrets: { [PROVIDER_KEY_ENV]: 'sk-ws-e2e' } });
    wsUrl = `${harness.stack.url.replace(/^http/, 'ws')}/v1/responses`;
  }, 120_000);

  afterAll(() => stopHarnessAndFakes(harness, [upstream]));

  // Every answer the fake gave is charged once to the harness account. Before each test, the charges of the
  // earlier ones have settled (some tests end without waiting for theirs), so a test's "before" is exact.
  let answeredBefore = 0;
  beforeEach(async () => {
    answeredBefore += upstream.requests.length;
    upstream.reset();
    await harness.chargesSettleAt(MODEL, answeredBefore);
  });

  it('two responses on one socket: the SSE events one per message, each response charged exactly what the fake reported', async () => {
    const before = await harness.charges(MODEL);
    upstream.script(
      { text: 'first answer', usage: { prompt_tokens: 12, completion_tokens: 5 } },
      { text: 'second answer', usage: { prompt_tokens: 20, completion_tokens: 7 } },
    );
    const client = await WsClient.open(wsUrl, harness.apiKey);
    client.send({ model: MODEL, store: false, input: 'Reply with exactly: first' });
    const first = await client.turn();
    client.send({ model: MODEL, store: false, input: 'Reply with exactly: second' });
    const second = await client.turn();
    await client.close();

    for (const [events, text] of [[first, 'first answer'], [second, 'second answer']] as const) {
      expect(events[0]!.type).toBe('response.created');
      expect(events[1]!.type).toBe('response.in_progress');
      expect(events.at(-1)!.type).toBe('response.completed');
      // Numbered from 0 within each response, as the SSE stream is.
      expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, index) => index));
      const completed = events.at(-1)!.response;
      expect(completed).toMatchObject({ object: 'response', status: 'completed', model: MODEL });
      expect(completed.output[0].content[0].text).toBe(text);
      expect(events.filter((event) => event.type === 'response.output_text.delta').map((event) => event.delta).join('')).toBe(text);
    }
    expect(first.at(-1)!.response.usage).toMatchObject({ input_tokens: 12, output_tokens: 5 });
    expect(second.at(-1)!.response.usage).toMatchObject({ input_tokens: 20, output_tokens: 7 });
    expect(first.at(-1)!.response.id).not.toBe(second.at(-1)!.response.id);
    expect(upstream.requests).toHaveLength(2);

    const after = await harness.chargesSettleAt(MODEL, before.requests + 2);
    expect(after.costPico - before.costPico).toBe(pricedTokens(12, 5, INPUT_PRICE, OUTPUT_PRICE) + pricedTokens(20, 7, INPUT_PRICE, OUTPUT_PRICE));
  });

  it('continues a store:false response from the connection cache: the upstream receives the earlier turn', async () => {
    upstream.script({ text: 'OK.' }, { text: 'cobalt' });
    const client = await WsClient.open(wsUrl, harness.apiKey);
    client.send({ model: MODEL, store: false, instructions: 'Be brief.', input: 'Remember the code word: cobalt. Reply with OK.' });
    const first = await client.turn();
    const previousId = first.at(-1)!.response.id as string;
    client.send({ model: MODEL, store: false, previous_response_id: previousId, input: [{ type: 'message', role: 'user', content: 'What is the code word?' }] });
    const second = await client.turn();
    await client.close();

    expect(second.at(-1)!.type).toBe('response.completed');
    expect(upstream.requests).toHaveLength(2);
    expect(messagesOf(upstream, 1)).toEqual([
      { role: 'user', content: 'Remember the code word: cobalt. Reply with OK.' },
      { role: 'assistant', content: 'OK.' },
      { role: 'user', content: 'What is the code word?' },
    ]);
    // The first turn had its instructions; a continuation does not inherit them (OpenAI's semantics).
    expect(messagesOf(upstream, 0)[0]).toEqual({ role: 'system', content: 'Be brief.' });
  });

  it('an unknown previous_response_id is an error event previous_response_not_found; the socket goes on; a failed continuation evicts what it continued', async () => {
    const client = await WsClient.open(wsUrl, harness.apiKey);
    client.send({ model: MODEL, store: false, previous_response_id: 'resp_not_from_here', input: 'Continue.' });
    const [missing] = await client.turn();
    expect(missing).toEqual({
      type: 'error',
      status: 400,
      error: { type: 'invalid_request_error', code: 'previous_response_not_found', message: expect.stringContaining('resp_not_from_here'), param: 'previous_response_id' },
    });
    expect(upstream.requests).toHaveLength(0);

    client.send({ model: MODEL, store: false, input: 'Remember: ember.' });
    const first = await client.turn();
    expect(first.at(-1)!.type).toBe('response.completed');
    const previousId = first.at(-1)!.response.id as string;
    // A continuation that fails (a tool output no call asked for) ...
    client.send({ model: MODEL, store: false, previous_response_id: previousId, input: [{ type: 'function_call_output', call_id: 'call_nobody_made', output: 'x' }] });
    const [failed] = await client.turn();
    expect(failed).toMatchObject({ type: 'error', status: 400 });
    // ... evicts the response it continued.
    client.send({ model: MODEL, store: false, previous_response_id: previousId, input: 'Try again.' });
    const [evicted] = await client.turn();
    expect(evicted).toMatchObject({ type: 'error', status: 400, error: { code: 'previous_response_not_found' } });
    expect(upstream.requests).toHaveLength(1);
    await client.close();

    // Another connection never sees this one's responses.
    const other = await WsClient.open(wsUrl, harness.apiKey);
    other.send({ model: MODEL, store: false, previous_response_id: first.at(-1)!.response.id, input: 'Hi.' });
    expect((await other.turn())[0]).toMatchObject({ type: 'error', error: { code: 'previous_response_not_found' } });
    await other.close();
  });

  it('generate: false (Codex\'s warm-up): a response with no output and zero usage, no upstream request, nothing charged; a continuation from its id carries the warmed input and is charged exactly the fake\'s usage', async () => {
    const before = await harness.charges(MODEL);
    const balanceBefore = await harness.balance();
    const client = await WsClient.open(wsUrl, harness.apiKey);
    const tools = [{ type: 'function', name: 'lookup', parameters: { type: 'object', properties: {} } }];
    client.send({ model: MODEL, store: false, generate: false, tools, input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Remember the code word: cobalt.' }] }] });
    const warm = await client.turn();
    expect(warm.map((event) => event.type)).toEqual(['response.created', 'response.in_progress', 'response.completed']);
    expect(warm.map((event) => event.sequence_number)).toEqual([0, 1, 2]);
    const warmed = warm.at(-1)!.response;
    expect(warmed).toMatchObject({ object: 'response', status: 'completed', model: MODEL, output: [], error: null });
    expect(warmed.usage).toEqual({ input_tokens: 0, input_tokens_details: { cached_tokens: 0 }, output_tokens: 0, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 0 });
    expect(warm[0]!.response.id).toBe(warmed.id);
    expect(upstream.requests).toHaveLength(0);

    upstream.script({ text: 'cobalt', usage: { prompt_tokens: 14, completion_tokens: 3 } });
    client.send({ model: MODEL, store: false, tools, previous_response_id: warmed.id, input: [{ type: 'message', role: 'user', content: 'What is the code word?' }] });
    const next = await client.turn();
    await client.close();
    expect(next.at(-1)!.type).toBe('response.completed');
    expect(next.at(-1)!.response.output[0].content[0].text).toBe('cobalt');
    expect(upstream.requests).toHaveLength(1);
    expect(messagesOf(upstream, 0).map((message) => message.role)).toEqual(['user', 'user']);
    expect(JSON.stringify(messagesOf(upstream, 0)[0]!.content)).toContain('Remember the code word: cobalt.');
    expect(messagesOf(upstream, 0)[1]).toEqual({ role: 'user', content: 'What is the code word?' });

    // One charge, the continuation's: exactly the fake's usage; the balance moved by exactly that.
    const after = await harness.chargesSettleAt(MODEL, before.requests + 1);
    const cost = pricedTokens(14, 3, INPUT_PRICE, OUTPUT_PRICE);
    expect(after.costPico - before.costPico).toBe(cost);
    expect(parseCredits(balanceBefore) - parseCredits(await harness.balance())).toBe(cost);
  });

  it('generate: false still checks the key, the body and the model: a bad one is an error event and nothing is remembered', async () => {
    const client = await WsClient.open(wsUrl, harness.apiKey);
    client.send({ model: 'testco/no-such-model', generate: false, input: 'Warm up.' });
    expect((await client.turn())[0]).toMatchObject({ type: 'error', status: 400, error: { code: 'model_not_found' } });
    client.send({ model: MODEL, generate: false, input: [{ type: 'function_call_output', call_id: 'call_nobody_made', output: 'x' }] });
    expect((await client.turn())[0]).toMatchObject({ type: 'error', status: 400, error: { code: 'tool_output_unmatched' } });
    client.send({ model: MODEL, generate: 'no', input: 'Warm up.' });
    expect((await client.turn())[0]).toMatchObject({ type: 'error', status: 400, error: { param: 'generate' } });
    await client.close();
    expect(upstream.requests).toHaveLength(0);
  });

  it('an in-band compaction (compaction_trigger) over the socket: the summary request upstream, one sealed compaction item, charged once; a continuation from it carries the compacted window', async () => {
    const before = await harness.charges(MODEL);
    upstream.script({ text: 'OK.', usage: { prompt_tokens: 10, completion_tokens: 2 } }, { text: 'Summary: the code word is cobalt.', usage: { prompt_tokens: 30, completion_tokens: 8 } }, { text: 'cobalt', usage: { prompt_tokens: 12, completion_tokens: 1 } });
    const client = await WsClient.open(wsUrl, harness.apiKey);
    client.send({ model: MODEL, store: false, input: 'Remember the code word: cobalt. Reply with OK.' });
    const first = (await client.turn()).at(-1)!.response;
    // Codex's incremental form: the previous response, then only the trigger.
    client.send({ model: MODEL, store: false, previous_response_id: first.id, input: [{ type: 'compaction_trigger' }] });
    const compaction = await client.turn();
    expect(compaction.map((event) => event.type)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.output_item.done', 'response.completed']);
    const item = compaction[3]!.item;
    expect(item).toMatchObject({ type: 'compaction', encrypted_content: expect.stringMatching(/^gw1\./) });
    expect(compaction.at(-1)!.response.output).toEqual([item]);
    expect(messagesOf(upstream, 1).map((message) => message.role)).toEqual(['user', 'assistant', 'user']);
    expect(String(messagesOf(upstream, 1)[2]!.content)).toMatch(/^Summarise the conversation above/);

    client.send({ model: MODEL, store: false, previous_response_id: compaction.at(-1)!.response.id, input: 'What is the code word?' });
    expect((await client.turn()).at(-1)!.type).toBe('response.completed');
    await client.close();
    // The compacted window: the user message, the summary, the new input (the assistant turn it replaced is gone).
    expect(messagesOf(upstream, 2)).toEqual([
      { role: 'user', content: 'Remember the code word: cobalt. Reply with OK.' },
      { role: 'user', content: 'Summary of the earlier conversation, which it replaces:\n\nSummary: the code word is cobalt.' },
      { role: 'user', content: 'What is the code word?' },
    ]);
    const after = await harness.chargesSettleAt(MODEL, before.requests + 3);
    expect(after.costPico - before.costPico).toBe(pricedTokens(10 + 30 + 12, 2 + 8 + 1, INPUT_PRICE, OUTPUT_PRICE));
  });

  it('an upgrade without a valid key is refused with 401 before any socket exists', async () => {
    const none = await refusedUpgrade(wsUrl, {});
    expect(none.status).toBe(401);
    expect(none.body).toMatchObject({ error: { type: 'invalid_api_key', code: 'invalid_api_key' } });
    const wrong = await refusedUpgrade(wsUrl, { authorization: 'Bearer sk-gw-not-a-key' });
    expect(wrong.status).toBe(401);
    const elsewhere = await refusedUpgrade(wsUrl.replace('/v1/responses', '/v1/chat/completions'), { authorization: `Bearer ${harness.apiKey}` });
    expect(elsewhere.status).toBe(404);
  });

  it('a key without credit: the upgrade is refused with 402 before any socket; with less than 0.05, response.create is a 402 error event; nothing reaches the upstream, nothing is charged', async () => {
    const broke = await ctlJson(harness.stack, 'accounts', 'create', '--name', 'ws-broke', '--credits', '0', '--tier', 'tier-1', '--json');
    const brokeKey = (await ctlJson(harness.stack, 'keys', 'create', broke.account_id!, '--name', 'ws-broke-key', '--json')).api_key!;
    const refused = await refusedUpgrade(wsUrl, { authorization: `Bearer ${brokeKey}` });
    expect(refused.status).toBe(402);
    expect(refused.body).toMatchObject({ error: { type: 'insufficient_quota', code: 'insufficient_quota' } });
    const account = await ctlJson(harness.stack, 'accounts', 'create', '--name', 'ws-short', '--credits', '0.01', '--tier', 'tier-1', '--json');
    const shortKey = (await ctlJson(harness.stack, 'keys', 'create', account.account_id!, '--name', 'ws-short-key', '--json')).api_key!;
    const client = await WsClient.open(wsUrl, shortKey);
    client.send({ model: MODEL, input: 'Charge me.' });
    const [first] = await client.turn();
    expect(first).toMatchObject({ type: 'error', status: 402, error: { code: expect.any(String), message: expect.any(String) } });
    // The socket stays usable (a top-up would let the next response.create through).
    client.send({ model: MODEL, input: 'Charge me again.' });
    expect((await client.turn())[0]).toMatchObject({ type: 'error', status: 402 });
    await client.close();
    expect(upstream.requests).toHaveLength(0);
    const balance = await fetch(`${harness.stack.url}/v1/account/balance`, { headers: { authorization: `Bearer ${account.provisioning_key}` } });
    expect(parseCredits(((await balance.json()) as { balance: string }).balance)).toBe(parseCredits('0.01'));
  });

  it('a socket closed mid-response cuts the upstream and is charged once, exactly as an HTTP client leaving at the same point', async () => {
    // The fake streams two chunks then goes silent: whoever leaves after them saw the same content.
    const cutCost = async (leave: () => Promise<void>) => {
      const before = await harness.charges(MODEL);
      upstream.reset();
      upstream.script({ text: 'alpha beta gamma delta', chunkCount: 4, stallAfterChunks: 2 });
      await leave();
      const after = await harness.chargesSettleAt(MODEL, before.requests + 1);
      expect(upstream.requests).toHaveLength(1);
      return after.costPico - before.costPico;
    };
    const overWebSocket = await cutCost(async () => {
      const client = await WsClient.open(wsUrl, harness.apiKey);
      client.send({ model: MODEL, input: 'Take your time.' });
      await eventually(() => expect(client.events.filter((event) => event.type === 'response.output_text.delta')).toHaveLength(2), 10_000);
      client.ws.terminate();
    });
    const overHttp = await cutCost(async () => {
      const controller = new AbortController();
      const response = await fetch(`${harness.stack.url}/v1/responses`, {
        method: 'POST',
        headers: { authorization: `Bearer ${harness.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, input: 'Take your time.', stream: true }),
        signal: controller.signal,
      });
      const reader = response.body!.getReader();
      let text = '';
      while ((text.match(/event: response\.output_text\.delta/g) ?? []).length < 2) text += new TextDecoder().decode((await reader.read()).value);
      controller.abort();
    });
    expect(overWebSocket).toBeGreaterThan(0n);
    expect(overWebSocket).toBe(overHttp);
  });
});

describe('the edge draining with WebSockets open', () => {
  it('closes an idle socket with 1001 at once, a busy one with 1001 after its response completed', async () => {
    const upstream = await startFakeUpstream();
    const harness = await startChatHarness({ configYaml: catalog(upstream), providerSecrets: { [PROVIDER_KEY_ENV]: 'sk-ws-e2e' }, edge: { drainTimeoutMs: 10_000 } });
    let stopped: Promise<void> | undefined;
    try {
      const wsUrl = `${harness.stack.url.replace(/^http/, 'ws')}/v1/responses`;
      upstream.script({ text: 'one two three four five six', chunkCount: 6, chunkDelayMs: 150 });
      const idle = await WsClient.open(wsUrl, harness.apiKey);
      const busy = await WsClient.open(wsUrl, harness.apiKey);
      busy.send({ model: MODEL, input: 'Take a moment.' });
      await busy.until('response.output_text.delta');
      stopped = harness.stop();
      const events = await busy.turn();
      expect(events.at(-1)!.type).toBe('response.completed');
      expect(events.at(-1)!.response.output[0].content[0].text).toBe('one two three four five six');
      await eventually(() => expect(busy.closedWith?.code).toBe(1001), 10_000);
      expect(idle.closedWith?.code).toBe(1001);
    } finally {
      await (stopped ?? harness.stop());
      await upstream.close();
    }
  }, 60_000);
});
