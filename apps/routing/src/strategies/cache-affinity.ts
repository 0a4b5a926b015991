import { createHash, type Hash } from 'node:crypto';
import type { ChatMessage, ChatRequest, ContentPart } from '@gateway/proto';

/** Most affinity entries one routing replica remembers; beyond it the least recently used is forgotten. */
export const MAX_AFFINITY_ENTRIES = 100_000;

/**
 * Prompt-cache affinity: which provider served the last request of a cacheable prefix, so the next one
 * goes there while it stays healthy and finds its prompt cache warm. A prefix is named by the account,
 * the model and either the client's `prompt_cache_key` or a hash of the content up to the last
 * `cache_control` breakpoint. Per routing replica, in memory, bounded (LRU): a Map kept in use order,
 * so a lookup, a pin and an eviction are each O(1).
 */
export class CacheAffinity {
  private readonly pins = new Map<string, string>();

  constructor(private readonly maxEntries = MAX_AFFINITY_ENTRIES) {}

  /** The provider pinned for this prefix, if any (refreshes its place in the LRU order). */
  pinned(key: string): string | undefined {
    const providerId = this.pins.get(key);
    if (providerId === undefined) return undefined;
    this.pins.delete(key);
    this.pins.set(key, providerId);
    return providerId;
  }

  /** The provider that just served the prefix: the next request of it goes there first. */
  served(key: string, providerId: string): void {
    this.pins.delete(key);
    this.pins.set(key, providerId);
    if (this.pins.size > this.maxEntries) {
      const oldest = this.pins.keys().next();
      if (!oldest.done) this.pins.delete(oldest.value);
    }
  }

  get size(): number {
    return this.pins.size;
  }
}

/** A provider's rendezvous score for a key: the highest healthy score wins, the same on every replica. */
export function rendezvousScore(key: string, providerId: string): number {
  return createHash('sha256').update(key).update('\0').update(providerId).digest().readUInt32BE(0);
}

/**
 * Puts the request's affine provider first in `ordered` (in place), the others keeping the strategy's
 * order behind it: the provider pinned for the key while its circuit is closed; without a usable pin,
 * the healthy provider the key hashes to (rendezvous), so every routing replica places a new key on the
 * same provider without sharing state. If the first one fails, the request fails over as usual and the
 * provider that serves it is pinned instead.
 */
export function preferAffine<Offer extends { offer: { providerId: string } }>(ordered: Offer[], key: string, affinity: CacheAffinity, circuitOpen: (providerId: string) => boolean): void {
  let chosen = -1;
  const pinned = affinity.pinned(key);
  if (pinned !== undefined && !circuitOpen(pinned)) chosen = ordered.findIndex((candidate) => candidate.offer.providerId === pinned);
  if (chosen < 0) {
    let best = -1;
    for (let index = 0; index < ordered.length; index++) {
      const providerId = ordered[index]!.offer.providerId;
      if (circuitOpen(providerId)) continue;
      const score = rendezvousScore(key, providerId);
      if (score > best) { best = score; chosen = index; }
    }
  }
  if (chosen <= 0) return;
  const [first] = ordered.splice(chosen, 1);
  ordered.unshift(first!);
}

/**
 * The affinity key of a chat request, or undefined when it has neither a `prompt_cache_key` nor a
 * `cache_control` breakpoint (a plain request: nothing is hashed for it). The key is a digest, so an
 * entry's size does not depend on the client's key or prompt.
 */
export function affinityKeyOf(request: ChatRequest): string | undefined {
  const account = request.context?.accountId ?? '';
  if (request.promptCacheKey) {
    return createHash('sha256').update('key\0').update(account).update('\0').update(request.modelId).update('\0').update(request.promptCacheKey).digest('base64');
  }
  const end = lastBreakpoint(request);
  if (end === undefined) return undefined;
  const hash = createHash('sha256').update('prefix\0').update(account).update('\0').update(request.modelId).update('\0');
  // Tools come first in a cached prefix (Anthropic's order: tools, system, messages).
  for (const tool of request.tools) hash.update('tool\0').update(tool.name).update('\0').update(tool.description).update('\0').update(tool.parameters).update('\0');
  if (end.message < 0) return hash.digest('base64');
  for (let index = 0; index < end.message; index++) hashMessage(hash, request.messages[index]!, Number.POSITIVE_INFINITY);
  hashMessage(hash, request.messages[end.message]!, end.part);
  return hash.digest('base64');
}

/** Where the cacheable prefix ends: the last part with a breakpoint (message -1: only a tool has one). */
function lastBreakpoint(request: ChatRequest): { message: number; part: number } | undefined {
  for (let message = request.messages.length - 1; message >= 0; message--) {
    const content = request.messages[message]!.content;
    for (let part = content.length - 1; part >= 0; part--) if (content[part]!.cacheControl) return { message, part };
  }
  for (const tool of request.tools) if (tool.cacheControl) return { message: -1, part: -1 };
  return undefined;
}

/** A message's role, parts up to `lastPart`, and (when whole) its tool calls and reasoning. */
function hashMessage(hash: Hash, message: ChatMessage, lastPart: number): void {
  hash.update('message\0').update(message.role).update('\0').update(message.toolCallId).update('\0');
  const whole = lastPart >= message.content.length - 1;
  for (const reasoning of message.reasoning) hash.update('reasoning\0').update(reasoning.text).update(reasoning.signature).update(reasoning.encryptedData).update('\0');
  for (let index = 0; index < message.content.length && index <= lastPart; index++) hashPart(hash, message.content[index]!);
  if (whole) for (const call of message.toolCalls) hash.update('call\0').update(call.id).update('\0').update(call.name).update('\0').update(call.arguments).update('\0');
}

/** Bytes of a large inline datum (file, audio, data: URL) hashed at each end, beside its length. */
const SAMPLE_BYTES = 4_096;

/**
 * A large inline datum by its length and both ends: a 20 MB PDF costs 8 KB of hashing, not 20 MB. Two
 * different files alike in length and at both ends would share a key: at worst one request is routed
 * to the other's provider, which only loses a cache hit.
 */
function hashSampled(hash: Hash, data: Uint8Array | string): void {
  hash.update(String(data.length)).update('\0');
  if (data.length <= SAMPLE_BYTES * 2) { hash.update(data); return; }
  hash.update(data.slice(0, SAMPLE_BYTES)).update(data.slice(data.length - SAMPLE_BYTES));
}

function hashPart(hash: Hash, part: ContentPart): void {
  const value = part.part;
  switch (value?.$case) {
    case 'text':
      hash.update('text\0').update(value.value);
      break;
    case 'image':
      hash.update('image\0');
      hashSampled(hash, value.value.url);
      break;
    case 'file':
      hash.update('file\0').update(value.value.filename).update('\0').update(value.value.url).update('\0');
      hashSampled(hash, value.value.data);
      break;
    case 'audio':
      hash.update('audio\0');
      hashSampled(hash, value.value.data);
      break;
    default:
      hash.update('empty');
  }
  hash.update('\0');
}
