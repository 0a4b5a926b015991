import type { ChatMessage } from '@gateway/proto';
import type { AdapterChatRequest } from '../providers/provider-adapter.js';
import type { Candidate } from '../strategies/index.js';
import type { PreparedRequest } from './candidates.js';

/** Signed or encrypted reasoning only goes back to the provider that issued it (field-failures: cross-provider). */
export function stripForeignReasoning(messages: ChatMessage[], providerId: string): ChatMessage[] {
  // Most conversations carry no reasoning at all: then the same array goes on, uncopied.
  if (!messages.some((message) => message.reasoning.length > 0)) return messages;
  return messages.map((message) =>
    message.reasoning.length === 0
      ? message
      : {
          ...message,
          reasoning: message.reasoning.filter(
            (part) => part.providerId === providerId || (part.signature === '' && part.encryptedData === ''),
          ),
        },
  );
}

/** The adapter request of one attempt: the chat with reasoning only its own provider may read. */
export function requestFor(prepared: PreparedRequest, candidate: Candidate): AdapterChatRequest {
  const messages = stripForeignReasoning(prepared.request.messages, candidate.offer.providerId);
  return {
    upstreamModel: candidate.offer.upstreamModel,
    chat: messages === prepared.request.messages ? prepared.request : { ...prepared.request, messages },
    modelMaxOutputTokens: prepared.model.maxOutputTokens,
  };
}
