import { createHash, timingSafeEqual } from 'node:crypto';
import {
  ServerInterceptingCall,
  status,
  type Metadata,
  type ServerInterceptor,
  type sendUnaryData,
  type ServerUnaryCall,
  type ServiceDefinition,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import type { Logger } from 'pino';
import {
  AuthServiceService,
  CatalogServiceService,
  ErrorReason,
  LedgerServiceService,
} from '@gateway/proto';
import { GatewayError } from './errors.js';

/** The metadata entry every internal call carries its credential in. */
export const CREDENTIAL_METADATA = 'x-gateway-credential';

/**
 * RPCs only the operator's admin credential may call: they create accounts or money, list every
 * account, replace the catalog, or read the whole journal. Everything else is a service-to-service
 * call any holder of the service credential may make.
 */
export const ADMIN_METHODS: ReadonlySet<string> = new Set([
  AuthServiceService.createAccount.path,
  AuthServiceService.listAccounts.path,
  AuthServiceService.createProvisioningKey.path,
  // Answers only whether the caller holds the admin credential (the edge's /v1/admin/ routes ask it).
  AuthServiceService.verifyAdmin.path,
  // Every account's audit entries, with their hashes (gatewayctl audit verify, GET /v1/admin/audit).
  AuthServiceService.readAuthAuditChain.path,
  LedgerServiceService.readLedgerAuditChain.path,
  CatalogServiceService.readCatalogAuditChain.path,
  LedgerServiceService.topUp.path,
  LedgerServiceService.verifyJournal.path,
  // Reads every account's generation records.
  LedgerServiceService.getModelLatency.path,
  CatalogServiceService.loadCatalog.path,
]);

/** What a server accepts: several tokens of each kind may be valid at once (during a rotation). */
export interface InternalCredentials {
  /** Held by every service (edge, routing, …): any non-admin RPC. */
  service: readonly string[];
  /**
   * Held by the operator (gatewayctl, npm start's dev account set-up): every RPC. Only the services
   * that have admin RPCs (auth, ledger, catalog) need it; elsewhere it may be empty.
   */
  admin: readonly string[];
}

/** A process's internal authentication: what its servers accept and what its clients present. */
export interface InternalAuth {
  accepted: InternalCredentials;
  /** Sent by this process's clients (a service token; gatewayctl sends an admin token). */
  credential: string;
}

const digest = (token: string) => createHash('sha256').update(token).digest();

/** Which kind of credential a call carries: compared as digests in constant time, every token tried. */
export class CredentialCheck {
  private readonly service: Buffer[];
  private readonly admin: Buffer[];

  constructor(credentials: InternalCredentials) {
    if (credentials.service.length === 0) throw new Error('internal authentication needs at least one service token');
    this.service = credentials.service.map(digest);
    this.admin = credentials.admin.map(digest);
  }

  kind(metadata: Metadata): 'admin' | 'service' | undefined {
    const presented = metadata.get(CREDENTIAL_METADATA)[0];
    if (typeof presented !== 'string' || presented.length === 0 || presented.length > 512) return undefined;
    const seen = digest(presented);
    let kind: 'admin' | 'service' | undefined;
    for (const known of this.admin) if (timingSafeEqual(seen, known)) kind = 'admin';
    for (const known of this.service) if (timingSafeEqual(seen, known)) kind ??= 'service';
    return kind;
  }

  /** Why a call to `path` with this metadata is refused, or undefined when it may proceed. */
  refusal(path: string, metadata: Metadata): GatewayError | undefined {
    const kind = this.kind(metadata);
    if (kind === undefined) {
      return new GatewayError(status.UNAUTHENTICATED, ErrorReason.ERROR_REASON_FORBIDDEN, `${path} needs an internal credential (${CREDENTIAL_METADATA} metadata)`);
    }
    if (kind === 'service' && ADMIN_METHODS.has(path)) {
      return new GatewayError(status.PERMISSION_DENIED, ErrorReason.ERROR_REASON_FORBIDDEN, `${path} needs the admin credential`);
    }
    return undefined;
  }
}

/**
 * The credential check as a server interceptor: it runs on the call's metadata, before grpc-js reads a
 * byte of the request message, so a refused call never has its message received or decoded (a handler
 * wrapper would only run after the whole message was read and decoded). `paths`: the methods checked
 * (health and reflection are not).
 */
export function credentialInterceptor(paths: ReadonlySet<string>, check: CredentialCheck, logger: Logger): ServerInterceptor {
  return (method, call) => {
    if (!paths.has(method.path)) return new ServerInterceptingCall(call);
    return new ServerInterceptingCall(call, {
      start: (next) => {
        next({
          onReceiveMetadata: (metadata, nextMetadata) => {
            const refused = check.refusal(method.path, metadata);
            if (!refused) {
              nextMetadata(metadata);
              return;
            }
            logger.warn({ method: method.path, peer: call.getPeer(), code: refused.status }, 'internal call refused');
            call.sendStatus(refused.toStatusObject());
          },
        });
      },
    });
  };
}

type AnyCall = ServerUnaryCall<unknown, unknown> & { emit(event: 'error', error: unknown): boolean };
type AnyHandler = (call: AnyCall, callback?: sendUnaryData<unknown>) => void;

/**
 * The implementation with every method behind the credential check. A refused call never reaches the
 * handler: unary and client-streaming calls are answered with the status, streaming ones end with it.
 */
export function guardImplementation(
  definition: ServiceDefinition,
  implementation: UntypedServiceImplementation,
  check: CredentialCheck,
  logger: Logger,
): UntypedServiceImplementation {
  const guarded: UntypedServiceImplementation = {};
  for (const [name, method] of Object.entries(definition)) {
    const handler = implementation[name] as AnyHandler | undefined;
    if (!handler) continue;
    const answersWithCallback = !method.responseStream;
    const wrapped: AnyHandler = (call, callback) => {
      const refused = check.refusal(method.path, call.metadata);
      if (!refused) return handler(call, callback);
      logger.warn({ method: method.path, peer: call.getPeer(), code: refused.status }, 'internal call refused');
      if (answersWithCallback) callback?.(refused.toStatusObject());
      else call.emit('error', refused.toStatusObject());
    };
    guarded[name] = wrapped as UntypedServiceImplementation[string];
  }
  return guarded;
}
