import { describe, expect, it } from 'vitest';
import type { ChatMessage, ChatRequest } from '@gateway/proto';
import { ProviderError } from '../provider-adapter.js';
import { convertToGeminiRequest, functionResponseOf, systemNote } from './convert-to-gemini-request.js';
import { placeSignature, readSignatures, SKIP_SIGNATURE_VALIDATOR } from './gemini-thought-signatures.js';

function message(role: string, text: string, extra: Partial<ChatMessage> = {}): ChatMessage {
  return { role, content: text ? [{ part: { $case: 'text', value: text } }] : [], toolCalls: [], toolCallId: '', reasoning: [], isError: false, ...extra };
}

function chat(messages: ChatMessage[], extra: Partial<ChatRequest> = {}): ChatRequest {
  return { context: { requestId: 'r', accountId: 'a', keyId: 'k' }, modelId: 'm', routingStrategy: '', endpoint: 'chat.completions', messages, tools: [], stop: [], includeUsage: false, timeoutMs: 0, ...extra };
}

const convert = (request: ChatRequest) => convertToGeminiRequest(request, { providerId: 'gem' }).body;

describe('convertToGeminiRequest', () => {
  it('leading system messages are the instruction; a later one is a note in the user turn; same-role messages merge', () => {
    const body = convert(chat([
      message('system', 'Rule one.'), message('developer', 'Rule two.'), message('user', 'Hi'), message('user', 'there'),
      message('assistant', 'Hello'), message('system', 'Now be formal.'), message('user', 'Bye'),
    ]));
    expect(body.systemInstruction).toEqual({ parts: [{ text: 'Rule one.' }, { text: 'Rule two.' }] });
    expect(body.contents).toEqual([
      { role: 'user', parts: [{ text: 'Hi' }, { text: 'there' }] },
      { role: 'model', parts: [{ text: 'Hello' }] },
      { role: 'user', parts: [{ text: systemNote('Now be formal.') }, { text: 'Bye' }] },
    ]);
  });

  it('only instructions: they become the user turn (Gemini needs contents)', () => {
    expect(convert(chat([message('system', 'Say hi.')]))).toEqual({ contents: [{ role: 'user', parts: [{ text: 'Say hi.' }] }] });
  });

  it('tool choice modes map onto functionCallingConfig; tools without parameters declare none', () => {
    const tools = [{ name: 'now', description: '', parameters: '' }];
    const modes = ['none', 'auto', 'required'].map((mode) => convert(chat([message('user', 'x')], { tools, toolChoice: { mode, toolName: '', disableParallel: false } })).toolConfig);
    expect(modes).toEqual([
      { functionCallingConfig: { mode: 'NONE' } }, { functionCallingConfig: { mode: 'AUTO' } }, { functionCallingConfig: { mode: 'ANY' } },
    ]);
    expect(convert(chat([message('user', 'x')], { tools })).tools).toEqual([{ functionDeclarations: [{ name: 'now' }] }]);
    expect(() => convert(chat([message('user', 'x')], { tools: [{ name: 'a', description: '', parameters: '[1]' }] }))).toThrow(ProviderError);
  });

  it('puts each signature of this provider back on its part: thought, text and the k-th call', () => {
    const assistant = message('assistant', 'Checking.', {
      toolCalls: [{ id: 'a', name: 'f', arguments: '{"x":1}' }, { id: 'b', name: 'g', arguments: 'not json' }],
      reasoning: [
        { text: 'I think.', signature: placeSignature({ kind: 'thought' }, 'T1'), encryptedData: '', providerId: 'gem' },
        { text: '', signature: placeSignature({ kind: 'text' }, 'X1') + placeSignature({ kind: 'call', index: 1 }, 'C2'), encryptedData: '', providerId: 'gem' },
        { text: 'theirs', signature: 'Z', encryptedData: '', providerId: 'other' },
      ],
    });
    const body = convert(chat([message('user', 'q'), assistant, message('tool', '1', { toolCallId: 'a' }), message('tool', '2', { toolCallId: 'b' })]));
    expect(body.contents[1]).toEqual({
      role: 'model',
      parts: [
        { text: 'I think.', thought: true, thoughtSignature: 'T1' },
        { text: 'Checking.', thoughtSignature: 'X1' },
        { functionCall: { name: 'f', args: { x: 1 } } },
        { functionCall: { name: 'g', args: {} }, thoughtSignature: 'C2' },
      ],
    });
    expect(body.contents[2]!.parts.map((part) => part.functionResponse?.name)).toEqual(['f', 'g']);
  });

  it('a call turn without any signature of this provider gets the documented skip signature on its first call', () => {
    const assistant = message('assistant', '', { toolCalls: [{ id: 'a', name: 'f', arguments: '{}' }, { id: 'b', name: 'f', arguments: '{}' }] });
    const body = convert(chat([message('user', 'q'), assistant, message('tool', '1', { toolCallId: 'a' }), message('tool', '2', { toolCallId: 'b' })]));
    expect(body.contents[1]!.parts.map((part) => part.thoughtSignature)).toEqual([SKIP_SIGNATURE_VALIDATOR, undefined]);
  });

  it("a call's own signature of this provider wins over the reasoning record; one of another provider is never sent", () => {
    const calls = [
      { id: 'a', name: 'f', arguments: '{}', signature: 'OWN1', signatureProviderId: 'gem' },
      { id: 'b', name: 'f', arguments: '{}', signature: 'THEIRS', signatureProviderId: 'other' },
    ];
    const record = { text: '', signature: placeSignature({ kind: 'call', index: 0 }, 'REC1'), encryptedData: '', providerId: 'gem' };
    const turn = (extra: Partial<ChatMessage>) => convert(chat([message('user', 'q'), message('assistant', '', extra), message('tool', '1', { toolCallId: 'a' }), message('tool', '2', { toolCallId: 'b' })])).contents[1]!.parts.map((part) => part.thoughtSignature);
    expect(turn({ toolCalls: calls, reasoning: [record] })).toEqual(['OWN1', undefined]);
    expect(turn({ toolCalls: calls })).toEqual(['OWN1', undefined]);
    // Only a foreign signature on the calls: as if the turn had none, the skip value on the first call.
    expect(turn({ toolCalls: [calls[1]!, { ...calls[0]!, signature: undefined, signatureProviderId: undefined }] })).toEqual([SKIP_SIGNATURE_VALIDATOR, undefined]);
  });

  it('refuses a tool result for a call no assistant message made', () => {
    expect(() => convert(chat([message('user', 'q'), message('tool', '1', { toolCallId: 'nope' })]))).toThrow(/no assistant message made/);
  });

  it('thinking: budget tokens win over effort; effort none turns thinking off', () => {
    expect(convert(chat([message('user', 'q')], { thinkingBudgetTokens: 2000, reasoningEffort: 'high' })).generationConfig).toEqual({ thinkingConfig: { includeThoughts: true, thinkingBudget: 2000 } });
    expect(convert(chat([message('user', 'q')], { reasoningEffort: 'none' })).generationConfig).toEqual({ thinkingConfig: { thinkingBudget: 0 } });
    const pro = convertToGeminiRequest(chat([message('user', 'q')], { reasoningEffort: 'none' }), { providerId: 'gem', upstreamModel: 'gemini-2.5-pro' }).body;
    expect(pro.generationConfig).toEqual({ thinkingConfig: { thinkingBudget: 128 } });
    const budgets = ['gemini-2.5-flash', 'gemini-2.5-pro'].map((upstreamModel) =>
      convertToGeminiRequest(chat([message('user', 'q')], { thinkingBudgetTokens: 60_000 }), { providerId: 'gem', upstreamModel }).body.generationConfig?.thinkingConfig?.thinkingBudget);
    expect(budgets).toEqual([24_576, 32_768]);
    expect(convert(chat([message('user', 'q')], { responseFormat: { type: 'json_object', schemaName: '', schema: '' } })).generationConfig).toEqual({ responseMimeType: 'application/json' });
    // The seed is generationConfig.seed (issue 37 item 6).
    expect(convert(chat([message('user', 'q')], { seed: 42n })).generationConfig).toMatchObject({ seed: 42 });
  });

  it('audio goes inline; more than five stop sequences are cut to five; extra_body adds fields it does not overwrite', () => {
    const user: ChatMessage = { ...message('user', ''), content: [{ part: { $case: 'audio', value: { data: Buffer.from('RIFF'), format: 'wav' } } }] };
    const body = convert(chat([user], { stop: ['1', '2', '3', '4', '5', '6'], extraBody: '{"safetySettings":[],"contents":"ignored"}' }));
    expect(body.contents[0]!.parts).toEqual([{ inlineData: { mimeType: 'audio/wav', data: Buffer.from('RIFF').toString('base64') } }]);
    expect(body.generationConfig!.stopSequences).toHaveLength(5);
    expect(body.safetySettings).toEqual([]);
    expect(Array.isArray(body.contents)).toBe(true);
  });
});

describe('tool names Gemini refuses', () => {
  it('are rewritten the same way in definitions, history and tool choice, and mapped back', () => {
    const name = '2fa/lookup user';
    const { body, names } = convertToGeminiRequest(chat(
      [message('user', 'q'), message('assistant', '', { toolCalls: [{ id: 'a', name, arguments: '{}' }] }), message('tool', '1', { toolCallId: 'a' })],
      { tools: [{ name, description: '', parameters: '' }, { name: 'server.tool:v1', description: '', parameters: '' }], toolChoice: { mode: 'tool', toolName: name, disableParallel: false } },
    ), { providerId: 'gem' });
    const upstream = body.tools![0]!.functionDeclarations[0]!.name;
    expect(upstream).toMatch(/^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$/);
    expect(body.tools![0]!.functionDeclarations[1]!.name).toBe('server.tool:v1');
    expect(body.contents[1]!.parts[0]!.functionCall!.name).toBe(upstream);
    expect(body.contents[2]!.parts[0]!.functionResponse!.name).toBe(upstream);
    expect(body.toolConfig!.functionCallingConfig.allowedFunctionNames).toEqual([upstream]);
    expect(names.caller(upstream)).toBe(name);
    expect(names.caller('other')).toBe('other');
  });
});

describe('functionResponseOf', () => {
  it('keeps objects, wraps anything else under output, failures under error', () => {
    expect(functionResponseOf('{"a":1}', false)).toEqual({ a: 1 });
    expect(functionResponseOf('[1,2]', false)).toEqual({ output: [1, 2] });
    expect(functionResponseOf('42', false)).toEqual({ output: 42 });
    expect(functionResponseOf('plain words', false)).toEqual({ output: 'plain words' });
    expect(functionResponseOf('', false)).toEqual({ output: '' });
    expect(functionResponseOf('{"code":7}', true)).toEqual({ error: { code: 7 } });
  });
});

describe('thought signature places', () => {
  it('reads back joined records (messages-dialect thinking blocks join their signatures) and bare signatures', () => {
    const joined = placeSignature({ kind: 'thought' }, 'A+/=') + placeSignature({ kind: 'call', index: 12 }, 'B');
    expect(readSignatures(joined)).toEqual([
      { place: { kind: 'thought' }, signature: 'A+/=' },
      { place: { kind: 'call', index: 12 }, signature: 'B' },
    ]);
    expect(readSignatures('bare')).toEqual([{ place: { kind: 'thought' }, signature: 'bare' }]);
    expect(readSignatures('')).toEqual([]);
  });
});
