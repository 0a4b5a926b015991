import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type OpenAI from 'openai';
import { startFakeGeminiUpstream, startFakeUpstream, type FakeGeminiUpstream, type FakeUpstream } from '@gateway/testing';
import { resetFakes, startChatHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { anthropicClient } from './messages-e2e-harness.js';

/*
 * Gemini 3 refuses a function call sent back without its thoughtSignature, also when the client spoke
 * chat completions (issue 26). Whole stack against the fake Gemini API (which refuses a Gemini 3 call
 * without a signature and any signature it did not issue): a chat-completions client that echoes ONLY
 * the assistant message's tool_calls (as received, extra_content included) and the tool results brings
 * the original signature back to the functionCall part, whole and streamed; the same history sent to an
 * OpenAI-wire model carries no signature; a signature without the gateway's tag reaches nobody. The
 * messages and responses dialects keep their round trips through their reasoning blocks / items.
 */

const GEMINI = 'testco/gemini-three';
const GPT = 'testco/gpt-plain';
const SKIP = 'skip_thought_signature_validator';

const weatherTool: OpenAI.ChatCompletionTool = {
  type: 'function',
  function: { name: 'get_weather', description: 'Weather for a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
};

function catalog(gemini: FakeGeminiUpstream, openai: FakeUpstream): string {
  return `
startups:
  - { id: testco, display_name: Test Co }
providers:
  - { id: gem, kind: gemini, base_url: ${gemini.url}, api_key_env: SIG_E2E_GEMINI_KEY }
  - { id: openai-plain, kind: openai, base_url: ${openai.url}, api_key_env: SIG_E2E_OPENAI_KEY }
limit_groups:
  - id: default
    tiers: { tier-1: { minute: 600 } }
models:
  - id: ${GEMINI}
    owned_by: testco
    created: 1767225600
    input_modalities: [text]
    output_modalities: [text]
    supported_parameters: [tools, tool_choice, max_tokens, max_completion_tokens, reasoning]
    pricing: { per_input_token: "0.000001", per_output_token: "0.000002" }
    limit_group: default
    offers:
      - { provider: gem, upstream_model: gemini-3-pro-preview, endpoints: [chat.completions, responses, messages] }
  - id: ${GPT}
    owned_by: testco
    created: 1767225600
    input_modalities: [text]
    output_modalities: [text]
    supported_parameters: [tools, tool_choice, max_tokens, max_completion_tokens]
    pricing: { per_input_token: "0.000001", per_output_token: "0.000002" }
    limit_group: default
    offers:
      - { provider: openai-plain, upstream_model: gpt-upstream, endpoints: [chat.completions] }
`;
}

/** The call signature the gateway tagged: `gw1.<issuer>.<mac>.fc:<the provider's own value>`. */
function rawSignature(tagged: string): string {
  const at = tagged.indexOf('.fc:');
  expect(tagged.startsWith('gw1.') && at > 0, tagged).toBe(true);
  return tagged.slice(at + '.fc:'.length);
}

describe('a Gemini call signature rides on the tool call (chat completions) and stays with its provider', () => {
  let gemini: FakeGeminiUpstream;
  let openai: FakeUpstream;
  let harness: ChatHarness;
  let client: OpenAI;

  beforeAll(async () => {
    [gemini, openai] = await Promise.all([startFakeGeminiUpstream({ apiKey: 'gemini-key' }), startFakeUpstream()]);
    harness = await startChatHarness({
      configYaml: catalog(gemini, openai),
      providerSecrets: { SIG_E2E_GEMINI_KEY: 'gemini-key', SIG_E2E_OPENAI_KEY: 'openai-key' },
      credits: '100',
    });
    client = harness.client;
  }, 120_000);

  afterAll(() => stopHarnessAndFakes(harness, [gemini, openai]), 30_000);

  beforeEach(() => resetFakes([gemini, openai]));

  const question: OpenAI.ChatCompletionMessageParam = { role: 'user', content: 'Weather in Paris and Rome?' };
  const twoCalls = { functionCalls: [{ name: 'get_weather', args: { city: 'Paris' } }, { name: 'get_weather', args: { city: 'Rome' } }] };

  /** Only what a plain OpenAI-SDK agent keeps: the assistant message's tool_calls as received, and the results. */
  function toolLoop(toolCalls: unknown[]): OpenAI.ChatCompletionMessageParam[] {
    return [
      question,
      { role: 'assistant', content: null, tool_calls: toolCalls } as unknown as OpenAI.ChatCompletionMessageParam,
      { role: 'tool', tool_call_id: (toolCalls[0] as { id: string }).id, content: '{"temp_c":21}' },
      { role: 'tool', tool_call_id: (toolCalls[1] as { id: string }).id, content: '{"temp_c":19}' },
    ];
  }

  /** The thoughtSignature of each functionCall part of the model turn the fake received last. */
  function signaturesSent(): (string | undefined)[] {
    const body = gemini.requests.at(-1)!.body;
    const model = body.contents.find((content: any) => content.role === 'model');
    return model.parts.filter((part: any) => part.functionCall).map((part: any) => part.thoughtSignature);
  }

  it('whole answer: the call carries the tagged signature; echoed alone, the original signature reaches the functionCall part', async () => {
    gemini.script(twoCalls, { text: 'Warm in both.' });
    const first = await client.chat.completions.create({ model: GEMINI, messages: [question], tools: [weatherTool] });
    const calls = first.choices[0]!.message.tool_calls as any[];
    expect(first.choices[0]!.finish_reason).toBe('tool_calls');
    const tagged = calls[0].extra_content?.google?.thought_signature as string;
    const original = rawSignature(tagged);
    expect(original).toMatch(/^[A-Za-z0-9+/]+=*$/);
    // Gemini signs the first call of a parallel answer only.
    expect(calls[1].extra_content).toBeUndefined();

    const second = await client.chat.completions.create({ model: GEMINI, messages: toolLoop(JSON.parse(JSON.stringify(calls))), tools: [weatherTool] });
    expect(second.choices[0]!.message.content).toBe('Warm in both.');
    expect(gemini.requests).toHaveLength(2);
    expect(signaturesSent()).toEqual([original, undefined]);
  });

  it('streamed answer: the signature comes on the call\'s first chunk; echoed, it goes back to Gemini 3', async () => {
    gemini.script(twoCalls, { text: 'Warm in both.' });
    const stream = await client.chat.completions.create({ model: GEMINI, messages: [question], tools: [weatherTool], stream: true });
    const calls: any[] = [];
    for await (const chunk of stream) {
      for (const call of (chunk.choices[0]?.delta.tool_calls ?? []) as any[]) {
        const gathered = (calls[call.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
        if (call.id) gathered.id = call.id;
        if (call.function?.name) gathered.function.name = call.function.name;
        gathered.function.arguments += call.function?.arguments ?? '';
        if (call.extra_content) gathered.extra_content = call.extra_content;
      }
    }
    expect(calls.map((call) => call.function.name)).toEqual(['get_weather', 'get_weather']);
    const original = rawSignature(calls[0].extra_content.google.thought_signature);

    const second = await client.chat.completions.create({ model: GEMINI, messages: toolLoop(calls), tools: [weatherTool], stream: true });
    let text = '';
    for await (const chunk of second) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe('Warm in both.');
    expect(signaturesSent()).toEqual([original, undefined]);
  });

  it('the same history sent to an OpenAI-wire model carries no signature; an untagged one reaches Gemini as foreign', async () => {
    gemini.script(twoCalls);
    const first = await client.chat.completions.create({ model: GEMINI, messages: [question], tools: [weatherTool] });
    const calls = JSON.parse(JSON.stringify(first.choices[0]!.message.tool_calls)) as any[];
    const tagged = calls[0].extra_content.google.thought_signature as string;
    const original = rawSignature(tagged);

    await client.chat.completions.create({ model: GPT, messages: toolLoop(calls), tools: [weatherTool] });
    const sent = openai.requests.at(-1)!.body;
    expect(sent.messages[1].tool_calls.map((call: any) => call.id)).toEqual(calls.map((call) => call.id));
    expect(sent.messages[1].tool_calls.every((call: any) => call.extra_content === undefined)).toBe(true);
    expect(JSON.stringify(sent)).not.toContain(original);

    // The provider's own value without the gateway's tag (or with an edited one) is foreign to every
    // provider: Gemini gets Google's documented skip value instead, never the value the client wrote.
    for (const forged of [original, `${tagged}x`]) {
      gemini.reset();
      gemini.script({ text: 'Warm in both.' });
      const edited = calls.map((call, index) => (index === 0 ? { ...call, extra_content: { google: { thought_signature: forged } } } : call));
      const answer = await client.chat.completions.create({ model: GEMINI, messages: toolLoop(edited), tools: [weatherTool] });
      expect(answer.choices[0]!.message.content).toBe('Warm in both.');
      expect(signaturesSent()).toEqual([SKIP, undefined]);
    }
  });

  it('messages: the tool_use turn echoed with its thinking blocks brings the signature back (no carrier on tool_use needed)', async () => {
    gemini.script({ functionCalls: [{ name: 'get_weather', args: { city: 'Paris' } }] }, { text: 'Warm.' });
    const anthropic = anthropicClient(harness.stack.url, harness.apiKey);
    const tools = [{ name: 'get_weather', description: 'Weather for a city', input_schema: { type: 'object' as const, properties: { city: { type: 'string' } } } }];
    const first = await anthropic.messages.create({ model: GEMINI, max_tokens: 256, tools, messages: [{ role: 'user', content: 'Weather in Paris?' }] });
    expect(first.stop_reason).toBe('tool_use');
    const toolUse = first.content.find((block) => block.type === 'tool_use')!;
    expect(first.content.some((block) => block.type === 'thinking' && block.signature.startsWith('gw1.'))).toBe(true);
    const second = await anthropic.messages.create({
      model: GEMINI, max_tokens: 256, tools,
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: first.content as any },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: toolUse.id, content: '{"temp_c":21}' }] },
      ],
    });
    expect(second.content.flatMap((block) => (block.type === 'text' ? [block.text] : []))).toEqual(['Warm.']);
    const [signature] = signaturesSent();
    expect(typeof signature).toBe('string');
    expect(signature).not.toBe(SKIP);
  });

  it('responses: the function_call echoed with its reasoning item brings the signature back (no carrier on function_call needed)', async () => {
    gemini.script({ functionCalls: [{ name: 'get_weather', args: { city: 'Paris' } }] }, { text: 'Warm.' });
    const tools: OpenAI.Responses.Tool[] = [{ type: 'function', name: 'get_weather', parameters: weatherTool.function.parameters ?? null, strict: false }];
    const first = await client.responses.create({ model: GEMINI, input: 'Weather in Paris?', tools, store: false });
    const call = first.output.find((item) => item.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall;
    expect(first.output.some((item) => item.type === 'reasoning' && item.encrypted_content?.startsWith('gw1.'))).toBe(true);
    const second = await client.responses.create({
      model: GEMINI, tools, store: false,
      input: [
        { role: 'user', content: 'Weather in Paris?' },
        ...(first.output as OpenAI.Responses.ResponseInputItem[]),
        { type: 'function_call_output', call_id: call.call_id, output: '{"temp_c":21}' },
      ],
    });
    expect(second.output_text).toBe('Warm.');
    const [signature] = signaturesSent();
    expect(typeof signature).toBe('string');
    expect(signature).not.toBe(SKIP);
  });
});
