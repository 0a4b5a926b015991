import type { IncomingMessage, ServerResponse } from 'node:http';
import { embeddingsFamily } from './endpoints/embeddings/embeddings-endpoint.js';
import { moderationsFamily } from './endpoints/moderations/moderations-endpoint.js';
import { imageEditsFamily, imageGenerationsFamily } from './endpoints/images/images-endpoint.js';
import { hostedImageHandler } from './endpoints/images/hosted-images.js';
import { speechFamily, transcriptionsFamily, translationsFamily } from './endpoints/audio/audio-endpoint.js';
import type { EndpointFamily } from './endpoints/shared.js';
import express, { type NextFunction, type Request, type Response } from 'express';
import { isAcceptableRequestId, newRequestId, otelContext, startHttpServerSpan, tracingEnabled } from '@gateway/platform';
import type { EdgeContext } from './context.js';
import { clientRequestIdOf, requestIdOf, setRequestId } from './request-id.js';
import { echoed } from './echoed-value.js';
import { controlCharacterRefusal } from './url-guard.js';
import { edgeErrors, toApiError, type Dialect } from './errors.js';
import { API_VERSION, ClientGoneError, sendError, sendJson } from './http.js';
import type { Readiness } from './observability/readiness.js';
import type { RequestTracker } from './observability/request-tracker.js';
import {
  activityHandler,
  balanceHandler,
  createKeyHandler,
  deleteKeyHandler,
  getKeyHandler,
  listKeysHandler,
  updateKeyHandler,
} from './routes/account-routes.js';
import { accountAuditHandler, adminAuditHandler } from './routes/audit-routes.js';
import { deleteBudgetHandler, getLowBalanceHandler, listBudgetsHandler, putBudgetHandler, setLowBalanceHandler } from './routes/budget-routes.js';
import {
  createWebhookHandler, deleteWebhookHandler, getWebhookHandler, listWebhookDeliveriesHandler, listWebhooksHandler, redeliverWebhookHandler, rotateWebhookSecretHandler, updateWebhookHandler,
} from './routes/webhook-routes.js';
import { addMemberHandler, listMembersHandler, removeMemberHandler, updateMemberHandler } from './routes/member-routes.js';
import { adminAccountsHandler, adminModelLatencyHandler, adminProvidersHandler, adminTopUpHandler } from './routes/admin-routes.js';
import { generationHandler, listGenerationsHandler } from './routes/generation-routes.js';
import { logoutHandler, notConfiguredHandler, sessionHandler, type SignIn } from './sign-in/sign-in-routes.js';
import { cancelBatchHandler, createBatchHandler, getBatchHandler, listBatchesHandler } from './routes/batches-routes.js';
import {
  cancelMessageBatchHandler, createMessageBatchHandler, deleteMessageBatchHandler, getMessageBatchHandler, listMessageBatchesHandler, messageBatchResultsHandler,
} from './routes/message-batches-routes.js';
import { deleteFileHandler, fileContentHandler, getFileHandler, listFilesHandler, uploadFileHandler } from './routes/files-routes.js';
import { consoleHandler, DEFAULT_CONSOLE_DIR, isConsolePath, setConsoleSecurityHeaders } from './console-static.js';
import { getModelHandler, listLimitsHandler, listModelsHandler, listStartupsHandler, sendStartupIcon, startupIconHandler } from './routes/catalog-routes.js';
import { chatDialect } from './dialects/chat/chat-dialect.js';
import { countTokensHandler } from './dialects/messages/count-tokens.js';
import { messagesDialect } from './dialects/messages/messages-dialect.js';
import { responsesCompactDialect } from './dialects/responses/compaction.js';
import { inputTokensHandler } from './dialects/responses/input-tokens.js';
import { responsesDialect } from './dialects/responses/responses-dialect.js';
import { storedResponseSteps } from './dialects/responses/stored-response-steps.js';
import { cancelResponseHandler, deleteResponseHandler, listInputItemsHandler, retrieveResponseHandler } from './routes/stored-response-routes.js';
import {
  addConversationItemsHandler,
  createConversationHandler,
  deleteConversationHandler,
  deleteConversationItemHandler,
  listConversationItemsHandler,
  retrieveConversationHandler,
  retrieveConversationItemHandler,
  updateConversationHandler,
} from './routes/conversation-routes.js';
import type { InferenceSteps } from './inference/pipeline-steps.js';
import type { InferenceDialect } from './inference/dialect.js';
import { chatSteps } from './inference/chat-steps.js';
import { inferenceHandler, type InferenceHandler } from './inference/pipeline.js';

/**
 * THE inference route table (DESIGN §6): each route is the one pipeline with its dialect's steps. It feeds
 * both the direct dispatch (createRequestListener) and express, and names each route's error envelope.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- each entry pairs a dialect with its own body type
const INFERENCE_ROUTES: readonly { path: string; dialect: InferenceDialect<any>; steps?: InferenceSteps<any, any> }[] = [
  { path: '/v1/chat/completions', dialect: chatDialect },
  { path: '/v1/messages', dialect: messagesDialect },
  // Over HTTP the responses dialect stores its answers and continues stored ones (stored-response-steps.ts).
  { path: '/v1/responses', dialect: responsesDialect, steps: storedResponseSteps },
  { path: '/v1/responses/compact', dialect: responsesCompactDialect },
];

/**
 * Routes of a dialect that call no model, beside the pipeline (nothing to admit or settle): their own
 * handler, dispatched like the inference routes, with their dialect's error envelope.
 */
const SIDE_ROUTES: readonly { path: string; handler: (context: EdgeContext) => InferenceHandler; errorDialect: Dialect; endpoint: string }[] = [
  { path: '/v1/messages/count_tokens', handler: countTokensHandler, errorDialect: 'messages', endpoint: 'messages' },
  { path: '/v1/responses/input_tokens', handler: inputTokensHandler, errorDialect: 'chat', endpoint: 'responses' },
];

/**
 * The non-chat endpoint families (DESIGN §6: `endpoints/<family>/`), each the one pipeline with the
 * family's steps; the OpenAI envelope for errors.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- each entry pairs a family with its own body type
const ENDPOINT_ROUTES: readonly { path: string; family: EndpointFamily<any, any> }[] = [
  { path: '/v1/embeddings', family: embeddingsFamily },
  { path: '/v1/moderations', family: moderationsFamily },
  { path: '/v1/images/generations', family: imageGenerationsFamily },
  { path: '/v1/images/edits', family: imageEditsFamily },
  { path: '/v1/audio/speech', family: speechFamily },
  { path: '/v1/audio/transcriptions', family: transcriptionsFamily },
  { path: '/v1/audio/translations', family: translationsFamily },
];

interface InferenceRoute {
  handler: InferenceHandler;
  dialect: Dialect;
  /** The dialect's endpoint (chat.completions, messages, ...): the `dialect` of metrics and access logs. */
  endpoint: string;
}

function inferenceRoutes(context: EdgeContext): Map<string, InferenceRoute> {
  return new Map<string, InferenceRoute>([
    ...INFERENCE_ROUTES.map((route): [string, InferenceRoute] => [
      route.path,
      { handler: inferenceHandler(context, route.steps ?? chatSteps(route.dialect)), dialect: route.dialect.errorDialect, endpoint: route.dialect.endpoint },
    ]),
    ...SIDE_ROUTES.map((route): [string, InferenceRoute] => [route.path, { handler: route.handler(context), dialect: route.errorDialect, endpoint: route.endpoint }]),
    ...ENDPOINT_ROUTES.map((route): [string, InferenceRoute] => [route.path, { handler: inferenceHandler(context, route.family), dialect: 'chat', endpoint: route.family.endpoint }]),
  ]);
}

/** The envelope of a request no route serves: the messages dialect's under its prefix (its SDK reads no other). */
function unroutedDialect(path: string): Dialect | undefined {
  return path.toLowerCase().startsWith('/v1/messages/') ? 'messages' : undefined;
}

/**
 * The express app. Deliberately short middleware chain (express costs ~100 µs/request, DESIGN §2):
 * one middleware for the headers every answer carries, then the routes, which parse their own
 * bodies (no global body parser), then one error handler that applies the error table.
 */
export function createApp(context: EdgeContext, readiness?: Readiness, signIn?: SignIn): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  app.set('query parser', 'simple');

  const routes = inferenceRoutes(context);
  app.use((request: Request, response: Response, next: NextFunction) => {
    const dialect = routes.get(request.path)?.dialect ?? unroutedDialect(request.path);
    // Whatever answers (a route, or the 404 below for a wrong method or path), it answers in this envelope.
    if (dialect) response.locals.dialect = dialect;
    // createRequestListener stamps every request first; this covers the app used on its own.
    if (requestIdOf(response) === '') stampRequest(request, response, dialect);
    // The console's pages and its errors alike, also a refusal below, carry its security headers.
    if (isConsolePath(request.path)) setConsoleSecurityHeaders(response);
    // Ids, cursors and filters with a control character never reach a handler (url-guard.ts).
    next(controlCharacterRefusal(request.url));
  });

  for (const [path, route] of routes) {
    app.post(path, (request: Request, response: Response, next: NextFunction) => {
      response.locals.dialect = route.dialect;
      route.handler(request, response).catch(next);
    });
  }
  app.get('/v1/responses/:id', retrieveResponseHandler(context));
  app.delete('/v1/responses/:id', deleteResponseHandler(context));
  app.get('/v1/responses/:id/input_items', listInputItemsHandler(context));
  app.post('/v1/responses/:id/cancel', cancelResponseHandler(context));
  app.post('/v1/conversations', createConversationHandler(context));
  app.get('/v1/conversations/:id', retrieveConversationHandler(context));
  app.post('/v1/conversations/:id', updateConversationHandler(context));
  app.delete('/v1/conversations/:id', deleteConversationHandler(context));
  app.get('/v1/conversations/:id/items', listConversationItemsHandler(context));
  app.post('/v1/conversations/:id/items', addConversationItemsHandler(context));
  app.get('/v1/conversations/:id/items/:itemId', retrieveConversationItemHandler(context));
  app.delete('/v1/conversations/:id/items/:itemId', deleteConversationItemHandler(context));
  app.get('/v1/models', listModelsHandler(context));
  app.get('/v1/models/*id', getModelHandler(context));
  app.get('/v1/startups', listStartupsHandler(context));
  app.get('/v1/startups/:id/icon.svg', startupIconHandler(context));
  app.get('/v1/limits', listLimitsHandler(context));
  app.get('/v1/images/files/:imageId', hostedImageHandler(context));
  app.get('/v1/account/balance', balanceHandler(context));
  app.post('/v1/account/keys', createKeyHandler(context));
  app.get('/v1/account/keys', listKeysHandler(context));
  app.get('/v1/account/keys/:keyId', getKeyHandler(context));
  app.patch('/v1/account/keys/:keyId', updateKeyHandler(context));
  app.delete('/v1/account/keys/:keyId', deleteKeyHandler(context));
  app.get('/v1/account/activity', activityHandler(context));
  app.get('/v1/account/audit', accountAuditHandler(context));
  app.get('/v1/account/budgets', listBudgetsHandler(context));
  app.put('/v1/account/budgets/account', putBudgetHandler(context));
  app.delete('/v1/account/budgets/account', deleteBudgetHandler(context));
  app.put('/v1/account/budgets/keys/:keyId', putBudgetHandler(context));
  app.delete('/v1/account/budgets/keys/:keyId', deleteBudgetHandler(context));
  app.get('/v1/account/budgets/low-balance', getLowBalanceHandler(context));
  app.put('/v1/account/budgets/low-balance', setLowBalanceHandler(context, false));
  app.delete('/v1/account/budgets/low-balance', setLowBalanceHandler(context, true));
  app.post('/v1/account/webhooks', createWebhookHandler(context));
  app.get('/v1/account/webhooks', listWebhooksHandler(context));
  app.get('/v1/account/webhooks/:webhookId', getWebhookHandler(context));
  app.patch('/v1/account/webhooks/:webhookId', updateWebhookHandler(context));
  app.delete('/v1/account/webhooks/:webhookId', deleteWebhookHandler(context));
  app.get('/v1/account/webhooks/:webhookId/deliveries', listWebhookDeliveriesHandler(context));
  app.post('/v1/account/webhooks/:webhookId/deliveries/:deliveryId/redeliver', redeliverWebhookHandler(context));
  app.post('/v1/account/webhooks/:webhookId/rotate-secret', rotateWebhookSecretHandler(context));
  app.get('/v1/account/members', listMembersHandler(context));
  app.post('/v1/account/members', addMemberHandler(context));
  app.patch('/v1/account/members/:memberId', updateMemberHandler(context));
  app.delete('/v1/account/members/:memberId', removeMemberHandler(context));
  app.get('/v1/generation', generationHandler(context));
  app.get('/v1/admin/providers', adminProvidersHandler(context));
  app.get('/v1/admin/models/latency', adminModelLatencyHandler(context));
  app.get('/v1/admin/accounts', adminAccountsHandler(context));
  app.post('/v1/admin/accounts/:accountId/credits', adminTopUpHandler(context));
  app.get('/v1/admin/audit', adminAuditHandler(context));
  app.get('/v1/account/generations', listGenerationsHandler(context));
  // Sign-in with the identity provider (sign-in/sign-in-routes.ts). Sessions are honoured on every edge;
  // only an edge configured with an issuer starts a sign-in.
  app.get('/v1/auth/login', signIn ? signIn.login() : notConfiguredHandler());
  app.get('/v1/auth/callback', signIn ? signIn.callback() : notConfiguredHandler());
  app.get('/v1/auth/session', sessionHandler(context));
  app.post('/v1/auth/logout', logoutHandler(context, signIn?.options.secureCookies));
  // The Files API (routes/files-routes.ts, docs/jobs.md), served by the jobs service.
  app.post('/v1/files', uploadFileHandler(context, context.files));
  app.get('/v1/files', listFilesHandler(context));
  app.get('/v1/files/:fileId', getFileHandler(context));
  app.get('/v1/files/:fileId/content', fileContentHandler(context));
  app.delete('/v1/files/:fileId', deleteFileHandler(context));
  // The Batch API (routes/batches-routes.ts, docs/jobs.md): lines run by the jobs service at batch prices.
  app.post('/v1/batches', createBatchHandler(context));
  app.get('/v1/batches', listBatchesHandler(context));
  app.get('/v1/batches/:batchId', getBatchHandler(context));
  app.post('/v1/batches/:batchId/cancel', cancelBatchHandler(context));
  // Anthropic Message Batches (routes/message-batches-routes.ts, docs/jobs.md): the same runner, the messages envelope.
  app.post('/v1/messages/batches', createMessageBatchHandler(context));
  app.get('/v1/messages/batches', listMessageBatchesHandler(context));
  app.get('/v1/messages/batches/:batchId', getMessageBatchHandler(context));
  app.delete('/v1/messages/batches/:batchId', deleteMessageBatchHandler(context));
  app.post('/v1/messages/batches/:batchId/cancel', cancelMessageBatchHandler(context));
  app.get('/v1/messages/batches/:batchId/results', messageBatchResultsHandler(context));
  app.get('/healthz', (_request: Request, response: Response) => {
    sendJson(response, context.catalogCache.ready ? 200 : 503, { status: context.catalogCache.ready ? 'ok' : 'starting' });
  });
  // Liveness: the process answers (a restart would not fix anything this one reports).
  // The web console's files (console-static.ts): its own CSP and cache headers.
  app.use('/console', consoleHandler(context.consoleDir ?? DEFAULT_CONSOLE_DIR));
  app.get('/livez', (_request: Request, response: Response) => {
    sendJson(response, 200, { status: 'ok' });
  });
  // Readiness: catalog loaded, auth/ledger/routing SERVING, not draining (observability/readiness.ts).
  app.get('/readyz', async (_request: Request, response: Response) => {
    const report = readiness ? await readiness.report() : { ready: context.catalogCache.ready, checks: {} };
    sendJson(response, report.ready ? 200 : 503, { status: report.ready ? 'ok' : 'unavailable', checks: report.checks });
  });

  app.use(async (request: Request, response: Response) => {
    // The catalog's icon_url may name any path (e.g. /static/startups/acme.svg): serve it from there too.
    const startupId = request.method === 'GET' ? context.catalogCache.startupIdForIconPath(request.path) : undefined;
    if (startupId !== undefined) {
      await sendStartupIcon(context, startupId, response);
      return;
    }
    throw edgeErrors.routeNotFound(request.method, request.path);
  });

  app.use((error: unknown, request: Request, response: Response, _next: NextFunction) => {
    // Dialect routes (and unrouted paths under /v1/messages/) set `response.locals.dialect` to get their envelope.
    answerError(context, request, response, error, request.path, (response.locals.dialect as Dialect | undefined) ?? 'chat');
  });

  return app;
}

/**
 * The edge's HTTP request listener. The inference routes, asked for by their exact path, go straight
 * to their handlers: express's router, its request/response decoration and its middleware cost ~15% of
 * the edge's CPU per request in the bench, for nothing these handlers use. Every other request —
 * including the inference paths in another spelling (trailing slash, other case), which express routes
 * the same way — goes through the express app. Both paths stamp the same headers and answer errors
 * through the same table.
 */
export function createRequestListener(
  context: EdgeContext,
  tracker: RequestTracker,
  readiness?: Readiness,
  signIn?: SignIn,
): (request: IncomingMessage, response: ServerResponse) => void {
  const app = createApp(context, readiness, signIn);
  const direct = inferenceRoutes(context);
  return (request, response) => {
    const url = request.url ?? '';
    const query = url.indexOf('?');
    const path = query < 0 ? url : url.slice(0, query);
    const inference = direct.get(path);
    const route = request.method === 'POST' ? inference : undefined;
    const dialect = inference?.dialect ?? unroutedDialect(path);
    stampRequest(request, response, dialect);
    // The request's span (tracing on): the root of its trace, or the child of the caller's traceparent.
    const traced = tracingEnabled() ? startHttpServerSpan(request, requestIdOf(response)) : undefined;
    // Load shedding, before the body is read and before admission: a shed request costs nothing.
    const refusal = tracker.begin(request, response, path, route === undefined ? undefined : path, inference?.endpoint, traced?.span);
    if (refusal !== undefined) {
      sendError(request, response, refusal, dialect ?? 'chat');
      return;
    }
    const dispatch = () => {
      if (route === undefined) {
        app(request, response);
        return;
      }
      route.handler(request, response).catch((error: unknown) => {
        answerError(context, request, response, error, path, route.dialect);
      });
    };
    if (traced === undefined) dispatch();
    else otelContext.with(traced.context, dispatch);
  };
}

/**
 * The headers every answer carries, and the request's own gateway id. The gateway id is minted here for
 * every request and is the only key money moves under (reservation, usage event, charge): a caller's
 * `x-request-id` is a correlation id to echo and log, never trusted as a key — callers reusing one id,
 * concurrently or across accounts, would otherwise share one charge. The caller's id, when it is
 * acceptable, is echoed in `x-request-id`; `x-gateway-request-id` always names the gateway id.
 */
function stampRequest(request: IncomingMessage, response: ServerResponse, dialect: Dialect | undefined): void {
  const requestId = newRequestId();
  const incoming = request.headers['x-request-id'];
  const clientRequestId = typeof incoming === 'string' && isAcceptableRequestId(incoming) ? incoming : undefined;
  setRequestId(response, requestId, clientRequestId);
  response.setHeader('x-request-id', clientRequestId ?? requestId);
  response.setHeader('x-gateway-request-id', requestId);
  response.setHeader('x-gateway-api-version', API_VERSION);
  // The messages dialect's SDK reads its request id from `request-id` (wire-formats.md).
  if (dialect === 'messages') response.setHeader('request-id', requestId);
}

function answerError(context: EdgeContext, request: IncomingMessage, response: ServerResponse, error: unknown, path: string, dialect: Dialect): void {
  if (error instanceof ClientGoneError) {
    response.destroy();
    return;
  }
  // express's own body/URL failures (e.g. a malformed percent-encoding) carry a 4xx status.
  const status = (error as { status?: unknown })?.status;
  const resolved =
    typeof status === 'number' && status >= 400 && status < 500 && !(error instanceof Error && 'apiError' in error)
      ? edgeErrors.invalidRequest(echoed((error as Error).message || 'Bad request.'))
      : error;
  const apiError = toApiError(resolved);
  if (apiError.status === 503) {
    // An expected condition (no upstream left, overload), not a fault of ours: one warning, no stack.
    context.logger.warn(
      { request_id: requestIdOf(response), client_request_id: clientRequestIdOf(response), path, code: apiError.code, reason: error instanceof Error ? error.message : String(error) },
      'request refused: service unavailable',
    );
  } else if (apiError.status >= 500) {
    context.logger.error({ err: error, request_id: requestIdOf(response), client_request_id: clientRequestIdOf(response), path }, 'request failed');
  }
  sendError(request, response, resolved, dialect);
}
