import { BODY_MODEL_AND_ROUTING, type InferenceDialect } from '../../inference/dialect.js';
import { convertMessagesRequest, MESSAGES_ENDPOINT } from './convert-messages-request.js';
import { MESSAGES_FREE_FORM_FIELDS, parseMessagesRequest, type MessagesRequest } from './messages-schema.js';
import { MessagesStreamWriter } from './messages-stream-writer.js';
import { renderMessage } from './render-messages.js';

/** POST /v1/messages (spec §4.10): the messages dialect over the one pipeline. */
export const messagesDialect: InferenceDialect<MessagesRequest> = {
  endpoint: MESSAGES_ENDPOINT,
  errorDialect: 'messages',
  freeFormFields: MESSAGES_FREE_FORM_FIELDS,
  parse: parseMessagesRequest,
  ...BODY_MODEL_AND_ROUTING,
  convert: convertMessagesRequest,
  render: (answer, answerContext) => renderMessage(answer, answerContext),
  streamWriter: (answerContext) => new MessagesStreamWriter(answerContext),
};
