import { unary, type GrpcServiceBinding, type Logger } from '@gateway/platform';
import { AuthServiceService, type AuthServiceServer } from '@gateway/proto';
import type { AuthStore } from './auth-store.js';

/** Thin gRPC adapter: every handler is one domain call. Requests are never logged (they carry keys). */
export function authServiceBinding(store: AuthStore, logger: Logger): GrpcServiceBinding {
  const implementation: AuthServiceServer = {
    createAccount: unary(logger, 'CreateAccount', (request) => store.createAccount(request)),
    getAccount: unary(logger, 'GetAccount', async (request) => ({ account: await store.getAccount(request.accountId) })),
    listAccounts: unary(logger, 'ListAccounts', (request) => store.listAccounts(request)),
    verifyApiKey: unary(logger, 'VerifyApiKey', (request) => store.verifyApiKey(request.key)),
    verifyProvisioningKey: unary(logger, 'VerifyProvisioningKey', (request) => store.verifyProvisioningKey(request.key)),
    createProvisioningKey: unary(logger, 'CreateProvisioningKey', async (request) => {
      const { id, plaintext } = await store.createProvisioningKey(request.accountId, request.name);
      return { provisioningKeyId: id, provisioningKey: plaintext };
    }),
    createApiKey: unary(logger, 'CreateApiKey', (request) => store.createApiKey(request)),
    listApiKeys: unary(logger, 'ListApiKeys', (request) => store.listApiKeys(request)),
    getApiKey: unary(logger, 'GetApiKey', async (request) => ({ key: await store.getApiKey(request.accountId, request.keyId) })),
    updateApiKey: unary(logger, 'UpdateApiKey', async (request) => ({ key: await store.updateApiKey(request) })),
    deleteApiKey: unary(logger, 'DeleteApiKey', async (request) => {
      await store.deleteApiKey(request.accountId, request.keyId);
      return { deleted: true };
    }),
  };
  return { definition: AuthServiceService, implementation, name: 'gateway.v1.AuthService' };
}
