import { expect } from 'vitest';
import type { ChatMessage, ChatRequest, ChatStreamDelta, Tool } from '@gateway/proto';
import { ProviderError, type AdapterChatRequest, type AdapterStreamPart } from '../src/providers/provider-adapter.js';

// What every provider adapter test starts with: canonical requests, reading a stream, expecting a failure.

/** A message with one text part (none when `text` is empty). */
export function message(role: string, text: string, extra: Partial<ChatMessage> = {}): ChatMessage {
  return { role, content: text ? [{ part: { $case: 'text', value: text } }] : [], toolCalls: [], toolCallId: '', reasoning: [], isError: false, ...extra };
}

export const userText = (text: string): ChatMessage => message('user', text);

/** A canonical chat request of these messages (a string: one user message). Adapters read neither its context nor its model id. */
export function chatRequest(messages: ChatMessage[] | string, extra: Partial<ChatRequest> = {}): ChatRequest {
  return {
    context: { requestId: 'req_adapter_test', accountId: 'acc_1', keyId: 'key_1' },
    modelId: 'acme/chat', routingStrategy: '', endpoint: 'chat.completions',
    messages: typeof messages === 'string' ? [message('user', messages)] : messages,
    tools: [], stop: [], includeUsage: false, timeoutMs: 0, ...extra,
  };
}

/** What an adapter is handed: `chat` for `upstreamModel`, without the model's output bound. */
export const adapterRequest = (upstreamModel: string, chat: ChatRequest): AdapterChatRequest => ({ upstreamModel, chat, modelMaxOutputTokens: undefined });

/** A client tool: get_weather(city). */
export const weatherTool: Tool = {
  name: 'get_weather', description: 'Weather for a city',
  parameters: '{"type":"object","properties":{"city":{"type":"string"}}}',
};

/** A signal that never aborts. */
export const signal = (): AbortSignal => new AbortController().signal;

export async function collect(stream: AsyncIterable<AdapterStreamPart>): Promise<AdapterStreamPart[]> {
  const parts: AdapterStreamPart[] = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

export const deltasOf = (parts: AdapterStreamPart[]): ChatStreamDelta[] => parts.flatMap((part) => (part.type === 'delta' ? [part.delta] : []));

/** The ProviderError `promise` rejects with (the test fails when it resolves or rejects with anything else). */
export async function failureOf(promise: Promise<unknown>): Promise<ProviderError> {
  const error = await promise.then(() => undefined, (rejection: unknown) => rejection);
  expect(error).toBeInstanceOf(ProviderError);
  return error as ProviderError;
}
