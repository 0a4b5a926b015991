import pg from 'pg';
import type { DependencyCheck } from '../health.js';

/**
 * Postgres answers `select 1`, on a connection of the check's own: the service's pool may be busy
 * (every connection in use under load is not an outage), and a check queued behind it would flap.
 * The connection is opened on the first check and again after any failure.
 */
export function postgresCheck(url: string, applicationName: string, timeoutMs = 2_000): DependencyCheck {
  let client: pg.Client | undefined;
  let connecting: Promise<pg.Client> | undefined;
  const drop = (broken: pg.Client) => {
    if (client === broken) client = undefined;
    broken.end().catch(() => undefined);
  };
  const connect = async (): Promise<pg.Client> => {
    const fresh = new pg.Client({
      connectionString: url,
      application_name: `${applicationName}-health`,
      connectionTimeoutMillis: timeoutMs,
      query_timeout: timeoutMs,
    });
    // A connection the server drops while idle is reported here; unhandled it would end the process.
    fresh.on('error', () => drop(fresh));
    try {
      await fresh.connect();
    } catch (error) {
      fresh.end().catch(() => undefined);
      throw error;
    }
    client = fresh;
    return fresh;
  };
  return {
    name: 'postgres',
    async check() {
      const connection = client ?? (await (connecting ??= connect().finally(() => { connecting = undefined; })));
      try {
        await connection.query('select 1');
      } catch (error) {
        drop(connection);
        throw error;
      }
    },
    async close() {
      const open = client;
      client = undefined;
      await open?.end().catch(() => undefined);
    },
  };
}
