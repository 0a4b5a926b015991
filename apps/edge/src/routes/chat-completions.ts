import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ChatRequest, Usage } from '@gateway/proto';
import { Cancellation, errors, GatewayError, type CallerSignal } from '@gateway/platform';
import type { VerifiedApiKey } from '../auth-cache.js';
import type { CatalogModel } from '../catalog-cache.js';
import { CHAT_ENDPOINT, convertChatRequest, routerRequest, type ConvertedChat } from '../chat/convert.js';
import { resolveFileParts } from '../chat/file-parts.js';
import { ChatChunkWriter, renderChatCompletion } from '../chat/render.js';
import { CHAT_FREE_FORM_FIELDS, parseChatCompletionRequest, routingStrategy, type ChatCompletionRequest, type RoutingStrategy } from '../chat/schema.js';
import { requestIdOf, verifyApiKey, type EdgeContext } from '../context.js';
import { presentedApiKey } from '../credentials.js';
import { echoed } from '../echoed-value.js';
import { edgeErrors, toApiError } from '../errors.js';
import { ClientGoneError, readJsonBody, sendJson } from '../http.js';
import { resolveModel } from '../model-resolution.js';
import { checkContextWindow, costBound, measurePrompt, MINIMUM_HOLD_PICO, worstCaseHint, type CostBound } from '../inference/request-bounds.js';

/** Bound on one non-streamed answer, failover included. */
const CHAT_DEADLINE_MS = 10 * 60_000;
const STRATEGY_HEADER = 'x-gateway-routing-strategy';

// Every inference route resolves its model through model-resolution.ts (alias, 410, tier 403, endpoint).
export { resolveModel };

/** The strategy header, checked before any service is asked: an unknown value is a 400. */
export function parseStrategyHeader(value: string | string[] | undefined): RoutingStrategy | undefined {
  if (typeof value !== 'string' || value.trim() === '') return undefined;
  const parsed = routingStrategy.safeParse(value.trim());
  if (!parsed.success) {
    throw edgeErrors.invalidRequest(
      `header.${STRATEGY_HEADER}: unknown routing strategy \`${echoed(value)}\`; expected one of ${routingStrategy.options.join(', ')}.`,
      `header.${STRATEGY_HEADER}`,
    );
  }
  return parsed.data;
}

/** DESIGN §3: body `routing`, then the header, then the key's default, then `balanced`. */
export function chooseStrategy(
  bodyValue: RoutingStrategy | null | undefined,
  headerValue: RoutingStrategy | undefined,
  key: VerifiedApiKey,
): RoutingStrategy {
  if (bodyValue) return bodyValue;
  if (headerValue) return headerValue;
  // A set lookup, not safeParse: most keys have no default (''), and a failed zod parse builds an
  // error object on every request (~1% of the edge's CPU in the bench profile).
  return KNOWN_STRATEGIES.has(key.defaultRoutingStrategy) ? (key.defaultRoutingStrategy as RoutingStrategy) : 'balanced';
}

const KNOWN_STRATEGIES: ReadonlySet<string> = new Set(routingStrategy.options);

export function chatCompletionsHandler(context: EdgeContext) {
  return async (request: IncomingMessage, response: ServerResponse): Promise<void> => {
    const requestId = requestIdOf(response);
    // The client leaving cancels the Router call, which stops the provider call behind it. A
    // Cancellation, not an AbortController: see libs/platform/src/cancellation.ts.
    const clientGone = new Cancellation();
    response.once('close', () => {
      if (!response.writableFinished) clientGone.abort();
    });
    const credential = presentedApiKey(request);
    // No credential: refuse before reading (up to 32 MiB of) a body nobody may send.
    if (credential === undefined) throw edgeErrors.missingApiKey();
    // The credential is judged before the body (spec §5): a wrong key with a bad body is a 401, not a
    // 400. Usually a cache hit; a miss costs one Auth call before the body is read.
    const key = await verifyApiKey(context, credential, requestId);
    const body: ChatCompletionRequest = parseChatCompletionRequest(await readJsonBody(request, context.bodyLimits, CHAT_FREE_FORM_FIELDS));
    const headerStrategy = parseStrategyHeader(request.headers[STRATEGY_HEADER]);
    const model = resolveModel(context, body.model, CHAT_ENDPOINT, key);
    const converted = convertChatRequest(body, model);
    const strategy = chooseStrategy(body.routing, headerStrategy, key);
    // The context window and the worst-case cost, before admission and before any provider call.
    const measure = measurePrompt(converted.request);
    await checkContextWindow(model, converted.request, measure);
    const bound = costBound(model, converted.request, measure);
    let leaseId: string | undefined;
    try {
      leaseId = (await context.admission.admit({ requestId, key, model, holdPico: bound.holdPico })).leaseId;
    } catch (error) {
      // A lost answer (ledger unreachable mid-call) may hide a reservation that was made; a refusal made none.
      const status = toApiError(error).status;
      if (status >= 500) void context.admission.release({ requestId, key });
      if (status === 402 && bound.holdPico > MINIMUM_HOLD_PICO) throw withWorstCaseHint(error, bound);
      throw error;
    }

    // Whatever way the request ends, its admission is finished (a repeat after settle/release is a no-op).
    response.once('close', () => context.admission.settle({ requestId, usage: undefined }));
    const chat = routerRequest(converted, { requestId, accountId: key.accountId, keyId: key.keyId, leaseId }, strategy);
    try {
      // File blocks become bytes or text the model can read (media service); after admission, so rate
      // limits and credit checks come before any URL fetch. A request without files skips this.
      await resolveFileParts(chat.messages, model, { media: context.media, requestId, signal: clientGone });
      // Fetched files only now have a size: the window is checked again (the hold already assumed a full window).
      if (measure.unresolvedFiles) await checkContextWindow(model, chat, measurePrompt(chat));
    } catch (error) {
      void context.admission.release({ requestId, key });
      throw clientGone.aborted ? new ClientGoneError('client left while its files were read') : error;
    }
    if (clientGone.aborted) {
      // Nobody is left to answer; do not start a provider call for them.
      void context.admission.release({ requestId, key });
      throw new ClientGoneError('client left before the router was called');
    }
    if (converted.stream) {
      await streamChat(context, response, { chat, converted, key, model, strategy, requestId, signal: clientGone });
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
    sendJson(response, 200, renderChatCompletion(answer, model.id), {
      ...gatewayHeaders(answer.routingStrategy || strategy, converted.droppedParams, answer.droppedParams),
    });
  };
}

/** A 402 of a request that held more than 0.05: the same refusal, saying what the hold was made of. */
function withWorstCaseHint(error: unknown, bound: CostBound): unknown {
  if (!(error instanceof GatewayError)) return error;
  return new GatewayError(error.status, error.reason, error.message + worstCaseHint(bound), { code: error.code, param: error.param, cause: error });
}

function gatewayHeaders(strategy: string, edgeDropped: readonly string[], routerDropped: readonly string[]): Record<string, string> {
  const headers: Record<string, string> = { [STRATEGY_HEADER]: strategy };
  const dropped = [...new Set([...edgeDropped, ...routerDropped])].sort();
  if (dropped.length > 0) headers['x-gateway-dropped-params'] = dropped.join(',');
  return headers;
}

interface StreamJob {
  chat: ChatRequest;
  converted: ConvertedChat;
  key: VerifiedApiKey;
  model: CatalogModel;
  strategy: string;
  requestId: string;
  signal: CallerSignal;
}

/**
 * SSE relay of Router.ChatStream. Nothing is written until the first delta: a failure before any
 * content is still a normal HTTP error (the router fails over until then). After it, a failure ends
 * the stream with an error chunk and [DONE] — never a clean close that looks like a complete answer.
 */
async function streamChat(context: EdgeContext, response: ServerResponse, job: StreamJob): Promise<void> {
  const { requestId, key } = job;
  let writer: ChatChunkWriter | undefined;
  let usage: Usage | undefined;
  let headersWritten = false;
  const writeHeaders = (strategy: string, routerDropped: readonly string[]) => {
    response.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      ...gatewayHeaders(strategy, job.converted.droppedParams, routerDropped),
    });
    headersWritten = true;
  };
  let startStrategy = job.strategy;
  let startDropped: readonly string[] = [];
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
  try {
    for await (const message of context.chatRouter.chatStream({ chat: job.chat, combinedStart: true }, { requestId, signal: streamAbort })) {
      idleTimer.refresh();
      const event = message.event;
      if (!event) continue;
      if (event.$case === 'start') {
        writer = new ChatChunkWriter(event.value, job.model.id);
        startStrategy = event.value.routingStrategy || job.strategy;
        startDropped = event.value.droppedParams;
        // The first content may ride in the start (combinedStart): one message less before it reaches the client.
        if (event.value.firstDelta) {
          writeHeaders(startStrategy, startDropped);
          await write(response, writer.delta(event.value.firstDelta));
        }
      } else if (event.$case === 'delta') {
        if (!writer) throw new Error('router stream sent a delta before its start');
        if (!headersWritten) writeHeaders(startStrategy, startDropped);
        await write(response, writer.delta(event.value));
      } else if (event.$case === 'usage') {
        usage = event.value;
      }
    }
  } catch (caught) {
    const error = wentSilent ? errors.internal(`router stream sent nothing for ${context.streamIdleTimeoutMs} ms`) : caught;
    if (wentSilent) context.logger.warn({ request_id: requestId }, 'router stream went silent; ending it');
    if (!headersWritten) {
      void context.admission.release({ requestId, key });
      throw job.signal.aborted ? new ClientGoneError('client left before the first content') : error;
    }
    if (job.signal.aborted) return;
    const apiError = toApiError(error);
    if (apiError.status >= 500) context.logger.warn({ err: error, request_id: requestId }, 'stream failed after content was sent');
    response.write((writer as ChatChunkWriter).error(apiError));
    context.admission.settle({ requestId, usage });
    response.end(ChatChunkWriter.done);
    return;
  } finally {
    clearTimeout(idleTimer);
    job.signal.removeEventListener('abort', onClientGone);
  }
  if (!writer) throw new Error('router stream ended without a start');
  if (!headersWritten) writeHeaders(startStrategy, startDropped);
  if (job.converted.includeUsage) response.write(writer.usage(usage));
  context.admission.settle({ requestId, usage });
  response.end(ChatChunkWriter.done);
}

/** Honours back-pressure from a slow client; a client that left releases the wait too. */
function write(response: ServerResponse, text: string): Promise<void> | void {
  if (response.write(text)) return;
  return new Promise<void>((resolve) => {
    const done = () => {
      response.off('drain', done);
      response.off('close', done);
      resolve();
    };
    response.on('drain', done);
    response.on('close', done);
  });
}
