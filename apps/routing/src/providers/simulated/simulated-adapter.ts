import { unsentParameters } from '@gateway/platform';
import { createHash } from 'node:crypto';
import type { ChatRequest, Tool, ToolCall } from '@gateway/proto';
import { countInputTokens, countTextTokens, emptyUsage, tokenizer, tokenizerBudget } from '../../usage/token-counter.js';
import { sampleJsonForSchema } from './simulate-json.js';
import { structuredOutputViolation, unsatisfiableSchema } from '../structured-output.js';
import type {
  AdapterChatRequest, AttemptSignal, AdapterChatResult, AdapterEmbedRequest, AdapterEmbedResult, AdapterImageEditRequest, AdapterImageRequest,
  AdapterImageResult, AdapterModerateRequest, AdapterModerateResult, AdapterSpeakRequest, AdapterSpeechResult, AdapterStreamPart,
  AdapterTranscribeRequest, AdapterTranscribeResult, ProviderAdapterV1,
} from '../provider-adapter.js';
import { MODERATION_IMAGE_TOKENS } from '../provider-adapter.js';
import { drawImage, imageTokens } from './simulate-image.js';
import { simulateModerations } from './simulate-moderation.js';
import { synthesizeSpeech } from './simulate-speech.js';
import { simulateTranscription } from './simulate-transcription.js';

/**
 * A provider without a network: deterministic text derived from the prompt and honest token counts
 * (the same tokenizer for input and output). Used by `npm start` and by tests that need no upstream.
 * It has no wire format, so its folder holds only this file (CONVENTIONS 1 covers real providers).
 */

const VOCABULARY = [
  'gateway', 'routes', 'each', 'request', 'to', 'a', 'provider', 'that', 'serves', 'the', 'model', 'and', 'counts',
  'every', 'token', 'it', 'returns', 'with', 'care', 'so', 'billing', 'stays', 'exact', 'while', 'streams', 'flow',
  'quickly', 'through', 'simulated', 'answers', 'are', 'deterministic', 'for', 'tests',
];
const WORDS_PER_ANSWER = 24;
const TOKENS_PER_CHUNK = 4;
const encodeOptions = { disallowedSpecial: new Set<string>() };

function lastUserText(request: ChatRequest): string {
  for (let index = request.messages.length - 1; index >= 0; index--) {
    const message = request.messages[index];
    if (message?.role !== 'user') continue;
    return message.content.map((part) => (part.part?.$case === 'text' ? part.part.value : '')).join(' ');
  }
  return '';
}

function parseSchema(text: string): unknown {
  try {
    return text ? JSON.parse(text) : {};
  } catch {
    return {};
  }
}

interface SimulatedAnswer {
  content: string;
  toolCalls: ToolCall[];
  finishReason: string;
}

/**
 * The tool the simulator calls, if any (docs/dialects.md "Tools on the `simulated` provider"): the named one when `tool_choice`
 * forces it, the first one under `required`; under `auto` (or no choice) when tools are offered, the last
 * message is the user's and no tool result came since the last assistant turn, the first tool whose name
 * appears in the user's text (case-insensitive), else the first tool. Never under `none`; after a tool
 * result it answers text, so a client's tool loop ends.
 */
function chosenTool(request: ChatRequest, prompt: string): Tool | undefined {
  const mode = request.toolChoice?.mode || 'auto';
  if (mode === 'tool') return request.tools.find((tool) => tool.name === request.toolChoice?.toolName);
  if (mode === 'required') return request.tools[0];
  if (mode !== 'auto' || request.tools.length === 0) return undefined;
  const messages = request.messages;
  if (messages.at(-1)?.role !== 'user') return undefined;
  for (let index = messages.length - 1; index >= 0 && messages[index]!.role !== 'assistant'; index--) {
    if (messages[index]!.role === 'tool') return undefined;
  }
  const text = prompt.toLowerCase();
  return request.tools.find((tool) => tool.name !== '' && text.includes(tool.name.toLowerCase())) ?? request.tools[0];
}

/** A tool call's arguments: a JSON object satisfying the tool's parameter schema, its strings made of the user's words. */
function toolArguments(tool: Tool, prompt: string): string {
  const schema = parseSchema(tool.parameters);
  const declared = typeof schema === 'object' && schema !== null && ('properties' in schema || 'required' in schema || '$ref' in schema || 'allOf' in schema);
  if (!declared) return '{}';
  const words = prompt.split(/\s+/, 33).filter(Boolean).slice(0, 32).map((word) => word.slice(0, 64));
  const value = sampleJsonForSchema(schema, words.length > 0 ? words : VOCABULARY);
  return JSON.stringify(typeof value === 'object' && value !== null && !Array.isArray(value) ? value : {});
}

export function simulateAnswer(request: ChatRequest, upstreamModel: string): SimulatedAnswer {
  const prompt = lastUserText(request);
  const digest = createHash('sha256').update(upstreamModel).update('\0').update(prompt).digest();
  const tool = chosenTool(request, prompt);
  if (tool) {
    return {
      content: '',
      toolCalls: [{ id: `call_${digest.subarray(0, 8).toString('hex')}`, name: tool.name, arguments: toolArguments(tool, prompt) }],
      finishReason: 'tool_calls',
    };
  }
  const words: string[] = [];
  for (let index = 0; index < WORDS_PER_ANSWER; index++) words.push(VOCABULARY[digest[index % digest.length]! % VOCABULARY.length]!);
  const sentence = `${words.join(' ')}.`;
  // Words cut short: a client's 160,000-letter word echoed back would cost the tokenizer seconds below.
  const echo = prompt.split(/\s+/, 9).filter(Boolean).slice(0, 8).map((word) => word.slice(0, 64)).join(' ');
  let content = `Simulated reply to "${echo}": ${sentence.charAt(0).toUpperCase()}${sentence.slice(1)}`;
  if (request.responseFormat?.type === 'json_schema') {
    content = JSON.stringify(sampleJsonForSchema(parseSchema(request.responseFormat.schema), words));
    // What the simulator built must satisfy the schema; when it cannot, no other attempt would do better.
    const violation = structuredOutputViolation(request.responseFormat, content);
    if (violation !== undefined) throw unsatisfiableSchema(violation);
  } else if (request.responseFormat?.type === 'json_object') {
    content = JSON.stringify({ answer: content });
  }
  let finishReason = 'stop';
  const limit = request.maxOutputTokens;
  if (limit !== undefined && limit > 0) {
    const tokens = tokenizer().encode(content, encodeOptions);
    if (tokens.length > limit) {
      content = tokenizer().decode(tokens.slice(0, limit));
      finishReason = 'length';
    }
  }
  return { content, toolCalls: [], finishReason };
}

export class SimulatedAdapter implements ProviderAdapterV1 {
  readonly specificationVersion = 'v1' as const;
  readonly kind = 'simulated';

  constructor(readonly providerId: string) {}

  private usageFor(request: AdapterChatRequest, answer: SimulatedAnswer) {
    const output =
      tokenizer().encode(answer.content, encodeOptions).length +
      answer.toolCalls.reduce((sum, call) => sum + tokenizer().encode(call.name, encodeOptions).length + tokenizer().encode(call.arguments, encodeOptions).length, 0);
    return { ...emptyUsage(), inputTokens: countInputTokens(request.chat.messages, request.chat.tools), outputTokens: output };
  }

  async chat(request: AdapterChatRequest, signal: AttemptSignal): Promise<AdapterChatResult> {
    signal.throwIfAborted();
    // No network: the "upstream" has the prompt as soon as it is called.
    signal.requestSent?.();
    reportUnsent(request, signal);
    const answer = simulateAnswer(request.chat, request.upstreamModel);
    return {
      choices: [{ index: 0, finishReason: answer.finishReason, stopSequence: '', message: { content: answer.content, toolCalls: answer.toolCalls, reasoning: [], images: [] } }],
      usage: this.usageFor(request, answer),
    };
  }

  async *chatStream(request: AdapterChatRequest, signal: AttemptSignal): AsyncIterable<AdapterStreamPart> {
    signal.throwIfAborted();
    signal.requestSent?.();
    reportUnsent(request, signal);
    const answer = simulateAnswer(request.chat, request.upstreamModel);
    const tokens = tokenizer().encode(answer.content, encodeOptions);
    for (let start = 0; start < tokens.length; start += TOKENS_PER_CHUNK) {
      signal.throwIfAborted();
      // Yield to the event loop between chunks, as a network stream would.
      await new Promise((resolve) => setImmediate(resolve));
      yield {
        type: 'delta',
        delta: { choiceIndex: 0, content: tokenizer().decode(tokens.slice(start, start + TOKENS_PER_CHUNK)), toolCalls: [], reasoning: '', reasoningSignature: '', finishReason: '', images: [], reasoningEncrypted: '', stopSequence: '' },
      };
    }
    const toolCalls = answer.toolCalls.map((call, index) => ({ index, id: call.id, name: call.name, arguments: call.arguments }));
    yield { type: 'delta', delta: { choiceIndex: 0, content: '', toolCalls, reasoning: '', reasoningSignature: '', finishReason: answer.finishReason, images: [], reasoningEncrypted: '', stopSequence: '' } };
    yield { type: 'usage', usage: this.usageFor(request, answer) };
  }

  /** Unit vectors derived from each input's hash: same input, same vector. */
  async embed(request: AdapterEmbedRequest, signal: AttemptSignal): Promise<AdapterEmbedResult> {
    signal.throwIfAborted();
    const dimensions = Math.min(request.dimensions ?? 64, 4_096);
    const inputs = request.texts.length > 0 ? request.texts : request.tokenInputs.map((ids) => ids.join(','));
    const embeddings = inputs.map((input) => {
      const values: number[] = [];
      // The input is hashed once: hashing it again per 16 dimensions made a large input cost 256 passes.
      const seed = createHash('sha256').update(input).digest('hex');
      for (let block = 0; values.length < dimensions; block++) {
        const digest = createHash('sha256').update(`${request.upstreamModel}\0${block}\0${seed}`).digest();
        for (let offset = 0; offset + 2 <= digest.length && values.length < dimensions; offset += 2) values.push(digest.readUInt16BE(offset) / 32_768 - 1);
      }
      const norm = Math.sqrt(values.reduce((sum, value) => sum + value * value, 0)) || 1;
      return values.map((value) => value / norm);
    });
    const budget = tokenizerBudget();
    const inputTokens =
      request.texts.reduce((sum, text) => sum + countTextTokens(text, budget), 0) +
      request.tokenInputs.reduce((sum, ids) => sum + ids.length, 0);
    return { embeddings, usage: { ...emptyUsage(), inputTokens } };
  }

  async moderate(request: AdapterModerateRequest, signal: AttemptSignal): Promise<AdapterModerateResult> {
    signal.throwIfAborted();
    const budget = tokenizerBudget();
    const input = request.input;
    const texts = input.form === 'string' ? [input.text] : input.form === 'strings' ? input.texts : input.parts.flatMap((part) => (part.type === 'text' ? [part.text] : []));
    const images = input.form === 'multimodal' ? input.parts.length - texts.length : 0;
    const inputTokens = texts.reduce((sum, text) => sum + countTextTokens(text, budget), 0) + images * MODERATION_IMAGE_TOKENS;
    return { results: simulateModerations(input), usage: { ...emptyUsage(), inputTokens } };
  }

  async generateImages(request: AdapterImageRequest, signal: AttemptSignal): Promise<AdapterImageResult> {
    return this.draw(request, new Uint8Array(), 0, signal);
  }

  async editImages(request: AdapterImageEditRequest, signal: AttemptSignal): Promise<AdapterImageResult> {
    const seed = createHash('sha256');
    for (const image of request.images) seed.update(image.data);
    if (request.mask) seed.update(request.mask.data);
    // Input images priced like generated ones of their count: a fixed 272 tokens each (OpenAI's minimum tile cost).
    return this.draw(request, seed.digest(), request.images.length * 272, signal);
  }

  private async draw(request: AdapterImageRequest, seed: Uint8Array, inputImageTokens: number, signal: AttemptSignal): Promise<AdapterImageResult> {
    const images = [];
    for (let index = 0; index < request.n; index++) {
      signal.throwIfAborted();
      images.push(drawImage(request.prompt, index, request.size, seed));
      // Drawing is CPU work: let other requests run between images.
      await new Promise((resolve) => setImmediate(resolve));
    }
    return {
      images,
      usage: { ...emptyUsage(), inputTextTokens: countTextTokens(request.prompt), inputImageTokens, outputImageTokens: imageTokens(request.size) * images.length },
    };
  }

  speak(request: AdapterSpeakRequest, signal: AttemptSignal): Promise<AdapterSpeechResult> {
    return synthesizeSpeech(request, signal);
  }

  async transcribe(request: AdapterTranscribeRequest, signal: AttemptSignal): Promise<AdapterTranscribeResult> {
    signal.throwIfAborted();
    return simulateTranscription(request);
  }

  async close(): Promise<void> {}
}

/** What the simulated answer cannot carry (logprobs, an Anthropic beta), named as a converter would (PARAMETERS). */
function reportUnsent(request: AdapterChatRequest, signal: AttemptSignal): void {
  const unsent = unsentParameters('simulated', request.chat);
  if (unsent.length > 0) signal.parametersUnsent?.(unsent);
}
