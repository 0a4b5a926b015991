import type { ChatRequest, Pricing } from '@gateway/proto';
import { formatCredits, parseCredits } from '@gateway/platform';
import type { CatalogModel } from '../catalog-cache.js';
import { EdgeError } from '../errors.js';
import { MAX_TOKENIZED_CHARACTERS, TokenCounter } from './tokenizer.js';

/**
 * What one request may carry and cost at most, decided at the edge before admission and before any
 * provider is called (issue: a 0.3-credit account sent a 7.5 M-token prompt to a 128k model and went
 * to −3.45). Two decisions, both cheap for an ordinary request:
 *
 * - The model's context window: a prompt that cannot fit is a 400 naming the window. The UTF-8 byte
 *   count of the prompt's text bounds its token count from above (a byte-level BPE token covers at least
 *   one byte), so a prompt whose bytes fit is never tokenized; only a larger one is counted with the
 *   tokenizer, in slices that yield to the event loop and stop as soon as the window is exceeded.
 * - The worst-case cost: prompt bound × the model's input-side prices + the most output the request may
 *   produce (its forwarded max_completion_tokens, else the model's max_output_tokens, else its context
 *   window) × the output-side prices. Admission holds max(0.05, worst case) instead of a flat 0.05, so
 *   the balance and the key's credit limit bound every admitted request's real charge.
 */

/** Spec §8: the reservation of a running paid request, and the least any paid request holds. */
export const MINIMUM_HOLD_PICO = parseCredits('0.05');
/** Chat-format overhead per message (role markers, separators) and per reply, as OpenAI documents it. */
const TOKENS_PER_MESSAGE = 4, TOKENS_PER_REPLY = 3;
/**
 * Generous per-part estimates where the prompt's bytes say nothing about its tokens: an image is at most
 * ~1,600 tokens at any provider we know (OpenAI high detail, Anthropic's 1.15 megapixel cap); audio is
 * charged by duration, ~1 token per 100 bytes of compressed audio is far above any provider's rate.
 */
const TOKENS_PER_IMAGE_BOUND = 2_000, AUDIO_BYTES_PER_TOKEN_BOUND = 100;

export interface PromptMeasure {
  /** Upper bound of the prompt's tokens. */
  tokensUpperBound: number;
  /** Tokens the prompt holds beyond its text (images, audio, inline files, per-message overhead). */
  nonTextTokens: number;
  /** The request carries files still to be fetched (`file_url`): their size is unknown until resolved. */
  unresolvedFiles: boolean;
}

/**
 * Calls `visit` with every text of the prompt that a provider tokenizes (message text and names, tool
 * calls, tool definitions, the response schema) and returns the tokens of everything else.
 */
function walkPrompt(chat: ChatRequest, visit: (text: string) => void): { nonTextTokens: number; unresolvedFiles: boolean } {
  let nonTextTokens = TOKENS_PER_REPLY;
  let unresolvedFiles = false;
  for (const message of chat.messages) {
    nonTextTokens += TOKENS_PER_MESSAGE;
    if (message.name) visit(message.name);
    for (const content of message.content) {
      const part = content.part;
      if (!part) continue;
      switch (part.$case) {
        case 'text':
          visit(part.value);
          break;
        case 'image':
          nonTextTokens += TOKENS_PER_IMAGE_BOUND;
          break;
        case 'audio':
          nonTextTokens += Math.ceil(part.value.data.length / AUDIO_BYTES_PER_TOKEN_BOUND) + 1;
          break;
        case 'file':
          // Inline data: its bytes bound the text a provider can read from it (base64 is longer still).
          if (part.value.data.length > 0) nonTextTokens += part.value.data.length;
          else unresolvedFiles = true;
          break;
        default:
          break;
      }
    }
    for (const call of message.toolCalls) {
      visit(call.name);
      visit(call.arguments);
    }
  }
  for (const tool of chat.tools) {
    visit(tool.name);
    visit(tool.description);
    visit(tool.parameters);
  }
  if (chat.responseFormat?.schema) visit(chat.responseFormat.schema);
  return { nonTextTokens, unresolvedFiles };
}

/** One walk over the canonical request: byte counts only, no tokenizer, no copies of the text. */
export function measurePrompt(chat: ChatRequest): PromptMeasure {
  let textBytes = 0;
  const { nonTextTokens, unresolvedFiles } = walkPrompt(chat, (text) => {
    textBytes += Buffer.byteLength(text, 'utf8');
  });
  return { tokensUpperBound: textBytes + nonTextTokens, nonTextTokens, unresolvedFiles };
}

export function contextLengthExceeded(message: string, param: string): EdgeError {
  return new EdgeError({ status: 400, type: 'invalid_request_error', message, param, code: 'context_length_exceeded' });
}

/**
 * The prompt's byte bound and the output it asks room for fit the model's window (or it has none): the
 * window check needs no tokenizer, and no promise (the usual case; checkContextWindow does the rest).
 */
export function fitsContextWindow(model: CatalogModel, chat: ChatRequest, measure: PromptMeasure): boolean {
  const window = model.model.contextWindow;
  return window === 0 || measure.tokensUpperBound + (chat.maxOutputTokens ?? 0) <= window;
}

/**
 * 400 when the prompt (and the output the request asks room for) cannot fit the model's context window.
 * A model without a window (0) accepts anything. Resolves without tokenizing when the byte bound fits.
 */
export async function checkContextWindow(model: CatalogModel, chat: ChatRequest, measure: PromptMeasure, outputField = 'max_completion_tokens'): Promise<void> {
  if (fitsContextWindow(model, chat, measure)) return;
  const window = model.model.contextWindow;
  const requestedOutput = chat.maxOutputTokens ?? 0;
  // The count stops past the window, so the work is bounded by the window; the budget lets a prompt near
  // a large window be counted by the tokenizer rather than by its bytes (which would refuse it wrongly).
  const promptTokens = await countPromptTokens(chat, measure, window + 1, Math.max(MAX_TOKENIZED_CHARACTERS, 16 * window));
  if (promptTokens > window) {
    throw contextLengthExceeded(
      `This model's context window is ${window} tokens; the prompt has ${promptTokens >= window + 1 ? 'more than ' + window : promptTokens} tokens. Shorten the conversation.`,
      'body.messages',
    );
  }
  if (promptTokens + requestedOutput > window) {
    throw contextLengthExceeded(
      `This model's context window is ${window} tokens; the prompt has ${promptTokens} tokens and ${outputField} asks for ${requestedOutput} more. Lower ${outputField} to at most ${window - promptTokens}.`,
      `body.${outputField}`,
    );
  }
}

/**
 * The prompt's tokens by the tokenizer, counting at most up to `stopAt` (the answer is then `stopAt`:
 * "at least this many"). The tokenizer is loaded on first use only: an ordinary request never needs it.
 */
async function countPromptTokens(chat: ChatRequest, measure: PromptMeasure, stopAt: number, budget = MAX_TOKENIZED_CHARACTERS): Promise<number> {
  const texts: string[] = [];
  walkPrompt(chat, (text) => {
    if (text.length > 0) texts.push(text);
  });
  // One budget for the whole prompt, long words cut, yields between slices (inference/tokenizer.ts).
  const counter = new TokenCounter(budget);
  let total = measure.nonTextTokens;
  for (const text of texts) {
    total += await counter.count(text, stopAt - total);
    if (total >= stopAt) return stopAt;
  }
  return total;
}

/**
 * The prompt's tokens as the gateway counts them (messages `count_tokens`): the tokenizer over every
 * text a provider reads, with the same per-message overhead and the same bounds for images, audio and
 * inline files as the context-window check. Files still to be fetched count nothing. Text beyond the
 * tokenizer budget (MAX_TOKENIZED_CHARACTERS) counts as its UTF-8 bytes: an upper bound, free work bounded.
 */
export function countRequestTokens(chat: ChatRequest): Promise<number> {
  return countPromptTokens(chat, measurePrompt(chat), Number.POSITIVE_INFINITY);
}

/** A model's unit prices summed per direction, in pico-credits; cached per Pricing object (one per catalog version). */
interface DirectionalPrices {
  inputPico: bigint;
  outputPico: bigint;
}

const INPUT_PRICES: ReadonlyArray<keyof Pricing> = [
  'perInputToken', 'perCachedInputToken', 'perCacheWriteInputToken', 'perInputTextToken', 'perInputImageToken', 'perInputAudioToken', 'perInputTextCharacter', 'perToken',
];
const OUTPUT_PRICES: ReadonlyArray<keyof Pricing> = [
  'perOutputToken', 'perOutputTextToken', 'perOutputImageToken', 'perOutputAudioToken', 'perOutputTextCharacter', 'perToken',
];
/** A generated token is at most this many characters, for models priced per output character. */
const CHARACTERS_PER_TOKEN_BOUND = 64n;

const directionalPriceCache = new WeakMap<Pricing, DirectionalPrices | null>();

/**
 * Each direction's prices summed (an upper bound: the ledger charges every count at most at each price
 * once). A per-character output price counts a token as many characters; an input character is at most
 * one byte of the bound already. null: a price is unreadable, the cost cannot be bounded.
 */
function directionalPrices(pricing: Pricing): DirectionalPrices | null {
  const cached = directionalPriceCache.get(pricing);
  if (cached !== undefined) return cached;
  let prices: DirectionalPrices | null;
  try {
    const sum = (keys: ReadonlyArray<keyof Pricing>, perCharacter: bigint) => {
      let total = 0n;
      for (const key of keys) {
        const text = pricing[key];
        if (text === undefined || text === '') continue;
        const pico = parseCredits(text);
        if (pico > 0n) total += key === 'perOutputTextCharacter' ? pico * perCharacter : pico;
      }
      return total;
    };
    prices = { inputPico: sum(INPUT_PRICES, 1n), outputPico: sum(OUTPUT_PRICES, CHARACTERS_PER_TOKEN_BOUND) };
  } catch {
    prices = null;
  }
  directionalPriceCache.set(pricing, prices);
  return prices;
}

export interface CostBound {
  /** What admission holds for the request: max(0.05, worst case), pico-credits. */
  holdPico: bigint;
  /** The output tokens the bound assumed (for the 402's message). */
  outputTokens: number;
  /** The prompt's part of the worst case, pico-credits. */
  promptPico: bigint;
  /** Pico-credits per output token at the model's prices. */
  outputUnitPico: bigint;
}

/**
 * The request's worst-case cost. A prompt with files still to fetch is bounded by the context window
 * (its real size is only known after admission). A model with neither max_output_tokens nor a context
 * window, or with an unreadable price, has no bound: it holds the flat 0.05 as before.
 */
export function costBound(model: CatalogModel, chat: ChatRequest, measure: PromptMeasure): CostBound {
  const window = model.model.contextWindow;
  const prices = model.model.pricing ? directionalPrices(model.model.pricing) : null;
  const modelCap = model.model.maxOutputTokens;
  let outputTokens = chat.maxOutputTokens ?? modelCap ?? window;
  if (modelCap !== undefined && outputTokens > modelCap) outputTokens = modelCap;
  if (!model.paid || prices === null || outputTokens === 0) {
    return { holdPico: model.paid ? MINIMUM_HOLD_PICO : 0n, outputTokens, promptPico: 0n, outputUnitPico: prices?.outputPico ?? 0n };
  }
  let promptTokens = measure.tokensUpperBound;
  if (window > 0 && (measure.unresolvedFiles || promptTokens > window)) promptTokens = window;
  const promptPico = BigInt(promptTokens) * prices.inputPico;
  // `n` choices: the output bound holds per choice, and every choice's tokens are charged.
  const choices = chat.n !== undefined && chat.n > 1 ? chat.n : 1;
  if (choices > 1) outputTokens *= choices;
  const worstPico = promptPico + BigInt(outputTokens) * prices.outputPico;
  return { holdPico: worstPico > MINIMUM_HOLD_PICO ? worstPico : MINIMUM_HOLD_PICO, outputTokens, promptPico, outputUnitPico: prices.outputPico };
}

/**
 * Added to a 402 when the request held more than the flat 0.05: says what the hold was made of, so a
 * client can lower max_completion_tokens and succeed.
 */
export function worstCaseHint(bound: CostBound, outputField = 'max_completion_tokens'): string {
  return ` This request may cost up to ${formatCredits(bound.holdPico)} credits (its prompt and up to ${bound.outputTokens} output tokens), ` +
    `and that much must be available when it starts: lower ${outputField} to need less.`;
}
