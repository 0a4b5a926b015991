import {
  busCheck, startGrpcServer, subjects, type EventBus, type Logger, type Registry, type InternalAuth,
} from '@gateway/platform';
import { createDatabase, migrate, postgresCheck, startAccountEventRelay } from '@gateway/platform/db';
import { KeysChanged } from '@gateway/proto';
import { AuthStore, type KeyChangeListener } from './auth-store.js';
import { authServiceBinding } from './grpc-service.js';
import { MemberStore } from './member-store.js';
import { SessionStore } from './session-store.js';
import { KeyHasher } from './key-format.js';
import { AUTH_SCHEMA, authMigrations, type AuthDatabase } from './schema.js';

export { AuthStore, defaultAuthStoreLimits, type AuthStoreLimits, type KeyChangeListener } from './auth-store.js';
export { generateKey, isWellFormedKey, keyChecksum, keyLabel, keyLength, keyPrefixes, KeyHasher, type KeyKind } from './key-format.js';
export { MemberStore, MEMBERS_PER_ACCOUNT_MAX, MEMBERSHIPS_PER_PERSON_MAX } from './member-store.js';
export { isWellFormedSessionToken, SessionStore, SESSION_TTL_MAX_SECONDS, SESSION_TTL_MIN_SECONDS, SESSIONS_PER_SUBJECT_MAX } from './session-store.js';
export { AUTH_SCHEMA, authMigrations, type AuthDatabase } from './schema.js';
export { ROUTING_STRATEGIES, TIERS, DEFAULT_TIER } from './validation.js';

export interface AuthServiceOptions {
  /** host:port; port 0 picks a free one (the bound address is returned). */
  listenAddress: string;
  databaseUrl: string;
  bus: EventBus;
  logger: Logger;
  /** HMAC secret for key hashes, at least 32 characters. Changing it invalidates every key. */
  keyHashSecret: string;
  /** The process's metrics registry (Postgres pool, dependency health). */
  metrics?: Registry;
  /** Postgres connections at most (default 10). */
  maxConnections?: number;
  /** Internal gRPC authentication: what its server accepts and its clients send. Unset: unchecked. */
  internalAuth?: InternalAuth;
  /**
   * Key events for webhooks (docs/governance.md "Webhooks"): how often the outbox relay reads the outbox
   * when no change woke it (default 1 s), and how often expired keys are looked for (default 10 s).
   */
  events?: { relayIntervalMs?: number; expirySweepIntervalMs?: number };
}

export interface RunningAuthService {
  address: string;
  stop(): Promise<void>;
}

/** Publishes KeysChanged on the broadcast subject; best effort (edge caches also expire by TTL). */
export function busKeyChangeListener(bus: EventBus, logger: Logger): KeyChangeListener {
  return {
    keysChanged(accountId, keyIds) {
      try {
        bus.broadcast(subjects.keysChanged, KeysChanged.encode({ accountId, keyIds: [...keyIds] }).finish());
      } catch (error) {
        logger.warn({ err: error, accountId, keyIds }, 'could not broadcast KeysChanged');
      }
    },
  };
}

/** Announces expired keys every `intervalMs` (api_key.expired), then wakes the relay when it did. */
function startKeyExpirySweeper(store: AuthStore, relay: { wake(): void }, logger: Logger, intervalMs: number) {
  let running: Promise<void> | null = null;
  const sweep = () => {
    running ??= (async () => {
      try {
        let announced = 0;
        for (let found = await store.announceExpiredKeys(); found > 0; found = await store.announceExpiredKeys()) announced += found;
        if (announced > 0) relay.wake();
      } catch (error) {
        logger.warn({ err: error }, 'expired keys not announced yet; tried again next round');
      } finally {
        running = null;
      }
    })();
  };
  const timer = setInterval(sweep, intervalMs);
  timer.unref();
  sweep();
  return { stop: async () => { clearInterval(timer); await running; } };
}

export async function startAuthService(options: AuthServiceOptions): Promise<RunningAuthService> {
  const hasher = new KeyHasher(options.keyHashSecret);
  const db = createDatabase<AuthDatabase>(
    { url: options.databaseUrl, schema: AUTH_SCHEMA, applicationName: 'auth', maxConnections: options.maxConnections ?? 10, ...(options.metrics ? { metrics: options.metrics } : {}) },
    options.logger,
  );
  let stopRelay = async () => undefined as void;
  let stopExpiry = async () => undefined as void;
  try {
    await migrate(db, AUTH_SCHEMA, authMigrations, options.logger);
    const relay = startAccountEventRelay(db, options.bus, options.logger, { intervalMs: options.events?.relayIntervalMs });
    stopRelay = () => relay.stop();
    const broadcast = busKeyChangeListener(options.bus, options.logger);
    const store = new AuthStore(db, hasher, { keysChanged: (accountId, keyIds) => broadcast.keysChanged(accountId, keyIds), eventsWritten: () => relay.wake() });
    const expiry = startKeyExpirySweeper(store, relay, options.logger, options.events?.expirySweepIntervalMs ?? 10_000);
    stopExpiry = () => expiry.stop();
    const server = await startGrpcServer({
      credentials: options.internalAuth?.accepted,
      address: options.listenAddress,
      services: [authServiceBinding(store, new SessionStore(db), new MemberStore(db), options.logger, options.internalAuth !== undefined)],
      logger: options.logger,
      dependencies: [postgresCheck(options.databaseUrl, 'auth'), busCheck(options.bus)],
      ...(options.metrics ? { metrics: options.metrics } : {}),
    });
    return {
      address: server.address,
      stop: async () => {
        await server.stop();
        await stopExpiry();
        await stopRelay();
        await db.destroy();
      },
    };
  } catch (error) {
    await stopExpiry().catch(() => undefined);
    await stopRelay().catch(() => undefined);
    await db.destroy().catch(() => undefined);
    throw error;
  }
}
