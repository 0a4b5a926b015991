import { unary, type Logger } from '@gateway/platform';
import { ResponsesStoreServiceService, type ResponsesStoreServiceServer } from '@gateway/proto';
import type { ResponsesStore } from './responses-store.js';

/** The ResponsesStore gRPC service (proto/gateway/v1/responses_store.proto): decode, call the store, encode. */
export function responsesStoreBinding(store: ResponsesStore, logger: Logger) {
  const implementation: ResponsesStoreServiceServer = {
    putResponses: unary(logger, 'PutResponses', (request) => store.put(request.responses)),
    getResponse: unary(logger, 'GetResponse', (request) => store.get(request.accountId, request.responseId)),
    deleteResponse: unary(logger, 'DeleteResponse', async (request) => {
      await store.delete(request.accountId, request.responseId);
      return {};
    }),
    listInputItems: unary(logger, 'ListInputItems', async (request) => {
      const page = await store.listInputItems(request.accountId, request.responseId, { after: request.after, limit: request.limit, ascending: request.ascending });
      return { itemsJson: page.items.map((item) => JSON.stringify(item)), hasMore: page.hasMore };
    }),
  };
  return { definition: ResponsesStoreServiceService, implementation, name: 'gateway.v1.ResponsesStoreService' };
}
