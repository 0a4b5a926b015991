import { createRequire } from 'node:module';
import { MAX_TOKENIZER_RUN, tokenizerSlices, withBoundedMergeCache } from '@gateway/platform';
import type { ChatMessage, Tool, ToolCall, Usage } from '@gateway/proto';

type Tokenizer = Pick<typeof import('gpt-tokenizer'), 'encode' | 'decode' | 'setMergeCacheSize'>;
let loaded: Tokenizer | undefined;

/**
 * gpt-tokenizer (o200k ranks), loaded on first use: it holds ~35 MB of heap and ~65 MB of RSS, and a
 * routing process whose upstreams report usage and whose streams end before a checkpoint never needs
 * it. Loaded with `require` (its CommonJS build) so counting stays synchronous; the edge loads the same
 * build, so one `npm start` process holds one copy. The first load blocks the event loop once (~0.3 s).
 * Its merge cache bounded (withBoundedMergeCache: a few MB at most, whatever callers send).
 */
export function tokenizer(): Tokenizer {
  return (loaded ??= withBoundedMergeCache(createRequire(import.meta.url)('gpt-tokenizer') as Tokenizer));
}

/** Special-token text in a prompt is ordinary text to us: count it, never throw on it. */
const encodeOptions = { disallowedSpecial: new Set<string>() };

/** Overheads of the chat format (role markers, separators), as OpenAI documents for its chat models. */
const TOKENS_PER_MESSAGE = 3;
const TOKENS_PER_REPLY = 3;
/** A low-detail image is 85 tokens on OpenAI; without the pixels this is the honest floor. */
const TOKENS_PER_IMAGE = 85;
/**
 * Characters tokenized per text and per call (a prompt's messages, a request's inputs) before the rest is
 * counted by length (chars/4): counting is synchronous, and 128K characters are ~35 ms of the event loop
 * (issue 29: one request must not stall the process; in `npm start` the edge shares it).
 */
export const MAX_TOKENIZED_CHARACTERS = 128 * 1024;
/** Characters encoded per tokenizer call (runs longer than MAX_TOKENIZER_RUN are cut whatever this is). */
const TOKENIZED_SLICE_CHARACTERS = 64 * 1024;

/** What is left of one call's tokenizer budget, shared by the texts it counts. */
export interface TokenizerBudget {
  left: number;
}

export function tokenizerBudget(): TokenizerBudget {
  return { left: MAX_TOKENIZED_CHARACTERS };
}

export function countTextTokens(text: string, budget: TokenizerBudget = tokenizerBudget()): number {
  return countBudgeted(text, budget);
}

function countBudgeted(text: string, budget: TokenizerBudget): number {
  if (text.length === 0) return 0;
  if (text.length > budget.left) {
    budget.left = 0;
    return Math.ceil(text.length / 4);
  }
  budget.left -= text.length;
  // The merge is quadratic in a word's length (one 160,000-letter word: 30 s): long runs are cut first.
  const { encode } = tokenizer();
  if (text.length <= MAX_TOKENIZER_RUN) return encode(text, encodeOptions).length;
  let total = 0;
  for (const slice of tokenizerSlices(text, TOKENIZED_SLICE_CHARACTERS)) total += encode(slice, encodeOptions).length;
  return total;
}

export function countInputTokens(messages: readonly ChatMessage[], tools: readonly Tool[] = []): number {
  const budget = tokenizerBudget();
  const countTextTokens = (text: string) => countBudgeted(text, budget);
  let total = TOKENS_PER_REPLY;
  for (const message of messages) {
    total += TOKENS_PER_MESSAGE + countTextTokens(message.role);
    if (message.name) total += countTextTokens(message.name);
    for (const part of message.content) {
      const value = part.part;
      if (!value) continue;
      if (value.$case === 'text') total += countTextTokens(value.value);
      else if (value.$case === 'image') total += TOKENS_PER_IMAGE;
      else if (value.$case === 'file') total += Math.ceil(value.value.data.length / 4) || TOKENS_PER_IMAGE;
      else if (value.$case === 'audio') total += Math.ceil(value.value.data.length / 1_000) || 1;
    }
    for (const call of message.toolCalls) total += countTextTokens(call.name) + countTextTokens(call.arguments);
  }
  for (const tool of tools) total += countTextTokens(tool.name) + countTextTokens(tool.description) + countTextTokens(tool.parameters);
  return total;
}

export function countOutputTokens(content: string, toolCalls: readonly Pick<ToolCall, 'name' | 'arguments'>[] = [], reasoning = ''): number {
  const budget = tokenizerBudget();
  const countTextTokens = (text: string) => countBudgeted(text, budget);
  let total = countTextTokens(content) + countTextTokens(reasoning);
  for (const call of toolCalls) total += countTextTokens(call.name) + countTextTokens(call.arguments);
  return total;
}

export function emptyUsage(): Usage {
  return {
    inputTokens: 0, cachedInputTokens: 0, outputTokens: 0, reasoningTokens: 0, inputAudioTokens: 0,
    outputAudioTokens: 0, inputAudioMs: 0, outputAudioMs: 0, outputTextTokens: 0, inputTextCharacters: 0,
    outputTextCharacters: 0, outputImageTokens: 0, inputImageTokens: 0, inputTextTokens: 0, estimated: false, cacheWriteTokens: 0,
    providerTotalTokens: undefined,
  };
}

export interface DeliveredOutput {
  content: string;
  toolCalls: readonly Pick<ToolCall, 'name' | 'arguments'>[];
  reasoning: string;
}

/**
 * The usage we bill: the provider's report when it gave one, else our own count (estimated). A report
 * of zero output for delivered content is not believed (field-failures: never bill zero for content),
 * nor one whose output is no more than its reasoning while content or tool calls were delivered (a
 * normalized `completion_tokens: 0` beside `reasoning_tokens`, usage/normalize-usage.ts): the delivered
 * answer is counted on top of the reasoning.
 */
export function meterUsage(
  reported: Usage | undefined,
  messages: readonly ChatMessage[],
  tools: readonly Tool[],
  delivered: DeliveredOutput,
): Usage {
  const deliveredSomething = delivered.content.length > 0 || delivered.toolCalls.length > 0 || delivered.reasoning.length > 0;
  if (reported !== undefined && reported.outputTokens !== 0 && reported.outputTokens <= reported.reasoningTokens
    && (delivered.content.length > 0 || delivered.toolCalls.length > 0)) {
    const usage = reported.inputTokens === 0 ? meterCounted(reported, countInputTokens(messages, tools), 0, deliveredSomething) : { ...reported };
    usage.outputTokens = Math.min(reported.reasoningTokens + countOutputTokens(delivered.content, delivered.toolCalls, ''), 0xffff_ffff);
    usage.estimated = true;
    return usage;
  }
  // The tokenizer costs: count only what the report lacks.
  const inputTokens = !reported || reported.inputTokens === 0 ? countInputTokens(messages, tools) : 0;
  const outputTokens = !reported || (reported.outputTokens === 0 && deliveredSomething)
    ? countOutputTokens(delivered.content, delivered.toolCalls, delivered.reasoning)
    : 0;
  return meterCounted(reported, inputTokens, outputTokens, deliveredSomething);
}

/** meterUsage's rules on counts already made (stream checkpoints count their output piece by piece). */
export function meterCounted(reported: Usage | undefined, inputTokens: number, outputTokens: number, deliveredSomething: boolean): Usage {
  if (!reported) return { ...emptyUsage(), inputTokens, outputTokens, estimated: true };
  const usage = { ...reported };
  if (usage.outputTokens === 0 && deliveredSomething) {
    usage.outputTokens = outputTokens;
    usage.estimated = true;
  }
  if (usage.inputTokens === 0) {
    usage.inputTokens = inputTokens;
    usage.estimated = true;
  }
  return usage;
}
