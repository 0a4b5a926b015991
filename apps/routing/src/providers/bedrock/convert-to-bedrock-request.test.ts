import { describe, expect, it } from 'vitest';
import type { ChatMessage, ChatRequest } from '@gateway/proto';
import { ProviderError } from '../provider-adapter.js';
import {
  cachePoint,
  convertToBedrockRequest,
  documentName,
  EMPTY_TOOL_RESULT_TEXT,
  HISTORY_TOOL_DESCRIPTION,
  LEADING_USER_TEXT,
} from './convert-to-bedrock-request.js';

const CLAUDE = 'us.anthropic.claude-sonnet-4-20250514-v1:0';
const NOVA = 'amazon.nova-pro-v1:0';

function message(role: string, text: string, extra: Partial<ChatMessage> = {}): ChatMessage {
  return { role, content: text ? [{ part: { $case: 'text', value: text } }] : [], toolCalls: [], toolCallId: '', reasoning: [], isError: false, ...extra };
}

function chat(messages: ChatMessage[], extra: Partial<ChatRequest> = {}): ChatRequest {
  return {
    context: { requestId: 'r', accountId: 'a', keyId: 'k' }, modelId: 'm', routingStrategy: '', endpoint: 'chat.completions',
    messages, tools: [], stop: [], includeUsage: false, timeoutMs: 0, ...extra,
  };
}

const convert = (request: ChatRequest, upstreamModel = CLAUDE) => convertToBedrockRequest(request, { upstreamModel, providerId: 'bdr', modelMaxOutputTokens: undefined });

function rejection(run: () => unknown): ProviderError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ProviderError);
    return error as ProviderError;
  }
  throw new Error('expected a rejection');
}

describe('convertToBedrockRequest', () => {
  it('merges consecutive roles, puts a user turn first, keeps a later system message at its place and trims a prefill', () => {
    const { body } = convert(chat([
      message('system', 'Rules.'),
      message('assistant', 'Hi!'),
      message('user', 'One'),
      message('user', 'Two'),
      message('developer', 'Be terse now.'),
      message('assistant', 'Sure:  '),
    ]));
    expect(body.system).toEqual([{ text: 'Rules.' }]);
    expect(body.messages).toEqual([
      { role: 'user', content: [{ text: LEADING_USER_TEXT }] },
      { role: 'assistant', content: [{ text: 'Hi!' }] },
      { role: 'user', content: [{ text: 'One' }, { text: 'Two' }, { text: '<system>\nBe terse now.\n</system>' }] },
      { role: 'assistant', content: [{ text: 'Sure:' }] },
    ]);
  });

  it('sends tool results first in one user turn, error status kept, an empty result given text', () => {
    const { body } = convert(chat([
      message('user', 'Go'),
      message('assistant', 'Calling.', { toolCalls: [{ id: 'a', name: 'f', arguments: '{"x":1}' }, { id: 'b', name: 'g', arguments: 'not json' }] }),
      message('tool', 'done', { toolCallId: 'a' }),
      message('tool', '', { toolCallId: 'b', isError: true }),
    ], { tools: [{ name: 'f', description: '', parameters: '' }, { name: 'g', description: 'G', parameters: '{"properties":{}}' }] }));
    expect(body.messages[1]!.content).toEqual([{ text: 'Calling.' }, { toolUse: { toolUseId: 'a', name: 'f', input: { x: 1 } } }, { toolUse: { toolUseId: 'b', name: 'g', input: {} } }]);
    expect(body.messages[2]!.content).toEqual([
      { toolResult: { toolUseId: 'a', content: [{ text: 'done' }] } },
      { toolResult: { toolUseId: 'b', content: [{ text: EMPTY_TOOL_RESULT_TEXT }], status: 'error' } },
    ]);
    expect(body.toolConfig).toEqual({
      tools: [
        { toolSpec: { name: 'f', inputSchema: { json: { type: 'object', properties: {} } } } },
        { toolSpec: { name: 'g', description: 'G', inputSchema: { json: { type: 'object', properties: {} } } } },
      ],
    });
  });

  it('maps tool choice: auto, required as any, a named tool; none leaves the tools out unless the history needs them', () => {
    const tools = [{ name: 'f', description: 'F', parameters: '{"type":"object"}' }];
    const choice = (mode: string) => convert(chat([message('user', 'x')], { tools, toolChoice: { mode, toolName: 'f', disableParallel: false } })).body.toolConfig;
    expect(choice('auto')?.toolChoice).toEqual({ auto: {} });
    expect(choice('required')?.toolChoice).toEqual({ any: {} });
    expect(choice('tool')?.toolChoice).toEqual({ tool: { name: 'f' } });
    expect(choice('none')).toBeUndefined();
    const history = [message('user', 'x'), message('assistant', '', { toolCalls: [{ id: 'c1', name: 'lookup', arguments: '{}' }] }), message('tool', 'r', { toolCallId: 'c1' })];
    const withHistory = convert(chat(history, { tools, toolChoice: { mode: 'none', toolName: '', disableParallel: false } })).body.toolConfig;
    expect(withHistory).toEqual({ tools: [{ toolSpec: { name: 'lookup', description: HISTORY_TOOL_DESCRIPTION, inputSchema: { json: { type: 'object', properties: {} } } } }] });
    // Offered tools plus one only the history used: both declared.
    const mixed = convert(chat(history, { tools })).body.toolConfig;
    expect(mixed?.tools.map((tool) => ('toolSpec' in tool ? tool.toolSpec.name : 'cachePoint'))).toEqual(['f', 'lookup']);
  });

  it('places cache points after the marked block, ttl only 5m or 1h', () => {
    expect(cachePoint({ type: 'ephemeral', ttl: '5m' })).toEqual({ cachePoint: { type: 'default', ttl: '5m' } });
    expect(cachePoint({ type: 'ephemeral', ttl: '1h' })).toEqual({ cachePoint: { type: 'default', ttl: '1h' } });
    expect(cachePoint({ type: 'ephemeral', ttl: '24h' })).toEqual({ cachePoint: { type: 'default' } });
    const { body } = convert(chat([
      message('user', 'Go'),
      message('assistant', '', { content: [{ part: { $case: 'text', value: 'Long answer' }, cacheControl: { type: 'ephemeral', ttl: '5m' } }] }),
      message('user', 'More'),
    ]));
    expect(body.messages[1]!.content).toEqual([{ text: 'Long answer' }, { cachePoint: { type: 'default', ttl: '5m' } }]);
  });

  it('keeps only reasoning this provider signed: signed text and redacted bytes; foreign and unsigned reasoning are dropped', () => {
    const { body } = convert(chat([
      message('user', 'Q'),
      message('assistant', 'A', {
        reasoning: [
          { text: 'mine', signature: 'sig', encryptedData: '', providerId: 'bdr' },
          { text: '', signature: '', encryptedData: 'cmVkYWN0ZWQ=', providerId: 'bdr' },
          { text: 'theirs', signature: 'other-sig', encryptedData: '', providerId: 'anthropic-direct' },
          { text: 'plain', signature: '', encryptedData: '', providerId: 'bdr' },
        ],
      }),
      message('user', 'Q2'),
    ]));
    expect(body.messages[1]!.content).toEqual([
      { reasoningContent: { reasoningText: { text: 'mine', signature: 'sig' } } },
      { reasoningContent: { redactedContent: 'cmVkYWN0ZWQ=' } },
      { text: 'A' },
    ]);
  });

  it('asks Claude for thinking and top_k in additionalModelRequestFields, other models get neither', () => {
    const request = chat([message('user', 'Q')], { reasoningEffort: 'medium', topK: 40, temperature: 0.5, topP: 0.9, maxOutputTokens: 32_000 });
    const claude = convert(request).body;
    expect(claude.additionalModelRequestFields).toEqual({ thinking: { type: 'enabled', budget_tokens: 8_192 } });
    // With thinking Claude takes no temperature other than 1, top_p only from 0.95.
    expect(claude.inferenceConfig).toEqual({ maxTokens: 32_000 });
    const nova = convert(request, NOVA).body;
    expect(nova.additionalModelRequestFields).toBeUndefined();
    expect(nova.inferenceConfig).toEqual({ maxTokens: 32_000, temperature: 0.5, topP: 0.9 });
    expect(convert(chat([message('user', 'Q')], { topK: 5, temperature: 1.7 })).body).toMatchObject({ additionalModelRequestFields: { top_k: 5 }, inferenceConfig: { temperature: 1 } });
    // No output bound anywhere: room for the budget and an answer.
    expect(convert(chat([message('user', 'Q')], { thinkingBudgetTokens: 2_048 })).body.inferenceConfig).toEqual({ maxTokens: 2_048 + 4_096 });
    // A forced tool choice: no thinking (Claude refuses the two together).
    const forced = convert(chat([message('user', 'Q')], { thinkingBudgetTokens: 2_048, tools: [{ name: 'f', description: '', parameters: '' }], toolChoice: { mode: 'required', toolName: '', disableParallel: false } }));
    expect(forced.body.additionalModelRequestFields).toBeUndefined();
  });

  it('routes extra_body: Converse fields top-level, everything else to the model', () => {
    const { body } = convert(chat([message('user', 'Q')], {
      extraBody: JSON.stringify({ guardrailConfig: { guardrailIdentifier: 'g1', guardrailVersion: '1' }, anthropic_beta: ['x'], additionalModelRequestFields: { top_k: 3 } }),
    }));
    expect(body.guardrailConfig).toEqual({ guardrailIdentifier: 'g1', guardrailVersion: '1' });
    expect(body.additionalModelRequestFields).toEqual({ anthropic_beta: ['x'], top_k: 3 });
  });

  it('takes images as data: URLs only and documents as bytes with names Bedrock accepts', () => {
    const gif = convert(chat([message('user', '', { content: [{ part: { $case: 'image', value: { url: 'data:image/gif;base64,R0lG', detail: '' } } }] })])).body;
    expect(gif.messages[0]!.content).toEqual([{ image: { format: 'gif', source: { bytes: 'R0lG' } } }]);
    const link = rejection(() => convert(chat([message('user', '', { content: [{ part: { $case: 'image', value: { url: 'http://x/y.png', detail: '' } } }] })])));
    expect([link.kind, link.httpStatus]).toEqual(['rejected', 400]);
    expect(link.providerMessage).toContain('messages[0].content[0]');
    const tiff = rejection(() => convert(chat([message('user', '', { content: [{ part: { $case: 'image', value: { url: 'data:image/tiff;base64,AA==', detail: '' } } }] })])));
    expect(tiff.providerMessage).toMatch(/image\/tiff/);
    const fileLink = rejection(() => convert(chat([message('user', '', { content: [{ part: { $case: 'file', value: { filename: 'a.pdf', data: Buffer.alloc(0), url: 'https://x/a.pdf', mediaType: 'application/pdf', context: '', fileId: '' } } }] })])));
    expect(fileLink.kind).toBe('rejected');
    const used = new Map<string, number>();
    expect(documentName('Q3 report.v2.pdf', used)).toBe('Q3 report-v2-pdf');
    expect(documentName('Q3 report.v2.pdf', used)).toBe('Q3 report-v2-pdf (2)');
    expect(documentName('   ', used)).toBe('document');
    expect(documentName('a\t\tb_c', used)).toBe('a b-c');
    const audio = rejection(() => convert(chat([message('user', '', { content: [{ part: { $case: 'audio', value: { data: Buffer.from([1]), format: 'wav' } } }] })])));
    expect(audio.providerMessage).toMatch(/audio/);
  });

  it('rewrites tool ids and names Bedrock refuses, the same way in toolUse and toolResult, and maps them back', () => {
    const { body, tools } = convert(chat([
      message('user', 'x'),
      message('assistant', '', { toolCalls: [{ id: 'call:1/a', name: 'srv.tool', arguments: '{}' }] }),
      message('tool', 'ok', { toolCallId: 'call:1/a' }),
    ], { tools: [{ name: 'srv.tool', description: '', parameters: '' }] }));
    const use = (body.messages[1]!.content[0] as { toolUse: { toolUseId: string; name: string } }).toolUse;
    const result = (body.messages[2]!.content[0] as { toolResult: { toolUseId: string } }).toolResult;
    expect(use.toolUseId).toMatch(/^[a-zA-Z0-9_-]+$/);
    expect(result.toolUseId).toBe(use.toolUseId);
    expect(tools.callerId(use.toolUseId)).toBe('call:1/a');
    expect(tools.callerName(use.name)).toBe('srv.tool');
  });
});
