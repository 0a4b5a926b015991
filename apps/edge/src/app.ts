import type { IncomingMessage, ServerResponse } from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import { isAcceptableRequestId, newRequestId } from '@gateway/platform';
import { clientRequestIdOf, requestIdOf, setRequestId, type EdgeContext } from './context.js';
import { echoed } from './echoed-value.js';
import { edgeErrors, toApiError, type Dialect } from './errors.js';
import { API_VERSION, ClientGoneError, sendError, sendJson } from './http.js';
import {
  activityHandler,
  balanceHandler,
  createKeyHandler,
  deleteKeyHandler,
  getKeyHandler,
  listKeysHandler,
  updateKeyHandler,
} from './routes/account-routes.js';
import { getModelHandler, listLimitsHandler, listModelsHandler, listStartupsHandler, sendStartupIcon, startupIconHandler } from './routes/catalog-routes.js';
import { chatCompletionsHandler } from './routes/chat-completions.js';

/**
 * The express app. Deliberately short middleware chain (express costs ~100 µs/request, DESIGN §2):
 * one middleware for the headers every answer carries, then the routes, which parse their own
 * bodies (no global body parser), then one error handler that applies the error table.
 */
export function createApp(context: EdgeContext): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  app.set('query parser', 'simple');

  app.use((request: Request, response: Response, next: NextFunction) => {
    stampRequest(request, response);
    next();
  });

  app.post('/v1/chat/completions', chatCompletionsHandler(context));
  app.get('/v1/models', listModelsHandler(context));
  app.get('/v1/models/*id', getModelHandler(context));
  app.get('/v1/startups', listStartupsHandler(context));
  app.get('/v1/startups/:id/icon.svg', startupIconHandler(context));
  app.get('/v1/limits', listLimitsHandler(context));
  app.get('/v1/account/balance', balanceHandler(context));
  app.post('/v1/account/keys', createKeyHandler(context));
  app.get('/v1/account/keys', listKeysHandler(context));
  app.get('/v1/account/keys/:keyId', getKeyHandler(context));
  app.patch('/v1/account/keys/:keyId', updateKeyHandler(context));
  app.delete('/v1/account/keys/:keyId', deleteKeyHandler(context));
  app.get('/v1/account/activity', activityHandler(context));
  app.get('/healthz', (_request: Request, response: Response) => {
    sendJson(response, context.catalogCache.ready ? 200 : 503, { status: context.catalogCache.ready ? 'ok' : 'starting' });
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
    // Dialect routes (e.g. a future /v1/messages) set `response.locals.dialect` to get their envelope.
    answerError(context, request, response, error, request.path, (response.locals.dialect as Dialect | undefined) ?? 'chat');
  });

  return app;
}

type Handler = (request: IncomingMessage, response: ServerResponse) => Promise<void>;

/**
 * The edge's HTTP request listener. The inference routes, asked for by their exact path, go straight
 * to their handlers: express's router, its request/response decoration and its middleware cost ~15% of
 * the edge's CPU per request in the bench, for nothing these handlers use. Every other request —
 * including the inference paths in another spelling (trailing slash, other case), which express routes
 * the same way — goes through the express app. Both paths stamp the same headers and answer errors
 * through the same table.
 */
export function createRequestListener(context: EdgeContext): (request: IncomingMessage, response: ServerResponse) => void {
  const app = createApp(context);
  const direct = new Map<string, { handler: Handler; dialect: Dialect }>([
    ['/v1/chat/completions', { handler: chatCompletionsHandler(context), dialect: 'chat' }],
  ]);
  return (request, response) => {
    const url = request.url ?? '';
    const query = url.indexOf('?');
    const route = request.method === 'POST' ? direct.get(query < 0 ? url : url.slice(0, query)) : undefined;
    if (route === undefined) {
      app(request, response);
      return;
    }
    stampRequest(request, response);
    route.handler(request, response).catch((error: unknown) => {
      answerError(context, request, response, error, query < 0 ? url : url.slice(0, query), route.dialect);
    });
  };
}

/**
 * The headers every answer carries, and the request's own gateway id. The gateway id is minted here for
 * every request and is the only key money moves under (reservation, usage event, charge): a caller's
 * `x-request-id` is a correlation id to echo and log, never trusted as a key — callers reusing one id,
 * concurrently or across accounts, would otherwise share one charge. The caller's id, when it is
 * acceptable, is echoed in `x-request-id`; `x-gateway-request-id` always names the gateway id.
 */
function stampRequest(request: IncomingMessage, response: ServerResponse): void {
  const requestId = newRequestId();
  const incoming = request.headers['x-request-id'];
  const clientRequestId = typeof incoming === 'string' && isAcceptableRequestId(incoming) ? incoming : undefined;
  setRequestId(response, requestId, clientRequestId);
  response.setHeader('x-request-id', clientRequestId ?? requestId);
  response.setHeader('x-gateway-request-id', requestId);
  response.setHeader('x-gateway-api-version', API_VERSION);
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
  if (apiError.status >= 500) {
    context.logger.error({ err: error, request_id: requestIdOf(response), client_request_id: clientRequestIdOf(response), path }, 'request failed');
  }
  sendError(request, response, resolved, dialect);
}
