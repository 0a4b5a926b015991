import type { IncomingMessage, ServerResponse } from 'node:http';
import { Cancellation } from '@gateway/platform';
import type { VerifiedApiKey } from './auth-cache.js';
import { HttpAnswer, type AnswerSink } from './answer-sink.js';
import { idempotencyKeyOf, runIdempotent } from './idempotency.js';
import { chatSteps } from './chat-steps.js';
import type { EdgeContext } from '../context.js';
import { presentedApiKey } from './credentials.js';
import type { InferenceDialect } from './dialect.js';
import { edgeErrors, toApiError } from '../errors.js';
import { ClientGoneBeforeRouterError, ClientGoneError, readJsonBody } from '../http.js';
import { resolveModel } from './model-resolution.js';
import { InferenceJob, type Hold, type InferenceSteps } from './pipeline-steps.js';
import { requestIdOf } from '../request-id.js';
import { MINIMUM_HOLD_PICO } from './request-bounds.js';
import { anyPaid } from './admission.js';
import { answerMayBeLost, voidUndelivered } from './undelivered.js';
import { chooseStrategy, parseStrategyHeader, STRATEGY_HEADER, type RoutingStrategy } from './strategy.js';

export type { AnswerSink } from './answer-sink.js';
export type InferenceHandler = (request: IncomingMessage, response: ServerResponse) => Promise<void>;

/**
 * THE inference route (DESIGN §6): every chat dialect (`chatSteps(dialect)`) and every endpoint family
 * is this handler with its steps. The client leaving cancels the Router call, which stops the provider
 * call behind it (a Cancellation, not an AbortController: see libs/platform/src/cancellation.ts).
 */
export function inferenceHandler<Body, Prepared extends Hold>(context: EdgeContext, steps: InferenceSteps<Body, Prepared, HttpAnswer>): InferenceHandler {
  return async (request, response) => {
    const requestId = requestIdOf(response);
    const clientGone = new Cancellation();
    response.once('close', () => {
      if (!response.writableFinished) clientGone.abort();
    });
    const key = await authenticate(context, request, requestId);
    const idempotencyKey = idempotencyKeyOf(request);
    const json = steps.read ? undefined : await readJsonBody(request, context.bodyLimits, steps.freeFormFields);
    const body = steps.read ? await steps.read(request, context, response) : steps.parse!(json);
    const headerStrategy = parseStrategyHeader(request.headers[STRATEGY_HEADER]);
    const job = new InferenceJob(requestId, key, body, headerStrategy, clientGone);
    const beta = request.headers['anthropic-beta'];
    if (beta !== undefined) job.anthropicBeta = Array.isArray(beta) ? beta.join(',') : beta;
    const sink = new HttpAnswer(response);
    if (idempotencyKey === undefined) return runPipeline(context, steps, job, sink);
    // The body a key is bound to: the JSON as sent, or what a route that reads its own body made of it.
    // The headers that change the answer are bound too: the same key with another `anthropic-beta` or
    // strategy is another request (refused as a reused key), not a replay of the first one's answer.
    const strategyHeader = request.headers[STRATEGY_HEADER];
    const headers = {
      'anthropic-beta': job.anthropicBeta ?? '',
      [STRATEGY_HEADER]: typeof strategyHeader === 'string' ? strategyHeader : '',
    };
    const bound = { key: idempotencyKey, accountId: key.accountId, endpoint: steps.endpoint, body: steps.read ? body : json, headers };
    await runIdempotent(context, bound, response, job, () => runPipeline(context, steps, job, sink));
  };
}

/** One inference request of a chat dialect whose caller is known and body parsed (a responses WebSocket turn). */
export interface InferenceRequest<Body> {
  requestId: string;
  key: VerifiedApiKey;
  body: Body;
  headerStrategy: RoutingStrategy | undefined;
  signal: Cancellation;
}

/**
 * A chat dialect's request from its model on, into any sink: the route above for HTTP, and each turn of
 * a responses WebSocket (dialects/responses/responses-websocket.ts). Failures before an answer was
 * committed are thrown (the caller answers them in its envelope).
 */
export function runInference<Body>(context: EdgeContext, dialect: InferenceDialect<Body>, request: InferenceRequest<Body>, sink: AnswerSink): Promise<void> {
  const job = new InferenceJob(request.requestId, request.key, request.body, request.headerStrategy, request.signal);
  return runPipeline(context, chatSteps(dialect), job, sink);
}

/**
 * The pipeline after the credential and the body: strategy, model, the route's prepare step, admission,
 * the exchange. It is the one owner of the request's reservation: once admitted, the reservation is
 * finished exactly once — released when no answer was committed (a refusal, a failure before the
 * Router answered, a client gone before the call), settled with the committed usage otherwise — and the
 * sink's close settles whatever is still open (a repeat after settle or release is a no-op).
 */
export async function runPipeline<Body, Prepared extends Hold, Sink extends AnswerSink>(
  context: EdgeContext,
  steps: InferenceSteps<Body, Prepared, Sink>,
  job: InferenceJob<Body>,
  sink: Sink,
): Promise<void> {
  const { requestId, key } = job;
  const model = resolveModel(context, steps.modelName(job.body), steps.endpoint, key);
  job.model = model;
  job.strategy = chooseStrategy(steps.routing?.(job.body), job.headerStrategy, key);
  // A route whose checks need no I/O answers at once: no promise on the way (the usual chat request).
  const preparing = steps.prepare(job.body, model, context, job);
  const prepared = preparing instanceof Promise ? await preparing : preparing;
  // Handed on (a background response: the jobs service admits and runs it): nothing is held here.
  const detached = steps.detach?.(prepared, job, sink, context);
  if (detached !== undefined && detached !== false) {
    await detached;
    return;
  }
  // Admission covers every model that may serve, not the one named: with fallbacks (or the named model's
  // offers filtered out) the job's model is the first one left and `candidates` all of them (issue 35).
  const candidates = prepared.candidates;
  const paid = candidates === undefined ? job.model.paid : anyPaid(candidates);
  const holdPico = paid && prepared.holdPico < MINIMUM_HOLD_PICO ? MINIMUM_HOLD_PICO : prepared.holdPico;
  let leaseId: string | undefined;
  try {
    leaseId = (await context.admission.admit({ requestId, key, model: job.model, candidates, paid, holdPico })).leaseId;
  } catch (error) {
    // A lost answer (ledger unreachable mid-call) may hide a reservation that was made; a refusal made none.
    if (toApiError(error).status >= 500) void context.admission.release({ requestId, key });
    throw steps.refused ? steps.refused(error, prepared) : error;
  }
  // Whatever way the request ends, its admission is finished: with what was committed (usually already settled).
  sink.onClose(() => context.admission.settle({ requestId, usage: job.usage }));
  if (job.signal.aborted) {
    // Nobody is left to answer; do not start a provider call for them.
    void context.admission.release({ requestId, key });
    throw new ClientGoneError('client left before the router was called');
  }
  job.routerContext = { requestId, accountId: key.accountId, keyId: key.keyId, leaseId };
  try {
    await steps.exchange(prepared, job, sink, context);
  } catch (error) {
    // Nothing committed: the reservation goes back now, not at the sweeper's deadline. After the commit
    // point the Router has published what was delivered: settled with it. A client gone while the Router
    // had the request may owe the prompt an upstream already had (routing charges it; the edge never
    // learns the usage): the hold is counted as spent, as for a stream cut short, until the ledger settles.
    // A client gone before the Router had it (its files still being read) owes nothing: released, so a
    // ledger reservation (a free model's) is closed now, not at its deadline.
    if (job.committed || (job.signal.aborted && !(error instanceof ClientGoneBeforeRouterError))) context.admission.settle({ requestId, usage: job.usage });
    else {
      void context.admission.release({ requestId, key });
      // Routing lost mid-request may have stored the usage of an answer the caller never gets (issue 36).
      if (paid && answerMayBeLost(error)) voidUndelivered(context, { requestId, accountId: key.accountId, keyId: key.keyId });
    }
    throw job.signal.aborted && !(error instanceof ClientGoneError) ? new ClientGoneError('client left while the router was answering') : error;
  }
  context.admission.settle({ requestId, usage: job.usage });
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
  return context.apiKeys.verify(credential, requestId);
}
