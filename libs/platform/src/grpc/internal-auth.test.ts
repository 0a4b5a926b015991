import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ChatStreamResponse,
  LedgerServiceClient,
  LedgerServiceService,
  RouterServiceClient,
  RouterServiceService,
  type LedgerServiceServer,
  type RouterServiceServer,
} from '@gateway/proto';
import { createLogger } from '../logger.js';
import { ConfigError, internalAuthFromEnv } from '../config.js';
import { createClient, createHealthClient, GatewayError, GrpcStatus, serverStream, startGrpcServer, unary, type RunningGrpcServer } from './index.js';

const logger = createLogger('internal-auth-test', 'silent');
const SERVICE = 'service-token-for-the-internal-auth-test-01';
const ADMIN = 'admin-token-for-the-internal-auth-test-0001';
const ROTATED = 'the-previous-service-token-still-accepted-1';

// A real gRPC server with internal authentication on: every RPC behind the credential check, admin
// RPCs behind the admin credential, health open to probes.
describe('internal gRPC authentication', () => {
  let server: RunningGrpcServer;
  const handled: string[] = [];

  beforeAll(async () => {
    const ledger: Partial<LedgerServiceServer> = {
      getBalance: unary(logger, 'GetBalance', async () => {
        handled.push('getBalance');
        return { balance: '1', available: '1', reserved: '0' };
      }),
      topUp: unary(logger, 'TopUp', async () => {
        handled.push('topUp');
        return { balance: '2' };
      }),
      getModelLatency: unary(logger, 'GetModelLatency', async () => {
        handled.push('getModelLatency');
        return { models: [] };
      }),
    };
    const router: Partial<RouterServiceServer> = {
      chatStream: serverStream(logger, 'ChatStream', async function* () {
        handled.push('chatStream');
        yield ChatStreamResponse.fromPartial({ event: { $case: 'delta', value: { content: 'hi' } } });
      }),
    };
    server = await startGrpcServer({
      address: '127.0.0.1:0',
      services: [
        { definition: LedgerServiceService, implementation: ledger as LedgerServiceServer, name: 'gateway.v1.LedgerService' },
        { definition: RouterServiceService, implementation: router as RouterServiceServer, name: 'gateway.v1.RouterService' },
      ],
      logger,
      credentials: { service: [SERVICE, ROTATED], admin: [ADMIN] },
    });
  });

  afterAll(async () => {
    await server?.stop();
  });

  const ledgerAs = (credential?: string) => createClient(LedgerServiceClient, LedgerServiceService, server.address, { credential, maxAttempts: 1 });
  const refusal = (promise: Promise<unknown>) => promise.then(() => undefined, (error: unknown) => error as GatewayError);

  it('refuses a call without a credential, or with an unknown one, as UNAUTHENTICATED before the handler runs', async () => {
    handled.length = 0;
    for (const credential of [undefined, 'not-a-token-the-server-knows-at-all-xxxxxx']) {
      const client = ledgerAs(credential);
      try {
        const error = await refusal(client.getBalance({ accountId: 'acc_1' }));
        expect(error).toBeInstanceOf(GatewayError);
        expect(error!.status).toBe(GrpcStatus.UNAUTHENTICATED);
        expect(error!.message).toContain('x-gateway-credential');
      } finally {
        client.close();
      }
    }
    expect(handled).toEqual([]);
  });

  it('serves a service credential (also a rotated one) but refuses it admin RPCs as PERMISSION_DENIED', async () => {
    handled.length = 0;
    for (const credential of [SERVICE, ROTATED]) {
      const client = ledgerAs(credential);
      try {
        expect((await client.getBalance({ accountId: 'acc_1' })).balance).toBe('1');
        const error = await refusal(client.topUp({ accountId: 'acc_1', credits: '1', idempotencyKey: 'k', note: '' }));
        expect(error?.status).toBe(GrpcStatus.PERMISSION_DENIED);
        expect(error?.message).toContain('admin credential');
        // GetModelLatency reads every account's records: operators only.
        expect((await refusal(client.getModelLatency({ days: 1 })))?.status).toBe(GrpcStatus.PERMISSION_DENIED);
      } finally {
        client.close();
      }
    }
    expect(handled).toEqual(['getBalance', 'getBalance']);
  });

  it('lets the admin credential call admin RPCs and every other RPC', async () => {
    const client = ledgerAs(ADMIN);
    try {
      expect((await client.topUp({ accountId: 'acc_1', credits: '1', idempotencyKey: 'k', note: '' })).balance).toBe('2');
      expect((await client.getBalance({ accountId: 'acc_1' })).balance).toBe('1');
      expect((await client.getModelLatency({ days: 1 })).models).toEqual([]);
    } finally {
      client.close();
    }
  });

  it("sends a call's own credential instead of the client's, for that call only (unary and streaming)", async () => {
    handled.length = 0;
    const asService = ledgerAs(SERVICE);
    const asAdmin = ledgerAs(ADMIN);
    const router = createClient(RouterServiceClient, RouterServiceService, server.address);
    try {
      // The service client passes an admin RPC with the operator's token on the call…
      expect((await asService.topUp({ accountId: 'acc_1', credits: '1', idempotencyKey: 'k', note: '' }, { credential: ADMIN })).balance).toBe('2');
      // …and the next call without one carries the client's again.
      expect((await refusal(asService.topUp({ accountId: 'acc_1', credits: '1', idempotencyKey: 'k', note: '' })))?.status).toBe(GrpcStatus.PERMISSION_DENIED);
      // It replaces the client's credential rather than adding one: the admin client's call with a service token is refused an admin RPC.
      expect((await refusal(asAdmin.getModelLatency({ days: 1 }, { credential: SERVICE })))?.status).toBe(GrpcStatus.PERMISSION_DENIED);
      expect((await refusal(asAdmin.getBalance({ accountId: 'acc_1' }, { credential: 'a-token-nobody-issued-xxxxxxxxxxxxxxxxxx' })))?.status).toBe(GrpcStatus.UNAUTHENTICATED);
      // A client without a credential streams with the call's.
      const received: string[] = [];
      for await (const message of router.chatStream({ chat: undefined, combinedStart: false }, { credential: SERVICE })) {
        if (message.event?.$case === 'delta') received.push(message.event.value.content);
      }
      expect(received).toEqual(['hi']);
    } finally {
      asService.close();
      asAdmin.close();
      router.close();
    }
    expect(handled).toEqual(['topUp', 'chatStream']);
  });

  it('ends a streaming call without a credential with UNAUTHENTICATED and serves it with one', async () => {
    const collect = async (credential?: string) => {
      const client = createClient(RouterServiceClient, RouterServiceService, server.address, { credential });
      const received: string[] = [];
      try {
        for await (const message of client.chatStream({ chat: undefined, combinedStart: false })) {
          if (message.event?.$case === 'delta') received.push(message.event.value.content);
        }
        return { received };
      } catch (error) {
        return { received, error: error as GatewayError };
      } finally {
        client.close();
      }
    };
    const refused = await collect();
    expect(refused.error?.status).toBe(GrpcStatus.UNAUTHENTICATED);
    expect(refused.received).toEqual([]);
    expect(await collect(SERVICE)).toEqual({ received: ['hi'] });
  });

  it('answers health without a credential (kubelet probes and readiness carry none)', async () => {
    const health = createHealthClient(server.address);
    try {
      expect(await health.check('')).toBe('SERVING');
    } finally {
      health.close();
    }
  });
});

describe('internal authentication from the environment', () => {
  const service = 'x'.repeat(32);
  const admin = 'y'.repeat(32);

  it('is required by default: a service with admin RPCs needs both tokens, others only the service token', () => {
    expect(() => internalAuthFromEnv({ GATEWAY_INTERNAL_AUTH: 'required' }, false)).toThrow(ConfigError);
    expect(() => internalAuthFromEnv({ GATEWAY_INTERNAL_AUTH: 'required', GATEWAY_INTERNAL_TOKEN: service }, true)).toThrow(/GATEWAY_ADMIN_TOKEN: required/);
    expect(internalAuthFromEnv({ GATEWAY_INTERNAL_AUTH: 'required', GATEWAY_INTERNAL_TOKEN: service }, false)).toEqual({
      accepted: { service: [service], admin: [] },
      credential: service,
    });
  });

  it('accepts a comma-separated rotation list and sends the first token', () => {
    const next = 'z'.repeat(40);
    expect(internalAuthFromEnv({ GATEWAY_INTERNAL_AUTH: 'required', GATEWAY_INTERNAL_TOKEN: `${next}, ${service}`, GATEWAY_ADMIN_TOKEN: admin }, true)).toEqual({
      accepted: { service: [next, service], admin: [admin] },
      credential: next,
    });
  });

  it('refuses short tokens and an admin token equal to the service token; off turns it off', () => {
    expect(() => internalAuthFromEnv({ GATEWAY_INTERNAL_AUTH: 'required', GATEWAY_INTERNAL_TOKEN: 'short', GATEWAY_ADMIN_TOKEN: admin }, true)).toThrow(/at least 32/);
    expect(() => internalAuthFromEnv({ GATEWAY_INTERNAL_AUTH: 'required', GATEWAY_INTERNAL_TOKEN: service, GATEWAY_ADMIN_TOKEN: service }, true)).toThrow(/must differ/);
    expect(internalAuthFromEnv({ GATEWAY_INTERNAL_AUTH: 'off' }, true)).toBeUndefined();
  });
});
