import type { BackgroundRun, ChatRequest, GetResponseResponse, ResponsesStoreServiceClient, StoredResponse } from '@gateway/proto';
import { ErrorReason, GrpcStatus, GatewayError, type Logger, type PromiseClient } from '@gateway/platform';
import { edgeErrors } from '../../errors.js';
import { echoed } from '../../echoed-value.js';
import type { EventSource, StreamRun } from './background-stream-types.js';
import { ConversationsClient } from './conversations-client.js';

/*
 * The edge's side of stored responses (issue 41 item 6, docs/stored-responses.md): a write-behind queue
 * to the jobs service's ResponsesStore, and the lookups that read through it.
 *
 * A response is put AFTER its answer left (the bytes handed to the socket): never a Postgres write or a
 * gRPC call on the answer's path. Entries gather for `flushDelayMs` (20 ms) and go out as one PutResponses
 * call (at most `batchMaxEntries` entries, `batchMaxChars` characters); a failed call is retried with
 * backoff, the entries kept. Until an entry's put is acknowledged it is served from here, so a
 * continuation or a GET on the same edge right after the answer finds it. Bounded: the characters
 * waiting per account and in all are checked before a storing request is worked on (429 / 503 past
 * them). A clean stop flushes what waits (within the drain bound); a crash loses what had not been
 * acknowledged (at most the bound, usually the last 20 ms of answers): those responses were
 * answered but are not stored.
 */

export interface StoredResponsesLimits {
  /** Largest response stored, its input and its answer's JSON together, in characters (input over it: 400 before work). */
  maxStoredChars: number;
  /** Characters waiting to be stored, over the edge. */
  queueMaxChars: number;
  /** Characters waiting to be stored, per account. */
  accountQueueMaxChars: number;
  /** Most entries in one PutResponses. */
  batchMaxEntries: number;
  /** Most characters in one PutResponses (one larger entry goes alone). */
  batchMaxChars: number;
  /** Bound of one ResponsesStore call. */
  callDeadlineMs: number;
  /**
   * How long entries gather before a write (0: the next event-loop turn). Writes then leave in batches, apart
   * from the answers that follow, instead of one call per answer competing with the next request.
   */
  flushDelayMs: number;
}

export const DEFAULT_STORED_RESPONSES_LIMITS: StoredResponsesLimits = {
  maxStoredChars: 8 * 1024 * 1024,
  queueMaxChars: 256 * 1024 * 1024,
  accountQueueMaxChars: 32 * 1024 * 1024,
  batchMaxEntries: 64,
  batchMaxChars: 8 * 1024 * 1024,
  callDeadlineMs: 10_000,
  flushDelayMs: 20,
};

const RETRY_FIRST_MS = 100;
const RETRY_MOST_MS = 5_000;

/** What a storing request leaves for the queue once its answer is out: the response object (or its JSON) and its input. */
export interface AnsweredResponse {
  accountId: string;
  keyId: string;
  responseId: string;
  /** The input the model was given (a continuation's expanded conversation), as JSON text. */
  inputItemsJson: string;
  /** The response object (a JSON answer) or its JSON text (a stream's terminal event). */
  response: object | string;
  createdAt: number;
  /** A response made in a conversation: the conversation, and the request's own input (JSON) its output follows into it. */
  conversationId?: string;
  conversationInputJson?: string;
}

interface Pending {
  answered: AnsweredResponse;
  /** Estimated until the put serialises the response. */
  chars: number;
  inFlight: boolean;
  /** Resolves once the put was acknowledged (or given up at stop). */
  stored: Promise<void>;
  done: () => void;
}

/** What renders a background response's run into its response object (render-background.ts). */
export type RenderRun = (queued: Record<string, unknown>, run: BackgroundRun) => Record<string, unknown>;

/** A stored response as the lookups answer it. */
export interface StoredConversation {
  response: Record<string, unknown>;
  inputItems: unknown[];
}

function previousNotFound(id: string) {
  return edgeErrors.invalidRequest(`Previous response with id '${echoed(id)}' not found.`, 'body.previous_response_id', 'previous_response_not_found');
}


/** What a response adds to its conversation: the request's own input, then the response's output. */
function conversationItemsJson(inputJson: string, responseJson: string): string {
  const output = (JSON.parse(responseJson) as { output?: unknown }).output;
  return JSON.stringify([...(JSON.parse(inputJson) as unknown[]), ...(Array.isArray(output) ? output : [])]);
}

const keyOf = (accountId: string, responseId: string) => `${accountId}\n${responseId}`;

export class StoredResponses {
  private readonly pending = new Map<string, Pending>();
  /** Keys in put order. */
  private readonly queue: string[] = [];
  private readonly accountChars = new Map<string, number>();
  private totalChars = 0;
  private flushing = false;
  private retryMs = RETRY_FIRST_MS;
  private retryTimer: NodeJS.Timeout | undefined;
  private stopping = false;
  /** Renders a background response's run (set by the edge once its catalog is up; render-background.ts). */
  renderRun: RenderRun = (queued, run) => ({ ...queued, status: run.status });
  /** Streams a background response (set with renderRun; render-background-stream.ts). */
  streamRun: StreamRun = () => Promise.reject(edgeErrors.notFound('This gateway streams no background responses.'));
  /** The records of a background run as the jobs service stores them, replayed then followed (render-background-stream.ts renders them). */
  readonly events: EventSource = (accountId, responseId, fromSeq, requestId, signal, deadlineMs) =>
    this.client.streamResponseEvents({ accountId, responseId, fromSeq }, { requestId, signal, deadlineMs });

  /** The Conversations API's calls to the same store (conversation-routes.ts). */
  readonly conversations: ConversationsClient;

  constructor(
    private readonly client: PromiseClient<ResponsesStoreServiceClient>,
    readonly limits: StoredResponsesLimits,
    private readonly logger: Logger,
  ) {
    this.conversations = new ConversationsClient(client, limits.callDeadlineMs, (queued, run) => this.renderRun(queued, run));
  }

  /** Entries waiting (tests and metrics). */
  get waiting(): number {
    return this.pending.size;
  }

  /**
   * Before a storing request is worked on: its input within the stored bound (400), and room in the
   * queue for it (429 for the account, 503 for the edge). `inputChars`: the input's JSON length.
   */
  checkRoom(accountId: string, inputChars: number): void {
    if (inputChars > this.limits.maxStoredChars) {
      throw edgeErrors.invalidRequest(
        `body.input: the conversation is ${inputChars} characters of JSON, over the ${this.limits.maxStoredChars} a stored response may hold. Send \`store: false\` (and the whole conversation in \`input\`) to have it answered without storing it.`,
        'body.input',
        'stored_response_too_large',
      );
    }
    if ((this.accountChars.get(accountId) ?? 0) + inputChars > this.limits.accountQueueMaxChars) throw edgeErrors.storedResponsesBacklog(1);
    if (this.totalChars + inputChars > this.limits.queueMaxChars || this.stopping) throw edgeErrors.overloaded(1);
  }

  /** Queues an answered response to be stored behind the answer. */
  enqueue(answered: AnsweredResponse): void {
    const key = keyOf(answered.accountId, answered.responseId);
    if (this.pending.has(key)) return;
    const chars = answered.inputItemsJson.length + (typeof answered.response === 'string' ? answered.response.length : answered.inputItemsJson.length);
    let done!: () => void;
    const stored = new Promise<void>((resolve) => (done = resolve));
    this.pending.set(key, { answered, chars, inFlight: false, stored, done });
    this.queue.push(key);
    this.count(answered.accountId, chars);
    this.kick();
  }

  /** The response and its input, from the queue or the store; undefined when unknown to this account (or expired). */
  async find(accountId: string, responseId: string, requestId: string): Promise<StoredConversation | undefined> {
    const waiting = this.pending.get(keyOf(accountId, responseId));
    if (waiting !== undefined) {
      const { answered } = waiting;
      return {
        response: typeof answered.response === 'string' ? (JSON.parse(answered.response) as Record<string, unknown>) : (answered.response as Record<string, unknown>),
        inputItems: JSON.parse(answered.inputItemsJson) as unknown[],
      };
    }
    try {
      const found = await this.client.getResponse({ accountId, responseId }, { requestId, deadlineMs: this.limits.callDeadlineMs });
      return this.conversationFrom(found);
    } catch (error) {
      if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) return undefined;
      throw error;
    }
  }

  private conversationFrom(found: Pick<GetResponseResponse, 'responseJson' | 'inputItemsJson' | 'background'>): StoredConversation {
    const response = JSON.parse(found.responseJson) as Record<string, unknown>;
    return { response: found.background ? this.renderRun(response, found.background) : response, inputItems: JSON.parse(found.inputItemsJson) as unknown[] };
  }

  /**
   * Stores a background response (`queued`) and its request for the jobs service to run. 429 when the
   * account has its most background responses queued or running.
   */
  async createBackground(entry: AnsweredResponse & { response: object }, run: { tier: string; request: ChatRequest; holdCredits: string; requestJson: string; modelId: string }, requestId: string): Promise<void> {
    try {
      await this.client.createBackgroundResponse({
        response: {
          accountId: entry.accountId,
          responseId: entry.responseId,
          keyId: entry.keyId,
          responseJson: JSON.stringify(entry.response),
          inputItemsJson: entry.inputItemsJson,
          createdAt: BigInt(entry.createdAt),
          // In a conversation: the request's own input; its turn goes in once the run completed (conversations-client.ts).
          conversationId: entry.conversationId ?? '',
          conversationItemsJson: entry.conversationId ? (entry.conversationInputJson ?? '[]') : '',
        },
        ...run,
      }, { requestId, deadlineMs: this.limits.callDeadlineMs });
    } catch (error) {
      if (error instanceof GatewayError && error.reason === ErrorReason.ERROR_REASON_RATE_LIMITED) throw edgeErrors.backgroundResponsesLimit(error.message, error.retryAfterSeconds || 5);
      throw error;
    }
  }

  /** Cancels a background response of the account; undefined: unknown to the account. 400 for one that is not a background response. */
  async cancel(accountId: string, responseId: string, requestId: string): Promise<StoredConversation | undefined> {
    await this.settled(accountId, responseId);
    try {
      return this.conversationFrom(await this.client.cancelBackgroundResponse({ accountId, responseId }, { requestId, deadlineMs: this.limits.callDeadlineMs }));
    } catch (error) {
      if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) return undefined;
      throw error;
    }
  }

  /** The conversation a continuation carries on: the previous response's input, then its output. 400 previous_response_not_found. */
  async conversationOf(accountId: string, responseId: string, requestId: string): Promise<unknown[]> {
    const found = await this.find(accountId, responseId, requestId);
    if (found === undefined) throw previousNotFound(responseId);
    const output = Array.isArray(found.response.output) ? (found.response.output as unknown[]) : [];
    return [...found.inputItems, ...output];
  }

  /** Deletes a stored response of the account (one still in the queue once it is stored). False: unknown to the account. */
  async delete(accountId: string, responseId: string, requestId: string): Promise<boolean> {
    await this.settled(accountId, responseId);
    try {
      await this.client.deleteResponse({ accountId, responseId }, { requestId, deadlineMs: this.limits.callDeadlineMs });
      return true;
    } catch (error) {
      if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) return false;
      throw error;
    }
  }

  /** A page of a stored response's input items (ids added by the store); undefined: unknown to the account. */
  async inputItems(
    accountId: string,
    responseId: string,
    page: { after: string; limit: number; ascending: boolean },
    requestId: string,
  ): Promise<{ items: Record<string, unknown>[]; hasMore: boolean } | undefined> {
    await this.settled(accountId, responseId);
    try {
      const found = await this.client.listInputItems({ accountId, responseId, ...page }, { requestId, deadlineMs: this.limits.callDeadlineMs });
      return { items: found.itemsJson.map((item) => JSON.parse(item) as Record<string, unknown>), hasMore: found.hasMore };
    } catch (error) {
      if (error instanceof GatewayError && error.status === GrpcStatus.NOT_FOUND) return undefined;
      throw error;
    }
  }

  /**
   * Waits until a response still in the queue is stored (a DELETE or an input_items page reads the store), at
   * most one call's deadline: a store still unreachable by then is a 503 with Retry-After, not a hung request.
   */
  async settled(accountId: string, responseId: string): Promise<void> {
    const waiting = this.pending.get(keyOf(accountId, responseId));
    if (waiting !== undefined) await this.untilStored([waiting]);
  }

  /**
   * Waits until every response of this conversation still in the queue is stored (their items are then in
   * it), as `settled` does for one response: a turn right after the last reads the conversation whole.
   */
  async settledConversation(accountId: string, conversationId: string): Promise<void> {
    const waiting = [...this.pending.values()].filter((entry) => entry.answered.accountId === accountId && entry.answered.conversationId === conversationId);
    if (waiting.length > 0) await this.untilStored(waiting);
  }

  /** Waits for these queued entries to be stored, at most one call's deadline; past it a 503 with Retry-After. */
  private async untilStored(waiting: readonly Pending[]): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const stored = await Promise.race([
      Promise.all(waiting.map((entry) => entry.stored)).then(() => true),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), this.limits.callDeadlineMs);
      }),
    ]);
    clearTimeout(timer);
    if (!stored) throw edgeErrors.overloaded(1);
  }

  /** Flushes what waits, within `timeoutMs`; what is left is logged as lost (not stored). */
  async stop(timeoutMs: number): Promise<void> {
    this.stopping = true;
    const deadline = Date.now() + timeoutMs;
    while (this.pending.size > 0 && Date.now() < deadline) {
      if (this.retryTimer !== undefined) {
        clearTimeout(this.retryTimer);
        this.retryTimer = undefined;
        this.kick();
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    clearTimeout(this.retryTimer);
    if (this.pending.size > 0) {
      this.logger.error({ lost: this.pending.size }, 'stored responses not written before the stop bound; those responses were answered but are not stored');
      for (const waiting of this.pending.values()) waiting.done();
    }
  }

  private count(accountId: string, chars: number): void {
    this.totalChars += chars;
    const now = (this.accountChars.get(accountId) ?? 0) + chars;
    if (now <= 0) this.accountChars.delete(accountId);
    else this.accountChars.set(accountId, now);
  }

  private kick(): void {
    if (this.flushing || this.retryTimer !== undefined) return;
    this.flushing = true;
    // After a short gathering window (or the next event-loop turn): the answers of that window go out together, after their bytes.
    if (this.limits.flushDelayMs <= 0 || this.stopping) setImmediate(() => void this.flush());
    else setTimeout(() => void this.flush(), this.limits.flushDelayMs).unref();
  }

  private async flush(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const batch = this.nextBatch();
        try {
          await this.client.putResponses({ responses: batch.map((entry) => entry.message) }, { requestId: '', deadlineMs: this.limits.callDeadlineMs });
        } catch (error) {
          for (const entry of batch) entry.pending.inFlight = false;
          this.queue.unshift(...batch.map((entry) => entry.key));
          this.logger.warn({ err: error, waiting: this.pending.size, retry_ms: this.retryMs }, 'storing responses failed; retrying');
          this.retryTimer = setTimeout(() => {
            this.retryTimer = undefined;
            this.kick();
          }, this.retryMs);
          this.retryTimer.unref();
          this.retryMs = Math.min(this.retryMs * 2, RETRY_MOST_MS);
          return;
        }
        this.retryMs = RETRY_FIRST_MS;
        for (const entry of batch) {
          this.pending.delete(entry.key);
          this.count(entry.pending.answered.accountId, -entry.pending.chars);
          entry.pending.done();
        }
      }
    } finally {
      this.flushing = false;
    }
  }

  private nextBatch(): { key: string; pending: Pending; message: StoredResponse }[] {
    const batch: { key: string; pending: Pending; message: StoredResponse }[] = [];
    let chars = 0;
    while (this.queue.length > 0 && batch.length < this.limits.batchMaxEntries) {
      const key = this.queue[0]!;
      const waiting = this.pending.get(key);
      if (waiting === undefined) {
        this.queue.shift();
        continue;
      }
      const message = waiting.answered;
      const responseJson = typeof message.response === 'string' ? message.response : JSON.stringify(message.response);
      const size = responseJson.length + message.inputItemsJson.length;
      if (batch.length > 0 && chars + size > this.limits.batchMaxChars) break;
      this.queue.shift();
      // The exact size from now on (the estimate counted the input twice for a JSON answer).
      this.count(message.accountId, size - waiting.chars);
      waiting.chars = size;
      waiting.inFlight = true;
      chars += size;
      batch.push({
        key,
        pending: waiting,
        message: {
          accountId: message.accountId,
          responseId: message.responseId,
          keyId: message.keyId,
          responseJson,
          inputItemsJson: message.inputItemsJson,
          createdAt: BigInt(message.createdAt),
          conversationId: message.conversationId ?? '',
          conversationItemsJson: message.conversationId ? conversationItemsJson(message.conversationInputJson ?? '[]', responseJson) : '',
        },
      });
    }
    return batch;
  }
}
