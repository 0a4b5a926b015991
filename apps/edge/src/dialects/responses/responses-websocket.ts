import { STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocket, WebSocketServer, type RawData } from 'ws';
import { Cancellation, newRequestId, parseCredits } from '@gateway/platform';
import type { VerifiedApiKey } from '../../inference/auth-cache.js';
import type { EdgeContext } from '../../context.js';
import { presentedApiKey } from '../../inference/credentials.js';
import { boundedMessage, boundedParam, edgeErrors, renderErrorBody, toApiError, type ApiError } from '../../errors.js';
import { ClientGoneError, parseJsonText } from '../../http.js';
import { runInference, type AnswerSink } from '../../inference/pipeline.js';
import { parseStrategyHeader, STRATEGY_HEADER, type RoutingStrategy } from '../../inference/strategy.js';
import { resolveModel } from '../../inference/model-resolution.js';
import { compactedWindow, compactionTriggered } from './compaction.js';
import { ConversationBudget, ConversationCache, inputItems, type ConversationCacheLimits } from './responses-websocket-cache.js';
import { responsesDialect } from './responses-dialect.js';
import type { ResponsesRequest } from './responses-schema.js';
import { ResponsesStreamWriter } from './responses-stream-writer.js';

/*
 * WebSocket mode of the responses dialect (Open Responses; OpenAI's "WebSocket mode"): `GET
 * /v1/responses` upgraded, then each `response.create` message (the body of POST /v1/responses plus
 * `type`, without `stream`) is one response, answered with the events the SSE stream carries, one
 * JSON message per event. Only the transport is new: every response.create runs the one inference
 * pipeline (runInference) as its own request, with its own request id, admission, settlement and
 * overload place, exactly as an HTTP request would.
 *
 * - The key is verified at the upgrade (a refusal is the HTTP answer of the upgrade, 401 before any
 *   socket), and again through the key cache at each response.create, so a revoked key stops there.
 *   At the upgrade, too: a key that cannot pay is a 402, and one more socket than its key's or its
 *   account's bound on this edge a 429 websocket_limit_reached.
 * - What the sockets remember for previous_response_id shares one budget across the edge (oldest out first).
 * - Responses run one at a time, in the order asked: a response.create arriving while one runs waits
 *   (at most `maxQueued`; more closes the socket with 1008).
 * - A `previous_response_id` is looked up in the connection's own cache (responses-websocket-cache.ts);
 *   unknown, it is an `error` event with code previous_response_not_found. A continuation that fails
 *   evicts the response it continued.
 * - `generate: false` (Codex's warm-up) generates nothing: the key, the body and the model are checked as
 *   for a response, then the answer is a response with no output and zero usage (created, in_progress,
 *   completed), at once. No provider is called, nothing is held or charged, but it takes a slot of the
 *   key's rate window (admitted as a free request of its model); the connection remembers its
 *   input, so a `previous_response_id` naming it carries that input into the next response.
 * - A failure before the response started is one `error` event in the WebSocket envelope
 *   `{type:'error', status, error:{type, code, message, param}}`; after it started, the stream's own
 *   `response.failed` and `error` events, as over SSE.
 */

export interface ResponsesWebSocketLimits extends ConversationCacheLimits {
  /** Largest message a client may send (larger: closed with 1009). Default: the HTTP body limit. */
  maxMessageBytes: number;
  /** A connection with no response running and no message for this long is closed (1000). */
  idleTimeoutMs: number;
  /** A connection older than this takes no more responses: `websocket_connection_limit_reached`, then closed (1000). */
  maxConnectionMs: number;
  /** Most response.create messages waiting behind the running one. */
  maxQueued: number;
  /** Most characters of JSON all connections of this edge remember together (the oldest of any connection goes first). */
  maxCachedCharsTotal: number;
  /** Most sockets open at once per API key on this edge (past it the upgrade is a 429 websocket_limit_reached). */
  maxSocketsPerKey: number;
  /** Most sockets open at once per account on this edge, over all its keys. */
  maxSocketsPerAccount: number;
}

export const DEFAULT_RESPONSES_WEBSOCKET_LIMITS: Omit<ResponsesWebSocketLimits, 'maxMessageBytes'> = {
  idleTimeoutMs: 10 * 60_000,
  maxConnectionMs: 60 * 60_000,
  maxQueued: 8,
  maxResponses: 8,
  maxChars: 16 * 1024 * 1024,
  // A character may take two bytes of heap and parsed items more: 64 Mi characters stays well inside a default heap.
  maxCachedCharsTotal: 64 * 1024 * 1024,
  maxSocketsPerKey: 16,
  maxSocketsPerAccount: 64,
};

/** Where a turn's place in flight is taken and given back (the edge's RequestTracker). */
export interface TurnAdmission {
  admitTurn(bodyBytes: number): Error | undefined;
  leaveTurn(bodyBytes: number): void;
  readonly draining: boolean;
}

const PATH = '/v1/responses';
/** A turn's writes wait for the socket once this much is buffered. */
const HIGH_WATER_BYTES = 1024 * 1024;
const GOING_AWAY = 1001;

/** The WebSocket error envelope of a failure before a response started. */
export function errorEvent(apiError: ApiError): string {
  return JSON.stringify({
    type: 'error',
    status: apiError.status,
    error: { type: apiError.type, code: apiError.code ?? apiError.type, message: boundedMessage(apiError), param: boundedParam(apiError) ?? null },
  });
}

/** The upgrade endpoint: one per edge, given the HTTP server's `upgrade` events. */
export class ResponsesWebSocketServer {
  private readonly server: WebSocketServer;
  private readonly connections = new Set<Connection>();
  private readonly limits: ResponsesWebSocketLimits;
  /** What every connection's cache holds together. */
  readonly cacheBudget: ConversationBudget;
  /** Open sockets per key id and per account id (counted from the upgrade to the close). */
  private readonly socketsPerKey = new Map<string, number>();
  private readonly socketsPerAccount = new Map<string, number>();
  private draining = false;

  constructor(
    private readonly context: EdgeContext,
    private readonly admission: TurnAdmission,
    limits: Partial<ResponsesWebSocketLimits> = {},
  ) {
    this.limits = { ...DEFAULT_RESPONSES_WEBSOCKET_LIMITS, maxMessageBytes: context.bodyLimits.maxBytes, ...limits };
    this.cacheBudget = new ConversationBudget(this.limits.maxCachedCharsTotal);
    this.server = new WebSocketServer({ noServer: true, maxPayload: this.limits.maxMessageBytes, perMessageDeflate: false, clientTracking: false });
  }

  get openConnections(): number {
    return this.connections.size;
  }

  /** The HTTP server's `upgrade` listener. Every refusal is an HTTP answer in the OpenAI envelope. */
  readonly handleUpgrade = (request: IncomingMessage, socket: Duplex, head: Buffer): void => {
    socket.on('error', () => socket.destroy());
    const requestId = newRequestId();
    const url = request.url ?? '';
    const query = url.indexOf('?');
    const path = query < 0 ? url : url.slice(0, query);
    if (path !== PATH || request.method !== 'GET' || (request.headers.upgrade ?? '').toLowerCase() !== 'websocket') {
      refuse(socket, edgeErrors.routeNotFound(request.method ?? 'GET', path), requestId);
      return;
    }
    if (this.draining || this.admission.draining) {
      refuse(socket, edgeErrors.overloaded(1), requestId);
      return;
    }
    let credential: string | undefined;
    let headerStrategy: RoutingStrategy | undefined;
    try {
      credential = presentedApiKey(request);
      if (credential === undefined) throw edgeErrors.missingApiKey();
      headerStrategy = parseStrategyHeader(request.headers[STRATEGY_HEADER]);
    } catch (error) {
      refuse(socket, error, requestId);
      return;
    }
    const presented = credential;
    this.context.apiKeys.verify(presented, requestId).then(
      (key) => {
        // A key already at its bound costs no ledger call.
        const full = this.socketsFull(key);
        if (full !== undefined) throw full;
        return refuseUnpayable(this.context, key, requestId).then(() => key);
      },
    ).then(
      (key) => {
        if (socket.destroyed) return;
        if (this.draining) {
          refuse(socket, edgeErrors.overloaded(1), requestId);
          return;
        }
        // Counted per key and per account before any socket exists, so no caller holds more than its share of
        // sockets (and of their memory). Checked again here: other upgrades of the key may have opened meanwhile.
        const full = this.socketsFull(key);
        if (full !== undefined) {
          refuse(socket, full, requestId);
          return;
        }
        // ws completes the handshake and calls back synchronously (no verifyClient), so the check above still holds here.
        this.server.handleUpgrade(request, socket, head, (ws) => {
          // The key was verified here; each response.create asks the key cache again (a revoked key stops at the next one).
          const { keyId, accountId } = key;
          countUp(this.socketsPerKey, keyId);
          countUp(this.socketsPerAccount, accountId);
          const connection = new Connection(this.context, this.admission, this.limits, this.cacheBudget, ws, presented, headerStrategy, () => {
            this.connections.delete(connection);
            countDown(this.socketsPerKey, keyId);
            countDown(this.socketsPerAccount, accountId);
          });
          this.connections.add(connection);
        });
      },
      (error: unknown) => refuse(socket, error, requestId),
    );
  };

  /** The refusal of one more socket for this key, when it or its account is at its bound. */
  private socketsFull(key: VerifiedApiKey): Error | undefined {
    if ((this.socketsPerKey.get(key.keyId) ?? 0) >= this.limits.maxSocketsPerKey) return edgeErrors.tooManyWebSockets('key', this.limits.maxSocketsPerKey);
    if ((this.socketsPerAccount.get(key.accountId) ?? 0) >= this.limits.maxSocketsPerAccount) return edgeErrors.tooManyWebSockets('account', this.limits.maxSocketsPerAccount);
    return undefined;
  }

  /**
   * The edge's drain: no more upgrades; idle sockets close now (1001), a socket with a response
   * running closes once it ended; past `timeoutMs` every socket is closed (1001), cutting its response
   * (settled as a client that left). Resolves when every socket is closed.
   */
  async drain(timeoutMs: number): Promise<void> {
    this.draining = true;
    for (const connection of this.connections) connection.drain();
    if (this.connections.size === 0) return;
    const closed = Promise.all([...this.connections].map((connection) => connection.closed));
    let timer: NodeJS.Timeout | undefined;
    const cut = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    await Promise.race([closed, cut]);
    clearTimeout(timer);
    for (const connection of this.connections) connection.cut();
    await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 1_000).unref())]);
    for (const connection of this.connections) connection.terminate();
  }
}

/**
 * Before a socket opens: a key that cannot pay for anything is refused (402), so it cannot hold sockets
 * and their memory on warm-ups alone. One GetBalance (and a GetKeyUsage when the key has a credit limit),
 * once per socket. Each paid turn is still admitted on its own, as an HTTP request is.
 */
async function refuseUnpayable(context: EdgeContext, key: VerifiedApiKey, requestId: string): Promise<void> {
  const options = { requestId, deadlineMs: 5_000 };
  const [balance, usage] = await Promise.all([
    context.ledger.getBalance({ accountId: key.accountId }, options),
    key.creditLimit === undefined ? undefined : context.ledger.getKeyUsage({ accountId: key.accountId, keyIds: [key.keyId] }, options),
  ]);
  if (parseCredits(balance.available || balance.balance || '0') <= 0n) {
    throw edgeErrors.cannotPay('insufficient_quota', 'This account has no credits available; top it up before opening a responses WebSocket.');
  }
  if (key.creditLimit === undefined) return;
  const spent = usage?.usage.find((entry) => entry.keyId === key.keyId);
  const used =
    key.limitReset === 'daily' ? spent?.creditsDaily : key.limitReset === 'weekly' ? spent?.creditsWeekly : key.limitReset === 'monthly' ? spent?.creditsMonthly : spent?.credits;
  if (parseCredits(used || '0') >= parseCredits(key.creditLimit)) {
    throw edgeErrors.cannotPay('key_limit_exceeded', `This API key has used its credit limit of ${key.creditLimit}; raise the limit or use another key before opening a responses WebSocket.`);
  }
}

function countUp(counts: Map<string, number>, id: string): void {
  counts.set(id, (counts.get(id) ?? 0) + 1);
}

function countDown(counts: Map<string, number>, id: string): void {
  const left = (counts.get(id) ?? 1) - 1;
  if (left <= 0) counts.delete(id);
  else counts.set(id, left);
}

/** A refusal of the upgrade: an HTTP answer on the raw socket, then closed. */
function refuse(socket: Duplex, error: unknown, requestId: string): void {
  if (socket.destroyed) return;
  const apiError = toApiError(error);
  const body = JSON.stringify(renderErrorBody(apiError, 'chat', requestId));
  const headers = [
    `HTTP/1.1 ${apiError.status} ${STATUS_CODES[apiError.status] ?? 'Error'}`,
    'content-type: application/json; charset=utf-8',
    `content-length: ${Buffer.byteLength(body)}`,
    `x-gateway-request-id: ${requestId}`,
    ...(apiError.retryAfterSeconds !== undefined ? [`retry-after: ${apiError.retryAfterSeconds}`] : []),
    'connection: close',
  ];
  socket.end(`${headers.join('\r\n')}\r\n\r\n${body}`);
}

/** One client's socket: its queue of response.create messages, its cache, its timers. */
class Connection {
  private readonly queue: string[] = [];
  private readonly cache: ConversationCache;
  private running: Turn | undefined;
  private draining = false;
  private expired = false;
  private readonly idleTimer: NodeJS.Timeout;
  private readonly ageTimer: NodeJS.Timeout;
  readonly closed: Promise<void>;

  constructor(
    private readonly context: EdgeContext,
    private readonly admission: TurnAdmission,
    private readonly limits: ResponsesWebSocketLimits,
    budget: ConversationBudget,
    private readonly ws: WebSocket,
    private readonly credential: string,
    private readonly headerStrategy: RoutingStrategy | undefined,
    onClosed: () => void,
  ) {
    this.cache = new ConversationCache(limits, budget);
    this.idleTimer = setTimeout(() => {
      // A response running (or waiting) is not idleness.
      if (this.running !== undefined) this.idleTimer.refresh();
      else this.close(1000, 'idle timeout');
    }, limits.idleTimeoutMs);
    this.ageTimer = setTimeout(() => this.expire(), limits.maxConnectionMs);
    this.closed = new Promise<void>((resolve) => {
      ws.once('close', () => {
        clearTimeout(this.idleTimer);
        clearTimeout(this.ageTimer);
        this.queue.length = 0;
        this.cache.clear();
        this.running?.clientGone();
        onClosed();
        resolve();
      });
    });
    ws.on('error', (error) => context.logger.debug({ err: error }, 'responses websocket error'));
    ws.on('message', (data, isBinary) => this.onMessage(data, isBinary));
  }

  private onMessage(data: RawData, isBinary: boolean): void {
    void isBinary;
    const text = Array.isArray(data) ? Buffer.concat(data).toString('utf8') : Buffer.isBuffer(data) ? data.toString('utf8') : Buffer.from(data).toString('utf8');
    if (this.running === undefined) this.idleTimer.refresh();
    if (this.draining) return;
    if (this.running !== undefined) {
      if (this.queue.length >= this.limits.maxQueued) {
        this.close(1008, `more than ${this.limits.maxQueued} response.create messages waiting`);
        return;
      }
      this.queue.push(text);
      return;
    }
    this.start(text);
  }

  private start(text: string): void {
    if (this.expired) {
      this.limitReached();
      return;
    }
    const turn = new Turn(this.ws);
    this.running = turn;
    void this.runTurn(turn, text).finally(() => {
      this.running = undefined;
      turn.finish();
      if (this.ws.readyState !== WebSocket.OPEN) return;
      if (this.draining) {
        this.close(GOING_AWAY, 'server shutting down');
        return;
      }
      this.idleTimer.refresh();
      const next = this.queue.shift();
      if (next !== undefined) this.start(next);
    });
  }

  private async runTurn(turn: Turn, text: string): Promise<void> {
    const requestId = newRequestId();
    const bytes = Buffer.byteLength(text);
    const shed = this.admission.admitTurn(bytes);
    if (shed !== undefined) {
      this.send(errorEvent(toApiError(shed)));
      return;
    }
    let previousId: string | undefined;
    try {
      const message = parseJsonText(text, responsesDialect.freeFormFields);
      const type = typeof message === 'object' && message !== null && !Array.isArray(message) ? (message as { type?: unknown }).type : undefined;
      // Codex acknowledges each response it consumed; there is nothing to do with it.
      if (type === 'response.processed') return;
      if (type !== 'response.create') {
        throw edgeErrors.invalidRequest("type: a message on this socket is a JSON object with `type: 'response.create'`.", 'type', 'invalid_event');
      }
      const raw = { ...(message as Record<string, unknown>) };
      // The envelope's own field, and the HTTP streaming switches (the socket always streams).
      delete raw.type;
      delete raw.stream;
      delete raw.stream_options;
      // WebSocket mode's own switch: `generate: false` prepares a response without generating it.
      const generate = raw.generate;
      if (generate !== undefined && generate !== null && typeof generate !== 'boolean') {
        throw edgeErrors.invalidRequest('generate: must be a boolean (false: prepare the response without generating output).', 'generate', 'invalid_type');
      }
      delete raw.generate;
      let input: unknown[];
      let chars = text.length;
      if (typeof raw.previous_response_id === 'string') {
        previousId = raw.previous_response_id;
        const continued = this.cache.continuation(previousId, raw.input, text.length);
        input = continued.items;
        chars = continued.chars;
        raw.input = input;
        delete raw.previous_response_id;
      } else {
        input = inputItems(raw.input);
      }
      const key = await this.context.apiKeys.verify(this.credential, requestId);
      const body: ResponsesRequest = responsesDialect.parse(raw);
      body.stream = true;
      if (generate === false) {
        await this.warmUp(turn, requestId, key, body);
      } else {
        await runInference(this.context, responsesDialect, { requestId, key, body, headerStrategy: this.headerStrategy, signal: turn.signal }, turn);
      }
      const terminal = turn.terminal;
      if (terminal !== undefined) {
        // An in-band compaction leaves the compacted window, not the conversation it replaced.
        if (generate !== false && compactionTriggered(body)) this.cache.remember(terminal.id, compactedWindow(input, terminal.output), [], chars + terminal.chars);
        else this.cache.remember(terminal.id, input, terminal.output, chars + terminal.chars);
      } else if (previousId !== undefined) {
        this.cache.forget(previousId);
      }
    } catch (error) {
      if (previousId !== undefined) this.cache.forget(previousId);
      if (error instanceof ClientGoneError || this.ws.readyState !== WebSocket.OPEN) return;
      const apiError = toApiError(error);
      if (apiError.status >= 500) this.context.logger.warn({ err: error, request_id: requestId }, 'responses websocket turn failed');
      this.send(errorEvent(apiError));
    } finally {
      this.admission.leaveTurn(bytes);
    }
  }

  /**
   * `generate: false`: what a response would be refused for is refused (the model, its tier and
   * endpoint, the conversion's 400s), then the response is answered as created and completed with no
   * output and zero usage. Not the pipeline: no provider and no charge; but it is admitted as a free
   * request of its model (the key's rate window of the model's limit group and tier, and the key's
   * state), so a warm-up takes a rate-limit slot and a 429 past it, while nothing is held.
   */
  private async warmUp(turn: Turn, requestId: string, key: VerifiedApiKey, body: ResponsesRequest): Promise<void> {
    const model = resolveModel(this.context, body.model, responsesDialect.endpoint, key);
    responsesDialect.convert(body, model, this.context.reasoningTags);
    await this.context.admission.admit({ requestId, key, model, candidates: undefined, paid: false, holdPico: 0n });
    // No usage event will close its admission record: released at once (nothing was held).
    void this.context.admission.release({ requestId, key });
    const writer = new ResponsesStreamWriter({ requestId, model, tags: this.context.reasoningTags, created: Math.floor(this.context.now() / 1000), logger: this.context.logger }, body);
    turn.end(writer.open() + writer.end(undefined));
  }

  private send(text: string): void {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(text);
  }

  private expire(): void {
    this.expired = true;
    if (this.running === undefined) this.limitReached();
  }

  /** Past its age bound: OpenAI's code for it (clients such as Codex reconnect on it), then closed. */
  private limitReached(): void {
    const minutes = Math.round(this.limits.maxConnectionMs / 60_000);
    this.send(
      errorEvent({
        status: 400,
        type: 'invalid_request_error',
        code: 'websocket_connection_limit_reached',
        message: `Responses websocket connection limit reached (${minutes} minutes). Create a new websocket connection to continue.`,
      }),
    );
    this.queue.length = 0;
    this.close(1000, 'connection limit reached');
  }

  /** The edge drains: an idle socket closes now, a busy one after its response. */
  drain(): void {
    this.draining = true;
    this.queue.length = 0;
    if (this.running === undefined) this.close(GOING_AWAY, 'server shutting down');
  }

  /** The drain's bound passed: closed now, its response cut. */
  cut(): void {
    this.running?.clientGone();
    this.close(GOING_AWAY, 'server shutting down');
  }

  terminate(): void {
    this.ws.terminate();
  }

  private close(code: number, reason: string): void {
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.close(code, reason);
  }
}

/**
 * One response.create's answer: the stream writer's SSE text split into one message per event (the
 * `data:` of each; its JSON never holds a raw newline). Remembers the terminal response for the cache.
 */
class Turn implements AnswerSink {
  private readonly cancellation = new Cancellation();
  private readonly closeListeners: Array<() => void> = [];
  private done = false;
  terminal: { id: string; output: unknown[]; chars: number } | undefined = undefined;

  constructor(private readonly ws: WebSocket) {}

  get signal(): Cancellation {
    return this.cancellation;
  }

  /** The socket closed under the running response. */
  clientGone(): void {
    this.cancellation.abort();
    this.finish();
  }

  /** The turn is over (ended, failed, or its socket gone): the pipeline's close listeners run, once. */
  finish(): void {
    if (this.done) return;
    this.done = true;
    for (const listener of this.closeListeners.splice(0)) listener();
  }

  onClose(listener: () => void): void {
    if (this.done) listener();
    else this.closeListeners.push(listener);
  }

  commit(): void {
    // A WebSocket has no status or headers per response.
  }

  write(text: string): Promise<void> | void {
    if (this.ws.bufferedAmount <= HIGH_WATER_BYTES) {
      this.sendEvents(text, undefined);
      return;
    }
    // A slow reader: the next write waits until this one has left (or the socket closed).
    return new Promise<void>((resolve) => this.sendEvents(text, () => resolve()));
  }

  end(text: string): void {
    this.sendEvents(text, undefined);
  }

  json(): void {
    throw new Error('a responses WebSocket always streams');
  }

  /** Each event's JSON as one message; `written` runs once the last has been written (at once: none, or the socket is gone). */
  private sendEvents(text: string, written: (() => void) | undefined): void {
    if (this.ws.readyState !== WebSocket.OPEN) {
      written?.();
      return;
    }
    let from = 0;
    let data = text.indexOf('data: ', from);
    if (data < 0) written?.();
    while (data >= 0) {
      const stop = text.indexOf('\n\n', data);
      const event = text.slice(data + 6, stop < 0 ? text.length : stop);
      from = stop < 0 ? text.length : stop + 2;
      if (event.startsWith('{"type":"response.completed"') || event.startsWith('{"type":"response.incomplete"')) this.noteTerminal(event);
      data = text.indexOf('data: ', from);
      if (data < 0 && written !== undefined) this.ws.send(event, () => written());
      else this.ws.send(event);
    }
  }

  private noteTerminal(event: string): void {
    const parsed = JSON.parse(event) as { response?: { id?: unknown; output?: unknown } };
    const id = parsed.response?.id;
    const output = parsed.response?.output;
    if (typeof id === 'string' && Array.isArray(output)) this.terminal = { id, output, chars: JSON.stringify(output).length };
  }
}
