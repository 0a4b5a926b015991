import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { formatCredits } from '@gateway/platform';
import { startFakeUpstream, type FakeUpstream } from '@gateway/testing';
import { oneModelCatalog, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { generationRecord } from './configured-stack.js';

/*
 * Issue 35 item 6, through the whole stack (Postgres, NATS, the real `openai` client): an
 * OpenAI-compatible upstream that reports its reasoning tokens beside `completion_tokens: 0`
 * (`{prompt_tokens: 900, completion_tokens: 0, completion_tokens_details: {reasoning_tokens: 40}}`) did 40
 * tokens of output. The ledger charges 900 prompt + 40 output tokens at the model's prices, exactly, and
 * such an answer is no zero completion (a stream of only reasoning, without a finish reason, is charged).
 */

const MODEL = 'testco/thinker';
const PRICES = { input: '0.000001', output: '0.000002' };
/** 900 × 1,000,000 + 40 × 2,000,000 pico-credits. */
const CHARGE_PICO = 900n * 1_000_000n + 40n * 2_000_000n;
const WIRE_USAGE = { prompt_tokens: 900, completion_tokens: 0, total_tokens: 900, completion_tokens_details: { reasoning_tokens: 40 } };
const BASE = { id: 'chatcmpl-thinker', created: 1767225600, model: 'thinker-upstream' };

function answer(finish: string | null) {
  return {
    replay: {
      contentType: 'application/json',
      body: JSON.stringify({ ...BASE, object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: '' }, finish_reason: finish }], usage: WIRE_USAGE }),
    },
  };
}

/** A stream whose only report is the usage chunk: no content, and (`finish` null) no finish reason. */
function stream(finish: string | null) {
  const chunk = (choices: unknown[], extra: object = {}) => `data: ${JSON.stringify({ ...BASE, object: 'chat.completion.chunk', choices, ...extra })}\n\n`;
  return {
    replay: {
      contentType: 'text/event-stream',
      body: chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: finish }]) + chunk([], { usage: WIRE_USAGE }) + 'data: [DONE]\n\n',
    },
  };
}

describe('reasoning tokens beside completion_tokens 0 are billed (issue 35 item 6)', () => {
  let upstream: FakeUpstream;
  let harness: ChatHarness;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    harness = await startChatHarness({
      configYaml: oneModelCatalog({
        model: MODEL,
        provider: { kind: 'openai', url: upstream.url, keyEnv: 'REASONING_USAGE_KEY' },
        upstreamModel: 'thinker-upstream',
        supportedParameters: ['max_tokens', 'max_completion_tokens', 'stream_options'],
        endpoints: ['chat.completions'],
        inputPrice: PRICES.input,
        outputPrice: PRICES.output,
      }),
      providerSecrets: { REASONING_USAGE_KEY: 'sk-reasoning' },
    });
  }, 120_000);
  afterAll(() => stopHarnessAndFakes(harness, [upstream]));
  beforeEach(() => upstream.reset());

  it('an answer: 900 prompt + 40 output tokens charged exactly, shown as completion tokens and in usage.cost', async () => {
    upstream.setFallback(answer('length'));
    const before = await harness.charges(MODEL);
    const { data, response } = await harness.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Think.' }] }).withResponse();
    expect(data.usage?.prompt_tokens).toBe(900);
    expect(data.usage?.completion_tokens).toBe(40);
    expect(data.usage?.completion_tokens_details?.reasoning_tokens).toBe(40);
    expect((data.usage as unknown as { cost: string }).cost).toBe(formatCredits(CHARGE_PICO));
    const after = await harness.chargesSettleAt(MODEL, before.requests + 1);
    expect(after.costPico - before.costPico).toBe(CHARGE_PICO);
    const record = await generationRecord(harness.stack.url, harness.apiKey, response.headers.get('x-gateway-request-id')!);
    expect(record).toMatchObject({ tokens_prompt: 900, tokens_completion: 40, tokens_reasoning: 40, native_tokens_completion: 40, native_tokens_total: 900, total_cost: formatCredits(CHARGE_PICO), insured: false });
    // The 40 output tokens are all reasoning: priced at per_output_token, in the reasoning part.
    expect(record.cost_details).toMatchObject({ input: formatCredits(900n * 1_000_000n), reasoning: formatCredits(40n * 2_000_000n), output: '0' });
  });

  it('a stream of only reasoning and no finish reason is no zero completion: charged 900 + 40 too', async () => {
    upstream.setFallback(stream(null));
    const before = await harness.charges(MODEL);
    const streamed = await harness.client.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'Think hard.' }], stream: true, stream_options: { include_usage: true } })
      .withResponse();
    let usage: { completion_tokens?: number; cost?: string } | undefined;
    for await (const chunk of streamed.data) if (chunk.usage) usage = chunk.usage as typeof usage;
    expect(usage?.completion_tokens).toBe(40);
    expect(usage?.cost).toBe(formatCredits(CHARGE_PICO));
    const after = await harness.chargesSettleAt(MODEL, before.requests + 1);
    expect(after.costPico - before.costPico).toBe(CHARGE_PICO);
    const record = await generationRecord(harness.stack.url, harness.apiKey, streamed.response.headers.get('x-gateway-request-id')!);
    expect(record).toMatchObject({ tokens_completion: 40, tokens_reasoning: 40, total_cost: formatCredits(CHARGE_PICO), insured: false, insured_reason: null });
  });
});
