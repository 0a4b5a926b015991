import { describe, expect, it } from 'vitest';
import type OpenAI from 'openai';
import { parseResponsesRequest } from './responses-schema.js';
import { refusalOf } from '../../../test/refusal.js';

function refusal(body: unknown) {
  return refusalOf(() => parseResponsesRequest(body));
}

describe('responses request schema', () => {
  it('accepts what client.responses.create sends (the SDK type checks this literal)', () => {
    const params: OpenAI.Responses.ResponseCreateParamsNonStreaming = {
      model: 'm',
      instructions: 'Be brief.',
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'hi' }, { type: 'input_image', image_url: 'https://example.com/a.png', detail: 'auto' }] },
        { type: 'message', role: 'assistant', status: 'completed', id: 'msg_1', content: [{ type: 'output_text', text: 'ok', annotations: [] }] },
        { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 't' }], encrypted_content: 'gw1.x.y.z' },
        { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c', output: 'r' },
      ],
      tools: [{ type: 'function', name: 'f', parameters: { type: 'object' }, strict: true, description: 'd' }],
      tool_choice: 'auto',
      text: { format: { type: 'json_schema', name: 'n', schema: { type: 'object' }, strict: true }, verbosity: 'low' },
      reasoning: { effort: 'high', summary: 'auto' },
      max_output_tokens: 64,
      temperature: 0.2,
      top_p: 1,
      parallel_tool_calls: true,
      metadata: { a: 'b' },
      user: 'u',
      store: false,
      include: ['reasoning.encrypted_content'],
      truncation: 'disabled',
    };
    const parsed = parseResponsesRequest(params);
    expect(parsed.input).toHaveLength(5);
    // An item without a type is a message when it has a role.
    expect((parsed.input as { type: string }[])[0]!.type).toBe('message');
  });

  it('takes instructions without input (input is optional in OpenAI\'s API)', () => {
    expect(parseResponsesRequest({ model: 'm', instructions: 'Say hi.' }).input).toEqual([]);
    expect(parseResponsesRequest({ model: 'm', instructions: 'Say hi.', input: null }).input).toEqual([]);
    expect(parseResponsesRequest({ model: 'm', instructions: 'Say hi.', input: [] }).input).toEqual([]);
  });

  it('names the field path of every refusal', () => {
    // Neither input nor instructions: nothing to send, and the message says so naming both fields.
    for (const body of [{ model: 'm' }, { model: 'm', input: [] }, { model: 'm', input: null, instructions: '' }, { model: 'm', input: '' }]) {
      const error = refusal(body);
      expect(error).toMatchObject({ status: 400, param: 'body.input' });
      expect(error.message).toBe('body.input: is required when `instructions` is empty: the request has nothing to send the model.');
    }
    expect(refusal({ model: 'm', input: [{ type: 'web_search_call', id: 'ws_1' }] })).toMatchObject({ param: 'body.input.0.type' });
    expect(refusal({ model: 'm', input: [{ type: 'web_search_call', id: 'ws_1' }] }).message).toMatch(/unsupported input item type/);
    expect(refusal({ model: 'm', input: [{ role: 'robot', content: 'x' }] })).toMatchObject({ param: 'body.input.0.role' });
    expect(refusal({ model: 'm', input: [{ role: 'user', content: [{ type: 'input_audio' }] }] })).toMatchObject({ param: 'body.input.0.content.0.type' });
    expect(refusal({ model: 'm', input: [{ role: 'user', content: [{ type: 'input_image', detail: 'auto' }] }] })).toMatchObject({ param: 'body.input.0.content.0' });
    expect(refusal({ model: 'm', input: [{ type: 'function_call', name: 'f', arguments: '{}' }] })).toMatchObject({ param: 'body.input.0.call_id' });
    expect(refusal({ model: 'm', input: 'x', metadata: { a: 1 } })).toMatchObject({ param: 'body.metadata.a' });
    expect(refusal({ model: 'm', input: 'x', reasoning: { effort: 'extreme' } })).toMatchObject({ param: 'body.reasoning.effort' });
  });

  it('accepts the tool kinds and request fields Codex sends; an unknown tool type is refused naming the kinds', () => {
    const parsed = parseResponsesRequest({
      model: 'm',
      input: [
        { type: 'message', role: 'assistant', phase: 'commentary', content: 'thinking aloud' },
        { type: 'function_call', call_id: 'c1', name: 'spawn', namespace: 'agents', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c1', output: 'ok' },
        { type: 'custom_tool_call', call_id: 'c2', name: 'apply_patch', input: '*** Begin Patch' },
        { type: 'custom_tool_call_output', call_id: 'c2', output: 'done' },
      ],
      tools: [
        { type: 'namespace', name: 'agents', description: 'Sub-agents', tools: [{ type: 'function', name: 'spawn', parameters: { type: 'object' } }] },
        { type: 'custom', name: 'apply_patch', description: 'Edit files', format: { type: 'grammar', syntax: 'lark', definition: 'start: /.+/' } },
        { type: 'web_search', external_web_access: false },
      ],
      tool_choice: 'auto',
      store: false,
      include: ['reasoning.encrypted_content'],
      reasoning: { summary: 'auto' },
      prompt_cache_key: 'session-1',
      client_metadata: { installation_id: 'x' },
      parallel_tool_calls: true,
      safety_identifier: 'user-1',
      max_tool_calls: 8,
      service_tier: 'priority',
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
      top_logprobs: 3,
    });
    expect(parsed.tools!.map((tool) => tool.type)).toEqual(['namespace', 'custom', 'web_search']);
    expect(parsed).toMatchObject({ max_tool_calls: 8, top_logprobs: 3, presence_penalty: 0.5, service_tier: 'priority' });
    const unknown = refusal({ model: 'm', input: 'x', tools: [{ type: 'teleport' }] });
    expect(unknown).toMatchObject({ param: 'body.tools.0.type' });
    expect(unknown.message).toMatch(/function, custom, namespace, web_search/);
    expect(refusal({ model: 'm', input: 'x', tools: [{ type: 'namespace', name: 'n', tools: [{ type: 'web_search' }] }] })).toMatchObject({ param: 'body.tools.0.tools.0.type' });
    expect(refusal({ model: 'm', input: 'x', top_logprobs: 21 })).toMatchObject({ param: 'body.top_logprobs' });
    expect(refusal({ model: 'm', input: 'x', tool_choice: 'sometimes' })).toMatchObject({ param: 'body.tool_choice' });
  });

  it('keeps unknown top-level fields for the converter (extra parameters or dropped)', () => {
    expect(parseResponsesRequest({ model: 'm', input: 'x', service_tier: 'flex' })).toMatchObject({ service_tier: 'flex' });
  });
});
