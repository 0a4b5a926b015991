import type { ChatResponse } from '@gateway/proto';
import type { CatalogModel } from '../../catalog-cache.js';
import { modelSupports } from '../../canonical/parameters.js';
import type { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { edgeErrors } from '../../errors.js';
import { BODY_MODEL_AND_ROUTING, type AnswerContext, type ConvertedRequest, type InferenceDialect } from '../../inference/dialect.js';
import { chatResponseCost } from '../../inference/answer-cost.js';
import { sealCompaction, SUMMARY_PROMPT } from './compaction-item.js';
import { convertResponsesRequest, RESPONSES_ENDPOINT } from './convert-responses-request.js';
import { idBase, itemId, renderResponse, renderUsage, responseId } from './render-responses.js';
import { parseCompactionRequest, parseResponsesRequest, RESPONSES_FREE_FORM_FIELDS, type ResponsesContentPart, type ResponsesInputItem, type ResponsesRequest } from './responses-schema.js';

/*
 * POST /v1/responses/compact (Codex's remote compaction; the `openai` SDK's `responses.compact`): the
 * conversation in `input` is summarised by the model asked for, through the one pipeline (admitted,
 * routed and failed over, billed once, like any responses request: DESIGN §6). The answer is OpenAI's
 * `response.compaction` object: the conversation's user messages, then one `compaction` item whose
 * `encrypted_content` holds the summary, sealed (compaction-item.ts).
 */

const NO_STREAM = () => {
  throw new Error('a compaction is never streamed');
};

/**
 * The summary request: the client's conversation (instructions, tools and reasoning settings included,
 * so a history of tool calls stays valid for every provider) followed by the gateway's summary prompt.
 * `text` is not forwarded (a format would shape the summary), nor a tool choice: when tools are
 * offered the model is told to use none. Streamed from the provider only for a streamed in-band
 * compaction (the summary is still sealed whole, at the end).
 */
function summaryRequest(body: ResponsesRequest, conversation: ResponsesInputItem[], model: CatalogModel, tags: ReasoningTags, stream: boolean): ConvertedRequest {
  const { text, tool_choice: _toolChoice, stream: _stream, ...rest } = body;
  const summaryBody: ResponsesRequest = { ...rest, input: [...conversation, { type: 'message', role: 'user', content: SUMMARY_PROMPT }] };
  const converted = convertResponsesRequest(summaryBody, model, tags);
  if (converted.request.tools.length > 0 && modelSupports(model, 'tool_choice')) {
    converted.request.toolChoice = { mode: 'none', toolName: '', disableParallel: false };
  }
  const dropped = text?.format != null ? [...converted.droppedParams, 'text.format'].sort() : converted.droppedParams;
  return { ...converted, stream, droppedParams: dropped };
}

function convertCompaction(body: ResponsesRequest, model: CatalogModel, tags: ReasoningTags): ConvertedRequest {
  if (body.stream === true) {
    throw edgeErrors.invalidRequest('body.stream: a compaction is answered whole; leave stream out.', 'body.stream', 'unsupported_parameter');
  }
  const conversation: ResponsesInputItem[] = typeof body.input === 'string' ? [{ type: 'message', role: 'user', content: body.input }] : body.input;
  return summaryRequest(body, conversation, model, tags, false);
}

/*
 * Codex's in-band compaction (`remote_compaction_v2`): a `/v1/responses` request (HTTP or WebSocket,
 * streamed or not) whose last input item is `{type: 'compaction_trigger'}` asks for the conversation
 * before it to be compacted. It is the same summary request as /compact's, through the same pipeline;
 * the response's output is the one sealed compaction item Codex takes from `response.output_item.done`
 * (it keeps the user messages itself), then `response.completed` with the provider's usage.
 */

/** Whether a responses request is an in-band compaction (its last input item is the trigger). Cheap: one look at the last item. */
export function compactionTriggered(body: ResponsesRequest): boolean {
  return typeof body.input !== 'string' && body.input[body.input.length - 1]?.type === 'compaction_trigger';
}

/** The summary request of an in-band compaction: the conversation without its trigger. */
export function convertTriggeredCompaction(body: ResponsesRequest, model: CatalogModel, tags: ReasoningTags): ConvertedRequest {
  return summaryRequest(body, (body.input as ResponsesInputItem[]).slice(0, -1), model, tags, body.stream === true);
}

/** A compaction output item carrying `summary`, sealed with its writer as issuer. */
export function compactionItem(id: string, summary: string, providerId: string, tags: ReasoningTags): { id: string; type: 'compaction'; encrypted_content: string } {
  return { id, type: 'compaction', encrypted_content: sealCompaction(summary, providerId, tags) };
}

/** The compaction item id of a response: `cmp_`, the request's hex, the output index. */
export function compactionItemId(base: string, outputIndex: number): string {
  return `cmp_${base}_${outputIndex}`;
}

/** A whole in-band compaction: the response object, its output the one compaction item. */
export function renderTriggeredCompaction(answer: ChatResponse, answerContext: AnswerContext, body: ResponsesRequest) {
  const response = renderResponse(answer, answerContext, body);
  const summary = answer.choices[0]?.message?.content ?? '';
  return { ...response, output: [compactionItem(compactionItemId(idBase(answerContext.requestId), 0), summary, answer.providerId, answerContext.tags)] };
}

/**
 * What a WebSocket connection remembers of an in-band compaction (responses-websocket-cache.ts): the
 * compacted window — the user messages of its input, then its output (the compaction item) — the same
 * items /compact answers with, which a continuation extends. Earlier compaction items and the trigger
 * are gone (the new summary covers them).
 */
export function compactedWindow(input: readonly unknown[], output: readonly unknown[]): unknown[] {
  const kept = input.filter((item) => {
    if (typeof item !== 'object' || item === null) return false;
    const { type, role } = item as { type?: unknown; role?: unknown };
    return role === 'user' && (type === undefined || type === 'message');
  });
  return [...kept, ...output];
}

/** The user messages of the conversation, as output items (OpenAI keeps them ahead of the compaction item). */
function userMessages(body: ResponsesRequest, base: string): Record<string, unknown>[] {
  const contents: ResponsesContentPart[][] = [];
  if (typeof body.input === 'string') {
    contents.push([{ type: 'input_text', text: body.input }]);
  } else {
    for (const item of body.input) {
      if (item.type !== 'message' || item.role !== 'user') continue;
      contents.push(typeof item.content === 'string' ? [{ type: 'input_text', text: item.content }] : item.content);
    }
  }
  return contents.map((content, index) => ({ id: itemId('msg', base, index), type: 'message', status: 'completed', role: 'user', content }));
}

/** The `response.compaction` object (the SDK's `CompactedResponse`). */
export function renderCompaction(answer: ChatResponse, answerContext: AnswerContext, body: ResponsesRequest) {
  const base = idBase(answerContext.requestId);
  const output: Record<string, unknown>[] = userMessages(body, base);
  const summary = answer.choices[0]?.message?.content ?? '';
  output.push(compactionItem(compactionItemId(base, output.length), summary, answer.providerId, answerContext.tags));
  return {
    id: responseId(answerContext.requestId),
    object: 'response.compaction',
    created_at: answerContext.created,
    output,
    usage: renderUsage(answer.usage, chatResponseCost(answer, answerContext.model.model.pricing)),
  };
}

/** What POST /v1/responses and /v1/responses/compact read alike: the body, its model and routing, the errors. */
export const RESPONSES_REQUEST = {
  endpoint: RESPONSES_ENDPOINT,
  errorDialect: 'chat',
  freeFormFields: RESPONSES_FREE_FORM_FIELDS,
  parse: parseResponsesRequest,
  ...BODY_MODEL_AND_ROUTING,
} satisfies Partial<InferenceDialect<ResponsesRequest>>;

/** POST /v1/responses/compact: the responses dialect's request and errors, its own conversion and answer. */
export const responsesCompactDialect: InferenceDialect<ResponsesRequest> = {
  ...RESPONSES_REQUEST,
  // `model` is compact's only required field: an empty conversation still sends the summary prompt.
  parse: parseCompactionRequest,
  convert: convertCompaction,
  render: renderCompaction,
  streamWriter: NO_STREAM,
};
