import { describe, expect, it } from 'vitest';
import type { ChatMessage, ChatRequest, ContentPart, ReasoningPart } from '@gateway/proto';
import { ProviderError } from '../provider-adapter.js';
import { convertToAnthropicRequest, DEFAULT_MAX_TOKENS, LEADING_USER_TEXT, systemNote, THINKING_BUDGET_BY_EFFORT } from './convert-to-anthropic-request.js';

const base: ChatRequest = {
  context: undefined, modelId: 'm', routingStrategy: '', endpoint: 'messages', messages: [], tools: [], stop: [],
  includeUsage: false, timeoutMs: 0,
};

const text = (value: string, cacheControl?: ContentPart['cacheControl']): ContentPart => ({ part: { $case: 'text', value }, ...(cacheControl ? { cacheControl } : {}) });

function message(role: string, content: ContentPart[] | string, extra: Partial<ChatMessage> = {}): ChatMessage {
  return {
    role, content: typeof content === 'string' ? [text(content)] : content, toolCalls: [], toolCallId: '', reasoning: [], isError: false, ...extra,
  };
}

const reasoning = (part: Partial<ReasoningPart>): ReasoningPart => ({ text: '', signature: '', encryptedData: '', providerId: '', ...part });

function convert(request: Partial<ChatRequest>, options: { stream?: boolean; modelMaxOutputTokens?: number } = {}) {
  return convertToAnthropicRequest({ ...base, ...request }, {
    upstreamModel: 'claude-up', stream: options.stream ?? false, providerId: 'claude-a', modelMaxOutputTokens: options.modelMaxOutputTokens,
  });
}

describe('convertToAnthropicRequest', () => {
  it('puts leading system and developer messages in `system` with their cache marks, and later ones as a note at their place', () => {
    const { body } = convert({
      messages: [
        message('system', [text('You are terse.', { type: 'ephemeral', ttl: '1h' }), text('   ')]),
        message('developer', 'Answer in French.'),
        message('user', 'Hi'),
        message('assistant', 'Bonjour.'),
        message('system', [text('From now on answer in English.', { type: 'ephemeral', ttl: '' })]),
        message('user', 'And now?'),
      ],
    });
    expect(body.system).toEqual([
      { type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral', ttl: '1h' } },
      { type: 'text', text: 'Answer in French.' },
    ]);
    expect(body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Hi' }] },
      { role: 'assistant', content: [{ type: 'text', text: 'Bonjour.' }] },
      {
        role: 'user',
        content: [
          { type: 'text', text: systemNote('From now on answer in English.'), cache_control: { type: 'ephemeral' } },
          { type: 'text', text: 'And now?' },
        ],
      },
    ]);
    expect(systemNote('x')).toBe('<system>\nx\n</system>');
  });

  it('merges tool results into one user turn before that turn\'s other content, with is_error and rich content', () => {
    const { body } = convert({
      messages: [
        message('user', 'Weather and time in Paris?'),
        message('assistant', 'Checking.', {
          toolCalls: [
            { id: 'toolu_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
            { id: 'toolu_2', name: 'get_time', arguments: '' },
          ],
        }),
        message('system', 'Tools may be slow today.'),
        message('tool', [text('18°C'), { part: { $case: 'image', value: { url: 'data:image/png;base64,iVBORw0K', detail: '' } } }], { toolCallId: 'toolu_1' }),
        message('tool', 'clock unavailable', { toolCallId: 'toolu_2', isError: true }),
        message('user', 'Thanks, and tomorrow?'),
      ],
    });
    expect(body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Weather and time in Paris?' }] },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Checking.' },
          { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
          { type: 'tool_use', id: 'toolu_2', name: 'get_time', input: {} },
        ],
      },
      {
        role: 'user',
        content: [
          {
            type: 'tool_result', tool_use_id: 'toolu_1',
            content: [{ type: 'text', text: '18°C' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0K' } }],
          },
          { type: 'tool_result', tool_use_id: 'toolu_2', content: [{ type: 'text', text: 'clock unavailable' }], is_error: true },
          { type: 'text', text: systemNote('Tools may be slow today.') },
          { type: 'text', text: 'Thanks, and tomorrow?' },
        ],
      },
    ]);
  });

  it('merges consecutive messages of one role and leaves out empty ones, so turns alternate', () => {
    const { body } = convert({
      messages: [
        message('user', 'one'),
        message('user', [text('two'), text(' ')]),
        message('assistant', ''),
        message('user', 'three'),
        message('assistant', 'a'),
        message('assistant', 'b  '),
      ],
    });
    expect(body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'one' }, { type: 'text', text: 'two' }, { type: 'text', text: 'three' }] },
      // The final assistant turn is a prefill: its trailing whitespace would be refused.
      { role: 'assistant', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] },
    ]);
  });

  it('sends this provider\'s thinking first, signed or redacted, and drops foreign or unsigned reasoning', () => {
    const { body } = convert({
      messages: [
        message('user', 'Weather?'),
        message('assistant', 'Let me look.', {
          reasoning: [
            reasoning({ text: 'own thought', signature: 'sig-a', providerId: 'claude-a' }),
            reasoning({ encryptedData: 'opaque-a', providerId: 'claude-a' }),
            reasoning({ text: 'foreign thought', signature: 'sig-b', providerId: 'claude-b' }),
            reasoning({ text: 'plain reasoning of an OpenAI-compatible model', providerId: 'claude-a' }),
            reasoning({ text: 'untagged', signature: 'sig-x' }),
          ],
          toolCalls: [{ id: 'toolu_9', name: 'get_weather', arguments: '{"city":"Paris"}' }],
        }),
        message('tool', 'sunny', { toolCallId: 'toolu_9' }),
      ],
    });
    expect(body.messages[1]).toEqual({
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'own thought', signature: 'sig-a' },
        { type: 'redacted_thinking', data: 'opaque-a' },
        { type: 'text', text: 'Let me look.' },
        { type: 'tool_use', id: 'toolu_9', name: 'get_weather', input: { city: 'Paris' } },
      ],
    });
  });

  it('rewrites tool ids and names Anthropic refuses, the same way on both sides, and maps them back', () => {
    const longName = `crm_${'lookup_customer_record_'.repeat(4)}by_email`;
    const { body, tools } = convert({
      messages: [
        message('user', 'Find Ann.'),
        message('assistant', '', { toolCalls: [{ id: 'call.1:abc', name: 'mcp.crm/find', arguments: '{"q":"Ann"}' }] }),
        message('tool', 'found', { toolCallId: 'call.1:abc' }),
      ],
      tools: [
        { name: 'mcp.crm/find', description: 'Finds', parameters: '{"type":"object","properties":{"q":{"type":"string"}}}' },
        { name: longName, description: '', parameters: '' },
        { name: 'plain_name', description: '', parameters: '{"properties":{}}' },
      ],
      toolChoice: { mode: 'tool', toolName: longName, disableParallel: false },
    });
    const [dotted, long, plain] = body.tools!;
    expect(dotted!.name).toMatch(/^mcp_crm_find_[0-9a-f]{8}$/);
    expect(long!.name).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
    expect(long!.name.length).toBe(64);
    expect(plain).toEqual({ name: 'plain_name', input_schema: { type: 'object', properties: {} } });
    expect(long!.input_schema).toEqual({ type: 'object', properties: {} });
    expect(body.tool_choice).toEqual({ type: 'tool', name: long!.name });

    const toolUse = (body.messages[1]!.content as { type: string; id?: string; name?: string }[])[0]!;
    const toolResult = (body.messages[2]!.content as { type: string; tool_use_id?: string }[])[0]!;
    expect(toolUse.id).toMatch(/^call_1_abc_[0-9a-f]{8}$/);
    expect(toolResult.tool_use_id).toBe(toolUse.id);
    expect(toolUse.name).toBe(dotted!.name);

    expect(tools.callerName(dotted!.name)).toBe('mcp.crm/find');
    expect(tools.callerName(long!.name)).toBe(longName);
    expect(tools.callerId(toolUse.id!)).toBe('call.1:abc');
    expect(tools.callerName('plain_name')).toBe('plain_name');
    expect(tools.callerId('toolu_fresh')).toBe('toolu_fresh');
  });

  it('converts images and documents by source, with title and context', () => {
    const { body } = convert({
      messages: [
        message('user', [
          text('Compare these.'),
          { part: { $case: 'image', value: { url: 'data:image/jpeg;base64,/9j/4AAQ', detail: 'high' } } },
          { part: { $case: 'image', value: { url: 'https://example.com/cat.png', detail: '' } }, cacheControl: { type: 'ephemeral', ttl: '' } },
          { part: { $case: 'file', value: { filename: 'report.pdf', data: Buffer.from('%PDF-1.4'), url: '', mediaType: 'application/pdf', context: 'Q3 figures', fileId: '' } } },
          { part: { $case: 'file', value: { filename: 'notes.txt', data: Buffer.from('plain notes'), url: '', mediaType: 'text/plain', context: '', fileId: '' } } },
          { part: { $case: 'file', value: { filename: '', data: Buffer.alloc(0), url: 'https://example.com/paper.pdf', mediaType: '', context: '', fileId: '' } } },
        ]),
      ],
    });
    expect(body.messages[0]!.content).toEqual([
      { type: 'text', text: 'Compare these.' },
      { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: '/9j/4AAQ' } },
      { type: 'image', source: { type: 'url', url: 'https://example.com/cat.png' }, cache_control: { type: 'ephemeral' } },
      { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: Buffer.from('%PDF-1.4').toString('base64') }, title: 'report.pdf', context: 'Q3 figures' },
      { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'plain notes' }, title: 'notes.txt' },
      { type: 'document', source: { type: 'url', url: 'https://example.com/paper.pdf' } },
    ]);
  });

  it('refuses what Anthropic cannot take, as the provider\'s verdict', () => {
    const audio = () => convert({ messages: [message('user', [{ part: { $case: 'audio', value: { data: Buffer.from([1]), format: 'wav' } } }])] });
    expect(audio).toThrow(ProviderError);
    expect(() => audio()).toThrow(/audio/);
    const docx = () => convert({
      messages: [message('user', [{ part: { $case: 'file', value: { filename: 'a.docx', data: Buffer.from([1]), url: '', mediaType: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document', context: '', fileId: '' } } }])],
    });
    expect(docx).toThrow(/PDF and plain text only/);
    try { docx(); } catch (error) { expect((error as ProviderError).kind).toBe('rejected'); }
  });

  it('maps tool_choice modes and parallel tool use', () => {
    const tools = [{ name: 'f', description: '', parameters: '{"type":"object"}' }];
    const messages = [message('user', 'x')];
    const choice = (toolChoice: ChatRequest['toolChoice'], parallelToolCalls?: boolean) =>
      convert({ messages, tools, toolChoice, ...(parallelToolCalls !== undefined ? { parallelToolCalls } : {}) }).body.tool_choice;
    expect(choice({ mode: 'auto', toolName: '', disableParallel: false })).toEqual({ type: 'auto' });
    expect(choice({ mode: 'required', toolName: '', disableParallel: true })).toEqual({ type: 'any', disable_parallel_tool_use: true });
    expect(choice({ mode: 'tool', toolName: 'f', disableParallel: false }, false)).toEqual({ type: 'tool', name: 'f', disable_parallel_tool_use: true });
    expect(choice({ mode: 'none', toolName: '', disableParallel: true })).toEqual({ type: 'none' });
    expect(choice(undefined, false)).toEqual({ type: 'auto', disable_parallel_tool_use: true });
    expect(choice(undefined)).toBeUndefined();
    // Without tools there is nothing to choose from.
    expect(convert({ messages, toolChoice: { mode: 'required', toolName: '', disableParallel: false } }).body.tool_choice).toBeUndefined();
  });

  it('always sends max_tokens: the request\'s, else the catalog model\'s, else the default', () => {
    const messages = [message('user', 'x')];
    expect(convert({ messages, maxOutputTokens: 300 }, { modelMaxOutputTokens: 8000 }).body.max_tokens).toBe(300);
    expect(convert({ messages }, { modelMaxOutputTokens: 8000 }).body.max_tokens).toBe(8000);
    expect(convert({ messages }).body.max_tokens).toBe(DEFAULT_MAX_TOKENS);
  });

  it('sends adaptive thinking and an output_config.effort as the client wrote them (issue 37 item 6)', () => {
    const messages = [message('user', 'Think.')];
    // Adaptive: no budget (Claude sizes it), and the thinking rules for sampling hold.
    const adaptive = convert({ messages, thinkingMode: 'adaptive', reasoningEffort: 'high', outputEffort: 'xhigh', maxOutputTokens: 8000, temperature: 0.3, topK: 5 }).body;
    expect(adaptive).toMatchObject({ max_tokens: 8000, thinking: { type: 'adaptive' }, output_config: { effort: 'xhigh' } });
    expect(adaptive).not.toHaveProperty('temperature');
    expect(adaptive).not.toHaveProperty('top_k');
    // Adaptive without an effort: thinking only.
    const bare = convert({ messages, thinkingMode: 'adaptive' }).body;
    expect(bare.thinking).toEqual({ type: 'adaptive' });
    expect(bare).not.toHaveProperty('output_config');
    // An effort alone asks for no thinking (the edge's reasoning_effort beside it is for the other kinds).
    const effortOnly = convert({ messages, outputEffort: 'low', reasoningEffort: 'low', maxOutputTokens: 10_000, temperature: 0.3 }).body;
    expect(effortOnly).toMatchObject({ output_config: { effort: 'low' }, temperature: 0.3 });
    expect(effortOnly).not.toHaveProperty('thinking');
    // A budget and an effort: both, as the client sent them.
    expect(convert({ messages, thinkingBudgetTokens: 2000, outputEffort: 'medium', reasoningEffort: 'medium', maxOutputTokens: 8000 }).body).toMatchObject({
      thinking: { type: 'enabled', budget_tokens: 2000 }, output_config: { effort: 'medium' },
    });
    // A forced tool choice wins over adaptive thinking too.
    const tools = [{ name: 'f', description: '', parameters: '{"type":"object"}' }];
    const forced = convert({ messages, thinkingMode: 'adaptive', tools, toolChoice: { mode: 'required', toolName: '', disableParallel: false } }).body;
    expect(forced).not.toHaveProperty('thinking');
  });

  it('asks for thinking by budget or effort, and leaves out what Anthropic refuses with it', () => {
    const messages = [message('user', 'Think.')];
    const budgeted = convert({ messages, thinkingBudgetTokens: 2000, maxOutputTokens: 8000, temperature: 0.3, topK: 5, topP: 0.97 }).body;
    expect(budgeted).toMatchObject({ max_tokens: 8000, thinking: { type: 'enabled', budget_tokens: 2000 }, top_p: 0.97 });
    expect(budgeted).not.toHaveProperty('temperature');
    expect(budgeted).not.toHaveProperty('top_k');
    expect(convert({ messages, thinkingBudgetTokens: 2000, maxOutputTokens: 8000, temperature: 1, topP: 0.5 }).body).toMatchObject({ temperature: 1 });
    expect(convert({ messages, thinkingBudgetTokens: 2000, maxOutputTokens: 8000, topP: 0.5 }).body).not.toHaveProperty('top_p');

    // Effort: the table, at most half of max_tokens, nothing below Anthropic's minimum.
    expect(convert({ messages, reasoningEffort: 'low', maxOutputTokens: 10_000 }).body.thinking).toEqual({ type: 'enabled', budget_tokens: THINKING_BUDGET_BY_EFFORT.low });
    expect(convert({ messages, reasoningEffort: 'high', maxOutputTokens: 10_000 }).body.thinking).toEqual({ type: 'enabled', budget_tokens: 5_000 });
    expect(convert({ messages, reasoningEffort: 'high', maxOutputTokens: 1_500 }).body).not.toHaveProperty('thinking');
    expect(convert({ messages, reasoningEffort: 'none' }).body).not.toHaveProperty('thinking');

    // A budget with no output bound anywhere: max_tokens makes room for it and an answer.
    expect(convert({ messages, thinkingBudgetTokens: 10_000 }).body).toMatchObject({ max_tokens: 10_000 + DEFAULT_MAX_TOKENS, thinking: { budget_tokens: 10_000 } });

    // A forced tool choice and thinking cannot go together: the tool choice wins.
    const forced = convert({
      messages, thinkingBudgetTokens: 2000, maxOutputTokens: 8000,
      tools: [{ name: 'f', description: '', parameters: '' }], toolChoice: { mode: 'required', toolName: '', disableParallel: false },
    }).body;
    expect(forced).not.toHaveProperty('thinking');
    expect(forced.tool_choice).toEqual({ type: 'any' });
  });

  it('goes without thinking when the open tool loop\'s assistant turn has none (it came from another provider)', () => {
    const loop = (assistantReasoning: ReasoningPart[]) => convert({
      thinkingBudgetTokens: 2000, maxOutputTokens: 8000,
      tools: [{ name: 'f', description: '', parameters: '' }],
      messages: [
        message('user', 'Go.'),
        message('assistant', [], { reasoning: assistantReasoning, toolCalls: [{ id: 'toolu_1', name: 'f', arguments: '{}' }] }),
        message('tool', 'done', { toolCallId: 'toolu_1' }),
      ],
    }).body;
    expect(loop([reasoning({ text: 'B thought', signature: 'sig-b', providerId: 'claude-b' })])).not.toHaveProperty('thinking');
    expect(loop([reasoning({ text: 'A thought', signature: 'sig-a', providerId: 'claude-a' })]).thinking).toEqual({ type: 'enabled', budget_tokens: 2000 });
  });

  it('passes sampling, stop sequences, user and extra_body; clamps temperature to Anthropic\'s range', () => {
    const { body } = convert({
      messages: [message('user', 'x')],
      temperature: 1.6, topP: 0.9, topK: 40, stop: ['END', '\n', ' '], user: 'user-42', maxOutputTokens: 64,
      extraBody: '{"service_tier":"auto","model":"not-this-one"}',
      presencePenalty: 0.5,
    }, { stream: true });
    expect(body).toEqual({
      model: 'claude-up', max_tokens: 64, messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }],
      temperature: 1, top_p: 0.9, top_k: 40, stop_sequences: ['END'], metadata: { user_id: 'user-42' }, service_tier: 'auto', stream: true,
    });
  });

  it('sends a tool call whose arguments are not a JSON object with an empty input', () => {
    const { body } = convert({
      messages: [
        message('user', 'x'),
        message('assistant', '', { toolCalls: [{ id: 't1', name: 'f', arguments: '{"cut": "off' }, { id: 't2', name: 'f', arguments: '[1,2]' }] }),
        message('tool', 'a', { toolCallId: 't1' }),
        message('tool', 'b', { toolCallId: 't2' }),
      ],
    });
    expect(body.messages[1]!.content).toEqual([
      { type: 'tool_use', id: 't1', name: 'f', input: {} },
      { type: 'tool_use', id: 't2', name: 'f', input: {} },
    ]);
  });

  it('opens with a minimal user turn when the conversation starts with the assistant (Anthropic: the first message must use the user role)', () => {
    const { body } = convert({ messages: [message('system', 'Be a pirate.'), message('assistant', 'Ahoy! How may I help?'), message('user', 'Where is the treasure?')] });
    expect(body.system).toEqual([{ type: 'text', text: 'Be a pirate.' }]);
    expect(body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: LEADING_USER_TEXT }] },
      { role: 'assistant', content: [{ type: 'text', text: 'Ahoy! How may I help?' }] },
      { role: 'user', content: [{ type: 'text', text: 'Where is the treasure?' }] },
    ]);
    // An assistant turn alone is a prefill after that user turn; an empty assistant message left out first changes nothing.
    expect(convert({ messages: [message('assistant', [], {}), message('user', 'hi')] }).body.messages).toEqual([{ role: 'user', content: [{ type: 'text', text: 'hi' }] }]);
    expect(convert({ messages: [message('assistant', 'Once upon ')] }).body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: LEADING_USER_TEXT }] },
      { role: 'assistant', content: [{ type: 'text', text: 'Once upon' }] },
    ]);
  });

  it('sends instructions alone as the user turn (Anthropic needs one)', () => {
    const { body } = convert({ messages: [message('system', 'Say hello.')] });
    expect(body).not.toHaveProperty('system');
    expect(body.messages).toEqual([{ role: 'user', content: [{ type: 'text', text: 'Say hello.' }] }]);
  });
});
