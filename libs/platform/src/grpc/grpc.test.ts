import { describe, expect, it } from 'vitest';
import { createLogger } from '../logger.js';
import { ChatRequest, ChatStreamResponse, ErrorReason, RouterServiceClient, RouterServiceService, type RouterServiceServer } from '@gateway/proto';
import { createClient, errors, GatewayError, GrpcStatus, neverSent, serverStream, startGrpcServer, unary } from './index.js';

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

  it('a call to an address nobody listens on never left (neverSent); a server that is back is reached within about a second', async () => {
    const serve = (address: string) => startGrpcServer({
      address,
      services: [{
        definition: RouterServiceService,
        implementation: { chat: unary(logger, 'Chat', async () => { throw new GatewayError(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_INTERNAL, 'router stopping'); }) } as unknown as RouterServiceServer,
        name: 'gateway.v1.RouterService',
      }],
      logger,
    });
    let server = await serve('127.0.0.1:0');
    const address = server.address;
    const client = createClient(RouterServiceClient, RouterServiceService, address);
    try {
      // Reached: an UNAVAILABLE the server itself answered may have done work; it is not neverSent.
      const answered = await client.chat(ChatRequest.fromPartial({ modelId: 'm' })).catch((error: unknown) => error);
      expect((answered as GatewayError).status).toBe(GrpcStatus.UNAVAILABLE);
      expect(neverSent(answered)).toBe(false);
      await server.stop(0);
      // Down for 3 s: grpc-js's default backoff (1 s growing 1.6×) would by now wait ~2.5 s between attempts.
      const downUntil = Date.now() + 3_000;
      let refused: unknown;
      while (Date.now() < downUntil) {
        refused = await client.chat(ChatRequest.fromPartial({ modelId: 'm' }), { deadlineMs: 500 }).catch((error: unknown) => error);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(refused).toBeInstanceOf(GatewayError);
      expect(neverSent(refused)).toBe(true);
      server = await serve(address);
      const backAt = Date.now();
      for (;;) {
        const outcome = await client.chat(ChatRequest.fromPartial({ modelId: 'm' }), { deadlineMs: 500 }).catch((error: unknown) => error);
        if (!neverSent(outcome)) break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(Date.now() - backAt).toBeLessThan(1_500);
    } finally {
      client.close();
      await server.stop(0);
    }
  }, 20_000);
});
