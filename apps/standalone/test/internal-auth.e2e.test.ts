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

/** For each service: one RPC made with `credential`, and what the handler answers when the call gets through. */
const probes: Record<ServiceApp, { expected: string; call: (address: string, credential: string | undefined) => Promise<string> }> = {
  auth: {
    // An unknown key of an unknown account: the handler's NOT_FOUND.
    expected: 'NOT_FOUND',
    call: async (address, credential) => {
      const client = createClient(AuthServiceClient, AuthServiceService, address, { credential, maxAttempts: 1 });
      try {
        return await outcome(() => client.getApiKey({ accountId: 'acc_nobody', keyId: 'key_nobody' }));
      } finally {
        client.close();
      }
    },
  },
  catalog: {
    expected: 'OK',
    call: async (address, credential) => {
      const client = createClient(CatalogServiceClient, CatalogServiceService, address, { credential, maxAttempts: 1 });
      try {
        return await outcome(async () => expect((await client.listModels({})).models.length).toBeGreaterThan(0));
      } finally {
        client.close();
      }
    },
  },
  ledger: {
    // An account the ledger never saw has a zero balance.
    expected: 'OK',
    call: async (address, credential) => {
      const client = createClient(LedgerServiceClient, LedgerServiceService, address, { credential, maxAttempts: 1 });
      try {
        return await outcome(async () => expect((await client.getBalance({ accountId: 'acc_nobody' })).balance).toBe('0'));
      } finally {
        client.close();
      }
    },
  },
  routing: {
    // Embeddings of a model the catalog does not have: the router's INVALID_ARGUMENT ("does not exist").
    expected: 'INVALID_ARGUMENT',
    call: async (address, credential) => {
      const client = createClient(RouterServiceClient, RouterServiceService, address, { credential, maxAttempts: 1 });
      try {
        return await outcome(() => client.embed({
          context: { requestId: 'req_internal_auth', accountId: 'acc_nobody', keyId: 'key_nobody' },
          modelId: 'nobody/no-such-model', routingStrategy: '', texts: ['hello'], tokenInputs: [],
        }));
      } finally {
        client.close();
      }
    },
  },
  media: {
    // An image id that was never stored: the store's NOT_FOUND.
    expected: 'NOT_FOUND',
    call: async (address, credential) => {
      const client = createClient(MediaServiceClient, MediaServiceService, address, { credential, maxAttempts: 1 });
      try {
        return await outcome(() => client.getImage({ imageId: 'img_nothing_stored_here_0000' }));
      } finally {
        client.close();
      }
    },
  },
  jobs: {
    // A file id that was never stored: the Files API's NOT_FOUND.
    expected: 'NOT_FOUND',
    call: async (address, credential) => {
      const client = createClient(JobsServiceClient, JobsServiceService, address, { credential, maxAttempts: 1 });
      try {
        return await outcome(() => client.getFile({ accountId: 'acc_nobody', fileId: 'file-000000000000000000000000' }));
      } finally {
        client.close();
      }
    },
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
