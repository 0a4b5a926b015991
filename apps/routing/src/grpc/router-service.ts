import type { ServerUnaryCall, ServerWritableStream } from '@grpc/grpc-js';
import { errors, serverStream, unary, type CallerSignal, type Logger } from '@gateway/platform';
import { ChatResponse, ChatStreamResponse, ExchangeResponse, RouterServiceService, type ChatStreamRequest, type ProviderStat, type RouterServiceServer } from '@gateway/proto';
import type { Router } from '../routing/router.js';
import { asBuffer, reusedWriterEncoder } from '@gateway/proto';
import { ExchangeService, serializeExchangeResponse } from './exchange.js';
import { RoutingLoad } from '../observability/routing-metrics.js';

type Call = ServerUnaryCall<unknown, unknown> | ServerWritableStream<unknown, unknown>;

/**
 * The call's cancellation (client cancel or deadline) as the router reads it, so upstream work stops
 * with it. An adapter over the call's 'cancelled' event rather than an AbortController per request:
 * only the per-attempt controller the HTTP client needs is created.
 */
class CallCancellation implements CallerSignal {
  constructor(private readonly call: Call) {}

  get aborted(): boolean {
    return this.call.cancelled;
  }

  get reason(): unknown {
    return this.call.cancelled ? new Error('call cancelled') : undefined;
  }

  addEventListener(_type: 'abort', listener: () => void): void {
    this.call.once('cancelled', listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    this.call.off('cancelled', listener);
  }
}

const encodeChatResponse = reusedWriterEncoder(ChatResponse);
const encodeChatStreamResponse = reusedWriterEncoder(ChatStreamResponse);

/**
 * The generated service definition with the hot answers (Chat, ChatStream parts) encoded on reused
 * writers and handed to grpc-js without the extra copy of `Buffer.from(bytes)`. Same bytes on the wire.
 */
export const routerServiceDefinition: typeof RouterServiceService = {
  ...RouterServiceService,
  chat: { ...RouterServiceService.chat, responseSerialize: (value: ChatResponse) => asBuffer(encodeChatResponse(value)) },
  chatStream: { ...RouterServiceService.chatStream, responseSerialize: (value: ChatStreamResponse) => asBuffer(encodeChatStreamResponse(value)) },
  // Exchange frames may come encoded already (a batch, or a frame gathered for one).
  exchange: { ...RouterServiceService.exchange, responseSerialize: serializeExchangeResponse as (value: ExchangeResponse) => Buffer },
};

/** Work the jobs service marked as giving way to interactive traffic (RequestContext.low_priority). */
const yields = (request: { context?: { lowPriority?: boolean | undefined } | undefined } | undefined): boolean => request?.context?.lowPriority === true;

export interface RouterServiceParts {
  exchanges?: ExchangeService;
  /** GetProviderHealth's rows: the replica's ProviderHealth report over the catalog's offers. */
  providerHealth: () => ProviderStat[];
  /** Counts every call in flight (gateway_routing_requests_in_flight); the exchanges count theirs in ExchangeService. */
  load?: RoutingLoad;
}

export function routerService(router: Router, logger: Logger, parts: RouterServiceParts): RouterServiceServer {
  const exchanges = parts.exchanges ?? new ExchangeService(router, logger, parts.load);
  const load = parts.load ?? new RoutingLoad();
  return {
    exchange: exchanges.handler,
    getProviderHealth: unary(logger, 'GetProviderHealth', () => Promise.resolve({ stats: parts.providerHealth() })),
    getLoad: unary(logger, 'GetLoad', () => {
      const figures = load.interactiveLoad();
      return Promise.resolve({ interactiveInFlight: figures.inFlight, interactiveStarted: BigInt(figures.started), eventLoopUtilization: figures.eventLoopUtilization });
    }),
    chat: unary(logger, 'Chat', (request, call) => load.unary(() => router.chat(request, new CallCancellation(call)), yields(request))),
    chatStream: serverStream(logger, 'ChatStream', (request: ChatStreamRequest, call) => {
      if (!request.chat) throw errors.invalidRequest('ChatStreamRequest.chat is required', 'chat');
      load.serverStream(call, yields(request.chat));
      return router.chatStream(request.chat, new CallCancellation(call), { combinedStart: request.combinedStart });
    }),
    embed: unary(logger, 'Embed', (request, call) => load.unary(() => router.embed(request, new CallCancellation(call)), yields(request))),
    moderate: unary(logger, 'Moderate', (request, call) => load.unary(() => router.moderate(request, new CallCancellation(call)), yields(request))),
    generateImages: unary(logger, 'GenerateImages', (request, call) => load.unary(() => router.generateImages(request, new CallCancellation(call)))),
    editImages: unary(logger, 'EditImages', (request, call) => load.unary(() => router.editImages(request, new CallCancellation(call)))),
    speak: serverStream(logger, 'Speak', (request, call) => {
      load.serverStream(call);
      return router.speak(request, new CallCancellation(call));
    }),
    transcribe: unary(logger, 'Transcribe', (request, call) => load.unary(() => router.transcribe(request, new CallCancellation(call)))),
  };
}
