import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { ChatRequest, Usage } from '@gateway/proto';
import { Cancellation, errors, GatewayError, type CallerSignal } from '@gateway/platform';
import type { VerifiedApiKey } from './auth-cache.js';
import type { CatalogModel } from '../catalog-cache.js';
import { resolveFileParts } from '../canonical/file-parts.js';
import { routerRequest } from '../canonical/request.js';
import { verifyApiKey, type EdgeContext } from '../context.js';
import { requestIdOf } from '../request-id.js';
import { presentedApiKey } from './credentials.js';
import { edgeErrors, toApiError } from '../errors.js';
import { ClientGoneError, drained, readJsonBody, sendJson } from '../http.js';
import { resolveModel } from './model-resolution.js';
import type { AnswerContext, ConvertedRequest, InferenceDialect, StreamWriter } from './dialect.js';
import { checkContextWindow, costBound, measurePrompt, MINIMUM_HOLD_PICO, worstCaseHint, type CostBound } from './request-bounds.js';
import { chooseStrategy, parseStrategyHeader, STRATEGY_HEADER, type RoutingStrategy } from './strategy.js';

/** Bound on one non-streamed answer, failover included. */
const CHAT_DEADLINE_MS = 10 * 60_000;

export type InferenceHandler = (request: IncomingMessage, response: ServerResponse) => Promise<void>;

/**
 * THE inference pipeline (DESIGN §6): every dialect's route is this function with its dialect. In
 * order: credential (before the body: a wrong key with a bad body is a 401), body, strategy, model
 * (alias, 410, tier 403, endpoint), conversion (drops, 400s), context window and worst-case cost,
 * admission, files, the router call, then the answer or the stream relay. Admission is finished in
 * exactly one way per request: settle with the usage of a delivered answer, or release.
 */
export function inferenceHandler<Body>(context: EdgeContext, dialect: InferenceDialect<Body>): InferenceHandler {
  return async (request, response) => {
    const requestId = requestIdOf(response);
    // The client leaving cancels the Router call, which stops the provider call behind it. A
    // Cancellation, not an AbortController: see libs/platform/src/cancellation.ts.
    const clientGone = new Cancellation();
    response.once('close', () => {
      if (!response.writableFinished) clientGone.abort();
    });
    const key = await authenticate(context, request, requestId);
    const body = dialect.parse(await readJsonBody(request, context.bodyLimits, dialect.freeFormFields));
    const headerStrategy = parseStrategyHeader(request.headers[STRATEGY_HEADER]);
    await runInference(context, dialect, { requestId, key, body, headerStrategy, signal: clientGone }, new HttpAnswer(response));
  };
}

/** One inference request once its caller is known and its body parsed: what `runInference` needs besides its sink. */
export interface InferenceJob<Body> {
  /** The gateway's id of the request: the key its money moves under. */
  requestId: string;
  key: VerifiedApiKey;
  body: Body;
  /** The `x-gateway-strategy` header's strategy, if the caller sent one. */
  headerStrategy: RoutingStrategy | undefined;
  /** Aborted when the client is gone: cancels the router call. */
  signal: Cancellation;
}

/**
 * Where one answer goes: the HTTP response of a route (HttpAnswer), or one turn of a responses
 * WebSocket (dialects/responses/responses-websocket.ts). The pipeline writes through nothing else.
 */
export interface AnswerSink {
  /** Runs `listener` once when the exchange is over, whichever way it ended (HTTP: the response's close). */
  onClose(listener: () => void): void;
  /** The stream is committed: the status and headers, where the transport has them. */
  commit(headers: Record<string, string>): void;
  /** Part of the stream; a promise while the client's buffer is full (or until it left). */
  write(text: string): Promise<void> | void;
  /** The stream's last text, ending the answer. */
  end(text: string): void;
  /** A whole (not streamed) answer. */
  json(body: unknown, headers: Record<string, string>): void;
}

/**
 * Everything after the credential and the body, for any transport: model, conversion, bounds,
 * admission, files, the router call, then the answer or the stream relay into `sink`. Failures before
 * an answer was committed are thrown (the caller answers them in its envelope); after the commit point
 * the dialect's writer ends the stream as failed.
 */
export async function runInference<Body>(context: EdgeContext, dialect: InferenceDialect<Body>, job: InferenceJob<Body>, sink: AnswerSink): Promise<void> {
  const { requestId, key, body, headerStrategy, signal: clientGone } = job;
  const model = resolveModel(context, dialect.modelName(body), dialect.endpoint, key);
  const converted = dialect.convert(body, model, context.reasoningTags);
  const strategy = chooseStrategy(dialect.routing(body), headerStrategy, key);
  // The context window and the worst-case cost, before admission and before any provider call.
  const measure = measurePrompt(converted.request);
  await checkContextWindow(model, converted.request, measure, converted.outputField);
  const bound = costBound(model, converted.request, measure);
  let leaseId: string | undefined;
  try {
    leaseId = (await context.admission.admit({ requestId, key, model, holdPico: bound.holdPico })).leaseId;
  } catch (error) {
    // A lost answer (ledger unreachable mid-call) may hide a reservation that was made; a refusal made none.
    const status = toApiError(error).status;
    if (status >= 500) void context.admission.release({ requestId, key });
    if (status === 402 && bound.holdPico > MINIMUM_HOLD_PICO) throw withWorstCaseHint(error, bound, converted.outputField);
    throw error;
  }

  // Whatever way the request ends, its admission is finished (a repeat after settle/release is a no-op).
  sink.onClose(() => context.admission.settle({ requestId, usage: undefined }));
  const chat = routerRequest(converted.request, { requestId, accountId: key.accountId, keyId: key.keyId, leaseId }, strategy);
  try {
    // File blocks become bytes or text the model can read (media service); after admission, so rate
    // limits and credit checks come before any URL fetch. A request without files skips this.
    await resolveFileParts(chat.messages, model, {
      media: context.media,
      requestId,
      signal: clientGone,
      ...(converted.filePathOf ? { pathOf: converted.filePathOf } : {}),
    });
    // Fetched files only now have a size: the window is checked again (the hold already assumed a full window).
    if (measure.unresolvedFiles) await checkContextWindow(model, chat, measurePrompt(chat), converted.outputField);
  } catch (error) {
    void context.admission.release({ requestId, key });
    throw clientGone.aborted ? new ClientGoneError('client left while its files were read') : error;
  }
  if (clientGone.aborted) {
    // Nobody is left to answer; do not start a provider call for them.
    void context.admission.release({ requestId, key });
    throw new ClientGoneError('client left before the router was called');
  }
  const answerContext: AnswerContext = { requestId, model, tags: context.reasoningTags, created: Math.floor(context.now() / 1000), logger: context.logger };
  if (converted.stream) {
    const writer = dialect.streamWriter(answerContext, body);
    await relayStream(context, sink, { chat, converted, key, model, strategy, requestId, signal: clientGone, writer });
    return;
  }
  let answer;
  try {
    answer = await context.chatRouter.chat(chat, { requestId, deadlineMs: CHAT_DEADLINE_MS, signal: clientGone });
  } catch (error) {
    // No answer reached the caller: hand the reservation back now rather than at the sweeper's deadline.
    void context.admission.release({ requestId, key });
    throw clientGone.aborted ? new ClientGoneError('client left while the router was answering') : error;
  }
  context.admission.settle({ requestId, usage: answer.usage });
  sink.json(dialect.render(answer, answerContext, body), gatewayHeaders(answer.routingStrategy || strategy, converted.droppedParams, answer.droppedParams, converted.droppedTools));
}

/** The answer of an HTTP route: SSE on the response (its socket corked per turn), or JSON. */
class HttpAnswer implements AnswerSink {
  constructor(private readonly response: ServerResponse) {}

  onClose(listener: () => void): void {
    this.response.once('close', listener);
  }

  commit(headers: Record<string, string>): void {
    this.response.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      ...headers,
    });
  }

  write(text: string): Promise<void> | void {
    return write(this.response, text);
  }

  end(text: string): void {
    this.response.end(text);
  }

  json(body: unknown, headers: Record<string, string>): void {
    sendJson(this.response, 200, body, headers);
  }
}

/**
 * The caller's API key, verified, before the body is read (a wrong key with a bad body is a 401). Shared
 * by every route that reaches models, the pipeline's and those beside it (messages count_tokens). Not
 * async: a missing credential throws at once, a cached key costs no extra promise.
 */
export function authenticate(context: EdgeContext, request: IncomingMessage, requestId: string): Promise<VerifiedApiKey> {
  const credential = presentedApiKey(request);
  // No credential: refuse before reading (up to 32 MiB of) a body nobody may send.
  if (credential === undefined) throw edgeErrors.missingApiKey();
  // Usually a cache hit; a miss costs one Auth call before the body is read.
  return verifyApiKey(context, credential, requestId);
}

/** A 402 of a request that held more than 0.05: the same refusal, saying what the hold was made of. */
function withWorstCaseHint(error: unknown, bound: CostBound, outputField: string | undefined): unknown {
  if (!(error instanceof GatewayError)) return error;
  return new GatewayError(error.status, error.reason, error.message + worstCaseHint(bound, outputField), { code: error.code, param: error.param, cause: error });
}

function gatewayHeaders(strategy: string, edgeDropped: readonly string[], routerDropped: readonly string[], droppedTools: readonly string[] | undefined): Record<string, string> {
  const headers: Record<string, string> = { [STRATEGY_HEADER]: strategy };
  const dropped = [...new Set([...edgeDropped, ...routerDropped])].sort();
  if (dropped.length > 0) headers['x-gateway-dropped-params'] = dropped.join(',');
  if (droppedTools !== undefined && droppedTools.length > 0) headers['x-gateway-dropped-tools'] = droppedTools.join(',');
  return headers;
}

interface StreamJob {
  chat: ChatRequest;
  converted: ConvertedRequest;
  key: VerifiedApiKey;
  model: CatalogModel;
  strategy: string;
  requestId: string;
  signal: CallerSignal;
  writer: StreamWriter;
}

/**
 * SSE relay of Router.ChatStream for every dialect. Nothing is written until the first delta: a
 * failure before any content is still a normal HTTP error (the router fails over until then) — unless
 * the dialect pings (messages), in which case a slow first token commits the stream early and pings
 * keep it alive. After the commit point a failure ends the stream with the dialect's error events,
 * never a clean close that looks like a complete answer.
 */
async function relayStream(context: EdgeContext, sink: AnswerSink, job: StreamJob): Promise<void> {
  const { requestId, key, writer } = job;
  let usage: Usage | undefined;
  let committed = false;
  let started = false;
  let startStrategy = job.strategy;
  let startDropped: readonly string[] = [];
  const commit = () => {
    sink.commit(gatewayHeaders(startStrategy, job.converted.droppedParams, startDropped, job.converted.droppedTools));
    committed = true;
    const opening = writer.open();
    if (opening) void sink.write(opening);
  };
  // Bound on silence: a router stream that neither sends nor ends (lost status, wedged peer) must not
  // hold the client and this request forever.
  const streamAbort = new Cancellation();
  const onClientGone = () => streamAbort.abort();
  job.signal.addEventListener('abort', onClientGone, { once: true });
  let wentSilent = false;
  const idleTimer = setTimeout(() => {
    wentSilent = true;
    streamAbort.abort();
  }, context.streamIdleTimeoutMs);
  // Keep-alive of a dialect that has one: refreshed by every write, so it only fires into silence.
  const ping = writer.ping?.bind(writer);
  const pingTimer = ping
    ? setInterval(() => {
        if (!committed) commit();
        void sink.write(ping());
      }, context.streamPingIntervalMs)
    : undefined;
  try {
    for await (const message of context.chatRouter.chatStream({ chat: job.chat, combinedStart: true }, { requestId, signal: streamAbort })) {
      idleTimer.refresh();
      const event = message.event;
      if (!event) continue;
      if (event.$case === 'start') {
        started = true;
        writer.start(event.value);
        startStrategy = event.value.routingStrategy || job.strategy;
        startDropped = event.value.droppedParams;
        // The first content may ride in the start (combinedStart): one message less before it reaches the client.
        if (event.value.firstDelta) {
          if (!committed) commit();
          pingTimer?.refresh();
          await sink.write(writer.delta(event.value.firstDelta));
        }
      } else if (event.$case === 'delta') {
        if (!started) throw new Error('router stream sent a delta before its start');
        if (!committed) commit();
        pingTimer?.refresh();
        await sink.write(writer.delta(event.value));
      } else if (event.$case === 'usage') {
        usage = event.value;
      }
    }
  } catch (caught) {
    const error = wentSilent ? errors.internal(`router stream sent nothing for ${context.streamIdleTimeoutMs} ms`) : caught;
    if (wentSilent) context.logger.warn({ request_id: requestId }, 'router stream went silent; ending it');
    if (!committed) {
      void context.admission.release({ requestId, key });
      throw job.signal.aborted ? new ClientGoneError('client left before the first content') : error;
    }
    if (job.signal.aborted) return;
    const apiError = toApiError(error);
    // Our own failures keep their stack; an upstream outage (503) is an ordinary event, logged without one.
    if (apiError.status === 500) context.logger.warn({ err: error, request_id: requestId }, 'stream failed after it was committed');
    else if (apiError.status > 500) context.logger.warn({ request_id: requestId, status: apiError.status, code: apiError.code }, 'stream failed after it was committed');
    // Settled with whatever usage arrived: a stream committed by pings but failed before any content
    // delivered nothing, and the router published no usage for it.
    context.admission.settle({ requestId, usage });
    sink.end(writer.fail(apiError, usage));
    return;
  } finally {
    clearTimeout(idleTimer);
    if (pingTimer) clearInterval(pingTimer);
    job.signal.removeEventListener('abort', onClientGone);
  }
  if (!started) throw new Error('router stream ended without a start');
  if (!committed) commit();
  context.admission.settle({ requestId, usage });
  sink.end(writer.end(usage));
}

/**
 * Honours back-pressure from a slow client; a client that left releases the wait too. Writes of one
 * turn (the deltas of one batch from the router) leave in one syscall: the connection's socket is
 * corked at the first and uncorked once the turn's microtasks ran. The socket, never the response:
 * from Node 22 a corked ServerResponse holds chunked writes in a buffer of its own that end() does not
 * flush first (the chunked terminator left ahead of them, so a stream ending in the same turn lost its
 * last deltas and terminal event, issue 24), and its uncork() sends each held piece in a write(2) of
 * its own. Through the socket every byte, end() included, leaves in order from one buffer on any Node.
 */
function write(response: ServerResponse, text: string): Promise<void> | void {
  if (text === '') return;
  const socket = response.socket;
  if (socket && socket.writableCorked === 0) {
    socket.cork();
    process.nextTick(uncork, socket);
  }
  if (response.write(text)) return;
  return drained(response);
}

function uncork(socket: Socket): void {
  socket.uncork();
}
