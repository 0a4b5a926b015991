import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, GatewayError, GrpcStatus } from '@gateway/platform';
import {
  AuthServiceClient, AuthServiceService, CatalogServiceClient, CatalogServiceService, LedgerServiceClient, LedgerServiceService,
  JobsServiceClient, JobsServiceService, MediaServiceClient, MediaServiceService, RouterServiceClient, RouterServiceService,
} from '@gateway/proto';
import { TEST_INTERNAL_TOKEN } from '@gateway/testing';
import { startStandaloneProcessStack, type ProcessStack, type ServiceApp, type StandaloneProcessStack } from './process-stack.js';

// Internal authentication over the wire, for every gRPC service as deployed (each app its own process,
// its tokens from the environment): a pod that reaches a service's port without the service token is
// refused before any handler runs, whichever service it is. One cheap RPC per service, three ways: no
// credential, a wrong one, the right one (which reaches the handler: its own answer, never a refusal).

const WRONG_TOKEN = 'not-the-internal-service-token-0123456789abcdef';

/** The status name a call ends with: 'OK', or its gRPC status. */
async function outcome(call: () => Promise<unknown>): Promise<string> {
  return call().then(
    () => 'OK',
    (error: unknown) => (error instanceof GatewayError ? GrpcStatus[error.status]! : `not a GatewayError: ${String(error)}`),
  );
}

/** The outcome of `call` on `client` (a client of one attempt, made for this call), the client closed after. */
async function outcomeOn<Client extends { close(): void }>(client: Client, call: (client: Client) => Promise<unknown>): Promise<string> {
  try {
    return await outcome(() => call(client));
  } finally {
    client.close();
  }
}

/** For each service: one RPC made with `credential`, and what the handler answers when the call gets through. */
const probes: Record<ServiceApp, { expected: string; call: (address: string, credential: string | undefined) => Promise<string> }> = {
  auth: {
    // An unknown key of an unknown account: the handler's NOT_FOUND.
    expected: 'NOT_FOUND',
    call: (address, credential) =>
      outcomeOn(createClient(AuthServiceClient, AuthServiceService, address, { credential, maxAttempts: 1 }), (client) => client.getApiKey({ accountId: 'acc_nobody', keyId: 'key_nobody' })),
  },
  catalog: {
    expected: 'OK',
    call: (address, credential) =>
      outcomeOn(createClient(CatalogServiceClient, CatalogServiceService, address, { credential, maxAttempts: 1 }), async (client) => expect((await client.listModels({})).models.length).toBeGreaterThan(0)),
  },
  ledger: {
    // An account the ledger never saw has a zero balance.
    expected: 'OK',
    call: (address, credential) =>
      outcomeOn(createClient(LedgerServiceClient, LedgerServiceService, address, { credential, maxAttempts: 1 }), async (client) => expect((await client.getBalance({ accountId: 'acc_nobody' })).balance).toBe('0')),
  },
  routing: {
    // Embeddings of a model the catalog does not have: the router's INVALID_ARGUMENT ("does not exist").
    expected: 'INVALID_ARGUMENT',
    call: (address, credential) =>
      outcomeOn(createClient(RouterServiceClient, RouterServiceService, address, { credential, maxAttempts: 1 }), (client) => client.embed({
        context: { requestId: 'req_internal_auth', accountId: 'acc_nobody', keyId: 'key_nobody' },
        modelId: 'nobody/no-such-model', routingStrategy: '', texts: ['hello'], tokenInputs: [],
      })),
  },
  media: {
    // An image id that was never stored: the store's NOT_FOUND.
    expected: 'NOT_FOUND',
    call: (address, credential) =>
      outcomeOn(createClient(MediaServiceClient, MediaServiceService, address, { credential, maxAttempts: 1 }), (client) => client.getImage({ imageId: 'img_nothing_stored_here_0000' })),
  },
  jobs: {
    // A file id that was never stored: the Files API's NOT_FOUND.
    expected: 'NOT_FOUND',
    call: (address, credential) =>
      outcomeOn(createClient(JobsServiceClient, JobsServiceService, address, { credential, maxAttempts: 1 }), (client) => client.getFile({ accountId: 'acc_nobody', fileId: 'file-000000000000000000000000' })),
  },
};

describe('internal gRPC authentication on every service, over the wire', () => {
  let standalone: StandaloneProcessStack;
  let stack: ProcessStack;

  beforeAll(async () => {
    standalone = await startStandaloneProcessStack();
    stack = standalone.stack;
  }, 120_000);

  afterAll(async () => {
    await standalone?.stop();
  }, 30_000);

  it.each(Object.keys(probes) as ServiceApp[])('%s: no credential and a wrong one are UNAUTHENTICATED; the service token reaches the handler', async (app) => {
    const address = stack.addresses[app];
    const probe = probes[app];
    expect(await probe.call(address, undefined)).toBe('UNAUTHENTICATED');
    expect(await probe.call(address, WRONG_TOKEN)).toBe('UNAUTHENTICATED');
    expect(await probe.call(address, TEST_INTERNAL_TOKEN)).toBe(probe.expected);
  });
});
