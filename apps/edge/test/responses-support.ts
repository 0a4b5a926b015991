import type { ChatStreamDelta, Model, ToolCallDelta, Usage } from '@gateway/proto';
import type OpenAI from 'openai';
import { Stream } from 'openai/core/streaming';
import { testLogger } from '@gateway/testing';
import { ResponseStream } from 'openai/lib/responses/ResponseStream';
import type { CatalogModel } from '../src/catalog-cache.js';
import { ReasoningTags } from '../src/canonical/reasoning-tags.js';
import type { AnswerContext } from '../src/inference/dialect.js';

// Shared by the responses dialect's unit tests: an answer context, canonical deltas, and the real
// `openai` SDK's own SSE parser and stream accumulator applied to what the writer produced.

export const testTags = new ReasoningTags('responses-render-test-key');

export function answerContext(overrides: Partial<AnswerContext> = {}): AnswerContext {
  const model: CatalogModel = {
    model: { id: 'acme/chat', reasoningEfforts: [] } as unknown as Model,
    id: 'acme/chat',
    paid: true,
    endpoints: new Set(['responses']),
    supportedParameters: new Set(),
    inputModalities: new Set(['text']),
    extraParameters: new Set(),
    allowedTiers: null,
    availableTiers: [],
  };
  return { requestId: 'req_0123456789abcdef0123456789abcdef', model, tags: testTags, created: 1_767_225_600, logger: testLogger('responses-render'), ...overrides };
}

export function canonicalDelta(fields: Partial<ChatStreamDelta>): ChatStreamDelta {
  return { choiceIndex: 0, content: '', toolCalls: [], reasoning: '', reasoningSignature: '', finishReason: '', images: [], reasoningEncrypted: '', stopSequence: '', ...fields };
}

export function toolCallDelta(index: number, fields: Partial<ToolCallDelta>): ToolCallDelta {
  return { index, id: '', name: '', arguments: '', ...fields };
}

export function testUsage(inputTokens: number, outputTokens: number, extra: Partial<Usage> = {}): Usage {
  return {
    inputTokens, cachedInputTokens: 0, outputTokens, reasoningTokens: 0, inputAudioTokens: 0, outputAudioTokens: 0, inputAudioMs: 0,
    outputAudioMs: 0, outputTextTokens: 0, inputTextCharacters: 0, outputTextCharacters: 0, outputImageTokens: 0, inputImageTokens: 0,
    inputTextTokens: 0, estimated: false, cacheWriteTokens: 0, ...extra,
  };
}

function sseResponse(sse: string): Response {
  return new Response(sse, { headers: { 'content-type': 'text/event-stream' } });
}

/** The events as the SDK's SSE parser yields them (it throws where it would throw for a client). */
export async function sdkEvents(sse: string): Promise<OpenAI.Responses.ResponseStreamEvent[]> {
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  for await (const event of Stream.fromSSEResponse<OpenAI.Responses.ResponseStreamEvent>(sseResponse(sse), new AbortController())) events.push(event);
  return events;
}

/** The final response as the SDK's stream helper (`client.responses.stream`) assembles it from the events. */
export async function sdkFinalResponse(sse: string): Promise<OpenAI.Responses.Response> {
  const stream = Stream.fromSSEResponse<OpenAI.Responses.ResponseStreamEvent>(sseResponse(sse), new AbortController());
  return ResponseStream.fromReadableStream(stream.toReadableStream()).finalResponse();
}

/** `event:` names and data payloads of SSE text, read without the SDK. */
export function rawEvents(sse: string): { event: string; data: Record<string, unknown> }[] {
  return sse
    .split('\n\n')
    .filter((frame) => frame.trim() !== '')
    .map((frame) => {
      const lines = frame.split('\n');
      const event = lines.find((line) => line.startsWith('event: '))?.slice('event: '.length) ?? '';
      const data = lines.find((line) => line.startsWith('data: '))?.slice('data: '.length) ?? '{}';
      return { event, data: JSON.parse(data) as Record<string, unknown> };
    });
}
