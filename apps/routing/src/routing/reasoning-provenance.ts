import type { ChatMessage, ToolCall } from '@gateway/proto';
import type { AdapterChatRequest } from '../providers/provider-adapter.js';
import type { Candidate } from '../strategies/index.js';
import type { PreparedRequest } from './candidates.js';

/**
 * Signed or encrypted reasoning only goes back to the provider that issued it (field-failures:
 * cross-provider), and so does a tool call's own signature (Gemini's thoughtSignature on a call): for
 * any other provider the call stays, without its signature.
 */
export function stripForeignReasoning(messages: ChatMessage[], providerId: string): ChatMessage[] {
  // Most conversations carry no reasoning and no signed call at all: then the same array goes on, uncopied.
  if (!messages.some(carriesProvenance)) return messages;
  return messages.map((message) => {
    if (!carriesProvenance(message)) return message;
    const reasoning =
      message.reasoning.length === 0
        ? message.reasoning
        : message.reasoning.filter((part) => part.providerId === providerId || (part.signature === '' && part.encryptedData === ''));
    const toolCalls = message.toolCalls.some((call) => isForeignSignature(call, providerId))
      ? message.toolCalls.map((call) => (isForeignSignature(call, providerId) ? { id: call.id, name: call.name, arguments: call.arguments } : call))
      : message.toolCalls;
    return { ...message, reasoning, toolCalls };
  });
}

function carriesProvenance(message: ChatMessage): boolean {
  return message.reasoning.length > 0 || message.toolCalls.some((call) => call.signature);
}

function isForeignSignature(call: ToolCall, providerId: string): boolean {
  return !!call.signature && call.signatureProviderId !== providerId;
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
