import type { ChatChoice, GeneratedImage, ReasoningPart, ToolCall } from '@gateway/proto';
import { ProviderError } from '../provider-adapter.js';
import type { GeminiAnswerPart, GeminiCandidate, GeminiResponse } from './gemini-api-types.js';
import { CallIds, placeSignature } from './gemini-thought-signatures.js';
import type { GeminiToolNames } from './gemini-tool-names.js';
import { isBlockingFinishReason, mapGeminiFinishReason } from './map-gemini-finish-reason.js';

/**
 * A refusal in a Gemini answer: the prompt blocked (`promptFeedback.blockReason`, no candidates) or the
 * candidate stopped for safety or policy. The router turns it into 400 content_moderation.
 */
export function geminiBlock(response: GeminiResponse): ProviderError | undefined {
  const feedback = response.promptFeedback;
  if (feedback?.blockReason && feedback.blockReason !== 'BLOCKED_REASON_UNSPECIFIED') {
    return new ProviderError('content_filter', feedback.blockReasonMessage || `prompt blocked: ${feedback.blockReason}`);
  }
  const candidate = response.candidates?.[0];
  if (candidate && isBlockingFinishReason(candidate.finishReason)) {
    return new ProviderError('content_filter', candidate.finishMessage || `answer blocked: ${candidate.finishReason}`);
  }
  return undefined;
}

/** An image the model made (image models answer with inlineData image parts), as a data: URL. */
export function generatedImage(part: GeminiAnswerPart): GeneratedImage | undefined {
  const data = part.inlineData;
  if (!data?.data || !data.mimeType?.startsWith('image/')) return undefined;
  return { url: `data:${data.mimeType};base64,${data.data}` };
}

/**
 * A whole generateContent answer (its first candidate) as the canonical choice. Text parts are joined;
 * thought parts become reasoning issued by `providerId`; every thoughtSignature, on whatever part, becomes
 * reasoning of `providerId` that says where it rode (gemini-thought-signatures.ts); functionCall parts
 * become tool calls with made-up ids (Gemini sends none), the caller's tool names and arguments as JSON text,
 * each with its own signature (issued by `providerId`) when its part had one.
 */
export function convertGeminiAnswer(response: GeminiResponse, providerId: string, names: GeminiToolNames): ChatChoice {
  const blocked = geminiBlock(response);
  if (blocked) throw blocked;
  const candidate: GeminiCandidate | undefined = response.candidates?.[0];
  if (!candidate) throw new ProviderError('connection', 'answer without candidates');
  const ids = new CallIds();
  let content = '';
  const reasoning: ReasoningPart[] = [];
  const toolCalls: ToolCall[] = [];
  const images: GeneratedImage[] = [];
  for (const part of candidate.content?.parts ?? []) {
    const signature = part.thoughtSignature ?? '';
    if (part.functionCall) {
      const index = toolCalls.length;
      // The call carries its own signature (a chat client echoes only tool_calls), and the reasoning
      // record too (messages and responses clients echo reasoning, not call extras).
      toolCalls.push({
        id: ids.idFor(index, part.functionCall.id),
        name: names.caller(part.functionCall.name ?? ''),
        arguments: JSON.stringify(part.functionCall.args ?? {}),
        signature: signature || undefined,
        signatureProviderId: signature ? providerId : undefined,
      });
      if (signature) reasoning.push({ text: '', signature: placeSignature({ kind: 'call', index }, signature), encryptedData: '', providerId });
    } else if (part.thought) {
      reasoning.push({ text: part.text ?? '', signature: signature ? placeSignature({ kind: 'thought' }, signature) : '', encryptedData: '', providerId });
    } else {
      const image = generatedImage(part);
      if (image) images.push(image);
      if (part.text) content += part.text;
      if (signature) reasoning.push({ text: '', signature: placeSignature({ kind: 'text' }, signature), encryptedData: '', providerId });
    }
  }
  return {
    index: 0,
    finishReason: mapGeminiFinishReason(candidate.finishReason, toolCalls.length > 0),
    stopSequence: '',
    message: { content, toolCalls, reasoning, images },
  };
}
