import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RequestContext, Usage } from '@gateway/proto';
import { Cancellation, parseCredits } from '@gateway/platform';
import type { VerifiedApiKey } from './auth-cache.js';
import type { CatalogModel } from '../catalog-cache.js';
import type { EdgeContext } from '../context.js';
import { requestIdOf } from '../request-id.js';
import { toApiError } from '../errors.js';
import { ClientGoneError } from '../http.js';
import { resolveModel } from './model-resolution.js';
import { authenticate, type InferenceHandler } from './pipeline.js';
import { MINIMUM_HOLD_PICO } from './request-bounds.js';
import { chooseStrategy, parseStrategyHeader, STRATEGY_HEADER, type RoutingStrategy } from './strategy.js';

/** What a family's answer step gets: the request's identity, its model and strategy, the caller's leaving. */
export interface EndpointJob {
  context: EdgeContext;
  request: IncomingMessage;
  response: ServerResponse;
  requestId: string;
  key: VerifiedApiKey;
  model: CatalogModel;
  strategy: RoutingStrategy;
  /** The RequestContext every Router call of this request carries (its reservation's identity). */
  routerContext: RequestContext;
  /** Aborts when the client leaves: cancels the Router call, which stops the provider call behind it. */
  signal: Cancellation;
}

export interface PreparedCall<Prepared> {
  prepared: Prepared;
  /** Worst-case cost in pico-credits (at least the 0.05 minimum is held for a paid model). */
  holdPico: bigint;
}

/**
 * One non-chat endpoint family (DESIGN §6: `apps/edge/src/endpoints/<family>/`) as the pipeline sees it:
 * its catalog endpoint, how its body is read and validated, the model it names, its model-specific
 * checks and worst-case cost (before admission), and its answer (the Router call and the response).
 */
export interface EndpointFamily<Body, Prepared> {
  endpoint: string;
  /** `response`: whose end frees what reading held (spooled uploads, their memory budget). */
  read(request: IncomingMessage, context: EdgeContext, response: ServerResponse): Promise<Body>;
  modelName(body: Body): string;
  prepare(body: Body, model: CatalogModel, job: { context: EdgeContext; requestId: string; signal: Cancellation }): Promise<PreparedCall<Prepared>>;
  /**
   * Calls the Router and answers. Resolves the metered usage once the answer is complete. Writes nothing
   * before the Router answered (a stream commits on its first bytes): a failure before that is still an
   * ordinary error answer with the reservation released.
   */
  answer(prepared: Prepared, job: EndpointJob): Promise<Usage | undefined>;
}

/**
 * The pipeline of every non-chat inference route: the same steps and order as the chat dialects'
 * (credential before the body, body, strategy header, model with alias/410/tier 403/endpoint, the
 * family's checks, admission with the worst-case hold, the Router call), and admission finished in
 * exactly one way: settled with the answer's usage, or released when no answer reached the caller.
 */
export function endpointHandler<Body, Prepared>(context: EdgeContext, family: EndpointFamily<Body, Prepared>): InferenceHandler {
  return async (request, response) => {
    const requestId = requestIdOf(response);
    const clientGone = new Cancellation();
    response.once('close', () => {
      if (!response.writableFinished) clientGone.abort();
    });
    const key = await authenticate(context, request, requestId);
    const body = await family.read(request, context, response);
    const headerStrategy = parseStrategyHeader(request.headers[STRATEGY_HEADER]);
    const model = resolveModel(context, family.modelName(body), family.endpoint, key);
    const { prepared, holdPico } = await family.prepare(body, model, { context, requestId, signal: clientGone });
    const strategy = chooseStrategy(undefined, headerStrategy, key);
    const hold = model.paid && holdPico < MINIMUM_HOLD_PICO ? MINIMUM_HOLD_PICO : holdPico;
    let leaseId: string | undefined;
    try {
      leaseId = (await context.admission.admit({ requestId, key, model, holdPico: hold })).leaseId;
    } catch (error) {
      // A lost answer (ledger unreachable mid-call) may hide a reservation that was made; a refusal made none.
      if (toApiError(error).status >= 500) void context.admission.release({ requestId, key });
      throw error;
    }
    response.once('close', () => context.admission.settle({ requestId, usage: undefined }));
    if (clientGone.aborted) {
      void context.admission.release({ requestId, key });
      throw new ClientGoneError('client left before the router was called');
    }
    const routerContext: RequestContext = { requestId, accountId: key.accountId, keyId: key.keyId, leaseId };
    let usage: Usage | undefined;
    try {
      usage = await family.answer(prepared, { context, request, response, requestId, key, model, strategy, routerContext, signal: clientGone });
    } catch (error) {
      // Nothing reached the caller: the reservation goes back now, not at the sweeper's deadline. After a
      // stream's first bytes the Router has already published what was delivered.
      if (!response.headersSent) void context.admission.release({ requestId, key });
      else context.admission.settle({ requestId, usage: undefined });
      throw clientGone.aborted ? new ClientGoneError('client left while the router was answering') : error;
    }
    context.admission.settle({ requestId, usage });
  };
}

/** Gateway headers of a non-chat answer: the strategy and the request fields the model does not take. */
export function endpointHeaders(strategy: string, dropped: readonly string[] = []): Record<string, string> {
  const headers: Record<string, string> = { [STRATEGY_HEADER]: strategy };
  if (dropped.length > 0) headers['x-gateway-dropped-params'] = [...new Set(dropped)].sort().join(',');
  return headers;
}

/** Unit count × a model's price key, in pico-credits (0 when the model has no such price). */
export function pricePico(model: CatalogModel, key: keyof NonNullable<CatalogModel['model']['pricing']>, units: number | bigint): bigint {
  const text = model.model.pricing?.[key];
  if (!text) return 0n;
  return BigInt(units) * parseCreditsSafe(text);
}

function parseCreditsSafe(text: string): bigint {
  try {
    return parseCredits(text);
  } catch {
    return 0n;
  }
}
