import type { ChatResponse } from '@gateway/proto';
import type { CatalogModel } from '../../catalog-cache.js';
import type { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { edgeErrors } from '../../errors.js';
import type { AnswerContext, ConvertedRequest, InferenceDialect } from '../../inference/dialect.js';
import { sealCompaction, SUMMARY_PROMPT } from './compaction-item.js';
import { convertResponsesRequest, RESPONSES_ENDPOINT } from './convert-responses-request.js';
import { idBase, itemId, renderUsage, responseId } from './render-responses.js';
import { parseResponsesRequest, RESPONSES_FREE_FORM_FIELDS, type ResponsesContentPart, type ResponsesInputItem, type ResponsesRequest } from './responses-schema.js';

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
 * so a history of tool calls stays valid for every provider) followed by the gateway's summary prompt,
 * answered whole. `text` is not forwarded (a format would shape the summary), nor a tool choice: when
 * tools are offered the model is told to use none.
 */
function convertCompaction(body: ResponsesRequest, model: CatalogModel, tags: ReasoningTags): ConvertedRequest {
  if (body.stream === true) {
    throw edgeErrors.invalidRequest('body.stream: a compaction is answered whole; leave stream out.', 'body.stream', 'unsupported_parameter');
  }
  const { text, tool_choice: _toolChoice, stream: _stream, ...rest } = body;
  const conversation: ResponsesInputItem[] = typeof body.input === 'string' ? [{ type: 'message', role: 'user', content: body.input }] : body.input;
  const summaryBody: ResponsesRequest = { ...rest, input: [...conversation, { type: 'message', role: 'user', content: SUMMARY_PROMPT }] };
  const converted = convertResponsesRequest(summaryBody, model, tags);
  if (converted.request.tools.length > 0 && model.supportedParameters.has('tool_choice')) {
    converted.request.toolChoice = { mode: 'none', toolName: '', disableParallel: false };
  }
  const dropped = text?.format != null ? [...converted.droppedParams, 'text.format'].sort() : converted.droppedParams;
  return { ...converted, stream: false, droppedParams: dropped };
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
  output.push({ id: `cmp_${base}_${output.length}`, type: 'compaction', encrypted_content: sealCompaction(summary, answer.providerId, answerContext.tags) });
  return {
    id: responseId(answerContext.requestId),
    object: 'response.compaction',
    created_at: answerContext.created,
    output,
    usage: renderUsage(answer.usage),
  };
}

/** POST /v1/responses/compact: the responses dialect's request and errors, its own conversion and answer. */
export const responsesCompactDialect: InferenceDialect<ResponsesRequest> = {
  endpoint: RESPONSES_ENDPOINT,
  errorDialect: 'chat',
  freeFormFields: RESPONSES_FREE_FORM_FIELDS,
  parse: parseResponsesRequest,
  modelName: (body) => body.model,
  routing: (body) => body.routing,
  convert: convertCompaction,
  render: renderCompaction,
  streamWriter: NO_STREAM,
};
