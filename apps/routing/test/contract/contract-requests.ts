import { expect } from 'vitest';
import type { ChatMessage, ChatRequest, ContentPart, ReasoningPart, ToolCall, Usage } from '@gateway/proto';
import { ProviderError, type AdapterChatRequest, type AdapterStreamPart, type AttemptSignal } from '../../src/providers/provider-adapter.js';
import type { ContractRig } from './contract-types.js';

/* Canonical requests the scenarios send, and the stream folded into the shape `chat` returns. */

export const text = (value: string): ContentPart => ({ part: { $case: 'text', value } });

export function message(role: string, content: ContentPart[] | string, extra: Partial<ChatMessage> = {}): ChatMessage {
  return {
    role,
    content: typeof content === 'string' ? (content ? [text(content)] : []) : content,
    toolCalls: [], toolCallId: '', reasoning: [], isError: false, ...extra,
  };
}

export function chatRequest(messages: ChatMessage[], extra: Partial<ChatRequest> = {}): ChatRequest {
  return {
    context: { requestId: 'req_contract', accountId: 'acc_contract', keyId: 'key_contract' },
    modelId: 'contract/model', routingStrategy: '', endpoint: 'chat.completions',
    messages, tools: [], stop: [], includeUsage: true, timeoutMs: 0, ...extra,
  };
}

export function adapterRequest(rig: ContractRig, chat: ChatRequest): AdapterChatRequest {
  return { upstreamModel: rig.upstreamModel, chat, modelMaxOutputTokens: rig.modelMaxOutputTokens };
}

export const live = (): AttemptSignal => new AbortController().signal;

export const weatherParameters = {
  type: 'object',
  properties: { city: { type: 'string', description: 'City name' } },
  required: ['city'],
};
export const timeParameters = {
  type: 'object',
  properties: { zone: { type: 'string', description: 'IANA time zone' } },
  required: ['zone'],
};
export const weatherTool = { name: 'get_weather', description: 'Current weather for a city', parameters: JSON.stringify(weatherParameters) };
export const timeTool = { name: 'get_time', description: 'Current time in a time zone', parameters: JSON.stringify(timeParameters) };

/** A 1x1 PNG (one opaque red pixel). */
export const ONE_PIXEL_PNG_BASE64 =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';

/** What a whole answer or a folded stream says, in one shape. */
export interface Outcome {
  content: string;
  toolCalls: ToolCall[];
  reasoning: ReasoningPart[];
  finishReason: string;
  /** The stop sequence the provider says ended the answer ('' when none). */
  stopSequence: string;
  usage: Usage | undefined;
  /** How many deltas a stream delivered (0 for `chat`). */
  deltas: number;
  /** The logprobs the answer carried (chat completions' `choices[].logprobs` JSON, per answer or per delta). */
  logprobs: string[];
}

export async function viaChat(rig: ContractRig, chat: ChatRequest, signal: AttemptSignal = live()): Promise<Outcome> {
  const result = await rig.adapter.chat(adapterRequest(rig, chat), signal);
  expect(result.choices).toHaveLength(1);
  const choice = result.choices[0]!;
  return {
    content: choice.message?.content ?? '',
    toolCalls: choice.message?.toolCalls ?? [],
    reasoning: choice.message?.reasoning ?? [],
    finishReason: choice.finishReason,
    stopSequence: choice.stopSequence,
    usage: result.usage,
    deltas: 0,
    logprobs: choice.logprobs !== undefined ? [choice.logprobs] : [],
  };
}

/** Folds a stream: text and reasoning concatenated, tool calls assembled by index, the one usage part. */
export function foldStream(parts: AdapterStreamPart[], providerId: string): Outcome {
  let content = '';
  let reasoningText = '';
  let signature = '';
  const encrypted: string[] = [];
  const calls = new Map<number, ToolCall>();
  let finishReason = '';
  let stopSequence = '';
  let usage: Usage | undefined;
  let deltas = 0;
  const logprobs: string[] = [];
  for (const part of parts) {
    if (part.type === 'usage') {
      expect(usage, 'a stream carries at most one usage part').toBeUndefined();
      usage = part.usage;
      continue;
    }
    deltas++;
    const delta = part.delta;
    expect(delta.choiceIndex).toBe(0);
    content += delta.content;
    reasoningText += delta.reasoning;
    signature += delta.reasoningSignature;
    if (delta.reasoningEncrypted) encrypted.push(delta.reasoningEncrypted);
    for (const call of delta.toolCalls) {
      const known = calls.get(call.index);
      if (known) {
        known.arguments += call.arguments;
        if (call.id) known.id = call.id;
        if (call.name) known.name = call.name;
        if (call.signature) Object.assign(known, { signature: call.signature, signatureProviderId: providerId });
      } else {
        // A call's own signature (Gemini) is issued by the stream's provider, as the router tags it.
        const signed = call.signature ? { signature: call.signature, signatureProviderId: providerId } : {};
        calls.set(call.index, { id: call.id, name: call.name, arguments: call.arguments, ...signed });
      }
    }
    if (delta.finishReason) finishReason = delta.finishReason;
    if (delta.stopSequence) stopSequence = delta.stopSequence;
    if (delta.logprobs !== undefined) logprobs.push(delta.logprobs);
  }
  const reasoning: ReasoningPart[] = [];
  if (reasoningText || signature) reasoning.push({ text: reasoningText, signature, encryptedData: '', providerId });
  for (const data of encrypted) reasoning.push({ text: '', signature: '', encryptedData: data, providerId });
  return {
    content,
    toolCalls: [...calls.entries()].sort(([a], [b]) => a - b).map(([, call]) => call),
    reasoning,
    finishReason,
    stopSequence,
    usage,
    deltas,
    logprobs,
  };
}

export async function viaStream(rig: ContractRig, chat: ChatRequest, signal: AttemptSignal = live()): Promise<Outcome> {
  const parts: AdapterStreamPart[] = [];
  for await (const part of rig.adapter.chatStream(adapterRequest(rig, chat), signal)) parts.push(part);
  return foldStream(parts, rig.providerId);
}

export type Mode = 'chat' | 'stream';
export const MODES: readonly Mode[] = ['chat', 'stream'];

export function run(mode: Mode, rig: ContractRig, chat: ChatRequest, signal?: AttemptSignal): Promise<Outcome> {
  return mode === 'chat' ? viaChat(rig, chat, signal) : viaStream(rig, chat, signal);
}

/** The ProviderError a call fails with (the test fails when it succeeds or fails otherwise). */
export async function failureOf(promise: Promise<unknown>): Promise<ProviderError> {
  const error = await promise.then(
    () => undefined,
    (rejection: unknown) => rejection,
  );
  expect(error, 'the call must fail with a ProviderError').toBeInstanceOf(ProviderError);
  return error as ProviderError;
}

/** The only request the fake received since the rig was reset. */
export function onlyRequest(rig: ContractRig) {
  const received = rig.received();
  expect(received, 'the fake received exactly one request').toHaveLength(1);
  return received[0]!;
}
