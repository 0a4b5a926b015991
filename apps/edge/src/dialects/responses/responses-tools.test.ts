import { describe, expect, it } from 'vitest';
import type OpenAI from 'openai';
import type { ChatResponse, Model } from '@gateway/proto';
import { answerContext, canonicalDelta, rawEvents, sdkFinalResponse, testUsage, toolCallDelta } from '../../../test/responses-support.js';
import type { CatalogModel } from '../../catalog-cache.js';
import { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { convertResponsesRequest } from './convert-responses-request.js';
import { renderResponse } from './render-responses.js';
import { parseResponsesRequest } from './responses-schema.js';
import { ResponsesStreamWriter } from './responses-stream-writer.js';
import { flatToolName } from './responses-tools.js';
import { refusalOf } from '../../../test/refusal.js';

// The tool kinds of the responses dialect over the canonical request's plain function tools:
// namespace members flattened (and mapped back with `namespace`), custom tools as one-string functions
// (mapped back as custom_tool_call items), hosted tools dropped and named.

const model: CatalogModel = {
  model: { id: 'm', reasoningEfforts: [] } as unknown as Model,
  id: 'm',
  paid: true,
  endpoints: new Set(['responses']),
  supportedParameters: new Set(['tools', 'tool_choice', 'temperature', 'presence_penalty', 'frequency_penalty']),
  inputModalities: new Set(['text']),
  extraParameters: new Set(),
  allowedTiers: null,
  availableTiers: ['tier-1'],
};
const tags = new ReasoningTags('responses-tools-test-key');

/** What Codex sends (its sub-agent namespace, apply_patch as a free-form tool, web search). */
const CODEX_TOOLS = [
  { type: 'function', name: 'shell', description: 'Run a command', parameters: { type: 'object', properties: { cmd: { type: 'string' } } }, strict: false },
  {
    type: 'namespace',
    name: 'agents',
    description: 'Sub-agents.',
    tools: [
      { type: 'function', name: 'spawn_agent', description: 'Start one.', parameters: { type: 'object', properties: { task: { type: 'string' } } } },
      { type: 'custom', name: 'note', description: 'Leave a note.' },
    ],
  },
  { type: 'custom', name: 'apply_patch', description: 'Edit files.', format: { type: 'grammar', syntax: 'lark', definition: 'start: "*** Begin Patch"' } },
  { type: 'web_search', external_web_access: false },
];

const body = (extra: Record<string, unknown> = {}) => parseResponsesRequest({ model: 'm', input: 'hi', tools: CODEX_TOOLS, ...extra });
const convert = (extra: Record<string, unknown> = {}) => convertResponsesRequest(body(extra), model, tags);

function refusal(extra: Record<string, unknown>) {
  return refusalOf(() => convert(extra));
}

const customParameters = (description: string) => ({
  type: 'object',
  properties: { input: { type: 'string', description } },
  required: ['input'],
  additionalProperties: false,
});

describe('responses tools: to the canonical request', () => {
  it('flattens namespace members, turns custom tools into one-string functions, drops hosted tools and names them', () => {
    const converted = convert();
    expect(converted.request.tools.map((tool) => ({ ...tool, parameters: JSON.parse(tool.parameters) }))).toEqual([
      { name: 'shell', description: 'Run a command', parameters: { type: 'object', properties: { cmd: { type: 'string' } } }, strict: false },
      { name: 'agents__spawn_agent', description: 'Sub-agents.\n\nStart one.', parameters: { type: 'object', properties: { task: { type: 'string' } } } },
      { name: 'agents__note', description: 'Sub-agents.\n\nLeave a note.', parameters: customParameters("The tool's free-form input, as raw text.") },
      {
        name: 'apply_patch',
        description: 'Edit files.',
        parameters: customParameters('The tool\'s input, as raw text matching this lark grammar:\nstart: "*** Begin Patch"'),
      },
    ]);
    expect(converted.droppedTools).toEqual(['web_search']);
    // Tools are not a dropped parameter: the model has them.
    expect(converted.droppedParams).toEqual([]);
  });

  it('a request of only hosted tools sends no tools and reports no dropped parameter', () => {
    const converted = convertResponsesRequest(parseResponsesRequest({ model: 'm', input: 'hi', tools: [{ type: 'web_search' }, { type: 'file_search', vector_store_ids: ['vs'] }] }), model, tags);
    expect(converted.request.tools).toEqual([]);
    expect(converted.droppedTools).toEqual(['file_search', 'web_search']);
    expect(converted.droppedParams).toEqual([]);
  });

  it('a tool_choice forcing a hosted tool is 400 naming it; a custom tool choice forces its function', () => {
    const forced = refusal({ tool_choice: { type: 'web_search' } });
    expect(forced).toMatchObject({ status: 400, param: 'body.tool_choice', code: 'unsupported_tool_choice' });
    expect(forced.message).toContain("'web_search'");
    expect(convert({ tool_choice: { type: 'custom', name: 'apply_patch' } }).request.toolChoice).toEqual({ mode: 'tool', toolName: 'apply_patch', disableParallel: false });
    // A choice naming a namespace member forces its flat name.
    expect(convert({ tool_choice: { type: 'function', name: 'spawn_agent' } }).request.toolChoice).toMatchObject({ mode: 'tool', toolName: 'agents__spawn_agent' });
  });

  it('replayed calls use the names the provider saw: namespaced function calls and custom calls with their outputs', () => {
    const converted = convert({
      input: [
        { role: 'user', content: 'go' },
        { type: 'function_call', call_id: 'c1', name: 'spawn_agent', namespace: 'agents', arguments: '{"task":"t"}' },
        { type: 'custom_tool_call', call_id: 'c2', name: 'apply_patch', input: '*** Begin Patch\n"x"' },
        { type: 'function_call_output', call_id: 'c1', output: 'spawned' },
        { type: 'custom_tool_call_output', call_id: 'c2', output: 'patched' },
      ],
    });
    const [, assistant, first, second] = converted.request.messages;
    expect(assistant!.toolCalls).toEqual([
      { id: 'c1', name: 'agents__spawn_agent', arguments: '{"task":"t"}' },
      { id: 'c2', name: 'apply_patch', arguments: JSON.stringify({ input: '*** Begin Patch\n"x"' }) },
    ]);
    expect(first).toMatchObject({ role: 'tool', toolCallId: 'c1', content: [{ part: { $case: 'text', value: 'spawned' } }] });
    expect(second).toMatchObject({ role: 'tool', toolCallId: 'c2', content: [{ part: { $case: 'text', value: 'patched' } }] });
  });

  it('an unanswered custom call is refused like an unanswered function call', () => {
    expect(refusal({ input: [{ type: 'custom_tool_call', call_id: 'c9', name: 'apply_patch', input: 'x' }] })).toMatchObject({
      status: 400,
      code: 'tool_output_unmatched',
      param: 'body.input.0.call_id',
    });
  });

  it('flat names every upstream accepts: Codex-style trimming, other characters replaced, long names hashed; collisions refused', () => {
    expect(flatToolName('mcp__docs__', 'search')).toBe('mcp__docs__search');
    expect(flatToolName('', 'plain')).toBe('plain');
    expect(flatToolName('my.server', 'read file')).toBe('my_server__read_file');
    const long = flatToolName('n'.repeat(40), 't'.repeat(40));
    expect(long).toMatch(/^[a-zA-Z0-9_-]{64}$/);
    expect(long).not.toBe(flatToolName('n'.repeat(40), `${'t'.repeat(39)}u`));
    const collision = refusal({ tools: [{ type: 'function', name: 'a__b' }, { type: 'namespace', name: 'a', description: '', tools: [{ type: 'function', name: 'b' }] }] });
    expect(collision).toMatchObject({ status: 400, param: 'body.tools.1.tools.0', code: 'duplicate_tool_name' });
    expect(collision.message).toContain('body.tools.0');
  });
});

function answer(toolCalls: { id: string; name: string; arguments: string }[]): ChatResponse {
  return {
    id: 'x',
    modelId: 'm',
    created: 1n,
    choices: [{ index: 0, message: { content: '', toolCalls, reasoning: [], images: [] }, finishReason: 'tool_calls', stopSequence: '' }],
    usage: testUsage(10, 5),
    providerId: 'provider-a',
    routingStrategy: 'balanced',
    droppedParams: [],
  };
}

const CALLS = [
  { id: 'call_a', name: 'agents__spawn_agent', arguments: '{"task":"t"}' },
  { id: 'call_b', name: 'apply_patch', arguments: '{"input":"*** Begin Patch"}' },
  { id: 'call_c', name: 'agents__note', arguments: '{"input":"hello"}' },
  { id: 'call_d', name: 'shell', arguments: '{"cmd":"ls"}' },
];

const BASE = '0123456789abcdef0123456789abcdef';
const EXPECTED_ITEMS = [
  { id: `fc_${BASE}_0`, type: 'function_call', status: 'completed', call_id: 'call_a', name: 'spawn_agent', namespace: 'agents', arguments: '{"task":"t"}' },
  { id: `ctc_${BASE}_1`, type: 'custom_tool_call', status: 'completed', call_id: 'call_b', name: 'apply_patch', input: '*** Begin Patch' },
  { id: `ctc_${BASE}_2`, type: 'custom_tool_call', status: 'completed', call_id: 'call_c', name: 'note', input: 'hello', namespace: 'agents' },
  { id: `fc_${BASE}_3`, type: 'function_call', status: 'completed', call_id: 'call_d', name: 'shell', arguments: '{"cmd":"ls"}' },
];

describe('responses tools: back to the dialect', () => {
  it('renders calls as OpenAI returns them: namespace on namespaced calls, custom_tool_call with the raw input', () => {
    const rendered = renderResponse(answer(CALLS), answerContext(), body()) as unknown as { output: unknown[]; tools: unknown[] };
    expect(rendered.output).toEqual(EXPECTED_ITEMS);
    // The tools the model had: the client's own (the hosted web_search was dropped).
    expect(rendered.tools.map((tool) => (tool as { type: string }).type)).toEqual(['function', 'namespace', 'custom']);
  });

  it('a custom call whose arguments are not {"input": …} keeps them as the input', () => {
    const rendered = renderResponse(answer([{ id: 'c', name: 'apply_patch', arguments: 'raw patch text' }]), answerContext(), body()) as { output: { input: string }[] };
    expect(rendered.output[0]!.input).toBe('raw patch text');
  });

  it('streams namespaced function calls and custom calls with their own events; the SDK assembles the same items', async () => {
    const writer = new ResponsesStreamWriter(answerContext(), body());
    writer.start({ id: 'x', modelId: 'm', created: 1n, providerId: 'provider-a', routingStrategy: 'balanced', droppedParams: [] });
    let sse = writer.open();
    sse += writer.delta(canonicalDelta({ toolCalls: [toolCallDelta(0, { id: 'call_a', name: 'agents__spawn_agent', arguments: '{"task":' })] }));
    sse += writer.delta(canonicalDelta({ toolCalls: [toolCallDelta(0, { arguments: '"t"}' })] }));
    sse += writer.delta(canonicalDelta({ toolCalls: [toolCallDelta(1, { id: 'call_b', name: 'apply_patch', arguments: '{"input":"*** Begin' })] }));
    sse += writer.delta(canonicalDelta({ toolCalls: [toolCallDelta(1, { arguments: ' Patch"}' })] }));
    sse += writer.delta(canonicalDelta({ toolCalls: [toolCallDelta(2, { id: 'call_c', name: 'agents__note', arguments: '{"input":"hello"}' })] }));
    sse += writer.delta(canonicalDelta({ toolCalls: [toolCallDelta(3, { id: 'call_d', name: 'shell', arguments: '{"cmd":"ls"}' })], finishReason: 'tool_calls' }));
    sse += writer.end(testUsage(10, 5));
    const events = rawEvents(sse);
    expect(events.filter((event) => event.event.startsWith('response.custom_tool_call_input')).map((event) => event.data)).toEqual([
      { type: 'response.custom_tool_call_input.delta', sequence_number: expect.any(Number), item_id: `ctc_${BASE}_1`, output_index: 1, delta: '*** Begin Patch' },
      { type: 'response.custom_tool_call_input.done', sequence_number: expect.any(Number), item_id: `ctc_${BASE}_1`, output_index: 1, input: '*** Begin Patch' },
      { type: 'response.custom_tool_call_input.delta', sequence_number: expect.any(Number), item_id: `ctc_${BASE}_2`, output_index: 2, delta: 'hello' },
      { type: 'response.custom_tool_call_input.done', sequence_number: expect.any(Number), item_id: `ctc_${BASE}_2`, output_index: 2, input: 'hello' },
    ]);
    // The custom calls' function arguments never leak as function_call_arguments events.
    expect(events.filter((event) => event.event === 'response.function_call_arguments.delta').map((event) => event.data.item_id)).toEqual([`fc_${BASE}_0`, `fc_${BASE}_0`, `fc_${BASE}_3`]);
    expect(events.find((event) => event.event === 'response.function_call_arguments.done')!.data).toMatchObject({ name: 'spawn_agent', arguments: '{"task":"t"}' });
    const added = events.filter((event) => event.event === 'response.output_item.added').map((event) => event.data.item);
    expect(added[0]).toMatchObject({ type: 'function_call', name: 'spawn_agent', namespace: 'agents', status: 'in_progress' });
    expect(added[1]).toMatchObject({ type: 'custom_tool_call', name: 'apply_patch', input: '', status: 'in_progress' });
    const completed = events.at(-1)!.data.response as { output: unknown[] };
    expect(completed.output).toEqual(EXPECTED_ITEMS);
    // The SDK's stream helper adds its own `parsed_arguments` to function calls.
    const final: OpenAI.Responses.Response = await sdkFinalResponse(sse);
    expect(final.output).toMatchObject(EXPECTED_ITEMS);
  });
});
