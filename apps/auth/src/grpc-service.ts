import { GatewayError, GrpcStatus, unary, type GrpcServiceBinding, type Logger } from '@gateway/platform';
import { AuthServiceService, ErrorReason, type AuthServiceServer } from '@gateway/proto';
import type { AuthStore } from './auth-store.js';
import type { SessionStore } from './session-store.js';

/**
 * Thin gRPC adapter: every handler is one domain call. Requests are never logged (they carry keys).
 * `internalAuth`: whether the server checks internal credentials; without it VerifyAdmin has nothing
 * to verify and refuses rather than vouch for any caller.
 */
export function authServiceBinding(store: AuthStore, sessions: SessionStore, logger: Logger, internalAuth = false): GrpcServiceBinding {
  const implementation: AuthServiceServer = {
    // VerifyAdmin is in ADMIN_METHODS: the credential check has already refused anything but an admin token.
    verifyAdmin: unary(logger, 'VerifyAdmin', async () => {
      if (!internalAuth) {
        throw new GatewayError(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_FORBIDDEN, 'this auth service runs without internal authentication: there is no admin credential to verify');
      }
      return {};
    }),
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
    createSession: unary(logger, 'CreateSession', (request) => sessions.createSession(request)),
    verifySession: unary(logger, 'VerifySession', (request) => sessions.verifySession(request.sessionToken)),
    revokeSession: unary(logger, 'RevokeSession', async (request) => ({ revoked: await sessions.revokeSession(request.sessionToken) })),
  };
  return { definition: AuthServiceService, implementation, name: 'gateway.v1.AuthService' };
}
