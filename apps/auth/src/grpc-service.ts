import { auditCallContext, GatewayError, GrpcStatus, unary, type GrpcServiceBinding, type Logger } from '@gateway/platform';
import { AuthServiceService, ErrorReason, type AuthServiceServer } from '@gateway/proto';
import type { AuthStore } from './auth-store.js';
import type { MemberStore } from './member-store.js';
import type { SessionStore } from './session-store.js';

/**
 * Thin gRPC adapter: every handler is one domain call. Requests are never logged (they carry keys).
 * `internalAuth`: whether the server checks internal credentials; without it VerifyAdmin has nothing
 * to verify and refuses rather than vouch for any caller.
 */
export function authServiceBinding(store: AuthStore, sessions: SessionStore, members: MemberStore, logger: Logger, internalAuth = false): GrpcServiceBinding {
  const implementation: AuthServiceServer = {
    // VerifyAdmin is in ADMIN_METHODS: the credential check has already refused anything but an admin token.
    verifyAdmin: unary(logger, 'VerifyAdmin', async () => {
      if (!internalAuth) {
        throw new GatewayError(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_FORBIDDEN, 'this auth service runs without internal authentication: there is no admin credential to verify');
      }
      return {};
    }),
    // Changes carry their caller (x-gateway-actor, x-gateway-source-address, x-request-id) into the audit entry.
    createAccount: unary(logger, 'CreateAccount', (request, call) => store.createAccount(request, auditCallContext(call.metadata, 'admin'))),
    getAccount: unary(logger, 'GetAccount', async (request) => ({ account: await store.getAccount(request.accountId) })),
    listAccounts: unary(logger, 'ListAccounts', (request) => store.listAccounts(request)),
    verifyApiKey: unary(logger, 'VerifyApiKey', (request) => store.verifyApiKey(request.key)),
    verifyProvisioningKey: unary(logger, 'VerifyProvisioningKey', (request) => store.verifyProvisioningKey(request.key)),
    createProvisioningKey: unary(logger, 'CreateProvisioningKey', async (request, call) => {
      const { id, plaintext } = await store.createProvisioningKey(request.accountId, request.name, auditCallContext(call.metadata, 'admin'));
      return { provisioningKeyId: id, provisioningKey: plaintext };
    }),
    createApiKey: unary(logger, 'CreateApiKey', (request, call) => store.createApiKey(request, auditCallContext(call.metadata))),
    listApiKeys: unary(logger, 'ListApiKeys', (request) => store.listApiKeys(request)),
    getApiKey: unary(logger, 'GetApiKey', async (request) => ({ key: await store.getApiKey(request.accountId, request.keyId) })),
    updateApiKey: unary(logger, 'UpdateApiKey', async (request, call) => ({ key: await store.updateApiKey(request, auditCallContext(call.metadata)) })),
    deleteApiKey: unary(logger, 'DeleteApiKey', async (request, call) => {
      await store.deleteApiKey(request.accountId, request.keyId, auditCallContext(call.metadata));
      return { deleted: true };
    }),
    createSession: unary(logger, 'CreateSession', (request) => sessions.createSession(request)),
    verifySession: unary(logger, 'VerifySession', (request) => sessions.verifySession(request.sessionToken)),
    revokeSession: unary(logger, 'RevokeSession', async (request) => ({ revoked: await sessions.revokeSession(request.sessionToken) })),
    listMembers: unary(logger, 'ListMembers', async (request) => ({ members: await members.listMembers(request.accountId) })),
    addMember: unary(logger, 'AddMember', async (request, call) => ({ member: await members.addMember(request, auditCallContext(call.metadata)) })),
    updateMember: unary(logger, 'UpdateMember', async (request, call) => {
      const updated = await members.updateMember(request, auditCallContext(call.metadata));
      return { member: updated.member, sessionsRevoked: updated.sessionsRevoked };
    }),
    removeMember: unary(logger, 'RemoveMember', async (request, call) => {
      const removed = await members.removeMember(request, auditCallContext(call.metadata));
      return { removed: true, sessionsRevoked: removed.sessionsRevoked };
    }),
    resolveMemberships: unary(logger, 'ResolveMemberships', async (request, call) => ({ memberships: await members.resolveMemberships(request, auditCallContext(call.metadata)) })),
    listAuthAuditEntries: unary(logger, 'ListAuthAuditEntries', (request) => store.listAuditEntries(request)),
    readAuthAuditChain: unary(logger, 'ReadAuthAuditChain', (request) => store.readAuditChain(request)),
  };
  return { definition: AuthServiceService, implementation, name: 'gateway.v1.AuthService' };
}
