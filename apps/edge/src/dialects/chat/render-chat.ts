import type { ChatResponse, Pricing, ReasoningPart, Usage } from '@gateway/proto';
import type { ReasoningTags } from '../../canonical/reasoning-tags.js';
import { chatResponseCost, type AnswerCost } from '../../inference/answer-cost.js';

/** Spec §2.5: chat ids carry `chatcmpl-` whatever prefix the router used. */
export function chatCompletionId(routerId: string): string {
  if (routerId.startsWith('chatcmpl-')) return routerId;
  return `chatcmpl-${routerId.replace(/^(msg_|resp_|chatcmpl_)/, '')}`;
}

/**
 * Chat usage: `prompt_tokens` counts every prompt token; its details name the parts read from
 * (`cached_tokens`) and written to (`cache_write_tokens`, OpenRouter's name) the provider's prompt cache.
 * `cost` / `cost_details` (answer-cost.ts): the ledger's charge, when known.
 */
export function renderUsage(usage: Usage | undefined, cost?: AnswerCost) {
  const input = usage?.inputTokens ?? 0;
  const output = usage?.outputTokens ?? 0;
  return {
    prompt_tokens: input,
    completion_tokens: output,
    total_tokens: input + output,
    prompt_tokens_details: { cached_tokens: usage?.cachedInputTokens ?? 0, cache_write_tokens: usage?.cacheWriteTokens ?? 0 },
    completion_tokens_details: { reasoning_tokens: usage?.reasoningTokens ?? 0 },
    ...cost,
  };
}

/**
 * Spec §2.5 chat completion. `model` is the catalog id the edge resolved; `pricing` its catalog prices
 * (the cost's prices when the Router sent none).
 */
export function renderChatCompletion(response: ChatResponse, modelId: string, tags: ReasoningTags, pricing?: Pricing) {
  return {
    id: chatCompletionId(response.id),
    object: 'chat.completion',
    created: Number(response.created) || Math.floor(Date.now() / 1000),
    model: modelId,
    choices: response.choices.map((choice) => {
      const source = choice.message;
      const toolCalls = source?.toolCalls ?? [];
      const message: Record<string, unknown> = {
        role: 'assistant',
        content: toolCalls.length > 0 && !source?.content ? null : (source?.content ?? ''),
        refusal: source?.refusal ?? null,
      };
      if (toolCalls.length > 0) {
        message.tool_calls = toolCalls.map((call) => {
          const rendered: Record<string, unknown> = { id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } };
          if (call.signature) rendered.extra_content = callSignatureContent(tags.tagCall(call.signatureProviderId || response.providerId, call.signature));
          return rendered;
        });
      }
      const reasoning = (source?.reasoning ?? []).map((part) => part.text).join('');
      if (reasoning) message.reasoning = reasoning;
      if (source && source.reasoning.length > 0) message.reasoning_details = renderReasoningDetails(source.reasoning, response.providerId, tags);
      if (source && source.images.length > 0) {
        message.images = source.images.map((image) => ({ type: 'image_url', image_url: { url: image.url } }));
      }
      // The upstream's logprobs, relayed (JSON text from routing), where the client asked for them.
      return { index: choice.index, message, logprobs: choice.logprobs ? (JSON.parse(choice.logprobs) as unknown) : null, finish_reason: choice.finishReason || 'stop' };
    }),
    usage: renderUsage(response.usage, chatResponseCost(response, pricing)),
  };
}

/**
 * A tool call's signature (a Gemini call's thoughtSignature, issuer-tagged) where Google's own OpenAI
 * compatibility puts it: `tool_calls[].extra_content.google.thought_signature`. Clients that keep a
 * call's unknown fields (the OpenAI SDKs do) send it back with the call.
 */
export function callSignatureContent(taggedSignature: string) {
  return { google: { thought_signature: taggedSignature } };
}

/**
 * OpenRouter's reasoning_details: what a client replays to keep a provider's signed or encrypted
 * reasoning in a tool loop. Signatures and data carry the issuer tag (canonical/reasoning-tags.ts).
 */
export function renderReasoningDetails(parts: readonly ReasoningPart[], providerId: string, tags: ReasoningTags): Record<string, unknown>[] {
  return parts.map((part, index) => {
    const issuer = part.providerId || providerId;
    if (part.encryptedData) return { type: 'reasoning.encrypted', data: tags.tag(issuer, part.encryptedData), index };
    const detail: Record<string, unknown> = { type: 'reasoning.text', text: part.text, index };
    if (part.signature) detail.signature = tags.tag(issuer, part.signature);
    return detail;
  });
}
