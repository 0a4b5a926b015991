import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { createLogger, InProcessEventBus, NatsEventBus, type EventBus, type Logger } from '@gateway/platform';

/** The machine's Postgres and NATS (DEVELOPERS.md): env first, then the local defaults. */
export const postgresAdminUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const natsUrl = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

export function testLogger(name = 'test'): Logger {
  return createLogger(name, process.env.TEST_LOG_LEVEL ?? 'silent');
}

export function uniqueName(prefix: string): string {
  return `${prefix}_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
}

export interface TestDatabase {
  url: string;
  name: string;
  drop(): Promise<void>;
}

/** A fresh database per test file, so parallel runs never collide; dropped afterwards. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = uniqueName('gw_test').toLowerCase();
  const admin = new pg.Client({ connectionString: postgresAdminUrl });
  await admin.connect();
  try {
    await admin.query(`create database "${name}"`);
  } finally {
    await admin.end();
  }
  const url = new URL(postgresAdminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    drop: async () => {
      const client = new pg.Client({ connectionString: postgresAdminUrl });
      await client.connect();
      try {
        await client.query(`drop database if exists "${name}" with (force)`);
      } finally {
        await client.end();
      }
    },
  };
}

export interface TestBus {
  bus: EventBus;
  /** The NATS namespace (empty for the in-process bus); services of one test share it. */
  namespace: string;
  /** Opens another connection on the same namespace (a second replica, a restarted service). */
  connectAnother(): Promise<EventBus>;
  destroy(): Promise<void>;
}

/**
 * A bus isolated to this test: its own JetStream stream (namespace) on the machine's NATS, or
 * in-process (`memory-journal`: with its journal in a temp directory, as `npm start` runs it).
 */
export async function createTestBus(kind: 'nats' | 'memory' | 'memory-journal' = 'nats'): Promise<TestBus> {
  const logger = testLogger('bus');
  if (kind === 'memory' || kind === 'memory-journal') {
    const journalDirectory = kind === 'memory-journal' ? await mkdtemp(join(tmpdir(), 'bus-journal-')) : undefined;
    const bus = await InProcessEventBus.open(logger, { journalDirectory });
    return {
      bus,
      namespace: '',
      connectAnother: async () => bus,
      destroy: async () => {
        await bus.close();
        if (journalDirectory) await rm(journalDirectory, { recursive: true, force: true });
      },
    };
  }
  const namespace = uniqueName('t').replaceAll('_', '-');
  const bus = await NatsEventBus.connect(natsUrl, logger, { namespace });
  const others: EventBus[] = [];
  return {
    bus,
    namespace,
    connectAnother: async () => {
      const other = await NatsEventBus.connect(natsUrl, logger, { namespace });
      others.push(other);
      return other;
    },
    destroy: async () => {
      for (const other of others) await other.close().catch(() => undefined);
      await bus.destroyStream();
      await bus.close();
    },
  };
}

/** Polls until the check passes or the time is up (then throws the check's last error). */
export async function eventually<T>(check: () => Promise<T> | T, timeoutMs = 5_000, intervalMs = 25): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, intervalMs));
    }
  }
}

/**
 * Internal gRPC credentials for tests that run service binaries (which refuse to start without them):
 * every service gets the service token; auth, ledger and catalog also the admin token, and so does
 * gatewayctl's env.
 */
export const TEST_INTERNAL_TOKEN = 'test-internal-service-token-0123456789abcdef';
export const TEST_ADMIN_TOKEN = 'test-internal-admin-token-0123456789abcdef0';
export const testInternalAuthEnv = { GATEWAY_INTERNAL_TOKEN: TEST_INTERNAL_TOKEN, GATEWAY_ADMIN_TOKEN: TEST_ADMIN_TOKEN } as const;
