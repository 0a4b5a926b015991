import type { CacheControl, ChatMessage, ContentPart } from '@gateway/proto';
import { z } from 'zod';

/**
 * A prompt-cache breakpoint as every dialect spells it: `cache_control: {type: "ephemeral", ttl?: "5m" | "1h"}`
 * (Anthropic's block field, which OpenRouter takes on chat-completions content parts too). It is not a
 * parameter a model may lack: it rides on the canonical part, and an adapter whose provider has no prompt
 * caching simply never writes it (nothing is refused or reported as dropped).
 */
export const cacheControlSchema = z.object({
  type: z.literal('ephemeral', { error: "cache_control.type must be 'ephemeral'" }),
  ttl: z.enum(['5m', '1h'], { error: "cache_control.ttl must be '5m' or '1h'" }).nullish(),
});
export type CacheControlInput = z.infer<typeof cacheControlSchema>;

export function cacheControlOf(input: CacheControlInput): CacheControl {
  return { type: input.type, ttl: input.ttl ?? '' };
}

/** The canonical mark of an optional client field (undefined when absent). */
export function optionalCacheControl(input: CacheControlInput | null | undefined): CacheControl | undefined {
  return input ? cacheControlOf(input) : undefined;
}

/**
 * A client content part converted, with the breakpoint the client part carries (chat's content blocks and the
 * responses dialect's input parts spell it alike; a refusal part carries none).
 */
export function withPartCacheControl(converted: ContentPart, part: { type: string; cache_control?: CacheControlInput | null }): ContentPart {
  if (part.type !== 'refusal' && part.cache_control) converted.cacheControl = cacheControlOf(part.cache_control);
  return converted;
}

/**
 * Top-level `cache_control` (automatic caching): the last block of the conversation ends the cacheable
 * prefix, unless the client already marked that block itself.
 */
export function markLastBlock(messages: ChatMessage[], cacheControl: CacheControl): void {
  for (let index = messages.length - 1; index >= 0; index--) {
    const content = messages[index]!.content;
    if (content.length === 0) continue;
    const last = content[content.length - 1]!;
    if (!last.cacheControl) last.cacheControl = cacheControl;
    return;
  }
}
