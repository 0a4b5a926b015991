import { ErrorReason, GatewayError, GrpcStatus, unary, type Logger } from '@gateway/platform';
import { ResponsesStoreServiceService, type ResponsesStoreServiceServer } from '@gateway/proto';
import type { ResponsesStore } from './responses-store.js';
import type { BackgroundResponses } from './background-responses.js';

/** The ResponsesStore gRPC service (proto/gateway/v1/responses_store.proto): decode, call the store, encode. */
export function responsesStoreBinding(store: ResponsesStore, background: BackgroundResponses | undefined, logger: Logger) {
  const withBackground = <T>(work: (background: BackgroundResponses) => Promise<T>): Promise<T> => {
    if (!background) throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_UNSPECIFIED, 'This jobs service runs no background responses (it was started without the routing services).');
    return work(background);
  };
  const implementation: ResponsesStoreServiceServer = {
    putResponses: unary(logger, 'PutResponses', (request) => store.put(request.responses)),
    getResponse: unary(logger, 'GetResponse', async (request) => {
      const found = await store.get(request.accountId, request.responseId);
      const run = background ? await background.runOf(request.accountId, request.responseId) : undefined;
      return run ? { ...found, background: run } : found;
    }),
    deleteResponse: unary(logger, 'DeleteResponse', async (request) => {
      await store.delete(request.accountId, request.responseId);
      return {};
    }),
    listInputItems: unary(logger, 'ListInputItems', async (request) => {
      const page = await store.listInputItems(request.accountId, request.responseId, { after: request.after, limit: request.limit, ascending: request.ascending });
      return { itemsJson: page.items.map((item) => JSON.stringify(item)), hasMore: page.hasMore };
    }),
    createBackgroundResponse: unary(logger, 'CreateBackgroundResponse', (request) => withBackground(async (runs) => {
      await runs.create(request);
      return {};
    })),
    cancelBackgroundResponse: unary(logger, 'CancelBackgroundResponse', (request) => withBackground((runs) => runs.cancel(request.accountId, request.responseId))),
  };
  return { definition: ResponsesStoreServiceService, implementation, name: 'gateway.v1.ResponsesStoreService' };
}
