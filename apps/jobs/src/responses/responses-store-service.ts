import { ErrorReason, GatewayError, GrpcStatus, serverStream, unary, type Logger } from '@gateway/platform';
import { ResponsesStoreServiceService, type ResponsesStoreServiceServer, type StreamResponseEventsRequest, type StreamResponseEventsResponse } from '@gateway/proto';
import type { ResponsesStore } from './responses-store.js';
import { UNFINISHED, type BackgroundResponses } from './background-responses.js';
import type { BackgroundEvents } from './background-events.js';
import type { ConversationsStore } from './conversations-store.js';

/** The ResponsesStore gRPC service (proto/gateway/v1/responses_store.proto): decode, call the store, encode. */
export function responsesStoreBinding(store: ResponsesStore, background: BackgroundResponses | undefined, events: BackgroundEvents | undefined, logger: Logger, conversations: ConversationsStore) {
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
    createConversation: unary(logger, 'CreateConversation', async (request) => ({ conversation: await conversations.create(request) })),
    getConversation: unary(logger, 'GetConversation', async (request) => ({ conversation: await conversations.get(request.accountId, request.conversationId) })),
    updateConversation: unary(logger, 'UpdateConversation', async (request) => ({ conversation: await conversations.update(request.accountId, request.conversationId, request.metadataJson) })),
    deleteConversation: unary(logger, 'DeleteConversation', async (request) => {
      await conversations.delete(request.accountId, request.conversationId);
      return {};
    }),
    listConversationItems: unary(logger, 'ListConversationItems', async (request) => {
      const page = await conversations.list(request.accountId, request.conversationId, { after: request.after, limit: request.limit, ascending: request.ascending, allItems: request.allItems });
      return { itemsJson: page.items, hasMore: page.hasMore };
    }),
    addConversationItems: unary(logger, 'AddConversationItems', async (request) => {
      const added = await conversations.add(request.accountId, request.conversationId, request.itemsJson);
      return { itemsJson: added.map((item) => JSON.stringify(item)) };
    }),
    getConversationItem: unary(logger, 'GetConversationItem', async (request) => ({ itemJson: await conversations.getItem(request.accountId, request.conversationId, request.itemId) })),
    deleteConversationItem: unary(logger, 'DeleteConversationItem', async (request) => ({ conversation: await conversations.deleteItem(request.accountId, request.conversationId, request.itemId) })),
    listPendingConversationTurns: unary(logger, 'ListPendingConversationTurns', async (request) => ({
      turns: background ? await background.pendingTurns(request.accountId, request.conversationId) : [],
    })),
    appendConversationTurn: unary(logger, 'AppendConversationTurn', (request) => withBackground(async (runs) => ({
      appended: await runs.appendTurn(request.accountId, request.conversationId, request.responseId, request.itemsJson),
    }))),
    streamResponseEvents: serverStream(logger, 'StreamResponseEvents', (request, call) => streamRun(store, background, events, request, call)),
  };
  return { definition: ResponsesStoreServiceService, implementation, name: 'gateway.v1.ResponsesStoreService' };
}

/**
 * StreamResponseEvents: the stored response, the run's records from `from_seq` (then new ones as they
 * are written), and the run's final state once it ended. A response that is not a background one is
 * FAILED_PRECONDITION (OpenAI streams only background responses again).
 */
async function* streamRun(
  store: ResponsesStore,
  background: BackgroundResponses | undefined,
  events: BackgroundEvents | undefined,
  request: StreamResponseEventsRequest,
  call: { cancelled: boolean; once(event: 'cancelled', listener: () => void): unknown },
): AsyncGenerator<StreamResponseEventsResponse> {
  const found = await store.get(request.accountId, request.responseId);
  const run = background ? await background.runOf(request.accountId, request.responseId) : undefined;
  if (!background || !events || run === undefined) {
    throw new GatewayError(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_INVALID_REQUEST, 'Only a background response (created with `background: true`) can be streamed again; retrieve this one without `stream`.', { code: 'invalid_request' });
  }
  yield { event: { $case: 'response', value: { ...found, background: run } } };
  let status: string | undefined = run.status;
  const finished = async () => {
    status = await background.statusOf(request.accountId, request.responseId);
    return status === undefined || !(UNFINISHED as readonly string[]).includes(status);
  };
  for await (const record of events.follow(request.accountId, request.responseId, request.fromSeq, finished, call)) {
    yield { event: { $case: 'record', value: record } };
  }
  if (call.cancelled || status === undefined) return;
  const ended = await background.runOf(request.accountId, request.responseId);
  if (ended) yield { event: { $case: 'end', value: ended } };
}
