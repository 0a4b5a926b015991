import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import type { FakeUpstream, RecordedRequest } from '@gateway/testing';
import { oneModelCatalog, startChatHarness, startSimulatedHarness, stopHarnessAndFakes, type ChatHarness } from './chat-e2e-harness.js';
import { UPSTREAM_KINDS, type UpstreamKind } from './messages-e2e-harness.js';

// The tool kinds Codex sends over POST /v1/responses, end to end with the real `openai` client against
// each fake upstream kind (OpenAI-compatible chat completions, Anthropic messages): namespace members
// and custom tools reach the provider as plain functions under names it accepts, the provider's calls
// come back as the items OpenAI's Responses API returns (function_call with `namespace`,
// custom_tool_call with `input`), hosted tools are dropped and named in x-gateway-dropped-tools.

const MODEL = 'testco/agent';
const PROVIDER_KEY_ENV = 'RESPONSES_TOOLS_E2E_KEY';

function catalog(kind: UpstreamKind, upstream: FakeUpstream): string {
  return oneModelCatalog({
    model: MODEL,
    provider: { kind: kind.kind, url: upstream.url, keyEnv: PROVIDER_KEY_ENV },
    upstreamModel: 'agent-upstream',
    supportedParameters: ['tools', 'tool_choice', 'temperature', 'max_completion_tokens'],
    endpoints: ['chat.completions', 'responses'],
  });
}

const SPAWN_PARAMETERS = { type: 'object', properties: { task: { type: 'string' } }, required: ['task'] };
const SHELL_PARAMETERS = { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] };

/** Codex's shape: a plain function, its sub-agent namespace, apply_patch as a free-form tool, web search. */
const TOOLS = [
  { type: 'function', name: 'shell', description: 'Run a command.', parameters: SHELL_PARAMETERS, strict: false },
  { type: 'namespace', name: 'agents', description: 'Sub-agents.', tools: [{ type: 'function', name: 'spawn_agent', description: 'Start one.', parameters: SPAWN_PARAMETERS }] },
  { type: 'custom', name: 'apply_patch', description: 'Edit files.' },
  { type: 'web_search', external_web_access: false },
] as unknown as OpenAI.Responses.Tool[];

const CUSTOM_PARAMETERS = {
  type: 'object',
  properties: { input: { type: 'string', description: "The tool's free-form input, as raw text." } },
  required: ['input'],
  additionalProperties: false,
};

/** What every provider must receive, in its own wire format. */
const EXPECTED_UPSTREAM_TOOLS = [
  { name: 'shell', description: 'Run a command.', parameters: SHELL_PARAMETERS },
  { name: 'agents__spawn_agent', description: 'Sub-agents.\n\nStart one.', parameters: SPAWN_PARAMETERS },
  { name: 'apply_patch', description: 'Edit files.', parameters: CUSTOM_PARAMETERS },
];

/** The tools a recorded request offered, as name / description / JSON schema, whatever the wire. */
function upstreamTools(kind: UpstreamKind, request: RecordedRequest) {
  const tools: any[] = request.body.tools ?? [];
  if (kind.kind === 'openai') {
    expect(tools.every((tool) => tool.type === 'function')).toBe(true);
    return tools.map((tool) => ({ name: tool.function.name, description: tool.function.description, parameters: tool.function.parameters }));
  }
  return tools.map((tool) => ({ name: tool.name, description: tool.description, parameters: tool.input_schema }));
}

const CALLS = [
  { id: 'call_spawn', name: 'agents__spawn_agent', arguments: '{"task":"review"}' },
  { id: 'call_patch', name: 'apply_patch', arguments: '{"input":"*** Begin Patch\\n*** End Patch"}' },
];

/** The items OpenAI's Responses API returns for those calls (ids aside). */
const EXPECTED_ITEMS = [
  { type: 'function_call', status: 'completed', call_id: 'call_spawn', name: 'spawn_agent', namespace: 'agents', arguments: '{"task":"review"}' },
  { type: 'custom_tool_call', status: 'completed', call_id: 'call_patch', name: 'apply_patch', input: '*** Begin Patch\n*** End Patch' },
];

/** The provider-side arguments of a call, compared as JSON (Anthropic's `input` is an object re-serialized). */
const parsedCalls = (calls: { id: string; name: string; arguments: string }[]) => calls.map((call) => ({ ...call, arguments: JSON.parse(call.arguments) }));

describe.each(UPSTREAM_KINDS)('responses tools Codex sends, on an $kind upstream, end to end', (kind) => {
  let upstream: FakeUpstream;
  let harness: ChatHarness;

  beforeAll(async () => {
    upstream = await kind.start();
    harness = await startChatHarness({ configYaml: catalog(kind, upstream), providerSecrets: { [PROVIDER_KEY_ENV]: 'sk-responses-tools' } });
  }, 120_000);

  afterAll(() => stopHarnessAndFakes(harness, [upstream]));

  beforeEach(() => upstream.reset());

  it('JSON: the provider gets plain functions, web_search is dropped and named, the calls come back namespaced and custom; the replay maps back', async () => {
    upstream.script({ toolCalls: CALLS }, { text: 'Reviewed and patched.' });
    const { data: response, response: http } = await harness.client.responses.create({ model: MODEL, input: 'Fix the bug.', tools: TOOLS }).withResponse();
    expect(http.headers.get('x-gateway-dropped-tools')).toBe('web_search');
    expect(http.headers.get('x-gateway-dropped-params')).toBeNull();
    expect(upstream.requests).toHaveLength(1);
    expect(upstreamTools(kind, upstream.requests[0]!)).toEqual(EXPECTED_UPSTREAM_TOOLS);
    expect(response.output).toMatchObject(EXPECTED_ITEMS);
    expect(response.output.map((item) => item.id!.split('_')[0])).toEqual(['fc', 'ctc']);
    expect(response.output_text).toBe('');
    // The tools the model had, as the client sent them, without the dropped hosted tool.
    expect(response.tools.map((tool) => tool.type)).toEqual(['function', 'namespace', 'custom']);

    // The client runs both tools and sends everything back, as Codex does.
    const second = await harness.client.responses.create({
      model: MODEL,
      tools: TOOLS,
      input: [
        { role: 'user', content: 'Fix the bug.' },
        ...(response.output as OpenAI.Responses.ResponseInputItem[]),
        { type: 'function_call_output', call_id: 'call_spawn', output: 'agent started' },
        { type: 'custom_tool_call_output', call_id: 'call_patch', output: 'patch applied' },
      ],
    });
    expect(second.output_text).toBe('Reviewed and patched.');
    const conversation = kind.conversation(upstream.requests[1]!);
    const assistant = conversation.find((message) => message.role === 'assistant')!;
    expect(parsedCalls(assistant.toolCalls)).toEqual(parsedCalls(CALLS));
    expect(conversation.filter((message) => message.role === 'tool').map((message) => [message.toolResultFor, message.text])).toEqual([
      ['call_spawn', 'agent started'],
      ['call_patch', 'patch applied'],
    ]);
  });

  it('streamed: the SDK sees custom_tool_call_input events and assembles the same items; the header names the dropped tool', async () => {
    upstream.script({ toolCalls: CALLS });
    const { data: stream, response: http } = await harness.client.responses.create({ model: MODEL, input: 'Fix the bug.', tools: TOOLS, stream: true }).withResponse();
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    expect(http.headers.get('x-gateway-dropped-tools')).toBe('web_search');
    expect(upstreamTools(kind, upstream.requests[0]!)).toEqual(EXPECTED_UPSTREAM_TOOLS);
    expect(events.find((event) => event.type === 'response.custom_tool_call_input.done')).toMatchObject({ input: '*** Begin Patch\n*** End Patch' });
    expect(events.find((event) => event.type === 'response.function_call_arguments.done')).toMatchObject({ name: 'spawn_agent' });
    const created = events.find((event) => event.type === 'response.created') as OpenAI.Responses.ResponseCreatedEvent;
    expect(created.response.usage).toBeNull();
    const completed = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
    expect(completed.type).toBe('response.completed');
    expect(completed.response.output).toMatchObject(EXPECTED_ITEMS);
  });

  it('a tool_choice forcing the dropped hosted tool is a 400 naming it, and no provider is called', async () => {
    const refused = await harness.client.responses
      .create({ model: MODEL, input: 'Search.', tools: TOOLS, tool_choice: { type: 'web_search_preview' } })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('body.tool_choice');
    expect((refused as Error).message).toContain("'web_search_preview'");
    expect(upstream.requests).toHaveLength(0);
  });
});

// The built-in simulated provider answers a forced tool with `{"input": <the prompt>}`: a custom tool's
// call then carries the prompt as its input, and a namespace member's call its namespace.
describe('responses tools Codex sends, on the simulated provider, end to end', () => {
  let harness: ChatHarness;

  beforeAll(async () => {
    harness = await startSimulatedHarness({ model: MODEL, supportedParameters: ['tools', 'tool_choice'], endpoints: ['chat.completions', 'responses'] });
  }, 120_000);

  afterAll(() => harness?.stop());

  it('a forced custom tool comes back as custom_tool_call with its input; required picks the namespace member first offered', async () => {
    const custom = await harness.client.responses.create({ model: MODEL, input: 'patch it', tools: TOOLS, tool_choice: { type: 'custom', name: 'apply_patch' } });
    expect(custom.output).toMatchObject([{ type: 'custom_tool_call', name: 'apply_patch', input: expect.stringContaining('patch it') }]);
    const namespaced = await harness.client.responses.create({ model: MODEL, input: 'go', tools: [TOOLS[1]!, TOOLS[3]!], tool_choice: 'required', stream: true });
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of namespaced) if (event.type === 'response.completed') completed = event.response;
    expect(completed!.output).toMatchObject([{ type: 'function_call', name: 'spawn_agent', namespace: 'agents' }]);
  });
});
