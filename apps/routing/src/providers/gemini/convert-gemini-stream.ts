import type { ChatStreamDelta, GeneratedImage, ToolCallDelta, Usage } from '@gateway/proto';
import type { GeminiResponse, GeminiUsage } from './gemini-api-types.js';
import { geminiBlock, generatedImage } from './convert-gemini-answer.js';
import { convertGeminiLogprobs } from './convert-gemini-logprobs.js';
import { convertGeminiUsage } from './convert-gemini-usage.js';
import { CallIds, placeSignature } from './gemini-thought-signatures.js';
import type { GeminiToolNames } from './gemini-tool-names.js';
import { mapGeminiFinishReason } from './map-gemini-finish-reason.js';

function delta(
  content: string, reasoning: string, reasoningSignature: string, toolCalls: ToolCallDelta[], finishReason: string, images: GeneratedImage[] = [],
): ChatStreamDelta {
  // Every field at once, in the order the other adapters build them: one hidden class for all deltas.
  return { choiceIndex: 0, content, toolCalls, reasoning, reasoningSignature, finishReason, images, reasoningEncrypted: '', stopSequence: '' };
}

/**
 * Turns streamGenerateContent chunks (each a GenerateContentResponse) into canonical deltas. Each part
 * becomes one delta the moment it comes: text, a thought (reasoning), a signature (reasoning with
 * only a signature, placed as in the whole answer), a function call whole with its id, name,
 * arguments and signature (Gemini streams calls whole). The chunk that carries a finishReason completes the answer;
 * its delta holds the finish reason (tool_calls when calls came). Usage is the latest chunk's (Gemini
 * repeats cumulative counts).
 */
export class GeminiStreamConverter {
  private finished = false;
  private toolCount = 0;
  private usageMetadata: GeminiUsage | null | undefined;
  private readonly ids = new CallIds();

  constructor(
    private readonly providerId: string,
    private readonly names: GeminiToolNames,
  ) {}

  get complete(): boolean {
    return this.finished;
  }

  get usage(): Usage | undefined {
    return convertGeminiUsage(this.usageMetadata);
  }

  /** The deltas of one chunk, in part order (usually one). Throws the refusal of a blocked answer. */
  accept(chunk: GeminiResponse): ChatStreamDelta[] {
    if (chunk.usageMetadata) this.usageMetadata = chunk.usageMetadata;
    const blocked = geminiBlock(chunk);
    if (blocked) throw blocked;
    if (this.finished) return [];
    const candidate = chunk.candidates?.[0];
    const deltas: ChatStreamDelta[] = [];
    for (const part of candidate?.content?.parts ?? []) {
      const signature = part.thoughtSignature ?? '';
      if (part.functionCall) {
        const index = this.toolCount++;
        // The signature first, as its own reasoning delta: reasoning comes before the call it belongs to.
        if (signature) deltas.push(delta('', '', placeSignature({ kind: 'call', index }, signature), [], ''));
        // The call also carries its signature itself (issued by the stream's provider).
        const call: ToolCallDelta = {
          index, id: this.ids.idFor(index, part.functionCall.id), name: this.names.caller(part.functionCall.name ?? ''),
          arguments: JSON.stringify(part.functionCall.args ?? {}), signature: signature || undefined,
        };
        deltas.push(delta('', '', '', [call], ''));
      } else if (part.thought) {
        if (part.text || signature) deltas.push(delta('', part.text ?? '', signature ? placeSignature({ kind: 'thought' }, signature) : '', [], ''));
      } else {
        const image = generatedImage(part);
        if (image) deltas.push(delta('', '', '', [], '', [image]));
        if (part.text) deltas.push(delta(part.text, '', '', [], ''));
        if (signature) deltas.push(delta('', '', placeSignature({ kind: 'text' }, signature), [], ''));
      }
    }
    // The chunk's logprobs (asked for with responseLogprobs) ride on its first delta, or on their own.
    const logprobs = candidate?.logprobsResult != null ? convertGeminiLogprobs(candidate.logprobsResult) : undefined;
    if (logprobs !== undefined) {
      if (deltas.length > 0) deltas[0]!.logprobs = logprobs;
      else deltas.push({ ...delta('', '', '', [], ''), logprobs });
    }
    if (candidate?.finishReason && candidate.finishReason !== 'FINISH_REASON_UNSPECIFIED') {
      this.finished = true;
      deltas.push(delta('', '', '', [], mapGeminiFinishReason(candidate.finishReason, this.toolCount > 0)));
    }
    return deltas;
  }
}
