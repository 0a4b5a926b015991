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
 *
 * Every connection of an edge also draws on one ConversationBudget: a bound on the characters all
 * connections hold together, so many sockets (each under its own bound) cannot fill the heap. Past it
 * the oldest entry of any connection goes first; a continuation of it is then previous_response_not_found,
 * as for any response the connection no longer remembers.
 */

export interface ConversationCacheLimits {
  /** Most responses remembered per connection. */
  maxResponses: number;
  /** Most characters of JSON remembered per connection (each entry counts its whole conversation). */
  maxChars: number;
}

interface Entry {
  id: string;
  items: readonly unknown[];
  chars: number;
}

/** The characters every connection's cache holds together, with its entries oldest first across connections. */
export class ConversationBudget {
  /** Insertion order is age: the first is the oldest of any connection. */
  private readonly order = new Map<Entry, ConversationCache>();
  private chars = 0;

  constructor(readonly maxChars: number) {}

  get totalChars(): number {
    return this.chars;
  }

  get entries(): number {
    return this.order.size;
  }

  /** Counts a new entry, then drops the oldest entries (of whichever connection) until the total is within the bound. */
  add(entry: Entry, owner: ConversationCache): void {
    this.order.set(entry, owner);
    this.chars += entry.chars;
    for (const [oldest, holder] of this.order) {
      if (this.chars <= this.maxChars) break;
      holder.evicted(oldest);
    }
  }

  remove(entry: Entry): void {
    if (this.order.delete(entry)) this.chars -= entry.chars;
  }
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

  /** `budget`: the edge's bound across connections (absent: this connection's own bounds only). */
  constructor(
    private readonly limits: ConversationCacheLimits,
    private readonly budget?: ConversationBudget,
  ) {}

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
    if (chars > this.limits.maxChars || (this.budget !== undefined && chars > this.budget.maxChars)) return;
    const added: Entry = { id: responseId, items: [...input, ...output], chars };
    this.entries.set(responseId, added);
    this.chars += chars;
    for (const entry of this.entries.values()) {
      if (this.entries.size <= this.limits.maxResponses && this.chars <= this.limits.maxChars) break;
      this.evicted(entry);
    }
    this.budget?.add(added, this);
  }

  /** Drops an entry (this connection's bound, or the budget's across connections). */
  evicted(entry: Entry): void {
    this.entries.delete(entry.id);
    this.chars -= entry.chars;
    this.budget?.remove(entry);
  }

  /** Drops a response (a continuation of it failed: OpenAI evicts it, and so does the gateway). */
  forget(responseId: string): void {
    const entry = this.entries.get(responseId);
    if (entry !== undefined) this.evicted(entry);
  }

  clear(): void {
    for (const entry of this.entries.values()) this.budget?.remove(entry);
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
