import { describe, expect, it } from 'vitest';
import { createLogger } from '../logger.js';
import { ChatRequest, ChatStreamResponse, ErrorReason, RouterServiceClient, RouterServiceService, type RouterServiceServer } from '@gateway/proto';
import { createClient, errors, GatewayError, GrpcStatus, serverStream, startGrpcServer, unary } from './index.js';

const logger = createLogger('grpc-test', 'silent');

// The house gRPC helpers over a real server on port 0: typed errors cross the wire intact, and a
// stream that fails after some messages delivers those messages and then the typed status.
describe('gRPC helpers', () => {
  it('delivers streamed messages, then the typed error, to an async-iterating client', async () => {
    const implementation: Partial<RouterServiceServer> = {
      chat: unary(logger, 'Chat', async () => {
        throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_NO_UPSTREAM, 'No upstream available.', { retryAfterSeconds: 3 });
      }),
      chatStream: serverStream(logger, 'ChatStream', async function* () {
        yield ChatStreamResponse.fromPartial({ event: { $case: 'delta', value: { content: 'one' } } });
        yield ChatStreamResponse.fromPartial({ event: { $case: 'delta', value: { content: 'two' } } });
        throw errors.invalidRequest('Upstream returned an error: boom');
      }),
    };
    const server = await startGrpcServer({
      address: '127.0.0.1:0',
      services: [{ definition: RouterServiceService, implementation: implementation as RouterServiceServer, name: 'gateway.v1.RouterService' }],
      logger,
    });
    const client = createClient(RouterServiceClient, RouterServiceService, server.address);
    try {
      const unaryError = await client.chat(ChatRequest.fromPartial({ modelId: 'm' })).catch((error: unknown) => error);
      expect(unaryError).toBeInstanceOf(GatewayError);
      expect((unaryError as GatewayError).reason).toBe(ErrorReason.ERROR_REASON_NO_UPSTREAM);
      expect((unaryError as GatewayError).retryAfterSeconds).toBe(3);

      const received: string[] = [];
      let streamError: unknown;
      try {
        for await (const message of client.chatStream({ chat: undefined, combinedStart: false })) {
          if (message.event?.$case === 'delta') received.push(message.event.value.content);
        }
      } catch (error) {
        streamError = error;
      }
      expect(received).toEqual(['one', 'two']);
      expect(streamError).toBeInstanceOf(GatewayError);
      expect((streamError as GatewayError).reason).toBe(ErrorReason.ERROR_REASON_INVALID_REQUEST);
      expect((streamError as GatewayError).message).toBe('Upstream returned an error: boom');
    } finally {
      client.close();
      await server.stop();
    }
  });
});
