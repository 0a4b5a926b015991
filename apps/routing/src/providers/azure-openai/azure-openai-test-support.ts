import { expect } from 'vitest';
import { ChatMessage, ChatRequest } from '@gateway/proto';
import { ProviderError, type AdapterStreamPart } from '../provider-adapter.js';

// Shared by the Azure OpenAI adapter tests (not production code).

export const API_VERSION = '2025-04-01-preview';

/** The two URL styles an azure-openai provider can use, and the path each sends a route to. */
export const URL_STYLES = [
  { style: 'deployment URLs (api_version set)', apiVersion: API_VERSION as string | undefined, pathOf: (route: string, deployment: string) => `/openai/deployments/${deployment}/${route}?api-version=${API_VERSION}` },
  { style: 'v1 API (no api_version)', apiVersion: undefined as string | undefined, pathOf: (route: string, _deployment: string) => `/openai/v1/${route}` },
];

export function userText(text: string): ChatMessage {
  return ChatMessage.fromPartial({ role: 'user', content: [{ part: { $case: 'text', value: text } }] });
}

export function chatRequest(messages: ChatMessage[], extra: Partial<ChatRequest> = {}): ChatRequest {
  return ChatRequest.fromPartial({ context: { requestId: 'req_azure', accountId: 'acc_1', keyId: 'key_1' }, modelId: 'acme/chat', endpoint: 'chat.completions', messages, ...extra });
}

export async function collect(stream: AsyncIterable<AdapterStreamPart>): Promise<AdapterStreamPart[]> {
  const parts: AdapterStreamPart[] = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

export function deltasOf(parts: AdapterStreamPart[]) {
  return parts.flatMap((part) => (part.type === 'delta' ? [part.delta] : []));
}

export async function failureOf(promise: Promise<unknown>): Promise<ProviderError> {
  const error = await promise.then(() => undefined, (rejection: unknown) => rejection);
  expect(error).toBeInstanceOf(ProviderError);
  return error as ProviderError;
}

export const live = (): AbortSignal => new AbortController().signal;
