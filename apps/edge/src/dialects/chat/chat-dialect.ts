import { BODY_MODEL_AND_ROUTING, type InferenceDialect } from '../../inference/dialect.js';
import { CHAT_FREE_FORM_FIELDS, parseChatCompletionRequest, type ChatCompletionRequest } from './chat-schema.js';
import { ChatChunkWriter } from './chat-stream-writer.js';
import { CHAT_ENDPOINT, convertChatRequest } from './convert-chat-request.js';
import { renderChatCompletion } from './render-chat.js';

/** POST /v1/chat/completions (spec §4.8). */
export const chatDialect: InferenceDialect<ChatCompletionRequest> = {
  endpoint: CHAT_ENDPOINT,
  errorDialect: 'chat',
  freeFormFields: CHAT_FREE_FORM_FIELDS,
  parse: parseChatCompletionRequest,
  ...BODY_MODEL_AND_ROUTING,
  convert: (body, model, tags) => convertChatRequest(body, model, tags),
  render: (answer, answerContext) => renderChatCompletion(answer, answerContext.model.id, answerContext.tags, answerContext.model.model.pricing),
  streamWriter: (answerContext, body) => new ChatChunkWriter(answerContext.model.id, body.stream_options?.include_usage === true, answerContext.tags, answerContext.model.model.pricing),
};
