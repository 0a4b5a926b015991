import express, { type NextFunction, type Request, type Response } from 'express';
import { acceptRequestId } from '@gateway/platform';
import type { EdgeContext } from './context.js';
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
    const incoming = request.headers['x-request-id'];
    const requestId = acceptRequestId(typeof incoming === 'string' ? incoming : undefined);
    response.locals.requestId = requestId;
    response.setHeader('x-request-id', requestId);
    response.setHeader('x-gateway-api-version', API_VERSION);
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
    if (error instanceof ClientGoneError) {
      response.destroy();
      return;
    }
    // express's own body/URL failures (e.g. a malformed percent-encoding) carry a 4xx status.
    const status = (error as { status?: unknown })?.status;
    const resolved =
      typeof status === 'number' && status >= 400 && status < 500 && !(error instanceof Error && 'apiError' in error)
        ? edgeErrors.invalidRequest((error as Error).message || 'Bad request.')
        : error;
    const apiError = toApiError(resolved);
    if (apiError.status >= 500) {
      context.logger.error({ err: error, request_id: response.locals.requestId, path: request.path }, 'request failed');
    }
    // Dialect routes (e.g. a future /v1/messages) set `response.locals.dialect` to get their envelope.
    sendError(request, response, resolved, (response.locals.dialect as Dialect | undefined) ?? 'chat');
  });

  return app;
}
