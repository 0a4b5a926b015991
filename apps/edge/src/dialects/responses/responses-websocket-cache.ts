import { edgeErrors } from '../../errors.js';
import { echoed } from '../../echoed-value.js';

/*
 * The connection-local memory of a responses WebSocket (WebSocket mode of the Open Responses spec):
 * what lets a `response.create` name a `previous_response_id` although the gateway stores no
 * responses (`store` is never honoured). It holds only what this connection produced, and only the
 * newest of it: at most `maxResponses` responses and `maxChars` characters of JSON, the oldest dropped
 * first. An entry is the whole conversation up to and including that response (the input items sent,
 * those of the responses it continued, and its output items), so a continuation is the entry's items
 * followed by the new input.
 */

export interface ConversationCacheLimits {
  /** Most responses remembered per connection. */
  maxResponses: number;
  /** Most characters of JSON remembered per connection (each entry counts its whole conversation). */
  maxChars: number;
}

interface Entry {
  items: readonly unknown[];
  chars: number;
}

/** `previous_response_not_found`, as the Open Responses WebSocket tests and OpenAI's API name it. */
export function previousResponseNotFound(id: string) {
  return edgeErrors.invalidRequest(
    `body.previous_response_id: response '${echoed(id)}' is not known on this connection (the gateway stores no responses; a WebSocket remembers only the last responses it produced itself). Send the whole conversation in \`input\`.`,
    'previous_response_id',
    'previous_response_not_found',
  );
}

export class ConversationCache {
  private readonly entries = new Map<string, Entry>();
  private chars = 0;

  constructor(private readonly limits: ConversationCacheLimits) {}

  get size(): number {
    return this.entries.size;
  }

  get totalChars(): number {
    return this.chars;
  }

  has(responseId: string): boolean {
    return this.entries.has(responseId);
  }

  /**
   * The input of a continuation: the remembered conversation of `previousId`, then `input` (a string
   * is one user message). Unknown: previous_response_not_found. `inputChars` is what the new input
   * adds (the message's length bounds it); returned with the items for `remember`.
   */
  continuation(previousId: string, input: unknown, inputChars: number): { items: unknown[]; chars: number } {
    const entry = this.entries.get(previousId);
    if (entry === undefined) throw previousResponseNotFound(previousId);
    return { items: [...entry.items, ...inputItems(input)], chars: entry.chars + inputChars };
  }

  /**
   * Remembers a response's whole conversation (its input items then its output items; for an in-band
   * compaction, the compacted window). The oldest entries go first past either bound; an entry over
   * the character bound on its own is not kept.
   */
  remember(responseId: string, input: readonly unknown[], output: readonly unknown[], chars: number): void {
    this.forget(responseId);
    if (chars > this.limits.maxChars) return;
    this.entries.set(responseId, { items: [...input, ...output], chars });
    this.chars += chars;
    for (const [id, entry] of this.entries) {
      if (this.entries.size <= this.limits.maxResponses && this.chars <= this.limits.maxChars) break;
      this.entries.delete(id);
      this.chars -= entry.chars;
    }
  }

  /** Drops a response (a continuation of it failed: OpenAI evicts it, and so does the gateway). */
  forget(responseId: string): void {
    const entry = this.entries.get(responseId);
    if (entry === undefined) return;
    this.entries.delete(responseId);
    this.chars -= entry.chars;
  }

  clear(): void {
    this.entries.clear();
    this.chars = 0;
  }
}

/** A request's `input` as items: a string is one user message; an array is itself; anything else is left for the schema to refuse. */
export function inputItems(input: unknown): unknown[] {
  if (typeof input === 'string') return [{ type: 'message', role: 'user', content: input }];
  if (Array.isArray(input)) return input;
  return input === undefined || input === null ? [] : [input];
}
