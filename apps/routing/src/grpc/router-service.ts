import type { ServerUnaryCall, ServerWritableStream } from '@grpc/grpc-js';
import { ErrorReason, GatewayError, GrpcStatus, errors, serverStream, unary, type Logger } from '@gateway/platform';
import type { ChatStreamRequest, RouterServiceServer } from '@gateway/proto';
import type { Router } from '../routing/router.js';

/** Aborts when the caller cancels or its deadline passes, so upstream work stops with it. */
function callSignal(call: ServerUnaryCall<unknown, unknown> | ServerWritableStream<unknown, unknown>): AbortSignal {
  const controller = new AbortController();
  if (call.cancelled) controller.abort();
  else call.once('cancelled', () => controller.abort(new Error('call cancelled')));
  return controller.signal;
}

function notYet(method: string) {
  return async () => {
    throw new GatewayError(GrpcStatus.UNIMPLEMENTED, ErrorReason.ERROR_REASON_UNSPECIFIED, `${method} is not implemented by the routing service yet.`);
  };
}

export function routerService(router: Router, logger: Logger): RouterServiceServer {
  return {
    chat: unary(logger, 'Chat', (request, call) => router.chat(request, callSignal(call))),
    chatStream: serverStream(logger, 'ChatStream', (request: ChatStreamRequest, call) => {
      if (!request.chat) throw errors.invalidRequest('ChatStreamRequest.chat is required', 'chat');
      return router.chatStream(request.chat, callSignal(call));
    }),
    embed: unary(logger, 'Embed', (request, call) => router.embed(request, callSignal(call))),
    moderate: unary(logger, 'Moderate', notYet('Moderate')),
    generateImages: unary(logger, 'GenerateImages', notYet('GenerateImages')),
    editImages: unary(logger, 'EditImages', notYet('EditImages')),
    speak: serverStream(logger, 'Speak', async function* () {
      yield* [];
      await notYet('Speak')();
    }),
    transcribe: unary(logger, 'Transcribe', notYet('Transcribe')),
  };
}
