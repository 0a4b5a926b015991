import type { ChatChoice, GeneratedImage, ReasoningPart, ToolCall } from '@gateway/proto';
import { ProviderError } from '../provider-adapter.js';
import type { GeminiAnswerPart, GeminiCandidate, GeminiResponse } from './gemini-api-types.js';
import { convertGeminiLogprobs } from './convert-gemini-logprobs.js';
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
  // Several candidates (chat `n`): refused only when every one was blocked; a blocked one among others
  // is a choice that finished with content_filter.
  const candidates = response.candidates;
  const first = candidates?.[0];
  if (first && isBlockingFinishReason(first.finishReason) && candidates!.every((candidate) => isBlockingFinishReason(candidate.finishReason))) {
    return new ProviderError('content_filter', first.finishMessage || `answer blocked: ${first.finishReason}`);
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
 * A whole generateContent answer as canonical choices: each candidate a choice at its `index` (several
 * when the request set candidateCount, chat `n`), with its logprobs when the request asked for them
 * (convert-gemini-logprobs.ts). Throws the refusal of a blocked answer.
 */
export function convertGeminiAnswers(response: GeminiResponse, providerId: string, names: GeminiToolNames): ChatChoice[] {
  const blocked = geminiBlock(response);
  if (blocked) throw blocked;
  const candidates = response.candidates;
  if (!candidates || candidates.length === 0) throw new ProviderError('connection', 'answer without candidates');
  if (candidates.length === 1) return [convertGeminiCandidate(candidates[0]!, 0, providerId, names)];
  return candidates.map((candidate, position) => convertGeminiCandidate(candidate, candidate.index ?? position, providerId, names));
}

/**
 * One candidate as a canonical choice. Text parts are joined;
 * thought parts become reasoning issued by `providerId`; every thoughtSignature, on whatever part, becomes
 * reasoning of `providerId` that says where it rode (gemini-thought-signatures.ts); functionCall parts
 * become tool calls with made-up ids (Gemini sends none), the caller's tool names and arguments as JSON text,
 * each with its own signature (issued by `providerId`) when its part had one.
 */
function convertGeminiCandidate(candidate: GeminiCandidate, choiceIndex: number, providerId: string, names: GeminiToolNames): ChatChoice {
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
  const choice: ChatChoice = {
    index: choiceIndex,
    finishReason: mapGeminiFinishReason(candidate.finishReason, toolCalls.length > 0),
    stopSequence: '',
    message: { content, toolCalls, reasoning, images },
  };
  // Only a request that asked for logprobs gets a logprobsResult.
  const logprobs = convertGeminiLogprobs(candidate.logprobsResult);
  if (logprobs !== undefined) choice.logprobs = logprobs;
  return choice;
}
